#!/usr/bin/env python3
"""One run of bench/serve.sh's workload against one server that speaks restic's REST protocol.

  drive.py CONFIG.json RESULT.json

CONFIG (written by serve.sh): server, url (https://127.0.0.1:PORT), ca, restic, work,
log (the server's access log), pid (the server's), poly, tokens {tenant: token}, files
{restore, sync} and the knobs (tenants, backups, restores, base_secs, flood_secs,
wal_interval, wal_mib, backup_mb, wal_client, fast_kdf, kdf_n, maint, sync_timeout).

Phases: init every tenant's repository and the restore tenants' snapshot (untimed); WAL
loops alone for base_secs; WAL loops under the flood (backup loops of fresh data, restore
loops, one forget --prune) for flood_secs; all tenants' backups started in the same second.
"""
import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True   # no __pycache__ in the clone
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repo  # noqa: E402

def interrupted(*_):
    with plock:
        for p in procs:
            p.kill()
    os._exit(143)


signal.signal(signal.SIGTERM, interrupted)
signal.signal(signal.SIGINT, interrupted)
C = json.load(open(sys.argv[1]))
OUT = sys.argv[2]
W = C["work"]
TENANTS = sorted(C["tokens"])
BACKUP_T = TENANTS[: C["backups"]]
RESTORE_T = TENANTS[C["backups"] : C["backups"] + C["restores"]]
rest_t = TENANTS[C["backups"] + C["restores"] :]
MAINT_T = rest_t[0] if C["maint"] and rest_t else None
MB = 1_000_000
procs: set = set()        # restic processes in flight, killed if we are interrupted
plock = threading.Lock()


def now() -> float:
    return time.monotonic()


def url(t: str, name: str = "repo") -> str:
    """Tenant t's repository `name`: `repo` for backups and restores, `wal` for the WAL
    (ferry serve serves a repository named wal first, as it does ferry's own WAL archive)."""
    host = C["url"].removeprefix("https://")
    return f"rest:https://{t}:{C['tokens'][t]}@{host}/{t}/{name}/"


def env(t: str) -> dict:
    e = dict(os.environ)
    e.update(RESTIC_PASSWORD="pw", RESTIC_CACHE_DIR=f"{W}/cache/{t}", RESTIC_PROGRESS_FPS="0.0001")
    return e


def client(cmd: list, env: dict | None, timeout: float | None, nice: bool) -> dict:
    """Runs one client process (killed past `timeout`); its wall time, exit code, stdout and
    stderr. Backup, restore and maintenance clients yield the CPU (`nice`, CLIENT_NICE): in
    production they run on hosts of their own, here they share two cores with the server and
    the WAL pushers."""
    if nice and C.get("client_nice", 0):
        cmd = ["nice", "-n", str(C["client_nice"]), *cmd]
    t0 = now()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    with plock:
        procs.add(p)
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        timed_out = True
    finally:
        with plock:
            procs.discard(p)
    return {"start": t0, "secs": now() - t0, "rc": p.returncode, "timeout": timed_out,
            "out": out.decode(errors="replace"), "err": err.decode(errors="replace")}


def restic(t: str, *args: str, timeout: float | None = None, at: float | None = None,
           name: str = "repo") -> dict:
    """Runs restic for tenant t's repository `name`; its wall time, exit code, stderr and its
    JSON summary."""
    cmd = [C["restic"], "-r", url(t, name), "--cacert", C["ca"], "--retry-lock", "10m", *args]
    if at is not None:   # the synchronised start: wait for the common instant
        time.sleep(max(0.0, at - time.time()))
    r = client(cmd, env(t), timeout, nice=name != "wal")
    r["summary"] = {}
    for line in r.pop("out").splitlines():
        if '"message_type":"summary"' in line.replace(" ", ""):
            try:
                r["summary"] = json.loads(line)
            except ValueError:
                pass
    return r


def short(r: dict) -> dict:
    """What a result keeps: no stderr unless it failed."""
    d = {k: r[k] for k in ("start", "secs", "rc", "timeout")}
    d["retries"] = len(re.findall(r"retrying", r["err"]))
    if r["rc"] != 0:
        d["err"] = r["err"][-600:]
    return d


def marks() -> dict:
    """The server's access log size and CPU seconds now, and every process's: phase boundaries."""
    procs, reaped = processes()
    cpu = procs[C["pid"]][1] if C["pid"] in procs else None   # the server reaps no children
    return {"t": now(), "unix": time.time(), "log": os.path.getsize(C["log"]), "cpu": cpu, "procs": procs,
            "reaped": reaped,
            "idle": int(open("/proc/stat").readline().split()[4]) / os.sysconf("SC_CLK_TCK")}


# What each process here is, by its name (/proc cuts it at 15 bytes): the flood's CPU per part.
# "clients" are every restic process (the WAL's too with WAL_CLIENT=restic) and every
# BACKUP_CLIENT=http run ("packs"); with WAL_CLIENT=http the WAL pushers are threads of this
# driver, "drive".
GROUPS = {"restic": "clients", "head": "clients", "nice": "clients", "minio": "store",
          "toxiproxy-serve": "toxiproxy", "ferry-connect-d": "delay", "ferry": "server",
          "rest-server": "server", "python3": "drive", "packs": "clients"}


def processes() -> tuple[dict, float]:
    """pid -> (group, CPU seconds with its reaped children) for this network namespace's
    processes, and the CPU seconds of this driver's reaped children (the restic clients).
    Other threads reap children meanwhile: a scan during which that happened is done again,
    or a child could be counted both live and reaped, or neither."""
    while True:
        before = reaped_now()
        out, reaped = scan()
        if reaped_now() == before == reaped:
            return out, reaped


def reaped_now() -> float:
    f = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    return (int(f[13]) + int(f[14])) / os.sysconf("SC_CLK_TCK")


def scan() -> tuple[dict, float]:
    tck, me = os.sysconf("SC_CLK_TCK"), os.readlink("/proc/self/ns/net")
    out, reaped = {}, 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != me:
                continue
            comm, rest = open(f"/proc/{pid}/stat").read().split("(", 1)[1].rsplit(")", 1)
            f = rest.split()
        except OSError:
            continue
        if int(pid) == os.getpid():   # its children are the clients, counted below
            out[int(pid)] = ("drive", (int(f[11]) + int(f[12])) / tck)
            reaped = (int(f[13]) + int(f[14])) / tck
        else:
            out[int(pid)] = (GROUPS.get(comm, "other"), sum(int(x) for x in f[11:15]) / tck)
    return out, reaped


def cpu_by_group(a: dict, b: dict) -> dict:
    """Cores per group between marks a and b, and the machine's idle share."""
    secs = b["t"] - a["t"]
    pa, pb = a["procs"], b["procs"]
    use = {}
    for pid, (g, c) in pb.items():
        use[g] = use.get(g, 0.0) + c - (pa[pid][1] if pid in pa and pa[pid][0] == g else 0.0)
    # Clients that ended between the marks: what they used after a, from what this driver reaped.
    gone = sum(c for pid, (g, c) in pa.items() if pid not in pb and g == "clients")
    use["clients"] = use.get("clients", 0.0) + b["reaped"] - a["reaped"] - gone
    cores = {g: round(v / secs, 3) for g, v in use.items()}
    cores["idle_pct"] = round(100 * (b["idle"] - a["idle"]) / secs / os.cpu_count(), 1)
    return cores


def in_threads(fn, items) -> list:
    res = [None] * len(items)

    def run(i, x):
        res[i] = fn(x)
    ts = [threading.Thread(target=run, args=(i, x)) for i, x in enumerate(items)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    return res


# ---- setup (untimed) ----------------------------------------------------------------------
def init(t: str):
    for name in ("repo", "wal"):
        if C["fast_kdf"]:
            os.environ["RESTIC_PASSWORD"] = "pw"
            repo.init(url(t, name), f"{t}:{C['tokens'][t]}", C["poly"], C["ca"], C["kdf_n"])
            r = restic(t, "cat", "config", name=name)
        else:
            r = restic(t, "init", name=name)
        if r["rc"] != 0:
            raise SystemExit(f"drive.py: init {t} {name}: {r['err'][-800:]}")


def sem_map(fn, items, n=4):
    """fn over items, n at a time (setup: keeps the CPU for the servers' own start)."""
    sem = threading.Semaphore(n)

    def one(x):
        with sem:
            return fn(x)
    return in_threads(one, items)


t_setup = now()
sem_map(init, TENANTS)


def prep_restore(t):
    r = restic(t, "backup", "--json", "--tag", "corpus", C["files"]["restore"])
    if r["rc"] != 0:
        raise SystemExit(f"drive.py: snapshot for {t}: {r['err'][-800:]}")


sem_map(prep_restore, RESTORE_T, 2)
if MAINT_T:   # something to forget and prune, whatever the WAL client
    for i in range(C["maint_snaps"]):
        r = restic(MAINT_T, "backup", "-q", "--stdin-from-command", "--stdin-filename", f"old-{i}",
                   "--", "head", "-c", str(1 << 20), "/dev/urandom")
        if r["rc"] != 0:
            raise SystemExit(f"drive.py: snapshots for {MAINT_T}: {r['err'][-800:]}")
setup_secs = now() - t_setup
print(f"  {C['server']}: {len(TENANTS)} repositories ready in {setup_secs:.0f} s", file=sys.stderr)


# ---- the WAL loops --------------------------------------------------------------------------
stop_wal = threading.Event()
wal = []   # (tenant, start, secs, ok, late)
wal_lock = threading.Lock()
wal_errs = []
WAL_BYTES = int(C["wal_mib"] * (1 << 20))


def wal_restic(t: str, n: int) -> tuple[bool, str]:
    r = restic(t, "backup", "-q", "--stdin-from-command", "--stdin-filename", f"wal-{n:06d}",
               "--", "head", "-c", str(WAL_BYTES), "/dev/urandom", timeout=600, name="wal")
    return r["rc"] == 0, r["err"][-300:]


class WalHttp:
    """One connection per tenant, kept open: POST of a fresh data file (named by its SHA-256,
    which rest-server checks), as a WAL archiver pushes a segment."""
    noise = os.urandom(WAL_BYTES)

    def __init__(self, t: str):
        self.t, self.conn = t, None
        self.auth = "Basic " + base64.b64encode(f"{t}:{C['tokens'][t]}".encode()).decode()

    def __call__(self, t: str, n: int) -> tuple[bool, str]:
        body = (f"{t}-{n}-".encode() + os.urandom(16) + self.noise)[:WAL_BYTES]
        name = hashlib.sha256(body).hexdigest()
        try:
            if self.conn is None:
                host, port = C["url"].removeprefix("https://").split(":")
                self.conn = http.client.HTTPSConnection(
                    host, int(port), timeout=600, context=ssl.create_default_context(cafile=C["ca"]))
            self.conn.request("POST", f"/{t}/wal/data/{name}", body=body, headers={
                "Authorization": self.auth, "Content-Type": "application/octet-stream"})
            r = self.conn.getresponse()
            text = r.read()
            if r.status != 200:
                return False, f"{r.status} {text[:200]!r}"
            return True, ""
        except (OSError, http.client.HTTPException) as e:
            self.conn = None
            return False, repr(e)


def wal_loop(t: str, offset: float):
    push = WalHttp(t) if C["wal_client"] == "http" else wal_restic
    n, tick = 0, now() + offset
    while not stop_wal.is_set():
        time.sleep(max(0.0, tick - now()))
        if stop_wal.is_set():
            break
        t0 = now()
        ok, err = push(t, n)
        t1 = now()
        tick += C["wal_interval"]
        late = t1 > tick
        if late:                  # behind: the next push starts now, the schedule moves on
            tick = t1
        with wal_lock:
            wal.append((t, t0, t1 - t0, ok, late))
            if not ok and len(wal_errs) < 5:
                wal_errs.append(f"{t}: {err}")
        n += 1


m0 = marks()
wal_threads = [threading.Thread(target=wal_loop, args=(t, i * C["wal_interval"] / len(TENANTS)))
               for i, t in enumerate(TENANTS)]
for th in wal_threads:
    th.start()
print(f"  {C['server']}: WAL alone for {C['base_secs']} s", file=sys.stderr)
time.sleep(C["base_secs"])

# ---- the flood --------------------------------------------------------------------------------
m1 = marks()
deadline = m1["t"] + C["flood_secs"]
BACKUP_BYTES = int(C["backup_mb"] * MB)
print(f"  {C['server']}: flood for {C['flood_secs']} s: {len(BACKUP_T)} backups,"
      f" {len(RESTORE_T)} restores{', forget --prune by ' + MAINT_T if MAINT_T else ''}", file=sys.stderr)


def packs_run(t: str, k: int) -> dict:
    """BACKUP_CLIENT=http: one backup run of fresh 16 MiB packs by bench/serve/packs.py, a
    process of its own at the clients' nice value, as restic's would be."""
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "packs.py"),
           C["url"], C["ca"], t, C["tokens"][t], str(k), str(int(C["backup_mb"] * MB)),
           str(C["pack_streams"])]
    r = client(cmd, None, 3600, nice=True)
    try:
        res = json.loads(r["out"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        res = {"bytes": 0, "err": r["err"][-600:] or f"exit {r['rc']}"}
    d = {k: r[k] for k in ("start", "secs", "timeout")}
    d.update(rc=1 if "err" in res or r["rc"] else 0, retries=0, bytes=res.get("bytes", 0))
    if d["rc"]:
        d["err"] = res.get("err", f"exit {r['rc']}")
    return d


def backup_loop(t):
    runs, k = [], 0
    while now() < deadline:
        if C.get("backup_client") == "http":
            runs.append(packs_run(t, k))
            k += 1
            continue
        r = restic(t, "backup", "--json", "--tag", "flood", "--stdin-from-command",
                   "--stdin-filename", f"flood-{k}", "--", "head", "-c", str(BACKUP_BYTES), "/dev/urandom",
                   timeout=3600)
        d = short(r)
        d["bytes"] = r["summary"].get("data_added_packed", 0) if r["rc"] == 0 else 0
        runs.append(d)
        k += 1
    return runs


def restore_loop(t):
    runs, k = [], 0
    while now() < deadline:
        target = f"{W}/restore/{t}-{k}"
        r = restic(t, "restore", "--json", "latest", "--tag", "corpus", "--target", target, timeout=3600)
        d = short(r)
        d["bytes"] = r["summary"].get("bytes_restored", r["summary"].get("total_bytes", 0)) if r["rc"] == 0 else 0
        runs.append(d)
        shutil.rmtree(target, ignore_errors=True)
        k += 1
    return runs


maint = {}


def maint_run():
    maint.update(short(restic(MAINT_T, "forget", "--keep-last", "1", "--prune", timeout=C["maint_timeout"])))


mt = threading.Thread(target=maint_run) if MAINT_T else None
if mt:
    mt.start()
flood = in_threads(lambda job: job[0](job[1]),
                   [(backup_loop, t) for t in BACKUP_T] + [(restore_loop, t) for t in RESTORE_T])
m2 = marks()
if mt:
    mt.join()
    maint["end_after_flood_s"] = now() - m2["t"]
stop_wal.set()
for th in wal_threads:
    th.join()
m3 = marks()

# ---- the synchronised start ----------------------------------------------------------------
time.sleep(2)
m4 = marks()
at = time.time() // 1 + 3   # a whole second, long enough ahead for every thread to be waiting
print(f"  {C['server']}: {len(TENANTS)} backups of {C['sync_mb']} MB started in the same second",
      file=sys.stderr)
sync_raw = in_threads(lambda t: restic(t, "backup", "--json", C["files"]["sync"], timeout=C["sync_timeout"], at=at),
                      TENANTS)
m5 = marks()
os.makedirs(f"{W}/sync-stderr", exist_ok=True)
sync = []
for t, r in zip(TENANTS, sync_raw):
    open(f"{W}/sync-stderr/{t}", "w").write(r["err"])
    d = short(r)
    d["tenant"] = t
    d["start_skew"] = r["start"] - min(x["start"] for x in sync_raw)
    d["refused"] = len(re.findall(r"connection refused", r["err"], re.I))
    d["timeouts"] = len(re.findall(r"timeout|deadline exceeded", r["err"], re.I)) + int(r["timeout"])
    sync.append(d)


# ---- the server's answers, per phase, from its access log ------------------------------------
def statuses(a: dict, b: dict) -> tuple[dict, list]:
    with open(C["log"], "rb") as f:
        f.seek(a["log"])
        text = f.read(b["log"] - a["log"]).decode(errors="replace")
    counts, bad = {}, []
    for line in text.splitlines():
        st = None
        if line.startswith("{"):        # ferry serve: one JSON object per request
            try:
                st = json.loads(line).get("status")
            except ValueError:
                pass
        else:                           # rest-server --log: combined log format
            m = re.search(r'" (\d{3}) ', line)
            st = int(m.group(1)) if m else None
        if st is None:
            continue
        counts[str(st)] = counts.get(str(st), 0) + 1
        if st >= 500 and st != 503 and len(bad) < 20:
            bad.append(line[:400])
    return counts, bad


phases = {"setup": (m0, m0), "base": (m0, m1), "flood": (m1, m2), "drain": (m2, m3), "sync": (m4, m5)}
with open(C["log"], "rb") as f:
    setup_text = f.read(m0["log"]).decode(errors="replace")
server = {}
for name, (a, b) in phases.items():
    if name == "setup":
        counts, bad = statuses({"log": 0}, m0)
    else:
        counts, bad = statuses(a, b)
    server[name] = {"statuses": counts, "bad": bad,
                    "cpu_s": (b["cpu"] - a["cpu"]) if a["cpu"] is not None and b["cpu"] is not None else None,
                    "secs": b["t"] - a["t"], "cores": cpu_by_group(a, b) if b is not a else {}}


def window(a: dict, b: dict) -> dict | None:
    """What the server stored while every flood loop ran (from the flood's start to its deadline;
    the runs under way then finish alone, with the link to fewer of them): bytes of the writes
    answered 200 in that span, per backup tenant and for the WAL. ferry serve's access log only
    (rest-server's does not give a request's size)."""
    lo, hi = a["unix"], a["unix"] + C["flood_secs"]
    with open(C["log"], "rb") as f:
        f.seek(a["log"])
        text = f.read(b["log"] - a["log"]).decode(errors="replace")
    backup, wal_bytes, seen = {t: 0 for t in BACKUP_T}, 0, False
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        seen = True
        end = e.get("unix", 0) + e.get("total_ms", 0) / 1000
        if e.get("method") != "POST" or e.get("status") != 200 or not lo <= end < hi:
            continue
        if "/wal/" in e.get("path", ""):
            wal_bytes += e.get("in", 0)
        elif e.get("tenant") in backup and "/repo/data/" in e.get("path", ""):
            backup[e["tenant"]] += e.get("in", 0)
    return {"secs": hi - lo, "backup_bytes": backup, "wal_bytes": wal_bytes} if seen else None


try:
    hwm = int(re.search(r"VmHWM:\s+(\d+)", open(f"/proc/{C['pid']}/status").read()).group(1)) / 1024
except (OSError, AttributeError):
    hwm = None

json.dump({
    "server": C["server"], "tenants": TENANTS, "backup_tenants": BACKUP_T, "restore_tenants": RESTORE_T,
    "maint_tenant": MAINT_T, "setup_s": setup_secs,
    "t": {"base": m0["t"], "flood": m1["t"], "flood_end": m2["t"], "deadline": deadline},
    "wal": [{"tenant": w[0], "start": w[1], "secs": w[2], "ok": w[3], "late": w[4]} for w in wal],
    "wal_errors": wal_errs,
    "backups": dict(zip(BACKUP_T, flood[: len(BACKUP_T)])),
    "restores": dict(zip(RESTORE_T, flood[len(BACKUP_T):])),
    "maint": maint, "sync": sync, "server_log": server, "server_rss_mib": hwm, "window": window(m1, m2),
}, open(OUT, "w"), indent=1)
