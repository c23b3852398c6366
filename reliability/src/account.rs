//! Counting what a mirror lost or duplicated, batch by batch.
//!
//! Every harness source writes unique batches (each record names its
//! partition and batch number), so a batch's CRC-32C field (which covers
//! everything after the leader epoch: attributes, timestamps, producer
//! fields and the records) identifies it wherever it lands. Comparing the
//! multisets of those identities below a limit (the shipped end) gives:
//! - **lost**: source batches with no copy in the destination;
//! - **duplicated**: destination copies beyond the source's count;
//! - **foreign**: destination batches the source never had;
//! - **misplaced**: batches present on both sides at different offsets.
//!
//! `kafkalog::compare` then checks bytes, offsets and epoch lineage.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;

use kafkalog::TopicPartition;
use kafkalog::compare::{Comparison, compare_partition};
use kafkalog::reader::PartitionReader;

/// What one partition's destination holds against its source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accounting {
    /// Source batches below the limit.
    pub source_batches: u64,
    /// Destination batches below the limit.
    pub dest_batches: u64,
    /// Source batches missing from the destination.
    pub lost: u64,
    /// Extra destination copies of source batches.
    pub duplicated: u64,
    /// Destination batches the source never had.
    pub foreign: u64,
    /// Batches at another offset than at the source.
    pub misplaced: u64,
}

impl Accounting {
    /// Adds `o` to this.
    pub fn add(&mut self, o: &Accounting) {
        self.source_batches += o.source_batches;
        self.dest_batches += o.dest_batches;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.foreign += o.foreign;
        self.misplaced += o.misplaced;
    }

    /// Nothing lost, duplicated, foreign or misplaced.
    pub fn is_clean(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.foreign == 0 && self.misplaced == 0
    }
}

/// `identity -> base offsets` of a partition's batches whose last offset
/// is below `limit` (an absent partition has none).
fn batches(
    root: &Path,
    tp: &TopicPartition,
    limit: i64,
) -> anyhow::Result<BTreeMap<(u32, i32), Vec<i64>>> {
    let mut out: BTreeMap<(u32, i32), Vec<i64>> = BTreeMap::new();
    if !root.join(tp.dir_name()).is_dir() {
        return Ok(out);
    }
    let reader = PartitionReader::open(root, tp)?;
    reader.for_each_batch(0, true, |h, _| {
        if h.last_offset() >= limit {
            return ControlFlow::Break(());
        }
        out.entry((h.crc, h.record_count))
            .or_default()
            .push(h.base_offset);
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

/// Accounts partition `tp` of `dest` against `source` below offset `limit`.
pub fn account_partition(
    source: &Path,
    dest: &Path,
    tp: &TopicPartition,
    limit: i64,
) -> anyhow::Result<Accounting> {
    let src = batches(source, tp, limit)?;
    let dst = batches(dest, tp, limit)?;
    let mut a = Accounting {
        source_batches: src.values().map(|v| v.len() as u64).sum(),
        dest_batches: dst.values().map(|v| v.len() as u64).sum(),
        ..Accounting::default()
    };
    for (id, s) in &src {
        let d = dst.get(id).map_or(&[][..], |v| v.as_slice());
        a.lost += s.len().saturating_sub(d.len()) as u64;
        a.duplicated += d.len().saturating_sub(s.len()) as u64;
        a.misplaced += d.iter().filter(|o| !s.contains(o)).count().min(s.len()) as u64;
    }
    for (id, d) in &dst {
        if !src.contains_key(id) {
            a.foreign += d.len() as u64;
        }
    }
    Ok(a)
}

/// Log end offset of a partition from its files (0 when absent), walking
/// from `from` (a log end known earlier, to keep repeated calls cheap).
pub fn log_end_from(root: &Path, tp: &TopicPartition, from: i64) -> i64 {
    if !root.join(tp.dir_name()).is_dir() {
        return 0;
    }
    PartitionReader::open(root, tp)
        .and_then(|r| r.for_each_batch(from, false, |_, _| ControlFlow::Continue(())))
        .unwrap_or(from)
}

/// `kafkalog::compare` of one partition, as text (`identical`,
/// `identical up to N (...)` or the first difference).
pub fn compare_text(a: &Path, b: &Path, tp: &TopicPartition) -> String {
    match compare_partition(a, b, tp) {
        Ok(Comparison::Identical) => "identical".into(),
        Ok(Comparison::IdenticalUpTo { offset, longer }) => {
            format!("identical up to {offset} ({longer})")
        }
        Ok(Comparison::Different(d)) => format!("DIFFERENT: {d}"),
        Err(e) => format!("ERROR: {e}"),
    }
}

/// Verifies every partition of a log dir (CRCs, offsets, epochs, indexes,
/// checkpoints) with kafkalog's verifier; the first problem as text.
pub fn verify_dir(root: &Path) -> Result<u64, String> {
    let mut stats = kafkalog::verify::VerifyStats::default();
    let parts = kafkalog::reader::list_partitions(root).map_err(|e| e.to_string())?;
    for tp in parts {
        match kafkalog::verify::verify_partition(
            root,
            &tp,
            kafkalog::verify::VerifyOptions::default(),
            &mut stats,
        ) {
            Ok(Ok(())) => {}
            Ok(Err(p)) => return Err(p.to_string()),
            Err(e) => return Err(format!("{tp}: {e}")),
        }
    }
    Ok(stats.batches)
}
