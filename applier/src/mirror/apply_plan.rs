//! The decisions of MIRRORING's apply, as pure functions of values: how an
//! object's bytes reach the log ([`intake`]), where the appending of a
//! range's batches starts and whether the log restarts inside a batch
//! ([`plan_append`]), which segments the source compacted are replaced
//! ([`compacted_segments_to_replace`]), and which offsets a follow plan
//! skipped ([`skipped_offsets`]). `super::stream` and `super::Mirror::apply`
//! carry the returned plans out on the log and the bucket; nothing here
//! reads a file or the store.
//!
//! Invariants:
//! - [`plan_append`] never appends a batch that ends at or below the log
//!   end (the log holds it), and restarts the log only when it is empty
//!   (log start = log end) and its start lies inside the first batch that
//!   continues it (a source's log start moved into a batch, e.g. by
//!   DeleteRecords): the whole batch is appended and the log start is put
//!   back where it was, as a Kafka follower does.
//! - [`compacted_segments_to_replace`] names a segment only when the
//!   manifest holds a newer generation of it than the record says was
//!   applied, every range of it lies below the log end, and it is a rolled
//!   local segment (never the active one); it names the ranges of the
//!   newest generation only, in the manifest's order.

use std::collections::BTreeMap;

use manifest::partition::ShippedRange;
use manifest::reconcile::{Plan, Reason, Step};

/// How an object's bytes reach the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// Downloaded whole and checked (size, CRC-32C, every batch header)
    /// before its first batch is appended.
    Buffered,
    /// Appended as it downloads, under the `applying` marker; a mismatch at
    /// its end cuts the log back to where the range started.
    Streamed,
}

/// How an object of `object_bytes` is appended when objects above
/// `stream_above` bytes are streamed.
pub fn intake(object_bytes: u64, stream_above: u64) -> Intake {
    if object_bytes > stream_above {
        Intake::Streamed
    } else {
        Intake::Buffered
    }
}

/// One batch of a range's bytes, as its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpan {
    /// Byte position in the bytes.
    pub position: usize,
    /// First offset.
    pub base_offset: i64,
    /// Last offset.
    pub last_offset: i64,
}

/// The local log as [`plan_append`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEnds {
    /// Log start offset.
    pub log_start: i64,
    /// Log end offset.
    pub log_end: i64,
    /// Base offset of the active segment.
    pub active_base: i64,
}

/// What appending a range's whole batches does to the log, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendPlan {
    /// The log's start lies inside the first batch that continues it and
    /// the log is empty: it restarts at `restart_at` (the batch's base)
    /// before the append, and its start is put back to `keep_log_start`
    /// after.
    pub restart: Option<RestartInsideBatch>,
    /// Roll a new segment at this base before appending: the range starts
    /// a source segment above the active one (so the `.log` files match
    /// the source's for the same base offset).
    pub roll_to: Option<i64>,
    /// Byte position of the first batch to append (those before it are
    /// held already).
    pub from_position: usize,
}

/// A restart of an empty log at a batch that holds its log start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartInsideBatch {
    /// The batch's base offset: the log restarts there.
    pub restart_at: i64,
    /// The log start put back after the batch is appended.
    pub keep_log_start: i64,
}

/// What appending `batches` (a range's whole batches, in order; those read
/// up to the first that continues the log are enough) does to a log at
/// `log`, for a range of source segment `segment_base`. `None` when every
/// batch is held already.
pub fn plan_append(batches: &[BatchSpan], log: LogEnds, segment_base: i64) -> Option<AppendPlan> {
    let first = batches.iter().find(|b| b.last_offset >= log.log_end)?;
    let restart = (first.base_offset < log.log_end && log.log_end == log.log_start).then_some(
        RestartInsideBatch {
            restart_at: first.base_offset,
            keep_log_start: log.log_start,
        },
    );
    // After a restart the log is one empty segment at the batch's base.
    let (log_end, active_base) = match restart {
        Some(r) => (r.restart_at, r.restart_at),
        None => (log.log_end, log.active_base),
    };
    let roll_to = (segment_base > active_base && segment_base >= log_end).then_some(segment_base);
    Some(AppendPlan {
        restart,
        roll_to,
        from_position: first.position,
    })
}

/// A segment the source compacted, to be replaced by its newest generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentReplacement<'a> {
    /// The segment's base offset.
    pub base: i64,
    /// The generation it becomes.
    pub generation: u32,
    /// The ranges of that generation, in the manifest's order: their
    /// objects, concatenated, are the segment's new content.
    pub ranges: Vec<&'a ShippedRange>,
}

/// The segments of `ranges` (a manifest's inline ranges) to replace in a
/// log ending at `log_end` with segments `local_segments` (base offsets,
/// sorted, the last one active), when `applied` holds the generation the
/// record says each segment has (see the module's invariants).
pub fn compacted_segments_to_replace<'a>(
    ranges: &'a [ShippedRange],
    applied: &BTreeMap<i64, u32>,
    log_end: i64,
    local_segments: &[i64],
) -> Vec<SegmentReplacement<'a>> {
    let mut by_segment: BTreeMap<i64, Vec<&ShippedRange>> = BTreeMap::new();
    for r in ranges.iter().filter(|r| r.segment_generation > 0) {
        by_segment.entry(r.segment_base_offset).or_default().push(r);
    }
    let mut out = Vec::new();
    for (base, ranges) in by_segment {
        let generation = ranges
            .iter()
            .map(|r| r.segment_generation)
            .max()
            .unwrap_or(0);
        let newer = generation > applied.get(&base).copied().unwrap_or(0);
        let below = ranges.iter().all(|r| r.last_offset < log_end);
        let rolled = local_segments.contains(&base) && local_segments.last() != Some(&base);
        if newer && below && rolled {
            out.push(SegmentReplacement {
                base,
                generation,
                ranges: ranges
                    .into_iter()
                    .filter(|r| r.segment_generation == generation)
                    .collect(),
            });
        }
    }
    out
}

/// The offsets (`first`, `last`) a follow `plan` skips because the
/// source's log start passed the local log end: a gap observed here.
pub fn skipped_offsets(plan: &Plan) -> Option<(i64, i64)> {
    plan.steps.iter().find_map(|s| match s {
        Step::TruncateFullyAndStartAt {
            cut_at,
            start,
            reason: Reason::SourceLogStart { .. },
        } if cut_at < start => Some((*cut_at, start - 1)),
        _ => None,
    })
}

/// A range of segment `segment`, generation `generation`, holding offsets
/// `base..=last` (key `k<segment>-<base>-<generation>`), for the applier's
/// table tests.
#[cfg(test)]
pub(crate) fn test_range(segment: i64, base: i64, last: i64, generation: u32) -> ShippedRange {
    ShippedRange {
        key: format!("k{segment}-{base}-{generation}"),
        base_offset: base,
        last_offset: last,
        bytes: 1,
        batches: 1,
        crc32c: 0,
        max_timestamp: 0,
        epochs: kafkalog::epoch::EpochLineage::new(),
        segment_base_offset: segment,
        completes_segment: false,
        segment_generation: generation,
        object_offset: None,
        compacted: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One `#[test]` per row: `name: input => expected;`.
    macro_rules! rows {
        ($check:ident; $($name:ident: $input:expr => $want:expr;)*) => {
            $( #[test] fn $name() { $check($input, $want); } )*
        };
    }

    // --- intake: (object bytes, stream_above) -> intake

    fn check_intake((bytes, above): (u64, u64), want: Intake) {
        assert_eq!(intake(bytes, above), want);
    }

    rows! { check_intake;
        an_object_below_the_threshold_is_buffered: (100, 4 << 20) => Intake::Buffered;
        an_object_at_the_threshold_is_buffered: (4 << 20, 4 << 20) => Intake::Buffered;
        an_object_above_the_threshold_is_streamed: ((4 << 20) + 1, 4 << 20) => Intake::Streamed;
        with_a_zero_threshold_every_non_empty_object_is_streamed: (1, 0) => Intake::Streamed;
        an_empty_object_is_never_streamed: (0, 0) => Intake::Buffered;
    }

    // --- plan_append: (batches, log, segment base) -> plan

    fn b(position: usize, base_offset: i64, last_offset: i64) -> BatchSpan {
        BatchSpan {
            position,
            base_offset,
            last_offset,
        }
    }

    fn log(log_start: i64, log_end: i64, active_base: i64) -> LogEnds {
        LogEnds {
            log_start,
            log_end,
            active_base,
        }
    }

    fn plan(from_position: usize) -> AppendPlan {
        AppendPlan {
            restart: None,
            roll_to: None,
            from_position,
        }
    }

    fn check_append(
        (batches, at, segment_base): (&[BatchSpan], LogEnds, i64),
        want: Option<AppendPlan>,
    ) {
        assert_eq!(plan_append(batches, at, segment_base), want);
    }

    rows! { check_append;
        a_range_that_continues_the_log_is_appended_whole:
            (&[b(0, 10, 19), b(80, 20, 29)], log(0, 10, 0), 0) => Some(plan(0));
        batches_the_log_holds_already_are_skipped:
            (&[b(0, 0, 4), b(50, 5, 9), b(100, 10, 14)], log(0, 10, 0), 0) => Some(plan(100));
        a_range_the_log_holds_whole_appends_nothing:
            (&[b(0, 0, 9), b(50, 10, 19)], log(0, 20, 0), 0) => None;
        no_batches_append_nothing:
            (&[], log(0, 0, 0), 0) => None;
        an_empty_log_whose_start_is_inside_the_first_batch_restarts_at_the_batch:
            (&[b(0, 10, 19)], log(15, 15, 15), 0) => Some(AppendPlan {
                restart: Some(RestartInsideBatch { restart_at: 10, keep_log_start: 15 }),
                ..plan(0)
            });
        a_log_holding_records_is_not_restarted_inside_a_batch:
            (&[b(0, 10, 19)], log(0, 15, 0), 0) => Some(plan(0));
        an_empty_log_at_a_batch_boundary_is_not_restarted:
            (&[b(0, 15, 19)], log(15, 15, 15), 0) => Some(plan(0));
        a_range_starting_a_source_segment_above_the_active_one_rolls_to_it:
            (&[b(0, 100, 109)], log(0, 100, 0), 100) => Some(AppendPlan { roll_to: Some(100), ..plan(0) });
        a_range_of_the_active_segment_does_not_roll:
            (&[b(0, 100, 109)], log(0, 100, 100), 100) => Some(plan(0));
        a_segment_base_below_the_log_end_does_not_roll:
            (&[b(0, 100, 109)], log(0, 100, 0), 90) => Some(plan(0));
        a_restarted_log_holds_the_batch_in_its_new_segment_without_a_roll:
            (&[b(0, 10, 19)], log(15, 15, 15), 10) => Some(AppendPlan {
                restart: Some(RestartInsideBatch { restart_at: 10, keep_log_start: 15 }),
                ..plan(0)
            });
    }

    // --- compacted_segments_to_replace: (ranges, applied, log end, local
    // segments) -> (base, generation, range keys)

    use super::test_range as range;

    type Replaced = Vec<(i64, u32, Vec<&'static str>)>;
    /// (ranges, applied generations, log end, local segments)
    type World = (
        Vec<ShippedRange>,
        &'static [(i64, u32)],
        i64,
        &'static [i64],
    );

    fn check_compacted((ranges, applied, log_end, local): World, want: Replaced) {
        let applied: BTreeMap<i64, u32> = applied.iter().copied().collect();
        let got: Vec<(i64, u32, Vec<String>)> =
            compacted_segments_to_replace(&ranges, &applied, log_end, local)
                .into_iter()
                .map(|s| {
                    let keys = s.ranges.iter().map(|r| r.key.clone()).collect();
                    (s.base, s.generation, keys)
                })
                .collect();
        let want: Vec<(i64, u32, Vec<String>)> = want
            .into_iter()
            .map(|(b, g, k)| (b, g, k.into_iter().map(String::from).collect()))
            .collect();
        assert_eq!(got, want);
    }

    rows! { check_compacted;
        a_rolled_segment_compacted_below_the_log_end_is_replaced:
            (vec![range(0, 0, 49, 1), range(50, 50, 99, 0)], &[], 100, &[0, 50])
                => vec![(0, 1, vec!["k0-0-1"])];
        a_segment_never_compacted_is_kept:
            (vec![range(0, 0, 49, 0), range(50, 50, 99, 0)], &[], 100, &[0, 50]) => vec![];
        a_generation_already_applied_is_not_replaced_again:
            (vec![range(0, 0, 49, 2)], &[(0, 2)], 100, &[0, 50]) => vec![];
        a_newer_generation_than_the_applied_one_is_replaced:
            (vec![range(0, 0, 49, 3)], &[(0, 2)], 100, &[0, 50]) => vec![(0, 3, vec!["k0-0-3"])];
        a_segment_reaching_the_log_end_waits:
            (vec![range(0, 0, 49, 1)], &[], 49, &[0, 50]) => vec![];
        the_active_segment_is_never_replaced:
            (vec![range(0, 0, 49, 1)], &[], 100, &[0]) => vec![];
        a_segment_the_log_does_not_hold_is_not_replaced:
            (vec![range(0, 0, 49, 1)], &[], 100, &[20, 50]) => vec![];
        only_the_newest_generations_ranges_make_the_segment:
            (vec![range(0, 0, 19, 1), range(0, 0, 24, 2), range(0, 25, 49, 2)], &[], 100, &[0, 50])
                => vec![(0, 2, vec!["k0-0-2", "k0-25-2"])];
        each_compacted_segment_is_judged_alone:
            (vec![range(0, 0, 49, 1), range(50, 50, 99, 1), range(100, 100, 149, 1)], &[(50, 1)], 150, &[0, 50, 100, 150])
                => vec![(0, 1, vec!["k0-0-1"]), (100, 1, vec!["k100-100-1"])];
    }

    // --- skipped_offsets: follow plan -> offsets skipped

    fn check_skipped(steps: Vec<Step>, want: Option<(i64, i64)>) {
        let plan = Plan {
            steps,
            fetch_from: 0,
        };
        assert_eq!(skipped_offsets(&plan), want);
    }

    fn source_start(cut_at: i64, start: i64) -> Step {
        Step::TruncateFullyAndStartAt {
            cut_at,
            start,
            reason: Reason::SourceLogStart {
                source_log_start: start,
            },
        }
    }

    rows! { check_skipped;
        a_source_log_start_past_the_log_end_skips_the_offsets_between:
            vec![source_start(10, 20)] => Some((10, 19));
        a_source_log_start_at_the_log_end_skips_nothing:
            vec![source_start(20, 20)] => None;
        a_divergence_restart_is_not_a_skip:
            vec![Step::TruncateFullyAndStartAt {
                cut_at: 10,
                start: 20,
                reason: Reason::Divergence { local_epoch: Some(1), source_epoch: Some(2) },
            }] => None;
        a_plan_without_steps_skips_nothing: vec![] => None;
    }
}
