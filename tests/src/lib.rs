//! The end-to-end test kit: one scenario body, several backends.
//!
//! [`backends`] (from `segmirror-testkit`) yields `memory://`, `file://` (a temp dir) and
//! the S3 test server under a fresh prefix (`SEGMIRROR_TEST_S3_BUCKET`, set
//! with the AWS endpoint and credentials by `tests/s3-server.sh`; without
//! it a test fails unless `SEGMIRROR_SKIP_S3=1`). Every scenario in
//! `tests/` runs its body on each.
#![allow(missing_docs)]

use std::path::Path;
use std::time::Duration;

use applier::{Applier, ApplierOptions};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::{PartitionLog, TopicPartition};
use shipper::{Shipper, ShipperOptions};

pub use segmirror_testkit::kafka_python::generate_kafka_logdir;
pub use segmirror_testkit::{Backend, backends};

/// Shipper options for tests: quick, deterministic, nothing swept away.
pub fn shipper_options(b: &Backend, log_dir: &Path, cluster: &str) -> ShipperOptions {
    let mut o = ShipperOptions::new(vec![log_dir.to_path_buf()], cluster);
    o.bucket_prefix = b.prefix.clone();
    o.tail_interval = Duration::from_millis(50);
    o.delete_grace = None;
    o.sweep_on_start = false;
    o
}

/// Ships everything shippable now.
pub async fn ship(b: &Backend, log_dir: &Path, cluster: &str) -> shipper::CycleReport {
    let mut s =
        Shipper::new(shipper_options(b, log_dir, cluster), b.store.clone()).expect("shipper");
    let report = s.ship_available().await;
    assert!(
        report.errors.is_empty(),
        "[{}] shipper errors: {:?}",
        b.name,
        report.errors
    );
    report
}

/// Applier options mirroring every topic of `source` into `dest`.
pub fn applier_options(b: &Backend, dest: &Path, source: &str, local: &str) -> ApplierOptions {
    let mut o = ApplierOptions::new(dest, source);
    o.bucket_prefix = b.prefix.clone();
    o.local_cluster_id = Some(local.to_string());
    o.topics = Some(regex::Regex::new("^.*$").expect("regex"));
    o
}

/// Opens an applier and applies everything available now.
pub async fn apply(b: &Backend, opts: ApplierOptions) -> Applier {
    let mut a = Applier::open(opts, Some(b.store.clone())).expect("applier");
    drain(&mut a).await;
    a
}

/// Runs cycles until one does nothing.
pub async fn drain(a: &mut Applier) {
    for _ in 0..20 {
        let r = a.run_once().await;
        if r.batches == 0 && r.transitions == 0 {
            return;
        }
    }
}

/// Appends `n` records at `epoch` as the leader, `per_batch` per batch.
pub fn produce(log: &mut PartitionLog, n: usize, epoch: i32, per_batch: usize) {
    let recs: Vec<RecordInput> = (0..n)
        .map(|i| RecordInput {
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(format!("key-{i}").into_bytes()),
            value: Some(format!("value-{i}-{}", "x".repeat(64)).into_bytes()),
            headers: vec![],
        })
        .collect();
    for chunk in recs.chunks(per_batch.max(1)) {
        let mut batch = build_batch(&BatchSpec::new(0, epoch), chunk).expect("batch");
        log.append_as_leader(&mut batch, epoch).expect("append");
    }
}

/// The bytes of every segment file of a partition, by base offset.
pub fn segment_files(root: &Path, tp: &TopicPartition) -> Vec<(i64, Vec<u8>)> {
    kafkalog::reader::PartitionReader::open(root, tp)
        .expect("reader")
        .segments()
        .expect("segments")
        .into_iter()
        .map(|s| (s.base_offset, std::fs::read(&s.path).expect("read")))
        .collect()
}

/// Log end offset of a partition, from its files.
pub fn log_end(root: &Path, tp: &TopicPartition) -> i64 {
    kafkalog::reader::PartitionReader::open(root, tp)
        .expect("reader")
        .for_each_batch(0, false, |_, _| std::ops::ControlFlow::Continue(()))
        .expect("walk")
}

/// Epoch lineage of a partition as `(epoch, start)` pairs.
pub fn lineage(root: &Path, tp: &TopicPartition) -> Vec<(i32, i64)> {
    kafkalog::reader::PartitionReader::open(root, tp)
        .expect("reader")
        .epoch_entries()
        .expect("epochs")
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect()
}
