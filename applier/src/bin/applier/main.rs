//! `applier`: apply a source's shipped segments to a local Kafka-format log
//! and drive each mirror partition's state (see `docs/mirroring.md`).
//! A thin shell over the `applier` library.

mod commands;
mod gaps;
mod groups;
mod kafka;
mod kafka_user;
mod limits;
mod plan;
mod run;
mod serve;
mod status;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use applier::config::ApplierConfig;
use clap::{Args, Parser, Subcommand};
use kafkalog::units::ByteSize;

const EXAMPLES: &str = "Examples:
  applier once   --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src --topics '.*'
  applier run    --config /etc/segmirror/applier.toml --metrics-addr 0.0.0.0:9465 --kafka-listen 127.0.0.1:9092
  applier plan   --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src --topics '.*'
  applier status --log-dir /data/mirror --json
  applier start  --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src --topic orders
  applier pause  --log-dir /data/mirror --topic orders
  applier resume --log-dir /data/mirror --topic orders
  applier stop   --log-dir /data/mirror --all
  applier config check --config /etc/segmirror/applier.toml
  applier config example > /etc/segmirror/applier.toml
  applier doctor --expect doctor.toml
  applier verify --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src

Which topics: --topics REGEX (run, once, plan) starts every topic whose whole name
matches, as the shipper's --topics selects what it ships; --topic NAME (start, pause,
resume, stop) names one topic exactly, repeatable; --all is every mirror partition here.

Settings come from the TOML file (--config), then SEGMIRROR_* environment variables
(SEGMIRROR_LOG_DIR, SEGMIRROR_BUCKET, SEGMIRROR_SOURCE_CLUSTER_ID, ...; each flag's
[env: ...]), then flags. S3 credentials and endpoint come from the standard AWS variables.

Exit codes: 0 done; 1 a partition is FAILED, an operation was refused, or the store is
unreachable or refused a request (wrong region, access denied, no such bucket);
2 a usage or setup error (bad flag or config, missing log dir, no AWS credentials).";

#[derive(Parser)]
#[command(
    name = "applier",
    version,
    about = "Apply segments shipped to a bucket to a local Kafka-format log, read-only until failover",
    after_help = EXAMPLES,
    // Never hard-wrap: every example line pastes as it is (terminals wrap).
    term_width = 0
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

// The settings of run, once, plan, start, pause, resume, stop and config
// check, in small groups, each flattened only into the commands that use
// it (so each command's --help lists only its own options):
//
// | group         | run | once | config check | plan | start | pause/resume/stop |
// |---------------|-----|------|--------------|------|-------|-------------------|
// | ConfigArgs    |  x  |  x   |      x       |  x   |   x   |         x         |
// | SourceArgs    |  x  |  x   |      x       |  x   |   x   |                   |
// | PrepareArgs   |  x  |  x   |      x       |  x   |   x   |                   |
// | TopicArgs     |  x  |  x   |      x       |  x   |       |                   |
// | StoreArgs     |  x  |  x   |      x       |  x   |       |                   |
// | DaemonTuning  |  x  |  x   |      x       |      |       |                   |
//
// MirrorArgs is the first five together (plan; RunArgs adds DaemonTuning
// for run, once and config check; run adds the Kafka listener's flags).
//
// ConfigArgs::load reads the file, then lays each group's flags over it
// (each flag falls back to its SEGMIRROR_* variable first): file, then
// environment, then flags.

/// The configuration file and the log dir (every command).
#[derive(Args, Clone, Default)]
pub(crate) struct ConfigArgs {
    /// TOML configuration file (`applier config example` prints one) [default: none: environment and flags only].
    #[arg(long, value_name = "FILE", env = "SEGMIRROR_APPLIER_CONFIG")]
    config: Option<PathBuf>,
    /// The destination log dir.
    #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
    log_dir: Option<PathBuf>,
}

/// The bucket and the cluster ids (run, once, config check, plan, start).
#[derive(Args, Clone, Default)]
pub(crate) struct SourceArgs {
    /// Bucket URL: file:///abs/path, memory:// or s3://bucket/prefix (required by run, once, plan and start).
    #[arg(long, value_name = "URL", env = "SEGMIRROR_BUCKET")]
    bucket: Option<String>,
    /// The source cluster to mirror: the shipper's --cluster-id (required by run, once, plan and start; start pins it).
    #[arg(long, value_name = "ID", env = "SEGMIRROR_SOURCE_CLUSTER_ID")]
    source_cluster_id: Option<String>,
    /// This cluster's own id (mirror-loop check and failback LME lookup) [default: none].
    #[arg(long, value_name = "ID", env = "SEGMIRROR_CLUSTER_ID")]
    cluster_id: Option<String>,
}

/// How a partition becomes a mirror (run, once, config check, plan, start).
#[derive(Args, Clone, Default)]
pub(crate) struct PrepareArgs {
    /// Destination topic with remote.storage.enable=true: preparing its partitions is refused, as the log cannot be truncated safely (repeatable) [default: none].
    #[arg(long = "tiered-topic", value_name = "TOPIC")]
    tiered_topics: Vec<String>,
}

/// Which topics are started automatically (run, once, config check, plan).
#[derive(Args, Clone, Default)]
pub(crate) struct TopicArgs {
    /// Topics started automatically by run and once: a regex on the whole topic name (`--topic NAME` of start/pause/resume/stop is one exact name) [default: none].
    #[arg(long, value_name = "REGEX", env = "SEGMIRROR_TOPICS")]
    topics: Option<String>,
    /// Topics never started automatically: a regex on the whole topic name [default: none].
    #[arg(long, value_name = "REGEX", env = "SEGMIRROR_EXCLUDE")]
    exclude: Option<String>,
}

/// How long the bucket may not answer (run, once, config check, plan).
#[derive(Args, Clone, Default)]
pub(crate) struct StoreArgs {
    /// How long `once` and `plan` wait for an unreachable bucket before
    /// they give up with exit 1 (e.g. 30s, 2m) [default: 60s].
    #[arg(long, value_name = "DURATION", env = "SEGMIRROR_STORE_TIMEOUT")]
    store_timeout: Option<String>,
}

/// How the applier polls, downloads and appends (run, once, config check).
#[derive(Args, Clone, Default)]
pub(crate) struct DaemonTuning {
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
    /// Bytes downloaded ahead of the appends, e.g. 64MiB (at least one
    /// object of up to --stream-above, whatever its size) [default: 16MiB].
    #[arg(long, value_name = "SIZE", env = "SEGMIRROR_DOWNLOAD_MEMORY")]
    download_memory: Option<ByteSize>,
    /// Objects larger than this are appended while they download (a restart
    /// cuts an unfinished one); smaller ones are checked whole first, e.g.
    /// 4MiB [default: 4MiB].
    #[arg(long, value_name = "SIZE", env = "SEGMIRROR_STREAM_ABOVE")]
    stream_above: Option<ByteSize>,
    /// Kept free in <log-dir>/.segmirror/reserve so that a full disk's
    /// failures can still be recorded; nothing is appended without it, e.g.
    /// 1MiB (0: off) [default: 1MiB].
    #[arg(
        long = "disk-reserve",
        alias = "disk-reserve-bytes",
        value_name = "SIZE",
        env = "SEGMIRROR_DISK_RESERVE"
    )]
    disk_reserve: Option<ByteSize>,
    /// Serve Prometheus metrics on this address (host:port) [default: not served].
    #[arg(long, value_name = "ADDR", env = "SEGMIRROR_METRICS_ADDR")]
    metrics_addr: Option<String>,
    /// Bucket checks at start by run and once (`applier doctor`'s must-haves): off, warn (log failures) or enforce (exit 1 first) [default: warn].
    #[arg(long, value_name = "off|warn|enforce", env = "SEGMIRROR_PREFLIGHT")]
    preflight: Option<String>,
    /// Bytes of the local log `run` re-verifies per hour in the background (as `applier verify`), e.g. 1GiB (0: off) [default: 1GiB].
    #[arg(long, value_name = "SIZE", env = "SEGMIRROR_SCRUB_BYTES_PER_HOUR")]
    scrub_bytes_per_hour: Option<ByteSize>,
    /// Copy this source topic config although excluded by default: a regex on the whole key, e.g. 'min\.insync\.replicas' (repeatable; env SEGMIRROR_TOPIC_CONFIGS_INCLUDE, comma-separated) [default: none].
    #[arg(long = "config-include", value_name = "REGEX")]
    config_include: Vec<String>,
    /// Never copy this source topic config: a regex on the whole key, e.g. 'retention\..*' (repeatable; env SEGMIRROR_TOPIC_CONFIGS_EXCLUDE, comma-separated) [default: none].
    #[arg(long = "config-exclude", value_name = "REGEX")]
    config_exclude: Vec<String>,
}

/// What plan and once/run/config check share: the file and log dir, the
/// source, how partitions become mirrors, which topics, the store timeout.
#[derive(Args, Clone, Default)]
pub(crate) struct MirrorArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    source: SourceArgs,
    #[command(flatten)]
    prepare: PrepareArgs,
    #[command(flatten)]
    topics: TopicArgs,
    #[command(flatten)]
    store: StoreArgs,
}

impl MirrorArgs {
    /// The file, then these groups' flags and `more`'s over it.
    pub(crate) fn load(&self, more: &[&dyn Flags]) -> anyhow::Result<ApplierConfig> {
        let mut groups: Vec<&dyn Flags> =
            vec![&self.source, &self.prepare, &self.topics, &self.store];
        groups.extend_from_slice(more);
        self.config.load(&groups)
    }
}

/// A group of flags laid over the configuration file by
/// [`ConfigArgs::load`]: each sets only its own fields.
pub(crate) trait Flags {
    fn set(&self, c: &mut ApplierConfig) -> anyhow::Result<()>;
}

impl ConfigArgs {
    /// The file (or the defaults), then `groups`' flags (and their
    /// environment variables) over it.
    pub(crate) fn load(&self, groups: &[&dyn Flags]) -> anyhow::Result<ApplierConfig> {
        let file = match &self.config {
            Some(p) => ApplierConfig::from_file(p)?,
            None => ApplierConfig::default(),
        };
        let mut flags = ApplierConfig {
            log_dir: self.log_dir.clone(),
            // The Kafka listener's limits are flags of run and serve
            // (`limits::LimitArgs`), merged over these.
            ..ApplierConfig::default()
        };
        for g in groups {
            g.set(&mut flags)?;
        }
        Ok(file.merge(flags))
    }
}

impl Flags for SourceArgs {
    fn set(&self, c: &mut ApplierConfig) -> anyhow::Result<()> {
        c.bucket = self.bucket.clone();
        c.source_cluster_id = self.source_cluster_id.clone();
        c.cluster_id = self.cluster_id.clone();
        Ok(())
    }
}

impl Flags for PrepareArgs {
    fn set(&self, c: &mut ApplierConfig) -> anyhow::Result<()> {
        c.tiered_topics = self.tiered_topics.clone();
        Ok(())
    }
}

impl Flags for TopicArgs {
    fn set(&self, c: &mut ApplierConfig) -> anyhow::Result<()> {
        c.topics = self.topics.clone();
        c.exclude = self.exclude.clone();
        Ok(())
    }
}

impl Flags for StoreArgs {
    fn set(&self, c: &mut ApplierConfig) -> anyhow::Result<()> {
        c.store_timeout = self.store_timeout.clone();
        Ok(())
    }
}

impl Flags for DaemonTuning {
    fn set(&self, c: &mut ApplierConfig) -> anyhow::Result<()> {
        // The older name of SEGMIRROR_DISK_RESERVE, still read for one release.
        let disk_reserve = match (
            self.disk_reserve,
            std::env::var("SEGMIRROR_DISK_RESERVE_BYTES"),
        ) {
            (Some(size), _) => Some(size),
            (None, Ok(text)) => Some(
                text.parse::<ByteSize>()
                    .map_err(|e| anyhow::anyhow!("SEGMIRROR_DISK_RESERVE_BYTES={text:?}: {e}"))?,
            ),
            (None, Err(_)) => None,
        };
        c.poll_interval = self.poll_interval.clone();
        c.poll_interval_ms = self.poll_interval_ms;
        c.download_concurrency = self.download_concurrency;
        c.download_memory = self.download_memory;
        c.stream_above = self.stream_above;
        c.disk_reserve = disk_reserve;
        c.metrics_addr = self.metrics_addr.clone();
        c.preflight = self.preflight.clone();
        c.scrub_bytes_per_hour = self.scrub_bytes_per_hour;
        // Flags over SEGMIRROR_TOPIC_CONFIGS_* (comma-separated) over the file.
        let list = |flags: &[String], var: &str| {
            if !flags.is_empty() {
                return Some(flags.to_vec());
            }
            std::env::var(var)
                .ok()
                .map(|v| applier::config::topic_configs::split_list(&v))
        };
        let section = applier::config::topic_configs::FilterSection {
            include: list(&self.config_include, "SEGMIRROR_TOPIC_CONFIGS_INCLUDE"),
            exclude: list(&self.config_exclude, "SEGMIRROR_TOPIC_CONFIGS_EXCLUDE"),
        };
        if section != applier::config::topic_configs::FilterSection::default() {
            c.topic_configs = Some(section);
        }
        Ok(())
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run as a daemon: poll the bucket and apply, pick up operator commands.
    #[command(after_help = "Examples:
  applier run --config /etc/segmirror/applier.toml
  applier run --log-dir /data/mirror --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics 'orders|payments' --metrics-addr 0.0.0.0:9465
  applier run --config /etc/segmirror/applier.toml --kafka-listen 127.0.0.1:9092
  SEGMIRROR_POLL_INTERVAL=500ms applier run --config /etc/segmirror/applier.toml

Runs until SIGTERM or Ctrl-C. Operator commands (start, pause, resume, stop) given
while it runs are handed to it and answered within --timeout. With --kafka-listen it also
serves the log dir to Kafka clients: consumers read the mirror, producers are refused
(POLICY_VIOLATION) on a mirror partition until `applier stop`.")]
    Run(Box<run::DaemonArgs>),
    /// Serve a log dir over the Kafka protocol without mirroring (after failover, or a restored backfill).
    #[command(after_help = "Examples:
  applier serve --log-dir /data/mirror --kafka-listen 127.0.0.1:9092
  applier serve --log-dir /data/mirror --kafka-listen 0.0.0.0:9092 --kafka-advertise mirror.example.com:9092 --kafka-insecure
  kcat -b 127.0.0.1:9092 -C -t orders -p 0 -o beginning -e

Mirror partitions stay read-only until STOPPED; other partitions take producers' writes.
Runs until SIGTERM or Ctrl-C.")]
    Serve(serve::ServeArgs),
    /// Apply everything available now, then exit (0: done; 1: a partition is FAILED or a gap is not acknowledged).
    /// Retryable failures left by an earlier run are retried at once: a
    /// cron schedule is its own backoff.
    #[command(after_help = "Examples:
  applier once --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src --topics '.*'
  applier once --config /etc/segmirror/applier.toml --store-timeout 20s
  applier once --log-dir /data/mirror --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics 'orders|payments' --exclude 'tmp-.*'

Exit codes: 0 applied (or found nothing to apply: a line says what it found);
1 a partition is FAILED, or the store did not answer within --store-timeout;
2 a usage or setup error, or nothing to mirror because the source or selection is wrong.")]
    Once(run::RunArgs),
    /// Print what `start`/`once` would do to each partition and why
    /// (truncation offset and the rule that chose it, where fetching
    /// starts), changing nothing.
    #[command(after_help = "Examples:
  applier plan --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src --topics 'orders|payments'
  applier plan --log-dir /var/lib/kafka/data --bucket s3://dr-bucket/segmirror --source-cluster-id dst --cluster-id src --json")]
    Plan(plan::PlanArgs),
    /// Start (or restart after stop or failure) mirroring topics; pins each partition to --source-cluster-id.
    #[command(after_help = "Examples:
  applier start --log-dir /data/mirror --bucket file:///data/bucket --source-cluster-id src --topic orders
  applier start --log-dir /data/mirror --bucket s3://dr-bucket/segmirror --source-cluster-id src --topic orders --topic payments
  applier start --config /etc/segmirror/applier.toml --all

A partition STOPPED after failover starts again from the given source (failback, or
resuming the same source): its log is cut where the two logs diverge, and only the
tail is fetched. A cut of records written here (or of a plain partition's data past
what the source shipped) needs --allow-truncate; without it the start is refused
(exit 1) naming the offsets, and nothing changes (`applier plan` shows the cut). A partition still PREPARING takes the new source; one MIRRORING or
PAUSED keeps its source until `applier stop`.

Without a running `applier run` the command acts itself; with one, it hands the
request over and waits up to --timeout. Exit 0 only when every partition started.")]
    Start(commands::StartArgs),
    /// Pause mirroring (the partitions stay read-only).
    #[command(after_help = "Examples:
  applier pause --log-dir /data/mirror --topic orders
  applier pause --log-dir /data/mirror --all --timeout 2m

Exit 0 when every named partition is PAUSED; 1 when one was refused (not MIRRORING).")]
    Pause(commands::StateArgs),
    /// Resume a paused mirror (no truncation).
    #[command(after_help = "Examples:
  applier resume --log-dir /data/mirror --topic orders
  applier resume --log-dir /data/mirror --all

Exit 0 when every named partition is MIRRORING again; 1 when one was refused (not PAUSED).")]
    Resume(commands::StateArgs),
    /// Stop mirroring (failover): partitions become writable.
    #[command(after_help = "Examples:
  applier stop --log-dir /data/mirror --all
  applier stop --log-dir /data/mirror --topic orders --timeout 30s

Returns 0 only once the partitions are STOPPED and writable at a new leader epoch,
whether it acts itself or a running `applier run` does. Failback later is `applier start`.")]
    Stop(commands::StateArgs),
    /// Per-partition state, lag and LME (reads only; safe while `applier run` runs).
    #[command(after_help = "Examples:
  applier status --log-dir /data/mirror
  applier status --log-dir /data/mirror --json | jq '.partitions[] | select(.state != \"MIRRORING\")'")]
    Status(status::StatusArgs),
    /// Add or replace a user of the Kafka listener's SASL users file (password from stdin).
    #[command(after_help = "Examples:
  applier kafka-user --users-file /etc/segmirror/kafka-users.toml --name alice < alice.password
  applier run --config /etc/segmirror/applier.toml --kafka-listen 0.0.0.0:9093 --kafka-tls-cert cert.pem --kafka-tls-key key.pem --kafka-sasl-users /etc/segmirror/kafka-users.toml")]
    KafkaUser(kafka_user::KafkaUserArgs),
    /// Consumer groups committed in the log dir (__consumer_offsets), their offsets and lag.
    #[command(after_help = "Examples:
  applier groups --log-dir /data/mirror
  applier groups --log-dir /data/mirror --json | jq '.groups[] | select(.lag > 1000)'")]
    Groups(groups::GroupsArgs),
    /// Check the DR bucket against what infra/'s Terraform modules promise, plus replication from the source bucket (rule, status, delay).
    #[command(after_help = "Examples:
  applier doctor --expect doctor.toml
  applier doctor --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk --json
  applier doctor --bucket file:///data/bucket --cluster-id src

A table of checks: pass, warn or fail, the evidence (what the endpoint answered) and the fix
(the Terraform variable or setting). --expect takes the two-region-dr example's output
(terraform output -raw doctor_expectations > doctor.toml): its [destination] bucket is
checked, and the [source] bucket's replication rule. Exit codes: 0 no must-have check fails;
1 one does (layout.clusters: a --cluster-id with no data while other clusters are there, a mistyped id);
2 a usage or access error (no credentials, endpoint unreachable, no such bucket, no such file:// directory).")]
    Doctor(doctor::cli::DoctorArgs),
    /// Re-read the local log of every mirror partition and check it (CRCs, header fields, indexes), and sample bucket objects; exit 0 clean, 1 with each mismatch named.
    #[command(after_help = "Examples:
  applier verify --log-dir /data/mirror
  applier verify --log-dir /data/mirror --bucket s3://dr-bucket/segmirror --source-cluster-id src --sample-objects 5%
  applier verify --log-dir /data/mirror --topic orders --json

Checks every batch's CRC-32C, the header fields the CRC does not cover (base offset
continuity, batch length framing, leader epoch against leader-epoch-checkpoint and, with
--bucket, the manifest; magic 2), the offset and time indexes; with --bucket, samples
objects (size and CRC-32C against the manifest). Safe while `applier run` runs (reads
only); segments that retention or compaction removes meanwhile are skipped. The result is
recorded in <log-dir>/.segmirror/verify.json (`applier status` shows it); a damaged mirror
partition is FAILED when an applier next opens the log dir, and `applier start` repairs it.
Exit codes: 0 clean; 1 a mismatch (each named: file, byte, offset, object key); 2 usage.")]
    Verify(verify::VerifyArgs),
    /// Replace damaged segments of a STOPPED partition that lie below its stop point with their copy from the bucket (never cuts local writes).
    #[command(after_help = "Examples:
  applier repair --log-dir /data/mirror --bucket s3://dr-bucket/segmirror --topic orders --partition 0

Verifies the partition, then replaces each damaged rolled segment wholly below the stop
point from the bucket's objects (checked against the manifest first), in place. Refused,
changing nothing, when the damage is in the segment holding the stop point or above (local
writes), when the bucket no longer has that segment, or while `applier run`/`serve` holds
the log dir. A mirror partition is repaired by `applier start`. Exit 0 repaired or clean;
1 refused; 2 usage.")]
    Repair(verify::RepairArgs),
    /// Configuration helpers.
    Config {
        #[command(subcommand)]
        command: ConfigCmd,
    },
    /// Gaps: offsets this mirror never received (list them; acknowledge one).
    #[command(after_help = "Examples:
  applier gaps list --log-dir /data/mirror
  applier gaps ack --log-dir /data/mirror --topic orders --partition 0 --offsets 100-229

A gap (the source lost data before it was shipped, or its log start passed this mirror's
end) stays unacknowledged until acknowledged here, one gap at a time: applier once exits 1
naming it, status shows it (GAPS, `!` = not acknowledged), and the metric
segmirror_applier_gap_unacknowledged_offsets counts it. A later gap is new and unacknowledged.")]
    Gaps {
        #[command(subcommand)]
        command: gaps::GapsCmd,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Validate a configuration (file, env and flags merged, as run and once need it); exit 0 when valid, 2 naming the field otherwise.
    #[command(after_help = "Examples:
  applier config check --config /etc/segmirror/applier.toml
  SEGMIRROR_BUCKET=s3://dr-bucket/segmirror applier config check --config /etc/segmirror/applier.toml")]
    Check(Box<run::RunArgs>),
    /// Print a commented TOML file with every key, its default and meaning.
    #[command(after_help = "Examples:
  applier config example > /etc/segmirror/applier.toml
  applier config example | grep -v '^#' | grep .")]
    Example,
}

/// Writes `text` to stdout; a reader that went away (`| head`) is not an
/// error worth a panic.
pub(crate) fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
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
            Cmd::Run(a) => run::daemon(*a).await,
            Cmd::Serve(a) => serve::run(a).await,
            Cmd::Once(a) => run::run(a, true).await,
            Cmd::Start(a) => commands::start(a).await,
            Cmd::Pause(a) => commands::run(manifest::state::Command::Pause, a).await,
            Cmd::Resume(a) => commands::run(manifest::state::Command::Resume, a).await,
            Cmd::Stop(a) => commands::run(manifest::state::Command::Stop, a).await,
            Cmd::Status(a) => status::run(a),
            Cmd::Gaps { command } => gaps::run(command),
            Cmd::Groups(a) => groups::run(a),
            Cmd::Verify(a) => verify::run(a).await,
            Cmd::Repair(a) => verify::repair(a).await,
            Cmd::KafkaUser(a) => kafka_user::run(a),
            Cmd::Plan(a) => plan::run(a).await,
            Cmd::Doctor(a) => Ok(doctor::cli::main("applier", doctor::View::Applier, a).await),
            Cmd::Config {
                command: ConfigCmd::Check(a),
            } => run::check(*a),
            Cmd::Config {
                command: ConfigCmd::Example,
            } => {
                print!("{}", applier::config::EXAMPLE);
                Ok(0)
            }
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // Each cause once, even where an error both interpolates its
            // source and returns it (object_store's errors do).
            let err: &(dyn std::error::Error + 'static) = e.as_ref();
            eprintln!("applier: error: {}", bucket::diagnosis::one_line(err));
            ExitCode::from(2)
        }
    }
}
