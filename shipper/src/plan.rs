//! Planning what to ship: consecutive whole batches of one segment per
//! range, every CRC checked, split on batch boundaries at the largest
//! object size. Pure file reading; the upload ([`crate::upload`]) reads the
//! same bytes again and checks they still say the same thing.

use std::ops::ControlFlow;
use std::path::PathBuf;

use kafkalog::batch::BatchHeader;
use kafkalog::epoch::EpochLineage;

use crate::source::{BadBatch, BatchMark, Cursor, SourceView, WalkEnd, walk};

/// What a run of batches says about itself; computed the same way when
/// planning and when uploading, so the two can be compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RangeSummary {
    pub(crate) base_offset: i64,
    pub(crate) last_offset: i64,
    pub(crate) batches: u32,
    pub(crate) bytes: u64,
    pub(crate) max_timestamp: i64,
    /// First batch's leader epoch (may be -1: unknown).
    pub(crate) first_epoch: i32,
    /// Each epoch with the base offset of its first batch in the range.
    pub(crate) epochs: EpochLineage,
}

impl RangeSummary {
    pub(crate) fn new() -> RangeSummary {
        RangeSummary {
            base_offset: -1,
            last_offset: -1,
            batches: 0,
            bytes: 0,
            max_timestamp: -1,
            first_epoch: -1,
            epochs: EpochLineage::new(),
        }
    }

    pub(crate) fn add(&mut self, h: &BatchHeader) {
        if self.batches == 0 {
            self.base_offset = h.base_offset;
            self.first_epoch = h.partition_leader_epoch;
        }
        self.batches += 1;
        self.bytes += h.size() as u64;
        self.last_offset = h.last_offset();
        self.max_timestamp = self.max_timestamp.max(h.max_timestamp);
        self.epochs
            .assign_if_newer(h.partition_leader_epoch, h.base_offset);
    }
}

/// One planned object.
#[derive(Debug, Clone)]
pub(crate) struct RangePlan {
    /// Base offset of the segment (from its file name).
    pub(crate) segment_base: i64,
    /// The segment file.
    pub(crate) path: PathBuf,
    /// Byte range in the file.
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) summary: RangeSummary,
    /// The range ends its segment and a later segment exists.
    pub(crate) completes_segment: bool,
    /// Segment generation (0, or +1 per compacted replacement).
    pub(crate) generation: u32,
    /// The cursor after this range.
    pub(crate) end_cursor: Cursor,
    /// Its last batch.
    pub(crate) last_mark: BatchMark,
}

impl RangePlan {
    pub(crate) fn bytes(&self) -> u64 {
        self.end - self.start
    }
}

struct Open {
    index: usize,
    start: u64,
    end: u64,
    summary: RangeSummary,
    end_cursor: Cursor,
    last_mark: BatchMark,
}

fn close(view: &SourceView, o: Open, generation: u32, segment_ended: bool) -> RangePlan {
    let seg = &view.segments[o.index];
    RangePlan {
        segment_base: seg.base,
        path: seg.path.clone(),
        start: o.start,
        end: o.end,
        summary: o.summary,
        completes_segment: segment_ended && view.is_rolled(o.index) && o.end >= seg.size(),
        generation,
        end_cursor: o.end_cursor,
        last_mark: o.last_mark,
    }
}

/// Why the tail plan stopped.
#[derive(Debug)]
pub(crate) enum TailStop {
    /// The next batch is not below the high watermark.
    Hw,
    /// The end of the log.
    EndOfLog,
    /// The per-cycle byte budget is spent (a backlog: go on at once).
    Capped,
    /// A bad batch: corrupt, or (at the end of the last segment) possibly a
    /// write in progress.
    Bad {
        bad: BadBatch,
        in_last_segment: bool,
    },
}

/// The new ranges from a cursor on.
#[derive(Debug)]
pub(crate) struct TailPlan {
    pub(crate) ranges: Vec<RangePlan>,
    /// The cursor after everything planned (and past rolled segments that
    /// are fully read).
    pub(crate) cursor: Cursor,
    /// The last batch planned (or the cursor's mark when none).
    pub(crate) mark: Option<BatchMark>,
    pub(crate) stop: TailStop,
    /// Bytes planned.
    pub(crate) bytes: u64,
}

/// Plans the committed batches from `cursor` on (below `view.hw` when set),
/// at most `max_cycle_bytes` (at least one batch), in ranges of at most
/// `max_object` bytes (a larger batch is a range of its own).
pub(crate) fn plan_tail(
    view: &SourceView,
    cursor: Cursor,
    mark: Option<BatchMark>,
    max_object: u64,
    max_cycle_bytes: u64,
) -> kafkalog::Result<TailPlan> {
    let Some(start_index) = view.segment_index(cursor.segment) else {
        return Ok(TailPlan {
            ranges: Vec::new(),
            cursor,
            mark,
            stop: TailStop::EndOfLog,
            bytes: 0,
        });
    };
    let mut ranges = Vec::new();
    let mut open: Option<Open> = None;
    let mut cur = cursor;
    let mut last_mark = mark;
    let mut planned = 0u64;
    let mut stop = None;
    let end = walk(view, (start_index, cursor.position), true, |i, h, _| {
        if view.hw.is_some_and(|hw| h.last_offset() >= hw) {
            stop = Some(TailStop::Hw);
            return ControlFlow::Break(());
        }
        let size = h.size() as u64;
        if planned > 0 && planned + size > max_cycle_bytes {
            stop = Some(TailStop::Capped);
            return ControlFlow::Break(());
        }
        if let Some(o) = open.take() {
            if o.index != i {
                ranges.push(close(view, o, 0, true));
            } else if o.summary.bytes + size > max_object {
                ranges.push(close(view, o, 0, false));
            } else {
                open = Some(o);
            }
        }
        let seg_base = view.segments[i].base;
        let o = open.get_or_insert_with(|| Open {
            index: i,
            start: h.position,
            end: h.position,
            summary: RangeSummary::new(),
            end_cursor: cur,
            last_mark: BatchMark::of(seg_base, h),
        });
        o.summary.add(h);
        o.end = h.position + size;
        cur = Cursor {
            segment: seg_base,
            position: o.end,
            next_offset: h.next_offset(),
        };
        o.end_cursor = cur;
        o.last_mark = BatchMark::of(seg_base, h);
        last_mark = Some(o.last_mark);
        planned += size;
        ControlFlow::Continue(())
    })?;
    let stop = match (stop, end) {
        (Some(s), _) => s,
        (None, WalkEnd::Bad(bad)) => {
            let in_last_segment = view.segments.last().is_some_and(|s| s.path == bad.path);
            // Beyond the high watermark nothing is committed yet: not our
            // business (it may be a write in progress).
            if view.hw.is_some_and(|hw| cur.next_offset >= hw) && in_last_segment {
                TailStop::Hw
            } else {
                TailStop::Bad {
                    bad,
                    in_last_segment,
                }
            }
        }
        (None, _) => TailStop::EndOfLog,
    };
    if let Some(o) = open.take() {
        let ended = o.end >= view.segments[o.index].size();
        ranges.push(close(view, o, 0, ended));
    }
    // Step over rolled segments read to their end.
    if !matches!(stop, TailStop::Bad { .. }) {
        while let Some(i) = view.segment_index(cur.segment) {
            if view.is_rolled(i) && cur.position >= view.segments[i].size() {
                cur = Cursor {
                    segment: view.segments[i + 1].base,
                    position: 0,
                    next_offset: cur.next_offset,
                };
            } else {
                break;
            }
        }
    }
    Ok(TailPlan {
        ranges,
        cursor: cur,
        mark: last_mark,
        stop,
        bytes: planned,
    })
}

/// Plans a whole rolled segment again (its compacted version), as
/// generation `generation`.
pub(crate) fn plan_segment(
    view: &SourceView,
    index: usize,
    generation: u32,
    max_object: u64,
) -> kafkalog::Result<Result<Vec<RangePlan>, BadBatch>> {
    let seg = &view.segments[index];
    let mut ranges = Vec::new();
    let mut open: Option<Open> = None;
    let dummy = Cursor {
        segment: seg.base,
        position: 0,
        next_offset: seg.base,
    };
    let end = walk(view, (index, 0), true, |i, h, _| {
        if i != index {
            return ControlFlow::Break(());
        }
        let size = h.size() as u64;
        if let Some(o) = open.take() {
            if o.summary.bytes + size > max_object {
                ranges.push(close(view, o, generation, false));
            } else {
                open = Some(o);
            }
        }
        let o = open.get_or_insert_with(|| Open {
            index,
            start: h.position,
            end: h.position,
            summary: RangeSummary::new(),
            end_cursor: dummy,
            last_mark: BatchMark::of(seg.base, h),
        });
        o.summary.add(h);
        o.end = h.position + size;
        o.last_mark = BatchMark::of(seg.base, h);
        ControlFlow::Continue(())
    })?;
    if let WalkEnd::Bad(bad) = end
        && bad.path == seg.path
    {
        return Ok(Err(bad));
    }
    if let Some(o) = open.take() {
        ranges.push(close(view, o, generation, true));
    }
    Ok(Ok(ranges))
}
