//! `applier verify`, one shot: the mirror partitions of a log dir
//! ([`targets`]), each scanned whole and confirmed by a second read, with a
//! bucket the manifest facts of each and a sample of its objects
//! ([`verify_targets`]).

use std::ops::ControlFlow;
use std::path::Path;

use kafkalog::TopicPartition;
use kafkalog::epoch::EpochLineage;
use manifest::partition::ShippedRange;
use serde::Serialize;

use super::rules::{ManifestFacts, Sample, pick_sample};
use super::scan::PartitionScan;
use super::{Counts, Mismatch};
use crate::error::VerifyError;

/// A mirror partition to verify, with its record.
#[derive(Debug, Clone)]
pub struct Target {
    /// The partition.
    pub tp: TopicPartition,
    /// Its mirror record.
    pub record: manifest::mirror_record::MirrorRecord,
    /// Bytes of its segment files now.
    pub bytes: u64,
}

/// The mirror partitions of `log_dir` that `select` picks (a partition
/// without a mirror record is not a mirror: not verified here).
pub fn targets(
    log_dir: &Path,
    select: &dyn Fn(&TopicPartition) -> bool,
) -> Result<Vec<Target>, VerifyError> {
    let mut out = Vec::new();
    for tp in kafkalog::reader::list_partitions(log_dir)? {
        if !select(&tp) {
            continue;
        }
        let reader = kafkalog::reader::PartitionReader::open(log_dir, &tp)?;
        let Some(record) = partdir::record::read(reader.dir())? else {
            continue;
        };
        let bytes = reader.segments()?.iter().map(|s| s.size).sum();
        out.push(Target { tp, record, bytes });
    }
    Ok(out)
}

/// What a one-shot verification found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    /// Every mismatch (at most [`super::MAX_REPORTED_PER_PARTITION`] per
    /// partition; `counts.mismatches` has them all).
    pub mismatches: Vec<Mismatch>,
    /// What was checked.
    pub counts: Counts,
    /// Partitions whose bucket checks were skipped, and why.
    pub notes: Vec<String>,
}

/// The manifest facts of one partition, and its current ranges (for
/// sampling), read from `store`.
async fn facts_of(
    store: &bucket::store::ManifestStore,
    t: &Target,
    local_leo: i64,
    local_lineage: &EpochLineage,
) -> Result<Option<(ManifestFacts, Vec<ShippedRange>)>, bucket::store::StoreError> {
    let pk = manifest::layout::PartitionKey {
        tp: t.tp.clone(),
        topic_id: t.record.topic_id,
    };
    let Some(m) = store.newest_manifest(&pk).await? else {
        return Ok(None);
    };
    let mut all = Vec::new();
    for page in &m.pages {
        all.extend(store.get_page(&page.key).await?.ranges);
    }
    all.extend(m.ranges.iter().cloned());
    let mut top: std::collections::BTreeMap<i64, u32> = std::collections::BTreeMap::new();
    for r in &all {
        let g = top.entry(r.segment_base_offset).or_default();
        *g = (*g).max(r.segment_generation);
    }
    let mut current: Vec<ShippedRange> = all
        .iter()
        .filter(|r| top.get(&r.segment_base_offset) == Some(&r.segment_generation))
        .cloned()
        .collect();
    current.sort_by_key(|r| r.base_offset);
    // The manifest speaks for offsets mirrored: below a stop, and below
    // where the source's lineage and the local one part (a source
    // divergence the follow has not cut yet is not damage).
    let agreed = manifest::lineage::divergence_point(
        local_lineage,
        local_leo,
        &m.lineage,
        m.shipped_end_offset,
    );
    let mirrored_below = t.record.stopped_at_offset.unwrap_or(i64::MAX).min(agreed);
    let own_history = t.record.failback_pending
        || t.record.state.state() == manifest::state::PartitionState::Preparing;
    let facts = ManifestFacts {
        ranges: current.clone(),
        mirrored_below: if own_history {
            i64::MIN
        } else {
            mirrored_below
        },
    };
    let live: Vec<ShippedRange> = current
        .into_iter()
        .filter(|r| r.last_offset >= m.log_start_offset)
        .collect();
    Ok(Some((facts, live)))
}

/// Verifies `targets` in `log_dir` (and, with `store`, samples `sample` of
/// their objects, seeded by `seed`). `progress` is told the bytes read.
pub async fn verify_targets(
    log_dir: &Path,
    targets: &[Target],
    store: Option<&bucket::store::ManifestStore>,
    sample: Sample,
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<Outcome, VerifyError> {
    let mut out = Outcome::default();
    let mut sampleable: Vec<(TopicPartition, ShippedRange)> = Vec::new();
    let now = crate::clock::now_ms();
    for t in targets {
        let mut facts = None;
        if let Some(store) = store {
            if t.record.source_cluster_id != store.layout().cluster_id() {
                out.notes.push(format!(
                    "{}: mirrors source cluster {}, not {}: bucket checks skipped",
                    t.tp,
                    t.record.source_cluster_id,
                    store.layout().cluster_id()
                ));
            } else {
                let (leo, lineage) = local_end_and_lineage(log_dir, &t.tp);
                match facts_of(store, t, leo, &lineage).await {
                    Ok(Some((f, ranges))) => {
                        facts = Some(f);
                        sampleable.extend(ranges.into_iter().map(|r| (t.tp.clone(), r)));
                    }
                    Ok(None) => out.notes.push(format!(
                        "{}: no manifest in the bucket: bucket checks skipped",
                        t.tp
                    )),
                    Err(source) => {
                        return Err(VerifyError::Store {
                            what: format!("{}: reading its manifest", t.tp),
                            source,
                        });
                    }
                }
            }
        }
        let mut scan = PartitionScan::run_whole(log_dir, &t.tp, facts.clone(), now, progress);
        if scan.as_ref().is_ok_and(|s| !s.mismatches.is_empty()) {
            // Confirmed by a second read from a fresh start (an applier
            // may have cut and re-appended the log meanwhile): only what
            // it finds again is reported.
            scan = PartitionScan::run_whole(log_dir, &t.tp, facts, now, &mut |_| {});
        }
        match scan {
            Ok(scan) => {
                out.counts.add(&scan.counts);
                out.mismatches.extend(scan.mismatches);
            }
            // Deleted since it was listed.
            Err(kafkalog::Error::NoSuchPartition { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(store) = store {
        let keys: Vec<&str> = sampleable.iter().map(|(_, r)| r.key.as_str()).collect();
        let n = sample.of(keys.len() as u64);
        for i in pick_sample(&keys, n, seed) {
            let (tp, r) = &sampleable[i];
            out.counts.objects += 1;
            let object = |message: String| Mismatch::object(tp, r, message, now);
            match store.get_in(&r.key, r.object_range()).await {
                Ok(bytes) => {
                    out.counts.object_bytes += bytes.len() as u64;
                    if let Err(e) = manifest::range_check::verify_object(r, &bytes) {
                        out.counts.mismatches += 1;
                        out.mismatches.push(object(e.detail));
                    }
                }
                Err(bucket::store::StoreError::NotFound { .. }) => {
                    out.counts.mismatches += 1;
                    out.mismatches.push(object(format!(
                        "named by the manifest (offsets {}..={}) but missing from the bucket",
                        r.base_offset, r.last_offset
                    )));
                }
                Err(source) => {
                    return Err(VerifyError::Store {
                        what: format!("reading object {}", r.key),
                        source,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The local log end offset and epoch lineage (from the files).
fn local_end_and_lineage(log_dir: &Path, tp: &TopicPartition) -> (i64, EpochLineage) {
    let Ok(r) = kafkalog::reader::PartitionReader::open(log_dir, tp) else {
        return (0, EpochLineage::new());
    };
    let lineage = EpochLineage::from_checkpoint_entries(r.epoch_entries().unwrap_or_default()).0;
    let end = r
        .segments()
        .and_then(|segs| {
            let last = segs.last().map_or(0, |s| s.base_offset);
            r.for_each_batch(last, false, |_, _| ControlFlow::Continue(()))
                .map(|e| e.max(last))
        })
        .unwrap_or(0);
    (end, lineage)
}
