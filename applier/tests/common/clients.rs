//! Driving the stock Kafka clients and the applier binary from tests:
//! `tests/fixtures/kafka_clients.py`, child processes killed when dropped,
//! free ports.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A child process killed when dropped.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on 127.0.0.1:{port}");
}

/// Runs the client driver; its JSON answer. The test checked
/// [`clients_present`] first.
pub fn client(args: &[&str]) -> Value {
    let python = segmirror_testkit::needs::python().expect("checked by clients_present()");
    let script = segmirror_testkit::workspace_root().join("tests/fixtures/kafka_clients.py");
    let out = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .expect("run kafka_clients.py");
    assert!(
        out.status.success(),
        "kafka_clients.py {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

pub fn applier(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("applier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

/// Whether to run a test with kcat and the Python clients: false when
/// `SEGMIRROR_SKIP_KCAT=1` or `SEGMIRROR_SKIP_PYTHON=1` skips it; a missing
/// client fails the test ([`segmirror_testkit::needs`]).
pub fn clients_present() -> bool {
    segmirror_testkit::needs::kcat() && segmirror_testkit::needs::python().is_some()
}

/// How many records of the `__consumer_offsets` partitions of `log_dir`
/// kafka-python parses (`tests/fixtures/read_with_kafka_python.py`);
/// `None` when the Python tests are skipped.
pub fn offsets_records_read_by_kafka_python(log_dir: &std::path::Path) -> Option<usize> {
    let read = segmirror_testkit::kafka_python::run_fixture(
        "read_with_kafka_python.py",
        &["--log-dir", log_dir.to_str().expect("utf-8")],
    )?;
    let parsed: Value = serde_json::from_slice(&read.stdout).expect("json");
    parsed
        .as_array()
        .expect("partitions")
        .iter()
        .filter(|p| p["topic"] == "__consumer_offsets")
        .flat_map(|p| p["batches"].as_array().cloned().unwrap_or_default())
        .flat_map(|b| b["records"].as_array().cloned().unwrap_or_default())
        .count()
        .into()
}

/// `applier serve` on `logs` at 127.0.0.1:`port` with `extra` flags,
/// once it listens.
pub fn serve(logs: &std::path::Path, port: u16, extra: &[&str]) -> Running {
    let listen = format!("127.0.0.1:{port}");
    let child = Running(
        Command::new(env!("CARGO_BIN_EXE_applier"))
            .args(
                [
                    &[
                        "serve",
                        "--log-dir",
                        logs.to_str().expect("utf-8"),
                        "--kafka-listen",
                        &listen,
                    ][..],
                    extra,
                ]
                .concat(),
            )
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("applier serve"),
    );
    wait_for_port(port);
    child
}
