#!/usr/bin/env bash
# Benchmark 5: peak RSS (VmHWM, from /usr/bin/time -v's "Maximum resident
# set size") of `shipper once` and `applier once` on 1 GiB segments: one
# partition with segment.bytes = 1 GiB holding 1.25 GiB (one rolled 1 GiB
# segment, one active 256 MiB segment), default settings, file:// bucket.
# Also with --upload-concurrency 1 / --download-concurrency 1 (what the
# per-object buffers cost) and with glibc's mmap threshold pinned.
#   BENCH_RUNS=3 (default) runs of each variant, ~2 min.
#   bash bench/rss.sh
# bench/rss_ship.sh: the shipper at 256 MiB segments and objects, to
# file:// and S3.
source "$(dirname "$0")/lib.sh"
build
src=$DATA/big-1g
"$BIN/segmirror-bench" gen --out "$src" --layout big
WORK=$ROOT/target/bench-tmp/rss
rm -rf "$WORK"; mkdir -p "$WORK"
TIMES=$WORK/times
load_start=$(loadavg)
wait_quiet
ship() { local n=$1; shift; rm -rf "$WORK/bucket"; mkdir -p "$WORK/bucket"; timed "$n" env "${ENVS[@]}" "$BIN/shipper" once --log-dir "$src" --bucket "file://$WORK/bucket" --create-bucket --cluster-id bench "$@"; }
apply() { local n=$1; shift; rm -rf "$WORK/out"; timed "$n" env "${ENVS[@]}" "$BIN/applier" once --log-dir "$WORK/out" --bucket "file://$WORK/bucket" --source-cluster-id bench --topics '.*' "$@"; }
# Peak RSS moves from run to run (glibc's per-thread arenas, thread
# timing): RUNS runs of each, median. MALLOC_MMAP_THRESHOLD_ fixes glibc's
# mmap threshold at its initial 128 KiB (no dynamic raise), which shows how
# much of the peak is allocator retention rather than live buffers.
for i in $(seq 1 "$RUNS"); do
  ENVS=(X=1)
  ship shipper_c1 --upload-concurrency 1
  apply applier_c1 --download-concurrency 1
  ENVS=(MALLOC_MMAP_THRESHOLD_=131072)
  ship shipper_mmap
  apply applier_mmap
  ENVS=(X=1)
  ship shipper
  apply applier
done
"$BIN/kafkalog" compare "$src" "$WORK/out" >"$WORK/compare.out" 2>&1 || { echo "mirror differs" >&2; exit 1; }
rm -rf "$WORK/out" "$WORK/bucket"
echo
echo "## peak RSS on 1 GiB segments: $(awk -v b="$(log_bytes "$src")" 'BEGIN{printf "%.0f", b/1048576}') MiB in one partition ($(find "$src" -name '*.log' | wc -l) segments, segment.bytes 1 GiB), file:// bucket"
echo
echo "| command | peak RSS MiB, median | runs (MiB) | wall s | user s | sys s | goal |"
echo "|---|---:|---|---:|---:|---:|---|"
row() { printf '| `%s` | %.1f | %s | %s | %s | %s | <= 64 MiB |\n' "$2" "$(awk -v k="$(median "$1" 5)" 'BEGIN{print k/1024}')" "$(awk -v n="$1" '$1==n{printf "%s%.0f", s, $5/1024; s=", "}' "$TIMES")" "$(median "$1" 2)" "$(median "$1" 3)" "$(median "$1" 4)"; }
row shipper 'shipper once (defaults: upload_concurrency 4, part_size 1 MiB on file://, max_object_size 64 MiB)'
row shipper_c1 'shipper once --upload-concurrency 1'
row shipper_mmap 'MALLOC_MMAP_THRESHOLD_=131072 shipper once (defaults)'
row applier 'applier once (defaults: download_concurrency 4)'
row applier_c1 'applier once --download-concurrency 1'
row applier_mmap 'MALLOC_MMAP_THRESHOLD_=131072 applier once (defaults)'
echo
echo "kafkalog compare source mirror: $(tail -n1 "$WORK/compare.out")"
echo "load average: at start $load_start, at end $(loadavg)"
machine
