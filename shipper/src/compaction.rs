//! Compaction behind the tail (issue 30, "Layout 2", step 4): each cycle,
//! the partitions this shipper holds have their packed ranges that are due
//! (`manifest::compact::plan`) rewritten: a rolled segment, a large run or
//! one `compact_after` old into an object of the partition's own; runs of
//! many ranges as shipped, of every partition due at once, into one
//! compacted pack shared by all of them. A manifest version names the new
//! range in place of the old ones.
//!
//! Invariants:
//! - the ranges are read and their CRC-32C checked before anything is
//!   written (the cycle's jobs read ahead together: one ranged GET per
//!   run of neighbouring partitions' ranges in a pack, `bucket::ahead`);
//!   the new objects are written under fresh upload ids (create-only)
//!   before the versions that name them;
//! - with `head_deltas`, the versions of a partition whose held version the
//!   head names are deltas (`manifest::delta::Delta::replaced`) committed
//!   by one head for the whole cycle's compaction, refused per partition
//!   when another writer moved it (the partition is read again; the object
//!   is left to pack gc or the sweep); a partition whose chain is full is
//!   compacted after its next commit starts the chain again. Otherwise the
//!   version is an object, create-if-absent, and ends the chain;
//! - at most one job per partition a cycle; [`MAX_JOBS`] objects of their
//!   own and 256 MiB in all, so a backlog is compacted over several
//!   cycles without holding up shipping; the jobs are read and written in
//!   batches of at most 64 MiB (8 at once), so compaction holds no more
//!   than that beside the manifests; a compacted pack is
//!   written only when some partition's run is due for one, and takes
//!   every partition's run that may go along;
//! - under `shipper run` the jobs are written by a task of their own
//!   ([`Compactor`]) while the cycles go on shipping, one cycle's jobs at a
//!   time; the first cycle after they are written commits them, each in
//!   place of its ranges wherever they stand in the partition's version by
//!   then (`manifest::compact::replace_run`), or not at all when the
//!   partition moved on (the object is then left to garbage collection).
//!   Jobs committed half of `delete_grace` or more after they were planned
//!   are not committed at all (pack gc or the sweep may have taken their
//!   objects) and are planned again;
//! - packs are never deleted here: a pack no latest version names is
//!   garbage-collected later.

use std::collections::BTreeMap;

use bucket::store::{ManifestStore, StoreError};
use bytes::Bytes;
use futures::StreamExt;
use kafkalog::TopicPartition;
use manifest::compact::{Job, Output, Policy, merged_range, plan, replace_run, shared_due};
use manifest::layout::PartitionKey;
use manifest::layout::parse_upload_time_ms;
use manifest::partition::{PartitionManifest, ShippedRange};

use crate::commit::ChainPosition;
use crate::error::ShipperError;
use crate::feed::Feed;
use crate::health::Health;
use crate::partition::ShipperSlot;
use crate::upload::put_own;

/// Most jobs into objects of their own per cycle: partitions that started
/// together come due together (1,000 at once at a 1 s tail).
pub(crate) const MAX_JOBS: usize = 32;

/// Most jobs into a cycle's compacted packs.
const MAX_SHARED_JOBS: usize = 10_000;

/// Most bytes of jobs a cycle plans (the first job whatever its size).
const MAX_CYCLE_BYTES: u64 = 256 << 20;

/// Most bytes read and held at once, and in one compacted pack (a job
/// larger than that is a batch alone).
const MAX_BATCH_BYTES: u64 = 64 << 20;

/// Jobs read, and objects written, at once.
const CONCURRENT_JOBS: usize = 8;

/// Read-ahead of the jobs' ranges: neighbours this close share a GET (a
/// few other partitions' ranges in between, read and dropped). With 1
/// KiB a batch's runs broke at every partition not in it: the shipper's
/// GETs over a window holding one compaction of 1,000 partitions were
/// 5,068 with 1 KiB and 2,874 with 16 KiB (BENCHMARKS.md, C)...
const READ_AHEAD_GAP: u64 = 16 << 10;
/// ...of at most this many bytes.
const READ_AHEAD_RUN: u64 = 8 << 20;

/// A job's bytes as read: slices of the read-ahead (or of one GET per
/// range), never copied; written as the parts of one payload.
#[derive(Debug, Default)]
struct JobBytes {
    parts: Vec<Bytes>,
    len: u64,
}

impl JobBytes {
    /// The CRC-32C of the parts one after another.
    fn crc32c(&self) -> u32 {
        let mut d = kafkalog::batch::Crc32cDigest::new();
        for p in &self.parts {
            d.update(p);
        }
        d.value()
    }
}

/// What a cycle's compaction did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compacted {
    /// Objects written (own objects and compacted packs).
    pub(crate) objects: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// Packed ranges they replace.
    pub(crate) ranges: u64,
    /// Heads written to commit the versions.
    pub(crate) heads: u64,
}

impl Compacted {
    fn absorb(&mut self, o: Compacted) {
        self.objects += o.objects;
        self.bytes += o.bytes;
        self.ranges += o.ranges;
        self.heads += o.heads;
    }
}

/// When a range was shipped: the upload time in its pack's key.
fn shipped_ms(store: &ManifestStore, r: &ShippedRange) -> Option<i64> {
    let id = store.layout().parse_pack_key(&r.key).ok()?;
    parse_upload_time_ms(id)
}

/// One partition's job this cycle.
#[derive(Debug)]
struct Planned {
    tp: TopicPartition,
    pk: PartitionKey,
    manifest: PartitionManifest,
    job: Job,
}

/// Who commits compaction, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// The shipper id the versions carry.
    pub(crate) writer: &'a str,
    /// Versions committed by heads as deltas where they can be.
    pub(crate) head_deltas: bool,
    /// `delete_grace` (ms), `None` for never.
    pub(crate) grace_ms: Option<i64>,
}

/// Compaction's uploads in flight: one cycle's jobs at a time. Under
/// `shipper run` they are written by a task of their own while the cycles
/// go on shipping (the tail is never held up by compaction), and the cycle
/// after they finish commits them; otherwise (`ship_available`, tests)
/// the cycle that plans them awaits them and commits them.
#[derive(Debug, Default)]
pub(crate) struct Compactor {
    task: Option<tokio::task::JoinHandle<Written>>,
}

impl Drop for Compactor {
    fn drop(&mut self) {
        // Objects written and not committed are left to pack gc and the
        // sweep, as after a crash.
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// A cycle's jobs once their objects are written: the range that names
/// each job's bytes now, or why it failed.
#[derive(Debug)]
struct Written {
    planned: Vec<Planned>,
    merged: Vec<Result<ShippedRange, StoreError>>,
    done: Compacted,
    /// When the jobs were planned (the shipper's clock, ms): every object
    /// was uploaded after it.
    planned_at_ms: i64,
}

impl Compactor {
    /// Waits until the jobs in flight, if any, are written (tests; the
    /// next cycle commits them).
    pub(crate) async fn written(&self) {
        while self.task.as_ref().is_some_and(|t| !t.is_finished()) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Commits the jobs written since the last cycle, then plans the next
    /// ones (if none are in flight) and starts writing them, in the
    /// background or awaited (`background`). Returns what was committed
    /// and the errors, per partition.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn cycle(
        &mut self,
        store: &ManifestStore,
        partitions: &mut BTreeMap<TopicPartition, ShipperSlot>,
        feed: &mut Feed,
        policy: &Policy,
        ctx: Ctx<'_>,
        now_ms: i64,
        background: bool,
    ) -> (Compacted, Vec<(String, String)>) {
        let mut done = Compacted::default();
        let mut errors = Vec::new();
        if self.task.as_ref().is_some_and(|t| t.is_finished())
            && let Some(task) = self.task.take()
        {
            match task.await {
                Ok(w) => {
                    let (d, e) = commit(store, partitions, feed, w, ctx, now_ms).await;
                    done.absorb(d);
                    errors.extend(e);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the compaction task ended without its result; planned again");
                }
            }
        }
        if self.task.is_some() {
            return (done, errors);
        }
        let planned = plan_cycle(store, partitions, feed, policy, ctx.head_deltas, now_ms);
        if planned.is_empty() {
            return (done, errors);
        }
        // Its own read-ahead: dropping it after a batch drops nothing
        // another reader of the store holds.
        let writing = write_jobs(store.with_own_read_ahead(), planned, now_ms);
        if background {
            self.task = Some(tokio::spawn(writing));
        } else {
            let (d, e) = commit(store, partitions, feed, writing.await, ctx, now_ms).await;
            done.absorb(d);
            errors.extend(e);
        }
        (done, errors)
    }
}

/// Reads and writes `planned`'s jobs: own objects and compacted packs.
async fn write_jobs(store: ManifestStore, planned: Vec<Planned>, planned_at_ms: i64) -> Written {
    let store = &store;
    // Read and written a batch at a time (at most [`MAX_BATCH_BYTES`]
    // held): the own jobs, then the shared ones, a compacted pack a batch.
    let mut merged: Vec<Result<ShippedRange, StoreError>> = (0..planned.len())
        .map(|_| {
            Err(StoreError::Identity {
                key: String::new(),
                reason: "not written".into(),
            })
        })
        .collect();
    let mut done = Compacted::default();
    let of = |output: Output| {
        planned
            .iter()
            .enumerate()
            .filter(move |(_, p)| p.job.output == output)
            .map(|(i, p)| (i, p.job.bytes))
            .collect::<Vec<_>>()
    };
    for batch in chunks(of(Output::Own), |b| *b, MAX_BATCH_BYTES) {
        let read = read_jobs(store, &planned, &batch, &mut merged).await;
        let written: Vec<(usize, Result<ShippedRange, StoreError>, u64)> =
            futures::stream::iter(read.into_iter().map(|(i, b)| {
                let p = &planned[i];
                async move {
                    let size = b.len;
                    (i, write_own(store, p, b).await, size)
                }
            }))
            .buffer_unordered(CONCURRENT_JOBS)
            .collect()
            .await;
        for (i, r, size) in written {
            if r.is_ok() {
                done.objects += 1;
                done.bytes += size;
            }
            merged[i] = r;
        }
    }
    for batch in chunks(of(Output::Shared), |b| *b, MAX_BATCH_BYTES) {
        let read = read_jobs(store, &planned, &batch, &mut merged).await;
        if read.is_empty() {
            continue;
        }
        let (objects, bytes) = write_shared(store, &planned, read, &mut merged).await;
        done.objects += objects;
        done.bytes += bytes;
    }
    Written {
        planned,
        merged,
        done,
        planned_at_ms,
    }
}

/// Commits the versions naming `w`'s objects: each partition's current
/// version with the job's ranges, wherever they stand now, replaced
/// (`manifest::compact::replace_run`). A partition that moved on (the
/// ranges are gone, its health, its leadership or its identity changed,
/// its chain is full) keeps its version: the object is left to pack gc or
/// the sweep, and the job is planned again if still due.
async fn commit(
    store: &ManifestStore,
    partitions: &mut BTreeMap<TopicPartition, ShipperSlot>,
    feed: &mut Feed,
    w: Written,
    ctx: Ctx<'_>,
    now_ms: i64,
) -> (Compacted, Vec<(String, String)>) {
    let Ctx {
        writer,
        head_deltas,
        grace_ms,
    } = ctx;
    let Written {
        planned,
        merged,
        mut done,
        planned_at_ms,
    } = w;
    let mut errors = Vec::new();
    // Garbage collection deletes an unnamed object once it is older than
    // the grace (and was seen unnamed for as long): objects uploaded more
    // than half the grace ago are not named any more, lest a pass had
    // taken them (they are planned again).
    if let Some(grace) = grace_ms
        && now_ms.saturating_sub(planned_at_ms) >= grace / 2
    {
        tracing::warn!(
            took_ms = now_ms.saturating_sub(planned_at_ms),
            grace_ms = grace,
            "compaction took more than half of delete_grace: its objects are left to garbage collection and the jobs planned again"
        );
        return (done, errors);
    }
    let mut by_head: Vec<(usize, PartitionManifest, manifest::feed::HeadEntry)> = Vec::new();
    let mut as_objects: Vec<(usize, PartitionManifest)> = Vec::new();
    for (i, (p, m)) in planned.iter().zip(merged).enumerate() {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                fail(partitions, &p.tp, e, &mut errors);
                continue;
            }
        };
        let Some(st) = partitions.get(&p.tp) else {
            continue;
        };
        let leads = st.role.as_ref().is_none_or(crate::leadership::Role::leads);
        let current = match (&st.manifest, &st.pk) {
            (Some(c), Some(pk)) if st.health == Health::Ok && st.loaded && leads && *pk == p.pk => {
                c
            }
            _ => {
                tracing::info!(partition = %p.tp, key = m.key, "the partition changed while its compaction was written: the object is left to garbage collection");
                continue;
            }
        };
        let run = &p.manifest.ranges[p.job.ranges.clone()];
        let Some(mut next) = replace_run(current, run, m) else {
            tracing::info!(partition = %p.tp, "the compacted ranges changed while they were written (retention, a cut, another writer): the object is left to garbage collection");
            continue;
        };
        next.writer = writer.to_string();
        next.committed_at_ms = now_ms;
        let chain = if head_deltas {
            ChainPosition::of(feed.entry(&st.tp, &p.pk).as_ref(), current.version)
        } else {
            None
        };
        if chain.is_some_and(|c| c.deltas >= manifest::feed::MAX_CHAIN) {
            // Planned again after the partition's next commit starts the
            // chain again.
            continue;
        }
        let delta = chain.and_then(|c| Some((c, manifest::delta::Delta::between(current, &next)?)));
        match delta {
            Some((c, d)) => {
                let entry = manifest::feed::HeadEntry::for_delta(&next, d, c.object_version);
                by_head.push((i, next, entry));
            }
            None => as_objects.push((i, next)),
        }
    }
    let committed: Vec<(usize, PartitionManifest, Result<(), StoreError>)> =
        futures::stream::iter(as_objects.into_iter().map(|(i, next)| async move {
            let r = store.commit_manifest(&next).await;
            (i, next, r)
        }))
        .buffer_unordered(CONCURRENT_JOBS)
        .collect()
        .await;
    for (i, next, r) in committed {
        let p = &planned[i];
        match r {
            Ok(()) => {
                feed.queue(&next);
                moved(partitions, p, next, &mut done);
            }
            Err(StoreError::Conflict { .. }) => {
                // Another writer committed that version: read it again.
                if let Some(st) = partitions.get_mut(&p.tp) {
                    st.reset();
                }
            }
            Err(e) => fail(partitions, &p.tp, e, &mut errors),
        }
    }
    if !by_head.is_empty() {
        let entries = by_head.iter().map(|(_, _, e)| e.clone()).collect();
        match feed.commit_deltas(store, writer, entries).await {
            Ok((published, refused)) => {
                done.heads += u64::from(published);
                for (i, next, e) in by_head {
                    let p = &planned[i];
                    if refused.contains(&e.map_key()) {
                        tracing::info!(partition = %p.tp, "the head moved the partition first: reading it again");
                        if let Some(st) = partitions.get_mut(&p.tp) {
                            st.reset();
                        }
                    } else {
                        moved(partitions, p, next, &mut done);
                    }
                }
            }
            Err(e) => {
                for (i, _, _) in by_head {
                    let tp = &planned[i].tp;
                    if let Some(st) = partitions.get_mut(tp) {
                        st.reset();
                    }
                    errors.push((
                        tp.to_string(),
                        format!("the head committing its compaction: {e}"),
                    ));
                }
            }
        }
    }
    if done.ranges > 0 {
        tracing::info!(
            partitions = planned.len(),
            objects = done.objects,
            bytes = done.bytes,
            ranges = done.ranges,
            heads = done.heads,
            "compacted packed ranges"
        );
    }
    (done, errors)
}

/// The cycle's jobs: at most one a partition; [`MAX_JOBS`] own objects,
/// [`MAX_SHARED_JOBS`] shared ones (only when one is due) and
/// [`MAX_CYCLE_BYTES`] in all (the first whatever its size).
fn plan_cycle(
    store: &ManifestStore,
    partitions: &BTreeMap<TopicPartition, ShipperSlot>,
    feed: &Feed,
    policy: &Policy,
    head_deltas: bool,
    now_ms: i64,
) -> Vec<Planned> {
    let mut own: Vec<Planned> = Vec::new();
    let mut shared: Vec<Planned> = Vec::new();
    let mut bytes = 0u64;
    for st in partitions.values() {
        if bytes >= MAX_CYCLE_BYTES {
            break;
        }
        let leads = st.role.as_ref().is_none_or(crate::leadership::Role::leads);
        if st.health != Health::Ok || !st.loaded || !leads {
            continue;
        }
        let (Some(pk), Some(m)) = (st.pk.clone(), st.manifest.as_ref()) else {
            continue;
        };
        let chain = if head_deltas {
            ChainPosition::of(feed.entry(&st.tp, &pk).as_ref(), m.version)
        } else {
            None
        };
        // A full chain starts again at the partition's next commit first.
        if chain.is_some_and(|c| c.deltas >= manifest::feed::MAX_CHAIN) {
            continue;
        }
        let jobs = plan(m, now_ms, |r| shipped_ms(store, r), policy);
        let pick = jobs
            .iter()
            .find(|j| j.output == Output::Own && own.len() < MAX_JOBS)
            .or_else(|| {
                jobs.iter()
                    .find(|j| j.output == Output::Shared && shared.len() < MAX_SHARED_JOBS)
            });
        let Some(job) = pick.cloned() else {
            continue;
        };
        bytes = bytes.saturating_add(job.bytes);
        let p = Planned {
            tp: st.tp.clone(),
            pk,
            manifest: m.clone(),
            job,
        };
        match p.job.output {
            Output::Own => own.push(p),
            Output::Shared => shared.push(p),
        }
    }
    if shared_due(shared.iter().map(|p| &p.job)) {
        own.extend(shared);
    }
    own
}

/// The jobs of `batch` (`(position in planned, bytes)`), read ahead
/// together (neighbouring partitions' ranges sit side by side in each
/// pack: one ranged GET per run of them, not one per range), in order; a
/// job that could not be read has its error set in `merged`.
async fn read_jobs(
    store: &ManifestStore,
    planned: &[Planned],
    batch: &[(usize, u64)],
    merged: &mut [Result<ShippedRange, StoreError>],
) -> Vec<(usize, JobBytes)> {
    let bytes: u64 = batch.iter().map(|(_, b)| b).sum();
    let ranges = |i: usize| &planned[i].manifest.ranges[planned[i].job.ranges.clone()];
    let wanted = batch.iter().flat_map(|&(i, _)| ranges(i).iter());
    let runs = bucket::ahead::runs(
        wanted,
        READ_AHEAD_GAP,
        READ_AHEAD_RUN,
        bytes.saturating_mul(2),
    );
    store.read_ahead(runs).await;
    let jobs: Vec<usize> = batch.iter().map(|(i, _)| *i).collect();
    let read: Vec<(usize, Result<JobBytes, StoreError>)> = futures::stream::iter(
        jobs.into_iter()
            .map(|i| async move { (i, read_job(store, ranges(i)).await) }),
    )
    .buffered(CONCURRENT_JOBS)
    .collect()
    .await;
    store.drop_read_ahead();
    let mut out = Vec::with_capacity(read.len());
    for (i, r) in read {
        match r {
            Ok(b) => out.push((i, b)),
            Err(e) => merged[i] = Err(e),
        }
    }
    out
}

/// A job's ranges, read (from the read-ahead, else one GET each) and
/// their CRC-32C checked, in order.
async fn read_job(store: &ManifestStore, run: &[ShippedRange]) -> Result<JobBytes, StoreError> {
    let mut out = JobBytes::default();
    for r in run {
        let got = store.get_in(&r.key, r.object_range()).await?;
        manifest::range_check::verify_object(r, &got).map_err(|e| StoreError::Identity {
            key: r.key.clone(),
            reason: e.to_string(),
        })?;
        out.len += got.len() as u64;
        out.parts.push(got);
    }
    Ok(out)
}

/// An own job's object, written under a fresh upload id: the range that
/// names it.
async fn write_own(
    store: &ManifestStore,
    p: &Planned,
    bytes: JobBytes,
) -> Result<ShippedRange, StoreError> {
    let run = &p.manifest.ranges[p.job.ranges.clone()];
    let not_merged = || StoreError::Identity {
        key: String::new(),
        reason: "the ranges to compact do not merge".into(),
    };
    let first = run.first().ok_or_else(not_merged)?;
    let epoch = first.epochs.entries().first().map_or(0, |e| e.epoch);
    let last = run.last().map_or(first.last_offset, |r| r.last_offset);
    let key = store.layout().data_key(
        &p.pk,
        first.base_offset,
        last,
        epoch,
        &bucket::upload_id::fresh_string(),
    )?;
    let crc = bytes.crc32c();
    put_own(store, &p.tp, &key, bytes.parts).await?;
    merged_range(run, key, crc, None).ok_or_else(not_merged)
}

/// Jobs `(position in planned, B)` in runs of at most `max` bytes (`len`
/// of each; a job larger than that is a run alone), in order.
fn chunks<B>(jobs: Vec<(usize, B)>, len: impl Fn(&B) -> u64, max: u64) -> Vec<Vec<(usize, B)>> {
    let mut out: Vec<Vec<(usize, B)>> = Vec::new();
    let mut total = 0u64;
    for job in jobs {
        let b = len(&job.1);
        match out.last_mut() {
            Some(run) if total + b <= max => run.push(job),
            _ => {
                out.push(vec![job]);
                total = 0;
            }
        }
        total += b;
    }
    out
}

/// One compacted pack for `chunk`'s jobs, their bytes one after another
/// under a fresh pack key; each job's range is set in `merged`. Returns
/// the objects and bytes written.
async fn write_shared(
    store: &ManifestStore,
    planned: &[Planned],
    chunk: Vec<(usize, JobBytes)>,
    merged: &mut [Result<ShippedRange, StoreError>],
) -> (u64, u64) {
    let mut body = JobBytes::default();
    let mut at: Vec<(usize, u64, u32)> = Vec::with_capacity(chunk.len());
    for (i, b) in chunk {
        at.push((i, body.len, b.crc32c()));
        body.len += b.len;
        body.parts.extend(b.parts);
    }
    let size = body.len;
    let Some(tp) = at.first().map(|(i, _, _)| planned[*i].tp.clone()) else {
        return (0, 0);
    };
    let key = match store.layout().pack_key(&bucket::upload_id::fresh_string()) {
        Ok(k) => k,
        Err(e) => {
            for (i, _, _) in at {
                merged[i] = Err(e.clone().into());
            }
            return (0, 0);
        }
    };
    if let Err(e) = put_own(store, &tp, &key, body.parts).await {
        let reason = e.to_string();
        for (i, _, _) in at {
            merged[i] = Err(StoreError::Identity {
                key: key.clone(),
                reason: format!("the compacted pack was not written: {reason}"),
            });
        }
        return (0, 0);
    }
    tracing::debug!(key, jobs = at.len(), bytes = size, "compacted pack written");
    for (i, offset, crc) in at {
        let p = &planned[i];
        merged[i] = merged_range(
            &p.manifest.ranges[p.job.ranges.clone()],
            key.clone(),
            crc,
            Some(offset),
        )
        .ok_or_else(|| StoreError::Identity {
            key: key.clone(),
            reason: "the ranges to compact do not merge".into(),
        });
    }
    (1, size)
}

/// `p`'s partition holds `next` now.
fn moved(
    partitions: &mut BTreeMap<TopicPartition, ShipperSlot>,
    p: &Planned,
    next: PartitionManifest,
    done: &mut Compacted,
) {
    let Some(st) = partitions.get_mut(&p.tp) else {
        return;
    };
    let ranges = p.job.ranges.len();
    tracing::debug!(partition = %st.tp, version = next.version, ranges, bytes = p.job.bytes, reason = ?p.job.reason, output = ?p.job.output, "compacted packed ranges");
    done.ranges += ranges as u64;
    st.manifest = Some(next);
}

/// `tp`'s job failed: reported, retried next cycle.
fn fail(
    partitions: &BTreeMap<TopicPartition, ShipperSlot>,
    tp: &TopicPartition,
    e: StoreError,
    errors: &mut Vec<(String, String)>,
) {
    if partitions.contains_key(tp) {
        let e = ShipperError::store(tp.to_string(), e);
        tracing::warn!(partition = %tp, error = %e, "compaction failed; retried next cycle");
        errors.push((tp.to_string(), e.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_jobs_go_into_packs_of_at_most_the_bound_in_order() {
        // (job sizes, the sizes of each pack's jobs)
        let cases: &[(&[u64], &[&[u64]])] = &[
            (&[], &[]),
            (&[10], &[&[10]]),
            (&[10, 50, 4], &[&[10, 50, 4]]),
            (&[10, 50, 5], &[&[10, 50], &[5]]),
            (&[100, 5, 5], &[&[100], &[5, 5]]),
            (&[5, 100, 64], &[&[5], &[100], &[64]]),
        ];
        for (sizes, want) in cases {
            let jobs: Vec<(usize, u64)> = sizes.iter().copied().enumerate().collect();
            let got: Vec<Vec<u64>> = chunks(jobs, |b| *b, 64)
                .into_iter()
                .map(|c| c.into_iter().map(|(_, b)| b).collect())
                .collect();
            let want: Vec<Vec<u64>> = want.iter().map(|c| c.to_vec()).collect();
            assert_eq!(got, want, "{sizes:?}");
        }
    }
}
