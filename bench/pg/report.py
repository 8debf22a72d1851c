#!/usr/bin/env python3
"""report.py RESULTS.jsonl TARGETS.jsonl OUT.json key=value...: the table of bench/pg.sh.

One row per target, phase and tool, medians over the rounds (the seconds' range beside): seconds, stored MB (what that backup added to the
repository, as the tool reports it: ferry's summary.bytes_stored, pgBackRest's
info repository.delta), peak RSS MiB (sum over the tool's process tree); on pgBackRest's
row the ratios pgBackRest/ferry (time: > 1 means ferry is faster; stored and RSS: > 1
means ferry uses less). Restore rows add the recovery (server start to promotion, WAL
fetched by the tool's restore_command) and the row check. Never fails on a ratio.
"""
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
targets = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
meta = dict(kv.split("=", 1) for kv in sys.argv[4:])
json.dump({"meta": meta, "results": rows, "targets": targets}, open(sys.argv[3], "w"), indent=1)

TARGETS_NOTE = {"full": 1.5, "incr": 2.0, "restore": 1.5}
mb = lambda b: "-" if b is None else f"{b / 1e6:.1f}"
ratio = lambda a, b: "-" if not a or not b else f"{a / b:.2f}x"


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def med(rs, key):
    return median([r.get(key) for r in rs if isinstance(r.get(key), (int, float))])


def spread(rs, key):
    xs = [r[key] for r in rs if isinstance(r.get(key), (int, float))]
    return f"{min(xs):.1f}-{max(xs):.1f}" if len(xs) > 1 else ""


rounds = sorted({r.get("round", 1) for r in rows})
print(f"# PostgreSQL backup bench, {meta.get('date')}: pgbench scale {meta.get('scale')} "
      f"({int(meta.get('db_bytes', 0)) / 1e6:.0f} MB without pg_wal), load between full and incr: {meta.get('load')}"
      f"{' at ' + meta['rate'] + ' tps' if meta.get('rate') else ''}; medians of {len(rounds)} rounds "
      f"(each from a fresh cluster copy and fresh repositories; the tool going first alternates)")
print(f"# {meta.get('ferry')}; {meta.get('pgbackrest')} (process-max={meta.get('process_max')}, "
      f"compress-type={meta.get('pgbr_compress')}, cipher {meta.get('pgbr_cipher')}"
      f"{', ' + meta['pgbr_opts'] if meta.get('pgbr_opts') else ''}; 2.45 predates block incremental, 2.46+: "
      f"its incr copies every changed file whole); {meta.get('postgres')}")
print(f"# s3: MinIO over TLS through PROFILE={meta.get('profile')} (RTT {meta.get('rtt_ms')} ms, "
      f"{meta.get('conn_mbps')} MB/s per connection, {meta.get('agg_mbps')} MB/s aggregate); "
      f"{meta.get('nproc')} cores, load average {meta.get('loadavg_start')} at start, {meta.get('loadavg_end')} at end")
print()
hdr = (f"{'target':<7}{'phase':<9}{'tool':<12}{'seconds':>9}{'(range)':>13}{'stored MB':>11}{'peak RSS MiB':>14}"
       f"   {'pgBR/ferry: time  stored  RSS':<32}  notes")
print(hdr)
print("-" * len(hdr))
for t in dict.fromkeys(r["target"] for r in rows):
    for ph in ("full", "incr", "restore"):
        f = [r for r in rows if r["target"] == t and r["phase"] == ph and r["tool"] == "ferry"]
        p = [r for r in rows if r["target"] == t and r["phase"] == ph and r["tool"] == "pgbackrest"]
        for rs in (f, p):
            if not rs:
                continue
            rat = ""
            if rs is p and f:
                rat = (f"{ratio(med(p, 'secs'), med(f, 'secs')):>16}{ratio(med(p, 'stored_bytes'), med(f, 'stored_bytes')):>8}"
                       f"{ratio(med(p, 'peak_rss_mib'), med(f, 'peak_rss_mib')):>7}")
            notes = [f"CPU {med(rs, 'cpu_s'):.1f} s"] if med(rs, "cpu_s") is not None else []
            if ph == "restore":
                ok = all(r.get("rows_ok") == "yes" for r in rs)
                notes.append(f"recovery {med(rs, 'recovery_secs') or 0:.1f} s ({spread(rs, 'recovery_secs')}), "
                             f"rows {'ok in every round' if ok else 'WRONG in some round'}")
            elif med(rs, "size_bytes"):
                notes.append(f"of {med(rs, 'size_bytes') / 1e6:.0f} MB")
            if med(rs, "files_unchanged"):
                notes.append(f"{med(rs, 'files_unchanged'):.0f} files unread")
            notes.append(f"load {med(rs, 'loadavg') or 0:.1f}")
            print(f"{t:<7}{ph:<9}{rs[0]['tool']:<12}{med(rs, 'secs'):>9.1f}{spread(rs, 'secs'):>13}"
                  f"{mb(med(rs, 'stored_bytes')):>11}{med(rs, 'peak_rss_mib'):>14.0f}   {rat:<32}  {'; '.join(notes)}")
print()
for tg in targets:
    rt = tg["repo_total"]
    print(f"{tg['target']} round {tg.get('round', 1)}: load {tg['txns']} transactions ({tg['tps']} tps); repositories at "
          f"the end (backups and WAL archive): ferry {rt['ferry'] / 1e6:.0f} MB, pgBackRest {rt['pgbackrest'] / 1e6:.0f} MB")
print("targets (pgBR/ferry time): " + ", ".join(f"{k} >= {v}x" for k, v in TARGETS_NOTE.items()) + "; logs: " + meta.get("logs", ""))
