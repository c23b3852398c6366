//! Kill -9 in the middle of `applier stop --all` and `applier start --all`
//! of 300 partitions (issue 31: every partition's record is an entry of
//! one journal, appended for all of them at each barrier). After every
//! kill, `applier status` reads every partition (a torn tail of the journal
//! is not damage) in a state it was in or was moving to; the command run
//! again finishes the job; at the end the mirror is the source byte for
//! byte.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use segmirror_reliability::bins::Bins;
use segmirror_reliability::source::{SourceSpec, SourceWriter};

const PARTITIONS: usize = 300;

fn run(program: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Every partition's state, by `applier status --json`.
fn states(bins: &Bins, dest: &str) -> std::collections::BTreeMap<String, usize> {
    let (ok, out) = run(&bins.applier, &["status", "--log-dir", dest, "--json"]);
    assert!(ok, "status after a kill: {out}");
    let json = out.lines().find(|l| l.starts_with('{')).expect("json");
    let v: serde_json::Value = serde_json::from_str(json).expect("json");
    let mut counts = std::collections::BTreeMap::new();
    for p in v["partitions"].as_array().expect("partitions") {
        *counts
            .entry(p["state"].as_str().expect("state").to_string())
            .or_default() += 1;
    }
    counts
}

/// Starts `args`, kills it with SIGKILL after `after`; true when it had
/// already finished.
fn kill_after(program: &Path, args: &[&str], after: Duration) -> bool {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(after);
    let finished = child.try_wait().expect("wait").is_some();
    let _ = child.kill();
    let _ = child.wait();
    finished
}

/// Runs `args` killed after `first`, then after ever longer delays, until
/// a run finishes first; after each kill every partition must be in one of
/// `allowed`. Returns the kills, and those that left two states.
fn kill_until_done(
    bins: &Bins,
    dst: &str,
    args: &[&str],
    first: Duration,
    allowed: &[&str],
) -> (usize, usize) {
    let (mut kills, mut mixed, mut delay) = (0, 0, first);
    while !kill_after(&bins.applier, args, delay) {
        kills += 1;
        let s = states(bins, dst);
        mixed += usize::from(s.len() > 1);
        assert_eq!(s.values().sum::<usize>(), PARTITIONS, "{s:?}");
        assert!(
            s.keys().all(|k| allowed.contains(&k.as_str())),
            "after a kill during {}: {s:?}",
            args[0]
        );
        delay = delay * 3 / 2 + Duration::from_millis(10);
    }
    (kills, mixed)
}

#[test]
fn kill_9_in_the_middle_of_stop_and_start_of_300_partitions_leaves_each_in_a_state_it_had_or_was_moving_to()
 {
    let bins = Bins::get().expect("service binaries");
    let work = tempfile::tempdir().expect("tempdir");
    let (source, dest, bucket) = (
        work.path().join("source"),
        work.path().join("dest"),
        work.path().join("bucket"),
    );
    std::fs::create_dir_all(&bucket).expect("bucket");
    let mut w = SourceWriter::open(&source, SourceSpec::small(PARTITIONS)).expect("source");
    w.round(3).expect("write");
    w.flush().expect("flush");
    drop(w);
    let url = format!("file://{}", bucket.display());
    let (src, dst) = (source.display().to_string(), dest.display().to_string());
    let (ok, out) = run(
        &bins.shipper,
        &[
            "once",
            "--log-dir",
            &src,
            "--bucket",
            &url,
            "--cluster-id",
            "src",
            "--create-bucket",
        ],
    );
    assert!(ok, "{out}");
    let identity = [
        "--bucket",
        &url,
        "--source-cluster-id",
        "src",
        "--cluster-id",
        "dst",
    ];
    let once: Vec<&str> = ["once", "--log-dir", &dst, "--topics", ".*"]
        .into_iter()
        .chain(identity)
        .collect();
    let (ok, out) = run(&bins.applier, &once);
    assert!(ok, "{out}");
    assert_eq!(
        states(&bins, &dst).get("MIRRORING"),
        Some(&PARTITIONS),
        "first apply"
    );
    let stop = ["stop", "--log-dir", &dst, "--all"];
    let start: Vec<&str> = ["start", "--log-dir", &dst, "--all"]
        .into_iter()
        .chain(identity)
        .collect();
    let (mut kills, mut mixed) = (0usize, 0usize);
    for round in 0..3u64 {
        // Stop, then start, each killed at growing delays until one run
        // finishes, then run again to the end.
        let first = Duration::from_millis(5 + round * 7);
        let (k, m) = kill_until_done(
            &bins,
            &dst,
            &stop,
            first,
            &["MIRRORING", "STOPPING", "STOPPED"],
        );
        (kills, mixed) = (kills + k, mixed + m);
        let (ok, out) = run(&bins.applier, &stop);
        assert!(ok, "{out}");
        assert_eq!(states(&bins, &dst).get("STOPPED"), Some(&PARTITIONS));
        let (k, m) = kill_until_done(&bins, &dst, &start, first, &["STOPPED", "PREPARING"]);
        (kills, mixed) = (kills + k, mixed + m);
        let (ok, out) = run(&bins.applier, &start);
        assert!(ok, "{out}");
        let (ok, out) = run(&bins.applier, &once);
        assert!(ok, "{out}");
        assert_eq!(
            states(&bins, &dst).get("MIRRORING"),
            Some(&PARTITIONS),
            "round {round}"
        );
    }
    assert!(kills >= 3, "the commands were killed {kills} times");
    let (ok, out) = run(&bins.kafkalog, &["compare", &src, &dst]);
    assert!(ok, "{out}");
    println!(
        "{kills} kills during stop --all and start --all of {PARTITIONS} partitions, {mixed} of them left partitions in two states; compare: {}",
        out.lines().last().unwrap_or("")
    );
}
