//! `kafkalog truncate`: cut a partition's log at an offset.

use std::path::PathBuf;

use kafkalog::topic::TopicPartition;
use kafkalog::{LogConfig, LogDir};

/// Truncate a partition so that OFFSET is its log end (batches at and after
/// it are removed; the cut is on a batch boundary, as in Kafka).
#[derive(clap::Args)]
#[command(after_help = "Example:
  kafkalog truncate --log-dir /tmp/logs --topic orders --partition 0 --to 100 --yes")]
pub(crate) struct Args {
    /// The log dir.
    #[arg(long, value_name = "DIR")]
    log_dir: PathBuf,
    /// Topic name.
    #[arg(long)]
    topic: String,
    /// Partition number.
    #[arg(long)]
    partition: i32,
    /// The new log end offset.
    #[arg(long, value_name = "OFFSET")]
    to: i64,
    /// Confirm: truncation deletes data.
    #[arg(long)]
    yes: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    if !args.yes {
        anyhow::bail!(
            "truncate deletes records at and after offset {}; pass --yes to confirm",
            args.to
        );
    }
    let tp = TopicPartition::new(&args.topic, args.partition)?;
    let dir = LogDir::open(&args.log_dir)?;
    let mut log = dir.open_partition(&tp, LogConfig::default())?;
    let before = log.log_end_offset();
    let after = log.truncate_to(args.to)?;
    log.close()?;
    println!("{tp}: log end offset {before} -> {after}");
    Ok(0)
}
