//! Gaps are loud and durable (issue 26, behaviour 16 of
//! `docs/mirroring.md`): the shipper is stopped, the source's retention
//! passes the shipped end (old segments deleted, the log start raised in
//! `log-start-offset-checkpoint`, as Kafka does), the shipper is started
//! again. Then both sides show the gap (status table and JSON, metrics),
//! `applier once` exits 1 naming the partition and the offsets until the
//! gap is acknowledged, and a later gap makes it exit 1 again.
//!
//! The source side is the real shipper (the library, in process, a new
//! instance for each "restart", with its metrics served over HTTP); the
//! destination is the `applier` binary (`once`, `status`, `gaps`, and `run`
//! for its metrics endpoint).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bucket::store::ManifestStore;
use common::clients::{Running, free_port, wait_for_port};
use common::{SOURCE, file_bucket, produce, publish, topic_id, tp};
use kafkalog::{LogConfig, LogDir};
use manifest::clock::ManualClock;
use serde_json::Value;
use shipper::{Shipper, ShipperOptions};

fn applier(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(args)
        .env("RUST_LOG", "error")
        .env_remove("SEGMIRROR_LOG_DIR")
        .output()
        .expect("run applier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Appends `n` records to the source's `orders-0` (small segments, so
/// retention deletes whole ones).
fn source_append(source: &Path, n: usize) {
    let d = LogDir::open(source).expect("source");
    let mut log = d
        .open_or_create_partition(
            &tp("orders"),
            Some(topic_id()),
            LogConfig {
                segment_bytes: 4096,
                ..LogConfig::default()
            },
        )
        .expect("open");
    produce(&mut log, n, 3);
    log.close().expect("close");
    d.write_checkpoints().expect("checkpoints");
}

/// Retention: deletes the segments below `start` and raises the log start
/// (and `log-start-offset-checkpoint`) to it.
fn source_retention(source: &Path, start: i64) {
    let d = LogDir::open(source).expect("source");
    let mut log = d
        .open_partition(&tp("orders"), LogConfig::default())
        .expect("open");
    let deleted = log.raise_log_start(start).expect("retention");
    assert!(!deleted.is_empty(), "whole segments deleted");
    log.close().expect("close");
    d.write_checkpoints().expect("checkpoints");
    let cp = kafkalog::checkpoint::read_offset_checkpoint(
        &source.join(kafkalog::checkpoint::LOG_START_OFFSET_CHECKPOINT),
    )
    .expect("log-start-offset-checkpoint");
    assert_eq!(cp.get(&tp("orders")), Some(&start));
}

/// A shipper started on the source (a fresh process's state: everything
/// from the bucket), with its metrics served.
fn start_shipper(
    source: &Path,
    store: &ManifestStore,
    clock: &ManualClock,
) -> (Shipper, std::net::SocketAddr) {
    let mut opts = ShipperOptions::new(vec![source.to_path_buf()], SOURCE);
    opts.delete_grace = None;
    let metrics = Arc::new(shipper::Metrics::new(None));
    let addr = metrics
        .serve(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("serve");
    let s = Shipper::new(opts, store.object_store().clone())
        .expect("shipper")
        .with_metrics(metrics)
        .with_clock(Arc::new(clock.clone()));
    (s, addr)
}

fn scrape(addr: std::net::SocketAddr) -> std::collections::BTreeMap<String, f64> {
    segmirror_testkit::metrics::samples(&segmirror_testkit::metrics::scrape(addr, "/metrics").body)
}

fn status_json(dest: &str) -> Value {
    let (code, out, err) = applier(&["status", "--log-dir", dest, "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("status json")
}

/// A source dir, a destination dir and a `file://` bucket in a temp dir.
struct World {
    _dir: tempfile::TempDir,
    source: std::path::PathBuf,
    dest: String,
    url: String,
    store: ManifestStore,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = dir.path().join("source");
        let dest = dir.path().join("dest").to_str().expect("utf-8").to_string();
        let (url, store) = file_bucket(&dir.path().join("bucket"));
        World {
            _dir: dir,
            source,
            dest,
            url,
            store,
        }
    }

    /// `applier once` on the destination, mirroring `orders`.
    fn once(&self) -> Vec<String> {
        [
            "once",
            "--log-dir",
            &self.dest,
            "--bucket",
            &self.url,
            "--source-cluster-id",
            SOURCE,
            "--topics",
            "orders",
        ]
        .map(String::from)
        .to_vec()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_shows_on_both_sides_until_acknowledged_and_a_later_one_again() {
    let w = World::new();
    let (source, dest, url, store) = (&w.source, w.dest.as_str(), &w.url, &w.store);
    let once = w.once();
    let once: Vec<&str> = once.iter().map(String::as_str).collect();
    let clock = ManualClock::new();
    let lost = "segmirror_shipper_gap_unacknowledged_offsets{topic=\"orders\",partition=\"0\"}";
    let lost_here =
        "segmirror_applier_gap_unacknowledged_offsets{topic=\"orders\",partition=\"0\"}";

    // Shipped and applied: offsets 0-99.
    source_append(source, 100);
    let (mut shipper, _) = start_shipper(source, store, &clock);
    let r = shipper.ship_available().await;
    assert!(r.errors.is_empty(), "{r:?}");
    let (code, _, err) = applier(&once);
    assert_eq!(code, 0, "{err}");
    let s = status_json(dest);
    assert_eq!(s["partitions"][0]["local_log_end_offset"], 100);
    assert_eq!(s["partitions"][0]["gaps"], serde_json::json!([]));

    // The shipper stops; the source goes on to 250 and its retention
    // passes the shipped end (100): offsets 100-229 are gone unshipped.
    drop(shipper);
    source_append(source, 150);
    source_retention(source, 230);

    // The shipper starts again: the version it commits records the gap.
    let (mut shipper, shipper_metrics) = start_shipper(source, store, &clock);
    let r = shipper.ship_available().await;
    assert!(r.errors.is_empty(), "{r:?}");
    let p = &shipper.partitions()[0];
    assert_eq!(p.shipped_end_offset, 250);
    assert_eq!(p.gaps.len(), 1, "{:?}", p.gaps);
    assert_eq!((p.gaps[0].first_offset, p.gaps[0].last_offset), (100, 229));
    assert_eq!(p.gaps[0].cause, manifest::gaps::GapCause::Retention);
    assert_eq!(shipper::gaps::unacknowledged(&p.gaps).count(), 1);
    // `shipper status` (what the binary prints: the bucket's head).
    let bucket = shipper::status::bucket_status(store)
        .await
        .expect("status")
        .expect("shipped");
    let table = shipper::status::render_table(&bucket, 0);
    assert!(table.contains("GAPS"), "{table}");
    assert!(table.contains("100-229!"), "{table}");
    let json = serde_json::to_value(&bucket).expect("json");
    assert_eq!(json["partitions"][0]["gaps"][0]["first_offset"], 100);
    assert_eq!(json["partitions"][0]["gaps"][0]["last_offset"], 229);
    assert_eq!(
        json["partitions"][0]["gaps"][0]["acknowledged_at_ms"],
        Value::Null
    );
    // The shipper's metrics count it (a cycle renders them).
    shipper.run_cycle().await;
    let m = scrape(shipper_metrics);
    assert_eq!(m.get(lost), Some(&130.0), "{m:?}");
    assert!(
        m.get("segmirror_shipper_gap_last_detected_timestamp_seconds{topic=\"orders\",partition=\"0\"}")
            .is_some_and(|t| *t > 1_600_000_000.0),
        "{m:?}"
    );

    // The applier follows the source's log start, and says what it lost.
    let (code, _, err) = applier(&once);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("GAP orders-0: offsets 100-229"),
        "names the partition and the offsets: {err}"
    );
    let (code, table, _) = applier(&["status", "--log-dir", dest]);
    assert_eq!(code, 0);
    assert!(
        table.contains("GAPS") && table.contains("100-229!"),
        "{table}"
    );
    let s = status_json(dest);
    let row = &s["partitions"][0];
    assert_eq!(row["state"], "MIRRORING");
    assert_eq!(row["local_log_start_offset"], 230);
    assert_eq!(row["local_log_end_offset"], 250);
    assert_eq!(row["gaps"][0]["first_offset"], 100);
    assert_eq!(row["gaps"][0]["last_offset"], 229);
    assert_eq!(row["gaps"][0]["cause"], "retention");
    assert_eq!(row["gaps"][0]["seen_by"], "manifest");
    assert_eq!(row["gaps"][0]["acknowledged"], false);
    // Durable: `once` again still fails (nothing new to apply).
    let (code, _, err) = applier(&once);
    assert_eq!(code, 1, "{err}");

    // The applier's metrics count it (`applier run --metrics-addr`).
    {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let _daemon = Running(
            Command::new(env!("CARGO_BIN_EXE_applier"))
                .args([
                    "run",
                    "--log-dir",
                    dest,
                    "--bucket",
                    url,
                    "--source-cluster-id",
                    SOURCE,
                    "--topics",
                    "orders",
                    "--poll-interval",
                    "100ms",
                    "--metrics-addr",
                    &addr,
                ])
                .env("RUST_LOG", "error")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("applier run"),
        );
        wait_for_port(port);
        let sock: std::net::SocketAddr = addr.parse().expect("addr");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let m = scrape(sock);
            if m.get(lost_here) == Some(&130.0) {
                assert_eq!(
                    m.get("segmirror_applier_gap_lost_offsets{topic=\"orders\",partition=\"0\"}"),
                    Some(&130.0)
                );
                break;
            }
            assert!(Instant::now() < deadline, "no gap metric: {m:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // Acknowledging: a gap that does not exist is refused, naming those
    // that do; the right one is recorded, and `once` exits 0.
    let (code, _, err) = applier(&[
        "gaps",
        "ack",
        "--log-dir",
        dest,
        "--topic",
        "orders",
        "--partition",
        "0",
        "--offsets",
        "100-200",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no gap at offsets 100-200") && err.contains("100-229"),
        "{err}"
    );
    let (code, out, err) = applier(&[
        "gaps",
        "ack",
        "--log-dir",
        dest,
        "--topic",
        "orders",
        "--partition",
        "0",
        "--offsets",
        "100-229",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("acknowledged"), "{out}");
    let (code, _, err) = applier(&once);
    assert_eq!(code, 0, "acknowledged: {err}");
    assert_eq!(
        status_json(dest)["partitions"][0]["gaps"][0]["acknowledged"],
        true
    );
    let (_, list, _) = applier(&["gaps", "list", "--log-dir", dest]);
    assert!(
        list.contains("100-229") && list.contains("acknowledged at"),
        "{list}"
    );

    // The shipper side's acknowledgement: a new manifest version, which
    // the running shipper adopts at its next commit (keeping it).
    match shipper::gaps::acknowledge(store, &tp("orders"), 100, 229, 42)
        .await
        .expect("ack")
    {
        shipper::gaps::AckOutcome::Acknowledged { gap, .. } => {
            assert_eq!(gap.acknowledged_at_ms, Some(42));
        }
        other => panic!("{other:?}"),
    }
    // Idle (nothing new to ship), the running shipper sees it within a
    // minute: the metric the alert watches clears.
    clock.advance_ms(61_000);
    shipper.run_cycle().await;
    assert_eq!(
        scrape(shipper_metrics).get(lost),
        Some(&0.0),
        "cleared while idle"
    );
    assert_eq!(
        shipper::gaps::unacknowledged(&shipper.partitions()[0].gaps).count(),
        0
    );
    source_append(source, 20);
    let r = shipper.ship_available().await;
    assert!(r.errors.is_empty(), "{r:?}");
    let p = &shipper.partitions()[0];
    assert_eq!(p.shipped_end_offset, 270);
    assert_eq!(
        p.gaps[0].acknowledged_at_ms,
        Some(42),
        "kept by the next version"
    );
    let (code, _, err) = applier(&once);
    assert_eq!(code, 0, "{err}");

    // A later gap: the shipper stops again, retention passes 270.
    drop(shipper);
    source_append(source, 130);
    source_retention(source, 380);
    let (mut shipper, shipper_metrics) = start_shipper(source, store, &clock);
    let r = shipper.ship_available().await;
    assert!(r.errors.is_empty(), "{r:?}");
    shipper.run_cycle().await;
    assert_eq!(scrape(shipper_metrics).get(lost), Some(&110.0));
    let open: Vec<String> = shipper::gaps::unacknowledged(&shipper.partitions()[0].gaps)
        .map(|g| g.offsets_text())
        .collect();
    assert_eq!(open, ["270-379"]);
    let (code, _, err) = applier(&once);
    assert_eq!(code, 1, "a later gap fails again: {err}");
    assert!(err.contains("GAP orders-0: offsets 270-379"), "{err}");
    assert!(
        !err.contains("offsets 100-229"),
        "the first stays acknowledged: {err}"
    );
    let s = status_json(dest);
    let acked: Vec<bool> = s["partitions"][0]["gaps"]
        .as_array()
        .expect("gaps")
        .iter()
        .map(|g| g["acknowledged"].as_bool().expect("bool"))
        .collect();
    assert_eq!(acked, [true, false]);
}

/// A manifest without gaps (an older shipper): the applier's own
/// observation (the source's log start passed its log end) is the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_gap_in_the_manifest_the_applier_records_what_it_skipped() {
    let w = World::new();
    let (source, dest, store) = (&w.source, w.dest.as_str(), &w.store);
    let once = w.once();
    let once: Vec<&str> = once.iter().map(String::as_str).collect();
    source_append(source, 100);
    publish(store, source, &tp("orders"), "u1").await;
    let (code, _, err) = applier(&once);
    assert_eq!(code, 0, "{err}");
    source_append(source, 150);
    source_retention(source, 230);
    let m = publish(store, source, &tp("orders"), "u2").await;
    assert!(m.gaps.is_empty() && m.log_start_offset > 100, "{m:?}");
    let (code, _, err) = applier(&once);
    assert_eq!(code, 1, "{err}");
    let want = format!("GAP orders-0: offsets 100-{}", m.log_start_offset - 1);
    assert!(err.contains(&want), "{want} in {err}");
    let s = status_json(dest);
    let row = &s["partitions"][0];
    assert_eq!(row["local_log_start_offset"], m.log_start_offset);
    assert_eq!(row["gaps"][0]["seen_by"], "applier");
    assert_eq!(row["gaps"][0]["first_offset"], 100);
    assert_eq!(row["gaps"][0]["last_offset"], m.log_start_offset - 1);
    assert_eq!(row["gaps"][0]["acknowledged"], false);
}
