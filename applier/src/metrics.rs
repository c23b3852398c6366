//! Prometheus metrics of the applier, in the text exposition format, served
//! on `GET /metrics` by a small HTTP responder on its own thread.
//!
//! Metrics (labels `topic`, `partition` where per partition):
//! - `segmirror_applier_partition_state{state}`: 1 for the current state
//! - `segmirror_applier_lag_offsets`, `segmirror_applier_lag_bytes`,
//!   `segmirror_applier_lag_seconds`: shipped at the source, not yet applied
//! - `segmirror_applier_log_end_offset`: the local log end offset
//! - `segmirror_applier_retries`: automatic retries of the current failure
//! - `segmirror_applier_applied_batches_total`, `..._applied_bytes_total`
//! - `segmirror_applier_cycles_total`, `segmirror_applier_failures_total`

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use crate::status::PartitionStatus;

/// Counters kept across cycles.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    /// Batches appended.
    pub batches: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// Cycles run.
    pub cycles: u64,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A per-partition gauge: name, help text, and its value from a status row.
type Gauge = (
    &'static str,
    &'static str,
    fn(&PartitionStatus) -> Option<f64>,
);

/// Renders the metrics text.
pub fn render(rows: &[PartitionStatus], c: &Counters) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP segmirror_applier_partition_state Mirror state of each partition (1 for the current state)."
    );
    let _ = writeln!(out, "# TYPE segmirror_applier_partition_state gauge");
    for r in rows {
        for s in manifest::state::PartitionState::ALL {
            let _ = writeln!(
                out,
                "segmirror_applier_partition_state{{topic=\"{}\",partition=\"{}\",state=\"{}\"}} {}",
                escape(&r.topic),
                r.partition,
                s.as_str(),
                u8::from(r.state == s.as_str())
            );
        }
    }
    let gauges: [Gauge; 5] = [
        (
            "segmirror_applier_retries",
            "Automatic retries of the partition's current failure streak.",
            |r| Some(f64::from(r.retry_count)),
        ),
        (
            "segmirror_applier_lag_offsets",
            "Offsets shipped at the source and not yet applied.",
            |r| r.lag_offsets.map(|v| v as f64),
        ),
        (
            "segmirror_applier_lag_bytes",
            "Bytes shipped at the source and not yet applied.",
            |r| r.lag_bytes.map(|v| v as f64),
        ),
        (
            "segmirror_applier_lag_seconds",
            "Age of the oldest shipped data not yet applied.",
            |r| r.lag_seconds,
        ),
        (
            "segmirror_applier_log_end_offset",
            "Local log end offset.",
            |r| Some(r.local_log_end_offset as f64),
        ),
    ];
    for (name, help, get) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for r in rows {
            if let Some(v) = get(r) {
                let _ = writeln!(
                    out,
                    "{name}{{topic=\"{}\",partition=\"{}\"}} {v}",
                    escape(&r.topic),
                    r.partition
                );
            }
        }
    }
    let failed = rows.iter().filter(|r| r.state == "FAILED").count();
    let _ = writeln!(
        out,
        "# HELP segmirror_applier_failed_partitions Partitions in FAILED.\n# TYPE segmirror_applier_failed_partitions gauge\nsegmirror_applier_failed_partitions {failed}"
    );
    let _ = writeln!(
        out,
        "# HELP segmirror_applier_applied_batches_total Batches appended.\n# TYPE segmirror_applier_applied_batches_total counter\nsegmirror_applier_applied_batches_total {}",
        c.batches
    );
    let _ = writeln!(
        out,
        "# HELP segmirror_applier_applied_bytes_total Bytes appended.\n# TYPE segmirror_applier_applied_bytes_total counter\nsegmirror_applier_applied_bytes_total {}",
        c.bytes
    );
    let _ = writeln!(
        out,
        "# HELP segmirror_applier_cycles_total Poll cycles run.\n# TYPE segmirror_applier_cycles_total counter\nsegmirror_applier_cycles_total {}",
        c.cycles
    );
    out
}

/// The text served, replaced after every cycle.
pub type Exposition = Arc<Mutex<String>>;

/// Serves `GET /metrics` on `addr` from a background thread.
pub fn serve(addr: SocketAddr) -> std::io::Result<Exposition> {
    let listener = TcpListener::bind(addr)?;
    let text: Exposition = Arc::new(Mutex::new(String::new()));
    let shared = Arc::clone(&text);
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let mut buf = [0u8; 1024];
            let n = stream.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]);
            let (status, body) = if request.starts_with("GET /metrics") {
                ("200 OK", shared.lock().map(|t| t.clone()).unwrap_or_default())
            } else {
                ("404 Not Found", "try GET /metrics\n".to_string())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    })?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_lag_and_state_per_partition() {
        let row = PartitionStatus {
            topic: "orders".into(),
            partition: 3,
            state: "MIRRORING".into(),
            previous_state: Some("PREPARING".into()),
            last_error: None,
            retryable: None,
            retry_count: 0,
            source_cluster_id: "src".into(),
            local_log_start_offset: 0,
            local_log_end_offset: 90,
            source_shipped_end_offset: Some(100),
            source_high_watermark: Some(100),
            lag_offsets: Some(10),
            lag_bytes: Some(4096),
            lag_seconds: Some(1.5),
            lme: None,
            writable: false,
            waiting_for: None,
        };
        let text = render(
            &[row],
            &Counters {
                batches: 7,
                bytes: 700,
                cycles: 2,
            },
        );
        for line in [
            "segmirror_applier_partition_state{topic=\"orders\",partition=\"3\",state=\"MIRRORING\"} 1",
            "segmirror_applier_partition_state{topic=\"orders\",partition=\"3\",state=\"FAILED\"} 0",
            "segmirror_applier_lag_offsets{topic=\"orders\",partition=\"3\"} 10",
            "segmirror_applier_lag_bytes{topic=\"orders\",partition=\"3\"} 4096",
            "segmirror_applier_lag_seconds{topic=\"orders\",partition=\"3\"} 1.5",
            "segmirror_applier_applied_bytes_total 700",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
