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
//! A head also names the newest version of the cluster's consumer-group
//! offsets (`groups`), so an idle applier learns that they did not change
//! from the same GET.
//!
//! Heads older than [`KEEP_HEADS`] versions are deleted by the writer.
//!
//! Format: compact JSON of [`Head`] with, since schema 1.1, the CRC-32C
//! trailer of `codec` (`...,"crc32c":<u32 decimal>}`): a damaged head (say a
//! flipped bit in a topic id) is refused as a format error instead of being
//! adopted. Heads of schema 1.0 (no trailer) are still read, with a warning.

use std::collections::BTreeMap;
use std::time::Duration;

use kafkalog::topic::TopicId;
use serde::{Deserialize, Serialize};

use crate::codec::{self, ObjectKind};
use crate::delta::Delta;
use crate::groups::GroupsPointer;
use crate::partition::{ManifestFormatError, PartitionManifest, SchemaVersion};

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
    /// The manifest's gaps (`crate::gaps`), so `shipper status` shows them
    /// from the head alone; absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<crate::gaps::Gap>,
    /// When `manifest_version` is made by deltas carried in heads (layout
    /// 2, step 2): the manifest object they follow and the heads that
    /// carry them, in order. Absent: `manifest_version` is an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<DeltaChain>,
    /// The delta that made `manifest_version`, in the head that committed
    /// it only ([`Head::commit`] clears the others').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<Delta>,
}

/// The deltas after a manifest object (`crate::delta`): version
/// `object_version + 1 + i` is made by the delta in head `heads[i]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaChain {
    /// The manifest object the chain starts after.
    pub object_version: u64,
    /// The heads that carry the deltas, oldest first.
    pub heads: Vec<u64>,
    /// Where version `object_version` is when it is not an object of its
    /// own (`topics/.../manifest/<version>.json`) but bytes of a shared
    /// one: a chain as long as [`MAX_CHAIN`] allows starts again from the
    /// version its next delta makes, and a cycle writes the versions of
    /// every partition starting again in one object ([`ManifestSlice`]).
    /// Absent: the version is an object of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<ManifestSlice>,
}

/// A manifest version inside a shared object: a cycle's manifest pack
/// (a pack key, `packs/<hh>/<upload id>.pack`, holding encoded manifests
/// one after another, each with its own CRC-32C trailer), written before
/// the head that names it. Read with one ranged GET.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestSlice {
    /// The shared object.
    pub key: String,
    /// Where the manifest's bytes start in it.
    pub offset: u64,
    /// How many bytes it has.
    pub bytes: u64,
}

/// Most deltas after a manifest object: a writer writes an object before
/// its partition's chain is longer, so every delta of a chain is in a head
/// still kept ([`KEEP_HEADS`] is at least twice as many).
pub const MAX_CHAIN: usize = 32;
const _: () = assert!(MAX_CHAIN as u64 * 2 <= KEEP_HEADS);

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
            gaps: m.gaps.clone(),
            chain: None,
            delta: None,
        }
    }

    /// The entry committing `delta` (which makes `next`), written after
    /// the manifest object `object_version` (the newest this writer
    /// knows): see [`Head::commit`].
    pub fn for_delta(next: &PartitionManifest, delta: Delta, object_version: u64) -> HeadEntry {
        HeadEntry {
            chain: Some(DeltaChain {
                object_version,
                heads: Vec::new(),
                base: None,
            }),
            delta: Some(delta),
            ..HeadEntry::for_manifest(next)
        }
    }

    /// The head line of a version that starts its partition's chain again
    /// ([`DeltaChain::base`]): `next`, made by `delta` from the version
    /// the head names and written at `slice` of a shared object. Readers
    /// holding the version before move on by the delta; others read the
    /// slice.
    pub fn for_rebase(next: &PartitionManifest, delta: Delta, slice: ManifestSlice) -> HeadEntry {
        HeadEntry {
            chain: Some(DeltaChain {
                object_version: next.version,
                heads: Vec::new(),
                base: Some(slice),
            }),
            delta: Some(delta),
            ..HeadEntry::for_manifest(next)
        }
    }

    /// True for a line made by [`HeadEntry::for_rebase`].
    pub fn rebases(&self) -> bool {
        self.chain
            .as_ref()
            .is_some_and(|c| c.base.is_some() && c.object_version == self.manifest_version)
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
    /// The newest consumer-group offsets (`groups`), when shipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupsPointer>,
    /// Each writer's request rate and its cost as it last measured them
    /// (`shipper status` shows them), by writer id; updated only when a
    /// head is written anyway, never a head of its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub costs: BTreeMap<String, WriterCost>,
}

/// A writer's request rate over its measuring window and what it costs a
/// month at the prices it names (`bucket::pricing`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterCost {
    /// The prices preset.
    pub prices: String,
    /// The window measured, in seconds.
    pub window_s: u64,
    /// Billed write-class requests per hour.
    pub writes_per_hour: u64,
    /// Billed read-class requests per hour.
    pub reads_per_hour: u64,
    /// Their cost over a 30-day month, in cents.
    pub cents_per_month: u64,
    /// When it was measured (ms since the epoch).
    pub measured_at_ms: i64,
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
            groups: None,
            costs: BTreeMap::new(),
        }
    }

    /// Decodes a head object: checks its CRC-32C trailer (schema 1.1 and
    /// later; 1.0 heads are accepted with a warning) and its version. The
    /// result's `schema` is [`SchemaVersion::CURRENT`].
    pub fn decode(bytes: &[u8]) -> Result<Head, ManifestFormatError> {
        Self::decode_from(None, bytes)
    }

    /// [`Head::decode`] of the object at `key`.
    pub fn decode_from(key: Option<&str>, bytes: &[u8]) -> Result<Head, ManifestFormatError> {
        let mut head: Head = codec::decode(ObjectKind::Head, key, bytes)?;
        head.schema = SchemaVersion::CURRENT;
        Ok(head)
    }

    /// Encodes a head object as [`SchemaVersion::CURRENT`] with its CRC-32C
    /// trailer.
    pub fn encode(&self) -> Result<Vec<u8>, ManifestFormatError> {
        if self.schema == SchemaVersion::CURRENT {
            codec::encode(ObjectKind::Head, self)
        } else {
            let current = Head {
                schema: SchemaVersion::CURRENT,
                ..self.clone()
            };
            codec::encode(ObjectKind::Head, &current)
        }
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

    /// The head after this one, at `seq`, with `entries` committed: the
    /// deltas this head carried are cleared (a head carries only its own),
    /// an entry without a delta (a manifest object) is merged as
    /// [`Head::merge`] does, and an entry with a delta is taken only when
    /// the delta extends what this head names for its partition: this
    /// head's version is the delta's `after_version`, or this head names
    /// an older version (or none) and the delta follows the manifest object
    /// the writer names in its chain. Any other delta is refused (another
    /// writer moved the partition: the writer reads it again), and so is
    /// one that would make a chain longer than [`MAX_CHAIN`]. A delta that
    /// starts the chain again ([`HeadEntry::rebases`]) is taken only when
    /// this head's version is its `after_version`, and its chain is its
    /// own. Returns the next head and the map keys of the refused
    /// entries.
    pub fn commit(
        &self,
        seq: u64,
        entries: impl IntoIterator<Item = HeadEntry>,
    ) -> (Head, Vec<String>) {
        let mut next = self.clone();
        next.seq = seq;
        for e in next.partitions.values_mut() {
            e.delta = None;
        }
        let mut refused = Vec::new();
        for mut e in entries {
            let key = e.map_key();
            let Some(d) = &e.delta else {
                e.chain = None;
                next.merge([e]);
                continue;
            };
            let claimed = e.chain.as_ref().map(|c| c.object_version);
            let cur = next
                .partitions
                .get(&key)
                .filter(|c| c.topic_id == e.topic_id);
            let rebase = e.rebases();
            let chain = match cur {
                Some(c) if c.manifest_version == d.after_version && rebase => match &e.chain {
                    Some(own) => own.clone(),
                    None => {
                        refused.push(key);
                        continue;
                    }
                },
                Some(c) if c.manifest_version == d.after_version => match &c.chain {
                    Some(ch) => DeltaChain {
                        object_version: ch.object_version,
                        heads: ch.heads.iter().copied().chain([seq]).collect(),
                        base: ch.base.clone(),
                    },
                    None => DeltaChain {
                        object_version: c.manifest_version,
                        heads: vec![seq],
                        base: None,
                    },
                },
                _ if rebase => {
                    refused.push(key);
                    continue;
                }
                Some(c)
                    if c.manifest_version < d.after_version && claimed == Some(d.after_version) =>
                {
                    DeltaChain {
                        object_version: d.after_version,
                        heads: vec![seq],
                        base: None,
                    }
                }
                None if claimed == Some(d.after_version) => DeltaChain {
                    object_version: d.after_version,
                    heads: vec![seq],
                    base: None,
                },
                _ => {
                    refused.push(key);
                    continue;
                }
            };
            if chain.heads.len() > MAX_CHAIN || e.manifest_version != d.version() {
                refused.push(key);
                continue;
            }
            e.chain = Some(chain);
            next.partitions.insert(key, e);
        }
        (next, refused)
    }

    /// Names group offsets `p` unless the head names a newer version.
    /// Returns true when it changed.
    pub fn merge_groups(&mut self, p: GroupsPointer) -> bool {
        if self.groups.is_some_and(|cur| cur.version >= p.version) {
            return false;
        }
        self.groups = Some(p);
        true
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
            gaps: Vec::new(),
            chain: None,
            delta: None,
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

    fn sample() -> Head {
        let mut h = Head::empty("src-1");
        h.seq = 7;
        h.written_at_ms = 1_700_000_000_300;
        h.writer = "shipper-a".into();
        h.merge([entry(0, 2), entry(1, 1)]);
        h
    }

    const HEAD_1_0: &str = r#"{"schema":{"major":1,"minor":0},"seq":7,"source_cluster_id":"src-1","written_at_ms":1700000000300,"writer":"shipper-a","partitions":{"t-0":{"topic":"t","partition":0,"topic_id":"vVw7a5a_QkWcK7JvBD2t8Q","manifest_version":2,"shipped_end_offset":20,"log_start_offset":0,"source_high_watermark":20,"committed_at_ms":1,"deleted":false},"t-1":{"topic":"t","partition":1,"topic_id":"vVw7a5a_QkWcK7JvBD2t8Q","manifest_version":1,"shipped_end_offset":10,"log_start_offset":0,"source_high_watermark":10,"committed_at_ms":1,"deleted":false}}}"#;

    /// 3571903147 = 0xd4e6eaab, checked against an independent bitwise CRC-32C.
    const HEAD_1_1: &str = r#"{"schema":{"major":1,"minor":1},"seq":7,"source_cluster_id":"src-1","written_at_ms":1700000000300,"writer":"shipper-a","partitions":{"t-0":{"topic":"t","partition":0,"topic_id":"vVw7a5a_QkWcK7JvBD2t8Q","manifest_version":2,"shipped_end_offset":20,"log_start_offset":0,"source_high_watermark":20,"committed_at_ms":1,"deleted":false},"t-1":{"topic":"t","partition":1,"topic_id":"vVw7a5a_QkWcK7JvBD2t8Q","manifest_version":1,"shipped_end_offset":10,"log_start_offset":0,"source_high_watermark":10,"committed_at_ms":1,"deleted":false}},"crc32c":3571903147}"#;

    #[test]
    fn golden_bytes_are_pinned() {
        let h = sample();
        let bytes = h.encode().expect("encode");
        assert_eq!(String::from_utf8(bytes.clone()).expect("utf-8"), HEAD_1_1);
        assert_eq!(Head::decode(&bytes).expect("decode"), h);
        assert_eq!(h.encode().expect("encode"), bytes, "deterministic");
    }

    #[test]
    fn a_head_entry_carries_its_manifest_s_gaps_and_omits_none() {
        let mut m = crate::partition::PartitionManifest::new(
            "src-1",
            &kafkalog::topic::TopicPartition::new("t", 0).expect("tp"),
            "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
        );
        m.version = 3;
        m.shipped_end_offset = 230;
        m.log_start_offset = 230;
        m.gaps = vec![crate::gaps::Gap {
            first_offset: 100,
            last_offset: 229,
            cause: crate::gaps::GapCause::Retention,
            lost_epochs: None,
            reused_from_epoch: None,
            detected_at_ms: 5,
            acknowledged_at_ms: Some(6),
        }];
        let mut h = sample();
        h.merge([HeadEntry::for_manifest(&m)]);
        let bytes = h.encode().expect("encode");
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert_eq!(text.matches(r#""gaps":"#).count(), 1, "{text}");
        let decoded = Head::decode(&bytes).expect("decode");
        assert_eq!(decoded.partitions["t-0"].gaps, m.gaps);
        assert!(decoded.partitions["t-1"].gaps.is_empty());
        crate::codec::testing::every_bit_flip_is_refused(&bytes, Head::decode);
    }

    #[test]
    fn schema_1_0_heads_still_decode() {
        let h = Head::decode(HEAD_1_0.as_bytes()).expect("a 1.0 head");
        assert_eq!(h, sample());
        assert_eq!(h.encode().expect("encode"), HEAD_1_1.as_bytes());
        assert_eq!(
            Head::decode(&crate::codec::testing::strip_trailer(HEAD_1_1.as_bytes())),
            Err(ManifestFormatError::MissingChecksum {
                object: ObjectKind::Head,
                major: 1,
                minor: 1
            })
        );
    }

    #[test]
    fn every_single_bit_flip_of_a_head_is_refused() {
        crate::codec::testing::every_bit_flip_is_refused(HEAD_1_1.as_bytes(), Head::decode);
        crate::codec::testing::every_bit_flip_is_refused(
            &Head::empty("c").encode().expect("encode"),
            Head::decode,
        );
    }

    #[test]
    fn a_damaged_topic_id_is_a_checksum_mismatch() {
        // The shape of reliability finding 3b: a topic id character.
        let at = HEAD_1_1.find("vVw7a5a").expect("id") + 3;
        let mut bytes = HEAD_1_1.as_bytes().to_vec();
        bytes[at] ^= 0x01;
        let err = Head::decode(&bytes).expect_err("refused");
        assert!(
            matches!(
                err,
                ManifestFormatError::ChecksumMismatch {
                    object: ObjectKind::Head,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with("head checksum mismatch"),
            "{err}"
        );
    }

    fn delta_entry(p: i32, after: u64, object: u64) -> HeadEntry {
        let delta = Delta {
            after_version: after,
            ranges: Vec::new(),
            replaced: Vec::new(),
            epochs: Vec::new(),
            log_start_offset: 0,
            shipped_end_offset: 10 * (after as i64 + 1),
            source_high_watermark: 10 * (after as i64 + 1),
            committed_at_ms: 2,
            writer: "w".into(),
        };
        HeadEntry {
            chain: Some(DeltaChain {
                object_version: object,
                heads: Vec::new(),
                base: None,
            }),
            delta: Some(delta),
            ..entry(p, after + 1)
        }
    }

    fn slice() -> ManifestSlice {
        ManifestSlice {
            key: "c/packs/aa/x.pack".into(),
            offset: 100,
            bytes: 50,
        }
    }

    /// A delta after `after` that starts the chain again at the version
    /// it makes.
    fn rebase_entry(p: i32, after: u64) -> HeadEntry {
        let mut e = delta_entry(p, after, after + 1);
        e.chain = Some(DeltaChain {
            object_version: after + 1,
            heads: Vec::new(),
            base: Some(slice()),
        });
        assert!(e.rebases());
        e
    }

    /// One row per case: what the head names for `t-0`, and whether a
    /// delta starting the chain again after version 36 is taken.
    #[test]
    fn a_chain_starts_again_only_from_the_version_the_head_names() {
        let chained = |v: u64, object: u64, n: u64| {
            let mut e = entry(0, v);
            e.chain = Some(DeltaChain {
                object_version: object,
                heads: (1..=n).collect(),
                base: None,
            });
            e
        };
        let rows: Vec<(&str, Option<HeadEntry>, bool)> = vec![
            (
                "a chain at its bound",
                Some(chained(36, 4, MAX_CHAIN as u64)),
                true,
            ),
            (
                "a chain shorter than its bound",
                Some(chained(36, 30, 6)),
                true,
            ),
            ("an object", Some(entry(0, 36)), true),
            ("another writer moved it", Some(entry(0, 37)), false),
            ("the head names an older version", Some(entry(0, 35)), false),
            ("a partition new to the head", None, false),
        ];
        for (name, current, taken) in rows {
            let mut h = Head::empty("c");
            h.seq = 8;
            if let Some(c) = current {
                h.partitions.insert(c.map_key(), c);
            }
            let (next, refused) = h.commit(9, [rebase_entry(0, 36)]);
            if taken {
                assert!(refused.is_empty(), "{name}: refused");
                let e = &next.partitions["t-0"];
                assert_eq!(e.manifest_version, 37, "{name}");
                let chain = e.chain.as_ref().expect("a chain");
                assert_eq!(
                    (
                        chain.object_version,
                        chain.heads.clone(),
                        chain.base.clone()
                    ),
                    (37, Vec::new(), Some(slice())),
                    "{name}"
                );
                assert!(e.delta.is_some(), "{name}: readers at 36 move by it");
                // The next delta extends the new chain, which keeps its base.
                let (after, refused) = next.commit(10, [delta_entry(0, 37, 37)]);
                assert!(refused.is_empty(), "{name}");
                let chain = after.partitions["t-0"].chain.clone().expect("chain");
                assert_eq!(
                    (chain.object_version, chain.heads),
                    (37, vec![10]),
                    "{name}"
                );
                assert_eq!(chain.base, Some(slice()), "{name}");
                let bytes = after.encode().expect("encode");
                assert_eq!(Head::decode(&bytes).expect("decode"), after, "{name}");
            } else {
                assert_eq!(refused, vec!["t-0".to_string()], "{name}");
                assert_eq!(
                    next.partitions.get("t-0"),
                    h.partitions.get("t-0"),
                    "{name}"
                );
            }
        }
    }

    fn chain_of(h: &Head, p: i32) -> Option<(u64, Vec<u64>)> {
        h.partitions
            .get(&format!("t-{p}"))
            .and_then(|e| e.chain.as_ref())
            .map(|c| (c.object_version, c.heads.clone()))
    }

    /// One row per case: what the head names for `t-0` (a version, from a
    /// chain or not), the delta offered (after, claimed object), and
    /// whether it is taken with which chain.
    #[test]
    fn deltas_are_taken_only_when_they_extend_the_head() {
        type Row = (
            &'static str,
            Option<HeadEntry>,
            (u64, u64),
            Option<(u64, Vec<u64>)>,
        );
        let chained = |v: u64, object: u64, heads: Vec<u64>| {
            let mut e = entry(0, v);
            e.chain = Some(DeltaChain {
                object_version: object,
                heads,
                base: None,
            });
            e
        };
        let rows: Vec<Row> = vec![
            (
                "after the head's object",
                Some(entry(0, 4)),
                (4, 4),
                Some((4, vec![9])),
            ),
            (
                "after the head's chain",
                Some(chained(6, 4, vec![7, 8])),
                (6, 4),
                Some((4, vec![7, 8, 9])),
            ),
            ("another writer moved it", Some(entry(0, 5)), (4, 4), None),
            (
                "after a newer object the head does not name yet",
                Some(entry(0, 3)),
                (4, 4),
                Some((4, vec![9])),
            ),
            (
                "ahead of the head without an object",
                Some(entry(0, 3)),
                (4, 3),
                None,
            ),
            (
                "a partition new to the head",
                None,
                (1, 1),
                Some((1, vec![9])),
            ),
            (
                "a chain at its bound",
                Some(chained(
                    4 + MAX_CHAIN as u64,
                    4,
                    (1..=MAX_CHAIN as u64).collect(),
                )),
                (4 + MAX_CHAIN as u64, 4),
                None,
            ),
        ];
        for (name, current, (after, object), expected) in rows {
            let mut h = Head::empty("c");
            h.seq = 8;
            if let Some(c) = current {
                h.partitions.insert(c.map_key(), c);
            }
            let (next, refused) = h.commit(9, [delta_entry(0, after, object)]);
            assert_eq!(next.seq, 9, "{name}");
            match expected {
                Some(chain) => {
                    assert!(refused.is_empty(), "{name}: refused");
                    assert_eq!(chain_of(&next, 0), Some(chain), "{name}");
                    let e = &next.partitions["t-0"];
                    assert_eq!(e.manifest_version, after + 1, "{name}");
                    assert!(e.delta.is_some(), "{name}: the head carries its delta");
                }
                None => {
                    assert_eq!(refused, vec!["t-0".to_string()], "{name}");
                    assert_eq!(
                        next.partitions.get("t-0"),
                        h.partitions.get("t-0"),
                        "{name}: unchanged"
                    );
                }
            }
        }
    }

    #[test]
    fn a_head_carries_only_its_own_deltas_and_an_object_ends_a_chain() {
        let h = Head::empty("c");
        let (h1, refused) = h.commit(1, [delta_entry(0, 0, 0), delta_entry(1, 0, 0)]);
        assert!(refused.is_empty());
        let (h2, _) = h1.commit(2, [delta_entry(0, 1, 0)]);
        assert!(h2.partitions["t-0"].delta.is_some());
        assert!(
            h2.partitions["t-1"].delta.is_none(),
            "head 1's delta is not carried again"
        );
        assert_eq!(chain_of(&h2, 1), Some((0, vec![1])), "the chain stays");
        assert_eq!(chain_of(&h2, 0), Some((0, vec![1, 2])));
        // A manifest object (version 3) ends t-0's chain.
        let (h3, _) = h2.commit(3, [entry(0, 3)]);
        assert_eq!(chain_of(&h3, 0), None);
        assert_eq!(h3.partitions["t-0"].manifest_version, 3);
        let bytes = h3.encode().expect("encode");
        assert_eq!(Head::decode(&bytes).expect("decode"), h3);
    }
}
