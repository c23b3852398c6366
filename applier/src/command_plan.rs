//! Operator commands (`applier start|pause|resume|stop`) planned in pure
//! code: which partitions a command names ([`resolve`]), and what `start`
//! does to a mirror partition's source pin and its own records
//! ([`plan_start`]). The engine performs the plans; `applier plan` shows
//! the same ones.
//!
//! Target resolution: `--all` is every mirror partition here; a topic is
//! its mirror partitions, or, for `start` when it has none, the feed's
//! live partitions of that topic (adopted). A topic with a partition that
//! cannot be opened, or with no partition at all, refuses the whole
//! command (one outcome naming it; nothing changed).
//!
//! `start`'s pin rules (state x source pin; "other" is a configured source
//! that differs from the pinned one):
//!
//! | state | same source | other source |
//! | --- | --- | --- |
//! | STOPPED, FAILED | the record pinned to the configured source and the feed's topic id ([`Repin::InRecord`]), unless the log holds records of another topic id than the feed's (the source topic was recreated): refused | the same, no refusal |
//! | PREPARING | nothing to pin | pinned now ([`Repin::Now`]), unless the log holds records of another topic id: refused |
//! | MIRRORING, PAUSED | nothing to pin | refused: stop (failover) first |
//! | STOPPING | nothing (the transition refuses it) | the same |
//!
//! A repinning start of a partition whose own records are at stake
//! (`manifest::cut::at_stake`) is refused when its preparation would cut
//! some of them and that is not allowed (`manifest::cut`, through
//! `mirror::check_cut`), or when the source's manifest cannot be read and
//! a cut cannot be ruled out. A refused start changes nothing.

use kafkalog::{TopicId, TopicPartition};
use manifest::mirror_record::{Cut, MirrorRecord};
use manifest::partition::PartitionManifest;
use manifest::reconcile::LocalLog;
use manifest::state::{Command, PartitionState};

use crate::mirror::MirrorContext;

/// The outcome of one command on one partition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommandOutcome {
    /// The partition.
    pub partition: String,
    /// Its state afterwards, when the command was accepted.
    pub state: Option<String>,
    /// Why it was refused.
    pub error: Option<String>,
}

/// What a command can name, as values.
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    /// The mirror partitions here, open.
    pub mirrors: &'a [TopicPartition],
    /// Mirror partitions that cannot be opened, with the error.
    pub unopened: &'a [(TopicPartition, String)],
    /// The feed's live (not deleted) partitions.
    pub in_feed: &'a [TopicPartition],
}

/// The partitions `command` applies to (see the module doc), or the one
/// outcome that refuses it.
pub fn resolve(
    command: Command,
    targets: &[String],
    all: bool,
    known: Known<'_>,
) -> Result<Vec<TopicPartition>, CommandOutcome> {
    if all {
        return Ok(known.mirrors.to_vec());
    }
    let mut tps = Vec::new();
    for t in targets {
        let mut found: Vec<TopicPartition> = known
            .mirrors
            .iter()
            .filter(|tp| &tp.topic == t)
            .cloned()
            .collect();
        let unopened: Vec<String> = known
            .unopened
            .iter()
            .filter(|(tp, _)| &tp.topic == t)
            .map(|(tp, e)| format!("{tp}: {e}"))
            .collect();
        if !unopened.is_empty() {
            return Err(CommandOutcome {
                partition: t.clone(),
                state: Some(PartitionState::Failed.as_str().to_string()),
                error: Some(format!(
                    "cannot open the mirror partition(s) of {t:?}: {}",
                    unopened.join("; ")
                )),
            });
        }
        if found.is_empty() && command == Command::Start {
            found.extend(known.in_feed.iter().filter(|tp| &tp.topic == t).cloned());
        }
        if found.is_empty() {
            return Err(CommandOutcome {
                partition: t.clone(),
                state: None,
                error: Some(format!(
                    "topic {t:?} has no mirror partition here{}",
                    if command == Command::Start {
                        " and none in the source's bucket"
                    } else {
                        ""
                    }
                )),
            });
        }
        tps.extend(found);
    }
    Ok(tps)
}

/// How a `start` changes a mirror partition's source pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repin {
    /// No change.
    Keep,
    /// The record names the configured source and the feed's topic id; the
    /// start's transition writes it (STOPPED, FAILED).
    InRecord,
    /// Pinned now, guard and record (PREPARING, nothing mirrored yet).
    Now,
}

/// What `start` does to one mirror partition before its transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartPlan {
    /// The pin change.
    pub repin: Repin,
    /// The topic id to write into a log that holds no record yet (it goes
    /// with the pin).
    pub write_topic_id: Option<TopicId>,
    /// Whether the record's `pending_cut` and `truncate_allowed` are set
    /// (to [`StartPlan::cut`] and the permission): a repinning start.
    pub records_cut: bool,
    /// What the preparation cuts of the partition's own records (allowed).
    pub cut: Option<Cut>,
}

/// Why `start` refuses a mirror partition (nothing was changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartRefusal {
    /// PREPARING for another source, its log holding records of another
    /// topic id.
    #[error(
        "holds records of topic id {local} (offsets {log_start}..{last}), not of {configured}'s topic id {id}: a mirror of {configured} cannot adopt them; nothing was changed"
    )]
    OtherTopicId {
        /// The local log's topic id.
        local: TopicId,
        /// The local log start.
        log_start: i64,
        /// The local log's last offset.
        last: i64,
        /// The configured source.
        configured: String,
        /// The feed's topic id.
        id: TopicId,
    },
    /// STOPPED or FAILED, its log holding records of the topic id its
    /// source's feed no longer names: the source topic was recreated.
    #[error(
        "holds records of topic id {local} (offsets {log_start}..{last}), but the source's topic now has id {id}: the source topic was recreated, and the new topic's records are never appended to the old one's; nothing was changed (to mirror the new topic, stop the applier, remove the partition dir and start it again)"
    )]
    SourceRecreated {
        /// The local log's topic id.
        local: TopicId,
        /// The local log start.
        log_start: i64,
        /// The local log's last offset.
        last: i64,
        /// The feed's topic id.
        id: TopicId,
    },
    /// MIRRORING or PAUSED for another source.
    #[error(
        "mirrors source cluster {pinned}, not {configured}: a partition that has begun mirroring keeps its source; run `applier stop` (failover) first, then `applier start` to mirror {configured}"
    )]
    KeepsSource {
        /// The pinned source.
        pinned: String,
        /// The configured source.
        configured: String,
    },
    /// Its preparation would cut records of its own (or is refused).
    #[error("{0}")]
    WouldCut(manifest::reconcile::Refusal),
    /// Records of its own are at stake and the source's manifest cannot
    /// be read.
    #[error(
        "{state} with records of its own up to offset {log_end}, and the source's manifest of {tp} cannot be read, so what start would cut is not known; nothing was changed (let the source ship it first, or give --allow-truncate to cut on purpose)"
    )]
    CutUnknown {
        /// Its state.
        state: PartitionState,
        /// The local log end.
        log_end: i64,
        /// The partition.
        tp: TopicPartition,
    },
}

/// What `start` looks at for one mirror partition.
#[derive(Debug, Clone, Copy)]
pub struct StartInput<'a> {
    /// The partition.
    pub tp: &'a TopicPartition,
    /// Its record.
    pub record: &'a MirrorRecord,
    /// The configured source cluster (empty: none).
    pub source: &'a str,
    /// The topic id the feed names for it, if any.
    pub feed_topic_id: Option<TopicId>,
    /// The local log.
    pub local: &'a LocalLog<'a>,
    /// The source's manifest, when it could be read (only read when
    /// records of its own are at stake).
    pub manifest: Option<&'a PartitionManifest>,
    /// Where the applier runs (for the cut's plan).
    pub ctx: &'a MirrorContext,
    /// Whether cutting records of its own is allowed.
    pub allowed: bool,
}

/// The refusal of `start` of a STOPPED or FAILED partition of the same
/// source whose log holds records of another topic id than the one the
/// feed names now (the source topic was recreated), if that is the case;
/// `applier plan` shows the same.
pub fn recreated_refusal(
    state: PartitionState,
    feed_topic_id: Option<TopicId>,
    local: &LocalLog<'_>,
) -> Option<StartRefusal> {
    let (log_start, log_end) = (local.log_start_offset, local.log_end_offset);
    let id = feed_topic_id?;
    let other = local.topic_id.filter(|l| *l != id)?;
    (matches!(state, PartitionState::Stopped | PartitionState::Failed) && log_end > log_start)
        .then_some(StartRefusal::SourceRecreated {
            local: other,
            log_start,
            last: log_end - 1,
            id,
        })
}

/// `start`'s plan for a mirror partition, or why it is refused (see the
/// module doc).
pub fn plan_start(i: &StartInput<'_>) -> Result<StartPlan, StartRefusal> {
    use PartitionState as S;
    let source = i.source;
    let pinned = i.record.source_cluster_id.as_str();
    let other_source = !source.is_empty() && pinned != source;
    let state = i.record.state.state();
    let (log_start, log_end) = (i.local.log_start_offset, i.local.log_end_offset);
    let repins = matches!(state, S::Stopped | S::Failed) || (state == S::Preparing && other_source);
    if state == S::Preparing
        && other_source
        && let Some(id) = i.feed_topic_id
        && let Some(local) = i.local.topic_id.filter(|local| *local != id)
        && log_end > log_start
    {
        return Err(StartRefusal::OtherTopicId {
            local,
            log_start,
            last: log_end - 1,
            configured: source.to_string(),
            id,
        });
    }
    if !other_source && let Some(refusal) = recreated_refusal(state, i.feed_topic_id, i.local) {
        return Err(refusal);
    }
    if matches!(state, S::Mirroring | S::Paused) && other_source {
        return Err(StartRefusal::KeepsSource {
            pinned: pinned.to_string(),
            configured: source.to_string(),
        });
    }
    if !repins {
        return Ok(StartPlan {
            repin: Repin::Keep,
            write_topic_id: None,
            records_cut: false,
            cut: None,
        });
    }
    let mut cut = None;
    if manifest::cut::at_stake(i.record) {
        let mut would = i.record.clone();
        would.source_cluster_id = source.to_string();
        if let Some(id) = i.feed_topic_id {
            would.topic_id = id;
        }
        cut = match i.manifest {
            Some(m) => crate::mirror::check_cut(i.tp, &would, m, i.local, i.ctx, i.allowed)
                .map_err(StartRefusal::WouldCut)?,
            None if i.allowed || !manifest::cut::unknown_cut_at_stake(&would, log_end) => None,
            None => {
                return Err(StartRefusal::CutUnknown {
                    state,
                    log_end,
                    tp: i.tp.clone(),
                });
            }
        };
    }
    Ok(StartPlan {
        repin: if state == S::Preparing {
            Repin::Now
        } else {
            Repin::InRecord
        },
        write_topic_id: i
            .feed_topic_id
            .filter(|id| i.local.topic_id != Some(*id) && log_end == log_start),
        records_cut: true,
        cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::epoch::EpochLineage;
    use manifest::state::MirrorState;

    const ID: TopicId = TopicId::from_bytes([7; 16]);
    const OTHER: TopicId = TopicId::from_bytes([8; 16]);

    fn tp(topic: &str, p: i32) -> TopicPartition {
        TopicPartition::new(topic, p).expect("tp")
    }

    fn known<'a>(
        mirrors: &'a [TopicPartition],
        unopened: &'a [(TopicPartition, String)],
        in_feed: &'a [TopicPartition],
    ) -> Known<'a> {
        Known {
            mirrors,
            unopened,
            in_feed,
        }
    }

    #[test]
    fn all_names_every_open_mirror_partition() {
        let m = [tp("a", 0), tp("b", 1)];
        let got = resolve(Command::Stop, &[], true, known(&m, &[], &[])).expect("ok");
        assert_eq!(got, m.to_vec());
    }

    #[test]
    fn a_topic_names_its_mirror_partitions() {
        let m = [tp("a", 0), tp("a", 1), tp("b", 0)];
        let got = resolve(Command::Pause, &["a".into()], false, known(&m, &[], &[])).expect("ok");
        assert_eq!(got, vec![tp("a", 0), tp("a", 1)]);
    }

    #[test]
    fn start_of_a_topic_with_no_mirror_names_the_feeds_partitions() {
        let feed = [tp("a", 0), tp("b", 0)];
        let got = resolve(Command::Start, &["b".into()], false, known(&[], &[], &feed));
        assert_eq!(got.expect("ok"), vec![tp("b", 0)]);
    }

    #[test]
    fn stop_of_a_topic_with_no_mirror_is_refused() {
        let feed = [tp("b", 0)];
        let e = resolve(Command::Stop, &["b".into()], false, known(&[], &[], &feed))
            .expect_err("refused");
        assert_eq!(
            e.error.as_deref(),
            Some("topic \"b\" has no mirror partition here")
        );
    }

    #[test]
    fn start_of_a_topic_nowhere_is_refused() {
        let e = resolve(Command::Start, &["x".into()], false, known(&[], &[], &[]))
            .expect_err("refused");
        assert_eq!(
            e.error.as_deref(),
            Some("topic \"x\" has no mirror partition here and none in the source's bucket")
        );
    }

    #[test]
    fn a_topic_with_an_unopened_partition_refuses_the_command() {
        let m = [tp("a", 0)];
        let u = [(tp("a", 1), "permission denied".to_string())];
        let e =
            resolve(Command::Stop, &["a".into()], false, known(&m, &u, &[])).expect_err("refused");
        assert_eq!(e.state.as_deref(), Some("FAILED"));
        assert!(
            e.error
                .as_deref()
                .is_some_and(|e| e.contains("a-1: permission denied")),
            "{e:?}"
        );
    }

    fn record(state: PartitionState, source: &str) -> MirrorRecord {
        use manifest::state::{Event, next};
        let events: &[Event] = match state {
            PartitionState::Preparing => &[],
            PartitionState::Mirroring => &[Event::Prepared],
            PartitionState::Paused => &[Event::Prepared, Event::Pause],
            PartitionState::Stopping => &[Event::Stop],
            PartitionState::Stopped => &[Event::Stop, Event::Stopped],
            PartitionState::Failed => &[Event::Error {
                message: "boom".into(),
                retryable: false,
            }],
        };
        let mut s: MirrorState = manifest::state::initial().0;
        for e in events {
            s = next(&s, e.clone()).expect("transition").0;
        }
        crate::mirror::new_record(source, ID, s)
    }

    fn ctx() -> MirrorContext {
        MirrorContext {
            local_cluster_id: None,
            tiered_storage: false,
            prefetch: 1,
            download_memory: 1,
            stream_above: 1,
            allow_truncate: false,
            config_filter: std::sync::Arc::default(),
        }
    }

    fn start(
        r: &MirrorRecord,
        feed: Option<TopicId>,
        local_id: Option<TopicId>,
        end: i64,
        allowed: bool,
    ) -> Result<StartPlan, String> {
        let lineage = EpochLineage::default();
        let local = LocalLog {
            topic_id: local_id,
            lineage: &lineage,
            log_start_offset: 0,
            log_end_offset: end,
        };
        let t = tp("orders", 0);
        let c = ctx();
        plan_start(&StartInput {
            tp: &t,
            record: r,
            source: "src",
            feed_topic_id: feed,
            local: &local,
            manifest: None,
            ctx: &c,
            allowed,
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn start_of_a_stopped_partition_repins_in_the_record() {
        let p = start(
            &record(PartitionState::Stopped, "src"),
            Some(ID),
            Some(ID),
            0,
            false,
        );
        let p = p.expect("ok");
        assert_eq!(p.repin, Repin::InRecord);
        assert!(p.records_cut);
        assert_eq!(p.write_topic_id, None);
    }

    #[test]
    fn start_of_a_failed_partition_repins_in_the_record() {
        let p = start(
            &record(PartitionState::Failed, "other"),
            Some(ID),
            Some(ID),
            0,
            false,
        );
        assert_eq!(p.expect("ok").repin, Repin::InRecord);
    }

    #[test]
    fn start_of_a_stopped_or_failed_partition_whose_source_topic_was_recreated_is_refused() {
        for state in [PartitionState::Stopped, PartitionState::Failed] {
            let e =
                start(&record(state, "src"), Some(OTHER), Some(ID), 5, true).expect_err("refused");
            assert!(
                e.contains("the source topic was recreated") && e.contains("offsets 0..4"),
                "{e}"
            );
        }
    }

    #[test]
    fn start_of_a_partition_of_another_topic_id_with_an_empty_log_takes_the_feeds_id() {
        let p = start(
            &record(PartitionState::Stopped, "src"),
            Some(OTHER),
            Some(ID),
            0,
            false,
        );
        assert_eq!(p.expect("ok").write_topic_id, Some(OTHER));
    }

    #[test]
    fn start_of_a_failed_partition_of_another_source_and_topic_id_is_left_to_the_preparation() {
        let p = start(
            &record(PartitionState::Failed, "other"),
            Some(OTHER),
            Some(ID),
            5,
            true,
        );
        assert_eq!(p.expect("ok").repin, Repin::InRecord);
    }

    #[test]
    fn start_of_a_preparing_partition_of_the_same_source_keeps_its_pin() {
        let p = start(
            &record(PartitionState::Preparing, "src"),
            Some(ID),
            None,
            0,
            false,
        );
        assert_eq!(p.expect("ok").repin, Repin::Keep);
    }

    #[test]
    fn start_of_a_preparing_partition_of_another_source_repins_now() {
        let p = start(
            &record(PartitionState::Preparing, "old"),
            Some(ID),
            None,
            0,
            false,
        );
        let p = p.expect("ok");
        assert_eq!(p.repin, Repin::Now);
        assert_eq!(
            p.write_topic_id,
            Some(ID),
            "an empty log takes the feed's id"
        );
    }

    #[test]
    fn start_of_a_preparing_partition_holding_another_topic_ids_records_is_refused() {
        let e = start(
            &record(PartitionState::Preparing, "old"),
            Some(ID),
            Some(OTHER),
            5,
            false,
        )
        .expect_err("refused");
        assert!(e.contains("holds records of topic id"), "{e}");
    }

    #[test]
    fn start_of_a_mirroring_partition_of_another_source_is_refused() {
        let e = start(
            &record(PartitionState::Mirroring, "old"),
            Some(ID),
            Some(ID),
            5,
            false,
        )
        .expect_err("refused");
        assert!(e.contains("run `applier stop` (failover) first"), "{e}");
    }

    #[test]
    fn start_of_a_paused_partition_of_another_source_is_refused() {
        let e = start(
            &record(PartitionState::Paused, "old"),
            Some(ID),
            Some(ID),
            5,
            false,
        )
        .expect_err("refused");
        assert!(e.contains("keeps its source"), "{e}");
    }

    #[test]
    fn start_of_a_mirroring_partition_of_the_same_source_changes_nothing() {
        let p = start(
            &record(PartitionState::Mirroring, "src"),
            Some(ID),
            Some(ID),
            5,
            false,
        );
        assert_eq!(p.expect("ok").repin, Repin::Keep);
    }

    #[test]
    fn start_with_records_at_stake_and_no_manifest_is_refused_unless_allowed() {
        let mut r = record(PartitionState::Stopped, "src");
        r.stopped_at_offset = Some(5);
        r.stopped_source_cluster_id = Some("src".into());
        // Records written after the stop: a cut cannot be ruled out.
        let e = start(&r, Some(ID), Some(ID), 9, false).expect_err("refused");
        assert!(e.contains("cannot be read"), "{e}");
        assert!(start(&r, Some(ID), Some(ID), 9, true).is_ok());
        // Nothing written since the stop: nothing of its own to cut.
        assert!(start(&r, Some(ID), Some(ID), 5, false).is_ok());
    }
}
