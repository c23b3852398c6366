//! Kafka's text checkpoint files: `leader-epoch-checkpoint`, the log-dir-root
//! offset checkpoints, and `partition.metadata`.
//!
//! # Formats
//!
//! Kafka writes these with a `BufferedWriter` (`newLine()`, so `\n` on the
//! Unix hosts brokers run on) and reads them with `BufferedReader.readLine`,
//! which ends a line at `\n`, `\r\n` or `\r`. This module writes exactly
//! Kafka's bytes and reads lines the same way, so CRLF files and a missing
//! final newline are accepted.
//!
//! `leader-epoch-checkpoint` (in each partition directory;
//! Kafka's `LeaderEpochCheckpointFile`):
//!
//! ```text
//! 0                  <- version
//! 2                  <- number of entries
//! 0 0                <- epoch start_offset, one space
//! 3 1200
//! ```
//!
//! Offset checkpoints in the log dir root (`recovery-point-offset-checkpoint`,
//! `replication-offset-checkpoint`, `log-start-offset-checkpoint`,
//! `cleaner-offset-checkpoint`; Kafka's `OffsetCheckpointFile`):
//!
//! ```text
//! 0
//! 2
//! orders 0 1500      <- topic partition offset
//! orders 1 1432
//! ```
//!
//! `partition.metadata` (Kafka's `PartitionMetadataFile`), written *without*
//! a final newline, as Kafka's `PartitionMetadata.encode()` does:
//!
//! ```text
//! version: 0
//! topic_id: pcOp7jtPTV6aCy9uHH2Onw
//! ```
//!
//! # What is accepted
//!
//! As in Kafka's `CheckpointFile`: an empty file, or one holding only the
//! version line, reads as no entries (Kafka creates checkpoint files empty);
//! entry fields are separated by runs of whitespace and may be followed by
//! whitespace, but a line may not start with it. As in Kafka's
//! `PartitionMetadataReadBuffer`: each line is `key:` followed by at least one
//! whitespace and the value; any version `>= 0` is accepted; the topic id must
//! be in Kafka's base64 form and not the zero id; lines after the second are
//! ignored.
//!
//! Beyond Kafka, and so that a file we accept is one Kafka could have
//! written: negative epochs and offsets are refused, leader epochs must be
//! strictly increasing with non-decreasing start offsets, offset checkpoint
//! topics must be valid names, partitions non-negative and unique. Every
//! error is an [`Error::Malformed`] naming the file and the 1-based line.
//! Writers check the same invariants (as [`Error::InvalidArgument`]) before
//! touching the disk, and replace files with [`fsutil::write_atomic`].
//! No input makes a parser panic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fsutil;
use crate::topic::{TopicId, TopicPartition};

/// File name of the leader epoch checkpoint, in each partition directory.
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
/// File name of the partition metadata (topic id), in each partition directory.
pub const PARTITION_METADATA: &str = "partition.metadata";
/// Log dir root checkpoint of recovery points (offsets known flushed).
pub const RECOVERY_POINT_OFFSET_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
/// Log dir root checkpoint of high watermarks.
pub const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";
/// Log dir root checkpoint of log start offsets.
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
/// Log dir root checkpoint of the log cleaner's progress (same format).
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";
/// The only version of the leader epoch and offset checkpoint formats.
pub const CHECKPOINT_VERSION: i32 = 0;
/// The version of `partition.metadata` Kafka writes.
pub const PARTITION_METADATA_VERSION: i32 = 0;

/// One line of `leader-epoch-checkpoint`: `epoch` started at `start_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct EpochEntry {
    /// The leader epoch.
    pub epoch: i32,
    /// The first offset written in that epoch.
    pub start_offset: i64,
}

/// Parses the text of a `leader-epoch-checkpoint`; `path` only names the
/// file in errors.
pub fn parse_leader_epoch_checkpoint(text: &str, path: &Path) -> Result<Vec<EpochEntry>> {
    let Some((count, entry_lines)) = parse_header(text, path)? else {
        return Ok(Vec::new());
    };
    let mut entries: Vec<EpochEntry> = Vec::with_capacity(count.min(1024));
    for (line_no, line) in entry_lines {
        let bad = |reason: String| Error::malformed(path, line_no, reason);
        let fields = java_split_whitespace(line);
        let [epoch, start_offset] = fields.as_slice() else {
            return Err(bad(format!(
                "expected `epoch start_offset`, found {}",
                excerpt(line)
            )));
        };
        let epoch: i32 = epoch
            .parse()
            .map_err(|_| bad(format!("epoch {} is not a 32-bit integer", excerpt(epoch))))?;
        let start_offset: i64 = start_offset.parse().map_err(|_| {
            bad(format!(
                "start offset {} is not a 64-bit integer",
                excerpt(start_offset)
            ))
        })?;
        let entry = EpochEntry {
            epoch,
            start_offset,
        };
        check_epoch_entry(entries.last(), &entry).map_err(bad)?;
        entries.push(entry);
    }
    check_count(count, entries.len(), path)?;
    Ok(entries)
}

/// Formats a `leader-epoch-checkpoint` exactly as Kafka writes it.
pub fn format_leader_epoch_checkpoint(entries: &[EpochEntry]) -> String {
    let mut out = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for e in entries {
        let _ = writeln!(out, "{} {}", e.epoch, e.start_offset);
    }
    out
}

/// Reads a `leader-epoch-checkpoint`; a missing file reads as no entries.
pub fn read_leader_epoch_checkpoint(path: &Path) -> Result<Vec<EpochEntry>> {
    match fsutil::read_optional(path)? {
        None => Ok(Vec::new()),
        Some(bytes) => parse_leader_epoch_checkpoint(utf8(&bytes, path)?, path),
    }
}

/// Replaces a `leader-epoch-checkpoint` atomically ([`fsutil::write_atomic`]).
///
/// Refuses (with [`Error::InvalidArgument`], before any IO) entries that the
/// parser would refuse: negative values, epochs not strictly increasing,
/// start offsets decreasing.
pub fn write_leader_epoch_checkpoint(
    path: &Path,
    entries: &[EpochEntry],
    sync: bool,
) -> Result<()> {
    let mut previous = None;
    for (i, entry) in entries.iter().enumerate() {
        check_epoch_entry(previous, entry).map_err(|reason| {
            Error::InvalidArgument(format!(
                "leader epoch entry {i} for {}: {reason}",
                path.display()
            ))
        })?;
        previous = Some(entry);
    }
    fsutil::write_atomic(
        path,
        format_leader_epoch_checkpoint(entries).as_bytes(),
        sync,
    )
}

fn check_epoch_entry(
    previous: Option<&EpochEntry>,
    entry: &EpochEntry,
) -> std::result::Result<(), String> {
    if entry.epoch < 0 {
        return Err(format!("negative epoch {}", entry.epoch));
    }
    if entry.start_offset < 0 {
        return Err(format!("negative start offset {}", entry.start_offset));
    }
    if let Some(prev) = previous {
        if entry.epoch <= prev.epoch {
            return Err(format!(
                "epoch {} does not follow epoch {} (must strictly increase)",
                entry.epoch, prev.epoch
            ));
        }
        if entry.start_offset < prev.start_offset {
            return Err(format!(
                "start offset {} of epoch {} is below start offset {} of epoch {}",
                entry.start_offset, entry.epoch, prev.start_offset, prev.epoch
            ));
        }
    }
    Ok(())
}

/// Parses the text of a log dir root offset checkpoint
/// (`recovery-point-offset-checkpoint` and the like); `path` only names the
/// file in errors.
pub fn parse_offset_checkpoint(text: &str, path: &Path) -> Result<BTreeMap<TopicPartition, i64>> {
    let mut offsets = BTreeMap::new();
    let Some((count, entry_lines)) = parse_header(text, path)? else {
        return Ok(offsets);
    };
    let mut found = 0usize;
    for (line_no, line) in entry_lines {
        let bad = |reason: String| Error::malformed(path, line_no, reason);
        let fields = java_split_whitespace(line);
        let [topic, partition, offset] = fields.as_slice() else {
            return Err(bad(format!(
                "expected `topic partition offset`, found {}",
                excerpt(line)
            )));
        };
        let partition: i32 = partition.parse().map_err(|_| {
            bad(format!(
                "partition {} is not a 32-bit integer",
                excerpt(partition)
            ))
        })?;
        let offset: i64 = offset.parse().map_err(|_| {
            bad(format!(
                "offset {} is not a 64-bit integer",
                excerpt(offset)
            ))
        })?;
        let tp = TopicPartition::new(*topic, partition).map_err(|e| bad(e.to_string()))?;
        if offset < 0 {
            return Err(bad(format!("negative offset {offset} for {tp}")));
        }
        if offsets.insert(tp, offset).is_some() {
            return Err(bad(format!("{topic}-{partition} appears twice")));
        }
        found += 1;
    }
    check_count(count, found, path)?;
    Ok(offsets)
}

/// Formats an offset checkpoint as Kafka writes it (entries in map order;
/// Kafka's own order is its hash map's, which readers do not depend on).
pub fn format_offset_checkpoint(offsets: &BTreeMap<TopicPartition, i64>) -> String {
    let mut out = format!("{CHECKPOINT_VERSION}\n{}\n", offsets.len());
    for (tp, offset) in offsets {
        let _ = writeln!(out, "{} {} {}", tp.topic, tp.partition, offset);
    }
    out
}

/// Reads an offset checkpoint; a missing file reads as an empty map.
pub fn read_offset_checkpoint(path: &Path) -> Result<BTreeMap<TopicPartition, i64>> {
    match fsutil::read_optional(path)? {
        None => Ok(BTreeMap::new()),
        Some(bytes) => parse_offset_checkpoint(utf8(&bytes, path)?, path),
    }
}

/// Replaces an offset checkpoint atomically ([`fsutil::write_atomic`]).
/// Refuses negative offsets with [`Error::InvalidArgument`] before any IO.
pub fn write_offset_checkpoint(
    path: &Path,
    offsets: &BTreeMap<TopicPartition, i64>,
    sync: bool,
) -> Result<()> {
    if let Some((tp, offset)) = offsets.iter().find(|(_, offset)| **offset < 0) {
        return Err(Error::InvalidArgument(format!(
            "negative offset {offset} for {tp} in {}",
            path.display()
        )));
    }
    fsutil::write_atomic(path, format_offset_checkpoint(offsets).as_bytes(), sync)
}

/// The content of `partition.metadata`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartitionMetadata {
    /// Format version (Kafka writes 0 and reads any version `>= 0`).
    pub version: i32,
    /// The partition's topic id (never [`TopicId::ZERO`] in a valid file).
    pub topic_id: TopicId,
}

impl PartitionMetadata {
    /// Metadata of the current version for a topic id.
    pub fn new(topic_id: TopicId) -> PartitionMetadata {
        PartitionMetadata {
            version: PARTITION_METADATA_VERSION,
            topic_id,
        }
    }
}

/// Parses the text of a `partition.metadata`, accepting what Kafka's
/// `PartitionMetadataReadBuffer` accepts; `path` only names the file in
/// errors.
pub fn parse_partition_metadata(text: &str, path: &Path) -> Result<PartitionMetadata> {
    let mut lines = JavaLines::new(text);
    let line = lines
        .next()
        .ok_or_else(|| Error::malformed(path, 1, "empty file, expected `version: 0`"))?;
    let value = metadata_value(line, "version").ok_or_else(|| {
        Error::malformed(
            path,
            1,
            format!("expected `version: <number>`, found {}", excerpt(line)),
        )
    })?;
    let version: i32 = value.parse().map_err(|_| {
        Error::malformed(
            path,
            1,
            format!("version {} is not a 32-bit integer", excerpt(value)),
        )
    })?;
    if version < PARTITION_METADATA_VERSION {
        return Err(Error::malformed(
            path,
            1,
            format!("unrecognized version {version}"),
        ));
    }
    let line = lines
        .next()
        .ok_or_else(|| Error::malformed(path, 2, "missing line `topic_id: <id>`"))?;
    let value = metadata_value(line, "topic_id").ok_or_else(|| {
        Error::malformed(
            path,
            2,
            format!("expected `topic_id: <id>`, found {}", excerpt(line)),
        )
    })?;
    let topic_id =
        TopicId::parse_kafka(value).map_err(|e| Error::malformed(path, 2, e.to_string()))?;
    if topic_id == TopicId::ZERO {
        return Err(Error::malformed(
            path,
            2,
            "the topic id is the reserved zero id",
        ));
    }
    Ok(PartitionMetadata { version, topic_id })
}

/// Formats `partition.metadata` exactly as Kafka writes it (no final newline).
pub fn format_partition_metadata(metadata: &PartitionMetadata) -> String {
    format!(
        "version: {}\ntopic_id: {}",
        metadata.version, metadata.topic_id
    )
}

/// Reads `partition.metadata`; `Ok(None)` when the file does not exist.
pub fn read_partition_metadata(path: &Path) -> Result<Option<PartitionMetadata>> {
    match fsutil::read_optional(path)? {
        None => Ok(None),
        Some(bytes) => parse_partition_metadata(utf8(&bytes, path)?, path).map(Some),
    }
}

/// Replaces `partition.metadata` atomically ([`fsutil::write_atomic`]).
/// Refuses a negative version or the zero topic id with
/// [`Error::InvalidArgument`] before any IO.
pub fn write_partition_metadata(
    path: &Path,
    metadata: &PartitionMetadata,
    sync: bool,
) -> Result<()> {
    if metadata.version < 0 || metadata.topic_id == TopicId::ZERO {
        return Err(Error::InvalidArgument(format!(
            "refusing to write {} with version {} and topic id {}",
            path.display(),
            metadata.version,
            metadata.topic_id
        )));
    }
    fsutil::write_atomic(path, format_partition_metadata(metadata).as_bytes(), sync)
}

/// `key:<whitespace+>value` as Kafka's `line.split(":\\s+", 2)` reads it:
/// the value after the first `:` that is followed by whitespace, when the
/// text before it is exactly `key`.
fn metadata_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let bytes = line.as_bytes();
    let colon = (0..bytes.len()).find(|&i| {
        bytes.get(i) == Some(&b':') && bytes.get(i + 1).is_some_and(|b| is_java_whitespace(*b))
    })?;
    let (before, after) = (line.get(..colon)?, line.get(colon + 1..)?);
    (before == key)
        .then(|| after.trim_start_matches(|c: char| c.is_ascii() && is_java_whitespace(c as u8)))
}

/// Reads the version and count lines shared by the checkpoint formats.
///
/// Returns `None` when the file ends before the count (Kafka reads that as no
/// entries), else the count and the remaining numbered lines.
fn parse_header<'a>(
    text: &'a str,
    path: &Path,
) -> Result<Option<(usize, impl Iterator<Item = (usize, &'a str)> + 'a)>> {
    let mut lines = JavaLines::new(text)
        .enumerate()
        .map(|(i, line)| (i + 1, line));
    let Some((line_no, line)) = lines.next() else {
        return Ok(None);
    };
    let version: i32 = line.parse().map_err(|_| {
        Error::malformed(
            path,
            line_no,
            format!("version {} is not an integer", excerpt(line)),
        )
    })?;
    if version != CHECKPOINT_VERSION {
        return Err(Error::malformed(
            path,
            line_no,
            format!("unrecognised version {version}, expected {CHECKPOINT_VERSION}"),
        ));
    }
    let Some((line_no, line)) = lines.next() else {
        return Ok(None);
    };
    let count: i32 = line.parse().map_err(|_| {
        Error::malformed(
            path,
            line_no,
            format!("entry count {} is not an integer", excerpt(line)),
        )
    })?;
    let count = usize::try_from(count)
        .map_err(|_| Error::malformed(path, line_no, format!("negative entry count {count}")))?;
    Ok(Some((count, lines)))
}

fn check_count(expected: usize, found: usize, path: &Path) -> Result<()> {
    if expected != found {
        return Err(Error::malformed(
            path,
            2,
            format!("entry count says {expected} but {found} entries follow"),
        ));
    }
    Ok(())
}

fn utf8<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| {
        let before = bytes.get(..e.valid_up_to()).unwrap_or_default();
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        Error::malformed(path, line, "not valid UTF-8")
    })
}

/// Java's `\s` outside line terminators: space, tab, vertical tab, form feed
/// (`\r` and `\n` never occur inside a line).
fn is_java_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `line.split("\\s+")` as Java computes it: a leading separator yields a
/// leading empty field, trailing separators yield nothing, and a line
/// without any field yields no fields (or one empty field when empty).
fn java_split_whitespace(line: &str) -> Vec<&str> {
    if line.is_empty() {
        return vec![""];
    }
    let is_ws = |c: char| c.is_ascii() && is_java_whitespace(c as u8);
    let mut fields: Vec<&str> = line.split(is_ws).filter(|f| !f.is_empty()).collect();
    if !fields.is_empty() && line.starts_with(is_ws) {
        fields.insert(0, "");
    }
    fields
}

/// A short, quoted rendering of untrusted text for error messages.
fn excerpt(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head:?}...")
    }
}

/// Lines as Java's `BufferedReader.readLine` yields them: terminated by
/// `\n`, `\r\n` or `\r`; a final line without terminator counts, an empty
/// remainder after the last terminator does not.
struct JavaLines<'a> {
    rest: &'a str,
}

impl<'a> JavaLines<'a> {
    fn new(text: &'a str) -> JavaLines<'a> {
        JavaLines { rest: text }
    }
}

impl<'a> Iterator for JavaLines<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = self.rest;
        match rest.find(['\n', '\r']) {
            None => {
                self.rest = "";
                Some(rest)
            }
            Some(end) => {
                let terminator = if rest.get(end..end + 2) == Some("\r\n") {
                    2
                } else {
                    1
                };
                self.rest = rest.get(end + terminator..).unwrap_or_default();
                rest.get(..end)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p() -> &'static Path {
        Path::new("/data/kafka/t-0/leader-epoch-checkpoint")
    }

    fn e(epoch: i32, start_offset: i64) -> EpochEntry {
        EpochEntry {
            epoch,
            start_offset,
        }
    }

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition).expect("valid")
    }

    /// The line number of a Malformed error, panicking on anything else.
    fn line_of(r: Result<impl std::fmt::Debug>) -> usize {
        match r {
            Err(Error::Malformed { line, .. }) => line,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn java_lines_match_buffered_reader() {
        let lines = |s| JavaLines::new(s).collect::<Vec<_>>();
        assert_eq!(lines(""), Vec::<&str>::new());
        assert_eq!(lines("a"), ["a"]);
        assert_eq!(lines("a\n"), ["a"]);
        assert_eq!(lines("a\r\nb\rc\n\nd"), ["a", "b", "c", "", "d"]);
        assert_eq!(lines("\n"), [""]);
        assert_eq!(lines("a\r\n\r\n"), ["a", ""]);
    }

    #[test]
    fn java_split_matches_string_split() {
        assert_eq!(java_split_whitespace(""), [""]);
        assert_eq!(java_split_whitespace("   "), Vec::<&str>::new());
        assert_eq!(java_split_whitespace("1 2"), ["1", "2"]);
        assert_eq!(java_split_whitespace("1 \t 2  "), ["1", "2"]);
        assert_eq!(java_split_whitespace(" 1 2"), ["", "1", "2"]);
    }

    #[test]
    fn leader_epoch_golden() {
        let entries = vec![e(0, 0), e(1, 150), e(4, 150), e(7, 9000)];
        let text = format_leader_epoch_checkpoint(&entries);
        assert_eq!(text, "0\n4\n0 0\n1 150\n4 150\n7 9000\n");
        assert_eq!(
            parse_leader_epoch_checkpoint(&text, p()).expect("parse"),
            entries
        );
        assert_eq!(format_leader_epoch_checkpoint(&[]), "0\n0\n");
    }

    #[test]
    fn leader_epoch_accepts_what_kafka_reads() {
        let want = vec![e(0, 0), e(2, 10)];
        for text in [
            "0\n2\n0 0\n2 10\n",
            "0\r\n2\r\n0 0\r\n2 10\r\n",
            "0\n2\n0 0\n2 10",
            "0\n2\n0\t0\n2  10 \n",
        ] {
            assert_eq!(
                parse_leader_epoch_checkpoint(text, p()).expect(text),
                want,
                "{text:?}"
            );
        }
        // Kafka creates the file empty; a file ending before the count is empty too.
        for text in ["", "0\n", "0"] {
            assert_eq!(
                parse_leader_epoch_checkpoint(text, p()).expect(text),
                vec![]
            );
        }
        assert_eq!(
            parse_leader_epoch_checkpoint("0\n0\n", p()).expect("zero"),
            vec![]
        );
    }

    #[test]
    fn leader_epoch_errors_name_path_and_line() {
        let cases: &[(&str, usize)] = &[
            ("1\n0\n", 1),
            ("x\n0\n", 1),
            (" 0\n0\n", 1),
            ("0\nx\n", 2),
            ("0\n-1\n", 2),
            ("0\n2\n0 0\n", 2),
            ("0\n1\n0 0\n1 1\n", 2),
            ("0\n1\n0\n", 3),
            ("0\n1\n0 0 0\n", 3),
            ("0\n1\n 0 0\n", 3),
            ("0\n1\na 0\n", 3),
            ("0\n1\n0 b\n", 3),
            ("0\n1\n2147483648 0\n", 3),
            ("0\n1\n-1 0\n", 3),
            ("0\n1\n0 -5\n", 3),
            ("0\n2\n3 0\n3 5\n", 4),
            ("0\n2\n3 0\n2 5\n", 4),
            ("0\n2\n3 10\n4 9\n", 4),
            ("0\n1\n0 0\n\n", 4),
        ];
        for (text, line) in cases {
            let r = parse_leader_epoch_checkpoint(text, p());
            let msg = format!("{r:?}");
            assert_eq!(line_of(r), *line, "{text:?}: {msg}");
        }
        let err = parse_leader_epoch_checkpoint("0\n2\n3 0\n2 5\n", p()).expect_err("order");
        let msg = err.to_string();
        assert!(
            msg.starts_with("/data/kafka/t-0/leader-epoch-checkpoint: line 4: "),
            "{msg}"
        );
        assert!(msg.contains("epoch 2") && msg.contains("epoch 3"), "{msg}");
    }

    #[test]
    fn leader_epoch_file_io() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT);
        assert_eq!(
            read_leader_epoch_checkpoint(&path).expect("missing"),
            vec![]
        );
        let entries = vec![e(0, 0), e(5, 77)];
        write_leader_epoch_checkpoint(&path, &entries, true).expect("write");
        assert_eq!(
            std::fs::read_to_string(&path).expect("raw"),
            "0\n2\n0 0\n5 77\n"
        );
        assert_eq!(read_leader_epoch_checkpoint(&path).expect("read"), entries);
        let refused = write_leader_epoch_checkpoint(&path, &[e(5, 0), e(5, 1)], true);
        assert!(matches!(refused, Err(Error::InvalidArgument(_))));
        assert_eq!(
            read_leader_epoch_checkpoint(&path).expect("unchanged"),
            entries
        );
        std::fs::write(&path, b"0\n1\n\xff 0\n").expect("seed");
        assert_eq!(line_of(read_leader_epoch_checkpoint(&path)), 3);
    }

    #[test]
    fn offset_checkpoint_golden() {
        let mut map = BTreeMap::new();
        map.insert(tp("orders", 1), 1432);
        map.insert(tp("orders", 0), 1500);
        map.insert(tp("__consumer_offsets", 12), 0);
        let text = format_offset_checkpoint(&map);
        assert_eq!(
            text,
            "0\n3\n__consumer_offsets 12 0\norders 0 1500\norders 1 1432\n"
        );
        let path = Path::new(RECOVERY_POINT_OFFSET_CHECKPOINT);
        assert_eq!(parse_offset_checkpoint(&text, path).expect("parse"), map);
        assert_eq!(
            parse_offset_checkpoint("0\r\n1\r\nt  3\t9 \r\n", path).expect("lenient"),
            {
                let mut m = BTreeMap::new();
                m.insert(tp("t", 3), 9);
                m
            }
        );
        assert!(parse_offset_checkpoint("", path).expect("empty").is_empty());
    }

    #[test]
    fn offset_checkpoint_errors_name_line() {
        let path = Path::new("/data/kafka/replication-offset-checkpoint");
        let cases: &[(&str, usize)] = &[
            ("7\n0\n", 1),
            ("0\nz\n", 2),
            ("0\n2\nt 0 1\n", 2),
            ("0\n1\nt 0\n", 3),
            ("0\n1\nt 0 1 2\n", 3),
            ("0\n1\nt x 1\n", 3),
            ("0\n1\nt 0 x\n", 3),
            ("0\n1\nt -1 1\n", 3),
            ("0\n1\nt 0 -1\n", 3),
            ("0\n1\n.. 0 1\n", 3),
            ("0\n2\nt 0 1\nt 0 2\n", 4),
        ];
        for (text, line) in cases {
            let r = parse_offset_checkpoint(text, path);
            let msg = format!("{r:?}");
            assert_eq!(line_of(r), *line, "{text:?}: {msg}");
        }
    }

    #[test]
    fn offset_checkpoint_file_io() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            RECOVERY_POINT_OFFSET_CHECKPOINT,
            REPLICATION_OFFSET_CHECKPOINT,
            LOG_START_OFFSET_CHECKPOINT,
            CLEANER_OFFSET_CHECKPOINT,
        ] {
            let path = dir.path().join(name);
            assert!(read_offset_checkpoint(&path).expect("missing").is_empty());
            let mut map = BTreeMap::new();
            map.insert(tp("a.b-c_d", 0), 42);
            write_offset_checkpoint(&path, &map, false).expect("write");
            assert_eq!(
                std::fs::read_to_string(&path).expect("raw"),
                "0\n1\na.b-c_d 0 42\n"
            );
            assert_eq!(read_offset_checkpoint(&path).expect("read"), map);
            map.insert(tp("x", 1), -1);
            assert!(matches!(
                write_offset_checkpoint(&path, &map, false),
                Err(Error::InvalidArgument(_))
            ));
        }
    }

    #[test]
    fn partition_metadata_golden() {
        let id: TopicId = "pcOp7jtPTV6aCy9uHH2Onw".parse().expect("id");
        let md = PartitionMetadata::new(id);
        let text = format_partition_metadata(&md);
        assert_eq!(text, "version: 0\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw");
        let path = Path::new(PARTITION_METADATA);
        assert_eq!(parse_partition_metadata(&text, path).expect("parse"), md);
        for lenient in [
            "version: 0\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw\n",
            "version: 0\r\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw\r\n",
            "version:  0\ntopic_id:\tpcOp7jtPTV6aCy9uHH2Onw\nanything: else\n",
            "version: 0\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw==",
        ] {
            assert_eq!(
                parse_partition_metadata(lenient, path).expect(lenient),
                md,
                "{lenient:?}"
            );
        }
        // Kafka accepts newer versions (downgrade compatibility).
        let v1 = parse_partition_metadata("version: 1\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw", path)
            .expect("v1");
        assert_eq!(v1.version, 1);
    }

    #[test]
    fn partition_metadata_errors_name_line() {
        let path = Path::new("/data/kafka/t-0/partition.metadata");
        let cases: &[(&str, usize)] = &[
            ("", 1),
            ("version:0\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw", 1),
            ("Version: 0\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw", 1),
            ("version: 0 \ntopic_id: pcOp7jtPTV6aCy9uHH2Onw", 1),
            ("version: -1\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw", 1),
            ("version: x\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw", 1),
            (" version: 0\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw", 1),
            ("version: 0\n", 2),
            ("version: 0\ntopic: pcOp7jtPTV6aCy9uHH2Onw", 2),
            (
                "version: 0\ntopic_id: a5c3a9ee-3b4f-4d5e-9a0b-2f6e1c7d8e9f",
                2,
            ),
            ("version: 0\ntopic_id: pcOp7jtPTV6aCy9uHH2On", 2),
            ("version: 0\ntopic_id: pcOp7jtPTV6aCy9uHH2Onw ", 2),
            ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", 2),
        ];
        for (text, line) in cases {
            let r = parse_partition_metadata(text, path);
            let msg = format!("{r:?}");
            assert_eq!(line_of(r), *line, "{text:?}: {msg}");
        }
    }

    #[test]
    fn partition_metadata_file_io() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(PARTITION_METADATA);
        assert_eq!(read_partition_metadata(&path).expect("missing"), None);
        let md = PartitionMetadata::new(TopicId::from_bytes([9; 16]));
        write_partition_metadata(&path, &md, true).expect("write");
        assert_eq!(
            std::fs::read_to_string(&path).expect("raw"),
            format!("version: 0\ntopic_id: {}", md.topic_id)
        );
        assert_eq!(read_partition_metadata(&path).expect("read"), Some(md));
        let zero = PartitionMetadata::new(TopicId::ZERO);
        assert!(matches!(
            write_partition_metadata(&path, &zero, true),
            Err(Error::InvalidArgument(_))
        ));
    }

    fn epoch_entries() -> impl Strategy<Value = Vec<EpochEntry>> {
        proptest::collection::vec((1i32..1000, 0i64..1_000_000), 0..20).prop_map(|steps| {
            let (mut epoch, mut offset) = (-1i32, 0i64);
            steps
                .into_iter()
                .map(|(de, dof)| {
                    epoch += de;
                    offset += dof;
                    e(epoch, offset)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn leader_epoch_round_trips(entries in epoch_entries()) {
            let text = format_leader_epoch_checkpoint(&entries);
            prop_assert_eq!(parse_leader_epoch_checkpoint(&text, p()).expect("parse"), entries.clone());
            let crlf = text.replace('\n', "\r\n");
            prop_assert_eq!(parse_leader_epoch_checkpoint(&crlf, p()).expect("crlf"), entries);
        }

        #[test]
        fn offset_checkpoint_round_trips(
            items in proptest::collection::btree_map(("[A-Za-z0-9._-]{1,30}", 0i32..100_000), 0i64..i64::MAX, 0..20)
        ) {
            let map: BTreeMap<TopicPartition, i64> = items
                .into_iter()
                .filter_map(|((t, part), off)| TopicPartition::new(t, part).ok().map(|tp| (tp, off)))
                .collect();
            let text = format_offset_checkpoint(&map);
            prop_assert_eq!(parse_offset_checkpoint(&text, p()).expect("parse"), map);
        }

        #[test]
        fn partition_metadata_round_trips(bytes in proptest::array::uniform16(any::<u8>()), version in 0i32..=i32::MAX) {
            let topic_id = TopicId::from_bytes(bytes);
            prop_assume!(topic_id != TopicId::ZERO);
            let md = PartitionMetadata { version, topic_id };
            prop_assert_eq!(parse_partition_metadata(&format_partition_metadata(&md), p()).expect("parse"), md);
        }

        #[test]
        fn random_text_never_panics(text in "\\PC{0,80}", shaped in "[0-9 \t\r\n:_a-z=-]{0,80}") {
            for t in [&text, &shaped] {
                let _ = parse_leader_epoch_checkpoint(t, p());
                let _ = parse_offset_checkpoint(t, p());
                let _ = parse_partition_metadata(t, p());
            }
            let prefixed = format!("0\n2\n{shaped}");
            let _ = parse_leader_epoch_checkpoint(&prefixed, p());
            let _ = parse_offset_checkpoint(&prefixed, p());
            let _ = parse_partition_metadata(&format!("version: 0\n{shaped}"), p());
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = utf8(&bytes, p()).map(|t| parse_leader_epoch_checkpoint(t, p()));
        }
    }
}
