//! The source's consumer-group offsets, applied to this log dir's
//! `__consumer_offsets` (the store the Kafka gateway serves), by the rules
//! of `manifest::groups::decide`: only for mirror partitions of this source
//! that are still mirroring (MIRRORING or PAUSED), never for a group with
//! members here, clamped to `[log start, log end]` of the local log (with
//! the local leader epoch at the clamped offset), never over a newer commit
//! of this destination's own consumers; a source tombstone deletes what
//! sync wrote.
//!
//! When: after every cycle's partition steps, when the feed names a newer
//! version (read from the bucket: one GET per delta), when anything was
//! appended or changed state in the cycle (a clamped offset moves up as
//! the mirror catches up), and every [`RECHECK`] (a group that had members
//! may have none now). A pass reads nothing from the bucket or the disk:
//! the local offsets come from the group coordinator (the gateway's, or one
//! loaded from the log dir at the first pass).
//!
//! Writes go through the engine (the log dir's single writer): one batch
//! per group into its `__consumer_offsets` partition, commit timestamps as
//! the source's, then the coordinator's memory, then the record
//! (`<log-dir>/.segmirror/group-sync.json`, written atomically) naming
//! what was synced. A crash between the two converges: the next pass finds
//! the offsets it wrote, with the source's timestamps, and writes them
//! again at most.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::LogView;
use gateway::groups::Coordinator;
use kafkalog::TopicPartition;
use kafkalog::offsets_topic::{self, Committed, OFFSETS_TOPIC};
use manifest::groups::{
    GroupEntry, GroupsState, KeepReason, LocalCommit, LocalPartition, SyncAction, decide,
};
use manifest::state::PartitionState;
use serde::{Deserialize, Serialize};

use std::path::Path;

use bucket::store::ManifestStore;
use manifest::groups::GroupsPointer;

use crate::error::StateFileError;
use crate::slot::Slot;

/// How often a pass runs when nothing else calls for one.
pub const RECHECK: Duration = Duration::from_secs(10);

/// How often the record is rewritten when only its last success moved.
const RECORD_REFRESH: Duration = Duration::from_secs(60);

/// One offset sync wrote, as it wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncedOffset {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset written (the source's, clamped).
    pub offset: i64,
    /// The leader epoch written.
    pub leader_epoch: i32,
    /// The metadata written.
    pub metadata: String,
    /// The source's commit timestamp, written as the commit's.
    pub commit_timestamp: i64,
    /// When it was written (ms since the epoch, this host's clock).
    pub synced_at_ms: i64,
}

impl SyncedOffset {
    fn as_local(&self) -> LocalCommit {
        LocalCommit {
            offset: self.offset,
            leader_epoch: self.leader_epoch,
            metadata: self.metadata.clone(),
            commit_timestamp: self.commit_timestamp,
        }
    }
}

/// The sync's durable record: the source's groups as last read, and what
/// was written of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRecord {
    /// The source cluster the groups are of.
    pub source_cluster_id: String,
    /// The version of the source's group offsets read.
    pub version: u64,
    /// When the shipper wrote that version (ms since the epoch).
    #[serde(default)]
    pub version_written_at_ms: i64,
    /// The source's groups at that version.
    pub groups: Vec<GroupEntry>,
    /// What sync wrote and has not deleted since.
    pub synced: Vec<SyncedOffset>,
    /// When a pass last completed (ms since the epoch).
    #[serde(default)]
    pub last_success_ms: Option<i64>,
    /// Why the last pass failed, when it did.
    #[serde(default)]
    pub last_error: Option<String>,
}

impl SyncRecord {
    /// Reads the record of `log_dir` (`None` when there is none).
    pub fn read(log_dir: &Path) -> Result<Option<SyncRecord>, StateFileError> {
        let path = crate::state_dir::group_sync_path(log_dir);
        match kafkalog::fsutil::read_optional(&path)? {
            None => Ok(None),
            Some(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|source| StateFileError::Damaged {
                        path,
                        what: "group sync record",
                        source,
                    })
            }
        }
    }

    fn write(&self, log_dir: &Path) -> Result<(), StateFileError> {
        let path = crate::state_dir::group_sync_path(log_dir);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StateFileError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let bytes = serde_json::to_vec(self).map_err(|source| StateFileError::Encode {
            path: path.clone(),
            source,
        })?;
        kafkalog::fsutil::write_atomic(&path, &bytes, true)?;
        Ok(())
    }

    /// One line for `applier status`: version, counts, last success.
    pub fn summary(&self, now_ms: i64) -> String {
        let last = match self.last_success_ms {
            Some(t) => format!("last synced {}s ago", ((now_ms - t).max(0) + 500) / 1000),
            None => "never synced".to_string(),
        };
        let error = self
            .last_error
            .as_deref()
            .map(|e| format!("; last error: {e}"))
            .unwrap_or_default();
        format!(
            "consumer-group offsets of {}: version {}, {} groups, {} offsets synced; {last}{error}",
            self.source_cluster_id,
            self.version,
            self.groups.len(),
            self.synced.len()
        )
    }

    /// The source's groups as a state.
    pub fn state(&self) -> GroupsState {
        GroupsState {
            groups: self
                .groups
                .iter()
                .map(|g| (g.group.clone(), g.clone()))
                .collect(),
        }
    }
}

/// The applier's group offsets sync (the shipper has its own
/// `GroupSync`, which reads the source's offsets).
#[derive(Debug, Default)]
pub struct GroupOffsetsSync {
    record: Option<SyncRecord>,
    /// The coordinator to read local offsets from when no gateway runs.
    own: Option<Arc<Coordinator>>,
    last_pass: Option<Instant>,
    /// When the record was last written.
    last_write: Option<Instant>,
    /// Offsets written since the applier started.
    pub written: u64,
    /// Offsets deleted since the applier started.
    pub deleted: u64,
    /// Offsets held below the source's (clamped to the mirror's log) as of
    /// the last pass.
    pub clamped: u64,
}

/// Appends one batch to a `__consumer_offsets` partition and flushes it
/// (the log dir's single writer); the error in words.
pub(crate) type WriteOffsets<'a> = dyn FnMut(&TopicPartition, &mut [u8]) -> Result<(), String> + 'a;

/// What one pass reads and where it writes: plain values from the
/// applier.
pub(crate) struct Pass<'a> {
    /// The bucket.
    pub(crate) store: &'a ManifestStore,
    /// The feed's pointer to the source's group offsets, if any.
    pub(crate) pointer: Option<GroupsPointer>,
    /// The source cluster mirrored.
    pub(crate) source_cluster: &'a str,
    /// The log dir.
    pub(crate) log_dir: &'a Path,
    /// Every partition's slot (read only).
    pub(crate) slots: &'a BTreeMap<TopicPartition, Slot>,
    /// The gateway's coordinator, when one runs.
    pub(crate) gateway_groups: Option<Arc<Coordinator>>,
    /// Something was appended or changed state in the cycle.
    pub(crate) moved: bool,
    /// Appends one batch to a `__consumer_offsets` partition and flushes
    /// it (the log dir's single writer).
    pub(crate) write: &'a mut WriteOffsets<'a>,
}

impl GroupOffsetsSync {
    /// The record as last loaded or written.
    pub fn record(&self) -> Option<&SyncRecord> {
        self.record.as_ref()
    }

    /// One pass of the group offsets sync (see the module docs). A failure
    /// is logged and kept in the record; the next cycle tries again.
    /// Returns true when the record changed (the live status shows it).
    pub(crate) async fn pass(&mut self, p: Pass<'_>) -> bool {
        let Pass {
            store,
            pointer,
            source_cluster,
            log_dir,
            slots,
            gateway_groups,
            moved,
            write,
        } = p;
        if self.record.is_none() {
            let loaded = match SyncRecord::read(log_dir) {
                Ok(r) => r.filter(|r| r.source_cluster_id == source_cluster),
                Err(e) => {
                    tracing::warn!(error = %e, "the group sync record is unreadable: starting it again (the offsets in __consumer_offsets stay)");
                    None
                }
            };
            self.record = Some(loaded.unwrap_or_else(|| SyncRecord {
                source_cluster_id: source_cluster.to_string(),
                ..SyncRecord::default()
            }));
        }
        // Decided on the record in place: an idle cycle clones nothing.
        let Some(record) = self.record.as_ref() else {
            return false;
        };
        // A feed naming an older version than the one applied: the
        // source's chain started again (a new bucket prefix, say); read it
        // from its start.
        let restarted = pointer.is_some_and(|p| p.version < record.version);
        if restarted {
            tracing::warn!(
                applied = record.version,
                "the bucket's consumer-group offsets are older than those applied here: reading them again from the start"
            );
        }
        let newer = pointer.filter(|p| p.version > record.version || restarted);
        if newer.is_none() && record.groups.is_empty() && record.synced.is_empty() {
            return false;
        }
        let due = newer.is_some() || moved || self.last_pass.is_none_or(|t| t.elapsed() >= RECHECK);
        if !due {
            return false;
        }
        let mut record = record.clone();
        if let Some(p) = newer {
            let known_state = record.state();
            let known = (!restarted).then_some((record.version, &known_state));
            match store.load_groups(known, Some(p), false).await {
                Ok((version, state)) => {
                    record.version = version;
                    record.version_written_at_ms = p.written_at_ms;
                    record.groups = state.groups.into_values().collect();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading the source's consumer-group offsets; retrying next cycle");
                    record.last_error = Some(e.to_string());
                    self.record = Some(record);
                    return false;
                }
            }
        }
        self.last_pass = Some(Instant::now());
        let coordinator = match gateway_groups {
            Some(c) => c,
            None => self.own_coordinator(log_dir),
        };
        let outcome = self.apply_groups(&mut record, &coordinator, slots, write);
        let now = crate::clock::now_ms();
        match outcome {
            Ok(()) => {
                record.last_success_ms = Some(now);
                record.last_error = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "applying consumer-group offsets; retrying next cycle");
                record.last_error = Some(e);
            }
        }
        // Written when what it says changed, and at most every
        // RECORD_REFRESH for its last success alone: a pass per cycle
        // while mirroring costs no file write when nothing moved.
        let changed = self.record.as_ref().is_none_or(|old| {
            old.version != record.version
                || old.synced != record.synced
                || old.last_error != record.last_error
        });
        let stale = self
            .last_write
            .is_none_or(|t| t.elapsed() >= RECORD_REFRESH);
        if changed || stale {
            match record.write(log_dir) {
                Ok(()) => self.last_write = Some(Instant::now()),
                Err(e) => {
                    tracing::warn!(error = %e, "writing the group sync record; retrying next cycle");
                }
            }
        }
        self.record = Some(record);
        changed || stale
    }

    /// Copies the sync's figures into the metrics' `counters` (`pointer`:
    /// the feed's).
    pub(crate) fn count_into(
        &self,
        counters: &mut crate::metrics::Counters,
        pointer: Option<GroupsPointer>,
    ) {
        let record = self.record.as_ref();
        let applied = record.map_or(0, |r| r.version);
        let lag = pointer.map(|p| {
            if p.version > applied {
                ((crate::clock::now_ms() - p.written_at_ms).max(0)) as f64 / 1000.0
            } else {
                0.0
            }
        });
        counters.group_offsets_written = self.written;
        counters.group_offsets_deleted = self.deleted;
        counters.group_offsets_clamped = self.clamped;
        counters.group_sync_lag_seconds = lag;
        counters.group_sync_last_success_ms = record.and_then(|r| r.last_success_ms);
    }

    /// The coordinator holding this log dir's committed offsets when no
    /// gateway runs: loaded from the log dir at the first pass.
    fn own_coordinator(&mut self, log_dir: &Path) -> Arc<Coordinator> {
        if let Some(c) = &self.own {
            return Arc::clone(c);
        }
        let c = Coordinator::load(&LogView::new(log_dir), None);
        self.own = Some(Arc::clone(&c));
        c
    }

    /// Decides every synced or source offset and writes what changed.
    fn apply_groups(
        &mut self,
        record: &mut SyncRecord,
        coordinator: &Coordinator,
        slots: &BTreeMap<TopicPartition, Slot>,
        write: &mut WriteOffsets<'_>,
    ) -> Result<(), String> {
        let source = record.source_cluster_id.clone();
        let state = record.state();
        let mut synced: BTreeMap<(String, String, i32), SyncedOffset> = record
            .synced
            .drain(..)
            .map(|s| ((s.group.clone(), s.topic.clone(), s.partition), s))
            .collect();
        // Every key the source has, and every key sync wrote.
        let mut keys: BTreeSet<(String, String, i32)> = synced.keys().cloned().collect();
        for g in state.groups.values() {
            for o in &g.offsets {
                keys.insert((g.group.clone(), o.topic.clone(), o.partition));
            }
        }
        let mut writes: BTreeMap<String, Vec<(String, i32, Option<Committed>)>> = BTreeMap::new();
        let mut clamped = 0;
        for (group, topic, partition) in keys {
            let src = state
                .groups
                .get(&group)
                .and_then(|g| g.offset(&topic, partition));
            let Ok(tp) = TopicPartition::new(&topic, partition) else {
                continue;
            };
            let local_partition = local_partition(slots, &tp, &source);
            let active = coordinator.has_members(&group);
            let local = coordinator
                .offsets(&group, Some(&[(topic.clone(), partition)]))
                .into_iter()
                .next()
                .and_then(|(_, _, c)| c)
                .map(|c| LocalCommit {
                    offset: c.offset,
                    leader_epoch: c.leader_epoch,
                    metadata: c.metadata,
                    commit_timestamp: c.commit_timestamp,
                });
            let key = (group.clone(), topic.clone(), partition);
            let last = synced.get(&key).map(SyncedOffset::as_local);
            let epoch_at = |o: i64| epoch_before(slots, &tp, o);
            let action = decide(
                src,
                local_partition,
                active,
                local.as_ref(),
                last.as_ref(),
                &epoch_at,
            );
            match action {
                SyncAction::Write(c) => {
                    if src.is_some_and(|s| s.offset != c.offset) {
                        clamped += 1;
                    }
                    writes.entry(group.clone()).or_default().push((
                        topic.clone(),
                        partition,
                        Some(Committed {
                            offset: c.offset,
                            leader_epoch: c.leader_epoch,
                            metadata: c.metadata,
                            commit_timestamp: c.commit_timestamp,
                        }),
                    ));
                }
                SyncAction::Delete => {
                    writes
                        .entry(group.clone())
                        .or_default()
                        .push((topic.clone(), partition, None));
                }
                SyncAction::Keep(KeepReason::InSync) => {
                    if src.is_some_and(|s| local.as_ref().is_some_and(|l| l.offset != s.offset)) {
                        clamped += 1;
                    }
                    if src.is_none() {
                        synced.remove(&key);
                    }
                }
                SyncAction::Keep(KeepReason::NewerHere) if src.is_none() => {
                    synced.remove(&key);
                }
                SyncAction::Keep(_) => {}
            }
        }
        self.clamped = clamped;
        let now = crate::clock::now_ms();
        let mut failure = None;
        for (group, commits) in writes {
            match write_offsets(write, &group, &commits, now) {
                Ok(()) => {
                    coordinator.record_written(&group, &commits);
                    for (topic, partition, c) in commits {
                        let key = (group.clone(), topic.clone(), partition);
                        match c {
                            Some(c) => {
                                self.written += 1;
                                synced.insert(
                                    key,
                                    SyncedOffset {
                                        group: group.clone(),
                                        topic,
                                        partition,
                                        offset: c.offset,
                                        leader_epoch: c.leader_epoch,
                                        metadata: c.metadata,
                                        commit_timestamp: c.commit_timestamp,
                                        synced_at_ms: now,
                                    },
                                );
                            }
                            None => {
                                self.deleted += 1;
                                synced.remove(&key);
                            }
                        }
                    }
                }
                Err(e) => failure = Some(format!("group {group}: {e}")),
            }
        }
        record.synced = synced.into_values().collect();
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// What the destination holds of `tp`, for the decision.
fn local_partition(
    slots: &BTreeMap<TopicPartition, Slot>,
    tp: &TopicPartition,
    source: &str,
) -> Option<LocalPartition> {
    let Some(Slot::Mirror(slot)) = slots.get(tp) else {
        return None;
    };
    if slot.mirror.record.source_cluster_id != source {
        return None;
    }
    Some(LocalPartition {
        syncing: matches!(
            slot.state(),
            PartitionState::Mirroring | PartitionState::Paused
        ),
        log_start: slot.mirror.log.log_start_offset(),
        log_end: slot.mirror.log.log_end_offset(),
    })
}

/// The local leader epoch of the record before `offset` (-1: none).
fn epoch_before(slots: &BTreeMap<TopicPartition, Slot>, tp: &TopicPartition, offset: i64) -> i32 {
    match slots.get(tp) {
        Some(Slot::Mirror(slot)) if offset > 0 => slot
            .mirror
            .log
            .epochs()
            .epoch_for_offset(offset - 1)
            .unwrap_or(-1),
        _ => -1,
    }
}

/// Appends one batch of `group`'s commits to its `__consumer_offsets`
/// partition through `write`.
fn write_offsets(
    write: &mut WriteOffsets<'_>,
    group: &str,
    commits: &[(String, i32, Option<Committed>)],
    now_ms: i64,
) -> Result<(), String> {
    let mut batch = offsets_topic::commit_batch(group, commits, now_ms)?;
    let tp = TopicPartition::new(OFFSETS_TOPIC, offsets_topic::partition_for(group))
        .map_err(|e| e.to_string())?;
    write(&tp, &mut batch)
}
