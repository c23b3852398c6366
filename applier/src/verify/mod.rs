//! Proof of restorability: the checks of `applier verify` and of the scrub
//! (`crate::scrub`), and their durable record.
//!
//! What is checked, for every mirror partition of a log dir (a partition
//! dir with a mirror record):
//! - every batch parses (length, magic = 2) and its CRC-32C holds;
//! - the header fields the CRC does not cover: the base offset continues
//!   the log (the first batch of a segment starts at or after the
//!   segment's base offset; each later batch right after the previous
//!   one's last offset), the length frames the next batch (a length that
//!   runs past the file or is impossible is a mismatch, except at the very
//!   end of the active segment while it is being written), the leader epoch
//!   is the one `leader-epoch-checkpoint` assigns to the batch's offsets
//!   (and, with a bucket, the one the manifest's range says, for offsets
//!   mirrored before any stop);
//! - a gap between batches that the next batch continues is accepted: it
//!   is what compaction leaves (whole batches dropped, before or after the
//!   segment was shipped), and damage does not look like that (a damaged
//!   base offset is not continued by the next batch); so the one flip the
//!   local checks cannot see is an upward flip of the base offset of the
//!   log's very last batch, which the next range the applier appends
//!   refuses (it must start at the log end);
//! - the offset and time indexes against the segment's batches
//!   (`kafkalog::verify::check_indexes`);
//! - with a bucket, a sample of objects: size and CRC-32C against the
//!   manifest (`manifest::range_check::verify_object`).
//!
//! Where the damage is ([`Mismatch`]): the file, the byte position of the
//! damaged batch, the offset it should start at, and `cut_offset`, the
//! batch boundary a repair cuts back to (the damaged batch's expected
//! start; the segment's base when the damage breaks the framing or is in an
//! index). A flipped base offset is told from its neighbours: a batch that
//! starts after a gap and is followed by one that does not continue it is
//! the damaged one (its last offset delta is covered by the CRC, so its true
//! place is known and the next batches are checked against it, not reported
//! again).
//!
//! Races with retention and compaction are not mismatches: a segment that
//! vanished between listing and reading is skipped (and counted as
//! skipped); any mismatch is confirmed by reading the whole segment again
//! from a fresh open, and a partition with a mismatch is read again from
//! its start (`verify_targets`, and the scrub likewise), so a segment
//! replaced or a log cut while it was read is judged on what it holds
//! now.
//!
//! Layout: what a finding is ([`Mismatch`], what was covered: [`Counts`])
//! here; the decisions (does this batch continue the log, is its epoch
//! right, which objects to sample, how many) as pure functions with their
//! tables in [`rules`]; the file reading in [`scan`] ([`PartitionScan`]);
//! the durable record in [`record`] ([`VerifyRecord`]); `applier verify`'s
//! one-shot pass in [`one_shot`] ([`verify_targets`]).

use std::path::PathBuf;

use kafkalog::TopicPartition;
use manifest::partition::ShippedRange;
use serde::{Deserialize, Serialize};

pub mod one_shot;
pub mod record;
pub mod rules;
pub mod scan;

pub use one_shot::{Outcome, Target, targets, verify_targets};
pub use record::{Pass, VerifyRecord};
pub use rules::{
    Continuity, ManifestFacts, Sample, continuity, epoch_verdict, expected_start, pick_sample,
};
pub use scan::{PartitionScan, SliceEnd};

/// Mismatches reported per partition at most in one pass (the rest are
/// counted).
pub const MAX_REPORTED_PER_PARTITION: usize = 100;

/// One mismatch, local or in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    /// `topic-partition`.
    pub partition: String,
    /// The local file, for a local mismatch.
    pub path: Option<PathBuf>,
    /// The object key, for a bucket mismatch.
    pub key: Option<String>,
    /// Byte position of the damaged batch (or index entry) in its file.
    pub position: Option<u64>,
    /// The offset concerned: where the damaged batch should start.
    pub offset: Option<i64>,
    /// Base offset of the segment holding the damage (local mismatches).
    pub segment: Option<i64>,
    /// Where a repair cuts the log back to (a batch boundary at or below
    /// the damage), for local mismatches.
    pub cut_offset: Option<i64>,
    /// What is wrong.
    pub message: String,
    /// When it was found (ms since the epoch).
    pub found_at_ms: i64,
}

impl Mismatch {
    /// A mismatch of bucket object `r` of `tp`.
    pub fn object(tp: &TopicPartition, r: &ShippedRange, message: String, now_ms: i64) -> Mismatch {
        Mismatch {
            partition: tp.to_string(),
            path: None,
            key: Some(r.key.clone()),
            position: None,
            offset: Some(r.base_offset),
            segment: None,
            cut_offset: None,
            message,
            found_at_ms: now_ms,
        }
    }

    /// Whether the damage is in the local log (not in the bucket).
    pub fn is_local(&self) -> bool {
        self.path.is_some()
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.partition)?;
        if let Some(p) = &self.path {
            write!(f, "{}", p.display())?;
        }
        if let Some(k) = &self.key {
            write!(f, "object {k}")?;
        }
        if let Some(p) = self.position {
            write!(f, " at byte {p}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " (offset {o})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// What a verification covered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Partitions checked.
    pub partitions: u64,
    /// Segments checked.
    pub segments: u64,
    /// Segments that vanished (retention, compaction) before they were read.
    pub skipped_segments: u64,
    /// Batches checked.
    pub batches: u64,
    /// Bytes of local batches checked.
    pub bytes: u64,
    /// Bucket objects checked.
    pub objects: u64,
    /// Bytes of bucket objects checked.
    pub object_bytes: u64,
    /// Mismatches found (reported or not).
    pub mismatches: u64,
}

impl Counts {
    /// Adds `o` to these counts.
    pub fn add(&mut self, o: &Counts) {
        self.partitions += o.partitions;
        self.segments += o.segments;
        self.skipped_segments += o.skipped_segments;
        self.batches += o.batches;
        self.bytes += o.bytes;
        self.objects += o.objects;
        self.object_bytes += o.object_bytes;
        self.mismatches += o.mismatches;
    }

    /// One line: what was checked.
    pub fn summary(&self) -> String {
        format!(
            "checked {} partitions, {} segments ({} vanished while listed, skipped), {} batches, {} bytes, {} objects ({} bytes); {} mismatches",
            self.partitions,
            self.segments,
            self.skipped_segments,
            self.batches,
            self.bytes,
            self.objects,
            self.object_bytes,
            self.mismatches
        )
    }
}
