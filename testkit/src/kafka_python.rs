//! The kafka-python fixtures: `tests/fixtures/*.py` run with the Python of
//! `tests/.venv` (`tests/fixtures/setup.sh` creates it). Each helper
//! returns `None` when the Python tests are skipped
//! (`SEGMIRROR_SKIP_PYTHON=1`, see [`crate::needs::python`]): the test
//! returns at once; a missing venv fails the test.

use std::path::Path;
use std::process::Output;

use crate::workspace_root;

/// Runs `tests/fixtures/<script>` with `args`; panics with its output when
/// it fails, `None` when the Python tests are skipped.
pub fn run_fixture(script: &str, args: &[&str]) -> Option<Output> {
    let python = crate::needs::python()?;
    let out = std::process::Command::new(python)
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
    Some(out)
}

/// Generates the kafka-python broker log dir (every codec, seed 1) into
/// `dir` and returns its `expected.json`; `None` when the Python tests are
/// skipped.
pub fn generate_kafka_logdir(dir: &Path) -> Option<serde_json::Value> {
    run_fixture(
        "gen_kafka_logdir.py",
        &["--out", dir.to_str().expect("utf-8 path"), "--seed", "1"],
    )?;
    let text = std::fs::read_to_string(dir.join("expected.json")).expect("expected.json");
    Some(serde_json::from_str(&text).expect("expected.json parses"))
}
