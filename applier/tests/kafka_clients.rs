//! The Kafka gateway with stock clients nobody here wrote: kcat (Debian's
//! librdkafka), confluent-kafka (its bundled librdkafka), kafka-python and
//! aiokafka, driven by `tests/fixtures/kafka_clients.py`.
//!
//! - A genuine Kafka log dir (written by kafka-python's record builder,
//!   `tests/fixtures/gen_kafka_logdir.py`) served by `applier serve`: every
//!   client reads each partition's records with the offsets, keys and values
//!   the generator recorded; read_committed skips the aborted transactions.
//! - A mirror under `applier run --kafka-listen`: every client reads every
//!   mirrored record; every producer is refused on MIRRORING and on PAUSED
//!   (the log unchanged) and accepted after `applier stop`, at an epoch above
//!   the LME.
//!
//! kcat and the Python clients must be installed (`bash scripts/test.sh`
//! installs them); without them these tests fail, unless
//! `SEGMIRROR_SKIP_KCAT=1` or `SEGMIRROR_SKIP_PYTHON=1` skips them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use common::clients::{
    Running, applier, client, clients_present, free_port, offsets_records_read_by_kafka_python,
    serve, wait_for_port,
};
use common::{SOURCE, file_bucket, publish, topic_id, tp};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::reader::PartitionReader;
use kafkalog::{LogConfig, LogDir};
use serde_json::Value;

const CLIENTS: [&str; 4] = ["kcat", "confluent-kafka", "kafka-python", "aiokafka"];

fn consume(who: &str, port: u16, topic: &str, partition: i32, from: i64, isolation: &str) -> Value {
    client(&[
        "consume",
        "--client",
        who,
        "--bootstrap",
        &format!("127.0.0.1:{port}"),
        "--topic",
        topic,
        "--partition",
        &partition.to_string(),
        "--offset",
        &from.to_string(),
        "--isolation",
        isolation,
    ])
}

fn produce(who: &str, port: u16, topic: &str, value: &str) -> Value {
    produce_with(who, port, topic, value, false)
}

fn produce_with(who: &str, port: u16, topic: &str, value: &str, idempotent: bool) -> Value {
    let bootstrap = format!("127.0.0.1:{port}");
    let mut args = vec![
        "produce",
        "--client",
        who,
        "--bootstrap",
        &bootstrap,
        "--topic",
        topic,
        "--value",
        value,
    ];
    if idempotent {
        args.push("--idempotent");
    }
    client(&args)
}

/// (offset, key, value) as base64, as the driver prints them.
fn triples(records: &Value) -> Vec<(i64, Option<String>, Option<String>)> {
    records
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            (
                r["offset"].as_i64().expect("offset"),
                r["key"].as_str().map(str::to_string),
                r["value"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// What a consumer of `partition` (from expected.json) must read.
fn expected_records(
    partition: &Value,
    read_committed: bool,
) -> Vec<(i64, Option<String>, Option<String>)> {
    let start = partition["log_start_offset"].as_i64().expect("start");
    let aborted: Vec<(i64, i64, i64)> = partition["aborted_transactions"]
        .as_array()
        .expect("aborted")
        .iter()
        .map(|t| {
            (
                t["producer_id"].as_i64().expect("pid"),
                t["first_offset"].as_i64().expect("first"),
                t["last_offset"].as_i64().expect("last"),
            )
        })
        .collect();
    let mut out = Vec::new();
    for b in partition["batches"].as_array().expect("batches") {
        if b["is_control"].as_bool() == Some(true) {
            continue;
        }
        let pid = b["producer_id"].as_i64().expect("pid");
        for r in b["records"].as_array().expect("records") {
            let offset = r["offset"].as_i64().expect("offset");
            if offset < start {
                continue;
            }
            let in_aborted = b["is_transactional"].as_bool() == Some(true)
                && aborted
                    .iter()
                    .any(|&(p, first, last)| p == pid && (first..=last).contains(&offset));
            if read_committed && in_aborted {
                continue;
            }
            out.push((
                offset,
                r["key"].as_str().map(str::to_string),
                r["value"].as_str().map(str::to_string),
            ));
        }
    }
    out
}

#[test]
fn stock_clients_read_a_genuine_kafka_log_dir_and_read_committed_skips_aborted_transactions() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("kafka");
    let expected = segmirror_testkit::kafka_python::generate_kafka_logdir(&logs)
        .expect("checked by clients_present()");
    let port = free_port();
    let _serve = serve(&logs, port, &[]);
    for partition in expected["partitions"].as_array().expect("partitions") {
        let topic = partition["topic"].as_str().expect("topic");
        let p = partition["partition"].as_i64().expect("partition") as i32;
        let start = partition["log_start_offset"].as_i64().expect("start");
        let has_aborted = !partition["aborted_transactions"]
            .as_array()
            .expect("aborted")
            .is_empty();
        // read_committed differs only where transactions were aborted.
        let isolations: &[&str] = if has_aborted {
            &["read_uncommitted", "read_committed"]
        } else {
            &["read_uncommitted"]
        };
        for &isolation in isolations {
            let want = expected_records(partition, isolation == "read_committed");
            for who in CLIENTS {
                // kcat prints keys and values as text: it is compared on the
                // partitions whose records are all UTF-8, by offset elsewhere.
                let got = consume(who, port, topic, p, start, isolation);
                assert!(got["error"].is_null(), "{who} {topic}-{p}: {got}");
                let got = triples(&got["records"]);
                if who == "kcat" && topic != "events" {
                    let offsets: Vec<i64> = got.iter().map(|r| r.0).collect();
                    let want: Vec<i64> = want.iter().map(|r| r.0).collect();
                    assert_eq!(offsets, want, "{who} {isolation} {topic}-{p} offsets");
                } else {
                    assert_eq!(got, want, "{who} {isolation} {topic}-{p}");
                }
            }
            if has_aborted && isolation == "read_committed" {
                let all = expected_records(partition, false);
                assert!(want.len() < all.len(), "the fixture has aborted records");
            }
        }
    }
}

/// The source of the mirror: `orders-0`, 120 records `value-<i>` in
/// batches of 10 at epoch 3.
async fn mirrored(dir: &Path) -> (PathBuf, String, Vec<String>) {
    let source = dir.join("source");
    let (url, store) = file_bucket(&dir.join("bucket"));
    let d = LogDir::open(&source).expect("source");
    let mut log = d
        .open_or_create_partition(&tp("orders"), Some(topic_id()), LogConfig::default())
        .expect("create");
    let values: Vec<String> = (0..120).map(|i| format!("value-{i}")).collect();
    for chunk in values.chunks(10) {
        let records: Vec<RecordInput> = chunk
            .iter()
            .map(|v| RecordInput {
                timestamp: 1_700_000_000_000,
                key: Some(b"k".to_vec()),
                value: Some(v.clone().into_bytes()),
                headers: vec![],
            })
            .collect();
        let mut b = build_batch(&BatchSpec::new(0, 3), &records).expect("batch");
        log.append_as_leader(&mut b, 3).expect("append");
    }
    log.close().expect("close");
    drop(d);
    publish(&store, &source, &tp("orders"), "u1").await;
    (dir.join("mirror"), url, values)
}

fn log_end(mirror: &Path) -> i64 {
    let reader = PartitionReader::open(mirror, &tp("orders")).expect("reader");
    reader
        .for_each_batch(0, true, |_, _| std::ops::ControlFlow::Continue(()))
        .expect("walk")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_is_read_by_every_client_and_written_only_after_stop() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (mirror, url, values) = mirrored(dir.path()).await;
    let m = mirror.to_str().expect("utf-8");
    let identity = ["--bucket", url.as_str(), "--source-cluster-id", SOURCE];
    let (code, out) = applier(
        &[
            &["once", "--log-dir", m, "--topics", "orders"][..],
            &identity,
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{out}");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _daemon = Running(
        Command::new(env!("CARGO_BIN_EXE_applier"))
            .args(
                [
                    &[
                        "run",
                        "--log-dir",
                        m,
                        "--topics",
                        "orders",
                        "--poll-interval",
                        "200ms",
                        "--kafka-listen",
                        &listen,
                    ][..],
                    &identity,
                ]
                .concat(),
            )
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("applier run"),
    );
    wait_for_port(port);

    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let want: Vec<(i64, Option<String>, Option<String>)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i64, Some(b64("k")), Some(b64(v))))
        .collect();
    for who in CLIENTS {
        let got = consume(who, port, "orders", 0, 0, "read_committed");
        assert!(got["error"].is_null(), "{who}: {got}");
        assert_eq!(
            triples(&got["records"]),
            want,
            "{who} reads every mirrored record"
        );
    }

    // Refused while MIRRORING, then while PAUSED: at once, permanently, the
    // log unchanged.
    for state in ["MIRRORING", "PAUSED"] {
        if state == "PAUSED" {
            let (code, out) = applier(&["pause", "--log-dir", m, "--topic", "orders"]);
            assert_eq!(code, 0, "{out}");
        }
        for who in CLIENTS {
            let r = produce(who, port, "orders", &format!("refused-{who}"));
            eprintln!("{who} on {state}: {r}");
            assert_eq!(r["ok"], false, "{who} on {state}: {r}");
            let error = r["error"].as_str().unwrap_or_default().to_lowercase();
            assert!(
                error.contains("policy") || error.contains("policyviolation"),
                "{who} on {state} shows the policy violation: {r}"
            );
            assert!(
                r["seconds"].as_f64().unwrap_or(99.0) < 15.0,
                "{who} gave up at once, no retry loop: {r}"
            );
            if who == "confluent-kafka" {
                assert_eq!(r["code"], 44, "{r}");
                assert_eq!(r["retriable"], false, "{r}");
            }
            if who == "kafka-python" {
                assert!(
                    error.contains(&format!("state {}", state.to_lowercase()))
                        && error.contains("applier stop"),
                    "the message names the state and the command: {r}"
                );
            }
        }
        // An idempotent producer (kafka-python 3's default) gets its id,
        // then the same refusal.
        let r = produce_with("kafka-python", port, "orders", "refused-idempotent", true);
        assert_eq!(r["ok"], false, "{r}");
        assert!(
            r["error"]
                .as_str()
                .unwrap_or_default()
                .contains("PolicyViolation"),
            "{r}"
        );
        assert_eq!(log_end(&mirror), 120, "refused writes change nothing");
    }

    let (code, out) = applier(&["stop", "--log-dir", m, "--all"]);
    assert_eq!(code, 0, "{out}");
    for who in CLIENTS {
        let r = produce(who, port, "orders", &format!("after-stop-{who}"));
        assert_eq!(r["ok"], true, "{who} after stop: {r}");
    }
    for who in ["confluent-kafka", "kafka-python", "aiokafka"] {
        let r = produce_with(who, port, "orders", &format!("idempotent-{who}"), true);
        assert_eq!(r["ok"], true, "{who}, idempotent, after stop: {r}");
    }
    let got = consume("kafka-python", port, "orders", 0, 120, "read_uncommitted");
    let written: Vec<String> = triples(&got["records"])
        .into_iter()
        .filter_map(|(_, _, v)| v)
        .filter_map(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .collect();
    for who in CLIENTS {
        assert!(
            written.contains(&format!("after-stop-{who}")),
            "{who}'s record is in the log: {written:?}"
        );
    }
    assert_eq!(written.len(), 7, "one record per producer: {written:?}");

    // The producers' batches carry the epoch above the LME.
    let record = partdir::record::read(&mirror.join("orders-0"))
        .expect("record")
        .expect("a mirror record");
    let lme = record.lme.expect("an LME after stop");
    let reader = PartitionReader::open(&mirror, &tp("orders")).expect("reader");
    let mut epochs = Vec::new();
    reader
        .for_each_batch(120, true, |h, _| {
            if !h.is_control() {
                epochs.push(h.partition_leader_epoch);
            }
            std::ops::ControlFlow::Continue(())
        })
        .expect("walk");
    assert_eq!(epochs.len(), 7, "{epochs:?}");
    assert!(
        epochs.iter().all(|&e| e > lme),
        "epochs {epochs:?} above the LME {lme}"
    );
}

/// A log dir with `topic`-0 holding `values`, `per_batch` records a batch,
/// at epoch 0.
fn write_log(logs: &Path, topic: &str, values: &[String], per_batch: usize) {
    let d = LogDir::open(logs).expect("log dir");
    let mut log = d
        .open_or_create_partition(&tp(topic), Some(topic_id()), LogConfig::default())
        .expect("create");
    for chunk in values.chunks(per_batch) {
        let records: Vec<RecordInput> = chunk
            .iter()
            .map(|v| RecordInput {
                timestamp: 1_700_000_000_000,
                key: None,
                value: Some(v.clone().into_bytes()),
                headers: vec![],
            })
            .collect();
        let mut b = build_batch(&BatchSpec::new(0, 0), &records).expect("batch");
        log.append_as_leader(&mut b, 0).expect("append");
    }
    log.close().expect("close");
}

fn group_run(who: &str, port: u16, topic: &str, group: &str, max: usize) -> Vec<i64> {
    let r = client(&[
        "group",
        "--client",
        who,
        "--bootstrap",
        &format!("127.0.0.1:{port}"),
        "--topic",
        topic,
        "--group",
        group,
        "--max",
        &max.to_string(),
    ]);
    assert!(r["error"].is_null(), "{who} in group {group}: {r}");
    triples(&r["records"]).into_iter().map(|t| t.0).collect()
}

#[test]
fn consumer_groups_commit_restart_and_resume_at_their_offsets_with_every_client() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    let values: Vec<String> = (0..60).map(|i| format!("e{i}")).collect();
    write_log(&logs, "events", &values, 5);
    let port = free_port();
    let mut server = serve(&logs, port, &[]);
    for who in CLIENTS {
        let group = format!("resume-{who}");
        assert_eq!(
            group_run(who, port, "events", &group, 20),
            (0..20).collect::<Vec<_>>(),
            "{who} first run"
        );
        assert_eq!(
            group_run(who, port, "events", &group, 20),
            (20..40).collect::<Vec<_>>(),
            "{who} resumes"
        );
    }
    // The offsets are in __consumer_offsets, as Kafka keeps them: they
    // survive a restart of the server.
    drop(server);
    server = serve(&logs, port, &[]);
    for who in CLIENTS {
        let group = format!("resume-{who}");
        assert_eq!(
            group_run(who, port, "events", &group, 20),
            (40..60).collect::<Vec<_>>(),
            "{who} after a restart"
        );
        let partition = gateway::groups::offsets_topic::partition_for(&group);
        assert!(
            logs.join(format!("__consumer_offsets-{partition}"))
                .is_dir(),
            "{group}'s offsets are in Kafka's partition {partition}"
        );
    }
    drop(server);
    // `applier groups` lists them with their lag: every group read 60 of 60.
    let (code, out) = applier(&[
        "groups",
        "--log-dir",
        logs.to_str().expect("utf-8"),
        "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    let listed: Value = serde_json::from_str(out.trim()).expect("json");
    for who in CLIENTS {
        let row = listed["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .find(|g| g["group"] == format!("resume-{who}").as_str())
            .unwrap_or_else(|| panic!("resume-{who} listed: {listed}"));
        assert_eq!(
            (
                row["topic"].as_str(),
                row["offset"].as_i64(),
                row["lag"].as_i64()
            ),
            (Some("events"), Some(60), Some(0)),
            "{row}"
        );
    }
    // kafka-python reads the offsets partitions as the record format it
    // knows: keys are OffsetCommitKey v1 (version 1, then the group).
    let commits =
        offsets_records_read_by_kafka_python(&logs).expect("checked by clients_present()");
    assert!(
        commits >= 4 * 3,
        "one commit record or more per run: {commits}"
    );
}

/// Runs openssl in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for 127.0.0.1, made with openssl.
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| openssl(dir, args);
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=segmirror-test-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

#[test]
fn tls_and_scram_let_only_authenticated_clients_in() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(dir.path());
    let users = dir.path().join("users.toml");
    // The users file holds salted keys only.
    let mut add = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args([
            "kafka-user",
            "--users-file",
            users.to_str().expect("utf-8"),
            "--name",
            "alice",
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kafka-user");
    {
        use std::io::Write;
        let mut stdin = add.stdin.take().expect("stdin");
        stdin.write_all(b"s3cret-pw\n").expect("password");
    }
    assert!(add.wait().expect("wait").success());
    let text = std::fs::read_to_string(&users).expect("users file");
    assert!(
        !text.contains("s3cret-pw") && text.contains("SCRAM-SHA-512"),
        "{text}"
    );

    let logs = dir.path().join("logs");
    let values: Vec<String> = (0..5).map(|i| format!("secret-{i}")).collect();
    write_log(&logs, "orders", &values, 5);
    let port = free_port();
    let _server = serve(
        &logs,
        port,
        &[
            "--kafka-tls-cert",
            cert.to_str().expect("utf-8"),
            "--kafka-tls-key",
            key.to_str().expect("utf-8"),
            "--kafka-sasl-users",
            users.to_str().expect("utf-8"),
        ],
    );
    let secured = |who: &str, mechanism: &str, password: &str| {
        let ca = format!("ssl.ca.location={}", ca.display());
        let mechanism = format!("sasl.mechanisms={mechanism}");
        let password = format!("sasl.password={password}");
        client(&[
            "consume",
            "--client",
            who,
            "--bootstrap",
            &format!("127.0.0.1:{port}"),
            "--topic",
            "orders",
            "--timeout-s",
            "8",
            "--config",
            "security.protocol=SASL_SSL",
            "--config",
            &ca,
            "--config",
            &mechanism,
            "--config",
            "sasl.username=alice",
            "--config",
            &password,
        ])
    };
    for (who, mechanism) in [
        ("kcat", "SCRAM-SHA-256"),
        ("confluent-kafka", "SCRAM-SHA-512"),
        ("kcat", "PLAIN"),
    ] {
        let got = secured(who, mechanism, "s3cret-pw");
        assert!(got["error"].is_null(), "{who} {mechanism}: {got}");
        assert_eq!(
            triples(&got["records"]).len(),
            5,
            "{who} {mechanism}: {got}"
        );
    }
    // A wrong password, and no SASL at all: nothing is read.
    let got = secured("kcat", "SCRAM-SHA-256", "wrong");
    assert!(triples(&got["records"]).is_empty(), "{got}");
    assert!(!got["error"].is_null(), "{got}");
    let got = client(&[
        "consume",
        "--client",
        "kcat",
        "--bootstrap",
        &format!("127.0.0.1:{port}"),
        "--topic",
        "orders",
        "--config",
        "security.protocol=SSL",
        "--config",
        &format!("ssl.ca.location={}", ca.display()),
        "--config",
        "socket.timeout.ms=3000",
        "--config",
        "metadata.request.timeout.ms=3000",
    ]);
    assert!(
        triples(&got["records"]).is_empty(),
        "unauthenticated: {got}"
    );

    // A listener on every interface without TLS and SASL is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args([
            "serve",
            "--log-dir",
            logs.to_str().expect("utf-8"),
            "--kafka-listen",
            "0.0.0.0:0",
        ])
        .output()
        .expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("not a loopback address") && err.contains("--kafka-insecure"),
        "{err}"
    );
}

/// Fetch responses of 10 MiB over TLS, records read from the segment files
/// 1 MiB at a time: every record arrives, in order, with no wait for a
/// socket timeout. (A response whose TLS tail stayed in the session's
/// buffer, unflushed, stalled kcat for its 60 s socket timeout in 2 of 3
/// runs of 1 GiB with the release build; this test bounds each run at 12 s
/// with a 15 s socket timeout.)
#[test]
fn a_large_log_is_read_whole_over_tls_in_large_fetches() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(dir.path());
    let logs = dir.path().join("logs");
    // 1,536 records of 64 KiB: 96 MiB, 8 to a batch.
    let values: Vec<String> = (0..1536)
        .map(|i| format!("{i:06}{}", "v".repeat(65530)))
        .collect();
    write_log(&logs, "bulk", &values, 8);
    let port = free_port();
    let _server = serve(
        &logs,
        port,
        &[
            "--kafka-tls-cert",
            cert.to_str().expect("utf-8"),
            "--kafka-tls-key",
            key.to_str().expect("utf-8"),
        ],
    );
    for run in 0..3 {
        let started = std::time::Instant::now();
        let out = Command::new("kcat")
            .args([
                "-b",
                &format!("127.0.0.1:{port}"),
                "-C",
                "-t",
                "bulk",
                "-p",
                "0",
            ])
            .args(["-o", "beginning", "-e", "-q", "-f", "%o\n"])
            .args(["-X", "security.protocol=ssl"])
            .args(["-X", &format!("ssl.ca.location={}", ca.display())])
            .args(["-X", "fetch.wait.max.ms=5", "-X", "socket.timeout.ms=15000"])
            .args(["-X", "fetch.max.bytes=52428800"])
            .args(["-X", "max.partition.fetch.bytes=10485760"])
            // A small receive buffer: the server's socket fills at once.
            .args(["-X", "socket.receive.buffer.bytes=16384"])
            .output()
            .expect("kcat");
        let offsets: Vec<i64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.parse().expect("an offset"))
            .collect();
        assert!(
            out.status.success(),
            "run {run}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(offsets, (0..1536).collect::<Vec<i64>>(), "run {run}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(12),
            "run {run}: {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn client_certificates_are_required_when_a_client_ca_is_given() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(dir.path());
    let run = |args: &[&str]| openssl(dir.path(), args);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=consumer",
    ]);
    // A v3 certificate (webpki refuses v1 ones), for client authentication.
    std::fs::write(
        dir.path().join("client.cnf"),
        "extendedKeyUsage=clientAuth\n",
    )
    .expect("cnf");
    run(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.pem",
        "-days",
        "2",
        "-extfile",
        "client.cnf",
    ]);
    let logs = dir.path().join("logs");
    write_log(&logs, "orders", &["only-with-a-certificate".to_string()], 1);
    let port = free_port();
    let _server = serve(
        &logs,
        port,
        &[
            "--kafka-tls-cert",
            cert.to_str().expect("utf-8"),
            "--kafka-tls-key",
            key.to_str().expect("utf-8"),
            "--kafka-tls-client-ca",
            ca.to_str().expect("utf-8"),
        ],
    );
    let ca_location = format!("ssl.ca.location={}", ca.display());
    let with_cert = [
        format!(
            "ssl.certificate.location={}",
            dir.path().join("client.pem").display()
        ),
        format!(
            "ssl.key.location={}",
            dir.path().join("client.key").display()
        ),
    ];
    let bootstrap = format!("127.0.0.1:{port}");
    let mut args = vec![
        "consume",
        "--client",
        "kcat",
        "--bootstrap",
        &bootstrap,
        "--topic",
        "orders",
        "--config",
        "security.protocol=SSL",
        "--config",
        &ca_location,
    ];
    let without = client(
        &[
            &args[..],
            &[
                "--config",
                "socket.timeout.ms=3000",
                "--config",
                "metadata.request.timeout.ms=3000",
            ],
        ]
        .concat(),
    );
    assert!(
        triples(&without["records"]).is_empty(),
        "no certificate, nothing read: {without}"
    );
    for kv in &with_cert {
        args.extend(["--config", kv.as_str()]);
    }
    let got = client(&args);
    assert!(got["error"].is_null(), "{got}");
    assert_eq!(triples(&got["records"]).len(), 1, "{got}");
}

/// A range being appended as it downloads (the `segmirror-applying.json`
/// marker names where it started) is not served to stock clients before
/// it is whole: they read up to the marker's offset, and everything once
/// the marker is gone.
#[test]
fn stock_clients_read_nothing_of_a_range_still_being_streamed_in() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("mirror");
    let values: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
    write_log(&logs, "streamed", &values, 2);
    let partition_dir = logs.join(tp("streamed").dir_name());
    let marker = manifest::applying::Applying {
        key: "bucket/key/of/the/range".into(),
        base_offset: 10,
        last_offset: 29,
        log_end_before: 10,
    };
    partdir::applying::begin(&partition_dir, &marker).expect("marker");
    let port = free_port();
    let _serve = serve(&logs, port, &[]);
    for who in ["kafka-python", "kcat"] {
        let got = consume(who, port, "streamed", 0, 0, "read_uncommitted");
        assert!(got["error"].is_null(), "{who}: {got}");
        let offsets: Vec<i64> = triples(&got["records"]).iter().map(|t| t.0).collect();
        assert_eq!(offsets, (0..10).collect::<Vec<i64>>(), "{who}");
    }
    partdir::applying::end(&partition_dir).expect("end");
    for who in ["kafka-python", "kcat"] {
        let got = consume(who, port, "streamed", 0, 0, "read_uncommitted");
        let offsets: Vec<i64> = triples(&got["records"]).iter().map(|t| t.0).collect();
        assert_eq!(offsets, (0..20).collect::<Vec<i64>>(), "{who}");
    }
}
