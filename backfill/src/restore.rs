//! `backfill restore`: a plain, writable Kafka log dir holding each
//! selected partition as it was up to a cut, built from the bucket.
//!
//! The cut, per partition:
//! - `--until-offset N`: every whole batch whose last offset is at or
//!   below N;
//! - `--until TIME`: every batch before the first one whose max timestamp
//!   is after TIME (the record clock; exact for LogAppendTime topics, the
//!   same approximation as Kafka's `offsetsForTimes` for CreateTime ones).
//!
//! Batches are never split, so the restored log is a byte-identical prefix
//! of the source's: same offsets, bytes, CRCs, leader epochs, segment
//! boundaries (each restored segment starts where the source's did), with
//! `partition.metadata`, the leader-epoch checkpoint and indexes written
//! by kafkalog as the applier writes them. Planning is pure
//! ([`plan_restore`], [`cut_object`]): the manifest's per-range last
//! offsets and max timestamps say which objects are fetched whole and
//! which one is cut; `--dry-run` prints that plan without downloading
//! data.
//!
//! A transaction still open at the cut stays open in the restored log by
//! default (no marker is invented; the report lists it, since a
//! read_committed consumer would wait on it). With
//! `abort_open_transactions` an ABORT marker is appended for each, at the
//! restored log's latest epoch, as the applier does at failover: the log
//! is then the source's prefix plus those markers.
//!
//! Refusals: a partition dir that already exists in the target (restore
//! into an empty or new dir, never over a log), and a partition with
//! nothing at or before the cut (its first batch is after it).

// `RestoreError` carries the stores' errors by value; it is built only on
// the failure path.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};

use bucket::store::{ManifestStore, StoreError};
use kafkalog::batch::BatchIter;
use kafkalog::{LogConfig, LogDir, TopicPartition};
use manifest::feed::HeadEntry;
use manifest::layout::PartitionKey;
use manifest::partition::{PartitionManifest, ShippedRange};

/// Where a restore stops: "the cut" in this module (not a
/// `manifest::mirror_record::Cut`, which is offsets a start removes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreEnd {
    /// Whole batches ending at or below this offset.
    Offset(i64),
    /// Batches before the first whose max timestamp is after this (ms).
    Time(i64),
}

impl RestoreEnd {
    /// Whether a whole range (object) is before the cut.
    fn keeps_range(&self, r: &ShippedRange) -> bool {
        match *self {
            RestoreEnd::Offset(n) => r.last_offset <= n,
            RestoreEnd::Time(t) => r.max_timestamp <= t,
        }
    }

    /// Whether a batch with these bounds is before the cut.
    fn keeps_batch(&self, last_offset: i64, max_timestamp: i64) -> bool {
        match *self {
            RestoreEnd::Offset(n) => last_offset <= n,
            RestoreEnd::Time(t) => max_timestamp <= t,
        }
    }
}

/// Packed ranges at most this far apart in a pack are read by one GET
/// ([`Restorer::read_ahead`]; the gap's bytes are read and dropped).
const READ_AHEAD_GAP: u64 = 64 << 10;
/// Longest run read by one GET.
const READ_AHEAD_RUN: u64 = 16 << 20;
/// Bytes of packed ranges read ahead for a group of partitions (beyond
/// it, a range is read by its own GET when its partition is restored).
pub const READ_AHEAD_MEMORY: u64 = 256 << 20;
/// Partitions planned and read ahead together (their plans are held at
/// once).
pub const PARTITIONS_PER_READ_AHEAD: usize = 256;

/// The objects one partition's restore fetches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangesToFetch {
    /// Fetched and appended whole.
    pub whole: Vec<ShippedRange>,
    /// Fetched and cut at a batch boundary (the first range the cut falls
    /// in, if any).
    pub partial: Option<ShippedRange>,
}

impl RangesToFetch {
    /// Bytes downloaded.
    pub fn bytes(&self) -> u64 {
        self.whole
            .iter()
            .chain(self.partial.iter())
            .map(|r| r.bytes)
            .sum()
    }

    /// Objects downloaded.
    pub fn objects(&self) -> usize {
        self.whole.len() + usize::from(self.partial.is_some())
    }
}

/// Plans one partition: the ranges (in offset order) kept whole, then the
/// one cut. Everything after the first range the cut falls in is left:
/// the restored log is a prefix.
pub fn plan_restore(ranges: &[ShippedRange], cut: RestoreEnd) -> RangesToFetch {
    let mut plan = RangesToFetch::default();
    for r in ranges {
        if cut.keeps_range(r) {
            plan.whole.push(r.clone());
            continue;
        }
        let may_hold_some = match cut {
            RestoreEnd::Offset(n) => r.base_offset <= n,
            // A range's first batch may be at or before the time.
            RestoreEnd::Time(_) => true,
        };
        if may_hold_some {
            plan.partial = Some(r.clone());
        }
        break;
    }
    plan
}

/// The length of the prefix of an object's bytes made of the whole
/// batches before the cut, and the offset after its last batch (`None`
/// when no batch is kept). A malformed batch ends the prefix: it is
/// reported by the caller's verification, not here.
pub fn cut_object(bytes: &[u8], cut: RestoreEnd) -> (usize, Option<i64>) {
    let mut len = 0;
    let mut end = None;
    for item in BatchIter::new(bytes, 0) {
        let Ok((h, b)) = item else { break };
        if !cut.keeps_batch(h.last_offset(), h.max_timestamp) {
            break;
        }
        len += b.len();
        end = Some(h.next_offset());
    }
    (len, end)
}

/// Why a restore (or one partition of it) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// The bucket failed for one partition.
    #[error("{tp}: reading the bucket: {source}")]
    Bucket {
        /// The partition.
        tp: TopicPartition,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// A shipped object is corrupt: the partition is not restored past it.
    #[error("{tp}: object {key} is corrupt: {detail}")]
    Corrupt {
        /// The partition.
        tp: TopicPartition,
        /// The object.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// The target already holds this partition.
    #[error("{tp}: {path} already exists: restore into an empty or new log dir (never over a log)")]
    Exists {
        /// The partition.
        tp: TopicPartition,
        /// Its dir in the target.
        path: PathBuf,
    },
    /// Writing the log failed.
    #[error("{tp}: {source}")]
    Log {
        /// The partition.
        tp: TopicPartition,
        /// The log's error.
        #[source]
        source: kafkalog::Error,
    },
}

/// One partition's restore: what it fetches and where it ends.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PartitionRestore {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Manifest version read.
    pub manifest_version: u64,
    /// The source's log start offset.
    pub log_start_offset: i64,
    /// Objects fetched.
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Offset after the last whole object; the restored end is at or
    /// above it (`--dry-run` does not read the cut object).
    pub end_at_least: i64,
    /// The restored log end offset (after a real run).
    pub end_offset: Option<i64>,
    /// The object the cut falls in, if any.
    pub cut_object: Option<String>,
    /// The restored log's latest leader epoch (in a plan: that of the last
    /// object fetched whole).
    pub epoch: Option<i32>,
    /// Open transactions left at the cut: (producer id, first offset).
    pub open_transactions: Vec<(i64, i64)>,
    /// Transactions open at the cut that were aborted with a marker:
    /// (producer id, first offset).
    pub aborted_transactions: Vec<(i64, i64)>,
    /// Nothing of the partition is at or before the cut.
    pub nothing_before_cut: bool,
}

/// Restores selected partitions from `store` into `log_dir`.
pub struct Restorer {
    store: ManifestStore,
    log_dir: PathBuf,
    cut: RestoreEnd,
    abort_open_transactions: bool,
}

impl Restorer {
    /// A restorer reading `store` and writing `log_dir`.
    pub fn new(store: ManifestStore, log_dir: &Path, cut: RestoreEnd) -> Restorer {
        Restorer {
            store,
            log_dir: log_dir.to_path_buf(),
            cut,
            abort_open_transactions: false,
        }
    }

    /// Appends an ABORT marker for each transaction open at the cut.
    pub fn abort_open_transactions(mut self, yes: bool) -> Restorer {
        self.abort_open_transactions = yes;
        self
    }

    async fn manifest(
        &self,
        tp: &TopicPartition,
        e: &HeadEntry,
    ) -> Result<(PartitionManifest, Vec<ShippedRange>), RestoreError> {
        let bucket = |source| RestoreError::Bucket {
            tp: tp.clone(),
            source,
        };
        let pk = PartitionKey {
            tp: tp.clone(),
            topic_id: e.topic_id,
        };
        let m = self
            .store
            .latest_from(&pk, e)
            .await
            .map_err(bucket)?
            .ok_or_else(|| {
                bucket(StoreError::NotFound {
                    key: self.store.layout().manifest_dir(&pk),
                })
            })?;
        let mut ranges = Vec::new();
        for page in &m.pages {
            let page = self.store.get_page(&page.key).await.map_err(bucket)?;
            ranges.extend(page.ranges);
        }
        ranges.extend(m.ranges.iter().cloned());
        Ok((m, ranges))
    }

    /// The plan of one partition (reads only manifests and pages).
    pub async fn plan(
        &self,
        tp: &TopicPartition,
        e: &HeadEntry,
    ) -> Result<(PartitionRestore, RangesToFetch, PartitionManifest), RestoreError> {
        let (m, ranges) = self.manifest(tp, e).await?;
        let fetch = plan_restore(&ranges, self.cut);
        let last_whole = fetch.whole.last();
        let report = PartitionRestore {
            topic: m.topic.clone(),
            partition: m.partition,
            manifest_version: m.version,
            log_start_offset: m.log_start_offset,
            objects: fetch.objects(),
            bytes: fetch.bytes(),
            end_at_least: last_whole.map_or(
                fetch
                    .partial
                    .as_ref()
                    .map_or(m.log_start_offset, |r| r.base_offset),
                |r| r.last_offset + 1,
            ),
            end_offset: None,
            cut_object: fetch.partial.as_ref().map(|r| r.key.clone()),
            // The cut object's epochs after the cut are not known here.
            epoch: last_whole.and_then(|r| r.epochs.latest_epoch()),
            open_transactions: Vec::new(),
            aborted_transactions: Vec::new(),
            nothing_before_cut: fetch.objects() == 0,
        };
        Ok((report, fetch, m))
    }

    /// Restores one partition (refusing an existing partition dir).
    pub async fn restore(
        &self,
        tp: &TopicPartition,
        e: &HeadEntry,
    ) -> Result<PartitionRestore, RestoreError> {
        let planned = self.plan(tp, e).await?;
        self.restore_planned(tp, planned).await
    }

    /// Reads ahead, one ranged GET per run, the packed ranges the `plans`
    /// fetch that share a pack (`bucket::ahead::runs`, at most `budget`
    /// bytes held): a pack holds one cycle's ranges of many partitions, so
    /// restoring them costs a GET per run, not one per partition and
    /// cycle. Each range is taken by the restore that fetches it. Returns
    /// the bytes read ahead.
    pub async fn read_ahead<'a>(
        &self,
        plans: impl IntoIterator<Item = &'a RangesToFetch>,
        budget: u64,
    ) -> u64 {
        let wanted = plans
            .into_iter()
            .flat_map(|f| f.whole.iter().chain(f.partial.iter()));
        let runs = bucket::ahead::runs(wanted, READ_AHEAD_GAP, READ_AHEAD_RUN, budget);
        if runs.is_empty() {
            return 0;
        }
        self.store.read_ahead(runs).await
    }

    /// Restores `partitions` (with `dry_run`, plans them), handing each
    /// result to `done` in order. They go in groups of
    /// [`PARTITIONS_PER_READ_AHEAD`]: each planned first (manifests only),
    /// then the packed ranges of the whole group read ahead together
    /// ([`Restorer::read_ahead`], at most [`READ_AHEAD_MEMORY`] bytes), then
    /// restored; what a failed partition left read ahead is dropped after
    /// its group.
    pub async fn restore_each(
        &self,
        partitions: &[(TopicPartition, &HeadEntry)],
        dry_run: bool,
        mut done: impl FnMut(&TopicPartition, Result<PartitionRestore, RestoreError>),
    ) {
        for group in partitions.chunks(PARTITIONS_PER_READ_AHEAD) {
            let mut planned = Vec::with_capacity(group.len());
            for (tp, e) in group {
                planned.push((tp, self.plan(tp, e).await));
            }
            if !dry_run {
                self.read_ahead(
                    planned
                        .iter()
                        .filter_map(|(_, p)| p.as_ref().ok().map(|(_, f, _)| f)),
                    READ_AHEAD_MEMORY,
                )
                .await;
            }
            for (tp, plan) in planned {
                let result = match plan {
                    Ok((r, _, _)) if dry_run => Ok(r),
                    Ok(plan) => self.restore_planned(tp, plan).await,
                    Err(e) => Err(e),
                };
                done(tp, result);
            }
            self.store.drop_read_ahead();
        }
    }

    /// [`Restorer::restore`] of a partition [`Restorer::plan`] planned.
    pub async fn restore_planned(
        &self,
        tp: &TopicPartition,
        (mut report, fetch, m): (PartitionRestore, RangesToFetch, PartitionManifest),
    ) -> Result<PartitionRestore, RestoreError> {
        let path = self.log_dir.join(tp.dir_name());
        if path.exists() {
            return Err(RestoreError::Exists {
                tp: tp.clone(),
                path,
            });
        }
        if report.nothing_before_cut {
            return Ok(report);
        }
        // Download and verify everything before creating the partition, so
        // a corrupt object leaves no half-restored partition behind.
        let mut objects = Vec::with_capacity(fetch.objects());
        let mut end = None;
        for (r, is_partial) in fetch
            .whole
            .iter()
            .map(|r| (r, false))
            .chain(fetch.partial.iter().map(|r| (r, true)))
        {
            let bytes = self
                .store
                .get_in(&r.key, r.object_range())
                .await
                .map_err(|source| RestoreError::Bucket {
                    tp: tp.clone(),
                    source,
                })?;
            manifest::range_check::verify_object(r, &bytes).map_err(|e| RestoreError::Corrupt {
                tp: tp.clone(),
                key: e.key,
                detail: e.detail,
            })?;
            let len = if is_partial {
                let (len, cut_end) = cut_object(&bytes, self.cut);
                end = cut_end.or(end);
                len
            } else {
                end = Some(r.last_offset + 1);
                bytes.len()
            };
            if len > 0 {
                objects.push((r.clone(), bytes.slice(..len)));
            }
        }
        if objects.is_empty() {
            report.nothing_before_cut = true;
            return Ok(report);
        }
        let log_err = |source| RestoreError::Log {
            tp: tp.clone(),
            source,
        };
        let dir = LogDir::open(&self.log_dir).map_err(log_err)?;
        let mut log = dir
            .open_or_create_partition(tp, Some(m.topic_id), LogConfig::default())
            .map_err(log_err)?;
        for (i, (r, bytes)) in objects.iter().enumerate() {
            if i == 0 && r.segment_base_offset > 0 {
                log.truncate_fully_and_start_at(r.segment_base_offset)
                    .map_err(log_err)?;
            }
            let leo = log.log_end_offset();
            let active = log.segment_base_offsets().last().copied().unwrap_or(0);
            if r.segment_base_offset > active && r.segment_base_offset >= leo {
                log.roll_to(r.segment_base_offset).map_err(log_err)?;
            }
            log.append_replicated(bytes).map_err(log_err)?;
        }
        if m.log_start_offset > log.log_start_offset() && m.log_start_offset <= log.log_end_offset()
        {
            log.raise_log_start(m.log_start_offset).map_err(log_err)?;
        }
        // Epoch starts that fall in compaction gaps come from the manifest
        // (entries at or past the restored end are ignored).
        log.adopt_lineage(&m.lineage).map_err(log_err)?;
        if self.abort_open_transactions {
            let epoch = log.epochs().latest_epoch().unwrap_or(0).max(0);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            for txn in log.open_transactions() {
                let mut marker = kafkalog::builder::build_control_batch(
                    kafkalog::records::ControlType::Abort,
                    0,
                    epoch,
                    txn.producer_id,
                    txn.producer_epoch,
                    now,
                    0,
                );
                log.append_as_coordinator(&mut marker, epoch)
                    .map_err(log_err)?;
                tracing::info!(partition = %tp, producer_id = txn.producer_id, first_offset = txn.first_offset, "aborted a transaction open at the cut");
                report
                    .aborted_transactions
                    .push((txn.producer_id, txn.first_offset));
            }
        }
        report.open_transactions = log
            .open_transactions()
            .iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect();
        report.end_offset = Some(log.log_end_offset());
        report.epoch = log.epochs().latest_epoch();
        let markers = report.aborted_transactions.len() as i64;
        if end.is_some_and(|e| e + markers != log.log_end_offset()) {
            tracing::warn!(partition = %tp, planned = ?end, restored = log.log_end_offset(), "the restored end differs from the objects' last offsets");
        }
        log.flush().map_err(log_err)?;
        log.close().map_err(log_err)?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
    use kafkalog::epoch::EpochLineage;

    fn r(base: i64, last: i64, ts: i64) -> ShippedRange {
        ShippedRange {
            key: format!("k/{base}"),
            base_offset: base,
            last_offset: last,
            bytes: 10,
            batches: 1,
            crc32c: 0,
            max_timestamp: ts,
            epochs: EpochLineage::new(),
            segment_base_offset: base,
            completes_segment: true,
            segment_generation: 0,
            object_offset: None,
            compacted: false,
        }
    }

    fn bases(p: &RangesToFetch) -> (Vec<i64>, Option<i64>) {
        (
            p.whole.iter().map(|r| r.base_offset).collect(),
            p.partial.as_ref().map(|r| r.base_offset),
        )
    }

    #[test]
    fn the_plan_fetches_whole_ranges_before_the_cut_and_cuts_one() {
        // 0..=9 (ts 100), 10..=19 (ts 300), 20..=29 (ts 200: not monotone).
        let ranges = vec![r(0, 9, 100), r(10, 19, 300), r(20, 29, 200)];
        let cases = [
            (RestoreEnd::Offset(29), (vec![0, 10, 20], None)),
            (RestoreEnd::Offset(100), (vec![0, 10, 20], None)),
            (RestoreEnd::Offset(9), (vec![0], None)),
            (RestoreEnd::Offset(12), (vec![0], Some(10))),
            (RestoreEnd::Offset(0), (vec![], Some(0))),
            (RestoreEnd::Time(100), (vec![0], Some(10))),
            // The first range past the time ends the prefix, even though a
            // later one is older.
            (RestoreEnd::Time(250), (vec![0], Some(10))),
            (RestoreEnd::Time(300), (vec![0, 10, 20], None)),
            (RestoreEnd::Time(50), (vec![], Some(0))),
        ];
        for (cut, want) in cases {
            assert_eq!(bases(&plan_restore(&ranges, cut)), want, "{cut:?}");
        }
        assert_eq!(plan_restore(&ranges, RestoreEnd::Offset(12)).bytes(), 20);
    }

    #[test]
    fn an_object_is_cut_at_a_batch_boundary() {
        let mut bytes = Vec::new();
        for (base, ts) in [(0i64, 1000i64), (3, 2000), (6, 3000)] {
            let recs: Vec<RecordInput> = (0..3)
                .map(|i| RecordInput {
                    timestamp: ts + i,
                    key: None,
                    value: Some(vec![b'x'; 10]),
                    headers: vec![],
                })
                .collect();
            bytes.extend(build_batch(&BatchSpec::new(base, 0), &recs).expect("batch"));
        }
        let one = bytes.len() / 3;
        assert_eq!(
            cut_object(&bytes, RestoreEnd::Offset(8)),
            (bytes.len(), Some(9))
        );
        assert_eq!(
            cut_object(&bytes, RestoreEnd::Offset(7)),
            (2 * one, Some(6))
        );
        assert_eq!(cut_object(&bytes, RestoreEnd::Offset(2)), (one, Some(3)));
        assert_eq!(cut_object(&bytes, RestoreEnd::Offset(1)), (0, None));
        assert_eq!(
            cut_object(&bytes, RestoreEnd::Time(2002)),
            (2 * one, Some(6))
        );
        assert_eq!(cut_object(&bytes, RestoreEnd::Time(2001)), (one, Some(3)));
        assert_eq!(
            cut_object(&bytes[..one + 5], RestoreEnd::Offset(8)),
            (one, Some(3))
        );
    }
}
