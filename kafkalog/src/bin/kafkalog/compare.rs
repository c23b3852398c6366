//! `kafkalog compare`: are two log dirs the same, offset for offset?

use std::collections::BTreeSet;
use std::path::PathBuf;

use kafkalog::compare::{Comparison, compare_partition};
use kafkalog::reader;

use crate::EXIT_FINDING;

/// Compare two log dirs: same partitions, offsets, batch bytes and epoch
/// lineage up to the shorter log end. Prints `identical` (exit 0) or the
/// first difference (exit 1). Different log ends are a difference, except
/// when the shorter partition is a mirror (it lags its source by design):
/// then it prints `identical up to ...` naming where each ends (exit 0).
#[derive(clap::Args)]
#[command(after_help = "Examples:
  kafkalog compare /data/source /data/mirror
  kafkalog compare /data/source /data/mirror --topic orders")]
pub(crate) struct Args {
    /// First log dir.
    a: PathBuf,
    /// Second log dir.
    b: PathBuf,
    /// Only this topic.
    #[arg(long)]
    topic: Option<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    let keep = |tp: &kafkalog::TopicPartition| args.topic.as_deref().is_none_or(|t| tp.topic == t);
    let pa: BTreeSet<_> = reader::list_partitions(&args.a)?
        .into_iter()
        .filter(keep)
        .collect();
    let pb: BTreeSet<_> = reader::list_partitions(&args.b)?
        .into_iter()
        .filter(keep)
        .collect();
    if let Some(tp) = pa.symmetric_difference(&pb).next() {
        let (has, lacks) = if pa.contains(tp) {
            (&args.a, &args.b)
        } else {
            (&args.b, &args.a)
        };
        println!(
            "{tp}: present in {} but not in {}",
            has.display(),
            lacks.display()
        );
        return Ok(EXIT_FINDING);
    }
    if pa.is_empty() {
        anyhow::bail!(
            "no partitions to compare in {} and {}",
            args.a.display(),
            args.b.display()
        );
    }
    let mut partial = Vec::new();
    for tp in &pa {
        match compare_partition(&args.a, &args.b, tp)? {
            Comparison::Identical => {}
            Comparison::IdenticalUpTo { offset, longer } => partial.push(format!(
                "{tp}: identical up to offset {offset} (the mirror's end; {longer})"
            )),
            Comparison::Different(diff) => {
                println!("{diff}");
                return Ok(EXIT_FINDING);
            }
        }
    }
    if partial.is_empty() {
        println!("identical");
    } else {
        println!("identical up to the mirrors' log ends");
        for line in partial {
            println!("  {line}");
        }
    }
    Ok(0)
}
