//! Opening mirror partitions: one the log dir already holds (its record
//! read, recovery run, a range left unfinished by a crash cut), and a new
//! one adopted from the feed ([`adopt`]). Executors only: the caller puts
//! what they return in a slot and drives its state machine.
//!
//! Invariants of an adoption:
//! - nothing is created or written when it is refused: an internal topic,
//!   a local partition of another topic id, or records of the partition's
//!   own that its first preparation would cut without `--allow-truncate`
//!   (`manifest::cut`, also when the source's manifest is not known and a
//!   cut cannot be ruled out);
//! - a partition that already holds records is adopted as a failback
//!   (`failback_pending`), judged on the log as recovery left it.

// `MirrorError` carries the store's and the log's errors by value; it is
// built only on the failure path, where its size costs nothing measurable.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use kafkalog::{LogDir, TopicId, TopicPartition};
use manifest::clock::Clock;
use manifest::partition::PartitionManifest;
use manifest::reconcile::Refusal;
use manifest::state;

use crate::error::MirrorError;
use crate::mirror::{Mirror, MirrorContext, new_record, refuse_topic};
use crate::options::mirror_log_config;

/// Why a partition was not adopted (nothing was changed in it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum AdoptError {
    /// An internal topic, or a local partition of another topic id.
    #[error("{0}")]
    Refused(MirrorError),
    /// The local partition's files cannot be read.
    #[error("cannot read the local partition: {0}")]
    Unreadable(#[source] kafkalog::Error),
    /// Its first preparation would cut records of its own (or its plan is
    /// refused).
    #[error("{0}")]
    WouldCut(Refusal),
    /// It holds records of its own and what mirroring would cut of them is
    /// not known.
    #[error(
        "holds records of its own (up to offset {log_end}) and the source's manifest is not known, so what mirroring would cut of them is not known; nothing was changed (give --allow-truncate to cut them on purpose)"
    )]
    CutUnknown {
        /// The local log end.
        log_end: i64,
    },
    /// Creating or opening the partition failed.
    #[error("{0}")]
    Log(kafkalog::Error),
    /// Its new state's actions (write guard, record) failed.
    #[error("{0}")]
    Create(#[from] crate::driver::ActionFailed),
}

/// Opens the mirror partition `tp` of `logdir` (`None`: not a mirror),
/// its recovery and the cut of a range left unfinished done.
pub(crate) fn open_existing(
    logdir: &LogDir,
    tp: &TopicPartition,
    clock: &Arc<dyn Clock>,
) -> Result<Option<Mirror>, MirrorError> {
    let dir = logdir.root().join(tp.dir_name());
    let Some(record) = partdir::record::read(&dir).map_err(|source| MirrorError::Record {
        tp: tp.clone(),
        source,
    })?
    else {
        return Ok(None);
    };
    let log = logdir
        .open_partition(tp, mirror_log_config())
        .map_err(|source| MirrorError::Log {
            tp: tp.clone(),
            source,
        })?;
    let report = log.recovery_report();
    if !report.is_clean() {
        tracing::warn!(partition = %tp, recovery = %report, "recovered the local log");
    }
    let mut mirror = Mirror::new(tp.clone(), log, record, Arc::clone(clock));
    mirror.undo_partial_range()?;
    Ok(Some(mirror))
}

/// Threads [`open_existing_all`] opens partitions from.
const OPEN_THREADS: usize = 8;

/// [`open_existing`] of every partition in `tps`, from up to
/// [`OPEN_THREADS`] threads (each open lists, reads and scans a few files
/// of its partition: at 10,000 partitions, seconds of system time on one
/// core), in the order of `tps`. Every open is durable on its own, as
/// [`open_existing`] is on any thread.
pub(crate) fn open_existing_all(
    logdir: &LogDir,
    tps: Vec<TopicPartition>,
    clock: &Arc<dyn Clock>,
) -> Vec<(TopicPartition, Result<Option<Mirror>, MirrorError>)> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, OPEN_THREADS);
    if tps.len() < 2 * threads {
        return tps
            .into_iter()
            .map(|tp| {
                let opened = open_existing(logdir, &tp, clock);
                (tp, opened)
            })
            .collect();
    }
    let per_thread = tps.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = tps
            .chunks(per_thread)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|tp| (tp.clone(), open_existing(logdir, tp, clock)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .zip(tps.chunks(per_thread))
            .flat_map(|(h, chunk)| {
                h.join().unwrap_or_else(|_| {
                    // A panic in one open: its partitions stay unopened,
                    // retried at the next cycle like any failed open.
                    chunk
                        .iter()
                        .map(|tp| {
                            let e = MirrorError::Log {
                                tp: tp.clone(),
                                source: kafkalog::Error::InvalidArgument(
                                    "opening the partition panicked".into(),
                                ),
                            };
                            (tp.clone(), Err(e))
                        })
                        .collect()
                })
            })
            .collect()
    })
}

/// What an adoption needs besides the partition.
pub(crate) struct Adoption<'a> {
    /// The log dir.
    pub(crate) logdir: &'a LogDir,
    /// The source cluster the new record pins.
    pub(crate) source: &'a str,
    /// Whether records of the partition's own may be cut.
    pub(crate) allowed: bool,
    /// Where the applier runs (for the cut's plan).
    pub(crate) ctx: &'a MirrorContext,
    /// The clock of the new mirror.
    pub(crate) clock: &'a Arc<dyn Clock>,
}

/// Creates (or opens) `tp` as a new mirror of `topic_id`, its record
/// PREPARING in memory (the caller performs the state's actions); see the
/// module doc for what is refused. `manifest` is the source's, when known.
pub(crate) fn adopt(
    a: &Adoption<'_>,
    tp: &TopicPartition,
    topic_id: TopicId,
    manifest: Option<&PartitionManifest>,
) -> Result<Mirror, AdoptError> {
    refuse_topic(tp).map_err(AdoptError::Refused)?;
    let mut record = new_record(a.source, topic_id, state::initial().0);
    let mut cut = None;
    if a.logdir.root().join(tp.dir_name()).is_dir() {
        let local =
            crate::plan::local_summary(a.logdir.root(), tp).map_err(AdoptError::Unreadable)?;
        // A partition that already holds records (the old primary coming
        // back) is reconciled as a failback at its first preparation.
        record.failback_pending = local.has_records();
        if record.failback_pending {
            cut = match manifest {
                Some(m) => {
                    crate::mirror::check_cut(tp, &record, m, &local.view(), a.ctx, a.allowed)
                        .map_err(AdoptError::WouldCut)?
                }
                None if a.allowed => None,
                None => {
                    return Err(AdoptError::CutUnknown {
                        log_end: local.log_end,
                    });
                }
            };
            record.truncate_allowed = a.allowed;
            record.pending_cut = cut;
        }
    }
    let log = match a
        .logdir
        .open_or_create_partition(tp, Some(topic_id), mirror_log_config())
    {
        Ok(log) => log,
        Err(kafkalog::Error::TopicIdMismatch {
            found, expected, ..
        }) => {
            return Err(AdoptError::Refused(MirrorError::Refused {
                tp: tp.clone(),
                refusal: Refusal::InconsistentTopicId {
                    local: found,
                    source_id: expected,
                },
            }));
        }
        Err(e) => return Err(AdoptError::Log(e)),
    };
    // As the log opened it (recovery may have cut a torn tail).
    record.failback_pending = log.log_end_offset() > log.log_start_offset();
    if let Some(cut) = cut {
        tracing::warn!(partition = %tp, %cut, "adopting a partition with records of its own: its first preparation cuts them (--allow-truncate)");
    }
    Ok(Mirror::new(tp.clone(), log, record, Arc::clone(a.clock)))
}
