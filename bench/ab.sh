#!/usr/bin/env bash
# ferry against ferry: two (or more) builds copy the same file up and down over one link,
# taking turns, each round on cold caches; one line per build and round (seconds, MB/s,
# requests sent again). For engine changes, where a peer's figure says nothing.
#   PROFILE=wan BINS="/path/old /path/new" REPEAT=3 SIZE=1G bench/ab.sh
# Each run's CPU seconds (user + system) and peak RSS are printed beside its time.
# DIRS=down times downloads only (the first build uploads the object once, untimed).
# LINK_SECS=0 skips measuring the link; LOGS (default: none kept) keeps each run's debug log
# (FERRY_LOG=ferry_transfer=trace adds every request's span; bench/timeline.py reads them).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SIZE=$(numfmt --from=iec "${SIZE:-1G}")
export AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin AWS_REGION=us-east-1
trap 'link_down' EXIT
link_up 4
W=$BENCH_DIR/work
head -c "$SIZE" /dev/urandom > "$W/src"
nsx "$(echo $BINS | cut -d' ' -f1)" mkdir s3://bench >/dev/null 2>&1 || true
if [ "${LINK_SECS:-6}" != 0 ]; then measure_link "${LINK_SECS:-6}" 32; fi
echo "link up ${LINK_UP:-?} down ${LINK_DOWN:-?} rtt ${LINK_RTT:-?}"
DIRS=${DIRS:-up down}
case " $DIRS " in *" up "*) ;; *) nsx "$(echo $BINS | cut -d' ' -f1)" cp "$W/src" s3://bench/obj >/dev/null ;; esac
rate() { [ "$1" = 0 ] && echo 0 || echo "$SIZE/$1/1000000" | bc -l; }
# timed DIR FROM TO: build $b copies FROM to TO, cold caches, the link changing beside it
# (drop); sets secs, and DIR's .json and .$r.err hold its output, log and CPU. Skipped,
# secs=0, when DIRS leaves DIR out.
timed() {
  local dir=$1 s e ch; secs=0; echo '{}' > "$W/$dir.json"; : > "$W/$dir.$r.err"
  case " $DIRS " in *" $dir "*) ;; *) return 0 ;; esac
  rm -f "$W/dst"; sync; echo 3 > /proc/sys/vm/drop_caches
  s=$(date +%s.%N); link_change & ch=$!; echo "start $s" > "$W/$dir.$r.err"
  FERRY_LOG=${FERRY_LOG:-ferry_transfer=debug,ferry_store=debug} nsx /usr/bin/time -a -o "$W/$dir.$r.err" -f "cpu %U %S rss %M" "$b" cp --json "$2" "$3" > "$W/$dir.json" 2>>"$W/$dir.$r.err" || echo "FAIL $dir"
  e=$(date +%s.%N); kill $ch 2>/dev/null || :; wait $ch 2>/dev/null || :; [ "$DROP_AT" = 0 ] || link_restore
  secs=$(echo "$e - $s" | bc); echo "end $e" >> "$W/$dir.$r.err"
}
# cpu_of DIR, retries_of DIR: what the last run of DIR said of itself.
cpu_of() { grep -h '^cpu ' "$W/$1.$r.err" | awk '{printf "%.1f s cpu, %d MiB", $2 + $3, $5 / 1024}' || :; }
retries_of() { grep -o '"retries":[0-9]*' "$W/$1.json" | tail -1 || :; }
for r in $(seq "${REPEAT:-3}"); do
  for b in $BINS; do
    timed up "$W/src" s3://bench/obj; up=$secs
    timed down s3://bench/obj "$W/dst"; down=$secs
    [ "$down" = 0 ] || cmp -s "$W/src" "$W/dst" || echo MISMATCH
    printf "%s run %d %s up %.2f s %.1f MB/s (%s)  down %.2f s %.1f MB/s (%s)  %s %s\n" "$PROFILE" "$r" "$(basename $b)" "$up" "$(rate "$up")" "$(cpu_of up)" "$down" "$(rate "$down")" "$(cpu_of down)" "$(retries_of up)" "$(retries_of down)"
    [ -z "${LOGS:-}" ] || { mkdir -p "$LOGS"; for f in up down; do cp "$W/$f.$r.err" "$LOGS/$(basename "$b").$f.$r.err"; done; }
  done
done
