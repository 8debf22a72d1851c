#!/usr/bin/env bash
# ferry serve under load (issue 20): the same restic workload through `ferry serve` and restic's
# rest-server, one after the other, both storing to a local directory; and (TARGETS has s3)
# ferry serve again with its backend on MinIO behind the emulated link (PROFILE, default wan;
# rest-server stores only to a directory). Clients: restic 0.19.1 processes for both servers.
# Everything runs as root inside the network namespace of bench/lib.sh, servers on 127.0.0.1.
#   1. TENANTS repositories (untimed); the RESTORES tenants get a snapshot of BACKUP_MB.
#   2. WAL: every tenant pushes WAL_MIB of fresh data every WAL_INTERVAL s (`restic backup
#      --stdin-from-command`, or WAL_CLIENT=http: a POST of one data file on a kept-alive
#      connection), alone for BASE_SECS, then for FLOOD_SECS under the flood:
#   3. BACKUPS tenants back up BACKUP_MB of fresh random data, again and again (or, with
#      BACKUP_CLIENT=http, POST it as 16 MiB packs on PACK_STREAMS connections each, without
#      restic's CPU, a process per run at CLIENT_NICE (serve/packs.py): what the server does
#      when its clients are other machines); RESTORES tenants
#      restore their snapshot, again and again; one more tenant runs `forget --keep-last 1
#      --prune` once (MAINT=1). Per-tenant backup MB/s -> Jain's index.
#   4. All TENANTS start a backup of SYNC_MB in the same second: failures, refused connections,
#      timeouts, restic's retries, 503s.
# The table shows medians of REPEAT runs per server (the servers take turns); JSON in OUT.
#   bench/serve.sh                                             # the issue's figures: 50 tenants
#   TENANTS=6 BACKUPS=2 RESTORES=1 BASE_SECS=10 FLOOD_SECS=20 BACKUP_MB=50 SYNC_MB=5 bench/serve.sh   # ~3 min
set -euo pipefail
cd "$(dirname "$0")/.."
TENANTS=${TENANTS:-50} BACKUPS=${BACKUPS:-10} RESTORES=${RESTORES:-5}
BASE_SECS=${BASE_SECS:-30} FLOOD_SECS=${FLOOD_SECS:-60} WAL_INTERVAL=${WAL_INTERVAL:-1} WAL_MIB=${WAL_MIB:-1}
BACKUP_MB=${BACKUP_MB:-200} SYNC_MB=${SYNC_MB:-20} TARGETS=${TARGETS:-local s3} REPEAT=${REPEAT:-1}
SERVERS=${SERVERS:-ferry rest-server} WAL_CLIENT=${WAL_CLIENT:-restic} MAINT=${MAINT:-1}
BACKUP_CLIENT=${BACKUP_CLIENT:-restic} PACK_STREAMS=${PACK_STREAMS:-2}
FAST_KDF=${FAST_KDF:-1} KDF_N=${KDF_N:-1024} SYNC_TIMEOUT=${SYNC_TIMEOUT:-600} CLIENT_NICE=${CLIENT_NICE:-19}
OUT=${OUT:-/tmp/ferry-bench-serve.json}
FERRY_PORT=8443 REST_PORT=8000
if [ $(( BACKUPS + RESTORES )) -gt "$TENANTS" ]; then echo "BACKUPS + RESTORES > TENANTS" >&2; exit 2; fi
NS=${NS:-ferryserve}   # its own namespace and scratch dir: other benches (lib.sh's ferrybench) may run too
. bench/lib.sh
scripts/install-tools minio toxiproxy restic rest-server
# The default build (librados is opened only for rados:// places), or FERRY=<a build> (an
# A/B against an older commit, as cp.sh takes it).
[ -n "${FERRY:-}" ] || cargo build --release -p ferry --offline -q
SERVE_FERRY=${FERRY:-target/release/ferry}
# Scratch: one run's store at a time (deleted after it), the WAL and the flood's data, the
# restore targets; a flood of 100 MB/s assumed.
need_mb=$(( TENANTS * (BASE_SECS + FLOOD_SECS) * WAL_MIB * 105 / 100 / WAL_INTERVAL + 100 * FLOOD_SECS
  + 3 * RESTORES * BACKUP_MB + TENANTS * SYNC_MB + BACKUP_MB + SYNC_MB ))
trap 'exit 130' INT TERM
trap link_down EXIT
link_up $(( need_mb / 1000 + 2 ))
W=$BENCH_DIR/work
BIN=$BENCH_DIR/bin; mkdir -p "$BIN" "$W/files" "$W/results"
cp "$SERVE_FERRY" "$BIN/ferry"   # this run's ferry, whatever is rebuilt meanwhile
FERRY=$BIN/ferry RESTIC=$TOOLS/restic
make_certs "$BENCH_DIR/certs"
CERT=$BENCH_DIR/certs/public.crt KEY=$BENCH_DIR/certs/private.key CA=$BENCH_DIR/certs/CAs/ca.crt
export AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin AWS_REGION=us-east-1

# Tenants t01..: a token each (ferry serve --new-token), its SHA-256 for ferry serve and a
# bcrypt line for rest-server (htpasswd -B if installed, else python's crypt: libxcrypt's $2b$).
python3 -c 'import json, sys; n = int(sys.argv[1]); print(json.dumps({"t%0*d" % (max(2, len(str(n))), i): "" for i in range(1, n + 1)}))' \
  "$TENANTS" >"$W/tenants.json"
: >"$W/htpasswd"; : >"$W/tenants.toml"; echo '{}' >"$W/tokens.json"
for t in $(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))))' "$W/tenants.json"); do
  "$FERRY" serve --new-token >"$W/token"
  tok=$(sed -n 's/^token = //p' "$W/token")
  printf '[[serve.tenant]]\nname = "%s"\nrole = "admin"\n%s\n' "$t" "$(grep '^token_sha256' "$W/token")" >>"$W/tenants.toml"
  if command -v htpasswd >/dev/null; then htpasswd -nbB -C 5 "$t" "$tok" | sed '/^$/d' >>"$W/htpasswd"
  else python3 -W ignore -c 'import crypt, sys; print(sys.argv[1] + ":" + crypt.crypt(sys.argv[2], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=32)))' \
    "$t" "$tok" >>"$W/htpasswd"; fi
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d[sys.argv[2]] = sys.argv[3]; json.dump(d, open(sys.argv[1], "w"))' \
    "$W/tokens.json" "$t" "$tok"
done
rm -f "$W/token"
# The chunker polynomial of FAST_KDF's repositories: from one made by restic init.
RESTIC_PASSWORD=pw "$RESTIC" -r "$W/template" init -q >/dev/null
POLY=$(python3 bench/serve/repo.py poly "$W/template" pw)
head -c $(( BACKUP_MB * 1000000 )) /dev/urandom >"$W/files/restore.bin"
head -c $(( SYNC_MB * 1000000 )) /dev/urandom >"$W/files/sync.bin"
REST_VERSION=$("$TOOLS/rest-server" --version | awk '{print $4}')
RESTIC_VERSION=$("$RESTIC" version | awk '{print $2}')
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# The clients' URL for a server on PORT. With HOPS_TRACE they reach it through a traced proxy
# (PORT + 10, no delay, TLS passed through): when a body came in, and when the server took it.
front() { # name port
  URL=https://127.0.0.1:$2
  [ -n "${HOPS_TRACE:-}" ] || return 0
  [ -f "$BENCH_DIR/delay-$1.pid" ] || delay_proxy "$1" "127.0.0.1:$(( $2 + 10 ))" "127.0.0.1:$2" 0
  URL=https://127.0.0.1:$(( $2 + 10 ))
}
start_ferry() { # target store-dir-or-url log
  # Every client comes through the connect-delay proxy, one address: as behind a load
  # balancer, that address may hold every connection (per_address, docs/serve.md).
  { printf '[serve]\nlisten = "127.0.0.1:%s"\nbackend = "%s"\ntls_cert = "%s"\ntls_key = "%s"\n' \
      "$FERRY_PORT" "$2" "$CERT" "$KEY"
    printf '[serve.limits]\nper_address = 4096\n'
    cat "$W/tenants.toml"; } >"$W/ferry.toml"
  ip netns exec "$NS" env AWS_ENDPOINT_URL=http://127.0.0.1:9000 "$FERRY" --config "$W/ferry.toml" serve 2>"$3" &
  echo $! >"$BENCH_DIR/server.pid"
  wait_http "https://127.0.0.1:$FERRY_PORT/healthz" --cacert "$CA"
  front ferry "$FERRY_PORT"
}
start_rest() { # store-dir log
  ip netns exec "$NS" "$TOOLS/rest-server" --listen "127.0.0.1:$REST_PORT" --path "$1" --tls --tls-cert "$CERT" \
    --tls-key "$KEY" --private-repos --htpasswd-file "$W/htpasswd" --prometheus --prometheus-no-auth \
    --log "$2" >"$2.stderr" 2>&1 &
  echo $! >"$BENCH_DIR/server.pid"
  touch "$2"
  wait_http "https://127.0.0.1:$REST_PORT/metrics" --cacert "$CA"
  front rest "$REST_PORT"
}
stop_server() {
  local p; p=$(cat "$BENCH_DIR/server.pid"); kill "$p" 2>/dev/null || :
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || :; rm -f "$BENCH_DIR/server.pid"
}

run() { # server target rep
  local server=$1 target=$2 rep=$3 col=$1-$2 store=$BENCH_DIR/store run=$W/run
  local log=$W/$col-$rep.log
  rm -rf "$store" "$run"; mkdir -p "$store" "$run"
  echo "$col, run $rep" >&2
  case $server-$target in
    ferry-local) start_ferry local "$store" "$log" ;;
    ferry-s3) nsx env AWS_ENDPOINT_URL=http://127.0.0.1:9000 "$FERRY" mkdir s3://bench-serve >/dev/null 2>&1 || :
      start_ferry s3 "s3://bench-serve/run$rep" "$log" ;;
    rest-server-local) start_rest "$store" "$log" ;;
  esac
  python3 - "$run/config.json" <<PY
import json, sys
json.dump({"server": "$col", "url": "$URL", "ca": "$CA", "restic": "$RESTIC", "work": "$run", "log": "$log",
  "pid": $(cat "$BENCH_DIR/server.pid"), "poly": "$POLY", "tokens": json.load(open("$W/tokens.json")),
  "files": {"restore": "$W/files/restore.bin", "sync": "$W/files/sync.bin"},
  "backups": $BACKUPS, "restores": $RESTORES, "base_secs": $BASE_SECS, "flood_secs": $FLOOD_SECS,
  "wal_interval": $WAL_INTERVAL, "wal_mib": $WAL_MIB, "backup_mb": $BACKUP_MB, "sync_mb": $SYNC_MB,
  "wal_client": "$WAL_CLIENT", "backup_client": "$BACKUP_CLIENT", "pack_streams": $PACK_STREAMS,
  "fast_kdf": $FAST_KDF, "kdf_n": $KDF_N, "maint": $MAINT, "maint_snaps": 10,
  "maint_timeout": 1800, "sync_timeout": $SYNC_TIMEOUT, "client_nice": $CLIENT_NICE}, open(sys.argv[1], "w"))
PY
  nsx python3 bench/serve/drive.py "$run/config.json" "$W/results/$col--$rep.json"
  stop_server
  rm -rf "$store" "$run"
  # MinIO's copy of an s3 run, from under it (scratch space; the bucket is ours alone)
  [ "$target" = s3 ] && rm -rf "$BENCH_DIR/minio/bench-serve/run$rep"
  return 0
}

for rep in $(seq "$REPEAT"); do
  for target in $TARGETS; do
    for server in $SERVERS; do
      [ "$server-$target" = rest-server-s3 ] && continue   # rest-server stores to a directory only
      run "$server" "$target" "$rep"
    done
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$W/meta.json" <<PY
import json, sys
json.dump({"tenants": $TENANTS, "backups": $BACKUPS, "restores": $RESTORES, "base_secs": $BASE_SECS,
  "flood_secs": $FLOOD_SECS, "wal_interval": $WAL_INTERVAL, "wal_mib": $WAL_MIB, "backup_mb": $BACKUP_MB,
  "sync_mb": $SYNC_MB, "wal_client": "$WAL_CLIENT", "backup_client": "$BACKUP_CLIENT", "pack_streams": $PACK_STREAMS,
  "fast_kdf": $FAST_KDF, "kdf_n": $KDF_N, "repeat": $REPEAT,
  "client_nice": $CLIENT_NICE, "link_nice": $LINK_NICE, "store_nice": $STORE_NICE, "targets": "$TARGETS", "profile": "$PROFILE", "rtt_ms": $RTT_MS, "conn_mbps": $CONN_MBPS, "agg_mbps": $AGG_MBPS,
  "rest_server": "$REST_VERSION", "restic": "$RESTIC_VERSION", "load_start": "$LOAD_START",
  "load_end": "$(cut -d' ' -f1 /proc/loadavg)"}, open(sys.argv[1], "w"))
PY
# Keep the servers' access logs and drive.py's raw results (every WAL push) beside the JSON:
# the scratch dir goes at exit.
rm -rf "${OUT%.json}-logs"; mkdir -p "${OUT%.json}-logs"
cp "$W"/*.log "$W"/*.stderr "$W"/results/*.json "${OUT%.json}-logs/" 2>/dev/null || :
python3 bench/serve/report.py "$OUT" "$W/meta.json" "$W"/results/*.json
