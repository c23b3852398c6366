//! Compaction behind the tail (issue 30, "Layout 2", step 4 in
//! `docs/mirroring.md`): which ranges of a partition that live in packs
//! (`crate::pack`, `ShippedRange::object_offset`) are rewritten, into
//! what, and the manifest after the rewrite. Pure: the executor reads the
//! ranges' bytes, writes the objects and commits the versions [`replace`]
//! returns.
//!
//! Two outputs, so that neither the requests nor the manifests grow with
//! the cycles:
//! - **an object of the partition's own** ([`Output::Own`]) for a run of
//!   packed ranges of one source segment (and generation) that is due:
//!   its segment rolled (the run's last range completes it: whole
//!   segments become one object each, as Kafka keeps them); or it holds
//!   [`Policy::target_bytes`] or more; or its oldest range is
//!   [`Policy::min_age_ms`] old (every partition, busy or quiet, at least
//!   once an age). A due run longer than `target_bytes` is cut into jobs of
//!   at most that many bytes (at least one range each).
//! - **a compacted pack** ([`Output::Shared`]), one object for the jobs of
//!   many partitions, for a run of [`Policy::max_ranges`] consecutive
//!   ranges as shipped (not `compacted`) in a run that is not due: it
//!   becomes one range (`ShippedRange::compacted`), so the manifest stays
//!   far below the inline bound that would seal its ranges into pages,
//!   and the busy partitions of a shipper cost one write per
//!   `max_ranges` cycles together, not one each. Runs of half as many
//!   ranges ([`Reason::Along`]) go along when some partition's is due
//!   ([`shared_due`]), so that partitions out of step are not each
//!   compacted on their own cycle.
//!
//! A byte is rewritten at most twice (into a compacted pack, then into an
//! object of its own), ranges already in objects of their own never:
//! compaction writes O(segments + the ages a segment stays open) objects
//! per partition, never O(cycles).

use kafkalog::checkpoint::EpochEntry;
use kafkalog::epoch::EpochLineage;

use crate::partition::{PartitionManifest, ShippedRange};

/// When packed ranges are compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// A run whose oldest range is this old is due for an object of its
    /// own (ms).
    pub min_age_ms: i64,
    /// A run of this many bytes is due for an object of its own, and no
    /// job is larger (one range alone may be).
    pub target_bytes: u64,
    /// A run of this many ranges as shipped is due for a compacted pack.
    pub max_ranges: usize,
}

impl Default for Policy {
    /// One hour, 64 MiB, 128 ranges.
    fn default() -> Policy {
        Policy {
            min_age_ms: 3_600_000,
            target_bytes: 64 << 20,
            max_ranges: 128,
        }
    }
}

/// Why a job is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The source segment rolled.
    SegmentRolled,
    /// The run reached the size bound.
    Large,
    /// The run's oldest range is old enough.
    Aged,
    /// The run has [`Policy::max_ranges`] ranges as shipped.
    Many,
    /// The run has half as many: compacted only along with a due one.
    Along,
}

/// Where a job's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// An object of the partition's own.
    Own,
    /// The cycle's compacted pack, shared with other partitions' jobs.
    Shared,
}

/// One rewrite: `manifest.ranges[ranges]` into one range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Positions in the manifest's inline ranges.
    pub ranges: std::ops::Range<usize>,
    /// Their bytes in all.
    pub bytes: u64,
    /// Why now.
    pub reason: Reason,
    /// Where to.
    pub output: Output,
}

/// The jobs due in `m` at `now_ms` under `policy`, in range order.
/// `committed_ms` says when a range was shipped (the upload time in its
/// key, `layout::parse_upload_time_ms`; `None`: unknown, counted as old).
pub fn plan(
    m: &PartitionManifest,
    now_ms: i64,
    committed_ms: impl Fn(&ShippedRange) -> Option<i64>,
    policy: &Policy,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    let ranges = &m.ranges;
    let mut i = 0;
    while i < ranges.len() {
        if ranges[i].object_offset.is_none() {
            i += 1;
            continue;
        }
        // The run of packed ranges of one segment and generation from i.
        let mut j = i + 1;
        while j < ranges.len()
            && ranges[j].object_offset.is_some()
            && ranges[j].segment_base_offset == ranges[i].segment_base_offset
            && ranges[j].segment_generation == ranges[i].segment_generation
        {
            j += 1;
        }
        let run = &ranges[i..j];
        let bytes: u64 = run.iter().map(|r| r.bytes).sum();
        let oldest = run.iter().map(&committed_ms).min().flatten();
        let reason = if run.last().is_some_and(|r| r.completes_segment) {
            Some(Reason::SegmentRolled)
        } else if bytes >= policy.target_bytes {
            Some(Reason::Large)
        } else if oldest.is_none_or(|t| now_ms.saturating_sub(t) >= policy.min_age_ms) {
            Some(Reason::Aged)
        } else {
            None
        };
        if let Some(reason) = reason {
            own_jobs(ranges, i..j, reason, policy.target_bytes, &mut jobs);
        } else {
            shared_jobs(ranges, i..j, policy.max_ranges, &mut jobs);
        }
        i = j;
    }
    jobs
}

/// `ranges[run]` in jobs of at most `target` bytes (one range at least),
/// each into an object of its own.
fn own_jobs(
    ranges: &[ShippedRange],
    run: std::ops::Range<usize>,
    reason: Reason,
    target: u64,
    jobs: &mut Vec<Job>,
) {
    let mut start = run.start;
    let mut total = 0u64;
    for (k, range) in ranges.iter().enumerate().take(run.end).skip(run.start) {
        let b = range.bytes;
        if k > start && total + b > target {
            jobs.push(Job {
                ranges: start..k,
                bytes: total,
                reason,
                output: Output::Own,
            });
            (start, total) = (k, 0);
        }
        total += b;
    }
    jobs.push(Job {
        ranges: start..run.end,
        bytes: total,
        reason,
        output: Output::Own,
    });
}

/// The sub-runs of `ranges[run]` as shipped (not `compacted`) long
/// enough for a compacted pack: [`Reason::Many`] from `max_ranges`,
/// [`Reason::Along`] from half as many (two at least).
fn shared_jobs(
    ranges: &[ShippedRange],
    run: std::ops::Range<usize>,
    max_ranges: usize,
    jobs: &mut Vec<Job>,
) {
    let along = (max_ranges / 2).max(2);
    let mut k = run.start;
    while k < run.end {
        if ranges[k].compacted {
            k += 1;
            continue;
        }
        let start = k;
        while k < run.end && !ranges[k].compacted {
            k += 1;
        }
        let n = k - start;
        let reason = if n >= max_ranges.max(2) {
            Reason::Many
        } else if n >= along {
            Reason::Along
        } else {
            continue;
        };
        jobs.push(Job {
            ranges: start..k,
            bytes: ranges[start..k].iter().map(|r| r.bytes).sum(),
            reason,
            output: Output::Shared,
        });
    }
}

/// True when some job of a cycle's `jobs` is due for a compacted pack:
/// then the [`Reason::Along`] ones are written with it; otherwise none is.
pub fn shared_due<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> bool {
    jobs.into_iter().any(|j| j.reason == Reason::Many)
}

/// The range that replaces `ranges` (consecutive, of one segment) once
/// their bytes, concatenated in order, are the object `key` with CRC-32C
/// `crc32c`; or, with `shared_at`, bytes of the compacted pack `key` from
/// that offset.
pub fn merged_range(
    ranges: &[ShippedRange],
    key: String,
    crc32c: u32,
    shared_at: Option<u64>,
) -> Option<ShippedRange> {
    let (first, last) = (ranges.first()?, ranges.last()?);
    let mut epochs: Vec<EpochEntry> = Vec::new();
    for e in ranges.iter().flat_map(|r| r.epochs.entries()) {
        if epochs.last().is_none_or(|l| l.epoch < e.epoch) {
            epochs.push(*e);
        }
    }
    Some(ShippedRange {
        key,
        base_offset: first.base_offset,
        last_offset: last.last_offset,
        bytes: ranges.iter().map(|r| r.bytes).sum(),
        batches: ranges.iter().map(|r| r.batches).sum(),
        crc32c,
        max_timestamp: ranges.iter().map(|r| r.max_timestamp).max().unwrap_or(-1),
        epochs: EpochLineage::from_entries(epochs).ok()?,
        segment_base_offset: first.segment_base_offset,
        completes_segment: last.completes_segment,
        segment_generation: first.segment_generation,
        object_offset: shared_at,
        compacted: shared_at.is_some(),
    })
}

/// `m` with `run` (consecutive ranges of it, found by equality, wherever
/// they stand now) replaced by `merged` (from [`merged_range`]), as the
/// next version. `None` when `m` no longer holds the run (retention, a
/// cut or another writer moved it since the plan: the new object is left
/// to garbage collection) or `merged` does not cover exactly its offsets.
pub fn replace_run(
    m: &PartitionManifest,
    run: &[ShippedRange],
    merged: ShippedRange,
) -> Option<PartitionManifest> {
    let (first, last) = (run.first()?, run.last()?);
    if merged.base_offset != first.base_offset || merged.last_offset != last.last_offset {
        return None;
    }
    let at = m.ranges.iter().position(|r| r == first)?;
    let end = at.checked_add(run.len())?;
    if m.ranges.get(at..end)? != run {
        return None;
    }
    let mut next = m.clone();
    next.version = m.version.checked_add(1)?;
    next.ranges.splice(at..end, [merged]);
    next.validate().ok()?;
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::topic::TopicPartition;

    const NOW: i64 = 10_000_000;

    fn lineage(e: &[(i32, i64)]) -> EpochLineage {
        EpochLineage::from_entries(e.iter().map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        }))
        .expect("increasing")
    }

    /// A range of segment `seg` at offsets `base..base+9`, packed or not,
    /// shipped `age` ms before NOW (encoded in its key for the test).
    fn r(seg: i64, base: i64, packed: bool, age: i64, bytes: u64) -> ShippedRange {
        ShippedRange {
            key: format!("{}", NOW - age),
            base_offset: base,
            last_offset: base + 9,
            bytes,
            batches: 2,
            crc32c: 0,
            max_timestamp: base,
            epochs: lineage(&[(if base < 40 { 1 } else { 2 }, base)]),
            segment_base_offset: seg,
            completes_segment: false,
            segment_generation: 0,
            compacted: false,
            object_offset: packed.then_some(100),
        }
    }

    fn rolled(mut x: ShippedRange) -> ShippedRange {
        x.completes_segment = true;
        x
    }

    fn manifest(ranges: Vec<ShippedRange>) -> PartitionManifest {
        let tp = TopicPartition::new("t", 0).expect("tp");
        let mut m = PartitionManifest::new("c", &tp, "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"));
        m.version = 3;
        m.shipped_end_offset = ranges.last().map_or(0, |x| x.last_offset + 1);
        m.source_high_watermark = m.shipped_end_offset;
        m.lineage = lineage(&[(1, 0), (2, 40)]);
        m.ranges = ranges;
        m
    }

    fn policy() -> Policy {
        Policy {
            min_age_ms: 1_000,
            target_bytes: 1_000,
            max_ranges: 4,
        }
    }

    fn committed(x: &ShippedRange) -> Option<i64> {
        x.key.parse().ok()
    }

    fn compacted(mut x: ShippedRange) -> ShippedRange {
        x.compacted = true;
        x
    }

    /// One row per case: the ranges and the jobs (positions, reason; the
    /// output follows the reason).
    #[test]
    fn jobs_by_case() {
        use Reason::*;
        type Row = (
            &'static str,
            Vec<ShippedRange>,
            Vec<(std::ops::Range<usize>, Reason)>,
        );
        let rows: Vec<Row> = vec![
            (
                "nothing packed",
                vec![r(0, 0, false, 5_000, 10), r(0, 10, false, 5_000, 10)],
                vec![],
            ),
            ("a young range waits", vec![r(0, 0, true, 10, 10)], vec![]),
            (
                "a young run of half the ranges goes along",
                vec![r(0, 0, true, 10, 10), r(0, 10, true, 10, 10)],
                vec![(0..2, Along)],
            ),
            (
                "a rolled segment is one job",
                vec![
                    r(0, 0, true, 10, 10),
                    rolled(r(0, 10, true, 10, 10)),
                    r(20, 20, true, 10, 10),
                ],
                vec![(0..2, SegmentRolled)],
            ),
            (
                "an old tail",
                vec![r(0, 0, true, 5_000, 10), r(0, 10, true, 2_000, 10)],
                vec![(0..2, Aged)],
            ),
            (
                "the oldest decides the age (a busy partition too)",
                vec![r(0, 0, true, 5_000, 10), r(0, 10, true, 10, 10)],
                vec![(0..2, Aged)],
            ),
            (
                "many ranges go into a compacted pack before pages",
                vec![
                    r(0, 0, true, 10, 1),
                    r(0, 10, true, 10, 1),
                    r(0, 20, true, 10, 1),
                    r(0, 30, true, 10, 1),
                ],
                vec![(0..4, Many)],
            ),
            (
                "ranges in a compacted pack are not packed again",
                vec![
                    compacted(r(0, 0, true, 10, 4)),
                    r(0, 10, true, 10, 1),
                    r(0, 20, true, 10, 1),
                    r(0, 30, true, 10, 1),
                    r(0, 40, true, 10, 1),
                ],
                vec![(1..5, Many)],
            ),
            (
                "a compacted range splits the runs as shipped",
                vec![
                    r(0, 0, true, 10, 1),
                    compacted(r(0, 10, true, 10, 4)),
                    r(0, 20, true, 10, 1),
                    r(0, 30, true, 10, 1),
                ],
                vec![(2..4, Along)],
            ),
            (
                "an old run goes into its own object, compacted ranges and all",
                vec![compacted(r(0, 0, true, 5_000, 4)), r(0, 10, true, 10, 1)],
                vec![(0..2, Aged)],
            ),
            (
                "a large run is cut at the target",
                vec![
                    r(0, 0, true, 10, 600),
                    r(0, 10, true, 10, 600),
                    r(0, 20, true, 10, 600),
                ],
                vec![(0..1, Large), (1..2, Large), (2..3, Large)],
            ),
            (
                "an own object splits runs",
                vec![
                    r(0, 0, true, 5_000, 10),
                    r(0, 10, false, 5_000, 10),
                    r(0, 20, true, 5_000, 10),
                ],
                vec![(0..1, Aged), (2..3, Aged)],
            ),
            (
                "segments are not mixed",
                vec![rolled(r(0, 0, true, 10, 10)), r(10, 10, true, 5_000, 10)],
                vec![(0..1, SegmentRolled), (1..2, Aged)],
            ),
        ];
        for (name, ranges, expected) in rows {
            let m = manifest(ranges);
            let jobs = plan(&m, NOW, committed, &policy());
            for j in &jobs {
                let shared = matches!(j.reason, Many | Along);
                assert_eq!(j.output == Output::Shared, shared, "{name}: {j:?}");
            }
            let got: Vec<(std::ops::Range<usize>, Reason)> =
                jobs.into_iter().map(|j| (j.ranges, j.reason)).collect();
            assert_eq!(got, expected, "{name}");
        }
    }

    /// One row per case: the reasons of a cycle's jobs, and whether its
    /// compacted pack is written.
    #[test]
    fn a_compacted_pack_is_written_when_one_job_is_due_for_it() {
        use Reason::*;
        let rows: &[(&str, &[Reason], bool)] = &[
            ("nothing", &[], false),
            ("only runs that could go along", &[Along, Along], false),
            ("one due", &[Along, Many, Along], true),
            ("own objects only", &[Aged, SegmentRolled], false),
        ];
        for (name, reasons, due) in rows {
            let jobs: Vec<Job> = reasons
                .iter()
                .map(|&reason| Job {
                    ranges: 0..1,
                    bytes: 1,
                    reason,
                    output: Output::Shared,
                })
                .collect();
            assert_eq!(shared_due(&jobs), *due, "{name}");
        }
    }

    #[test]
    fn a_job_becomes_one_range_and_the_next_version() {
        let m = manifest(vec![
            r(0, 0, false, 5_000, 10),
            r(0, 10, true, 5_000, 10),
            r(0, 20, true, 5_000, 10),
            r(0, 30, true, 5_000, 10),
            r(0, 40, true, 5_000, 10),
        ]);
        let jobs = plan(&m, NOW, committed, &policy());
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].ranges, 1..5);
        assert_eq!(jobs[0].bytes, 40);
        let merged = merged_range(&m.ranges[1..5], "own".into(), 77, None).expect("merged");
        assert_eq!((merged.base_offset, merged.last_offset), (10, 49));
        assert_eq!((merged.bytes, merged.batches, merged.crc32c), (40, 8, 77));
        assert_eq!(merged.object_offset, None);
        assert_eq!(merged.epochs, lineage(&[(1, 10), (2, 40)]));
        let run = &m.ranges[jobs[0].ranges.clone()];
        let next = replace_run(&m, run, merged.clone()).expect("fits");
        assert_eq!(next.version, 4);
        assert_eq!(next.ranges.len(), 2);
        assert_eq!(next.ranges[1].key, "own");
        assert_eq!(next.shipped_end_offset, m.shipped_end_offset);
        // Where the run stands now: the manifest moved on, with appends
        // after it and retention before it, found by equality.
        let mut moved_on = m.clone();
        moved_on.ranges.remove(0);
        moved_on.ranges.push(r(0, 50, true, 5_000, 10));
        moved_on.shipped_end_offset = 60;
        moved_on.version = 7;
        let next = replace_run(&moved_on, run, merged.clone()).expect("fits where it is");
        assert_eq!(next.version, 8);
        assert_eq!(
            next.ranges
                .iter()
                .map(|r| r.base_offset)
                .collect::<Vec<_>>(),
            vec![10, 50]
        );
        // Runs that are no longer there, or not whole: refused.
        let cases: Vec<(&str, PartitionManifest)> = vec![
            ("gone", manifest(vec![r(0, 0, false, 5_000, 10)])),
            ("cut inside the run", {
                let mut c = m.clone();
                c.ranges.truncate(3);
                c.shipped_end_offset = 30;
                c
            }),
            ("retention inside the run", {
                let mut c = m.clone();
                c.ranges.drain(0..2);
                c.log_start_offset = 20;
                c
            }),
        ];
        for (name, c) in cases {
            assert_eq!(replace_run(&c, run, merged.clone()), None, "{name}");
        }
        // A merged range that does not cover the run exactly: refused.
        let short = merged_range(&m.ranges[1..4], "own".into(), 77, None).expect("merged");
        assert_eq!(replace_run(&m, run, short), None);
        // Into a compacted pack: bytes of the shared object, marked so, and
        // the next version is a delta a head can carry.
        let shared = merged_range(&m.ranges[1..5], "pack".into(), 78, Some(4096)).expect("merged");
        assert_eq!(shared.object_range(), Some(4096..4136));
        assert!(shared.compacted);
        let next = replace_run(&m, run, shared.clone()).expect("fits");
        let d = crate::delta::Delta::between(&m, &next).expect("a delta");
        assert_eq!((d.replaced, d.ranges.len()), (vec![shared], 0));
    }
}
