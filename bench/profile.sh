#!/usr/bin/env bash
# Benchmark 7: where `shipper once` (to file://) and `applier once` (from
# file://) spend their CPU on the 2 GiB mixed data of benchmarks 1 and 3.
# perf with the software clock (no hardware counters in these VMs) and
# DWARF call graphs; prints, per command, the top self-time symbols and the
# inclusive share of the functions that matter. ~2 min.
#   bash bench/profile.sh
source "$(dirname "$0")/lib.sh"
command -v perf >/dev/null || { echo "perf is not installed" >&2; exit 2; }
build
src=$DATA/mixed-2g
"$BIN/segmirror-bench" gen --out "$src" --layout mixed
WORK=$ROOT/target/bench-tmp/profile
rm -rf "$WORK"; mkdir -p "$WORK/bucket"
echo "load average at start: $(loadavg)"
report() {
  local data=$1 title=$2; shift 2
  echo
  echo "### $title"
  echo
  echo "Top self time (perf, cpu-clock):"
  echo '```'
  perf report -i "$data" --no-children --sort dso,symbol --stdio -g none --percent-limit 1 2>/dev/null \
    | grep -E '^ +[0-9]' | sed -E 's/ +$//' | cut -c1-120 | head -15
  echo '```'
  echo "Inclusive (children) share of selected functions:"
  echo '```'
  perf report -i "$data" --children --sort symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' \
    | grep -E "$1" | grep -v inlined | sed -E 's/ +$//' | cut -c1-120 | awk '!seen[$0]++' | head -25
  echo '```'
}
warm "$src"; sync
perf record -q -e cpu-clock -F 500 --call-graph dwarf,16384 -o "$WORK/ship.data" -- \
  "$BIN/shipper" once --log-dir "$src" --bucket "file://$WORK/bucket" --create-bucket --cluster-id bench 2>/dev/null
report "$WORK/ship.data" '`shipper once`, 2 GiB to file://' \
  'read_range|segment::scan|plan_tail|parse_batch|verify_crc|crc32c::hw|crc_fast|put_part|ksys_write|ksys_read|memmove|memset|reserve_inner|exc_page_fault|WriteMultipart|put_opts'
warm "$WORK/bucket"; sync
perf record -q -e cpu-clock -F 500 --call-graph dwarf,16384 -o "$WORK/apply.data" -- \
  "$BIN/applier" once --log-dir "$WORK/out" --bucket "file://$WORK/bucket" --source-cluster-id bench --topics '.*' 2>/dev/null
report "$WORK/apply.data" '`applier once`, 2 GiB from file://' \
  'append_range|append_replicated|append_validated|verify_object|BatchIter|crc32c::hw|crc_fast|local::read_range|ksys_write|ksys_read|memmove|memset|exc_page_fault|sync_all|PartitionLog::roll|write_index_files|write_atomic'
rm -rf "$WORK/bucket" "$WORK/out"
echo
echo "load average at end: $(loadavg)"
machine
