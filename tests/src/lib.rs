//! The end-to-end test kit: one scenario body, several backends.
//!
//! [`backends`] yields `memory://`, `file://` (a temp dir) and, when
//! `SEGMIRROR_TEST_S3_BUCKET` is set (CI starts moto and sets it, with the
//! AWS endpoint and credentials), an S3-compatible server under a fresh
//! prefix. Every scenario in `tests/` runs its body on each.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use applier::{Applier, ApplierOptions};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::{PartitionLog, TopicPartition};
use manifest::bucket::BucketUrl;
use object_store::ObjectStore;
use shipper::{Shipper, ShipperOptions};

/// One bucket backend for a scenario.
pub struct Backend {
    /// `memory`, `file` or `s3`.
    pub name: &'static str,
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// Key prefix inside it.
    pub prefix: String,
    /// The bucket URL (for the binaries), None for memory.
    pub url: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

/// The backends every scenario runs on.
pub fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().expect("tempdir");
    let file_url = format!("file://{}", dir.path().display());
    let mut out = vec![
        Backend {
            name: "memory",
            store: BucketUrl::Memory.build().expect("memory"),
            prefix: String::new(),
            url: None,
            _dir: None,
        },
        Backend {
            name: "file",
            store: BucketUrl::parse(&file_url)
                .expect("url")
                .build()
                .expect("file"),
            prefix: String::new(),
            url: Some(file_url),
            _dir: Some(dir),
        },
    ];
    if let Ok(bucket) = std::env::var("SEGMIRROR_TEST_S3_BUCKET") {
        let url = format!("s3://{bucket}/e2e-{}", manifest::layout::new_upload_id());
        let parsed = BucketUrl::parse(&url).expect("s3 url");
        out.push(Backend {
            name: "s3",
            store: parsed.build().expect("s3"),
            prefix: parsed.prefix().to_string(),
            url: Some(url),
            _dir: None,
        });
    } else if std::env::var_os("CI").is_some() {
        panic!("CI must run the scenarios on S3 too: set SEGMIRROR_TEST_S3_BUCKET (see .ci/run)");
    }
    out
}

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

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("root")
        .to_path_buf()
}

/// Generates the kafka-python log dir (an implementation independent of
/// ours) into `dir` and returns its expected.json.
pub fn kafka_python_logdir(dir: &Path) -> serde_json::Value {
    let root = workspace_root();
    let python = root.join("tests/.venv/bin/python");
    let ok = std::process::Command::new(&python)
        .args(["-c", "import kafka"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        let status = std::process::Command::new("bash")
            .arg(root.join("tests/fixtures/setup.sh"))
            .status()
            .expect("setup.sh");
        assert!(status.success(), "tests/fixtures/setup.sh failed");
    }
    let out = std::process::Command::new(&python)
        .arg(root.join("tests/fixtures/gen_kafka_logdir.py"))
        .args(["--out", dir.to_str().expect("utf-8"), "--seed", "1"])
        .output()
        .expect("generator");
    assert!(
        out.status.success(),
        "generator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(dir.join("expected.json")).expect("expected.json"))
        .expect("json")
}
