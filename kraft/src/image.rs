//! The cluster state reconstructed from metadata records, and how each
//! record changes it. Pure: no IO, no clock.
//!
//! [`MetadataImage::replay`] applies one decoded record at its offset, as
//! Kafka's `image/*Delta` classes do:
//!
//! - TopicRecord adds a topic (name and id); PartitionRecord sets a whole
//!   partition registration (new topics, added partitions, snapshots).
//! - PartitionChangeRecord merges as Kafka's `PartitionRegistration.merge`
//!   ([`PartitionRegistration::merge`]): a null
//!   or absent field keeps its value; a Leader other than -2 sets the leader
//!   (-1 = none) and bumps the leader epoch even when the value equals the
//!   current leader; every change bumps the partition epoch. So every change
//!   since the snapshot must be replayed, in order.
//! - ConfigRecord sets a key (a null value deletes it; an empty resource
//!   disappears) for a topic (by name), a broker (by id) or the cluster
//!   default (broker name ""); other resource types are not kept.
//! - RemoveTopicRecord drops the topic, its partitions and its configs (by
//!   name), and remembers it in [`MetadataImage::deleted_topics`].
//! - FeatureLevelRecord sets a feature level (`metadata.version` is the
//!   MV); level 0 removes any other feature.
//! - Broker registrations are kept as far as a mirror needs them (epoch,
//!   fenced, controlled shutdown, log dirs).
//! - Metadata transactions: records between BeginTransaction and
//!   EndTransaction are buffered and applied together at End; Abort drops
//!   them. Until End the image does not show them
//!   ([`MetadataImage::open_transaction`]). A Begin while one is open, or an
//!   End without one, is untrusted (everything); an Abort without one
//!   drops nothing.
//! - A TopicRecord for a name that exists under another id (Kafka removes
//!   the old topic first) replaces it and marks the name untrusted.
//!
//! Invariants: `replay` never fails and never panics. What it cannot apply
//! faithfully (a record at a version this crate cannot read, a change to a
//! partition or topic it does not know, a transaction out of order) is
//! recorded in [`MetadataImage::untrusted`] with its [`Scope`] (one entry
//! per scope, counting the records), and stays there until the image is
//! rebuilt from a snapshot: a partition under an
//! untrusted scope must not be acted on from this view
//! ([`MetadataImage::partition_untrusted`]). Unknown record types are
//! counted, not applied. [`MetadataImage::applied`] is the offset and epoch
//! of the last record replayed (applied, buffered or skipped).
//! [`MetadataImage::deleted_topics`] lists removals since the snapshot the
//! image was built from only: a snapshot holds no deletions, so a caller
//! that must notice every deletion compares topic ids between polls.

use std::collections::BTreeMap;

use kafkalog::TopicId;
use serde::Serialize;

use crate::records::{
    BrokerRegistration, BrokerRegistrationChangeRecord, ConfigRecord, Decoded, MetadataRecord,
    PartitionRegistration, RESOURCE_BROKER, RESOURCE_TOPIC, Scope,
};

/// The feature whose level is the metadata version.
pub const METADATA_VERSION: &str = "metadata.version";

/// A topic: its id and partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Topic {
    /// Topic id.
    pub id: TopicId,
    /// Partitions by index.
    pub partitions: BTreeMap<i32, PartitionRegistration>,
}

/// A topic removed by a RemoveTopicRecord.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeletedTopic {
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: TopicId,
    /// Offset of the RemoveTopicRecord.
    pub offset: i64,
}

/// Records the image could not apply faithfully, one entry per scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Untrusted {
    /// Offset of the first such record.
    pub offset: i64,
    /// What it may have changed.
    pub scope: Scope,
    /// Why (for the first record).
    pub reason: String,
    /// How many records flagged this scope.
    pub records: u64,
    /// Offset of the last such record.
    pub last_offset: i64,
}

/// An offset and the Raft epoch of the batch holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Position {
    /// Record offset.
    pub offset: i64,
    /// Raft epoch (the batch's partition leader epoch).
    pub epoch: i32,
}

/// The controller quorum's leader, from a LEADER_CHANGE control record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RaftLeader {
    /// The leader's node id.
    pub id: i32,
    /// Its Raft epoch.
    pub epoch: i32,
}

/// A metadata transaction seen begun but not yet ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenTransaction {
    /// Offset of the BeginTransactionRecord.
    pub begin_offset: i64,
    /// Its name, if any.
    pub name: Option<String>,
    /// Records buffered, with their offsets.
    #[serde(skip)]
    pub records: Vec<(i64, Decoded)>,
}

/// The reconstructed cluster state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MetadataImage {
    /// Topics by name.
    pub topics: BTreeMap<String, Topic>,
    /// Topic configs (explicit overrides only) by topic name.
    pub topic_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Per-broker dynamic configs by broker id (decimal, as written).
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Cluster-wide dynamic broker defaults (resource name "").
    pub cluster_configs: BTreeMap<String, String>,
    /// Feature levels by name.
    pub features: BTreeMap<String, i16>,
    /// Broker registrations by id.
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    /// Topics removed since the snapshot the image started from.
    pub deleted_topics: Vec<DeletedTopic>,
    /// What could not be applied faithfully.
    pub untrusted: Vec<Untrusted>,
    /// Records of apiKeys this crate does not know, skipped: apiKey to count.
    pub unknown_records: BTreeMap<u32, u64>,
    /// The last record replayed.
    pub applied: Option<Position>,
    /// A transaction begun and not ended (its records not yet applied).
    pub open_transaction: Option<OpenTransaction>,
    /// The Raft leader named by the last LEADER_CHANGE control record read.
    pub raft_leader: Option<RaftLeader>,
    #[serde(skip)]
    names_by_id: BTreeMap<TopicId, String>,
    #[serde(skip)]
    untrusted_by_scope: BTreeMap<Scope, usize>,
}

impl MetadataImage {
    /// An empty image.
    pub fn new() -> MetadataImage {
        MetadataImage::default()
    }

    /// The metadata version (feature level), if set.
    pub fn metadata_version(&self) -> Option<i16> {
        self.features.get(METADATA_VERSION).copied()
    }

    /// The name of the topic with `id`.
    pub fn topic_name(&self, id: &TopicId) -> Option<&str> {
        self.names_by_id.get(id).map(String::as_str)
    }

    /// The first untrusted entry that covers partition `partition` of
    /// topic `name`, if any: its scope is everything, the topic (by name or
    /// id) or that partition.
    pub fn partition_untrusted(&self, name: &str, partition: i32) -> Option<&Untrusted> {
        let id = self.topics.get(name).map(|t| t.id);
        self.untrusted.iter().find(|u| match &u.scope {
            Scope::All => true,
            Scope::TopicName { name: n } => n == name,
            Scope::TopicId { topic_id } => Some(*topic_id) == id,
            Scope::Partition {
                topic_id,
                partition: p,
            } => Some(*topic_id) == id && *p == partition,
            Scope::Config { .. } | Scope::Broker { .. } => false,
        })
    }

    /// The first untrusted entry that covers topic `name`'s configs: its
    /// scope is everything, the topic by name, or a config resource of the
    /// topic, a broker or the cluster.
    pub fn configs_untrusted(&self, name: &str) -> Option<&Untrusted> {
        self.untrusted.iter().find(|u| match &u.scope {
            Scope::All => true,
            Scope::TopicName { name: n } => n == name,
            Scope::Config {
                resource_type,
                resource_name,
            } => {
                *resource_type == RESOURCE_BROKER
                    || (*resource_type == RESOURCE_TOPIC && resource_name == name)
            }
            _ => false,
        })
    }

    /// Records that the record at `offset` could not be applied
    /// faithfully, so `scope` cannot be trusted.
    pub fn mark_untrusted(&mut self, offset: i64, scope: Scope, reason: impl Into<String>) {
        self.flag(offset, scope, reason);
    }

    /// Moves [`MetadataImage::applied`] past a record that changes nothing
    /// (a control record).
    pub fn advance(&mut self, offset: i64, epoch: i32) {
        self.applied = Some(Position { offset, epoch });
    }

    /// One entry per scope, so that a reader facing a newer Kafka (every
    /// PartitionChangeRecord at an unknown version) holds one entry per
    /// partition, not one per record.
    fn flag(&mut self, offset: i64, scope: Scope, reason: impl Into<String>) {
        if let Some(entry) = self
            .untrusted_by_scope
            .get(&scope)
            .and_then(|&i| self.untrusted.get_mut(i))
        {
            entry.records += 1;
            entry.last_offset = offset;
            return;
        }
        self.untrusted_by_scope
            .insert(scope.clone(), self.untrusted.len());
        self.untrusted.push(Untrusted {
            offset,
            scope,
            reason: reason.into(),
            records: 1,
            last_offset: offset,
        });
    }

    /// Replays one decoded record at `offset`, in a batch of Raft epoch
    /// `epoch`. Records inside an open transaction are buffered.
    pub fn replay(&mut self, offset: i64, epoch: i32, decoded: Decoded) {
        self.applied = Some(Position { offset, epoch });
        let in_transaction = self.open_transaction.is_some();
        match decoded {
            Decoded::Record(MetadataRecord::BeginTransaction { name }) => {
                if let Some(open) = self.open_transaction.take() {
                    self.flag(
                        offset,
                        Scope::All,
                        format!(
                            "BeginTransaction while the transaction begun at offset {} is open",
                            open.begin_offset
                        ),
                    );
                }
                self.open_transaction = Some(OpenTransaction {
                    begin_offset: offset,
                    name,
                    records: Vec::new(),
                });
            }
            Decoded::Record(MetadataRecord::EndTransaction) => match self.open_transaction.take() {
                Some(open) => {
                    for (at, record) in open.records {
                        self.apply_now(at, record);
                    }
                }
                None => self.flag(offset, Scope::All, "EndTransaction without a transaction"),
            },
            Decoded::Record(MetadataRecord::AbortTransaction { .. }) => {
                // Without an open transaction there is nothing to drop.
                self.open_transaction = None;
            }
            other if in_transaction => {
                if let Some(open) = self.open_transaction.as_mut() {
                    open.records.push((offset, other));
                }
            }
            other => self.apply_now(offset, other),
        }
    }

    fn apply_now(&mut self, offset: i64, decoded: Decoded) {
        match decoded {
            Decoded::Record(record) => self.apply_record(offset, record),
            Decoded::Ignored { .. } => {}
            Decoded::Unknown { api_key, .. } => {
                *self.unknown_records.entry(api_key).or_default() += 1;
            }
            Decoded::UnsupportedVersion {
                api_key,
                version,
                scope,
            } => self.flag(
                offset,
                scope,
                format!(
                    "record apiKey {api_key} at version {version}, newer than this reader knows"
                ),
            ),
        }
    }

    fn apply_record(&mut self, offset: i64, record: MetadataRecord) {
        match record {
            MetadataRecord::Topic(t) => {
                if let Some(old) = self.topics.get(&t.name)
                    && old.id != t.topic_id
                {
                    let old_id = old.id;
                    self.names_by_id.remove(&old_id);
                    self.flag(
                        offset,
                        Scope::TopicName {
                            name: t.name.clone(),
                        },
                        format!(
                            "TopicRecord for {} with id {} while id {old_id} exists",
                            t.name, t.topic_id
                        ),
                    );
                }
                self.names_by_id.insert(t.topic_id, t.name.clone());
                self.topics.insert(
                    t.name,
                    Topic {
                        id: t.topic_id,
                        partitions: BTreeMap::new(),
                    },
                );
            }
            MetadataRecord::Partition(p) => match self.topic_by_id(&p.topic_id) {
                Some(topic) => {
                    topic.partitions.insert(p.partition_id, p.registration);
                }
                None => self.flag(
                    offset,
                    Scope::Partition {
                        topic_id: p.topic_id,
                        partition: p.partition_id,
                    },
                    "PartitionRecord for an unknown topic id",
                ),
            },
            MetadataRecord::PartitionChange(c) => {
                match self
                    .topic_by_id(&c.topic_id)
                    .and_then(|t| t.partitions.get_mut(&c.partition_id))
                {
                    Some(partition) => partition.merge(&c),
                    None => self.flag(
                        offset,
                        Scope::Partition {
                            topic_id: c.topic_id,
                            partition: c.partition_id,
                        },
                        "PartitionChangeRecord for an unknown partition",
                    ),
                }
            }
            MetadataRecord::Config(c) => self.apply_config(c),
            MetadataRecord::RemoveTopic { topic_id } => match self.names_by_id.remove(&topic_id) {
                Some(name) => {
                    self.topics.remove(&name);
                    self.topic_configs.remove(&name);
                    self.deleted_topics.push(DeletedTopic {
                        name,
                        id: topic_id,
                        offset,
                    });
                }
                None => self.flag(
                    offset,
                    Scope::TopicId { topic_id },
                    "RemoveTopicRecord for an unknown topic id",
                ),
            },
            MetadataRecord::FeatureLevel { name, level } => {
                if level == 0 && name != METADATA_VERSION {
                    self.features.remove(&name);
                } else {
                    self.features.insert(name, level);
                }
            }
            MetadataRecord::RegisterBroker(b) => {
                self.brokers.insert(b.broker_id, b.registration);
            }
            MetadataRecord::BrokerRegistrationChange(c) => self.apply_broker_change(offset, c),
            MetadataRecord::FenceBroker { broker_id, .. } => {
                if let Some(b) = self.brokers.get_mut(&broker_id) {
                    b.fenced = true;
                }
            }
            MetadataRecord::UnfenceBroker { broker_id, .. } => {
                if let Some(b) = self.brokers.get_mut(&broker_id) {
                    b.fenced = false;
                }
            }
            MetadataRecord::UnregisterBroker { broker_id, .. } => {
                self.brokers.remove(&broker_id);
            }
            MetadataRecord::NoOp
            | MetadataRecord::BeginTransaction { .. }
            | MetadataRecord::EndTransaction
            | MetadataRecord::AbortTransaction { .. } => {}
        }
    }

    fn topic_by_id(&mut self, id: &TopicId) -> Option<&mut Topic> {
        let name = self.names_by_id.get(id)?;
        self.topics.get_mut(name)
    }

    fn apply_config(&mut self, c: ConfigRecord) {
        let map = match (c.resource_type, c.resource_name.as_str()) {
            (RESOURCE_TOPIC, name) => self.topic_configs.entry(name.to_string()).or_default(),
            (RESOURCE_BROKER, "") => &mut self.cluster_configs,
            (RESOURCE_BROKER, id) => self.broker_configs.entry(id.to_string()).or_default(),
            // Client metrics, groups: not a mirror's concern.
            _ => return,
        };
        match c.value {
            Some(value) => {
                map.insert(c.name, value);
            }
            None => {
                map.remove(&c.name);
            }
        }
        match (c.resource_type, c.resource_name.as_str()) {
            (RESOURCE_TOPIC, name) => {
                if self.topic_configs.get(name).is_some_and(BTreeMap::is_empty) {
                    self.topic_configs.remove(name);
                }
            }
            (_, "") => {}
            (_, id) => {
                if self.broker_configs.get(id).is_some_and(BTreeMap::is_empty) {
                    self.broker_configs.remove(id);
                }
            }
        }
    }

    fn apply_broker_change(&mut self, offset: i64, c: BrokerRegistrationChangeRecord) {
        let Some(b) = self.brokers.get_mut(&c.broker_id) else {
            self.flag(
                offset,
                Scope::Broker {
                    broker_id: c.broker_id,
                },
                "BrokerRegistrationChangeRecord for an unregistered broker",
            );
            return;
        };
        match c.fenced {
            -1 => b.fenced = false,
            1 => b.fenced = true,
            _ => {}
        }
        if c.in_controlled_shutdown == 1 {
            b.in_controlled_shutdown = true;
        }
        if !c.log_dirs.is_empty() {
            b.log_dirs = c.log_dirs;
        }
    }
}
