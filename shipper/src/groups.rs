//! Consumer-group offsets: read from the source's `__consumer_offsets`
//! partitions, published to the bucket as `manifest::groups` versions.
//!
//! # Reading (local files only)
//!
//! Every source `__consumer_offsets-N` partition found in the log dirs is
//! read forward from where the last read stopped, committed batches only:
//! those below the partition's high watermark (its
//! `replication-offset-checkpoint` entry, or the log end without that file
//! or with `ship_beyond_hw`). Transactional offset commits (TxnOffsetCommit)
//! are held per producer until their COMMIT marker and dropped at ABORT; a
//! transaction still open is not visible. Records are applied in order,
//! latest wins; a tombstone deletes an offset, or a group. Records of a
//! type or version not known (`kafkalog::offsets_topic`) and malformed ones
//! are skipped, counted and logged once per kind, never a failure. A log
//! that ends before the read position (the source truncated) is read again
//! from its start.
//!
//! # Publishing
//!
//! Every `group_sync_interval` (checked once per cycle), the selected
//! groups (`--groups`, `--exclude-groups`) with offsets on shipped topics
//! are compared with what the bucket holds; when they differ, one delta
//! (and, every `SNAPSHOT_EVERY` versions, a snapshot) is written
//! create-if-absent, and the cycle's head names the new version. Nothing
//! changed: no request. A lost race (another writer's version) is read and
//! the difference computed again. A writer only changes the groups of the
//! `__consumer_offsets` partitions it reads.
//!
//! Invariant: `published` is the state at `published_version` as the
//! bucket's chain holds it (loaded once, then advanced by this writer's own
//! deltas and the others' it reads on a conflict).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::PathBuf;

use bucket::store::{ManifestStore, StoreError};
use kafkalog::TopicPartition;
use kafkalog::offsets_topic::{self, Committed, GroupMetadata, OFFSETS_TOPIC, OffsetsRecord};
use kafkalog::records::{ControlType, decode_control_batch, decode_records};
use manifest::groups::{
    GroupEntry, GroupsDelta, GroupsPointer, GroupsSnapshot, GroupsState, OffsetValue,
    SNAPSHOT_EVERY, diff,
};
use manifest::partition::SchemaVersion;

use crate::config::ShipperOptions;
use crate::error::ShipperError;
use crate::metrics::Metrics;
use crate::source;

/// Most attempts at writing one version under contention.
const MAX_ATTEMPTS: u32 = 8;

/// One group as read from its source partition.
#[derive(Debug, Clone, Default)]
struct SourceGroup {
    metadata: Option<GroupMetadata>,
    offsets: BTreeMap<(String, i32), Committed>,
}

/// What is known of one source `__consumer_offsets` partition.
#[derive(Debug, Default)]
struct OffsetsPartition {
    /// The offset the next read starts at.
    next_offset: i64,
    groups: BTreeMap<String, SourceGroup>,
    /// Transactional records waiting for their producer's marker.
    open_txns: BTreeMap<i64, Vec<OffsetsRecord>>,
}

impl OffsetsPartition {
    fn apply(&mut self, record: OffsetsRecord) {
        match record {
            OffsetsRecord::Commit {
                group,
                topic,
                partition,
                committed,
            } => match committed {
                Some(c) => {
                    self.groups
                        .entry(group)
                        .or_default()
                        .offsets
                        .insert((topic, partition), c);
                }
                None => {
                    if let Some(g) = self.groups.get_mut(&group) {
                        g.offsets.remove(&(topic, partition));
                        if g.offsets.is_empty() && g.metadata.is_none() {
                            self.groups.remove(&group);
                        }
                    }
                }
            },
            OffsetsRecord::Group { group, metadata } => match metadata {
                Some(m) => self.groups.entry(group).or_default().metadata = Some(m),
                None => {
                    self.groups.remove(&group);
                }
            },
            OffsetsRecord::Unknown { .. } => {}
        }
    }
}

/// What one read of a partition found, computed on a blocking thread.
struct ReadOutcome {
    records: Vec<(Option<i64>, OffsetsRecord)>,
    markers: Vec<(i64, ControlType)>,
    /// The events in log order: a record (index into `records`) or a
    /// marker (index into `markers`).
    order: Vec<Event>,
    next_offset: i64,
    skipped: Vec<(String, String)>,
    truncated: bool,
}

enum Event {
    Record(usize),
    Marker(usize),
}

/// The shipper's group offsets: the source's, and what the bucket holds.
#[derive(Debug, Default)]
pub(crate) struct GroupOffsetsPublisher {
    partitions: BTreeMap<i32, OffsetsPartition>,
    /// The bucket's chain, once loaded.
    published: Option<(u64, GroupsState)>,
    snapshot_version: u64,
    last_run_ms: Option<i64>,
    warned: BTreeSet<String>,
}

impl GroupOffsetsPublisher {
    /// Whether a read is due at `now_ms`.
    pub(crate) fn due(&self, opts: &ShipperOptions, now_ms: i64) -> bool {
        self.last_run_ms
            .is_none_or(|last| now_ms - last >= opts.group_sync_interval.as_millis() as i64)
    }

    /// Reads the source's `__consumer_offsets` partitions and, when the
    /// selected groups differ from what the bucket holds, writes the next
    /// version. Returns the pointer the next head must name (`None`: nothing
    /// to name). `named` is the pointer of the newest head seen.
    pub(crate) async fn sync(
        &mut self,
        opts: &ShipperOptions,
        store: &ManifestStore,
        metrics: &Metrics,
        named: Option<GroupsPointer>,
        now_ms: i64,
    ) -> Result<Option<GroupsPointer>, ShipperError> {
        self.last_run_ms = Some(now_ms);
        self.read_source(opts, metrics).await;
        let owned: BTreeSet<i32> = self.partitions.keys().copied().collect();
        if owned.is_empty() && self.published.is_none() {
            // No __consumer_offsets here and nothing loaded: nothing to do,
            // and no request.
            return Ok(None);
        }
        let desired = self.desired(opts);
        if self.published.is_none() {
            let (version, state) = store
                .load_groups(None, named, true)
                .await
                .map_err(|e| ShipperError::store(OFFSETS_TOPIC, e))?;
            self.snapshot_version = named.map_or(0, |p| p.snapshot_version);
            self.published = Some((version, state));
        }
        for _ in 0..MAX_ATTEMPTS {
            let Some((version, state)) = &mut self.published else {
                return Ok(None);
            };
            let Some((changed, removed)) = diff(state, &desired, &owned) else {
                metrics.group_offsets.set(state.offset_count() as i64);
                // A version found beyond the newest head (written just
                // before a crash) still needs a head.
                return Ok(
                    (named.is_none_or(|p| p.version < *version) && *version > 0).then_some(
                        GroupsPointer {
                            version: *version,
                            snapshot_version: self.snapshot_version,
                            written_at_ms: now_ms,
                        },
                    ),
                );
            };
            let delta = GroupsDelta {
                schema: SchemaVersion::CURRENT,
                version: *version + 1,
                source_cluster_id: opts.cluster_id.clone(),
                written_at_ms: now_ms,
                writer: opts.shipper_id.clone(),
                changed,
                removed,
            };
            match store.put_groups_delta(&delta).await {
                Ok(()) => {
                    state.apply(&delta);
                    *version = delta.version;
                    metrics.group_versions.inc();
                    metrics.group_offsets.set(state.offset_count() as i64);
                    tracing::info!(
                        version = *version,
                        groups_changed = delta.changed.len(),
                        groups_removed = delta.removed.len(),
                        "published consumer-group offsets"
                    );
                    if *version % SNAPSHOT_EVERY == 0 {
                        let version = *version;
                        let snapshot = GroupsSnapshot {
                            schema: SchemaVersion::CURRENT,
                            version,
                            source_cluster_id: opts.cluster_id.clone(),
                            written_at_ms: now_ms,
                            groups: state.groups.values().cloned().collect(),
                        };
                        match store.put_groups_snapshot(&snapshot).await {
                            Ok(()) => {
                                let previous = self.snapshot_version;
                                self.snapshot_version = version;
                                if previous > 0
                                    && let Err(e) = store.prune_groups(previous).await
                                {
                                    tracing::warn!(error = %e, "pruning old consumer-group offsets (retried at the next snapshot)");
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "writing a consumer-group offsets snapshot (the deltas still hold every change)");
                            }
                        }
                    }
                    let Some((version, _)) = &self.published else {
                        return Ok(None);
                    };
                    return Ok(Some(GroupsPointer {
                        version: *version,
                        snapshot_version: self.snapshot_version,
                        written_at_ms: now_ms,
                    }));
                }
                Err(StoreError::Conflict { .. }) => {
                    // Another writer's version: read it (and any after it),
                    // then compute the difference again.
                    let known = (*version, &*state);
                    let (v, s) = store
                        .load_groups(Some(known), None, true)
                        .await
                        .map_err(|e| ShipperError::store(OFFSETS_TOPIC, e))?;
                    self.published = Some((v, s));
                }
                Err(e) => return Err(ShipperError::store(OFFSETS_TOPIC, e)),
            }
        }
        Err(ShipperError::store(
            OFFSETS_TOPIC,
            StoreError::TooManyConflicts {
                key: store.layout().groups_delta_dir(),
                attempts: MAX_ATTEMPTS,
            },
        ))
    }

    /// The selected groups with offsets on shipped topics.
    fn desired(&self, opts: &ShipperOptions) -> GroupsState {
        let mut out = GroupsState::default();
        for (op, p) in &self.partitions {
            for (name, g) in &p.groups {
                if !opts.selects_group(name) {
                    continue;
                }
                let offsets: Vec<OffsetValue> = g
                    .offsets
                    .iter()
                    .filter(|((topic, _), _)| opts.selects(topic))
                    .map(|((topic, partition), c)| OffsetValue {
                        topic: topic.clone(),
                        partition: *partition,
                        offset: c.offset,
                        leader_epoch: c.leader_epoch,
                        metadata: c.metadata.clone(),
                        commit_timestamp: c.commit_timestamp,
                    })
                    .collect();
                if offsets.is_empty() {
                    continue;
                }
                out.groups.insert(
                    name.clone(),
                    GroupEntry {
                        group: name.clone(),
                        offsets_partition: *op,
                        state: g.metadata.as_ref().map(|m| m.state().to_string()),
                        generation: g.metadata.as_ref().map(|m| m.generation),
                        members: g
                            .metadata
                            .as_ref()
                            .map_or(0, |m| u32::try_from(m.members.len()).unwrap_or(u32::MAX)),
                        offsets,
                    },
                );
            }
        }
        out
    }

    /// Reads what is new in every source `__consumer_offsets` partition.
    async fn read_source(&mut self, opts: &ShipperOptions, metrics: &Metrics) {
        let mut found: Vec<(PathBuf, TopicPartition, Option<i64>)> = Vec::new();
        for root in &opts.log_dirs {
            let Ok(tps) = kafkalog::reader::list_partitions(root) else {
                continue;
            };
            let cps = match source::read_root_checkpoints(root) {
                Ok(c) => c,
                Err(e) => {
                    self.warn_once(
                        format!("checkpoints {}", root.display()),
                        &format!("reading {}: {e}", root.display()),
                    );
                    continue;
                }
            };
            for tp in tps.into_iter().filter(|tp| tp.topic == OFFSETS_TOPIC) {
                let hw = match (&cps.hw, opts.ship_beyond_hw) {
                    (Some(hw), false) => Some(hw.get(&tp).copied().unwrap_or(0)),
                    _ => None,
                };
                found.push((root.clone(), tp, hw));
            }
        }
        let present: BTreeSet<i32> = found.iter().map(|(_, tp, _)| tp.partition).collect();
        self.partitions.retain(|p, _| present.contains(p));
        for (root, tp, hw) in found {
            let from = self
                .partitions
                .get(&tp.partition)
                .map_or(0, |p| p.next_offset);
            let read_tp = tp.clone();
            let outcome =
                tokio::task::spawn_blocking(move || read_partition(&root, &read_tp, from, hw))
                    .await;
            let outcome = match outcome {
                Ok(Ok(o)) => o,
                Ok(Err(e)) => {
                    metrics.error("group_offsets_read");
                    self.warn_once(
                        format!("read {tp}"),
                        &format!("reading {tp} (consumer-group offsets): {e}; retried next time"),
                    );
                    continue;
                }
                Err(e) => {
                    tracing::warn!(partition = %tp, error = %e, "reading consumer-group offsets");
                    continue;
                }
            };
            for (kind, detail) in &outcome.skipped {
                metrics
                    .group_records_skipped
                    .get_or_create(&vec![("kind", kind.clone())])
                    .inc();
                self.warn_once(
                    format!("skip {kind}"),
                    &format!("{tp}: skipping __consumer_offsets records: {detail} (counted in segmirror_shipper_group_records_skipped)"),
                );
            }
            let p = self.partitions.entry(tp.partition).or_default();
            if outcome.truncated {
                tracing::warn!(partition = %tp, "the source's consumer-group offsets log is shorter than what was read: reading it again from its start");
                *p = OffsetsPartition::default();
                continue;
            }
            apply_outcome(p, outcome);
        }
    }

    fn warn_once(&mut self, kind: String, message: &str) {
        if self.warned.insert(kind) {
            tracing::warn!("{message}");
        }
    }
}

/// Applies a read's records and markers, in log order.
fn apply_outcome(p: &mut OffsetsPartition, outcome: ReadOutcome) {
    let ReadOutcome {
        records,
        markers,
        order,
        next_offset,
        ..
    } = outcome;
    let mut records: Vec<Option<(Option<i64>, OffsetsRecord)>> =
        records.into_iter().map(Some).collect();
    for e in order {
        match e {
            Event::Record(i) => {
                let Some((txn, r)) = records.get_mut(i).and_then(Option::take) else {
                    continue;
                };
                match txn {
                    Some(pid) => p.open_txns.entry(pid).or_default().push(r),
                    None => p.apply(r),
                }
            }
            Event::Marker(i) => {
                let Some(&(pid, kind)) = markers.get(i) else {
                    continue;
                };
                let held = p.open_txns.remove(&pid).unwrap_or_default();
                if kind == ControlType::Commit {
                    for r in held {
                        p.apply(r);
                    }
                }
            }
        }
    }
    p.next_offset = next_offset;
}

/// Reads `tp` from `from` up to `hw` (`None`: the log end): local IO only.
fn read_partition(
    root: &std::path::Path,
    tp: &TopicPartition,
    from: i64,
    hw: Option<i64>,
) -> kafkalog::Result<ReadOutcome> {
    let reader = kafkalog::reader::PartitionReader::open(root, tp)?;
    let mut out = ReadOutcome {
        records: Vec::new(),
        markers: Vec::new(),
        order: Vec::new(),
        next_offset: from,
        skipped: Vec::new(),
        truncated: false,
    };
    let mut failure = None;
    let mut last_end = None;
    let end = reader.for_each_batch(from, true, |h, bytes| {
        if hw.is_some_and(|hw| h.last_offset() >= hw) {
            return ControlFlow::Break(());
        }
        last_end = Some(h.next_offset());
        out.next_offset = h.next_offset();
        if h.is_control() {
            if h.is_transactional() {
                match decode_control_batch(h, bytes) {
                    Ok(m) => {
                        out.order.push(Event::Marker(out.markers.len()));
                        out.markers.push((h.producer_id, m.kind));
                    }
                    Err(e) => out
                        .skipped
                        .push(("malformed".into(), format!("a control batch at {}: {e}", h.base_offset))),
                }
            }
            return ControlFlow::Continue(());
        }
        let records = match decode_records(h, bytes) {
            Ok(r) => r,
            Err(e) => {
                failure = Some(e);
                return ControlFlow::Break(());
            }
        };
        let txn = h.is_transactional().then_some(h.producer_id);
        for r in records {
            let Some(key) = r.key.as_deref() else {
                out.skipped
                    .push(("malformed".into(), format!("a record without a key in the batch at {}", h.base_offset)));
                continue;
            };
            match offsets_topic::decode(key, r.value.as_deref()) {
                Ok(OffsetsRecord::Unknown {
                    key_version,
                    value_version,
                }) => {
                    let kind = match value_version {
                        Some(v) => format!("key_v{key_version}_value_v{v}"),
                        None => format!("key_v{key_version}"),
                    };
                    let detail = match value_version {
                        Some(v) => format!("record type {key_version} with value version {v}, not known"),
                        None => format!("record type (key version) {key_version}, not read by segmirror (KIP-848 groups and newer)"),
                    };
                    out.skipped.push((kind, detail));
                }
                Ok(rec) => {
                    out.order.push(Event::Record(out.records.len()));
                    out.records.push((txn, rec));
                }
                Err(e) => out
                    .skipped
                    .push(("malformed".into(), format!("{e} in the batch at {}", h.base_offset))),
            }
        }
        ControlFlow::Continue(())
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    // Nothing at or after `from` while something was read before: the log
    // may have been truncated below the read position. It was if no batch
    // ends at or after `from - 1` (the last offset read; compaction never
    // removes the last batch of a log).
    if last_end.is_none() && from > 0 && end <= from {
        let mut reaches = false;
        reader.for_each_batch(from - 1, false, |h, _| {
            reaches = h.last_offset() >= from - 1;
            ControlFlow::Break(())
        })?;
        out.truncated = !reaches;
    }
    Ok(out)
}
