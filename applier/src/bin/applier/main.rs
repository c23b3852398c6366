//! `applier`: apply a source's shipped segments to a local Kafka-format log
//! and drive each mirror partition's state (see `docs/mirroring.md`).
//! A thin shell over the `applier` library.

mod commands;
mod plan;
mod run;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use applier::config::ApplierConfig;
use clap::{Args, Parser, Subcommand};
use kafkalog::units::ByteSize;

#[derive(Parser)]
#[command(
    name = "applier",
    version,
    about = "Apply segments shipped to a bucket to a local Kafka-format log, read-only until failover",
    after_help = "Examples:
  applier once   --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src --topics '.*'
  applier run    --config /etc/segmirror/applier.toml
  applier plan   --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src --topics '.*'
  applier status --log-dir /data/mirror --json
  applier pause  --log-dir /data/mirror --topic orders
  applier stop   --log-dir /data/mirror --all          # failover: partitions become writable
  applier start  --log-dir /data/mirror --topic orders --bucket file:///data/bucket --source-cluster-id src
  applier config check --config /etc/segmirror/applier.toml"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

/// Settings shared by every subcommand: file, then environment, then flags.
#[derive(Args, Clone, Default)]
pub(crate) struct Common {
    /// TOML configuration file.
    #[arg(long, value_name = "FILE", env = "SEGMIRROR_APPLIER_CONFIG")]
    config: Option<PathBuf>,
    /// The destination log dir.
    #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
    log_dir: Option<PathBuf>,
    /// Bucket URL: file:///abs/path, memory:// or s3://bucket/prefix.
    #[arg(long, value_name = "URL", env = "SEGMIRROR_BUCKET")]
    bucket: Option<String>,
    /// The source cluster to mirror.
    #[arg(long, value_name = "ID", env = "SEGMIRROR_SOURCE_CLUSTER_ID")]
    source_cluster_id: Option<String>,
    /// This cluster's own id (mirror-loop check and failback LME lookup).
    #[arg(long, value_name = "ID", env = "SEGMIRROR_CLUSTER_ID")]
    cluster_id: Option<String>,
    /// Topics started automatically (regex on the whole name).
    #[arg(long, value_name = "REGEX", env = "SEGMIRROR_TOPICS")]
    topics: Option<String>,
    /// Topics never started automatically (regex).
    #[arg(long, value_name = "REGEX", env = "SEGMIRROR_EXCLUDE")]
    exclude: Option<String>,
    /// How often the bucket's change feed is polled, e.g. 500ms, 5s [default: 1s].
    #[arg(long, value_name = "DURATION", env = "SEGMIRROR_POLL_INTERVAL")]
    poll_interval: Option<String>,
    /// The older spelling of --poll-interval, in milliseconds (kept for one release).
    #[arg(
        long,
        value_name = "MS",
        env = "SEGMIRROR_POLL_INTERVAL_MS",
        hide = true
    )]
    poll_interval_ms: Option<u64>,
    /// Objects downloaded ahead of the one being appended [default: 4].
    #[arg(long, value_name = "N", env = "SEGMIRROR_DOWNLOAD_CONCURRENCY")]
    download_concurrency: Option<usize>,
    /// Downloaded objects held in memory at once, e.g. 32MiB (downloaded or
    /// being appended; at least one object, whatever its size) [default: 32MiB].
    #[arg(long, value_name = "SIZE", env = "SEGMIRROR_DOWNLOAD_MEMORY")]
    download_memory: Option<ByteSize>,
    /// Kept free in <log-dir>/.segmirror/reserve so that a full disk's
    /// failures can still be recorded; nothing is appended without it, e.g.
    /// 1MiB (0: off) [default: 1MiB].
    #[arg(
        long = "disk-reserve",
        alias = "disk-reserve-bytes",
        value_name = "SIZE",
        env = "SEGMIRROR_DISK_RESERVE_BYTES"
    )]
    disk_reserve_bytes: Option<ByteSize>,
    /// Serve Prometheus metrics on this address (host:port).
    #[arg(long, value_name = "ADDR", env = "SEGMIRROR_METRICS_ADDR")]
    metrics_addr: Option<String>,
    /// Destination topic with remote.storage.enable=true (repeatable).
    #[arg(long = "tiered-topic", value_name = "TOPIC")]
    tiered_topics: Vec<String>,
    /// How long `once` and `plan` wait for an unreachable bucket before
    /// they give up with exit 1 (e.g. 30s, 2m) [default: 60s].
    #[arg(long, value_name = "DURATION", env = "SEGMIRROR_STORE_TIMEOUT")]
    store_timeout: Option<String>,
}

impl Common {
    pub(crate) fn load(&self) -> anyhow::Result<ApplierConfig> {
        let file = match &self.config {
            Some(p) => ApplierConfig::from_file(p)?,
            None => ApplierConfig::default(),
        };
        Ok(file.merge(ApplierConfig {
            log_dir: self.log_dir.clone(),
            bucket: self.bucket.clone(),
            source_cluster_id: self.source_cluster_id.clone(),
            cluster_id: self.cluster_id.clone(),
            topics: self.topics.clone(),
            exclude: self.exclude.clone(),
            poll_interval: self.poll_interval.clone(),
            poll_interval_ms: self.poll_interval_ms,
            download_concurrency: self.download_concurrency,
            download_memory: self.download_memory,
            disk_reserve_bytes: self.disk_reserve_bytes,
            tiered_topics: self.tiered_topics.clone(),
            metrics_addr: self.metrics_addr.clone(),
            store_timeout: self.store_timeout.clone(),
        }))
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run as a daemon: poll the bucket and apply, pick up operator commands.
    Run(run::RunArgs),
    /// Apply everything available now, then exit (0: done; 1: a partition is FAILED).
    /// Retryable failures left by an earlier run are retried at once: a
    /// cron schedule is its own backoff.
    Once(run::RunArgs),
    /// Print what `start`/`once` would do to each partition and why
    /// (truncation offset and the rule that chose it, where fetching
    /// starts), changing nothing.
    #[command(after_help = "Examples:
  applier plan --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src --topics 'orders|payments'
  applier plan --log-dir /var/lib/kafka/data --bucket s3://dr-bucket/segmirror --source-cluster-id dst --cluster-id src --json")]
    Plan(plan::PlanArgs),
    /// Start (or restart after stop or failure) mirroring topics.
    Start(commands::CommandArgs),
    /// Pause mirroring (stays read-only).
    Pause(commands::CommandArgs),
    /// Resume a paused mirror (no truncation).
    Resume(commands::CommandArgs),
    /// Stop mirroring (failover): partitions become writable.
    Stop(commands::CommandArgs),
    /// Per-partition state, lag and LME.
    Status(status::StatusArgs),
    /// Configuration helpers.
    Config {
        #[command(subcommand)]
        command: ConfigCmd,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Validate a configuration (file, env and flags merged); exit 0 when valid.
    Check(run::RunArgs),
}

fn main() -> ExitCode {
    segmirror_service::init_logging();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("applier: error: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Cmd::Run(a) => run::run(a, false).await,
            Cmd::Once(a) => run::run(a, true).await,
            Cmd::Start(a) => commands::run(manifest::state::Command::Start, a).await,
            Cmd::Pause(a) => commands::run(manifest::state::Command::Pause, a).await,
            Cmd::Resume(a) => commands::run(manifest::state::Command::Resume, a).await,
            Cmd::Stop(a) => commands::run(manifest::state::Command::Stop, a).await,
            Cmd::Status(a) => status::run(a),
            Cmd::Plan(a) => plan::run(a).await,
            Cmd::Config {
                command: ConfigCmd::Check(a),
            } => run::check(a),
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // Each cause once, even where an error both interpolates its
            // source and returns it (object_store's errors do).
            let err: &(dyn std::error::Error + 'static) = e.as_ref();
            eprintln!("applier: error: {}", manifest::diagnosis::one_line(err));
            ExitCode::from(2)
        }
    }
}
