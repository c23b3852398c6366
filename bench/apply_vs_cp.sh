#!/usr/bin/env bash
# Benchmark 3: `applier once` from a file:// bucket holding the 2 GiB of
# benchmark 1 (shipped once, cached) into an empty log dir, against `cp -r`
# of the bucket dir, both onto the same filesystem (target/), interleaved.
# The applier checks every batch's CRC-32C before appending, writes the
# indexes, and fsyncs after each applied group of ranges; `cp -r` does none
# of that, so `cp -r` followed by `sync` is shown too. Warm page cache: the
# bucket is read once before every timed run; `sync` before each run.
#   bash bench/apply_vs_cp.sh           # BENCH_RUNS=3 runs of each
#   BENCH_LAYOUT=segments bash bench/apply_vs_cp.sh
#                                       # 140 MiB in ~700 segments of 200 KiB
#                                       # (BENCH_MIB, BENCH_SEGMENT_KIB)
source "$(dirname "$0")/lib.sh"
build
case ${BENCH_LAYOUT:-mixed} in
  mixed)
    src=$DATA/mixed-2g
    "$BIN/segmirror-bench" gen --out "$src" --layout mixed --total-mib "${BENCH_MIB:-2048}"
    bucket=$DATA/bucket-mixed-2g ;;
  segments)
    src=$DATA/segments
    "$BIN/segmirror-bench" gen --out "$src" --layout segments --total-mib "${BENCH_MIB:-140}" \
      --segment-kib "${BENCH_SEGMENT_KIB:-200}"
    bucket=$DATA/bucket-segments ;;
  *) echo "BENCH_LAYOUT: mixed or segments" >&2; exit 2 ;;
esac
if [ "$(cat "$bucket.params" 2>/dev/null)" != "$(cat "$src/params")" ]; then
  rm -rf "$bucket" "$bucket.params"; mkdir -p "$bucket"
  "$BIN/shipper" once --log-dir "$src" --bucket "file://$bucket" --create-bucket --cluster-id bench 2>/dev/null
  cp "$src/params" "$bucket.params"
fi
WORK=$ROOT/target/bench-tmp/apply-vs-cp
rm -rf "$WORK"; mkdir -p "$WORK"
TIMES=$WORK/times
bytes=$(log_bytes "$src")
load_start=$(loadavg)
wait_quiet
for i in $(seq 1 "$RUNS"); do
  order="cp applier cpsync"; [ $((i % 2)) -eq 0 ] && order="cpsync applier cp"
  for v in $order; do
    rm -rf "$WORK/out"; sync; warm "$bucket"
    case $v in
      cp) timed cp cp -r "$bucket" "$WORK/out" ;;
      cpsync) timed cpsync sh -c 'cp -r "$1" "$2" && sync' - "$bucket" "$WORK/out" ;;
      applier) timed applier "$BIN/applier" once --log-dir "$WORK/out" --bucket "file://$bucket" \
                 --source-cluster-id bench --cluster-id mirror --topics '.*' ;;
    esac
    if [ "$v" = applier ] && [ "$i" = 1 ]; then
      "$BIN/kafkalog" compare "$src" "$WORK/out" >"$WORK/compare.out" 2>&1 || {
        echo "kafkalog compare: source and mirror differ" >&2; tail "$WORK/compare.out" >&2; exit 1; }
      compared=$(tail -n1 "$WORK/compare.out")
    fi
  done
done
rm -rf "$WORK/out"
tc=$(median cp 2)
echo
echo "## apply from file:// vs cp -r: $(awk -v b="$bytes" 'BEGIN{printf "%.0f", b/1048576}') MiB of segments (layout ${BENCH_LAYOUT:-mixed}, $(find "$src" -name '*.log' | wc -l) segments, $(find "$bucket" -path '*/data/*' -type f | wc -l) objects), $RUNS runs each, median"
echo
echo "| variant | wall s | MiB/s | user s | sys s | peak RSS MiB | vs cp | runs (wall s) |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
for v in cp cpsync applier; do
  w=$(median $v 2)
  case $v in cp) label='`cp -r` [baseline]';; cpsync) label='`cp -r` then `sync`';; applier) label='`applier once` from file://';; esac
  printf '| %s | %s | %s | %s | %s | %.0f | %s | %s |\n' "$label" \
    "$w" "$(mibs "$bytes" "$w")" "$(median $v 3)" "$(median $v 4)" \
    "$(awk -v k="$(median $v 5)" 'BEGIN{print k/1024}')" "$(ratio "$tc" "$w")" "$(runs_of $v)"
done
echo
echo "kafkalog compare source mirror (run 1): $compared"
echo "ratio applier/cp throughput: $(ratio "$tc" "$(median applier 2)") (goal >= 0.8); applier/(cp + sync): $(ratio "$(median cpsync 2)" "$(median applier 2)")"
echo "load average: at start $load_start, at end $(loadavg)"
machine
