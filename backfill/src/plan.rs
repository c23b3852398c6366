//! Which shipped ranges an export reads and which files it writes, as a
//! pure function of one partition's manifest and the request.
//!
//! Rules:
//! - The window is `max(--from-offset, log start) ..= --to-offset`
//!   (both inclusive; open ends are the log start and the shipped end).
//!   Records below the log start were deleted at the source and are not
//!   exported, as a consumer would not read them.
//! - One file per source segment (`segment_base_offset`): file boundaries
//!   come from the source, not from this run, so they are the same in
//!   every run; the window clips only the first and the last file. A
//!   file covers `first..=last`, the offsets of its ranges inside the
//!   window, and is named by them (`layout::file_key`).
//! - `--from-time` prunes the leading ranges whose `max_timestamp` is
//!   below it (no record in them can be at or after it; Kafka's time
//!   index rule). Nothing later is pruned by time: timestamps are not
//!   monotone, so records are filtered one by one, and every range from
//!   the first one read on must be read anyway for the transaction
//!   markers it may hold. `--to-time` prunes nothing, for the same
//!   reason.
//! - The ranges after the window ([`PartitionPlan::lookahead`]) are read
//!   only as far as needed to find the markers of transactions still open
//!   at its end (read_committed).

use manifest::partition::ShippedRange;

/// What a run asks for, per partition: offsets and timestamps (ms since
/// the epoch), all bounds inclusive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// First offset wanted.
    pub from_offset: Option<i64>,
    /// Last offset wanted.
    pub to_offset: Option<i64>,
    /// Earliest record timestamp wanted.
    pub from_time: Option<i64>,
    /// Latest record timestamp wanted.
    pub to_time: Option<i64>,
}

impl Window {
    /// Whether a record at `offset` with `timestamp` is wanted.
    pub fn wants(&self, offset: i64, timestamp: i64) -> bool {
        self.from_offset.is_none_or(|f| offset >= f)
            && self.to_offset.is_none_or(|t| offset <= t)
            && self.from_time.is_none_or(|f| timestamp >= f)
            && self.to_time.is_none_or(|t| timestamp <= t)
    }
}

/// One output file: the ranges of one source segment that it reads, and
/// the offsets it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// Base offset of the source segment.
    pub segment_base_offset: i64,
    /// First offset covered.
    pub first: i64,
    /// Last offset covered.
    pub last: i64,
    /// The shipped ranges read, in offset order.
    pub ranges: Vec<ShippedRange>,
}

impl Unit {
    /// Bytes of the objects read.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.bytes).sum()
    }

    /// The same unit covering only offsets up to `last` (`None` when it
    /// would cover nothing): the last stable offset's cut.
    pub fn clipped_to(&self, last: i64) -> Option<Unit> {
        if last < self.first {
            return None;
        }
        Some(Unit {
            last: self.last.min(last),
            ranges: self
                .ranges
                .iter()
                .filter(|r| r.base_offset <= last)
                .cloned()
                .collect(),
            ..self.clone()
        })
    }
}

/// The files of one partition and the ranges after them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionPlan {
    /// The files, in offset order.
    pub units: Vec<Unit>,
    /// The ranges after the window, in offset order (read only to find
    /// transaction markers).
    pub lookahead: Vec<ShippedRange>,
}

/// Plans one partition: `ranges` are all its shipped ranges (pages, then
/// inline), in offset order, and `log_start` its log start offset.
pub fn plan_partition(ranges: &[ShippedRange], log_start: i64, window: &Window) -> PartitionPlan {
    let lower = window.from_offset.unwrap_or(0).max(log_start);
    let upper = window.to_offset.unwrap_or(i64::MAX);
    let mut plan = PartitionPlan::default();
    if lower > upper {
        return plan;
    }
    // A max timestamp of -1 is "unknown", not "old": pruning stops there.
    let first_by_time = match window.from_time {
        Some(t) => ranges
            .iter()
            .position(|r| r.max_timestamp >= t || r.max_timestamp < 0)
            .unwrap_or(ranges.len()),
        None => 0,
    };
    for r in &ranges[first_by_time..] {
        if r.base_offset > upper {
            plan.lookahead.push(r.clone());
            continue;
        }
        if r.last_offset < lower {
            continue;
        }
        let first = r.base_offset.max(lower);
        let last = r.last_offset.min(upper);
        match plan.units.last_mut() {
            Some(u) if u.segment_base_offset == r.segment_base_offset => {
                u.last = last;
                u.ranges.push(r.clone());
            }
            _ => plan.units.push(Unit {
                segment_base_offset: r.segment_base_offset,
                first,
                last,
                ranges: vec![r.clone()],
            }),
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::epoch::EpochLineage;

    /// A range `base..=last` of segment `seg` with max timestamp `ts`.
    fn r(base: i64, last: i64, seg: i64, ts: i64) -> ShippedRange {
        ShippedRange {
            key: format!("k/{base}"),
            base_offset: base,
            last_offset: last,
            bytes: (last - base + 1) as u64 * 10,
            batches: 1,
            crc32c: 0,
            max_timestamp: ts,
            epochs: EpochLineage::new(),
            segment_base_offset: seg,
            completes_segment: false,
            segment_generation: 0,
            object_offset: None,
            compacted: false,
        }
    }

    /// Segment 0: 0..=9, 10..=19; segment 20: 20..=29; segment 30 (a
    /// compacted gap before it): 35..=49.
    fn ranges() -> Vec<ShippedRange> {
        vec![
            r(0, 9, 0, 100),
            r(10, 19, 0, 200),
            r(20, 29, 20, 300),
            r(35, 49, 30, 400),
        ]
    }

    /// (segment, first, last, range bases) per unit; lookahead bases.
    /// (segment, first, last, range bases) of each unit.
    type Units = Vec<(i64, i64, i64, Vec<i64>)>;

    fn shape(p: &PartitionPlan) -> (Units, Vec<i64>) {
        (
            p.units
                .iter()
                .map(|u| {
                    (
                        u.segment_base_offset,
                        u.first,
                        u.last,
                        u.ranges.iter().map(|r| r.base_offset).collect(),
                    )
                })
                .collect(),
            p.lookahead.iter().map(|r| r.base_offset).collect(),
        )
    }

    #[test]
    fn one_file_per_segment_clipped_only_at_the_window_ends() {
        type Case = (Window, i64, Units, Vec<i64>);
        let w = |from: Option<i64>, to: Option<i64>| Window {
            from_offset: from,
            to_offset: to,
            ..Window::default()
        };
        let cases: Vec<Case> = vec![
            // Everything: segment boundaries, the compacted gap kept.
            (
                w(None, None),
                0,
                vec![
                    (0, 0, 19, vec![0, 10]),
                    (20, 20, 29, vec![20]),
                    (30, 35, 49, vec![35]),
                ],
                vec![],
            ),
            // Clipped at both ends; the rest is lookahead.
            (
                w(Some(5), Some(24)),
                0,
                vec![(0, 5, 19, vec![0, 10]), (20, 20, 24, vec![20])],
                vec![35],
            ),
            // A window inside one range.
            (
                w(Some(12), Some(13)),
                0,
                vec![(0, 12, 13, vec![10])],
                vec![20, 35],
            ),
            // A window in a compacted gap: no file.
            (w(Some(30), Some(34)), 0, vec![], vec![35]),
            // The log start raises the window's start.
            (
                w(Some(0), None),
                15,
                vec![
                    (0, 15, 19, vec![10]),
                    (20, 20, 29, vec![20]),
                    (30, 35, 49, vec![35]),
                ],
                vec![],
            ),
            // Empty and inverted windows.
            (w(Some(10), Some(9)), 0, vec![], vec![]),
            (w(Some(50), None), 0, vec![], vec![]),
        ];
        for (window, log_start, units, lookahead) in cases {
            let p = plan_partition(&ranges(), log_start, &window);
            assert_eq!(
                shape(&p),
                (units, lookahead),
                "{window:?} log start {log_start}"
            );
        }
    }

    #[test]
    fn from_time_prunes_only_leading_ranges_older_than_it() {
        let at = |t| Window {
            from_time: Some(t),
            ..Window::default()
        };
        // 150: range 0..=9 (max 100) cannot hold it.
        let p = plan_partition(&ranges(), 0, &at(150));
        assert_eq!(
            shape(&p).0,
            vec![
                (0, 10, 19, vec![10]),
                (20, 20, 29, vec![20]),
                (30, 35, 49, vec![35])
            ]
        );
        // Later than everything: nothing to read.
        assert!(plan_partition(&ranges(), 0, &at(401)).units.is_empty());
        // A later range with an older max timestamp is still read (its
        // markers, and timestamps are not monotone).
        let mut rs = ranges();
        rs[2].max_timestamp = 50;
        let p = plan_partition(&rs, 0, &at(150));
        assert_eq!(p.units.len(), 3);
        // An unknown max timestamp (-1) stops the pruning.
        let mut rs = ranges();
        rs[0].max_timestamp = -1;
        assert_eq!(plan_partition(&rs, 0, &at(150)).units[0].first, 0);
    }

    #[test]
    fn clipping_a_unit_to_the_last_stable_offset() {
        let p = plan_partition(&ranges(), 0, &Window::default());
        let u = &p.units[0];
        let c = u.clipped_to(12).expect("covers 0..=12");
        assert_eq!((c.first, c.last, c.ranges.len()), (0, 12, 2));
        let c = u.clipped_to(9).expect("covers 0..=9");
        assert_eq!((c.first, c.last, c.ranges.len()), (0, 9, 1));
        assert_eq!(u.clipped_to(-1), None);
        assert_eq!(u.clipped_to(100).as_ref(), Some(u));
    }

    #[test]
    fn a_record_is_wanted_inside_every_bound() {
        let w = Window {
            from_offset: Some(10),
            to_offset: Some(20),
            from_time: Some(1000),
            to_time: Some(2000),
        };
        assert!(w.wants(10, 1000) && w.wants(20, 2000));
        assert!(!w.wants(9, 1500) && !w.wants(21, 1500));
        assert!(!w.wants(15, 999) && !w.wants(15, 2001));
        assert!(Window::default().wants(i64::MAX, i64::MIN));
    }
}
