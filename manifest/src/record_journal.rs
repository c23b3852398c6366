//! The mirror records of a whole log dir in one append-only journal
//! (issue 31): a command or a cycle that changes the records of 10,000
//! partitions appends 10,000 entries to one file and makes them durable
//! with one fsync, where one file per partition cost a write, an fsync, a
//! rename and a directory fsync each. Pure: bytes in, records out; the
//! file is `partdir::record`'s.
//!
//! ```text
//! header  magic "SMRJ" (4) | format version u16 (1)
//! entry   length u32 (bytes after the CRC) | CRC-32C u32 (of those bytes) |
//!         name length u16 | partition dir name | record
//! ```
//!
//! The record is [`MirrorRecord::encode`]'s bytes (with their own CRC-32C
//! trailer); an empty record is a removal. Integers are big-endian, like
//! Kafka's. The newest entry of a name is its record.
//!
//! Invariants of [`replay`] (any byte string is an error or a replay,
//! never a panic, and nothing is allocated beyond the records decoded):
//! - a torn tail (an entry cut short by a crash during its append, or the
//!   zeros some filesystems leave after one) ends the replay: the entries
//!   before it stand, the tail's offset is returned for the writer to
//!   truncate. A tail is torn when its entry runs past the end of the
//!   bytes, when it is the last entry and fails its CRC-32C, or when every
//!   byte from it on is zero;
//! - any other damage (an entry that fails its CRC-32C with more entries
//!   after it, a name that is not a partition dir's, a record that does
//!   not decode) is an error naming the offset: a damaged journal is never
//!   read as older records, which would move a partition back in time.

use std::collections::BTreeMap;

use crate::mirror_record::MirrorRecord;

/// The first bytes of a journal.
pub const MAGIC: &[u8; 4] = b"SMRJ";
/// The format version written.
pub const VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 6;
/// Bytes of an entry before its payload (length and CRC-32C).
pub const ENTRY_HEAD_BYTES: usize = 8;
/// Largest payload an entry may claim (a record is under a few KiB).
pub const MAX_ENTRY_BYTES: usize = 1 << 20;

/// Why a journal cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Not a journal of this format.
    #[error("not a mirror-record journal: {0}")]
    Header(String),
    /// Damage before the tail.
    #[error("damaged at byte {offset}: {reason}")]
    Damaged {
        /// Where the damaged entry starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// A replayed journal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replay {
    /// The newest record of each partition dir name (removed ones absent).
    pub records: BTreeMap<String, MirrorRecord>,
    /// Bytes of the newest entry of each name in `records`.
    pub entry_bytes: BTreeMap<String, u64>,
    /// Bytes of whole entries (with the header): where the next entry goes.
    pub valid_len: u64,
    /// Entries replayed.
    pub entries: u64,
    /// True when a torn tail was found past `valid_len`.
    pub torn: bool,
}

impl Replay {
    /// What a rewritten journal would hold: the header and the newest
    /// entry of each record.
    pub fn live_bytes(&self) -> u64 {
        HEADER_BYTES as u64 + self.entry_bytes.values().sum::<u64>()
    }
}

/// The header of a new journal.
pub fn header() -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..4].copy_from_slice(MAGIC);
    h[4..].copy_from_slice(&VERSION.to_be_bytes());
    h
}

/// One entry: `record` (its encoded bytes) of partition dir `name`, or its
/// removal (`None`).
pub fn entry(name: &str, record: Option<&[u8]>) -> Vec<u8> {
    let record = record.unwrap_or(&[]);
    let payload_len = 2 + name.len() + record.len();
    let mut out = Vec::with_capacity(ENTRY_HEAD_BYTES + payload_len);
    out.extend_from_slice(&(payload_len as u32).to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(record);
    let crc = crate::codec::crc32c(&out[ENTRY_HEAD_BYTES..]);
    out[4..8].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Replays a whole journal (header included).
pub fn replay(bytes: &[u8]) -> Result<Replay, JournalError> {
    if bytes.len() < HEADER_BYTES {
        return Err(JournalError::Header(format!(
            "{} bytes, shorter than the header",
            bytes.len()
        )));
    }
    if &bytes[..4] != MAGIC {
        return Err(JournalError::Header("wrong magic".into()));
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(JournalError::Header(format!(
            "format version {version}, this build reads {VERSION}"
        )));
    }
    let mut r = Replay {
        valid_len: HEADER_BYTES as u64,
        ..Replay::default()
    };
    replay_more(&mut r, &bytes[HEADER_BYTES..])?;
    Ok(r)
}

/// Replays `more`, the bytes of the journal from `r.valid_len` on, into
/// `r` (what a reader that replayed up to there reads after an append).
pub fn replay_more(r: &mut Replay, more: &[u8]) -> Result<(), JournalError> {
    let mut at = 0;
    while at < more.len() {
        let offset = r.valid_len;
        let rest = &more[at..];
        match next_entry(rest) {
            Next::Entry { payload, len } => {
                let damaged = |reason: String| JournalError::Damaged { offset, reason };
                let name_len = u16::from_be_bytes([payload[0], payload[1]]) as usize;
                let name = payload
                    .get(2..2 + name_len)
                    .and_then(|n| std::str::from_utf8(n).ok())
                    .filter(|n| kafkalog::topic::parse_dir_name(n).is_ok())
                    .ok_or_else(|| damaged("its name is not a partition dir's".into()))?;
                let record = &payload[2 + name_len..];
                if record.is_empty() {
                    r.records.remove(name);
                    r.entry_bytes.remove(name);
                } else {
                    let m = MirrorRecord::decode(record)
                        .map_err(|e| damaged(format!("its record of {name}: {e}")))?;
                    r.records.insert(name.to_string(), m);
                    r.entry_bytes.insert(name.to_string(), len as u64);
                }
                r.entries += 1;
                at += len;
                r.valid_len += len as u64;
            }
            Next::Torn => {
                r.torn = true;
                return Ok(());
            }
            Next::Damaged(reason) => return Err(JournalError::Damaged { offset, reason }),
        }
    }
    Ok(())
}

/// What the bytes at an entry's start hold.
enum Next<'a> {
    /// A whole entry whose CRC-32C matches: its payload and its size.
    Entry { payload: &'a [u8], len: usize },
    /// The tail of an append a crash cut.
    Torn,
    /// Damage with more entries after it.
    Damaged(String),
}

fn next_entry(rest: &[u8]) -> Next<'_> {
    let all_zero = rest.iter().all(|b| *b == 0);
    let bad = |reason: String| {
        if all_zero {
            Next::Torn
        } else {
            Next::Damaged(reason)
        }
    };
    if rest.len() < ENTRY_HEAD_BYTES {
        return Next::Torn;
    }
    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let crc = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
    if !(3..=MAX_ENTRY_BYTES).contains(&len) {
        return bad(format!("an entry claims {len} bytes"));
    }
    let end = ENTRY_HEAD_BYTES + len;
    if rest.len() < end {
        return Next::Torn;
    }
    let payload = &rest[ENTRY_HEAD_BYTES..end];
    if crate::codec::crc32c(payload) != crc {
        if rest.len() == end {
            return Next::Torn;
        }
        return bad("its CRC-32C does not match".into());
    }
    Next::Entry { payload, len: end }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror_record::fixtures::sample;

    fn journal(entries: &[(&str, Option<MirrorRecord>)]) -> Vec<u8> {
        let mut out = header().to_vec();
        for (name, r) in entries {
            let bytes = r.as_ref().map(|r| r.encode().expect("encode"));
            out.extend(entry(name, bytes.as_deref()));
        }
        out
    }

    fn with_lme(lme: i32) -> MirrorRecord {
        let mut r = sample();
        r.lme = Some(lme);
        r
    }

    #[test]
    fn the_newest_entry_of_a_name_is_its_record_and_a_removal_removes_it() {
        let bytes = journal(&[
            ("t-0", Some(with_lme(1))),
            ("t-1", Some(with_lme(2))),
            ("t-0", Some(with_lme(3))),
            ("t-1", None),
        ]);
        let r = replay(&bytes).expect("replay");
        assert_eq!(r.records.len(), 1);
        assert_eq!(r.records["t-0"].lme, Some(3));
        assert_eq!(r.entries, 4);
        assert_eq!(r.valid_len, bytes.len() as u64);
        assert!(!r.torn);
        let one = journal(&[("t-0", Some(with_lme(3)))]);
        assert_eq!(r.live_bytes(), one.len() as u64);
    }

    /// One row per way a journal ends: (what, bytes cut or appended,
    /// records replayed, torn, damaged).
    #[test]
    fn tails_torn_by_a_crash_end_the_replay_and_damage_before_them_is_an_error() {
        let two = journal(&[("t-0", Some(with_lme(1))), ("t-1", Some(with_lme(2)))]);
        let first_end = journal(&[("t-0", Some(with_lme(1)))]).len();
        let mut flipped_last = two.clone();
        *flipped_last.last_mut().expect("byte") ^= 1;
        let mut flipped_first = two.clone();
        flipped_first[first_end - 1] ^= 1;
        let mut zeros = two.clone();
        zeros.extend([0u8; 700]);
        let mut short_head = two.clone();
        short_head.extend([0u8, 0, 1]);
        let mut huge = two.clone();
        huge.extend([0xff; 12]);
        type Row = (&'static str, Vec<u8>, usize, bool, bool);
        let rows: Vec<Row> = vec![
            ("whole", two.clone(), 2, false, false),
            (
                "the last entry cut in its payload",
                two[..two.len() - 5].to_vec(),
                1,
                true,
                false,
            ),
            (
                "the last entry cut in its length",
                two[..first_end + 3].to_vec(),
                1,
                true,
                false,
            ),
            ("the last entry fails its CRC", flipped_last, 1, true, false),
            ("zeros after the last entry", zeros, 2, true, false),
            ("a head cut short", short_head, 2, true, false),
            (
                "an entry before another fails its CRC",
                flipped_first,
                0,
                false,
                true,
            ),
            ("a length past the bound, not zeros", huge, 0, false, true),
        ];
        for (what, bytes, records, torn, damaged) in rows {
            match replay(&bytes) {
                Ok(r) => {
                    assert!(!damaged, "{what}: replayed {r:?}");
                    assert_eq!(r.records.len(), records, "{what}");
                    assert_eq!(r.torn, torn, "{what}");
                    assert!(r.valid_len <= bytes.len() as u64, "{what}");
                }
                Err(e) => assert!(damaged, "{what}: {e}"),
            }
        }
    }

    #[test]
    fn a_reader_continues_from_where_it_stopped() {
        let bytes = journal(&[("t-0", Some(with_lme(1))), ("t-0", Some(with_lme(5)))]);
        let first = journal(&[("t-0", Some(with_lme(1)))]);
        let mut r = replay(&first).expect("replay");
        replay_more(&mut r, &bytes[first.len()..]).expect("more");
        assert_eq!(r, replay(&bytes).expect("replay"));
    }

    #[test]
    fn headers_and_names_are_checked() {
        assert!(matches!(replay(b"SMR"), Err(JournalError::Header(_))));
        assert!(matches!(
            replay(b"XXXX\0\x01"),
            Err(JournalError::Header(_))
        ));
        assert!(matches!(
            replay(b"SMRJ\0\x02"),
            Err(JournalError::Header(_))
        ));
        let mut bad = header().to_vec();
        bad.extend(entry("../etc", Some(b"{}")));
        bad.extend(entry("t-0", None));
        assert!(matches!(
            replay(&bad),
            Err(JournalError::Damaged { offset: 6, .. })
        ));
    }

    proptest::proptest! {
        /// Any bytes after a header: a replay or an error, never a panic.
        #[test]
        fn any_bytes_replay_or_fail(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut bytes = header().to_vec();
            bytes.extend(tail);
            let _ = replay(&bytes);
        }
    }
}
