//! Committing one partition's cycle: the next manifest version is computed
//! by [`next_version`] (pure: the base version, the cycle's [`Shipment`] and
//! its upload results in, the version and what it no longer names out),
//! then written by [`commit`]: sealed pages first, the version last, each
//! create-if-absent. [`commit`] answers with a [`CommitOutcome`].
//!
//! Invariants:
//! - **nothing is overwritten**: pages are created under keys with a fresh
//!   upload id, versions under the next version number, both with
//!   create-if-absent (`ManifestStore::put_page`, `commit_manifest`);
//! - a version names only objects whose upload completed, and of the new
//!   tail ranges only those before the first that failed (ranges stay in
//!   offset order);
//! - a lost create, of a page or of the version, is a **lost commit**: the
//!   version at that number is read and judged ([`judge_winner`]): our own
//!   identical version is `Committed`, another version under our id is
//!   `Adopted` (the partition finds its position again from it), another
//!   writer's is `Fenced` (the partition backs off, never overwriting);
//! - the partition's read position and confirmed segments move only on
//!   `Committed`; keys a version stops naming are handed to the sweep with
//!   the time they were dropped;
//! - with `head_deltas`, a version that only appends to a held version the
//!   head names (`ChainPosition`, no page sealed) is not written here: it
//!   is `Deferred`, committed by the cycle's head (`Feed::commit_deltas`),
//!   and the partition moves only then ([`confirm_deferred`]). When its
//!   chain already has `MAX_CHAIN` deltas, the version starts it again:
//!   the cycle writes it into one manifest pack with every other such
//!   version, before the head that names it (`Deferred::rebase`).

use std::sync::Arc;

use bucket::store::{ManifestStore, StoreError};
use kafkalog::TopicPartition;
use manifest::layout::{ClusterLayout, PartitionKey};
use manifest::partition::{Page, PartitionManifest, ShippedRange};

use crate::edit::{self, Dropped, PageRanges};
use crate::error::ShipperError;
use crate::health::HealthEvent;
use crate::partition::{PageCache, Shipment, ShipperSlot, cache_page, cached_page};
use crate::plan::RangePlan;
use crate::source::Fingerprint;
use crate::upload::Uploaded;

/// What a committed version added, for the report and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shipped {
    /// Objects newly named.
    pub(crate) objects: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// Their record batches.
    pub(crate) batches: u64,
    /// Compacted segments whose ranges were replaced.
    pub(crate) reshipped: usize,
}

/// What committing one partition's cycle came to.
#[derive(Debug)]
pub(crate) enum CommitOutcome {
    /// A new version is committed (or our own identical earlier attempt
    /// was found at its number). `partial`: an upload failed, and the
    /// version names only what came before it.
    Committed {
        /// The version.
        version: u64,
        /// What it added.
        shipped: Shipped,
        /// It cut the manifest back after a source divergence.
        cut: bool,
        /// It publishes the partition as deleted.
        deleted: bool,
        /// The upload error that kept ranges out of it.
        partial: Option<ShipperError>,
    },
    /// Nothing new to commit (every upload failed, or the partition has no
    /// topic id): the error, if any, is why.
    Unchanged {
        /// The upload error.
        error: Option<ShipperError>,
    },
    /// The version number was taken by another version under our id (an
    /// earlier commit whose answer was lost): it is adopted and the
    /// partition finds its position again from it.
    Adopted {
        /// The version adopted.
        version: u64,
    },
    /// Another writer committed the version first: the partition backs off.
    Fenced {
        /// The version lost.
        version: u64,
        /// The winner's id.
        writer: String,
    },
    /// Reading pages, writing pages or the version failed.
    Failed(ShipperError),
    /// The version only appends: it is committed by the cycle's head as a
    /// delta (`head_deltas`), and the partition's position moves only
    /// once that head is written ([`confirm_deferred`]).
    Deferred(Box<Deferred>),
}

/// A version waiting for the head that commits its delta.
#[derive(Debug)]
pub(crate) struct Deferred {
    /// The head entry that commits it.
    pub(crate) entry: manifest::feed::HeadEntry,
    /// Its chain is as long as `MAX_CHAIN` allows: the version starts it
    /// again, written into the cycle's manifest pack before the head
    /// ([`Deferred::rebase_at`]).
    pub(crate) rebase: bool,
    work: Shipment,
    next: NextVersion,
    manifest: PartitionManifest,
}

impl Deferred {
    /// The version, encoded, for the cycle's manifest pack.
    pub(crate) fn encoded(&self) -> Result<Vec<u8>, manifest::partition::ManifestFormatError> {
        self.manifest.encode()
    }

    /// The version was written at `slice` of the cycle's manifest pack:
    /// its head entry starts the chain again there.
    pub(crate) fn rebase_at(&mut self, slice: manifest::feed::ManifestSlice) {
        if let Some(d) = self.entry.delta.take() {
            self.entry = manifest::feed::HeadEntry::for_rebase(&self.manifest, d, slice);
        }
    }
}

impl CommitOutcome {
    /// True when another cycle should follow at once: the plan was capped
    /// or cut (`work_backlog`), or an adopted version needs a new plan.
    pub(crate) fn wants_another_cycle(&self, work_backlog: bool) -> bool {
        match self {
            CommitOutcome::Adopted { .. } => true,
            CommitOutcome::Fenced { .. } => false,
            _ => work_backlog,
        }
    }
}

/// Settings shared by the commits of one cycle.
pub(crate) struct CommitCtx<'a> {
    pub(crate) store: &'a ManifestStore,
    pub(crate) layout: &'a ClusterLayout,
    pub(crate) shipper_id: &'a str,
    pub(crate) cluster_id: &'a str,
    pub(crate) now_ms: i64,
    pub(crate) fence_backoff_ms: i64,
    pub(crate) pages: &'a PageCache,
}

/// Where a partition's held version stands in the head's delta chain,
/// when its appends may be committed by the head (`head_deltas`): the
/// manifest object the chain follows, and how many deltas it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChainPosition {
    pub(crate) object_version: u64,
    pub(crate) deltas: usize,
}

impl ChainPosition {
    /// The position the head's entry gives `held` (`None`: the head does
    /// not name the held version, so the next version is an object).
    pub(crate) fn of(
        entry: Option<&manifest::feed::HeadEntry>,
        held: u64,
    ) -> Option<ChainPosition> {
        let e = entry.filter(|e| e.manifest_version == held)?;
        Some(match &e.chain {
            Some(c) => ChainPosition {
                object_version: c.object_version,
                deltas: c.heads.len(),
            },
            None => ChainPosition {
                object_version: held,
                deltas: 0,
            },
        })
    }
}

/// The cycle-wide inputs of [`next_version`].
pub(crate) struct VersionInputs<'a> {
    /// The source cluster (for a first version).
    pub(crate) cluster_id: &'a str,
    /// This shipper's id, written into the version.
    pub(crate) writer: &'a str,
    /// Commit time.
    pub(crate) now_ms: i64,
    /// Sealed pages' ranges known (a cut needs the pages it crosses).
    pub(crate) pages: PageRanges<'a>,
    /// The key of a page sealed over `[first, last]`.
    pub(crate) page_key: &'a dyn Fn(i64, i64) -> String,
}

/// The version a cycle would commit, with what it no longer names.
#[derive(Debug)]
pub(crate) struct NextVersion {
    /// The version (numbered `base + 1`, or 1); `None` when it would say
    /// what the base says.
    pub(crate) manifest: Option<PartitionManifest>,
    /// Pages it seals, to write before it.
    pub(crate) sealed: Vec<(String, Page)>,
    /// Keys it stops naming (cut, retention, compaction).
    pub(crate) dropped: Dropped,
    /// Keys uploaded this cycle that it does not name.
    pub(crate) orphans: Vec<String>,
    /// Compacted segments handled (replaced, or not replaceable).
    pub(crate) reship_fps: Vec<(i64, Fingerprint)>,
    /// New tail ranges it names (a prefix of `work.ranges`).
    pub(crate) pushed: usize,
    /// What it adds.
    pub(crate) shipped: Shipped,
    /// It cuts the manifest back.
    pub(crate) cut: bool,
    /// The first upload error.
    pub(crate) upload_error: Option<ShipperError>,
    /// Gaps it records for the first time (`crate::gaps`).
    pub(crate) new_gaps: Vec<manifest::gaps::Gap>,
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
        object_offset: up.object_offset,
        compacted: false,
    }
}

/// The next version of `pk`'s manifest after `base`, from the cycle's
/// `work` and its upload `results` (one per [`Shipment::jobs`], in order).
/// Pure: no IO, no clock. `Err` when the version would break an invariant
/// or a page a cut crosses is unknown.
pub(crate) fn next_version(
    base: Option<&PartitionManifest>,
    pk: &PartitionKey,
    work: &Shipment,
    results: Vec<Result<Uploaded, ShipperError>>,
    inputs: &VersionInputs<'_>,
) -> Result<NextVersion, ShipperError> {
    let tp = &pk.tp;
    let mut m = base.cloned().unwrap_or_else(|| {
        let mut m = PartitionManifest::new(inputs.cluster_id, tp, pk.topic_id);
        m.log_start_offset = work.log_start;
        m.shipped_end_offset = work.log_start;
        m
    });
    let mut next = NextVersion {
        manifest: None,
        sealed: Vec::new(),
        dropped: Dropped::default(),
        orphans: Vec::new(),
        reship_fps: Vec::new(),
        pushed: 0,
        shipped: Shipped::default(),
        cut: false,
        upload_error: None,
        new_gaps: Vec::new(),
    };
    m.deleted = work.mark_deleted;
    if !work.mark_deleted
        && let Some(b) = base
    {
        next.new_gaps = crate::gaps::record(&mut m, b, work, inputs.now_ms);
    }
    if !work.mark_deleted {
        if let Some(point) = work.cut {
            let d = edit::cut(&mut m, point, inputs.pages).map_err(|key| {
                ShipperError::Inconsistent {
                    tp: tp.clone(),
                    reason: format!("page {key} could not be read for the cut"),
                }
            })?;
            next.dropped.extend(d);
            next.cut = true;
        }
        if work.log_start > m.log_start_offset {
            next.dropped
                .extend(edit::raise_log_start(&mut m, work.log_start, inputs.pages));
        }
        let mut results = results.into_iter();
        apply_reships(&mut m, tp, work, &mut results, &mut next);
        apply_tail(&mut m, work, results, inputs, &mut next);
        let shipped_epochs = work.ranges[..next.pushed]
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
        if let Some(c) = &work.topic_configs {
            m.topic_configs = Some(c.clone());
        }
        m.source_high_watermark = work.hw.max(0);
    }
    m.writer = inputs.writer.to_string();
    m.committed_at_ms = inputs.now_ms;
    if let Some(b) = base {
        let mut probe = m.clone();
        probe.source_high_watermark = b.source_high_watermark;
        probe.writer = b.writer.clone();
        if edit::same_content(b, &probe) && !work.mark_deleted {
            // Nothing new made it (every upload failed).
            return Ok(next);
        }
    }
    m.version = base.map_or(1, |b| b.version + 1);
    m.validate().map_err(|e| ShipperError::Inconsistent {
        tp: tp.clone(),
        reason: e.to_string(),
    })?;
    next.manifest = Some(m);
    Ok(next)
}

/// Replaces the ranges of each compacted segment shipped again whole; a
/// segment with a failed upload keeps its ranges.
fn apply_reships(
    m: &mut PartitionManifest,
    tp: &TopicPartition,
    work: &Shipment,
    results: &mut impl Iterator<Item = Result<Uploaded, ShipperError>>,
    next: &mut NextVersion,
) {
    for rs in &work.reships {
        let mine: Vec<_> = results.by_ref().take(rs.ranges.len()).collect();
        if !mine.iter().all(|r| r.is_ok()) {
            for r in mine {
                match r {
                    Ok(u) => next.orphans.push(u.key),
                    Err(e) => {
                        next.upload_error.get_or_insert(e);
                    }
                }
            }
            continue;
        }
        let new: Vec<ShippedRange> = rs
            .ranges
            .iter()
            .zip(mine.iter())
            .filter_map(|(p, r)| r.as_ref().ok().map(|u| shipped_range(p, u)))
            .collect();
        let keys: Vec<String> = new.iter().map(|r| r.key.clone()).collect();
        next.reship_fps.push((rs.lo, rs.fp));
        match edit::replace_segment(m, rs.lo, rs.hi, new) {
            Ok(d) => {
                next.dropped.extend(d);
                next.shipped.reshipped += 1;
                next.shipped.objects += keys.len() as u64;
                next.shipped.bytes += rs.ranges.iter().map(RangePlan::bytes).sum::<u64>();
                next.shipped.batches += rs
                    .ranges
                    .iter()
                    .map(|p| u64::from(p.summary.batches))
                    .sum::<u64>();
            }
            Err(reason) => {
                tracing::warn!(partition = %tp, segment = rs.lo, %reason, "a compacted segment was shipped again but cannot replace its ranges");
                next.orphans.extend(keys);
            }
        }
    }
}

/// Appends the new tail ranges up to the first failed upload, sealing
/// pages as `push_range` says.
fn apply_tail(
    m: &mut PartitionManifest,
    work: &Shipment,
    results: impl Iterator<Item = Result<Uploaded, ShipperError>>,
    inputs: &VersionInputs<'_>,
    next: &mut NextVersion,
) {
    let mut failed = false;
    for (plan, r) in work.ranges.iter().zip(results) {
        match r {
            Ok(u) if !failed => {
                let range = shipped_range(plan, &u);
                if let Some(s) = m.push_range(range, inputs.page_key) {
                    next.sealed.push(s);
                }
                next.pushed += 1;
                next.shipped.objects += 1;
                next.shipped.bytes += u.bytes;
                next.shipped.batches += u64::from(plan.summary.batches);
            }
            Ok(u) => next.orphans.push(u.key),
            Err(e) => {
                failed = true;
                next.upload_error.get_or_insert(e);
            }
        }
    }
}

/// Whose version holds the number a commit lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Winner {
    /// Ours, identical: a retried request of ours won.
    OursIdentical,
    /// Another version under our id: an earlier commit whose answer was
    /// lost (or a second process misconfigured with our id).
    OursEarlier,
    /// Another writer.
    Other,
}

/// Judges the version `winner` found at the number `ours` lost.
pub(crate) fn judge_winner(
    ours: &PartitionManifest,
    winner: &PartitionManifest,
    shipper_id: &str,
) -> Winner {
    if winner.writer != shipper_id {
        Winner::Other
    } else if edit::same_content(winner, ours) {
        Winner::OursIdentical
    } else {
        Winner::OursEarlier
    }
}

/// Reads a sealed page through the shared cache.
pub(crate) async fn load_page(
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

/// Reads the pages the edits of `work` need: those a cut crosses (needed),
/// and those retention drops (only to hand their ranges to the sweep on
/// time: a failure is logged and the ranges are found by the sweep later).
async fn load_pages_for_edits(
    ctx: &CommitCtx<'_>,
    base: Option<&PartitionManifest>,
    work: &Shipment,
) -> Result<(), StoreError> {
    let Some(m) = base.filter(|_| !work.mark_deleted) else {
        return Ok(());
    };
    if let Some(point) = work.cut {
        for p in m.pages.iter().filter(|p| p.last_offset >= point) {
            load_page(ctx.store, ctx.pages, &p.key).await?;
        }
    }
    if work.log_start > m.log_start_offset {
        for p in m.pages.iter().filter(|p| p.last_offset < work.log_start) {
            if let Err(e) = load_page(ctx.store, ctx.pages, &p.key).await {
                tracing::debug!(key = %p.key, error = %e, "cannot read a page retention drops; the sweep finds its ranges later");
            }
        }
    }
    Ok(())
}

/// Writes the sealed pages, then the version, each create-if-absent.
/// `Ok(false)`: a create was lost (a lost commit). A page conflict is a
/// real race (page keys carry a fresh upload id), never a page to replace.
async fn write_version(
    ctx: &CommitCtx<'_>,
    m: &PartitionManifest,
    sealed: &[(String, Page)],
) -> Result<bool, StoreError> {
    for (key, page) in sealed {
        match ctx.store.put_page(key, page).await {
            Ok(()) => cache_page(ctx.pages, key.clone(), Arc::new(page.ranges.clone())),
            Err(StoreError::Conflict { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    match ctx.store.commit_manifest(m).await {
        Ok(()) => Ok(true),
        Err(StoreError::Conflict { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Computes, writes and records one partition's next version.
pub(crate) async fn commit(
    ctx: &CommitCtx<'_>,
    st: &mut ShipperSlot,
    work: Shipment,
    results: Vec<Result<Uploaded, ShipperError>>,
    chain: Option<ChainPosition>,
) -> CommitOutcome {
    let Some(pk) = st.pk.clone() else {
        return CommitOutcome::Unchanged { error: None };
    };
    let store_err = |source: StoreError| ShipperError::store(st.tp.to_string(), source);
    let base = st.manifest.clone();
    if let Err(e) = load_pages_for_edits(ctx, base.as_ref(), &work).await {
        return CommitOutcome::Failed(store_err(e));
    }
    let lookup = |k: &str| cached_page(ctx.pages, k);
    // A fresh upload id per page write: pages are create-only.
    let page_key = |a: i64, b: i64| ctx.layout.page_key(&pk, a, b, &bucket::upload_id::fresh());
    let inputs = VersionInputs {
        cluster_id: ctx.cluster_id,
        writer: ctx.shipper_id,
        now_ms: ctx.now_ms,
        pages: &lookup,
        page_key: &page_key,
    };
    let next = match next_version(base.as_ref(), &pk, &work, results, &inputs) {
        Ok(n) => n,
        Err(e) => return CommitOutcome::Failed(e),
    };
    if !next.orphans.is_empty() {
        st.dirty = true;
        for k in &next.orphans {
            st.dropped.insert(k.clone(), ctx.now_ms);
        }
    }
    let Some(m) = next.manifest.clone() else {
        return CommitOutcome::Unchanged {
            error: next.upload_error,
        };
    };
    // An append after a held version the head names: the head commits
    // it; when the chain has no room left, the version starts it again
    // from the cycle's manifest pack (one object for every partition doing
    // so, not one each).
    let delta = chain
        .filter(|_| next.sealed.is_empty())
        .zip(base.as_ref())
        .and_then(|(c, b)| Some((c, manifest::delta::Delta::between(b, &m)?)));
    if let Some((c, d)) = delta {
        return CommitOutcome::Deferred(Box::new(Deferred {
            entry: manifest::feed::HeadEntry::for_delta(&m, d, c.object_version),
            rebase: c.deltas >= manifest::feed::MAX_CHAIN,
            work,
            next,
            manifest: m,
        }));
    }
    match write_version(ctx, &m, &next.sealed).await {
        Ok(true) => record_committed(ctx, st, &work, next, m),
        Ok(false) => resolve_lost_commit(ctx, st, &pk, &work, next, m, base.as_ref()).await,
        Err(e) => {
            st.dirty = true;
            CommitOutcome::Failed(store_err(e))
        }
    }
}

/// The head that commits `d`'s delta was written: the partition moves as
/// for a version written as an object.
pub(crate) fn confirm_deferred(
    ctx: &CommitCtx<'_>,
    st: &mut ShipperSlot,
    d: Deferred,
) -> CommitOutcome {
    let Deferred {
        work,
        next,
        manifest,
        ..
    } = d;
    record_committed(ctx, st, &work, next, manifest)
}

/// A create was lost: reads the version at our number and judges it.
async fn resolve_lost_commit(
    ctx: &CommitCtx<'_>,
    st: &mut ShipperSlot,
    pk: &PartitionKey,
    work: &Shipment,
    next: NextVersion,
    m: PartitionManifest,
    base: Option<&PartitionManifest>,
) -> CommitOutcome {
    let winner = match ctx.store.get_manifest(pk, m.version).await {
        Ok(w) => w,
        Err(StoreError::NotFound { .. }) => {
            // A page name was taken but the version is free: a race on
            // that page that no version names yet; decided again next
            // cycle, with fresh page keys.
            st.dirty = true;
            return CommitOutcome::Failed(ShipperError::store(
                st.tp.to_string(),
                StoreError::Conflict {
                    key: next
                        .sealed
                        .first()
                        .map_or_else(|| ctx.layout.manifest_key(pk, m.version), |s| s.0.clone()),
                },
            ));
        }
        Err(e) => {
            st.dirty = true;
            return CommitOutcome::Failed(ShipperError::store(st.tp.to_string(), e));
        }
    };
    match judge_winner(&m, &winner, ctx.shipper_id) {
        Winner::OursIdentical => record_committed(ctx, st, work, next, winner),
        Winner::OursEarlier => {
            tracing::warn!(
                partition = %st.tp,
                version = winner.version,
                writer = %winner.writer,
                "this version was committed under this shipper's id by an earlier attempt (or another process with the same id): continuing from it"
            );
            for k in work.jobs_keys_uploaded(&m, base) {
                st.dropped.insert(k, ctx.now_ms);
            }
            let version = winner.version;
            st.manifest = Some(winner);
            st.cursor = None;
            st.mark = None;
            st.lineage_ok = None;
            st.dirty = true;
            CommitOutcome::Adopted { version }
        }
        Winner::Other => {
            // The broker's metadata says this broker leads: the other
            // writer is the previous leader's shipper, whose last commit
            // landed after this one read the manifest. No back-off: the
            // next cycle reads its version and continues from its end.
            let leads = st.role.as_ref().is_some_and(crate::leadership::Role::leads);
            let backoff_ms = if leads { 0 } else { ctx.fence_backoff_ms };
            if leads {
                tracing::info!(
                    partition = %st.tp,
                    version = m.version,
                    other_writer = %winner.writer,
                    "the previous leader's shipper committed this version first: continuing from it next cycle"
                );
            } else {
                tracing::warn!(
                    partition = %st.tp,
                    version = m.version,
                    other_writer = %winner.writer,
                    backoff_s = ctx.fence_backoff_ms / 1000,
                    "another shipper committed this partition's manifest version first: backing off, never overwriting"
                );
            }
            for k in work.jobs_keys_uploaded(&m, base) {
                st.dropped.insert(k, ctx.now_ms);
            }
            st.apply_health(HealthEvent::LostCommit {
                writer: winner.writer.clone(),
                until_ms: ctx.now_ms + backoff_ms,
            });
            st.dirty = true;
            CommitOutcome::Fenced {
                version: m.version,
                writer: winner.writer,
            }
        }
    }
}

/// Moves the partition past a committed version `m`.
fn record_committed(
    ctx: &CommitCtx<'_>,
    st: &mut ShipperSlot,
    work: &Shipment,
    next: NextVersion,
    m: PartitionManifest,
) -> CommitOutcome {
    if work.cut.is_some() {
        st.cursor = None;
        st.mark = None;
    } else if next.pushed == work.ranges.len() {
        st.cursor = work.cursor_after.or(st.cursor);
        st.mark = work.mark_after.or(st.mark);
    } else if next.pushed > 0 {
        let last = &work.ranges[next.pushed - 1];
        st.cursor = Some(last.end_cursor);
        st.mark = Some(last.last_mark);
    }
    if let Some(c) = st.cursor {
        st.cursor_fp = work.seg_fps.get(&c.segment).copied();
    }
    st.confirm_segments(work);
    for (base, fp) in next.reship_fps {
        st.confirmed.insert(base, fp);
    }
    for k in next.dropped.data.into_iter().chain(next.dropped.pages) {
        st.dropped.insert(k, ctx.now_ms);
        st.dirty = true;
    }
    if m.deleted {
        st.apply_health(HealthEvent::PublishedDeleted);
    }
    for g in &next.new_gaps {
        crate::gaps::log_new(&st.tp, g);
    }
    st.lag_bytes = work.planned_bytes.saturating_sub(next.shipped.bytes);
    st.hw = work.hw;
    if m.shipped_end_offset >= work.hw {
        st.caught_up_at_ms = ctx.now_ms;
    }
    let outcome = CommitOutcome::Committed {
        version: m.version,
        shipped: next.shipped,
        cut: next.cut,
        deleted: m.deleted,
        partial: next.upload_error,
    };
    st.manifest = Some(m);
    st.loaded = true;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::RangeSummary;
    use crate::source::{BatchMark, Cursor};
    use kafkalog::checkpoint::EpochEntry;
    use kafkalog::epoch::EpochLineage;
    use manifest::layout::PartitionKey;

    fn pk() -> PartitionKey {
        PartitionKey {
            tp: TopicPartition::new("t", 0).expect("tp"),
            topic_id: "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
        }
    }

    fn plan(base: i64, last: i64) -> RangePlan {
        let mut summary = RangeSummary::new();
        summary.base_offset = base;
        summary.last_offset = last;
        summary.batches = 1;
        summary.bytes = 100;
        summary.max_timestamp = 5;
        summary.first_epoch = 0;
        summary.epochs = EpochLineage::from_entries([EpochEntry {
            epoch: 0,
            start_offset: base,
        }])
        .expect("lineage");
        RangePlan {
            segment_base: 0,
            path: "/d/t-0/00000000000000000000.log".into(),
            start: base as u64 * 100,
            end: base as u64 * 100 + 100,
            summary,
            completes_segment: false,
            generation: 0,
            end_cursor: Cursor {
                segment: 0,
                position: base as u64 * 100 + 100,
                next_offset: last + 1,
            },
            last_mark: BatchMark {
                segment: 0,
                position: base as u64 * 100,
                end: base as u64 * 100 + 100,
                base_offset: base,
                last_offset: last,
                epoch: 0,
                crc: 1,
            },
        }
    }

    fn uploaded(base: i64) -> Result<Uploaded, ShipperError> {
        Ok(Uploaded {
            key: format!("data/{base}"),
            bytes: 100,
            crc32c: 7,
            object_offset: None,
        })
    }

    fn failed() -> Result<Uploaded, ShipperError> {
        Err(ShipperError::Inconsistent {
            tp: pk().tp,
            reason: "upload failed".into(),
        })
    }

    fn work(ranges: Vec<RangePlan>) -> Shipment {
        Shipment {
            hw: 30,
            source_epochs: vec![EpochEntry {
                epoch: 0,
                start_offset: 0,
            }],
            ranges,
            ..Shipment::default()
        }
    }

    fn next(
        base: Option<&PartitionManifest>,
        work: &Shipment,
        results: Vec<Result<Uploaded, ShipperError>>,
    ) -> Result<NextVersion, ShipperError> {
        let no_pages = |_: &str| None;
        let page_key = |a: i64, b: i64| format!("pages/{a}-{b}");
        next_version(
            base,
            &pk(),
            work,
            results,
            &VersionInputs {
                cluster_id: "c",
                writer: "me",
                now_ms: 1_000,
                pages: &no_pages,
                page_key: &page_key,
            },
        )
    }

    #[test]
    fn a_first_version_is_version_one_and_names_what_was_uploaded() {
        let w = work(vec![plan(0, 9), plan(10, 19)]);
        let n = next(None, &w, vec![uploaded(0), uploaded(10)]).expect("next");
        let m = n.manifest.expect("a version");
        assert_eq!(m.version, 1);
        assert_eq!(m.writer, "me");
        assert_eq!(m.committed_at_ms, 1_000);
        assert_eq!(m.shipped_end_offset, 20);
        assert_eq!(m.source_high_watermark, 30);
        let keys: Vec<&str> = m.ranges.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["data/0", "data/10"]);
        assert_eq!(n.pushed, 2);
        assert_eq!(
            n.shipped,
            Shipped {
                objects: 2,
                bytes: 200,
                batches: 2,
                reshipped: 0
            }
        );
        assert!(n.orphans.is_empty() && n.upload_error.is_none());
    }

    #[test]
    fn the_next_version_follows_the_base_version() {
        let base = next(None, &work(vec![plan(0, 9)]), vec![uploaded(0)])
            .expect("next")
            .manifest
            .map(|mut m| {
                m.version = 41;
                m
            })
            .expect("base");
        let n = next(Some(&base), &work(vec![plan(10, 19)]), vec![uploaded(10)]).expect("next");
        assert_eq!(n.manifest.map(|m| m.version), Some(42));
    }

    #[test]
    fn ranges_after_a_failed_upload_are_left_out_and_orphaned() {
        let w = work(vec![plan(0, 9), plan(10, 19), plan(20, 29)]);
        let n = next(None, &w, vec![uploaded(0), failed(), uploaded(20)]).expect("next");
        let m = n.manifest.expect("a version");
        assert_eq!(m.shipped_end_offset, 10);
        assert_eq!(m.ranges.len(), 1);
        assert_eq!(n.pushed, 1);
        assert_eq!(n.orphans, ["data/20"]);
        assert!(n.upload_error.is_some());
    }

    #[test]
    fn nothing_is_committed_when_every_upload_failed() {
        let base = next(None, &work(vec![plan(0, 9)]), vec![uploaded(0)])
            .expect("next")
            .manifest
            .expect("base");
        let n = next(Some(&base), &work(vec![plan(10, 19)]), vec![failed()]).expect("next");
        assert!(n.manifest.is_none());
        assert!(n.upload_error.is_some());
    }

    #[test]
    fn a_deleted_partition_gets_a_version_saying_so() {
        let base = next(None, &work(vec![plan(0, 9)]), vec![uploaded(0)])
            .expect("next")
            .manifest
            .expect("base");
        let w = Shipment {
            mark_deleted: true,
            ..Shipment::default()
        };
        let m = next(Some(&base), &w, vec![])
            .expect("next")
            .manifest
            .expect("a version");
        assert!(m.deleted);
        assert_eq!(m.version, base.version + 1);
        assert_eq!(m.ranges, base.ranges);
    }

    #[test]
    fn a_change_of_topic_configs_alone_is_a_new_version_with_the_same_data() {
        use manifest::topic_config::{ConfigSource, ConfigValue};
        let base = next(None, &work(vec![plan(0, 9)]), vec![uploaded(0)])
            .expect("next")
            .manifest
            .expect("base");
        let configs: std::collections::BTreeMap<String, ConfigValue> = [(
            "retention.ms".to_string(),
            ConfigValue {
                value: "3600000".into(),
                source: ConfigSource::Topic,
            },
        )]
        .into();
        let w = Shipment {
            topic_configs: Some(configs.clone()),
            log_start: base.log_start_offset,
            hw: base.source_high_watermark,
            ..Shipment::default()
        };
        let m = next(Some(&base), &w, vec![])
            .expect("next")
            .manifest
            .expect("a version");
        assert_eq!(m.version, base.version + 1);
        assert_eq!(m.topic_configs, Some(configs));
        assert_eq!(
            (&m.ranges, m.shipped_end_offset),
            (&base.ranges, base.shipped_end_offset)
        );
        // Without configs to publish, the next version keeps the last ones.
        let same = next(Some(&m), &work(vec![plan(10, 19)]), vec![uploaded(10)])
            .expect("next")
            .manifest
            .expect("a version");
        assert_eq!(same.topic_configs, m.topic_configs);
    }

    #[test]
    fn a_cut_across_an_unread_page_is_refused() {
        let mut base = next(None, &work(vec![plan(0, 9)]), vec![uploaded(0)])
            .expect("next")
            .manifest
            .expect("base");
        base.pages.push(manifest::partition::PageRef {
            key: "pages/0-9".into(),
            first_offset: 0,
            last_offset: 9,
            ranges: 1,
            bytes: 100,
        });
        base.ranges.clear();
        let w = Shipment {
            cut: Some(5),
            ..work(vec![])
        };
        assert!(matches!(
            next(Some(&base), &w, vec![]),
            Err(ShipperError::Inconsistent { .. })
        ));
    }

    #[test]
    fn a_version_after_an_unclean_truncation_records_what_was_committed_and_never_shipped() {
        // Shipped 0-99 (epochs 0@0, 3@70) while the source's HW was 130;
        // the source then diverged at 90 with epoch 5.
        let e = |epoch, start_offset| EpochEntry {
            epoch,
            start_offset,
        };
        let mut base = next(
            None,
            &work(vec![plan(0, 69), plan(70, 99)]),
            vec![uploaded(0), uploaded(70)],
        )
        .expect("next")
        .manifest
        .expect("base");
        base.lineage = EpochLineage::from_entries([e(0, 0), e(3, 70)]).expect("lineage");
        base.source_high_watermark = 130;
        let w = Shipment {
            cut: Some(90),
            hw: 95,
            source_epochs: vec![e(0, 0), e(5, 90)],
            ..Shipment::default()
        };
        let n = next(Some(&base), &w, vec![]).expect("next");
        let m = n.manifest.expect("a version");
        assert!(n.cut);
        assert_eq!(m.shipped_end_offset, 70, "cut back to the range before 90");
        assert_eq!(n.new_gaps.len(), 1);
        let g = &m.gaps[0];
        assert_eq!((g.first_offset, g.last_offset), (100, 129));
        assert_eq!(g.cause, manifest::gaps::GapCause::UncleanTruncation);
        assert_eq!(g.reused_from_epoch, Some(5));
        assert_eq!(
            g.lost_epochs,
            Some(manifest::gaps::EpochSpan {
                at_least: 3,
                at_most: Some(4)
            })
        );
        // The next version carries it without recording it again.
        let later = next(Some(&m), &work(vec![plan(70, 79)]), vec![uploaded(70)]).expect("next");
        assert!(later.new_gaps.is_empty());
        assert_eq!(later.manifest.expect("v").gaps, m.gaps);
    }

    #[test]
    fn the_winner_of_a_lost_commit_is_judged_by_writer_and_content() {
        let ours = next(None, &work(vec![plan(0, 9)]), vec![uploaded(0)])
            .expect("next")
            .manifest
            .expect("ours");
        let mut retried = ours.clone();
        retried.committed_at_ms += 5;
        let mut earlier = ours.clone();
        earlier.shipped_end_offset = 5;
        earlier.ranges.clear();
        let mut other = ours.clone();
        other.writer = "other".into();
        for (winner, verdict) in [
            (&retried, Winner::OursIdentical),
            (&earlier, Winner::OursEarlier),
            (&other, Winner::Other),
        ] {
            assert_eq!(judge_winner(&ours, winner, "me"), verdict);
        }
    }

    #[test]
    fn an_adopted_version_wants_another_cycle_and_a_fenced_one_does_not() {
        assert!(CommitOutcome::Adopted { version: 1 }.wants_another_cycle(false));
        let fenced = CommitOutcome::Fenced {
            version: 1,
            writer: "w".into(),
        };
        assert!(!fenced.wants_another_cycle(true));
        assert!(CommitOutcome::Unchanged { error: None }.wants_another_cycle(true));
    }
}
