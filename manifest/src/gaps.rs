//! Gaps: data the mirror never received (see `docs/mirroring.md`, "Gaps").
//!
//! When records the shipper never shipped are gone from the source (its
//! retention, or an unclean truncation, passed the shipped end, typically
//! while the shipper was down), no mirror can have them. That is a **gap**,
//! and it is never silent: the shipper records it in the partition's
//! manifest ([`PartitionManifest::gaps`](crate::partition::PartitionManifest::gaps)),
//! every later version carries it forward (it lives in the manifest object
//! itself, never in a sealed page), and both services show it until an
//! operator acknowledges that one gap.
//!
//! [`detect`] decides, from what the previous manifest version recorded
//! ([`Recorded`]) and what the source holds now ([`SourceNow`]), whether
//! there is a gap and which offsets it covers. It is pure and claims only
//! what those values prove:
//!
//! - **Retention** (`log_start > shipped_end`): offsets
//!   `[shipped_end, log_start - 1]` are lost (Kafka's retention deletes only
//!   segments below the high watermark, so they were committed). Their
//!   epochs lie between the manifest's latest epoch and the source's epoch
//!   at its new log start (when the source's checkpoint still says).
//!   A log start equal to the shipped end loses nothing.
//! - **Tiered source** (`remote_log_start` is known): offsets past local
//!   retention that the source still holds in remote storage are not lost;
//!   they are recorded with cause [`GapCause::RemoteStorage`] (the mirror
//!   does not have them, the source does) and never count as lost offsets.
//! - **Unclean truncation** (`cut` below the shipped end: the source's
//!   lineage diverged from what was shipped): the shipper cuts the manifest
//!   back to `cut`, and the applier cuts its copy too (behaviour 8); the
//!   offsets `[cut, shipped_end)` were received and are not a gap. What the
//!   source had committed beyond the shipped end
//!   (`[shipped_end, recorded_hw - 1]`) is lost: it lay beyond the
//!   divergence point, which the new leader did not have. Those offsets were
//!   written at epochs from the manifest's latest epoch up to the epoch
//!   before the one the source now has at `cut`, and they are reused from
//!   that epoch on ([`Gap::reused_from_epoch`]).
//! - A new epoch that starts between the shipped end and the recorded high
//!   watermark, with the shipped history intact, proves nothing: a clean
//!   leader election before that high watermark was recorded looks the same
//!   (the manifest's lineage stops at the shipped end). No gap is claimed.
//!
//! Identity of a gap: (`first_offset`, `last_offset`, `cause`); merging
//! ([`merge`]) never adds the same gap twice and never drops one, so a gap
//! list only grows, and an acknowledgement names one gap by its offsets.

use kafkalog::epoch::EpochLineage;
use serde::{Deserialize, Serialize};

/// Why a gap exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapCause {
    /// The source's retention (or `DeleteRecords`) passed the shipped end.
    Retention,
    /// The source truncated committed records it had not shipped (an
    /// unclean leader election).
    UncleanTruncation,
    /// Past local retention on a tiered source: the source still holds the
    /// offsets in remote storage; not lost, but the mirror lacks them.
    RemoteStorage,
}

impl GapCause {
    /// Its stable name (`retention`, `unclean_truncation`, `remote_storage`).
    pub fn as_str(self) -> &'static str {
        match self {
            GapCause::Retention => "retention",
            GapCause::UncleanTruncation => "unclean_truncation",
            GapCause::RemoteStorage => "remote_storage",
        }
    }
}

impl std::fmt::Display for GapCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The leader epochs lost records were written at, as far as proven:
/// `at_least..=at_most` (`at_most` unknown when `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochSpan {
    /// The lowest epoch they can have.
    pub at_least: i32,
    /// The highest epoch they can have, when known.
    pub at_most: Option<i32>,
}

impl EpochSpan {
    /// The one epoch, when the span proves it.
    pub fn exact(&self) -> Option<i32> {
        (self.at_most == Some(self.at_least)).then_some(self.at_least)
    }
}

impl std::fmt::Display for EpochSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.exact(), self.at_most) {
            (Some(e), _) => write!(f, "epoch {e}"),
            (None, Some(hi)) => write!(f, "epochs {}-{hi}", self.at_least),
            (None, None) => write!(f, "epochs >= {}", self.at_least),
        }
    }
}

/// One gap: offsets the mirror never received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// First offset lost.
    pub first_offset: i64,
    /// Last offset lost.
    pub last_offset: i64,
    /// Why.
    pub cause: GapCause,
    /// The epochs the lost records were written at, as far as proven
    /// (`None`: nothing proven).
    pub lost_epochs: Option<EpochSpan>,
    /// After an unclean truncation, the leader epoch from which the source
    /// reuses these offsets for other records: `(epoch, offset)` names a
    /// record, the offset alone does not.
    pub reused_from_epoch: Option<i32>,
    /// When it was detected (ms since the epoch).
    pub detected_at_ms: i64,
    /// When an operator acknowledged it on the shipper side (`shipper gaps
    /// ack`), if so. The applier's acknowledgements are its own, kept at the
    /// destination.
    #[serde(default)]
    pub acknowledged_at_ms: Option<i64>,
}

impl Gap {
    /// How many offsets it covers.
    pub fn offsets(&self) -> u64 {
        let n = self
            .last_offset
            .saturating_sub(self.first_offset)
            .saturating_add(1);
        u64::try_from(n).unwrap_or(0)
    }

    /// The total of [`Gap::offsets`] over `gaps`, never
    /// overflowing (a damaged record cannot make a metric panic).
    pub fn total<'a>(gaps: impl IntoIterator<Item = &'a Gap>) -> u64 {
        gaps.into_iter()
            .fold(0u64, |n, g| n.saturating_add(g.offsets()))
    }

    /// True when the records are gone from the source (not
    /// [`GapCause::RemoteStorage`]): the gaps `once` exits 1 for.
    pub fn is_loss(&self) -> bool {
        self.cause != GapCause::RemoteStorage
    }

    /// Whether this gap is the one named by `first..=last`.
    pub fn is(&self, first: i64, last: i64) -> bool {
        self.first_offset == first && self.last_offset == last
    }

    /// `first-last`, as operators name a gap.
    pub fn offsets_text(&self) -> String {
        format!("{}-{}", self.first_offset, self.last_offset)
    }
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "offsets {}-{} ({} offsets, {}",
            self.first_offset,
            self.last_offset,
            self.offsets(),
            self.cause
        )?;
        if let Some(e) = self.lost_epochs {
            write!(f, ", {e}")?;
        }
        if let Some(e) = self.reused_from_epoch {
            write!(f, ", reused from epoch {e}")?;
        }
        f.write_str(")")
    }
}

/// What the previous manifest version recorded.
#[derive(Debug, Clone, Copy)]
pub struct Recorded<'a> {
    /// Its shipped end offset.
    pub shipped_end: i64,
    /// The source high watermark it was cut at.
    pub high_watermark: i64,
    /// Its lineage (up to the shipped end).
    pub lineage: &'a EpochLineage,
}

/// What the source holds now.
#[derive(Debug, Clone, Copy)]
pub struct SourceNow<'a> {
    /// The first offset the source holds locally.
    pub log_start: i64,
    /// On a tiered source, the first offset its remote storage holds
    /// (`None`: not tiered, or unknown).
    pub remote_log_start: Option<i64>,
    /// The source's leader epoch lineage.
    pub lineage: &'a EpochLineage,
    /// Where the source diverged from the shipped history (an unclean
    /// truncation), when below the shipped end.
    pub cut: Option<i64>,
}

/// The gaps between what was recorded and what the source holds now
/// (empty: none). See the module docs for what each case proves.
pub fn detect(recorded: &Recorded<'_>, now: &SourceNow<'_>, at_ms: i64) -> Vec<Gap> {
    let mut gaps = Vec::new();
    let shipped_end = recorded.shipped_end;
    let last_shipped_epoch = recorded.lineage.latest_epoch();
    if let Some(cut) = now.cut.filter(|&c| c < shipped_end)
        && recorded.high_watermark > shipped_end
    {
        let reused = now.lineage.epoch_for_offset(cut);
        gaps.push(Gap {
            first_offset: shipped_end,
            last_offset: recorded.high_watermark - 1,
            cause: GapCause::UncleanTruncation,
            lost_epochs: span(last_shipped_epoch, reused.map(|e| e - 1)),
            reused_from_epoch: reused,
            detected_at_ms: at_ms,
            acknowledged_at_ms: None,
        });
    }
    // Retention: from what the cut leaves shipped (a cut lowers the end).
    let end = now.cut.map_or(shipped_end, |c| c.min(shipped_end));
    let covered = gaps
        .first()
        .map_or(end, |g| g.last_offset.saturating_add(1))
        .max(end);
    if now.log_start > covered {
        let remote = now
            .remote_log_start
            .map(|r| r.clamp(covered, now.log_start));
        let lost_end = remote.unwrap_or(now.log_start);
        let epochs = span(
            last_shipped_epoch,
            now.lineage.epoch_for_offset(now.log_start),
        );
        if lost_end > covered {
            gaps.push(Gap {
                first_offset: covered,
                last_offset: lost_end - 1,
                cause: GapCause::Retention,
                lost_epochs: epochs,
                reused_from_epoch: None,
                detected_at_ms: at_ms,
                acknowledged_at_ms: None,
            });
        }
        if now.log_start > lost_end {
            gaps.push(Gap {
                first_offset: lost_end,
                last_offset: now.log_start - 1,
                cause: GapCause::RemoteStorage,
                lost_epochs: None,
                reused_from_epoch: None,
                detected_at_ms: at_ms,
                acknowledged_at_ms: None,
            });
        }
    }
    gaps
}

fn span(at_least: Option<i32>, at_most: Option<i32>) -> Option<EpochSpan> {
    let at_least = at_least?;
    Some(EpochSpan {
        at_least,
        at_most: at_most.filter(|&hi| hi >= at_least),
    })
}

/// Adds to `known` each gap of `new` it does not hold yet (same offsets and
/// cause), keeping order by first offset. Returns the gaps added.
pub fn merge(known: &mut Vec<Gap>, new: impl IntoIterator<Item = Gap>) -> Vec<Gap> {
    let mut added = Vec::new();
    for g in new {
        let present = known.iter().any(|k| {
            k.first_offset == g.first_offset && k.last_offset == g.last_offset && k.cause == g.cause
        });
        if !present {
            known.push(g.clone());
            added.push(g);
        }
    }
    known.sort_by_key(|g| (g.first_offset, g.last_offset));
    added
}

/// The parts of `first..=last` that no gap of `known` covers, in order: an
/// applier's own observation (its log start jumped past its log end) that
/// the manifest does not already record (an older shipper recorded none).
pub fn uncovered(first: i64, last: i64, known: &[Gap]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut at = first;
    let mut sorted: Vec<&Gap> = known.iter().collect();
    sorted.sort_by_key(|g| g.first_offset);
    for g in sorted {
        if at > last {
            break;
        }
        if g.last_offset < at || g.first_offset > last {
            continue;
        }
        if g.first_offset > at {
            out.push((at, g.first_offset - 1));
        }
        at = at.max(g.last_offset.saturating_add(1));
    }
    if at <= last {
        out.push((at, last));
    }
    out
}

/// The GAPS cell of a status table: `-` without gaps, else each gap's
/// offsets with a mark: `!` not acknowledged, `(acked)`, `(remote)` for
/// offsets in a tiered source's remote storage. `acked` says whether a
/// gap is acknowledged (each side keeps its own acknowledgements).
pub fn cell<'a>(gaps: impl IntoIterator<Item = (&'a Gap, bool)>) -> String {
    let parts: Vec<String> = gaps
        .into_iter()
        .map(|(g, acked)| match (g.is_loss(), acked) {
            (false, _) => format!("{} (remote)", g.offsets_text()),
            (true, true) => format!("{} (acked)", g.offsets_text()),
            (true, false) => format!("{}!", g.offsets_text()),
        })
        .collect();
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(",")
    }
}

/// What an acknowledgement naming `first..=last` says when no gap of
/// `gaps` has those offsets: `has no gap at offsets A-B; its gaps: ...`.
pub fn no_such_gap(first: i64, last: i64, gaps: &[Gap]) -> String {
    let list: Vec<String> = gaps.iter().map(Gap::offsets_text).collect();
    format!(
        "has no gap at offsets {first}-{last}; its gaps: {}",
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        }
    )
}

/// Parses `FIRST-LAST` (an operator's name for a gap).
pub fn parse_offsets(text: &str) -> Result<(i64, i64), String> {
    let bad = || format!("`{text}` is not FIRST-LAST (two offsets, e.g. 100-229)");
    let (a, b) = text.trim().split_once('-').ok_or_else(bad)?;
    let first: i64 = a.trim().parse().map_err(|_| bad())?;
    let last: i64 = b.trim().parse().map_err(|_| bad())?;
    if first < 0 || last < first {
        return Err(format!(
            "`{text}`: the first offset must be >= 0 and <= the last"
        ));
    }
    Ok((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::checkpoint::EpochEntry;

    fn l(pairs: &[(i32, i64)]) -> EpochLineage {
        EpochLineage::from_entries(pairs.iter().map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        }))
        .expect("lineage")
    }

    /// (offsets, cause, epochs at least/at most, reused from)
    type Expect = (i64, i64, GapCause, Option<(i32, Option<i32>)>, Option<i32>);

    fn brief(gaps: &[Gap]) -> Vec<Expect> {
        gaps.iter()
            .map(|g| {
                (
                    g.first_offset,
                    g.last_offset,
                    g.cause,
                    g.lost_epochs.map(|e| (e.at_least, e.at_most)),
                    g.reused_from_epoch,
                )
            })
            .collect()
    }

    #[test]
    fn the_gap_table() {
        use GapCause::*;
        // (case, shipped end, recorded HW, recorded lineage, source log
        // start, remote log start, source lineage, cut, expected)
        #[allow(clippy::type_complexity)]
        let table: Vec<(
            &str,
            i64,
            i64,
            EpochLineage,
            i64,
            Option<i64>,
            EpochLineage,
            Option<i64>,
            Vec<Expect>,
        )> = vec![
            (
                "retention passed the shipped end",
                100,
                100,
                l(&[(0, 0), (2, 30)]),
                230,
                None,
                l(&[(2, 230)]),
                None,
                vec![(100, 229, Retention, Some((2, Some(2))), None)],
            ),
            (
                "log start equal to the shipped end: no gap",
                100,
                100,
                l(&[(0, 0)]),
                100,
                None,
                l(&[(0, 100)]),
                None,
                vec![],
            ),
            (
                "log start below the shipped end: no gap",
                100,
                150,
                l(&[(0, 0)]),
                40,
                None,
                l(&[(0, 40)]),
                None,
                vec![],
            ),
            (
                "retention across a leader change: epochs between the two",
                100,
                100,
                l(&[(1, 0)]),
                300,
                None,
                l(&[(4, 300)]),
                None,
                vec![(100, 299, Retention, Some((1, Some(4))), None)],
            ),
            (
                "retention with the source's checkpoint gone: a lower bound only",
                100,
                100,
                l(&[(1, 0)]),
                300,
                None,
                l(&[]),
                None,
                vec![(100, 299, Retention, Some((1, None)), None)],
            ),
            (
                "unclean truncation below the shipped end with committed data beyond it",
                100,
                130,
                l(&[(0, 0), (3, 70)]),
                0,
                None,
                l(&[(0, 0), (5, 90)]),
                Some(90),
                vec![(100, 129, UncleanTruncation, Some((3, Some(4))), Some(5))],
            ),
            (
                "unclean truncation: the old epoch is proven when the new one follows it",
                100,
                130,
                l(&[(0, 0), (4, 70)]),
                0,
                None,
                l(&[(0, 0), (5, 90)]),
                Some(90),
                vec![(100, 129, UncleanTruncation, Some((4, Some(4))), Some(5))],
            ),
            (
                "unclean truncation with everything committed shipped: the cut is followed, no gap",
                100,
                100,
                l(&[(0, 0), (3, 70)]),
                0,
                None,
                l(&[(0, 0), (5, 90)]),
                Some(90),
                vec![],
            ),
            (
                "a new epoch between the shipped end and the recorded HW proves nothing",
                100,
                130,
                l(&[(0, 0)]),
                0,
                None,
                l(&[(0, 0), (1, 110)]),
                None,
                vec![],
            ),
            (
                "unclean truncation and retention together",
                100,
                130,
                l(&[(0, 0)]),
                200,
                None,
                l(&[(5, 200)]),
                Some(90),
                vec![
                    (100, 129, UncleanTruncation, Some((0, None)), None),
                    (130, 199, Retention, Some((0, Some(5))), None),
                ],
            ),
            (
                "tiered source: past local retention but in remote storage, not lost",
                100,
                100,
                l(&[(0, 0)]),
                230,
                Some(50),
                l(&[(0, 50)]),
                None,
                vec![(100, 229, RemoteStorage, None, None)],
            ),
            (
                "tiered source whose remote retention also passed the shipped end",
                100,
                100,
                l(&[(0, 0)]),
                230,
                Some(150),
                l(&[(0, 150)]),
                None,
                vec![
                    (100, 149, Retention, Some((0, Some(0))), None),
                    (150, 229, RemoteStorage, None, None),
                ],
            ),
        ];
        for (case, end, hw, rec, ls, remote, src, cut, expected) in table {
            let gaps = detect(
                &Recorded {
                    shipped_end: end,
                    high_watermark: hw,
                    lineage: &rec,
                },
                &SourceNow {
                    log_start: ls,
                    remote_log_start: remote,
                    lineage: &src,
                    cut,
                },
                7,
            );
            assert_eq!(brief(&gaps), expected, "{case}");
            assert!(gaps.iter().all(|g| g.detected_at_ms == 7), "{case}");
        }
    }

    #[test]
    fn only_remote_storage_is_not_a_loss() {
        let g = |cause| Gap {
            first_offset: 1,
            last_offset: 3,
            cause,
            lost_epochs: None,
            reused_from_epoch: None,
            detected_at_ms: 0,
            acknowledged_at_ms: None,
        };
        assert!(g(GapCause::Retention).is_loss());
        assert!(g(GapCause::UncleanTruncation).is_loss());
        assert!(!g(GapCause::RemoteStorage).is_loss());
        assert_eq!(g(GapCause::Retention).offsets(), 3);
        // Damaged values saturate, never overflow.
        let mut huge = g(GapCause::Retention);
        huge.first_offset = i64::MIN;
        huge.last_offset = i64::MAX;
        assert_eq!(huge.offsets(), i64::MAX as u64);
        assert_eq!(Gap::total([&huge, &huge, &huge]), u64::MAX);
        let mut backwards = g(GapCause::Retention);
        backwards.first_offset = 10;
        assert_eq!(backwards.offsets(), 0);
        assert_eq!(
            g(GapCause::Retention).to_string(),
            "offsets 1-3 (3 offsets, retention)"
        );
    }

    #[test]
    fn merging_never_duplicates_or_drops_a_gap() {
        let g = |a, b| Gap {
            first_offset: a,
            last_offset: b,
            cause: GapCause::Retention,
            lost_epochs: None,
            reused_from_epoch: None,
            detected_at_ms: 0,
            acknowledged_at_ms: None,
        };
        let mut known = vec![g(100, 229)];
        let mut acked = g(100, 229);
        acked.acknowledged_at_ms = Some(5);
        known[0] = acked.clone();
        // The same gap detected again keeps its acknowledgement.
        assert!(merge(&mut known, [g(100, 229)]).is_empty());
        assert_eq!(known, vec![acked.clone()]);
        let added = merge(&mut known, [g(500, 599), g(300, 399)]);
        assert_eq!(added.len(), 2);
        let firsts: Vec<i64> = known.iter().map(|g| g.first_offset).collect();
        assert_eq!(firsts, [100, 300, 500]);
    }

    #[test]
    fn an_observation_counts_only_what_no_recorded_gap_covers() {
        let g = |a, b| Gap {
            first_offset: a,
            last_offset: b,
            cause: GapCause::Retention,
            lost_epochs: None,
            reused_from_epoch: None,
            detected_at_ms: 0,
            acknowledged_at_ms: None,
        };
        assert_eq!(uncovered(100, 229, &[g(100, 229)]), vec![]);
        assert_eq!(uncovered(100, 229, &[]), vec![(100, 229)]);
        assert_eq!(
            uncovered(100, 229, &[g(120, 149), g(0, 104)]),
            vec![(105, 119), (150, 229)]
        );
        assert_eq!(uncovered(100, 229, &[g(300, 400)]), vec![(100, 229)]);
    }

    #[test]
    fn gap_names_parse_strictly() {
        assert_eq!(parse_offsets("100-229"), Ok((100, 229)));
        assert_eq!(parse_offsets(" 5-5 "), Ok((5, 5)));
        for bad in ["", "100", "a-b", "229-100", "-1-5", "1-2-3"] {
            assert!(parse_offsets(bad).is_err(), "{bad}");
        }
    }
}
