#!/usr/bin/env bash
# End-to-end mirror on the embedded default (a local directory is the
# bucket; zero setup). Builds the tools, writes a source log (several topics
# and partitions, leader epoch changes), ships it, applies it, shows status,
# compares the logs, then (with kcat installed) serves the mirror over the
# Kafka protocol: kcat consumes it, a kcat produce is refused, a failover
# (stop) makes the same produce succeed. Exits 0 when everything behaved.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== build: the three binaries the demo runs (kafkalog, shipper, applier), debug profile =="
echo "   (a first build compiles the dependencies too: a few minutes on 2 cores; cargo shows its progress)"
cargo build --bins -p kafkalog -p shipper -p applier
bin=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug
# SEGMIRROR_DEMO_DIR=/some/dir keeps the demo's logs and bucket there
# (emptied first) for trying other tools on them, e.g. `backfill export`.
keep=""
if [ -n "${SEGMIRROR_DEMO_DIR:-}" ]; then
  work="$SEGMIRROR_DEMO_DIR" keep=1
  rm -rf "$work" && mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/segmirror-demo.XXXXXX")
fi
cleanup() { [ -n "$keep" ] || rm -rf "$work"; }
trap cleanup EXIT
src="$work/source" dst="$work/mirror" bucket="file://$work/bucket"

echo "== source log in $src: orders-0, orders-1 (epochs 0 then 2), events-0 (zstd) =="
for p in 0 1; do
  seq 1 300 | sed "s/^/order-$p-/; s/$/\tpaid/" | "$bin/kafkalog" produce --log-dir "$src" --topic orders --partition "$p" --epoch 0 --batch-size 50 --segment-bytes 8192 >/dev/null
  seq 301 500 | sed "s/^/order-$p-/; s/$/\tshipped/" | "$bin/kafkalog" produce --log-dir "$src" --topic orders --partition "$p" --epoch 2 --batch-size 50 --segment-bytes 8192 >/dev/null
done
seq 1 1000 | "$bin/kafkalog" produce --log-dir "$src" --topic events --partition 0 --compression zstd --batch-size 100 >/dev/null
"$bin/kafkalog" verify --log-dir "$src"

echo "== set up the bucket $bucket, then ship to it =="
"$bin/shipper" init --bucket "$bucket" --cluster-id source-cluster
"$bin/shipper" once --log-dir "$src" --bucket "$bucket" --cluster-id source-cluster

echo "== apply into $dst =="
"$bin/applier" once --log-dir "$dst" --bucket "$bucket" --source-cluster-id source-cluster --cluster-id mirror-cluster --topics '.*'
"$bin/applier" status --log-dir "$dst"

echo "== compare source and mirror =="
"$bin/kafkalog" compare "$src" "$dst"

if command -v kcat >/dev/null; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo "== the mirror over the Kafka protocol: applier run --kafka-listen 127.0.0.1:$port =="
  "$bin/applier" run --log-dir "$dst" --bucket "$bucket" --source-cluster-id source-cluster --cluster-id mirror-cluster --topics '.*' \
    --kafka-listen "127.0.0.1:$port" 2>"$work/run.log" &
  daemon=$!
  trap 'kill "$daemon" 2>/dev/null || true; cleanup' EXIT
  for _ in $(seq 1 100); do kcat -b "127.0.0.1:$port" -L >/dev/null 2>&1 && break; sleep 0.1; done
  echo "-- kcat consumes orders-0 from the mirror (first and last records):"
  kcat -b "127.0.0.1:$port" -C -t orders -p 0 -o beginning -e -q -f '%o %k %s\n' >"$work/consumed"
  head -n 2 "$work/consumed"; echo "   ..."; tail -n 1 "$work/consumed"
  [ "$(wc -l <"$work/consumed")" -eq 500 ] || { echo "ERROR: expected 500 records from the mirror" >&2; exit 1; }

  echo "== a producer write to the mirror is refused (kcat -P) =="
  if printf 'refused\n' | kcat -b "127.0.0.1:$port" -P -t orders -p 0 2>"$work/err"; then
    echo "ERROR: the write was accepted on a read-only mirror" >&2; exit 1
  fi
  cat "$work/err"

  echo "== failover: applier stop (the running applier performs it) =="
  "$bin/applier" stop --log-dir "$dst" --all
  "$bin/applier" status --log-dir "$dst"

  echo "== the same kcat -P is accepted now, at an epoch above the LME =="
  printf 'after-failover\n' | kcat -b "127.0.0.1:$port" -P -t orders -p 0
  kcat -b "127.0.0.1:$port" -C -t orders -p 0 -o -1 -e -q -f '%o %s\n'
  kill "$daemon"; wait "$daemon" 2>/dev/null || true
  "$bin/kafkalog" dump --log-dir "$dst" --topic orders --partition 0 --from 500 | tail -n 1
else
  echo "(kcat is not installed: apt-get install -y kcat to see the mirror consumed and written over the Kafka protocol)"
  echo "== a producer write to the mirror is refused =="
  if echo "k	v" | "$bin/kafkalog" produce --log-dir "$dst" --topic orders --partition 0 2>"$work/err"; then
    echo "ERROR: the write was accepted on a read-only mirror" >&2; exit 1
  fi
  cat "$work/err"

  echo "== failover: applier stop =="
  "$bin/applier" stop --log-dir "$dst" --all
  "$bin/applier" status --log-dir "$dst"

  echo "== the write is accepted now, at an epoch above the LME =="
  echo "after-failover	hello" | "$bin/kafkalog" produce --log-dir "$dst" --topic orders --partition 0
  "$bin/kafkalog" dump --log-dir "$dst" --topic orders --partition 0 --from 500 --records | tail -n 2
fi
echo "== demo OK =="
