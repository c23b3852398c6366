//! Harness 2 (short): 10% of every request kind fails, plus latency,
//! dropped manifest writes, lost answers and truncated bodies; the shipper
//! and applier converge with nothing lost or duplicated.

use std::sync::Arc;

use object_store::memory::InMemory;
use segmirror_reliability::faults::{FaultOptions, run};
use segmirror_reliability::pair::PairOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_percent_store_faults_converge_with_nothing_lost() {
    let o = FaultOptions {
        rounds: 40,
        ..FaultOptions::default()
    };
    converges(&o, &PairOptions::default()).await;
}

/// The same against layout 2 (packs and head deltas, issue 30): a failed
/// or unanswered pack PUT, a lost head answer and truncated ranged GETs of
/// a pack converge with nothing lost or duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_percent_store_faults_with_packs_and_head_deltas_converge_with_nothing_lost() {
    let o = FaultOptions {
        rounds: 40,
        seed: 30,
        ..FaultOptions::default()
    };
    let p = PairOptions {
        layout2: (1 << 20, true),
        ..PairOptions::default()
    };
    converges(&o, &p).await;
}

/// Layout 2 with compaction every 4 cycles, written in the background and
/// committed by a later cycle (as under `shipper run`): failed, lost and
/// truncated reads of the ranges to compact, failed writes of compacted
/// packs and lost answers of the heads that commit them converge with
/// nothing lost or duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_percent_store_faults_with_compaction_in_the_background_converge_with_nothing_lost() {
    let o = FaultOptions {
        rounds: 40,
        seed: 31,
        ..FaultOptions::default()
    };
    let p = PairOptions {
        layout2: (1 << 20, true),
        compact_ranges: Some(4),
        background_compaction: true,
        ..PairOptions::default()
    };
    let r = converges(&o, &p).await;
    assert!(r.trouble.compacted_ranges > 0, "{}", r.render());
}

/// Runs the harness on an in-memory bucket: it converges, with faults
/// injected.
async fn converges(
    o: &FaultOptions,
    p: &PairOptions,
) -> segmirror_reliability::faults::FaultReport {
    let r = run(o, Arc::new(InMemory::new()), p).await.expect("harness");
    println!("{}", r.render());
    assert!(r.passed(), "{}", r.render());
    assert!(r.shipper_faults.injected() + r.applier_faults.injected() > 0);
    r
}
