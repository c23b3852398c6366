//! [`ApplierConfig::validate`]: every field checked (a [`ConfigError`]
//! naming it when wrong), defaults filled in, and the options the applier,
//! the bucket, the metrics server and the Kafka listener take
//! ([`Validated`]).

use std::time::Duration;

use regex::Regex;

use kafkalog::units::ByteSize;

use super::{ApplierConfig, ConfigError, field};
use crate::engine::ApplierOptions;

/// Default of `store_timeout`.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(60);

/// Smallest `download_memory`: 1 MiB.
const MIN_DOWNLOAD_MEMORY: u64 = 1 << 20;
/// Largest `download_memory`: 64 GiB.
const MAX_DOWNLOAD_MEMORY: u64 = 64 << 30;

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
        options.config_filter = std::sync::Arc::new(config_filter.clone());
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
}
