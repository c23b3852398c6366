//! The verdict of an applier run that found nothing to do, from what the
//! bucket holds (`manifest::inventory::Inventory`, read by
//! `bucket::store::take_inventory`): the exit code a cron job acts on.

use manifest::inventory::Inventory;

/// What a run that did nothing tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Something was done or there is something to follow: exit 0.
    Ok,
    /// The bucket holds nothing yet (the shipper may not have started):
    /// exit 0, with a line saying so.
    EmptyBucket,
    /// The bucket holds other clusters but not the configured source: a
    /// mistyped `--source-cluster-id` (exit 2).
    SourceAbsent,
    /// The source has topics but the selection matches none, and no
    /// partition here is a mirror (exit 2).
    NothingSelected,
}

impl Verdict {
    /// The exit code of `applier once` for this verdict.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Ok | Verdict::EmptyBucket => 0,
            Verdict::SourceAbsent | Verdict::NothingSelected => 2,
        }
    }
}

/// The verdict for a run with `mirrors` mirror partitions in its log dir
/// that found `inv` in the bucket (pure: the table is in [`Verdict`]).
pub fn verdict(inv: &Inventory, mirrors: usize) -> Verdict {
    if !inv.clusters.contains(&inv.source) {
        return if inv.clusters.is_empty() {
            Verdict::EmptyBucket
        } else {
            Verdict::SourceAbsent
        };
    }
    if mirrors == 0 && inv.selected.is_empty() && !inv.topics.is_empty() {
        return Verdict::NothingSelected;
    }
    Verdict::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(clusters: &[&str], topics: &[&str], selected: &[&str]) -> Inventory {
        Inventory {
            clusters: clusters.iter().map(|s| s.to_string()).collect(),
            source: "src".into(),
            topics: topics.iter().map(|s| s.to_string()).collect(),
            selected: selected.iter().map(|s| s.to_string()).collect(),
            has_selection: true,
        }
    }

    #[test]
    fn the_verdict_of_a_run_that_did_nothing() {
        // (bucket, mirrors here) -> verdict, exit code
        let cases = [
            (inv(&[], &[], &[]), 0, Verdict::EmptyBucket, 0),
            (inv(&["other"], &[], &[]), 0, Verdict::SourceAbsent, 2),
            (inv(&["other"], &[], &[]), 3, Verdict::SourceAbsent, 2),
            (
                inv(&["src"], &["orders"], &[]),
                0,
                Verdict::NothingSelected,
                2,
            ),
            (inv(&["src"], &["orders"], &[]), 1, Verdict::Ok, 0),
            (inv(&["src"], &["orders"], &["orders"]), 0, Verdict::Ok, 0),
            // The source shipped no partition yet: wait quietly.
            (inv(&["src"], &[], &[]), 0, Verdict::Ok, 0),
        ];
        for (i, mirrors, want, code) in cases {
            assert_eq!(verdict(&i, mirrors), want, "{i} with {mirrors} mirrors");
            assert_eq!(want.exit_code(), code);
        }
    }
}
