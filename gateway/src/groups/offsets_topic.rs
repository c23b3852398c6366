//! Committed offsets as Kafka stores them: records of `__consumer_offsets`.
//!
//! The partition of a group is Kafka's: `abs(groupId.hashCode()) % 50`, with
//! Java's `String.hashCode` over UTF-16 code units and `Utils.abs` (the sign
//! bit cleared). A commit is one record per partition:
//!
//! ```text
//! key   = version i16 (1: OFFSET_COMMIT) | group string | topic string | partition i32
//! value = version i16 (3) | offset i64 | leader_epoch i32 | metadata string | commit_timestamp i64
//! ```
//!
//! (strings are an i16 length and UTF-8 bytes; a null value is a tombstone).
//! This is what a Kafka 3.x/4.x broker writes (`OffsetCommitKey` v1,
//! `OffsetCommitValue` v3), so a broker started on the log dir finds the
//! offsets. Reading also accepts key version 0 and value versions 0 to 3;
//! group metadata records (key version 2) and newer record types are
//! skipped.

use kafkalog::builder::{BatchSpec, RecordInput, build_batch};

/// The offsets topic.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Kafka's default `offsets.topic.num.partitions`.
pub const OFFSETS_PARTITIONS: i32 = 50;

/// Java's `String.hashCode`.
pub fn java_hash_code(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__consumer_offsets` partition of `group`.
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
    /// When it was committed (ms since the epoch).
    pub commit_timestamp: i64,
}

/// A record of `__consumer_offsets` this module understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsRecord {
    /// An offset commit (`None`: deleted).
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
    /// Anything else (group metadata, newer record types).
    Other,
}

fn put_string(out: &mut Vec<u8>, s: &str) -> Result<(), String> {
    let len =
        i16::try_from(s.len()).map_err(|_| format!("string of {} bytes is too long", s.len()))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// The key of an offset commit.
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

/// One batch holding `commits` of `group` (offsets assigned by the writer).
pub fn commit_batch(
    group: &str,
    commits: &[(String, i32, Committed)],
    now_ms: i64,
) -> Result<Vec<u8>, String> {
    let records = commits
        .iter()
        .map(|(topic, partition, c)| {
            Ok(RecordInput {
                timestamp: now_ms,
                key: Some(commit_key(group, topic, *partition)?),
                value: Some(commit_value(c)?),
                headers: vec![],
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    build_batch(&BatchSpec::new(0, 0), &records).map_err(|e| e.to_string())
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i64(&mut self) -> Option<i64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(i64::from_be_bytes(a))
    }
    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

/// Decodes one record; `None` when it is malformed.
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Option<OffsetsRecord> {
    let mut k = Reader(key);
    let key_version = k.i16()?;
    if !(0..=1).contains(&key_version) {
        return Some(OffsetsRecord::Other);
    }
    let group = k.string()?;
    let topic = k.string()?;
    let partition = k.i32()?;
    let committed = match value {
        None => None,
        Some(v) => {
            let mut v = Reader(v);
            let version = v.i16()?;
            let offset = v.i64()?;
            let leader_epoch = if version >= 3 { v.i32()? } else { -1 };
            let metadata = v.string()?;
            let commit_timestamp = match version {
                0 => -1,
                1..=3 => v.i64()?,
                _ => return Some(OffsetsRecord::Other),
            };
            Some(Committed {
                offset,
                leader_epoch,
                metadata,
                commit_timestamp,
            })
        }
    };
    Some(OffsetsRecord::Commit {
        group,
        topic,
        partition,
        committed,
    })
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

    #[test]
    fn a_commit_round_trips_and_a_tombstone_deletes() {
        let c = Committed {
            offset: 42,
            leader_epoch: 7,
            metadata: "m".into(),
            commit_timestamp: 1_700_000_000_000,
        };
        let key = commit_key("g", "orders", 3).expect("key");
        let value = commit_value(&c).expect("value");
        assert_eq!(
            decode(&key, Some(&value)),
            Some(OffsetsRecord::Commit {
                group: "g".into(),
                topic: "orders".into(),
                partition: 3,
                committed: Some(c)
            })
        );
        assert!(matches!(
            decode(&key, None),
            Some(OffsetsRecord::Commit {
                committed: None,
                ..
            })
        ));
        // Group metadata (key version 2) is not an offset.
        assert_eq!(
            decode(&[0, 2, 0, 1, b'g'], Some(&[0, 3])),
            Some(OffsetsRecord::Other)
        );
        // Malformed input is None, never a panic.
        assert_eq!(decode(&[0, 1, 0, 9, b'g'], None), None);
        assert_eq!(decode(&key, Some(&[0, 3, 1])), None);
    }

    #[test]
    fn a_version_1_value_with_its_expire_timestamp_reads() {
        let key = commit_key("g", "t", 0).expect("key");
        let mut v = 1i16.to_be_bytes().to_vec();
        v.extend_from_slice(&5i64.to_be_bytes());
        v.extend_from_slice(&0i16.to_be_bytes());
        v.extend_from_slice(&9i64.to_be_bytes());
        v.extend_from_slice(&10i64.to_be_bytes());
        let Some(OffsetsRecord::Commit {
            committed: Some(c), ..
        }) = decode(&key, Some(&v))
        else {
            panic!("a commit");
        };
        assert_eq!((c.offset, c.leader_epoch, c.commit_timestamp), (5, -1, 9));
    }
}
