//! A partition's health as the shipper sees it: a state machine with one
//! transition function, [`next`].
//!
//! Every change of a partition's [`Health`] goes through [`next`] (applied
//! by `ShipperSlot::apply_health`), so what each event does from each
//! state is read off this table, not from the places that notice events:
//!
//! | from                         | event                     | to                | ships this cycle | forgets        |
//! |------------------------------|---------------------------|-------------------|------------------|----------------|
//! | `Deleted`                    | `DirMissing`              | `Deleted`         | no               | nothing        |
//! | any other                    | `DirMissing`              | `Missing`         | no               | nothing        |
//! | any                          | `Seen` without a topic id | `NoTopicId`       | no               | nothing        |
//! | `Ok`, `Missing`, `Deleted`, `NoTopicId` | `Seen` with one | `Ok`             | yes              | nothing        |
//! | `Failed`, before `retry_at`  | `Seen` with a topic id    | `Failed` (same)   | no               | nothing        |
//! | `Failed`, at or after it     | `Seen` with a topic id    | `Ok`              | yes              | bucket state   |
//! | `Fenced`, before `until`     | `Seen` with a topic id    | `Fenced` (same)   | no               | nothing        |
//! | `Fenced`, at or after it     | `Seen` with a topic id    | `Ok`              | yes              | bucket state   |
//! | any                          | `Stopped`                 | `Failed`          | no               | position       |
//! | any                          | `LostCommit`              | `Fenced`          | no               | bucket state   |
//! | any                          | `PublishedDeleted`        | `Deleted`         | no               | nothing        |
//! | any                          | `ShippedElsewhere`        | `Standby`         | no               | bucket state   |
//! | `Standby`                    | `Seen` with a topic id    | `Ok`              | yes              | bucket state   |
//!
//! "Forgets position" drops the in-memory read position (the cursor and a
//! suspect tail), so the next attempt finds it again from the manifest;
//! "forgets bucket state" also drops the manifest held, so the next attempt
//! reads the latest version first (another writer may have moved it).
//!
//! `ShippedElsewhere` comes from the broker's metadata
//! (`crate::leadership`): another replica's shipper ships the partition.
//! Forgetting the bucket state there means that when this broker leads
//! again, it reads the latest manifest (the other shipper's commits) first
//! and continues from its end.
//!
//! Invariants: a partition is shipped in a cycle only when the transition
//! of that cycle's `Seen` says so; a `Failed` or `Fenced` partition is
//! never shipped before its back-off ends; re-entering `Failed` or `Fenced`
//! replaces the back-off (the newest error or winner counts).

/// How a partition is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Shipping.
    Ok,
    /// No `partition.metadata` yet: not shipped (object keys need the topic
    /// id) until it appears.
    NoTopicId,
    /// The partition dir is gone (not yet for the grace period).
    Missing,
    /// Published as deleted.
    Deleted,
    /// Stopped by an error until `retry_at_ms`.
    Failed {
        /// The error.
        error: String,
        /// When it is tried again (ms since the epoch).
        retry_at_ms: i64,
    },
    /// Another replica's shipper ships it (the broker's metadata says
    /// so, `crate::leadership`).
    Standby {
        /// Why, for status.
        detail: String,
    },
    /// Another shipper committed first: backing off until `until_ms`.
    Fenced {
        /// The other shipper's id.
        writer: String,
        /// End of the back-off (ms since the epoch).
        until_ms: i64,
    },
}

impl Health {
    /// A short, stable name (metrics label).
    pub fn name(&self) -> &'static str {
        match self {
            Health::Ok => "ok",
            Health::NoTopicId => "no_topic_id",
            Health::Missing => "missing",
            Health::Deleted => "deleted",
            Health::Failed { .. } => "failed",
            Health::Fenced { .. } => "fenced",
            Health::Standby { .. } => "standby",
        }
    }
}

/// What happened to a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HealthEvent {
    /// Its dir is gone this cycle (and its log dir is readable).
    DirMissing,
    /// Its dir was read at `now_ms`, with or without a topic id.
    Seen {
        /// `partition.metadata` gave a topic id.
        has_topic_id: bool,
        /// The cycle's time (ms since the epoch).
        now_ms: i64,
    },
    /// An error that waits for the back-off stopped it.
    Stopped {
        /// The error, as shown in status.
        error: String,
        /// When it is tried again (ms since the epoch).
        retry_at_ms: i64,
    },
    /// Another writer won a manifest commit.
    LostCommit {
        /// The winner's id.
        writer: String,
        /// End of the back-off (ms since the epoch).
        until_ms: i64,
    },
    /// A version with `deleted = true` was committed.
    PublishedDeleted,
    /// The broker's metadata says another replica's shipper ships it.
    ShippedElsewhere {
        /// Why, for status.
        detail: String,
    },
}

/// What a transition makes the partition forget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forget {
    /// Nothing.
    Nothing,
    /// The read position (cursor, suspect tail).
    Position,
    /// Everything read from the bucket (manifest, position): start again
    /// from the latest version.
    BucketState,
}

/// The result of one transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    /// The new health.
    pub(crate) to: Health,
    /// The partition is shipped this cycle.
    pub(crate) ships: bool,
    /// What it forgets.
    pub(crate) forget: Forget,
}

fn step(to: Health, ships: bool, forget: Forget) -> Step {
    Step { to, ships, forget }
}

/// The transition function (see the module docs' table). Total: every
/// (state, event) pair has an answer.
pub(crate) fn next(from: &Health, event: HealthEvent) -> Step {
    match (from, event) {
        (Health::Deleted, HealthEvent::DirMissing) => step(Health::Deleted, false, Forget::Nothing),
        (_, HealthEvent::DirMissing) => step(Health::Missing, false, Forget::Nothing),
        (
            _,
            HealthEvent::Seen {
                has_topic_id: false,
                ..
            },
        ) => step(Health::NoTopicId, false, Forget::Nothing),
        (Health::Failed { retry_at_ms, .. }, HealthEvent::Seen { now_ms, .. })
            if now_ms < *retry_at_ms =>
        {
            step(from.clone(), false, Forget::Nothing)
        }
        (Health::Fenced { until_ms, .. }, HealthEvent::Seen { now_ms, .. })
            if now_ms < *until_ms =>
        {
            step(from.clone(), false, Forget::Nothing)
        }
        (
            Health::Failed { .. } | Health::Fenced { .. } | Health::Standby { .. },
            HealthEvent::Seen { .. },
        ) => step(Health::Ok, true, Forget::BucketState),
        (
            Health::Ok | Health::Missing | Health::Deleted | Health::NoTopicId,
            HealthEvent::Seen { .. },
        ) => step(Health::Ok, true, Forget::Nothing),
        (_, HealthEvent::Stopped { error, retry_at_ms }) => step(
            Health::Failed { error, retry_at_ms },
            false,
            Forget::Position,
        ),
        (_, HealthEvent::LostCommit { writer, until_ms }) => step(
            Health::Fenced { writer, until_ms },
            false,
            Forget::BucketState,
        ),
        (_, HealthEvent::PublishedDeleted) => step(Health::Deleted, false, Forget::Nothing),
        (_, HealthEvent::ShippedElsewhere { detail }) => {
            step(Health::Standby { detail }, false, Forget::BucketState)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(at: i64) -> Health {
        Health::Failed {
            error: "e".into(),
            retry_at_ms: at,
        }
    }

    fn fenced(until: i64) -> Health {
        Health::Fenced {
            writer: "w".into(),
            until_ms: until,
        }
    }

    fn seen(has_topic_id: bool, now_ms: i64) -> HealthEvent {
        HealthEvent::Seen {
            has_topic_id,
            now_ms,
        }
    }

    fn all_states() -> Vec<Health> {
        vec![
            Health::Ok,
            Health::NoTopicId,
            Health::Missing,
            Health::Deleted,
            failed(100),
            fenced(100),
            standby(),
        ]
    }

    fn standby() -> Health {
        Health::Standby {
            detail: "broker 2 leads".into(),
        }
    }

    #[test]
    fn a_deleted_partition_whose_dir_is_missing_stays_deleted() {
        assert_eq!(
            next(&Health::Deleted, HealthEvent::DirMissing),
            step(Health::Deleted, false, Forget::Nothing)
        );
    }

    #[test]
    fn any_other_partition_whose_dir_is_missing_is_missing() {
        for from in all_states().into_iter().filter(|h| *h != Health::Deleted) {
            assert_eq!(
                next(&from, HealthEvent::DirMissing),
                step(Health::Missing, false, Forget::Nothing),
                "{from:?}"
            );
        }
    }

    #[test]
    fn a_partition_seen_without_a_topic_id_is_not_shipped() {
        for from in all_states() {
            assert_eq!(
                next(&from, seen(false, 0)),
                step(Health::NoTopicId, false, Forget::Nothing),
                "{from:?}"
            );
        }
    }

    #[test]
    fn a_healthy_missing_deleted_or_id_less_partition_seen_with_a_topic_id_ships() {
        for from in [
            Health::Ok,
            Health::Missing,
            Health::Deleted,
            Health::NoTopicId,
        ] {
            assert_eq!(
                next(&from, seen(true, 0)),
                step(Health::Ok, true, Forget::Nothing),
                "{from:?}"
            );
        }
    }

    #[test]
    fn a_failed_partition_waits_for_its_retry_time() {
        assert_eq!(
            next(&failed(100), seen(true, 99)),
            step(failed(100), false, Forget::Nothing)
        );
    }

    #[test]
    fn a_failed_partition_at_its_retry_time_starts_again_from_the_bucket() {
        assert_eq!(
            next(&failed(100), seen(true, 100)),
            step(Health::Ok, true, Forget::BucketState)
        );
    }

    #[test]
    fn a_fenced_partition_waits_for_the_end_of_its_back_off() {
        assert_eq!(
            next(&fenced(100), seen(true, 99)),
            step(fenced(100), false, Forget::Nothing)
        );
    }

    #[test]
    fn a_fenced_partition_after_its_back_off_starts_again_from_the_bucket() {
        assert_eq!(
            next(&fenced(100), seen(true, 150)),
            step(Health::Ok, true, Forget::BucketState)
        );
    }

    #[test]
    fn a_stopped_partition_fails_until_its_retry_time_and_forgets_its_position() {
        for from in all_states() {
            let s = next(
                &from,
                HealthEvent::Stopped {
                    error: "bad".into(),
                    retry_at_ms: 7,
                },
            );
            assert_eq!(
                s,
                step(
                    Health::Failed {
                        error: "bad".into(),
                        retry_at_ms: 7
                    },
                    false,
                    Forget::Position
                ),
                "{from:?}"
            );
        }
    }

    #[test]
    fn a_lost_commit_fences_and_forgets_the_bucket_state() {
        for from in all_states() {
            let s = next(
                &from,
                HealthEvent::LostCommit {
                    writer: "other".into(),
                    until_ms: 9,
                },
            );
            assert_eq!(
                s,
                step(
                    Health::Fenced {
                        writer: "other".into(),
                        until_ms: 9
                    },
                    false,
                    Forget::BucketState
                ),
                "{from:?}"
            );
        }
    }

    #[test]
    fn publishing_a_deleted_version_makes_the_partition_deleted() {
        for from in all_states() {
            assert_eq!(
                next(&from, HealthEvent::PublishedDeleted),
                step(Health::Deleted, false, Forget::Nothing),
                "{from:?}"
            );
        }
    }

    #[test]
    fn a_partition_another_replica_ships_is_on_standby_and_forgets_the_bucket_state() {
        for from in all_states() {
            assert_eq!(
                next(
                    &from,
                    HealthEvent::ShippedElsewhere {
                        detail: "broker 2 leads".into()
                    }
                ),
                step(standby(), false, Forget::BucketState),
                "{from:?}"
            );
        }
    }

    #[test]
    fn a_standby_partition_this_broker_ships_again_starts_from_the_latest_manifest() {
        assert_eq!(
            next(&standby(), seen(true, 0)),
            step(Health::Ok, true, Forget::BucketState)
        );
    }
}
