//! The shipper's configuration: a TOML file, overridden by `SEGMIRROR_*`
//! environment variables, overridden by flags (the binary merges the three
//! with [`ShipperConfig::merge`]), then validated by
//! [`ShipperConfig::validate`], whose errors name the field.
//!
//! ```toml
//! log_dirs = ["/var/lib/kafka/data"]          # required; Kafka's log.dirs (a list, or one string)
//! # log_dir = "/var/lib/kafka/data"           # the same for one dir (not with log_dirs)
//! bucket = "s3://dr-bucket/segmirror"         # required: file:///abs/path, memory://, s3://bucket/prefix
//! cluster_id = "MkU3OEVBNTcwNTJENDM2Qk"       # required: this (source) cluster's id
//! shipper_id = "broker-1"                     # default: <hostname>-<pid>
//! topics = "orders|payments"                  # regex on the whole topic name; default: every topic
//! exclude = "tmp-.*"                          # regex; default: none
//! groups = "billing-.*"                       # consumer groups whose offsets are shipped (regex on the whole id); default: every group
//! exclude_groups = "console-consumer-.*"      # groups never shipped; default: none
//! group_sync_interval = "5s"                  # how often __consumer_offsets is read and changed offsets shipped
//! tail_interval = "5s"                        # how often the active segments are tailed (bounds the RPO)
//! upload_concurrency = 4                      # objects uploaded at once
//! part_size = "8MiB"                          # multipart part size (>= 5 MiB on S3; default 8MiB there, 1MiB elsewhere); smaller objects are one PUT
//! max_object_size = "64MiB"                   # larger spans of a segment are split into several objects
//! pack_below = "1MiB"                         # a cycle's ranges under this go into one shared pack object (default); 0: off (layout 1)
//! max_cycle_bytes = "1GiB"                    # per partition per cycle (a backlog takes several cycles)
//! rate_limit = "100MiB"                       # bytes per second for all uploads; 0 or absent: unlimited
//! ship_beyond_hw = false                      # true: ship up to the log end even when replication-offset-checkpoint exists
//! head_deltas = true                          # true (default): a cycle's appends are committed by the head (no manifest PUT per partition)
//! metrics_addr = "127.0.0.1:9464"             # Prometheus endpoint (GET /metrics); absent: none
//! delete_grace = "1h"                         # unreferenced objects are deleted after this; "never": leave them to lifecycle rules
//! sweep_interval = "10m"                      # how often partitions with changes are swept for unreferenced objects
//! compact_after = "1h"                        # with pack_below: packed ranges this old are rewritten into objects of their own
//! prices = "s3-standard"                      # request prices for the cost metric and `shipper status` (s3-standard, s3-express-one-zone, gcs-standard, r2)
//! partition_delete_grace = "5m"               # a partition dir gone this long is published as deleted
//! fence_backoff = "5m"                        # back-off after losing a manifest commit to another shipper
//! error_backoff = "5m"                        # back-off after a non-retryable error (corrupt source data)
//! store_timeout = "60s"                       # `shipper once` gives up when the store does not answer within this
//! preflight = "warn"                          # bucket checks at start: off, warn (log failures) or enforce (exit 1)
//! tiered_topics = ["archive"]                 # source topics with remote.storage.enable=true (names, as the applier's key); default: none
//! metadata_log_dir = "/var/lib/kafka/meta"    # the broker's metadata.log.dir (holds __cluster_metadata-0); default: the log dir that holds it, if any
//! broker_config = "/etc/kafka/server.properties" # the broker's static config, for topic config defaults; default: none
//! ```
//!
//! Relative paths: `log_dirs` in a file resolve against the file's
//! directory; given as flags or in `SEGMIRROR_LOG_DIRS`, against the
//! working directory ([`ShipperConfig::resolve_paths`]). Bucket URLs are
//! URLs: `file://` takes an absolute path only (`file:///abs/path`).
//!
//! Sizes are integers (bytes) or strings with a unit (`B`, `KB`, `MB`,
//! `GB` powers of 1000; `KiB`, `MiB`, `GiB` powers of 1024). Durations are
//! humantime strings (`500ms`, `5s`, `10m`, `1h`).
//!
//! `shipper config example` prints [`EXAMPLE`]: every key with its default
//! and meaning (a test keeps it complete).
//!
//! Environment variables (each overrides the file; flags override them):
//! `SEGMIRROR_LOG_DIRS` (paths separated by `:`) or `SEGMIRROR_LOG_DIR`
//! (one; not both), `SEGMIRROR_BUCKET`,
//! `SEGMIRROR_CLUSTER_ID`, `SEGMIRROR_SHIPPER_ID`, `SEGMIRROR_TOPICS`,
//! `SEGMIRROR_EXCLUDE`, `SEGMIRROR_GROUPS`, `SEGMIRROR_EXCLUDE_GROUPS`,
//! `SEGMIRROR_GROUP_SYNC_INTERVAL`, `SEGMIRROR_TAIL_INTERVAL`,
//! `SEGMIRROR_UPLOAD_CONCURRENCY`, `SEGMIRROR_PART_SIZE`,
//! `SEGMIRROR_MAX_OBJECT_SIZE`, `SEGMIRROR_MAX_CYCLE_BYTES`,
//! `SEGMIRROR_RATE_LIMIT`, `SEGMIRROR_SHIP_BEYOND_HW`,
//! `SEGMIRROR_METRICS_ADDR`, `SEGMIRROR_DELETE_GRACE`,
//! `SEGMIRROR_SWEEP_INTERVAL`, `SEGMIRROR_PARTITION_DELETE_GRACE`,
//! `SEGMIRROR_FENCE_BACKOFF`, `SEGMIRROR_ERROR_BACKOFF`,
//! `SEGMIRROR_STORE_TIMEOUT`, `SEGMIRROR_PREFLIGHT`, `SEGMIRROR_TIERED_TOPICS`
//! (names separated by `,`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bucket::url::BucketUrl;
pub use kafkalog::units::ByteSize;
use regex::Regex;
use serde::{Deserialize, Serialize};

/// What `shipper config example` prints: every key, its default and its
/// meaning. It parses and validates as it is; keys without a default
/// value to show (or that exclude another) are commented out.
pub const EXAMPLE: &str = r#"# segmirror shipper configuration (shipper run --config FILE).
# Precedence: this file, then SEGMIRROR_* environment variables, then flags.
# Sizes: bytes or a unit (KB, MB, GB: powers of 1000; KiB, MiB, GiB: 1024).
# Durations: 500ms, 5s, 10m, 1h.

# Required. The broker's log dirs (Kafka's log.dirs): a list, or one string.
# Relative paths resolve against this file's directory.
log_dirs = ["/var/lib/kafka/data"]
# The same for one dir; give log_dir or log_dirs, not both.
# log_dir = "/var/lib/kafka/data"

# Required. Where objects go: s3://bucket/prefix, file:///abs/path or memory://.
# S3 credentials, region and endpoint come from the standard AWS variables.
bucket = "s3://dr-bucket/segmirror"

# Required. This (source) cluster's id: the namespace of its objects.
cluster_id = "MkU3OEVBNTcwNTJENDM2Qk"

# This shipper's id, written into every manifest. Default: <hostname>-<pid>.
# shipper_id = "broker-1"

# Topics to ship: a regex matched against the whole topic name. Default: every topic.
# topics = "orders|payments"

# Topics never shipped: a regex matched against the whole topic name. Default: none.
# exclude = "tmp-.*"

# Consumer groups whose committed offsets (the source's __consumer_offsets)
# are shipped, for the offsets of the topics shipped: a regex matched
# against the whole group id. Default: every group.
# groups = "billing-.*"

# Consumer groups never shipped (regex on the whole group id); ".*" ships
# no group offsets. Default: none.
# exclude_groups = "console-consumer-.*"

# How often __consumer_offsets is read and changed offsets shipped. Default: 5s.
group_sync_interval = "5s"

# How often the active segments are tailed (bounds the RPO). Default: 5s.
tail_interval = "5s"

# Objects uploaded at once, across partitions (1 to 256). Default: 4.
upload_concurrency = 4

# Multipart part size; smaller objects are one PUT. At least 5MiB on S3.
# Default: 8MiB on S3, 1MiB on file:// and memory://.
part_size = "8MiB"

# Largest object: longer spans of a segment are split on batch boundaries. Default: 64MiB.
max_object_size = "64MiB"

# A cycle's ranges smaller than this are packed into one object for all
# partitions (one PUT instead of one per range; docs/mirroring.md, "Layout
# 2"). `shipper run` deletes a pack once no latest version has named it
# for `delete_grace`. 0: every range an object of its own (layout 1).
# Default: 1MiB.
pack_below = "1MiB"

# Most bytes shipped per partition per cycle (a backlog takes several cycles). Default: 1GiB.
max_cycle_bytes = "1GiB"

# Upload rate limit for all uploads, bytes per second; 0: unlimited. Default: 0.
rate_limit = 0

# true: ship up to the log end even when replication-offset-checkpoint exists
# (unsafe on a broker: unreplicated batches may be truncated). Default: false.
ship_beyond_hw = false

# true: a partition's version that only appends ranges is committed by the
# cycle's head as a delta instead of a manifest object of its own (every
# 32 deltas the version goes into the cycle's one manifest pack; a manifest
# object for every other change; docs/mirroring.md, "Layout 2"). Every
# shipper of a cluster must use the same setting, and appliers at least as
# new. Default: true.
head_deltas = true

# Serve Prometheus metrics on this address (GET /metrics). Default: not served.
# metrics_addr = "127.0.0.1:9464"

# Delete unreferenced objects after this long, or "never" (leave them to
# bucket lifecycle rules). Default: 1h.
delete_grace = "1h"

# How often partitions with changes are swept for unreferenced objects. Default: 10m.
sweep_interval = "10m"

# With pack_below: a partition's packed ranges are rewritten into one object
# of its own when their segment rolls, when they reach 64MiB, or once the
# oldest of them is this old (runs of 128 ranges go before that into one
# compacted pack shared by every partition due). Default: 1h.
compact_after = "1h"

# Request prices the cost metric and `shipper status` use: s3-standard,
# s3-express-one-zone, gcs-standard or r2 (US list prices). Default: s3-standard.
prices = "s3-standard"

# A partition dir gone this long is published as deleted. Default: 5m.
partition_delete_grace = "5m"

# Back-off after losing a manifest commit to another shipper. Default: 5m.
fence_backoff = "5m"

# Back-off after a non-retryable error (corrupt source data). Default: 5m.
error_backoff = "5m"

# `shipper once` gives up when the store does not answer within this. Default: 60s.
store_timeout = "60s"

# Bucket checks run once at start by run and once (the must-have subset of
# `shipper doctor`: versioning, encryption, public access block, TLS-only
# policy, lifecycle; on file:// writable, rename, fsync, free space):
# "off", "warn" (log each failure, start anyway) or "enforce" (exit 1 before
# touching data). Default: warn.
preflight = "warn"

# Source topics with tiered storage (remote.storage.enable=true), by exact
# name (the applier's key of the same name lists its own); with the broker's
# KRaft metadata log, topics whose config says so are tiered without being
# listed here. Their log start offset (in
# log-start-offset-checkpoint) may lie below the first local segment: the
# offsets in between are in remote storage, which the shipper cannot read.
# When local retention passes what was shipped, those offsets are reported
# as in remote storage (status GAPS "(remote)"), not as lost. Default: none.
tiered_topics = []

# The broker's KRaft metadata.log.dir (the directory that holds
# __cluster_metadata-0), when it is not one of the log dirs. With a
# metadata log, each topic's configs (its overrides, the broker's and the
# cluster's dynamic defaults) are published with its manifests. Default: the
# first log dir that holds __cluster_metadata-0; none without one.
# metadata_log_dir = "/var/lib/kafka/meta"

# The broker's static server.properties, read for the broker-level defaults
# of topic configs (log.retention.hours, message.max.bytes, ...) that no
# dynamic config overrides. Default: none (Kafka's defaults).
# broker_config = "/etc/kafka/server.properties"
"#;

/// S3's smallest part (every part but the last).
pub const S3_MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

/// The configuration as written (file, environment or flags): every field
/// optional; [`ShipperConfig::validate`] fills defaults and says what is
/// missing or wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShipperConfig {
    /// Source log dirs (Kafka's `log.dirs`): a list, or one string.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "one_or_many"
    )]
    pub log_dirs: Vec<PathBuf>,
    /// One source log dir (the same as `log_dirs` with one entry; giving
    /// both is an error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_dir: Option<PathBuf>,
    /// Bucket URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// This (source) cluster's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// This shipper's id, written into every manifest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shipper_id: Option<String>,
    /// Topics to ship (regex on the whole name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topics: Option<String>,
    /// Topics never shipped (regex on the whole name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude: Option<String>,
    /// Consumer groups whose offsets are shipped (regex on the whole id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<String>,
    /// Consumer groups never shipped (regex on the whole id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude_groups: Option<String>,
    /// How often group offsets are read and shipped (humantime).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_sync_interval: Option<String>,
    /// Tail interval (humantime).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_interval: Option<String>,
    /// Objects uploaded at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload_concurrency: Option<usize>,
    /// Multipart part size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part_size: Option<ByteSize>,
    /// Largest object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_object_size: Option<ByteSize>,
    /// Ranges under this size are packed (0: off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pack_below: Option<ByteSize>,
    /// Most bytes shipped per partition per cycle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cycle_bytes: Option<ByteSize>,
    /// Upload rate limit in bytes per second (0: unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<ByteSize>,
    /// Ship up to the log end even when `replication-offset-checkpoint`
    /// exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ship_beyond_hw: Option<bool>,
    /// Appends committed by the head as deltas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_deltas: Option<bool>,
    /// Prometheus endpoint address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<String>,
    /// Grace before unreferenced objects are deleted, or `never`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_grace: Option<String>,
    /// Interval between sweeps of a partition that changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_interval: Option<String>,
    /// Age at which packed ranges are compacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compact_after: Option<String>,
    /// Request prices preset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prices: Option<String>,
    /// How long a partition dir must be gone to be published as deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_delete_grace: Option<String>,
    /// Back-off after losing a commit to another shipper.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence_backoff: Option<String>,
    /// Back-off after a non-retryable error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_backoff: Option<String>,
    /// How long `shipper once` waits for the store to answer before it
    /// gives up (humantime).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_timeout: Option<String>,
    /// Bucket checks at start: `off`, `warn` or `enforce`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preflight: Option<String>,
    /// Source topics with tiered storage, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiered_topics: Vec<String>,
    /// The broker's metadata.log.dir, when not one of the log dirs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata_log_dir: Option<PathBuf>,
    /// The broker's static `server.properties`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_config: Option<PathBuf>,
}

/// `log_dirs = "/a"` or `log_dirs = ["/a", "/b"]`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(PathBuf),
        Many(Vec<PathBuf>),
    }
    match OneOrMany::deserialize(d) {
        Ok(OneOrMany::One(p)) => Ok(vec![p]),
        Ok(OneOrMany::Many(v)) => Ok(v),
        Err(_) => Err(serde::de::Error::custom(
            "expected a path or a list of paths, e.g. \"/var/lib/kafka/data\" or [\"/data/a\", \"/data/b\"]",
        )),
    }
}

/// A configuration error naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config field `{field}`: {reason}")]
pub struct ConfigError {
    /// The field (as written in the file).
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

fn bad(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field,
        reason: reason.into(),
    }
}

/// The topic pattern of config field `field`, matching whole topic names only
/// ([`manifest::topic_pattern`]).
fn whole_name_regex(field: &'static str, pattern: &str) -> Result<Regex, ConfigError> {
    manifest::topic_pattern::whole_name(pattern).map_err(|reason| bad(field, reason))
}

/// The shipper's validated settings, as the library takes them. Build with
/// [`ShipperOptions::new`] (defaults) or from a [`ShipperConfig`].
#[derive(Debug, Clone)]
pub struct ShipperOptions {
    /// Source log dirs.
    pub log_dirs: Vec<PathBuf>,
    /// This (source) cluster's id: the bucket namespace.
    pub cluster_id: String,
    /// Key prefix inside the store (the path of an `s3://bucket/prefix`
    /// URL; empty for `file://` and `memory://`).
    pub bucket_prefix: String,
    /// This shipper's id, written as every manifest's `writer`.
    pub shipper_id: String,
    /// Topics shipped (anchored regex); `None`: every topic.
    pub topics: Option<Regex>,
    /// Topics never shipped (anchored regex).
    pub exclude: Option<Regex>,
    /// Consumer groups whose offsets are shipped (anchored regex); `None`:
    /// every group.
    pub groups: Option<Regex>,
    /// Consumer groups never shipped (anchored regex).
    pub exclude_groups: Option<Regex>,
    /// How often `__consumer_offsets` is read and changed group offsets
    /// shipped (at most once per cycle).
    pub group_sync_interval: Duration,
    /// Pause between cycles (when there is no backlog).
    pub tail_interval: Duration,
    /// Objects uploaded at once (across partitions).
    pub upload_concurrency: usize,
    /// Multipart part size; objects up to this size are one PUT.
    pub part_size: usize,
    /// Largest object: longer spans of a segment are split on batch
    /// boundaries (a single larger batch is one object of its own).
    pub max_object_size: u64,
    /// A cycle's ranges smaller than this go into one pack for all
    /// partitions (`manifest::pack`); 0: every range is its own object.
    pub pack_below: u64,
    /// Most bytes planned per partition per cycle.
    pub max_cycle_bytes: u64,
    /// Upload rate limit, bytes per second.
    pub rate_limit: Option<u64>,
    /// Ship up to the log end even when `replication-offset-checkpoint`
    /// exists.
    pub ship_beyond_hw: bool,
    /// A version that only appends is committed by the cycle's head as a
    /// delta (`manifest::delta`), not as a manifest object.
    pub head_deltas: bool,
    /// Grace before unreferenced objects are deleted; `None`: never.
    pub delete_grace: Option<Duration>,
    /// Interval between sweeps of a partition that changed.
    pub sweep_interval: Duration,
    /// With `pack_below`: packed ranges whose oldest is this old are
    /// rewritten into an object of the partition's own (`manifest::compact`).
    pub compact_after: Duration,
    /// With `pack_below`: a run of this many ranges as shipped goes into a
    /// compacted pack (`manifest::compact::Policy::max_ranges`; not in the
    /// config file: the default keeps manifests far below the page seal).
    pub compact_ranges: usize,
    /// The request prices preset costs are reported at
    /// (`bucket::pricing::PRESETS`).
    pub prices: String,
    /// Sweep every partition once when it is first loaded.
    pub sweep_on_start: bool,
    /// How long a partition dir must be gone to be published as deleted.
    pub partition_delete_grace: Duration,
    /// Back-off after losing a commit to another shipper.
    pub fence_backoff: Duration,
    /// Back-off after a non-retryable error.
    pub error_backoff: Duration,
    /// Source topics with tiered storage (`remote.storage.enable=true`),
    /// by name: offsets below their first local segment may be in remote
    /// storage.
    pub tiered_topics: Vec<String>,
    /// The broker's metadata.log.dir (`None`: the first log dir holding
    /// `__cluster_metadata-0`, if any).
    pub metadata_log_dir: Option<PathBuf>,
    /// The broker's static `server.properties`, for topic config defaults.
    pub broker_config: Option<PathBuf>,
}

/// Default of [`ShipperOptions::group_sync_interval`].
pub const DEFAULT_GROUP_SYNC_INTERVAL: Duration = Duration::from_secs(5);
/// Default tail interval.
pub const DEFAULT_TAIL_INTERVAL: Duration = Duration::from_secs(5);
/// Default multipart part size on S3.
pub const DEFAULT_PART_SIZE: u64 = 8 * 1024 * 1024;
/// Default multipart part size on `file://` and `memory://`: a part there
/// is a write into the staging file or a buffer, with no minimum and no
/// request cost, so small parts only save memory (and were faster too: a
/// part is read, checked and written while it is still in the CPU's
/// caches; 1 MiB parts shipped 2 GiB in 2.31 s where 2 MiB parts took
/// 2.93 s, BENCHMARKS.md).
pub const DEFAULT_LOCAL_PART_SIZE: u64 = 1024 * 1024;
/// Default largest object.
pub const DEFAULT_MAX_OBJECT_SIZE: u64 = 64 * 1024 * 1024;
/// Largest `pack_below`: ranges of 64 MiB and more are never packed (a
/// pack holds a cycle's small ranges, read back by ranged GETs).
pub const MAX_PACK_BELOW: u64 = 64 * 1024 * 1024;
/// Default `pack_below` (layout 2 on): a cycle's ranges under 1 MiB go
/// into one pack.
pub const DEFAULT_PACK_BELOW: u64 = 1024 * 1024;
/// Default most bytes per partition per cycle.
pub const DEFAULT_MAX_CYCLE_BYTES: u64 = 1024 * 1024 * 1024;
/// Default grace before unreferenced objects are deleted.
pub const DEFAULT_DELETE_GRACE: Duration = Duration::from_secs(3600);

impl ShipperOptions {
    /// Defaults for the given log dirs and cluster id.
    pub fn new(log_dirs: Vec<PathBuf>, cluster_id: &str) -> ShipperOptions {
        ShipperOptions {
            log_dirs,
            cluster_id: cluster_id.to_string(),
            bucket_prefix: String::new(),
            shipper_id: default_shipper_id(),
            topics: None,
            exclude: None,
            groups: None,
            exclude_groups: None,
            group_sync_interval: DEFAULT_GROUP_SYNC_INTERVAL,
            tail_interval: DEFAULT_TAIL_INTERVAL,
            upload_concurrency: 4,
            part_size: DEFAULT_PART_SIZE as usize,
            max_object_size: DEFAULT_MAX_OBJECT_SIZE,
            pack_below: DEFAULT_PACK_BELOW,
            max_cycle_bytes: DEFAULT_MAX_CYCLE_BYTES,
            rate_limit: None,
            ship_beyond_hw: false,
            head_deltas: true,
            delete_grace: Some(DEFAULT_DELETE_GRACE),
            sweep_interval: Duration::from_secs(600),
            compact_after: Duration::from_secs(3600),
            compact_ranges: manifest::compact::Policy::default().max_ranges,
            prices: "s3-standard".into(),
            sweep_on_start: true,
            partition_delete_grace: Duration::from_secs(300),
            fence_backoff: Duration::from_secs(300),
            error_backoff: Duration::from_secs(300),
            tiered_topics: Vec::new(),
            metadata_log_dir: None,
            broker_config: None,
        }
    }

    /// True when `topic` is selected by `topics` and not by `exclude`.
    pub fn selects(&self, topic: &str) -> bool {
        self.topics.as_ref().is_none_or(|r| r.is_match(topic))
            && !self.exclude.as_ref().is_some_and(|r| r.is_match(topic))
    }

    /// True when consumer group `group`'s offsets are shipped.
    pub fn selects_group(&self, group: &str) -> bool {
        self.groups.as_ref().is_none_or(|r| r.is_match(group))
            && !self
                .exclude_groups
                .as_ref()
                .is_some_and(|r| r.is_match(group))
    }
}

/// `<hostname>-<pid>`: unique per process, stable for its lifetime.
pub fn default_shipper_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "shipper".to_string());
    format!("{host}-{}", std::process::id())
}

/// A validated configuration: the library's options plus what only the
/// binary uses.
#[derive(Debug, Clone)]
pub struct Validated {
    /// Options for [`crate::Shipper`].
    pub options: ShipperOptions,
    /// The bucket.
    pub bucket: BucketUrl,
    /// Metrics endpoint address.
    pub metrics_addr: Option<SocketAddr>,
    /// How long `once` waits for the store to answer.
    pub store_timeout: Duration,
    /// Bucket checks at start.
    pub preflight: doctor::PreflightMode,
}

/// Default of [`Validated::store_timeout`].
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(60);

fn duration(
    field: &'static str,
    v: &Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) => humantime::parse_duration(s.trim()).map_err(|e| {
            bad(
                field,
                format!("{s:?} is not a duration ({e}); examples: 500ms, 5s, 10m, 1h"),
            )
        }),
    }
}

impl ShipperConfig {
    /// Parses a TOML file's text; unknown fields are errors naming them.
    pub fn from_toml(text: &str) -> Result<ShipperConfig, ConfigError> {
        let config: ShipperConfig = toml::from_str(text).map_err(|e| {
            // The key on the line the error points at, when it is a known
            // field (a bad value); unknown keys and syntax errors: "(file)".
            let field = e
                .span()
                .and_then(|span| {
                    let start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
                    let line = text.get(start..)?.lines().next()?;
                    let key = line.split('=').next()?.trim();
                    KNOWN_FIELDS.iter().find(|f| **f == key).copied()
                })
                .unwrap_or("(file)");
            bad(field, e.to_string().trim().to_string())
        })?;
        if config.log_dir.is_some() && !config.log_dirs.is_empty() {
            return Err(bad(
                "log_dir",
                "log_dir and log_dirs are both given: use log_dirs for several dirs, log_dir for one",
            ));
        }
        Ok(config)
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &std::path::Path) -> Result<ShipperConfig, ConfigError> {
        let text =
            kafkalog::fsutil::read_to_string_bounded(path, kafkalog::fsutil::MAX_SMALL_FILE_BYTES)
                .map_err(|e| bad("(file)", format!("{}: {e}", path.display())))?;
        let config = Self::from_toml(&text)
            .map_err(|e| bad(e.field, format!("{}: {}", path.display(), e.reason)))?;
        // Paths in the file resolve against the file's directory.
        let dir = path.parent().unwrap_or(std::path::Path::new(""));
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| {
                    bad(
                        "(file)",
                        format!("{}: the working directory: {e}", path.display()),
                    )
                })?
                .join(dir)
        };
        Ok(config.resolve_paths(&dir))
    }

    /// Joins every relative path (`log_dirs`) to `base`, which should be
    /// absolute: the working directory for flags and the environment, the
    /// file's directory for a file.
    pub fn resolve_paths(mut self, base: &std::path::Path) -> ShipperConfig {
        for d in self
            .log_dirs
            .iter_mut()
            .chain(self.log_dir.iter_mut())
            .chain(self.metadata_log_dir.iter_mut())
            .chain(self.broker_config.iter_mut())
        {
            if d.is_relative() {
                *d = base.join(&*d);
            }
        }
        self
    }

    /// The `SEGMIRROR_*` variables found by `lookup` (use
    /// `|k| std::env::var(k).ok()` for the process environment).
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<ShipperConfig, ConfigError> {
        let s = |k: &str| lookup(k).filter(|v| !v.is_empty());
        let size = |field: &'static str, k: &str| -> Result<Option<ByteSize>, ConfigError> {
            s(k).map(|v| {
                v.parse()
                    .map_err(|e: String| bad(field, format!("{k}: {e}")))
            })
            .transpose()
        };
        if s("SEGMIRROR_LOG_DIRS").is_some() && s("SEGMIRROR_LOG_DIR").is_some() {
            return Err(bad(
                "log_dir",
                "SEGMIRROR_LOG_DIR and SEGMIRROR_LOG_DIRS are both set: set one",
            ));
        }
        Ok(ShipperConfig {
            log_dir: s("SEGMIRROR_LOG_DIR").map(PathBuf::from),
            log_dirs: s("SEGMIRROR_LOG_DIRS")
                .map(|v| {
                    v.split(':')
                        .filter(|p| !p.is_empty())
                        .map(PathBuf::from)
                        .collect()
                })
                .unwrap_or_default(),
            bucket: s("SEGMIRROR_BUCKET"),
            cluster_id: s("SEGMIRROR_CLUSTER_ID"),
            shipper_id: s("SEGMIRROR_SHIPPER_ID"),
            topics: s("SEGMIRROR_TOPICS"),
            exclude: s("SEGMIRROR_EXCLUDE"),
            groups: s("SEGMIRROR_GROUPS"),
            exclude_groups: s("SEGMIRROR_EXCLUDE_GROUPS"),
            group_sync_interval: s("SEGMIRROR_GROUP_SYNC_INTERVAL"),
            tail_interval: s("SEGMIRROR_TAIL_INTERVAL"),
            upload_concurrency: s("SEGMIRROR_UPLOAD_CONCURRENCY")
                .map(|v| {
                    v.parse().map_err(|_| {
                        bad(
                            "upload_concurrency",
                            format!("SEGMIRROR_UPLOAD_CONCURRENCY: {v:?} is not a number"),
                        )
                    })
                })
                .transpose()?,
            part_size: size("part_size", "SEGMIRROR_PART_SIZE")?,
            max_object_size: size("max_object_size", "SEGMIRROR_MAX_OBJECT_SIZE")?,
            pack_below: size("pack_below", "SEGMIRROR_PACK_BELOW")?,
            max_cycle_bytes: size("max_cycle_bytes", "SEGMIRROR_MAX_CYCLE_BYTES")?,
            rate_limit: size("rate_limit", "SEGMIRROR_RATE_LIMIT")?,
            ship_beyond_hw: s("SEGMIRROR_SHIP_BEYOND_HW")
                .map(|v| match v.to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => Ok(true),
                    "0" | "false" | "no" | "off" => Ok(false),
                    _ => Err(bad(
                        "ship_beyond_hw",
                        format!("SEGMIRROR_SHIP_BEYOND_HW: {v:?} is not true or false"),
                    )),
                })
                .transpose()?,
            head_deltas: s("SEGMIRROR_HEAD_DELTAS")
                .map(|v| match v.to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => Ok(true),
                    "0" | "false" | "no" | "off" => Ok(false),
                    _ => Err(bad(
                        "head_deltas",
                        format!("SEGMIRROR_HEAD_DELTAS: {v:?} is not true or false"),
                    )),
                })
                .transpose()?,
            metrics_addr: s("SEGMIRROR_METRICS_ADDR"),
            delete_grace: s("SEGMIRROR_DELETE_GRACE"),
            sweep_interval: s("SEGMIRROR_SWEEP_INTERVAL"),
            compact_after: s("SEGMIRROR_COMPACT_AFTER"),
            prices: s("SEGMIRROR_PRICES"),
            partition_delete_grace: s("SEGMIRROR_PARTITION_DELETE_GRACE"),
            fence_backoff: s("SEGMIRROR_FENCE_BACKOFF"),
            error_backoff: s("SEGMIRROR_ERROR_BACKOFF"),
            store_timeout: s("SEGMIRROR_STORE_TIMEOUT"),
            preflight: s("SEGMIRROR_PREFLIGHT"),
            metadata_log_dir: s("SEGMIRROR_METADATA_LOG_DIR").map(PathBuf::from),
            broker_config: s("SEGMIRROR_BROKER_CONFIG").map(PathBuf::from),
            tiered_topics: s("SEGMIRROR_TIERED_TOPICS")
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// Fields set in `over` replace those here (dirs in `over`, as
    /// `log_dirs` or `log_dir`, replace all dirs here).
    pub fn merge(mut self, over: ShipperConfig) -> ShipperConfig {
        macro_rules! take {
            ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f; } )* };
        }
        take!(
            bucket,
            cluster_id,
            shipper_id,
            topics,
            exclude,
            groups,
            exclude_groups,
            group_sync_interval,
            tail_interval,
            upload_concurrency,
            part_size,
            max_object_size,
            pack_below,
            max_cycle_bytes,
            rate_limit,
            ship_beyond_hw,
            head_deltas,
            metrics_addr,
            delete_grace,
            sweep_interval,
            compact_after,
            prices,
            partition_delete_grace,
            fence_backoff,
            error_backoff,
            store_timeout,
            preflight,
            metadata_log_dir,
            broker_config
        );
        if !over.tiered_topics.is_empty() {
            self.tiered_topics = over.tiered_topics;
        }
        // The dirs given last replace all dirs given before, in either key.
        if !over.log_dirs.is_empty() || over.log_dir.is_some() {
            self.log_dirs = over.log_dirs;
            self.log_dir = over.log_dir;
        }
        self
    }

    /// Validates and fills defaults.
    pub fn validate(&self) -> Result<Validated, ConfigError> {
        if self.log_dir.is_some() && !self.log_dirs.is_empty() {
            return Err(bad(
                "log_dir",
                "log_dir and log_dirs are both given: use log_dirs for several dirs, log_dir for one",
            ));
        }
        let log_dirs: Vec<PathBuf> = self
            .log_dirs
            .iter()
            .chain(self.log_dir.iter())
            .cloned()
            .collect();
        if log_dirs.is_empty() {
            return Err(bad(
                "log_dirs",
                "at least one log dir is required (--log-dir DIR, log_dirs or log_dir)",
            ));
        }
        for d in &log_dirs {
            if !d.is_absolute() {
                return Err(bad(
                    "log_dirs",
                    format!(
                        "{} is not an absolute path (resolve it first: ShipperConfig::resolve_paths)",
                        d.display()
                    ),
                ));
            }
        }
        let bucket_text = self.bucket.as_ref().ok_or_else(|| {
            bad(
                "bucket",
                "required (--bucket file:///abs/path | s3://bucket/prefix | memory://)",
            )
        })?;
        let bucket = BucketUrl::parse(bucket_text).map_err(|e| bad("bucket", e.to_string()))?;
        let cluster_id = self.cluster_id.as_ref().ok_or_else(|| {
            bad(
                "cluster_id",
                "required (--cluster-id ID): the source cluster's id",
            )
        })?;
        manifest::layout::validate_cluster_id(cluster_id)
            .map_err(|e| bad("cluster_id", e.to_string()))?;
        let shipper_id = match &self.shipper_id {
            Some(id) if id.trim().is_empty() || id.len() > 256 => {
                return Err(bad("shipper_id", "must be 1 to 256 characters"));
            }
            Some(id) => id.clone(),
            None => default_shipper_id(),
        };
        let anchored = |field: &'static str, re: &Option<String>| {
            re.as_deref()
                .map(|r| whole_name_regex(field, r))
                .transpose()
        };
        let mut o = ShipperOptions::new(log_dirs, cluster_id);
        o.bucket_prefix = bucket.prefix().to_string();
        o.shipper_id = shipper_id;
        o.topics = anchored("topics", &self.topics)?;
        o.exclude = anchored("exclude", &self.exclude)?;
        o.groups = anchored("groups", &self.groups)?;
        o.exclude_groups = anchored("exclude_groups", &self.exclude_groups)?;
        for t in &self.tiered_topics {
            kafkalog::topic::validate_topic_name(t)
                .map_err(|e| bad("tiered_topics", e.to_string()))?;
        }
        o.tiered_topics = self.tiered_topics.clone();
        o.metadata_log_dir = self.metadata_log_dir.clone();
        o.broker_config = self.broker_config.clone();
        o.group_sync_interval = duration(
            "group_sync_interval",
            &self.group_sync_interval,
            DEFAULT_GROUP_SYNC_INTERVAL,
        )?;
        o.tail_interval = duration("tail_interval", &self.tail_interval, DEFAULT_TAIL_INTERVAL)?;
        if o.tail_interval < Duration::from_millis(10)
            || o.tail_interval > Duration::from_secs(3600)
        {
            return Err(bad("tail_interval", "must be between 10ms and 1h"));
        }
        o.upload_concurrency = self.upload_concurrency.unwrap_or(4);
        if !(1..=256).contains(&o.upload_concurrency) {
            return Err(bad("upload_concurrency", "must be 1 to 256"));
        }
        let on_s3 = matches!(bucket, BucketUrl::S3 { .. });
        let default_part = if on_s3 {
            DEFAULT_PART_SIZE
        } else {
            DEFAULT_LOCAL_PART_SIZE
        };
        let part = self.part_size.map_or(default_part, |b| b.0);
        let min_part = if on_s3 { S3_MIN_PART_SIZE } else { 1024 };
        if part < min_part || part > 5 * 1024 * 1024 * 1024 {
            return Err(bad(
                "part_size",
                format!(
                    "{} is out of range: {} to 5GiB for this bucket (S3 parts are at least 5 MiB)",
                    ByteSize(part),
                    ByteSize(min_part)
                ),
            ));
        }
        o.part_size = part as usize;
        o.max_object_size = self
            .max_object_size
            .map_or(DEFAULT_MAX_OBJECT_SIZE, |b| b.0);
        if o.max_object_size < 1024 || o.max_object_size > 5 * 1024 * 1024 * 1024 * 1024 {
            return Err(bad("max_object_size", "must be 1KiB to 5TiB"));
        }
        o.pack_below = self.pack_below.map_or(DEFAULT_PACK_BELOW, |b| b.0);
        if o.pack_below > MAX_PACK_BELOW {
            return Err(bad(
                "pack_below",
                format!("must be 0 (off) to {}", ByteSize(MAX_PACK_BELOW)),
            ));
        }
        o.max_cycle_bytes = self
            .max_cycle_bytes
            .map_or(DEFAULT_MAX_CYCLE_BYTES, |b| b.0);
        if o.max_cycle_bytes < o.max_object_size {
            return Err(bad(
                "max_cycle_bytes",
                format!(
                    "must be at least max_object_size ({})",
                    ByteSize(o.max_object_size)
                ),
            ));
        }
        o.rate_limit = self.rate_limit.map(|b| b.0).filter(|&r| r > 0);
        if o.rate_limit.is_some_and(|r| r < 1024) {
            return Err(bad(
                "rate_limit",
                "must be 0 (unlimited) or at least 1KiB per second",
            ));
        }
        o.ship_beyond_hw = self.ship_beyond_hw.unwrap_or(false);
        o.head_deltas = self.head_deltas.unwrap_or(true);
        o.delete_grace = match self.delete_grace.as_deref().map(str::trim) {
            Some("never") => None,
            _ => Some(duration(
                "delete_grace",
                &self.delete_grace,
                DEFAULT_DELETE_GRACE,
            )?),
        };
        o.sweep_interval = duration("sweep_interval", &self.sweep_interval, o.sweep_interval)?;
        o.compact_after = duration("compact_after", &self.compact_after, o.compact_after)?;
        if let Some(p) = &self.prices {
            if bucket::pricing::Prices::preset(p).is_none() {
                let known: Vec<&str> = bucket::pricing::PRESETS.iter().map(|(n, _)| *n).collect();
                return Err(bad(
                    "prices",
                    format!("{p:?} is not one of {}", known.join(", ")),
                ));
            }
            o.prices = p.clone();
        }
        if o.compact_after < Duration::from_secs(1) {
            return Err(bad("compact_after", "must be at least 1s"));
        }
        if o.sweep_interval < Duration::from_secs(1) {
            return Err(bad("sweep_interval", "must be at least 1s"));
        }
        o.partition_delete_grace = duration(
            "partition_delete_grace",
            &self.partition_delete_grace,
            o.partition_delete_grace,
        )?;
        o.fence_backoff = duration("fence_backoff", &self.fence_backoff, o.fence_backoff)?;
        o.error_backoff = duration("error_backoff", &self.error_backoff, o.error_backoff)?;
        let metrics_addr = self
            .metrics_addr
            .as_ref()
            .map(|a| {
                a.parse().map_err(|e| {
                    bad(
                        "metrics_addr",
                        format!("{a:?}: {e} (expected host:port, e.g. 127.0.0.1:9464)"),
                    )
                })
            })
            .transpose()?;
        let store_timeout = duration("store_timeout", &self.store_timeout, DEFAULT_STORE_TIMEOUT)?;
        if store_timeout < Duration::from_millis(100) {
            return Err(bad("store_timeout", "must be at least 100ms"));
        }
        let preflight = match &self.preflight {
            None => doctor::PreflightMode::default(),
            Some(p) => p.parse().map_err(|e: String| bad("preflight", e))?,
        };
        Ok(Validated {
            options: o,
            bucket,
            metrics_addr,
            store_timeout,
            preflight,
        })
    }
}

const KNOWN_FIELDS: &[&str] = &[
    "log_dirs",
    "log_dir",
    "bucket",
    "cluster_id",
    "shipper_id",
    "topics",
    "exclude",
    "groups",
    "exclude_groups",
    "group_sync_interval",
    "tail_interval",
    "upload_concurrency",
    "part_size",
    "max_object_size",
    "pack_below",
    "max_cycle_bytes",
    "rate_limit",
    "ship_beyond_hw",
    "head_deltas",
    "metrics_addr",
    "delete_grace",
    "sweep_interval",
    "compact_after",
    "prices",
    "partition_delete_grace",
    "fence_backoff",
    "error_backoff",
    "store_timeout",
    "preflight",
    "tiered_topics",
    "metadata_log_dir",
    "broker_config",
];

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "log_dirs = [\"/data\"]\nbucket = \"memory://\"\ncluster_id = \"c1\"\n";

    #[test]
    fn the_default_part_size_is_8_mib_on_s3_and_1_mib_elsewhere() {
        let part = |bucket: &str| {
            ShipperConfig::from_toml(&format!(
                "log_dirs = [\"/d\"]\nbucket = \"{bucket}\"\ncluster_id = \"c\""
            ))
            .expect("parse")
            .validate()
            .expect("valid")
            .options
            .part_size
        };
        assert_eq!(part("s3://bkt/p"), 8 << 20);
        assert_eq!(part("file:///tmp/b"), 1 << 20);
        assert_eq!(part("memory://"), 1 << 20);
    }

    #[test]
    fn a_full_file_validates_with_its_values() {
        let text = r#"
log_dirs = ["/var/lib/kafka/data", "/var/lib/kafka/data2"]
bucket = "s3://dr-bucket/segmirror"
cluster_id = "MkU3OEVBNTcwNTJENDM2Qk"
shipper_id = "broker-1"
topics = "orders|payments"
exclude = "tmp-.*"
tail_interval = "2s"
upload_concurrency = 8
part_size = "16MiB"
max_object_size = 134217728
max_cycle_bytes = "2GiB"
rate_limit = "100MiB"
ship_beyond_hw = true
metrics_addr = "127.0.0.1:9464"
delete_grace = "never"
sweep_interval = "30m"
partition_delete_grace = "10m"
fence_backoff = "1m"
error_backoff = "2m"
"#;
        let v = ShipperConfig::from_toml(text)
            .expect("parse")
            .validate()
            .expect("valid");
        let o = &v.options;
        assert_eq!(o.log_dirs.len(), 2);
        assert_eq!(o.bucket_prefix, "segmirror");
        assert_eq!(o.shipper_id, "broker-1");
        assert!(o.selects("orders") && o.selects("payments") && !o.selects("orders2"));
        assert_eq!(o.tail_interval, Duration::from_secs(2));
        assert_eq!(o.upload_concurrency, 8);
        assert_eq!(o.part_size, 16 << 20);
        assert_eq!(o.max_object_size, 128 << 20);
        assert_eq!(o.max_cycle_bytes, 2 << 30);
        assert_eq!(o.rate_limit, Some(100 << 20));
        assert!(o.ship_beyond_hw);
        assert_eq!(o.delete_grace, None);
        assert_eq!(o.sweep_interval, Duration::from_secs(1800));
        assert_eq!(o.fence_backoff, Duration::from_secs(60));
        assert_eq!(
            v.metrics_addr,
            Some("127.0.0.1:9464".parse().expect("addr"))
        );
    }

    #[test]
    fn errors_name_the_field() {
        let field = |text: &str| {
            ShipperConfig::from_toml(text)
                .and_then(|c| c.validate().map(|_| ()))
                .expect_err(text)
                .field
        };
        let e = ShipperConfig::from_toml(&format!("{MINIMAL}tail_intervall = \"1s\""))
            .expect_err("unknown");
        assert!(
            e.field == "(file)" && e.reason.contains("tail_intervall"),
            "{e}"
        );
        assert_eq!(
            field(&format!("{MINIMAL}part_size = \"8 parsecs\"")),
            "part_size"
        );
        assert_eq!(
            field("bucket = \"memory://\"\ncluster_id = \"c\""),
            "log_dirs"
        );
        assert_eq!(
            field("log_dirs = [\"rel\"]\nbucket = \"memory://\"\ncluster_id = \"c\""),
            "log_dirs"
        );
        assert_eq!(field("log_dirs = [\"/d\"]\ncluster_id = \"c\""), "bucket");
        assert_eq!(
            field("log_dirs = [\"/d\"]\nbucket = \"gs://x\"\ncluster_id = \"c\""),
            "bucket"
        );
        assert_eq!(
            field("log_dirs = [\"/d\"]\nbucket = \"memory://\""),
            "cluster_id"
        );
        assert_eq!(
            field("log_dirs = [\"/d\"]\nbucket = \"memory://\"\ncluster_id = \"../x\""),
            "cluster_id"
        );
        assert_eq!(field(&format!("{MINIMAL}topics = \"(\"")), "topics");
        assert_eq!(field(&format!("{MINIMAL}exclude = \"[\"")), "exclude");
        assert_eq!(
            field(&format!("{MINIMAL}tail_interval = \"soon\"")),
            "tail_interval"
        );
        assert_eq!(
            field(&format!("{MINIMAL}upload_concurrency = 0")),
            "upload_concurrency"
        );
        assert_eq!(
            field(&format!("{MINIMAL}delete_grace = \"later\"")),
            "delete_grace"
        );
        assert_eq!(
            field(&format!("{MINIMAL}metrics_addr = \"nowhere\"")),
            "metrics_addr"
        );
        assert_eq!(
            field(&format!("{MINIMAL}max_object_size = 10")),
            "max_object_size"
        );
        assert_eq!(
            field(&format!("{MINIMAL}max_cycle_bytes = \"1KiB\"")),
            "max_cycle_bytes"
        );
        assert_eq!(
            field(&format!("{MINIMAL}pack_below = \"1GiB\"")),
            "pack_below"
        );
        assert_eq!(field(&format!("{MINIMAL}prices = \"aws-gold\"")), "prices");
        assert_eq!(field(&format!("{MINIMAL}rate_limit = 10")), "rate_limit");
        assert_eq!(
            field(
                "log_dirs = [\"/d\"]\nbucket = \"s3://bkt/p\"\ncluster_id = \"c\"\npart_size = \"1MiB\""
            ),
            "part_size"
        );
        let e = ShipperConfig::from_toml(&format!("{MINIMAL}upload_concurrency = 0"))
            .expect("parse")
            .validate()
            .expect_err("invalid");
        assert!(
            e.to_string()
                .starts_with("config field `upload_concurrency`"),
            "{e}"
        );
    }

    #[test]
    fn topic_patterns_match_whole_names_and_cannot_escape_their_anchors() {
        let validate = |extra: &str| {
            ShipperConfig::from_toml(&format!("{MINIMAL}{extra}"))
                .expect("parse")
                .validate()
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
        let o = validate("topics = \"orders|payments\"")
            .expect("valid")
            .options;
        for t in ["orders", "payments"] {
            assert!(o.selects(t), "{t}");
        }
        for t in [
            "orders2",
            "xorders",
            "payments-x",
            "orderspayments",
            "orders|payments",
        ] {
            assert!(!o.selects(t), "{t}");
        }
        let o = validate("exclude = \"tmp-.*\"").expect("valid").options;
        assert!(!o.selects("tmp-1") && o.selects("xtmp-1") && o.selects("orders"));
    }

    #[test]
    fn env_overrides_the_file_and_flags_override_env() {
        let file =
            ShipperConfig::from_toml(&format!("{MINIMAL}tail_interval = \"9s\"\ntopics = \"a\""))
                .expect("parse");
        let env = ShipperConfig::from_env(|k| match k {
            "SEGMIRROR_TAIL_INTERVAL" => Some("3s".into()),
            "SEGMIRROR_LOG_DIRS" => Some("/x:/y".into()),
            "SEGMIRROR_PART_SIZE" => Some("2MiB".into()),
            "SEGMIRROR_SHIP_BEYOND_HW" => Some("yes".into()),
            "SEGMIRROR_TOPICS" => Some(String::new()),
            _ => None,
        })
        .expect("env");
        let flags = ShipperConfig {
            tail_interval: Some("1s".into()),
            ..ShipperConfig::default()
        };
        let v = file.merge(env).merge(flags).validate().expect("valid");
        assert_eq!(v.options.tail_interval, Duration::from_secs(1));
        assert_eq!(
            v.options.log_dirs,
            vec![PathBuf::from("/x"), PathBuf::from("/y")]
        );
        assert_eq!(v.options.part_size, 2 << 20);
        assert!(v.options.ship_beyond_hw);
        assert!(
            v.options.selects("a") && !v.options.selects("b"),
            "empty env values are ignored"
        );
        let e = ShipperConfig::from_env(|k| (k == "SEGMIRROR_RATE_LIMIT").then(|| "fast".into()))
            .expect_err("bad");
        assert_eq!(e.field, "rate_limit");
    }

    #[test]
    fn relative_log_dirs_in_a_file_resolve_against_the_file_s_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("etc/shipper.toml");
        std::fs::create_dir_all(dir.path().join("etc")).expect("mkdir");
        std::fs::write(
            &conf,
            "log_dirs = [\"data\", \"../kafka\", \"/abs\"]\nbucket = \"memory://\"\ncluster_id = \"c\"\n",
        )
        .expect("write");
        let c = ShipperConfig::from_file(&conf).expect("parse");
        assert_eq!(
            c.log_dirs,
            vec![
                dir.path().join("etc/data"),
                dir.path().join("etc/../kafka"),
                PathBuf::from("/abs")
            ]
        );
        assert!(c.validate().is_ok());
    }

    #[test]
    fn relative_paths_resolve_against_the_base_given() {
        let c = ShipperConfig {
            log_dirs: vec![PathBuf::from("src"), PathBuf::from("/abs")],
            ..ShipperConfig::default()
        }
        .resolve_paths(std::path::Path::new("/etc/segmirror"));
        assert_eq!(
            c.log_dirs,
            vec![PathBuf::from("/etc/segmirror/src"), PathBuf::from("/abs")]
        );
    }

    #[test]
    fn the_store_timeout_defaults_to_a_minute_and_parses_like_other_durations() {
        let v = ShipperConfig::from_toml(MINIMAL)
            .expect("parse")
            .validate()
            .expect("valid");
        assert_eq!(v.store_timeout, Duration::from_secs(60));
        let file =
            ShipperConfig::from_toml(&format!("{MINIMAL}store_timeout = \"5s\"")).expect("parse");
        assert_eq!(
            file.validate().expect("valid").store_timeout,
            Duration::from_secs(5)
        );
        let env =
            ShipperConfig::from_env(|k| (k == "SEGMIRROR_STORE_TIMEOUT").then(|| "750ms".into()))
                .expect("env");
        assert_eq!(
            file.merge(env).validate().expect("valid").store_timeout,
            Duration::from_millis(750)
        );
        let e = ShipperConfig::from_toml(&format!("{MINIMAL}store_timeout = \"soon\""))
            .expect("parse")
            .validate()
            .expect_err("bad");
        assert_eq!(e.field, "store_timeout");
    }

    #[test]
    fn the_example_parses_validates_and_shows_the_defaults() {
        let v = ShipperConfig::from_toml(EXAMPLE)
            .expect("parse")
            .validate()
            .expect("valid");
        let d = ShipperOptions::new(vec![], "c");
        let o = &v.options;
        assert_eq!(o.tail_interval, d.tail_interval);
        assert_eq!(o.upload_concurrency, d.upload_concurrency);
        assert_eq!(o.part_size, d.part_size);
        assert_eq!(o.max_object_size, d.max_object_size);
        assert_eq!(o.max_cycle_bytes, d.max_cycle_bytes);
        assert_eq!(o.rate_limit, d.rate_limit);
        assert_eq!(o.ship_beyond_hw, d.ship_beyond_hw);
        assert_eq!(o.delete_grace, d.delete_grace);
        assert_eq!(o.sweep_interval, d.sweep_interval);
        assert_eq!(o.partition_delete_grace, d.partition_delete_grace);
        assert_eq!(o.fence_backoff, d.fence_backoff);
        assert_eq!(o.error_backoff, d.error_backoff);
        assert_eq!(v.store_timeout, DEFAULT_STORE_TIMEOUT);
    }

    #[test]
    fn group_selection_and_interval_are_validated_by_name() {
        let validate = |extra: &str| {
            ShipperConfig::from_toml(&format!("{MINIMAL}{extra}")).and_then(|c| c.validate())
        };
        let v = validate(
            "groups = \"billing-.*\"\nexclude_groups = \"billing-tmp\"\ngroup_sync_interval = \"2s\"",
        )
        .expect("valid")
        .options;
        assert!(v.selects_group("billing-eu") && !v.selects_group("billing-tmp"));
        assert!(!v.selects_group("orders-app"), "anchored: whole ids only");
        assert_eq!(v.group_sync_interval, Duration::from_secs(2));
        let all = validate("").expect("valid").options;
        assert!(
            all.selects_group("console-consumer-1"),
            "default: every group"
        );
        for (text, field) in [
            ("exclude_groups = \"[\"", "exclude_groups"),
            ("groups = \"(\"", "groups"),
            ("group_sync_interval = \"soon\"", "group_sync_interval"),
        ] {
            assert_eq!(validate(text).expect_err(text).field, field);
        }
    }

    #[test]
    fn tiered_topics_are_names_from_the_file_the_environment_or_flags() {
        let v = ShipperConfig::from_toml(&format!("{MINIMAL}tiered_topics = [\"archive\"]"))
            .and_then(|c| c.validate())
            .expect("valid");
        assert_eq!(v.options.tiered_topics, ["archive"]);
        let bad = ShipperConfig::from_toml(&format!("{MINIMAL}tiered_topics = [\"../x\"]"))
            .and_then(|c| c.validate())
            .expect_err("not a topic name");
        assert_eq!(bad.field, "tiered_topics");
        let env = ShipperConfig::from_env(|k| {
            (k == "SEGMIRROR_TIERED_TOPICS").then(|| "a, b,".to_string())
        })
        .expect("env");
        assert_eq!(env.tiered_topics, ["a", "b"]);
        let merged = ShipperConfig::from_toml(&format!("{MINIMAL}tiered_topics = [\"archive\"]"))
            .expect("toml")
            .merge(env);
        assert_eq!(
            merged.tiered_topics,
            ["a", "b"],
            "the later source replaces"
        );
    }

    #[test]
    fn every_config_key_is_in_the_example() {
        // Every field set, serialized: its keys are the struct's keys, so a
        // field added without an example line fails here.
        let full = ShipperConfig {
            log_dirs: vec![PathBuf::from("/a")],
            log_dir: Some(PathBuf::from("/a")),
            bucket: Some(String::new()),
            cluster_id: Some(String::new()),
            shipper_id: Some(String::new()),
            topics: Some(String::new()),
            exclude: Some(String::new()),
            groups: Some(String::new()),
            exclude_groups: Some(String::new()),
            group_sync_interval: Some(String::new()),
            tail_interval: Some(String::new()),
            upload_concurrency: Some(1),
            part_size: Some(ByteSize(1)),
            max_object_size: Some(ByteSize(1)),
            pack_below: Some(ByteSize(1)),
            max_cycle_bytes: Some(ByteSize(1)),
            rate_limit: Some(ByteSize(1)),
            ship_beyond_hw: Some(true),
            head_deltas: Some(true),
            metrics_addr: Some(String::new()),
            delete_grace: Some(String::new()),
            sweep_interval: Some(String::new()),
            compact_after: Some(String::new()),
            prices: Some(String::new()),
            partition_delete_grace: Some(String::new()),
            fence_backoff: Some(String::new()),
            error_backoff: Some(String::new()),
            store_timeout: Some(String::new()),
            preflight: Some(String::new()),
            tiered_topics: vec![String::new()],
            metadata_log_dir: Some(PathBuf::from("/m")),
            broker_config: Some(PathBuf::from("/s")),
        };
        let value = serde_json::to_value(&full).expect("serialize");
        let text = value.to_string();
        let keys: Vec<&str> = value
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.len(), KNOWN_FIELDS.len(), "{text}");
        for key in keys {
            assert!(KNOWN_FIELDS.contains(&key), "{key} is not in KNOWN_FIELDS");
            let shown = EXAMPLE.lines().any(|l| {
                let l = l.strip_prefix("# ").unwrap_or(l);
                l.starts_with(&format!("{key} = "))
            });
            assert!(shown, "config example lacks {key}");
        }
    }

    #[test]
    fn log_dirs_take_a_list_or_one_string_and_log_dir_takes_one() {
        let dirs = |text: &str| {
            ShipperConfig::from_toml(&format!(
                "{text}\nbucket = \"memory://\"\ncluster_id = \"c\""
            ))
            .and_then(|c| c.validate())
            .map(|v| v.options.log_dirs)
        };
        assert_eq!(
            dirs("log_dirs = \"/a\"").expect("one"),
            vec![PathBuf::from("/a")]
        );
        assert_eq!(
            dirs("log_dirs = [\"/a\", \"/b\"]").expect("list"),
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(
            dirs("log_dir = \"/a\"").expect("log_dir"),
            vec![PathBuf::from("/a")]
        );
        let e = dirs("log_dir = \"/a\"\nlog_dirs = [\"/b\"]").expect_err("both");
        assert_eq!(e.field, "log_dir", "{e}");
        let e = dirs("log_dirs = 3").expect_err("a number");
        assert!(e.reason.contains("a path or a list of paths"), "{e}");
        let env = ShipperConfig::from_env(|k| (k == "SEGMIRROR_LOG_DIR").then(|| "/e".into()))
            .expect("env");
        let file = ShipperConfig::from_toml(MINIMAL).expect("parse");
        assert_eq!(
            file.merge(env).validate().expect("valid").options.log_dirs,
            vec![PathBuf::from("/e")],
            "the environment's dir replaces the file's"
        );
        let e = ShipperConfig::from_env(|k| {
            (k == "SEGMIRROR_LOG_DIR" || k == "SEGMIRROR_LOG_DIRS").then(|| "/e".into())
        })
        .expect_err("both");
        assert_eq!(e.field, "log_dir");
    }
}
