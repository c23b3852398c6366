//! The change feed as this shipper publishes it: the newest head seen, and
//! the entries waiting for the next one.
//!
//! Invariants:
//! - every version this process holds is named by a published head, or
//!   queued for the next one: versions committed in a cycle are queued as
//!   they commit, and [`Feed::queue_unnamed`] queues any other (adopted
//!   after a lost answer, or committed just before a crash), since
//!   appliers learn versions only from the feed;
//! - at most one head is written per cycle, create-if-absent at the next
//!   sequence number, merged again on a lost race
//!   (`ManifestStore::publish_head`);
//! - with nothing queued, publishing makes no request (an idle cycle makes
//!   none).

use std::collections::BTreeMap;

use bucket::store::ManifestStore;
use kafkalog::TopicPartition;
use manifest::feed::{Head, HeadEntry};
use manifest::groups::GroupsPointer;
use manifest::layout::PartitionKey;
use manifest::partition::PartitionManifest;

use crate::error::ShipperError;

/// The feed's head as known here, and what the next head adds.
#[derive(Debug, Default)]
pub(crate) struct Feed {
    head: Option<Head>,
    loaded: bool,
    pending: BTreeMap<String, HeadEntry>,
    pending_groups: Option<GroupsPointer>,
    /// This writer's request rate, for the next head written.
    cost: Option<manifest::feed::WriterCost>,
}

impl Feed {
    /// Reads the newest head, once per process (until it succeeds).
    pub(crate) async fn load_once(&mut self, store: &ManifestStore) -> Result<(), ShipperError> {
        if self.loaded {
            return Ok(());
        }
        let h = store
            .latest_head(None)
            .await
            .map_err(|e| ShipperError::store("-", e))?;
        self.head = h;
        self.loaded = true;
        Ok(())
    }

    /// Reads the heads written since the last one seen (one GET past it,
    /// and one of the newest): before partitions are loaded, so that a
    /// version another writer's deltas made (which no manifest object
    /// shows) is the one read.
    pub(crate) async fn refresh(&mut self, store: &ManifestStore) -> Result<(), ShipperError> {
        let newest = store
            .latest_head(self.seq())
            .await
            .map_err(|e| ShipperError::store("-", e))?;
        if newest.is_some() {
            self.head = newest;
        }
        Ok(())
    }

    /// The request rate the next head written carries for this writer.
    pub(crate) fn set_cost(&mut self, cost: Option<manifest::feed::WriterCost>) {
        self.cost = cost;
    }

    /// Whether the last head seen names, for `st`'s partition, a version
    /// at or past the one `st` holds that is not it (another writer's:
    /// same number, other content, or a newer one).
    pub(crate) fn names_other_than(&self, st: &crate::partition::ShipperSlot) -> bool {
        let (Some(pk), Some(m)) = (&st.pk, &st.manifest) else {
            return false;
        };
        let Some(e) = self.entry(&st.tp, pk) else {
            return false;
        };
        if e.manifest_version != m.version {
            return e.manifest_version > m.version;
        }
        let held = HeadEntry::for_manifest(m);
        (
            e.shipped_end_offset,
            e.log_start_offset,
            e.source_high_watermark,
            e.committed_at_ms,
        ) != (
            held.shipped_end_offset,
            held.log_start_offset,
            held.source_high_watermark,
            held.committed_at_ms,
        )
    }

    /// The sequence number of the last head seen.
    pub(crate) fn seq(&self) -> Option<u64> {
        self.head.as_ref().map(|h| h.seq)
    }

    /// Publishes one head committing the queued entries and the deltas
    /// `deltas` (`ManifestStore::commit_head`). Returns whether a head was
    /// written and the map keys of the deltas refused (another writer
    /// moved those partitions).
    pub(crate) async fn commit_deltas(
        &mut self,
        store: &ManifestStore,
        writer: &str,
        deltas: Vec<HeadEntry>,
    ) -> Result<(bool, Vec<String>), ShipperError> {
        let mut entries: Vec<HeadEntry> = self.pending.values().cloned().collect();
        entries.extend(deltas);
        let known = self.seq();
        let (h, refused) = store
            .commit_head(
                known,
                writer,
                &entries,
                self.pending_groups,
                self.cost.clone(),
            )
            .await
            .map_err(|e| ShipperError::store("-", e))?;
        let published = known != Some(h.seq);
        self.head = Some(h);
        self.pending.clear();
        self.pending_groups = None;
        Ok((published, refused))
    }

    /// The entry the last head seen names for `tp` under `pk`'s topic id.
    pub(crate) fn entry(&self, tp: &TopicPartition, pk: &PartitionKey) -> Option<HeadEntry> {
        self.head
            .as_ref()
            .and_then(|h| h.partitions.get(&tp.to_string()))
            .filter(|e| e.topic_id == pk.topic_id)
            .cloned()
    }

    /// The group offsets the last head seen names.
    pub(crate) fn groups_pointer(&self) -> Option<GroupsPointer> {
        self.head.as_ref().and_then(|h| h.groups)
    }

    /// Queues group offsets `p` for the next head.
    pub(crate) fn queue_groups(&mut self, p: GroupsPointer) {
        self.pending_groups = Some(p);
    }

    /// Queues `m` for the next head.
    pub(crate) fn queue(&mut self, m: &PartitionManifest) {
        let e = HeadEntry::for_manifest(m);
        self.pending.insert(e.map_key(), e);
    }

    /// Queues every version in `held` that neither the last head seen nor
    /// the queue names (memory only: no request).
    pub(crate) fn queue_unnamed<'a>(&mut self, held: impl Iterator<Item = &'a PartitionManifest>) {
        for m in held {
            let e = HeadEntry::for_manifest(m);
            let named = |h: Option<&HeadEntry>| {
                h.is_some_and(|h| {
                    h.topic_id == e.topic_id && h.manifest_version >= e.manifest_version
                })
            };
            let key = e.map_key();
            if named(self.head.as_ref().and_then(|h| h.partitions.get(&key)))
                || named(self.pending.get(&key))
            {
                continue;
            }
            self.pending.insert(key, e);
        }
    }

    /// Publishes one head with the queued entries. `Ok(true)`: a new head
    /// was written; `Ok(false)`: nothing queued, or the newest head already
    /// said it all.
    pub(crate) async fn publish(
        &mut self,
        store: &ManifestStore,
        writer: &str,
    ) -> Result<bool, ShipperError> {
        if self.pending.is_empty() && self.pending_groups.is_none() {
            return Ok(false);
        }
        let entries: Vec<HeadEntry> = self.pending.values().cloned().collect();
        let known = self.head.as_ref().map(|h| h.seq);
        let (h, _) = store
            .commit_head(
                known,
                writer,
                &entries,
                self.pending_groups,
                self.cost.clone(),
            )
            .await
            .map_err(|e| ShipperError::store("-", e))?;
        let published = known != Some(h.seq);
        self.head = Some(h);
        self.pending.clear();
        self.pending_groups = None;
        Ok(published)
    }
}
