//! The applier: the one module that owns `impl Applier` and wires the
//! executors together. This file opens the log dir and runs the cycle;
//! each child module holds one job's methods: `discovery` (the feed and
//! adoption), `work` (the changed partitions viewed, scheduled and their
//! work run; retention), `commands` (operator commands), `reporting`
//! (checkpoints, status, metrics, scrub) and `gateway_link` (the gateway's
//! appends and readers, the group offsets sync). The children depend on
//! this file, never on each other's internals.
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

use bucket::store::ManifestStore;
use kafkalog::{LogDir, TopicPartition};
use manifest::clock::{Clock, SystemClock};
use manifest::layout::ClusterLayout;
use manifest::state::{self, Event, PartitionState};
use manifest::topic_pattern::Selection;
use object_store::ObjectStore;

use crate::bucket_reader::BucketReader;
use crate::driver::{Backoff, Env};
use crate::error::{MirrorError, OpenError};
use crate::mirror::{Mirror, MirrorContext};
use crate::slot::{MirrorSlot, Slot};

mod commands;
mod discovery;
mod gateway_link;
mod reporting;
mod work;

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
