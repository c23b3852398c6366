//! `kraft metadata` and `kafkalog metadata` through the binaries, over a
//! metadata log written by the independent encoder.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

fn run(bin: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin).args(args).output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn kraft() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kraft"))
}

/// The `kafkalog` binary, built now into this test's target dir (next to
/// `kraft`), as `segmirror-reliability`'s `Bins` builds the services.
fn kafkalog() -> PathBuf {
    let profile_dir = kraft().parent().expect("profile dir").to_path_buf();
    let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["build", "--quiet", "-p", "kafkalog", "--bin", "kafkalog"])
        .arg("--target-dir")
        .arg(&target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    assert!(
        cmd.status().expect("cargo build").success(),
        "building kafkalog"
    );
    profile_dir.join("kafkalog")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A snapshot (MV 19, topic orders with 2 partitions, a config, a broker)
/// then a log: a leader move, a cluster default, a deletion of "old".
fn write_cluster(dir: &Path) -> MetaLog {
    let mut log = MetaLog::create(dir, 2);
    log.next_offset = 10;
    log.segment = 0;
    log.write_snapshot(
        10,
        3,
        &[
            vec![feature("metadata.version", 19)],
            vec![
                register_broker(3, 2, 7, false, &[id(70)]),
                topic("orders", id(1)),
                partition(
                    1,
                    id(1),
                    0,
                    &[1, 2, 3],
                    &[1, 2, 3],
                    1,
                    4,
                    6,
                    &[id(70), id(71), id(72)],
                ),
                partition(
                    1,
                    id(1),
                    1,
                    &[2, 3, 1],
                    &[2, 3],
                    2,
                    0,
                    0,
                    &[id(71), id(72), id(70)],
                ),
                topic("old", id(5)),
                partition(1, id(5), 0, &[2], &[2], 2, 0, 0, &[id(70)]),
                config(2, "orders", "cleanup.policy", Some("compact")),
                config(2, "orders", "retention.ms", Some("-1")),
            ],
        ],
    );
    log.segment = 10;
    log.append(
        3,
        &[change(
            0,
            id(1),
            0,
            &[("Leader", V::Int(2)), ("Isr", ints(&[2, 3]))],
        )],
    );
    log.append(3, &[config(4, "", "log.retention.ms", Some("604800000"))]);
    log.append(3, &[remove_topic(id(5))]);
    log.append(3, &[change(0, id(1), 1, &[("Leader", V::Int(-1))])]);
    log
}

#[test]
fn kraft_metadata_prints_topics_partitions_configs_and_position() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_cluster(tmp.path());
    let (code, out, err) = run(&kraft(), &["metadata", "--log-dir", s(tmp.path())]);
    assert_eq!(code, 0, "{out}\n{err}");
    for want in [
        "node 2 cluster Mk3OEYBSD34fcwNTJENDM2Qk directory 7Wc5c1XaQ8GhdAFCtW3Hqw",
        "metadata applied up to offset 13 epoch 3 (next offset 14; snapshot 00000000000000000010-0000000003.checkpoint; metadata.version 19)",
        &format!(
            "topic orders id {} configs cleanup.policy=compact retention.ms=-1",
            id(1)
        ),
        "  orders-0 leader 2 leader-epoch 5 partition-epoch 7 replicas [1,2,3] isr [2,3]",
        "  orders-1 leader -1 leader-epoch 1 partition-epoch 1 replicas [2,3,1] isr [2,3] last-leader 2 (leader-epoch 0)",
        "cluster defaults log.retention.ms=604800000",
        &format!("deleted topic old id {} at offset 12", id(5)),
        "all records understood",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!out.lines().any(|l| l.starts_with("topic old ")), "{out}");
}

#[test]
fn kraft_metadata_json_has_the_same_state() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_cluster(tmp.path());
    let (code, out, err) = run(
        &kraft(),
        &["metadata", "--log-dir", s(tmp.path()), "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let p0 = &v["topics"]["orders"]["partitions"]["0"];
    assert_eq!(p0["leader"], 2);
    assert_eq!(p0["leader_epoch"], 5);
    assert_eq!(p0["isr"], serde_json::json!([2, 3]));
    assert_eq!(p0["directories"][1], id(71).to_string());
    assert_eq!(p0["untrusted"], serde_json::Value::Null);
    assert_eq!(v["topics"]["orders"]["id"], id(1).to_string());
    assert_eq!(
        v["topics"]["orders"]["configs"]["cleanup.policy"],
        "compact"
    );
    assert_eq!(v["cluster_configs"]["log.retention.ms"], "604800000");
    assert_eq!(v["metadata_version"], 19);
    assert_eq!(v["applied"]["offset"], 13);
    assert_eq!(v["next_offset"], 14);
    let p1 = &v["topics"]["orders"]["partitions"]["1"];
    assert_eq!(
        (&p1["leader"], &p1["last_leader"]["id"]),
        (&(-1).into(), &2.into())
    );
    assert_eq!(v["meta_properties"]["node_id"], 2);
    assert_eq!(v["snapshot"]["end_offset"], 10);
    assert_eq!(v["deleted_topics"][0]["name"], "old");
    assert_eq!(v["untrusted"], serde_json::json!([]));
}

#[test]
fn untrusted_partitions_are_shown_and_exit_1() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = write_cluster(tmp.path());
    // PartitionChangeRecord v9 for orders-1.
    let mut body = id(1).as_bytes().to_vec();
    body.splice(0..0, 1i32.to_be_bytes());
    body.push(0);
    log.append(3, &[frame(5, 9, &body)]);
    let (code, out, _) = run(&kraft(), &["metadata", "--log-dir", s(tmp.path())]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("orders-1 leader -1"), "{out}");
    assert!(
        out.contains("UNTRUSTED (record apiKey 5 at version 9"),
        "{out}"
    );
    let p0 = out
        .lines()
        .find(|l| l.contains("orders-0 "))
        .expect("orders-0");
    assert!(!p0.contains("UNTRUSTED"), "{out}");
    let (code, out, _) = run(
        &kraft(),
        &["metadata", "--log-dir", s(tmp.path()), "--json"],
    );
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert!(v["topics"]["orders"]["partitions"]["1"]["untrusted"].is_string());
    assert!(v["topics"]["orders"]["partitions"]["0"]["untrusted"].is_null());
}

#[test]
fn setup_errors_exit_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("nope");
    let (code, _, err) = run(&kraft(), &["metadata", "--log-dir", s(&missing)]);
    assert_eq!(code, 2);
    assert!(err.contains("does not exist"), "{err}");
    // A plain (ZooKeeper-mode) log dir: no metadata log.
    let (code, _, err) = run(&kraft(), &["metadata", "--log-dir", s(tmp.path())]);
    assert_eq!(code, 2);
    assert!(err.contains("no metadata log"), "{err}");
    // A corrupt snapshot.
    let log = MetaLog::create(tmp.path(), 1);
    std::fs::write(
        log.dir.join("00000000000000000005-0000000001.checkpoint"),
        b"garbage",
    )
    .expect("write");
    let (code, _, err) = run(&kraft(), &["metadata", "--log-dir", s(tmp.path())]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("snapshot"), "{err}");
}

#[test]
fn kafkalog_metadata_runs_kraft_metadata() {
    let kafkalog = kafkalog();
    let tmp = tempfile::tempdir().expect("tempdir");
    write_cluster(tmp.path());
    let direct = run(
        &kraft(),
        &["metadata", "--log-dir", s(tmp.path()), "--json"],
    );
    let via = run(
        &kafkalog,
        &["metadata", "--log-dir", s(tmp.path()), "--json"],
    );
    assert_eq!(via.0, 0, "{}", via.2);
    assert_eq!(via.1, direct.1);
    let (code, out, _) = run(&kafkalog, &["metadata", "--log-dir", s(tmp.path())]);
    assert_eq!(code, 0);
    assert!(out.contains("orders-0 leader 2"), "{out}");
    let (code, _, _) = run(
        &kafkalog,
        &["metadata", "--log-dir", s(&tmp.path().join("nope"))],
    );
    assert_eq!(code, 2);
}

#[test]
fn no_help_line_repeats_an_env_or_a_default() {
    let repeated = segmirror_testkit::help::repeated_annotations(&kraft());
    assert!(repeated.is_empty(), "{repeated:#?}");
    let (code, out, _) = run(&kraft(), &["metadata", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--log-dir") && out.contains("--json"), "{out}");
}
