//! The truncation decisions taken from epoch lineages.
//!
//! The lineage itself, [`EpochLineage`] (Kafka's `LeaderEpochFileCache` as a
//! pure value, with its invariants and its strict and Kafka-lenient
//! constructors), lives in [`kafkalog::epoch`] so that the log's epoch cache
//! and a manifest's lineage are one type; it is re-exported here with its
//! [`LineageError`].
//!
//! A lineage does not know its log's end offset (LEO): functions that need it
//! take it as an argument. Entry `i` covers the offsets from its start up to
//! the start of entry `i + 1` (the last entry: up to the LEO). The latest
//! entry may start exactly at the LEO (an epoch with no records yet), as in
//! Kafka.
//!
//! # Decisions
//!
//! - [`divergence_point`]: where a log must be cut so that it is a prefix of
//!   another (Kafka's follower truncation through `OffsetsForLeaderEpoch`).
//!   The applier uses it against a manifest's lineage (source divergence),
//!   and as the second step of failback.
//! - [`truncation_point_for_lme`]: the first step of failback, the table of
//!   `docs/mirroring.md` ("Failback: start again after a stop").
//!
//! Both are total: no input makes them panic, and the offset they return is
//! never negative and never above the local LEO.

pub use kafkalog::epoch::{EpochLineage, LineageError};

/// Where the local log must be cut so that what stays is a prefix of the
/// remote log: the follower truncation of Kafka (KIP-101/KIP-279), with the
/// remote (a manifest's lineage, or the new primary's) in the role of the
/// leader.
///
/// # Algorithm
///
/// 1. The local side asks for its latest epoch `E`. The remote answers with
///    its `end_offset_for(E, remote_leo)`, `(E', remote_end)`. One addition
///    to Kafka: a remote whose every epoch is below `E` answers for its own
///    latest epoch, `(latest, remote_leo)` (a live Kafka leader never sees a
///    follower epoch above its own; a manifest of another cluster can).
/// 2. The local side looks up `end_offset_for(E', local_leo)`,
///    `(E'', local_end)`. If `E'' == E'` both logs know `E'` and the result
///    is `min(local_end, remote_end, local_leo)`.
/// 3. Otherwise the local log does not know `E'`: it is cut to `local_end`
///    (the end of its highest epoch below `E'`) and the exchange starts
///    again at 1 with the shorter log. Each round removes at least one local
///    entry, so this ends.
///
/// A local log that the remote fully contains gets `local_leo` back: nothing
/// to cut. An empty lineage on either side (epochs of the records unknown)
/// gives 0. A negative LEO counts as 0; entries that start after their LEO
/// are ignored.
///
/// # What the result is
///
/// Under Kafka's premise that one epoch has one writer (two logs that both
/// hold records of epoch `e` agree on everything up to the end of `e` in the
/// shorter one), and for two logs that start at the same offset, the result
/// is the largest offset `O <= min(local_leo, remote_leo)` such that both
/// logs have the same epoch at every offset below `O`: the divergence point.
/// The property tests check exactly that against a per-offset model.
///
/// When the log starts differ (retention), this is still Kafka's answer: an
/// epoch below the remote's oldest ends at the remote's oldest start, and
/// what is kept never disagrees with the remote where both hold records.
///
/// Epochs of two clusters are numbered independently, so that premise fails
/// across a failover: failback first cuts everything above the LME with
/// [`truncation_point_for_lme`] and only then calls this.
pub fn divergence_point(
    local: &EpochLineage,
    local_leo: i64,
    remote: &EpochLineage,
    remote_leo: i64,
) -> i64 {
    let mut leo = local_leo.max(0);
    let remote_leo = remote_leo.max(0);
    let mut local = local.held_by(leo);
    let remote = remote.held_by(remote_leo);
    let Some(remote_latest) = remote.latest_epoch() else {
        return 0;
    };
    loop {
        let Some(requested) = local.latest_epoch() else {
            return 0;
        };
        let Some((epoch, remote_end)) =
            remote.end_offset_for(requested.min(remote_latest), remote_leo)
        else {
            // Unreachable: the epoch asked for is >= 0 and <= the remote's latest.
            return 0;
        };
        match local.end_offset_for(epoch, leo) {
            Some((local_epoch, local_end)) if local_epoch == epoch => {
                return local_end.min(remote_end).min(leo).max(0);
            }
            Some((_, local_end)) => {
                let before = local.len();
                leo = leo.min(local_end).max(0);
                local.truncate_from_end(leo);
                if local.len() >= before {
                    // Unreachable (see step 3); never loop without progress.
                    return leo;
                }
            }
            // Unreachable: `epoch` <= the local latest epoch. Kafka's answer
            // for a follower that tracks no epoch there.
            None => return remote_end.min(leo).max(0),
        }
    }
}

/// The failback truncation point `T` for the LME (last mirrored epoch) of the
/// new primary, from the local lineage: the table of `docs/mirroring.md`,
/// "Failback: start again after a stop":
///
/// | LME against the local lineage | T |
/// | --- | --- |
/// | unknown (`None`, or negative: Kafka's `UNDEFINED_EPOCH`), or above every local epoch, or no local epoch at all | 0 (wipe and copy everything) |
/// | equal to the latest local epoch | `local_leo` (nothing cut) |
/// | between two local epochs | start offset of the first local epoch above the LME |
/// | below the oldest local epoch | start offset of the oldest epoch |
///
/// An LME *equal to a local epoch that is not the latest* falls in the
/// "between" row: the local records of that epoch are shared history, so `T`
/// is the start offset of the first local epoch above it (the end of the
/// LME's epoch). Example: local `{3@0, 5@40, 7@100}`, LEO 130, LME 5 gives
/// `T = 100`.
///
/// Records of the LME's epoch that the local log wrote after the new primary
/// stopped (the local side kept writing at that epoch) are not cut here:
/// [`divergence_point`] against the new primary's lineage cuts them next.
///
/// Entries that start after `local_leo` are ignored (they hold no record); a
/// negative `local_leo` counts as 0; the result is in `0..=local_leo`.
pub fn truncation_point_for_lme(lme: Option<i32>, local: &EpochLineage, local_leo: i64) -> i64 {
    let leo = local_leo.max(0);
    let Some(lme) = lme.filter(|&e| e >= 0) else {
        return 0;
    };
    let held = local.held_by(leo);
    let Some(latest) = held.latest_epoch() else {
        return 0;
    };
    if lme > latest {
        return 0;
    }
    if lme == latest {
        return leo;
    }
    let above = held.entries().partition_point(|e| e.epoch <= lme);
    held.entries()
        .get(above)
        .map_or(0, |e| e.start_offset.clamp(0, leo))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::checkpoint::EpochEntry;
    use proptest::prelude::*;

    const UNDEFINED_EPOCH: i32 = -1;

    fn lineage(pairs: &[(i32, i64)]) -> EpochLineage {
        EpochLineage::from_entries(pairs.iter().map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        }))
        .expect("valid lineage")
    }

    /// The epoch of every offset below `leo` (`None` below the oldest entry).
    fn per_offset(l: &EpochLineage, leo: i64) -> Vec<Option<i32>> {
        (0..leo).map(|o| l.epoch_for_offset(o)).collect()
    }

    // ---- The spec's LME table ---------------------------------------------

    #[test]
    fn lme_table_every_row() {
        // A: {3@0, 5@40, 7@100}, LEO 130 (the spec's worked example).
        let a = lineage(&[(3, 0), (5, 40), (7, 100)]);
        let rows: &[(&str, Option<i32>, i64)] = &[
            ("unknown", None, 0),
            ("unknown: UNDEFINED_EPOCH", Some(UNDEFINED_EPOCH), 0),
            ("above every local epoch", Some(8), 0),
            ("far above every local epoch", Some(i32::MAX), 0),
            ("equal to the latest epoch", Some(7), 130),
            ("between 5 and 7", Some(6), 100),
            ("equal to non-latest 5: the between row", Some(5), 100),
            ("between 3 and 5", Some(4), 40),
            (
                "equal to non-latest 3 (the oldest): the between row",
                Some(3),
                40,
            ),
        ];
        for &(row, lme, want) in rows {
            assert_eq!(truncation_point_for_lme(lme, &a, 130), want, "{row}");
        }
        // Below the oldest local epoch: the start of the oldest (log start 10).
        let trimmed = lineage(&[(3, 10), (5, 40), (7, 100)]);
        assert_eq!(truncation_point_for_lme(Some(2), &trimmed, 130), 10);
        assert_eq!(truncation_point_for_lme(Some(0), &trimmed, 130), 10);
        // No local epoch at all.
        assert_eq!(
            truncation_point_for_lme(Some(5), &EpochLineage::new(), 0),
            0
        );
        assert_eq!(
            truncation_point_for_lme(Some(5), &EpochLineage::new(), 50),
            0
        );
        // The latest entry holds no record yet (it starts at the LEO): still
        // "equal to the latest".
        let fresh = lineage(&[(3, 0), (5, 40), (7, 130)]);
        assert_eq!(truncation_point_for_lme(Some(7), &fresh, 130), 130);
        assert_eq!(truncation_point_for_lme(Some(5), &fresh, 130), 130);
        // Entries past the LEO hold no record and are ignored.
        let odd = lineage(&[(3, 0), (5, 40), (7, 200)]);
        assert_eq!(truncation_point_for_lme(Some(5), &odd, 130), 130);
        assert_eq!(truncation_point_for_lme(Some(7), &odd, 130), 0);
        // A negative LEO counts as 0.
        assert_eq!(truncation_point_for_lme(Some(7), &a, -5), 0);
    }

    #[test]
    fn worked_example_failback_then_identical() {
        // A: {3@0, 5@40, 7@100}, LEO 130. B stopped at 100 with LME 5 and
        // wrote at epochs >= 6 since.
        let mut a = lineage(&[(3, 0), (5, 40), (7, 100)]);
        let b = lineage(&[(3, 0), (5, 40), (6, 100), (8, 150)]);
        let (a_leo, b_leo) = (130, 180);
        let t = truncation_point_for_lme(Some(5), &a, a_leo);
        assert_eq!(t, 100);
        a.truncate_from_end(t);
        let d = divergence_point(&a, t, &b, b_leo);
        assert_eq!(d, 100, "the follower step cuts nothing more");
        // A copies B's records from D on (assigning their epochs).
        for entry in b.entries().iter().filter(|e| e.start_offset >= d) {
            a.assign(entry.epoch, entry.start_offset).expect("assign");
        }
        assert_eq!(a, b);
        assert_eq!(per_offset(&a, b_leo), per_offset(&b, b_leo));
    }

    #[test]
    fn behaviour_5_failback_with_a_ahead_at_a_newer_epoch() {
        let mut a = lineage(&[(3, 0), (5, 40), (7, 100)]);
        let b = lineage(&[(3, 0), (5, 40), (6, 100)]);
        let t = truncation_point_for_lme(Some(5), &a, 130);
        assert_eq!(t, 100, "cut to the end of the LME");
        a.truncate_from_end(t);
        assert_eq!(divergence_point(&a, t, &b, 150), 100);
    }

    #[test]
    fn behaviour_5_failback_where_a_kept_writing_at_the_lme_epoch() {
        // A went on writing at epoch 5 up to 130 after B stopped at 100.
        let a = lineage(&[(3, 0), (5, 40)]);
        let b = lineage(&[(3, 0), (5, 40), (6, 100)]);
        let t = truncation_point_for_lme(Some(5), &a, 130);
        assert_eq!(t, 130, "the LME step cuts nothing");
        assert_eq!(
            divergence_point(&a, t, &b, 150),
            100,
            "the follower step cuts to B's end offset for epoch 5"
        );
        assert_eq!(b.end_offset_for(5, 150), Some((5, 100)));
    }

    #[test]
    fn behaviour_6_unknown_lme_cuts_everything() {
        let a = lineage(&[(3, 0), (5, 40), (7, 100)]);
        assert_eq!(truncation_point_for_lme(None, &a, 130), 0);
    }

    #[test]
    fn behaviour_8_source_unclean_truncation() {
        // The destination holds 0..100 at {0@0, 2@30, 3@70}; the source lost
        // 90..100 in an unclean election and wrote at epoch 4 from 90.
        let dest = lineage(&[(0, 0), (2, 30), (3, 70)]);
        let source = lineage(&[(0, 0), (2, 30), (3, 70), (4, 90)]);
        assert_eq!(divergence_point(&dest, 100, &source, 120), 90);
    }

    #[test]
    fn divergence_point_cases() {
        let l = |p: &[(i32, i64)]| lineage(p);
        type Log = &'static [(i32, i64)];
        // name, local lineage, local LEO, remote lineage, remote LEO, result
        #[rustfmt::skip]
        let rows: &[(&str, Log, i64, Log, i64, i64)] = &[
            ("identical",
                &[(0, 0), (2, 30)], 50, &[(0, 0), (2, 30)], 50, 50),
            ("local behind: nothing to cut",
                &[(0, 0), (2, 30)], 40, &[(0, 0), (2, 30), (5, 60)], 90, 40),
            ("local a prefix in an older epoch",
                &[(0, 0)], 20, &[(0, 0), (2, 30)], 50, 20),
            ("remote behind in the same epoch",
                &[(0, 0), (2, 30)], 50, &[(0, 0), (2, 30)], 35, 35),
            ("local latest epoch unknown to the remote",
                &[(0, 0), (3, 30)], 50, &[(0, 0), (2, 30)], 50, 30),
            ("local above every remote epoch",
                &[(0, 0), (7, 50)], 80, &[(0, 0), (6, 60)], 90, 50),
            ("remote epoch unknown locally: two rounds",
                &[(0, 0), (2, 10), (4, 20)], 40, &[(0, 0), (3, 15), (5, 25)], 40, 10),
            ("nothing shared",
                &[(1, 0)], 10, &[(2, 0)], 10, 0),
            ("empty local log",
                &[], 0, &[(0, 0)], 10, 0),
            ("empty remote log",
                &[(0, 0)], 10, &[], 0, 0),
            ("local epochs unknown",
                &[], 10, &[(0, 0)], 10, 0),
            ("local latest epoch holds no record",
                &[(0, 0), (2, 50)], 50, &[(0, 0), (1, 50)], 80, 50),
            ("remote latest epoch holds no record",
                &[(0, 0)], 80, &[(0, 0), (1, 50)], 50, 50),
            ("entries past the LEO are ignored",
                &[(0, 0), (9, 90)], 50, &[(0, 0)], 80, 50),
            ("negative LEOs count as 0",
                &[(0, 0)], -3, &[(0, 0)], 10, 0),
            // Retention: a log start moved, on one side or the other.
            ("remote trimmed past the local log",
                &[(3, 0), (5, 40)], 100, &[(7, 220)], 300, 100),
            ("remote trimmed inside the shared epoch",
                &[(3, 0), (5, 40)], 100, &[(5, 60), (7, 80)], 300, 80),
            ("local trimmed, remote not",
                &[(5, 60), (7, 80)], 100, &[(3, 0), (5, 40), (6, 90)], 300, 80),
        ];
        for &(name, local, local_leo, remote, remote_leo, want) in rows {
            assert_eq!(
                divergence_point(&l(local), local_leo, &l(remote), remote_leo),
                want,
                "{name}"
            );
        }
    }

    // ---- Property tests against per-offset models ----------------------

    /// A log as segments `(epoch, record count)`, epochs increasing.
    type Segments = Vec<(i32, i64)>;

    /// The lineage (built by `assign`, as a log appends) and the epoch of
    /// every record.
    fn build(segments: &[(i32, i64)]) -> (EpochLineage, Vec<i32>) {
        let mut lineage = EpochLineage::new();
        let mut epochs = Vec::new();
        for &(epoch, count) in segments {
            let at = i64::try_from(epochs.len()).expect("small");
            lineage.assign(epoch, at).expect("valid assign");
            epochs.extend(std::iter::repeat_n(
                epoch,
                usize::try_from(count).expect("small"),
            ));
        }
        (lineage, epochs)
    }

    fn leo(epochs: &[i32]) -> i64 {
        i64::try_from(epochs.len()).expect("small")
    }

    /// Appends a segment, merging it into the last one of the same epoch.
    fn push(segments: &mut Segments, epoch: i32, count: i64) {
        match segments.last_mut() {
            Some(last) if last.0 == epoch => last.1 += count,
            _ => segments.push((epoch, count)),
        }
    }

    /// Increasing epochs from steps: `first + sum(steps[..=i]) * stride + shift`.
    fn epochs_from(base: i32, stride: i32, shift: i32, steps: &[(i32, i64)]) -> Segments {
        let mut out = Vec::new();
        let mut acc = 0;
        for &(step, count) in steps {
            acc += step;
            out.push((base + acc * stride + shift, count));
        }
        out
    }

    /// The brute-force divergence point: the first offset where the records'
    /// epochs differ, capped at the shorter log.
    fn model_divergence(a: &[i32], b: &[i32]) -> i64 {
        let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        i64::try_from(common).expect("small")
    }

    /// Two logs under Kafka's premise (one writer per epoch): a shared
    /// history; then each side may go on in the last shared epoch (one of the
    /// two extensions is a prefix of the other), then writes new epochs,
    /// disjoint between the sides (local even, remote odd).
    fn two_logs() -> impl Strategy<Value = (Segments, Segments)> {
        let seg = (1..4i32, 0..6i64);
        (
            proptest::collection::vec(seg.clone(), 0..5),
            0..6i64,
            0..6i64,
            proptest::collection::vec(seg.clone(), 0..4),
            proptest::collection::vec(seg, 0..4),
        )
            .prop_map(|(shared, ext_local, ext_remote, local_new, remote_new)| {
                let shared = epochs_from(-1, 1, 0, &shared);
                let base = shared.last().map_or(-1, |s| s.0);
                let mut local = shared.clone();
                let mut remote = shared;
                if let Some(&(last, _)) = local.last() {
                    push(&mut local, last, ext_local);
                    push(&mut remote, last, ext_remote);
                }
                for (e, n) in epochs_from(base, 2, 0, &local_new) {
                    push(&mut local, e, n);
                }
                for (e, n) in epochs_from(base, 2, -1, &remote_new) {
                    push(&mut remote, e, n);
                }
                (local, remote)
            })
    }

    /// Any one log: increasing epochs from 0, some segments possibly empty.
    fn one_log() -> impl Strategy<Value = Segments> {
        proptest::collection::vec((1..4i32, 0..8i64), 0..7)
            .prop_map(|steps| epochs_from(-1, 1, 0, &steps))
    }

    proptest! {
        #[test]
        fn divergence_point_matches_the_per_offset_model((local, remote) in two_logs()) {
            let (l, a) = build(&local);
            let (r, b) = build(&remote);
            let want = model_divergence(&a, &b);
            prop_assert_eq!(divergence_point(&l, leo(&a), &r, leo(&b)), want);
            // Symmetric: the same point from the other side.
            prop_assert_eq!(divergence_point(&r, leo(&b), &l, leo(&a)), want);
        }

        #[test]
        fn divergence_point_with_trimmed_log_starts(
            (local, remote) in two_logs(),
            local_start in 0..=100i64,
            remote_start in 0..=100i64,
        ) {
            let (mut l, a) = build(&local);
            let (mut r, b) = build(&remote);
            let full = model_divergence(&a, &b);
            let (sl, sr) = (local_start * leo(&a) / 100, remote_start * leo(&b) / 100);
            l.truncate_from_start(sl);
            r.truncate_from_start(sr);
            let d = divergence_point(&l, leo(&a), &r, leo(&b));
            prop_assert!((0..=leo(&a).min(leo(&b))).contains(&d));
            // Never keeps a record that disagrees with the remote where both
            // hold records.
            for x in sl.max(sr)..d {
                let x = usize::try_from(x).expect("small");
                prop_assert_eq!(a[x], b[x], "offset {} kept but divergent", x);
            }
            // While both logs still hold some shared history, retention
            // changes nothing.
            if sl.max(sr) < full {
                prop_assert_eq!(d, full);
            }
        }

        #[test]
        fn lme_truncation_matches_the_per_offset_model(
            segments in one_log(),
            lme in proptest::option::of(-2..20i32),
        ) {
            let (l, a) = build(&segments);
            let leo = leo(&a);
            // Model: wipe unless the LME is a known epoch at or below the
            // latest; else cut at the first record whose epoch is above it.
            let want = match (lme, l.latest_epoch()) {
                (Some(lme), Some(latest)) if lme >= 0 && lme <= latest => a
                    .iter()
                    .position(|&e| e > lme)
                    .map_or(leo, |p| i64::try_from(p).expect("small")),
                _ => 0,
            };
            prop_assert_eq!(truncation_point_for_lme(lme, &l, leo), want);
        }

        #[test]
        fn failback_leaves_a_prefix_of_the_new_primary(
            shared in proptest::collection::vec((1..4i32, 1..6i64), 1..5),
            a_ext in 0..6i64,
            a_new in proptest::collection::vec((1..4i32, 0..6i64), 0..4),
            b_new in proptest::collection::vec((1..4i32, 0..6i64), 0..4),
        ) {
            // B mirrored A up to `stop`, then stopped with LME = the last
            // shared epoch and wrote at epochs > LME. A went on at the LME's
            // epoch and at epochs > LME numbered independently (they may clash
            // with B's).
            let shared = epochs_from(-1, 1, 0, &shared);
            let lme = shared.last().map_or(0, |s| s.0);
            let stop: i64 = shared.iter().map(|s| s.1).sum();
            let mut a_segs = shared.clone();
            push(&mut a_segs, lme, a_ext);
            a_segs.extend(epochs_from(lme, 1, 0, &a_new));
            let mut b_segs = shared;
            b_segs.extend(epochs_from(lme, 1, 0, &b_new));
            let (mut a_lineage, a) = build(&a_segs);
            let (b_lineage, b) = build(&b_segs);

            let t = truncation_point_for_lme(Some(lme), &a_lineage, leo(&a));
            prop_assert!((stop..=leo(&a)).contains(&t));
            a_lineage.truncate_from_end(t);
            let d = divergence_point(&a_lineage, t, &b_lineage, leo(&b));
            prop_assert_eq!(d, stop);
            let kept = usize::try_from(d).expect("small");
            prop_assert_eq!(&a[..kept], &b[..kept]);
        }

        #[test]
        fn decisions_are_total_on_any_lineage(
            a in proptest::collection::vec((-2..12i32, -2..60i64), 0..10),
            b in proptest::collection::vec((-2..12i32, -2..60i64), 0..10),
            a_leo in -2..70i64,
            b_leo in -2..70i64,
            lme in proptest::option::of(-2..14i32),
        ) {
            // Any checkpoint loads as some valid lineage: that covers every
            // lineage a log, a manifest or a range can hold.
            let load = |v: &[(i32, i64)]| {
                EpochLineage::from_checkpoint_entries(
                    v.iter().map(|&(epoch, start_offset)| EpochEntry { epoch, start_offset }),
                )
                .0
            };
            let (a, b) = (load(&a), load(&b));
            let d = divergence_point(&a, a_leo, &b, b_leo);
            prop_assert!((0..=a_leo.max(0)).contains(&d), "{}", d);
            let t = truncation_point_for_lme(lme, &a, a_leo);
            prop_assert!((0..=a_leo.max(0)).contains(&t), "{}", t);
        }
    }
}
