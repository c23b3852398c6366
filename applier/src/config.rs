//! The applier's configuration: a TOML file, overridden by environment
//! variables and flags (the binary merges them), validated with errors that
//! name the field.
//!
//! `applier config example` prints [`EXAMPLE`]: every key with its default
//! and meaning (tests keep it complete and parsing). The key names and
//! value shapes are the shipper's where both have the key (`bucket`,
//! `cluster_id`, `topics`, `exclude`, `metrics_addr`, `store_timeout`).
//!
//! Sizes are integers (bytes) or strings with a unit (`B`, `KB`, `MB`,
//! `GB` powers of 1000; `KiB`, `MiB`, `GiB` powers of 1024). Durations are
//! humantime strings (`500ms`, `5s`, `10m`, `1h`). Older spellings still
//! read for one release: `poll_interval_ms` (milliseconds; not together
//! with `poll_interval`) and `disk_reserve_bytes` (= `disk_reserve`).
//!
//! Environment variables (each overrides the file; flags override them):
//! `SEGMIRROR_APPLIER_CONFIG` (the file), `SEGMIRROR_LOG_DIR`,
//! `SEGMIRROR_BUCKET`, `SEGMIRROR_SOURCE_CLUSTER_ID`, `SEGMIRROR_CLUSTER_ID`,
//! `SEGMIRROR_TOPICS`, `SEGMIRROR_EXCLUDE`, `SEGMIRROR_POLL_INTERVAL`,
//! `SEGMIRROR_DOWNLOAD_CONCURRENCY`, `SEGMIRROR_DOWNLOAD_MEMORY`,
//! `SEGMIRROR_STREAM_ABOVE`,
//! `SEGMIRROR_DISK_RESERVE`, `SEGMIRROR_METRICS_ADDR`,
//! `SEGMIRROR_STORE_TIMEOUT`, `SEGMIRROR_PREFLIGHT`; the Kafka listener's
//! limits (`crate::listener`): `SEGMIRROR_KAFKA_MAX_CONNECTIONS`,
//! `SEGMIRROR_KAFKA_MAX_CONNECTIONS_PER_ADDRESS`,
//! `SEGMIRROR_KAFKA_MAX_REQUEST_SIZE`, `SEGMIRROR_KAFKA_MAX_IN_FLIGHT_BYTES`,
//! `SEGMIRROR_KAFKA_IDLE_TIMEOUT`, `SEGMIRROR_KAFKA_REQUEST_TIMEOUT`,
//! `SEGMIRROR_KAFKA_SASL_FAILURE_DELAY`.

use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::engine::ApplierOptions;
use kafkalog::units::ByteSize;

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

/// The configuration file's contents (every field optional in the file;
/// [`ApplierConfig::validate`] says what is missing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplierConfig {
    /// The destination log dir.
    pub log_dir: Option<PathBuf>,
    /// Bucket URL.
    pub bucket: Option<String>,
    /// The source cluster to mirror.
    pub source_cluster_id: Option<String>,
    /// This cluster's own id.
    pub cluster_id: Option<String>,
    /// Topics to start automatically (regex, whole name).
    pub topics: Option<String>,
    /// Topics never started automatically (regex).
    pub exclude: Option<String>,
    /// Poll interval, a humantime duration (`500ms`, `5s`).
    pub poll_interval: Option<String>,
    /// Poll interval in milliseconds: the older spelling of
    /// `poll_interval`, still read (not together with it).
    pub poll_interval_ms: Option<u64>,
    /// Objects downloaded ahead.
    pub download_concurrency: Option<usize>,
    /// Bytes of downloaded objects held at once (downloaded or being
    /// appended); one object is always fetched, whatever its size.
    pub download_memory: Option<ByteSize>,
    /// Objects larger than this are appended while they download.
    pub stream_above: Option<ByteSize>,
    /// Size of the disk reserve (`applier::reserve`); 0 disables it. The
    /// older key `disk_reserve_bytes` is still read.
    #[serde(alias = "disk_reserve_bytes")]
    pub disk_reserve: Option<ByteSize>,
    /// Destination topics with `remote.storage.enable=true`.
    #[serde(default)]
    pub tiered_topics: Vec<String>,
    /// Address for Prometheus metrics (`host:port`).
    pub metrics_addr: Option<String>,
    /// How long `applier once` waits for an unreachable bucket before it
    /// gives up (a duration: `60s`, `2m`; default 60 s).
    pub store_timeout: Option<String>,
    /// Bucket checks at start: `off`, `warn` or `enforce`.
    pub preflight: Option<String>,
    /// Bytes per hour the scrub of `applier run` verifies (0: off).
    pub scrub_bytes_per_hour: Option<ByteSize>,
    /// Kafka listener: connections open at once ([`crate::listener`]).
    pub kafka_max_connections: Option<usize>,
    /// Kafka listener: connections open at once from one address.
    pub kafka_max_connections_per_address: Option<usize>,
    /// Kafka listener: largest request.
    pub kafka_max_request_size: Option<ByteSize>,
    /// Kafka listener: request bytes held, all connections together.
    pub kafka_max_in_flight_bytes: Option<ByteSize>,
    /// Kafka listener: idle timeout (a duration).
    pub kafka_idle_timeout: Option<String>,
    /// Kafka listener: request timeout (a duration).
    pub kafka_request_timeout: Option<String>,
    /// Kafka listener: delay before a failed SASL authentication is answered.
    pub kafka_sasl_failure_delay: Option<String>,
    /// Which source topic configs are copied (`[topic_configs]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_configs: Option<crate::topic_configs::FilterSection>,
}

/// Default of `store_timeout`.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(60);

/// Smallest `download_memory`: 1 MiB.
const MIN_DOWNLOAD_MEMORY: u64 = 1 << 20;
/// Largest `download_memory`: 64 GiB.
const MAX_DOWNLOAD_MEMORY: u64 = 64 << 30;

/// A configuration error naming the field.
#[derive(Debug, thiserror::Error)]
#[error("config field `{field}`: {reason}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

fn field(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field,
        reason: reason.into(),
    }
}

/// The topic pattern of config field `name`, matching whole topic names only
/// ([`manifest::topic_pattern`]).
fn whole_name_regex(name: &'static str, pattern: &str) -> Result<Regex, ConfigError> {
    manifest::topic_pattern::whole_name(pattern).map_err(|reason| field(name, reason))
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Validated {
    /// Options for [`crate::Applier`].
    pub options: ApplierOptions,
    /// The bucket, when configured.
    pub bucket: Option<bucket::url::BucketUrl>,
    /// Poll interval.
    pub poll_interval: Duration,
    /// Metrics address.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// How long `once` waits for an unreachable bucket.
    pub store_timeout: Duration,
    /// Bucket checks at start.
    pub preflight: doctor::PreflightMode,
    /// The Kafka listener's limits.
    pub kafka_limits: gateway::limits::ListenerLimits,
    /// Which source topic configs are copied (`[topic_configs]`).
    pub config_filter: manifest::topic_config::ConfigFilter,
}

impl ApplierConfig {
    /// Parses a TOML file's text; unknown fields are errors naming them.
    pub fn from_toml(text: &str) -> Result<ApplierConfig, ConfigError> {
        toml::from_str(text).map_err(|e| field("(file)", e.to_string()))
    }

    /// Reads and parses a TOML file. A relative `log_dir` in it is
    /// relative to the file's directory.
    pub fn from_file(path: &std::path::Path) -> Result<ApplierConfig, ConfigError> {
        let text =
            kafkalog::fsutil::read_to_string_bounded(path, kafkalog::fsutil::MAX_SMALL_FILE_BYTES)
                .map_err(|e| field("(file)", format!("{}: {e}", path.display())))?;
        let mut config = Self::from_toml(&text)
            .map_err(|e| field(e.field, format!("{}: {}", path.display(), e.reason)))?;
        if let Some(dir) = config.log_dir.as_mut()
            && dir.is_relative()
        {
            let base = path.parent().unwrap_or(std::path::Path::new(""));
            *dir = base.join(&*dir);
        }
        Ok(config)
    }

    /// Fields set in `over` replace those here.
    pub fn merge(mut self, over: ApplierConfig) -> ApplierConfig {
        macro_rules! take {
            ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f; } )* };
        }
        take!(
            log_dir,
            bucket,
            source_cluster_id,
            cluster_id,
            topics,
            exclude,
            poll_interval,
            poll_interval_ms,
            download_concurrency,
            download_memory,
            stream_above,
            disk_reserve,
            metrics_addr,
            store_timeout,
            preflight,
            scrub_bytes_per_hour,
            kafka_max_connections,
            kafka_max_connections_per_address,
            kafka_max_request_size,
            kafka_max_in_flight_bytes,
            kafka_idle_timeout,
            kafka_request_timeout,
            kafka_sasl_failure_delay
        );
        if !over.tiered_topics.is_empty() {
            self.tiered_topics = over.tiered_topics;
        }
        if let Some(over) = over.topic_configs {
            let base = self.topic_configs.take().unwrap_or_default();
            self.topic_configs = Some(base.merge(over));
        }
        self
    }

    /// Validates. `need_bucket` for commands that read the bucket.
    pub fn validate(&self, need_bucket: bool) -> Result<Validated, ConfigError> {
        let log_dir = self
            .log_dir
            .clone()
            .ok_or_else(|| field("log_dir", "required (--log-dir)"))?;
        // Relative to the working directory (a file's own relative paths
        // were made relative to its directory when it was read).
        let log_dir = std::path::absolute(&log_dir)
            .map_err(|e| field("log_dir", format!("{}: {e}", log_dir.display())))?;
        let store_timeout = match &self.store_timeout {
            Some(t) => humantime::parse_duration(t)
                .map_err(|e| field("store_timeout", format!("{t:?}: {e} (examples: 30s, 2m)")))?,
            None => DEFAULT_STORE_TIMEOUT,
        };
        if store_timeout.is_zero() {
            return Err(field("store_timeout", "must be more than 0"));
        }
        let bucket = match &self.bucket {
            Some(b) => {
                Some(bucket::url::BucketUrl::parse(b).map_err(|e| field("bucket", e.to_string()))?)
            }
            None if need_bucket => {
                return Err(field(
                    "bucket",
                    "required (--bucket file:///abs/path | s3://bucket/prefix)",
                ));
            }
            None => None,
        };
        let source = match &self.source_cluster_id {
            Some(s) => {
                manifest::layout::validate_cluster_id(s)
                    .map_err(|e| field("source_cluster_id", e.to_string()))?;
                s.clone()
            }
            None if need_bucket => {
                return Err(field("source_cluster_id", "required (--source-cluster-id)"));
            }
            None => String::new(),
        };
        if let Some(c) = &self.cluster_id {
            manifest::layout::validate_cluster_id(c)
                .map_err(|e| field("cluster_id", e.to_string()))?;
            // Mirroring this cluster's own shipped data back into itself:
            // a mirror loop, which would make the source partitions
            // read-only mirrors of themselves and cut what was not shipped.
            if Some(c) == self.source_cluster_id.as_ref() {
                return Err(field(
                    "cluster_id",
                    format!(
                        "--cluster-id {c:?} equals --source-cluster-id {c:?}: a cluster cannot mirror itself (a mirror loop); --cluster-id is this destination's own id, --source-cluster-id the cluster whose shipped data it applies"
                    ),
                ));
            }
        }
        let anchored = |name: &'static str, re: &Option<String>| {
            re.as_deref().map(|r| whole_name_regex(name, r)).transpose()
        };
        let poll_interval = match (&self.poll_interval, self.poll_interval_ms) {
            (Some(_), Some(_)) => {
                return Err(field(
                    "poll_interval",
                    "give poll_interval or the older poll_interval_ms, not both",
                ));
            }
            (Some(t), None) => humantime::parse_duration(t)
                .map_err(|e| field("poll_interval", format!("{t:?}: {e} (examples: 500ms, 5s)")))?,
            (None, Some(ms)) => Duration::from_millis(ms),
            (None, None) => Duration::from_secs(1),
        };
        if poll_interval.is_zero() || poll_interval > Duration::from_secs(3600) {
            return Err(field("poll_interval", "must be 1ms to 1h"));
        }
        let concurrency = self.download_concurrency.unwrap_or(4);
        if concurrency == 0 || concurrency > 64 {
            return Err(field("download_concurrency", "must be 1 to 64"));
        }
        let download_memory = self
            .download_memory
            .map_or(crate::engine::DEFAULT_DOWNLOAD_MEMORY, |b| b.0);
        if !(MIN_DOWNLOAD_MEMORY..=MAX_DOWNLOAD_MEMORY).contains(&download_memory) {
            return Err(field(
                "download_memory",
                format!(
                    "must be {MIN_DOWNLOAD_MEMORY} (1 MiB) to {MAX_DOWNLOAD_MEMORY} (64 GiB) bytes"
                ),
            ));
        }
        for t in &self.tiered_topics {
            kafkalog::topic::validate_topic_name(t)
                .map_err(|e| field("tiered_topics", e.to_string()))?;
        }
        let metrics_addr = self
            .metrics_addr
            .as_ref()
            .map(|a| {
                a.parse()
                    .map_err(|e| field("metrics_addr", format!("{a:?}: {e}")))
            })
            .transpose()?;
        let mut options = ApplierOptions::new(log_dir, &source);
        options.local_cluster_id = self.cluster_id.clone();
        options.bucket_prefix = bucket
            .as_ref()
            .map(|b| b.prefix().to_string())
            .unwrap_or_default();
        options.bucket_location = bucket.as_ref().map(|b| b.location()).unwrap_or_default();
        options.topics = anchored("topics", &self.topics)?;
        options.exclude = anchored("exclude", &self.exclude)?;
        options.prefetch = concurrency;
        options.download_memory = download_memory;
        if let Some(ByteSize(bytes)) = self.stream_above {
            if bytes > 1 << 30 {
                return Err(field("stream_above", "must be 0 to 1073741824 (1 GiB)"));
            }
            options.stream_above = bytes;
        }
        if let Some(ByteSize(bytes)) = self.disk_reserve {
            if bytes > 1 << 30 {
                return Err(field("disk_reserve", "must be 0 to 1073741824 (1 GiB)"));
            }
            options.disk_reserve_bytes = bytes;
        }
        options.tiered_topics = self.tiered_topics.clone();
        if let Some(ByteSize(bytes)) = self.scrub_bytes_per_hour {
            options.scrub_bytes_per_hour = bytes;
        }
        let preflight = match &self.preflight {
            None => doctor::PreflightMode::default(),
            Some(p) => p.parse().map_err(|e: String| field("preflight", e))?,
        };
        let kafka_limits = crate::listener::limits(self)?;
        let config_filter = self.topic_configs.clone().unwrap_or_default().filter()?;
        Ok(Validated {
            config_filter,
            options,
            bucket,
            poll_interval,
            metrics_addr,
            store_timeout,
            preflight,
            kafka_limits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_against_the_file_or_the_working_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("applier.toml");
        std::fs::write(&file, "log_dir = \"mirror\"\n").expect("write");
        let c = ApplierConfig::from_file(&file).expect("parse");
        assert_eq!(c.log_dir, Some(dir.path().join("mirror")));
        let flag = ApplierConfig {
            log_dir: Some("data/mirror".into()),
            ..ApplierConfig::default()
        };
        let v = flag.validate(false).expect("valid");
        let cwd = std::env::current_dir().expect("cwd");
        assert_eq!(v.options.log_dir, cwd.join("data/mirror"));
    }

    #[test]
    fn the_store_timeout_is_a_duration() {
        let c =
            ApplierConfig::from_toml("log_dir = \"/x\"\nstore_timeout = \"5s\"").expect("parse");
        assert_eq!(
            c.validate(false).expect("valid").store_timeout,
            Duration::from_secs(5)
        );
        let c =
            ApplierConfig::from_toml("log_dir = \"/x\"\nstore_timeout = \"soon\"").expect("parse");
        assert_eq!(c.validate(false).expect_err("bad").field, "store_timeout");
        let c = ApplierConfig::from_toml("log_dir = \"/x\"").expect("parse");
        assert_eq!(
            c.validate(false).expect("valid").store_timeout,
            DEFAULT_STORE_TIMEOUT
        );
    }

    #[test]
    fn errors_name_the_field() {
        let e =
            ApplierConfig::from_toml("log_dir = \"/x\"\npoll_interval = 5\n").expect_err("unknown");
        assert!(e.to_string().contains("poll_interval"), "{e}");
        let c = ApplierConfig::from_toml(
            "log_dir = \"/x\"\nbucket = \"gs://x\"\nsource_cluster_id = \"a\"",
        )
        .expect("parse");
        assert_eq!(c.validate(true).expect_err("bucket").field, "bucket");
        let c = ApplierConfig::from_toml("log_dir = \"/x\"\ntopics = \"(\"").expect("parse");
        assert_eq!(c.validate(false).expect_err("regex").field, "topics");
        let c = ApplierConfig::from_toml("bucket = \"memory://\"").expect("parse");
        assert_eq!(c.validate(true).expect_err("log_dir").field, "log_dir");
        let c = ApplierConfig::from_toml(
            "log_dir = \"/x\"\nbucket = \"memory://\"\nsource_cluster_id = \"../x\"",
        )
        .expect("parse");
        assert_eq!(c.validate(true).expect_err("id").field, "source_cluster_id");
        for bad in ["0", "1048575", "68719476737"] {
            let c = ApplierConfig::from_toml(&format!("log_dir = \"/x\"\ndownload_memory = {bad}"))
                .expect("parse");
            let e = c.validate(false).expect_err(bad);
            assert_eq!(e.field, "download_memory", "{e}");
        }
    }

    #[test]
    fn download_memory_defaults_to_32_mib_and_is_taken_from_the_file() {
        let v = ApplierConfig::from_toml("log_dir = \"/x\"")
            .expect("parse")
            .validate(false)
            .expect("valid");
        assert_eq!(v.options.download_memory, 16 << 20);
        let v = ApplierConfig::from_toml("log_dir = \"/x\"\ndownload_memory = 1048576")
            .expect("parse")
            .validate(false)
            .expect("valid");
        assert_eq!(v.options.download_memory, 1 << 20);
    }

    #[test]
    fn topic_patterns_match_whole_names_and_cannot_escape_their_anchors() {
        let validate = |extra: &str| {
            ApplierConfig::from_toml(&format!("log_dir = \"/x\"\n{extra}"))
                .expect("parse")
                .validate(false)
        };
        // Closing the anchoring group early is refused, naming the field.
        for (extra, name) in [
            ("topics = \"orders)|(.*\"", "topics"),
            ("exclude = \"tmp)|(.*\"", "exclude"),
            ("topics = \"a)(b\"", "topics"),
        ] {
            let e = validate(extra).expect_err(extra);
            assert_eq!(e.field, name, "{e}");
            assert!(e.reason.contains("invalid regex"), "{e}");
        }
        let re = validate("topics = \"orders|payments\"")
            .expect("valid")
            .options
            .topics
            .expect("topics");
        for t in ["orders", "payments"] {
            assert!(re.is_match(t), "{t}");
        }
        for t in [
            "orders2",
            "xorders",
            "payments-x",
            "orderspayments",
            "orders|payments",
        ] {
            assert!(!re.is_match(t), "{t}");
        }
        let re = validate("exclude = \"tmp-.*\"")
            .expect("valid")
            .options
            .exclude
            .expect("exclude");
        assert!(re.is_match("tmp-1") && !re.is_match("xtmp-1"));
    }

    #[test]
    fn poll_interval_is_a_duration_and_the_old_milliseconds_still_read() {
        let v = |text: &str| {
            ApplierConfig::from_toml(text)
                .expect("parse")
                .validate(false)
        };
        assert_eq!(
            v("log_dir = \"/x\"\npoll_interval = \"500ms\"")
                .expect("valid")
                .poll_interval,
            Duration::from_millis(500)
        );
        assert_eq!(
            v("log_dir = \"/x\"\npoll_interval_ms = 250")
                .expect("valid")
                .poll_interval,
            Duration::from_millis(250)
        );
        assert_eq!(
            v("log_dir = \"/x\"").expect("valid").poll_interval,
            Duration::from_secs(1)
        );
        let both =
            v("log_dir = \"/x\"\npoll_interval = \"1s\"\npoll_interval_ms = 5").expect_err("both");
        assert_eq!(both.field, "poll_interval");
        let bad = v("log_dir = \"/x\"\npoll_interval = \"soon\"").expect_err("bad");
        assert_eq!(bad.field, "poll_interval", "{bad}");
    }

    #[test]
    fn sizes_take_units() {
        let v = ApplierConfig::from_toml(
            "log_dir = \"/x\"\ndownload_memory = \"8MiB\"\ndisk_reserve = \"2MiB\"",
        )
        .expect("parse")
        .validate(false)
        .expect("valid");
        assert_eq!(v.options.download_memory, 8 << 20);
        assert_eq!(v.options.disk_reserve_bytes, 2 << 20);
        // The older key still reads.
        let v = ApplierConfig::from_toml("log_dir = \"/x\"\ndisk_reserve_bytes = 4096")
            .expect("parse")
            .validate(false)
            .expect("valid");
        assert_eq!(v.options.disk_reserve_bytes, 4096);
    }

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
            topic_configs: Some(crate::topic_configs::FilterSection::default()),
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

    #[test]
    fn a_cluster_cannot_mirror_itself() {
        let c = ApplierConfig::from_toml(
            "log_dir = \"/x\"\nbucket = \"memory://\"\nsource_cluster_id = \"src3\"\ncluster_id = \"src3\"",
        )
        .expect("parse");
        let e = c.validate(true).expect_err("a loop");
        assert_eq!(e.field, "cluster_id");
        assert!(e.to_string().contains("mirror loop"), "{e}");
        // Also where the bucket is not needed (pause, resume, stop).
        assert!(c.validate(false).is_err());
    }

    #[test]
    fn flags_override_the_file() {
        let file = ApplierConfig::from_toml(
            "log_dir = \"/a\"\npoll_interval_ms = 500\ntopics = \"orders\"",
        )
        .expect("parse");
        let flags = ApplierConfig {
            log_dir: Some("/b".into()),
            ..ApplierConfig::default()
        };
        let c = file.merge(flags);
        assert_eq!(c.log_dir.as_deref(), Some(std::path::Path::new("/b")));
        assert_eq!(c.poll_interval_ms, Some(500));
        let v = c.validate(false).expect("valid");
        assert!(
            v.options
                .topics
                .as_ref()
                .is_some_and(|r| r.is_match("orders") && !r.is_match("orders2"))
        );
    }
}
