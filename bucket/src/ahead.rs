//! Read-ahead planning: which ranged GETs fetch, one per run, the ranges
//! of many partitions that share an object (a pack), so that readers of a
//! cycle's ranges (the applier, compaction) pay a GET per run rather than
//! per range. Pure; [`crate::store::ManifestStore::read_ahead`] executes a
//! plan.

use std::collections::BTreeMap;

use manifest::partition::ShippedRange;

use crate::store::AheadRuns;

/// The ranged reads that fetch, one GET per run, ranges of `wanted` that
/// share an object (a pack: `ShippedRange::object_offset`): per object,
/// ranges in byte order, neighbours at most `max_gap` bytes apart in one
/// run, runs of at most `max_run` bytes, and `budget` bytes in all. Only
/// runs of two ranges or more: a range alone is read by its own GET when
/// it is applied. Each run: the key, its bytes, and its ranges' bytes.
pub fn runs<'a>(
    wanted: impl IntoIterator<Item = &'a ShippedRange>,
    max_gap: u64,
    max_run: u64,
    budget: u64,
) -> AheadRuns {
    let mut by_key: BTreeMap<&str, Vec<std::ops::Range<u64>>> = BTreeMap::new();
    for r in wanted {
        if let Some(range) = r.object_range() {
            by_key.entry(r.key.as_str()).or_default().push(range);
        }
    }
    let mut runs = Vec::new();
    let mut spent = 0u64;
    for (key, mut ranges) in by_key {
        ranges.sort_by_key(|r| r.start);
        ranges.dedup();
        let mut run: Option<(std::ops::Range<u64>, Vec<std::ops::Range<u64>>)> = None;
        let mut close = |run: Option<(std::ops::Range<u64>, Vec<std::ops::Range<u64>>)>,
                         runs: &mut Vec<_>| {
            if let Some((span, inside)) = run
                && inside.len() >= 2
                && spent + (span.end - span.start) <= budget
            {
                spent += span.end - span.start;
                runs.push((key.to_string(), span, inside));
            }
        };
        for r in ranges {
            run = match run {
                Some((span, mut inside))
                    if r.start >= span.end
                        && r.start - span.end <= max_gap
                        && r.end - span.start <= max_run =>
                {
                    inside.push(r.clone());
                    Some((span.start..r.end, inside))
                }
                other => {
                    close(other, &mut runs);
                    Some((r.clone(), vec![r]))
                }
            };
        }
        close(run, &mut runs);
    }
    runs
}

#[cfg(test)]
mod read_ahead_tests {
    use super::*;

    fn r(key: &str, at: Option<u64>, bytes: u64) -> ShippedRange {
        ShippedRange {
            key: key.into(),
            base_offset: 0,
            last_offset: 0,
            bytes,
            batches: 1,
            crc32c: 0,
            max_timestamp: 0,
            epochs: kafkalog::epoch::EpochLineage::new(),
            segment_base_offset: 0,
            completes_segment: false,
            segment_generation: 0,
            object_offset: at,
            compacted: false,
        }
    }

    /// One row per case: the ranges, and the runs (key, start, end, ranges).
    #[test]
    fn runs_by_case() {
        type Row = (
            &'static str,
            Vec<ShippedRange>,
            u64,
            Vec<(&'static str, u64, u64, usize)>,
        );
        let rows: Vec<Row> = vec![
            (
                "objects of their own are not read ahead",
                vec![r("a", None, 10), r("b", None, 10)],
                1 << 30,
                vec![],
            ),
            (
                "neighbours in a pack are one run",
                vec![
                    r("p", Some(100), 10),
                    r("p", Some(110), 5),
                    r("p", Some(115), 5),
                ],
                1 << 30,
                vec![("p", 100, 120, 3)],
            ),
            (
                "a range alone is left to its own GET",
                vec![r("p", Some(100), 10), r("q", Some(0), 10)],
                1 << 30,
                vec![],
            ),
            (
                "a gap over the bound splits runs",
                vec![
                    r("p", Some(0), 10),
                    r("p", Some(10), 10),
                    r("p", Some(5000), 10),
                    r("p", Some(5010), 10),
                ],
                1 << 30,
                vec![("p", 0, 20, 2), ("p", 5000, 5020, 2)],
            ),
            (
                "a small gap is read through",
                vec![r("p", Some(0), 10), r("p", Some(100), 10)],
                1 << 30,
                vec![("p", 0, 110, 2)],
            ),
            (
                "over the budget: left to their own GETs",
                vec![r("p", Some(0), 600), r("p", Some(600), 600)],
                1000,
                vec![],
            ),
            (
                "two packs",
                vec![
                    r("p", Some(0), 10),
                    r("q", Some(0), 10),
                    r("p", Some(10), 10),
                    r("q", Some(10), 10),
                ],
                1 << 30,
                vec![("p", 0, 20, 2), ("q", 0, 20, 2)],
            ),
        ];
        for (name, ranges, budget, expected) in rows {
            let got: Vec<(String, u64, u64, usize)> = runs(&ranges, 1024, 1 << 20, budget)
                .into_iter()
                .map(|(k, span, inside)| (k, span.start, span.end, inside.len()))
                .collect();
            let expected: Vec<(String, u64, u64, usize)> = expected
                .into_iter()
                .map(|(k, a, b, n)| (k.to_string(), a, b, n))
                .collect();
            assert_eq!(got, expected, "{name}");
        }
    }
}
