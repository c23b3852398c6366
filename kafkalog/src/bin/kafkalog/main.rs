//! `kafkalog`: inspect, verify, compare, produce to and truncate Kafka-format
//! log dirs, and read what a broker's coordinators keep in them. A thin shell over the `kafkalog` library; one module per
//! subcommand.

mod compare;
mod dump;
mod metadata;
mod produce;
mod transactions;
mod truncate;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code for "the data is not as it should be" (corrupt, different).
pub(crate) const EXIT_FINDING: u8 = 1;
/// Exit code for usage, IO and other errors.
pub(crate) const EXIT_ERROR: u8 = 2;

/// For commands that read or change an existing log dir: `None` when `dir`
/// is a directory; otherwise says why on stderr (missing, not a directory,
/// or a partition dir given where its parent belongs) and returns the exit
/// code. Such commands never create the dir.
pub(crate) fn require_log_dir(dir: &std::path::Path) -> Option<u8> {
    if !dir.is_dir() {
        eprintln!(
            "kafkalog: log dir {} does not exist (or is not a directory)",
            dir.display()
        );
        return Some(EXIT_ERROR);
    }
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if kafkalog::TopicPartition::parse_dir_name(name).is_ok()
        && kafkalog::segment::list_segments(dir).is_ok_and(|s| !s.is_empty())
    {
        eprintln!(
            "kafkalog: {} is a partition dir (it holds .log segments); pass its parent as --log-dir",
            dir.display()
        );
        return Some(EXIT_ERROR);
    }
    None
}

#[derive(Parser)]
#[command(
    name = "kafkalog",
    version,
    // Never hard-wrap: every example line pastes as it is (terminals wrap).
    term_width = 0,
    about = "Inspect, verify, compare, produce to and truncate Kafka-format partition logs",
    long_about = "Works on log dirs laid out exactly as a Kafka broker's (<topic>-<partition>/ with \
20-digit .log/.index/.timeindex segments, leader-epoch-checkpoint, partition.metadata). \
Read commands (dump, verify, compare) take no lock and are safe on a live broker's dir.",
    after_help = "Examples:
  printf 'k1\\tv1\\nk2\\tv2\\n' | kafkalog produce --log-dir /tmp/logs --topic orders --partition 0
  kafkalog dump --log-dir /tmp/logs --topic orders --partition 0 --records
  kafkalog verify --log-dir /var/lib/kafka/data
  kafkalog compare /data/source /data/mirror --topic orders
  kafkalog truncate --log-dir /tmp/logs --topic orders --partition 0 --to 100 --yes
  kafkalog metadata --log-dir /var/lib/kafka/data --json
  kafkalog transactions --log-dir /var/lib/kafka/data

Exit codes: 0 done; 1 a finding (corrupt or different data) or a refused operation (a write to a read-only mirror partition); 2 a usage or setup error (no such log dir, bad flags)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Dump(dump::Args),
    Verify(verify::Args),
    Compare(compare::Args),
    Produce(produce::Args),
    Truncate(truncate::Args),
    Metadata(metadata::Args),
    Transactions(transactions::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dump(a) => dump::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Produce(a) => produce::run(a),
        Command::Truncate(a) => truncate::run(a),
        Command::Metadata(a) => metadata::run(a),
        Command::Transactions(a) => transactions::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("kafkalog: error: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
