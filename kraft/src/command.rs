//! `metadata --log-dir D [--json]`: what the broker's metadata log says,
//! for an operator. The library side of the `kraft metadata` command (and
//! of `kafkalog metadata`, which runs it).
//!
//! One read: `meta.properties` (if present) and a full
//! [`MetadataLogReader::poll`] of `D/__cluster_metadata-0`. The text form
//! lists the metadata position, each topic with its id and configs, each
//! partition with leader, leader epoch, partition epoch, replicas and ISR,
//! the broker and cluster config defaults, deleted topics and everything
//! untrusted. The JSON form holds the same, with stable key names.
//!
//! Exit codes (see [`MetadataReport::exit_code`]): 0 the view is complete;
//! 1 part of it cannot be trusted (a record version this reader does not
//! know, an inconsistency): a finding.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::Result;
use crate::image::MetadataImage;
use crate::meta_properties::{self, MetaProperties};
use crate::reader::{MetadataLogReader, PollReport, SnapshotId, snapshot_file_name};
use crate::records::PartitionRegistration;

/// What `metadata` prints.
#[derive(Debug, Clone)]
pub struct MetadataReport {
    /// The log dir read.
    pub log_dir: PathBuf,
    /// Its `meta.properties`, if present.
    pub meta: Option<MetaProperties>,
    /// The snapshot the image starts from.
    pub snapshot: Option<SnapshotId>,
    /// The next offset the reader would apply.
    pub next_offset: i64,
    /// The reconstructed state.
    pub image: MetadataImage,
    /// What the read did.
    pub read: PollReport,
}

/// Reads `log_dir`'s `meta.properties` and metadata log.
pub fn read_metadata(log_dir: &Path) -> Result<MetadataReport> {
    let meta = meta_properties::read(log_dir)?;
    let mut reader = MetadataLogReader::for_log_dir(log_dir);
    let read = reader.poll()?;
    Ok(MetadataReport {
        log_dir: log_dir.to_path_buf(),
        meta,
        snapshot: reader.snapshot(),
        next_offset: reader.next_offset().unwrap_or(0),
        image: reader.image().cloned().unwrap_or_default(),
        read,
    })
}

fn list(ids: &[i32]) -> String {
    let parts: Vec<String> = ids.iter().map(i32::to_string).collect();
    format!("[{}]", parts.join(","))
}

fn configs_text(configs: &std::collections::BTreeMap<String, String>) -> String {
    let parts: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(" ")
}

fn partition_json(p: &PartitionRegistration, untrusted: Option<&str>) -> Value {
    json!({
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
        "replicas": p.replicas,
        "isr": p.isr,
        "removing_replicas": p.removing_replicas,
        "adding_replicas": p.adding_replicas,
        "directories": p.directories,
        "leader_recovery_state": p.leader_recovery_state,
        "last_leader": p.last_leader,
        "untrusted": untrusted,
    })
}

impl MetadataReport {
    /// 0 when every part of the view can be trusted, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.image.untrusted.is_empty())
    }

    /// The JSON form.
    pub fn to_json(&self) -> Value {
        let image = &self.image;
        let topics: serde_json::Map<String, Value> = image
            .topics
            .iter()
            .map(|(name, topic)| {
                let partitions: serde_json::Map<String, Value> = topic
                    .partitions
                    .iter()
                    .map(|(i, p)| {
                        let why = image
                            .partition_untrusted(name, *i)
                            .map(|u| u.reason.as_str());
                        (i.to_string(), partition_json(p, why))
                    })
                    .collect();
                let configs = image.topic_configs.get(name).cloned().unwrap_or_default();
                (
                    name.clone(),
                    json!({"id": topic.id, "configs": configs, "partitions": partitions}),
                )
            })
            .collect();
        json!({
            "log_dir": self.log_dir,
            "meta_properties": self.meta,
            "snapshot": self.snapshot,
            "applied": image.applied,
            "next_offset": self.next_offset,
            "metadata_version": image.metadata_version(),
            "features": image.features,
            "raft_leader": image.raft_leader,
            "topics": topics,
            "cluster_configs": image.cluster_configs,
            "broker_configs": image.broker_configs,
            "brokers": image.brokers,
            "deleted_topics": image.deleted_topics,
            "open_transaction": image.open_transaction,
            "unknown_records": image.unknown_records,
            "untrusted": image.untrusted,
            "read": self.read,
        })
    }

    /// The text form.
    pub fn to_text(&self) -> String {
        let image = &self.image;
        let mut out = String::new();
        match &self.meta {
            Some(m) => {
                let _ = writeln!(
                    out,
                    "node {} cluster {} directory {}",
                    m.node_id,
                    m.cluster_id.as_deref().unwrap_or("-"),
                    m.directory_id.map_or("-".to_string(), |d| d.to_string())
                );
            }
            None => out.push_str("node - (no meta.properties)\n"),
        }
        let snapshot = self.snapshot.map_or("none".to_string(), snapshot_file_name);
        let applied = image.applied.map_or("nothing".to_string(), |p| {
            format!("offset {} epoch {}", p.offset, p.epoch)
        });
        let mv = image
            .metadata_version()
            .map_or("unset".to_string(), |v| v.to_string());
        let _ = writeln!(
            out,
            "metadata applied up to {applied} (next offset {}; snapshot {snapshot}; metadata.version {mv})",
            self.next_offset
        );
        if let Some(open) = &image.open_transaction {
            let _ = writeln!(
                out,
                "open metadata transaction since offset {} ({} records not applied)",
                open.begin_offset,
                open.records.len()
            );
        }
        for (name, topic) in &image.topics {
            let _ = write!(out, "topic {name} id {}", topic.id);
            if let Some(configs) = image.topic_configs.get(name) {
                let _ = write!(out, " configs {}", configs_text(configs));
            }
            out.push('\n');
            for (i, p) in &topic.partitions {
                let _ = write!(
                    out,
                    "  {name}-{i} leader {} leader-epoch {} partition-epoch {} replicas {} isr {}",
                    p.leader,
                    p.leader_epoch,
                    p.partition_epoch,
                    list(&p.replicas),
                    list(&p.isr)
                );
                if p.leader == -1 && p.last_leader.id != -1 {
                    let _ = write!(
                        out,
                        " last-leader {} (leader-epoch {})",
                        p.last_leader.id, p.last_leader.leader_epoch
                    );
                }
                if !p.directories.is_empty() {
                    let dirs: Vec<String> = p.directories.iter().map(|d| d.to_string()).collect();
                    let _ = write!(out, " directories [{}]", dirs.join(","));
                }
                if let Some(u) = image.partition_untrusted(name, *i) {
                    let _ = write!(out, " UNTRUSTED ({})", u.reason);
                }
                out.push('\n');
            }
        }
        if !image.cluster_configs.is_empty() {
            let _ = writeln!(
                out,
                "cluster defaults {}",
                configs_text(&image.cluster_configs)
            );
        }
        for (id, configs) in &image.broker_configs {
            let _ = writeln!(out, "broker {id} configs {}", configs_text(configs));
        }
        for d in &image.deleted_topics {
            let _ = writeln!(
                out,
                "deleted topic {} id {} at offset {}",
                d.name, d.id, d.offset
            );
        }
        for (key, count) in &image.unknown_records {
            let _ = writeln!(out, "skipped {count} records of unknown apiKey {key}");
        }
        if let Some(at) = self.read.incomplete_tail_at {
            let _ = writeln!(
                out,
                "the last segment ends inside a batch at byte {at} (being written; read next time)"
            );
        }
        if self.read.malformed_control_records > 0 {
            let _ = writeln!(
                out,
                "skipped {} control records that could not be decoded (they change no state)",
                self.read.malformed_control_records
            );
        }
        for u in &image.untrusted {
            let _ = writeln!(
                out,
                "untrusted: {} ({} records, offsets {}..={}): {}",
                serde_json::to_string(&u.scope).unwrap_or_default(),
                u.records,
                u.offset,
                u.last_offset,
                u.reason
            );
        }
        if image.untrusted.is_empty() {
            out.push_str("all records understood\n");
        }
        out
    }
}
