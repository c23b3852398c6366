//! A mistyped bucket is not a new bucket, through the binary: `shipper
//! once` and `run` refuse a bucket never set up for their cluster (exit 2,
//! one line naming the bucket, what was found and both ways out, nothing
//! created), ship with `--create-bucket`, and ship after `shipper init`,
//! which says what it did and is idempotent. On `file://` always; on S3
//! with the test server (without it these fail, unless `SEGMIRROR_SKIP_S3=1`
//! skips them).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::shipper_cli as shipper;
use common::*;
use futures::TryStreamExt;
use kafkalog::LogDir;

fn source(root: &Path) -> String {
    let dir = LogDir::open(root).expect("log dir");
    let mut log = open_log(&dir, &tp("orders", 0), topic_id(1), 4096);
    append_n(&mut log, 10, 3, 0, 100);
    log.close().expect("close");
    root.to_str().expect("utf-8").to_string()
}

fn once(logs: &str, bucket: &str, cluster: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "once",
        "--log-dir",
        logs,
        "--bucket",
        bucket,
        "--cluster-id",
        cluster,
    ];
    args.extend_from_slice(extra);
    shipper(&args)
}

/// The refusal: exit 2, one line, naming the bucket, what was found and
/// both ways out.
fn assert_refused(code: i32, err: &str, bucket: &str, cluster: &str, found: &str) {
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    for want in [
        format!("shipper: error: bucket {bucket}: {found}"),
        format!("`shipper init --bucket {bucket} --cluster-id {cluster}`"),
        "--create-bucket".to_string(),
    ] {
        assert!(err.contains(&want), "{want:?} not in {err}");
    }
}

#[test]
fn a_file_bucket_is_created_only_when_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = source(&dir.path().join("logs"));
    let root = dir.path().join("bucket");
    let url = format!("file://{}", root.display());

    // A new directory: refused, nothing created.
    let (code, _, err) = once(&logs, &url, "src", &[]);
    assert_refused(code, &err, &url, "src", "no such directory");
    assert!(!root.exists(), "the bucket directory was created");

    // --create-bucket: shipped, and set up for the next run.
    let (code, _, err) = once(&logs, &url, "src", &["--create-bucket"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 manifest versions"), "{err}");
    assert!(root.join("segmirror/v1/src/cluster.json").is_file());
    let (code, _, err) = once(&logs, &url, "src", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("shipped nothing"), "{err}");

    // A typo'd path next to the real bucket: refused, nothing created.
    let typo = dir.path().join("bukcet");
    let typo_url = format!("file://{}", typo.display());
    let (code, _, err) = once(&logs, &typo_url, "src", &[]);
    assert_refused(code, &err, &typo_url, "src", "no such directory");
    assert!(!typo.exists(), "the typo'd bucket was created");

    // A mistyped cluster id in the real bucket: refused, naming the
    // cluster that is there; nothing written.
    let (code, _, err) = once(&logs, &url, "srx", &[]);
    assert_refused(code, &err, &url, "srx", "empty prefix");
    assert!(err.contains("the bucket holds clusters src"), "{err}");
    assert!(!root.join("segmirror/v1/srx").exists());

    // An existing, empty directory is not set up either.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let empty_url = format!("file://{}", empty.display());
    let (code, _, err) = once(&logs, &empty_url, "src", &[]);
    assert_refused(code, &err, &empty_url, "src", "empty prefix");
    assert_eq!(std::fs::read_dir(&empty).expect("dir").count(), 0);
}

#[test]
fn init_sets_up_a_bucket_once_and_says_what_it_did() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = source(&dir.path().join("logs"));
    let root = dir.path().join("bucket");
    let url = format!("file://{}", root.display());
    let (code, out, err) = shipper(&["init", "--bucket", &url, "--cluster-id", "src"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("created: "), "{out}");
    assert!(out.contains("segmirror/v1/src/cluster.json"), "{out}");
    let marker = root.join("segmirror/v1/src/cluster.json");
    let first = std::fs::read(&marker).expect("marker");
    let (code, out, err) = shipper(&["init", "--bucket", &url, "--cluster-id", "src"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("already there: ") && out.contains("nothing written"),
        "{out}"
    );
    assert_eq!(std::fs::read(&marker).expect("marker"), first, "rewritten");
    let (code, _, err) = once(&logs, &url, "src", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 manifest versions"), "{err}");
    // A bucket shipped into says so too (its data, here with the marker).
    let (code, out, _) = shipper(&["init", "--bucket", &url, "--cluster-id", "src"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("already there: "), "{out}");
    // From the file `run` uses: another cluster in the same bucket.
    let toml = dir.path().join("shipper.toml");
    std::fs::write(
        &toml,
        format!("bucket = \"{url}\"\ncluster_id = \"other\"\n"),
    )
    .expect("write");
    let (code, out, err) = shipper(&["init", "--config", toml.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("created: ") && out.contains("cluster other"),
        "{out}"
    );
    assert!(root.join("segmirror/v1/other/cluster.json").is_file());
    // Usage errors: exit 2.
    let (code, _, err) = shipper(&["init", "--bucket", &url]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no cluster id"), "{err}");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    let (code, _, err) = shipper(&[
        "init",
        "--bucket",
        &format!("file://{}", file.display()),
        "--cluster-id",
        "src",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a directory"), "{err}");
}

#[test]
fn run_refuses_a_new_bucket_before_it_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = source(&dir.path().join("logs"));
    let root = dir.path().join("bukcet");
    let url = format!("file://{}", root.display());
    let started = Instant::now();
    let (code, _, err) = shipper(&[
        "run",
        "--log-dir",
        &logs,
        "--bucket",
        &url,
        "--cluster-id",
        "src",
    ]);
    assert_refused(code, &err, &url, "src", "no such directory");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(!root.exists());
}

/// Every key under `url` (an s3:// URL), through object_store.
fn s3_keys(url: &str) -> Vec<String> {
    let bucket = bucket::url::BucketUrl::parse(url).expect("url");
    let store = bucket.build().expect("store");
    let prefix = object_store::path::Path::from(bucket.prefix());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            store
                .list(Some(&prefix))
                .map_ok(|m| m.location.to_string())
                .try_collect::<Vec<_>>()
                .await
        })
        .expect("list")
}

#[test]
fn an_empty_s3_prefix_is_started_only_when_asked() {
    let Some(name) = segmirror_testkit::needs::s3() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = source(&dir.path().join("logs"));
    let run = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos()
    );
    let url = format!("s3://{name}/init-{run}/real");
    let (code, _, err) = once(&logs, &url, "src", &[]);
    assert_refused(code, &err, &url, "src", "empty prefix");
    assert!(s3_keys(&url).is_empty(), "written: {:?}", s3_keys(&url));

    let (code, _, err) = once(&logs, &url, "src", &["--create-bucket"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 manifest versions"), "{err}");
    assert!(
        s3_keys(&url)
            .iter()
            .any(|k| k.ends_with("/segmirror/v1/src/cluster.json")),
        "{:?}",
        s3_keys(&url)
    );
    let (code, _, err) = once(&logs, &url, "src", &[]);
    assert_eq!(code, 0, "{err}");

    // A typo'd prefix next to the real one: refused, nothing written.
    let typo = format!("s3://{name}/init-{run}/raal");
    let (code, _, err) = once(&logs, &typo, "src", &[]);
    assert_refused(code, &err, &typo, "src", "empty prefix");
    assert!(s3_keys(&typo).is_empty());

    // A mistyped cluster id: refused, naming the cluster there.
    let (code, _, err) = once(&logs, &url, "srx", &[]);
    assert_refused(code, &err, &url, "srx", "empty prefix");
    assert!(err.contains("the bucket holds clusters src"), "{err}");

    // shipper init on another prefix: created, then already there; once
    // then ships without the flag.
    let other = format!("s3://{name}/init-{run}/other");
    let (code, out, err) = shipper(&["init", "--bucket", &other, "--cluster-id", "src"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("created: "), "{out}");
    let (code, out, err) = shipper(&["init", "--bucket", &other, "--cluster-id", "src"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("already there: "), "{out}");
    let (code, _, err) = once(&logs, &other, "src", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 manifest versions"), "{err}");
}
