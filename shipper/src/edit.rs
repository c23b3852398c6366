//! Pure edits of a manifest version: what a cycle changes, decided without
//! IO (sealed pages' contents are passed in).

use std::sync::Arc;

use kafkalog::checkpoint::EpochEntry;
use kafkalog::epoch::EpochLineage;
use manifest::partition::{PartitionManifest, ShippedRange};

/// Keys that a new version no longer references.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Dropped {
    /// Data objects.
    pub(crate) data: Vec<String>,
    /// Sealed page objects (their ranges, when known, are in `data`).
    pub(crate) pages: Vec<String>,
}

impl Dropped {
    pub(crate) fn extend(&mut self, other: Dropped) {
        self.data.extend(other.data);
        self.pages.extend(other.pages);
    }
}

/// The ranges of sealed pages, by key (a page a caller could not read is
/// absent).
pub(crate) type PageRanges<'a> = &'a dyn Fn(&str) -> Option<Arc<Vec<ShippedRange>>>;

/// Cuts `m` back for a divergence at `point`: the first range (paged or
/// inline) that ends at or after `point` and every later one are dropped,
/// the shipped end becomes that range's base offset, the lineage is
/// truncated there and the log start lowered to it if needed. A page that
/// holds both kept and dropped ranges is dropped and its kept ranges move
/// inline. Returns what is no longer referenced, or `Err(key)` when that
/// page's ranges are needed and unknown.
pub(crate) fn cut(
    m: &mut PartitionManifest,
    point: i64,
    pages: PageRanges<'_>,
) -> Result<Dropped, String> {
    let mut dropped = Dropped::default();
    let new_end;
    if let Some(pi) = m.pages.iter().position(|p| p.last_offset >= point) {
        let page = m.pages[pi].clone();
        let ranges = pages(&page.key).ok_or_else(|| page.key.clone())?;
        let keep: Vec<ShippedRange> = ranges
            .iter()
            .filter(|r| r.last_offset < point)
            .cloned()
            .collect();
        new_end = ranges
            .iter()
            .find(|r| r.last_offset >= point)
            .map_or(page.first_offset, |r| r.base_offset);
        dropped.data.extend(
            ranges
                .iter()
                .filter(|r| r.last_offset >= point)
                .map(|r| r.key.clone()),
        );
        dropped.pages.push(page.key.clone());
        for later in m.pages.drain(pi..).skip(1) {
            if let Some(rs) = pages(&later.key) {
                dropped.data.extend(rs.iter().map(|r| r.key.clone()));
            }
            dropped.pages.push(later.key);
        }
        dropped
            .data
            .extend(std::mem::take(&mut m.ranges).into_iter().map(|r| r.key));
        m.ranges = keep;
    } else if let Some(i) = m.ranges.iter().position(|r| r.last_offset >= point) {
        new_end = m.ranges[i].base_offset;
        dropped.data.extend(m.ranges.drain(i..).map(|r| r.key));
    } else {
        new_end = point.min(m.shipped_end_offset);
    }
    let new_end = new_end.min(m.shipped_end_offset).max(0);
    m.shipped_end_offset = new_end;
    m.log_start_offset = m.log_start_offset.min(new_end);
    m.lineage.truncate_from_end(new_end);
    Ok(dropped)
}

/// The source's log start moved to `log_start`: ranges and pages wholly
/// below it are dropped; when it passed the shipped end, everything is
/// dropped and the shipped end jumps to it. Returns what is no longer
/// referenced (ranges of dropped pages when `pages` knows them).
pub(crate) fn raise_log_start(
    m: &mut PartitionManifest,
    log_start: i64,
    pages: PageRanges<'_>,
) -> Dropped {
    let mut dropped = Dropped::default();
    if log_start <= m.log_start_offset {
        return dropped;
    }
    let keep_pages = m.pages.partition_point(|p| p.last_offset < log_start);
    for p in m.pages.drain(..keep_pages) {
        if let Some(rs) = pages(&p.key) {
            dropped.data.extend(rs.iter().map(|r| r.key.clone()));
        }
        dropped.pages.push(p.key);
    }
    let keep_ranges = m.ranges.partition_point(|r| r.last_offset < log_start);
    dropped
        .data
        .extend(m.ranges.drain(..keep_ranges).map(|r| r.key));
    if log_start > m.shipped_end_offset {
        m.shipped_end_offset = log_start;
    }
    m.log_start_offset = log_start;
    dropped
}

/// Replaces, in place, every inline range of the segments whose base
/// offset is in `[lo, hi)` by `new` (the compacted segment shipped again).
/// Refused (nothing changes) when those ranges are not all inline and
/// contiguous or the result would be out of order.
pub(crate) fn replace_segment(
    m: &mut PartitionManifest,
    lo: i64,
    hi: i64,
    new: Vec<ShippedRange>,
) -> Result<Dropped, String> {
    let in_span = |r: &ShippedRange| r.segment_base_offset >= lo && r.segment_base_offset < hi;
    if m.pages
        .iter()
        .any(|p| p.last_offset >= lo && p.first_offset < hi)
    {
        return Err(format!(
            "ranges of segment {lo} are in a sealed page: replacing them is not supported"
        ));
    }
    let first = m
        .ranges
        .iter()
        .position(in_span)
        .ok_or_else(|| format!("no inline range of segment {lo}"))?;
    let last = m.ranges.iter().rposition(in_span).unwrap_or(first);
    if !m.ranges[first..=last].iter().all(in_span) {
        return Err(format!("ranges of segment {lo} are not contiguous"));
    }
    if new.is_empty() {
        return Err(format!("the new version of segment {lo} holds no batch"));
    }
    let prev_last = first.checked_sub(1).map(|i| m.ranges[i].last_offset);
    let next_base = m.ranges.get(last + 1).map(|r| r.base_offset);
    let ordered = new.windows(2).all(|w| w[0].last_offset < w[1].base_offset)
        && new.iter().all(|r| r.base_offset <= r.last_offset)
        && prev_last.is_none_or(|p| new[0].base_offset > p)
        && next_base.is_none_or(|n| new[new.len() - 1].last_offset < n)
        && new[new.len() - 1].last_offset < m.shipped_end_offset;
    if !ordered {
        return Err(format!(
            "the new ranges of segment {lo} do not fit between their neighbours"
        ));
    }
    let old: Vec<ShippedRange> = m.ranges.splice(first..=last, new).collect();
    Ok(Dropped {
        data: old.into_iter().map(|r| r.key).collect(),
        pages: Vec::new(),
    })
}

/// The lineage up to `end`: the source's checkpoint entries that start
/// below it, then (assign-if-newer) the epochs of the previous version and
/// of the ranges shipped, so it matches the source up to the shipped end
/// even when the source's checkpoint file lags behind its batches.
pub(crate) fn lineage(
    source: &[EpochEntry],
    previous: &EpochLineage,
    shipped: impl IntoIterator<Item = EpochEntry>,
    end: i64,
) -> EpochLineage {
    let (mut c, _) = EpochLineage::from_checkpoint_entries(
        source.iter().filter(|e| e.start_offset < end).copied(),
    );
    for e in previous
        .entries()
        .iter()
        .chain(shipped.into_iter().collect::<Vec<_>>().iter())
    {
        if e.start_offset < end {
            c.assign_if_newer(e.epoch, e.start_offset);
        }
    }
    c
}

/// True when two versions say the same thing (commit time aside).
pub(crate) fn same_content(a: &PartitionManifest, b: &PartitionManifest) -> bool {
    let mut b = b.clone();
    b.committed_at_ms = a.committed_at_ms;
    b.version = a.version;
    *a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::TopicPartition;
    use manifest::partition::PageRef;
    use std::collections::HashMap;

    fn e(epoch: i32, start_offset: i64) -> EpochEntry {
        EpochEntry {
            epoch,
            start_offset,
        }
    }

    fn l(entries: &[EpochEntry]) -> EpochLineage {
        EpochLineage::from_entries(entries.iter().copied()).expect("valid lineage")
    }

    fn r(base: i64, last: i64, seg: i64) -> ShippedRange {
        ShippedRange {
            key: format!("k{base}-{last}"),
            base_offset: base,
            last_offset: last,
            bytes: 100,
            batches: 1,
            crc32c: 0,
            max_timestamp: 0,
            epochs: l(&[e(0, base)]),
            segment_base_offset: seg,
            completes_segment: false,
            segment_generation: 0,
            object_offset: None,
            compacted: false,
        }
    }

    fn manifest(ranges: Vec<ShippedRange>) -> PartitionManifest {
        let tp = TopicPartition::new("t", 0).expect("tp");
        let mut m = PartitionManifest::new("c", &tp, "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"));
        m.shipped_end_offset = ranges.last().map_or(0, |r| r.last_offset + 1);
        m.ranges = ranges;
        m.lineage = l(&[e(0, 0), e(3, 20), e(5, 40)]);
        m
    }

    fn no_pages(_: &str) -> Option<Arc<Vec<ShippedRange>>> {
        None
    }

    #[test]
    fn cut_drops_the_ranges_from_the_divergence_on() {
        let mut m = manifest(vec![r(0, 9, 0), r(10, 19, 0), r(20, 29, 20), r(30, 49, 20)]);
        let d = cut(&mut m, 25, &no_pages).expect("cut");
        assert_eq!(d.data, vec!["k20-29", "k30-49"]);
        assert_eq!(m.shipped_end_offset, 20);
        assert_eq!(m.ranges.len(), 2);
        assert_eq!(
            m.lineage,
            l(&[e(0, 0)]),
            "epochs starting at or after 20 go"
        );
        m.validate().expect("valid");
        // A point at a range boundary keeps the range before it.
        let mut m = manifest(vec![r(0, 9, 0), r(10, 19, 0)]);
        cut(&mut m, 10, &no_pages).expect("cut");
        assert_eq!(m.shipped_end_offset, 10);
        // Beyond every range: nothing to drop, the end is lowered to it.
        let mut m = manifest(vec![r(0, 9, 0)]);
        m.shipped_end_offset = 15;
        assert_eq!(cut(&mut m, 12, &no_pages).expect("cut"), Dropped::default());
        assert_eq!(m.shipped_end_offset, 12);
    }

    #[test]
    fn cut_into_a_page_moves_its_kept_ranges_inline() {
        let mut m = manifest(vec![r(40, 49, 40)]);
        m.pages = vec![
            PageRef {
                key: "p0".into(),
                first_offset: 0,
                last_offset: 19,
                ranges: 2,
                bytes: 200,
            },
            PageRef {
                key: "p1".into(),
                first_offset: 20,
                last_offset: 39,
                ranges: 2,
                bytes: 200,
            },
        ];
        let mut contents = HashMap::new();
        contents.insert("p0".to_string(), Arc::new(vec![r(0, 9, 0), r(10, 19, 0)]));
        contents.insert(
            "p1".to_string(),
            Arc::new(vec![r(20, 29, 20), r(30, 39, 20)]),
        );
        let lookup = |k: &str| contents.get(k).cloned();
        let mut missing = m.clone();
        assert_eq!(cut(&mut missing, 15, &no_pages), Err("p0".to_string()));
        let d = cut(&mut m, 15, &lookup).expect("cut");
        assert_eq!(m.pages.len(), 0);
        assert_eq!(m.ranges, vec![r(0, 9, 0)]);
        assert_eq!(m.shipped_end_offset, 10);
        assert_eq!(d.pages, vec!["p0", "p1"]);
        assert_eq!(d.data, vec!["k10-19", "k20-29", "k30-39", "k40-49"]);
        m.validate().expect("valid");
    }

    #[test]
    fn retention_drops_whole_ranges_below_the_log_start() {
        let mut m = manifest(vec![r(0, 9, 0), r(10, 19, 10), r(20, 29, 20)]);
        let d = raise_log_start(&mut m, 15, &no_pages);
        assert_eq!(d.data, vec!["k0-9"]);
        assert_eq!(m.log_start_offset, 15);
        assert_eq!(m.ranges.len(), 2);
        m.validate().expect("valid");
        assert_eq!(raise_log_start(&mut m, 12, &no_pages), Dropped::default());
        // Past the shipped end: everything goes, the end jumps.
        let d = raise_log_start(&mut m, 100, &no_pages);
        assert_eq!(d.data, vec!["k10-19", "k20-29"]);
        assert_eq!((m.log_start_offset, m.shipped_end_offset), (100, 100));
        m.validate().expect("valid");
    }

    #[test]
    fn compacted_segments_are_replaced_in_place() {
        let mut m = manifest(vec![
            r(0, 9, 0),
            r(10, 14, 10),
            r(15, 19, 10),
            r(20, 29, 20),
        ]);
        let mut new = r(12, 19, 10);
        new.segment_generation = 1;
        let d = replace_segment(&mut m, 10, 20, vec![new.clone()]).expect("replace");
        assert_eq!(d.data, vec!["k10-14", "k15-19"]);
        assert_eq!(m.ranges[1], new);
        assert_eq!(m.ranges.len(), 3);
        m.validate().expect("valid");
        // Out of order: refused, nothing changes.
        let before = m.clone();
        assert!(replace_segment(&mut m, 0, 10, vec![r(0, 25, 0)]).is_err());
        assert!(replace_segment(&mut m, 30, 40, vec![r(30, 31, 30)]).is_err());
        assert_eq!(m, before);
    }

    #[test]
    fn lineage_follows_the_source_and_fills_what_its_checkpoint_lacks() {
        // The source's checkpoint up to the end, the last entry excluded
        // when it starts at the end.
        assert_eq!(
            lineage(&[e(0, 0), e(2, 30), e(3, 70)], &l(&[]), [], 70),
            l(&[e(0, 0), e(2, 30)])
        );
        // A checkpoint that lags: the epochs seen in batches fill it.
        assert_eq!(
            lineage(&[e(0, 0)], &l(&[e(0, 0), e(2, 30)]), [e(4, 90)], 100),
            l(&[e(0, 0), e(2, 30), e(4, 90)])
        );
        // The source wins where it knows (retention moved its first entry).
        assert_eq!(
            lineage(&[e(2, 50)], &l(&[e(0, 0), e(2, 30)]), [], 100),
            l(&[e(2, 50)])
        );
    }
}
