//! The source topic's lifecycle on the mirror (issue 29, deliverable 4;
//! `docs/mirroring.md`, "Topic lifecycle"):
//! - a topic deleted at the source (the real shipper publishes a version
//!   with `deleted = true` once the partition dir has been gone for its
//!   grace period) stays on the mirror with every record, read-only, in
//!   its state (MIRRORING, never FAILED); `applier status` (table and
//!   JSON) and `applier once` say the source deleted it, across restarts;
//! - a topic deleted and created again under the same name (a new topic
//!   id, a new manifest chain) fails the old partition with a message
//!   naming both ids and what to do, `start` is refused with nothing
//!   changed, the new topic's records are never appended to the old
//!   one's; once the operator removes the partition dir, the new topic is
//!   mirrored from scratch.
//!
//! The source side is the shipper library (in process, with a manual clock
//! for its grace period); the destination is the `applier` binary.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bucket::store::ManifestStore;
use common::{SOURCE, file_bucket, produce, tp};
use kafkalog::reader::PartitionReader;
use kafkalog::{LogConfig, LogDir, TopicId};
use manifest::clock::ManualClock;
use serde_json::Value;
use shipper::{Shipper, ShipperOptions};

const OLD: &str = "vVw7a5a_QkWcK7JvBD2t8Q";
const NEW: &str = "AAAAAAAAAAAAAAAAAAAAAg";

fn id(text: &str) -> TopicId {
    text.parse().expect("topic id")
}

struct World {
    _dir: tempfile::TempDir,
    source: PathBuf,
    dest: PathBuf,
    url: String,
    store: ManifestStore,
    clock: ManualClock,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let (url, store) = file_bucket(&dir.path().join("bucket"));
        World {
            source: dir.path().join("source"),
            dest: dir.path().join("dest"),
            _dir: dir,
            url,
            store,
            clock: ManualClock::new(),
        }
    }

    fn dest(&self) -> &str {
        self.dest.to_str().expect("utf-8")
    }

    /// `orders-0` of topic id `topic` at the source, with `n` records (10
    /// per batch, small segments).
    fn source_topic(&self, topic: &str, n: usize) {
        let d = LogDir::open(&self.source).expect("source");
        let mut log = d
            .open_or_create_partition(
                &tp("orders"),
                Some(id(topic)),
                LogConfig {
                    segment_bytes: 4096,
                    ..LogConfig::default()
                },
            )
            .expect("create");
        produce(&mut log, n, 0);
        log.close().expect("close");
    }

    /// The source's `orders-0` dir removed, as Kafka does when the topic
    /// is deleted.
    fn delete_source_topic(&self) {
        LogDir::open(&self.source)
            .expect("source")
            .delete_partition(&tp("orders"))
            .expect("delete");
    }

    fn shipper(&self) -> Shipper {
        let mut opts = ShipperOptions::new(vec![self.source.clone()], SOURCE);
        opts.delete_grace = None;
        Shipper::new(opts, self.store.object_store().clone())
            .expect("shipper")
            .with_clock(Arc::new(self.clock.clone()))
    }

    /// `applier` with `args`: exit code and stderr + stdout.
    fn applier(&self, args: &[&str]) -> (i32, String) {
        common::run_applier(env!("CARGO_BIN_EXE_applier"), args)
    }

    fn once(&self) -> (i32, String) {
        self.applier(&[
            "once",
            "--log-dir",
            self.dest(),
            "--bucket",
            &self.url,
            "--source-cluster-id",
            SOURCE,
            "--topics",
            "orders",
        ])
    }

    /// Why `applier plan --json` says `orders-0` would be refused.
    fn plan_refused(&self) -> String {
        let (code, out) = self.applier(&[
            "plan",
            "--log-dir",
            self.dest(),
            "--bucket",
            &self.url,
            "--source-cluster-id",
            SOURCE,
            "--topics",
            "orders",
            "--json",
        ]);
        assert_eq!(code, 0, "{out}");
        let v: Value = serde_json::from_str(&out).expect("plan json");
        v["partitions"][0]["refused"]
            .as_str()
            .unwrap_or_else(|| panic!("refused: {v}"))
            .to_string()
    }

    /// `orders-0`'s row of `applier status --json`, and the table.
    fn status(&self) -> (Value, String) {
        let (code, out) = self.applier(&["status", "--log-dir", self.dest(), "--json"]);
        assert_eq!(code, 0, "{out}");
        let v: Value = serde_json::from_str(&out).expect("status json");
        let row = v["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .find(|r| r["topic"] == "orders")
            .cloned()
            .expect("orders-0");
        let (code, table) = self.applier(&["status", "--log-dir", self.dest()]);
        assert_eq!(code, 0, "{table}");
        (row, table)
    }
}

/// Each segment's base offset and `.log` bytes.
fn segments(root: &Path) -> Vec<(i64, Vec<u8>)> {
    PartitionReader::open(root, &tp("orders"))
        .expect("reader")
        .segments()
        .expect("segments")
        .into_iter()
        .map(|s| (s.base_offset, std::fs::read(&s.path).expect("read")))
        .collect()
}

fn local_topic_id(root: &Path) -> Option<TopicId> {
    PartitionReader::open(root, &tp("orders"))
        .expect("reader")
        .metadata()
        .expect("partition.metadata")
        .map(|m| m.topic_id)
}

fn read_only(root: &Path) -> bool {
    PartitionReader::open(root, &tp("orders"))
        .expect("reader")
        .read_only_reason()
        .expect("guard")
        .is_some()
}

/// The source's topic mirrored (50 records), then deleted at the source
/// and published as deleted by the shipper after its grace period.
async fn mirrored_then_deleted(w: &World, shipper: &mut Shipper) -> Vec<(i64, Vec<u8>)> {
    w.source_topic(OLD, 50);
    let r = shipper.ship_available().await;
    assert!(r.errors.is_empty(), "{r:?}");
    let (code, out) = w.once();
    assert_eq!(code, 0, "{out}");
    let mirrored = segments(&w.dest);
    assert_eq!(mirrored, segments(&w.source));

    w.delete_source_topic();
    assert_eq!(shipper.run_cycle().await.deleted_partitions, 0);
    w.clock.advance(Duration::from_secs(600));
    let r = shipper.run_cycle().await;
    assert_eq!(r.deleted_partitions, 1, "{r:?}");
    mirrored
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deleted_at_the_source_is_kept_read_only_and_shown_as_deleted() {
    let w = World::new();
    let mut shipper = w.shipper();
    let mirrored = mirrored_then_deleted(&w, &mut shipper).await;

    // Applied like any version: nothing new, nothing cut, not FAILED.
    let (code, out) = w.once();
    assert_eq!(code, 0, "a normal deletion is not a failure: {out}");
    assert!(
        out.contains("orders-0 source deleted at") && out.contains("read-only"),
        "`once` says so: {out}"
    );
    for restart in 0..2 {
        let (row, table) = w.status();
        assert_eq!(row["state"], "MIRRORING", "{row}");
        assert_eq!(row["source_deleted"], true, "{row}");
        assert!(row["source_deleted_at_ms"].as_i64().is_some(), "{row}");
        assert_eq!(row["last_error"], Value::Null, "{row}");
        assert_eq!(row["local_log_end_offset"], 50, "{row}");
        assert!(
            table.contains("orders-0 source deleted at"),
            "the table says so: {table}"
        );
        assert_eq!(segments(&w.dest), mirrored, "every record kept");
        assert!(read_only(&w.dest), "producers still refused");
        if restart == 0 {
            // Another process: the mark is in the record.
            let (code, out) = w.once();
            assert_eq!(code, 0, "{out}");
        }
    }

    // The operator keeps it as a topic of its own: a failover as usual.
    let (code, out) = w.applier(&["stop", "--log-dir", w.dest(), "--topic", "orders"]);
    assert_eq!(code, 0, "{out}");
    assert!(!read_only(&w.dest));
    assert_eq!(segments(&w.dest), mirrored);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_topic_fails_the_old_partition_until_the_operator_removes_its_dir() {
    let w = World::new();
    let mut shipper = w.shipper();
    let mirrored = mirrored_then_deleted(&w, &mut shipper).await;
    let (code, out) = w.once();
    assert_eq!(code, 0, "{out}");

    // The topic is created again under the same name: a new topic id, a
    // new manifest chain with other records.
    w.source_topic(NEW, 20);
    let r = shipper.run_cycle().await;
    assert_eq!(r.committed, 1, "{r:?}");

    let expected = format!(
        "inconsistent topic id: the source topic was recreated (old id {OLD}, new id {NEW})"
    );
    // `applier plan` says what the next run does.
    let refused = w.plan_refused();
    assert!(refused.contains(&expected), "{refused}");
    // Twice: each `once` is a new process (a restart).
    for _ in 0..2 {
        let (code, out) = w.once();
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("FAILED: orders-0"), "{out}");
        let (row, table) = w.status();
        assert_eq!(row["state"], "FAILED", "{row}");
        assert_eq!(row["retryable"], false, "{row}");
        let e = row["last_error"].as_str().expect("an error");
        assert!(
            e.contains(&expected) && e.contains("remove the partition dir"),
            "{e}"
        );
        assert!(table.contains(&expected), "{table}");
        assert_eq!(segments(&w.dest), mirrored, "nothing of the new topic here");
        assert_eq!(local_topic_id(&w.dest), Some(id(OLD)));
    }

    // `start` cannot make it mirror the new topic into the old one's log;
    // `applier plan` says so too.
    let refused = w.plan_refused();
    assert!(
        refused.contains("the source topic was recreated"),
        "{refused}"
    );
    let (code, out) = w.applier(&[
        "start",
        "--log-dir",
        w.dest(),
        "--bucket",
        &w.url,
        "--source-cluster-id",
        SOURCE,
        "--topic",
        "orders",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the source topic was recreated"), "{out}");
    let (row, _) = w.status();
    assert_eq!(row["state"], "FAILED", "nothing changed: {row}");
    assert_eq!(segments(&w.dest), mirrored);

    // The operator removes the partition dir: the new topic is mirrored.
    std::fs::remove_dir_all(w.dest.join("orders-0")).expect("remove");
    let (code, out) = w.once();
    assert_eq!(code, 0, "{out}");
    let (row, _) = w.status();
    assert_eq!(row["state"], "MIRRORING", "{row}");
    assert_eq!(row["local_log_end_offset"], 20, "{row}");
    assert_eq!(row["source_deleted"], false, "{row}");
    assert_eq!(local_topic_id(&w.dest), Some(id(NEW)));
    assert_eq!(segments(&w.dest), segments(&w.source));
}
