//! A SIGKILL of `applier run` in the middle of a range it was appending as
//! the object downloaded (issue 16): once the partition is opened again the
//! log ends where that range starts, a boundary the manifest names; the
//! restarted applier then fetches the range again and the mirror holds
//! every offset once, byte for byte the source's log.
//!
//! The objects come from moto through a TCP proxy that forwards responses
//! at 2 MiB/s, so the kill lands while the range streams in. Needs the S3
//! test server (`eval "$(bash tests/s3-server.sh start)"`, or `bash
//! scripts/test.sh`) unless `SEGMIRROR_SKIP_S3=1`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use applier::applying::{APPLYING_FILE, Applying};
use applier::mirror::Mirror;
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::{LogConfig, LogDir, TopicPartition};
use manifest::clock::SystemClock;
use segmirror_reliability::bins::Bins;
use segmirror_reliability::netfaults::s3_env;
use segmirror_reliability::proxy::{FaultProxy, ProxyPlan};

const SOURCE: &str = "kill-src";
const TOPIC_ID: &str = "vVw7a5a_QkWcK7JvBD2t8Q";

/// 2,400 batches of 10 records of 1 KiB: about 24.6 MiB in one segment.
fn write_source(dir: &Path, tp: &TopicPartition) {
    let d = LogDir::open(dir).expect("source dir");
    let mut log = d
        .open_or_create_partition(
            tp,
            Some(TOPIC_ID.parse().expect("id")),
            LogConfig::default(),
        )
        .expect("partition");
    for b in 0..2400usize {
        let records: Vec<RecordInput> = (0..10)
            .map(|i| RecordInput {
                timestamp: 1_700_000_000_000 + (b * 10 + i) as i64,
                key: Some(format!("k{b}-{i}").into_bytes()),
                value: Some(vec![b'a' + (b % 26) as u8; 1024]),
                headers: vec![],
            })
            .collect();
        let mut batch = build_batch(&BatchSpec::new(0, 5), &records).expect("batch");
        log.append_as_leader(&mut batch, 5).expect("append");
    }
    log.close().expect("close");
}

fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{what} failed: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_in_the_middle_of_a_streamed_range_leaves_nothing_of_it() {
    if segmirror_testkit::needs::s3().is_none() {
        return;
    }
    let (bucket, endpoint) =
        s3_env().expect("AWS_ENDPOINT_URL: eval \"$(bash tests/s3-server.sh start)\"");
    let bins = Bins::get().expect("binaries");
    let tmp = tempfile::tempdir().expect("tmp");
    let (src, dest) = (tmp.path().join("source"), tmp.path().join("dest"));
    let tp = TopicPartition::new("big", 0).expect("tp");
    write_source(&src, &tp);
    let prefix = format!("kill-{}", bucket::upload_id::fresh_string());
    let url = format!("s3://{bucket}/{prefix}");
    // Two objects: 16 MiB, then the rest.
    run_ok(
        Command::new(&bins.shipper).args([
            "once",
            "--log-dir",
            src.to_str().expect("utf-8"),
            "--bucket",
            &url,
            "--cluster-id",
            SOURCE,
            "--max-object-size",
            "16MiB",
            "--create-bucket",
        ]),
        "shipper once",
    );

    let upstream: SocketAddr = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_socket_addrs()
        .expect("endpoint")
        .next()
        .expect("endpoint address");
    let proxy = FaultProxy::start(upstream, ProxyPlan::throttled(2 << 20))
        .await
        .expect("proxy");
    let dest_s = dest.to_str().expect("utf-8").to_string();
    let applier_args = |cmd: &mut Command| {
        cmd.args([
            "--log-dir",
            &dest_s,
            "--bucket",
            &url,
            "--source-cluster-id",
            SOURCE,
            "--topics",
            ".*",
            "--stream-above",
            "1MiB",
        ]);
    };
    let mut run = Command::new(&bins.applier);
    run.arg("run");
    applier_args(&mut run);
    let mut child = run
        .env("AWS_ENDPOINT_URL", format!("http://{}", proxy.addr()))
        .env("AWS_ENDPOINT_URL_S3", format!("http://{}", proxy.addr()))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("applier run");

    // Kill once the marker names a range and a few MiB of it are written.
    let segment = dest.join(tp.dir_name()).join("00000000000000000000.log");
    let marker_path = dest.join(tp.dir_name()).join(APPLYING_FILE);
    let deadline = Instant::now() + Duration::from_secs(120);
    let size_at_kill = loop {
        let size = std::fs::metadata(&segment).map(|m| m.len()).unwrap_or(0);
        if marker_path.exists() && size > (3 << 20) {
            child.kill().expect("SIGKILL");
            break size;
        }
        assert!(
            Instant::now() < deadline,
            "the applier never got into a range"
        );
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the applier exited"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = child.wait();
    drop(proxy);
    let marker: Applying =
        serde_json::from_slice(&std::fs::read(&marker_path).expect("marker")).expect("marker json");

    // The manifest names the range the marker names.
    let store =
        segmirror_reliability::netfaults::s3_manifest_store(&bucket, &endpoint, &prefix, SOURCE)
            .expect("store");
    let pk = manifest::layout::PartitionKey {
        tp: tp.clone(),
        topic_id: TOPIC_ID.parse().expect("id"),
    };
    let m = store
        .latest_manifest(&pk, None)
        .await
        .expect("manifest")
        .expect("a manifest");
    let r = m
        .ranges
        .iter()
        .find(|r| r.key == marker.key)
        .expect("the marker names a shipped range");
    assert_eq!(
        (marker.base_offset, marker.last_offset),
        (r.base_offset, r.last_offset)
    );
    assert_eq!(marker.log_end_before, r.base_offset, "{marker:?}");
    assert!(
        size_at_kill
            < r.bytes
                + m.ranges
                    .iter()
                    .filter(|x| x.last_offset < r.base_offset)
                    .map(|x| x.bytes)
                    .sum::<u64>(),
        "killed after the range was whole: {size_at_kill}"
    );

    // Opening the partition cuts the range: shown on a copy, in process,
    // with the function `applier run` and `once` call at open.
    let copy = tmp.path().join("dest-copy");
    run_ok(Command::new("cp").arg("-a").arg(&dest).arg(&copy), "cp -a");
    {
        let d = LogDir::open(&copy).expect("dest dir");
        let log = d
            .open_partition(&tp, applier::engine::mirror_log_config())
            .expect("partition");
        let leo_at_kill = log.log_end_offset();
        assert!(
            leo_at_kill > r.base_offset && leo_at_kill <= r.last_offset,
            "the kill landed inside the range: log end {leo_at_kill}, range {}..={}",
            r.base_offset,
            r.last_offset
        );
        let record = partdir::record::read(log.dir())
            .expect("record")
            .expect("a record");
        let mut mirror = Mirror::new(tp.clone(), log, record, Arc::new(SystemClock));
        let cut = mirror.undo_partial_range().expect("undo");
        assert_eq!(cut, leo_at_kill - r.base_offset, "offsets cut");
        assert_eq!(
            mirror.log.log_end_offset(),
            r.base_offset,
            "the log ends at the range's start"
        );
        assert!(
            !copy.join(tp.dir_name()).join(APPLYING_FILE).exists(),
            "the marker is cleared"
        );
        mirror.log.close().expect("close");
    }

    // Restarted (at full speed), the mirror completes, byte for byte.
    let mut once = Command::new(&bins.applier);
    once.arg("once");
    applier_args(&mut once);
    let said = run_ok(once.env("RUST_LOG", "warn"), "applier once");
    assert!(
        said.contains("cut a range that was being applied"),
        "the restart names the cut: {said}"
    );
    assert!(!marker_path.exists(), "the marker is cleared");
    let compared = run_ok(
        Command::new(&bins.kafkalog).args([
            "compare",
            src.to_str().expect("utf-8"),
            dest.to_str().expect("utf-8"),
        ]),
        "kafkalog compare",
    );
    assert!(compared.contains("identical"), "{compared}");
    println!(
        "killed at {size_at_kill} bytes of the segment, inside range {}..={}; cut back to {}; compare: {}",
        r.base_offset,
        r.last_offset,
        r.base_offset,
        compared.trim()
    );
}
