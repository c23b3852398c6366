//! One source partition's shipping state and the decisions of a cycle.
//!
//! [`ShipperSlot::decide`] is the per-cycle step that reads only local
//! files: it checks that the source still holds what was shipped (and, if
//! not, finds where it diverged), notices retention and compaction, and
//! plans the new ranges. It returns a [`Shipment`] that the shipper
//! uploads and commits; the slot only moves forward (cursor,
//! fingerprints) once the manifest that names the new objects is
//! committed.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kafkalog::TopicPartition;
use kafkalog::checkpoint::EpochEntry;
use manifest::layout::PartitionKey;
use manifest::lineage::{EpochLineage, divergence_point};
use manifest::partition::{MirrorOrigin, PartitionManifest, ShippedRange};
use manifest::topic_config::{ConfigValue, Enforcement};

use crate::error::ShipperError;
use crate::health::{self, Forget, Health, HealthEvent};
use crate::plan::{RangePlan, TailStop, plan_segment, plan_tail};
use crate::source::{
    BadBatch, BatchMark, Cursor, Fingerprint, Located, SourceView, locate, read_header_at, walk,
};

/// Sealed pages' ranges, by key, shared by all partitions (pages are
/// immutable, so entries never go stale).
pub(crate) type PageCache = Arc<Mutex<HashMap<String, Arc<Vec<ShippedRange>>>>>;

pub(crate) fn cached_page(cache: &PageCache, key: &str) -> Option<Arc<Vec<ShippedRange>>> {
    match cache.lock() {
        Ok(c) => c.get(key).cloned(),
        Err(p) => p.into_inner().get(key).cloned(),
    }
}

pub(crate) fn cache_page(cache: &PageCache, key: String, ranges: Arc<Vec<ShippedRange>>) {
    match cache.lock() {
        Ok(mut c) => c.insert(key, ranges),
        Err(p) => p.into_inner().insert(key, ranges),
    };
}

/// Why the source no longer matches what was shipped.
#[derive(Debug, Clone)]
pub(crate) enum Anomaly {
    /// The lineages diverge at this offset (possibly only a checkpoint that
    /// lags behind the batches).
    Lineage(i64),
    /// The log ends below the shipped end.
    Behind(i64),
    /// A batch spans the shipped end.
    Straddles(i64),
    /// Bytes at or before the cursor changed.
    Physical(String),
}

impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Anomaly::Lineage(p) => write!(
                f,
                "the source's leader epoch lineage diverges at offset {p}"
            ),
            Anomaly::Behind(leo) => write!(f, "the source log now ends at offset {leo}"),
            Anomaly::Straddles(base) => {
                write!(f, "a source batch at offset {base} spans the shipped end")
            }
            Anomaly::Physical(what) => f.write_str(what),
        }
    }
}

/// Per-cycle settings of [`ShipperSlot::decide`].
#[derive(Debug, Clone)]
pub(crate) struct DecideCtx {
    pub(crate) max_object: u64,
    pub(crate) max_cycle_bytes: u64,
    pub(crate) error_backoff_ms: i64,
    pub(crate) pages: PageCache,
}

/// A whole segment shipped again (compaction).
#[derive(Debug, Clone)]
pub(crate) struct Reship {
    /// Its base offset.
    pub(crate) lo: i64,
    /// The next segment's base offset.
    pub(crate) hi: i64,
    pub(crate) ranges: Vec<RangePlan>,
    pub(crate) fp: Fingerprint,
}

/// What a cycle ships for one partition: decided from local files, then
/// uploaded and committed by the shipper.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shipment {
    /// No manifest yet: commit version 1 even if nothing ships.
    pub(crate) first: bool,
    /// The manifest says deleted but the partition is back.
    pub(crate) undelete: bool,
    /// The partition dir is gone for good: publish it as deleted.
    pub(crate) mark_deleted: bool,
    /// Source divergence: cut the manifest back for this point.
    pub(crate) cut: Option<i64>,
    /// The source's log start.
    pub(crate) log_start: i64,
    /// On a tiered topic, where the source's remote storage starts
    /// (`SourceView::remote_log_start`).
    pub(crate) remote_log_start: Option<i64>,
    /// The source high watermark (or log end) recorded.
    pub(crate) hw: i64,
    /// The source's leader epoch checkpoint.
    pub(crate) source_epochs: Vec<EpochEntry>,
    /// The mirror origin to publish (`None`: keep the manifest's).
    pub(crate) origin: Option<Option<MirrorOrigin>>,
    /// The source topic's configs to publish (`None`: keep the manifest's).
    pub(crate) topic_configs:
        Option<std::collections::BTreeMap<String, manifest::topic_config::ConfigValue>>,
    /// Compacted segments shipped again.
    pub(crate) reships: Vec<Reship>,
    /// New ranges, in order.
    pub(crate) ranges: Vec<RangePlan>,
    /// Cursor and mark once every new range is committed.
    pub(crate) cursor_after: Option<Cursor>,
    pub(crate) mark_after: Option<BatchMark>,
    /// Rolled segments checked unchanged.
    pub(crate) confirm: Vec<(i64, Fingerprint)>,
    /// Fingerprints of the segments seen, by base offset.
    pub(crate) seg_fps: BTreeMap<i64, Fingerprint>,
    /// The plan stopped at its byte budget: more is waiting.
    pub(crate) capped: bool,
    /// Bytes planned (lag in bytes before this cycle's uploads).
    pub(crate) planned_bytes: u64,
}

impl Shipment {
    /// Keys that the version `m` (built from `base`) names and `base` does
    /// not: this cycle's uploads, unreferenced when `m` is not committed.
    pub(crate) fn jobs_keys_uploaded(
        &self,
        m: &PartitionManifest,
        base: Option<&PartitionManifest>,
    ) -> Vec<String> {
        let old: std::collections::HashSet<&str> = base
            .map(|b| b.ranges.iter().map(|r| r.key.as_str()).collect())
            .unwrap_or_default();
        m.ranges
            .iter()
            .filter(|r| !old.contains(r.key.as_str()))
            .map(|r| r.key.clone())
            .collect()
    }

    /// The objects to upload, in order: reshipped segments, then new ranges.
    pub(crate) fn jobs(&self) -> Vec<RangePlan> {
        self.reships
            .iter()
            .flat_map(|r| r.ranges.iter().cloned())
            .chain(self.ranges.iter().cloned())
            .collect()
    }
}

/// The shipper's slot for one source partition: what was shipped of it
/// (manifest, cursor, fingerprints), its health, lag and sweep state.
#[derive(Debug)]
pub(crate) struct ShipperSlot {
    pub(crate) tp: TopicPartition,
    /// The log dir root it was found in.
    pub(crate) root: PathBuf,
    /// Its identity in the bucket, once its topic id is known.
    pub(crate) pk: Option<PartitionKey>,
    /// The latest manifest version (ours, or adopted).
    pub(crate) manifest: Option<PartitionManifest>,
    /// True once `manifest` was read from the bucket for `pk`.
    pub(crate) loaded: bool,
    pub(crate) cursor: Option<Cursor>,
    /// The cursor segment's fingerprint when last checked.
    pub(crate) cursor_fp: Option<Fingerprint>,
    pub(crate) mark: Option<BatchMark>,
    /// Rolled segments known to match the manifest.
    pub(crate) confirmed: BTreeMap<i64, Fingerprint>,
    /// A source lineage already checked against the manifest.
    pub(crate) lineage_ok: Option<Vec<EpochEntry>>,
    pub(crate) health: Health,
    /// This broker's role for the partition by the broker's metadata, as
    /// of the last cycle (`None`: no metadata).
    pub(crate) role: Option<crate::leadership::Role>,
    pub(crate) missing_since_ms: Option<i64>,
    /// A bad batch at the end of the last segment seen once (a write in
    /// progress, or corruption if seen again).
    pub(crate) suspect_tail: Option<(PathBuf, u64)>,
    /// Pages to read before the next decision.
    pub(crate) pages_to_load: Vec<String>,
    /// Keys dropped from the manifest, with when (ms).
    pub(crate) dropped: BTreeMap<String, i64>,
    pub(crate) last_sweep_ms: Option<i64>,
    /// Something may have left unreferenced objects since the last sweep.
    pub(crate) dirty: bool,
    /// Last high watermark seen, and lag figures.
    pub(crate) hw: i64,
    pub(crate) lag_bytes: u64,
    pub(crate) caught_up_at_ms: i64,
    pub(crate) warned_no_topic_id: bool,
    /// When the bucket was last asked whether an operator acknowledged a
    /// gap of this partition (`crate::gaps::follow_acknowledgements`).
    pub(crate) ack_probe_at_ms: Option<i64>,
}

impl ShipperSlot {
    pub(crate) fn new(tp: TopicPartition, root: PathBuf, now_ms: i64) -> ShipperSlot {
        ShipperSlot {
            tp,
            root,
            pk: None,
            manifest: None,
            loaded: false,
            cursor: None,
            cursor_fp: None,
            mark: None,
            confirmed: BTreeMap::new(),
            lineage_ok: None,
            health: Health::Ok,
            role: None,
            missing_since_ms: None,
            suspect_tail: None,
            pages_to_load: Vec::new(),
            dropped: BTreeMap::new(),
            last_sweep_ms: None,
            dirty: false,
            hw: 0,
            lag_bytes: 0,
            caught_up_at_ms: now_ms,
            warned_no_topic_id: false,
            ack_probe_at_ms: None,
        }
    }

    /// Forgets everything derived from the bucket (a new chain, or after
    /// losing a commit): the next cycle reads the latest manifest again.
    pub(crate) fn reset(&mut self) {
        self.manifest = None;
        self.loaded = false;
        self.cursor = None;
        self.cursor_fp = None;
        self.mark = None;
        self.lineage_ok = None;
        self.suspect_tail = None;
    }

    pub(crate) fn shipped_end(&self) -> i64 {
        self.manifest.as_ref().map_or(0, |m| m.shipped_end_offset)
    }

    fn corrupt(&self, bad: &BadBatch) -> ShipperError {
        ShipperError::CorruptSource {
            tp: self.tp.clone(),
            path: bad.path.clone(),
            position: bad.error.position(),
            offset: bad.offset(),
            reason: bad.error.to_string(),
        }
    }

    fn source_err(&self, source: kafkalog::Error) -> ShipperError {
        match source {
            kafkalog::Error::Batch { path, source } => ShipperError::CorruptSource {
                tp: self.tp.clone(),
                path,
                position: source.position(),
                offset: BadBatch {
                    path: PathBuf::new(),
                    error: source.clone(),
                }
                .offset(),
                reason: source.to_string(),
            },
            source => ShipperError::Source {
                tp: self.tp.clone(),
                source: Box::new(source),
            },
        }
    }

    /// Positions the cursor at `end` from the source files. `Ok(Err(_))`
    /// when the source does not hold `end` the way it was shipped.
    fn resync(
        &mut self,
        view: &SourceView,
        end: i64,
        allow_straddle: bool,
    ) -> Result<Result<(), Anomaly>, ShipperError> {
        let located = locate(view, end).map_err(|e| self.source_err(e))?;
        let located = match located {
            Ok(l) => l,
            Err(bad) => return Err(self.corrupt(&bad)),
        };
        match located {
            Located::Behind { leo } => Ok(Err(Anomaly::Behind(leo))),
            Located::At {
                straddles: true,
                cursor,
                ..
            } if !allow_straddle => Ok(Err(Anomaly::Straddles(cursor.next_offset))),
            Located::At { cursor, prev, .. } => {
                if let (Some(p), Some(m)) = (prev, &self.manifest) {
                    let expected = m.lineage.epoch_for_offset(p.base_offset);
                    if p.epoch >= 0
                        && p.base_offset >= m.log_start_offset
                        && expected.is_some_and(|e| e != p.epoch)
                    {
                        return Ok(Err(Anomaly::Physical(format!(
                            "the batch at offset {} has leader epoch {} where the manifest's lineage says {:?}",
                            p.base_offset, p.epoch, expected
                        ))));
                    }
                }
                self.cursor = Some(cursor);
                self.cursor_fp = view
                    .segment_index(cursor.segment)
                    .map(|i| view.segments[i].fp);
                self.mark = prev;
                Ok(Ok(()))
            }
        }
    }

    /// Checks that the cursor and the last shipped batch are where they
    /// were. Cheap: nothing is read when the cursor's segment is unchanged.
    fn check_position(&mut self, view: &SourceView, c: Cursor) -> Result<(), Anomaly> {
        let Some(i) = view.segment_index(c.segment) else {
            return Err(Anomaly::Physical(format!(
                "segment {} (where shipping stopped, at offset {}) is gone",
                c.segment, c.next_offset
            )));
        };
        let seg = &view.segments[i];
        if self.cursor_fp == Some(seg.fp) {
            return Ok(());
        }
        if let Some(fp) = self.cursor_fp
            && !fp.same_file(&seg.fp)
        {
            return Err(Anomaly::Physical(format!(
                "{} was replaced by another file",
                seg.path.display()
            )));
        }
        if seg.size() < c.position {
            return Err(Anomaly::Physical(format!(
                "{} shrank to {} bytes, below the shipped position {}",
                seg.path.display(),
                seg.size(),
                c.position
            )));
        }
        if let Some(mk) = self.mark {
            let path = view
                .segment_index(mk.segment)
                .map(|j| view.segments[j].path.clone());
            let header = path
                .as_ref()
                .and_then(|p| read_header_at(p, mk.position).ok().flatten());
            let same = header.is_some_and(|h| {
                h.base_offset == mk.base_offset
                    && h.crc == mk.crc
                    && h.partition_leader_epoch == mk.epoch
            });
            if !same && mk.last_offset >= view.log_start {
                return Err(Anomaly::Physical(format!(
                    "the last shipped batch (offset {}) changed in the source",
                    mk.base_offset
                )));
            }
        }
        if seg.size() > c.position
            && let Ok(Some(h)) = read_header_at(&seg.path, c.position)
            && h.base_offset < c.next_offset
        {
            return Err(Anomaly::Physical(format!(
                "the batch after the shipped end starts at offset {} (below {})",
                h.base_offset, c.next_offset
            )));
        }
        self.cursor_fp = Some(seg.fp);
        Ok(())
    }

    /// Whether the source still holds range `r`: the log goes on past its
    /// last offset, no batch spans its edges, and every batch in it has the
    /// leader epoch the range recorded (batches missing inside it are
    /// compaction, not divergence).
    fn intact(&self, view: &SourceView, r: &ShippedRange) -> Result<bool, ShipperError> {
        let located = match locate(view, r.base_offset).map_err(|e| self.source_err(e))? {
            Ok(Located::At {
                cursor,
                straddles: false,
                ..
            }) => cursor,
            _ => return Ok(false),
        };
        let Some(start) = view.segment_index(located.segment) else {
            return Ok(false);
        };
        let expected = |offset: i64| {
            r.epochs
                .epoch_for_offset(offset)
                .or(r.epochs.earliest().map(|e| e.epoch))
        };
        let mut verdict: Option<bool> = None;
        walk(view, (start, located.position), false, |_, h, _| {
            if h.base_offset > r.last_offset {
                verdict = Some(true);
                return ControlFlow::Break(());
            }
            let epoch_ok = h.partition_leader_epoch < 0
                || expected(h.base_offset).is_none_or(|e| e == h.partition_leader_epoch);
            if !epoch_ok || h.last_offset() > r.last_offset {
                verdict = Some(false);
                return ControlFlow::Break(());
            }
            if h.last_offset() == r.last_offset {
                verdict = Some(true);
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| self.source_err(e))?;
        Ok(verdict.unwrap_or(false))
    }

    /// Where the manifest must be cut: after the newest range the source
    /// still holds (ranges below the source's log start cannot be checked
    /// and count as held). `Err(key)`: that page must be read first.
    fn divergence(
        &self,
        view: &SourceView,
        m: &PartitionManifest,
        anomaly: &Anomaly,
        pages: &PageCache,
    ) -> Result<Result<i64, String>, ShipperError> {
        let mut candidates: Vec<ShippedRange> = m.ranges.iter().rev().cloned().collect();
        let mut page_index = m.pages.len();
        loop {
            for r in &candidates {
                if r.last_offset < view.log_start || self.intact(view, r)? {
                    return Ok(Ok(r.last_offset + 1));
                }
            }
            if page_index == 0 {
                break;
            }
            page_index -= 1;
            let key = &m.pages[page_index].key;
            match cached_page(pages, key) {
                Some(rs) => candidates = rs.iter().rev().cloned().collect(),
                None => return Ok(Err(key.clone())),
            }
        }
        let oldest = m
            .pages
            .first()
            .map(|p| p.first_offset)
            .or(m.ranges.first().map(|r| r.base_offset));
        Ok(Ok(match (oldest, anomaly) {
            (Some(o), _) => o,
            (None, Anomaly::Behind(leo)) => (*leo).min(m.shipped_end_offset),
            (None, _) => m.shipped_end_offset,
        }))
    }

    /// Compares rolled segments behind the cursor with the manifest:
    /// a segment whose file changed and no longer matches its ranges was
    /// compacted, and is shipped again whole.
    fn inspect_compaction(
        &self,
        view: &SourceView,
        cursor: Cursor,
        ctx: &DecideCtx,
        work: &mut Shipment,
    ) -> Result<(), ShipperError> {
        let Some(m) = &self.manifest else {
            return Ok(());
        };
        let Some(ci) = view.segment_index(cursor.segment) else {
            return Ok(());
        };
        let immutable = rolled_segments_immutable(view.topic_configs.as_ref());
        for i in 0..ci {
            let seg = &view.segments[i];
            let known = self.confirmed.get(&seg.base);
            if known == Some(&seg.fp) {
                continue;
            }
            if immutable {
                // Nothing rewrites a rolled segment of a topic that is not
                // compacted; its boundaries may differ from the ranges'
                // (another replica's shipper shipped them, and replicas
                // roll at different offsets).
                work.confirm.push((seg.base, seg.fp));
                continue;
            }
            let hi = view.segments[i + 1].base;
            let in_pages = m
                .pages
                .iter()
                .any(|p| p.last_offset >= seg.base && p.first_offset < hi);
            let ranges: Vec<&ShippedRange> = m
                .ranges
                .iter()
                .filter(|r| r.segment_base_offset >= seg.base && r.segment_base_offset < hi)
                .collect();
            let first = read_header_at(&seg.path, 0)
                .map_err(|e| self.source_err(kafkalog::Error::io("read", &seg.path)(e)))?;
            let partial = first.is_none_or(|h| h.base_offset < m.log_start_offset);
            if in_pages || ranges.is_empty() || partial {
                if known.is_some() && in_pages {
                    tracing::warn!(partition = %self.tp, segment = seg.base, "a compacted segment's ranges are sealed in a page: not shipped again (the destination keeps the uncompacted version)");
                }
                work.confirm.push((seg.base, seg.fp));
                continue;
            }
            let expected_size: u64 = ranges.iter().map(|r| r.bytes).sum();
            let expected_first = ranges[0].base_offset;
            let mut changed = seg.size() != expected_size
                || first.is_none_or(|h| h.base_offset != expected_first);
            if !changed && known.is_some() {
                // Same size and first batch, but another file: compare
                // every range's bytes.
                changed = !same_bytes(&seg.path, &ranges)
                    .map_err(|e| self.source_err(kafkalog::Error::io("read", &seg.path)(e)))?;
            }
            if !changed {
                work.confirm.push((seg.base, seg.fp));
                continue;
            }
            let generation = ranges
                .iter()
                .map(|r| r.segment_generation)
                .max()
                .unwrap_or(0)
                + 1;
            match plan_segment(view, i, generation, ctx.max_object)
                .map_err(|e| self.source_err(e))?
            {
                Ok(plans) if !plans.is_empty() => {
                    tracing::info!(partition = %self.tp, segment = seg.base, generation, "a rolled segment changed after it was shipped (compacted): shipping it again");
                    work.reships.push(Reship {
                        lo: seg.base,
                        hi,
                        ranges: plans,
                        fp: seg.fp,
                    });
                }
                Ok(_) => work.confirm.push((seg.base, seg.fp)),
                Err(bad) => return Err(self.corrupt(&bad)),
            }
        }
        Ok(())
    }

    /// One cycle's decision from the local files. `Ok(None)`: nothing to
    /// commit.
    pub(crate) fn decide(
        &mut self,
        view: &SourceView,
        ctx: &DecideCtx,
    ) -> Result<Option<Shipment>, ShipperError> {
        let mut work = Shipment {
            first: self.manifest.is_none(),
            log_start: view.log_start,
            remote_log_start: view.remote_log_start,
            source_epochs: view.epochs.clone(),
            seg_fps: view.segments.iter().map(|s| (s.base, s.fp)).collect(),
            ..Shipment::default()
        };
        let m = self.manifest.clone();
        if view.segments.is_empty() {
            // Being created (Kafka always keeps a segment): wait for it.
            return Ok(m.is_none().then_some(work));
        }
        if m.as_ref().is_some_and(|m| m.deleted) {
            tracing::warn!(partition = %self.tp, "a partition published as deleted is back: shipping it again");
            work.undelete = true;
        }
        let has_ranges = m
            .as_ref()
            .is_some_and(|m| !m.ranges.is_empty() || !m.pages.is_empty());
        let mut end = m.as_ref().map_or(view.log_start, |m| m.shipped_end_offset);
        let mut jumped = false;
        if view.log_start > end {
            // The gap is recorded by the version this commits, and logged
            // (ERROR, once) when it is committed: `crate::gaps`.
            end = view.log_start;
            jumped = true;
            self.cursor = None;
        }
        let mut anomaly = match self.cursor {
            None => self.resync(view, end, !has_ranges || jumped)?.err(),
            Some(c) => self.check_position(view, c).err(),
        };
        if anomaly.is_none()
            && has_ranges
            && !jumped
            && self.lineage_ok.as_ref() != Some(&view.epochs)
        {
            // The source's checkpoint read as Kafka reads it.
            let (remote, _) = EpochLineage::from_checkpoint_entries(view.epochs.iter().copied());
            if let Some(m) = &m
                && !m.lineage.is_empty()
                && !remote.is_empty()
            {
                let p = divergence_point(&m.lineage, end, &remote, end);
                if p < end {
                    anomaly = Some(Anomaly::Lineage(p));
                }
            }
            if anomaly.is_none() {
                self.lineage_ok = Some(view.epochs.clone());
            }
        }
        if let (Some(a), Some(m)) = (&anomaly, &m) {
            let point = match self.divergence(view, m, a, &ctx.pages)? {
                Ok(p) => p,
                Err(page) => {
                    self.pages_to_load.push(page);
                    return Ok(None);
                }
            };
            if point < end {
                tracing::warn!(partition = %self.tp, reason = %a, shipped_end = end, cut_to = point, "the source no longer holds what was shipped (unclean leader election or truncation): cutting the manifest back");
                work.cut = Some(point);
                work.hw = view.hw.unwrap_or(point);
                self.cursor = None;
                self.mark = None;
                self.lineage_ok = None;
                return Ok(Some(work));
            }
            tracing::debug!(partition = %self.tp, reason = %a, "the source still holds everything shipped (its leader epoch checkpoint lags behind its batches)");
            self.lineage_ok = Some(view.epochs.clone());
            self.cursor = None;
            if let Err(a) = self.resync(view, end, jumped)? {
                return Err(ShipperError::Inconsistent {
                    tp: self.tp.clone(),
                    reason: format!(
                        "the newest shipped range is intact in the source but the shipped end {end} cannot be found there ({a})"
                    ),
                });
            }
        } else if let Some(a) = anomaly {
            // No manifest: nothing was shipped, so nothing can diverge; the
            // log ends below its log start (empty): wait at its end.
            tracing::debug!(partition = %self.tp, reason = %a, "nothing to ship yet");
            let Some(last) = view.segments.last() else {
                return Ok(m.is_none().then_some(work));
            };
            self.cursor = Some(Cursor {
                segment: last.base,
                position: last.size(),
                next_offset: end,
            });
            self.cursor_fp = Some(last.fp);
        }
        let Some(cursor) = self.cursor else {
            return Ok(m.is_none().then_some(work));
        };
        self.inspect_compaction(view, cursor, ctx, &mut work)?;
        let tail = plan_tail(view, cursor, self.mark, ctx.max_object, ctx.max_cycle_bytes)
            .map_err(|e| self.source_err(e))?;
        match &tail.stop {
            TailStop::Bad {
                bad,
                in_last_segment,
            } => {
                let spot = (bad.path.clone(), bad.error.position());
                if *in_last_segment && self.suspect_tail.as_ref() != Some(&spot) {
                    // Perhaps a write in progress: look again next cycle.
                    self.suspect_tail = Some(spot);
                } else if tail.ranges.is_empty() {
                    return Err(self.corrupt(bad));
                }
            }
            TailStop::Capped => work.capped = true,
            _ => self.suspect_tail = None,
        }
        work.hw = view.hw.unwrap_or(match tail.stop {
            TailStop::EndOfLog => tail.cursor.next_offset,
            _ => end.max(self.hw),
        });
        self.hw = work.hw;
        work.planned_bytes = tail.bytes
            + work
                .reships
                .iter()
                .flat_map(|r| &r.ranges)
                .map(RangePlan::bytes)
                .sum::<u64>();
        work.ranges = tail.ranges;
        work.cursor_after = Some(tail.cursor);
        work.mark_after = tail.mark;
        if let Ok(origin) = &view.origin
            && m.as_ref().is_none_or(|m| &m.mirror_origin != origin)
        {
            work.origin = Some(origin.clone());
        }
        if let Some(configs) = &view.topic_configs
            && m.as_ref()
                .is_none_or(|m| m.topic_configs.as_ref() != Some(configs))
        {
            work.topic_configs = Some(configs.clone());
        }
        let log_start_moved = m
            .as_ref()
            .is_some_and(|m| view.log_start > m.log_start_offset);
        let commit = work.first
            || work.undelete
            || jumped
            || log_start_moved
            || work.origin.is_some()
            || work.topic_configs.is_some()
            || !work.ranges.is_empty()
            || !work.reships.is_empty();
        if commit {
            return Ok(Some(work));
        }
        // Nothing to publish: the cursor may still have stepped over
        // segments, and segments may have been checked.
        self.cursor = work.cursor_after;
        if let Some(c) = self.cursor {
            self.cursor_fp = work.seg_fps.get(&c.segment).copied();
        }
        self.mark = work.mark_after.or(self.mark);
        self.confirm_segments(&work);
        self.lag_bytes = 0;
        Ok(None)
    }

    /// Records rolled segments as matching the manifest: those checked,
    /// and those the cursor has passed.
    pub(crate) fn confirm_segments(&mut self, work: &Shipment) {
        for (base, fp) in &work.confirm {
            self.confirmed.insert(*base, *fp);
        }
        if let Some(c) = self.cursor {
            for (base, fp) in work.seg_fps.range(..c.segment) {
                self.confirmed.entry(*base).or_insert(*fp);
            }
        }
        // Segments deleted by retention.
        self.confirmed.retain(|b, _| work.seg_fps.contains_key(b));
    }

    /// Moves the partition's health by `event` ([`health::next`]) and
    /// forgets what the transition says. Returns whether the partition is
    /// shipped this cycle.
    pub(crate) fn apply_health(&mut self, event: HealthEvent) -> bool {
        let step = health::next(&self.health, event);
        match step.forget {
            Forget::Nothing => {}
            Forget::Position => {
                self.cursor = None;
                self.suspect_tail = None;
            }
            Forget::BucketState => self.reset(),
        }
        self.health = step.to;
        step.ships
    }

    /// A corrupt or unreadable source stops the partition until the error
    /// back-off has passed.
    pub(crate) fn fail(&mut self, e: &ShipperError, now_ms: i64, backoff_ms: i64) {
        tracing::error!(partition = %self.tp, error = %e, "partition stopped: not shipping it until the error is fixed (retried in {}s)", backoff_ms / 1000);
        self.apply_health(HealthEvent::Stopped {
            error: e.to_string(),
            retry_at_ms: now_ms + backoff_ms,
        });
    }
}

/// True when the segment's bytes are, range after range from its start,
/// those the ranges were shipped with (same sizes and CRC-32C).
/// Whether the rolled segments of a topic with `configs` (as the broker's
/// metadata gives them; `None`: unknown) never change: the topic is not
/// compacted (`cleanup.policy`, whose default is `delete`, has no
/// `compact`, as `manifest::topic_config::Enforcement` reads it; configs it
/// refuses count as unknown). Only then may a rolled segment be confirmed
/// without comparing it with the manifest's ranges.
pub(crate) fn rolled_segments_immutable(configs: Option<&BTreeMap<String, ConfigValue>>) -> bool {
    configs
        .and_then(|c| Enforcement::of(c).ok())
        .is_some_and(|e| !e.compact)
}

fn same_bytes(path: &std::path::Path, ranges: &[&ShippedRange]) -> std::io::Result<bool> {
    use std::io::Read;
    let mut f = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut buf = vec![0u8; 1 << 20];
    for r in ranges {
        let mut left = r.bytes;
        let mut digest = kafkalog::batch::Crc32cDigest::new();
        while left > 0 {
            let n = (left as usize).min(buf.len());
            f.read_exact(&mut buf[..n])?;
            digest.update(&buf[..n]);
            left -= n as u64;
        }
        if digest.value() != r.crc32c {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use manifest::topic_config::ConfigSource;

    use super::*;

    type Configs = BTreeMap<String, ConfigValue>;

    #[test]
    fn rolled_segments_are_immutable_only_when_the_topic_is_known_not_compacted() {
        let with = |policy: Option<&str>| {
            let mut c = BTreeMap::new();
            c.insert(
                "retention.ms".to_string(),
                ConfigValue {
                    value: "1".into(),
                    source: ConfigSource::Topic,
                },
            );
            if let Some(p) = policy {
                c.insert(
                    "cleanup.policy".to_string(),
                    ConfigValue {
                        value: p.into(),
                        source: ConfigSource::Topic,
                    },
                );
            }
            c
        };
        #[rustfmt::skip]
        let rows: Vec<(&str, Option<Configs>, bool)> = vec![
            ("configs unknown (no metadata)", None, false),
            ("the default policy (delete)", Some(with(None)), true),
            ("delete", Some(with(Some("delete"))), true),
            ("compact", Some(with(Some("compact"))), false),
            ("compact,delete", Some(with(Some("compact,delete"))), false),
            ("delete, compact with a space", Some(with(Some("delete, compact"))), false),
        ];
        for (name, configs, want) in rows {
            assert_eq!(rolled_segments_immutable(configs.as_ref()), want, "{name}");
        }
    }
}
