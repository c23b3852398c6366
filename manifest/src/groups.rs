//! Consumer-group offsets in the bucket: what the shipper reads from the
//! source's `__consumer_offsets` and the applier applies to its own, and the
//! pure decision of what the applier writes.
//!
//! # Objects
//!
//! A cluster's group offsets are one [`GroupsState`] (every selected
//! group: its committed offsets and what its last group metadata record
//! said), versioned `1, 2, ...`:
//!
//! - `groups/delta/<version:020>.json` ([`GroupsDelta`]): the groups that
//!   changed from `version - 1` (each replaced whole) and the groups
//!   removed. Version `v` exists only if every version before it does.
//! - `groups/snapshot/<version:020>.json` ([`GroupsSnapshot`]): the whole
//!   state at `version`, written after that version's delta every
//!   [`SNAPSHOT_EVERY`] versions. Version 0 is the empty state and has no
//!   object.
//! - The change feed's head names the newest published version and its
//!   newest snapshot ([`GroupsPointer`]), so an idle applier learns that
//!   nothing changed from the one GET it makes anyway.
//!
//! Every object is compact JSON with the CRC-32C trailer of `codec`, and is
//! written create-if-absent: objects first (delta, then snapshot), the head
//! last. A delta written by a writer that crashed before its head is found
//! by the next writer (it probes `version + 1`) and becomes part of the
//! chain; readers only go as far as a head names.
//!
//! # Ownership
//!
//! A group lives in one source `__consumer_offsets` partition
//! ([`GroupEntry::offsets_partition`]); a writer changes only the groups of
//! the partitions it reads ([`diff`]), so shippers beside different brokers
//! of one cluster can share the chain.
//!
//! # Applying ([`decide`])
//!
//! As MirrorMaker 2's checkpoints and Cluster Linking's offset sync do, an
//! offset is synced to the destination only for a partition it mirrors and
//! is still mirroring (not STOPPED: after failover its own commits win),
//! for a group without members on the destination, clamped to what the
//! destination holds (`[log start, log end]`, with the local epoch when
//! clamped), and never over a commit the destination's own consumers made
//! after the source's.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::codec::{self, ObjectKind};
use crate::partition::{ManifestFormatError, SchemaVersion};

/// A snapshot is written every this many versions.
pub const SNAPSHOT_EVERY: u64 = 32;
/// A reader more than this many versions behind reads the snapshot.
pub const MAX_DELTAS_PER_READ: u64 = 64;

/// One committed offset of a group, as the source committed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetValue {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The next offset to read.
    pub offset: i64,
    /// The leader epoch of the last record read, -1 when unknown.
    pub leader_epoch: i32,
    /// The client's metadata string.
    pub metadata: String,
    /// When the source committed it (ms since the epoch, the source's clock).
    pub commit_timestamp: i64,
}

/// One group of the source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEntry {
    /// The group id.
    pub group: String,
    /// The source `__consumer_offsets` partition it lives in.
    pub offsets_partition: i32,
    /// `Empty` or `Stable` from its last group metadata record, `None`
    /// when none was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Its generation, from the same record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i32>,
    /// How many members the source's record lists.
    #[serde(default)]
    pub members: u32,
    /// Its committed offsets, sorted by topic and partition.
    pub offsets: Vec<OffsetValue>,
}

impl GroupEntry {
    /// The committed offset of `topic`-`partition`.
    pub fn offset(&self, topic: &str, partition: i32) -> Option<&OffsetValue> {
        self.offsets
            .iter()
            .find(|o| o.topic == topic && o.partition == partition)
    }
}

/// Every group of a cluster, by group id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupsState {
    /// The groups.
    pub groups: BTreeMap<String, GroupEntry>,
}

impl GroupsState {
    /// Applies `delta` (replacing changed groups, dropping removed ones).
    pub fn apply(&mut self, delta: &GroupsDelta) {
        for g in &delta.changed {
            self.groups.insert(g.group.clone(), g.clone());
        }
        for name in &delta.removed {
            self.groups.remove(name);
        }
    }

    /// How many committed offsets the state holds.
    pub fn offset_count(&self) -> usize {
        self.groups.values().map(|g| g.offsets.len()).sum()
    }
}

/// What changes `published` into `desired` for the groups of `owned`
/// source partitions: groups of `desired` that differ, and groups of
/// `published` in an owned partition that `desired` lacks. `None` when
/// nothing differs.
pub fn diff(
    published: &GroupsState,
    desired: &GroupsState,
    owned: &BTreeSet<i32>,
) -> Option<(Vec<GroupEntry>, Vec<String>)> {
    let changed: Vec<GroupEntry> = desired
        .groups
        .values()
        .filter(|g| published.groups.get(&g.group) != Some(*g))
        .cloned()
        .collect();
    let removed: Vec<String> = published
        .groups
        .values()
        .filter(|g| owned.contains(&g.offsets_partition) && !desired.groups.contains_key(&g.group))
        .map(|g| g.group.clone())
        .collect();
    if changed.is_empty() && removed.is_empty() {
        None
    } else {
        Some((changed, removed))
    }
}

/// The change feed's pointer to the newest group offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupsPointer {
    /// The newest version published.
    pub version: u64,
    /// Its newest snapshot (0: none, the chain starts from the empty state).
    pub snapshot_version: u64,
    /// When that version was written (ms since the epoch).
    pub written_at_ms: i64,
}

/// A delta object: version `version` from `version - 1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupsDelta {
    /// Format version.
    pub schema: SchemaVersion,
    /// This version (also in the key).
    pub version: u64,
    /// Source cluster id.
    pub source_cluster_id: String,
    /// When it was written (ms since the epoch).
    pub written_at_ms: i64,
    /// Who wrote it.
    pub writer: String,
    /// Groups added or changed, each whole.
    pub changed: Vec<GroupEntry>,
    /// Groups removed.
    pub removed: Vec<String>,
}

/// A snapshot object: the whole state at `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupsSnapshot {
    /// Format version.
    pub schema: SchemaVersion,
    /// The version it is the state of (also in the key).
    pub version: u64,
    /// Source cluster id.
    pub source_cluster_id: String,
    /// When it was written (ms since the epoch).
    pub written_at_ms: i64,
    /// Every group.
    pub groups: Vec<GroupEntry>,
}

impl GroupsSnapshot {
    /// The state it holds.
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

macro_rules! sealed_object {
    ($t:ty, $kind:expr) => {
        impl $t {
            /// Encodes it with its CRC-32C trailer.
            pub fn encode(&self) -> Result<Vec<u8>, ManifestFormatError> {
                let mut current = self.clone();
                current.schema = SchemaVersion::CURRENT;
                codec::encode($kind, &current)
            }

            /// Decodes and verifies one (the trailer is required).
            pub fn decode(bytes: &[u8]) -> Result<$t, ManifestFormatError> {
                Self::decode_from(None, bytes)
            }

            /// [`Self::decode`] of the object at `key` (named in errors).
            pub fn decode_from(key: Option<&str>, bytes: &[u8]) -> Result<$t, ManifestFormatError> {
                let mut v: $t = codec::decode($kind, key, bytes)?;
                v.schema = SchemaVersion::CURRENT;
                Ok(v)
            }
        }
    };
}

sealed_object!(GroupsDelta, ObjectKind::GroupsDelta);
sealed_object!(GroupsSnapshot, ObjectKind::GroupsSnapshot);

/// What the destination holds of a partition a group committed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalPartition {
    /// Whether offsets are synced for it: a mirror of this source, not
    /// STOPPING, STOPPED or FAILED.
    pub syncing: bool,
    /// Its log start offset.
    pub log_start: i64,
    /// Its log end offset.
    pub log_end: i64,
}

/// A committed offset on the destination, as its `__consumer_offsets`
/// holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCommit {
    /// The offset.
    pub offset: i64,
    /// Its leader epoch.
    pub leader_epoch: i32,
    /// Its metadata.
    pub metadata: String,
    /// Its commit timestamp (the source's for a synced commit).
    pub commit_timestamp: i64,
}

/// What the applier does for one group partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncAction {
    /// Commit this on the destination.
    Write(LocalCommit),
    /// Delete the destination's synced offset (the source deleted it).
    Delete,
    /// Leave the destination as it is, for this reason.
    Keep(KeepReason),
}

/// Why a group partition is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepReason {
    /// Already what sync would write.
    InSync,
    /// The destination does not mirror the partition.
    NotMirrored,
    /// The partition is STOPPED (or failing over, or FAILED).
    NotSyncing,
    /// The group has members on the destination.
    ActiveHere,
    /// The destination's own consumers committed after the source.
    NewerHere,
}

impl KeepReason {
    /// A short name for tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            KeepReason::InSync => "in sync",
            KeepReason::NotMirrored => "not mirrored here",
            KeepReason::NotSyncing => "partition not mirroring",
            KeepReason::ActiveHere => "group active here",
            KeepReason::NewerHere => "newer commit here",
        }
    }
}

/// The destination's commit that sync itself last wrote, from the
/// applier's sync record.
pub type LastSynced = LocalCommit;

/// Decides one group partition. `source` is the source's commit (`None`:
/// deleted on the source); `local` the destination's current commit;
/// `last_synced` what sync last wrote there; `epoch_before(o)` the local
/// leader epoch of the record before offset `o` (-1 when none).
pub fn decide(
    source: Option<&OffsetValue>,
    partition: Option<LocalPartition>,
    active_here: bool,
    local: Option<&LocalCommit>,
    last_synced: Option<&LastSynced>,
    epoch_before: &dyn Fn(i64) -> i32,
) -> SyncAction {
    let Some(p) = partition else {
        return SyncAction::Keep(KeepReason::NotMirrored);
    };
    if !p.syncing {
        return SyncAction::Keep(KeepReason::NotSyncing);
    }
    if active_here {
        return SyncAction::Keep(KeepReason::ActiveHere);
    }
    // A commit here that sync did not write is the destination's own.
    let own = local.filter(|l| Some(*l) != last_synced);
    let Some(source) = source else {
        return match (local, own) {
            (None, _) => SyncAction::Keep(KeepReason::InSync),
            (Some(_), Some(_)) => SyncAction::Keep(KeepReason::NewerHere),
            (Some(_), None) => SyncAction::Delete,
        };
    };
    if let Some(own) = own
        && own.commit_timestamp > source.commit_timestamp
    {
        return SyncAction::Keep(KeepReason::NewerHere);
    }
    let end = p.log_end.max(p.log_start);
    let offset = source.offset.clamp(p.log_start, end);
    let leader_epoch = if offset == source.offset {
        source.leader_epoch
    } else {
        epoch_before(offset)
    };
    let target = LocalCommit {
        offset,
        leader_epoch,
        metadata: source.metadata.clone(),
        commit_timestamp: source.commit_timestamp,
    };
    if local == Some(&target) {
        SyncAction::Keep(KeepReason::InSync)
    } else {
        SyncAction::Write(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ov(topic: &str, partition: i32, offset: i64, ts: i64) -> OffsetValue {
        OffsetValue {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: 3,
            metadata: String::new(),
            commit_timestamp: ts,
        }
    }

    fn group(name: &str, op: i32, offsets: Vec<OffsetValue>) -> GroupEntry {
        GroupEntry {
            group: name.into(),
            offsets_partition: op,
            state: Some("Empty".into()),
            generation: Some(1),
            members: 0,
            offsets,
        }
    }

    fn state(groups: Vec<GroupEntry>) -> GroupsState {
        GroupsState {
            groups: groups.into_iter().map(|g| (g.group.clone(), g)).collect(),
        }
    }

    #[test]
    fn diff_changes_only_owned_partitions_and_applies_back() {
        let published = state(vec![
            group("a", 1, vec![ov("t", 0, 5, 1)]),
            group("b", 2, vec![ov("t", 0, 5, 1)]),
            group("c", 3, vec![ov("t", 0, 5, 1)]),
        ]);
        // This writer reads partitions 1 and 2: "b" is gone from the
        // source, "a" moved on, "c" belongs to another writer.
        let desired = state(vec![
            group("a", 1, vec![ov("t", 0, 9, 2)]),
            group("d", 1, vec![]),
        ]);
        let owned = BTreeSet::from([1, 2]);
        let (changed, removed) = diff(&published, &desired, &owned).expect("a change");
        assert_eq!(
            changed.iter().map(|g| g.group.as_str()).collect::<Vec<_>>(),
            ["a", "d"]
        );
        assert_eq!(removed, ["b"]);
        let mut next = published.clone();
        next.apply(&GroupsDelta {
            schema: SchemaVersion::CURRENT,
            version: 1,
            source_cluster_id: "c".into(),
            written_at_ms: 0,
            writer: "w".into(),
            changed,
            removed,
        });
        assert_eq!(
            next.groups.keys().map(String::as_str).collect::<Vec<_>>(),
            ["a", "c", "d"]
        );
        assert_eq!(diff(&next, &desired, &owned), None, "converged");
    }

    #[test]
    fn objects_round_trip_and_refuse_damage() {
        let d = GroupsDelta {
            schema: SchemaVersion::CURRENT,
            version: 7,
            source_cluster_id: "src".into(),
            written_at_ms: 1_700_000_000_000,
            writer: "shipper-a".into(),
            changed: vec![group("g", 4, vec![ov("orders", 2, 42, 9)])],
            removed: vec!["old".into()],
        };
        let bytes = d.encode().expect("encode");
        assert_eq!(GroupsDelta::decode(&bytes).expect("decode"), d);
        crate::codec::testing::every_bit_flip_is_refused(&bytes, GroupsDelta::decode);
        let s = GroupsSnapshot {
            schema: SchemaVersion::CURRENT,
            version: 32,
            source_cluster_id: "src".into(),
            written_at_ms: 1,
            groups: vec![group("g", 4, vec![ov("orders", 2, 42, 9)])],
        };
        let bytes = s.encode().expect("encode");
        assert_eq!(GroupsSnapshot::decode(&bytes).expect("decode"), s);
        assert_eq!(s.state().offset_count(), 1);
        assert!(
            GroupsSnapshot::decode(&crate::codec::testing::strip_trailer(&bytes)).is_err(),
            "the trailer is required"
        );
    }

    const MIRRORING: LocalPartition = LocalPartition {
        syncing: true,
        log_start: 10,
        log_end: 100,
    };

    fn lc(offset: i64, epoch: i32, ts: i64) -> LocalCommit {
        LocalCommit {
            offset,
            leader_epoch: epoch,
            metadata: String::new(),
            commit_timestamp: ts,
        }
    }

    fn no_epoch(_: i64) -> i32 {
        -1
    }

    #[test]
    fn an_offset_is_written_clamped_to_what_the_destination_holds() {
        let epoch_at = |o: i64| if o > 50 { 2 } else { 1 };
        // Within the log: as committed, with the source's epoch.
        assert_eq!(
            decide(
                Some(&ov("t", 0, 60, 5)),
                Some(MIRRORING),
                false,
                None,
                None,
                &epoch_at
            ),
            SyncAction::Write(lc(60, 3, 5))
        );
        // Beyond the log end: the log end, with the local epoch there.
        assert_eq!(
            decide(
                Some(&ov("t", 0, 500, 5)),
                Some(MIRRORING),
                false,
                None,
                None,
                &epoch_at
            ),
            SyncAction::Write(lc(100, 2, 5))
        );
        // Below the log start: raised to it.
        assert_eq!(
            decide(
                Some(&ov("t", 0, 3, 5)),
                Some(MIRRORING),
                false,
                None,
                None,
                &epoch_at
            ),
            SyncAction::Write(lc(10, 1, 5))
        );
        // Already there.
        assert_eq!(
            decide(
                Some(&ov("t", 0, 60, 5)),
                Some(MIRRORING),
                false,
                Some(&lc(60, 3, 5)),
                Some(&lc(60, 3, 5)),
                &epoch_at
            ),
            SyncAction::Keep(KeepReason::InSync)
        );
        // A clamped commit moves up as the mirror catches up.
        assert_eq!(
            decide(
                Some(&ov("t", 0, 90, 5)),
                Some(MIRRORING),
                false,
                Some(&lc(80, 2, 5)),
                Some(&lc(80, 2, 5)),
                &epoch_at
            ),
            SyncAction::Write(lc(90, 3, 5))
        );
    }

    #[test]
    fn the_destination_keeps_what_is_its_own() {
        let src = ov("t", 0, 60, 5);
        for (partition, active, why) in [
            (None, false, KeepReason::NotMirrored),
            (
                Some(LocalPartition {
                    syncing: false,
                    ..MIRRORING
                }),
                false,
                KeepReason::NotSyncing,
            ),
            (Some(MIRRORING), true, KeepReason::ActiveHere),
        ] {
            assert_eq!(
                decide(Some(&src), partition, active, None, None, &no_epoch),
                SyncAction::Keep(why)
            );
        }
        // A consumer here committed after the source: kept.
        let own = lc(70, 3, 6);
        assert_eq!(
            decide(
                Some(&src),
                Some(MIRRORING),
                false,
                Some(&own),
                Some(&lc(50, 3, 4)),
                &no_epoch
            ),
            SyncAction::Keep(KeepReason::NewerHere)
        );
        // The source committed again after it: the source wins.
        assert_eq!(
            decide(
                Some(&ov("t", 0, 80, 7)),
                Some(MIRRORING),
                false,
                Some(&own),
                None,
                &no_epoch
            ),
            SyncAction::Write(lc(80, 3, 7))
        );
    }

    #[test]
    fn a_source_tombstone_deletes_only_what_sync_wrote() {
        let synced = lc(60, 3, 5);
        assert_eq!(
            decide(
                None,
                Some(MIRRORING),
                false,
                Some(&synced),
                Some(&synced),
                &no_epoch
            ),
            SyncAction::Delete
        );
        assert_eq!(
            decide(
                None,
                Some(MIRRORING),
                false,
                Some(&lc(61, 3, 9)),
                Some(&synced),
                &no_epoch
            ),
            SyncAction::Keep(KeepReason::NewerHere)
        );
        assert_eq!(
            decide(None, Some(MIRRORING), false, None, Some(&synced), &no_epoch),
            SyncAction::Keep(KeepReason::InSync)
        );
    }
}
