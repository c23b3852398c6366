//! Consumer-group offsets follow the mirror (issue 15): committed in the
//! source's `__consumer_offsets`, shipped as group offset versions, applied
//! to the destination's `__consumer_offsets` clamped to what it holds; a
//! source tombstone deletes; a STOPPED partition is no longer synced; idle
//! shipper cycles cost no request and idle applier polls one GET.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use applier::Applier;
use bucket::counting::CountingStore;
use kafkalog::offsets_topic::{self, Committed, OFFSETS_TOPIC, OffsetsRecord};
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use manifest::state::Command;
use object_store::ObjectStore;
use segmirror_e2e::*;
use shipper::Shipper;

fn commit(offset: i64, ts: i64) -> Option<Committed> {
    Some(Committed {
        offset,
        leader_epoch: 0,
        metadata: format!("m{offset}"),
        commit_timestamp: ts,
    })
}

/// Appends `group`'s commits to the source's `__consumer_offsets`, as a
/// broker's coordinator does.
fn source_commit(root: &Path, group: &str, commits: &[(&str, i32, Option<Committed>)]) {
    let d = LogDir::open(root).expect("source");
    let tp = TopicPartition::new(OFFSETS_TOPIC, offsets_topic::partition_for(group)).expect("tp");
    // The destination's own partition (created by the sync) keeps its id.
    let mut log = if root.join(tp.dir_name()).is_dir() {
        d.open_partition(&tp, LogConfig::default())
    } else {
        d.open_or_create_partition(
            &tp,
            Some(TopicId::from_bytes([9; 16])),
            LogConfig::default(),
        )
    }
    .expect("offsets partition");
    let commits: Vec<(String, i32, Option<Committed>)> = commits
        .iter()
        .map(|(t, p, c)| ((*t).to_string(), *p, c.clone()))
        .collect();
    let mut batch = offsets_topic::commit_batch(group, &commits, 1_700_000_000_000).expect("batch");
    log.append_as_leader(&mut batch, 0).expect("append");
    log.close().expect("close");
}

/// The destination's committed offsets, read from its `__consumer_offsets`
/// files (latest record wins, tombstones delete).
fn dest_offsets(root: &Path) -> BTreeMap<(String, String, i32), i64> {
    let mut out = BTreeMap::new();
    let Ok(tps) = kafkalog::reader::list_partitions(root) else {
        return out;
    };
    for tp in tps.into_iter().filter(|tp| tp.topic == OFFSETS_TOPIC) {
        let reader = kafkalog::reader::PartitionReader::open(root, &tp).expect("reader");
        reader
            .for_each_batch(0, true, |h, bytes| {
                for r in kafkalog::records::decode_records(h, bytes).expect("records") {
                    let key = r.key.as_deref().expect("key");
                    if let Ok(OffsetsRecord::Commit {
                        group,
                        topic,
                        partition,
                        committed,
                    }) = offsets_topic::decode(key, r.value.as_deref())
                    {
                        match committed {
                            Some(c) => {
                                out.insert((group, topic, partition), c.offset);
                            }
                            None => {
                                out.remove(&(group, topic, partition));
                            }
                        }
                    }
                }
                std::ops::ControlFlow::Continue(())
            })
            .expect("scan");
    }
    out
}

fn key(g: &str, t: &str, p: i32) -> (String, String, i32) {
    (g.to_string(), t.to_string(), p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_offsets_are_synced_clamped_deleted_and_stop_at_failover() {
    let console = regex::Regex::new("^(?:console-consumer-.*)$").expect("re");
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        {
            let d = LogDir::open(&source).expect("source");
            for (topic, p) in [("orders", 0), ("orders", 1), ("events", 0)] {
                let tp = TopicPartition::new(topic, p).expect("tp");
                let mut log = d
                    .open_or_create_partition(
                        &tp,
                        Some(TopicId::from_bytes([4; 16])),
                        LogConfig::default(),
                    )
                    .expect("create");
                produce(&mut log, 100, 0, 10);
                log.close().expect("close");
            }
        }
        source_commit(
            &source,
            "billing",
            &[("orders", 0, commit(40, 1)), ("orders", 1, commit(100, 1))],
        );
        // Beyond what the mirror will hold (the source log ends at 100).
        source_commit(
            &source,
            "audit",
            &[("orders", 0, commit(150, 1)), ("orders", 1, commit(10, 1))],
        );
        // A later commit wins; a group not selected is not shipped.
        source_commit(&source, "billing", &[("orders", 0, commit(60, 2))]);
        source_commit(
            &source,
            "console-consumer-1",
            &[("orders", 0, commit(5, 1))],
        );

        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let store: Arc<dyn ObjectStore> = counting.clone();
        let mut opts = shipper_options(&b, &source, "src");
        opts.exclude_groups = Some(console.clone());
        opts.group_sync_interval = std::time::Duration::ZERO;
        let mut shipper = Shipper::new(opts.clone(), store.clone()).expect("shipper");
        let shipped = shipper.ship_available().await;
        assert!(
            shipped.errors.is_empty(),
            "[{}] {:?}",
            b.name,
            shipped.errors
        );
        assert_eq!(shipped.group_versions, 1, "[{}] {shipped:?}", b.name);
        assert!(
            !source.join(format!("{OFFSETS_TOPIC}-0")).exists()
                || shipper
                    .partitions()
                    .iter()
                    .all(|p| p.topic != OFFSETS_TOPIC),
            "[{}] __consumer_offsets is not a data partition",
            b.name
        );

        let mut a = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(store.clone()),
        )
        .expect("applier");
        drain(&mut a).await;
        let got = dest_offsets(&dest);
        assert_eq!(
            got.get(&key("billing", "orders", 0)),
            Some(&60),
            "[{}] {got:?}",
            b.name
        );
        assert_eq!(
            got.get(&key("billing", "orders", 1)),
            Some(&100),
            "[{}]",
            b.name
        );
        assert_eq!(
            got.get(&key("audit", "orders", 0)),
            Some(&100),
            "[{}] clamped to the mirror's log end",
            b.name
        );
        assert_eq!(
            got.get(&key("audit", "orders", 1)),
            Some(&10),
            "[{}]",
            b.name
        );
        assert!(
            !got.contains_key(&key("console-consumer-1", "orders", 0)),
            "[{}] excluded group",
            b.name
        );
        let rec = a.group_sync().record().expect("record").clone();
        assert_eq!((rec.version, rec.groups.len()), (1, 2), "[{}]", b.name);
        assert_eq!(a.group_sync().clamped, 1, "[{}]", b.name);

        // Idle: the shipper makes no request, the applier one GET a poll.
        let before = counting.snapshot();
        let idle = shipper.run_cycle().await;
        assert!(!idle.did_something(), "[{}] {idle:?}", b.name);
        assert_eq!(
            counting.snapshot().since(&before).total(),
            0,
            "[{}] idle shipper",
            b.name
        );
        let before = counting.snapshot();
        for _ in 0..5 {
            a.run_once().await;
        }
        let used = counting.snapshot().since(&before);
        assert_eq!(
            (used.get, used.total()),
            (5, 5),
            "[{}] idle applier: {used:?}",
            b.name
        );

        // A source tombstone deletes the synced offset; a new commit moves.
        source_commit(&source, "audit", &[("orders", 1, None)]);
        source_commit(&source, "billing", &[("orders", 0, commit(70, 3))]);
        let before = counting.snapshot();
        let r = shipper.ship_available().await;
        assert_eq!(r.group_versions, 1, "[{}] {r:?}", b.name);
        let shipped = counting.snapshot().since(&before);
        // One delta and one head: the head's probe and read, two PUTs.
        assert_eq!(shipped.put, 2, "[{}] {shipped:?}", b.name);
        let before = counting.snapshot();
        drain(&mut a).await;
        let applied = counting.snapshot().since(&before);
        // The head, the delta it names, and the probe for the next head.
        assert!(applied.get <= 4, "[{}] {applied:?}", b.name);
        println!(
            "[{}] a group offsets change: shipper {} requests ({} PUT, {} GET), applier {} requests ({} GET)",
            b.name,
            shipped.total(),
            shipped.put,
            shipped.get,
            applied.total(),
            applied.get
        );
        a.run_once().await;
        let got = dest_offsets(&dest);
        assert_eq!(
            got.get(&key("billing", "orders", 0)),
            Some(&70),
            "[{}] {got:?}",
            b.name
        );
        assert!(
            !got.contains_key(&key("audit", "orders", 1)),
            "[{}] {got:?}",
            b.name
        );

        // After failover (stop) of orders, its offsets are no longer
        // synced; those of events still are.
        let out = a
            .command(Command::Stop, &["orders".to_string()], false)
            .await;
        assert!(
            out.iter().all(|o| o.error.is_none()),
            "[{}] {out:?}",
            b.name
        );
        source_commit(
            &source,
            "billing",
            &[("orders", 0, commit(20, 4)), ("events", 0, commit(90, 4))],
        );
        shipper.ship_available().await;
        drain(&mut a).await;
        a.run_once().await;
        let got = dest_offsets(&dest);
        assert_eq!(
            got.get(&key("billing", "orders", 0)),
            Some(&70),
            "[{}] STOPPED keeps its own",
            b.name
        );
        assert_eq!(
            got.get(&key("billing", "events", 0)),
            Some(&90),
            "[{}] {got:?}",
            b.name
        );
    }
}

/// Failback (issue 15, item 5): after failover to B, B's consumers commit
/// on B; when A mirrors B back, A's groups take B's newer offsets by the
/// same rules, and an offset A's consumers committed later than B's stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_failback_the_old_source_takes_the_new_primarys_group_offsets() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
        let t = TopicPartition::new("payments", 0).expect("tp");
        let id = TopicId::from_bytes([9; 16]);
        {
            let d = LogDir::open(&a_dir).expect("a");
            let mut log = d
                .open_or_create_partition(&t, Some(id), LogConfig::default())
                .expect("create");
            produce(&mut log, 100, 3, 10);
        }
        source_commit(&a_dir, "ledger", &[("payments", 0, commit(80, 10))]);
        source_commit(&a_dir, "audit", &[("payments", 0, commit(20, 10))]);
        ship(&b, &a_dir, "cluster-a").await;
        let mut mirror_b = apply(&b, applier_options(&b, &b_dir, "cluster-a", "cluster-b")).await;
        assert_eq!(
            dest_offsets(&b_dir).get(&key("ledger", "payments", 0)),
            Some(&80),
            "[{}]",
            b.name
        );
        // Failover: B is the primary; its consumers move ledger on.
        let out = mirror_b.command(Command::Stop, &[], true).await;
        assert_eq!(
            out[0].state.as_deref(),
            Some("STOPPED"),
            "[{}] {out:?}",
            b.name
        );
        drop(mirror_b);
        {
            let d = LogDir::open(&b_dir).expect("b");
            let mut log = d.open_partition(&t, LogConfig::default()).expect("open");
            let epoch = log.epochs().latest_epoch().expect("epoch");
            produce(&mut log, 20, epoch, 10);
        }
        source_commit(&b_dir, "ledger", &[("payments", 0, commit(115, 20))]);
        // On A, audit's consumers committed after B's copy of audit.
        source_commit(&a_dir, "audit", &[("payments", 0, commit(30, 30))]);
        // Failback: A mirrors B.
        ship(&b, &b_dir, "cluster-b").await;
        let mut opts = applier_options(&b, &a_dir, "cluster-b", "cluster-a");
        opts.topics = None;
        let mut mirror_a = Applier::open(opts, Some(b.store.clone())).expect("a");
        let out = mirror_a
            .command(Command::Start, &["payments".into()], false)
            .await;
        assert_eq!(
            out[0].state.as_deref(),
            Some("PREPARING"),
            "[{}] {out:?}",
            b.name
        );
        drain(&mut mirror_a).await;
        mirror_a.run_once().await;
        let got = dest_offsets(&a_dir);
        assert_eq!(
            got.get(&key("ledger", "payments", 0)),
            Some(&115),
            "[{}] B's newer commit: {got:?}",
            b.name
        );
        assert_eq!(
            got.get(&key("audit", "payments", 0)),
            Some(&30),
            "[{}] A's own later commit stays: {got:?}",
            b.name
        );
    }
}
