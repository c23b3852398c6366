//! The applier's loop over all mirror partitions.
//!
//! One cycle: read the change feed (one GET when nothing changed), start
//! mirroring partitions that match the include pattern and have no mirror
//! state yet, then step every partition according to its state until
//! nothing more can be done now: PREPARING runs preparation, MIRRORING
//! applies the latest manifest, STOPPING completes failover, a retryable
//! FAILED retries when its backoff is due. STOPPED and FAILED partitions
//! are never restarted without an operator's `start`.
//!
//! Every transition goes through `manifest::state::next`; this module only
//! performs the actions it returns, in order. A failure is isolated to its
//! partition.
//!
//! What an idle cycle costs: one GET (the next feed head), no partition
//! walk when the head did not change (`discover` runs on a new head, or
//! while a partition it found is waiting for its manifest), the live status
//! and the metrics rebuilt only when something they show changed (a new
//! head, an append, a transition, a failure, a command) or their refresh is
//! due (live status: every 30 s; metrics: every cycle while a partition
//! lags, since its lag in seconds grows, else every 10 s), and the log
//! dir's root checkpoints written once per cycle, only when a flush changed
//! them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use manifest::feed::{Head, MAX_PROBE, RESYNC_INTERVAL};
use manifest::layout::{ClusterLayout, PartitionKey};
use manifest::mirror_state::MirrorRecord;
use manifest::partition::PartitionManifest;
use manifest::state::{self, Action, Command, Event, PartitionState};
use manifest::store::{ManifestStore, StoreError};
use object_store::ObjectStore;
use regex::Regex;

use crate::error::MirrorError;
use crate::mirror::{Mirror, MirrorContext, guard_reason, new_record, refuse_topic};
use crate::status::{LivePartition, LiveStatus};

/// Default of [`ApplierOptions::download_memory`]: 32 MiB.
pub const DEFAULT_DOWNLOAD_MEMORY: u64 = 32 << 20;

/// Settings of an applier.
#[derive(Debug, Clone)]
pub struct ApplierOptions {
    /// The destination log dir.
    pub log_dir: PathBuf,
    /// The source cluster to mirror.
    pub source_cluster_id: String,
    /// This cluster's own id (for the loop check and failback's LME lookup).
    pub local_cluster_id: Option<String>,
    /// Key prefix in the bucket.
    pub bucket_prefix: String,
    /// The bucket and credential source, for error messages.
    pub bucket_location: String,
    /// Topics to start automatically (None: none).
    pub topics: Option<Regex>,
    /// Topics never started automatically.
    pub exclude: Option<Regex>,
    /// Objects downloaded ahead of the one being appended.
    pub prefetch: usize,
    /// Bytes of objects held in memory at once, downloaded or being
    /// appended (at least one object, whatever its size).
    pub download_memory: u64,
    /// Destination topics with `remote.storage.enable=true`.
    pub tiered_topics: Vec<String>,
    /// First retry delay; doubles per retry up to [`ApplierOptions::max_backoff`].
    pub base_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// Size of the disk reserve (see [`crate::reserve`]); 0 disables it.
    pub disk_reserve_bytes: u64,
}

impl ApplierOptions {
    /// Options with defaults for everything but the required settings.
    pub fn new(log_dir: impl Into<PathBuf>, source_cluster_id: &str) -> ApplierOptions {
        ApplierOptions {
            log_dir: log_dir.into(),
            source_cluster_id: source_cluster_id.to_string(),
            local_cluster_id: None,
            bucket_prefix: String::new(),
            bucket_location: String::new(),
            topics: None,
            exclude: None,
            prefetch: 4,
            download_memory: DEFAULT_DOWNLOAD_MEMORY,
            tiered_topics: Vec::new(),
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            disk_reserve_bytes: crate::reserve::DEFAULT_RESERVE_BYTES,
        }
    }
}

/// The outcome of one command on one partition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommandOutcome {
    /// The partition.
    pub partition: String,
    /// Its state afterwards, when the command was accepted.
    pub state: Option<String>,
    /// Why it was refused.
    pub error: Option<String>,
}

/// What one cycle did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Batches appended.
    pub batches: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// Partitions that changed state.
    pub transitions: u64,
}

/// How often the live status is rewritten when nothing changed.
const LIVE_REFRESH: Duration = Duration::from_secs(30);

/// How often the metrics are re-rendered when nothing changed and no
/// partition lags (for `segmirror_applier_cycles_total`).
const METRICS_REFRESH: Duration = Duration::from_secs(10);

/// Mirror partitions that must stay on their source's segment boundaries:
/// the destination never rolls by size or time on its own.
pub fn mirror_log_config() -> LogConfig {
    LogConfig {
        segment_bytes: u64::MAX,
        segment_ms: None,
        ..LogConfig::default()
    }
}

/// The applier over one log dir.
#[derive(Debug)]
pub struct Applier {
    opts: ApplierOptions,
    logdir: LogDir,
    store: Option<ManifestStore>,
    head: Option<Head>,
    last_list: Option<Instant>,
    mirrors: BTreeMap<TopicPartition, Mirror>,
    retry_at: BTreeMap<TopicPartition, Instant>,
    refused: BTreeMap<TopicPartition, String>,
    manifests: BTreeMap<TopicPartition, PartitionManifest>,
    counters: crate::metrics::Counters,
    metrics: Option<crate::metrics::Exposition>,
    waiting: BTreeMap<TopicPartition, String>,
    last_live: Option<(LiveStatus, Instant)>,
    /// Something the live status or the metrics show may have changed since
    /// they were last built.
    live_dirty: bool,
    /// When the metrics were last rendered, and whether a partition lagged.
    last_metrics: Option<(Instant, bool)>,
    /// The feed head `discover` last went through with no partition left
    /// to retry.
    discovered: Option<u64>,
    /// Mirror partitions whose files could not be opened (permission
    /// denied, say), with the error; opened again every cycle.
    unopened: BTreeMap<TopicPartition, String>,
    reserve: crate::reserve::DiskReserve,
}

impl Applier {
    /// Opens the log dir (taking its lock), loads every mirror partition's
    /// record and restores what a crash may have interrupted: the write
    /// guard matches each state again, and an interrupted STOPPING completes.
    /// `store` is the bucket (None for commands that need none).
    pub fn open(
        opts: ApplierOptions,
        store: Option<Arc<dyn ObjectStore>>,
    ) -> anyhow::Result<Applier> {
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
        let mut applier = Applier {
            opts,
            logdir,
            store,
            head: None,
            last_list: None,
            mirrors: BTreeMap::new(),
            retry_at: BTreeMap::new(),
            refused: BTreeMap::new(),
            manifests: BTreeMap::new(),
            counters: crate::metrics::Counters::default(),
            metrics: None,
            waiting: BTreeMap::new(),
            last_live: None,
            live_dirty: true,
            last_metrics: None,
            discovered: None,
            unopened: BTreeMap::new(),
            reserve,
        };
        for tp in applier.logdir.partitions()? {
            // A partition that cannot be opened fails alone: the others
            // mirror on, and it is opened again every cycle.
            if let Err(e) = applier.open_mirror(&tp) {
                tracing::error!(partition = %tp, error = %e, "cannot open the mirror partition; retrying every cycle");
                applier.unopened.insert(tp, e.to_string());
            }
        }
        // An interrupted failover completes now, bucket or not.
        let stopping: Vec<_> = applier
            .mirrors
            .iter()
            .filter(|(_, m)| m.record.state.state() == PartitionState::Stopping)
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in stopping {
            applier.complete_failover(&tp);
        }
        applier.write_checkpoints();
        Ok(applier)
    }

    /// Opens one partition of the log dir if it is a mirror, restoring its
    /// write guard and completing what a crash interrupted (its STOPPED
    /// epoch bump). A non-mirror partition is left alone.
    fn open_mirror(&mut self, tp: &TopicPartition) -> anyhow::Result<()> {
        let dir = self.logdir.root().join(tp.dir_name());
        let Some(record) = MirrorRecord::read(&dir)? else {
            return Ok(());
        };
        let log = self.logdir.open_partition(tp, mirror_log_config())?;
        let report = log.recovery_report();
        if !report.is_clean() {
            tracing::warn!(partition = %tp, ?report, "recovered the local log");
        }
        let restart = state::on_restart(&record.state);
        let mut mirror = Mirror {
            tp: tp.clone(),
            log,
            record,
            unsaved: None,
            appended: (0, 0),
        };
        for action in restart {
            match action {
                Action::SetWriteGuard => mirror
                    .log
                    .set_read_only(&guard_reason(&mirror.record.source_cluster_id))?,
                Action::ClearWriteGuard => mirror.log.clear_read_only()?,
                _ => {}
            }
        }
        if mirror.record.state.state() == PartitionState::Stopped
            && let Some(e) = mirror.record.stop_epoch
        {
            mirror.log.bump_epoch(e)?;
        }
        self.mirrors.insert(tp.clone(), mirror);
        Ok(())
    }

    /// Opens again the partitions that could not be opened before.
    fn reopen_unopened(&mut self) {
        if self.unopened.is_empty() {
            return;
        }
        self.live_dirty = true;
        // A partition opened now may turn out not to be a mirror: a
        // candidate for `discover` again.
        self.discovered = None;
        let tps: Vec<TopicPartition> = self.unopened.keys().cloned().collect();
        for tp in tps {
            match self.open_mirror(&tp) {
                Ok(()) => {
                    tracing::info!(partition = %tp, "opened the mirror partition");
                    self.unopened.remove(&tp);
                    if self.state_of(&tp) == Some(PartitionState::Stopping) {
                        self.complete_failover(&tp);
                    }
                }
                Err(e) => {
                    self.unopened.insert(tp, e.to_string());
                }
            }
        }
    }

    /// The options.
    pub fn options(&self) -> &ApplierOptions {
        &self.opts
    }

    /// The mirror partitions.
    pub fn mirrors(&self) -> impl Iterator<Item = &Mirror> {
        self.mirrors.values()
    }

    /// The state of one partition, if it is a mirror.
    pub fn state_of(&self, tp: &TopicPartition) -> Option<PartitionState> {
        self.mirrors.get(tp).map(|m| m.record.state.state())
    }

    fn context(&self, tp: &TopicPartition) -> MirrorContext {
        MirrorContext {
            local_cluster_id: self.opts.local_cluster_id.clone(),
            tiered_storage: self.opts.tiered_topics.iter().any(|t| t == &tp.topic),
            prefetch: self.opts.prefetch,
            download_memory: self.opts.download_memory,
        }
    }

    /// Applies `event` to a partition's state machine and performs the
    /// actions. Returns the new state.
    fn transition(
        &mut self,
        tp: &TopicPartition,
        event: Event,
    ) -> Result<PartitionState, state::TransitionError> {
        let Some(m) = self.mirrors.get_mut(tp) else {
            return Ok(PartitionState::Failed);
        };
        self.live_dirty = true;
        let (next, actions) = state::next(&m.record.state, event)?;
        for action in actions {
            let result = match action {
                Action::SetWriteGuard => m
                    .log
                    .set_read_only(&guard_reason(&m.record.source_cluster_id))
                    .map_err(|e| e.to_string()),
                Action::ClearWriteGuard => m.log.clear_read_only().map_err(|e| e.to_string()),
                Action::PersistState => {
                    m.record.state = next.clone();
                    match m.save() {
                        Err(e) if crate::reserve::is_disk_full(&e) && self.reserve.release() => {
                            m.save().map_err(|e| e.to_string())
                        }
                        other => other.map_err(|e| e.to_string()),
                    }
                }
                Action::ScheduleRetry { retry_count } => {
                    let delay = backoff(self.opts.base_backoff, self.opts.max_backoff, retry_count);
                    self.retry_at.insert(tp.clone(), Instant::now() + delay);
                    Ok(())
                }
                Action::CancelRetry => {
                    self.retry_at.remove(tp);
                    Ok(())
                }
                // The work of each state runs in `step`, driven by the state.
                Action::RunPreparation
                | Action::CancelPreparation
                | Action::StartFetching
                | Action::StopFetching
                | Action::RunFailover => Ok(()),
            };
            if let Err(e) = result {
                tracing::error!(partition = %tp, error = %e, ?action, "could not perform a state action");
            }
        }
        Ok(next.state())
    }

    fn fail(&mut self, tp: &TopicPartition, e: MirrorError) -> bool {
        self.live_dirty = true;
        if e.is_waiting() {
            // Replication has not delivered it yet: wait, keep the state.
            tracing::info!(partition = %tp, reason = %e, "waiting for the bucket");
            self.waiting.insert(tp.clone(), e.to_string());
            return false;
        }
        self.waiting.remove(tp);
        let retryable = e.is_retryable();
        if retryable {
            tracing::warn!(partition = %tp, error = %e, "retryable failure");
        } else {
            tracing::error!(partition = %tp, error = %e, "partition FAILED; waiting for an operator's stop or start");
        }
        let _ = self.transition(
            tp,
            Event::Error {
                message: e.to_string(),
                retryable,
            },
        );
        true
    }

    /// Reads the change feed: one GET when nothing changed, a LIST at start
    /// and every [`RESYNC_INTERVAL`].
    async fn poll_feed(&mut self) -> Result<bool, StoreError> {
        let Some(store) = &self.store else {
            return Ok(false);
        };
        let resync = self
            .last_list
            .is_none_or(|t| t.elapsed() >= RESYNC_INTERVAL);
        let mut newest: Option<Head> = None;
        if resync || self.head.is_none() {
            self.last_list = Some(Instant::now());
            if let Some(seq) = store.latest_head_seq().await?
                && self.head.as_ref().is_none_or(|h| h.seq != seq)
            {
                newest = Some(store.get_head(seq).await?);
            }
        } else if let Some(cur) = &self.head {
            let mut seq = cur.seq;
            for _ in 0..MAX_PROBE {
                match store.get_head(seq + 1).await {
                    Ok(h) => {
                        seq = h.seq;
                        newest = Some(h);
                    }
                    Err(StoreError::NotFound { .. }) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        match newest {
            Some(h) => {
                self.head = Some(h);
                self.live_dirty = true;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Starts mirroring partitions of the feed that match the include
    /// pattern and have no mirror state yet.
    async fn discover(&mut self) {
        let Some(head) = &self.head else { return };
        let Some(include) = &self.opts.topics else {
            return;
        };
        let seq = head.seq;
        if self.discovered == Some(seq) {
            // The same head as last time, with nothing left to retry.
            return;
        }
        let candidates: Vec<(TopicPartition, TopicId, u64)> = head
            .partitions
            .values()
            .filter(|e| {
                !e.deleted
                    && include.is_match(&e.topic)
                    && !self
                        .opts
                        .exclude
                        .as_ref()
                        .is_some_and(|x| x.is_match(&e.topic))
            })
            .filter_map(|e| {
                TopicPartition::new(&e.topic, e.partition)
                    .ok()
                    .map(|tp| (tp, e.topic_id, e.manifest_version))
            })
            .filter(|(tp, _, _)| {
                !self.mirrors.contains_key(tp)
                    && !self.refused.contains_key(tp)
                    && !self.unopened.contains_key(tp)
            })
            .collect();
        let mut complete = true;
        for (tp, topic_id, version) in candidates {
            if !self.confirm_identity(&tp, topic_id, version).await {
                // Its manifest is not readable yet: look again next cycle.
                complete = false;
                continue;
            }
            if let Err(reason) = self.adopt(&tp, topic_id) {
                tracing::error!(partition = %tp, %reason, "not mirrored");
                self.refused.insert(tp, reason);
                self.live_dirty = true;
            }
        }
        self.discovered = complete.then_some(seq);
    }

    /// Before a partition is created from a feed entry: reads the manifest
    /// the entry names, which must describe that partition with that topic
    /// id (the manifest's key and its content both carry it), so that a
    /// feed entry alone never pins a destination partition's topic id. The
    /// manifest is kept for the partition's preparation (no extra request).
    /// False (and the partition is left for a later cycle) when it cannot
    /// be read.
    async fn confirm_identity(
        &mut self,
        tp: &TopicPartition,
        topic_id: TopicId,
        version: u64,
    ) -> bool {
        let Some(store) = &self.store else {
            return true;
        };
        let key = PartitionKey {
            tp: tp.clone(),
            topic_id,
        };
        self.live_dirty = true;
        match store.get_manifest(&key, version).await {
            Ok(m) => {
                self.waiting.remove(tp);
                self.manifests.insert(tp.clone(), m);
                true
            }
            Err(e) => {
                tracing::warn!(partition = %tp, %topic_id, version, error = %e, "the change feed names a manifest that cannot be read; not starting the partition yet");
                self.waiting.insert(tp.clone(), e.to_string());
                false
            }
        }
    }

    /// Creates the mirror partition (state PREPARING).
    fn adopt(&mut self, tp: &TopicPartition, topic_id: TopicId) -> Result<(), String> {
        refuse_topic(tp).map_err(|e| e.to_string())?;
        let log =
            match self
                .logdir
                .open_or_create_partition(tp, Some(topic_id), mirror_log_config())
            {
                Ok(log) => log,
                Err(kafkalog::Error::TopicIdMismatch {
                    found, expected, ..
                }) => {
                    return Err(MirrorError::Refused {
                        tp: tp.clone(),
                        refusal: manifest::reconcile::Refusal::InconsistentTopicId {
                            local: found,
                            source_id: expected,
                        },
                    }
                    .to_string());
                }
                Err(e) => return Err(e.to_string()),
            };
        let (initial, actions) = state::initial();
        let mut record = new_record(&self.opts.source_cluster_id, topic_id, initial);
        // A partition that already holds records (the old primary coming
        // back) is reconciled as a failback at its first preparation.
        record.failback_pending = log.log_end_offset() > log.log_start_offset();
        let mut mirror = Mirror {
            tp: tp.clone(),
            log,
            record,
            unsaved: None,
            appended: (0, 0),
        };
        for action in actions {
            match action {
                Action::SetWriteGuard => mirror
                    .log
                    .set_read_only(&guard_reason(&self.opts.source_cluster_id))
                    .map_err(|e| e.to_string())?,
                Action::PersistState => mirror.save().map_err(|e| e.to_string())?,
                _ => {}
            }
        }
        tracing::info!(partition = %tp, source = %self.opts.source_cluster_id, "started mirroring");
        self.mirrors.insert(tp.clone(), mirror);
        self.live_dirty = true;
        Ok(())
    }

    /// The latest manifest of a partition, from the feed's version.
    async fn manifest_for(
        &mut self,
        tp: &TopicPartition,
    ) -> Result<Option<PartitionManifest>, MirrorError> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let Some(m) = self.mirrors.get(tp) else {
            return Ok(None);
        };
        let entry = self
            .head
            .as_ref()
            .and_then(|h| h.partitions.get(&tp.to_string()))
            .filter(|e| e.topic_id == m.record.topic_id);
        let Some(entry) = entry else {
            return Err(MirrorError::NoManifest { tp: tp.clone() });
        };
        if let Some(cached) = self.manifests.get(tp)
            && cached.version == entry.manifest_version
            && cached.topic_id == entry.topic_id
        {
            return Ok(Some(cached.clone()));
        }
        let key = PartitionKey {
            tp: tp.clone(),
            topic_id: m.record.topic_id,
        };
        let manifest = store
            .get_manifest(&key, entry.manifest_version)
            .await
            .map_err(|source| MirrorError::Store {
                tp: tp.clone(),
                source,
            })?;
        self.manifests.insert(tp.clone(), manifest.clone());
        self.live_dirty = true;
        Ok(Some(manifest))
    }

    /// One step of one partition, by its state. Returns true when something
    /// changed (so another step may do more).
    async fn step_async(&mut self, tp: &TopicPartition, report: &mut CycleReport) -> bool {
        let Some(m) = self.mirrors.get(tp) else {
            return false;
        };
        let st = m.record.state.state();
        match st {
            PartitionState::Preparing => {
                let manifest = match self.manifest_for(tp).await {
                    Ok(Some(x)) => x,
                    Ok(None) => return false,
                    Err(e) => return self.fail(tp, e),
                };
                let ctx = self.context(tp);
                let Some(m) = self.mirrors.get_mut(tp) else {
                    return false;
                };
                match m.prepare(&manifest, &ctx) {
                    Ok(_) => {
                        let _ = self.transition(tp, Event::Prepared);
                    }
                    Err(e) => return self.fail(tp, e),
                }
                true
            }
            PartitionState::Mirroring => {
                let manifest = match self.manifest_for(tp).await {
                    Ok(Some(x)) => x,
                    Ok(None) => return false,
                    Err(e) => return self.fail(tp, e),
                };
                let ctx = self.context(tp);
                let Some(store) = self.store.clone() else {
                    return false;
                };
                let Some(m) = self.mirrors.get_mut(tp) else {
                    return false;
                };
                let before = m.log.log_end_offset();
                let caught_up = before >= manifest.shipped_end_offset
                    && m.record.applied_manifest_version == manifest.version;
                if caught_up {
                    return false;
                }
                if !self.reserve.restore() && !self.reserve.allows_appends() {
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
                let Some(m) = self.mirrors.get_mut(tp) else {
                    return false;
                };
                let before = m.appended;
                let applied = m.apply(&store, &manifest, &ctx).await;
                // What was appended, also when the pass failed part-way.
                report.batches += m.appended.0 - before.0;
                report.bytes += m.appended.1 - before.1;
                self.live_dirty = true;
                match applied {
                    Ok(r) => {
                        self.waiting.remove(tp);
                        if m.record.state.retries() > 0 {
                            let _ = self.transition(tp, Event::Progressed);
                        }
                        r.batches > 0 || r.truncated != 0
                    }
                    Err(e) => self.fail(tp, e),
                }
            }
            PartitionState::Stopping => self.complete_failover(tp),
            PartitionState::Failed => {
                let due = self.retry_at.get(tp).is_some_and(|t| Instant::now() >= *t);
                let retryable = m.record.state.failure().is_some_and(|f| f.retryable);
                if !retryable {
                    return false;
                }
                if !self.retry_at.contains_key(tp) {
                    // After a restart the backoff is not in memory: it runs
                    // from when the failure was recorded, so that a process
                    // that restarts (`applier once` from cron) retries once
                    // it is due instead of rescheduling it for ever.
                    let delay = backoff(
                        self.opts.base_backoff,
                        self.opts.max_backoff,
                        m.record.state.retries(),
                    );
                    let elapsed_ms = (crate::mirror::now_ms() - m.record.updated_at_ms).max(0);
                    let remaining =
                        delay.saturating_sub(Duration::from_millis(elapsed_ms.unsigned_abs()));
                    if !remaining.is_zero() {
                        self.retry_at.insert(tp.clone(), Instant::now() + remaining);
                        return false;
                    }
                } else if !due {
                    return false;
                }
                self.retry_at.remove(tp);
                // What failed may have been a manifest since repaired.
                self.manifests.remove(tp);
                self.live_dirty = true;
                self.transition(tp, Event::RetryDue).is_ok()
            }
            PartitionState::Paused | PartitionState::Stopped => false,
        }
    }

    /// STOPPING's work: the failover, which needs no bucket. Returns true
    /// when the partition was STOPPING.
    fn complete_failover(&mut self, tp: &TopicPartition) -> bool {
        let Some(m) = self.mirrors.get_mut(tp) else {
            return false;
        };
        if m.record.state.state() != PartitionState::Stopping {
            return false;
        }
        match m.failover() {
            Ok(()) => {
                let _ = self.transition(tp, Event::Stopped);
            }
            Err(e) => {
                self.fail(tp, e);
            }
        }
        true
    }

    /// One cycle: read the feed, start new partitions, then step every
    /// partition until nothing more can be done now.
    pub async fn run_once(&mut self) -> CycleReport {
        let mut report = CycleReport::default();
        match self.poll_feed().await {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not read the change feed; retrying next cycle")
            }
        }
        self.reopen_unopened();
        self.discover().await;
        let tps: Vec<TopicPartition> = self.mirrors.keys().cloned().collect();
        for tp in tps {
            for _ in 0..8 {
                let before = self.state_of(&tp);
                let changed = self.step_async(&tp, &mut report).await;
                if self.state_of(&tp) != before {
                    report.transitions += 1;
                }
                if !changed {
                    break;
                }
            }
        }
        // Once per cycle for every partition flushed in it.
        self.write_checkpoints();
        let changed = self.live_dirty;
        self.write_live_status();
        self.counters.batches += report.batches;
        self.counters.bytes += report.bytes;
        self.counters.cycles += 1;
        self.render_metrics(changed);
        report
    }

    /// Re-renders the metrics when something they show changed, every cycle
    /// while a partition lags (its lag in seconds grows with the clock),
    /// and every [`METRICS_REFRESH`] otherwise (the cycle counter).
    fn render_metrics(&mut self, changed: bool) {
        let Some(exposition) = &self.metrics else {
            return;
        };
        let due = changed
            || self
                .last_metrics
                .is_none_or(|(at, lagging)| lagging || at.elapsed() >= METRICS_REFRESH);
        if !due {
            return;
        }
        let rows = self.status_rows();
        let lagging = rows.iter().any(|r| r.lag_offsets.is_some_and(|l| l > 0));
        if let Ok(mut text) = exposition.lock() {
            *text = crate::metrics::render(&rows, &self.counters);
        }
        self.last_metrics = Some((Instant::now(), lagging));
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
        let live = self.live_status();
        let now = crate::mirror::now_ms();
        let mut rows: Vec<crate::status::PartitionStatus> = self
            .mirrors
            .values()
            .map(|m| {
                let l = live.partitions.get(&m.tp.to_string());
                crate::status::row(
                    &m.tp,
                    &m.record,
                    l,
                    m.log.log_start_offset(),
                    m.log.log_end_offset(),
                    now,
                )
            })
            .collect();
        for (tp, error) in &self.unopened {
            rows.push(crate::status::unopened_row(
                tp,
                &format!("cannot open the partition: {error}"),
            ));
        }
        rows.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        rows
    }

    /// Makes every retryable failure due now (for `applier once`, whose
    /// schedule is its backoff).
    pub fn retry_failures_now(&mut self) {
        let now = Instant::now();
        for m in self.mirrors.values() {
            if m.record.state.failure().is_some_and(|f| f.retryable) {
                self.retry_at.insert(m.tp.clone(), now);
            }
        }
    }

    /// How many mirror partitions could not be opened.
    pub fn unopened_count(&self) -> usize {
        self.unopened.len()
    }

    /// Partitions that are FAILED now (in memory, whether recorded or not),
    /// including those that could not be opened.
    pub fn failed(&self) -> Vec<TopicPartition> {
        self.mirrors
            .values()
            .filter(|m| m.record.state.state() == PartitionState::Failed)
            .map(|m| m.tp.clone())
            .chain(self.unopened.keys().cloned())
            .collect()
    }

    /// Publishes metrics to `exposition` after every cycle.
    pub fn set_metrics(&mut self, exposition: crate::metrics::Exposition) {
        self.metrics = Some(exposition);
    }

    fn write_live_status(&mut self) {
        if self.head.is_none() {
            // Nothing known about the source (no bucket, or not read yet):
            // keep what a daemon last wrote.
            return;
        }
        let refresh_due = self
            .last_live
            .as_ref()
            .is_none_or(|(_, at)| at.elapsed() >= LIVE_REFRESH);
        if !self.live_dirty && !refresh_due {
            // Nothing it shows changed since it was last built.
            return;
        }
        self.live_dirty = false;
        let mut live = self.live_status();
        // Rewritten only when something but the clock changed.
        let stamp = live.written_at_ms;
        live.written_at_ms = 0;
        let unchanged = self.last_live.as_ref().is_some_and(|(l, _)| *l == live);
        if unchanged && !refresh_due {
            return;
        }
        live.written_at_ms = stamp;
        let mut written = crate::status::write_live(&self.opts.log_dir, &live);
        if let Err(e) = &written
            && crate::reserve::is_disk_full(e)
            && self.reserve.release()
        {
            written = crate::status::write_live(&self.opts.log_dir, &live);
        }
        if let Err(e) = written {
            tracing::warn!(error = %e, "could not write the live status");
        }
        live.written_at_ms = 0;
        self.last_live = Some((live, Instant::now()));
    }

    /// The live numbers of every partition the feed names.
    fn live_status(&self) -> LiveStatus {
        let mut live = LiveStatus {
            written_at_ms: crate::mirror::now_ms(),
            ..LiveStatus::default()
        };
        if let Some(head) = &self.head {
            for (key, e) in &head.partitions {
                let tp = TopicPartition::new(&e.topic, e.partition).ok();
                let lag_bytes = tp
                    .as_ref()
                    .and_then(|tp| self.manifests.get(tp).zip(self.mirrors.get(tp)))
                    .map(|(m, mirror)| {
                        let leo = mirror.log.log_end_offset();
                        m.inline_ranges_from(leo)
                            .iter()
                            .map(|r| r.bytes)
                            .sum::<u64>()
                            + m.pages_from(leo).iter().map(|p| p.bytes).sum::<u64>()
                    })
                    .unwrap_or(0);
                live.partitions.insert(
                    key.clone(),
                    LivePartition {
                        shipped_end_offset: e.shipped_end_offset,
                        source_high_watermark: e.source_high_watermark,
                        lag_bytes,
                        committed_at_ms: e.committed_at_ms,
                        local_log_start_offset: tp
                            .as_ref()
                            .and_then(|tp| self.mirrors.get(tp))
                            .map(|m| m.log.log_start_offset()),
                        local_log_end_offset: tp
                            .as_ref()
                            .and_then(|tp| self.mirrors.get(tp))
                            .map(|m| m.log.log_end_offset()),
                        waiting: tp.as_ref().and_then(|tp| self.waiting.get(tp).cloned()),
                        refused: tp.as_ref().and_then(|tp| self.refused.get(tp).cloned()),
                        unrecorded: tp.as_ref().and_then(|tp| self.unrecorded(tp)),
                    },
                );
            }
        }
        // Partitions the daemon cannot record, whether the feed names them
        // or not.
        for tp in self.unopened.keys().chain(self.mirrors.keys()) {
            if let Some(u) = self.unrecorded(tp) {
                live.partitions
                    .entry(tp.to_string())
                    .or_default()
                    .unrecorded = Some(u);
            }
        }
        live
    }

    /// The state of `tp` that its mirror record does not hold, if any.
    fn unrecorded(&self, tp: &TopicPartition) -> Option<crate::status::UnrecordedState> {
        if let Some(error) = self.unopened.get(tp) {
            return Some(crate::status::UnrecordedState {
                state: PartitionState::Failed.as_str().to_string(),
                previous_state: None,
                last_error: Some(format!("cannot open the partition: {error}")),
                retryable: Some(true),
                retry_count: 0,
                why: "opened again every cycle".into(),
            });
        }
        let m = self.mirrors.get(tp)?;
        let why = m.unsaved.clone()?;
        Some(crate::status::UnrecordedState {
            state: m.record.state.state().as_str().to_string(),
            previous_state: m.record.state.previous().map(|s| s.as_str().to_string()),
            last_error: m.record.state.failure().map(|f| f.message.clone()),
            retryable: m.record.state.failure().map(|f| f.retryable),
            retry_count: m.record.state.retries(),
            why,
        })
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
        if command == Command::Start {
            let _ = self.poll_feed().await;
        }
        let mut tps: Vec<TopicPartition> = Vec::new();
        if all {
            tps.extend(self.mirrors.keys().cloned());
        } else {
            for t in targets {
                let mut found: Vec<TopicPartition> = self
                    .mirrors
                    .keys()
                    .filter(|tp| &tp.topic == t)
                    .cloned()
                    .collect();
                let unopened: Vec<String> = self
                    .unopened
                    .iter()
                    .filter(|(tp, _)| &tp.topic == t)
                    .map(|(tp, e)| format!("{tp}: {e}"))
                    .collect();
                if !unopened.is_empty() {
                    return vec![CommandOutcome {
                        partition: t.clone(),
                        state: Some(PartitionState::Failed.as_str().to_string()),
                        error: Some(format!(
                            "cannot open the mirror partition(s) of {t:?}: {}",
                            unopened.join("; ")
                        )),
                    }];
                }
                if found.is_empty()
                    && command == Command::Start
                    && let Some(h) = &self.head
                {
                    found.extend(
                        h.partitions
                            .values()
                            .filter(|e| &e.topic == t && !e.deleted)
                            .filter_map(|e| TopicPartition::new(&e.topic, e.partition).ok()),
                    );
                }
                if found.is_empty() {
                    return vec![CommandOutcome {
                        partition: t.clone(),
                        state: None,
                        error: Some(format!(
                            "topic {t:?} has no mirror partition here{}",
                            if command == Command::Start {
                                " and none in the source's bucket"
                            } else {
                                ""
                            }
                        )),
                    }];
                }
                tps.extend(found);
            }
        }
        let mut out = Vec::new();
        for tp in tps {
            out.push(self.command_one(command, &tp).await);
        }
        self.live_dirty = true;
        self.discovered = None;
        self.write_checkpoints();
        self.write_live_status();
        out
    }

    async fn command_one(&mut self, command: Command, tp: &TopicPartition) -> CommandOutcome {
        let name = tp.to_string();
        if !self.mirrors.contains_key(tp) {
            // Only start reaches here for a new partition.
            let topic_id = self
                .head
                .as_ref()
                .and_then(|h| h.partitions.get(&name))
                .map(|e| (e.topic_id, e.manifest_version));
            let Some((topic_id, version)) = topic_id else {
                return CommandOutcome {
                    partition: name,
                    state: None,
                    error: Some("not in the source's bucket".into()),
                };
            };
            if !self.confirm_identity(tp, topic_id, version).await {
                return CommandOutcome {
                    partition: name.clone(),
                    state: None,
                    error: Some(format!(
                        "the source's manifest of {name} cannot be read: {}",
                        self.waiting.get(tp).map_or("", String::as_str)
                    )),
                };
            }
            return match self.adopt(tp, topic_id) {
                Ok(()) => {
                    self.refused.remove(tp);
                    CommandOutcome {
                        partition: name,
                        state: Some("PREPARING".into()),
                        error: None,
                    }
                }
                Err(reason) => CommandOutcome {
                    partition: name,
                    state: Some("FAILED".into()),
                    error: Some(reason),
                },
            };
        }
        if command == Command::Start {
            // Read the manifest again: `start` is how an operator says that
            // what failed (a corrupt manifest, say) was repaired.
            self.manifests.remove(tp);
            // A new start pins the configured source (failback mirrors the
            // other direction).
            if let Some(m) = self.mirrors.get_mut(tp) {
                let st = m.record.state.state();
                if matches!(st, PartitionState::Stopped | PartitionState::Failed) {
                    m.record.source_cluster_id = self.opts.source_cluster_id.clone();
                    if let Some(e) = self.head.as_ref().and_then(|h| h.partitions.get(&name)) {
                        m.record.topic_id = e.topic_id;
                    }
                }
            }
        }
        match self.transition(tp, Event::from(command)) {
            Ok(_) => {
                if command == Command::Stop {
                    self.complete_failover(tp);
                }
                CommandOutcome {
                    partition: name,
                    state: self.state_of(tp).map(|s| s.as_str().to_string()),
                    error: None,
                }
            }
            Err(e) => CommandOutcome {
                partition: name,
                state: self.state_of(tp).map(|s| s.as_str().to_string()),
                error: Some(e.to_string()),
            },
        }
    }
}

/// Exponential backoff with ±25% jitter.
fn backoff(base: Duration, max: Duration, retry: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << retry.min(16)).min(max);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let jitter = 0.75 + f64::from(nanos % 1000) / 2000.0;
    exp.mul_f64(jitter)
}

impl Applier {
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
                tokio::time::sleep(Duration::from_millis(100).min(poll_interval)).await;
            }
        }
    }
}
