//! The state-machine driver: the one place that performs the
//! [`Action`]s of `manifest::state`, for a new mirror ([`create`]), a mirror
//! opened after a restart ([`MirrorSlot::restart`]) and every transition
//! ([`MirrorSlot::drive`]), and the pin changes of `start`'s plan
//! (`crate::command_plan::plan_start`, [`MirrorSlot::perform_start`])
//! before its transition.
//!
//! What each action does here:
//!
//! | action | performed as |
//! | --- | --- |
//! | `SetWriteGuard` / `ClearWriteGuard` | the guard file in the partition dir |
//! | `PersistState` | the mirror record, written atomically (the disk reserve is released once on a full disk); after a preparation run for many partitions together, left to the cycle's group commit (`persist_at_commit`) |
//! | `StageStop` | the stop's LME, offset and epoch put in the record in memory (`Mirror::plan_stop_in_record`), for the `PersistState` that follows |
//! | `RunPreparation` / `RunFailover` / `StartFetching` | the partition joins the schedule's wake set ([`Env::wake`]): the next round of the cycle schedules it, and `crate::schedule` derives its work from the state (PREPARING prepares, STOPPING fails over, MIRRORING applies); the engine reports `Prepared` / `Stopped` or `Error` |
//! | `CancelPreparation` / `StopFetching` | the partition leaves the wake set: nothing runs concurrently here, so no work is in flight to wait for, and its new state schedules none |
//! | `ScheduleRetry { retry_count }` | `retry_at_ms` = the failure's time + [`Backoff::delay`], and the partition joins the wake set (the schedule retries it once due); after a restart the failure's time is the record's, so a restarting process (`applier once` from cron) retries once it is due |
//! | `CancelRetry` | `retry_at_ms` cleared |
//! | `RaiseEpochToStop` | the log's leader epoch raised to the record's stop epoch (none recorded: nothing to raise) |
//!
//! Nothing is stored that the state says: a partition fetches exactly in
//! MIRRORING, prepares in PREPARING and fails over in STOPPING.
//!
//! Invariants:
//! - The state in memory is the state [`state::next`] returned, whether or
//!   not its actions succeeded; an action that fails is reported as the
//!   partition's error (`Event::Error`, retryable) so that the failure is in
//!   the state (FAILED) rather than only in a log line. Where no error can be
//!   recorded (STOPPED, or already FAILED) it is kept in
//!   `MirrorSlot::action_error` and shown by `status`.
//! - After every drive, the write guard matches the state (set in every
//!   state but STOPPED): a guard change that failed is made again at the
//!   next drive or [`MirrorSlot::reconcile_guard`].
//! - A STOPPED partition opened after a restart has its leader epoch at
//!   least at the recorded stop epoch (`RaiseEpochToStop`: the failover's
//!   epoch bump is idempotent and redone).

// `StartError` carries the log's error by value; it is built only on the
// failure path, where its size costs nothing measurable.
#![allow(clippy::result_large_err)]

use std::collections::BTreeSet;
use std::time::Duration;

use kafkalog::TopicPartition;

use manifest::state::{self, Action, Event, MirrorState, PartitionState, TransitionError};

use crate::mirror::{Mirror, guard_reason};
use crate::reserve::DiskReserve;
use crate::slot::MirrorSlot;

/// Exponential backoff with jitter for retryable failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first retry's delay; doubled per retry.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Backoff {
    /// The delay before retry `retry + 1`: `base * 2^retry`, at most `max`,
    /// times a jitter in [0.75, 1.25) taken from `seed`.
    pub fn delay(&self, retry: u32, seed: u64) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << retry.min(16))
            .min(self.max);
        let jitter = 0.75 + (seed % 1000) as f64 / 2000.0;
        exp.mul_f64(jitter)
    }
}

/// What the driver needs besides the slot.
pub(crate) struct Env<'a> {
    /// The retry backoff.
    pub(crate) backoff: Backoff,
    /// The disk reserve, released once to record a full disk's failure.
    pub(crate) reserve: &'a mut DiskReserve,
    /// The partitions the schedule looks at next (the engine's changed
    /// set).
    pub(crate) wake: &'a mut BTreeSet<TopicPartition>,
}

/// An action that could not be performed, with why.
#[derive(Debug, thiserror::Error)]
#[error("{action} failed: {error}")]
pub(crate) struct ActionFailed {
    /// The action.
    action: Action,
    /// Why, in words (the guard's, the record's or the log's error).
    error: String,
}

/// Why a `start` of a mirror partition was refused or failed before its
/// transition.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum StartError {
    /// The plan refused it (nothing changed).
    #[error(transparent)]
    Refused(#[from] crate::command_plan::StartRefusal),
    /// The topic id that goes with the pin could not be written.
    #[error("could not write topic id {id} for {tp}: {source}")]
    TopicId {
        /// The partition.
        tp: kafkalog::TopicPartition,
        /// The topic id.
        id: kafkalog::TopicId,
        /// The log's error.
        #[source]
        source: kafkalog::Error,
    },
    /// The new pin's guard or record could not be written.
    #[error("could not pin source cluster {source_cluster}: {failed}")]
    Repin {
        /// The configured source.
        source_cluster: String,
        /// The action that failed.
        failed: ActionFailed,
    },
}

/// A new mirror partition: performs [`state::initial`]'s actions (write
/// guard, record, preparation queued). The guard and the record must both
/// be written: a failure is returned and the partition is not a mirror.
pub(crate) fn create(mirror: Mirror, env: &mut Env<'_>) -> Result<MirrorSlot, ActionFailed> {
    let mut slot = MirrorSlot::new(mirror);
    let (initial, actions) = state::initial();
    slot.mirror.record.state = initial;
    slot.perform(&actions, env)?;
    Ok(slot)
}

impl MirrorSlot {
    /// Brings the world back in line with the persisted state after a
    /// restart ([`state::on_restart`]): the guard as the state wants it,
    /// the state's work scheduled, a retryable failure's retry scheduled
    /// from when it was recorded, and a STOPPED partition's epoch bump
    /// redone.
    pub(crate) fn restart(&mut self, env: &mut Env<'_>) -> Result<(), ActionFailed> {
        let actions = state::on_restart(&self.mirror.record.state);
        self.perform(&actions, env)
    }

    /// Applies `event` to the state machine and performs the actions. A
    /// refused command or a stale event changes nothing (`Err`). An action
    /// that fails becomes the partition's error (see the module doc).
    pub(crate) fn drive(
        &mut self,
        event: Event,
        env: &mut Env<'_>,
    ) -> Result<PartitionState, TransitionError> {
        let (next, actions) = state::next(&self.mirror.record.state, event)?;
        self.mirror.record.state = next;
        if let Err(failed) = self.perform(&actions, env) {
            tracing::error!(partition = %self.tp(), error = %failed, "a state action failed");
            self.record_action_failure(failed, env);
        }
        self.reconcile_guard();
        Ok(self.state())
    }

    /// Pins the partition to another source: what a `start` naming a
    /// different identity does to a partition that has not begun mirroring
    /// (PREPARING). The guard's reason and the record name the new source;
    /// the queued preparation then runs against it.
    pub(crate) fn repin(
        &mut self,
        source_cluster_id: &str,
        topic_id: Option<kafkalog::TopicId>,
        env: &mut Env<'_>,
    ) -> Result<(), ActionFailed> {
        self.mirror.record.source_cluster_id = source_cluster_id.to_string();
        if let Some(id) = topic_id {
            self.mirror.record.topic_id = id;
        }
        self.perform(&[Action::SetWriteGuard, Action::PersistState], env)
    }

    /// Performs `start`'s plan (`crate::command_plan::plan_start`) before
    /// its transition: the topic id that goes with a pin written into an
    /// empty log, the cut the preparation may make recorded, and the pin
    /// changed in the record (the transition persists it) or now
    /// ([`MirrorSlot::repin`]).
    pub(crate) fn perform_start(
        &mut self,
        plan: &crate::command_plan::StartPlan,
        source: &str,
        feed_topic_id: Option<kafkalog::TopicId>,
        allowed: bool,
        env: &mut Env<'_>,
    ) -> Result<(), StartError> {
        use crate::command_plan::Repin;
        if let Some(id) = plan.write_topic_id {
            self.mirror
                .log
                .replace_topic_id(id)
                .map_err(|source| StartError::TopicId {
                    tp: self.tp().clone(),
                    id,
                    source,
                })?;
        }
        if plan.records_cut {
            self.mirror.record.pending_cut = plan.cut;
            self.mirror.record.truncate_allowed = allowed;
            if let Some(cut) = plan.cut {
                tracing::warn!(partition = %self.tp(), %cut, "start accepted with --allow-truncate: the preparation cuts these records");
            }
        }
        match plan.repin {
            Repin::Keep => {}
            // A new start pins the configured source (failback mirrors the
            // other direction); the transition persists it.
            Repin::InRecord => {
                self.mirror.record.source_cluster_id = source.to_string();
                if let Some(id) = feed_topic_id {
                    self.mirror.record.topic_id = id;
                }
            }
            // Nothing mirrored yet: the operator corrects the pin.
            Repin::Now => {
                let pinned = self.mirror.record.source_cluster_id.clone();
                self.repin(source, feed_topic_id, env)
                    .map_err(|failed| StartError::Repin {
                        source_cluster: source.to_string(),
                        failed,
                    })?;
                tracing::info!(partition = %self.tp(), from = %pinned, to = %source, "start replaced the source pin of a partition not yet mirroring");
            }
        }
        Ok(())
    }

    /// Makes the guard match the state again if a change of it failed.
    pub(crate) fn reconcile_guard(&mut self) {
        let wanted = self.state() != PartitionState::Stopped;
        if self.guard_set == Some(wanted) {
            return;
        }
        let action = if wanted {
            Action::SetWriteGuard
        } else {
            Action::ClearWriteGuard
        };
        match self.perform_one(action) {
            Ok(()) => {
                if self.action_error.take().is_some() {
                    tracing::info!(partition = %self.tp(), "the write guard matches the state again");
                }
            }
            Err(error) => {
                self.action_error = Some(ActionFailed { action, error }.to_string());
            }
        }
    }

    fn record_action_failure(&mut self, failed: ActionFailed, env: &mut Env<'_>) {
        let event = Event::Error {
            message: failed.to_string(),
            retryable: true,
        };
        match state::next(&self.mirror.record.state, event) {
            Ok((state, actions)) => {
                self.mirror.record.state = state;
                // Every action is tried (the retry must be scheduled even
                // when the record cannot be written); what fails now is
                // only logged: the state is FAILED in memory, and
                // `unsaved` says why the record is older.
                for action in actions {
                    if let Err(again) = self.perform(&[action], env) {
                        tracing::error!(partition = %self.tp(), error = %again, "could not record the failure");
                    }
                }
            }
            Err(_) => self.action_error = Some(failed.to_string()),
        }
    }

    /// Performs `actions` in order, stopping at the first that fails.
    fn perform(&mut self, actions: &[Action], env: &mut Env<'_>) -> Result<(), ActionFailed> {
        for &action in actions {
            let result = match action {
                Action::PersistState => self.persist(env),
                Action::SetWriteGuard | Action::ClearWriteGuard => self.perform_one(action),
                Action::StageStop => {
                    self.mirror.plan_stop_in_record();
                    Ok(())
                }
                Action::RunPreparation | Action::RunFailover | Action::StartFetching => {
                    env.wake.insert(self.tp().clone());
                    Ok(())
                }
                Action::CancelPreparation | Action::StopFetching => {
                    env.wake.remove(self.tp());
                    Ok(())
                }
                Action::ScheduleRetry { retry_count } => {
                    let failed_at = self.mirror.record.updated_at_ms;
                    let seed = failed_at.unsigned_abs() ^ u64::from(retry_count);
                    let delay = env.backoff.delay(retry_count, seed);
                    self.retry_at_ms = Some(
                        failed_at.saturating_add(delay.as_millis().min(i64::MAX as u128) as i64),
                    );
                    env.wake.insert(self.tp().clone());
                    Ok(())
                }
                Action::RaiseEpochToStop => match self.mirror.record.stop_epoch {
                    Some(epoch) => self
                        .mirror
                        .log
                        .bump_epoch(epoch)
                        .map(|_raised| ())
                        .map_err(|e| e.to_string()),
                    None => Ok(()),
                },
                Action::CancelRetry => {
                    self.retry_at_ms = None;
                    Ok(())
                }
            };
            result.map_err(|error| ActionFailed { action, error })?;
        }
        Ok(())
    }

    fn perform_one(&mut self, action: Action) -> Result<(), String> {
        let result = match action {
            Action::SetWriteGuard => self
                .mirror
                .log
                .set_read_only(&guard_reason(&self.mirror.record.source_cluster_id)),
            Action::ClearWriteGuard => self.mirror.log.clear_read_only(),
            _ => return Ok(()),
        };
        match result {
            Ok(()) => {
                self.guard_set = Some(action == Action::SetWriteGuard);
                Ok(())
            }
            Err(e) => {
                self.guard_set = None;
                Err(e.to_string())
            }
        }
    }

    fn persist(&mut self, env: &mut Env<'_>) -> Result<(), String> {
        if std::mem::take(&mut self.persist_at_commit) {
            self.mirror.record_dirty = true;
            return Ok(());
        }
        // `save` stamps the record with the mirror's clock: a failure's
        // time is the time its retry is scheduled from.
        match self.mirror.save() {
            Err(e) if crate::reserve::is_disk_full(&e) && env.reserve.release() => {
                self.mirror.save().map_err(|e| e.to_string())
            }
            other => other.map_err(|e| e.to_string()),
        }
    }

    /// The state the record holds (for tests and status).
    pub fn mirror_state(&self) -> &MirrorState {
        &self.mirror.record.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::{LogDir, TopicId, TopicPartition};
    use manifest::clock::{Clock, ManualClock};
    use std::sync::Arc;

    const ID: TopicId = TopicId::from_bytes([7; 16]);

    struct Fixture {
        _dir: tempfile::TempDir,
        logdir: LogDir,
        clock: ManualClock,
        clock_dyn: Arc<dyn Clock>,
        reserve: DiskReserve,
        wake: BTreeSet<TopicPartition>,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().expect("tempdir");
            let logdir = LogDir::open(dir.path()).expect("logdir");
            let reserve = DiskReserve::open(dir.path(), 0);
            let clock = ManualClock::new();
            Fixture {
                _dir: dir,
                logdir,
                clock_dyn: Arc::new(clock.clone()),
                clock,
                reserve,
                wake: BTreeSet::new(),
            }
        }

        fn env(&mut self) -> Env<'_> {
            Env {
                backoff: Backoff {
                    base: Duration::from_secs(1),
                    max: Duration::from_secs(60),
                },
                reserve: &mut self.reserve,
                wake: &mut self.wake,
            }
        }

        /// Whether the slot's work was scheduled (and takes it off).
        fn woken(&mut self, slot: &MirrorSlot) -> bool {
            self.wake.remove(slot.tp())
        }

        fn mirror(&self) -> Mirror {
            let tp = TopicPartition::new("orders", 0).expect("tp");
            let log = self
                .logdir
                .open_or_create_partition(&tp, Some(ID), crate::engine::mirror_log_config())
                .expect("log");
            let record = crate::mirror::new_record("src", ID, state::initial().0);
            Mirror::new(tp, log, record, Arc::clone(&self.clock_dyn))
        }

        fn guarded(&self, slot: &MirrorSlot) -> bool {
            slot.mirror.log.read_only_reason().expect("guard").is_some()
        }

        fn recorded(&self, slot: &MirrorSlot) -> PartitionState {
            partdir::record::read(slot.mirror.log.dir())
                .expect("read")
                .expect("record")
                .state
                .state()
        }
    }

    /// The schedule's rule for a retry (`crate::schedule`), on a slot.
    fn retry_due(slot: &MirrorSlot, now_ms: i64) -> bool {
        let view = crate::schedule::PartitionView {
            state: slot.state(),
            retryable: slot.mirror_state().failure().is_some_and(|f| f.retryable),
            retries: slot.mirror_state().retries(),
            topic_id: ID,
            applied_version: 0,
            stop_epoch: None,
            log_start: 0,
            log_end: 0,
            feed: None,
            cached: None,
            retry_at_ms: slot.retry_at_ms,
            guard: Some(true),
            action_error: false,
            waiting: None,
            uncommitted: false,
        };
        crate::schedule::plan_partition(&view, true, now_ms).work == crate::schedule::Work::Retry
    }

    fn error(retryable: bool) -> Event {
        Event::Error {
            message: "object store unavailable".into(),
            retryable,
        }
    }

    #[test]
    fn a_new_mirror_is_guarded_recorded_and_queues_its_preparation() {
        let mut f = Fixture::new();
        let m = f.mirror();
        let slot = create(m, &mut f.env()).expect("create");
        assert!(f.guarded(&slot));
        assert_eq!(f.recorded(&slot), PartitionState::Preparing);
        assert!(f.woken(&slot), "its preparation is scheduled");
    }

    #[test]
    fn each_transition_performs_its_actions_on_the_slot_and_the_files() {
        let mut f = Fixture::new();
        let m = f.mirror();
        let mut slot = create(m, &mut f.env()).expect("create");
        assert!(f.woken(&slot));
        assert_eq!(
            slot.drive(Event::Prepared, &mut f.env()),
            Ok(PartitionState::Mirroring)
        );
        assert!(f.woken(&slot), "fetching is scheduled");
        assert_eq!(f.recorded(&slot), PartitionState::Mirroring);
        f.wake.insert(slot.tp().clone());
        slot.drive(Event::Pause, &mut f.env()).expect("pause");
        assert!(!f.woken(&slot), "pause takes it off the schedule");
        assert!(f.guarded(&slot));
        slot.drive(Event::Resume, &mut f.env()).expect("resume");
        assert!(f.woken(&slot));
        slot.drive(Event::Stop, &mut f.env()).expect("stop");
        assert_eq!(slot.state(), PartitionState::Stopping);
        assert!(f.woken(&slot), "the failover is scheduled");
        assert!(f.guarded(&slot), "still read-only while STOPPING");
        slot.drive(Event::Stopped, &mut f.env()).expect("stopped");
        assert!(!f.guarded(&slot), "STOPPED is writable");
        assert_eq!(f.recorded(&slot), PartitionState::Stopped);
        // Start again: guarded before anything else, preparation queued.
        slot.drive(Event::Start, &mut f.env()).expect("start");
        assert!(f.guarded(&slot));
        assert!(f.woken(&slot), "preparation scheduled");
        // A stop during PREPARING: the failover is scheduled instead.
        slot.drive(Event::Stop, &mut f.env()).expect("stop");
        assert_eq!(slot.state(), PartitionState::Stopping);
        assert!(f.woken(&slot));
    }

    #[test]
    fn a_failure_ends_the_queued_work() {
        let mut f = Fixture::new();
        let m = f.mirror();
        let mut slot = create(m, &mut f.env()).expect("create");
        assert!(f.woken(&slot));
        // Preparation could not even read its manifest (a corrupt one).
        slot.drive(error(false), &mut f.env()).expect("error");
        assert_eq!(slot.state(), PartitionState::Failed);
        assert!(
            !f.woken(&slot),
            "a FAILED partition that is not retried has no work"
        );
    }

    #[test]
    fn a_refused_command_changes_nothing() {
        let mut f = Fixture::new();
        let m = f.mirror();
        let mut slot = create(m, &mut f.env()).expect("create");
        let before = slot.mirror_state().clone();
        let e = slot
            .drive(Event::Resume, &mut f.env())
            .expect_err("refused");
        assert_eq!(
            e.to_string(),
            "cannot resume: partition is PREPARING, not PAUSED"
        );
        assert_eq!(slot.mirror_state(), &before);
        assert_eq!(slot.state(), PartitionState::Preparing);
    }

    #[test]
    fn a_retryable_failure_is_retried_after_its_backoff_by_the_clock() {
        let mut f = Fixture::new();
        let m = f.mirror();
        let mut slot = create(m, &mut f.env()).expect("create");
        slot.drive(error(true), &mut f.env()).expect("error");
        assert_eq!(slot.state(), PartitionState::Failed);
        let now = f.clock.now_ms();
        assert!(!retry_due(&slot, now), "not at once");
        // Retry 0: 1 s with a jitter in [0.75, 1.25).
        assert!(!retry_due(&slot, now + 749));
        assert!(retry_due(&slot, now + 1250));
        f.clock.advance(Duration::from_millis(1250));
        slot.drive(Event::RetryDue, &mut f.env()).expect("retry");
        assert_eq!(slot.state(), PartitionState::Preparing);
        assert!(f.woken(&slot));
        assert_eq!(slot.mirror_state().retries(), 1);
        // It fails again: retry 1 waits about 2 s.
        slot.drive(error(true), &mut f.env()).expect("error");
        let now = f.clock.now_ms();
        assert!(!retry_due(&slot, now + 1499));
        assert!(retry_due(&slot, now + 2500));
        // A non-retryable failure is never due.
        let mut f = Fixture::new();
        let m = f.mirror();
        let mut slot = create(m, &mut f.env()).expect("create");
        slot.drive(error(false), &mut f.env()).expect("error");
        assert!(!retry_due(&slot, i64::MAX));
    }

    #[test]
    fn a_restart_schedules_the_recorded_failures_retry_from_when_it_failed() {
        let mut f = Fixture::new();
        let m = f.mirror();
        let mut slot = create(m, &mut f.env()).expect("create");
        slot.drive(error(true), &mut f.env()).expect("error");
        let failed_at = f.clock.now_ms();
        // The process restarts 10 minutes later: the retry is due at once.
        drop(slot);
        f.clock.advance(Duration::from_secs(600));
        let tp = TopicPartition::new("orders", 0).expect("tp");
        let log = f
            .logdir
            .open_partition(&tp, crate::engine::mirror_log_config())
            .expect("log");
        let record = partdir::record::read(log.dir())
            .expect("read")
            .expect("record");
        let mut slot = MirrorSlot::new(Mirror::new(tp, log, record, Arc::clone(&f.clock_dyn)));
        slot.restart(&mut f.env()).expect("restart");
        assert!(retry_due(&slot, f.clock.now_ms()));
        assert!(slot.retry_at_ms.is_some_and(|at| at <= failed_at + 1250));
        assert!(f.guarded(&slot), "FAILED stays read-only");
    }

    #[test]
    fn a_restart_of_a_stopped_mirror_clears_the_guard_and_redoes_the_epoch_bump() {
        let mut f = Fixture::new();
        let m = f.mirror();
        let mut slot = create(m, &mut f.env()).expect("create");
        slot.drive(Event::Stop, &mut f.env()).expect("stop");
        slot.mirror.record.stop_epoch = Some(4);
        slot.drive(Event::Stopped, &mut f.env()).expect("stopped");
        // The guard file came back (a crash between two writes, say).
        slot.mirror.log.set_read_only("stale").expect("guard");
        slot.restart(&mut f.env()).expect("restart");
        assert!(!f.guarded(&slot));
        assert_eq!(slot.mirror.log.epochs().latest_epoch(), Some(4));
    }

    #[test]
    fn a_failed_action_becomes_the_partitions_error() {
        let mut f = Fixture::new();
        let m = f.mirror();
        let mut slot = create(m, &mut f.env()).expect("create");
        // The record cannot be written: its dir is gone.
        let dir = slot.mirror.log.dir().to_path_buf();
        std::fs::remove_dir_all(&dir).expect("remove");
        slot.drive(Event::Prepared, &mut f.env()).expect("accepted");
        assert_eq!(
            slot.state(),
            PartitionState::Failed,
            "not MIRRORING in memory only"
        );
        let failure = slot.mirror_state().failure().expect("failure");
        assert!(failure.retryable);
        assert!(
            failure.message.contains("writing the mirror record failed"),
            "{}",
            failure.message
        );
        assert!(
            slot.mirror.unsaved.is_some(),
            "status says the record is older"
        );
    }
}
