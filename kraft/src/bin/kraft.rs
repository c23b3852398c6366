//! `kraft`: read a Kafka broker's KRaft metadata log from disk. A thin shell
//! over the `kraft` library; `kafkalog metadata` runs `kraft metadata`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code for usage, IO and setup errors.
const EXIT_ERROR: u8 = 2;

#[derive(Parser)]
#[command(
    name = "kraft",
    version,
    term_width = 0,
    about = "Read a Kafka broker's KRaft metadata log (__cluster_metadata-0) and meta.properties from disk",
    after_help = "Examples:
  kraft metadata --log-dir /var/lib/kafka/data
  kraft metadata --log-dir /var/lib/kafka/data --json

Exit codes: 0 done; 1 part of the metadata cannot be trusted (a record version this reader does not know, an inconsistency), listed in the output; 2 a usage or setup error (no metadata log, unreadable or corrupt files)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the cluster state reconstructed from the metadata log: topics
    /// with ids and configs, partitions with leader, leader epoch, ISR; the
    /// metadata offset applied and anything untrusted. Read-only; safe on a
    /// live broker's dir.
    Metadata(MetadataArgs),
}

#[derive(clap::Args)]
struct MetadataArgs {
    /// The broker's metadata.log.dir (the dir holding __cluster_metadata-0
    /// and meta.properties; by default the first log.dirs entry).
    #[arg(long, env = "KRAFT_LOG_DIR")]
    log_dir: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn metadata(args: MetadataArgs) -> anyhow::Result<u8> {
    if !args.log_dir.is_dir() {
        eprintln!(
            "kraft: log dir {} does not exist (or is not a directory)",
            args.log_dir.display()
        );
        return Ok(EXIT_ERROR);
    }
    let report = kraft::command::read_metadata(&args.log_dir)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(report.exit_code())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Metadata(a) => metadata(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("kraft: error: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
