#!/usr/bin/env bash
# Benchmarks 6 and 7, the binaries' side: `shipper run` and `applier run`
# over the 10,000 small partitions of bench/idle.sh, idle (everything
# shipped and applied beforehand): CPU over 60 s from /proc/<pid>/stat, and
# a perf profile of 30 s of it. ~15 min the first time (applying 10,000
# partitions from scratch is fsync-bound), ~4 min later (the applied
# mirror is kept under target/bench-data).
#   bash bench/idle_profile.sh
source "$(dirname "$0")/lib.sh"
build
N=${BENCH_PARTITIONS:-10000}
src=$DATA/small-$N
"$BIN/segmirror-bench" gen --out "$src" --layout small --partitions "$N"
state=$DATA/idle-state-$N
if [ "$(cat "$state/params" 2>/dev/null)" != "$(cat "$src/params")" ]; then
  rm -rf "$state"; mkdir -p "$state/bucket"
  "$BIN/shipper" once --log-dir "$src" --bucket "file://$state/bucket" --create-bucket --cluster-id idle-src 2>/dev/null
  "$BIN/applier" once --log-dir "$state/mirror" --bucket "file://$state/bucket" --source-cluster-id idle-src \
    --cluster-id idle-dst --topics '.*' 2>/dev/null
  cp "$src/params" "$state/params"
fi
WORK=$ROOT/target/bench-tmp/idle-profile
rm -rf "$WORK"; mkdir -p "$WORK"
cpu() { awk '{printf "%.2f", ($14+$15)/100}' "/proc/$1/stat"; }
measure() {
  local name=$1; shift
  RUST_LOG=warn "$@" 2>"$WORK/$name.log" &
  local pid=$!
  sleep 20   # start-up (reads every partition's manifest) out of the window
  local c0; c0=$(cpu $pid)
  perf record -q -e cpu-clock -F 250 --call-graph dwarf,16384 -o "$WORK/$name.data" -p $pid -- sleep 30 2>/dev/null
  sleep 30
  local c1; c1=$(cpu $pid)
  echo "| \`$name run\` (binary), idle, $N partitions | $(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f s over 60 s = %.1f%% of a core", b-a, (b-a)/60*100}') | $(loadavg) |"
  kill -TERM $pid; wait $pid || true
}
echo "| process | CPU (perf attached for 30 of the 60 s) | load average at the end |"
echo "|---|---|---|"
measure shipper "$BIN/shipper" run --log-dir "$src" --bucket "file://$state/bucket" --cluster-id idle-src
measure applier "$BIN/applier" run --log-dir "$state/mirror" --bucket "file://$state/bucket" --source-cluster-id idle-src \
  --cluster-id idle-dst --topics '.*'
for name in shipper applier; do
  echo
  echo "### idle \`$name run\`, $N partitions: top inclusive (children) symbols"
  echo '```'
  perf report -i "$WORK/$name.data" --children --sort symbol --stdio -g none --percent-limit 4 2>/dev/null | grep -E '^ +[0-9]' \
    | grep -vE 'inlined|catch_unwind|do_call|call_once|poll_|with_mut|Harness|clone3|start_thread|run_worker|Inner::run|backtrace|vtable|closure|block_on|enter_runtime|0xffff|thread_start|task::raw|Core<|BlockingTask|main$|lang_start|__libc_start' \
    | sed -E 's/ +$//' | cut -c1-120 | head -30
  echo '```'
done
machine
