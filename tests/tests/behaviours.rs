//! The spec's testable behaviours 2 to 13 and 15 (`docs/mirroring.md`), end to end:
//! the real shipper ships a source log dir, the real applier applies it,
//! on every backend (`memory://`, `file://`, S3 when configured).
//! Behaviour 1 and the failback worked example are in `scenarios.rs`;
//! behaviour 14 (kill -9) belongs to the reliability harness.

use std::path::Path;

use applier::Applier;
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::reader::PartitionReader;
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use manifest::state::{Command, PartitionState};
use object_store::ObjectStoreExt;
use segmirror_e2e::*;

fn tp(t: &str) -> TopicPartition {
    TopicPartition::new(t, 0).expect("tp")
}

const ID: TopicId = TopicId::from_bytes([3; 16]);

fn source_with(dir: &Path, topics: &[(&str, &[(usize, i32)])]) {
    let d = LogDir::open(dir).expect("source");
    for (t, chunks) in topics {
        let mut log = d
            .open_or_create_partition(&tp(t), Some(ID), LogConfig::default())
            .expect("create");
        for &(n, epoch) in chunks.iter() {
            produce(&mut log, n, epoch, 10);
        }
        log.close().expect("close");
    }
}

fn append_source(dir: &Path, t: &str, n: usize, epoch: i32) {
    let d = LogDir::open(dir).expect("source");
    let mut log = d
        .open_partition(&tp(t), LogConfig::default())
        .expect("open");
    produce(&mut log, n, epoch, 10);
    log.close().expect("close");
}

fn guard(dest: &Path, t: &str) -> Option<String> {
    PartitionReader::open(dest, &tp(t))
        .expect("reader")
        .read_only_reason()
        .expect("guard")
}

fn row(dest: &Path, t: &str) -> applier::status::PartitionStatus {
    applier::status::collect(dest)
        .expect("status")
        .into_iter()
        .find(|r| r.topic == t)
        .unwrap_or_else(|| panic!("no status row for {t}"))
}

/// A producer write is refused with the read-only error. While an applier
/// holds the log dir, the check is the one `kafkalog produce` makes before
/// it asks for the lock (the persisted guard); without one, a real leader
/// append is attempted.
fn write_refused(dest: &Path, t: &str) -> bool {
    let Ok(d) = LogDir::open(dest) else {
        return guard(dest, t).is_some();
    };
    let mut log = d
        .open_partition(&tp(t), LogConfig::default())
        .expect("open");
    let before = log.log_end_offset();
    let mut b = build_batch(
        &BatchSpec::new(0, 100),
        &[RecordInput {
            timestamp: 1,
            key: None,
            value: Some(b"x".to_vec()),
            headers: vec![],
        }],
    )
    .expect("batch");
    let refused = matches!(
        log.append_as_leader(&mut b, 100),
        Err(kafkalog::Error::ReadOnly { .. })
    );
    assert_eq!(
        log.log_end_offset(),
        before,
        "a refused write leaves the log unchanged"
    );
    refused
}

/// 2 and 3: writes refused in PREPARING, MIRRORING, PAUSED and FAILED;
/// pause holds a new batch back, resume brings it with no truncation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_in_every_state_but_stopped_and_pause_resume() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        source_with(&source, &[("clicks", &[(30, 1)])]);
        // PREPARING: started before anything was shipped (waits for a manifest).
        let mut opts = applier_options(&b, &dest, "src", "dst");
        opts.topics = None;
        ship(&b, &source, "src").await;
        let mut a = Applier::open(opts, Some(b.store.clone())).expect("applier");
        let out = a.command(Command::Start, &["clicks".into()], false).await;
        assert_eq!(
            out[0].state.as_deref(),
            Some("PREPARING"),
            "[{}] {out:?}",
            b.name
        );
        assert!(guard(&dest, "clicks").is_some());
        assert!(write_refused(&dest, "clicks"), "[{}] PREPARING", b.name);
        drain(&mut a).await;
        assert_eq!(a.state_of(&tp("clicks")), Some(PartitionState::Mirroring));
        assert!(write_refused(&dest, "clicks"), "[{}] MIRRORING", b.name);
        a.command(Command::Pause, &["clicks".into()], false).await;
        append_source(&source, "clicks", 10, 1);
        ship(&b, &source, "src").await;
        drain(&mut a).await;
        assert_eq!(
            log_end(&dest, &tp("clicks")),
            30,
            "[{}] paused: nothing arrives",
            b.name
        );
        assert!(write_refused(&dest, "clicks"), "[{}] PAUSED", b.name);
        let out = a.command(Command::Resume, &["clicks".into()], false).await;
        assert_eq!(out[0].state.as_deref(), Some("MIRRORING"));
        drain(&mut a).await;
        assert_eq!(
            log_end(&dest, &tp("clicks")),
            40,
            "[{}] resumed: the batch arrives",
            b.name
        );
        let out = a.command(Command::Resume, &["clicks".into()], false).await;
        assert!(out[0].error.is_none(), "resume when MIRRORING is a no-op");
        let out = a.command(Command::Pause, &["nope".into()], false).await;
        assert!(out[0].error.is_some());
        drop(a);
        assert_eq!(
            segment_files(&dest, &tp("clicks")),
            segment_files(&source, &tp("clicks")),
            "[{}] nothing truncated",
            b.name
        );
    }
}

/// 4: stop with two open transactions: two ABORT markers at the new epoch,
/// then producer writes succeed at an epoch above the LME.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_aborts_open_transactions_and_opens_writes_above_the_lme() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        source_with(&source, &[("payments", &[(20, 4)])]);
        {
            let d = LogDir::open(&source).expect("source");
            let mut log = d
                .open_partition(&tp("payments"), LogConfig::default())
                .expect("open");
            for pid in [7001i64, 7002] {
                let spec = BatchSpec {
                    transactional: true,
                    producer_id: pid,
                    producer_epoch: 1,
                    base_sequence: 0,
                    ..BatchSpec::new(0, 4)
                };
                let mut batch = build_batch(
                    &spec,
                    &[RecordInput {
                        timestamp: 5,
                        key: None,
                        value: Some(b"in-flight".to_vec()),
                        headers: vec![],
                    }],
                )
                .expect("batch");
                log.append_as_leader(&mut batch, 4).expect("append");
            }
            log.close().expect("close");
        }
        ship(&b, &source, "src").await;
        let mut a = apply(&b, applier_options(&b, &dest, "src", "dst")).await;
        let out = a.command(Command::Stop, &["payments".into()], false).await;
        assert_eq!(
            out[0].state.as_deref(),
            Some("STOPPED"),
            "[{}] {out:?}",
            b.name
        );
        drop(a);
        let d = LogDir::open(&dest).expect("dest");
        let mut log = d
            .open_partition(&tp("payments"), LogConfig::default())
            .expect("open");
        let bytes = log.read(22, usize::MAX).expect("read");
        let markers: Vec<_> = kafkalog::batch::BatchIter::verified(&bytes, 0)
            .map(|r| r.expect("valid").0)
            .collect();
        assert_eq!(markers.len(), 2, "[{}] two ABORT markers", b.name);
        for (h, bytes) in kafkalog::batch::BatchIter::verified(&bytes, 0).map(|r| r.expect("valid"))
        {
            let marker = kafkalog::records::decode_control_batch(&h, bytes).expect("control");
            assert_eq!(marker.kind, kafkalog::records::ControlType::Abort);
            assert_eq!(h.partition_leader_epoch, 5, "[{}] at LME 4 + 1", b.name);
        }
        let epoch = log.epochs().latest_epoch().expect("epoch");
        assert!(epoch > 4);
        let mut w = build_batch(
            &BatchSpec::new(0, epoch),
            &[RecordInput {
                timestamp: 9,
                key: None,
                value: Some(b"new primary".to_vec()),
                headers: vec![],
            }],
        )
        .expect("batch");
        let info = log
            .append_as_leader(&mut w, epoch)
            .expect("STOPPED accepts writes");
        assert_eq!(info.first_offset, 24);
    }
}

/// 5 (second half) and 6: failback where A kept writing at the LME's epoch
/// (the follower step cuts to B's end offset for it), and with the LME
/// unknown (cut to 0 and copy everything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_at_the_lme_epoch_and_with_unknown_lme() {
    for b in backends() {
        for lme_known in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
            source_with(&a_dir, &[("orders", &[(50, 5)])]);
            ship(&b, &a_dir, "cluster-a").await;
            let mut mb = apply(&b, applier_options(&b, &b_dir, "cluster-a", "cluster-b")).await;
            mb.command(Command::Stop, &[], true).await;
            drop(mb);
            if !lme_known {
                partdir::record::remove(&b_dir.join("orders-0")).expect("forget the record");
            }
            append_source(&b_dir, "orders", 20, 6);
            append_source(&a_dir, "orders", 30, 5);
            ship(&b, &b_dir, "cluster-b").await;
            let mut opts = applier_options(&b, &a_dir, "cluster-b", "cluster-a");
            opts.topics = None;
            let mut ma = Applier::open(opts, Some(b.store.clone())).expect("a");
            // A's writes after the split are cut on purpose.
            ma.command_allowing(Command::Start, &["orders".into()], false, true)
                .await;
            drain(&mut ma).await;
            assert_eq!(
                ma.state_of(&tp("orders")),
                Some(PartitionState::Mirroring),
                "[{}] lme known {lme_known}",
                b.name
            );
            drop(ma);
            assert_eq!(
                lineage(&a_dir, &tp("orders")),
                vec![(5, 0), (6, 50)],
                "[{}] lme known {lme_known}",
                b.name
            );
            assert_eq!(
                segment_files(&a_dir, &tp("orders")),
                segment_files(&b_dir, &tp("orders")),
                "[{}] lme known {lme_known}",
                b.name
            );
        }
    }
}

/// 7 and 8: the source's log start passes the destination's end (full
/// truncation, restart at the source's log start); an unclean truncation
/// at the source at offset 90 with a new epoch (cut to 90, copy again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_retention_and_unclean_truncation_are_followed() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        let small = LogConfig {
            segment_bytes: 2048,
            ..LogConfig::default()
        };
        {
            let d = LogDir::open(&source).expect("source");
            for t in ["events", "ledger"] {
                let mut log = d
                    .open_or_create_partition(&tp(t), Some(ID), small.clone())
                    .expect("create");
                produce(&mut log, if t == "events" { 20 } else { 100 }, 2, 10);
                log.close().expect("close");
            }
        }
        ship(&b, &source, "src").await;
        let mut a = apply(&b, applier_options(&b, &dest, "src", "dst")).await;
        a.command(Command::Pause, &["events".into()], false).await;
        {
            let d = LogDir::open(&source).expect("source");
            let mut events = d
                .open_partition(&tp("events"), small.clone())
                .expect("open");
            produce(&mut events, 80, 2, 10);
            events.raise_log_start(60).expect("retention");
            events.close().expect("close");
            let mut ledger = d
                .open_partition(&tp("ledger"), small.clone())
                .expect("open");
            ledger.truncate_to(90).expect("unclean election");
            produce(&mut ledger, 30, 3, 10);
            ledger.close().expect("close");
        }
        ship(&b, &source, "src").await;
        a.command(Command::Resume, &["events".into()], false).await;
        drain(&mut a).await;
        drop(a);
        let r = row(&dest, "events");
        assert_eq!(
            (r.state.as_str(), r.local_log_end_offset),
            ("MIRRORING", 100),
            "[{}] {r:?}",
            b.name
        );
        assert!(
            r.local_log_start_offset >= 20,
            "[{}] restarted past the old end: {r:?}",
            b.name
        );
        assert_eq!(
            lineage(&dest, &tp("ledger")),
            vec![(2, 0), (3, 90)],
            "[{}]",
            b.name
        );
        assert_eq!(log_end(&dest, &tp("ledger")), 120);
        for t in ["events", "ledger"] {
            match kafkalog::compare::compare_partition(&source, &dest, &tp(t)).expect("compare") {
                kafkalog::compare::Comparison::Identical => {}
                other => panic!("[{}] {t}: {other:?}", b.name),
            }
        }
    }
}

/// 9: a flipped byte in a shipped object: that partition FAILED with a CRC
/// error naming the object; other partitions continue; after the object
/// is fixed and the partition restarted it catches up with no gap and no
/// duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_fails_only_its_partition_until_repaired() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        source_with(&source, &[("good", &[(50, 1)]), ("bad", &[(50, 1)])]);
        ship(&b, &source, "src").await;
        let ms = bucket::store::ManifestStore::new(
            b.store.clone(),
            manifest::layout::ClusterLayout::new(&b.prefix, "src").expect("layout"),
        );
        let key = manifest::layout::PartitionKey {
            tp: tp("bad"),
            topic_id: ID,
        };
        let m = ms
            .latest_manifest(&key, None)
            .await
            .expect("read")
            .expect("manifest");
        let object = m.ranges[0].key.clone();
        let original = ms.get(&object).await.expect("get");
        let mut flipped = original.to_vec();
        flipped[original.len() / 2] ^= 0x01;
        b.store
            .put(
                &object_store::path::Path::from(object.as_str()),
                flipped.into(),
            )
            .await
            .expect("corrupt");
        let mut a = apply(&b, applier_options(&b, &dest, "src", "dst")).await;
        assert_eq!(a.state_of(&tp("good")), Some(PartitionState::Mirroring));
        assert_eq!(a.state_of(&tp("bad")), Some(PartitionState::Failed));
        let r = row(&dest, "bad");
        assert!(
            r.last_error
                .as_deref()
                .is_some_and(|e| e.contains("CRC") && e.contains(&object)),
            "[{}] {r:?}",
            b.name
        );
        assert_eq!(r.retryable, Some(false));
        assert!(
            write_refused(&dest, "bad"),
            "[{}] FAILED is read-only",
            b.name
        );
        b.store
            .put(
                &object_store::path::Path::from(object.as_str()),
                original.into(),
            )
            .await
            .expect("repair");
        a.command(Command::Start, &["bad".into()], false).await;
        drain(&mut a).await;
        assert_eq!(
            a.state_of(&tp("bad")),
            Some(PartitionState::Mirroring),
            "[{}]",
            b.name
        );
        drop(a);
        assert_eq!(
            segment_files(&dest, &tp("bad")),
            segment_files(&source, &tp("bad")),
            "[{}] no gap, no duplicate",
            b.name
        );
    }
}

/// 10, 11 and 13: same name with another topic id (FAILED, inconsistent
/// topic id); Streams changelog/repartition and `__*` topics refused;
/// `remote.storage.enable=true` on the destination (FAILED on PREPARING).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_internal_topics_and_tiered_storage_are_refused() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        source_with(
            &source,
            &[
                ("__transaction_state", &[(10, 0)]),
                ("app-store-changelog", &[(10, 0)]),
                ("app-x-repartition", &[(10, 0)]),
                ("orders", &[(10, 0)]),
                ("archive", &[(10, 0)]),
            ],
        );
        ship(&b, &source, "src").await;
        {
            let d = LogDir::open(&dest).expect("dest");
            d.open_or_create_partition(
                &tp("orders"),
                Some(TopicId::from_bytes([8; 16])),
                LogConfig::default(),
            )
            .expect("other id");
        }
        let mut opts = applier_options(&b, &dest, "src", "dst");
        opts.tiered_topics = vec!["archive".into()];
        let mut a = apply(&b, opts).await;
        let r = row(&dest, "orders");
        assert_eq!(r.state, "FAILED", "[{}]", b.name);
        assert!(
            r.last_error
                .as_deref()
                .is_some_and(|e| e.contains("inconsistent topic id")),
            "[{}] {r:?}",
            b.name
        );
        assert!(
            guard(&dest, "orders").is_none(),
            "a topic that is not ours is left writable"
        );
        let r = row(&dest, "archive");
        assert_eq!(r.state, "FAILED");
        assert!(
            r.last_error
                .as_deref()
                .is_some_and(|e| e.contains("remote.storage.enable=true")),
            "[{}] {r:?}",
            b.name
        );
        for t in [
            "__transaction_state",
            "app-store-changelog",
            "app-x-repartition",
        ] {
            assert!(
                !dest.join(format!("{t}-0")).exists(),
                "[{}] {t} never created",
                b.name
            );
            let out = a.command(Command::Start, &[t.to_string()], false).await;
            assert!(
                out[0]
                    .error
                    .as_deref()
                    .is_some_and(|e| e.contains("refusing to mirror")),
                "[{}] {t}: {out:?}",
                b.name
            );
        }
    }
}

/// 12: B mirrors t from A; A starting to mirror t from B fails with a loop
/// error; mirroring a different topic back works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_loop_is_refused_but_another_topic_mirrors_back() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
        source_with(&a_dir, &[("t", &[(20, 1)])]);
        ship(&b, &a_dir, "cluster-a").await;
        let mb = apply(&b, applier_options(&b, &b_dir, "cluster-a", "cluster-b")).await;
        drop(mb);
        // B also has a topic of its own.
        source_with(&b_dir, &[("u", &[(15, 0)])]);
        ship(&b, &b_dir, "cluster-b").await;
        let mut opts = applier_options(&b, &a_dir, "cluster-b", "cluster-a");
        opts.topics = None;
        let mut ma = Applier::open(opts, Some(b.store.clone())).expect("a");
        ma.command(Command::Start, &["t".into()], false).await;
        ma.command(Command::Start, &["u".into()], false).await;
        drain(&mut ma).await;
        assert_eq!(
            ma.state_of(&tp("t")),
            Some(PartitionState::Failed),
            "[{}]",
            b.name
        );
        drop(ma);
        let r = row(&a_dir, "t");
        assert!(
            r.last_error
                .as_deref()
                .is_some_and(|e| e.contains("mirror loop")),
            "[{}] {r:?}",
            b.name
        );
        assert_eq!(log_end(&a_dir, &tp("t")), 20, "nothing truncated");
        assert_eq!(row(&a_dir, "u").state, "MIRRORING");
        assert_eq!(log_end(&a_dir, &tp("u")), 15);
    }
}

/// Compaction: a source segment replaced by its compacted version is
/// shipped again and replaced on the destination once it lies wholly below
/// the destination's log end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_source_segment_is_replaced_on_the_destination() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        let small = LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        };
        {
            let d = LogDir::open(&source).expect("source");
            let mut log = d
                .open_or_create_partition(&tp("state"), Some(ID), small.clone())
                .expect("create");
            produce(&mut log, 120, 1, 10);
            log.close().expect("close");
        }
        ship(&b, &source, "src").await;
        let mut a = apply(&b, applier_options(&b, &dest, "src", "dst")).await;
        // The cleaner keeps every other batch of the first segment.
        {
            let d = LogDir::open(&source).expect("source");
            let mut log = d.open_partition(&tp("state"), small.clone()).expect("open");
            let first = log.segment_base_offsets()[0];
            let next = log.segment_base_offsets()[1];
            let bytes = log.read(first, usize::MAX).expect("read");
            let mut kept = Vec::new();
            for (i, (h, batch)) in kafkalog::batch::BatchIter::verified(&bytes, 0)
                .map(|r| r.expect("valid"))
                .enumerate()
            {
                if h.last_offset() < next && i % 2 == 1 {
                    kept.extend_from_slice(batch);
                }
            }
            log.replace_segment(first, &kept).expect("compact");
            log.close().expect("close");
        }
        let report = ship(&b, &source, "src").await;
        assert_eq!(report.reshipped_segments, 1, "[{}] {report:?}", b.name);
        drain(&mut a).await;
        assert_eq!(
            a.state_of(&tp("state")),
            Some(PartitionState::Mirroring),
            "[{}]",
            b.name
        );
        drop(a);
        assert_eq!(
            segment_files(&dest, &tp("state")),
            segment_files(&source, &tp("state")),
            "[{}] compacted segment replaced",
            b.name
        );
    }
}

/// 15: stop, write locally, start again from the same source: only the
/// local writes are cut, nothing below the stop offset is fetched again,
/// and the mirror then follows the source byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_from_the_same_source_cuts_only_the_local_writes() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        source_with(&source, &[("orders", &[(500, 1)])]);
        ship(&b, &source, "src").await;
        let mut a = apply(&b, applier_options(&b, &dest, "src", "dst")).await;
        a.command(Command::Stop, &[], true).await;
        drop(a);
        // A drill: one local write after the stop, at the stop epoch.
        let d = LogDir::open(&dest).expect("dest");
        let mut log = d
            .open_partition(&tp("orders"), LogConfig::default())
            .expect("open");
        produce(&mut log, 1, 2, 1);
        assert_eq!(log.log_end_offset(), 501);
        log.close().expect("close");
        drop(d);
        let before = segment_files(&dest, &tp("orders"));

        let mut a = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(b.store.clone()),
        )
        .expect("applier");
        // The local writes are cut on purpose (refused without: guards.rs).
        let out = a
            .command_allowing(Command::Start, &["orders".into()], false, true)
            .await;
        assert!(out[0].error.is_none(), "[{}] {out:?}", b.name);
        let mut refetched = 0;
        for _ in 0..20 {
            let r = a.run_once().await;
            refetched += r.batches;
            if r.batches == 0 && r.transitions == 0 {
                break;
            }
        }
        assert_eq!(a.state_of(&tp("orders")), Some(PartitionState::Mirroring));
        assert_eq!(
            refetched, 0,
            "[{}] nothing below the stop is fetched again",
            b.name
        );
        assert_eq!(
            log_end(&dest, &tp("orders")),
            500,
            "[{}] only the local write is cut",
            b.name
        );
        let after = segment_files(&dest, &tp("orders"));
        assert_eq!(after.len(), before.len());
        assert_eq!(
            after[0].1[..],
            before[0].1[..after[0].1.len()],
            "[{}] the kept bytes are the ones that were there",
            b.name
        );
        // And it follows the source again.
        append_source(&source, "orders", 20, 1);
        ship(&b, &source, "src").await;
        drain(&mut a).await;
        drop(a);
        assert_eq!(
            segment_files(&dest, &tp("orders")),
            segment_files(&source, &tp("orders")),
            "[{}]",
            b.name
        );
        assert_eq!(
            lineage(&dest, &tp("orders")),
            lineage(&source, &tp("orders"))
        );
    }
}

/// Behaviour 15 at scale, measured in bytes: a stop, one local batch, and a
/// start from the same source cost the divergent tail (the local batch cut,
/// the source's new batch fetched) and the manifests, never the mirrored
/// log again. The bytes are counted on the store, as a bill would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_from_the_same_source_fetches_bytes_in_proportion_to_the_divergent_tail() {
    use bucket::counting::CountingStore;
    use std::sync::Arc;

    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        // 20,000 records in 200 batches (about 2 MB).
        let d = LogDir::open(&source).expect("source");
        let mut log = d
            .open_or_create_partition(&tp("orders"), Some(ID), LogConfig::default())
            .expect("create");
        produce(&mut log, 20_000, 1, 100);
        log.close().expect("close");
        drop(d);
        let log_bytes: u64 = segment_files(&source, &tp("orders"))
            .iter()
            .map(|(_, bytes)| bytes.len() as u64)
            .sum();
        ship(&b, &source, "src").await;

        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let mut a = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(counting.as_dyn()),
        )
        .expect("applier");
        drain(&mut a).await;
        let first_apply = counting.snapshot().get_bytes;
        assert!(
            first_apply >= log_bytes,
            "[{}] the first apply fetched the log",
            b.name
        );
        a.command(Command::Stop, &[], true).await;
        drop(a);

        // One local batch after the stop (the divergent tail), and one new
        // batch on the source.
        let d = LogDir::open(&dest).expect("dest");
        let mut log = d
            .open_partition(&tp("orders"), LogConfig::default())
            .expect("open");
        produce(&mut log, 100, 2, 100);
        log.close().expect("close");
        drop(d);
        append_source(&source, "orders", 100, 1);
        let source_end = log_end(&source, &tp("orders"));
        let tail_bytes = segment_files(&source, &tp("orders"))
            .iter()
            .map(|(_, bytes)| bytes.len() as u64)
            .sum::<u64>()
            - log_bytes;
        ship(&b, &source, "src").await;

        let before = counting.snapshot();
        let mut a = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(counting.as_dyn()),
        )
        .expect("applier");
        // The local writes are cut on purpose (refused without: guards.rs).
        let out = a
            .command_allowing(Command::Start, &["orders".into()], false, true)
            .await;
        assert!(out[0].error.is_none(), "[{}] {out:?}", b.name);
        drain(&mut a).await;
        drop(a);
        let resumed = counting.snapshot().since(&before);
        eprintln!(
            "[{}] log {log_bytes} bytes; first apply fetched {first_apply}; resume fetched {} bytes in {} GETs (source tail {tail_bytes} bytes)",
            b.name, resumed.get_bytes, resumed.get
        );
        assert_eq!(log_end(&dest, &tp("orders")), source_end, "[{}]", b.name);
        assert_eq!(
            segment_files(&dest, &tp("orders")),
            segment_files(&source, &tp("orders")),
            "[{}] byte-identical after the resume",
            b.name
        );
        assert!(
            resumed.get_bytes >= tail_bytes,
            "[{}] the source's new batch was fetched",
            b.name
        );
        // The tail plus manifests: a small fraction of the log, whatever its size.
        assert!(
            resumed.get_bytes < tail_bytes + 64 * 1024 && resumed.get_bytes * 20 < log_bytes,
            "[{}] resume fetched {} bytes for a {tail_bytes}-byte tail of a {log_bytes}-byte log",
            b.name,
            resumed.get_bytes
        );
    }
}
