#!/usr/bin/env python3
"""restic repositories whose key opens in milliseconds, created over restic's REST protocol.

Every restic command opens the repository's key with scrypt, and `restic init` calibrates
scrypt to cost ~0.5 CPU-s (N=32768, r=8, p=8 here): 50 tenants each pushing a WAL stand-in
every second would need 25 cores for scrypt alone. This writes what `restic init` writes (a
config and one key file, restic's own format: AES-256-CTR + Poly1305-AES, scrypt-derived
user key) with a small scrypt N, so the clients' cost is restic's work, not its KDF. Each
repository gets its own random master key and id; the chunker polynomial (which must be
irreducible) is taken from a repository made by `restic init` (TEMPLATE, local).

  repo.py poly TEMPLATE_DIR PASSWORD            prints the template's chunker polynomial
  repo.py init URL USER:PASS POLY [CA] [N]      POST ?create=true, config, keys/ID to URL
The repository password is PASSWORD in env RESTIC_PASSWORD (init) or the argument (poly).
"""
import base64
import datetime
import hashlib
import http.client
import json
import os
import ssl
import sys
import urllib.parse

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.poly1305 import Poly1305


def ecb128(key: bytes, block: bytes) -> bytes:
    e = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return e.update(block) + e.finalize()


def mac(mk: bytes, nonce: bytes, msg: bytes) -> bytes:
    """restic's Poly1305-AES: key r = mk[16:], s = AES-128(mk[:16], nonce)."""
    return Poly1305.generate_tag(mk[16:32] + ecb128(mk[:16], nonce), msg)


def ctr(key: bytes, nonce: bytes, data: bytes) -> bytes:
    c = Cipher(algorithms.AES(key), modes.CTR(nonce)).encryptor()
    return c.update(data) + c.finalize()


def seal(ek: bytes, mk: bytes, plain: bytes) -> bytes:
    nonce = os.urandom(16)
    ct = ctr(ek, nonce, plain)
    return nonce + ct + mac(mk, nonce, ct)


def open_(ek: bytes, mk: bytes, blob: bytes) -> bytes:
    nonce, ct, tag = blob[:16], blob[16:-16], blob[-16:]
    if mac(mk, nonce, ct) != tag:
        raise SystemExit("repo.py: MAC mismatch (wrong password?)")
    return ctr(ek, nonce, ct)


def kdf(password: str, salt: bytes, n: int, r: int, p: int) -> tuple[bytes, bytes]:
    k = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=64, maxmem=1 << 30)
    return k[:32], k[32:64]   # encryption key, MAC key (K for AES-128, then R)


def poly(template: str, password: str) -> str:
    kdir = os.path.join(template, "keys")
    keyfile = json.load(open(os.path.join(kdir, sorted(os.listdir(kdir))[0])))
    uek, umk = kdf(password, base64.b64decode(keyfile["salt"]), keyfile["N"], keyfile["r"], keyfile["p"])
    master = json.loads(open_(uek, umk, base64.b64decode(keyfile["data"])))
    ek = base64.b64decode(master["encrypt"])
    mk = base64.b64decode(master["mac"]["k"]) + base64.b64decode(master["mac"]["r"])
    cfg = json.loads(open_(ek, mk, open(os.path.join(template, "config"), "rb").read()))
    return cfg["chunker_polynomial"]


def init(url: str, cred: str, polynomial: str, ca: str | None, n: int) -> None:
    password = os.environ["RESTIC_PASSWORD"]
    ek, mk = os.urandom(32), os.urandom(32)
    master = {"mac": {"k": base64.b64encode(mk[:16]).decode(), "r": base64.b64encode(mk[16:]).decode()},
              "encrypt": base64.b64encode(ek).decode()}
    salt = os.urandom(64)
    uek, umk = kdf(password, salt, n, 8, 1)
    key = json.dumps({
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(), "username": "bench",
        "hostname": "bench", "kdf": "scrypt", "N": n, "r": 8, "p": 1,
        "salt": base64.b64encode(salt).decode(),
        "data": base64.b64encode(seal(uek, umk, json.dumps(master).encode())).decode(),
    }).encode()
    config = seal(ek, mk, json.dumps({"version": 2, "id": os.urandom(32).hex(),
                                      "chunker_polynomial": polynomial}).encode())
    u = urllib.parse.urlsplit(url.removeprefix("rest:"))
    base = u.path.rstrip("/")
    if u.scheme == "https":
        ctx = ssl.create_default_context(cafile=ca)
        conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=60)
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    auth = "Basic " + base64.b64encode(cred.encode()).decode()
    for path, body in [(base + "/?create=true", b""), (base + "/config", config),
                       (base + "/keys/" + hashlib.sha256(key).hexdigest(), key)]:
        conn.request("POST", path, body=body, headers={
            "Authorization": auth, "Content-Type": "application/octet-stream",
            "Accept": "application/vnd.x.restic.rest.v2"})
        r = conn.getresponse()
        text = r.read()
        if r.status != 200:
            raise SystemExit(f"repo.py: POST {path}: {r.status} {text[:200]!r}")


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["poly"] and len(a) == 3:
        print(poly(a[1], a[2]))
    elif a[:1] == ["init"] and 4 <= len(a) <= 6:
        init(a[1], a[2], a[3], a[4] if len(a) > 4 and a[4] else None, int(a[5]) if len(a) > 5 else 1024)
    else:
        raise SystemExit(__doc__)
