//! What the gateway serves, read from the log dir's files.
//!
//! The gateway never holds a partition open for writing to read it: it reads
//! the segment files, indexes and checkpoints the way `kafkalog dump` does,
//! so it serves the same bytes whether the applier (one process), a writer
//! task (`applier serve`) or nobody appends. The single writer tells the
//! view what it did through [`LogView::appended`] and
//! [`LogView::truncated`]; the view keeps, per partition, where its scan of
//! the last segment stopped ([`Tail`]) and scans only what was appended
//! since.
//!
//! Invariants:
//! - The log end offset served is the end of the last complete batch in
//!   the files: a batch being written (torn) is not served until whole.
//! - The last stable offset is the first offset of the oldest transaction
//!   still open at the log end (from the last segment's producer snapshot
//!   and the batches after it), or the log end when none is open.
//! - After a truncation the tail is rescanned from its segment's start:
//!   nothing cut is ever served again.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kafkalog::checkpoint::{self, LOG_START_OFFSET_CHECKPOINT};
use kafkalog::epoch::EpochLineage;
use kafkalog::index::{AbortedTxn, TimeIndex, TransactionIndex};
use kafkalog::reader::{LocatedBatches, PartitionReader, SegmentFile};
use kafkalog::segment::{self, ScanStop};
use kafkalog::{TopicId, TopicPartition};
use manifest::state::PartitionState;

/// A partition as the gateway serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// The partition.
    pub tp: TopicPartition,
    /// Its topic id (`partition.metadata`), when known.
    pub topic_id: Option<TopicId>,
    /// First offset served.
    pub log_start_offset: i64,
    /// The offset after the last complete batch (the high watermark served).
    pub log_end_offset: i64,
    /// First offset of the oldest open transaction, or the log end.
    pub last_stable_offset: i64,
    /// The partition's latest leader epoch (0 for a log without one).
    pub leader_epoch: i32,
    /// The mirror state, `None` for a partition that is not a mirror.
    pub mirror_state: Option<PartitionState>,
    /// The source topic configs its mirror record holds
    /// (`MirrorRecord::topic_configs`), `None` when none.
    pub topic_configs: Option<BTreeMap<String, manifest::topic_config::ConfigValue>>,
}

impl PartitionInfo {
    /// Whether producers may write: not a mirror, or a STOPPED one.
    pub fn writable(&self) -> bool {
        self.mirror_state.is_none_or(manifest::state::is_writable)
    }
}

/// Why a partition cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// No such partition in the log dir.
    #[error("no partition {0} in the log dir")]
    UnknownPartition(TopicPartition),
    /// The files could not be read or are corrupt.
    #[error(transparent)]
    Log(#[from] kafkalog::Error),
    /// The mirror record could not be read.
    #[error("{0}")]
    Record(String),
}

/// Where the scan of a partition's last segment stopped, and the
/// transactions open there.
#[derive(Debug, Clone)]
struct Tail {
    segment_base: i64,
    scanned_to: u64,
    next_offset: i64,
    /// Open transactions: producer id -> first offset.
    open: BTreeMap<i64, i64>,
}

/// The log dir as the gateway reads it.
#[derive(Debug)]
pub struct LogView {
    root: PathBuf,
    tails: Mutex<HashMap<TopicPartition, Tail>>,
}

impl LogView {
    /// A view of the log dir `root`.
    pub fn new(root: impl Into<PathBuf>) -> LogView {
        LogView {
            root: root.into(),
            tails: Mutex::new(HashMap::new()),
        }
    }

    /// The log dir.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The single writer appended to `tp`: nothing to do (the next read
    /// scans from where the last stopped), kept for symmetry and logs.
    pub fn appended(&self, _tp: &TopicPartition) {}

    /// The single writer truncated `tp` (or replaced a segment): its tail
    /// is scanned again from the segment start.
    pub fn truncated(&self, tp: &TopicPartition) {
        if let Ok(mut tails) = self.tails.lock() {
            tails.remove(tp);
        }
    }

    /// Every partition in the log dir, sorted (internal `__` topics
    /// included).
    pub fn partitions(&self) -> Result<Vec<TopicPartition>, ViewError> {
        Ok(kafkalog::reader::list_partitions(&self.root)?)
    }

    /// One partition's offsets, epoch and state, `Err(UnknownPartition)`
    /// when it does not exist.
    pub fn info(&self, tp: &TopicPartition) -> Result<PartitionInfo, ViewError> {
        let reader = self.reader(tp)?;
        let segments = reader.segments()?;
        let tail = self.refresh_tail(&reader, &segments)?;
        let first_base = segments.first().map_or(tail.next_offset, |s| s.base_offset);
        let checkpointed =
            checkpoint::read_offset_checkpoint(&self.root.join(LOG_START_OFFSET_CHECKPOINT))
                .ok()
                .and_then(|m| m.get(tp).copied())
                .unwrap_or(first_base);
        let log_start_offset = first_base.max(checkpointed).min(tail.next_offset);
        let lineage = self.lineage(&reader)?;
        let record = partdir::record::read(reader.dir())
            .map_err(|e| ViewError::Record(format!("{tp}: {e}")))?;
        // A range being appended as it downloads is not served before it
        // is whole and verified: the log ends where it started.
        let log_end_offset = match partdir::applying::read(reader.dir()) {
            Ok(Some(Ok(a))) => tail.next_offset.min(a.log_end_before.max(log_start_offset)),
            _ => tail.next_offset,
        };
        let last_stable_offset = tail
            .open
            .values()
            .copied()
            .min()
            .unwrap_or(log_end_offset)
            .min(log_end_offset);
        Ok(PartitionInfo {
            tp: tp.clone(),
            topic_id: reader.metadata()?.map(|m| m.topic_id),
            log_start_offset,
            log_end_offset,
            last_stable_offset,
            leader_epoch: lineage.latest_epoch().unwrap_or(0).max(0),
            mirror_state: record.as_ref().map(|r| r.state.state()),
            topic_configs: record.and_then(|r| r.topic_configs),
        })
    }

    /// The partition's epoch lineage (`leader-epoch-checkpoint`).
    pub fn lineage_of(&self, tp: &TopicPartition) -> Result<EpochLineage, ViewError> {
        let reader = self.reader(tp)?;
        self.lineage(&reader)
    }

    fn lineage(&self, reader: &PartitionReader) -> Result<EpochLineage, ViewError> {
        Ok(EpochLineage::from_checkpoint_entries(reader.epoch_entries()?).0)
    }

    fn reader(&self, tp: &TopicPartition) -> Result<PartitionReader, ViewError> {
        PartitionReader::open(&self.root, tp).map_err(|e| match e {
            kafkalog::Error::NoSuchPartition { .. } => ViewError::UnknownPartition(tp.clone()),
            other => ViewError::Log(other),
        })
    }

    /// Where the whole batches from the one holding `offset` on lie, below
    /// `upper`, within `max_bytes` except that the first batch counts
    /// whatever its size when `at_least_one` (KIP-74): their bytes are not
    /// read here ([`kafkalog::reader::PartitionReader::locate_batches`]).
    pub fn locate(
        &self,
        tp: &TopicPartition,
        offset: i64,
        upper: i64,
        max_bytes: usize,
        at_least_one: bool,
    ) -> Result<LocatedBatches, ViewError> {
        let reader = self.reader(tp)?;
        Ok(reader.locate_batches(offset, upper, max_bytes as u64, at_least_one)?)
    }

    /// The aborted transactions that overlap `[from, upper)`, from the
    /// segments' `.txnindex` files (Kafka's `collectAbortedTxns`).
    pub fn aborted(
        &self,
        tp: &TopicPartition,
        from: i64,
        upper: i64,
    ) -> Result<Vec<AbortedTxn>, ViewError> {
        let reader = self.reader(tp)?;
        let mut out = Vec::new();
        for seg in reader.segments()? {
            let path = segment::file_path(reader.dir(), seg.base_offset, segment::TXN_INDEX_SUFFIX);
            let Some(bytes) = kafkalog::fsutil::read_optional(&path)? else {
                continue;
            };
            let index = TransactionIndex::parse(&bytes, &path)?;
            out.extend(index.collect_aborted(from, upper));
        }
        out.sort_by_key(|t| (t.first_offset, t.producer_id));
        out.dedup();
        Ok(out)
    }

    /// The first offset whose batch holds a record stamped at or after
    /// `timestamp`, with that batch's max timestamp, `None` when every
    /// record is older (Kafka's `fetchOffsetByTimestamp`, at batch
    /// granularity for the offset's batch: the first record at or after
    /// the timestamp within it).
    pub fn offset_for_timestamp(
        &self,
        tp: &TopicPartition,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, ViewError> {
        let reader = self.reader(tp)?;
        let info = self.info(tp)?;
        for seg in reader.segments()? {
            // Skip segments whose time index says every batch is older.
            let path =
                segment::file_path(reader.dir(), seg.base_offset, segment::TIME_INDEX_SUFFIX);
            let start = match kafkalog::fsutil::read_optional(&path)? {
                Some(bytes) => match TimeIndex::parse(&bytes, seg.base_offset, &path) {
                    Ok(index) => {
                        if index.last().is_some_and(|l| l.timestamp < timestamp)
                            && !is_last(&reader, &seg)?
                        {
                            continue;
                        }
                        index
                            .lookup(timestamp)
                            .map_or(seg.base_offset, |e| e.offset)
                    }
                    Err(_) => seg.base_offset,
                },
                None => seg.base_offset,
            };
            let mut found = None;
            let mut failure = None;
            reader.for_each_batch(start.max(info.log_start_offset), false, |h, bytes| {
                if h.base_offset >= info.log_end_offset {
                    return ControlFlow::Break(());
                }
                if h.max_timestamp < timestamp {
                    return ControlFlow::Continue(());
                }
                match kafkalog::records::decode_records(h, bytes) {
                    Ok(records) => {
                        found = records
                            .iter()
                            .filter_map(|r| Some((r.offset(h)?, r.timestamp(h)?)))
                            .find(|&(_, ts)| ts >= timestamp);
                    }
                    Err(e) => failure = Some(e),
                }
                ControlFlow::Break(())
            })?;
            if let Some(e) = failure {
                return Err(ViewError::Log(e));
            }
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Scans the last segment from where the last scan stopped (or from
    /// its start, with the producer snapshot's open transactions, when the
    /// segment changed or was truncated).
    fn refresh_tail(
        &self,
        reader: &PartitionReader,
        segments: &[SegmentFile],
    ) -> Result<Tail, ViewError> {
        let tp = reader.topic_partition().clone();
        let Some(last) = segments.last() else {
            return Ok(Tail {
                segment_base: 0,
                scanned_to: 0,
                next_offset: 0,
                open: BTreeMap::new(),
            });
        };
        let cached = self
            .tails
            .lock()
            .ok()
            .and_then(|t| t.get(&tp).cloned())
            .filter(|t| t.segment_base == last.base_offset && t.scanned_to <= last.size);
        let mut tail = match cached {
            Some(t) => t,
            None => fresh_tail(reader.dir(), last)?,
        };
        if tail.scanned_to < last.size {
            match scan_tail(&mut tail, &last.path) {
                Ok(()) => {}
                // The segment was cut and written again since the last scan:
                // scan it from its start.
                Err(_) => {
                    tail = fresh_tail(reader.dir(), last)?;
                    scan_tail(&mut tail, &last.path)?;
                }
            }
        }
        if let Ok(mut tails) = self.tails.lock() {
            tails.insert(tp, tail.clone());
        }
        Ok(tail)
    }
}

fn is_last(reader: &PartitionReader, seg: &SegmentFile) -> Result<bool, ViewError> {
    Ok(reader
        .segments()?
        .last()
        .is_some_and(|l| l.base_offset == seg.base_offset))
}

/// The tail at the start of segment `last`: open transactions from the
/// producer snapshot taken at its base offset, when there is one.
fn fresh_tail(dir: &Path, last: &SegmentFile) -> Result<Tail, ViewError> {
    let snapshot = segment::file_path(dir, last.base_offset, segment::SNAPSHOT_SUFFIX);
    let mut open = BTreeMap::new();
    if snapshot.is_file()
        && let Ok(entries) = kafkalog::snapshot::read_snapshot(&snapshot)
    {
        for e in entries {
            if let Some(first) = e.current_txn_first_offset {
                open.insert(e.producer_id, first);
            }
        }
    }
    Ok(Tail {
        segment_base: last.base_offset,
        scanned_to: 0,
        next_offset: last.base_offset,
        open,
    })
}

/// Walks the batch headers of `path` from `tail.scanned_to` to the end of
/// its complete batches (their records are not read).
fn scan_tail(tail: &mut Tail, path: &Path) -> Result<(), ViewError> {
    let mut next = tail.next_offset;
    let mut open = tail.open.clone();
    let file = std::fs::File::open(path).map_err(kafkalog::Error::io("open", path))?;
    let end = segment::walk_headers(&file, path, tail.scanned_to, |h| {
        next = h.next_offset();
        if h.is_transactional() && h.producer_id >= 0 {
            if h.is_control() {
                open.remove(&h.producer_id);
            } else {
                open.entry(h.producer_id).or_insert(h.base_offset);
            }
        }
        ControlFlow::Continue(())
    })?;
    if let ScanStop::Corrupt(e) = end.stop {
        return Err(ViewError::Log(kafkalog::Error::Batch {
            path: path.to_path_buf(),
            source: e,
        }));
    }
    tail.scanned_to = end.valid_end;
    tail.next_offset = next;
    tail.open = open;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
    use kafkalog::{LogConfig, LogDir};

    #[test]
    fn a_range_being_streamed_in_is_not_served_before_it_is_whole() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("log dir");
        let tp = TopicPartition::new("orders", 0).expect("tp");
        let mut log = dir
            .open_or_create_partition(&tp, None, LogConfig::default())
            .expect("partition");
        for _ in 0..3 {
            let records: Vec<RecordInput> = (0..2)
                .map(|i| RecordInput {
                    timestamp: 1_700_000_000_000 + i,
                    key: None,
                    value: Some(b"v".to_vec()),
                    headers: vec![],
                })
                .collect();
            let mut b = build_batch(&BatchSpec::new(0, 0), &records).expect("batch");
            log.append_as_leader(&mut b, 0).expect("append");
        }
        let view = LogView::new(root.path());
        assert_eq!(view.info(&tp).expect("info").log_end_offset, 6);
        let marker = manifest::applying::Applying {
            key: "k".into(),
            base_offset: 2,
            last_offset: 9,
            log_end_before: 2,
        };
        partdir::applying::begin(log.dir(), &marker).expect("marker");
        let info = view.info(&tp).expect("info");
        assert_eq!((info.log_end_offset, info.last_stable_offset), (2, 2));
        partdir::applying::end(log.dir()).expect("end");
        assert_eq!(view.info(&tp).expect("info").log_end_offset, 6);
    }
}
