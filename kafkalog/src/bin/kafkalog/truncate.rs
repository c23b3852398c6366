//! `kafkalog truncate`: cut a partition's log at an offset.
//!
//! Refuses, changing nothing, on a mirror partition whose write guard says
//! it is read-only (unless `--force`), and on a log dir or partition that
//! does not exist (it never creates one). Before cutting it says where the
//! cut falls: truncation is on batch boundaries, as in Kafka, so an offset
//! inside a batch cuts the whole batch.

use std::ops::ControlFlow;
use std::path::PathBuf;

use kafkalog::reader::PartitionReader;
use kafkalog::topic::TopicPartition;
use kafkalog::{LogConfig, LogDir};

use crate::{EXIT_ERROR, EXIT_FINDING, require_log_dir};

/// Truncate a partition so that OFFSET is its log end (batches at and after
/// it are removed; an offset inside a batch cuts at that batch's first
/// offset, as in Kafka).
#[derive(clap::Args)]
#[command(after_help = "Examples:
  kafkalog truncate --log-dir /tmp/logs --topic orders --partition 0 --to 100          # prints the cut, changes nothing
  kafkalog truncate --log-dir /tmp/logs --topic orders --partition 0 --to 100 --yes    # cuts

Exit codes: 0 cut (or nothing to cut); 1 refused (a read-only mirror partition: run `applier stop` first, or pass --force); 2 usage error, no such log dir or partition, or --yes missing.")]
pub(crate) struct Args {
    /// The log dir (must exist).
    #[arg(long, value_name = "DIR")]
    log_dir: PathBuf,
    /// Topic name.
    #[arg(long)]
    topic: String,
    /// Partition number.
    #[arg(long)]
    partition: i32,
    /// The new log end offset (rounded down to a batch boundary).
    #[arg(long, value_name = "OFFSET")]
    to: i64,
    /// Confirm: truncation deletes data. Without it the cut is printed and nothing changes.
    #[arg(long)]
    yes: bool,
    /// Truncate even a read-only mirror partition (its write guard is left in place).
    #[arg(long)]
    force: bool,
}

/// Where a cut at `to` falls: the first offset of the batch holding `to`
/// (or `to` itself between batches), with the batches and bytes removed.
struct Cut {
    at: i64,
    batches: u64,
    bytes: u64,
    inside: Option<(i64, i64)>,
}

fn plan_cut(reader: &PartitionReader, to: i64) -> anyhow::Result<Cut> {
    let mut cut = Cut {
        at: to,
        batches: 0,
        bytes: 0,
        inside: None,
    };
    let mut first = true;
    reader.for_each_batch(to, false, |h, bytes| {
        if first && h.base_offset < to {
            cut.at = h.base_offset;
            cut.inside = Some((h.base_offset, h.last_offset()));
        }
        first = false;
        cut.batches += 1;
        cut.bytes += bytes.len() as u64;
        ControlFlow::Continue(())
    })?;
    Ok(cut)
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    let tp = TopicPartition::new(&args.topic, args.partition)?;
    if let Some(code) = require_log_dir(&args.log_dir) {
        return Ok(code);
    }
    if !args.log_dir.join(tp.dir_name()).is_dir() {
        eprintln!("kafkalog: no partition {tp} in {}", args.log_dir.display());
        return Ok(EXIT_ERROR);
    }
    let reader = PartitionReader::open(&args.log_dir, &tp)?;
    if let Some(reason) = reader.read_only_reason()? {
        if !args.force {
            eprintln!(
                "kafkalog: refused: {tp} is read-only ({reason}); fail it over first with `applier stop --log-dir {} --topic {}`, or pass --force to cut a mirror partition anyway",
                args.log_dir.display(),
                tp.topic
            );
            return Ok(EXIT_FINDING);
        }
        eprintln!("kafkalog: warning: {tp} is read-only ({reason}); cutting it because of --force");
    }
    let cut = plan_cut(&reader, args.to)?;
    if cut.batches == 0 {
        println!(
            "{tp}: nothing to cut: no batch ends at or after offset {}",
            args.to
        );
        return Ok(0);
    }
    let at = match cut.inside {
        Some((first, last)) => format!(
            "offset {} is inside batch {first}..{last}, so the cut is at its batch boundary {}",
            args.to, cut.at
        ),
        None => format!("the cut is at offset {}", cut.at),
    };
    println!(
        "{tp}: {at}: {} batches, {} bytes removed",
        cut.batches, cut.bytes
    );
    if !args.yes {
        eprintln!("kafkalog: nothing changed: pass --yes to cut");
        return Ok(EXIT_ERROR);
    }
    let dir = LogDir::open(&args.log_dir)?;
    let mut log = dir.open_partition(&tp, LogConfig::default())?;
    let before = log.log_end_offset();
    let after = log.truncate_to(cut.at)?;
    log.close()?;
    println!("{tp}: log end offset {before} -> {after}");
    Ok(0)
}
