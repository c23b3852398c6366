//! `applier start|pause|resume|stop`.

use std::time::Duration;

use applier::Applier;
use manifest::state::Command;

use crate::{ConfigArgs, Flags, PrepareArgs, SourceArgs};

/// Settings of `start`: which partitions, and the source it pins them to.
#[derive(clap::Args)]
pub(crate) struct StartArgs {
    #[command(flatten)]
    command: CommandArgs,
    #[command(flatten)]
    source: SourceArgs,
    #[command(flatten)]
    prepare: PrepareArgs,
    /// Allow cutting records of a partition's own when it becomes (or resumes as) a mirror: a plain partition with data past what the source shipped, or a STOPPED one with writes since its stop. Without it such a start is refused (exit 1), naming the offsets; `applier plan` shows them.
    #[arg(long)]
    allow_truncate: bool,
}

/// Which partitions a command applies to (start, pause, resume, stop).
#[derive(clap::Args)]
pub(crate) struct CommandArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// A topic by its exact name, repeatable (not a regex: `--topics REGEX` of run and once selects topics to start automatically).
    #[arg(
        id = "topic",
        long = "topic",
        value_name = "TOPIC",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    topic_names: Vec<String>,
    /// Every mirror partition in the log dir.
    #[arg(long)]
    all: bool,
    /// How long to wait for a running `applier run` to perform the command, e.g. 30s, 2m.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_timeout)]
    timeout: Duration,
}

/// A humantime duration; a bare number is seconds (the older spelling).
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match text.parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 30s, 2m)")),
    }
}

/// `applier start`.
pub(crate) async fn start(args: StartArgs) -> anyhow::Result<u8> {
    let groups: [&dyn Flags; 2] = [&args.source, &args.prepare];
    run_with(Command::Start, args.command, &groups, args.allow_truncate).await
}

/// Settings of `pause`, `resume` and `stop`: which partitions. They never
/// read the bucket (a failover works with the source gone).
#[derive(clap::Args)]
pub(crate) struct StateArgs {
    #[command(flatten)]
    command: CommandArgs,
    #[command(flatten)]
    unused: UnusedSourceArgs,
}

/// The bucket and cluster-id flags, which these commands never used but
/// once listed: still accepted (hidden), so that a failover runbook written
/// with them does not stop at a usage error, and named as ignored.
#[derive(clap::Args)]
struct UnusedSourceArgs {
    #[arg(long, value_name = "URL", hide = true)]
    bucket: Option<String>,
    #[arg(long, value_name = "ID", hide = true)]
    source_cluster_id: Option<String>,
    #[arg(long, value_name = "ID", hide = true)]
    cluster_id: Option<String>,
}

impl UnusedSourceArgs {
    fn given(&self) -> Vec<&'static str> {
        [
            ("--bucket", self.bucket.is_some()),
            ("--source-cluster-id", self.source_cluster_id.is_some()),
            ("--cluster-id", self.cluster_id.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
}

/// `applier pause|resume|stop`.
pub(crate) async fn run(command: Command, args: StateArgs) -> anyhow::Result<u8> {
    let ignored = args.unused.given();
    if !ignored.is_empty() {
        eprintln!(
            "applier: note: {} not used by {command} (it acts on the local log dir only): ignored",
            ignored.join(", ")
        );
    }
    run_with(command, args.command, &[], false).await
}

async fn run_with(
    command: Command,
    args: CommandArgs,
    groups: &[&dyn Flags],
    allow_truncate: bool,
) -> anyhow::Result<u8> {
    // `start` pins the source it mirrors: without the bucket and the
    // source cluster id it would pin an empty identity, so both are required.
    let v = args
        .config
        .load(groups)?
        .validate(command == Command::Start)?;
    // Only `start` may begin a mirror in a new log dir; the others act on
    // mirrors that exist, so a mistyped dir is an error, never created.
    if command != Command::Start && !v.options.log_dir.is_dir() {
        eprintln!(
            "applier: log dir {} does not exist: nothing to {}",
            v.options.log_dir.display(),
            command.as_str()
        );
        return Ok(2);
    }
    let store = v.bucket.as_ref().map(|b| b.build()).transpose()?;
    let outcomes = match Applier::open(v.options.clone(), store) {
        Ok(mut applier) => {
            applier
                .command_allowing(command, &args.topic_names, args.all, allow_truncate)
                .await
        }
        Err(applier::error::OpenError::LogDir(kafkalog::Error::Locked { .. })) => {
            applier::commands::hand_to_daemon(
                &v.options.log_dir,
                command,
                &args.topic_names,
                args.all,
                allow_truncate,
                args.timeout,
            )?
        }
        Err(e) => return Err(e.into()),
    };
    let mut refused = 0;
    for o in &outcomes {
        match &o.error {
            None => println!("{}: {}", o.partition, o.state.as_deref().unwrap_or("?")),
            Some(e) => {
                refused += 1;
                eprintln!("{}: refused: {e}", o.partition);
            }
        }
    }
    if outcomes.is_empty() {
        // Only `--all` gets here (a named topic has an outcome): a log dir
        // without a single mirror partition is the wrong dir.
        eprintln!(
            "applier: no mirror partitions in {}: nothing to {} (is it the mirror's log dir?)",
            v.options.log_dir.display(),
            command.as_str()
        );
        return Ok(2);
    }
    Ok(if refused > 0 { 1 } else { 0 })
}
