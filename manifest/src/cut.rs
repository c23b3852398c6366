//! Which records a preparation would take from a log that holds records of
//! its own, and whether it may: the guard of `applier start`, `once` and
//! `run` (`--allow-truncate`), of `applier plan` and of `applier status`.
//!
//! A partition holds records that are not the pinned source's when it was
//! a plain (writable) partition adopted as a mirror (the record's
//! `failback_pending`), or when it stopped (failover: `stopped_at_offset`)
//! and took writes since. Preparing such a partition
//! ([`crate::reconcile::plan_preparation`]) may cut them: failback's LME
//! truncation, the cut back to the stop offset when resuming the same
//! source, the follower step. What a cut costs is what the source does not
//! give back: records below the point where the local lineage and the
//! source's part ([`crate::lineage::divergence_point`]) are the same
//! history (same offsets, same epochs) and are fetched again; the rest is
//! gone.
//!
//! | case | [`records_cut`] |
//! | --- | --- |
//! | the plan cuts nothing (only keeps, raises the log start, or follows the source's log start past the log end) | `None` |
//! | the plan cuts only records the source holds as the same history | `None` (they are fetched again) |
//! | the plan cuts at `T` and the histories part at `D` | `Some(max(T, D, log start) ..= log end - 1)` |
//! | the local log has no epochs (no `leader-epoch-checkpoint`) | the whole cut: nothing is provably shared |
//!
//! [`check`] applies it (and [`unknown_cut_at_stake`] when the source's
//! manifest cannot be read): a partition with no records of its own at stake
//! ([`at_stake`] false: a mirror that only ever held mirrored records) is
//! never refused; one with a cut is refused ([`Refusal::WouldCut`]) unless
//! the operator allowed it. Both are total and pure: no IO, no panic.
//!
//! Offsets, not records, are counted: a compacted log may hold fewer
//! records than the offsets its cut spans.

use crate::lineage;
use crate::mirror_record::{Cut, MirrorRecord};
use crate::partition::PartitionManifest;
use crate::reconcile::{LocalLog, Plan, Refusal, Step};

/// Whether the partition's local log may hold records that are not the
/// pinned source's: adopted with records of its own, or stopped.
pub fn at_stake(record: &MirrorRecord) -> bool {
    record.failback_pending || record.stopped_at_offset.is_some()
}

/// The offsets that `plan` (made from `local` and `manifest`) removes from
/// the local log and that the source does not hold as the same history
/// (see the module doc's table).
pub fn records_cut(plan: &Plan, local: &LocalLog<'_>, manifest: &PartitionManifest) -> Option<Cut> {
    let start = local.log_start_offset.max(0);
    let end = local.log_end_offset.max(start);
    let lowest = plan
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::TruncateTo { to, .. } => Some(*to),
            Step::TruncateFullyAndStartAt { cut_at, .. } => Some(*cut_at),
            Step::Keep { .. } | Step::RaiseLogStart { .. } => None,
        })
        .min()?;
    let shared = lineage::divergence_point(
        local.lineage,
        end,
        &manifest.lineage,
        manifest.shipped_end_offset,
    );
    let first = lowest.max(shared).max(start);
    (first < end).then_some(Cut {
        first_offset: first,
        last_offset: end - 1,
    })
}

/// The guard: the cut of a partition whose own records are at stake
/// ([`at_stake`]), refused unless `allowed` (`--allow-truncate`, or the
/// record's `truncate_allowed` from the start that accepted it). `Ok` with
/// the cut that will be made, if any.
pub fn check(
    record: &MirrorRecord,
    plan: &Plan,
    local: &LocalLog<'_>,
    manifest: &PartitionManifest,
    allowed: bool,
) -> Result<Option<Cut>, Refusal> {
    if !at_stake(record) {
        return Ok(None);
    }
    match records_cut(plan, local, manifest) {
        Some(cut) if !allowed => Err(Refusal::WouldCut { cut }),
        other => Ok(other),
    }
}

/// Whether a start that cannot read the source's manifest (so cannot plan
/// the cut) must be refused without `--allow-truncate`: the partition's
/// own records may be cut. Not so for one that holds none ([`at_stake`]
/// false), nor for a stopped one resuming the source it stopped mirroring
/// (`record.source_cluster_id`, as the start re-pinned it) with nothing
/// written since its stop (`log_end` at or below the stop offset).
pub fn unknown_cut_at_stake(record: &MirrorRecord, log_end: i64) -> bool {
    if !at_stake(record) {
        return false;
    }
    let resumes_same_source =
        record.stopped_source_cluster_id.as_deref() == Some(record.source_cluster_id.as_str());
    match record.stopped_at_offset {
        Some(at) if resumes_same_source && !record.failback_pending => log_end > at,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::tests::{lin, topic_id, tp};
    use crate::reconcile::{Surroundings, plan_preparation};

    type Log = &'static [(i32, i64)];
    /// The cut allowed (`Ok`), or refused (`Err`), as (first, last).
    type Want = Result<Option<(i64, i64)>, (i64, i64)>;
    type Row = (&'static str, Came, Log, i64, i64, Log, i64, i64, bool, Want);

    /// How the record says the partition came to PREPARING.
    #[derive(Clone, Copy)]
    enum Came {
        /// A new mirror of an empty dir, or a mirror restarted after FAILED.
        Mirror,
        /// A plain partition with records adopted (failback pending).
        Adopted,
        /// Stopped at this offset while mirroring the same source.
        StoppedSameSource(i64, i32),
        /// Stopped at this offset (LME) while mirroring another cluster.
        StoppedOtherSource(i64, i32),
    }

    fn record(came: Came) -> MirrorRecord {
        let mut r = MirrorRecord::new("src", topic_id(), crate::state::initial().0, 0);
        match came {
            Came::Mirror => {}
            Came::Adopted => r.failback_pending = true,
            Came::StoppedSameSource(at, lme) | Came::StoppedOtherSource(at, lme) => {
                r.stopped_at_offset = Some(at);
                r.lme = Some(lme);
                r.stop_epoch = Some(lme + 1);
                r.stopped_source_cluster_id = Some(match came {
                    Came::StoppedSameSource(..) => "src".into(),
                    _ => "other".into(),
                });
            }
        }
        r
    }

    #[test]
    fn the_cut_of_each_case() {
        // name, how it came, local lineage, local start, local end,
        // source lineage, source log start, shipped end, allowed,
        // expected: Ok(cut) or Err(cut refused)
        #[rustfmt::skip]
        let rows: &[Row] = &[
            ("a mirror's own divergence is never guarded",
                Came::Mirror, &[(0, 0), (3, 90)], 0, 120, &[(0, 0), (2, 90)], 0, 150, false, Ok(None)),
            ("adopted, the source has all of it: nothing cut",
                Came::Adopted, &[(0, 0)], 0, 100, &[(0, 0)], 0, 150, false, Ok(None)),
            ("adopted, the log is ahead of what was shipped (the issue's self-mirror)",
                Came::Adopted, &[(0, 0)], 0, 150, &[(0, 0)], 0, 100, false, Err((100, 149))),
            ("the same, allowed",
                Came::Adopted, &[(0, 0)], 0, 150, &[(0, 0)], 0, 100, true, Ok(Some((100, 149)))),
            ("adopted, histories part at 100 (failback, LME unknown: T = 0, 0..99 fetched again)",
                Came::Adopted, &[(0, 0), (5, 100)], 0, 130, &[(0, 0), (6, 100)], 0, 140, false, Err((100, 129))),
            ("adopted, no epochs here: nothing provably shared",
                Came::Adopted, &[], 0, 20, &[(0, 0)], 0, 50, false, Err((0, 19))),
            ("adopted, the source's log start passed the local end: following retention cuts nothing of ours",
                Came::Adopted, &[(0, 0)], 0, 40, &[(0, 0)], 60, 100, false, Ok(None)),
            ("stopped, no local writes: resuming cuts nothing",
                Came::StoppedSameSource(1200, 0), &[(0, 0), (1, 1200)], 0, 1200, &[(0, 0)], 0, 1200, false, Ok(None)),
            ("stopped, three local writes: resuming cuts them",
                Came::StoppedSameSource(1200, 0), &[(0, 0), (1, 1200)], 0, 1203, &[(0, 0)], 0, 1200, false, Err((1200, 1202))),
            ("stopped, three local writes, the source went on: still only them",
                Came::StoppedSameSource(1200, 0), &[(0, 0), (1, 1200)], 0, 1203, &[(0, 0)], 0, 1500, false, Err((1200, 1202))),
            ("failback: the new primary's history from the stop replaces ours",
                Came::StoppedOtherSource(100, 5), &[(3, 0), (5, 40), (7, 100)], 0, 130, &[(3, 0), (5, 40), (6, 100)], 0, 160, false, Err((100, 129))),
            ("failback allowed",
                Came::StoppedOtherSource(100, 5), &[(3, 0), (5, 40), (7, 100)], 0, 130, &[(3, 0), (5, 40), (6, 100)], 0, 160, true, Ok(Some((100, 129)))),
            ("an empty log has nothing to cut",
                Came::Adopted, &[], 50, 50, &[(0, 0)], 0, 100, false, Ok(None)),
        ];
        for (name, came, local, start, end, remote, src_start, shipped, allowed, want) in rows {
            let r = record(*came);
            let l = lin(local);
            let view = LocalLog {
                topic_id: Some(topic_id()),
                lineage: &l,
                log_start_offset: *start,
                log_end_offset: *end,
            };
            let mut m = PartitionManifest::new("src", &tp(), topic_id());
            m.lineage = lin(remote);
            m.log_start_offset = *src_start;
            m.shipped_end_offset = *shipped;
            m.source_high_watermark = *shipped;
            let here = Surroundings {
                local_cluster_id: Some("here"),
                tiered_storage: false,
            };
            let plan = plan_preparation(&tp(), &r, &m, &view, &here).expect(name);
            let got = check(&r, &plan, &view, &m, *allowed);
            let want = match want {
                Ok(c) => Ok(c.map(|(a, b)| Cut {
                    first_offset: a,
                    last_offset: b,
                })),
                Err((a, b)) => Err(Refusal::WouldCut {
                    cut: Cut {
                        first_offset: *a,
                        last_offset: *b,
                    },
                }),
            };
            assert_eq!(got, want, "{name}: plan {plan:?}");
        }
    }

    #[test]
    fn an_unknown_cut_is_at_stake_unless_nothing_was_written_since_the_stop() {
        // name, how it came, local log end, refused without the manifest
        #[rustfmt::skip]
        let rows: &[(&str, Came, i64, bool)] = &[
            ("a mirror's own records", Came::Mirror, 100, false),
            ("a plain partition adopted", Came::Adopted, 100, true),
            ("stopped, nothing written since", Came::StoppedSameSource(100, 0), 100, false),
            ("stopped, written since", Came::StoppedSameSource(100, 0), 103, true),
            ("stopped, failing back to another source", Came::StoppedOtherSource(100, 0), 100, true),
        ];
        for (name, came, end, want) in rows {
            assert_eq!(unknown_cut_at_stake(&record(*came), *end), *want, "{name}");
        }
    }

    #[test]
    fn the_refusal_names_the_offsets_and_the_flag() {
        let text = Refusal::WouldCut {
            cut: Cut {
                first_offset: 100,
                last_offset: 149,
            },
        }
        .to_string();
        assert!(
            text.contains("offsets 100..149 (50 records) would be cut"),
            "{text}"
        );
        assert!(text.contains("--allow-truncate"), "{text}");
    }
}
