//! The epoch manifest of one partition: what the shipper has shipped and
//! everything an applier needs to reconcile with it, in one object.
//!
//! A manifest version is an immutable JSON object (see `layout` for its
//! key). Each version holds:
//! - identity: source cluster id, topic, topic id, partition;
//! - progress: log start offset, shipped end offset (the offset after the
//!   last shipped batch) and the source high watermark it was cut at;
//! - the epoch lineage up to the shipped end, so any one version is enough
//!   to reconcile (divergence, LME truncation);
//! - the shipped ranges, ordered by offset: the newest ones inline (at most
//!   [`MAX_INLINE_RANGES`]) and older ones in sealed, immutable pages of
//!   [`PAGE_RANGES`] ranges that the manifest names;
//! - the partition's own mirror origin (is this partition itself a mirror,
//!   of which cluster, in which state, with which LME), for failback and the
//!   loop check.
//!
//! Invariants checked by [`PartitionManifest::validate`] on every decode and
//! before every commit: ranges (pages, then inline) are ordered and do not
//! overlap; each range has `base <= last`; the lineage is sorted; the log
//! start is at or below the shipped end; ranges lie below the shipped end.
//!
//! Versioning: `schema.major` changes when an older reader would misread
//! the object; a newer major is refused with a clear error. Minor changes
//! only add fields: unknown fields are ignored.
//!
//! Size bound: a poll reads one manifest version, which holds at most
//! [`MAX_INLINE_RANGES`] ranges plus one [`PageRef`] per [`PAGE_RANGES`]
//! older ranges: for 100,000 ranges that is 256 inline ranges and 390 page
//! references (about 120 KiB of JSON), whatever the partition's age.

use kafkalog::checkpoint::EpochEntry;
use kafkalog::topic::{TopicId, TopicPartition};
use serde::{Deserialize, Serialize};

/// Current major version of the manifest format.
pub const SCHEMA_MAJOR: u32 = 1;
/// Current minor version of the manifest format.
pub const SCHEMA_MINOR: u32 = 0;
/// Most ranges kept inline in a manifest version.
pub const MAX_INLINE_RANGES: usize = 512;
/// Ranges per sealed page. When the inline ranges exceed
/// [`MAX_INLINE_RANGES`], the oldest [`PAGE_RANGES`] are sealed into a page.
pub const PAGE_RANGES: usize = 256;

/// Format version of a persisted object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaVersion {
    /// Incompatible changes.
    pub major: u32,
    /// Compatible additions.
    pub minor: u32,
}

impl SchemaVersion {
    /// The version this build writes.
    pub const CURRENT: SchemaVersion = SchemaVersion {
        major: SCHEMA_MAJOR,
        minor: SCHEMA_MINOR,
    };
}

/// One shipped object: consecutive whole batches of one source segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShippedRange {
    /// Object key (built by `layout`).
    pub key: String,
    /// Base offset of the first batch.
    pub base_offset: i64,
    /// Last offset of the last batch.
    pub last_offset: i64,
    /// Size of the object in bytes.
    pub bytes: u64,
    /// Number of batches.
    pub batches: u32,
    /// CRC-32C of the whole object.
    pub crc32c: u32,
    /// Largest batch max timestamp in the range.
    pub max_timestamp: i64,
    /// Leader epochs inside the range: each epoch with the base offset of its
    /// first batch in the range.
    pub epochs: Vec<EpochEntry>,
    /// Base offset of the source segment the batches come from.
    pub segment_base_offset: i64,
    /// True when this range ends its segment and the segment has rolled:
    /// the segment is complete on the destination once this range is applied.
    pub completes_segment: bool,
    /// 0 for the segment as first shipped; raised each time the source
    /// replaced the segment with a compacted version and it was shipped
    /// again. A range with a higher generation supersedes every earlier
    /// range of the same segment.
    #[serde(default)]
    pub segment_generation: u32,
}

/// A sealed page of old ranges, named by the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRef {
    /// Key of the page object.
    pub key: String,
    /// Base offset of its first range.
    pub first_offset: i64,
    /// Last offset of its last range.
    pub last_offset: i64,
    /// Number of ranges in the page.
    pub ranges: u32,
    /// Total bytes of the ranges' objects.
    pub bytes: u64,
}

/// A sealed page object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// Format version.
    pub schema: SchemaVersion,
    /// The ranges, ordered.
    pub ranges: Vec<ShippedRange>,
}

/// The partition's own mirror state at the source, when the source partition
/// is itself a mirror (for example after a failover made this cluster the
/// primary). Failback and the loop check read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorOrigin {
    /// The cluster this partition mirrors (or mirrored).
    pub source_cluster_id: String,
    /// Its mirror state's stable id (`PREPARING`, ..., `STOPPED`, `FAILED`).
    pub state: String,
    /// Its last mirrored epoch, recorded when mirroring stopped.
    pub lme: Option<i32>,
}

/// One version of a partition's epoch manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionManifest {
    /// Format version.
    pub schema: SchemaVersion,
    /// This version's number (1 for the first).
    pub version: u64,
    /// Source cluster id.
    pub source_cluster_id: String,
    /// Topic name.
    pub topic: String,
    /// Topic id.
    pub topic_id: TopicId,
    /// Partition number.
    pub partition: i32,
    /// The source's log start offset.
    pub log_start_offset: i64,
    /// The offset after the last shipped batch.
    pub shipped_end_offset: i64,
    /// The source high watermark when this version was cut.
    pub source_high_watermark: i64,
    /// The epoch lineage up to the shipped end.
    pub lineage: Vec<EpochEntry>,
    /// Sealed pages of older ranges, ordered.
    #[serde(default)]
    pub pages: Vec<PageRef>,
    /// The newest ranges, ordered.
    pub ranges: Vec<ShippedRange>,
    /// The source partition's own mirror state, if it is a mirror.
    #[serde(default)]
    pub mirror_origin: Option<MirrorOrigin>,
    /// True when the source partition was deleted.
    #[serde(default)]
    pub deleted: bool,
    /// Wall-clock time of the commit, in milliseconds since the epoch.
    pub committed_at_ms: i64,
    /// Who wrote it (shipper id), for operators.
    #[serde(default)]
    pub writer: String,
}

/// What is wrong with a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestFormatError {
    /// The object is not valid JSON of the expected shape.
    #[error("not a valid manifest: {0}")]
    Malformed(String),
    /// The object was written by a newer, incompatible version.
    #[error(
        "manifest schema {major}.{minor} is newer than this build understands ({SCHEMA_MAJOR}.x): upgrade segmirror"
    )]
    UnsupportedSchema {
        /// Major version found.
        major: u32,
        /// Minor version found.
        minor: u32,
    },
    /// An invariant does not hold.
    #[error("inconsistent manifest: {0}")]
    Invalid(String),
}

#[derive(Deserialize)]
struct Probe {
    schema: SchemaVersion,
}

/// Decodes any versioned object: refuses a newer major before reading the rest.
pub(crate) fn decode_versioned<T: for<'de> Deserialize<'de>>(
    bytes: &[u8],
) -> Result<T, ManifestFormatError> {
    let probe: Probe =
        serde_json::from_slice(bytes).map_err(|e| ManifestFormatError::Malformed(e.to_string()))?;
    if probe.schema.major > SCHEMA_MAJOR {
        return Err(ManifestFormatError::UnsupportedSchema {
            major: probe.schema.major,
            minor: probe.schema.minor,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| ManifestFormatError::Malformed(e.to_string()))
}

impl PartitionManifest {
    /// A first, empty manifest for a partition.
    pub fn new(
        source_cluster_id: &str,
        tp: &TopicPartition,
        topic_id: TopicId,
    ) -> PartitionManifest {
        PartitionManifest {
            schema: SchemaVersion::CURRENT,
            version: 0,
            source_cluster_id: source_cluster_id.to_string(),
            topic: tp.topic.clone(),
            topic_id,
            partition: tp.partition,
            log_start_offset: 0,
            shipped_end_offset: 0,
            source_high_watermark: 0,
            lineage: Vec::new(),
            pages: Vec::new(),
            ranges: Vec::new(),
            mirror_origin: None,
            deleted: false,
            committed_at_ms: 0,
            writer: String::new(),
        }
    }

    /// The topic-partition.
    pub fn topic_partition(&self) -> Result<TopicPartition, ManifestFormatError> {
        TopicPartition::new(&self.topic, self.partition)
            .map_err(|e| ManifestFormatError::Invalid(e.to_string()))
    }

    /// Decodes and validates a manifest object.
    pub fn decode(bytes: &[u8]) -> Result<PartitionManifest, ManifestFormatError> {
        let m: PartitionManifest = decode_versioned(bytes)?;
        m.validate()?;
        Ok(m)
    }

    /// Encodes the manifest (validated first).
    pub fn encode(&self) -> Result<Vec<u8>, ManifestFormatError> {
        self.validate()?;
        serde_json::to_vec(self).map_err(|e| ManifestFormatError::Malformed(e.to_string()))
    }

    /// Checks the invariants listed in the module docs.
    pub fn validate(&self) -> Result<(), ManifestFormatError> {
        let bad = |m: String| Err(ManifestFormatError::Invalid(m));
        self.topic_partition()?;
        if self.log_start_offset < 0 || self.shipped_end_offset < 0 {
            return bad(format!(
                "negative offsets: log start {}, shipped end {}",
                self.log_start_offset, self.shipped_end_offset
            ));
        }
        if self.log_start_offset > self.shipped_end_offset {
            return bad(format!(
                "log start {} is above the shipped end {}",
                self.log_start_offset, self.shipped_end_offset
            ));
        }
        for w in self.lineage.windows(2) {
            if w[0].epoch >= w[1].epoch || w[0].start_offset >= w[1].start_offset {
                return bad(format!(
                    "lineage not sorted at epoch {} -> {}",
                    w[0].epoch, w[1].epoch
                ));
            }
        }
        let mut prev_last: Option<i64> = None;
        for p in &self.pages {
            if p.first_offset > p.last_offset || prev_last.is_some_and(|l| p.first_offset <= l) {
                return bad(format!("page {} out of order", p.key));
            }
            prev_last = Some(p.last_offset);
        }
        for r in &self.ranges {
            if r.base_offset > r.last_offset {
                return bad(format!(
                    "range {} has base {} above last {}",
                    r.key, r.base_offset, r.last_offset
                ));
            }
            if prev_last.is_some_and(|l| r.base_offset <= l) {
                return bad(format!(
                    "range {} at {} overlaps the previous range ending at {:?}",
                    r.key, r.base_offset, prev_last
                ));
            }
            if r.last_offset >= self.shipped_end_offset {
                return bad(format!(
                    "range {} ends at {}, at or beyond the shipped end {}",
                    r.key, r.last_offset, self.shipped_end_offset
                ));
            }
            prev_last = Some(r.last_offset);
        }
        Ok(())
    }

    /// Appends a shipped range at the end and advances the shipped end.
    /// When the inline ranges then exceed [`MAX_INLINE_RANGES`], the oldest
    /// [`PAGE_RANGES`] are sealed into a page: it is returned with its key
    /// (from `page_key(first, last)`), and the caller must write it before
    /// committing this manifest.
    pub fn push_range(
        &mut self,
        range: ShippedRange,
        page_key: impl Fn(i64, i64) -> String,
    ) -> Option<(String, Page)> {
        self.shipped_end_offset = self.shipped_end_offset.max(range.last_offset + 1);
        self.ranges.push(range);
        if self.ranges.len() <= MAX_INLINE_RANGES {
            return None;
        }
        let sealed: Vec<ShippedRange> = self.ranges.drain(..PAGE_RANGES).collect();
        let first = sealed.first().map_or(0, |r| r.base_offset);
        let last = sealed.last().map_or(0, |r| r.last_offset);
        let key = page_key(first, last);
        self.pages.push(PageRef {
            key: key.clone(),
            first_offset: first,
            last_offset: last,
            ranges: sealed.len() as u32,
            bytes: sealed.iter().map(|r| r.bytes).sum(),
        });
        Some((
            key,
            Page {
                schema: SchemaVersion::CURRENT,
                ranges: sealed,
            },
        ))
    }

    /// The pages an applier at `offset` must read (those holding ranges that
    /// end at or after it), oldest first. Empty when the inline ranges cover
    /// it.
    pub fn pages_from(&self, offset: i64) -> &[PageRef] {
        let start = self.pages.partition_point(|p| p.last_offset < offset);
        &self.pages[start..]
    }

    /// The inline ranges that end at or after `offset`.
    pub fn inline_ranges_from(&self, offset: i64) -> &[ShippedRange] {
        let start = self.ranges.partition_point(|r| r.last_offset < offset);
        &self.ranges[start..]
    }

    /// Total number of ranges (paged and inline).
    pub fn range_count(&self) -> u64 {
        self.pages.iter().map(|p| u64::from(p.ranges)).sum::<u64>() + self.ranges.len() as u64
    }

    /// The latest epoch in the lineage.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.lineage.last().map(|e| e.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> PartitionManifest {
        let tp = TopicPartition::new("orders", 0).expect("tp");
        let mut m =
            PartitionManifest::new("src-1", &tp, "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"));
        m.version = 3;
        m.log_start_offset = 0;
        m.shipped_end_offset = 100;
        m.source_high_watermark = 100;
        m.lineage = vec![
            EpochEntry {
                epoch: 0,
                start_offset: 0,
            },
            EpochEntry {
                epoch: 2,
                start_offset: 30,
            },
            EpochEntry {
                epoch: 3,
                start_offset: 70,
            },
        ];
        m.ranges = vec![
            ShippedRange {
                key: "k/data/a".into(),
                base_offset: 0,
                last_offset: 69,
                bytes: 7000,
                batches: 7,
                crc32c: 0xdead_beef,
                max_timestamp: 1_700_000_000_000,
                epochs: vec![
                    EpochEntry {
                        epoch: 0,
                        start_offset: 0,
                    },
                    EpochEntry {
                        epoch: 2,
                        start_offset: 30,
                    },
                ],
                segment_base_offset: 0,
                completes_segment: true,
                segment_generation: 0,
            },
            ShippedRange {
                key: "k/data/b".into(),
                base_offset: 70,
                last_offset: 99,
                bytes: 3000,
                batches: 3,
                crc32c: 1,
                max_timestamp: 1_700_000_000_100,
                epochs: vec![EpochEntry {
                    epoch: 3,
                    start_offset: 70,
                }],
                segment_base_offset: 70,
                completes_segment: false,
                segment_generation: 0,
            },
        ];
        m.committed_at_ms = 1_700_000_000_200;
        m.writer = "shipper-a".into();
        m
    }

    #[test]
    fn golden_bytes_are_pinned() {
        let m = sample();
        let bytes = m.encode().expect("encode");
        let golden = r#"{"schema":{"major":1,"minor":0},"version":3,"source_cluster_id":"src-1","topic":"orders","topic_id":"vVw7a5a_QkWcK7JvBD2t8Q","partition":0,"log_start_offset":0,"shipped_end_offset":100,"source_high_watermark":100,"lineage":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30},{"epoch":3,"start_offset":70}],"pages":[],"ranges":[{"key":"k/data/a","base_offset":0,"last_offset":69,"bytes":7000,"batches":7,"crc32c":3735928559,"max_timestamp":1700000000000,"epochs":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30}],"segment_base_offset":0,"completes_segment":true,"segment_generation":0},{"key":"k/data/b","base_offset":70,"last_offset":99,"bytes":3000,"batches":3,"crc32c":1,"max_timestamp":1700000000100,"epochs":[{"epoch":3,"start_offset":70}],"segment_base_offset":70,"completes_segment":false,"segment_generation":0}],"mirror_origin":null,"deleted":false,"committed_at_ms":1700000000200,"writer":"shipper-a"}"#;
        assert_eq!(String::from_utf8(bytes.clone()).expect("utf-8"), golden);
        assert_eq!(
            PartitionManifest::decode(golden.as_bytes()).expect("decode"),
            m
        );
    }

    #[test]
    fn newer_major_is_refused_and_unknown_fields_tolerated() {
        let text = String::from_utf8(sample().encode().expect("encode")).expect("utf-8");
        let newer = text.replace(r#""major":1,"minor":0"#, r#""major":2,"minor":0"#);
        assert_eq!(
            PartitionManifest::decode(newer.as_bytes()),
            Err(ManifestFormatError::UnsupportedSchema { major: 2, minor: 0 })
        );
        let extra = text
            .replace(
                r#""writer":"shipper-a""#,
                r#""writer":"shipper-a","future_field":{"x":[1,2]}"#,
            )
            .replace(r#""minor":0"#, r#""minor":7"#);
        assert_eq!(
            PartitionManifest::decode(extra.as_bytes())
                .expect("tolerated")
                .writer,
            "shipper-a"
        );
    }

    #[test]
    fn inconsistent_manifests_are_refused() {
        let mut m = sample();
        m.ranges[1].base_offset = 60;
        assert!(matches!(m.validate(), Err(ManifestFormatError::Invalid(_))));
        let mut m = sample();
        m.shipped_end_offset = 90;
        assert!(m.validate().is_err());
        let mut m = sample();
        m.lineage.swap(0, 1);
        assert!(m.validate().is_err());
        assert!(matches!(
            PartitionManifest::decode(b"{\"schema\":"),
            Err(ManifestFormatError::Malformed(_))
        ));
        assert!(matches!(
            PartitionManifest::decode(b"[]"),
            Err(ManifestFormatError::Malformed(_))
        ));
    }

    #[test]
    fn a_hundred_thousand_ranges_stay_small_to_read() {
        let tp = TopicPartition::new("big", 0).expect("tp");
        let mut m =
            PartitionManifest::new("src-1", &tp, "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"));
        m.version = 1;
        let mut pages = 0;
        for i in 0..100_000i64 {
            let r = ShippedRange {
                key: format!(
                    "segmirror/v1/src-1/topics/big/vVw7a5a_QkWcK7JvBD2t8Q/0/data/{:020}-{:020}-e0000000000-0123456789abcdef012345678",
                    i * 100,
                    i * 100 + 99
                ),
                base_offset: i * 100,
                last_offset: i * 100 + 99,
                bytes: 1 << 20,
                batches: 64,
                crc32c: i as u32,
                max_timestamp: 1_700_000_000_000 + i,
                epochs: vec![EpochEntry {
                    epoch: 0,
                    start_offset: i * 100,
                }],
                segment_base_offset: i * 100,
                completes_segment: true,
                segment_generation: 0,
            };
            if let Some((key, page)) = m.push_range(r, |a, b| format!("pages/{a:020}-{b:020}.json"))
            {
                assert_eq!(page.ranges.len(), PAGE_RANGES);
                assert!(key.starts_with("pages/"));
                pages += 1;
            }
        }
        assert_eq!(m.range_count(), 100_000);
        assert!(m.ranges.len() <= MAX_INLINE_RANGES);
        assert_eq!(m.pages.len(), pages);
        let encoded = m.encode().expect("encode");
        // The bound stated in the module docs: 512 inline ranges and one
        // page reference per 256 older ranges.
        assert!(
            encoded.len() < 256 * 1024,
            "a poll reads {} bytes",
            encoded.len()
        );
        assert_eq!(m.shipped_end_offset, 10_000_000);
        // An applier at offset 5,000,050 reads only the pages from there.
        let from = m.pages_from(5_000_050);
        assert_eq!(
            from.first()
                .map(|p| p.first_offset <= 5_000_050 && p.last_offset >= 5_000_050),
            Some(true)
        );
        assert!(m.inline_ranges_from(9_999_999).len() == 1);
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = PartitionManifest::decode(&bytes);
        }

        #[test]
        fn mutated_manifests_never_panic(i in 0usize..2000, c in proptest::num::u8::ANY) {
            let mut bytes = sample().encode().expect("encode");
            let n = bytes.len();
            bytes[i % n] = c;
            let _ = PartitionManifest::decode(&bytes);
        }
    }
}
