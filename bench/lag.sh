#!/usr/bin/env bash
# Benchmark 4: lag under load on file://. A producer appends at a fixed
# rate for 60 s (kafkalog's library, FlushPolicy::OnRoll, 200 batches/s of
# 16 x 1 KiB over 4 partitions, 8 MiB segments so that some roll), with
# `shipper run --tail-interval 1s` and `applier run --poll-interval 100ms`
# running; every 50 ms the destination's end offsets are read from its
# segment files and matched to the append times. Prints p50/p90/p99/max.
#   bash bench/lag.sh                   # extra args go to `segmirror-bench lag`
#   bash bench/lag.sh --rate 1000 --secs 30
source "$(dirname "$0")/lib.sh"
build
wait_quiet
echo "load average at start: $(loadavg)" >&2
"$BIN/segmirror-bench" lag --bin "$BIN" --work "$ROOT/target/bench-tmp/lag" "$@"
machine
