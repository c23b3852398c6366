//! The commented configuration `applier config example` prints: every key
//! with its default and meaning. The tests keep it complete (every field of
//! [`super::ApplierConfig`] has a line) and valid as printed and with every
//! commented key uncommented.

/// What `applier config example` prints: every key, its default and its
/// meaning. It parses and validates as it is (for `run`/`once`); keys
/// without a default value to show are commented out.
pub const EXAMPLE: &str = r#"# segmirror applier configuration (applier run --config FILE).
# Precedence: this file, then SEGMIRROR_* environment variables, then flags.
# Sizes: bytes or a unit (KB, MB, GB: powers of 1000; KiB, MiB, GiB: 1024).
# Durations: 500ms, 5s, 10m, 1h.

# Required. The destination log dir (one of the broker's log.dirs, or a
# directory of its own). Relative paths resolve against this file's directory.
log_dir = "/var/lib/kafka/mirror"

# Required by run, once, plan and start. Where the shipper puts objects:
# s3://bucket/prefix, file:///abs/path or memory://.
# S3 credentials, region and endpoint come from the standard AWS variables.
bucket = "s3://dr-bucket/segmirror"

# Required by run, once, plan and start. The source cluster to mirror: the
# shipper's cluster_id. `start` pins each partition to it.
source_cluster_id = "MkU3OEVBNTcwNTJENDM2Qk"

# This (destination) cluster's own id: refuses to mirror what this cluster
# shipped itself, and finds its own epochs on failback. Default: not set.
# cluster_id = "Pm3mXq7cT2KQm4Zc1w9cAA"

# Topics started automatically by run and once: a regex matched against the
# whole topic name. Default: none (topics are started with `applier start
# --topic NAME`, an exact name, repeatable).
# topics = "orders|payments"

# Topics never started automatically: a regex on the whole name. Default: none.
# exclude = "tmp-.*"

# How often the bucket's change feed is polled. Default: 1s.
poll_interval = "1s"
# Its older spelling in milliseconds, still read (not together with it):
# poll_interval_ms = 1000

# Objects downloaded ahead of the one being appended (1 to 64). Default: 4.
download_concurrency = 4

# Bytes downloaded ahead of the appends (at least one object of up to
# stream_above, whatever its size; 1MiB to 64GiB). Default: 16MiB.
download_memory = "16MiB"

# Objects larger than this are appended while they download, under a
# durable marker that a restart uses to cut an unfinished one; smaller ones
# are checked whole before their first batch is appended (0 to 1GiB).
# Default: 4MiB.
stream_above = "4MiB"

# Kept free in <log_dir>/.segmirror/reserve so that failures can still be
# recorded on a full disk; nothing is appended without it (0: off; at most
# 1GiB). Default: 1MiB. (The older key disk_reserve_bytes is still read.)
disk_reserve = "1MiB"

# Destination topics with remote.storage.enable=true: preparing their
# partitions is refused (data around the LME may be remote, so the log cannot
# be truncated safely). Default: none.
tiered_topics = []

# Serve Prometheus metrics on this address (GET /metrics). Default: not served.
# metrics_addr = "127.0.0.1:9465"

# `applier once` and `plan` give up when the store does not answer within
# this (exit 1). Default: 60s.
store_timeout = "60s"

# Bucket checks run once at start by run and once (the must-have subset of
# `applier doctor`: versioning, encryption, public access block, TLS-only
# policy, lifecycle; on file:// writable, rename, fsync, free space):
# "off", "warn" (log each failure, start anyway) or "enforce" (exit 1 before
# touching the log dir). Default: warn.
preflight = "warn"

# `applier run` re-reads the local log continuously (the checks of `applier
# verify`: CRCs, the header fields the CRC does not cover, the indexes) at
# most this many bytes per hour; a mismatch fails a mirror partition (start
# repairs it from the bucket) and is reported on a STOPPED one. 0: off.
# Default: 1GiB (about 300 KB/s).
scrub_bytes_per_hour = "1GiB"
# Limits of the Kafka listener (run --kafka-listen, serve). A connection over
# a connection limit is accepted and closed at once; every limit hit is
# counted in segmirror_applier_kafka_limit_hits_total{limit}.
# Connections open at once, from every client address together. Default: 1024.
kafka_max_connections = 1024
# Connections open at once from one client IP address. Default: 128.
kafka_max_connections_per_address = 128
# Largest request; a larger length prefix closes the connection before its
# body is read (Kafka's socket.request.max.bytes). A connection holds one
# request at a time, so this is also what one connection holds. Default: 100MiB.
kafka_max_request_size = "100MiB"
# Request bytes read and not yet answered, all connections together (Kafka's
# queued.max.request.bytes); taken as bytes arrive, so a length prefix alone
# holds nothing. A request other than Produce takes 40 times its size (what it
# may grow to once decoded), so one above 1/40 of this is refused. At least
# kafka_max_request_size. Default: 256MiB.
kafka_max_in_flight_bytes = "256MiB"
# A connection with no request started for this long is closed (Kafka's
# connections.max.idle.ms). Default: 10m.
kafka_idle_timeout = "10m"
# A request (or TLS handshake) started and not received whole within this is
# closed (slowloris). Default: 60s.
kafka_request_timeout = "60s"
# A failed SASL authentication is answered after this, then closed (Kafka's
# connection.failed.authentication.delay.ms); 0 to 60s. Default: 1s.
kafka_sasl_failure_delay = "1s"
# Which of the source's topic configs the mirror copies (DescribeConfigs and
# status show them; a STOPPED mirror enforces retention and max.message.bytes):
# whole-key regexes, an exclude always wins. Not copied by default, with the
# reason: min.insync.replicas and unclean.leader.election.enable (the
# destination's durability and availability), *.replication.throttled.replicas
# (source broker ids), remote.storage.enable, local.retention.* and
# remote.log.* (a tiered source would fail every mirror), confluent.* (vendor
# placement). `include` takes a default exclusion back. The same as a table:
# [topic_configs] include = [...] exclude = [...]. Environment:
# SEGMIRROR_TOPIC_CONFIGS_INCLUDE / _EXCLUDE (comma-separated); flags
# --config-include / --config-exclude (repeatable). Default: none.
topic_configs = { include = [], exclude = [] }
"#;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kafkalog::units::ByteSize;

    use super::EXAMPLE;
    use crate::config::{ApplierConfig, DEFAULT_STORE_TIMEOUT};
    use crate::engine::ApplierOptions;

    #[test]
    fn the_example_parses_validates_and_shows_the_defaults() {
        let v = ApplierConfig::from_toml(EXAMPLE)
            .expect("parse")
            .validate(true)
            .expect("valid for run and once");
        let d = ApplierOptions::new("/x", "s");
        let o = &v.options;
        assert_eq!(v.poll_interval, Duration::from_secs(1));
        assert_eq!(o.prefetch, d.prefetch);
        assert_eq!(o.download_memory, d.download_memory);
        assert_eq!(o.disk_reserve_bytes, d.disk_reserve_bytes);
        assert_eq!(o.tiered_topics, d.tiered_topics);
        assert_eq!(v.store_timeout, DEFAULT_STORE_TIMEOUT);
        assert!(o.topics.is_none() && o.exclude.is_none() && v.metrics_addr.is_none());
        assert_eq!(v.kafka_limits, gateway::limits::ListenerLimits::default());
        // Every commented-out key parses and validates too once uncommented.
        let uncommented: String = EXAMPLE
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(kv) if kv.split_once(" = ").is_some_and(|(k, _)| is_key(k)) => kv,
                _ => l,
            })
            .filter(|l| !l.starts_with("poll_interval_ms"))
            .collect::<Vec<_>>()
            .join("\n");
        ApplierConfig::from_toml(&uncommented)
            .expect("parse")
            .validate(true)
            .expect("valid");
    }

    fn is_key(k: &str) -> bool {
        !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
    }

    #[test]
    fn every_config_key_is_in_the_example() {
        // Every field set, serialized: its keys are the struct's keys, so a
        // field added without an example line fails here.
        let full = ApplierConfig {
            log_dir: Some("/a".into()),
            bucket: Some(String::new()),
            source_cluster_id: Some(String::new()),
            cluster_id: Some(String::new()),
            topics: Some(String::new()),
            exclude: Some(String::new()),
            poll_interval: Some(String::new()),
            poll_interval_ms: Some(1),
            download_concurrency: Some(1),
            download_memory: Some(ByteSize(1)),
            stream_above: Some(ByteSize(1)),
            disk_reserve: Some(ByteSize(1)),
            tiered_topics: vec![String::new()],
            metrics_addr: Some(String::new()),
            store_timeout: Some(String::new()),
            preflight: Some(String::new()),
            scrub_bytes_per_hour: Some(ByteSize(1)),
            kafka_max_connections: Some(1),
            kafka_max_connections_per_address: Some(1),
            kafka_max_request_size: Some(ByteSize(1)),
            kafka_max_in_flight_bytes: Some(ByteSize(1)),
            kafka_idle_timeout: Some(String::new()),
            kafka_request_timeout: Some(String::new()),
            kafka_sasl_failure_delay: Some(String::new()),
            topic_configs: Some(crate::config::topic_configs::FilterSection::default()),
        };
        let value = serde_json::to_value(&full).expect("serialize");
        let keys: Vec<&str> = value
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.len(), 25, "{value}");
        for key in keys {
            let shown = EXAMPLE.lines().any(|l| {
                let l = l.strip_prefix("# ").unwrap_or(l);
                l.starts_with(&format!("{key} = "))
            });
            assert!(shown, "config example lacks {key}");
        }
    }
}
