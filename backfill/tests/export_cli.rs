//! `backfill export` through the binary, read back by pyarrow and DuckDB
//! (independent of our code), on a `file://` bucket and on the S3 test
//! server when one is configured.

mod common;

use std::path::Path;

use common::*;

/// Checks an export in `out_dir` against the source: both readers see
/// exactly the read_committed records, with their keys, values, headers
/// and timestamps; counts and offset bounds per partition; aborted
/// records absent; the files' schema, sort order, codec and metadata.
fn check_export(out_dir: &Path, expected: &Expected) {
    let readers = read_export(out_dir);
    assert_eq!(
        readers.pyarrow.rows.len(),
        expected.rows.len(),
        "pyarrow row count"
    );
    assert_eq!(readers.pyarrow.rows, expected.rows, "pyarrow rows");
    assert_eq!(readers.duckdb.rows, expected.rows, "duckdb rows");
    let mut per_partition = Vec::new();
    for (topic, p) in [("orders", 0), ("orders", 1), ("payments", 0)] {
        let rows = expected.partition(topic, p);
        per_partition.push((
            topic.to_string(),
            p,
            rows.len() as i64,
            rows.first().map(|r| r.2).expect("rows"),
            rows.last().map(|r| r.2).expect("rows"),
            rows.iter().filter(|r| r.5.is_none()).count() as i64,
        ));
    }
    assert_eq!(readers.duckdb.per_partition, per_partition);
    assert_eq!(per_partition[0].5, 2, "the two tombstones are NULL values");
    let orders0: Vec<i64> = expected
        .partition("orders", 0)
        .iter()
        .map(|r| r.2)
        .collect();
    assert!(
        orders0.windows(2).any(|w| w[1] - w[0] == 6),
        "the compacted gap of 5 offsets is kept: {orders0:?}"
    );
    for ((topic, p), offsets) in &expected.aborted {
        assert!(!offsets.is_empty());
        for o in offsets {
            assert!(
                !readers
                    .duckdb
                    .rows
                    .iter()
                    .any(|r| &r.0 == topic && r.1 == *p && r.2 == *o),
                "aborted record {topic}-{p}@{o} exported"
            );
        }
    }
    assert!(
        readers.files.len() >= 4,
        "one file per source segment: {:?}",
        readers.files.keys()
    );
    for (name, f) in &readers.files {
        assert!(name.starts_with("topic="), "{name}");
        assert_eq!(f.sorting, vec![(2, false)], "{name} sorted by offset");
        assert_eq!(f.codec.as_deref(), Some("ZSTD"), "{name}");
        assert!(
            f.schema
                .contains("timestamp: timestamp[us, tz=UTC] not null"),
            "{}",
            f.schema
        );
        assert!(
            f.schema
                .contains("headers: list<item: struct<key: string not null, value: binary>"),
            "{}",
            f.schema
        );
        assert_eq!(
            f.metadata
                .get("segmirror.source_cluster_id")
                .map(String::as_str),
            Some(SOURCE)
        );
        assert!(
            f.metadata.contains_key("segmirror.manifest_version"),
            "{:?}",
            f.metadata
        );
        assert!(
            f.metadata["segmirror.source_ranges"].contains("/data/"),
            "{:?}",
            f.metadata
        );
        let (lo, hi) = f.offset_stats.expect("offset statistics");
        let first: i64 = f.metadata["segmirror.first_offset"].parse().expect("first");
        let last: i64 = f.metadata["segmirror.last_offset"].parse().expect("last");
        assert!(
            first <= lo && hi <= last,
            "{name}: rows {lo}..={hi} outside {first}..={last}"
        );
        assert!(
            name.ends_with(&format!("{first:020}-{last:020}.parquet")),
            "{name}"
        );
    }
}

#[tokio::test]
async fn an_export_holds_the_committed_records_as_pyarrow_and_duckdb_read_them() {
    if !readers_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    let expected = publish_all(store, "", &dir.path().join("source")).await;
    let out_dir = dir.path().join("out");
    let out = format!("file://{}", out_dir.display());

    let run = export(&bucket, &out, &["--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    check_export(&out_dir, &expected);
    // The directory reads as one table with pyarrow and with DuckDB, the
    // way README.md shows (its Python block, run as written).
    assert_eq!(
        read_dir_as_the_readme_shows(&out_dir),
        (expected.rows.len(), expected.rows.len()),
        "rows read by pyarrow.parquet.read_table and DuckDB's read_parquet"
    );
    // The same rows as kafka-python reads from the source log with Kafka's
    // read_committed rules (an oracle sharing no code with ours).
    assert_eq!(
        kafka_python_read_committed(&dir.path().join("source")),
        expected.rows,
        "kafka-python's read_committed view of the source"
    );

    // orders-1 ends in an open transaction: the export stops at the LSO and says so.
    let lso = expected.lso[&("orders".to_string(), 1)];
    assert!(
        run.stderr.contains(&format!(
            "orders-1: ends at the shipped last stable offset {lso}"
        )),
        "{}",
        run.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(&run.stdout).expect("--json");
    assert_eq!(summary["rows"].as_u64(), Some(expected.rows.len() as u64));
    assert_eq!(summary["exit_code"].as_u64(), Some(0));
    let orders1 = summary["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .find(|p| p["topic"] == "orders" && p["partition"] == 1)
        .expect("orders-1");
    assert_eq!(orders1["clamp"]["last_stable_offset"].as_i64(), Some(lso));

    // The run manifest lists every file with its rows and CRC-32C.
    let files = files_under(&out_dir);
    let manifest: serde_json::Value =
        serde_json::from_slice(&files["_manifest.json"]).expect("_manifest.json");
    assert_eq!(manifest["rows"].as_u64(), Some(expected.rows.len() as u64));
    let listed: Vec<&serde_json::Value> = manifest["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .flat_map(|p| p["files"].as_array().expect("files").iter())
        .collect();
    let parquet: Vec<&String> = files.keys().filter(|k| k.ends_with(".parquet")).collect();
    assert_eq!(listed.len(), parquet.len());
    for f in listed {
        let key = f["key"].as_str().expect("key");
        let bytes = &files[key];
        assert_eq!(f["bytes"].as_u64(), Some(bytes.len() as u64), "{key}");
        assert_eq!(
            f["crc32c"].as_u64(),
            Some(u64::from(crc32c::crc32c(bytes))),
            "{key}"
        );
    }

    // The summary says what this run wrote and what was already there.
    let n = parquet.len();
    let total: usize = parquet.iter().map(|k| files[*k].len()).sum();
    assert_eq!(summary["bytes_written"].as_u64(), Some(total as u64));
    let first = format!(
        "in {n} files of {total} bytes ({n} written now, {total} bytes; 0 already there from an earlier run, 0 bytes)"
    );
    assert!(run.stderr.contains(&first), "{first}\n{}", run.stderr);

    // A second run keeps every file byte for byte, and says it wrote
    // nothing; so does a rewrite.
    let again = export(&bucket, &out, &[]);
    assert_eq!(again.code, 0, "{again:?}");
    let second = format!(
        "in {n} files of {total} bytes (0 written now, 0 bytes; {n} already there from an earlier run, {total} bytes)"
    );
    assert!(again.stderr.contains(&second), "{second}\n{}", again.stderr);
    assert_eq!(files_under(&out_dir), files, "a second run changes no byte");
    let rewrite = export(&bucket, &out, &["--rewrite"]);
    assert_eq!(rewrite.code, 0, "{rewrite:?}");
    assert!(!rewrite.stderr.contains("(0 written"), "{}", rewrite.stderr);
    assert_eq!(
        files_under(&out_dir),
        files,
        "rewritten files are byte-identical"
    );
}

#[tokio::test]
async fn read_uncommitted_exports_the_aborted_records_too() {
    if !readers_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    let expected = publish_all(store, "", &dir.path().join("source")).await;
    let out_dir = dir.path().join("out");
    let out = format!("file://{}", out_dir.display());
    let run = export(
        &bucket,
        &out,
        &[
            "--isolation",
            "read_uncommitted",
            "--topics",
            "orders",
            "--partitions",
            "0",
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let readers = read_export(&out_dir);
    let offsets: Vec<i64> = readers.duckdb.rows.iter().map(|r| r.2).collect();
    let aborted = &expected.aborted[&("orders".to_string(), 0)];
    for o in aborted {
        assert!(offsets.contains(o), "aborted {o} kept by read_uncommitted");
    }
    assert_eq!(
        offsets.len(),
        expected.partition("orders", 0).len() + aborted.len()
    );

    // An open transaction does not stop a read_uncommitted export: orders-1
    // is exported to its end, the open transaction's records included.
    let out_dir = dir.path().join("orders-1");
    let run = export(
        &bucket,
        &format!("file://{}", out_dir.display()),
        &[
            "--isolation",
            "read_uncommitted",
            "--topics",
            "orders",
            "--partitions",
            "1",
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("last stable offset"), "{}", run.stderr);
    let offsets: Vec<i64> = read_export(&out_dir)
        .duckdb
        .rows
        .iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(offsets, (0..32).collect::<Vec<i64>>());
}

#[tokio::test]
async fn windows_by_offset_and_by_time_clip_the_files_at_their_ends() {
    if !readers_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    let expected = publish_all(store, "", &dir.path().join("source")).await;
    let all = expected.partition("orders", 0);

    let out_dir = dir.path().join("by-offset");
    let out = format!("file://{}", out_dir.display());
    let run = export(
        &bucket,
        &out,
        &[
            "--topics",
            "orders",
            "--partitions",
            "0",
            "--from-offset",
            "15",
            "--to-offset",
            "64",
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let want: Vec<Row> = all
        .iter()
        .filter(|r| (15..=64).contains(&r.2))
        .cloned()
        .collect();
    let readers = read_export(&out_dir);
    assert_eq!(readers.pyarrow.rows, want);
    let names: Vec<&String> = readers.files.keys().collect();
    assert!(
        names
            .first()
            .is_some_and(|n| n.contains("/00000000000000000015-")),
        "the first file starts at the window: {names:?}"
    );
    assert!(
        names
            .last()
            .is_some_and(|n| n.ends_with("-00000000000000000064.parquet")),
        "the last file ends at the window: {names:?}"
    );

    // A full export into the same place replaces the clipped files: no
    // row is listed twice.
    let run = export(&bucket, &out, &["--topics", "orders", "--partitions", "0"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stderr.contains("overlapping old files removed"),
        "{}",
        run.stderr
    );
    assert_eq!(read_export(&out_dir).duckdb.rows, all);

    let out_dir = dir.path().join("by-time");
    let out = format!("file://{}", out_dir.display());
    let from = (T0 + 20_000).to_string();
    let to = "2023-11-14T22:14:00Z"; // T0 + 40 s
    let run = export(
        &bucket,
        &out,
        &[
            "--topics",
            "orders",
            "--partitions",
            "0",
            "--from-time",
            &from,
            "--to-time",
            to,
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let want: Vec<Row> = all
        .iter()
        .filter(|r| (T0 + 20_000..=T0 + 40_000).contains(&r.3))
        .cloned()
        .collect();
    assert!(!want.is_empty());
    assert_eq!(read_export(&out_dir).duckdb.rows, want);
}

#[tokio::test]
async fn shards_split_the_partitions_and_together_export_everything() {
    if !readers_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    let expected = publish_all(store, "", &dir.path().join("source")).await;
    let out_dir = dir.path().join("out");
    let out = format!("file://{}", out_dir.display());
    let mut per_shard = Vec::new();
    for i in 0..2 {
        // Shard 0 from --shard, shard 1 from the Kubernetes variables.
        let run = if i == 0 {
            export(&bucket, &out, &["--shard", "0/2", "--json"])
        } else {
            let mut args = vec![
                "export",
                "--bucket",
                &bucket,
                "--source-cluster-id",
                SOURCE,
                "--topics",
                ".*",
                "--out",
                &out,
                "--json",
            ];
            args.retain(|_| true);
            backfill_env(
                &args,
                &[("JOB_COMPLETION_INDEX", "1"), ("JOB_COMPLETION_COUNT", "2")],
            )
        };
        assert_eq!(run.code, 0, "{run:?}");
        let s: serde_json::Value = serde_json::from_str(&run.stdout).expect("json");
        assert_eq!(s["shard"], format!("{i}/2"));
        per_shard.push(s["partitions"].as_array().expect("partitions").len());
    }
    assert_eq!(per_shard.iter().sum::<usize>(), 3, "{per_shard:?}");
    let files = files_under(&out_dir);
    assert!(files.contains_key("_manifest-00000-of-00002.json"));
    assert!(files.contains_key("_manifest-00001-of-00002.json"));
    assert_eq!(read_export(&out_dir).duckdb.rows, expected.rows);
}

/// The same export from an S3 bucket to an S3 output (the S3 test server,
/// unless `SEGMIRROR_SKIP_S3=1`).
#[tokio::test]
async fn exports_from_and_to_s3() {
    if !readers_present() {
        return;
    }
    let Some(s3) = segmirror_testkit::backends()
        .into_iter()
        .find(|b| b.name == "s3")
    else {
        return; // SEGMIRROR_SKIP_S3=1: backends() said so.
    };
    let url = s3.url.clone().expect("s3 url");
    let dir = tempfile::tempdir().expect("tmp");
    let expected = publish_all(s3.store.clone(), &s3.prefix, &dir.path().join("source")).await;
    let out = format!("{url}/export");
    let run = export(&url, &out, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    // Fetch the output to read it locally.
    let out_dir = dir.path().join("out");
    let prefix = object_store::path::Path::from(format!("{}/export", s3.prefix));
    let listed: Vec<object_store::ObjectMeta> =
        futures::TryStreamExt::try_collect(s3.store.list(Some(&prefix)))
            .await
            .expect("list");
    assert!(
        listed
            .iter()
            .any(|m| m.location.as_ref().ends_with("_manifest.json"))
    );
    for m in &listed {
        let rel = m
            .location
            .as_ref()
            .strip_prefix(&format!("{}/", prefix.as_ref()))
            .expect("under the prefix");
        let bytes = object_store::ObjectStoreExt::get(&s3.store, &m.location)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        let path = out_dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write");
    }
    check_export(&out_dir, &expected);
}

/// A transaction that starts in one segment and ends in the next: after
/// the first file is lost, a re-run must still read the second (complete)
/// segment's marker, not cut the first file at a stale LSO.
#[tokio::test]
async fn a_rerun_reads_the_marker_in_a_kept_file_to_rewrite_an_earlier_one() {
    if !readers_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    let source = dir.path().join("source");
    let tp = kafkalog::TopicPartition::new("spans", 0).expect("tp");
    let rows = {
        let d = kafkalog::LogDir::open(&source).expect("source");
        let mut w = Writer::new(&d, tp.clone());
        w.plain(2, 10, kafkalog::batch::Compression::None);
        w.txn_batch(42, 3, kafkalog::batch::Compression::None);
        // Enough plain batches to roll the 4 KiB segment.
        w.plain(12, 10, kafkalog::batch::Compression::None);
        w.end_txn(42, true);
        w.plain(1, 10, kafkalog::batch::Compression::None);
        w.close().0
    };
    let ms = bucket::store::ManifestStore::new(
        store,
        manifest::layout::ClusterLayout::new("", SOURCE).expect("layout"),
    );
    let m = publish(&ms, &source, &tp).await;
    assert!(
        m.ranges.len() >= 2 && m.ranges[0].last_offset < 20 + 3 + 120,
        "the marker is in a later segment: {:?}",
        m.ranges
            .iter()
            .map(|r| (r.base_offset, r.last_offset))
            .collect::<Vec<_>>()
    );
    let out_dir = dir.path().join("out");
    let out = format!("file://{}", out_dir.display());
    let run = export(&bucket, &out, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("last stable offset"), "{}", run.stderr);
    let files = files_under(&out_dir);
    assert_eq!(read_export(&out_dir).duckdb.rows, rows);
    let first = files
        .keys()
        .find(|k| k.ends_with(".parquet"))
        .expect("a file")
        .clone();
    std::fs::remove_file(out_dir.join(&first)).expect("lose the first file");
    let again = export(&bucket, &out, &[]);
    assert_eq!(again.code, 0, "{again:?}");
    assert!(again.stderr.contains("1 written"), "{}", again.stderr);
    assert_eq!(
        files_under(&out_dir),
        files,
        "the lost file is rewritten as it was"
    );

    // A window ending in the first segment: the marker is read from the
    // next one (lookahead), and the window's rows are committed ones.
    let to = m.ranges[0].last_offset;
    let windowed = dir.path().join("windowed");
    let run = export(
        &bucket,
        &format!("file://{}", windowed.display()),
        &["--to-offset", &to.to_string()],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("last stable offset"), "{}", run.stderr);
    let want: Vec<Row> = rows.iter().filter(|r| r.2 <= to).cloned().collect();
    assert!(
        want.iter().any(|r| r.2 >= 20 && r.2 < 23),
        "the transaction's rows are in the window"
    );
    assert_eq!(read_export(&windowed).duckdb.rows, want);
}

/// A segment shipped as several objects, with a transaction opened in a
/// later object and never ended: the file opened for the whole segment is
/// dropped at the LSO cut and written again under the cut's name; a
/// re-run keeps it byte for byte.
#[tokio::test]
async fn an_lso_cut_inside_a_segment_of_several_objects() {
    if !readers_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    let source = dir.path().join("source");
    let tp = kafkalog::TopicPartition::new("spans", 0).expect("tp");
    let (rows, open_at) = {
        let d = kafkalog::LogDir::open(&source).expect("source");
        let mut w = Writer::new(&d, tp.clone());
        w.plain(5, 4, kafkalog::batch::Compression::Zstd);
        let open_at = w.log.log_end_offset();
        w.txn_batch(77, 2, kafkalog::batch::Compression::None);
        w.plain(3, 4, kafkalog::batch::Compression::None);
        let rows = w.close().0;
        (rows, open_at)
    };
    let ms = bucket::store::ManifestStore::new(
        store,
        manifest::layout::ClusterLayout::new("", SOURCE).expect("layout"),
    );
    let m = publish_split(&ms, &source, &tp, 2).await;
    assert!(m.ranges.len() >= 4, "{} objects", m.ranges.len());
    assert!(
        m.ranges.iter().all(|r| r.segment_base_offset == 0),
        "one segment"
    );
    let out_dir = dir.path().join("out");
    let out = format!("file://{}", out_dir.display());
    let run = export(&bucket, &out, &["--pending-memory", "1"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "spans-0: ends at the shipped last stable offset {open_at}"
        )),
        "{}",
        run.stderr
    );
    let files = files_under(&out_dir);
    let parquet: Vec<&String> = files.keys().filter(|k| k.ends_with(".parquet")).collect();
    assert_eq!(
        parquet,
        vec![&format!(
            "topic=spans/partition=0/{:020}-{:020}.parquet",
            0,
            open_at - 1
        )]
    );
    let want: Vec<Row> = rows.into_iter().filter(|r| r.2 < open_at).collect();
    assert_eq!(read_export(&out_dir).duckdb.rows, want);
    let again = export(&bucket, &out, &[]);
    assert_eq!(again.code, 0, "{again:?}");
    assert!(
        again.stderr.contains("(0 written now, 0 bytes;"),
        "{}",
        again.stderr
    );
    assert_eq!(files_under(&out_dir), files);
}

/// An export from a bucket whose ranges all live in one pack (issue 30)
/// holds the same rows as from objects of their own.
#[tokio::test]
async fn an_export_from_ranges_inside_a_pack_holds_the_same_rows() {
    if !readers_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    let expected = publish_all(store.clone(), "", &dir.path().join("source")).await;
    repack_all(store, "").await;
    let out_dir = dir.path().join("out");
    let run = export(&bucket, &format!("file://{}", out_dir.display()), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(read_export(&out_dir).duckdb.rows, expected.rows);
}
