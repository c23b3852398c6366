//! `applier serve` holds a log dir's lock but takes no operator commands:
//! `applier stop` on a log dir it serves fails at once, naming it and what
//! to do, instead of waiting a minute for an answer that cannot come. A
//! record a killed `serve` left behind is cleared by the next process that
//! takes the lock, so it never speaks for another holder.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::clients::{Running, applier, free_port, wait_for_port};

fn serve(log_dir: &Path) -> Running {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(["serve", "--kafka-listen", &format!("127.0.0.1:{port}")])
        .arg("--log-dir")
        .arg(log_dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("applier serve");
    wait_for_port(port);
    Running(child)
}

fn marker(log_dir: &Path) -> std::path::PathBuf {
    log_dir.join(".segmirror/serving.json")
}

fn stop_all(log_dir: &Path) -> (i32, String, Duration) {
    let started = Instant::now();
    let (code, out) = applier(&[
        "stop",
        "--all",
        "--log-dir",
        log_dir.to_str().expect("utf-8"),
    ]);
    (code, out, started.elapsed())
}

#[test]
fn stop_on_a_log_dir_that_serve_holds_fails_at_once_naming_serve() {
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("mirror");
    std::fs::create_dir_all(&dir).expect("dir");
    let mut s = serve(&dir);
    let pid = s.0.id();
    assert!(
        marker(&dir).is_file(),
        "serve records itself while it holds the lock"
    );

    let (code, out, took) = stop_all(&dir);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!("held by `applier serve` (pid {pid})"))
            && out.contains("nothing changed"),
        "{out}"
    );
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} (the hand-off waits 1m)"
    );
    let left: Vec<_> = std::fs::read_dir(dir.join(".segmirror/commands"))
        .map(|d| d.filter_map(|e| e.ok()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "no request is left for anyone: {left:?}");

    // A clean exit removes the record; stop then performs itself.
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exited = s.0.wait().expect("wait");
    assert!(exited.success(), "serve exits 0 on SIGTERM: {exited}");
    assert!(!marker(&dir).exists(), "serve removes its record");
    let (code, out, _) = stop_all(&dir);
    assert_eq!(code, 2, "{out}");
    assert!(!out.contains("applier serve"), "{out}");
    assert!(out.contains("no mirror partitions"), "{out}");
}

#[test]
fn a_record_a_killed_serve_left_is_cleared_by_the_next_holder() {
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("mirror");
    let bucket = work.path().join("bucket");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::create_dir_all(&bucket).expect("bucket");
    let s = serve(&dir);
    drop(s); // SIGKILL: no chance to remove the record
    assert!(marker(&dir).is_file(), "a killed serve leaves its record");

    // Nobody holds the lock: stop performs itself, the record is not consulted.
    let (code, out, _) = stop_all(&dir);
    assert!(!out.contains("applier serve"), "{code}: {out}");

    // `once` takes the lock and clears the record (an empty bucket: exit 0).
    let (code, out) = applier(&[
        "once",
        "--log-dir",
        dir.to_str().expect("utf-8"),
        "--bucket",
        &format!("file://{}", bucket.display()),
        "--source-cluster-id",
        "src",
        "--cluster-id",
        "dst",
        "--topics",
        "orders",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(!marker(&dir).exists(), "once cleared the stale record");
}
