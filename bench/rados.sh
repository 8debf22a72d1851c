#!/usr/bin/env bash
# ferry cp vs `rados --striper` on the one-node Ceph of scripts/services, same cluster, same run:
# write SIZE bytes from a file, read them back to a file, every copy checked with cmp.
#   bench/rados.sh                          # 1 GiB, ferry's default layout
#   SIZE=256M RUNS=1 bench/rados.sh         # smoke
#   LAYOUTS="4M:1:4M 4M:4:4M 1M:8:4M 8M:1:8M 16M:1:16M" bench/rados.sh   # how the default was chosen
# Env: SIZE, RUNS (best of; default 3), LAYOUTS (stripe_unit:stripe_count:object_size for
# ferry; empty: its default), FERRY (default target/release/ferry), POOL (default ferry),
# STORE_BIN (default target/release/examples/throughput: the store without the transfer
# engine, `cargo build --release -p ferry-rados --example throughput`; skipped when missing).
# Uses $CEPH_CONF when set, else starts the cluster itself (and stops it at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY=$(realpath -m "${FERRY:-target/release/ferry}")
STORE_BIN=$(realpath -m "${STORE_BIN:-target/release/examples/throughput}")
[ -x "$FERRY" ] || { echo "rados.sh: no $FERRY (cargo build --release --features ferry/rados)" >&2; exit 1; }
SIZE=$(numfmt --from=iec "${SIZE:-1G}") RUNS=${RUNS:-3} POOL=${POOL:-ferry}
# Scratch in RAM when there is room, so the local disk never sets the pace.
D=/dev/shm
[ "$(df -Pk /dev/shm | awk 'NR==2{print $4}')" -gt $(( 3 * SIZE / 1024 + 1048576 )) ] || D=/tmp
W=$(mktemp -d "$D/ferry-bench-rados.XXXXXX") STARTED=0
cleanup() { rm -rf "$W"; [ "$STARTED" = 0 ] || scripts/services down ceph >/dev/null 2>&1 || true; }
trap cleanup EXIT
if [ -z "${CEPH_CONF:-}" ]; then
  export FERRY_SERVICES_DIR=${FERRY_SERVICES_DIR:-$(mktemp -d /tmp/ferry-bench-services.XXXXXX)}
  STARTED=1; eval "$(scripts/services up ceph)"
fi
R=(rados -c "$CEPH_CONF" -p "$POOL")
head -c "$SIZE" /dev/urandom >"$W/src"

# best SECONDS-VAR CMD...: the fastest of RUNS runs (cleanup between runs is not timed)
secs() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
mbps() { echo "scale=1; $SIZE / $1 / 1000000" | bc; }
best() { local b=999999 s; for _ in $(seq "$RUNS"); do "${@:2}" pre; s=$(secs "${@:2}" run); "${@:2}" post
  (( $(echo "$s < $b" | bc) )) && b=$s; done; printf -v "$1" %s "$b"; }

rados_put() { case $1 in pre) "${R[@]}" --striper rm bench-rados 2>/dev/null || true ;;
  run) "${R[@]}" --striper put bench-rados "$W/src" ;; post) : ;; esac; }
rados_get() { case $1 in pre) rm -f "$W/out" ;; run) "${R[@]}" --striper get bench-rados "$W/out" ;;
  post) cmp -s "$W/src" "$W/out" || { echo "rados --striper get: data differs" >&2; exit 1; } ;; esac; }
ferry_put() { case $1 in pre) "${R[@]}" --striper rm bench-ferry 2>/dev/null || true ;;
  run) "$FERRY" -q cp "$W/src" "rados://$POOL/bench-ferry" ;; post) : ;; esac; }
ferry_get() { case $1 in pre) rm -f "$W/out" ;; run) "$FERRY" -q cp "rados://$POOL/bench-ferry" "$W/out" ;;
  post) cmp -s "$W/src" "$W/out" || { echo "ferry cp: data differs" >&2; exit 1; } ;; esac; }

echo "size $SIZE bytes, best of $RUNS, scratch $D, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
best RW rados_put; best RR rados_get
printf '%-32s %9s %9s\n' tool "write MB/s" "read MB/s"
printf '%-32s %9s %9s\n' "rados --striper (4M:1:4M)" "$(mbps "$RW")" "$(mbps "$RR")"
"${R[@]}" --striper rm bench-rados
for l in ${LAYOUTS:-default}; do
  if [ "$l" != default ]; then
    IFS=: read -r su sc os <<<"$l"
    export FERRY_RADOS_STRIPE_UNIT=$su FERRY_RADOS_STRIPE_COUNT=$sc FERRY_RADOS_OBJECT_SIZE=$os
  fi
  best FW ferry_put
  # What ferry wrote, the striper reads back byte for byte.
  "${R[@]}" --striper get bench-ferry "$W/out" && cmp -s "$W/src" "$W/out" ||
    { echo "rados --striper get of ferry's object: data differs" >&2; exit 1; }
  best FR ferry_get
  printf '%-32s %9s %9s   ferry/rados: write %.2fx read %.2fx\n' "ferry ($l)" "$(mbps "$FW")" "$(mbps "$FR")" \
    "$(echo "$RW / $FW" | bc -l)" "$(echo "$RR / $FR" | bc -l)"
  "${R[@]}" --striper rm bench-ferry
done
unset FERRY_RADOS_STRIPE_UNIT FERRY_RADOS_STRIPE_COUNT FERRY_RADOS_OBJECT_SIZE
if [ -x "$STORE_BIN" ]; then
  # No file, no MD5, one in-memory block reused: what the store itself sustains.
  line=$("$STORE_BIN" "$POOL" $(( SIZE >> 20 )) 16)
  sw=$(sed 's/.*write \([0-9.]*\).*/\1/' <<<"$line") sr=$(sed 's/.*read \([0-9.]*\).*/\1/' <<<"$line")
  printf '%-32s %9s %9s   store/rados: write %.2fx read %.2fx\n' "store alone (default, 16 deep)" "$sw" "$sr" \
    "$(echo "$sw / $(mbps "$RW")" | bc -l)" "$(echo "$sr / $(mbps "$RR")" | bc -l)"
fi
