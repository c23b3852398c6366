//! `shipper`: tail a source broker's Kafka log dirs and ship their committed
//! batches with the epoch manifest to a bucket. A thin shell over the
//! `shipper` library: one file per subcommand.

mod config_check;
mod gaps;
mod init;
mod once;
mod run;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use shipper::ShipperConfig;
use shipper::config::ByteSize;

const EXAMPLES: &str = "Examples:
  shipper run    --log-dir /var/lib/kafka/data --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk
  shipper run    --config /etc/segmirror/shipper.toml --metrics-addr 0.0.0.0:9464
  shipper init   --bucket file:///data/bucket --cluster-id src
  shipper once   --log-dir /data/a --log-dir /data/b --bucket file:///data/bucket --cluster-id src --topics 'orders|payments'
  shipper status --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk --json
  shipper gaps list --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk
  shipper gaps ack  --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk --topic orders --partition 0 --offsets 100-229
  shipper config check --config /etc/segmirror/shipper.toml
  shipper config example > /etc/segmirror/shipper.toml
  shipper doctor --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk

Settings come from the TOML file (--config), then SEGMIRROR_* environment
variables (SEGMIRROR_LOG_DIRS=/a:/b, SEGMIRROR_BUCKET, SEGMIRROR_CLUSTER_ID,
SEGMIRROR_TAIL_INTERVAL, ...; see `shipper config check --help`), then flags.
S3 credentials and endpoint come from the standard AWS variables.

Exit codes: 0 done; 1 a partition failed, an operation was refused, or the store is
unreachable or refused a request (wrong region, access denied, no such bucket);
2 a usage or setup error (bad flag or config, no readable log dir, no AWS credentials,
a bucket never set up for the cluster id: `shipper init` or --create-bucket).";

#[derive(Parser)]
#[command(
    name = "shipper",
    version,
    about = "Ship a Kafka broker's committed log segments, byte for byte, with an epoch manifest to a bucket",
    after_help = EXAMPLES,
    // Never hard-wrap: every example line pastes as it is (terminals wrap).
    term_width = 0
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

/// Settings of run, once and config check: file, then environment, then
/// these flags.
#[derive(Args, Clone, Default)]
pub(crate) struct Common {
    /// TOML configuration file [env: SEGMIRROR_SHIPPER_CONFIG] [default: none: environment and flags only].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A source log dir, as in Kafka's log.dirs (repeat for several) [env: SEGMIRROR_LOG_DIRS=/a:/b or SEGMIRROR_LOG_DIR] [default: none: required].
    #[arg(long = "log-dir", value_name = "DIR")]
    log_dirs: Vec<PathBuf>,
    /// Bucket URL: file:///abs/path, memory:// or s3://bucket/prefix [env: SEGMIRROR_BUCKET] [default: none: required].
    #[arg(long, value_name = "URL")]
    bucket: Option<String>,
    /// This (source) cluster's id: the namespace of its objects [env: SEGMIRROR_CLUSTER_ID] [default: none: required].
    #[arg(long, value_name = "ID")]
    cluster_id: Option<String>,
    /// Topics to ship: a regex matched against the whole topic name [env: SEGMIRROR_TOPICS] [default: every topic].
    #[arg(long, value_name = "REGEX")]
    topics: Option<String>,
    /// Topics never shipped: a regex matched against the whole topic name [env: SEGMIRROR_EXCLUDE] [default: none].
    #[arg(long, value_name = "REGEX")]
    exclude: Option<String>,
    /// Consumer groups whose committed offsets are shipped (for the topics shipped): a regex matched against the whole group id [env: SEGMIRROR_GROUPS] [default: every group].
    #[arg(long, value_name = "REGEX")]
    groups: Option<String>,
    /// Consumer groups never shipped; '.*' ships no group offsets [env: SEGMIRROR_EXCLUDE_GROUPS] [default: none].
    #[arg(long, value_name = "REGEX")]
    exclude_groups: Option<String>,
    /// This shipper's id, written into every manifest [env: SEGMIRROR_SHIPPER_ID] [default: <hostname>-<pid>].
    #[arg(long, value_name = "ID")]
    shipper_id: Option<String>,
    /// Objects uploaded at once [env: SEGMIRROR_UPLOAD_CONCURRENCY] [default: 4].
    #[arg(long, value_name = "N")]
    upload_concurrency: Option<usize>,
    /// Multipart part size, at least 5MiB on S3 [env: SEGMIRROR_PART_SIZE] [default: 8MiB on S3, 1MiB on file:// and memory://].
    #[arg(long, value_name = "SIZE")]
    part_size: Option<ByteSize>,
    /// Largest object: longer spans are split on batch boundaries [env: SEGMIRROR_MAX_OBJECT_SIZE] [default: 64MiB].
    #[arg(long, value_name = "SIZE")]
    max_object_size: Option<ByteSize>,
    /// A cycle's ranges under this size go into one pack object for all partitions (one PUT), 0: off (layout 1) [env: SEGMIRROR_PACK_BELOW] [default: 1MiB].
    #[arg(long, value_name = "SIZE")]
    pack_below: Option<ByteSize>,
    /// Upload rate limit in bytes per second, e.g. 100MiB (0: unlimited) [env: SEGMIRROR_RATE_LIMIT] [default: 0].
    #[arg(long, value_name = "BYTES_PER_S")]
    rate_limit: Option<ByteSize>,
    /// Serve Prometheus metrics on this address (GET /metrics) [env: SEGMIRROR_METRICS_ADDR] [default: none: not served].
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    /// Request prices for the cost metric and `status`: s3-standard, s3-express-one-zone, gcs-standard, r2 [env: SEGMIRROR_PRICES] [default: s3-standard].
    #[arg(long, value_name = "PRESET")]
    prices: Option<String>,
    /// Ship up to the log end even when replication-offset-checkpoint exists (unsafe on a broker) [env: SEGMIRROR_SHIP_BEYOND_HW] [default: false].
    #[arg(long)]
    ship_beyond_hw: bool,
    /// Commit a partition's appends with the cycle's head (deltas) instead of a manifest object each; every shipper of a cluster alike; `--head-deltas false`: a manifest object each (layout 1) [env: SEGMIRROR_HEAD_DELTAS] [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    head_deltas: Option<bool>,
    /// Delete unreferenced objects after this long, or "never" (leave them to lifecycle rules) [env: SEGMIRROR_DELETE_GRACE] [default: 1h].
    #[arg(long, value_name = "DURATION|never")]
    delete_grace: Option<String>,
    /// `once`: give up when the store does not answer within this [env: SEGMIRROR_STORE_TIMEOUT] [default: 60s].
    #[arg(long, value_name = "DURATION")]
    store_timeout: Option<String>,
    /// Bucket checks at start (`shipper doctor`'s must-haves): off, warn (log failures) or enforce (exit 1 first) [env: SEGMIRROR_PREFLIGHT] [default: warn].
    #[arg(long, value_name = "off|warn|enforce")]
    preflight: Option<String>,
    /// A source topic with tiered storage (remote.storage.enable=true), by exact name, repeatable: offsets past its local retention are reported as in remote storage, not lost [env: SEGMIRROR_TIERED_TOPICS=a,b] [default: none].
    #[arg(long = "tiered-topic", value_name = "TOPIC")]
    tiered_topics: Vec<String>,
    /// The broker's metadata.log.dir, when it is not one of the log dirs: with a metadata log, topic configs are published with the manifests [env: SEGMIRROR_METADATA_LOG_DIR] [default: the log dir holding __cluster_metadata-0].
    #[arg(long, value_name = "DIR")]
    metadata_log_dir: Option<PathBuf>,
    /// The broker's static server.properties, for the broker-level defaults of topic configs [env: SEGMIRROR_BROKER_CONFIG] [default: none].
    #[arg(long, value_name = "FILE")]
    broker_config: Option<PathBuf>,
}

impl Common {
    /// File, then environment, then flags. Relative paths in the file
    /// resolve against its directory; in flags and the environment, against
    /// the working directory.
    pub(crate) fn load(&self) -> anyhow::Result<ShipperConfig> {
        let path = self
            .config
            .clone()
            .or_else(|| std::env::var_os("SEGMIRROR_SHIPPER_CONFIG").map(PathBuf::from));
        let file = match &path {
            Some(p) => ShipperConfig::from_file(p)?,
            None => ShipperConfig::default(),
        };
        let cwd = std::env::current_dir()
            .map_err(|e| anyhow::anyhow!("reading the working directory: {e}"))?;
        let env = ShipperConfig::from_env(|k| std::env::var(k).ok())?.resolve_paths(&cwd);
        let flags = ShipperConfig {
            log_dirs: self.log_dirs.clone(),
            bucket: self.bucket.clone(),
            cluster_id: self.cluster_id.clone(),
            shipper_id: self.shipper_id.clone(),
            topics: self.topics.clone(),
            exclude: self.exclude.clone(),
            groups: self.groups.clone(),
            exclude_groups: self.exclude_groups.clone(),
            upload_concurrency: self.upload_concurrency,
            part_size: self.part_size,
            max_object_size: self.max_object_size,
            pack_below: self.pack_below,
            rate_limit: self.rate_limit,
            ship_beyond_hw: self.ship_beyond_hw.then_some(true),
            head_deltas: self.head_deltas,
            metrics_addr: self.metrics_addr.clone(),
            prices: self.prices.clone(),
            delete_grace: self.delete_grace.clone(),
            store_timeout: self.store_timeout.clone(),
            preflight: self.preflight.clone(),
            tiered_topics: self.tiered_topics.clone(),
            metadata_log_dir: self.metadata_log_dir.clone(),
            broker_config: self.broker_config.clone(),
            ..ShipperConfig::default()
        }
        .resolve_paths(&cwd);
        Ok(file.merge(env).merge(flags))
    }
}

/// The daemon's intervals: flags of `run` (and `config check`) only, as
/// `once` makes one pass.
#[derive(Args, Clone, Default)]
pub(crate) struct Intervals {
    /// How often __consumer_offsets is read and changed group offsets shipped [env: SEGMIRROR_GROUP_SYNC_INTERVAL] [default: 5s].
    #[arg(long, value_name = "DURATION")]
    group_sync_interval: Option<String>,
    /// How often the active segments are tailed (bounds the RPO) [env: SEGMIRROR_TAIL_INTERVAL] [default: 5s].
    #[arg(long, value_name = "DURATION")]
    tail_interval: Option<String>,
}

impl Intervals {
    /// `config` (file, then environment, then the other flags) with these
    /// flags over it.
    pub(crate) fn over(&self, mut config: ShipperConfig) -> ShipperConfig {
        if self.group_sync_interval.is_some() {
            config.group_sync_interval = self.group_sync_interval.clone();
        }
        if self.tail_interval.is_some() {
            config.tail_interval = self.tail_interval.clone();
        }
        config
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run as a daemon: ship every tail interval until SIGINT or SIGTERM.
    #[command(after_help = "Examples:
  shipper run --log-dir /var/lib/kafka/data --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk
  shipper run --config /etc/segmirror/shipper.toml --metrics-addr 0.0.0.0:9464 --rate-limit 200MiB
  shipper run --config /etc/segmirror/shipper.toml --exclude-groups 'console-consumer-.*|connect-.*'

SIGINT or SIGTERM: the cycle in progress finishes (uploads, manifests, head), then the process exits 0.
At start, a bucket never set up for the cluster id is refused (exit 2; `shipper init`, or
--create-bucket), and a store that does not answer that check within --store-timeout is exit 1.")]
    Run(run::RunArgs),
    /// Ship everything shippable now, then exit (0: done; 1: a partition failed or the store is unreachable; 2: bad usage or no readable log dir).
    #[command(after_help = "Examples:
  shipper once --log-dir /data/kafka --bucket file:///data/bucket --cluster-id src --create-bucket
  shipper once --config /etc/segmirror/shipper.toml --topics 'orders|payments' --exclude 'tmp-.*'
  shipper once --log-dir data --bucket s3://dr-bucket/segmirror --cluster-id src --store-timeout 20s

Exit codes: 0 shipped (or found nothing to ship: a line says what it found); 1 a partition
failed, a gap is not acknowledged (shipper gaps ack), or the store did not answer within
--store-timeout (default 60s); 2 a usage or configuration error, none of the log dirs is
readable, no partition has a topic id (Kafka before 2.8 writes no partition.metadata), or
the bucket was never set up for this cluster (`shipper init`, or --create-bucket).")]
    Once(run::OnceArgs),
    /// Set up a bucket for a cluster (create the file:// directory, write the cluster's marker); idempotent (0: created or already there).
    #[command(after_help = "Examples:
  shipper init --bucket file:///data/bucket --cluster-id src
  shipper init --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk
  shipper init --config /etc/segmirror/shipper.toml

once and run ship only into a bucket set up for their cluster id: one whose
<prefix>/segmirror/v1/<cluster-id>/ holds the marker this writes
(cluster.json) or shipped data; anything else (a mistyped path, prefix or
cluster id) is refused with exit 2 unless --create-bucket is given.
Exit codes: 0 initialised (a line says: created, or already there); 1 the
store refused or did not answer; 2 a usage error.")]
    Init(init::InitArgs),
    /// Per-partition shipped end, source high watermark and lag, from the bucket.
    #[command(after_help = "Examples:
  shipper status --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk
  shipper status --bucket file:///data/bucket --cluster-id src --json | jq '.partitions[] | select(.lag_offsets > 0)'")]
    Status(status::StatusArgs),
    /// Check the bucket against what infra/'s Terraform modules promise (versioning, SSE-KMS, public access block, TLS-only policy, lifecycle, replication, least privilege, layout).
    #[command(after_help = "Examples:
  shipper doctor --bucket s3://dr-bucket/segmirror --cluster-id MkU3OEVBNTcwNTJENDM2Qk
  shipper doctor --expect doctor.toml --json | jq '.checks[] | select(.status != \"pass\")'
  shipper doctor --bucket file:///data/bucket --cluster-id src

A table of checks: pass, warn or fail, the evidence (what the endpoint answered) and the fix
(the Terraform variable or setting). --expect takes the two-region-dr example's output
(terraform output -raw doctor_expectations > doctor.toml); without it the table states the
defaults. Exit codes: 0 no must-have check fails; 1 one does (layout.clusters: a --cluster-id
with neither marker nor data, a mistyped id or a bucket not set up by shipper init); 2 a usage
or access error (no credentials, endpoint unreachable, no such bucket, no such file:// directory).")]
    Doctor(doctor::cli::DoctorArgs),
    /// Gaps: offsets the source lost before they were shipped (list them; acknowledge one).
    #[command(after_help = "Examples:
  shipper gaps list --bucket file:///data/bucket --cluster-id src
  shipper gaps ack --bucket file:///data/bucket --cluster-id src --topic orders --partition 0 --offsets 100-229

A gap stays unacknowledged (shipper once exits 1, the metric
segmirror_shipper_gap_unacknowledged_offsets counts it) until acknowledged here,
one gap at a time: a later gap is new and unacknowledged.")]
    Gaps {
        #[command(subcommand)]
        command: gaps::GapsCmd,
    },
    /// Configuration helpers.
    Config {
        #[command(subcommand)]
        command: ConfigCmd,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Validate a configuration (file, environment and flags merged); exit 0 when valid.
    Check(Box<config_check::CheckArgs>),
    /// Print a commented TOML file with every key, its default and meaning.
    #[command(after_help = "Examples:
  shipper config example > /etc/segmirror/shipper.toml
  shipper config example | grep -v '^#' | grep .")]
    Example,
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
            eprintln!("shipper: error: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Cmd::Run(a) => run::run(a).await,
            Cmd::Once(a) => once::once(a).await,
            Cmd::Init(a) => init::init(a).await,
            Cmd::Status(a) => status::status(a).await,
            Cmd::Gaps { command } => gaps::gaps(command).await,
            Cmd::Doctor(a) => Ok(doctor::cli::main("shipper", doctor::View::Shipper, a).await),
            Cmd::Config {
                command: ConfigCmd::Check(a),
            } => config_check::check(*a),
            Cmd::Config {
                command: ConfigCmd::Example,
            } => {
                print!("{}", shipper::config::EXAMPLE);
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
            eprintln!("shipper: error: {}", bucket::diagnosis::one_line(err));
            ExitCode::from(2)
        }
    }
}
