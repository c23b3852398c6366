//! Harness 2: injected store faults, in process.
//!
//! A source keeps growing while a shipper and an applier (the libraries,
//! one cycle each per round) talk to the bucket through their own
//! [`FaultyStore`]: a share of every request kind fails, every request is
//! delayed, manifest writes are dropped after their objects succeeded,
//! manifest and head answers are lost after the write, and GET bodies come
//! back truncated. Then production stops and the pair cycles until it has
//! converged. The run passes when the destination is byte-identical to the
//! source, nothing was lost or duplicated, and no truncated body was
//! applied (every one was refused: a short data object fails its size and
//! CRC-32C check, a short JSON object does not parse).

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::ObjectStore;

use crate::faulty::{FaultPlan, FaultStats, FaultyStore, KeyClass, Kind};
use crate::pair::{Outcome, Pair, PairOptions, Trouble};
use crate::source::SourceSpec;

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct FaultOptions {
    /// Seed of production and fault decisions.
    pub seed: u64,
    /// Partitions.
    pub partitions: usize,
    /// Rounds of production (each: batches to every partition, one ship
    /// cycle, one apply cycle).
    pub rounds: u64,
    /// Batches per partition per round.
    pub batches_per_round: usize,
    /// Share of each request kind that fails.
    pub fail: f64,
    /// Latency range added to every request.
    pub latency: (Duration, Duration),
    /// Share of manifest writes dropped.
    pub drop_manifest: f64,
    /// Share of manifest/head answers lost after the write.
    pub lost_ack: f64,
    /// Share of GET bodies truncated.
    pub truncate: f64,
    /// Most convergence cycles after production stops.
    pub max_converge_cycles: u64,
}

impl Default for FaultOptions {
    fn default() -> Self {
        FaultOptions {
            seed: 1,
            partitions: 3,
            rounds: 60,
            batches_per_round: 4,
            fail: 0.10,
            latency: (Duration::ZERO, Duration::from_millis(2)),
            drop_manifest: 0.05,
            lost_ack: 0.05,
            truncate: 0.02,
            max_converge_cycles: 2000,
        }
    }
}

impl FaultOptions {
    /// The plan for one side (the seed differs per side).
    pub fn plan(&self, side: u64) -> FaultPlan {
        let mut p = FaultPlan::uniform(self.seed.wrapping_mul(31).wrapping_add(side), self.fail);
        p.latency = self.latency;
        p.drop_manifest = self.drop_manifest;
        p.lost_ack = self.lost_ack;
        p.truncate = self.truncate;
        p
    }
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct FaultReport {
    /// The settings.
    pub options: FaultOptions,
    /// Faults injected into the shipper's requests.
    pub shipper_faults: FaultStats,
    /// Faults injected into the applier's requests.
    pub applier_faults: FaultStats,
    /// Errors and retries as the services saw them.
    pub trouble: Trouble,
    /// Converged within the cycle budget.
    pub converged: bool,
    /// Cycles after production stopped.
    pub converge_cycles: u64,
    /// Batches produced.
    pub batches_produced: u64,
    /// The end state.
    pub outcome: Outcome,
    /// Truncated bodies named by an error (detected and attributed).
    pub truncations_attributed: u64,
    /// Why it did not converge, per partition (empty when it did).
    pub diagnosis: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
}

impl FaultReport {
    /// Converged, clean, every truncated body refused.
    pub fn passed(&self) -> bool {
        self.converged && self.outcome.is_clean()
    }

    /// The figures, one per line.
    pub fn render(&self) -> String {
        let o = &self.options;
        let t = &self.trouble;
        let a = &self.outcome.accounting;
        let truncated = self.shipper_faults.truncated.values().sum::<u64>()
            + self.applier_faults.truncated.values().sum::<u64>();
        let mut out = String::new();
        out.push_str(&format!(
            "store faults: seed {}, {} partitions, {} rounds x {} batches, fail {:.0}% of every request kind, latency {:?}..{:?}, dropped manifests {:.0}%, lost answers {:.0}%, truncated bodies {:.0}%\n",
            o.seed,
            o.partitions,
            o.rounds,
            o.batches_per_round,
            o.fail * 100.0,
            o.latency.0,
            o.latency.1,
            o.drop_manifest * 100.0,
            o.lost_ack * 100.0,
            o.truncate * 100.0
        ));
        out.push_str(&format!("  shipper side: {}\n", self.shipper_faults));
        out.push_str(&format!("  applier side: {}\n", self.applier_faults));
        out.push_str(&format!(
            "  shipper: {} cycles, {} with errors ({} errors), every one retried by a later cycle; {} packed ranges compacted\n",
            t.shipper_cycles, t.shipper_cycles_with_errors, t.shipper_errors, t.compacted_ranges
        ));
        out.push_str(&format!(
            "  applier: {} cycles, {} retryable failures, {} automatic retries back to work, {} operator restarts (a non-retryable FAILED: a truncated body fails its size/CRC-32C or JSON check)\n",
            t.applier_cycles,
            t.applier_retryable_failures,
            t.applier_automatic_retries,
            t.operator_restarts.len()
        ));
        let mut reasons: Vec<String> = t
            .operator_restarts
            .iter()
            .map(|m| short_reason(m))
            .collect();
        reasons.sort();
        reasons.dedup();
        for r in reasons.iter().take(6) {
            out.push_str(&format!("    operator restart after: {r}\n"));
        }
        let heads = |f: &FaultStats| f.truncated.get(&KeyClass::Head).copied().unwrap_or(0);
        let head_truncations = heads(&self.shipper_faults) + heads(&self.applier_faults);
        out.push_str(&format!(
            "  truncated bodies: {truncated} injected; of the {} data/manifest/page bodies {} were refused by an error naming the object; the {head_truncations} head bodies fail to decode and the feed is read again next cycle; none applied (checked below)\n",
            truncated - head_truncations,
            self.truncations_attributed
        ));
        out.push_str(&format!(
            "  converged: {} after {} cycles once production stopped; {} batches produced, {} compared\n",
            if self.converged { "yes" } else { "NO" },
            self.converge_cycles,
            self.batches_produced,
            a.source_batches
        ));
        out.push_str(&format!(
            "  batches lost {}, duplicated {}, foreign {}, misplaced {}; compare: {}; verify: {}\n",
            a.lost,
            a.duplicated,
            a.foreign,
            a.misplaced,
            summarize_compare(&self.outcome.compare),
            match &self.outcome.verify {
                Ok(n) => format!("ok ({n} batches)"),
                Err(e) => format!("FAILED: {e}"),
            }
        ));
        for d in &self.diagnosis {
            out.push_str(&format!("  not converged: {d}\n"));
        }
        out.push_str(&format!(
            "  result: {} in {:.1} s\n",
            if self.passed() { "PASS" } else { "FAIL" },
            self.elapsed.as_secs_f64()
        ));
        out
    }
}

/// The kind of an error message, without keys and numbers.
pub fn short_reason(m: &str) -> String {
    let m = m.split_once(": ").map_or(m, |(_, r)| r);
    let cut: String = m
        .split_whitespace()
        .filter(|w| !w.contains('/') && !w.chars().any(|c| c.is_ascii_digit()))
        .take(8)
        .collect::<Vec<_>>()
        .join(" ");
    cut
}

/// `identical` when every partition is, else the first other answer.
pub fn summarize_compare(c: &[(String, String)]) -> String {
    match c.iter().find(|(_, v)| v != "identical") {
        None => format!("identical ({} partitions)", c.len()),
        Some((tp, v)) => format!("{tp}: {v}"),
    }
}

/// Runs the harness over `bucket` (a fresh, empty bucket or prefix):
/// the shipper and the applier each talk to it through their own
/// [`FaultyStore`] with `o`'s plan.
pub async fn run(
    o: &FaultOptions,
    bucket: Arc<dyn ObjectStore>,
    pair_options: &PairOptions,
) -> anyhow::Result<FaultReport> {
    let shipper_store = FaultyStore::new(Arc::clone(&bucket), o.plan(1));
    let applier_store = FaultyStore::new(Arc::clone(&bucket), o.plan(2));
    run_with(o, bucket, shipper_store, applier_store, pair_options).await
}

/// Runs the harness with the given stores (`bucket` is only read to
/// explain a failure to converge).
pub async fn run_with(
    o: &FaultOptions,
    bucket: Arc<dyn ObjectStore>,
    shipper_store: FaultyStore,
    applier_store: FaultyStore,
    pair_options: &PairOptions,
) -> anyhow::Result<FaultReport> {
    let started = Instant::now();
    let dir = crate::scratch_dir()?;
    let mut pair = Pair::new(
        dir.path(),
        SourceSpec::small(o.partitions),
        Arc::clone(&bucket),
        shipper_store.as_dyn(),
        applier_store.as_dyn(),
        pair_options,
    )?;
    let mut produced = 0u64;
    for _ in 0..o.rounds {
        pair.writer.round(o.batches_per_round)?;
        produced += (o.batches_per_round * o.partitions) as u64;
        pair.cycle().await;
    }
    let (converged, cycles) = pair
        .converge(o.max_converge_cycles, Duration::from_millis(1))
        .await;
    let outcome = pair.outcome()?;
    let diagnosis = if converged {
        Vec::new()
    } else {
        pair.diagnose().await
    };
    let shipper_faults = shipper_store.stats();
    let applier_faults = applier_store.stats();
    let attributed = shipper_faults
        .truncated_keys
        .iter()
        .chain(applier_faults.truncated_keys.iter())
        .filter(|k| KeyClass::of(k) != KeyClass::Head)
        .filter(|k| pair.trouble.messages.iter().any(|m| m.contains(k.as_str())))
        .count() as u64;
    Ok(FaultReport {
        options: o.clone(),
        shipper_faults,
        applier_faults,
        trouble: pair.trouble.clone(),
        converged,
        converge_cycles: cycles,
        batches_produced: produced,
        outcome,
        truncations_attributed: attributed,
        diagnosis,
        elapsed: started.elapsed(),
    })
}

/// Failed requests of a kind, over both sides.
pub fn failed_of(r: &FaultReport, k: Kind) -> u64 {
    r.shipper_faults.failed.get(&k).copied().unwrap_or(0)
        + r.applier_faults.failed.get(&k).copied().unwrap_or(0)
}
