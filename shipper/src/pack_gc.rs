//! Garbage collection of packs (issue 30, "Layout 2", step 5): deletes the
//! pack objects no latest version names any more, once the grace has
//! passed (the decision is `manifest::pack_gc::plan`; this executes it).
//!
//! A pass, every `sweep_interval` while `pack_below` and `delete_grace`
//! are set:
//! 1. reads the newest head (one LIST, one GET) and, for each partition it
//!    names, the packs of that version: the ranges of its manifest object
//!    and of that object's pages, and of the deltas of its chain, and the
//!    manifest pack the chain starts from, if it does (held or not). A version
//!    this process holds is taken from memory; a manifest object, a page
//!    and a head are read once each (objects and pages are immutable and
//!    cached across passes by key);
//! 2. lists the packs dir (one LIST per 1,000 packs);
//! 3. deletes what the plan says.
//!
//! Invariants:
//! - a pass that cannot read the head, a version or a page the head names
//!   deletes nothing (it cannot prove a pack unreferenced);
//! - versions newer than the head names only drop packs or name new ones
//!   (which the upload grace protects), so marking from the head is never
//!   less than marking from the newest versions;
//! - a version this process holds newer than the head's is marked too;
//! - every shipper of a cluster may run passes: a delete is idempotent and
//!   each pass's decision is safe on its own.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bucket::store::{ManifestStore, StoreError};
use kafkalog::TopicPartition;
use manifest::feed::Head;
use manifest::layout::{ClusterLayout, PartitionKey, parse_upload_time_ms};
use manifest::pack_gc::{ListedPack, PackGcPlan, plan};
use manifest::partition::{PartitionManifest, ShippedRange};

use crate::error::ShipperError;
use crate::partition::ShipperSlot;

/// What a pass found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackGcReport {
    /// Packs deleted.
    pub deleted: u64,
    /// Packs listed.
    pub listed: usize,
    /// The plan's counts (named, young, waiting, foreign).
    pub named: usize,
    /// Packs uploaded less than the grace ago.
    pub young: usize,
    /// Packs unreferenced for less than the grace.
    pub waiting: usize,
}

/// The state of pack garbage collection in one shipper process.
#[derive(Debug, Default)]
pub(crate) struct PackGc {
    /// `PackGcPlan::unreferenced_since` of the last pass.
    seen: BTreeMap<String, i64>,
    /// The packs a manifest object names (its ranges and pages'), by key.
    by_object: HashMap<String, Arc<BTreeSet<String>>>,
    /// The packs a page names, by key.
    by_page: HashMap<String, Arc<BTreeSet<String>>>,
    /// When the last pass ran.
    last_ms: Option<i64>,
}

impl PackGc {
    /// True when a pass is due at `now_ms` (the first after one interval
    /// from `started_ms`).
    pub(crate) fn due(&self, now_ms: i64, started_ms: i64, interval_ms: i64) -> bool {
        now_ms - self.last_ms.unwrap_or(started_ms) >= interval_ms
    }

    /// One pass at `now_ms`.
    pub(crate) async fn run(
        &mut self,
        store: &ManifestStore,
        held: &BTreeMap<TopicPartition, ShipperSlot>,
        now_ms: i64,
        grace_ms: i64,
    ) -> Result<PackGcReport, ShipperError> {
        self.last_ms = Some(now_ms);
        let err = |e: StoreError| ShipperError::store("-", e);
        let layout = store.layout();
        // Listed first: a pack uploaded after the listing waits for the
        // next pass, and a bucket without packs costs one LIST.
        let listed: Vec<ListedPack> = store
            .list(&layout.packs_dir())
            .await
            .map_err(err)?
            .into_iter()
            .map(|key| ListedPack {
                uploaded_ms: layout
                    .parse_pack_key(&key)
                    .ok()
                    .and_then(parse_upload_time_ms),
                key,
            })
            .collect();
        // Nothing can be deleted before a pack is the grace old: no head
        // or manifest is read for young packs alone.
        let old = |p: &ListedPack| p.uploaded_ms.is_some_and(|u| now_ms - u >= grace_ms);
        if !listed.iter().any(old) {
            self.seen.clear();
            return Ok(PackGcReport {
                listed: listed.len(),
                young: listed.len(),
                ..PackGcReport::default()
            });
        }
        let Some(head) = store.latest_head(None).await.map_err(err)? else {
            tracing::warn!(
                packs = listed.len(),
                "pack gc: packs but no head names any version; deleting nothing"
            );
            return Ok(PackGcReport {
                listed: listed.len(),
                ..PackGcReport::default()
            });
        };
        let named = self.named(store, held, &head).await.map_err(err)?;
        let PackGcPlan {
            delete,
            unreferenced_since,
            named: named_count,
            young,
            waiting,
            foreign,
        } = plan(&listed, &named, &self.seen, now_ms, grace_ms);
        self.seen = unreferenced_since;
        if foreign > 0 {
            tracing::warn!(
                keys = foreign,
                dir = %layout.packs_dir(),
                "pack gc: keys under the packs dir that are not packs of this format; left alone"
            );
        }
        let mut deleted = 0;
        for key in &delete {
            store.delete(key).await.map_err(err)?;
            self.seen.remove(key);
            deleted += 1;
        }
        tracing::info!(
            listed = listed.len(),
            named = named_count,
            young,
            waiting,
            deleted,
            "pack gc pass"
        );
        Ok(PackGcReport {
            deleted,
            listed: listed.len(),
            named: named_count,
            young,
            waiting,
        })
    }

    /// The packs named by every version `head` names, and by the versions
    /// this process holds.
    async fn named(
        &mut self,
        store: &ManifestStore,
        held: &BTreeMap<TopicPartition, ShipperSlot>,
        head: &Head,
    ) -> Result<BTreeSet<String>, StoreError> {
        let layout = store.layout();
        let mut named = BTreeSet::new();
        let mut heads: BTreeMap<u64, Head> = BTreeMap::new();
        let mut objects_used: HashMap<String, Arc<BTreeSet<String>>> = HashMap::new();
        let mut pages = Pages {
            known: std::mem::take(&mut self.by_page),
            used: HashMap::new(),
        };
        for st in held.values() {
            if let Some(m) = &st.manifest {
                named.extend(pages.packs_of(store, m).await?);
            }
        }
        for entry in head.partitions.values() {
            let pk = PartitionKey {
                tp: TopicPartition::new(&entry.topic, entry.partition).map_err(|e| {
                    StoreError::Identity {
                        key: layout.head_key(head.seq),
                        reason: format!("an entry names no partition: {e}"),
                    }
                })?,
                topic_id: entry.topic_id,
            };
            // A version held is marked above; a newer one held does not
            // stand for the head's (which readers may still read).
            let held_same = held
                .get(&pk.tp)
                .and_then(|st| st.manifest.as_ref())
                .is_some_and(|m| {
                    m.topic_id == entry.topic_id && m.version == entry.manifest_version
                });
            // The manifest pack the chain starts from, whoever holds the
            // version: readers without it read it there.
            let base = entry.chain.as_ref().and_then(|c| c.base.as_ref());
            if let Some(slice) = base {
                named.insert(slice.key.clone());
            }
            if held_same {
                continue;
            }
            let object_version = entry
                .chain
                .as_ref()
                .map_or(entry.manifest_version, |c| c.object_version);
            // The version the chain follows: an object of its own, or a
            // slice of a manifest pack (marked above).
            let key = match base {
                Some(slice) => format!("{}@{}", slice.key, slice.offset),
                None => layout.manifest_key(&pk, object_version),
            };
            let of_object = match self.by_object.get(&key) {
                Some(s) => Arc::clone(s),
                None => {
                    let m = match base {
                        Some(slice) => store.get_manifest_slice(&pk, object_version, slice).await?,
                        None => store.get_manifest(&pk, object_version).await?,
                    };
                    Arc::new(pages.packs_of(store, &m).await?)
                }
            };
            named.extend(of_object.iter().cloned());
            objects_used.insert(key, of_object);
            for &seq in entry.chain.iter().flat_map(|c| c.heads.iter()) {
                if seq == head.seq {
                    named.extend(pack_keys(layout, delta_ranges(head, &entry.map_key())));
                    continue;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = heads.entry(seq) {
                    e.insert(store.get_head(seq).await?);
                }
                if let Some(h) = heads.get(&seq) {
                    named.extend(pack_keys(layout, delta_ranges(h, &entry.map_key())));
                }
            }
        }
        // Objects and pages no version names any more are forgotten.
        self.by_object = objects_used;
        self.by_page = pages.used;
        Ok(named)
    }
}

/// The ranges a head's delta of `map_key` names: those it appends and
/// those it puts in place of runs of the version before (compaction's).
fn delta_ranges<'h>(head: &'h Head, map_key: &str) -> impl Iterator<Item = &'h ShippedRange> + 'h {
    head.partitions
        .get(map_key)
        .and_then(|e| e.delta.as_ref())
        .into_iter()
        .flat_map(|d| d.replaced.iter().chain(d.ranges.iter()))
}

/// The pack keys among `ranges`' objects.
fn pack_keys<'a>(
    layout: &'a ClusterLayout,
    ranges: impl IntoIterator<Item = &'a ShippedRange> + 'a,
) -> impl Iterator<Item = String> + 'a {
    ranges
        .into_iter()
        .filter(|r| layout.parse_pack_key(&r.key).is_ok())
        .map(|r| r.key.clone())
}

/// The packs pages name: those known from the last pass, and those a
/// version of this pass names.
struct Pages {
    known: HashMap<String, Arc<BTreeSet<String>>>,
    used: HashMap<String, Arc<BTreeSet<String>>>,
}

impl Pages {
    /// The packs `m` names: in its ranges and in its pages' (each page
    /// read once; pages are immutable).
    async fn packs_of(
        &mut self,
        store: &ManifestStore,
        m: &PartitionManifest,
    ) -> Result<BTreeSet<String>, StoreError> {
        let layout = store.layout();
        let mut out: BTreeSet<String> = pack_keys(layout, &m.ranges).collect();
        for p in &m.pages {
            let of_page = match self.used.get(&p.key).or_else(|| self.known.get(&p.key)) {
                Some(s) => Arc::clone(s),
                None => {
                    let page = store.get_page(&p.key).await?;
                    Arc::new(pack_keys(layout, &page.ranges).collect())
                }
            };
            out.extend(of_page.iter().cloned());
            self.used.insert(p.key.clone(), of_page);
        }
        Ok(out)
    }
}
