//! Which old segments retention deletes, as Kafka's `UnifiedLog` decides
//! it (`deleteRetentionMsBreachedSegments`, then
//! `deleteRetentionSizeBreachedSegments`), as a pure function of the
//! segments' facts.
//!
//! Rules (Kafka's `deletableSegments`), oldest segment first, stopping at
//! the first segment that is kept:
//! - a segment may go only when all of it is below the high watermark: the
//!   next segment's base offset (the log end for the last one) is at most
//!   the high watermark;
//! - the last segment, when empty, is never deleted;
//! - by time: its largest timestamp is more than `retention.ms` before now;
//! - by size: while the log's size minus the segment's is still at least
//!   `retention.bytes`.
//!
//! The result is the new log start offset (the first kept segment's base,
//! or the log end when every segment goes: the caller then starts an empty
//! log there). Only a log whose `cleanup.policy` includes `delete` is
//! subject to it; that choice is the caller's.

/// What retention needs to know of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentFacts {
    /// Its base offset.
    pub base_offset: i64,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// The largest record timestamp in it (ms); for a segment with no
    /// timestamps, the file's modification time (Kafka's
    /// `LogSegment.largestTimestamp`).
    pub largest_timestamp_ms: i64,
}

/// The retention limits; `None` is unlimited (-1 in Kafka's config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionLimits {
    /// `retention.ms`.
    pub retention_ms: Option<i64>,
    /// `retention.bytes`.
    pub retention_bytes: Option<i64>,
}

/// Why segments were deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionReason {
    /// `retention.ms` was breached.
    Time,
    /// `retention.bytes` was breached.
    Size,
}

/// A retention cut: the new log start offset and what goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionCut {
    /// The new log start offset.
    pub new_log_start: i64,
    /// How many segments go.
    pub segments: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The last rule that cut (time, then size).
    pub reason: RetentionReason,
}

/// The retention cut of a log (`segments` ordered by base offset), or
/// `None` when nothing is deleted.
pub fn retention_cut(
    segments: &[SegmentFacts],
    log_end: i64,
    high_watermark: i64,
    now_ms: i64,
    limits: RetentionLimits,
) -> Option<RetentionCut> {
    let upper = |i: usize| segments.get(i + 1).map_or(log_end, |s| s.base_offset);
    let may_go = |i: usize| {
        let last_and_empty = i + 1 == segments.len() && segments[i].size_bytes == 0;
        upper(i) <= high_watermark && !last_and_empty
    };
    let mut gone = 0usize;
    let mut bytes = 0u64;
    let mut reason = None;
    if let Some(ms) = limits.retention_ms {
        while gone < segments.len()
            && may_go(gone)
            && now_ms.saturating_sub(segments[gone].largest_timestamp_ms) > ms
        {
            bytes += segments[gone].size_bytes;
            gone += 1;
            reason = Some(RetentionReason::Time);
        }
    }
    if let Some(limit) = limits.retention_bytes {
        let total: u64 = segments[gone..].iter().map(|s| s.size_bytes).sum();
        let mut diff = i128::from(total) - i128::from(limit);
        while gone < segments.len()
            && may_go(gone)
            && diff - i128::from(segments[gone].size_bytes) >= 0
        {
            diff -= i128::from(segments[gone].size_bytes);
            bytes += segments[gone].size_bytes;
            gone += 1;
            reason = Some(RetentionReason::Size);
        }
    }
    let reason = reason?;
    Some(RetentionCut {
        new_log_start: if gone == segments.len() {
            log_end
        } else {
            segments[gone].base_offset
        },
        segments: gone,
        bytes,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;
    const NOW: i64 = 100 * DAY;

    /// Three segments of 100 bytes at offsets 0, 10, 20 (log end 30), their
    /// largest timestamps `ages` days before NOW.
    fn log(ages: [i64; 3]) -> Vec<SegmentFacts> {
        ages.iter()
            .enumerate()
            .map(|(i, age)| SegmentFacts {
                base_offset: i as i64 * 10,
                size_bytes: 100,
                largest_timestamp_ms: NOW - age * DAY,
            })
            .collect()
    }

    fn cut(
        segments: &[SegmentFacts],
        hw: i64,
        ms: Option<i64>,
        bytes: Option<i64>,
    ) -> Option<(i64, usize, RetentionReason)> {
        let limits = RetentionLimits {
            retention_ms: ms,
            retention_bytes: bytes,
        };
        retention_cut(segments, 30, hw, NOW, limits)
            .map(|c| (c.new_log_start, c.segments, c.reason))
    }

    #[test]
    fn unlimited_retention_deletes_nothing() {
        assert_eq!(cut(&log([30, 20, 10]), 30, None, None), None);
    }

    #[test]
    fn segments_older_than_retention_ms_go() {
        assert_eq!(
            cut(&log([30, 20, 10]), 30, Some(15 * DAY), None),
            Some((20, 2, RetentionReason::Time))
        );
    }

    #[test]
    fn a_segment_exactly_at_retention_ms_stays() {
        assert_eq!(
            cut(&log([30, 20, 10]), 30, Some(20 * DAY), None),
            Some((10, 1, RetentionReason::Time))
        );
    }

    #[test]
    fn time_stops_at_the_first_young_segment() {
        // The middle one is young: the old one after it stays too.
        assert_eq!(
            cut(&log([30, 1, 30]), 30, Some(15 * DAY), None),
            Some((10, 1, RetentionReason::Time))
        );
    }

    #[test]
    fn every_segment_may_go_by_time_and_the_log_starts_at_its_end() {
        assert_eq!(
            cut(&log([30, 20, 10]), 30, Some(DAY), None),
            Some((30, 3, RetentionReason::Time))
        );
    }

    #[test]
    fn nothing_at_or_above_the_high_watermark_goes() {
        // HW 15: only the first segment (0..10) is wholly below it.
        assert_eq!(
            cut(&log([30, 20, 10]), 15, Some(DAY), None),
            Some((10, 1, RetentionReason::Time))
        );
    }

    #[test]
    fn size_deletes_the_oldest_while_the_rest_is_still_over_the_limit() {
        // 300 bytes, limit 150: dropping 100 leaves 200 >= 150, dropping
        // another leaves 100 < 150, so one goes.
        assert_eq!(
            cut(&log([3, 2, 1]), 30, None, Some(150)),
            Some((10, 1, RetentionReason::Size))
        );
    }

    #[test]
    fn size_at_exactly_the_limit_after_a_deletion() {
        assert_eq!(
            cut(&log([3, 2, 1]), 30, None, Some(100)),
            Some((20, 2, RetentionReason::Size))
        );
    }

    #[test]
    fn a_log_under_its_size_limit_keeps_everything() {
        assert_eq!(cut(&log([3, 2, 1]), 30, None, Some(1000)), None);
    }

    #[test]
    fn size_applies_after_time() {
        // Time drops the first; 200 left over a limit of 50 drops one more.
        assert_eq!(
            cut(&log([30, 2, 1]), 30, Some(15 * DAY), Some(50)),
            Some((20, 2, RetentionReason::Size))
        );
    }

    #[test]
    fn an_empty_last_segment_never_goes() {
        let mut s = log([30, 20, 10]);
        s[2].size_bytes = 0;
        assert_eq!(
            cut(&s, 30, Some(DAY), None),
            Some((20, 2, RetentionReason::Time))
        );
    }

    #[test]
    fn an_empty_log_has_nothing_to_cut() {
        assert_eq!(cut(&[], 30, Some(DAY), Some(0)), None);
    }
}
