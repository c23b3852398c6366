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
//! The decisions (does this batch continue the log, is its epoch right,
//! which objects to sample, how many) are pure functions with their tables
//! below; the scan does the IO.

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use kafkalog::TopicPartition;
use kafkalog::batch::{self, BatchHeader};
use kafkalog::epoch::EpochLineage;
use kafkalog::segment::{self, ScanStop};
use manifest::partition::ShippedRange;
use serde::{Deserialize, Serialize};

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

// ---------------------------------------------------------------------------
// Pure decisions.

/// How a batch's base offset relates to where the log says it must start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continuity {
    /// It starts right where expected.
    Follows,
    /// It starts later: a gap (what compaction leaves, or a damaged base
    /// offset when the next batch does not continue it).
    Gap,
    /// It starts at or below the previous batch's last offset, or below its
    /// segment's base offset: it, or the previous batch, is damaged.
    Overlaps,
}

/// Where a batch must start: after the previous batch of the partition and
/// at or after its segment's base offset.
pub fn expected_start(prev_last: Option<i64>, segment_base: i64, first_in_segment: bool) -> i64 {
    match prev_last {
        Some(l) if first_in_segment => (l + 1).max(segment_base),
        Some(l) => l + 1,
        None => segment_base,
    }
}

/// Whether `base` continues the log at `expected` (see [`Continuity`]).
pub fn continuity(expected: i64, segment_base: i64, base: i64) -> Continuity {
    if base < segment_base || base < expected {
        Continuity::Overlaps
    } else if base > expected {
        Continuity::Gap
    } else {
        Continuity::Follows
    }
}

/// The epoch a batch must carry: the epoch checkpoint's for its offsets
/// when it has one; else only "not below the previous batch's". Returns
/// the expected epoch when `epoch` is wrong.
pub fn epoch_verdict(epoch: i32, checkpoint: Option<i32>, previous: Option<i32>) -> Option<i32> {
    match checkpoint {
        Some(e) if e != epoch => Some(e),
        Some(_) => None,
        None => match previous {
            Some(p) if p >= 0 && epoch >= 0 && epoch < p => Some(p),
            _ => None,
        },
    }
}

/// How many of `total` objects to sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample {
    /// At most this many.
    Count(u64),
    /// This fraction (0..=1), rounded up.
    Fraction(f64),
}

impl Sample {
    /// The number of objects to check out of `total`.
    pub fn of(self, total: u64) -> u64 {
        match self {
            Sample::Count(n) => n.min(total),
            Sample::Fraction(f) => ((total as f64 * f).ceil() as u64).min(total),
        }
    }
}

impl std::str::FromStr for Sample {
    type Err = String;
    /// `N` (objects), `0.05` (a fraction), or `5%`.
    fn from_str(s: &str) -> Result<Sample, String> {
        let s = s.trim();
        let bad = || {
            format!(
                "{s:?}: expected a number of objects (8), a fraction (0.05) or a percentage (5%)"
            )
        };
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(0.0..=100.0).contains(&v) {
                return Err(bad());
            }
            return Ok(Sample::Fraction(v / 100.0));
        }
        if let Ok(n) = s.parse::<u64>() {
            return Ok(Sample::Count(n));
        }
        let v: f64 = s.parse().map_err(|_| bad())?;
        if !(0.0..=1.0).contains(&v) {
            return Err(bad());
        }
        Ok(Sample::Fraction(v))
    }
}

/// Picks `n` of `keys` spread by `seed`: the ones whose FNV hash with the
/// seed is smallest (a different sample each run, the same for a seed).
pub fn pick_sample(keys: &[&str], n: u64, seed: u64) -> Vec<usize> {
    let mut scored: Vec<(u64, usize)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
            for b in k.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            (h, i)
        })
        .collect();
    scored.sort_unstable();
    let mut picked: Vec<usize> = scored
        .into_iter()
        .take(usize::try_from(n).unwrap_or(usize::MAX))
        .map(|(_, i)| i)
        .collect();
    picked.sort_unstable();
    picked
}

// ---------------------------------------------------------------------------
// The scan.

/// What the manifests say about a partition, for the checks that need the
/// bucket.
#[derive(Debug, Clone, Default)]
pub struct ManifestFacts {
    /// The current ranges (highest generation of each segment), for the
    /// epoch check of mirrored offsets.
    pub ranges: Vec<ShippedRange>,
    /// Offsets at or above this were written locally (after a stop): the
    /// manifest says nothing about them.
    pub mirrored_below: i64,
}

impl ManifestFacts {
    /// The epoch the manifest assigns to `offset`, below the stop point.
    fn epoch_at(&self, offset: i64) -> Option<i32> {
        if offset >= self.mirrored_below {
            return None;
        }
        let i = self.ranges.partition_point(|r| r.last_offset < offset);
        self.ranges
            .get(i)
            .filter(|r| r.base_offset <= offset)
            .and_then(|r| r.epoch_at(offset))
    }
}

/// The last batch accepted, with where it truly lies.
#[derive(Debug, Clone, Copy)]
struct Prev {
    /// Byte position in its segment.
    position: u64,
    /// Its segment.
    segment: i64,
    /// Its (true) base and last offsets.
    base: i64,
    last: i64,
    /// The epoch it should have.
    epoch: i32,
    /// The offset a cut removing it truncates to.
    start: i64,
    /// It started after a gap not yet explained.
    after_gap: bool,
}

/// A segment being scanned.
#[derive(Debug, Clone)]
struct SegCursor {
    base: i64,
    path: PathBuf,
    /// Where the next batch starts.
    position: u64,
    /// The partition's scan state when this segment began (to confirm a
    /// mismatch from a fresh read).
    at_start: (Option<Prev>, Option<Mismatch>),
    /// `(position, true base, true last)` of every batch, for the indexes.
    batches: Vec<(u64, i64, i64)>,
    /// Mismatches found in this segment, not yet confirmed.
    found: Vec<Mismatch>,
    counts: Counts,
    /// The framing broke: the rest of the segment cannot be read.
    broken: bool,
}

/// One partition's scan, resumable at batch boundaries (the scrub reads a
/// slice per cycle; `verify` reads it whole).
#[derive(Debug, Clone)]
pub struct PartitionScan {
    /// The partition.
    pub tp: TopicPartition,
    dir: PathBuf,
    lineage: EpochLineage,
    facts: Option<ManifestFacts>,
    prev: Option<Prev>,
    /// A batch that started after a gap, reported unless the log shows
    /// compaction by the time it is explained.
    pending_gap: Option<Mismatch>,
    /// Segments at or above this base are still to be read.
    next_segment: i64,
    seg: Option<SegCursor>,
    /// What was found and covered so far.
    pub mismatches: Vec<Mismatch>,
    /// Counts so far.
    pub counts: Counts,
    now_ms: i64,
}

/// How a slice of a scan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceEnd {
    /// The budget ran out; call again.
    More,
    /// The partition is done.
    Done,
}

impl PartitionScan {
    /// A scan of `<log_dir>/<tp>` from its first segment. Reads the epoch
    /// checkpoint now; `facts` from the manifests when a bucket is at hand.
    pub fn new(
        log_dir: &Path,
        tp: &TopicPartition,
        facts: Option<ManifestFacts>,
        now_ms: i64,
    ) -> kafkalog::Result<PartitionScan> {
        let reader = kafkalog::reader::PartitionReader::open(log_dir, tp)?;
        let lineage = EpochLineage::from_checkpoint_entries(reader.epoch_entries()?).0;
        Ok(PartitionScan {
            tp: tp.clone(),
            dir: reader.dir().to_path_buf(),
            lineage,
            facts,
            prev: None,
            pending_gap: None,
            next_segment: i64::MIN,
            seg: None,
            mismatches: Vec::new(),
            counts: Counts {
                partitions: 1,
                ..Counts::default()
            },
            now_ms,
        })
    }

    /// The same scan, beginning at the segment at or after `base` (the
    /// batches below are not checked: the first one read is expected at
    /// its segment's base).
    pub fn from_segment(mut self, base: i64) -> PartitionScan {
        self.next_segment = base;
        self
    }

    /// A scan of one partition read to its end.
    pub fn run_whole(
        log_dir: &Path,
        tp: &TopicPartition,
        facts: Option<ManifestFacts>,
        now_ms: i64,
        progress: &mut dyn FnMut(u64),
    ) -> kafkalog::Result<PartitionScan> {
        let mut scan = PartitionScan::new(log_dir, tp, facts, now_ms)?;
        while scan.step(4 << 20, progress)? == SliceEnd::More {}
        Ok(scan)
    }

    fn record(&mut self, m: Mismatch) {
        self.counts.mismatches += 1;
        if self.mismatches.len() < MAX_REPORTED_PER_PARTITION {
            self.mismatches.push(m);
        }
    }

    /// Reads `leader-epoch-checkpoint` again; true when it changed.
    fn reload_lineage(&mut self) -> bool {
        let Ok(entries) = kafkalog::checkpoint::read_leader_epoch_checkpoint(
            &self.dir.join(kafkalog::log::LEADER_EPOCH_CHECKPOINT),
        ) else {
            return false;
        };
        let fresh = EpochLineage::from_checkpoint_entries(entries).0;
        let changed = fresh != self.lineage;
        self.lineage = fresh;
        changed
    }

    /// Reads up to about `budget` bytes (at least one batch), reporting
    /// progress in bytes.
    pub fn step(
        &mut self,
        budget: u64,
        progress: &mut dyn FnMut(u64),
    ) -> kafkalog::Result<SliceEnd> {
        let mut left = budget.max(1);
        loop {
            if self.seg.is_none() && !self.open_next_segment()? {
                self.finish_partition();
                return Ok(SliceEnd::Done);
            }
            let before = self.seg.as_ref().map_or(0, |s| s.counts.bytes);
            let done = self.scan_segment(left)?;
            // (A segment that vanished leaves no cursor: nothing counted.)
            let read = self
                .seg
                .as_ref()
                .map_or(0, |s| s.counts.bytes)
                .saturating_sub(before);
            progress(read);
            left = left.saturating_sub(read.max(1));
            if done {
                self.finish_segment()?;
            }
            if left == 0 {
                return Ok(SliceEnd::More);
            }
        }
    }

    /// Moves to the next segment in the current listing; false when none is
    /// left.
    fn open_next_segment(&mut self) -> kafkalog::Result<bool> {
        let bases = match segment::list_segments(&self.dir) {
            Ok(b) => b,
            // The partition itself was deleted while it was read.
            Err(_) if !self.dir.exists() => return Ok(false),
            Err(e) => return Err(e),
        };
        let Some(&base) = bases.iter().find(|&&b| b >= self.next_segment) else {
            return Ok(false);
        };
        self.next_segment = base.saturating_add(1);
        self.seg = Some(SegCursor {
            base,
            path: segment::file_path(&self.dir, base, segment::LOG_SUFFIX),
            position: 0,
            at_start: (self.prev, self.pending_gap.clone()),
            batches: Vec::new(),
            found: Vec::new(),
            counts: Counts::default(),
            broken: false,
        });
        Ok(true)
    }

    /// Whether `base` is the last segment now.
    fn is_last_segment(&self, base: i64) -> bool {
        segment::list_segments(&self.dir)
            .map(|b| b.last().is_none_or(|&l| l <= base))
            .unwrap_or(true)
    }

    /// Scans the current segment from its cursor for about `budget` bytes;
    /// true when the segment is done.
    fn scan_segment(&mut self, budget: u64) -> kafkalog::Result<bool> {
        let Some(mut seg) = self.seg.take() else {
            return Ok(true);
        };
        let result = self.scan_into(&mut seg, budget);
        let done = match result {
            Ok(done) => done,
            Err(e) => {
                if !seg.path.exists() {
                    // Retention or compaction removed it after the listing.
                    self.counts.skipped_segments += 1;
                    self.prev = seg.at_start.0;
                    self.pending_gap = seg.at_start.1.clone();
                    return Ok(true);
                }
                self.seg = Some(seg);
                return Err(e);
            }
        };
        self.seg = Some(seg);
        Ok(done)
    }

    fn scan_into(&mut self, seg: &mut SegCursor, budget: u64) -> kafkalog::Result<bool> {
        let mut read = 0u64;
        let base = seg.base;
        let path = seg.path.clone();
        let end = segment::scan(&path, seg.position, false, |h, bytes| {
            self.check_batch(seg, h, bytes);
            read += h.size() as u64;
            if read >= budget {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        seg.position = end.valid_end;
        match end.stop {
            ScanStop::Visitor => Ok(false),
            ScanStop::End => Ok(true),
            ScanStop::Torn(e) => {
                // The end of the active segment may be an append in
                // progress: look again once before calling it damage.
                if self.is_last_segment(base) {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    let again =
                        segment::scan(&path, seg.position, false, |_, _| ControlFlow::Break(()))?;
                    if !matches!(again.stop, ScanStop::Torn(_) | ScanStop::Corrupt(_)) {
                        // It completed: read on next time.
                        return Ok(false);
                    }
                }
                self.framing_broken(seg, &e);
                Ok(true)
            }
            ScanStop::Corrupt(e) => {
                self.framing_broken(seg, &e);
                Ok(true)
            }
        }
    }

    fn framing_broken(&mut self, seg: &mut SegCursor, e: &batch::BatchError) {
        let expected = expected_start(self.prev.map(|p| p.last), seg.base, seg.batches.is_empty());
        seg.found.push(self.mismatch(
            &seg.path,
            seg.base,
            Some(e.position()),
            Some(expected),
            // The framing is lost from here: cut where the batch should
            // have started.
            expected,
            format!("{e} (the rest of the segment cannot be framed)"),
        ));
        seg.broken = true;
    }

    fn mismatch(
        &self,
        path: &Path,
        segment: i64,
        position: Option<u64>,
        offset: Option<i64>,
        cut: i64,
        message: String,
    ) -> Mismatch {
        Mismatch {
            partition: self.tp.to_string(),
            path: Some(path.to_path_buf()),
            key: None,
            position,
            offset,
            segment: Some(segment),
            cut_offset: Some(cut),
            message,
            found_at_ms: self.now_ms,
        }
    }

    /// The checks of one batch whose framing holds.
    fn check_batch(&mut self, seg: &mut SegCursor, h: &BatchHeader, bytes: &[u8]) {
        seg.counts.batches += 1;
        seg.counts.bytes += h.size() as u64;
        let first = seg.batches.is_empty();
        let mut expected = expected_start(self.prev.map(|p| p.last), seg.base, first);
        let delta = i64::from(h.last_offset_delta);
        // Where the batch truly lies, once its damage (if any) is known.
        let mut true_base = h.base_offset;
        let mut after_gap = false;
        match continuity(expected, seg.base, h.base_offset) {
            Continuity::Follows => self.explain_gap(),
            Continuity::Gap => {
                self.explain_gap();
                after_gap = true;
                self.pending_gap = Some(self.mismatch(
                    &seg.path,
                    seg.base,
                    Some(h.position),
                    Some(expected),
                    expected,
                    format!(
                        "the batch starts at {} after a gap from {expected} (what compaction leaves, unless the next batch does not continue it)",
                        h.base_offset
                    ),
                ));
            }
            Continuity::Overlaps => match self.prev {
                Some(p) if p.after_gap => {
                    // The previous batch jumped ahead and this one does not
                    // follow it: the previous one's base offset is damaged.
                    self.pending_gap = None;
                    let true_last = p.start + (p.last - p.base);
                    let path = segment::file_path(&self.dir, p.segment, segment::LOG_SUFFIX);
                    let m = self.mismatch(
                        &path,
                        p.segment,
                        Some(p.position),
                        Some(p.start),
                        p.start,
                        format!(
                            "base offset {} in the batch header where {} was expected (the next batch, at byte {} of {}, starts at {}): a damaged header field the CRC does not cover",
                            p.base,
                            p.start,
                            h.position,
                            seg.path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
                            h.base_offset
                        ),
                    );
                    seg.found.push(m);
                    // Relocate the previous batch; this one is judged
                    // against where it truly ended.
                    expected = true_last + 1;
                    if let Some(last) = seg.batches.last_mut()
                        && last.0 == p.position
                        && p.segment == seg.base
                    {
                        last.1 = p.start;
                        last.2 = true_last;
                    }
                    if h.base_offset != expected {
                        seg.found.push(self.mismatch(
                            &seg.path,
                            seg.base,
                            Some(h.position),
                            Some(expected),
                            p.start,
                            format!(
                                "base offset {} in the batch header where {expected} was expected",
                                h.base_offset
                            ),
                        ));
                        true_base = expected;
                    }
                }
                _ => {
                    seg.found.push(self.mismatch(
                        &seg.path,
                        seg.base,
                        Some(h.position),
                        Some(expected),
                        expected,
                        format!(
                            "base offset {} in the batch header where {expected} was expected (the previous batch ends at {}): a damaged header field the CRC does not cover",
                            h.base_offset,
                            expected - 1
                        ),
                    ));
                    true_base = expected;
                }
            },
        }
        let true_last = true_base + delta;
        let checkpoint = self.lineage.epoch_for_offset(true_last);
        let manifest_epoch = self.facts.as_ref().and_then(|f| f.epoch_at(true_base));
        let (path, base) = (seg.path.clone(), seg.base);
        let at_batch = |scan: &PartitionScan, message: String| {
            scan.mismatch(
                &path,
                base,
                Some(h.position),
                Some(true_base),
                true_base,
                message,
            )
        };
        let mut epoch = h.partition_leader_epoch;
        // A batch after a gap may sit at a damaged base offset: its epoch
        // is judged once its place is known (`explain_gap`).
        let mut verdict = if after_gap {
            None
        } else {
            epoch_verdict(epoch, checkpoint, self.prev.map(|p| p.epoch))
        };
        if verdict.is_some() && self.reload_lineage() {
            // Appended since the checkpoint was read (a new epoch): judged
            // against the checkpoint as it is now.
            let checkpoint = self.lineage.epoch_for_offset(true_last);
            verdict = epoch_verdict(epoch, checkpoint, self.prev.map(|p| p.epoch));
        }
        if let Some(want) = verdict {
            seg.found.push(at_batch(self, format!(
                "leader epoch {epoch} in the batch header where the lineage (leader-epoch-checkpoint) says {want}: a damaged header field the CRC does not cover"
            )));
            epoch = want;
        } else if let Some(want) = manifest_epoch.filter(|_| !after_gap)
            && want != epoch
        {
            seg.found.push(at_batch(self, format!(
                "leader epoch {epoch} in the batch header where the manifest's range says {want}"
            )));
        }
        if let Err(e) = batch::verify_crc(h, bytes) {
            seg.found.push(at_batch(self, e.to_string()));
        }
        seg.batches.push((h.position, true_base, true_last));
        self.prev = Some(Prev {
            position: h.position,
            segment: seg.base,
            base: h.base_offset,
            last: h.last_offset(),
            epoch,
            start: expected.min(true_base),
            after_gap,
        });
        if !after_gap && let Some(p) = &mut self.prev {
            p.base = true_base;
            p.last = true_last;
        }
    }

    /// The batch after a gap was followed normally (or was the last one):
    /// the gap is real, and the batch's epoch is judged now.
    fn explain_gap(&mut self) {
        if let Some(gap) = self.pending_gap.take() {
            // Its place is right: its epoch can be judged now.
            let judge = |lineage: &EpochLineage, p: &Prev| {
                epoch_verdict(p.epoch, lineage.epoch_for_offset(p.last), None)
            };
            if let Some(p) = self.prev.filter(|p| p.after_gap)
                && judge(&self.lineage, &p).is_some()
                && (!self.reload_lineage() || judge(&self.lineage, &p).is_some())
                && let Some(want) = judge(&self.lineage, &p)
            {
                let m = Mismatch {
                    offset: Some(p.base),
                    cut_offset: Some(p.start),
                    message: format!(
                        "leader epoch {} in the batch header where the lineage (leader-epoch-checkpoint) says {want}: a damaged header field the CRC does not cover",
                        p.epoch
                    ),
                    ..gap.clone()
                };
                if let Some(seg) = &mut self.seg {
                    seg.found.push(m);
                } else {
                    self.record(m);
                }
            }
            // A gap the next batch continues is what compaction leaves
            // (whole batches dropped, in a source segment compacted before
            // it was shipped or after): accepted. Damage does not look like
            // that: a damaged base offset is not continued by the next
            // batch (`Continuity::Overlaps` above).
            drop(gap);
        }
    }

    /// A segment was read to its end: its indexes are checked, and its
    /// mismatches confirmed by a fresh read before they are reported.
    fn finish_segment(&mut self) -> kafkalog::Result<()> {
        let Some(mut seg) = self.seg.take() else {
            return Ok(());
        };
        if !seg.broken
            && let Some(p) = kafkalog::verify::check_indexes(&self.dir, seg.base, &seg.batches)
        {
            seg.found
                .push(self.mismatch(&p.path, seg.base, p.position, p.offset, seg.base, p.message));
        }
        if !seg.found.is_empty() {
            // Confirm from a fresh open, the state as the segment began.
            let (prev, gap) = seg.at_start.clone();
            let mut again = self.clone();
            again.prev = prev;
            again.pending_gap = gap;
            again.mismatches.clear();
            again.seg = Some(SegCursor {
                position: 0,
                batches: Vec::new(),
                found: Vec::new(),
                counts: Counts::default(),
                broken: false,
                ..seg.clone()
            });
            match again.scan_segment(u64::MAX) {
                Ok(_) if again.seg.is_none() => {
                    // Vanished meanwhile: skipped.
                    self.counts.skipped_segments += 1;
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            let mut confirmed = again.seg.take().unwrap_or(seg.clone());
            if !confirmed.broken
                && let Some(p) =
                    kafkalog::verify::check_indexes(&self.dir, confirmed.base, &confirmed.batches)
            {
                confirmed.found.push(self.mismatch(
                    &p.path,
                    confirmed.base,
                    p.position,
                    p.offset,
                    confirmed.base,
                    p.message,
                ));
            }
            self.prev = again.prev;
            self.pending_gap = again.pending_gap;
            seg.found = confirmed.found;
        }
        self.counts.segments += 1;
        self.counts.add(&Counts {
            segments: 0,
            ..seg.counts
        });
        for m in seg.found {
            self.record(m);
        }
        if seg.broken {
            // Nothing after the break can be placed: start afresh at the
            // next segment.
            self.prev = None;
            self.pending_gap = None;
        }
        Ok(())
    }

    /// The partition was read to its end: a gap still unexplained is
    /// judged now.
    fn finish_partition(&mut self) {
        self.explain_gap();
    }
}

// ---------------------------------------------------------------------------
// The durable record.

/// A pass of `verify` or of the scrub, as [`VerifyRecord::pass_completed`]
/// records it.
#[derive(Debug, Clone)]
pub struct Pass<'a> {
    /// The partitions it covered.
    pub partitions: &'a BTreeSet<String>,
    /// What it found.
    pub found: &'a [Mismatch],
    /// What it checked.
    pub counts: Counts,
    /// `verify` or `scrub`.
    pub by: &'a str,
    /// When it completed (ms).
    pub now_ms: i64,
    /// It covered every mirror partition.
    pub complete: bool,
    /// It sampled bucket objects.
    pub sampled_objects: bool,
}

/// What `applier status` shows of verification, and what a repair reads:
/// `<log-dir>/.segmirror/verify.json` (`crate::state_dir::verify_record_path`),
/// written atomically by `applier verify` and by the scrub.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyRecord {
    /// When a pass over every mirror partition last completed (ms).
    pub last_complete_pass_ms: Option<i64>,
    /// What that pass covered.
    #[serde(default)]
    pub last_pass: Counts,
    /// Who ran it: `verify` (one shot) or `scrub` (`applier run`).
    #[serde(default)]
    pub last_pass_by: Option<String>,
    /// Local damage found and not repaired since, per partition.
    #[serde(default)]
    pub damage: Vec<Mismatch>,
    /// Bucket mismatches found by the last pass that sampled objects.
    #[serde(default)]
    pub object_damage: Vec<Mismatch>,
    /// When each partition was last repaired (ms): damage found before
    /// that is gone.
    #[serde(default)]
    pub repaired_at_ms: std::collections::BTreeMap<String, i64>,
}

impl VerifyRecord {
    /// Reads the record (none yet: the default).
    pub fn read(log_dir: &Path) -> anyhow::Result<VerifyRecord> {
        let path = crate::state_dir::verify_record_path(log_dir);
        match kafkalog::fsutil::read_optional(&path)? {
            None => Ok(VerifyRecord::default()),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: not a verify record: {e}", path.display())),
        }
    }

    /// Writes it atomically (temp file, fsync, rename, fsync dir).
    pub fn write(&self, log_dir: &Path) -> anyhow::Result<()> {
        let path = crate::state_dir::verify_record_path(log_dir);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
        }
        kafkalog::fsutil::write_atomic(&path, &serde_json::to_vec_pretty(self)?, true)?;
        Ok(())
    }

    /// Read, change, write.
    pub fn update(log_dir: &Path, change: impl FnOnce(&mut VerifyRecord)) -> anyhow::Result<()> {
        let mut r = VerifyRecord::read(log_dir)?;
        change(&mut r);
        r.write(log_dir)
    }

    /// Adds local damage found now (an entry for the same file and
    /// position replaces the older one).
    pub fn add_damage(&mut self, found: &[Mismatch]) {
        for m in found.iter().filter(|m| m.is_local()) {
            self.damage.retain(|d| {
                !(d.path == m.path && d.position == m.position && d.partition == m.partition)
            });
            self.damage.push(m.clone());
        }
    }

    /// A pass over `pass.partitions` completed with `pass.found`: their
    /// damage becomes what the pass found (less what was repaired since it
    /// was found).
    pub fn pass_completed(&mut self, pass: &Pass<'_>) {
        self.damage
            .retain(|d| !pass.partitions.contains(&d.partition));
        for m in pass.found.iter().filter(|m| m.is_local()) {
            let repaired = self.repaired_at_ms.get(&m.partition).copied();
            if repaired.is_none_or(|r| m.found_at_ms >= r) {
                self.damage.push(m.clone());
            }
        }
        if pass.sampled_objects {
            self.object_damage = pass
                .found
                .iter()
                .filter(|m| !m.is_local())
                .cloned()
                .collect();
        }
        if pass.complete {
            self.last_complete_pass_ms = Some(pass.now_ms);
            self.last_pass = pass.counts;
            self.last_pass_by = Some(pass.by.to_string());
        }
    }

    /// The damage recorded for `partition`.
    pub fn damage_of(&self, partition: &str) -> Vec<&Mismatch> {
        self.damage
            .iter()
            .filter(|d| d.partition == partition)
            .collect()
    }

    /// One line for `applier status`.
    pub fn summary(&self, now_ms: i64) -> String {
        let when = match self.last_complete_pass_ms {
            Some(t) => format!(
                "last verified {}s ago by {} ({} partitions, {} batches, {} bytes, {} objects)",
                ((now_ms - t).max(0) + 500) / 1000,
                self.last_pass_by.as_deref().unwrap_or("?"),
                self.last_pass.partitions,
                self.last_pass.batches,
                self.last_pass.bytes,
                self.last_pass.objects
            ),
            None => "never verified completely (applier verify, or the scrub of applier run)"
                .to_string(),
        };
        let mut line = format!("verification: {when}");
        let damaged: BTreeSet<&str> = self.damage.iter().map(|d| d.partition.as_str()).collect();
        if !damaged.is_empty() || !self.object_damage.is_empty() {
            line.push_str(&format!(
                "; DAMAGE: {} local mismatches in {}; {} bucket objects",
                self.damage.len(),
                damaged.into_iter().collect::<Vec<_>>().join(", "),
                self.object_damage.len()
            ));
            if let Some(first) = self.damage.first().or(self.object_damage.first()) {
                line.push_str(&format!(" (first: {first})"));
            }
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_continues_the_log_after_the_previous_one_and_inside_its_segment() {
        // (prev last, segment base, first in segment, base) -> continuity
        let table: &[(Option<i64>, i64, bool, i64, Continuity)] = &[
            (None, 0, true, 0, Continuity::Follows),
            (None, 100, true, 100, Continuity::Follows),
            (None, 100, true, 99, Continuity::Overlaps),
            (None, 100, true, 130, Continuity::Gap),
            (Some(9), 0, false, 10, Continuity::Follows),
            (Some(9), 0, false, 9, Continuity::Overlaps),
            (Some(9), 0, false, 5, Continuity::Overlaps),
            (Some(9), 0, false, 12, Continuity::Gap),
            // A new segment: its base is the floor.
            (Some(99), 100, true, 100, Continuity::Follows),
            (Some(95), 100, true, 100, Continuity::Follows),
            (Some(99), 100, true, 99, Continuity::Overlaps),
            (Some(99), 100, true, 1 << 40, Continuity::Gap),
        ];
        for &(prev, seg, first, base, want) in table {
            let e = expected_start(prev, seg, first);
            assert_eq!(
                continuity(e, seg, base),
                want,
                "prev {prev:?} seg {seg} first {first} base {base}"
            );
        }
    }

    #[test]
    fn the_epoch_checkpoint_decides_a_batch_epoch_and_order_decides_without_it() {
        // (epoch, checkpoint, previous) -> expected when wrong
        type Row = (i32, Option<i32>, Option<i32>, Option<i32>);
        let table: &[Row] = &[
            (3, Some(3), Some(3), None),
            (3, Some(2), Some(2), Some(2)),
            (3 + (1 << 24), Some(3), Some(3), Some(3)),
            (2, Some(3), Some(3), Some(3)),
            // Without an entry: never below the previous one.
            (2, None, Some(3), Some(3)),
            (4, None, Some(3), None),
            (0, None, None, None),
            // -1 (no epoch) is not ordered.
            (-1, None, Some(3), None),
        ];
        for &(epoch, cp, prev, want) in table {
            assert_eq!(
                epoch_verdict(epoch, cp, prev),
                want,
                "{epoch} {cp:?} {prev:?}"
            );
        }
    }

    #[test]
    fn the_sample_is_a_count_a_fraction_or_a_percentage() {
        let table: &[(&str, Option<Sample>, u64, u64)] = &[
            ("8", Some(Sample::Count(8)), 100, 8),
            ("8", Some(Sample::Count(8)), 3, 3),
            ("0", Some(Sample::Count(0)), 100, 0),
            ("0.05", Some(Sample::Fraction(0.05)), 100, 5),
            ("0.05", Some(Sample::Fraction(0.05)), 1, 1),
            ("1", Some(Sample::Count(1)), 10, 1),
            ("1.0", Some(Sample::Fraction(1.0)), 10, 10),
            ("5%", Some(Sample::Fraction(0.05)), 200, 10),
            ("100%", Some(Sample::Fraction(1.0)), 7, 7),
            ("1.5", None, 0, 0),
            ("-1", None, 0, 0),
            ("101%", None, 0, 0),
            ("many", None, 0, 0),
        ];
        for &(text, want, total, n) in table {
            let got = text.parse::<Sample>().ok();
            assert_eq!(got, want, "{text}");
            if let Some(s) = got {
                assert_eq!(s.of(total), n, "{text} of {total}");
            }
        }
    }

    #[test]
    fn a_sample_picks_the_asked_number_differently_per_seed() {
        let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let a = pick_sample(&refs, 5, 1);
        assert_eq!(a.len(), 5);
        assert_eq!(a, pick_sample(&refs, 5, 1), "same seed, same sample");
        assert_ne!(a, pick_sample(&refs, 5, 2), "another seed, another sample");
        assert_eq!(pick_sample(&refs, 80, 1).len(), 50);
    }

    #[test]
    fn a_pass_replaces_the_damage_of_the_partitions_it_covered_but_not_what_was_repaired_since() {
        let m = |p: &str, pos: u64, at: i64| Mismatch {
            partition: p.to_string(),
            path: Some(PathBuf::from(format!("/d/{p}/0.log"))),
            key: None,
            position: Some(pos),
            offset: Some(0),
            segment: Some(0),
            cut_offset: Some(0),
            message: "x".into(),
            found_at_ms: at,
        };
        let mut r = VerifyRecord::default();
        r.add_damage(&[m("a-0", 1, 10), m("b-0", 1, 10)]);
        r.add_damage(&[m("a-0", 1, 11)]);
        assert_eq!(r.damage.len(), 2, "same place found again is one entry");
        r.repaired_at_ms.insert("a-0".into(), 20);
        let covered: BTreeSet<String> = ["a-0".to_string(), "b-0".to_string()].into();
        r.pass_completed(&Pass {
            partitions: &covered,
            found: &[m("a-0", 1, 15), m("a-0", 9, 25)],
            counts: Counts::default(),
            by: "scrub",
            now_ms: 30,
            complete: true,
            sampled_objects: false,
        });
        assert_eq!(r.damage.len(), 1, "b-0 clean now, a-0's old find repaired");
        assert_eq!(r.damage[0].position, Some(9));
        assert_eq!(r.last_complete_pass_ms, Some(30));
    }
}

// ---------------------------------------------------------------------------
// `applier verify`, one shot.

/// A mirror partition to verify, with its record.
#[derive(Debug, Clone)]
pub struct Target {
    /// The partition.
    pub tp: TopicPartition,
    /// Its mirror record.
    pub record: manifest::mirror_record::MirrorRecord,
    /// Bytes of its segment files now.
    pub bytes: u64,
}

/// The mirror partitions of `log_dir` that `select` picks (a partition
/// without a mirror record is not a mirror: not verified here).
pub fn targets(
    log_dir: &Path,
    select: &dyn Fn(&TopicPartition) -> bool,
) -> anyhow::Result<Vec<Target>> {
    let mut out = Vec::new();
    for tp in kafkalog::reader::list_partitions(log_dir)? {
        if !select(&tp) {
            continue;
        }
        let reader = kafkalog::reader::PartitionReader::open(log_dir, &tp)?;
        let Some(record) = partdir::record::read(reader.dir())? else {
            continue;
        };
        let bytes = reader.segments()?.iter().map(|s| s.size).sum();
        out.push(Target { tp, record, bytes });
    }
    Ok(out)
}

/// What a one-shot verification found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    /// Every mismatch (at most [`MAX_REPORTED_PER_PARTITION`] per
    /// partition; `counts.mismatches` has them all).
    pub mismatches: Vec<Mismatch>,
    /// What was checked.
    pub counts: Counts,
    /// Partitions whose bucket checks were skipped, and why.
    pub notes: Vec<String>,
}

/// The manifest facts of one partition, and its current ranges (for
/// sampling), read from `store`.
async fn facts_of(
    store: &bucket::store::ManifestStore,
    t: &Target,
    local_leo: i64,
    local_lineage: &EpochLineage,
) -> Result<Option<(ManifestFacts, Vec<ShippedRange>)>, bucket::store::StoreError> {
    let pk = manifest::layout::PartitionKey {
        tp: t.tp.clone(),
        topic_id: t.record.topic_id,
    };
    let Some(m) = store.latest_manifest(&pk, None).await? else {
        return Ok(None);
    };
    let mut all = Vec::new();
    for page in &m.pages {
        all.extend(store.get_page(&page.key).await?.ranges);
    }
    all.extend(m.ranges.iter().cloned());
    let mut top: std::collections::BTreeMap<i64, u32> = std::collections::BTreeMap::new();
    for r in &all {
        let g = top.entry(r.segment_base_offset).or_default();
        *g = (*g).max(r.segment_generation);
    }
    let mut current: Vec<ShippedRange> = all
        .iter()
        .filter(|r| top.get(&r.segment_base_offset) == Some(&r.segment_generation))
        .cloned()
        .collect();
    current.sort_by_key(|r| r.base_offset);
    // The manifest speaks for offsets mirrored: below a stop, and below
    // where the source's lineage and the local one part (a source
    // divergence the follow has not cut yet is not damage).
    let agreed = manifest::lineage::divergence_point(
        local_lineage,
        local_leo,
        &m.lineage,
        m.shipped_end_offset,
    );
    let mirrored_below = t.record.stopped_at_offset.unwrap_or(i64::MAX).min(agreed);
    let own_history = t.record.failback_pending
        || t.record.state.state() == manifest::state::PartitionState::Preparing;
    let facts = ManifestFacts {
        ranges: current.clone(),
        mirrored_below: if own_history {
            i64::MIN
        } else {
            mirrored_below
        },
    };
    let live: Vec<ShippedRange> = current
        .into_iter()
        .filter(|r| r.last_offset >= m.log_start_offset)
        .collect();
    Ok(Some((facts, live)))
}

/// Verifies `targets` in `log_dir` (and, with `store`, samples `sample` of
/// their objects, seeded by `seed`). `progress` is told the bytes read.
pub async fn verify_targets(
    log_dir: &Path,
    targets: &[Target],
    store: Option<&bucket::store::ManifestStore>,
    sample: Sample,
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let mut sampleable: Vec<(TopicPartition, ShippedRange)> = Vec::new();
    let now = crate::mirror::now_ms();
    for t in targets {
        let mut facts = None;
        if let Some(store) = store {
            if t.record.source_cluster_id != store.layout().cluster_id() {
                out.notes.push(format!(
                    "{}: mirrors source cluster {}, not {}: bucket checks skipped",
                    t.tp,
                    t.record.source_cluster_id,
                    store.layout().cluster_id()
                ));
            } else {
                let (leo, lineage) = local_end_and_lineage(log_dir, &t.tp);
                match facts_of(store, t, leo, &lineage).await {
                    Ok(Some((f, ranges))) => {
                        facts = Some(f);
                        sampleable.extend(ranges.into_iter().map(|r| (t.tp.clone(), r)));
                    }
                    Ok(None) => out.notes.push(format!(
                        "{}: no manifest in the bucket: bucket checks skipped",
                        t.tp
                    )),
                    Err(e) => anyhow::bail!("{}: reading its manifest: {e}", t.tp),
                }
            }
        }
        let mut scan = PartitionScan::run_whole(log_dir, &t.tp, facts.clone(), now, progress);
        if scan.as_ref().is_ok_and(|s| !s.mismatches.is_empty()) {
            // Confirmed by a second read from a fresh start (an applier
            // may have cut and re-appended the log meanwhile): only what
            // it finds again is reported.
            scan = PartitionScan::run_whole(log_dir, &t.tp, facts, now, &mut |_| {});
        }
        match scan {
            Ok(scan) => {
                out.counts.add(&scan.counts);
                out.mismatches.extend(scan.mismatches);
            }
            // Deleted since it was listed.
            Err(kafkalog::Error::NoSuchPartition { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(store) = store {
        let keys: Vec<&str> = sampleable.iter().map(|(_, r)| r.key.as_str()).collect();
        let n = sample.of(keys.len() as u64);
        for i in pick_sample(&keys, n, seed) {
            let (tp, r) = &sampleable[i];
            out.counts.objects += 1;
            let object = |message: String| Mismatch::object(tp, r, message, now);
            match store.get(&r.key).await {
                Ok(bytes) => {
                    out.counts.object_bytes += bytes.len() as u64;
                    if let Err(e) = manifest::range_check::verify_object(r, &bytes) {
                        out.counts.mismatches += 1;
                        out.mismatches.push(object(e.detail));
                    }
                }
                Err(bucket::store::StoreError::NotFound { .. }) => {
                    out.counts.mismatches += 1;
                    out.mismatches.push(object(format!(
                        "named by the manifest (offsets {}..={}) but missing from the bucket",
                        r.base_offset, r.last_offset
                    )));
                }
                Err(e) => anyhow::bail!("reading object {}: {e}", r.key),
            }
        }
    }
    Ok(out)
}

/// The local log end offset and epoch lineage (from the files).
fn local_end_and_lineage(log_dir: &Path, tp: &TopicPartition) -> (i64, EpochLineage) {
    let Ok(r) = kafkalog::reader::PartitionReader::open(log_dir, tp) else {
        return (0, EpochLineage::new());
    };
    let lineage = EpochLineage::from_checkpoint_entries(r.epoch_entries().unwrap_or_default()).0;
    let end = r
        .segments()
        .and_then(|segs| {
            let last = segs.last().map_or(0, |s| s.base_offset);
            r.for_each_batch(last, false, |_, _| ControlFlow::Continue(()))
                .map(|e| e.max(last))
        })
        .unwrap_or(0);
    (end, lineage)
}
