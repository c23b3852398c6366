//! The scrub: `applier run` verifies the local log continuously, as
//! `applier verify` does once (`crate::verify`), within a byte budget per
//! hour (`scrub_bytes_per_hour`, default [`DEFAULT_BYTES_PER_HOUR`]; 0
//! turns it off).
//!
//! Each cycle the engine gives the scrub the time elapsed; the scrub earns
//! that share of the hourly budget ([`allowance`]: never more than
//! [`BURST_SECONDS`] of it at once, so a stalled loop does not burst) and
//! reads that many bytes of the next partition from where it left off
//! (batch boundaries), partition after partition; when the last one is
//! done a pass is complete, recorded durably in
//! `<log-dir>/.segmirror/verify.json` (`status` shows it without a daemon),
//! and the next pass begins. The position is kept in memory only: after a
//! restart of the process the scrub begins a new pass from the first
//! partition.
//!
//! After each complete pass, [`OBJECTS_PER_PASS`] bucket objects (among
//! the current ranges of the manifests the applier holds) are checked
//! against their manifest entries; damage there is reported, never fails
//! a partition (`applier verify --bucket` samples more).
//!
//! What a mismatch means depends on the partition's state
//! ([`consequence`]): a mirror partition (PREPARING, MIRRORING, PAUSED)
//! is failed (FAILED, not retried) with the file and offset named, and
//! `applier start` cuts its log back to the damaged batch's boundary and
//! fetches the rest from the bucket (`crate::repair`); a STOPPED
//! partition is a primary taking writes and is never failed by the scrub:
//! the damage is recorded (status, metric), and `applier repair` replaces
//! a damaged segment below the stop point from the bucket. Every
//! mismatch is confirmed by a fresh read of its segment before it is
//! reported (`crate::verify`), and a partition where a mismatch is found
//! is read again from its start (fresh epoch checkpoint and segment list)
//! before anything is reported or failed: only what the second read finds
//! counts, so a truncation between two slices (the engine cuts and
//! appends between them) is never taken for damage. The scrub reads in
//! the engine's own loop, so nothing changes under a slice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

use kafkalog::TopicPartition;
use manifest::state::PartitionState;

use crate::error::MirrorError;
use crate::verify::{Counts, Mismatch, PartitionScan, SliceEnd, VerifyRecord};

/// Default budget: 1 GiB per hour (about 300 KB per second).
pub const DEFAULT_BYTES_PER_HOUR: u64 = 1 << 30;

/// The most budget held unspent, in seconds of the rate.
pub const BURST_SECONDS: f64 = 10.0;

/// The least budget a step may take, so that a small rate still moves.
const MIN_STEP: u64 = 64 << 10;

/// Bucket objects checked after each complete pass (size and CRC-32C
/// against the manifest), among the ranges of the manifests the applier
/// holds; their bytes count against the budget.
pub const OBJECTS_PER_PASS: u64 = 4;

/// What a local mismatch does to a partition in `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consequence {
    /// A mirror (its data is in the bucket): FAILED, repaired by `start`.
    Fail,
    /// A primary (STOPPED), a failover in progress, or already FAILED:
    /// reported (status, metric, `verify`'s exit code), never failed.
    Report,
}

/// See [`Consequence`].
pub fn consequence(state: PartitionState) -> Consequence {
    match state {
        PartitionState::Preparing | PartitionState::Mirroring | PartitionState::Paused => {
            Consequence::Fail
        }
        PartitionState::Stopping | PartitionState::Stopped | PartitionState::Failed => {
            Consequence::Report
        }
    }
}

/// The budget held after `elapsed_s` seconds at `bytes_per_hour`, starting
/// from `held` (capped at [`BURST_SECONDS`] of the rate, at least one
/// minimum step).
pub fn allowance(held: f64, elapsed_s: f64, bytes_per_hour: u64) -> f64 {
    let rate = bytes_per_hour as f64 / 3600.0;
    let cap = (rate * BURST_SECONDS).max(MIN_STEP as f64);
    (held + elapsed_s.max(0.0) * rate).min(cap)
}

/// The error a local mismatch fails a mirror partition with.
pub fn damage_error(tp: &TopicPartition, m: &Mismatch) -> MirrorError {
    MirrorError::LocalDamage {
        tp: tp.clone(),
        detail: m.to_string(),
        cut_offset: m.cut_offset.unwrap_or(0),
    }
}

/// The failures that recorded damage (from `applier verify`, or a scrub
/// before a restart) means for the mirror partitions in `states`: the
/// partitions to fail when the applier opens.
pub fn recorded_failures(
    log_dir: &Path,
    states: &BTreeMap<TopicPartition, PartitionState>,
) -> Vec<(TopicPartition, MirrorError)> {
    let record = match VerifyRecord::read(log_dir) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the verify record");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (tp, state) in states {
        // A PREPARING partition's preparation cuts the damage first
        // (`crate::repair`): nothing to fail.
        if consequence(*state) != Consequence::Fail || *state == PartitionState::Preparing {
            continue;
        }
        if let Some(first) = record
            .damage_of(&tp.to_string())
            .into_iter()
            .min_by_key(|m| m.cut_offset)
        {
            out.push((tp.clone(), damage_error(tp, first)));
        }
    }
    out
}

/// What the scrub exposes as metrics.
#[derive(Debug, Clone, Default)]
pub struct ScrubStats {
    /// When a pass last completed (ms).
    pub last_complete_pass_ms: Option<i64>,
    /// Bytes verified since the process started.
    pub bytes_verified: u64,
    /// Mismatches found since the process started, per partition.
    pub mismatches: BTreeMap<String, u64>,
    /// Passes completed since the process started.
    pub passes: u64,
    /// Bucket objects checked since the process started.
    pub objects_verified: u64,
}

/// The scrub's position and budget.
#[derive(Debug)]
pub struct Scrub {
    bytes_per_hour: u64,
    held: f64,
    last_tick: Option<Instant>,
    /// Partitions still to verify in this pass.
    queue: Vec<TopicPartition>,
    current: Option<PartitionScan>,
    /// The current scan re-reads a partition from its start because the
    /// previous one found a mismatch: only what this one finds again is
    /// reported (the first may have raced a truncation or a replaced
    /// segment).
    confirming: bool,
    /// A pass completed: objects are to be sampled.
    objects_due: bool,
    pass: Counts,
    pass_found: Vec<Mismatch>,
    pass_partitions: BTreeSet<String>,
    /// What it found and covered.
    pub stats: ScrubStats,
}

impl Scrub {
    /// A scrub at `bytes_per_hour` (None for 0: off).
    pub fn new(bytes_per_hour: u64) -> Option<Scrub> {
        (bytes_per_hour > 0).then(|| Scrub {
            bytes_per_hour,
            held: 0.0,
            last_tick: None,
            queue: Vec::new(),
            current: None,
            confirming: false,
            objects_due: false,
            pass: Counts::default(),
            pass_found: Vec::new(),
            pass_partitions: BTreeSet::new(),
            stats: ScrubStats::default(),
        })
    }

    /// One cycle's share: verifies what the budget earned since the last
    /// call, over the mirror partitions (`partitions` lists them when a
    /// pass begins; `state_of` says each one's state now, None once it is
    /// gone), so that a cycle costs nothing per partition. Returns the
    /// partitions to fail (their [`consequence`] is `Fail`).
    pub fn step(
        &mut self,
        log_dir: &Path,
        partitions: &dyn Fn() -> Vec<TopicPartition>,
        state_of: &dyn Fn(&TopicPartition) -> Option<PartitionState>,
        now: Instant,
        now_ms: i64,
    ) -> Vec<(TopicPartition, MirrorError)> {
        let elapsed = self
            .last_tick
            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
        self.last_tick = Some(now);
        self.held = allowance(self.held, elapsed, self.bytes_per_hour);
        let mut to_fail = Vec::new();
        let mut budget = self.held as u64;
        if budget < MIN_STEP.min((self.bytes_per_hour / 3600).max(1)) {
            return to_fail;
        }
        while budget > 0 {
            if self.current.is_none() {
                if self.queue.is_empty() && !self.pass_partitions.is_empty() {
                    self.complete_pass(log_dir, now_ms);
                    break;
                }
                if self.queue.is_empty() {
                    // A new pass: the partitions as they are now, last first
                    // (popped from the end).
                    self.queue = partitions();
                    self.queue.reverse();
                    if self.queue.is_empty() {
                        break;
                    }
                }
                let Some(tp) = self.queue.pop() else { break };
                if state_of(&tp).is_none() {
                    continue;
                }
                match PartitionScan::new(log_dir, &tp, None, now_ms) {
                    Ok(s) => self.current = Some(s),
                    // Deleted since the pass began.
                    Err(kafkalog::Error::NoSuchPartition { .. }) => continue,
                    Err(e) => {
                        tracing::warn!(partition = %tp, error = %e, "scrub: cannot read the partition; next pass");
                        continue;
                    }
                }
            }
            let Some(scan) = self.current.as_mut() else {
                break;
            };
            let found_before = scan.mismatches.len();
            let mut read = 0u64;
            let end = scan.step(budget, &mut |n| read += n);
            budget = budget.saturating_sub(read.max(1));
            self.held = (self.held - read as f64).max(0.0);
            self.stats.bytes_verified += read;
            let new: Vec<Mismatch> = scan.mismatches[found_before..].to_vec();
            let tp = scan.tp.clone();
            if !new.is_empty() && !self.confirming {
                // Read the partition again from a fresh start (its epoch
                // checkpoint and segments as they are now) before
                // reporting anything.
                tracing::info!(partition = %tp, suspect = %new[0], "scrub: a mismatch; reading the partition again to confirm it");
                self.confirming = true;
                self.current = PartitionScan::new(log_dir, &tp, None, now_ms).ok();
                continue;
            }
            if !new.is_empty() {
                *self.stats.mismatches.entry(tp.to_string()).or_default() += new.len() as u64;
                for m in &new {
                    tracing::error!(partition = %tp, mismatch = %m, "scrub: local log damaged");
                }
                if let Err(e) = VerifyRecord::update(log_dir, |r| r.add_damage(&new)) {
                    tracing::error!(error = %e, "scrub: cannot record the damage found");
                }
                if let Some(state) = state_of(&tp)
                    && consequence(state) == Consequence::Fail
                    && let Some(first) = new.iter().min_by_key(|m| m.cut_offset)
                {
                    to_fail.push((tp.clone(), damage_error(&tp, first)));
                }
            }
            match end {
                Ok(SliceEnd::More) => {}
                Ok(SliceEnd::Done) => self.finish_partition(),
                Err(e) => {
                    tracing::warn!(partition = %tp, error = %e, "scrub: reading the partition failed; it is read again next pass");
                    self.current = None;
                    self.confirming = false;
                }
            }
        }
        to_fail
    }

    /// How many objects to sample now (after a complete pass, once).
    pub fn objects_due(&mut self) -> u64 {
        if std::mem::take(&mut self.objects_due) {
            OBJECTS_PER_PASS
        } else {
            0
        }
    }

    /// Checks `n` of `candidates` (the current ranges of the manifests the
    /// applier holds) against their manifest entries; a mismatch is
    /// reported (status, metric), never failing a partition: the local log
    /// is what mirrors serve, and the object is only needed to restore.
    pub async fn check_objects(
        &mut self,
        log_dir: &Path,
        store: &bucket::store::ManifestStore,
        candidates: &[(TopicPartition, manifest::partition::ShippedRange)],
        n: u64,
        now_ms: i64,
    ) {
        let keys: Vec<&str> = candidates.iter().map(|(_, r)| r.key.as_str()).collect();
        let mut found = Vec::new();
        for i in crate::verify::pick_sample(&keys, n, now_ms as u64) {
            let (tp, r) = &candidates[i];
            let message = match store.get_in(&r.key, r.object_range()).await {
                Ok(bytes) => {
                    self.stats.objects_verified += 1;
                    self.stats.bytes_verified += bytes.len() as u64;
                    self.held = (self.held - bytes.len() as f64).max(0.0);
                    match manifest::range_check::verify_object(r, &bytes) {
                        Ok(()) => continue,
                        Err(e) => e.detail,
                    }
                }
                // Swept since (retention at the source), or not there yet.
                Err(bucket::store::StoreError::NotFound { .. }) => continue,
                Err(e) => {
                    tracing::warn!(key = %r.key, error = %e, "scrub: cannot read an object to check it; next pass");
                    continue;
                }
            };
            tracing::error!(partition = %tp, key = %r.key, %message, "scrub: bucket object damaged");
            *self.stats.mismatches.entry(tp.to_string()).or_default() += 1;
            found.push(Mismatch::object(tp, r, message, now_ms));
        }
        if let Err(e) = VerifyRecord::update(log_dir, |rec| rec.object_damage = found) {
            tracing::error!(error = %e, "scrub: cannot record the objects checked");
        }
    }

    fn finish_partition(&mut self) {
        self.confirming = false;
        if let Some(scan) = self.current.take() {
            self.pass.add(&scan.counts);
            self.pass_partitions.insert(scan.tp.to_string());
            self.pass_found.extend(scan.mismatches);
        }
    }

    fn complete_pass(&mut self, log_dir: &Path, now_ms: i64) {
        let counts = std::mem::take(&mut self.pass);
        let found = std::mem::take(&mut self.pass_found);
        let partitions = std::mem::take(&mut self.pass_partitions);
        let written = VerifyRecord::update(log_dir, |r| {
            r.pass_completed(&crate::verify::Pass {
                partitions: &partitions,
                found: &found,
                counts,
                by: "scrub",
                now_ms,
                complete: true,
                sampled_objects: false,
            });
        });
        if let Err(e) = written {
            tracing::error!(error = %e, "scrub: cannot record the completed pass");
        }
        self.stats.last_complete_pass_ms = Some(now_ms);
        self.stats.passes += 1;
        self.objects_due = true;
        tracing::info!(summary = %counts.summary(), "scrub: pass complete");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mirror_partition_is_failed_by_a_local_mismatch() {
        let table = [
            (PartitionState::Preparing, Consequence::Fail),
            (PartitionState::Mirroring, Consequence::Fail),
            (PartitionState::Paused, Consequence::Fail),
            (PartitionState::Stopping, Consequence::Report),
            (PartitionState::Stopped, Consequence::Report),
            (PartitionState::Failed, Consequence::Report),
        ];
        assert_eq!(
            table.len(),
            PartitionState::ALL.len(),
            "every state decided"
        );
        for (state, want) in table {
            assert_eq!(consequence(state), want, "{state:?}");
        }
    }

    #[test]
    fn the_budget_accrues_with_time_and_never_bursts() {
        let gib = 1u64 << 30;
        let rate = gib as f64 / 3600.0;
        // (held, elapsed s, bytes per hour) -> held after
        let table: &[(f64, f64, u64, f64)] = &[
            (0.0, 0.0, gib, 0.0),
            (0.0, 1.0, gib, rate),
            (0.0, 3600.0, gib, rate * BURST_SECONDS),
            (100.0, 2.0, gib, 100.0 + 2.0 * rate),
            // A tiny rate accrues slowly, and may hold one minimum step.
            (0.0, 3600.0, 3600, 3600.0),
            (0.0, 360_000.0, 3600, MIN_STEP as f64),
            (0.0, -5.0, gib, 0.0),
        ];
        for &(held, el, bph, want) in table {
            let got = allowance(held, el, bph);
            assert!(
                (got - want).abs() < 1e-6,
                "{held} {el} {bph}: {got} != {want}"
            );
        }
    }

    #[test]
    fn a_zero_budget_is_no_scrub() {
        assert!(Scrub::new(0).is_none());
        assert!(Scrub::new(1).is_some());
    }
}
