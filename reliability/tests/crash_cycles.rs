//! Harness 1 (short): kill -9 cycles of `shipper run` and `applier run`
//! under continuous production; nothing lost, nothing duplicated, the
//! destination identical to the source up to the shipped end.
//! `SEGMIRROR_RELIABILITY_CYCLES` overrides the 10 cycles.

use segmirror_reliability::bins::Bins;
use segmirror_reliability::crash::{CrashOptions, run};

/// Layout 1 (an object and a manifest version per range: `--pack-below 0
/// --head-deltas false`), as buckets written before layout 2 was the
/// default keep.
#[test]
fn kill_9_cycles_lose_and_duplicate_nothing() {
    let cycles = std::env::var("SEGMIRROR_RELIABILITY_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let bins = Bins::get().expect("service binaries");
    let o = CrashOptions {
        cycles,
        seed: 8,
        shipper_flags: ["--pack-below", "0", "--head-deltas", "false"]
            .map(String::from)
            .to_vec(),
        ..CrashOptions::default()
    };
    let r = run(&o, &bins).expect("harness");
    println!("{}", r.render());
    assert_eq!(r.accounting.lost, 0, "{}", r.render());
    assert_eq!(r.accounting.duplicated, 0, "{}", r.render());
    assert!(r.passed(), "{}", r.render());
    assert_eq!(r.kills.len(), cycles as usize);
}

/// The same with the shipper packing a cycle's small ranges into one
/// object (`--pack-below`, issue 30; versions still manifest objects): a kill between the pack's upload and
/// the manifests that name it loses and duplicates nothing either.
#[test]
fn kill_9_cycles_with_packs_lose_and_duplicate_nothing() {
    let cycles = std::env::var("SEGMIRROR_RELIABILITY_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let bins = Bins::get().expect("service binaries");
    let o = CrashOptions {
        cycles,
        seed: 30,
        shipper_flags: ["--pack-below", "1MiB", "--head-deltas", "false"]
            .map(String::from)
            .to_vec(),
        ..CrashOptions::default()
    };
    let r = run(&o, &bins).expect("harness");
    println!("{}", r.render());
    assert!(r.objects.0 > 0, "the shipper wrote packs: {}", r.render());
    assert_eq!(r.accounting.lost, 0, "{}", r.render());
    assert_eq!(r.accounting.duplicated, 0, "{}", r.render());
    assert!(r.passed(), "{}", r.render());
    assert_eq!(r.kills.len(), cycles as usize);
}

/// The same with appends committed by heads as deltas too
/// (`--head-deltas`): a kill between the pack, the head that commits the
/// deltas and the manifest objects written every 32 deltas loses and
/// duplicates nothing.
#[test]
fn kill_9_cycles_with_head_deltas_lose_and_duplicate_nothing() {
    let cycles = std::env::var("SEGMIRROR_RELIABILITY_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let bins = Bins::get().expect("service binaries");
    let o = CrashOptions {
        cycles,
        seed: 31,
        shipper_flags: vec!["--pack-below".into(), "1MiB".into(), "--head-deltas".into()],
        ..CrashOptions::default()
    };
    let r = run(&o, &bins).expect("harness");
    println!("{}", r.render());
    assert!(r.objects.0 > 0, "the shipper wrote packs: {}", r.render());
    assert!(
        r.objects.2 < r.objects.0,
        "fewer manifest objects than packs (cycles): {}",
        r.render()
    );
    assert_eq!(r.accounting.lost, 0, "{}", r.render());
    assert_eq!(r.accounting.duplicated, 0, "{}", r.render());
    assert!(r.passed(), "{}", r.render());
    assert_eq!(r.kills.len(), cycles as usize);
}

/// Layout 2 with compaction and pack garbage collection running all the
/// time (`compact_after` 1 s, a 2 s grace, a pass every second): kills
/// land in the middle of compactions (after the object, before the
/// version that names it) and of pack gc passes, and still nothing is
/// lost or duplicated: no pack a committed version names is deleted.
#[test]
fn kill_9_cycles_with_compaction_and_pack_gc_lose_and_duplicate_nothing() {
    let cycles = std::env::var("SEGMIRROR_RELIABILITY_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let bins = Bins::get().expect("service binaries");
    let env = |k: &str, v: &str| (k.to_string(), v.to_string());
    let o = CrashOptions {
        cycles,
        seed: 32,
        shipper_flags: vec!["--pack-below".into(), "1MiB".into(), "--head-deltas".into()],
        shipper_env: vec![
            env("SEGMIRROR_COMPACT_AFTER", "1s"),
            env("SEGMIRROR_DELETE_GRACE", "2s"),
            env("SEGMIRROR_SWEEP_INTERVAL", "1s"),
        ],
        ..CrashOptions::default()
    };
    let r = run(&o, &bins).expect("harness");
    println!("{}", r.render());
    assert!(r.compactions.0 > 0, "compactions ran: {}", r.render());
    assert!(r.compactions.1 > 0, "pack gc deleted packs: {}", r.render());
    assert_eq!(r.accounting.lost, 0, "{}", r.render());
    assert_eq!(r.accounting.duplicated, 0, "{}", r.render());
    assert!(r.passed(), "{}", r.render());
    assert_eq!(r.kills.len(), cycles as usize);
}
