//! `applier start|pause|resume|stop`.

use std::time::Duration;

use applier::Applier;
use manifest::state::Command;

use crate::Common;

/// Which partitions a command applies to.
#[derive(clap::Args)]
#[command(
    after_help = "The command acts itself when no `applier run` holds the log dir, and hands the request
to the running daemon otherwise; either way it returns 0 only when the transition is done."
)]
pub(crate) struct CommandArgs {
    #[command(flatten)]
    common: Common,
    /// A topic (repeatable).
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
    /// How long to wait for a running daemon, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    timeout: u64,
}

pub(crate) async fn run(command: Command, args: CommandArgs) -> anyhow::Result<u8> {
    // `start` pins the source it mirrors: without the bucket and the
    // source cluster id it would pin an empty identity, so both are required.
    let v = args.common.load()?.validate(command == Command::Start)?;
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
        Ok(mut applier) => applier.command(command, &args.topic_names, args.all).await,
        Err(e)
            if e.downcast_ref::<kafkalog::Error>()
                .is_some_and(|k| matches!(k, kafkalog::Error::Locked { .. })) =>
        {
            applier::commands::hand_to_daemon(
                &v.options.log_dir,
                command,
                &args.topic_names,
                args.all,
                Duration::from_secs(args.timeout),
            )?
        }
        Err(e) => return Err(e),
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
        eprintln!("no mirror partitions");
        return Ok(1);
    }
    Ok(if refused > 0 { 1 } else { 0 })
}
