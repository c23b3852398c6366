//! README.md's quickstart, run as written: every ```` ```bash ```` block
//! between the `quickstart: begin` and `quickstart: end` markers, in order,
//! in one `bash` process under `set -euo pipefail`, in an empty temporary
//! directory, with the freshly built `shipper`, `applier` and `kafkalog`
//! first on `PATH` (the install block is above the markers). The README
//! cannot drift from what works: a changed flag, output or behaviour that
//! breaks a block fails this test.
//!
//! What a user cares about is checked afterwards, on what the blocks left:
//! both log dirs hold the same 140 records (`order-1` .. `order-140` at
//! offsets 0 .. 139, each exactly once: nothing lost, nothing cut, the
//! refused write absent), dc-a is the writable primary again and dc-b its
//! mirror with no lag, kcat read the mirror, and the write to the
//! read-only mirror was refused.
//!
//! The blocks need kcat. Without it the test fails saying how to install it,
//! unless `SEGMIRROR_SKIP_KCAT=1` marks it skipped (it then says so).
//! `BROKER` (which the README's first block reads, defaulting to
//! 127.0.0.1:9092) is set to a free port; the `bash` process leads its own
//! process group, which the test kills afterwards, so a daemon a failed
//! block left behind never outlives the test.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use segmirror_reliability::bins::Bins;

const BEGIN: &str = "<!-- quickstart: begin";
const END: &str = "<!-- quickstart: end";
/// Far more than a run takes (about 3 s on a debug build): a hung
/// block (a kcat that never returns) fails the test instead of hanging it.
const DEADLINE: Duration = Duration::from_secs(300);

/// The bodies of the ```` ```bash ```` blocks between the markers, in order.
fn quickstart_blocks(readme: &str) -> Result<Vec<String>, String> {
    let begin = readme
        .find(BEGIN)
        .ok_or_else(|| format!("README.md has no {BEGIN:?} marker"))?;
    let end = readme[begin..]
        .find(END)
        .map(|i| begin + i)
        .ok_or_else(|| format!("README.md has no {END:?} marker after the begin marker"))?;
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in readme[begin..end].lines() {
        match current.as_mut() {
            None if line.trim_end() == "```bash" => current = Some(Vec::new()),
            None if line.starts_with("```") => {
                return Err(format!(
                    "a fenced block in the quickstart that is not ```bash: {line:?}"
                ));
            }
            None => {}
            Some(body) if line.trim_end() == "```" => {
                blocks.push(body.join("\n"));
                current = None;
            }
            Some(body) => body.push(line),
        }
    }
    if current.is_some() {
        return Err("an unclosed ```bash block in the quickstart".into());
    }
    Ok(blocks)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `(offset, value)` of every record of orders-0 in `log_dir`, from
/// `kafkalog dump --records`.
fn records(bins: &Bins, log_dir: &Path) -> Vec<(i64, String)> {
    let out = Command::new(&bins.kafkalog)
        .args(["dump", "--records", "--topic", "orders", "--partition", "0"])
        .arg("--log-dir")
        .arg(log_dir)
        .output()
        .expect("kafkalog dump");
    assert!(out.status.success(), "kafkalog dump: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let offset = l
                .strip_prefix("| offset: ")?
                .split(' ')
                .next()?
                .parse()
                .ok()?;
            let value = l.split(" payload: ").nth(1)?.to_string();
            Some((offset, value))
        })
        .collect()
}

/// The one partition of `applier status --json` for `log_dir`.
fn partition_status(bins: &Bins, log_dir: &Path) -> serde_json::Value {
    let out = Command::new(&bins.applier)
        .args(["status", "--json", "--log-dir"])
        .arg(log_dir)
        .output()
        .expect("applier status");
    assert!(out.status.success(), "applier status: {out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    let parts = v["partitions"].as_array().expect("partitions").clone();
    assert_eq!(
        parts.len(),
        1,
        "one partition in {}: {v}",
        log_dir.display()
    );
    parts[0].clone()
}

#[test]
fn the_readme_quickstart_runs_as_written() {
    if !segmirror_testkit::needs::kcat() {
        return;
    }
    let root = segmirror_testkit::workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let blocks = quickstart_blocks(&readme).unwrap_or_else(|e| panic!("{e}"));
    // Setup, produce, ship and apply, consume, failover, failback, switch
    // back, mirror again: a README that lost a step fails here.
    assert!(
        blocks.len() >= 8,
        "the quickstart has {} bash blocks",
        blocks.len()
    );
    assert!(
        !blocks.iter().any(|b| b.contains("cargo ")),
        "the install step belongs above the quickstart markers"
    );

    let bins = Bins::get().expect("binaries");
    let bin_dir = bins.applier.parent().expect("bin dir").to_path_buf();
    let work = tempfile::tempdir().expect("tempdir");
    let mut script = String::from("set -euo pipefail\n");
    for (i, b) in blocks.iter().enumerate() {
        // On both streams, so that either one shows where a failure was.
        let mark = format!("### README quickstart block {}", i + 1);
        script.push_str(&format!("echo '{mark}'; echo '{mark}' >&2\n"));
        script.push_str(b);
        script.push('\n');
    }
    let path = std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let broker = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.path())
        .env("PATH", path)
        .env("BROKER", &broker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("bash");
    let group = child.id();
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if started.elapsed() > DEADLINE {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Whatever a block left running (the dc-b daemon when a later block
    // failed, or everything on a timeout) goes with the group.
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let out = out_reader.join().expect("stdout reader");
    let err = err_reader.join().expect("stderr reader");
    let status = status.unwrap_or_else(|| {
        panic!(
            "the quickstart did not finish within {DEADLINE:?}\n--- stdout\n{out}\n--- stderr\n{err}"
        )
    });
    let daemon_log = std::fs::read_to_string(work.path().join("segmirror-quickstart/dc-b.log"))
        .unwrap_or_default();
    assert!(
        status.success(),
        "the README quickstart failed ({status}); the last '### README quickstart block N' line \
         names the block\n--- stdout\n{out}\n--- stderr\n{err}\n--- dc-b.log (applier run)\n{daemon_log}"
    );

    let qs = work.path().join("segmirror-quickstart");
    let want: Vec<(i64, String)> = (1..=140).map(|i| (i - 1, format!("order-{i}"))).collect();
    assert_eq!(records(&bins, &qs.join("dc-a")), want, "dc-a's records");
    assert_eq!(records(&bins, &qs.join("dc-b")), want, "dc-b's records");
    let a = partition_status(&bins, &qs.join("dc-a"));
    assert_eq!(a["state"], "STOPPED", "dc-a is the primary again: {a}");
    assert_eq!(a["writable"], true, "{a}");
    let b = partition_status(&bins, &qs.join("dc-b"));
    assert_eq!(b["state"], "MIRRORING", "dc-b mirrors dc-a again: {b}");
    assert_eq!(b["source_cluster_id"], "dc-a", "{b}");
    assert_eq!(b["local_log_end_offset"], 140, "{b}");
    assert_eq!(b["lag_offsets"], 0, "{b}");
    for (what, needle) in [
        ("kcat read the mirror", "99 order-100\n"),
        (
            "the write to the mirror was refused",
            "refused: dc-b is a read-only mirror\n",
        ),
        ("dc-a and dc-b compare identical", "identical\n"),
    ] {
        assert!(
            out.contains(needle),
            "{what}: no {needle:?} in\n--- stdout\n{out}\n--- stderr\n{err}"
        );
    }
    // Neither the failback nor the switch back cuts a record: both plans
    // keep everything (a cut fetched again would leave the same records
    // behind, so the records alone cannot tell).
    let plans: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("orders-0 ") && l.contains(" start "))
        .collect();
    assert_eq!(plans.len(), 2, "two `applier plan` lines in\n{out}");
    for p in plans {
        assert!(p.contains("keep everything"), "a plan that cuts: {p}");
    }
    assert!(
        err.contains("Policy violation"),
        "kcat names why the write to the mirror was refused\n--- stderr\n{err}"
    );
}

/// The install step cannot run here (a release build of the workspace), so
/// its one promise is checked instead: it builds, and puts on `PATH`, every
/// binary the quickstart calls.
#[test]
fn the_install_step_builds_every_binary_the_quickstart_calls() {
    let readme = std::fs::read_to_string(segmirror_testkit::workspace_root().join("README.md"))
        .expect("README.md");
    let install = readme
        .split("\n## Install\n")
        .nth(1)
        .and_then(|s| s.split(BEGIN).next())
        .expect("an ## Install section before the quickstart");
    let block = install
        .split("```bash\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .expect("a bash block in ## Install");
    let build = block
        .lines()
        .find(|l| l.starts_with("cargo build --release"))
        .expect("cargo build --release in the install block");
    assert!(
        block.contains(r#"export PATH="$PWD/target/release:$PATH""#),
        "{block}"
    );
    let blocks = quickstart_blocks(&readme).unwrap_or_else(|e| panic!("{e}"));
    for bin in ["shipper", "applier", "kafkalog"] {
        let called = blocks
            .iter()
            .flat_map(|b| b.lines())
            .any(|l| l.split_whitespace().any(|w| w == bin));
        assert!(called, "the quickstart no longer calls {bin}");
        assert!(
            build
                .split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w == ["-p", bin]),
            "the install step does not build {bin}: {build}"
        );
    }
}

#[test]
fn blocks_are_extracted_between_the_markers_in_order() {
    let readme = "```bash\nnot this\n```\n<!-- quickstart: begin -->\ntext\n```bash\none\ntwo\n```\nmore\n```bash\nthree\n```\n<!-- quickstart: end -->\n```bash\nnor this\n```\n";
    assert_eq!(
        quickstart_blocks(readme),
        Ok(vec!["one\ntwo".to_string(), "three".to_string()])
    );
    assert!(quickstart_blocks("no markers").is_err());
    assert!(
        quickstart_blocks("<!-- quickstart: begin -->\n```bash\nx\n<!-- quickstart: end -->")
            .is_err()
    );
    assert!(
        quickstart_blocks("<!-- quickstart: begin -->\n```sh\nx\n```\n<!-- quickstart: end -->")
            .is_err()
    );
}
