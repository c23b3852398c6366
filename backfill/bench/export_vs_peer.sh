#!/usr/bin/env bash
# backfill export against a hand-written peer on the same shipped data.
#
#   bash backfill/bench/export_vs_peer.sh [MIB] [PARTITIONS]   (default 1024 MiB, 4)
#
# Writes MIB MiB of record bytes (keys and ~1 KiB JSON-like values, zstd,
# 100 records a batch, 256 MiB segments) into PARTITIONS partitions of one
# topic with `kafkalog produce`, ships them with `shipper once` to a
# file:// bucket, then times, on the same objects:
#   1. `backfill export` (release build; read_committed, zstd 3 Parquet);
#   2. the peer: kafka-python decoding the objects and pyarrow writing the
#      same schema (backfill/bench/peer_export.py, tests/.venv);
#   3. the limit: `backfill export --to-time 0`, which reads, verifies and
#      decompresses every batch and decodes every record but writes no
#      row (the window matches nothing: exit 2 is expected).
# Prints the times and rows; nothing is left behind.
set -euo pipefail
cd "$(dirname "$0")/../.."
mib=${1:-1024}
parts=${2:-4}
cargo build --release -q -p backfill -p kafkalog -p shipper
bin=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release
python=$(pwd)/tests/.venv/bin/python
"$python" -c 'import kafka, pyarrow' 2>/dev/null || bash tests/fixtures/setup.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/backfill-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

per_part=$(( mib * 1024 / parts ))   # records of ~1 KiB per partition
for p in $(seq 0 $(( parts - 1 ))); do
  python3 - "$per_part" "$p" <<'PY' | "$bin/kafkalog" produce --log-dir "$work/source" --topic events --partition "$p" --compression zstd --batch-size 100 --segment-bytes 256MiB --fsync on-roll >/dev/null
import random, sys
n, p = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(p)
words = ["order", "paid", "shipped", "user", "item", "price", "eur", "usd", "warehouse", "status", "retry", "ok"]
# 4096 distinct ~1 KiB JSON-like values, drawn at random: text that zstd
# compresses about as much as real events.
pool = ["{" + ",".join(f'"{r.choice(words)}{j}":"{r.choice(words)}-{r.randrange(10**9)}"' for j in range(28)) + "}"
        for _ in range(4096)]
out = sys.stdout
for i in range(n):
    out.write(f"user-{r.randrange(100000)}\t{{\"seq\":{i},{pool[r.randrange(4096)][1:]}\n")
PY
done
du -sh "$work/source"
"$bin/shipper" once --log-dir "$work/source" --bucket "file://$work/bucket" --create-bucket --cluster-id bench >/dev/null 2>&1
du -sh "$work/bucket"

# Wall and CPU time (the machine may be shared: CPU time is the steadier figure).
t() { /usr/bin/time -f "%e s wall, %U s user, %S s sys" "$@" || true; }
echo "== backfill export =="
t "$bin/backfill" export --bucket "file://$work/bucket" --source-cluster-id bench --topics events --out "file://$work/out-backfill" 2>&1 | grep -E "^exported|s sys$"
du -sh "$work/out-backfill"
echo "== decode-only limit (backfill export --to-time 0: reads, verifies, decompresses and decodes, writes nothing) =="
t "$bin/backfill" export --bucket "file://$work/bucket" --source-cluster-id bench --topics events --out "file://$work/out-none" --to-time 0 2>&1 | grep -E "s sys$" || true
echo "== peer: kafka-python + pyarrow =="
t "$python" backfill/bench/peer_export.py "$work/bucket" "$work/out-peer" 2>&1
du -sh "$work/out-peer"
