//! The `shipper` binary and gaps (issue 26): a shipper stopped while the
//! source's retention passes the shipped end records the gap at restart;
//! `shipper once` exits 1 naming the partition and the offsets until
//! `shipper gaps ack` acknowledges that gap, `shipper status` shows it
//! (table and JSON), and a later gap makes `once` exit 1 again. And log
//! dirs where no partition has a topic id (Kafka before 2.8) are exit 2
//! with one message saying why and what to do.

mod common;

use std::path::Path;

use common::shipper_cli as shipper;
use common::*;
use kafkalog::{LogConfig, LogDir};
use serde_json::Value;

fn append(root: &Path, batches: usize) {
    let dir = LogDir::open(root).expect("log dir");
    let mut log = open_log(&dir, &tp("orders", 0), topic_id(1), 4096);
    append_n(&mut log, batches, 10, 2, 100);
    log.close().expect("close");
    dir.write_checkpoints().expect("checkpoints");
}

/// Retention as Kafka does it: whole segments below `start` deleted, the
/// log start raised in `log-start-offset-checkpoint`.
fn retention(root: &Path, start: i64) {
    let dir = LogDir::open(root).expect("log dir");
    let mut log = dir
        .open_partition(&tp("orders", 0), LogConfig::default())
        .expect("open");
    assert!(!log.raise_log_start(start).expect("retention").is_empty());
    log.close().expect("close");
    dir.write_checkpoints().expect("checkpoints");
}

#[test]
fn once_exits_1_for_a_gap_until_it_is_acknowledged_and_again_for_a_later_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    let logs_s = logs.to_str().expect("utf-8");
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let at = ["--bucket", bucket.as_str(), "--cluster-id", "src"];
    let once = [
        &["once", "--create-bucket", "--log-dir", logs_s][..],
        &at[..],
    ]
    .concat();
    let ack = |offsets: &str| {
        let args = [
            &["gaps", "ack"][..],
            &at[..],
            &[
                "--topic",
                "orders",
                "--partition",
                "0",
                "--offsets",
                offsets,
            ],
        ]
        .concat();
        shipper(&args)
    };

    append(&logs, 10);
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "{err}");
    let (_, table, _) = shipper(&[&["status"][..], &at[..]].concat());
    assert!(table.contains("GAPS"), "{table}");
    assert!(
        table.lines().nth(2).is_some_and(|l| l.ends_with(" -")),
        "{table}"
    );

    // Stopped; the source writes 100-249 and retention passes 100.
    append(&logs, 15);
    retention(&logs, 230);
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "GAP orders-0: offsets 100-229 were lost at the source before they were shipped"
        ),
        "{err}"
    );
    assert!(err.contains("ERROR"), "logged at ERROR: {err}");
    assert!(
        err.contains(&format!(
            "Acknowledge: shipper gaps ack --bucket {bucket} --cluster-id src --topic orders --partition 0 --offsets 100-229"
        )),
        "{err}"
    );
    // Durable: a second run (nothing new) still exits 1.
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("ERROR"), "logged once, at detection: {err}");

    let (code, table, _) = shipper(&[&["status"][..], &at[..]].concat());
    assert_eq!(code, 0);
    assert!(table.contains("100-229!"), "{table}");
    let (_, json, _) = shipper(&[&["status", "--json"][..], &at[..]].concat());
    let v: Value = serde_json::from_str(&json).expect("json");
    let g = &v["partitions"][0]["gaps"][0];
    assert_eq!(
        (g["first_offset"].as_i64(), g["last_offset"].as_i64()),
        (Some(100), Some(229))
    );
    assert_eq!(g["cause"], "retention");
    assert_eq!(g["acknowledged_at_ms"], Value::Null);
    let (_, list, _) = shipper(&[&["gaps", "list"][..], &at[..]].concat());
    assert!(
        list.contains("orders-0") && list.contains("NOT acknowledged"),
        "{list}"
    );

    // A gap that is not there: exit 1 naming those that are.
    let (code, _, err) = ack("0-99");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no gap at offsets 0-99; its gaps: 100-229"),
        "{err}"
    );
    let (code, out, err) = ack("100-229");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("acknowledged"), "{out}");
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "acknowledged: {err}");
    let (_, table, _) = shipper(&[&["status"][..], &at[..]].concat());
    assert!(table.contains("100-229 (acked)"), "{table}");

    // A later gap is not covered by the first acknowledgement.
    append(&logs, 10);
    retention(&logs, 330);
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("GAP orders-0: offsets 250-329"), "{err}");
    assert!(!err.contains("offsets 100-229"), "{err}");
    let (code, _, err) = ack("250-329");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn once_over_log_dirs_without_topic_ids_exits_2_saying_why_and_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    // Kafka before 2.8: no partition.metadata in any partition dir.
    for p in 0..3 {
        raw_partition(&logs, &tp("orders", p), topic_id(1), 2);
        std::fs::remove_file(
            logs.join(tp("orders", p).dir_name())
                .join(kafkalog::checkpoint::PARTITION_METADATA),
        )
        .expect("rm");
    }
    let logs_s = logs.to_str().expect("utf-8");
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let once = [
        "once",
        "--create-bucket",
        "--log-dir",
        logs_s,
        "--bucket",
        &bucket,
        "--cluster-id",
        "src",
    ];
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 2, "{err}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("shipper: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "one message: {err}");
    for want in [
        "none of the 3 selected partitions has a topic id",
        "no partition.metadata",
        "Kafka before 2.8",
        "inter.broker.protocol.version",
        "restart",
    ] {
        assert!(errors[0].contains(want), "{want} in {err}");
    }
    assert!(
        err.lines()
            .filter(|l| l.contains("WARN") && !l.contains("no KRaft metadata log"))
            .count()
            <= 1,
        "not one warning per partition: {err}"
    );

    // One partition with an id: it is shipped, the others are named in
    // the summary, exit 0.
    raw_partition(&logs, &tp("payments", 0), topic_id(2), 2);
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("3 partitions without a topic id (no partition.metadata) were not shipped"),
        "{err}"
    );
}

#[test]
fn on_a_tiered_topic_offsets_in_remote_storage_are_reported_not_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    let logs_s = logs.to_str().expect("utf-8");
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let at = ["--bucket", bucket.as_str(), "--cluster-id", "src"];
    let once = [
        &[
            "once",
            "--create-bucket",
            "--log-dir",
            logs_s,
            "--tiered-topic",
            "orders",
        ][..],
        &at[..],
    ]
    .concat();
    append(&logs, 10);
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "{err}");
    // Local retention deletes segments up to 230; the broker's log start
    // (remote storage included) stays at 50.
    append(&logs, 15);
    retention(&logs, 230);
    let first_local = LogDir::open(&logs)
        .expect("log dir")
        .open_partition(&tp("orders", 0), LogConfig::default())
        .expect("open")
        .segment_base_offsets()[0];
    let cp = logs.join(kafkalog::checkpoint::LOG_START_OFFSET_CHECKPOINT);
    kafkalog::checkpoint::write_offset_checkpoint(
        &cp,
        &[(tp("orders", 0), 50)].into_iter().collect(),
        false,
    )
    .expect("checkpoint");
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "not a loss: {err}");
    assert!(!err.contains("GAP "), "{err}");
    let (_, table, _) = shipper(&[&["status"][..], &at[..]].concat());
    assert!(
        table.contains(&format!("100-{} (remote)", first_local - 1)),
        "{table}"
    );
    let (_, json, _) = shipper(&[&["status", "--json"][..], &at[..]].concat());
    let v: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["partitions"][0]["gaps"][0]["cause"], "remote_storage");
}
