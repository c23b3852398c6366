//! `kafkalog metadata`: the cluster state in a broker's KRaft metadata log.
//!
//! The reading lives in the `kraft` crate, which depends on this one; so
//! that this package does not depend on it in turn (a cycle), this
//! subcommand runs the `kraft` binary installed next to `kafkalog` as
//! `kraft metadata` with the same flags, and exits with its exit code.

use std::path::PathBuf;
use std::process::Command;

use crate::EXIT_ERROR;

/// Print the cluster state a broker's KRaft metadata log holds: topics with
/// ids and configs, partitions with leader, leader epoch, ISR; the metadata
/// offset applied and anything that cannot be trusted. Runs `kraft
/// metadata` (the `kraft` binary next to this one).
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The broker's metadata.log.dir (holding __cluster_metadata-0 and
    /// meta.properties).
    #[arg(long)]
    log_dir: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    let exe = std::env::current_exe()?;
    let kraft = exe.with_file_name(format!("kraft{}", std::env::consts::EXE_SUFFIX));
    if !kraft.is_file() {
        eprintln!(
            "kafkalog: metadata is read by the kraft binary, which is not installed next to kafkalog ({} is missing); build it with `cargo build -p kraft` or run `kraft metadata` directly",
            kraft.display()
        );
        return Ok(EXIT_ERROR);
    }
    let mut cmd = Command::new(&kraft);
    cmd.arg("metadata").arg("--log-dir").arg(&args.log_dir);
    if args.json {
        cmd.arg("--json");
    }
    let status = cmd.status()?;
    Ok(status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(EXIT_ERROR))
}
