//! A cycle's work: the changed partitions viewed as values, scheduled
//! (`crate::schedule`) and their work run in rounds (preparations together,
//! then each partition's apply, failover or retry), and the retention of
//! STOPPED partitions.

#![allow(clippy::result_large_err)]

use std::collections::BTreeSet;

use kafkalog::TopicPartition;
use manifest::partition::PartitionManifest;
use manifest::state::{Event, PartitionState};

use crate::error::MirrorError;
use crate::mirror::MirrorContext;
use crate::options::CycleReport;
use crate::schedule::{PartitionView, View, Wait, Work, schedule};
use crate::slot::{MirrorSlot, Slot};

use super::{Applier, MAX_ROUNDS};

impl Applier {
    /// The view of `tps` that [`schedule`] decides on (mirror partitions
    /// only; a partition that is no longer one is left out).
    pub(super) fn view_of(&self, tps: &BTreeSet<TopicPartition>) -> View {
        let unresolved = self.unopened_left
            + usize::from(
                self.bucket
                    .head()
                    .is_some_and(|h| self.discovered != Some(h.seq)),
            );
        View {
            partitions: tps
                .iter()
                .filter_map(|tp| {
                    let slot = self.slots.get(tp)?.mirror()?;
                    Some((tp.clone(), self.partition_view(slot)))
                })
                .collect(),
            has_bucket: self.bucket.store().is_some(),
            unresolved,
        }
    }

    /// One mirror partition as a value.
    pub(super) fn partition_view(&self, slot: &MirrorSlot) -> PartitionView {
        let m = &slot.mirror;
        PartitionView {
            retry_at_ms: slot.retry_at_ms,
            guard: slot.guard_set,
            action_error: slot.action_error.is_some(),
            waiting: slot.waiting.clone(),
            uncommitted: m.unflushed || m.record_dirty,
            ..PartitionView::of_record(
                &m.record,
                (m.log.log_start_offset(), m.log.log_end_offset()),
                self.bucket.entry(slot.tp()),
                self.bucket.cached(slot.tp()),
            )
        }
    }

    /// PREPARING's work for every partition of `tps` in PREPARING, all
    /// together (a first apply of many partitions, `start --all`): the
    /// manifests (read by `refresh_manifests`, else one GET each), then
    /// `group_commit::prepare_many`.
    pub(super) async fn prepare_all(&mut self, tps: &[TopicPartition]) {
        let mut ready: Vec<(TopicPartition, PartitionManifest, MirrorContext)> = Vec::new();
        for tp in tps {
            let queued = self
                .slots
                .get(tp)
                .and_then(Slot::mirror)
                .is_some_and(|s| s.state() == PartitionState::Preparing);
            if !queued {
                continue;
            }
            match self.manifest_for(tp).await {
                Ok(Some(m)) => ready.push((tp.clone(), m, self.context(tp))),
                // No bucket: preparation waits for one.
                Ok(None) => {}
                Err(e) => {
                    self.fail(tp, e);
                }
            }
        }
        crate::group_commit::prepare_many(self, ready);
    }

    /// MIRRORING's work ([`Work::Apply`]): reconcile the local log with the
    /// latest manifest and append what it has beyond the log end. Returns
    /// true when something changed.
    pub(super) async fn apply_latest(
        &mut self,
        tp: &TopicPartition,
        report: &mut CycleReport,
    ) -> bool {
        let manifest = match self.manifest_for(tp).await {
            Ok(Some(x)) => x,
            Ok(None) => return false,
            Err(e) => return self.fail(tp, e),
        };
        let ctx = self.context(tp);
        let Some(store) = self.bucket.store().cloned() else {
            return false;
        };
        if !self.reserve.write_if_not_held() && !self.reserve.allows_appends() {
            let e = MirrorError::DiskReserve {
                tp: tp.clone(),
                path: self.reserve.path().to_path_buf(),
                bytes: self.reserve.size(),
                reason: self
                    .reserve
                    .last_error()
                    .map_or_else(String::new, ToString::to_string),
            };
            return self.fail(tp, e);
        }
        self.live.stale = true;
        let Some(slot) = self.slots.get_mut(tp).and_then(Slot::mirror_mut) else {
            return false;
        };
        let before = slot.mirror.appended;
        let applied = slot.mirror.apply(&store, &manifest, &ctx).await;
        // What was appended, also when the pass failed part-way.
        let appended = slot.mirror.appended.0 - before.0;
        report.batches += appended;
        report.bytes += slot.mirror.appended.1 - before.1;
        match &applied {
            Ok(r) if r.truncated != 0 => self.tell_truncated(tp),
            _ if appended > 0 => self.tell_appended(tp),
            _ => {}
        }
        let skipped = self
            .slots
            .get_mut(tp)
            .and_then(Slot::mirror_mut)
            .and_then(|s| s.mirror.skipped.take());
        if (applied.is_ok() || skipped.is_some())
            && !self
                .gaps
                .note(tp, &manifest.gaps, skipped, self.clock.now_ms())
                .is_empty()
        {
            self.live.stale = true;
        }
        let Some(slot) = self.slots.get_mut(tp).and_then(Slot::mirror_mut) else {
            return false;
        };
        match applied {
            Ok(r) => {
                slot.waiting = None;
                if slot.mirror.record.state.retries() > 0
                    && let Err(e) = self.transition(tp, Event::Progressed)
                {
                    tracing::debug!(partition = %tp, error = %e, "progress in another state");
                }
                r.batches > 0 || r.truncated != 0
            }
            Err(e) => self.fail(tp, e),
        }
    }

    /// STOPPING's work (the failover, which needs no bucket), when the
    /// state queued it. Returns true when it ran.
    pub(super) fn run_failover(&mut self, tp: &TopicPartition) -> bool {
        let Some(slot) = self.slot_mut(tp) else {
            return false;
        };
        if slot.state() != PartitionState::Stopping {
            return false;
        }
        match slot.mirror.failover() {
            Ok(()) => {
                self.tell_appended(tp);
                if let Err(e) = self.transition(tp, Event::Stopped) {
                    tracing::debug!(partition = %tp, error = %e, "failover finished in another state");
                }
            }
            Err(e) => {
                self.fail(tp, e);
            }
        }
        true
    }

    /// Schedules the partitions that changed ([`schedule`]) and runs their
    /// work, in rounds: the preparations together first, then each
    /// partition's work; a partition whose work changed something is
    /// scheduled again in the next round (at most [`MAX_ROUNDS`]), and the
    /// group commit comes last. What the last schedule leaves unsettled is
    /// viewed again next cycle.
    pub(super) async fn work_changed(&mut self, report: &mut CycleReport) {
        if self.changed.is_empty() {
            return;
        }
        let mut viewed: BTreeSet<TopicPartition> = BTreeSet::new();
        for _ in 0..MAX_ROUNDS {
            let look = std::mem::take(&mut self.changed);
            if look.is_empty() {
                break;
            }
            self.refresh_manifests(&look).await;
            let plan = schedule(&self.view_of(&look), self.clock.now_ms());
            viewed.extend(look);
            for (tp, p) in &plan.partitions {
                if p.fix_guard
                    && let Some(slot) = self.slot_mut(tp)
                {
                    slot.reconcile_guard();
                }
            }
            self.prepare_all(&plan.with(|w| *w == Work::Prepare)).await;
            for (tp, p) in &plan.partitions {
                let before = self.state_of(tp);
                let again = match &p.work {
                    Work::Prepare | Work::Idle | Work::Wait(Wait::NoBucket | Wait::RetryAt(_)) => {
                        if p.work == Work::Idle
                            && let Some(slot) = self.slot_mut(tp)
                        {
                            // Caught up (or idle): nothing is awaited.
                            slot.waiting = None;
                        }
                        false
                    }
                    Work::Wait(Wait::NotInFeed) => {
                        self.fail(tp, MirrorError::NoManifest { tp: tp.clone() });
                        false
                    }
                    Work::SourceRecreated { topic_id } => {
                        let old = self.slots.get(tp).and_then(Slot::mirror);
                        let e = MirrorError::SourceRecreated {
                            tp: tp.clone(),
                            old: old.map_or(*topic_id, |s| s.mirror.record.topic_id),
                            new: *topic_id,
                        };
                        self.fail(tp, e)
                    }
                    Work::Apply { .. } => self.apply_latest(tp, report).await,
                    Work::Progressed => {
                        if let Err(e) = self.transition(tp, Event::Progressed) {
                            tracing::debug!(partition = %tp, error = %e, "progress in another state");
                        }
                        false
                    }
                    Work::Failover => self.run_failover(tp),
                    Work::Retry => {
                        // What failed may have been a manifest since repaired.
                        self.bucket.forget(tp);
                        self.transition(tp, Event::RetryDue).is_ok()
                    }
                };
                if self.state_of(tp) != before {
                    report.transitions += 1;
                }
                if again {
                    self.changed.insert(tp.clone());
                }
            }
        }
        let viewed_now: Vec<TopicPartition> = viewed.iter().cloned().collect();
        crate::group_commit::commit_applied(self, &viewed_now);
        // What is left to do is viewed again next cycle.
        viewed.extend(std::mem::take(&mut self.changed));
        let after = schedule(&self.view_of(&viewed), self.clock.now_ms());
        self.changed = after
            .partitions
            .into_iter()
            .filter(|(_, p)| p.unsettled)
            .map(|(tp, _)| tp)
            .collect();
        if after.settled {
            tracing::trace!("settled: the next cycles view no partition until something changes");
        }
    }

    /// The retention pass, when one is due: each STOPPED partition whose
    /// check is due enforces its record's configs
    /// (`crate::topic_configs::retention_pass`, `enforce`). Segments
    /// deleted are logged and the gateway's readers told; an error is kept
    /// in the slot for `status`, the partition's state unchanged.
    pub(super) fn enforce_retention(&mut self) {
        let now = self.clock.now_ms();
        if self.retention_at.is_some_and(|at| now < at) {
            return;
        }
        let pass = crate::topic_configs::retention_pass(
            self.mirror_slots()
                .map(|s| (s.tp(), s.state(), s.retention_checked_ms)),
            now,
        );
        for tp in pass.due {
            let Some(slot) = self.slot_mut(&tp) else {
                continue;
            };
            slot.retention_checked_ms = Some(now);
            let m = &mut slot.mirror;
            let enforced =
                crate::topic_configs::enforce(&mut m.log, m.record.topic_configs.as_ref(), now);
            let error = enforced.as_ref().err().map(ToString::to_string);
            if slot.retention_error != error {
                match &error {
                    Some(e) => {
                        tracing::warn!(partition = %tp, error = %e, "retention not enforced");
                    }
                    None => tracing::info!(partition = %tp, "retention enforced again"),
                }
                slot.retention_error = error;
                self.live.stale = true;
            }
            if let Ok(Some(cut)) = enforced {
                tracing::info!(
                    partition = %tp,
                    segments = cut.segments,
                    bytes = cut.bytes,
                    log_start = cut.new_log_start,
                    reason = ?cut.reason,
                    "retention deleted old segments"
                );
                self.live.stale = true;
                if let Some(link) = &self.gateway {
                    link.start_raised(&tp);
                }
            }
        }
        self.retention_at = Some(pass.next_at_ms.unwrap_or(i64::MAX));
    }
}
