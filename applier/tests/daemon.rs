//! The `applier` binary end to end on a `file://` bucket: `run` as a
//! daemon, operator commands handed to it while it runs, `status --json`,
//! and `stop` performing the failover itself when no daemon runs.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{SOURCE, file_bucket, produce, publish, topic_id, tp};
use kafkalog::{LogConfig, LogDir};

fn applier(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(args)
        .output()
        .expect("run applier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn status(dest: &Path) -> serde_json::Value {
    let (code, out, err) = applier(&[
        "status",
        "--log-dir",
        dest.to_str().expect("utf-8"),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("status json")
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_reach_a_running_daemon_and_stop_works_without_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, dest, bucket) = (
        dir.path().join("source"),
        dir.path().join("dest"),
        dir.path().join("bucket"),
    );
    let (bucket_url, store) = file_bucket(&bucket);
    {
        let d = LogDir::open(&source).expect("source");
        for t in ["orders", "audit"] {
            let mut log = d
                .open_or_create_partition(&tp(t), Some(topic_id()), LogConfig::default())
                .expect("create");
            produce(&mut log, 40, 3);
        }
    }
    publish(&store, &source, &tp("orders"), "u1").await;
    publish(&store, &source, &tp("audit"), "u1").await;

    let dest_s = dest.to_str().expect("utf-8").to_string();
    let daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_applier"))
            .args([
                "run",
                "--log-dir",
                &dest_s,
                "--bucket",
                &bucket_url,
                "--source-cluster-id",
                SOURCE,
                "--topics",
                ".*",
                "--poll-interval-ms",
                "100",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn daemon"),
    );
    wait_for("both partitions mirrored", Duration::from_secs(30), || {
        if !dest.join("orders-0").exists() || !dest.join("audit-0").exists() {
            return false;
        }
        let s = status(&dest);
        let rows = s["partitions"].as_array().cloned().unwrap_or_default();
        rows.len() == 2
            && rows.iter().all(|r| {
                r["state"] == "MIRRORING"
                    && r["local_log_end_offset"] == 40
                    && r["lag_offsets"] == 0
            })
    });
    // Handed to the daemon, which holds the log dir.
    let (code, out, err) = applier(&["pause", "--log-dir", &dest_s, "--topic", "orders"]);
    assert_eq!((code, out.as_str()), (0, "orders-0: PAUSED\n"), "{err}");
    let (code, _, err) = applier(&["resume", "--log-dir", &dest_s, "--topic", "audit"]);
    assert_eq!(code, 0, "resume of a mirroring partition is a no-op: {err}");
    let (code, _, err) = applier(&["pause", "--log-dir", &dest_s, "--topic", "nosuch"]);
    assert_eq!(code, 1);
    assert!(err.contains("nosuch"), "{err}");
    let (code, out, err) = applier(&["stop", "--log-dir", &dest_s, "--topic", "audit"]);
    assert_eq!((code, out.as_str()), (0, "audit-0: STOPPED\n"), "{err}");
    let s = status(&dest);
    let audit = s["partitions"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["topic"] == "audit")
        .cloned()
        .expect("audit");
    assert_eq!(
        (
            audit["state"].clone(),
            audit["writable"].clone(),
            audit["lme"].clone()
        ),
        ("STOPPED".into(), true.into(), 3.into())
    );
    let (code, _, err) = applier(&["pause", "--log-dir", &dest_s, "--topic", "audit"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot pause: partition is STOPPED"), "{err}");
    // A 2 GiB (sparse) request file dropped in the command channel is
    // refused without being read whole: the daemon's peak RSS stays far
    // below it (read whole, it reaches 2 GiB), it stays up and performs the
    // next command.
    let huge = applier::commands::commands_dir(&dest).join("huge.request.json");
    std::fs::File::create(&huge)
        .and_then(|f| f.set_len(2 << 30))
        .expect("sparse request file");
    wait_for(
        "the oversized request dropped",
        Duration::from_secs(60),
        || !huge.exists(),
    );
    let peak_kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", daemon.0.id()))
        .expect("daemon status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    assert!(peak_kib < 512 * 1024, "daemon peak RSS {peak_kib} KiB");
    let (code, out, err) = applier(&["resume", "--log-dir", &dest_s, "--topic", "orders"]);
    assert_eq!(code, 0, "the daemon after an oversized request: {out}{err}");
    drop(daemon);

    // No daemon: the command performs the failover itself.
    let (code, out, err) = applier(&["stop", "--log-dir", &dest_s, "--all"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("orders-0: STOPPED") && out.contains("audit-0: STOPPED"),
        "{out}"
    );
    let d = LogDir::open(&dest).expect("dest");
    let mut log = d
        .open_partition(&tp("orders"), LogConfig::default())
        .expect("open");
    assert!(log.read_only_reason().expect("guard").is_none());
    produce(&mut log, 5, 4);
    assert_eq!(log.log_end_offset(), 45);
}

/// (Help and its examples: `commands_cli.rs`.)
#[test]
fn config_check_names_the_bad_field() {
    let (code, _, err) = applier(&[
        "config",
        "check",
        "--log-dir",
        "/tmp/x",
        "--bucket",
        "gs://nope",
        "--source-cluster-id",
        "a",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("config field `bucket`"), "{err}");
}
