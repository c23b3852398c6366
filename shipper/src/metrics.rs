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
//! | `segmirror_shipper_deleted_packs_total` | counter | | packs deleted by pack garbage collection (layout 2) |
//! | `segmirror_shipper_cycles_total` | counter | | ship cycles run |
//! | `segmirror_shipper_errors_total` | counter | `kind` | errors (`corrupt_source`, `source`, `source_changed`, `store`, `existing_object_differs`, `fenced`, `inconsistent`) |
//! | `segmirror_shipper_object_store_requests_total` | counter | `kind` | requests made to the bucket, by kind (from [`bucket::counting::CountingStore`]) |
//! | `segmirror_shipper_requests_per_second` | gauge | `class` | billed requests per second over the last 5 minutes (`write`: PUT, COPY, POST, LIST; `read`: GET, HEAD; `bucket::pricing`) |
//! | `segmirror_shipper_request_cost_dollars_per_month` | gauge | `prices` | that rate's cost over a 30-day month at the configured prices (`prices`, default `s3-standard` list prices) |
//! | `segmirror_shipper_lag_offsets` | gauge | `topic`, `partition` | source high watermark minus shipped end |
//! | `segmirror_shipper_lag_bytes` | gauge | `topic`, `partition` | committed source bytes not yet shipped, as of the last plan |
//! | `segmirror_shipper_lag_seconds` | gauge | `topic`, `partition` | time since the shipped end last reached the high watermark |
//! | `segmirror_shipper_shipped_end_offset` | gauge | `topic`, `partition` | the manifest's shipped end |
//! | `segmirror_shipper_source_high_watermark` | gauge | `topic`, `partition` | the source's high watermark (or log end) |
//! | `segmirror_shipper_partitions` | gauge | `state` | partitions by state (`ok`, `no_topic_id`, `missing`, `deleted`, `failed`, `fenced`, `standby`: another replica's shipper ships it) |
//! | `segmirror_shipper_partition_roles` | gauge | `role` | partitions by this broker's role from its KRaft metadata (`leader`, `last_leader`, `follower`, `leaderless`, `not_replica`, `other_directory`, `deleted`, `stale_topic`, `unknown`, `untrusted`); absent without a metadata log. Alert on `role="untrusted"` > 0: those partitions are shipped by every replica (fenced) |
//! | `segmirror_shipper_last_cycle_seconds` | gauge | | duration of the last cycle |
//! | `segmirror_shipper_gap_lost_offsets` | gauge | `topic`, `partition` | offsets the source lost before they were shipped, every recorded gap (`manifest::gaps`) |
//! | `segmirror_shipper_gap_unacknowledged_offsets` | gauge | `topic`, `partition` | the same, for gaps not acknowledged (`shipper gaps ack`): alert on > 0 |
//! | `segmirror_shipper_gap_last_detected_timestamp_seconds` | gauge | `topic`, `partition` | when the partition's newest gap was detected (Unix time; absent without a gap) |
//!
//! The endpoint is `segmirror_service::metrics::serve`: `GET /metrics`
//! answers the registry's OpenMetrics text, rendered at each scrape, and
//! anything else 404.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use bucket::counting::{CountingStore, RequestCounts};
use bucket::pricing::Prices;
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
    pub(crate) deleted_packs: Counter,
    pub(crate) cycles: Counter,
    pub(crate) errors: Family<Labels, Counter>,
    requests: Family<Labels, Counter>,
    pub(crate) lag_offsets: Family<Labels, Gauge>,
    pub(crate) lag_bytes: Family<Labels, Gauge>,
    pub(crate) lag_seconds: Family<Labels, Gauge<f64, AtomicU64>>,
    pub(crate) shipped_end: Family<Labels, Gauge>,
    pub(crate) source_hw: Family<Labels, Gauge>,
    pub(crate) partitions: Family<Labels, Gauge>,
    pub(crate) roles: Family<Labels, Gauge>,
    pub(crate) last_cycle_seconds: Gauge<f64, AtomicU64>,
    pub(crate) group_versions: Counter,
    pub(crate) group_offsets: Gauge,
    pub(crate) group_records_skipped: Family<Labels, Counter>,
    counting: Option<CountingStore>,
    last_requests: Mutex<RequestCounts>,
    gap_lost: Family<Labels, Gauge>,
    gap_unacknowledged: Family<Labels, Gauge>,
    gap_last_detected: Family<Labels, Gauge>,
    request_rate: Family<Labels, Gauge<f64, AtomicU64>>,
    request_cost: Family<Labels, Gauge<f64, AtomicU64>>,
    /// Request counts at instants of the last [`RATE_WINDOW`], oldest first.
    window: Mutex<std::collections::VecDeque<(std::time::Instant, RequestCounts)>>,
    /// The prices costs are given at: preset name and prices.
    prices: (String, Prices),
}

/// The window request rates are measured over.
pub const RATE_WINDOW: std::time::Duration = std::time::Duration::from_secs(300);

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
            deleted_packs: Counter::default(),
            cycles: Counter::default(),
            errors: Family::default(),
            requests: Family::default(),
            lag_offsets: Family::default(),
            lag_bytes: Family::default(),
            lag_seconds: Family::default(),
            shipped_end: Family::default(),
            source_hw: Family::default(),
            partitions: Family::default(),
            roles: Family::default(),
            last_cycle_seconds: Gauge::default(),
            group_versions: Counter::default(),
            group_offsets: Gauge::default(),
            group_records_skipped: Family::default(),
            counting,
            last_requests: Mutex::new(RequestCounts::default()),
            gap_lost: Family::default(),
            gap_unacknowledged: Family::default(),
            gap_last_detected: Family::default(),
            request_rate: Family::default(),
            request_cost: Family::default(),
            window: Mutex::new(std::collections::VecDeque::new()),
            prices: (
                "s3-standard".into(),
                Prices::preset("s3-standard").unwrap_or(Prices {
                    write_per_1k: 0.005,
                    read_per_1k: 0.0004,
                }),
            ),
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
        registry.register(
            "deleted_packs",
            "Packs deleted by pack garbage collection",
            m.deleted_packs.clone(),
        );
        registry.register("cycles", "Ship cycles run", m.cycles.clone());
        registry.register("errors", "Errors, by kind", m.errors.clone());
        registry.register(
            "object_store_requests",
            "Requests made to the bucket, by kind",
            m.requests.clone(),
        );
        registry.register(
            "requests_per_second",
            "Billed requests per second over the last 5 minutes, by class",
            m.request_rate.clone(),
        );
        registry.register(
            "request_cost_dollars_per_month",
            "Monthly request cost of that rate at the configured prices",
            m.request_cost.clone(),
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
            "partition_roles",
            "Partitions by this broker's role from its KRaft metadata",
            m.roles.clone(),
        );
        registry.register(
            "last_cycle_seconds",
            "Duration of the last cycle",
            m.last_cycle_seconds.clone(),
        );
        registry.register(
            "group_offsets_versions",
            "Versions of the consumer-group offsets published",
            m.group_versions.clone(),
        );
        registry.register(
            "group_offsets",
            "Committed offsets in the consumer-group offsets last published",
            m.group_offsets.clone(),
        );
        registry.register(
            "group_records_skipped",
            "__consumer_offsets records skipped (unknown record type or value version, malformed)",
            m.group_records_skipped.clone(),
        );
        registry.register(
            "gap_lost_offsets",
            "Offsets the source lost before they were shipped (every recorded gap)",
            m.gap_lost.clone(),
        );
        registry.register(
            "gap_unacknowledged_offsets",
            "Offsets lost before they were shipped, in gaps not acknowledged",
            m.gap_unacknowledged.clone(),
        );
        registry.register(
            "gap_last_detected_timestamp_seconds",
            "When the partition's newest gap was detected (Unix time)",
            m.gap_last_detected.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Sets a partition's gap gauges from its manifest's gap list.
    pub(crate) fn set_gaps(&self, labels: &Labels, gaps: &[manifest::gaps::Gap]) {
        let lost: u64 = gaps
            .iter()
            .filter(|g| g.is_loss())
            .map(|g| g.offsets())
            .sum();
        let open: u64 = crate::gaps::unacknowledged(gaps).map(|g| g.offsets()).sum();
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.gap_lost.get_or_create(labels).set(as_i64(lost));
        self.gap_unacknowledged
            .get_or_create(labels)
            .set(as_i64(open));
        if let Some(at) = gaps.iter().map(|g| g.detected_at_ms).max() {
            self.gap_last_detected.get_or_create(labels).set(at / 1000);
        }
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
        drop(last);
        self.measure_rate(now);
    }

    /// Prices costs at the preset `name` (see `bucket::pricing::PRESETS`).
    pub fn with_prices(mut self, name: &str, prices: Prices) -> Metrics {
        self.prices = (name.to_string(), prices);
        self
    }

    /// Adds `now` to the rate window and sets the rate and cost gauges.
    fn measure_rate(&self, now: RequestCounts) {
        let mut window = match self.window.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let at = std::time::Instant::now();
        window.push_back((at, now));
        while window.len() > 2
            && window
                .get(1)
                .is_some_and(|(t, _)| at.duration_since(*t) >= RATE_WINDOW)
        {
            window.pop_front();
        }
        let Some((t0, c0)) = window.front() else {
            return;
        };
        let secs = at.duration_since(*t0).as_secs_f64();
        if secs <= 0.0 {
            return;
        }
        let cost = bucket::pricing::monthly(&now.since(c0), secs, &self.prices.1);
        self.request_rate
            .get_or_create(&vec![("class", "write".to_string())])
            .set(cost.writes_per_s);
        self.request_rate
            .get_or_create(&vec![("class", "read".to_string())])
            .set(cost.reads_per_s);
        self.request_cost
            .get_or_create(&vec![("prices", self.prices.0.clone())])
            .set(cost.dollars_per_month);
    }

    /// The request rate over the window and its monthly cost, with the
    /// prices' name and the window's length (`None`: not measured yet).
    pub fn request_cost(&self) -> Option<(String, f64, bucket::pricing::MonthlyCost)> {
        let window = self.window.lock().ok()?;
        let ((t0, c0), (t1, c1)) = (window.front()?, window.back()?);
        let secs = t1.duration_since(*t0).as_secs_f64();
        (secs > 0.0).then(|| {
            (
                self.prices.0.clone(),
                secs,
                bucket::pricing::monthly(&c1.since(c0), secs, &self.prices.1),
            )
        })
    }

    /// The metrics in the OpenMetrics text format.
    pub fn render(&self) -> String {
        self.sync_requests();
        segmirror_service::metrics::encode(&self.registry)
    }

    /// Serves `GET /metrics` on `addr` from a background thread (see
    /// `segmirror_service::metrics`). Returns the address bound (useful with
    /// port 0).
    pub fn serve(self: &Arc<Self>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let metrics = Arc::clone(self);
        segmirror_service::metrics::serve(addr, move || metrics.render())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_serves_every_documented_metric() {
        let m = Arc::new(Metrics::new(None));
        m.shipped_bytes.inc_by(4096);
        m.error("store");
        m.lag_offsets
            .get_or_create(&Metrics::partition_labels("orders", 3))
            .set(7);
        m.lag_seconds
            .get_or_create(&Metrics::partition_labels("orders", 3))
            .set(1.5);
        m.partitions
            .get_or_create(&vec![("state", "ok".to_string())])
            .set(2);
        m.roles
            .get_or_create(&vec![("role", "leader".to_string())])
            .set(2);
        m.requests
            .get_or_create(&vec![("kind", "put".to_string())])
            .inc();
        for family in [&m.lag_bytes, &m.shipped_end, &m.source_hw] {
            family
                .get_or_create(&Metrics::partition_labels("orders", 3))
                .set(1);
        }
        m.last_cycle_seconds.set(0.25);
        m.request_rate
            .get_or_create(&vec![("class", "write".to_string())])
            .set(2.0);
        m.request_cost
            .get_or_create(&vec![("prices", "s3-standard".to_string())])
            .set(25.92);
        let gap = |first, last, acked: Option<i64>| manifest::gaps::Gap {
            first_offset: first,
            last_offset: last,
            cause: manifest::gaps::GapCause::Retention,
            lost_epochs: None,
            reused_from_epoch: None,
            detected_at_ms: first * 1000,
            acknowledged_at_ms: acked,
        };
        m.set_gaps(
            &Metrics::partition_labels("orders", 3),
            &[gap(100, 229, Some(1)), gap(300, 309, None)],
        );
        let addr = m
            .serve(SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("serve");
        let s = segmirror_testkit::metrics::scrape(addr, "/metrics");
        assert_eq!(s.status, 200);
        assert_eq!(s.content_type, segmirror_service::metrics::CONTENT_TYPE);
        let samples = segmirror_testkit::metrics::samples(&s.body);
        for (series, value) in [
            ("segmirror_shipper_shipped_bytes_total", 4096.0),
            ("segmirror_shipper_shipped_objects_total", 0.0),
            ("segmirror_shipper_errors_total{kind=\"store\"}", 1.0),
            (
                "segmirror_shipper_lag_offsets{topic=\"orders\",partition=\"3\"}",
                7.0,
            ),
            (
                "segmirror_shipper_lag_seconds{topic=\"orders\",partition=\"3\"}",
                1.5,
            ),
            ("segmirror_shipper_partitions{state=\"ok\"}", 2.0),
            ("segmirror_shipper_last_cycle_seconds", 0.25),
            (
                "segmirror_shipper_gap_lost_offsets{topic=\"orders\",partition=\"3\"}",
                140.0,
            ),
            (
                "segmirror_shipper_gap_unacknowledged_offsets{topic=\"orders\",partition=\"3\"}",
                10.0,
            ),
            (
                "segmirror_shipper_gap_last_detected_timestamp_seconds{topic=\"orders\",partition=\"3\"}",
                300.0,
            ),
            (
                "segmirror_shipper_request_cost_dollars_per_month{prices=\"s3-standard\"}",
                25.92,
            ),
        ] {
            assert_eq!(samples.get(series), Some(&value), "{series} in\n{}", s.body);
        }
        // A family without samples is not in the text: every family has
        // one above.
        let names = segmirror_testkit::metrics::assert_documented_metrics_served(
            include_str!("metrics.rs"),
            &s.body,
        );
        assert_eq!(names.len(), 23, "{names:?}");
    }
}
