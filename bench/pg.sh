#!/usr/bin/env bash
# PostgreSQL base backups: ferry beside pgBackRest (Debian's 2.45), side by side in one run.
# pgbench at SCALE (100: ~1.5 GB) on PostgreSQL 15; for each target, one cluster archives its
# WAL to BOTH tools (archive_command runs `ferry wal-push %p && pgbackrest archive-push %p`,
# each into its own repository), and at each point both tools back up the same data:
#   1. full backup        ferry pg backup (first)        pgbackrest backup --type=full
#   2. pgbench load changing CHANGE_PCT % of the rows of pgbench_accounts (SCALE*1000*CHANGE_PCT
#      transactions, -c 2; each updates one random account), the archive drained, then the incremental:
#                         ferry pg backup (second)       pgbackrest backup --type=incr
#   3. restore of the latest backup into an empty directory, then PostgreSQL started on it,
#      recovering through the tool's own restore_command; rows of pgbench_accounts checked.
# Seconds, stored bytes (what the tool reports it wrote for that backup), peak RSS of the
# tool's process tree (sum over its processes, sampled every 50 ms: bench/pg/run.py).
# Targets: local (a repository directory) and s3 (MinIO over TLS through the emulated WAN,
# bench/lib.sh, PROFILE=wan: RTT 80 ms, 8 MB/s per connection, 100 MB/s aggregate).
# REPEAT rounds (3), each every target from a fresh copy of the cluster and fresh repositories;
# which tool goes first alternates between rounds; the report gives medians and ranges.
#   bench/pg.sh                                         # as root: scale 100, 1 % change, 3 rounds
#   SCALE=10 REPEAT=1 TARGETS=local bench/pg.sh         # quick trial
# Env: SCALE, CHANGE_PCT (1; 0: BENCH_LOAD_SECS of load instead), BENCH_LOAD_SECS (300),
# CLIENTS (pgbench -c, 2), BENCH_RATE (pgbench -R tps; unset: as fast as it goes), REPEAT (3),
# TARGETS ("local s3"), FERRY (binary,
# default target/release/ferry), OUT (JSON, /tmp/ferry-bench-pg.json), LOGS (copied there at
# exit), PROCESS_MAX (pgBackRest, 2), PGBR_COMPRESS (zst), PGBR_CIPHER (aes-256-cbc, or none:
# ferry always encrypts, so pgBackRest does too by default), PGBR_OPTS (more option=value
# words for pgbackrest.conf [global]), PROFILE & co (bench/lib.sh).
# The results: bench/README.md, section "PostgreSQL backup and restore".
set -euo pipefail
FERRY=${FERRY:-$(dirname "$0")/../target/release/ferry}
case $FERRY in */*) FERRY=$(realpath -m "$FERRY") ;; *) FERRY=$(command -v "$FERRY" || echo "$FERRY") ;; esac
cd "$(dirname "$0")/.."
NS=${NS:-ferrypg}   # its own namespace and scratch dir: other benches (lib.sh's ferrybench) may run too
. bench/lib.sh
[ "$(id -u)" = 0 ] || { echo "pg.sh: needs root (netns, tc, runs PostgreSQL as postgres)" >&2; exit 1; }
[ -x "$FERRY" ] || { echo "pg.sh: $FERRY missing: cargo build --release -p ferry, or set FERRY=" >&2; exit 1; }
# The peer, installed on a fresh machine now (as cp.sh installs rclone).
command -v pgbackrest >/dev/null || scripts/install-tools pgbackrest >&2
command -v pgbackrest >/dev/null || { echo "pg.sh: pgbackrest missing (scripts/install-tools pgbackrest failed)" >&2; exit 1; }
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
[ -x "$PGBIN/postgres" ] || { echo "pg.sh: no PostgreSQL 15 in $PGBIN (scripts/install-tools postgres)" >&2; exit 1; }

SCALE=${SCALE:-100} BENCH_LOAD_SECS=${BENCH_LOAD_SECS:-300} CLIENTS=${CLIENTS:-2}
CHANGE_PCT=${CHANGE_PCT:-1} REPEAT=${REPEAT:-3}
# pgbench -t per client: 1 % of the accounts is SCALE*1000 transactions in all.
TXNS_EACH=$(awk -v s="$SCALE" -v p="$CHANGE_PCT" -v c="$CLIENTS" 'BEGIN{printf "%d", s * 1000 * p / c}')
TARGETS=${TARGETS:-local s3}
OUT=${OUT:-/tmp/ferry-bench-pg.json}
LOGS=${LOGS:-${OUT%.json}.logs}
PROCESS_MAX=${PROCESS_MAX:-2} PGBR_COMPRESS=${PGBR_COMPRESS:-zst} PGBR_CIPHER=${PGBR_CIPHER:-aes-256-cbc}
PORT=5450 RPORT=5451
for t in $TARGETS; do case $t in local|s3) ;; *) echo "unknown target $t (local|s3)" >&2; exit 2 ;; esac; done

# Scratch (tmpfs if RAM allows): the template cluster, the live one with its pg_wal, both
# repositories (twice for s3: MinIO's copy), one restore at a time. ~16 MB per scale unit.
gib=$(( SCALE * 16 * 6 / 1024 + 3 ))
BENCH_DIR=$(bench_dir "$gib")
exec 3>&1 4>&2
DATA='' REPORTED=''
cleanup() {
  [ -n "$REPORTED" ] || [ ! -s "${RESULTS:-/nonexistent}" ] || report >&3 2>&4 || :
  stop_pg 2>/dev/null || :
  if [ -n "${RDATA:-}" ] && [ -f "$RDATA/postmaster.pid" ]; then "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$RDATA" -m immediate -w stop >/dev/null 2>&1 || :; fi
  [ -z "${NS:-}" ] || kill_ns pgbackrest; [ -z "${NS:-}" ] || kill_ns wal-agent
  if [ -d "${W:-/nonexistent}" ]; then rm -rf "$LOGS"; cp -r "$W" "$LOGS"; fi
  link_down
}
trap cleanup EXIT
trap 'exit 130' INT TERM
START_DATE=$(date -u +%FT%TZ) LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
FERRY_VERSION="$("$FERRY" --version | sed -n 1p), binary of $(date -u -r "$FERRY" +%FT%TZ) (HEAD at the run: $(git rev-parse --short HEAD 2>/dev/null))"
if [[ " $TARGETS " == *" s3 "* ]]; then
  LINK_TLS=1 link_up "$gib"   # pgBackRest speaks S3 only over https: so do both, same path
else
  link_up "$gib"              # the namespace only (MinIO idles): the same code path for both
fi
W=$BENCH_DIR/work BIN=$BENCH_DIR/bin PGD=$BENCH_DIR/pg SOCK=$BENCH_DIR/pg
RESULTS=$W/results.jsonl
mkdir -p "$BIN" "$PGD" "$BENCH_DIR/home" "$W"; : >"$RESULTS"
cp "$FERRY" "$BIN/ferry"; chmod 755 "$BIN" "$BIN"/*
chown postgres: "$PGD" "$BENCH_DIR/home" "$W"
if [ "$TXNS_EACH" -gt 0 ]; then LOAD_ARGS=(-t "$TXNS_EACH"); LOAD_DESC="$CHANGE_PCT % of the accounts ($TXNS_EACH transactions x $CLIENTS clients)"
else LOAD_ARGS=(-T "$BENCH_LOAD_SECS"); LOAD_DESC="${BENCH_LOAD_SECS} s x $CLIENTS clients"; fi
echo "pg.sh: scale $SCALE, load $LOAD_DESC, $REPEAT rounds, targets: $TARGETS; scratch $BENCH_DIR" >&2
{ echo "== start $START_DATE"; uptime; ps aux --sort=-%cpu | head -12; } >"$W/machine.log"

# As postgres, inside the namespace, clean environment. setpriv and env exec: $! is the program.
AS_PG=(ip netns exec "$NS" setpriv --reuid=postgres --regid=postgres --init-groups
       env -i PATH=/usr/bin:/bin HOME="$BENCH_DIR/home" LC_ALL=C.UTF-8 TZ=UTC)
psql_() { "${AS_PG[@]}" "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -p "${P:-$PORT}" -d postgres "$@"; }
stop_pg() { [ -z "$DATA" ] || [ ! -f "$DATA/postmaster.pid" ] || "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; }
kill_ns() { # pattern: our background processes in the namespace (agents, pgBackRest async)
  local p
  for p in $(ip netns pids "$NS" 2>/dev/null); do
    grep -qa -- "$1" "/proc/$p/cmdline" 2>/dev/null && kill "$p" 2>/dev/null || :
  done
}
loadavg() { cut -d' ' -f1 /proc/loadavg; }

ENV_S3=(AWS_ENDPOINT_URL=https://127.0.0.1:9000 AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin
        AWS_REGION=us-east-1 FERRY_CA_CERT="${MINIO_CA:-}")
echo ferry-bench-pw >"$BENCH_DIR/password"; chown postgres: "$BENCH_DIR/password"; chmod 600 "$BENCH_DIR/password"

# The template: pgbench -i once, stopped; every target starts from a copy of it.
TEMPLATE=$PGD/template
echo "== pgbench -i -s $SCALE (load average $(loadavg))" >&2
"${AS_PG[@]}" "$PGBIN/initdb" -N -U postgres --auth=trust -D "$TEMPLATE" >"$W/initdb.log"
cat >>"$TEMPLATE/postgresql.conf" <<EOF
# bench/pg.sh
listen_addresses = ''
port = $PORT
unix_socket_directories = '$SOCK'
shared_buffers = 256MB
wal_level = replica
max_wal_size = 2GB
archive_mode = off
log_checkpoints = on
EOF
DATA=$TEMPLATE
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$W/template.pg.log" -w start >/dev/null
t0=$EPOCHREALTIME
"${AS_PG[@]}" "$PGBIN/pgbench" -i -I dtGvp -s "$SCALE" -q -h "$SOCK" -p $PORT -U postgres postgres >"$W/pgbench-init.log" 2>&1 ||
  { tail "$W/pgbench-init.log" >&2; exit 1; }
psql_ -c checkpoint
stop_pg; DATA=''
# The init leaves up to max_wal_size of recycled segments (named after the shutdown
# checkpoint's) in pg_wal, and every copy would carry them (tmpfs is RAM): keep only the
# segment the checkpoint is in, all a cleanly shut down cluster needs.
redo=$("$PGBIN/pg_controldata" "$TEMPLATE" | sed -n "s/^Latest checkpoint's REDO WAL file: *//p")
for f in "$TEMPLATE"/pg_wal/[0-9A-F]*; do
  if [ -n "$redo" ] && [ "$(basename "$f")" \> "$redo" ]; then rm -f "$f"; fi
done
DB_BYTES=$(du -sb --exclude=pg_wal "$TEMPLATE" | cut -f1)
echo "   $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}') s; data directory without pg_wal $(( DB_BYTES / 1000000 )) MB" >&2

# bin/ferry-T: ferry with target T's repository and credentials (archive_command's half too).
ferry_wrapper() { # target repo
  local t=$1 repo=$2
  mkdir -p "$BENCH_DIR/spool/$t"; chown postgres: "$BENCH_DIR/spool" "$BENCH_DIR/spool/$t"
  {
    echo '#!/bin/sh'
    [ "$t" != s3 ] || printf 'export %q\n' "${ENV_S3[@]}"
    printf 'export %q\n' "FERRY_REPO=$repo" "FERRY_PASSWORD_FILE=$BENCH_DIR/password" "FERRY_WAL_SPOOL=$BENCH_DIR/spool/$t"
    echo "exec $BIN/ferry \"\$@\""
  } >"$BIN/ferry-$t"
  chmod 755 "$BIN/ferry-$t"
}
# bin/pgbr-T: pgbackrest with target T's config file, stanza bench.
pgbr_wrapper() { # target
  local t=$1 d=$BENCH_DIR/pgbr/$1
  mkdir -p "$d/log" "$d/lock" "$d/spool"
  {
    echo "[global]"
    if [ "$t" = s3 ]; then
      printf '%s\n' repo1-type=s3 repo1-s3-endpoint=127.0.0.1 repo1-storage-port=9000 repo1-s3-bucket=bench \
        repo1-s3-region=us-east-1 repo1-s3-key=minioadmin repo1-s3-key-secret=minioadmin repo1-s3-uri-style=path \
        "repo1-storage-ca-file=$MINIO_CA" repo1-path=/pgbr
    else
      echo "repo1-path=$BENCH_DIR/repo-local/pgbr"
    fi
    [ "$PGBR_CIPHER" = none ] || printf '%s\n' "repo1-cipher-type=$PGBR_CIPHER" repo1-cipher-pass=pgbr-bench-cipher-pass
    # shellcheck disable=SC2086  # PGBR_OPTS: option=value words
    printf '%s\n' repo1-retention-full=4 "process-max=$PROCESS_MAX" "compress-type=$PGBR_COMPRESS" start-fast=y \
      archive-async=y archive-timeout=600 "log-path=$d/log" "lock-path=$d/lock" "spool-path=$d/spool" \
      log-level-console=warn log-level-file=info ${PGBR_OPTS:-}
    echo "[bench]"
    printf '%s\n' "pg1-path=$PGD/live" "pg1-socket-path=$SOCK" "pg1-port=$PORT"
  } >"$d/pgbackrest.conf"
  chown -R postgres: "$BENCH_DIR/pgbr"
  printf '#!/bin/sh\nexec pgbackrest --config=%s --stanza=bench "$@"\n' "$d/pgbackrest.conf" >"$BIN/pgbr-$t"
  chmod 755 "$BIN/pgbr-$t"
}

# run.py as postgres in the namespace; prints its JSON's path.
timed() { # name cmd...: $W/T/name.json (+ .out, .out.err)
  local name=$1; shift
  python3 bench/pg/run.py "$TW/$name.json" "$TW/$name.out" "${AS_PG[@]}" "${TENV[@]}" "$@" ||
    { echo "FAILED: $name (exit $?): $(tail -5 "$TW/$name.out.err")" >&2; return 1; }
}
# The summary is the last line: with --json, a run longer than a second prints status lines first.
jget() { python3 -c 'import json,sys; d=json.loads([l for l in open(sys.argv[1]) if l.strip()][-1]); print(eval(sys.argv[2], {}, {"d": d}))' "$@"; }

# Waits until the archive has every segment up to now (pg_switch_wal, last_archived_wal): both
# tools' archives, since one archive_command feeds both.
drain() {
  psql_ <<'EOF'
set stats_fetch_consistency = none;
do $$
declare target text; t0 timestamptz := clock_timestamp();
begin
  perform pg_create_restore_point('bench-drain');   -- WAL to switch away from, always
  target := pg_walfile_name(pg_switch_wal());
  loop
    exit when (select coalesce(last_archived_wal, '') from pg_stat_archiver) >= target;
    if clock_timestamp() - t0 > interval '30 min' then raise exception 'drain: % not archived after 30 min', target; end if;
    perform pg_sleep(0.05);
  end loop;
  raise notice 'drained to % in % s', target, round(extract(epoch from clock_timestamp() - t0)::numeric, 1);
end $$;
EOF
}

result() { # target tool phase json-of-run stored_bytes [key=value...]
  python3 - "${@:1:5}" "$ROUND" "${@:6}" >>"$RESULTS" <<'PY'
import json, sys
t, tool, phase, run, stored = sys.argv[1:6]
r = json.load(open(run))
row = {"target": t, "tool": tool, "phase": phase, "round": int(sys.argv[6]), "secs": r["secs"], "peak_rss_mib": r["peak_rss_mib"],
       "peak_one_mib": r["peak_one_mib"], "cpu_s": r.get("cpu_s"), "stored_bytes": int(stored) if stored not in ("", "-") else None}
for kv in sys.argv[7:]:
    k, v = kv.split("=", 1)
    try: v = float(v)
    except ValueError: pass
    row[k] = v
print(json.dumps(row))
PY
}

pgbr_stored() { # target: the newest backup's bytes in the repository (info: repository.delta)
  "${AS_PG[@]}" "${TENV[@]}" "$BIN/pgbr-$1" info --output=json >"$TW/info.json"
  python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))[0]["backup"][-1]; print(b["info"]["repository"]["delta"])' "$TW/info.json"
}

# archive_command is written out (not a script) because pgBackRest's backup checks that it
# names pgbackrest.
# One backup with each tool at the same point; a checkpoint first, so neither pays for the
# dirty buffers the other would flush.
backups() { # target phase(full|incr): both tools, the first alternating between rounds
  if (( ROUND % 2 )); then backup_ferry "$@"; backup_pgbr "$@"; else backup_pgbr "$@"; backup_ferry "$@"; fi
}
backup_ferry() { # target phase
  local t=$1 ph=$2 s la
  la=$(loadavg); psql_ -c checkpoint
  echo "   ferry $ph (load average $la)" >&2
  timed "ferry-$ph" "$BIN/ferry-$t" --json pg backup -D "$PGD/live" --conninfo "host=$SOCK port=$PORT user=postgres dbname=postgres"
  s=$(jget "$TW/ferry-$ph.out" 'd["summary"]["bytes_stored"]')
  result "$t" ferry "$ph" "$TW/ferry-$ph.json" "$s" "loadavg=$la" \
    "read_bytes=$(jget "$TW/ferry-$ph.out" 'd["summary"]["bytes_read"]')" \
    "size_bytes=$(jget "$TW/ferry-$ph.out" 'd["summary"]["total_bytes"]')" \
    "files_unchanged=$(jget "$TW/ferry-$ph.out" 'd["summary"]["files_unchanged"]')"
}
backup_pgbr() { # target phase
  local t=$1 ph=$2 s la
  la=$(loadavg); psql_ -c checkpoint
  echo "   pgBackRest $ph (load average $la)" >&2
  timed "pgbr-$ph" "$BIN/pgbr-$t" backup --type="$ph"
  s=$(pgbr_stored "$t")
  result "$t" pgbackrest "$ph" "$TW/pgbr-$ph.json" "$s" "loadavg=$la" \
    "size_bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["backup"][-1]["info"]["size"])' "$TW/info.json")"
}

# Restore the latest backup into an empty directory (timed), then start PostgreSQL on it
# (archive_mode off: the copy must not archive into the repositories) and time its recovery
# through the tool's own restore_command, to the end of the archive, then promotion.
restore_one() { # target tool
  local t=$1 tool=$2 la rows t0 t1 deadline
  RDATA=$PGD/restore-$tool; rm -rf "$RDATA"
  "${AS_PG[@]}" mkdir -m 700 "$RDATA"
  la=$(loadavg)
  echo "   $tool restore (load average $la)" >&2
  case $tool in
    ferry) timed ferry-restore "$BIN/ferry-$t" pg restore --to "$RDATA" ;;
    pgbackrest) timed pgbr-restore "$BIN/pgbr-$t" restore --pg1-path="$RDATA" ;;
  esac
  local run=$TW/${tool/pgbackrest/pgbr}-restore.json
  grep -h restore_command "$RDATA"/postgresql.auto.conf >"$TW/$tool-restore_command" || :
  t0=$EPOCHREALTIME
  "${AS_PG[@]}" "${TENV[@]}" "$PGBIN/pg_ctl" -D "$RDATA" -l "$TW/$tool-restored.pg.log" \
    -o "-c port=$RPORT -c archive_mode=off -c unix_socket_directories=$SOCK" -W start >/dev/null
  deadline=$(( SECONDS + 1800 ))
  until [ "$(P=$RPORT psql_ -c "select pg_is_in_recovery()" 2>/dev/null)" = f ]; do
    if [ $SECONDS -ge $deadline ] || ! { [ -f "$RDATA/postmaster.pid" ] || sleep 1; [ -f "$RDATA/postmaster.pid" ]; }; then
      echo "   $tool: the restored server did not recover: $(tail -3 "$TW/$tool-restored.pg.log")" >&2; break
    fi
    sleep 0.1
  done
  t1=$EPOCHREALTIME
  rows=$(P=$RPORT psql_ -c "select count(*) || ' ' || sum(abalance) from pgbench_accounts" 2>/dev/null || echo "- -")
  local ok=no; [ "$rows" = "$EXPECT" ] && ok=yes
  echo "   $tool: recovered in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s; pgbench_accounts count, sum(abalance): $rows (want $EXPECT): $ok" >&2
  result "$t" "$tool" restore "$run" - "loadavg=$la" "recovery_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')" \
    "rows=${rows% *}" "rows_ok=$ok" "restored_bytes=$(du -sb "$RDATA" | cut -f1)"
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$RDATA" -m fast -w stop >/dev/null || :
  "${AS_PG[@]}" rm -rf "$RDATA"; RDATA=''
  kill_ns wal-agent; kill_ns pgbackrest   # restore_command's prefetchers
}

run_target() { # target
  local t=$1 ferry_repo
  TW=$W/$t-$ROUND; mkdir -p "$TW"; chown postgres: "$TW"
  echo "== round $ROUND/$REPEAT, target $t (load average $(loadavg))" >&2
  TENV=(); [ "$t" != s3 ] || TENV=("${ENV_S3[@]}")
  if [ "$t" = s3 ]; then
    ip netns exec "$NS" env "${ENV_S3[@]}" "$BIN/ferry" mkdir s3://bench >/dev/null
    ferry_repo=s3://bench/ferry
  else
    mkdir -p "$BENCH_DIR/repo-local/pgbr"; chown -R postgres: "$BENCH_DIR/repo-local"
    ferry_repo=$BENCH_DIR/repo-local/ferry
  fi
  ferry_wrapper "$t" "$ferry_repo"; pgbr_wrapper "$t"
  "${AS_PG[@]}" "$BIN/ferry-$t" init >"$TW/ferry-init.log" 2>&1 || { cat "$TW/ferry-init.log" >&2; return 1; }
  DATA=$PGD/live; rm -rf "$DATA"; cp -a "$TEMPLATE" "$DATA"
  cat >>"$DATA/postgresql.conf" <<EOF
archive_mode = on
archive_command = '$BIN/ferry-$t wal-push %p && pgbackrest --config=$BENCH_DIR/pgbr/$t/pgbackrest.conf --stanza=bench archive-push %p'
EOF
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$TW/live.pg.log" -w start >/dev/null
  "${AS_PG[@]}" "${TENV[@]}" "$BIN/pgbr-$t" stanza-create >"$TW/stanza.log" 2>&1 || { cat "$TW/stanza.log" >&2; return 1; }
  drain 2>"$TW/drain0.log" || { cat "$TW/drain0.log" >&2; return 1; }

  echo " 1. full backups" >&2
  backups "$t" full
  echo " 2. pgbench: $LOAD_DESC${BENCH_RATE:+ at $BENCH_RATE tps} (load average $(loadavg))" >&2
  "${AS_PG[@]}" "$PGBIN/pgbench" "${LOAD_ARGS[@]}" -c "$CLIENTS" -j "$CLIENTS" ${BENCH_RATE:+-R "$BENCH_RATE"} -h "$SOCK" -p $PORT -U postgres postgres \
    >"$TW/pgbench.log" 2>&1 || { tail "$TW/pgbench.log" >&2; return 1; }
  local tps; tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$TW/pgbench.log" | tail -1)
  local txns; txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$TW/pgbench.log")
  # What the restored copies must hold: the data as of the incrementals (no load since).
  # Asked before the backups: this first scan after the load prunes most pages of
  # pgbench_accounts, which writes WAL (a full page image each: ~80 segments at scale 100),
  # and that WAL belongs before the backups, not in the recovery after them.
  EXPECT=$(psql_ -c "select count(*) || ' ' || sum(abalance) from pgbench_accounts")
  echo "   $txns transactions, $tps tps; draining the archive (load average $(loadavg))" >&2
  drain 2>"$TW/drain1.log" || { cat "$TW/drain1.log" >&2; return 1; }
  sed -n 's/.*NOTICE: *//p' "$TW/drain1.log" | sed 's/^/   /' >&2
  backups "$t" incr
  drain 2>>"$TW/drain1.log" || :
  echo "txns=$txns tps=$tps expect=$EXPECT" >"$TW/load"
  stop_pg; DATA=''
  kill_ns wal-agent; kill_ns pgbackrest   # archivers idle: nothing more to push

  echo " 3. restores" >&2
  if (( ROUND % 2 )); then restore_one "$t" ferry; restore_one "$t" pgbackrest
  else restore_one "$t" pgbackrest; restore_one "$t" ferry; fi
  kill_ns wal-agent; kill_ns pgbackrest
  # The repositories as a whole (backups and the WAL archive) after both backups.
  local fb pb
  if [ "$t" = s3 ]; then
    fb=$(du -sb "$BENCH_DIR/minio/bench/ferry" | cut -f1); pb=$(du -sb "$BENCH_DIR/minio/bench/pgbr" | cut -f1)
  else
    fb=$(du -sb "$ferry_repo" | cut -f1); pb=$(du -sb "$BENCH_DIR/repo-local/pgbr" | cut -f1)
  fi
  echo "{\"target\": \"$t\", \"round\": $ROUND, \"repo_total\": {\"ferry\": $fb, \"pgbackrest\": $pb}, \"txns\": ${txns:-0}, \"tps\": ${tps:-0}}" >>"$W/targets.jsonl"
  rm -rf "$PGD/live" "$BENCH_DIR/repo-local" "$BENCH_DIR/minio/bench"
  { echo "== after target $t $(date -u +%FT%TZ)"; uptime; ps aux --sort=-%cpu | head -8; } >>"$W/machine.log"
}

report() {
  REPORTED=1
  python3 bench/pg/report.py "$RESULTS" "$W/targets.jsonl" "$OUT" \
    "date=$START_DATE" "scale=$SCALE" "db_bytes=${DB_BYTES:-0}" "load=$LOAD_DESC" "rate=${BENCH_RATE:-}" "rounds=$REPEAT" \
    "profile=$PROFILE" "rtt_ms=$RTT_MS" "conn_mbps=$CONN_MBPS" "agg_mbps=$AGG_MBPS" \
    "loadavg_start=$LOAD0" "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" \
    "ferry=$FERRY_VERSION" "pgbackrest=$(pgbackrest version)" \
    "postgres=$("$PGBIN/postgres" --version)" "process_max=$PROCESS_MAX" "pgbr_compress=$PGBR_COMPRESS" \
    "pgbr_cipher=$PGBR_CIPHER" "pgbr_opts=${PGBR_OPTS:-}" "nproc=$(nproc)" "logs=$LOGS"
}

: >"$W/targets.jsonl"
for ROUND in $(seq 1 "$REPEAT"); do
  for t in $TARGETS; do run_target "$t"; done
done
report
