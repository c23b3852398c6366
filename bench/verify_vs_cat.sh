#!/usr/bin/env bash
# `applier verify` throughput against `cat` of the same segment files
# (issue 26): a 512 MiB mirror partition (1 KiB records, 64 per batch or
# VERIFY_BATCH records per batch, 64 MiB segments)
# shipped and applied once under target/bench-data/verify, then, page cache
# warm, `cat dst/*/*.log > /dev/null` and `applier verify --log-dir dst`
# (every batch's CRC-32C and header checks, the indexes), BENCH_RUNS times
# each (default 3); medians and the ratio cat's time / verify's time.
#   bash bench/verify_vs_cat.sh                  # ~1 min (+1 min to generate the data once)
#   VERIFY_BATCH=1 bash bench/verify_vs_cat.sh   # one record per batch: the per-batch cost
source "$(dirname "$0")/lib.sh"
[ -n "${BENCH_BIN:-}" ] || cargo build --release -q -p applier -p kafkalog -p shipper
WORK=$ROOT/target/bench-tmp/verify
rm -rf "$WORK"; mkdir -p "$WORK"
TIMES=$WORK/times
batch=${VERIFY_BATCH:-64}
dir=$DATA/verify-$batch
if [ ! -f "$dir/.complete" ]; then
  rm -rf "$dir"; mkdir -p "$dir/bucket"
  echo "generating 512 MiB (once) in $dir" >&2
  records=$(( 512 * MIB / (1024 + 40) ))
  awk -v n="$records" 'BEGIN{v=sprintf("%01000d", 0); for(i=0;i<n;i++) printf "k%d\t%s\n", i, v}' |
    "$BIN/kafkalog" produce --log-dir "$dir/src" --topic bench --partition 0 --batch-size "$batch" \
      --segment-bytes 64MiB --fsync on-roll --topic-id vVw7a5a_QkWcK7JvBD2t8Q >/dev/null
  "$BIN/shipper" once --log-dir "$dir/src" --bucket "file://$dir/bucket" --create-bucket --cluster-id bench >/dev/null
  "$BIN/applier" once --log-dir "$dir/dst" --bucket "file://$dir/bucket" --source-cluster-id bench --topics '.*' >/dev/null
  touch "$dir/.complete"
fi
bytes=$(log_bytes "$dir/dst")
wait_quiet
warm "$dir/dst"
for _ in $(seq 1 "$RUNS"); do
  timed cat sh -c "cat '$dir'/dst/bench-0/*.log > /dev/null"
  timed verify "$BIN/applier" verify --log-dir "$dir/dst"
done
c=$(median cat 2); v=$(median verify 2)
machine
echo "segments: $(ls "$dir"/dst/bench-0/*.log | wc -l), $(mibs "$bytes" 1) MiB, $batch records of 1 KiB per batch"
echo "cat:    $(mibs "$bytes" "$c") MiB/s (median $c s; $(runs_of cat))"
echo "verify: $(mibs "$bytes" "$v") MiB/s (median $v s; $(runs_of verify)); user $(median verify 3) s, sys $(median verify 4) s, maxrss $(median verify 5) KiB"
echo "ratio cat/verify: $(ratio "$c" "$v")"
