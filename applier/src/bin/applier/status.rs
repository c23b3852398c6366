//! `applier status`.

use std::path::PathBuf;

/// Print per-partition state, lag and LME (no lock: safe while the daemon runs).
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    /// The destination log dir.
    #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
    log_dir: PathBuf,
    /// JSON instead of a table (`{"partitions": [...], "group_sync": {...} | null, "verify": {...}}`, fields documented in the library's `status` and `group_sync` modules).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: StatusArgs) -> anyhow::Result<u8> {
    let rows = applier::status::collect(&args.log_dir)?;
    let groups = applier::group_sync::SyncRecord::read(&args.log_dir).unwrap_or_else(|e| {
        eprintln!("applier: warning: {e}");
        None
    });
    let verified = applier::verify::VerifyRecord::read(&args.log_dir).unwrap_or_else(|e| {
        eprintln!("applier: warning: {e}");
        applier::verify::VerifyRecord::default()
    });
    if args.json {
        let sync = groups.as_ref().map(|g| {
            serde_json::json!({
                "source_cluster_id": g.source_cluster_id,
                "version": g.version,
                "groups": g.groups.len(),
                "synced_offsets": g.synced.len(),
                "last_success_ms": g.last_success_ms,
                "last_error": g.last_error,
            })
        });
        crate::print_out(&format!(
            "{}\n",
            serde_json::json!({ "partitions": rows, "group_sync": sync, "verify": verified })
        ));
    } else {
        let mut text = applier::status::table(&rows);
        if let Some(g) = &groups {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            text.push_str(&g.summary(now));
            text.push('\n');
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        text.push_str(&verified.summary(now));
        text.push('\n');
        crate::print_out(&text);
    }
    Ok(0)
}
