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
//! - The epoch cache never names an offset beyond the log end offset (one
//!   at the log end is an epoch bump: [`PartitionLog::bump_epoch`]).
//! - `leader-epoch-checkpoint` knows the epoch of every batch in the log.
//! - A failed append leaves the log exactly as it was, on disk and in memory
//!   (see "Failed appends" below).
//!
//! # Failed appends
//! An append (leader, coordinator or replicated) writes all its batches or
//! none: when it returns an error, the segment files, their indexes, the log
//! end offset, the epoch cache and the transaction state are as they were,
//! so the caller may retry it at the same offsets. IO failures (a full disk
//! included) come back as [`Error::Io`] naming the operation and the file.
//! An append:
//! 1. validates everything first (CRCs, offsets, epochs, the records of
//!    transaction markers); nothing has changed when that fails;
//! 2. (a) when its batches start a new leader epoch, writes
//!    `leader-epoch-checkpoint` with the new entries (temp file, fsync,
//!    rename) *before* any of their bytes, so the segments never hold a
//!    batch of an epoch the checkpoint does not know. When that write fails
//!    the append fails with nothing changed: the in-memory cache takes the
//!    new entries only when the whole append has succeeded;
//! 3. (b) writes the bytes, one segment at a time, and only then updates the
//!    in-memory state to match (segment size, log end offset, offset, time
//!    and transaction indexes, max timestamp, open transactions), so that
//!    (d) no index entry, in memory or in an index file, ever points past
//!    the bytes of its segment;
//! 4. (c) when a write, an fsync or a roll fails, undoes itself: the
//!    segments it rolled into are deleted (newest first, indexes before the
//!    `.log`), the segment that was active is cut back to its length
//!    (`set_len`, which also removes a torn batch a short write left) and
//!    its in-memory state restored; if a roll rewrote that segment's index
//!    files they are rewritten from the restored state, or removed when
//!    that fails (open rebuilds an active segment's indexes from its
//!    batches). Then `leader-epoch-checkpoint` is put back as it was. When
//!    even that fails, the file keeps the failed append's entries, which all
//!    start at or beyond the log end: one at the log end is what an epoch
//!    bump writes (open keeps it, and a retry of the append assigns the same
//!    entry), later ones open drops; and the log marks the file stale, so
//!    that the next append rewrites it before writing anything;
//! 5. should the undo itself fail (the truncation or a deletion), reopens the
//!    log from disk, which cuts a torn tail as open always does; when that
//!    fails too, the next append or roll reopens it first.
//!
//! A roll creates the new segment only after the old one's indexes are
//! written, and deletes it again when the directory fsync fails, so a failed
//! roll leaves no half-created segment behind. A crash between the epoch
//! checkpoint and the bytes leaves an entry at (kept) or beyond (dropped at
//! open) the log end.
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
//! which recovery then cuts cleanly; with [`FlushPolicy::OnFlush`] a roll's
//! fsyncs wait for the next flush too (open scans the rolled segments above
//! the recovery point, so what a power loss tore there is cut the same
//! way). A rolled segment's index files are fsynced with it; the active
//! segment's are written at each flush but not fsynced, since open always
//! rebuilds them from its batches. Metadata (epoch checkpoint, write guard,
//! root checkpoints, segment creation and deletion) is always written
//! atomically and fsynced.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::{Bound, ControlFlow};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::batch::{self, BatchHeader, BatchIter};
use crate::checkpoint::{self, EpochEntry, PartitionMetadata};
use crate::epoch::EpochLineage;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::guard;
use crate::index::{AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex};
use crate::records::{self, ControlType};
use crate::root_checkpoints::SharedRoot;
use crate::segment::{
    self, INDEX_SUFFIX, LOG_SUFFIX, ScanStop, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
};
use crate::topic::{TopicId, TopicPartition};

/// The partition dir's checkpoint file names (defined in [`crate::checkpoint`]).
pub use crate::checkpoint::{LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA};

/// When appended data is fsynced. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlushPolicy {
    /// fsync the segment before every append returns.
    Always,
    /// fsync when a segment rolls, on flush and on close (Kafka's default).
    #[default]
    OnRoll,
    /// fsync on flush and on close only: a rolled segment's fsyncs (its
    /// data, its index files, the dir) wait for the next flush and are then
    /// done together, from several threads (the applier's group commit).
    /// Open scans every rolled segment above the recovery point, so a
    /// power loss before that flush is recovered like a torn tail.
    OnFlush,
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
    /// Entries of `leader-epoch-checkpoint` that conflict with later ones
    /// and were left out of the epoch cache, as Kafka does on load
    /// ([`EpochLineage::from_checkpoint_entries`]); the file keeps them until
    /// it is next written.
    pub dropped_epoch_entries: Vec<EpochEntry>,
}

impl std::fmt::Display for RecoveryReport {
    /// In words, for operators' logs: what was cut and rebuilt.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if self.truncated_bytes > 0 {
            parts.push(format!(
                "cut {} bytes from the end{}",
                self.truncated_bytes,
                self.cut_reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ));
        }
        let list = |offsets: &[i64]| {
            offsets
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.dropped_segments.is_empty() {
            parts.push(format!(
                "dropped the segments at {} (after a corrupt one)",
                list(&self.dropped_segments)
            ));
        }
        if !self.rebuilt_indexes.is_empty() {
            parts.push(format!(
                "rebuilt the indexes of the segments at {}",
                list(&self.rebuilt_indexes)
            ));
        }
        if !self.dropped_epoch_entries.is_empty() {
            let entries: Vec<String> = self
                .dropped_epoch_entries
                .iter()
                .map(|e| format!("epoch {} at {}", e.epoch, e.start_offset))
                .collect();
            parts.push(format!(
                "left conflicting leader-epoch-checkpoint entries out ({})",
                entries.join(", ")
            ));
        }
        if parts.is_empty() {
            f.write_str("nothing to recover")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
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
    /// Lengths of the index files as this process last wrote them (see
    /// [`write_index_files`]); `None` until it wrote them.
    indexes_written: Option<[usize; 3]>,
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
            indexes_written: None,
        })
    }

    /// Writes its index files as they stand (the transaction index only
    /// when it has entries); see [`write_index_files`] for `sync_dir`.
    fn write_indexes(&mut self, dir: &Path, sync: IndexSync) -> Result<()> {
        let txn = if self.txn_index.is_empty() {
            None
        } else {
            Some(&self.txn_index)
        };
        // A failed write leaves the files' lengths unknown: the next write
        // is whole.
        let written = self.indexes_written.take();
        self.indexes_written = Some(write_index_files(
            dir,
            self.base_offset,
            &self.offset_index,
            &self.time_index,
            txn,
            sync,
            written,
        )?);
        Ok(())
    }
}

/// How full the active segment is, as far as rolling goes.
#[derive(Debug, Clone, Copy)]
struct Fill {
    base_offset: i64,
    size: u64,
    roll_base_ms: Option<i64>,
}

impl Fill {
    /// Counts a batch in, as [`PartitionLog::index_batch`] will.
    fn add(&mut self, h: &BatchHeader) {
        if self.size == 0 && self.roll_base_ms.is_none() {
            self.roll_base_ms = Some(h.max_timestamp);
        }
        self.size += h.size() as u64;
    }
}

/// What an append may change in memory, taken before it writes anything,
/// so that a failed append can be undone (see "Failed appends" in the
/// module docs).
#[derive(Debug)]
struct AppendMark {
    /// The active segment's state.
    base_offset: i64,
    size: u64,
    next_offset: i64,
    bytes_since_index: u64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    roll_base_ms: Option<i64>,
    /// Entry counts of its in-memory indexes.
    offset_index_len: usize,
    time_index_len: usize,
    txn_index_len: usize,
    ongoing_txns: BTreeMap<i64, OpenTransaction>,
    /// The segment that was active, once a roll has closed it.
    replaced: Option<ActiveSegment>,
    /// A roll was attempted: the index files of the segment that was active
    /// may have been rewritten.
    rolled: bool,
}

/// A partition log open for writing. Created through
/// [`crate::LogDir::open_partition`], which holds the log dir's lock.
#[derive(Debug)]
pub struct PartitionLog {
    shared: Arc<SharedRoot>,
    dir: PathBuf,
    tp: TopicPartition,
    topic_id: Option<TopicId>,
    config: LogConfig,
    /// Base offsets and sizes of the rolled segments.
    rolled: BTreeMap<i64, u64>,
    active: ActiveSegment,
    epochs: EpochLineage,
    log_start_offset: i64,
    /// Producer id -> first offset of its open transaction.
    ongoing_txns: BTreeMap<i64, OpenTransaction>,
    recovery: RecoveryReport,
    /// `leader-epoch-checkpoint` may differ from `epochs` (a write of it
    /// failed): the next append rewrites it before writing any batch.
    epoch_checkpoint_stale: bool,
    /// Undoing a failed append failed and so did reopening the log: the
    /// next write reopens it (recovery) before anything else.
    needs_reopen: bool,
    /// Set at open when the recovery point covered the whole log: the log
    /// is as durable as [`PartitionLog::flush`] would make it, so a flush
    /// before any change (a failover's) fsyncs nothing. Cleared by every
    /// change; a log reopened after a truncation starts with it cleared.
    durable_since_open: bool,
    /// Fsyncs of rolled segments waiting for the next flush
    /// ([`FlushPolicy::OnFlush`]).
    sync_later: fsutil::SyncLater,
    /// Test hook: bytes segment writes may still write before failing as a
    /// full disk would (`None`: no limit).
    #[cfg(test)]
    write_budget: Option<u64>,
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
        shared: Arc<SharedRoot>,
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
        let mut log = Self::recover(
            shared,
            dir,
            tp,
            topic_id,
            config,
            log_start_hint,
            recovery_point,
        )?;
        // The recovery point is written only after the data it covers was
        // fsynced (Kafka's meaning): a log it covers whole, that recovery
        // did not cut, needs no flush until it changes.
        log.durable_since_open =
            log.recovery.is_clean() && recovery_point.is_some_and(|p| p >= log.log_end_offset());
        Ok(log)
    }

    fn recover(
        shared: Arc<SharedRoot>,
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
            // Wholly below the recovery point: flushed, with its indexes,
            // before the checkpoint named it; trusted as Kafka trusts it.
            if next_base <= recovery_point && index_ok {
                rolled.insert(base, size);
                continue;
            }
            // Scan: verify and (re)build indexes.
            let built = build_indexes(&path, base, config.index_interval_bytes)?;
            if !index_ok {
                built.write_files(&dir, base)?;
                report.rebuilt_indexes.push(base);
            }
            if let Some(err) = &built.error {
                report.truncated_bytes += size - built.valid_end;
                report.cut_reason = Some(format!("{}: {err}", path.display()));
                truncate_file(&path, built.valid_end)?;
                built.write_files(&dir, base)?;
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
        let (mut epochs, dropped) = EpochLineage::from_checkpoint_entries(
            checkpoint::read_leader_epoch_checkpoint(&dir.join(LEADER_EPOCH_CHECKPOINT))?,
        );
        report.dropped_epoch_entries = dropped;
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
            indexes_written: None,
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
        let mut log = PartitionLog {
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
            epoch_checkpoint_stale: false,
            needs_reopen: false,
            durable_since_open: false,
            sync_later: fsutil::SyncLater::default(),
            #[cfg(test)]
            write_budget: None,
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

    /// Replaces the topic id in `partition.metadata` (atomically) of a log
    /// that holds no record: a partition created for one topic that has
    /// become another's before anything was written (a mirror re-pinned to
    /// another source while PREPARING). A log holding records keeps its id
    /// ([`Error::TopicIdMismatch`]): they belong to that topic.
    pub fn replace_topic_id(&mut self, id: TopicId) -> Result<()> {
        if self.topic_id == Some(id) {
            return Ok(());
        }
        if self.log_end_offset() > self.log_start_offset() {
            return Err(Error::TopicIdMismatch {
                topic_partition: self.tp.to_string(),
                path: self.dir.join(PARTITION_METADATA),
                expected: id.to_string(),
                found: self
                    .topic_id
                    .map_or_else(|| "none".to_string(), |t| t.to_string()),
            });
        }
        let meta = PartitionMetadata {
            version: 0,
            topic_id: id,
        };
        checkpoint::write_partition_metadata(&self.dir.join(PARTITION_METADATA), &meta, true)?;
        self.topic_id = Some(id);
        Ok(())
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
    pub fn epochs(&self) -> &EpochLineage {
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

    /// What retention needs of each segment, oldest first
    /// ([`crate::retention::retention_cut`]): base offset, size and largest
    /// timestamp as Kafka's `LogSegment.largestTimestamp` has it: the
    /// active segment's from memory; a rolled segment's from the last entry
    /// of its `.timeindex` (written at roll with the segment's largest
    /// timestamp); the `.log` file's modification time when the segment has
    /// no timestamp (no index entry, or none above -1). A `.timeindex` that
    /// does not parse is an error naming it, never a guess.
    pub fn segment_facts(&self) -> Result<Vec<crate::retention::SegmentFacts>> {
        use crate::retention::SegmentFacts;
        let mtime = |base: i64| -> Result<i64> {
            let path = segment::file_path(&self.dir, base, LOG_SUFFIX);
            let modified = fs::metadata(&path)
                .and_then(|m| m.modified())
                .map_err(Error::io("stat", &path))?;
            Ok(modified
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
        };
        let mut facts = Vec::with_capacity(self.rolled.len() + 1);
        for (&base, &size) in &self.rolled {
            let path = segment::file_path(&self.dir, base, TIME_INDEX_SUFFIX);
            let largest = match fs::read(&path) {
                Ok(bytes) => TimeIndex::parse(&bytes, base, &path)?
                    .last()
                    .map_or(crate::index::NO_TIMESTAMP, |e| e.timestamp),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => crate::index::NO_TIMESTAMP,
                Err(e) => return Err(Error::io("read", &path)(e)),
            };
            let largest_timestamp_ms = if largest >= 0 { largest } else { mtime(base)? };
            facts.push(SegmentFacts {
                base_offset: base,
                size_bytes: size,
                largest_timestamp_ms,
            });
        }
        let active = &self.active;
        facts.push(SegmentFacts {
            base_offset: active.base_offset,
            size_bytes: active.size,
            largest_timestamp_ms: if active.max_timestamp >= 0 {
                active.max_timestamp
            } else {
                mtime(active.base_offset)?
            },
        });
        Ok(facts)
    }

    /// Kafka's `UnifiedLog.deleteOldSegments` for a log whose
    /// `cleanup.policy` includes `delete` (the caller's choice): deletes the
    /// segments retention by time and size lets go
    /// ([`crate::retention::retention_cut`] over [`Self::segment_facts`],
    /// with the high watermark at the log end: this log is its partition's
    /// only replica) and raises the log start offset. When every segment
    /// goes, the active one is rolled first, so the log keeps its end offset
    /// in an empty segment. Returns the cut, `None` when nothing went.
    pub fn delete_old_segments(
        &mut self,
        limits: crate::retention::RetentionLimits,
        now_ms: i64,
    ) -> Result<Option<crate::retention::RetentionCut>> {
        self.durable_since_open = false;
        let end = self.log_end_offset();
        let facts = self.segment_facts()?;
        let Some(cut) = crate::retention::retention_cut(&facts, end, end, now_ms, limits) else {
            return Ok(None);
        };
        if cut.new_log_start == end {
            self.roll_to(end)?;
        }
        self.raise_log_start(cut.new_log_start)?;
        Ok(Some(cut))
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
        self.durable_since_open = false;
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
        self.durable_since_open = false;
        self.reopen_if_needed()?;
        if epoch < 0 {
            return Err(Error::InvalidArgument(format!(
                "{}: leader epoch {epoch} is negative",
                self.tp
            )));
        }
        if let Some(latest) = self.epochs.latest_epoch()
            && epoch < latest
        {
            return Err(Error::EpochOutOfOrder {
                topic_partition: self.tp.to_string(),
                base_offset: self.log_end_offset(),
                epoch,
                latest_epoch: latest,
            });
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
        self.durable_since_open = false;
        self.reopen_if_needed()?;
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

    /// Writes already validated batches, rolling segments as needed. All or
    /// nothing: see "Failed appends" in the module docs.
    fn append_validated(&mut self, batches: &[u8]) -> Result<AppendInfo> {
        let headers: Vec<BatchHeader> = BatchIter::new(batches, 0)
            .map(|r| r.map(|(h, _)| h))
            .collect::<std::result::Result<_, _>>()
            .map_err(|source| Error::InvalidAppend {
                topic_partition: self.tp.to_string(),
                source,
            })?;
        let (Some(first), Some(last)) = (headers.first(), headers.last()) else {
            return Err(Error::InvalidArgument(format!(
                "{}: nothing to append",
                self.tp
            )));
        };
        let info = AppendInfo {
            first_offset: first.base_offset,
            last_offset: last.last_offset(),
            batches: headers.len(),
            bytes: batches.len() as u64,
        };
        // Transaction markers are decoded now, so that tracking them cannot
        // fail once bytes are written.
        for h in headers.iter().filter(|h| is_transaction_marker(h)) {
            let pos = h.position as usize;
            control_marker(h, &batches[pos..pos + h.size()])?;
        }
        // (a) A new leader epoch reaches the checkpoint before its batches
        // reach the segment. The cache itself takes the new entries only
        // when the append succeeds.
        let mut epochs = self.epochs.clone();
        let mut new_epoch = false;
        for h in &headers {
            new_epoch |= epochs.assign_if_newer(h.partition_leader_epoch, h.base_offset);
        }
        if new_epoch || self.epoch_checkpoint_stale {
            let written = write_epochs(&self.dir, epochs.entries());
            self.note_epoch_checkpoint(&written);
            written?;
        }
        // (b) Bytes first, then the in-memory state; (c) undone on failure.
        let mut mark = self.mark();
        if let Err(e) = self.write_batches(batches, &headers, &mut mark) {
            self.undo_append(mark);
            if new_epoch {
                // Best effort: when this fails too, the file keeps entries
                // at or beyond the log end and is marked stale.
                let _ = self.write_epoch_checkpoint();
            }
            return Err(e);
        }
        self.epochs = epochs;
        Ok(info)
    }

    /// Writes `headers`' batches from `batches` segment by segment: each
    /// run of batches that fits the active segment is written, then indexed
    /// and tracked in memory; a segment that is full is rolled first.
    /// Records in `mark` what a failure must undo.
    fn write_batches(
        &mut self,
        batches: &[u8],
        headers: &[BatchHeader],
        mark: &mut AppendMark,
    ) -> Result<()> {
        let mut start = 0;
        while let Some(first) = headers.get(start) {
            let mut fill = self.fill();
            let mut end = start;
            while let Some(h) = headers.get(end) {
                if self.should_roll(&fill, h) {
                    break;
                }
                fill.add(h);
                end += 1;
            }
            if end == start {
                // A roll rewrites the index files of the segment it closes.
                mark.rolled = true;
                let closed = self.roll(first.base_offset)?;
                mark.replaced.get_or_insert(closed);
                continue;
            }
            let run = &headers[start..end];
            let from = first.position as usize;
            let to = run.last().map_or(from, |h| h.position as usize + h.size());
            self.write_active(&batches[from..to])?;
            for h in run {
                self.index_batch(h);
                let pos = h.position as usize;
                track_transaction(
                    &mut self.ongoing_txns,
                    &mut self.active.txn_index,
                    self.active.base_offset,
                    h,
                    &batches[pos..pos + h.size()],
                )?;
            }
            start = end;
        }
        if self.config.flush == FlushPolicy::Always {
            fsutil::sync_file(&self.active.file, &self.active.path, true)?;
        }
        Ok(())
    }

    /// What an append may change in memory, taken before it starts.
    fn mark(&self) -> AppendMark {
        let a = &self.active;
        AppendMark {
            base_offset: a.base_offset,
            size: a.size,
            next_offset: a.next_offset,
            bytes_since_index: a.bytes_since_index,
            max_timestamp: a.max_timestamp,
            offset_of_max_timestamp: a.offset_of_max_timestamp,
            roll_base_ms: a.roll_base_ms,
            offset_index_len: a.offset_index.len(),
            time_index_len: a.time_index.len(),
            txn_index_len: a.txn_index.len(),
            ongoing_txns: self.ongoing_txns.clone(),
            replaced: None,
            rolled: false,
        }
    }

    /// Puts the log back as it was at `mark` (step (c) of "Failed appends"
    /// in the module docs). The epoch checkpoint is the caller's.
    fn undo_append(&mut self, mark: AppendMark) {
        let mut consistent = true;
        if let Some(original) = mark.replaced {
            // The segments this append rolled into, newest first, so that a
            // crash in between never leaves a hole.
            let created: Vec<i64> = std::iter::once(self.active.base_offset)
                .chain(
                    self.rolled
                        .range((Bound::Excluded(mark.base_offset), Bound::Unbounded))
                        .rev()
                        .map(|(&base, _)| base),
                )
                .collect();
            for base in created {
                consistent &= delete_segment_files(&self.dir, base).is_ok();
            }
            self.rolled.retain(|&base, _| base < mark.base_offset);
            self.active = original;
            // Best effort: only the durability of the deletions is at stake.
            let _ = fsutil::fsync_dir(&self.dir);
        }
        let a = &mut self.active;
        consistent &= a.file.set_len(mark.size).is_ok();
        a.size = mark.size;
        a.next_offset = mark.next_offset;
        a.bytes_since_index = mark.bytes_since_index;
        a.max_timestamp = mark.max_timestamp;
        a.offset_of_max_timestamp = mark.offset_of_max_timestamp;
        a.roll_base_ms = mark.roll_base_ms;
        a.offset_index.truncate_len(mark.offset_index_len);
        a.time_index.truncate_len(mark.time_index_len);
        a.txn_index.truncate_len(mark.txn_index_len);
        self.ongoing_txns = mark.ongoing_txns;
        if mark.rolled {
            consistent &= self.restore_active_index_files();
        }
        if !consistent && self.reopen().is_err() {
            self.needs_reopen = true;
        }
    }

    /// After a failed roll, makes the active segment's index files match its
    /// in-memory indexes again: rewritten, or removed when that fails (open
    /// rebuilds an active segment's indexes from its batches). Returns false
    /// when neither worked.
    fn restore_active_index_files(&mut self) -> bool {
        let a = &mut self.active;
        a.indexes_written = None;
        let txn_path = segment::file_path(&self.dir, a.base_offset, TXN_INDEX_SUFFIX);
        let rewritten = a
            .write_indexes(&self.dir, IndexSync::Durable)
            .and_then(|()| {
                if a.txn_index.is_empty() {
                    fsutil::remove_file(&txn_path)
                } else {
                    Ok(())
                }
            });
        if rewritten.is_ok() {
            return true;
        }
        let mut removed = true;
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
            removed &=
                fsutil::remove_file(&segment::file_path(&self.dir, a.base_offset, suffix)).is_ok();
        }
        removed
    }

    /// Reopens the log when undoing a failed append could not restore it.
    fn reopen_if_needed(&mut self) -> Result<()> {
        if self.needs_reopen {
            self.reopen()?;
        }
        Ok(())
    }

    fn write_active(&mut self, bytes: &[u8]) -> Result<()> {
        let a = &mut self.active;
        #[cfg(test)]
        if let Some(budget) = self.write_budget.as_mut() {
            if bytes.len() as u64 > *budget {
                let (head, _) = bytes.split_at(*budget as usize);
                *budget = 0;
                a.file
                    .write_all(head)
                    .map_err(Error::io("write", &a.path))?;
                return Err(Error::io("write", &a.path)(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "no space left on device (injected)",
                )));
            }
            *budget -= bytes.len() as u64;
        }
        a.file.write_all(bytes).map_err(Error::io("write", &a.path))
    }

    /// Updates the active segment's indexes and counters for a batch just
    /// written at the segment's end (Kafka's `LogSegment.append`).
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

    /// How full the active segment is.
    fn fill(&self) -> Fill {
        Fill {
            base_offset: self.active.base_offset,
            size: self.active.size,
            roll_base_ms: self.active.roll_base_ms,
        }
    }

    /// Whether `h` must go to a new segment, the active one being `fill`.
    fn should_roll(&self, fill: &Fill, h: &BatchHeader) -> bool {
        if fill.size == 0 {
            return false;
        }
        if fill.size + h.size() as u64 > self.config.segment_bytes {
            return true;
        }
        if h.last_offset() - fill.base_offset > i64::from(i32::MAX) {
            return true;
        }
        if let (Some(ms), Some(base)) = (self.config.segment_ms, fill.roll_base_ms)
            && now_ms().saturating_sub(base) > ms
        {
            return true;
        }
        false
    }

    /// Closes the active segment (final time index entry, index files
    /// written, data fsynced) and starts a new one at `new_base`; returns the
    /// closed segment. A failure after the new file was created removes it
    /// again, so a failed roll leaves no half-created segment behind and the
    /// old segment stays active.
    fn roll(&mut self, new_base: i64) -> Result<ActiveSegment> {
        let closed_bytes = self.active.size;
        let mut later = std::mem::take(&mut self.sync_later);
        let on_flush = self.config.flush == FlushPolicy::OnFlush;
        let finished = if on_flush {
            later.keep(|| self.finish_active())
        } else {
            self.finish_active()
        };
        self.sync_later = later;
        finished?;
        let fresh = ActiveSegment::create(&self.dir, new_base)?;
        let dir_synced = if on_flush {
            let dir = self.dir.clone();
            let kept = self.sync_later.keep(|| fsutil::fsync_dir(&dir));
            // The closed segments are written back while the next fill,
            // a background pass per 16 MiB of them.
            self.sync_later.start_after(closed_bytes);
            kept
        } else {
            fsutil::fsync_dir(&self.dir)
        };
        if let Err(e) = dir_synced {
            let path = fresh.path.clone();
            drop(fresh);
            let _ = fsutil::remove_file(&path);
            return Err(e);
        }
        let old = std::mem::replace(&mut self.active, fresh);
        self.rolled.insert(old.base_offset, old.size);
        Ok(old)
    }

    fn finish_active(&mut self) -> Result<()> {
        let a = &mut self.active;
        fsutil::sync_file(&a.file, &a.path, false)?;
        if a.max_timestamp >= 0 {
            let _ = a
                .time_index
                .maybe_append(a.max_timestamp, a.offset_of_max_timestamp);
        }
        // The dir is fsynced by `roll` once the next segment exists: one
        // fsync for the index renames and the new file.
        a.write_indexes(&self.dir, IndexSync::DirByCaller)
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
    pub fn adopt_lineage(&mut self, lineage: &EpochLineage) -> Result<bool> {
        let leo = self.log_end_offset();
        let below_leo = |l: &EpochLineage| {
            let mut l = l.clone();
            l.truncate_from_end(leo);
            l
        };
        let wanted = below_leo(lineage);
        let local_below = below_leo(&self.epochs);
        let same_epochs = wanted.len() == local_below.len()
            && wanted
                .entries()
                .iter()
                .zip(local_below.entries())
                .all(|(a, b)| a.epoch == b.epoch);
        if !same_epochs || wanted == local_below {
            return Ok(false);
        }
        let mut cache = wanted;
        for e in self
            .epochs
            .entries()
            .iter()
            .filter(|e| e.start_offset >= leo)
        {
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
        self.durable_since_open = false;
        self.reopen_if_needed()?;
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
            let fresh = ActiveSegment::create(&self.dir, base)?;
            if let Err(e) = delete_segment_files(&self.dir, old) {
                // The old `.log` goes last, so it is still there: it stays
                // the active segment and the new one goes.
                let path = fresh.path.clone();
                drop(fresh);
                let _ = fsutil::remove_file(&path);
                return Err(e);
            }
            self.active = fresh;
            let raise_start = self.rolled.is_empty() && self.log_start_offset < base;
            if raise_start {
                self.log_start_offset = base;
            }
            fsutil::fsync_dir(&self.dir)?;
            if raise_start {
                self.shared.update_log_start(&self.tp, base)?;
            }
            return Ok(());
        }
        self.roll(base).map(drop)
    }

    /// Replaces a rolled segment wholly below the log end with `batches`
    /// (its compacted version from the source): every batch must lie in
    /// `[base, next segment base)` with a valid CRC. The new file is written
    /// beside the old one and renamed over it, then its indexes are rebuilt,
    /// so a crash leaves the old or the new segment, never a mix.
    pub fn replace_segment(&mut self, base: i64, batches: &[u8]) -> Result<()> {
        self.durable_since_open = false;
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
        fsutil::write_atomic_visible(&path, batches)?;
        let built = build_indexes(&path, base, self.config.index_interval_bytes)?;
        built.write_files(&self.dir, base)?;
        fsutil::remove_file(&segment::file_path(&self.dir, base, TXN_INDEX_SUFFIX))?;
        self.rolled.insert(base, batches.len() as u64);
        Ok(())
    }

    /// Flushes the log: fsyncs the active segment, writes its index files (so
    /// a Kafka broker could start on the dir; not fsynced, see
    /// [`IndexSync::Visible`]) and updates the log dir's recovery point and
    /// log start checkpoints.
    pub fn flush(&mut self) -> Result<()> {
        if self.durable_since_open && self.sync_later.is_empty() {
            // Nothing to make durable; the active segment's indexes, which
            // open rebuilt in memory, are still written for readers.
            return self.active.write_indexes(&self.dir, IndexSync::Visible);
        }
        self.sync_later.sync()?;
        let a = &mut self.active;
        fsutil::sync_file(&a.file, &a.path, false)?;
        a.write_indexes(&self.dir, IndexSync::Visible)?;
        let first_base = self
            .rolled
            .keys()
            .next()
            .copied()
            .unwrap_or(self.active.base_offset);
        self.shared.update_checkpoints(
            &self.tp,
            self.log_end_offset(),
            self.log_start_offset,
            self.log_end_offset(),
            first_base,
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
        self.durable_since_open = false;
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
            fsutil::remove_file(&segment::file_path(&self.dir, base, suffix))?;
        }
        // Producer snapshots taken above the cut describe batches that are
        // gone.
        crate::snapshot::remove_above(&self.dir, offset)?;
        fsutil::fsync_dir(&self.dir)?;
        self.reopen()?;
        Ok(self.log_end_offset())
    }

    /// Deletes every segment and restarts the log empty at `offset` (log
    /// start = log end = `offset`), as Kafka's `truncateFullyAndStartAt`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<()> {
        self.durable_since_open = false;
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
            fsutil::remove_file(&segment::file_path(&self.dir, offset, suffix))?;
        }
        // Every producer snapshot describes batches that are gone.
        crate::snapshot::remove_above(&self.dir, -1)?;
        fsutil::fsync_dir(&self.dir)?;
        self.log_start_offset = offset;
        self.shared
            .update_checkpoints(&self.tp, offset, offset, offset, offset)?;
        self.reopen()
    }

    /// Raises the log start offset to `offset` (capped at the log end) and
    /// deletes the segments that lie wholly below it, as retention does.
    /// Returns the base offsets of the deleted segments.
    pub fn raise_log_start(&mut self, offset: i64) -> Result<Vec<i64>> {
        self.durable_since_open = false;
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

    /// Writes the epoch cache to `leader-epoch-checkpoint`.
    fn write_epoch_checkpoint(&mut self) -> Result<()> {
        let written = write_epochs(&self.dir, self.epochs.entries());
        self.note_epoch_checkpoint(&written);
        written
    }

    /// Records, after a write of `leader-epoch-checkpoint`, whether the file
    /// may now differ from the cache: only a failed write can leave it so
    /// (for instance when the rename happened but the directory fsync did
    /// not), and then the file is read back to tell.
    fn note_epoch_checkpoint(&mut self, written: &Result<()>) {
        self.epoch_checkpoint_stale = written.is_err()
            && checkpoint::read_leader_epoch_checkpoint(&self.dir.join(LEADER_EPOCH_CHECKPOINT))
                .map_or(true, |on_disk| on_disk != self.epochs.entries());
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
    // Decoded before anything changes.
    let marker = control_marker(h, bytes)?;
    let first = ongoing
        .remove(&h.producer_id)
        .map_or(segment_base, |t| t.first_offset);
    if marker == Some(ControlType::Abort) {
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

/// True for a transaction marker that [`track_transaction`] decodes: a
/// transactional control batch of a producer.
fn is_transaction_marker(h: &BatchHeader) -> bool {
    h.is_transactional() && h.producer_id >= 0 && h.is_control()
}

/// The type of a control batch's marker record (`None` when the batch holds
/// no record).
fn control_marker(h: &BatchHeader, bytes: &[u8]) -> Result<Option<ControlType>> {
    let recs = records::decode_records(h, bytes)?;
    let Some(record) = recs.first() else {
        return Ok(None);
    };
    let marker = records::parse_control_record(record).map_err(|reason| Error::Records {
        base_offset: h.base_offset,
        reason: reason.to_string(),
    })?;
    Ok(Some(marker.kind))
}

/// Writes `entries` to the partition dir's `leader-epoch-checkpoint`
/// (atomically, fsynced).
fn write_epochs(dir: &Path, entries: &[EpochEntry]) -> Result<()> {
    checkpoint::write_leader_epoch_checkpoint(&dir.join(LEADER_EPOCH_CHECKPOINT), entries, true)
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

impl BuiltIndexes {
    /// Writes them as the index files of segment `base` in `dir` (no
    /// transaction index; the dir fsynced).
    fn write_files(&self, dir: &Path, base: i64) -> Result<()> {
        write_index_files(
            dir,
            base,
            &self.offset_index,
            &self.time_index,
            None,
            IndexSync::Durable,
            None,
        )
        .map(drop)
    }
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

/// How [`write_index_files`] makes a segment's index files durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IndexSync {
    /// The files fsynced, and the partition dir when a file was created.
    Durable,
    /// The files fsynced; the caller fsyncs the dir itself (a roll does,
    /// once the next segment exists).
    DirByCaller,
    /// Written for readers, not fsynced: the active segment's indexes at a
    /// flush. Open rebuilds an active segment's indexes from its batches,
    /// and a roll writes them durably, so a power loss can only cost what
    /// open rebuilds (issue 31: two fsyncs fewer per partition flushed).
    Visible,
}

/// Writes a segment's index files in place (see
/// [`fsutil::write_in_place`]: the log's recovery checks index files and
/// rebuilds them, so they need no temporary file and rename), durable as
/// `sync` says. `written` holds the lengths the files had when this process
/// last wrote them (entries are only ever appended to a segment's indexes
/// while it is open): only what follows is written, and a file whose
/// length did not change is left alone. Returns the lengths now written.
fn write_index_files(
    dir: &Path,
    base: i64,
    offset_index: &OffsetIndex,
    time_index: &TimeIndex,
    txn: Option<&TransactionIndex>,
    sync: IndexSync,
    written: Option<[usize; 3]>,
) -> Result<[usize; 3]> {
    let files: [(&str, Option<Vec<u8>>); 3] = [
        (INDEX_SUFFIX, Some(offset_index.to_bytes())),
        (TIME_INDEX_SUFFIX, Some(time_index.to_bytes())),
        (TXN_INDEX_SUFFIX, txn.map(TransactionIndex::to_bytes)),
    ];
    let mut now = [0usize; 3];
    let mut created = false;
    for (i, (suffix, bytes)) in files.iter().enumerate() {
        let Some(bytes) = bytes else { continue };
        now[i] = bytes.len();
        let before = written.map(|w| w[i]);
        if before == Some(bytes.len()) {
            continue;
        }
        let path = segment::file_path(dir, base, suffix);
        created |= fsutil::write_in_place(
            &path,
            bytes,
            before.unwrap_or(0),
            sync != IndexSync::Visible,
        )?;
    }
    if sync == IndexSync::Durable && created {
        fsutil::fsync_dir(dir)?;
    }
    Ok(now)
}

fn truncate_file(path: &Path, len: u64) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(Error::io("open", path))?;
    f.set_len(len).map_err(Error::io("truncate", path))?;
    fsutil::sync_file(&f, path, false)
}

fn truncate_file_or_create(path: &Path) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(Error::io("create", path))?;
    fsutil::sync_file(&f, path, false)
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
        fsutil::remove_file(&segment::file_path(dir, base, suffix))?;
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

    /// One batch of one record at `offset` with timestamp `ts`.
    fn stamped(offset: i64, ts: i64) -> Vec<u8> {
        let records = [crate::builder::RecordInput {
            timestamp: ts,
            key: None,
            value: Some(vec![b'x'; 40]),
            headers: vec![],
        }];
        crate::builder::build_batch(&crate::builder::BatchSpec::new(offset, 0), &records)
            .expect("batch")
    }

    #[test]
    fn segment_facts_give_each_segments_largest_timestamp() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        // Segment 0: timestamps 5000 then 3000 (the largest is not the
        // last); segment 2: 7000; the active segment 3: 9000.
        log.append_replicated(&[stamped(0, 5000), stamped(1, 3000)].concat())
            .expect("append");
        log.roll_to(2).expect("roll");
        log.append_replicated(&stamped(2, 7000)).expect("append");
        log.roll_to(3).expect("roll");
        log.append_replicated(&stamped(3, 9000)).expect("append");
        let facts = |log: &PartitionLog| -> Vec<(i64, i64)> {
            log.segment_facts()
                .expect("facts")
                .iter()
                .map(|f| (f.base_offset, f.largest_timestamp_ms))
                .collect()
        };
        assert_eq!(facts(&log), [(0, 5000), (2, 7000), (3, 9000)]);
        let sizes: Vec<u64> = log
            .segment_facts()
            .expect("facts")
            .iter()
            .map(|f| f.size_bytes)
            .collect();
        assert_eq!(sizes.iter().sum::<u64>(), log.size_bytes());
        log.close().expect("close");
        // Reopened, the rolled segments' come from their `.timeindex`.
        let mut log = dir.open_partition(&tp(), small()).expect("reopen");
        assert_eq!(facts(&log), [(0, 5000), (2, 7000), (3, 9000)]);
        // A segment with no timestamp (no time index): the file's mtime.
        let ti = segment::file_path(log.dir(), 2, TIME_INDEX_SUFFIX);
        std::fs::remove_file(&ti).expect("remove");
        let mtime = std::fs::metadata(segment::file_path(log.dir(), 2, LOG_SUFFIX))
            .and_then(|m| m.modified())
            .expect("mtime")
            .duration_since(UNIX_EPOCH)
            .expect("after the epoch")
            .as_millis() as i64;
        assert_eq!(facts(&log)[1], (2, mtime));
        // An empty active segment: its file's mtime too.
        log.roll_to(4).expect("roll");
        assert!(facts(&log)[3].1 > 1_000_000_000_000);
        // A damaged time index is an error naming it.
        std::fs::write(&ti, [1u8; 7]).expect("write");
        let e = log.segment_facts().expect_err("damaged");
        assert!(e.to_string().contains(".timeindex"), "{e}");
    }

    #[test]
    fn delete_old_segments_cuts_whole_segments_and_keeps_the_log_end() {
        use crate::retention::{RetentionLimits, RetentionReason};
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        for (offset, ts) in [(0, 1_000), (1, 2_000), (2, 3_000)] {
            if offset > 0 {
                log.roll_to(offset).expect("roll");
            }
            log.append_replicated(&stamped(offset, ts)).expect("append");
        }
        let limits = |ms| RetentionLimits {
            retention_ms: Some(ms),
            retention_bytes: None,
        };
        // At 3,500 with 1,000 ms: segments 0 and 1 are older.
        let cut = log
            .delete_old_segments(limits(1_000), 3_500)
            .expect("delete")
            .expect("a cut");
        assert_eq!((cut.new_log_start, cut.reason), (2, RetentionReason::Time));
        assert_eq!(log.segment_base_offsets(), [2]);
        assert_eq!(log.log_start_offset(), 2);
        assert_eq!(
            log.delete_old_segments(limits(1_000), 3_500)
                .expect("again"),
            None
        );
        // Every segment, the active one included: rolled, the end kept.
        let cut = log
            .delete_old_segments(limits(1), 10_000)
            .expect("delete")
            .expect("a cut");
        assert_eq!(cut.new_log_start, 3);
        assert_eq!(log.segment_base_offsets(), [3]);
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (3, 3));
        log.close().expect("close");
        let log = dir.open_partition(&tp(), small()).expect("reopen");
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (3, 3));
    }

    #[test]
    fn open_reports_the_checkpoint_entries_kafka_would_drop() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        log.append_replicated(&batches(&[(0, 0), (2, 3)]))
            .expect("append");
        let path = log.dir().join(LEADER_EPOCH_CHECKPOINT);
        log.close().expect("close");
        // Epochs 1 and 3 both start at 2 (the parser allows equal starts):
        // Kafka's load keeps the later one.
        std::fs::write(&path, "0\n3\n0 0\n1 2\n3 2\n").expect("write");
        let log = dir.open_partition(&tp(), small()).expect("reopen");
        let entry = |epoch, start_offset| EpochEntry {
            epoch,
            start_offset,
        };
        assert_eq!(log.epochs().entries(), [entry(0, 0), entry(3, 2)]);
        assert_eq!(log.recovery_report().dropped_epoch_entries, [entry(1, 2)]);
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
    fn a_flush_fsyncs_the_active_segment_but_not_its_indexes_which_open_rebuilds() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let config = LogConfig {
            segment_bytes: 1 << 20,
            index_interval_bytes: 100,
            ..LogConfig::default()
        };
        let mut log = dir
            .open_or_create_partition(&tp(), None, config.clone())
            .expect("create");
        let input = batches(&[(0, 0), (2, 0), (4, 0), (6, 0)]);
        log.append_replicated(&input).expect("append");
        let base = log.segment_base_offsets()[0];
        let index = log.dir().join(segment::file_name(base, INDEX_SUFFIX));
        let time_index = log.dir().join(segment::file_name(base, TIME_INDEX_SUFFIX));
        let segment = log.dir().join(segment::file_name(base, LOG_SUFFIX));
        let scope = fsutil::DeferredSync::begin();
        log.flush().expect("flush");
        let pending = fsutil::pending_file_fsyncs();
        assert!(pending.contains(&segment), "{pending:?}");
        assert!(
            !pending.contains(&index) && !pending.contains(&time_index),
            "the active segment's indexes are not fsynced: {pending:?}"
        );
        scope.finish().expect("barrier");
        let written = std::fs::read(&index).expect("index");
        assert!(!written.is_empty(), "written for readers all the same");
        drop(log);
        // A power loss took the index files' unsynced pages.
        std::fs::write(&index, [0xffu8; 5]).expect("write");
        std::fs::remove_file(&time_index).expect("remove");
        drop(dir);
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir.open_partition(&tp(), config).expect("reopen");
        assert_eq!(
            log.read(4, usize::MAX).expect("read"),
            input[input.len() / 2..]
        );
        log.flush().expect("flush");
        assert_eq!(std::fs::read(&index).expect("index"), written, "rebuilt");
        assert!(time_index.exists(), "rebuilt");
    }

    #[test]
    fn a_log_opened_whole_below_its_recovery_point_needs_no_fsync_until_it_changes() {
        let root = tempfile::tempdir().expect("tempdir");
        // The active segment.
        let segment = |log: &PartitionLog| {
            let base = *log.segment_base_offsets().last().expect("a segment");
            log.dir().join(segment::file_name(base, LOG_SUFFIX))
        };
        let pending_after_flush = |log: &mut PartitionLog| {
            let scope = fsutil::DeferredSync::begin();
            log.flush().expect("flush");
            let pending = fsutil::pending_file_fsyncs();
            scope.finish().expect("barrier");
            pending
        };
        {
            let dir = LogDir::open(root.path()).expect("open");
            let mut log = dir
                .open_or_create_partition(&tp(), None, small())
                .expect("create");
            log.append_replicated(&batches(&[(0, 0), (2, 0)]))
                .expect("append");
            log.flush().expect("flush");
            // Appended after the last flush, then the process died.
            log.append_replicated(&batches(&[(4, 0)])).expect("append");
        }
        // The recovery point (4) lags the log end (6): its flush fsyncs.
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir.open_partition(&tp(), small()).expect("open");
        assert!(pending_after_flush(&mut log).contains(&segment(&log)));
        drop(log);
        // Now covered whole: a failover's flush fsyncs nothing...
        let mut log = dir.open_partition(&tp(), small()).expect("open");
        assert_eq!(pending_after_flush(&mut log), Vec::<PathBuf>::new());
        // ... until the log changes (an ABORT marker, a truncation).
        log.append_replicated(&batches(&[(6, 0)])).expect("append");
        assert!(pending_after_flush(&mut log).contains(&segment(&log)));
        drop(log);
        let mut log = dir.open_partition(&tp(), small()).expect("open");
        log.truncate_to(4).expect("truncate");
        assert!(pending_after_flush(&mut log).contains(&segment(&log)));
        assert_eq!(log.log_end_offset(), 4);
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
    fn truncation_removes_the_producer_snapshots_above_the_cut() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        log.append_replicated(&batches(&[(0, 0), (2, 0), (4, 1), (6, 1)]))
            .expect("append");
        let entry = crate::snapshot::ProducerSnapshotEntry {
            producer_id: 1,
            producer_epoch: 0,
            last_sequence: 0,
            last_offset: 1,
            offset_delta: 0,
            timestamp: 0,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        };
        for at in [2, 8] {
            crate::snapshot::write_snapshot(log.dir(), at, &[entry]).expect("snapshot");
        }
        assert_eq!(log.truncate_to(4).expect("truncate"), 4);
        assert_eq!(
            crate::snapshot::list_snapshots(log.dir()).expect("list"),
            vec![2]
        );
        log.truncate_fully_and_start_at(10).expect("truncate fully");
        assert!(
            crate::snapshot::list_snapshots(log.dir())
                .expect("list")
                .is_empty()
        );
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

    /// The state a failed append must leave exactly as it was.
    #[derive(Debug, PartialEq)]
    struct Observed {
        log_end_offset: i64,
        size_bytes: u64,
        segments: Vec<i64>,
        files: Vec<(String, u64)>,
        epochs: Vec<(i32, i64)>,
        checkpoint: String,
        /// Length and CRC-32C of everything `read` returns.
        bytes: (usize, u32),
        indexes: (usize, usize, usize),
        open_transactions: Vec<OpenTransaction>,
    }

    /// The segment and checkpoint files of the partition dir (temp files
    /// included) with their lengths, and the rest of [`Observed`]. Index
    /// files are checked by [`assert_index_files_within`].
    fn observe(log: &PartitionLog) -> Observed {
        let mut files: Vec<(String, u64)> = std::fs::read_dir(log.dir())
            .expect("list")
            .map(|e| e.expect("entry"))
            // Directories are the tests' blockers, not the log's.
            .filter(|e| !e.file_type().expect("type").is_dir())
            .map(|e| {
                let len = e.metadata().expect("stat").len();
                (e.file_name().to_string_lossy().into_owned(), len)
            })
            .filter(|(name, _)| {
                name.ends_with(LOG_SUFFIX) || name.starts_with(LEADER_EPOCH_CHECKPOINT)
            })
            .collect();
        files.sort();
        Observed {
            log_end_offset: log.log_end_offset(),
            size_bytes: log.size_bytes(),
            segments: log.segment_base_offsets(),
            files,
            epochs: log
                .epochs()
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect(),
            checkpoint: std::fs::read_to_string(log.dir().join(LEADER_EPOCH_CHECKPOINT))
                .expect("checkpoint"),
            bytes: {
                let all = log.read(log.log_start_offset(), usize::MAX).expect("read");
                (all.len(), crc32c::crc32c(&all))
            },
            indexes: (
                log.active.offset_index.len(),
                log.active.time_index.len(),
                log.active.txn_index.len(),
            ),
            open_transactions: log.open_transactions(),
        }
    }

    /// No entry of a segment's `.index` file points past its `.log`.
    fn assert_index_files_within(log: &PartitionLog) {
        for base in log.segment_base_offsets() {
            let len = std::fs::metadata(segment::file_path(log.dir(), base, LOG_SUFFIX))
                .expect("stat")
                .len();
            let path = segment::file_path(log.dir(), base, INDEX_SUFFIX);
            if let Some(bytes) = fsutil::read_optional(&path).expect("read") {
                let index = OffsetIndex::parse(&bytes, base, &path).expect("parse");
                for e in index.entries() {
                    assert!(u64::from(e.position) < len, "{e:?} past {len} in {path:?}");
                }
            }
        }
    }

    fn assert_verifies(root: &Path) {
        let mut stats = crate::verify::VerifyStats::default();
        let verified = crate::verify::verify_partition(
            root,
            &tp(),
            crate::verify::VerifyOptions::default(),
            &mut stats,
        )
        .expect("verify");
        assert_eq!(verified, Ok(()));
    }

    fn assert_disk_full(err: Error, file_suffix: &str) {
        match err {
            Error::Io { op, path, source } => {
                assert_eq!(op, "write");
                assert!(path.to_string_lossy().ends_with(file_suffix), "{path:?}");
                assert_eq!(source.kind(), std::io::ErrorKind::StorageFull);
            }
            other => panic!("expected an IO error, got {other:?}"),
        }
    }

    #[test]
    fn a_failed_write_leaves_the_log_as_it_was_and_a_retry_appends_in_place() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let config = LogConfig {
            index_interval_bytes: 100,
            ..LogConfig::default()
        };
        let mut log = dir
            .open_or_create_partition(&tp(), None, config.clone())
            .expect("create");
        let first = batches(&[(0, 0), (2, 0)]);
        log.append_replicated(&first).expect("append");
        let before = observe(&log);
        // The disk fills up in the middle of the second of three batches.
        let more = batches(&[(4, 0), (6, 0), (8, 0)]);
        log.write_budget = Some(150);
        let err = log.append_replicated(&more).expect_err("disk full");
        assert_disk_full(err, LOG_SUFFIX);
        assert_eq!(observe(&log), before, "in memory and on disk");

        // Space is back: the retry appends at the same place.
        log.write_budget = None;
        let info = log.append_replicated(&more).expect("retry");
        assert_eq!((info.first_offset, info.last_offset), (4, 9));
        let mut all = first.clone();
        all.extend_from_slice(&more);
        assert_eq!(log.read(0, usize::MAX).expect("read"), all);
        assert_eq!(
            log.active.offset_index.len(),
            4,
            "an entry for every batch after the first"
        );
        log.close().expect("close");
        let log = dir.open_partition(&tp(), config).expect("reopen");
        assert!(
            log.recovery_report().is_clean(),
            "{:?}",
            log.recovery_report()
        );
        assert_eq!(log.log_end_offset(), 10);
        assert_verifies(root.path());
    }

    #[test]
    fn a_failed_write_after_a_roll_removes_the_new_segments_and_the_new_epoch() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        log.append_replicated(&batches(&[(0, 0)])).expect("append");
        let before = observe(&log);
        assert_eq!(before.checkpoint, "0\n1\n0 0\n");
        // Two batches fit a segment: 2 joins segment 0, 4 and 6 go to a new
        // segment 4, 8 and 10 to a segment 8, where the disk fills up. Epoch
        // 1 starts at 6.
        let more = batches(&[(2, 0), (4, 0), (6, 1), (8, 1), (10, 1)]);
        log.write_budget = Some(101 + 202 + 50);
        let err = log.append_replicated(&more).expect_err("disk full");
        assert_disk_full(err, &segment::file_name(8, LOG_SUFFIX));
        assert_eq!(observe(&log), before, "in memory and on disk");
        assert!(!log.epoch_checkpoint_stale);
        assert_index_files_within(&log);
        for base in [4, 8] {
            for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                let path = segment::file_path(log.dir(), base, suffix);
                assert!(!path.exists(), "{path:?} left behind");
            }
        }

        log.write_budget = None;
        log.append_replicated(&more).expect("retry");
        assert_eq!(log.segment_base_offsets(), vec![0, 4, 8]);
        assert_eq!(log.log_end_offset(), 12);
        let text =
            std::fs::read_to_string(log.dir().join(LEADER_EPOCH_CHECKPOINT)).expect("checkpoint");
        assert_eq!(text, "0\n2\n0 0\n1 6\n");
        log.close().expect("close");
        let log = dir.open_partition(&tp(), small()).expect("reopen");
        assert!(
            log.recovery_report().is_clean(),
            "{:?}",
            log.recovery_report()
        );
        assert_eq!(log.log_end_offset(), 12);
        assert_verifies(root.path());
    }

    #[test]
    fn a_new_epoch_that_cannot_be_checkpointed_writes_no_batch() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        log.append_replicated(&batches(&[(0, 0)])).expect("append");
        let before = observe(&log);
        // The checkpoint's temp file cannot be created (as on a full disk).
        let tmp = log.dir().join(format!("{LEADER_EPOCH_CHECKPOINT}.tmp"));
        std::fs::create_dir(&tmp).expect("block the temp file");
        match log.append_replicated(&batches(&[(2, 1)])) {
            Err(Error::Io { path, .. }) => assert_eq!(path, tmp),
            other => panic!("expected an IO error, got {other:?}"),
        }
        let mut b = batches(&[(0, 0)]);
        assert!(matches!(
            log.append_as_leader(&mut b, 3),
            Err(Error::Io { .. })
        ));
        assert_eq!(observe(&log), before, "no batch of an unrecorded epoch");
        assert!(!log.epoch_checkpoint_stale, "the file is untouched");
        // Batches of a known epoch need no checkpoint write.
        log.append_replicated(&batches(&[(2, 0)]))
            .expect("same epoch");
        std::fs::remove_dir(&tmp).expect("unblock");
        log.append_replicated(&batches(&[(4, 1)])).expect("retry");
        let text =
            std::fs::read_to_string(log.dir().join(LEADER_EPOCH_CHECKPOINT)).expect("checkpoint");
        assert_eq!(text, "0\n2\n0 0\n1 4\n");
        drop(log);
        assert_verifies(root.path());
    }

    #[test]
    fn a_stale_epoch_checkpoint_is_rewritten_before_the_next_append() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        log.append_replicated(&batches(&[(0, 0)])).expect("append");
        let tmp = log.dir().join(format!("{LEADER_EPOCH_CHECKPOINT}.tmp"));
        std::fs::create_dir(&tmp).expect("block the temp file");
        // The cache takes epoch 5 at the log end; the file cannot.
        assert!(log.bump_epoch(5).is_err());
        assert!(log.epoch_checkpoint_stale);
        // An append of epoch 5 is not a new epoch for the cache, but the
        // file must learn it first.
        assert!(matches!(
            log.append_replicated(&batches(&[(2, 5)])),
            Err(Error::Io { .. })
        ));
        assert_eq!(log.log_end_offset(), 2);
        std::fs::remove_dir(&tmp).expect("unblock");
        log.append_replicated(&batches(&[(2, 5)])).expect("append");
        assert!(!log.epoch_checkpoint_stale);
        let text =
            std::fs::read_to_string(log.dir().join(LEADER_EPOCH_CHECKPOINT)).expect("checkpoint");
        assert_eq!(text, "0\n2\n0 0\n5 2\n");
        drop(log);
        assert_verifies(root.path());
    }

    #[test]
    fn open_scans_rolled_segments_above_the_recovery_point_and_trusts_those_below() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        // Two batches of ~110 bytes per 300-byte segment.
        let all: Vec<(i64, i32)> = (0..9).map(|i| (i * 2, 0)).collect();
        log.append_replicated(&batches(&all[..6])).expect("append");
        log.flush().expect("flush: recovery point 12");
        log.append_replicated(&batches(&all[6..])).expect("append");
        let bases = log.segment_base_offsets();
        assert_eq!(bases, vec![0, 4, 8, 12, 16], "{bases:?}");
        drop(log);
        // A record byte flipped in a flushed segment (0) and in one rolled
        // after the flush (12).
        for base in [0, 12] {
            let path = segment::file_path(&root.path().join(tp().dir_name()), base, LOG_SUFFIX);
            let mut bytes = std::fs::read(&path).expect("read");
            bytes[80] ^= 0x01;
            std::fs::write(&path, bytes).expect("write");
        }
        let log = dir.open_partition(&tp(), small()).expect("reopen");
        // Segment 0 is trusted, as Kafka trusts what lies below the recovery
        // point (no CRC scan at open); segment 12 is scanned and cut.
        assert_eq!(log.log_end_offset(), 12, "{:?}", log.recovery_report());
        assert_eq!(log.segment_base_offsets(), vec![0, 4, 8, 12]);
        let reason = log.recovery_report().cut_reason.clone().expect("a cut");
        assert!(reason.contains("00000000000000000012.log"), "{reason}");
    }

    #[test]
    fn on_flush_a_roll_leaves_its_fsyncs_to_the_next_flush() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let config = LogConfig {
            flush: FlushPolicy::OnFlush,
            ..small()
        };
        let mut log = dir
            .open_or_create_partition(&tp(), None, config.clone())
            .expect("create");
        let all: Vec<(i64, i32)> = (0..6).map(|i| (i * 2, 0)).collect();
        log.append_replicated(&batches(&all)).expect("append");
        assert_eq!(log.segment_base_offsets(), vec![0, 4, 8]);
        // The rolled segments' data, indexes and the dir wait.
        assert!(!log.sync_later.is_empty());
        log.flush().expect("flush");
        assert!(log.sync_later.is_empty(), "done at the flush");
        drop(log);
        let log = dir.open_partition(&tp(), config).expect("reopen");
        assert!(
            log.recovery_report().is_clean(),
            "{:?}",
            log.recovery_report()
        );
        assert_eq!(log.log_end_offset(), 12);
        // Inside a deferred scope, the scope's barrier does them instead.
        let mut log = log;
        let scope = fsutil::DeferredSync::begin();
        log.append_replicated(&batches(&[(12, 0), (14, 0), (16, 0)]))
            .expect("append");
        assert!(log.sync_later.is_empty(), "the scope's");
        scope.finish().expect("barrier");
        assert_verifies(root.path());
    }

    #[test]
    fn a_failed_roll_leaves_no_half_created_segment() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, small())
            .expect("create");
        log.append_replicated(&batches(&[(0, 0)])).expect("append");
        let before = observe(&log);
        // 2 joins segment 0 (adding an index entry), then the roll for 4
        // writes segment 0's `.index` and fails on its `.timeindex` (a
        // directory stands where the file goes).
        let tmp = segment::file_path(log.dir(), 0, TIME_INDEX_SUFFIX);
        let _ = std::fs::remove_file(&tmp);
        std::fs::create_dir(&tmp).expect("block the time index");
        let more = batches(&[(2, 0), (4, 0)]);
        assert!(matches!(
            log.append_replicated(&more),
            Err(Error::Io { .. })
        ));
        assert_eq!(observe(&log), before, "in memory and on disk");
        assert_index_files_within(&log);
        assert!(!segment::file_path(log.dir(), 4, LOG_SUFFIX).exists());

        // A roll that fails on its own (the source's next segment) too.
        assert!(matches!(log.roll_to(4), Err(Error::Io { .. })));
        assert_eq!(log.segment_base_offsets(), vec![0]);
        assert!(!segment::file_path(log.dir(), 4, LOG_SUFFIX).exists());

        std::fs::remove_dir(&tmp).expect("unblock");
        log.append_replicated(&more).expect("retry");
        assert_eq!(log.segment_base_offsets(), vec![0, 4]);
        log.close().expect("close");
        let log = dir.open_partition(&tp(), small()).expect("reopen");
        assert!(
            log.recovery_report().is_clean(),
            "{:?}",
            log.recovery_report()
        );
        assert_eq!(log.log_end_offset(), 6);
        assert_verifies(root.path());
    }

    #[test]
    fn a_failed_append_keeps_the_open_transactions() {
        use crate::builder::{BatchSpec, RecordInput, build_batch, build_control_batch};
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, LogConfig::default())
            .expect("create");
        let mut spec = BatchSpec::new(0, 0);
        spec.transactional = true;
        spec.producer_id = 7;
        spec.producer_epoch = 1;
        let record = RecordInput {
            timestamp: 1,
            key: None,
            value: Some(b"v".to_vec()),
            headers: vec![],
        };
        let mut data = build_batch(&spec, std::slice::from_ref(&record)).expect("batch");
        log.append_as_leader(&mut data, 0).expect("append");
        let before = observe(&log);
        assert_eq!(before.open_transactions.len(), 1);
        // The abort marker, failing half way: the transaction stays open and
        // the transaction index gains nothing.
        let mut abort = build_control_batch(ControlType::Abort, 1, 0, 7, 1, 2, 0);
        log.write_budget = Some(10);
        assert!(log.append_as_coordinator(&mut abort, 0).is_err());
        assert_eq!(observe(&log), before);
        log.write_budget = None;
        log.append_as_coordinator(&mut abort, 0).expect("retry");
        assert!(log.open_transactions().is_empty());
        assert_eq!(log.active.txn_index.len(), 1);
    }

    /// A real full disk: a 1 MiB tmpfs. Needs root to mount it; skipped
    /// otherwise.
    #[test]
    fn a_full_disk_fails_appends_cleanly() {
        let root_user = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
            })
            .unwrap_or(false);
        if !root_user {
            eprintln!("skipped: needs root to mount a tmpfs");
            return;
        }
        let root = tempfile::tempdir().expect("tempdir");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(root.path())
            .status();
        if !mounted.is_ok_and(|s| s.success()) {
            eprintln!("skipped: cannot mount a tmpfs here");
            return;
        }
        struct Unmount(std::path::PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&self.0)
                    .status();
            }
        }
        let _unmount = Unmount(root.path().to_path_buf());
        let dir = LogDir::open(root.path()).expect("open");
        // No roll: the write itself runs out of space.
        let config = LogConfig {
            index_interval_bytes: 100,
            ..LogConfig::default()
        };
        let mut log = dir
            .open_or_create_partition(&tp(), None, config.clone())
            .expect("create");
        log.append_replicated(&batches(&[(0, 0), (2, 0)]))
            .expect("append");
        let filler = root.path().join("filler");
        let mut f = File::create(&filler).expect("filler");
        let page = vec![0u8; 4096];
        while f.write_all(&page).is_ok() {}
        while f.write_all(&page[..1]).is_ok() {}
        drop(f);
        let before = observe(&log);

        // 10 KB of batches: the segment's last page takes some of them and
        // the write fails part way.
        let spec: Vec<(i64, i32)> = (2..102).map(|i| (2 * i, 0)).collect();
        let more = batches(&spec);
        match log.append_replicated(&more) {
            Err(Error::Io { op, path, source }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::StorageFull, "{source}");
                assert_eq!((op, path), ("write", log.active.path.clone()));
            }
            other => panic!("expected ENOSPC, got {other:?}"),
        }
        assert_eq!(observe(&log), before, "the torn write is cut");
        assert_index_files_within(&log);
        // A new epoch cannot be checkpointed: nothing is written.
        assert!(log.append_replicated(&batches(&[(4, 1)])).is_err());
        assert_eq!(observe(&log), before);

        std::fs::remove_file(&filler).expect("free space");
        log.append_replicated(&more).expect("retry");
        log.append_replicated(&batches(&[(204, 1)]))
            .expect("new epoch");
        assert_eq!(log.log_end_offset(), 206);
        log.close().expect("close");
        let log = dir.open_partition(&tp(), config).expect("reopen");
        assert!(
            log.recovery_report().is_clean(),
            "{:?}",
            log.recovery_report()
        );
        drop(log);
        assert_verifies(root.path());
    }
}
