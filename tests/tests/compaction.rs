//! Compaction behind the tail (issue 30): with packs and head deltas, a
//! partition's packed ranges of a rolled segment are rewritten into one
//! object of its own and a manifest version names it. A first apply from
//! the compacted bucket reads about one object per segment, not one range
//! per cycle, and both it and an applier that followed every cycle hold
//! the source byte for byte.

use std::sync::Arc;

use applier::Applier;
use bucket::counting::CountingStore;
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use object_store::ObjectStore;
use segmirror_e2e::*;
use shipper::Shipper;

/// A source of `n` partitions of `topic` with 8 KiB segments; `write`
/// appends 12 batches (~1.2 KiB) to each, so a segment rolls every 7.
struct RollingSource {
    path: std::path::PathBuf,
    tps: Vec<TopicPartition>,
    topic_id: TopicId,
}

impl RollingSource {
    fn new(path: std::path::PathBuf, topic: &str, n: i32, topic_id: TopicId) -> RollingSource {
        let tps = (0..n)
            .map(|p| TopicPartition::new(topic, p).expect("tp"))
            .collect();
        RollingSource {
            path,
            tps,
            topic_id,
        }
    }

    /// Every partition of `dests` is the source's, byte for byte.
    fn assert_mirrored_in(&self, dests: &[&std::path::Path], backend: &str) {
        for tp in &self.tps {
            for dest in dests {
                assert_eq!(
                    kafkalog::compare::compare_partition(&self.path, dest, tp).expect("compare"),
                    kafkalog::compare::Comparison::Identical,
                    "[{backend}] {tp} in {}",
                    dest.display()
                );
            }
        }
    }

    fn write(&self) {
        let cfg = LogConfig {
            segment_bytes: 8192,
            ..LogConfig::default()
        };
        let d = LogDir::open(&self.path).expect("source");
        for tp in &self.tps {
            let mut log = d
                .open_or_create_partition(tp, Some(self.topic_id), cfg.clone())
                .expect("create");
            produce(&mut log, 12, 1, 4);
            log.close().expect("close");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_segments_are_compacted_and_a_first_apply_reads_one_object_each() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = RollingSource::new(
            dir.path().join("source"),
            "compacted",
            10,
            TopicId::from_bytes([8; 16]),
        );
        let (source, tps) = (&src.path, src.tps.as_slice());
        let write = || src.write();
        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let store: Arc<dyn ObjectStore> = counting.clone();
        let mut opts = shipper_options(&b, source, "src");
        opts.pack_below = 1 << 20;
        opts.head_deltas = true;
        let mut shipper = Shipper::new(opts, store.clone()).expect("shipper");
        let follower_dir = dir.path().join("follower");
        let mut follower = Applier::open(
            applier_options(&b, &follower_dir, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        let mut compacted = (0, 0);
        let mut shipper_gets = 0;
        // 30 cycles of ~1.2 KiB per partition: segments of 8 KiB roll.
        for _ in 0..30 {
            write();
            let before = counting.snapshot();
            let r = shipper.ship_available().await;
            shipper_gets += counting.snapshot().since(&before).get;
            assert!(r.errors.is_empty(), "[{}] {r:?}", b.name);
            compacted.0 += r.compacted.0;
            compacted.1 += r.compacted.1;
            drain(&mut follower).await;
        }
        assert!(compacted.0 > 0, "[{}] nothing compacted", b.name);
        // The partitions' segments roll in the same cycles: their packed
        // ranges are read ahead together, a GET per pack rather than per
        // range (plus the head and a probe a cycle).
        println!(
            "[{}] the shipper read {shipper_gets} GETs in 30 rounds, compacting {} packed ranges",
            b.name, compacted.1
        );
        assert!(
            shipper_gets < 3 * 30 + compacted.1 as u64 / 4,
            "[{}] {shipper_gets} GETs for {} compacted ranges",
            b.name,
            compacted.1
        );
        let ms = bucket::store::ManifestStore::new(
            b.store.clone(),
            manifest::layout::ClusterLayout::new(&b.prefix, "src").expect("layout"),
        );
        let (mut segments, mut ranges) = (0, 0);
        for tp in tps {
            let m = ms
                .newest_manifest(&manifest::layout::PartitionKey {
                    tp: tp.clone(),
                    topic_id: TopicId::from_bytes([8; 16]),
                })
                .await
                .expect("read")
                .expect("a manifest");
            // Every rolled segment is one object of its own; packed ranges
            // are left only in the active segment.
            let mut seen = std::collections::BTreeMap::new();
            for r in &m.ranges {
                *seen.entry(r.segment_base_offset).or_insert(0) += 1;
                if r.completes_segment {
                    assert_eq!(r.object_offset, None, "[{}] {tp}: {r:?}", b.name);
                }
            }
            let rolled = m.ranges.iter().filter(|r| r.completes_segment).count();
            assert!(rolled >= 2, "[{}] {tp}: segments rolled: {rolled}", b.name);
            for r in m.ranges.iter().filter(|r| r.completes_segment) {
                assert_eq!(
                    seen[&r.segment_base_offset], 1,
                    "[{}] {tp}: one object per rolled segment",
                    b.name
                );
            }
            segments += seen.len();
            ranges += m.ranges.len();
        }
        // A first apply now: about one GET per segment (plus the feed and
        // the manifests), where every cycle's range would be 30 a partition.
        let fresh = dir.path().join("fresh");
        let before = counting.snapshot();
        let mut applier = Applier::open(
            applier_options(&b, &fresh, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        drain(&mut applier).await;
        let used = counting.snapshot().since(&before);
        println!(
            "[{}] compacted {} objects from {} packed ranges; first apply of {} partitions, {segments} segments: {} GETs",
            b.name,
            compacted.0,
            compacted.1,
            tps.len(),
            used.get
        );
        assert!(
            used.get <= (segments + 3 * tps.len() + 10) as u64,
            "[{}] first apply: {used:?} for {segments} segments",
            b.name
        );
        src.assert_mirrored_in(&[&follower_dir, &fresh], b.name);
        // `backfill export` of the compacted bucket to Parquet: every
        // record, one GET per range (an object per rolled segment, the
        // packed ranges of the active ones, which it does not read ahead
        // together as the applier does).
        let before = counting.snapshot();
        let exporter = backfill::export::Exporter::new(
            store.clone(),
            &b.prefix,
            Arc::new(object_store::memory::InMemory::new()),
            "export",
            backfill::export::ExportOptions {
                source_cluster_id: "src".into(),
                topics: regex::Regex::new("^.*$").expect("regex"),
                exclude: None,
                partitions: None,
                window: backfill::plan::Window::default(),
                isolation: Default::default(),
                shard: backfill::select::Shard::ALL,
                rewrite: false,
                concurrency: 2,
                pending_memory: 64 << 20,
            },
            Arc::new(backfill::progress::LogLines),
        )
        .expect("exporter");
        let selected = exporter
            .select()
            .await
            .expect("select")
            .expect("partitions selected");
        let summary = exporter.run(selected).await.expect("export");
        let used = counting.snapshot().since(&before);
        println!(
            "[{}] backfill export of {} partitions, {segments} segments, {ranges} ranges: {} rows, {} GETs",
            b.name,
            tps.len(),
            summary.rows(),
            used.get
        );
        assert!(
            summary.failures.is_empty(),
            "[{}] {:?}",
            b.name,
            summary.failures
        );
        assert_eq!(
            summary.rows(),
            30 * 12 * tps.len() as u64,
            "[{}] rows",
            b.name
        );
        assert!(
            used.get <= (ranges + 5 * tps.len() + 10) as u64,
            "[{}] backfill export: {used:?} for {ranges} ranges",
            b.name
        );
        // `backfill restore` of every partition to its end: an object per
        // rolled segment, and the packed ranges of the active segments read
        // ahead together (a GET per run of a pack, not per range); the
        // restored logs are the source's.
        let restored = dir.path().join("restored");
        let before = counting.snapshot();
        let ms = bucket::store::ManifestStore::new(
            store.clone(),
            manifest::layout::ClusterLayout::new(&b.prefix, "src").expect("layout"),
        );
        let selected = backfill::export::select(
            &ms,
            &b.prefix,
            &regex::Regex::new("^.*$").expect("regex"),
            None,
            None,
        )
        .await
        .expect("select")
        .expect("partitions selected");
        let restorer = backfill::restore::Restorer::new(
            ms,
            &restored,
            backfill::restore::RestoreEnd::Offset(i64::MAX),
        );
        let partitions: Vec<(TopicPartition, &manifest::feed::HeadEntry)> = selected
            .iter()
            .map(|e| (TopicPartition::new(&e.topic, e.partition).expect("tp"), e))
            .collect();
        let mut results = Vec::new();
        restorer
            .restore_each(&partitions, false, |tp, r| results.push((tp.clone(), r)))
            .await;
        assert_eq!(results.len(), tps.len(), "[{}]", b.name);
        for (tp, r) in results {
            let r = r.expect("restore");
            assert_eq!(r.end_offset, Some(30 * 12), "[{}] {tp}: {r:?}", b.name);
        }
        let used = counting.snapshot().since(&before);
        println!(
            "[{}] backfill restore of {} partitions, {segments} segments, {ranges} ranges: {} GETs",
            b.name,
            selected.len(),
            used.get
        );
        assert!(
            used.get <= (segments + 4 * tps.len() + 10) as u64,
            "[{}] backfill restore: {used:?} for {segments} segments ({ranges} ranges)",
            b.name
        );
        src.assert_mirrored_in(&[&restored], b.name);
    }
}

/// Pack garbage collection (layout 2, step 5): after compaction, the packs
/// no latest version names are deleted once two passes a grace apart saw
/// them so, with an orphan pack (a cycle that never committed, as from a
/// shipper fenced while uploading); every pack a latest version names
/// stays, and a first apply and an applier that followed every cycle still
/// hold the source byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packs_no_version_names_are_deleted_after_the_grace_and_no_other() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tid = TopicId::from_bytes([9; 16]);
        let src = RollingSource::new(dir.path().join("source"), "collected", 6, tid);
        let (source, tps) = (&src.path, src.tps.as_slice());
        let write = || src.write();
        let clock = Arc::new(manifest::clock::ManualClock::new());
        let mut opts = shipper_options(&b, source, "src");
        opts.pack_below = 1 << 20;
        opts.head_deltas = true;
        opts.delete_grace = Some(std::time::Duration::from_secs(3600));
        opts.sweep_interval = std::time::Duration::from_secs(365 * 24 * 3600);
        let mut shipper = Shipper::new(opts, b.store.clone())
            .expect("shipper")
            .with_clock(clock.clone());
        let follower_dir = dir.path().join("follower");
        let mut follower = Applier::open(
            applier_options(&b, &follower_dir, "src", "dst"),
            Some(b.store.clone()),
        )
        .expect("applier");
        for _ in 0..20 {
            write();
            let r = shipper.ship_available().await;
            assert!(r.errors.is_empty(), "[{}] {r:?}", b.name);
            drain(&mut follower).await;
        }
        let ms = bucket::store::ManifestStore::new(
            b.store.clone(),
            manifest::layout::ClusterLayout::new(&b.prefix, "src").expect("layout"),
        );
        let layout = ms.layout().clone();
        // Young packs: nothing is read or deleted.
        let r = shipper
            .collect_packs_now()
            .await
            .expect("on")
            .expect("pass");
        assert_eq!((r.deleted, r.named), (0, 0), "[{}] {r:?}", b.name);
        // An orphan: uploaded two hours ago, named by no head.
        let orphan = layout
            .pack_key(
                &manifest::layout::UploadId::from_parts(
                    manifest::clock::Clock::now_ms(clock.as_ref()) - 7_200_000,
                    7,
                )
                .to_string(),
            )
            .expect("key");
        ms.put_new(&orphan, bytes::Bytes::from_static(b"never committed"))
            .await
            .expect("put");
        let named = || async {
            let mut named = std::collections::BTreeSet::new();
            for tp in tps {
                let m = ms
                    .newest_manifest(&manifest::layout::PartitionKey {
                        tp: tp.clone(),
                        topic_id: tid,
                    })
                    .await
                    .expect("read")
                    .expect("a manifest");
                named.extend(
                    m.ranges
                        .iter()
                        .filter(|r| layout.parse_pack_key(&r.key).is_ok())
                        .map(|r| r.key.clone()),
                );
            }
            named
        };
        let listed = || async { ms.list(&layout.packs_dir()).await.expect("list") };
        let before = listed().await;
        let named_before = named().await;
        assert!(
            named_before.len() < before.len() - 1,
            "[{}] compaction left {} of {} packs named",
            b.name,
            named_before.len(),
            before.len()
        );
        // Two hours on, a first pass sees the unreferenced ones and waits.
        clock.advance_ms(7_200_000);
        let r = shipper
            .collect_packs_now()
            .await
            .expect("on")
            .expect("pass");
        assert_eq!(r.deleted, 0, "[{}] {r:?}", b.name);
        assert_eq!(r.named, named_before.len(), "[{}] {r:?}", b.name);
        assert_eq!(
            r.waiting,
            before.len() - named_before.len(),
            "[{}] {r:?}",
            b.name
        );
        assert_eq!(listed().await, before, "[{}] deleted early", b.name);
        // Not yet the grace since.
        clock.advance_ms(3_599_000);
        let r = shipper
            .collect_packs_now()
            .await
            .expect("on")
            .expect("pass");
        assert_eq!(r.deleted, 0, "[{}] {r:?}", b.name);
        // The grace since the first pass: deleted, and only those.
        clock.advance_ms(1_000);
        let r = shipper
            .collect_packs_now()
            .await
            .expect("on")
            .expect("pass");
        assert_eq!(
            r.deleted as usize,
            before.len() - named_before.len(),
            "[{}] {r:?}",
            b.name
        );
        let after: std::collections::BTreeSet<String> = listed().await.into_iter().collect();
        assert_eq!(after, named_before, "[{}] the packs left", b.name);
        assert!(!after.contains(&orphan), "[{}] the orphan stays", b.name);
        // The mirror still reads: more data, a follower, a first apply.
        write();
        let r = shipper.ship_available().await;
        assert!(r.errors.is_empty(), "[{}] {r:?}", b.name);
        drain(&mut follower).await;
        let fresh = dir.path().join("fresh");
        let mut applier = Applier::open(
            applier_options(&b, &fresh, "src", "dst"),
            Some(b.store.clone()),
        )
        .expect("applier");
        drain(&mut applier).await;
        src.assert_mirrored_in(&[&follower_dir, &fresh], b.name);
    }
}

/// Compaction of busy partitions (issue 30, layout 2, step 4): the runs of
/// ranges as shipped of every partition due at once go into one compacted
/// pack, committed by one head, so a shipper's busy partitions cost two
/// writes every `compact_ranges` cycles together, not two each; an hour on
/// (`compact_after`), each partition's ranges go into an object of its
/// own. A follower and a first apply hold the source byte for byte at each
/// step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_partitions_are_compacted_together_into_one_compacted_pack() {
    const PARTITIONS: i32 = 20;
    const RANGES: usize = 8;
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tid = TopicId::from_bytes([10; 16]);
        let source = dir.path().join("source");
        let tps: Vec<TopicPartition> = (0..PARTITIONS)
            .map(|p| TopicPartition::new("busy", p).expect("tp"))
            .collect();
        let write = || one_record_each(&source, &tps, tid);
        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let store: Arc<dyn ObjectStore> = counting.clone();
        let clock = Arc::new(manifest::clock::ManualClock::new());
        let mut opts = shipper_options(&b, &source, "src");
        opts.pack_below = 1 << 20;
        opts.head_deltas = true;
        opts.compact_ranges = RANGES;
        let mut shipper = Shipper::new(opts, store.clone())
            .expect("shipper")
            .with_clock(clock.clone());
        let follower_dir = dir.path().join("follower");
        let mut follower = Applier::open(
            applier_options(&b, &follower_dir, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        let ms = bucket::store::ManifestStore::new(
            b.store.clone(),
            manifest::layout::ClusterLayout::new(&b.prefix, "src").expect("layout"),
        );
        let manifests = || newest_manifests(&ms, &tps, tid);
        // 2 x RANGES + 3 rounds: a compacted pack at rounds RANGES and
        // 2 x RANGES, nothing else.
        let mut compacting_rounds = Vec::new();
        for round in 1..=2 * RANGES + 3 {
            write();
            clock.advance_ms(1_000);
            let before = counting.snapshot();
            let r = shipper.ship_available().await;
            let used = counting.snapshot().since(&before);
            assert!(r.errors.is_empty(), "[{}] round {round}: {r:?}", b.name);
            if r.compacted.0 > 0 {
                compacting_rounds.push(round);
                // Every partition's run in one object and one head: the
                // cycle's pack and head, then those two.
                assert_eq!(
                    r.compacted,
                    (1, (PARTITIONS as usize * RANGES) as u64, r.compacted.2),
                    "[{}] round {round}",
                    b.name
                );
                assert_eq!(used.put, 4, "[{}] round {round}: {used:?}", b.name);
            } else if round > 1 {
                // (The first round writes each partition's first version.)
                assert_eq!(used.put, 2, "[{}] round {round}: {used:?}", b.name);
            }
            drain(&mut follower).await;
        }
        assert_eq!(
            compacting_rounds,
            vec![RANGES, 2 * RANGES],
            "[{}] the rounds that compacted",
            b.name
        );
        // Each manifest: two compacted ranges, shared by all partitions,
        // then the 3 ranges as shipped since.
        let layout = ms.layout().clone();
        let ms_now = manifests().await;
        for m in &ms_now {
            let compacted: Vec<_> = m.ranges.iter().filter(|r| r.compacted).collect();
            assert_eq!(
                compacted.len(),
                2,
                "[{}] {}: {:?}",
                b.name,
                m.partition,
                m.ranges
            );
            assert_eq!(m.ranges.len(), 5, "[{}] {}", b.name, m.partition);
            for r in &compacted {
                assert!(layout.parse_pack_key(&r.key).is_ok(), "{r:?}");
                assert_eq!(
                    r.key,
                    ms_now[0].ranges[r_index(m, r)].key,
                    "one object for all"
                );
            }
        }
        let fresh = dir.path().join("fresh");
        let before = counting.snapshot();
        let mut applier = Applier::open(
            applier_options(&b, &fresh, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        drain(&mut applier).await;
        let used = counting.snapshot().since(&before);
        println!(
            "[{}] first apply of {PARTITIONS} partitions after 2 compacted packs: {} GETs",
            b.name, used.get
        );
        for tp in &tps {
            for dest in [&follower_dir, &fresh] {
                assert_eq!(
                    kafkalog::compare::compare_partition(&source, dest, tp).expect("compare"),
                    kafkalog::compare::Comparison::Identical,
                    "[{}] {tp} in {}",
                    b.name,
                    dest.display()
                );
            }
        }
        // Pack gc in another process (it holds no version; it reads what
        // the head names, deltas that put compacted ranges in place
        // included), two passes a grace apart, hours later on its own
        // clock: every pack a latest version names stays, and a first
        // apply still reads them all.
        let gc_clock = Arc::new(manifest::clock::ManualClock::new());
        gc_clock.advance_ms(
            manifest::clock::Clock::now_ms(clock.as_ref())
                - manifest::clock::Clock::now_ms(gc_clock.as_ref())
                + 2 * 3_600_000,
        );
        let mut gc_opts = shipper_options(&b, &source, "src");
        gc_opts.pack_below = 1 << 20;
        gc_opts.head_deltas = true;
        gc_opts.delete_grace = Some(std::time::Duration::from_secs(3600));
        let mut gc = Shipper::new(gc_opts, store.clone())
            .expect("gc shipper")
            .with_clock(gc_clock.clone());
        let r = gc.collect_packs_now().await.expect("on").expect("pass");
        assert_eq!(r.deleted, 0, "[{}] the first pass: {r:?}", b.name);
        gc_clock.advance_ms(3_600_001);
        let r = gc.collect_packs_now().await.expect("on").expect("pass");
        println!("[{}] pack gc after compaction: {r:?}", b.name);
        assert_eq!(
            (r.deleted, r.young, r.waiting),
            ((r.listed - r.named) as u64, 0, 0),
            "[{}] what no version names goes: {r:?}",
            b.name
        );
        let listed: std::collections::BTreeSet<String> = ms
            .list(&layout.packs_dir())
            .await
            .expect("list")
            .into_iter()
            .collect();
        for m in manifests().await {
            for r in m
                .ranges
                .iter()
                .filter(|r| layout.parse_pack_key(&r.key).is_ok())
            {
                assert!(
                    listed.contains(&r.key),
                    "[{}] {} lost {}",
                    b.name,
                    m.partition,
                    r.key
                );
            }
        }
        let fresh_after_gc = dir.path().join("fresh-after-gc");
        let mut applier = Applier::open(
            applier_options(&b, &fresh_after_gc, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        drain(&mut applier).await;
        for tp in &tps {
            assert_eq!(
                kafkalog::compare::compare_partition(&source, &fresh_after_gc, tp)
                    .expect("compare"),
                kafkalog::compare::Comparison::Identical,
                "[{}] {tp} after pack gc",
                b.name
            );
        }
        // An hour on, every partition's packed ranges, compacted or not,
        // go into an object of its own: one each, one head for all.
        clock.advance_ms(3_600_000);
        write();
        let before = counting.snapshot();
        let r = shipper.ship_available().await;
        let used = counting.snapshot().since(&before);
        assert!(r.errors.is_empty(), "[{}] {r:?}", b.name);
        assert_eq!(r.compacted.0, PARTITIONS as u64, "[{}] {r:?}", b.name);
        assert_eq!(used.put, 2 + PARTITIONS as u64 + 1, "[{}] {used:?}", b.name);
        for m in manifests().await {
            let own: Vec<_> = m
                .ranges
                .iter()
                .filter(|r| r.object_offset.is_none())
                .collect();
            assert_eq!(own.len(), 1, "[{}] {}: {:?}", b.name, m.partition, m.ranges);
            assert!(
                !m.ranges.iter().any(|r| r.compacted),
                "[{}] {:?}",
                b.name,
                m.ranges
            );
        }
        drain(&mut follower).await;
        for tp in &tps {
            assert_eq!(
                kafkalog::compare::compare_partition(&source, &follower_dir, tp).expect("compare"),
                kafkalog::compare::Comparison::Identical,
                "[{}] {tp} after own objects",
                b.name
            );
        }
    }
}

/// Appends one record to each of `tps` in `source`.
fn one_record_each(source: &std::path::Path, tps: &[TopicPartition], tid: TopicId) {
    let d = LogDir::open(source).expect("source");
    for tp in tps {
        let mut log = d
            .open_or_create_partition(tp, Some(tid), LogConfig::default())
            .expect("create");
        produce(&mut log, 1, 2, 3);
        log.close().expect("close");
    }
}

/// `m`'s ranges as (base offset, last offset, compacted).
fn shape(m: &manifest::partition::PartitionManifest) -> Vec<(i64, i64, bool)> {
    m.ranges
        .iter()
        .map(|r| (r.base_offset, r.last_offset, r.compacted))
        .collect()
}

/// The newest manifest of each of `tps`, in order.
async fn newest_manifests(
    ms: &bucket::store::ManifestStore,
    tps: &[TopicPartition],
    topic_id: TopicId,
) -> Vec<manifest::partition::PartitionManifest> {
    let mut out = Vec::new();
    for tp in tps {
        let pk = manifest::layout::PartitionKey {
            tp: tp.clone(),
            topic_id,
        };
        out.push(
            ms.newest_manifest(&pk)
                .await
                .expect("read")
                .expect("a manifest"),
        );
    }
    out
}

/// The position of `r` in `m`'s ranges.
fn r_index(
    m: &manifest::partition::PartitionManifest,
    r: &manifest::partition::ShippedRange,
) -> usize {
    m.ranges
        .iter()
        .position(|x| x == r)
        .expect("in the manifest")
}

/// Compaction in the background (as under `shipper run`): the cycle that
/// plans it only starts writing, the cycles after it go on shipping, and
/// the first cycle after the objects are written commits them in place of
/// the ranges they replace, wherever those stand by then, with the ranges
/// shipped meanwhile after them; not when half of `delete_grace` passed
/// since they were planned (pack gc may have taken them), and then they are
/// planned again. With and without head deltas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_written_in_the_background_is_committed_by_a_later_cycle() {
    const PARTITIONS: i32 = 6;
    const RANGES: usize = 4;
    for b in backends() {
        for head_deltas in [true, false] {
            let name = format!("{} head_deltas={head_deltas}", b.name);
            let dir = tempfile::tempdir().expect("tempdir");
            let tid = TopicId::from_bytes([11; 16]);
            let source = dir.path().join("source");
            let tps: Vec<TopicPartition> = (0..PARTITIONS)
                .map(|p| TopicPartition::new("background", p).expect("tp"))
                .collect();
            let write = || one_record_each(&source, &tps, tid);
            let prefix = format!("{}/{head_deltas}", b.prefix);
            let clock = Arc::new(manifest::clock::ManualClock::new());
            let mut opts = shipper_options(&b, &source, "src");
            opts.bucket_prefix = prefix.clone();
            opts.pack_below = 1 << 20;
            opts.head_deltas = head_deltas;
            opts.compact_ranges = RANGES;
            opts.delete_grace = Some(std::time::Duration::from_secs(10));
            let mut shipper = Shipper::new(opts, b.store.clone())
                .expect("shipper")
                .with_clock(clock.clone())
                .with_background_compaction(true);
            let follower_dir = dir.path().join("follower");
            let mut a_opts = applier_options(&b, &follower_dir, "src", "dst");
            a_opts.bucket_prefix = prefix.clone();
            let mut follower =
                Applier::open(a_opts.clone(), Some(b.store.clone())).expect("applier");
            let ms = bucket::store::ManifestStore::new(
                b.store.clone(),
                manifest::layout::ClusterLayout::new(&prefix, "src").expect("layout"),
            );
            let manifests = || newest_manifests(&ms, &tps, tid);
            macro_rules! round {
                ($expect_compacted:expr) => {{
                    write();
                    clock.advance_ms(1_000);
                    let r = shipper.run_cycle().await;
                    assert!(r.errors.is_empty(), "[{name}] {r:?}");
                    assert_eq!(r.compacted.1, $expect_compacted, "[{name}] {r:?}");
                    drain(&mut follower).await;
                }};
            }
            // Round RANGES plans the compaction and starts writing it:
            // nothing is committed yet.
            for _ in 0..RANGES {
                round!(0);
            }
            shipper.compaction_written().await;
            // The next cycle ships its own range and commits the
            // compaction; the one after only ships.
            round!((PARTITIONS as usize * RANGES) as u64);
            round!(0);
            for m in manifests().await {
                assert_eq!(
                    shape(&m),
                    vec![(0, 3, true), (4, 4, false), (5, 5, false)],
                    "[{name}] {}",
                    m.partition
                );
            }
            // A compaction whose objects are committed half the grace
            // (5 s) or more after it was planned is not: pack gc may have
            // taken them. The cycle plans it again, with one range more.
            round!(0);
            round!(0);
            shipper.compaction_written().await;
            clock.advance_ms(5_000);
            round!(0);
            shipper.compaction_written().await;
            round!((PARTITIONS as usize * (RANGES + 1)) as u64);
            for m in manifests().await {
                assert_eq!(
                    shape(&m),
                    vec![(0, 3, true), (4, 8, true), (9, 9, false)],
                    "[{name}] {}",
                    m.partition
                );
            }
            let fresh = dir.path().join("fresh");
            let mut f_opts = applier_options(&b, &fresh, "src", "dst");
            f_opts.bucket_prefix = prefix.clone();
            let mut applier = Applier::open(f_opts, Some(b.store.clone())).expect("applier");
            drain(&mut applier).await;
            for tp in &tps {
                for dest in [&follower_dir, &fresh] {
                    assert_eq!(
                        kafkalog::compare::compare_partition(&source, dest, tp).expect("compare"),
                        kafkalog::compare::Comparison::Identical,
                        "[{name}] {tp} in {}",
                        dest.display()
                    );
                }
            }
        }
    }
}
