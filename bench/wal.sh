#!/usr/bin/env bash
# WAL archiving over an emulated WAN (bench/lib.sh): PostgreSQL 15 under a bulk load that
# writes WAL faster than one connection carries, archived by ferry (async, sync) and by
# pgBackRest (sync, async process-max=4, async zst), then restored from a base backup with
# ferry (prefetch, none) and pgBackRest (async, sync) archive-get. Same link, same run. Root.
#   bench/wal.sh                                       # full: WAL_GB=1.5 (86 segments), ~22 min
#   WAL_GB=0.25 LINK_SECS=1 bench/wal.sh               # smoke, ~4 min
#   CONFIGS="ferry-async pgbr-async" RESTORES="ferry-prefetch pgbr-async" bench/wal.sh
# Env: WAL_GB (WAL the load writes, 10^9 B), CONFIGS (archivers, in order; a baseline runs
# before each and after the last), RESTORES, FERRY (default target/release/ferry), OUT
# (JSON, default /tmp/ferry-bench-wal.json), LOGS (default /tmp/ferry-bench-wal.logs),
# SAMPLE (lag sampling period, s), LINK_SECS (0: skip measuring the link), PROCESS_MAX
# (pgBackRest async), FERRY_ENV (VAR=value words added to every ferry command, e.g.
# FERRY_LOG=debug), PROFILE & co (bench/lib.sh).
# What each figure means, and the results: bench/README.md, section "WAL archiving".
set -euo pipefail
FERRY=${FERRY:-$(dirname "$0")/../target/release/ferry}
case $FERRY in */*) FERRY=$(realpath -m "$FERRY") ;; *) FERRY=$(command -v "$FERRY" || echo "$FERRY") ;; esac
cd "$(dirname "$0")/.."
. bench/lib.sh
[ "$(id -u)" = 0 ] || { echo "wal.sh: needs root (netns, tc, runs PostgreSQL as postgres)" >&2; exit 1; }
[ -x "$FERRY" ] || { echo "wal.sh: $FERRY missing: cargo build --release -p ferry, or set FERRY=" >&2; exit 1; }
# The peer, installed on a fresh machine now (as cp.sh installs rclone).
command -v pgbackrest >/dev/null || scripts/install-tools pgbackrest >&2
command -v pgbackrest >/dev/null || { echo "wal.sh: pgbackrest missing (scripts/install-tools pgbackrest failed)" >&2; exit 1; }
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
[ -x "$PGBIN/postgres" ] || { echo "wal.sh: no PostgreSQL 15 in $PGBIN (scripts/install-tools postgres)" >&2; exit 1; }

WAL_GB=${WAL_GB:-1.5}
CONFIGS=${CONFIGS-ferry-async ferry-sync pgbr-sync pgbr-async pgbr-zst-async}
RESTORES=${RESTORES-ferry-prefetch ferry-noprefetch pgbr-async pgbr-sync}
OUT=${OUT:-/tmp/ferry-bench-wal.json}
LOGS=${LOGS:-${OUT%.json}.logs}   # the run's logs and samples are copied here at exit
SAMPLE=${SAMPLE:-0.25}
PROCESS_MAX=${PROCESS_MAX:-4}
# The load: BATCHES inserts of ROWS_PER_BATCH rows, each its own transaction. A row writes
# about 243 B of WAL (PostgreSQL 15: 4 md5 hex strings + a counter): zstd -1 keeps ~39% of
# it, gzip -6 ~44%, lz4 ~69%. md5(g) is deterministic, so every run writes the same WAL.
ROW_WAL_BYTES=243 ROWS_PER_BATCH=${ROWS_PER_BATCH:-250000}
ROWS=$(awk -v g="$WAL_GB" -v r=$ROW_WAL_BYTES -v b="$ROWS_PER_BATCH" 'BEGIN { n = int(g * 1e9 / r / b + 0.5); if (n < 1) n = 1; print n * b }')
BATCHES=$(( ROWS / ROWS_PER_BATCH ))
PORT=5440

# Where each restore takes its base backup and archive from, and so which archivers' objects
# and base backups are kept after their run (the others are deleted: tmpfs is RAM).
restore_src() { case $1 in ferry-*) echo ferry-async ;; pgbr-*) echo pgbr-async ;; esac; }
needed_src() { local r; for r in $RESTORES; do [ "$(restore_src "$r")" = "$1" ] && return 0; done; return 1; }
for r in $RESTORES; do
  case $r in ferry-prefetch|ferry-noprefetch|pgbr-async|pgbr-sync) ;; *) echo "unknown restore $r" >&2; exit 2 ;; esac
  [[ " $CONFIGS " == *" $(restore_src "$r") "* ]] || { echo "restore $r needs config $(restore_src "$r") in CONFIGS" >&2; exit 2; }
done
for c in $CONFIGS; do
  case $c in ferry-async|ferry-sync|pgbr-sync|pgbr-async|pgbr-zst-async|pgbr-lz4-async) ;; *) echo "unknown config $c" >&2; exit 2 ;; esac
done

# Scratch (tmpfs if RAM allows): one primary (table ~0.9x WAL, pg_wal up to 1x+), one restore
# at a time, and the archives we keep (~0.45x WAL each).
gib=$(awk -v g="$WAL_GB" 'BEGIN { print int(4 * g + 2) }')
BENCH_DIR=$(bench_dir "$gib")
CGROOT=/sys/fs/cgroup/cpuacct/$NS CGVIEW=$BENCH_DIR/cg   # see cg_new
REPORTED='' LINK_UP=0 LINK_DOWN=0 LINK_RTT='?'
exec 3>&1 4>&2
cleanup() {
  [ -n "$REPORTED" ] || [ ! -d "${W:-/nonexistent}" ] || report >&3 2>&4 || :
  stop_pg 2>/dev/null || :
  # Keep the small files (samples, command logs, agent and PostgreSQL logs) past link_down.
  if [ -d "${W:-/nonexistent}" ]; then rm -rf "$LOGS"; cp -r "$W" "$LOGS"; fi
  umount "$CGVIEW" 2>/dev/null || :
  link_down
  if [ -d "$CGROOT" ]; then   # this shell back to the root group, then ours go
    local g p; for p in $$ $(cat "$CGROOT/cgroup.procs"); do echo "$p" >"${CGROOT%/*}/cgroup.procs" 2>/dev/null || :; done
    for g in "$CGROOT"/*/; do [ -d "$g" ] && cg_rm "$(basename "$g")"; done
    rmdir "$CGROOT" 2>/dev/null || :
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
umount "$CGVIEW" 2>/dev/null || :   # a killed run's bind mount
START_DATE=$(date -u +%FT%TZ)
# This shell joins $CGROOT, so everything the bench starts (servers, PostgreSQL, archivers)
# counts there: the rest of the machine's CPU use is other people's work (see cpu_snap).
if [ -d /sys/fs/cgroup/cpuacct ] && mkdir -p "$CGROOT" 2>/dev/null; then echo $$ >"$CGROOT/cgroup.procs"; fi
LINK_TLS=1 link_up "$gib"   # pgBackRest speaks S3 only over https: so do both, same path
W=$BENCH_DIR/work BIN=$BENCH_DIR/bin PGD=$BENCH_DIR/pg SOCK=$BENCH_DIR/pg
mkdir -p "$BIN" "$PGD" "$BENCH_DIR/home" "$BENCH_DIR/base"
if [ -d "$CGROOT" ] && mkdir -p "$CGVIEW"; then
  mount --bind "$CGROOT" "$CGVIEW" || echo "wal.sh: no cgroup view; archiver CPU will be sampled" >&2
  # The far end of the link (MinIO, toxiproxy) shares these cores with PostgreSQL, as it
  # would not on a real WAN: its CPU during each load is measured apart ($CGROOT/link).
  mkdir -p "$CGROOT/link"
  for p in "$BENCH_DIR"/minio.pid "$BENCH_DIR"/toxiproxy.pid; do echo "$(<"$p")" >"$CGROOT/link/cgroup.procs"; done
fi
cp "$FERRY" "$BIN/ferry"
cp bench/wal/timed.sh "$BIN/timed.sh"
chmod 755 "$BIN" "$BIN"/*
chown postgres: "$PGD" "$BENCH_DIR/home" "$BENCH_DIR/base" "$W"

# As postgres, inside the namespace, clean environment. setpriv and env exec: $! is the program.
AS_PG=(ip netns exec "$NS" setpriv --reuid=postgres --regid=postgres --init-groups
       env -i PATH=/usr/bin:/bin HOME="$BENCH_DIR/home" LC_ALL=C.UTF-8 TZ=UTC)
psql_() { "${AS_PG[@]}" "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -p $PORT -d postgres "$@"; }
now() { echo "$EPOCHREALTIME"; }
DATA=''
stop_pg() { [ -z "$DATA" ] || [ ! -f "$DATA/postmaster.pid" ] || "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; }
# CPU of the archiver side: a cpuacct cgroup per configuration, which timed.sh joins before it
# runs the command (cgroup v1 lets the owner of cgroup.procs move its own processes); the
# agents and async processes the commands start stay in it. `ip netns exec` mounts a fresh
# /sys without the cgroup trees, so the commands see ours through a bind mount, $CGVIEW.
# cg_new prints "-" when there is no cpuacct (timed.sh then skips it).
cg_new() { # name -> path of its cgroup.procs as the commands see it, or -
  mountpoint -q "$CGVIEW" && mkdir -p "$CGROOT/$1" 2>/dev/null || { echo -; return; }
  chown postgres: "$CGROOT/$1/cgroup.procs"; echo "$CGVIEW/$1/cgroup.procs"
}
cg_cpu() { [ -f "$CGROOT/$1/cpuacct.usage" ] && awk '{ printf "%.2f", $1 / 1e9 }' "$CGROOT/$1/cpuacct.usage" || :; }
cg_ns() { if [ -f "$CGROOT/$1/cpuacct.usage" ]; then echo "$(<"$CGROOT/$1/cpuacct.usage")"; else echo 0; fi; }
cg_rm() { # name: whatever still runs in it (ours: only our commands join it), then the group
  local d=$CGROOT/$1 p _
  [ -d "$d" ] || return 0
  for _ in 1 2 3 4 5 6; do   # (cgroupfs files have size 0: read them)
    p=$(cat "$d/cgroup.procs"); [ -n "$p" ] || break
    # shellcheck disable=SC2086  # one pid per word
    kill $p 2>/dev/null || :; sleep 0.5
  done
  rmdir "$d" 2>/dev/null || :
}
# CPU counters now: "busy-ticks steal-ticks ours-ns" (/proc/stat's total line: user nice
# system idle iowait irq softirq steal; ours: the bench's cgroup). Two snapshots give the CPU
# other people's work took meanwhile (busy - ours) and the hypervisor's steal.
cpu_snap() {
  local _ u n s q sq st ours=0
  read -r _ u n s _ _ q sq st _ </proc/stat
  [ -f "$CGROOT/cpuacct.usage" ] && ours=$(<"$CGROOT/cpuacct.usage")
  echo "$(( u + n + s + q + sq )) $st $ours"
}
cpu_others() { # snap0 snap1 secs -> "others% steal%" of all cores
  awk -v a="$1" -v b="$2" -v t="$3" -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    busy = (y[1] - x[1]) / hz; steal = (y[2] - x[2]) / hz; ours = (y[3] - x[3]) / 1e9
    o = busy - ours; if (o < 0) o = 0
    printf "%.0f %.0f", 100 * o / (t * n), 100 * steal / (t * n) }'
}
# Background processes of ours still in the namespace (agents lingering after their idle
# time, pgBackRest's async processes): by pid, matched on their command line.
kill_ns() { # pattern
  local p
  for p in $(ip netns pids "$NS"); do
    grep -qa -- "$1" "/proc/$p/cmdline" 2>/dev/null && kill "$p" 2>/dev/null || :
  done
}

ENV_S3=(AWS_ENDPOINT_URL=https://127.0.0.1:9000 AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin
        AWS_REGION=us-east-1 FERRY_CA_CERT="$MINIO_CA")
ferry_ns() { ip netns exec "$NS" env "${ENV_S3[@]}" "$BIN/ferry" "$@"; }
ferry_ns mkdir s3://bench >/dev/null

# bin/ferry-NAME: ferry with one configuration's environment, as archive/restore command.
ferry_wrapper() { # name repo-prefix [VAR=value...]
  local name=$1 prefix=$2; shift 2
  mkdir -p "$BENCH_DIR/spool/$name"; chown postgres: "$BENCH_DIR/spool" "$BENCH_DIR/spool/$name"
  {
    echo '#!/bin/sh'
    # FERRY_ENV: extra VAR=value words for every ferry command, split on purpose.
    # shellcheck disable=SC2086
    printf 'export %q\n' "${ENV_S3[@]}" "FERRY_REPO=s3://bench/$prefix" "FERRY_WAL_SPOOL=$BENCH_DIR/spool/$name" "$@" ${FERRY_ENV:-}
    echo "exec $BIN/ferry \"\$@\""
  } >"$BIN/ferry-$name"
  chmod 755 "$BIN/ferry-$name"
  echo "$BIN/ferry-$name"
}
# bin/pgbr-NAME: pgbackrest with its own config file (repo path /NAME in bucket bench).
pgbr_wrapper() { # name repo-path pg-path [option=value...]
  local name=$1 repo=$2 pgpath=$3 d=$BENCH_DIR/pgbr/$1; shift 3
  mkdir -p "$d/log" "$d/lock" "$d/spool"
  {
    echo "[global]"
    printf '%s\n' repo1-type=s3 repo1-s3-endpoint=127.0.0.1 repo1-storage-port=9000 repo1-s3-bucket=bench \
      repo1-s3-region=us-east-1 repo1-s3-key=minioadmin repo1-s3-key-secret=minioadmin repo1-s3-uri-style=path \
      "repo1-storage-ca-file=$MINIO_CA" "repo1-path=/$repo" "log-path=$d/log" "lock-path=$d/lock" \
      "spool-path=$d/spool" log-level-console=warn log-level-file=info "$@"
    echo "[bench]"
    printf '%s\n' "pg1-path=$pgpath" "pg1-socket-path=$SOCK" "pg1-port=$PORT"
  } >"$d/pgbackrest.conf"
  chown -R postgres: "$BENCH_DIR/pgbr"
  printf '#!/bin/sh\nexec pgbackrest --config=%s --stanza=bench "$@"\n' "$d/pgbackrest.conf" >"$BIN/pgbr-$name"
  chmod 755 "$BIN/pgbr-$name"
  echo "$BIN/pgbr-$name"
}

new_cluster() { # name archive_command: initdb, our settings, started
  DATA=$PGD/$1
  "${AS_PG[@]}" "$PGBIN/initdb" -N -U postgres --auth=trust -D "$DATA" >"$W/$1.initdb.log"
  cat >>"$DATA/postgresql.conf" <<EOF
# bench/wal.sh
listen_addresses = ''
port = $PORT
unix_socket_directories = '$SOCK'
shared_buffers = 256MB
wal_level = replica
max_wal_size = 4GB
checkpoint_timeout = 30min
wal_compression = off
synchronous_commit = on
fsync = on
archive_mode = on
archive_command = '$2'
log_checkpoints = on
EOF
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$W/$1.pg.log" -w start >/dev/null
}

# One archiver configuration: fresh cluster, base backup (its WAL archived when it returns,
# so the archiver starts idle), the load with the samplers on, then pg_switch_wal() and the
# drain. Results go to $W/NAME/: meta (key=value), lag (sampler rows), cmd.log, procs.json.
run_config() { # name
  local c=$1 cmd d=$W/$1 lagpid procpid t0 t1 l0 l1 ld0 cs0 cs1 a0 a1 k0 k1 drain cg t
  mkdir -p "$d"; chown postgres: "$d"
  echo "== $c (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
  cg=$(cg_new "$c"); t="$BIN/timed.sh $d/cmd.log $cg"
  case $c in
    baseline*) cmd=true ;;
    ferry-async) cmd="$t $(ferry_wrapper "$c" "$c" FERRY_WAL_ASYNC=true) wal-push %p" ;;
    ferry-sync) cmd="$t $(ferry_wrapper "$c" "$c" FERRY_WAL_ASYNC=false) wal-push %p" ;;
    pgbr-sync) cmd="$t $(pgbr_wrapper "$c" "$c" "$PGD/$c" archive-async=n) archive-push %p" ;;
    pgbr-async) cmd="$t $(pgbr_wrapper "$c" "$c" "$PGD/$c" archive-async=y process-max="$PROCESS_MAX") archive-push %p" ;;
    pgbr-zst-async|pgbr-lz4-async)
      local ct=${c#pgbr-}; ct=${ct%-async}
      cmd="$t $(pgbr_wrapper "$c" "$c" "$PGD/$c" archive-async=y process-max="$PROCESS_MAX" compress-type="$ct") archive-push %p" ;;
  esac
  new_cluster "$c" "$cmd"
  case $c in pgbr-*) "${AS_PG[@]}" "$BIN/pgbr-$c" stanza-create >"$W/$c.stanza.log" 2>&1 ||
                       { cat "$W/$c.stanza.log" >&2; return 1; } ;; esac
  psql_ -c "create table t (id bigint, a text, b text)"
  rm -rf "$BENCH_DIR/base/$c"
  "${AS_PG[@]}" "$PGBIN/pg_basebackup" -h "$SOCK" -p $PORT -D "$BENCH_DIR/base/$c" -X none -c fast 2>"$W/$c.basebackup.log"
  # Samplers: lag every SAMPLE s (one psql, \watch), archiver processes' RSS every 0.25 s.
  echo "select extract(epoch from clock_timestamp()), pg_walfile_name(pg_current_wal_lsn()), coalesce(last_archived_wal, '-'), failed_count from pg_stat_archiver \\watch $SAMPLE" |
    "${AS_PG[@]}" "$PGBIN/psql" -X -At -F ' ' -h "$SOCK" -p $PORT -d postgres >"$d/lag" 2>"$d/lag.err" &
  lagpid=$!
  python3 bench/wal/procs.py "$NS" "$d/procs.json" 0.25 &
  procpid=$!
  l0=$(psql_ -c "select pg_current_wal_lsn()")
  ld0=$(cut -d' ' -f1 /proc/loadavg)
  cs0=$(cpu_snap) a0=$(cg_ns "$c") k0=$(cg_ns link)
  t0=$(now)
  {
    local b lo
    for ((b = 0; b < BATCHES; b++)); do
      lo=$(( b * ROWS_PER_BATCH + 1 ))
      echo "insert into t select g, md5(g::text) || md5((g*7)::text) || md5((g*11)::text) || md5((g*13)::text), 'ferry wal bench row ' || g from generate_series($lo, $(( lo + ROWS_PER_BATCH - 1 ))) g;"
    done
  } | psql_
  t1=$(now)
  cs1=$(cpu_snap) a1=$(cg_ns "$c") k1=$(cg_ns link)
  l1=$(psql_ -c "select pg_current_wal_lsn()")
  # The drain: switch to a new segment, then wait (server side, 20 ms polls) until the
  # archiver reports the switched one archived. stats_fetch_consistency=none: fresh stats
  # on every read inside the one transaction.
  drain=$(psql_ 2>&1 <<'EOF'
set stats_fetch_consistency = none;
do $$
declare target text; t0 timestamptz := clock_timestamp();
begin
  target := pg_walfile_name(pg_switch_wal());
  loop
    exit when (select coalesce(last_archived_wal, '') from pg_stat_archiver) >= target;
    if clock_timestamp() - t0 > interval '45 min' then raise exception 'drain: % not archived after 45 min', target; end if;
    perform pg_sleep(0.02);
  end loop;
  raise notice 'DRAIN % %', target, extract(epoch from clock_timestamp() - t0);
end $$;
EOF
  ) || { echo "$drain" >&2; drain="x DRAIN - -1"; }
  sleep 0.5   # a last lag sample after the drain
  kill -INT $lagpid 2>/dev/null || :; kill $procpid 2>/dev/null || :
  wait $lagpid $procpid 2>/dev/null || :
  read -r _ _ target dsecs <<<"$(grep DRAIN <<<"$drain" | tail -1)"
  {
    echo "name=$c"
    echo "archive_command=$cmd"
    echo "load_start=$t0"; echo "load_end=$t1"; echo "loadavg=$ld0 $(cut -d' ' -f1 /proc/loadavg)"
    echo "others_steal_pct=$(cpu_others "$cs0" "$cs1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")"
    echo "load_cpu_archiver=$(awk -v a="$a0" -v b="$a1" 'BEGIN{printf "%.2f", (b-a)/1e9}')"
    echo "load_cpu_link=$(awk -v a="$k0" -v b="$k1" 'BEGIN{printf "%.2f", (b-a)/1e9}')"
    echo "wal_bytes=$(psql_ -c "select pg_wal_lsn_diff('$l1', '$l0')")"
    echo "rows=$ROWS"
    echo "drain_target=$target"; echo "drain_secs=$dsecs"
    echo "failed_count=$(psql_ -c "select failed_count from pg_stat_archiver")"
    echo "archived_count=$(psql_ -c "select archived_count from pg_stat_archiver")"
  } >"$d/meta"
  echo "   load $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s, drain ${dsecs} s (to $target);" \
       "others' CPU, steal: $(sed -n 's/^others_steal_pct=//p' "$d/meta") % of $(nproc) cores" >&2
  stop_pg
  # What the archive holds: every segment up to the drain target, no holes?
  case $c in
    ferry-*) ferry_ns wal-status --json --repo "s3://bench/$c" >"$d/archive.json" 2>"$d/archive.err" || : ;;
    pgbr-*) "${AS_PG[@]}" "$BIN/pgbr-$c" info --output=json >"$d/archive.json" 2>"$d/archive.err" || : ;;
  esac
  [ "${c#baseline}" != "$c" ] || echo "stored_bytes=$(du -sb "$BENCH_DIR/minio/bench/$c" | cut -f1)" >>"$d/meta"
  sleep 1; echo "cpu_secs=$(cg_cpu "$c")" >>"$d/meta"; cg_rm "$c"; kill_ns wal-agent; kill_ns pgbackrest
  "${AS_PG[@]}" rm -rf "$DATA"; DATA=''
  needed_src "$c" || { rm -rf "${BENCH_DIR:?}/minio/bench/$c" "${BENCH_DIR:?}/base/$c"; }
  # The agent's log is kept for the report (errors, retries).
  [ ! -f "$BENCH_DIR/spool/$c/agent.log" ] || cp "$BENCH_DIR/spool/$c/agent.log" "$d/agent.log"
  [ ! -d "$BENCH_DIR/pgbr/$c/log" ] || cp -r "$BENCH_DIR/pgbr/$c/log" "$d/pgbr-log"
  return 0
}

# One restore: the base backup of its source, restore_command through timed.sh, replay to the
# end of the archive (no target; promotion at the end of the archive). Timed from pg_ctl
# start to pg_is_in_recovery() = false; then the row count says whether it replayed it all.
run_restore() { # name
  local r=$1 src cmd d=$W/restore-$1 t0 t1 rows cg t
  src=$(restore_src "$r")
  mkdir -p "$d"; chown postgres: "$d"
  echo "== restore $r (from $src)" >&2
  cg=$(cg_new "restore-$r"); t="$BIN/timed.sh $d/cmd.log $cg"
  case $r in
    ferry-prefetch) cmd="$t $(ferry_wrapper "restore-$r" "$src" FERRY_WAL_ASYNC=true) wal-fetch %f %p" ;;
    ferry-noprefetch) cmd="$t $(ferry_wrapper "restore-$r" "$src" FERRY_WAL_PREFETCH=0) wal-fetch %f %p" ;;
    pgbr-async) cmd="$t $(pgbr_wrapper "restore-$r" "$src" "$PGD/restore-$r" archive-async=y process-max="$PROCESS_MAX") archive-get %f %p" ;;
    pgbr-sync) cmd="$t $(pgbr_wrapper "restore-$r" "$src" "$PGD/restore-$r" archive-async=n) archive-get %f %p" ;;
  esac
  DATA=$PGD/restore-$r
  cp -a "$BENCH_DIR/base/$src" "$DATA"
  chown -R postgres: "$DATA"; chmod 700 "$DATA"
  cat >>"$DATA/postgresql.conf" <<EOF
# bench/wal.sh restore
archive_mode = off
restore_command = '$cmd'
recovery_target_timeline = 'latest'
EOF
  "${AS_PG[@]}" touch "$DATA/recovery.signal"
  python3 bench/wal/procs.py "$NS" "$d/procs.json" 0.25 &
  local procpid=$!
  local cs0 cs1
  cs0=$(cpu_snap)
  t0=$(now)
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$W/restore-$r.pg.log" -W start >/dev/null
  # recovery.signal goes at the end of redo; then poll the server until it is out of recovery.
  local deadline=$(( SECONDS + 2700 ))
  while [ -e "$DATA/recovery.signal" ] && [ $SECONDS -lt $deadline ]; do
    [ -f "$DATA/postmaster.pid" ] || sleep 0.5
    [ -f "$DATA/postmaster.pid" ] || { echo "   postgres exited during recovery" >&2; break; }
    sleep 0.05
  done
  until [ "$(psql_ -c "select pg_is_in_recovery()" 2>/dev/null)" = f ] || [ $SECONDS -ge $deadline ]; do
    [ -f "$DATA/postmaster.pid" ] || break
    sleep 0.05
  done
  t1=$(now)
  cs1=$(cpu_snap)
  kill $procpid 2>/dev/null || :; wait $procpid 2>/dev/null || :
  rows=$(psql_ -c "select count(*) from t" 2>/dev/null || echo -1)
  {
    echo "name=$r"; echo "source=$src"; echo "restore_command=$cmd"
    echo "start=$t0"; echo "end=$t1"; echo "rows=$rows"; echo "rows_expected=$ROWS"
    echo "others_steal_pct=$(cpu_others "$cs0" "$cs1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")"
    # PostgreSQL's own figure: "redo done at ... elapsed: N s"
    echo "redo_secs=$(sed -n 's/.*redo done at .*elapsed: \([0-9.]*\) s.*/\1/p' "$W/restore-$r.pg.log" | tail -1)"
  } >"$d/meta"
  echo "   replay $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s, rows $rows of $ROWS" >&2
  stop_pg || :
  echo "cpu_secs=$(cg_cpu "restore-$r")" >>"$d/meta"; cg_rm "restore-$r"; kill_ns wal-agent; kill_ns pgbackrest
  [ ! -f "$BENCH_DIR/spool/restore-$r/agent.log" ] || cp "$BENCH_DIR/spool/restore-$r/agent.log" "$d/agent.log"
  [ ! -d "$BENCH_DIR/pgbr/restore-$r/log" ] || cp -r "$BENCH_DIR/pgbr/restore-$r/log" "$d/pgbr-log"
  "${AS_PG[@]}" rm -rf "$DATA"; DATA=''
}

report() {
  REPORTED=1
  python3 bench/wal/report.py "$W" "$OUT" \
    "wal_gb=$WAL_GB" "rows=$ROWS" "batches=$BATCHES" "configs=${SEQ:-}" "restores=$RESTORES" \
    "profile=$PROFILE" "rtt_ms=$RTT_MS" "conn_mbps=$CONN_MBPS" "agg_mbps=$AGG_MBPS" \
    "link_up=$LINK_UP" "link_down=$LINK_DOWN" "link_rtt=$LINK_RTT" "link_how=${LINK_HOW:-measured}" \
    "load_start=$LOAD0" "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" "date=$START_DATE" \
    "ferry=$("$FERRY" --version | sed -n 1p)" "pgbackrest=$(pgbackrest version)" \
    "postgres=$("$PGBIN/postgres" --version)" "sample_s=$SAMPLE" "process_max=$PROCESS_MAX" \
    "logs=$LOGS"
}

if [ "${LINK_SECS:-4}" != 0 ]; then
  echo "measuring link (${LINK_SECS:-4} s per direction, 32 streams)..." >&2
  measure_link "${LINK_SECS:-4}" 32
else
  LINK_UP=$AGG_MBPS LINK_DOWN=$AGG_MBPS LINK_RTT=$RTT_MS LINK_HOW="nominal (LINK_SECS=0)"
fi
echo "load: $BATCHES x $ROWS_PER_BATCH rows (~$WAL_GB GB of WAL) per configuration; scratch $BENCH_DIR" >&2

# A baseline before every archiver and one after the last: the machine is shared, and each
# archiver's cost is taken against the two loads on either side of it.
SEQ='' i=0
for c in $CONFIGS; do i=$(( i + 1 )); SEQ+="baseline-$i $c "; done
SEQ+="baseline-$(( i + 1 ))"
for c in $SEQ; do run_config "$c"; done
for r in $RESTORES; do run_restore "$r"; done
report
