//! Whole-log consistency checks, as `kafkalog verify` runs them.
//!
//! For each partition: every batch parses and its CRC-32C matches; offsets
//! strictly increase within and across segments, and each segment's first
//! batch is at or above the base offset in its name; leader epochs never
//! decrease and match `leader-epoch-checkpoint` where it has an entry;
//! offset index entries point at batch boundaries holding their offset; time
//! index and transaction index files parse; `partition.metadata` parses. At
//! the root, the three offset checkpoints parse.
//!
//! Base offset and leader epoch lie outside the CRC, so a flipped byte there
//! is caught by these cross-checks instead. Gaps between batches are normal
//! only in compacted logs: they are reported unless gaps are allowed or the
//! partition shows compaction (a batch holding fewer records than its
//! offset range).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::checkpoint;
use crate::checkpoint::PARTITION_METADATA;
use crate::epoch::EpochLineage;
use crate::error::Result;
use crate::index::{OffsetIndex, TimeIndex, TransactionIndex};
use crate::reader::PartitionReader;
use crate::segment::{self, INDEX_SUFFIX, ScanStop, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX};
use crate::topic::TopicPartition;

/// The first inconsistency found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// Byte position in the file, when it applies.
    pub position: Option<u64>,
    /// Offset of the batch concerned, when it applies.
    pub offset: Option<i64>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(p) = self.position {
            write!(f, " at byte {p}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " (offset {o})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Counts of what a clean verification covered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyStats {
    /// Partitions checked.
    pub partitions: usize,
    /// Segments checked.
    pub segments: usize,
    /// Batches checked.
    pub batches: u64,
    /// Bytes of batches checked.
    pub bytes: u64,
}

/// Options for [`verify_partition`].
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifyOptions {
    /// Accept offset gaps between batches even without compaction evidence.
    pub allow_gaps: bool,
}

/// Verifies the root checkpoints of a log dir.
pub fn verify_root(root: &Path) -> std::result::Result<(), Problem> {
    for name in [
        checkpoint::RECOVERY_POINT_OFFSET_CHECKPOINT,
        checkpoint::REPLICATION_OFFSET_CHECKPOINT,
        checkpoint::LOG_START_OFFSET_CHECKPOINT,
    ] {
        let path = root.join(name);
        if let Err(e) = checkpoint::read_offset_checkpoint(&path) {
            return Err(Problem {
                path,
                position: None,
                offset: None,
                message: e.to_string(),
            });
        }
    }
    Ok(())
}

fn problem(
    path: &Path,
    position: Option<u64>,
    offset: Option<i64>,
    message: impl Into<String>,
) -> Problem {
    Problem {
        path: path.to_path_buf(),
        position,
        offset,
        message: message.into(),
    }
}

fn from_error(path: &Path, e: crate::Error) -> Problem {
    problem(path, None, None, e.to_string())
}

/// Verifies one partition; adds what it covered to `stats`.
pub fn verify_partition(
    root: &Path,
    tp: &TopicPartition,
    opts: VerifyOptions,
    stats: &mut VerifyStats,
) -> Result<std::result::Result<(), Problem>> {
    let reader = PartitionReader::open(root, tp)?;
    let dir = reader.dir().to_path_buf();
    let meta_path = dir.join(PARTITION_METADATA);
    if let Err(e) = reader.metadata() {
        return Ok(Err(from_error(&meta_path, e)));
    }
    let epoch_path = dir.join(crate::checkpoint::LEADER_EPOCH_CHECKPOINT);
    let epochs = match reader.epoch_entries() {
        // As the log reads it on open (and Kafka on load): entries that
        // conflict with later ones do not count.
        Ok(e) => EpochLineage::from_checkpoint_entries(e).0,
        Err(e) => return Ok(Err(from_error(&epoch_path, e))),
    };
    let segments = reader.segments()?;
    stats.partitions += 1;
    // Producer state snapshots, where present, must parse and match their CRC.
    for entry in std::fs::read_dir(&dir).map_err(crate::Error::io("list", &dir))? {
        let path = entry.map_err(crate::Error::io("list", &dir))?.path();
        let is_snapshot = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| segment::parse_file_name(n, segment::SNAPSHOT_SUFFIX))
            .is_some();
        if is_snapshot && let Err(e) = crate::snapshot::read_snapshot(&path) {
            return Ok(Err(from_error(&path, e)));
        }
    }

    struct Seen {
        position: u64,
        base: i64,
        last: i64,
        epoch: i32,
        compacted: bool,
    }
    let mut prev: Option<(PathBuf, Seen)> = None;
    let mut compaction_seen = false;
    let mut pending_gap: Option<Problem> = None;
    for seg in &segments {
        stats.segments += 1;
        let mut batches: Vec<Seen> = Vec::new();
        let mut found: Option<Problem> = None;
        let end = segment::scan(&seg.path, 0, true, |h, _| {
            let seen = Seen {
                position: h.position,
                base: h.base_offset,
                last: h.last_offset(),
                epoch: h.partition_leader_epoch,
                compacted: i64::from(h.record_count) < i64::from(h.last_offset_delta) + 1
                    || h.has_delete_horizon(),
            };
            let here = |msg: String| problem(&seg.path, Some(h.position), Some(h.base_offset), msg);
            if h.base_offset < seg.base_offset {
                found = Some(here(format!(
                    "batch base offset {} is below the segment's base offset {}",
                    h.base_offset, seg.base_offset
                )));
                return ControlFlow::Break(());
            }
            let previous = batches.last().or(prev.as_ref().map(|(_, s)| s));
            if let Some(p) = previous {
                if h.base_offset <= p.last {
                    found = Some(here(format!(
                        "batch base offset {} does not follow the previous batch's last offset {} (previous batch at byte {}{}); one of the two is corrupt",
                        h.base_offset,
                        p.last,
                        p.position,
                        match (&prev, batches.is_empty()) {
                            (Some((path, _)), true) => format!(
                                " of {}",
                                path.file_name()
                                    .map(|n| n.to_string_lossy())
                                    .unwrap_or_default()
                            ),
                            _ => String::new(),
                        }
                    )));
                    return ControlFlow::Break(());
                }
                if h.base_offset > p.last + 1 && pending_gap.is_none() {
                    pending_gap = Some(here(format!(
                        "offset gap: previous batch (at byte {}) ends at {}, this one starts at {} (a gap is normal only in compacted topics: --allow-gaps)",
                        p.position, p.last, h.base_offset
                    )));
                }
                if h.partition_leader_epoch >= 0
                    && p.epoch >= 0
                    && h.partition_leader_epoch < p.epoch
                {
                    found = Some(here(format!(
                        "leader epoch {} is below the previous batch's epoch {} (previous batch at byte {})",
                        h.partition_leader_epoch, p.epoch, p.position
                    )));
                    return ControlFlow::Break(());
                }
            }
            if let Some(expected) = epochs.epoch_for_offset(h.last_offset())
                && h.partition_leader_epoch != expected
            {
                found = Some(here(format!(
                    "leader epoch {} differs from {} that leader-epoch-checkpoint assigns to this offset",
                    h.partition_leader_epoch, expected
                )));
                return ControlFlow::Break(());
            }
            stats.batches += 1;
            stats.bytes += h.size() as u64;
            batches.push(seen);
            ControlFlow::Continue(())
        })?;
        if let Some(p) = found {
            return Ok(Err(p));
        }
        match &end.stop {
            ScanStop::Corrupt(e) | ScanStop::Torn(e) => {
                return Ok(Err(problem(
                    &seg.path,
                    Some(e.position()),
                    None,
                    e.to_string(),
                )));
            }
            _ => {}
        }
        compaction_seen |= batches.iter().any(|b| b.compacted);
        if let Some(p) = check_indexes(
            &dir,
            seg.base_offset,
            &batches
                .iter()
                .map(|b| (b.position, b.base, b.last))
                .collect::<Vec<_>>(),
        ) {
            return Ok(Err(p));
        }
        if let Some(last) = batches.pop() {
            prev = Some((seg.path.clone(), last));
        }
    }
    if let Some(gap) = pending_gap
        && !opts.allow_gaps
        && !compaction_seen
    {
        return Ok(Err(gap));
    }
    // Every epoch checkpoint entry must start at or below the log end.
    if let (Some(latest), Some((_, last))) = (epochs.latest(), prev.as_ref())
        && latest.start_offset > last.last + 1
    {
        return Ok(Err(problem(
            &epoch_path,
            None,
            Some(latest.start_offset),
            format!(
                "epoch {} starts at {}, beyond the log end offset {}",
                latest.epoch,
                latest.start_offset,
                last.last + 1
            ),
        )));
    }
    Ok(Ok(()))
}

/// Checks a segment's index files against its batches `(position, base,
/// last)`: offset index entries at batch boundaries holding their offset,
/// time index entries inside the segment, the transaction index parsing.
/// Also used by the applier's `verify` and scrub, segment by segment.
pub fn check_indexes(dir: &Path, base: i64, batches: &[(u64, i64, i64)]) -> Option<Problem> {
    let by_position: HashMap<u64, (i64, i64)> =
        batches.iter().map(|&(p, b, l)| (p, (b, l))).collect();
    let seg_last = batches.last().map(|b| b.2).unwrap_or(base);
    let log_name = segment::file_name(base, segment::LOG_SUFFIX);
    let path = segment::file_path(dir, base, INDEX_SUFFIX);
    match crate::fsutil::read_optional(&path) {
        Err(e) => return Some(from_error(&path, e)),
        Ok(None) => {}
        Ok(Some(bytes)) => match OffsetIndex::parse(&bytes, base, &path) {
            Err(e) => return Some(from_error(&path, e)),
            Ok(index) => {
                for (i, entry) in index.entries().iter().enumerate() {
                    let at = Some(i as u64 * 8);
                    match by_position.get(&u64::from(entry.position)) {
                        None => {
                            return Some(problem(
                                &path,
                                at,
                                Some(entry.offset),
                                format!(
                                    "entry {i} points at byte {} of {log_name}, which is not a batch boundary",
                                    entry.position
                                ),
                            ));
                        }
                        Some(&(b, _)) if entry.offset < b || entry.offset > seg_last => {
                            return Some(problem(
                                &path,
                                at,
                                Some(entry.offset),
                                format!(
                                    "entry {i} names offset {} but the batch at byte {} of {log_name} starts at {b}",
                                    entry.offset, entry.position
                                ),
                            ));
                        }
                        _ => {}
                    }
                }
            }
        },
    }
    let path = segment::file_path(dir, base, TIME_INDEX_SUFFIX);
    match crate::fsutil::read_optional(&path) {
        Err(e) => return Some(from_error(&path, e)),
        Ok(None) => {}
        Ok(Some(bytes)) => match TimeIndex::parse(&bytes, base, &path) {
            Err(e) => return Some(from_error(&path, e)),
            Ok(index) => {
                if let Some((i, e)) = index
                    .entries()
                    .iter()
                    .enumerate()
                    .find(|(_, e)| e.offset < base || e.offset > seg_last)
                {
                    return Some(problem(
                        &path,
                        Some(i as u64 * 12),
                        Some(e.offset),
                        format!(
                            "entry {i} names offset {} outside the segment [{base}, {seg_last}]",
                            e.offset
                        ),
                    ));
                }
            }
        },
    }
    let path = segment::file_path(dir, base, TXN_INDEX_SUFFIX);
    match crate::fsutil::read_optional(&path) {
        Err(e) => Some(from_error(&path, e)),
        Ok(Some(bytes)) => TransactionIndex::parse(&bytes, &path)
            .err()
            .map(|e| from_error(&path, e)),
        Ok(None) => None,
    }
}
