//! Shared helpers for kafkalog's integration tests: the kafka-python
//! fixtures (an implementation of Kafka's format independent of ours) and
//! the `kafkalog` binary.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The Python interpreter of `tests/.venv`, created on first use by
/// `tests/fixtures/setup.sh` (kafka-python and its codecs).
pub fn fixture_python() -> PathBuf {
    let root = workspace_root();
    let python = root.join("tests/.venv/bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import kafka, snappy, lz4, zstandard, crc32c"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        let status = Command::new("bash")
            .arg(root.join("tests/fixtures/setup.sh"))
            .status()
            .expect("run tests/fixtures/setup.sh");
        assert!(
            status.success(),
            "tests/fixtures/setup.sh failed: kafka-python fixtures unavailable"
        );
    }
    python
}

/// Runs a fixture script with the venv's Python; panics with its output on failure.
pub fn run_fixture(script: &str, args: &[&str]) -> Output {
    let out = Command::new(fixture_python())
        .arg(workspace_root().join("tests/fixtures").join(script))
        .args(args)
        .output()
        .expect("run fixture script");
    assert!(
        out.status.success(),
        "{script} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Generates the kafka-python log dir into `dir` and returns its expected.json.
pub fn generate_kafka_logdir(dir: &Path) -> serde_json::Value {
    run_fixture(
        "gen_kafka_logdir.py",
        &["--out", dir.to_str().expect("utf-8 path"), "--seed", "1"],
    );
    let text = std::fs::read_to_string(dir.join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}

/// The `kafkalog` binary.
pub fn kafkalog() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kafkalog"))
}

/// Runs `kafkalog` with `args`, returning (exit code, stdout, stderr).
pub fn run_kafkalog(args: &[&str]) -> (i32, String, String) {
    let out = kafkalog().args(args).output().expect("run kafkalog");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `kafkalog` feeding `stdin`.
pub fn run_kafkalog_with_input(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    use std::io::Write;
    let mut child = kafkalog()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn kafkalog");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .or_else(|e| match e.kind() {
            // The tool may exit (refusing) before reading its input.
            std::io::ErrorKind::BrokenPipe => Ok(()),
            _ => Err(e),
        })
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
