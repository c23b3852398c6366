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
//! overlap; each gap is a range of offsets (`0 <= first <= last`); each range has `base <= last`; the log start is at or below the
//! shipped end; ranges lie below the shipped end. The lineage and each
//! range's epochs are [`EpochLineage`]s: their invariants (epochs and start
//! offsets `>= 0` and strictly increasing) hold by type, and an object that
//! breaks them fails to decode with the [`LineageError`](crate::lineage::LineageError)
//! as its [`ManifestFormatError::Malformed`] message.
//!
//! Versioning: `schema.major` changes when an older reader would misread
//! the object; a newer major is refused with a clear error. Minor changes
//! only add fields (or, like 1.1, an envelope an older reader ignores):
//! unknown fields are ignored. History (the same for manifests, pages and
//! heads):
//! - 1.0: plain compact JSON.
//! - 1.1: the same JSON ending with a CRC-32C of its own bytes,
//!   `...,"crc32c":<u32 decimal>}` (see `codec`): any bit flip is a
//!   [`ManifestFormatError::ChecksumMismatch`] (or
//!   [`ManifestFormatError::MissingChecksum`] when the trailer itself is
//!   damaged). 1.0 objects are still read, with a warning.
//! - 1.1, later: a manifest may end its fields with `"gaps":[...]`
//!   ([`crate::gaps::Gap`]), written only when the partition has a gap.
//!   An additive field, so the minor version did not change (the manifest
//!   never bumped it for added fields; `pages`, `mirror_origin`, `deleted`
//!   and `segment_generation` came the same way): an older reader ignores
//!   it, and a manifest without gaps encodes to the same bytes as before.
//!   A build without this field that commits the next version drops the
//!   list: run shippers of one cluster at one version.
//!
//! Encoding is deterministic (fields in declaration order, no whitespace,
//! maps ordered), so equal values encode to equal bytes and the golden
//! bytes in the tests pin the format.
//!
//! Size bound: a poll reads one manifest version, which holds at most
//! [`MAX_INLINE_RANGES`] ranges plus one [`PageRef`] per [`PAGE_RANGES`]
//! older ranges: for 100,000 ranges that is 256 inline ranges and 390 page
//! references (about 120 KiB of JSON), whatever the partition's age.

use kafkalog::epoch::EpochLineage;
use kafkalog::topic::{TopicId, TopicPartition};
use serde::{Deserialize, Serialize};

use crate::codec::{self, ObjectKind};
/// The envelope's vocabulary, defined in [`crate::codec`] (which every
/// checksummed object, not only manifests, is encoded with) and named here
/// too, where the manifest's readers have always found it.
pub use crate::codec::{ManifestFormatError, SCHEMA_MAJOR, SCHEMA_MINOR, SchemaVersion};
use crate::gaps::Gap;

/// Most ranges kept inline in a manifest version.
pub const MAX_INLINE_RANGES: usize = 512;
/// Ranges per sealed page. When the inline ranges exceed
/// [`MAX_INLINE_RANGES`], the oldest [`PAGE_RANGES`] are sealed into a page.
pub const PAGE_RANGES: usize = 256;

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
    /// first batch in the range (a sub-lineage of the partition's).
    pub epochs: EpochLineage,
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
    /// Where the range's bytes start inside the object `key` when the
    /// object holds more than this range (a pack of a shipper cycle,
    /// `crate::pack`): the range is bytes `object_offset..object_offset +
    /// bytes` of it, and `crc32c` is theirs. Absent (the only form before
    /// packs): the range is the whole object. An additive field, written
    /// only for pack ranges: a manifest without one encodes as before, and
    /// a reader that predates packs reads the whole pack and refuses it by
    /// its size, loudly; run appliers at least as new as the shippers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_offset: Option<u64>,
    /// True for a range compaction rewrote into an object shared with
    /// other partitions (a compacted pack, `crate::compact`, "level 1"):
    /// compaction rewrites it again only into an object of the
    /// partition's own, never into another shared one, so a byte moves at
    /// most twice. Absent (false) for ranges as shipped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compacted: bool,
}

impl ShippedRange {
    /// The bytes of the object `key` that are this range: `None` for the
    /// whole object, else the range inside a pack (one ranged GET).
    pub fn object_range(&self) -> Option<std::ops::Range<u64>> {
        self.object_offset
            .map(|at| at..at.saturating_add(self.bytes))
    }

    /// The leader epoch the range assigns to `offset`: that of its last
    /// epoch entry starting at or below it (Kafka's `epochForOffset` over
    /// the range's entries); `None` below the first entry or when the range
    /// lists no epochs.
    pub fn epoch_at(&self, offset: i64) -> Option<i32> {
        self.epochs.epoch_for_offset(offset)
    }
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

impl Page {
    /// Decodes a sealed page object: checks its CRC-32C trailer (schema 1.1
    /// and later; 1.0 pages are accepted with a warning) and its version.
    /// The result's `schema` is [`SchemaVersion::CURRENT`].
    pub fn decode(bytes: &[u8]) -> Result<Page, ManifestFormatError> {
        Self::decode_from(None, bytes)
    }

    /// [`Page::decode`] of the object at `key`.
    pub fn decode_from(key: Option<&str>, bytes: &[u8]) -> Result<Page, ManifestFormatError> {
        let mut page: Page = codec::decode(ObjectKind::Page, key, bytes)?;
        page.schema = SchemaVersion::CURRENT;
        Ok(page)
    }

    /// Encodes the page as [`SchemaVersion::CURRENT`] with its CRC-32C
    /// trailer. This, not `serde_json`, is how a page is written: a 1.1
    /// page without the trailer is refused by readers.
    pub fn encode(&self) -> Result<Vec<u8>, ManifestFormatError> {
        if self.schema == SchemaVersion::CURRENT {
            codec::encode(ObjectKind::Page, self)
        } else {
            let current = Page {
                schema: SchemaVersion::CURRENT,
                ..self.clone()
            };
            codec::encode(ObjectKind::Page, &current)
        }
    }
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
    pub lineage: EpochLineage,
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
    /// Gaps: offsets the source lost before they were shipped (see
    /// [`crate::gaps`]), ordered by first offset. Every later version
    /// carries them (here, never in a page); absent from the encoding when
    /// empty, so a version without gaps has the bytes it always had.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<Gap>,
    /// The source topic's configs when this version was cut: every value
    /// not at Kafka's default, with its source (see [`crate::topic_config`];
    /// the destination's filter decides what it copies). `None` when the
    /// shipper reads no metadata log or cannot trust what it read of these
    /// configs; absent from the encoding then, so such a version has the
    /// bytes it always had. A change of configs alone is a new version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_configs: Option<std::collections::BTreeMap<String, crate::topic_config::ConfigValue>>,
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
            lineage: EpochLineage::new(),
            pages: Vec::new(),
            ranges: Vec::new(),
            mirror_origin: None,
            deleted: false,
            committed_at_ms: 0,
            writer: String::new(),
            gaps: Vec::new(),
            topic_configs: None,
        }
    }

    /// The topic-partition.
    pub fn topic_partition(&self) -> Result<TopicPartition, ManifestFormatError> {
        TopicPartition::new(&self.topic, self.partition)
            .map_err(|e| ManifestFormatError::Invalid(e.to_string()))
    }

    /// Decodes and validates a manifest object: checks its CRC-32C trailer
    /// (schema 1.1 and later; 1.0 objects are accepted with a warning) and
    /// its version first. The result's `schema` is
    /// [`SchemaVersion::CURRENT`], the version it encodes as.
    pub fn decode(bytes: &[u8]) -> Result<PartitionManifest, ManifestFormatError> {
        Self::decode_from(None, bytes)
    }

    /// [`PartitionManifest::decode`] of the object at `key` (named in the
    /// warning about unchecked objects).
    pub fn decode_from(
        key: Option<&str>,
        bytes: &[u8],
    ) -> Result<PartitionManifest, ManifestFormatError> {
        let mut m: PartitionManifest = codec::decode(ObjectKind::Manifest, key, bytes)?;
        m.validate()?;
        m.schema = SchemaVersion::CURRENT;
        Ok(m)
    }

    /// Encodes the manifest (validated first) as [`SchemaVersion::CURRENT`]
    /// with its CRC-32C trailer, whatever its `schema` field says.
    pub fn encode(&self) -> Result<Vec<u8>, ManifestFormatError> {
        self.validate()?;
        if self.schema == SchemaVersion::CURRENT {
            codec::encode(ObjectKind::Manifest, self)
        } else {
            let current = PartitionManifest {
                schema: SchemaVersion::CURRENT,
                ..self.clone()
            };
            codec::encode(ObjectKind::Manifest, &current)
        }
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
        for g in &self.gaps {
            if g.first_offset < 0 || g.first_offset > g.last_offset {
                return bad(format!(
                    "gap {}-{} is not a range of offsets",
                    g.first_offset, g.last_offset
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
            if let Some(l) = prev_last
                && r.base_offset <= l
            {
                return bad(format!(
                    "range {} at {} overlaps the previous range ending at {l}",
                    r.key, r.base_offset
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
        self.lineage.latest_epoch()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lineage from `(epoch, start_offset)` pairs.
    fn lineage(pairs: &[(i32, i64)]) -> EpochLineage {
        EpochLineage::from_entries(pairs.iter().map(|&(epoch, start_offset)| {
            kafkalog::checkpoint::EpochEntry {
                epoch,
                start_offset,
            }
        }))
        .expect("valid lineage")
    }

    #[test]
    fn a_range_assigns_the_epoch_of_its_last_entry_at_or_below_an_offset() {
        let mut r = sample().ranges[0].clone();
        r.epochs = lineage(&[(2, 10), (5, 20)]);
        assert_eq!(r.epoch_at(9), None);
        assert_eq!(r.epoch_at(10), Some(2));
        assert_eq!(r.epoch_at(19), Some(2));
        assert_eq!(r.epoch_at(20), Some(5));
        assert_eq!(r.epoch_at(1_000), Some(5));
        r.epochs = EpochLineage::new();
        assert_eq!(r.epoch_at(20), None);
    }

    pub(crate) fn sample() -> PartitionManifest {
        let tp = TopicPartition::new("orders", 0).expect("tp");
        let mut m =
            PartitionManifest::new("src-1", &tp, "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"));
        m.version = 3;
        m.log_start_offset = 0;
        m.shipped_end_offset = 100;
        m.source_high_watermark = 100;
        m.lineage = lineage(&[(0, 0), (2, 30), (3, 70)]);
        m.ranges = vec![
            ShippedRange {
                key: "k/data/a".into(),
                base_offset: 0,
                last_offset: 69,
                bytes: 7000,
                batches: 7,
                crc32c: 0xdead_beef,
                max_timestamp: 1_700_000_000_000,
                epochs: lineage(&[(0, 0), (2, 30)]),
                segment_base_offset: 0,
                completes_segment: true,
                segment_generation: 0,
                object_offset: None,
                compacted: false,
            },
            ShippedRange {
                key: "k/data/b".into(),
                base_offset: 70,
                last_offset: 99,
                bytes: 3000,
                batches: 3,
                crc32c: 1,
                max_timestamp: 1_700_000_000_100,
                epochs: lineage(&[(3, 70)]),
                segment_base_offset: 70,
                completes_segment: false,
                segment_generation: 0,
                compacted: false,
                object_offset: None,
            },
        ];
        m.committed_at_ms = 1_700_000_000_200;
        m.writer = "shipper-a".into();
        m
    }

    /// The sample as schema 1.0 wrote it (no checksum): pinned before 1.1.
    const GOLDEN_1_0: &str = r#"{"schema":{"major":1,"minor":0},"version":3,"source_cluster_id":"src-1","topic":"orders","topic_id":"vVw7a5a_QkWcK7JvBD2t8Q","partition":0,"log_start_offset":0,"shipped_end_offset":100,"source_high_watermark":100,"lineage":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30},{"epoch":3,"start_offset":70}],"pages":[],"ranges":[{"key":"k/data/a","base_offset":0,"last_offset":69,"bytes":7000,"batches":7,"crc32c":3735928559,"max_timestamp":1700000000000,"epochs":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30}],"segment_base_offset":0,"completes_segment":true,"segment_generation":0},{"key":"k/data/b","base_offset":70,"last_offset":99,"bytes":3000,"batches":3,"crc32c":1,"max_timestamp":1700000000100,"epochs":[{"epoch":3,"start_offset":70}],"segment_base_offset":70,"completes_segment":false,"segment_generation":0}],"mirror_origin":null,"deleted":false,"committed_at_ms":1700000000200,"writer":"shipper-a"}"#;

    /// The sample as schema 1.1 writes it: the 1.0 fields, then the CRC-32C
    /// of everything before `,"crc32c":` (727695309 = 0x2b5fbfcd, checked
    /// against an independent bitwise CRC-32C).
    const GOLDEN_1_1: &str = r#"{"schema":{"major":1,"minor":1},"version":3,"source_cluster_id":"src-1","topic":"orders","topic_id":"vVw7a5a_QkWcK7JvBD2t8Q","partition":0,"log_start_offset":0,"shipped_end_offset":100,"source_high_watermark":100,"lineage":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30},{"epoch":3,"start_offset":70}],"pages":[],"ranges":[{"key":"k/data/a","base_offset":0,"last_offset":69,"bytes":7000,"batches":7,"crc32c":3735928559,"max_timestamp":1700000000000,"epochs":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30}],"segment_base_offset":0,"completes_segment":true,"segment_generation":0},{"key":"k/data/b","base_offset":70,"last_offset":99,"bytes":3000,"batches":3,"crc32c":1,"max_timestamp":1700000000100,"epochs":[{"epoch":3,"start_offset":70}],"segment_base_offset":70,"completes_segment":false,"segment_generation":0}],"mirror_origin":null,"deleted":false,"committed_at_ms":1700000000200,"writer":"shipper-a","crc32c":727695309}"#;

    #[test]
    fn golden_bytes_are_pinned() {
        let m = sample();
        let bytes = m.encode().expect("encode");
        assert_eq!(String::from_utf8(bytes.clone()).expect("utf-8"), GOLDEN_1_1);
        assert_eq!(
            PartitionManifest::decode(GOLDEN_1_1.as_bytes()).expect("decode"),
            m
        );
        assert_eq!(
            crate::codec::verify(ObjectKind::Manifest, GOLDEN_1_1.as_bytes()),
            Ok(crate::codec::Integrity::Verified {
                schema: SchemaVersion { major: 1, minor: 1 },
                crc32c: 0x2b5f_bfcd
            })
        );
    }

    /// The sample with a retention gap: `"gaps"` after `writer`, the rest
    /// unchanged (3155544709 = 0xbc15ca85, checked against an independent bitwise
    /// CRC-32C).
    const GOLDEN_WITH_GAP: &str = r#"{"schema":{"major":1,"minor":1},"version":3,"source_cluster_id":"src-1","topic":"orders","topic_id":"vVw7a5a_QkWcK7JvBD2t8Q","partition":0,"log_start_offset":0,"shipped_end_offset":100,"source_high_watermark":100,"lineage":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30},{"epoch":3,"start_offset":70}],"pages":[],"ranges":[{"key":"k/data/a","base_offset":0,"last_offset":69,"bytes":7000,"batches":7,"crc32c":3735928559,"max_timestamp":1700000000000,"epochs":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30}],"segment_base_offset":0,"completes_segment":true,"segment_generation":0},{"key":"k/data/b","base_offset":70,"last_offset":99,"bytes":3000,"batches":3,"crc32c":1,"max_timestamp":1700000000100,"epochs":[{"epoch":3,"start_offset":70}],"segment_base_offset":70,"completes_segment":false,"segment_generation":0}],"mirror_origin":null,"deleted":false,"committed_at_ms":1700000000200,"writer":"shipper-a","gaps":[{"first_offset":100,"last_offset":229,"cause":"retention","lost_epochs":{"at_least":3,"at_most":3},"reused_from_epoch":null,"detected_at_ms":1700000000300,"acknowledged_at_ms":null}],"crc32c":3155544709}"#;

    fn sample_with_gap() -> PartitionManifest {
        let mut m = sample();
        m.gaps = vec![crate::gaps::Gap {
            first_offset: 100,
            last_offset: 229,
            cause: crate::gaps::GapCause::Retention,
            lost_epochs: Some(crate::gaps::EpochSpan {
                at_least: 3,
                at_most: Some(3),
            }),
            reused_from_epoch: None,
            detected_at_ms: 1_700_000_000_300,
            acknowledged_at_ms: None,
        }];
        m
    }

    #[test]
    fn a_manifest_with_a_gap_has_pinned_bytes_and_a_gap_free_one_is_unchanged() {
        let m = sample_with_gap();
        let bytes = m.encode().expect("encode");
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert_eq!(text, GOLDEN_WITH_GAP, "{text}");
        assert_eq!(PartitionManifest::decode(&bytes).expect("decode"), m);
        crate::codec::testing::every_bit_flip_is_refused(&bytes, PartitionManifest::decode);
        // A gap that is not a range of offsets is refused.
        let mut bad = sample_with_gap();
        bad.gaps[0].first_offset = 300;
        assert!(matches!(bad.encode(), Err(ManifestFormatError::Invalid(_))));
        let sealed = crate::codec::testing::reseal(&bytes, |t| {
            t.replace(r#""first_offset":100"#, r#""first_offset":-5"#)
        });
        assert!(matches!(
            PartitionManifest::decode(&sealed),
            Err(ManifestFormatError::Invalid(m)) if m.contains("gap -5-229")
        ));
        // Without gaps: the bytes of GOLDEN_1_1, as before gaps existed.
        assert_eq!(sample().encode().expect("encode"), GOLDEN_1_1.as_bytes());
        // An older reader's view (the field unknown) still decodes: the
        // gap-free sample is what it sees.
        let stripped = crate::codec::testing::reseal(&bytes, |t| {
            let at = t.find(r#","gaps":"#).expect("gaps field");
            t[..at].to_string()
        });
        assert_eq!(stripped, GOLDEN_1_1.as_bytes());
    }

    #[test]
    fn a_manifest_with_topic_configs_round_trips_and_one_without_keeps_its_bytes() {
        use crate::topic_config::{ConfigSource, ConfigValue};
        let mut m = sample();
        m.topic_configs = Some(
            [
                ("cleanup.policy", "compact", ConfigSource::Topic),
                ("retention.ms", "-1", ConfigSource::DynamicClusterDefault),
            ]
            .into_iter()
            .map(|(k, v, source)| {
                let value = ConfigValue {
                    value: v.into(),
                    source,
                };
                (k.to_string(), value)
            })
            .collect(),
        );
        let bytes = m.encode().expect("encode");
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert!(
            text.contains(r#""topic_configs":{"cleanup.policy":{"value":"compact","source":"topic"},"retention.ms":{"value":"-1","source":"dynamic_cluster_default"}}"#),
            "{text}"
        );
        assert_eq!(PartitionManifest::decode(&bytes).expect("decode"), m);
        crate::codec::testing::every_bit_flip_is_refused(&bytes, PartitionManifest::decode);
        // No configs (no metadata log): the bytes of GOLDEN_1_1.
        assert_eq!(sample().encode().expect("encode"), GOLDEN_1_1.as_bytes());
    }

    #[test]
    fn schema_1_0_manifests_still_decode() {
        let m = PartitionManifest::decode(GOLDEN_1_0.as_bytes()).expect("a 1.0 manifest");
        assert_eq!(m, sample(), "read as the current schema");
        assert_eq!(
            crate::codec::verify(ObjectKind::Manifest, GOLDEN_1_0.as_bytes()),
            Ok(crate::codec::Integrity::Unchecked {
                schema: SchemaVersion { major: 1, minor: 0 }
            })
        );
        // Rewritten, it gains the checksum.
        assert_eq!(m.encode().expect("encode"), GOLDEN_1_1.as_bytes());
    }

    #[test]
    fn every_single_bit_flip_of_a_manifest_is_refused() {
        crate::codec::testing::every_bit_flip_is_refused(GOLDEN_1_1.as_bytes(), |b| {
            PartitionManifest::decode(b)
        });
        // With a page reference and a mirror origin too.
        let mut m = sample();
        m.pages = vec![PageRef {
            key: "k/pages/x".into(),
            first_offset: -10,
            last_offset: -1,
            ranges: 1,
            bytes: 9,
        }];
        m.mirror_origin = Some(MirrorOrigin {
            source_cluster_id: "other".into(),
            state: "STOPPED".into(),
            lme: Some(4),
        });
        m.deleted = true;
        let bytes = m.encode().expect("encode");
        assert_eq!(PartitionManifest::decode(&bytes).expect("decode"), m);
        crate::codec::testing::every_bit_flip_is_refused(&bytes, PartitionManifest::decode);
    }

    #[test]
    fn a_1_1_manifest_without_its_checksum_is_refused() {
        let bare = crate::codec::testing::strip_trailer(GOLDEN_1_1.as_bytes());
        assert_eq!(
            PartitionManifest::decode(&bare),
            Err(ManifestFormatError::MissingChecksum {
                object: ObjectKind::Manifest,
                major: 1,
                minor: 1
            })
        );
        let text = String::from_utf8(bare).expect("utf-8");
        for damaged in [
            text.replace(
                r#""writer":"shipper-a"}"#,
                r#""writer":"shipper-a","crc32c":"727695309"}"#,
            ),
            text.replace(
                r#""writer":"shipper-a"}"#,
                r#""writer":"shipper-a","crc32c":727695309} "#,
            ),
            text.replace(
                r#""writer":"shipper-a"}"#,
                r#""writer":"shipper-a","crc32c":null}"#,
            ),
            text.replace(
                r#""writer":"shipper-a"}"#,
                r#""writer":"shipper-a", "crc32c":727695309}"#,
            ),
        ] {
            assert!(
                matches!(
                    PartitionManifest::decode(damaged.as_bytes()),
                    Err(ManifestFormatError::MissingChecksum { .. })
                ),
                "{damaged}"
            );
        }
    }

    #[test]
    fn a_damaged_lineage_offset_is_a_checksum_mismatch() {
        // The shape of reliability finding 3: one digit of a lineage start
        // offset, still valid JSON and a valid manifest.
        let at = GOLDEN_1_1.find(r#""start_offset":30"#).expect("offset") + 16;
        let mut bytes = GOLDEN_1_1.as_bytes().to_vec();
        bytes[at] ^= 0x01;
        let err = PartitionManifest::decode(&bytes).expect_err("refused");
        assert_eq!(
            err,
            ManifestFormatError::ChecksumMismatch {
                object: ObjectKind::Manifest,
                expected: 727_695_309,
                actual: crate::codec::crc32c(&bytes[..GOLDEN_1_1.len() - 20]),
            }
        );
        let text = err.to_string();
        assert!(
            text.starts_with(
                "manifest checksum mismatch: the object says CRC-32C 0x2b5fbfcd, its bytes have 0x"
            ),
            "{text}"
        );
    }

    #[test]
    fn newer_major_is_refused_and_unknown_fields_tolerated() {
        use crate::codec::testing::{reseal, strip_trailer};
        let bytes = sample().encode().expect("encode");
        let newer = reseal(&bytes, |t| {
            t.replace(r#""major":1,"minor":1"#, r#""major":2,"minor":0"#)
        });
        assert_eq!(
            PartitionManifest::decode(&newer),
            Err(ManifestFormatError::UnsupportedSchema { major: 2, minor: 0 })
        );
        // A newer major that dropped the trailer is still "newer", not damaged.
        assert_eq!(
            PartitionManifest::decode(&strip_trailer(&newer)),
            Err(ManifestFormatError::UnsupportedSchema { major: 2, minor: 0 })
        );
        let extra = reseal(&bytes, |t| {
            t.replace(
                r#""writer":"shipper-a""#,
                r#""writer":"shipper-a","future_field":{"x":[1,2]}"#,
            )
            .replace(r#""minor":1"#, r#""minor":7"#)
        });
        let m = PartitionManifest::decode(&extra).expect("tolerated");
        assert_eq!(m.writer, "shipper-a");
        assert_eq!(
            m.schema,
            SchemaVersion::CURRENT,
            "rewritten as this build's version"
        );
        // And in a 1.0 manifest.
        let old = GOLDEN_1_0.replace(
            r#""writer":"shipper-a""#,
            r#""writer":"shipper-a","crc32c":5,"future_field":1"#,
        );
        assert_eq!(
            PartitionManifest::decode(old.as_bytes()).expect("tolerated"),
            sample()
        );
    }

    #[test]
    fn encoding_stamps_the_current_version() {
        let mut m = sample();
        m.schema = SchemaVersion { major: 1, minor: 0 };
        assert_eq!(m.encode().expect("encode"), GOLDEN_1_1.as_bytes());
    }

    const PAGE_1_0: &str = r#"{"schema":{"major":1,"minor":0},"ranges":[{"key":"k/data/b","base_offset":70,"last_offset":99,"bytes":3000,"batches":3,"crc32c":1,"max_timestamp":1700000000100,"epochs":[{"epoch":3,"start_offset":70}],"segment_base_offset":70,"completes_segment":false,"segment_generation":0}]}"#;

    /// 1430542767 = 0x554459af, checked against an independent bitwise CRC-32C.
    const PAGE_1_1: &str = r#"{"schema":{"major":1,"minor":1},"ranges":[{"key":"k/data/b","base_offset":70,"last_offset":99,"bytes":3000,"batches":3,"crc32c":1,"max_timestamp":1700000000100,"epochs":[{"epoch":3,"start_offset":70}],"segment_base_offset":70,"completes_segment":false,"segment_generation":0}],"crc32c":1430542767}"#;

    fn sample_page() -> Page {
        Page {
            schema: SchemaVersion::CURRENT,
            ranges: sample().ranges[1..].to_vec(),
        }
    }

    #[test]
    fn page_golden_bytes_round_trip_and_flips() {
        let page = sample_page();
        let bytes = page.encode().expect("encode");
        assert_eq!(String::from_utf8(bytes.clone()).expect("utf-8"), PAGE_1_1);
        assert_eq!(Page::decode(&bytes).expect("decode"), page);
        assert_eq!(
            Page::decode(PAGE_1_0.as_bytes()).expect("a 1.0 page still decodes"),
            page
        );
        assert_eq!(
            Page::decode(&crate::codec::testing::strip_trailer(&bytes)),
            Err(ManifestFormatError::MissingChecksum {
                object: ObjectKind::Page,
                major: 1,
                minor: 1
            })
        );
        crate::codec::testing::every_bit_flip_is_refused(&bytes, Page::decode);
    }

    #[test]
    fn pages_sealed_by_push_range_encode_and_decode() {
        let tp = TopicPartition::new("p", 0).expect("tp");
        let mut m =
            PartitionManifest::new("src-1", &tp, "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"));
        let mut sealed = None;
        for i in 0..=MAX_INLINE_RANGES as i64 {
            let mut r = sample().ranges[0].clone();
            r.base_offset = i * 10;
            r.last_offset = i * 10 + 9;
            sealed = sealed.or(m.push_range(r, |a, b| format!("pages/{a:020}-{b:020}.json")));
        }
        let (_, page) = sealed.expect("a page was sealed");
        let bytes = page.encode().expect("encode");
        assert_eq!(Page::decode(&bytes).expect("decode"), page);
        assert_eq!(page.encode().expect("encode"), bytes, "deterministic");
    }

    #[test]
    fn inconsistent_manifests_are_refused() {
        let mut m = sample();
        m.ranges[1].base_offset = 60;
        assert!(matches!(m.validate(), Err(ManifestFormatError::Invalid(_))));
        let mut m = sample();
        m.shipped_end_offset = 90;
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
    fn a_manifest_with_an_out_of_order_lineage_does_not_decode() {
        use crate::codec::testing::reseal;
        let bytes = sample().encode().expect("encode");
        // Sealed with a valid checksum, as a faulty writer would: the
        // lineage is refused by its type, never read as empty.
        let swapped = reseal(&bytes, |t| {
            t.replacen(
                r#""lineage":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30}"#,
                r#""lineage":[{"epoch":2,"start_offset":30},{"epoch":0,"start_offset":0}"#,
                1,
            )
        });
        assert_ne!(swapped, bytes);
        match PartitionManifest::decode(&swapped) {
            Err(ManifestFormatError::Malformed(m)) => assert!(
                m.contains(
                    "epoch lineage out of order at entry 1: 0@0 follows 2@30; epochs and \
                     start offsets must both increase strictly"
                ),
                "{m}"
            ),
            other => panic!("decoded {other:?}"),
        }
        // The same for a range's epochs, and for a negative entry.
        let bad_range = reseal(&bytes, |t| {
            t.replacen(
                r#""epochs":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":30}]"#,
                r#""epochs":[{"epoch":0,"start_offset":0},{"epoch":2,"start_offset":0}]"#,
                1,
            )
        });
        assert_ne!(bad_range, bytes);
        assert!(matches!(
            PartitionManifest::decode(&bad_range),
            Err(ManifestFormatError::Malformed(m)) if m.contains("epoch lineage out of order at entry 1")
        ));
        let negative = reseal(&bytes, |t| {
            t.replacen(r#""lineage":[{"epoch":0,"#, r#""lineage":[{"epoch":-1,"#, 1)
        });
        assert!(matches!(
            PartitionManifest::decode(&negative),
            Err(ManifestFormatError::Malformed(m)) if m.contains("must not be negative")
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
                epochs: lineage(&[(0, i * 100)]),
                segment_base_offset: i * 100,
                completes_segment: true,
                compacted: false,
                segment_generation: 0,
                object_offset: None,
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

    fn arb_manifest() -> impl proptest::strategy::Strategy<Value = PartitionManifest> {
        use proptest::prelude::*;
        (
            "[a-z][a-z0-9._-]{0,20}",
            0..1000i32,
            proptest::collection::vec((1..1_000_000i64, 0..20i32, any::<u32>()), 0..6),
            any::<i64>(),
            "[ -~]{0,12}",
            proptest::option::of(("[a-zA-Z0-9_-]{1,10}", proptest::option::of(any::<i32>()))),
            proptest::collection::vec((0..1_000_000i64, 0..1000i64, any::<bool>()), 0..3),
        )
            .prop_map(|(topic, partition, steps, at, writer, origin, gaps)| {
                let tp = TopicPartition::new(&topic, partition).expect("tp");
                let mut m = PartitionManifest::new(
                    "src-1",
                    &tp,
                    "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
                );
                let mut next = 0i64;
                for (i, (len, epoch, crc)) in steps.into_iter().enumerate() {
                    let mut r = sample().ranges[0].clone();
                    r.key = format!("k/data/{i}");
                    r.base_offset = next;
                    r.last_offset = next + len - 1;
                    r.crc32c = crc;
                    r.epochs = lineage(&[(epoch, next)]);
                    next += len;
                    let _ = m.push_range(r, |a, b| format!("p/{a}-{b}"));
                }
                m.source_high_watermark = next;
                m.committed_at_ms = at;
                m.writer = writer;
                m.mirror_origin = origin.map(|(c, lme)| MirrorOrigin {
                    source_cluster_id: c,
                    state: "MIRRORING".into(),
                    lme,
                });
                let found = gaps
                    .into_iter()
                    .map(|(first, len, unclean)| crate::gaps::Gap {
                        first_offset: first,
                        last_offset: first + len,
                        cause: if unclean {
                            crate::gaps::GapCause::UncleanTruncation
                        } else {
                            crate::gaps::GapCause::Retention
                        },
                        lost_epochs: unclean.then_some(crate::gaps::EpochSpan {
                            at_least: 1,
                            at_most: None,
                        }),
                        reused_from_epoch: unclean.then_some(2),
                        detected_at_ms: at,
                        acknowledged_at_ms: (!unclean).then_some(at),
                    });
                crate::gaps::merge(&mut m.gaps, found);
                m
            })
    }

    proptest::proptest! {
        #[test]
        fn manifests_round_trip_and_any_bit_flip_is_refused(
            m in arb_manifest(),
            bit in proptest::num::usize::ANY,
        ) {
            let bytes = m.encode().expect("encode");
            proptest::prop_assert_eq!(&PartitionManifest::decode(&bytes).expect("decode"), &m);
            proptest::prop_assert_eq!(&m.encode().expect("encode"), &bytes, "deterministic");
            let bit = bit % (bytes.len() * 8);
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let decoded = PartitionManifest::decode(&flipped);
            proptest::prop_assert!(
                matches!(
                    decoded,
                    Err(ManifestFormatError::ChecksumMismatch { .. }
                        | ManifestFormatError::MissingChecksum { .. })
                ),
                "bit {} gave {:?}", bit, decoded
            );
        }

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
