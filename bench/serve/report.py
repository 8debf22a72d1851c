#!/usr/bin/env python3
"""bench/serve.sh's figures: from drive.py's result of every run, the figures of each run,
their medians per column (server and target), the JSON and the table.

  report.py OUT.json META.json RESULT.json...   (each RESULT's name: COLUMN--REP.json)
"""
import json
import os
import statistics
import sys

MB = 1e6
out, meta = sys.argv[1], json.load(open(sys.argv[2]))


def pct(xs: list, q: float):
    if not xs:
        return None
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1]


def wal_stats(samples: list, tenants: list) -> dict:
    lat = [s["secs"] * 1e3 for s in samples if s["ok"]]
    per = {t: [s["secs"] * 1e3 for s in samples if s["ok"] and s["tenant"] == t] for t in tenants}
    p99s = [pct(v, 99) for v in per.values() if v]
    return {"n": len(samples), "failed": sum(not s["ok"] for s in samples),
            "late": sum(s["late"] for s in samples), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "max_ms": max(lat) if lat else None, "worst_tenant_p99_ms": max(p99s) if p99s else None,
            "per_tenant_p50_ms": {t: pct(v, 50) for t, v in per.items()},
            "per_tenant_p99_ms": {t: pct(v, 99) for t, v in per.items()}}


def jain(xs: list):
    xs = [x for x in xs if x is not None]
    if not xs or sum(x * x for x in xs) == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def loop_stats(jobs: dict, window: float) -> dict:
    per = {}
    for t, runs in jobs.items():
        done = [r for r in runs if r["rc"] == 0]
        secs = sum(r["secs"] for r in done)
        per[t] = sum(r["bytes"] for r in done) / secs / MB if secs else 0.0
    total = sum(r["bytes"] for runs in jobs.values() for r in runs if r["rc"] == 0)
    rates = list(per.values())
    return {"runs": sum(len(r) for r in jobs.values()),
            "failed": sum(r["rc"] != 0 for runs in jobs.values() for r in runs),
            "retries": sum(r["retries"] for runs in jobs.values() for r in runs),
            "per_tenant_mbps": per, "min_mbps": min(rates) if rates else None,
            "max_mbps": max(rates) if rates else None, "aggregate_mbps": total / MB / window if window else None,
            "jain": jain(rates) if rates else None,
            "errors": [r["err"] for runs in jobs.values() for r in runs if r["rc"] != 0][:3]}


def figures(r: dict, column: str) -> dict:
    t = r["t"]
    wal = r["wal"]
    base = [s for s in wal if t["base"] <= s["start"] < t["flood"]]
    others = [x for x in r["tenants"] if x != r["maint_tenant"]]
    flood = [s for s in wal if t["flood"] <= s["start"] < t["flood_end"] and s["tenant"] != r["maint_tenant"]]
    window = t["flood_end"] - t["flood"]
    b, f = wal_stats(base, r["tenants"]), wal_stats(flood, others)
    busy = set(r["backup_tenants"]) | set(r["restore_tenants"])
    idle = [x for x in others if x not in busy]
    fi = wal_stats([s for s in flood if s["tenant"] in idle], idle)
    bk, rs = loop_stats(r["backups"], window), loop_stats(r["restores"], window)
    sync = r["sync"]
    log = r["server_log"]
    cores = log["flood"].get("cores", {})   # runs before 2026-11-27 08:00Z have none
    status = lambda ph, code: log[ph]["statuses"].get(code, 0)
    bad = {ph: sum(n for c, n in v["statuses"].items() if int(c) >= 500 and c != "503") for ph, v in log.items()}
    # Through the emulated link upward go the backups and the WAL: its use is both together.
    link = None
    if column.endswith("s3") and meta.get("agg_mbps") and bk["aggregate_mbps"] is not None:
        wal_mbps = (f["n"] - f["failed"]) * meta["wal_mib"] * (1 << 20) / MB / window
        link = 100 * (bk["aggregate_mbps"] + wal_mbps) / meta["agg_mbps"]
    # The same two figures over the span every loop ran (ferry serve's log only): the runs
    # under way at the deadline finish with the link to fewer tenants, and a tenant whose run
    # ended just before it starts another that meets less competition than the first.
    win, win_link, win_jain = r.get("window"), None, None
    if win:
        per = [v / MB / win["secs"] for v in win["backup_bytes"].values()]
        win_jain = jain(per)
        if column.endswith("s3") and meta.get("agg_mbps"):
            win_link = 100 * (sum(per) + win["wal_bytes"] / MB / win["secs"]) / meta["agg_mbps"]
    fig = {
        "jain_window": win_jain, "link_pct_window": win_link,
        "wal_base_p50_ms": b["p50_ms"], "wal_base_p99_ms": b["p99_ms"],
        "wal_flood_p50_ms": f["p50_ms"], "wal_flood_p99_ms": f["p99_ms"],
        "wal_p99_ratio": f["p99_ms"] / b["p99_ms"] if f["p99_ms"] and b["p99_ms"] else None,
        "wal_idle_flood_p99_ms": fi["p99_ms"],
        "wal_worst_tenant_p99_base_ms": b["worst_tenant_p99_ms"],
        "wal_worst_tenant_p99_flood_ms": f["worst_tenant_p99_ms"],
        "wal_max_flood_ms": f["max_ms"],
        "wal_pushes_base": b["n"], "wal_pushes_flood": f["n"],
        "wal_failed": b["failed"] + f["failed"], "wal_late": b["late"] + f["late"],
        "flood_s": window,
        "backup_min_mbps": bk["min_mbps"], "backup_max_mbps": bk["max_mbps"],
        "backup_aggregate_mbps": bk["aggregate_mbps"], "jain": bk["jain"],
        "link_pct": link, "backup_runs": bk["runs"], "backup_failed": bk["failed"],
        "restore_aggregate_mbps": rs["aggregate_mbps"], "restore_jain": rs["jain"],
        "restore_runs": rs["runs"], "restore_failed": rs["failed"],
        "flood_client_retries": bk["retries"] + rs["retries"],
        "maint_s": r["maint"].get("secs"), "maint_rc": r["maint"].get("rc"),
        "maint_after_flood_s": r["maint"].get("end_after_flood_s"),
        "sync_failures": sum(s["rc"] != 0 for s in sync),
        "sync_refused": sum(s["refused"] for s in sync),
        "sync_timeouts": sum(s["timeouts"] for s in sync),
        "sync_retries": sum(s["retries"] for s in sync),
        "sync_503": status("sync", "503"),
        "sync_p50_s": pct([s["secs"] for s in sync], 50), "sync_max_s": max(s["secs"] for s in sync),
        "sync_start_skew_s": max(s["start_skew"] for s in sync),
        "server_503": sum(status(ph, "503") for ph in log),
        "server_5xx_not_503": sum(bad.values()),
        "server_cpu_flood_s": log["flood"]["cpu_s"], "server_rss_mib": r["server_rss_mib"],
        "cores_clients": cores.get("clients"), "cores_server": cores.get("server"),
        "cores_store_link": sum(cores.get(g, 0.0) for g in ("store", "toxiproxy", "delay", "link"))
        if "store" in cores else None,
        "cores_drive": cores.get("drive"), "idle_pct": cores.get("idle_pct"),
    }
    detail = {"wal_base": b, "wal_flood": f, "wal_flood_idle_tenants": fi, "backups": bk, "restores": rs, "maint": r["maint"],
              "sync": sync, "server_log": log, "wal_errors": r["wal_errors"]}
    return fig, detail


runs, cols = [], {}
for path in sys.argv[3:]:
    column, rep = os.path.basename(path).removesuffix(".json").split("--")
    fig, detail = figures(json.load(open(path)), column)
    runs.append({"column": column, "rep": int(rep), "figures": fig, "detail": detail})
    cols.setdefault(column, []).append(fig)
med = {}
for c, figs in cols.items():
    med[c] = {}
    for k in figs[0]:
        v = [f[k] for f in figs if f[k] is not None]
        med[c][k] = statistics.median(v) if v else None
json.dump({"meta": meta, "medians": med, "runs": runs}, open(out, "w"), indent=1)

# ---- the table ---------------------------------------------------------------------------------
HIGHER = {"backup_min_mbps", "backup_max_mbps", "backup_aggregate_mbps", "jain", "link_pct",
          "jain_window", "link_pct_window",
          "restore_aggregate_mbps", "restore_jain"}
COUNTS = {"wal_failed", "wal_late", "backup_failed", "restore_failed", "flood_client_retries", "sync_failures",
          "sync_refused", "sync_timeouts", "sync_retries", "sync_503", "server_503", "server_5xx_not_503",
          "wal_pushes_base", "wal_pushes_flood", "backup_runs", "restore_runs", "maint_rc"}
ROWS = [
    ("wal_base_p50_ms", "WAL p50 alone, ms", ""), ("wal_base_p99_ms", "WAL p99 alone, ms", ""),
    ("wal_flood_p50_ms", "WAL p50 under flood, ms", ""), ("wal_flood_p99_ms", "WAL p99 under flood, ms", ""),
    ("wal_p99_ratio", "WAL p99 flood / alone", "<= 2"),
    ("wal_idle_flood_p99_ms", "WAL p99 (flood), idle tenants, ms", ""),
    ("wal_worst_tenant_p99_flood_ms", "WAL worst tenant's p99 (flood), ms", ""),
    ("wal_max_flood_ms", "WAL slowest push (flood), ms", ""),
    ("wal_pushes_base", "WAL pushes alone / flood", ""), ("wal_failed", "WAL pushes failed", "0"),
    ("wal_late", "WAL pushes past their interval", ""),
    ("flood_s", "flood lasted, s", ""),
    ("backup_aggregate_mbps", "backups, aggregate MB/s", ""),
    ("backup_min_mbps", "backups, slowest tenant MB/s", ""), ("backup_max_mbps", "backups, fastest tenant MB/s", ""),
    ("jain", "backups, Jain's index, whole runs", ""), ("link_pct", "backups + WAL, % of the link, whole runs", ""),
    ("jain_window", "backups, Jain's index, all loops on", ">= 0.95"),
    ("link_pct_window", "backups + WAL, % of the link, all loops on", ">= 90"),
    ("backup_runs", "backup runs (failed)", ""),
    ("restore_aggregate_mbps", "restores, aggregate MB/s", ""), ("restore_runs", "restore runs (failed)", ""),
    ("flood_client_retries", "flood: restic retries", ""),
    ("maint_s", "forget --prune, s (exit code)", "finishes"),
    ("sync_failures", "sync start: failed clients", "0"), ("sync_refused", "sync start: refused connections", "0"),
    ("sync_timeouts", "sync start: client timeouts", "0"), ("sync_retries", "sync start: restic retries", ""),
    ("sync_503", "sync start: 503 answers", ""), ("sync_p50_s", "sync start: backup p50, s", ""),
    ("sync_max_s", "sync start: slowest backup, s", ""), ("sync_start_skew_s", "sync start: spawn spread, s", ""),
    ("server_503", "server: 503 answers, all phases", ""), ("server_5xx_not_503", "server: other 5xx", "0"),
    ("server_cpu_flood_s", "server: CPU s during the flood", ""), ("server_rss_mib", "server: peak RSS MiB", ""),
    ("cores_clients", "flood cores: clients (restic, packs)", ""), ("cores_server", "flood cores: server", ""),
    ("cores_store_link", "flood cores: MinIO + link emulation", ""),
    ("cores_drive", "flood cores: driver (+ http WAL pushers)", ""), ("idle_pct", "flood: machine idle %", ""),
]
PAIRS = {"backup_runs": "backup_failed", "restore_runs": "restore_failed", "maint_s": "maint_rc",
         "wal_pushes_base": "wal_pushes_flood"}


def fmt(m: dict, k: str) -> str:
    v = m.get(k)
    if v is None:
        return "-"
    s = f"{v:.0f}" if k in COUNTS else f"{v:.3f}" if k in ("jain", "restore_jain", "jain_window") else \
        f"{v:.2f}" if k == "wal_p99_ratio" or k.startswith("cores_") else f"{v:.1f}"
    if k in PAIRS:
        o = m.get(PAIRS[k])
        s += ("/" if k == "wal_pushes_base" else " ") + ("-" if o is None else
                                                           f"{o:.0f}" if k == "wal_pushes_base" else f"({o:.0f})")
    return s


order = ["ferry-local", "rest-server-local", "ferry-s3"]
columns = sorted(cols, key=lambda c: order.index(c) if c in order else len(order))
names = {"ferry-local": "ferry serve", "rest-server-local": "rest-server", "ferry-s3": "ferry serve s3"}
print(f"\nferry serve vs rest-server {meta['rest_server']}, clients restic {meta['restic']}; "
      f"{meta['tenants']} tenants ({meta['backups']} backing up {meta['backup_mb']} MB of fresh data a run"
      f"{' as 16 MiB packs over http, %s streams each' % meta['pack_streams'] if meta.get('backup_client') == 'http' else ''}, "
      f"{meta['restores']} restoring {meta['backup_mb']} MB), WAL {meta['wal_mib']} MiB every {meta['wal_interval']} s "
      f"via {meta['wal_client']}; {meta['base_secs']} s alone, {meta['flood_secs']} s flood; sync start "
      f"{meta['sync_mb']} MB each; medians of {meta['repeat']} run(s); load {meta['load_start']} -> {meta['load_end']}; "
      f"backup/restore clients at nice {meta.get('client_nice', 0)}; link emulation at nice "
      f"{meta.get('link_nice', 0)}, MinIO at nice {meta.get('store_nice', 0)}")
if "ferry-s3" in cols:
    print(f"ferry serve s3: backend MinIO through PROFILE={meta['profile']} (RTT {meta['rtt_ms']} ms, "
          f"{meta['conn_mbps']} MB/s per connection, {meta['agg_mbps']} MB/s aggregate); rest-server stores only "
          f"to a directory, so it has no s3 column")
hdr = f"{'figure':<38}" + "".join(f"{names.get(c, c):>16}" for c in columns)
both = "ferry-local" in med and "rest-server-local" in med
if both:
    hdr += f"{'ferry vs rest':>15}"
print(hdr + f"{'target':>10}")
for k, label, target in ROWS:
    line = f"{label:<38}" + "".join(f"{fmt(med[c], k):>16}" for c in columns)
    if both:
        a, b = med["ferry-local"].get(k), med["rest-server-local"].get(k)
        ratio = ""
        if k not in COUNTS and a and b and k not in ("flood_s", "sync_start_skew_s", "maint_s"):
            # above 1: ferry serve is better (faster, fairer, less CPU or memory)
            ratio = f"{a / b:.2f}x" if k in HIGHER else f"{b / a:.2f}x"
        line += f"{ratio:>15}"
    print(line + f"{target:>10}")
print("ferry vs rest: above 1 means ferry serve does better (lower latency, CPU and memory; higher MB/s and index)")
for r in runs:
    for ph, v in r["detail"]["server_log"].items():
        for line in v["bad"][:3]:
            print(f"{r['column']} run {r['rep']} {ph}: 5xx: {line}")
    for e in r["detail"]["wal_errors"][:2]:
        print(f"{r['column']} run {r['rep']}: WAL push failed: {e.strip()[-200:]}")
    for e in r["detail"]["backups"]["errors"][:2] + r["detail"]["restores"]["errors"][:2]:
        print(f"{r['column']} run {r['rep']}: flood job failed: {e.strip()[-200:]}")
    for s in r["detail"]["sync"]:
        if s["rc"] != 0:
            print(f"{r['column']} run {r['rep']}: sync {s['tenant']} exit {s['rc']}: {s.get('err', '').strip()[-200:]}")
            break
