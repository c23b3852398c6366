//! The local scan of one partition ([`PartitionScan`]): every segment's
//! batches read in order, resumable at batch boundaries (the scrub reads a
//! slice per cycle, `applier verify` a partition whole), each batch judged
//! by `super::rules`, every segment's indexes checked, and every mismatch
//! confirmed by a fresh read of its segment before it is reported (see
//! the module doc of `crate::verify`).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use kafkalog::TopicPartition;
use kafkalog::batch::{self, BatchHeader};
use kafkalog::epoch::EpochLineage;
use kafkalog::segment::{self, ScanStop};

use super::rules::{Continuity, ManifestFacts, continuity, epoch_verdict, expected_start};
use super::{Counts, MAX_REPORTED_PER_PARTITION, Mismatch};

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

    /// Reports a confirmed mismatch (counted always, kept up to
    /// [`MAX_REPORTED_PER_PARTITION`]).
    fn report(&mut self, m: Mismatch) {
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
        // A mismatch of this batch where it should start (and is cut).
        let (path, base, should_start) = (seg.path.clone(), seg.base, expected);
        let at_expected = |scan: &PartitionScan, message: String| {
            scan.mismatch(
                &path,
                base,
                Some(h.position),
                Some(should_start),
                should_start,
                message,
            )
        };
        match continuity(expected, seg.base, h.base_offset) {
            Continuity::Follows => self.explain_gap(),
            Continuity::Gap => {
                self.explain_gap();
                after_gap = true;
                self.pending_gap = Some(at_expected(
                    self,
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
                    seg.found.push(at_expected(
                        self,
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
                    self.report(m);
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
            self.report(m);
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
