//! Deleting a partition's objects that no manifest version names any more
//! (uploads a crash or a lost commit left behind, ranges dropped by
//! retention, cuts or compaction).
//!
//! Invariants:
//! - only the writer of the latest version sweeps: before deleting, one GET
//!   checks that no version follows the one held (if one does, the
//!   partition reads the latest again and sweeps later);
//! - an object is deleted only when it is a data or page key of this
//!   partition (as `manifest::layout` parses them), the latest version and
//!   its pages do not name it, and it has been unreferenced for the grace:
//!   counted from when this process dropped it, else from the upload time
//!   in its key's upload id, else from its last-modified time. The grace
//!   keeps uploads in flight elsewhere safe;
//! - with `head_deltas`, a head naming a newer version than the one held
//!   (made by another writer's deltas, which no manifest object shows)
//!   resets the partition before the sweep (`Shipper::sweep`), so it is
//!   not swept;
//! - which partitions are due is decided by [`is_due`] (pure).

use std::collections::{BTreeMap, HashSet};

use bucket::store::{ManifestStore, StoreError};
use futures::{StreamExt, TryStreamExt};
use kafkalog::TopicPartition;
use manifest::layout::{ClusterLayout, PartitionKey, parse_upload_time_ms};
use object_store::path::Path as ObjectPath;

use crate::commit::load_page;
use crate::error::ShipperError;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::partition::{PageCache, ShipperSlot};

/// When partitions are swept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SweepPolicy {
    /// How long an object stays unreferenced before it is deleted.
    pub(crate) grace_ms: i64,
    /// Least time between two sweeps of a partition with changes.
    pub(crate) interval_ms: i64,
    /// Sweep each partition once when first loaded.
    pub(crate) on_start: bool,
    /// When this process started (the first interval counts from it).
    pub(crate) started_ms: i64,
}

/// True when `st` is swept now: it ships and holds a version, and either
/// `force`, or it has changes and is due (never swept and `on_start`, or
/// the interval passed since its last sweep or the start).
pub(crate) fn is_due(st: &ShipperSlot, policy: &SweepPolicy, now: i64, force: bool) -> bool {
    if st.health != Health::Ok || !st.loaded || st.manifest.is_none() {
        return false;
    }
    force
        || (st.dirty
            && (st.last_sweep_ms.is_none() && policy.on_start
                || now - st.last_sweep_ms.unwrap_or(policy.started_ms) >= policy.interval_ms))
}

/// Most partitions swept in one cycle (each is a LIST and a GET at
/// least): at the start of a shipper of thousands of partitions the sweep
/// is spread over cycles instead of holding up the first one.
pub(crate) const MAX_PER_CYCLE: usize = 16;

/// Partitions swept at once.
const CONCURRENT_SWEEPS: usize = 8;

/// Which of the partitions due are swept this cycle: all when `force`,
/// else the [`MAX_PER_CYCLE`] swept longest ago (never swept first).
fn pick(mut due: Vec<(TopicPartition, Option<i64>)>, force: bool) -> Vec<TopicPartition> {
    if !force {
        due.sort_by_key(|(tp, last)| (last.unwrap_or(i64::MIN), tp.clone()));
        due.truncate(MAX_PER_CYCLE);
    }
    due.into_iter().map(|(tp, _)| tp).collect()
}

/// Sweeps the partitions due ([`pick`]). Returns the objects deleted and the errors
/// by partition.
pub(crate) async fn sweep_due(
    store: &ManifestStore,
    pages: &PageCache,
    partitions: &mut BTreeMap<TopicPartition, ShipperSlot>,
    policy: &SweepPolicy,
    now: i64,
    force: bool,
    metrics: &Metrics,
) -> (u64, Vec<(String, String)>) {
    let due = pick(
        partitions
            .values()
            .filter(|st| is_due(st, policy, now, force))
            .map(|st| (st.tp.clone(), st.last_sweep_ms))
            .collect(),
        force,
    );
    let due: std::collections::BTreeSet<TopicPartition> = due.into_iter().collect();
    // The partitions are swept [`CONCURRENT_SWEEPS`] at a time (each is a
    // GET and LISTs: one after the other, 16 of them took most of a 1 s
    // cycle on a slow server while a shipper of 1,000 partitions swept at
    // its start).
    let swept: Vec<(TopicPartition, Result<u64, ShipperError>)> = futures::stream::iter(
        partitions
            .iter_mut()
            .filter(|(tp, _)| due.contains(*tp))
            .map(|(tp, st)| async move {
                (
                    tp.clone(),
                    sweep_partition(store, pages, st, now, policy.grace_ms).await,
                )
            }),
    )
    .buffer_unordered(CONCURRENT_SWEEPS)
    .collect()
    .await;
    let mut deleted = 0;
    let mut errors = Vec::new();
    for (tp, r) in swept {
        match r {
            Ok(n) => {
                deleted += n;
                metrics.deleted_objects.inc_by(n);
            }
            Err(e) => {
                tracing::warn!(partition = %tp, error = %e, "sweep failed; retrying later");
                metrics.error(e.kind());
                errors.push((tp.to_string(), e.to_string()));
            }
        }
    }
    (deleted, errors)
}

/// Since when `key` counts as unreferenced, when it is one of `pk`'s data
/// or page keys (`None`: not ours, never deleted): when this process
/// dropped it, else the upload time in its upload id, else its
/// last-modified time (pages written before page upload ids).
fn unreferenced_since(
    layout: &ClusterLayout,
    pk: &PartitionKey,
    key: &str,
    dropped_ms: Option<i64>,
    last_modified_ms: i64,
) -> Option<i64> {
    let upload_id = match (
        layout.parse_data_key(pk, key),
        layout.parse_page_key(pk, key),
    ) {
        (Ok(data), _) => Some(data.upload_id),
        (_, Ok(page)) => page.upload_id,
        (Err(_), Err(_)) => return None,
    };
    Some(
        dropped_ms
            .or_else(|| upload_id.as_deref().and_then(parse_upload_time_ms))
            .unwrap_or(last_modified_ms),
    )
}

/// Deletes the partition's objects that its latest manifest (and pages)
/// do not reference and that have been unreferenced (or, for objects this
/// process did not see dropped, uploaded) for the grace period.
async fn sweep_partition(
    store: &ManifestStore,
    pages: &PageCache,
    st: &mut ShipperSlot,
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
    for dir in [layout.data_dir(&pk), layout.pages_dir(&pk)] {
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
        let Some(since) = unreferenced_since(
            layout,
            &pk,
            &key,
            st.dropped.get(&key).copied(),
            meta.last_modified.timestamp_millis(),
        ) else {
            continue;
        };
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
    use manifest::layout::UploadId;
    use std::path::PathBuf;

    /// One row per case: (what, partitions due with their last sweep,
    /// force, the partitions picked).
    #[test]
    fn a_cycle_sweeps_at_most_its_share_longest_waiting_first() {
        let tp = |p: i32| TopicPartition::new("t", p).expect("tp");
        let many: Vec<(TopicPartition, Option<i64>)> = (0..40)
            .map(|p| (tp(p), (p % 2 == 0).then_some(1000 - p as i64)))
            .collect();
        let never: Vec<TopicPartition> = (0..40).filter(|p| p % 2 == 1).take(16).map(tp).collect();
        type Row = (
            &'static str,
            Vec<(TopicPartition, Option<i64>)>,
            bool,
            Vec<TopicPartition>,
        );
        let rows: Vec<Row> = vec![
            ("none due", vec![], false, vec![]),
            (
                "fewer than the share: all, oldest first",
                vec![(tp(1), Some(50)), (tp(2), None), (tp(3), Some(10))],
                false,
                vec![tp(2), tp(3), tp(1)],
            ),
            (
                "more than the share: the never swept first",
                many.clone(),
                false,
                never,
            ),
            (
                "forced: all",
                many.clone(),
                true,
                many.iter().map(|(t, _)| t.clone()).collect(),
            ),
        ];
        for (what, due, force, want) in rows {
            assert_eq!(pick(due, force), want, "{what}");
        }
    }

    #[test]
    fn keys_the_sweep_may_delete_and_since_when() {
        let layout = ClusterLayout::new("p", "c").expect("layout");
        let pk = PartitionKey {
            tp: TopicPartition::new("t", 0).expect("tp"),
            topic_id: "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
        };
        let id = format!("{:011x}{:016x}", 1_700_000_000_123i64, 5);
        let data = layout.data_key(&pk, 0, 9, 1, &id).expect("key");
        let page = layout.page_key(&pk, 0, 99, &UploadId::parse(&id).expect("id"));
        let old_page = format!(
            "{}/00000000000000000000-00000000000000000099.json",
            layout.pages_dir(&pk)
        );
        let notes = format!("{}/notes.json", layout.pages_dir(&pk));
        // (key, dropped at) -> since
        let table: [(&str, Option<i64>, Option<i64>); 6] = [
            (&data, None, Some(1_700_000_000_123)),
            (&data, Some(5), Some(5)),
            (&page, None, Some(1_700_000_000_123)),
            (&old_page, None, Some(42)),
            (&notes, None, None),
            ("p/other", Some(5), None),
        ];
        for (key, dropped, since) in table {
            assert_eq!(
                unreferenced_since(&layout, &pk, key, dropped, 42),
                since,
                "{key}"
            );
        }
    }

    fn loaded(dirty: bool, last_sweep_ms: Option<i64>) -> ShipperSlot {
        let tp = TopicPartition::new("t", 0).expect("tp");
        let mut st = ShipperSlot::new(tp.clone(), PathBuf::from("/d"), 0);
        st.loaded = true;
        st.manifest = Some(manifest::partition::PartitionManifest::new(
            "c",
            &tp,
            "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
        ));
        st.dirty = dirty;
        st.last_sweep_ms = last_sweep_ms;
        st
    }

    #[test]
    fn which_partitions_are_due_for_a_sweep() {
        let policy = |on_start| SweepPolicy {
            grace_ms: 0,
            interval_ms: 100,
            on_start,
            started_ms: 1_000,
        };
        // (dirty, last sweep, sweep on start, now, force) -> due
        let table = [
            (false, None, true, 5_000, false, false),
            (false, None, false, 5_000, true, true),
            (true, None, true, 1_000, false, true),
            (true, None, false, 1_050, false, false),
            (true, None, false, 1_100, false, true),
            (true, Some(2_000), true, 2_099, false, false),
            (true, Some(2_000), true, 2_100, false, true),
        ];
        for (dirty, last, on_start, now, force, due) in table {
            let st = loaded(dirty, last);
            assert_eq!(
                is_due(&st, &policy(on_start), now, force),
                due,
                "dirty {dirty}, last {last:?}, on start {on_start}, now {now}, force {force}"
            );
        }
        let mut fenced = loaded(true, None);
        fenced.health = Health::Fenced {
            writer: "w".into(),
            until_ms: 0,
        };
        assert!(!is_due(&fenced, &policy(true), 5_000, true));
    }
}
