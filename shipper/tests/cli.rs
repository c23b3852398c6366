//! The `shipper` binary: help, configuration checks, `once`, `status`,
//! `run` stopping on SIGTERM, and the metrics endpoint.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use kafkalog::LogDir;

fn shipper_bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_shipper"));
    c.env("RUST_LOG", "warn");
    for (k, _) in std::env::vars() {
        if k.starts_with("SEGMIRROR_") {
            c.env_remove(k);
        }
    }
    c
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = shipper_bin().args(args).output().expect("run shipper");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn source(root: &Path) {
    let dir = LogDir::open(root).expect("log dir");
    for p in 0..2 {
        let mut log = open_log(&dir, &tp("orders", p), topic_id(1), 4096);
        append_n(&mut log, 12, 3, 0, 100);
        append_n(&mut log, 4, 3, 2, 100);
        log.close().expect("close");
    }
}

#[test]
fn help_has_examples_everywhere() {
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for want in [
        "run",
        "once",
        "init",
        "status",
        "config",
        "Examples:",
        "shipper once",
    ] {
        assert!(out.contains(want), "--help lacks {want}: {out}");
    }
    for sub in [
        &["run", "--help"][..],
        &["once", "--help"],
        &["config", "check", "--help"],
    ] {
        let (code, out, _) = run(sub);
        assert_eq!(code, 0, "{sub:?}");
        for flag in [
            "--config",
            "--log-dir",
            "--bucket",
            "--cluster-id",
            "--topics",
            "--exclude",
            "--upload-concurrency",
            "--part-size",
            "--rate-limit",
            "--metrics-addr",
            "--shipper-id",
        ] {
            assert!(out.contains(flag), "{sub:?} --help lacks {flag}");
        }
        // The intervals are the daemon's: `once` makes one pass.
        for flag in ["--tail-interval", "--group-sync-interval"] {
            assert_eq!(
                out.contains(flag),
                sub[0] != "once",
                "{sub:?} --help and {flag}"
            );
        }
    }
    let (code, out, _) = run(&["config", "check", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("SEGMIRROR_TAIL_INTERVAL") && out.contains("Example"));
    let (code, out, _) = run(&["status", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--json") && out.contains("--bucket") && out.contains("--cluster-id"));
    let (code, _, err) = run(&["once", "--log-dri", "/x"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--log-dir"),
        "a usage error suggests the flag: {err}"
    );
}

#[test]
fn config_check_names_the_bad_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("shipper.toml");
    let good = format!(
        "log_dirs = [\"{}\"]\nbucket = \"file://{}\"\ncluster_id = \"src\"\npart_size = \"8MiB\"\n",
        dir.path().join("logs").display(),
        dir.path().join("bucket").display()
    );
    std::fs::write(&file, &good).expect("write");
    let f = file.to_str().expect("utf-8");
    let (code, out, err) = run(&["config", "check", "--config", f]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("ok: cluster src"), "{out}");
    std::fs::write(&file, format!("{good}max_object_size = \"lots\"\n")).expect("write");
    let (code, _, err) = run(&["config", "check", "--config", f]);
    assert_eq!(code, 2);
    assert!(err.contains("config field `max_object_size`"), "{err}");
    std::fs::write(&file, format!("{good}tail_intervall = \"1s\"\n")).expect("write");
    let (code, _, err) = run(&["config", "check", "--config", f]);
    assert_eq!(code, 2);
    assert!(err.contains("tail_intervall"), "{err}");
    // The environment overrides the file, flags override the environment.
    std::fs::write(&file, &good).expect("write");
    let out = shipper_bin()
        .args(["config", "check", "--config", f])
        .env("SEGMIRROR_TAIL_INTERVAL", "soon")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("config field `tail_interval`"));
    let out = shipper_bin()
        .args(["config", "check", "--config", f, "--tail-interval", "2s"])
        .env("SEGMIRROR_TAIL_INTERVAL", "soon")
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("tail every 2s"));
}

#[test]
fn once_then_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    source(&logs);
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let logs_arg = logs.to_str().expect("utf-8");
    let (code, out, err) = run(&[
        "once",
        "--log-dir",
        logs_arg,
        "--bucket",
        &bucket,
        "--create-bucket",
        "--cluster-id",
        "src",
        "--shipper-id",
        "cli",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("2 manifest versions") && err.contains("0 failed"),
        "{err}"
    );
    let (code, out, err) = run(&[
        "status",
        "--bucket",
        &bucket,
        "--cluster-id",
        "src",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let parts = v["partitions"].as_array().expect("partitions");
    assert_eq!(parts.len(), 2);
    for p in parts {
        assert_eq!(p["topic"], "orders");
        assert_eq!(p["shipped_end_offset"], 48);
        assert_eq!(p["source_high_watermark"], 48);
        assert_eq!(p["lag_offsets"], 0);
        assert_eq!(p["manifest_version"], 1);
    }
    assert_eq!(v["head_writer"], "cli");
    let (code, out, _) = run(&["status", "--bucket", &bucket, "--cluster-id", "src"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("PARTITION") && out.contains("orders-1") && out.contains("SHIPPED END"),
        "{out}"
    );
    let (code, out, _) = run(&["status", "--bucket", &bucket, "--cluster-id", "other"]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing shipped"), "{out}");
}

#[test]
fn run_ships_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    source(&logs);
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let mut child = shipper_bin()
        .args([
            "run",
            "--log-dir",
            logs.to_str().expect("utf-8"),
            "--bucket",
            &bucket,
            "--create-bucket",
            "--cluster-id",
            "src",
            "--tail-interval",
            "50ms",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let head = dir
        .path()
        .join("bucket/segmirror/v1/src/head/00000000000000000001.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !head.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(head.exists(), "run published a head");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        assert!(Instant::now() < deadline, "run did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert_eq!(code, Some(0), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_on_get_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    source(&logs);
    let b = backends().remove(0);
    let metrics = Arc::new(shipper::Metrics::new(Some(b.counting.clone())));
    let addr = metrics
        .serve("127.0.0.1:0".parse().expect("addr"))
        .expect("serve");
    let mut s = shipper::Shipper::new(options(&logs, &b, "m"), b.store())
        .expect("shipper")
        .with_metrics(Arc::clone(&metrics));
    s.ship_available().await;
    let body = tokio::task::spawn_blocking(move || {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let mut body = String::new();
        conn.read_to_string(&mut body).expect("read");
        let mut missing = std::net::TcpStream::connect(addr).expect("connect");
        missing
            .write_all(b"GET /nope HTTP/1.1\r\n\r\n")
            .expect("write");
        let mut other = String::new();
        missing.read_to_string(&mut other).expect("read");
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        body
    })
    .await
    .expect("fetch");
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    for want in [
        "segmirror_shipper_shipped_bytes_total",
        "segmirror_shipper_shipped_objects_total",
        "segmirror_shipper_manifest_commits_total 2",
        "segmirror_shipper_object_store_requests_total{kind=\"put\"}",
        "segmirror_shipper_lag_offsets{topic=\"orders\",partition=\"0\"} 0",
        "segmirror_shipper_lag_bytes{topic=\"orders\",partition=\"1\"} 0",
        "segmirror_shipper_lag_seconds{topic=\"orders\",partition=\"0\"} 0",
        "segmirror_shipper_shipped_end_offset{topic=\"orders\",partition=\"0\"} 48",
        "segmirror_shipper_partitions{state=\"ok\"} 2",
        "# EOF",
    ] {
        assert!(body.contains(want), "metrics lack {want}:\n{body}");
    }
}

fn once_in(cwd: &Path, args: &[&str]) -> (i32, String, Duration) {
    let started = Instant::now();
    let out = shipper_bin()
        .current_dir(cwd)
        .arg("once")
        .args(args)
        .output()
        .expect("run shipper");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text, started.elapsed())
}

#[test]
fn once_without_a_readable_log_dir_exits_2_naming_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").expect("write");
    let file = file.to_str().expect("utf-8");
    let (code, err, _) = once_in(
        dir.path(),
        &[
            "--log-dir",
            "/missing",
            "--log-dir",
            file,
            "--bucket",
            &bucket,
            "--cluster-id",
            "src",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no log dir is readable"), "{err}");
    assert!(err.contains("/missing: No such file or directory"), "{err}");
    assert!(err.contains(&format!("{file}: not a directory")), "{err}");
    // One unreadable dir among readable ones: a warning, and the others ship.
    let logs = dir.path().join("logs");
    source(&logs);
    let logs = logs.to_str().expect("utf-8");
    let (code, err, _) = once_in(
        dir.path(),
        &[
            "--log-dir",
            "/missing",
            "--log-dir",
            logs,
            "--bucket",
            &bucket,
            "--create-bucket",
            "--cluster-id",
            "src",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("log dir unreadable") && err.contains("/missing"),
        "{err}"
    );
    assert!(err.contains("2 manifest versions"), "{err}");
}

/// The binary with S3 requests sent to `endpoint` (dummy credentials).
fn against(endpoint: &str) -> Command {
    let mut c = shipper_bin();
    c.env("AWS_ENDPOINT_URL", endpoint)
        .env_remove("AWS_ENDPOINT_URL_S3")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test");
    c
}

#[test]
fn once_against_an_unreachable_store_exits_1_within_the_timeout() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    source(&logs);
    let endpoint = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let out = against(&endpoint)
        .args([
            "once",
            "--log-dir",
            logs.to_str().expect("utf-8"),
            "--bucket",
            "s3://unreachable-bucket/p",
            "--cluster-id",
            "src",
            "--store-timeout",
            "2s",
        ])
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("run");
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    // Either the client's own retries end first (their error), or the
    // timeout does (then a connection attempt says why): one line either way.
    let line = format!("shipper: error: the store endpoint {endpoint} is unreachable (");
    assert!(err.contains(&line), "{err}");
    assert!(
        err.contains("and that the server is up") && err.contains("check AWS_ENDPOINT_URL"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // The environment variable and the file key set it too.
    let file = dir.path().join("shipper.toml");
    std::fs::write(
        &file,
        "log_dirs = [\"logs\"]\nbucket = \"s3://unreachable-bucket/p\"\ncluster_id = \"src\"\nstore_timeout = \"600ms\"\n",
    )
    .expect("write");
    let out = against(&endpoint)
        .args(["once", "--config", file.to_str().expect("utf-8")])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&line), "{err}");
    // Which check answers first depends on timing (a loaded machine): the
    // probe that finds the port refused, or the timeout (which names it).
    let refused_at_once = |err: &str| err.contains("is unreachable (connection refused)");
    assert!(
        refused_at_once(&err)
            || (err.contains(&format!(
                "connecting to 127.0.0.1:{port}: Connection refused"
            )) && err.contains("no answer within 600ms")),
        "{err}"
    );
    let out = against(&endpoint)
        .args(["once", "--config", file.to_str().expect("utf-8")])
        .env("SEGMIRROR_STORE_TIMEOUT", "300ms")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        refused_at_once(&err) || err.contains("within 300ms"),
        "{err}"
    );
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// `shipper once` on an S3 bucket with `env` applied: exit code and stderr.
fn once_on_s3(bucket: &str, env: &[(&str, &str)], unset: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    source(&logs);
    let mut c = shipper_bin();
    c.args([
        "once",
        "--log-dir",
        logs.to_str().expect("utf-8"),
        "--bucket",
        bucket,
        "--cluster-id",
        "src",
        "--store-timeout",
        "5s",
    ]);
    for k in unset {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CREDENTIAL_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_SHARED_CREDENTIALS_FILE",
];

#[test]
fn once_without_credentials_exits_2_saying_where_it_looked() {
    let metadata = format!("http://127.0.0.1:{}", closed_port());
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let (code, err) = once_on_s3(
        "s3://some-bucket/p",
        &[
            ("AWS_METADATA_ENDPOINT", &metadata),
            ("AWS_ENDPOINT_URL", &endpoint),
            ("HOME", "/nonexistent"),
        ],
        CREDENTIAL_VARS,
    );
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("shipper: error: no AWS credentials found (looked in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the shared credentials file (profile default), AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, instance metadata at "),
        "{err}"
    );
    assert!(
        err.contains(&format!("{metadata}: connecting to "))
            && err.contains("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"),
        "{err}"
    );
    // Instance metadata disabled and nothing else: known without a request.
    let (code, err) = once_on_s3(
        "s3://some-bucket/p",
        &[
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("AWS_ENDPOINT_URL", &endpoint),
            ("HOME", "/nonexistent"),
        ],
        CREDENTIAL_VARS,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("no AWS credentials found")
            && err.contains("instance metadata is disabled by AWS_EC2_METADATA_DISABLED"),
        "{err}"
    );
}

#[test]
fn once_on_a_bucket_that_does_not_exist_exits_1_naming_it_and_the_endpoint() {
    // moto (tests/s3-server.sh).
    if segmirror_testkit::needs::s3().is_none() {
        return;
    }
    let endpoint =
        std::env::var("AWS_ENDPOINT_URL").expect("the S3 test server's AWS_ENDPOINT_URL");
    let (code, err) = once_on_s3("s3://never-created-bucket/p", &[], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("shipper: error: bucket never-created-bucket does not exist at endpoint {endpoint}: create it, or fix the bucket name (--bucket) or the endpoint (AWS_ENDPOINT_URL)\n")),
        "{err}"
    );
}

#[test]
fn each_cause_of_an_error_is_printed_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    source(&logs);
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").expect("write");
    // The bucket dir cannot be looked at under a file: an io error in a
    // bucket error in the binary's error (a setup error, with or without
    // --create-bucket).
    let bucket = format!("file://{}/bucket", file.display());
    let (code, err, _) = once_in(
        dir.path(),
        &[
            "--log-dir",
            logs.to_str().expect("utf-8"),
            "--bucket",
            &bucket,
            "--cluster-id",
            "src",
            "--create-bucket",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("bucket {bucket}: ")), "{err}");
    assert_eq!(err.matches("Not a directory").count(), 1, "{err}");
}

#[test]
fn relative_log_dirs_resolve_against_the_working_directory_or_the_config_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    source(&dir.path().join("logs"));
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let (code, err, _) = once_in(
        dir.path(),
        &[
            "--log-dir",
            "logs",
            "--bucket",
            &bucket,
            "--create-bucket",
            "--cluster-id",
            "src",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("2 manifest versions"), "{err}");
    // In a file: against the file's directory, wherever the process runs.
    let etc = dir.path().join("etc");
    std::fs::create_dir_all(&etc).expect("mkdir");
    let file = etc.join("shipper.toml");
    std::fs::write(
        &file,
        format!(
            "log_dirs = [\"../logs\"]\nbucket = \"file://{}\"\ncluster_id = \"other\"\n",
            dir.path().join("bucket").display()
        ),
    )
    .expect("write");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let (code, err, _) = once_in(
        elsewhere.path(),
        &["--config", file.to_str().expect("utf-8"), "--create-bucket"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("2 manifest versions"), "{err}");
}

#[test]
fn once_that_ships_nothing_says_what_it_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    source(&logs);
    let logs = logs.to_str().expect("utf-8");
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let base = [
        "--log-dir",
        logs,
        "--bucket",
        &bucket,
        "--cluster-id",
        "src",
        "--create-bucket",
    ];
    let (code, err, _) = once_in(dir.path(), &base);
    assert_eq!(code, 0, "{err}");
    let (code, err, _) = once_in(dir.path(), &base);
    assert_eq!(code, 0, "{err}");
    // One line, besides the start-up warning of a source without a KRaft
    // metadata log (this one has none).
    assert_eq!(
        err.lines()
            .filter(|l| !l.contains("no KRaft metadata log"))
            .count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("shipped nothing: 2 partitions in the log dirs, 2 selected by every topic: 2 are already shipped"),
        "{err}"
    );
    let mut args = base.to_vec();
    args.extend(["--topics", "payments"]);
    let (code, err, _) = once_in(dir.path(), &args);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("2 partitions in the log dirs, 0 selected by --topics payments: the selection matches none of them"),
        "{err}"
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let (code, err, _) = once_in(
        dir.path(),
        &[
            "--log-dir",
            empty.to_str().expect("utf-8"),
            "--bucket",
            &bucket,
            "--cluster-id",
            "src",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("the log dirs hold no partitions"), "{err}");
}

#[test]
fn once_logs_words_without_colour_codes_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    source(&logs);
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let out = shipper_bin()
        .env("RUST_LOG", "info")
        .args([
            "once",
            "--log-dir",
            logs.to_str().expect("utf-8"),
            "--bucket",
            &bucket,
            "--create-bucket",
            "--cluster-id",
            "src",
        ])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("shipper starting"),
        "info lines were logged: {err}"
    );
    assert!(
        !err.contains("\x1b["),
        "colour codes in captured stderr: {err}"
    );
    assert!(
        err.contains(&format!("log_dirs={}", logs.display())),
        "log dirs in words: {err}"
    );
    for debug in ["None", "Some(", "[\""] {
        assert!(!err.contains(debug), "debug text {debug:?} in: {err}");
    }
}

#[test]
fn help_shows_every_default_exit_codes_and_examples_that_paste_as_they_are() {
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Exit codes: 0 done; 1 a partition failed")
            && out.contains("2 a usage or setup error"),
        "{out}"
    );
    for sub in [
        &["--help"][..],
        &["run", "--help"],
        &["once", "--help"],
        &["status", "--help"],
        &["doctor", "--help"],
        &["config", "check", "--help"],
        &["config", "example", "--help"],
    ] {
        let (code, out, _) = run(sub);
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
                line.starts_with("  shipper ") || line.starts_with("  SEGMIRROR_"),
                "{sub:?}: an example line is wrapped or not a command: {line:?}"
            );
        }
    }
    let (_, out, _) = run(&["run", "--help"]);
    for default in [
        "[default: 5s]",
        "[default: 4]",
        "[default: 64MiB]",
        "[default: 1h]",
        "[default: 60s]",
        "[default: <hostname>-<pid>]",
        "[default: every topic]",
    ] {
        assert!(out.contains(default), "once --help lacks {default}: {out}");
    }
}

#[test]
fn config_example_prints_a_file_that_config_check_accepts() {
    let (code, out, err) = run(&["config", "example"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("log_dirs = ") && out.contains("# log_dir = "),
        "{out}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("shipper.toml");
    std::fs::write(&file, &out).expect("write");
    let (code, out, err) = run(&["config", "check", "--config", file.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("tail every 5s"), "{out}");
}
