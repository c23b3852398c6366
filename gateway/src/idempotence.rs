//! Idempotent producers: Kafka's per-producer sequence checks, so that a
//! batch a producer sends again (its first attempt timed out) is not
//! written twice.
//!
//! Per partition, per producer id: its epoch and its last five batches'
//! sequence ranges with the offsets they were written at (Kafka keeps five:
//! `max.in.flight.requests.per.connection` is at most 5 with idempotence).
//! A batch is
//! - a duplicate when its sequence range is one of those: answered with
//!   the offset it was first written at, nothing appended;
//! - in order when it starts right after the last one (or at 0 under a new
//!   epoch, or from a producer not seen yet);
//! - otherwise out of order (OUT_OF_ORDER_SEQUENCE_NUMBER), or fenced when
//!   its epoch is older (INVALID_PRODUCER_EPOCH).
//!
//! The table is kept in Kafka's producer snapshots: the writer saves it as
//! `<log-end>.snapshot` at a clean shutdown ([`ProducerTable::entries`],
//! `kafkalog::snapshot`), and it is rebuilt when a partition is first written
//! after a start, from the newest snapshot (ours, or Kafka's at a segment
//! base) and the batches after it; without a snapshot, from the last
//! segment's batches. A truncation removes the snapshots above the cut.

use std::collections::{HashMap, VecDeque};
use std::ops::ControlFlow;
use std::path::Path;

use kafkalog::TopicPartition;
use kafkalog::batch::BatchHeader;

/// Batches remembered per producer.
pub const CACHED_BATCHES: usize = 5;

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Write it.
    Append,
    /// Already written at this base offset: answer with it, write nothing.
    Duplicate {
        /// Where the batch was written.
        base_offset: i64,
    },
    /// A gap or a repeat that is not one of the cached batches.
    OutOfOrder {
        /// The sequence expected next.
        expected: i32,
        /// The batch's first sequence.
        got: i32,
    },
    /// An epoch older than the producer's current one.
    Fenced {
        /// The producer's epoch.
        current: i16,
        /// The batch's.
        got: i16,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cached {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
    last_offset: i64,
    timestamp: i64,
}

/// One batch of an idempotent producer, as the table records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The producer.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// First sequence of the batch.
    pub first_seq: i32,
    /// Last sequence of the batch.
    pub last_seq: i32,
    /// Offset of its first record.
    pub base_offset: i64,
    /// Offset of its last record.
    pub last_offset: i64,
    /// Its max timestamp.
    pub timestamp: i64,
}

impl Written {
    /// The batch `h` (as written in the log).
    pub fn of(h: &BatchHeader) -> Written {
        Written {
            producer_id: h.producer_id,
            epoch: h.producer_epoch,
            first_seq: h.base_sequence,
            last_seq: last_sequence(h),
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
            timestamp: h.max_timestamp,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Producer {
    epoch: i16,
    batches: VecDeque<Cached>,
}

/// One partition's producers.
#[derive(Debug, Clone, Default)]
pub struct ProducerTable {
    producers: HashMap<i64, Producer>,
}

/// The batch's last sequence (sequences wrap at `i32::MAX`).
pub fn last_sequence(h: &BatchHeader) -> i32 {
    if h.base_sequence < 0 {
        return h.base_sequence;
    }
    let last = i64::from(h.base_sequence) + i64::from(h.last_offset_delta);
    i32::try_from(last % (i64::from(i32::MAX) + 1)).unwrap_or(0)
}

fn next_sequence(seq: i32) -> i32 {
    if seq == i32::MAX { 0 } else { seq + 1 }
}

impl ProducerTable {
    /// Decides what to do with a batch of producer `pid` at `epoch` holding
    /// sequences `first_seq..=last_seq`.
    pub fn check(&self, pid: i64, epoch: i16, first_seq: i32, last_seq: i32) -> Check {
        let Some(p) = self.producers.get(&pid) else {
            return Check::Append;
        };
        if epoch < p.epoch {
            return Check::Fenced {
                current: p.epoch,
                got: epoch,
            };
        }
        if epoch > p.epoch {
            return if first_seq == 0 {
                Check::Append
            } else {
                Check::OutOfOrder {
                    expected: 0,
                    got: first_seq,
                }
            };
        }
        if let Some(c) = p
            .batches
            .iter()
            .find(|c| c.first_seq == first_seq && c.last_seq == last_seq)
        {
            return Check::Duplicate {
                base_offset: c.base_offset,
            };
        }
        let expected = p.batches.back().map_or(0, |c| next_sequence(c.last_seq));
        if first_seq == expected {
            Check::Append
        } else {
            Check::OutOfOrder {
                expected,
                got: first_seq,
            }
        }
    }

    /// Records a batch written at `base_offset`.
    pub fn record(&mut self, w: Written) {
        let p = self.producers.entry(w.producer_id).or_default();
        if w.epoch != p.epoch {
            p.epoch = w.epoch;
            p.batches.clear();
        }
        p.batches.push_back(Cached {
            first_seq: w.first_seq,
            last_seq: w.last_seq,
            base_offset: w.base_offset,
            last_offset: w.last_offset,
            timestamp: w.timestamp,
        });
        while p.batches.len() > CACHED_BATCHES {
            p.batches.pop_front();
        }
    }

    /// Each producer's last batch, as Kafka's producer snapshot holds it.
    pub fn entries(&self) -> Vec<kafkalog::snapshot::ProducerSnapshotEntry> {
        let mut out: Vec<_> = self
            .producers
            .iter()
            .filter_map(|(&pid, p)| {
                let last = p.batches.back()?;
                Some(kafkalog::snapshot::ProducerSnapshotEntry {
                    producer_id: pid,
                    producer_epoch: p.epoch,
                    last_sequence: last.last_seq,
                    last_offset: last.last_offset,
                    offset_delta: i32::try_from(last.last_offset - last.base_offset).unwrap_or(0),
                    timestamp: last.timestamp,
                    coordinator_epoch: -1,
                    current_txn_first_offset: None,
                })
            })
            .collect();
        out.sort_by_key(|e| e.producer_id);
        out
    }

    /// Whether no producer is known.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// The table of partition `tp` in the log dir `root`: the newest
    /// producer snapshot, then the batches after it (without a snapshot,
    /// the last segment's batches).
    pub fn load(root: &Path, tp: &TopicPartition) -> kafkalog::Result<ProducerTable> {
        let mut table = ProducerTable::default();
        let reader = kafkalog::reader::PartitionReader::open(root, tp)?;
        let Some(last) = reader.segments()?.last().cloned() else {
            return Ok(table);
        };
        let newest = kafkalog::snapshot::list_snapshots(reader.dir())?.pop();
        let mut from = last.base_offset;
        if let Some(at) = newest {
            let path =
                kafkalog::segment::file_path(reader.dir(), at, kafkalog::segment::SNAPSHOT_SUFFIX);
            match kafkalog::snapshot::read_snapshot(&path) {
                Ok(entries) => {
                    for e in entries {
                        let first = e.last_sequence.saturating_sub(e.offset_delta).max(0);
                        table.record(Written {
                            producer_id: e.producer_id,
                            epoch: e.producer_epoch,
                            first_seq: first,
                            last_seq: e.last_sequence,
                            base_offset: e.last_offset - i64::from(e.offset_delta),
                            last_offset: e.last_offset,
                            timestamp: e.timestamp,
                        });
                    }
                    from = at;
                }
                Err(e) => {
                    tracing::warn!(partition = %tp, error = %e, "ignoring an unreadable producer snapshot");
                }
            }
        }
        reader.for_each_batch(from, false, |h, _| {
            if h.producer_id >= 0
                && !h.is_control()
                && h.base_sequence >= 0
                && h.base_offset >= from
            {
                table.record(Written::of(h));
            }
            ControlFlow::Continue(())
        })?;
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(pid: i64, epoch: i16, first: i32, last: i32, base: i64) -> Written {
        Written {
            producer_id: pid,
            epoch,
            first_seq: first,
            last_seq: last,
            base_offset: base,
            last_offset: base + i64::from(last - first),
            timestamp: 0,
        }
    }

    #[test]
    fn the_snapshot_entries_hold_each_producers_last_batch() {
        let mut t = ProducerTable::default();
        t.record(w(7, 0, 0, 4, 100));
        t.record(w(7, 0, 5, 9, 105));
        let e = t.entries();
        assert_eq!(e.len(), 1);
        assert_eq!(
            (
                e[0].producer_id,
                e[0].last_sequence,
                e[0].last_offset,
                e[0].offset_delta
            ),
            (7, 9, 109, 4)
        );
    }

    #[test]
    fn a_resent_batch_is_a_duplicate_and_answered_with_its_first_offset() {
        let mut t = ProducerTable::default();
        assert_eq!(t.check(7, 0, 0, 4), Check::Append);
        t.record(w(7, 0, 0, 4, 100));
        assert_eq!(t.check(7, 0, 5, 9), Check::Append);
        t.record(w(7, 0, 5, 9, 105));
        assert_eq!(t.check(7, 0, 0, 4), Check::Duplicate { base_offset: 100 });
        assert_eq!(t.check(7, 0, 5, 9), Check::Duplicate { base_offset: 105 });
        assert_eq!(
            t.check(7, 0, 20, 21),
            Check::OutOfOrder {
                expected: 10,
                got: 20
            }
        );
    }

    #[test]
    fn epochs_fence_and_restart_sequences() {
        let mut t = ProducerTable::default();
        t.record(w(7, 3, 0, 0, 1));
        assert_eq!(t.check(7, 2, 1, 1), Check::Fenced { current: 3, got: 2 });
        assert_eq!(t.check(7, 4, 0, 0), Check::Append);
        assert_eq!(
            t.check(7, 4, 1, 1),
            Check::OutOfOrder {
                expected: 0,
                got: 1
            }
        );
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
        let mut t = ProducerTable::default();
        for i in 0..7 {
            t.record(w(1, 0, i, i, i64::from(i)));
        }
        assert!(matches!(t.check(1, 0, 0, 0), Check::OutOfOrder { .. }));
        assert_eq!(t.check(1, 0, 6, 6), Check::Duplicate { base_offset: 6 });
        t.record(w(2, 0, i32::MAX, i32::MAX, 9));
        assert_eq!(t.check(2, 0, 0, 3), Check::Append);
    }
}
