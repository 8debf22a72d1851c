#!/usr/bin/env bash
# Backup benchmark: ferry beside restic (newest), kopia and borg (Debian), measured in one run.
# For each corpus and tool: first backup, second backup of the unchanged corpus, a third after
# the same change for every tool (bench/backup/change.py: 1% of files appended to, 0.4%
# rewritten in their middle, 0.2% removed, 50 new), and a full restore; seconds and peak RSS
# of each step, and stored bytes; to a local repository, and to MinIO through the emulated WAN
# (bench/lib.sh, PROFILE=wan: RTT 80 ms, 8 MB/s per connection, 100 MB/s aggregate; borg has
# no S3 backend). The page cache is dropped before every step (COLD=0 keeps it).
# Corpora (CORPORA, default "synthetic toolchain system"):
#   synthetic  bench/backup/corpus.py: SMALL files of 1-16 KiB + LARGE x LARGE_MIB MiB
#   toolchain  the stable Rust toolchain under ~/.rustup (binaries, libraries, sources, docs)
#   system     /usr/share (documentation, locales, icons, data: many small files)
#   /a/path    any directory
# Every tool's sequence runs REPEAT times (default 3), the tools taking turns, each time into a
# fresh repository and on a fresh copy of the corpus; the table shows each step's median.
#   bench/backup.sh                                  # as root (network namespace, tc)
#   CORPORA=synthetic SMALL=100000 LARGE_MIB=400 LARGE=3 TARGETS="local s3" TOOLS="ferry restic kopia borg" REPEAT=3 bench/backup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SMALL=${SMALL:-100000} LARGE_MIB=${LARGE_MIB:-400} LARGE=${LARGE:-3}
TARGETS=${TARGETS:-local s3} TOOLS_RUN=${TOOLS:-ferry restic kopia borg} REPEAT=${REPEAT:-3}
CORPORA=${CORPORA:-synthetic toolchain system} COLD=${COLD:-1}
OUT=${OUT:-/tmp/ferry-bench-backup.json}
. bench/lib.sh
# Only the peers this run takes (ferry is this clone's build).
scripts/install-tools minio toxiproxy ${TOOLS_RUN//ferry/}
cargo build --release --quiet -p ferry
link_up 14
W=$BENCH_DIR/work
# The default build (librados is opened only for rados:// places, so it adds nothing here).
cargo build --release -p ferry --offline -q
BIN=$BENCH_DIR/bin; mkdir -p "$BIN"; cp target/release/ferry "$BIN/ferry"
trap link_down EXIT
# The copy every tool backs up, the same path for all: made afresh from the pristine corpus
# before each tool's sequence, since the change step alters it. On disk, not in BENCH_DIR's
# tmpfs, so that a dropped page cache means reading it from the disk again; restores go there
# too. Repositories stay in BENCH_DIR.
DISK=${DISK:-/var/tmp/ferry-bench-backup}
mkdir -p "$DISK"
CORPUS=$DISK/src

# corpus NAME: the pristine copy of corpus NAME, made once.
make_corpus() {
  local name=$1 dir=$DISK/pristine-${1//\//_}
  [ "$name" = synthetic ] && dir=$dir-$SMALL-$LARGE_MIB-$LARGE
  [ -d "$dir" ] && { echo "$dir"; return; }
  case $name in
    synthetic) python3 bench/backup/corpus.py "$dir" "$SMALL" "$LARGE_MIB" "$LARGE" >&2 ;;
    toolchain) cp -a "$(ls -d "$HOME"/.rustup/toolchains/stable-* | head -1)" "$dir" ;;
    system) cp -a /usr/share "$dir" ;;
    /*) cp -a "$name" "$dir" ;;
    *) echo "unknown corpus $name" >&2; exit 2 ;;
  esac
  echo "$dir"
}
S3=http://127.0.0.1:9000
export AWS_ACCESS_KEY_ID=minioadmin AWS_SECRET_ACCESS_KEY=minioadmin AWS_REGION=us-east-1
RESULTS=$W/results.jsonl; : >"$RESULTS"
# Every tool keeps a local cache of a repository's metadata, warmed by the first backup for the
# second: all in the scratch directory, cold at the start of every run, and gone with it (kopia's
# in ~/.cache had grown to 46 GB over the runs of 2026-11-25/26, borg's to 390 MB).
export FERRY_CACHE_DIR=$W/cache/ferry RESTIC_CACHE_DIR=$W/cache/restic
export KOPIA_CACHE_DIRECTORY=$W/cache/kopia BORG_BASE_DIR=$W/cache/borg

inns() { local t=$1; shift; if [ "$t" = s3 ]; then ip netns exec "$NS" "$@"; else "$@"; fi; }

# run TARGET LABEL CMD...: time and peak RSS of CMD, inside the namespace for s3.
run() {
  local target=$1 label=$2; shift 2
  local pre=(); [ "$target" = s3 ] && pre=(ip netns exec "$NS")
  # Cold: every step reads the corpus (and a restore the repository) from the disk, as a
  # nightly backup does; COLD=0 measures the tools alone.
  if [ "$COLD" = 1 ]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
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
  # Links are compared as links: a system tree holds dangling ones.
  diff -rq --no-dereference "$CORPUS" "$got" >/dev/null || { echo "restore differs: $got" >&2; return 1; }
}

bench_tool() { # tool target rep pristine
  local tool=$1 target=$2 rep=$3 pristine=$4 repo r1 r2 rc r3 store_ref
  local restore=$DISK/restore-$tool-$target
  rm -rf "$restore" "$CORPUS"; mkdir -p "$restore"; cp -a "$pristine" "$CORPUS"
  # ferry reads again, in the next backup, a file changed within 2 s of the previous one's
  # start (a change in the same clock tick as the read would go unseen): let the copy age.
  sleep 3
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
      change
      rc=$(FERRY_REPO=$R run "$target" "$tool-$target-b3" "$BIN/ferry" -q backup "$CORPUS")
      r3=$(FERRY_REPO=$R run "$target" "$tool-$target-restore" "$BIN/ferry" -q restore latest --target "$restore") ;;
    restic)
      export RESTIC_PASSWORD=pw
      local R=$repo; [ "$target" = s3 ] && R=s3:$S3/$repo
      RESTIC_REPOSITORY=$R run "$target" "$tool-$target-init" "$TOOLS/restic" init >/dev/null
      r1=$(RESTIC_REPOSITORY=$R run "$target" "$tool-$target-b1" "$TOOLS/restic" backup -q "$CORPUS")
      r2=$(RESTIC_REPOSITORY=$R run "$target" "$tool-$target-b2" "$TOOLS/restic" backup -q "$CORPUS")
      change
      rc=$(RESTIC_REPOSITORY=$R run "$target" "$tool-$target-b3" "$TOOLS/restic" backup -q "$CORPUS")
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
      change
      rc=$(run "$target" "$tool-$target-b3" "$TOOLS/kopia" --config-file "$cfg" snapshot create "$CORPUS")
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
      change
      rc=$(run local "$tool-b3" borg create "$repo::three" "$CORPUS")
      r3=$(cd "$restore" && run local "$tool-restore" borg extract "$repo::three") ;;
  esac
  verify "$restore"
  local bytes; bytes=$(stored "$target" "$store_ref")
  python3 - "$CORPUS_NAME" "$tool" "$target" "$rep" "$r1" "$r2" "$rc" "$r3" "$bytes" >>"$RESULTS" <<'PY'
import json, sys
corpus, tool, target, rep, r1, r2, rc, r3, stored = sys.argv[1:]
f = lambda r: [float(x) for x in r.split()]
steps = {"first": f(r1), "unchanged": f(r2), "changed": f(rc), "restore": f(r3)}
print(json.dumps({"corpus": corpus, "tool": tool, "target": target, "rep": int(rep),
  **{k + "_s": v[0] for k, v in steps.items()}, **{k + "_rss_mib": v[1] / 1024 for k, v in steps.items()},
  "stored_mb": int(stored) / 1e6}))
PY
  rm -rf "$restore"
  [ "$target" = local ] && rm -rf "$repo"   # memory, when the scratch space is tmpfs
  echo "$CORPUS_NAME $tool $target $rep done: $r1 / $r2 / $rc / $r3" >&2
}

# The same change for every tool, between the unchanged and the changed backup.
change() { python3 bench/backup/change.py "$CORPUS"; sleep 3; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# Each step's time on this VM moves by up to 2x from run to run with the memory the host has
# taken back (see README.md): the tools take turns, and the median of REPEAT runs is shown.
SIZES=""
for CORPUS_NAME in $CORPORA; do
  pristine=$(make_corpus "$CORPUS_NAME")
  SIZES="$SIZES $CORPUS_NAME=$(du -sb "$pristine" | cut -f1):$(find "$pristine" -type f | wc -l)"
  for target in $TARGETS; do
    for rep in $(seq "$REPEAT"); do
      for tool in $TOOLS_RUN; do bench_tool "$tool" "$target" "$rep" "$pristine"; done
    done
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$RESULTS" "$OUT" "$SIZES" "$PROFILE" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
sizes = dict(x.split("=") for x in sys.argv[3].split())
steps = ["first", "unchanged", "changed", "restore"]
rows = []
for key in dict.fromkeys((r["corpus"], r["tool"], r["target"]) for r in runs):
    mine = [r for r in runs if (r["corpus"], r["tool"], r["target"]) == key]
    row = {"corpus": key[0], "tool": key[1], "target": key[2], "runs": len(mine), "stored_mb": mine[0]["stored_mb"]}
    for s in steps:
        row[s + "_s"] = statistics.median(r[s + "_s"] for r in mine)
        row[s + "_rss_mib"] = max(r[s + "_rss_mib"] for r in mine)
    rows.append(row)
json.dump({"corpora": sizes, "profile": sys.argv[4], "results": rows, "runs": runs}, open(sys.argv[2], "w"), indent=1)
for corpus in dict.fromkeys(r["corpus"] for r in rows):
    b, n = sizes[corpus].split(":")
    print(f"\ncorpus {corpus}: {int(b) / 1e9:.2f} GB in {n} files; s3 through PROFILE={sys.argv[4]}; medians of {rows[0]['runs']} runs")
    print(f"{'tool':<8}{'target':<7}" + "".join(f"{s + ' s':>12}" for s in steps) + "".join(f"{s[:5] + ' MiB':>11}" for s in steps)
          + f"{'stored MB':>10}   faster than the best peer (first / unchanged / changed / restore)")
    mine = [r for r in rows if r["corpus"] == corpus]
    for r in mine:
        peers = [x for x in mine if x["target"] == r["target"] and x["tool"] != r["tool"]]
        ratio = "" if r["tool"] != "ferry" or not peers else "   " + " / ".join(
            "%.2fx" % (min(p[s + "_s"] for p in peers) / r[s + "_s"]) for s in steps)
        print(f"{r['tool']:<8}{r['target']:<7}" + "".join(f"{r[s + '_s']:>12.1f}" for s in steps)
              + "".join(f"{r[s + '_rss_mib']:>11.0f}" for s in steps) + f"{r['stored_mb']:>10.0f}{ratio}")
PY
