//! Shipping: a real broker's log dir (kafka-python fixture) and one written
//! by kafkalog are shipped exactly up to the high watermark, byte for byte,
//! with the source's lineage; request counts per shipped MiB and per idle
//! cycle; nothing is uploaded twice. Every body runs on each backend.

mod common;

use common::*;
use kafkalog::{LogDir, TopicId};
use segmirror_testkit::kafka_python::generate_kafka_logdir;
use shipper::Shipper;

fn shipper(o: shipper::ShipperOptions, b: &Backend) -> Shipper {
    Shipper::new(o, b.store()).expect("shipper")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ships_a_kafka_broker_log_dir_exactly_up_to_the_hw() {
    let src = tempfile::tempdir().expect("tempdir");
    let root = src.path().join("logs");
    let Some(expected) = generate_kafka_logdir(&root) else {
        return;
    };
    for b in backends() {
        let mut s = shipper(options(&root, &b, "shipper-a"), &b);
        let r = s.ship_available().await;
        assert!(r.errors.is_empty(), "[{}] {:?}", b.name, r.errors);
        assert_eq!(r.committed, 4, "[{}] one version per partition", b.name);
        assert_eq!(r.heads, 1, "[{}] one head for the cycle", b.name);
        let ms = b.manifests();
        let head = ms.latest_head(None).await.expect("head").expect("a head");
        for p in expected["partitions"].as_array().expect("partitions") {
            let t = tp(
                p["topic"].as_str().expect("topic"),
                p["partition"].as_i64().expect("partition") as i32,
            );
            let id: TopicId = p["topic_id"]
                .as_str()
                .expect("id")
                .parse()
                .expect("topic id");
            let hw = p["high_watermark"].as_i64().expect("hw");
            let m = latest(&ms, &t, id).await.expect("a manifest");
            let want_end = p["batches"]
                .as_array()
                .expect("batches")
                .iter()
                .map(|x| x["last_offset"].as_i64().expect("last") + 1)
                .filter(|&next| next <= hw)
                .max()
                .expect("a committed batch");
            assert_eq!(
                m.shipped_end_offset, want_end,
                "[{}] {t}: shipped exactly up to the HW",
                b.name
            );
            assert_eq!(m.source_high_watermark, hw, "[{}] {t}", b.name);
            assert_eq!(
                m.log_start_offset,
                p["log_start_offset"].as_i64().expect("ls"),
                "[{}] {t}",
                b.name
            );
            assert_eq!((m.version, m.writer.as_str()), (1, "shipper-a"));
            let lineage: Vec<(i32, i64)> = p["leader_epochs"]
                .as_array()
                .expect("epochs")
                .iter()
                .map(|e| {
                    (
                        e["epoch"].as_i64().expect("e") as i32,
                        e["start_offset"].as_i64().expect("s"),
                    )
                })
                .filter(|(_, s)| *s < m.shipped_end_offset)
                .collect();
            let got: Vec<(i32, i64)> = m
                .lineage
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect();
            assert_eq!(got, lineage, "[{}] {t}: lineage matches the source", b.name);
            assert_shipped_matches_source_strict(&ms, &m, &root, &t, hw).await;
            let entry = &head.partitions[&t.to_string()];
            assert_eq!(
                (entry.manifest_version, entry.shipped_end_offset),
                (1, want_end)
            );
        }
        // orders-0's uncommitted tail (HW 102, LEO 105) is not shipped.
        let orders0 = latest(&ms, &tp("orders", 0), head.partitions["orders-0"].topic_id)
            .await
            .expect("orders-0");
        assert_eq!(orders0.shipped_end_offset, 102);
        // An idle cycle makes no request at all.
        let before = b.counting.snapshot();
        let r = s.run_cycle().await;
        assert!(!r.did_something(), "[{}] {r:?}", b.name);
        assert_eq!(
            b.counting.snapshot().since(&before).total(),
            0,
            "[{}] idle cycle",
            b.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ships_a_kafkalog_dir_and_never_uploads_a_byte_twice() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        let dir = LogDir::open(&root).expect("log dir");
        let parts = [tp("orders", 0), tp("orders", 1), tp("payments", 0)];
        let mut logs: Vec<_> = parts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                open_log(
                    &dir,
                    t,
                    topic_id(t.topic.len() as u8),
                    4096 + 1024 * i as u64,
                )
            })
            .collect();
        for (i, log) in logs.iter_mut().enumerate() {
            append_n(log, 10, 3, 0, 120);
            append_n(log, 10 + i, 2, 2, 200);
            append_n(log, 8, 4, 5, 90);
        }
        // orders-0's HW inside a batch, orders-1's at the log end, payments
        // without an entry (nothing committed yet).
        let leo0 = logs[0].log_end_offset();
        set_hw(
            &root,
            &[
                (parts[0].clone(), leo0 - 6),
                (parts[1].clone(), logs[1].log_end_offset()),
            ],
        );
        let mut o = options(&root, &b, "a");
        if b.name != "s3" {
            o.part_size = 2048;
        }
        let mut s = shipper(o, &b);
        let first = b.counting.snapshot();
        let r = s.ship_available().await;
        assert!(r.errors.is_empty(), "[{}] {:?}", b.name, r.errors);
        let d = b.counting.snapshot().since(&first);
        if b.name != "s3" {
            assert!(
                d.multipart_part > d.multipart_create && d.multipart_create > 0,
                "[{}] objects above the part size go multipart: {d:?}",
                b.name
            );
        }
        let ms = b.manifests();
        for (i, t) in parts.iter().enumerate() {
            let id = topic_id(t.topic.len() as u8);
            let m = latest(&ms, t, id).await.expect("manifest");
            let hw = match i {
                0 => leo0 - 6,
                1 => logs[1].log_end_offset(),
                _ => 0,
            };
            assert!(
                m.ranges.iter().all(|r| r.last_offset < hw),
                "[{}] {t}",
                b.name
            );
            assert_eq!(m.source_high_watermark, hw);
            assert_shipped_matches_source(&ms, &m, &root, t, hw).await;
            let src_epochs: Vec<_> = source_epochs(&root, t)
                .into_iter()
                .filter(|e| e.start_offset < m.shipped_end_offset)
                .collect();
            assert_eq!(m.lineage.entries(), src_epochs, "[{}] {t}: lineage", b.name);
            if hw > 0 {
                assert!(
                    m.ranges.len() > 2,
                    "[{}] {t}: rolled segments are separate ranges",
                    b.name
                );
            }
        }
        assert_eq!(
            latest(&ms, &parts[0], topic_id(6))
                .await
                .expect("m")
                .shipped_end_offset,
            leo0 - 8
        );
        assert_eq!(
            latest(&ms, &parts[2], topic_id(8))
                .await
                .expect("m")
                .shipped_end_offset,
            0
        );

        // The tail moves on: only the new bytes are uploaded.
        let before_v: Vec<_> = {
            let mut v = Vec::new();
            for t in &parts {
                v.push(
                    latest(&ms, t, topic_id(t.topic.len() as u8))
                        .await
                        .expect("m"),
                );
            }
            v
        };
        for log in &mut logs {
            append_n(log, 6, 3, 7, 150);
        }
        let leos: Vec<i64> = logs.iter().map(|l| l.log_end_offset()).collect();
        set_hw(
            &root,
            &parts
                .iter()
                .cloned()
                .zip(leos.iter().copied())
                .collect::<Vec<_>>(),
        );
        let counts = b.counting.snapshot();
        let r = s.run_cycle().await;
        assert!(r.errors.is_empty(), "[{}] {:?}", b.name, r.errors);
        assert_eq!((r.committed, r.heads), (3, 1));
        let delta = b.counting.snapshot().since(&counts);
        let mut new_data = 0u64;
        let mut manifest_bytes = 0u64;
        let mut keys = std::collections::HashSet::new();
        for (i, t) in parts.iter().enumerate() {
            let id = topic_id(t.topic.len() as u8);
            let m = latest(&ms, t, id).await.expect("m");
            assert_eq!(m.version, before_v[i].version + 1);
            assert_eq!(m.shipped_end_offset, leos[i]);
            assert_shipped_matches_source(&ms, &m, &root, t, leos[i]).await;
            let new: u64 = m.ranges[before_v[i].ranges.len()..]
                .iter()
                .map(|r| r.bytes)
                .sum();
            let source_new: u64 = source_batches(&root, t)
                .iter()
                .filter(|(_, h, _)| h.base_offset >= before_v[i].shipped_end_offset)
                .map(|(_, h, _)| h.size() as u64)
                .sum();
            assert_eq!(
                new, source_new,
                "[{}] {t}: the new ranges are exactly the new bytes",
                b.name
            );
            assert_eq!(
                m.ranges[..before_v[i].ranges.len()],
                before_v[i].ranges[..],
                "[{}] {t}: shipped ranges untouched",
                b.name
            );
            new_data += new;
            manifest_bytes += m.encode().expect("encode").len() as u64;
            for v in all_versions(&ms, t, id).await {
                for r in &v.ranges {
                    keys.insert(r.key.clone());
                }
            }
        }
        let head = ms.latest_head(None).await.expect("head").expect("head");
        let head_bytes = head.encode().expect("encode").len() as u64;
        assert_eq!(
            delta.put_bytes,
            new_data + manifest_bytes + head_bytes,
            "[{}] bytes uploaded = new batches + manifests + head: nothing twice",
            b.name
        );
        let data_keys: usize = {
            let mut n = 0;
            for t in &parts {
                let pk = manifest::layout::PartitionKey {
                    tp: t.clone(),
                    topic_id: topic_id(t.topic.len() as u8),
                };
                n += keys_under(&b.counting.inner().clone(), &ms.layout().data_dir(&pk))
                    .await
                    .len();
            }
            n
        };
        assert_eq!(
            data_keys,
            keys.len(),
            "[{}] every object is named by a manifest, once",
            b.name
        );
        for log in logs {
            log.close().expect("close");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_budget_per_shipped_mib_and_zero_per_idle_cycle() {
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        for p in 1..100 {
            raw_partition(&root, &tp("busy", p), topic_id(1), 2);
        }
        let dir = LogDir::open(&root).expect("log dir");
        let mut busy = open_log(&dir, &tp("busy", 0), topic_id(1), 256 * 1024);
        append(&mut busy, 2, 0, 50);
        let mut o = options(&root, &b, "a");
        o.max_object_size = 1 << 20;
        if b.name != "s3" {
            o.part_size = 1 << 20;
        }
        let mut s = shipper(o.clone(), &b);
        let r = s.ship_available().await;
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.committed, 100);
        assert_eq!(r.heads, 1, "one head for 100 partitions");
        // The start-up sweep (16 partitions a cycle, a GET and two LISTs
        // each) spreads over the cycles: 100 partitions are swept within
        // 7 cycles, then nothing is due.
        let before = b.counting.snapshot();
        for _ in 0..7 {
            s.run_cycle().await;
        }
        let sweeps = b.counting.snapshot().since(&before);
        assert!(
            sweeps.get <= 100 && sweeps.list == 2 * sweeps.get && sweeps.put == 0,
            "[{}] the rest of the start-up sweep: {sweeps:?}",
            b.name
        );
        // Idle: not one request, whatever the number of partitions.
        let before = b.counting.snapshot();
        for _ in 0..5 {
            s.run_cycle().await;
        }
        let idle = b.counting.snapshot().since(&before);
        assert_eq!(
            idle.total(),
            0,
            "[{}] 5 idle cycles of 100 partitions: {idle:?}",
            b.name
        );

        // 4 MiB into one partition (16 segments of 256 KiB).
        let before_bytes: u64 = source_batches(&root, &tp("busy", 0))
            .iter()
            .map(|(_, h, _)| h.size() as u64)
            .sum();
        append_n(&mut busy, 256, 1, 0, 16 * 1024 - 100);
        let shipped: u64 = source_batches(&root, &tp("busy", 0))
            .iter()
            .map(|(_, h, _)| h.size() as u64)
            .sum::<u64>()
            - before_bytes;
        let segments = kafkalog::reader::PartitionReader::open(&root, &tp("busy", 0))
            .expect("reader")
            .segments()
            .expect("segments")
            .len() as u64;
        let before = b.counting.snapshot();
        let r = s.run_cycle().await;
        let d = b.counting.snapshot().since(&before);
        assert_eq!(r.bytes, shipped);
        let mib = shipped as f64 / (1 << 20) as f64;
        let part = o.part_size as u64;
        let ms = b.manifests();
        let m = latest(&ms, &tp("busy", 0), topic_id(1)).await.expect("m");
        let new: Vec<_> = m.ranges.iter().skip(1).collect();
        assert_eq!(new.len() as u64, r.objects);
        let multipart: Vec<_> = new.iter().filter(|r| r.bytes > part).collect();
        let single = new.len() - multipart.len();
        let parts: u64 = multipart.iter().map(|r| r.bytes.div_ceil(part)).sum();
        eprintln!(
            "[{}] {mib:.2} MiB in {} objects over {segments} segments: {d:?} ({:.1} requests/MiB, {:.2} objects/MiB)",
            b.name,
            r.objects,
            d.total() as f64 / mib,
            r.objects as f64 / mib
        );
        // Objects: one per segment touched, split at the largest object size.
        assert!(
            r.objects <= segments + shipped.div_ceil(o.max_object_size),
            "{r:?}"
        );
        // Writes: the objects (one PUT, or create + parts + complete), one
        // manifest and one head. Reads: the head's probe (404) and the
        // newest head (to merge into). No list, no delete.
        assert_eq!(d.put, single as u64 + 2, "[{}] {d:?}", b.name);
        assert_eq!(d.multipart_create, multipart.len() as u64);
        assert_eq!(d.multipart_complete, multipart.len() as u64);
        assert_eq!(d.multipart_part, parts);
        assert_eq!(
            (d.get, d.head, d.list, d.delete, d.multipart_abort),
            (2, 0, 0, 0, 0),
            "[{}] {d:?}",
            b.name
        );
        // Manifest writes per shipped MiB: one version per cycle.
        assert_eq!(r.committed, 1);
        busy.close().expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_selected_by_include_and_exclude_patterns_and_found_while_running() {
    let include = regex::Regex::new("^(?:.*orders|payments)$").expect("regex");
    let exclude = regex::Regex::new("^(?:tmp-.*)$").expect("regex");
    for b in backends() {
        let src = tempfile::tempdir().expect("tempdir");
        let root = src.path().to_path_buf();
        raw_partition(&root, &tp("orders", 0), topic_id(1), 2);
        raw_partition(&root, &tp("tmp-orders", 0), topic_id(2), 2);
        raw_partition(&root, &tp("audit", 0), topic_id(3), 2);
        let mut o = options(&root, &b, "a");
        o.topics = Some(include.clone());
        o.exclude = Some(exclude.clone());
        let mut s = shipper(o, &b);
        assert_eq!(s.ship_available().await.committed, 1);
        // A new partition of a selected topic appears while running.
        raw_partition(&root, &tp("payments", 3), topic_id(4), 2);
        assert_eq!(s.run_cycle().await.committed, 1);
        let shipped: Vec<String> = s
            .partitions()
            .into_iter()
            .map(|p| format!("{}-{}", p.topic, p.partition))
            .collect();
        assert_eq!(shipped, vec!["orders-0", "payments-3"], "[{}]", b.name);
    }
}
