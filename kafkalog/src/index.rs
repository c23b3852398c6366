//! Kafka's segment index files, held in memory: `.index`, `.timeindex` and
//! `.txnindex`, with pure parse and serialize (no IO here).
//!
//! # Formats (all integers big-endian)
//!
//! `.index` ([`OffsetIndex`], Kafka's `OffsetIndex`), 8-byte entries:
//!
//! ```text
//! 0 relativeOffset int32   offset - segment base offset
//! 4 position       int32   byte position of the batch in the .log file
//! ```
//!
//! `.timeindex` ([`TimeIndex`], Kafka's `TimeIndex`), 12-byte entries:
//!
//! ```text
//! 0 timestamp      int64   largest timestamp seen before `offset`
//! 8 relativeOffset int32
//! ```
//!
//! `.txnindex` ([`TransactionIndex`], Kafka's `TransactionIndex`), 34-byte
//! entries, one per aborted transaction whose abort marker lies in the
//! segment (Kafka's `AbortedTxn`):
//!
//! ```text
//! 0  version          int16   0
//! 2  producerId       int64
//! 10 firstOffset      int64
//! 18 lastOffset       int64   offset of the abort marker
//! 26 lastStableOffset int64   LSO when the transaction was aborted
//! ```
//!
//! # Invariants
//!
//! Kafka preallocates `.index` and `.timeindex` files (zero-filled up to
//! `segment.index.bytes`) and trims them to their entries only when a
//! segment is rolled or closed cleanly, so after a crash the active
//! segment's index ends in zeros. The parsers therefore read an all-zero
//! entry at position > 0 as the start of that padding, and then require
//! every later byte to be zero. An all-zero first entry is a real entry
//! (`relative offset 0 at position 0`, or `timestamp 0 at the base offset`),
//! true of any segment. `.txnindex` files are never preallocated.
//!
//! Held indexes always satisfy what Kafka guarantees when it appends:
//!
//! - offset index: offsets strictly increasing, positions non-decreasing;
//! - time index: timestamps and offsets non-decreasing (Kafka appends only
//!   strictly increasing timestamps);
//! - both: `0 <= offset - base_offset <= i32::MAX` (Kafka's
//!   `AbstractIndex.relativeOffset`) and positions `<= i32::MAX`;
//! - transaction index: version 0 and strictly increasing last offsets.
//!
//! Parsers refuse anything else with [`Error::Malformed`] (line 0, naming
//! the file and the entry number); appends refuse it with
//! [`Error::InvalidArgument`]. [`OffsetIndex::to_bytes`] and
//! [`TimeIndex::to_bytes`] write the used entries only, as Kafka leaves a
//! trimmed index. No input makes this module panic.

use std::path::Path;

use crate::error::{Error, Result};

/// Size of an `.index` entry.
pub const OFFSET_INDEX_ENTRY_SIZE: usize = 8;
/// Size of a `.timeindex` entry.
pub const TIME_INDEX_ENTRY_SIZE: usize = 12;
/// Size of a `.txnindex` entry (Kafka's `AbortedTxn.TOTAL_SIZE`).
pub const ABORTED_TXN_SIZE: usize = 34;
/// The only `AbortedTxn` version (Kafka's `AbortedTxn.CURRENT_VERSION`).
pub const ABORTED_TXN_VERSION: i16 = 0;
/// Largest `offset - base_offset` an index entry can hold.
pub const MAX_RELATIVE_OFFSET: i64 = i32::MAX as i64;
/// Largest byte position an offset index entry can hold.
pub const MAX_POSITION: u32 = i32::MAX as u32;

/// An offset index entry: the batch holding `offset` starts at byte
/// `position` of the segment's `.log` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct IndexEntry {
    /// Absolute offset.
    pub offset: i64,
    /// Byte position in the `.log` file.
    pub position: u32,
}

/// A time index entry: every record with a timestamp above `timestamp` is at
/// or after `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TimeEntry {
    /// The largest timestamp seen before `offset`.
    pub timestamp: i64,
    /// Absolute offset.
    pub offset: i64,
}

/// An `.index` file in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetIndex {
    base_offset: i64,
    entries: Vec<IndexEntry>,
}

impl OffsetIndex {
    /// An empty index for the segment starting at `base_offset`.
    pub fn new(base_offset: i64) -> OffsetIndex {
        OffsetIndex {
            base_offset,
            entries: Vec::new(),
        }
    }

    /// Parses the bytes of an `.index` file of the segment at `base_offset`;
    /// `path` only names the file in errors. Trailing zero padding is
    /// dropped (see the module doc).
    pub fn parse(bytes: &[u8], base_offset: i64, path: &Path) -> Result<OffsetIndex> {
        let mut index = OffsetIndex::new(base_offset);
        for (n, entry) in entries_of(bytes, OFFSET_INDEX_ENTRY_SIZE, path)? {
            let bad = |reason: String| entry_error(path, n, OFFSET_INDEX_ENTRY_SIZE, reason);
            let mut cursor = Cursor::new(entry);
            let (relative, position) = match (cursor.u32(), cursor.u32()) {
                (Some(r), Some(p)) => (r, p),
                _ => return Err(bad("truncated entry".into())),
            };
            let offset = absolute_offset(base_offset, relative).map_err(&bad)?;
            index.check_next(offset, position).map_err(bad)?;
            index.entries.push(IndexEntry { offset, position });
        }
        Ok(index)
    }

    /// The segment's base offset.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// The entries, in offset order.
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The last entry, if any.
    pub fn last(&self) -> Option<IndexEntry> {
        self.entries.last().copied()
    }

    /// The entry with the largest offset `<= target`, or
    /// `{base_offset, 0}` when there is none (Kafka's `OffsetIndex.lookup`):
    /// reading the `.log` from that position reaches `target`.
    pub fn lookup(&self, target: i64) -> IndexEntry {
        let after = self.entries.partition_point(|e| e.offset <= target);
        after
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .copied()
            .unwrap_or(IndexEntry {
                offset: self.base_offset,
                position: 0,
            })
    }

    /// Appends an entry. The offset must be above the last one and within
    /// `[base_offset, base_offset + i32::MAX]`; the position must not be
    /// below the last one nor above `i32::MAX`.
    pub fn append(&mut self, offset: i64, position: u32) -> Result<()> {
        relative_offset(self.base_offset, offset)
            .and_then(|_| self.check_next(offset, position))
            .map_err(|reason| Error::InvalidArgument(format!("offset index append: {reason}")))?;
        self.entries.push(IndexEntry { offset, position });
        Ok(())
    }

    /// Removes the entries with an offset `>= offset` (Kafka's
    /// `OffsetIndex.truncateTo`).
    pub fn truncate_to(&mut self, offset: i64) {
        let keep = self.entries.partition_point(|e| e.offset < offset);
        self.entries.truncate(keep);
    }

    /// Removes the entries pointing at or beyond byte `position`, as needed
    /// when the `.log` file is cut to `position` bytes.
    pub fn truncate_to_position(&mut self, position: u32) {
        let keep = self.entries.partition_point(|e| e.position < position);
        self.entries.truncate(keep);
    }

    /// Keeps the first `len` entries (undoes appends made since the index
    /// had `len` entries).
    pub(crate) fn truncate_len(&mut self, len: usize) {
        self.entries.truncate(len);
    }

    /// Size in bytes of [`OffsetIndex::to_bytes`].
    pub fn size_in_bytes(&self) -> usize {
        self.entries.len().saturating_mul(OFFSET_INDEX_ENTRY_SIZE)
    }

    /// The file content: the used entries, without padding.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size_in_bytes());
        for e in &self.entries {
            // In range by the invariants (checked on parse and append).
            let relative = e.offset.wrapping_sub(self.base_offset) as u32;
            out.extend_from_slice(&relative.to_be_bytes());
            out.extend_from_slice(&e.position.to_be_bytes());
        }
        out
    }

    fn check_next(&self, offset: i64, position: u32) -> std::result::Result<(), String> {
        if position > MAX_POSITION {
            return Err(format!("position {position} is above {MAX_POSITION}"));
        }
        if let Some(last) = self.entries.last() {
            if offset <= last.offset {
                return Err(format!(
                    "offset {offset} is not above the previous offset {}",
                    last.offset
                ));
            }
            if position < last.position {
                return Err(format!(
                    "position {position} of offset {offset} is below position {} of offset {}",
                    last.position, last.offset
                ));
            }
        }
        Ok(())
    }
}

/// A `.timeindex` file in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeIndex {
    base_offset: i64,
    entries: Vec<TimeEntry>,
}

/// Kafka's `RecordBatch.NO_TIMESTAMP`: the timestamp of an empty time index's
/// implicit last entry.
pub const NO_TIMESTAMP: i64 = -1;

impl TimeIndex {
    /// An empty time index for the segment starting at `base_offset`.
    pub fn new(base_offset: i64) -> TimeIndex {
        TimeIndex {
            base_offset,
            entries: Vec::new(),
        }
    }

    /// Parses the bytes of a `.timeindex` file of the segment at
    /// `base_offset`; `path` only names the file in errors. Trailing zero
    /// padding is dropped (see the module doc).
    pub fn parse(bytes: &[u8], base_offset: i64, path: &Path) -> Result<TimeIndex> {
        let mut index = TimeIndex::new(base_offset);
        for (n, entry) in entries_of(bytes, TIME_INDEX_ENTRY_SIZE, path)? {
            let bad = |reason: String| entry_error(path, n, TIME_INDEX_ENTRY_SIZE, reason);
            let mut cursor = Cursor::new(entry);
            let (timestamp, relative) = match (cursor.i64(), cursor.u32()) {
                (Some(t), Some(r)) => (t, r),
                _ => return Err(bad("truncated entry".into())),
            };
            let offset = absolute_offset(base_offset, relative).map_err(&bad)?;
            index.check_order(timestamp, offset).map_err(bad)?;
            index.entries.push(TimeEntry { timestamp, offset });
        }
        Ok(index)
    }

    /// The segment's base offset.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[TimeEntry] {
        &self.entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The last entry, if any. (Kafka's `lastEntry()` returns
    /// `{NO_TIMESTAMP, base_offset}` for an empty index.)
    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    /// The last entry with a timestamp `<= timestamp`, or `None` when every
    /// entry is later (Kafka then returns `{NO_TIMESTAMP, base_offset}`).
    pub fn lookup(&self, timestamp: i64) -> Option<TimeEntry> {
        let after = self.entries.partition_point(|e| e.timestamp <= timestamp);
        after
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .copied()
    }

    /// Kafka's `TimeIndex.maybeAppend`: appends `{timestamp, offset}` only
    /// when `timestamp` is above the last timestamp ([`NO_TIMESTAMP`] when
    /// empty), and returns whether it did.
    ///
    /// Refuses, as Kafka does, an offset below the last entry's or a
    /// timestamp below the last entry's, and an offset outside
    /// `[base_offset, base_offset + i32::MAX]`.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> Result<bool> {
        let refuse =
            |reason: String| Error::InvalidArgument(format!("time index append: {reason}"));
        self.check_order(timestamp, offset).map_err(refuse)?;
        let last_timestamp = self.entries.last().map_or(NO_TIMESTAMP, |e| e.timestamp);
        if timestamp <= last_timestamp {
            return Ok(false);
        }
        relative_offset(self.base_offset, offset).map_err(refuse)?;
        self.entries.push(TimeEntry { timestamp, offset });
        Ok(true)
    }

    /// Removes the entries with an offset `>= offset` (Kafka's
    /// `TimeIndex.truncateTo`).
    pub fn truncate_to(&mut self, offset: i64) {
        let keep = self.entries.partition_point(|e| e.offset < offset);
        self.entries.truncate(keep);
    }

    /// Keeps the first `len` entries (undoes appends made since the index
    /// had `len` entries).
    pub(crate) fn truncate_len(&mut self, len: usize) {
        self.entries.truncate(len);
    }

    /// Size in bytes of [`TimeIndex::to_bytes`].
    pub fn size_in_bytes(&self) -> usize {
        self.entries.len().saturating_mul(TIME_INDEX_ENTRY_SIZE)
    }

    /// The file content: the used entries, without padding.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size_in_bytes());
        for e in &self.entries {
            // In range by the invariants (checked on parse and append).
            let relative = e.offset.wrapping_sub(self.base_offset) as u32;
            out.extend_from_slice(&e.timestamp.to_be_bytes());
            out.extend_from_slice(&relative.to_be_bytes());
        }
        out
    }

    fn check_order(&self, timestamp: i64, offset: i64) -> std::result::Result<(), String> {
        if let Some(last) = self.entries.last() {
            if offset < last.offset {
                return Err(format!(
                    "offset {offset} is below the previous offset {}",
                    last.offset
                ));
            }
            if timestamp < last.timestamp {
                return Err(format!(
                    "timestamp {timestamp} is below the previous timestamp {}",
                    last.timestamp
                ));
            }
        }
        Ok(())
    }
}

/// An aborted transaction, as Kafka's `AbortedTxn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct AbortedTxn {
    /// Entry format version ([`ABORTED_TXN_VERSION`]).
    pub version: i16,
    /// The producer that aborted.
    pub producer_id: i64,
    /// First offset of the transaction.
    pub first_offset: i64,
    /// Offset of the abort marker.
    pub last_offset: i64,
    /// Last stable offset of the partition when the abort was written.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    /// An entry of the current version.
    pub fn new(
        producer_id: i64,
        first_offset: i64,
        last_offset: i64,
        last_stable_offset: i64,
    ) -> AbortedTxn {
        AbortedTxn {
            version: ABORTED_TXN_VERSION,
            producer_id,
            first_offset,
            last_offset,
            last_stable_offset,
        }
    }

    /// The 34 bytes of the entry.
    pub fn to_bytes(&self) -> [u8; ABORTED_TXN_SIZE] {
        let mut out = [0u8; ABORTED_TXN_SIZE];
        let fields: [&[u8]; 5] = [
            &self.version.to_be_bytes(),
            &self.producer_id.to_be_bytes(),
            &self.first_offset.to_be_bytes(),
            &self.last_offset.to_be_bytes(),
            &self.last_stable_offset.to_be_bytes(),
        ];
        let mut at = 0usize;
        for field in fields {
            if let Some(dst) = out.get_mut(at..at + field.len()) {
                dst.copy_from_slice(field);
            }
            at += field.len();
        }
        out
    }

    /// Decodes an entry from its 34 bytes; `None` when `bytes` is shorter.
    /// The version is returned as read, not checked.
    pub fn from_bytes(bytes: &[u8]) -> Option<AbortedTxn> {
        let mut c = Cursor::new(bytes);
        Some(AbortedTxn {
            version: c.i16()?,
            producer_id: c.i64()?,
            first_offset: c.i64()?,
            last_offset: c.i64()?,
            last_stable_offset: c.i64()?,
        })
    }
}

/// Result of [`TransactionIndex::collect_aborted_txns`] (Kafka's
/// `TxnIndexSearchResult`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnIndexSearchResult {
    /// The aborted transactions overlapping the fetch range, in index order.
    pub aborted: Vec<AbortedTxn>,
    /// True when an entry's last stable offset reached the upper bound, so
    /// later segments cannot add to the result.
    pub is_complete: bool,
}

/// A `.txnindex` file in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransactionIndex {
    entries: Vec<AbortedTxn>,
}

impl TransactionIndex {
    /// An empty transaction index.
    pub fn new() -> TransactionIndex {
        TransactionIndex::default()
    }

    /// Parses the bytes of a `.txnindex` file; `path` only names the file in
    /// errors. The length must be a multiple of 34, every entry of version
    /// 0, and last offsets strictly increasing.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<TransactionIndex> {
        if !bytes.len().is_multiple_of(ABORTED_TXN_SIZE) {
            return Err(Error::malformed(
                path,
                0,
                format!(
                    "length {} is not a multiple of the entry size {ABORTED_TXN_SIZE}",
                    bytes.len()
                ),
            ));
        }
        let mut index = TransactionIndex::new();
        for (n, raw) in bytes.chunks_exact(ABORTED_TXN_SIZE).enumerate() {
            let bad = |reason: String| entry_error(path, n, ABORTED_TXN_SIZE, reason);
            let txn = AbortedTxn::from_bytes(raw).ok_or_else(|| bad("truncated entry".into()))?;
            index.check_next(&txn).map_err(bad)?;
            index.entries.push(txn);
        }
        Ok(index)
    }

    /// The entries, in file order.
    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The last entry, if any.
    pub fn last(&self) -> Option<AbortedTxn> {
        self.entries.last().copied()
    }

    /// Appends an entry; its version must be 0 and its last offset above the
    /// previous entry's (Kafka's `TransactionIndex.append`).
    pub fn append(&mut self, txn: AbortedTxn) -> Result<()> {
        self.check_next(&txn).map_err(|reason| {
            Error::InvalidArgument(format!("transaction index append: {reason}"))
        })?;
        self.entries.push(txn);
        Ok(())
    }

    /// Kafka's `TransactionIndex.truncateTo`: drops the first entry whose
    /// last offset is `>= offset` and every entry after it.
    pub fn truncate_to(&mut self, offset: i64) {
        if let Some(cut) = self.entries.iter().position(|t| t.last_offset >= offset) {
            self.entries.truncate(cut);
        }
    }

    /// Keeps the first `len` entries (undoes appends made since the index
    /// had `len` entries).
    pub(crate) fn truncate_len(&mut self, len: usize) {
        self.entries.truncate(len);
    }

    /// Kafka's `TransactionIndex.collectAbortedTxns`: the aborted
    /// transactions overlapping `[fetch_offset, upper_bound_offset)` (last
    /// offset `>= fetch_offset` and first offset `< upper_bound_offset`),
    /// scanning in order and stopping after the first entry whose last
    /// stable offset is `>= upper_bound_offset` (then `is_complete`).
    pub fn collect_aborted_txns(
        &self,
        fetch_offset: i64,
        upper_bound_offset: i64,
    ) -> TxnIndexSearchResult {
        let mut aborted = Vec::new();
        for txn in &self.entries {
            if txn.last_offset >= fetch_offset && txn.first_offset < upper_bound_offset {
                aborted.push(*txn);
            }
            if txn.last_stable_offset >= upper_bound_offset {
                return TxnIndexSearchResult {
                    aborted,
                    is_complete: true,
                };
            }
        }
        TxnIndexSearchResult {
            aborted,
            is_complete: false,
        }
    }

    /// The aborted transactions of [`TransactionIndex::collect_aborted_txns`],
    /// without the completion flag.
    pub fn collect_aborted(&self, fetch_offset: i64, upper_bound_offset: i64) -> Vec<AbortedTxn> {
        self.collect_aborted_txns(fetch_offset, upper_bound_offset)
            .aborted
    }

    /// Kafka's `TransactionIndex.sanityCheck`: every last offset must be at
    /// least the segment's base offset `start_offset`.
    pub fn check_start_offset(&self, start_offset: i64, path: &Path) -> Result<()> {
        match self
            .entries
            .iter()
            .position(|t| t.last_offset < start_offset)
        {
            None => Ok(()),
            Some(n) => Err(entry_error(
                path,
                n,
                ABORTED_TXN_SIZE,
                format!(
                    "last offset {} is below the segment start offset {start_offset}",
                    self.entries.get(n).map_or(0, |t| t.last_offset)
                ),
            )),
        }
    }

    /// Size in bytes of [`TransactionIndex::to_bytes`].
    pub fn size_in_bytes(&self) -> usize {
        self.entries.len().saturating_mul(ABORTED_TXN_SIZE)
    }

    /// The file content.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size_in_bytes());
        for txn in &self.entries {
            out.extend_from_slice(&txn.to_bytes());
        }
        out
    }

    fn check_next(&self, txn: &AbortedTxn) -> std::result::Result<(), String> {
        if txn.version != ABORTED_TXN_VERSION {
            return Err(format!(
                "unsupported version {}, expected {ABORTED_TXN_VERSION}",
                txn.version
            ));
        }
        if let Some(last) = self.entries.last()
            && txn.last_offset <= last.last_offset
        {
            return Err(format!(
                "last offset {} is not above the previous last offset {}",
                txn.last_offset, last.last_offset
            ));
        }
        Ok(())
    }
}

/// Splits a preallocated index into `(entry number, entry bytes)`, checking
/// the length and dropping the zero padding.
fn entries_of<'a>(
    bytes: &'a [u8],
    size: usize,
    path: &Path,
) -> Result<impl Iterator<Item = (usize, &'a [u8])>> {
    if !bytes.len().is_multiple_of(size) {
        return Err(Error::malformed(
            path,
            0,
            format!(
                "length {} is not a multiple of the entry size {size}",
                bytes.len()
            ),
        ));
    }
    let padding_entry = bytes
        .chunks_exact(size)
        .enumerate()
        .skip(1)
        .find(|(_, e)| e.iter().all(|b| *b == 0))
        .map(|(n, _)| n);
    let used = match padding_entry {
        None => bytes.len() / size,
        Some(n) => {
            let start = n.saturating_mul(size);
            let tail = bytes.get(start..).unwrap_or_default();
            if let Some(i) = tail.iter().position(|b| *b != 0) {
                let at = start.saturating_add(i);
                return Err(Error::malformed(
                    path,
                    0,
                    format!(
                        "entry {} (byte {at}): non-zero byte after the zero padding that starts at entry {n} (byte {start})",
                        at / size
                    ),
                ));
            }
            n
        }
    };
    Ok(bytes.chunks_exact(size).take(used).enumerate())
}

fn entry_error(path: &Path, n: usize, size: usize, reason: String) -> Error {
    Error::malformed(
        path,
        0,
        format!("entry {n} (byte {}): {reason}", n.saturating_mul(size)),
    )
}

/// `base_offset + relative`, refusing relative offsets Kafka cannot hold.
fn absolute_offset(base_offset: i64, relative: u32) -> std::result::Result<i64, String> {
    if i64::from(relative) > MAX_RELATIVE_OFFSET {
        return Err(format!(
            "relative offset {relative} is above {MAX_RELATIVE_OFFSET}"
        ));
    }
    base_offset
        .checked_add(i64::from(relative))
        .ok_or_else(|| format!("base offset {base_offset} + relative offset {relative} overflows"))
}

/// `offset - base_offset`, when an index can hold it.
fn relative_offset(base_offset: i64, offset: i64) -> std::result::Result<u32, String> {
    offset
        .checked_sub(base_offset)
        .filter(|r| (0..=MAX_RELATIVE_OFFSET).contains(r))
        .and_then(|r| u32::try_from(r).ok())
        .ok_or_else(|| {
            format!("offset {offset} is outside [{base_offset}, {base_offset} + {MAX_RELATIVE_OFFSET}] of the segment")
        })
}

/// Reads big-endian integers from a slice without panicking.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let end = self.pos.checked_add(N)?;
        let bytes: [u8; N] = self.buf.get(self.pos..end)?.try_into().ok()?;
        self.pos = end;
        Some(bytes)
    }

    fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p() -> &'static Path {
        Path::new("/data/kafka/t-0/00000000000000000100.index")
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2).expect("even"), 16).expect("hex"))
            .collect()
    }

    fn malformed_reason(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::Malformed {
                line: 0, reason, ..
            }) => reason,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn offset_index_golden_bytes() {
        let mut idx = OffsetIndex::new(100);
        idx.append(100, 0).expect("append");
        idx.append(105, 4096).expect("append");
        idx.append(230, 4096 * 3).expect("append");
        let bytes = idx.to_bytes();
        assert_eq!(
            bytes,
            hex("00000000 00000000  00000005 00001000  00000082 00003000")
        );
        let parsed = OffsetIndex::parse(&bytes, 100, p()).expect("parse");
        assert_eq!(parsed, idx);
        assert_eq!(
            parsed.entries()[1],
            IndexEntry {
                offset: 105,
                position: 4096
            }
        );
        assert_eq!(
            parsed.last(),
            Some(IndexEntry {
                offset: 230,
                position: 12288
            })
        );
        assert_eq!(
            (parsed.len(), parsed.size_in_bytes(), parsed.base_offset()),
            (3, 24, 100)
        );
    }

    #[test]
    fn offset_index_lookup() {
        let mut idx = OffsetIndex::new(100);
        assert_eq!(
            idx.lookup(150),
            IndexEntry {
                offset: 100,
                position: 0
            }
        );
        idx.append(110, 500).expect("append");
        idx.append(120, 900).expect("append");
        assert_eq!(
            idx.lookup(0),
            IndexEntry {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(109),
            IndexEntry {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(110),
            IndexEntry {
                offset: 110,
                position: 500
            }
        );
        assert_eq!(
            idx.lookup(119),
            IndexEntry {
                offset: 110,
                position: 500
            }
        );
        assert_eq!(
            idx.lookup(120),
            IndexEntry {
                offset: 120,
                position: 900
            }
        );
        assert_eq!(
            idx.lookup(i64::MAX),
            IndexEntry {
                offset: 120,
                position: 900
            }
        );
    }

    #[test]
    fn offset_index_append_rules() {
        let mut idx = OffsetIndex::new(100);
        assert!(matches!(idx.append(99, 0), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            idx.append(100 + MAX_RELATIVE_OFFSET + 1, 0),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            idx.append(100, MAX_POSITION + 1),
            Err(Error::InvalidArgument(_))
        ));
        idx.append(100 + MAX_RELATIVE_OFFSET - 10, 50)
            .expect("edge");
        assert!(matches!(
            idx.append(100 + MAX_RELATIVE_OFFSET - 10, 60),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            idx.append(100 + MAX_RELATIVE_OFFSET, 49),
            Err(Error::InvalidArgument(_))
        ));
        idx.append(100 + MAX_RELATIVE_OFFSET, 50)
            .expect("same position is fine");
        assert_eq!(idx.len(), 2);
        let mut neg = OffsetIndex::new(i64::MIN);
        assert!(neg.append(i64::MAX, 0).is_err());
    }

    #[test]
    fn offset_index_truncation() {
        let mut idx = OffsetIndex::new(0);
        for (o, pos) in [(0, 0), (10, 100), (20, 200), (30, 300)] {
            idx.append(o, pos).expect("append");
        }
        let mut a = idx.clone();
        a.truncate_to(20);
        assert_eq!(
            a.last(),
            Some(IndexEntry {
                offset: 10,
                position: 100
            })
        );
        let mut b = idx.clone();
        b.truncate_to(25);
        assert_eq!(
            b.last(),
            Some(IndexEntry {
                offset: 20,
                position: 200
            })
        );
        let mut c = idx.clone();
        c.truncate_to(0);
        assert!(c.is_empty());
        let mut d = idx.clone();
        d.truncate_to(1000);
        assert_eq!(d, idx);
        let mut e = idx.clone();
        e.truncate_to_position(200);
        assert_eq!(
            e.last(),
            Some(IndexEntry {
                offset: 10,
                position: 100
            })
        );
        e.truncate_to_position(201);
        assert_eq!(e.len(), 2);
        // After truncation appends continue from the new last entry.
        e.append(11, 150).expect("append after truncate");
    }

    #[test]
    fn offset_index_padding() {
        let mut bytes = hex("00000000 00000000  00000003 00000040");
        bytes.extend_from_slice(&[0u8; 8 * 100]);
        let idx = OffsetIndex::parse(&bytes, 7, p()).expect("padded");
        assert_eq!(
            idx.entries(),
            [
                IndexEntry {
                    offset: 7,
                    position: 0
                },
                IndexEntry {
                    offset: 10,
                    position: 64
                }
            ]
        );
        assert_eq!(idx.to_bytes(), bytes.get(..16).expect("len"));
        // A preallocated index with no entry written: one (base, 0) entry.
        let all_zero = OffsetIndex::parse(&[0u8; 80], 7, p()).expect("all zero");
        assert_eq!(
            all_zero.entries(),
            [IndexEntry {
                offset: 7,
                position: 0
            }]
        );
        assert!(OffsetIndex::parse(&[], 7, p()).expect("empty").is_empty());
        // Something after the padding is corruption.
        let mut bad = bytes.clone();
        bad[16 + 8 * 50 + 3] = 1;
        let reason = malformed_reason(OffsetIndex::parse(&bad, 7, p()));
        assert!(
            reason.contains("entry 52") && reason.contains("padding that starts at entry 2"),
            "{reason}"
        );
    }

    #[test]
    fn offset_index_corruption_errors() {
        let reason = malformed_reason(OffsetIndex::parse(&[0u8; 12], 0, p()));
        assert!(
            reason.contains("length 12") && reason.contains('8'),
            "{reason}"
        );
        let dec = hex("00000005 00000000  00000004 00000010");
        let reason = malformed_reason(OffsetIndex::parse(&dec, 0, p()));
        assert!(reason.starts_with("entry 1 (byte 8): offset 4"), "{reason}");
        let dup = hex("00000005 00000000  00000005 00000010");
        assert!(malformed_reason(OffsetIndex::parse(&dup, 0, p())).starts_with("entry 1 "));
        let pos = hex("00000001 00000100  00000002 000000ff");
        assert!(malformed_reason(OffsetIndex::parse(&pos, 0, p())).contains("position 255"));
        let rel = hex("80000000 00000000");
        assert!(malformed_reason(OffsetIndex::parse(&rel, 0, p())).starts_with("entry 0 "));
        let big_pos = hex("00000000 80000000");
        assert!(malformed_reason(OffsetIndex::parse(&big_pos, 0, p())).contains("position"));
        let overflow = hex("00000001 00000000");
        assert!(
            malformed_reason(OffsetIndex::parse(&overflow, i64::MAX, p())).contains("overflows")
        );
        let err = OffsetIndex::parse(&dec, 0, p()).expect_err("dec");
        assert!(
            err.to_string()
                .starts_with("/data/kafka/t-0/00000000000000000100.index: "),
            "{err}"
        );
    }

    #[test]
    fn time_index_golden_bytes_and_lookup() {
        let mut idx = TimeIndex::new(0);
        assert!(idx.maybe_append(1_700_000_000_000, 5).expect("append"));
        assert!(idx.maybe_append(1_700_000_000_500, 9).expect("append"));
        let bytes = idx.to_bytes();
        assert_eq!(
            bytes,
            hex("0000018bcfe56800 00000005  0000018bcfe569f4 00000009")
        );
        assert_eq!(TimeIndex::parse(&bytes, 0, p()).expect("parse"), idx);
        assert_eq!(idx.lookup(1_699_999_999_999), None);
        assert_eq!(
            idx.lookup(1_700_000_000_000),
            Some(TimeEntry {
                timestamp: 1_700_000_000_000,
                offset: 5
            })
        );
        assert_eq!(
            idx.lookup(1_700_000_000_499),
            Some(TimeEntry {
                timestamp: 1_700_000_000_000,
                offset: 5
            })
        );
        assert_eq!(
            idx.lookup(i64::MAX),
            Some(TimeEntry {
                timestamp: 1_700_000_000_500,
                offset: 9
            })
        );
        assert_eq!(TimeIndex::new(3).lookup(0), None);
    }

    #[test]
    fn time_index_maybe_append_follows_kafka() {
        let mut idx = TimeIndex::new(100);
        // Empty index: the implicit last timestamp is NO_TIMESTAMP (-1).
        assert!(!idx.maybe_append(NO_TIMESTAMP, 100).expect("no timestamp"));
        assert!(idx.maybe_append(0, 100).expect("first"));
        assert!(
            !idx.maybe_append(0, 100)
                .expect("same entry again is ignored")
        );
        assert!(!idx.maybe_append(0, 105).expect("same timestamp is ignored"));
        assert!(idx.maybe_append(10, 105).expect("later"));
        assert!(
            idx.maybe_append(20, 105)
                .expect("same offset, later timestamp")
        );
        assert!(matches!(
            idx.maybe_append(30, 104),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            idx.maybe_append(19, 110),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            idx.maybe_append(40, 100 + MAX_RELATIVE_OFFSET + 1),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            TimeIndex::new(100).maybe_append(5, 99),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(idx.len(), 3);
    }

    #[test]
    fn time_index_truncation_and_padding() {
        let mut idx = TimeIndex::new(0);
        for (t, o) in [(10, 0), (20, 5), (30, 9)] {
            idx.maybe_append(t, o).expect("append");
        }
        let mut a = idx.clone();
        a.truncate_to(5);
        assert_eq!(
            a.last(),
            Some(TimeEntry {
                timestamp: 10,
                offset: 0
            })
        );
        let mut b = idx.clone();
        b.truncate_to(6);
        assert_eq!(
            b.last(),
            Some(TimeEntry {
                timestamp: 20,
                offset: 5
            })
        );
        let mut padded = idx.to_bytes();
        padded.extend_from_slice(&[0u8; 12 * 10]);
        assert_eq!(TimeIndex::parse(&padded, 0, p()).expect("padded"), idx);
        padded.push(0);
        assert!(
            malformed_reason(TimeIndex::parse(&padded, 0, p()))
                .contains("multiple of the entry size 12")
        );
        let back = hex("0000000000000014 00000001  0000000000000013 00000002");
        assert!(
            malformed_reason(TimeIndex::parse(&back, 0, p()))
                .starts_with("entry 1 (byte 12): timestamp 19")
        );
        let off_back = hex("0000000000000014 00000002  0000000000000015 00000001");
        assert!(malformed_reason(TimeIndex::parse(&off_back, 0, p())).contains("offset 1"));
        let mut after_pad = idx.to_bytes();
        after_pad.extend_from_slice(&[0u8; 12]);
        after_pad.extend_from_slice(&hex("0000000000000063 00000063"));
        assert!(malformed_reason(TimeIndex::parse(&after_pad, 0, p())).contains("padding"));
    }

    #[test]
    fn aborted_txn_golden_bytes() {
        let txn = AbortedTxn::new(7, 10, 20, 15);
        let bytes = txn.to_bytes();
        assert_eq!(
            bytes.to_vec(),
            hex("0000 0000000000000007 000000000000000a 0000000000000014 000000000000000f")
        );
        assert_eq!(AbortedTxn::from_bytes(&bytes), Some(txn));
        assert_eq!(AbortedTxn::from_bytes(&bytes[..33]), None);
    }

    fn txn_index(txns: &[(i64, i64, i64, i64)]) -> TransactionIndex {
        let mut idx = TransactionIndex::new();
        for &(pid, first, last, lso) in txns {
            idx.append(AbortedTxn::new(pid, first, last, lso))
                .expect("append");
        }
        idx
    }

    #[test]
    fn transaction_index_parse_and_errors() {
        let idx = txn_index(&[(1, 0, 10, 11), (2, 5, 20, 21)]);
        let bytes = idx.to_bytes();
        assert_eq!(bytes.len(), 68);
        assert_eq!(TransactionIndex::parse(&bytes, p()).expect("parse"), idx);
        assert!(TransactionIndex::parse(&[], p()).expect("empty").is_empty());
        let err = TransactionIndex::parse(&bytes[..50], p()).expect_err("length");
        assert!(
            err.to_string().contains("00000000000000000100.index")
                && err.to_string().contains("length 50")
        );
        let mut v1 = bytes.clone();
        v1[35] = 1;
        assert!(
            malformed_reason(TransactionIndex::parse(&v1, p()))
                .starts_with("entry 1 (byte 34): unsupported version 1")
        );
        let swapped = [&bytes[34..], &bytes[..34]].concat();
        assert!(
            malformed_reason(TransactionIndex::parse(&swapped, p())).contains("last offset 10")
        );
    }

    #[test]
    fn transaction_index_append_and_truncate() {
        let mut idx = txn_index(&[(1, 0, 10, 11), (2, 5, 20, 21), (3, 25, 30, 31)]);
        assert!(matches!(
            idx.append(AbortedTxn::new(4, 0, 30, 40)),
            Err(Error::InvalidArgument(_))
        ));
        let v1 = AbortedTxn {
            version: 1,
            ..AbortedTxn::new(4, 0, 50, 40)
        };
        assert!(matches!(idx.append(v1), Err(Error::InvalidArgument(_))));
        let mut a = idx.clone();
        a.truncate_to(20);
        assert_eq!(
            a.entries()
                .iter()
                .map(|t| t.producer_id)
                .collect::<Vec<_>>(),
            [1]
        );
        let mut b = idx.clone();
        b.truncate_to(21);
        assert_eq!(b.len(), 2);
        b.append(AbortedTxn::new(9, 21, 22, 23))
            .expect("append after truncate");
        idx.truncate_to(0);
        assert!(idx.is_empty());
        let idx = txn_index(&[(1, 0, 10, 11)]);
        assert!(idx.check_start_offset(10, p()).is_ok());
        assert!(
            malformed_reason(idx.check_start_offset(11, p()))
                .starts_with("entry 0 (byte 0): last offset 10")
        );
    }

    #[test]
    fn transaction_index_collect_like_kafka() {
        let idx = txn_index(&[
            (0, 0, 10, 11),
            (1, 5, 15, 13),
            (2, 18, 35, 25),
            (3, 32, 50, 40),
        ]);
        let pids =
            |r: &TxnIndexSearchResult| r.aborted.iter().map(|t| t.producer_id).collect::<Vec<_>>();
        // Entry 3 starts at the upper bound (excluded) but its LSO reaches it.
        let r = idx.collect_aborted_txns(0, 32);
        assert_eq!((pids(&r), r.is_complete), (vec![0, 1, 2], true));
        let r = idx.collect_aborted_txns(0, 35);
        assert_eq!((pids(&r), r.is_complete), (vec![0, 1, 2, 3], true));
        let r = idx.collect_aborted_txns(10, 35);
        assert_eq!((pids(&r), r.is_complete), (vec![0, 1, 2, 3], true));
        let r = idx.collect_aborted_txns(11, 35);
        assert_eq!((pids(&r), r.is_complete), (vec![1, 2, 3], true));
        let r = idx.collect_aborted_txns(16, 35);
        assert_eq!((pids(&r), r.is_complete), (vec![2, 3], true));
        let r = idx.collect_aborted_txns(0, 60);
        assert_eq!((pids(&r), r.is_complete), (vec![0, 1, 2, 3], false));
        let r = idx.collect_aborted_txns(0, 20);
        assert_eq!((pids(&r), r.is_complete), (vec![0, 1, 2], true));
        // The scan stops at the first LSO reaching the bound: entry 1 overlaps
        // [0, 11) but is not returned, as in Kafka.
        let r = idx.collect_aborted_txns(0, 11);
        assert_eq!((pids(&r), r.is_complete), (vec![0], true));
        let r = idx.collect_aborted_txns(51, 60);
        assert_eq!((pids(&r), r.is_complete), (vec![], false));
        assert_eq!(idx.collect_aborted(16, 35), r_vec(&idx, &[2, 3]));
    }

    fn r_vec(idx: &TransactionIndex, pids: &[i64]) -> Vec<AbortedTxn> {
        idx.entries()
            .iter()
            .filter(|t| pids.contains(&t.producer_id))
            .copied()
            .collect()
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), base in any::<i64>()) {
            let _ = OffsetIndex::parse(&bytes, base, p());
            let _ = TimeIndex::parse(&bytes, base, p());
            let _ = TransactionIndex::parse(&bytes, p());
        }

        #[test]
        fn sparse_bytes_never_panic(cells in proptest::collection::vec((0usize..408, any::<u8>()), 0..6), len in 0usize..408) {
            // Mostly-zero buffers reach the padding logic.
            let mut bytes = vec![0u8; len];
            for (at, v) in cells {
                if let Some(b) = bytes.get_mut(at) { *b = v; }
            }
            let _ = OffsetIndex::parse(&bytes, 0, p());
            let _ = TimeIndex::parse(&bytes, 0, p());
            let _ = TransactionIndex::parse(&bytes, p());
        }

        #[test]
        fn offset_index_round_trips(base in 0i64..1 << 40, steps in proptest::collection::vec((1i64..1000, 0u32..5000), 0..50)) {
            let mut idx = OffsetIndex::new(base);
            let (mut offset, mut position) = (base - 1, 0u32);
            for (d_off, d_pos) in steps {
                offset += d_off;
                position += d_pos;
                idx.append(offset, position).expect("append");
            }
            let parsed = OffsetIndex::parse(&idx.to_bytes(), base, p()).expect("parse");
            prop_assert_eq!(&parsed, &idx);
            let mut padded = idx.to_bytes();
            padded.extend_from_slice(&[0u8; 64]);
            let reparsed = OffsetIndex::parse(&padded, base, p()).expect("padded");
            // The padding is never confused with entries, except that an
            // empty index reads back as the (base, 0) entry.
            if idx.is_empty() {
                prop_assert_eq!(reparsed.entries(), &[IndexEntry { offset: base, position: 0 }][..]);
            } else {
                prop_assert_eq!(&reparsed, &idx);
            }
            for e in idx.entries() {
                prop_assert_eq!(idx.lookup(e.offset), *e);
            }
        }

        #[test]
        fn time_index_round_trips(base in 0i64..1 << 40, steps in proptest::collection::vec((0i64..1000, 0i64..1000), 0..50)) {
            let mut idx = TimeIndex::new(base);
            let (mut ts, mut offset) = (0i64, base);
            for (d_ts, d_off) in steps {
                ts += d_ts;
                offset += d_off;
                idx.maybe_append(ts, offset).expect("append");
            }
            prop_assert_eq!(&TimeIndex::parse(&idx.to_bytes(), base, p()).expect("parse"), &idx);
        }

        #[test]
        fn transaction_index_round_trips(steps in proptest::collection::vec((any::<i64>(), 1i64..1000, 0i64..100), 0..20)) {
            let mut idx = TransactionIndex::new();
            let mut last = 0i64;
            for (pid, d, back) in steps {
                last += d;
                idx.append(AbortedTxn::new(pid, last - back, last, last + 1)).expect("append");
            }
            prop_assert_eq!(&TransactionIndex::parse(&idx.to_bytes(), p()).expect("parse"), &idx);
        }
    }
}
