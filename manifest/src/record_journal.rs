//! The mirror records of a log dir as one journal (issue 31): the payload
//! of each `kafkalog::journal` entry is a [`MirrorRecord`]'s bytes
//! ([`MirrorRecord::encode`], with its own CRC-32C trailer). Pure: the
//! journal's bytes in, the newest record of each partition out; the file
//! is `partdir::record`'s.
//!
//! A replay is built once and moved forward by what was appended since
//! ([`replay_more`]), so a reader that follows the journal reads each
//! byte once. A record that does not decode in an entry whose CRC-32C
//! matches is damage, an error naming the entry's offset.

use std::collections::BTreeMap;

use kafkalog::journal::{self, HEADER_BYTES, JournalError};

use crate::mirror_record::MirrorRecord;

/// A replayed journal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replay {
    /// The newest record of each partition dir name (removed ones absent),
    /// with the topic id of the dir it was written for.
    pub records: BTreeMap<String, (Option<kafkalog::TopicId>, MirrorRecord)>,
    /// Bytes of the newest entry of each name in `records`.
    pub entry_bytes: BTreeMap<String, u64>,
    /// Bytes of the header and the whole entries: where the next entry
    /// goes.
    pub valid_len: u64,
    /// Entries replayed.
    pub entries: u64,
    /// True when the last replay stopped at a torn tail.
    pub torn: bool,
}

impl Replay {
    /// What a rewritten journal would hold: the header and the newest
    /// entry of each record.
    pub fn live_bytes(&self) -> u64 {
        HEADER_BYTES as u64 + self.entry_bytes.values().sum::<u64>()
    }
}

/// The entry of `record` for partition dir `name` (whose
/// `partition.metadata` holds `dir_topic_id`).
pub fn entry(
    name: &str,
    dir_topic_id: Option<kafkalog::TopicId>,
    record: &MirrorRecord,
) -> Result<Vec<u8>, crate::partition::ManifestFormatError> {
    Ok(journal::entry(name, dir_topic_id, &record.encode()?))
}

/// Replays a whole journal (header included).
pub fn replay(bytes: &[u8]) -> Result<Replay, JournalError> {
    journal::check_header(bytes)?;
    let mut r = Replay {
        valid_len: HEADER_BYTES as u64,
        ..Replay::default()
    };
    replay_more(&mut r, &bytes[HEADER_BYTES..])?;
    Ok(r)
}

/// Replays `more`, the journal's bytes from `r.valid_len` on, into `r`.
pub fn replay_more(r: &mut Replay, more: &[u8]) -> Result<(), JournalError> {
    let (walked, torn) = journal::walk(more, r.valid_len, |e| {
        if e.payload.is_empty() {
            r.records.remove(e.name);
            r.entry_bytes.remove(e.name);
        } else {
            let m = MirrorRecord::decode(e.payload).map_err(|err| JournalError::Damaged {
                offset: e.offset,
                reason: format!("its record of {}: {err}", e.name),
            })?;
            r.records.insert(e.name.to_string(), (e.topic_id, m));
            r.entry_bytes.insert(e.name.to_string(), e.len as u64);
        }
        r.entries += 1;
        Ok::<(), JournalError>(())
    })?;
    r.valid_len += walked as u64;
    r.torn = torn;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror_record::fixtures::sample;

    fn with_lme(lme: i32) -> MirrorRecord {
        let mut r = sample();
        r.lme = Some(lme);
        r
    }

    fn journal(entries: &[(&str, Option<MirrorRecord>)]) -> Vec<u8> {
        let mut out = journal::header().to_vec();
        for (name, r) in entries {
            match r {
                Some(r) => out.extend(entry(name, None, r).expect("entry")),
                None => out.extend(journal::entry(name, None, &[])),
            }
        }
        out
    }

    #[test]
    fn the_newest_record_of_a_name_stands() {
        let bytes = journal(&[
            ("t-0", Some(with_lme(1))),
            ("t-1", Some(with_lme(2))),
            ("t-0", Some(with_lme(3))),
            ("t-1", None),
        ]);
        let r = replay(&bytes).expect("replay");
        assert_eq!(r.records.len(), 1);
        assert_eq!(r.records["t-0"].1.lme, Some(3));
        assert_eq!(
            (r.entries, r.valid_len, r.torn),
            (4, bytes.len() as u64, false)
        );
        let one = journal(&[("t-0", Some(with_lme(3)))]);
        assert_eq!(r.live_bytes(), one.len() as u64);
    }

    #[test]
    fn a_reader_continues_from_where_it_stopped_and_past_a_torn_tail_later() {
        let bytes = journal(&[("t-0", Some(with_lme(1))), ("t-0", Some(with_lme(5)))]);
        let first = journal(&[("t-0", Some(with_lme(1)))]).len();
        // An append seen half done, then whole.
        let mut r = replay(&bytes[..first + 10]).expect("replay");
        assert!(r.torn);
        assert_eq!(r.valid_len, first as u64);
        replay_more(&mut r, &bytes[first..]).expect("more");
        assert_eq!(r, replay(&bytes).expect("replay"));
    }

    #[test]
    fn a_record_that_does_not_decode_is_damage_naming_its_entry() {
        let mut bytes = journal(&[("t-0", Some(with_lme(1)))]);
        let at = bytes.len() as u64;
        bytes.extend(journal::entry("t-1", None, b"{\"not\":\"a record\"}"));
        match replay(&bytes) {
            Err(JournalError::Damaged { offset, reason }) => {
                assert_eq!(offset, at);
                assert!(reason.contains("t-1"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
