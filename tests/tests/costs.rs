//! Request accounting: what the bucket is asked, counted by a
//! `CountingStore` around every backend. An idle applier poll over 100
//! partitions is one GET; a restart reads each manifest once; an idle
//! shipper cycle makes no request; shipping
//! costs one PUT per object plus one manifest PUT per partition per cycle
//! and one head PUT per cycle. The figures printed here are recorded in
//! BENCHMARKS.md (run with `--nocapture`).

use std::sync::Arc;

use applier::Applier;
use bucket::counting::CountingStore;
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use object_store::ObjectStore;
use segmirror_e2e::*;
use shipper::Shipper;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_polls_and_cycles_cost_constant_requests_for_100_partitions() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        {
            let d = LogDir::open(&source).expect("source");
            for p in 0..100 {
                let tp = TopicPartition::new("many", p).expect("tp");
                let mut log = d
                    .open_or_create_partition(
                        &tp,
                        Some(TopicId::from_bytes([5; 16])),
                        LogConfig::default(),
                    )
                    .expect("create");
                produce(&mut log, 10, 0, 10);
                log.close().expect("close");
            }
        }
        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let store: Arc<dyn ObjectStore> = counting.clone();
        let mut shipper =
            Shipper::new(shipper_options(&b, &source, "src"), store.clone()).expect("shipper");
        let first = shipper.ship_available().await;
        assert_eq!(first.committed, 100, "[{}] {first:?}", b.name);
        let shipped = counting.snapshot();
        let mut applier = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        drain(&mut applier).await;
        assert_eq!(applier.mirrors().count(), 100);
        let applied = counting.snapshot();

        let before = counting.snapshot();
        let idle_cycle = shipper.run_cycle().await;
        assert!(!idle_cycle.did_something(), "[{}] {idle_cycle:?}", b.name);
        let shipper_idle = counting.snapshot().since(&before);
        assert_eq!(
            shipper_idle.total(),
            0,
            "[{}] an idle shipper cycle makes no request: {shipper_idle:?}",
            b.name
        );

        let before = counting.snapshot();
        for _ in 0..10 {
            applier.run_once().await;
        }
        let applier_idle = counting.snapshot().since(&before);
        assert_eq!(
            (applier_idle.get, applier_idle.total()),
            (10, 10),
            "[{}] one GET per idle poll: {applier_idle:?}",
            b.name
        );
        // A settled applier still sees new data at once: one more batch in
        // one partition is applied by the next cycle.
        {
            let d = LogDir::open(&source).expect("source");
            let tp = TopicPartition::new("many", 42).expect("tp");
            let mut log = d.open_partition(&tp, LogConfig::default()).expect("open");
            produce(&mut log, 3, 0, 3);
            log.close().expect("close");
        }
        assert_eq!(shipper.ship_available().await.committed, 1, "[{}]", b.name);
        let next = applier.run_once().await;
        assert_eq!(next.batches, 1, "[{}] {next:?}", b.name);
        let mirrored = applier
            .mirrors()
            .find(|m| m.tp.partition == 42)
            .map(|m| m.log.log_end_offset());
        assert_eq!(mirrored, Some(13), "[{}]", b.name);

        // The group commits left every record durable, MIRRORING and
        // naming the version applied.
        for p in 0..100 {
            let tp = TopicPartition::new("many", p).expect("tp");
            let record = partdir::record::read(&dest.join(tp.dir_name()))
                .expect("read record")
                .expect("a record");
            assert_eq!(
                (
                    record.state.state().as_str(),
                    record.applied_manifest_version
                ),
                ("MIRRORING", if p == 42 { 2 } else { 1 }),
                "[{}] {tp}",
                b.name
            );
        }

        // A restart reads each partition's manifest once (read together,
        // not one after the other), and nothing else but the feed and,
        // with head deltas (the default), the head holding partition 42's
        // delta, read once more through the cache of the heads chains name.
        drop(applier);
        let before = counting.snapshot();
        let mut applier = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        let restart = applier.run_once().await;
        assert_eq!(
            (restart.batches, restart.transitions),
            (0, 0),
            "[{}] {restart:?}",
            b.name
        );
        let restarted = counting.snapshot().since(&before);
        assert_eq!(
            (restarted.get, restarted.list, restarted.total()),
            (102, 1, 103),
            "[{}] a restart: the feed (1 LIST, 1 GET), each manifest once and the head of a delta: {restarted:?}",
            b.name
        );

        println!(
            "[{}] 100 partitions: initial ship {} requests ({} PUT), initial apply {} requests ({} GET, {} LIST); idle shipper cycle {} requests; idle applier poll {} request",
            b.name,
            shipped.total(),
            shipped.put,
            applied.since(&shipped).total(),
            applied.since(&shipped).get,
            applied.since(&shipped).list,
            shipper_idle.total(),
            applier_idle.total() / 10
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipping_costs_one_put_per_object_and_one_manifest_per_partition_cycle() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = dir.path().join("source");
        let cfg = LogConfig {
            segment_bytes: 4 << 20,
            ..LogConfig::default()
        };
        let write = |records: usize| {
            let d = LogDir::open(&source).expect("source");
            for p in 0..4 {
                let tp = TopicPartition::new("bulk", p).expect("tp");
                let mut log = d
                    .open_or_create_partition(&tp, Some(TopicId::from_bytes([6; 16])), cfg.clone())
                    .expect("create");
                produce(&mut log, records, 1, 200);
                log.close().expect("close");
            }
        };
        // About 7 MiB per partition, 28 MiB in all.
        write(70_000);
        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let mut opts = shipper_options(&b, &source, "src");
        opts.max_object_size = 8 << 20;
        let mut shipper = Shipper::new(opts, counting.clone()).expect("shipper");
        let before = counting.snapshot();
        let report = shipper.ship_available().await;
        let used = counting.snapshot().since(&before);
        let mib = report.bytes as f64 / (1 << 20) as f64;
        assert!(mib > 25.0, "[{}] shipped {mib:.1} MiB", b.name);
        let uploads = used.put + used.multipart_create;
        // Every object is one upload; manifests and heads are the rest.
        assert_eq!(
            uploads,
            report.objects + report.committed as u64 + report.heads as u64,
            "[{}] {used:?} {report:?}",
            b.name
        );
        assert!(
            report.objects as f64 <= (mib / 4.0).ceil() + 4.0 * 2.0,
            "[{}] objects {} for {mib:.1} MiB",
            b.name,
            report.objects
        );
        assert!(
            used.get + used.list <= 4 * 2 + 2,
            "[{}] reads while shipping: {used:?}",
            b.name
        );
        println!(
            "[{}] shipped {mib:.1} MiB in {} objects: {} requests ({} PUT, {} multipart parts, {} GET, {} LIST) = {:.1} requests per GiB",
            b.name,
            report.objects,
            used.total(),
            used.put,
            used.multipart_part,
            used.get,
            used.list,
            used.total() as f64 / mib * 1024.0
        );
    }
}

/// With `pack_below`, a cycle's small ranges of every busy partition are one
/// pack: 100 busy partitions cost 1 data PUT per cycle (plus, until heads
/// carry the cycle's deltas, one manifest PUT per partition and the head),
/// where each range is its own object without it; the mirror is
/// byte-identical either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycles_small_ranges_of_100_partitions_are_one_pack() {
    pack_cycles(false).await;
}

/// With `head_deltas` too (layout 2, step 2), a cycle that only appends is
/// committed by its head: after each partition's first version (an
/// object), 100 busy partitions cost 2 PUTs a cycle, the pack and the head;
/// the applier follows the heads' deltas (no manifest GET), reads the pack
/// in one ranged GET (read ahead), 4 GETs a cycle in all, and its mirror is
/// byte-identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_head_deltas_a_cycle_of_100_busy_partitions_is_two_puts() {
    pack_cycles(true).await;
}

async fn pack_cycles(head_deltas: bool) {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        let tps: Vec<TopicPartition> = (0..100)
            .map(|p| TopicPartition::new("packed", p).expect("tp"))
            .collect();
        let write = |n: usize| {
            let d = LogDir::open(&source).expect("source");
            for tp in &tps {
                let mut log = d
                    .open_or_create_partition(
                        tp,
                        Some(TopicId::from_bytes([7; 16])),
                        LogConfig::default(),
                    )
                    .expect("create");
                produce(&mut log, n, 2, 5);
                log.close().expect("close");
            }
        };
        write(10);
        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let store: Arc<dyn ObjectStore> = counting.clone();
        let mut opts = shipper_options(&b, &source, "src");
        opts.pack_below = 1 << 20;
        opts.head_deltas = head_deltas;
        let mut shipper = Shipper::new(opts, store.clone()).expect("shipper");
        let mut applier = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        for round in 0..3 {
            if round > 0 {
                write(7);
            }
            let before = counting.snapshot();
            let report = shipper.ship_available().await;
            let used = counting.snapshot().since(&before);
            assert_eq!(
                report.committed, 100,
                "[{}] round {round}: {report:?}",
                b.name
            );
            assert_eq!(report.objects, 100, "[{}] every range is named", b.name);
            // Every version is an object in the first round (nothing to
            // append to) and without deltas; with them, none after.
            let manifests = if head_deltas && round > 0 {
                0
            } else {
                report.committed as u64
            };
            assert_eq!(
                used.put + used.multipart_create,
                1 + manifests + report.heads as u64,
                "[{}] round {round}: one pack, {manifests} manifests and the head: {used:?}",
                b.name
            );
            assert_eq!(report.heads, 1, "[{}] round {round}", b.name);
            if head_deltas && round > 0 {
                // The newest head and a probe past it; nothing listed.
                assert!(
                    used.get <= 2 && used.list == 0,
                    "[{}] round {round}: the shipper read {used:?}",
                    b.name
                );
            }
            println!(
                "[{}] round {round}: 100 busy partitions shipped with {} PUTs (1 pack, {manifests} manifests, {} heads), {} GETs, {} LISTs{}",
                b.name,
                used.put,
                report.heads,
                used.get,
                used.list,
                if head_deltas { ", head deltas" } else { "" }
            );
            let before = counting.snapshot();
            drain(&mut applier).await;
            let read = counting.snapshot().since(&before);
            println!(
                "[{}] round {round}: the applier read {} GETs ({} bytes), {} LISTs",
                b.name, read.get, read.get_bytes, read.list
            );
            if head_deltas && round > 0 {
                // The heads (a probe past the newest), the pack in one
                // ranged GET: constant in the partition count.
                assert!(
                    read.get <= 5 && read.list == 0,
                    "[{}] round {round}: the applier read {read:?}",
                    b.name
                );
            }
            for tp in &tps {
                assert_eq!(
                    kafkalog::compare::compare_partition(&source, &dest, tp).expect("compare"),
                    kafkalog::compare::Comparison::Identical,
                    "[{}] round {round}: {tp}",
                    b.name
                );
            }
        }
    }
}

/// A delta chain is bounded (`MAX_CHAIN`, so that a reader resolves a
/// version from heads still kept). When the chains of 20 partitions that
/// started together reach the bound in the same cycle, their next versions
/// go into one manifest pack: that cycle costs 3 PUTs (data pack, manifest
/// pack, head), not one manifest object per partition; every other cycle
/// 2. A follower moves by the deltas without reading the pack; a first
/// apply reads each version from its slice; pack gc keeps the manifest
/// pack while heads name it; both mirrors are byte-identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chains_at_their_bound_start_again_from_one_manifest_pack() {
    const PARTITIONS: i32 = 20;
    let rebase_round = manifest::feed::MAX_CHAIN + 1;
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        let tid = TopicId::from_bytes([8; 16]);
        let tps = partitions_of("chained", PARTITIONS);
        let write = || one_batch_each(&source, &tps, tid);
        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let store: Arc<dyn ObjectStore> = counting.clone();
        let clock = Arc::new(manifest::clock::ManualClock::new());
        let mut opts = shipper_options(&b, &source, "src");
        opts.pack_below = 1 << 20;
        opts.head_deltas = true;
        opts.delete_grace = Some(std::time::Duration::from_secs(3600));
        opts.sweep_interval = std::time::Duration::from_secs(365 * 24 * 3600);
        let mut shipper = Shipper::new(opts, store.clone())
            .expect("shipper")
            .with_clock(clock.clone());
        let mut follower = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        let mirrored = |dest: &std::path::Path, when: &str| {
            for tp in &tps {
                assert_eq!(
                    kafkalog::compare::compare_partition(&source, dest, tp).expect("compare"),
                    kafkalog::compare::Comparison::Identical,
                    "[{}] {when}: {tp}",
                    b.name
                );
            }
        };
        for round in 0..rebase_round + 3 {
            write();
            let before = counting.snapshot();
            let report = shipper.ship_available().await;
            let used = counting.snapshot().since(&before);
            assert!(report.errors.is_empty(), "[{}] {report:?}", b.name);
            assert_eq!(
                report.committed, PARTITIONS as usize,
                "[{}] round {round}",
                b.name
            );
            let expected = match round {
                0 => 2 + PARTITIONS as u64,
                r if r == rebase_round => 3,
                _ => 2,
            };
            assert_eq!(
                (used.put, used.multipart_create),
                (expected, 0),
                "[{}] round {round}: {used:?}",
                b.name
            );
            let before = counting.snapshot();
            drain(&mut follower).await;
            let read = counting.snapshot().since(&before);
            assert!(
                round == 0 || (read.get <= 5 && read.list == 0),
                "[{}] round {round}: the follower read {read:?}",
                b.name
            );
            if round == rebase_round {
                println!(
                    "[{}] round {round}: {PARTITIONS} chains started again with {} PUTs; the follower read {} GETs",
                    b.name, used.put, read.get
                );
            }
        }
        mirrored(&dest, "the follower");
        let ms = bucket::store::ManifestStore::new(
            b.store.clone(),
            manifest::layout::ClusterLayout::new(&b.prefix, "src").expect("layout"),
        );
        let head = ms.latest_head(None).await.expect("head").expect("a head");
        let bases: std::collections::BTreeSet<String> = head
            .partitions
            .values()
            .map(|e| {
                let chain = e.chain.as_ref().expect("a chain");
                let base = chain.base.as_ref().expect("started again from a slice");
                assert_eq!(chain.heads.len(), 2, "[{}] {e:?}", b.name);
                base.key.clone()
            })
            .collect();
        assert_eq!(bases.len(), 1, "[{}] one manifest pack: {bases:?}", b.name);
        // Pack gc, hours on: what heads name stays, the manifest pack too.
        for advance in [7_200_000, 3_600_000] {
            clock.advance_ms(advance);
            let r = shipper
                .collect_packs_now()
                .await
                .expect("on")
                .expect("pass");
            println!("[{}] pack gc: {r:?}", b.name);
        }
        let listed = ms.list(&ms.layout().packs_dir()).await.expect("list");
        for key in &bases {
            assert!(listed.contains(key), "[{}] {key} was deleted", b.name);
        }
        let fresh = dir.path().join("fresh");
        let before = counting.snapshot();
        let mut first = Applier::open(
            applier_options(&b, &fresh, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        drain(&mut first).await;
        let read = counting.snapshot().since(&before);
        println!(
            "[{}] a first apply of {PARTITIONS} partitions read {} GETs, {} LISTs",
            b.name, read.get, read.list
        );
        // A slice a partition, each head its chain names once (not once a
        // partition), the packs' runs, the feed.
        assert!(
            read.get <= PARTITIONS as u64 + (rebase_round + 3) as u64 + 8,
            "[{}] a first apply read {read:?}",
            b.name
        );
        mirrored(&fresh, "a first apply");
    }
}

/// An applier several heads behind (the shipper committed three cycles
/// since its last poll) moves every held manifest through the deltas of
/// the heads its poll reads, in order: a GET per head and the packs' runs,
/// never a manifest or a chain's heads per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_heads_behind_moves_through_every_head_it_reads() {
    const PARTITIONS: i32 = 20;
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        let tid = TopicId::from_bytes([6; 16]);
        let tps = partitions_of("behind", PARTITIONS);
        let write = || one_batch_each(&source, &tps, tid);
        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let store: Arc<dyn ObjectStore> = counting.clone();
        let mut opts = shipper_options(&b, &source, "src");
        opts.pack_below = 1 << 20;
        opts.head_deltas = true;
        let mut shipper = Shipper::new(opts, store.clone()).expect("shipper");
        let mut applier = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        for round in 0..3 {
            // Three committed cycles between two polls (after the first).
            for _ in 0..if round == 0 { 1 } else { 3 } {
                write();
                let r = shipper.ship_available().await;
                assert!(r.errors.is_empty(), "[{}] {r:?}", b.name);
            }
            let before = counting.snapshot();
            drain(&mut applier).await;
            let read = counting.snapshot().since(&before);
            println!(
                "[{}] round {round}: an applier 3 heads behind read {} GETs, {} LISTs",
                b.name, read.get, read.list
            );
            if round > 0 {
                // Three heads and a probe, the three packs' runs.
                assert!(
                    read.get <= 8 && read.list == 0,
                    "[{}] round {round}: {read:?}",
                    b.name
                );
            }
            for tp in &tps {
                assert_eq!(
                    kafkalog::compare::compare_partition(&source, &dest, tp).expect("compare"),
                    kafkalog::compare::Comparison::Identical,
                    "[{}] round {round}: {tp}",
                    b.name
                );
            }
        }
    }
}

/// Partitions `0..n` of `topic`.
fn partitions_of(topic: &str, n: i32) -> Vec<TopicPartition> {
    (0..n)
        .map(|p| TopicPartition::new(topic, p).expect("tp"))
        .collect()
}

/// One batch of 3 records appended to each of `tps` in the log dir
/// `source` (the partitions created with `tid` if new).
fn one_batch_each(source: &std::path::Path, tps: &[TopicPartition], tid: TopicId) {
    let d = LogDir::open(source).expect("source");
    for tp in tps {
        let mut log = d
            .open_or_create_partition(tp, Some(tid), LogConfig::default())
            .expect("create");
        produce(&mut log, 3, 2, 3);
        log.close().expect("close");
    }
}
