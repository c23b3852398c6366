//! The ship cycle over every partition, the change feed, and the sweep of
//! unreferenced objects. See the crate docs for the semantics.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use kafkalog::TopicPartition;
use manifest::feed::{Head, HeadEntry};
use manifest::layout::{ClusterLayout, PartitionKey, new_upload_id};
use manifest::partition::{Page, PartitionManifest, ShippedRange};
use manifest::store::{ManifestStore, StoreError};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

use crate::chunks::ChunkPool;
use crate::clock::{Clock, SystemClock};
use crate::config::ShipperOptions;
use crate::edit::{self, Dropped};
use crate::error::ShipperError;
use crate::metrics::Metrics;
use crate::partition::{
    DecideCtx, Health, PageCache, PartitionState, Work, cache_page, cached_page,
};
use crate::plan::RangePlan;
use crate::source::{self, RootCheckpoints, SourceView};
use crate::upload::{RateLimiter, Uploaded, upload_range};

/// What one cycle (or several, summed) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Partitions known.
    pub partitions: usize,
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
        self.committed > 0 || self.heads > 0 || self.deleted_objects > 0
    }

    fn absorb(&mut self, r: CycleReport) {
        self.partitions = r.partitions;
        self.committed += r.committed;
        self.objects += r.objects;
        self.bytes += r.bytes;
        self.batches += r.batches;
        self.heads += r.heads;
        self.cuts += r.cuts;
        self.reshipped_segments += r.reshipped_segments;
        self.deleted_partitions += r.deleted_partitions;
        self.deleted_objects += r.deleted_objects;
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
    /// The error, or the other writer when fenced.
    pub detail: Option<String>,
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
}

/// Tails the source log dirs and ships to the bucket. See the crate docs.
#[derive(Debug)]
pub struct Shipper {
    opts: ShipperOptions,
    store: ManifestStore,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    limiter: Option<Arc<RateLimiter>>,
    /// The chunk buffers all uploads share (`crate::chunks`).
    chunks: Arc<ChunkPool>,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    head: Option<Head>,
    head_loaded: bool,
    pending_head: BTreeMap<String, HeadEntry>,
    pages: PageCache,
    started_ms: i64,
    down_roots: HashSet<PathBuf>,
}

enum Observation {
    View(Box<SourceView>),
    Missing,
    Unknown,
    Error(kafkalog::Error),
}

/// What one read of the log dirs found: each partition's observation,
/// and the log dirs that could not be read.
type Observed = (
    Vec<(TopicPartition, PathBuf, Observation)>,
    Vec<(PathBuf, String)>,
);

fn observe_all(opts: &ShipperOptions, known: Vec<(TopicPartition, PathBuf)>) -> Observed {
    let mut found: BTreeMap<TopicPartition, (PathBuf, Arc<RootCheckpoints>)> = BTreeMap::new();
    let mut up: HashSet<PathBuf> = HashSet::new();
    let mut problems = Vec::new();
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
        for tp in tps {
            if !opts.selects(&tp.topic) {
                continue;
            }
            if let Some((first, _)) = found.get(&tp) {
                problems.push((
                    root.clone(),
                    format!("{tp} is also in {}: shipping that one", first.display()),
                ));
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
        let obs = match source::observe(&root, &tp, &cps, opts.ship_beyond_hw) {
            Ok(Some(v)) => Observation::View(Box::new(v)),
            Ok(None) => Observation::Missing,
            Err(e) => Observation::Error(e),
        };
        out.push((tp, root, obs));
    }
    (out, problems)
}

fn shipped_range(plan: &RangePlan, up: &Uploaded) -> ShippedRange {
    ShippedRange {
        key: up.key.clone(),
        base_offset: plan.summary.base_offset,
        last_offset: plan.summary.last_offset,
        bytes: up.bytes,
        batches: plan.summary.batches,
        crc32c: up.crc32c,
        max_timestamp: plan.summary.max_timestamp,
        epochs: plan.summary.epochs.clone(),
        segment_base_offset: plan.segment_base,
        completes_segment: plan.completes_segment,
        segment_generation: plan.generation,
    }
}

/// What committing one partition's work came to.
#[derive(Debug, Default)]
struct CommitOutcome {
    committed: bool,
    objects: u64,
    bytes: u64,
    batches: u64,
    cut: bool,
    reshipped: usize,
    deleted: bool,
    fenced: Option<String>,
    error: Option<ShipperError>,
    backlog: bool,
}

/// Settings shared by the commits of one cycle.
struct CommitCtx<'a> {
    store: &'a ManifestStore,
    layout: &'a ClusterLayout,
    shipper_id: &'a str,
    cluster_id: &'a str,
    now_ms: i64,
    fence_backoff_ms: i64,
    pages: &'a PageCache,
}

async fn load_page(
    store: &ManifestStore,
    pages: &PageCache,
    key: &str,
) -> Result<Arc<Vec<ShippedRange>>, StoreError> {
    if let Some(p) = cached_page(pages, key) {
        return Ok(p);
    }
    let page = store.get_page(key).await?;
    let ranges = Arc::new(page.ranges);
    cache_page(pages, key.to_string(), Arc::clone(&ranges));
    Ok(ranges)
}

/// Writes a sealed page. Pages are named by the offsets they cover, so a
/// page that no version references (dropped by a cut, or written for a
/// commit that failed) can hold the name with other ranges: it is
/// replaced, but only when the latest version is still `base` (so no other
/// writer committed a version that might name it) and `base` does not name
/// it; otherwise the commit is given up as lost.
async fn write_page(
    store: &ManifestStore,
    pk: &PartitionKey,
    base: Option<&PartitionManifest>,
    key: &str,
    page: &Page,
) -> Result<(), StoreError> {
    match store.put_page(key, page).await {
        Err(StoreError::Conflict { key: k }) => {
            let latest = store.latest_manifest(pk, base.map(|b| b.version)).await?;
            let unchanged = latest.as_ref().map(|m| m.version) == base.map(|b| b.version);
            let named = latest
                .as_ref()
                .is_some_and(|m| m.pages.iter().any(|p| p.key == key));
            if !unchanged || named {
                return Err(StoreError::Conflict { key: k });
            }
            tracing::warn!(
                key,
                "replacing a sealed page that no version names (left by a cut or a failed commit)"
            );
            let bytes = page.encode().map_err(|source| StoreError::Format {
                key: key.to_string(),
                source,
            })?;
            store
                .object_store()
                .put_opts(
                    &ObjectPath::from(key),
                    PutPayload::from_bytes(Bytes::from(bytes)),
                    PutOptions::from(PutMode::Overwrite),
                )
                .await
                .map(|_| ())
                .map_err(|source| StoreError::Store {
                    op: "put",
                    key: key.to_string(),
                    source,
                })
        }
        other => other,
    }
}

async fn commit_one(
    ctx: &CommitCtx<'_>,
    st: &mut PartitionState,
    work: Work,
    results: Vec<Result<Uploaded, ShipperError>>,
) -> CommitOutcome {
    let mut out = CommitOutcome {
        backlog: work.capped || work.cut.is_some(),
        ..CommitOutcome::default()
    };
    let Some(pk) = st.pk.clone() else {
        return out;
    };
    let store_err = |source: StoreError| ShipperError::store(st.tp.to_string(), source);
    let base = st.manifest.clone();
    let mut m = base.clone().unwrap_or_else(|| {
        let mut m = PartitionManifest::new(ctx.cluster_id, &st.tp, pk.topic_id);
        m.log_start_offset = work.log_start;
        m.shipped_end_offset = work.log_start;
        m
    });
    let mut dropped = Dropped::default();
    let mut orphans: Vec<String> = Vec::new();
    let mut reship_fps = Vec::new();
    let mut pushed = 0usize;
    let mut sealed: Vec<(String, Page)> = Vec::new();
    if work.mark_deleted {
        m.deleted = true;
    } else {
        m.deleted = false;
        if let Some(point) = work.cut {
            for p in m.pages.iter().filter(|p| p.last_offset >= point) {
                if let Err(e) = load_page(ctx.store, ctx.pages, &p.key).await {
                    out.error = Some(store_err(e));
                    return out;
                }
            }
            let lookup = |k: &str| cached_page(ctx.pages, k);
            match edit::cut(&mut m, point, &lookup) {
                Ok(d) => dropped.extend(d),
                Err(key) => {
                    out.error = Some(ShipperError::Inconsistent {
                        tp: st.tp.clone(),
                        reason: format!("page {key} could not be read for the cut"),
                    });
                    return out;
                }
            }
            out.cut = true;
        }
        if work.log_start > m.log_start_offset {
            for p in m.pages.iter().filter(|p| p.last_offset < work.log_start) {
                // Best effort: only to delete the page's ranges on time.
                let _ = load_page(ctx.store, ctx.pages, &p.key).await;
            }
            let lookup = |k: &str| cached_page(ctx.pages, k);
            dropped.extend(edit::raise_log_start(&mut m, work.log_start, &lookup));
        }
        let mut results = results.into_iter();
        for rs in &work.reships {
            let mine: Vec<_> = results.by_ref().take(rs.ranges.len()).collect();
            if mine.iter().all(|r| r.is_ok()) {
                let new: Vec<ShippedRange> = rs
                    .ranges
                    .iter()
                    .zip(mine.iter())
                    .filter_map(|(p, r)| r.as_ref().ok().map(|u| shipped_range(p, u)))
                    .collect();
                let keys: Vec<String> = new.iter().map(|r| r.key.clone()).collect();
                match edit::replace_segment(&mut m, rs.lo, rs.hi, new) {
                    Ok(d) => {
                        dropped.extend(d);
                        reship_fps.push((rs.lo, rs.fp));
                        out.reshipped += 1;
                        out.objects += keys.len() as u64;
                        out.bytes += rs.ranges.iter().map(RangePlan::bytes).sum::<u64>();
                        out.batches += rs
                            .ranges
                            .iter()
                            .map(|p| u64::from(p.summary.batches))
                            .sum::<u64>();
                    }
                    Err(reason) => {
                        tracing::warn!(partition = %st.tp, segment = rs.lo, %reason, "a compacted segment was shipped again but cannot replace its ranges");
                        reship_fps.push((rs.lo, rs.fp));
                        orphans.extend(keys);
                    }
                }
            } else {
                for r in mine {
                    match r {
                        Ok(u) => orphans.push(u.key),
                        Err(e) => {
                            if out.error.is_none() {
                                out.error = Some(e);
                            }
                        }
                    }
                }
            }
        }
        let mut failed = false;
        for (plan, r) in work.ranges.iter().zip(results) {
            match r {
                Ok(u) if !failed => {
                    let range = shipped_range(plan, &u);
                    if let Some(s) = m.push_range(range, |a, b| ctx.layout.page_key(&pk, a, b)) {
                        sealed.push(s);
                    }
                    pushed += 1;
                    out.objects += 1;
                    out.bytes += u.bytes;
                    out.batches += u64::from(plan.summary.batches);
                }
                Ok(u) => orphans.push(u.key),
                Err(e) => {
                    failed = true;
                    if out.error.is_none() {
                        out.error = Some(e);
                    }
                }
            }
        }
        let shipped_epochs = work.ranges[..pushed]
            .iter()
            .flat_map(|p| p.summary.epochs.entries().iter().copied());
        m.lineage = edit::lineage(
            &work.source_epochs,
            &m.lineage,
            shipped_epochs,
            m.shipped_end_offset,
        );
        if let Some(o) = &work.origin {
            m.mirror_origin = o.clone();
        }
        m.source_high_watermark = work.hw.max(0);
    }
    if !orphans.is_empty() {
        st.dirty = true;
        for k in &orphans {
            st.dropped.insert(k.clone(), ctx.now_ms);
        }
    }
    m.writer = ctx.shipper_id.to_string();
    m.committed_at_ms = ctx.now_ms;
    if let Some(b) = &base {
        let mut probe = m.clone();
        probe.source_high_watermark = b.source_high_watermark;
        probe.writer = b.writer.clone();
        if edit::same_content(b, &probe) && !work.mark_deleted {
            // Nothing new made it (every upload failed).
            return out;
        }
    }
    m.version = base.as_ref().map_or(1, |b| b.version + 1);
    if let Err(e) = m.validate() {
        out.error = Some(ShipperError::Inconsistent {
            tp: st.tp.clone(),
            reason: e.to_string(),
        });
        return out;
    }
    for (key, page) in &sealed {
        if let Err(e) = write_page(ctx.store, &pk, base.as_ref(), key, page).await {
            st.dirty = true;
            out.error = Some(store_err(e));
            return out;
        }
        cache_page(ctx.pages, key.clone(), Arc::new(page.ranges.clone()));
    }
    match ctx.store.commit_manifest(&m).await {
        Ok(()) => {}
        Err(StoreError::Conflict { .. }) => {
            match ctx.store.get_manifest(&pk, m.version).await {
                Ok(w) if w.writer == ctx.shipper_id && edit::same_content(&w, &m) => {
                    // Our own earlier attempt (a retried request) won.
                    m = w;
                }
                Ok(w) if w.writer == ctx.shipper_id => {
                    // Committed under our id: an earlier commit of ours whose
                    // answer was lost (or a second process misconfigured
                    // with our id). Adopt it and find our position again.
                    tracing::warn!(
                        partition = %st.tp,
                        version = w.version,
                        writer = %w.writer,
                        "this version was committed under this shipper's id by an earlier attempt (or another process with the same id): continuing from it"
                    );
                    for k in work.jobs_keys_uploaded(&m, base.as_ref()) {
                        st.dropped.insert(k, ctx.now_ms);
                    }
                    st.manifest = Some(w);
                    st.cursor = None;
                    st.mark = None;
                    st.lineage_ok = None;
                    st.dirty = true;
                    out.backlog = true;
                    return out;
                }
                Ok(w) => {
                    tracing::warn!(
                        partition = %st.tp,
                        version = m.version,
                        other_writer = %w.writer,
                        backoff_s = ctx.fence_backoff_ms / 1000,
                        "another shipper committed this partition's manifest version first: backing off, never overwriting"
                    );
                    for k in work.jobs_keys_uploaded(&m, base.as_ref()) {
                        st.dropped.insert(k, ctx.now_ms);
                    }
                    st.health = Health::Fenced {
                        writer: w.writer.clone(),
                        until_ms: ctx.now_ms + ctx.fence_backoff_ms,
                    };
                    st.reset();
                    st.dirty = true;
                    out.fenced = Some(w.writer);
                    out.backlog = false;
                    return out;
                }
                Err(e) => {
                    st.dirty = true;
                    out.error = Some(store_err(e));
                    return out;
                }
            }
        }
        Err(e) => {
            st.dirty = true;
            out.error = Some(store_err(e));
            return out;
        }
    }
    // Committed.
    out.committed = true;
    out.deleted = m.deleted;
    if work.cut.is_some() {
        st.cursor = None;
        st.mark = None;
    } else if pushed == work.ranges.len() {
        st.cursor = work.cursor_after.or(st.cursor);
        st.mark = work.mark_after.or(st.mark);
    } else if pushed > 0 {
        let last = &work.ranges[pushed - 1];
        st.cursor = Some(last.end_cursor);
        st.mark = Some(last.last_mark);
    }
    if let Some(c) = st.cursor {
        st.cursor_fp = work.seg_fps.get(&c.segment).copied();
    }
    st.confirm_segments(&work);
    for (base, fp) in reship_fps {
        st.confirmed.insert(base, fp);
    }
    for k in dropped.data.into_iter().chain(dropped.pages) {
        st.dropped.insert(k, ctx.now_ms);
        st.dirty = true;
    }
    if m.deleted {
        st.health = Health::Deleted;
    }
    let planned: u64 = work.planned_bytes;
    st.lag_bytes = planned.saturating_sub(out.bytes);
    st.hw = work.hw;
    if m.shipped_end_offset >= work.hw {
        st.caught_up_at_ms = ctx.now_ms;
    }
    st.manifest = Some(m);
    st.loaded = true;
    out
}

impl Shipper {
    /// A shipper over `store` (built from the bucket URL in production:
    /// [`manifest::bucket::BucketUrl::build`]; a
    /// [`manifest::counting::CountingStore`] to count requests). Keys go
    /// under `opts.bucket_prefix`.
    pub fn new(opts: ShipperOptions, store: Arc<dyn ObjectStore>) -> Result<Shipper, ShipperError> {
        let layout = ClusterLayout::new(&opts.bucket_prefix, &opts.cluster_id)
            .map_err(|e| ShipperError::store("-", StoreError::Layout(e)))?;
        let limiter = opts
            .rate_limit
            .map(|r| Arc::new(RateLimiter::new(r, opts.part_size)));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let started_ms = clock.now_ms();
        Ok(Shipper {
            store: ManifestStore::new(store, layout),
            clock,
            metrics: Arc::new(Metrics::new(None)),
            limiter,
            chunks: ChunkPool::for_uploads(
                opts.upload_concurrency,
                crate::upload::CHANNEL,
                opts.part_size,
            ),
            partitions: BTreeMap::new(),
            head: None,
            head_loaded: false,
            pending_head: BTreeMap::new(),
            pages: PageCache::default(),
            started_ms,
            down_roots: HashSet::new(),
            opts,
        })
    }

    /// Uses `clock` instead of the system clock (tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Shipper {
        self.started_ms = clock.now_ms();
        self.clock = clock;
        self
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
                        _ => None,
                    },
                    manifest_version: m.map(|m| m.version),
                    writer: m.map(|m| m.writer.clone()),
                    shipped_end_offset: end,
                    source_high_watermark: st.hw,
                    lag_offsets: (st.hw - end).max(0),
                    lag_bytes: st.lag_bytes,
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

    /// Runs cycles every tail interval (at once while there is a backlog)
    /// until `stop` completes; the cycle in progress finishes first.
    pub async fn run(&mut self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            let r = self.run_cycle().await;
            let pause = if r.backlog {
                Duration::ZERO
            } else {
                self.opts.tail_interval
            };
            tokio::select! {
                biased;
                _ = &mut stop => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
        tracing::info!("shipper stopped");
    }

    /// One cycle: discover and read the source, ship what is new, commit
    /// one manifest version per changed partition, publish one head, sweep
    /// the partitions that are due. An idle cycle makes no request.
    pub async fn run_cycle(&mut self) -> CycleReport {
        let started = Instant::now();
        let now = self.clock.now_ms();
        let mut report = CycleReport::default();
        if !self.head_loaded {
            match self.store.latest_head(None).await {
                Ok(h) => {
                    self.head = h;
                    self.head_loaded = true;
                }
                Err(e) => self.cluster_error(&mut report, ShipperError::store("-", e)),
            }
        }

        // 1. Discover and read the source (local files only).
        let known: Vec<(TopicPartition, PathBuf)> = self
            .partitions
            .iter()
            .filter(|(_, st)| st.health != Health::Deleted)
            .map(|(tp, st)| (tp.clone(), st.root.clone()))
            .collect();
        let opts = self.opts.clone();
        let (observed, problems) =
            match tokio::task::spawn_blocking(move || observe_all(&opts, known)).await {
                Ok(x) => x,
                Err(e) => {
                    report
                        .errors
                        .push(("-".into(), format!("reading the log dirs: {e}")));
                    return report;
                }
            };
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

        let mut views: BTreeMap<TopicPartition, SourceView> = BTreeMap::new();
        let mut deletions: Vec<TopicPartition> = Vec::new();
        let grace_ms = self.opts.partition_delete_grace.as_millis() as i64;
        for (tp, root, obs) in observed {
            let st = self
                .partitions
                .entry(tp.clone())
                .or_insert_with(|| PartitionState::new(tp.clone(), root.clone(), now));
            match obs {
                Observation::Unknown => {}
                Observation::Missing => {
                    let since = *st.missing_since_ms.get_or_insert(now);
                    if st.health == Health::Deleted {
                        continue;
                    }
                    st.health = Health::Missing;
                    let published_live = st.manifest.as_ref().is_some_and(|m| !m.deleted);
                    if now - since >= grace_ms && published_live {
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
                    if matches!(st.health, Health::Missing | Health::Deleted) {
                        st.health = Health::Ok;
                    }
                    let Some(topic_id) = v.topic_id else {
                        if !st.warned_no_topic_id {
                            tracing::warn!(partition = %tp, "no partition.metadata (topic id): not shipped until it appears (object keys need the topic id)");
                            st.warned_no_topic_id = true;
                        }
                        st.health = Health::NoTopicId;
                        continue;
                    };
                    if st.health == Health::NoTopicId {
                        st.health = Health::Ok;
                    }
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
                    match &st.health {
                        Health::Failed { retry_at_ms, .. } if now < *retry_at_ms => continue,
                        Health::Fenced { until_ms, .. } if now < *until_ms => continue,
                        Health::Failed { .. } | Health::Fenced { .. } => {
                            st.health = Health::Ok;
                            st.reset();
                        }
                        _ => {}
                    }
                    views.insert(tp, *v);
                }
            }
        }

        // 2. Read the latest manifests of partitions new to this process
        //    (or reset), and pages some decision needs.
        self.load_manifests(&views, &mut report).await;

        // 3. Decide (local files only).
        let ctx = DecideCtx {
            max_object: self.opts.max_object_size,
            max_cycle_bytes: self.opts.max_cycle_bytes,
            error_backoff_ms: self.opts.error_backoff.as_millis() as i64,
            pages: Arc::clone(&self.pages),
        };
        let mut batch: Vec<(PartitionState, SourceView)> = Vec::new();
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
                return report;
            }
        };
        let mut works: Vec<(PartitionState, Work)> = Vec::new();
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
        for tp in deletions {
            if let Some(st) = self.partitions.remove(&tp) {
                tracing::warn!(partition = %tp, "the partition dir has been gone for the grace period: publishing it as deleted");
                let w = Work {
                    mark_deleted: true,
                    ..Work::default()
                };
                works.push((st, w));
            }
        }

        // 4. Upload every planned range.
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
        let chunks = &self.chunks;
        let mut uploads = futures::stream::iter(jobs.into_iter().map(|(wi, ji, plan, tp, pk)| {
            let limiter = limiter.clone();
            async move {
                let key = store.layout().data_key(
                    &pk,
                    plan.summary.base_offset,
                    plan.summary.last_offset,
                    plan.summary.first_epoch,
                    &new_upload_id(),
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
                            chunks,
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

        // 5. Commit one manifest version per partition.
        let cctx = CommitCtx {
            store: &self.store,
            layout: self.store.layout(),
            shipper_id: &self.opts.shipper_id,
            cluster_id: &self.opts.cluster_id,
            now_ms: now,
            fence_backoff_ms: self.opts.fence_backoff.as_millis() as i64,
            pages: &self.pages,
        };
        let outcomes: Vec<(PartitionState, CommitOutcome)> =
            futures::stream::iter(works.into_iter().zip(results).map(|((mut st, w), rs)| {
                let cctx = &cctx;
                async move {
                    let rs: Vec<Result<Uploaded, ShipperError>> = rs
                        .into_iter()
                        .map(|r| {
                            r.unwrap_or_else(|| {
                                Err(ShipperError::Inconsistent {
                                    tp: st.tp.clone(),
                                    reason: "an upload did not run".into(),
                                })
                            })
                        })
                        .collect();
                    let o = commit_one(cctx, &mut st, w, rs).await;
                    (st, o)
                }
            }))
            .buffer_unordered(self.opts.upload_concurrency)
            .collect()
            .await;
        for (st, o) in outcomes {
            if o.committed {
                report.committed += 1;
                report.objects += o.objects;
                report.bytes += o.bytes;
                report.batches += o.batches;
                report.reshipped_segments += o.reshipped;
                self.metrics.manifest_commits.inc();
                self.metrics.shipped_objects.inc_by(o.objects);
                self.metrics.shipped_bytes.inc_by(o.bytes);
                self.metrics.shipped_batches.inc_by(o.batches);
                if o.cut {
                    report.cuts += 1;
                }
                if o.deleted {
                    report.deleted_partitions += 1;
                }
                if let Some(m) = &st.manifest {
                    let e = HeadEntry::for_manifest(m);
                    self.pending_head.insert(e.map_key(), e);
                }
            }
            report.backlog |= o.backlog;
            if let Some(w) = o.fenced {
                self.metrics.error("fenced");
                report.fenced.push((st.tp.clone(), w));
            }
            if let Some(e) = o.error {
                self.metrics.error(e.kind());
                report.errors.push((st.tp.to_string(), e.to_string()));
                if !e.is_retryable() && !matches!(e, ShipperError::Fenced { .. }) {
                    let mut st = st;
                    st.fail(&e, now, ctx.error_backoff_ms);
                    self.partitions.insert(st.tp.clone(), st);
                    continue;
                }
            }
            self.partitions.insert(st.tp.clone(), st);
        }

        // 6. One head for everything committed, and for any version this
        //    shipper holds that the feed does not name yet (adopted after a
        //    lost answer, or committed just before a crash).
        self.queue_unnamed_versions();
        if !self.pending_head.is_empty() {
            match self.publish_head().await {
                Ok(true) => {
                    report.heads += 1;
                    self.metrics.heads_published.inc();
                }
                Ok(false) => {}
                Err(e) => self.cluster_error(&mut report, e),
            }
        }

        // 7. Sweep the partitions that are due.
        report.deleted_objects += self.sweep_due(now, false, &mut report).await;

        report.partitions = self.partitions.len();
        self.update_metrics(now, started.elapsed());
        report
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
        let mut wanted: Vec<(TopicPartition, PartitionKey, Option<u64>)> = Vec::new();
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
            let known = self
                .head
                .as_ref()
                .and_then(|h| h.partitions.get(&tp.to_string()))
                .filter(|e| e.topic_id == pk.topic_id)
                .map(|e| e.manifest_version);
            wanted.push((tp.clone(), pk, known));
        }
        let store = &self.store;
        let loaded: Vec<_> =
            futures::stream::iter(wanted.into_iter().map(|(tp, pk, known)| async move {
                let r = store.latest_manifest(&pk, known).await;
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

    /// Queues a head entry for every manifest version held that the last
    /// head seen does not name (memory only: no request).
    fn queue_unnamed_versions(&mut self) {
        for st in self.partitions.values() {
            let Some(m) = &st.manifest else { continue };
            let e = HeadEntry::for_manifest(m);
            let named = |h: Option<&HeadEntry>| {
                h.is_some_and(|h| {
                    h.topic_id == e.topic_id && h.manifest_version >= e.manifest_version
                })
            };
            let key = e.map_key();
            if named(self.head.as_ref().and_then(|h| h.partitions.get(&key)))
                || named(self.pending_head.get(&key))
            {
                continue;
            }
            self.pending_head.insert(key, e);
        }
    }

    /// Publishes one head with the entries committed since the last one,
    /// through [`ManifestStore::publish_head`] (a probe and a read of the
    /// newest head, then a create-if-absent write; re-read and merged on a
    /// lost race; old heads pruned).
    async fn publish_head(&mut self) -> Result<bool, ShipperError> {
        let entries: Vec<HeadEntry> = self.pending_head.values().cloned().collect();
        let known = self.head.as_ref().map(|h| h.seq);
        let h = self
            .store
            .publish_head(known, &self.opts.shipper_id, &entries)
            .await
            .map_err(|e| ShipperError::store("-", e))?;
        let published = known != Some(h.seq);
        self.head = Some(h);
        self.pending_head.clear();
        Ok(published)
    }

    /// Sweeps every partition now, whatever the schedule (`shipper once`,
    /// tests). Returns the number of objects deleted.
    pub async fn sweep_now(&mut self) -> u64 {
        let now = self.clock.now_ms();
        let mut report = CycleReport::default();
        self.sweep_due(now, true, &mut report).await
    }

    async fn sweep_due(&mut self, now: i64, force: bool, report: &mut CycleReport) -> u64 {
        let Some(grace) = self.opts.delete_grace else {
            return 0;
        };
        let grace_ms = grace.as_millis() as i64;
        let interval_ms = self.opts.sweep_interval.as_millis() as i64;
        let due: Vec<TopicPartition> = self
            .partitions
            .values()
            .filter(|st| st.health == Health::Ok && st.loaded && st.manifest.is_some())
            .filter(|st| {
                force
                    || (st.dirty
                        && (st.last_sweep_ms.is_none() && self.opts.sweep_on_start
                            || now - st.last_sweep_ms.unwrap_or(self.started_ms) >= interval_ms))
            })
            .map(|st| st.tp.clone())
            .collect();
        let mut deleted = 0;
        for tp in due {
            let Some(mut st) = self.partitions.remove(&tp) else {
                continue;
            };
            match sweep_partition(&self.store, &self.pages, &mut st, now, grace_ms).await {
                Ok(n) => {
                    deleted += n;
                    self.metrics.deleted_objects.inc_by(n);
                }
                Err(e) => {
                    tracing::warn!(partition = %tp, error = %e, "sweep failed; retrying later");
                    self.metrics.error(e.kind());
                    report.errors.push((tp.to_string(), e.to_string()));
                }
            }
            self.partitions.insert(tp, st);
        }
        deleted
    }

    fn update_metrics(&mut self, now: i64, took: Duration) {
        let m = &self.metrics;
        m.cycles.inc();
        m.last_cycle_seconds.set(took.as_secs_f64());
        m.partitions.clear();
        for st in self.partitions.values_mut() {
            if st.hw <= st.shipped_end() {
                st.caught_up_at_ms = now;
            }
            m.partitions
                .get_or_create(&vec![("state", st.health.name().to_string())])
                .inc();
            let labels = Metrics::partition_labels(&st.tp.topic, st.tp.partition);
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
        }
        m.sync_requests();
    }
}

/// The upload time in a data key's upload id (11 hex digits of ms).
fn upload_time_ms(layout: &ClusterLayout, pk: &PartitionKey, key: &str) -> Option<i64> {
    let name = layout.parse_data_key(pk, key).ok()?;
    i64::from_str_radix(name.upload_id.get(..11)?, 16).ok()
}

/// True when `key` is a page key of `pk` (as `layout` formats them).
fn is_page_key(layout: &ClusterLayout, pk: &PartitionKey, key: &str) -> bool {
    let Some(name) = key.rsplit('/').next().and_then(|n| n.strip_suffix(".json")) else {
        return false;
    };
    let Some((a, b)) = name.split_once('-') else {
        return false;
    };
    match (a.parse::<i64>(), b.parse::<i64>()) {
        (Ok(a), Ok(b)) => layout.page_key(pk, a, b) == key,
        _ => false,
    }
}

/// Deletes the partition's objects that its latest manifest (and pages)
/// do not reference and that have been unreferenced (or, for objects this
/// process did not see dropped, uploaded) for the grace period.
async fn sweep_partition(
    store: &ManifestStore,
    pages: &PageCache,
    st: &mut PartitionState,
    now: i64,
    grace_ms: i64,
) -> Result<u64, ShipperError> {
    let (Some(pk), Some(m)) = (st.pk.clone(), st.manifest.clone()) else {
        return Ok(0);
    };
    let store_err = |source: StoreError| ShipperError::store(pk.tp.to_string(), source);
    // Only the writer of the latest version sweeps.
    match store.get_manifest(&pk, m.version + 1).await {
        Err(StoreError::NotFound { .. }) => {}
        Ok(_) => {
            st.reset();
            return Ok(0);
        }
        Err(e) => return Err(store_err(e)),
    }
    let layout = store.layout();
    let mut referenced: HashSet<String> = m.ranges.iter().map(|r| r.key.clone()).collect();
    for p in &m.pages {
        referenced.insert(p.key.clone());
        let ranges = load_page(store, pages, &p.key).await.map_err(store_err)?;
        referenced.extend(ranges.iter().map(|r| r.key.clone()));
    }
    let mut listed = Vec::new();
    for dir in [
        layout.data_dir(&pk),
        format!("{}/pages", layout.partition_dir(&pk)),
    ] {
        let prefix = ObjectPath::from(dir.as_str());
        let metas: Vec<object_store::ObjectMeta> = store
            .object_store()
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|source| {
                store_err(StoreError::Store {
                    op: "list",
                    key: dir.clone(),
                    source,
                })
            })?;
        listed.extend(metas);
    }
    let mut to_delete = Vec::new();
    let mut remaining = false;
    let mut present = HashSet::new();
    for meta in &listed {
        let key = meta.location.to_string();
        present.insert(key.clone());
        if referenced.contains(&key) {
            continue;
        }
        let ours = layout.parse_data_key(&pk, &key).is_ok() || is_page_key(layout, &pk, &key);
        if !ours {
            continue;
        }
        let since = st
            .dropped
            .get(&key)
            .copied()
            .or_else(|| upload_time_ms(layout, &pk, &key))
            .unwrap_or_else(|| meta.last_modified.timestamp_millis());
        if now - since >= grace_ms {
            to_delete.push(key);
        } else {
            remaining = true;
        }
    }
    let mut deleted = 0u64;
    if !to_delete.is_empty() {
        let owned: Vec<ObjectPath> = to_delete
            .iter()
            .map(|k| ObjectPath::from(k.as_str()))
            .collect();
        let paths = futures::stream::iter(owned.into_iter().map(Ok)).boxed();
        let results: Vec<_> = store.object_store().delete_stream(paths).collect().await;
        for r in results {
            match r {
                Ok(p) => {
                    deleted += 1;
                    present.remove(&p.to_string());
                    tracing::debug!(partition = %pk.tp, key = %p, "deleted an unreferenced object");
                }
                Err(object_store::Error::NotFound { path, .. }) => {
                    present.remove(&path);
                }
                Err(e) => {
                    remaining = true;
                    tracing::warn!(partition = %pk.tp, error = %e, "could not delete an unreferenced object");
                }
            }
        }
    }
    if deleted > 0 {
        tracing::info!(partition = %pk.tp, deleted, "deleted unreferenced objects");
    }
    st.dropped
        .retain(|k, _| present.contains(k) && !referenced.contains(k));
    st.dirty = remaining;
    st.last_sweep_ms = Some(now);
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_the_sweep_may_delete() {
        let layout = ClusterLayout::new("p", "c").expect("layout");
        let pk = PartitionKey {
            tp: TopicPartition::new("t", 0).expect("tp"),
            topic_id: "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
        };
        let key = layout
            .data_key(
                &pk,
                0,
                9,
                1,
                &format!("{:011x}{:016x}", 1_700_000_000_123i64, 5),
            )
            .expect("key");
        assert_eq!(upload_time_ms(&layout, &pk, &key), Some(1_700_000_000_123));
        assert_eq!(upload_time_ms(&layout, &pk, "p/other"), None);
        assert!(is_page_key(&layout, &pk, &layout.page_key(&pk, 0, 99)));
        assert!(!is_page_key(
            &layout,
            &pk,
            &format!("{}/pages/notes.json", layout.partition_dir(&pk))
        ));
        assert!(!is_page_key(&layout, &pk, &key));
    }
}
