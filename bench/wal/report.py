#!/usr/bin/env python3
"""report.py WORKDIR OUT.json key=value...: the tables of bench/wal.sh, from the files each
configuration left in WORKDIR/NAME and WORKDIR/restore-NAME (meta, lag, cmd.log, procs.json,
archive.json), and the same figures as JSON in OUT.json. The key=value pairs describe the run.
"""
import json
import os
import sys

work, out = sys.argv[1], sys.argv[2]
run = dict(a.split("=", 1) for a in sys.argv[3:])


def meta(d):
    m = {}
    try:
        with open(os.path.join(d, "meta")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    m[k] = v
    except OSError:
        pass
    return m


def num(v, default=None):
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def others(m):
    """(others' CPU %, steal %) of all cores during the timed span, as wal.sh measured them."""
    p = (m.get("others_steal_pct") or "").split()
    return (num(p[0]), num(p[1])) if len(p) == 2 else (None, None)


def segno(name):
    """Segment number of a WAL file name (16 MiB segments: 256 per 'log' id); None if not one."""
    if not name or len(name) < 24:
        return None
    try:
        return int(name[8:16], 16) * 256 + int(name[16:24], 16)
    except ValueError:
        return None


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def cmd_log(d):
    """timed.sh records: two lines each. Returns [(start_s, ms, rc, path, cpu_s)]."""
    recs = []
    try:
        with open(os.path.join(d, "cmd.log")) as f:
            lines = f.read().splitlines()
    except OSError:
        return recs

    def secs(t):  # 0m0.123s
        m, s = t.rstrip("s").split("m")
        return int(m) * 60 + float(s)

    i = 0
    while i + 1 < len(lines):
        a, b = lines[i].split(), lines[i + 1].split()
        if len(a) == 6 and len(b) == 2:
            try:
                recs.append((int(a[0]) / 1e9, (int(a[1]) - int(a[0])) / 1e6, int(a[2]), a[3],
                             secs(b[0]) + secs(b[1])))
            except ValueError:
                pass
            i += 2
        else:
            i += 1
    return recs


def lag_rows(d):
    rows = []
    try:
        with open(os.path.join(d, "lag")) as f:
            for line in f:
                p = line.split()
                if len(p) == 4:
                    cur, arch = segno(p[1]), segno(p[2])
                    if cur is not None:
                        rows.append((float(p[0]), cur, arch, int(p[3])))
    except (OSError, ValueError):
        pass
    return rows


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def log_issues(d):
    """WARN/ERROR lines in the archiver's own logs (ferry agent.log, pgBackRest's log dir),
    and for ferry's prefetch agent the segments it fetched more than once."""
    import re
    ansi = re.compile(r"\x1b\[[0-9;]*m")
    warn, first, fetched = 0, None, {}
    paths = [os.path.join(d, "agent.log")]
    pg = os.path.join(d, "pgbr-log")
    if os.path.isdir(pg):
        paths += [os.path.join(pg, f) for f in sorted(os.listdir(pg))]
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            line = ansi.sub("", line)
            if " WARN" in line or " ERROR" in line:
                warn += 1
                first = first or line.strip()[:300]
            m = re.search(r"prefetched ([0-9A-F]{24})", line)
            if m:
                fetched[m.group(1)] = fetched.get(m.group(1), 0) + 1
    return {"warnings": warn, "first_warning": first,
            "prefetched": len(fetched), "prefetched_again": sum(n - 1 for n in fetched.values())}


def archive_check(name, d, target):
    """Does the archive end at the drain target, without holes? (None: cannot tell.)"""
    a = load_json(os.path.join(d, "archive.json"))
    if a is None or not target or target == "-":
        return None
    if name.startswith("ferry"):
        tls = a.get("timelines") or []
        if not tls:
            return "empty"
        t = tls[-1]
        if t.get("missing"):
            return f"holes {t['missing']}"
        return "ok" if t["last"] >= target[:24] else f"ends at {t['last']}"
    try:
        mx = a[0]["archive"][0]["max"]
    except (LookupError, TypeError):
        return "no archive"
    return "ok" if mx >= target[:24] else f"ends at {mx}"


configs = run.get("configs", "").split()
res = []
for name in configs:
    d = os.path.join(work, name)
    m = meta(d)
    if not m:
        continue
    t0, t1 = num(m.get("load_start")), num(m.get("load_end"))
    load = t1 - t0 if t0 is not None and t1 is not None else None
    wal = num(m.get("wal_bytes"), 0)
    lags = lag_rows(d)
    during = [cur - arch for t, cur, arch, _ in lags if arch is not None and t0 <= t <= t1]
    anytime = [cur - arch for t, cur, arch, _ in lags if arch is not None]
    recs = cmd_log(d)
    ms = [r[1] for r in recs if r[2] == 0]
    procs = load_json(os.path.join(d, "procs.json")) or {}
    fg_cpu = sum(r[4] for r in recs)
    r = {
        "config": name,
        "load_secs": load,
        "wal_mb": wal / 1e6,
        "wal_mb_s": wal / 1e6 / load if load else None,
        "rows": int(num(m.get("rows"), 0)),
        "max_lag_segs": max(during) if during else None,
        "max_lag_segs_any": max(anytime) if anytime else None,
        "lag_samples": len(during),
        "drain_secs": num(m.get("drain_secs")),
        "drain_target": m.get("drain_target"),
        "cmd_calls": len(recs),
        "cmd_failures": sum(1 for r in recs if r[2] != 0),
        "cmd_p50_ms": pct(ms, 50),
        "cmd_p99_ms": pct(ms, 99),
        "cmd_max_ms": max(ms) if ms else None,
        "pg_failed_count": int(num(m.get("failed_count"), 0)),
        "pg_archived_count": int(num(m.get("archived_count"), 0)),
        # cgroup (exact, background processes included) if the run had one, else sampled
        "archiver_cpu_s": num(m.get("cpu_secs")) if m.get("cpu_secs")
        else (round(fg_cpu + procs.get("daemon_cpu_s", 0), 2) if recs else None),
        "archiver_fg_cpu_s": round(fg_cpu, 2),
        # CPU during the load only, in % of one core: the archiver's, and the far end's
        # (MinIO + toxiproxy, which on a real WAN would not share the database's cores)
        "archiver_load_cpu_pct": 100 * num(m.get("load_cpu_archiver"), 0) / load if load else None,
        "link_load_cpu_pct": 100 * num(m.get("load_cpu_link"), 0) / load if load else None,
        "archiver_daemon_cpu_s": procs.get("daemon_cpu_s"),
        "archiver_peak_rss_mib": procs.get("peak_rss_mib"),
        "stored_mb": num(m.get("stored_bytes"), 0) / 1e6 if m.get("stored_bytes") else None,
        "archive_check": None if name.startswith("baseline") else archive_check(name, d, m.get("drain_target")),
        "archive_command": m.get("archive_command"),
        "loadavg_start_end": m.get("loadavg"),
        "others_cpu_pct": others(m)[0],
        "steal_pct": others(m)[1],
        "logs": log_issues(d),
    }
    res.append(r)

# Each archiver against the baselines run just before and just after it (the machine is
# shared: its speed drifts); baselines against the mean of all baselines (the noise floor).
base = [r["load_secs"] for r in res if r["config"].startswith("baseline") and r["load_secs"]]
base_mean = sum(base) / len(base) if base else None
for i, r in enumerate(res):
    if r["config"].startswith("baseline"):
        ref = [base_mean] if base_mean else []
    else:
        ref = []
        for j in list(range(i - 1, -1, -1)):
            if res[j]["config"].startswith("baseline") and res[j]["load_secs"]:
                ref.append(res[j]["load_secs"])
                break
        for j in range(i + 1, len(res)):
            if res[j]["config"].startswith("baseline") and res[j]["load_secs"]:
                ref.append(res[j]["load_secs"])
                break
    r["baseline_secs"] = sum(ref) / len(ref) if ref else None
    r["cost_vs_baseline"] = r["load_secs"] / r["baseline_secs"] - 1 if ref and r["load_secs"] else None

restores = []
for name in run.get("restores", "").split():
    d = os.path.join(work, "restore-" + name)
    m = meta(d)
    if not m:
        continue
    secs = num(m.get("end"), 0) - num(m.get("start"), 0)
    recs = cmd_log(d)
    ms = [x[1] for x in recs if x[2] == 0]
    procs = load_json(os.path.join(d, "procs.json")) or {}
    rows, want = int(num(m.get("rows"), -1)), int(num(m.get("rows_expected"), 0))
    restores.append({
        "config": name,
        "source": m.get("source"),
        "replay_secs": secs,
        "redo_secs": num(m.get("redo_secs")),
        "complete": rows == want,
        "rows": rows,
        "rows_expected": want,
        "cmd_calls": len(recs),
        "cmd_ok": len(ms),
        "cmd_p50_ms": pct(ms, 50),
        "cmd_p99_ms": pct(ms, 99),
        "cpu_s": num(m.get("cpu_secs")) if m.get("cpu_secs")
        else (round(sum(x[4] for x in recs) + procs.get("daemon_cpu_s", 0), 2) if recs else None),
        "peak_rss_mib": procs.get("peak_rss_mib"),
        "restore_command": m.get("restore_command"),
        "others_cpu_pct": others(m)[0],
        "steal_pct": others(m)[1],
        "logs": log_issues(d),
    })
ref = next((x["replay_secs"] for x in restores if x["config"] == "ferry-prefetch"), None)
for x in restores:
    x["ratio_vs_ferry_prefetch"] = x["replay_secs"] / ref if ref else None


def f(v, fmt, width):
    return f"{'-' if v is None else format(v, fmt):>{width}}"


print()
print(f"WAL archiving over {run.get('profile')}: RTT {run.get('rtt_ms')} ms, {run.get('conn_mbps')} MB/s per "
      f"connection, {run.get('agg_mbps')} MB/s aggregate; {run.get('link_how')} up {run.get('link_up')} MB/s, "
      f"down {run.get('link_down')} MB/s, RTT {run.get('link_rtt')} ms (1 MB = 10^6 B)")
print(f"{run.get('postgres')}; {run.get('ferry')}; {run.get('pgbackrest')}; run {run.get('date')}")
print(f"load: {run.get('rows')} rows in {run.get('batches')} inserts (~{run.get('wal_gb')} GB WAL), "
      f"synchronous_commit=on, wal_compression=off; lag sampled every {run.get('sample_s')} s")
print()
hdr = (f"{'config':<15} {'load s':>7} {'WAL MB/s':>8} {'cost':>7} {'max lag':>7} {'drain s':>7} "
       f"{'p50 ms':>7} {'p99 ms':>7} {'fail':>4} {'CPU s':>6} {'CPU%':>5} {'link%':>5} {'RSS MiB':>7} {'stored':>6} {'others':>6}  archive")
print(hdr)
for r in res:
    base_run = r["config"].startswith("baseline")
    print(f"{r['config']:<15} {f(r['load_secs'], '.1f', 7)} {f(r['wal_mb_s'], '.1f', 8)} "
          f"{f(None if r['cost_vs_baseline'] is None else 100 * r['cost_vs_baseline'], '+.1f', 6)}% "
          f"{f(r['max_lag_segs'], 'd', 7)} {f(r['drain_secs'], '.2f', 7)} {f(r['cmd_p50_ms'], '.1f', 7)} "
          f"{f(r['cmd_p99_ms'], '.1f', 7)} {r['cmd_failures']:>4} "
          f"{f(None if base_run else r['archiver_cpu_s'], '.1f', 6)} "
          f"{f(None if base_run else r['archiver_load_cpu_pct'], '.0f', 5)} {f(r['link_load_cpu_pct'], '.0f', 5)} "
          f"{f(None if base_run else r['archiver_peak_rss_mib'], '.0f', 7)} "
          f"{f(None if not r['stored_mb'] or not r['wal_mb'] else 100 * r['stored_mb'] / r['wal_mb'], '.0f', 5)}% "
          f"{f(r['others_cpu_pct'], '.0f', 5)}%  "
          f"{r['archive_check'] or '-'}")
print("cost: load time against the baselines (archive_command = 'true') just before and after it; for a"
      " baseline, against the mean of all (noise);")
print("max lag: segments, during the load (1 = keeping up); others: CPU that other people's work took during the load,"
      " % of all cores (cost figures are only as good as this is low);")
print("drain: pg_switch_wal() to that segment archived; p50/p99: archive_command wall time (timed.sh);"
      " fail: non-zero exits (PostgreSQL retries);")
print("CPU s: archiver side, whole run (commands + background processes); CPU%: the archiver's during the load,"
      " % of one core; link%: the same for MinIO + toxiproxy;")
print("RSS: peak sum of ferry/pgbackrest processes; stored: archive size / WAL written;")
print("archive: the archive ends at the drain target (ferry: and has no holes).")
if restores:
    print()
    print(f"{'restore':<17} {'from':<11} {'replay s':>8} {'vs ferry-prefetch':>17} {'redo s':>7} "
          f"{'p50 ms':>7} {'p99 ms':>7} {'calls':>5} {'CPU s':>6} {'RSS MiB':>7} {'others':>6}  complete")
    for x in restores:
        print(f"{x['config']:<17} {x['source'] or '-':<11} {x['replay_secs']:>8.1f} "
              f"{f(x['ratio_vs_ferry_prefetch'], '.2f', 16)}x {f(x['redo_secs'], '.1f', 7)} "
              f"{f(x['cmd_p50_ms'], '.1f', 7)} {f(x['cmd_p99_ms'], '.1f', 7)} {x['cmd_calls']:>5} "
              f"{f(x['cpu_s'], '.1f', 6)} {f(x['peak_rss_mib'], '.0f', 7)} {f(x['others_cpu_pct'], '.0f', 5)}%  "
              f"{'yes' if x['complete'] else 'NO: %d of %d rows' % (x['rows'], x['rows_expected'])}")
    print("replay: pg_ctl start to pg_is_in_recovery() = false, replaying the whole load from a base backup"
          " taken before it; redo: PostgreSQL's 'redo done ... elapsed';")
    print("p50/p99: restore_command wall time; complete: the restored table has every row of the load.")
notes = []
for x in res + restores:
    lg = x["logs"]
    if lg["warnings"]:
        notes.append(f"{x['config']}: {lg['warnings']} WARN/ERROR lines in its logs, first: {lg['first_warning']}")
    if lg["prefetched_again"]:
        notes.append(f"{x['config']}: the prefetch agent fetched {lg['prefetched_again']} segments more than once "
                     f"({lg['prefetched']} distinct segments prefetched)")
    if x.get("cmd_failures"):
        notes.append(f"{x['config']}: {x['cmd_failures']} archive_command calls failed (PostgreSQL retried them)")
if notes:
    print()
    print("notes:")
    for n in notes:
        print("  " + n)
print()
print(f"load average at start: {run.get('load_start')}; at end: {run.get('load_end')} (2 cores: >1.5 means other work competed)")

with open(out, "w") as fh:
    json.dump({"run": run, "archive": res, "restore": restores}, fh, indent=1)
print(f"raw results: {out}; logs and samples: {run.get('logs')}")
