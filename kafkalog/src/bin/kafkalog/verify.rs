//! `kafkalog verify`: check every batch CRC and index/checkpoint consistency.

use std::path::PathBuf;

use kafkalog::reader;
use kafkalog::topic::TopicPartition;
use kafkalog::verify::{self, VerifyOptions, VerifyStats};

use crate::{EXIT_ERROR, EXIT_FINDING, require_log_dir};

/// Verify a log dir: every batch's CRC, offset and epoch order, indexes and
/// checkpoints. Exits 0 when clean, 1 with the first bad location (file, byte
/// position, offset) otherwise, 2 when the dir is missing, is a partition
/// dir, or holds no partitions (nothing verified is not "ok").
#[derive(clap::Args)]
#[command(after_help = "Examples:
  kafkalog verify --log-dir /var/lib/kafka/data
  kafkalog verify --log-dir /var/lib/kafka/data --topic orders --json")]
pub(crate) struct Args {
    /// The log dir.
    #[arg(long, value_name = "DIR")]
    log_dir: PathBuf,
    /// Only this topic.
    #[arg(long)]
    topic: Option<String>,
    /// Only this partition (with --topic).
    #[arg(long, requires = "topic")]
    partition: Option<i32>,
    /// Accept offset gaps between batches (compacted topics).
    #[arg(long)]
    allow_gaps: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    let opts = VerifyOptions {
        allow_gaps: args.allow_gaps,
    };
    if let Some(code) = require_log_dir(&args.log_dir) {
        return Ok(code);
    }
    let mut stats = VerifyStats::default();
    let mut first_problem = verify::verify_root(&args.log_dir).err();
    if first_problem.is_none() {
        let partitions: Vec<TopicPartition> = reader::list_partitions(&args.log_dir)?
            .into_iter()
            .filter(|tp| args.topic.as_deref().is_none_or(|t| tp.topic == t))
            .filter(|tp| args.partition.is_none_or(|p| tp.partition == p))
            .collect();
        if partitions.is_empty() && args.topic.is_some() {
            anyhow::bail!(
                "no partition of topic {:?} in {}",
                args.topic.unwrap_or_default(),
                args.log_dir.display()
            );
        }
        if partitions.is_empty() {
            eprintln!(
                "kafkalog: no partitions in {} (no <topic>-<partition> dirs): nothing verified; is this a Kafka log dir?",
                args.log_dir.display()
            );
            return Ok(EXIT_ERROR);
        }
        for tp in &partitions {
            if let Err(p) = verify::verify_partition(&args.log_dir, tp, opts, &mut stats)? {
                first_problem = Some(p);
                break;
            }
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "ok": first_problem.is_none(), "problem": first_problem, "stats": stats })
        );
    }
    match first_problem {
        None => {
            if !args.json {
                println!(
                    "ok: {} partitions, {} segments, {} batches, {} bytes verified",
                    stats.partitions, stats.segments, stats.batches, stats.bytes
                );
            }
            Ok(0)
        }
        Some(p) => {
            if !args.json {
                eprintln!("corrupt: {p}");
            }
            Ok(EXIT_FINDING)
        }
    }
}
