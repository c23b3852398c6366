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
//!
//! Layout: the file's schema, its parsing and the merge of the layers
//! here ([`ApplierConfig`]: `from_toml`, `from_file`, `merge`); the checks
//! of every field and the options they make in `validate`
//! ([`ApplierConfig::validate`], [`Validated`]); the commented example in
//! `example` ([`EXAMPLE`]). Every error is a [`ConfigError`] naming its
//! field.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use kafkalog::units::ByteSize;

mod example;
pub mod topic_configs;
mod validate;

pub use example::EXAMPLE;
pub use validate::{DEFAULT_STORE_TIMEOUT, Validated};

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
    pub topic_configs: Option<topic_configs::FilterSection>,
}

/// A configuration error naming the field.
#[derive(Debug, thiserror::Error)]
#[error("config field `{field}`: {reason}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// The error of config field `field`.
fn field(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field,
        reason: reason.into(),
    }
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
