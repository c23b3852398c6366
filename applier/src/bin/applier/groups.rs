//! `applier groups`: the consumer groups whose offsets are committed in the
//! log dir's `__consumer_offsets`, with their lag against the local log end,
//! and, when the group offsets sync runs, the source's committed offset
//! beside each: whether the offset here is the synced one (possibly held at
//! the mirror's end), this destination's own, or not synced.
//! Reads only (no lock): safe while `applier run` or `applier serve` runs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use applier::group_sync::{SyncRecord, SyncedOffset};
use gateway::LogView;
use gateway::groups::Coordinator;
use manifest::groups::OffsetValue;

/// Settings of `groups`.
#[derive(clap::Args)]
pub(crate) struct GroupsArgs {
    /// The log dir.
    #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
    log_dir: PathBuf,
    /// JSON instead of a table (`{"groups": [{"group", "topic", "partition", "offset", "leader_epoch", "log_end_offset", "lag", "metadata", "commit_timestamp", "source_offset", "synced_offset", "synced_at_ms", "sync"}], "sync": {...} | null}`; `sync` is "synced", "clamped" (held at the mirror's log start or end), "local" (committed here) or "not synced").
    #[arg(long)]
    json: bool,
}

type Key = (String, String, i32);

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
    let record = SyncRecord::read(&args.log_dir).unwrap_or_else(|e| {
        eprintln!("applier: warning: {e}");
        None
    });
    let mut source: BTreeMap<Key, OffsetValue> = BTreeMap::new();
    let mut synced: BTreeMap<Key, SyncedOffset> = BTreeMap::new();
    if let Some(r) = &record {
        for g in &r.groups {
            for o in &g.offsets {
                source.insert((g.group.clone(), o.topic.clone(), o.partition), o.clone());
            }
        }
        for s in &r.synced {
            synced.insert((s.group.clone(), s.topic.clone(), s.partition), s.clone());
        }
    }
    let mut local: BTreeMap<Key, gateway::groups::offsets_topic::Committed> = BTreeMap::new();
    for g in coordinator.groups() {
        for (topic, partition, committed) in coordinator.offsets(&g.group_id, None) {
            if let Some(c) = committed {
                local.insert((g.group_id.clone(), topic, partition), c);
            }
        }
    }
    let mut keys: Vec<Key> = local.keys().chain(source.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    let mut rows = Vec::new();
    for key in keys {
        let (group, topic, partition) = &key;
        let here = local.get(&key);
        let src = source.get(&key);
        let sync = synced.get(&key);
        let end = kafkalog::TopicPartition::new(topic, *partition)
            .ok()
            .and_then(|tp| view.info(&tp).ok())
            .map(|i| i.log_end_offset);
        let how = match (here, sync) {
            (None, _) => "not synced",
            (Some(h), Some(s))
                if h.offset == s.offset && h.commit_timestamp == s.commit_timestamp =>
            {
                if src.is_some_and(|o| o.offset != s.offset) {
                    "clamped"
                } else {
                    "synced"
                }
            }
            (Some(_), _) if src.is_some() => "local",
            (Some(_), _) => {
                if record.is_some() {
                    "local"
                } else {
                    "-"
                }
            }
        };
        rows.push(serde_json::json!({
            "group": group,
            "topic": topic,
            "partition": partition,
            "offset": here.map(|c| c.offset),
            "leader_epoch": here.map(|c| c.leader_epoch),
            "log_end_offset": end,
            "lag": here.and_then(|c| end.map(|e| (e - c.offset).max(0))),
            "metadata": here.map(|c| c.metadata.clone()),
            "commit_timestamp": here.map(|c| c.commit_timestamp),
            "source_offset": src.map(|o| o.offset),
            "synced_offset": sync.map(|s| s.offset),
            "synced_at_ms": sync.map(|s| s.synced_at_ms),
            "sync": how,
        }));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    if args.json {
        let sync = record.as_ref().map(|r| {
            serde_json::json!({
                "source_cluster_id": r.source_cluster_id,
                "version": r.version,
                "version_written_at_ms": r.version_written_at_ms,
                "last_success_ms": r.last_success_ms,
                "last_error": r.last_error,
            })
        });
        crate::print_out(&format!(
            "{}\n",
            serde_json::json!({ "groups": rows, "sync": sync })
        ));
        return Ok(0);
    }
    if rows.is_empty() {
        eprintln!(
            "no committed offsets in {} (no __consumer_offsets partition holds one{})",
            args.log_dir.display(),
            if record.is_some() {
                ", and the source's groups have none for this destination"
            } else {
                ", and no group offsets were synced here"
            }
        );
        return Ok(0);
    }
    let mut table = format!(
        "{:<32} {:<32} {:>9} {:>12} {:>12} {:>10} {:>12} {:<10} {:>8}\n",
        "GROUP", "TOPIC", "PARTITION", "OFFSET", "LOG_END", "LAG", "SOURCE", "SYNC", "SYNCED"
    );
    for r in &rows {
        let opt = |v: &serde_json::Value| v.as_i64().map_or("-".to_string(), |n| n.to_string());
        let ago = r["synced_at_ms"].as_i64().map_or("-".to_string(), |t| {
            format!("{}s ago", ((now - t).max(0) + 500) / 1000)
        });
        table.push_str(&format!(
            "{:<32} {:<32} {:>9} {:>12} {:>12} {:>10} {:>12} {:<10} {:>8}\n",
            r["group"].as_str().unwrap_or_default(),
            r["topic"].as_str().unwrap_or_default(),
            opt(&r["partition"]),
            opt(&r["offset"]),
            opt(&r["log_end_offset"]),
            opt(&r["lag"]),
            opt(&r["source_offset"]),
            r["sync"].as_str().unwrap_or_default(),
            ago,
        ));
    }
    if let Some(r) = &record {
        table.push_str(&r.summary(now));
        table.push('\n');
    }
    crate::print_out(&table);
    Ok(0)
}
