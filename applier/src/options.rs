//! The applier's settings ([`ApplierOptions`]), what a cycle reports
//! ([`CycleReport`]) and how mirror logs are configured
//! ([`mirror_log_config`]).

use std::path::PathBuf;
use std::time::Duration;

use kafkalog::LogConfig;
use regex::Regex;

pub use crate::command_plan::CommandOutcome;

/// Default of [`ApplierOptions::download_memory`]: 16 MiB (with the
/// applier's ~30 MiB of its own, peak RSS stays under 64 MiB).
pub const DEFAULT_DOWNLOAD_MEMORY: u64 = 16 << 20;

/// Settings of an applier.
#[derive(Debug, Clone)]
pub struct ApplierOptions {
    /// The destination log dir.
    pub log_dir: PathBuf,
    /// The source cluster to mirror.
    pub source_cluster_id: String,
    /// This cluster's own id (for the loop check and failback's LME lookup).
    pub local_cluster_id: Option<String>,
    /// Key prefix in the bucket.
    pub bucket_prefix: String,
    /// The bucket and credential source, for error messages.
    pub bucket_location: String,
    /// Topics to start automatically (None: none).
    pub topics: Option<Regex>,
    /// Topics never started automatically.
    pub exclude: Option<Regex>,
    /// Objects downloaded ahead of the one being appended.
    pub prefetch: usize,
    /// Bytes of objects held in memory at once, downloaded or being
    /// appended (at least one object, whatever its size).
    pub download_memory: u64,
    /// Objects larger than this are appended while they download (see
    /// [`crate::mirror::STREAM_ABOVE`], the default).
    pub stream_above: u64,
    /// Destination topics with `remote.storage.enable=true`.
    pub tiered_topics: Vec<String>,
    /// First retry delay; doubles per retry up to [`ApplierOptions::max_backoff`].
    pub base_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// Size of the disk reserve (see [`crate::reserve`]); 0 disables it.
    pub disk_reserve_bytes: u64,
    /// Bytes per hour the scrub verifies once enabled
    /// ([`Applier::enable_scrub`], `applier run`); 0: off.
    pub scrub_bytes_per_hour: u64,
    /// Starting a mirror may cut records of a partition's own (a plain
    /// partition adopted, a stopped one started again): `--allow-truncate`
    /// (`manifest::cut`). Without it such a start is refused.
    pub allow_truncate: bool,
    /// Which source topic configs a mirror copies (`[topic_configs]`).
    pub config_filter: std::sync::Arc<manifest::topic_config::ConfigFilter>,
}

impl ApplierOptions {
    /// Options with defaults for everything but the required settings.
    pub fn new(log_dir: impl Into<PathBuf>, source_cluster_id: &str) -> ApplierOptions {
        ApplierOptions {
            log_dir: log_dir.into(),
            source_cluster_id: source_cluster_id.to_string(),
            local_cluster_id: None,
            bucket_prefix: String::new(),
            bucket_location: String::new(),
            topics: None,
            exclude: None,
            prefetch: 4,
            download_memory: DEFAULT_DOWNLOAD_MEMORY,
            stream_above: crate::mirror::STREAM_ABOVE,
            tiered_topics: Vec::new(),
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            disk_reserve_bytes: crate::reserve::DEFAULT_RESERVE_BYTES,
            scrub_bytes_per_hour: crate::scrub::DEFAULT_BYTES_PER_HOUR,
            allow_truncate: false,
            config_filter: std::sync::Arc::default(),
        }
    }

    /// What one partition's work needs of these options.
    pub(crate) fn context(&self, tp: &kafkalog::TopicPartition) -> crate::mirror::MirrorContext {
        crate::mirror::MirrorContext {
            local_cluster_id: self.local_cluster_id.clone(),
            tiered_storage: self.tiered_topics.iter().any(|t| t == &tp.topic),
            prefetch: self.prefetch,
            download_memory: self.download_memory,
            stream_above: self.stream_above,
            allow_truncate: self.allow_truncate,
            config_filter: std::sync::Arc::clone(&self.config_filter),
        }
    }

    /// The retry backoff.
    pub(crate) fn backoff(&self) -> crate::driver::Backoff {
        crate::driver::Backoff {
            base: self.base_backoff,
            max: self.max_backoff,
        }
    }

    /// The topic selection (`topics`, `exclude`).
    pub fn selection(&self) -> manifest::topic_pattern::Selection<'_> {
        manifest::topic_pattern::Selection {
            include: self.topics.as_ref(),
            exclude: self.exclude.as_ref(),
        }
    }
}

/// What one cycle did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Batches appended.
    pub batches: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// Partitions that changed state.
    pub transitions: u64,
    /// Why the change feed could not be read, when it could not.
    pub feed_error: Option<String>,
}

/// Mirror partitions that must stay on their source's segment boundaries:
/// the destination never rolls by size or time on its own. Their fsyncs
/// happen at each pass's flush, a roll's included (group commit:
/// `FlushPolicy::OnFlush`).
pub fn mirror_log_config() -> LogConfig {
    LogConfig {
        segment_bytes: u64::MAX,
        segment_ms: None,
        flush: kafkalog::FlushPolicy::OnFlush,
        ..LogConfig::default()
    }
}
