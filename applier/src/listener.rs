//! The Kafka listener's limits as configured (`kafka_*` keys of the
//! configuration, `SEGMIRROR_KAFKA_*` variables, `--kafka-*` flags) and
//! its metrics, for `applier run --kafka-listen` and `applier serve`.
//!
//! What each limit does is [`gateway::limits`]' business; here they are
//! read, defaulted and checked (an error names the configuration key).
//!
//! | metric | type | labels | what |
//! | --- | --- | --- | --- |
//! | `segmirror_applier_kafka_connections` | gauge | | Kafka connections open |
//! | `segmirror_applier_kafka_connections_accepted_total` | counter | | Kafka connections accepted and served |
//! | `segmirror_applier_kafka_limit_hits_total` | counter | `limit` | a listener limit hit: a connection refused (`max_connections`, `max_connections_per_address`) or closed (`max_request_size`, `max_in_flight_bytes`, `idle_timeout`, `request_timeout`), or a failed SASL authentication delayed (`sasl_failure_delay`) |
//!
//! They are rendered at each scrape (a refused connection is counted at
//! once), after the engine's metrics, on the same `--metrics-addr`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gateway::limits::{LimitHit, ListenerLimits, ListenerStats};
use kafkalog::units::ByteSize;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::config::{ApplierConfig, ConfigError};
use crate::metrics::Exposition;

/// The listener limits of `c` (defaults for keys not set), checked.
pub fn limits(c: &ApplierConfig) -> Result<ListenerLimits, ConfigError> {
    let d = ListenerLimits::default();
    let duration = |key: &'static str, value: &Option<String>, default: Duration| match value {
        None => Ok(default),
        Some(t) => humantime::parse_duration(t).map_err(|e| ConfigError {
            field: key,
            reason: format!("{t:?}: {e} (examples: 30s, 10m)"),
        }),
    };
    let size = |key: &'static str, value: Option<ByteSize>, default: usize| match value {
        None => Ok(default),
        Some(ByteSize(b)) => usize::try_from(b).map_err(|_| ConfigError {
            field: key,
            reason: format!("{b} bytes is too large"),
        }),
    };
    let limits = ListenerLimits {
        max_connections: c.kafka_max_connections.unwrap_or(d.max_connections),
        max_connections_per_address: c
            .kafka_max_connections_per_address
            .unwrap_or(d.max_connections_per_address),
        max_request_size: size(
            "kafka_max_request_size",
            c.kafka_max_request_size,
            d.max_request_size,
        )?,
        max_in_flight_bytes: size(
            "kafka_max_in_flight_bytes",
            c.kafka_max_in_flight_bytes,
            d.max_in_flight_bytes,
        )?,
        idle_timeout: duration("kafka_idle_timeout", &c.kafka_idle_timeout, d.idle_timeout)?,
        request_timeout: duration(
            "kafka_request_timeout",
            &c.kafka_request_timeout,
            d.request_timeout,
        )?,
        sasl_failure_delay: duration(
            "kafka_sasl_failure_delay",
            &c.kafka_sasl_failure_delay,
            d.sasl_failure_delay,
        )?,
    };
    limits.check().map_err(|(name, reason)| ConfigError {
        field: key_of(name),
        reason,
    })?;
    Ok(limits)
}

/// The configuration key of a [`ListenerLimits`] field.
fn key_of(limit: &str) -> &'static str {
    match limit {
        "max_connections" => "kafka_max_connections",
        "max_connections_per_address" => "kafka_max_connections_per_address",
        "max_request_size" => "kafka_max_request_size",
        "max_in_flight_bytes" => "kafka_max_in_flight_bytes",
        "idle_timeout" => "kafka_idle_timeout",
        "request_timeout" => "kafka_request_timeout",
        _ => "kafka_sasl_failure_delay",
    }
}

/// The listener's metrics (OpenMetrics, ending in `# EOF`).
pub fn render(stats: &ListenerStats) -> String {
    let mut registry = Registry::with_prefix("segmirror_applier_kafka");
    let open: Gauge = Gauge::default();
    open.set(i64::try_from(stats.open()).unwrap_or(i64::MAX));
    registry.register("connections", "Kafka connections open", open);
    let accepted: Counter = Counter::default();
    accepted.inc_by(stats.accepted());
    registry.register(
        "connections_accepted",
        "Kafka connections accepted and served",
        accepted,
    );
    let hits = Family::<[(&'static str, &'static str); 1], Counter>::default();
    for limit in LimitHit::ALL {
        hits.get_or_create(&[("limit", limit.as_str())])
            .inc_by(stats.hits(limit));
    }
    registry.register(
        "limit_hits",
        "Kafka listener limits hit: connections refused or closed, failed SASL authentications delayed",
        hits,
    );
    segmirror_service::metrics::encode(&registry)
}

/// The engine's text (`engine`, as [`crate::metrics`] renders it) followed
/// by the listener's, as one OpenMetrics text.
pub fn combine(engine: &str, stats: &ListenerStats) -> String {
    let listener = render(stats);
    match engine.strip_suffix("# EOF\n") {
        Some(head) => format!("{head}{listener}"),
        // Nothing rendered by the engine yet (or `applier serve`).
        None => listener,
    }
}

/// Serves `GET /metrics` on `addr` as [`crate::metrics::serve_bound`]
/// does, with the listener's metrics after the engine's when `stats` is
/// given.
pub fn serve_metrics(
    addr: SocketAddr,
    stats: Option<Arc<ListenerStats>>,
) -> std::io::Result<(Exposition, SocketAddr)> {
    let Some(stats) = stats else {
        return crate::metrics::serve_bound(addr);
    };
    let text: Exposition = Arc::new(std::sync::Mutex::new(
        crate::metrics::EMPTY_EXPOSITION.to_string(),
    ));
    let shared = Arc::clone(&text);
    let bound = segmirror_service::metrics::serve(addr, move || {
        let engine = match shared.lock() {
            Ok(t) => t.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        combine(&engine, &stats)
    })?;
    Ok((text, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(extra: &str) -> Result<ListenerLimits, ConfigError> {
        limits(&ApplierConfig::from_toml(&format!("log_dir = \"/x\"\n{extra}")).expect("parse"))
    }

    #[test]
    fn every_limit_defaults_and_is_read_from_its_key() {
        assert_eq!(with("").expect("defaults"), ListenerLimits::default());
        let l = with(
            "kafka_max_connections = 10\nkafka_max_connections_per_address = 2\n\
             kafka_max_request_size = \"1MiB\"\nkafka_max_in_flight_bytes = \"4MiB\"\n\
             kafka_idle_timeout = \"30s\"\nkafka_request_timeout = \"5s\"\n\
             kafka_sasl_failure_delay = \"250ms\"",
        )
        .expect("valid");
        assert_eq!(
            l,
            ListenerLimits {
                max_connections: 10,
                max_connections_per_address: 2,
                max_request_size: 1 << 20,
                max_in_flight_bytes: 4 << 20,
                idle_timeout: Duration::from_secs(30),
                request_timeout: Duration::from_secs(5),
                sasl_failure_delay: Duration::from_millis(250),
            }
        );
    }

    #[test]
    fn a_bad_limit_names_its_key() {
        for (extra, key) in [
            ("kafka_max_connections = 0", "kafka_max_connections"),
            (
                "kafka_max_connections_per_address = 0",
                "kafka_max_connections_per_address",
            ),
            ("kafka_max_request_size = 10", "kafka_max_request_size"),
            (
                "kafka_max_request_size = \"8MiB\"\nkafka_max_in_flight_bytes = \"4MiB\"",
                "kafka_max_in_flight_bytes",
            ),
            ("kafka_idle_timeout = \"soon\"", "kafka_idle_timeout"),
            ("kafka_request_timeout = \"0s\"", "kafka_request_timeout"),
            (
                "kafka_sasl_failure_delay = \"2m\"",
                "kafka_sasl_failure_delay",
            ),
        ] {
            let e = with(extra).expect_err(extra);
            assert_eq!(e.field, key, "{e}");
        }
    }

    #[test]
    fn the_endpoint_serves_the_listener_metrics_after_the_engines() {
        let stats = Arc::new(ListenerStats::default());
        let (exposition, addr) =
            serve_metrics(SocketAddr::from(([127, 0, 0, 1], 0)), Some(stats.clone()))
                .expect("serve");
        // Before the engine's first rendering: the listener's alone.
        let s = segmirror_testkit::metrics::scrape(addr, "/metrics");
        let samples = segmirror_testkit::metrics::samples(&s.body);
        assert_eq!(
            samples.get("segmirror_applier_kafka_connections"),
            Some(&0.0)
        );
        *exposition.lock().expect("lock") =
            crate::metrics::render(&[], &crate::metrics::Counters::default());
        let s = segmirror_testkit::metrics::scrape(addr, "/metrics");
        let samples = segmirror_testkit::metrics::samples(&s.body);
        assert_eq!(
            samples.get("segmirror_applier_cycles_total"),
            Some(&0.0),
            "{}",
            s.body
        );
        for limit in LimitHit::ALL {
            let series = format!(
                "segmirror_applier_kafka_limit_hits_total{{limit=\"{}\"}}",
                limit.as_str()
            );
            assert_eq!(samples.get(&series), Some(&0.0), "{series} in\n{}", s.body);
        }
        let names = segmirror_testkit::metrics::assert_documented_metrics_served(
            include_str!("listener.rs"),
            &s.body,
        );
        assert_eq!(names.len(), 3, "{names:?}");
    }
}
