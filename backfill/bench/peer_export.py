"""The benchmark's hand-written peer of `backfill export`: kafka-python
decodes the same shipped objects and pyarrow writes the same schema (zstd,
one file per object), read_uncommitted-free logic kept minimal: control
batches dropped, no transactions in the benchmark data.

Usage: peer_export.py BUCKET_DIR OUT_DIR
Prints: {"rows": N, "files": N, "seconds": S}
"""

import glob
import json
import os
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
from kafka.record.memory_records import MemoryRecords

HEADER = pa.struct([pa.field("key", pa.string(), False), pa.field("value", pa.binary())])
SCHEMA = pa.schema([
    pa.field("topic", pa.string(), False),
    pa.field("partition", pa.int32(), False),
    pa.field("offset", pa.int64(), False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), False),
    pa.field("timestamp_type", pa.int32(), False),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(pa.field("item", HEADER, False)), False),
    pa.field("leader_epoch", pa.int32(), False),
    pa.field("producer_id", pa.int64(), False),
    pa.field("producer_epoch", pa.int32(), False),
    pa.field("is_transactional", pa.bool_(), False),
])


def main():
    bucket, out = sys.argv[1], sys.argv[2]
    started = time.monotonic()
    rows = files = 0
    for path in sorted(glob.glob(os.path.join(bucket, "**", "*.batches"), recursive=True)):
        parts = path.split(os.sep)
        i = parts.index("topics")
        topic, partition = parts[i + 1], int(parts[i + 3])
        with open(path, "rb") as f:
            records = MemoryRecords(f.read())
        cols = {name: [] for name in SCHEMA.names}
        while records.has_next():
            batch = records.next_batch()
            if batch.is_control_batch:
                continue
            for r in batch:
                cols["topic"].append(topic)
                cols["partition"].append(partition)
                cols["offset"].append(r.offset)
                cols["timestamp"].append(r.timestamp * 1000)
                cols["timestamp_type"].append(batch.timestamp_type)
                cols["key"].append(r.key)
                cols["value"].append(r.value)
                cols["headers"].append([{"key": k, "value": v} for k, v in r.headers])
                cols["leader_epoch"].append(0)
                cols["producer_id"].append(batch.producer_id)
                cols["producer_epoch"].append(batch.producer_epoch)
                cols["is_transactional"].append(batch.is_transactional)
        table = pa.Table.from_pydict(cols, schema=SCHEMA)
        target = os.path.join(out, f"topic={topic}", f"partition={partition}")
        os.makedirs(target, exist_ok=True)
        pq.write_table(table, os.path.join(target, os.path.basename(path) + ".parquet"),
                       compression="zstd", compression_level=3)
        rows += table.num_rows
        files += 1
    print(json.dumps({"rows": rows, "files": files, "seconds": time.monotonic() - started}))


if __name__ == "__main__":
    main()
