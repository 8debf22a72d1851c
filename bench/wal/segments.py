#!/usr/bin/env python3
"""Writes N WAL segments of random bytes into PG_WAL, each marked ready for archiving, as
PostgreSQL leaves them when its archiver has fallen behind: a WAL bulk load for wal-push.

Only the long page header that opens a segment is real (what `ferry wal-push` checks: the
segment's own position, its size, one system identifier); the rest is random, so that
compression gains nothing and the bytes on the wire are the segment's.

    segments.py PG_WAL N [FIRST_SEGNO]
"""
import os
import struct
import sys

SEG = 16 << 20
SYSID = 7310000000000000001
MAGIC = 0xD110  # PostgreSQL 15
XLP_LONG_HEADER = 0x0002


def name(tli: int, segno: int) -> str:
    per = 0x100000000 // SEG
    return f"{tli:08X}{segno // per:08X}{segno % per:08X}"


def main() -> None:
    pg_wal, n = sys.argv[1], int(sys.argv[2])
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    status = os.path.join(pg_wal, "archive_status")
    os.makedirs(status, exist_ok=True)
    for segno in range(first, first + n):
        # XLogLongPageHeaderData: magic, info, tli, pageaddr, rem_len, (pad), sysid, seg_size, blcksz
        head = struct.pack("<HHIQI4xQII", MAGIC, XLP_LONG_HEADER, 1, segno * SEG, 0, SYSID, SEG, 8192)
        f = name(1, segno)
        with open(os.path.join(pg_wal, f), "wb") as out:
            out.write(head + os.urandom(SEG - len(head)))
        open(os.path.join(status, f + ".ready"), "w").close()
        print(f)


if __name__ == "__main__":
    main()
