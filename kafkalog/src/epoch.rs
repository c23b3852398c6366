//! The leader epoch lineage of one partition: Kafka's
//! `LeaderEpochFileCache` as a pure value, the one type for it in segmirror
//! (the log's cache, a manifest's lineage, a shipped range's epochs).
//!
//! An [`EpochLineage`] is the list of `(leader epoch, start offset)` pairs of
//! a partition, oldest first, as in Kafka's `leader-epoch-checkpoint`; the
//! entry type is [`EpochEntry`]. Its methods follow Kafka's
//! `LeaderEpochFileCache` (`assign`, `endOffsetFor`, `truncateFromEnd`,
//! `truncateFromStart`, `epochForOffset`) with no IO, no locks and no
//! flushing: the file form is [`crate::checkpoint`]'s, and
//! [`crate::log::PartitionLog`] writes it.
//!
//! # Invariants
//!
//! Kept by every constructor and method, and checked when a lineage is
//! deserialized:
//!
//! - every epoch and every start offset is `>= 0`;
//! - epochs are strictly increasing;
//! - start offsets are strictly increasing.
//!
//! A lineage does not know its log's end offset (LEO): methods that need it
//! take it as an argument. Entry `i` covers the offsets from its start up to
//! the start of entry `i + 1` (the last entry: up to the LEO). The latest
//! entry may start exactly at the LEO (an epoch with no records yet), as in
//! Kafka.
//!
//! # Two constructors
//!
//! - [`EpochLineage::from_entries`] is strict: entries that break an
//!   invariant are an error ([`LineageError`]). Everything segmirror wrote
//!   itself (manifests, pages) is read this way, through serde.
//! - [`EpochLineage::from_checkpoint_entries`] is Kafka's load of its own
//!   checkpoint file: conflicting entries are dropped, and returned so the
//!   caller can report them.
//!
//! The decisions taken from two lineages (divergence, failback truncation)
//! are in `manifest::lineage`.

use crate::checkpoint::EpochEntry;

/// A lineage that is not one: see the module's invariants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LineageError {
    /// An epoch or a start offset is negative.
    #[error(
        "invalid epoch entry {epoch}@{start_offset}: epoch and start offset must not be negative"
    )]
    Negative {
        /// The entry's epoch.
        epoch: i32,
        /// The entry's start offset.
        start_offset: i64,
    },
    /// An entry does not come strictly after the one before it.
    #[error(
        "epoch lineage out of order at entry {index}: {epoch}@{start_offset} follows \
         {previous_epoch}@{previous_start_offset}; epochs and start offsets must both \
         increase strictly"
    )]
    NotIncreasing {
        /// Position of the offending entry (0-based).
        index: usize,
        /// Its epoch.
        epoch: i32,
        /// Its start offset.
        start_offset: i64,
        /// The epoch of the entry before it.
        previous_epoch: i32,
        /// The start offset of the entry before it.
        previous_start_offset: i64,
    },
}

/// The `(epoch, start_offset)` entries of a partition, oldest first, with
/// epochs and start offsets both strictly increasing (see the module docs).
///
/// Serialized as the list of its entries,
/// `[{"epoch":3,"start_offset":0},{"epoch":5,"start_offset":40}]`;
/// deserializing checks the invariants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "Vec<EpochEntry>", into = "Vec<EpochEntry>")]
pub struct EpochLineage {
    entries: Vec<EpochEntry>,
}

impl EpochLineage {
    /// An empty lineage (a partition that has no record yet).
    pub fn new() -> EpochLineage {
        EpochLineage::default()
    }

    /// Builds a lineage from entries, oldest first; an entry that breaks an
    /// invariant is an error (unlike Kafka's load, which silently drops it:
    /// a lineage we read from a manifest must be exactly what was written).
    /// For Kafka's own `leader-epoch-checkpoint`, where Kafka's rule applies,
    /// see [`EpochLineage::from_checkpoint_entries`].
    pub fn from_entries(
        entries: impl IntoIterator<Item = EpochEntry>,
    ) -> Result<EpochLineage, LineageError> {
        let mut out: Vec<EpochEntry> = Vec::new();
        for (index, entry) in entries.into_iter().enumerate() {
            if entry.epoch < 0 || entry.start_offset < 0 {
                return Err(LineageError::Negative {
                    epoch: entry.epoch,
                    start_offset: entry.start_offset,
                });
            }
            if let Some(previous) = out.last()
                && (entry.epoch <= previous.epoch || entry.start_offset <= previous.start_offset)
            {
                return Err(LineageError::NotIncreasing {
                    index,
                    epoch: entry.epoch,
                    start_offset: entry.start_offset,
                    previous_epoch: previous.epoch,
                    previous_start_offset: previous.start_offset,
                });
            }
            out.push(entry);
        }
        Ok(EpochLineage { entries: out })
    }

    /// Builds a lineage from the entries of a Kafka `leader-epoch-checkpoint`
    /// the way Kafka's `LeaderEpochFileCache` loads one: each entry is
    /// [assigned](EpochLineage::assign) in turn, so an entry that conflicts
    /// with a later one (for instance two epochs starting at the same offset)
    /// is removed, and a negative one is skipped. Returns the lineage and the
    /// entries that are not in it, in file order, so that the caller can say
    /// so. Nothing is dropped from entries that already keep the invariants.
    pub fn from_checkpoint_entries(
        entries: impl IntoIterator<Item = EpochEntry>,
    ) -> (EpochLineage, Vec<EpochEntry>) {
        let entries: Vec<EpochEntry> = entries.into_iter().collect();
        let mut lineage = EpochLineage::new();
        for e in &entries {
            if e.epoch >= 0 && e.start_offset >= 0 {
                lineage.assign_non_negative(e.epoch, e.start_offset);
            }
        }
        let mut kept = lineage.entries.iter().peekable();
        let mut dropped = Vec::new();
        for e in entries {
            if kept.peek() == Some(&&e) {
                kept.next();
            } else {
                dropped.push(e);
            }
        }
        (lineage, dropped)
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The oldest entry.
    pub fn earliest(&self) -> Option<EpochEntry> {
        self.entries.first().copied()
    }

    /// The latest entry.
    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// The latest epoch.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`, exactly as Kafka's
    /// `LeaderEpochFileCache.assign`:
    ///
    /// - nothing changes when `epoch` is the latest epoch and `start_offset`
    ///   is not below its start (an epoch, once assigned, keeps its start);
    /// - otherwise every entry at the end whose epoch is `>= epoch` or whose
    ///   start offset is `>= start_offset` is removed, then the new entry is
    ///   appended. So an older epoch after a newer one, or an offset at or
    ///   below an existing start, truncates the conflicting tail.
    ///
    /// Returns whether the lineage changed. A negative epoch or offset is an
    /// error and changes nothing (Kafka throws `IllegalArgumentException`).
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool, LineageError> {
        if epoch < 0 || start_offset < 0 {
            return Err(LineageError::Negative {
                epoch,
                start_offset,
            });
        }
        Ok(self.assign_non_negative(epoch, start_offset))
    }

    /// [`EpochLineage::assign`] of an epoch and offset known to be `>= 0`.
    fn assign_non_negative(&mut self, epoch: i32, start_offset: i64) -> bool {
        if let Some(latest) = self.latest()
            && latest.epoch == epoch
            && start_offset >= latest.start_offset
        {
            return false;
        }
        while let Some(last) = self.entries.last() {
            if last.epoch >= epoch || last.start_offset >= start_offset {
                self.entries.pop();
            } else {
                break;
            }
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Assigns `epoch` at `start_offset` only when `epoch` is newer than the
    /// latest epoch (or the lineage is empty), as Kafka does for each batch
    /// it appends or recovers (`LogSegment.recover`,
    /// `UnifiedLog.maybeAssignEpochStartOffset`). A negative epoch (a batch
    /// without one) or start offset is not an epoch start and changes
    /// nothing. Returns whether the lineage changed.
    pub fn assign_if_newer(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0
            || start_offset < 0
            || self.latest_epoch().is_some_and(|latest| epoch <= latest)
        {
            return false;
        }
        self.assign_non_negative(epoch, start_offset)
    }

    /// Kafka's `endOffsetFor(requestedEpoch, logEndOffset)`: `(epoch,
    /// end_offset)` where `epoch` is the largest known epoch `<=` the one
    /// asked for and `end_offset` is the start offset of the first epoch
    /// above the one asked for. Case by case:
    ///
    /// - `epoch` is the latest epoch: `(epoch, log_end)`;
    /// - `epoch` is above every epoch, or the lineage is empty: `None`
    ///   (Kafka's `UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET`);
    /// - `epoch` is below the oldest epoch: `(epoch, start of the oldest)`;
    /// - otherwise: `(floor epoch, start of the first epoch above epoch)`.
    ///
    /// A negative `epoch` (Kafka's `UNDEFINED_EPOCH` is -1; no other
    /// negative epoch exists) is `None`.
    pub fn end_offset_for(&self, epoch: i32, log_end: i64) -> Option<(i32, i64)> {
        if epoch < 0 {
            return None;
        }
        let latest = self.latest()?;
        if epoch == latest.epoch {
            return Some((epoch, log_end));
        }
        let higher_index = self.entries.partition_point(|e| e.epoch <= epoch);
        let higher = self.entries.get(higher_index)?;
        let floor = higher_index
            .checked_sub(1)
            .and_then(|i| self.entries.get(i));
        match floor {
            None => Some((epoch, higher.start_offset)),
            Some(floor) => Some((floor.epoch, higher.start_offset)),
        }
    }

    /// The log was truncated to `end_offset` (offsets `>= end_offset` are
    /// gone): removes the entries that start at or after it, as Kafka's
    /// `truncateFromEnd`. A negative `end_offset` (Kafka's
    /// `UNDEFINED_EPOCH_OFFSET`) changes nothing. Returns whether the lineage
    /// changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        if end_offset < 0 {
            return false;
        }
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// The log start moved to `start_offset`: as Kafka's `truncateFromStart`,
    /// the entries that start at or before it are removed except the last of
    /// them, which is moved to start at `start_offset`. An offset before the
    /// oldest start (negative included) changes nothing. Returns whether the
    /// lineage changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let removed = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        let Some(kept) = removed.checked_sub(1) else {
            return false;
        };
        self.entries.drain(..kept);
        match self.entries.first_mut() {
            Some(first) if kept > 0 || first.start_offset != start_offset => {
                first.start_offset = start_offset;
                true
            }
            _ => false,
        }
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Kafka's `epochForOffset`: the epoch in force at `offset`, i.e. of the
    /// entry with the largest start offset `<= offset`; `None` below the
    /// oldest entry.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        let index = self.entries.partition_point(|e| e.start_offset <= offset);
        index
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .map(|e| e.epoch)
    }

    /// The entry of the highest epoch `<= epoch` (Kafka's
    /// `floorEntry(epoch)`); `None` when every epoch is above `epoch`.
    pub fn highest_epoch_below_or_at(&self, epoch: i32) -> Option<EpochEntry> {
        let index = self.entries.partition_point(|e| e.epoch <= epoch);
        index
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .copied()
    }

    /// This lineage without the entries that start after `log_end`: those
    /// describe no record of a log that ends there. (An entry starting
    /// exactly at `log_end`, an epoch with no record yet, is kept.)
    pub fn held_by(&self, log_end: i64) -> EpochLineage {
        let keep = self.entries.partition_point(|e| e.start_offset <= log_end);
        let mut entries = self.entries.clone();
        entries.truncate(keep);
        EpochLineage { entries }
    }
}

impl TryFrom<Vec<EpochEntry>> for EpochLineage {
    type Error = LineageError;

    fn try_from(entries: Vec<EpochEntry>) -> Result<EpochLineage, LineageError> {
        EpochLineage::from_entries(entries)
    }
}

impl From<EpochLineage> for Vec<EpochEntry> {
    fn from(lineage: EpochLineage) -> Vec<EpochEntry> {
        lineage.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UNDEFINED_EPOCH: i32 = -1;
    const UNDEFINED_EPOCH_OFFSET: i64 = -1;

    fn e(epoch: i32, start_offset: i64) -> EpochEntry {
        EpochEntry {
            epoch,
            start_offset,
        }
    }

    fn lineage(pairs: &[(i32, i64)]) -> EpochLineage {
        EpochLineage::from_entries(pairs.iter().map(|&(epoch, start)| e(epoch, start)))
            .expect("valid lineage")
    }

    fn pairs(l: &EpochLineage) -> Vec<(i32, i64)> {
        l.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    // ---- Kafka's LeaderEpochFileCacheTest, as one table ----------------

    #[derive(Debug)]
    enum Step {
        Assign(i32, i64),
        TruncateFromEnd(i64),
        TruncateFromStart(i64),
        Clear,
        Entries(&'static [(i32, i64)]),
        Latest(Option<i32>),
        /// requested epoch, log end offset, expected answer
        EndOffset(i32, i64, Option<(i32, i64)>),
        EpochFor(i64, Option<i32>),
    }
    use Step::*;

    /// Kafka test name, then its steps. `UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET`
    /// answers are `None`. Kafka tests of IO, locking and checkpoint files
    /// have no counterpart.
    #[rustfmt::skip]
    const KAFKA_CASES: &[(&str, &[Step])] = &[
        ("shouldAddEpochAndMessageOffsetToCache", &[
            Assign(2, 10), Latest(Some(2)), Entries(&[(2, 10)]), EndOffset(2, 11, Some((2, 11))),
        ]),
        ("shouldReturnLogEndOffsetIfLatestEpochRequested", &[
            Assign(2, 11), Assign(2, 12), EndOffset(2, 14, Some((2, 14))),
        ]),
        ("shouldReturnUndefinedOffsetIfUndefinedEpochRequested", &[
            Assign(2, 11), Assign(3, 12), EndOffset(UNDEFINED_EPOCH, 0, None),
        ]),
        ("shouldNotOverwriteLogEndOffsetForALeaderEpochOnceItHasBeenAssigned", &[
            Assign(2, 9), Assign(2, 10), Entries(&[(2, 9)]),
        ]),
        ("shouldEnforceMonotonicallyIncreasingStartOffsets", &[
            Assign(2, 9), Assign(3, 9), Entries(&[(3, 9)]),
        ]),
        ("shouldNotOverwriteOffsetForALeaderEpochOnceItHasBeenAssigned", &[
            Assign(2, 6), Assign(2, 10), Entries(&[(2, 6)]),
        ]),
        ("shouldReturnUnsupportedIfNoEpochRecorded", &[
            EndOffset(0, 0, None),
        ]),
        ("shouldReturnUnsupportedIfNoEpochRecordedAndUndefinedEpochRequested", &[
            EndOffset(UNDEFINED_EPOCH, 73, None),
        ]),
        ("shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch", &[
            Assign(5, 11), Assign(6, 12), Assign(7, 13), EndOffset(4, 0, Some((4, 11))),
        ]),
        ("shouldTruncateIfMatchingEpochButEarlierStartingOffset", &[
            Assign(5, 11), Assign(6, 12), Assign(7, 13), Assign(7, 12),
            Entries(&[(5, 11), (7, 12)]), EndOffset(5, 0, Some((5, 12))),
            EndOffset(6, 0, Some((5, 12))),
        ]),
        ("shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch", &[
            Assign(1, 11), Assign(1, 12), Assign(2, 13), Assign(2, 14), Assign(3, 15),
            Assign(3, 16), EndOffset(2, 17, Some((2, 15))),
        ]),
        ("shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested", &[
            Assign(0, 10), Assign(2, 13), Assign(4, 17), EndOffset(1, 0, Some((0, 13))),
            EndOffset(2, 0, Some((2, 17))), EndOffset(3, 0, Some((2, 17))),
        ]),
        ("shouldNotUpdateEpochAndStartOffsetIfItDidNotChange", &[
            Assign(2, 6), Assign(2, 7), Entries(&[(2, 6)]),
        ]),
        ("shouldReturnInvalidOffsetIfEpochIsRequestedWhichIsNotCurrentlyTracked", &[
            Assign(2, 100), EndOffset(3, 100, None),
        ]),
        ("shouldSupportEpochsThatDoNotStartFromZero", &[
            Assign(2, 6), EndOffset(2, 7, Some((2, 7))), Entries(&[(2, 6)]),
        ]),
        ("shouldEnforceMonotonicallyIncreasingEpochs", &[
            Assign(1, 5), Assign(2, 6), Assign(1, 7), Latest(Some(1)),
            EndOffset(1, 8, Some((1, 8))), EndOffset(2, 8, None), Entries(&[(1, 7)]),
        ]),
        ("shouldEnforceOffsetsIncreaseMonotonically", &[
            Assign(2, 6), Assign(3, 5), Entries(&[(3, 5)]),
        ]),
        ("shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes", &[
            Assign(0, 0), Assign(1, 0), Latest(Some(1)), EndOffset(1, 0, Some((1, 0))),
            EndOffset(0, 0, Some((0, 0))), EndOffset(1, 5, Some((1, 5))),
            EndOffset(0, 5, Some((0, 0))), Assign(2, 5), EndOffset(2, 10, Some((2, 10))),
            EndOffset(1, 10, Some((1, 5))), EndOffset(0, 10, Some((0, 0))),
        ]),
        ("shouldIncreaseAndTrackEpochsAsFollowerReceivesManyMessages", &[
            Assign(0, 0), Assign(0, 1), Assign(0, 2), Latest(Some(0)),
            EndOffset(0, 3, Some((0, 3))), Assign(1, 3), Assign(1, 4), Assign(1, 5),
            Latest(Some(1)), EndOffset(1, 6, Some((1, 6))), Assign(2, 6), Assign(2, 7),
            Assign(2, 8), Latest(Some(2)), EndOffset(2, 9, Some((2, 9))),
            EndOffset(0, 9, Some((0, 3))), EndOffset(1, 9, Some((1, 6))),
        ]),
        ("shouldDropEntriesOnEpochBoundaryWhenRemovingLatestEntries", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromEnd(8), Entries(&[(2, 6)]),
        ]),
        ("shouldPreserveResetOffsetOnClearEarliestIfOneExists", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromStart(8),
            Entries(&[(3, 8), (4, 11)]),
        ]),
        ("shouldNotClearAnythingIfOffsetTooEarly", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromStart(1),
            Entries(&[(2, 6), (3, 8), (4, 11)]),
        ]),
        ("shouldNotClearAnythingIfOffsetIsFirstOffset", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromStart(6),
            Entries(&[(2, 6), (3, 8), (4, 11)]),
        ]),
        ("shouldRetainLatestEpochOnClearAllEarliest", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromStart(11), Entries(&[(4, 11)]),
        ]),
        ("shouldUpdateOffsetBetweenEpochBoundariesOnClearEarliest", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromStart(9),
            Entries(&[(3, 9), (4, 11)]),
        ]),
        ("shouldUpdateOffsetBetweenFirstTwoEpochBoundariesOnClearEarliest", &[
            Assign(0, 0), Assign(1, 7), Assign(2, 10), TruncateFromStart(5),
            Entries(&[(0, 5), (1, 7), (2, 10)]),
        ]),
        ("shouldRetainLatestEpochOnClearAllEarliestAndUpdateItsOffset", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromStart(15), Entries(&[(4, 15)]),
        ]),
        ("shouldDropEntriesBetweenEpochBoundaryWhenRemovingNewest", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromEnd(9), Latest(Some(3)),
            Entries(&[(2, 6), (3, 8)]),
        ]),
        ("shouldClearAllEntries", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), Clear, Entries(&[]),
        ]),
        ("shouldNotResetEpochHistoryHeadIfUndefinedPassed", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromStart(UNDEFINED_EPOCH_OFFSET),
            Entries(&[(2, 6), (3, 8), (4, 11)]),
        ]),
        ("shouldNotResetEpochHistoryTailIfUndefinedPassed", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromEnd(UNDEFINED_EPOCH_OFFSET),
            Entries(&[(2, 6), (3, 8), (4, 11)]),
        ]),
        ("shouldFetchLatestEpochOfEmptyCache", &[
            Latest(None),
        ]),
        ("shouldFetchEndOffsetOfEmptyCache", &[
            EndOffset(7, 0, None),
        ]),
        ("shouldClearEarliestOnEmptyCache", &[
            TruncateFromStart(7), Entries(&[]),
        ]),
        ("shouldClearLatestOnEmptyCache", &[
            TruncateFromEnd(7), Entries(&[]),
        ]),
        ("shouldFetchEpochForGivenOffset", &[
            Assign(0, 10), Assign(1, 20), Assign(5, 30), EpochFor(25, Some(1)),
            EpochFor(20, Some(1)), EpochFor(30, Some(5)), EpochFor(50, Some(5)),
            EpochFor(5, None),
        ]),
        ("shouldWriteCheckpointOnTruncation", &[
            Assign(2, 6), Assign(3, 8), Assign(4, 11), TruncateFromEnd(11), TruncateFromStart(8),
            Entries(&[(3, 8)]),
        ]),
    ];

    #[test]
    fn kafka_leader_epoch_file_cache_cases() {
        for (name, steps) in KAFKA_CASES {
            let mut l = EpochLineage::new();
            for (i, step) in steps.iter().enumerate() {
                let at = format!("{name}, step {i} {step:?}");
                match *step {
                    Assign(e, o) => {
                        l.assign(e, o).expect(&at);
                    }
                    TruncateFromEnd(o) => {
                        l.truncate_from_end(o);
                    }
                    TruncateFromStart(o) => {
                        l.truncate_from_start(o);
                    }
                    Clear => l.clear(),
                    Entries(want) => assert_eq!(pairs(&l), want.to_vec(), "{at}"),
                    Latest(want) => assert_eq!(l.latest_epoch(), want, "{at}"),
                    EndOffset(e, leo, want) => assert_eq!(l.end_offset_for(e, leo), want, "{at}"),
                    EpochFor(o, want) => assert_eq!(l.epoch_for_offset(o), want, "{at}"),
                }
                assert!(
                    EpochLineage::from_entries(l.entries().iter().copied()).is_ok(),
                    "{at}: invariants broken: {l:?}"
                );
            }
        }
    }

    #[test]
    fn assign_reports_changes_and_refuses_negatives() {
        let mut l = EpochLineage::new();
        assert_eq!(l.assign(2, 6), Ok(true));
        assert_eq!(l.assign(2, 7), Ok(false));
        assert_eq!(
            l.assign(2, 5),
            Ok(true),
            "earlier start of the latest epoch"
        );
        assert_eq!(pairs(&l), vec![(2, 5)]);
        assert_eq!(
            l.assign(-1, 10),
            Err(LineageError::Negative {
                epoch: -1,
                start_offset: 10
            })
        );
        assert!(matches!(
            l.assign(3, -1),
            Err(LineageError::Negative { .. })
        ));
        assert_eq!(pairs(&l), vec![(2, 5)], "a refused assign changes nothing");
    }

    #[test]
    fn truncations_report_changes() {
        let mut l = lineage(&[(2, 6), (3, 8), (4, 11)]);
        assert!(!l.truncate_from_end(12));
        assert!(!l.truncate_from_start(6));
        assert!(!l.truncate_from_start(5));
        assert!(l.truncate_from_start(7));
        assert_eq!(pairs(&l), vec![(2, 7), (3, 8), (4, 11)]);
        assert!(l.truncate_from_end(11));
        assert_eq!(pairs(&l), vec![(2, 7), (3, 8)]);
    }

    #[test]
    fn floor_lookups() {
        let l = lineage(&[(3, 0), (5, 40), (7, 100)]);
        let floor = |e| {
            l.highest_epoch_below_or_at(e)
                .map(|x| (x.epoch, x.start_offset))
        };
        assert_eq!(floor(2), None);
        assert_eq!(floor(3), Some((3, 0)));
        assert_eq!(floor(4), Some((3, 0)));
        assert_eq!(floor(5), Some((5, 40)));
        assert_eq!(floor(6), Some((5, 40)));
        assert_eq!(floor(100), Some((7, 100)));
        assert_eq!(l.earliest().map(|e| e.epoch), Some(3));
        assert_eq!(l.len(), 3);
        assert!(!l.is_empty() && EpochLineage::new().is_empty());
    }

    #[test]
    fn from_entries_checks_every_invariant() {
        let e = |epoch, start_offset| EpochEntry {
            epoch,
            start_offset,
        };
        assert!(EpochLineage::from_entries([]).is_ok());
        assert!(EpochLineage::from_entries([e(0, 0), e(2, 30), e(3, 70)]).is_ok());
        assert_eq!(
            EpochLineage::from_entries([e(0, 0), e(2, 30), e(2, 70)]),
            Err(LineageError::NotIncreasing {
                index: 2,
                epoch: 2,
                start_offset: 70,
                previous_epoch: 2,
                previous_start_offset: 30
            })
        );
        for bad in [
            vec![e(3, 0), e(2, 30)],
            vec![e(0, 30), e(1, 30)],
            vec![e(0, 30), e(1, 20)],
            vec![e(-1, 0)],
            vec![e(0, -5)],
        ] {
            assert!(EpochLineage::from_entries(bad.clone()).is_err(), "{bad:?}");
        }
        let err = EpochLineage::from_entries([e(0, 0), e(2, 30), e(1, 70)])
            .expect_err("out of order")
            .to_string();
        assert_eq!(
            err,
            "epoch lineage out of order at entry 2: 1@70 follows 2@30; epochs and start \
             offsets must both increase strictly"
        );
    }

    #[test]
    fn serde_is_the_entry_list_and_validates() {
        let l = lineage(&[(3, 0), (5, 40)]);
        let json = serde_json::to_string(&l).expect("ser");
        assert_eq!(
            json,
            r#"[{"epoch":3,"start_offset":0},{"epoch":5,"start_offset":40}]"#
        );
        assert_eq!(serde_json::from_str::<EpochLineage>(&json).expect("de"), l);
        assert_eq!(
            serde_json::from_str::<EpochLineage>("[]").expect("de"),
            EpochLineage::new()
        );
        for bad in [
            r#"[{"epoch":5,"start_offset":0},{"epoch":3,"start_offset":40}]"#,
            r#"[{"epoch":3,"start_offset":40},{"epoch":5,"start_offset":40}]"#,
            r#"[{"epoch":-1,"start_offset":0}]"#,
        ] {
            assert!(serde_json::from_str::<EpochLineage>(bad).is_err(), "{bad}");
        }
    }

    // ---- The log's per-batch rule and Kafka's checkpoint load ------------

    #[test]
    fn assign_if_newer_is_the_per_batch_rule() {
        let mut l = lineage(&[(0, 0), (2, 30), (3, 70)]);
        assert_eq!(l.assign(3, 80), Ok(false), "same epoch later offset");
        assert!(!l.assign_if_newer(1, 90), "an older epoch is ignored");
        assert!(!l.assign_if_newer(3, 90), "so is the latest epoch");
        assert!(!l.assign_if_newer(-1, 90), "a batch without an epoch");
        assert!(!l.assign_if_newer(5, -1), "a negative offset");
        assert_eq!(pairs(&l), vec![(0, 0), (2, 30), (3, 70)]);
        assert!(l.assign_if_newer(4, 90));
        assert!(EpochLineage::new().assign_if_newer(0, 0));
        assert_eq!(
            l.assign(4, 50),
            Ok(true),
            "a newer epoch at a lower offset replaces the tail"
        );
        assert_eq!(pairs(&l), vec![(0, 0), (2, 30), (4, 50)]);
    }

    #[test]
    fn end_offset_for_the_shapes_of_a_log() {
        let l = lineage(&[(0, 0), (2, 30), (3, 70)]);
        type Answer = Option<(i32, i64)>;
        #[rustfmt::skip]
        let rows: &[(&str, i32, Answer)] = &[
            ("latest epoch: the LEO", 3, Some((3, 100))),
            ("an older epoch: the next one's start", 2, Some((2, 70))),
            ("an unknown epoch: the floor epoch's end", 1, Some((0, 30))),
            ("above every epoch: undefined", 5, None),
            ("undefined epoch: undefined", UNDEFINED_EPOCH, None),
        ];
        for &(name, asked, want) in rows {
            assert_eq!(l.end_offset_for(asked, 100), want, "{name}");
        }
        assert_eq!(
            lineage(&[(2, 10)]).end_offset_for(1, 100),
            Some((1, 10)),
            "below the oldest: its start"
        );
        assert_eq!(EpochLineage::new().end_offset_for(0, 5), None);
    }

    #[test]
    fn truncating_both_ends() {
        let mut l = lineage(&[(0, 0), (2, 30), (3, 70)]);
        assert!(l.truncate_from_end(70));
        assert_eq!(pairs(&l), vec![(0, 0), (2, 30)]);
        assert!(l.truncate_from_start(40));
        assert_eq!(pairs(&l), vec![(2, 40)]);
        assert_eq!(l.epoch_for_offset(39), None);
        assert_eq!(l.epoch_for_offset(45), Some(2));
        assert!(!l.truncate_from_end(UNDEFINED_EPOCH_OFFSET));
    }

    #[test]
    fn held_by_keeps_an_epoch_starting_at_the_log_end() {
        let l = lineage(&[(0, 0), (2, 30), (3, 70)]);
        assert_eq!(pairs(&l.held_by(70)), vec![(0, 0), (2, 30), (3, 70)]);
        assert_eq!(pairs(&l.held_by(69)), vec![(0, 0), (2, 30)]);
        assert_eq!(pairs(&l.held_by(i64::MAX)), pairs(&l));
        assert!(l.held_by(-1).is_empty());
    }

    #[test]
    fn a_checkpoint_loads_as_kafka_loads_it() {
        // name, checkpoint entries, lineage, dropped
        type Pairs = &'static [(i32, i64)];
        #[rustfmt::skip]
        let rows: &[(&str, Pairs, Pairs, Pairs)] = &[
            ("empty", &[], &[], &[]),
            ("valid: nothing dropped",
                &[(0, 0), (2, 30), (3, 70)], &[(0, 0), (2, 30), (3, 70)], &[]),
            ("two epochs at one offset: the later wins",
                &[(2, 6), (3, 6)], &[(3, 6)], &[(2, 6)]),
            ("an older epoch truncates the newer ones",
                &[(1, 5), (2, 6), (1, 7)], &[(1, 7)], &[(1, 5), (2, 6)]),
            ("an offset going back truncates the tail",
                &[(2, 6), (3, 8), (4, 7)], &[(2, 6), (4, 7)], &[(3, 8)]),
            ("the same epoch again keeps its first start",
                &[(2, 6), (2, 9)], &[(2, 6)], &[(2, 9)]),
            ("a duplicate is dropped once",
                &[(2, 6), (2, 6)], &[(2, 6)], &[(2, 6)]),
            ("negative entries are skipped",
                &[(-1, 0), (0, 0), (1, -4), (1, 4)], &[(0, 0), (1, 4)], &[(-1, 0), (1, -4)]),
        ];
        for &(name, input, want, want_dropped) in rows {
            let (l, dropped) =
                EpochLineage::from_checkpoint_entries(input.iter().map(|&(a, b)| e(a, b)));
            assert_eq!(pairs(&l), want.to_vec(), "{name}");
            let dropped: Vec<_> = dropped.iter().map(|d| (d.epoch, d.start_offset)).collect();
            assert_eq!(dropped, want_dropped.to_vec(), "{name}: dropped");
        }
    }

    // ---- Property tests ----------------------------------------------------

    #[derive(Debug, Clone)]
    enum Op {
        Assign(i32, i64),
        AssignIfNewer(i32, i64),
        TruncateFromEnd(i64),
        TruncateFromStart(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (-2..12i32, -2..60i64).prop_map(|(e, o)| Op::Assign(e, o)),
            1 => (-2..12i32, -2..60i64).prop_map(|(e, o)| Op::AssignIfNewer(e, o)),
            1 => (-2..60i64).prop_map(Op::TruncateFromEnd),
            1 => (-2..60i64).prop_map(Op::TruncateFromStart),
        ]
    }

    /// A log appended batch by batch: `(epoch step, records)` runs with
    /// epochs rising from 0; returns the lineage the appends build and the
    /// epoch of every record.
    fn appended(runs: &[(i32, usize)]) -> (EpochLineage, Vec<i32>) {
        let mut l = EpochLineage::new();
        let mut records = Vec::new();
        let mut epoch = -1;
        for &(step, count) in runs {
            epoch += step;
            let at = i64::try_from(records.len()).expect("small");
            l.assign(epoch, at).expect("valid assign");
            records.resize(records.len() + count, epoch);
        }
        (l, records)
    }

    proptest! {
        #[test]
        fn random_operations_keep_the_invariants(ops in proptest::collection::vec(op(), 0..40)) {
            let mut l = EpochLineage::new();
            for op in ops {
                let before = l.clone();
                let changed = match op {
                    Op::Assign(e, o) => match l.assign(e, o) {
                        Ok(changed) => changed,
                        Err(_) => {
                            prop_assert!(e < 0 || o < 0);
                            false
                        }
                    },
                    Op::AssignIfNewer(e, o) => l.assign_if_newer(e, o),
                    Op::TruncateFromEnd(o) => l.truncate_from_end(o),
                    Op::TruncateFromStart(o) => l.truncate_from_start(o),
                };
                prop_assert_eq!(changed, before != l);
                prop_assert!(EpochLineage::from_entries(l.entries().iter().copied()).is_ok(), "{:?}", l);
                let json = serde_json::to_string(&l).expect("ser");
                prop_assert_eq!(&serde_json::from_str::<EpochLineage>(&json).expect("de"), &l);
                // Total on any input.
                let _ = l.end_offset_for(l.latest_epoch().unwrap_or(0) - 1, 50);
            }
        }

        #[test]
        fn lookups_match_the_per_record_epochs(
            runs in proptest::collection::vec((1..4i32, 0..8usize), 0..7),
            leo_extra in 0..3i64,
        ) {
            let (l, records) = appended(&runs);
            let leo = i64::try_from(records.len()).expect("small");
            for (x, &epoch) in records.iter().enumerate() {
                let x = i64::try_from(x).expect("small");
                prop_assert_eq!(l.epoch_for_offset(x), Some(epoch));
            }
            prop_assert_eq!(l.epoch_for_offset(-1), None);
            let latest = l.latest_epoch();
            for asked in -1..=latest.unwrap_or(0) + 2 {
                let want = match latest {
                    _ if asked < 0 => None,
                    None => None,
                    Some(latest) if asked > latest => None,
                    Some(latest) if asked == latest => Some((asked, leo + leo_extra)),
                    Some(_) => {
                        // Epoch: the largest one at or below `asked` that the
                        // lineage knows, else `asked`. End: the first offset of
                        // an epoch above `asked`, else the LEO (an epoch above
                        // that holds no record starts at the LEO).
                        let floor = l.entries().iter().map(|e| e.epoch).filter(|&e| e <= asked).max();
                        let end = records.iter().position(|&e| e > asked)
                            .map_or(leo, |p| i64::try_from(p).expect("small"));
                        Some((floor.unwrap_or(asked), end))
                    }
                };
                prop_assert_eq!(l.end_offset_for(asked, leo + leo_extra), want, "asked {}", asked);
            }
        }

        #[test]
        fn any_checkpoint_loads_as_a_valid_lineage(
            input in proptest::collection::vec((-2..12i32, -2..60i64), 0..12),
        ) {
            let entries: Vec<EpochEntry> = input.iter().map(|&(a, b)| e(a, b)).collect();
            let (l, dropped) = EpochLineage::from_checkpoint_entries(entries.clone());
            prop_assert!(EpochLineage::from_entries(l.entries().iter().copied()).is_ok(), "{:?}", l);
            prop_assert_eq!(l.len() + dropped.len(), entries.len());
            // The same as assigning entry by entry, as Kafka's load does.
            let mut by_assign = EpochLineage::new();
            for x in &entries {
                let _ = by_assign.assign(x.epoch, x.start_offset);
            }
            prop_assert_eq!(&l, &by_assign);
            // A valid list loads unchanged, strictly or not.
            let (again, none) = EpochLineage::from_checkpoint_entries(l.entries().iter().copied());
            prop_assert_eq!(&again, &l);
            prop_assert!(none.is_empty());
        }
    }
}
