//! The applier: the one file that owns `impl Applier`. It opens the log
//! dir and runs the cycle by handing each executor the parts it works on;
//! no executor sees the applier itself. The parts: the partition table
//! (`crate::table`: slots, wake set, the driver's environment), the bucket
//! reader (`crate::bucket_reader`), the local writer
//! (`crate::serving::LocalWriter`: plain logs and the gateway link), the
//! gaps ledger, the group offsets sync, the scrub and the live output. The
//! executors: `discovery` (the feed and adoption), `work` (the changed
//! partitions viewed, scheduled and their work run; retention), `commands`
//! (operator commands), `reporting` (checkpoints, scrub) and
//! `gateway_link` (producers' appends, the group offsets sync). They
//! depend on the parts and on each other in one direction (`discovery`
//! below `work` and `commands`), never on this file.
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
//! and performed by `commands` (`group_commit::failover_many` for stops).
//!
//! Invariants:
//! - Every state change goes through the driver (`driver`), which performs
//!   the actions `manifest::state::next` returns; the work a partition has
//!   is derived from its state by the schedule, never stored beside it.
//! - An idle cycle does no work per partition: the table's wake set is
//!   empty after a settled cycle, and only a feed change, a command, a
//!   producer's append to a mirror, a transition whose actions wake its
//!   partition, a failure or a partition the last schedule left unsettled
//!   (a retry to wait for, the bucket to wait for) put one back.
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

use std::sync::Arc;
use std::time::{Duration, Instant};

use bucket::store::ManifestStore;
use kafkalog::{LogDir, TopicPartition};
use manifest::clock::{Clock, SystemClock};
use manifest::layout::ClusterLayout;
use manifest::state::{Command, PartitionState};
use manifest::topic_pattern::Selection;
use object_store::ObjectStore;

use crate::bucket_reader::BucketReader;
use crate::error::OpenError;
use crate::mirror::Mirror;
use crate::serving::{GatewayLink, LocalWriter};
use crate::table::MirrorTable;

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
    logdir: LogDir,
    /// The bucket: the feed, the manifests and the ones held.
    bucket: BucketReader,
    /// Every partition known, and what their changes wake.
    table: MirrorTable,
    clock: Arc<dyn Clock>,
    counters: crate::metrics::Counters,
    /// The live status and the metrics as last written.
    live: crate::live::LiveOutput,
    /// The feed head `discover` last went through with no partition left
    /// to retry.
    discovered: Option<u64>,
    /// Mirror partitions that could not be opened, seen by the last
    /// `reopen_unopened`.
    unopened_left: usize,
    /// Producers' appends and the group offsets sync (partitions that are
    /// not mirrors), and the gateway served from this process, if any.
    writer: LocalWriter,
    /// The source's consumer-group offsets and what was synced of them.
    group_sync: crate::group_sync::GroupOffsetsSync,
    /// Gaps known (offsets never received), written when one is new.
    gaps: crate::gaps::Ledger,
    /// The background verification of `applier run` (`crate::scrub`).
    scrub: Option<crate::scrub::Scrub>,
    /// When the next retention pass over the STOPPED partitions is due
    /// (`crate::topic_configs::retention_pass`); `None`: at the next cycle.
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
            table: MirrorTable::new(opts.backoff(), reserve),
            opts,
            logdir,
            bucket: BucketReader::new(store),
            clock,
            counters: crate::metrics::Counters::default(),
            live: crate::live::LiveOutput::default(),
            discovered: None,
            unopened_left: 0,
            writer: LocalWriter::default(),
            group_sync: crate::group_sync::GroupOffsetsSync::default(),
            gaps,
            scrub: None,
            retention_at: None,
        };
        // Every log opened first, from several threads (recovery and
        // unfinished ranges cut, each durable on its own), then every
        // state's actions redone (the write guards set or cleared from the
        // records) at one barrier.
        let opened = crate::opening::open_existing_all(
            &applier.logdir,
            applier.logdir.partitions()?,
            &applier.clock,
        );
        let scope = kafkalog::fsutil::DeferredSync::begin();
        for (tp, mirror) in opened {
            applier.table.restart(&tp, mirror);
        }
        scope.finish().map_err(OpenError::Guards)?;
        let table = &mut applier.table;
        // An interrupted failover completes now, bucket or not.
        let stopping: Vec<_> = table
            .mirror_slots()
            .filter(|m| m.state() == PartitionState::Stopping)
            .map(|m| m.tp().clone())
            .collect();
        // Damage recorded by `applier verify` (or a scrub before a restart)
        // fails its mirror partitions (`crate::scrub::recorded_failures`).
        for (tp, e) in crate::scrub::recorded_failures(&applier.opts.log_dir, &table.states()) {
            table.fail(&tp, e);
        }
        for tp in stopping {
            work::run_failover(table, &tp);
        }
        reporting::write_checkpoints(&applier.logdir, &mut table.reserve);
        Ok(applier)
    }

    /// Opens again the partitions that could not be opened before.
    fn reopen_unopened(&mut self) {
        let tps: Vec<TopicPartition> = self
            .table
            .unopened()
            .into_iter()
            .map(|(tp, _)| tp)
            .collect();
        self.unopened_left = 0;
        if tps.is_empty() {
            return;
        }
        self.table.stale = true;
        // A partition opened now may turn out not to be a mirror: a
        // candidate for `discover` again.
        self.discovered = None;
        for (tp, opened) in crate::opening::open_existing_all(&self.logdir, tps, &self.clock) {
            if !self.table.restart(&tp, opened) {
                self.unopened_left += 1;
            } else if self.table.mirror(&tp).is_some() {
                tracing::info!(partition = %tp, "opened the mirror partition");
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
        let poll = discovery::poll_feed(&mut self.bucket, &mut self.table);
        match tokio::time::timeout(timeout, poll).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(FirstRequestFailure::Failed(one_line(&e))),
            Err(_) => Err(FirstRequestFailure::NoAnswer(timeout)),
        }
    }

    /// The topic selection (`topics`, `exclude`).
    pub fn selection(&self) -> Selection<'_> {
        self.opts.selection()
    }

    /// The options.
    pub fn options(&self) -> &ApplierOptions {
        &self.opts
    }

    /// The mirror partitions.
    pub fn mirrors(&self) -> impl Iterator<Item = &Mirror> {
        self.table.mirror_slots().map(|m| &m.mirror)
    }

    /// The state of one partition, if it is a mirror.
    pub fn state_of(&self, tp: &TopicPartition) -> Option<PartitionState> {
        self.table.state_of(tp)
    }

    /// One cycle: read the feed, start new partitions, then schedule and
    /// run the work of every partition that changed until nothing more can
    /// be done now.
    pub async fn run_once(&mut self) -> CycleReport {
        let mut report = CycleReport::default();
        if let Err(e) = discovery::poll_feed(&mut self.bucket, &mut self.table).await {
            report.feed_error = Some(e.to_string());
            tracing::warn!(error = %e, "could not read the change feed; retrying next cycle");
        }
        self.reopen_unopened();
        let adopter = discovery::Adopter {
            opts: &self.opts,
            logdir: &self.logdir,
            clock: &self.clock,
            allowed: self.opts.allow_truncate,
        };
        self.discovered = adopter
            .discover(&mut self.table, &mut self.bucket, self.discovered)
            .await;
        let unresolved = self.unopened_left
            + usize::from(
                self.bucket
                    .head()
                    .is_some_and(|h| self.discovered != Some(h.seq)),
            );
        work::CycleWork {
            opts: &self.opts,
            clock: &self.clock,
            table: &mut self.table,
            bucket: &mut self.bucket,
            gaps: &mut self.gaps,
            readers: &mut self.writer.link,
            unresolved,
        }
        .run(&mut report)
        .await;
        // Retention of the STOPPED partitions, before the root checkpoints
        // record their new log starts.
        let now = self.clock.now_ms();
        work::enforce_retention(&mut self.table, &mut self.retention_at, now);
        GatewayLink::tell(&mut self.writer.link, &mut self.table.notices);
        // The source's consumer-group offsets, onto what was just applied.
        self.table.stale |= gateway_link::sync_groups(
            &mut self.group_sync,
            &self.bucket,
            &self.logdir,
            &self.table,
            &mut self.writer,
            &self.opts.source_cluster_id,
            report.batches > 0 || report.transitions > 0,
        )
        .await;
        // Once per cycle for every partition flushed in it.
        reporting::write_checkpoints(&self.logdir, &mut self.table.reserve);
        if let Some(scrub) = self.scrub.as_mut() {
            reporting::scrub_step(scrub, &self.opts.log_dir, &mut self.table, &self.bucket).await;
        }
        let changed = self.live.stale || self.table.stale;
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
            let started = Instant::now();
            let report = self.run_once().await;
            if report.batches > 0 {
                tracing::debug!(
                    batches = report.batches,
                    bytes = report.bytes,
                    took_ms = started.elapsed().as_millis() as u64,
                    "applied"
                );
            }
            let until = started + poll_interval;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                if self.process_command_requests().await > 0 {
                    continue;
                }
                let tick = Duration::from_millis(100).min(poll_interval);
                tokio::select! {
                    Some(request) = GatewayLink::next(&mut self.writer.link) => {
                        gateway_link::handle_append(
                            request,
                            &self.logdir,
                            &mut self.table,
                            &mut self.writer,
                        );
                    }
                    _ = tokio::time::sleep(tick) => {}
                }
            }
        }
    }

    // Operator commands.

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
        let adopter = discovery::Adopter {
            opts: &self.opts,
            logdir: &self.logdir,
            clock: &self.clock,
            allowed: allow_truncate || self.opts.allow_truncate,
        };
        let out = commands::CommandRun {
            table: &mut self.table,
            bucket: &mut self.bucket,
            adopter,
        }
        .perform(command, targets, all)
        .await;
        GatewayLink::tell(&mut self.writer.link, &mut self.table.notices);
        self.discovered = None;
        reporting::write_checkpoints(&self.logdir, &mut self.table.reserve);
        self.write_live_status();
        out
    }

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

    /// Makes every retryable failure due now (for `applier once`, whose
    /// schedule is its backoff).
    pub fn retry_failures_now(&mut self) {
        let now = self.clock.now_ms();
        self.table.retry_all_at(now);
    }

    // What the applier tells.

    /// Every mirror partition's status, from memory (no file is read).
    /// Partitions that could not be opened are FAILED here.
    pub fn status_rows(&self) -> Vec<crate::status::PartitionStatus> {
        let slots = &self.table.slots;
        let live = crate::live::live_status(slots, self.bucket.head(), self.bucket.all_cached());
        crate::live::status_rows(slots, &live, &self.opts.log_dir)
    }

    /// Rewrites the live status when something it shows changed or its
    /// refresh is due (`crate::live::LiveOutput::write_status`).
    fn write_live_status(&mut self) {
        self.live.stale |= std::mem::take(&mut self.table.stale);
        let (slots, head, held) = (
            &self.table.slots,
            self.bucket.head(),
            self.bucket.all_cached(),
        );
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
            &mut self.table.reserve,
        );
    }

    /// Re-renders the metrics when due (`crate::live::LiveOutput::render_metrics`).
    fn render_metrics(&mut self, changed: bool) {
        let (slots, head, log_dir) = (&self.table.slots, self.bucket.head(), &self.opts.log_dir);
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

    /// Publishes metrics to `exposition` after every cycle.
    pub fn set_metrics(&mut self, exposition: crate::metrics::Exposition) {
        self.live.metrics = Some(exposition);
    }

    /// How many mirror partitions could not be opened.
    pub fn unopened_count(&self) -> usize {
        self.table.unopened().len()
    }

    /// Partitions that are FAILED now (in memory, whether recorded or not),
    /// including those that could not be opened.
    pub fn failed(&self) -> Vec<TopicPartition> {
        self.table.failed()
    }

    /// Partitions selected (by `--topics` or `start`) but refused before
    /// they became mirrors, each with the reason (nothing was changed in
    /// them): `once` exits 1 naming them.
    pub fn refused(&self) -> Vec<(TopicPartition, String)> {
        self.table.refused()
    }

    // The gateway and the group offsets sync.

    /// The group offsets sync.
    pub fn group_sync(&self) -> &crate::group_sync::GroupOffsetsSync {
        &self.group_sync
    }

    /// Serves producers' appends from a gateway, and tells it of changes.
    pub fn set_gateway(&mut self, link: GatewayLink) {
        self.writer.link = Some(link);
    }

    /// At a clean shutdown: saves the producers' sequences as Kafka's
    /// producer snapshots and closes the partitions that are not mirrors
    /// (opened for producers or the group offsets sync).
    pub fn close_gateway(&mut self) {
        self.writer.plain.close_all();
        if let Some(mut link) = self.writer.link.take() {
            link.save_producers(&mut self.table.slots);
        }
    }
}
