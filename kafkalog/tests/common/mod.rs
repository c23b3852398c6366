//! Shared helpers for kafkalog's integration tests: running the `kafkalog`
//! binary. (The kafka-python fixtures are `segmirror_testkit::kafka_python`.)
#![allow(dead_code, unreachable_pub)]

use std::process::Command;

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
