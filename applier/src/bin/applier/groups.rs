//! `applier groups`: the consumer groups whose offsets are committed in the
//! log dir's `__consumer_offsets`, with their lag against the local log end.
//! Reads only (no lock): safe while `applier run` or `applier serve` runs.

use std::path::PathBuf;

use gateway::LogView;
use gateway::groups::Coordinator;

/// Settings of `groups`.
#[derive(clap::Args)]
pub(crate) struct GroupsArgs {
    /// The log dir.
    #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
    log_dir: PathBuf,
    /// JSON instead of a table (`{"groups": [{"group", "topic", "partition", "offset", "leader_epoch", "log_end_offset", "lag", "metadata", "commit_timestamp"}]}`).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: GroupsArgs) -> anyhow::Result<u8> {
    if !args.log_dir.is_dir() {
        eprintln!(
            "applier: log dir {} does not exist: no groups to list",
            args.log_dir.display()
        );
        return Ok(2);
    }
    let view = LogView::new(&args.log_dir);
    let coordinator = Coordinator::load(&view, None);
    let mut rows = Vec::new();
    for g in coordinator.groups() {
        for (topic, partition, committed) in coordinator.offsets(&g.group_id, None) {
            let Some(c) = committed else { continue };
            let end = kafkalog::TopicPartition::new(&topic, partition)
                .ok()
                .and_then(|tp| view.info(&tp).ok())
                .map(|i| i.log_end_offset);
            rows.push(serde_json::json!({
                "group": g.group_id,
                "topic": topic,
                "partition": partition,
                "offset": c.offset,
                "leader_epoch": c.leader_epoch,
                "log_end_offset": end,
                "lag": end.map(|e| (e - c.offset).max(0)),
                "metadata": c.metadata,
                "commit_timestamp": c.commit_timestamp,
            }));
        }
    }
    if args.json {
        crate::print_out(&format!("{}\n", serde_json::json!({ "groups": rows })));
        return Ok(0);
    }
    if rows.is_empty() {
        eprintln!(
            "no committed offsets in {} (no __consumer_offsets partition holds one)",
            args.log_dir.display()
        );
        return Ok(0);
    }
    let mut table = format!(
        "{:<32} {:<32} {:>9} {:>12} {:>12} {:>10}\n",
        "GROUP", "TOPIC", "PARTITION", "OFFSET", "LOG_END", "LAG"
    );
    for r in &rows {
        let opt = |v: &serde_json::Value| v.as_i64().map_or("-".to_string(), |n| n.to_string());
        table.push_str(&format!(
            "{:<32} {:<32} {:>9} {:>12} {:>12} {:>10}\n",
            r["group"].as_str().unwrap_or_default(),
            r["topic"].as_str().unwrap_or_default(),
            opt(&r["partition"]),
            opt(&r["offset"]),
            opt(&r["log_end_offset"]),
            opt(&r["lag"]),
        ));
    }
    crate::print_out(&table);
    Ok(0)
}
