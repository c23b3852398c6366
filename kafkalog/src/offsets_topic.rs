//! Records of `__consumer_offsets`, the topic where Kafka keeps committed
//! offsets and group metadata, in Kafka's format (the JSON schemas
//! `OffsetCommitKey`, `OffsetCommitValue`, `GroupMetadataKey` and
//! `GroupMetadataValue` of Kafka's group-coordinator module).
//!
//! Every key and value starts with an int16 version. The key version is
//! the record type:
//!
//! ```text
//! key 0, 1  OffsetCommitKey    group string | topic string | partition i32
//! key 2     GroupMetadataKey   group string
//! key >= 3  newer record types (KIP-848 consumer, share and streams groups): not read here
//!
//! OffsetCommitValue  v0: offset i64 | metadata string | commit_timestamp i64
//!                    v1: offset i64 | metadata string | commit_timestamp i64 | expire_timestamp i64
//!                    v2: offset i64 | metadata string | commit_timestamp i64
//!                    v3: offset i64 | leader_epoch i32 | metadata string | commit_timestamp i64
//!                    v4: v3's fields, flexible (compact strings, tagged fields)
//! GroupMetadataValue v0-v4: protocol_type string | generation i32 | protocol string? |
//!                    leader string? | current_state_timestamp i64 (v2+) | members [...]
//!                    (v4 flexible)
//! ```
//!
//! Strings are an int16 length and UTF-8 (a nullable one is -1 when null);
//! in flexible versions a compact string is a varint length + 1 and every
//! struct ends with tagged fields. A null value is a tombstone: the offset
//! was deleted (expired, or its group or topic deleted), or for key 2 the
//! group was removed. An empty member list means the group is Empty.
//!
//! The partition of a group is Kafka's: `abs(groupId.hashCode()) % 50`, with
//! Java's `String.hashCode` over UTF-16 code units and `Utils.abs` (the sign
//! bit cleared).
//!
//! What is written here is what a Kafka 3.x/4.x broker writes for a commit
//! (`OffsetCommitKey` v1, `OffsetCommitValue` v3), so a broker started on the
//! log dir finds the offsets.
//!
//! Invariants: decoding never panics; a record too short or with invalid
//! UTF-8 is [`OffsetsRecordError`]; a record of a version this module does
//! not know is [`OffsetsRecord::Unknown`], for the caller to skip and count.

use crate::builder::{BatchSpec, RecordInput, build_batch};
use crate::coordinator_wire::Reader;

/// The offsets topic.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Kafka's default `offsets.topic.num.partitions`.
pub const OFFSETS_PARTITIONS: i32 = 50;

/// Java's `String.hashCode`.
pub fn java_hash_code(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__consumer_offsets` partition of `group` (of 50).
pub fn partition_for(group: &str) -> i32 {
    (java_hash_code(group) & 0x7fff_ffff) % OFFSETS_PARTITIONS
}

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The next offset to read.
    pub offset: i64,
    /// The leader epoch of the last record read, -1 when unknown.
    pub leader_epoch: i32,
    /// The client's metadata string.
    pub metadata: String,
    /// When it was committed (ms since the epoch), -1 when unknown.
    pub commit_timestamp: i64,
}

/// A group's metadata as its coordinator last recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// "consumer", "connect", ...
    pub protocol_type: String,
    /// The generation.
    pub generation: i32,
    /// The chosen protocol ("range", ...), `None` when none.
    pub protocol: Option<String>,
    /// The leader's member id.
    pub leader: Option<String>,
    /// When the group entered its state (ms), -1 when not recorded (v0, v1).
    pub current_state_timestamp: i64,
    /// Its members; empty when the group is Empty.
    pub members: Vec<MemberMetadata>,
}

impl GroupMetadata {
    /// Kafka's name for the state the record implies: `Empty` without
    /// members, `Stable` with.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }
}

/// One member of a group (its subscription and assignment are skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    /// The member id.
    pub member_id: String,
    /// The static member id (v3+).
    pub group_instance_id: Option<String>,
    /// The client id.
    pub client_id: String,
    /// The client's host.
    pub client_host: String,
    /// Rebalance timeout in ms (v1+, else -1).
    pub rebalance_timeout: i32,
    /// Session timeout in ms.
    pub session_timeout: i32,
}

/// A record of `__consumer_offsets`, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsRecord {
    /// An offset commit (key versions 0 and 1).
    Commit {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset, `None` for a tombstone.
        committed: Option<Committed>,
    },
    /// A group's metadata (key version 2).
    Group {
        /// The group.
        group: String,
        /// Its metadata, `None` for a tombstone (the group was removed).
        metadata: Option<GroupMetadata>,
    },
    /// A record type or value version this module does not read.
    Unknown {
        /// The key version (the record type).
        key_version: i16,
        /// The value version, when the key was known but the value not.
        value_version: Option<i16>,
    },
}

/// A record that is not in Kafka's format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed __consumer_offsets record: {0}")]
pub struct OffsetsRecordError(pub &'static str);

fn put_string(out: &mut Vec<u8>, s: &str) -> Result<(), String> {
    let len =
        i16::try_from(s.len()).map_err(|_| format!("string of {} bytes is too long", s.len()))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// The key of an offset commit (version 1).
pub fn commit_key(group: &str, topic: &str, partition: i32) -> Result<Vec<u8>, String> {
    let mut k = 1i16.to_be_bytes().to_vec();
    put_string(&mut k, group)?;
    put_string(&mut k, topic)?;
    k.extend_from_slice(&partition.to_be_bytes());
    Ok(k)
}

/// The value of an offset commit (version 3).
pub fn commit_value(c: &Committed) -> Result<Vec<u8>, String> {
    let mut v = 3i16.to_be_bytes().to_vec();
    v.extend_from_slice(&c.offset.to_be_bytes());
    v.extend_from_slice(&c.leader_epoch.to_be_bytes());
    put_string(&mut v, &c.metadata)?;
    v.extend_from_slice(&c.commit_timestamp.to_be_bytes());
    Ok(v)
}

/// One batch holding `commits` of `group`, a `None` being a tombstone
/// (offsets are assigned by the writer).
pub fn commit_batch(
    group: &str,
    commits: &[(String, i32, Option<Committed>)],
    now_ms: i64,
) -> Result<Vec<u8>, String> {
    let records = commits
        .iter()
        .map(|(topic, partition, c)| {
            Ok(RecordInput {
                timestamp: now_ms,
                key: Some(commit_key(group, topic, *partition)?),
                value: c.as_ref().map(commit_value).transpose()?,
                headers: vec![],
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    build_batch(&BatchSpec::new(0, 0), &records).map_err(|e| e.to_string())
}

type Parsed<T> = Result<T, OffsetsRecordError>;

impl From<&'static str> for OffsetsRecordError {
    fn from(what: &'static str) -> OffsetsRecordError {
        OffsetsRecordError(what)
    }
}

/// Decodes one record of `__consumer_offsets` (`value` `None`: a tombstone).
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<OffsetsRecord, OffsetsRecordError> {
    let mut k = Reader::new(key);
    let key_version = k.i16("key version")?;
    match key_version {
        0 | 1 => {
            let group = k.string("group")?;
            let topic = k.string("topic")?;
            let partition = k.i32("partition")?;
            let committed = match value {
                None => None,
                Some(v) => match decode_commit_value(v)? {
                    Ok(c) => Some(c),
                    Err(value_version) => {
                        return Ok(OffsetsRecord::Unknown {
                            key_version,
                            value_version: Some(value_version),
                        });
                    }
                },
            };
            Ok(OffsetsRecord::Commit {
                group,
                topic,
                partition,
                committed,
            })
        }
        2 => {
            let group = k.string("group")?;
            let metadata = match value {
                None => None,
                Some(v) => match decode_group_value(v)? {
                    Ok(m) => Some(m),
                    Err(value_version) => {
                        return Ok(OffsetsRecord::Unknown {
                            key_version,
                            value_version: Some(value_version),
                        });
                    }
                },
            };
            Ok(OffsetsRecord::Group { group, metadata })
        }
        _ => Ok(OffsetsRecord::Unknown {
            key_version,
            value_version: None,
        }),
    }
}

/// An `OffsetCommitValue`; `Err(version)` for a version not known here.
fn decode_commit_value(v: &[u8]) -> Parsed<Result<Committed, i16>> {
    let mut r = Reader::new(v);
    let version = r.i16("offset commit value version")?;
    if !(0..=4).contains(&version) {
        return Ok(Err(version));
    }
    r.flexible = version >= 4;
    let offset = r.i64("offset")?;
    let leader_epoch = if version >= 3 {
        r.i32("leader epoch")?
    } else {
        -1
    };
    let metadata = r.nullable_string("metadata")?.unwrap_or_default();
    let commit_timestamp = r.i64("commit timestamp")?;
    if version == 1 {
        r.i64("expire timestamp")?;
    }
    r.tagged_fields()?;
    Ok(Ok(Committed {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
    }))
}

/// A `GroupMetadataValue`; `Err(version)` for a version not known here.
fn decode_group_value(v: &[u8]) -> Parsed<Result<GroupMetadata, i16>> {
    let mut r = Reader::new(v);
    let version = r.i16("group metadata value version")?;
    if !(0..=4).contains(&version) {
        return Ok(Err(version));
    }
    r.flexible = version >= 4;
    let protocol_type = r.string("protocol type")?;
    let generation = r.i32("generation")?;
    let protocol = r.nullable_string("protocol")?;
    let leader = r.nullable_string("leader")?;
    let current_state_timestamp = if version >= 2 {
        r.i64("current state timestamp")?
    } else {
        -1
    };
    let count = r.array_len("members")?;
    let mut members = Vec::with_capacity(count);
    for _ in 0..count {
        let member_id = r.string("member id")?;
        let group_instance_id = if version >= 3 {
            r.nullable_string("group instance id")?
        } else {
            None
        };
        let client_id = r.string("client id")?;
        let client_host = r.string("client host")?;
        let rebalance_timeout = if version >= 1 {
            r.i32("rebalance timeout")?
        } else {
            -1
        };
        let session_timeout = r.i32("session timeout")?;
        r.skip_bytes("subscription")?;
        r.skip_bytes("assignment")?;
        r.tagged_fields()?;
        members.push(MemberMetadata {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout,
            session_timeout,
        });
    }
    r.tagged_fields()?;
    Ok(Ok(GroupMetadata {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp,
        members,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_kafkas() {
        // Java: "".hashCode() == 0, "abc".hashCode() == 96354,
        // "console-consumer-12345".hashCode() is negative.
        assert_eq!(java_hash_code(""), 0);
        assert_eq!(java_hash_code("abc"), 96354);
        assert_eq!(partition_for("abc"), 96354 % 50);
        let h = java_hash_code("console-consumer-12345");
        assert_eq!(
            partition_for("console-consumer-12345"),
            (h & 0x7fff_ffff) % 50
        );
        assert!((0..50).contains(&partition_for("ü-group-😀")));
    }

    fn committed(offset: i64, leader_epoch: i32, ts: i64) -> Committed {
        Committed {
            offset,
            leader_epoch,
            metadata: "m".into(),
            commit_timestamp: ts,
        }
    }

    #[test]
    fn a_commit_round_trips_and_a_tombstone_deletes() {
        let c = committed(42, 7, 1_700_000_000_000);
        let key = commit_key("g", "orders", 3).expect("key");
        let value = commit_value(&c).expect("value");
        assert_eq!(
            decode(&key, Some(&value)),
            Ok(OffsetsRecord::Commit {
                group: "g".into(),
                topic: "orders".into(),
                partition: 3,
                committed: Some(c)
            })
        );
        assert!(matches!(
            decode(&key, None),
            Ok(OffsetsRecord::Commit {
                committed: None,
                ..
            })
        ));
        // Malformed input is an error, never a panic.
        assert!(decode(&[0, 1, 0, 9, b'g'], None).is_err());
        assert!(decode(&key, Some(&[0, 3, 1])).is_err());
        assert!(decode(&[], None).is_err());
    }

    fn v(version: i16) -> Vec<u8> {
        version.to_be_bytes().to_vec()
    }

    #[test]
    fn every_commit_value_version_reads() {
        let key = commit_key("g", "t", 0).expect("key");
        let decoded = |value: Vec<u8>| match decode(&key, Some(&value)) {
            Ok(OffsetsRecord::Commit {
                committed: Some(c), ..
            }) => c,
            other => panic!("a commit, got {other:?}"),
        };
        // v0: offset, metadata, commit timestamp.
        let mut v0 = v(0);
        v0.extend_from_slice(&5i64.to_be_bytes());
        v0.extend_from_slice(&[0, 1, b'x']);
        v0.extend_from_slice(&9i64.to_be_bytes());
        let c = decoded(v0);
        assert_eq!(
            (
                c.offset,
                c.leader_epoch,
                c.metadata.as_str(),
                c.commit_timestamp
            ),
            (5, -1, "x", 9)
        );
        // v1: ... and the expire timestamp.
        let mut v1 = v(1);
        v1.extend_from_slice(&5i64.to_be_bytes());
        v1.extend_from_slice(&0i16.to_be_bytes());
        v1.extend_from_slice(&9i64.to_be_bytes());
        v1.extend_from_slice(&10i64.to_be_bytes());
        assert_eq!(decoded(v1), committed(5, -1, 9).with_metadata(""));
        // v3 is what commit_value writes.
        let c3 = committed(77, 4, 123);
        assert_eq!(decoded(commit_value(&c3).expect("v3")), c3);
        // v4: flexible; compact metadata, a tagged field to skip.
        let mut v4 = v(4);
        v4.extend_from_slice(&77i64.to_be_bytes());
        v4.extend_from_slice(&4i32.to_be_bytes());
        v4.extend_from_slice(&[2, b'm']);
        v4.extend_from_slice(&123i64.to_be_bytes());
        v4.extend_from_slice(&[1, 0, 2, 0xaa, 0xbb]);
        assert_eq!(decoded(v4), c3);
        // v5 is not known: skipped, with its versions.
        let mut v5 = v(5);
        v5.extend_from_slice(&[0; 16]);
        assert_eq!(
            decode(&key, Some(&v5)),
            Ok(OffsetsRecord::Unknown {
                key_version: 1,
                value_version: Some(5)
            })
        );
    }

    impl Committed {
        fn with_metadata(mut self, m: &str) -> Committed {
            self.metadata = m.into();
            self
        }
    }

    fn group_key(group: &str) -> Vec<u8> {
        let mut k = v(2);
        put_string(&mut k, group).expect("group");
        k
    }

    #[test]
    fn group_metadata_v3_with_members_and_empty() {
        let mut val = v(3);
        put_string(&mut val, "consumer").expect("s");
        val.extend_from_slice(&5i32.to_be_bytes());
        put_string(&mut val, "range").expect("s");
        put_string(&mut val, "m-1").expect("s");
        val.extend_from_slice(&1_700i64.to_be_bytes());
        val.extend_from_slice(&1i32.to_be_bytes());
        put_string(&mut val, "m-1").expect("s");
        val.extend_from_slice(&(-1i16).to_be_bytes());
        put_string(&mut val, "client").expect("s");
        put_string(&mut val, "/10.0.0.1").expect("s");
        val.extend_from_slice(&300_000i32.to_be_bytes());
        val.extend_from_slice(&45_000i32.to_be_bytes());
        val.extend_from_slice(&2i32.to_be_bytes());
        val.extend_from_slice(&[1, 2]);
        val.extend_from_slice(&0i32.to_be_bytes());
        let Ok(OffsetsRecord::Group {
            group,
            metadata: Some(m),
        }) = decode(&group_key("billing"), Some(&val))
        else {
            panic!("group metadata");
        };
        assert_eq!(group, "billing");
        assert_eq!((m.generation, m.state()), (5, "Stable"));
        assert_eq!(m.protocol.as_deref(), Some("range"));
        assert_eq!(m.members[0].client_host, "/10.0.0.1");
        assert_eq!(m.members[0].session_timeout, 45_000);

        // v4 flexible, no members: Empty.
        let mut v4 = v(4);
        v4.extend_from_slice(&[9]);
        v4.extend_from_slice(b"consumer");
        v4.extend_from_slice(&6i32.to_be_bytes());
        v4.extend_from_slice(&[0, 0]);
        v4.extend_from_slice(&(-1i64).to_be_bytes());
        v4.extend_from_slice(&[1, 0]);
        let Ok(OffsetsRecord::Group {
            metadata: Some(m), ..
        }) = decode(&group_key("g"), Some(&v4))
        else {
            panic!("group metadata v4");
        };
        assert_eq!((m.state(), m.protocol, m.generation), ("Empty", None, 6));
        // A group tombstone.
        assert_eq!(
            decode(&group_key("g"), None),
            Ok(OffsetsRecord::Group {
                group: "g".into(),
                metadata: None
            })
        );
        // A newer record type (KIP-848) is skipped.
        assert_eq!(
            decode(&[0, 3, 0, 1, b'g'], Some(&[0, 0])),
            Ok(OffsetsRecord::Unknown {
                key_version: 3,
                value_version: None
            })
        );
        // A member count beyond the bytes is an error, not an allocation.
        let mut bad = v(0);
        put_string(&mut bad, "consumer").expect("s");
        bad.extend_from_slice(&1i32.to_be_bytes());
        bad.extend_from_slice(&(-1i16).to_be_bytes());
        bad.extend_from_slice(&(-1i16).to_be_bytes());
        bad.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode(&group_key("g"), Some(&bad)).is_err());
    }
}
