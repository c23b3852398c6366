//! Operator commands that cannot hurt the mirror, through the binary:
//! `start` refuses to pin an identity it was not given, and the commands
//! that act on existing mirrors never create a mistyped log dir.

use std::process::Command;

fn applier(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(args)
        .env_remove("SEGMIRROR_BUCKET")
        .env_remove("SEGMIRROR_SOURCE_CLUSTER_ID")
        .env_remove("SEGMIRROR_APPLIER_CONFIG")
        .env("RUST_LOG", "error")
        .output()
        .expect("run applier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
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
}

/// `applier once` says a bucket problem the way `shipper once` does: one
/// line naming what was tried and the fix ([`manifest::diagnosis`]).
#[test]
fn once_on_a_bucket_that_does_not_exist_exits_1_naming_it_and_the_endpoint() {
    let Some(bucket) = segmirror_testkit::s3_test_bucket() else {
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
