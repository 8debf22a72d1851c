#!/usr/bin/env python3
"""Where a request to the store spends its time, hop by hop, second by second.

  hops.py RESULTS.json HOPS_DIR [BIN_SECONDS]

RESULTS is drive.py's per-run JSON (`OUT`'s -logs dir), for the phases and the WAL pushes'
own times; HOPS_DIR holds ferry-connect-delay's traces (`HOPS_TRACE=DIR bench/serve.sh`).
`delay-s3.trace` is the proxy after the up link's shaper and before toxiproxy (`edge`);
`delay-store.trace` one between toxiproxy and MinIO (`store`); `delay-ferry.trace` one
between the clients and ferry serve (`front`, in the summary at the end only: TLS). For each request (a message
up, then the answer down on the same connection) a proxy sees:

  send    first byte in -> last byte handed on (at the edge: the shaper, then toxiproxy
          taking the body into its buffers, about 35 ms for 1 MiB; at the store: toxiproxy
          delivering it at the per-connection rate, 1 MiB at 8 MB/s is 131 ms)
  answer  last byte handed on -> first byte of the answer back (at the edge: the round
          trip, 80 ms on wan, plus what toxiproxy still holds, plus the store's time; at the
          store: MinIO's own time, its hop being off the shapers)

The spans overlap: the edge's answer contains the store's send and answer. Pairing a message
up with the next one down holds for plain HTTP/1 (the bench's MinIO); over TLS a session
ticket sent down mid-request would split the request in two.

Requests are told apart by size: `wal` carries 1 MiB (a WAL push's PUT), `small` under
64 KiB (GET, HEAD, LIST and the like), `bulk` the rest. One line per bin: the WAL pushes
that started in it and how many of them were slow (over twice the unloaded median), then per
class the requests whose first byte came in it, with the median and the largest send and
answer in ms.
"""
import json
import os
import statistics
import sys
from collections import defaultdict

WAL = 1 << 20


def messages(path):
    """A trace's messages per connection, in order: (up|down, first read, last read, last
    written, bytes)."""
    msgs = defaultdict(list)
    for line in open(path):
        f = line.split()
        if f[0] == "msg":
            msgs[f[1]].append((f[2], float(f[3]), float(f[4]), float(f[5]), int(f[6])))
    return msgs


def is_wal(size):
    """A WAL push's body: 1 MiB and headers, plain or in TLS records (about 1 % more)."""
    return WAL <= size < WAL + WAL // 32


def requests(msgs):
    """(class, first byte in, send, answer) of each message up answered by one down."""
    out = []
    for seq in msgs.values():
        for m, nxt in zip(seq, seq[1:] + [None]):
            if m[0] != "up" or nxt is None or nxt[0] != "down":
                continue
            _, first, _, written, size = m
            cls = "wal" if is_wal(size) else "small" if size < 65536 else "bulk"
            out.append((cls, first, written - first, nxt[1] - written))
    return out


COLUMNS = [("edge", "wal"), ("store", "wal"), ("store", "small"), ("store", "bulk")]
TRACES = (("front", "delay-ferry.trace"), ("edge", "delay-s3.trace"), ("store", "delay-store.trace"))


def summary(path, t0, flood, end):
    """Per phase, the WAL-sized requests through one proxy: how long their bytes took to come
    in (the sender's pace), how long the last write waited after the last read (the
    receiver's), and the answer; p50 / p99 / max in ms."""
    msgs = messages(path)
    q = lambda xs, p: sorted(xs)[max(0, int(p * len(xs)) - 1)]
    for phase, (a, b) in (("alone", (t0 + 5, flood)), ("flood", (flood, end))):
        come, wait, answer = [], [], []
        for seq in msgs.values():
            for m, nxt in zip(seq, seq[1:] + [None]):
                if m[0] == "up" and is_wal(m[4]) and a <= m[1] < b:
                    come.append(1000 * (m[2] - m[1]))
                    wait.append(1000 * (m[3] - m[2]))
                    if nxt is not None and nxt[0] == "down":
                        answer.append(1000 * (nxt[1] - m[3]))
        if not come:
            continue
        f = lambda xs: "%4.0f %4.0f %4.0f" % (q(xs, .5), q(xs, .99), max(xs)) if xs else "   -    -    -"
        print("  %-5s %5d  coming in %s | write waiting %s | answer %s" % (phase, len(come), f(come), f(wait), f(answer)))


def main():
    res = json.load(open(sys.argv[1]))
    step = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    t0, end = res["t"]["base"], res["t"]["flood_end"]
    alone = [w["secs"] for w in res["wal"] if w["start"] < res["t"]["flood"]]
    slow = 2 * statistics.median(alone)
    bins = defaultdict(lambda: defaultdict(list))
    for hop, name in TRACES[1:]:
        path = os.path.join(sys.argv[2], name)
        if not os.path.exists(path):
            if hop == "edge":
                sys.exit(f"hops.py: no {path}: was the bench run with HOPS_TRACE={sys.argv[2]}?")
            continue
        for cls, first, send, answer in requests(messages(path)):
            if t0 <= first < end:
                bins[int((first - t0) // step)][hop, cls].append((send, answer))
    pushes = defaultdict(list)
    for w in res["wal"]:
        pushes[int((w["start"] - t0) // step)].append(w["secs"])
    ms = lambda xs: "%5.0f %5.0f" % (1000 * statistics.median(xs), 1000 * max(xs)) if xs else "    -     -"
    print("slow push: over %.0f ms (twice the unloaded median); flood from %.0f s"
          % (1000 * slow, res["t"]["flood"] - t0))
    print("   t  push slow |" + "|".join(" %-5s %-5s n  send med/max answer med/max " % c for c in COLUMNS))
    for b in range(int((end - t0) // step) + 1):
        line = "%5.0f %4d %4d |" % (b * step, len(pushes[b]), sum(1 for s in pushes[b] if s > slow))
        for c in COLUMNS:
            xs = bins[b][c]
            line += "       %5d %s %s |" % (len(xs), ms([x[0] for x in xs]), ms([x[1] for x in xs]))
        print(line)
    print("WAL-sized requests per proxy (p50 p99 max, ms):")
    for hop, name in TRACES:
        path = os.path.join(sys.argv[2], name)
        if os.path.exists(path):
            print(hop)
            summary(path, t0, res["t"]["flood"], res["t"]["deadline"])


if __name__ == "__main__":
    main()
