//! Group offsets from a source `__consumer_offsets` written by an
//! independent writer (kafka-python's record-batch builder,
//! `tests/fixtures/gen_consumer_offsets.py`: several groups, key v0 and v1,
//! value v0, v1, v3 and v4, tombstones, a deleted group, an Empty and a
//! Stable group, committed, aborted and open transactions, a commit above
//! the HW, KIP-848 records): shipped by the real shipper, applied, and
//! listed by `applier groups --json`, on memory, file and S3. Every
//! selected group's offsets are there, clamped where the mirror is behind;
//! what the fixture says no reader may see is absent; kafka-python parses
//! the destination's `__consumer_offsets`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use applier::{Applier, ApplierOptions};
use common::clients::{applier, offsets_records_read_by_kafka_python};
use common::{SOURCE, produce};
use kafkalog::checkpoint::{REPLICATION_OFFSET_CHECKPOINT, write_offset_checkpoint};
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use serde_json::Value;
use shipper::{Shipper, ShipperOptions};

/// Each source partition holds this many records; the fixture commits up
/// to `MAX_OFFSET`, so some offsets are beyond what the mirror can hold.
const LOG_END: i64 = 100;
const MAX_OFFSET: &str = "150";

type Key = (String, String, i64);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_written_group_offsets_are_listed_synced_and_clamped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    {
        let d = LogDir::open(&source).expect("source");
        let mut hw = BTreeMap::new();
        for (topic, partitions, id) in [("orders", 3, 7u8), ("events", 1, 8u8)] {
            for p in 0..partitions {
                let tp = TopicPartition::new(topic, p).expect("tp");
                let mut log = d
                    .open_or_create_partition(
                        &tp,
                        Some(TopicId::from_bytes([id; 16])),
                        LogConfig::default(),
                    )
                    .expect("create");
                produce(&mut log, LOG_END as usize, 0);
                log.close().expect("close");
                hw.insert(tp, LOG_END);
            }
        }
        write_offset_checkpoint(&source.join(REPLICATION_OFFSET_CHECKPOINT), &hw, true)
            .expect("hw checkpoint");
    }
    let expect_path = dir.path().join("expected.json");
    let Some(_) = segmirror_testkit::kafka_python::run_fixture(
        "gen_consumer_offsets.py",
        &[
            "--log-dir",
            source.to_str().expect("utf-8"),
            "--topic",
            "orders:3",
            "--topic",
            "events:1",
            "--max-offset",
            MAX_OFFSET,
            "--expect",
            expect_path.to_str().expect("utf-8"),
        ],
    ) else {
        return;
    };
    let expected: Value =
        serde_json::from_slice(&std::fs::read(&expect_path).expect("expected")).expect("json");
    // What the destination must hold: every offset of a selected group on
    // a mirrored topic, clamped to the mirror's log end.
    let mut want: BTreeMap<Key, (i64, i64)> = BTreeMap::new();
    let mut not_mirrored: BTreeSet<Key> = BTreeSet::new();
    for (group, g) in expected["groups"].as_object().expect("groups") {
        if group.starts_with("console-consumer-") {
            continue;
        }
        for o in g["offsets"].as_object().expect("offsets").values() {
            let key = (
                group.clone(),
                o["topic"].as_str().expect("topic").to_string(),
                o["partition"].as_i64().expect("partition"),
            );
            let offset = o["offset"].as_i64().expect("offset");
            if o["mirrored"].as_bool() == Some(true) {
                want.insert(key, (offset, offset.min(LOG_END)));
            } else {
                not_mirrored.insert(key);
            }
        }
    }
    assert!(
        want.values().any(|(src, here)| src != here),
        "the fixture commits beyond the mirror's end somewhere: {want:?}"
    );
    assert!(want.keys().any(|k| k.0 == "billing") && want.keys().any(|k| k.0 == "orders-app"));

    let console = regex::Regex::new("^(?:console-consumer-.*)$").expect("re");
    let every_topic = regex::Regex::new("^.*$").expect("re");
    for b in segmirror_testkit::backends() {
        let dest = dir.path().join(format!("dest-{}", b.name));
        let mut opts = ShipperOptions::new(vec![source.clone()], SOURCE);
        opts.bucket_prefix = b.prefix.clone();
        opts.delete_grace = None;
        opts.group_sync_interval = Duration::ZERO;
        opts.exclude_groups = Some(console.clone());
        let mut shipper = Shipper::new(opts, b.store.clone()).expect("shipper");
        let r = shipper.ship_available().await;
        assert!(r.errors.is_empty(), "[{}] {:?}", b.name, r.errors);
        assert_eq!(r.group_versions, 1, "[{}] {r:?}", b.name);
        // The KIP-848 records are skipped and counted, not a failure.
        let metrics = shipper.metrics().render();
        assert!(
            metrics.contains("segmirror_shipper_group_records_skipped_total{kind=\"key_v3\"} 1"),
            "[{}] {metrics}",
            b.name
        );

        let mut o = ApplierOptions::new(&dest, SOURCE);
        o.bucket_prefix = b.prefix.clone();
        o.topics = Some(every_topic.clone());
        let mut a = Applier::open(o, Some(b.store.clone())).expect("applier");
        for _ in 0..10 {
            let r = a.run_once().await;
            if r.batches == 0 && r.transitions == 0 {
                break;
            }
        }
        a.close_gateway();
        drop(a);

        let (code, out) = applier(&[
            "groups",
            "--log-dir",
            dest.to_str().expect("utf-8"),
            "--json",
        ]);
        assert_eq!(code, 0, "[{}] {out}", b.name);
        let listed: Value = serde_json::from_str(out.trim()).expect("json");
        let mut got: BTreeMap<Key, Value> = BTreeMap::new();
        for row in listed["groups"].as_array().expect("rows") {
            let key = (
                row["group"].as_str().expect("group").to_string(),
                row["topic"].as_str().expect("topic").to_string(),
                row["partition"].as_i64().expect("partition"),
            );
            got.insert(key, row.clone());
        }
        let synced: BTreeSet<&Key> = got
            .iter()
            .filter(|(_, r)| r["sync"] != "not synced")
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            synced,
            want.keys().collect::<BTreeSet<_>>(),
            "[{}] exactly the selected groups' mirrored offsets: {out}",
            b.name
        );
        for (key, (src, here)) in &want {
            let row = &got[key];
            let how = if src == here { "synced" } else { "clamped" };
            assert_eq!(
                (
                    row["offset"].as_i64(),
                    row["source_offset"].as_i64(),
                    row["sync"].as_str(),
                    row["log_end_offset"].as_i64()
                ),
                (Some(*here), Some(*src), Some(how), Some(LOG_END)),
                "[{}] {key:?}: {row}",
                b.name
            );
        }
        // Offsets on topics this destination does not mirror are listed
        // as not synced, never written.
        for key in &not_mirrored {
            assert_eq!(got[key]["sync"], "not synced", "[{}] {key:?}", b.name);
            assert!(got[key]["offset"].is_null(), "[{}] {key:?}", b.name);
        }
        assert_eq!(listed["sync"]["version"], 1, "[{}]", b.name);

        // kafka-python reads what the applier wrote to __consumer_offsets.
        let records = offsets_records_read_by_kafka_python(&dest).expect("python checked above");
        assert!(
            records >= want.len(),
            "[{}] kafka-python parsed {records} commit records",
            b.name
        );
    }
}
