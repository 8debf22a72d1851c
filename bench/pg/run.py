#!/usr/bin/env python3
"""run.py OUT.json LOG CMD...: runs CMD (stdout and stderr to LOG and LOG.err), samples its
whole process tree every PERIOD s (env RUN_PERIOD, default 0.05), and writes to OUT.json:

  secs          wall time of CMD, from start to exit
  rc            its exit status
  peak_rss_mib  the largest sum of RSS over the tree at one sample (pgBackRest's backup and
                restore run their process-max workers as child processes: they count)
  peak_one_mib  the largest single process of the tree (getrusage's view, for comparison)
  cpu_s         user + system CPU of CMD and every descendant it waited for

The tree is CMD and every descendant still attached to it (found through /proc's ppid). A
process that detaches (a daemon, reparented to init) stops counting: neither ferry's backup
nor pgBackRest's backup or restore starts one.
"""
import json, os, resource, subprocess, sys, time

out, log, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
period = float(os.environ.get("RUN_PERIOD", "0.05"))
page_kib = os.sysconf("SC_PAGE_SIZE") // 1024


def tree_rss(root):
    kids, rss = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2 :].split()
        pid, ppid = int(d), int(fields[1])
        kids.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * page_kib
    total, one, todo = 0, 0, [root]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        one = max(one, rss.get(p, 0))
        todo.extend(kids.get(p, []))
    return total, one


t0 = time.monotonic()
with open(log, "wb") as o, open(log + ".err", "wb") as e:
    p = subprocess.Popen(cmd, stdout=o, stderr=e)
    peak = peak_one = 0
    while p.poll() is None:
        total, one = tree_rss(p.pid)
        peak, peak_one = max(peak, total), max(peak_one, one)
        time.sleep(period)
    rc = p.wait()
secs = time.monotonic() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # every waited-for descendant
json.dump({"secs": round(secs, 3), "rc": rc, "peak_rss_mib": round(peak / 1024, 1),
           "peak_one_mib": round(max(peak_one, 0) / 1024, 1), "rusage_max_mib": round(ru.ru_maxrss / 1024, 1),
           "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
           "cmd": cmd}, open(out, "w"), indent=1)
sys.exit(rc)
