//! One mirror partition: its local log, its durable record, and the work of
//! each state (preparation, fetching and appending, failover).
//!
//! The decisions are made by pure code: in `manifest` (`reconcile` for
//! what preparation, following and a stop do to the log, `lineage` for
//! where to truncate, `state` for which state follows which) and in
//! [`apply_plan`] (buffered or streamed, where a range's batches start and
//! whether the log restarts inside a batch, which compacted segments are
//! replaced, which offsets a follow skipped). [`Mirror`] carries the plans
//! out on the local log and the record; `stream` downloads and appends.
//!
//! Invariants:
//! - The local log is the checkpoint: after a crash, fetching resumes at the
//!   local log end offset, and batches are appended only when they continue
//!   it (`append_replicated` refuses anything else).
//! - Every object's size and CRC-32C are checked against the manifest, and
//!   every batch's header (offsets, leader epoch: `manifest::range_check`) and CRC
//!   before it is appended. An object of up to `stream_above` bytes
//!   ([`STREAM_ABOVE`] by default) is appended only once it has passed
//!   every check; a larger one is appended as it downloads, under a
//!   durable marker (`applying`), and a mismatch at its end truncates the
//!   log back to where the range started. Either way a corrupt object
//!   leaves nothing of itself in the log, and a crash in the middle of a
//!   range leaves nothing of it once the partition is opened again
//!   ([`Mirror::undo_partial_range`]).
//! - Durability by group commit: [`Mirror::apply`] appends without fsync
//!   and changes the record in memory only (the manifest version applied,
//!   the generation of each compacted segment replaced); the cycle's
//!   commit flushes the log ([`Mirror::flush_applied`]), then writes the
//!   record ([`Mirror::save_applied`]), so no record names data that is
//!   not durable.
//! - Memory: about `download_memory` bytes downloaded ahead plus
//!   `stream_above` held for a small object (or the part of a batch cut
//!   by a download piece), whatever the object size.
//! - The destination's segments start where the source's do (`roll_to`), so
//!   the `.log` files are byte-identical for the same base offset.
//! - Failover records the LME durably before changing the log, and reuses a
//!   recorded LME on retry.

// `MirrorError` carries the store's and the log's errors by value; it is
// built only on the failure path, where its size costs nothing measurable.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use bucket::store::ManifestStore;
use kafkalog::builder::build_control_batch;
use kafkalog::records::ControlType;
use kafkalog::{PartitionLog, TopicId, TopicPartition};
use manifest::clock::Clock;
use manifest::layout::PartitionKey;
use manifest::mirror_record::MirrorRecord;
use manifest::partition::{PartitionManifest, ShippedRange};
use manifest::reconcile::{self, LocalLog, Plan, Refusal, Step, Surroundings};

use crate::error::MirrorError;

pub mod apply_plan;
mod stream;

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
    /// Which of the source topic's configs the record copies.
    pub config_filter: std::sync::Arc<manifest::topic_config::ConfigFilter>,
}

impl MirrorContext {
    /// The surroundings the planners check against.
    fn surroundings(&self) -> Surroundings<'_> {
        Surroundings {
            local_cluster_id: self.local_cluster_id.as_deref(),
            tiered_storage: self.tiered_storage,
        }
    }
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
    match reconcile::plan_preparation(tp, record, m, local, &ctx.surroundings()) {
        Ok(plan) => manifest::cut::check(record, &plan, local, m, allowed),
        Err(_) => Ok(None),
    }
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
        let result = partdir::record::write_for(&self.record, self.log.dir(), self.log.topic_id())
            .map_err(|source| MirrorError::Record {
                tp: self.tp.clone(),
                source,
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
            &ctx.surroundings(),
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
        reconcile::plan_follow(m, &self.local_view()).map_err(self.refused())
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
        crate::repair::cut_recorded_damage(&mut self.log, &self.tp, m)?;
        // The manifest's topic configs first: the tiered-storage rule of the
        // plan reads them; the transition to MIRRORING writes the record.
        crate::topic_configs::record_configs(&mut self.record, m, &ctx.config_filter);
        self.note_deletion(m);
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
    /// record naming the version (and the generation of each compacted
    /// segment replaced) are left to the cycle's group commit
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
        if let Some(skipped) = apply_plan::skipped_offsets(&plan) {
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
        let fetcher = stream::AbortOnDrop(tokio::spawn(stream::fetch_ranges(
            store.clone(),
            self.tp.clone(),
            ranges.clone(),
            ctx.prefetch.max(1),
            tx,
        )));
        let mut appended_any = false;
        for range in &ranges {
            let applied =
                stream::apply_range(&self.tp, &mut self.log, range, &mut rx, ctx.stream_above)
                    .await;
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
        // The source topic's configs as of this version, written with it by
        // the group commit.
        if crate::topic_configs::record_configs(&mut self.record, m, &ctx.config_filter) {
            self.record_dirty = true;
        }
        // Whether the source deleted the partition, written with it too.
        if self.note_deletion(m) {
            self.record_dirty = true;
        }
        Ok(report)
    }

    /// Notes in the record whether the source deleted the partition, as
    /// of `m` (`crate::lifecycle::record_deletion`), and logs a change.
    /// Returns whether the record changed.
    fn note_deletion(&mut self, m: &PartitionManifest) -> bool {
        match crate::lifecycle::record_deletion(&mut self.record, m) {
            crate::lifecycle::Deletion::Unchanged => false,
            crate::lifecycle::Deletion::Deleted(at_ms) => {
                tracing::warn!(partition = %self.tp, version = m.version, at_ms, "the source deleted this partition: its records are kept here, read-only, and nothing more is applied (`applier stop` makes it writable; remove the partition dir to drop it)");
                true
            }
            crate::lifecycle::Deletion::Restored => {
                tracing::info!(partition = %self.tp, version = m.version, "the source publishes this partition again: mirroring goes on");
                true
            }
        }
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

    /// Replaces local segments that the source compacted
    /// ([`apply_plan::compacted_segments_to_replace`]). The record names
    /// each new generation in memory only (`record_dirty`): the cycle's
    /// group commit writes it with the manifest version applied. That is
    /// crash-safe because a replaced segment is durable before
    /// `replace_segment` returns (written beside, fsynced, renamed, the
    /// directory fsynced; `apply` runs outside any `DeferredSync` scope),
    /// so no record ever names a generation the log does not hold; a
    /// crash before the commit leaves the older generation in the record,
    /// and the next apply replaces the segment again with the same bytes.
    async fn replace_compacted(
        &mut self,
        store: &ManifestStore,
        m: &PartitionManifest,
        report: &mut StepReport,
    ) -> Result<(), MirrorError> {
        let local_segments = self.log.segment_base_offsets();
        let replace = apply_plan::compacted_segments_to_replace(
            &m.ranges,
            &self.record.segment_generations,
            self.log.log_end_offset(),
            &local_segments,
        );
        for r in replace {
            let content = crate::bucket_reader::fetch_verified(store, &self.tp, &r.ranges).await?;
            let (base, generation) = (r.base, r.generation);
            self.log
                .replace_segment(base, &content)
                .map_err(|source| MirrorError::BadBatch {
                    tp: self.tp.clone(),
                    key: format!("segment {base} (generation {generation})"),
                    source,
                })?;
            tracing::info!(partition = %self.tp, segment = base, generation, "replaced a segment the source compacted");
            self.record.segment_generations.insert(base, generation);
            self.record_dirty = true;
            report.bytes += content.len() as u64;
        }
        Ok(())
    }

    /// At open: cuts the part of a range that was being streamed in when
    /// the applier stopped (see `applying`), so the log ends where the
    /// range started, a boundary the manifest names. Returns the offsets
    /// cut.
    pub fn undo_partial_range(&mut self) -> Result<i64, MirrorError> {
        stream::undo_partial_range(&self.tp, &mut self.log, self.record.state.state())
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

/// A new record for a partition starting to mirror `source_cluster_id`.
pub fn new_record(
    source_cluster_id: &str,
    topic_id: TopicId,
    state: manifest::state::MirrorState,
) -> MirrorRecord {
    MirrorRecord::new(source_cluster_id, topic_id, state, crate::clock::now_ms())
}
