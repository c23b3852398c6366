//! Applier tests against hand-published manifests (independent of the
//! shipper): every segment of a source log is published as one range, the
//! way the shipper lays them out, so the applier's behaviour is checked on
//! its own. The end-to-end suite with the real shipper is in `tests/`.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use applier::{Applier, ApplierOptions};
use bytes::Bytes;
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::checkpoint::EpochEntry;
use kafkalog::reader::PartitionReader;
use kafkalog::{LogConfig, LogDir, PartitionLog, TopicId, TopicPartition};
use manifest::feed::HeadEntry;
use manifest::layout::{ClusterLayout, PartitionKey};
use manifest::partition::{PartitionManifest, ShippedRange};
use manifest::state::{Command, PartitionState};
use manifest::store::ManifestStore;
use object_store::ObjectStore;

const SOURCE: &str = "src-cluster";

fn tp(t: &str) -> TopicPartition {
    TopicPartition::new(t, 0).expect("tp")
}

fn topic_id() -> TopicId {
    "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id")
}

/// Appends `n` records at `epoch` as the leader, 10 per batch.
fn produce(log: &mut PartitionLog, n: usize, epoch: i32) {
    let recs: Vec<RecordInput> = (0..n)
        .map(|i| RecordInput {
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(vec![b'v'; 100]),
            headers: vec![],
        })
        .collect();
    for chunk in recs.chunks(10) {
        let mut b = build_batch(&BatchSpec::new(0, epoch), chunk).expect("batch");
        log.append_as_leader(&mut b, epoch).expect("append");
    }
}

/// Publishes the whole source partition: one range per segment, one
/// manifest version, one head.
async fn publish(
    store: &ManifestStore,
    source: &Path,
    t: &TopicPartition,
    upload: &str,
) -> PartitionManifest {
    let reader = PartitionReader::open(source, t).expect("reader");
    let pk = PartitionKey {
        tp: t.clone(),
        topic_id: topic_id(),
    };
    let segments = reader.segments().expect("segments");
    let mut m = PartitionManifest::new(SOURCE, t, topic_id());
    m.log_start_offset = segments.first().map_or(0, |s| s.base_offset);
    m.shipped_end_offset = m.log_start_offset;
    for (i, seg) in segments.iter().enumerate() {
        let mut bytes = Vec::new();
        let mut first = None;
        let mut last = 0;
        let mut epochs: Vec<EpochEntry> = Vec::new();
        let mut max_ts = -1;
        let mut batches = 0;
        reader
            .for_each_batch(seg.base_offset, true, |h, b| {
                if h.base_offset < seg.base_offset
                    || segments
                        .get(i + 1)
                        .is_some_and(|n| h.base_offset >= n.base_offset)
                {
                    return ControlFlow::Continue(());
                }
                first.get_or_insert(h.base_offset);
                last = h.last_offset();
                if epochs
                    .last()
                    .is_none_or(|e| e.epoch != h.partition_leader_epoch)
                {
                    epochs.push(EpochEntry {
                        epoch: h.partition_leader_epoch,
                        start_offset: h.base_offset,
                    });
                }
                max_ts = max_ts.max(h.max_timestamp);
                batches += 1;
                bytes.extend_from_slice(b);
                ControlFlow::Continue(())
            })
            .expect("walk");
        let Some(first) = first else { continue };
        let key = store
            .layout()
            .data_key(&pk, first, last, epochs[0].epoch, upload)
            .expect("key");
        store
            .put_new(&key, Bytes::from(bytes.clone()))
            .await
            .expect("put");
        m.ranges.push(ShippedRange {
            key,
            base_offset: first,
            last_offset: last,
            bytes: bytes.len() as u64,
            batches,
            crc32c: crc32c::crc32c(&bytes),
            max_timestamp: max_ts,
            epochs,
            segment_base_offset: seg.base_offset,
            completes_segment: i + 1 < segments.len(),
            segment_generation: 0,
        });
        m.shipped_end_offset = last + 1;
    }
    m.source_high_watermark = m.shipped_end_offset;
    let end = m.shipped_end_offset;
    m.lineage = reader
        .epoch_entries()
        .expect("epochs")
        .into_iter()
        .filter(|e| e.start_offset < end)
        .collect();
    let committed = store
        .update_manifest(&pk, None, |_| {
            Ok::<_, std::convert::Infallible>(Some(m.clone()))
        })
        .await
        .expect("store")
        .expect("decided")
        .expect("committed");
    store
        .publish_head(None, "test", &[HeadEntry::for_manifest(&committed)])
        .await
        .expect("head");
    committed
}

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
