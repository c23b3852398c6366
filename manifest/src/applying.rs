//! The range being streamed into a partition's log, on disk, so that a
//! crash in the middle of it leaves nothing of it once the partition is
//! opened again, and so that readers of the log (the Kafka gateway) serve
//! nothing of it before it is whole.
//!
//! A large object is appended while it downloads (see `applier::mirror`), before
//! its size and CRC-32C can be checked at its end. Before the first of its
//! batches is written, `segmirror-applying.json` in the partition dir
//! names the range and the log end offset before it, and is made durable
//! (file and dir fsynced): whatever part of the range reaches the disk, the
//! marker is there first. Once the range is whole and verified the marker
//! is removed; on a mismatch the log is truncated back first.
//!
//! At open, a marker left behind means the applier stopped in the middle
//! of that range: the log is truncated to the offset the marker names (a
//! range boundary of the manifest), and the range is fetched again. A
//! marker that does not parse was being written when the applier stopped,
//! so no batch of its range was written yet: it is removed.
//!
//! While a marker is there, the gateway ends the partition's log at the
//! marker's `log_end_before` (see `gateway::view`).
//!
//! Kafka ignores files of other names in a partition dir.
//!
//! This module holds the marker and the pure decision of where to cut;
//! `partdir::applying` writes, reads and removes the file.

use serde::{Deserialize, Serialize};

/// The marker's file name in the partition dir.
pub const APPLYING_FILE: &str = "segmirror-applying.json";

/// A range being appended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applying {
    /// The object's key.
    pub key: String,
    /// The range's base offset.
    pub base_offset: i64,
    /// The range's last offset.
    pub last_offset: i64,
    /// The log end offset before its first batch: where an unfinished
    /// range is cut.
    pub log_end_before: i64,
}

/// Where to cut a partition's log that a marker was left in (pure): at
/// the marker's `log_end_before` when the log went past it, the applier
/// owns the log (not STOPPING or STOPPED: a stopped partition's log is its
/// writers', and its stop already decided what it holds) and the cut is
/// not below the log start; `None` when nothing is to be cut.
pub fn cut_to(
    a: &Applying,
    state: crate::state::PartitionState,
    log_start: i64,
    log_end: i64,
) -> Option<i64> {
    use crate::state::PartitionState::{Stopped, Stopping};
    let owned = !matches!(state, Stopping | Stopped);
    (owned && log_end > a.log_end_before && a.log_end_before >= log_start)
        .then_some(a.log_end_before)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::PartitionState;

    #[test]
    fn an_unfinished_range_is_cut_only_where_the_applier_owns_the_log() {
        let a = Applying {
            key: "k".into(),
            base_offset: 100,
            last_offset: 199,
            log_end_before: 100,
        };
        assert_eq!(cut_to(&a, PartitionState::Mirroring, 0, 150), Some(100));
        assert_eq!(cut_to(&a, PartitionState::Paused, 0, 150), Some(100));
        assert_eq!(cut_to(&a, PartitionState::Failed, 0, 150), Some(100));
        assert_eq!(cut_to(&a, PartitionState::Preparing, 0, 150), Some(100));
        assert_eq!(
            cut_to(&a, PartitionState::Mirroring, 0, 100),
            None,
            "nothing written"
        );
        assert_eq!(cut_to(&a, PartitionState::Stopping, 0, 150), None);
        assert_eq!(cut_to(&a, PartitionState::Stopped, 0, 150), None);
        assert_eq!(
            cut_to(&a, PartitionState::Mirroring, 120, 150),
            None,
            "below the log start"
        );
    }
}
