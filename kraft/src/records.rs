//! The metadata records that matter, and the KRaft control records, decoded
//! from the values of `__cluster_metadata` records. No IO.
//!
//! A data record's value is a frame: unsigned varint frame version (1),
//! unsigned varint apiKey, unsigned varint record version, then the message
//! body in the flexible encoding (see [`crate::codec`]), with nothing after
//! it. [`decode_value`] reads it into a [`Decoded`]:
//!
//! - [`Decoded::Record`]: an apiKey this crate applies, at a version it
//!   knows (the table below). Every regular field of that version is read;
//!   tagged fields this crate does not use are skipped by their size.
//! - [`Decoded::Ignored`]: an apiKey known not to matter here (quotas, ACLs,
//!   producer ids, SCRAM, tokens, ZK migration, controllers, ...), any
//!   version: the frame is checked, the body is not read.
//! - [`Decoded::Unknown`]: an apiKey this crate has never heard of: skipped
//!   (the record's length is known) and counted, loudly, by the caller.
//! - [`Decoded::UnsupportedVersion`]: a known apiKey that matters, at a
//!   version newer than this crate knows. A new version can add regular
//!   fields, so the body cannot be read safely; the leading fields that
//!   every version has so far (partition id and topic id, topic name,
//!   config resource, broker id) are read if possible to say which part of
//!   the image can no longer be trusted ([`Scope`]); otherwise all of it.
//!
//! | apiKey | record | versions |
//! |---|---|---|
//! | 0 | RegisterBrokerRecord | 0-3 |
//! | 1 | UnregisterBrokerRecord | 0 |
//! | 2 | TopicRecord | 0 |
//! | 3 | PartitionRecord | 0-2 |
//! | 4 | ConfigRecord | 0 |
//! | 5 | PartitionChangeRecord | 0-2 |
//! | 7, 8 | FenceBrokerRecord, UnfenceBrokerRecord | 0 |
//! | 9 | RemoveTopicRecord | 0 |
//! | 12 | FeatureLevelRecord | 0 |
//! | 17 | BrokerRegistrationChangeRecord | 0-2 |
//! | 20 | NoOpRecord | any (nothing to read) |
//! | 23, 24, 25 | Begin/End/AbortTransactionRecord | 0 |
//!
//! Frame version 0 (the 2.8 preview) and trailing bytes are errors, as in
//! Kafka's `AbstractApiMessageSerde`. Errors never panic and allocate no
//! more than the bytes present can hold.
//!
//! Control records (batch attribute bit 5) carry no frame: the key is
//! `int16 version, int16 type` and the value is the flexible message body of
//! the type at version 0, starting with its own int16 `Version`
//! ([`decode_control`]).

use kafkalog::TopicId;
use kafkalog::records::{ControlType, Record, parse_control_record};

use crate::codec::{DecodeError, DecodeResult, Reader};

/// apiKey of RegisterBrokerRecord.
pub const REGISTER_BROKER: u32 = 0;
/// apiKey of UnregisterBrokerRecord.
pub const UNREGISTER_BROKER: u32 = 1;
/// apiKey of TopicRecord.
pub const TOPIC: u32 = 2;
/// apiKey of PartitionRecord.
pub const PARTITION: u32 = 3;
/// apiKey of ConfigRecord.
pub const CONFIG: u32 = 4;
/// apiKey of PartitionChangeRecord.
pub const PARTITION_CHANGE: u32 = 5;
/// apiKey of FenceBrokerRecord.
pub const FENCE_BROKER: u32 = 7;
/// apiKey of UnfenceBrokerRecord.
pub const UNFENCE_BROKER: u32 = 8;
/// apiKey of RemoveTopicRecord.
pub const REMOVE_TOPIC: u32 = 9;
/// apiKey of FeatureLevelRecord.
pub const FEATURE_LEVEL: u32 = 12;
/// apiKey of BrokerRegistrationChangeRecord.
pub const BROKER_REGISTRATION_CHANGE: u32 = 17;
/// apiKey of NoOpRecord.
pub const NO_OP: u32 = 20;
/// apiKey of BeginTransactionRecord.
pub const BEGIN_TRANSACTION: u32 = 23;
/// apiKey of EndTransactionRecord.
pub const END_TRANSACTION: u32 = 24;
/// apiKey of AbortTransactionRecord.
pub const ABORT_TRANSACTION: u32 = 25;

/// apiKeys that exist but do not matter to a mirror: delegation tokens (10,
/// 26 removal), SCRAM credentials (11, 22 removal), client quotas (14),
/// producer id blocks (15), ACLs (18, 19 removal), ZK migration state (21),
/// RegisterController (27), ClearElr (28; ELR is not read),
/// UnregisterController (29); 6, 13 and 16 are unused.
const IGNORED: &[u32] = &[6, 10, 11, 13, 14, 15, 16, 18, 19, 21, 22, 26, 27, 28, 29];

/// The frame version every Kafka since 3.0 writes.
pub const FRAME_VERSION: u32 = 1;

/// Partition leader meaning "no leader".
pub const NO_LEADER: i32 = -1;
/// PartitionChangeRecord leader meaning "unchanged" (the default).
pub const NO_LEADER_CHANGE: i32 = -2;

/// ConfigRecord resource type of a topic (name = topic name).
pub const RESOURCE_TOPIC: i8 = 2;
/// ConfigRecord resource type of a broker (name = decimal id, or "" for
/// the cluster-wide default).
pub const RESOURCE_BROKER: i8 = 4;

/// TopicRecord v0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRecord {
    /// Topic name.
    pub name: String,
    /// Topic id.
    pub topic_id: TopicId,
}

/// Directory id meaning "unknown, pre-JBOD" (`DirectoryId.MIGRATING`).
pub const DIRECTORY_MIGRATING: TopicId = TopicId::ZERO;
/// Directory id meaning "not yet assigned" (`DirectoryId.UNASSIGNED`).
pub const DIRECTORY_UNASSIGNED: TopicId = TopicId::METADATA;
/// Directory id meaning "the directory is offline" (`DirectoryId.LOST`).
pub const DIRECTORY_LOST: TopicId =
    TopicId::from_bytes([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);

/// A partition's registration: what a PartitionRecord sets and a
/// PartitionChangeRecord changes (Kafka's `PartitionRegistration`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionRegistration {
    /// Replicas, preferred leader first.
    pub replicas: Vec<i32>,
    /// In-sync replicas (non-empty does not imply a leader).
    pub isr: Vec<i32>,
    /// Replicas being removed by a reassignment.
    pub removing_replicas: Vec<i32>,
    /// Replicas being added by a reassignment.
    pub adding_replicas: Vec<i32>,
    /// Leader broker id, [`NO_LEADER`] (-1) for none.
    pub leader: i32,
    /// Leader epoch: the fencing token of the leader.
    pub leader_epoch: i32,
    /// Partition epoch.
    pub partition_epoch: i32,
    /// Directory id of each replica, in replica order (v1+); empty when the
    /// record carries none (read as [`DIRECTORY_MIGRATING`]).
    pub directories: Vec<TopicId>,
    /// Leader recovery state (tag 0): 0 recovered, 1 recovering from an
    /// unclean election.
    pub leader_recovery_state: i8,
    /// Not a Kafka field: the last leader other than -1 this registration
    /// had since it was read from a PartitionRecord (so -1 when that record
    /// had none), and the leader epoch it led at. What "the replica that
    /// led it last" means for a leaderless partition.
    pub last_leader: LastLeader,
}

/// The last leader a partition had, as far as the records read show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LastLeader {
    /// Broker id, -1 if none seen.
    pub id: i32,
    /// Its leader epoch.
    pub leader_epoch: i32,
}

impl PartitionRegistration {
    /// Applies a PartitionChangeRecord, as `PartitionRegistration.merge`:
    /// null fields keep their value; a Leader other than -2 sets the leader
    /// and bumps the leader epoch (even to the same value); every change
    /// bumps the partition epoch.
    pub fn merge(&mut self, c: &PartitionChangeRecord) {
        if let Some(replicas) = &c.replicas {
            self.replicas = replicas.clone();
        }
        if let Some(directories) = &c.directories {
            self.directories = directories.clone();
        }
        if let Some(isr) = &c.isr {
            self.isr = isr.clone();
        }
        if let Some(removing) = &c.removing_replicas {
            self.removing_replicas = removing.clone();
        }
        if let Some(adding) = &c.adding_replicas {
            self.adding_replicas = adding.clone();
        }
        if c.leader != NO_LEADER_CHANGE {
            self.leader = c.leader;
            self.leader_epoch = self.leader_epoch.wrapping_add(1);
            if c.leader != NO_LEADER {
                self.last_leader = LastLeader {
                    id: c.leader,
                    leader_epoch: self.leader_epoch,
                };
            }
        }
        if c.leader_recovery_state != -1 {
            self.leader_recovery_state = c.leader_recovery_state;
        }
        self.partition_epoch = self.partition_epoch.wrapping_add(1);
    }

    /// The directory assigned to `broker`'s replica: its entry in
    /// [`PartitionRegistration::directories`], [`DIRECTORY_MIGRATING`] when
    /// the registration has none, `None` when `broker` is not a replica.
    pub fn directory_of(&self, broker: i32) -> Option<TopicId> {
        let i = self.replicas.iter().position(|&r| r == broker)?;
        Some(
            self.directories
                .get(i)
                .copied()
                .unwrap_or(DIRECTORY_MIGRATING),
        )
    }
}

/// PartitionRecord v0-2: a full registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRecord {
    /// Partition index.
    pub partition_id: i32,
    /// Topic id.
    pub topic_id: TopicId,
    /// The registration it sets.
    pub registration: PartitionRegistration,
}

/// PartitionChangeRecord v0-2: a delta; `None` means unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionChangeRecord {
    /// Partition index.
    pub partition_id: i32,
    /// Topic id.
    pub topic_id: TopicId,
    /// New ISR (tag 0).
    pub isr: Option<Vec<i32>>,
    /// New leader (tag 1): [`NO_LEADER_CHANGE`] (-2) unchanged, -1 none.
    pub leader: i32,
    /// New replicas (tag 2).
    pub replicas: Option<Vec<i32>>,
    /// New removing replicas (tag 3).
    pub removing_replicas: Option<Vec<i32>>,
    /// New adding replicas (tag 4).
    pub adding_replicas: Option<Vec<i32>>,
    /// New leader recovery state (tag 5): -1 unchanged.
    pub leader_recovery_state: i8,
    /// New directories (tag 8, v1+).
    pub directories: Option<Vec<TopicId>>,
}

/// ConfigRecord v0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRecord {
    /// Resource type: [`RESOURCE_TOPIC`], [`RESOURCE_BROKER`], others.
    pub resource_type: i8,
    /// Resource name: topic name, broker id, "" for the cluster default.
    pub resource_name: String,
    /// Config key.
    pub name: String,
    /// Value; `None` deletes the key.
    pub value: Option<String>,
}

/// A broker's registration, the fields a mirror needs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BrokerRegistration {
    /// Broker epoch.
    pub epoch: i64,
    /// Fenced (default true).
    pub fenced: bool,
    /// In controlled shutdown (v1+).
    pub in_controlled_shutdown: bool,
    /// Rack, if any.
    pub rack: Option<String>,
    /// Online log dir ids (tag 0, v3+).
    pub log_dirs: Vec<TopicId>,
}

/// RegisterBrokerRecord v0-3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterBrokerRecord {
    /// Broker id.
    pub broker_id: i32,
    /// The registration it sets.
    pub registration: BrokerRegistration,
}

/// BrokerRegistrationChangeRecord v0-2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistrationChangeRecord {
    /// Broker id.
    pub broker_id: i32,
    /// Broker epoch.
    pub broker_epoch: i64,
    /// Tag 0: -1 unfenced, 0 no change, 1 fenced.
    pub fenced: i8,
    /// Tag 1 (v1+): 0 no change, 1 in controlled shutdown.
    pub in_controlled_shutdown: i8,
    /// Tag 2 (v2+): replaces the log dirs when non-empty.
    pub log_dirs: Vec<TopicId>,
}

/// A metadata record this crate applies.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetadataRecord {
    /// A new topic.
    Topic(TopicRecord),
    /// A full partition registration.
    Partition(PartitionRecord),
    /// A partition delta.
    PartitionChange(PartitionChangeRecord),
    /// A config set or delete.
    Config(ConfigRecord),
    /// A topic deletion.
    RemoveTopic {
        /// Topic id.
        topic_id: TopicId,
    },
    /// A feature level (`metadata.version` and others; 0 removes).
    FeatureLevel {
        /// Feature name.
        name: String,
        /// Level.
        level: i16,
    },
    /// A broker (re-)registration.
    RegisterBroker(RegisterBrokerRecord),
    /// A broker registration change.
    BrokerRegistrationChange(BrokerRegistrationChangeRecord),
    /// A broker fenced (before MV 3.3-IV2).
    FenceBroker {
        /// Broker id.
        broker_id: i32,
        /// Broker epoch.
        broker_epoch: i64,
    },
    /// A broker unfenced (before MV 3.3-IV2).
    UnfenceBroker {
        /// Broker id.
        broker_id: i32,
        /// Broker epoch.
        broker_epoch: i64,
    },
    /// A broker unregistered.
    UnregisterBroker {
        /// Broker id.
        broker_id: i32,
        /// Broker epoch.
        broker_epoch: i64,
    },
    /// Nothing; advances the offset.
    NoOp,
    /// A metadata transaction starts.
    BeginTransaction {
        /// Tag 0: the transaction's name, if any.
        name: Option<String>,
    },
    /// A metadata transaction commits.
    EndTransaction,
    /// A metadata transaction is abandoned.
    AbortTransaction {
        /// Tag 0: why, if given.
        reason: Option<String>,
    },
}

/// The part of the image an unreadable record may have changed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One partition.
    Partition {
        /// Topic id.
        topic_id: TopicId,
        /// Partition index.
        partition: i32,
    },
    /// A topic, by id.
    TopicId {
        /// Topic id.
        topic_id: TopicId,
    },
    /// A topic, by name.
    TopicName {
        /// Topic name.
        name: String,
    },
    /// A config resource.
    Config {
        /// Resource type.
        resource_type: i8,
        /// Resource name.
        resource_name: String,
    },
    /// A broker registration.
    Broker {
        /// Broker id.
        broker_id: i32,
    },
    /// Everything: the record's scope could not be read.
    All,
}

/// What one data record's value holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A record this crate applies.
    Record(MetadataRecord),
    /// A known record that does not matter here.
    Ignored {
        /// apiKey.
        api_key: u32,
        /// Record version.
        version: u32,
    },
    /// An apiKey this crate does not know.
    Unknown {
        /// apiKey.
        api_key: u32,
        /// Record version.
        version: u32,
    },
    /// A record that matters, at a version this crate cannot read.
    UnsupportedVersion {
        /// apiKey.
        api_key: u32,
        /// Record version.
        version: u32,
        /// What it may have changed.
        scope: Scope,
    },
}

/// The newest version of `api_key` this crate reads, or `None` for an
/// apiKey it does not apply.
pub fn max_supported_version(api_key: u32) -> Option<u32> {
    Some(match api_key {
        REGISTER_BROKER => 3,
        TOPIC | CONFIG | REMOVE_TOPIC | FEATURE_LEVEL | FENCE_BROKER | UNFENCE_BROKER
        | UNREGISTER_BROKER | BEGIN_TRANSACTION | END_TRANSACTION | ABORT_TRANSACTION => 0,
        PARTITION | PARTITION_CHANGE | BROKER_REGISTRATION_CHANGE => 2,
        NO_OP => u32::MAX,
        _ => return None,
    })
}

/// Decodes one data record's value (the frame and the message).
pub fn decode_value(value: &[u8]) -> DecodeResult<Decoded> {
    let mut r = Reader::new(value);
    let frame = r.uvarint("frame version")?;
    if frame != FRAME_VERSION {
        return Err(DecodeError {
            what: "frame version".into(),
            position: 0,
            reason: format!("{frame} (only {FRAME_VERSION} exists since Kafka 3.0)"),
        });
    }
    let api_key = r.uvarint("apiKey")?;
    let version = r.uvarint("record version")?;
    let Some(max) = max_supported_version(api_key) else {
        return Ok(if IGNORED.contains(&api_key) {
            Decoded::Ignored { api_key, version }
        } else {
            Decoded::Unknown { api_key, version }
        });
    };
    if api_key == NO_OP {
        // Nothing in it matters; a newer version can only add fields.
        return Ok(Decoded::Record(MetadataRecord::NoOp));
    }
    if version > max {
        return Ok(Decoded::UnsupportedVersion {
            api_key,
            version,
            scope: scope_of(api_key, r),
        });
    }
    let record = decode_body(api_key, version, &mut r)?;
    r.finish("record")?;
    Ok(Decoded::Record(record))
}

/// The scope of a record of `api_key` whose body starts at `r`, from the
/// leading fields every version has had so far; [`Scope::All`] when they
/// cannot be read.
fn scope_of(api_key: u32, mut r: Reader<'_>) -> Scope {
    let scope = match api_key {
        PARTITION | PARTITION_CHANGE => r.i32("partition").and_then(|partition| {
            Ok(Scope::Partition {
                topic_id: r.uuid("topic id")?,
                partition,
            })
        }),
        TOPIC => r
            .compact_string("name")
            .map(|name| Scope::TopicName { name }),
        REMOVE_TOPIC => r
            .uuid("topic id")
            .map(|topic_id| Scope::TopicId { topic_id }),
        CONFIG => r.i8("resource type").and_then(|resource_type| {
            Ok(Scope::Config {
                resource_type,
                resource_name: r.compact_string("resource name")?,
            })
        }),
        REGISTER_BROKER
        | UNREGISTER_BROKER
        | FENCE_BROKER
        | UNFENCE_BROKER
        | BROKER_REGISTRATION_CHANGE => r
            .i32("broker id")
            .map(|broker_id| Scope::Broker { broker_id }),
        _ => Ok(Scope::All),
    };
    scope.unwrap_or(Scope::All)
}

fn decode_body(api_key: u32, version: u32, r: &mut Reader<'_>) -> DecodeResult<MetadataRecord> {
    Ok(match api_key {
        TOPIC => {
            let name = r.compact_string("TopicRecord.Name")?;
            let topic_id = r.uuid("TopicRecord.TopicId")?;
            r.skip_tagged_fields("TopicRecord tags")?;
            MetadataRecord::Topic(TopicRecord { name, topic_id })
        }
        PARTITION => MetadataRecord::Partition(partition_record(version, r)?),
        PARTITION_CHANGE => MetadataRecord::PartitionChange(partition_change(version, r)?),
        CONFIG => {
            let resource_type = r.i8("ConfigRecord.ResourceType")?;
            let resource_name = r.compact_string("ConfigRecord.ResourceName")?;
            let name = r.compact_string("ConfigRecord.Name")?;
            let value = r.compact_nullable_string("ConfigRecord.Value")?;
            r.skip_tagged_fields("ConfigRecord tags")?;
            MetadataRecord::Config(ConfigRecord {
                resource_type,
                resource_name,
                name,
                value,
            })
        }
        REMOVE_TOPIC => {
            let topic_id = r.uuid("RemoveTopicRecord.TopicId")?;
            r.skip_tagged_fields("RemoveTopicRecord tags")?;
            MetadataRecord::RemoveTopic { topic_id }
        }
        FEATURE_LEVEL => {
            let name = r.compact_string("FeatureLevelRecord.Name")?;
            let level = r.i16("FeatureLevelRecord.FeatureLevel")?;
            r.skip_tagged_fields("FeatureLevelRecord tags")?;
            MetadataRecord::FeatureLevel { name, level }
        }
        REGISTER_BROKER => MetadataRecord::RegisterBroker(register_broker(version, r)?),
        BROKER_REGISTRATION_CHANGE => {
            MetadataRecord::BrokerRegistrationChange(broker_change(version, r)?)
        }
        FENCE_BROKER | UNFENCE_BROKER | UNREGISTER_BROKER => {
            let broker_id = r.i32("broker id")?;
            let broker_epoch = r.i64("broker epoch")?;
            r.skip_tagged_fields("broker record tags")?;
            match api_key {
                FENCE_BROKER => MetadataRecord::FenceBroker {
                    broker_id,
                    broker_epoch,
                },
                UNFENCE_BROKER => MetadataRecord::UnfenceBroker {
                    broker_id,
                    broker_epoch,
                },
                _ => MetadataRecord::UnregisterBroker {
                    broker_id,
                    broker_epoch,
                },
            }
        }
        BEGIN_TRANSACTION | ABORT_TRANSACTION => {
            let mut text = None;
            r.tagged_fields("transaction tags", |tag, f| {
                if tag != 0 {
                    return Ok(false);
                }
                text = f.compact_nullable_string("transaction tag 0")?;
                Ok(true)
            })?;
            if api_key == BEGIN_TRANSACTION {
                MetadataRecord::BeginTransaction { name: text }
            } else {
                MetadataRecord::AbortTransaction { reason: text }
            }
        }
        END_TRANSACTION => {
            r.skip_tagged_fields("EndTransactionRecord tags")?;
            MetadataRecord::EndTransaction
        }
        other => {
            // max_supported_version and this match list the same keys.
            return Err(r.error("apiKey", format!("{other} has no decoder")));
        }
    })
}

fn partition_record(version: u32, r: &mut Reader<'_>) -> DecodeResult<PartitionRecord> {
    let partition_id = r.i32("PartitionRecord.PartitionId")?;
    let topic_id = r.uuid("PartitionRecord.TopicId")?;
    let replicas = r.i32_array("PartitionRecord.Replicas")?;
    let isr = r.i32_array("PartitionRecord.Isr")?;
    let removing_replicas = r.i32_array("PartitionRecord.RemovingReplicas")?;
    let adding_replicas = r.i32_array("PartitionRecord.AddingReplicas")?;
    let leader = r.i32("PartitionRecord.Leader")?;
    let leader_epoch = r.i32("PartitionRecord.LeaderEpoch")?;
    let partition_epoch = r.i32("PartitionRecord.PartitionEpoch")?;
    let directories = if version >= 1 {
        r.compact_array("PartitionRecord.Directories", 16, |r| {
            r.uuid("PartitionRecord.Directories")
        })?
    } else {
        Vec::new()
    };
    let mut leader_recovery_state = 0;
    r.tagged_fields("PartitionRecord tags", |tag, f| match tag {
        0 => {
            leader_recovery_state = f.i8("PartitionRecord.LeaderRecoveryState")?;
            Ok(true)
        }
        // ELR fields (v2) are not used.
        _ => Ok(false),
    })?;
    Ok(PartitionRecord {
        partition_id,
        topic_id,
        registration: PartitionRegistration {
            replicas,
            isr,
            removing_replicas,
            adding_replicas,
            leader,
            leader_epoch,
            partition_epoch,
            directories,
            leader_recovery_state,
            last_leader: LastLeader {
                id: leader,
                leader_epoch,
            },
        },
    })
}

fn partition_change(version: u32, r: &mut Reader<'_>) -> DecodeResult<PartitionChangeRecord> {
    let partition_id = r.i32("PartitionChangeRecord.PartitionId")?;
    let topic_id = r.uuid("PartitionChangeRecord.TopicId")?;
    let mut change = PartitionChangeRecord {
        partition_id,
        topic_id,
        isr: None,
        leader: NO_LEADER_CHANGE,
        replicas: None,
        removing_replicas: None,
        adding_replicas: None,
        leader_recovery_state: -1,
        directories: None,
    };
    r.tagged_fields("PartitionChangeRecord tags", |tag, f| {
        match tag {
            0 => change.isr = f.nullable_i32_array("PartitionChangeRecord.Isr")?,
            1 => change.leader = f.i32("PartitionChangeRecord.Leader")?,
            2 => change.replicas = f.nullable_i32_array("PartitionChangeRecord.Replicas")?,
            3 => {
                change.removing_replicas =
                    f.nullable_i32_array("PartitionChangeRecord.RemovingReplicas")?
            }
            4 => {
                change.adding_replicas =
                    f.nullable_i32_array("PartitionChangeRecord.AddingReplicas")?
            }
            5 => {
                change.leader_recovery_state = f.i8("PartitionChangeRecord.LeaderRecoveryState")?
            }
            8 if version >= 1 => {
                change.directories = f.nullable_uuid_array("PartitionChangeRecord.Directories")?
            }
            // 6, 7: ELR (v2), not used; others unknown.
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(change)
}

fn register_broker(version: u32, r: &mut Reader<'_>) -> DecodeResult<RegisterBrokerRecord> {
    let broker_id = r.i32("RegisterBrokerRecord.BrokerId")?;
    if version >= 2 {
        r.bool("RegisterBrokerRecord.IsMigratingZkBroker")?;
    }
    r.uuid("RegisterBrokerRecord.IncarnationId")?;
    let broker_epoch = r.i64("RegisterBrokerRecord.BrokerEpoch")?;
    // Endpoint: name, host (1 byte each at least), port, protocol, tags.
    r.compact_array("RegisterBrokerRecord.EndPoints", 7, |r| {
        r.compact_string("EndPoints.Name")?;
        r.compact_string("EndPoints.Host")?;
        r.u16("EndPoints.Port")?;
        r.i16("EndPoints.SecurityProtocol")?;
        r.skip_tagged_fields("EndPoints tags")
    })?;
    r.compact_array("RegisterBrokerRecord.Features", 6, |r| {
        r.compact_string("Features.Name")?;
        r.i16("Features.MinSupportedVersion")?;
        r.i16("Features.MaxSupportedVersion")?;
        r.skip_tagged_fields("Features tags")
    })?;
    let rack = r.compact_nullable_string("RegisterBrokerRecord.Rack")?;
    let fenced = r.bool("RegisterBrokerRecord.Fenced")?;
    let in_controlled_shutdown = if version >= 1 {
        r.bool("RegisterBrokerRecord.InControlledShutdown")?
    } else {
        false
    };
    let mut log_dirs = Vec::new();
    r.tagged_fields("RegisterBrokerRecord tags", |tag, f| {
        if tag == 0 && version >= 3 {
            log_dirs = f
                .nullable_uuid_array("RegisterBrokerRecord.LogDirs")?
                .unwrap_or_default();
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok(RegisterBrokerRecord {
        broker_id,
        registration: BrokerRegistration {
            epoch: broker_epoch,
            fenced,
            in_controlled_shutdown,
            rack,
            log_dirs,
        },
    })
}

fn broker_change(version: u32, r: &mut Reader<'_>) -> DecodeResult<BrokerRegistrationChangeRecord> {
    let broker_id = r.i32("BrokerRegistrationChangeRecord.BrokerId")?;
    let broker_epoch = r.i64("BrokerRegistrationChangeRecord.BrokerEpoch")?;
    let mut change = BrokerRegistrationChangeRecord {
        broker_id,
        broker_epoch,
        fenced: 0,
        in_controlled_shutdown: 0,
        log_dirs: Vec::new(),
    };
    r.tagged_fields("BrokerRegistrationChangeRecord tags", |tag, f| {
        match tag {
            0 => change.fenced = f.i8("BrokerRegistrationChangeRecord.Fenced")?,
            1 if version >= 1 => {
                change.in_controlled_shutdown =
                    f.i8("BrokerRegistrationChangeRecord.InControlledShutdown")?
            }
            2 if version >= 2 => {
                change.log_dirs = f
                    .nullable_uuid_array("BrokerRegistrationChangeRecord.LogDirs")?
                    .unwrap_or_default()
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(change)
}

/// A KRaft control record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRecord {
    /// LEADER_CHANGE (2): a new Raft leader.
    LeaderChange {
        /// The leader's id, when the message is version 0 (as every Kafka
        /// writes it); `None` for a newer version.
        leader_id: Option<i32>,
    },
    /// SNAPSHOT_HEADER (3).
    SnapshotHeader {
        /// LastContainedLogTimestamp (version 0 messages).
        last_contained_log_timestamp: Option<i64>,
    },
    /// SNAPSHOT_FOOTER (4).
    SnapshotFooter,
    /// Any other type (KRaft version, voters, transaction markers): nothing
    /// a mirror needs.
    Other {
        /// The control type.
        kind: i16,
    },
}

/// The control record type for LEADER_CHANGE.
pub const CONTROL_LEADER_CHANGE: i16 = 2;
/// The control record type for SNAPSHOT_HEADER.
pub const CONTROL_SNAPSHOT_HEADER: i16 = 3;
/// The control record type for SNAPSHOT_FOOTER.
pub const CONTROL_SNAPSHOT_FOOTER: i16 = 4;

/// Decodes a record of a control batch: the key's type (through
/// [`kafkalog::records::parse_control_record`]) and, for the types that
/// matter, the value's version-0 body.
pub fn decode_control(record: &Record) -> DecodeResult<ControlRecord> {
    let marker = parse_control_record(record).map_err(|e| DecodeError {
        what: "control record".into(),
        position: 0,
        reason: e.reason,
    })?;
    let kind = marker.kind.id();
    if matches!(marker.kind, ControlType::Abort | ControlType::Commit) {
        return Ok(ControlRecord::Other { kind });
    }
    let value = record.value.as_deref().unwrap_or(&[]);
    let mut r = Reader::new(value);
    Ok(match kind {
        CONTROL_LEADER_CHANGE => {
            let version = r.i16("LeaderChangeMessage.Version")?;
            let leader_id = if version == 0 {
                Some(r.i32("LeaderChangeMessage.LeaderId")?)
            } else {
                None
            };
            ControlRecord::LeaderChange { leader_id }
        }
        CONTROL_SNAPSHOT_HEADER => {
            let version = r.i16("SnapshotHeaderRecord.Version")?;
            let last_contained_log_timestamp = if version == 0 {
                Some(r.i64("SnapshotHeaderRecord.LastContainedLogTimestamp")?)
            } else {
                None
            };
            ControlRecord::SnapshotHeader {
                last_contained_log_timestamp,
            }
        }
        CONTROL_SNAPSHOT_FOOTER => {
            r.i16("SnapshotFooterRecord.Version")?;
            ControlRecord::SnapshotFooter
        }
        kind => ControlRecord::Other { kind },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuid(n: u8) -> TopicId {
        TopicId::from_bytes([n; 16])
    }

    /// Bytes written out by hand from the schemas (frame 1, apiKey,
    /// version, body, tagged fields), independent of any encoder.
    #[test]
    fn golden_bytes_decode_to_the_expected_records() {
        let mut topic = vec![1, 2, 0, 2, b't'];
        topic.extend_from_slice(&[7; 16]);
        topic.push(0);
        assert_eq!(
            decode_value(&topic),
            Ok(Decoded::Record(MetadataRecord::Topic(TopicRecord {
                name: "t".into(),
                topic_id: uuid(7),
            })))
        );

        // PartitionChangeRecord v0, partition 3, only tag 1 Leader = -1
        // (as the 3.4 broker's controlled shutdown wrote it).
        let mut change = vec![1, 5, 0, 0, 0, 0, 3];
        change.extend_from_slice(&[7; 16]);
        change.extend_from_slice(&[1, 1, 4, 0xff, 0xff, 0xff, 0xff]);
        let Ok(Decoded::Record(MetadataRecord::PartitionChange(c))) = decode_value(&change) else {
            panic!("{:?}", decode_value(&change));
        };
        assert_eq!(
            (c.partition_id, c.topic_id, c.leader),
            (3, uuid(7), NO_LEADER)
        );
        assert_eq!((c.isr, c.replicas, c.directories), (None, None, None));
        assert_eq!(c.leader_recovery_state, -1);

        // PartitionRecord v1: partition 0, replicas [1], isr [1], no
        // removing/adding, leader 1, epochs 0/0, directories [uuid 9],
        // tag 0 LeaderRecoveryState = 1.
        let mut partition = vec![1, 3, 1, 0, 0, 0, 0];
        partition.extend_from_slice(&[7; 16]);
        partition.extend_from_slice(&[2, 0, 0, 0, 1, 2, 0, 0, 0, 1, 1, 1]);
        partition.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        partition.extend_from_slice(&[9; 16]);
        partition.extend_from_slice(&[1, 0, 1, 1]);
        let Ok(Decoded::Record(MetadataRecord::Partition(p))) = decode_value(&partition) else {
            panic!("{:?}", decode_value(&partition));
        };
        let r = &p.registration;
        assert_eq!(
            (r.replicas.clone(), r.isr.clone(), r.leader),
            (vec![1], vec![1], 1)
        );
        assert_eq!(r.directories, vec![uuid(9)]);
        assert_eq!(r.leader_recovery_state, 1);

        // ConfigRecord: topic "t", retention.ms deleted (null value).
        let mut config = vec![1, 4, 0, 2, 2, b't', 13];
        config.extend_from_slice(b"retention.ms");
        config.extend_from_slice(&[0, 0]);
        assert_eq!(
            decode_value(&config),
            Ok(Decoded::Record(MetadataRecord::Config(ConfigRecord {
                resource_type: RESOURCE_TOPIC,
                resource_name: "t".into(),
                name: "retention.ms".into(),
                value: None,
            })))
        );

        // FeatureLevelRecord metadata.version = 8, as in 3.4's
        // bootstrap.checkpoint.
        let mut feature = vec![1, 12, 0, 17];
        feature.extend_from_slice(b"metadata.version");
        feature.extend_from_slice(&[0, 8, 0]);
        assert_eq!(
            decode_value(&feature),
            Ok(Decoded::Record(MetadataRecord::FeatureLevel {
                name: "metadata.version".into(),
                level: 8,
            }))
        );

        // BeginTransactionRecord with tag 0 Name "b"; EndTransaction.
        assert_eq!(
            decode_value(&[1, 23, 0, 1, 0, 2, 2, b'b']),
            Ok(Decoded::Record(MetadataRecord::BeginTransaction {
                name: Some("b".into())
            }))
        );
        assert_eq!(
            decode_value(&[1, 24, 0, 0]),
            Ok(Decoded::Record(MetadataRecord::EndTransaction))
        );
    }

    #[test]
    fn control_records_decode_from_their_version_0_bodies() {
        let rec = |kind: i16, value: Vec<u8>| Record {
            key: Some([0i16.to_be_bytes(), kind.to_be_bytes()].concat()),
            value: Some(value),
            ..Record::default()
        };
        // LeaderChangeMessage v0: leader 1, voters [1], granting [1].
        let leader = rec(
            2,
            vec![0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 1, 0, 2, 0, 0, 0, 1, 0, 0],
        );
        assert_eq!(
            decode_control(&leader),
            Ok(ControlRecord::LeaderChange { leader_id: Some(1) })
        );
        let header = rec(3, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0]);
        assert_eq!(
            decode_control(&header),
            Ok(ControlRecord::SnapshotHeader {
                last_contained_log_timestamp: Some(5)
            })
        );
        assert_eq!(
            decode_control(&rec(4, vec![0, 0, 0])),
            Ok(ControlRecord::SnapshotFooter)
        );
        assert_eq!(
            decode_control(&rec(6, vec![])),
            Ok(ControlRecord::Other { kind: 6 })
        );
        assert!(decode_control(&rec(3, vec![0])).is_err());
    }
}
