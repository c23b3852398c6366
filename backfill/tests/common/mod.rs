//! Helpers shared by backfill's tests: a source log written with kafkalog
//! whose expected read_committed records the test knows by construction,
//! a hand publisher that ships each segment as one range (the layout the
//! shipper produces), the `backfill` binary, and the Python readers.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::process::Command;

use bucket::store::ManifestStore;
use bytes::Bytes;
use kafkalog::batch::Compression;
use kafkalog::builder::{BatchSpec, RecordInput, build_batch, build_control_batch};
use kafkalog::checkpoint::EpochEntry;
use kafkalog::epoch::EpochLineage;
use kafkalog::reader::PartitionReader;
use kafkalog::records::{ControlType, Header};
use kafkalog::{LogConfig, LogDir, PartitionLog, TopicId, TopicPartition};
use manifest::feed::HeadEntry;
use manifest::layout::{ClusterLayout, PartitionKey};
use manifest::partition::{PartitionManifest, ShippedRange};

pub const SOURCE: &str = "src-cluster";

/// Base of every record timestamp: record at offset `o` has `T0 + 1000 * o`.
pub const T0: i64 = 1_700_000_000_000;

pub fn topic_id(topic: &str) -> TopicId {
    match topic {
        "orders" => "vVw7a5a_QkWcK7JvBD2t8Q",
        "spans" => "AbCdEfGhIjKlMnOpQrStUQ",
        _ => "q1w2e3r4t5y6u7i8o9p0aQ",
    }
    .parse()
    .expect("topic id")
}

/// One exported row as the readers print it: topic, partition, offset,
/// timestamp (ms), key, value, headers (hex bytes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
pub struct Row(
    pub String,
    pub i32,
    pub i64,
    pub i64,
    pub Option<String>,
    pub Option<String>,
    pub Vec<(String, Option<String>)>,
);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Appends to one source partition, remembering every record the source
/// holds and which of them a read_committed consumer sees.
pub struct Writer {
    pub tp: TopicPartition,
    pub log: PartitionLog,
    pub epoch: i32,
    /// Records a read_committed consumer reads, by offset.
    pub committed: Vec<Row>,
    /// Offsets of records of aborted transactions.
    pub aborted: Vec<i64>,
    /// Open transactions: producer id -> rows waiting for the marker.
    open: BTreeMap<i64, Vec<Row>>,
    n: usize,
}

impl Writer {
    pub fn new(dir: &LogDir, tp: TopicPartition) -> Writer {
        let cfg = LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        };
        let log = dir
            .open_or_create_partition(&tp, Some(topic_id(&tp.topic)), cfg)
            .expect("create");
        Writer {
            tp,
            log,
            epoch: 0,
            committed: Vec::new(),
            aborted: Vec::new(),
            open: BTreeMap::new(),
            n: 0,
        }
    }

    fn next_records(&mut self, n: usize, tombstone: bool) -> Vec<RecordInput> {
        let start = self.log.log_end_offset();
        self.records_at(start, n, tombstone)
    }

    fn records_at(&mut self, start: i64, n: usize, tombstone: bool) -> Vec<RecordInput> {
        (0..n)
            .map(|i| {
                let offset = start + i as i64;
                self.n += 1;
                let headers = if self.n.is_multiple_of(3) {
                    vec![
                        Header {
                            key: "trace".into(),
                            value: Some(format!("t{}", self.n).into_bytes()),
                        },
                        Header {
                            key: "dup".into(),
                            value: None,
                        },
                        Header {
                            key: "dup".into(),
                            value: Some(vec![0, 255, 1]),
                        },
                    ]
                } else {
                    vec![]
                };
                RecordInput {
                    timestamp: T0 + 1000 * offset,
                    key: Some(format!("key-{}", self.n % 17).into_bytes()),
                    value: if tombstone {
                        None
                    } else {
                        Some(format!("value {} {}", self.n, "x".repeat(self.n % 40)).into_bytes())
                    },
                    headers,
                }
            })
            .collect()
    }

    fn rows(&self, recs: &[RecordInput], first: i64) -> Vec<Row> {
        recs.iter()
            .enumerate()
            .map(|(i, r)| {
                Row(
                    self.tp.topic.clone(),
                    self.tp.partition,
                    first + i as i64,
                    r.timestamp,
                    r.key.as_deref().map(hex),
                    r.value.as_deref().map(hex),
                    r.headers
                        .iter()
                        .map(|h| (h.key.clone(), h.value.as_deref().map(hex)))
                        .collect(),
                )
            })
            .collect()
    }

    /// Appends `batches` plain batches of `per` records with `compression`.
    pub fn plain(&mut self, batches: usize, per: usize, compression: Compression) {
        for _ in 0..batches {
            let recs = self.next_records(per, false);
            let spec = BatchSpec {
                compression,
                ..BatchSpec::new(0, self.epoch)
            };
            let mut b = build_batch(&spec, &recs).expect("batch");
            let info = self
                .log
                .append_as_leader(&mut b, self.epoch)
                .expect("append");
            let rows = self.rows(&recs, info.first_offset);
            self.committed.extend(rows);
        }
    }

    /// Leaves a gap of `skip` offsets, as compaction does, then appends a
    /// batch of `n` records (replicated: offsets kept as given).
    pub fn compacted_gap(&mut self, skip: i64, n: usize) {
        let base = self.log.log_end_offset() + skip;
        let recs = self.records_at(base, n, false);
        let b = build_batch(&BatchSpec::new(base, self.epoch), &recs).expect("batch");
        let info = self.log.append_replicated(&b).expect("append");
        assert_eq!(info.first_offset, base);
        let rows = self.rows(&recs, base);
        self.committed.extend(rows);
    }

    /// Appends one batch of tombstones (null values).
    pub fn tombstones(&mut self, n: usize) {
        let recs = self.next_records(n, true);
        let mut b = build_batch(&BatchSpec::new(0, self.epoch), &recs).expect("batch");
        let info = self
            .log
            .append_as_leader(&mut b, self.epoch)
            .expect("append");
        let rows = self.rows(&recs, info.first_offset);
        self.committed.extend(rows);
    }

    /// Appends one transactional batch of producer `pid`.
    pub fn txn_batch(&mut self, pid: i64, n: usize, compression: Compression) {
        let recs = self.next_records(n, false);
        let spec = BatchSpec {
            transactional: true,
            producer_id: pid,
            producer_epoch: 1,
            base_sequence: 0,
            compression,
            ..BatchSpec::new(0, self.epoch)
        };
        let mut b = build_batch(&spec, &recs).expect("batch");
        let info = self
            .log
            .append_as_leader(&mut b, self.epoch)
            .expect("append");
        let rows = self.rows(&recs, info.first_offset);
        self.open.entry(pid).or_default().extend(rows);
    }

    /// Ends producer `pid`'s transaction with a COMMIT or ABORT marker.
    pub fn end_txn(&mut self, pid: i64, commit: bool) {
        let kind = if commit {
            ControlType::Commit
        } else {
            ControlType::Abort
        };
        let offset = self.log.log_end_offset();
        let mut marker = build_control_batch(kind, 0, self.epoch, pid, 1, T0 + 1000 * offset, 0);
        self.log
            .append_as_coordinator(&mut marker, self.epoch)
            .expect("marker");
        let rows = self.open.remove(&pid).unwrap_or_default();
        if commit {
            self.committed.extend(rows);
            self.committed.sort();
        } else {
            self.aborted.extend(rows.iter().map(|r| r.2));
        }
    }

    /// Raises the leader epoch.
    pub fn bump(&mut self, epoch: i32) {
        self.epoch = epoch;
    }

    pub fn close(self) -> (Vec<Row>, Vec<i64>) {
        self.log.close().expect("close");
        (self.committed, self.aborted)
    }
}

/// What the test source holds.
pub struct Expected {
    /// read_committed rows of every partition, sorted.
    pub rows: Vec<Row>,
    /// Offsets of aborted records, per partition.
    pub aborted: BTreeMap<(String, i32), Vec<i64>>,
    /// The LSO where a partition's export ends (open transaction).
    pub lso: BTreeMap<(String, i32), i64>,
}

impl Expected {
    pub fn partition(&self, topic: &str, p: i32) -> Vec<Row> {
        self.rows
            .iter()
            .filter(|r| r.0 == topic && r.1 == p)
            .cloned()
            .collect()
    }
}

/// Writes the source log dir: `orders-0` with every codec, headers,
/// tombstones, a committed transaction interleaved with an aborted one and
/// a second leader epoch, over several segments; `orders-1` ending in a
/// transaction still open; `payments-0` plain.
pub fn build_source(dir: &Path) -> Expected {
    let d = LogDir::open(dir).expect("source");
    let mut rows = Vec::new();
    let mut aborted = BTreeMap::new();
    let mut lso = BTreeMap::new();

    let mut w = Writer::new(&d, TopicPartition::new("orders", 0).expect("tp"));
    w.plain(3, 10, Compression::None);
    w.plain(1, 10, Compression::Zstd);
    w.plain(1, 10, Compression::Gzip);
    w.tombstones(2);
    w.compacted_gap(5, 3);
    w.txn_batch(7001, 3, Compression::None);
    w.txn_batch(7002, 2, Compression::Lz4);
    w.txn_batch(7001, 2, Compression::Snappy);
    w.end_txn(7001, true);
    w.txn_batch(7002, 1, Compression::None);
    w.end_txn(7002, false);
    w.bump(2);
    w.plain(2, 10, Compression::Snappy);
    w.plain(4, 10, Compression::None);
    let (r, a) = w.close();
    rows.extend(r);
    aborted.insert(("orders".to_string(), 0), a);

    let mut w = Writer::new(&d, TopicPartition::new("orders", 1).expect("tp"));
    w.plain(2, 10, Compression::None);
    let open_at = w.log.log_end_offset();
    w.txn_batch(7003, 2, Compression::None);
    w.plain(1, 10, Compression::None);
    let (r, _) = w.close();
    rows.extend(r.into_iter().filter(|r| r.2 < open_at));
    lso.insert(("orders".to_string(), 1), open_at);

    let mut w = Writer::new(&d, TopicPartition::new("payments", 0).expect("tp"));
    w.plain(2, 5, Compression::Lz4);
    let (r, _) = w.close();
    rows.extend(r);

    rows.sort();
    Expected { rows, aborted, lso }
}

/// Publishes the whole source partition `t`: one range per segment, one
/// manifest version, one head entry.
pub async fn publish(
    store: &ManifestStore,
    source: &Path,
    t: &TopicPartition,
) -> PartitionManifest {
    publish_split(store, source, t, usize::MAX).await
}

/// (base offset, last offset, epoch, max timestamp, bytes) of a batch.
type ShippedBatch = (i64, i64, i32, i64, Vec<u8>);

/// [`publish`] with each segment shipped as objects of at most
/// `per_object` batches (as the shipper splits a segment past its
/// `max_object_size`).
pub async fn publish_split(
    store: &ManifestStore,
    source: &Path,
    t: &TopicPartition,
    per_object: usize,
) -> PartitionManifest {
    let upload = "u1";
    let reader = PartitionReader::open(source, t).expect("reader");
    let pk = PartitionKey {
        tp: t.clone(),
        topic_id: topic_id(&t.topic),
    };
    let segments = reader.segments().expect("segments");
    let mut m = PartitionManifest::new(store.layout().cluster_id(), t, pk.topic_id);
    m.log_start_offset = segments.first().map_or(0, |s| s.base_offset);
    m.shipped_end_offset = m.log_start_offset;
    for (i, seg) in segments.iter().enumerate() {
        let mut batches: Vec<ShippedBatch> = Vec::new();
        reader
            .for_each_batch(seg.base_offset, true, |h, b| {
                if h.base_offset < seg.base_offset
                    || segments
                        .get(i + 1)
                        .is_some_and(|n| h.base_offset >= n.base_offset)
                {
                    return ControlFlow::Continue(());
                }
                batches.push((
                    h.base_offset,
                    h.last_offset(),
                    h.partition_leader_epoch,
                    h.max_timestamp,
                    b.to_vec(),
                ));
                ControlFlow::Continue(())
            })
            .expect("walk");
        let chunks: Vec<&[ShippedBatch]> = batches.chunks(per_object.max(1)).collect();
        let n = chunks.len();
        for (ci, chunk) in chunks.into_iter().enumerate() {
            let (Some(first), Some(last_batch)) = (chunk.first(), chunk.last()) else {
                continue;
            };
            let mut epochs: Vec<EpochEntry> = Vec::new();
            for b in chunk {
                if epochs.last().is_none_or(|e| e.epoch != b.2) {
                    epochs.push(EpochEntry {
                        epoch: b.2,
                        start_offset: b.0,
                    });
                }
            }
            let bytes: Vec<u8> = chunk.iter().flat_map(|b| b.4.iter().copied()).collect();
            let key = store
                .layout()
                .data_key(&pk, first.0, last_batch.1, epochs[0].epoch, upload)
                .expect("key");
            store
                .put_new(&key, Bytes::from(bytes.clone()))
                .await
                .expect("put");
            m.ranges.push(ShippedRange {
                key,
                base_offset: first.0,
                last_offset: last_batch.1,
                bytes: bytes.len() as u64,
                batches: chunk.len() as u32,
                crc32c: crc32c::crc32c(&bytes),
                max_timestamp: chunk.iter().map(|b| b.3).max().unwrap_or(-1),
                epochs: EpochLineage::from_entries(epochs).expect("a range's epochs"),
                segment_base_offset: seg.base_offset,
                completes_segment: i + 1 < segments.len() && ci + 1 == n,
                segment_generation: 0,
                object_offset: None,
                compacted: false,
            });
            m.shipped_end_offset = last_batch.1 + 1;
        }
    }
    m.source_high_watermark = m.shipped_end_offset;
    let end = m.shipped_end_offset;
    m.lineage = EpochLineage::from_entries(
        reader
            .epoch_entries()
            .expect("epochs")
            .into_iter()
            .filter(|e| e.start_offset < end),
    )
    .expect("the source's lineage");
    let committed = store
        .update_manifest(&pk, None, |_| {
            Ok::<_, std::convert::Infallible>(Some(m.clone()))
        })
        .await
        .expect("store")
        .expect("decided")
        .expect("committed");
    store
        .publish_head(None, "test", &[HeadEntry::for_manifest(&committed)])
        .await
        .expect("head");
    committed
}

/// The partitions of the test source.
pub fn partitions() -> Vec<TopicPartition> {
    vec![
        TopicPartition::new("orders", 0).expect("tp"),
        TopicPartition::new("orders", 1).expect("tp"),
        TopicPartition::new("payments", 0).expect("tp"),
    ]
}

/// Builds the source in `dir/source` and publishes it to the bucket at
/// `url` under `prefix` (the store `store` of that URL).
pub async fn publish_all(
    store: std::sync::Arc<dyn object_store::ObjectStore>,
    prefix: &str,
    source: &Path,
) -> Expected {
    let expected = build_source(source);
    let ms = ManifestStore::new(store, ClusterLayout::new(prefix, SOURCE).expect("layout"));
    for tp in partitions() {
        publish(&ms, source, &tp).await;
    }
    expected
}

/// A `file://` bucket URL for `dir` (created) and its store.
pub fn file_bucket(dir: &Path) -> (String, std::sync::Arc<dyn object_store::ObjectStore>) {
    std::fs::create_dir_all(dir).expect("bucket dir");
    let url = format!("file://{}", dir.display());
    let store = bucket::url::BucketUrl::parse(&url)
        .expect("url")
        .build()
        .expect("store");
    (url, store)
}

/// What a run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `backfill` with `args` (no shard variables from the environment).
pub fn backfill(args: &[&str]) -> Run {
    backfill_env(args, &[])
}

/// Runs `backfill` with `args` and `env`.
pub fn backfill_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_backfill"));
    cmd.args(args);
    for k in [
        "JOB_COMPLETION_INDEX",
        "JOB_COMPLETION_COUNT",
        "AWS_BATCH_JOB_ARRAY_INDEX",
        "AWS_BATCH_JOB_ARRAY_SIZE",
        "SEGMIRROR_BUCKET",
        "SEGMIRROR_SOURCE_CLUSTER_ID",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run backfill");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `backfill export` of the test source in `bucket` to `out`, plus `extra`.
pub fn export(bucket: &str, out: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "export",
        "--bucket",
        bucket,
        "--source-cluster-id",
        SOURCE,
        "--out",
        out,
    ];
    if !extra.contains(&"--topics") {
        args.extend_from_slice(&["--topics", ".*"]);
    }
    args.extend_from_slice(extra);
    backfill(&args)
}

/// What pyarrow and DuckDB read from an export in `dir`.
#[derive(Debug, serde::Deserialize)]
pub struct Readers {
    pub files: BTreeMap<String, FileInfo>,
    pub pyarrow: PyarrowRows,
    pub duckdb: DuckRows,
}

#[derive(Debug, serde::Deserialize)]
pub struct FileInfo {
    pub rows: i64,
    pub schema: String,
    pub metadata: BTreeMap<String, String>,
    pub sorting: Vec<(i64, bool)>,
    pub codec: Option<String>,
    pub offset_stats: Option<(i64, i64)>,
}

#[derive(Debug, serde::Deserialize)]
pub struct PyarrowRows {
    pub rows: Vec<Row>,
}

#[derive(Debug, serde::Deserialize)]
pub struct DuckRows {
    pub rows: Vec<Row>,
    /// topic, partition, rows, min offset, max offset, tombstones.
    pub per_partition: Vec<(String, i32, i64, i64, i64, i64)>,
}

/// Whether to run a test that reads its export with pyarrow and DuckDB:
/// false when `SEGMIRROR_SKIP_PYTHON=1`; a missing venv fails the test.
/// Called first, so that a skipped test does nothing.
pub fn readers_present() -> bool {
    segmirror_testkit::needs::python().is_some()
}

/// Reads the export in `dir` with pyarrow and DuckDB (the test checked
/// [`readers_present`] first).
pub fn read_export(dir: &Path) -> Readers {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/read_parquet.py");
    let out = python(&[script.as_os_str(), dir.as_os_str()], "read_parquet.py");
    serde_json::from_slice(&out).expect("readers' JSON")
}

/// Runs the Python of `tests/.venv` with `args`; its stdout, or a panic
/// naming `what` with its stderr.
fn python(args: &[&std::ffi::OsStr], what: &str) -> Vec<u8> {
    let python = segmirror_testkit::workspace_root().join("tests/.venv/bin/python");
    let out = Command::new(python)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Every file under `dir` (relative path -> bytes).
pub fn files_under(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).expect("under root");
                out.insert(rel.display().to_string(), std::fs::read(&p).expect("read"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// What a read_committed consumer reads from the source log dir, decoded
/// by kafka-python (`tests/fixtures/read_with_kafka_python.py`, no code of
/// ours) and filtered here by Kafka's rules: control batches dropped, a
/// transaction's records kept when its COMMIT marker comes, dropped on
/// ABORT, and records from the oldest transaction still open onwards
/// withheld (the last stable offset). Sorted like the readers' rows. The
/// test checked [`readers_present`] first.
pub fn kafka_python_read_committed(source: &Path) -> Vec<Row> {
    use base64::Engine;
    let out = segmirror_testkit::kafka_python::run_fixture(
        "read_with_kafka_python.py",
        &["--log-dir", source.to_str().expect("utf-8 path")],
    )
    .expect("checked by readers_present()");
    let parts: serde_json::Value = serde_json::from_slice(&out.stdout).expect("kafka-python JSON");
    let bytes = |v: &serde_json::Value, enc: &serde_json::Value| -> Option<String> {
        let text = v.as_str()?;
        let raw = match enc.as_str() {
            Some("base64") => base64::engine::general_purpose::STANDARD
                .decode(text)
                .expect("base64"),
            _ => text.as_bytes().to_vec(),
        };
        Some(hex(&raw))
    };
    let mut rows = Vec::new();
    for p in parts.as_array().expect("partitions") {
        let topic = p["topic"].as_str().expect("topic").to_string();
        let partition = p["partition"].as_i64().expect("partition") as i32;
        let mut kept: Vec<Row> = Vec::new();
        let mut open: BTreeMap<i64, (i64, Vec<Row>)> = BTreeMap::new();
        for b in p["batches"].as_array().expect("batches") {
            let pid = b["producer_id"].as_i64().expect("pid");
            if b["is_control"].as_bool().expect("control") {
                if let Some((_, recs)) = open.remove(&pid)
                    && b["control_type"] == "COMMIT"
                {
                    kept.extend(recs);
                }
                continue;
            }
            let recs: Vec<Row> = b["records"]
                .as_array()
                .expect("records")
                .iter()
                .map(|r| {
                    Row(
                        topic.clone(),
                        partition,
                        r["offset"].as_i64().expect("offset"),
                        r["timestamp"].as_i64().expect("timestamp"),
                        bytes(&r["key"], &r["key_encoding"]),
                        bytes(&r["value"], &r["value_encoding"]),
                        r["headers"]
                            .as_array()
                            .expect("headers")
                            .iter()
                            .map(|h| {
                                (
                                    h["key"].as_str().expect("header key").to_string(),
                                    bytes(&h["value"], &h["value_encoding"]),
                                )
                            })
                            .collect(),
                    )
                })
                .collect();
            if b["is_transactional"].as_bool().expect("txn") {
                let first = b["base_offset"].as_i64().expect("base");
                open.entry(pid)
                    .or_insert((first, Vec::new()))
                    .1
                    .extend(recs);
            } else {
                kept.extend(recs);
            }
        }
        let lso = open
            .values()
            .map(|(first, _)| *first)
            .min()
            .unwrap_or(i64::MAX);
        rows.extend(kept.into_iter().filter(|r| r.2 < lso));
    }
    rows.sort();
    rows
}

/// Runs README.md's Python block that reads an export directory as one
/// table ("The directory as one table"), on `dir`: the rows pyarrow's
/// `read_table` and DuckDB's `read_parquet` read. The test checked
/// [`readers_present`] first.
pub fn read_dir_as_the_readme_shows(dir: &Path) -> (usize, usize) {
    let readme = std::fs::read_to_string(segmirror_testkit::workspace_root().join("README.md"))
        .expect("README.md");
    let block = readme
        .split_once("The directory as one table")
        .and_then(|(_, rest)| rest.split_once("```python\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .expect("README.md's Python block after \"The directory as one table\"");
    let demo = "/tmp/segmirror-demo/parquet";
    assert!(block.contains(demo), "{block}");
    let script = format!(
        "{}print(table.num_rows, len(rows))\n",
        block.replace(demo, dir.to_str().expect("utf-8 path"))
    );
    let out = python(
        &["-c".as_ref(), script.as_ref()],
        &format!("README's block:\n{script}\n"),
    );
    let text = String::from_utf8_lossy(&out);
    let (a, b) = text.trim().split_once(' ').expect("two counts");
    (a.parse().expect("count"), b.parse().expect("count"))
}

/// Rewrites what `publish_all` shipped so that every range of every
/// partition lives in one pack (`manifest::pack`): the pack is written, a
/// new manifest version of each partition names byte ranges of it
/// (`ShippedRange::object_offset`), and the old objects are deleted.
/// Returns the pack's key.
pub async fn repack_all(
    store: std::sync::Arc<dyn object_store::ObjectStore>,
    prefix: &str,
) -> String {
    let ms = ManifestStore::new(store, ClusterLayout::new(prefix, SOURCE).expect("layout"));
    let mut latest = Vec::new();
    let mut bytes = Vec::new();
    for tp in partitions() {
        let pk = PartitionKey {
            tp: tp.clone(),
            topic_id: topic_id(&tp.topic),
        };
        let m = ms
            .latest_manifest(&pk, None)
            .await
            .expect("read")
            .expect("published");
        for r in &m.ranges {
            bytes.push(ms.get(&r.key).await.expect("object").to_vec());
        }
        latest.push((pk, m));
    }
    let mut at = 0;
    let mut inputs = Vec::new();
    for (pk, m) in &latest {
        for r in &m.ranges {
            inputs.push(manifest::pack::PackInput::of_range(
                pk.tp.clone(),
                pk.topic_id,
                &bytes[at],
                r,
            ));
            at += 1;
        }
    }
    let (object, index) = manifest::pack::encode(inputs).expect("pack");
    let key = ms
        .layout()
        .pack_key("0190a2b3c4d5e0000000000000b1")
        .expect("key");
    ms.put_new(&key, Bytes::from(object))
        .await
        .expect("put pack");
    for (pk, m) in latest {
        let mut next = m.clone();
        for r in &mut next.ranges {
            let e = index
                .entries
                .iter()
                .find(|e| e.tp == pk.tp && e.base_offset == r.base_offset)
                .expect("packed");
            assert_eq!(e.crc32c, r.crc32c);
            r.key = key.clone();
            r.object_offset = Some(e.start);
        }
        let committed = ms
            .update_manifest(&pk, Some(m.version), |_| {
                Ok::<_, std::convert::Infallible>(Some(next.clone()))
            })
            .await
            .expect("store")
            .expect("decided")
            .expect("committed");
        ms.publish_head(None, "test", &[HeadEntry::for_manifest(&committed)])
            .await
            .expect("head");
        for r in &m.ranges {
            ms.delete(&r.key).await.expect("delete the old object");
        }
    }
    key
}
