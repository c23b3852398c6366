//! One mirror partition: its local log, its durable record, and the work of
//! each state (preparation, fetching and appending, failover).
//!
//! The decisions are made by pure code in `manifest` (`lineage` for where
//! to truncate, `state` for which state follows which); this module performs
//! them on the local log and the bucket.
//!
//! Invariants:
//! - The local log is the checkpoint: after a crash, fetching resumes at the
//!   local log end offset, and batches are appended only when they continue
//!   it (`append_replicated` refuses anything else).
//! - Every object's size and CRC-32C are checked against the manifest, and
//!   every batch's header (offsets, leader epoch: `manifest::range_check`) and CRC
//!   before it is appended. An object of up to [`STREAM_ABOVE`] bytes is
//!   appended only once it has passed every check; a larger one is appended
//!   as it downloads, under a durable marker (`applying`), and a mismatch
//!   at its end truncates the log back to where the range started. Either
//!   way a corrupt object leaves nothing of itself in the log, and a crash
//!   in the middle of a range leaves nothing of it once the partition is
//!   opened again ([`Mirror::undo_partial_range`]).
//! - Memory: about `download_memory` bytes downloaded ahead plus
//!   [`STREAM_ABOVE`] held for a small object (or the part of a batch cut
//!   by a download piece), whatever the object size.
//! - The destination's segments start where the source's do (`roll_to`), so
//!   the `.log` files are byte-identical for the same base offset.
//! - Failover records the LME durably before changing the log, and reuses a
//!   recorded LME on retry.

// `MirrorError` carries the store's and the log's errors by value; it is
// built only on the failure path, where its size costs nothing measurable.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bucket::store::ManifestStore;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use kafkalog::builder::build_control_batch;
use kafkalog::records::ControlType;
use kafkalog::{PartitionLog, TopicId, TopicPartition};
use manifest::clock::Clock;
use manifest::layout::PartitionKey;
use manifest::mirror_record::MirrorRecord;
use manifest::partition::{PartitionManifest, ShippedRange};
use manifest::range_check::{
    ObjectCorrupt, RangeCheck, check_size_and_crc, verify_object, verify_object_crc,
};
use manifest::reconcile::{self, LocalLog, Plan, Refusal, Step, Surroundings};

use crate::applying;
use crate::error::MirrorError;

/// What a mirror partition needs to know about its surroundings.
#[derive(Debug, Clone)]
pub struct MirrorContext {
    /// This (destination) cluster's own id, for the loop check and LME lookup.
    pub local_cluster_id: Option<String>,
    /// Whether the destination topic has `remote.storage.enable=true`.
    pub tiered_storage: bool,
    /// Objects downloaded ahead of the one being appended (at most).
    pub prefetch: usize,
    /// Bytes of objects held at once, downloaded or being appended (at
    /// least one object is always fetched, whatever its size).
    pub download_memory: u64,
    /// Objects larger than this are appended while they download.
    pub stream_above: u64,
    /// Preparation may cut records of the partition's own (`--allow-truncate`
    /// of run and once; `manifest::cut`).
    pub allow_truncate: bool,
}

/// What a step changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Batches appended.
    pub batches: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// Offsets cut by truncation.
    pub truncated: i64,
}

/// A mirror partition open on the local log.
#[derive(Debug)]
pub struct Mirror {
    /// The partition.
    pub tp: TopicPartition,
    /// Its local log.
    pub log: PartitionLog,
    /// Its durable record.
    pub record: MirrorRecord,
    /// Why the record in memory could not be written, when the last write
    /// failed (the file then holds an older state; `applier status` shows
    /// this one from the live status).
    pub unsaved: Option<String>,
    /// Batches and bytes appended since the partition was opened, counted
    /// as they are appended (a pass that fails part-way still counts what
    /// it appended before the failure).
    pub appended: (u64, u64),
    /// Whether [`Mirror::apply`] changed the log since the last flush: the
    /// cycle's group commit flushes it ([`Mirror::flush_applied`]).
    pub unflushed: bool,
    /// Whether the record in memory is newer than the file, for the
    /// cycle's group commit to write once the flush is durable
    /// ([`Mirror::save_applied`]); cleared by every successful write.
    pub record_dirty: bool,
    /// The clock that stamps the record and control batches.
    pub clock: Arc<dyn Clock>,
    /// Offsets (`first`, `last`) skipped by [`Mirror::apply`] because the
    /// source's log start passed the local log end, until the engine takes
    /// them (a gap observed here: `crate::gaps`), whether the rest of the
    /// pass succeeded or not.
    pub skipped: Option<(i64, i64)>,
}

/// What the preparation of `tp` with `record` against `m` would cut of
/// the partition's own records in the `local` log, refused unless
/// `allowed` (`manifest::cut::check`). Other refusals of the plan are left
/// to the preparation (`Ok(None)` here).
pub fn check_cut(
    tp: &TopicPartition,
    record: &MirrorRecord,
    m: &PartitionManifest,
    local: &LocalLog<'_>,
    ctx: &MirrorContext,
    allowed: bool,
) -> Result<Option<manifest::mirror_record::Cut>, Refusal> {
    let here = Surroundings {
        local_cluster_id: ctx.local_cluster_id.as_deref(),
        tiered_storage: ctx.tiered_storage,
    };
    match reconcile::plan_preparation(tp, record, m, local, &here) {
        Ok(plan) => manifest::cut::check(record, &plan, local, m, allowed),
        Err(_) => Ok(None),
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The reason stored in the write guard of a mirror partition.
pub fn guard_reason(source_cluster_id: &str) -> String {
    format!("mirror of source cluster {source_cluster_id}: read-only until `applier stop`")
}

impl Mirror {
    /// A mirror partition open on `log` with its `record`.
    pub fn new(
        tp: TopicPartition,
        log: PartitionLog,
        record: MirrorRecord,
        clock: Arc<dyn Clock>,
    ) -> Mirror {
        Mirror {
            tp,
            log,
            record,
            unsaved: None,
            appended: (0, 0),
            unflushed: false,
            record_dirty: false,
            clock,
            skipped: None,
        }
    }

    fn log_err(&self) -> impl FnOnce(kafkalog::Error) -> MirrorError + '_ {
        move |source| MirrorError::Log {
            tp: self.tp.clone(),
            source,
        }
    }

    /// The partition's key in the bucket.
    pub fn key(&self) -> PartitionKey {
        PartitionKey {
            tp: self.tp.clone(),
            topic_id: self.record.topic_id,
        }
    }

    /// Writes the record durably.
    pub fn save(&mut self) -> Result<(), MirrorError> {
        self.record.updated_at_ms = self.clock.now_ms();
        let result = partdir::record::write(&self.record, self.log.dir()).map_err(|source| {
            MirrorError::Record {
                tp: self.tp.clone(),
                source,
            }
        });
        self.unsaved = result.as_ref().err().map(ToString::to_string);
        if result.is_ok() {
            self.record_dirty = false;
        }
        result
    }

    fn refused(&self) -> impl FnOnce(Refusal) -> MirrorError + '_ {
        move |refusal| MirrorError::Refused {
            tp: self.tp.clone(),
            refusal,
        }
    }

    /// The local log as the planners see it.
    pub fn local_view(&self) -> LocalLog<'_> {
        LocalLog {
            topic_id: self.log.topic_id(),
            lineage: self.log.epochs(),
            log_start_offset: self.log.log_start_offset(),
            log_end_offset: self.log.log_end_offset(),
        }
    }

    /// PREPARING's plan against the source's manifest `m` (nothing is
    /// changed): see `manifest::reconcile::plan_preparation`.
    pub fn plan_preparation(
        &self,
        m: &PartitionManifest,
        ctx: &MirrorContext,
    ) -> Result<Plan, MirrorError> {
        reconcile::plan_preparation(
            &self.tp,
            &self.record,
            m,
            &self.local_view(),
            &Surroundings {
                local_cluster_id: ctx.local_cluster_id.as_deref(),
                tiered_storage: ctx.tiered_storage,
            },
        )
        .map_err(self.refused())
    }

    /// What the preparation that `record` (this partition's record, or the
    /// one a `start` would give it) would cut of the partition's own
    /// records against `m`, refused unless `allowed` (`manifest::cut`).
    /// Other refusals of the plan are left to the preparation.
    pub fn check_cut(
        &self,
        record: &MirrorRecord,
        m: &PartitionManifest,
        ctx: &MirrorContext,
        allowed: bool,
    ) -> Result<Option<manifest::mirror_record::Cut>, Refusal> {
        check_cut(&self.tp, record, m, &self.local_view(), ctx, allowed)
    }

    /// The follower's plan against `m` (nothing is changed): see
    /// `manifest::reconcile::plan_follow`.
    pub fn plan_follow(&self, m: &PartitionManifest) -> Result<Plan, MirrorError> {
        reconcile::check_manifest_identity(self.record.topic_id, &self.record.source_cluster_id, m)
            .map_err(self.refused())?;
        reconcile::plan_follow(
            m,
            &LocalLog {
                topic_id: self.log.topic_id(),
                lineage: self.log.epochs(),
                log_start_offset: self.log.log_start_offset(),
                log_end_offset: self.log.log_end_offset(),
            },
        )
        .map_err(self.refused())
    }

    /// Performs a plan's steps on the local log, in order.
    fn execute(&mut self, plan: &Plan) -> Result<(), MirrorError> {
        for step in &plan.steps {
            match step {
                Step::Keep { .. } => {
                    tracing::info!(partition = %self.tp, "{step}");
                }
                Step::TruncateTo { to, .. } => {
                    tracing::warn!(partition = %self.tp, from = self.log.log_end_offset(), "{step}");
                    self.log.truncate_to(*to).map_err(self.log_err())?;
                }
                Step::TruncateFullyAndStartAt { start, .. } => {
                    tracing::warn!(partition = %self.tp, from = self.log.log_end_offset(), "{step}");
                    self.log
                        .truncate_fully_and_start_at(*start)
                        .map_err(self.log_err())?;
                }
                Step::RaiseLogStart { to, .. } => {
                    tracing::info!(partition = %self.tp, "{step}");
                    self.log.raise_log_start(*to).map_err(self.log_err())?;
                }
            }
        }
        Ok(())
    }

    /// PREPARING's work: plans (identity and loop checks, the history step
    /// of failback or of a resume after a stop, the follower step, the
    /// source's log start), executes the plan, and clears what the record
    /// kept of the last stop, in memory: the transition to MIRRORING writes
    /// the record (after the cut is durable). Returns the offsets cut.
    pub fn prepare(
        &mut self,
        m: &PartitionManifest,
        ctx: &MirrorContext,
    ) -> Result<StepReport, MirrorError> {
        let leo_before = self.log.log_end_offset();
        // Damage that `verify` or the scrub recorded is cut first: the
        // follow fetches that range again (`crate::repair`).
        crate::repair::cut_recorded_damage(self, m)?;
        let plan = self.plan_preparation(m, ctx)?;
        // Records of the partition's own are cut only when the operator
        // said so (`manifest::cut`); refused, nothing is changed.
        manifest::cut::check(
            &self.record,
            &plan,
            &self.local_view(),
            m,
            ctx.allow_truncate || self.record.truncate_allowed,
        )
        .map_err(self.refused())?;
        self.execute(&plan)?;
        self.record.truncate_allowed = false;
        self.record.pending_cut = None;
        self.record.lme = None;
        self.record.stopped_at_offset = None;
        self.record.stop_epoch = None;
        self.record.stopped_source_cluster_id = None;
        self.record.failback_pending = false;
        Ok(StepReport {
            truncated: leo_before - self.log.log_end_offset(),
            ..StepReport::default()
        })
    }

    /// MIRRORING's work for one manifest version: reconcile (source
    /// divergence, retention), replace compacted segments, then fetch and
    /// append every range from the local log end on. The flush and the
    /// record naming the version are left to the cycle's group commit
    /// ([`Mirror::flush_applied`], [`Mirror::save_applied`]); `unflushed`
    /// and `record_dirty` say what there is to do.
    pub async fn apply(
        &mut self,
        store: &ManifestStore,
        m: &PartitionManifest,
        ctx: &MirrorContext,
    ) -> Result<StepReport, MirrorError> {
        let plan = self.plan_follow(m)?;
        let leo_before = self.log.log_end_offset();
        self.execute(&plan)?;
        if let Some(skipped) = plan.steps.iter().find_map(|s| match s {
            Step::TruncateFullyAndStartAt {
                cut_at,
                start,
                reason: reconcile::Reason::SourceLogStart { .. },
            } if cut_at < start => Some((*cut_at, start - 1)),
            _ => None,
        }) {
            self.skipped = Some(skipped);
        }
        let mut report = StepReport {
            truncated: leo_before - self.log.log_end_offset(),
            ..StepReport::default()
        };
        self.replace_compacted(store, m, &mut report).await?;

        let leo = self.log.log_end_offset();
        let mut ranges: Vec<ShippedRange> = Vec::new();
        for page in m.pages_from(leo) {
            let page = store
                .get_page(&page.key)
                .await
                .map_err(|source| MirrorError::Store {
                    tp: self.tp.clone(),
                    source,
                })?;
            ranges.extend(page.ranges.into_iter().filter(|r| r.last_offset >= leo));
        }
        ranges.extend(m.inline_ranges_from(leo).iter().cloned());
        // Downloading runs as its own task, ahead of the appends, within
        // `prefetch` objects opened and `download_memory` bytes queued;
        // the CRC-32C of each object is computed there, on the other core.
        let pieces_ahead = (ctx.download_memory / PIECE as u64).clamp(2, 256) as usize;
        let (tx, mut rx) = tokio::sync::mpsc::channel(pieces_ahead);
        let fetcher = AbortOnDrop(tokio::spawn(fetch_ranges(
            store.clone(),
            self.tp.clone(),
            ranges.clone(),
            ctx.prefetch.max(1),
            tx,
        )));
        let mut appended_any = false;
        for range in &ranges {
            let applied = self.apply_range(range, &mut rx, ctx.stream_above).await;
            let (b, n) = match applied {
                Ok(x) => x,
                Err(e) => {
                    // Keep the whole ranges appended before: the log is the
                    // checkpoint.
                    if appended_any {
                        let _ = self.log.flush();
                    }
                    return Err(e);
                }
            };
            self.appended.0 += b;
            self.appended.1 += n;
            report.batches += b;
            report.bytes += n;
            appended_any |= b > 0;
        }
        drop(fetcher);
        // Epoch starts that fall in compaction gaps come from the manifest.
        self.log.adopt_lineage(&m.lineage).map_err(self.log_err())?;
        if appended_any || report.truncated != 0 {
            self.unflushed = true;
        }
        if self.record.applied_manifest_version != m.version {
            self.record.applied_manifest_version = m.version;
            self.record_dirty = true;
        }
        Ok(report)
    }

    /// The group commit's first half, after [`Mirror::apply`]: the log
    /// flushed (inside the engine's `DeferredSync` scope, its fsyncs wait
    /// for the barrier shared by every partition of the cycle).
    pub fn flush_applied(&mut self) -> Result<(), MirrorError> {
        if self.unflushed {
            self.log.flush().map_err(self.log_err())?;
            self.unflushed = false;
        }
        Ok(())
    }

    /// The group commit's second half, once the flush is durable: the
    /// record (naming the manifest version applied, and MIRRORING after a
    /// preparation of the same cycle), when it changed.
    pub fn save_applied(&mut self) -> Result<(), MirrorError> {
        if self.record_dirty {
            self.save()?;
        }
        Ok(())
    }

    /// Appends one range as its pieces arrive from [`fetch_ranges`]:
    /// buffered whole and checked before any append when it is small,
    /// streamed under the `applying` marker when it is not. Returns the
    /// batches and bytes appended.
    async fn apply_range(
        &mut self,
        range: &ShippedRange,
        rx: &mut tokio::sync::mpsc::Receiver<Piece>,
        stream_above: u64,
    ) -> Result<(u64, u64), MirrorError> {
        let mut run = RangeRun {
            check: RangeCheck::new(range),
            pending: BytesMut::new(),
            streaming: false,
            log_end_before: self.log.log_end_offset(),
            appended: (0, 0),
        };
        let result = self.feed_range(range, rx, &mut run, stream_above).await;
        if run.streaming {
            if result.is_err() {
                self.undo_range(range, run.log_end_before)?;
            }
            partdir::applying::end(self.log.dir()).map_err(|e| self.marker_err(e))?;
        }
        result.map(|()| run.appended)
    }

    async fn feed_range(
        &mut self,
        range: &ShippedRange,
        rx: &mut tokio::sync::mpsc::Receiver<Piece>,
        run: &mut RangeRun,
        stream_above: u64,
    ) -> Result<(), MirrorError> {
        loop {
            let Some(piece) = rx.recv().await else {
                return Err(MirrorError::Store {
                    tp: self.tp.clone(),
                    source: bucket::store::StoreError::Store {
                        op: "get",
                        key: range.key.clone(),
                        source: object_store::Error::Generic {
                            store: "segmirror",
                            source: "the download task ended early".into(),
                        },
                    },
                });
            };
            match piece {
                Piece::Failed(e) => return Err(e),
                Piece::Data(bytes) => {
                    if !run.streaming && range.bytes > stream_above {
                        partdir::applying::begin(
                            self.log.dir(),
                            &applying::Applying {
                                key: range.key.clone(),
                                base_offset: range.base_offset,
                                last_offset: range.last_offset,
                                log_end_before: run.log_end_before,
                            },
                        )
                        .map_err(|e| self.marker_err(e))?;
                        run.streaming = true;
                    }
                    if !run.streaming {
                        run.pending.extend_from_slice(&bytes);
                    } else {
                        let mut rest: &[u8] = &bytes;
                        if !run.pending.is_empty() {
                            // A batch straddles the pieces: copy only what
                            // completes it, then go on without copying.
                            let take = straddle_take(&run.pending, rest);
                            run.pending.extend_from_slice(&rest[..take]);
                            rest = &rest[take..];
                            let pending = std::mem::take(&mut run.pending);
                            let taken = self.append_whole_batches(range, run, &pending)?;
                            run.pending = pending;
                            let _ = run.pending.split_to(taken);
                        }
                        if run.pending.is_empty() {
                            let taken = self.append_whole_batches(range, run, rest)?;
                            run.pending.extend_from_slice(&rest[taken..]);
                        } else {
                            run.pending.extend_from_slice(rest);
                        }
                    }
                }
                Piece::End { crc, len } => {
                    let corrupt = |corrupt: ObjectCorrupt| MirrorError::ObjectCorrupt {
                        tp: self.tp.clone(),
                        corrupt,
                    };
                    if !run.streaming {
                        // Small: every check before the first append.
                        verify_object_crc(range, &run.pending, len, crc).map_err(corrupt)?;
                        let pending = std::mem::take(&mut run.pending);
                        let taken = self.append_whole_batches(range, run, &pending)?;
                        debug_assert_eq!(taken, pending.len());
                        return Ok(());
                    }
                    check_size_and_crc(range, len, crc, None).map_err(corrupt)?;
                    if !run.pending.is_empty() {
                        return Err(corrupt(ObjectCorrupt::of(
                            range,
                            format!(
                                "the object ends inside a batch at byte {}",
                                run.check.accepted()
                            ),
                        )));
                    }
                    return run
                        .check
                        .finish()
                        .map_err(|detail| corrupt(ObjectCorrupt::of(range, detail)));
                }
            }
        }
    }

    /// Checks the whole batches at the start of `bytes` against the range
    /// and appends those that continue the log; returns how many bytes
    /// they took.
    fn append_whole_batches(
        &mut self,
        range: &ShippedRange,
        run: &mut RangeRun,
        bytes: &[u8],
    ) -> Result<usize, MirrorError> {
        let whole =
            run.check
                .whole_batches(bytes)
                .map_err(|detail| MirrorError::ObjectCorrupt {
                    tp: self.tp.clone(),
                    corrupt: ObjectCorrupt::of(range, detail),
                })?;
        let (b, n) = self.append_range(range, &bytes[..whole.len])?;
        run.appended.0 += b;
        run.appended.1 += n;
        Ok(whole.len)
    }

    /// Truncates the log back to where a streamed range started.
    fn undo_range(&mut self, range: &ShippedRange, log_end_before: i64) -> Result<(), MirrorError> {
        let leo = self.log.log_end_offset();
        if leo > log_end_before {
            let cut = leo
                - self
                    .log
                    .truncate_to(log_end_before)
                    .map_err(self.log_err())?;
            self.log.flush().map_err(self.log_err())?;
            tracing::warn!(partition = %self.tp, key = %range.key, offset = log_end_before, cut, "removed the batches of a range that failed its checks");
        }
        Ok(())
    }

    fn marker_err(&self, e: std::io::Error) -> MirrorError {
        MirrorError::Log {
            tp: self.tp.clone(),
            source: kafkalog::Error::Io {
                op: "write",
                path: self.log.dir().join(applying::APPLYING_FILE),
                source: e,
            },
        }
    }

    /// At open: cuts the part of a range that was being streamed in when
    /// the applier stopped (see `applying`), so the log ends where the
    /// range started, a boundary the manifest names. Returns the offsets
    /// cut.
    pub fn undo_partial_range(&mut self) -> Result<i64, MirrorError> {
        let dir = self.log.dir().to_path_buf();
        let marker = partdir::applying::read(&dir).map_err(|e| self.marker_err(e))?;
        let Some(marker) = marker else {
            return Ok(0);
        };
        let mut cut = 0;
        match marker {
            Err(torn) => {
                tracing::warn!(partition = %self.tp, marker = %torn, "removed a torn marker of a range being applied (none of its batches was written)");
            }
            Ok(a) => {
                let leo = self.log.log_end_offset();
                let state = self.record.state.state();
                if let Some(to) = applying::cut_to(&a, state, self.log.log_start_offset(), leo) {
                    let end = self.log.truncate_to(to).map_err(self.log_err())?;
                    cut = leo - end;
                    self.log.flush().map_err(self.log_err())?;
                    tracing::warn!(partition = %self.tp, key = %a.key, from = to, to = leo, "cut a range that was being applied when the applier stopped; it is fetched again");
                }
            }
        }
        partdir::applying::clear(&dir).map_err(|e| self.marker_err(e))?;
        Ok(cut)
    }

    /// Appends the batches of `bytes` (whole batches of a range, checked
    /// against it) that continue the log; the log checks each one's CRC.
    fn append_range(
        &mut self,
        range: &ShippedRange,
        bytes: &[u8],
    ) -> Result<(u64, u64), MirrorError> {
        let leo = self.log.log_end_offset();
        let mut start = None;
        for item in kafkalog::batch::BatchIter::new(bytes, 0) {
            let (h, _) = item.map_err(|source| MirrorError::BadBatch {
                tp: self.tp.clone(),
                key: range.key.clone(),
                source: kafkalog::Error::InvalidAppend {
                    topic_partition: self.tp.to_string(),
                    source,
                },
            })?;
            if h.last_offset() >= leo {
                start = Some((h.position as usize, h.base_offset));
                break;
            }
        }
        let Some((start, first_base)) = start else {
            return Ok((0, 0));
        };
        // The log starts inside this batch (the source's log start was
        // moved into it, e.g. by DeleteRecords): as a Kafka follower does,
        // restart the empty log at the batch's base offset, append the whole
        // batch, and keep the log start where it was.
        let log_start = self.log.log_start_offset();
        let restart_inside_batch = first_base < leo && leo == log_start;
        if restart_inside_batch {
            self.log
                .truncate_fully_and_start_at(first_base)
                .map_err(self.log_err())?;
        }
        let leo = self.log.log_end_offset();
        let active_base = self.log.segment_base_offsets().last().copied().unwrap_or(0);
        if range.segment_base_offset > active_base && range.segment_base_offset >= leo {
            self.log
                .roll_to(range.segment_base_offset)
                .map_err(self.log_err())?;
        }
        let info = self
            .log
            .append_replicated(&bytes[start..])
            .map_err(|source| match source {
                // The disk, not the data (ENOSPC, EIO, EACCES): kafkalog
                // leaves the log as it was, so a retry appends again.
                kafkalog::Error::Io { .. } => MirrorError::Log {
                    tp: self.tp.clone(),
                    source,
                },
                source => MirrorError::BadBatch {
                    tp: self.tp.clone(),
                    key: range.key.clone(),
                    source,
                },
            })?;
        if restart_inside_batch {
            self.log
                .raise_log_start(log_start)
                .map_err(self.log_err())?;
        }
        Ok((info.batches as u64, info.bytes))
    }

    /// Replaces local segments that the source compacted, once they lie
    /// wholly below the local log end.
    async fn replace_compacted(
        &mut self,
        store: &ManifestStore,
        m: &PartitionManifest,
        report: &mut StepReport,
    ) -> Result<(), MirrorError> {
        let leo = self.log.log_end_offset();
        let mut by_segment: BTreeMap<i64, Vec<&ShippedRange>> = BTreeMap::new();
        for r in &m.ranges {
            if r.segment_generation > 0 {
                by_segment.entry(r.segment_base_offset).or_default().push(r);
            }
        }
        let local_segments = self.log.segment_base_offsets();
        for (base, ranges) in by_segment {
            let generation = ranges
                .iter()
                .map(|r| r.segment_generation)
                .max()
                .unwrap_or(0);
            let applied = self
                .record
                .segment_generations
                .get(&base)
                .copied()
                .unwrap_or(0);
            let below = ranges.iter().all(|r| r.last_offset < leo);
            let rolled = local_segments.contains(&base) && local_segments.last() != Some(&base);
            if generation <= applied || !below || !rolled {
                continue;
            }
            let mut content = Vec::new();
            for r in ranges.iter().filter(|r| r.segment_generation == generation) {
                let bytes = store
                    .get(&r.key)
                    .await
                    .map_err(|source| MirrorError::Store {
                        tp: self.tp.clone(),
                        source,
                    })?;
                verify_object(r, &bytes).map_err(|corrupt| MirrorError::ObjectCorrupt {
                    tp: self.tp.clone(),
                    corrupt,
                })?;
                content.extend_from_slice(&bytes);
            }
            self.log
                .replace_segment(base, &content)
                .map_err(|source| MirrorError::BadBatch {
                    tp: self.tp.clone(),
                    key: format!("segment {base} (generation {generation})"),
                    source,
                })?;
            tracing::info!(partition = %self.tp, segment = base, generation, "replaced a segment the source compacted");
            self.record.segment_generations.insert(base, generation);
            self.save()?;
            report.bytes += content.len() as u64;
        }
        Ok(())
    }

    /// STOPPING's work (failover): record the LME durably (keeping one
    /// already recorded for this stop), raise the leader epoch to LME + 1,
    /// and abort the transactions source producers left open, with ABORT
    /// markers at the new epoch. Does not truncate; needs no bucket.
    pub fn failover(&mut self) -> Result<(), MirrorError> {
        self.record_stop()?;
        self.stop_log().map(|_aborted| ())
    }

    fn stop_plan(&self) -> reconcile::StopPlan {
        reconcile::plan_stop(
            &self.record,
            self.log.epochs().latest_epoch(),
            self.log.log_end_offset(),
            self.log.open_transactions(),
        )
    }

    /// Failover's first half: the LME, stop offset and stop epoch in the
    /// record, which must be durable before [`Mirror::stop_log`] changes
    /// the log (so a retry is the same stop: the plan is computed again
    /// from the record).
    pub fn record_stop(&mut self) -> Result<(), MirrorError> {
        if self.plan_stop_in_record() {
            self.save()?;
        }
        Ok(())
    }

    /// Puts the stop's LME, offset and epoch in the record in memory
    /// (keeping those of a stop already recorded); true when it changed.
    /// The transition to STOPPING calls it before its own write of the
    /// record, so one write carries both and [`Mirror::record_stop`] then
    /// has nothing to write.
    pub fn plan_stop_in_record(&mut self) -> bool {
        let plan = self.stop_plan();
        if !(plan.record_stop || plan.record_stop_epoch) {
            return false;
        }
        self.record.lme = plan.lme;
        self.record.stopped_at_offset = Some(plan.stopped_at_offset);
        self.record.stop_epoch = Some(plan.stop_epoch);
        self.record.stopped_source_cluster_id = Some(self.record.source_cluster_id.clone());
        true
    }

    /// Failover's second half: the epoch raised to the recorded stop
    /// epoch, ABORT markers for the open transactions, the log flushed.
    /// Returns whether it wrote ABORT markers (they must be durable before
    /// STOPPED; the epoch bump alone is redone at every open).
    pub fn stop_log(&mut self) -> Result<bool, MirrorError> {
        let plan = self.stop_plan();
        let stop_epoch = plan.stop_epoch;
        self.log.bump_epoch(stop_epoch).map_err(self.log_err())?;
        for txn in &plan.abort {
            let mut marker = build_control_batch(
                ControlType::Abort,
                0,
                stop_epoch,
                txn.producer_id,
                txn.producer_epoch,
                self.clock.now_ms(),
                0,
            );
            self.log
                .append_as_coordinator(&mut marker, stop_epoch)
                .map_err(self.log_err())?;
            tracing::info!(partition = %self.tp, producer_id = txn.producer_id, first_offset = txn.first_offset, "aborted a transaction the source left open");
        }
        self.log.flush().map_err(self.log_err())?;
        Ok(!plan.abort.is_empty())
    }
}

/// Refuses internal (`__*`) and Kafka Streams internal topics.
pub fn refuse_topic(tp: &TopicPartition) -> Result<(), MirrorError> {
    reconcile::check_topic(tp).map_err(|refusal| MirrorError::Refused {
        tp: tp.clone(),
        refusal,
    })
}

/// Objects of up to this size are downloaded whole and checked before any
/// of their batches is appended; larger ones are appended as they arrive,
/// under the `applying` marker.
pub const STREAM_ABOVE: u64 = 4 << 20;

/// Pieces of at least this size go to the appending side as they are;
/// smaller ones (an HTTP body's frames) are gathered up to it first.
pub const PIECE: usize = bucket::store::READ_PIECE;

/// What the download task hands the appending side, object after object,
/// in the ranges' order.
#[derive(Debug)]
enum Piece {
    /// The next bytes of the current object.
    Data(Bytes),
    /// The current object ended: its length and CRC-32C as downloaded.
    End { crc: u32, len: u64 },
    /// The download failed; nothing follows.
    Failed(MirrorError),
}

/// One range being appended.
struct RangeRun {
    check: RangeCheck,
    /// Bytes downloaded and not appended yet (from a batch boundary).
    pending: BytesMut,
    /// Appending as it downloads, under the marker.
    streaming: bool,
    log_end_before: i64,
    appended: (u64, u64),
}

/// Aborts the download task when the apply ends early.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Downloads `ranges`' objects in order into `tx`, `prefetch` requests
/// ahead, computing each object's CRC-32C on the way. Stops at the first
/// failure (sent as [`Piece::Failed`]) or when the receiver is gone.
async fn fetch_ranges(
    store: ManifestStore,
    tp: TopicPartition,
    ranges: Vec<ShippedRange>,
    prefetch: usize,
    tx: tokio::sync::mpsc::Sender<Piece>,
) {
    let opened = futures::stream::iter(ranges)
        .map(|r| {
            let store = store.clone();
            async move {
                let body = store.get_stream(&r.key).await;
                (r, body)
            }
        })
        .buffered(prefetch);
    futures::pin_mut!(opened);
    let failed = |source| {
        Piece::Failed(MirrorError::Store {
            tp: tp.clone(),
            source,
        })
    };
    while let Some((range, body)) = opened.next().await {
        let mut body = match body {
            Ok(b) => b,
            Err(e) => {
                let _ = tx.send(failed(e)).await;
                return;
            }
        };
        let mut crc = kafkalog::batch::Crc32cDigest::new();
        let mut len = 0u64;
        let mut gathered = BytesMut::new();
        while let Some(piece) = body.pieces.next().await {
            let piece = match piece {
                Ok(p) => p,
                Err(e) => {
                    let _ = tx.send(failed(e)).await;
                    return;
                }
            };
            crc.update(&piece);
            len += piece.len() as u64;
            let out = if gathered.is_empty() && piece.len() >= PIECE {
                Some(piece)
            } else {
                gathered.extend_from_slice(&piece);
                (gathered.len() >= PIECE).then(|| gathered.split().freeze())
            };
            if let Some(out) = out
                && tx.send(Piece::Data(out)).await.is_err()
            {
                return;
            }
            if len > range.bytes {
                // Longer than the manifest's object: no need to read on.
                break;
            }
        }
        if !gathered.is_empty() && tx.send(Piece::Data(gathered.freeze())).await.is_err() {
            return;
        }
        let end = Piece::End {
            crc: crc.value(),
            len,
        };
        if tx.send(end).await.is_err() {
            return;
        }
    }
}

/// Bytes of `next` that complete the batch `pending` begins (all of
/// `next` when it does not): the batch's size comes from its head
/// ([`kafkalog::batch::framed_size`]), which may itself straddle. A
/// negative length takes nothing more than the head: the batch checks
/// then reject it.
fn straddle_take(pending: &[u8], next: &[u8]) -> usize {
    use kafkalog::batch::{LOG_OVERHEAD, framed_size};
    let mut head = [0u8; LOG_OVERHEAD];
    let have = pending.len().min(LOG_OVERHEAD);
    head[..have].copy_from_slice(&pending[..have]);
    let from_next = (LOG_OVERHEAD - have).min(next.len());
    head[have..have + from_next].copy_from_slice(&next[..from_next]);
    if have + from_next < LOG_OVERHEAD {
        return next.len();
    }
    let total = framed_size(&head).unwrap_or(LOG_OVERHEAD);
    total.saturating_sub(pending.len()).min(next.len())
}

/// A new record for a partition starting to mirror `source_cluster_id`.
pub fn new_record(
    source_cluster_id: &str,
    topic_id: TopicId,
    state: manifest::state::MirrorState,
) -> MirrorRecord {
    MirrorRecord::new(source_cluster_id, topic_id, state, now_ms())
}

#[cfg(test)]
mod tests {
    use super::straddle_take;

    fn head(length: i32) -> Vec<u8> {
        let mut h = vec![0u8; 8];
        h.extend_from_slice(&length.to_be_bytes());
        h
    }

    #[test]
    fn a_straddling_batch_takes_only_what_completes_it() {
        // Head whole in pending: 12 + 100 bytes, 40 already there.
        let mut pending = head(100);
        pending.extend_from_slice(&[1; 28]);
        assert_eq!(straddle_take(&pending, &[0; 1000]), 72);
        assert_eq!(straddle_take(&pending, &[0; 50]), 50, "not complete yet");
        // Head split: 5 bytes in pending, 7 in the next piece.
        let whole = head(20);
        assert_eq!(
            straddle_take(&whole[..5], &[&whole[5..], &[9; 100][..]].concat()),
            7 + 20
        );
        // Head still incomplete: take everything.
        assert_eq!(straddle_take(&whole[..5], &whole[5..9]), 4);
        // A negative length: the head only, for the checks to refuse.
        assert_eq!(straddle_take(&head(-5)[..10], &[0; 100]), 2);
    }
}
