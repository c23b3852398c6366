//! read_committed, decided batch by batch: which records a Kafka consumer
//! with `isolation.level=read_committed` would see.
//!
//! Rules (Kafka's `ProducerStateManager` and fetch path):
//! - Control batches (attribute bit 5: transaction markers, KRaft
//!   records) are never records: they are dropped at every isolation
//!   level, as consumers never see them.
//! - A transactional data batch (attribute bit 4) belongs to the
//!   transaction its producer id has open; it is aborted iff the next
//!   marker of that producer id after it is ABORT, committed iff COMMIT.
//! - A transaction with no marker yet is open: its batches are undecided.
//!   The last stable offset (LSO) is the first offset of the oldest open
//!   transaction (or the end when none is open): every batch below it is
//!   decided, and a read_committed export ends there. The shipper ships up
//!   to the source's high watermark, not its LSO, so the shipped tail can
//!   hold open transactions: they are left for a later export, never
//!   guessed.
//! - With `read_uncommitted` every data batch is kept, aborted or not.
//!
//! The tracker must observe every batch from the first one exported on,
//! in offset order ([`TxnTracker::observe`]); it may then be asked about
//! any batch it observed ([`TxnTracker::decide`]). It does no IO and never
//! panics; its memory is one entry per open transaction and per aborted
//! transaction observed.

use std::collections::BTreeMap;

use kafkalog::batch::BatchHeader;
use kafkalog::records::ControlType;

/// The consumer isolation level an export applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Only committed records (Kafka's `read_committed`).
    #[default]
    ReadCommitted,
    /// Every data record, aborted ones included (`read_uncommitted`).
    ReadUncommitted,
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        })
    }
}

/// What the tracker needs of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFacts {
    /// First offset.
    pub base_offset: i64,
    /// Producer id (-1: none).
    pub producer_id: i64,
    /// Attribute bit 4.
    pub transactional: bool,
    /// Attribute bit 5.
    pub control: bool,
    /// The marker a control batch holds (`None` for data batches and
    /// control batches without a record).
    pub marker: Option<ControlType>,
}

impl BatchFacts {
    /// The facts of a batch header; `marker` is the decoded control record
    /// of a control batch.
    pub fn of(h: &BatchHeader, marker: Option<ControlType>) -> BatchFacts {
        BatchFacts {
            base_offset: h.base_offset,
            producer_id: h.producer_id,
            transactional: h.is_transactional(),
            control: h.is_control(),
            marker,
        }
    }

    fn is_transactional_data(&self) -> bool {
        self.transactional && !self.control && self.producer_id >= 0
    }
}

/// The fate of a batch's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Exported.
    Keep,
    /// A control batch: never a record.
    DropControl,
    /// Its transaction was aborted (read_committed only).
    DropAborted,
    /// Its transaction has no marker yet: at or above the LSO.
    Undecided,
}

/// An open transaction: its producer and first offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTxn {
    /// The producer id.
    pub producer_id: i64,
    /// Offset of its first batch observed.
    pub first_offset: i64,
}

/// Transactions observed so far (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct TxnTracker {
    /// Open transactions by producer id: first offset.
    open: BTreeMap<i64, i64>,
    /// Aborted transactions by producer id: `(first offset, marker offset)`,
    /// in offset order.
    aborted: BTreeMap<i64, Vec<(i64, i64)>>,
    /// The offset after the last batch observed.
    observed_end: i64,
}

impl TxnTracker {
    /// A tracker that has observed nothing.
    pub fn new() -> TxnTracker {
        TxnTracker::default()
    }

    /// Observes the next batch (offset order); `last_offset` is its last
    /// offset.
    pub fn observe(&mut self, b: &BatchFacts, last_offset: i64) {
        self.observed_end = self.observed_end.max(last_offset.saturating_add(1));
        if b.is_transactional_data() {
            self.open.entry(b.producer_id).or_insert(b.base_offset);
            return;
        }
        if !(b.control && b.transactional && b.producer_id >= 0) {
            return;
        }
        // A marker ends the producer's transaction, whatever its type.
        let first = self.open.remove(&b.producer_id);
        if b.marker == Some(ControlType::Abort)
            && let Some(first) = first
        {
            self.aborted
                .entry(b.producer_id)
                .or_default()
                .push((first, b.base_offset));
        }
    }

    /// The offset after the last batch observed.
    pub fn observed_end(&self) -> i64 {
        self.observed_end
    }

    /// The transactions still open, oldest first.
    pub fn open_transactions(&self) -> Vec<OpenTxn> {
        let mut v: Vec<OpenTxn> = self
            .open
            .iter()
            .map(|(&producer_id, &first_offset)| OpenTxn {
                producer_id,
                first_offset,
            })
            .collect();
        v.sort_by_key(|t| (t.first_offset, t.producer_id));
        v
    }

    /// The last stable offset: the first offset of the oldest open
    /// transaction, or `end` when none is open (or it starts at or after
    /// `end`).
    pub fn last_stable_offset(&self, end: i64) -> i64 {
        self.open
            .values()
            .copied()
            .min()
            .map_or(end, |o| o.min(end))
    }

    /// The fate of an observed batch's records under `isolation`.
    pub fn decide(&self, b: &BatchFacts, isolation: Isolation) -> Decision {
        if b.control {
            return Decision::DropControl;
        }
        if isolation == Isolation::ReadUncommitted || !b.is_transactional_data() {
            return Decision::Keep;
        }
        let aborted = self.aborted.get(&b.producer_id).is_some_and(|txns| {
            // The last aborted transaction starting at or before the batch.
            let i = txns.partition_point(|&(first, _)| first <= b.base_offset);
            i > 0 && txns[i - 1].1 > b.base_offset
        });
        if aborted {
            return Decision::DropAborted;
        }
        if self
            .open
            .get(&b.producer_id)
            .is_some_and(|&first| first <= b.base_offset)
        {
            return Decision::Undecided;
        }
        Decision::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(offset: i64, pid: i64) -> BatchFacts {
        BatchFacts {
            base_offset: offset,
            producer_id: pid,
            transactional: pid >= 0,
            control: false,
            marker: None,
        }
    }

    fn marker(offset: i64, pid: i64, kind: ControlType) -> BatchFacts {
        BatchFacts {
            base_offset: offset,
            producer_id: pid,
            transactional: true,
            control: true,
            marker: Some(kind),
        }
    }

    /// The log of the export test: plain records, a committed transaction
    /// of producer 7 interleaved with an aborted one of producer 8, then
    /// producer 7 again (aborted), then a transaction of 9 left open.
    fn log() -> Vec<BatchFacts> {
        use ControlType::{Abort, Commit};
        vec![
            data(0, -1),
            data(1, 7),
            data(2, 8),
            data(3, 7),
            marker(4, 7, Commit),
            data(5, 8),
            marker(6, 8, Abort),
            data(7, 7),
            marker(8, 7, Abort),
            data(9, -1),
            data(10, 9),
            data(11, -1),
        ]
    }

    fn tracked() -> TxnTracker {
        let mut t = TxnTracker::new();
        for b in log() {
            t.observe(&b, b.base_offset);
        }
        t
    }

    #[test]
    fn read_committed_keeps_committed_and_plain_records_only() {
        let t = tracked();
        let got: Vec<(i64, Decision)> = log()
            .iter()
            .map(|b| (b.base_offset, t.decide(b, Isolation::ReadCommitted)))
            .collect();
        use Decision::*;
        assert_eq!(
            got,
            vec![
                (0, Keep),
                (1, Keep),
                (2, DropAborted),
                (3, Keep),
                (4, DropControl),
                (5, DropAborted),
                (6, DropControl),
                (7, DropAborted),
                (8, DropControl),
                (9, Keep),
                (10, Undecided),
                (11, Keep),
            ]
        );
    }

    #[test]
    fn read_uncommitted_keeps_every_data_record_and_no_marker() {
        let t = tracked();
        for b in log() {
            let want = if b.control {
                Decision::DropControl
            } else {
                Decision::Keep
            };
            assert_eq!(t.decide(&b, Isolation::ReadUncommitted), want, "{b:?}");
        }
    }

    #[test]
    fn the_lso_is_the_oldest_open_transaction() {
        let t = tracked();
        assert_eq!(t.last_stable_offset(12), 10);
        assert_eq!(
            t.open_transactions(),
            vec![OpenTxn {
                producer_id: 9,
                first_offset: 10
            }]
        );
        assert_eq!(t.observed_end(), 12);
        let mut done = TxnTracker::new();
        done.observe(&data(0, -1), 4);
        assert_eq!(done.last_stable_offset(5), 5);
        // Before the markers arrive, the LSO is the oldest first offset.
        let mut partial = TxnTracker::new();
        for b in &log()[..4] {
            partial.observe(b, b.base_offset);
        }
        assert_eq!(partial.last_stable_offset(4), 1);
        assert_eq!(
            partial.decide(&data(2, 8), Isolation::ReadCommitted),
            Decision::Undecided
        );
    }

    #[test]
    fn a_marker_without_observed_data_changes_nothing() {
        // The transaction's data lies before the export's first batch.
        let mut t = TxnTracker::new();
        t.observe(&marker(5, 3, ControlType::Abort), 5);
        t.observe(&data(6, 3), 6);
        assert_eq!(
            t.decide(&data(6, 3), Isolation::ReadCommitted),
            Decision::Undecided
        );
        t.observe(&marker(7, 3, ControlType::Commit), 7);
        assert_eq!(
            t.decide(&data(6, 3), Isolation::ReadCommitted),
            Decision::Keep
        );
        assert_eq!(t.last_stable_offset(8), 8);
    }

    #[test]
    fn non_transactional_control_batches_are_dropped_and_not_markers() {
        // A KRaft control record of no producer.
        let mut t = TxnTracker::new();
        t.observe(&data(0, 4), 0);
        let kraft = BatchFacts {
            base_offset: 1,
            producer_id: -1,
            transactional: false,
            control: true,
            marker: Some(ControlType::Other(2)),
        };
        t.observe(&kraft, 1);
        assert_eq!(
            t.decide(&kraft, Isolation::ReadCommitted),
            Decision::DropControl
        );
        assert_eq!(t.last_stable_offset(2), 0, "producer 4 is still open");
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    /// A log of batches, one offset each: `(producer, kind)` with kind 0 a
    /// transactional data batch, 1 COMMIT, 2 ABORT, 3 a plain batch.
    fn logs() -> impl Strategy<Value = Vec<(i64, u8)>> {
        proptest::collection::vec((0i64..3, 0u8..4), 0..60)
    }

    fn facts(offset: i64, (pid, kind): (i64, u8)) -> BatchFacts {
        match kind {
            0 => BatchFacts {
                base_offset: offset,
                producer_id: pid,
                transactional: true,
                control: false,
                marker: None,
            },
            1 | 2 => BatchFacts {
                base_offset: offset,
                producer_id: pid,
                transactional: true,
                control: true,
                marker: Some(if kind == 1 {
                    ControlType::Commit
                } else {
                    ControlType::Abort
                }),
            },
            _ => BatchFacts {
                base_offset: offset,
                producer_id: -1,
                transactional: false,
                control: false,
                marker: None,
            },
        }
    }

    proptest! {
        /// Against the per-offset model: a transactional batch's fate is
        /// the next marker of its producer after it; with none it is
        /// undecided, and the LSO is the first such batch.
        #[test]
        fn decisions_match_the_next_marker_of_the_producer(log in logs()) {
            let mut t = TxnTracker::new();
            for (o, b) in log.iter().enumerate() {
                t.observe(&facts(o as i64, *b), o as i64);
            }
            let mut first_undecided = None;
            for (o, &(pid, kind)) in log.iter().enumerate() {
                let f = facts(o as i64, (pid, kind));
                let want = match kind {
                    1 | 2 => Decision::DropControl,
                    3 => Decision::Keep,
                    _ => match log[o + 1..].iter().find(|(p, k)| *p == pid && (*k == 1 || *k == 2)) {
                        Some((_, 1)) => Decision::Keep,
                        Some(_) => Decision::DropAborted,
                        None => {
                            first_undecided.get_or_insert(o as i64);
                            Decision::Undecided
                        }
                    },
                };
                prop_assert_eq!(t.decide(&f, Isolation::ReadCommitted), want, "offset {}", o);
                let uncommitted = if kind == 1 || kind == 2 { Decision::DropControl } else { Decision::Keep };
                prop_assert_eq!(t.decide(&f, Isolation::ReadUncommitted), uncommitted);
            }
            let end = log.len() as i64;
            prop_assert_eq!(t.last_stable_offset(end), first_undecided.unwrap_or(end));
        }
    }
}
