#!/usr/bin/env bash
# ferry vs rclone over an emulated WAN (bench/lib.sh), same link, same run. Needs root.
#   bench/cp.sh                                  # full: 3 GiB, 10k x 64 KiB, 10 GiB stream
#   SIZE=32M FILES=200 STREAM=128M LINK_SECS=2 bench/cp.sh   # smoke, ~1 min
#   PROFILES="wan slow lfp lossy drop asym" TESTS=big bench/cp.sh   # every link, one table each
# Env: PROFILE / RTT_MS / CONN_MBPS / AGG_MBPS (link), SIZE (big file; per profile about 30 s
# of the link up: 3G at 100 MB/s, 1G asym, 96M slow), FILES and FILE_KB (small files), STREAM
# (stdin upload; 0 skips), FERRY (default target/release/ferry), RCLONE, TESTS (subset of:
# big small stream wal; wal: SIZE of 16 MiB WAL segments through wal-push as PostgreSQL's
# archiver calls it), LINK_SECS (0: skip link measurement), REPEAT (runs of each tool, taking
# turns; the table shows medians; default 3), GCS=1 (the big test also runs ferry-gcs and
# rclone-gcs: gs:// on fake-gcs-server, an emulator, through the same link: toxiproxy :9002 ->
# :9200).
set -euo pipefail
if [ -n "${PROFILES:-}" ]; then
  failed=0
  for p in $PROFILES; do PROFILE=$p PROFILES='' "$0" || { echo "profile $p: FAILED" >&2; failed=1; }; done
  exit $failed
fi
FERRY=${FERRY:-$(dirname "$0")/../target/release/ferry}
case $FERRY in */*) FERRY=$(realpath -m "$FERRY") ;; *) FERRY=$(command -v "$FERRY" || echo "$FERRY") ;; esac
cd "$(dirname "$0")/.."
. bench/lib.sh
[ "$(id -u)" = 0 ] || { echo "cp.sh: needs root (netns, tc)" >&2; exit 1; }

# About half a minute of bytes on the link's slower way (up), so that what every request
# pays once (round trips at start and end, the tuner's climb) stays a few per cent of the
# time: lfp's three 200 ms round trips alone are 6 % of a 1 GiB copy at 100 MB/s.
case ${PROFILE:-wan} in slow) : "${SIZE:=96M}" ;; asym) : "${SIZE:=1G}" ;; lan|custom) : "${SIZE:=1G}" ;; *) : "${SIZE:=3G}" ;; esac
SIZE=$(numfmt --from=iec "$SIZE")
REPEAT=${REPEAT:-3}
FILES=${FILES:-10000} FILE_KB=${FILE_KB:-64}
STREAM=$(numfmt --from=iec "${STREAM:-10G}")
TESTS=${TESTS:-big small stream}
RCLONE=${RCLONE:-$TOOLS/rclone}
# The pinned newest, built from its module (Debian's is years old): on a fresh machine, now.
[ -x "$RCLONE" ] || "$(dirname "$0")/../scripts/install-tools" rclone >&2
export RCLONE_CONFIG=/dev/null RCLONE_CONFIG_B_TYPE=s3 RCLONE_CONFIG_B_PROVIDER=Minio \
  RCLONE_CONFIG_B_ENDPOINT=http://127.0.0.1:9000 RCLONE_CONFIG_B_ACCESS_KEY_ID=minioadmin \
  RCLONE_CONFIG_B_SECRET_ACCESS_KEY=minioadmin
# ferry's usual log, and why a request was sent again (rclone logs its retries unasked).
export FERRY_LOG=${FERRY_LOG:-off,ferry=warn,ferry_transfer=warn,ferry_store=warn,ferry_transfer::retry=debug}
export AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=minioadmin \
  AWS_SECRET_ACCESS_KEY=minioadmin AWS_REGION=us-east-1
GCS=${GCS:-0}
if [ "$GCS" = 1 ]; then   # the emulator needs no token: ferry sends none, rclone's gcs is anonymous
  export STORAGE_EMULATOR_HOST=http://127.0.0.1:9002 RCLONE_CONFIG_G_TYPE='google cloud storage' \
    RCLONE_CONFIG_G_ANONYMOUS=true RCLONE_CONFIG_G_ENDPOINT=http://127.0.0.1:9002/storage/v1/ \
    RCLONE_CONFIG_G_PROJECT_NUMBER=bench
  [ -x "$TOOLS/fake-gcs-server" ] || { echo "GCS=1: $TOOLS/fake-gcs-server missing (scripts/install-tools gcs)" >&2; exit 1; }
  FAKE_GCS_VERSION=$(sed -n 's/^FAKE_GCS_VERSION=\([^ ]*\).*/\1/p' scripts/install-tools)
fi
# Which rclone flags "tuned" means, per test (download knobs differ from upload ones).
TUNED_UP="--s3-upload-concurrency 16 --s3-chunk-size 8M"
TUNED_DOWN="--multi-thread-streams 16"
TUNED_SMALL="--transfers 32 --checkers 32"

HAVE_FERRY=1
[ -x "$FERRY" ] || { HAVE_FERRY=0; echo "ferry: $FERRY not found; skipping ferry steps (cargo build --release, or set FERRY=)" >&2; }

# Scratch at any one time: big source + its object + one download, or the stream object;
# plus the small files twice (objects are deleted after each test).
big=$(( 3 * SIZE > STREAM ? 3 * SIZE : STREAM ))
gib=$(( (big + 2 * FILES * FILE_KB * 1024) / (1 << 30) + 1 ))
BENCH_DIR=$(bench_dir "$gib")
RES='' LINK_UP=0 LINK_DOWN=0 LINK_RTT='?' LINK_HOW=measured
rclone_version=$("$RCLONE" version | sed -n 1p)
exec 3>&1 4>&2   # the original stdout/stderr, for the exit trap
trap '[ -z "$RES" ] || [ -n "${REPORTED:-}" ] || report >&3 2>&4 || :; link_down' EXIT  # partial table on abort
trap 'exit 130' INT TERM
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
link_up "$gib"
W=$BENCH_DIR/work RES=$BENCH_DIR/results
: >"$RES"

if [ "${LINK_SECS:-8}" != 0 ]; then
  echo "measuring link (${LINK_SECS:-8} s per direction, 32 streams)..." >&2
  measure_link "${LINK_SECS:-8}" 32
else
  LINK_UP=$AGG_MBPS LINK_DOWN=$AGG_DOWN_MBPS LINK_RTT=$RTT_MS LINK_HOW="nominal (LINK_SECS=0)"
fi

# run TEST TOOL DIR BYTES FILES CMD...: time CMD in the namespace, record secs, peak RSS,
# retries and ok|FAIL (from $TIMED instead when CMD times its own inner command; a failed
# run's time file starts with "Command exited...", so take the last line). The drop
# profile's link change runs beside it.
run() {
  local t=$1 tool=$2 dir=$3 bytes=$4 files=$5 st=ok secs rss retries changer; shift 5
  local log=$W/$t.$tool.log
  echo "  $t $tool: $*" >&2
  rm -f "$W/time" "${TIMED:-$W/time}"   # never report a previous run's figures
  link_change & changer=$!
  # Not via nsx: redirecting a function call redirects this shell, traps included.
  ip netns exec "$NS" /usr/bin/time -f '%e %M' -o "$W/time" "$@" >"$log" 2>&1 || st=FAIL
  kill "$changer" 2>/dev/null || :; wait "$changer" 2>/dev/null || :
  [ "$DROP_AT" = 0 ] || link_restore
  read -r secs rss < <(tail -1 "${TIMED:-$W/time}")
  # ferry --json says how many requests it sent again; rclone logs each retry.
  retries=$(grep -o '"retries":[0-9]*' "$log" | tail -1 | cut -d: -f2)
  [ -n "$retries" ] || retries=$(grep -ci 'retry' "$log" || :)
  echo "$t $tool $dir $bytes $files ${secs:-0} ${rss:-0} $st ${retries:-0}" >>"$RES"
  echo "    $st: ${secs:-?} s, peak RSS $(( ${rss:-0} / 1024 )) MiB, retries ${retries:-0}" >&2
  # Why each request was sent again (ferry's log says, with FERRY_LOG as above).
  [ "${retries:-0}" = 0 ] || grep -m8 'retrying' "$log" | sed 's/^/      /' >&2 || :
  [ $st = ok ] || { echo "  FAILED ($log):" >&2; tail -3 "$log" | sed 's/^/    /' >&2; return 1; }
}
bad() { echo "  MISMATCH: $*" >&2; sed -i '$ s/ ok \([0-9]*\)$/ BAD \1/' "$RES"; }  # mark the last result
same() { cmp -s "$1" "$2" || bad "$2 differs from $1"; }
filesum() { find "$1" -type f -printf '%s\n' | awk '{n++; b+=$1} END {print n+0 "/" b+0}'; }
samedir() { # src dst: same file count and bytes (ferry's and rclone's dir layouts may differ)
  local a b; a=$(filesum "$1") b=$(filesum "$2")
  [ "$a" = "$b" ] || bad "$2 has $b (files/bytes), $1 has $a"
}
# Empty the bucket after each tool's runs: the objects live in RAM (tmpfs). Not "purge
# PREFIX": for a single object such as b:bench/stream that deletes nothing.
clean() { nsx "$RCLONE" delete b:bench >/dev/null 2>&1 || true; drop_trash; }
clean_gcs() { nsx "$RCLONE" delete g:bench >/dev/null 2>&1 || true; }   # fake-gcs-server keeps them in RAM

nsx "$RCLONE" mkdir b:bench
[ "$GCS" = 0 ] || nsx "$RCLONE" mkdir g:bench
[ $HAVE_FERRY = 0 ] || nsx "$FERRY" mkdir s3://bench >/dev/null 2>&1 || true  # exists already: fine

# Table: medians over the REPEAT runs of each tool: rate, share of the measured link (for the
# drop profile, of what the link carried on average over the run), retries per GB, and each
# tool against each other tool in the same test ("speed x / RSS x": >1 speed = faster than
# that peer, <1 RSS = leaner).
report() {
  [ -s "$RES" ] || return 0
  REPORTED=1
  echo
  echo "$rclone_version; ferry: $([ $HAVE_FERRY = 1 ] && "$FERRY" --version 2>/dev/null | sed -n 1p || echo "not run ($FERRY missing)")"
  echo "link $PROFILE: RTT ${RTT_MS} ms, ${CONN_MBPS} MB/s per connection, ${AGG_MBPS} MB/s up / ${AGG_DOWN_MBPS} MB/s down aggregate;" \
       "$LINK_HOW up $LINK_UP MB/s, down $LINK_DOWN MB/s, RTT $LINK_RTT ms (1 MB = 10^6 B)"
  [ "$DROP_AT" = 0 ] || echo "link change: aggregate to a quarter after ${DROP_AT} s, back after ${DROP_FOR} s more"
  [ "$LOSSY" = 0 ] || echo "lossy: 2% of connections reset after 3 s; data sliced to ~1400 B chunks"
  awk -v up="$LINK_UP" -v down="$LINK_DOWN" -v at="$DROP_AT" -v span="$DROP_FOR" '
    function share(d,  full, low) {
      if (at == 0 || d <= 0) return 1
      full = (d < at ? d : at) + (d > at + span ? d - at - span : 0)
      low = d > at ? ((d < at + span ? d : at + span) - at) : 0
      return (full + 0.25 * low) / d }
    function median(list,  v, n, i, j, x) {
      n = split(list, v, " ")
      for (i = 2; i <= n; i++) { x = v[i] + 0; for (j = i - 1; j >= 1 && v[j] + 0 > x; j--) v[j+1] = v[j]; v[j+1] = x }
      return n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2 }
    { k = $1 SUBSEP $2
      if (!(k in first)) { first[k] = NR; order[++nk] = k; t[k]=$1; tool[k]=$2; dir[k]=$3; b[k]=$4; f[k]=$5 }
      runs[k]++; retr[k] += $9
      if ($8 == "ok" && $6 > 0) { secs[k] = secs[k] " " $6; rss[k] = rss[k] " " $7; okn[k]++ } else bad[k]++
      if (!($2 in seen)) { seen[$2]=1; tools[++nt]=$2 } }
    END {
      printf "%-11s %-13s %4s %8s %7s %8s %6s %8s %9s", "test", "tool", "runs", "secs", "MB/s", "files/s", "link%", "RSS MiB", "retry/GB"
      for (j=1; j<=nt; j++) printf "  %-17s", "vs " tools[j]
      print ""
      for (i=1; i<=nk; i++) { k = order[i]
        if (okn[k] > 0) { s[k] = median(secs[k]); m[k] = median(rss[k]); mbs[k] = b[k]/s[k]/1e6 } }
      for (i=1; i<=nk; i++) { k = order[i]
        printf "%-11s %-13s %4s", t[k], tool[k], okn[k]+0 "/" runs[k]
        if (!(k in mbs)) { printf " %8s  all failed (see logs)\n", "-"; continue }
        lim = (dir[k] == "up" ? up : down) * share(s[k])
        printf " %8.2f %7.1f %8s %6s %8.0f %9.1f", s[k], mbs[k], (f[k] > 1 ? sprintf("%.0f", f[k]/s[k]) : "-"),
          (lim > 0 ? sprintf("%.0f%%", 100*mbs[k]/lim) : "-"), m[k]/1024, retr[k] / (runs[k] * b[k] / 1e9)
        for (j=1; j<=nt; j++) {
          p = t[k] SUBSEP tools[j]
          if (tools[j] == tool[k]) c = "-"
          else if (!(p in mbs)) c = "n/a"
          else c = sprintf("%.2fx / %.2fx", mbs[k]/mbs[p], m[k]/m[p])
          printf "  %-17s", c
        }
        print (bad[k] ? "  (" bad[k] " failed)" : "")
      } }' "$RES"
  echo "load average at start: $LOAD0; at end: $(cut -d' ' -f1-3 /proc/loadavg) (2 cores: >1.5 means other work competed)"
  echo "medians of $REPEAT runs per tool, taking turns; vs <peer>: speed ratio / peak-RSS ratio (speed >1: faster than peer; RSS <1: leaner)."
  echo "rclone-tuned: up $TUNED_UP; down $TUNED_DOWN; small files $TUNED_SMALL"
  [ "$GCS" = 0 ] || echo "ferry-gcs, rclone-gcs: gs:// on fake-gcs-server $FAKE_GCS_VERSION (an emulator, objects in memory; its" \
    "server side is not Google's) via toxiproxy :9002, shaped as :9000; rclone-gcs: anonymous, default flags"
}

for t in $TESTS; do case $t in
big)
  echo "big: $(numfmt --to=iec "$SIZE") random file, $REPEAT rounds" >&2
  head -c "$SIZE" /dev/urandom >"$W/big"
  mkdir -p "$W/dl"
  for _ in $(seq "$REPEAT"); do
    if [ $HAVE_FERRY = 1 ]; then
      run up-big ferry up "$SIZE" 1 "$FERRY" cp --json "$W/big" s3://bench/ferry/big || true
      run down-big ferry down "$SIZE" 1 "$FERRY" cp --json s3://bench/ferry/big "$W/dl/big" && same "$W/big" "$W/dl/big" || true
      rm -rf "$W/dl"/*; clean
    fi
    run up-big rclone up "$SIZE" 1 "$RCLONE" copy "$W/big" b:bench/rclone/ || true
    run down-big rclone down "$SIZE" 1 "$RCLONE" copy b:bench/rclone/big "$W/dl/" && same "$W/big" "$W/dl/big" || true
    rm -rf "$W/dl"/*; clean
    # shellcheck disable=SC2086
    run up-big rclone-tuned up "$SIZE" 1 "$RCLONE" copy $TUNED_UP "$W/big" b:bench/rclone/ || true
    # shellcheck disable=SC2086
    run down-big rclone-tuned down "$SIZE" 1 "$RCLONE" copy $TUNED_DOWN b:bench/rclone/big "$W/dl/" && same "$W/big" "$W/dl/big" || true
    rm -rf "$W/dl"/*; clean
    [ "$GCS" = 1 ] || continue
    if [ $HAVE_FERRY = 1 ]; then
      run up-big ferry-gcs up "$SIZE" 1 "$FERRY" cp --json "$W/big" gs://bench/ferry/big || true
      run down-big ferry-gcs down "$SIZE" 1 "$FERRY" cp --json gs://bench/ferry/big "$W/dl/big" && same "$W/big" "$W/dl/big" || true
      rm -rf "$W/dl"/*; clean_gcs
    fi
    run up-big rclone-gcs up "$SIZE" 1 "$RCLONE" copy "$W/big" g:bench/rclone/ || true
    run down-big rclone-gcs down "$SIZE" 1 "$RCLONE" copy g:bench/rclone/big "$W/dl/" && same "$W/big" "$W/dl/big" || true
    rm -rf "$W/dl"/*; clean_gcs
  done
  rm -rf "$W/dl" "$W/big" ;;
small)
  echo "small: $FILES x $FILE_KB KiB files" >&2
  mkdir -p "$W/small"
  # One urandom read split into files: 10k separate head calls would take longer than the test.
  head -c $(( FILES * FILE_KB * 1024 )) /dev/urandom | (cd "$W/small" && split -a 6 -d -b "${FILE_KB}K" - f)
  bytes=$(( FILES * FILE_KB * 1024 ))
  if [ $HAVE_FERRY = 1 ]; then
    run up-small ferry up "$bytes" "$FILES" "$FERRY" cp --json -r "$W/small" s3://bench/small-ferry/ || true
    # No trailing slash on the source: ferry 0.1.0 rejects "s3://b/p/" as key "p//".
    run down-small ferry down "$bytes" "$FILES" "$FERRY" cp --json -r s3://bench/small-ferry "$W/dl/" && samedir "$W/small" "$W/dl" || true
    rm -rf "$W/dl"; clean
  fi
  for tool in rclone rclone-tuned; do
    flags=; [ $tool = rclone ] || flags=$TUNED_SMALL
    # shellcheck disable=SC2086
    run up-small $tool up "$bytes" "$FILES" "$RCLONE" copy $flags "$W/small" b:bench/small-rclone/ || true
    # shellcheck disable=SC2086
    run down-small $tool down "$bytes" "$FILES" "$RCLONE" copy $flags b:bench/small-rclone/ "$W/dl/" && samedir "$W/small" "$W/dl" || true
    rm -rf "$W/dl"; clean
  done
  rm -rf "$W/small" ;;
stream)
  [ "$STREAM" -gt 0 ] || continue
  echo "stream: $(numfmt --to=iec "$STREAM") from /dev/urandom on stdin (RSS is the uploader's)" >&2
  # $0 = byte count; the uploader is timed, head is not.
  pipe='head -c "$0" /dev/urandom | /usr/bin/time -f "%e %M" -o "$1" "${@:2}"'
  if [ $HAVE_FERRY = 1 ]; then
    TIMED=$W/time.pipe run up-stream ferry up "$STREAM" 1 bash -c "$pipe" "$STREAM" "$W/time.pipe" "$FERRY" cp - s3://bench/stream || true
    clean
  fi
  TIMED=$W/time.pipe run up-stream rclone up "$STREAM" 1 bash -c "$pipe" "$STREAM" "$W/time.pipe" "$RCLONE" rcat b:bench/stream || true
  clean ;;
wal)
  # A WAL bulk load: SIZE of 16 MiB segments waiting in pg_wal, pushed as PostgreSQL's archiver
  # does (one `wal-push %p` after the other, each marked done when it returns; the agent that
  # the first one starts pushes the rest ahead). Beside it, the same files by `ferry cp -r` and
  # rclone: what the engine and a generic copier do with them.
  segs=$(( SIZE >> 24 > 4 ? SIZE >> 24 : 4 )); bytes=$(( segs << 24 ))
  echo "wal: $segs segments of 16 MiB (random, behind valid headers), $REPEAT rounds" >&2
  bench/wal/segments.py "$W/pg_wal" "$segs" >"$W/segments"
  mkdir -p "$W/segs"; while read -r f; do ln "$W/pg_wal/$f" "$W/segs/$f"; done <"$W/segments"  # without archive_status
  # $0 pg_wal, $1 ferry, $2 spool, $3 archive, $4 list of segments
  archiver='while read -r f; do "$1" -q wal-push --spool "$2" --repo "$3" "$0/$f" || exit 1
    mv "$0/archive_status/$f.ready" "$0/archive_status/$f.done"; done <"$4"'
  for _ in $(seq "$REPEAT"); do
    if [ $HAVE_FERRY = 1 ]; then
      run up-wal ferry-wal-push up "$bytes" "$segs" bash -c "$archiver" "$W/pg_wal" "$FERRY" "$W/spool" \
        s3://bench/wal "$W/segments" || true
      # Without its spool's out/ the agent exits; its lock says when (flock, as ferry's own).
      rm -rf "$W/spool/out"; timeout 60 flock "$W/spool/push.lock" true || :
      cp "$W/spool/agent.log" "$W/up-wal.agent.log" 2>/dev/null || :; rm -rf "$W/spool"
      for f in "$W/pg_wal/archive_status/"*.done; do [ -e "$f" ] || continue; mv "$f" "${f%.done}.ready"; done
      got=$(nsx "$RCLONE" lsf -R --files-only b:bench/wal/wal 2>/dev/null | grep -c '^000000010000' || :)
      [ "$got" = "$segs" ] || bad "the archive holds ${got:-0} segments of $segs"
      clean
      run up-wal ferry up "$bytes" "$segs" "$FERRY" cp --json -r "$W/segs" s3://bench/walcp || true
      clean
    fi
    run up-wal rclone up "$bytes" "$segs" "$RCLONE" copy "$W/segs" b:bench/walcp/ || true
    clean
    # shellcheck disable=SC2086
    run up-wal rclone-tuned up "$bytes" "$segs" "$RCLONE" copy $TUNED_SMALL "$W/segs" b:bench/walcp/ || true
    clean
  done
  rm -rf "$W/pg_wal" "$W/segs" "$W/segments" ;;
*) echo "unknown test $t (big small stream wal)" >&2; exit 2 ;;
esac; done

report
