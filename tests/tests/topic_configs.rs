//! Topic configs follow, through the binaries (issue 29, deliverable 3):
//! the source broker's KRaft metadata log (written by the kraft tests'
//! independent encoder) sets `retention.ms` on `orders`; `shipper once`
//! publishes it with the manifest, `applier once` records it and
//! `applier status --json` shows it; a change on the source (a new
//! `ConfigRecord`) shows after one more `shipper once` + `applier once`,
//! in the status and in confluent-kafka's `describe_configs` against
//! `applier serve` (skipped with `SEGMIRROR_SKIP_PYTHON=1`);
//! after `applier stop` the next `applier once` enforces it on the mirror:
//! the segments older than the retention are deleted, the log start moves,
//! and what is kept is byte-identical to the source's.

#[path = "../../kraft/tests/support/mod.rs"]
mod kraft_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use segmirror_e2e::segment_files;
use segmirror_reliability::bins::Bins;
use serde_json::Value;

const ID: TopicId = TopicId::from_bytes([9; 16]);
const DAY_MS: i64 = 86_400_000;

fn orders() -> TopicPartition {
    TopicPartition::new("orders", 0).expect("tp")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// The source's `orders-0`: one segment of 10 records per timestamp.
fn source_log(root: &Path, timestamps: &[i64]) {
    let d = LogDir::open(root).expect("source");
    let mut log = d
        .open_or_create_partition(&orders(), Some(ID), LogConfig::default())
        .expect("create");
    for (i, ts) in timestamps.iter().enumerate() {
        if i > 0 {
            let end = log.log_end_offset();
            log.roll_to(end).expect("roll");
        }
        let records: Vec<RecordInput> = (0..10)
            .map(|r| RecordInput {
                timestamp: *ts,
                key: Some(format!("k{i}-{r}").into_bytes()),
                value: Some(vec![b'v'; 200]),
                headers: vec![],
            })
            .collect();
        let mut batch = build_batch(&BatchSpec::new(0, 0), &records).expect("batch");
        log.append_as_leader(&mut batch, 0).expect("append");
    }
    log.close().expect("close");
    d.write_checkpoints().expect("checkpoints");
}

/// Runs `bin` with `args` (no `SEGMIRROR_*` from the environment): exit
/// code and stdout + stderr.
fn run(bin: &Path, args: &[&str]) -> (i32, String) {
    let mut c = Command::new(bin);
    c.env("RUST_LOG", "warn");
    for (k, _) in std::env::vars() {
        if k.starts_with("SEGMIRROR_") {
            c.env_remove(k);
        }
    }
    let out = c.args(args).output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// A child process killed when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `retention.ms` of topic `orders` as confluent-kafka's `describe_configs`
/// reads it from `applier serve` on `log_dir` (`None`: the Python clients
/// are skipped).
fn described_retention_ms(bins: &Bins, log_dir: &str) -> Option<String> {
    let python = segmirror_testkit::needs::python()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let _serve = Running(
        Command::new(&bins.applier)
            .args(["serve", "--log-dir", log_dir, "--kafka-listen", &listen])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("applier serve"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "applier serve never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let script = r#"
import sys
from confluent_kafka.admin import AdminClient, ConfigResource
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
res = ConfigResource(ConfigResource.Type.TOPIC, "orders")
entries = admin.describe_configs([res], request_timeout=20)[res].result(timeout=30)
print(entries["retention.ms"].value)
"#;
    let out = Command::new(python)
        .args(["-c", script, &listen])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "describe_configs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn a_retention_change_on_the_source_reaches_the_mirror_and_is_enforced_after_stop() {
    use kraft_support as k;
    let bins = Bins::get().expect("binaries");
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let now = now_ms();
    // Two segments ten days old, then one written now.
    source_log(&source, &[now - 10 * DAY_MS, now - 10 * DAY_MS, now]);
    let mut meta = k::MetaLog::create(&source, 1);
    meta.append(
        1,
        &[
            k::topic("orders", ID),
            k::partition(0, ID, 0, &[1], &[1], 1, 0, 0, &[]),
            k::config(2, "orders", "retention.ms", Some("1209600000")),
        ],
    );
    let (source_s, dest_s) = (
        source.to_str().expect("utf-8"),
        dest.to_str().expect("utf-8"),
    );
    let ship = [
        "once",
        "--create-bucket",
        "--log-dir",
        source_s,
        "--bucket",
        &bucket,
        "--cluster-id",
        "src",
    ];
    let apply = [
        "once",
        "--log-dir",
        dest_s,
        "--bucket",
        &bucket,
        "--source-cluster-id",
        "src",
        "--topics",
        "orders",
    ];
    let retention = || -> (String, Value) {
        let (code, out) = run(&bins.applier, &["status", "--log-dir", dest_s, "--json"]);
        assert_eq!(code, 0, "{out}");
        let v: Value = serde_json::from_str(&out).expect("status json");
        let row = v["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .find(|r| r["topic"] == "orders")
            .cloned()
            .expect("orders-0");
        (row["state"].as_str().expect("state").to_string(), row)
    };

    let (code, out) = run(&bins.shipper, &ship);
    assert_eq!(code, 0, "{out}");
    let (code, out) = run(&bins.applier, &apply);
    assert_eq!(code, 0, "{out}");
    let (state, row) = retention();
    assert_eq!(state, "MIRRORING", "{row}");
    assert_eq!(
        row["topic_configs"]["retention.ms"],
        serde_json::json!({"value": "1209600000", "source": "topic"}),
        "{row}"
    );
    let source_segments = segment_files(&source, &orders());
    assert_eq!(segment_files(&dest, &orders()), source_segments);

    // The source's retention changes (14 days to 2): one more cycle on each
    // side brings it to the mirror, which still deletes nothing of its own.
    meta.append(
        2,
        &[k::config(2, "orders", "retention.ms", Some("172800000"))],
    );
    let (code, out) = run(&bins.shipper, &ship);
    assert_eq!(code, 0, "{out}");
    let (code, out) = run(&bins.applier, &apply);
    assert_eq!(code, 0, "{out}");
    let (state, row) = retention();
    assert_eq!(state, "MIRRORING", "{row}");
    assert_eq!(
        row["topic_configs"]["retention.ms"]["value"], "172800000",
        "{row}"
    );
    assert_eq!(row["local_log_start_offset"], 0, "{row}");
    if let Some(described) = described_retention_ms(&bins, dest_s) {
        assert_eq!(described, "172800000", "DescribeConfigs on the mirror");
    }

    // Failover: the mirror owns the topic; its next cycle enforces the
    // two days on it.
    let (code, out) = run(
        &bins.applier,
        &["stop", "--log-dir", dest_s, "--topic", "orders"],
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = run(&bins.applier, &apply);
    assert_eq!(code, 0, "{out}");
    let (state, row) = retention();
    assert_eq!(state, "STOPPED", "{row}");
    assert_eq!(row["local_log_start_offset"], 20, "{row}");
    assert_eq!(row["local_log_end_offset"], 30, "{row}");
    assert_eq!(row["retention_error"], Value::Null, "{row}");
    assert_eq!(
        segment_files(&dest, &orders()),
        source_segments[2..],
        "the ten-day-old segments are gone; the rest is the source's, byte for byte"
    );
}
