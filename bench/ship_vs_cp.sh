#!/usr/bin/env bash
# Benchmark 1: `shipper once` of 2 GiB of segments (7 partitions, segments of
# 512 KiB to 1 GiB, batches of 0.5 to 17 KiB) to a file:// bucket, against
# `cp -r` of the same log dir, both onto the same filesystem (target/), in
# the same run, interleaved. Warm page cache for both: the source is read
# once before every timed run; `sync` first so that no earlier writeback
# overlaps a run. Neither fsyncs (object_store's LocalFileSystem does not by
# default, cp never does).
#   bash bench/ship_vs_cp.sh            # BENCH_RUNS=3 runs of each
source "$(dirname "$0")/lib.sh"
build
src=$DATA/mixed-2g
"$BIN/segmirror-bench" gen --out "$src" --layout mixed --total-mib "${BENCH_MIB:-2048}"
WORK=$ROOT/target/bench-tmp/ship-vs-cp
rm -rf "$WORK"; mkdir -p "$WORK"
TIMES=$WORK/times
bytes=$(log_bytes "$src")
segments=$(find "$src" -name '*.log' | wc -l)
load_start=$(loadavg)
wait_quiet
for i in $(seq 1 "$RUNS"); do
  order="cp ship"; [ $((i % 2)) -eq 0 ] && order="ship cp"
  for v in $order; do
    rm -rf "$WORK/out"; sync; warm "$src"
    case $v in
      cp) timed cp cp -r "$src" "$WORK/out" ;;
      ship) mkdir -p "$WORK/out"
            timed shipper "$BIN/shipper" once --log-dir "$src" --bucket "file://$WORK/out" --create-bucket --cluster-id bench ;;
    esac
    if [ "$v" = ship ] && [ "$i" = 1 ]; then
      objects=$(find "$WORK/out" -path '*/data/*' -type f | wc -l)
      obytes=$(find "$WORK/out" -path '*/data/*' -type f -printf '%s\n' | awk '{s+=$1} END{printf "%.0f", s}')
      [ "$obytes" = "$bytes" ] || { echo "shipped $obytes bytes of objects, expected $bytes" >&2; exit 1; }
    fi
  done
done
rm -rf "$WORK/out"
tc=$(median cp 2); ts=$(median shipper 2)
echo
echo "## ship to file:// vs cp -r: $(awk -v b="$bytes" 'BEGIN{printf "%.0f", b/1048576}') MiB of segments ($segments .log files, 7 partitions), $RUNS runs each, median"
echo
echo "| variant | wall s | MiB/s | user s | sys s | peak RSS MiB | vs cp | runs (wall s) |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
for v in cp shipper; do
  w=$(median $v 2)
  printf '| %s | %s | %s | %s | %s | %.0f | %s | %s |\n' \
    "$([ $v = cp ] && echo '`cp -r` [baseline]' || echo '`shipper once` to file://')" \
    "$w" "$(mibs "$bytes" "$w")" "$(median $v 3)" "$(median $v 4)" \
    "$(awk -v k="$(median $v 5)" 'BEGIN{print k/1024}')" "$(ratio "$tc" "$w")" "$(runs_of $v)"
done
echo
printf "objects: %s data objects, %d bytes (equal to the source's segment bytes)\n" "$objects" "$obytes"
echo "ratio shipper/cp throughput: $(ratio "$tc" "$ts") (goal >= 0.8)"
echo "load average: at start $load_start, at end $(loadavg)"
machine
