#!/usr/bin/env python3
"""A backup corpus: N small files (1-16 KiB) in 1000 directories plus a few large files,
half of the bytes compressible (repeated text), half random. Deterministic for a seed.
Usage: corpus.py DIR [small_files] [large_mib_each] [large_count]"""
import os
import random
import sys

root = sys.argv[1]
n_small = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
large_mib = int(sys.argv[3]) if len(sys.argv) > 3 else 400
n_large = int(sys.argv[4]) if len(sys.argv) > 4 else 3
rng = random.Random(42)
text = b"".join(b"row %d: the quick brown fox jumps over the lazy dog; " % i for i in range(400))
noise = os.urandom(1 << 20)


def body(n: int) -> bytes:
    """n bytes, the first half random, the second repetitive."""
    half = n // 2
    out = bytearray()
    while len(out) < half:
        off = rng.randrange(0, len(noise) - 4096)
        out += noise[off : off + min(4096, half - len(out))]
    while len(out) < n:
        out += text[: n - len(out)]
    return bytes(out)


for d in range(1000):
    os.makedirs(os.path.join(root, "small", f"d{d:03}"), exist_ok=True)
for i in range(n_small):
    with open(os.path.join(root, "small", f"d{i % 1000:03}", f"f{i}.dat"), "wb") as f:
        f.write(body(rng.randrange(1024, 16384)))
os.makedirs(os.path.join(root, "large"), exist_ok=True)
for j in range(n_large):
    with open(os.path.join(root, "large", f"big{j}.bin"), "wb") as f:
        for _ in range(large_mib):
            # Fresh random half per MiB: large files do not dedup against themselves.
            f.write(os.urandom(1 << 19) + text * ((1 << 19) // len(text)) + text[: (1 << 19) % len(text)])
