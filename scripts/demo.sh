#!/usr/bin/env bash
# End-to-end mirror on the embedded default (a local directory is the
# bucket; zero setup). Builds the tools, writes a source log (several topics
# and partitions, leader epoch changes), ships it, applies it, shows status,
# compares the logs, then demonstrates a refused write, a failover (stop)
# and an accepted write. Exits 0 when everything behaved.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== build: the three binaries the demo runs (kafkalog, shipper, applier), debug profile =="
echo "   (a first build compiles the dependencies too: a few minutes on 2 cores; cargo shows its progress)"
cargo build --bins -p kafkalog -p shipper -p applier
bin=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug
# SEGMIRROR_DEMO_DIR=/some/dir keeps the demo's logs and bucket there
# (emptied first) for trying other tools on them, e.g. `backfill export`.
if [ -n "${SEGMIRROR_DEMO_DIR:-}" ]; then
  work="$SEGMIRROR_DEMO_DIR"
  rm -rf "$work" && mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/segmirror-demo.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
src="$work/source" dst="$work/mirror" bucket="file://$work/bucket"

echo "== source log in $src: orders-0, orders-1 (epochs 0 then 2), events-0 (zstd) =="
for p in 0 1; do
  seq 1 300 | sed "s/^/order-$p-/; s/$/\tpaid/" | "$bin/kafkalog" produce --log-dir "$src" --topic orders --partition "$p" --epoch 0 --batch-size 50 --segment-bytes 8192 >/dev/null
  seq 301 500 | sed "s/^/order-$p-/; s/$/\tshipped/" | "$bin/kafkalog" produce --log-dir "$src" --topic orders --partition "$p" --epoch 2 --batch-size 50 --segment-bytes 8192 >/dev/null
done
seq 1 1000 | "$bin/kafkalog" produce --log-dir "$src" --topic events --partition 0 --compression zstd --batch-size 100 >/dev/null
"$bin/kafkalog" verify --log-dir "$src"

echo "== ship to $bucket =="
"$bin/shipper" once --log-dir "$src" --bucket "$bucket" --cluster-id source-cluster

echo "== apply into $dst =="
"$bin/applier" once --log-dir "$dst" --bucket "$bucket" --source-cluster-id source-cluster --cluster-id mirror-cluster --topics '.*'
"$bin/applier" status --log-dir "$dst"

echo "== compare source and mirror =="
"$bin/kafkalog" compare "$src" "$dst"

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
echo "== demo OK =="
