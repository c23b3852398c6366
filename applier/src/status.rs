//! What `applier status` reports, per partition.
//!
//! The durable part comes from each partition's mirror record; the live
//! part (what the source has shipped, lag) from `status.json`, which a
//! running applier rewrites after every cycle in `<log-dir>/.segmirror/`.
//!
//! The JSON form (`applier status --json`) is an object
//! `{"partitions": [PartitionStatus, ...]}`, sorted by topic and partition;
//! fields are only ever added.

use crate::error::{PartitionReadError, in_words};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One partition's status line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionStatus {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Mirror state (`PREPARING`, `MIRRORING`, `PAUSED`, `STOPPING`,
    /// `STOPPED`, `FAILED`).
    pub state: String,
    /// The state before it.
    pub previous_state: Option<String>,
    /// The last error, for FAILED.
    pub last_error: Option<String>,
    /// Whether that error is retried automatically.
    pub retryable: Option<bool>,
    /// Retries so far.
    pub retry_count: u32,
    /// The source cluster mirrored.
    pub source_cluster_id: String,
    /// Local log start offset.
    pub local_log_start_offset: i64,
    /// Local log end offset.
    pub local_log_end_offset: i64,
    /// The source's shipped end offset, when known.
    pub source_shipped_end_offset: Option<i64>,
    /// The source's high watermark, when known.
    pub source_high_watermark: Option<i64>,
    /// Offsets shipped but not yet applied.
    pub lag_offsets: Option<i64>,
    /// Bytes shipped but not yet applied (estimate from the manifest's ranges).
    pub lag_bytes: Option<u64>,
    /// Seconds since the newest shipped data that is not yet applied was
    /// committed at the source (0 when caught up).
    pub lag_seconds: Option<f64>,
    /// The last mirrored epoch, after a stop.
    pub lme: Option<i32>,
    /// Whether producers may write.
    pub writable: bool,
    /// What it waits for in the bucket (replication lag), if anything.
    #[serde(default)]
    pub waiting_for: Option<String>,
    /// Gaps: offsets this mirror never received (from the manifest or seen
    /// here), each with `acknowledged` (`applier gaps ack`); see
    /// `crate::gaps`.
    #[serde(default)]
    pub gaps: Vec<crate::gaps::GapStatus>,
    /// Records of the partition's own at stake (`manifest::cut`): in
    /// PREPARING, what its preparation will cut (as the `start` that
    /// accepted it with `--allow-truncate` planned it); in STOPPED, the
    /// local writes past the stop offset, which a `start` resuming the
    /// same source cuts. `None`: nothing.
    #[serde(default)]
    pub cut: Option<manifest::mirror_record::Cut>,
    /// The source topic configs the mirror copied (its record's,
    /// `crate::topic_configs`): each key's value and source. `None` when
    /// no manifest with configs was applied.
    #[serde(default)]
    pub topic_configs:
        Option<std::collections::BTreeMap<String, manifest::topic_config::ConfigValue>>,
    /// Why a STOPPED mirror's last retention check could not enforce its
    /// configs (`crate::topic_configs::enforce`), as a running applier
    /// reported it; the state is unchanged. `None`: enforced, or not
    /// checked.
    #[serde(default)]
    pub retention_error: Option<String>,
    /// The source deleted the partition (`crate::lifecycle`): its records
    /// are kept here, read-only, and nothing more is applied.
    #[serde(default)]
    pub source_deleted: bool,
    /// When the source deleted it (ms since the epoch: the commit time of
    /// the first manifest version that said so), if it did.
    #[serde(default)]
    pub source_deleted_at_ms: Option<i64>,
}

/// The live part written by a running applier.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveStatus {
    /// When it was written (ms since the epoch).
    pub written_at_ms: i64,
    /// Per partition, keyed `topic-partition`.
    pub partitions: std::collections::BTreeMap<String, LivePartition>,
}

/// The live part of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivePartition {
    /// Shipped end offset at the source.
    pub shipped_end_offset: i64,
    /// Source HW.
    pub source_high_watermark: i64,
    /// Bytes shipped not yet applied.
    pub lag_bytes: u64,
    /// When the source committed the newest manifest (ms).
    pub committed_at_ms: i64,
    /// Local log start offset when written.
    #[serde(default)]
    pub local_log_start_offset: Option<i64>,
    /// Local log end offset when written.
    #[serde(default)]
    pub local_log_end_offset: Option<i64>,
    /// What the partition waits for (an object or manifest not delivered yet).
    #[serde(default)]
    pub waiting: Option<String>,
    /// Refused before adoption (identity), with the reason.
    #[serde(default)]
    pub refused: Option<String>,
    /// The state the daemon holds but could not record (see
    /// [`UnrecordedState`]).
    #[serde(default)]
    pub unrecorded: Option<UnrecordedState>,
    /// Why retention could not be enforced (a STOPPED mirror), if so.
    #[serde(default)]
    pub retention_error: Option<String>,
}

/// A partition state that a running applier holds in memory but that is not
/// in the partition's mirror record: writing the record failed (a full
/// disk, a read-only partition dir), or the partition's files could not be
/// opened at all. `applier status` shows it instead of the record's state,
/// as long as the live status is fresh.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnrecordedState {
    /// The state (`FAILED`, ...).
    pub state: String,
    /// The state before it.
    pub previous_state: Option<String>,
    /// The error of that state.
    pub last_error: Option<String>,
    /// Whether it is retried automatically.
    pub retryable: Option<bool>,
    /// Retries so far.
    pub retry_count: u32,
    /// Why the record does not hold it.
    pub why: String,
}

/// How long a live status is believed (a daemon rewrites it at least every
/// 30 s).
const LIVE_FRESH_MS: i64 = 60_000;

/// Writes the live status (atomically; no fsync: it is rebuilt each cycle).
pub fn write_live(log_dir: &Path, live: &LiveStatus) -> kafkalog::Result<()> {
    let dir = crate::state_dir::state_dir(log_dir);
    std::fs::create_dir_all(&dir).map_err(kafkalog::Error::io("create dir", &dir))?;
    let bytes =
        serde_json::to_vec(live).map_err(|e| kafkalog::Error::InvalidArgument(e.to_string()))?;
    kafkalog::fsutil::write_atomic(&crate::state_dir::live_status_path(log_dir), &bytes, false)
}

/// Reads the live status (empty when absent or unreadable).
pub fn read_live(log_dir: &Path) -> LiveStatus {
    let path = crate::state_dir::live_status_path(log_dir);
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Collects the status of every mirror partition in `log_dir`, reading only
/// (no lock: safe while the daemon runs).
pub fn collect(log_dir: &Path) -> Result<Vec<PartitionStatus>, kafkalog::Error> {
    let live = read_live(log_dir);
    let now = crate::clock::now_ms();
    let fresh = now - live.written_at_ms < LIVE_FRESH_MS;
    let mut out = Vec::new();
    for tp in kafkalog::reader::list_partitions(log_dir)? {
        let key = tp.to_string();
        let l = live.partitions.get(&key);
        // One partition that cannot be read is reported as such; the others
        // are still listed.
        let read = kafkalog::reader::PartitionReader::open(log_dir, &tp)
            .map_err(PartitionReadError::from)
            .and_then(|reader| {
                let record = partdir::record::read(reader.dir())?;
                Ok((reader, record))
            });
        let (reader, record) = match read {
            Ok(x) => x,
            Err(e) => {
                let mut row = unreadable_row(&tp, &in_words(&e));
                if let Some(u) = l.and_then(|l| l.unrecorded.as_ref()).filter(|_| fresh) {
                    overlay(&mut row, u);
                }
                out.push(row);
                continue;
            }
        };
        let Some(record) = record else {
            if let Some(reason) = l.and_then(|l| l.refused.clone()) {
                // A plain partition left as it was: its bounds are its files'.
                let (start, end) = log_bounds(&reader).unwrap_or((0, 0));
                out.push(PartitionStatus {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    state: "FAILED".into(),
                    previous_state: None,
                    last_error: Some(reason),
                    retryable: Some(false),
                    retry_count: 0,
                    source_cluster_id: String::new(),
                    local_log_start_offset: start,
                    local_log_end_offset: end,
                    source_shipped_end_offset: l.map(|l| l.shipped_end_offset),
                    source_high_watermark: l.map(|l| l.source_high_watermark),
                    lag_offsets: None,
                    lag_bytes: None,
                    lag_seconds: None,
                    lme: None,
                    writable: true,
                    waiting_for: None,
                    gaps: Vec::new(),
                    cut: None,
                    topic_configs: None,
                    retention_error: None,
                    source_deleted: false,
                    source_deleted_at_ms: None,
                });
            }
            continue;
        };
        // A running daemon's numbers are fresh (and cheap); otherwise read
        // the log's files. A STOPPED partition's always come from its files:
        // producers write it between the daemon's cycles, or with no daemon.
        let stopped = record.state.state() == manifest::state::PartitionState::Stopped;
        let bounds = match l.and_then(|l| l.local_log_start_offset.zip(l.local_log_end_offset)) {
            Some(bounds) if fresh && !stopped => Ok(bounds),
            _ => log_bounds(&reader),
        };
        let mut r = match bounds {
            Ok((start, end)) => row(&tp, &record, l, start, end, now),
            Err(e) => {
                let mut r = row(&tp, &record, l, 0, 0, now);
                r.last_error = Some(format!("cannot read the local log: {}", in_words(&e)));
                r
            }
        };
        if fresh {
            r.retention_error = l.and_then(|l| l.retention_error.clone());
        }
        if let Some(u) = l.and_then(|l| l.unrecorded.as_ref()).filter(|_| fresh) {
            // Newer than the record: the daemon could not write it.
            if live.written_at_ms >= record.updated_at_ms {
                overlay(&mut r, u);
            }
        }
        out.push(r);
    }
    annotate_gaps(log_dir, &mut out);
    Ok(out)
}

/// Shows a state the daemon could not record instead of the record's.
fn overlay(r: &mut PartitionStatus, u: &UnrecordedState) {
    r.state.clone_from(&u.state);
    r.previous_state.clone_from(&u.previous_state);
    r.last_error = Some(match &u.last_error {
        Some(e) => format!("{e} (not recorded: {})", u.why),
        None => format!("not recorded: {}", u.why),
    });
    r.retryable = u.retryable;
    r.retry_count = u.retry_count;
    r.writable = u.state == manifest::state::PartitionState::Stopped.as_str();
}

/// The row of a mirror partition that a running applier cannot open.
pub fn unopened_row(tp: &kafkalog::TopicPartition, error: &str) -> PartitionStatus {
    PartitionStatus {
        state: manifest::state::PartitionState::Failed.as_str().to_string(),
        retryable: Some(true),
        ..unreadable_row(tp, error)
    }
}

/// The row of a partition whose files or record cannot be read.
fn unreadable_row(tp: &kafkalog::TopicPartition, error: &str) -> PartitionStatus {
    PartitionStatus {
        topic: tp.topic.clone(),
        partition: tp.partition,
        state: "UNKNOWN".into(),
        previous_state: None,
        last_error: Some(error.to_string()),
        retryable: None,
        retry_count: 0,
        source_cluster_id: String::new(),
        local_log_start_offset: 0,
        local_log_end_offset: 0,
        source_shipped_end_offset: None,
        source_high_watermark: None,
        lag_offsets: None,
        lag_bytes: None,
        lag_seconds: None,
        lme: None,
        writable: false,
        waiting_for: None,
        gaps: Vec::new(),
        cut: None,
        topic_configs: None,
        retention_error: None,
        source_deleted: false,
        source_deleted_at_ms: None,
    }
}

/// One mirror partition's status from its record, the live numbers (when
/// known) and its log bounds.
pub fn row(
    tp: &kafkalog::TopicPartition,
    record: &manifest::mirror_record::MirrorRecord,
    l: Option<&LivePartition>,
    start: i64,
    end: i64,
    now: i64,
) -> PartitionStatus {
    let state = record.state.state();
    let lag_offsets = l.map(|l| (l.shipped_end_offset - end).max(0));
    let caught_up = lag_offsets == Some(0);
    PartitionStatus {
        topic: tp.topic.clone(),
        partition: tp.partition,
        state: state.as_str().to_string(),
        previous_state: record.state.previous().map(|s| s.as_str().to_string()),
        last_error: record.state.failure().map(|f| f.message.clone()),
        retryable: record.state.failure().map(|f| f.retryable),
        retry_count: record.state.retries(),
        source_cluster_id: record.source_cluster_id.clone(),
        local_log_start_offset: start,
        local_log_end_offset: end,
        source_shipped_end_offset: l.map(|l| l.shipped_end_offset),
        source_high_watermark: l.map(|l| l.source_high_watermark),
        lag_offsets,
        lag_bytes: l.map(|l| if caught_up { 0 } else { l.lag_bytes }),
        lag_seconds: l.map(|l| {
            if caught_up {
                0.0
            } else {
                ((now - l.committed_at_ms).max(0) as f64) / 1000.0
            }
        }),
        lme: record.lme,
        writable: manifest::state::is_writable(state),
        waiting_for: l.and_then(|l| l.waiting.clone()),
        gaps: Vec::new(),
        cut: cut_at_stake(record, start, end),
        topic_configs: record.topic_configs.clone(),
        retention_error: None,
        source_deleted: record.source_deleted_at_ms.is_some(),
        source_deleted_at_ms: record.source_deleted_at_ms,
    }
}

/// What of the partition's own records is at stake (see
/// [`PartitionStatus::cut`]), from its record and log bounds.
pub fn cut_at_stake(
    record: &manifest::mirror_record::MirrorRecord,
    start: i64,
    end: i64,
) -> Option<manifest::mirror_record::Cut> {
    use manifest::state::PartitionState;
    match record.state.state() {
        PartitionState::Preparing => record.pending_cut,
        PartitionState::Stopped => record
            .stopped_at_offset
            .map(|at| at.max(start))
            .filter(|&first| first < end)
            .map(|first| manifest::mirror_record::Cut {
                first_offset: first,
                last_offset: end - 1,
            }),
        _ => None,
    }
}

/// Log start and end of a partition, from its files.
fn log_bounds(reader: &kafkalog::reader::PartitionReader) -> Result<(i64, i64), kafkalog::Error> {
    let segments = reader.segments()?;
    let start = segments.first().map_or(0, |s| s.base_offset);
    let last_base = segments.last().map_or(0, |s| s.base_offset);
    let end =
        reader.for_each_batch(last_base, false, |_, _| std::ops::ControlFlow::Continue(()))?;
    Ok((start, end.max(last_base)))
}

/// Renders the table `applier status` prints.
pub fn table(rows: &[PartitionStatus]) -> String {
    let mut out = format!(
        "{:<32} {:<10} {:>12} {:>12} {:>10} {:>12} {:>8} {:>5} {:<12} {:<16} {}\n",
        "PARTITION",
        "STATE",
        "LOCAL_LEO",
        "SHIPPED_END",
        "LAG",
        "LAG_BYTES",
        "LAG_S",
        "LME",
        "GAPS",
        "CUT",
        "LAST_ERROR"
    );
    for r in rows {
        let opt = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
        out.push_str(&format!(
            "{:<32} {:<10} {:>12} {:>12} {:>10} {:>12} {:>8} {:>5} {:<12} {:<16} {}\n",
            format!("{}-{}", r.topic, r.partition),
            r.state,
            r.local_log_end_offset,
            opt(r.source_shipped_end_offset),
            opt(r.lag_offsets),
            r.lag_bytes.map_or("-".to_string(), |v| v.to_string()),
            r.lag_seconds.map_or("-".to_string(), |v| format!("{v:.1}")),
            r.lme.map_or("-".to_string(), |v| v.to_string()),
            crate::gaps::cell(&r.gaps),
            cut_cell(r.cut.as_ref()),
            error_cell(r)
        ));
    }
    out.push_str(&topic_configs_note(rows));
    out.push_str(&source_deleted_note(rows));
    out
}

/// The LAST_ERROR column: the state's error, else why retention is not
/// enforced.
fn error_cell(r: &PartitionStatus) -> String {
    match (&r.last_error, &r.retention_error) {
        (Some(e), _) => e.clone(),
        (None, Some(e)) => format!("retention not enforced: {e}"),
        (None, None) => String::new(),
    }
}

/// The CUT column: `-`, or the offsets at stake and how many
/// (`1200-1202 (3)`).
fn cut_cell(cut: Option<&manifest::mirror_record::Cut>) -> String {
    cut.map_or_else(
        || "-".to_string(),
        |c| format!("{}-{} ({})", c.first_offset, c.last_offset, c.offsets()),
    )
}

/// Fills each status row's `gaps` from the files (a damaged file is
/// reported in the rows' errors rather than hidden).
pub fn annotate_gaps(log_dir: &Path, rows: &mut [PartitionStatus]) {
    match crate::gaps::statuses(log_dir) {
        Ok(mut all) => {
            for r in rows.iter_mut() {
                if let Some(g) = all.remove(&format!("{}-{}", r.topic, r.partition)) {
                    r.gaps = g;
                }
            }
        }
        Err(e) => {
            for r in rows.iter_mut() {
                r.last_error = Some(match &r.last_error {
                    Some(prev) => format!("{prev}; gaps unknown: {e:#}"),
                    None => format!("gaps unknown: {e:#}"),
                });
            }
        }
    }
}

/// One line per gap not acknowledged here, naming the partition and the
/// offsets (what `applier once` prints before exiting 1).
pub fn open_gap_lines(rows: &[PartitionStatus], log_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        for g in r.gaps.iter().filter(|g| g.is_open()) {
            out.push(format!(
                "GAP {}-{}: offsets {} never reached the mirror ({}); acknowledge: applier gaps ack --log-dir {} --topic {} --partition {} --offsets {}",
                r.topic,
                r.partition,
                g.gap.gap.offsets_text(),
                g.gap.gap,
                log_dir.display(),
                r.topic,
                r.partition,
                g.gap.gap.offsets_text()
            ));
        }
    }
    out
}

/// The lines `applier status` prints under its table: each partition's
/// copied configs (`key=value`, sorted), one line per partition that has
/// The lines `applier status` prints under its table for the partitions
/// whose source was deleted.
pub fn source_deleted_note(rows: &[PartitionStatus]) -> String {
    let mut out = String::new();
    for r in rows {
        let Some(at) = r.source_deleted_at_ms else {
            continue;
        };
        let when = u64::try_from(at)
            .ok()
            .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
            .map_or_else(
                || at.to_string(),
                |t| humantime::format_rfc3339_seconds(t).to_string(),
            );
        out.push_str(&format!(
            "{}-{} source deleted at {when}: its records are kept here, read-only, and nothing more is applied (`applier stop` makes it a writable topic; remove the partition dir to drop it)\n",
            r.topic, r.partition
        ));
    }
    out
}

/// any recorded.
fn topic_configs_note(rows: &[PartitionStatus]) -> String {
    let mut out = String::new();
    for r in rows {
        let Some(c) = &r.topic_configs else { continue };
        let kv: Vec<String> = c.iter().map(|(k, v)| format!("{k}={}", v.value)).collect();
        let shown = if kv.is_empty() {
            "(all at Kafka's defaults)".to_string()
        } else {
            kv.join(" ")
        };
        out.push_str(&format!(
            "{}-{} topic configs: {shown}\n",
            r.topic, r.partition
        ));
    }
    out
}
