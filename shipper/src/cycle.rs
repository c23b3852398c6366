//! The ship cycle: observe the log dirs, plan, upload, commit per
//! partition, publish the feed, sweep, report. See the crate docs for the
//! semantics; the commit, the feed and the sweep have their own modules.
//!
//! Invariants:
//! - one slot ([`ShipperSlot`]) per partition; a partition being
//!   decided, uploaded and committed is taken out of the map and put back
//!   with its commit's outcome, so no two steps hold it at once;
//! - health moves only through `ShipperSlot::apply_health` (see
//!   `crate::health`), and a partition is planned only when that says it
//!   ships this cycle;
//! - steps 1 and 3 read local files only; an idle cycle (nothing new
//!   anywhere) makes no request to the bucket.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bucket::store::{ManifestStore, StoreError};
use futures::StreamExt;
use kafkalog::TopicPartition;
use kafkalog::offsets_topic::OFFSETS_TOPIC;
use manifest::layout::{ClusterLayout, PartitionKey};
use object_store::ObjectStore;

use crate::buffers::PartBuffers;
use crate::clock::{Clock, SystemClock};
use crate::commit::{self, CommitCtx, CommitOutcome, load_page};
use crate::config::ShipperOptions;
use crate::error::ShipperError;
use crate::feed::Feed;
use crate::groups::GroupOffsetsPublisher;
use crate::health::{Health, HealthEvent};
use crate::leadership::Role;
use crate::metadata::{BrokerMetadata, Placement};
use crate::metrics::Metrics;
use crate::partition::{DecideCtx, PageCache, Shipment, ShipperSlot};
use crate::plan::RangePlan;
use crate::source::{self, RootCheckpoints, SourceView};
use crate::sweep::{self, SweepPolicy};
use crate::upload::{PackJob, RateLimiter, Uploaded, upload_pack, upload_range};

/// What one cycle (or several, summed) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Partitions known (selected by `topics`/`exclude`).
    pub partitions: usize,
    /// Partitions found in the readable log dirs, selected or not.
    pub seen: usize,
    /// Manifest versions committed.
    pub committed: usize,
    /// Objects uploaded and committed.
    pub objects: u64,
    /// Bytes of those objects.
    pub bytes: u64,
    /// Record batches in them.
    pub batches: u64,
    /// Heads published.
    pub heads: usize,
    /// Manifests cut back after a source divergence.
    pub cuts: usize,
    /// Compacted segments shipped again.
    pub reshipped_segments: usize,
    /// Partitions published as deleted.
    pub deleted_partitions: usize,
    /// Unreferenced objects deleted by sweeps.
    pub deleted_objects: u64,
    /// Packs deleted by pack garbage collection (layout 2).
    pub deleted_packs: u64,
    /// Objects written by compaction (packed ranges rewritten into objects
    /// of their partition's own), the packed ranges they replace, and
    /// their bytes.
    pub compacted: (u64, u64, u64),
    /// Versions of the consumer-group offsets published (or found
    /// unnamed by a head and named again).
    pub group_versions: usize,
    /// Partitions that lost a commit to another shipper, with its id.
    pub fenced: Vec<(TopicPartition, String)>,
    /// Errors, by partition (`-` for cluster-wide ones).
    pub errors: Vec<(String, String)>,
    /// More is waiting: a partition's plan hit the per-cycle byte budget,
    /// or a decision needs another cycle (pages to read, a cut to re-ship
    /// after).
    pub backlog: bool,
}

impl CycleReport {
    /// True when the cycle committed or deleted anything.
    pub fn did_something(&self) -> bool {
        self.committed > 0
            || self.heads > 0
            || self.deleted_objects > 0
            || self.deleted_packs > 0
            || self.compacted.0 > 0
    }

    fn absorb(&mut self, r: CycleReport) {
        self.partitions = r.partitions;
        self.seen = r.seen;
        self.committed += r.committed;
        self.objects += r.objects;
        self.bytes += r.bytes;
        self.batches += r.batches;
        self.heads += r.heads;
        self.cuts += r.cuts;
        self.reshipped_segments += r.reshipped_segments;
        self.deleted_partitions += r.deleted_partitions;
        self.deleted_objects += r.deleted_objects;
        self.deleted_packs += r.deleted_packs;
        self.compacted.0 += r.compacted.0;
        self.compacted.1 += r.compacted.1;
        self.compacted.2 += r.compacted.2;
        self.group_versions += r.group_versions;
        self.fenced.extend(r.fenced);
        self.errors.extend(r.errors);
        self.backlog = r.backlog;
    }
}

/// One partition as the shipper sees it (for status output and tests).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionStatus {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Topic id, when known.
    pub topic_id: Option<String>,
    /// State name (see [`Health::name`]).
    pub state: &'static str,
    /// The error, the other writer when fenced, or why another replica's
    /// shipper ships it (standby) or every replica does (untrusted
    /// metadata).
    pub detail: Option<String>,
    /// This broker's role for the partition by its KRaft metadata
    /// (`leader`, `follower`, …; see the `partition_roles` metric), `None`
    /// without a metadata log.
    pub role: Option<&'static str>,
    /// Latest manifest version known.
    pub manifest_version: Option<u64>,
    /// Its writer.
    pub writer: Option<String>,
    /// Its shipped end.
    pub shipped_end_offset: i64,
    /// The source high watermark last seen.
    pub source_high_watermark: i64,
    /// `source_high_watermark - shipped_end_offset` (never negative).
    pub lag_offsets: i64,
    /// Committed bytes not shipped, as of the last plan.
    pub lag_bytes: u64,
    /// The manifest's gaps (`manifest::gaps`), acknowledged or not.
    pub gaps: Vec<manifest::gaps::Gap>,
}

/// Tails the source log dirs and ships to the bucket. See the crate docs.
#[derive(Debug)]
pub struct Shipper {
    opts: ShipperOptions,
    store: ManifestStore,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    limiter: Option<Arc<RateLimiter>>,
    /// The part buffers and memory budget all uploads share
    /// (`crate::buffers`).
    buffers: Arc<PartBuffers>,
    /// One slot per partition known.
    partitions: BTreeMap<TopicPartition, ShipperSlot>,
    /// The change feed's head and the entries for the next one.
    feed: Feed,
    /// The source's consumer-group offsets and what the bucket holds.
    groups: GroupOffsetsPublisher,
    pages: PageCache,
    started_ms: i64,
    /// Pack garbage collection (layout 2).
    pack_gc: crate::pack_gc::PackGc,
    /// Compaction's uploads in flight (layout 2).
    compactor: crate::compaction::Compactor,
    /// Whether compaction writes in the background (`run`) or in the
    /// cycle that plans it (`run_cycle` on its own, `ship_available`).
    background_compaction: bool,
    down_roots: HashSet<PathBuf>,
    /// Partitions found in two log dirs, as last logged.
    duplicates: HashSet<String>,
    /// The source broker's KRaft metadata, when it has a metadata log
    /// (`crate::metadata`): topic configs are published from it.
    metadata: Option<BrokerMetadata>,
}

enum Observation {
    View(Box<SourceView>),
    Missing,
    Unknown,
    Error(kafkalog::Error),
}

/// What one read of the log dirs found: each partition's observation,
/// the log dirs that could not be read, how many partitions the readable
/// ones hold (selected or not), and the partitions found in two log dirs
/// (which copy is shipped, and why).
type Observed = (
    Vec<(TopicPartition, PathBuf, Observation)>,
    Vec<(PathBuf, String)>,
    usize,
    Vec<String>,
);

fn observe_all(
    opts: &ShipperOptions,
    known: Vec<(TopicPartition, PathBuf)>,
    placement: Option<&Placement>,
    tiered_by_metadata: &BTreeSet<String>,
) -> Observed {
    let mut found: BTreeMap<TopicPartition, (PathBuf, Arc<RootCheckpoints>)> = BTreeMap::new();
    let mut up: HashSet<PathBuf> = HashSet::new();
    let mut problems = Vec::new();
    let mut duplicates = Vec::new();
    let mut seen = 0;
    for root in &opts.log_dirs {
        if !root.is_dir() {
            problems.push((
                root.clone(),
                "the log dir is missing or not a directory".to_string(),
            ));
            continue;
        }
        let cps = match source::read_root_checkpoints(root) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                problems.push((root.clone(), e.to_string()));
                continue;
            }
        };
        let tps = match kafkalog::reader::list_partitions(root) {
            Ok(t) => t,
            Err(e) => {
                problems.push((root.clone(), e.to_string()));
                continue;
            }
        };
        up.insert(root.clone());
        seen += tps.len();
        for tp in tps {
            // Committed offsets are shipped as group offsets (`groups`),
            // never as a mirror partition; the KRaft metadata log is the
            // broker's own (read by `metadata`), not a topic.
            if !opts.selects(&tp.topic)
                || tp.topic == OFFSETS_TOPIC
                || tp.topic == kraft::reader::METADATA_TOPIC
            {
                continue;
            }
            if let Some((first, _)) = found.get(&tp) {
                // JBOD: the metadata names the log dir that holds the
                // partition; a copy in another one is stale.
                if placement.is_some_and(|p| p.assigned_to(&tp, root)) {
                    duplicates.push(format!(
                        "{tp} is in {} and in {}, the log dir the broker's metadata assigns: shipping that one",
                        first.display(),
                        root.display()
                    ));
                    found.insert(tp, (root.clone(), Arc::clone(&cps)));
                } else {
                    duplicates.push(format!(
                        "{tp} is in {} and in {}: shipping the first",
                        first.display(),
                        root.display()
                    ));
                }
                continue;
            }
            found.insert(tp, (root.clone(), Arc::clone(&cps)));
        }
    }
    let mut out = Vec::new();
    for (tp, root) in known {
        if found.contains_key(&tp) {
            continue;
        }
        let obs = if up.contains(&root) {
            Observation::Missing
        } else {
            Observation::Unknown
        };
        out.push((tp, root, obs));
    }
    for (tp, (root, cps)) in found {
        let tiered = opts.tiered_topics.iter().any(|t| t == &tp.topic)
            || tiered_by_metadata.contains(&tp.topic);
        let obs = match source::observe(&root, &tp, &cps, opts.ship_beyond_hw, tiered) {
            Ok(Some(v)) => Observation::View(Box::new(v)),
            Ok(None) => Observation::Missing,
            Err(e) => Observation::Error(e),
        };
        out.push((tp, root, obs));
    }
    (out, problems, seen, duplicates)
}

impl Shipper {
    /// A shipper over `store` (built from the bucket URL in production:
    /// [`bucket::url::BucketUrl::build`]; a
    /// [`bucket::counting::CountingStore`] to count requests). Keys go
    /// under `opts.bucket_prefix`.
    pub fn new(opts: ShipperOptions, store: Arc<dyn ObjectStore>) -> Result<Shipper, ShipperError> {
        let layout = ClusterLayout::new(&opts.bucket_prefix, &opts.cluster_id)
            .map_err(|e| ShipperError::store("-", StoreError::Layout(e)))?;
        let limiter = opts
            .rate_limit
            .map(|r| Arc::new(RateLimiter::new(r, opts.part_size)));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let started_ms = clock.now_ms();
        let metadata = BrokerMetadata::discover(&opts)?;
        if metadata.is_none() {
            // A ZooKeeper-mode broker, or a plain log dir: nothing says which
            // replicas this broker leads.
            tracing::warn!(
                log_dirs = %opts
                    .log_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                "no KRaft metadata log (__cluster_metadata-0) in the log dirs and no metadata_log_dir: \
                 every partition found is shipped, and topic configs are not published; with several \
                 brokers every replica's shipper ships the same partitions (the losers are fenced): \
                 give each partition to one shipper with --topics/--exclude, or point \
                 --metadata-log-dir at the broker's metadata.log.dir"
            );
        }
        Ok(Shipper {
            store: ManifestStore::new(store, layout),
            clock,
            metrics: Arc::new(Metrics::new(None)),
            limiter,
            buffers: PartBuffers::new(opts.part_size),
            partitions: BTreeMap::new(),
            feed: Feed::default(),
            groups: GroupOffsetsPublisher::default(),
            pages: PageCache::default(),
            started_ms,
            pack_gc: crate::pack_gc::PackGc::default(),
            compactor: crate::compaction::Compactor::default(),
            background_compaction: false,
            down_roots: HashSet::new(),
            duplicates: HashSet::new(),
            metadata,
            opts,
        })
    }

    /// Uses `clock` instead of the system clock (tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Shipper {
        self.started_ms = clock.now_ms();
        self.clock = clock;
        self
    }

    /// Compaction writes its objects in a task of its own while cycles go
    /// on, and the cycle after they are written commits them, as under
    /// [`Shipper::run`] (which turns this on); otherwise the cycle that
    /// plans compaction awaits it.
    pub fn with_background_compaction(mut self, on: bool) -> Shipper {
        self.background_compaction = on;
        self
    }

    /// Waits until compaction's objects in flight are written (with
    /// background compaction; the next cycle commits them).
    pub async fn compaction_written(&self) {
        self.compactor.written().await;
    }

    /// Reports into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Shipper {
        self.metrics = metrics;
        self
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The options.
    pub fn options(&self) -> &ShipperOptions {
        &self.opts
    }

    /// The bucket's manifest store.
    pub fn store(&self) -> &ManifestStore {
        &self.store
    }

    /// Every partition known, sorted.
    pub fn partitions(&self) -> Vec<PartitionStatus> {
        self.partitions
            .values()
            .map(|st| {
                let m = st.manifest.as_ref();
                let end = st.shipped_end();
                PartitionStatus {
                    topic: st.tp.topic.clone(),
                    partition: st.tp.partition,
                    topic_id: st.pk.as_ref().map(|p| p.topic_id.to_string()),
                    state: st.health.name(),
                    detail: match &st.health {
                        Health::Failed { error, .. } => Some(error.clone()),
                        Health::Fenced { writer, .. } => Some(format!("fenced by {writer}")),
                        Health::Standby { detail } => Some(detail.clone()),
                        _ => match &st.role {
                            Some(r @ Role::Untrusted { .. }) => Some(r.describe()),
                            _ => None,
                        },
                    },
                    role: st.role.as_ref().map(Role::name),
                    manifest_version: m.map(|m| m.version),
                    writer: m.map(|m| m.writer.clone()),
                    shipped_end_offset: end,
                    source_high_watermark: st.hw,
                    lag_offsets: (st.hw - end).max(0),
                    lag_bytes: st.lag_bytes,
                    gaps: m.map(|m| m.gaps.clone()).unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Runs cycles until one finds nothing more to ship (for `shipper once`
    /// and tests), then returns what they did in total.
    pub async fn ship_available(&mut self) -> CycleReport {
        let mut total = CycleReport::default();
        for _ in 0..10_000 {
            let r = self.run_cycle().await;
            let more = r.committed > 0 || r.backlog;
            total.absorb(r);
            if !more {
                break;
            }
        }
        total
    }

    /// Runs a cycle every tail interval, counted from one cycle's start to
    /// the next (so data waits at most the interval plus one cycle to be
    /// shipped, whatever a cycle takes), and at once while there is a
    /// backlog or a cycle took longer than the interval, until `stop`
    /// completes; the cycle in progress finishes first.
    pub async fn run(&mut self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        // Compaction writes its objects while the cycles go on.
        let background = std::mem::replace(&mut self.background_compaction, true);
        loop {
            let started = std::time::Instant::now();
            let r = self.run_cycle().await;
            let took = started.elapsed();
            tracing::debug!(
                took_ms = took.as_millis() as u64,
                committed = r.committed,
                "cycle"
            );
            let pause = if r.backlog {
                Duration::ZERO
            } else {
                self.opts.tail_interval.saturating_sub(took)
            };
            tokio::select! {
                biased;
                _ = &mut stop => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
        self.background_compaction = background;
        tracing::info!("shipper stopped");
    }

    /// One cycle: discover and read the source, ship what is new, commit
    /// one manifest version per changed partition, publish one head, sweep
    /// the partitions that are due. An idle cycle makes no request.
    pub async fn run_cycle(&mut self) -> CycleReport {
        let started = Instant::now();
        let now = self.clock.now_ms();
        let mut report = CycleReport::default();
        if let Err(e) = self.feed.load_once(&self.store).await {
            self.cluster_error(&mut report, e);
        }
        // The request rate so far, carried by the next head written
        // (`shipper status` shows it; the metric has it at every scrape).
        self.metrics.sync_requests();
        self.feed
            .set_cost(self.metrics.request_cost().map(|(prices, secs, c)| {
                manifest::feed::WriterCost {
                    prices,
                    window_s: secs as u64,
                    writes_per_hour: (c.writes_per_s * 3600.0).round() as u64,
                    reads_per_hour: (c.reads_per_s * 3600.0).round() as u64,
                    cents_per_month: (c.dollars_per_month * 100.0).round() as u64,
                    measured_at_ms: now,
                }
            }));
        // 1. Discover and read the source (local files only).
        let Some((views, deletions)) = self.observe(now, &mut report).await else {
            return report;
        };
        // 2. Read the latest manifests of partitions new to this process
        //    (or reset), and pages some decision needs; and, while a gap is
        //    not acknowledged, whether `shipper gaps ack` acknowledged it.
        self.load_manifests(&views, &mut report).await;
        crate::gaps::follow_acknowledgements(&self.store, &mut self.partitions, now).await;
        // 3. Decide (local files only).
        let Some(mut works) = self.decide(views, now, &mut report).await else {
            return report;
        };
        works.extend(self.deletion_works(deletions));
        // 4. Upload every planned range.
        let results = self.upload(&works).await;
        // 5. Commit one manifest version per partition.
        self.commit_all(works, results, now, &mut report).await;
        // 5b. Behind the tail: packed ranges due rewritten into objects of
        //     their partition's own.
        if self.opts.pack_below > 0 {
            let policy = manifest::compact::Policy {
                min_age_ms: self.opts.compact_after.as_millis() as i64,
                max_ranges: self.opts.compact_ranges,
                ..manifest::compact::Policy::default()
            };
            let (done, errors) = self
                .compactor
                .cycle(
                    &self.store,
                    &mut self.partitions,
                    &mut self.feed,
                    &policy,
                    crate::compaction::Ctx {
                        writer: &self.opts.shipper_id,
                        head_deltas: self.opts.head_deltas,
                        grace_ms: self.opts.delete_grace.map(|g| g.as_millis() as i64),
                    },
                    now,
                    self.background_compaction,
                )
                .await;
            report.compacted = (done.objects, done.ranges, done.bytes);
            report.heads += done.heads as usize;
            self.metrics.heads_published.inc_by(done.heads);
            report.errors.extend(errors);
        }
        // 6. The consumer-group offsets, when due (local reads; requests
        //    only when they changed).
        if self.groups.due(&self.opts, now) {
            match self
                .groups
                .sync(
                    &self.opts,
                    &self.store,
                    &self.metrics,
                    self.feed.groups_pointer(),
                    now,
                )
                .await
            {
                Ok(Some(p)) => {
                    report.group_versions += 1;
                    self.feed.queue_groups(p);
                }
                Ok(None) => {}
                Err(e) => {
                    self.metrics.error(e.kind());
                    tracing::warn!(error = %e, "shipping consumer-group offsets; retried at the next interval");
                    report.errors.push((OFFSETS_TOPIC.into(), e.to_string()));
                }
            }
        }
        // 7. One head for everything committed, and for any version this
        //    shipper holds that the feed does not name yet (adopted after a
        //    lost answer, or committed just before a crash).
        self.feed.queue_unnamed(
            self.partitions
                .values()
                .filter_map(|st| st.manifest.as_ref()),
        );
        match self.feed.publish(&self.store, &self.opts.shipper_id).await {
            Ok(true) => {
                report.heads += 1;
                self.metrics.heads_published.inc();
            }
            Ok(false) => {}
            Err(e) => self.cluster_error(&mut report, e),
        }
        // With deltas, a version number can be taken twice: an object this
        // shipper wrote (compaction, a non-append change) and another
        // writer's delta in a head. The head decides: a partition whose
        // held version the newest head names differently is read again.
        if self.opts.head_deltas {
            for st in self.partitions.values_mut() {
                if self.feed.names_other_than(st) {
                    tracing::info!(partition = %st.tp, "the head names another writer's version at this number: reading the partition again");
                    st.reset();
                }
            }
        }
        // 8. Sweep the partitions that are due.
        report.deleted_objects += self.sweep(now, false, &mut report).await;
        // 9. Packs no latest version names, every sweep interval.
        if self.opts.delete_grace.is_some()
            && self.pack_gc.due(
                now,
                self.started_ms,
                self.opts.sweep_interval.as_millis() as i64,
            )
            && let Ok(r) = self.collect_packs_at(now, &mut report).await
        {
            report.deleted_packs += r.deleted;
        }
        report.partitions = self.partitions.len();
        self.update_metrics(now, started.elapsed());
        report
    }

    /// Reads the log dirs and moves each partition's health by what was
    /// found. Returns the views of the partitions to ship this cycle and
    /// the partitions gone for the grace period; `None` when the log dirs
    /// could not be read at all (the error is in the report).
    async fn observe(
        &mut self,
        now: i64,
        report: &mut CycleReport,
    ) -> Option<(BTreeMap<TopicPartition, SourceView>, Vec<TopicPartition>)> {
        let known: Vec<(TopicPartition, PathBuf)> = self
            .partitions
            .iter()
            .filter(|(_, st)| st.health != Health::Deleted)
            .map(|(tp, st)| (tp.clone(), st.root.clone()))
            .collect();
        let opts = self.opts.clone();
        // What the metadata says about the dirs about to be read: which
        // copy of a partition is the assigned one (JBOD), which topics are
        // tiered at the source.
        let (placement, tiered) = match &mut self.metadata {
            Some(md) => {
                md.poll();
                let placement = if opts.log_dirs.len() > 1 {
                    md.placement()
                } else {
                    None
                };
                (placement, md.tiered_topics())
            }
            None => (None, BTreeSet::new()),
        };
        let (observed, problems, seen, duplicates) = match tokio::task::spawn_blocking(move || {
            observe_all(&opts, known, placement.as_ref(), &tiered)
        })
        .await
        {
            Ok(x) => x,
            Err(e) => {
                report
                    .errors
                    .push(("-".into(), format!("reading the log dirs: {e}")));
                return None;
            }
        };
        self.note_down_roots(problems);
        self.note_duplicates(duplicates);
        report.seen = seen;
        let mut views: BTreeMap<TopicPartition, SourceView> = BTreeMap::new();
        let mut deletions: Vec<TopicPartition> = Vec::new();
        let grace_ms = self.opts.partition_delete_grace.as_millis() as i64;
        let mut no_topic_id: Vec<String> = Vec::new();
        // The metadata is read after the log dirs were listed: a broker
        // creates a partition dir after its metadata record is in its log,
        // so every dir listed is known to the image read now.
        if let Some(md) = &mut self.metadata {
            md.poll();
        }
        for (tp, root, obs) in observed {
            let st = self
                .partitions
                .entry(tp.clone())
                .or_insert_with(|| ShipperSlot::new(tp.clone(), root.clone(), now));
            match obs {
                Observation::Unknown => {}
                Observation::Missing => {
                    let since = *st.missing_since_ms.get_or_insert(now);
                    st.apply_health(HealthEvent::DirMissing);
                    let published_live = st.manifest.as_ref().is_some_and(|m| !m.deleted);
                    // With metadata, a dir that is gone while its topic
                    // lives on moved (a reassignment, another log dir):
                    // not a deletion.
                    let topic_gone = match (&self.metadata, &st.pk) {
                        (Some(md), Some(pk)) => md.topic_gone(&tp.topic, pk.topic_id),
                        _ => true,
                    };
                    if now - since >= grace_ms && published_live && topic_gone {
                        deletions.push(tp);
                    }
                }
                Observation::Error(e) => {
                    let e = ShipperError::Source {
                        tp: tp.clone(),
                        source: Box::new(e),
                    };
                    self.metrics.error(e.kind());
                    tracing::warn!(partition = %tp, error = %e, "cannot read the partition this cycle");
                    report.errors.push((tp.to_string(), e.to_string()));
                }
                Observation::View(v) => {
                    st.root = root;
                    st.missing_since_ms = None;
                    let Some(topic_id) = v.topic_id else {
                        if !st.warned_no_topic_id {
                            no_topic_id.push(tp.to_string());
                            st.warned_no_topic_id = true;
                        }
                        st.apply_health(HealthEvent::Seen {
                            has_topic_id: false,
                            now_ms: now,
                        });
                        continue;
                    };
                    if st.pk.as_ref().is_none_or(|p| p.topic_id != topic_id) {
                        if let Some(old) = &st.pk {
                            tracing::warn!(partition = %tp, old = %old.topic_id, new = %topic_id, "the topic was recreated (new topic id): starting a new manifest chain");
                        }
                        st.reset();
                        st.confirmed.clear();
                        st.dropped.clear();
                        st.last_sweep_ms = None;
                        st.pk = Some(PartitionKey {
                            tp: tp.clone(),
                            topic_id,
                        });
                    }
                    let role = self
                        .metadata
                        .as_ref()
                        .and_then(|md| md.role(&st.root, &tp.topic, tp.partition, topic_id));
                    log_role_change(&tp, st.role.as_ref(), role.as_ref());
                    let event = match &role {
                        Some(r) if !r.ships() => HealthEvent::ShippedElsewhere {
                            detail: r.describe(),
                        },
                        _ => HealthEvent::Seen {
                            has_topic_id: true,
                            now_ms: now,
                        },
                    };
                    st.role = role;
                    let ships = st.apply_health(event);
                    if ships {
                        views.insert(tp, *v);
                    }
                }
            }
        }
        if !no_topic_id.is_empty() {
            // One line for all of them (a pre-2.8 broker has hundreds).
            tracing::warn!(
                partitions = no_topic_id.len(),
                first = %no_topic_id[0],
                "partitions without partition.metadata (no topic id: Kafka before 2.8, or inter.broker.protocol.version below 2.8) are not shipped until it appears (object keys need the topic id)"
            );
        }
        if let Some(md) = &mut self.metadata {
            for (tp, view) in views.iter_mut() {
                view.topic_configs = md.configs_for(&tp.topic);
            }
        }
        Some((views, deletions))
    }

    /// Logs each partition found in two log dirs once, while it lasts.
    fn note_duplicates(&mut self, duplicates: Vec<String>) {
        let now: HashSet<String> = duplicates.into_iter().collect();
        for d in now.iter().filter(|d| !self.duplicates.contains(*d)) {
            tracing::warn!(found = %d, "a partition is in two log dirs");
        }
        self.duplicates = now;
    }

    /// Logs log dirs that became unreadable or readable again.
    fn note_down_roots(&mut self, problems: Vec<(PathBuf, String)>) {
        let mut down = HashSet::new();
        for (root, problem) in problems {
            if self.down_roots.insert(root.clone()) {
                tracing::warn!(log_dir = %root.display(), %problem, "log dir unreadable: its partitions are left as they are until it is back");
            }
            down.insert(root);
        }
        for root in self.down_roots.iter().filter(|r| !down.contains(*r)) {
            tracing::info!(log_dir = %root.display(), "log dir readable again");
        }
        self.down_roots = down;
    }

    /// Decides every partition ready to ship from its view (local files
    /// only, on a blocking thread). Returns the partitions with work, taken
    /// out of `self.partitions` until they are committed; `None` when the
    /// planning thread failed.
    async fn decide(
        &mut self,
        views: BTreeMap<TopicPartition, SourceView>,
        now: i64,
        report: &mut CycleReport,
    ) -> Option<Vec<(ShipperSlot, Shipment)>> {
        let ctx = DecideCtx {
            max_object: self.opts.max_object_size,
            max_cycle_bytes: self.opts.max_cycle_bytes,
            error_backoff_ms: self.opts.error_backoff.as_millis() as i64,
            pages: Arc::clone(&self.pages),
        };
        let mut batch: Vec<(ShipperSlot, SourceView)> = Vec::new();
        for (tp, v) in views {
            let ready = self
                .partitions
                .get(&tp)
                .is_some_and(|st| st.loaded && st.pk.is_some() && st.health == Health::Ok);
            if ready && let Some(st) = self.partitions.remove(&tp) {
                batch.push((st, v));
            }
        }
        let decide_ctx = ctx.clone();
        let decided = tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(batch.len());
            for (mut st, v) in batch {
                let d = st.decide(&v, &decide_ctx);
                out.push((st, d));
            }
            out
        })
        .await;
        let decided = match decided {
            Ok(d) => d,
            Err(e) => {
                report.errors.push(("-".into(), format!("planning: {e}")));
                return None;
            }
        };
        let mut works: Vec<(ShipperSlot, Shipment)> = Vec::new();
        for (mut st, d) in decided {
            match d {
                Ok(Some(w)) => works.push((st, w)),
                Ok(None) => {
                    if !st.pages_to_load.is_empty() {
                        report.backlog = true;
                    }
                    self.partitions.insert(st.tp.clone(), st);
                }
                Err(e) => {
                    self.metrics.error(e.kind());
                    report.errors.push((st.tp.to_string(), e.to_string()));
                    if e.is_retryable() {
                        tracing::warn!(partition = %st.tp, error = %e, "retrying next cycle");
                        st.cursor = None;
                    } else {
                        st.fail(&e, now, ctx.error_backoff_ms);
                    }
                    self.partitions.insert(st.tp.clone(), st);
                }
            }
        }
        Some(works)
    }

    /// The work of publishing `deletions` as deleted.
    fn deletion_works(&mut self, deletions: Vec<TopicPartition>) -> Vec<(ShipperSlot, Shipment)> {
        let mut works = Vec::new();
        for tp in deletions {
            if let Some(st) = self.partitions.remove(&tp) {
                tracing::warn!(partition = %tp, "the partition dir has been gone for the grace period: publishing it as deleted");
                let w = Shipment {
                    mark_deleted: true,
                    ..Shipment::default()
                };
                works.push((st, w));
            }
        }
        works
    }

    /// Uploads every job of every work (`upload_concurrency` at once), each
    /// under a fresh data key. Returns, per work, one result per job.
    async fn upload(
        &self,
        works: &[(ShipperSlot, Shipment)],
    ) -> Vec<Vec<Result<Uploaded, ShipperError>>> {
        let mut jobs: Vec<(usize, usize, RangePlan, TopicPartition, PartitionKey)> = Vec::new();
        let mut results: Vec<Vec<Option<Result<Uploaded, ShipperError>>>> = Vec::new();
        for (wi, (st, w)) in works.iter().enumerate() {
            let plans = w.jobs();
            results.push((0..plans.len()).map(|_| None).collect());
            if let Some(pk) = &st.pk {
                for (ji, p) in plans.into_iter().enumerate() {
                    jobs.push((wi, ji, p, st.tp.clone(), pk.clone()));
                }
            }
        }
        let store = &self.store;
        let part_size = self.opts.part_size;
        let limiter = self.limiter.clone();
        let buffers = &self.buffers;
        // The small ranges of all partitions go into packs (one PUT each);
        // the rest, and a small range alone, into objects of their own. A
        // whole segment that rolled (a backlog, a quiet partition) is not
        // packed: compaction would rewrite it into an object of its own at
        // once.
        let pack_below = self.opts.pack_below.min(part_size as u64);
        let (small, mut jobs): (Vec<_>, Vec<_>) =
            jobs.into_iter().partition(|(_, _, plan, _, _)| {
                plan.bytes() < pack_below && !(plan.completes_segment && plan.start == 0)
            });
        if small.len() < 2 {
            jobs.extend(small);
        } else {
            for chunk in pack_chunks(&small, |(_, _, plan, _, _)| plan.bytes()) {
                let pack_jobs: Vec<PackJob<'_>> = chunk
                    .iter()
                    .map(|(_, _, plan, tp, pk)| PackJob {
                        tp,
                        topic_id: pk.topic_id,
                        plan,
                    })
                    .collect();
                let key = store.layout().pack_key(&bucket::upload_id::fresh_string());
                let done = match key {
                    Ok(key) => {
                        upload_pack(store, &pack_jobs, key, limiter.as_deref(), buffers).await
                    }
                    Err(e) => pack_jobs
                        .iter()
                        .map(|j| {
                            Err(ShipperError::store(
                                j.tp.to_string(),
                                StoreError::Layout(e.clone()),
                            ))
                        })
                        .collect(),
                };
                for ((wi, ji, _, _, _), r) in chunk.iter().zip(done) {
                    if let Err(e) = &r {
                        tracing::warn!(error = %e, "upload failed");
                    }
                    if let Some(slot) = results.get_mut(*wi).and_then(|v| v.get_mut(*ji)) {
                        *slot = Some(r);
                    }
                }
            }
        }
        let mut uploads = futures::stream::iter(jobs.into_iter().map(|(wi, ji, plan, tp, pk)| {
            let limiter = limiter.clone();
            async move {
                let key = store.layout().data_key(
                    &pk,
                    plan.summary.base_offset,
                    plan.summary.last_offset,
                    plan.summary.first_epoch,
                    &bucket::upload_id::fresh_string(),
                );
                let r = match key {
                    Ok(key) => {
                        upload_range(
                            store,
                            &tp,
                            &plan,
                            key,
                            part_size,
                            limiter.as_deref(),
                            buffers,
                        )
                        .await
                    }
                    Err(e) => Err(ShipperError::store(tp.to_string(), StoreError::Layout(e))),
                };
                (wi, ji, r)
            }
        }))
        .buffer_unordered(self.opts.upload_concurrency);
        while let Some((wi, ji, r)) = uploads.next().await {
            if let Err(e) = &r {
                tracing::warn!(error = %e, "upload failed");
            }
            if let Some(slot) = results.get_mut(wi).and_then(|v| v.get_mut(ji)) {
                *slot = Some(r);
            }
        }
        drop(uploads);
        works
            .iter()
            .zip(results)
            .map(|((st, _), rs)| {
                rs.into_iter()
                    .map(|r| {
                        r.unwrap_or_else(|| {
                            Err(ShipperError::Inconsistent {
                                tp: st.tp.clone(),
                                reason: "an upload did not run".into(),
                            })
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// Commits every work ([`commit::commit`]) and records the outcomes in
    /// the report, the metrics and the feed; the partitions go back into
    /// `self.partitions`.
    async fn commit_all(
        &mut self,
        works: Vec<(ShipperSlot, Shipment)>,
        results: Vec<Vec<Result<Uploaded, ShipperError>>>,
        now: i64,
        report: &mut CycleReport,
    ) {
        let cctx = CommitCtx {
            store: &self.store,
            layout: self.store.layout(),
            shipper_id: &self.opts.shipper_id,
            cluster_id: &self.opts.cluster_id,
            now_ms: now,
            fence_backoff_ms: self.opts.fence_backoff.as_millis() as i64,
            pages: &self.pages,
        };
        // With `head_deltas`, where each partition's held version stands
        // in the head's chain (its appends are then committed by the head).
        let chains: BTreeMap<TopicPartition, commit::ChainPosition> = if self.opts.head_deltas {
            works
                .iter()
                .filter_map(|(st, _)| {
                    let (pk, m) = (st.pk.as_ref()?, st.manifest.as_ref()?);
                    let c =
                        commit::ChainPosition::of(self.feed.entry(&st.tp, pk).as_ref(), m.version)?;
                    Some((st.tp.clone(), c))
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        let chains = &chains;
        let mut outcomes: Vec<(ShipperSlot, bool, CommitOutcome)> =
            futures::stream::iter(works.into_iter().zip(results).map(|((mut st, w), rs)| {
                let cctx = &cctx;
                async move {
                    let backlog = w.capped || w.cut.is_some();
                    let chain = chains.get(&st.tp).copied();
                    let o = commit::commit(cctx, &mut st, w, rs, chain).await;
                    (st, backlog, o)
                }
            }))
            .buffer_unordered(self.opts.upload_concurrency)
            .collect()
            .await;
        // The versions starting their chains again: one manifest pack,
        // written before the head that names it.
        write_manifest_pack(&self.store, &mut outcomes).await;
        // The deltas: one head commits them all (with what the feed had
        // queued); the partitions move once it is written, and those
        // another writer moved are read again next cycle.
        let mut by_head: BTreeSet<TopicPartition> = BTreeSet::new();
        let deltas: Vec<manifest::feed::HeadEntry> = outcomes
            .iter()
            .filter_map(|(_, _, o)| match o {
                CommitOutcome::Deferred(d) => Some(d.entry.clone()),
                _ => None,
            })
            .collect();
        if !deltas.is_empty() {
            let committed = self
                .feed
                .commit_deltas(&self.store, &self.opts.shipper_id, deltas)
                .await;
            if let Ok((true, _)) = &committed {
                report.heads += 1;
                self.metrics.heads_published.inc();
            }
            for (st, _, o) in &mut outcomes {
                if !matches!(o, CommitOutcome::Deferred(_)) {
                    continue;
                }
                let CommitOutcome::Deferred(d) =
                    std::mem::replace(o, CommitOutcome::Unchanged { error: None })
                else {
                    continue;
                };
                let version = d.entry.manifest_version;
                *o = match &committed {
                    Ok((_, refused)) if refused.contains(&d.entry.map_key()) => {
                        st.reset();
                        CommitOutcome::Fenced {
                            version,
                            writer: "another shipper (the head moved the partition first)".into(),
                        }
                    }
                    Ok(_) => {
                        by_head.insert(st.tp.clone());
                        commit::confirm_deferred(&cctx, st, *d)
                    }
                    Err(e) => {
                        st.reset();
                        CommitOutcome::Failed(ShipperError::Inconsistent {
                            tp: st.tp.clone(),
                            reason: format!(
                                "the head committing version {version} was not written: {e}"
                            ),
                        })
                    }
                };
            }
        }
        let error_backoff_ms = self.opts.error_backoff.as_millis() as i64;
        for (mut st, backlog, o) in outcomes {
            report.backlog |= o.wants_another_cycle(backlog);
            // A leader that lost to the previous leader's last commit
            // continues from it in the next cycle (no back-off).
            report.backlog |= matches!(o, CommitOutcome::Fenced { .. })
                && st.role.as_ref().is_some_and(Role::leads);
            let error = match o {
                CommitOutcome::Committed {
                    version,
                    shipped,
                    cut,
                    deleted,
                    partial,
                } => {
                    tracing::debug!(partition = %st.tp, version, objects = shipped.objects, "committed");
                    report.committed += 1;
                    report.objects += shipped.objects;
                    report.bytes += shipped.bytes;
                    report.batches += shipped.batches;
                    report.reshipped_segments += shipped.reshipped;
                    report.cuts += usize::from(cut);
                    report.deleted_partitions += usize::from(deleted);
                    self.metrics.manifest_commits.inc();
                    self.metrics.shipped_objects.inc_by(shipped.objects);
                    self.metrics.shipped_bytes.inc_by(shipped.bytes);
                    self.metrics.shipped_batches.inc_by(shipped.batches);
                    // A version the head committed as a delta is named
                    // already; queued, it would be merged as an object.
                    if !by_head.contains(&st.tp)
                        && let Some(m) = &st.manifest
                    {
                        self.feed.queue(m);
                    }
                    partial
                }
                CommitOutcome::Unchanged { error } => error,
                CommitOutcome::Adopted { version } => {
                    tracing::debug!(partition = %st.tp, version, "adopted a version committed under this shipper's id");
                    None
                }
                CommitOutcome::Fenced { version, writer } => {
                    tracing::debug!(partition = %st.tp, version, %writer, "fenced");
                    self.metrics.error("fenced");
                    report.fenced.push((st.tp.clone(), writer));
                    None
                }
                CommitOutcome::Failed(e) => Some(e),
                // Resolved above, once the head was written.
                CommitOutcome::Deferred(_) => None,
            };
            if let Some(e) = error {
                self.metrics.error(e.kind());
                report.errors.push((st.tp.to_string(), e.to_string()));
                if !e.is_retryable() && !matches!(e, ShipperError::Fenced { .. }) {
                    st.fail(&e, now, error_backoff_ms);
                }
            }
            self.partitions.insert(st.tp.clone(), st);
        }
    }

    /// Sweeps every partition now, whatever the schedule (`shipper once`,
    /// tests). Returns the number of objects deleted.
    pub async fn sweep_now(&mut self) -> u64 {
        let now = self.clock.now_ms();
        let mut report = CycleReport::default();
        self.sweep(now, true, &mut report).await
    }

    /// One pass of pack garbage collection now, whatever the schedule
    /// (`shipper once`, tests): the packs no latest version names and
    /// that passes saw so for `delete_grace` are deleted. `None` with
    /// `delete_grace = never`.
    pub async fn collect_packs_now(
        &mut self,
    ) -> Option<Result<crate::pack_gc::PackGcReport, ShipperError>> {
        self.opts.delete_grace?;
        let now = self.clock.now_ms();
        let mut report = CycleReport::default();
        Some(self.collect_packs_at(now, &mut report).await)
    }

    async fn collect_packs_at(
        &mut self,
        now: i64,
        report: &mut CycleReport,
    ) -> Result<crate::pack_gc::PackGcReport, ShipperError> {
        let grace = self.opts.delete_grace.unwrap_or_default();
        let r = self
            .pack_gc
            .run(&self.store, &self.partitions, now, grace.as_millis() as i64)
            .await;
        match &r {
            Ok(r) => {
                self.metrics.deleted_packs.inc_by(r.deleted);
            }
            Err(e) => {
                tracing::warn!(error = %e, "pack gc pass failed; deleting nothing until the next");
                self.metrics.error(e.kind());
                report.errors.push(("-".into(), e.to_string()));
            }
        }
        r
    }

    /// Sweeps the partitions due (all with `force`); `delete_grace =
    /// never` sweeps none.
    async fn sweep(&mut self, now: i64, force: bool, report: &mut CycleReport) -> u64 {
        let Some(grace) = self.opts.delete_grace else {
            return 0;
        };
        let policy = SweepPolicy {
            grace_ms: grace.as_millis() as i64,
            interval_ms: self.opts.sweep_interval.as_millis() as i64,
            on_start: self.opts.sweep_on_start,
            started_ms: self.started_ms,
        };
        // With deltas, the newest head (one GET past the one known, and
        // one of it) shows versions no manifest object does.
        let newest = if self.opts.head_deltas
            && self
                .partitions
                .values()
                .any(|st| sweep::is_due(st, &policy, now, force))
        {
            match self.store.latest_head(self.feed.seq()).await {
                Ok(h) => h,
                Err(e) => {
                    let e = ShipperError::store("-", e);
                    tracing::warn!(error = %e, "cannot read the newest head before sweeping; sweeping later");
                    report.errors.push(("-".into(), e.to_string()));
                    return 0;
                }
            }
        } else {
            None
        };
        // A newer version made by deltas exists only in a head: this writer
        // is not the latest one's, so it reads the partition again and
        // does not sweep it.
        if let Some(h) = &newest {
            for st in self.partitions.values_mut() {
                let newer = h
                    .partitions
                    .get(&st.tp.to_string())
                    .zip(st.manifest.as_ref())
                    .is_some_and(|(e, m)| {
                        e.topic_id == m.topic_id && e.manifest_version > m.version
                    });
                if newer {
                    st.reset();
                }
            }
        }
        let (deleted, errors) = sweep::sweep_due(
            &self.store,
            &self.pages,
            &mut self.partitions,
            &policy,
            now,
            force,
            &self.metrics,
        )
        .await;
        report.errors.extend(errors);
        deleted
    }

    fn cluster_error(&self, report: &mut CycleReport, e: ShipperError) {
        tracing::warn!(error = %e, "bucket unavailable; retrying next cycle");
        self.metrics.error(e.kind());
        report.errors.push(("-".into(), e.to_string()));
    }

    async fn load_manifests(
        &mut self,
        views: &BTreeMap<TopicPartition, SourceView>,
        report: &mut CycleReport,
    ) {
        let mut wanted: Vec<(
            TopicPartition,
            PartitionKey,
            Option<manifest::feed::HeadEntry>,
        )> = Vec::new();
        let mut pages: Vec<String> = Vec::new();
        for tp in views.keys() {
            let Some(st) = self.partitions.get_mut(tp) else {
                continue;
            };
            if st.health != Health::Ok {
                continue;
            }
            pages.append(&mut st.pages_to_load);
            if st.loaded {
                continue;
            }
            let Some(pk) = st.pk.clone() else { continue };
            wanted.push((tp.clone(), pk, None));
        }
        // With deltas, the newest head names versions no object shows:
        // read it before loading (another writer may have moved them).
        if self.opts.head_deltas
            && !wanted.is_empty()
            && let Err(e) = self.feed.refresh(&self.store).await
        {
            // Loaded from the head last seen: a delta after a stale
            // version is refused by the next head, and read again.
            tracing::warn!(error = %e, "cannot read the newest head before loading partitions");
            report.errors.push(("-".into(), e.to_string()));
        }
        for (tp, pk, entry) in &mut wanted {
            *entry = self.feed.entry(tp, pk);
        }
        let store = &self.store;
        let loaded: Vec<_> =
            futures::stream::iter(wanted.into_iter().map(|(tp, pk, entry)| async move {
                let r = match &entry {
                    Some(e) => store.latest_from(&pk, e).await,
                    None => store.latest_manifest(&pk, None).await,
                };
                (tp, r)
            }))
            .buffer_unordered(self.opts.upload_concurrency)
            .collect()
            .await;
        for (tp, r) in loaded {
            let Some(st) = self.partitions.get_mut(&tp) else {
                continue;
            };
            match r {
                Ok(m) => {
                    if let Some(m) = &m
                        && m.writer != self.opts.shipper_id
                    {
                        tracing::info!(partition = %tp, version = m.version, writer = %m.writer, shipped_end = m.shipped_end_offset, "continuing from the latest manifest");
                    }
                    st.manifest = m;
                    st.loaded = true;
                    st.cursor = None;
                    if self.opts.sweep_on_start && st.last_sweep_ms.is_none() {
                        st.dirty = true;
                    }
                }
                Err(e) => {
                    let e = ShipperError::store(tp.to_string(), e);
                    tracing::warn!(partition = %tp, error = %e, "cannot read the latest manifest; retrying next cycle");
                    self.metrics.error(e.kind());
                    report.errors.push((tp.to_string(), e.to_string()));
                }
            }
        }
        for key in pages {
            if let Err(e) = load_page(store, &self.pages, &key).await {
                tracing::warn!(key, error = %e, "cannot read a sealed page; retrying next cycle");
            }
        }
    }

    fn update_metrics(&mut self, now: i64, took: Duration) {
        let m = &self.metrics;
        m.cycles.inc();
        m.last_cycle_seconds.set(took.as_secs_f64());
        m.partitions.clear();
        m.roles.clear();
        for st in self.partitions.values_mut() {
            if st.hw <= st.shipped_end() {
                st.caught_up_at_ms = now;
            }
            m.partitions
                .get_or_create(&vec![("state", st.health.name().to_string())])
                .inc();
            if let Some(role) = &st.role {
                m.roles
                    .get_or_create(&vec![("role", role.name().to_string())])
                    .inc();
            }
            let labels = Metrics::partition_labels(&st.tp.topic, st.tp.partition);
            if matches!(st.health, Health::Standby { .. }) {
                // Another replica's shipper reports this partition's lag.
                for family in [&m.shipped_end, &m.source_hw, &m.lag_offsets, &m.lag_bytes] {
                    family.remove(&labels);
                }
                m.lag_seconds.remove(&labels);
                continue;
            }
            let end = st.shipped_end();
            m.shipped_end.get_or_create(&labels).set(end);
            m.source_hw.get_or_create(&labels).set(st.hw);
            m.lag_offsets
                .get_or_create(&labels)
                .set((st.hw - end).max(0));
            m.lag_bytes.get_or_create(&labels).set(st.lag_bytes as i64);
            let lag_s = if st.hw > end {
                (now - st.caught_up_at_ms).max(0) as f64 / 1000.0
            } else {
                0.0
            };
            m.lag_seconds.get_or_create(&labels).set(lag_s);
            if let Some(manifest) = &st.manifest {
                m.set_gaps(&labels, &manifest.gaps);
            }
        }
        m.sync_requests();
    }
}

/// Logs a partition's change of role: taking over, handing over, and the
/// untrusted-metadata alarm (once, when it starts).
fn log_role_change(tp: &TopicPartition, old: Option<&Role>, new: Option<&Role>) {
    let (old_leads, new_leads) = (old.is_some_and(Role::leads), new.is_some_and(Role::leads));
    match new {
        Some(r @ Role::Untrusted { .. }) if !matches!(old, Some(Role::Untrusted { .. })) => {
            tracing::warn!(partition = %tp, role = %r.describe(), "untrusted KRaft metadata: this partition is shipped as without metadata");
        }
        Some(r) if new_leads && !old_leads => {
            tracing::info!(partition = %tp, role = %r.describe(), "this broker ships the partition now: continuing from the latest manifest");
        }
        Some(r) if old_leads && !r.ships() => {
            tracing::info!(partition = %tp, role = %r.describe(), "this broker no longer ships the partition");
        }
        _ => {}
    }
}

/// Most bytes in one pack: a cycle's small ranges beyond it go into more
/// packs (each read whole into memory before its PUT).
const PACK_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// `items` in order, cut into runs of at most [`PACK_MAX_BYTES`] (an item
/// larger than that is a run alone).
fn pack_chunks<T>(items: &[T], bytes: impl Fn(&T) -> u64) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut total) = (0, 0u64);
    for (i, item) in items.iter().enumerate() {
        let b = bytes(item);
        if i > start && total + b > PACK_MAX_BYTES {
            out.push(&items[start..i]);
            (start, total) = (i, 0);
        }
        total += b;
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

/// Writes the versions of this cycle's deferred commits that start
/// their chains again (`Deferred::rebase`) into one object, a manifest
/// pack under a fresh pack key (create-if-absent), and points each
/// one's head entry at its bytes. When the write fails, those
/// partitions fail this cycle (their next cycle plans again from what
/// they hold); nothing names the object then, and pack gc deletes it.
async fn write_manifest_pack(
    store: &ManifestStore,
    outcomes: &mut [(ShipperSlot, bool, CommitOutcome)],
) {
    let mut bytes: Vec<u8> = Vec::new();
    let mut at: Vec<(usize, u64, u64)> = Vec::new();
    let mut failed: Vec<(usize, ShipperError)> = Vec::new();
    for (i, (st, _, o)) in outcomes.iter().enumerate() {
        let CommitOutcome::Deferred(d) = o else {
            continue;
        };
        if !d.rebase {
            continue;
        }
        match d.encoded() {
            Ok(m) => {
                at.push((i, bytes.len() as u64, m.len() as u64));
                bytes.extend_from_slice(&m);
            }
            Err(e) => failed.push((
                i,
                ShipperError::Inconsistent {
                    tp: st.tp.clone(),
                    reason: format!("its next version does not encode: {e}"),
                },
            )),
        }
    }
    if !at.is_empty() {
        let layout = store.layout();
        let tp = outcomes[at[0].0].0.tp.clone();
        let written = match layout.pack_key(&bucket::upload_id::fresh_string()) {
            Ok(key) => crate::upload::put_own(store, &tp, &key, vec![bytes::Bytes::from(bytes)])
                .await
                .map(|()| key)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match written {
            Ok(key) => {
                tracing::debug!(key, versions = at.len(), "manifest pack written");
                for &(i, offset, len) in &at {
                    if let CommitOutcome::Deferred(d) = &mut outcomes[i].2 {
                        d.rebase_at(manifest::feed::ManifestSlice {
                            key: key.clone(),
                            offset,
                            bytes: len,
                        });
                    }
                }
            }
            Err(e) => failed.extend(at.iter().map(|&(i, _, _)| {
                (
                    i,
                    ShipperError::Inconsistent {
                        tp: outcomes[i].0.tp.clone(),
                        reason: format!("the manifest pack of its next version: {e}"),
                    },
                )
            })),
        }
    }
    for (i, e) in failed {
        let (st, _, o) = &mut outcomes[i];
        st.reset();
        *o = CommitOutcome::Failed(e);
    }
}

#[cfg(test)]
mod pack_chunk_tests {
    use super::{PACK_MAX_BYTES, pack_chunks};

    /// One row per case: the sizes and the chunk lengths.
    #[test]
    fn packs_are_cut_at_the_size_bound() {
        let m = PACK_MAX_BYTES;
        let rows: &[(&str, &[u64], &[usize])] = &[
            ("nothing", &[], &[]),
            ("all fit", &[1, 2, 3], &[3]),
            ("exactly the bound", &[m / 2, m / 2], &[2]),
            ("one over", &[m / 2, m / 2, 1], &[2, 1]),
            (
                "one larger than the bound alone",
                &[1, m + 1, 1],
                &[1, 1, 1],
            ),
        ];
        for (name, sizes, expected) in rows {
            let got: Vec<usize> = pack_chunks(sizes, |b| *b).iter().map(|c| c.len()).collect();
            assert_eq!(&got, expected, "{name}");
        }
    }
}
