#!/usr/bin/env python3
"""Where a transfer's time went, from a log bench/ab.sh kept with FERRY_LOG=ferry_transfer=trace.

   bench/timeline.py LOGS/ferry.up.1.err [--mbps LINK]

Prints, in seconds from the process's start: each request that is not a block (head, start,
complete), the span blocks were on the wire, the tuner's decisions, and the link's use per
second (bytes of blocks that ended, spread over their span; LINK in MB/s gives the fraction).
"""
import re
import sys
from datetime import datetime

REQ = re.compile(r"^(\S+)\s+TRACE .*request what=(.*) bytes=(\d+) ms=(\d+) ok=(\w+)")
TUNER = re.compile(r"^(\S+)\s+DEBUG .*?(tuner start|tuner|retrying)(.*)$")


def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def main():
    path = sys.argv[1]
    link = float(sys.argv[sys.argv.index("--mbps") + 1]) if "--mbps" in sys.argv else None
    start = end = None
    reqs, events = [], []
    for line in open(path, errors="replace"):
        if line.startswith("start "):
            start = float(line.split()[1])
        elif line.startswith("end "):
            end = float(line.split()[1])
        elif m := REQ.match(line):
            t = ts(m[1])
            reqs.append((t - int(m[4]) / 1000, t, m[2], int(m[3]), m[5] == "true"))
        elif m := TUNER.match(line):
            events.append((ts(m[1]), m[2] + m[3]))
    if not reqs:
        sys.exit(f"{path}: no request spans (FERRY_LOG=ferry_transfer=trace?)")
    t0 = start or min(r[0] for r in reqs)
    # The blocks that crossed the link: writes on an upload, reads on a download (the other
    # side's are local disk).
    blocks = [r for r in reqs if " block " in r[2]]
    kinds = {r[2].split()[0] for r in blocks}
    if len(kinds) > 1:
        slow = max(kinds, key=lambda k: sum(r[1] - r[0] for r in blocks if r[2].startswith(k)))
        blocks = [r for r in blocks if r[2].startswith(slow)]
    for a, b, what, n, ok in sorted(reqs):
        if " block " not in what:
            print(f"{a - t0:7.3f} {b - t0:7.3f}  {what} ({n} B){'' if ok else ' FAILED'}")
    if blocks:
        a = min(r[0] for r in blocks) - t0
        b = max(r[1] for r in blocks) - t0
        total = sum(r[3] for r in blocks if r[4])
        print(f"{a:7.3f} {b:7.3f}  {len(blocks)} block requests, {total / 1e6:.1f} MB,"
              f" {total / 1e6 / (b - a):.1f} MB/s over their span")
        per = {}
        for s, e, _, n, ok in blocks:
            if not ok or e <= s:
                continue
            rate = n / (e - s)
            sec = int(s - t0)
            while sec < e - t0:
                lo, hi = max(s - t0, sec), min(e - t0, sec + 1)
                per[sec] = per.get(sec, 0) + rate * (hi - lo)
                sec += 1
        line = " ".join(f"{v / 1e6:.0f}" + (f"({v / 1e6 / link:.2f})" if link else "")
                        for _, v in sorted(per.items()))
        print(f"MB per second: {line}")
        conc = sorted([(r[0] - t0, 1) for r in blocks] + [(r[1] - t0, -1) for r in blocks])
        n, peak = 0, 0
        for _, d in conc:
            n += d
            peak = max(peak, n)
        print(f"blocks in flight at most: {peak}")
    for t, what in events:
        print(f"{t - t0:7.3f}          {what.strip()}")
    if end:
        print(f"{end - t0:7.3f}          process ended")


if __name__ == "__main__":
    main()
