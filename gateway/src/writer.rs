//! Producers' appends, performed by the log dir's single writer.
//!
//! The gateway never opens a partition for writing: a Produce becomes an
//! [`AppendRequest`] sent to whoever owns the log dir, the applier's engine
//! under `applier run`, or [`DirWriter`] under `applier serve`. The owner
//! checks the partition's state, appends with [`append_as_leader`] and
//! answers on the request's channel; then it tells the view and wakes the
//! fetches waiting for data ([`Appends`]).
//!
//! A partition accepts producer writes only when it is not a mirror or is a
//! STOPPED one; everything else is refused with [`AppendError::ReadOnly`]
//! and the log is unchanged.
//!
//! Both owners share the writing itself: [`PlainLogs`] (the partitions
//! that are not mirrors, opened on first write and kept open with their
//! producers' sequences; only `__consumer_offsets` partitions are ever
//! created) and [`Readers`] (the view and the waiting fetches, told after
//! every change).

use std::collections::HashMap;
use std::sync::Arc;

use kafkalog::{LogConfig, LogDir, PartitionLog, TopicPartition};
use manifest::state::PartitionState;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::idempotence::{Check, ProducerTable};
use crate::view::LogView;

/// Where a Produce's batches were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Offset of the first record written.
    pub base_offset: i64,
    /// The partition's log start offset.
    pub log_start_offset: i64,
}

/// Why a Produce was not written. The log is unchanged in every case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// A mirror partition that is not STOPPED.
    #[error(
        "mirror partition {tp} is read-only (state {state}): run `applier stop` to fail over and make it writable"
    )]
    ReadOnly {
        /// The partition.
        tp: TopicPartition,
        /// Its state.
        state: String,
    },
    /// No such partition here.
    #[error("no partition {0} here")]
    UnknownPartition(TopicPartition),
    /// The batches are malformed (bad CRC, not magic v2, ...).
    #[error("{0}")]
    Corrupt(String),
    /// A transactional batch: transactions are not supported yet.
    #[error("transactional producers are not supported by the segmirror gateway")]
    Transactional,
    /// The write failed (disk full, IO error).
    #[error("{0}")]
    Storage(String),
    /// Nobody writes this log dir (the gateway serves it read-only).
    #[error("this gateway serves {0} read-only")]
    NoWriter(String),
    /// An idempotent producer's batch does not follow its last one.
    #[error("{0}")]
    OutOfOrderSequence(String),
    /// An idempotent producer's epoch is older than its current one.
    #[error("{0}")]
    InvalidProducerEpoch(String),
}

/// A producer's batches for one partition, and where to answer.
#[derive(Debug)]
pub struct AppendRequest {
    /// The partition.
    pub tp: TopicPartition,
    /// The batches as the producer sent them (offsets are assigned here).
    pub batches: Vec<u8>,
    /// The answer.
    pub reply: oneshot::Sender<Result<Appended, AppendError>>,
    /// Create the partition when missing (only `__consumer_offsets`
    /// partitions are ever created this way: see [`may_create`]).
    pub create: bool,
}

/// Whether a writer may create `tp` for an append that asks to: only the
/// offsets topic's partitions, which the gateway owns.
pub fn may_create(tp: &TopicPartition) -> bool {
    tp.topic == kafkalog::offsets_topic::OFFSETS_TOPIC
}

/// The topic id for a new `__consumer_offsets` partition: the one its
/// siblings already have, or a new random one.
pub fn offsets_topic_id(root: &std::path::Path) -> Result<kafkalog::TopicId, AppendError> {
    let siblings =
        kafkalog::reader::list_partitions(root).map_err(|e| AppendError::Storage(e.to_string()))?;
    for tp in siblings.iter().filter(|tp| may_create(tp)) {
        if let Ok(reader) = kafkalog::reader::PartitionReader::open(root, tp)
            && let Ok(Some(m)) = reader.metadata()
        {
            return Ok(m.topic_id);
        }
    }
    kafkalog::TopicId::random().map_err(|e| AppendError::Storage(e.to_string()))
}

/// The sending half given to the gateway.
pub type AppendSender = mpsc::Sender<AppendRequest>;

/// Appends signal: the single writer calls [`Appends::appended`] after each
/// append (a producer's or the applier's), fetches waiting for data wake up.
#[derive(Debug, Default)]
pub struct Appends {
    notify: Notify,
}

impl Appends {
    /// A new signal.
    pub fn new() -> Arc<Appends> {
        Arc::new(Appends::default())
    }

    /// Wakes every waiting fetch.
    pub fn appended(&self) {
        self.notify.notify_waiters();
    }

    /// Resolves at the next [`Appends::appended`].
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

/// The refusal for a partition whose mirror record says `state`, if any.
pub fn refusal(tp: &TopicPartition, state: Option<PartitionState>) -> Option<AppendError> {
    match state {
        Some(s) if !manifest::state::is_writable(s) => Some(AppendError::ReadOnly {
            tp: tp.clone(),
            state: s.as_str().to_string(),
        }),
        _ => None,
    }
}

/// Appends `batches` to `log` as its leader at the log's latest epoch
/// (after a stop: the epoch above the LME). Transactional batches are
/// refused before anything is written; an idempotent producer's batch is
/// checked against `producers` ([`crate::idempotence`]): a duplicate is
/// answered with the offset it was first written at, nothing appended.
pub fn append_as_leader(
    log: &mut PartitionLog,
    batches: &mut [u8],
    producers: &mut ProducerTable,
) -> Result<Appended, AppendError> {
    if has_transactional_batch(batches) {
        return Err(AppendError::Transactional);
    }
    crate::produced::check_produced(batches, crate::produced::MAX_DECOMPRESSED_BATCH_BYTES)
        .map_err(AppendError::Corrupt)?;
    let header = kafkalog::batch::parse_header(batches, 0)
        .map_err(|e| AppendError::Corrupt(format!("the produced batch: {e}")))?;
    let idempotent = header.producer_id >= 0 && header.base_sequence >= 0;
    let sequences = (
        header.base_sequence,
        crate::idempotence::last_sequence(&header),
    );
    if idempotent {
        if header.size() != batches.len() {
            return Err(AppendError::Corrupt(
                "an idempotent producer sends one record batch per partition".into(),
            ));
        }
        match producers.check(
            header.producer_id,
            header.producer_epoch,
            sequences.0,
            sequences.1,
        ) {
            Check::Append => {}
            Check::Duplicate { base_offset } => {
                return Ok(Appended {
                    base_offset,
                    log_start_offset: log.log_start_offset(),
                });
            }
            Check::OutOfOrder { expected, got } => {
                return Err(AppendError::OutOfOrderSequence(format!(
                    "producer {} on {}: sequence {got}, expected {expected}",
                    header.producer_id,
                    log.topic_partition()
                )));
            }
            Check::Fenced { current, got } => {
                return Err(AppendError::InvalidProducerEpoch(format!(
                    "producer {} on {}: epoch {got} is older than its epoch {current}",
                    header.producer_id,
                    log.topic_partition()
                )));
            }
        }
    }
    let epoch = log.epochs().latest_epoch().unwrap_or(0).max(0);
    match log.append_as_leader(batches, epoch) {
        Ok(info) => {
            if idempotent {
                producers.record(crate::idempotence::Written {
                    producer_id: header.producer_id,
                    epoch: header.producer_epoch,
                    first_seq: sequences.0,
                    last_seq: sequences.1,
                    base_offset: info.first_offset,
                    last_offset: info.last_offset,
                    timestamp: header.max_timestamp,
                });
            }
            Ok(Appended {
                base_offset: info.first_offset,
                log_start_offset: log.log_start_offset(),
            })
        }
        Err(kafkalog::Error::ReadOnly { .. }) => Err(AppendError::ReadOnly {
            tp: log.topic_partition().clone(),
            state: "read-only (write guard)".into(),
        }),
        Err(e @ (kafkalog::Error::Batch { .. } | kafkalog::Error::InvalidArgument(_))) => {
            Err(AppendError::Corrupt(e.to_string()))
        }
        Err(e) => Err(AppendError::Storage(e.to_string())),
    }
}

/// A partition open for producers, with its producers' sequences.
#[derive(Debug)]
pub struct OpenForProducers {
    /// The log.
    pub log: PartitionLog,
    /// Its idempotent producers.
    pub producers: ProducerTable,
}

impl OpenForProducers {
    /// Flushes the log, saves its producers as `<log-end>.snapshot` (when
    /// there are any) and closes it: a clean shutdown, as Kafka's.
    pub fn close(mut self) -> kafkalog::Result<()> {
        save_producers(&mut self.log, &self.producers)?;
        self.log.close()
    }

    /// `log`, with the producer table rebuilt from the files in `root`.
    pub fn new(root: &std::path::Path, log: PartitionLog) -> OpenForProducers {
        let tp = log.topic_partition().clone();
        let producers = ProducerTable::load(root, &tp).unwrap_or_else(|e| {
            tracing::warn!(partition = %tp, error = %e, "rebuilding the producers' sequences");
            ProducerTable::default()
        });
        OpenForProducers { log, producers }
    }
}

/// Flushes `log` and writes its producers' snapshot at its log end (nothing
/// when no idempotent producer wrote to it).
pub fn save_producers(log: &mut PartitionLog, producers: &ProducerTable) -> kafkalog::Result<()> {
    if producers.is_empty() {
        return Ok(());
    }
    log.flush()?;
    kafkalog::snapshot::write_snapshot(log.dir(), log.log_end_offset(), &producers.entries())
}

/// Whether any batch in `bytes` has the transactional attribute (bit 4).
fn has_transactional_batch(mut bytes: &[u8]) -> bool {
    // base offset i64, length i32, epoch i32, magic i8, crc u32, attributes i16
    while bytes.len() >= 23 {
        let len = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let attributes = i16::from_be_bytes([bytes[21], bytes[22]]);
        if attributes & 0x10 != 0 {
            return true;
        }
        let size = 12 + usize::try_from(len).unwrap_or(0);
        if size <= 12 || size > bytes.len() {
            return false;
        }
        bytes = &bytes[size..];
    }
    false
}

/// The partitions of a log dir that are not mirrors, open for writing
/// (producers, the applier's group offsets sync), each with its
/// producers' sequences.
#[derive(Debug, Default)]
pub struct PlainLogs {
    open: HashMap<TopicPartition, OpenForProducers>,
}

impl PlainLogs {
    /// `tp` open for writing: kept open from an earlier write, opened now,
    /// or created now when `create` and it may be ([`may_create`]).
    pub fn open(
        &mut self,
        dir: &LogDir,
        tp: &TopicPartition,
        create: bool,
    ) -> Result<&mut OpenForProducers, AppendError> {
        if !self.open.contains_key(tp) {
            let exists = dir.root().join(tp.dir_name()).is_dir();
            let log = if exists {
                dir.open_partition(tp, LogConfig::default())
            } else if create && may_create(tp) {
                let id = offsets_topic_id(dir.root())?;
                dir.open_or_create_partition(tp, Some(id), LogConfig::default())
            } else {
                return Err(AppendError::UnknownPartition(tp.clone()));
            }
            .map_err(|e| AppendError::Storage(e.to_string()))?;
            self.open
                .insert(tp.clone(), OpenForProducers::new(dir.root(), log));
        }
        self.open
            .get_mut(tp)
            .ok_or_else(|| AppendError::UnknownPartition(tp.clone()))
    }

    /// Appends `batches` to `tp` as its leader ([`append_as_leader`]),
    /// opening it first ([`PlainLogs::open`]).
    pub fn append(
        &mut self,
        dir: &LogDir,
        tp: &TopicPartition,
        batches: &mut [u8],
        create: bool,
    ) -> Result<Appended, AppendError> {
        let open = self.open(dir, tp, create)?;
        append_as_leader(&mut open.log, batches, &mut open.producers)
    }

    /// Closes every partition (a clean shutdown: producers' snapshots
    /// saved).
    pub fn close_all(&mut self) {
        for (tp, open) in self.open.drain() {
            if let Err(e) = open.close() {
                tracing::warn!(partition = %tp, error = %e, "closing a partition opened for writing");
            }
        }
    }
}

/// Who reads what the writer changes: the view (segment files) and the
/// fetches waiting for data.
#[derive(Debug, Clone)]
pub struct Readers {
    view: Arc<LogView>,
    appends: Arc<Appends>,
}

impl Readers {
    /// The readers of `view`, waking `appends`.
    pub fn new(view: Arc<LogView>, appends: Arc<Appends>) -> Readers {
        Readers { view, appends }
    }

    /// `tp` grew: waiting fetches wake.
    pub fn appended(&self, tp: &TopicPartition) {
        self.view.appended(tp);
        self.appends.appended();
    }

    /// `tp`'s files were cut or rewritten: its tail is read again, so
    /// nothing cut is served.
    pub fn truncated(&self, tp: &TopicPartition) {
        self.view.truncated(tp);
        self.appends.appended();
    }
}

/// The writer of `applier serve`: owns the log dir (its lock), opens
/// partitions on first write and keeps them open.
pub struct DirWriter {
    dir: LogDir,
    plain: PlainLogs,
    readers: Readers,
}

impl DirWriter {
    /// A writer for the locked log dir `dir`.
    pub fn new(dir: LogDir, view: Arc<LogView>, appends: Arc<Appends>) -> DirWriter {
        DirWriter {
            dir,
            plain: PlainLogs::default(),
            readers: Readers::new(view, appends),
        }
    }

    /// Performs requests until every sender is gone; runs on a blocking
    /// thread. Flushes and closes the partitions at the end.
    pub fn run(mut self, mut requests: mpsc::Receiver<AppendRequest>) {
        while let Some(request) = requests.blocking_recv() {
            let mut batches = request.batches;
            let result = self.append(&request.tp, &mut batches, request.create);
            if result.is_ok() {
                self.readers.appended(&request.tp);
            }
            let _ = request.reply.send(result);
        }
        self.plain.close_all();
    }

    /// A mirror partition (its record in the partition dir) takes writes
    /// only when STOPPED; the others go to [`PlainLogs`].
    fn append(
        &mut self,
        tp: &TopicPartition,
        batches: &mut [u8],
        create: bool,
    ) -> Result<Appended, AppendError> {
        let dir = self.dir.root().join(tp.dir_name());
        if dir.is_dir() {
            let state = partdir::record::read(&dir)
                .map_err(|e| AppendError::Storage(format!("{tp}: {e}")))?
                .map(|r| r.state.state());
            if let Some(refused) = refusal(tp, state) {
                return Err(refused);
            }
        }
        self.plain.append(&self.dir, tp, batches, create)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stopped_mirrors_and_plain_partitions_take_writes() {
        let tp = TopicPartition::new("orders", 0).expect("tp");
        assert_eq!(refusal(&tp, None), None);
        assert_eq!(refusal(&tp, Some(PartitionState::Stopped)), None);
        for s in [
            PartitionState::Preparing,
            PartitionState::Mirroring,
            PartitionState::Paused,
            PartitionState::Stopping,
            PartitionState::Failed,
        ] {
            let e = refusal(&tp, Some(s)).expect("refused");
            let text = e.to_string();
            assert!(
                text.contains("orders-0")
                    && text.contains(s.as_str())
                    && text.contains("applier stop"),
                "{text}"
            );
        }
    }

    #[test]
    fn a_transactional_batch_is_found_among_others() {
        let batch = |attributes: i16| {
            let mut b = vec![0u8; 61];
            b[8..12].copy_from_slice(&49i32.to_be_bytes());
            b[16] = 2;
            b[21..23].copy_from_slice(&attributes.to_be_bytes());
            b
        };
        let plain = batch(0);
        let txn = batch(0x10);
        assert!(!has_transactional_batch(&plain));
        assert!(has_transactional_batch(&[plain.clone(), txn].concat()));
        assert!(!has_transactional_batch(&[plain.clone(), plain].concat()));
        assert!(!has_transactional_batch(&[0u8; 5]));
    }
}
