//! Prometheus metrics of the applier, in the OpenMetrics text format
//! (`prometheus-client`), served on `GET /metrics` by
//! `segmirror_service::metrics`.
//!
//! | metric | type | labels | what |
//! | --- | --- | --- | --- |
//! | `segmirror_applier_partition_state` | gauge | `topic`, `partition`, `state` | 1 for the partition's current state, 0 for every other state |
//! | `segmirror_applier_lag_offsets` | gauge | `topic`, `partition` | offsets shipped at the source and not yet applied |
//! | `segmirror_applier_lag_bytes` | gauge | `topic`, `partition` | bytes shipped at the source and not yet applied |
//! | `segmirror_applier_lag_seconds` | gauge | `topic`, `partition` | age of the oldest shipped data not yet applied |
//! | `segmirror_applier_log_end_offset` | gauge | `topic`, `partition` | the local log end offset |
//! | `segmirror_applier_retries` | gauge | `topic`, `partition` | automatic retries of the partition's current failure streak |
//! | `segmirror_applier_failed_partitions` | gauge | | partitions in `FAILED` |
//! | `segmirror_applier_gap_lost_offsets` | gauge | `topic`, `partition` | offsets this mirror never received and never will, every known gap (`crate::gaps`) |
//! | `segmirror_applier_gap_unacknowledged_offsets` | gauge | `topic`, `partition` | the same, for gaps not acknowledged here (`applier gaps ack`): alert on > 0 |
//! | `segmirror_applier_gap_last_detected_timestamp_seconds` | gauge | `topic`, `partition` | when the partition's newest gap was detected (Unix time; absent without a gap) |
//! | `segmirror_applier_source_deleted` | gauge | `topic`, `partition` | 1 when the source deleted the partition (its records kept here, read-only: `crate::lifecycle`), else 0 |
//! | `segmirror_applier_retention_failing` | gauge | `topic`, `partition` | 1 while the last retention check of a STOPPED partition could not enforce its configs (`applier status` says why), else 0 |
//! | `segmirror_applier_applied_batches_total` | counter | | batches appended |
//! | `segmirror_applier_applied_bytes_total` | counter | | bytes appended |
//! | `segmirror_applier_cycles_total` | counter | | poll cycles run |
//! | `segmirror_applier_group_offsets_written_total` | counter | | consumer-group offsets written by the group sync |
//! | `segmirror_applier_group_offsets_deleted_total` | counter | | synced offsets deleted after a source tombstone |
//! | `segmirror_applier_group_offsets_clamped` | gauge | | synced offsets held at the mirror's log start or end |
//! | `segmirror_applier_group_sync_lag_seconds` | gauge | | age of the newest source group offsets not yet applied (0: up to date) |
//! | `segmirror_applier_group_sync_last_success_timestamp_seconds` | gauge | | when a group sync pass last completed (Unix time) |
//! | `segmirror_applier_verify_bytes_total` | counter | | bytes of the local log the scrub verified (`applier run`) |
//! | `segmirror_applier_verify_objects_total` | counter | | bucket objects the scrub checked (size, CRC-32C) after its passes |
//! | `segmirror_applier_verify_last_complete_pass_timestamp_seconds` | gauge | | when the scrub last completed a pass over every mirror partition |
//! | `segmirror_applier_verify_mismatches_total` | counter | `topic`, `partition` | mismatches the scrub found in the partition's local log |
//!
//! A lag gauge is absent for a partition whose lag is unknown (no manifest
//! read yet). The engine renders the text from its status rows and
//! [`Counters`] after a cycle that changed something (and at least every
//! refresh period while lagging) into the [`Exposition`]; a scrape serves
//! the last text, so a partition no longer mirrored disappears from the
//! next rendering.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
    /// Consumer-group offsets written by the group sync.
    pub group_offsets_written: u64,
    /// Synced offsets deleted.
    pub group_offsets_deleted: u64,
    /// Synced offsets held at the mirror's log start or end.
    pub group_offsets_clamped: u64,
    /// Age of the newest source group offsets not yet applied, in seconds
    /// (`None`: no group offsets in the feed).
    pub group_sync_lag_seconds: Option<f64>,
    /// When a group sync pass last completed (ms since the epoch).
    pub group_sync_last_success_ms: Option<i64>,
}

/// What one rendering shows of a partition: its status row, with the
/// label values spelled once.
#[derive(Debug)]
struct Row {
    topic: String,
    partition: String,
    state: String,
    retries: u32,
    lag_offsets: Option<i64>,
    lag_bytes: Option<u64>,
    lag_seconds: Option<f64>,
    log_end_offset: i64,
    gap_lost: i64,
    gap_open: i64,
    gap_last_detected_s: Option<i64>,
    source_deleted: bool,
    retention_failing: bool,
}

impl Row {
    fn labels(&self) -> [(&'static str, &str); 2] {
        [("topic", &self.topic), ("partition", &self.partition)]
    }
}

/// An integer per-partition gauge: name, help text, and its value.
type IntGauge = (&'static str, &'static str, fn(&Row) -> Option<i64>);

const INT_GAUGES: [IntGauge; 9] = [
    (
        "retries",
        "Automatic retries of the partition's current failure streak.",
        |r| Some(i64::from(r.retries)),
    ),
    (
        "lag_offsets",
        "Offsets shipped at the source and not yet applied.",
        |r| r.lag_offsets,
    ),
    (
        "lag_bytes",
        "Bytes shipped at the source and not yet applied.",
        |r| r.lag_bytes.map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
    ),
    ("log_end_offset", "Local log end offset.", |r| {
        Some(r.log_end_offset)
    }),
    (
        "gap_lost_offsets",
        "Offsets this mirror never received and never will (every known gap).",
        |r| Some(r.gap_lost),
    ),
    (
        "gap_unacknowledged_offsets",
        "Offsets never received, in gaps not acknowledged here (applier gaps ack).",
        |r| Some(r.gap_open),
    ),
    (
        "gap_last_detected_timestamp_seconds",
        "When the partition's newest gap was detected (Unix time).",
        |r| r.gap_last_detected_s,
    ),
    (
        "source_deleted",
        "1 when the source deleted the partition (its records are kept here, read-only).",
        |r| Some(i64::from(r.source_deleted)),
    ),
    (
        "retention_failing",
        "1 while the last retention check of a STOPPED partition could not enforce its configs.",
        |r| Some(i64::from(r.retention_failing)),
    ),
];

/// The per-partition metrics of one rendering, encoded straight from the
/// rows by `prometheus-client`'s encoder (a `Family` per gauge would hash
/// and allocate a label set per sample: four times slower at 10,000
/// partitions).
#[derive(Debug)]
struct Partitions(Vec<Row>);

impl Collector for Partitions {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        {
            let mut family = encoder.encode_descriptor(
                "partition_state",
                "Mirror state of each partition (1 for the current state).",
                None,
                MetricType::Gauge,
            )?;
            for r in &self.0 {
                for s in manifest::state::PartitionState::ALL {
                    let labels = (r.labels(), [("state", s.as_str())]);
                    family
                        .encode_family(&labels)?
                        .encode_gauge(&i64::from(r.state == s.as_str()))?;
                }
            }
        }
        for (name, help, get) in INT_GAUGES {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for r in &self.0 {
                if let Some(v) = get(r) {
                    family.encode_family(&r.labels())?.encode_gauge(&v)?;
                }
            }
        }
        let mut family = encoder.encode_descriptor(
            "lag_seconds",
            "Age of the oldest shipped data not yet applied.",
            None,
            MetricType::Gauge,
        )?;
        for r in &self.0 {
            if let Some(v) = r.lag_seconds {
                family.encode_family(&r.labels())?.encode_gauge(&v)?;
            }
        }
        Ok(())
    }
}

/// Renders the metrics text of `rows` and `c` (OpenMetrics, ending in
/// `# EOF`).
pub fn render(rows: &[PartitionStatus], c: &Counters) -> String {
    render_with(rows, c, None)
}

/// The scrub's metrics (`crate::scrub`).
#[derive(Debug)]
struct Scrub(crate::scrub::ScrubStats);

impl Collector for Scrub {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let s = &self.0;
        {
            let mut m = encoder.encode_descriptor(
                "verify_bytes",
                "Bytes of the local log verified by the scrub since the process started.",
                None,
                MetricType::Counter,
            )?;
            m.encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                &s.bytes_verified,
                None,
            )?;
        }
        {
            let mut m = encoder.encode_descriptor(
                "verify_objects",
                "Bucket objects the scrub checked against their manifest entries since the process started.",
                None,
                MetricType::Counter,
            )?;
            m.encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                &s.objects_verified,
                None,
            )?;
        }
        if let Some(ms) = s.last_complete_pass_ms {
            let mut m = encoder.encode_descriptor(
                "verify_last_complete_pass_timestamp_seconds",
                "When the scrub last completed a pass over every mirror partition (Unix time).",
                None,
                MetricType::Gauge,
            )?;
            m.encode_gauge(&(ms as f64 / 1000.0))?;
        }
        let mut family = encoder.encode_descriptor(
            "verify_mismatches",
            "Mismatches the scrub found in each partition's local log since the process started.",
            None,
            MetricType::Counter,
        )?;
        for (partition, n) in &s.mismatches {
            let (topic, p) = partition
                .rsplit_once('-')
                .unwrap_or((partition.as_str(), ""));
            family
                .encode_family(&[("topic", topic), ("partition", p)])?
                .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(n, None)?;
        }
        Ok(())
    }
}

/// [`render`] with the scrub's metrics, when it runs.
pub fn render_with(
    rows: &[PartitionStatus],
    c: &Counters,
    scrub: Option<&crate::scrub::ScrubStats>,
) -> String {
    let mut registry = Registry::with_prefix("segmirror_applier");
    let failed: Gauge = Gauge::default();
    failed.set(
        rows.iter()
            .filter(|r| r.state == "FAILED")
            .count()
            .try_into()
            .unwrap_or(i64::MAX),
    );
    registry.register("failed_partitions", "Partitions in FAILED", failed);
    for (name, help, value) in [
        ("applied_batches", "Batches appended", c.batches),
        ("applied_bytes", "Bytes appended", c.bytes),
        ("cycles", "Poll cycles run", c.cycles),
        (
            "group_offsets_written",
            "Consumer-group offsets written by the group sync",
            c.group_offsets_written,
        ),
        (
            "group_offsets_deleted",
            "Synced consumer-group offsets deleted after a source tombstone",
            c.group_offsets_deleted,
        ),
    ] {
        let counter: Counter = Counter::default();
        counter.inc_by(value);
        registry.register(name, help, counter);
    }
    let clamped: Gauge = Gauge::default();
    clamped.set(i64::try_from(c.group_offsets_clamped).unwrap_or(i64::MAX));
    registry.register(
        "group_offsets_clamped",
        "Synced consumer-group offsets held at the mirror's log start or end",
        clamped,
    );
    if let Some(lag) = c.group_sync_lag_seconds {
        let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        g.set(lag);
        registry.register(
            "group_sync_lag_seconds",
            "Age of the newest source consumer-group offsets not yet applied (0: up to date)",
            g,
        );
    }
    if let Some(ms) = c.group_sync_last_success_ms {
        let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        g.set(ms as f64 / 1000.0);
        registry.register(
            "group_sync_last_success_timestamp_seconds",
            "When a consumer-group offsets sync pass last completed (Unix time)",
            g,
        );
    }
    let rows = rows
        .iter()
        .map(|r| Row {
            topic: r.topic.clone(),
            partition: r.partition.to_string(),
            state: r.state.clone(),
            retries: r.retry_count,
            lag_offsets: r.lag_offsets,
            lag_bytes: r.lag_bytes,
            lag_seconds: r.lag_seconds,
            log_end_offset: r.local_log_end_offset,
            gap_lost: gap_offsets(r, |_| true),
            gap_open: gap_offsets(r, crate::gaps::GapStatus::is_open),
            gap_last_detected_s: r.gaps.iter().map(|g| g.gap.gap.detected_at_ms / 1000).max(),
            source_deleted: r.source_deleted,
            retention_failing: r.retention_error.is_some(),
        })
        .collect();
    registry.register_collector(Box::new(Partitions(rows)));
    if let Some(s) = scrub {
        registry.register_collector(Box::new(Scrub(s.clone())));
    }
    segmirror_service::metrics::encode(&registry)
}

/// The offsets of `r`'s loss gaps that `keep` selects.
fn gap_offsets(r: &PartitionStatus, keep: fn(&crate::gaps::GapStatus) -> bool) -> i64 {
    let n = manifest::gaps::Gap::total(
        r.gaps
            .iter()
            .filter(|g| g.gap.gap.is_loss() && keep(g))
            .map(|g| &g.gap.gap),
    );
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The text served, replaced after every cycle.
pub type Exposition = Arc<Mutex<String>>;

/// The metrics text before anything is rendered.
pub const EMPTY_EXPOSITION: &str = "# EOF\n";

/// Serves `GET /metrics` on `addr` from a background thread; the engine
/// writes the text into the returned [`Exposition`].
pub fn serve(addr: SocketAddr) -> std::io::Result<Exposition> {
    serve_bound(addr).map(|(text, _)| text)
}

/// [`serve`], also returning the address bound (the port chosen when
/// `addr`'s is 0).
pub fn serve_bound(addr: SocketAddr) -> std::io::Result<(Exposition, SocketAddr)> {
    // Until the engine's first rendering, an empty exposition (valid
    // OpenMetrics text: no family yet), never an empty body.
    let text: Exposition = Arc::new(Mutex::new(EMPTY_EXPOSITION.to_string()));
    let shared = Arc::clone(&text);
    let bound = segmirror_service::metrics::serve(addr, move || match shared.lock() {
        Ok(t) => t.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    })?;
    Ok((text, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(topic: &str, partition: i32, state: &str) -> PartitionStatus {
        PartitionStatus {
            topic: topic.into(),
            partition,
            state: state.into(),
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
            gaps: Vec::new(),
            cut: None,
            topic_configs: None,
            retention_error: None,
            source_deleted: false,
            source_deleted_at_ms: None,
        }
    }

    #[test]
    fn renders_lag_and_state_per_partition() {
        let row = row("orders", 3, "MIRRORING");
        let text = render(
            &[row],
            &Counters {
                batches: 7,
                bytes: 700,
                cycles: 2,
                ..Counters::default()
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

    #[test]
    fn the_endpoint_serves_every_documented_metric() {
        let (exposition, addr) = serve_bound(SocketAddr::from(([127, 0, 0, 1], 0))).expect("serve");
        let mut failed = row("orders", 1, "FAILED");
        failed.retry_count = 3;
        failed.lag_offsets = None;
        failed.lag_bytes = None;
        failed.lag_seconds = None;
        let mut gapped = row("orders", 0, "MIRRORING");
        let gap = |first, last, acknowledged| crate::gaps::GapStatus {
            gap: crate::gaps::KnownGap {
                gap: manifest::gaps::Gap {
                    first_offset: first,
                    last_offset: last,
                    cause: manifest::gaps::GapCause::Retention,
                    lost_epochs: None,
                    reused_from_epoch: None,
                    detected_at_ms: first * 1000,
                    acknowledged_at_ms: None,
                },
                seen_by: crate::gaps::SeenBy::Manifest,
            },
            acknowledged,
            acknowledged_here_at_ms: None,
        };
        gapped.gaps = vec![gap(100, 229, true), gap(300, 309, false)];
        gapped.source_deleted = true;
        failed.retention_error = Some("config retention.ms=\"x\"".into());
        let rows = [gapped, failed];
        let counters = Counters {
            batches: 7,
            bytes: 700,
            cycles: 2,
            group_offsets_written: 3,
            group_offsets_deleted: 1,
            group_offsets_clamped: 1,
            group_sync_lag_seconds: Some(0.0),
            group_sync_last_success_ms: Some(1_700_000_000_000),
        };
        let scrub = crate::scrub::ScrubStats {
            last_complete_pass_ms: Some(1_700_000_000_000),
            bytes_verified: 4096,
            mismatches: [("orders-1".to_string(), 2)].into(),
            passes: 1,
            objects_verified: 3,
        };
        *exposition.lock().expect("lock") = render_with(&rows, &counters, Some(&scrub));
        let s = segmirror_testkit::metrics::scrape(addr, "/metrics");
        assert_eq!(s.status, 200);
        assert_eq!(s.content_type, segmirror_service::metrics::CONTENT_TYPE);
        let samples = segmirror_testkit::metrics::samples(&s.body);
        let p0 = "topic=\"orders\",partition=\"0\"";
        let p1 = "topic=\"orders\",partition=\"1\"";
        for (series, value) in [
            (
                format!("segmirror_applier_partition_state{{{p0},state=\"MIRRORING\"}}"),
                1.0,
            ),
            (
                format!("segmirror_applier_partition_state{{{p1},state=\"FAILED\"}}"),
                1.0,
            ),
            (
                format!("segmirror_applier_partition_state{{{p1},state=\"MIRRORING\"}}"),
                0.0,
            ),
            (format!("segmirror_applier_lag_offsets{{{p0}}}"), 10.0),
            (format!("segmirror_applier_lag_bytes{{{p0}}}"), 4096.0),
            (format!("segmirror_applier_lag_seconds{{{p0}}}"), 1.5),
            (format!("segmirror_applier_log_end_offset{{{p0}}}"), 90.0),
            (format!("segmirror_applier_retries{{{p1}}}"), 3.0),
            (format!("segmirror_applier_gap_lost_offsets{{{p0}}}"), 140.0),
            (
                format!("segmirror_applier_gap_unacknowledged_offsets{{{p0}}}"),
                10.0,
            ),
            (
                format!("segmirror_applier_gap_last_detected_timestamp_seconds{{{p0}}}"),
                300.0,
            ),
            (format!("segmirror_applier_gap_lost_offsets{{{p1}}}"), 0.0),
            (format!("segmirror_applier_source_deleted{{{p0}}}"), 1.0),
            (format!("segmirror_applier_source_deleted{{{p1}}}"), 0.0),
            (format!("segmirror_applier_retention_failing{{{p0}}}"), 0.0),
            (format!("segmirror_applier_retention_failing{{{p1}}}"), 1.0),
            ("segmirror_applier_failed_partitions".into(), 1.0),
            ("segmirror_applier_applied_batches_total".into(), 7.0),
            ("segmirror_applier_applied_bytes_total".into(), 700.0),
            ("segmirror_applier_cycles_total".into(), 2.0),
            ("segmirror_applier_group_offsets_written_total".into(), 3.0),
            ("segmirror_applier_group_offsets_deleted_total".into(), 1.0),
            ("segmirror_applier_group_offsets_clamped".into(), 1.0),
            ("segmirror_applier_group_sync_lag_seconds".into(), 0.0),
            (
                "segmirror_applier_group_sync_last_success_timestamp_seconds".into(),
                1_700_000_000.0,
            ),
            ("segmirror_applier_verify_bytes_total".into(), 4096.0),
            ("segmirror_applier_verify_objects_total".into(), 3.0),
            (
                "segmirror_applier_verify_last_complete_pass_timestamp_seconds".into(),
                1_700_000_000.0,
            ),
            (
                format!("segmirror_applier_verify_mismatches_total{{{p1}}}"),
                2.0,
            ),
        ] {
            assert_eq!(
                samples.get(&series),
                Some(&value),
                "{series} in\n{}",
                s.body
            );
        }
        assert!(
            !samples.contains_key(&format!("segmirror_applier_lag_offsets{{{p1}}}")),
            "an unknown lag is absent"
        );
        // 9 gauges per partition, the failed one's 3 lags unknown, and
        // the last gap's time only where there is a gap.
        let per_partition = manifest::state::PartitionState::ALL.len() * 2 + 9 * 2 - 3 + 1;
        // 4 counters and the failed gauge, then the group sync's 5, then
        // the scrub's 4.
        assert_eq!(samples.len(), per_partition + 4 + 5 + 4, "{}", s.body);
        let names = segmirror_testkit::metrics::assert_documented_metrics_served(
            include_str!("metrics.rs"),
            &s.body,
        );
        assert_eq!(names.len(), 24, "{names:?}");
    }
}
