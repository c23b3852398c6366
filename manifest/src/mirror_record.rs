//! The mirror record of a destination partition, kept in its partition dir.
//!
//! The applier writes `segmirror-mirror.json` in each mirror partition's dir
//! (atomically: temp file, fsync, rename, fsync dir). It is the applier's
//! durable state for the partition (state machine, pinned source cluster,
//! LME), and it is how a shipper that later runs on the same log dir (after
//! a failover made this cluster the primary) learns that the partition is a
//! mirror, of which cluster, in which state and with which LME: the shipper
//! copies that into the manifest's `mirror_origin`, which failback and the
//! loop check read.
//!
//! Kafka ignores unknown files in a partition dir. This module is the
//! record and its bytes (pure); `partdir::record` reads and writes the file.
//!
//! # Format
//!
//! The record's schema versions are its own (not the manifest's):
//!
//! - 1.2 ([`RECORD_SCHEMA`], written since): compact JSON, fields in
//!   declaration order, sealed with the CRC-32C trailer of [`crate::codec`]
//!   (`...,"crc32c":<n>}`), exactly as manifests are. A record whose
//!   trailer does not match its bytes, or a 1.2 record without a trailer
//!   (torn, or its trailer damaged), is refused (by
//!   `partdir::record::read`, as `MirrorRecordError::Damaged` naming the
//!   file): a damaged record is never taken for an absent one (which would
//!   make a mirror look like a source partition).
//! - 1.0 and 1.1 (written before, pretty-printed, no trailer; 1.1 borrowed
//!   the manifest's version number): still read, unchecked (the next write
//!   seals it). Not warned about per read: the shipper reads the record of
//!   every partition each cycle.
//! - A newer major version is refused; a newer minor is read when its
//!   trailer verifies (unknown fields ignored).
//!
//! A decoded record's `schema` is [`RECORD_SCHEMA`], the version it is
//! written as, whatever it was read as.

use kafkalog::topic::TopicId;
use serde::{Deserialize, Serialize};

use crate::codec::{self, ObjectKind};
use crate::partition::{ManifestFormatError, MirrorOrigin, SchemaVersion};
use crate::state::MirrorState;

/// Name of the file in the partition dir.
pub const MIRROR_FILE: &str = kafkalog::reader::MIRROR_RECORD_FILE;

/// The version of the record this build writes (1.2: with the CRC-32C
/// trailer).
pub const RECORD_SCHEMA: SchemaVersion = SchemaVersion { major: 1, minor: 2 };

/// The first record version that carries the CRC-32C trailer.
pub const CHECKSUMMED_SINCE: SchemaVersion = codec::MIRROR_RECORD_CHECKSUMMED_SINCE;

/// Offsets of the local log that a cut removes and the source does not
/// give back: `first_offset..=last_offset`, never empty. Recorded here
/// ([`MirrorRecord::pending_cut`]) and in a refused plan; [`crate::cut`]
/// decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cut {
    /// The first offset cut.
    pub first_offset: i64,
    /// The last offset cut.
    pub last_offset: i64,
}

impl Cut {
    /// How many offsets it spans.
    pub fn offsets(&self) -> i64 {
        self.last_offset - self.first_offset + 1
    }
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "offsets {}..{} ({} records)",
            self.first_offset,
            self.last_offset,
            self.offsets()
        )
    }
}

/// The applier's durable record of one mirror partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorRecord {
    /// Format version.
    pub schema: SchemaVersion,
    /// The source cluster this partition mirrors (pinned at first start).
    pub source_cluster_id: String,
    /// The source topic id (pinned at first start).
    pub topic_id: TopicId,
    /// The state machine's state.
    pub state: MirrorState,
    /// The last mirrored epoch, recorded durably at the stop.
    #[serde(default)]
    pub lme: Option<i32>,
    /// The log end offset when mirroring stopped.
    #[serde(default)]
    pub stopped_at_offset: Option<i64>,
    /// The leader epoch raised at the stop (at least LME + 1).
    #[serde(default)]
    pub stop_epoch: Option<i32>,
    /// The source cluster this partition was mirroring when it stopped
    /// (recorded with `lme` and `stopped_at_offset`): a later start from the
    /// same source cuts only what was written after the stop (see
    /// `reconcile`). `None` in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_source_cluster_id: Option<String>,
    /// True when the next preparation must treat the local log as history
    /// of its own (failback): set when a partition with records is adopted
    /// as a mirror, cleared when a preparation completes. (After a stop,
    /// `lme` being set means the same.)
    #[serde(default)]
    pub failback_pending: bool,
    /// The operator allowed the next preparation to cut records of the
    /// partition's own (`applier start --allow-truncate`, [`crate::cut`]);
    /// cleared when a preparation completes. Not written when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncate_allowed: bool,
    /// What the next preparation will cut of the partition's own records,
    /// as the `start` that accepted it planned it (`applier status` shows
    /// it); cleared when a preparation completes. Not written when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_cut: Option<Cut>,
    /// Manifest version last applied.
    #[serde(default)]
    pub applied_manifest_version: u64,
    /// Per source segment base offset, the generation applied (compaction).
    #[serde(default)]
    pub segment_generations: std::collections::BTreeMap<i64, u32>,
    /// When the record was written (ms since the epoch).
    #[serde(default)]
    pub updated_at_ms: i64,
    /// The source topic's configs this mirror copied from the last applied
    /// manifest that carried configs, after the destination's filter
    /// ([`crate::topic_config::copied`]): what `DescribeConfigs` and
    /// `applier status` report and what is enforced once STOPPED. `None`
    /// until a manifest with configs is applied (a source without a
    /// metadata log never ships any); absent from the encoding then, so
    /// such a record has the bytes it always had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_configs: Option<std::collections::BTreeMap<String, crate::topic_config::ConfigValue>>,
    /// When the source's partition was deleted (the commit time of the
    /// first applied manifest version with `deleted = true`): the mirror
    /// keeps its records, read-only, and applies nothing new until the
    /// source publishes the partition again (cleared then). `None` while
    /// the source's partition lives; absent from the encoding then, so such
    /// a record has the bytes it always had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_deleted_at_ms: Option<i64>,
}

impl MirrorRecord {
    /// The record of a partition that starts mirroring `source_cluster_id`
    /// (topic `topic_id`) in `state`, written at `now_ms`: no stop recorded,
    /// nothing applied yet.
    pub fn new(
        source_cluster_id: &str,
        topic_id: TopicId,
        state: MirrorState,
        now_ms: i64,
    ) -> MirrorRecord {
        MirrorRecord {
            schema: RECORD_SCHEMA,
            source_cluster_id: source_cluster_id.to_string(),
            topic_id,
            state,
            lme: None,
            stopped_at_offset: None,
            stop_epoch: None,
            stopped_source_cluster_id: None,
            failback_pending: false,
            truncate_allowed: false,
            pending_cut: None,
            applied_manifest_version: 0,
            segment_generations: std::collections::BTreeMap::new(),
            updated_at_ms: now_ms,
            topic_configs: None,
            source_deleted_at_ms: None,
        }
    }

    /// The origin the shipper publishes for a source partition with this
    /// record.
    pub fn origin(&self) -> MirrorOrigin {
        MirrorOrigin {
            source_cluster_id: self.source_cluster_id.clone(),
            state: self.state.state().as_str().to_string(),
            lme: self.lme,
        }
    }

    /// The record's bytes as [`RECORD_SCHEMA`] (whatever its `schema`
    /// says): compact JSON sealed with the CRC-32C trailer.
    pub fn encode(&self) -> Result<Vec<u8>, ManifestFormatError> {
        if self.schema == RECORD_SCHEMA {
            codec::encode(ObjectKind::MirrorRecord, self)
        } else {
            let current = MirrorRecord {
                schema: RECORD_SCHEMA,
                ..self.clone()
            };
            codec::encode(ObjectKind::MirrorRecord, &current)
        }
    }

    /// Verifies (see the module docs) and decodes a record's bytes.
    pub fn decode(bytes: &[u8]) -> Result<MirrorRecord, ManifestFormatError> {
        codec::verify(ObjectKind::MirrorRecord, bytes)?;
        let mut record: MirrorRecord = serde_json::from_slice(bytes)
            .map_err(|e| ManifestFormatError::Malformed(e.to_string()))?;
        record.schema = RECORD_SCHEMA;
        Ok(record)
    }
}

/// A sample record and its bytes as each version wrote them, pinned: for
/// the tests of this module and of the crate that reads and writes the
/// file (`partdir::record`).
pub mod fixtures {
    use super::{MirrorRecord, RECORD_SCHEMA};

    /// A record with every field set (state PREPARING).
    pub fn sample() -> MirrorRecord {
        MirrorRecord {
            schema: RECORD_SCHEMA,
            source_cluster_id: "src-1".into(),
            topic_id: "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("topic id"),
            state: crate::state::initial().0,
            lme: Some(4),
            stopped_at_offset: Some(100),
            stop_epoch: Some(5),
            stopped_source_cluster_id: None,
            failback_pending: true,
            truncate_allowed: false,
            pending_cut: None,
            applied_manifest_version: 3,
            segment_generations: [(0, 1), (70, 2)].into_iter().collect(),
            updated_at_ms: 1_700_000_000_200,
            topic_configs: None,
            source_deleted_at_ms: None,
        }
    }

    /// The sample as 1.2 writes it: compact JSON, then the CRC-32C of
    /// everything before `,"crc32c":` (1955714686 = 0x7491d67e, checked
    /// against the `crc32c` Python package).
    pub const GOLDEN_1_2: &str = r#"{"schema":{"major":1,"minor":2},"source_cluster_id":"src-1","topic_id":"vVw7a5a_QkWcK7JvBD2t8Q","state":{"state":"PREPARING","previous":null,"retries":0},"lme":4,"stopped_at_offset":100,"stop_epoch":5,"failback_pending":true,"applied_manifest_version":3,"segment_generations":{"0":1,"70":2},"updated_at_ms":1700000000200,"crc32c":1955714686}"#;

    /// The sample as the writer before 1.2 wrote it: pretty JSON, no
    /// trailer, the manifest's version 1.1.
    pub const OLD_1_1: &str = r#"{
  "schema": {
    "major": 1,
    "minor": 1
  },
  "source_cluster_id": "src-1",
  "topic_id": "vVw7a5a_QkWcK7JvBD2t8Q",
  "state": {
    "state": "PREPARING",
    "previous": null,
    "retries": 0
  },
  "lme": 4,
  "stopped_at_offset": 100,
  "stop_epoch": 5,
  "failback_pending": true,
  "applied_manifest_version": 3,
  "segment_generations": {
    "0": 1,
    "70": 2
  },
  "updated_at_ms": 1700000000200
}"#;
}

#[cfg(test)]
mod tests {
    use super::fixtures::{GOLDEN_1_2, OLD_1_1, sample};
    use super::*;

    #[test]
    fn the_source_a_stop_was_mirroring_round_trips() {
        let mut r = sample();
        r.stopped_source_cluster_id = Some("src-1".into());
        let bytes = r.encode().expect("encode");
        assert!(String::from_utf8_lossy(&bytes).contains(r#""stopped_source_cluster_id":"src-1""#));
        assert_eq!(MirrorRecord::decode(&bytes).expect("decode"), r);
    }

    #[test]
    fn a_record_with_topic_configs_round_trips_and_one_without_keeps_its_bytes() {
        use crate::topic_config::{ConfigSource, ConfigValue};
        let mut r = sample();
        r.topic_configs = Some(
            [(
                "retention.ms".to_string(),
                ConfigValue {
                    value: "60000".into(),
                    source: ConfigSource::Topic,
                },
            )]
            .into_iter()
            .collect(),
        );
        let bytes = r.encode().expect("encode");
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert!(
            text.contains(r#","updated_at_ms":1700000000200,"topic_configs":{"retention.ms":{"value":"60000","source":"topic"}},"crc32c":"#),
            "{text}"
        );
        assert_eq!(MirrorRecord::decode(&bytes).expect("decode"), r);
        codec::testing::every_bit_flip_is_refused(&bytes, MirrorRecord::decode);
        // Without configs: the 1.2 bytes, unchanged.
        assert_eq!(sample().encode().expect("encode"), GOLDEN_1_2.as_bytes());
        // A reader from before the field (unknown fields ignored) reads the
        // rest; so does this one of a record written before it.
        assert_eq!(
            MirrorRecord::decode(GOLDEN_1_2.as_bytes())
                .expect("decode")
                .topic_configs,
            None
        );
    }

    #[test]
    fn a_record_of_a_deleted_source_round_trips_and_one_without_keeps_its_bytes() {
        let mut r = sample();
        r.source_deleted_at_ms = Some(1_700_000_000_900);
        let bytes = r.encode().expect("encode");
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert!(
            text.contains(
                r#","updated_at_ms":1700000000200,"source_deleted_at_ms":1700000000900,"crc32c":"#
            ),
            "{text}"
        );
        assert_eq!(MirrorRecord::decode(&bytes).expect("decode"), r);
        assert_eq!(sample().encode().expect("encode"), GOLDEN_1_2.as_bytes());
        assert_eq!(
            MirrorRecord::decode(GOLDEN_1_2.as_bytes())
                .expect("decode")
                .source_deleted_at_ms,
            None
        );
    }

    #[test]
    fn golden_bytes_are_pinned() {
        assert_eq!(sample().encode().expect("encode"), GOLDEN_1_2.as_bytes());
        assert_eq!(
            codec::verify(ObjectKind::MirrorRecord, GOLDEN_1_2.as_bytes()),
            Ok(codec::Integrity::Verified {
                schema: RECORD_SCHEMA,
                crc32c: 0x7491_d67e
            })
        );
        // Whatever `schema` says, the record is written as 1.2.
        let old = MirrorRecord {
            schema: SchemaVersion { major: 1, minor: 0 },
            ..sample()
        };
        assert_eq!(old.encode().expect("encode"), GOLDEN_1_2.as_bytes());
    }

    #[test]
    fn a_record_without_trailer_from_before_1_2_is_still_read() {
        assert_eq!(MirrorRecord::decode(OLD_1_1.as_bytes()), Ok(sample()));
        let v10 = OLD_1_1.replace("\"minor\": 1", "\"minor\": 0");
        assert_eq!(MirrorRecord::decode(v10.as_bytes()), Ok(sample()));
        // Rewritten, it gains the trailer.
        let record = MirrorRecord::decode(OLD_1_1.as_bytes()).expect("decode");
        assert_eq!(record.encode().expect("encode"), GOLDEN_1_2.as_bytes());
    }

    #[test]
    fn every_flipped_bit_is_refused() {
        codec::testing::every_bit_flip_is_refused(GOLDEN_1_2.as_bytes(), MirrorRecord::decode);
    }

    #[test]
    fn the_version_written_is_the_first_checksummed_one() {
        assert_eq!(CHECKSUMMED_SINCE, RECORD_SCHEMA);
    }

    #[test]
    fn a_newer_major_is_refused() {
        let newer = codec::testing::reseal(GOLDEN_1_2.as_bytes(), |t| {
            t.replace("\"major\":1", "\"major\":2")
        });
        assert!(matches!(
            MirrorRecord::decode(&newer),
            Err(ManifestFormatError::UnsupportedSchema { major: 2, .. })
        ));
        // A newer minor with a good trailer is read, unknown fields ignored.
        let minor = codec::testing::reseal(GOLDEN_1_2.as_bytes(), |t| {
            t.replace("\"minor\":2}", "\"minor\":3},\"later\":true")
        });
        assert_eq!(MirrorRecord::decode(&minor), Ok(sample()));
    }
}
