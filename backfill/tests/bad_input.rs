//! `backfill export` on bad input: every mistake is one clear line and the
//! exit code of the other binaries (2 usage or setup, or nothing to
//! export; 1 a failed partition or an unreachable store), never a panic or
//! a silent no-op.

mod common;

use common::*;

async fn world() -> (tempfile::TempDir, String, Expected) {
    let dir = tempfile::tempdir().expect("tmp");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    let expected = publish_all(store, "", &dir.path().join("source")).await;
    (dir, bucket, expected)
}

fn out(dir: &tempfile::TempDir) -> String {
    format!("file://{}", dir.path().join("out").display())
}

fn no_panic(run: &Run) {
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

#[tokio::test]
async fn an_unknown_cluster_names_the_clusters_in_the_bucket() {
    let (dir, bucket, _) = world().await;
    let run = backfill(&[
        "export",
        "--bucket",
        &bucket,
        "--source-cluster-id",
        "nope",
        "--topics",
        ".*",
        "--out",
        &out(&dir),
    ]);
    no_panic(&run);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("source cluster nope is not in the bucket")
            && run
                .stderr
                .contains(&format!("source clusters in the bucket: {SOURCE}")),
        "{}",
        run.stderr
    );
    assert!(!dir.path().join("out/_manifest.json").exists());
    // With --json, tools read the same on stdout.
    let run = backfill(&[
        "export",
        "--bucket",
        &bucket,
        "--source-cluster-id",
        "nope",
        "--topics",
        ".*",
        "--out",
        &out(&dir),
        "--json",
    ]);
    assert_eq!(run.code, 2, "{run:?}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("--json");
    assert_eq!(json["exit_code"], 2);
    assert!(
        json["error"]
            .as_str()
            .is_some_and(|e| e.contains("source cluster nope is not in the bucket")),
        "{json}"
    );
}

#[tokio::test]
async fn an_unknown_topic_or_partition_names_what_exists() {
    let (dir, bucket, _) = world().await;
    let run = export(&bucket, &out(&dir), &["--topics", "ordres"]);
    no_panic(&run);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("no live partition matches --topics ordres")
            && run.stderr.contains("orders, payments"),
        "{}",
        run.stderr
    );
    let run = export(
        &bucket,
        &out(&dir),
        &["--topics", "orders", "--partitions", "7-9"],
    );
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("--partitions 7-9")
            && run
                .stderr
                .contains("partitions of the matched topics: orders-0, orders-1"),
        "{}",
        run.stderr
    );
    let run = export(
        &bucket,
        &out(&dir),
        &["--topics", "orders", "--exclude", "orders"],
    );
    assert_eq!(run.code, 2, "{run:?}");
}

#[tokio::test]
async fn empty_and_dataless_windows_are_errors_that_say_what_exists() {
    let (dir, bucket, _) = world().await;
    let run = export(
        &bucket,
        &out(&dir),
        &[
            "--from-time",
            "2026-12-02T00:00:00Z",
            "--to-time",
            "2026-12-01T00:00:00Z",
        ],
    );
    no_panic(&run);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("empty time range"), "{}", run.stderr);

    let run = export(
        &bucket,
        &out(&dir),
        &["--from-offset", "9", "--to-offset", "3"],
    );
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("empty offset range"), "{}", run.stderr);

    let run = export(&bucket, &out(&dir), &["--from-time", "yesterday"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("--from-time \"yesterday\""),
        "{}",
        run.stderr
    );

    // A window after every record: nothing exported, exit 2, the span named.
    let run = export(
        &bucket,
        &out(&dir),
        &["--from-time", "2030-01-01T00:00:00Z"],
    );
    no_panic(&run);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("no record matched"), "{}", run.stderr);
    let run = export(
        &bucket,
        &out(&dir),
        &[
            "--topics",
            "orders",
            "--partitions",
            "0",
            "--to-time",
            "2020-01-01T00:00:00Z",
        ],
    );
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("the records read span offsets 0..=")
            && run.stderr.contains("2023-11-14T22:13:20"),
        "{}",
        run.stderr
    );
    let run = export(&bucket, &out(&dir), &["--from-offset", "100000"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("no record was read"), "{}", run.stderr);
}

#[tokio::test]
async fn usage_and_setup_errors_exit_2() {
    let (dir, bucket, _) = world().await;
    for (args, says) in [
        (vec!["--shard", "2/2"], "not a shard"),
        (vec!["--partitions", "x"], "partition numbers"),
        (vec!["--isolation", "dirty"], "read_committed"),
        (vec!["--topics", "("], "invalid regex"),
        (
            vec!["--from-offset", "1", "--from-time", "1"],
            "cannot be used with",
        ),
    ] {
        let run = export(&bucket, &out(&dir), &args);
        no_panic(&run);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
    let missing = format!("file://{}", dir.path().join("no-such-bucket").display());
    let run = export(&missing, &out(&dir), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("is not a directory"), "{}", run.stderr);
    let run = backfill_env(
        &[
            "export",
            "--bucket",
            &bucket,
            "--source-cluster-id",
            SOURCE,
            "--topics",
            ".*",
            "--out",
            &out(&dir),
        ],
        &[("JOB_COMPLETION_INDEX", "1")],
    );
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("JOB_COMPLETION_COUNT"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn a_shard_without_partitions_says_so_and_succeeds() {
    let (dir, bucket, _) = world().await;
    // Three partitions over 64 shards: most shards have none.
    let empty = (0..64)
        .find(|&i| {
            let s = backfill::select::Shard {
                index: i,
                count: 64,
            };
            !common::partitions()
                .iter()
                .any(|tp| s.owns(&tp.topic, tp.partition))
        })
        .expect("an empty shard");
    let shard = format!("{empty}/64");
    let run = export(&bucket, &out(&dir), &["--shard", &shard]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stderr
            .contains("none of the 3 selected partitions is this shard's"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn an_unreachable_store_fails_within_the_store_timeout() {
    let dir = tempfile::tempdir().expect("tmp");
    let started = std::time::Instant::now();
    let run = backfill_env(
        &[
            "export",
            "--bucket",
            "s3://segmirror-nowhere/x",
            "--source-cluster-id",
            SOURCE,
            "--topics",
            ".*",
            "--out",
            &out(&dir),
            "--store-timeout",
            "3s",
        ],
        &[
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
            ("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9"),
        ],
    );
    no_panic(&run);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("127.0.0.1:9") && run.stderr.lines().count() <= 3,
        "{}",
        run.stderr
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test]
async fn a_corrupt_object_is_named_with_its_batch_and_its_file_is_not_written() {
    let (dir, bucket, _) = world().await;
    // Damage the second object of orders-0 (its second segment).
    let data_dir = dir
        .path()
        .join("bucket/segmirror/v1")
        .join(SOURCE)
        .join("topics/orders");
    let mut objects = Vec::new();
    for e in walk(&data_dir) {
        if e.extension().is_some_and(|x| x == "batches") && e.to_string_lossy().contains("/0/data/")
        {
            objects.push(e);
        }
    }
    objects.sort();
    let victim = objects.get(1).expect("a second object").clone();
    let mut bytes = std::fs::read(&victim).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&victim, bytes).expect("write");

    let run = export(&bucket, &out(&dir), &["--json"]);
    no_panic(&run);
    assert_eq!(run.code, 1, "{run:?}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("--json");
    assert_eq!(json["failures"][0]["partition"], "orders-0");
    assert_eq!(json["failures"][0]["corrupt"], true);
    assert_eq!(json["failures"][0]["retryable"], false);
    let name = victim
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        run.stderr.contains(&name) && run.stderr.contains("first bad batch at offset"),
        "{}",
        run.stderr
    );
    let files = files_under(&dir.path().join("out"));
    let orders0: Vec<&String> = files
        .keys()
        .filter(|k| k.starts_with("topic=orders/partition=0/"))
        .collect();
    assert_eq!(
        orders0.len(),
        1,
        "only the first segment's file: {orders0:?}"
    );
    assert!(
        run.stderr.contains("is not written"),
        "the file it feeds is named: {}",
        run.stderr
    );
    assert!(
        files.keys().any(|k| k.starts_with("topic=payments/")),
        "other partitions go on"
    );
    assert!(
        !files.contains_key("_manifest.json"),
        "no run manifest after a failure"
    );
    assert!(
        run.stderr.contains("run the same command again"),
        "{}",
        run.stderr
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Every example line of every `--help` parses (pasteable as it is).
#[test]
fn every_help_example_parses() {
    for sub in [
        &["--help"][..],
        &["export", "--help"],
        &["restore", "--help"],
    ] {
        let run = backfill(sub);
        assert_eq!(run.code, 0, "{run:?}");
        let examples: Vec<&str> = run
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| {
                l.starts_with("backfill ")
                    || (l.starts_with("JOB_COMPLETION_INDEX=") && l.contains(" backfill "))
            })
            .collect();
        assert!(!examples.is_empty(), "{sub:?} has examples");
        for line in examples {
            // Words as a shell splits them (no quoted example argument
            // holds a space).
            let words: Vec<String> = line
                .split_whitespace()
                .skip_while(|w| *w != "backfill")
                .skip(1)
                .map(|w| w.trim_matches('\'').to_string())
                .collect();
            let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
            args.push("--help");
            let run = backfill(&args);
            assert_eq!(run.code, 0, "{line}: {}", run.stderr);
        }
    }
}
