//! Everything the applier reads from the bucket: the change feed
//! ([`FeedReader`]), the source's manifests, the manifest held in memory
//! for each mirror partition (so an unchanged feed entry costs no GET),
//! and whole objects verified against their ranges ([`fetch_verified`]).
//!
//! Invariants:
//! - Without a bucket nothing is read: the feed is never polled and every
//!   manifest is `None`.
//! - A cached manifest is used only while it is the version of the topic
//!   id the feed names for its partition; otherwise the head's delta that
//!   makes the feed's version from it is applied (layout 2: no GET), or the
//!   version is read (`ManifestStore::manifest_of`: the object, or the
//!   object and the deltas of the heads that carry them).
//! - Many manifests are read [`CONCURRENCY`] at once ([`BucketReader::refresh`],
//!   [`BucketReader::confirm_many`]), so a restart or a cycle where many
//!   partitions moved waits for one round of GETs, not one GET per
//!   partition in turn.

use std::collections::{BTreeMap, HashMap};

use bucket::store::{ManifestStore, StoreError};
use futures::StreamExt;
use kafkalog::{TopicId, TopicPartition};
use manifest::feed::{Head, HeadEntry};
use manifest::layout::PartitionKey;
use manifest::partition::{PartitionManifest, ShippedRange};
use manifest::range_check::verify_object;

use crate::error::MirrorError;
use crate::feed::FeedReader;

/// Manifests read at once.
pub(crate) const CONCURRENCY: usize = 16;

/// The bucket as the applier reads it.
#[derive(Debug)]
pub(crate) struct BucketReader {
    store: Option<ManifestStore>,
    feed: FeedReader,
    manifests: HashMap<TopicPartition, PartitionManifest>,
}

impl BucketReader {
    /// A reader of `store` (`None`: no bucket).
    pub(crate) fn new(store: Option<ManifestStore>) -> BucketReader {
        BucketReader {
            store,
            feed: FeedReader::default(),
            manifests: HashMap::new(),
        }
    }

    /// The store, when there is a bucket.
    pub(crate) fn store(&self) -> Option<&ManifestStore> {
        self.store.as_ref()
    }

    /// The newest feed head read.
    pub(crate) fn head(&self) -> Option<&Head> {
        self.feed.head()
    }

    /// The feed's entry for `tp`.
    pub(crate) fn entry(&self, tp: &TopicPartition) -> Option<&HeadEntry> {
        self.feed.entry(tp)
    }

    /// Reads the change feed (see `crate::feed`); true when a newer head
    /// was found. Nothing without a bucket.
    pub(crate) async fn poll(&mut self) -> Result<bool, StoreError> {
        match &self.store {
            Some(store) => self.feed.poll(store).await,
            None => Ok(false),
        }
    }

    /// The manifest held for `tp`.
    pub(crate) fn cached(&self, tp: &TopicPartition) -> Option<&PartitionManifest> {
        self.manifests.get(tp)
    }

    /// Every manifest held.
    pub(crate) fn all_cached(&self) -> &HashMap<TopicPartition, PartitionManifest> {
        &self.manifests
    }

    /// Holds `m` for `tp`.
    pub(crate) fn keep(&mut self, tp: &TopicPartition, m: PartitionManifest) {
        self.manifests.insert(tp.clone(), m);
    }

    /// Drops what is held for `tp` (it is read again when next needed: a
    /// start or a retry, after which what failed may have been repaired).
    pub(crate) fn forget(&mut self, tp: &TopicPartition) {
        self.manifests.remove(tp);
    }

    /// The feed's entry of `tp` when it names `version` of `topic_id`.
    fn entry_at(&self, tp: &TopicPartition, topic_id: TopicId, version: u64) -> Option<HeadEntry> {
        self.feed
            .entry(tp)
            .filter(|e| e.topic_id == topic_id && e.manifest_version == version)
            .cloned()
    }

    /// The feed's entry of `tp` for `topic_id` when the manifest held is
    /// not its version (`None`: nothing to read). A held manifest the
    /// deltas of the heads last read extend (the entry's own, and those of
    /// the heads the poll passed) is moved to the entry's version here,
    /// with no request.
    fn stale(&mut self, tp: &TopicPartition, topic_id: TopicId) -> Option<HeadEntry> {
        let entry = self.feed.entry(tp).filter(|e| e.topic_id == topic_id)?;
        let held = self
            .manifests
            .get(tp)
            .filter(|m| m.topic_id == entry.topic_id);
        if held.is_some_and(|m| m.version == entry.manifest_version) {
            return None;
        }
        // Through the deltas of every head the last poll read, in order.
        let moved = held.and_then(|m| {
            let mut cur: Option<PartitionManifest> = None;
            for d in self.feed.deltas(tp, topic_id) {
                let at = cur.as_ref().unwrap_or(m);
                if d.after_version == at.version {
                    cur = Some(d.apply(at).ok()?);
                }
            }
            cur.filter(|c| c.version == entry.manifest_version)
        });
        match moved {
            Some(next) => {
                self.manifests.insert(tp.clone(), next);
                None
            }
            None => Some(entry.clone()),
        }
    }

    /// The latest manifest of `tp` (pinned to `topic_id`), from the feed's
    /// version: the one held when the feed names it, else read and held.
    /// `Ok(None)` without a bucket.
    pub(crate) async fn latest(
        &mut self,
        tp: &TopicPartition,
        topic_id: TopicId,
    ) -> Result<Option<PartitionManifest>, MirrorError> {
        if self.store.is_none() {
            return Ok(None);
        }
        if self
            .feed
            .entry(tp)
            .filter(|e| e.topic_id == topic_id)
            .is_none()
        {
            return Err(MirrorError::NoManifest { tp: tp.clone() });
        }
        let Some(entry) = self.stale(tp, topic_id) else {
            return Ok(self.manifests.get(tp).cloned());
        };
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let key = PartitionKey {
            tp: tp.clone(),
            topic_id,
        };
        let manifest =
            store
                .manifest_of(&key, &entry)
                .await
                .map_err(|source| MirrorError::Store {
                    tp: tp.clone(),
                    source,
                })?;
        self.manifests.insert(tp.clone(), manifest.clone());
        Ok(Some(manifest))
    }

    /// Reads concurrently the manifests of `wanted` (each pinned to its
    /// topic id) that are not held in the feed's version. A read that
    /// fails is left to the partition's work, which reads again and
    /// reports it. True when something was read.
    pub(crate) async fn refresh(&mut self, wanted: Vec<(TopicPartition, TopicId)>) -> bool {
        let Some(store) = self.store.clone() else {
            return false;
        };
        let mut moved = false;
        let mut reads: Vec<(PartitionKey, HeadEntry)> = Vec::new();
        for (tp, topic_id) in wanted {
            let before = self.manifests.get(&tp).map(|m| m.version);
            match self.stale(&tp, topic_id) {
                Some(entry) => reads.push((PartitionKey { tp, topic_id }, entry)),
                None => moved |= self.manifests.get(&tp).map(|m| m.version) != before,
            }
        }
        if reads.is_empty() {
            return moved;
        }
        let read: Vec<_> = futures::stream::iter(reads.into_iter().map(|(key, entry)| {
            let store = &store;
            async move {
                let manifest = store.manifest_of(&key, &entry).await.ok();
                (key.tp, manifest)
            }
        }))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
        let mut any = moved;
        for (tp, manifest) in read {
            if let Some(m) = manifest {
                self.manifests.insert(tp, m);
                any = true;
            }
        }
        any
    }

    /// Before partitions are created from feed entries `(tp, topic id,
    /// version)`: reads, concurrently, the manifest each entry names, which
    /// must describe that partition with that topic id (the manifest's key
    /// and its content both carry it), so that a feed entry alone never
    /// pins a destination partition's topic id. The error, when one cannot
    /// be read, is what its partition waits for. Nothing without a bucket.
    pub(crate) async fn confirm_many(
        &self,
        candidates: Vec<(TopicPartition, TopicId, u64)>,
    ) -> Vec<(TopicPartition, TopicId, Result<PartitionManifest, String>)> {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        futures::stream::iter(candidates.into_iter().map(|(tp, topic_id, version)| {
            let entry = self.entry_at(&tp, topic_id, version);
            async move {
                let m = confirm_identity(store, &tp, topic_id, version, entry).await;
                (tp, topic_id, m)
            }
        }))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
    }

    /// [`BucketReader::confirm_many`] for one partition; `Ok(None)` without
    /// a bucket.
    pub(crate) async fn confirm(
        &self,
        tp: &TopicPartition,
        topic_id: TopicId,
        version: u64,
    ) -> Result<Option<PartitionManifest>, String> {
        match &self.store {
            Some(store) => {
                let entry = self.entry_at(tp, topic_id, version);
                confirm_identity(store, tp, topic_id, version, entry)
                    .await
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    /// The source's manifests of `tps` in the feed's version, one that
    /// cannot be read left out (logged).
    pub(crate) async fn read_each(
        &self,
        tps: &[TopicPartition],
    ) -> BTreeMap<TopicPartition, PartitionManifest> {
        let Some(store) = &self.store else {
            return BTreeMap::new();
        };
        // Concurrently: `start --all` of 10,000 partitions against S3 is
        // 10,000 GETs.
        let reads = tps.iter().filter_map(|tp| {
            let entry = self.feed.entry(tp)?;
            let key = PartitionKey {
                tp: tp.clone(),
                topic_id: entry.topic_id,
            };
            Some(async move { (key.tp.clone(), store.manifest_of(&key, entry).await) })
        });
        let read: Vec<_> = futures::stream::iter(reads)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut out = BTreeMap::new();
        for (tp, manifest) in read {
            match manifest {
                Ok(m) => {
                    out.insert(tp, m);
                }
                Err(e) => {
                    tracing::warn!(partition = %tp, error = %e, "cannot read the source's manifest to tell what start would cut");
                }
            }
        }
        out
    }
}

/// Reads the manifest a feed entry names for `tp` (see
/// [`BucketReader::confirm_many`]): through the entry when the feed holds
/// it (its version may be made by deltas), else the object `version`.
async fn confirm_identity(
    store: &ManifestStore,
    tp: &TopicPartition,
    topic_id: TopicId,
    version: u64,
    entry: Option<HeadEntry>,
) -> Result<PartitionManifest, String> {
    let key = PartitionKey {
        tp: tp.clone(),
        topic_id,
    };
    let read = match &entry {
        Some(e) => store.manifest_of(&key, e).await,
        None => store.get_manifest(&key, version).await,
    };
    read.map_err(|e| {
        tracing::warn!(partition = %tp, %topic_id, version, error = %e, "the change feed names a manifest that cannot be read; not starting the partition yet");
        e.to_string()
    })
}

/// Downloads the objects of `ranges` whole, checks each against its range
/// (`manifest::range_check::verify_object`), and returns their bytes
/// concatenated in order (a segment rebuilt from the bucket: a compacted
/// one here, a damaged one by `crate::repair`).
pub(crate) async fn fetch_verified(
    store: &ManifestStore,
    tp: &TopicPartition,
    ranges: &[&ShippedRange],
) -> Result<Vec<u8>, MirrorError> {
    let mut content = Vec::new();
    for r in ranges {
        let bytes = store
            .get_in(&r.key, r.object_range())
            .await
            .map_err(|source| MirrorError::Store {
                tp: tp.clone(),
                source,
            })?;
        verify_object(r, &bytes).map_err(|corrupt| MirrorError::ObjectCorrupt {
            tp: tp.clone(),
            corrupt,
        })?;
        content.extend_from_slice(&bytes);
    }
    Ok(content)
}
