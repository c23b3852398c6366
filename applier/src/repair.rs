//! Repairs of local damage found by `applier verify` or the scrub
//! (`crate::verify`), from the bucket.
//!
//! - A mirror partition (FAILED by the damage): `applier start` prepares
//!   it again, and preparation first cuts the log back to the recorded
//!   `cut_offset` (the damaged batch's boundary, [`mirror_cut`]), then
//!   checks the new tail and cuts to its segment's start if it still does
//!   not verify (a damaged base offset can hide the batch from an
//!   offset-based cut). The normal follow then fetches the range again
//!   from the manifests. The cut is allowed because a mirror's data is in
//!   the bucket: it is refused (the partition stays FAILED, saying so)
//!   when the damaged range is below the bucket's log start, that is no
//!   longer in the bucket. The cut is logged and the record notes when the
//!   partition was repaired.
//! - A STOPPED partition (a primary, taking writes) is never cut:
//!   `applier repair` replaces a damaged segment that lies wholly below
//!   the stop point (every byte in it was mirrored, none written locally)
//!   with the same segment rebuilt from the bucket's objects, in place
//!   (`PartitionLog::replace_segment`: written beside, renamed over,
//!   indexes rebuilt). Damage in the segment holding the stop point (or
//!   above it) is refused with a message: replacing it would cut local
//!   writes ([`plan_stopped_repair`]), and so is a damaged segment above
//!   the log's recovery point (opening the log would let recovery cut it
//!   and drop every later segment). `applier repair` takes the log dir's
//!   lock: it refuses while `applier run` or `serve` holds it.

// `MirrorError` carries the store's and the log's errors by value.
#![allow(clippy::result_large_err)]

use std::path::Path;

use bucket::store::ManifestStore;
use kafkalog::{LogConfig, LogDir, PartitionLog, TopicPartition};
use manifest::layout::PartitionKey;
use manifest::partition::{PartitionManifest, ShippedRange};
use manifest::state::PartitionState;

use crate::error::{MirrorError, RepairError};
use crate::verify::{PartitionScan, SliceEnd, VerifyRecord};

/// Where `start` cuts a mirror partition whose recorded damage has these
/// cut offsets: the lowest; refused when it lies below the bucket's log
/// start (that range is no longer in the bucket).
pub fn mirror_cut(cuts: &[i64], bucket_log_start: i64) -> Result<Option<i64>, String> {
    let Some(&cut) = cuts.iter().min() else {
        return Ok(None);
    };
    if cut < bucket_log_start {
        return Err(format!(
            "the damage starts at offset {cut}, below the bucket's log start {bucket_log_start}: that range is no longer in the bucket (the source's retention or compaction removed it), so it cannot be fetched again; `applier stop` keeps the partition as it is (damage included), or raise the log start past the damage by hand"
        ));
    }
    Ok(Some(cut))
}

/// PREPARING's first step when damage is recorded for the partition: the
/// cut (see the module doc). Returns the new log end when it cut.
pub fn cut_recorded_damage(
    log: &mut PartitionLog,
    tp: &TopicPartition,
    m: &PartitionManifest,
) -> Result<Option<i64>, MirrorError> {
    let Some(log_dir) = log.dir().parent().map(Path::to_path_buf) else {
        return Ok(None);
    };
    let name = tp.to_string();
    let record = VerifyRecord::read(&log_dir).map_err(|e| MirrorError::Unrepairable {
        tp: tp.clone(),
        reason: format!("{e:#}"),
    })?;
    let cuts: Vec<i64> = record
        .damage_of(&name)
        .iter()
        .filter_map(|d| d.cut_offset)
        .collect();
    let cut =
        mirror_cut(&cuts, m.log_start_offset).map_err(|reason| MirrorError::Unrepairable {
            tp: tp.clone(),
            reason,
        })?;
    let Some(cut) = cut else { return Ok(None) };
    let log_err = |source| MirrorError::Log {
        tp: tp.clone(),
        source,
    };
    let leo_before = log.log_end_offset();
    tracing::warn!(partition = %name, from = leo_before, to = cut, "cutting the damaged local log back to the last good batch; the rest is fetched again from the bucket");
    let mut end = log.truncate_to(cut).map_err(log_err)?;
    // The tail must verify now; else cut to its segment's start.
    for _ in 0..2 {
        let Some(&active) = log.segment_base_offsets().last() else {
            break;
        };
        if tail_verifies(&log_dir, tp, active) {
            break;
        }
        tracing::warn!(partition = %name, segment = active, "the tail still does not verify after the cut: cutting to the segment's start");
        end = log.truncate_to(active).map_err(log_err)?;
    }
    let now = crate::clock::now_ms();
    VerifyRecord::update(&log_dir, |r| {
        r.damage.retain(|d| d.partition != name);
        r.repaired_at_ms.insert(name.clone(), now);
    })
    .map_err(|e| MirrorError::Unrepairable {
        tp: tp.clone(),
        reason: format!("recording the repair: {e:#}"),
    })?;
    tracing::warn!(partition = %name, cut_from = leo_before, log_end = end, "damaged range cut; fetching it again from the bucket");
    Ok(Some(end))
}

/// Whether the partition's segments from `base` on verify.
fn tail_verifies(log_dir: &Path, tp: &TopicPartition, base: i64) -> bool {
    let Ok(scan) = PartitionScan::new(log_dir, tp, None, 0) else {
        return false;
    };
    let mut scan = scan.from_segment(base);
    loop {
        match scan.step(u64::MAX, &mut |_| {}) {
            Ok(SliceEnd::More) => {}
            Ok(SliceEnd::Done) => return scan.counts.mismatches == 0,
            Err(_) => return false,
        }
    }
}

/// Why a STOPPED partition's damaged segment can or cannot be replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentToReplace {
    /// Its base offset.
    pub base: i64,
    /// The next segment's base (the replaced batches must lie below it).
    pub next: i64,
}

/// A STOPPED partition's damaged segment `damaged` among `segments` (base
/// offsets, sorted), with the stop point `stopped_at`: it can be replaced
/// only when it is rolled and lies wholly below the stop point.
pub fn plan_stopped_repair(
    damaged: i64,
    segments: &[i64],
    stopped_at: Option<i64>,
) -> Result<SegmentToReplace, String> {
    let Some(stop) = stopped_at else {
        return Err("no stop point is recorded for this partition: which offsets were mirrored cannot be told from local writes, so nothing is replaced".to_string());
    };
    let Some(i) = segments.iter().position(|&b| b == damaged) else {
        return Err(format!(
            "no segment starts at {damaged} any more (retention or compaction removed it): nothing to repair"
        ));
    };
    let Some(&next) = segments.get(i + 1) else {
        return Err(format!(
            "the damaged segment at {damaged} is the active segment (it takes the local writes after the stop at {stop}): replacing it from the bucket would cut them; copy the records you need out of it, or roll the log first"
        ));
    };
    if next > stop {
        return Err(format!(
            "the damaged segment at {damaged} holds offsets up to {} and the stop point is {stop}: it holds local writes after the stop, which the bucket does not have; replacing it would cut them",
            next - 1
        ));
    }
    Ok(SegmentToReplace {
        base: damaged,
        next,
    })
}

/// The ranges that rebuild segment `base` (generation `generation`): all
/// of them, in order, contiguous enough to be one segment, the last one
/// completing it, none at or past `next`.
pub fn ranges_for_segment(
    ranges: &[ShippedRange],
    base: i64,
    next: i64,
    generation: u32,
) -> Result<Vec<ShippedRange>, String> {
    let mut picked: Vec<ShippedRange> = ranges
        .iter()
        .filter(|r| r.segment_base_offset == base && r.segment_generation == generation)
        .cloned()
        .collect();
    picked.sort_by_key(|r| r.base_offset);
    let Some(last) = picked.last() else {
        return Err(format!(
            "the bucket has no range of segment {base} (generation {generation}) any more"
        ));
    };
    if !last.completes_segment || last.last_offset >= next {
        return Err(format!(
            "the bucket's ranges of segment {base} end at {} and do not complete it below {next}",
            last.last_offset
        ));
    }
    for w in picked.windows(2) {
        if w[1].base_offset <= w[0].last_offset {
            return Err(format!(
                "the bucket's ranges of segment {base} overlap at {}",
                w[1].base_offset
            ));
        }
    }
    Ok(picked)
}

/// What `applier repair` did to one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repaired {
    /// Segments replaced from the bucket.
    pub segments: Vec<i64>,
    /// Bytes written.
    pub bytes: u64,
}

/// `applier repair` of one STOPPED partition: verifies it, and replaces
/// every damaged segment below the stop point from the bucket (see the
/// module doc); refuses what it cannot repair without cutting local writes.
pub async fn repair_stopped(
    log_dir: &Path,
    store: &ManifestStore,
    tp: &TopicPartition,
) -> Result<Repaired, RepairError> {
    let logdir = LogDir::open(log_dir).map_err(|e| match e {
        kafkalog::Error::Locked { .. } => RepairError::Refused(format!(
            "{e}: `applier repair` needs the log dir alone; stop `applier run`/`serve` first (the damage stays reported meanwhile)"
        )),
        e => e.into(),
    })?;
    let dir = log_dir.join(tp.dir_name());
    let record = partdir::record::read(&dir)?.ok_or_else(|| {
        RepairError::Refused(format!(
            "{tp} is not a mirror partition: nothing in the bucket to repair it from"
        ))
    })?;
    let state = record.state.state();
    if state != PartitionState::Stopped {
        return Err(RepairError::Refused(format!(
            "{tp} is {}: a mirror partition is repaired by `applier start` (the damage fails it; start cuts the damaged range and fetches it again); `applier repair` is for STOPPED partitions",
            state.as_str()
        )));
    }
    let now = crate::clock::now_ms();
    let scan = {
        let mut s = PartitionScan::new(log_dir, tp, None, now)?;
        while s.step(u64::MAX, &mut |_| {})? == SliceEnd::More {}
        s
    };
    let damaged: std::collections::BTreeSet<i64> =
        scan.mismatches.iter().filter_map(|m| m.segment).collect();
    if damaged.is_empty() {
        VerifyRecord::update(log_dir, |r| {
            r.damage.retain(|d| d.partition != tp.to_string())
        })?;
        return Ok(Repaired {
            segments: Vec::new(),
            bytes: 0,
        });
    }
    // Planned from the files, before the log is opened (opening recovers
    // a damaged active segment by cutting it: local writes).
    let segments = kafkalog::segment::list_segments(&dir)?;
    let mut plans = Vec::new();
    for &base in &damaged {
        plans.push(
            plan_stopped_repair(base, &segments, record.stopped_at_offset)
                .map_err(|e| RepairError::Refused(format!("{tp}: segment {base}: {e}")))?,
        );
    }
    // Opening the log runs recovery over the segments above the recovery
    // point, which cuts at a corrupt batch and drops every later segment:
    // refused unless every damaged segment lies below it.
    let recovery_point = kafkalog::checkpoint::read_offset_checkpoint(
        &log_dir.join(kafkalog::checkpoint::RECOVERY_POINT_OFFSET_CHECKPOINT),
    )?
    .get(tp)
    .copied()
    .unwrap_or(0);
    if let Some(p) = plans.iter().find(|p| p.next > recovery_point) {
        return Err(RepairError::Refused(format!(
            "{tp}: segment {} ends at {} above the log's recovery point {recovery_point}: opening the log would let its recovery cut the damaged batch and every segment after it (local writes); flush the log first (a clean `applier run` stop does), then repair",
            p.base,
            p.next - 1
        )));
    }
    let pk = PartitionKey {
        tp: tp.clone(),
        topic_id: record.topic_id,
    };
    let m = store.newest_manifest(&pk).await?.ok_or_else(|| {
        RepairError::Refused(format!(
            "{tp}: the bucket has no manifest of this partition"
        ))
    })?;
    let mut ranges = Vec::new();
    for page in &m.pages {
        ranges.extend(store.get_page(&page.key).await?.ranges);
    }
    ranges.extend(m.ranges.iter().cloned());
    let mut log = logdir.open_partition(tp, LogConfig::default())?;
    let mut done = Repaired {
        segments: Vec::new(),
        bytes: 0,
    };
    for p in plans {
        let generation = record
            .segment_generations
            .get(&p.base)
            .copied()
            .unwrap_or(0);
        let picked = ranges_for_segment(&ranges, p.base, p.next, generation)
            .map_err(|e| RepairError::Refused(format!("{tp}: {e}")))?;
        let picked: Vec<&ShippedRange> = picked.iter().collect();
        let bytes = crate::bucket_reader::fetch_verified(store, tp, &picked).await?;
        tracing::warn!(partition = %tp, segment = p.base, objects = picked.len(), bytes = bytes.len(), "replacing the damaged segment with its copy from the bucket");
        log.replace_segment(p.base, &bytes)?;
        done.segments.push(p.base);
        done.bytes += bytes.len() as u64;
    }
    log.flush()?;
    log.close()?;
    drop(logdir);
    // What it holds now.
    let after = {
        let mut s = PartitionScan::new(log_dir, tp, None, crate::clock::now_ms())?;
        while s.step(u64::MAX, &mut |_| {})? == SliceEnd::More {}
        s
    };
    let name = tp.to_string();
    VerifyRecord::update(log_dir, |r| {
        r.damage.retain(|d| d.partition != name);
        r.add_damage(&after.mismatches);
        r.repaired_at_ms
            .insert(name.clone(), crate::clock::now_ms());
    })?;
    if let Some(first) = after.mismatches.first() {
        return Err(RepairError::Refused(format!(
            "{tp}: still damaged after the repair: {first}"
        )));
    }
    Ok(done)
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

    // --- (cuts recorded, bucket log start) -> where `start` cuts, or a
    // refusal

    fn check_mirror_cut((cuts, start): (&[i64], i64), want: Result<Option<i64>, ()>) {
        assert_eq!(mirror_cut(cuts, start).map_err(|_| ()), want);
    }

    rows! { check_mirror_cut;
        no_damage_recorded_cuts_nothing: (&[], 0) => Ok(None);
        one_damage_is_cut_at_its_boundary: (&[40], 0) => Ok(Some(40));
        several_damages_are_cut_at_the_lowest: (&[90, 40, 70], 0) => Ok(Some(40));
        damage_at_the_buckets_log_start_is_cut: (&[40], 40) => Ok(Some(40));
        damage_below_the_buckets_log_start_is_refused: (&[40], 41) => Err(());
        the_lowest_damage_below_the_buckets_log_start_is_refused: (&[90, 40], 50) => Err(());
    }

    // --- a STOPPED partition with segments 0, 100, 200: (damaged segment,
    // stop point) -> the segment replaced (base, next), or a refusal

    fn check_stopped_repair((damaged, stop): (i64, Option<i64>), want: Result<(i64, i64), ()>) {
        let got = plan_stopped_repair(damaged, &[0, 100, 200], stop)
            .map(|s| (s.base, s.next))
            .map_err(|_| ());
        assert_eq!(got, want);
    }

    rows! { check_stopped_repair;
        the_first_segment_below_the_stop_point_is_replaced: (0, Some(250)) => Ok((0, 100));
        a_middle_segment_below_the_stop_point_is_replaced: (100, Some(250)) => Ok((100, 200));
        a_segment_ending_at_the_stop_point_is_replaced: (100, Some(200)) => Ok((100, 200));
        a_segment_holding_the_stop_point_keeps_its_local_writes: (100, Some(150)) => Err(());
        the_active_segment_takes_the_local_writes_and_is_refused: (200, Some(250)) => Err(());
        the_active_segment_at_the_stop_point_is_refused: (200, Some(200)) => Err(());
        without_a_stop_point_mirrored_and_local_cannot_be_told_apart: (0, None) => Err(());
        a_segment_gone_since_is_refused: (50, Some(250)) => Err(());
    }

    fn range(seg: i64, base: i64, last: i64, gen_: u32, completes: bool) -> ShippedRange {
        ShippedRange {
            completes_segment: completes,
            ..crate::mirror::apply_plan::test_range(seg, base, last, gen_)
        }
    }

    #[test]
    fn a_segment_is_rebuilt_from_all_its_ranges_of_the_applied_generation() {
        let ranges = vec![
            range(0, 0, 49, 0, false),
            range(0, 50, 99, 0, true),
            range(0, 0, 99, 1, true),
            range(100, 100, 149, 0, false),
        ];
        let got = ranges_for_segment(&ranges, 0, 100, 0).expect("gen 0");
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].base_offset, 50);
        assert_eq!(
            ranges_for_segment(&ranges, 0, 100, 1).expect("gen 1").len(),
            1
        );
        assert!(
            ranges_for_segment(&ranges, 100, 200, 0).is_err(),
            "not complete"
        );
        assert!(
            ranges_for_segment(&ranges, 0, 100, 2).is_err(),
            "no such generation"
        );
        assert!(
            ranges_for_segment(&ranges, 0, 60, 0).is_err(),
            "past the next segment"
        );
    }
}
