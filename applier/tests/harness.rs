//! Applier tests against hand-published manifests (independent of the
//! shipper): every segment of a source log is published as one range, the
//! way the shipper lays them out, so the applier's behaviour is checked on
//! its own. The end-to-end suite with the real shipper is in `tests/`.

mod common;

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use applier::{Applier, ApplierOptions};
use bucket::store::ManifestStore;
use common::{SOURCE, produce, publish, topic_id, tp};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::reader::PartitionReader;
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use manifest::layout::ClusterLayout;
use manifest::state::{Command, PartitionState};
use object_store::ObjectStore;

struct World {
    _dir: tempfile::TempDir,
    source: std::path::PathBuf,
    dest: std::path::PathBuf,
    object_store: Arc<dyn ObjectStore>,
    store: ManifestStore,
}

fn world() -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    let dest = dir.path().join("dest");
    let object_store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let store = ManifestStore::new(
        object_store.clone(),
        ClusterLayout::new("", SOURCE).expect("layout"),
    );
    World {
        _dir: dir,
        source,
        dest,
        object_store,
        store,
    }
}

fn options(w: &World) -> ApplierOptions {
    let mut o = ApplierOptions::new(&w.dest, SOURCE);
    o.local_cluster_id = Some("dest-cluster".into());
    o.topics = Some(regex::Regex::new("^.*$").expect("regex"));
    o
}

async fn apply_all(a: &mut Applier) {
    for _ in 0..10 {
        let r = a.run_once().await;
        if r.batches == 0 && r.transitions == 0 {
            break;
        }
    }
}

fn segment_bytes(root: &Path, t: &TopicPartition) -> Vec<(i64, Vec<u8>)> {
    PartitionReader::open(root, t)
        .expect("reader")
        .segments()
        .expect("segs")
        .into_iter()
        .map(|s| (s.base_offset, std::fs::read(&s.path).expect("read")))
        .collect()
}

#[tokio::test]
async fn mirrors_byte_identical_segments_with_offsets_and_lineage() {
    let w = world();
    {
        let dir = LogDir::open(&w.source).expect("source");
        let cfg = LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        };
        let mut log = dir
            .open_or_create_partition(&tp("orders"), Some(topic_id()), cfg)
            .expect("create");
        produce(&mut log, 30, 0);
        produce(&mut log, 40, 2);
        produce(&mut log, 30, 3);
        log.close().expect("close");
    }
    publish(&w.store, &w.source, &tp("orders"), "u1").await;
    let mut a = Applier::open(options(&w), Some(w.object_store.clone())).expect("open");
    apply_all(&mut a).await;
    assert_eq!(a.state_of(&tp("orders")), Some(PartitionState::Mirroring));
    drop(a);
    assert_eq!(
        segment_bytes(&w.dest, &tp("orders")),
        segment_bytes(&w.source, &tp("orders")),
        "byte-identical segments"
    );
    let lineage = PartitionReader::open(&w.dest, &tp("orders"))
        .expect("reader")
        .epoch_entries()
        .expect("epochs");
    assert_eq!(
        lineage
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect::<Vec<_>>(),
        vec![(0, 0), (2, 30), (3, 70)]
    );
    let rows = applier::status::collect(&w.dest).expect("status");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].local_log_end_offset, rows[0].lag_offsets),
        (100, Some(0))
    );
}

#[tokio::test]
async fn writes_are_refused_in_every_state_but_stopped_and_stop_aborts_open_transactions() {
    let w = world();
    {
        let dir = LogDir::open(&w.source).expect("source");
        let mut log = dir
            .open_or_create_partition(&tp("payments"), Some(topic_id()), LogConfig::default())
            .expect("create");
        produce(&mut log, 20, 4);
        // Two producers leave transactions open.
        for pid in [7001i64, 7002] {
            let spec = BatchSpec {
                transactional: true,
                producer_id: pid,
                producer_epoch: 1,
                base_sequence: 0,
                ..BatchSpec::new(0, 4)
            };
            let mut b = build_batch(
                &spec,
                &[RecordInput {
                    timestamp: 1,
                    key: None,
                    value: Some(b"tx".to_vec()),
                    headers: vec![],
                }],
            )
            .expect("batch");
            log.append_as_leader(&mut b, 4).expect("append");
        }
        log.close().expect("close");
    }
    publish(&w.store, &w.source, &tp("payments"), "u1").await;
    let mut a = Applier::open(options(&w), Some(w.object_store.clone())).expect("open");
    apply_all(&mut a).await;
    let refused = |dest: &Path| {
        let dir = PartitionReader::open(dest, &tp("payments")).expect("reader");
        dir.read_only_reason().expect("guard")
    };
    assert!(refused(&w.dest).is_some(), "MIRRORING is read-only");
    let out = a.command(Command::Pause, &["payments".into()], false).await;
    assert_eq!(out[0].state.as_deref(), Some("PAUSED"));
    assert!(refused(&w.dest).is_some(), "PAUSED is read-only");
    let out = a.command(Command::Pause, &["payments".into()], false).await;
    assert_eq!(
        (out[0].state.as_deref(), out[0].error.as_deref()),
        (Some("PAUSED"), None),
        "repeated pause is a no-op"
    );
    let out = a.command(Command::Start, &["payments".into()], false).await;
    assert!(
        out[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("PAUSED")),
        "{out:?}"
    );
    let out = a.command(Command::Stop, &["payments".into()], false).await;
    assert_eq!(out[0].state.as_deref(), Some("STOPPED"), "{out:?}");
    assert!(refused(&w.dest).is_none(), "STOPPED is writable");
    drop(a);

    // Two ABORT markers at LME + 1, then a producer write at an epoch above the LME.
    let dir = LogDir::open(&w.dest).expect("dest");
    let mut log = dir
        .open_partition(&tp("payments"), LogConfig::default())
        .expect("open");
    let bytes = log.read(22, usize::MAX).expect("read");
    let markers: Vec<_> = kafkalog::batch::BatchIter::verified(&bytes, 0)
        .map(|r| r.expect("valid").0)
        .collect();
    assert_eq!(markers.len(), 2);
    for h in &markers {
        assert!(h.is_control() && h.is_transactional());
        assert_eq!(h.partition_leader_epoch, 5, "LME 4 + 1");
    }
    assert!(log.open_transactions().is_empty());
    let mut b2 = build_batch(
        &BatchSpec::new(0, 5),
        &[RecordInput {
            timestamp: 2,
            key: None,
            value: Some(b"after".to_vec()),
            headers: vec![],
        }],
    )
    .expect("batch");
    let info = log
        .append_as_leader(&mut b2, log.epochs().latest_epoch().expect("epoch"))
        .expect("writable");
    assert_eq!(info.first_offset, 24);
    assert_eq!(log.epochs().latest_epoch(), Some(5));
}

#[tokio::test]
async fn identity_checks_refuse_what_they_must() {
    let w = world();
    {
        let dir = LogDir::open(&w.source).expect("source");
        for t in [
            "__consumer_offsets",
            "app-store-changelog",
            "orders",
            "archive",
        ] {
            let mut log = dir
                .open_or_create_partition(&tp(t), Some(topic_id()), LogConfig::default())
                .expect("create");
            produce(&mut log, 10, 0);
        }
    }
    for t in [
        "__consumer_offsets",
        "app-store-changelog",
        "orders",
        "archive",
    ] {
        publish(&w.store, &w.source, &tp(t), "u1").await;
    }
    // The destination already has `orders` with another topic id.
    {
        let dir = LogDir::open(&w.dest).expect("dest");
        let other: TopicId = "AAAAAAAAAAAAAAAAAAAAAg".parse().expect("id");
        dir.open_or_create_partition(&tp("orders"), Some(other), LogConfig::default())
            .expect("create");
    }
    let mut o = options(&w);
    o.tiered_topics = vec!["archive".into()];
    let mut a = Applier::open(o, Some(w.object_store.clone())).expect("open");
    apply_all(&mut a).await;
    assert_eq!(a.state_of(&tp("archive")), Some(PartitionState::Failed));
    let rows = applier::status::collect(&w.dest).expect("status");
    let find = |t: &str| rows.iter().find(|r| r.topic == t).cloned();
    let archive = find("archive").expect("archive");
    assert!(
        archive
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("remote.storage.enable=true")),
        "{archive:?}"
    );
    let orders = find("orders").expect("orders listed");
    assert_eq!(orders.state, "FAILED");
    assert!(
        orders
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("inconsistent topic id")),
        "{orders:?}"
    );
    assert!(
        find("__consumer_offsets").is_none() && find("app-store-changelog").is_none(),
        "never created"
    );
    let out = a
        .command(Command::Start, &["__consumer_offsets".into()], false)
        .await;
    assert!(
        out[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("internal")),
        "{out:?}"
    );
    let out = a
        .command(Command::Start, &["app-store-changelog".into()], false)
        .await;
    assert!(
        out[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("Streams")),
        "{out:?}"
    );
}

#[tokio::test]
async fn a_corrupt_object_fails_its_partition_only_and_recovers_after_repair() {
    let w = world();
    {
        let dir = LogDir::open(&w.source).expect("source");
        for t in ["good", "bad"] {
            let mut log = dir
                .open_or_create_partition(&tp(t), Some(topic_id()), LogConfig::default())
                .expect("create");
            produce(&mut log, 50, 1);
        }
    }
    publish(&w.store, &w.source, &tp("good"), "u1").await;
    let m = publish(&w.store, &w.source, &tp("bad"), "u1").await;
    let key = m.ranges[0].key.clone();
    let original = w.store.get(&key).await.expect("get");
    let mut flipped = original.to_vec();
    flipped[100] ^= 0x20;
    w.object_store
        .put(
            &object_store::path::Path::from(key.as_str()),
            flipped.into(),
        )
        .await
        .expect("overwrite");

    let mut a = Applier::open(options(&w), Some(w.object_store.clone())).expect("open");
    apply_all(&mut a).await;
    assert_eq!(a.state_of(&tp("good")), Some(PartitionState::Mirroring));
    assert_eq!(a.state_of(&tp("bad")), Some(PartitionState::Failed));
    let row = applier::status::collect(&w.dest)
        .expect("status")
        .into_iter()
        .find(|r| r.topic == "bad")
        .expect("row");
    assert!(
        row.last_error
            .as_deref()
            .is_some_and(|e| e.contains("CRC") && e.contains(&key)),
        "{row:?}"
    );
    assert_eq!(row.retryable, Some(false));
    // Repaired, restarted: catches up with no gap and no duplicate.
    w.object_store
        .put(
            &object_store::path::Path::from(key.as_str()),
            original.clone().into(),
        )
        .await
        .expect("repair");
    let out = a.command(Command::Start, &["bad".into()], false).await;
    assert_eq!(out[0].state.as_deref(), Some("PREPARING"), "{out:?}");
    apply_all(&mut a).await;
    assert_eq!(a.state_of(&tp("bad")), Some(PartitionState::Mirroring));
    drop(a);
    assert_eq!(
        segment_bytes(&w.dest, &tp("bad")),
        segment_bytes(&w.source, &tp("bad"))
    );
}

use object_store::ObjectStoreExt;

fn lineage_of(root: &Path, t: &TopicPartition) -> Vec<(i32, i64)> {
    PartitionReader::open(root, t)
        .expect("reader")
        .epoch_entries()
        .expect("epochs")
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect()
}

fn leo_of(root: &Path, t: &TopicPartition) -> i64 {
    PartitionReader::open(root, t)
        .expect("reader")
        .for_each_batch(0, false, |_, _| ControlFlow::Continue(()))
        .expect("walk")
}

/// The spec's worked example: A has {3@0, 5@40, 7@100} and LEO 130; B
/// stopped at 100 with LME 5 and wrote at epoch 6 since. Failback cuts A to
/// 100 and copies B's records; then A and B are byte-identical.
#[tokio::test]
async fn failback_worked_example() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    let bucket: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let store_a = ManifestStore::new(
        bucket.clone(),
        ClusterLayout::new("", "cluster-a").expect("layout"),
    );
    let store_b = ManifestStore::new(
        bucket.clone(),
        ClusterLayout::new("", "cluster-b").expect("layout"),
    );
    let t = tp("orders");
    {
        let a = LogDir::open(&a_dir).expect("a");
        let mut log = a
            .open_or_create_partition(&t, Some(topic_id()), LogConfig::default())
            .expect("create");
        produce(&mut log, 40, 3);
        produce(&mut log, 60, 5);
    }
    publish(&store_a, &a_dir, &t, "a1").await;
    // B mirrors A up to 100.
    let mut b_opts = ApplierOptions::new(&b_dir, "cluster-a");
    b_opts.local_cluster_id = Some("cluster-b".into());
    b_opts.topics = Some(regex::Regex::new("^orders$").expect("regex"));
    let mut b = Applier::open(b_opts, Some(bucket.clone())).expect("b");
    apply_all(&mut b).await;
    assert_eq!(leo_of(&b_dir, &t), 100);
    // Disaster: failover to B (LME 5), B's producers write at epoch 6.
    let out = b.command(Command::Stop, &["orders".into()], false).await;
    assert_eq!(out[0].state.as_deref(), Some("STOPPED"));
    drop(b);
    {
        let bd = LogDir::open(&b_dir).expect("b");
        let mut log = bd.open_partition(&t, LogConfig::default()).expect("open");
        assert_eq!(log.epochs().latest_epoch(), Some(6));
        produce(&mut log, 20, 6);
    }
    // Meanwhile A, cut off, kept writing at epoch 7.
    {
        let a = LogDir::open(&a_dir).expect("a");
        let mut log = a.open_partition(&t, LogConfig::default()).expect("open");
        produce(&mut log, 30, 7);
        assert_eq!(log.log_end_offset(), 130);
    }
    assert_eq!(lineage_of(&a_dir, &t), vec![(3, 0), (5, 40), (7, 100)]);
    // B ships its log (its record says: mirror of A, STOPPED, LME 5).
    let mb = publish(&store_b, &b_dir, &t, "b1").await;
    assert_eq!(
        mb.mirror_origin
            .as_ref()
            .map(|o| (o.source_cluster_id.as_str(), o.state.as_str(), o.lme)),
        Some(("cluster-a", "STOPPED", Some(5)))
    );
    // Failback: A starts mirroring from B.
    let mut a_opts = ApplierOptions::new(&a_dir, "cluster-b");
    a_opts.local_cluster_id = Some("cluster-a".into());
    let mut a = Applier::open(a_opts, Some(bucket.clone())).expect("a");
    // A's 30 records of its own are cut only when the operator says so.
    let out = a.command(Command::Start, &["orders".into()], false).await;
    assert!(
        out[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("offsets 100..129 (30 records) would be cut")),
        "{out:?}"
    );
    assert_eq!(leo_of(&a_dir, &t), 130, "nothing cut");
    let out = a
        .command_allowing(Command::Start, &["orders".into()], false, true)
        .await;
    assert_eq!(out[0].state.as_deref(), Some("PREPARING"), "{out:?}");
    apply_all(&mut a).await;
    assert_eq!(a.state_of(&t), Some(PartitionState::Mirroring));
    drop(a);
    assert_eq!(leo_of(&a_dir, &t), 120);
    assert_eq!(lineage_of(&a_dir, &t), vec![(3, 0), (5, 40), (6, 100)]);
    let strip = |v: Vec<(i64, Vec<u8>)>| v;
    assert_eq!(
        strip(segment_bytes(&a_dir, &t)),
        strip(segment_bytes(&b_dir, &t)),
        "A and B are byte-identical"
    );
}

/// A mirror loop: B mirrors t from A; A starting to mirror t from B fails.
#[tokio::test]
async fn a_mirror_loop_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    let bucket: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let store_a = ManifestStore::new(
        bucket.clone(),
        ClusterLayout::new("", "cluster-a").expect("layout"),
    );
    let store_b = ManifestStore::new(
        bucket.clone(),
        ClusterLayout::new("", "cluster-b").expect("layout"),
    );
    let t = tp("orders");
    {
        let a = LogDir::open(&a_dir).expect("a");
        let mut log = a
            .open_or_create_partition(&t, Some(topic_id()), LogConfig::default())
            .expect("create");
        produce(&mut log, 20, 1);
    }
    publish(&store_a, &a_dir, &t, "a1").await;
    let mut b_opts = ApplierOptions::new(&b_dir, "cluster-a");
    b_opts.local_cluster_id = Some("cluster-b".into());
    b_opts.topics = Some(regex::Regex::new("^orders$").expect("regex"));
    let mut b = Applier::open(b_opts, Some(bucket.clone())).expect("b");
    apply_all(&mut b).await;
    drop(b);
    // B (a shipper on B's log dir) publishes its mirror partition.
    publish(&store_b, &b_dir, &t, "b1").await;
    let mut a_opts = ApplierOptions::new(&a_dir, "cluster-b");
    a_opts.local_cluster_id = Some("cluster-a".into());
    let mut a = Applier::open(a_opts, Some(bucket.clone())).expect("a");
    a.command(Command::Start, &["orders".into()], false).await;
    apply_all(&mut a).await;
    assert_eq!(a.state_of(&t), Some(PartitionState::Failed));
    let row = applier::status::collect(&a_dir)
        .expect("status")
        .into_iter()
        .next()
        .expect("row");
    assert!(
        row.last_error
            .as_deref()
            .is_some_and(|e| e.contains("mirror loop")),
        "{row:?}"
    );
    assert_eq!(leo_of(&a_dir, &t), 20, "nothing truncated");
}

/// The source's log start passes the destination's end: full truncation,
/// restart at the source's log start (behaviour 7).
#[tokio::test]
async fn source_log_start_beyond_the_destination_end_restarts_there() {
    let w = world();
    let t = tp("events");
    let cfg = LogConfig {
        segment_bytes: 2048,
        ..LogConfig::default()
    };
    {
        let dir = LogDir::open(&w.source).expect("source");
        let mut log = dir
            .open_or_create_partition(&t, Some(topic_id()), cfg.clone())
            .expect("create");
        produce(&mut log, 20, 0);
    }
    publish(&w.store, &w.source, &t, "u1").await;
    let mut a = Applier::open(options(&w), Some(w.object_store.clone())).expect("open");
    apply_all(&mut a).await;
    assert_eq!(leo_of(&w.dest, &t), 20);
    a.command(Command::Pause, &["events".into()], false).await;
    // The source moves on far and retention deletes everything below 60.
    {
        let dir = LogDir::open(&w.source).expect("source");
        let mut log = dir.open_partition(&t, cfg.clone()).expect("open");
        produce(&mut log, 80, 1);
        log.raise_log_start(60).expect("retention");
        assert!(log.segment_base_offsets()[0] > 20);
    }
    let m = publish(&w.store, &w.source, &t, "u2").await;
    a.command(Command::Resume, &["events".into()], false).await;
    apply_all(&mut a).await;
    drop(a);
    let reader = PartitionReader::open(&w.dest, &t).expect("reader");
    let first = reader.segments().expect("segs")[0].base_offset;
    assert_eq!(
        first,
        m.log_start_offset.min(m.ranges[0].segment_base_offset)
    );
    assert_eq!(leo_of(&w.dest, &t), 100);
    let src = segment_bytes(&w.source, &t);
    let dst = segment_bytes(&w.dest, &t);
    assert_eq!(dst, src, "same segments after the restart");
}

/// Unclean truncation at the source at offset 90 with a new epoch: the
/// destination cuts to 90 and copies again (behaviour 8).
#[tokio::test]
async fn source_unclean_truncation_is_followed() {
    let w = world();
    let t = tp("ledger");
    {
        let dir = LogDir::open(&w.source).expect("source");
        let mut log = dir
            .open_or_create_partition(&t, Some(topic_id()), LogConfig::default())
            .expect("create");
        produce(&mut log, 100, 2);
    }
    publish(&w.store, &w.source, &t, "u1").await;
    let mut a = Applier::open(options(&w), Some(w.object_store.clone())).expect("open");
    apply_all(&mut a).await;
    assert_eq!(leo_of(&w.dest, &t), 100);
    {
        let dir = LogDir::open(&w.source).expect("source");
        let mut log = dir.open_partition(&t, LogConfig::default()).expect("open");
        log.truncate_to(90).expect("unclean election");
        produce(&mut log, 30, 3);
    }
    publish(&w.store, &w.source, &t, "u2").await;
    apply_all(&mut a).await;
    assert_eq!(a.state_of(&t), Some(PartitionState::Mirroring));
    drop(a);
    assert_eq!(lineage_of(&w.dest, &t), vec![(2, 0), (3, 90)]);
    assert_eq!(segment_bytes(&w.dest, &t), segment_bytes(&w.source, &t));
}

/// Failback where A kept writing at the LME's epoch: the LME step cuts
/// nothing, the follower step cuts to B's end offset for that epoch
/// (behaviour 5, second half); and an unknown LME cuts to 0 (behaviour 6).
#[tokio::test]
async fn failback_at_the_lme_epoch_and_with_unknown_lme() {
    for lme_known in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
        let bucket: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let store_a = ManifestStore::new(
            bucket.clone(),
            ClusterLayout::new("", "cluster-a").expect("layout"),
        );
        let store_b = ManifestStore::new(
            bucket.clone(),
            ClusterLayout::new("", "cluster-b").expect("layout"),
        );
        let t = tp("orders");
        {
            let a = LogDir::open(&a_dir).expect("a");
            let mut log = a
                .open_or_create_partition(&t, Some(topic_id()), LogConfig::default())
                .expect("create");
            produce(&mut log, 50, 5);
        }
        publish(&store_a, &a_dir, &t, "a1").await;
        let mut b_opts = ApplierOptions::new(&b_dir, "cluster-a");
        b_opts.local_cluster_id = Some("cluster-b".into());
        b_opts.topics = Some(regex::Regex::new("^orders$").expect("regex"));
        let mut b = Applier::open(b_opts, Some(bucket.clone())).expect("b");
        apply_all(&mut b).await;
        b.command(Command::Stop, &["orders".into()], false).await;
        drop(b);
        if !lme_known {
            // B lost its mirror record: its manifest names no origin.
            partdir::record::remove(&b_dir.join("orders-0")).expect("remove");
        }
        {
            let bd = LogDir::open(&b_dir).expect("b");
            let mut log = bd.open_partition(&t, LogConfig::default()).expect("open");
            produce(&mut log, 20, 6);
        }
        {
            // A kept writing at epoch 5 after the split.
            let a = LogDir::open(&a_dir).expect("a");
            let mut log = a.open_partition(&t, LogConfig::default()).expect("open");
            produce(&mut log, 30, 5);
        }
        publish(&store_b, &b_dir, &t, "b1").await;
        let mut a_opts = ApplierOptions::new(&a_dir, "cluster-b");
        a_opts.local_cluster_id = Some("cluster-a".into());
        let mut a = Applier::open(a_opts, Some(bucket.clone())).expect("a");
        // Failback cuts A's writes after the split: on purpose.
        a.command_allowing(Command::Start, &["orders".into()], false, true)
            .await;
        apply_all(&mut a).await;
        assert_eq!(
            a.state_of(&t),
            Some(PartitionState::Mirroring),
            "lme known: {lme_known}"
        );
        drop(a);
        assert_eq!(lineage_of(&a_dir, &t), vec![(5, 0), (6, 50)]);
        assert_eq!(leo_of(&a_dir, &t), 70);
        assert_eq!(
            segment_bytes(&a_dir, &t),
            segment_bytes(&b_dir, &t),
            "identical to B (lme known: {lme_known})"
        );
    }
}

/// Pause, one new source batch: nothing arrives and writes are still
/// refused; resume: the batch arrives, nothing is truncated (behaviour 3).
#[tokio::test]
async fn pause_holds_and_resume_continues_without_truncation() {
    let w = world();
    let t = tp("clicks");
    {
        let dir = LogDir::open(&w.source).expect("source");
        let mut log = dir
            .open_or_create_partition(&t, Some(topic_id()), LogConfig::default())
            .expect("create");
        produce(&mut log, 30, 1);
    }
    publish(&w.store, &w.source, &t, "u1").await;
    let mut a = Applier::open(options(&w), Some(w.object_store.clone())).expect("open");
    apply_all(&mut a).await;
    a.command(Command::Pause, &["clicks".into()], false).await;
    {
        let dir = LogDir::open(&w.source).expect("source");
        let mut log = dir.open_partition(&t, LogConfig::default()).expect("open");
        produce(&mut log, 10, 1);
    }
    publish(&w.store, &w.source, &t, "u2").await;
    apply_all(&mut a).await;
    assert_eq!(leo_of(&w.dest, &t), 30, "paused: nothing arrives");
    assert!(
        PartitionReader::open(&w.dest, &t)
            .expect("reader")
            .read_only_reason()
            .expect("guard")
            .is_some()
    );
    let out = a.command(Command::Resume, &["clicks".into()], false).await;
    assert_eq!(out[0].state.as_deref(), Some("MIRRORING"));
    apply_all(&mut a).await;
    drop(a);
    assert_eq!(leo_of(&w.dest, &t), 40);
    assert_eq!(segment_bytes(&w.dest, &t), segment_bytes(&w.source, &t));
}

/// Every partition resumes in its recorded state after a restart, and an
/// interrupted STOPPING completes on open, with no bucket.
#[tokio::test]
async fn restart_resumes_recorded_states_and_completes_an_interrupted_stop() {
    let w = world();
    {
        let dir = LogDir::open(&w.source).expect("source");
        for t in ["p1", "p2", "p3"] {
            let mut log = dir
                .open_or_create_partition(&tp(t), Some(topic_id()), LogConfig::default())
                .expect("create");
            produce(&mut log, 10, 2);
        }
    }
    for t in ["p1", "p2", "p3"] {
        publish(&w.store, &w.source, &tp(t), "u1").await;
    }
    let mut a = Applier::open(options(&w), Some(w.object_store.clone())).expect("open");
    apply_all(&mut a).await;
    a.command(Command::Pause, &["p2".into()], false).await;
    drop(a);
    // Simulate a crash in the middle of p3's failover: STOPPING persisted,
    // nothing else done.
    {
        let dir = w.dest.join("p3-0");
        let mut rec = partdir::record::read(&dir).expect("read").expect("record");
        let (stopping, _) =
            manifest::state::next(&rec.state, manifest::state::Event::Stop).expect("stop");
        rec.state = stopping;
        partdir::record::write(&rec, &dir).expect("write");
    }
    let a = Applier::open(options(&w), None).expect("open without a bucket");
    assert_eq!(a.state_of(&tp("p1")), Some(PartitionState::Mirroring));
    assert_eq!(a.state_of(&tp("p2")), Some(PartitionState::Paused));
    assert_eq!(a.state_of(&tp("p3")), Some(PartitionState::Stopped));
    drop(a);
    let rows = applier::status::collect(&w.dest).expect("status");
    let p3 = rows.iter().find(|r| r.topic == "p3").expect("p3");
    assert_eq!(
        (p3.state.as_str(), p3.lme, p3.writable),
        ("STOPPED", Some(2), true)
    );
    assert!(
        PartitionReader::open(&w.dest, &tp("p3"))
            .expect("reader")
            .read_only_reason()
            .expect("guard")
            .is_none()
    );
}

/// Cross-region shape: the shipper writes bucket A, replication fills
/// bucket B late and out of order (manifests and heads before the objects
/// they name). The applier waits and reports lag; it does not fail.
#[tokio::test]
async fn objects_replicated_after_their_manifest_are_waited_for() {
    use futures::TryStreamExt;
    let w = world();
    let t = tp("geo");
    {
        let dir = LogDir::open(&w.source).expect("source");
        let mut log = dir
            .open_or_create_partition(
                &t,
                Some(topic_id()),
                LogConfig {
                    segment_bytes: 4096,
                    ..LogConfig::default()
                },
            )
            .expect("create");
        produce(&mut log, 60, 1);
    }
    publish(&w.store, &w.source, &t, "u1").await;
    let bucket_b: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let all: Vec<_> = w.object_store.list(None).try_collect().await.expect("list");
    let (data, meta): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|m| m.location.as_ref().contains("/data/"));
    assert!(!data.is_empty() && !meta.is_empty());
    for m in &meta {
        let bytes = w
            .object_store
            .get(&m.location)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        bucket_b
            .put(&m.location, bytes.into())
            .await
            .expect("replicate");
    }
    let mut a = Applier::open(options(&w), Some(bucket_b.clone())).expect("open");
    apply_all(&mut a).await;
    assert_eq!(
        a.state_of(&t),
        Some(PartitionState::Mirroring),
        "waiting is not failing"
    );
    let row = applier::status::collect(&w.dest)
        .expect("status")
        .into_iter()
        .next()
        .expect("row");
    assert_eq!(row.lag_offsets, Some(60));
    assert!(
        row.waiting_for
            .as_deref()
            .is_some_and(|x| x.contains("not found")),
        "{row:?}"
    );
    // The objects arrive, in reverse order.
    for m in data.iter().rev() {
        let bytes = w
            .object_store
            .get(&m.location)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        bucket_b
            .put(&m.location, bytes.into())
            .await
            .expect("replicate");
    }
    apply_all(&mut a).await;
    drop(a);
    let row = applier::status::collect(&w.dest)
        .expect("status")
        .into_iter()
        .next()
        .expect("row");
    assert_eq!(
        (row.state.as_str(), row.lag_offsets, row.waiting_for.clone()),
        ("MIRRORING", Some(0), None)
    );
    assert_eq!(segment_bytes(&w.dest, &t), segment_bytes(&w.source, &t));
}
