//! The kafka-python fixtures: `tests/fixtures/*.py` run with the Python of
//! `tests/.venv`, which `tests/fixtures/setup.sh` creates (kafka-python and
//! its codecs) the first time a test needs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::workspace_root;

/// The modules a fixture may import; the venv is (re)built when one is
/// missing.
const MODULES: &str =
    "import kafka, snappy, lz4, zstandard, crc32c, confluent_kafka, aiokafka, pyarrow, duckdb";

/// The Python interpreter of `tests/.venv`, running `tests/fixtures/setup.sh`
/// first when kafka-python or one of its codecs is missing.
pub fn fixture_python() -> PathBuf {
    let root = workspace_root();
    let python = root.join("tests/.venv/bin/python");
    let ok = Command::new(&python)
        .args(["-c", MODULES])
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

/// Runs `tests/fixtures/<script>` with `args`; panics with its output when
/// it fails.
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

/// Generates the kafka-python broker log dir (every codec, seed 1) into
/// `dir` and returns its `expected.json`.
pub fn generate_kafka_logdir(dir: &Path) -> serde_json::Value {
    run_fixture(
        "gen_kafka_logdir.py",
        &["--out", dir.to_str().expect("utf-8 path"), "--seed", "1"],
    );
    let text = std::fs::read_to_string(dir.join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}
