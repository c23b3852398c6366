//! `applier plan`: what `start` or `once` would do to each partition, and
//! why, without doing it (like `litestream restore -dry-run`).
//!
//! Invariant: nothing is written, locally or in the bucket. The log dir is
//! read without its lock through `kafkalog::reader` (safe beside a running
//! daemon), and the bucket through GETs and one LIST of the feed's heads.
//! The plans are the ones the applier executes (`manifest::reconcile`),
//! computed from the same inputs; only a torn tail that the applier's
//! recovery would cut first can make the real run's log end differ. A cut
//! of the partition's own records is shown (`cut`) and, unless the start
//! that made it PREPARING allowed it, is what `start`/`once` would refuse
//! without `--allow-truncate` (`manifest::cut::check`, the same call).

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;

use bucket::store::ManifestStore;
use kafkalog::checkpoint::{self, LOG_START_OFFSET_CHECKPOINT};
use kafkalog::epoch::EpochLineage;
use kafkalog::reader::{self, PartitionReader};
use kafkalog::{TopicId, TopicPartition};
use manifest::layout::PartitionKey;
use manifest::mirror_record::MirrorRecord;
use manifest::partition::PartitionManifest;
use manifest::reconcile::{self, LocalLog, Plan, Surroundings};
use manifest::state::PartitionState;
use serde::Serialize;

use crate::mirror::new_record;
use crate::options::ApplierOptions;
use crate::schedule::{self, PartitionView, Work};
use manifest::topic_pattern::Selection;

/// Why `applier plan` could not plan (one partition's unreadable files
/// are a row, not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The log dir does not exist.
    #[error("log dir {} does not exist", .0.display())]
    NoLogDir(std::path::PathBuf),
    /// Listing the log dir failed.
    #[error(transparent)]
    LogDir(#[from] kafkalog::Error),
    /// A mirror record cannot be read.
    #[error(transparent)]
    Record(#[from] partdir::record::MirrorRecordError),
    /// The bucket (the feed or a manifest) could not be read.
    #[error(transparent)]
    Store(#[from] bucket::store::StoreError),
}

/// What `start`/`once` would run on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanAction {
    /// Preparation (a new mirror, PREPARING, or a `start` of a STOPPED or
    /// FAILED one).
    Start,
    /// MIRRORING's follower step and fetching.
    Fetch,
    /// Nothing.
    None,
}

impl PlanAction {
    /// The word in `applier plan`'s table and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanAction::Start => "start",
            PlanAction::Fetch => "fetch",
            PlanAction::None => "none",
        }
    }
}

impl std::fmt::Display for PlanAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// What would happen to one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionPlan {
    /// `topic-partition`.
    pub partition: String,
    /// Its mirror state now (`None`: not a mirror here yet).
    pub state: Option<String>,
    /// What would run.
    pub action: PlanAction,
    /// Why, in one line (also when nothing would be done).
    pub summary: String,
    /// The local log end now.
    pub log_end_offset: Option<i64>,
    /// The plan's steps and where fetching starts, when it has one.
    pub plan: Option<Plan>,
    /// Objects and bytes that would be fetched from `fetch_from` on.
    pub fetch_objects: u64,
    /// Bytes of those objects.
    pub fetch_bytes: u64,
    /// Why the partition would be refused (it would go FAILED, or, for a
    /// cut of its own records without `--allow-truncate`, stay as it is).
    pub refused: Option<String>,
    /// Records of the partition's own that the plan cuts and the source
    /// does not give back (`manifest::cut`): a start needs
    /// `--allow-truncate` for them. `None`: nothing of its own is cut.
    pub cut: Option<manifest::mirror_record::Cut>,
}

/// The local log as `kafkalog::reader` sees it, without the lock.
pub(crate) struct LocalSummary {
    topic_id: Option<TopicId>,
    lineage: EpochLineage,
    log_start: i64,
    pub(crate) log_end: i64,
}

impl LocalSummary {
    /// Whether the log holds records.
    pub(crate) fn has_records(&self) -> bool {
        self.log_end > self.log_start
    }

    /// The log as the planners see it.
    pub(crate) fn view(&self) -> LocalLog<'_> {
        LocalLog {
            topic_id: self.topic_id,
            lineage: &self.lineage,
            log_start_offset: self.log_start,
            log_end_offset: self.log_end,
        }
    }
}

/// Reads `tp` of log dir `root` (no lock, nothing written).
pub(crate) fn local_summary(
    root: &Path,
    tp: &TopicPartition,
) -> Result<LocalSummary, kafkalog::Error> {
    let r = PartitionReader::open(root, tp)?;
    let segments = r.segments()?;
    let log_starts = checkpoint::read_offset_checkpoint(&root.join(LOG_START_OFFSET_CHECKPOINT))?;
    let first_base = segments.first().map_or(0, |s| s.base_offset);
    let log_start = log_starts
        .get(tp)
        .copied()
        .unwrap_or(first_base)
        .max(first_base);
    let log_end = match segments.last() {
        Some(last) => r
            .for_each_batch(last.base_offset, false, |_, _| ControlFlow::Continue(()))?
            .max(last.base_offset),
        None => log_start,
    };
    // As the log loads it (Kafka's rule: entries that break the order are
    // dropped), so the plan sees what the applier would.
    let (lineage, _dropped) = EpochLineage::from_checkpoint_entries(r.epoch_entries()?);
    Ok(LocalSummary {
        topic_id: r.metadata()?.map(|m| m.topic_id),
        lineage,
        log_start,
        log_end,
    })
}

/// The plans of every mirror partition of `opts.log_dir`, and of every
/// partition of the bucket that `opts.topics` selects and that is not a
/// mirror here yet, in partition order.
pub async fn plan_all(
    opts: &ApplierOptions,
    store: &ManifestStore,
) -> Result<Vec<PartitionPlan>, PlanError> {
    let root = &opts.log_dir;
    if !root.is_dir() {
        return Err(PlanError::NoLogDir(root.clone()));
    }
    // The feed read as the applier's first poll reads it.
    let mut feed = crate::feed::FeedReader::default();
    feed.poll(store).await?;
    let head = feed.head();
    let mut records: BTreeMap<TopicPartition, MirrorRecord> = BTreeMap::new();
    for tp in reader::list_partitions(root)? {
        if let Some(r) = partdir::record::read(&root.join(tp.dir_name()))? {
            records.insert(tp, r);
        }
    }
    let mut targets: BTreeMap<TopicPartition, Option<MirrorRecord>> =
        records.into_iter().map(|(tp, r)| (tp, Some(r))).collect();
    if let Some(h) = head {
        let selection = Selection {
            include: opts.topics.as_ref(),
            exclude: opts.exclude.as_ref(),
        };
        for (tp, _, _) in selection.pick(h) {
            targets.entry(tp).or_insert(None);
        }
    }
    let here = Surroundings {
        local_cluster_id: opts.local_cluster_id.as_deref(),
        tiered_storage: false,
    };
    // Damage `applier verify` or the scrub recorded: `start` cuts it first.
    let verified = crate::verify::VerifyRecord::read(root).unwrap_or_default();
    let mut out = Vec::new();
    for (tp, record) in targets {
        let entry = feed.entry(&tp);
        let state = record.as_ref().map(|r| r.state.state());
        let local = if root.join(tp.dir_name()).is_dir() {
            match local_summary(root, &tp) {
                Ok(l) => Some(l),
                Err(e) => {
                    // This partition's files, not the plan: the others go on.
                    out.push(PartitionPlan {
                        partition: tp.to_string(),
                        state: state.map(|s| s.as_str().to_string()),
                        action: PlanAction::None,
                        summary: format!(
                            "cannot read the local partition: {}",
                            crate::error::in_words(&e)
                        ),
                        log_end_offset: None,
                        plan: None,
                        fetch_objects: 0,
                        fetch_bytes: 0,
                        refused: None,
                        cut: None,
                    });
                    continue;
                }
            }
        } else {
            None
        };
        let mut row = PartitionPlan {
            partition: tp.to_string(),
            state: state.map(|s| s.as_str().to_string()),
            action: PlanAction::None,
            summary: String::new(),
            log_end_offset: local.as_ref().map(|l| l.log_end),
            plan: None,
            fetch_objects: 0,
            fetch_bytes: 0,
            refused: None,
            cut: None,
        };
        // The applier's own schedule on the partition as read from disk
        // (`crate::schedule`), or, where it has no work, what `start` does.
        let work = record.as_ref().map(|r| {
            // As read from disk: no manifest held, no retry scheduled
            // (`once` makes every retry due; `plan` shows what it would do).
            let bounds = local.as_ref().map_or((0, 0), |l| (l.log_start, l.log_end));
            let view = PartitionView::of_record(r, bounds, entry, None);
            schedule::plan_partition(&view, true, crate::clock::now_ms()).work
        });
        if let (Some(Work::SourceRecreated { topic_id }), Some(r)) = (&work, &record) {
            let reason = crate::error::MirrorError::SourceRecreated {
                tp: tp.clone(),
                old: r.topic_id,
                new: *topic_id,
            }
            .to_string();
            row.summary = format!("would go FAILED: {reason}");
            row.refused = Some(reason);
            out.push(row);
            continue;
        }
        if let (Some(r), Some(l), Some(state)) = (&record, &local, state)
            && r.source_cluster_id == opts.source_cluster_id
            && let Some(refusal) =
                crate::command_plan::recreated_refusal(state, entry.map(|e| e.topic_id), &l.view())
        {
            row.action = PlanAction::Start;
            row.summary = format!("start refused: {refusal}");
            row.refused = Some(refusal.to_string());
            out.push(row);
            continue;
        }
        let action = match (state, &work) {
            // A new partition, or one only an operator's `start` (or
            // `once`'s retry) moves on.
            (None | Some(PartitionState::Stopped | PartitionState::Failed), _) => PlanAction::Start,
            (_, Some(Work::Prepare)) => PlanAction::Start,
            (Some(PartitionState::Mirroring), _) => PlanAction::Fetch,
            (_, Some(Work::Failover)) => {
                row.summary =
                    "STOPPING: the failover completes when the applier opens the log dir".into();
                out.push(row);
                continue;
            }
            _ => {
                row.summary = "PAUSED: nothing is fetched until `applier resume`".into();
                out.push(row);
                continue;
            }
        };
        // The record the run would use: a new one, or the existing one
        // re-pinned to the configured source by `start`.
        let topic_id = entry.map(|e| e.topic_id);
        let record = match record {
            Some(mut r) => {
                // `start`'s pin rules (`command_plan`): a STOPPED or FAILED
                // partition is pinned to the configured source.
                if action == PlanAction::Start
                    && matches!(
                        state,
                        Some(PartitionState::Stopped) | Some(PartitionState::Failed)
                    )
                {
                    r.source_cluster_id = opts.source_cluster_id.clone();
                    if let Some(id) = topic_id {
                        r.topic_id = id;
                    }
                }
                r
            }
            None => {
                let Some(id) = topic_id else {
                    row.summary = "not in the source's bucket".into();
                    out.push(row);
                    continue;
                };
                let mut r = new_record(&opts.source_cluster_id, id, manifest::state::initial().0);
                r.failback_pending = local.as_ref().is_some_and(|l| l.log_end > l.log_start);
                r
            }
        };
        let Some(entry) = entry.filter(|e| e.topic_id == record.topic_id) else {
            row.summary = format!(
                "no manifest of topic id {} in the source's bucket yet: would wait",
                record.topic_id
            );
            out.push(row);
            continue;
        };
        let key = PartitionKey {
            tp: tp.clone(),
            topic_id: record.topic_id,
        };
        let manifest = store.manifest_of(&key, entry).await?;
        let empty = EpochLineage::default();
        let cuts: Vec<i64> = verified
            .damage_of(&tp.to_string())
            .iter()
            .filter_map(|d| d.cut_offset)
            .collect();
        let damage_cut = if cuts.is_empty() {
            None
        } else if action != PlanAction::Start {
            row.summary = format!(
                "local damage recorded (applier status): the next applier to open the log dir fails it, and `start` cuts the log back to {} and fetches it again",
                cuts.iter().min().copied().unwrap_or_default()
            );
            out.push(row);
            continue;
        } else {
            match crate::repair::mirror_cut(&cuts, manifest.log_start_offset) {
                Ok(cut) => cut,
                Err(reason) => {
                    row.action = action;
                    row.summary = format!("refused, would go FAILED: {reason}");
                    row.refused = Some(reason);
                    out.push(row);
                    continue;
                }
            }
        };
        let local = local.map(|l| LocalSummary {
            log_end: damage_cut.map_or(l.log_end, |c| l.log_end.min(c)),
            lineage: damage_cut.map_or(l.lineage.clone(), |c| l.lineage.held_by(c)),
            ..l
        });
        let view = match &local {
            Some(l) => l.view(),
            None => LocalLog {
                topic_id: None,
                lineage: &empty,
                log_start_offset: 0,
                log_end_offset: 0,
            },
        };
        let here = Surroundings {
            tiered_storage: opts.tiered_topics.iter().any(|t| t == &tp.topic),
            ..here
        };
        // As the run does: the manifest's topic configs (through the filter)
        // are in the record before the preparation is planned.
        let mut record = record;
        crate::topic_configs::record_configs(&mut record, &manifest, &opts.config_filter);
        let planned = if action == PlanAction::Start {
            reconcile::plan_preparation(&tp, &record, &manifest, &view, &here)
        } else {
            reconcile::check_manifest_identity(
                record.topic_id,
                &record.source_cluster_id,
                &manifest,
            )
            .and_then(|()| reconcile::plan_follow(&manifest, &view))
        };
        row.action = action;
        // A cut of the partition's own records needs --allow-truncate
        // (unless the start that made it PREPARING was given it).
        let guard = match (&planned, action) {
            (Ok(plan), PlanAction::Start) => {
                manifest::cut::check(&record, plan, &view, &manifest, record.truncate_allowed)
            }
            _ => Ok(None),
        };
        match guard {
            Ok(cut) => row.cut = cut,
            Err(refusal) => {
                if let reconcile::Refusal::WouldCut { cut } = &refusal {
                    row.cut = Some(*cut);
                }
                row.refused = Some(refusal.to_string());
            }
        }
        match planned {
            Ok(plan) => {
                let (objects, bytes) = to_fetch(&manifest, plan.fetch_from);
                row.fetch_objects = objects;
                row.fetch_bytes = bytes;
                let mut steps: Vec<String> = plan.steps.iter().map(ToString::to_string).collect();
                if let Some(cut) = damage_cut {
                    steps.insert(
                        0,
                        format!("cut the recorded local damage back to {cut} (applier verify)"),
                    );
                }
                row.summary = format!(
                    "{}{}{}fetch from {} ({objects} objects, {bytes} bytes; source shipped to {})",
                    match (&row.refused, &row.cut) {
                        (Some(why), _) => format!("refused: {why}; with --allow-truncate: "),
                        (None, Some(cut)) => format!("cuts {cut} of its own (allowed); "),
                        (None, None) => String::new(),
                    },
                    steps.join("; "),
                    if steps.is_empty() { "" } else { "; then " },
                    plan.fetch_from,
                    manifest.shipped_end_offset
                );
                row.plan = Some(plan);
            }
            Err(refusal) => {
                row.summary = format!("refused, would go FAILED: {refusal}");
                row.refused = Some(refusal.to_string());
            }
        }
        out.push(row);
    }
    Ok(out)
}

/// Objects (inline ranges and paged ranges, counted by page) and bytes of
/// `m` from `offset` on.
fn to_fetch(m: &PartitionManifest, offset: i64) -> (u64, u64) {
    let inline = m.inline_ranges_from(offset);
    let pages = m.pages_from(offset);
    (
        inline.len() as u64 + pages.iter().map(|p| u64::from(p.ranges)).sum::<u64>(),
        inline.iter().map(|r| r.bytes).sum::<u64>() + pages.iter().map(|p| p.bytes).sum::<u64>(),
    )
}

/// The plans as a table, one line per partition.
pub fn table(rows: &[PartitionPlan]) -> String {
    let mut out = String::new();
    let width = rows
        .iter()
        .map(|r| r.partition.len())
        .max()
        .unwrap_or(9)
        .max(9);
    out.push_str(&format!(
        "{:<width$}  {:<10}  {:<6}  WHAT AND WHY\n",
        "PARTITION", "STATE", "ACTION"
    ));
    for r in rows {
        out.push_str(&format!(
            "{:<width$}  {:<10}  {:<6}  {}\n",
            r.partition,
            r.state.as_deref().unwrap_or("(new)"),
            r.action,
            r.summary
        ));
    }
    out
}
