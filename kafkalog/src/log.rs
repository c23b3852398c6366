//! One partition's log: open with recovery, append, read, truncate, retain.
//!
//! Layout and behaviour follow Kafka's `UnifiedLog`/`LocalLog`/`LogSegment`:
//! segments named by base offset, an offset index entry every
//! [`LogConfig::index_interval_bytes`] (holding the batch's last offset and
//! its position), a time index entry when the max timestamp grows, a
//! transaction index of aborted transactions, and the leader epoch cache in
//! `leader-epoch-checkpoint`.
//!
//! Invariants:
//! - Batches in the log are whole, CRC-valid v2 batches with strictly
//!   increasing offsets (gaps allowed); leader epochs never decrease.
//! - Only the last (active) segment is written; rolled segments are
//!   immutable until retention or truncation deletes them.
//! - After [`PartitionLog::open`] the active segment ends on a batch boundary:
//!   a torn or corrupt tail is cut and reported in [`RecoveryReport`].
//! - The epoch cache never names an offset at or beyond the log end offset.
//!
//! # Durability (fsync policy)
//! Every append is written with `write(2)` before it returns, so a process
//! crash (kill -9) never loses an acknowledged append: the bytes are in the
//! kernel's page cache, and [`PartitionLog::open`] finds them. What a power
//! loss can lose depends on [`FlushPolicy`]: with [`FlushPolicy::Always`] the
//! segment is fsynced before an append returns (nothing acknowledged is
//! lost); with [`FlushPolicy::OnRoll`] (Kafka's default, which leaves flushing
//! to the OS and to replication) a segment is fsynced when it rolls and on
//! [`PartitionLog::flush`]/close, so a power loss can lose the unflushed tail,
//! which recovery then cuts cleanly. Metadata (epoch checkpoint, write guard,
//! root checkpoints, segment creation and deletion) is always written
//! atomically and fsynced.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::batch::{self, BatchHeader, BatchIter};
use crate::checkpoint::{self, PartitionMetadata};
use crate::epoch::EpochCache;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::guard;
use crate::index::{AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex};
use crate::logdir::Shared;
use crate::records::{self, ControlType};
use crate::segment::{
    self, INDEX_SUFFIX, LOG_SUFFIX, ScanStop, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
};
use crate::topic::{TopicId, TopicPartition};

/// Name of the leader epoch checkpoint in a partition dir.
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
/// Name of the partition metadata file in a partition dir.
pub const PARTITION_METADATA: &str = "partition.metadata";

/// When appended data is fsynced. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlushPolicy {
    /// fsync the segment before every append returns.
    Always,
    /// fsync when a segment rolls, on flush and on close (Kafka's default).
    #[default]
    OnRoll,
}

/// Per-log settings (Kafka's `segment.bytes`, `segment.ms`,
/// `index.interval.bytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll when the active segment would grow past this size.
    pub segment_bytes: u64,
    /// Roll when the active segment's first batch is older than this.
    pub segment_ms: Option<i64>,
    /// Bytes between offset index entries.
    pub index_interval_bytes: u64,
    /// The fsync policy.
    pub flush: FlushPolicy,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: None,
            index_interval_bytes: 4096,
            flush: FlushPolicy::OnRoll,
        }
    }
}

/// What recovery found and did when a log was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Bytes cut from the end of the log (torn write or corruption).
    pub truncated_bytes: u64,
    /// Where and why the cut happened.
    pub cut_reason: Option<String>,
    /// Segments deleted because they followed a corrupt one.
    pub dropped_segments: Vec<i64>,
    /// Segments whose indexes were missing or corrupt and were rebuilt.
    pub rebuilt_indexes: Vec<i64>,
}

impl RecoveryReport {
    /// True when recovery changed nothing.
    pub fn is_clean(&self) -> bool {
        self.truncated_bytes == 0 && self.dropped_segments.is_empty()
    }
}

/// The result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AppendInfo {
    /// Offset of the first record appended.
    pub first_offset: i64,
    /// Offset of the last record appended.
    pub last_offset: i64,
    /// Number of batches.
    pub batches: usize,
    /// Number of bytes.
    pub bytes: u64,
}

/// A transaction a producer opened and has not ended with a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OpenTransaction {
    /// The producer id.
    pub producer_id: i64,
    /// The producer epoch of its batches.
    pub producer_epoch: i16,
    /// Offset of the transaction's first batch (or of the active segment's
    /// start when the transaction began before the segments scanned at open).
    pub first_offset: i64,
}

/// The segment being written.
#[derive(Debug)]
struct ActiveSegment {
    base_offset: i64,
    path: PathBuf,
    file: File,
    size: u64,
    next_offset: i64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    txn_index: TransactionIndex,
    bytes_since_index: u64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    roll_base_ms: Option<i64>,
}

impl ActiveSegment {
    /// Creates (or opens) the empty segment file `<base>.log` in `dir`.
    fn create(dir: &Path, base: i64) -> Result<ActiveSegment> {
        let path = segment::file_path(dir, base, LOG_SUFFIX);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(Error::io("create", &path))?;
        Ok(ActiveSegment {
            base_offset: base,
            path,
            file,
            size: 0,
            next_offset: base,
            offset_index: OffsetIndex::new(base),
            time_index: TimeIndex::new(base),
            txn_index: TransactionIndex::default(),
            bytes_since_index: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: base,
            roll_base_ms: None,
        })
    }

    /// Writes its index files as they stand (the transaction index only
    /// when it has entries).
    fn write_indexes(&self, dir: &Path) -> Result<()> {
        let txn = if self.txn_index.is_empty() {
            None
        } else {
            Some(&self.txn_index)
        };
        write_index_files(
            dir,
            self.base_offset,
            &self.offset_index,
            &self.time_index,
            txn,
        )
    }
}

/// A partition log open for writing. Created through
/// [`crate::LogDir::open_partition`], which holds the log dir's lock.
#[derive(Debug)]
pub struct PartitionLog {
    shared: Arc<Shared>,
    dir: PathBuf,
    tp: TopicPartition,
    topic_id: Option<TopicId>,
    config: LogConfig,
    /// Base offsets and sizes of the rolled segments.
    rolled: BTreeMap<i64, u64>,
    active: ActiveSegment,
    epochs: EpochCache,
    log_start_offset: i64,
    /// Producer id -> first offset of its open transaction.
    ongoing_txns: BTreeMap<i64, OpenTransaction>,
    recovery: RecoveryReport,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl PartitionLog {
    /// Opens (creating when `create`) the partition dir under the log dir and
    /// recovers it. Called by [`crate::LogDir`].
    pub(crate) fn open(
        shared: Arc<Shared>,
        tp: TopicPartition,
        config: LogConfig,
        create: Option<Option<TopicId>>,
    ) -> Result<PartitionLog> {
        let dir = shared.root.join(tp.dir_name());
        if !dir.is_dir() {
            let Some(topic_id) = create else {
                return Err(Error::NoSuchPartition {
                    topic_partition: tp.to_string(),
                    log_dir: shared.root.clone(),
                });
            };
            fs::create_dir_all(&dir).map_err(Error::io("create dir", &dir))?;
            if let Some(id) = topic_id {
                let meta = PartitionMetadata {
                    version: 0,
                    topic_id: id,
                };
                checkpoint::write_partition_metadata(&dir.join(PARTITION_METADATA), &meta, true)?;
            }
            fsutil::fsync_dir(&shared.root)?;
        }
        let meta = checkpoint::read_partition_metadata(&dir.join(PARTITION_METADATA))?;
        let mut topic_id = meta.map(|m| m.topic_id);
        if let Some(Some(expected)) = create {
            match topic_id {
                Some(found) if found != expected => {
                    return Err(Error::TopicIdMismatch {
                        topic_partition: tp.to_string(),
                        path: dir.join(PARTITION_METADATA),
                        expected: expected.to_string(),
                        found: found.to_string(),
                    });
                }
                Some(_) => {}
                None => {
                    let meta = PartitionMetadata {
                        version: 0,
                        topic_id: expected,
                    };
                    checkpoint::write_partition_metadata(
                        &dir.join(PARTITION_METADATA),
                        &meta,
                        true,
                    )?;
                    topic_id = Some(expected);
                }
            }
        }
        let log_start_hint = shared.log_start_offset(&tp);
        let recovery_point = shared.recovery_point(&tp);
        Self::recover(
            shared,
            dir,
            tp,
            topic_id,
            config,
            log_start_hint,
            recovery_point,
        )
    }

    fn recover(
        shared: Arc<Shared>,
        dir: PathBuf,
        tp: TopicPartition,
        topic_id: Option<TopicId>,
        config: LogConfig,
        log_start_hint: Option<i64>,
        recovery_point: Option<i64>,
    ) -> Result<PartitionLog> {
        let mut report = RecoveryReport::default();
        let mut bases = segment::list_segments(&dir)?;
        if bases.is_empty() {
            let base = log_start_hint.unwrap_or(0).max(0);
            let path = segment::file_path(&dir, base, LOG_SUFFIX);
            File::create(&path).map_err(Error::io("create", &path))?;
            fsutil::fsync_dir(&dir)?;
            bases.push(base);
        }
        let recovery_point = recovery_point.unwrap_or(0);
        // Rolled segments at or after the recovery point get a full CRC scan;
        // the first corrupt one cuts the log there (as Kafka's recovery does).
        let mut rolled = BTreeMap::new();
        let mut cut_at: Option<usize> = None;
        for (i, &base) in bases.iter().enumerate() {
            if i + 1 == bases.len() {
                break;
            }
            let path = segment::file_path(&dir, base, LOG_SUFFIX);
            let next_base = bases[i + 1];
            let index_ok = Self::rolled_index_is_sane(&dir, base, next_base)?;
            let size = fs::metadata(&path).map_err(Error::io("stat", &path))?.len();
            if next_base > recovery_point && index_ok {
                rolled.insert(base, size);
                continue;
            }
            // Scan: verify and (re)build indexes.
            let built = build_indexes(&path, base, config.index_interval_bytes)?;
            if !index_ok {
                write_index_files(&dir, base, &built.offset_index, &built.time_index, None)?;
                report.rebuilt_indexes.push(base);
            }
            if let Some(err) = built.error {
                report.truncated_bytes += size - built.valid_end;
                report.cut_reason = Some(format!("{}: {err}", path.display()));
                truncate_file(&path, built.valid_end)?;
                write_index_files(&dir, base, &built.offset_index, &built.time_index, None)?;
                cut_at = Some(i);
                break;
            }
            rolled.insert(base, size);
        }
        if let Some(i) = cut_at {
            // Delete every later segment, newest first, so a crash never
            // leaves a hole.
            for &base in bases[i + 1..].iter().rev() {
                let size = fs::metadata(segment::file_path(&dir, base, LOG_SUFFIX))
                    .map(|m| m.len())
                    .unwrap_or(0);
                report.truncated_bytes += size;
                delete_segment_files(&dir, base)?;
                report.dropped_segments.push(base);
            }
            bases.truncate(i + 1);
            rolled.remove(&bases[i]);
            fsutil::fsync_dir(&dir)?;
        }
        let active_base = *bases.last().unwrap_or(&0);
        let active_path = segment::file_path(&dir, active_base, LOG_SUFFIX);

        // Scan the active segment: verify every batch, cut a torn tail,
        // rebuild its indexes and transaction state.
        let mut epochs = EpochCache::from_entries(checkpoint::read_leader_epoch_checkpoint(
            &dir.join(LEADER_EPOCH_CHECKPOINT),
        )?);
        let epochs_before = epochs.clone();
        let mut ongoing: BTreeMap<i64, OpenTransaction> = BTreeMap::new();
        let mut state = SegmentBuild::new(active_base, config.index_interval_bytes);
        let mut txn_index = TransactionIndex::default();
        let mut txn_error = None;
        let end = segment::scan(&active_path, 0, true, |h, bytes| {
            state.add(h);
            epochs.assign_if_newer(h.partition_leader_epoch, h.base_offset);
            if let Err(e) = track_transaction(&mut ongoing, &mut txn_index, active_base, h, bytes) {
                txn_error = Some(e);
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })?;
        if let Some(e) = txn_error {
            return Err(e);
        }
        if let Some(err) = end.error() {
            report.truncated_bytes += end.file_size - end.valid_end;
            report.cut_reason = Some(format!("{}: {err}", active_path.display()));
            truncate_file(&active_path, end.valid_end)?;
        }
        let next_offset = state.next_offset.unwrap_or(active_base);
        let file = OpenOptions::new()
            .append(true)
            .open(&active_path)
            .map_err(Error::io("open", &active_path))?;
        let (offset_index, time_index, bytes_since_index, max_ts, offset_of_max_ts) =
            state.finish();
        let active = ActiveSegment {
            base_offset: active_base,
            path: active_path,
            file,
            size: end.valid_end,
            next_offset,
            offset_index,
            time_index,
            txn_index,
            bytes_since_index,
            max_timestamp: max_ts,
            offset_of_max_timestamp: offset_of_max_ts,
            roll_base_ms: state.first_max_timestamp.or(Some(now_ms())),
        };
        let first_base = *bases.first().unwrap_or(&active_base);
        let log_start_offset = log_start_hint
            .unwrap_or(first_base)
            .max(first_base)
            .min(next_offset);
        // An epoch assigned at the log end (a leader election, a failover's
        // epoch bump) is kept; entries beyond the log end are not.
        epochs.truncate_from_end(next_offset + 1);
        epochs.truncate_from_start(log_start_offset);
        let log = PartitionLog {
            shared,
            dir,
            tp,
            topic_id,
            config,
            rolled,
            active,
            epochs,
            log_start_offset,
            ongoing_txns: ongoing,
            recovery: report,
        };
        if log.epochs != epochs_before {
            log.write_epoch_checkpoint()?;
        }
        Ok(log)
    }

    fn rolled_index_is_sane(dir: &Path, base: i64, next_base: i64) -> Result<bool> {
        let path = segment::file_path(dir, base, INDEX_SUFFIX);
        let Some(bytes) = fsutil::read_optional(&path)? else {
            return Ok(false);
        };
        let Ok(index) = OffsetIndex::parse(&bytes, base, &path) else {
            return Ok(false);
        };
        let log_size = fs::metadata(segment::file_path(dir, base, LOG_SUFFIX))
            .map(|m| m.len())
            .unwrap_or(0);
        Ok(index
            .entries()
            .iter()
            .all(|e| e.offset < next_base && u64::from(e.position) < log_size.max(1)))
    }

    /// The topic-partition.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    /// The partition dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The topic id from `partition.metadata`, if any.
    pub fn topic_id(&self) -> Option<TopicId> {
        self.topic_id
    }

    /// The offset the next appended record gets.
    pub fn log_end_offset(&self) -> i64 {
        self.active.next_offset
    }

    /// The first offset kept.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// The leader epoch cache.
    pub fn epochs(&self) -> &EpochCache {
        &self.epochs
    }

    /// Total bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.rolled.values().sum::<u64>() + self.active.size
    }

    /// Base offsets of all segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.rolled
            .keys()
            .copied()
            .chain(std::iter::once(self.active.base_offset))
            .collect()
    }

    /// What recovery did when this log was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The write guard's reason, when the partition is read-only.
    pub fn read_only_reason(&self) -> Result<Option<String>> {
        guard::read(&self.dir)
    }

    /// Marks the partition read-only (leader appends refused) with `reason`.
    pub fn set_read_only(&self, reason: &str) -> Result<()> {
        guard::set(&self.dir, reason)
    }

    /// Makes the partition writable again.
    pub fn clear_read_only(&self) -> Result<()> {
        guard::clear(&self.dir)
    }

    /// Appends batches as the leader, like a producer write: checks the write
    /// guard, verifies every batch's CRC, assigns offsets from the log end and
    /// stamps `epoch` on every batch (both fields lie outside the CRC, so the
    /// batches stay valid). The epoch may not be below the latest epoch.
    pub fn append_as_leader(&mut self, batches: &mut [u8], epoch: i32) -> Result<AppendInfo> {
        if let Some(reason) = guard::read(&self.dir)? {
            return Err(Error::ReadOnly {
                topic_partition: self.tp.to_string(),
                reason,
            });
        }
        self.append_as_coordinator(batches, epoch)
    }

    /// Appends batches as the leader without the write guard check: for
    /// records the mirror itself must write while the partition is
    /// read-only (transaction markers during failover).
    pub fn append_as_coordinator(&mut self, batches: &mut [u8], epoch: i32) -> Result<AppendInfo> {
        if epoch < 0 {
            return Err(Error::InvalidArgument(format!(
                "{}: leader epoch {epoch} is negative",
                self.tp
            )));
        }
        if let Some(latest) = self.epochs.latest_epoch() {
            if epoch < latest {
                return Err(Error::EpochOutOfOrder {
                    topic_partition: self.tp.to_string(),
                    base_offset: self.log_end_offset(),
                    epoch,
                    latest_epoch: latest,
                });
            }
        }
        // Validate everything before changing anything.
        let mut sizes = Vec::new();
        for item in BatchIter::verified(batches, 0) {
            let (h, _) = item.map_err(|source| Error::InvalidAppend {
                topic_partition: self.tp.to_string(),
                source,
            })?;
            sizes.push((h.position as usize, h.size(), h.last_offset_delta));
        }
        if sizes.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{}: nothing to append",
                self.tp
            )));
        }
        let mut next = self.log_end_offset();
        for &(pos, size, delta) in &sizes {
            let b = &mut batches[pos..pos + size];
            batch::set_base_offset(b, next);
            batch::set_partition_leader_epoch(b, epoch);
            next += i64::from(delta) + 1;
        }
        self.append_validated(batches)
    }

    /// Appends batches replicated from another log, unchanged (offsets,
    /// epochs and bytes kept), as a follower does. Every CRC is checked; the
    /// first base offset must be >= the log end offset and offsets must
    /// increase (gaps allowed); epochs may not decrease. The write guard does
    /// not apply.
    pub fn append_replicated(&mut self, batches: &[u8]) -> Result<AppendInfo> {
        let mut expected = self.log_end_offset();
        let mut latest_epoch = self.epochs.latest_epoch().unwrap_or(-1);
        let mut any = false;
        for item in BatchIter::verified(batches, 0) {
            let (h, _) = item.map_err(|source| Error::InvalidAppend {
                topic_partition: self.tp.to_string(),
                source,
            })?;
            if h.base_offset < expected {
                return Err(Error::OffsetOutOfOrder {
                    topic_partition: self.tp.to_string(),
                    base_offset: h.base_offset,
                    log_end_offset: expected,
                });
            }
            if h.partition_leader_epoch >= 0 {
                if h.partition_leader_epoch < latest_epoch {
                    return Err(Error::EpochOutOfOrder {
                        topic_partition: self.tp.to_string(),
                        base_offset: h.base_offset,
                        epoch: h.partition_leader_epoch,
                        latest_epoch,
                    });
                }
                latest_epoch = h.partition_leader_epoch;
            }
            expected = h.next_offset();
            any = true;
        }
        if !any {
            return Err(Error::InvalidArgument(format!(
                "{}: nothing to append",
                self.tp
            )));
        }
        self.append_validated(batches)
    }

    /// Writes already validated batches, rolling segments as needed.
    fn append_validated(&mut self, batches: &[u8]) -> Result<AppendInfo> {
        let mut info = AppendInfo {
            first_offset: -1,
            last_offset: -1,
            batches: 0,
            bytes: batches.len() as u64,
        };
        let mut pending_from = 0usize;
        let mut epochs_changed = false;
        let headers: Vec<BatchHeader> = BatchIter::new(batches, 0)
            .map(|r| r.map(|(h, _)| h))
            .collect::<std::result::Result<_, _>>()
            .map_err(|source| Error::InvalidAppend {
                topic_partition: self.tp.to_string(),
                source,
            })?;
        for h in &headers {
            let pos = h.position as usize;
            if self.should_roll(h) {
                self.write_active(&batches[pending_from..pos])?;
                pending_from = pos;
                self.roll(h.base_offset)?;
            }
            let bytes = &batches[pos..pos + h.size()];
            self.index_batch(h);
            track_transaction(
                &mut self.ongoing_txns,
                &mut self.active.txn_index,
                self.active.base_offset,
                h,
                bytes,
            )?;
            epochs_changed |= self
                .epochs
                .assign_if_newer(h.partition_leader_epoch, h.base_offset);
            if info.first_offset < 0 {
                info.first_offset = h.base_offset;
            }
            info.last_offset = h.last_offset();
            info.batches += 1;
        }
        self.write_active(&batches[pending_from..])?;
        if self.config.flush == FlushPolicy::Always {
            self.active
                .file
                .sync_data()
                .map_err(Error::io("fsync", &self.active.path))?;
        }
        if epochs_changed {
            self.write_epoch_checkpoint()?;
        }
        Ok(info)
    }

    fn write_active(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.active
            .file
            .write_all(bytes)
            .map_err(Error::io("write", &self.active.path))?;
        Ok(())
    }

    /// Updates the active segment's indexes and counters for a batch about to
    /// be written at the segment's current end (Kafka's `LogSegment.append`).
    fn index_batch(&mut self, h: &BatchHeader) {
        let a = &mut self.active;
        if h.max_timestamp > a.max_timestamp {
            a.max_timestamp = h.max_timestamp;
            a.offset_of_max_timestamp = h.last_offset();
        }
        if a.bytes_since_index > self.config.index_interval_bytes {
            let _ = a.offset_index.append(h.last_offset(), a.size as u32);
            let _ = a
                .time_index
                .maybe_append(a.max_timestamp, a.offset_of_max_timestamp);
            a.bytes_since_index = 0;
        }
        if a.size == 0 && a.roll_base_ms.is_none() {
            a.roll_base_ms = Some(h.max_timestamp);
        }
        a.size += h.size() as u64;
        a.bytes_since_index += h.size() as u64;
        a.next_offset = h.next_offset();
    }

    fn should_roll(&self, h: &BatchHeader) -> bool {
        let a = &self.active;
        if a.size == 0 {
            return false;
        }
        if a.size + h.size() as u64 > self.config.segment_bytes {
            return true;
        }
        if h.last_offset() - a.base_offset > i64::from(i32::MAX) {
            return true;
        }
        if let (Some(ms), Some(base)) = (self.config.segment_ms, a.roll_base_ms) {
            if now_ms().saturating_sub(base) > ms {
                return true;
            }
        }
        false
    }

    /// Closes the active segment (final time index entry, index files
    /// written, data fsynced) and starts a new one at `new_base`.
    fn roll(&mut self, new_base: i64) -> Result<()> {
        self.finish_active()?;
        let fresh = ActiveSegment::create(&self.dir, new_base)?;
        fsutil::fsync_dir(&self.dir)?;
        let old = std::mem::replace(&mut self.active, fresh);
        self.rolled.insert(old.base_offset, old.size);
        Ok(())
    }

    fn finish_active(&mut self) -> Result<()> {
        let a = &mut self.active;
        a.file.sync_all().map_err(Error::io("fsync", &a.path))?;
        if a.max_timestamp >= 0 {
            let _ = a
                .time_index
                .maybe_append(a.max_timestamp, a.offset_of_max_timestamp);
        }
        a.write_indexes(&self.dir)
    }

    /// Transactions left open in the log (transactional batches with no
    /// COMMIT or ABORT marker yet), oldest first. Tracked from the active
    /// segment's scan at open and every append since.
    pub fn open_transactions(&self) -> Vec<OpenTransaction> {
        let mut v: Vec<_> = self.ongoing_txns.values().copied().collect();
        v.sort_by_key(|t| t.first_offset);
        v
    }

    /// Replaces the epoch cache's start offsets with those of `lineage` (the
    /// source's, from a manifest) when both name the same epochs below the
    /// log end and differ only in where they start: in a compacted log an
    /// epoch's first offset may lie in a gap, so batches alone cannot tell
    /// it. Entries at or beyond the log end are ignored. Returns true when
    /// the cache changed; false (and no change) when the epochs differ.
    pub fn adopt_lineage(&mut self, lineage: &[crate::checkpoint::EpochEntry]) -> Result<bool> {
        let leo = self.log_end_offset();
        let wanted: Vec<_> = lineage
            .iter()
            .copied()
            .filter(|e| e.start_offset < leo)
            .collect();
        let local = self.epochs.entries();
        let local_below: Vec<_> = local
            .iter()
            .copied()
            .filter(|e| e.start_offset < leo)
            .collect();
        let same_epochs = wanted.len() == local_below.len()
            && wanted
                .iter()
                .zip(&local_below)
                .all(|(a, b)| a.epoch == b.epoch);
        if !same_epochs || wanted == local_below {
            return Ok(false);
        }
        let tail: Vec<_> = local
            .iter()
            .copied()
            .filter(|e| e.start_offset >= leo)
            .collect();
        let mut cache = EpochCache::from_entries(wanted);
        for e in tail {
            cache.assign_if_newer(e.epoch, e.start_offset);
        }
        if cache == self.epochs {
            return Ok(false);
        }
        self.epochs = cache;
        self.write_epoch_checkpoint()?;
        Ok(true)
    }

    /// Makes `epoch` the partition's leader epoch from the log end on, as a
    /// leader election does (Kafka assigns the new epoch at the log end
    /// offset), even before any batch carries it. Ignored unless newer than
    /// the latest epoch. Returns true when the epoch cache changed.
    pub fn bump_epoch(&mut self, epoch: i32) -> Result<bool> {
        let leo = self.log_end_offset();
        if !self.epochs.assign_if_newer(epoch, leo) {
            return Ok(false);
        }
        self.write_epoch_checkpoint()?;
        Ok(true)
    }

    /// Starts a new active segment at `base`, as the source did, so that the
    /// destination's segment files match the source's one for one. `base`
    /// must be at or above the log end offset. An empty active segment is
    /// renamed instead of left behind. No-op when the active segment already
    /// starts at `base`.
    pub fn roll_to(&mut self, base: i64) -> Result<()> {
        if base == self.active.base_offset {
            return Ok(());
        }
        if base < self.log_end_offset() {
            return Err(Error::InvalidArgument(format!(
                "{}: cannot start a segment at {base}, below the log end offset {}",
                self.tp,
                self.log_end_offset()
            )));
        }
        if self.active.size == 0 {
            let old = self.active.base_offset;
            self.active = ActiveSegment::create(&self.dir, base)?;
            delete_segment_files(&self.dir, old)?;
            fsutil::fsync_dir(&self.dir)?;
            if self.rolled.is_empty() && self.log_start_offset < base {
                self.log_start_offset = base;
                self.shared.update_log_start(&self.tp, base)?;
            }
            return Ok(());
        }
        self.roll(base)
    }

    /// Replaces a rolled segment wholly below the log end with `batches`
    /// (its compacted version from the source): every batch must lie in
    /// `[base, next segment base)` with a valid CRC. The new file is written
    /// beside the old one and renamed over it, then its indexes are rebuilt,
    /// so a crash leaves the old or the new segment, never a mix.
    pub fn replace_segment(&mut self, base: i64, batches: &[u8]) -> Result<()> {
        let bases = self.segment_base_offsets();
        let Some(i) = bases.iter().position(|&b| b == base) else {
            return Err(Error::InvalidArgument(format!(
                "{}: no segment starts at {base}",
                self.tp
            )));
        };
        let Some(&next) = bases.get(i + 1) else {
            return Err(Error::InvalidArgument(format!(
                "{}: segment {base} is the active segment",
                self.tp
            )));
        };
        let mut prev_last = base - 1;
        for item in BatchIter::verified(batches, 0) {
            let (h, _) = item.map_err(|source| Error::InvalidAppend {
                topic_partition: self.tp.to_string(),
                source,
            })?;
            if h.base_offset <= prev_last || h.last_offset() >= next {
                return Err(Error::OffsetOutOfOrder {
                    topic_partition: self.tp.to_string(),
                    base_offset: h.base_offset,
                    log_end_offset: prev_last + 1,
                });
            }
            prev_last = h.last_offset();
        }
        let path = segment::file_path(&self.dir, base, LOG_SUFFIX);
        fsutil::write_atomic(&path, batches, true)?;
        let built = build_indexes(&path, base, self.config.index_interval_bytes)?;
        write_index_files(
            &self.dir,
            base,
            &built.offset_index,
            &built.time_index,
            None,
        )?;
        remove_if_exists(&segment::file_path(&self.dir, base, TXN_INDEX_SUFFIX))?;
        self.rolled.insert(base, batches.len() as u64);
        Ok(())
    }

    /// Flushes the log: fsyncs the active segment, writes its index files (so
    /// a Kafka broker could start on the dir) and updates the log dir's
    /// recovery point and log start checkpoints.
    pub fn flush(&mut self) -> Result<()> {
        let a = &self.active;
        a.file.sync_all().map_err(Error::io("fsync", &a.path))?;
        a.write_indexes(&self.dir)?;
        self.shared.update_checkpoints(
            &self.tp,
            self.log_end_offset(),
            self.log_start_offset,
            self.log_end_offset(),
        )
    }

    /// Reads whole batches from `offset` on: the batch containing `offset`
    /// first, then following batches while the total stays within
    /// `max_bytes` (at least one batch is returned when any exists). Returns
    /// an empty buffer at the log end.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<Vec<u8>> {
        let leo = self.log_end_offset();
        if offset < self.log_start_offset || offset > leo {
            return Err(Error::OffsetOutOfRange {
                topic_partition: self.tp.to_string(),
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: leo,
            });
        }
        let mut out = Vec::new();
        let bases = self.segment_base_offsets();
        let first = bases.iter().rposition(|&b| b <= offset).unwrap_or(0);
        for &base in &bases[first..] {
            let path = segment::file_path(&self.dir, base, LOG_SUFFIX);
            let start = if base == self.active.base_offset {
                self.active.offset_index.lookup(offset).position
            } else {
                self.load_offset_index(base)
                    .map(|i| i.lookup(offset).position)
                    .unwrap_or(0)
            };
            let mut full = false;
            let end = segment::scan(&path, u64::from(start), false, |h, bytes| {
                if h.last_offset() < offset {
                    return ControlFlow::Continue(());
                }
                if !out.is_empty() && out.len() + bytes.len() > max_bytes {
                    full = true;
                    return ControlFlow::Break(());
                }
                out.extend_from_slice(bytes);
                ControlFlow::Continue(())
            })?;
            if let ScanStop::Corrupt(e) = end.stop {
                return Err(Error::Batch { path, source: e });
            }
            if full {
                break;
            }
        }
        Ok(out)
    }

    fn load_offset_index(&self, base: i64) -> Option<OffsetIndex> {
        let path = segment::file_path(&self.dir, base, INDEX_SUFFIX);
        let bytes = fsutil::read_optional(&path).ok()??;
        OffsetIndex::parse(&bytes, base, &path).ok()
    }

    /// Truncates the log so that `offset` is its end: whole segments at or
    /// above it are deleted and the batch containing it and all later ones
    /// are cut (truncation happens on batch boundaries, as in Kafka). The
    /// epoch cache and indexes follow. Truncating below the log start empties
    /// the log and restarts it at `offset`. Returns the new log end offset.
    pub fn truncate_to(&mut self, offset: i64) -> Result<i64> {
        if offset >= self.log_end_offset() {
            return Ok(self.log_end_offset());
        }
        if offset <= self.log_start_offset {
            self.truncate_fully_and_start_at(offset.max(0))?;
            return Ok(self.log_end_offset());
        }
        let bases = self.segment_base_offsets();
        // Epoch cache first: a crash after this and before the cut leaves a
        // cache that recovery regrows from the batches, and the caller retries.
        if self.epochs.truncate_from_end(offset) {
            self.write_epoch_checkpoint()?;
        }
        for &base in bases.iter().rev() {
            if base < offset {
                break;
            }
            if base == bases[0] {
                break;
            }
            delete_segment_files(&self.dir, base)?;
        }
        let keep = bases.iter().rposition(|&b| b < offset).unwrap_or(0);
        let base = bases[keep];
        let path = segment::file_path(&self.dir, base, LOG_SUFFIX);
        let start = self
            .load_offset_index(base)
            .map(|i| i.lookup(offset - 1).position)
            .unwrap_or(0);
        let mut cut = None;
        segment::scan(&path, u64::from(start), false, |h, _| {
            if h.last_offset() >= offset {
                cut = Some(h.position);
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })?;
        if let Some(pos) = cut {
            truncate_file(&path, pos)?;
        }
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
            remove_if_exists(&segment::file_path(&self.dir, base, suffix))?;
        }
        fsutil::fsync_dir(&self.dir)?;
        self.reopen()?;
        Ok(self.log_end_offset())
    }

    /// Deletes every segment and restarts the log empty at `offset` (log
    /// start = log end = `offset`), as Kafka's `truncateFullyAndStartAt`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(Error::InvalidArgument(format!(
                "{}: cannot start at negative offset {offset}",
                self.tp
            )));
        }
        self.epochs.clear();
        self.write_epoch_checkpoint()?;
        // Create the new segment first, then delete the old ones newest first:
        // a crash in between leaves a log that recovery reads as ending at
        // `offset` or as the old log, never a log with a hole.
        let new_path = segment::file_path(&self.dir, offset, LOG_SUFFIX);
        for base in self.segment_base_offsets().into_iter().rev() {
            if base != offset {
                delete_segment_files(&self.dir, base)?;
            }
        }
        truncate_file_or_create(&new_path)?;
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
            remove_if_exists(&segment::file_path(&self.dir, offset, suffix))?;
        }
        fsutil::fsync_dir(&self.dir)?;
        self.log_start_offset = offset;
        self.shared
            .update_checkpoints(&self.tp, offset, offset, offset)?;
        self.reopen()
    }

    /// Raises the log start offset to `offset` (capped at the log end) and
    /// deletes the segments that lie wholly below it, as retention does.
    /// Returns the base offsets of the deleted segments.
    pub fn raise_log_start(&mut self, offset: i64) -> Result<Vec<i64>> {
        let new_start = offset.min(self.log_end_offset());
        if new_start <= self.log_start_offset {
            return Ok(vec![]);
        }
        self.log_start_offset = new_start;
        self.shared.update_log_start(&self.tp, new_start)?;
        if self.epochs.truncate_from_start(new_start) {
            self.write_epoch_checkpoint()?;
        }
        let bases = self.segment_base_offsets();
        let mut deleted = vec![];
        for pair in bases.windows(2) {
            let (base, next) = (pair[0], pair[1]);
            if next > new_start {
                break;
            }
            delete_segment_files(&self.dir, base)?;
            self.rolled.remove(&base);
            deleted.push(base);
        }
        if !deleted.is_empty() {
            fsutil::fsync_dir(&self.dir)?;
        }
        Ok(deleted)
    }

    fn reopen(&mut self) -> Result<()> {
        let log_start = self.log_start_offset;
        let fresh = Self::recover(
            Arc::clone(&self.shared),
            self.dir.clone(),
            self.tp.clone(),
            self.topic_id,
            self.config.clone(),
            Some(log_start),
            Some(i64::MAX),
        )?;
        *self = fresh;
        Ok(())
    }

    /// Flushes and closes the log (what a clean shutdown does).
    pub fn close(mut self) -> Result<()> {
        self.flush()
    }

    fn write_epoch_checkpoint(&self) -> Result<()> {
        checkpoint::write_leader_epoch_checkpoint(
            &self.dir.join(LEADER_EPOCH_CHECKPOINT),
            self.epochs.entries(),
            true,
        )
    }
}

/// Follows transactions across appended batches: remembers where each
/// producer's open transaction started and, on an ABORT marker, records the
/// aborted range in the segment's transaction index (Kafka's
/// `ProducerStateManager` + `TransactionIndex`). A transaction whose start
/// precedes what was scanned is taken to start at `segment_base`.
fn track_transaction(
    ongoing: &mut BTreeMap<i64, OpenTransaction>,
    txn_index: &mut TransactionIndex,
    segment_base: i64,
    h: &BatchHeader,
    bytes: &[u8],
) -> Result<()> {
    if !h.is_transactional() || h.producer_id < 0 {
        return Ok(());
    }
    if !h.is_control() {
        ongoing.entry(h.producer_id).or_insert(OpenTransaction {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            first_offset: h.base_offset,
        });
        return Ok(());
    }
    let first = ongoing
        .remove(&h.producer_id)
        .map_or(segment_base, |t| t.first_offset);
    let recs = records::decode_records(h, bytes)?;
    let Some(record) = recs.first() else {
        return Ok(());
    };
    let marker = records::parse_control_record(record).map_err(|reason| Error::Records {
        base_offset: h.base_offset,
        reason: reason.to_string(),
    })?;
    if marker.kind == ControlType::Abort {
        let lso = ongoing
            .values()
            .map(|t| t.first_offset)
            .min()
            .unwrap_or(h.base_offset + 1);
        let _ = txn_index.append(AbortedTxn {
            version: 0,
            producer_id: h.producer_id,
            first_offset: first,
            last_offset: h.base_offset,
            last_stable_offset: lso,
        });
    }
    Ok(())
}

/// Index state built while scanning a segment from its start.
struct SegmentBuild {
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    interval: u64,
    size: u64,
    bytes_since_index: u64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    next_offset: Option<i64>,
    first_max_timestamp: Option<i64>,
}

impl SegmentBuild {
    fn new(base: i64, interval: u64) -> SegmentBuild {
        SegmentBuild {
            offset_index: OffsetIndex::new(base),
            time_index: TimeIndex::new(base),
            interval,
            size: 0,
            bytes_since_index: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: base,
            next_offset: None,
            first_max_timestamp: None,
        }
    }

    fn add(&mut self, h: &BatchHeader) {
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.offset_of_max_timestamp = h.last_offset();
        }
        if self.bytes_since_index > self.interval {
            let _ = self.offset_index.append(h.last_offset(), self.size as u32);
            let _ = self
                .time_index
                .maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
            self.bytes_since_index = 0;
        }
        if self.first_max_timestamp.is_none() {
            self.first_max_timestamp = Some(h.max_timestamp);
        }
        self.size += h.size() as u64;
        self.bytes_since_index += h.size() as u64;
        self.next_offset = Some(h.next_offset());
    }

    fn finish(&self) -> (OffsetIndex, TimeIndex, u64, i64, i64) {
        (
            self.offset_index.clone(),
            self.time_index.clone(),
            self.bytes_since_index,
            self.max_timestamp,
            self.offset_of_max_timestamp,
        )
    }
}

struct BuiltIndexes {
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    valid_end: u64,
    error: Option<batch::BatchError>,
}

/// Scans a whole segment, verifying CRCs, and builds its indexes as Kafka
/// would have written them (final time index entry included).
fn build_indexes(path: &Path, base: i64, interval: u64) -> Result<BuiltIndexes> {
    let mut state = SegmentBuild::new(base, interval);
    let end = segment::scan(path, 0, true, |h, _| {
        state.add(h);
        ControlFlow::Continue(())
    })?;
    let mut time_index = state.time_index.clone();
    if state.max_timestamp >= 0 {
        let _ = time_index.maybe_append(state.max_timestamp, state.offset_of_max_timestamp);
    }
    Ok(BuiltIndexes {
        offset_index: state.offset_index,
        time_index,
        valid_end: end.valid_end,
        error: end.error().cloned(),
    })
}

fn write_index_files(
    dir: &Path,
    base: i64,
    offset_index: &OffsetIndex,
    time_index: &TimeIndex,
    txn: Option<&TransactionIndex>,
) -> Result<()> {
    fsutil::write_atomic(
        &segment::file_path(dir, base, INDEX_SUFFIX),
        &offset_index.to_bytes(),
        true,
    )?;
    fsutil::write_atomic(
        &segment::file_path(dir, base, TIME_INDEX_SUFFIX),
        &time_index.to_bytes(),
        true,
    )?;
    if let Some(txn) = txn {
        fsutil::write_atomic(
            &segment::file_path(dir, base, TXN_INDEX_SUFFIX),
            &txn.to_bytes(),
            true,
        )?;
    }
    Ok(())
}

fn truncate_file(path: &Path, len: u64) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(Error::io("open", path))?;
    f.set_len(len).map_err(Error::io("truncate", path))?;
    f.sync_all().map_err(Error::io("fsync", path))
}

fn truncate_file_or_create(path: &Path) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(Error::io("create", path))?;
    f.sync_all().map_err(Error::io("fsync", path))
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", path)(e)),
    }
}

/// Deletes a segment's files: indexes first, the `.log` last, so that a
/// crash never leaves indexes without their log.
fn delete_segment_files(dir: &Path, base: i64) -> Result<()> {
    for suffix in [
        INDEX_SUFFIX,
        TIME_INDEX_SUFFIX,
        TXN_INDEX_SUFFIX,
        segment::SNAPSHOT_SUFFIX,
        LOG_SUFFIX,
    ] {
        remove_if_exists(&segment::file_path(dir, base, suffix))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogDir;
    use crate::batch::tests::raw_batch;

    fn tp() -> TopicPartition {
        TopicPartition::new("orders", 0).expect("valid")
    }

    fn small() -> LogConfig {
        LogConfig {
            segment_bytes: 300,
            index_interval_bytes: 100,
            ..LogConfig::default()
        }
    }

    /// Batches of 2 records each at offsets base.., one per (base, epoch).
    fn batches(spec: &[(i64, i32)]) -> Vec<u8> {
        spec.iter()
            .flat_map(|&(base, epoch)| raw_batch(base, epoch, 1, &[b'x'; 40]))
            .collect()
    }

    #[test]
    fn replicated_appends_keep_bytes_offsets_and_epochs() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        let input = batches(&[(0, 0), (2, 0), (4, 2), (6, 2), (8, 3), (10, 3), (12, 3)]);
        let info = log.append_replicated(&input).expect("append");
        assert_eq!(
            (info.first_offset, info.last_offset, info.batches),
            (0, 13, 7)
        );
        assert_eq!(log.log_end_offset(), 14);
        let pairs: Vec<_> = log
            .epochs()
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect();
        assert_eq!(pairs, vec![(0, 0), (2, 4), (3, 8)]);
        assert!(
            log.segment_base_offsets().len() > 2,
            "small segment size rolls"
        );
        assert_eq!(log.read(0, usize::MAX).expect("read"), input);
        // From the middle of a batch: that batch first.
        let from5 = log.read(5, usize::MAX).expect("read");
        assert_eq!(from5, input[2 * 101..]);
        log.close().expect("close");

        // Reopen: same state, rolled indexes load, reads still exact.
        let mut log = dir.open_partition(&tp(), small()).expect("reopen");
        assert!(log.recovery_report().is_clean());
        assert_eq!(log.log_end_offset(), 14);
        assert_eq!(log.read(9, usize::MAX).expect("read"), input[4 * 101..]);
        assert_eq!(
            log.read(14, usize::MAX).expect("read at LEO"),
            Vec::<u8>::new()
        );
        assert!(matches!(
            log.read(15, 10),
            Err(Error::OffsetOutOfRange { .. })
        ));
        // Offset gaps are allowed (compacted logs).
        log.append_replicated(&batches(&[(20, 3)])).expect("gap");
        assert_eq!(log.log_end_offset(), 22);
    }

    #[test]
    fn replicated_appends_refuse_bad_input_and_write_nothing() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        log.append_replicated(&batches(&[(0, 2), (2, 2)]))
            .expect("append");
        let size = log.size_bytes();
        assert!(matches!(
            log.append_replicated(&batches(&[(3, 2)])),
            Err(Error::OffsetOutOfOrder {
                base_offset: 3,
                log_end_offset: 4,
                ..
            })
        ));
        assert!(matches!(
            log.append_replicated(&batches(&[(4, 1)])),
            Err(Error::EpochOutOfOrder {
                epoch: 1,
                latest_epoch: 2,
                ..
            })
        ));
        let mut corrupt = batches(&[(4, 2), (6, 2)]);
        corrupt[101 + 70] ^= 0x10;
        assert!(matches!(
            log.append_replicated(&corrupt),
            Err(Error::InvalidAppend { .. })
        ));
        assert_eq!(log.size_bytes(), size);
        assert_eq!(log.log_end_offset(), 4);
    }

    #[test]
    fn leader_appends_assign_offsets_and_epochs_and_honour_the_guard() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, LogConfig::default())
            .expect("create");
        let mut b = batches(&[(999, 0), (999, 0)]);
        let info = log.append_as_leader(&mut b, 5).expect("append");
        assert_eq!((info.first_offset, info.last_offset), (0, 3));
        let back = log.read(0, usize::MAX).expect("read");
        let headers: Vec<_> = BatchIter::verified(&back, 0)
            .map(|r| r.expect("valid").0)
            .collect();
        assert_eq!(
            headers
                .iter()
                .map(|h| (h.base_offset, h.partition_leader_epoch))
                .collect::<Vec<_>>(),
            vec![(0, 5), (2, 5)]
        );
        let mut b = batches(&[(0, 0)]);
        assert!(
            matches!(
                log.append_as_leader(&mut b, 4),
                Err(Error::EpochOutOfOrder { .. })
            ),
            "fenced epoch"
        );
        log.append_as_leader(&mut b, 7).expect("newer epoch");
        let pairs: Vec<_> = log
            .epochs()
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect();
        assert_eq!(pairs, vec![(5, 0), (7, 4)]);
        // Persisted in Kafka's text format.
        let text =
            std::fs::read_to_string(log.dir().join(LEADER_EPOCH_CHECKPOINT)).expect("checkpoint");
        assert_eq!(text, "0\n2\n5 0\n7 4\n");

        log.set_read_only("mirror of cluster A, state MIRRORING")
            .expect("guard");
        let mut b = batches(&[(0, 0)]);
        match log.append_as_leader(&mut b, 7) {
            Err(Error::ReadOnly {
                topic_partition,
                reason,
            }) => {
                assert_eq!(topic_partition, "orders-0");
                assert!(reason.contains("MIRRORING"));
            }
            other => panic!("expected read-only, got {other:?}"),
        }
        assert_eq!(log.log_end_offset(), 6, "nothing written");
        log.append_replicated(&batches(&[(6, 7)]))
            .expect("replicated appends ignore the guard");
        log.clear_read_only().expect("clear");
        log.append_as_leader(&mut b, 7).expect("writable again");
        assert_eq!(log.log_end_offset(), 10);
    }

    #[test]
    fn recovery_cuts_a_torn_tail_and_rebuilds_indexes() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        let input = batches(&[(0, 0), (2, 0), (4, 0), (6, 0), (8, 0)]);
        log.append_replicated(&input).expect("append");
        let bases = log.segment_base_offsets();
        let active = log
            .dir()
            .join(segment::file_name(*bases.last().expect("one"), LOG_SUFFIX));
        let first_index = log.dir().join(segment::file_name(bases[0], INDEX_SUFFIX));
        drop(log);
        // A torn write: half a batch at the end of the active segment.
        let mut f = OpenOptions::new().append(true).open(&active).expect("open");
        f.write_all(&raw_batch(10, 0, 1, &[b'y'; 40])[..50])
            .expect("write");
        drop(f);
        // A corrupt index on a rolled segment.
        std::fs::write(&first_index, [1u8, 2, 3]).expect("write");
        drop(dir);

        let dir = LogDir::open(root.path()).expect("open");
        let log = dir.open_partition(&tp(), small()).expect("recover");
        let report = log.recovery_report();
        assert_eq!(report.truncated_bytes, 50);
        assert!(
            report
                .cut_reason
                .as_deref()
                .unwrap_or("")
                .contains("truncated batch"),
            "{report:?}"
        );
        assert_eq!(report.rebuilt_indexes, vec![bases[0]]);
        assert_eq!(log.log_end_offset(), 10);
        assert_eq!(log.read(0, usize::MAX).expect("read"), input);
    }

    #[test]
    fn truncation_and_retention() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        let input = batches(&[(0, 0), (2, 0), (4, 1), (6, 1), (8, 2), (10, 2), (12, 2)]);
        log.append_replicated(&input).expect("append");
        assert_eq!(
            log.truncate_to(7).expect("truncate"),
            6,
            "cut at the batch holding 7"
        );
        let pairs: Vec<_> = log
            .epochs()
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect();
        assert_eq!(pairs, vec![(0, 0), (1, 4)]);
        assert_eq!(log.read(0, usize::MAX).expect("read"), input[..3 * 101]);
        log.append_replicated(&batches(&[(6, 3)]))
            .expect("append after truncation");
        assert_eq!(log.log_end_offset(), 8);

        let deleted = log.raise_log_start(5).expect("retention");
        assert!(!deleted.is_empty());
        assert_eq!(log.log_start_offset(), 5);
        assert!(log.segment_base_offsets()[0] <= 5);
        assert_eq!(log.epochs().entries()[0].start_offset, 5);
        log.close().expect("close");
        let mut log = dir.open_partition(&tp(), small()).expect("reopen");
        assert_eq!(log.log_start_offset(), 5, "log start survives a restart");

        log.truncate_fully_and_start_at(100)
            .expect("restart at 100");
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (100, 100));
        assert!(log.epochs().entries().is_empty());
        log.append_replicated(&batches(&[(100, 4)]))
            .expect("append");
        assert_eq!(log.segment_base_offsets(), vec![100]);
    }

    #[test]
    fn segments_follow_the_source_and_compacted_ones_are_replaced() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let no_size_roll = LogConfig {
            segment_bytes: u64::MAX,
            ..LogConfig::default()
        };
        let mut log = dir
            .open_or_create_partition(&tp(), None, no_size_roll.clone())
            .expect("create");
        // The source's first segment starts at 10 (retention): the empty
        // segment 0 is renamed, not left behind.
        log.roll_to(10).expect("roll");
        assert_eq!(log.segment_base_offsets(), vec![10]);
        assert_eq!(log.log_start_offset(), 10);
        log.append_replicated(&batches(&[(10, 0), (12, 0), (14, 0)]))
            .expect("append");
        log.roll_to(16).expect("roll");
        log.append_replicated(&batches(&[(16, 0)])).expect("append");
        assert!(log.roll_to(15).is_err(), "below the log end");
        assert_eq!(log.segment_base_offsets(), vec![10, 16]);
        // Compaction kept only the middle batch of segment 10.
        let compacted = batches(&[(12, 0)]);
        log.replace_segment(10, &compacted).expect("replace");
        assert!(
            log.replace_segment(16, &compacted).is_err(),
            "active segment"
        );
        assert!(
            log.replace_segment(10, &batches(&[(16, 0)])).is_err(),
            "beyond the segment"
        );
        let bytes = log.read(10, usize::MAX).expect("read");
        let offsets: Vec<i64> = BatchIter::verified(&bytes, 0)
            .map(|r| r.expect("valid").0.base_offset)
            .collect();
        assert_eq!(offsets, vec![12, 16]);
        log.close().expect("close");
        let log = dir.open_partition(&tp(), no_size_roll).expect("reopen");
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (10, 18));
    }

    #[test]
    fn a_second_writer_is_locked_out() {
        let root = tempfile::tempdir().expect("tempdir");
        let _dir = LogDir::open(root.path()).expect("open");
        assert!(matches!(
            LogDir::open(root.path()),
            Err(Error::Locked { .. })
        ));
    }

    #[test]
    fn topic_id_is_written_and_checked() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let id = TopicId::random().expect("random");
        let log = dir
            .open_or_create_partition(&tp(), Some(id), LogConfig::default())
            .expect("create");
        assert_eq!(log.topic_id(), Some(id));
        let text = std::fs::read_to_string(log.dir().join(PARTITION_METADATA)).expect("metadata");
        assert_eq!(text, format!("version: 0\ntopic_id: {id}"));
        drop(log);
        let other = TopicId::random().expect("random");
        assert!(matches!(
            dir.open_or_create_partition(&tp(), Some(other), LogConfig::default()),
            Err(Error::TopicIdMismatch { .. })
        ));
    }
}
