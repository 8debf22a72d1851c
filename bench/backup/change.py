#!/usr/bin/env python3
"""The change between a backup and the next, the same for every tool: of the regular files
under DIR, sorted by path, every 100th gets 4 KiB of new random bytes appended, every 250th
is rewritten in place in its middle (64 KiB or the file), every 500th is removed, and 50 new
files of 64 KiB appear in a new directory. Deterministic. Usage: change.py DIR"""
import os
import random
import sys

root = sys.argv[1]
rng = random.Random(7)
files = sorted(
    os.path.join(d, f)
    for d, _, names in os.walk(root)
    for f in names
    if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f))
)
for i, p in enumerate(files):
    if i % 500 == 499:
        os.remove(p)
    elif i % 250 == 249:
        size = os.path.getsize(p)
        n = min(size, 64 << 10)
        with open(p, "r+b") as f:
            f.seek(max(0, size // 2 - n // 2))
            f.write(rng.randbytes(n))
    elif i % 100 == 99:
        with open(p, "ab") as f:
            f.write(rng.randbytes(4096))
new = os.path.join(root, "new-since-last-backup")
os.makedirs(new, exist_ok=True)
for i in range(50):
    with open(os.path.join(new, f"f{i}"), "wb") as f:
        f.write(rng.randbytes(64 << 10))
