//! Operator commands that cannot hurt the mirror, through the binary:
//! `start` refuses to pin an identity it was not given, and the commands
//! that act on existing mirrors never create a mistyped log dir; a
//! `start` naming another source corrects the pin of a partition that has
//! not begun mirroring, and is refused, naming the pin, on one that has.

mod common;

use std::process::Command;

use common::{SOURCE, file_bucket, produce, publish, topic_id, tp};
use kafkalog::{LogConfig, LogDir};

fn applier(args: &[&str]) -> (i32, String) {
    common::run_applier(env!("CARGO_BIN_EXE_applier"), args)
}

#[test]
fn start_without_the_identity_it_pins_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("mirror");
    let log = log_dir.to_str().expect("utf-8");
    let (code, out) = applier(&["start", "--log-dir", log, "--topic", "orders"]);
    assert_eq!(code, 2, "a usage error: {out}");
    assert!(
        out.contains("`bucket`") && out.contains("--bucket"),
        "{out}"
    );
    assert!(
        !log_dir.join("orders-0").exists(),
        "no partition, no mirror record pinned to an empty source"
    );

    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let (code, out) = applier(&[
        "start",
        "--log-dir",
        log,
        "--topic",
        "orders",
        "--bucket",
        &bucket,
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("`source_cluster_id`"), "{out}");
    assert!(!log_dir.join("orders-0").exists());
}

#[test]
fn help_has_examples_that_paste_defaults_and_the_exit_codes() {
    let (code, out) = applier(&["--help"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("Exit codes: 0 done; 1 a partition is FAILED, an operation was refused")
            && out.contains("2 a usage or setup error"),
        "{out}"
    );
    assert!(
        out.contains("--topics REGEX") && out.contains("--topic NAME"),
        "--topic and --topics side by side: {out}"
    );
    for sub in [
        &["--help"][..],
        &["run", "--help"],
        &["once", "--help"],
        &["plan", "--help"],
        &["start", "--help"],
        &["pause", "--help"],
        &["resume", "--help"],
        &["stop", "--help"],
        &["status", "--help"],
        &["doctor", "--help"],
        &["config", "check", "--help"],
        &["config", "example", "--help"],
    ] {
        let (code, out) = applier(sub);
        assert_eq!(code, 0, "{sub:?}");
        let examples: Vec<&str> = out
            .split("Examples:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{sub:?} has no examples: {out}"))
            .lines()
            .take_while(|l| !l.is_empty())
            .collect();
        assert!(!examples.is_empty(), "{sub:?}");
        for line in examples {
            assert!(
                line.starts_with("  applier ") || line.starts_with("  SEGMIRROR_"),
                "{sub:?}: an example line is wrapped or not a command: {line:?}"
            );
        }
    }
    let (_, out) = applier(&["once", "--help"]);
    for default in [
        "[default: 1s]",
        "[default: 4]",
        "[default: 16MiB]",
        "[default: 1MiB]",
        "[default: 60s]",
    ] {
        assert!(out.contains(default), "once --help lacks {default}: {out}");
    }
    let (_, out) = applier(&["stop", "--help"]);
    assert!(
        out.contains("--timeout <DURATION>") && out.contains("[default: 60s]"),
        "{out}"
    );
}

#[test]
fn config_example_prints_a_file_that_config_check_accepts() {
    let (code, out) = applier(&["config", "example"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("source_cluster_id = ") && out.contains("# topics = "),
        "{out}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("applier.toml");
    std::fs::write(&file, &out).expect("write");
    let (code, out) = applier(&["config", "check", "--config", file.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("source cluster MkU3OEVBNTcwNTJENDM2Qk"),
        "{out}"
    );
}

#[test]
fn commands_on_a_mistyped_log_dir_fail_and_create_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-dir");
    let log = missing.to_str().expect("utf-8");
    for args in [
        vec!["stop", "--log-dir", log, "--all"],
        vec!["pause", "--log-dir", log, "--topic", "orders"],
        vec!["resume", "--log-dir", log, "--all"],
    ] {
        let (code, out) = applier(&args);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(out.contains("does not exist"), "{args:?}: {out}");
        assert!(!missing.exists(), "{args:?} created the log dir");
    }
    // An existing dir without a single mirror partition is the wrong dir too.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let (code, out) = applier(&["stop", "--log-dir", empty.to_str().expect("utf-8"), "--all"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("no mirror partitions in") && out.contains("nothing to stop"),
        "{out}"
    );
    let (code, out) = applier(&[
        "stop",
        "--log-dir",
        empty.to_str().expect("utf-8"),
        "--all",
        "--timeout",
        "soon",
    ]);
    assert_eq!(code, 2, "a usage error: {out}");
    assert!(out.contains("--timeout") && out.contains("30s"), "{out}");
}

/// `applier once` says a bucket problem the way `shipper once` does: one
/// line naming what was tried and the fix ([`bucket::diagnosis`]).
#[test]
fn once_on_a_bucket_that_does_not_exist_exits_1_naming_it_and_the_endpoint() {
    let Some(bucket) = segmirror_testkit::needs::s3() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("mirror");
    let missing = format!("s3://{bucket}-never-created/x");
    let (code, out) = applier(&[
        "once",
        "--log-dir",
        log.to_str().expect("utf-8"),
        "--bucket",
        &missing,
        "--source-cluster-id",
        "src",
        "--topics",
        ".*",
        "--store-timeout",
        "10s",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "bucket {bucket}-never-created does not exist at endpoint"
        )),
        "{out}"
    );
    assert_eq!(out.matches("does not exist").count(), 1, "one line: {out}");
}

/// The source a partition's mirror record is pinned to.
fn pinned_source(log_dir: &std::path::Path) -> String {
    partdir::record::read(&log_dir.join("orders-0"))
        .expect("record")
        .expect("a mirror record")
        .source_cluster_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_with_another_source_repins_a_preparing_partition_and_is_refused_once_mirroring() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One bucket, two sources that both ship `orders`: SOURCE 40 records,
    // "typo-src" 20 (the operator's first, mistaken start names it).
    let (url, store) = file_bucket(&dir.path().join("bucket"));
    for (cluster, records) in [(SOURCE, 40), ("typo-src", 20)] {
        let source = dir.path().join(format!("source-{cluster}"));
        let d = LogDir::open(&source).expect("source");
        let mut log = d
            .open_or_create_partition(&tp("orders"), Some(topic_id()), LogConfig::default())
            .expect("create");
        produce(&mut log, records, 3);
        log.close().expect("close");
        drop(d);
        let store = bucket::store::ManifestStore::new(
            store.object_store().clone(),
            manifest::layout::ClusterLayout::new("", cluster).expect("layout"),
        );
        publish(&store, &source, &tp("orders"), "u1").await;
    }
    let log_dir = dir.path().join("mirror");
    let log = log_dir.to_str().expect("utf-8");
    let start = |source: &str| {
        applier(&[
            "start",
            "--log-dir",
            log,
            "--topic",
            "orders",
            "--bucket",
            &url,
            "--source-cluster-id",
            source,
        ])
    };

    let (code, out) = start("typo-src");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("orders-0: PREPARING"), "{out}");
    assert_eq!(pinned_source(&log_dir), "typo-src");

    // Not yet mirroring: the second start corrects the pin.
    let (code, out) = start(SOURCE);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("orders-0: PREPARING"), "{out}");
    assert_eq!(pinned_source(&log_dir), SOURCE, "the pin is replaced");

    let (code, out) = applier(&[
        "once",
        "--log-dir",
        log,
        "--bucket",
        &url,
        "--source-cluster-id",
        SOURCE,
    ]);
    assert_eq!(code, 0, "the next once mirrors the corrected source: {out}");
    let (_, status) = applier(&["status", "--log-dir", log, "--json"]);
    let status: serde_json::Value = serde_json::from_str(status.trim()).expect("json");
    let row = &status["partitions"][0];
    assert_eq!(row["state"], "MIRRORING", "{status}");
    assert_eq!(
        row["local_log_end_offset"], 40,
        "SOURCE's 40 records: {status}"
    );

    // Mirroring: another source is refused, naming the pin and the way out.
    let files_before = snapshot(&log_dir.join("orders-0"));
    let (code, out) = start("typo-src");
    assert_eq!(code, 1, "a refused operation: {out}");
    assert!(
        out.contains(&format!("mirrors source cluster {SOURCE}, not typo-src"))
            && out.contains("applier stop"),
        "{out}"
    );
    assert_eq!(pinned_source(&log_dir), SOURCE, "the pin is kept");
    assert_eq!(
        snapshot(&log_dir.join("orders-0")),
        files_before,
        "nothing in the partition changed"
    );
}

/// Every file of `dir` with its bytes.
fn snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().expect("name").to_string_lossy().into_owned(),
                std::fs::read(&p).expect("read"),
            )
        })
        .collect();
    files.sort();
    files
}

/// Resuming after `stop` from the same source, through the binaries, with
/// the operator's log level: the cut is the local write, and the log says
/// it in words (no `None`, `Some(..)`, Rust structs or colour codes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_stop_cuts_the_local_write_and_logs_in_words() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, store) = file_bucket(&dir.path().join("bucket"));
    let source = dir.path().join("source");
    let d = LogDir::open(&source).expect("source");
    let mut log = d
        .open_or_create_partition(&tp("orders"), Some(topic_id()), LogConfig::default())
        .expect("create");
    produce(&mut log, 40, 3);
    log.close().expect("close");
    drop(d);
    publish(&store, &source, &tp("orders"), "u1").await;
    let log_dir = dir.path().join("mirror");
    let log = log_dir.to_str().expect("utf-8");
    let with_logs = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_applier"))
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("SEGMIRROR_APPLIER_CONFIG")
            .output()
            .expect("run applier");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout),
        )
    };
    let identity = ["--bucket", url.as_str(), "--source-cluster-id", SOURCE];
    let mut logs = String::new();
    let mut step = |args: Vec<&str>, want: i32| {
        let (code, out) = with_logs(&args);
        assert_eq!(code, want, "{args:?}: {out}");
        logs.push_str(&out);
    };
    step(
        [
            &["once", "--log-dir", log, "--topics", "orders"][..],
            &identity,
        ]
        .concat(),
        0,
    );
    // Written as an older runbook has it, with the identity flags stop
    // never used: still accepted, and named as ignored.
    let stop = [&["stop", "--log-dir", log, "--all"][..], &identity].concat();
    let (code, out) = with_logs(&stop);
    assert_eq!(code, 0, "{stop:?}: {out}");
    assert!(
        out.contains("--bucket, --source-cluster-id not used by stop"),
        "{out}"
    );
    // A producer writes to the failed-over partition.
    {
        let d = LogDir::open(&log_dir).expect("mirror dir");
        let mut p = d
            .open_partition(&tp("orders"), LogConfig::default())
            .expect("open");
        let epoch = p.epochs().latest_epoch().expect("an epoch");
        produce(&mut p, 10, epoch);
        assert_eq!(p.log_end_offset(), 50);
        p.close().expect("close");
    }
    // The local writes are cut on purpose (`guards.rs`: refused without).
    step(
        [
            &[
                "start",
                "--log-dir",
                log,
                "--topic",
                "orders",
                "--allow-truncate",
            ][..],
            &identity,
        ]
        .concat(),
        0,
    );
    step([&["once", "--log-dir", log][..], &identity].concat(), 0);
    let (_, status) = applier(&["status", "--log-dir", log, "--json"]);
    let status: serde_json::Value = serde_json::from_str(status.trim()).expect("json");
    assert_eq!(status["partitions"][0]["state"], "MIRRORING", "{status}");
    assert_eq!(
        status["partitions"][0]["local_log_end_offset"], 40,
        "the local write is cut: {status}"
    );
    eprintln!("{logs}");
    assert!(
        logs.contains("resum") && logs.contains("40"),
        "the cut is logged: {logs}"
    );
    for debug in ["None", "Some(", "[\"", " { ", "\x1b["] {
        assert!(
            !logs.contains(debug),
            "debug text {debug:?} in the logs: {logs}"
        );
    }
}
