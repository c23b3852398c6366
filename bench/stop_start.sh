#!/usr/bin/env bash
# Issue 16, item 3: failover and failback at scale. N partitions (default
# 1,000) of one batch each (the `small` layout), shipped once to a file://
# bucket; then, per run, into a new log dir: `applier once` (first apply),
# `applier stop --all` (failover: every partition STOPPED, durable), and
# `applier start --all` (every partition PREPARING again, durable), each
# timed as a whole process. `strace -f -c` of one stop counts its fsyncs.
#   bash bench/stop_start.sh                 # BENCH_RUNS=3, BENCH_PARTITIONS=1000
source "$(dirname "$0")/lib.sh"
build
n=${BENCH_PARTITIONS:-1000}
src=$DATA/small-$n
"$BIN/segmirror-bench" gen --out "$src" --layout small --partitions "$n"
bucket=$DATA/bucket-small-$n
if [ "$(cat "$bucket.params" 2>/dev/null)" != "$(cat "$src/params")" ]; then
  rm -rf "$bucket" "$bucket.params"; mkdir -p "$bucket"
  "$BIN/shipper" once --log-dir "$src" --bucket "file://$bucket" --create-bucket --cluster-id bench 2>/dev/null
  cp "$src/params" "$bucket.params"
fi
WORK=$ROOT/target/bench-tmp/stop-start
# (A previous run's log dirs are removed 31 s before the first run: see below.)
if [ -d "$WORK" ]; then rm -rf "$WORK"; sync; sleep 31; fi
mkdir -p "$WORK"
TIMES=$WORK/times
identity=(--bucket "file://$bucket" --source-cluster-id bench --cluster-id mirror)
load_start=$(loadavg)
wait_quiet
# Each run gets a new log dir, and all are removed at the end: ext4 does
# not reuse an inode within 30 s of its deletion and scans past every such
# inode at each file creation (`recently_deleted` in a profile), so
# deleting the last run's thousands of files just before a run would time
# the filesystem's cleanup, not the applier.
for i in $(seq 1 "$RUNS"); do
  out=$WORK/out-$i
  sync
  timed first_apply "$BIN/applier" once --log-dir "$out" "${identity[@]}" --topics '.*'
  sync
  timed stop_all "$BIN/applier" stop --log-dir "$out" --all
  stopped=$("$BIN/applier" status --log-dir "$out" --json | grep -o '"state":"STOPPED"' | wc -l)
  [ "$stopped" -eq "$n" ] || { echo "after stop --all: $stopped of $n STOPPED" >&2; exit 1; }
  sync
  timed start_all "$BIN/applier" start --log-dir "$out" "${identity[@]}" --all
done
fsyncs=-
if command -v strace >/dev/null; then
  "$BIN/applier" once --log-dir "$out" "${identity[@]}" --topics '.*' >/dev/null 2>&1 || true
  strace -f -c -o "$WORK/strace.txt" "$BIN/applier" stop --log-dir "$out" --all >/dev/null 2>&1 || true
  fsyncs=$(awk '$NF=="fsync" || $NF=="fdatasync" || $NF=="syncfs" {s+=$4} END{print s+0}' "$WORK/strace.txt")
fi
rm -rf "$WORK"/out-*
echo
echo "## stop and start of $n partitions (one batch each), $RUNS runs, median"
echo
echo "| command | wall s | user s | sys s | peak RSS MiB | runs (wall s) |"
echo "|---|---:|---:|---:|---:|---|"
for v in first_apply stop_all start_all; do
  case $v in first_apply) label='`applier once` (first apply)';; stop_all) label='`applier stop --all`';; start_all) label='`applier start --all`';; esac
  printf '| %s | %s | %s | %s | %.0f | %s |\n' "$label" "$(median $v 2)" "$(median $v 3)" "$(median $v 4)" \
    "$(awk -v k="$(median $v 5)" 'BEGIN{print k/1024}')" "$(runs_of $v)"
done
echo
echo "fsync + fdatasync + syncfs calls of one stop --all (strace -f -c): $fsyncs"
echo "$(machine)"
echo "load average: at start $load_start, at end $(loadavg)"
