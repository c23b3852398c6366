//! `backfill export`: a source cluster's shipped records, read from the
//! bucket, written as Parquet files under an output URL.
//!
//! Per partition (partitions run concurrently, up to `concurrency`):
//! 1. read the newest manifest version the change feed names, and its
//!    pages, and plan the files ([`crate::plan`]);
//! 2. for each file in offset order: keep it when a complete file with the
//!    same content description is already at its key (resume; see
//!    [`UNIT_KEY`]); else download its objects one by one, check each
//!    against its manifest entry (size, CRC-32C, batch headers:
//!    `manifest::range_check::verify_object`, the applier's check) and
//!    every batch's CRC, and observe its batches' transactions
//!    ([`crate::txn`]);
//! 3. encode an object into its file as soon as every batch of it is
//!    decided (below the last stable offset): the file is opened at its
//!    first object and completed after its last. Objects waiting for a
//!    marker are held, within `pending_memory` bytes (beyond, they are
//!    dropped and fetched again when their turn comes). After the window,
//!    later ranges are read only while an object still waits;
//! 4. at the shipped end, what still waits is cut at the shipped LSO
//!    (read_committed): the file being written, named for its whole
//!    segment, is dropped and written again under the cut's name; what
//!    lies above is left for a later export, and the partition's entry
//!    says so ([`crate::run_manifest::Clamp`]);
//! 5. remove older files of the partition whose offsets overlap what this
//!    run covered under other names (left by a run whose file boundaries
//!    differed, e.g. before a compaction), so no row is ever listed twice.
//!
//! Invariants:
//! - A file appears only whole: its upload (one PUT, or a multipart upload
//!   above 10 MiB) is completed after its last row, and aborted on any
//!   failure, so a corrupt object (its key, batch offset and file named)
//!   leaves nothing of the file it feeds.
//! - The output is a pure function of the bucket's data and the request:
//!   file names come from source segment offsets, rows are in offset
//!   order and handed to the encoder at the same points whatever was held
//!   or fetched again, and Parquet is written with fixed properties and no
//!   clock, so a re-run writes byte-identical files.
//! - The run manifest is written last, and only when every partition
//!   succeeded.
//! - Memory, per partition: the objects waiting for a marker (at most
//!   `pending_memory`, plus the object being observed), one Parquet row
//!   group being encoded (at most [`ROW_GROUP_BYTES`]) and one Arrow batch
//!   being built (about [`ARROW_BATCH_BYTES`]); with no open transaction,
//!   one object at a time.

// `ExportError` carries the stores' errors by value; it is built only on the
// failure path, where its size costs nothing measurable.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use bucket::store::{ManifestStore, StoreError};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use kafkalog::TopicPartition;
use kafkalog::batch::BatchIter;
use kafkalog::records::{decode_control_batch, decode_records};
use manifest::feed::HeadEntry;
use manifest::layout::PartitionKey;
use manifest::partition::{PartitionManifest, ShippedRange};
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::AsyncArrowWriter;
use parquet::arrow::async_writer::AsyncFileWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{KeyValue, ParquetMetaDataReader, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use regex::Regex;

use crate::error::ExportError;
use crate::layout;
use crate::plan::{Unit, Window, plan_partition};
use crate::progress::Progress;
use crate::run_manifest::{Clamp, FileEntry, PartitionEntry, RunManifest, SourceObject};
use crate::schema::{OFFSET_COLUMN, RowsBuilder, record_timestamp, schema};
use crate::select::{PartitionList, Shard};
use crate::txn::{BatchFacts, Decision, Isolation, TxnTracker};

/// The zstd level of every file (3: zstd's own default, a good ratio at
/// several hundred MB/s).
pub const ZSTD_LEVEL: i32 = 3;
/// Largest encoded row group (bytes), then a new one starts.
pub const ROW_GROUP_BYTES: usize = 128 * 1024 * 1024;
/// Most rows in a row group.
pub const ROW_GROUP_ROWS: usize = 1024 * 1024;
/// Record data collected before it is handed to the Parquet encoder.
pub const ARROW_BATCH_BYTES: usize = 16 * 1024 * 1024;
/// Rows collected before they are handed to the Parquet encoder.
pub const ARROW_BATCH_ROWS: usize = 64 * 1024;

/// The key-value metadata entry that describes a file's content: the
/// schema version, the isolation level, the time bounds, the offsets
/// covered and the source objects with their CRC-32C. A file whose entry
/// equals the one a run would write holds exactly the rows that run would
/// write, so the run keeps it (resume).
pub const UNIT_KEY: &str = "segmirror.unit";

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// The source cluster id.
    pub source_cluster_id: String,
    /// Topics exported: a regex on the whole name.
    pub topics: Regex,
    /// Topics never exported.
    pub exclude: Option<Regex>,
    /// Only these partition numbers.
    pub partitions: Option<PartitionList>,
    /// Offsets and timestamps wanted.
    pub window: Window,
    /// read_committed or read_uncommitted.
    pub isolation: Isolation,
    /// This run's shard.
    pub shard: Shard,
    /// Rewrite files even when a complete one is at their key.
    pub rewrite: bool,
    /// Partitions exported at once.
    pub concurrency: usize,
    /// Bytes of objects a partition holds while its files wait for
    /// transaction markers.
    pub pending_memory: u64,
}

/// Where the export reads and writes.
#[derive(Clone)]
pub struct Exporter {
    source: ManifestStore,
    source_prefix: String,
    out: Arc<dyn ObjectStore>,
    out_prefix: String,
    opts: Arc<ExportOptions>,
    progress: Arc<dyn Progress>,
    /// The files the last run manifest of this shard lists, by key.
    previous: Arc<std::collections::BTreeMap<String, FileEntry>>,
}

/// What the selection found, when it selects nothing.
#[derive(Debug, Clone)]
pub enum NothingSelected {
    /// The bucket holds no cluster of that id (the inventory line says
    /// which it holds).
    UnknownCluster(String),
    /// The cluster has shipped nothing yet.
    NothingShipped(String),
    /// No live partition matches the topics and partitions asked for.
    NoMatch(String),
}

impl std::fmt::Display for NothingSelected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NothingSelected::UnknownCluster(s)
            | NothingSelected::NothingShipped(s)
            | NothingSelected::NoMatch(s) => f.write_str(s),
        }
    }
}

/// What one partition's export did.
#[derive(Debug, Clone)]
pub struct PartitionReport {
    /// Its run manifest entry.
    pub entry: PartitionEntry,
    /// Files written by this run.
    pub written: u32,
    /// Bytes of the files written by this run (those kept are not counted).
    pub bytes_written: u64,
    /// Complete files kept from an earlier run.
    pub reused: u32,
    /// Files of an earlier run removed (overlapping under other names).
    pub removed: Vec<String>,
    /// Object bytes downloaded.
    pub bytes_read: u64,
    /// The smallest and largest record timestamp and offset seen in the
    /// objects read, for saying what a window missed.
    pub seen: Option<Seen>,
}

/// Bounds of the records seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Smallest offset.
    pub min_offset: i64,
    /// Largest offset.
    pub max_offset: i64,
    /// Smallest timestamp (ms).
    pub min_timestamp_ms: i64,
    /// Largest timestamp (ms).
    pub max_timestamp_ms: i64,
}

impl Seen {
    fn add(this: &mut Option<Seen>, offset: i64, ts: i64) {
        let s = this.get_or_insert(Seen {
            min_offset: offset,
            max_offset: offset,
            min_timestamp_ms: ts,
            max_timestamp_ms: ts,
        });
        s.min_offset = s.min_offset.min(offset);
        s.max_offset = s.max_offset.max(offset);
        s.min_timestamp_ms = s.min_timestamp_ms.min(ts);
        s.max_timestamp_ms = s.max_timestamp_ms.max(ts);
    }

    fn merge(this: &mut Option<Seen>, other: Option<Seen>) {
        if let Some(o) = other {
            Seen::add(this, o.min_offset, o.min_timestamp_ms);
            Seen::add(this, o.max_offset, o.max_timestamp_ms);
        }
    }
}

/// What a run did.
#[derive(Debug)]
pub struct Summary {
    /// Live partitions the topics/partitions selection matched (all shards).
    pub selected: usize,
    /// The partitions of this shard that succeeded.
    pub partitions: Vec<PartitionReport>,
    /// The partitions that failed, with why.
    pub failures: Vec<(TopicPartition, ExportError)>,
    /// The run manifest's key, when it was written.
    pub manifest_key: Option<String>,
}

impl Summary {
    /// Rows in the files listed.
    pub fn rows(&self) -> u64 {
        self.files().map(|f| f.rows).sum()
    }

    /// Files listed.
    pub fn files(&self) -> impl Iterator<Item = &FileEntry> {
        self.partitions.iter().flat_map(|p| p.entry.files.iter())
    }

    /// The records seen over all partitions.
    pub fn seen(&self) -> Option<Seen> {
        let mut all = None;
        for p in &self.partitions {
            Seen::merge(&mut all, p.seen);
        }
        all
    }
}

/// One partition's work in progress.
struct PartitionWork {
    report: PartitionReport,
    /// Keys of the files this run lists.
    kept: BTreeSet<String>,
    tracker: TxnTracker,
    /// Objects downloaded, verified and observed, not yet encoded, in
    /// offset order.
    queue: VecDeque<Queued>,
    /// Bytes the queue holds.
    queued_bytes: u64,
    /// The file being written, with its unit's index.
    open: Option<(usize, FileInProgress)>,
    /// Per unit: already found not complete at its key.
    checked: Vec<bool>,
}

/// An object waiting for its batches to be decided; its bytes are dropped
/// beyond the memory bound and fetched again when its turn comes.
struct Queued {
    unit: usize,
    range: usize,
    bytes: Option<Bytes>,
}

/// A file being written: its unit, the rows collected and not yet handed
/// over, and the Parquet writer (created at the first row); or the
/// complete file of an earlier run that stands for it.
struct FileInProgress {
    unit: Unit,
    key: String,
    rows: RowsBuilder,
    writer: Option<AsyncArrowWriter<Counted>>,
    total: u64,
    stats: Option<Seen>,
    keep: Option<FileEntry>,
}

/// Drops a file being written: its upload is never completed, so nothing
/// of it appears at its key.
async fn abort_file(f: FileInProgress) {
    if let Some(w) = f.writer {
        let _ = w.into_inner().inner.abort().await;
    }
}

impl Exporter {
    /// An exporter reading `source_store` (under `source_prefix`) and
    /// writing `out` (under `out_prefix`).
    pub fn new(
        source_store: Arc<dyn ObjectStore>,
        source_prefix: &str,
        out: Arc<dyn ObjectStore>,
        out_prefix: &str,
        opts: ExportOptions,
        progress: Arc<dyn Progress>,
    ) -> Result<Exporter, String> {
        let cluster = manifest::layout::ClusterLayout::new(source_prefix, &opts.source_cluster_id)
            .map_err(|e| e.to_string())?;
        Ok(Exporter {
            source: ManifestStore::new(source_store, cluster),
            source_prefix: source_prefix.to_string(),
            out,
            out_prefix: out_prefix.trim_matches('/').to_string(),
            opts: Arc::new(opts),
            progress,
            previous: Arc::default(),
        })
    }

    /// The source store (for naming the bucket in messages).
    pub fn source(&self) -> &ManifestStore {
        &self.source
    }

    /// The live partitions of the newest head the selection matches
    /// (before sharding), sorted; or why there are none.
    pub async fn select(&self) -> Result<Result<Vec<HeadEntry>, NothingSelected>, ExportError> {
        select(
            &self.source,
            &self.source_prefix,
            &self.opts.topics,
            self.opts.exclude.as_ref(),
            self.opts.partitions.as_ref(),
        )
        .await
    }

    /// Exports `selected` (from [`Exporter::select`]): this shard's
    /// partitions, then the run manifest when all succeeded.
    pub async fn run(&self, selected: Vec<HeadEntry>) -> Result<Summary, ExportError> {
        let mut this = self.clone();
        this.previous = Arc::new(self.previous_files().await);
        this.run_loaded(selected).await
    }

    /// The files the last run manifest of this shard lists (none when it
    /// is absent or unreadable: they are then checked by reading them).
    async fn previous_files(&self) -> std::collections::BTreeMap<String, FileEntry> {
        let key = layout::run_manifest_key(&self.out_prefix, self.opts.shard);
        let Ok(got) = self.out.get(&ObjectPath::from(key.as_str())).await else {
            return Default::default();
        };
        let Ok(bytes) = got.bytes().await else {
            return Default::default();
        };
        serde_json::from_slice::<RunManifest>(&bytes)
            .map(|m| {
                m.partitions
                    .into_iter()
                    .flat_map(|p| p.files)
                    .map(|f| (f.key.clone(), f))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn run_loaded(&self, selected: Vec<HeadEntry>) -> Result<Summary, ExportError> {
        let total = selected.len();
        let mine: Vec<HeadEntry> = selected
            .into_iter()
            .filter(|e| self.opts.shard.owns(&e.topic, e.partition))
            .collect();
        let concurrency = self.opts.concurrency.max(1);
        let mut results = futures::stream::iter(mine.into_iter().map(|entry| {
            let this = self.clone();
            let tp = TopicPartition::new(&entry.topic, entry.partition);
            async move {
                let tp = tp.map_err(|e| ExportError::Internal(e.to_string()))?;
                let task_tp = tp.clone();
                let joined =
                    tokio::spawn(async move { this.export_partition(&task_tp, &entry).await })
                        .await;
                match joined {
                    Ok(r) => Ok((tp, r)),
                    Err(e) => Err(ExportError::Internal(format!("{tp}: task failed: {e}"))),
                }
            }
        }))
        .buffer_unordered(concurrency);
        let mut summary = Summary {
            selected: total,
            partitions: Vec::new(),
            failures: Vec::new(),
            manifest_key: None,
        };
        while let Some(item) = results.next().await {
            match item? {
                (_, Ok(report)) => summary.partitions.push(report),
                (tp, Err(e)) => {
                    tracing::error!(partition = %tp, "{}", bucket::diagnosis::one_line(&e));
                    summary.failures.push((tp, e));
                }
            }
        }
        drop(results);
        summary.partitions.sort_by(|a, b| {
            (&a.entry.topic, a.entry.partition).cmp(&(&b.entry.topic, b.entry.partition))
        });
        if summary.failures.is_empty() {
            let manifest = RunManifest::new(
                &self.opts.source_cluster_id,
                self.opts.shard,
                self.opts.isolation,
                &self.opts.window,
                summary.partitions.iter().map(|p| p.entry.clone()).collect(),
            );
            let key = layout::run_manifest_key(&self.out_prefix, self.opts.shard);
            let mut bytes = serde_json::to_vec_pretty(&manifest)
                .map_err(|e| ExportError::Internal(format!("encoding {key}: {e}")))?;
            bytes.push(b'\n');
            self.out
                .put(&ObjectPath::from(key.as_str()), Bytes::from(bytes).into())
                .await
                .map_err(|source| ExportError::Output {
                    key: key.clone(),
                    source,
                })?;
            summary.manifest_key = Some(key);
        }
        self.progress.finish();
        Ok(summary)
    }

    /// All ranges of `m` from `offset` on (pages first, then inline).
    async fn ranges_from(
        &self,
        tp: &TopicPartition,
        m: &PartitionManifest,
        offset: i64,
    ) -> Result<Vec<ShippedRange>, ExportError> {
        let mut ranges = Vec::new();
        for page in m.pages_from(offset) {
            let page =
                self.source
                    .get_page(&page.key)
                    .await
                    .map_err(|source| ExportError::Partition {
                        tp: tp.clone(),
                        source,
                    })?;
            ranges.extend(page.ranges.into_iter().filter(|r| r.last_offset >= offset));
        }
        ranges.extend(m.inline_ranges_from(offset).iter().cloned());
        Ok(ranges)
    }

    /// Downloads one object and checks it against its manifest entry.
    async fn download(
        &self,
        tp: &TopicPartition,
        r: &ShippedRange,
        file: &str,
    ) -> Result<Bytes, ExportError> {
        let bytes = self
            .source
            .get_in(&r.key, r.object_range())
            .await
            .map_err(|source| ExportError::Partition {
                tp: tp.clone(),
                source,
            })?;
        manifest::range_check::verify_object(r, &bytes).map_err(|e| ExportError::Corrupt {
            tp: tp.clone(),
            key: e.key,
            detail: e.detail,
            file: file.to_string(),
        })?;
        self.progress.downloaded(bytes.len() as u64);
        Ok(bytes)
    }

    /// Observes every batch of a verified object in `tracker`.
    fn observe(
        tp: &TopicPartition,
        r: &ShippedRange,
        bytes: &[u8],
        file: &str,
        tracker: &mut TxnTracker,
    ) -> Result<(), ExportError> {
        for item in BatchIter::verified(bytes, 0) {
            let (h, batch) = item.map_err(|e| ExportError::Corrupt {
                tp: tp.clone(),
                key: r.key.clone(),
                detail: format!("batch at byte {}: {e}", e.position()),
                file: file.to_string(),
            })?;
            let marker = if h.is_control() {
                Some(
                    decode_control_batch(&h, batch)
                        .map_err(|e| ExportError::Corrupt {
                            tp: tp.clone(),
                            key: r.key.clone(),
                            detail: format!("control batch at offset {}: {e}", h.base_offset),
                            file: file.to_string(),
                        })?
                        .kind,
                )
            } else {
                None
            };
            tracker.observe(&BatchFacts::of(&h, marker), h.last_offset());
        }
        Ok(())
    }

    /// Exports one partition (see the module docs for the steps).
    async fn export_partition(
        &self,
        tp: &TopicPartition,
        entry: &HeadEntry,
    ) -> Result<PartitionReport, ExportError> {
        let pk = PartitionKey {
            tp: tp.clone(),
            topic_id: entry.topic_id,
        };
        let m = self
            .source
            .latest_from(&pk, entry)
            .await
            .map_err(|source| ExportError::Partition {
                tp: tp.clone(),
                source,
            })?
            .ok_or_else(|| ExportError::Partition {
                tp: tp.clone(),
                source: StoreError::NotFound {
                    key: self.source.layout().manifest_dir(&pk),
                },
            })?;
        let window = self.opts.window;
        let lower = window.from_offset.unwrap_or(0).max(m.log_start_offset);
        let ranges = self.ranges_from(tp, &m, lower).await?;
        let plan = plan_partition(&ranges, m.log_start_offset, &window);
        self.progress
            .planned(plan.units.iter().map(Unit::bytes).sum());
        let mut w = PartitionWork {
            report: PartitionReport {
                entry: PartitionEntry {
                    topic: m.topic.clone(),
                    partition: m.partition,
                    topic_id: m.topic_id.to_string(),
                    manifest_version: m.version,
                    files: Vec::new(),
                    clamp: None,
                },
                written: 0,
                bytes_written: 0,
                reused: 0,
                removed: Vec::new(),
                bytes_read: 0,
                seen: None,
            },
            kept: BTreeSet::new(),
            tracker: TxnTracker::new(),
            queue: VecDeque::new(),
            queued_bytes: 0,
            open: None,
            checked: vec![false; plan.units.len()],
        };
        let result = self.export_units(tp, &m, &plan, &mut w).await;
        if let Err(e) = result {
            // A file being written is never completed: nothing of it appears.
            if let Some((_, f)) = w.open.take() {
                abort_file(f).await;
            }
            return Err(e);
        }
        let mut report = w.report;
        report.entry.files.sort_by_key(|f| f.first_offset);
        // Files of earlier runs overlapping what this run covered under
        // another name would list rows twice.
        if let (Some(first), Some(last)) = (
            plan.units.first().map(|u| u.first),
            report
                .entry
                .files
                .last()
                .map(|f| f.last_offset)
                .or(plan.units.last().map(|u| u.last)),
        ) {
            report.removed = self.remove_overlapping(&m, first, last, &w.kept).await?;
        }
        Ok(report)
    }

    /// Steps 2 to 4 of the module docs for one partition's plan.
    async fn export_units(
        &self,
        tp: &TopicPartition,
        m: &PartitionManifest,
        plan: &crate::plan::PartitionPlan,
        w: &mut PartitionWork,
    ) -> Result<(), ExportError> {
        for (ui, unit) in plan.units.iter().enumerate() {
            let key = self.file_key(m, unit.first, unit.last);
            // A complete file is kept without reading its objects only
            // when nothing before it waits for a marker: otherwise its
            // batches must be observed (they may end a transaction an
            // earlier file holds), and it is checked when its turn comes.
            if w.queue.is_empty() && w.open.is_none() && !self.opts.rewrite {
                w.checked[ui] = true;
                if let Some(file) = self.complete_file(unit, &key).await? {
                    self.progress.skipped(unit.bytes());
                    keep_file(tp, file, &mut w.report, &mut w.kept);
                    continue;
                }
            }
            for (ri, r) in unit.ranges.iter().enumerate() {
                let bytes = self.download(tp, r, &key).await?;
                w.report.bytes_read += bytes.len() as u64;
                Self::observe(tp, r, &bytes, &key, &mut w.tracker)?;
                w.queued_bytes += bytes.len() as u64;
                w.queue.push_back(Queued {
                    unit: ui,
                    range: ri,
                    bytes: Some(bytes),
                });
                self.drain(tp, m, &plan.units, w).await?;
                if w.queued_bytes > self.opts.pending_memory {
                    // Fetched again when their turn comes.
                    for q in w.queue.iter_mut() {
                        q.bytes = None;
                    }
                    w.queued_bytes = 0;
                }
            }
        }
        // Objects waiting for markers: read on past the window.
        let mut lookahead = plan.lookahead.iter();
        while let Some(front) = w.queue.front() {
            let Some(r) = lookahead.next() else { break };
            let file = plan
                .units
                .get(front.unit)
                .map(|u| self.file_key(m, u.first, u.last))
                .unwrap_or_default();
            let bytes = self.download(tp, r, &file).await?;
            w.report.bytes_read += bytes.len() as u64;
            Self::observe(tp, r, &bytes, &file, &mut w.tracker)?;
            self.drain(tp, m, &plan.units, w).await?;
        }
        let Some(first_waiting) = w.queue.front().map(|q| q.unit) else {
            return Ok(());
        };
        // Still waiting at the shipped end: cut at the last stable offset.
        let end = w.tracker.observed_end().max(m.shipped_end_offset);
        let lso = w.tracker.last_stable_offset(end);
        let open = w.tracker.open_transactions();
        let oldest = open
            .first()
            .map(|t| format!("producer {} opened a transaction at offset {} that has no marker in the bucket", t.producer_id, t.first_offset))
            .unwrap_or_default();
        tracing::warn!(
            partition = %tp,
            "export ends at the shipped last stable offset {lso}: {oldest} (shipped end {end}); records from offset {lso} on are left for a later export (read_committed; --isolation read_uncommitted exports them)"
        );
        w.report.entry.clamp = Some(Clamp {
            last_stable_offset: lso,
            shipped_end_offset: end,
            open_transactions: open
                .iter()
                .map(|t| (t.producer_id, t.first_offset))
                .collect(),
        });
        // The file being written was named for the whole unit: dropped,
        // and its unit written again under the cut's name.
        if let Some((_, f)) = w.open.take() {
            abort_file(f).await;
        }
        w.queue.clear();
        w.queued_bytes = 0;
        for unit in plan.units.get(first_waiting..).unwrap_or_default() {
            let Some(unit) = unit.clipped_to(lso - 1) else {
                break;
            };
            let file = self.open_file(m, &unit, false).await?;
            w.open = Some((usize::MAX, file));
            for r in &unit.ranges {
                let Some((_, f)) = w.open.as_mut() else { break };
                if f.keep.is_some() {
                    break;
                }
                let bytes = self.download(tp, r, &f.key).await?;
                w.report.bytes_read += bytes.len() as u64;
                self.encode_object(m, f, r, &bytes, &w.tracker, &mut w.report)
                    .await?;
            }
            if let Some((_, f)) = w.open.take()
                && let Some(entry) = self.finish_file(tp, m, f, &mut w.report).await?
            {
                w.kept.insert(entry.key.clone());
                w.report.entry.files.push(entry);
            }
        }
        Ok(())
    }

    /// Encodes the queued objects whose batches are all decided, in order:
    /// opens a unit's file at its first object and finishes it after its
    /// last.
    async fn drain(
        &self,
        tp: &TopicPartition,
        m: &PartitionManifest,
        units: &[Unit],
        w: &mut PartitionWork,
    ) -> Result<(), ExportError> {
        // read_uncommitted waits for no marker.
        let lso = match self.opts.isolation {
            Isolation::ReadCommitted => w.tracker.last_stable_offset(w.tracker.observed_end()),
            Isolation::ReadUncommitted => i64::MAX,
        };
        while let Some(q) = w.queue.front() {
            let (Some(unit), ui, ri) = (units.get(q.unit), q.unit, q.range) else {
                break;
            };
            let Some(r) = unit.ranges.get(ri) else { break };
            if r.last_offset.min(unit.last) >= lso {
                break;
            }
            let Some(q) = w.queue.pop_front() else { break };
            if let Some(b) = &q.bytes {
                w.queued_bytes = w.queued_bytes.saturating_sub(b.len() as u64);
            }
            if w.open.as_ref().is_none_or(|(open_ui, _)| *open_ui != ui) {
                let checked = w.checked.get(ui).copied().unwrap_or(false);
                let file = self.open_file(m, unit, checked).await?;
                w.open = Some((ui, file));
            }
            let Some((_, f)) = w.open.as_mut() else { break };
            if f.keep.is_none() {
                let bytes = match q.bytes {
                    Some(b) => b,
                    None => {
                        let b = self.download(tp, r, &f.key).await?;
                        w.report.bytes_read += b.len() as u64;
                        b
                    }
                };
                self.encode_object(m, f, r, &bytes, &w.tracker, &mut w.report)
                    .await?;
            }
            if ri + 1 == unit.ranges.len()
                && let Some((_, f)) = w.open.take()
                && let Some(entry) = self.finish_file(tp, m, f, &mut w.report).await?
            {
                w.kept.insert(entry.key.clone());
                w.report.entry.files.push(entry);
            }
        }
        Ok(())
    }

    /// Starts `unit`'s file: kept as it is when a complete one is at its
    /// key (unless `checked` already found none, or `--rewrite`).
    async fn open_file(
        &self,
        m: &PartitionManifest,
        unit: &Unit,
        checked: bool,
    ) -> Result<FileInProgress, ExportError> {
        let key = self.file_key(m, unit.first, unit.last);
        let keep = if !checked && !self.opts.rewrite {
            self.complete_file(unit, &key).await?
        } else {
            None
        };
        Ok(FileInProgress {
            unit: unit.clone(),
            key,
            rows: RowsBuilder::new(&m.topic, m.partition),
            writer: None,
            total: 0,
            stats: None,
            keep,
        })
    }

    fn file_key(&self, m: &PartitionManifest, first: i64, last: i64) -> String {
        layout::file_key(&self.out_prefix, &m.topic, m.partition, first, last)
    }

    /// The content description of a unit's file ([`UNIT_KEY`]).
    fn unit_description(&self, unit: &Unit) -> String {
        serde_json::json!({
            "schema": crate::schema::SCHEMA_VERSION,
            "isolation": self.opts.isolation,
            "from_time_ms": self.opts.window.from_time,
            "to_time_ms": self.opts.window.to_time,
            "first_offset": unit.first,
            "last_offset": unit.last,
            "sources": unit.ranges.iter().map(|r| serde_json::json!([r.key, r.crc32c])).collect::<Vec<_>>(),
        })
        .to_string()
    }

    /// The entry of the complete file already at `key` for `unit`, or
    /// `None` when there is none or it describes other content.
    async fn complete_file(
        &self,
        unit: &Unit,
        key: &str,
    ) -> Result<Option<FileEntry>, ExportError> {
        let path = ObjectPath::from(key);
        let out_err = |source| ExportError::Output {
            key: key.to_string(),
            source,
        };
        let meta = match self.out.head(&path).await {
            Ok(meta) => meta,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(out_err(e)),
        };
        let size = meta.size;
        if size < 12 {
            return Ok(None);
        }
        let tail = self
            .out
            .get_range(&path, size - 8..size)
            .await
            .map_err(out_err)?;
        if tail.len() != 8 || &tail[4..] != b"PAR1" {
            return Ok(None);
        }
        let footer_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
        if footer_len + 12 > size {
            return Ok(None);
        }
        let footer = self
            .out
            .get_range(&path, size - 8 - footer_len..size - 8)
            .await
            .map_err(out_err)?;
        let Ok(meta) = ParquetMetaDataReader::decode_metadata(&footer) else {
            return Ok(None);
        };
        let kv = meta.file_metadata().key_value_metadata();
        let get = |k: &str| {
            kv.and_then(|kv| kv.iter().find(|e| e.key == k))
                .and_then(|e| e.value.clone())
        };
        if get(UNIT_KEY).as_deref() != Some(self.unit_description(unit).as_str()) {
            return Ok(None);
        }
        let num = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
        let (Some(min_offset), Some(max_offset), Some(min_ts), Some(max_ts)) = (
            num("segmirror.min_offset"),
            num("segmirror.max_offset"),
            num("segmirror.min_timestamp_ms"),
            num("segmirror.max_timestamp_ms"),
        ) else {
            return Ok(None);
        };
        // A file's CRC cannot be inside it: from the last run manifest when
        // it lists this file at this size, else read and computed.
        let crc = match self.previous.get(key) {
            Some(f) if f.bytes == size => f.crc32c,
            _ => {
                let bytes = self.out.get(&path).await.map_err(out_err)?;
                let bytes = bytes.bytes().await.map_err(out_err)?;
                crc32c::crc32c(&bytes)
            }
        };
        Ok(Some(FileEntry {
            key: key.to_string(),
            first_offset: unit.first,
            last_offset: unit.last,
            rows: u64::try_from(meta.file_metadata().num_rows()).unwrap_or(0),
            min_offset,
            max_offset,
            min_timestamp_ms: min_ts,
            max_timestamp_ms: max_ts,
            bytes: size,
            crc32c: crc,
            sources: sources(unit),
        }))
    }

    /// Ends a file: the kept one is listed as it is; a written one gets its
    /// row bounds in its metadata and is completed (the object appears
    /// whole, at once). No row: no file, and none left from an earlier run.
    async fn finish_file(
        &self,
        tp: &TopicPartition,
        m: &PartitionManifest,
        mut f: FileInProgress,
        report: &mut PartitionReport,
    ) -> Result<Option<FileEntry>, ExportError> {
        if let Some(file) = f.keep.take() {
            tracing::info!(partition = %tp, file = %file.key, rows = file.rows, "kept: complete from an earlier run");
            report.reused += 1;
            return Ok(Some(file));
        }
        if let Err(e) = self.flush_rows(m, &mut f).await {
            abort_file(f).await;
            return Err(e);
        }
        let key = f.key.clone();
        let (Some(mut w), Some(stats)) = (f.writer.take(), f.stats) else {
            let path = ObjectPath::from(key.as_str());
            match self.out.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(source) => return Err(ExportError::Output { key, source }),
            }
            tracing::info!(partition = %tp, first = f.unit.first, last = f.unit.last, "no row wanted: no file");
            return Ok(None);
        };
        for (k, v) in [
            ("segmirror.min_offset", stats.min_offset),
            ("segmirror.max_offset", stats.max_offset),
            ("segmirror.min_timestamp_ms", stats.min_timestamp_ms),
            ("segmirror.max_timestamp_ms", stats.max_timestamp_ms),
        ] {
            w.append_key_value_metadata(KeyValue::new(k.to_string(), v.to_string()));
        }
        if let Err(source) = w.finish().await {
            let _ = w.into_inner().inner.abort().await;
            return Err(ExportError::Parquet { key, source });
        }
        let counted = w.into_inner();
        let rows = f.total;
        report.written += 1;
        report.bytes_written += counted.size;
        self.progress.file_written(&key, rows, counted.size);
        tracing::info!(partition = %tp, file = %key, rows, bytes = counted.size, "written");
        Ok(Some(FileEntry {
            key,
            first_offset: f.unit.first,
            last_offset: f.unit.last,
            rows,
            min_offset: stats.min_offset,
            max_offset: stats.max_offset,
            min_timestamp_ms: stats.min_timestamp_ms,
            max_timestamp_ms: stats.max_timestamp_ms,
            bytes: counted.size,
            crc32c: counted.crc,
            sources: sources(&f.unit),
        }))
    }

    /// Decodes the wanted records of one verified object of `f`'s unit
    /// into `f` (rows handed to the Parquet writer in batches).
    async fn encode_object(
        &self,
        m: &PartitionManifest,
        f: &mut FileInProgress,
        r: &ShippedRange,
        bytes: &[u8],
        tracker: &TxnTracker,
        report: &mut PartitionReport,
    ) -> Result<(), ExportError> {
        let tp = TopicPartition::new(&m.topic, m.partition)
            .map_err(|e| ExportError::Internal(e.to_string()))?;
        let file_key = f.key.clone();
        let corrupt = |detail: String| ExportError::Corrupt {
            tp: tp.clone(),
            key: r.key.clone(),
            detail,
            file: file_key.clone(),
        };
        let window = self.opts.window;
        let (first, last) = (f.unit.first, f.unit.last);
        let mut records_seen = 0u64;
        for item in BatchIter::verified(bytes, 0) {
            let (h, batch) =
                item.map_err(|e| corrupt(format!("batch at byte {}: {e}", e.position())))?;
            if h.last_offset() < first || h.base_offset > last {
                continue;
            }
            let marker = if h.is_control() {
                decode_control_batch(&h, batch).ok().map(|c| c.kind)
            } else {
                None
            };
            match tracker.decide(&BatchFacts::of(&h, marker), self.opts.isolation) {
                Decision::Keep => {}
                Decision::DropControl | Decision::DropAborted => continue,
                Decision::Undecided => {
                    return Err(ExportError::Internal(format!(
                        "{tp}: batch at offset {} of {} is still undecided when its file is written",
                        h.base_offset, r.key
                    )));
                }
            }
            let records = decode_records(&h, batch)
                .map_err(|e| corrupt(format!("batch at offset {}: {e}", h.base_offset)))?;
            for rec in &records {
                let Some(offset) = rec.offset(&h) else {
                    return Err(corrupt(format!(
                        "batch at offset {}: a record offset overflows",
                        h.base_offset
                    )));
                };
                let ts = record_timestamp(&h, rec);
                Seen::add(&mut report.seen, offset, ts);
                records_seen += 1;
                if offset < first || offset > last || !window.wants(offset, ts) {
                    continue;
                }
                if !f.rows.push(&h, rec, offset, ts) {
                    // Arrow's 32-bit offsets are full: hand the rows over
                    // and try again with empty builders.
                    self.flush_rows(m, f).await?;
                    if !f.rows.push(&h, rec, offset, ts) {
                        return Err(corrupt(format!(
                            "record at offset {offset} is larger than an Arrow column holds (2 GiB)"
                        )));
                    }
                }
                Seen::add(&mut f.stats, offset, ts);
                f.total += 1;
            }
            if f.rows.rows() >= ARROW_BATCH_ROWS || f.rows.bytes() >= ARROW_BATCH_BYTES {
                self.flush_rows(m, f).await?;
            }
        }
        self.progress.records(records_seen);
        Ok(())
    }

    /// Hands the collected rows to the Parquet writer, creating it first.
    async fn flush_rows(
        &self,
        m: &PartitionManifest,
        f: &mut FileInProgress,
    ) -> Result<(), ExportError> {
        if f.rows.rows() == 0 {
            return Ok(());
        }
        let parquet_err = |source| ExportError::Parquet {
            key: f.key.clone(),
            source,
        };
        let batch = f.rows.finish().map_err(|source| ExportError::Arrow {
            key: f.key.clone(),
            source,
        })?;
        if f.writer.is_none() {
            let props = self.writer_properties(m, &f.unit);
            let inner = BufWriter::new(Arc::clone(&self.out), ObjectPath::from(f.key.as_str()));
            let w = AsyncArrowWriter::try_new(
                Counted {
                    inner,
                    crc: 0,
                    size: 0,
                },
                schema(),
                Some(props),
            )
            .map_err(parquet_err)?;
            f.writer = Some(w);
        }
        match f.writer.as_mut() {
            Some(w) => w.write(&batch).await.map_err(parquet_err),
            None => Ok(()),
        }
    }

    /// Fixed writer properties (no clock, no host), so equal rows give
    /// equal bytes.
    fn writer_properties(&self, m: &PartitionManifest, unit: &Unit) -> WriterProperties {
        let meta = vec![
            KeyValue::new(
                "segmirror.schema_version".into(),
                crate::schema::SCHEMA_VERSION.to_string(),
            ),
            KeyValue::new(
                "segmirror.source_cluster_id".into(),
                m.source_cluster_id.clone(),
            ),
            KeyValue::new("segmirror.topic".into(), m.topic.clone()),
            KeyValue::new("segmirror.topic_id".into(), m.topic_id.to_string()),
            KeyValue::new("segmirror.partition".into(), m.partition.to_string()),
            KeyValue::new("segmirror.manifest_version".into(), m.version.to_string()),
            KeyValue::new(
                "segmirror.segment_base_offset".into(),
                unit.segment_base_offset.to_string(),
            ),
            KeyValue::new("segmirror.first_offset".into(), unit.first.to_string()),
            KeyValue::new("segmirror.last_offset".into(), unit.last.to_string()),
            KeyValue::new(
                "segmirror.isolation".into(),
                self.opts.isolation.to_string(),
            ),
            KeyValue::new(
                "segmirror.source_ranges".into(),
                serde_json::to_string(&sources(unit)).unwrap_or_default(),
            ),
            KeyValue::new(UNIT_KEY.into(), self.unit_description(unit)),
        ];
        WriterProperties::builder()
            .set_created_by(format!("segmirror backfill {}", env!("CARGO_PKG_VERSION")))
            .set_compression(Compression::ZSTD(
                ZstdLevel::try_new(ZSTD_LEVEL).unwrap_or_default(),
            ))
            .set_dictionary_enabled(false)
            .set_column_dictionary_enabled(ColumnPath::from("topic"), true)
            // Min/max of keys, values and headers prune nothing and cost
            // a comparison of every value: off. Offsets and timestamps
            // get page statistics (column indexes) for pruning.
            .set_statistics_enabled(EnabledStatistics::None)
            .set_column_statistics_enabled(ColumnPath::from("partition"), EnabledStatistics::Chunk)
            .set_column_statistics_enabled(
                ColumnPath::from("leader_epoch"),
                EnabledStatistics::Chunk,
            )
            .set_column_statistics_enabled(
                ColumnPath::from("producer_id"),
                EnabledStatistics::Chunk,
            )
            .set_column_statistics_enabled(ColumnPath::from("offset"), EnabledStatistics::Page)
            .set_column_statistics_enabled(ColumnPath::from("timestamp"), EnabledStatistics::Page)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
            .set_sorting_columns(Some(vec![SortingColumn {
                column_idx: OFFSET_COLUMN as i32,
                descending: false,
                nulls_first: false,
            }]))
            .set_key_value_metadata(Some(meta))
            .build()
    }

    /// Removes the files of `m`'s partition dir that overlap
    /// `first..=last` and are not in `kept`.
    async fn remove_overlapping(
        &self,
        m: &PartitionManifest,
        first: i64,
        last: i64,
        kept: &BTreeSet<String>,
    ) -> Result<Vec<String>, ExportError> {
        let dir = layout::partition_dir(&self.out_prefix, &m.topic, m.partition);
        let listed: Vec<_> = self
            .out
            .list(Some(&ObjectPath::from(dir.as_str())))
            .collect()
            .await;
        let mut removed = Vec::new();
        for item in listed {
            let meta = match item {
                Ok(meta) => meta,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(source) => return Err(ExportError::Output { key: dir, source }),
            };
            let key = meta.location.to_string();
            let Some((f, l)) =
                layout::parse_file_key(&self.out_prefix, &m.topic, m.partition, &key)
            else {
                continue;
            };
            if kept.contains(&key) || l < first || f > last {
                continue;
            }
            match self.out.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(source) => return Err(ExportError::Output { key, source }),
            }
            tracing::info!(file = %key, "removed: overlaps this run's files under another name");
            removed.push(key);
        }
        Ok(removed)
    }
}

/// The live partitions of `source`'s newest head that `topics`,
/// `exclude` and `partitions` select, sorted; or why there are none (what
/// the bucket holds, for the error line).
pub async fn select(
    source: &ManifestStore,
    source_prefix: &str,
    topics: &Regex,
    exclude: Option<&Regex>,
    partitions: Option<&PartitionList>,
) -> Result<Result<Vec<HeadEntry>, NothingSelected>, ExportError> {
    let selection = manifest::topic_pattern::Selection {
        include: Some(topics),
        exclude,
    };
    let head = source
        .latest_head(None)
        .await
        .map_err(|source| ExportError::Bucket { source })?;
    let matched: Vec<HeadEntry> = head
        .as_ref()
        .map(|h| {
            h.partitions
                .values()
                .filter(|e| !e.deleted && selection.matches(&e.topic))
                .filter(|e| partitions.is_none_or(|l| l.contains(e.partition)))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if !matched.is_empty() {
        let mut matched = matched;
        matched.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        return Ok(Ok(matched));
    }
    let inventory = bucket::store::take_inventory(
        source.object_store(),
        source_prefix,
        source.layout().cluster_id(),
        selection,
    )
    .await
    .map_err(|source| ExportError::Bucket { source })?;
    let cluster = source.layout().cluster_id();
    Ok(Err(if !inventory.clusters.contains(cluster) {
        NothingSelected::UnknownCluster(format!(
            "source cluster {cluster} is not in the bucket {}: {inventory}",
            source.object_store()
        ))
    } else if head.is_none() {
        NothingSelected::NothingShipped(format!(
            "source cluster {cluster} has shipped nothing yet (no head in its change feed): {inventory}"
        ))
    } else {
        let partitions = match partitions {
            Some(l) => format!(" and --partitions {l}"),
            None => String::new(),
        };
        let per_topic = head
            .iter()
            .flat_map(|h| h.partitions.values())
            .filter(|e| !e.deleted && selection.matches(&e.topic))
            .map(|e| format!("{}-{}", e.topic, e.partition))
            .collect::<Vec<_>>();
        let live = if per_topic.is_empty() {
            String::new()
        } else {
            format!(
                "; partitions of the matched topics: {}",
                per_topic.join(", ")
            )
        };
        NothingSelected::NoMatch(format!(
            "no live partition matches --topics {}{}{partitions}: {inventory}{live}",
            topics
                .as_str()
                .trim_start_matches("^(?:")
                .trim_end_matches(")$"),
            exclude
                .map(|x| format!(
                    " --exclude {}",
                    x.as_str().trim_start_matches("^(?:").trim_end_matches(")$")
                ))
                .unwrap_or_default(),
        ))
    }))
}

/// Lists a complete file of an earlier run as this run's.
fn keep_file(
    tp: &dyn std::fmt::Display,
    file: FileEntry,
    report: &mut PartitionReport,
    kept: &mut BTreeSet<String>,
) {
    tracing::info!(partition = %tp, file = %file.key, rows = file.rows, "kept: complete from an earlier run");
    kept.insert(file.key.clone());
    report.reused += 1;
    report.entry.files.push(file);
}

fn sources(unit: &Unit) -> Vec<SourceObject> {
    unit.ranges
        .iter()
        .map(|r| SourceObject {
            key: r.key.clone(),
            crc32c: r.crc32c,
            bytes: r.bytes,
        })
        .collect()
}

/// The output writer, counting bytes and their CRC-32C on the way.
struct Counted {
    inner: BufWriter,
    crc: u32,
    size: u64,
}

impl AsyncFileWriter for Counted {
    fn write(&mut self, bs: Bytes) -> BoxFuture<'_, parquet::errors::Result<()>> {
        self.crc = crc32c::crc32c_append(self.crc, &bs);
        self.size += bs.len() as u64;
        AsyncFileWriter::write(&mut self.inner, bs)
    }

    fn complete(&mut self) -> BoxFuture<'_, parquet::errors::Result<()>> {
        AsyncFileWriter::complete(&mut self.inner)
    }
}
