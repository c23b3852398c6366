//! What one commit appended to a partition's manifest, as a value a head
//! can carry instead of a whole manifest version (issue 30, "Layout 2",
//! step 2 in `docs/mirroring.md`): most cycles only append ranges and move
//! the shipped end, high watermark and log start, and writing a manifest
//! object per partition per cycle is what makes a cycle's cost grow with
//! the partition count.
//!
//! [`Delta::between`] is `Some` exactly when `next` is `prev` with ranges
//! appended (and the lineage extended by their epochs, the progress fields
//! moved forward), and with runs of `prev`'s ranges replaced by one range
//! covering exactly their offsets (compaction, `crate::compact`: the same
//! batches in another object); every other change (a cut, pages sealed,
//! gaps, configs, a deletion, the mirror origin) needs a manifest version
//! of its own.
//! [`Delta::apply`] rebuilds `next` from `prev` and the delta, and checks
//! that the delta extends `prev` (the version it was computed after): a
//! reader that applies the deltas of a partition in head order, each to the
//! result of the one before, holds the same manifest as a reader of the
//! versions themselves. Pure: no IO.
//!
//! Invariant (property-tested): for every `prev` and append-only `next`,
//! `Delta::between(prev, next)?.apply(prev) == Ok(next)`; table-tested for
//! replacements.

use kafkalog::checkpoint::EpochEntry;
use kafkalog::epoch::EpochLineage;
use serde::{Deserialize, Serialize};

use crate::partition::{PartitionManifest, ShippedRange};

/// A commit that only appended to a partition's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// The version it extends.
    pub after_version: u64,
    /// The ranges appended, in offset order.
    pub ranges: Vec<ShippedRange>,
    /// Ranges that replace runs of the previous version's ranges, in offset
    /// order: each covers exactly the offsets of the run it replaces (the
    /// first range's base offset to the last one's last offset), applied
    /// before the appends. Absent in deltas that only append.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<ShippedRange>,
    /// The lineage entries appended (epochs the new ranges started).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub epochs: Vec<EpochEntry>,
    /// The new log start offset.
    pub log_start_offset: i64,
    /// The new shipped end offset.
    pub shipped_end_offset: i64,
    /// The new source high watermark.
    pub source_high_watermark: i64,
    /// When it was committed (ms since the epoch).
    pub committed_at_ms: i64,
    /// Who committed it.
    #[serde(default)]
    pub writer: String,
}

/// Why a delta does not apply to a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeltaError {
    /// The delta extends another version (a reader out of step, or a
    /// writer that lost a race).
    #[error("the delta extends version {after}, the manifest is at version {at}")]
    NotAfter {
        /// The version the delta extends.
        after: u64,
        /// The manifest's version.
        at: u64,
    },
    /// The result breaks a manifest invariant (the message says which).
    #[error("the delta does not extend the manifest: {0}")]
    Invalid(String),
}

impl Delta {
    /// The delta from `prev` to `next`, when `next` only appends to `prev`
    /// (see the module doc); `None` when `next` needs a manifest version.
    pub fn between(prev: &PartitionManifest, next: &PartitionManifest) -> Option<Delta> {
        let same_identity = next.version == prev.version.checked_add(1)?
            && next.schema == prev.schema
            && next.source_cluster_id == prev.source_cluster_id
            && next.topic == prev.topic
            && next.topic_id == prev.topic_id
            && next.partition == prev.partition;
        let same_rest = next.pages == prev.pages
            && next.mirror_origin == prev.mirror_origin
            && next.deleted == prev.deleted
            && next.gaps == prev.gaps
            && next.topic_configs == prev.topic_configs;
        let forward = next.shipped_end_offset >= prev.shipped_end_offset
            && next.log_start_offset >= prev.log_start_offset
            && next.source_high_watermark >= prev.source_high_watermark;
        if !(same_identity && same_rest && forward) {
            return None;
        }
        let (replaced, appended) = replacements(&prev.ranges, &next.ranges)?;
        let epochs = next
            .lineage
            .entries()
            .strip_prefix(prev.lineage.entries())?;
        Some(Delta {
            after_version: prev.version,
            ranges: appended.to_vec(),
            replaced,
            epochs: epochs.to_vec(),
            log_start_offset: next.log_start_offset,
            shipped_end_offset: next.shipped_end_offset,
            source_high_watermark: next.source_high_watermark,
            committed_at_ms: next.committed_at_ms,
            writer: next.writer.clone(),
        })
    }

    /// The version this delta makes.
    pub fn version(&self) -> u64 {
        self.after_version.saturating_add(1)
    }

    /// `prev` with this delta applied: the next version, validated
    /// (`PartitionManifest::validate`). Refused when the delta does not
    /// extend `prev`'s version or the result is not a valid manifest (a
    /// range overlapping `prev`'s, a lineage that goes back).
    pub fn apply(&self, prev: &PartitionManifest) -> Result<PartitionManifest, DeltaError> {
        if self.after_version != prev.version {
            return Err(DeltaError::NotAfter {
                after: self.after_version,
                at: prev.version,
            });
        }
        if self.shipped_end_offset < prev.shipped_end_offset
            || self.log_start_offset < prev.log_start_offset
            || self.source_high_watermark < prev.source_high_watermark
        {
            return Err(DeltaError::Invalid(format!(
                "progress goes back: shipped end {} -> {}, log start {} -> {}, high watermark {} -> {}",
                prev.shipped_end_offset,
                self.shipped_end_offset,
                prev.log_start_offset,
                self.log_start_offset,
                prev.source_high_watermark,
                self.source_high_watermark
            )));
        }
        let mut next = prev.clone();
        next.version = self.version();
        for r in &self.replaced {
            let run = run_replaced_by(&next.ranges, r).ok_or_else(|| {
                DeltaError::Invalid(format!(
                    "no run of ranges covers exactly offsets {}..={} to replace",
                    r.base_offset, r.last_offset
                ))
            })?;
            next.ranges.splice(run, [r.clone()]);
        }
        next.ranges.extend(self.ranges.iter().cloned());
        next.lineage = EpochLineage::from_entries(
            prev.lineage
                .entries()
                .iter()
                .chain(self.epochs.iter())
                .copied(),
        )
        .map_err(|e| DeltaError::Invalid(format!("lineage: {e}")))?;
        next.log_start_offset = self.log_start_offset;
        next.shipped_end_offset = self.shipped_end_offset;
        next.source_high_watermark = self.source_high_watermark;
        next.committed_at_ms = self.committed_at_ms;
        next.writer = self.writer.clone();
        next.validate()
            .map_err(|e| DeltaError::Invalid(e.to_string()))?;
        Ok(next)
    }
}

/// The positions of the run of `ranges` that `r` replaces: the range
/// starting at `r`'s base offset through the one ending at its last
/// offset, all of `r`'s segment and generation.
fn run_replaced_by(ranges: &[ShippedRange], r: &ShippedRange) -> Option<std::ops::Range<usize>> {
    let start = ranges.iter().position(|x| x.base_offset == r.base_offset)?;
    let end = start
        + ranges[start..]
            .iter()
            .position(|x| x.last_offset == r.last_offset)?
        + 1;
    ranges[start..end]
        .iter()
        .all(|x| {
            x.segment_base_offset == r.segment_base_offset
                && x.segment_generation == r.segment_generation
                && x.last_offset <= r.last_offset
        })
        .then_some(start..end)
}

/// `next`'s ranges as `prev`'s with runs replaced (each by one range
/// covering exactly their offsets) and ranges appended: the replacing
/// ranges and the appended ones; `None` when `next` is not that.
fn replacements<'a>(
    prev: &[ShippedRange],
    next: &'a [ShippedRange],
) -> Option<(Vec<ShippedRange>, &'a [ShippedRange])> {
    let mut replaced = Vec::new();
    let (mut i, mut k) = (0, 0);
    while i < prev.len() {
        let n = next.get(k)?;
        if *n != prev[i] {
            let run = run_replaced_by(&prev[i..], n).filter(|run| run.start == 0)?;
            replaced.push(n.clone());
            i += run.end;
        } else {
            i += 1;
        }
        k += 1;
    }
    Some((replaced, &next[k..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::topic::TopicPartition;
    use proptest::prelude::*;

    fn lineage(e: &[(i32, i64)]) -> EpochLineage {
        EpochLineage::from_entries(e.iter().map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        }))
        .expect("increasing")
    }

    fn range(base: i64, last: i64, epoch: i32) -> ShippedRange {
        ShippedRange {
            key: format!("k/{base}"),
            base_offset: base,
            last_offset: last,
            bytes: 100,
            batches: 1,
            crc32c: 9,
            max_timestamp: 1_700_000_000_000 + last,
            epochs: lineage(&[(epoch, base)]),
            segment_base_offset: 0,
            completes_segment: false,
            segment_generation: 0,
            object_offset: Some(base as u64 * 100),
            compacted: false,
        }
    }

    fn manifest() -> PartitionManifest {
        let tp = TopicPartition::new("orders", 2).expect("tp");
        let mut m =
            PartitionManifest::new("src", &tp, "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"));
        m.version = 7;
        m.ranges = vec![range(0, 9, 3), range(10, 19, 3)];
        m.lineage = lineage(&[(3, 0)]);
        m.shipped_end_offset = 20;
        m.source_high_watermark = 20;
        m.committed_at_ms = 1_000;
        m.writer = "s1".into();
        m
    }

    /// `prev` with `ranges` appended as a shipper's next version would.
    fn appended(prev: &PartitionManifest, ranges: &[ShippedRange]) -> PartitionManifest {
        let mut next = prev.clone();
        next.version += 1;
        for r in ranges {
            let epoch = r.epochs.entries()[0];
            if next
                .lineage
                .entries()
                .last()
                .is_none_or(|l| l.epoch < epoch.epoch)
            {
                next.lineage = EpochLineage::from_entries(
                    next.lineage.entries().iter().copied().chain([epoch]),
                )
                .expect("lineage");
            }
            next.ranges.push(r.clone());
            next.shipped_end_offset = r.last_offset + 1;
        }
        next.source_high_watermark = next.source_high_watermark.max(next.shipped_end_offset);
        next.committed_at_ms += 1_000;
        next
    }

    /// One row per kind of change: whether it is a delta.
    #[test]
    fn only_appends_are_deltas() {
        let prev = manifest();
        let next = appended(&prev, &[range(20, 29, 3), range(30, 39, 5)]);
        type Change = fn(&mut PartitionManifest);
        let rows: &[(&str, Change, bool)] = &[
            ("ranges appended", |_| {}, true),
            (
                "only the high watermark moved",
                |m| {
                    m.ranges.truncate(2);
                    m.lineage = lineage(&[(3, 0)]);
                    m.shipped_end_offset = 20;
                    m.source_high_watermark = 25;
                },
                true,
            ),
            ("a version skipped", |m| m.version += 1, false),
            (
                "a range cut (unclean election)",
                |m| {
                    m.ranges.remove(1);
                },
                false,
            ),
            (
                "a range replaced (compacted segment)",
                |m| m.ranges[0].segment_generation = 1,
                false,
            ),
            (
                "a run compacted into one range (compaction)",
                |m| {
                    let mut c = range(0, 19, 3);
                    (c.key, c.bytes, c.batches, c.compacted) = ("c".into(), 200, 2, true);
                    m.ranges.splice(0..2, [c]);
                },
                true,
            ),
            (
                "a range compacted alone, and the next appended",
                |m| {
                    m.ranges[1].key = "own".into();
                    m.ranges[1].object_offset = None;
                },
                true,
            ),
            (
                "a compacted range over more offsets than the run",
                |m| {
                    let c = range(0, 24, 3);
                    m.ranges.splice(0..2, [c]);
                },
                false,
            ),
            (
                "a compacted range of another generation",
                |m| {
                    let mut c = range(0, 19, 3);
                    c.segment_generation = 1;
                    m.ranges.splice(0..2, [c]);
                },
                false,
            ),
            (
                "pages sealed",
                |m| {
                    m.pages.push(crate::partition::PageRef {
                        key: "p".into(),
                        first_offset: 0,
                        last_offset: 9,
                        ranges: 1,
                        bytes: 100,
                    })
                },
                false,
            ),
            (
                "gaps recorded",
                |m| {
                    m.gaps.push(crate::gaps::Gap {
                        first_offset: 0,
                        last_offset: 1,
                        cause: crate::gaps::GapCause::Retention,
                        lost_epochs: None,
                        reused_from_epoch: None,
                        detected_at_ms: 0,
                        acknowledged_at_ms: None,
                    });
                },
                false,
            ),
            ("deleted", |m| m.deleted = true, false),
            (
                "configs changed",
                |m| m.topic_configs = Some(Default::default()),
                false,
            ),
            (
                "the lineage rewritten",
                |m| m.lineage = lineage(&[(4, 0)]),
                false,
            ),
            (
                "shipped end going back",
                |m| m.shipped_end_offset = 5,
                false,
            ),
            (
                "another topic id",
                |m| m.topic_id = "AAAAAAAAAAAAAAAAAAAAAQ".parse().expect("id"),
                false,
            ),
        ];
        for (name, change, is_delta) in rows {
            let mut n = next.clone();
            change(&mut n);
            let d = Delta::between(&prev, &n);
            assert_eq!(d.is_some(), *is_delta, "{name}");
            if let Some(d) = d {
                assert_eq!(d.apply(&prev), Ok(n), "{name}");
            }
        }
    }

    #[test]
    fn a_delta_applies_only_after_its_version_and_only_forward() {
        let prev = manifest();
        let next = appended(&prev, &[range(20, 29, 3)]);
        let d = Delta::between(&prev, &next).expect("a delta");
        assert_eq!(d.version(), 8);
        // Applied twice (a reader out of step): refused.
        assert_eq!(
            d.apply(&next),
            Err(DeltaError::NotAfter { after: 7, at: 8 })
        );
        // A range overlapping what is there: refused by the manifest's rules.
        let mut overlap = d.clone();
        overlap.ranges = vec![range(15, 29, 3)];
        assert!(
            matches!(overlap.apply(&prev), Err(DeltaError::Invalid(_))),
            "{:?}",
            overlap.apply(&prev)
        );
        let mut back = d;
        back.log_start_offset = -1;
        assert!(matches!(back.apply(&prev), Err(DeltaError::Invalid(_))));
    }

    #[test]
    fn a_delta_survives_json() {
        let prev = manifest();
        let d = Delta::between(&prev, &appended(&prev, &[range(20, 29, 5)])).expect("delta");
        let text = serde_json::to_string(&d).expect("encode");
        assert_eq!(serde_json::from_str::<Delta>(&text).expect("decode"), d);
    }

    proptest! {
        #[test]
        fn applying_the_delta_between_two_versions_gives_the_second(
            steps in proptest::collection::vec((1i64..50, 0i32..3, 0i64..10), 1..12)
        ) {
            let mut prev = manifest();
            for (len, bump, extra_hw) in steps {
                let base = prev.shipped_end_offset;
                let epoch = prev.lineage.entries().last().map_or(0, |e| e.epoch) + bump;
                let mut next = appended(&prev, &[range(base, base + len - 1, epoch)]);
                next.source_high_watermark += extra_hw;
                let d = Delta::between(&prev, &next).expect("an append is a delta");
                prop_assert_eq!(d.apply(&prev).expect("applies"), next.clone());
                prev = next;
            }
        }
    }
}
