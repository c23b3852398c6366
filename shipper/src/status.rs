//! What `shipper status` reports: every partition of a source cluster as
//! the bucket's change feed describes it (one LIST and a GET or two; no
//! manifest is read, no source file is needed).

use bucket::store::{ManifestStore, StoreError};
use serde::Serialize;

/// One partition's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionLine {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Topic id.
    pub topic_id: String,
    /// Latest manifest version.
    pub manifest_version: u64,
    /// Offset after the last shipped batch.
    pub shipped_end_offset: i64,
    /// The source's high watermark when that version was committed.
    pub source_high_watermark: i64,
    /// `source_high_watermark - shipped_end_offset` (never negative).
    pub lag_offsets: i64,
    /// The source's log start offset.
    pub log_start_offset: i64,
    /// When the version was committed (ms since the epoch).
    pub committed_at_ms: i64,
    /// The source partition was deleted.
    pub deleted: bool,
    /// Gaps recorded in the manifest (offsets lost before they were
    /// shipped), each with `acknowledged_at_ms` (`shipper gaps ack`).
    pub gaps: Vec<manifest::gaps::Gap>,
}

/// The state of a source cluster in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BucketStatus {
    /// Source cluster id.
    pub cluster_id: String,
    /// Newest head's sequence number.
    pub head_seq: u64,
    /// When it was written (ms since the epoch).
    pub head_written_at_ms: i64,
    /// Which shipper wrote it.
    pub head_writer: String,
    /// Every partition, sorted.
    pub partitions: Vec<PartitionLine>,
    /// Each shipper's request rate and its monthly cost, as it last
    /// measured them (carried by the heads it writes), by shipper id.
    pub costs: std::collections::BTreeMap<String, manifest::feed::WriterCost>,
}

/// Reads the newest head; `None` when nothing was ever shipped.
pub async fn bucket_status(store: &ManifestStore) -> Result<Option<BucketStatus>, StoreError> {
    let Some(head) = store.latest_head(None).await? else {
        return Ok(None);
    };
    let mut partitions: Vec<PartitionLine> = head
        .partitions
        .values()
        .map(|e| PartitionLine {
            topic: e.topic.clone(),
            partition: e.partition,
            topic_id: e.topic_id.to_string(),
            manifest_version: e.manifest_version,
            shipped_end_offset: e.shipped_end_offset,
            source_high_watermark: e.source_high_watermark,
            lag_offsets: (e.source_high_watermark - e.shipped_end_offset).max(0),
            log_start_offset: e.log_start_offset,
            committed_at_ms: e.committed_at_ms,
            deleted: e.deleted,
            gaps: e.gaps.clone(),
        })
        .collect();
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(Some(BucketStatus {
        cluster_id: head.source_cluster_id,
        head_seq: head.seq,
        head_written_at_ms: head.written_at_ms,
        head_writer: head.writer,
        costs: head.costs,
        partitions,
    }))
}

fn ago(now_ms: i64, then_ms: i64) -> String {
    let s = ((now_ms - then_ms).max(0) / 1000) as u64;
    match s {
        0..=119 => format!("{s}s ago"),
        120..=7199 => format!("{}m ago", s / 60),
        7200..=172_799 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// A plain-text table of `status`.
pub fn render_table(status: &BucketStatus, now_ms: i64) -> String {
    let mut rows: Vec<[String; 8]> = vec![[
        "PARTITION".into(),
        "VERSION".into(),
        "SHIPPED END".into(),
        "SOURCE HW".into(),
        "LAG".into(),
        "UPDATED".into(),
        "TOPIC ID".into(),
        "GAPS".into(),
    ]];
    for p in &status.partitions {
        rows.push([
            format!(
                "{}-{}{}",
                p.topic,
                p.partition,
                if p.deleted { " (deleted)" } else { "" }
            ),
            p.manifest_version.to_string(),
            p.shipped_end_offset.to_string(),
            p.source_high_watermark.to_string(),
            p.lag_offsets.to_string(),
            ago(now_ms, p.committed_at_ms),
            p.topic_id.clone(),
            manifest::gaps::cell(p.gaps.iter().map(|g| (g, g.acknowledged_at_ms.is_some()))),
        ]);
    }
    let mut widths = [0usize; 8];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = format!(
        "cluster {}: {} partitions, head {} written {} by {}\n",
        status.cluster_id,
        status.partitions.len(),
        status.head_seq,
        ago(now_ms, status.head_written_at_ms),
        status.head_writer
    );
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(widths.iter())
            .enumerate()
            .map(|(i, (c, w))| {
                if (1..=4).contains(&i) {
                    format!("{c:>w$}")
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for (writer, c) in &status.costs {
        out.push_str(&format!(
            "requests of {writer} over {}s (measured {}): {:.2} writes/s, {:.2} reads/s, ${:.2} a month at {} prices\n",
            c.window_s,
            ago(now_ms, c.measured_at_ms),
            c.writes_per_hour as f64 / 3600.0,
            c.reads_per_hour as f64 / 3600.0,
            c.cents_per_month as f64 / 100.0,
            c.prices
        ));
    }
    out
}
