#!/usr/bin/env bash
# Benchmark 8: the Kafka gateway (issue 14), three measurements:
#  a. consume ~1 GiB with confluent-kafka and kcat from `applier serve`
#     against `cat` of the same segment files to /dev/null (page cache
#     warm), as a ratio; once with 1 KiB records, once with 64 KiB records;
#     the gateway's CPU per GiB during the kcat runs, against the kernel's
#     floor for the same bytes (`kafka_gateway.py floor`: sendfile(2) of
#     the files over loopback to a reader that discards them);
#  b. end-to-end latency from a source append (`kafkalog produce`) to a
#     confluent-kafka consumer of the mirror, with `shipper run
#     --tail-interval 1s` and `applier run --poll-interval 100ms
#     --kafka-listen` running (p50/p99/max of 300 records at 20/s);
#  c. 100 idle client connections: the gateway's CPU over 30 s and RSS.
#   bash bench/kafka_gateway.sh          # ~3 min (+1 min to generate the data once)
source "$(dirname "$0")/lib.sh"
cargo build --release -q -p applier -p kafkalog -p shipper
bash tests/fixtures/setup.sh
PY=$ROOT/tests/.venv/bin/python
HERE=$ROOT/bench/kafka_gateway.py
WORK=$ROOT/target/bench-tmp/gateway
rm -rf "$WORK"; mkdir -p "$WORK"
TIMES=$WORK/times
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "nothing on port $1" >&2; return 1; }
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
wait_quiet

# a. throughput
for size in 1024 65536; do
  dir=$DATA/gateway-$size
  records=$(( 1073741824 / (size + 40) ))
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    echo "generating $dir: $records records of $size bytes" >&2
    "$PY" -c "
import sys
line = ('x' * $size + '\n').encode()
out = sys.stdout.buffer
for _ in range($records):
    out.write(line)
" | "$BIN/kafkalog" produce --log-dir "$dir" --topic bulk --partition 0 --batch-size $(( size >= 65536 ? 8 : 256 )) --fsync on-roll >/dev/null
    touch "$dir/.complete"
  fi
  bytes=$(log_bytes "$dir")
  port=$(free_port)
  "$BIN/applier" serve --log-dir "$dir" --kafka-listen "127.0.0.1:$port" 2>"$WORK/serve-$size.log" &
  pids+=($!); serve=$!
  wait_port "$port"
  warm "$dir"
  kcat_cpu=0
  for run in $(seq 1 "$RUNS"); do
    timed "cat-$size" sh -c "cat '$dir'/bulk-0/*.log >/dev/null"
    before=$(awk '{print $14 + $15}' "/proc/$serve/stat")
    # fetch.wait.max.ms=5: librdkafka's default (500 ms) would add one long
    # poll at the end of the log (-e waits for it to see EOF) to a run of
    # well under a second.
    timed "kcat-$size" sh -c "kcat -b 127.0.0.1:$port -C -t bulk -p 0 -o beginning -e -q -X fetch.wait.max.ms=5 -X fetch.max.bytes=52428800 -X max.partition.fetch.bytes=10485760 -f '%S\n' >/dev/null"
    kcat_cpu=$(( kcat_cpu + $(awk '{print $14 + $15}' "/proc/$serve/stat") - before ))
    out=$("$PY" "$HERE" consume --bootstrap "127.0.0.1:$port" --topic bulk --records "$records")
    secs=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
    echo "consume-$size $secs 0 0 0" >>"$TIMES"
    printf '  %-28s wall %6.2fs  (%s)\n' "consume-$size" "$secs" "$out" >&2
    out=$("$PY" "$HERE" floor "$dir"/bulk-0/*.log)
    echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("floor-'"$size"'", d["seconds"], d["cpu_seconds"])' >>"$WORK/floor"
  done
  cpu=$(awk '{printf "%.2f s user, %.2f s sys", $14/100, $15/100}' "/proc/$serve/stat")
  kill "$serve"; wait "$serve" 2>/dev/null || true
  c=$(median "consume-$size" 2); k=$(median "cat-$size" 2); kc=$(median "kcat-$size" 2)
  gib=$(awk -v b="$bytes" 'BEGIN{print b / 1073741824}')
  per_gib=$(awk -v c="$kcat_cpu" -v r="$RUNS" -v g="$gib" 'BEGIN{printf "%.2f", c / 100 / r / g}')
  floor=$(awk -v s="floor-$size" -v g="$gib" '$1==s {n++; t+=$2; u+=$3} END{printf "%.0f MiB/s, %.2f s CPU/GiB", g*1024*n/t, u/n/g}' "$WORK/floor")
  echo "| $size B records, $(( bytes / MIB )) MiB | $(mibs "$bytes" "$c") MiB/s ($(runs_of "consume-$size") s) | $(mibs "$bytes" "$kc") MiB/s ($(runs_of "kcat-$size") s) | $(mibs "$bytes" "$k") MiB/s ($(runs_of "cat-$size") s) | $(ratio "$k" "$c") / $(ratio "$k" "$kc") | **$per_gib s/GiB** during kcat; $cpu in all for $((2 * RUNS)) GiB | $floor |" >>"$WORK/table"
done

# a'. the same 64 KiB records over TLS (kcat only): the gateway's CPU per GiB
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$WORK/tls.key" -out "$WORK/tls.pem" -days 2 -subj "/CN=localhost" \
  -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
dir=$DATA/gateway-65536
bytes=$(log_bytes "$dir")
port=$(free_port)
"$BIN/applier" serve --log-dir "$dir" --kafka-listen "127.0.0.1:$port" \
  --kafka-tls-cert "$WORK/tls.pem" --kafka-tls-key "$WORK/tls.key" 2>"$WORK/serve-tls.log" &
pids+=($!); serve=$!
wait_port "$port"
tls_cpu=0
for run in $(seq 1 "$RUNS"); do
  before=$(awk '{print $14 + $15}' "/proc/$serve/stat")
  timed "kcat-tls" sh -c "kcat -b 127.0.0.1:$port -X security.protocol=ssl -X ssl.ca.location='$WORK/tls.pem' -C -t bulk -p 0 -o beginning -e -q -X fetch.wait.max.ms=5 -X fetch.max.bytes=52428800 -X max.partition.fetch.bytes=10485760 -f '%S\n' >/dev/null"
  tls_cpu=$(( tls_cpu + $(awk '{print $14 + $15}' "/proc/$serve/stat") - before ))
done
kill "$serve"; wait "$serve" 2>/dev/null || true
tls_per_gib=$(awk -v c="$tls_cpu" -v r="$RUNS" -v b="$bytes" 'BEGIN{printf "%.2f", c / 100 / r / (b / 1073741824)}')
tls_line="64 KiB records over TLS (P-256, kcat \`security.protocol=ssl\`): $(mibs "$bytes" "$(median kcat-tls 2)") MiB/s ($(runs_of kcat-tls) s), gateway **$tls_per_gib s CPU per GiB**"

# b. latency, source append -> mirror consumer
src=$WORK/lat-source dst=$WORK/lat-mirror bucket="file://$WORK/lat-bucket"
mkdir -p "$WORK/lat-bucket"
echo "seed" | "$BIN/kafkalog" produce --log-dir "$src" --topic lat --partition 0 --fsync on-roll >/dev/null
"$BIN/shipper" run --log-dir "$src" --bucket "$bucket" --create-bucket --cluster-id latsrc --tail-interval 1s 2>"$WORK/shipper.log" &
pids+=($!)
port=$(free_port)
"$BIN/applier" run --log-dir "$dst" --bucket "$bucket" --source-cluster-id latsrc --topics '.*' --poll-interval 100ms --kafka-listen "127.0.0.1:$port" 2>"$WORK/applier.log" &
pids+=($!)
wait_port "$port"
for _ in $(seq 1 100); do [ -d "$dst/lat-0" ] && break; sleep 0.1; done
sleep 2
lat=$("$PY" "$HERE" latency --bootstrap "127.0.0.1:$port" --topic lat --source-log-dir "$src" --kafkalog "$BIN/kafkalog" --count 300 --rate 20)
echo "  latency: $lat" >&2

# c. idle connections
port=$(free_port)
"$BIN/applier" serve --log-dir "$DATA/gateway-65536" --kafka-listen "127.0.0.1:$port" 2>"$WORK/serve-idle.log" &
pids+=($!); serve=$!
wait_port "$port"; sleep 1
idle=$("$PY" "$HERE" idle --bootstrap "127.0.0.1:$port" --pid "$serve" --connections 100 --seconds 30)
echo "  idle: $idle" >&2

echo
echo "### a. consume with confluent-kafka (and kcat) vs cat (median of $RUNS; ratio = cat time / consume time)"
echo
echo "| data | confluent-kafka | kcat (\`fetch.wait.max.ms=5\`) | cat > /dev/null | ratio confluent / kcat | gateway CPU | floor: \`sendfile(2)\` of the files to a discarding reader |"
echo "|---|---|---|---|---|---|---|"
cat "$WORK/table"
echo
echo "$tls_line"
echo
echo "### b. end-to-end latency (source append -> mirror consumer; tail 1 s, poll 100 ms)"
echo
echo "\`$lat\`"
echo
echo "### c. 100 idle connections"
echo
echo "\`$idle\`"
echo
machine
