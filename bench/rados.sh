#!/usr/bin/env bash
# ferry cp vs `rados --striper` on the one-node Ceph of scripts/services, same cluster, same run:
# write SIZE bytes from a file, read them back to a file, every copy checked with cmp.
#   bench/rados.sh                          # 512 MiB, ferry's default layout, 3 paired rounds
#   SIZE=64M ROUNDS=1 bench/rados.sh        # smoke
#   LAYOUTS="4M:1:4M 4M:4:4M 1M:8:4M 8M:1:8M 16M:1:16M" bench/rados.sh   # how the default was chosen
# Env: SIZE (512M), ROUNDS (paired rounds, rados first; default 3), SETTLE (seconds of quiet
# before each timed run, 2), LAYOUTS (stripe_unit:stripe_count:object_size for
# ferry; empty: its default), FERRY (default target/release/ferry), POOL (default ferry),
# STORE_BIN (default target/release/examples/throughput: the store without the transfer
# engine, `cargo build --release -p ferry-rados --example throughput`; skipped when missing).
# Uses $CEPH_CONF when set, else starts the cluster itself (and stops it at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY=$(realpath -m "${FERRY:-target/release/ferry}")
STORE_BIN=$(realpath -m "${STORE_BIN:-target/release/examples/throughput}")
[ -x "$FERRY" ] || { echo "rados.sh: no $FERRY (cargo build --release)" >&2; exit 1; }
SIZE=$(numfmt --from=iec "${SIZE:-512M}") ROUNDS=${ROUNDS:-3} SETTLE=${SETTLE:-2} POOL=${POOL:-ferry}
[ "$ROUNDS" -ge 1 ] || { echo "rados.sh: ROUNDS must be at least 1" >&2; exit 2; }
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

# Paired rounds: in each of ROUNDS, rados --striper goes first, then ferry (every layout), so
# both meet the cluster in the same state (the OSD's cache and compaction drift between
# rounds: best-of-N of each tool alone hid a 1.8x behind a 2.5x). Each round's ratio is its
# own; the median of the rounds' ratios is the figure.
# A tool that fails (rados --striper of Ceph 16 aborts at exit now and then) is said, not
# hidden by the timing: the check after each run tells whether its data went through.
secs() { local t0 t1 rc=0; t0=$(date +%s.%N); "$@" || rc=$?; t1=$(date +%s.%N)
  [ "$rc" = 0 ] || echo "warning: $* exited $rc" >&2; echo "$t1 - $t0" | bc; }
mbps() { echo "scale=1; $SIZE / $1 / 1000000" | bc; }
# The untimed work around each run (removing the last copy, checking this one) leaves the OSD
# busy for a while; SETTLE seconds before each timed run let it finish, for either tool alike.
timed() { "$1" pre; sleep "$SETTLE"; local s; s=$(secs "$1" run); "$1" post; echo "$s"; }

rados_put() { case $1 in pre) "${R[@]}" --striper rm bench-rados 2>/dev/null || true ;;
  run) "${R[@]}" --striper put bench-rados "$W/src" ;; post) : ;; esac; }
rados_get() { case $1 in pre) rm -f "$W/out" ;; run) "${R[@]}" --striper get bench-rados "$W/out" ;;
  post) cmp -s "$W/src" "$W/out" || { echo "rados --striper get: data differs" >&2; exit 1; }
    "${R[@]}" --striper rm bench-rados ;; esac; }
ferry_put() { case $1 in pre) "${R[@]}" --striper rm bench-ferry 2>/dev/null || true ;;
  run) "$FERRY" -q cp "$W/src" "rados://$POOL/bench-ferry" ;; post) : ;; esac; }
ferry_get() { case $1 in pre) rm -f "$W/out" ;; run) "$FERRY" -q cp "rados://$POOL/bench-ferry" "$W/out" ;;
  post) cmp -s "$W/src" "$W/out" || { echo "ferry cp: data differs" >&2; exit 1; }
    # What ferry wrote, the striper reads back byte for byte: after ferry's timed read, not
    # before it (the OSD keeps what was read in its cache, and not what was written).
    rm -f "$W/out"; "${R[@]}" --striper get bench-ferry "$W/out" && cmp -s "$W/src" "$W/out" ||
      { echo "rados --striper get of ferry's object: data differs" >&2; exit 1; }
    "${R[@]}" --striper rm bench-ferry ;; esac; }
layout() { unset FERRY_RADOS_STRIPE_UNIT FERRY_RADOS_STRIPE_COUNT FERRY_RADOS_OBJECT_SIZE
  [ "$1" = default ] && return
  IFS=: read -r su sc os <<<"$1"
  export FERRY_RADOS_STRIPE_UNIT=$su FERRY_RADOS_STRIPE_COUNT=$sc FERRY_RADOS_OBJECT_SIZE=$os; }

echo "size $SIZE bytes, $ROUNDS paired rounds (rados first), scratch $D, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-28s %10s %10s %13s %13s\n' round tool "write MB/s" "read MB/s" "ferry/rados w" "ferry/rados r"
RATIOS=$W/ratios
for round in $(seq "$ROUNDS"); do
  rw=$(timed rados_put); rr=$(timed rados_get)
  printf '%-6s %-28s %10s %10s\n' "$round" "rados --striper (4M:1:4M)" "$(mbps "$rw")" "$(mbps "$rr")"
  for l in ${LAYOUTS:-default}; do
    layout "$l"; fw=$(timed ferry_put); fr=$(timed ferry_get)
    xw=$(echo "$rw / $fw" | bc -l) xr=$(echo "$rr / $fr" | bc -l)
    printf '%-6s %-28s %10s %10s %12.2fx %12.2fx\n' "$round" "ferry ($l)" "$(mbps "$fw")" "$(mbps "$fr")" "$xw" "$xr"
    echo "$l $xw $xr" >>"$RATIOS"
  done
done
# median COLUMN LAYOUT: the median, lowest and highest of the rounds' ratios
median() { awk -v l="$2" -v c="$1" '$1 == l { print $c }' "$RATIOS" | sort -g |
  awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); printf "%.2fx (%.2f-%.2fx)", (NR % 2 ? v[m] : (v[m] + v[m + 1]) / 2), v[1], v[NR] }'; }
for l in ${LAYOUTS:-default}; do
  echo "median of $ROUNDS rounds, ferry ($l) / rados --striper: write $(median 2 "$l"), read $(median 3 "$l")"
done
unset FERRY_RADOS_STRIPE_UNIT FERRY_RADOS_STRIPE_COUNT FERRY_RADOS_OBJECT_SIZE
if [ -x "$STORE_BIN" ]; then
  # No file, no digest, one in-memory block reused: what the store itself sustains.
  line=$("$STORE_BIN" "$POOL" $(( SIZE >> 20 )) 16)
  sw=$(sed 's/.*write \([0-9.]*\).*/\1/' <<<"$line") sr=$(sed 's/.*read \([0-9.]*\).*/\1/' <<<"$line")
  printf '%-6s %-28s %10s %10s %12.2fx %12.2fx   (against the last round'"'"'s rados)\n' - "store alone (16 deep)" "$sw" "$sr" \
    "$(echo "$sw / $(mbps "$rw")" | bc -l)" "$(echo "$sr / $(mbps "$rr")" | bc -l)"
fi
