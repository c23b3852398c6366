//! Compaction behind the tail (issue 30, "Layout 2", step 4): each cycle,
//! the partitions this shipper holds have their packed ranges that are due
//! (`manifest::compact::plan`: a rolled segment, a large or long run, or
//! one `compact_after` old) rewritten into one object of the partition's
//! own, and a manifest version names it in their place.
//!
//! Invariants:
//! - the ranges are read (one ranged GET each) and their CRC-32C checked
//!   before anything is written; the new object is written under a fresh
//!   upload id (create-only) before the version that names it, and the
//!   version is create-if-absent: a lost race resets the partition (read
//!   again next cycle) and leaves the object to the sweep;
//! - the version is an object, not a delta (it replaces ranges), so it
//!   ends the partition's chain of deltas;
//! - at most one job per partition and [`MAX_JOBS`] in all per cycle, so a
//!   backlog is compacted over several cycles without holding up shipping;
//! - packs are never deleted here: a pack no latest version names is
//!   garbage-collected later.

use std::collections::BTreeMap;

use bucket::store::{ManifestStore, StoreError};
use bytes::Bytes;
use kafkalog::TopicPartition;
use manifest::compact::{Policy, merged_range, plan, replace};
use manifest::layout::parse_upload_time_ms;
use manifest::partition::ShippedRange;

use crate::error::ShipperError;
use crate::feed::Feed;
use crate::health::Health;
use crate::partition::ShipperSlot;

/// Most compaction jobs per cycle.
pub(crate) const MAX_JOBS: usize = 8;

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
    let mut done = Compacted::default();
    let mut errors = Vec::new();
    let mut jobs = 0;
    for st in partitions.values_mut() {
        if jobs >= MAX_JOBS {
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
        jobs += 1;
        let run = &m.ranges[job.ranges.clone()];
        let result = async {
            let mut bytes = Vec::with_capacity(usize::try_from(job.bytes).unwrap_or(0));
            for r in run {
                let got = store.get_in(&r.key, r.object_range()).await?;
                manifest::range_check::verify_object(r, &got).map_err(|e| {
                    StoreError::Identity {
                        key: r.key.clone(),
                        reason: e.to_string(),
                    }
                })?;
                bytes.extend_from_slice(&got);
            }
            let first = &run[0];
            let epoch = first.epochs.entries().first().map_or(0, |e| e.epoch);
            let last = run.last().map_or(first.last_offset, |r| r.last_offset);
            let key = store.layout().data_key(
                &pk,
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
            let mut next = replace(&m, &job, merged).ok_or_else(|| StoreError::Identity {
                key: String::new(),
                reason: "the compacted range does not fit the manifest".into(),
            })?;
            next.writer = writer.to_string();
            next.committed_at_ms = now_ms;
            store.commit_manifest(&next).await?;
            Ok::<_, StoreError>((next, size))
        }
        .await;
        match result {
            Ok((next, size)) => {
                tracing::info!(partition = %st.tp, version = next.version, ranges = run.len(), bytes = size, reason = ?job.reason, "compacted packed ranges into an object of the partition's own");
                done.objects += 1;
                done.bytes += size;
                done.ranges += run.len() as u64;
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
