//! The change feed: how an applier learns what changed without listing the
//! bucket or reading every partition's manifest on every poll.
//!
//! Each shipper cycle that committed anything publishes a new immutable head
//! object `head/<seq:020>.json` (create-if-absent, so concurrent shippers of
//! one cluster serialise: a loser re-reads the newest head, merges its
//! entries and tries `seq + 1`). A head summarises every partition of the
//! cluster: topic id, latest manifest version, shipped end, log start,
//! source high watermark.
//!
//! Requests:
//! - per idle applier poll: **1 GET** (of `head/<last_seq + 1>`, answered
//!   404), plus **1 LIST** of the head dir every [`RESYNC_INTERVAL`] to
//!   notice pruned heads;
//! - per poll after a change: 1 GET per new head (at most
//!   [`MAX_PROBE`]), then 1 GET per changed partition's manifest;
//! - per shipper cycle with changes: 1 GET probe (404) and 1 PUT of the new
//!   head; under contention one more GET and PUT per lost race.
//!
//! Heads older than [`KEEP_HEADS`] versions are deleted by the writer.

use std::collections::BTreeMap;
use std::time::Duration;

use kafkalog::topic::TopicId;
use serde::{Deserialize, Serialize};

use crate::partition::{ManifestFormatError, PartitionManifest, SchemaVersion, decode_versioned};

/// How often a feed reader lists the head dir to resynchronise.
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(60);
/// Most heads a reader walks forward in one poll before listing instead.
pub const MAX_PROBE: u64 = 16;
/// How many head versions writers keep.
pub const KEEP_HEADS: u64 = 64;

/// One partition's line in a head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadEntry {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Topic id.
    pub topic_id: TopicId,
    /// Latest committed manifest version.
    pub manifest_version: u64,
    /// Its shipped end offset.
    pub shipped_end_offset: i64,
    /// Its log start offset.
    pub log_start_offset: i64,
    /// Its source high watermark.
    pub source_high_watermark: i64,
    /// When it was committed (ms since the epoch).
    pub committed_at_ms: i64,
    /// True when the source partition was deleted.
    #[serde(default)]
    pub deleted: bool,
}

impl HeadEntry {
    /// The head line describing a manifest version.
    pub fn for_manifest(m: &PartitionManifest) -> HeadEntry {
        HeadEntry {
            topic: m.topic.clone(),
            partition: m.partition,
            topic_id: m.topic_id,
            manifest_version: m.version,
            shipped_end_offset: m.shipped_end_offset,
            log_start_offset: m.log_start_offset,
            source_high_watermark: m.source_high_watermark,
            committed_at_ms: m.committed_at_ms,
            deleted: m.deleted,
        }
    }

    /// The map key of this entry: `topic-partition`.
    pub fn map_key(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }
}

/// A head object of the change feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// Format version.
    pub schema: SchemaVersion,
    /// Sequence number (also in the key).
    pub seq: u64,
    /// Source cluster id.
    pub source_cluster_id: String,
    /// When it was written (ms since the epoch).
    pub written_at_ms: i64,
    /// Who wrote it.
    #[serde(default)]
    pub writer: String,
    /// Every partition of the cluster, by `topic-partition`.
    pub partitions: BTreeMap<String, HeadEntry>,
}

impl Head {
    /// An empty head before the first one.
    pub fn empty(source_cluster_id: &str) -> Head {
        Head {
            schema: SchemaVersion::CURRENT,
            seq: 0,
            source_cluster_id: source_cluster_id.to_string(),
            written_at_ms: 0,
            writer: String::new(),
            partitions: BTreeMap::new(),
        }
    }

    /// Decodes a head object.
    pub fn decode(bytes: &[u8]) -> Result<Head, ManifestFormatError> {
        decode_versioned(bytes)
    }

    /// Encodes a head object.
    pub fn encode(&self) -> Result<Vec<u8>, ManifestFormatError> {
        serde_json::to_vec(self).map_err(|e| ManifestFormatError::Malformed(e.to_string()))
    }

    /// Merges `entries` into this head: an entry replaces the current one
    /// when its topic id differs (topic recreated) or its manifest version is
    /// higher. Returns true when anything changed.
    pub fn merge(&mut self, entries: impl IntoIterator<Item = HeadEntry>) -> bool {
        let mut changed = false;
        for e in entries {
            match self.partitions.get(&e.map_key()) {
                Some(cur)
                    if cur.topic_id == e.topic_id && cur.manifest_version >= e.manifest_version => {
                }
                _ => {
                    self.partitions.insert(e.map_key(), e);
                    changed = true;
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(p: i32, v: u64) -> HeadEntry {
        HeadEntry {
            topic: "t".into(),
            partition: p,
            topic_id: "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
            manifest_version: v,
            shipped_end_offset: 10 * v as i64,
            log_start_offset: 0,
            source_high_watermark: 10 * v as i64,
            committed_at_ms: 1,
            deleted: false,
        }
    }

    #[test]
    fn merge_keeps_the_newest_version() {
        let mut h = Head::empty("c");
        assert!(h.merge([entry(0, 2), entry(1, 1)]));
        assert!(!h.merge([entry(0, 1)]), "older version ignored");
        assert!(h.merge([entry(0, 3)]));
        assert_eq!(h.partitions["t-0"].manifest_version, 3);
        let bytes = h.encode().expect("encode");
        assert_eq!(Head::decode(&bytes).expect("decode"), h);
    }
}
