#!/usr/bin/env bash
# Before/after: the figures a refactoring must not regress, for two sets of
# release binaries (say, the commit before a change and the change), each
# benchmark run once per set in turn, BENCH_AB_RUNS times (default 5), so
# both sets see the same machine; prints the median of each figure per set
# and the after/before ratio.
#
#   git worktree add /tmp/before OLD && (cd /tmp/before && cargo build --release \
#     -p shipper -p applier -p kafkalog -p segmirror-bench) && mkdir -p /tmp/before-bin \
#     && cp /tmp/before/target/release/{shipper,applier,kafkalog,segmirror-bench} /tmp/before-bin/
#   cargo build --release -p shipper -p applier -p kafkalog -p segmirror-bench
#   bash bench/ab.sh /tmp/before-bin target/release
#
# Figures (lower is better for all):
#   apply_s        `applier once` of benchmark 3's bucket (BENCH_MIB, default 2048), wall s
#   apply_vs_cp    cp wall / applier wall of the same run (higher is better; shown as is)
#   first_apply_s, stop_all_s, start_all_s   bench/stop_start.sh at BENCH_PARTITIONS (1,000)
#   lag_p50_s, lag_p99_s   bench/lag.sh --secs BENCH_AB_LAG_SECS (20)
#   idle_applier_cpu_s, idle_shipper_cpu_s   bench/idle.sh at 10,000 partitions, --secs BENCH_AB_IDLE_SECS (30)
# BENCH_AB_ONLY="apply stop lag idle" picks benchmarks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ $# -eq 2 ] || { echo "usage: bash bench/ab.sh BEFORE_BIN_DIR AFTER_BIN_DIR" >&2; exit 2; }
before=$(realpath "$1"); after=$(realpath "$2")
for d in "$before" "$after"; do
  for b in shipper applier kafkalog segmirror-bench; do
    [ -x "$d/$b" ] || { echo "missing $d/$b" >&2; exit 2; }
  done
done
runs=${BENCH_AB_RUNS:-5}
only=${BENCH_AB_ONLY:-apply stop lag idle}
out=target/bench-tmp/ab; mkdir -p "$out"
res=$out/results; : >"$res"
log=$out/log; : >"$log"

# record SET NAME VALUE
record() { echo "$1 $2 $3" >>"$res"; }
# field TEXT ROW_PREFIX COLUMN: the COLUMN-th |-separated cell of the first
# table row starting with ROW_PREFIX.
cell() { awk -F'|' -v p="$2" -v c="$3" 'index($0, p)==1 {gsub(/ /, "", $c); print $c; exit}' <<<"$1"; }

one() {
  local set=$1 bin=$2 bench=$3 t
  case $bench in
    apply)
      t=$(BENCH_BIN=$bin BENCH_RUNS=1 bash bench/apply_vs_cp.sh 2>>"$log")
      record "$set" apply_s "$(cell "$t" '| `applier once`' 3)"
      record "$set" apply_vs_cp "$(cell "$t" '| `applier once`' 8)" ;;
    stop)
      t=$(BENCH_BIN=$bin BENCH_RUNS=1 bash bench/stop_start.sh 2>>"$log")
      record "$set" first_apply_s "$(cell "$t" '| `applier once` (first apply)' 3)"
      record "$set" stop_all_s "$(cell "$t" '| `applier stop --all`' 3)"
      record "$set" start_all_s "$(cell "$t" '| `applier start --all`' 3)" ;;
    lag)
      t=$(BENCH_BIN=$bin bash bench/lag.sh --secs "${BENCH_AB_LAG_SECS:-20}" 2>>"$log")
      local row; row=$(grep -E '^\| [0-9]+ \| [0-9]+ \|' <<<"$t" | head -n1)
      record "$set" lag_p50_s "$(awk -F'|' '{gsub(/ /,"",$5); print $5}' <<<"$row")"
      record "$set" lag_p99_s "$(awk -F'|' '{gsub(/ /,"",$7); print $7}' <<<"$row")" ;;
    idle)
      t=$(BENCH_BIN=$bin bash bench/idle.sh --partitions 10000 --secs "${BENCH_AB_IDLE_SECS:-30}" 2>>"$log")
      record "$set" idle_shipper_cpu_s "$(cell "$t" '| shipper: idle' 4)"
      record "$set" idle_applier_cpu_s "$(cell "$t" '| applier: idle' 4)" ;;
  esac
  echo "$t" >>"$log"
}

for i in $(seq 1 "$runs"); do
  for bench in $only; do
    # Alternate which set goes first.
    if [ $((i % 2)) -eq 1 ]; then sets="before after"; else sets="after before"; fi
    for set in $sets; do
      bin=$before; [ "$set" = after ] && bin=$after
      echo "run $i/$runs: $bench, $set" >&2
      one "$set" "$bin" "$bench"
    done
  done
done

median() { sort -g | awk '{a[NR]=$1} END{if(NR==0)print "-"; else if(NR%2)print a[(NR+1)/2]; else printf "%.3f\n",(a[NR/2]+a[NR/2+1])/2}'; }
echo
echo "## before/after, $runs alternating runs each, median"
echo
echo "| figure | before | after | after/before | runs before | runs after |"
echo "|---|---:|---:|---:|---|---|"
for f in $(awk '{print $2}' "$res" | awk '!seen[$0]++'); do
  b=$(awk -v f="$f" '$1=="before" && $2==f {print $3}' "$res" | median)
  a=$(awk -v f="$f" '$1=="after" && $2==f {print $3}' "$res" | median)
  rb=$(awk -v f="$f" '$1=="before" && $2==f {printf "%s%s", s, $3; s=", "}' "$res")
  ra=$(awk -v f="$f" '$1=="after" && $2==f {printf "%s%s", s, $3; s=", "}' "$res")
  printf '| %s | %s | %s | %s | %s | %s |\n' "$f" "$b" "$a" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN{if(b+0==0)print "-"; else printf "%.2f", a/b}')" "$rb" "$ra"
done
echo
echo "before: $before; after: $after; full output in $log"
echo "machine: $(nproc) cores, $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC')"
