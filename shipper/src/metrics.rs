//! Prometheus metrics, and a minimal HTTP endpoint serving them.
//!
//! | metric | type | labels | what |
//! | --- | --- | --- | --- |
//! | `segmirror_shipper_shipped_bytes_total` | counter | | bytes of new objects committed |
//! | `segmirror_shipper_shipped_objects_total` | counter | | objects committed |
//! | `segmirror_shipper_shipped_batches_total` | counter | | record batches committed |
//! | `segmirror_shipper_manifest_commits_total` | counter | | manifest versions committed |
//! | `segmirror_shipper_heads_published_total` | counter | | change-feed heads published |
//! | `segmirror_shipper_deleted_objects_total` | counter | | unreferenced objects deleted |
//! | `segmirror_shipper_cycles_total` | counter | | ship cycles run |
//! | `segmirror_shipper_errors_total` | counter | `kind` | errors (`corrupt_source`, `source`, `source_changed`, `store`, `existing_object_differs`, `fenced`, `inconsistent`) |
//! | `segmirror_shipper_object_store_requests_total` | counter | `kind` | requests made to the bucket, by kind (from [`manifest::counting::CountingStore`]) |
//! | `segmirror_shipper_lag_offsets` | gauge | `topic`, `partition` | source high watermark minus shipped end |
//! | `segmirror_shipper_lag_bytes` | gauge | `topic`, `partition` | committed source bytes not yet shipped, as of the last plan |
//! | `segmirror_shipper_lag_seconds` | gauge | `topic`, `partition` | time since the shipped end last reached the high watermark |
//! | `segmirror_shipper_shipped_end_offset` | gauge | `topic`, `partition` | the manifest's shipped end |
//! | `segmirror_shipper_source_high_watermark` | gauge | `topic`, `partition` | the source's high watermark (or log end) |
//! | `segmirror_shipper_partitions` | gauge | `state` | partitions by state (`ok`, `no_topic_id`, `missing`, `deleted`, `failed`, `fenced`) |
//! | `segmirror_shipper_last_cycle_seconds` | gauge | | duration of the last cycle |
//!
//! The endpoint answers `GET /metrics` (OpenMetrics text) and 404 to
//! anything else, one connection at a time on its own thread.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use manifest::counting::{CountingStore, RequestCounts};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The shipper's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub(crate) shipped_bytes: Counter,
    pub(crate) shipped_objects: Counter,
    pub(crate) shipped_batches: Counter,
    pub(crate) manifest_commits: Counter,
    pub(crate) heads_published: Counter,
    pub(crate) deleted_objects: Counter,
    pub(crate) cycles: Counter,
    pub(crate) errors: Family<Labels, Counter>,
    requests: Family<Labels, Counter>,
    pub(crate) lag_offsets: Family<Labels, Gauge>,
    pub(crate) lag_bytes: Family<Labels, Gauge>,
    pub(crate) lag_seconds: Family<Labels, Gauge<f64, AtomicU64>>,
    pub(crate) shipped_end: Family<Labels, Gauge>,
    pub(crate) source_hw: Family<Labels, Gauge>,
    pub(crate) partitions: Family<Labels, Gauge>,
    pub(crate) last_cycle_seconds: Gauge<f64, AtomicU64>,
    counting: Option<CountingStore>,
    last_requests: Mutex<RequestCounts>,
}

impl Metrics {
    /// A registry with every metric; `counting` (the store the shipper
    /// talks through) feeds the request counters.
    pub fn new(counting: Option<CountingStore>) -> Metrics {
        let mut registry = Registry::with_prefix("segmirror_shipper");
        let m = Metrics {
            registry: Registry::default(),
            shipped_bytes: Counter::default(),
            shipped_objects: Counter::default(),
            shipped_batches: Counter::default(),
            manifest_commits: Counter::default(),
            heads_published: Counter::default(),
            deleted_objects: Counter::default(),
            cycles: Counter::default(),
            errors: Family::default(),
            requests: Family::default(),
            lag_offsets: Family::default(),
            lag_bytes: Family::default(),
            lag_seconds: Family::default(),
            shipped_end: Family::default(),
            source_hw: Family::default(),
            partitions: Family::default(),
            last_cycle_seconds: Gauge::default(),
            counting,
            last_requests: Mutex::new(RequestCounts::default()),
        };
        registry.register(
            "shipped_bytes",
            "Bytes of new objects committed",
            m.shipped_bytes.clone(),
        );
        registry.register(
            "shipped_objects",
            "Objects committed",
            m.shipped_objects.clone(),
        );
        registry.register(
            "shipped_batches",
            "Record batches committed",
            m.shipped_batches.clone(),
        );
        registry.register(
            "manifest_commits",
            "Manifest versions committed",
            m.manifest_commits.clone(),
        );
        registry.register(
            "heads_published",
            "Change-feed heads published",
            m.heads_published.clone(),
        );
        registry.register(
            "deleted_objects",
            "Unreferenced objects deleted",
            m.deleted_objects.clone(),
        );
        registry.register("cycles", "Ship cycles run", m.cycles.clone());
        registry.register("errors", "Errors, by kind", m.errors.clone());
        registry.register(
            "object_store_requests",
            "Requests made to the bucket, by kind",
            m.requests.clone(),
        );
        registry.register(
            "lag_offsets",
            "Source high watermark minus shipped end",
            m.lag_offsets.clone(),
        );
        registry.register(
            "lag_bytes",
            "Committed source bytes not yet shipped, as of the last plan",
            m.lag_bytes.clone(),
        );
        registry.register(
            "lag_seconds",
            "Seconds since the shipped end last reached the high watermark",
            m.lag_seconds.clone(),
        );
        registry.register(
            "shipped_end_offset",
            "The manifest's shipped end",
            m.shipped_end.clone(),
        );
        registry.register(
            "source_high_watermark",
            "The source's high watermark (or log end)",
            m.source_hw.clone(),
        );
        registry.register("partitions", "Partitions by state", m.partitions.clone());
        registry.register(
            "last_cycle_seconds",
            "Duration of the last cycle",
            m.last_cycle_seconds.clone(),
        );
        Metrics { registry, ..m }
    }

    pub(crate) fn error(&self, kind: &'static str) {
        self.errors
            .get_or_create(&vec![("kind", kind.to_string())])
            .inc();
    }

    pub(crate) fn partition_labels(topic: &str, partition: i32) -> Labels {
        vec![
            ("topic", topic.to_string()),
            ("partition", partition.to_string()),
        ]
    }

    /// Moves the request counters up to the counting store's counts.
    pub(crate) fn sync_requests(&self) {
        let Some(c) = &self.counting else { return };
        let now = c.snapshot();
        let mut last = match self.last_requests.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let delta = now.since(&last);
        for (kind, n) in delta.by_kind() {
            if n > 0 {
                self.requests
                    .get_or_create(&vec![("kind", kind.to_string())])
                    .inc_by(n);
            }
        }
        *last = now;
    }

    /// The metrics in the OpenMetrics text format.
    pub fn render(&self) -> String {
        self.sync_requests();
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Serves `GET /metrics` on `addr` from a background thread. Returns the
    /// address bound (useful with port 0).
    pub fn serve(self: &Arc<Self>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr)?;
        let bound = listener.local_addr()?;
        let metrics = Arc::clone(self);
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { continue };
                    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                    let mut line = String::new();
                    let mut reader = BufReader::new(&stream);
                    if reader.read_line(&mut line).is_err() {
                        continue;
                    }
                    // Drain the headers.
                    let mut header = String::new();
                    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                        header.clear();
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("");
                    let response = if line.starts_with("GET ") && (path == "/metrics" || path.starts_with("/metrics?")) {
                        let body = metrics.render();
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    } else {
                        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 24\r\nConnection: close\r\n\r\ntry GET /metrics instead".to_string()
                    };
                    let _ = stream.write_all(response.as_bytes());
                }
            })?;
        Ok(bound)
    }
}
