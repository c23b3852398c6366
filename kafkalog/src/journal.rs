//! The framing of segmirror's journal of mirror records in a log dir
//! (`segmirror-mirror-records.journal`, issue 31): one append-only file per
//! log dir, an entry per change of a partition's record, so that a command
//! changing 10,000 partitions appends to one file and makes it durable with
//! one fsync. Kafka lists only directories in a log dir, so it ignores the
//! file. What an entry's payload holds is `manifest::record_journal`'s; the
//! file IO is `partdir::record`'s. Pure: bytes in, entries out.
//!
//! ```text
//! header  magic "SMRJ" (4) | format version u16 (1)
//! entry   length u32 (bytes after the CRC) | CRC-32C u32 (of those bytes) |
//!         name length u16 | partition dir name | topic id (16) |
//!         payload (empty: removal)
//! ```
//!
//! Integers are big-endian, like Kafka's. The newest entry of a name
//! stands for it. The topic id is the one the partition dir's
//! `partition.metadata` held when the entry was written (zero: none): a
//! reader takes an entry only for the dir it was written for, not for a
//! partition of the same name deleted and created again since (Kafka gives
//! every topic created a new id).
//!
//! Invariants of [`walk`] (any byte string is entries or an error, never a
//! panic, and nothing is allocated):
//! - a torn tail ends the walk, with the entries before it standing, as
//!   Kafka's log recovery truncates a torn batch: an entry that runs past
//!   the end of the bytes, the last entry when it fails its CRC-32C, or
//!   bytes that are all zero from an entry's start on (what some
//!   filesystems leave after a crash during an append);
//! - any other damage (an entry that fails its CRC-32C with more bytes
//!   after it, a length out of bounds, a name that is not a partition
//!   dir's) is an error naming its offset: a damaged journal is never read
//!   as an older one, which would move a partition back in time.

use std::collections::BTreeMap;

use crate::batch::crc32c;
use crate::topic::TopicId;

/// The journal's file name in a log dir.
pub const FILE: &str = "segmirror-mirror-records.journal";
/// The first bytes of a journal.
pub const MAGIC: &[u8; 4] = b"SMRJ";
/// The format version written.
pub const VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 6;
/// Bytes of an entry before its body (length and CRC-32C).
pub const ENTRY_HEAD_BYTES: usize = 8;
/// Largest body an entry may claim (a record is a few KiB at most).
pub const MAX_ENTRY_BYTES: usize = 1 << 20;

/// Why a journal cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Not a journal of this format.
    #[error("not a mirror-record journal: {0}")]
    Header(String),
    /// Damage before the tail.
    #[error("damaged at byte {offset}: {reason}")]
    Damaged {
        /// Where the damaged entry starts in the file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// One whole entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Where it starts in the file.
    pub offset: u64,
    /// Its size in bytes, head included.
    pub len: usize,
    /// The partition dir name.
    pub name: &'a str,
    /// The topic id of the dir written for (`None`: it had none).
    pub topic_id: Option<TopicId>,
    /// The payload (empty: the name's record was removed).
    pub payload: &'a [u8],
}

/// The header of a new journal.
pub fn header() -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..4].copy_from_slice(MAGIC);
    h[4..].copy_from_slice(&VERSION.to_be_bytes());
    h
}

/// Checks a journal's header (the first [`HEADER_BYTES`] of `bytes`).
pub fn check_header(bytes: &[u8]) -> Result<(), JournalError> {
    let Some(h) = bytes.get(..HEADER_BYTES) else {
        return Err(JournalError::Header(format!(
            "{} bytes, shorter than the header",
            bytes.len()
        )));
    };
    if &h[..4] != MAGIC {
        return Err(JournalError::Header("wrong magic".into()));
    }
    let version = u16::from_be_bytes([h[4], h[5]]);
    if version != VERSION {
        return Err(JournalError::Header(format!(
            "format version {version}, this build reads {VERSION}"
        )));
    }
    Ok(())
}

/// One entry of `name` (its dir's topic id `topic_id`) with `payload`
/// (empty for a removal).
pub fn entry(name: &str, topic_id: Option<TopicId>, payload: &[u8]) -> Vec<u8> {
    let body_len = 2 + name.len() + 16 + payload.len();
    let mut out = Vec::with_capacity(ENTRY_HEAD_BYTES + body_len);
    out.extend_from_slice(&(body_len as u32).to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(topic_id.unwrap_or(TopicId::ZERO).as_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c(&out[ENTRY_HEAD_BYTES..]);
    out[4..8].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Walks the entries of `bytes`, the file's bytes from offset `base` on
/// (an entry's start), calling `f` on each. Returns the bytes of whole
/// entries walked, and whether a torn tail followed them.
pub fn walk<'a, E: From<JournalError>>(
    bytes: &'a [u8],
    base: u64,
    mut f: impl FnMut(Entry<'a>) -> Result<(), E>,
) -> Result<(usize, bool), E> {
    let mut at = 0;
    while at < bytes.len() {
        let offset = base + at as u64;
        match next(&bytes[at..], offset) {
            Next::Entry(e) => {
                at += e.len;
                f(e)?;
            }
            Next::Torn => return Ok((at, true)),
            Next::Damaged(reason) => return Err(JournalError::Damaged { offset, reason }.into()),
        }
    }
    Ok((at, false))
}

/// The names whose newest entry in a whole journal is not a removal, with
/// that entry.
pub fn live(bytes: &[u8]) -> Result<BTreeMap<&str, Entry<'_>>, JournalError> {
    check_header(bytes)?;
    let mut out = BTreeMap::new();
    walk(&bytes[HEADER_BYTES..], HEADER_BYTES as u64, |e| {
        if e.payload.is_empty() {
            out.remove(e.name);
        } else {
            out.insert(e.name, e);
        }
        Ok::<(), JournalError>(())
    })?;
    Ok(out)
}

/// What the bytes at an entry's start hold.
enum Next<'a> {
    Entry(Entry<'a>),
    Torn,
    Damaged(String),
}

fn next(rest: &[u8], offset: u64) -> Next<'_> {
    let bad = |reason: String| {
        if rest.iter().all(|b| *b == 0) {
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
    if !(2 + 1 + 16..=MAX_ENTRY_BYTES).contains(&len) {
        return bad(format!("an entry claims {len} bytes"));
    }
    let end = ENTRY_HEAD_BYTES + len;
    if rest.len() < end {
        return Next::Torn;
    }
    let body = &rest[ENTRY_HEAD_BYTES..end];
    if crc32c(body) != crc {
        if rest.len() == end {
            return Next::Torn;
        }
        return bad("its CRC-32C does not match".into());
    }
    let name_len = u16::from_be_bytes([body[0], body[1]]) as usize;
    let Some(name) = body
        .get(2..2 + name_len)
        .and_then(|n| std::str::from_utf8(n).ok())
        .filter(|n| crate::topic::parse_dir_name(n).is_ok())
    else {
        return Next::Damaged("its name is not a partition dir's".into());
    };
    let Some(id) = body.get(2 + name_len..2 + name_len + 16) else {
        return Next::Damaged("it ends before its topic id".into());
    };
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(id);
    let topic_id = Some(TopicId::from_bytes(bytes)).filter(|t| *t != TopicId::ZERO);
    Next::Entry(Entry {
        offset,
        len: end,
        name,
        topic_id,
        payload: &body[2 + name_len + 16..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = header().to_vec();
        for (name, payload) in entries {
            out.extend(entry(name, None, payload));
        }
        out
    }

    #[test]
    fn the_newest_entry_of_a_name_stands_and_a_removal_removes_it() {
        let bytes = journal(&[("t-0", b"a"), ("t-1", b"b"), ("t-0", b"c"), ("t-1", b"")]);
        let found: Vec<(&str, &[u8])> = live(&bytes)
            .expect("live")
            .into_iter()
            .map(|(n, e)| (n, e.payload))
            .collect();
        assert_eq!(found, vec![("t-0", &b"c"[..])]);
        let id = TopicId::from_bytes([4; 16]);
        let mut with_id = header().to_vec();
        with_id.extend(entry("t-0", Some(id), b"a"));
        assert_eq!(live(&with_id).expect("live")["t-0"].topic_id, Some(id));
    }

    /// One row per way a journal ends: (what, bytes, live names, torn,
    /// damaged).
    #[test]
    fn tails_torn_by_a_crash_end_the_walk_and_damage_before_them_is_an_error() {
        let two = journal(&[("t-0", b"first record"), ("t-1", b"second record")]);
        let first_end = journal(&[("t-0", b"first record")]).len();
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
        let mut bad_name = journal(&[("t-0", b"x")]);
        bad_name.extend(entry("../etc", None, b"x"));
        bad_name.extend(entry("t-1", None, b"x"));
        type Row = (&'static str, Vec<u8>, usize, bool, bool);
        let rows: Vec<Row> = vec![
            ("whole", two.clone(), 2, false, false),
            (
                "the last entry cut in its body",
                two[..two.len() - 5].to_vec(),
                1,
                true,
                false,
            ),
            (
                "the last entry cut in its head",
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
            (
                "a name that is not a partition dir's",
                bad_name,
                0,
                false,
                true,
            ),
        ];
        for (what, bytes, names, torn, damaged) in rows {
            let mut n = 0;
            match walk(&bytes[HEADER_BYTES..], HEADER_BYTES as u64, |_| {
                n += 1;
                Ok::<(), JournalError>(())
            }) {
                Ok((_, t)) => {
                    assert!(!damaged, "{what}: walked");
                    assert_eq!(
                        (live(&bytes).expect("live").len(), t),
                        (names, torn),
                        "{what}"
                    );
                }
                Err(e) => assert!(damaged, "{what}: {e}"),
            }
        }
    }

    #[test]
    fn headers_are_checked() {
        for bad in [&b"SMR"[..], b"XXXX\0\x01", b"SMRJ\0\x02"] {
            assert!(matches!(check_header(bad), Err(JournalError::Header(_))));
        }
        assert_eq!(check_header(&header()), Ok(()));
    }

    proptest::proptest! {
        /// Any bytes after a header: entries or an error, never a panic.
        #[test]
        fn any_bytes_walk_or_fail(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut bytes = header().to_vec();
            bytes.extend(tail);
            let _ = live(&bytes);
        }
    }
}
