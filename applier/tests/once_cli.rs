//! `applier once` never reports a success it did not have (issue 12): a
//! run that did nothing says what it found, and its exit code tells a
//! mistyped source, selection or bucket dir (2), and an unreachable bucket
//! (1, within `--store-timeout`), from a bucket still empty (0).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{SOURCE, file_bucket, produce, publish, topic_id, tp};
use kafkalog::{LogConfig, LogDir};

fn applier(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "error")
        .output()
        .expect("run applier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

/// A `file://` bucket where `SOURCE` shipped `orders` (40 records).
async fn shipped_bucket(dir: &Path) -> String {
    let source = dir.join("source");
    let (url, store) = file_bucket(&dir.join("bucket"));
    let d = LogDir::open(&source).expect("source");
    let mut log = d
        .open_or_create_partition(&tp("orders"), Some(topic_id()), LogConfig::default())
        .expect("create");
    produce(&mut log, 40, 3);
    log.close().expect("close");
    drop(d);
    publish(&store, &source, &tp("orders"), "u1").await;
    url
}

fn once(dest: &Path, bucket: &str, source: &str, topics: Option<&str>) -> (i32, String) {
    let dest = dest.to_str().expect("utf-8");
    let mut args = vec![
        "once",
        "--log-dir",
        dest,
        "--bucket",
        bucket,
        "--source-cluster-id",
        source,
    ];
    if let Some(t) = topics {
        args.extend(["--topics", t]);
    }
    applier(&args, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_tells_a_mistyped_source_or_selection_from_an_empty_bucket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("dest");
    // An empty bucket: the shipper may not have run yet.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("dir");
    let (code, out) = once(
        &dest,
        &format!("file://{}", empty.display()),
        SOURCE,
        Some(".*"),
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("the bucket is empty"), "{out}");

    let bucket = shipped_bucket(dir.path()).await;
    // A mistyped source cluster id.
    let (code, out) = once(&dest, &bucket, "src-clustr", Some(".*"));
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!("source clusters in the bucket: {SOURCE}")),
        "{out}"
    );
    assert!(out.contains("check --source-cluster-id"), "{out}");
    // A selection that matches none of the topics present.
    let (code, out) = once(&dest, &bucket, SOURCE, Some("order"));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("topics of src-cluster: orders"), "{out}");
    assert!(
        out.contains("selected by --topics/--exclude: none"),
        "{out}"
    );
    // No selection at all, and no mirror partition here.
    let (code, out) = once(&dest, &bucket, SOURCE, None);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("no --topics given"), "{out}");
    // A bucket dir that does not exist is not an empty bucket.
    let missing = format!("file://{}", dir.path().join("bukcet").display());
    let (code, out) = once(&dest, &missing, SOURCE, Some(".*"));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("is not a directory"), "{out}");
    assert!(out.contains("shipper init --bucket"), "{out}");
    assert!(!dir.path().join("bukcet").exists(), "nothing was created");
    // The right flags apply, and an idle run after it is still exit 0.
    let (code, out) = once(&dest, &bucket, SOURCE, Some(".*"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("applied 4 batches"), "{out}");
    let (code, out) = once(&dest, &bucket, SOURCE, None);
    assert_eq!(code, 0, "started mirrors need no --topics: {out}");
    assert!(out.contains("nothing to apply"), "{out}");
}

#[test]
fn once_gives_up_on_an_unreachable_bucket_within_the_store_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let dest = dir.path().join("dest");
    let started = Instant::now();
    let (code, out) = applier(
        &[
            "once",
            "--log-dir",
            dest.to_str().expect("utf-8"),
            "--bucket",
            "s3://segmirror-test/x",
            "--source-cluster-id",
            SOURCE,
            "--topics",
            ".*",
            "--store-timeout",
            "3s",
        ],
        &[
            ("AWS_ENDPOINT_URL", &endpoint),
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    let took = started.elapsed();
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("s3://segmirror-test/x"),
        "names the bucket: {out}"
    );
    assert!(
        took < Duration::from_secs(20),
        "gave up after {took:?}: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_prints_what_once_would_do_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("dest");
    std::fs::create_dir_all(&dest).expect("dest");
    let bucket = shipped_bucket(dir.path()).await;
    let d = dest.to_str().expect("utf-8");
    let args = [
        "plan",
        "--log-dir",
        d,
        "--bucket",
        &bucket,
        "--source-cluster-id",
        SOURCE,
        "--topics",
        ".*",
    ];
    let (code, out) = applier(&args, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("orders-0"), "{out}");
    assert!(out.contains("(new)"), "{out}");
    assert!(out.contains("fetch from 0"), "{out}");
    // A mistyped source: said, and exit 2.
    let mut typo = args.to_vec();
    typo[6] = "src-clustr";
    let (code, out) = applier(&typo, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("source clusters in the bucket: src-cluster"),
        "{out}"
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let (code, out) = applier(&json_args, &[]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(v["partitions"][0]["action"], "start");
    assert_eq!(v["partitions"][0]["plan"]["fetch_from"], 0);
    assert_eq!(
        std::fs::read_dir(&dest).expect("dest").count(),
        0,
        "plan wrote nothing to the log dir"
    );
}
