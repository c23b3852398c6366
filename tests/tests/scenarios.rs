//! End-to-end scenarios, each run on every backend (`memory://`, `file://`,
//! and S3 when configured): the real shipper ships a source log dir, the
//! real applier applies it, and the logs are compared byte for byte.

use applier::Applier;
use kafkalog::compare::{Comparison, compare_partition};
use kafkalog::{LogConfig, LogDir, TopicPartition};
use manifest::state::{Command, PartitionState};
use segmirror_e2e::*;

fn tp(t: &str, p: i32) -> TopicPartition {
    TopicPartition::new(t, p).expect("tp")
}

fn assert_mirrors(
    source: &std::path::Path,
    dest: &std::path::Path,
    partitions: &[TopicPartition],
    backend: &str,
) {
    for p in partitions {
        match compare_partition(source, dest, p).expect("compare") {
            Comparison::Identical | Comparison::IdenticalUpTo { .. } => {}
            Comparison::Different(d) => panic!("[{backend}] {p}: {d}"),
        }
    }
}

/// A real-looking Kafka broker log dir written by kafka-python (every codec,
/// transactions and markers, several epochs, rolled segments, a log start
/// inside a batch, retention, compaction gaps, an HW below the LEO) is
/// shipped exactly up to the HW and applied byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_broker_dir_is_mirrored_up_to_the_high_watermark() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        let Some(expected) = generate_kafka_logdir(&source) else {
            return;
        };
        let report = ship(&b, &source, "kp-cluster").await;
        assert!(report.committed >= 4, "[{}] {report:?}", b.name);
        let a = apply(&b, applier_options(&b, &dest, "kp-cluster", "dr-cluster")).await;
        let mut partitions = Vec::new();
        for p in expected["partitions"].as_array().expect("partitions") {
            let t = tp(
                p["topic"].as_str().expect("topic"),
                p["partition"].as_i64().expect("p") as i32,
            );
            assert_eq!(
                a.state_of(&t),
                Some(PartitionState::Mirroring),
                "[{}] {t}: {:?}",
                b.name,
                applier::status::collect(&dest)
                    .expect("status")
                    .into_iter()
                    .find(|r| r.topic == t.topic && r.partition == t.partition)
            );
            let hw = p["high_watermark"].as_i64().expect("hw");
            // Complete batches below the HW only.
            let shipped_end = p["batches"]
                .as_array()
                .expect("batches")
                .iter()
                .map(|x| x["last_offset"].as_i64().expect("last") + 1)
                .filter(|&end| end <= hw)
                .max()
                .unwrap_or(0);
            assert_eq!(
                log_end(&dest, &t),
                shipped_end,
                "[{}] {t}: applied up to the HW {hw}",
                b.name
            );
            let want: Vec<(i32, i64)> = p["leader_epochs"]
                .as_array()
                .expect("epochs")
                .iter()
                .map(|e| {
                    (
                        e["epoch"].as_i64().expect("e") as i32,
                        e["start_offset"].as_i64().expect("s"),
                    )
                })
                .filter(|&(_, s)| s < shipped_end)
                .collect();
            assert_eq!(lineage(&dest, &t), want, "[{}] {t}: lineage", b.name);
            partitions.push(t);
        }
        drop(a);
        assert_mirrors(&source, &dest, &partitions, b.name);
        let rows = applier::status::collect(&dest).expect("status");
        assert!(
            rows.iter()
                .all(|r| r.lag_offsets == Some(0) && r.state == "MIRRORING"),
            "[{}] {rows:?}",
            b.name
        );
    }
}

/// A log written with kafkalog: several topics and partitions, rolled
/// segments, epoch changes; the tail keeps moving; what was shipped is never
/// uploaded again; the mirror stays byte-identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_source_stays_byte_identical_and_no_byte_is_shipped_twice() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
        let parts = [tp("orders", 0), tp("orders", 1), tp("events", 0)];
        let cfg = LogConfig {
            segment_bytes: 16 * 1024,
            ..LogConfig::default()
        };
        let write = |n: usize, epoch: i32| {
            let d = LogDir::open(&source).expect("source");
            for p in &parts {
                let id = kafkalog::TopicId::from_bytes([7; 16]);
                let mut log = d
                    .open_or_create_partition(p, Some(id), cfg.clone())
                    .expect("create");
                produce(&mut log, n, epoch, 25);
                log.close().expect("close");
            }
        };
        write(300, 0);
        let first = ship(&b, &source, "src").await;
        let mut a = apply(&b, applier_options(&b, &dest, "src", "dst")).await;
        assert_mirrors(&source, &dest, &parts, b.name);
        write(200, 3);
        let second = ship(&b, &source, "src").await;
        drain(&mut a).await;
        drop(a);
        let source_bytes: u64 = parts
            .iter()
            .map(|p| {
                segment_files(&source, p)
                    .iter()
                    .map(|(_, b)| b.len() as u64)
                    .sum::<u64>()
            })
            .sum();
        assert_eq!(
            first.bytes + second.bytes,
            source_bytes,
            "[{}] every source byte shipped exactly once",
            b.name
        );
        for p in &parts {
            assert_eq!(
                segment_files(&dest, p),
                segment_files(&source, p),
                "[{}] {p}: byte-identical segment files",
                b.name
            );
            assert_eq!(
                lineage(&dest, p),
                vec![(0, 0), (3, 300)],
                "[{}] {p}",
                b.name
            );
        }
    }
}

/// Failover and failback through both services on both sides: A ships, B
/// mirrors, B fails over and writes, A (which kept writing at a newer
/// epoch) fails back from B's shipped log and ends byte-identical to B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_then_failback_through_the_bucket() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
        let t = tp("payments", 0);
        let id = kafkalog::TopicId::from_bytes([9; 16]);
        {
            let d = LogDir::open(&a_dir).expect("a");
            let mut log = d
                .open_or_create_partition(&t, Some(id), LogConfig::default())
                .expect("create");
            produce(&mut log, 40, 3, 10);
            produce(&mut log, 60, 5, 10);
        }
        ship(&b, &a_dir, "cluster-a").await;
        let mut mirror_b = apply(&b, applier_options(&b, &b_dir, "cluster-a", "cluster-b")).await;
        assert_eq!(log_end(&b_dir, &t), 100);
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
        {
            let d = LogDir::open(&a_dir).expect("a");
            let mut log = d.open_partition(&t, LogConfig::default()).expect("open");
            produce(&mut log, 30, 7, 10);
        }
        // B is now a primary: its shipper publishes its log and its mirror
        // origin (mirror of A, STOPPED, LME 5).
        ship(&b, &b_dir, "cluster-b").await;
        let mut opts = applier_options(&b, &a_dir, "cluster-b", "cluster-a");
        opts.topics = None;
        let mut mirror_a = Applier::open(opts, Some(b.store.clone())).expect("a");
        // A's 30 records written at epoch 7 after the split are cut on
        // purpose (refused without: applier/tests/guards.rs).
        let out = mirror_a
            .command_allowing(Command::Start, &["payments".into()], false, true)
            .await;
        assert_eq!(
            out[0].state.as_deref(),
            Some("PREPARING"),
            "[{}] {out:?}",
            b.name
        );
        drain(&mut mirror_a).await;
        assert_eq!(
            mirror_a.state_of(&t),
            Some(PartitionState::Mirroring),
            "[{}]",
            b.name
        );
        drop(mirror_a);
        assert_eq!(
            lineage(&a_dir, &t),
            vec![(3, 0), (5, 40), (6, 100)],
            "[{}]",
            b.name
        );
        assert_eq!(
            segment_files(&a_dir, &t),
            segment_files(&b_dir, &t),
            "[{}] A equals B after failback",
            b.name
        );
    }
}
