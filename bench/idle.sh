#!/usr/bin/env bash
# Benchmark 6: 10,000 small partitions on one shipper and one applier
# (libraries in one process, defaults of the binaries, file:// bucket behind
# a request-counting store): start-up time, CPU and requests per idle minute.
# ~4 min (two idle minutes, the first ship and apply of 10,000 partitions).
#   bash bench/idle.sh                  # extra args go to `segmirror-bench idle`
#   bash bench/idle.sh --partitions 1000 --secs 20 --applier-metrics on
source "$(dirname "$0")/lib.sh"
build
wait_quiet
echo "load average at start: $(loadavg)" >&2
"$BIN/segmirror-bench" idle --work "$ROOT/target/bench-tmp/idle" "$@"
machine
