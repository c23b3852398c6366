//! Consumer-group offsets synced from the source, seen by stock Kafka
//! clients through `applier run --kafka-listen` (issue 15):
//! - a kafka-python and a confluent-kafka consumer in a synced group,
//!   started on the destination, receive as their first record exactly the
//!   one at the synced offset;
//! - a consumer active on the destination (kcat, a balanced group member)
//!   keeps its own offset while the source keeps committing; once it has
//!   left, the source's newer commit is synced.
//!
//! The source's offsets are shipped by the real shipper (the library, in
//! process) from the source log dir's `__consumer_offsets`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::clients::{Running, applier, client, clients_present, free_port, wait_for_port};
use common::{SOURCE, file_bucket, produce, topic_id, tp};
use kafkalog::offsets_topic::{self, Committed, OFFSETS_TOPIC};
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use serde_json::Value;
use shipper::{Shipper, ShipperOptions};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .expect("clock")
}

/// Commits `offset` for `group` on events-0 in the source's
/// `__consumer_offsets`, at `ts`.
fn source_commit(source: &Path, group: &str, offset: i64, ts: i64) {
    let d = LogDir::open(source).expect("source");
    let otp = TopicPartition::new(OFFSETS_TOPIC, offsets_topic::partition_for(group)).expect("tp");
    let mut log = d
        .open_or_create_partition(
            &otp,
            Some(TopicId::from_bytes([3; 16])),
            LogConfig::default(),
        )
        .expect("offsets partition");
    let c = Committed {
        offset,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp: ts,
    };
    let mut batch =
        offsets_topic::commit_batch(group, &[("events".into(), 0, Some(c))], ts).expect("batch");
    log.append_as_leader(&mut batch, 0).expect("append");
    log.close().expect("close");
}

/// The destination's row for `group`, as `applier groups --json` shows it.
fn row(mirror: &Path, group: &str) -> Option<Value> {
    let (code, out) = applier(&[
        "groups",
        "--log-dir",
        mirror.to_str().expect("utf-8"),
        "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(out.trim()).ok()?;
    v["groups"]
        .as_array()?
        .iter()
        .find(|r| r["group"] == group && r["topic"] == "events")
        .cloned()
}

/// Waits until `group`'s offset on the destination is `want`, and (when
/// given) `applier groups` says how it came there as `sync` (the sync's
/// record is written just after the offsets).
fn wait_offset(
    mirror: &Path,
    group: &str,
    want: i64,
    sync: Option<&str>,
    within: Duration,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let r = row(mirror, group);
        if let Some(r) = &r
            && r["offset"].as_i64() == Some(want)
            && sync.is_none_or(|s| r["sync"].as_str() == Some(s))
        {
            return r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{group} never reached offset {want} on the destination: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn group_first_offsets(who: &str, port: u16, group: &str, max: usize) -> Vec<i64> {
    let r = client(&[
        "group",
        "--client",
        who,
        "--bootstrap",
        &format!("127.0.0.1:{port}"),
        "--topic",
        "events",
        "--group",
        group,
        "--max",
        &max.to_string(),
    ]);
    assert!(r["error"].is_null(), "{who} in {group}: {r}");
    r["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter_map(|m| m["offset"].as_i64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_on_the_destination_start_at_the_synced_offsets_and_active_groups_keep_theirs() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    let mirror = dir.path().join("mirror");
    {
        let d = LogDir::open(&source).expect("source");
        let mut log = d
            .open_or_create_partition(&tp("events"), Some(topic_id()), LogConfig::default())
            .expect("create");
        produce(&mut log, 60, 0);
        log.close().expect("close");
    }
    let an_hour_ago = now_ms() - 3_600_000;
    source_commit(&source, "dr-python", 25, an_hour_ago);
    source_commit(&source, "dr-confluent", 40, an_hour_ago);
    source_commit(&source, "live-app", 10, an_hour_ago);

    let (url, store) = file_bucket(&dir.path().join("bucket"));
    let mut opts = ShipperOptions::new(vec![source.clone()], SOURCE);
    opts.group_sync_interval = Duration::ZERO;
    opts.delete_grace = None;
    let mut shipper = Shipper::new(opts, store.object_store().clone()).expect("shipper");
    let r = shipper.ship_available().await;
    assert!(r.errors.is_empty() && r.group_versions == 1, "{r:?}");

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let m = mirror.to_str().expect("utf-8");
    let _daemon = Running(
        Command::new(env!("CARGO_BIN_EXE_applier"))
            .args([
                "run",
                "--log-dir",
                m,
                "--topics",
                "events",
                "--poll-interval",
                "100ms",
                "--kafka-listen",
                &listen,
                "--bucket",
                &url,
                "--source-cluster-id",
                SOURCE,
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("applier run"),
    );
    wait_for_port(port);
    let synced = wait_offset(
        &mirror,
        "dr-python",
        25,
        Some("synced"),
        Duration::from_secs(30),
    );
    assert_eq!(
        (synced["source_offset"].as_i64(), synced["sync"].as_str()),
        (Some(25), Some("synced")),
        "{synced}"
    );
    wait_offset(
        &mirror,
        "dr-confluent",
        40,
        Some("synced"),
        Duration::from_secs(10),
    );

    // A consumer in a synced group starts exactly at the synced offset.
    assert_eq!(
        group_first_offsets("kafka-python", port, "dr-python", 5),
        (25..30).collect::<Vec<_>>()
    );
    assert_eq!(
        group_first_offsets("confluent-kafka", port, "dr-confluent", 5),
        (40..45).collect::<Vec<_>>()
    );

    // A member of live-app, active on the destination: it starts at the
    // synced 10, reads to the end and commits 60.
    wait_offset(
        &mirror,
        "live-app",
        10,
        Some("synced"),
        Duration::from_secs(10),
    );
    let mut kcat = Running(
        Command::new("kcat")
            .args([
                "-b",
                &listen,
                "-G",
                "live-app",
                "events",
                "-q",
                "-X",
                "auto.offset.reset=earliest",
                "-X",
                "enable.auto.commit=true",
                "-X",
                "auto.commit.interval.ms=100",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("kcat"),
    );
    wait_offset(
        &mirror,
        "live-app",
        60,
        Some("local"),
        Duration::from_secs(30),
    );
    // The source commits again, stamped later than anything the member
    // commits (an hour ahead), so only the member's presence can keep the
    // destination's own offset: while it is active, it does.
    source_commit(&source, "live-app", 30, now_ms() + 3_600_000);
    let r = shipper.ship_available().await;
    assert!(r.errors.is_empty() && r.group_versions == 1, "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let r = row(&mirror, "live-app").expect("live-app");
        assert_eq!(
            r["offset"].as_i64(),
            Some(60),
            "active group overwritten: {r}"
        );
        if r["source_offset"].as_i64() == Some(30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The member leaves (SIGINT: kcat closes its consumer, committing once
    // more); the source's newer commit is then synced.
    let pid = kcat.0.id().to_string();
    let _ = Command::new("kill").args(["-INT", &pid]).status();
    let _ = kcat.0.wait();
    let after = wait_offset(
        &mirror,
        "live-app",
        30,
        Some("synced"),
        Duration::from_secs(60),
    );
    assert_eq!(after["synced_offset"].as_i64(), Some(30), "{after}");
}
