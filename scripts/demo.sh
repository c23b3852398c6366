#!/usr/bin/env bash
# End-to-end demo on the embedded default (local directories, no setup).
# Today: produce records into a Kafka-format log, dump them, verify the log,
# copy it and compare the copy. The shipper/applier issues turn this into a
# mirror through a bucket.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p kafkalog
bin=target/release/kafkalog
work=$(mktemp -d "${TMPDIR:-/tmp}/segmirror-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== produce 1000 records (zstd, 100 per batch) into $work/source =="
seq 1 1000 | sed 's/^/key-/; s/$/\tvalue/' | "$bin" produce --log-dir "$work/source" --topic orders --partition 0 --compression zstd --batch-size 100 | tail -n 2
echo "== dump the first batch's records =="
"$bin" dump --log-dir "$work/source" --topic orders --partition 0 --records | head -n 4
echo "== verify =="
"$bin" verify --log-dir "$work/source"
echo "== copy and compare =="
cp -r "$work/source" "$work/copy"
"$bin" compare "$work/source" "$work/copy"
echo "== truncate the copy to offset 500 and compare again (expect a difference) =="
"$bin" truncate --log-dir "$work/copy" --topic orders --partition 0 --to 500 --yes
"$bin" compare "$work/source" "$work/copy" || echo "(compare exited $?: the logs differ, as expected)"
