//! The partition table: every partition the applier knows (one
//! [`Slot`] each) and what its state changes wake, with the driver's
//! environment (backoff, disk reserve) beside it. The executors of a cycle
//! (`engine::work`, `engine::discovery`, `engine::commands`) and the group
//! commit (`group_commit::Partitions`) change partitions only through it.
//!
//! Invariants:
//! - Every state change goes through [`MirrorTable::transition`] (the
//!   driver performs the actions `manifest::state::next` returns), and a
//!   failure through [`MirrorTable::fail`].
//! - A partition a change touched is in [`MirrorTable::changed`] (the next
//!   schedule views it); [`MirrorTable::stale`] is set when something
//!   `status` shows may have changed; [`MirrorTable::retention_due`] when a
//!   partition may have become STOPPED.
//! - The gateway's readers are told of every append and cut made here
//!   through [`Notices`], which the engine hands to the gateway link after
//!   each step (`serving::GatewayLink::tell`): the table itself knows no
//!   gateway.

#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};

use kafkalog::TopicPartition;
use manifest::state::{self, Event, PartitionState};

use crate::driver::{ActionFailed, Backoff, Env};
use crate::error::MirrorError;
use crate::mirror::Mirror;
use crate::reserve::DiskReserve;
use crate::slot::{MirrorSlot, Slot};

/// What the gateway's readers must be told, gathered until the engine
/// hands it over.
#[derive(Debug, Default)]
pub(crate) struct Notices {
    /// Partitions that grew.
    pub(crate) appended: BTreeSet<TopicPartition>,
    /// Partitions whose files were cut or rewritten.
    pub(crate) truncated: BTreeSet<TopicPartition>,
    /// Partitions whose log start retention raised.
    pub(crate) start_raised: BTreeSet<TopicPartition>,
}

impl Notices {
    /// Nothing to tell.
    pub(crate) fn is_empty(&self) -> bool {
        self.appended.is_empty() && self.truncated.is_empty() && self.start_raised.is_empty()
    }
}

/// The partitions and what their changes wake.
#[derive(Debug)]
pub(crate) struct MirrorTable {
    /// Every partition known, one slot each.
    pub(crate) slots: BTreeMap<TopicPartition, Slot>,
    /// The mirror partitions the next schedule views (`crate::schedule`):
    /// those a feed change, a command, an append, a transition or a failure
    /// touched, and those the last schedule left unsettled. Empty after a
    /// settled cycle, so an idle cycle over 10,000 partitions costs the
    /// feed's GET, not 10,000 lookups.
    pub(crate) changed: BTreeSet<TopicPartition>,
    /// Something `status` shows may have changed.
    pub(crate) stale: bool,
    /// A partition may have become STOPPED: the retention pass is due.
    pub(crate) retention_due: bool,
    /// What the gateway's readers are to be told.
    pub(crate) notices: Notices,
    /// The disk reserve (released once to record a full disk's failure).
    pub(crate) reserve: DiskReserve,
    backoff: Backoff,
}

impl MirrorTable {
    /// An empty table.
    pub(crate) fn new(backoff: Backoff, reserve: DiskReserve) -> MirrorTable {
        MirrorTable {
            slots: BTreeMap::new(),
            changed: BTreeSet::new(),
            stale: true,
            retention_due: true,
            notices: Notices::default(),
            reserve,
            backoff,
        }
    }

    fn env(&mut self) -> (Env<'_>, &mut BTreeMap<TopicPartition, Slot>) {
        (
            Env {
                backoff: self.backoff,
                reserve: &mut self.reserve,
                wake: &mut self.changed,
            },
            &mut self.slots,
        )
    }

    /// The mirror partitions.
    pub(crate) fn mirror_slots(&self) -> impl Iterator<Item = &MirrorSlot> {
        self.slots.values().filter_map(Slot::mirror)
    }

    /// The mirror slot of `tp`, if it is one.
    pub(crate) fn mirror(&self, tp: &TopicPartition) -> Option<&MirrorSlot> {
        self.slots.get(tp)?.mirror()
    }

    /// The mirror slot of `tp`, if it is one.
    pub(crate) fn mirror_mut(&mut self, tp: &TopicPartition) -> Option<&mut MirrorSlot> {
        self.slots.get_mut(tp).and_then(Slot::mirror_mut)
    }

    /// The state of `tp`, if it is a mirror.
    pub(crate) fn state_of(&self, tp: &TopicPartition) -> Option<PartitionState> {
        self.mirror(tp).map(MirrorSlot::state)
    }

    /// Each mirror partition's state.
    pub(crate) fn states(&self) -> BTreeMap<TopicPartition, PartitionState> {
        self.mirror_slots()
            .map(|m| (m.tp().clone(), m.state()))
            .collect()
    }

    /// Puts an opened mirror partition in its slot with its state's
    /// actions performed again (`MirrorSlot::restart`); `Ok(None)` (not a
    /// mirror) removes the slot. Returns false when it could not be opened.
    pub(crate) fn restart(
        &mut self,
        tp: &TopicPartition,
        opened: Result<Option<Mirror>, MirrorError>,
    ) -> bool {
        let slot = match opened {
            Ok(None) => {
                self.slots.remove(tp);
                return true;
            }
            Ok(Some(mirror)) => {
                let mut slot = MirrorSlot::new(mirror);
                let (mut env, _) = self.env();
                match slot.restart(&mut env) {
                    Ok(()) => Slot::Mirror(Box::new(slot)),
                    Err(e) => Slot::Unopened(e.to_string()),
                }
            }
            Err(e) => Slot::Unopened(e.to_string()),
        };
        let opened = !matches!(slot, Slot::Unopened(_));
        match &slot {
            Slot::Unopened(e) => {
                tracing::error!(partition = %tp, error = %e, "cannot open the mirror partition; retrying every cycle");
            }
            _ => {
                self.changed.insert(tp.clone());
                // It may be STOPPED: its retention is checked next cycle.
                self.retention_due = true;
            }
        }
        self.slots.insert(tp.clone(), slot);
        opened
    }

    /// A mirror partition created now (PREPARING; `driver::create`).
    pub(crate) fn create(&mut self, mirror: Mirror) -> Result<(), ActionFailed> {
        let tp = mirror.tp.clone();
        let (mut env, _) = self.env();
        let slot = crate::driver::create(mirror, &mut env)?;
        self.slots.insert(tp.clone(), Slot::Mirror(Box::new(slot)));
        self.changed.insert(tp);
        self.stale = true;
        Ok(())
    }

    /// Drives one partition's state machine with `event` (see
    /// [`crate::driver`]). Returns the new state.
    pub(crate) fn transition(
        &mut self,
        tp: &TopicPartition,
        event: Event,
    ) -> Result<PartitionState, state::TransitionError> {
        self.stale = true;
        // It may have become STOPPED: retention is checked at the next cycle.
        self.retention_due = true;
        let (mut env, slots) = self.env();
        match slots.get_mut(tp).and_then(Slot::mirror_mut) {
            Some(slot) => slot.drive(event, &mut env),
            None => Ok(PartitionState::Failed),
        }
    }

    /// `start`'s pin changes on a mirror partition, planned by
    /// `command_plan::plan_start` from the slot (`MirrorSlot::perform_start`).
    pub(crate) fn start<F>(
        &mut self,
        tp: &TopicPartition,
        plan: F,
        source: &str,
        feed_topic_id: Option<kafkalog::TopicId>,
        allowed: bool,
    ) -> Result<(), crate::driver::StartError>
    where
        F: FnOnce(&MirrorSlot) -> Result<crate::command_plan::StartPlan, crate::driver::StartError>,
    {
        let (mut env, slots) = self.env();
        let Some(slot) = slots.get_mut(tp).and_then(Slot::mirror_mut) else {
            return Ok(());
        };
        let plan = plan(slot)?;
        slot.perform_start(&plan, source, feed_topic_id, allowed, &mut env)
    }

    /// Records `e` as the partition's failure (or, for replication lag,
    /// as what it waits for). Returns true when the state moved.
    pub(crate) fn fail(&mut self, tp: &TopicPartition, e: MirrorError) -> bool {
        self.stale = true;
        if e.is_waiting() {
            // Replication has not delivered it yet: wait, keep the state.
            tracing::info!(partition = %tp, reason = %e, "waiting for the bucket");
            if let Some(slot) = self.mirror_mut(tp) {
                slot.waiting = Some(e.to_string());
            }
            return false;
        }
        if let Some(slot) = self.mirror_mut(tp) {
            slot.waiting = None;
        }
        let retryable = e.is_retryable();
        if retryable {
            tracing::warn!(partition = %tp, error = %e, "retryable failure");
        } else {
            tracing::error!(partition = %tp, error = %e, "partition FAILED; waiting for an operator's stop or start");
        }
        if let Err(stale) = self.transition(
            tp,
            Event::Error {
                message: e.to_string(),
                retryable,
            },
        ) {
            tracing::debug!(partition = %tp, error = %stale, "the failure arrived in a state that records none");
        }
        true
    }

    /// Makes every retryable failure due at `now_ms`.
    pub(crate) fn retry_all_at(&mut self, now_ms: i64) {
        for slot in self.slots.values_mut().filter_map(Slot::mirror_mut) {
            if slot.retry_at_ms.is_some() {
                slot.retry_at_ms = Some(now_ms);
                self.changed.insert(slot.tp().clone());
            }
        }
    }

    /// Mirror partitions that could not be opened, each with the error.
    pub(crate) fn unopened(&self) -> Vec<(TopicPartition, String)> {
        self.slots
            .iter()
            .filter_map(|(tp, s)| match s {
                Slot::Unopened(e) => Some((tp.clone(), e.clone())),
                _ => None,
            })
            .collect()
    }

    /// Partitions that are FAILED now (in memory, whether recorded or not),
    /// including those that could not be opened.
    pub(crate) fn failed(&self) -> Vec<TopicPartition> {
        self.slots
            .iter()
            .filter(|(_, s)| match s {
                Slot::Unopened(_) => true,
                Slot::Mirror(m) => m.state() == PartitionState::Failed,
                Slot::Waiting(_) | Slot::Refused(_) => false,
            })
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Partitions selected but refused before they became mirrors, each
    /// with the reason.
    pub(crate) fn refused(&self) -> Vec<(TopicPartition, String)> {
        self.slots
            .iter()
            .filter_map(|(tp, s)| match s {
                Slot::Refused(why) => Some((tp.clone(), why.clone())),
                _ => None,
            })
            .collect()
    }
}

/// The group commit's view of the table: steps route through the driver.
impl crate::group_commit::Partitions for MirrorTable {
    fn slot(&mut self, tp: &TopicPartition) -> Option<&mut MirrorSlot> {
        self.mirror_mut(tp)
    }

    fn failed(&mut self, tp: &TopicPartition, e: MirrorError) {
        self.fail(tp, e);
    }

    /// Readers told of a cut, and MIRRORING, whose record write (at the
    /// cycle's group commit) also carries what the preparation cleared in
    /// the record.
    fn prepared(&mut self, tp: &TopicPartition) {
        self.notices.truncated.insert(tp.clone());
        if let Some(slot) = self.mirror_mut(tp) {
            slot.persist_at_commit = true;
        }
        let moved = self.transition(tp, Event::Prepared);
        if let Some(slot) = self.mirror_mut(tp) {
            slot.persist_at_commit = false;
        }
        if let Err(e) = moved {
            tracing::debug!(partition = %tp, error = %e, "preparation finished in another state");
            if let Some(slot) = self.mirror_mut(tp)
                && let Err(e) = slot.mirror.save()
            {
                tracing::warn!(partition = %tp, error = %e, "could not record the preparation");
            }
        }
    }

    fn stopped(&mut self, tp: &TopicPartition) {
        self.notices.appended.insert(tp.clone());
        if let Err(e) = self.transition(tp, Event::Stopped) {
            tracing::debug!(partition = %tp, error = %e, "failover finished in another state");
        }
    }

    fn stop_again(&mut self, tp: TopicPartition) {
        self.changed.insert(tp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group_commit::Partitions;
    use kafkalog::{LogDir, TopicId};
    use manifest::clock::{Clock, ManualClock};
    use std::sync::Arc;
    use std::time::Duration;

    const ID: TopicId = TopicId::from_bytes([7; 16]);

    struct Fixture {
        _dir: tempfile::TempDir,
        logdir: LogDir,
        clock: Arc<dyn Clock>,
        table: MirrorTable,
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("orders", p).expect("tp")
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().expect("tempdir");
            let logdir = LogDir::open(dir.path()).expect("logdir");
            let reserve = DiskReserve::open(dir.path(), 0);
            let backoff = Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(60),
            };
            Fixture {
                _dir: dir,
                logdir,
                clock: Arc::new(ManualClock::new()),
                table: MirrorTable::new(backoff, reserve),
            }
        }

        /// A new mirror partition `orders-p`, PREPARING.
        fn create(&mut self, p: i32) {
            let log = self
                .logdir
                .open_or_create_partition(&tp(p), Some(ID), crate::engine::mirror_log_config())
                .expect("log");
            let record = crate::mirror::new_record("src", ID, state::initial().0);
            let mirror = Mirror::new(tp(p), log, record, Arc::clone(&self.clock));
            self.table.create(mirror).expect("created");
        }

        fn state(&self, p: i32) -> Option<PartitionState> {
            self.table.state_of(&tp(p))
        }
    }

    #[test]
    fn a_new_mirror_is_woken_and_shown() {
        let mut f = Fixture::new();
        f.table.stale = false;
        f.create(0);
        assert_eq!(f.state(0), Some(PartitionState::Preparing));
        assert!(f.table.changed.contains(&tp(0)));
        assert!(f.table.stale);
        assert_eq!(f.table.states().len(), 1);
    }

    /// One row per kind of failure: the state after it, whether it is
    /// waiting (state kept) and whether a retry is scheduled.
    #[test]
    fn failures_by_kind() {
        let rows: Vec<(&str, MirrorError, PartitionState, bool, bool)> = vec![
            (
                "not in the bucket yet: waits, state kept",
                MirrorError::NoManifest { tp: tp(0) },
                PartitionState::Preparing,
                true,
                false,
            ),
            (
                "a recreated source topic: FAILED for an operator",
                MirrorError::SourceRecreated {
                    tp: tp(0),
                    old: ID,
                    new: TopicId::from_bytes([8; 16]),
                },
                PartitionState::Failed,
                false,
                false,
            ),
        ];
        for (name, e, state, waiting, retry) in rows {
            let mut f = Fixture::new();
            f.create(0);
            let moved = f.table.fail(&tp(0), e);
            assert_eq!(f.state(0), Some(state), "{name}");
            assert_eq!(moved, !waiting, "{name}");
            let slot = f.table.mirror(&tp(0)).expect("slot");
            assert_eq!(slot.waiting.is_some(), waiting, "{name}");
            assert_eq!(slot.retry_at_ms.is_some(), retry, "{name}");
        }
    }

    #[test]
    fn the_group_commit_tells_readers_through_notices() {
        let mut f = Fixture::new();
        f.create(0);
        f.create(1);
        f.table.prepared(&tp(0));
        assert_eq!(f.state(0), Some(PartitionState::Mirroring));
        assert!(f.table.notices.truncated.contains(&tp(0)));
        f.table
            .transition(
                &tp(1),
                manifest::state::Event::from(manifest::state::Command::Stop),
            )
            .expect("stop");
        assert_eq!(f.state(1), Some(PartitionState::Stopping));
        f.table.stopped(&tp(1));
        assert_eq!(f.state(1), Some(PartitionState::Stopped));
        assert!(f.table.notices.appended.contains(&tp(1)));
        assert!(
            f.table.retention_due,
            "a STOPPED partition's retention is due"
        );
        let mut none = None;
        crate::serving::GatewayLink::tell(&mut none, &mut f.table.notices);
        assert!(
            f.table.notices.is_empty(),
            "told (or dropped without a gateway)"
        );
    }

    #[test]
    fn lists_of_failed_refused_and_unopened() {
        let mut f = Fixture::new();
        f.create(0);
        f.table
            .slots
            .insert(tp(1), Slot::Refused("internal topic".into()));
        f.table
            .slots
            .insert(tp(2), Slot::Unopened("permission denied".into()));
        f.table.slots.insert(tp(3), Slot::Waiting("lag".into()));
        assert_eq!(
            f.table.refused(),
            vec![(tp(1), "internal topic".to_string())]
        );
        assert_eq!(
            f.table.unopened(),
            vec![(tp(2), "permission denied".to_string())]
        );
        assert_eq!(f.table.failed(), vec![tp(2)]);
        // A partition that cannot be opened stays in the table as such.
        assert!(
            !f.table
                .restart(&tp(4), Err(MirrorError::NoManifest { tp: tp(4) }))
        );
        assert!(matches!(f.table.slots.get(&tp(4)), Some(Slot::Unopened(_))));
        // Not a mirror: its slot goes.
        assert!(f.table.restart(&tp(4), Ok(None)));
        assert!(!f.table.slots.contains_key(&tp(4)));
    }
}
