//! The pure decisions of a verification: does a batch continue the log
//! ([`expected_start`], [`continuity`]), is its leader epoch right
//! ([`epoch_verdict`], [`ManifestFacts::epoch_at`]), which objects to
//! sample and how many ([`Sample`], [`pick_sample`]). Values in, values
//! out: `super::scan` reads the files and applies them.

use manifest::partition::ShippedRange;

/// How a batch's base offset relates to where the log says it must start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continuity {
    /// It starts right where expected.
    Follows,
    /// It starts later: a gap (what compaction leaves, or a damaged base
    /// offset when the next batch does not continue it).
    Gap,
    /// It starts at or below the previous batch's last offset, or below its
    /// segment's base offset: it, or the previous batch, is damaged.
    Overlaps,
}

/// Where a batch must start: after the previous batch of the partition and
/// at or after its segment's base offset.
pub fn expected_start(prev_last: Option<i64>, segment_base: i64, first_in_segment: bool) -> i64 {
    match prev_last {
        Some(l) if first_in_segment => (l + 1).max(segment_base),
        Some(l) => l + 1,
        None => segment_base,
    }
}

/// Whether `base` continues the log at `expected` (see [`Continuity`]).
pub fn continuity(expected: i64, segment_base: i64, base: i64) -> Continuity {
    if base < segment_base || base < expected {
        Continuity::Overlaps
    } else if base > expected {
        Continuity::Gap
    } else {
        Continuity::Follows
    }
}

/// The epoch a batch must carry: the epoch checkpoint's for its offsets
/// when it has one; else only "not below the previous batch's". Returns
/// the expected epoch when `epoch` is wrong.
pub fn epoch_verdict(epoch: i32, checkpoint: Option<i32>, previous: Option<i32>) -> Option<i32> {
    match checkpoint {
        Some(e) if e != epoch => Some(e),
        Some(_) => None,
        None => match previous {
            Some(p) if p >= 0 && epoch >= 0 && epoch < p => Some(p),
            _ => None,
        },
    }
}

/// How many of `total` objects to sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample {
    /// At most this many.
    Count(u64),
    /// This fraction (0..=1), rounded up.
    Fraction(f64),
}

impl Sample {
    /// The number of objects to check out of `total`.
    pub fn of(self, total: u64) -> u64 {
        match self {
            Sample::Count(n) => n.min(total),
            Sample::Fraction(f) => ((total as f64 * f).ceil() as u64).min(total),
        }
    }
}

impl std::str::FromStr for Sample {
    type Err = String;
    /// `N` (objects), `0.05` (a fraction), or `5%`.
    fn from_str(s: &str) -> Result<Sample, String> {
        let s = s.trim();
        let bad = || {
            format!(
                "{s:?}: expected a number of objects (8), a fraction (0.05) or a percentage (5%)"
            )
        };
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(0.0..=100.0).contains(&v) {
                return Err(bad());
            }
            return Ok(Sample::Fraction(v / 100.0));
        }
        if let Ok(n) = s.parse::<u64>() {
            return Ok(Sample::Count(n));
        }
        let v: f64 = s.parse().map_err(|_| bad())?;
        if !(0.0..=1.0).contains(&v) {
            return Err(bad());
        }
        Ok(Sample::Fraction(v))
    }
}

/// Picks `n` of `keys` spread by `seed`: the ones whose FNV hash with the
/// seed is smallest (a different sample each run, the same for a seed).
pub fn pick_sample(keys: &[&str], n: u64, seed: u64) -> Vec<usize> {
    let mut scored: Vec<(u64, usize)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
            for b in k.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            (h, i)
        })
        .collect();
    scored.sort_unstable();
    let mut picked: Vec<usize> = scored
        .into_iter()
        .take(usize::try_from(n).unwrap_or(usize::MAX))
        .map(|(_, i)| i)
        .collect();
    picked.sort_unstable();
    picked
}

/// What the manifests say about a partition, for the checks that need the
/// bucket.
#[derive(Debug, Clone, Default)]
pub struct ManifestFacts {
    /// The current ranges (highest generation of each segment), for the
    /// epoch check of mirrored offsets.
    pub ranges: Vec<ShippedRange>,
    /// Offsets at or above this were written locally (after a stop): the
    /// manifest says nothing about them.
    pub mirrored_below: i64,
}

impl ManifestFacts {
    /// The epoch the manifest assigns to `offset`, below the stop point.
    pub fn epoch_at(&self, offset: i64) -> Option<i32> {
        if offset >= self.mirrored_below {
            return None;
        }
        let i = self.ranges.partition_point(|r| r.last_offset < offset);
        self.ranges
            .get(i)
            .filter(|r| r.base_offset <= offset)
            .and_then(|r| r.epoch_at(offset))
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

    // --- (prev last, segment base, first in segment, base) -> continuity

    fn check_continuity((prev, seg, first, base): (Option<i64>, i64, bool, i64), want: Continuity) {
        let e = expected_start(prev, seg, first);
        assert_eq!(continuity(e, seg, base), want);
    }

    rows! { check_continuity;
        the_first_batch_of_the_log_starts_at_its_segment_base: (None, 0, true, 0) => Continuity::Follows;
        the_first_batch_of_a_later_segment_starts_at_its_base: (None, 100, true, 100) => Continuity::Follows;
        a_first_batch_below_its_segment_base_overlaps: (None, 100, true, 99) => Continuity::Overlaps;
        a_first_batch_above_its_segment_base_is_a_gap: (None, 100, true, 130) => Continuity::Gap;
        a_batch_right_after_the_previous_one_follows: (Some(9), 0, false, 10) => Continuity::Follows;
        a_batch_at_the_previous_ones_last_offset_overlaps: (Some(9), 0, false, 9) => Continuity::Overlaps;
        a_batch_inside_the_previous_one_overlaps: (Some(9), 0, false, 5) => Continuity::Overlaps;
        a_batch_past_the_previous_ones_end_is_a_gap: (Some(9), 0, false, 12) => Continuity::Gap;
        a_new_segment_continues_the_previous_one_at_its_base: (Some(99), 100, true, 100) => Continuity::Follows;
        a_new_segment_after_a_compacted_tail_starts_at_its_base: (Some(95), 100, true, 100) => Continuity::Follows;
        a_new_segments_first_batch_below_its_base_overlaps: (Some(99), 100, true, 99) => Continuity::Overlaps;
        a_flipped_high_bit_in_a_base_offset_is_a_gap: (Some(99), 100, true, 1 << 40) => Continuity::Gap;
    }

    // --- (epoch, checkpoint's epoch, previous batch's epoch) -> the
    // expected epoch when the batch's is wrong

    fn check_epoch((epoch, cp, prev): (i32, Option<i32>, Option<i32>), want: Option<i32>) {
        assert_eq!(epoch_verdict(epoch, cp, prev), want);
    }

    rows! { check_epoch;
        the_checkpoints_epoch_is_right: (3, Some(3), Some(3)) => None;
        an_epoch_above_the_checkpoints_is_wrong: (3, Some(2), Some(2)) => Some(2);
        a_flipped_high_bit_in_the_epoch_is_wrong: (3 + (1 << 24), Some(3), Some(3)) => Some(3);
        an_epoch_below_the_checkpoints_is_wrong: (2, Some(3), Some(3)) => Some(3);
        without_a_checkpoint_entry_an_epoch_below_the_previous_is_wrong: (2, None, Some(3)) => Some(3);
        without_a_checkpoint_entry_a_higher_epoch_is_accepted: (4, None, Some(3)) => None;
        the_first_batch_without_a_checkpoint_is_accepted: (0, None, None) => None;
        no_epoch_is_not_ordered_against_the_previous: (-1, None, Some(3)) => None;
    }

    // --- (offset) -> the epoch the manifest assigns it, with ranges
    // 0..=9 at epoch 1, 10..=19 at epochs 1 then 2 from 15, 30..=39 at 3,
    // and offsets mirrored below 35

    fn check_manifest_epoch(offset: i64, want: Option<i32>) {
        let range = |base: i64, last: i64, epochs: &[(i32, i64)]| {
            let mut lineage = kafkalog::epoch::EpochLineage::new();
            for &(e, start) in epochs {
                lineage.assign(e, start).expect("assign");
            }
            ShippedRange {
                epochs: lineage,
                ..crate::mirror::apply_plan::test_range(0, base, last, 0)
            }
        };
        let facts = ManifestFacts {
            ranges: vec![
                range(0, 9, &[(1, 0)]),
                range(10, 19, &[(1, 10), (2, 15)]),
                range(30, 39, &[(3, 30)]),
            ],
            mirrored_below: 35,
        };
        assert_eq!(facts.epoch_at(offset), want);
    }

    rows! { check_manifest_epoch;
        an_offset_of_the_first_range_has_its_epoch: 5 => Some(1);
        an_offset_before_an_epoch_change_inside_a_range_has_the_older_epoch: 14 => Some(1);
        an_offset_after_an_epoch_change_inside_a_range_has_the_newer_epoch: 15 => Some(2);
        an_offset_in_a_compaction_gap_between_ranges_has_no_manifest_epoch: 25 => None;
        an_offset_below_the_stop_point_has_its_ranges_epoch: 34 => Some(3);
        an_offset_written_locally_after_a_stop_has_no_manifest_epoch: 35 => None;
        an_offset_before_every_range_has_no_manifest_epoch: -1 => None;
    }

    #[test]
    fn the_sample_is_a_count_a_fraction_or_a_percentage() {
        let table: &[(&str, Option<Sample>, u64, u64)] = &[
            ("8", Some(Sample::Count(8)), 100, 8),
            ("8", Some(Sample::Count(8)), 3, 3),
            ("0", Some(Sample::Count(0)), 100, 0),
            ("0.05", Some(Sample::Fraction(0.05)), 100, 5),
            ("0.05", Some(Sample::Fraction(0.05)), 1, 1),
            ("1", Some(Sample::Count(1)), 10, 1),
            ("1.0", Some(Sample::Fraction(1.0)), 10, 10),
            ("5%", Some(Sample::Fraction(0.05)), 200, 10),
            ("100%", Some(Sample::Fraction(1.0)), 7, 7),
            ("1.5", None, 0, 0),
            ("-1", None, 0, 0),
            ("101%", None, 0, 0),
            ("many", None, 0, 0),
        ];
        for &(text, want, total, n) in table {
            let got = text.parse::<Sample>().ok();
            assert_eq!(got, want, "{text}");
            if let Some(s) = got {
                assert_eq!(s.of(total), n, "{text} of {total}");
            }
        }
    }

    #[test]
    fn a_sample_picks_the_asked_number_differently_per_seed() {
        let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let a = pick_sample(&refs, 5, 1);
        assert_eq!(a.len(), 5);
        assert_eq!(a, pick_sample(&refs, 5, 1), "same seed, same sample");
        assert_ne!(a, pick_sample(&refs, 5, 2), "another seed, another sample");
        assert_eq!(pick_sample(&refs, 80, 1).len(), 50);
    }
}
