//! The source's topic configs on the mirror, as stock clients see them:
//! `applier serve` over a log dir whose mirror record holds copied configs
//! answers confluent-kafka's and kafka-python's `describe_configs` with
//! them (values, sources, read-only until STOPPED, synonyms), Kafka's
//! defaults for the rest; `applier status --json` shows them; and
//! `remote.storage.enable=true` among them fails the next preparation.
//!
//! The Python clients must be installed (`bash scripts/test.sh` installs
//! them); `SEGMIRROR_SKIP_PYTHON=1` skips the client test.

mod common;

use std::path::Path;
use std::process::Command;

use common::clients::{applier, free_port, serve};
use common::{topic_id, tp};
use kafkalog::{LogConfig, LogDir};
use manifest::topic_config::{ConfigSource, ConfigValue};
use serde_json::Value;

/// `orders-0` with three records (`common::produce`), a mirror of `src-1` in `state` whose
/// record holds `retention.ms=60000` (the topic's own) and
/// `max.message.bytes=500` (the source cluster's default).
fn mirror_log_dir(logs: &Path, state: &str) {
    let d = LogDir::open(logs).expect("log dir");
    let mut log = d
        .open_or_create_partition(&tp("orders"), Some(topic_id()), LogConfig::default())
        .expect("create");
    common::produce(&mut log, 3, 0);
    log.close().expect("close");
    let state: manifest::state::MirrorState = serde_json::from_str(&format!(
        r#"{{"state":"{state}","previous":null,"retries":0}}"#
    ))
    .expect("state");
    let mut record =
        manifest::mirror_record::MirrorRecord::new("src-1", topic_id(), state, 1_700_000_000_000);
    let value = |v: &str, source| ConfigValue {
        value: v.into(),
        source,
    };
    record.topic_configs = Some(
        [
            ("retention.ms", value("60000", ConfigSource::Topic)),
            (
                "max.message.bytes",
                value("500", ConfigSource::DynamicClusterDefault),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    );
    partdir::record::write(&record, &logs.join("orders-0")).expect("record");
}

/// What each client's `describe_configs` of topic `orders` gives, as
/// `{client: {name: [value, source, read_only, [synonym names]]}}`.
const DESCRIBE: &str = r#"
import json, sys
port = sys.argv[1]
out = {}
from confluent_kafka.admin import AdminClient, ConfigResource
admin = AdminClient({"bootstrap.servers": "127.0.0.1:" + port})
res = ConfigResource(ConfigResource.Type.TOPIC, "orders")
entries = admin.describe_configs([res], request_timeout=20)[res].result(timeout=30)
out["confluent-kafka"] = {
    n: [e.value, int(e.source), bool(e.is_read_only), sorted(e.synonyms)]
    for n, e in entries.items()
}
from kafka.admin import KafkaAdminClient, ConfigResource as KRes, ConfigResourceType
from kafka.admin._configs import ConfigSourceType
kadmin = KafkaAdminClient(bootstrap_servers="127.0.0.1:" + port, request_timeout_ms=20000)
resp = kadmin.describe_configs(
    [KRes(ConfigResourceType.TOPIC, "orders")], include_synonyms=True, config_filter="all"
)
got = {
    n: [
        e["value"],
        ConfigSourceType[e["config_source"]].value,
        bool(e["read_only"]),
        sorted(s["name"] for s in e.get("synonyms", [])),
    ]
    for n, e in resp["topic"]["orders"].items()
}
kadmin.close()
out["kafka-python"] = got
print(json.dumps(out))
"#;

fn describe(port: u16) -> Value {
    let python = segmirror_testkit::needs::python().expect("checked");
    let out = Command::new(python)
        .args(["-c", DESCRIBE, &port.to_string()])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "describe_configs: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn stock_clients_describe_a_mirrors_copied_configs() {
    if segmirror_testkit::needs::python().is_none() {
        return;
    }
    for (state, read_only) in [("MIRRORING", true), ("STOPPED", false)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = dir.path().join("logs");
        mirror_log_dir(&logs, state);
        let port = free_port();
        let _serve = serve(&logs, port, &[]);
        let got = describe(port);
        for client in ["confluent-kafka", "kafka-python"] {
            let c = &got[client];
            assert_eq!(
                c["retention.ms"],
                serde_json::json!(["60000", 1, read_only, ["retention.ms"]]),
                "{client} in {state}: {c}"
            );
            assert_eq!(
                c["max.message.bytes"],
                serde_json::json!(["500", 3, read_only, ["message.max.bytes"]]),
                "{client} in {state}: {c}"
            );
            assert_eq!(
                c["cleanup.policy"],
                serde_json::json!(["delete", 5, read_only, ["log.cleanup.policy"]]),
                "{client}: Kafka's default for a key not copied"
            );
            assert_eq!(c["segmirror.mirror.state"][0], state, "{client}: {c}");
            assert_eq!(c["segmirror.mirror.state"][2], true, "{client}: {c}");
        }
    }
}

#[test]
fn status_json_shows_the_copied_configs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    mirror_log_dir(&logs, "STOPPED");
    let (code, out) = applier(&[
        "status",
        "--log-dir",
        logs.to_str().expect("utf-8"),
        "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let configs = &v["partitions"][0]["topic_configs"];
    assert_eq!(
        configs["retention.ms"],
        serde_json::json!({"value": "60000", "source": "topic"}),
        "{v}"
    );
    assert_eq!(configs["max.message.bytes"]["value"], "500", "{v}");
    let (code, table) = applier(&["status", "--log-dir", logs.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{table}");
    assert!(
        table.contains("orders-0 topic configs: max.message.bytes=500 retention.ms=60000"),
        "{table}"
    );
}

/// The tiered-storage rule by config: a STOPPED mirror whose record holds
/// `remote.storage.enable=true` (copied because an operator included it)
/// fails its next preparation, through the binaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_storage_enable_in_the_records_configs_makes_preparing_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, dest) = (dir.path().join("source"), dir.path().join("dest"));
    {
        let d = LogDir::open(&source).expect("source");
        let mut log = d
            .open_or_create_partition(&tp("orders"), Some(topic_id()), LogConfig::default())
            .expect("create");
        common::produce(&mut log, 10, 0);
        log.close().expect("close");
    }
    let (url, store) = common::file_bucket(&dir.path().join("bucket"));
    common::publish(&store, &source, &tp("orders"), "u1").await;
    let bin = env!("CARGO_BIN_EXE_applier");
    let dest_s = dest.to_str().expect("utf-8");
    let mirror = [
        "--log-dir",
        dest_s,
        "--bucket",
        &url,
        "--source-cluster-id",
        common::SOURCE,
    ];
    let (code, out) = common::run_applier(
        bin,
        &[&["once"][..], &mirror, &["--topics", "orders"]].concat(),
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = common::run_applier(bin, &["stop", "--log-dir", dest_s, "--topic", "orders"]);
    assert_eq!(code, 0, "{out}");
    let pdir = dest.join("orders-0");
    let mut record = partdir::record::read(&pdir)
        .expect("read")
        .expect("a record");
    record.topic_configs = Some(
        [(
            "remote.storage.enable".to_string(),
            ConfigValue {
                value: "true".into(),
                source: ConfigSource::Topic,
            },
        )]
        .into_iter()
        .collect(),
    );
    partdir::record::write(&record, &pdir).expect("write");
    let (_, out) = common::run_applier(
        bin,
        &[&["start"][..], &mirror, &["--topic", "orders"]].concat(),
    );
    let (code, once) = common::run_applier(bin, &[&["once"][..], &mirror].concat());
    let (_, status) = common::run_applier(bin, &["status", "--log-dir", dest_s, "--json"]);
    let v: Value = serde_json::from_str(&status).expect("json");
    let row = &v["partitions"][0];
    assert_eq!(row["state"], "FAILED", "start: {out}\nonce: {once}\n{v}");
    assert!(
        row["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("remote.storage.enable=true")),
        "{v}"
    );
    assert_eq!(code, 1, "{once}");
}
