#!/usr/bin/env bash
# ferry against ferry on a WAL bulk load: SEGS segments of 16 MiB (random behind valid
# headers) wait as .ready files; a loop calls `ferry wal-push %p` for each in order, as
# PostgreSQL's archiver does, for each build in turn; one line per build and round (seconds,
# MB/s, segments archived, the push agent's peak RSS read from /proc before it exits).
#   PROFILE=wan BINS="/path/old /path/new" REPEAT=3 SEGS=64 bench/ab-wal.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
export AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin AWS_REGION=us-east-1
trap 'link_down' EXIT
link_up 4
W=$BENCH_DIR/work
RCLONE=$TOOLS/rclone
# rclone empties the bucket between runs: without it every run after the first would find its
# segments already archived and time the read-back instead (seen on a fresh machine).
[ -x "$RCLONE" ] || scripts/install-tools rclone >&2
export RCLONE_CONFIG=/dev/null RCLONE_CONFIG_B_TYPE=s3 RCLONE_CONFIG_B_PROVIDER=Minio \
  RCLONE_CONFIG_B_ENDPOINT=http://127.0.0.1:9000 RCLONE_CONFIG_B_ACCESS_KEY_ID=minioadmin \
  RCLONE_CONFIG_B_SECRET_ACCESS_KEY=minioadmin
segs=${SEGS:-64}
bench/wal/segments.py "$W/pg_wal" "$segs" >"$W/segments"
first=$(echo $BINS | cut -d' ' -f1)
nsx "$first" mkdir s3://bench >/dev/null 2>&1 || true
if [ "${LINK_SECS:-6}" != 0 ]; then measure_link "${LINK_SECS:-6}" 32; fi
echo "link up ${LINK_UP:-?} down ${LINK_DOWN:-?} rtt ${LINK_RTT:-?}"
archiver='while read -r f; do "$1" -q wal-push --spool "$2" --repo "$3" "$0/$f" || exit 1
  mv "$0/archive_status/$f.ready" "$0/archive_status/$f.done"; done <"$4"'
for r in $(seq "${REPEAT:-3}"); do
  for b in $BINS; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    s=$(date +%s.%N)
    FERRY_LOG=${FERRY_LOG:-info} nsx bash -c "$archiver" "$W/pg_wal" "$b" "$W/spool" s3://bench/wal "$W/segments" || echo FAIL
    e=$(date +%s.%N)
    pid=$(pgrep -f "wal-agent push" | head -1 || :)
    peak=$( [ -n "$pid" ] && awk '/VmHWM/{print "agent_peak_rss_mib=" int($2/1024)}' /proc/$pid/status || :)
    rm -rf "$W/spool/out"; timeout 60 flock "$W/spool/push.lock" true || :
    [ -z "${LOGS:-}" ] || { mkdir -p "$LOGS"; cp "$W/spool/agent.log" "$LOGS/$(basename "$b").agent.$r.log" 2>/dev/null || :; }
    rm -rf "$W/spool"
    for f in "$W/pg_wal/archive_status/"*.done; do [ -e "$f" ] || continue; mv "$f" "${f%.done}.ready"; done
    got=$(nsx "$RCLONE" lsf -R --files-only b:bench/wal/wal 2>/dev/null | grep -c '^000000010000' || :)
    t=$(echo "$e - $s" | bc)
    printf "%s run %d %s wal %.2f s %.1f MB/s segs %s/%s %s\n" "$PROFILE" "$r" "$(basename $b)" "$t" "$(echo "$segs*16777216/$t/1000000" | bc -l)" "$got" "$segs" "$peak"
    nsx "$RCLONE" delete b:bench >/dev/null 2>&1 || { echo "ab-wal.sh: cannot empty the bucket" >&2; exit 1; }
    drop_trash
    [ "$got" = "$segs" ] || echo "FAIL: $got of $segs segments archived"
  done
done
