#!/usr/bin/env bash
# Backup benchmark: ferry beside restic (newest), kopia and borg (Debian), measured in one run.
# For each tool: first backup, second backup of the unchanged corpus, full restore; seconds,
# peak RSS and stored bytes; to a local repository, and to MinIO through the emulated WAN
# (bench/lib.sh, PROFILE=wan: RTT 80 ms, 8 MB/s per connection, 100 MB/s aggregate; borg has
# no S3 backend). Prints a table with ratios against restic and writes JSON to $OUT.
# Every tool's sequence runs REPEAT times (default 3), the tools taking turns, each time into a
# fresh repository; the table shows each step's median, and the largest peak RSS.
#   bench/backup.sh                                  # as root (network namespace, tc)
#   SMALL=100000 LARGE_MIB=400 LARGE=3 TARGETS="local s3" TOOLS="ferry restic kopia borg" REPEAT=3 bench/backup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SMALL=${SMALL:-100000} LARGE_MIB=${LARGE_MIB:-400} LARGE=${LARGE:-3}
TARGETS=${TARGETS:-local s3} TOOLS_RUN=${TOOLS:-ferry restic kopia borg} REPEAT=${REPEAT:-3}
OUT=${OUT:-/tmp/ferry-bench-backup.json}
. bench/lib.sh
scripts/install-tools minio toxiproxy restic kopia borg
cargo build --release --quiet -p ferry
link_up 14
W=$BENCH_DIR/work
BIN=$BENCH_DIR/bin; mkdir -p "$BIN"; cp target/release/ferry "$BIN/ferry"
trap link_down EXIT
CORPUS=$W/corpus
echo "corpus: $SMALL small files + $LARGE x $LARGE_MIB MiB, half compressible, in $CORPUS" >&2
python3 bench/backup/corpus.py "$CORPUS" "$SMALL" "$LARGE_MIB" "$LARGE"
# ferry reads again, in the next backup, any file changed within 2 s of the previous one's
# start (a change in the same clock tick as the read would go unseen): let the corpus age past
# that, as data does between real backups, so the unchanged backup measures the unchanged case.
sleep 3
CORPUS_BYTES=$(du -sb "$CORPUS" | cut -f1)
S3=http://127.0.0.1:9000
export AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin AWS_REGION=us-east-1
RESULTS=$W/results.jsonl; : >"$RESULTS"
# ferry and restic keep a local cache of a remote repository's metadata, warmed by the first
# backup for the second: both in the scratch directory, cold at the start of every run.
export FERRY_CACHE_DIR=$W/cache/ferry RESTIC_CACHE_DIR=$W/cache/restic

inns() { local t=$1; shift; if [ "$t" = s3 ]; then ip netns exec "$NS" "$@"; else "$@"; fi; }

# run TARGET LABEL CMD...: time and peak RSS of CMD, inside the namespace for s3.
run() {
  local target=$1 label=$2; shift 2
  local pre=(); [ "$target" = s3 ] && pre=(ip netns exec "$NS")
  # The corpus stays in the page cache for every tool: this measures the tools, not the disk.
  local t0 t1; t0=$(date +%s.%N)
  "${pre[@]}" /usr/bin/time -f "%M" -o "$W/rss" "$@" >"$W/$label.out" 2>"$W/$label.err" ||
    { echo "FAILED: $label: $(tail -3 "$W/$label.err")" >&2; return 1; }
  t1=$(date +%s.%N)
  printf '%s %s\n' "$(echo "$t1 - $t0" | bc)" "$(cat "$W/rss")"
}

stored() { # target repo-path-or-prefix
  if [ "$1" = local ]; then du -sb "$2" | cut -f1
  else ip netns exec "$NS" "$BIN/ferry" ls --json "s3://$2" | python3 -c 'import json,sys; print(sum(o["size"] for o in json.load(sys.stdin)))'
  fi
}

verify() { # restored-dir: same files and bytes as the corpus
  local got="$1$CORPUS"
  [ -d "$got" ] || got=$1   # tools that restore relative to the source root
  diff -rq "$CORPUS" "$got" >/dev/null || { echo "restore differs: $got" >&2; return 1; }
}

bench_tool() { # tool target rep
  local tool=$1 target=$2 rep=$3 repo r1 r2 r3 store_ref
  local restore=$W/restore-$tool-$target
  rm -rf "$restore"; mkdir -p "$restore"
  case $target in
    local) repo=$W/repo-$tool-$target-$rep; store_ref=$repo ;;
    s3) ip netns exec "$NS" "$BIN/ferry" mkdir "s3://bench-$tool" >/dev/null 2>&1 || :; repo=bench-$tool/repo$rep; store_ref=$repo ;;
  esac
  case $tool in
    ferry)
      export FERRY_PASSWORD=pw AWS_ENDPOINT_URL=$S3
      local R=$repo; [ "$target" = s3 ] && R=s3://$repo
      FERRY_REPO=$R run "$target" "$tool-$target-init" "$BIN/ferry" init >/dev/null
      r1=$(FERRY_REPO=$R run "$target" "$tool-$target-b1" "$BIN/ferry" -q backup "$CORPUS")
      r2=$(FERRY_REPO=$R run "$target" "$tool-$target-b2" "$BIN/ferry" -q backup "$CORPUS")
      r3=$(FERRY_REPO=$R run "$target" "$tool-$target-restore" "$BIN/ferry" -q restore latest --target "$restore") ;;
    restic)
      export RESTIC_PASSWORD=pw
      local R=$repo; [ "$target" = s3 ] && R=s3:$S3/$repo
      RESTIC_REPOSITORY=$R run "$target" "$tool-$target-init" "$TOOLS/restic" init >/dev/null
      r1=$(RESTIC_REPOSITORY=$R run "$target" "$tool-$target-b1" "$TOOLS/restic" backup -q "$CORPUS")
      r2=$(RESTIC_REPOSITORY=$R run "$target" "$tool-$target-b2" "$TOOLS/restic" backup -q "$CORPUS")
      r3=$(RESTIC_REPOSITORY=$R run "$target" "$tool-$target-restore" "$TOOLS/restic" restore latest -q --target "$restore") ;;
    kopia)
      export KOPIA_PASSWORD=pw KOPIA_CHECK_FOR_UPDATES=false
      local cfg=$W/kopia-$target-$rep.config
      if [ "$target" = local ]; then
        run "$target" "$tool-$target-init" "$TOOLS/kopia" --config-file "$cfg" repository create filesystem --path "$repo" >/dev/null
      else
        run "$target" "$tool-$target-init" "$TOOLS/kopia" --config-file "$cfg" repository create s3 --bucket "bench-kopia" \
          --prefix "repo$rep/" --endpoint 127.0.0.1:9000 --disable-tls --access-key minioadmin --secret-access-key minioadmin >/dev/null
      fi
      r1=$(run "$target" "$tool-$target-b1" "$TOOLS/kopia" --config-file "$cfg" snapshot create "$CORPUS")
      r2=$(run "$target" "$tool-$target-b2" "$TOOLS/kopia" --config-file "$cfg" snapshot create "$CORPUS")
      local root; root=$(inns "$target" "$TOOLS/kopia" --config-file "$cfg" snapshot list --json "$CORPUS" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["rootEntry"]["obj"])')
      r3=$(run "$target" "$tool-$target-restore" "$TOOLS/kopia" --config-file "$cfg" snapshot restore "$root" "$restore")
      [ "$target" = s3 ] && store_ref=bench-kopia/repo$rep ;;
    borg)
      [ "$target" = local ] || return 0
      export BORG_PASSPHRASE=pw BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes BORG_RELOCATED_REPO_ACCESS_IS_OK=yes
      run local "$tool-init" borg init -e repokey "$repo" >/dev/null
      r1=$(run local "$tool-b1" borg create "$repo::one" "$CORPUS")
      r2=$(run local "$tool-b2" borg create "$repo::two" "$CORPUS")
      r3=$(cd "$restore" && run local "$tool-restore" borg extract "$repo::two") ;;
  esac
  verify "$restore"
  local bytes; bytes=$(stored "$target" "$store_ref")
  python3 - "$tool" "$target" "$rep" "$r1" "$r2" "$r3" "$bytes" >>"$RESULTS" <<'PY'
import json, sys
tool, target, rep, r1, r2, r3, stored = sys.argv[1:]
f = lambda r: [float(x) for x in r.split()]
b1, b2, rs = f(r1), f(r2), f(r3)
print(json.dumps({"tool": tool, "target": target, "rep": int(rep), "backup1_s": b1[0], "backup2_s": b2[0],
  "restore_s": rs[0], "peak_rss_mib": max(b1[1], b2[1], rs[1]) / 1024, "stored_mb": int(stored) / 1e6}))
PY
  rm -rf "$restore"
  [ "$target" = local ] && rm -rf "$repo"   # memory, when the scratch space is tmpfs
  echo "$tool $target $rep done: $r1 / $r2 / $r3" >&2
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# Each step's time on this VM moves by up to 2x from run to run with the memory the host has
# taken back (see README.md): the tools take turns, and the median of REPEAT runs is shown.
for target in $TARGETS; do
  for rep in $(seq "$REPEAT"); do
    for tool in $TOOLS_RUN; do bench_tool "$tool" "$target" "$rep"; done
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$RESULTS" "$OUT" "$CORPUS_BYTES" "$PROFILE" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
rows = []
for key in dict.fromkeys((r["tool"], r["target"]) for r in runs):
    mine = [r for r in runs if (r["tool"], r["target"]) == key]
    med = lambda k: statistics.median(r[k] for r in mine)
    rows.append({"tool": key[0], "target": key[1], "runs": len(mine), "backup1_s": med("backup1_s"),
                 "backup2_s": med("backup2_s"), "restore_s": med("restore_s"),
                 "peak_rss_mib": max(r["peak_rss_mib"] for r in mine), "stored_mb": mine[0]["stored_mb"]})
json.dump({"corpus_bytes": int(sys.argv[3]), "profile": sys.argv[4], "results": rows, "runs": runs},
          open(sys.argv[2], "w"), indent=1)
print("each run: tool target rep: backup1 / backup2 / restore s")
for r in runs:
    print(f"  {r['tool']:<7}{r['target']:<6}{r['rep']}: {r['backup1_s']:.2f} / {r['backup2_s']:.2f} / {r['restore_s']:.2f}")
print(f"corpus {int(sys.argv[3]) / 1e9:.2f} GB; s3 through PROFILE={sys.argv[4]}; medians of {rows[0]['runs']} runs")
print(f"{'tool':<8}{'target':<7}{'backup1 s':>10}{'backup2 s':>10}{'restore s':>10}{'RSS MiB':>9}{'stored MB':>10}   ratios vs restic (b1 / b2 / restore)")
for r in rows:
    ref = next((x for x in rows if x["tool"] == "restic" and x["target"] == r["target"]), None)
    ratio = "" if not ref else "   %.2fx / %.2fx / %.2fx" % (ref["backup1_s"] / r["backup1_s"], ref["backup2_s"] / r["backup2_s"], ref["restore_s"] / r["restore_s"])
    print(f"{r['tool']:<8}{r['target']:<7}{r['backup1_s']:>10.1f}{r['backup2_s']:>10.1f}{r['restore_s']:>10.1f}{r['peak_rss_mib']:>9.0f}{r['stored_mb']:>10.0f}{ratio}")
PY
