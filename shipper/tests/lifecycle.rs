//! Following the source: retention, compaction, unclean truncation, a crash
//! and restart, two shippers on one source, corrupt data, deleted and
//! recreated partitions, a missing topic id, the mirror origin. Every body
//! runs on each backend.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kafkalog::{LogDir, TopicPartition};
use manifest::layout::PartitionKey;
use manifest::partition::PartitionManifest;
use shipper::clock::{Clock, ManualClock};
use shipper::{Shipper, ShipperOptions};

const HOUR: Duration = Duration::from_secs(3600);

fn shipper_with(
    o: ShipperOptions,
    store: Arc<dyn object_store::ObjectStore>,
    clock: &ManualClock,
) -> Shipper {
    Shipper::new(o, store)
        .expect("shipper")
        .with_clock(Arc::new(clock.clone()))
}

fn pk(t: &TopicPartition, n: u8) -> PartitionKey {
    PartitionKey {
        tp: t.clone(),
        topic_id: topic_id(n),
    }
}

async fn data_keys(b: &Backend, t: &TopicPartition, n: u8) -> Vec<String> {
    let ms = b.manifests();
    keys_under(
        &b.counting.inner().clone(),
        &ms.layout().data_dir(&pk(t, n)),
    )
    .await
}

async fn referenced(b: &Backend, m: &PartitionManifest) -> Vec<String> {
    let mut keys: Vec<String> = all_ranges(&b.manifests(), m)
        .await
        .into_iter()
        .map(|r| r.key)
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_ranges_and_deletes_their_objects_after_the_grace() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let t = tp("logs", 0);
        let mut log = open_log(&dir, &t, topic_id(3), 2048);
        append_n(&mut log, 30, 3, 0, 100);
        append_n(&mut log, 10, 3, 4, 100);
        let clock = ManualClock::new();
        let mut s = shipper_with(options(&root, &b, "a"), b.store(), &clock);
        assert!(s.ship_available().await.errors.is_empty());
        let ms = b.manifests();
        let v1 = latest(&ms, &t, topic_id(3)).await.expect("v1");

        // Retention deletes three segments and moves the log start inside
        // the fourth.
        let segs = log.segment_base_offsets();
        let new_start = segs[3] + 1;
        assert_eq!(
            log.raise_log_start(new_start).expect("retention"),
            segs[..3].to_vec()
        );
        let r = s.run_cycle().await;
        assert_eq!(r.committed, 1, "[{}] {r:?}", b.name);
        let v2 = latest(&ms, &t, topic_id(3)).await.expect("v2");
        assert_eq!(v2.log_start_offset, new_start);
        assert_eq!(v2.shipped_end_offset, v1.shipped_end_offset);
        let kept: Vec<_> = v1
            .ranges
            .iter()
            .filter(|r| r.last_offset >= new_start)
            .cloned()
            .collect();
        assert_eq!(
            v2.ranges, kept,
            "[{}] ranges wholly below the log start are dropped",
            b.name
        );
        let src_epochs: Vec<_> = source_epochs(&root, &t);
        assert_eq!(
            v2.lineage.entries(),
            src_epochs,
            "[{}] lineage follows the source's",
            b.name
        );
        assert_shipped_matches_source(&ms, &v2, &root, &t, v2.shipped_end_offset).await;
        // Their objects stay for the grace period (an applier may be reading
        // the previous version), then a sweep deletes them.
        assert_eq!(data_keys(&b, &t, 3).await, referenced(&b, &v1).await);
        clock.advance(HOUR / 2);
        assert_eq!(s.run_cycle().await.deleted_objects, 0);
        clock.advance(HOUR);
        let r = s.run_cycle().await;
        assert_eq!(
            r.deleted_objects as usize,
            v1.ranges.len() - v2.ranges.len(),
            "[{}] {r:?}",
            b.name
        );
        assert_eq!(data_keys(&b, &t, 3).await, referenced(&b, &v2).await);

        // Retention passes the shipped end (nothing committed in between).
        let end = log.log_end_offset();
        set_hw(&root, &[(t.clone(), end)]);
        append_n(&mut log, 20, 3, 4, 100);
        assert_eq!(s.run_cycle().await.committed, 0, "beyond the HW: nothing");
        let start = log.log_end_offset() - 4;
        log.raise_log_start(start).expect("retention");
        let leo = log.log_end_offset();
        set_hw(&root, &[(t.clone(), leo)]);
        let r = s.ship_available().await;
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let v = latest(&ms, &t, topic_id(3)).await.expect("v");
        assert_eq!((v.log_start_offset, v.shipped_end_offset), (start, leo));
        assert_shipped_matches_source(&ms, &v, &root, &t, leo).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_segment_is_shipped_again_and_replaced_in_place() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let t = tp("compacted", 0);
        let mut log = open_log(&dir, &t, topic_id(4), 2048);
        append_n(&mut log, 30, 3, 0, 100);
        let clock = ManualClock::new();
        let mut s = shipper_with(options(&root, &b, "a"), b.store(), &clock);
        assert!(s.ship_available().await.errors.is_empty());
        let ms = b.manifests();
        let v1 = latest(&ms, &t, topic_id(4)).await.expect("v1");

        // The cleaner rewrites the second segment: every other batch kept,
        // bytes unchanged.
        let seg = log.segment_base_offsets()[1];
        let kept: Vec<u8> = source_batches(&root, &t)
            .into_iter()
            .filter(|(s, _, _)| *s == seg)
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .flat_map(|(_, (_, _, b))| b)
            .collect();
        log.replace_segment(seg, &kept).expect("compact");
        let r = s.run_cycle().await;
        assert_eq!(
            (r.committed, r.reshipped_segments),
            (1, 1),
            "[{}] {r:?}",
            b.name
        );
        let v2 = latest(&ms, &t, topic_id(4)).await.expect("v2");
        assert_eq!(v2.shipped_end_offset, v1.shipped_end_offset);
        let (old, new): (Vec<_>, Vec<_>) = (
            v1.ranges
                .iter()
                .filter(|r| r.segment_base_offset == seg)
                .cloned()
                .collect(),
            v2.ranges
                .iter()
                .filter(|r| r.segment_base_offset == seg)
                .cloned()
                .collect(),
        );
        assert!(
            new.iter().all(|r| r.segment_generation == 1
                && r.completes_segment == (r == new.last().expect("one")))
        );
        let at = v1
            .ranges
            .iter()
            .position(|r| r.segment_base_offset == seg)
            .expect("pos");
        assert_eq!(v2.ranges[..at], v1.ranges[..at], "ranges before stay");
        assert_eq!(v2.ranges[at..at + new.len()], new[..], "replaced in place");
        assert_eq!(
            v2.ranges[at + new.len()..],
            v1.ranges[at + old.len()..],
            "ranges after stay"
        );
        let objects: Vec<u8> = fetch(&ms, &new)
            .await
            .into_iter()
            .flat_map(|b| b.to_vec())
            .collect();
        assert_eq!(
            objects, kept,
            "[{}] the compacted segment, byte for byte",
            b.name
        );
        assert_shipped_matches_source(&ms, &v2, &root, &t, v2.shipped_end_offset).await;
        // Noticed once: neither the next cycle nor a restarted shipper ships
        // it again.
        assert_eq!(s.run_cycle().await.committed, 0);
        let mut restarted = shipper_with(options(&root, &b, "a2"), b.store(), &clock);
        let r = restarted.ship_available().await;
        assert_eq!((r.committed, r.objects), (0, 0), "[{}] {r:?}", b.name);
        // The replaced objects are deleted after the grace period.
        clock.advance(2 * HOUR);
        let r = s.run_cycle().await;
        assert_eq!(r.deleted_objects as usize, old.len(), "[{}] {r:?}", b.name);
        assert_eq!(data_keys(&b, &t, 4).await, referenced(&b, &v2).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclean_source_truncation_cuts_the_manifest_back_and_reships() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let t = tp("orders", 0);
        let mut log = open_log(&dir, &t, topic_id(6), 1 << 20);
        let clock = ManualClock::new();
        let mut s = shipper_with(options(&root, &b, "a"), b.store(), &clock);
        append_n(&mut log, 10, 5, 0, 60);
        assert_eq!(s.run_cycle().await.committed, 1);
        append_n(&mut log, 10, 5, 0, 60);
        assert_eq!(s.run_cycle().await.committed, 1);
        let ms = b.manifests();
        let v2 = latest(&ms, &t, topic_id(6)).await.expect("v2");
        assert_eq!(
            v2.ranges
                .iter()
                .map(|r| (r.base_offset, r.last_offset))
                .collect::<Vec<_>>(),
            vec![(0, 49), (50, 99)]
        );

        // Unclean leader election: the source loses 90..99 and a new leader
        // writes at epoch 1 from 90.
        assert_eq!(log.truncate_to(90).expect("truncate"), 90);
        append_n(&mut log, 5, 5, 1, 60);
        let r = s.ship_available().await;
        assert!(r.errors.is_empty(), "[{}] {:?}", b.name, r.errors);
        assert_eq!(r.cuts, 1, "[{}] {r:?}", b.name);
        let versions = all_versions(&ms, &t, topic_id(6)).await;
        let cut = &versions[2];
        assert_eq!(
            cut.shipped_end_offset, 50,
            "[{}] cut to the start of the first range not held",
            b.name
        );
        assert_eq!(cut.ranges, v2.ranges[..1].to_vec());
        assert_eq!(
            cut.lineage
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect::<Vec<_>>(),
            vec![(0, 0)]
        );
        let last = versions.last().expect("last");
        assert_eq!(last.version, 4);
        assert_eq!(last.shipped_end_offset, 115);
        assert_eq!(
            last.lineage
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect::<Vec<_>>(),
            vec![(0, 0), (1, 90)],
            "[{}] the lineage matches the source's",
            b.name
        );
        assert_eq!(last.lineage.entries(), source_epochs(&root, &t));
        assert_shipped_matches_source(&ms, last, &root, &t, 115).await;

        // The log only shrinks (no new epoch): cut and reship too.
        assert_eq!(log.truncate_to(105).expect("truncate"), 105);
        let r = s.ship_available().await;
        assert_eq!(r.cuts, 1, "[{}] {r:?}", b.name);
        let last = latest(&ms, &t, topic_id(6)).await.expect("last");
        assert_eq!(last.shipped_end_offset, 105);
        assert_shipped_matches_source(&ms, &last, &root, &t, 105).await;
        // Every version has one writer and the numbers have no gap.
        let versions = all_versions(&ms, &t, topic_id(6)).await;
        for (i, v) in versions.iter().enumerate() {
            assert_eq!((v.version, v.writer.as_str()), (i as u64 + 1, "a"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_and_restart_loses_nothing_and_ships_nothing_twice() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let t = tp("events", 0);
        let mut log = open_log(&dir, &t, topic_id(7), 4096);
        append_n(&mut log, 20, 4, 0, 80);
        let clock = ManualClock::new();
        {
            let mut a = shipper_with(options(&root, &b, "a"), b.store(), &clock);
            assert!(a.ship_available().await.errors.is_empty());
        }
        let ms = b.manifests();
        let v1 = latest(&ms, &t, topic_id(7)).await.expect("v1");

        // A shipper uploads the new batches, then dies before its manifest
        // is written (here: the manifest write fails, then it is dropped).
        append_n(&mut log, 15, 4, 2, 80);
        let faulty = FaultyStore::new(b.store());
        faulty.arm("/manifest/");
        {
            let mut c = shipper_with(options(&root, &b, "c"), faulty.clone(), &clock);
            let r = c.run_cycle().await;
            assert_eq!(r.committed, 0);
            assert!(
                !r.errors.is_empty(),
                "[{}] the commit failed: {r:?}",
                b.name
            );
        }
        let orphans: Vec<String> = data_keys(&b, &t, 7)
            .await
            .into_iter()
            .filter(|k| !v1.ranges.iter().any(|r| &r.key == k))
            .collect();
        assert!(
            !orphans.is_empty(),
            "[{}] the crash left objects behind",
            b.name
        );
        // An upload in progress elsewhere (fresh upload id) must survive.
        let young = ms
            .layout()
            .data_key(
                &pk(&t, 7),
                1000,
                1001,
                0,
                &format!("{:011x}{:016x}", clock.now_ms() + 2 * 3_600_000, 7),
            )
            .expect("key");
        ms.put_new(&young, bytes::Bytes::from_static(b"in flight"))
            .await
            .expect("put");

        // A new shipper, later: it sweeps the orphans and ships the new
        // batches once.
        clock.advance(2 * HOUR);
        let before = b.counting.snapshot();
        let mut bship = shipper_with(options(&root, &b, "b"), b.store(), &clock);
        let r = bship.ship_available().await;
        assert!(r.errors.is_empty(), "[{}] {:?}", b.name, r.errors);
        assert_eq!(
            r.deleted_objects as usize,
            orphans.len(),
            "[{}] {r:?}",
            b.name
        );
        let v2 = latest(&ms, &t, topic_id(7)).await.expect("v2");
        assert_eq!((v2.version, v2.writer.as_str()), (2, "b"));
        assert_eq!(v2.shipped_end_offset, log.log_end_offset());
        assert_eq!(
            v2.ranges[..v1.ranges.len()],
            v1.ranges[..],
            "[{}] shipped ranges untouched",
            b.name
        );
        assert_shipped_matches_source(&ms, &v2, &root, &t, v2.shipped_end_offset).await;
        let new_bytes: u64 = v2.ranges[v1.ranges.len()..].iter().map(|r| r.bytes).sum();
        let d = b.counting.snapshot().since(&before);
        let head = ms.latest_head(None).await.expect("head").expect("head");
        assert_eq!(
            d.put_bytes,
            new_bytes
                + v2.encode().expect("encode").len() as u64
                + head.encode().expect("encode").len() as u64,
            "[{}] after the restart only the unshipped batches are uploaded",
            b.name
        );
        let mut expected = referenced(&b, &v2).await;
        expected.push(young.clone());
        expected.sort();
        assert_eq!(
            data_keys(&b, &t, 7).await,
            expected,
            "[{}] orphans gone, the young one kept",
            b.name
        );
        // No object is named twice, in any version.
        let mut seen = HashSet::new();
        for v in all_versions(&ms, &t, topic_id(7)).await {
            for r in &v.ranges {
                seen.insert((r.key.clone(), r.base_offset));
            }
        }
        let keys: HashSet<_> = seen.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys.len(), seen.len());
        assert!(orphans.iter().all(|o| !keys.contains(o)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shippers_on_one_source_never_both_publish_a_version() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let t = tp("race", 0);
        let mut log = open_log(&dir, &t, topic_id(9), 4096);
        append_n(&mut log, 5, 3, 0, 50);
        let (ca, cb) = (ManualClock::new(), ManualClock::new());
        let mut a = shipper_with(options(&root, &b, "shipper-a"), b.store(), &ca);
        let mut bb = shipper_with(options(&root, &b, "shipper-b"), b.store(), &cb);
        assert_eq!(a.ship_available().await.committed, 1);
        assert_eq!(bb.run_cycle().await.committed, 0, "b adopts a's version 1");

        append_n(&mut log, 5, 3, 0, 50);
        let (ra, rb) = tokio::join!(a.run_cycle(), bb.run_cycle());
        assert_eq!(ra.committed + rb.committed, 1, "[{}] {ra:?} {rb:?}", b.name);
        let (winner, loser, loser_clock, loser_report) = if ra.committed == 1 {
            (&mut a, &mut bb, &cb, rb)
        } else {
            (&mut bb, &mut a, &ca, ra)
        };
        let winner_id = winner.options().shipper_id.clone();
        assert_eq!(
            loser_report.fenced,
            vec![(t.clone(), winner_id.clone())],
            "[{}] the loser says who won",
            b.name
        );
        let st = &loser.partitions()[0];
        assert_eq!(st.state, "fenced");
        assert!(st.detail.as_deref().is_some_and(|d| d.contains(&winner_id)));

        // While backing off, the loser does nothing; the winner goes on.
        append_n(&mut log, 5, 3, 0, 50);
        assert_eq!(loser.run_cycle().await.committed, 0);
        assert_eq!(winner.run_cycle().await.committed, 1);
        // After the back-off the loser starts from the latest version; when
        // it ships first, the other one is the one that backs off.
        loser_clock.advance(HOUR);
        assert_eq!(loser.run_cycle().await.committed, 0, "nothing new");
        append_n(&mut log, 5, 3, 0, 50);
        assert_eq!(loser.run_cycle().await.committed, 1);
        let r = winner.run_cycle().await;
        assert_eq!((r.committed, r.fenced.len()), (0, 1), "[{}] {r:?}", b.name);

        let ms = b.manifests();
        let versions = all_versions(&ms, &t, topic_id(9)).await;
        let loser_id = loser.options().shipper_id.clone();
        let writers: Vec<(u64, &str)> = versions
            .iter()
            .map(|v| (v.version, v.writer.as_str()))
            .collect();
        assert_eq!(
            writers,
            vec![
                (1, "shipper-a"),
                (2, winner_id.as_str()),
                (3, winner_id.as_str()),
                (4, loser_id.as_str())
            ],
            "[{}] one writer per version, numbers without gaps",
            b.name
        );
        let last = versions.last().expect("last");
        assert_shipped_matches_source(&ms, last, &root, &t, log.log_end_offset()).await;
        let head = ms.latest_head(None).await.expect("head").expect("head");
        assert_eq!(head.partitions[&t.to_string()].manifest_version, 4);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_source_data_stops_that_partition_only() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let (bad, good) = (tp("bad", 0), tp("good", 0));
        let mut lb = open_log(&dir, &bad, topic_id(10), 2048);
        let mut lg = open_log(&dir, &good, topic_id(11), 2048);
        append_n(&mut lb, 10, 3, 0, 100);
        append_n(&mut lg, 10, 3, 0, 100);
        let clock = ManualClock::new();
        let mut s = shipper_with(options(&root, &b, "a"), b.store(), &clock);
        assert!(s.ship_available().await.errors.is_empty());
        append_n(&mut lb, 15, 3, 0, 100);
        append_n(&mut lg, 15, 3, 0, 100);
        // Flip a byte inside a not yet shipped batch of a rolled segment.
        let batches = source_batches(&root, &bad);
        let last_seg = batches.last().expect("batch").0;
        let ms = b.manifests();
        let end = latest(&ms, &bad, topic_id(10))
            .await
            .expect("m")
            .shipped_end_offset;
        let (seg, h, _) = batches
            .iter()
            .find(|(s, h, _)| h.base_offset >= end + 6 && *s != last_seg)
            .expect("a batch to corrupt");
        let path = root
            .join(bad.dir_name())
            .join(kafkalog::segment::file_name(*seg, ".log"));
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[h.position as usize + 70] ^= 0x40;
        std::fs::write(&path, &bytes).expect("write");

        let r = s.ship_available().await;
        let errors: Vec<_> = r.errors.iter().filter(|(p, _)| p == "bad-0").collect();
        assert!(!errors.is_empty(), "[{}] {r:?}", b.name);
        let msg = &errors[0].1;
        assert!(
            msg.contains(&path.display().to_string())
                && msg.contains(&format!("byte {}", h.position)),
            "[{}] the error names the file and position: {msg}",
            b.name
        );
        assert!(r.errors.iter().all(|(p, _)| p == "bad-0"), "{r:?}");
        let status: Vec<_> = s
            .partitions()
            .into_iter()
            .map(|p| (p.topic, p.state))
            .collect();
        assert_eq!(
            status,
            vec![("bad".to_string(), "failed"), ("good".to_string(), "ok")]
        );
        // What precedes the bad batch is shipped, nothing after it; the
        // other partition is complete.
        let mb = latest(&ms, &bad, topic_id(10)).await.expect("m");
        assert_eq!(mb.shipped_end_offset, h.base_offset);
        assert_shipped_matches_source(&ms, &mb, &root, &bad, h.base_offset).await;
        let mg = latest(&ms, &good, topic_id(11)).await.expect("m");
        assert_eq!(mg.shipped_end_offset, lg.log_end_offset());
        assert_shipped_matches_source(&ms, &mg, &root, &good, lg.log_end_offset()).await;
        // It stays stopped (and says so again) until the error back-off.
        assert_eq!(s.run_cycle().await.committed, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_recreated_and_unidentified_partitions() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().join("logs");
        let dir = LogDir::open(&root).expect("log dir");
        let (keep, gone, later) = (tp("keep", 0), tp("gone", 0), tp("later", 0));
        let mut lk = open_log(&dir, &keep, topic_id(12), 4096);
        let mut lg = open_log(&dir, &gone, topic_id(13), 4096);
        append_n(&mut lk, 3, 2, 0, 50);
        append_n(&mut lg, 3, 2, 0, 50);
        // A partition without partition.metadata is not shipped until it has one.
        let mut ll = dir
            .open_or_create_partition(&later, None, kafkalog::LogConfig::default())
            .expect("no id");
        append_n(&mut ll, 3, 2, 0, 50);
        let clock = ManualClock::new();
        let mut s = shipper_with(options(&root, &b, "a"), b.store(), &clock);
        let r = s.ship_available().await;
        assert_eq!(r.committed, 2, "[{}] {r:?}", b.name);
        let states: Vec<_> = s
            .partitions()
            .into_iter()
            .map(|p| (p.topic, p.state))
            .collect();
        assert!(
            states.contains(&("later".into(), "no_topic_id")),
            "{states:?}"
        );
        kafkalog::checkpoint::write_partition_metadata(
            &root
                .join(later.dir_name())
                .join(kafkalog::checkpoint::PARTITION_METADATA),
            &kafkalog::checkpoint::PartitionMetadata::new(topic_id(14)),
            false,
        )
        .expect("metadata");
        assert_eq!(
            s.run_cycle().await.committed,
            1,
            "shipped once its topic id is there"
        );
        let ms = b.manifests();
        assert!(latest(&ms, &later, topic_id(14)).await.is_some());

        // A partition dir gone: nothing until the grace period, then deleted.
        drop(lg);
        dir.delete_partition(&gone).expect("delete");
        assert_eq!(s.run_cycle().await.committed, 0);
        clock.advance(Duration::from_secs(120));
        assert_eq!(s.run_cycle().await.committed, 0, "within the grace period");
        clock.advance(Duration::from_secs(600));
        let r = s.run_cycle().await;
        assert_eq!(
            (r.committed, r.deleted_partitions),
            (1, 1),
            "[{}] {r:?}",
            b.name
        );
        let m = latest(&ms, &gone, topic_id(13)).await.expect("m");
        assert!(m.deleted);
        let head = ms.latest_head(None).await.expect("head").expect("head");
        assert!(head.partitions["gone-0"].deleted);
        assert_eq!(s.run_cycle().await.committed, 0, "published once");

        // A whole log dir that disappears for a while deletes nothing.
        let moved = src.path().join("moved");
        std::fs::rename(&root, &moved).expect("rename");
        for _ in 0..3 {
            clock.advance(HOUR);
            assert_eq!(s.run_cycle().await.committed, 0);
        }
        std::fs::rename(&moved, &root).expect("rename back");
        assert_eq!(s.run_cycle().await.committed, 0);
        assert!(!latest(&ms, &keep, topic_id(12)).await.expect("m").deleted);

        // The topic is recreated: a new id, a new chain; the head follows.
        let mut lg = open_log(&dir, &gone, topic_id(15), 4096);
        append_n(&mut lg, 2, 2, 0, 50);
        let r = s.run_cycle().await;
        assert_eq!(r.committed, 1, "[{}] {r:?}", b.name);
        let m = latest(&ms, &gone, topic_id(15)).await.expect("new chain");
        assert_eq!((m.version, m.deleted), (1, false));
        assert_shipped_matches_source(&ms, &m, &root, &gone, lg.log_end_offset()).await;
        assert_eq!(
            latest(&ms, &gone, topic_id(13)).await.expect("old").version,
            2,
            "the old chain is left"
        );
        let head = ms.latest_head(None).await.expect("head").expect("head");
        assert_eq!(head.partitions["gone-0"].topic_id, topic_id(15));
        assert!(!head.partitions["gone-0"].deleted);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_is_itself_a_mirror_publishes_its_origin() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let t = tp("mirrored", 0);
        let mut log = open_log(&dir, &t, topic_id(16), 4096);
        append_n(&mut log, 3, 2, 0, 50);
        let state = serde_json::to_value(manifest::state::initial().0).expect("state");
        let record = |lme: Option<i32>| -> manifest::mirror_record::MirrorRecord {
            serde_json::from_value(serde_json::json!({
                "schema": {"major": 1, "minor": 0},
                "source_cluster_id": "cluster-b",
                "topic_id": topic_id(16).to_string(),
                "state": state.clone(),
                "lme": lme,
            }))
            .expect("record")
        };
        let pdir = root.join(t.dir_name());
        partdir::record::write(&record(None), &pdir).expect("write");
        let clock = ManualClock::new();
        let mut s = shipper_with(options(&root, &b, "a"), b.store(), &clock);
        assert_eq!(s.ship_available().await.committed, 1);
        let ms = b.manifests();
        let m = latest(&ms, &t, topic_id(16)).await.expect("m");
        assert_eq!(m.mirror_origin, Some(record(None).origin()));
        assert_eq!(
            s.run_cycle().await.committed,
            0,
            "unchanged: no new version"
        );
        partdir::record::write(&record(Some(4)), &pdir).expect("write");
        assert_eq!(
            s.run_cycle().await.committed,
            1,
            "[{}] a changed origin is published",
            b.name
        );
        let m = latest(&ms, &t, topic_id(16)).await.expect("m");
        assert_eq!(m.mirror_origin.as_ref().and_then(|o| o.lme), Some(4));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_was_lost_is_adopted_not_fenced() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let t = tp("lost", 0);
        let mut log = open_log(&dir, &t, topic_id(17), 4096);
        append_n(&mut log, 5, 3, 0, 50);
        let clock = ManualClock::new();
        let faulty = FaultyStore::new(b.store());
        let mut s = shipper_with(options(&root, &b, "a"), faulty.clone(), &clock);
        assert_eq!(s.ship_available().await.committed, 1);
        // Version 2 is written but the shipper hears a failure.
        append_n(&mut log, 5, 3, 0, 50);
        faulty.lose_answers("/manifest/");
        let r = s.run_cycle().await;
        assert_eq!(r.committed, 0);
        assert_eq!(r.errors.len(), 1, "{r:?}");
        faulty.disarm();
        // Nothing new: it tries version 2 again, finds its own, adopts it,
        // and the change feed names it (or appliers would never see it).
        let r = s.ship_available().await;
        assert!(r.fenced.is_empty(), "[{}] {r:?}", b.name);
        let ms = b.manifests();
        let head = ms.latest_head(None).await.expect("head").expect("head");
        assert_eq!(
            head.partitions["lost-0"].manifest_version, 2,
            "[{}] {head:?}",
            b.name
        );
        assert_eq!(head.partitions["lost-0"].shipped_end_offset, 30);
        // Then it goes on from it.
        append_n(&mut log, 5, 3, 0, 50);
        let r = s.ship_available().await;
        assert!(
            r.fenced.is_empty(),
            "[{}] not fenced by itself: {r:?}",
            b.name
        );
        assert_eq!(s.partitions()[0].state, "ok");
        let versions = all_versions(&ms, &t, topic_id(17)).await;
        assert_eq!(versions.len(), 3, "[{}] v1, the lost v2, then v3", b.name);
        assert!(versions.iter().all(|v| v.writer == "a"));
        let last = versions.last().expect("last");
        assert_eq!(last.shipped_end_offset, log.log_end_offset());
        assert_shipped_matches_source(&ms, last, &root, &t, log.log_end_offset()).await;
        // The attempt that lost to itself left objects: swept after the grace.
        clock.advance(2 * HOUR);
        s.sweep_now().await;
        assert_eq!(data_keys(&b, &t, 17).await, referenced(&b, last).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preallocated_active_segment_ends_at_its_last_batch() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let t = tp("prealloc", 0);
        {
            let dir = LogDir::open(&root).expect("log dir");
            let mut log = open_log(&dir, &t, topic_id(18), 1 << 20);
            append_n(&mut log, 6, 3, 0, 50);
            log.close().expect("close");
        }
        let seg = root
            .join(t.dir_name())
            .join(kafkalog::segment::file_name(0, ".log"));
        let mut bytes = std::fs::read(&seg).expect("read");
        bytes.extend(std::iter::repeat_n(0u8, 64 * 1024));
        std::fs::write(&seg, &bytes).expect("write");
        let clock = ManualClock::new();
        let mut s = shipper_with(options(&root, &b, "a"), b.store(), &clock);
        let r = s.ship_available().await;
        assert!(r.errors.is_empty(), "[{}] {:?}", b.name, r.errors);
        let m = latest(&b.manifests(), &t, topic_id(18)).await.expect("m");
        assert_eq!(m.shipped_end_offset, 18);
        assert_eq!(
            s.run_cycle().await.errors,
            vec![],
            "still fine on the next look"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_pages_through_sweeps_cuts_and_retention() {
    // 600 one-batch ranges: the oldest 256 are sealed into a page. (Not run
    // on S3: 600 uploads per step would dominate the suite's time.)
    for b in backends().into_iter().filter(|b| b.name != "s3") {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let t = tp("paged", 0);
        let mut log = open_log(&dir, &t, topic_id(19), 64 * 1024);
        append_n(&mut log, 600, 1, 0, 40);
        let clock = ManualClock::new();
        let mut o = options(&root, &b, "a");
        o.max_object_size = 1;
        let mut s = shipper_with(o, b.store(), &clock);
        assert!(s.ship_available().await.errors.is_empty());
        let ms = b.manifests();
        let v1 = latest(&ms, &t, topic_id(19)).await.expect("v1");
        assert_eq!((v1.pages.len(), v1.ranges.len()), (1, 344), "[{}]", b.name);
        assert_shipped_matches_source(&ms, &v1, &root, &t, 600).await;
        // Objects named only by the page are kept by sweeps.
        clock.advance(2 * HOUR);
        assert_eq!(s.sweep_now().await, 0);
        assert_eq!(data_keys(&b, &t, 19).await, referenced(&b, &v1).await);

        // A truncation inside the page: its kept ranges move inline; the
        // re-shipped ranges seal a page over the same offsets under a new
        // name (pages are create-only: a fresh upload id per write).
        log.truncate_to(100).expect("truncate");
        append_n(&mut log, 500, 1, 1, 40);
        let r = s.ship_available().await;
        assert!(r.errors.is_empty(), "[{}] {:?}", b.name, r.errors);
        assert_eq!(r.cuts, 1);
        let versions = all_versions(&ms, &t, topic_id(19)).await;
        let cut = &versions[1];
        assert_eq!(
            (cut.shipped_end_offset, cut.pages.len(), cut.ranges.len()),
            (100, 0, 100)
        );
        let last = versions.last().expect("last");
        assert_eq!(last.shipped_end_offset, 600);
        let span = |m: &PartitionManifest| {
            m.pages
                .first()
                .map(|p| (p.first_offset, p.last_offset, p.key.clone()))
        };
        let (old, new) = (span(&v1).expect("v1 page"), span(last).expect("new page"));
        assert_eq!(
            (old.0, old.1),
            (new.0, new.1),
            "the same offsets are sealed"
        );
        assert_ne!(
            old.2, new.2,
            "under a new key: the old page is never replaced"
        );
        assert_eq!(last.lineage.entries(), source_epochs(&root, &t));
        assert_shipped_matches_source(&ms, last, &root, &t, 600).await;
        clock.advance(2 * HOUR);
        s.sweep_now().await;
        assert_eq!(data_keys(&b, &t, 19).await, referenced(&b, last).await);

        // Retention past the page: dropped, and its objects deleted.
        log.raise_log_start(300).expect("retention");
        assert_eq!(s.run_cycle().await.committed, 1);
        let v = latest(&ms, &t, topic_id(19)).await.expect("v");
        assert!(
            v.pages.is_empty() && v.log_start_offset == 300,
            "[{}] {:?}",
            b.name,
            v.pages
        );
        clock.advance(2 * HOUR);
        s.sweep_now().await;
        assert_eq!(data_keys(&b, &t, 19).await, referenced(&b, &v).await);
        let pages = keys_under(
            &b.counting.inner().clone(),
            &ms.layout().pages_dir(&pk(&t, 19)),
        )
        .await;
        assert!(pages.is_empty(), "{pages:?}");
    }
}

/// Opens two partitions, one holding a single small batch (one PUT) and
/// one holding about 60 KiB (objects of up to 32 KiB in 8 KiB parts off
/// S3: multipart uploads).
fn small_and_large(dir: &LogDir) -> Vec<(TopicPartition, u8, kafkalog::PartitionLog)> {
    let (small, large) = (tp("exists", 0), tp("exists", 1));
    let mut ls = open_log(dir, &small, topic_id(30), 1 << 20);
    let mut ll = open_log(dir, &large, topic_id(30), 1 << 20);
    append_n(&mut ls, 1, 3, 0, 100);
    append_n(&mut ll, 20, 3, 0, 1000);
    vec![(small, 30, ls), (large, 30, ll)]
}

/// The value on the first line of the rendered metrics that starts with
/// `prefix`.
fn metric(text: &str, prefix: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_upload_answered_already_exists_by_its_own_retry_counts_as_uploaded() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let logs = small_and_large(&dir);
        let clock = ManualClock::new();
        let faulty = FaultyStore::new(b.store());
        let metrics = Arc::new(shipper::Metrics::new(Some(b.counting.clone())));
        let mut s = shipper_with(options(&root, &b, "a"), faulty.clone(), &clock)
            .with_metrics(Arc::clone(&metrics));
        // Every data write lands and is answered "already exists".
        faulty.answer_already_exists("/data/", Tamper::Nothing);
        let before = b.counting.snapshot();
        let r = s.run_cycle().await;
        let requests = b.counting.snapshot().since(&before);
        assert!(r.errors.is_empty(), "[{}] {r:?}", b.name);
        assert_eq!(r.committed, 2, "[{}] {r:?}", b.name);
        assert!(r.objects >= 3, "[{}] {r:?}", b.name);
        // Each object was read back once: a HEAD and a GET, counted.
        assert_eq!(requests.head, r.objects, "[{}] {requests:?}", b.name);
        assert!(requests.get >= r.objects, "[{}] {requests:?}", b.name);
        let text = metrics.render();
        assert!(
            metric(
                &text,
                "segmirror_shipper_object_store_requests_total{kind=\"head\"}"
            )
            .is_some_and(|n| n >= r.objects),
            "[{}] {text}",
            b.name
        );
        // Nothing is uploaded again and nothing is left over.
        faulty.disarm();
        let r2 = s.ship_available().await;
        assert!(
            r2.errors.is_empty() && r2.objects == 0,
            "[{}] {r2:?}",
            b.name
        );
        let ms = b.manifests();
        for (t, n, log) in &logs {
            let m = latest(&ms, t, topic_id(*n)).await.expect("manifest");
            assert_eq!(m.shipped_end_offset, log.log_end_offset());
            assert_shipped_matches_source(&ms, &m, &root, t, log.log_end_offset()).await;
            assert_eq!(data_keys(&b, t, *n).await, referenced(&b, &m).await);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_key_found_holding_another_object_is_an_error_naming_it() {
    for tamper in [Tamper::SameSize, Tamper::Longer] {
        for b in backends() {
            let src = tempfile::tempdir().expect("tempdir");
            let root = src.path().to_path_buf();
            let dir = LogDir::open(&root).expect("log dir");
            let logs = small_and_large(&dir);
            let clock = ManualClock::new();
            let faulty = FaultyStore::new(b.store());
            let mut s = shipper_with(options(&root, &b, "a"), faulty.clone(), &clock);
            faulty.answer_already_exists("/data/", tamper);
            let r = s.run_cycle().await;
            let what = format!("[{} {tamper:?}] {r:?}", b.name);
            assert_eq!(r.objects, 0, "{what}");
            assert_eq!(r.errors.len(), 2, "{what}");
            let mut named_keys = Vec::new();
            for (t, n, _) in &logs {
                let msg = &r
                    .errors
                    .iter()
                    .find(|(p, _)| *p == t.to_string())
                    .expect("an error per partition")
                    .1;
                assert!(
                    msg.contains("already exists and is not the object uploaded there"),
                    "{what}"
                );
                // The error names the key, and the object there is left alone.
                let keys = data_keys(&b, t, *n).await;
                let named: Vec<_> = keys.iter().filter(|k| msg.contains(k.as_str())).collect();
                assert_eq!(named.len(), 1, "{what}: {keys:?}");
                named_keys.push(named[0].clone());
            }
            assert!(s.partitions().iter().all(|p| p.state == "failed"), "{what}");
            // After the error back-off the ranges go again, under new keys.
            faulty.disarm();
            clock.advance(Duration::from_secs(6 * 60));
            let r = s.ship_available().await;
            assert!(
                r.errors.is_empty() && r.committed == 2,
                "[{}] {r:?}",
                b.name
            );
            let ms = b.manifests();
            for (t, n, log) in &logs {
                let m = latest(&ms, t, topic_id(*n)).await.expect("manifest");
                assert_shipped_matches_source(&ms, &m, &root, t, log.log_end_offset()).await;
                let keys = data_keys(&b, t, *n).await;
                let live = referenced(&b, &m).await;
                assert!(live.iter().all(|k| keys.contains(k)), "{keys:?}");
                // The object found there is still there, unreferenced (the
                // sweep deletes it after the grace).
                let named = named_keys.iter().find(|k| keys.contains(k));
                assert!(
                    named.is_some_and(|k| !live.contains(k)),
                    "[{}] {named_keys:?} {keys:?} {live:?}",
                    b.name
                );
            }
        }
    }
}
