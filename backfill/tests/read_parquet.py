"""Reads a backfill export with two readers that share no code with ours.

Usage: read_parquet.py OUT_DIR

Prints one JSON object: for each reader (pyarrow, duckdb) every row as
[topic, partition, offset, timestamp_ms, key_hex|null, value_hex|null,
[[header_key, header_value_hex|null], ...]], sorted, and per-partition
[topic, partition, rows, min_offset, max_offset, tombstones]; for pyarrow
also each file's schema, key-value metadata, sorting columns and codec.
"""

import glob
import json
import os
import sys

import duckdb
import pyarrow.parquet as pq


def hx(b):
    return None if b is None else bytes(b).hex()


def main():
    out = sys.argv[1]
    files = sorted(glob.glob(os.path.join(out, "**", "*.parquet"), recursive=True))
    result = {"files": {}, "pyarrow": {"rows": []}, "duckdb": {}}
    for f in files:
        pf = pq.ParquetFile(f)
        md = pf.metadata
        rg = md.row_group(0) if md.num_row_groups else None
        result["files"][os.path.relpath(f, out)] = {
            "rows": md.num_rows,
            "schema": str(pf.schema_arrow),
            "metadata": {k.decode(): v.decode() for k, v in (md.metadata or {}).items()
                         if k.decode().startswith("segmirror.")},
            "sorting": [[c.column_index, c.descending] for c in (rg.sorting_columns or [])] if rg else [],
            "codec": rg.column(0).compression if rg else None,
            "offset_stats": [rg.column(2).statistics.min, rg.column(2).statistics.max] if rg and rg.column(2).statistics else None,
        }
        t = pf.read()
        for r in t.to_pylist():
            ts = r["timestamp"]
            result["pyarrow"]["rows"].append([
                r["topic"], r["partition"], r["offset"],
                int(ts.timestamp() * 1000) if ts is not None else None,
                hx(r["key"]), hx(r["value"]),
                [[h["key"], hx(h["value"])] for h in r["headers"]],
            ])
    result["pyarrow"]["rows"].sort()
    if files:
        con = duckdb.connect()
        g = os.path.join(out, "**", "*.parquet")
        rows = con.execute(
            f"""SELECT topic, "partition", "offset", epoch_ms("timestamp"), key, value, headers
                FROM read_parquet('{g}', hive_partitioning=false) ORDER BY ALL"""
        ).fetchall()
        result["duckdb"]["rows"] = sorted(
            [t, p, o, ts, hx(k), hx(v), [[h["key"], hx(h["value"])] for h in hs]]
            for (t, p, o, ts, k, v, hs) in rows
        )
        result["duckdb"]["per_partition"] = [list(r) for r in con.execute(
            f"""SELECT topic, "partition", count(*), min("offset"), max("offset"),
                       count(*) FILTER (WHERE value IS NULL)
                FROM read_parquet('{g}', hive_partitioning=false) GROUP BY ALL ORDER BY ALL"""
        ).fetchall()]
    else:
        result["duckdb"] = {"rows": [], "per_partition": []}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
