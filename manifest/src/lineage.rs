//! The epoch lineage of a partition, and the truncation decisions taken
//! from it.
//!
//! An [`EpochLineage`] is the list of `(leader epoch, start offset)` pairs of
//! a partition, oldest first, as in Kafka's `leader-epoch-checkpoint`; the
//! entry type is [`kafkalog::checkpoint::EpochEntry`]. Its methods follow
//! Kafka's `LeaderEpochFileCache` (`assign`, `endOffsetFor`,
//! `truncateFromEnd`, `truncateFromStart`, `epochForOffset`) as a pure
//! value: no IO, no locks, no flushing.
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
//! A lineage does not know its log's end offset (LEO): functions that need it
//! take it as an argument. Entry `i` covers the offsets from its start up to
//! the start of entry `i + 1` (the last entry: up to the LEO). The latest
//! entry may start exactly at the LEO (an epoch with no records yet), as in
//! Kafka.
//!
//! # Decisions
//!
//! - [`divergence_point`]: where a log must be cut so that it is a prefix of
//!   another (Kafka's follower truncation through `OffsetsForLeaderEpoch`).
//!   The applier uses it against a manifest's lineage (source divergence),
//!   and as the second step of failback.
//! - [`truncation_point_for_lme`]: the first step of failback, the table of
//!   `spec/mirroring.md` ("Failback: start again after a stop").
//!
//! Both are total: no input makes them panic, and the offset they return is
//! never negative and never above the local LEO.

use kafkalog::checkpoint::EpochEntry;

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
    ///
    /// To reuse a [`kafkalog::epoch::EpochCache`], pass
    /// `cache.entries().iter().copied()`.
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
        if let Some(latest) = self.latest()
            && latest.epoch == epoch
            && start_offset >= latest.start_offset
        {
            return Ok(false);
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
        Ok(true)
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
    /// describe no record of a log that ends there.
    fn held_by(&self, log_end: i64) -> EpochLineage {
        let keep = self.entries.partition_point(|e| e.start_offset <= log_end);
        EpochLineage {
            entries: self.entries.get(..keep).unwrap_or_default().to_vec(),
        }
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

/// Where the local log must be cut so that what stays is a prefix of the
/// remote log: the follower truncation of Kafka (KIP-101/KIP-279), with the
/// remote (a manifest's lineage, or the new primary's) in the role of the
/// leader.
///
/// # Algorithm
///
/// 1. The local side asks for its latest epoch `E`. The remote answers with
///    its `end_offset_for(E, remote_leo)`, `(E', remote_end)`. One addition
///    to Kafka: a remote whose every epoch is below `E` answers for its own
///    latest epoch, `(latest, remote_leo)` (a live Kafka leader never sees a
///    follower epoch above its own; a manifest of another cluster can).
/// 2. The local side looks up `end_offset_for(E', local_leo)`,
///    `(E'', local_end)`. If `E'' == E'` both logs know `E'` and the result
///    is `min(local_end, remote_end, local_leo)`.
/// 3. Otherwise the local log does not know `E'`: it is cut to `local_end`
///    (the end of its highest epoch below `E'`) and the exchange starts
///    again at 1 with the shorter log. Each round removes at least one local
///    entry, so this ends.
///
/// A local log that the remote fully contains gets `local_leo` back: nothing
/// to cut. An empty lineage on either side (epochs of the records unknown)
/// gives 0. A negative LEO counts as 0; entries that start after their LEO
/// are ignored.
///
/// # What the result is
///
/// Under Kafka's premise that one epoch has one writer (two logs that both
/// hold records of epoch `e` agree on everything up to the end of `e` in the
/// shorter one), and for two logs that start at the same offset, the result
/// is the largest offset `O <= min(local_leo, remote_leo)` such that both
/// logs have the same epoch at every offset below `O`: the divergence point.
/// The property tests check exactly that against a per-offset model.
///
/// When the log starts differ (retention), this is still Kafka's answer: an
/// epoch below the remote's oldest ends at the remote's oldest start, and
/// what is kept never disagrees with the remote where both hold records.
///
/// Epochs of two clusters are numbered independently, so that premise fails
/// across a failover: failback first cuts everything above the LME with
/// [`truncation_point_for_lme`] and only then calls this.
pub fn divergence_point(
    local: &EpochLineage,
    local_leo: i64,
    remote: &EpochLineage,
    remote_leo: i64,
) -> i64 {
    let mut leo = local_leo.max(0);
    let remote_leo = remote_leo.max(0);
    let mut local = local.held_by(leo);
    let remote = remote.held_by(remote_leo);
    let Some(remote_latest) = remote.latest_epoch() else {
        return 0;
    };
    loop {
        let Some(requested) = local.latest_epoch() else {
            return 0;
        };
        let Some((epoch, remote_end)) =
            remote.end_offset_for(requested.min(remote_latest), remote_leo)
        else {
            // Unreachable: the epoch asked for is >= 0 and <= the remote's latest.
            return 0;
        };
        match local.end_offset_for(epoch, leo) {
            Some((local_epoch, local_end)) if local_epoch == epoch => {
                return local_end.min(remote_end).min(leo).max(0);
            }
            Some((_, local_end)) => {
                let before = local.len();
                leo = leo.min(local_end).max(0);
                local.truncate_from_end(leo);
                if local.len() >= before {
                    // Unreachable (see step 3); never loop without progress.
                    return leo;
                }
            }
            // Unreachable: `epoch` <= the local latest epoch. Kafka's answer
            // for a follower that tracks no epoch there.
            None => return remote_end.min(leo).max(0),
        }
    }
}

/// The failback truncation point `T` for the LME (last mirrored epoch) of the
/// new primary, from the local lineage: the table of `spec/mirroring.md`,
/// "Failback: start again after a stop":
///
/// | LME against the local lineage | T |
/// | --- | --- |
/// | unknown (`None`, or negative: Kafka's `UNDEFINED_EPOCH`), or above every local epoch, or no local epoch at all | 0 (wipe and copy everything) |
/// | equal to the latest local epoch | `local_leo` (nothing cut) |
/// | between two local epochs | start offset of the first local epoch above the LME |
/// | below the oldest local epoch | start offset of the oldest epoch |
///
/// An LME *equal to a local epoch that is not the latest* falls in the
/// "between" row: the local records of that epoch are shared history, so `T`
/// is the start offset of the first local epoch above it (the end of the
/// LME's epoch). Example: local `{3@0, 5@40, 7@100}`, LEO 130, LME 5 gives
/// `T = 100`.
///
/// Records of the LME's epoch that the local log wrote after the new primary
/// stopped (the local side kept writing at that epoch) are not cut here:
/// [`divergence_point`] against the new primary's lineage cuts them next.
///
/// Entries that start after `local_leo` are ignored (they hold no record); a
/// negative `local_leo` counts as 0; the result is in `0..=local_leo`.
pub fn truncation_point_for_lme(lme: Option<i32>, local: &EpochLineage, local_leo: i64) -> i64 {
    let leo = local_leo.max(0);
    let Some(lme) = lme.filter(|&e| e >= 0) else {
        return 0;
    };
    let held = local.held_by(leo);
    let Some(latest) = held.latest_epoch() else {
        return 0;
    };
    if lme > latest {
        return 0;
    }
    if lme == latest {
        return leo;
    }
    let above = held.entries.partition_point(|e| e.epoch <= lme);
    held.entries
        .get(above)
        .map_or(0, |e| e.start_offset.clamp(0, leo))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UNDEFINED_EPOCH: i32 = -1;
    const UNDEFINED_EPOCH_OFFSET: i64 = -1;

    fn lineage(pairs: &[(i32, i64)]) -> EpochLineage {
        EpochLineage::from_entries(pairs.iter().map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        }))
        .expect("valid lineage")
    }

    fn pairs(l: &EpochLineage) -> Vec<(i32, i64)> {
        l.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    /// The epoch of every offset below `leo` (`None` below the oldest entry).
    fn per_offset(l: &EpochLineage, leo: i64) -> Vec<Option<i32>> {
        (0..leo).map(|o| l.epoch_for_offset(o)).collect()
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

    #[test]
    fn reuses_a_kafkalog_epoch_cache() {
        let cache = kafkalog::epoch::EpochCache::from_entries(vec![
            EpochEntry {
                epoch: 0,
                start_offset: 0,
            },
            EpochEntry {
                epoch: 2,
                start_offset: 30,
            },
        ]);
        let l = EpochLineage::from_entries(cache.entries().iter().copied()).expect("valid");
        assert_eq!(pairs(&l), vec![(0, 0), (2, 30)]);
    }

    // ---- The spec's LME table ---------------------------------------------

    #[test]
    fn lme_table_every_row() {
        // A: {3@0, 5@40, 7@100}, LEO 130 (the spec's worked example).
        let a = lineage(&[(3, 0), (5, 40), (7, 100)]);
        let rows: &[(&str, Option<i32>, i64)] = &[
            ("unknown", None, 0),
            ("unknown: UNDEFINED_EPOCH", Some(UNDEFINED_EPOCH), 0),
            ("above every local epoch", Some(8), 0),
            ("far above every local epoch", Some(i32::MAX), 0),
            ("equal to the latest epoch", Some(7), 130),
            ("between 5 and 7", Some(6), 100),
            ("equal to non-latest 5: the between row", Some(5), 100),
            ("between 3 and 5", Some(4), 40),
            (
                "equal to non-latest 3 (the oldest): the between row",
                Some(3),
                40,
            ),
        ];
        for &(row, lme, want) in rows {
            assert_eq!(truncation_point_for_lme(lme, &a, 130), want, "{row}");
        }
        // Below the oldest local epoch: the start of the oldest (log start 10).
        let trimmed = lineage(&[(3, 10), (5, 40), (7, 100)]);
        assert_eq!(truncation_point_for_lme(Some(2), &trimmed, 130), 10);
        assert_eq!(truncation_point_for_lme(Some(0), &trimmed, 130), 10);
        // No local epoch at all.
        assert_eq!(
            truncation_point_for_lme(Some(5), &EpochLineage::new(), 0),
            0
        );
        assert_eq!(
            truncation_point_for_lme(Some(5), &EpochLineage::new(), 50),
            0
        );
        // The latest entry holds no record yet (it starts at the LEO): still
        // "equal to the latest".
        let fresh = lineage(&[(3, 0), (5, 40), (7, 130)]);
        assert_eq!(truncation_point_for_lme(Some(7), &fresh, 130), 130);
        assert_eq!(truncation_point_for_lme(Some(5), &fresh, 130), 130);
        // Entries past the LEO hold no record and are ignored.
        let odd = lineage(&[(3, 0), (5, 40), (7, 200)]);
        assert_eq!(truncation_point_for_lme(Some(5), &odd, 130), 130);
        assert_eq!(truncation_point_for_lme(Some(7), &odd, 130), 0);
        // A negative LEO counts as 0.
        assert_eq!(truncation_point_for_lme(Some(7), &a, -5), 0);
    }

    #[test]
    fn worked_example_failback_then_identical() {
        // A: {3@0, 5@40, 7@100}, LEO 130. B stopped at 100 with LME 5 and
        // wrote at epochs >= 6 since.
        let mut a = lineage(&[(3, 0), (5, 40), (7, 100)]);
        let b = lineage(&[(3, 0), (5, 40), (6, 100), (8, 150)]);
        let (a_leo, b_leo) = (130, 180);
        let t = truncation_point_for_lme(Some(5), &a, a_leo);
        assert_eq!(t, 100);
        a.truncate_from_end(t);
        let d = divergence_point(&a, t, &b, b_leo);
        assert_eq!(d, 100, "the follower step cuts nothing more");
        // A copies B's records from D on (assigning their epochs).
        for entry in b.entries().iter().filter(|e| e.start_offset >= d) {
            a.assign(entry.epoch, entry.start_offset).expect("assign");
        }
        assert_eq!(a, b);
        assert_eq!(per_offset(&a, b_leo), per_offset(&b, b_leo));
    }

    #[test]
    fn behaviour_5_failback_with_a_ahead_at_a_newer_epoch() {
        let mut a = lineage(&[(3, 0), (5, 40), (7, 100)]);
        let b = lineage(&[(3, 0), (5, 40), (6, 100)]);
        let t = truncation_point_for_lme(Some(5), &a, 130);
        assert_eq!(t, 100, "cut to the end of the LME");
        a.truncate_from_end(t);
        assert_eq!(divergence_point(&a, t, &b, 150), 100);
    }

    #[test]
    fn behaviour_5_failback_where_a_kept_writing_at_the_lme_epoch() {
        // A went on writing at epoch 5 up to 130 after B stopped at 100.
        let a = lineage(&[(3, 0), (5, 40)]);
        let b = lineage(&[(3, 0), (5, 40), (6, 100)]);
        let t = truncation_point_for_lme(Some(5), &a, 130);
        assert_eq!(t, 130, "the LME step cuts nothing");
        assert_eq!(
            divergence_point(&a, t, &b, 150),
            100,
            "the follower step cuts to B's end offset for epoch 5"
        );
        assert_eq!(b.end_offset_for(5, 150), Some((5, 100)));
    }

    #[test]
    fn behaviour_6_unknown_lme_cuts_everything() {
        let a = lineage(&[(3, 0), (5, 40), (7, 100)]);
        assert_eq!(truncation_point_for_lme(None, &a, 130), 0);
    }

    #[test]
    fn behaviour_8_source_unclean_truncation() {
        // The destination holds 0..100 at {0@0, 2@30, 3@70}; the source lost
        // 90..100 in an unclean election and wrote at epoch 4 from 90.
        let dest = lineage(&[(0, 0), (2, 30), (3, 70)]);
        let source = lineage(&[(0, 0), (2, 30), (3, 70), (4, 90)]);
        assert_eq!(divergence_point(&dest, 100, &source, 120), 90);
    }

    #[test]
    fn divergence_point_cases() {
        let l = |p: &[(i32, i64)]| lineage(p);
        type Log = &'static [(i32, i64)];
        // name, local lineage, local LEO, remote lineage, remote LEO, result
        #[rustfmt::skip]
        let rows: &[(&str, Log, i64, Log, i64, i64)] = &[
            ("identical",
                &[(0, 0), (2, 30)], 50, &[(0, 0), (2, 30)], 50, 50),
            ("local behind: nothing to cut",
                &[(0, 0), (2, 30)], 40, &[(0, 0), (2, 30), (5, 60)], 90, 40),
            ("local a prefix in an older epoch",
                &[(0, 0)], 20, &[(0, 0), (2, 30)], 50, 20),
            ("remote behind in the same epoch",
                &[(0, 0), (2, 30)], 50, &[(0, 0), (2, 30)], 35, 35),
            ("local latest epoch unknown to the remote",
                &[(0, 0), (3, 30)], 50, &[(0, 0), (2, 30)], 50, 30),
            ("local above every remote epoch",
                &[(0, 0), (7, 50)], 80, &[(0, 0), (6, 60)], 90, 50),
            ("remote epoch unknown locally: two rounds",
                &[(0, 0), (2, 10), (4, 20)], 40, &[(0, 0), (3, 15), (5, 25)], 40, 10),
            ("nothing shared",
                &[(1, 0)], 10, &[(2, 0)], 10, 0),
            ("empty local log",
                &[], 0, &[(0, 0)], 10, 0),
            ("empty remote log",
                &[(0, 0)], 10, &[], 0, 0),
            ("local epochs unknown",
                &[], 10, &[(0, 0)], 10, 0),
            ("local latest epoch holds no record",
                &[(0, 0), (2, 50)], 50, &[(0, 0), (1, 50)], 80, 50),
            ("remote latest epoch holds no record",
                &[(0, 0)], 80, &[(0, 0), (1, 50)], 50, 50),
            ("entries past the LEO are ignored",
                &[(0, 0), (9, 90)], 50, &[(0, 0)], 80, 50),
            ("negative LEOs count as 0",
                &[(0, 0)], -3, &[(0, 0)], 10, 0),
            // Retention: a log start moved, on one side or the other.
            ("remote trimmed past the local log",
                &[(3, 0), (5, 40)], 100, &[(7, 220)], 300, 100),
            ("remote trimmed inside the shared epoch",
                &[(3, 0), (5, 40)], 100, &[(5, 60), (7, 80)], 300, 80),
            ("local trimmed, remote not",
                &[(5, 60), (7, 80)], 100, &[(3, 0), (5, 40), (6, 90)], 300, 80),
        ];
        for &(name, local, local_leo, remote, remote_leo, want) in rows {
            assert_eq!(
                divergence_point(&l(local), local_leo, &l(remote), remote_leo),
                want,
                "{name}"
            );
        }
    }

    // ---- Property tests against per-offset models ----------------------

    /// A log as segments `(epoch, record count)`, epochs increasing.
    type Segments = Vec<(i32, i64)>;

    /// The lineage (built by `assign`, as a log appends) and the epoch of
    /// every record.
    fn build(segments: &[(i32, i64)]) -> (EpochLineage, Vec<i32>) {
        let mut lineage = EpochLineage::new();
        let mut epochs = Vec::new();
        for &(epoch, count) in segments {
            let at = i64::try_from(epochs.len()).expect("small");
            lineage.assign(epoch, at).expect("valid assign");
            epochs.extend(std::iter::repeat_n(
                epoch,
                usize::try_from(count).expect("small"),
            ));
        }
        (lineage, epochs)
    }

    fn leo(epochs: &[i32]) -> i64 {
        i64::try_from(epochs.len()).expect("small")
    }

    /// Appends a segment, merging it into the last one of the same epoch.
    fn push(segments: &mut Segments, epoch: i32, count: i64) {
        match segments.last_mut() {
            Some(last) if last.0 == epoch => last.1 += count,
            _ => segments.push((epoch, count)),
        }
    }

    /// Increasing epochs from steps: `first + sum(steps[..=i]) * stride + shift`.
    fn epochs_from(base: i32, stride: i32, shift: i32, steps: &[(i32, i64)]) -> Segments {
        let mut out = Vec::new();
        let mut acc = 0;
        for &(step, count) in steps {
            acc += step;
            out.push((base + acc * stride + shift, count));
        }
        out
    }

    /// The brute-force divergence point: the first offset where the records'
    /// epochs differ, capped at the shorter log.
    fn model_divergence(a: &[i32], b: &[i32]) -> i64 {
        let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        i64::try_from(common).expect("small")
    }

    /// Two logs under Kafka's premise (one writer per epoch): a shared
    /// history; then each side may go on in the last shared epoch (one of the
    /// two extensions is a prefix of the other), then writes new epochs,
    /// disjoint between the sides (local even, remote odd).
    fn two_logs() -> impl Strategy<Value = (Segments, Segments)> {
        let seg = (1..4i32, 0..6i64);
        (
            proptest::collection::vec(seg.clone(), 0..5),
            0..6i64,
            0..6i64,
            proptest::collection::vec(seg.clone(), 0..4),
            proptest::collection::vec(seg, 0..4),
        )
            .prop_map(|(shared, ext_local, ext_remote, local_new, remote_new)| {
                let shared = epochs_from(-1, 1, 0, &shared);
                let base = shared.last().map_or(-1, |s| s.0);
                let mut local = shared.clone();
                let mut remote = shared;
                if let Some(&(last, _)) = local.last() {
                    push(&mut local, last, ext_local);
                    push(&mut remote, last, ext_remote);
                }
                for (e, n) in epochs_from(base, 2, 0, &local_new) {
                    push(&mut local, e, n);
                }
                for (e, n) in epochs_from(base, 2, -1, &remote_new) {
                    push(&mut remote, e, n);
                }
                (local, remote)
            })
    }

    /// Any one log: increasing epochs from 0, some segments possibly empty.
    fn one_log() -> impl Strategy<Value = Segments> {
        proptest::collection::vec((1..4i32, 0..8i64), 0..7)
            .prop_map(|steps| epochs_from(-1, 1, 0, &steps))
    }

    #[derive(Debug, Clone)]
    enum Op {
        Assign(i32, i64),
        TruncateFromEnd(i64),
        TruncateFromStart(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (-2..12i32, -2..60i64).prop_map(|(e, o)| Op::Assign(e, o)),
            1 => (-2..60i64).prop_map(Op::TruncateFromEnd),
            1 => (-2..60i64).prop_map(Op::TruncateFromStart),
        ]
    }

    proptest! {
        #[test]
        fn divergence_point_matches_the_per_offset_model((local, remote) in two_logs()) {
            let (l, a) = build(&local);
            let (r, b) = build(&remote);
            let want = model_divergence(&a, &b);
            prop_assert_eq!(divergence_point(&l, leo(&a), &r, leo(&b)), want);
            // Symmetric: the same point from the other side.
            prop_assert_eq!(divergence_point(&r, leo(&b), &l, leo(&a)), want);
        }

        #[test]
        fn divergence_point_with_trimmed_log_starts(
            (local, remote) in two_logs(),
            local_start in 0..=100i64,
            remote_start in 0..=100i64,
        ) {
            let (mut l, a) = build(&local);
            let (mut r, b) = build(&remote);
            let full = model_divergence(&a, &b);
            let (sl, sr) = (local_start * leo(&a) / 100, remote_start * leo(&b) / 100);
            l.truncate_from_start(sl);
            r.truncate_from_start(sr);
            let d = divergence_point(&l, leo(&a), &r, leo(&b));
            prop_assert!((0..=leo(&a).min(leo(&b))).contains(&d));
            // Never keeps a record that disagrees with the remote where both
            // hold records.
            for x in sl.max(sr)..d {
                let x = usize::try_from(x).expect("small");
                prop_assert_eq!(a[x], b[x], "offset {} kept but divergent", x);
            }
            // While both logs still hold some shared history, retention
            // changes nothing.
            if sl.max(sr) < full {
                prop_assert_eq!(d, full);
            }
        }

        #[test]
        fn lme_truncation_matches_the_per_offset_model(
            segments in one_log(),
            lme in proptest::option::of(-2..20i32),
        ) {
            let (l, a) = build(&segments);
            let leo = leo(&a);
            // Model: wipe unless the LME is a known epoch at or below the
            // latest; else cut at the first record whose epoch is above it.
            let want = match (lme, l.latest_epoch()) {
                (Some(lme), Some(latest)) if lme >= 0 && lme <= latest => a
                    .iter()
                    .position(|&e| e > lme)
                    .map_or(leo, |p| i64::try_from(p).expect("small")),
                _ => 0,
            };
            prop_assert_eq!(truncation_point_for_lme(lme, &l, leo), want);
        }

        #[test]
        fn failback_leaves_a_prefix_of_the_new_primary(
            shared in proptest::collection::vec((1..4i32, 1..6i64), 1..5),
            a_ext in 0..6i64,
            a_new in proptest::collection::vec((1..4i32, 0..6i64), 0..4),
            b_new in proptest::collection::vec((1..4i32, 0..6i64), 0..4),
        ) {
            // B mirrored A up to `stop`, then stopped with LME = the last
            // shared epoch and wrote at epochs > LME. A went on at the LME's
            // epoch and at epochs > LME numbered independently (they may clash
            // with B's).
            let shared = epochs_from(-1, 1, 0, &shared);
            let lme = shared.last().map_or(0, |s| s.0);
            let stop: i64 = shared.iter().map(|s| s.1).sum();
            let mut a_segs = shared.clone();
            push(&mut a_segs, lme, a_ext);
            a_segs.extend(epochs_from(lme, 1, 0, &a_new));
            let mut b_segs = shared;
            b_segs.extend(epochs_from(lme, 1, 0, &b_new));
            let (mut a_lineage, a) = build(&a_segs);
            let (b_lineage, b) = build(&b_segs);

            let t = truncation_point_for_lme(Some(lme), &a_lineage, leo(&a));
            prop_assert!((stop..=leo(&a)).contains(&t));
            a_lineage.truncate_from_end(t);
            let d = divergence_point(&a_lineage, t, &b_lineage, leo(&b));
            prop_assert_eq!(d, stop);
            let kept = usize::try_from(d).expect("small");
            prop_assert_eq!(&a[..kept], &b[..kept]);
        }

        #[test]
        fn lookups_match_the_per_offset_model(segments in one_log(), leo_extra in 0..3i64) {
            let (l, a) = build(&segments);
            let leo = leo(&a);
            for (x, &e) in a.iter().enumerate() {
                let x = i64::try_from(x).expect("small");
                prop_assert_eq!(l.epoch_for_offset(x), Some(e));
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
                        let end = a.iter().position(|&e| e > asked)
                            .map_or(leo, |p| i64::try_from(p).expect("small"));
                        Some((floor.unwrap_or(asked), end))
                    }
                };
                prop_assert_eq!(l.end_offset_for(asked, leo + leo_extra), want, "asked {}", asked);
            }
        }

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
                    Op::TruncateFromEnd(o) => l.truncate_from_end(o),
                    Op::TruncateFromStart(o) => l.truncate_from_start(o),
                };
                prop_assert_eq!(changed, before != l);
                prop_assert!(EpochLineage::from_entries(l.entries().iter().copied()).is_ok(), "{:?}", l);
                let json = serde_json::to_string(&l).expect("ser");
                prop_assert_eq!(&serde_json::from_str::<EpochLineage>(&json).expect("de"), &l);
                // Total on any input.
                let _ = l.end_offset_for(l.latest_epoch().unwrap_or(0) - 1, 50);
                let _ = truncation_point_for_lme(l.latest_epoch(), &l, 50);
                let _ = divergence_point(&l, 50, &before, 40);
            }
        }
    }
}
