//! Shared helpers for the shipper's tests: logs written with kafkalog, the
//! backends every test body runs on (`segmirror_testkit`'s, counted), and
//! readers of what was shipped. The kafka-python fixtures are
//! `segmirror_testkit::kafka_python`.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bucket::counting::CountingStore;
use bucket::store::ManifestStore;
use bytes::Bytes;
use futures::TryStreamExt;
use kafkalog::batch::BatchHeader;
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::checkpoint::{self, EpochEntry};
use kafkalog::reader::PartitionReader;
use kafkalog::{LogConfig, LogDir, PartitionLog, TopicId, TopicPartition};
use manifest::layout::{ClusterLayout, PartitionKey};
use manifest::partition::{PartitionManifest, ShippedRange};
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use shipper::ShipperOptions;

/// The source cluster id of every test.
pub const CLUSTER: &str = "src-1";

/// A bucket to run a test body on: one of `segmirror_testkit::backends`,
/// counted.
pub struct Backend {
    /// `memory`, `file` or `s3`.
    pub name: &'static str,
    /// The store, counted.
    pub counting: CountingStore,
    /// Key prefix (a fresh one per test on S3).
    pub prefix: String,
    _kit: segmirror_testkit::Backend,
}

impl Backend {
    /// The store as the shipper takes it.
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        self.counting.as_dyn()
    }

    /// The manifest store of the test cluster.
    pub fn manifests(&self) -> ManifestStore {
        ManifestStore::new(
            self.counting.inner().clone(),
            ClusterLayout::new(&self.prefix, CLUSTER).expect("layout"),
        )
    }
}

/// The backends every test body runs on (`segmirror_testkit::backends`),
/// each behind a [`CountingStore`].
pub fn backends() -> Vec<Backend> {
    segmirror_testkit::backends()
        .into_iter()
        .map(|b| Backend {
            name: b.name,
            counting: CountingStore::new(Arc::clone(&b.store)),
            prefix: b.prefix.clone(),
            _kit: b,
        })
        .collect()
}

/// Test options: small objects and parts so that splitting and multipart
/// uploads happen on small logs. Layout 1 (an object and a manifest
/// version per range, `pack_below` 0, no head deltas): these tests follow
/// objects, versions, sweeps and fencing through that layout, which
/// buckets written before layout 2 was the default keep. Tests of layout 2
/// set it (`racing.rs`, `leadership.rs`,
/// `tests/tests/compaction.rs`).
pub fn options(log_dir: &Path, b: &Backend, shipper_id: &str) -> ShipperOptions {
    let mut o = ShipperOptions::new(vec![log_dir.to_path_buf()], CLUSTER);
    (o.pack_below, o.head_deltas) = (0, false);
    o.bucket_prefix = b.prefix.clone();
    o.shipper_id = shipper_id.to_string();
    o.tail_interval = Duration::from_millis(10);
    // S3 parts are at least 5 MiB; elsewhere small parts exercise multipart.
    o.part_size = if b.name == "s3" { 5 << 20 } else { 8 * 1024 };
    o.max_object_size = 32 * 1024;
    o.max_cycle_bytes = 64 << 20;
    o
}

/// A topic-partition.
pub fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition).expect("tp")
}

/// A fixed topic id per `n`.
pub fn topic_id(n: u8) -> TopicId {
    let mut b = [7u8; 16];
    b[15] = n;
    b[0] = n.wrapping_add(1);
    TopicId::from_bytes(b)
}

/// Opens (creating) a kafkalog partition with small segments.
pub fn open_log(dir: &LogDir, t: &TopicPartition, id: TopicId, segment_bytes: u64) -> PartitionLog {
    dir.open_or_create_partition(
        t,
        Some(id),
        LogConfig {
            segment_bytes,
            ..LogConfig::default()
        },
    )
    .expect("open partition")
}

/// Appends one batch of `records` records of `value_len` bytes at `epoch`.
pub fn append(log: &mut PartitionLog, records: usize, epoch: i32, value_len: usize) {
    let recs: Vec<RecordInput> = (0..records)
        .map(|i| RecordInput {
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(vec![b'a' + (i % 26) as u8; value_len]),
            headers: vec![],
        })
        .collect();
    let mut batch = build_batch(&BatchSpec::new(0, -1), &recs).expect("batch");
    log.append_as_leader(&mut batch, epoch).expect("append");
}

/// Appends `batches` batches of `records` records each.
pub fn append_n(
    log: &mut PartitionLog,
    batches: usize,
    records: usize,
    epoch: i32,
    value_len: usize,
) {
    for _ in 0..batches {
        append(log, records, epoch, value_len);
    }
}

/// Writes the root `replication-offset-checkpoint`.
pub fn set_hw(root: &Path, entries: &[(TopicPartition, i64)]) {
    let map: BTreeMap<TopicPartition, i64> = entries.iter().cloned().collect();
    checkpoint::write_offset_checkpoint(
        &root.join(checkpoint::REPLICATION_OFFSET_CHECKPOINT),
        &map,
        false,
    )
    .expect("write hw");
}

/// Every batch of a source partition: (segment base, header, bytes).
pub fn source_batches(root: &Path, t: &TopicPartition) -> Vec<(i64, BatchHeader, Vec<u8>)> {
    let reader = PartitionReader::open(root, t).expect("reader");
    let mut out = Vec::new();
    for seg in reader.segments().expect("segments") {
        kafkalog::segment::scan(&seg.path, 0, true, |h, b| {
            out.push((seg.base_offset, *h, b.to_vec()));
            ControlFlow::Continue(())
        })
        .expect("scan");
    }
    out
}

/// The source's leader epoch checkpoint.
pub fn source_epochs(root: &Path, t: &TopicPartition) -> Vec<EpochEntry> {
    PartitionReader::open(root, t)
        .expect("reader")
        .epoch_entries()
        .expect("epochs")
}

/// The latest manifest of a partition: the newest head's version (made
/// by deltas or not), else the newest object.
pub async fn latest(
    ms: &ManifestStore,
    t: &TopicPartition,
    id: TopicId,
) -> Option<PartitionManifest> {
    ms.newest_manifest(&PartitionKey {
        tp: t.clone(),
        topic_id: id,
    })
    .await
    .expect("latest manifest")
}

/// Every version of a partition's manifest, oldest first.
pub async fn all_versions(
    ms: &ManifestStore,
    t: &TopicPartition,
    id: TopicId,
) -> Vec<PartitionManifest> {
    let pk = PartitionKey {
        tp: t.clone(),
        topic_id: id,
    };
    let keys = ms.list(&ms.layout().manifest_dir(&pk)).await.expect("list");
    let mut out = Vec::new();
    for k in keys {
        let v = ms
            .layout()
            .parse_manifest_key(&pk, &k)
            .expect("manifest key");
        out.push(ms.get_manifest(&pk, v).await.expect("manifest"));
    }
    out
}

/// Every range of a manifest: paged, then inline.
pub async fn all_ranges(ms: &ManifestStore, m: &PartitionManifest) -> Vec<ShippedRange> {
    let mut out = Vec::new();
    for p in &m.pages {
        out.extend(ms.get_page(&p.key).await.expect("page").ranges);
    }
    out.extend(m.ranges.iter().cloned());
    out
}

/// The objects of `ranges`, each checked against its size and CRC-32C.
pub async fn fetch(ms: &ManifestStore, ranges: &[ShippedRange]) -> Vec<Bytes> {
    let mut out = Vec::new();
    for r in ranges {
        let b = ms.get_in(&r.key, r.object_range()).await.expect("object");
        assert_eq!(b.len() as u64, r.bytes, "{}: size", r.key);
        assert_eq!(crc32c::crc32c(&b), r.crc32c, "{}: crc", r.key);
        out.push(b);
    }
    out
}

/// Keys of every object under a prefix of the raw store.
pub async fn keys_under(store: &Arc<dyn ObjectStore>, prefix: &str) -> Vec<String> {
    let p = ObjectPath::from(prefix);
    let metas: Vec<_> = store.list(Some(&p)).try_collect().await.expect("list");
    let mut keys: Vec<String> = metas.into_iter().map(|m| m.location.to_string()).collect();
    keys.sort();
    keys
}

/// Checks that a partition's shipped objects are exactly the source's
/// batches from its log start up to `end` (exclusive), byte for byte, in
/// ranges of whole batches of one segment each, with correct metadata.
pub async fn assert_shipped_matches_source(
    ms: &ManifestStore,
    m: &PartitionManifest,
    root: &Path,
    t: &TopicPartition,
    end: i64,
) {
    check_shipped(ms, m, root, t, end, false).await
}

/// As [`assert_shipped_matches_source`], and every range that ends a rolled
/// segment says so (true when the log was shipped after its segments
/// rolled: a tail range shipped before its segment rolled keeps `false`).
pub async fn assert_shipped_matches_source_strict(
    ms: &ManifestStore,
    m: &PartitionManifest,
    root: &Path,
    t: &TopicPartition,
    end: i64,
) {
    check_shipped(ms, m, root, t, end, true).await
}

async fn check_shipped(
    ms: &ManifestStore,
    m: &PartitionManifest,
    root: &Path,
    t: &TopicPartition,
    end: i64,
    strict_completes: bool,
) {
    let ranges = all_ranges(ms, m).await;
    let objects = fetch(ms, &ranges).await;
    let batches = source_batches(root, t);
    let expected: Vec<&(i64, BatchHeader, Vec<u8>)> = batches
        .iter()
        .filter(|(_, h, _)| h.last_offset() >= m.log_start_offset && h.last_offset() < end)
        .collect();
    let shipped: Vec<u8> = objects.iter().flat_map(|b| b.iter().copied()).collect();
    let source: Vec<u8> = expected
        .iter()
        .flat_map(|(_, _, b)| b.iter().copied())
        .collect();
    assert_eq!(shipped.len(), source.len(), "{t}: shipped bytes");
    assert!(
        shipped == source,
        "{t}: the shipped objects are not the source's batches"
    );
    assert_eq!(
        m.shipped_end_offset,
        expected
            .last()
            .map_or(m.shipped_end_offset, |(_, h, _)| h.next_offset())
    );
    // Each range: whole batches of one segment, metadata right.
    let mut i = 0;
    for (r, obj) in ranges.iter().zip(&objects) {
        let mut n = 0u32;
        let mut max_ts = -1;
        let mut epochs: Vec<EpochEntry> = Vec::new();
        for item in kafkalog::batch::BatchIter::verified(obj, 0) {
            let (h, _) = item.expect("valid batch in object");
            let (seg, sh, _) = expected[i];
            assert_eq!(
                (h.base_offset, h.crc),
                (sh.base_offset, sh.crc),
                "{t}: batch {i}"
            );
            assert_eq!(*seg, r.segment_base_offset, "{t}: range {} segment", r.key);
            if epochs
                .last()
                .is_none_or(|e| e.epoch != h.partition_leader_epoch)
            {
                epochs.push(EpochEntry {
                    epoch: h.partition_leader_epoch,
                    start_offset: h.base_offset,
                });
            }
            max_ts = max_ts.max(h.max_timestamp);
            n += 1;
            i += 1;
        }
        assert_eq!(n, r.batches, "{t}: {} batches", r.key);
        assert_eq!(r.epochs.entries(), epochs, "{t}: {} epochs", r.key);
        assert_eq!(r.max_timestamp, max_ts, "{t}: {} max timestamp", r.key);
        let first = kafkalog::batch::BatchIter::new(obj, 0)
            .next()
            .expect("one")
            .expect("ok")
            .0;
        assert_eq!(r.base_offset, first.base_offset);
        let next_seg = batches
            .iter()
            .map(|(s, _, _)| *s)
            .find(|s| *s > r.segment_base_offset);
        let seg_last = batches
            .iter()
            .filter(|(s, _, _)| *s == r.segment_base_offset)
            .map(|(_, h, _)| h.last_offset())
            .max();
        let ends_rolled = next_seg.is_some() && seg_last == Some(r.last_offset);
        if strict_completes {
            assert_eq!(
                r.completes_segment, ends_rolled,
                "{t}: {} completes_segment",
                r.key
            );
        } else if r.completes_segment {
            assert!(ends_rolled, "{t}: {} completes_segment", r.key);
        }
    }
}

/// Writes a small partition directly (one segment holding `batches`,
/// `partition.metadata`), without kafkalog's fsyncs: for tests with many
/// partitions.
pub fn raw_partition(root: &Path, t: &TopicPartition, id: TopicId, batches: usize) {
    let dir = root.join(t.dir_name());
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut bytes = Vec::new();
    for i in 0..batches {
        let recs = vec![RecordInput {
            timestamp: 1_700_000_000_000,
            key: Some(b"k".to_vec()),
            value: Some(vec![b'v'; 50]),
            headers: vec![],
        }];
        bytes.extend(build_batch(&BatchSpec::new(i as i64, 0), &recs).expect("batch"));
    }
    std::fs::write(dir.join(kafkalog::segment::file_name(0, ".log")), bytes).expect("write");
    checkpoint::write_partition_metadata(
        &dir.join(checkpoint::PARTITION_METADATA),
        &checkpoint::PartitionMetadata::new(id),
        false,
    )
    .expect("metadata");
}

/// What [`FaultyStore::answer_already_exists`] does to an object after it
/// landed and before the write is answered `AlreadyExists`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tamper {
    /// Nothing: the object is the one written (a lost answer).
    Nothing,
    /// Flips a bit of its last byte: same size, another CRC-32C.
    SameSize,
    /// Appends a byte.
    Longer,
}

impl Tamper {
    /// Rewrites the object at `location` of `store` as `self` says.
    async fn apply(
        self,
        store: &Arc<dyn ObjectStore>,
        location: &ObjectPath,
    ) -> object_store::Result<()> {
        use object_store::ObjectStoreExt;
        if self == Tamper::Nothing {
            return Ok(());
        }
        let mut bytes = store.get(location).await?.bytes().await?.to_vec();
        match self {
            Tamper::SameSize => {
                if let Some(b) = bytes.last_mut() {
                    *b ^= 0x01;
                }
            }
            Tamper::Longer => bytes.push(0),
            Tamper::Nothing => {}
        }
        store.put(location, bytes.into()).await.map(|_| ())
    }
}

fn already_exists(location: &ObjectPath) -> object_store::Error {
    object_store::Error::AlreadyExists {
        path: location.to_string(),
        source: "injected: the store client's retry of a create-if-absent write whose first attempt landed".into(),
    }
}

/// A store that fails `put_opts` on keys containing a pattern while armed
/// (to leave a cycle's uploads without their manifest, as a crash would).
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    pattern: std::sync::Mutex<Option<String>>,
    /// Write, then report a failure (a lost answer), instead of failing.
    lose_answer: std::sync::atomic::AtomicBool,
    /// Write (single PUTs and multipart completions), tamper, then answer
    /// `AlreadyExists`, instead of failing.
    already_exists: std::sync::Mutex<Option<Tamper>>,
}

impl FaultyStore {
    /// Wraps `inner`, disarmed.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<FaultyStore> {
        Arc::new(FaultyStore {
            inner,
            pattern: std::sync::Mutex::new(None),
            lose_answer: std::sync::atomic::AtomicBool::new(false),
            already_exists: std::sync::Mutex::new(None),
        })
    }

    /// Writes to keys containing `pattern`, single PUTs and multipart
    /// completions, land and are answered `AlreadyExists`, as object_store's
    /// retry of a create-if-absent write whose answer was lost sees it; the
    /// object is first changed as `tamper` says.
    pub fn answer_already_exists(&self, pattern: &str, tamper: Tamper) {
        *self.already_exists.lock().expect("lock") = Some(tamper);
        self.arm(pattern);
    }

    /// True when writes of `location` are to be faulted.
    fn armed_for(&self, location: &ObjectPath) -> bool {
        let armed = self.pattern.lock().expect("lock").clone();
        armed.is_some_and(|p| location.as_ref().contains(&p))
    }

    /// Fails puts to keys containing `pattern` from now on.
    pub fn arm(&self, pattern: &str) {
        *self.pattern.lock().expect("lock") = Some(pattern.to_string());
    }

    /// Writes to keys containing `pattern` succeed but report a failure
    /// (a request whose answer was lost).
    pub fn lose_answers(&self, pattern: &str) {
        self.lose_answer
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.arm(pattern);
    }

    /// Back to normal.
    pub fn disarm(&self) {
        *self.pattern.lock().expect("lock") = None;
        *self.already_exists.lock().expect("lock") = None;
    }
}

/// A multipart upload whose completion lands, is tampered with, and is
/// answered `AlreadyExists`.
#[derive(Debug)]
struct AnswerAlreadyExists {
    upload: Box<dyn object_store::MultipartUpload>,
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
    tamper: Tamper,
}

#[async_trait::async_trait]
impl object_store::MultipartUpload for AnswerAlreadyExists {
    fn put_part(&mut self, data: object_store::PutPayload) -> object_store::UploadPart {
        self.upload.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<object_store::PutResult> {
        self.upload.complete().await?;
        self.tamper.apply(&self.store, &self.location).await?;
        Err(already_exists(&self.location))
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.upload.abort().await
    }
}

impl std::fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        if self.armed_for(location) {
            let tamper = *self.already_exists.lock().expect("lock");
            if let Some(tamper) = tamper {
                self.inner.put_opts(location, payload, opts).await?;
                tamper.apply(&self.inner, location).await?;
                return Err(already_exists(location));
            }
            if self.lose_answer.load(std::sync::atomic::Ordering::SeqCst) {
                self.inner.put_opts(location, payload, opts).await?;
            }
            return Err(object_store::Error::Generic {
                store: "faulty",
                source: format!("injected failure writing {location}").into(),
            });
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        let tamper = *self.already_exists.lock().expect("lock");
        match tamper {
            Some(tamper) if self.armed_for(location) => Ok(Box::new(AnswerAlreadyExists {
                upload,
                store: Arc::clone(&self.inner),
                location: location.clone(),
                tamper,
            })),
            _ => Ok(upload),
        }
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Runs the `shipper` binary with `args` (`RUST_LOG=warn`, no `SEGMIRROR_*`
/// variable of the test's environment): exit code, stdout, stderr.
pub fn shipper_cli(args: &[&str]) -> (i32, String, String) {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_shipper"));
    c.env("RUST_LOG", "warn");
    for (k, _) in std::env::vars() {
        if k.starts_with("SEGMIRROR_") {
            c.env_remove(k);
        }
    }
    let out = c.args(args).output().expect("run shipper");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether the S3 test server is there: false when `SEGMIRROR_SKIP_S3=1`
/// skips it; panics (saying how to start it) when it is missing.
pub fn s3_available() -> bool {
    segmirror_testkit::needs::s3().is_some()
}
