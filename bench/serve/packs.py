#!/usr/bin/env python3
"""One backup run of BACKUP_CLIENT=http (bench/serve.sh): what a restic backup sends of fresh
data, without its CPU, from a process of its own as a backup host's client is.

  packs.py URL CA TENANT TOKEN RUN BYTES STREAMS

Packs of 16 MiB (restic's default) POSTed as `/TENANT/repo/data/SHA256`, BYTES in all, on
STREAMS connections kept open (restic's uploads in parallel). Each pack is a unique head
before one shared noise buffer: hashing it costs a few ms, not restic's chunking and sealing.
Prints {"bytes": sent} or {"bytes": 0, "err": ...} as one JSON line.

Its own process, not threads of drive.py: drive.py's threads are also the WAL pushers, and 20
threads copying and encrypting 16 MiB packs beside them held the interpreter from them (a WAL
body's arrival at the server took 0.84 s at p99 in the flood's first five seconds, 8 ms alone).
drive.py runs it at the flood clients' nice value, as it does restic.
"""
import base64
import hashlib
import http.client
import json
import os
import ssl
import sys
import threading

sys.dont_write_bytecode = True
PACK_BYTES = 16 << 20


def stream(url: str, ca: str, t: str, auth: str, run: int, k: int, n: int, noise: bytes,
           errs: list) -> int:
    host, port = url.removeprefix("https://").split(":")
    conn = http.client.HTTPSConnection(host, int(port), timeout=600,
                                       context=ssl.create_default_context(cafile=ca))
    sent = 0
    for i in range(n):
        body = (f"{t}-{run}-{k}-{i}-".encode() + os.urandom(16) + noise)[:PACK_BYTES]
        try:
            conn.request("POST", f"/{t}/repo/data/{hashlib.sha256(body).hexdigest()}", body=body,
                         headers={"Authorization": auth, "Content-Type": "application/octet-stream"})
            r = conn.getresponse()
            text = r.read()
        except (OSError, http.client.HTTPException) as e:
            errs.append(repr(e))
            return sent
        if r.status != 200:
            errs.append(f"{r.status} {text[:200]!r}")
            return sent
        sent += len(body)
    conn.close()
    return sent


def main() -> None:
    url, ca, t, token, run, total, streams = sys.argv[1:8]
    run, total, streams = int(run), int(total), int(streams)
    try:   # a name of its own in /proc: drive.py counts its CPU with the flood's clients
        with open("/proc/self/comm", "w") as f:
            f.write("packs")
    except OSError:
        pass
    auth = "Basic " + base64.b64encode(f"{t}:{token}".encode()).decode()
    noise = os.urandom(PACK_BYTES)
    packs = max(1, total // PACK_BYTES)
    per = [packs // streams + (i < packs % streams) for i in range(streams)]
    errs: list = []
    sent = [0] * len(per)

    def one(k: int) -> None:
        sent[k] = stream(url, ca, t, auth, run, k, per[k], noise, errs)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(per)) if per[k]]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(json.dumps({"bytes": 0, "err": errs[0][-600:]} if errs else {"bytes": sum(sent)}))


if __name__ == "__main__":
    main()
