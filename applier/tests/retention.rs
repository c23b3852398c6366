//! Retention after failover (issue 29, "enforced after failover"): a
//! STOPPED mirror owns its topic and deletes old segments by the source's
//! `retention.ms` / `retention.bytes` kept in its record, at the first
//! cycle after the stop and then every five minutes, as Kafka's
//! `log.retention.check.interval.ms`; before the stop it deletes nothing
//! of its own. What is kept stays byte-identical to the source. A config
//! that cannot be enforced is shown by `applier status` (table and JSON)
//! and the partition stays STOPPED.
//!
//! The applier runs in process with a manual clock; the source's manifests
//! are published by hand (`common::publish`, `common::republish`).

mod common;

use std::path::Path;
use std::sync::Arc;

use applier::{Applier, ApplierOptions};
use common::{SOURCE, file_bucket, publish, republish, topic_id, tp};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::reader::PartitionReader;
use kafkalog::{LogConfig, LogDir, TopicPartition};
use manifest::clock::{Clock, ManualClock};
use manifest::state::{Command, PartitionState};
use manifest::topic_config::{ConfigSource, ConfigValue};

const DAY: i64 = 86_400_000;

/// Writes the source's `orders-0`: one segment of 10 records per
/// timestamp of `ages_ms` (how old its records are at `now`).
fn source_log(root: &Path, now: i64, ages_ms: &[i64]) {
    let d = LogDir::open(root).expect("source");
    let mut log = d
        .open_or_create_partition(&tp("orders"), Some(topic_id()), LogConfig::default())
        .expect("create");
    for (i, age) in ages_ms.iter().enumerate() {
        if i > 0 {
            let end = log.log_end_offset();
            log.roll_to(end).expect("roll");
        }
        let records: Vec<RecordInput> = (0..10)
            .map(|r| RecordInput {
                timestamp: now - age,
                key: Some(format!("k{i}-{r}").into_bytes()),
                value: Some(vec![b'v'; 100]),
                headers: vec![],
            })
            .collect();
        let mut batch = build_batch(&BatchSpec::new(0, 0), &records).expect("batch");
        log.append_as_leader(&mut batch, 0).expect("append");
    }
    log.close().expect("close");
}

/// Each segment's base offset and `.log` bytes.
fn segments(root: &Path, t: &TopicPartition) -> Vec<(i64, Vec<u8>)> {
    PartitionReader::open(root, t)
        .expect("reader")
        .segments()
        .expect("segments")
        .into_iter()
        .map(|s| (s.base_offset, std::fs::read(&s.path).expect("read")))
        .collect()
}

fn configs(kv: &[(&str, &str)]) -> std::collections::BTreeMap<String, ConfigValue> {
    kv.iter()
        .map(|(k, v)| {
            let value = ConfigValue {
                value: v.to_string(),
                source: ConfigSource::Topic,
            };
            (k.to_string(), value)
        })
        .collect()
}

fn log_start(a: &Applier) -> i64 {
    a.mirrors()
        .find(|m| m.tp == tp("orders"))
        .expect("the mirror")
        .log
        .log_start_offset()
}

async fn settle(a: &mut Applier) {
    for _ in 0..10 {
        let r = a.run_once().await;
        if r.batches == 0 && r.transitions == 0 {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_mirror_deletes_old_segments_by_the_sources_retention_every_five_minutes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
    let clock = ManualClock::new();
    let now = clock.now_ms();
    // Two segments ten days old, two just under a day old (by 30 s), the
    // active one new; the source keeps a day.
    source_log(
        &source,
        now,
        &[10 * DAY, 10 * DAY, DAY - 30_000, DAY - 30_000, 0],
    );
    let source_segments = segments(&source, &tp("orders"));
    let bases: Vec<i64> = source_segments.iter().map(|(b, _)| *b).collect();
    assert_eq!(bases, [0, 10, 20, 30, 40]);
    let (_, store) = file_bucket(&dir.path().join("bucket"));
    publish(&store, &source, &tp("orders"), "u1").await;
    republish(&store, &tp("orders"), topic_id(), |m| {
        m.topic_configs = Some(configs(&[("retention.ms", &DAY.to_string())]));
    })
    .await;

    let mut opts = ApplierOptions::new(&dest, SOURCE);
    opts.topics = Some(regex::Regex::new("^orders$").expect("regex"));
    let mut a = Applier::open_with_clock(
        opts,
        Some(store.object_store().clone()),
        Arc::new(clock.clone()),
    )
    .expect("applier");
    settle(&mut a).await;
    assert_eq!(a.state_of(&tp("orders")), Some(PartitionState::Mirroring));
    assert_eq!(segments(&dest, &tp("orders")), source_segments);

    // MIRRORING: the source decides; nothing is deleted here, however old.
    settle(&mut a).await;
    assert_eq!(log_start(&a), 0, "a mirror follows the source's log start");

    // Stopped: the first cycle enforces the record's retention.ms.
    let out = a.command(Command::Stop, &["orders".into()], false).await;
    assert_eq!(out[0].state.as_deref(), Some("STOPPED"), "{out:?}");
    a.run_once().await;
    assert_eq!(log_start(&a), 20, "the ten-day-old segments are deleted");
    assert_eq!(segments(&dest, &tp("orders")), source_segments[2..]);

    // A minute later the next two are past a day old, but the next check
    // is not due yet.
    clock.advance_ms(60_000);
    a.run_once().await;
    assert_eq!(log_start(&a), 20, "checked every five minutes");

    // Five minutes after the first check: deleted; the active segment
    // stays, byte-identical to the source's.
    clock.advance_ms(4 * 60_000);
    a.run_once().await;
    assert_eq!(log_start(&a), 40);
    assert_eq!(segments(&dest, &tp("orders")), source_segments[4..]);
    let mirror = a.mirrors().next().expect("mirror");
    assert_eq!(mirror.log.log_end_offset(), 50, "the log end never moves");
    let row = &a.status_rows()[0];
    assert_eq!(
        (
            row.state.as_str(),
            row.local_log_start_offset,
            &row.retention_error
        ),
        ("STOPPED", 40, &None)
    );
    drop(a);

    // The new log start survives a restart (the root checkpoint).
    let start = kafkalog::checkpoint::read_offset_checkpoint(
        &dest.join(kafkalog::checkpoint::LOG_START_OFFSET_CHECKPOINT),
    )
    .expect("log-start-offset-checkpoint");
    assert_eq!(start.get(&tp("orders")), Some(&40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_bytes_keeps_the_newest_segments_under_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
    let clock = ManualClock::new();
    source_log(&source, clock.now_ms(), &[0, 0, 0, 0]);
    let source_segments = segments(&source, &tp("orders"));
    let segment = source_segments[0].1.len() as u64;
    let (_, store) = file_bucket(&dir.path().join("bucket"));
    publish(&store, &source, &tp("orders"), "u1").await;
    // Two and a half segments: Kafka deletes the oldest while what is left
    // stays at least the limit, so one goes.
    let limit = (segment * 5 / 2).to_string();
    republish(&store, &tp("orders"), topic_id(), |m| {
        m.topic_configs = Some(configs(&[
            ("retention.ms", "-1"),
            ("retention.bytes", &limit),
        ]));
    })
    .await;
    let mut opts = ApplierOptions::new(&dest, SOURCE);
    opts.topics = Some(regex::Regex::new("^orders$").expect("regex"));
    let mut a = Applier::open_with_clock(
        opts,
        Some(store.object_store().clone()),
        Arc::new(clock.clone()),
    )
    .expect("applier");
    settle(&mut a).await;
    a.command(Command::Stop, &["orders".into()], false).await;
    a.run_once().await;
    assert_eq!(log_start(&a), 10);
    assert_eq!(segments(&dest, &tp("orders")), source_segments[1..]);
}

/// A config that cannot be enforced: shown by `applier status` (table and
/// JSON) beside a running applier, the partition still STOPPED and its
/// segments kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_that_cannot_be_enforced_is_shown_and_the_partition_stays_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
    let clock = ManualClock::new();
    source_log(&source, clock.now_ms(), &[10 * DAY, 0]);
    let (_, store) = file_bucket(&dir.path().join("bucket"));
    publish(&store, &source, &tp("orders"), "u1").await;
    republish(&store, &tp("orders"), topic_id(), |m| {
        m.topic_configs = Some(configs(&[("retention.ms", "a week")]));
    })
    .await;
    let mut opts = ApplierOptions::new(&dest, SOURCE);
    opts.topics = Some(regex::Regex::new("^orders$").expect("regex"));
    let mut a = Applier::open_with_clock(
        opts,
        Some(store.object_store().clone()),
        Arc::new(clock.clone()),
    )
    .expect("applier");
    settle(&mut a).await;
    a.command(Command::Stop, &["orders".into()], false).await;
    a.run_once().await;
    assert_eq!(log_start(&a), 0, "nothing deleted");
    assert_eq!(a.state_of(&tp("orders")), Some(PartitionState::Stopped));

    let bin = env!("CARGO_BIN_EXE_applier");
    let dest_s = dest.to_str().expect("utf-8");
    let (code, out) = common::run_applier(bin, &["status", "--log-dir", dest_s, "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let row = &v["partitions"][0];
    assert_eq!(row["state"], "STOPPED", "{v}");
    assert_eq!(row["last_error"], serde_json::Value::Null, "{v}");
    let e = row["retention_error"].as_str().expect("a retention error");
    assert!(e.contains("retention.ms") && e.contains("a week"), "{e}");
    let (code, table) = common::run_applier(bin, &["status", "--log-dir", dest_s]);
    assert_eq!(code, 0, "{table}");
    let line = table
        .lines()
        .find(|l| l.starts_with("orders-0 "))
        .expect("the partition's line");
    assert!(
        line.contains("STOPPED") && line.contains("retention not enforced:"),
        "{table}"
    );
    drop(a);
}
