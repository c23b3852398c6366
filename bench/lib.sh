# Shared helpers of the bench/ scripts (sourced, not run).
# Builds the release binaries, generates data under target/bench-data,
# times commands with /usr/bin/time, prints medians and ratios.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# BENCH_BIN=DIR: time the binaries in DIR (say, of an older commit) instead
# of building target/release.
BIN=${BENCH_BIN:-$ROOT/target/release}
DATA=$ROOT/target/bench-data
RUNS=${BENCH_RUNS:-3}
MIB=1048576

build() {
  [ -n "${BENCH_BIN:-}" ] && return 0
  cargo build --release -q -p shipper -p applier -p kafkalog -p segmirror-bench
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# Waits (up to BENCH_QUIET_WAIT seconds, default 120) for the 1-minute load
# average to drop under BENCH_QUIET_LOAD (default 1.5): the machine is shared.
wait_quiet() {
  local max=${BENCH_QUIET_WAIT:-120} limit=${BENCH_QUIET_LOAD:-1.5} i=0
  while awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v m="$limit" 'BEGIN{exit !(l>m)}'; do
    [ "$i" -ge "$max" ] && { echo "  (load still $(loadavg) after ${max}s; going on)" >&2; return 0; }
    sleep 5; i=$((i + 5))
  done
}

# Reads every file under the given dirs once, so that each timed run starts
# with the source in the page cache (dropping caches is not possible here).
warm() { find "$@" -type f -exec cat {} + >/dev/null; }

# timed NAME CMD...: runs CMD under /usr/bin/time, appends
# "NAME wall user sys maxrss_kib" to $TIMES, prints a progress line.
timed() {
  local name=$1; shift
  local out; out=$(mktemp)
  /usr/bin/time -f '%e %U %S %M' -o "$out" "$@" >/dev/null 2>"$WORK/$name.stderr" || {
    echo "FAILED: $name: $*" >&2; cat "$WORK/$name.stderr" >&2; rm -f "$out"; return 1; }
  local t; t=$(tail -n1 "$out"); rm -f "$out"
  echo "$name $t" >>"$TIMES"
  printf '  %-28s wall %6ss  user %6ss  sys %6ss  maxrss %6s KiB  (load %s)\n' "$name" $t "$(loadavg)" >&2
}

# median NAME FIELD: median of field (2 wall, 3 user, 4 sys, 5 maxrss) over
# the runs of NAME in $TIMES.
median() {
  awk -v n="$1" -v f="$2" '$1==n{print $f}' "$TIMES" | sort -g | awk '{a[NR]=$1} END{if(NR%2)print a[(NR+1)/2]; else printf "%.3f\n",(a[NR/2]+a[NR/2+1])/2}'
}

# runs_of NAME: the wall times of every run, comma-separated.
runs_of() { awk -v n="$1" '$1==n{printf "%s%s", s, $2; s=", "}' "$TIMES"; }

# mibs BYTES SECONDS
mibs() { awk -v b="$1" -v s="$2" 'BEGIN{printf "%.0f", b/1048576/s}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }

# Sum of the .log segment bytes under a log dir (the payload every variant moves).
log_bytes() { find "$1" -name '*.log' -printf '%s\n' | awk '{s+=$1} END{printf "%.0f\n", s}'; }

machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(df -T "$ROOT/target" | awk 'NR==2{print $2" on "$1}'); $(date -u '+%Y-%m-%d %H:%M UTC')"
}
