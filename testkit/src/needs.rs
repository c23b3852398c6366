//! What a test needs from outside the workspace, one function per
//! dependency: [`kcat`], [`python`] (the clients of `tests/.venv`) and
//! [`s3`] (the S3 test server).
//!
//! Invariant: a test never passes by silently doing nothing. Each function
//! either hands the test its dependency, or says the test is skipped
//! because the operator asked for it (`SEGMIRROR_SKIP_KCAT=1`,
//! `SEGMIRROR_SKIP_PYTHON=1`, `SEGMIRROR_SKIP_S3=1`), or panics — failing
//! the test — with the command that installs or starts what is missing
//! (`bash scripts/test.sh` does all of it). A skip variable skips the
//! dependency's tests whether or not it is installed: it is an explicit
//! choice, never inferred from what happens to be on the machine.
//!
//! A skip is printed on stderr (`cargo test -- --nocapture` shows it) and,
//! when `SEGMIRROR_SKIP_LOG` names a file, appended to it as one line, so
//! that `scripts/test.sh` can print what the whole run skipped.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;

use crate::workspace_root;

/// Set to 1 to skip the tests that run kcat.
pub const SKIP_KCAT_VAR: &str = "SEGMIRROR_SKIP_KCAT";
/// Set to 1 to skip the tests that run the Python clients of `tests/.venv`.
pub const SKIP_PYTHON_VAR: &str = "SEGMIRROR_SKIP_PYTHON";
/// Set to 1 to skip the tests (and the backends) that need the S3 test server.
pub const SKIP_S3_VAR: &str = "SEGMIRROR_SKIP_S3";
/// A file each skip appends one line to (set by `scripts/test.sh`).
pub const SKIP_LOG_VAR: &str = "SEGMIRROR_SKIP_LOG";
/// The variable naming the S3 test bucket.
pub const S3_BUCKET_VAR: &str = "SEGMIRROR_TEST_S3_BUCKET";

/// The modules the Python fixtures import.
const PYTHON_MODULES: &str =
    "import kafka, snappy, lz4, zstandard, crc32c, confluent_kafka, aiokafka, pyarrow, duckdb";

/// One dependency: its skip variable and what provides it.
struct Need {
    what: &'static str,
    skip_var: &'static str,
    how: &'static str,
}

const KCAT: Need = Need {
    what: "kcat",
    skip_var: SKIP_KCAT_VAR,
    how: "install it with `apt-get install -y kcat` (or run the tests with `bash scripts/test.sh`)",
};

const PYTHON: Need = Need {
    what: "the Python clients of tests/.venv (kafka-python, confluent-kafka, aiokafka, pyarrow, duckdb)",
    skip_var: SKIP_PYTHON_VAR,
    how: "create them with `bash tests/fixtures/setup.sh` (or run the tests with `bash scripts/test.sh`)",
};

const S3: Need = Need {
    what: "the S3 test server (SEGMIRROR_TEST_S3_BUCKET and the AWS_* variables)",
    skip_var: SKIP_S3_VAR,
    how: "start it with `eval \"$(bash tests/s3-server.sh start)\"` (or run the tests with `bash scripts/test.sh`)",
};

/// What to do about a dependency, decided from the skip variable's value
/// and whether the dependency is present.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Run,
    Skip,
    Fail,
}

fn decide(skip_value: Option<&str>, present: impl FnOnce() -> bool) -> Verdict {
    match skip_value {
        Some("1") => Verdict::Skip,
        _ if present() => Verdict::Run,
        _ => Verdict::Fail,
    }
}

/// Runs the test (true), skips it (false, printed and logged) or panics.
fn check(need: &Need, present: impl FnOnce() -> bool) -> bool {
    let skip = std::env::var(need.skip_var).ok();
    match decide(skip.as_deref(), present) {
        Verdict::Run => true,
        Verdict::Skip => {
            record_skip(need);
            false
        }
        Verdict::Fail => panic!("{}", missing(need)),
    }
}

/// The failure of a test whose dependency is missing.
fn missing(need: &Need) -> String {
    format!(
        "this test needs {}, which is missing: {}; or set {}=1 to skip it",
        need.what, need.how, need.skip_var
    )
}

/// The running test's name (libtest names the thread after it) and binary.
fn test_name() -> String {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("?");
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // `flood-0123abcd` -> `flood`.
    let exe = exe.rsplit_once('-').map_or(exe.as_str(), |(b, _)| b);
    format!("{exe}::{name}")
}

fn record_skip(need: &Need) {
    let line = format!(
        "{}: skipped by {}=1 (what needs {})",
        test_name(),
        need.skip_var,
        need.what
    );
    eprintln!("{line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VAR) {
        // One write of one line in append mode: concurrent tests do not
        // interleave.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            panic!("cannot record the skip in {}: {e}", path.to_string_lossy());
        }
    }
}

/// Whether to run a test that runs kcat: true when kcat is on PATH; false
/// (the test returns at once) when `SEGMIRROR_SKIP_KCAT=1`; panics when
/// kcat is missing and not skipped.
pub fn kcat() -> bool {
    check(&KCAT, || {
        Command::new("kcat")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The interpreter of `tests/.venv` with every client module, or `None`
/// (the test returns) when `SEGMIRROR_SKIP_PYTHON=1`; panics when a module
/// is missing and not skipped.
pub fn python() -> Option<PathBuf> {
    let python = workspace_root().join("tests/.venv/bin/python");
    check(&PYTHON, || {
        Command::new(&python)
            .args(["-c", PYTHON_MODULES])
            .output()
            .is_ok_and(|o| o.status.success())
    })
    .then_some(python)
}

/// The S3 test server's bucket (`SEGMIRROR_TEST_S3_BUCKET`; the endpoint
/// and credentials are the AWS variables), or `None` (the test returns, or
/// runs without its S3 backend) when `SEGMIRROR_SKIP_S3=1`; panics when it
/// is not set and not skipped.
pub fn s3() -> Option<String> {
    let bucket = std::env::var(S3_BUCKET_VAR).ok();
    check(&S3, || bucket.is_some()).then(|| bucket.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_skip_variable_set_to_1_skips_and_a_missing_dependency_fails() {
        // (skip variable, present) -> verdict
        let table = [
            (None, true, Verdict::Run),
            (None, false, Verdict::Fail),
            (Some("1"), true, Verdict::Skip),
            (Some("1"), false, Verdict::Skip),
            (Some("0"), false, Verdict::Fail),
            (Some(""), false, Verdict::Fail),
            (Some("yes"), true, Verdict::Run),
        ];
        for (skip, present, want) in table {
            assert_eq!(decide(skip, || present), want, "{skip:?} {present}");
        }
    }

    #[test]
    fn the_failure_names_the_install_command_and_the_skip_variable() {
        for (need, install) in [
            (&KCAT, "apt-get install -y kcat"),
            (&PYTHON, "bash tests/fixtures/setup.sh"),
            (&S3, "bash tests/s3-server.sh start"),
        ] {
            let text = missing(need);
            assert!(
                text.contains(install)
                    && text.contains("bash scripts/test.sh")
                    && text.contains(&format!("{}=1", need.skip_var)),
                "{text}"
            );
        }
    }
}
