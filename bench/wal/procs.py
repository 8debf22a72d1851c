#!/usr/bin/env python3
"""procs.py NETNS OUT.json [PERIOD]: samples the archiver's processes (ferry, pgbackrest) in
network namespace NETNS until SIGTERM/SIGINT, then writes a summary to OUT.json:

  peak_rss_mib      the largest sum of RSS over all of them at one sample
  peak_rss_one_mib  the largest single process
  daemon_cpu_s      CPU (user+sys) of the background processes (ferry wal-agent, pgBackRest
                    :async/:local), each counted at its last sample (a process that lived
                    less than PERIOD may be missed; the foreground commands' CPU comes from
                    timed.sh instead, so nothing is counted twice)
  daemons           per background process: pid, command line (its end), CPU s, peak RSS MiB

Only processes in NETNS count: other sessions on the machine run ferry and PostgreSQL too.
"""
import json, os, signal, sys, time

ns, out = sys.argv[1], sys.argv[2]
period = float(sys.argv[3]) if len(sys.argv) > 3 else 0.5
ns_ino = os.stat(f"/run/netns/{ns}").st_ino
tick = os.sysconf("SC_CLK_TCK")
page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
NAMES = ("ferry", "pgbackrest")

seen = {}  # (pid, starttime) -> dict
peak_total = 0
stop = False


def on_signal(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)


def sample():
    global peak_total
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat(f"/proc/{d}/ns/net").st_ino != ns_ino:
                continue
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            comm = st[st.index("(") + 1 : st.rindex(")")]
            if comm not in NAMES:
                continue
            fields = st[st.rindex(")") + 2 :].split()
            # fields[0] is state (field 3): utime is field 14, stime 15, starttime 22, rss 24
            cpu = (int(fields[11]) + int(fields[12])) / tick
            start, rss = fields[19], int(fields[21]) * page_kib
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError):
            continue
        total += rss
        p = seen.setdefault((d, start), {"pid": int(d), "cmd": cmd, "rss_kib": 0, "cpu_s": 0.0})
        p["rss_kib"] = max(p["rss_kib"], rss)
        p["cpu_s"] = max(p["cpu_s"], cpu)
    peak_total = max(peak_total, total)


def background(cmd):
    return "wal-agent" in cmd or ":async" in cmd or ":local" in cmd


while not stop:
    sample()
    time.sleep(period)
sample()
procs = list(seen.values())
daemons = [p for p in procs if background(p["cmd"])]
summary = {
    "peak_rss_mib": round(peak_total / 1024, 1),
    "peak_rss_one_mib": round(max([p["rss_kib"] for p in procs], default=0) / 1024, 1),
    "daemon_cpu_s": round(sum(p["cpu_s"] for p in daemons), 2),
    "procs_seen": len(procs),
    "daemons": [{"pid": p["pid"], "cmd": p["cmd"][-200:], "cpu_s": p["cpu_s"],
                 "rss_mib": round(p["rss_kib"] / 1024, 1)} for p in daemons],
}
with open(out, "w") as f:
    json.dump(summary, f, indent=1)
