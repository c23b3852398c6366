//! Two shippers racing on one partition (different writer ids, one source
//! partition, one bucket): neither can replace an object that a committed
//! version of the other names. Pages are create-only (a fresh upload id
//! per write), data keys carry an upload id, versions are create-if-absent.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bucket::store::{ManifestStore, StoreError};
use bytes::Bytes;
use common::*;
use kafkalog::LogDir;
use manifest::layout::PartitionKey;
use shipper::clock::ManualClock;
use shipper::{CycleReport, Shipper};

const ID: u8 = 40;

/// Every object a committed version names (the version itself, its pages,
/// their ranges' objects and its inline ranges' objects), with its bytes
/// when first seen. An object seen again must have the same bytes.
#[derive(Default)]
struct Named {
    versions: BTreeSet<u64>,
    objects: BTreeMap<String, Bytes>,
    writers: BTreeSet<String>,
    /// Times the newest head named a version made by deltas.
    chained: usize,
}

impl Named {
    async fn see(&mut self, ms: &ManifestStore, key: &str) {
        let bytes = ms.get(key).await.expect("a named object exists");
        match self.objects.get(key) {
            Some(before) => assert_eq!(before, &bytes, "{key} was replaced"),
            None => {
                self.objects.insert(key.to_string(), bytes);
            }
        }
    }

    /// Records every version committed since the last call (the objects,
    /// and the newest head's version, which deltas may have made).
    async fn record(&mut self, ms: &ManifestStore, pk: &PartitionKey) {
        let head = ms.latest_head(None).await.expect("head");
        self.chained += usize::from(
            head.and_then(|h| h.partitions.get(&pk.tp.to_string()).cloned())
                .is_some_and(|e| e.chain.is_some()),
        );
        if let Some(m) = ms.newest_manifest(pk).await.expect("newest version") {
            self.writers.insert(m.writer.clone());
            for r in &m.ranges {
                self.see(ms, &r.key).await;
            }
        }
        for m in all_versions(ms, &pk.tp, pk.topic_id).await {
            if !self.versions.insert(m.version) {
                continue;
            }
            self.writers.insert(m.writer.clone());
            self.see(ms, &ms.layout().manifest_key(pk, m.version)).await;
            for p in &m.pages {
                self.see(ms, &p.key).await;
                for r in ms.get_page(&p.key).await.expect("page").ranges {
                    self.see(ms, &r.key).await;
                }
            }
            for r in &m.ranges {
                self.see(ms, &r.key).await;
            }
        }
    }

    /// Every object any committed version named is still there, unchanged.
    async fn check_none_replaced(&self, ms: &ManifestStore) {
        for (key, before) in &self.objects {
            match ms.get(key).await {
                Ok(now) => assert_eq!(&now, before, "{key} was replaced"),
                Err(StoreError::NotFound { .. }) => panic!("{key} is gone"),
                Err(e) => panic!("{key}: {e}"),
            }
        }
    }
}

fn shipper(
    b: &Backend,
    root: &std::path::Path,
    id: &str,
    clock: &ManualClock,
    (pack_below, head_deltas): (u64, bool),
    background_compaction: bool,
) -> Shipper {
    let mut o = options(root, b, id);
    o.pack_below = pack_below;
    o.head_deltas = head_deltas;
    // One batch per object: enough ranges to seal pages.
    o.max_object_size = 1;
    o.fence_backoff = Duration::from_secs(1);
    o.upload_concurrency = 16;
    Shipper::new(o, b.store())
        .expect("shipper")
        .with_clock(Arc::new(clock.clone()))
        .with_background_compaction(background_compaction)
}

fn errors_other_than_fencing(r: &CycleReport) -> Vec<&(String, String)> {
    r.errors
        .iter()
        .filter(|(_, e)| !e.contains("another writer won") && !e.contains("committed by shipper"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shippers_racing_on_one_partition_never_replace_what_the_other_committed() {
    race((0, false), false).await;
}

/// The same with a cycle's ranges in packs (`pack_below`, issue 30): a
/// pack another shipper's committed version names is never replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shippers_racing_with_packs_never_replace_what_the_other_committed() {
    race((1 << 20, false), false).await;
}

/// The same with versions that only append committed by heads as deltas
/// (`head_deltas`, issue 30): the head's create-if-absent write fences the
/// two shippers as the manifest's does, and nothing committed is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shippers_racing_with_head_deltas_never_replace_what_the_other_committed() {
    race((1 << 20, true), false).await;
}

/// The same with compaction written in the background and committed by a
/// later cycle (as under `shipper run`): a compaction the other shipper's
/// commits overtake is refused by the head or finds its ranges moved, and
/// replaces nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shippers_racing_with_background_compaction_never_replace_what_the_other_committed() {
    race((1 << 20, true), true).await;
}

async fn race(layout: (u64, bool), background: bool) {
    let pack_below = layout.0;
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let t = tp("raced", 0);
        let pk = PartitionKey {
            tp: t.clone(),
            topic_id: topic_id(ID),
        };
        let mut log = open_log(&dir, &t, topic_id(ID), 64 * 1024);
        let clock = ManualClock::new();
        let mut a = shipper(&b, &root, "shipper-a", &clock, layout, background);
        let mut c = shipper(&b, &root, "shipper-b", &clock, layout, background);
        let ms = b.manifests();
        let mut named = Named::default();
        let mut fenced = 0;
        // Four rounds of 150 one-batch ranges: pages are sealed from the
        // 513th range on, in the last (concurrent) round.
        for round in 0..4 {
            for step in 0..3 {
                let (ra, rc) = if round % 2 == 0 {
                    // Interleaved, with new batches before each: each ships
                    // from what it last saw, so the one behind loses its
                    // commit to the other's version.
                    append_n(&mut log, 25, 1, 0, 40);
                    let ra = a.run_cycle().await;
                    named.record(&ms, &pk).await;
                    append_n(&mut log, 25, 1, 0, 40);
                    let rc = c.run_cycle().await;
                    (ra, rc)
                } else {
                    // At once: both plan from the same version and race
                    // for the next number (and for pages over the same
                    // offsets).
                    append_n(&mut log, 50, 1, 0, 40);
                    tokio::join!(a.run_cycle(), c.run_cycle())
                };
                named.record(&ms, &pk).await;
                for r in [&ra, &rc] {
                    assert!(
                        errors_other_than_fencing(r).is_empty(),
                        "[{}] round {round} step {step}: {:?}",
                        b.name,
                        r.errors
                    );
                    fenced += r.fenced.len();
                }
                // Past the fence back-off: the fenced one tries again.
                clock.advance(Duration::from_millis(1_001));
            }
        }
        // Settle: both run until neither commits.
        for _ in 0..20 {
            let (ra, rc) = (a.ship_available().await, c.ship_available().await);
            named.record(&ms, &pk).await;
            clock.advance(Duration::from_millis(1_001));
            if ra.committed == 0
                && rc.committed == 0
                && ra.fenced.is_empty()
                && rc.fenced.is_empty()
            {
                break;
            }
        }
        let last = latest(&ms, &t, topic_id(ID)).await.expect("a version");
        assert!(fenced > 0, "[{}] the shippers never raced", b.name);
        assert_eq!(
            named.writers.len(),
            2,
            "[{}] both committed versions: {:?}",
            b.name,
            named.writers
        );
        if pack_below == 0 {
            assert!(!last.pages.is_empty(), "[{}] pages were sealed", b.name);
        } else {
            // Compaction rewrote packed runs into objects before the
            // manifest had to seal them into pages.
            assert!(
                last.pages.is_empty() && last.ranges.iter().any(|r| r.object_offset.is_none()),
                "[{}] compacted: {} pages, {} ranges",
                b.name,
                last.pages.len(),
                last.ranges.len()
            );
        }
        // The latest version and its pages name objects with the bytes and
        // CRC-32C they record, and they are the source's batches.
        assert_shipped_matches_source(&ms, &last, &root, &t, 600).await;
        // Nothing any committed version named was replaced (or deleted:
        // the grace never passed).
        named.check_none_replaced(&ms).await;
        assert_eq!(
            named.chained > 0,
            layout.1,
            "[{}] versions made by deltas seen {} times",
            b.name,
            named.chained
        );
        let packs = named
            .objects
            .keys()
            .filter(|k| k.ends_with(".pack"))
            .count();
        assert_eq!(
            packs > 0,
            pack_below > 0,
            "[{}] packs named: {packs} (pack_below {pack_below})",
            b.name
        );
        if pack_below > 0 {
            collect_packs(&b, &ms, &named, &last, [&mut a, &mut c], &clock).await;
            assert_shipped_matches_source(&ms, &last, &root, &t, 600).await;
        }
    }
}

/// Pack garbage collection after the race: the packs of cycles whose
/// shipper was fenced while uploading (named by no committed version) and
/// those compaction replaced go once two passes a grace apart saw them
/// unnamed; every pack the latest version names stays, byte for byte.
async fn collect_packs(
    b: &Backend,
    ms: &ManifestStore,
    named: &Named,
    last: &manifest::partition::PartitionManifest,
    shippers: [&mut Shipper; 2],
    clock: &ManualClock,
) {
    let layout = ms.layout().clone();
    let packs_dir = layout.packs_dir();
    let listed: BTreeSet<String> = ms
        .list(&packs_dir)
        .await
        .expect("list")
        .into_iter()
        .collect();
    let orphans = listed
        .iter()
        .filter(|k| !named.objects.contains_key(*k))
        .count();
    assert!(
        orphans > 0,
        "[{}] no pack of a fenced cycle among {} packs",
        b.name,
        listed.len()
    );
    let mut in_latest: BTreeSet<String> = BTreeSet::new();
    let mut ranges = last.ranges.clone();
    for p in &last.pages {
        ranges.extend(ms.get_page(&p.key).await.expect("page").ranges);
    }
    in_latest.extend(
        ranges
            .iter()
            .filter(|r| layout.parse_pack_key(&r.key).is_ok())
            .map(|r| r.key.clone()),
    );
    let mut deleted = 0;
    let [a, c] = shippers;
    for advance in [2 * 3_600_000, 3_600_000] {
        clock.advance(Duration::from_millis(advance));
        for s in [&mut *a, &mut *c] {
            let r = s.collect_packs_now().await.expect("gc on").expect("pass");
            deleted += r.deleted;
        }
    }
    let left: BTreeSet<String> = ms
        .list(&packs_dir)
        .await
        .expect("list")
        .into_iter()
        .collect();
    println!(
        "[{}] packs: {} listed ({orphans} of fenced cycles), {deleted} deleted, {} left, {} in the latest version",
        b.name,
        listed.len(),
        left.len(),
        in_latest.len()
    );
    assert_eq!(left, in_latest, "[{}] the packs left", b.name);
    for key in &in_latest {
        assert_eq!(
            ms.get(key).await.expect("kept"),
            named.objects[key],
            "[{}] {key} changed",
            b.name
        );
    }
}
