//! The leader epoch cache of one partition: Kafka's `LeaderEpochFileCache`
//! as a pure value.
//!
//! Entries are `(epoch, start_offset)` pairs; the invariants, kept by every
//! method, are: epochs strictly increasing, start offsets strictly
//! increasing. The file form is [`crate::checkpoint`]'s
//! `leader-epoch-checkpoint`; this module does no IO.

use crate::checkpoint::EpochEntry;

/// Sorted `(epoch, start_offset)` entries of a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: Vec<EpochEntry>,
}

impl EpochCache {
    /// Builds a cache from entries read from a checkpoint, dropping entries
    /// that break the invariants (as Kafka does on load).
    pub fn from_entries(entries: Vec<EpochEntry>) -> EpochCache {
        let mut cache = EpochCache::default();
        for e in entries {
            cache.assign(e.epoch, e.start_offset);
        }
        cache
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The latest entry.
    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// The latest epoch.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`, as Kafka's `assign`:
    /// ignored when either is negative, or when the latest entry already has
    /// this epoch at or below this offset; otherwise every conflicting entry
    /// (an epoch at or above `epoch`, or a start at or after `start_offset`)
    /// is removed and the new one appended. Returns true when the cache
    /// changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        if let Some(latest) = self.latest()
            && latest.epoch == epoch
            && latest.start_offset <= start_offset
        {
            return false;
        }
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Assigns `epoch` at `start_offset` only when it is newer than the
    /// latest epoch (or the cache is empty), as Kafka does for each batch
    /// it appends or recovers. Returns true when the cache changed.
    pub fn assign_if_newer(&mut self, epoch: i32, start_offset: i64) -> bool {
        if self.latest_epoch().is_some_and(|latest| epoch <= latest) {
            return false;
        }
        self.assign(epoch, start_offset)
    }

    /// The epoch in force at `offset`: the entry with the largest start
    /// offset <= `offset`.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.start_offset <= offset)
            .map(|e| e.epoch)
    }

    /// Kafka's `endOffsetFor(epoch, logEndOffset)`: the start offset of the
    /// first epoch above `epoch`, or `log_end` when `epoch` is the latest.
    /// Returns `(epoch, end_offset)` where `epoch` is the largest known epoch
    /// <= the one asked for (the asked epoch itself when it is below every
    /// entry); `None` (Kafka's UNDEFINED) when the cache is empty or the
    /// asked epoch is above every entry.
    pub fn end_offset_for(&self, epoch: i32, log_end: i64) -> Option<(i32, i64)> {
        let latest = self.latest()?;
        if epoch == latest.epoch {
            return Some((epoch, log_end));
        }
        let higher = self.entries.iter().position(|e| e.epoch > epoch)?;
        match higher.checked_sub(1).map(|i| self.entries[i]) {
            None => Some((epoch, self.entries[higher].start_offset)),
            Some(floor) => Some((floor.epoch, self.entries[higher].start_offset)),
        }
    }

    /// Removes entries that start at or after `end_offset` (log truncated to
    /// `end_offset`). Returns true when the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        if end_offset < 0 {
            return false;
        }
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        before != self.entries.len()
    }

    /// Log start moved to `start_offset`: entries wholly below it are removed
    /// and the one in force there is moved to start at it, as Kafka's
    /// `truncateFromStart`. Returns true when the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let Some(keep_from) = self
            .entries
            .iter()
            .rposition(|e| e.start_offset <= start_offset)
        else {
            return false;
        };
        let changed = keep_from > 0 || self.entries[keep_from].start_offset != start_offset;
        self.entries.drain(..keep_from);
        if let Some(first) = self.entries.first_mut() {
            first.start_offset = start_offset;
        }
        changed
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(pairs: &[(i32, i64)]) -> EpochCache {
        let mut c = EpochCache::default();
        for &(e, o) in pairs {
            c.assign(e, o);
        }
        c
    }
    fn pairs(c: &EpochCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn assign_keeps_invariants() {
        let mut c = cache(&[(0, 0), (2, 30), (3, 70)]);
        assert_eq!(pairs(&c), vec![(0, 0), (2, 30), (3, 70)]);
        assert!(!c.assign(3, 80), "same epoch later offset is a no-op");
        assert!(
            !c.assign_if_newer(1, 90),
            "older epoch is ignored per batch"
        );
        assert!(
            c.assign(4, 50),
            "newer epoch at a lower offset replaces the tail"
        );
        assert_eq!(pairs(&c), vec![(0, 0), (2, 30), (4, 50)]);
        // Kafka's shouldEnforceMonotonicallyIncreasingEpochs.
        let mut k = cache(&[(1, 5), (2, 6)]);
        assert!(k.assign(1, 7));
        assert_eq!(pairs(&k), vec![(1, 7)]);
        assert!(
            !k.truncate_from_end(-1),
            "undefined offset leaves the cache alone"
        );
    }

    #[test]
    fn end_offset_for_follows_kafka() {
        // Kafka LeaderEpochFileCacheTest shapes.
        let c = cache(&[(0, 0), (2, 30), (3, 70)]);
        assert_eq!(
            c.end_offset_for(3, 100),
            Some((3, 100)),
            "latest epoch -> LEO"
        );
        assert_eq!(c.end_offset_for(2, 100), Some((2, 70)));
        assert_eq!(
            c.end_offset_for(1, 100),
            Some((0, 30)),
            "unknown epoch -> floor epoch's end"
        );
        assert_eq!(
            c.end_offset_for(5, 100),
            None,
            "above every epoch -> undefined"
        );
        assert_eq!(
            cache(&[(2, 10)]).end_offset_for(1, 100),
            Some((1, 10)),
            "below oldest -> its start"
        );
        assert_eq!(EpochCache::default().end_offset_for(0, 5), None);
    }

    #[test]
    fn truncations() {
        let mut c = cache(&[(0, 0), (2, 30), (3, 70)]);
        c.truncate_from_end(70);
        assert_eq!(pairs(&c), vec![(0, 0), (2, 30)]);
        c.truncate_from_start(40);
        assert_eq!(pairs(&c), vec![(2, 40)]);
        assert_eq!(c.epoch_for_offset(39), None);
        assert_eq!(c.epoch_for_offset(45), Some(2));
    }
}
