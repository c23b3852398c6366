//! The applier: the one file that owns `impl Applier` and wires the
//! executors together.
//!
//! One cycle ([`Applier::run_once`]): the feed read (`bucket_reader`: one
//! GET when nothing changed), partitions that cannot be opened opened again
//! (`opening`), partitions the selection picks adopted (`discover`), then
//! the partitions that changed since the last cycle viewed as values and
//! scheduled (`schedule::schedule`), their work run in rounds
//! (preparations together through `group_commit::prepare_many`, then each
//! partition's apply, failover or retry), the cycle's group commit
//! (`group_commit::commit_applied`), the retention of STOPPED partitions
//! (`topic_configs::retention_pass`: each checked every five minutes, no
//! work in a cycle where none is due), the group offsets sync
//! (`group_sync`), the root checkpoints, the scrub, and the live status
//! and metrics (`live`). Operator commands are planned by `command_plan`
//! and performed here (`group_commit::failover_many` for stops).
//!
//! Invariants:
//! - Every state change goes through the driver (`driver`), which performs
//!   the actions `manifest::state::next` returns; the work a partition has
//!   is derived from its state by the schedule, never stored beside it.
//! - An idle cycle does no work per partition: `changed` is empty after a
//!   settled cycle, and only a feed change, a command, a producer's append
//!   to a mirror, a transition whose actions wake its partition, a failure
//!   or a partition the last schedule left unsettled (a retry to wait for,
//!   the bucket to wait for) put one back.
//! - Records of a partition's own (a plain partition adopted, a STOPPED one
//!   started again) are cut only with `--allow-truncate`: otherwise the
//!   adoption or start is refused before anything is written
//!   (`manifest::cut`). A log dir whose `.lock` a running broker holds is
//!   never opened.
//! - A failure is isolated to its partition (FAILED, or waiting for the
//!   bucket); STOPPED and FAILED partitions are never restarted without an
//!   operator's `start` (a retryable failure retries from FAILED by itself).
//! - The applier is the log dir's single writer: producers' appends from a
//!   gateway (`serving`) and the group offsets sync write through it.

// `MirrorError` carries the store's and the log's errors by value; it is
// built only on the failure path, where its size costs nothing measurable.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bucket::store::{ManifestStore, StoreError};
use kafkalog::{LogDir, TopicId, TopicPartition};
use manifest::clock::{Clock, SystemClock};
use manifest::layout::ClusterLayout;
use manifest::partition::PartitionManifest;
use manifest::state::{self, Command, Event, PartitionState};
use manifest::topic_pattern::Selection;
use object_store::ObjectStore;

use crate::bucket_reader::BucketReader;
use crate::driver::{Backoff, Env};
use crate::error::{MirrorError, OpenError};
use crate::mirror::{Mirror, MirrorContext};
use crate::schedule::{PartitionView, View, Wait, Work, schedule};
use crate::slot::{MirrorSlot, Slot};

pub use crate::options::{
    ApplierOptions, CommandOutcome, CycleReport, DEFAULT_DOWNLOAD_MEMORY, mirror_log_config,
};

/// The applier over one log dir.
#[derive(Debug)]
pub struct Applier {
    opts: ApplierOptions,
    pub(crate) logdir: LogDir,
    /// The bucket: the feed, the manifests and the ones held.
    bucket: BucketReader,
    pub(crate) slots: BTreeMap<TopicPartition, Slot>,
    clock: Arc<dyn Clock>,
    pub(crate) counters: crate::metrics::Counters,
    /// The live status and the metrics as last written.
    pub(crate) live: crate::live::LiveOutput,
    /// The feed head `discover` last went through with no partition left
    /// to retry.
    discovered: Option<u64>,
    /// The mirror partitions the next cycle views and schedules
    /// (`crate::schedule`): those a feed change, a command, an append, a
    /// transition or a failure touched, and those the last schedule left
    /// unsettled (a retry to wait for, the bucket to wait for). Empty after
    /// a settled cycle, so an idle cycle over 10,000 partitions costs the
    /// feed's GET, not 10,000 lookups.
    pub(crate) changed: BTreeSet<TopicPartition>,
    /// Mirror partitions that could not be opened, seen by the last
    /// `reopen_unopened`.
    unopened_left: usize,
    reserve: crate::reserve::DiskReserve,
    /// The Kafka gateway served from this process, if any.
    pub(crate) gateway: Option<crate::serving::GatewayLink>,
    /// Partitions of the log dir that are not mirrors, open for writing
    /// (producers through the gateway, the group offsets sync).
    pub(crate) producer_logs: gateway::writer::PlainLogs,
    /// The source's consumer-group offsets and what was synced of them.
    group_sync: crate::group_sync::GroupOffsetsSync,
    /// Gaps known (offsets never received), written when one is new.
    gaps: crate::gaps::Ledger,
    /// The background verification of `applier run` (`crate::scrub`).
    scrub: Option<crate::scrub::Scrub>,
    /// The operator command being performed gave `--allow-truncate`.
    command_allows_truncate: bool,
    /// When the next retention pass over the STOPPED partitions is due
    /// (`crate::topic_configs::retention_pass`); `None`: at the next cycle
    /// (after a start, or a transition that may have stopped one).
    retention_at: Option<i64>,
}

impl Applier {
    /// Opens the log dir (taking its lock), loads every mirror partition's
    /// record and restores what a crash may have interrupted: the write
    /// guard matches each state again, a recorded retryable failure is
    /// scheduled, and an interrupted STOPPING completes. `store` is the
    /// bucket (None for commands that need none).
    pub fn open(
        opts: ApplierOptions,
        store: Option<Arc<dyn ObjectStore>>,
    ) -> Result<Applier, OpenError> {
        Applier::open_with_clock(opts, store, Arc::new(SystemClock))
    }

    /// [`Applier::open`] with a clock (tests move it to make retries due).
    pub fn open_with_clock(
        opts: ApplierOptions,
        store: Option<Arc<dyn ObjectStore>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Applier, OpenError> {
        // A dir a running Kafka broker owns is never written here.
        kafkalog::logdir::refuse_if_owned_by_broker(&opts.log_dir)?;
        let logdir = LogDir::open(&opts.log_dir)?;
        // Root checkpoints once per cycle (`run_once`), not per flush.
        logdir.defer_checkpoints(true)?;
        let store = match store {
            Some(s) => {
                let ms = ManifestStore::new(
                    s,
                    ClusterLayout::new(&opts.bucket_prefix, &opts.source_cluster_id)?,
                );
                Some(if opts.bucket_location.is_empty() {
                    ms
                } else {
                    ms.with_location(opts.bucket_location.clone())
                })
            }
            None => None,
        };
        let reserve = crate::reserve::DiskReserve::open(logdir.root(), opts.disk_reserve_bytes);
        let gaps = crate::gaps::Ledger::open(&opts.log_dir);
        let mut applier = Applier {
            opts,
            logdir,
            bucket: BucketReader::new(store),
            slots: BTreeMap::new(),
            clock,
            counters: crate::metrics::Counters::default(),
            live: crate::live::LiveOutput::default(),
            discovered: None,
            changed: BTreeSet::new(),
            unopened_left: 0,
            reserve,
            gateway: None,
            producer_logs: gateway::writer::PlainLogs::default(),
            group_sync: crate::group_sync::GroupOffsetsSync::default(),
            gaps,
            scrub: None,
            command_allows_truncate: false,
            retention_at: None,
        };
        // Every log opened first (recovery and unfinished ranges cut, each
        // durable on its own), then every state's actions redone (the
        // write guards made durable again) at one barrier.
        let opened: Vec<_> = applier
            .logdir
            .partitions()?
            .into_iter()
            .map(|tp| {
                let mirror = applier.open_mirror_log(&tp);
                (tp, mirror)
            })
            .collect();
        let scope = kafkalog::fsutil::DeferredSync::begin();
        for (tp, mirror) in opened {
            applier.restart_mirror(&tp, mirror);
        }
        scope.finish().map_err(OpenError::Guards)?;
        // An interrupted failover completes now, bucket or not.
        let stopping: Vec<_> = applier
            .mirror_slots()
            .filter(|m| m.state() == PartitionState::Stopping)
            .map(|m| m.tp().clone())
            .collect();
        // Damage recorded by `applier verify` (or a scrub before a restart)
        // fails its mirror partitions (`crate::scrub::recorded_failures`).
        let states = applier.mirror_states();
        for (tp, e) in crate::scrub::recorded_failures(&applier.opts.log_dir, &states) {
            applier.fail(&tp, e);
        }
        for tp in stopping {
            applier.run_failover(&tp);
        }
        applier.write_checkpoints();
        Ok(applier)
    }

    fn env(&mut self) -> (Env<'_>, &mut BTreeMap<TopicPartition, Slot>) {
        (
            Env {
                backoff: Backoff {
                    base: self.opts.base_backoff,
                    max: self.opts.max_backoff,
                },
                reserve: &mut self.reserve,
                wake: &mut self.changed,
            },
            &mut self.slots,
        )
    }

    /// Opens one partition of the log dir if it is a mirror and restarts its
    /// driver. A non-mirror partition gets no slot; one that cannot be
    /// opened fails alone (the others mirror on) and is opened again every
    /// cycle.
    fn open_mirror(&mut self, tp: &TopicPartition) {
        let opened = self.open_mirror_log(tp);
        self.restart_mirror(tp, opened);
    }

    /// Opens a mirror partition's log and record (`None`: not a mirror;
    /// `crate::opening::open_existing`).
    fn open_mirror_log(&self, tp: &TopicPartition) -> Result<Option<Mirror>, MirrorError> {
        crate::opening::open_existing(&self.logdir, tp, &self.clock)
    }

    /// Puts an opened mirror partition in its slot, its state's actions
    /// performed again (`MirrorSlot::restart`).
    fn restart_mirror(&mut self, tp: &TopicPartition, opened: Result<Option<Mirror>, MirrorError>) {
        let slot = match opened {
            Ok(None) => {
                self.slots.remove(tp);
                return;
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
        match &slot {
            Slot::Unopened(e) => {
                tracing::error!(partition = %tp, error = %e, "cannot open the mirror partition; retrying every cycle");
            }
            _ => {
                self.changed.insert(tp.clone());
                // It may be STOPPED: its retention is checked next cycle.
                self.retention_at = None;
            }
        }
        self.slots.insert(tp.clone(), slot);
    }

    /// Opens again the partitions that could not be opened before.
    fn reopen_unopened(&mut self) {
        let tps: Vec<TopicPartition> = self
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Unopened(_)))
            .map(|(tp, _)| tp.clone())
            .collect();
        self.unopened_left = 0;
        if tps.is_empty() {
            return;
        }
        self.live.stale = true;
        // A partition opened now may turn out not to be a mirror: a
        // candidate for `discover` again.
        self.discovered = None;
        for tp in tps {
            self.open_mirror(&tp);
            match self.slots.get(&tp) {
                Some(Slot::Mirror(_)) => {
                    tracing::info!(partition = %tp, "opened the mirror partition");
                }
                Some(Slot::Unopened(_)) => self.unopened_left += 1,
                _ => {}
            }
        }
    }

    /// Reads the change feed once within `timeout`: the reachability
    /// check of `applier once`, which gives up on an unreachable store
    /// instead of retrying for ever. The caller explains a failure
    /// ([`bucket::first_request::explain_first_request`]) and names the bucket.
    pub async fn probe_store(
        &mut self,
        timeout: Duration,
    ) -> Result<(), bucket::diagnosis::FirstRequestFailure> {
        use bucket::diagnosis::{FirstRequestFailure, one_line};
        match tokio::time::timeout(timeout, self.poll_feed()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(FirstRequestFailure::Failed(one_line(&e))),
            Err(_) => Err(FirstRequestFailure::NoAnswer(timeout)),
        }
    }

    /// The topic selection (`topics`, `exclude`).
    pub fn selection(&self) -> Selection<'_> {
        Selection {
            include: self.opts.topics.as_ref(),
            exclude: self.opts.exclude.as_ref(),
        }
    }

    /// The options.
    pub fn options(&self) -> &ApplierOptions {
        &self.opts
    }

    fn mirror_slots(&self) -> impl Iterator<Item = &MirrorSlot> {
        self.slots.values().filter_map(Slot::mirror)
    }

    fn slot_mut(&mut self, tp: &TopicPartition) -> Option<&mut MirrorSlot> {
        self.slots.get_mut(tp).and_then(Slot::mirror_mut)
    }

    /// The mirror partitions.
    pub fn mirrors(&self) -> impl Iterator<Item = &Mirror> {
        self.mirror_slots().map(|m| &m.mirror)
    }

    /// The state of one partition, if it is a mirror.
    pub fn state_of(&self, tp: &TopicPartition) -> Option<PartitionState> {
        self.slots.get(tp)?.mirror().map(MirrorSlot::state)
    }

    fn context(&self, tp: &TopicPartition) -> MirrorContext {
        MirrorContext {
            local_cluster_id: self.opts.local_cluster_id.clone(),
            tiered_storage: self.opts.tiered_topics.iter().any(|t| t == &tp.topic),
            prefetch: self.opts.prefetch,
            download_memory: self.opts.download_memory,
            stream_above: self.opts.stream_above,
            allow_truncate: self.opts.allow_truncate,
            config_filter: std::sync::Arc::clone(&self.opts.config_filter),
        }
    }

    /// Whether cutting records of a partition's own is allowed now.
    fn truncate_allowed(&self) -> bool {
        self.opts.allow_truncate || self.command_allows_truncate
    }

    /// Drives one partition's state machine with `event` (see
    /// [`crate::driver`]). Returns the new state.
    fn transition(
        &mut self,
        tp: &TopicPartition,
        event: Event,
    ) -> Result<PartitionState, state::TransitionError> {
        self.live.stale = true;
        // It may have become STOPPED: retention is checked at the next cycle.
        self.retention_at = None;
        let (mut env, slots) = self.env();
        match slots.get_mut(tp).and_then(Slot::mirror_mut) {
            Some(slot) => slot.drive(event, &mut env),
            None => Ok(PartitionState::Failed),
        }
    }

    /// Records `e` as the partition's failure (or, for replication lag,
    /// as what it waits for). Returns true (something changed).
    fn fail(&mut self, tp: &TopicPartition, e: MirrorError) -> bool {
        self.live.stale = true;
        if e.is_waiting() {
            // Replication has not delivered it yet: wait, keep the state.
            tracing::info!(partition = %tp, reason = %e, "waiting for the bucket");
            if let Some(slot) = self.slot_mut(tp) {
                slot.waiting = Some(e.to_string());
            }
            return false;
        }
        if let Some(slot) = self.slot_mut(tp) {
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

    /// Reads the change feed: one GET when nothing changed, a LIST at start
    /// and every `RESYNC_INTERVAL`.
    async fn poll_feed(&mut self) -> Result<bool, StoreError> {
        let changed = self.bucket.poll().await?;
        if changed {
            // Every mirror partition's feed entry may have changed.
            self.live.stale = true;
            let all: Vec<TopicPartition> = self.mirror_slots().map(|m| m.tp().clone()).collect();
            self.changed.extend(all);
        }
        Ok(changed)
    }

    /// Starts mirroring partitions of the feed that the selection picks and
    /// that have no slot yet (or wait for their manifest).
    async fn discover(&mut self) {
        let Some(head) = self.bucket.head() else {
            return;
        };
        let seq = head.seq;
        if self.discovered == Some(seq) {
            // The same head as last time, with nothing left to retry.
            return;
        }
        let candidates: Vec<_> = self
            .selection()
            .pick(head)
            .into_iter()
            .filter(|(tp, _, _)| {
                self.slots
                    .get(tp)
                    .is_none_or(|s| matches!(s, Slot::Waiting(_)))
            })
            .collect();
        let mut complete = true;
        // Every candidate's manifest, read concurrently (one GET each).
        if self.bucket.store().is_none() {
            return;
        }
        let confirmed = self.bucket.confirm_many(candidates).await;
        // Then every partition created, durable at one barrier before any
        // of them is prepared or appended to.
        let scope = kafkalog::fsutil::DeferredSync::begin();
        let mut adopted: Vec<TopicPartition> = Vec::new();
        for (tp, topic_id, manifest) in confirmed {
            self.live.stale = true;
            let manifest = match manifest {
                Ok(m) => m,
                Err(waiting) => {
                    // Its manifest is not readable yet: look again next cycle.
                    self.slots.insert(tp, Slot::Waiting(waiting));
                    complete = false;
                    continue;
                }
            };
            match self.adopt(&tp, topic_id, Some(manifest)) {
                Ok(()) => adopted.push(tp),
                Err(reason) => {
                    tracing::error!(partition = %tp, %reason, "not mirrored");
                    self.slots.insert(tp, Slot::Refused(reason.to_string()));
                }
            }
        }
        if let Err(e) = scope.finish() {
            tracing::error!(error = %e, "making the new mirror partitions durable failed; they are prepared when the next cycle opens them again");
            for tp in adopted {
                self.slots.remove(&tp);
            }
            complete = false;
        }
        self.discovered = complete.then_some(seq);
    }

    /// Creates the mirror partition (state PREPARING). A partition that
    /// already holds records of its own is refused, before anything in it
    /// is opened or written, when its preparation would cut some of them
    /// and that is not allowed (`manifest::cut`).
    fn adopt(
        &mut self,
        tp: &TopicPartition,
        topic_id: TopicId,
        manifest: Option<PartitionManifest>,
    ) -> Result<(), crate::opening::AdoptError> {
        let ctx = self.context(tp);
        let adoption = crate::opening::Adoption {
            logdir: &self.logdir,
            source: &self.opts.source_cluster_id,
            allowed: self.truncate_allowed(),
            ctx: &ctx,
            clock: &self.clock,
        };
        let mirror = crate::opening::adopt(&adoption, tp, topic_id, manifest.as_ref())?;
        let (mut env, _) = self.env();
        let slot = crate::driver::create(mirror, &mut env)?;
        if let Some(m) = manifest {
            self.bucket.keep(tp, m);
        }
        tracing::info!(partition = %tp, source = %self.opts.source_cluster_id, "started mirroring");
        self.slots.insert(tp.clone(), Slot::Mirror(Box::new(slot)));
        self.changed.insert(tp.clone());
        self.live.stale = true;
        Ok(())
    }

    /// The latest manifest of a mirror partition
    /// (`BucketReader::latest`); `Ok(None)` without a bucket.
    async fn manifest_for(
        &mut self,
        tp: &TopicPartition,
    ) -> Result<Option<PartitionManifest>, MirrorError> {
        let Some(slot) = self.slots.get(tp).and_then(Slot::mirror) else {
            return Ok(None);
        };
        let topic_id = slot.mirror.record.topic_id;
        self.bucket.latest(tp, topic_id).await
    }

    /// The view of `tps` that [`schedule`] decides on (mirror partitions
    /// only; a partition that is no longer one is left out).
    fn view_of(&self, tps: &BTreeSet<TopicPartition>) -> View {
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
    fn partition_view(&self, slot: &MirrorSlot) -> PartitionView {
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

    /// Reads, [`crate::bucket_reader::CONCURRENCY`] at once, the manifests that the
    /// work of `tps` will need and that are not in memory (a partition
    /// MIRRORING or PREPARING whose cached manifest is older than the
    /// feed's entry), so that a restart or a cycle where many partitions
    /// moved waits for one round of GETs instead of one GET per partition
    /// in turn, and the schedule sees them. A read that fails is left to
    /// the partition's work, which reads again and reports it.
    async fn refresh_manifests(&mut self, tps: &BTreeSet<TopicPartition>) {
        let wanted: Vec<(TopicPartition, TopicId)> = tps
            .iter()
            .filter_map(|tp| self.slots.get(tp)?.mirror())
            .filter(|slot| {
                matches!(
                    slot.state(),
                    PartitionState::Mirroring | PartitionState::Preparing
                )
            })
            .map(|slot| (slot.tp().clone(), slot.mirror.record.topic_id))
            .collect();
        if self.bucket.refresh(wanted).await {
            self.live.stale = true;
        }
    }

    /// PREPARING's work for every partition of `tps` in PREPARING, all
    /// together (a first apply of many partitions, `start --all`): the
    /// manifests (read by `refresh_manifests`, else one GET each), then
    /// `group_commit::prepare_many`.
    async fn prepare_all(&mut self, tps: &[TopicPartition]) {
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
    async fn apply_latest(&mut self, tp: &TopicPartition, report: &mut CycleReport) -> bool {
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
    fn run_failover(&mut self, tp: &TopicPartition) -> bool {
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

    /// One cycle: read the feed, start new partitions, then schedule and
    /// run the work of every partition that changed until nothing more can
    /// be done now.
    pub async fn run_once(&mut self) -> CycleReport {
        let mut report = CycleReport::default();
        match self.poll_feed().await {
            Ok(_) => {}
            Err(e) => {
                report.feed_error = Some(e.to_string());
                tracing::warn!(error = %e, "could not read the change feed; retrying next cycle");
            }
        }
        self.reopen_unopened();
        self.discover().await;
        self.work_changed(&mut report).await;
        // Retention of the STOPPED partitions, before the root checkpoints
        // record their new log starts.
        self.enforce_retention();
        // The source's consumer-group offsets, onto what was just applied.
        self.sync_groups(&report).await;
        // Once per cycle for every partition flushed in it.
        self.write_checkpoints();
        self.scrub_step().await;
        let changed = self.live.stale;
        self.write_live_status();
        self.counters.batches += report.batches;
        self.counters.bytes += report.bytes;
        self.counters.cycles += 1;
        let pointer = self.bucket.head().and_then(|h| h.groups);
        self.group_sync.count_into(&mut self.counters, pointer);
        self.render_metrics(changed);
        report
    }

    /// Schedules the partitions that changed ([`schedule`]) and runs their
    /// work, in rounds: the preparations together first, then each
    /// partition's work; a partition whose work changed something is
    /// scheduled again in the next round (at most [`MAX_ROUNDS`]), and the
    /// group commit comes last. What the last schedule leaves unsettled is
    /// viewed again next cycle.
    async fn work_changed(&mut self, report: &mut CycleReport) {
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
    fn enforce_retention(&mut self) {
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

    /// Writes the log dir's root checkpoints if a flush changed them (see
    /// [`LogDir::defer_checkpoints`]). A failure is logged and retried next
    /// cycle: checkpoints that lag only make recovery scan more.
    fn write_checkpoints(&mut self) {
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
    fn write_live_status(&mut self) {
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
    fn render_metrics(&mut self, changed: bool) {
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
    fn mirror_states(&self) -> BTreeMap<TopicPartition, PartitionState> {
        self.mirror_slots()
            .map(|m| (m.tp().clone(), m.state()))
            .collect()
    }

    /// The scrub's share of this cycle (`crate::scrub`): damage found in a
    /// mirror partition fails it; on a STOPPED one it is only reported.
    async fn scrub_step(&mut self) {
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

    /// Runs an operator command on `targets` (all mirror partitions when
    /// empty and `all`). A command the state does not allow changes nothing
    /// and is reported with its reason. `stop` completes the failover before
    /// returning. `start` on a partition that is not a mirror yet adopts it
    /// (its topic id comes from the feed).
    pub async fn command(
        &mut self,
        command: Command,
        targets: &[String],
        all: bool,
    ) -> Vec<CommandOutcome> {
        self.command_allowing(command, targets, all, false).await
    }

    /// [`Applier::command`], where `allow_truncate` says whether a `start`
    /// may cut records of a partition's own (`manifest::cut`; the
    /// applier's own `allow_truncate` option allows it too).
    pub async fn command_allowing(
        &mut self,
        command: Command,
        targets: &[String],
        all: bool,
        allow_truncate: bool,
    ) -> Vec<CommandOutcome> {
        self.command_allows_truncate = allow_truncate;
        let out = self.perform_command(command, targets, all).await;
        self.command_allows_truncate = false;
        out
    }

    async fn perform_command(
        &mut self,
        command: Command,
        targets: &[String],
        all: bool,
    ) -> Vec<CommandOutcome> {
        if command == Command::Start
            && let Err(e) = self.poll_feed().await
        {
            tracing::warn!(error = %e, "could not read the change feed before start");
        }
        let mirrors: Vec<TopicPartition> = self.mirror_slots().map(|m| m.tp().clone()).collect();
        let unopened: Vec<(TopicPartition, String)> = self
            .slots
            .iter()
            .filter_map(|(tp, s)| match s {
                Slot::Unopened(e) => Some((tp.clone(), e.clone())),
                _ => None,
            })
            .collect();
        let in_feed: Vec<TopicPartition> = match (command, self.bucket.head()) {
            (Command::Start, Some(h)) => h
                .partitions
                .values()
                .filter(|e| !e.deleted)
                .filter_map(|e| TopicPartition::new(&e.topic, e.partition).ok())
                .collect(),
            _ => Vec::new(),
        };
        let known = crate::command_plan::Known {
            mirrors: &mirrors,
            unopened: &unopened,
            in_feed: &in_feed,
        };
        let tps = match crate::command_plan::resolve(command, targets, all, known) {
            Ok(tps) => tps,
            Err(refused) => return vec![refused],
        };
        self.changed.extend(tps.iter().cloned());
        // Partitions new to this log dir (start only) are adopted one by
        // one (reading their manifest); the mirror partitions take the
        // command together, durable in a few barriers (`command_mirrors`).
        let (mirrors, new): (Vec<TopicPartition>, Vec<TopicPartition>) = tps
            .into_iter()
            .partition(|tp| self.slots.get(tp).and_then(Slot::mirror).is_some());
        let mut out = Vec::new();
        for tp in new {
            out.push(self.adopt_for_start(&tp).await);
        }
        let manifests = if command == Command::Start {
            self.start_manifests(&mirrors).await
        } else {
            BTreeMap::new()
        };
        out.extend(self.command_mirrors(command, &mirrors, &manifests));
        self.live.stale = true;
        self.discovered = None;
        self.write_checkpoints();
        self.write_live_status();
        out
    }

    /// `start` of a partition that is not a mirror here yet: adopts it from
    /// the feed (PREPARING).
    async fn adopt_for_start(&mut self, tp: &TopicPartition) -> CommandOutcome {
        let name = tp.to_string();
        let Some((topic_id, version)) = self
            .bucket
            .entry(tp)
            .map(|e| (e.topic_id, e.manifest_version))
        else {
            return CommandOutcome {
                partition: name,
                state: None,
                error: Some("not in the source's bucket".into()),
            };
        };
        self.live.stale = true;
        let manifest = match self.bucket.confirm(tp, topic_id, version).await {
            Ok(m) => m,
            Err(waiting) => {
                self.slots
                    .insert(tp.clone(), Slot::Waiting(waiting.clone()));
                return CommandOutcome {
                    partition: name.clone(),
                    state: None,
                    error: Some(format!(
                        "the source's manifest of {name} cannot be read: {waiting}"
                    )),
                };
            }
        };
        match self.adopt(tp, topic_id, manifest) {
            Ok(()) => CommandOutcome {
                partition: name,
                state: Some("PREPARING".into()),
                error: None,
            },
            Err(reason) => {
                let reason = reason.to_string();
                self.slots.insert(tp.clone(), Slot::Refused(reason.clone()));
                CommandOutcome {
                    partition: name,
                    state: Some("FAILED".into()),
                    error: Some(reason),
                }
            }
        }
    }

    /// Runs `command` on mirror partitions `tps`, all together: each phase
    /// for every partition, then one barrier
    /// ([`kafkalog::fsutil::DeferredSync`]) before the next phase, so that
    /// every partition's writes become durable in the order its protocol
    /// needs, the fsyncs of each phase done together at its barrier
    /// instead of one after the other:
    /// 1. the command's transition (records, write guards);
    /// 2. for a stop: the LME and stop epoch in each record;
    /// 3. for a stop: each log's epoch raised and open transactions aborted,
    ///    and STOPPED for the partitions that had none to abort (their epoch
    ///    bump is redone at every open, so it need not be durable first);
    /// 4. for a stop: STOPPED for the others, once their ABORT markers are.
    ///
    /// No `.await` in here: the deferred scope belongs to this thread.
    fn command_mirrors(
        &mut self,
        command: Command,
        tps: &[TopicPartition],
        manifests: &BTreeMap<TopicPartition, PartitionManifest>,
    ) -> Vec<CommandOutcome> {
        if tps.is_empty() {
            return Vec::new();
        }
        let scope = kafkalog::fsutil::DeferredSync::begin();
        let mut refused: BTreeMap<TopicPartition, String> = BTreeMap::new();
        for tp in tps {
            if command == Command::Start
                && let Err(why) = self.before_start(tp, manifests.get(tp))
            {
                refused.insert(tp.clone(), why.to_string());
                continue;
            }
            if let Err(e) = self.transition(tp, Event::from(command)) {
                refused.insert(tp.clone(), e.to_string());
            }
        }
        let stopping: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| !refused.contains_key(*tp))
            .filter(|tp| {
                self.slots
                    .get(*tp)
                    .and_then(Slot::mirror)
                    .is_some_and(|s| s.state() == PartitionState::Stopping)
            })
            .cloned()
            .collect();
        let mut barrier = scope.barrier();
        if !stopping.is_empty() && barrier.is_ok() {
            crate::group_commit::failover_many(self, &stopping, &scope);
            barrier = scope.finish();
        } else {
            drop(scope);
        }
        if let Err(e) = &barrier {
            tracing::error!(error = %e, "making the command's changes durable failed");
        }
        tps.iter()
            .map(|tp| {
                let error = refused.get(tp).cloned().or_else(|| {
                    barrier
                        .as_ref()
                        .err()
                        .map(|e| format!("the change may not be durable: {e}"))
                });
                CommandOutcome {
                    partition: tp.to_string(),
                    state: self.state_of(tp).map(|s| s.as_str().to_string()),
                    error,
                }
            })
            .collect()
    }

    /// The source's manifests of the mirror partitions `start` may cut
    /// records of their own from (`manifest::cut::at_stake`), for
    /// [`Applier::before_start`]; one that cannot be read is left out.
    async fn start_manifests(
        &mut self,
        tps: &[TopicPartition],
    ) -> BTreeMap<TopicPartition, PartitionManifest> {
        let at_stake: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| {
                self.slots
                    .get(*tp)
                    .and_then(Slot::mirror)
                    .is_some_and(|s| manifest::cut::at_stake(&s.mirror.record))
            })
            .cloned()
            .collect();
        self.bucket.read_each(&at_stake).await
    }

    /// `start`'s checks and pin changes on a mirror partition
    /// (`command_plan::plan_start`, performed here); the reason when the
    /// start is refused (nothing changed then). `manifest` is the
    /// source's, when it could be read.
    fn before_start(
        &mut self,
        tp: &TopicPartition,
        manifest: Option<&PartitionManifest>,
    ) -> Result<(), crate::driver::StartError> {
        use crate::command_plan::{StartInput, plan_start};
        let source = self.opts.source_cluster_id.clone();
        let feed_topic_id = self.bucket.entry(tp).map(|e| e.topic_id);
        let ctx = self.context(tp);
        let allowed = self.truncate_allowed();
        // Read the manifest again: `start` is how an operator says that
        // what failed (a corrupt manifest, say) was repaired.
        self.bucket.forget(tp);
        let (mut env, slots) = self.env();
        let Some(slot) = slots.get_mut(tp).and_then(Slot::mirror_mut) else {
            return Ok(());
        };
        let plan = {
            let local = slot.mirror.local_view();
            plan_start(&StartInput {
                tp,
                record: &slot.mirror.record,
                source: &source,
                feed_topic_id,
                local: &local,
                manifest,
                ctx: &ctx,
                allowed,
            })?
        };
        slot.perform_start(&plan, &source, feed_topic_id, allowed, &mut env)
    }
}

impl Applier {
    /// Performs every pending command request
    /// (`crate::commands::claim_requests`) and writes its response.
    /// Returns how many were handled.
    pub async fn process_command_requests(&mut self) -> usize {
        let log_dir = self.opts.log_dir.clone();
        let requests = crate::commands::claim_requests(&log_dir);
        let handled = requests.len();
        for request in requests {
            tracing::info!(command = %request.command, topics = %request.topics.join(","), all = request.all, "operator command");
            let outcomes = self
                .command_allowing(
                    request.command,
                    &request.topics,
                    request.all,
                    request.allow_truncate,
                )
                .await;
            crate::commands::respond(&log_dir, &request.id, outcomes);
        }
        handled
    }

    /// The group offsets sync.
    pub fn group_sync(&self) -> &crate::group_sync::GroupOffsetsSync {
        &self.group_sync
    }

    /// One pass of the group offsets sync (`crate::group_sync`), writing
    /// through the log dir's single writer.
    async fn sync_groups(&mut self, report: &CycleReport) {
        let Some(store) = self.bucket.store().cloned() else {
            return;
        };
        let pointer = self.bucket.head().and_then(|h| h.groups);
        let Applier {
            opts,
            logdir,
            slots,
            gateway,
            producer_logs,
            group_sync,
            ..
        } = self;
        let mut write = |tp: &TopicPartition, batch: &mut [u8]| -> Result<(), String> {
            producer_logs
                .append(logdir, tp, batch, true)
                .map_err(|e| e.to_string())?;
            if let Ok(open) = producer_logs.open(logdir, tp, false) {
                open.log.flush().map_err(|e| e.to_string())?;
            }
            if let Some(link) = gateway.as_ref() {
                link.appended(tp);
            }
            Ok(())
        };
        let changed = group_sync
            .pass(crate::group_sync::Pass {
                store: &store,
                pointer,
                source_cluster: &opts.source_cluster_id,
                log_dir: logdir.root(),
                slots,
                gateway_groups: gateway.as_ref().map(|l| std::sync::Arc::clone(&l.groups)),
                moved: report.batches > 0 || report.transitions > 0,
                write: &mut write,
            })
            .await;
        self.live.stale |= changed;
    }

    /// Serves producers' appends from a gateway, and tells it of changes.
    pub fn set_gateway(&mut self, link: crate::serving::GatewayLink) {
        self.gateway = Some(link);
    }

    /// The applier appended to `tp`: wakes the fetches waiting for data.
    pub(crate) fn tell_appended(&self, tp: &TopicPartition) {
        if let Some(link) = &self.gateway {
            link.appended(tp);
        }
    }

    /// The applier cut or rewrote `tp`'s files.
    pub(crate) fn tell_truncated(&mut self, tp: &TopicPartition) {
        if let Some(link) = &mut self.gateway {
            link.truncated(tp);
        }
    }

    /// At a clean shutdown: saves the producers' sequences as Kafka's
    /// producer snapshots and closes the partitions that are not mirrors
    /// (opened for producers or the group offsets sync).
    pub fn close_gateway(&mut self) {
        self.producer_logs.close_all();
        if let Some(mut link) = self.gateway.take() {
            link.save_producers(&mut self.slots);
        }
    }

    /// Performs one producer append and answers it: a mirror partition
    /// through the gateway link (STOPPED only), any other through the
    /// shared writer.
    pub(crate) fn handle_append(&mut self, request: gateway::AppendRequest) {
        use gateway::writer::AppendError;
        let gateway::AppendRequest {
            tp,
            mut batches,
            reply,
            create,
        } = request;
        let root = self.logdir.root().to_path_buf();
        let result = match (self.slots.get_mut(&tp), self.gateway.as_mut()) {
            (Some(Slot::Mirror(slot)), Some(link)) => {
                link.append_to_stopped(&root, slot, &mut batches)
            }
            (Some(Slot::Mirror(_)), None) => Err(AppendError::NoWriter(tp.to_string())),
            (Some(_), _) => Err(AppendError::ReadOnly {
                tp: tp.clone(),
                state: "not yet opened as a mirror".into(),
            }),
            (None, _) => self
                .producer_logs
                .append(&self.logdir, &tp, &mut batches, create),
        };
        if result.is_ok() {
            if self.slots.get(&tp).is_some_and(|s| s.mirror().is_some()) {
                self.changed.insert(tp.clone());
            }
            self.live.stale = true;
            self.tell_appended(&tp);
        }
        let _ = reply.send(result);
    }

    /// Runs until `stop` is set: commands are picked up at least every 100
    /// ms; a cycle runs every `poll_interval`.
    pub async fn run(&mut self, poll_interval: Duration, stop: Arc<std::sync::atomic::AtomicBool>) {
        use std::sync::atomic::Ordering;
        while !stop.load(Ordering::Relaxed) {
            self.process_command_requests().await;
            let report = self.run_once().await;
            if report.batches > 0 {
                tracing::debug!(batches = report.batches, bytes = report.bytes, "applied");
            }
            let until = Instant::now() + poll_interval;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                if self.process_command_requests().await > 0 {
                    continue;
                }
                let tick = Duration::from_millis(100).min(poll_interval);
                tokio::select! {
                    Some(request) = crate::serving::GatewayLink::next(&mut self.gateway) => {
                        self.handle_append(request);
                    }
                    _ = tokio::time::sleep(tick) => {}
                }
            }
        }
    }
}

/// Rounds of scheduling per cycle: a partition's work that changed
/// something is scheduled again, at most this many times.
const MAX_ROUNDS: usize = 8;
/// The group commit's view of the applier: steps route through the driver.
impl crate::group_commit::Partitions for Applier {
    fn slot(&mut self, tp: &TopicPartition) -> Option<&mut MirrorSlot> {
        self.slot_mut(tp)
    }

    fn failed(&mut self, tp: &TopicPartition, e: MirrorError) {
        self.fail(tp, e);
    }

    /// Readers told of a cut, and MIRRORING, whose record write (at the
    /// cycle's group commit) also carries what the preparation cleared in
    /// the record.
    fn prepared(&mut self, tp: &TopicPartition) {
        self.tell_truncated(tp);
        if let Some(slot) = self.slot_mut(tp) {
            slot.persist_at_commit = true;
        }
        let moved = self.transition(tp, Event::Prepared);
        if let Some(slot) = self.slot_mut(tp) {
            slot.persist_at_commit = false;
        }
        if let Err(e) = moved {
            tracing::debug!(partition = %tp, error = %e, "preparation finished in another state");
            if let Some(slot) = self.slot_mut(tp)
                && let Err(e) = slot.mirror.save()
            {
                tracing::warn!(partition = %tp, error = %e, "could not record the preparation");
            }
        }
    }

    fn stopped(&mut self, tp: &TopicPartition) {
        self.tell_appended(tp);
        if let Err(e) = self.transition(tp, Event::Stopped) {
            tracing::debug!(partition = %tp, error = %e, "failover finished in another state");
        }
    }

    fn stop_again(&mut self, tp: TopicPartition) {
        self.changed.insert(tp);
    }
}
