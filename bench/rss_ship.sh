#!/usr/bin/env bash
# Benchmark 5 at 256 MiB: peak RSS (VmHWM, /usr/bin/time's %M) of
# `shipper once` shipping one partition with segment.bytes = 256 MiB
# (BENCH_MIB, default 1024: four rolled 256 MiB segments), with the
# defaults (max_object_size 64 MiB) and with --max-object-size 256MiB (one
# object per segment), to a file:// bucket and to S3 (BENCH_S3: moto, the
# default, or s3s-fs). Also `applier once` from the two file:// buckets
# (reported, not the subject). Variants interleaved, BENCH_RUNS (3) runs
# each, median.
#   bash bench/rss_ship.sh
#   BENCH_BASE_BIN=DIR bash bench/rss_ship.sh   # also DIR/shipper, interleaved (before/after)
source "$(dirname "$0")/lib.sh"
build
mib=${BENCH_MIB:-1024}
src=$DATA/big-256m-$mib
"$BIN/segmirror-bench" gen --out "$src" --layout big --segment-mib 256 --total-mib "$mib"
WORK=$ROOT/target/bench-tmp/rss-ship
rm -rf "$WORK"; mkdir -p "$WORK"
TIMES=$WORK/times
s3=${BENCH_S3:-moto}
s3_start "$s3" "$WORK/s3"
bins="new"; [ -n "${BENCH_BASE_BIN:-}" ] && bins="base new"
bin_of() { [ "$1" = base ] && echo "$BENCH_BASE_BIN" || echo "$BIN"; }
# A new bucket is set up on request (--create-bucket); a base binary from
# before that flag ships without it.
create_of() { "$(bin_of "$1")/shipper" once --help | grep -q -- --create-bucket && echo --create-bucket; }
sizes=("" "--max-object-size 256MiB")
size_name() { [ -z "$1" ] && echo default || echo 256m; }
load_start=$(loadavg)
wait_quiet
for i in $(seq 1 "$RUNS"); do
  for b in $bins; do
    for s in "${sizes[@]}"; do
      n=$(size_name "$s")
      # shellcheck disable=SC2086
      { rm -rf "$WORK/bucket-$n"; mkdir -p "$WORK/bucket-$n"
        timed "ship_${b}_file_$n" "$(bin_of "$b")/shipper" once --log-dir "$src" --bucket "file://$WORK/bucket-$n" --cluster-id bench $s $(create_of "$b"); }
      s3_reset bench
      # shellcheck disable=SC2086
      timed "ship_${b}_s3_$n" "$(bin_of "$b")/shipper" once --log-dir "$src" --bucket s3://bench/ship --cluster-id bench $s $(create_of "$b")
      if [ "$b" = new ]; then
        rm -rf "$WORK/out"
        timed "apply_$n" "$BIN/applier" once --log-dir "$WORK/out" --bucket "file://$WORK/bucket-$n" --source-cluster-id bench --topics '.*'
      fi
    done
  done
done
"$BIN/kafkalog" compare "$src" "$WORK/out" >"$WORK/compare.out" 2>&1 || { echo "mirror differs" >&2; exit 1; }
objects() { find "$WORK/bucket-$1" -path '*/data/*' -type f | wc -l; }
largest() { find "$WORK/bucket-$1" -path '*/data/*' -type f -printf '%s\n' | sort -n | tail -n1 | awk '{printf "%.0f", $1/1048576}'; }
echo
echo "## peak RSS shipping 256 MiB segments: $(awk -v b="$(log_bytes "$src")" 'BEGIN{printf "%.0f", b/1048576}') MiB in one partition ($(find "$src" -name '*.log' | wc -l) segments, segment.bytes 256 MiB), $RUNS runs each, median"
echo
echo "| command | bucket | objects (largest MiB) | peak RSS MiB, median | runs (MiB) | wall s | user s | sys s | goal |"
echo "|---|---|---|---:|---|---:|---:|---:|---|"
row() {
  printf '| `%s` | %s | %s | %.1f | %s | %s | %s | %s | %s |\n' "$2" "$3" "$4" \
    "$(awk -v k="$(median "$1" 5)" 'BEGIN{print k/1024}')" \
    "$(awk -v n="$1" '$1==n{printf "%s%.0f", s, $5/1024; s=", "}' "$TIMES")" \
    "$(median "$1" 2)" "$(median "$1" 3)" "$(median "$1" 4)" "$5"
}
for b in $bins; do
  label=shipper; [ "$b" = base ] && label="shipper (BENCH_BASE_BIN)"
  for s in "${sizes[@]}"; do
    n=$(size_name "$s")
    cmd="$label once${s:+ $s}"; [ -z "$s" ] && cmd="$cmd (defaults)"
    row "ship_${b}_file_$n" "$cmd" 'file://' "$(objects "$n") ($(largest "$n"))" '<= 64 MiB'
    row "ship_${b}_s3_$n" "$cmd" "s3:// ($s3)" "$(objects "$n") ($(largest "$n"))" '<= 64 MiB'
  done
done
row apply_default 'applier once (defaults), from the default bucket' 'file://' "$(objects default) ($(largest default))" '(reported)'
row apply_256m 'applier once (defaults), from the 256 MiB-object bucket' 'file://' "$(objects 256m) ($(largest 256m))" '(reported)'
echo
echo "kafkalog compare source mirror (last apply): $(tail -n1 "$WORK/compare.out")"
echo "S3 server: $S3_VERSION_LINE; load average: at start $load_start, at end $(loadavg)"
machine
rm -rf "$WORK/out" "$WORK"/bucket-* "$WORK/s3"
