//! What the applier tells: the root checkpoints, status rows, the live
//! status file and metrics, the scrub, and the lists `applier once` reports
//! from.

#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::time::Instant;

use kafkalog::TopicPartition;
use manifest::state::PartitionState;

use crate::slot::Slot;

use super::Applier;

impl Applier {
    /// Writes the log dir's root checkpoints if a flush changed them (see
    /// [`LogDir::defer_checkpoints`]). A failure is logged and retried next
    /// cycle: checkpoints that lag only make recovery scan more.
    pub(super) fn write_checkpoints(&mut self) {
        let mut written = self.logdir.write_checkpoints();
        if let Err(e) = &written
            && crate::reserve::is_disk_full(e)
            && self.reserve.release()
        {
            written = self.logdir.write_checkpoints();
        }
        if let Err(e) = written {
            tracing::warn!(error = %e, "could not write the log dir's root checkpoints; retrying next cycle");
        }
    }

    /// Every mirror partition's status, from memory (no file is read).
    /// Partitions that could not be opened are FAILED here.
    pub fn status_rows(&self) -> Vec<crate::status::PartitionStatus> {
        let live =
            crate::live::live_status(&self.slots, self.bucket.head(), self.bucket.all_cached());
        crate::live::status_rows(&self.slots, &live, &self.opts.log_dir)
    }

    /// Rewrites the live status when something it shows changed or its
    /// refresh is due (`crate::live::LiveOutput::write_status`).
    pub(super) fn write_live_status(&mut self) {
        let (slots, head, held) = (&self.slots, self.bucket.head(), self.bucket.all_cached());
        // Without a feed head (the bucket unreadable after a failover) a
        // retention error is still worth showing.
        let worth_writing = head.is_some()
            || slots
                .values()
                .any(|s| s.mirror().is_some_and(|m| m.retention_error.is_some()));
        self.live.write_status(
            &self.opts.log_dir,
            worth_writing,
            || crate::live::live_status(slots, head, held),
            &mut self.reserve,
        );
    }

    /// Re-renders the metrics when due (`crate::live::LiveOutput::render_metrics`).
    pub(super) fn render_metrics(&mut self, changed: bool) {
        let (slots, head, log_dir) = (&self.slots, self.bucket.head(), &self.opts.log_dir);
        let held = self.bucket.all_cached();
        self.live.render_metrics(
            changed,
            || {
                let live = crate::live::live_status(slots, head, held);
                crate::live::status_rows(slots, &live, log_dir)
            },
            &self.counters,
            self.scrub.as_ref().map(|s| &s.stats),
        );
    }

    /// Turns on the scrub at `scrub_bytes_per_hour` (`applier run`).
    pub fn enable_scrub(&mut self) {
        self.scrub = crate::scrub::Scrub::new(self.opts.scrub_bytes_per_hour);
    }

    /// Each mirror partition's state.
    pub(super) fn mirror_states(&self) -> BTreeMap<TopicPartition, PartitionState> {
        self.mirror_slots()
            .map(|m| (m.tp().clone(), m.state()))
            .collect()
    }

    /// The scrub's share of this cycle (`crate::scrub`): damage found in a
    /// mirror partition fails it; on a STOPPED one it is only reported.
    pub(super) async fn scrub_step(&mut self) {
        let Some(mut scrub) = self.scrub.take() else {
            return;
        };
        let found = scrub.step(
            &self.opts.log_dir,
            &|| self.mirror_slots().map(|m| m.tp().clone()).collect(),
            &|tp| self.state_of(tp),
            Instant::now(),
            crate::clock::now_ms(),
        );
        self.live.stale |= !found.is_empty();
        for (tp, e) in found {
            self.fail(&tp, e);
            self.changed.insert(tp);
        }
        let n = scrub.objects_due();
        if n > 0
            && let Some(store) = self.bucket.store()
        {
            let candidates: Vec<_> = self
                .mirror_slots()
                .filter_map(|s| self.bucket.cached(s.tp()).map(|m| (s.tp().clone(), m)))
                .flat_map(|(tp, m)| m.ranges.iter().map(move |r| (tp.clone(), r.clone())))
                .collect();
            let now = crate::clock::now_ms();
            scrub
                .check_objects(&self.opts.log_dir, store, &candidates, n, now)
                .await;
        }
        self.scrub = Some(scrub);
    }

    /// Makes every retryable failure due now (for `applier once`, whose
    /// schedule is its backoff).
    pub fn retry_failures_now(&mut self) {
        let now = self.clock.now_ms();
        for slot in self.slots.values_mut().filter_map(Slot::mirror_mut) {
            if slot.retry_at_ms.is_some() {
                slot.retry_at_ms = Some(now);
                self.changed.insert(slot.tp().clone());
            }
        }
    }

    /// How many mirror partitions could not be opened.
    pub fn unopened_count(&self) -> usize {
        self.slots
            .values()
            .filter(|s| matches!(s, Slot::Unopened(_)))
            .count()
    }

    /// Partitions that are FAILED now (in memory, whether recorded or not),
    /// including those that could not be opened.
    pub fn failed(&self) -> Vec<TopicPartition> {
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

    /// Partitions selected (by `--topics` or `start`) but refused before
    /// they became mirrors, each with the reason (nothing was changed in
    /// them): `once` exits 1 naming them.
    pub fn refused(&self) -> Vec<(TopicPartition, String)> {
        self.slots
            .iter()
            .filter_map(|(tp, s)| match s {
                Slot::Refused(why) => Some((tp.clone(), why.clone())),
                _ => None,
            })
            .collect()
    }

    /// Publishes metrics to `exposition` after every cycle.
    pub fn set_metrics(&mut self, exposition: crate::metrics::Exposition) {
        self.live.metrics = Some(exposition);
    }
}
