//! `backfill restore` through the binary: the restored log dir equals the
//! source's log cut at the same batch boundary, as `kafkalog::compare`
//! sees it (batch bytes, offsets, leader epochs, lineage).

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use common::*;
use kafkalog::compare::{Comparison, compare_partition};
use kafkalog::reader::PartitionReader;
use kafkalog::{LogConfig, LogDir, TopicPartition};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let p = e.path();
        let target = to.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &target);
        } else {
            std::fs::copy(&p, &target).expect("copy");
        }
    }
}

/// The source's end after the last whole batch that `keep` accepts, in
/// order, stopping at the first it refuses: the oracle, from kafkalog's
/// reader and not from backfill's planner.
fn source_cut(source: &Path, tp: &TopicPartition, keep: impl Fn(i64, i64) -> bool) -> i64 {
    let reader = PartitionReader::open(source, tp).expect("reader");
    let mut end = 0;
    reader
        .for_each_batch(0, true, |h, _| {
            if !keep(h.last_offset(), h.max_timestamp) {
                return ControlFlow::Break(());
            }
            end = h.last_offset() + 1;
            ControlFlow::Continue(())
        })
        .expect("walk");
    end
}

/// A copy of the source log dir with `tp` truncated to `end`.
fn truncated_source(source: &Path, tp: &TopicPartition, end: i64, into: &Path) -> PathBuf {
    copy_dir(source, into);
    let dir = LogDir::open(into).expect("copy");
    let mut log = dir.open_partition(tp, LogConfig::default()).expect("open");
    log.truncate_to(end).expect("truncate");
    log.close().expect("close");
    into.to_path_buf()
}

async fn world() -> (tempfile::TempDir, String, PathBuf) {
    let dir = tempfile::tempdir().expect("tmp");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    let source = dir.path().join("source");
    publish_all(store, "", &source).await;
    (dir, bucket, source)
}

fn restore(bucket: &str, log_dir: &Path, extra: &[&str]) -> Run {
    let log_dir = log_dir.display().to_string();
    let mut args = vec![
        "restore",
        "--bucket",
        bucket,
        "--source-cluster-id",
        SOURCE,
        "--log-dir",
        &log_dir,
    ];
    if !extra.contains(&"--topics") {
        args.extend_from_slice(&["--topics", ".*"]);
    }
    args.extend_from_slice(extra);
    backfill(&args)
}

#[tokio::test]
async fn a_restore_until_an_offset_is_the_sources_prefix_cut_at_a_batch_boundary() {
    let (dir, bucket, source) = world().await;
    let target = dir.path().join("restored");
    let run = restore(&bucket, &target, &["--until-offset", "47", "--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    for tp in partitions() {
        let end = source_cut(&source, &tp, |last, _| last <= 47);
        let expected = truncated_source(
            &source,
            &tp,
            end,
            &dir.path().join(format!("expected-{tp}")),
        );
        assert_eq!(
            compare_partition(&expected, &target, &tp).expect("compare"),
            Comparison::Identical,
            "{tp} cut at {end}"
        );
        // partition.metadata and the leader-epoch checkpoint are there.
        let path = target
            .join(tp.dir_name())
            .join(kafkalog::checkpoint::PARTITION_METADATA);
        let text = std::fs::read_to_string(&path).expect("partition.metadata");
        assert!(text.contains(&topic_id(&tp.topic).to_string()), "{text}");
        assert!(
            target
                .join(tp.dir_name())
                .join("leader-epoch-checkpoint")
                .exists()
        );
    }
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("json");
    let orders1 = json["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .find(|p| p["topic"] == "orders" && p["partition"] == 1)
        .expect("orders-1");
    // orders-1's transaction of producer 7003 (offset 20) is open at the cut.
    assert_eq!(
        orders1["open_transactions"],
        serde_json::json!([[7003, 20]])
    );
    assert!(
        run.stderr.contains("producer 7003 from offset 20"),
        "{}",
        run.stderr
    );

    // The restored log is a plain writable log: a leader append works.
    let d = LogDir::open(&target).expect("restored dir");
    let tp = TopicPartition::new("payments", 0).expect("tp");
    let mut log = d.open_partition(&tp, LogConfig::default()).expect("open");
    let end = log.log_end_offset();
    let mut b = kafkalog::builder::build_batch(
        &kafkalog::builder::BatchSpec::new(0, 5),
        &[kafkalog::builder::RecordInput {
            timestamp: T0,
            key: None,
            value: Some(b"after restore".to_vec()),
            headers: vec![],
        }],
    )
    .expect("batch");
    let info = log.append_as_leader(&mut b, 5).expect("writable");
    assert_eq!(info.first_offset, end);
    log.close().expect("close");
}

#[tokio::test]
async fn a_restore_until_a_time_stops_before_the_first_later_batch() {
    let (dir, bucket, source) = world().await;
    let target = dir.path().join("restored");
    let until = T0 + 50_500;
    let run = restore(
        &bucket,
        &target,
        &[
            "--topics",
            "orders",
            "--partitions",
            "0",
            "--until",
            &until.to_string(),
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let tp = TopicPartition::new("orders", 0).expect("tp");
    let end = source_cut(&source, &tp, |_, max_ts| max_ts <= until);
    assert!(end > 0 && end <= 51, "{end}");
    let expected = truncated_source(&source, &tp, end, &dir.path().join("expected"));
    assert_eq!(
        compare_partition(&expected, &target, &tp).expect("compare"),
        Comparison::Identical
    );
    assert!(
        !target.join("orders-1").exists(),
        "only the selected partition"
    );
}

#[tokio::test]
async fn a_dry_run_prints_the_plan_and_writes_nothing() {
    let (dir, bucket, _) = world().await;
    let target = dir.path().join("restored");
    let run = restore(&bucket, &target, &["--until-offset", "47", "--dry-run"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!target.exists(), "a dry run creates nothing");
    assert!(
        run.stderr.contains("orders-0: ") && run.stderr.contains("objects ("),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("would restore 3 of 3 partitions"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn a_restore_never_writes_over_a_log_and_says_when_the_cut_is_too_old() {
    let (dir, bucket, _) = world().await;
    let target = dir.path().join("restored");
    let run = restore(&bucket, &target, &["--until-offset", "5"]);
    assert_eq!(run.code, 0, "{run:?}");
    let again = restore(&bucket, &target, &["--until-offset", "9"]);
    assert_eq!(again.code, 2, "{again:?}");
    assert!(again.stderr.contains("already holds"), "{}", again.stderr);

    let other = dir.path().join("other");
    let run = restore(&bucket, &other, &["--until", "2001-01-01T00:00:00Z"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("nothing of the 3 selected partitions is at or before the cut"),
        "{}",
        run.stderr
    );
    let run = restore(
        &bucket,
        &other,
        &["--topics", "nope", "--until-offset", "5"],
    );
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("orders, payments"), "{}", run.stderr);
}

#[tokio::test]
async fn open_transactions_at_the_cut_can_be_aborted_with_markers() {
    let (dir, bucket, source) = world().await;
    let target = dir.path().join("restored");
    // orders-1: plain 0..=19, producer 7003's transaction from 20 (never
    // ended), plain 22..=31. A cut at 25 keeps 0..=21.
    let run = restore(
        &bucket,
        &target,
        &[
            "--topics",
            "orders",
            "--partitions",
            "1",
            "--until-offset",
            "25",
            "--abort-open-transactions",
            "--json",
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stderr
            .contains("aborted with a marker: producer 7003 from offset 20"),
        "{}",
        run.stderr
    );
    let tp = TopicPartition::new("orders", 1).expect("tp");
    let d = LogDir::open(&target).expect("restored");
    let log = d.open_partition(&tp, LogConfig::default()).expect("open");
    assert!(
        log.open_transactions().is_empty(),
        "no transaction left open"
    );
    assert_eq!(log.log_end_offset(), 23, "22 offsets and one marker");
    log.close().expect("close");
    // Up to the cut it is still the source's prefix.
    let expected = truncated_source(&source, &tp, 22, &dir.path().join("expected"));
    match compare_partition(&expected, &target, &tp).expect("compare") {
        Comparison::Different(d) => {
            assert!(d.contains("identical up to 22"), "{d}")
        }
        other => panic!("the marker is an extra batch: {other:?}"),
    }
}

/// The same restore from the S3 test server, when configured
/// (unless `SEGMIRROR_SKIP_S3=1`).
#[tokio::test]
async fn a_restore_from_s3_is_the_sources_prefix() {
    let Some(s3) = segmirror_testkit::backends()
        .into_iter()
        .find(|b| b.name == "s3")
    else {
        return; // SEGMIRROR_SKIP_S3=1: backends() said so.
    };
    let url = s3.url.clone().expect("s3 url");
    let dir = tempfile::tempdir().expect("tmp");
    let source = dir.path().join("source");
    publish_all(s3.store.clone(), &s3.prefix, &source).await;
    let target = dir.path().join("restored");
    let run = restore(&url, &target, &["--until-offset", "47"]);
    assert_eq!(run.code, 0, "{run:?}");
    for tp in partitions() {
        let end = source_cut(&source, &tp, |last, _| last <= 47);
        let expected = truncated_source(
            &source,
            &tp,
            end,
            &dir.path().join(format!("expected-{tp}")),
        );
        assert_eq!(
            compare_partition(&expected, &target, &tp).expect("compare"),
            Comparison::Identical,
            "{tp}"
        );
    }
}

/// A bucket whose ranges all live in one pack (issue 30) restores to the
/// same log as one whose ranges are objects of their own: each range is
/// one ranged GET of the pack, its CRC-32C checked.
#[tokio::test]
async fn a_restore_from_ranges_inside_a_pack_is_the_same() {
    let (dir, bucket, _source) = world().await;
    let plain = dir.path().join("plain");
    let run = restore(&bucket, &plain, &["--until-offset", "47"]);
    assert_eq!(run.code, 0, "{run:?}");
    let (_, store) = file_bucket(&dir.path().join("bucket"));
    let pack = repack_all(store, "").await;
    let packed = dir.path().join("packed");
    let run = restore(&bucket, &packed, &["--until-offset", "47"]);
    assert_eq!(run.code, 0, "{run:?}");
    for tp in partitions() {
        assert_eq!(
            compare_partition(&plain, &packed, &tp).expect("compare"),
            Comparison::Identical,
            "{tp}"
        );
    }
    // Only the pack is left to read from.
    let objects: Vec<String> = files_under(&dir.path().join("bucket"))
        .into_keys()
        .filter(|k| k.ends_with(".batches") || k.ends_with(".pack"))
        .collect();
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert!(
        pack.ends_with(objects[0].rsplit('/').next().expect("name")),
        "{pack} {objects:?}"
    );
}
