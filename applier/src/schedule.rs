//! What each mirror partition does next: a pure function of a value
//! snapshot, as `manifest::state::next` says how a state changes.
//!
//! Each cycle the engine builds a [`View`] of the partitions that changed
//! since the last one (a feed change, a command, an append, a transition,
//! a failure, a retry that is due; see `engine`), and [`schedule`] returns
//! each one's [`Work`]. `applier plan` builds the same view from the log
//! dir and the bucket and calls the same function, so a dry run and a run
//! cannot disagree.
//!
//! The rules, one per state (the table tests below hold one row each):
//!
//! | state | work |
//! | --- | --- |
//! | PREPARING | [`Work::Prepare`] (waits without a bucket); the feed names another topic id: [`Work::SourceRecreated`] |
//! | MIRRORING | [`Work::Apply`] the feed's version unless caught up; caught up with retries counted: [`Work::Progressed`]; no feed entry: wait; the feed names another topic id: [`Work::SourceRecreated`] |
//! | STOPPING | [`Work::Failover`] (needs no bucket) |
//! | FAILED, retryable | [`Work::Retry`] once its retry time has come, else wait for it |
//! | PAUSED, STOPPED, FAILED (not retryable) | [`Work::Idle`] |
//!
//! Invariants:
//! - "Caught up" has one definition, [`caught_up`]: the cached manifest is
//!   the feed's version of the partition's topic id, the record says it was
//!   applied, the log reaches its shipped end, and no retry is counted.
//! - A partition is *settled* (left out of the next cycle's view until
//!   something changes it) exactly when its work is [`Work::Idle`] or a
//!   wait that no cycle can end ([`Wait::NoBucket`]), its write guard
//!   matches its state, no action error is shown, it waits for nothing in
//!   the bucket and has nothing left to commit. The applier is settled when
//!   every partition viewed is and no partition waits for its manifest or
//!   to be opened; an idle cycle then views no partition at all.

use std::collections::BTreeMap;

use kafkalog::{TopicId, TopicPartition};
use manifest::feed::HeadEntry;
use manifest::mirror_record::MirrorRecord;
use manifest::partition::PartitionManifest;
use manifest::state::PartitionState;

/// The feed's entry for a partition, as far as scheduling needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedEntry {
    /// The topic id the feed names.
    pub topic_id: TopicId,
    /// The newest manifest version.
    pub manifest_version: u64,
}

/// The manifest held in memory for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedManifest {
    /// Its version.
    pub version: u64,
    /// Its topic id.
    pub topic_id: TopicId,
    /// Where the source's shipped records end.
    pub shipped_end_offset: i64,
}

/// One mirror partition, as a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    /// Its state.
    pub state: PartitionState,
    /// FAILED with a retryable failure.
    pub retryable: bool,
    /// Retries counted since the last progress.
    pub retries: u32,
    /// The topic id its record pins.
    pub topic_id: TopicId,
    /// The manifest version its record says was applied.
    pub applied_version: u64,
    /// The record's stop epoch (a STOPPED partition's leader epoch is at
    /// least this).
    pub stop_epoch: Option<i32>,
    /// The local log's start offset.
    pub log_start: i64,
    /// The local log's end offset.
    pub log_end: i64,
    /// The feed's entry, if it names the partition.
    pub feed: Option<FeedEntry>,
    /// The manifest in memory, if any.
    pub cached: Option<CachedManifest>,
    /// When a retryable failure is retried (ms since the epoch).
    pub retry_at_ms: Option<i64>,
    /// Whether the write guard is in place as far as the driver knows
    /// (`None`: unknown, or its last change failed).
    pub guard: Option<bool>,
    /// An action failed where no error can be recorded (shown by status).
    pub action_error: bool,
    /// Why it waits for the bucket (replication lag), if it does.
    pub waiting: Option<String>,
    /// Appended or changed in memory and not yet made durable by a group
    /// commit.
    pub uncommitted: bool,
}

impl PartitionView {
    /// The view of a partition with `record` whose local log spans
    /// `log_start..log_end`, given the feed's `entry` and the manifest
    /// held; what only a running applier knows (retry time, guard, action
    /// error, waiting, uncommitted writes) is as after a clean open: the
    /// caller sets it.
    pub fn of_record(
        record: &MirrorRecord,
        (log_start, log_end): (i64, i64),
        entry: Option<&HeadEntry>,
        cached: Option<&PartitionManifest>,
    ) -> PartitionView {
        let state = record.state.state();
        PartitionView {
            state,
            retryable: record.state.failure().is_some_and(|f| f.retryable),
            retries: record.state.retries(),
            topic_id: record.topic_id,
            applied_version: record.applied_manifest_version,
            stop_epoch: record.stop_epoch,
            log_start,
            log_end,
            feed: entry.map(|e| FeedEntry {
                topic_id: e.topic_id,
                manifest_version: e.manifest_version,
            }),
            cached: cached.map(|c| CachedManifest {
                version: c.version,
                topic_id: c.topic_id,
                shipped_end_offset: c.shipped_end_offset,
            }),
            retry_at_ms: None,
            guard: Some(state != PartitionState::Stopped),
            action_error: false,
            waiting: None,
            uncommitted: false,
        }
    }
}

/// A snapshot of what scheduling needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// The partitions that changed since the last cycle.
    pub partitions: BTreeMap<TopicPartition, PartitionView>,
    /// Whether the applier has a bucket.
    pub has_bucket: bool,
    /// Partitions selected from the feed whose manifest cannot be read yet,
    /// and mirror partitions that cannot be opened: each cycle looks again.
    pub unresolved: usize,
}

/// Why a partition waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// Its work needs the bucket and the applier has none.
    NoBucket,
    /// The feed names no manifest of its topic id (yet).
    NotInFeed,
    /// Its retry is due at this time (ms since the epoch).
    RetryAt(i64),
}

/// What one partition does this cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// PREPARING's work: the preparation plan, then MIRRORING.
    Prepare,
    /// MIRRORING's work: apply this manifest version from the log end.
    Apply {
        /// The feed's version.
        version: u64,
    },
    /// MIRRORING, caught up after retries: report progress (the retry
    /// count goes back to 0).
    Progressed,
    /// STOPPING's work: the failover.
    Failover,
    /// A retryable FAILED whose retry is due: back to the state it failed in.
    Retry,
    /// PREPARING or MIRRORING, and the feed names the partition under
    /// another topic id than the one its record pins: the source topic was
    /// deleted and created again. The partition fails (not retried): the
    /// new topic's records are never appended to the old one's.
    SourceRecreated {
        /// The topic id the feed names now.
        topic_id: TopicId,
    },
    /// Nothing can be done now.
    Wait(Wait),
    /// Nothing to do until something changes.
    Idle,
}

/// One partition's line of a [`Schedule`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Put the write guard back in line with the state first.
    pub fix_guard: bool,
    /// The work.
    pub work: Work,
    /// Whether the partition is viewed again next cycle even if nothing
    /// else changes it (see the module doc).
    pub unsettled: bool,
}

/// What every viewed partition does, and whether the applier is settled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Each viewed partition's line.
    pub partitions: BTreeMap<TopicPartition, Planned>,
    /// Nothing to do until the feed changes or an operator acts.
    pub settled: bool,
}

impl Schedule {
    /// The partitions whose work is `pred`.
    pub fn with(&self, pred: impl Fn(&Work) -> bool) -> Vec<TopicPartition> {
        self.partitions
            .iter()
            .filter(|(_, p)| pred(&p.work))
            .map(|(tp, _)| tp.clone())
            .collect()
    }
}

/// Whether the cached manifest is the one the feed names for the
/// partition's topic id.
pub fn cache_fresh(p: &PartitionView) -> bool {
    match (&p.feed, &p.cached) {
        (Some(f), Some(c)) => {
            c.version == f.manifest_version && c.topic_id == f.topic_id && p.topic_id == f.topic_id
        }
        _ => false,
    }
}

/// Whether a MIRRORING partition has applied the version the feed names
/// (the one definition; see the module doc), on what is in memory.
pub fn caught_up(p: &PartitionView) -> bool {
    cache_fresh(p)
        && p.cached
            .as_ref()
            .is_some_and(|c| p.applied_version == c.version && p.log_end >= c.shipped_end_offset)
        && p.retries == 0
}

/// One partition's work at `now_ms`.
pub fn plan_partition(p: &PartitionView, has_bucket: bool, now_ms: i64) -> Planned {
    use PartitionState as S;
    let recreated = p
        .feed
        .filter(|f| f.topic_id != p.topic_id)
        .map(|f| Work::SourceRecreated {
            topic_id: f.topic_id,
        });
    let work = match p.state {
        S::Preparing | S::Mirroring if !has_bucket => Work::Wait(Wait::NoBucket),
        S::Preparing => recreated.unwrap_or(Work::Prepare),
        S::Mirroring => match (recreated, p.feed) {
            (Some(recreated), _) => recreated,
            (None, None) => Work::Wait(Wait::NotInFeed),
            (None, Some(_)) if caught_up(p) => Work::Idle,
            (None, Some(f)) => {
                let applied = cache_fresh(p)
                    && p.cached.as_ref().is_some_and(|c| {
                        p.applied_version == c.version && p.log_end >= c.shipped_end_offset
                    });
                if applied {
                    Work::Progressed
                } else {
                    Work::Apply {
                        version: f.manifest_version,
                    }
                }
            }
        },
        S::Stopping => Work::Failover,
        S::Failed if p.retryable => match p.retry_at_ms {
            Some(at) if now_ms >= at => Work::Retry,
            Some(at) => Work::Wait(Wait::RetryAt(at)),
            // A retryable FAILED always has a retry time (the driver's
            // invariant); without one nothing would ever retry it.
            None => Work::Idle,
        },
        S::Paused | S::Stopped | S::Failed => Work::Idle,
    };
    let fix_guard = p.guard != Some(p.state != S::Stopped);
    let quiet = matches!(work, Work::Idle | Work::Wait(Wait::NoBucket));
    let unsettled = !quiet || fix_guard || p.action_error || p.waiting.is_some() || p.uncommitted;
    Planned {
        fix_guard,
        work,
        unsettled,
    }
}

/// Every viewed partition's work at `now_ms`, and whether the applier is
/// settled.
pub fn schedule(view: &View, now_ms: i64) -> Schedule {
    let partitions: BTreeMap<TopicPartition, Planned> = view
        .partitions
        .iter()
        .map(|(tp, p)| (tp.clone(), plan_partition(p, view.has_bucket, now_ms)))
        .collect();
    let settled = view.unresolved == 0 && partitions.values().all(|p| !p.unsettled);
    Schedule {
        partitions,
        settled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PartitionState as S;

    const ID: TopicId = TopicId::from_bytes([7; 16]);
    const OTHER: TopicId = TopicId::from_bytes([8; 16]);

    /// A MIRRORING partition caught up with version 3 (shipped to 100).
    fn base() -> PartitionView {
        PartitionView {
            state: S::Mirroring,
            retryable: false,
            retries: 0,
            topic_id: ID,
            applied_version: 3,
            stop_epoch: None,
            log_start: 0,
            log_end: 100,
            feed: Some(FeedEntry {
                topic_id: ID,
                manifest_version: 3,
            }),
            cached: Some(CachedManifest {
                version: 3,
                topic_id: ID,
                shipped_end_offset: 100,
            }),
            retry_at_ms: None,
            guard: Some(true),
            action_error: false,
            waiting: None,
            uncommitted: false,
        }
    }

    fn in_state(state: S) -> PartitionView {
        PartitionView {
            state,
            guard: Some(state != S::Stopped),
            ..base()
        }
    }

    fn failed(retryable: bool, retry_at_ms: Option<i64>) -> PartitionView {
        PartitionView {
            state: S::Failed,
            retryable,
            retry_at_ms,
            ..base()
        }
    }

    const NOW: i64 = 1_000;

    fn row(p: PartitionView, has_bucket: bool, work: Work, unsettled: bool) {
        let got = plan_partition(&p, has_bucket, NOW);
        assert_eq!(got.work, work, "{p:?}");
        assert_eq!(got.unsettled, unsettled, "{p:?}");
    }

    #[test]
    fn a_preparing_partition_prepares() {
        row(in_state(S::Preparing), true, Work::Prepare, true);
    }

    #[test]
    fn a_preparing_partition_without_a_bucket_waits_settled() {
        row(
            in_state(S::Preparing),
            false,
            Work::Wait(Wait::NoBucket),
            false,
        );
    }

    #[test]
    fn a_mirroring_partition_caught_up_is_idle() {
        row(base(), true, Work::Idle, false);
    }

    #[test]
    fn a_mirroring_partition_behind_the_feeds_version_applies_it() {
        let p = PartitionView {
            feed: Some(FeedEntry {
                topic_id: ID,
                manifest_version: 4,
            }),
            ..base()
        };
        row(p, true, Work::Apply { version: 4 }, true);
    }

    #[test]
    fn a_mirroring_partition_whose_log_is_short_of_the_shipped_end_applies() {
        let p = PartitionView {
            log_end: 90,
            ..base()
        };
        row(p, true, Work::Apply { version: 3 }, true);
    }

    #[test]
    fn a_mirroring_partition_without_a_cached_manifest_applies_the_feeds_version() {
        let p = PartitionView {
            cached: None,
            ..base()
        };
        row(p, true, Work::Apply { version: 3 }, true);
    }

    #[test]
    fn a_mirroring_partition_caught_up_after_retries_reports_progress() {
        let p = PartitionView {
            retries: 2,
            ..base()
        };
        row(p, true, Work::Progressed, true);
    }

    #[test]
    fn a_mirroring_partition_the_feed_does_not_name_waits_for_it() {
        let p = PartitionView {
            feed: None,
            ..base()
        };
        row(p, true, Work::Wait(Wait::NotInFeed), true);
    }

    #[test]
    fn a_mirroring_partition_whose_feed_entry_has_another_topic_id_was_recreated() {
        let p = PartitionView {
            feed: Some(FeedEntry {
                topic_id: OTHER,
                manifest_version: 9,
            }),
            ..base()
        };
        row(p, true, Work::SourceRecreated { topic_id: OTHER }, true);
    }

    #[test]
    fn a_preparing_partition_whose_feed_entry_has_another_topic_id_was_recreated() {
        let p = PartitionView {
            feed: Some(FeedEntry {
                topic_id: OTHER,
                manifest_version: 1,
            }),
            ..in_state(S::Preparing)
        };
        row(p, true, Work::SourceRecreated { topic_id: OTHER }, true);
    }

    #[test]
    fn a_preparing_partition_the_feed_does_not_name_prepares() {
        // Its manifest is waited for by the preparation (a partition
        // adopted by `start` before the feed names it).
        let p = PartitionView {
            feed: None,
            ..in_state(S::Preparing)
        };
        row(p, true, Work::Prepare, true);
    }

    #[test]
    fn a_stopped_or_paused_partition_whose_source_was_recreated_is_idle() {
        for state in [S::Stopped, S::Paused] {
            let p = PartitionView {
                feed: Some(FeedEntry {
                    topic_id: OTHER,
                    manifest_version: 1,
                }),
                ..in_state(state)
            };
            row(p, true, Work::Idle, false);
        }
    }

    #[test]
    fn a_mirroring_partition_without_a_bucket_waits_settled() {
        row(base(), false, Work::Wait(Wait::NoBucket), false);
    }

    #[test]
    fn a_stopping_partition_fails_over_without_a_bucket() {
        row(in_state(S::Stopping), false, Work::Failover, true);
    }

    #[test]
    fn a_retryable_failure_is_retried_when_due() {
        row(failed(true, Some(NOW)), true, Work::Retry, true);
    }

    #[test]
    fn a_retryable_failure_waits_for_its_retry_time() {
        row(
            failed(true, Some(NOW + 1)),
            true,
            Work::Wait(Wait::RetryAt(NOW + 1)),
            true,
        );
    }

    #[test]
    fn a_failure_that_is_not_retryable_is_idle() {
        row(failed(false, None), true, Work::Idle, false);
    }

    #[test]
    fn a_paused_partition_is_idle() {
        row(in_state(S::Paused), true, Work::Idle, false);
    }

    #[test]
    fn a_stopped_partition_is_idle() {
        row(in_state(S::Stopped), true, Work::Idle, false);
    }

    #[test]
    fn a_guard_that_does_not_match_the_state_is_fixed_and_unsettled() {
        let p = PartitionView {
            guard: None,
            ..in_state(S::Stopped)
        };
        let got = plan_partition(&p, true, NOW);
        assert!(got.fix_guard && got.unsettled);
        let p = PartitionView {
            guard: Some(false),
            ..base()
        };
        assert!(plan_partition(&p, true, NOW).fix_guard);
    }

    #[test]
    fn a_partition_waiting_for_the_bucket_stays_unsettled() {
        let p = PartitionView {
            waiting: Some("manifest not there yet".into()),
            ..base()
        };
        row(p, true, Work::Idle, true);
    }

    #[test]
    fn a_partition_with_an_action_error_stays_unsettled() {
        let p = PartitionView {
            action_error: true,
            ..in_state(S::Stopped)
        };
        row(p, true, Work::Idle, true);
    }

    #[test]
    fn a_partition_with_writes_to_commit_stays_unsettled() {
        let p = PartitionView {
            uncommitted: true,
            ..base()
        };
        row(p, true, Work::Idle, true);
    }

    #[test]
    fn the_applier_is_settled_only_when_every_partition_is_and_none_is_unresolved() {
        let tp = |p| TopicPartition::new("orders", p).expect("tp");
        let mut view = View {
            partitions: BTreeMap::from([(tp(0), base()), (tp(1), in_state(S::Paused))]),
            has_bucket: true,
            unresolved: 0,
        };
        assert!(schedule(&view, NOW).settled);
        view.unresolved = 1;
        assert!(
            !schedule(&view, NOW).settled,
            "a partition waits to be opened"
        );
        view.unresolved = 0;
        view.partitions.insert(tp(2), in_state(S::Preparing));
        let s = schedule(&view, NOW);
        assert!(!s.settled);
        assert_eq!(s.with(|w| *w == Work::Prepare), vec![tp(2)]);
        assert!(schedule(&View::default(), NOW).settled, "an empty view");
    }
}
