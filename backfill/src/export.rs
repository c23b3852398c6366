//! `backfill export`: a source cluster's shipped records, read from the
//! bucket, written as Parquet files under an output URL.
//!
//! Per partition (partitions run concurrently, up to `concurrency`):
//! 1. read the newest manifest version the change feed names, and its
//!    pages, and plan the files ([`crate::plan`]);
//! 2. for each file in offset order: skip it when a complete file with the
//!    same content description is already at its key (resume; see
//!    [`UNIT_KEY`]); else download its objects, check each against its
//!    manifest entry (size, CRC-32C, batch headers: the applier's
//!    `verify_object`) and every batch's CRC, and observe its batches'
//!    transactions ([`crate::txn`]);
//! 3. write a file once every transaction with a batch in it is decided
//!    (its last offset is below the last stable offset); until then its
//!    objects are held, within `pending_memory` bytes (beyond, they are
//!    dropped and fetched again when written). After the window, later
//!    ranges are read only while a file still waits for a marker;
//! 4. at the shipped end, files still waiting are cut at the shipped LSO
//!    (read_committed): what lies above is left for a later export, and
//!    the partition's entry says so ([`crate::run_manifest::Clamp`]);
//! 5. remove older files of the partition whose offsets overlap what this
//!    run covered under other names (left by a run whose file boundaries
//!    differed, e.g. before a compaction), so no row is ever listed twice.
//!
//! Invariants:
//! - A file is written only whole: its objects all pass their checks
//!   before its first byte is sent, a failure while writing aborts the
//!   upload (one PUT, or a multipart upload that is never completed), and
//!   the object store makes the final PUT atomic. A corrupt object fails
//!   its partition, naming the object, the batch offset and the file.
//! - The output is a pure function of the bucket's data and the request:
//!   file names come from source segment offsets, rows are in offset
//!   order, and Parquet is written with fixed properties and no clock, so
//!   a re-run writes byte-identical files.
//! - The run manifest is written last, and only when every partition
//!   succeeded.
//! - Memory: per partition, the objects of the files waiting for a marker
//!   (at most `pending_memory`, but always the file being written), one
//!   Parquet row group being encoded (at most [`ROW_GROUP_BYTES`]) and one
//!   Arrow batch being built (about [`ARROW_BATCH_BYTES`]).

// `ExportError` carries the stores' errors by value; it is built only on the
// failure path, where its size costs nothing measurable.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use kafkalog::TopicPartition;
use kafkalog::batch::BatchIter;
use kafkalog::records::{decode_control_batch, decode_records};
use manifest::feed::HeadEntry;
use manifest::layout::PartitionKey;
use manifest::partition::{PartitionManifest, ShippedRange};
use manifest::store::{ManifestStore, StoreError};
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

/// A file waiting to be written: its unit and, unless dropped for memory,
/// its verified objects.
struct Pending {
    unit: Unit,
    objects: Option<Vec<Bytes>>,
    /// Already found not complete at its key.
    checked: bool,
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
                    tracing::error!(partition = %tp, "{}", manifest::diagnosis::one_line(&e));
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
            .get(&r.key)
            .await
            .map_err(|source| ExportError::Partition {
                tp: tp.clone(),
                source,
            })?;
        applier::mirror::verify_object(tp, r, &bytes).map_err(|e| match e {
            applier::MirrorError::ObjectCorrupt { key, detail, .. } => ExportError::Corrupt {
                tp: tp.clone(),
                key,
                detail,
                file: file.to_string(),
            },
            other => ExportError::Corrupt {
                tp: tp.clone(),
                key: r.key.clone(),
                detail: other.to_string(),
                file: file.to_string(),
            },
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

    /// Exports one partition.
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
            .latest_manifest(&pk, Some(entry.manifest_version))
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
        let mut report = PartitionReport {
            entry: PartitionEntry {
                topic: m.topic.clone(),
                partition: m.partition,
                topic_id: m.topic_id.to_string(),
                manifest_version: m.version,
                files: Vec::new(),
                clamp: None,
            },
            written: 0,
            reused: 0,
            removed: Vec::new(),
            bytes_read: 0,
            seen: None,
        };
        let mut kept: BTreeSet<String> = BTreeSet::new();
        let mut tracker = TxnTracker::new();
        let mut pending: VecDeque<Pending> = VecDeque::new();
        let mut pending_bytes = 0u64;
        for unit in &plan.units {
            let key = self.file_key(&m, unit.first, unit.last);
            // A complete file is kept without reading its objects only when
            // no earlier file waits for a marker: otherwise its batches must
            // be observed (they may end a transaction the waiting file
            // holds), and it is checked again when its turn to be written
            // comes.
            let checked = pending.is_empty() && !self.opts.rewrite;
            if checked && let Some(file) = self.complete_file(unit, &key).await? {
                self.progress.skipped(unit.bytes());
                keep_file(tp, file, &mut report, &mut kept);
                continue;
            }
            let mut objects = Vec::with_capacity(unit.ranges.len());
            for r in &unit.ranges {
                let bytes = self.download(tp, r, &key).await?;
                report.bytes_read += bytes.len() as u64;
                Self::observe(tp, r, &bytes, &key, &mut tracker)?;
                objects.push(bytes);
            }
            pending_bytes += unit.bytes();
            pending.push_back(Pending {
                unit: unit.clone(),
                objects: Some(objects),
                checked,
            });
            self.write_decided(
                &m,
                &tracker,
                &mut pending,
                &mut pending_bytes,
                &mut report,
                &mut kept,
            )
            .await?;
            if pending_bytes > self.opts.pending_memory {
                // Fetched again when written.
                for p in pending.iter_mut() {
                    p.objects = None;
                }
                pending_bytes = 0;
            }
        }
        // Files waiting for markers: read on past the window.
        let mut lookahead = plan.lookahead.iter();
        while !pending.is_empty() {
            let Some(r) = lookahead.next() else { break };
            let file = pending
                .front()
                .map(|p| self.file_key(&m, p.unit.first, p.unit.last))
                .unwrap_or_default();
            let bytes = self.download(tp, r, &file).await?;
            report.bytes_read += bytes.len() as u64;
            Self::observe(tp, r, &bytes, &file, &mut tracker)?;
            self.write_decided(
                &m,
                &tracker,
                &mut pending,
                &mut pending_bytes,
                &mut report,
                &mut kept,
            )
            .await?;
        }
        if !pending.is_empty() {
            let end = tracker.observed_end().max(m.shipped_end_offset);
            let lso = tracker.last_stable_offset(end);
            let open = tracker.open_transactions();
            let clamp = Clamp {
                last_stable_offset: lso,
                shipped_end_offset: end,
                open_transactions: open
                    .iter()
                    .map(|t| (t.producer_id, t.first_offset))
                    .collect(),
            };
            let oldest = open
                .first()
                .map(|t| format!("producer {} opened a transaction at offset {} that has no marker in the bucket", t.producer_id, t.first_offset))
                .unwrap_or_default();
            tracing::warn!(
                partition = %tp,
                "export ends at the shipped last stable offset {lso}: {oldest} (shipped end {end}); records from offset {lso} on are left for a later export (read_committed; --isolation read_uncommitted exports them)"
            );
            report.entry.clamp = Some(clamp);
            while let Some(p) = pending.pop_front() {
                if let Some(unit) = p.unit.clipped_to(lso - 1) {
                    // Clipped: another key than the one checked.
                    let objects = p
                        .objects
                        .filter(|_| unit.ranges.len() == p.unit.ranges.len());
                    self.write_or_keep(&m, &unit, objects, false, &tracker, &mut report, &mut kept)
                        .await?;
                }
            }
        }
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
            report.removed = self.remove_overlapping(&m, first, last, &kept).await?;
        }
        Ok(report)
    }

    /// Writes the pending files whose transactions are all decided.
    async fn write_decided(
        &self,
        m: &PartitionManifest,
        tracker: &TxnTracker,
        pending: &mut VecDeque<Pending>,
        pending_bytes: &mut u64,
        report: &mut PartitionReport,
        kept: &mut BTreeSet<String>,
    ) -> Result<(), ExportError> {
        // read_uncommitted waits for no marker.
        let lso = match self.opts.isolation {
            Isolation::ReadCommitted => tracker.last_stable_offset(tracker.observed_end()),
            Isolation::ReadUncommitted => i64::MAX,
        };
        while pending.front().is_some_and(|p| p.unit.last < lso) {
            let Some(p) = pending.pop_front() else { break };
            if p.objects.is_some() {
                *pending_bytes = pending_bytes.saturating_sub(p.unit.bytes());
            }
            self.write_or_keep(m, &p.unit, p.objects, p.checked, tracker, report, kept)
                .await?;
        }
        Ok(())
    }

    /// Keeps the complete file already at `unit`'s key (unless `checked`
    /// found none, or `--rewrite`), else writes it.
    #[allow(clippy::too_many_arguments)]
    async fn write_or_keep(
        &self,
        m: &PartitionManifest,
        unit: &Unit,
        objects: Option<Vec<Bytes>>,
        checked: bool,
        tracker: &TxnTracker,
        report: &mut PartitionReport,
        kept: &mut BTreeSet<String>,
    ) -> Result<(), ExportError> {
        let key = self.file_key(m, unit.first, unit.last);
        if !checked
            && !self.opts.rewrite
            && let Some(file) = self.complete_file(unit, &key).await?
        {
            let tp = format!("{}-{}", m.topic, m.partition);
            keep_file(&tp, file, report, kept);
            return Ok(());
        }
        if let Some(f) = self.write_unit(m, unit, objects, tracker, report).await? {
            kept.insert(f.key.clone());
            report.entry.files.push(f);
        }
        Ok(())
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

    /// Writes one unit's file (its objects downloaded again when they were
    /// dropped). No file when no row is wanted; an earlier file at the same
    /// key is then removed.
    async fn write_unit(
        &self,
        m: &PartitionManifest,
        unit: &Unit,
        objects: Option<Vec<Bytes>>,
        tracker: &TxnTracker,
        report: &mut PartitionReport,
    ) -> Result<Option<FileEntry>, ExportError> {
        let tp = TopicPartition::new(&m.topic, m.partition)
            .map_err(|e| ExportError::Internal(e.to_string()))?;
        let key = self.file_key(m, unit.first, unit.last);
        let objects = match objects {
            Some(o) => o,
            None => {
                let mut o = Vec::with_capacity(unit.ranges.len());
                for r in &unit.ranges {
                    let bytes = self.download(&tp, r, &key).await?;
                    report.bytes_read += bytes.len() as u64;
                    o.push(bytes);
                }
                o
            }
        };
        let mut writer: Option<AsyncArrowWriter<Counted>> = None;
        let result = self
            .encode_unit(m, unit, &objects, tracker, &key, &mut writer, report)
            .await;
        let (rows, stats) = match result {
            Ok(x) => x,
            Err(e) => {
                if let Some(w) = writer {
                    let _ = w.into_inner().inner.abort().await;
                }
                return Err(e);
            }
        };
        let path = ObjectPath::from(key.as_str());
        let (Some(mut w), Some(stats)) = (writer, stats) else {
            // No row: no file, and none left from an earlier run.
            match self.out.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(source) => return Err(ExportError::Output { key, source }),
            }
            tracing::info!(partition = %tp, first = unit.first, last = unit.last, "no row wanted: no file");
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
        report.written += 1;
        self.progress.file_written(&key, rows, counted.size);
        tracing::info!(partition = %tp, file = %key, rows, bytes = counted.size, "written");
        Ok(Some(FileEntry {
            key,
            first_offset: unit.first,
            last_offset: unit.last,
            rows,
            min_offset: stats.min_offset,
            max_offset: stats.max_offset,
            min_timestamp_ms: stats.min_timestamp_ms,
            max_timestamp_ms: stats.max_timestamp_ms,
            bytes: counted.size,
            crc32c: counted.crc,
            sources: sources(unit),
        }))
    }

    /// Decodes a unit's wanted records into `writer` (created at the first
    /// row). Returns the rows written and their bounds.
    #[allow(clippy::too_many_arguments)]
    async fn encode_unit(
        &self,
        m: &PartitionManifest,
        unit: &Unit,
        objects: &[Bytes],
        tracker: &TxnTracker,
        key: &str,
        writer: &mut Option<AsyncArrowWriter<Counted>>,
        report: &mut PartitionReport,
    ) -> Result<(u64, Option<Seen>), ExportError> {
        let tp = || {
            TopicPartition::new(&m.topic, m.partition)
                .map_err(|e| ExportError::Internal(e.to_string()))
        };
        let window = self.opts.window;
        let mut rows = RowsBuilder::new(&m.topic, m.partition);
        let mut total = 0u64;
        let mut stats: Option<Seen> = None;
        for (r, bytes) in unit.ranges.iter().zip(objects) {
            let corrupt = |detail: String| -> ExportError {
                match tp() {
                    Ok(tp) => ExportError::Corrupt {
                        tp,
                        key: r.key.clone(),
                        detail,
                        file: key.to_string(),
                    },
                    Err(e) => e,
                }
            };
            let mut records_seen = 0u64;
            for item in BatchIter::verified(bytes, 0) {
                let (h, batch) =
                    item.map_err(|e| corrupt(format!("batch at byte {}: {e}", e.position())))?;
                if h.last_offset() < unit.first || h.base_offset > unit.last {
                    continue;
                }
                let marker = if h.is_control() {
                    decode_control_batch(&h, batch).ok().map(|c| c.kind)
                } else {
                    None
                };
                let decision = tracker.decide(&BatchFacts::of(&h, marker), self.opts.isolation);
                match decision {
                    Decision::Keep => {}
                    Decision::DropControl | Decision::DropAborted => continue,
                    Decision::Undecided => {
                        return Err(ExportError::Internal(format!(
                            "{}: batch at offset {} of {} is still undecided when its file is written",
                            m.topic, h.base_offset, r.key
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
                    if offset < unit.first || offset > unit.last || !window.wants(offset, ts) {
                        continue;
                    }
                    if !rows.push(&h, rec, offset, ts) {
                        return Err(corrupt(format!(
                            "record at offset {offset}: more header bytes than a Parquet list holds"
                        )));
                    }
                    Seen::add(&mut stats, offset, ts);
                    total += 1;
                }
                if rows.rows() >= ARROW_BATCH_ROWS || rows.bytes() >= ARROW_BATCH_BYTES {
                    self.flush_rows(m, unit, key, &mut rows, writer).await?;
                }
            }
            self.progress.records(records_seen);
        }
        if rows.rows() > 0 {
            self.flush_rows(m, unit, key, &mut rows, writer).await?;
        }
        Ok((total, stats))
    }

    /// Hands the collected rows to the Parquet writer, creating it first.
    async fn flush_rows(
        &self,
        m: &PartitionManifest,
        unit: &Unit,
        key: &str,
        rows: &mut RowsBuilder,
        writer: &mut Option<AsyncArrowWriter<Counted>>,
    ) -> Result<(), ExportError> {
        if rows.rows() == 0 {
            return Ok(());
        }
        let batch = rows.finish().map_err(|source| ExportError::Arrow {
            key: key.to_string(),
            source,
        })?;
        let w = match writer {
            Some(w) => w,
            None => {
                let props = self.writer_properties(m, unit);
                let inner = BufWriter::new(Arc::clone(&self.out), ObjectPath::from(key));
                let w = AsyncArrowWriter::try_new(
                    Counted {
                        inner,
                        crc: 0,
                        size: 0,
                    },
                    schema(),
                    Some(props),
                )
                .map_err(|source| ExportError::Parquet {
                    key: key.to_string(),
                    source,
                })?;
                writer.insert(w)
            }
        };
        w.write(&batch)
            .await
            .map_err(|source| ExportError::Parquet {
                key: key.to_string(),
                source,
            })
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
    let selection = applier::feed::Selection {
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
    let inventory = applier::inventory::take(
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
