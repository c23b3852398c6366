//! The run manifest (`_manifest.json`, one per shard; see `layout`): what a
//! run exported, written after every file it lists, so a reader that
//! trusts it never reads a half-written export.
//!
//! Encoding is deterministic (fields in declaration order, no clock, no
//! host name): two runs that export the same data write the same bytes.
//! `format` changes when a field changes meaning; fields are only added
//! otherwise.

use serde::{Deserialize, Serialize};

use crate::plan::Window;
use crate::txn::Isolation;

/// The version of the run manifest format.
pub const FORMAT: u32 = 1;

/// One source object a file was made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceObject {
    /// Its key in the bucket.
    pub key: String,
    /// Its CRC-32C, from the manifest (and checked on download).
    pub crc32c: u32,
    /// Its size.
    pub bytes: u64,
}

/// One Parquet file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its key under the output URL.
    pub key: String,
    /// First offset it covers (its name).
    pub first_offset: i64,
    /// Last offset it covers (its name).
    pub last_offset: i64,
    /// Rows it holds.
    pub rows: u64,
    /// Smallest offset of a row.
    pub min_offset: i64,
    /// Largest offset of a row.
    pub max_offset: i64,
    /// Smallest record timestamp (ms since the epoch).
    pub min_timestamp_ms: i64,
    /// Largest record timestamp (ms since the epoch).
    pub max_timestamp_ms: i64,
    /// Its size.
    pub bytes: u64,
    /// CRC-32C of its bytes.
    pub crc32c: u32,
    /// The source objects it was made from.
    pub sources: Vec<SourceObject>,
}

/// The transactions that ended a read_committed export early.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clamp {
    /// The shipped last stable offset: records from here on were not
    /// exported.
    pub last_stable_offset: i64,
    /// The offset after the last shipped batch read.
    pub shipped_end_offset: i64,
    /// The open transactions: (producer id, first offset), oldest first.
    pub open_transactions: Vec<(i64, i64)>,
}

/// One partition of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionEntry {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Topic id.
    pub topic_id: String,
    /// The manifest version read.
    pub manifest_version: u64,
    /// Its files, in offset order (files with no row are not written).
    pub files: Vec<FileEntry>,
    /// Set when read_committed ended the export at the shipped LSO.
    pub clamp: Option<Clamp>,
}

/// A run manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunManifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The source cluster.
    pub source_cluster_id: String,
    /// The shard, `I/N`.
    pub shard: String,
    /// The isolation level applied.
    pub isolation: Isolation,
    /// First offset asked for.
    pub from_offset: Option<i64>,
    /// Last offset asked for.
    pub to_offset: Option<i64>,
    /// Earliest timestamp asked for (ms).
    pub from_time_ms: Option<i64>,
    /// Latest timestamp asked for (ms).
    pub to_time_ms: Option<i64>,
    /// The export schema version (`schema::SCHEMA_VERSION`).
    pub schema_version: String,
    /// The partitions, by topic and partition.
    pub partitions: Vec<PartitionEntry>,
    /// Files listed.
    pub files: u64,
    /// Rows in them.
    pub rows: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl RunManifest {
    /// A manifest of `partitions` (sorted here) and their totals.
    pub fn new(
        source_cluster_id: &str,
        shard: crate::select::Shard,
        isolation: Isolation,
        window: &Window,
        mut partitions: Vec<PartitionEntry>,
    ) -> RunManifest {
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        let all = || partitions.iter().flat_map(|p| p.files.iter());
        RunManifest {
            format: FORMAT,
            source_cluster_id: source_cluster_id.to_string(),
            shard: shard.to_string(),
            isolation,
            from_offset: window.from_offset,
            to_offset: window.to_offset,
            from_time_ms: window.from_time,
            to_time_ms: window.to_time,
            schema_version: crate::schema::SCHEMA_VERSION.to_string(),
            files: all().count() as u64,
            rows: all().map(|f| f.rows).sum(),
            bytes: all().map(|f| f.bytes).sum(),
            partitions,
        }
    }
}
