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
//! Kafka ignores unknown files in a partition dir.

use std::path::Path;

use kafkalog::topic::TopicId;
use serde::{Deserialize, Serialize};

use crate::partition::{MirrorOrigin, SchemaVersion, decode_versioned};
use crate::state::MirrorState;

/// Name of the file in the partition dir.
pub const MIRROR_FILE: &str = kafkalog::reader::MIRROR_RECORD_FILE;

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
    /// Manifest version last applied.
    #[serde(default)]
    pub applied_manifest_version: u64,
    /// Per source segment base offset, the generation applied (compaction).
    #[serde(default)]
    pub segment_generations: std::collections::BTreeMap<i64, u32>,
    /// When the record was written (ms since the epoch).
    #[serde(default)]
    pub updated_at_ms: i64,
}

/// Errors reading or writing the record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MirrorRecordError {
    /// IO on the file.
    #[error(transparent)]
    Io(#[from] kafkalog::Error),
    /// The file does not parse.
    #[error("{path}: {reason}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl MirrorRecord {
    /// The origin the shipper publishes for a source partition with this
    /// record.
    pub fn origin(&self) -> MirrorOrigin {
        MirrorOrigin {
            source_cluster_id: self.source_cluster_id.clone(),
            state: self.state.state().as_str().to_string(),
            lme: self.lme,
        }
    }

    /// Reads the record of partition dir `dir` (None when it is not a mirror).
    pub fn read(dir: &Path) -> Result<Option<MirrorRecord>, MirrorRecordError> {
        let path = dir.join(MIRROR_FILE);
        let Some(bytes) = kafkalog::fsutil::read_optional(&path)? else {
            return Ok(None);
        };
        decode_versioned(&bytes)
            .map(Some)
            .map_err(|e| MirrorRecordError::Malformed {
                path: path.display().to_string(),
                reason: e.to_string(),
            })
    }

    /// Writes the record atomically and durably.
    pub fn write(&self, dir: &Path) -> Result<(), MirrorRecordError> {
        let path = dir.join(MIRROR_FILE);
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| MirrorRecordError::Malformed {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        kafkalog::fsutil::write_atomic(&path, &bytes, true)?;
        Ok(())
    }
}
