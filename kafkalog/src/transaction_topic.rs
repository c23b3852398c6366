//! Records of `__transaction_state`, the topic where Kafka's transaction
//! coordinators keep each transactional id's state, in Kafka's format (the
//! JSON schemas `TransactionLogKey` and `TransactionLogValue` of Kafka's
//! transaction-coordinator module). What issue 32's consistency mode reads
//! of the source: which partitions a transaction spans and what the
//! coordinator decided.
//!
//! Every key and value starts with an int16 version:
//!
//! ```text
//! key   0   TransactionLogKey   transactional_id string
//! key  >0   not a transaction record: not read here
//!
//! value 0   producer_id i64 | producer_epoch i16 | timeout_ms i32 |
//!           status i8 | partitions [topic string | partition_ids [i32]]? |
//!           last_update_ms i64 | start_ms i64
//! value 1   v0's fields, flexible (compact strings and arrays, tagged
//!           fields ending every struct); top-level tags:
//!           0 previous_producer_id i64, 1 next_producer_id i64,
//!           2 client_transaction_version i16 (2: KIP-890's protocol)
//! ```
//!
//! A null value is a tombstone: the transactional id expired (its state
//! went Dead) and compaction will remove its earlier records. The status
//! byte is Kafka's `TransactionState` id (0 Empty to 7 PrepareEpochFence).
//! Ongoing and Prepare* records carry the transaction's partitions;
//! Complete* and Empty records carry none (KIP-890 aside, the partition
//! list of a finished transaction is gone from the topic once the Complete
//! record is written, and compaction keeps only the newest record of an id).
//!
//! The partition of a transactional id is Kafka's: `abs(id.hashCode()) %
//! transaction.state.log.num.partitions` (50 by default).
//!
//! Invariants: decoding never panics and allocates at most what the bytes
//! hold; a record too short, with invalid UTF-8, an unknown status or bytes
//! left over is [`TxnRecordError`] naming the field; a record of a version
//! this module does not know is [`TxnRecord::Unknown`], for the caller to
//! skip and count.

use crate::coordinator_wire::{Reader, Wire};

/// The transaction state topic.
pub const TRANSACTION_TOPIC: &str = "__transaction_state";
/// Kafka's default `transaction.state.log.num.partitions`.
pub const TRANSACTION_PARTITIONS: i32 = 50;

/// The `__transaction_state` partition of `transactional_id` among
/// `partitions` (Kafka's `TransactionStateManager.partitionFor`).
pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
    (crate::offsets_topic::java_hash_code(transactional_id) & 0x7fff_ffff) % partitions.max(1)
}

/// A transaction's state in its coordinator (Kafka's `TransactionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum TxnStatus {
    /// No transaction under way (after InitProducerId).
    Empty,
    /// Partitions have been added: records may be written.
    Ongoing,
    /// The coordinator decided to commit; markers are being written.
    PrepareCommit,
    /// The coordinator decided to abort; markers are being written.
    PrepareAbort,
    /// Every partition has its COMMIT marker.
    CompleteCommit,
    /// Every partition has its ABORT marker.
    CompleteAbort,
    /// The transactional id expired.
    Dead,
    /// An epoch bump fencing an older producer, before its abort.
    PrepareEpochFence,
}

impl TxnStatus {
    /// The status of Kafka's id, `None` for an id Kafka does not define.
    pub fn from_id(id: i8) -> Option<TxnStatus> {
        Some(match id {
            0 => TxnStatus::Empty,
            1 => TxnStatus::Ongoing,
            2 => TxnStatus::PrepareCommit,
            3 => TxnStatus::PrepareAbort,
            4 => TxnStatus::CompleteCommit,
            5 => TxnStatus::CompleteAbort,
            6 => TxnStatus::Dead,
            7 => TxnStatus::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's name for it (`kafka-transactions.sh describe`).
    pub fn name(self) -> &'static str {
        match self {
            TxnStatus::Empty => "Empty",
            TxnStatus::Ongoing => "Ongoing",
            TxnStatus::PrepareCommit => "PrepareCommit",
            TxnStatus::PrepareAbort => "PrepareAbort",
            TxnStatus::CompleteCommit => "CompleteCommit",
            TxnStatus::CompleteAbort => "CompleteAbort",
            TxnStatus::Dead => "Dead",
            TxnStatus::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The coordinator's decision, once taken: `Some(true)` commit,
    /// `Some(false)` abort, `None` while open (or no transaction).
    pub fn decision(self) -> Option<bool> {
        match self {
            TxnStatus::PrepareCommit | TxnStatus::CompleteCommit => Some(true),
            TxnStatus::PrepareAbort | TxnStatus::CompleteAbort | TxnStatus::PrepareEpochFence => {
                Some(false)
            }
            TxnStatus::Empty | TxnStatus::Ongoing | TxnStatus::Dead => None,
        }
    }
}

/// A transactional id's state as its coordinator recorded it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TxnMetadata {
    /// The producer id in use.
    pub producer_id: i64,
    /// The producer id of the last committed transaction (v1 tag 0; -1).
    pub previous_producer_id: i64,
    /// The producer id given to the client at an epoch overflow (v1 tag 1;
    /// -1).
    pub next_producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// The transaction timeout.
    pub timeout_ms: i32,
    /// The state.
    pub status: TxnStatus,
    /// The partitions of the transaction, by topic (empty when none; `null`
    /// on the wire reads as empty too).
    pub partitions: Vec<(String, Vec<i32>)>,
    /// When the state last changed (ms since the epoch).
    pub last_update_ms: i64,
    /// When the transaction started (ms; -1 when none is under way).
    pub start_ms: i64,
    /// The client's transaction protocol (v1 tag 2): 0 or 1 the original,
    /// 2 KIP-890's, whose markers carry the producer epoch plus one.
    pub client_transaction_version: i16,
}

/// A record of `__transaction_state`, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRecord {
    /// A transactional id's state (key version 0).
    Transaction {
        /// The transactional id.
        transactional_id: String,
        /// Its state, `None` for a tombstone (the id expired).
        metadata: Option<TxnMetadata>,
    },
    /// A key or value version this module does not read.
    Unknown {
        /// The key version.
        key_version: i16,
        /// The value version, when the key was known but the value not.
        value_version: Option<i16>,
    },
}

/// The newest state of every transactional id, from the records of its
/// `__transaction_state` partition applied in log order (what the
/// coordinator loads at startup): a record replaces the id's state, a
/// tombstone removes the id, a record of an unknown version is counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnStates {
    /// By transactional id.
    pub ids: std::collections::BTreeMap<String, TxnMetadata>,
    /// Records of a key or value version not read ([`TxnRecord::Unknown`]).
    pub unknown: u64,
}

impl TxnStates {
    /// Applies the next record of the log.
    pub fn apply(&mut self, record: TxnRecord) {
        match record {
            TxnRecord::Transaction {
                transactional_id,
                metadata: Some(m),
            } => {
                self.ids.insert(transactional_id, m);
            }
            TxnRecord::Transaction {
                transactional_id,
                metadata: None,
            } => {
                self.ids.remove(&transactional_id);
            }
            TxnRecord::Unknown { .. } => self.unknown += 1,
        }
    }
}

/// A record that is not in Kafka's format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed __transaction_state record: {0}")]
pub struct TxnRecordError(pub &'static str);

/// Decodes one record of `__transaction_state` (`value` `None`: a
/// tombstone).
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<TxnRecord, TxnRecordError> {
    let mut k = Reader::new(key);
    let key_version = k.i16("key version").map_err(TxnRecordError)?;
    if key_version != 0 {
        return Ok(TxnRecord::Unknown {
            key_version,
            value_version: None,
        });
    }
    let transactional_id = k.string("transactional id").map_err(TxnRecordError)?;
    if !k.rest().is_empty() {
        return Err(TxnRecordError("bytes after the key"));
    }
    let metadata = match value {
        None => None,
        Some(v) => match decode_value(v).map_err(TxnRecordError)? {
            Ok(m) => Some(m),
            Err(value_version) => {
                return Ok(TxnRecord::Unknown {
                    key_version,
                    value_version: Some(value_version),
                });
            }
        },
    };
    Ok(TxnRecord::Transaction {
        transactional_id,
        metadata,
    })
}

/// A `TransactionLogValue`; `Err(version)` for a version not known here.
fn decode_value(v: &[u8]) -> Wire<Result<TxnMetadata, i16>> {
    let mut r = Reader::new(v);
    let version = r.i16("value version")?;
    if !(0..=1).contains(&version) {
        return Ok(Err(version));
    }
    r.flexible = version >= 1;
    let producer_id = r.i64("producer id")?;
    let producer_epoch = r.i16("producer epoch")?;
    let timeout_ms = r.i32("transaction timeout")?;
    let status = TxnStatus::from_id(r.i8("transaction status")?).ok_or("transaction status")?;
    let mut partitions = Vec::new();
    if let Some(topics) = r.nullable_array_len("transaction partitions")? {
        for _ in 0..topics {
            let topic = r.string("topic")?;
            let count = r.array_len("partition ids")?;
            let mut ids = Vec::with_capacity(count.min(r.rest().len() / 4));
            for _ in 0..count {
                ids.push(r.i32("partition id")?);
            }
            r.tagged_fields()?;
            partitions.push((topic, ids));
        }
    }
    let last_update_ms = r.i64("last update timestamp")?;
    let start_ms = r.i64("start timestamp")?;
    let (mut previous_producer_id, mut next_producer_id, mut client_transaction_version) =
        (-1i64, -1i64, 0i16);
    r.tagged_fields_each(|tag, bytes| {
        let fixed = |n: usize| -> Wire<&[u8]> {
            if bytes.len() == n {
                Ok(bytes)
            } else {
                Err("tagged field size")
            }
        };
        match tag {
            0 => previous_producer_id = i64::from_be_bytes(array(fixed(8)?)),
            1 => next_producer_id = i64::from_be_bytes(array(fixed(8)?)),
            2 => client_transaction_version = i16::from_be_bytes(array(fixed(2)?)),
            // Later tags: skipped, as Kafka's reader keeps unknown ones.
            _ => {}
        }
        Ok(())
    })?;
    if !r.rest().is_empty() {
        return Err("bytes after the value");
    }
    Ok(Ok(TxnMetadata {
        producer_id,
        previous_producer_id,
        next_producer_id,
        producer_epoch,
        timeout_ms,
        status,
        partitions,
        last_update_ms,
        start_ms,
        client_transaction_version,
    }))
}

/// The first `N` bytes of `b`, which has exactly `N`.
fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_ids_names_and_decisions_are_kafkas() {
        // (id, name, decision): one row per Kafka TransactionState.
        let table: [(i8, &str, Option<bool>); 8] = [
            (0, "Empty", None),
            (1, "Ongoing", None),
            (2, "PrepareCommit", Some(true)),
            (3, "PrepareAbort", Some(false)),
            (4, "CompleteCommit", Some(true)),
            (5, "CompleteAbort", Some(false)),
            (6, "Dead", None),
            (7, "PrepareEpochFence", Some(false)),
        ];
        for (id, name, decision) in table {
            let s = TxnStatus::from_id(id).expect("known");
            assert_eq!((s.name(), s.decision()), (name, decision), "id {id}");
        }
        assert_eq!(TxnStatus::from_id(8), None);
        assert_eq!(TxnStatus::from_id(-1), None);
    }

    /// A v0 value: producer 7 epoch 1, status `status`, then `partitions`
    /// as raw bytes, then the two timestamps.
    fn v0(status: i8, partitions: &[u8]) -> Vec<u8> {
        let mut v = 0i16.to_be_bytes().to_vec();
        v.extend_from_slice(&7i64.to_be_bytes());
        v.extend_from_slice(&1i16.to_be_bytes());
        v.extend_from_slice(&60_000i32.to_be_bytes());
        v.push(status as u8);
        v.extend_from_slice(partitions);
        v.extend_from_slice(&5i64.to_be_bytes());
        v.extend_from_slice(&4i64.to_be_bytes());
        v
    }

    #[test]
    fn hostile_values_are_errors_naming_the_field_and_allocate_nothing_big() {
        let key = [0u8, 0, 0, 1, b't'];
        let null = (-1i32).to_be_bytes();
        // (value, the field named, or None when it decodes)
        let cases: Vec<(Vec<u8>, Option<&str>)> = vec![
            (v0(1, &null), None),
            (v0(9, &null), Some("transaction status")),
            // Two billion topics claimed in a few bytes.
            (
                v0(1, &i32::MAX.to_be_bytes()),
                Some("transaction partitions"),
            ),
            // One topic "a" claiming two billion partition ids.
            (
                v0(1, &[0, 0, 0, 1, 0, 1, b'a', 0x7f, 0xff, 0xff, 0xff]),
                Some("partition ids"),
            ),
            (
                [v0(1, &null), vec![0]].concat(),
                Some("bytes after the value"),
            ),
        ];
        for (value, field) in cases {
            match (decode(&key, Some(&value)), field) {
                (Ok(TxnRecord::Transaction { .. }), None) => {}
                (Err(TxnRecordError(got)), Some(want)) => assert_eq!(got, want),
                (other, want) => panic!("{want:?}: {other:?}"),
            }
        }
        assert_eq!(
            decode(&[0, 0, 0, 1, b't', 0], None),
            Err(TxnRecordError("bytes after the key"))
        );
    }
}
