//! What the applier does to a mirror partition's local log, decided before
//! anything is done: the plans of preparation, of following the source,
//! and of failover, as pure functions of values.
//!
//! The applier reads the inputs (its mirror record, the source's manifest,
//! the local log's lineage, log start and end, topic id, this cluster's id),
//! calls one of the planners here, and executes the [`Plan`] step by step;
//! `applier plan` prints the same plan and executes nothing.
//!
//! - [`plan_preparation`]: PREPARING's work. Identity checks, the loop
//!   check, then the history step (failback's LME truncation, or the cut
//!   back to where a stopped mirror stopped when it resumes from the same
//!   source), then [`plan_follow`].
//! - [`plan_follow`]: what a follower does against a manifest, in
//!   PREPARING and on every manifest version MIRRORING applies: cut to the
//!   divergence point of the two lineages, then follow the source's log
//!   start (raise the local one, or restart there when the local log ends
//!   below it). Fetching then starts at the local log end.
//! - [`plan_stop`]: STOPPING's work (failover): the LME, the stop offset, the
//!   epoch the log is raised to, the transactions to abort.
//!
//! # The history step (spec: "Failback" and "Resuming from the same source")
//!
//! | mirror record | local log | rule | cut to |
//! | --- | --- | --- | --- |
//! | new mirror of an empty log, or restart after FAILED | any | none | nothing cut by this step |
//! | stopped while mirroring the source it now starts from again, and that source never mirrored this cluster | holds records | [`Reason::ResumeAfterStop`] | the stop offset (the end of the LME's epoch in the local lineage) |
//! | stopped (LME recorded) and now mirroring another source, or adopted with records of its own, or starting again from a source whose manifest records an LME for this cluster (it mirrored our writes, then stopped: the switch back) | holds records | failback: [`LmeRule`], from the LME the source's manifest records for this cluster | the LME table below |
//!
//! The LME table (`docs/mirroring.md`, [`lineage::truncation_point_for_lme`]):
//!
//! | LME against the local lineage | rule | T |
//! | --- | --- | --- |
//! | unknown (no mirror origin naming this cluster, or none recorded) | [`LmeRule::Unknown`] | 0 |
//! | above every local epoch (or no local epoch) | [`LmeRule::AboveEveryLocalEpoch`] | 0 |
//! | equal to the latest local epoch | [`LmeRule::LatestLocalEpoch`] | the local LEO |
//! | between two local epochs | [`LmeRule::BetweenLocalEpochs`] | start of the first local epoch above the LME |
//! | below the oldest local epoch | [`LmeRule::BelowOldestLocalEpoch`] | start of the oldest epoch |
//!
//! # Invariants
//!
//! - Every planner is total: no input makes it panic. Lineages are
//!   [`EpochLineage`] values, valid by construction (a manifest whose
//!   lineage is not one does not decode), so none is ever taken for empty
//!   (which would mean "cut everything").
//! - Offsets in a plan are never negative; each cut is at or below the log
//!   end that the steps before it leave; a cut at or below the local log
//!   start becomes [`Step::TruncateFullyAndStartAt`] the source's log start.
//! - [`Plan::fetch_from`] is the log end that the steps leave, and it is
//!   never below the source's log start.
//! - A refusal changes nothing: the applier executes no step of it.

use std::fmt;

use kafkalog::log::OpenTransaction;
use kafkalog::topic::{TopicId, TopicPartition};

use crate::lineage::{self, EpochLineage};
use crate::mirror_record::MirrorRecord;
use crate::partition::PartitionManifest;

/// What the planners know of the local log.
#[derive(Debug, Clone, Copy)]
pub struct LocalLog<'a> {
    /// The topic id in the local `partition.metadata`, if any.
    pub topic_id: Option<TopicId>,
    /// The local epoch lineage (`leader-epoch-checkpoint`).
    pub lineage: &'a EpochLineage,
    /// The first offset kept.
    pub log_start_offset: i64,
    /// The log end offset.
    pub log_end_offset: i64,
}

/// What the planners know of this cluster.
#[derive(Debug, Clone, Copy, Default)]
pub struct Surroundings<'a> {
    /// This (destination) cluster's own id: the loop check and the LME
    /// lookup need it.
    pub local_cluster_id: Option<&'a str>,
    /// Whether the destination topic has `remote.storage.enable=true` by
    /// the destination's own setting (`--tiered-topic`). The topic's
    /// configs the record holds (`MirrorRecord::topic_configs`, copied
    /// through the destination's filter) count too: see
    /// [`plan_preparation`].
    pub tiered_storage: bool,
}

/// Why a partition cannot be prepared or followed: the applier fails it
/// (non-retryable) and changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// Internal (`__*`) or Kafka Streams internal topics are never mirrored.
    #[error(
        "refusing to mirror {kind} topic {topic:?}: per-partition mirroring cannot keep its transactional coupling"
    )]
    RefusedTopic {
        /// "internal" or "Kafka Streams internal".
        kind: &'static str,
        /// The topic.
        topic: String,
    },
    /// The destination topic has `remote.storage.enable=true`.
    #[error(
        "remote.storage.enable=true on the destination topic: data around the LME may be remote, so the log cannot be truncated safely"
    )]
    TieredStorage,
    /// The local topic, the record and the manifest disagree on the topic id.
    #[error("inconsistent topic id: destination has {local}, source has {source_id}")]
    InconsistentTopicId {
        /// The destination's id (its `partition.metadata`, or its record).
        local: String,
        /// The source's id.
        source_id: String,
    },
    /// The manifest is another source cluster's than the one pinned.
    #[error("source cluster id changed: mirror pinned to {pinned}, bucket has {found}")]
    SourceClusterChanged {
        /// The pinned id.
        pinned: String,
        /// The id in the manifest.
        found: String,
    },
    /// The source's copy is itself a mirror of this cluster, not stopped.
    #[error(
        "mirror loop: the source's copy is a mirror of this cluster ({local}) in state {state}; stop it there first"
    )]
    MirrorLoop {
        /// This cluster's id.
        local: String,
        /// The source's mirror state.
        state: String,
    },
    /// Preparing would cut records of this partition's own that the source
    /// does not give back, and the operator did not allow it
    /// ([`crate::cut`]).
    #[error(
        "{cut} would be cut: records of this partition's own that the source does not have; nothing was changed (give --allow-truncate to cut them on purpose)"
    )]
    WouldCut {
        /// The offsets.
        cut: crate::mirror_record::Cut,
    },
}

/// Which row of the failback LME table chose the cut (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum LmeRule {
    /// The source's manifest records no LME for this cluster.
    Unknown,
    /// The LME is above every local epoch (or the log has none).
    AboveEveryLocalEpoch {
        /// The LME.
        lme: i32,
    },
    /// The LME is the latest local epoch: nothing is cut by this step.
    LatestLocalEpoch {
        /// The LME.
        lme: i32,
    },
    /// The LME lies between two local epochs: cut at the first above it.
    BetweenLocalEpochs {
        /// The LME.
        lme: i32,
        /// The first local epoch above it.
        next_epoch: i32,
    },
    /// The LME is below the oldest local epoch: cut at the oldest's start.
    BelowOldestLocalEpoch {
        /// The LME.
        lme: i32,
        /// The oldest local epoch.
        oldest_epoch: i32,
    },
}

impl LmeRule {
    /// The row of the table for `lme` against `local` (entries starting
    /// after `leo` hold no record and are ignored).
    pub fn classify(lme: Option<i32>, local: &EpochLineage, leo: i64) -> LmeRule {
        let Some(lme) = lme.filter(|&e| e >= 0) else {
            return LmeRule::Unknown;
        };
        let held: Vec<_> = local
            .entries()
            .iter()
            .filter(|e| e.start_offset <= leo.max(0))
            .collect();
        match (held.first(), held.last()) {
            (Some(_), Some(latest)) if lme == latest.epoch => LmeRule::LatestLocalEpoch { lme },
            (Some(_), Some(latest)) if lme > latest.epoch => LmeRule::AboveEveryLocalEpoch { lme },
            (Some(oldest), Some(_)) if lme < oldest.epoch => LmeRule::BelowOldestLocalEpoch {
                lme,
                oldest_epoch: oldest.epoch,
            },
            (Some(_), Some(_)) => LmeRule::BetweenLocalEpochs {
                lme,
                next_epoch: held.iter().find(|e| e.epoch > lme).map_or(lme, |e| e.epoch),
            },
            _ => LmeRule::AboveEveryLocalEpoch { lme },
        }
    }
}

/// Why a step of a plan is there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Reason {
    /// Failback: the log has history of its own and is cut at the LME the
    /// new primary recorded when it stopped mirroring this cluster.
    Failback {
        /// The row of the LME table.
        #[serde(flatten)]
        rule: LmeRule,
    },
    /// The mirror stopped while mirroring this same source and starts
    /// again: only what was written locally after the stop is cut.
    ResumeAfterStop {
        /// The LME recorded at the stop.
        lme: Option<i32>,
        /// The log end offset at the stop.
        stopped_at_offset: i64,
    },
    /// The follower step: the local lineage and the source manifest's
    /// diverge here (unclean election at the source, or a failback's tail
    /// at the LME's epoch).
    Divergence {
        /// The local latest epoch before the cut.
        local_epoch: Option<i32>,
        /// The source's latest epoch.
        source_epoch: Option<i32>,
    },
    /// The source's log start moved (retention, DeleteRecords).
    SourceLogStart {
        /// The source's log start offset.
        source_log_start: i64,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let epoch = |e: &Option<i32>| e.map_or_else(|| "none".to_string(), |e| e.to_string());
        match self {
            Reason::Failback { rule } => match rule {
                LmeRule::Unknown => f.write_str(
                    "failback: the new primary records no LME for this cluster (rule: LME unknown -> 0)",
                ),
                LmeRule::AboveEveryLocalEpoch { lme } => write!(
                    f,
                    "failback: LME {lme} is above every local epoch (rule: above -> 0)"
                ),
                LmeRule::LatestLocalEpoch { lme } => write!(
                    f,
                    "failback: LME {lme} is the latest local epoch (rule: equal to the latest -> LEO)"
                ),
                LmeRule::BetweenLocalEpochs { lme, next_epoch } => write!(
                    f,
                    "failback: LME {lme} lies below local epoch {next_epoch} (rule: between -> start of epoch {next_epoch})"
                ),
                LmeRule::BelowOldestLocalEpoch { lme, oldest_epoch } => write!(
                    f,
                    "failback: LME {lme} is below the oldest local epoch {oldest_epoch} (rule: below -> start of epoch {oldest_epoch})"
                ),
            },
            Reason::ResumeAfterStop {
                lme,
                stopped_at_offset,
            } => write!(
                f,
                "resume after stop from the same source: cut what was written after the stop at offset {stopped_at_offset} (LME {})",
                epoch(lme)
            ),
            Reason::Divergence {
                local_epoch,
                source_epoch,
            } => write!(
                f,
                "follower step: the local lineage (latest epoch {}) diverges from the source's (latest epoch {})",
                epoch(local_epoch),
                epoch(source_epoch)
            ),
            Reason::SourceLogStart { source_log_start } => {
                write!(f, "the source's log start is {source_log_start}")
            }
        }
    }
}

/// One change to the local log, in the order of the plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// A rule chose offset `at`, which is the log end: nothing is cut.
    Keep {
        /// The offset the rule chose.
        at: i64,
        /// The rule.
        reason: Reason,
    },
    /// Cut the log's tail: keep the offsets below `to`.
    TruncateTo {
        /// The new log end.
        to: i64,
        /// The rule.
        reason: Reason,
    },
    /// Remove every record and start the (empty) log at `start`: the cut
    /// fell at or below the local log start, or the local log ends below
    /// the source's log start.
    TruncateFullyAndStartAt {
        /// Where the cut was asked for.
        cut_at: i64,
        /// The new log start and end.
        start: i64,
        /// The rule.
        reason: Reason,
    },
    /// Delete whole segments below `to` and move the log start there.
    RaiseLogStart {
        /// The new log start.
        to: i64,
        /// The rule.
        reason: Reason,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Keep { at, reason } => {
                write!(f, "keep everything (cut at {at} = log end): {reason}")
            }
            Step::TruncateTo { to, reason } => write!(f, "truncate to {to}: {reason}"),
            Step::TruncateFullyAndStartAt {
                cut_at,
                start,
                reason,
            } => write!(
                f,
                "truncate fully and start at {start} (cut at {cut_at} is at or below the local log start): {reason}"
            ),
            Step::RaiseLogStart { to, reason } => {
                write!(f, "raise the log start to {to}: {reason}")
            }
        }
    }
}

/// What to do to the local log, in order, and where fetching starts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The local log end after the steps: where fetching starts.
    pub fetch_from: i64,
}

impl Plan {
    /// Offsets the steps cut from the log's tail (0 when none).
    pub fn truncates(&self) -> bool {
        self.steps.iter().any(|s| {
            matches!(
                s,
                Step::TruncateTo { .. } | Step::TruncateFullyAndStartAt { .. }
            )
        })
    }
}

/// The local log as the steps planned so far leave it.
struct Simulated {
    lineage: EpochLineage,
    log_start: i64,
    log_end: i64,
    steps: Vec<Step>,
}

impl Simulated {
    fn new(local: &LocalLog<'_>) -> Simulated {
        let log_start = local.log_start_offset.max(0);
        Simulated {
            lineage: local.lineage.clone(),
            log_start,
            log_end: local.log_end_offset.max(log_start),
            steps: Vec::new(),
        }
    }

    /// Cuts the log at `to` (kept below it), as `kafkalog` would: a cut at
    /// or below the log start empties the log and restarts it at the
    /// source's log start.
    fn cut(&mut self, to: i64, source_log_start: i64, reason: Reason) {
        let to = to.max(0);
        if to >= self.log_end {
            self.steps.push(Step::Keep {
                at: self.log_end,
                reason,
            });
        } else if to <= self.log_start {
            let start = source_log_start.max(0);
            self.lineage.clear();
            self.log_start = start;
            self.log_end = start;
            self.steps.push(Step::TruncateFullyAndStartAt {
                cut_at: to,
                start,
                reason,
            });
        } else {
            self.lineage.truncate_from_end(to);
            self.log_end = to;
            self.steps.push(Step::TruncateTo { to, reason });
        }
    }

    fn finish(self) -> Plan {
        Plan {
            fetch_from: self.log_end,
            steps: self.steps,
        }
    }
}

/// Whether `tp` may be a mirror topic at all: internal (`__*`) and Kafka
/// Streams internal topics are refused.
pub fn check_topic(tp: &TopicPartition) -> Result<(), Refusal> {
    let kind = if kafkalog::topic::is_internal_topic(&tp.topic) {
        "internal"
    } else if kafkalog::topic::is_streams_internal_topic(&tp.topic) {
        "Kafka Streams internal"
    } else {
        return Ok(());
    };
    Err(Refusal::RefusedTopic {
        kind,
        topic: tp.topic.clone(),
    })
}

/// The identity checks every manifest passes before it is used: the same
/// topic id as the one pinned, the same source cluster as the one pinned.
pub fn check_manifest_identity(
    pinned_topic_id: TopicId,
    pinned_source: &str,
    manifest: &PartitionManifest,
) -> Result<(), Refusal> {
    if manifest.topic_id != pinned_topic_id {
        return Err(Refusal::InconsistentTopicId {
            local: pinned_topic_id.to_string(),
            source_id: manifest.topic_id.to_string(),
        });
    }
    if manifest.source_cluster_id != pinned_source {
        return Err(Refusal::SourceClusterChanged {
            pinned: pinned_source.to_string(),
            found: manifest.source_cluster_id.clone(),
        });
    }
    Ok(())
}

/// PREPARING's plan for the partition `tp` whose record is `record`, from
/// the source's `manifest` and the `local` log (see the module doc for the
/// history step's table). Refusals come first and change nothing: internal
/// topic, tiered storage, a local topic id other than the record's, a
/// manifest of another topic id or source cluster, a mirror loop.
pub fn plan_preparation(
    tp: &TopicPartition,
    record: &MirrorRecord,
    manifest: &PartitionManifest,
    local: &LocalLog<'_>,
    here: &Surroundings<'_>,
) -> Result<Plan, Refusal> {
    check_topic(tp)?;
    let tiered_config = record
        .topic_configs
        .as_ref()
        .is_some_and(crate::topic_config::is_tiered);
    if here.tiered_storage || tiered_config {
        return Err(Refusal::TieredStorage);
    }
    if let Some(local_id) = local.topic_id
        && local_id != record.topic_id
    {
        return Err(Refusal::InconsistentTopicId {
            local: local_id.to_string(),
            source_id: record.topic_id.to_string(),
        });
    }
    check_manifest_identity(record.topic_id, &record.source_cluster_id, manifest)?;
    let origin_for_us = manifest
        .mirror_origin
        .as_ref()
        .filter(|o| here.local_cluster_id == Some(o.source_cluster_id.as_str()));
    if let (Some(origin), Some(local_id)) = (origin_for_us, here.local_cluster_id)
        && origin.state != "STOPPED"
    {
        return Err(Refusal::MirrorLoop {
            local: local_id.to_string(),
            state: origin.state.clone(),
        });
    }
    let mut sim = Simulated::new(local);
    let has_records = sim.log_end > sim.log_start;
    // A source that mirrored this cluster after our stop and has stopped
    // since (the switch back after a failback) holds our history up to the
    // LME it recorded: the failback rule decides then, and cuts nothing it
    // holds, where the cut back to our stop offset would drop (and fetch
    // again) every record written here since.
    let source_mirrored_us = origin_for_us.is_some_and(|o| o.lme.is_some());
    let resumes_same_source = record.stopped_at_offset.is_some()
        && record.stopped_source_cluster_id.as_deref() == Some(manifest.source_cluster_id.as_str())
        && !source_mirrored_us;
    if has_records && resumes_same_source {
        let stopped_at = record.stopped_at_offset.unwrap_or(0);
        // The end of the LME's epoch in the local lineage: where the
        // records written after the stop (at the stop epoch) begin.
        let lme_end = record
            .lme
            .and_then(|lme| sim.lineage.end_offset_for(lme, sim.log_end))
            .map_or(stopped_at, |(_, end)| end);
        sim.cut(
            stopped_at.min(lme_end),
            manifest.log_start_offset,
            Reason::ResumeAfterStop {
                lme: record.lme,
                stopped_at_offset: stopped_at,
            },
        );
    } else if has_records && (record.lme.is_some() || record.failback_pending) {
        let lme = origin_for_us.and_then(|o| o.lme);
        let rule = LmeRule::classify(lme, &sim.lineage, sim.log_end);
        let t = lineage::truncation_point_for_lme(lme, &sim.lineage, sim.log_end);
        sim.cut(t, manifest.log_start_offset, Reason::Failback { rule });
    }
    follow(&mut sim, manifest)?;
    Ok(sim.finish())
}

/// The follower's plan against `manifest` (PREPARING after the history
/// step, and every manifest version MIRRORING applies): cut to the
/// divergence point of the local and the source's lineage, then follow the
/// source's log start. The manifest's identity must have been checked
/// ([`check_manifest_identity`]).
pub fn plan_follow(manifest: &PartitionManifest, local: &LocalLog<'_>) -> Result<Plan, Refusal> {
    let mut sim = Simulated::new(local);
    follow(&mut sim, manifest)?;
    Ok(sim.finish())
}

fn follow(sim: &mut Simulated, manifest: &PartitionManifest) -> Result<(), Refusal> {
    let remote = &manifest.lineage;
    if !sim.lineage.is_empty() && sim.log_end > sim.log_start {
        let point = lineage::divergence_point(
            &sim.lineage,
            sim.log_end,
            remote,
            manifest.shipped_end_offset,
        );
        if point < sim.log_end {
            sim.cut(
                point,
                manifest.log_start_offset,
                Reason::Divergence {
                    local_epoch: sim.lineage.latest_epoch(),
                    source_epoch: remote.latest_epoch(),
                },
            );
        }
    }
    let source_log_start = manifest.log_start_offset.max(0);
    let reason = Reason::SourceLogStart { source_log_start };
    if sim.log_end < source_log_start {
        sim.lineage.clear();
        sim.steps.push(Step::TruncateFullyAndStartAt {
            cut_at: sim.log_end,
            start: source_log_start,
            reason,
        });
        sim.log_start = source_log_start;
        sim.log_end = source_log_start;
    } else if source_log_start > sim.log_start {
        sim.lineage.truncate_from_start(source_log_start);
        sim.steps.push(Step::RaiseLogStart {
            to: source_log_start,
            reason,
        });
        sim.log_start = source_log_start;
    }
    Ok(())
}

/// STOPPING's plan (failover): see `docs/mirroring.md`, "Failover: stop".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StopPlan {
    /// The last mirrored epoch: the latest local epoch at the stop.
    pub lme: Option<i32>,
    /// The log end offset at the stop.
    pub stopped_at_offset: i64,
    /// The leader epoch the log is raised to: LME + 1 (0 for a log with no
    /// epoch).
    pub stop_epoch: i32,
    /// Whether `lme`/`stopped_at_offset` must still be recorded (a first
    /// attempt), before the log changes.
    pub record_stop: bool,
    /// Whether `stop_epoch` must still be recorded.
    pub record_stop_epoch: bool,
    /// Producers whose transactions the source left open: one ABORT marker
    /// each, at `stop_epoch`.
    pub abort: Vec<OpenTransaction>,
}

/// The failover plan from the record and the local log. A stop already
/// recorded (a retry after a crash or a failure) keeps its LME, stop offset
/// and stop epoch, so a retried failover is the same failover.
pub fn plan_stop(
    record: &MirrorRecord,
    local_latest_epoch: Option<i32>,
    log_end_offset: i64,
    open_transactions: Vec<OpenTransaction>,
) -> StopPlan {
    let (lme, stopped_at_offset, record_stop) = match record.stopped_at_offset {
        Some(at) => (record.lme, at, false),
        None => (local_latest_epoch, log_end_offset.max(0), true),
    };
    let (stop_epoch, record_stop_epoch) = match record.stop_epoch {
        Some(e) if !record_stop => (e, false),
        _ => (lme.map_or(0, |e| e.saturating_add(1)), true),
    };
    StopPlan {
        lme,
        stopped_at_offset,
        stop_epoch,
        record_stop,
        record_stop_epoch,
        abort: open_transactions,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::partition::MirrorOrigin;
    use crate::state;
    use kafkalog::checkpoint::EpochEntry;

    const SRC: &str = "cluster-b";
    const HERE: &str = "cluster-a";

    pub(crate) fn lin(entries: &[(i32, i64)]) -> EpochLineage {
        EpochLineage::from_entries(entries.iter().map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        }))
        .expect("valid lineage")
    }

    pub(crate) fn tp() -> TopicPartition {
        TopicPartition::new("orders", 0).expect("tp")
    }

    pub(crate) fn topic_id() -> TopicId {
        "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id")
    }

    /// B's manifest: `lineage`, shipped up to `end`, log start `start`,
    /// with B's record of mirroring this cluster (`origin`).
    fn manifest(
        lineage: &[(i32, i64)],
        end: i64,
        start: i64,
        origin: Option<MirrorOrigin>,
    ) -> PartitionManifest {
        let mut m = PartitionManifest::new(SRC, &tp(), topic_id());
        m.version = 7;
        m.lineage = lin(lineage);
        m.shipped_end_offset = end;
        m.source_high_watermark = end;
        m.log_start_offset = start;
        m.mirror_origin = origin;
        m
    }

    fn stopped_origin(lme: Option<i32>) -> Option<MirrorOrigin> {
        Some(MirrorOrigin {
            source_cluster_id: HERE.into(),
            state: "STOPPED".into(),
            lme,
        })
    }

    fn record() -> MirrorRecord {
        MirrorRecord::new(SRC, topic_id(), state::initial().0, 0)
    }

    /// A record of a partition that stopped mirroring `from` at `at` with
    /// `lme`, now started again (from `SRC`).
    fn stopped_record(from: &str, lme: Option<i32>, at: i64) -> MirrorRecord {
        MirrorRecord {
            lme,
            stopped_at_offset: Some(at),
            stop_epoch: Some(lme.map_or(0, |e| e + 1)),
            stopped_source_cluster_id: Some(from.into()),
            ..record()
        }
    }

    fn here() -> Surroundings<'static> {
        Surroundings {
            local_cluster_id: Some(HERE),
            tiered_storage: false,
        }
    }

    fn prepare(
        record: &MirrorRecord,
        m: &PartitionManifest,
        lineage: &[(i32, i64)],
        start: i64,
        end: i64,
    ) -> Result<Plan, Refusal> {
        let l = lin(lineage);
        plan_preparation(
            &tp(),
            record,
            m,
            &LocalLog {
                topic_id: Some(topic_id()),
                lineage: &l,
                log_start_offset: start,
                log_end_offset: end,
            },
            &here(),
        )
    }

    fn failback(rule: LmeRule) -> Reason {
        Reason::Failback { rule }
    }

    // The spec's failback table, one test per row, with A's lineage
    // {3@0, 5@40, 7@100} and LEO 130 (the spec's example).
    const A: &[(i32, i64)] = &[(3, 0), (5, 40), (7, 100)];

    #[test]
    fn failback_lme_between_two_local_epochs_cuts_at_the_first_epoch_above_it() {
        // The spec's example: B stopped at 100 with LME 5, wrote at >= 6.
        let m = manifest(
            &[(3, 0), (5, 40), (6, 100)],
            150,
            0,
            stopped_origin(Some(5)),
        );
        let r = MirrorRecord {
            lme: Some(7),
            stopped_at_offset: Some(130),
            stopped_source_cluster_id: None,
            ..record()
        };
        let plan = prepare(&r, &m, A, 0, 130).expect("plan");
        assert_eq!(
            plan.steps,
            vec![Step::TruncateTo {
                to: 100,
                reason: failback(LmeRule::BetweenLocalEpochs {
                    lme: 5,
                    next_epoch: 7
                }),
            }]
        );
        assert_eq!(plan.fetch_from, 100);
        assert!(plan.steps[0].to_string().contains("truncate to 100"));
        assert!(plan.steps[0].to_string().contains("rule: between"));
    }

    #[test]
    fn failback_lme_equal_to_the_latest_local_epoch_cuts_nothing_then_the_follower_step_cuts() {
        // A kept writing at epoch 7 after B stopped at 120 with LME 7.
        let m = manifest(
            &[(3, 0), (5, 40), (7, 100), (8, 120)],
            150,
            0,
            stopped_origin(Some(7)),
        );
        let r = MirrorRecord {
            failback_pending: true,
            ..record()
        };
        let plan = prepare(&r, &m, A, 0, 130).expect("plan");
        assert_eq!(
            plan.steps,
            vec![
                Step::Keep {
                    at: 130,
                    reason: failback(LmeRule::LatestLocalEpoch { lme: 7 }),
                },
                Step::TruncateTo {
                    to: 120,
                    reason: Reason::Divergence {
                        local_epoch: Some(7),
                        source_epoch: Some(8)
                    },
                },
            ]
        );
        assert_eq!(plan.fetch_from, 120);
    }

    #[test]
    fn failback_lme_above_every_local_epoch_wipes_and_copies_everything() {
        let m = manifest(&[(3, 0), (9, 40)], 150, 0, stopped_origin(Some(9)));
        let r = MirrorRecord {
            failback_pending: true,
            ..record()
        };
        let plan = prepare(&r, &m, A, 0, 130).expect("plan");
        assert_eq!(
            plan.steps,
            vec![Step::TruncateFullyAndStartAt {
                cut_at: 0,
                start: 0,
                reason: failback(LmeRule::AboveEveryLocalEpoch { lme: 9 }),
            }]
        );
        assert_eq!(plan.fetch_from, 0);
    }

    #[test]
    fn failback_lme_below_the_oldest_local_epoch_cuts_at_the_oldest_epochs_start() {
        // A's log starts at 20 (retention) with its oldest epoch 3.
        let m = manifest(&[(1, 0), (2, 10)], 150, 0, stopped_origin(Some(2)));
        let r = MirrorRecord {
            failback_pending: true,
            ..record()
        };
        let plan = prepare(&r, &m, &[(3, 20), (5, 40)], 20, 60).expect("plan");
        // T = 20 = the local log start: the log restarts at B's log start.
        assert_eq!(
            plan.steps,
            vec![Step::TruncateFullyAndStartAt {
                cut_at: 20,
                start: 0,
                reason: failback(LmeRule::BelowOldestLocalEpoch {
                    lme: 2,
                    oldest_epoch: 3
                }),
            }]
        );
    }

    #[test]
    fn failback_with_lme_unknown_cuts_to_zero() {
        // B never mirrored this cluster: no origin naming it.
        let m = manifest(&[(0, 0)], 50, 0, None);
        let r = MirrorRecord {
            failback_pending: true,
            ..record()
        };
        let plan = prepare(&r, &m, A, 0, 130).expect("plan");
        assert_eq!(
            plan.steps,
            vec![Step::TruncateFullyAndStartAt {
                cut_at: 0,
                start: 0,
                reason: failback(LmeRule::Unknown),
            }]
        );
        // An origin naming another cluster is not ours either.
        let other = Some(MirrorOrigin {
            source_cluster_id: "cluster-z".into(),
            state: "STOPPED".into(),
            lme: Some(5),
        });
        let m = manifest(&[(0, 0)], 50, 0, other);
        let plan = prepare(&r, &m, A, 0, 130).expect("plan");
        assert!(matches!(
            plan.steps[0],
            Step::TruncateFullyAndStartAt {
                reason: Reason::Failback {
                    rule: LmeRule::Unknown
                },
                ..
            }
        ));
    }

    #[test]
    fn the_lme_rule_agrees_with_the_lineage_truncation_point() {
        let local = lin(A);
        for lme in [
            None,
            Some(-1),
            Some(0),
            Some(3),
            Some(4),
            Some(5),
            Some(6),
            Some(7),
            Some(8),
        ] {
            let t = lineage::truncation_point_for_lme(lme, &local, 130);
            let want = match LmeRule::classify(lme, &local, 130) {
                LmeRule::Unknown | LmeRule::AboveEveryLocalEpoch { .. } => 0,
                LmeRule::LatestLocalEpoch { .. } => 130,
                LmeRule::BetweenLocalEpochs { next_epoch, .. } => local
                    .entries()
                    .iter()
                    .find(|e| e.epoch == next_epoch)
                    .map_or(-1, |e| e.start_offset),
                LmeRule::BelowOldestLocalEpoch { .. } => 0,
            };
            assert_eq!(t, want, "lme {lme:?}");
        }
    }

    #[test]
    fn resuming_from_the_same_source_cuts_only_what_was_written_after_the_stop() {
        // Stopped at 500 with LME 4 (stop epoch 5); local writes 500..503
        // at epoch 5 (abort markers and a produce).
        let m = manifest(&[(0, 0), (4, 200)], 520, 0, None);
        let r = stopped_record(SRC, Some(4), 500);
        let plan = prepare(&r, &m, &[(0, 0), (4, 200), (5, 500)], 0, 503).expect("plan");
        assert_eq!(
            plan.steps,
            vec![Step::TruncateTo {
                to: 500,
                reason: Reason::ResumeAfterStop {
                    lme: Some(4),
                    stopped_at_offset: 500
                },
            }]
        );
        assert_eq!(plan.fetch_from, 500);
    }

    #[test]
    fn resuming_from_the_same_source_then_follows_a_source_that_diverged() {
        // The source truncated at 450 (unclean election) and wrote epoch 6.
        let m = manifest(&[(0, 0), (4, 200), (6, 450)], 520, 0, None);
        let r = stopped_record(SRC, Some(4), 500);
        let plan = prepare(&r, &m, &[(0, 0), (4, 200), (5, 500)], 0, 503).expect("plan");
        assert_eq!(plan.fetch_from, 450);
        assert_eq!(plan.steps.len(), 2);
        assert!(matches!(
            plan.steps[1],
            Step::TruncateTo {
                to: 450,
                reason: Reason::Divergence { .. }
            }
        ));
    }

    #[test]
    fn switching_back_to_a_source_that_mirrored_our_writes_cuts_nothing() {
        // This cluster stopped mirroring SRC at 100 (LME 0) and wrote
        // 100..120 at epoch 1; SRC mirrored them (failback), stopped at 120
        // with LME 1 and wrote at epoch 2. Starting from SRC again keeps
        // 0..120 (SRC holds it identically) and fetches from 120.
        let m = manifest(
            &[(0, 0), (1, 100), (2, 120)],
            130,
            0,
            stopped_origin(Some(1)),
        );
        let r = stopped_record(SRC, Some(0), 100);
        let plan = prepare(&r, &m, &[(0, 0), (1, 100)], 0, 120).expect("plan");
        assert!(
            plan.steps
                .iter()
                .all(|s| !matches!(s, Step::TruncateTo { to, .. } if *to < 120)),
            "{:?}",
            plan.steps
        );
        assert_eq!(plan.fetch_from, 120);
        // Writes here after SRC stopped mirroring us (120..125 at epoch 1)
        // are cut by the follower step, to where SRC's epoch 1 ends.
        let plan = prepare(&r, &m, &[(0, 0), (1, 100)], 0, 125).expect("plan");
        assert_eq!(plan.fetch_from, 120);
        assert!(matches!(
            plan.steps.last(),
            Some(Step::TruncateTo {
                to: 120,
                reason: Reason::Divergence { .. }
            })
        ));
    }

    #[test]
    fn a_stop_from_another_source_is_a_failback_not_a_resume() {
        let m = manifest(
            &[(3, 0), (5, 40), (6, 100)],
            150,
            0,
            stopped_origin(Some(5)),
        );
        let r = stopped_record("cluster-z", Some(7), 130);
        let plan = prepare(&r, &m, A, 0, 130).expect("plan");
        assert!(matches!(
            plan.steps[0],
            Step::TruncateTo {
                to: 100,
                reason: Reason::Failback { .. }
            }
        ));
    }

    #[test]
    fn a_new_mirror_of_an_empty_log_cuts_nothing_and_starts_at_the_source_log_start() {
        let m = manifest(&[(0, 0)], 100, 40, None);
        let plan = prepare(&record(), &m, &[], 0, 0).expect("plan");
        assert_eq!(
            plan.steps,
            vec![Step::TruncateFullyAndStartAt {
                cut_at: 0,
                start: 40,
                reason: Reason::SourceLogStart {
                    source_log_start: 40
                },
            }]
        );
        assert_eq!(plan.fetch_from, 40);
    }

    #[test]
    fn the_source_log_start_passing_the_local_log_end_restarts_there() {
        // Behaviour 7: destination LEO 50, source log start 80.
        let m = manifest(&[(0, 0)], 100, 80, None);
        let l = lin(&[(0, 0)]);
        let local = LocalLog {
            topic_id: Some(topic_id()),
            lineage: &l,
            log_start_offset: 0,
            log_end_offset: 50,
        };
        let plan = plan_follow(&m, &local).expect("plan");
        assert_eq!(
            plan.steps,
            vec![Step::TruncateFullyAndStartAt {
                cut_at: 50,
                start: 80,
                reason: Reason::SourceLogStart {
                    source_log_start: 80
                },
            }]
        );
        assert_eq!(plan.fetch_from, 80);
        // Below the local log end: the log start is raised, nothing cut.
        let m = manifest(&[(0, 0)], 100, 30, None);
        let plan = plan_follow(&m, &local).expect("plan");
        assert_eq!(
            plan.steps,
            vec![Step::RaiseLogStart {
                to: 30,
                reason: Reason::SourceLogStart {
                    source_log_start: 30
                },
            }]
        );
        assert_eq!(plan.fetch_from, 50);
    }

    #[test]
    fn a_source_unclean_truncation_is_followed_to_the_divergence_point() {
        // Behaviour 8: local 0..100 at {0@0, 2@30, 3@70}; the source cut at
        // 90 and wrote epoch 4 from there.
        let m = manifest(&[(0, 0), (2, 30), (3, 70), (4, 90)], 120, 0, None);
        let l = lin(&[(0, 0), (2, 30), (3, 70)]);
        let local = LocalLog {
            topic_id: None,
            lineage: &l,
            log_start_offset: 0,
            log_end_offset: 100,
        };
        let plan = plan_follow(&m, &local).expect("plan");
        assert_eq!(plan.fetch_from, 90);
        assert!(plan.truncates());
        // A local log the source contains: nothing to do.
        let m = manifest(&[(0, 0), (2, 30), (3, 70)], 120, 0, None);
        let plan = plan_follow(&m, &local).expect("plan");
        assert_eq!(plan.steps, vec![]);
        assert_eq!(plan.fetch_from, 100);
    }

    #[test]
    fn refusals_change_nothing_and_name_the_reason() {
        let m = manifest(&[(0, 0)], 100, 0, None);
        // Internal and Streams internal topics.
        for topic in [
            "__consumer_offsets",
            "app-store-changelog",
            "app-x-repartition",
        ] {
            let t = TopicPartition::new(topic, 0).expect("tp");
            let l = lin(&[]);
            let e = plan_preparation(
                &t,
                &record(),
                &m,
                &LocalLog {
                    topic_id: None,
                    lineage: &l,
                    log_start_offset: 0,
                    log_end_offset: 0,
                },
                &here(),
            )
            .expect_err("refused");
            assert!(matches!(e, Refusal::RefusedTopic { .. }), "{topic}: {e}");
        }
        // Tiered storage.
        let l = lin(&[]);
        let local = LocalLog {
            topic_id: None,
            lineage: &l,
            log_start_offset: 0,
            log_end_offset: 0,
        };
        let tiered = Surroundings {
            tiered_storage: true,
            ..here()
        };
        assert_eq!(
            plan_preparation(&tp(), &record(), &m, &local, &tiered),
            Err(Refusal::TieredStorage)
        );
        // Tiered storage by the topic's configs on the destination (the
        // ones the record holds); `false` there is not tiered.
        let configs = |v: &str| MirrorRecord {
            topic_configs: Some(
                [(
                    "remote.storage.enable".to_string(),
                    crate::topic_config::ConfigValue {
                        value: v.into(),
                        source: crate::topic_config::ConfigSource::Topic,
                    },
                )]
                .into_iter()
                .collect(),
            ),
            ..record()
        };
        assert_eq!(
            plan_preparation(&tp(), &configs("true"), &m, &local, &here()),
            Err(Refusal::TieredStorage)
        );
        assert!(plan_preparation(&tp(), &configs("false"), &m, &local, &here()).is_ok());
        // A local topic id other than the source's.
        let other: TopicId = "AAAAAAAAAAAAAAAAAAAAAQ".parse().expect("id");
        let mismatched = LocalLog {
            topic_id: Some(other),
            ..local
        };
        assert!(matches!(
            plan_preparation(&tp(), &record(), &m, &mismatched, &here()),
            Err(Refusal::InconsistentTopicId { .. })
        ));
        // A manifest of another source cluster than the pinned one.
        let mut moved = m.clone();
        moved.source_cluster_id = "cluster-z".into();
        let e = plan_preparation(&tp(), &record(), &moved, &local, &here()).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "source cluster id changed: mirror pinned to cluster-b, bucket has cluster-z"
        );
        // A mirror loop: B's copy mirrors this cluster and is not stopped.
        let looped = manifest(
            &[(0, 0)],
            100,
            0,
            Some(MirrorOrigin {
                source_cluster_id: HERE.into(),
                state: "MIRRORING".into(),
                lme: None,
            }),
        );
        assert!(matches!(
            plan_preparation(&tp(), &record(), &looped, &local, &here()),
            Err(Refusal::MirrorLoop { .. })
        ));
    }

    #[test]
    fn a_stop_records_the_lme_and_raises_the_epoch_above_it_and_a_retry_keeps_them() {
        let txn = OpenTransaction {
            producer_id: 7,
            producer_epoch: 0,
            first_offset: 90,
        };
        let plan = plan_stop(&record(), Some(3), 100, vec![txn]);
        assert_eq!(plan.lme, Some(3));
        assert_eq!(plan.stopped_at_offset, 100);
        assert_eq!(plan.stop_epoch, 4);
        assert!(plan.record_stop && plan.record_stop_epoch);
        assert_eq!(plan.abort, vec![txn]);
        // The retry after a crash: the log end moved (abort markers), the
        // recorded stop stays.
        let r = MirrorRecord {
            lme: Some(3),
            stopped_at_offset: Some(100),
            stop_epoch: Some(4),
            ..record()
        };
        let plan = plan_stop(&r, Some(4), 101, vec![]);
        assert_eq!(
            (plan.lme, plan.stopped_at_offset, plan.stop_epoch),
            (Some(3), 100, 4)
        );
        assert!(!plan.record_stop && !plan.record_stop_epoch);
        // A log with no epoch stops at epoch 0.
        assert_eq!(plan_stop(&record(), None, 0, vec![]).stop_epoch, 0);
    }

    proptest::proptest! {
        #[test]
        fn plans_never_cut_above_the_log_end_nor_fetch_below_the_source_log_start(
            local_epochs in proptest::collection::btree_map(0i32..12, 0i64..200, 0..5),
            remote_epochs in proptest::collection::btree_map(0i32..12, 0i64..200, 0..5),
            leo in 0i64..250,
            start in 0i64..100,
            source_start in 0i64..150,
            lme in proptest::option::of(0i32..12),
            pending in proptest::bool::ANY,
        ) {
            let sorted = |m: &std::collections::BTreeMap<i32, i64>| {
                let mut starts: Vec<i64> = m.values().copied().collect();
                starts.sort_unstable();
                starts.dedup();
                m.keys().copied().zip(starts).collect::<Vec<_>>()
            };
            let local = lin(&sorted(&local_epochs));
            let start = start.min(leo);
            let m = manifest(&sorted(&remote_epochs), 250, source_start, stopped_origin(lme));
            let r = MirrorRecord { failback_pending: pending, ..record() };
            let plan = plan_preparation(&tp(), &r, &m, &LocalLog {
                topic_id: None,
                lineage: &local,
                log_start_offset: start,
                log_end_offset: leo,
            }, &here()).expect("plan");
            proptest::prop_assert!(plan.fetch_from >= source_start);
            let mut end = leo;
            for s in &plan.steps {
                match s {
                    Step::TruncateTo { to, .. } => {
                        proptest::prop_assert!(*to < end && *to >= 0);
                        end = *to;
                    }
                    Step::TruncateFullyAndStartAt { start, .. } => end = *start,
                    Step::Keep { at, .. } => proptest::prop_assert_eq!(*at, end),
                    Step::RaiseLogStart { to, .. } => proptest::prop_assert!(*to <= end),
                }
            }
            proptest::prop_assert_eq!(plan.fetch_from, end);
        }
    }
}
