#!/usr/bin/env python3
"""report.py RESULTS.jsonl TARGETS.jsonl OUT.json key=value...: the table of bench/pg.sh.

One row per target, phase and tool: seconds, stored MB (what that backup added to the
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

print(f"# PostgreSQL backup bench, {meta.get('date')}: pgbench scale {meta.get('scale')} "
      f"({int(meta.get('db_bytes', 0)) / 1e6:.0f} MB without pg_wal), {meta.get('load_secs')} s of load x "
      f"{meta.get('clients')} clients{' at ' + meta['rate'] + ' tps' if meta.get('rate') else ''} between full and incr")
print(f"# {meta.get('ferry')}; {meta.get('pgbackrest')} (process-max={meta.get('process_max')}, "
      f"compress-type={meta.get('pgbr_compress')}, cipher {meta.get('pgbr_cipher')}"
      f"{', ' + meta['pgbr_opts'] if meta.get('pgbr_opts') else ''}; 2.45 predates block incremental, 2.46+: "
      f"its incr copies every changed file whole); {meta.get('postgres')}")
print(f"# s3: MinIO over TLS through PROFILE={meta.get('profile')} (RTT {meta.get('rtt_ms')} ms, "
      f"{meta.get('conn_mbps')} MB/s per connection, {meta.get('agg_mbps')} MB/s aggregate); "
      f"{meta.get('nproc')} cores, load average {meta.get('loadavg_start')} at start, {meta.get('loadavg_end')} at end")
print()
hdr = f"{'target':<7}{'phase':<9}{'tool':<12}{'seconds':>9}{'stored MB':>11}{'peak RSS MiB':>14}   {'pgBR/ferry: time  stored  RSS':<32}{'load':>6}  notes"
print(hdr)
print("-" * len(hdr))
for t in dict.fromkeys(r["target"] for r in rows):
    for ph in ("full", "incr", "restore"):
        f = next((r for r in rows if r["target"] == t and r["phase"] == ph and r["tool"] == "ferry"), None)
        p = next((r for r in rows if r["target"] == t and r["phase"] == ph and r["tool"] == "pgbackrest"), None)
        for r in (f, p):
            if r is None:
                continue
            rat = ""
            if r is p and f is not None:
                rat = (f"{ratio(p['secs'], f['secs']):>16}{ratio(p.get('stored_bytes'), f.get('stored_bytes')):>8}"
                       f"{ratio(p['peak_rss_mib'], f['peak_rss_mib']):>7}")
            notes = [f"CPU {r['cpu_s']:.1f} s"] if r.get("cpu_s") is not None else []
            if ph == "restore":
                notes.append(f"recovery {r.get('recovery_secs', 0):.1f} s, rows {int(r.get('rows', 0)) if isinstance(r.get('rows'), float) else r.get('rows')}"
                             f" {'ok' if r.get('rows_ok') == 'yes' else 'WRONG'}")
            elif r.get("size_bytes"):
                notes.append(f"of {r['size_bytes'] / 1e6:.0f} MB")
            if r.get("files_unchanged"):
                notes.append(f"{int(r['files_unchanged'])} files unread")
            print(f"{t:<7}{ph:<9}{r['tool']:<12}{r['secs']:>9.1f}{mb(r.get('stored_bytes')):>11}{r['peak_rss_mib']:>14.0f}   "
                  f"{rat:<32}{r.get('loadavg', 0):>6.1f}  {'; '.join(notes)}")
print()
for tg in targets:
    rt = tg["repo_total"]
    print(f"{tg['target']}: load {tg['txns']} transactions ({tg['tps']} tps); repositories at the end (backups and "
          f"WAL archive): ferry {rt['ferry'] / 1e6:.0f} MB, pgBackRest {rt['pgbackrest'] / 1e6:.0f} MB")
print("targets (pgBR/ferry time): " + ", ".join(f"{k} >= {v}x" for k, v in TARGETS_NOTE.items()) + "; logs: " + meta.get("logs", ""))
