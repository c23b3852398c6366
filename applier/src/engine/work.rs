//! A cycle's work ([`CycleWork`]): the changed partitions viewed as values,
//! scheduled (`crate::schedule`) and their work run in rounds
//! (preparations together, then each partition's apply, failover or retry),
//! and the retention of STOPPED partitions ([`enforce_retention`]).
//!
//! It works on the parts it is given (the partition table, the bucket, the
//! gaps ledger, the gateway's readers), never on the applier itself.

#![allow(clippy::result_large_err)]

use std::collections::BTreeSet;
use std::sync::Arc;

use kafkalog::TopicPartition;
use manifest::clock::Clock;
use manifest::partition::{PartitionManifest, ShippedRange};
use manifest::state::{Event, PartitionState};

use crate::bucket_reader::BucketReader;
use crate::error::MirrorError;
use crate::mirror::MirrorContext;
use crate::options::{ApplierOptions, CycleReport};
use crate::schedule::{PartitionView, Schedule, View, Wait, Work, schedule};
use crate::serving::GatewayLink;
use crate::slot::MirrorSlot;
use crate::table::MirrorTable;

use super::discovery::{manifest_for, refresh_manifests};

/// Rounds of scheduling per cycle: a partition's work that changed
/// something is scheduled again, at most this many times.
const MAX_ROUNDS: usize = 8;
/// Bytes between two ranges of a pack read through rather than split
/// into two GETs.
const READ_AHEAD_GAP: u64 = 64 << 10;
/// Largest run read ahead in one GET.
const READ_AHEAD_RUN: u64 = 16 << 20;

/// What a cycle's work runs on.
pub(super) struct CycleWork<'a> {
    pub(super) opts: &'a ApplierOptions,
    pub(super) clock: &'a Arc<dyn Clock>,
    pub(super) table: &'a mut MirrorTable,
    pub(super) bucket: &'a mut BucketReader,
    pub(super) gaps: &'a mut crate::gaps::Ledger,
    /// The gateway's readers, told after each partition's work.
    pub(super) readers: &'a mut Option<GatewayLink>,
    /// Partitions not resolved yet (unopened, or a feed head not yet gone
    /// through by discovery): the applier is not settled while any is.
    pub(super) unresolved: usize,
}

impl CycleWork<'_> {
    /// The view of `tps` that [`schedule`] decides on (mirror partitions
    /// only; a partition that is no longer one is left out).
    fn view_of(&self, tps: &BTreeSet<TopicPartition>) -> View {
        View {
            partitions: tps
                .iter()
                .filter_map(|tp| {
                    let slot = self.table.mirror(tp)?;
                    Some((tp.clone(), partition_view(self.bucket, slot)))
                })
                .collect(),
            has_bucket: self.bucket.store().is_some(),
            unresolved: self.unresolved,
        }
    }

    /// PREPARING's work for every partition of `tps` in PREPARING, all
    /// together (a first apply of many partitions, `start --all`): the
    /// manifests (read by `refresh_manifests`, else one GET each), then
    /// `group_commit::prepare_many`.
    async fn prepare_all(&mut self, tps: &[TopicPartition]) {
        let mut ready: Vec<(TopicPartition, PartitionManifest, MirrorContext)> = Vec::new();
        for tp in tps {
            if self.table.state_of(tp) != Some(PartitionState::Preparing) {
                continue;
            }
            match manifest_for(self.bucket, self.table, tp).await {
                Ok(Some(m)) => ready.push((tp.clone(), m, self.opts.context(tp))),
                // No bucket: preparation waits for one.
                Ok(None) => {}
                Err(e) => {
                    self.table.fail(tp, e);
                }
            }
        }
        crate::group_commit::prepare_many(self.table, ready);
        GatewayLink::tell(self.readers, &mut self.table.notices);
    }

    /// MIRRORING's work ([`Work::Apply`]): reconcile the local log with the
    /// latest manifest and append what it has beyond the log end. Returns
    /// true when something changed.
    async fn apply_latest(&mut self, tp: &TopicPartition, report: &mut CycleReport) -> bool {
        let manifest = match manifest_for(self.bucket, self.table, tp).await {
            Ok(Some(x)) => x,
            Ok(None) => return false,
            Err(e) => return self.table.fail(tp, e),
        };
        let ctx = self.opts.context(tp);
        let Some(store) = self.bucket.store().cloned() else {
            return false;
        };
        let reserve = &mut self.table.reserve;
        if !reserve.write_if_not_held() && !reserve.allows_appends() {
            let e = MirrorError::DiskReserve {
                tp: tp.clone(),
                path: reserve.path().to_path_buf(),
                bytes: reserve.size(),
                reason: reserve
                    .last_error()
                    .map_or_else(String::new, ToString::to_string),
            };
            return self.table.fail(tp, e);
        }
        self.table.stale = true;
        let Some(slot) = self.table.mirror_mut(tp) else {
            return false;
        };
        let before = slot.mirror.appended;
        let applied = slot.mirror.apply(&store, &manifest, &ctx).await;
        // What was appended, also when the pass failed part-way.
        let appended = slot.mirror.appended.0 - before.0;
        report.batches += appended;
        report.bytes += slot.mirror.appended.1 - before.1;
        let skipped = slot.mirror.skipped.take();
        let notices = &mut self.table.notices;
        match &applied {
            Ok(r) if r.truncated != 0 => {
                notices.truncated.insert(tp.clone());
            }
            _ if appended > 0 => {
                notices.appended.insert(tp.clone());
            }
            _ => {}
        }
        GatewayLink::tell(self.readers, &mut self.table.notices);
        if (applied.is_ok() || skipped.is_some())
            && !self
                .gaps
                .note(tp, &manifest.gaps, skipped, self.clock.now_ms())
                .is_empty()
        {
            self.table.stale = true;
        }
        match applied {
            Ok(r) => {
                let Some(slot) = self.table.mirror_mut(tp) else {
                    return false;
                };
                slot.waiting = None;
                if slot.mirror.record.state.retries() > 0
                    && let Err(e) = self.table.transition(tp, Event::Progressed)
                {
                    tracing::debug!(partition = %tp, error = %e, "progress in another state");
                }
                r.batches > 0 || r.truncated != 0
            }
            Err(e) => self.table.fail(tp, e),
        }
    }

    /// Schedules the partitions that changed ([`schedule`]) and runs their
    /// work, in rounds: the preparations together first, then each
    /// partition's work; a partition whose work changed something is
    /// scheduled again in the next round (at most [`MAX_ROUNDS`]), and the
    /// group commit comes last. What the last schedule leaves unsettled is
    /// viewed again next cycle.
    pub(super) async fn run(&mut self, report: &mut CycleReport) {
        if self.table.changed.is_empty() {
            return;
        }
        let mut viewed: BTreeSet<TopicPartition> = BTreeSet::new();
        for _ in 0..MAX_ROUNDS {
            let look = std::mem::take(&mut self.table.changed);
            if look.is_empty() {
                break;
            }
            if refresh_manifests(self.bucket, self.table, &look).await {
                self.table.stale = true;
            }
            let plan = schedule(&self.view_of(&look), self.clock.now_ms());
            viewed.extend(look);
            for (tp, p) in &plan.partitions {
                if p.fix_guard
                    && let Some(slot) = self.table.mirror_mut(tp)
                {
                    slot.reconcile_guard();
                }
            }
            self.prepare_all(&plan.with(|w| *w == Work::Prepare)).await;
            self.read_ahead(&plan).await;
            for (tp, p) in &plan.partitions {
                let before = self.table.state_of(tp);
                let again = self.perform(tp, &p.work, report).await;
                if self.table.state_of(tp) != before {
                    report.transitions += 1;
                }
                if again {
                    self.table.changed.insert(tp.clone());
                }
            }
        }
        if let Some(store) = self.bucket.store() {
            store.drop_read_ahead();
        }
        let viewed_now: Vec<TopicPartition> = viewed.iter().cloned().collect();
        crate::group_commit::commit_applied(self.table, &viewed_now);
        GatewayLink::tell(self.readers, &mut self.table.notices);
        // What is left to do is viewed again next cycle.
        viewed.extend(std::mem::take(&mut self.table.changed));
        let after = schedule(&self.view_of(&viewed), self.clock.now_ms());
        self.table.changed = after
            .partitions
            .into_iter()
            .filter(|(_, p)| p.unsettled)
            .map(|(tp, _)| tp)
            .collect();
        if after.settled {
            tracing::trace!("settled: the next cycles view no partition until something changes");
        }
    }

    /// Reads ahead, one ranged GET per run, the ranges the partitions
    /// applying now will fetch that share a pack (`bucket::ahead::runs`,
    /// within the download memory): a cycle of many partitions in one pack
    /// costs a GET per run of them, not one per partition.
    async fn read_ahead(&mut self, plan: &Schedule) {
        let Some(store) = self.bucket.store().cloned() else {
            return;
        };
        let mut wanted: Vec<&ShippedRange> = Vec::new();
        for (tp, p) in &plan.partitions {
            if !matches!(p.work, Work::Apply { .. }) {
                continue;
            }
            let (Some(slot), Some(m)) = (self.table.mirror(tp), self.bucket.cached(tp)) else {
                continue;
            };
            let end = slot.mirror.log.log_end_offset();
            wanted.extend(m.ranges.iter().filter(|r| r.last_offset >= end));
        }
        let runs = bucket::ahead::runs(
            wanted,
            READ_AHEAD_GAP,
            READ_AHEAD_RUN,
            self.opts.download_memory,
        );
        if !runs.is_empty() {
            let bytes = store.read_ahead(runs).await;
            tracing::trace!(bytes, "read ahead");
        }
    }

    /// One partition's scheduled work (preparations ran before, together).
    /// Returns true when it changed something (scheduled again).
    async fn perform(
        &mut self,
        tp: &TopicPartition,
        work: &Work,
        report: &mut CycleReport,
    ) -> bool {
        match work {
            Work::Prepare | Work::Wait(Wait::NoBucket | Wait::RetryAt(_)) => false,
            Work::Idle => {
                if let Some(slot) = self.table.mirror_mut(tp) {
                    // Caught up (or idle): nothing is awaited.
                    slot.waiting = None;
                }
                false
            }
            Work::Wait(Wait::NotInFeed) => {
                self.table
                    .fail(tp, MirrorError::NoManifest { tp: tp.clone() });
                false
            }
            Work::SourceRecreated { topic_id } => {
                let old = self.table.mirror(tp);
                let e = MirrorError::SourceRecreated {
                    tp: tp.clone(),
                    old: old.map_or(*topic_id, |s| s.mirror.record.topic_id),
                    new: *topic_id,
                };
                self.table.fail(tp, e)
            }
            Work::Apply { .. } => self.apply_latest(tp, report).await,
            Work::Progressed => {
                if let Err(e) = self.table.transition(tp, Event::Progressed) {
                    tracing::debug!(partition = %tp, error = %e, "progress in another state");
                }
                false
            }
            Work::Failover => {
                let ran = run_failover(self.table, tp);
                GatewayLink::tell(self.readers, &mut self.table.notices);
                ran
            }
            Work::Retry => {
                // What failed may have been a manifest since repaired.
                self.bucket.forget(tp);
                self.table.transition(tp, Event::RetryDue).is_ok()
            }
        }
    }
}

/// One mirror partition as a value.
pub(crate) fn partition_view(bucket: &BucketReader, slot: &MirrorSlot) -> PartitionView {
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
            bucket.entry(slot.tp()),
            bucket.cached(slot.tp()),
        )
    }
}

/// STOPPING's work (the failover, which needs no bucket), when the state
/// queued it. Returns true when it ran.
pub(super) fn run_failover(table: &mut MirrorTable, tp: &TopicPartition) -> bool {
    let Some(slot) = table.mirror_mut(tp) else {
        return false;
    };
    if slot.state() != PartitionState::Stopping {
        return false;
    }
    match slot.mirror.failover() {
        Ok(()) => {
            table.notices.appended.insert(tp.clone());
            if let Err(e) = table.transition(tp, Event::Stopped) {
                tracing::debug!(partition = %tp, error = %e, "failover finished in another state");
            }
        }
        Err(e) => {
            table.fail(tp, e);
        }
    }
    true
}

/// The retention pass at `now`, when one is due (`*due_at`, `None`: now):
/// each STOPPED partition whose check is due enforces its record's configs
/// (`crate::topic_configs::retention_pass`, `enforce`). Segments deleted
/// are logged and the readers told; an error is kept in the slot for
/// `status`, the partition's state unchanged.
pub(super) fn enforce_retention(table: &mut MirrorTable, due_at: &mut Option<i64>, now: i64) {
    if std::mem::take(&mut table.retention_due) {
        *due_at = None;
    }
    if due_at.is_some_and(|at| now < at) {
        return;
    }
    let pass = crate::topic_configs::retention_pass(
        table
            .mirror_slots()
            .map(|s| (s.tp(), s.state(), s.retention_checked_ms)),
        now,
    );
    for tp in pass.due {
        let Some(slot) = table.mirror_mut(&tp) else {
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
            table.stale = true;
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
            table.stale = true;
            table.notices.start_raised.insert(tp);
        }
    }
    *due_at = Some(pass.next_at_ms.unwrap_or(i64::MAX));
}
