//! Compaction behind the tail (issue 30, "Layout 2", step 4): each cycle,
//! the partitions this shipper holds have their packed ranges that are due
//! (`manifest::compact::plan`: a rolled segment, a large or long run, or
//! one `compact_after` old) rewritten into one object of the partition's
//! own, and a manifest version names it in their place.
//!
//! Invariants:
//! - the ranges are read and their CRC-32C checked before anything is
//!   written (the cycle's jobs read ahead together: one ranged GET per
//!   run of neighbouring partitions' ranges in a pack, `bucket::ahead`); the new object is written under a fresh
//!   upload id (create-only) before the version that names it, and the
//!   version is create-if-absent: a lost race resets the partition (read
//!   again next cycle) and leaves the object to the sweep;
//! - the version is an object, not a delta (it replaces ranges), so it
//!   ends the partition's chain of deltas;
//! - at most one job per partition and [`MAX_JOBS`] (and 256 MiB) in all
//!   per cycle, 8 at once, so a backlog is compacted over several cycles
//!   without holding up shipping;
//! - packs are never deleted here: a pack no latest version names is
//!   garbage-collected later.

use std::collections::BTreeMap;

use bucket::store::{ManifestStore, StoreError};
use bytes::Bytes;
use futures::StreamExt;
use kafkalog::TopicPartition;
use manifest::compact::{Job, Policy, merged_range, plan, replace};
use manifest::layout::PartitionKey;
use manifest::layout::parse_upload_time_ms;
use manifest::partition::{PartitionManifest, ShippedRange};

use crate::error::ShipperError;
use crate::feed::Feed;
use crate::health::Health;
use crate::partition::ShipperSlot;

/// Most compaction jobs per cycle: partitions that started together come
/// due together (1,000 at once at a 1 s tail), and a due run must be
/// rewritten before its manifest seals it into pages.
pub(crate) const MAX_JOBS: usize = 32;

/// Most bytes of jobs a cycle plans (the first job whatever its size).
const MAX_CYCLE_BYTES: u64 = 256 << 20;

/// Jobs rewritten at once.
const CONCURRENT_JOBS: usize = 8;

/// Read-ahead of the jobs' ranges: neighbours this close share a GET...
const READ_AHEAD_GAP: u64 = 1024;
/// ...of at most this many bytes.
const READ_AHEAD_RUN: u64 = 8 << 20;

/// What a cycle's compaction did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compacted {
    /// Objects written.
    pub(crate) objects: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// Packed ranges they replace.
    pub(crate) ranges: u64,
}

/// When a range was shipped: the upload time in its pack's key.
fn shipped_ms(store: &ManifestStore, r: &ShippedRange) -> Option<i64> {
    let id = store.layout().parse_pack_key(&r.key).ok()?;
    parse_upload_time_ms(id)
}

/// Compacts what is due in `partitions` at `now_ms`; the versions written
/// are queued in `feed`. Errors are per partition, with its name.
pub(crate) async fn compact_due(
    store: &ManifestStore,
    partitions: &mut BTreeMap<TopicPartition, ShipperSlot>,
    feed: &mut Feed,
    policy: &Policy,
    writer: &str,
    now_ms: i64,
) -> (Compacted, Vec<(String, String)>) {
    // The cycle's jobs: at most one a partition, MAX_JOBS and
    // MAX_CYCLE_BYTES in all (the first whatever its size).
    let mut planned: Vec<(TopicPartition, PartitionKey, PartitionManifest, Job)> = Vec::new();
    let mut planned_bytes = 0u64;
    for st in partitions.values() {
        if planned.len() >= MAX_JOBS || planned_bytes >= MAX_CYCLE_BYTES {
            break;
        }
        let leads = st.role.as_ref().is_none_or(crate::leadership::Role::leads);
        if st.health != Health::Ok || !st.loaded || !leads {
            continue;
        }
        let (Some(pk), Some(m)) = (st.pk.clone(), st.manifest.clone()) else {
            continue;
        };
        let Some(job) = plan(&m, now_ms, |r| shipped_ms(store, r), policy)
            .into_iter()
            .next()
        else {
            continue;
        };
        planned_bytes = planned_bytes.saturating_add(job.bytes);
        planned.push((st.tp.clone(), pk, m, job));
    }
    if planned.is_empty() {
        return (Compacted::default(), Vec::new());
    }
    // Neighbouring partitions' ranges sit side by side in each pack: one
    // ranged GET per run of them, not one per range.
    let wanted = planned
        .iter()
        .flat_map(|(_, _, m, job)| m.ranges[job.ranges.clone()].iter());
    let runs = bucket::ahead::runs(
        wanted,
        READ_AHEAD_GAP,
        READ_AHEAD_RUN,
        planned_bytes.saturating_mul(2),
    );
    store.read_ahead(runs).await;
    let results: Vec<_> =
        futures::stream::iter(planned.into_iter().map(|(tp, pk, m, job)| async move {
            let result = rewrite(store, &pk, &m, &job, writer, now_ms).await;
            (tp, job, result)
        }))
        .buffer_unordered(CONCURRENT_JOBS)
        .collect()
        .await;
    store.drop_read_ahead();
    let mut done = Compacted::default();
    let mut errors = Vec::new();
    for (tp, job, result) in results {
        let Some(st) = partitions.get_mut(&tp) else {
            continue;
        };
        let ranges = job.ranges.len();
        match result {
            Ok((next, size)) => {
                tracing::info!(partition = %st.tp, version = next.version, ranges, bytes = size, reason = ?job.reason, "compacted packed ranges into an object of the partition's own");
                done.objects += 1;
                done.bytes += size;
                done.ranges += ranges as u64;
                feed.queue(&next);
                st.manifest = Some(next);
            }
            Err(StoreError::Conflict { .. }) => {
                // Another writer committed that version: read it again.
                st.reset();
            }
            Err(e) => {
                let e = ShipperError::store(st.tp.to_string(), e);
                tracing::warn!(partition = %st.tp, error = %e, "compaction failed; retried next cycle");
                errors.push((st.tp.to_string(), e.to_string()));
            }
        }
    }
    (done, errors)
}

/// One job: its ranges read (from the read-ahead, else one GET each) and
/// checked, the object written, then the version naming it.
async fn rewrite(
    store: &ManifestStore,
    pk: &PartitionKey,
    m: &PartitionManifest,
    job: &Job,
    writer: &str,
    now_ms: i64,
) -> Result<(PartitionManifest, u64), StoreError> {
    let run = &m.ranges[job.ranges.clone()];
    let mut bytes = Vec::with_capacity(usize::try_from(job.bytes).unwrap_or(0));
    for r in run {
        let got = store.get_in(&r.key, r.object_range()).await?;
        manifest::range_check::verify_object(r, &got).map_err(|e| StoreError::Identity {
            key: r.key.clone(),
            reason: e.to_string(),
        })?;
        bytes.extend_from_slice(&got);
    }
    let first = run.first().ok_or_else(|| StoreError::Identity {
        key: String::new(),
        reason: "a compaction job without ranges".into(),
    })?;
    let epoch = first.epochs.entries().first().map_or(0, |e| e.epoch);
    let last = run.last().map_or(first.last_offset, |r| r.last_offset);
    let key = store.layout().data_key(
        pk,
        first.base_offset,
        last,
        epoch,
        &bucket::upload_id::fresh_string(),
    )?;
    let crc = kafkalog::batch::crc32c(&bytes);
    let size = bytes.len() as u64;
    store.put_new(&key, Bytes::from(bytes)).await?;
    let merged = merged_range(run, key, crc).ok_or_else(|| StoreError::Identity {
        key: String::new(),
        reason: "the ranges to compact do not merge".into(),
    })?;
    let mut next = replace(m, job, merged).ok_or_else(|| StoreError::Identity {
        key: String::new(),
        reason: "the compacted range does not fit the manifest".into(),
    })?;
    next.writer = writer.to_string();
    next.committed_at_ms = now_ms;
    store.commit_manifest(&next).await?;
    Ok((next, size))
}
