//! `applier status`.

use std::path::PathBuf;

/// Print per-partition state, lag and LME (no lock: safe while the daemon runs).
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    /// The destination log dir.
    #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
    log_dir: PathBuf,
    /// JSON instead of a table (`{"partitions": [...]}`, fields documented in the library's `status` module).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: StatusArgs) -> anyhow::Result<u8> {
    let rows = applier::status::collect(&args.log_dir)?;
    if args.json {
        crate::print_out(&format!("{}\n", serde_json::json!({ "partitions": rows })));
    } else {
        crate::print_out(&applier::status::table(&rows));
    }
    Ok(0)
}
