//! A pack: one object holding the new ranges of many partitions, written
//! once per shipper cycle, so that the cycle's writes do not grow with the
//! number of busy partitions (issue 30, `docs/mirroring.md`, "Layout 2:
//! cycle packs"). Pure: bytes in, bytes out.
//!
//! ```text
//! offset  size  field
//! 0       4     magic "SMPK"
//! 4       2     format version (1), big-endian like Kafka's formats
//! 6       4     entry count
//! 10      4     index length in bytes (the entries below)
//! 14      ...   entries, sorted by (topic, partition, base offset)
//! ...     4     CRC-32C of every byte before it (header and index)
//! ...           data: each entry's bytes, in entry order, back to back
//! ```
//!
//! An entry (fixed fields, then the two variable ones):
//!
//! ```text
//! topic id 16 | partition i32 | start u64 | len u64 | base offset i64 |
//! last offset i64 | batches u32 | crc32c u32 | max timestamp i64 |
//! segment base offset i64 | segment generation u32 | completes segment u8 |
//! topic name (u16 length, bytes) | epochs (u16 count, then epoch i32 and
//! start offset i64 each)
//! ```
//!
//! `start` is the entry's first byte in the whole object, so a reader that
//! holds the index (the cycle's commit record carries it) reads a
//! partition's bytes with one ranged GET, and a destination that mirrors a
//! subset reads each contiguous run of its partitions with one
//! ([`read_runs`]): partitions are sorted, so a subset of topics is a few
//! runs. `crc32c` is the CRC-32C of the entry's bytes, checked before any
//! of them is used, as a `.batches` object's is.
//!
//! Invariants of a pack [`PackIndex::decode`] accepts (any other byte
//! string is an error, never a panic, and nothing is allocated beyond the
//! bytes given): the magic and version are known; the header and index
//! pass their CRC-32C; entries are sorted by (topic, partition, base
//! offset) and a partition's entries do not overlap in offsets; data
//! regions follow each other with no gap and no overlap from the first
//! byte after the index CRC; `base_offset <= last_offset`; `batches > 0`;
//! each topic name is a valid Kafka topic name; each entry's epochs are an
//! [`EpochLineage`] (increasing) whose first start is at or below its base
//! offset and whose last start is at or below its last offset.

use kafkalog::epoch::EpochLineage;
use kafkalog::topic::{TopicId, TopicPartition};

/// The first bytes of every pack.
pub const MAGIC: &[u8; 4] = b"SMPK";
/// The format version written.
pub const VERSION: u16 = 1;
/// Bytes of the header before the index (magic, version, count, length).
pub const HEADER_BYTES: usize = 14;
/// Bytes of an entry's fixed fields, before the topic name and epochs.
pub const ENTRY_FIXED_BYTES: usize = 16 + 4 + 8 + 8 + 8 + 8 + 4 + 4 + 8 + 8 + 4 + 1;
/// Bytes of the smallest entry: the fixed fields, a one-byte topic name and
/// no epochs (bounds the entry count a header may claim).
const ENTRY_MIN_BYTES: usize = ENTRY_FIXED_BYTES + 2 + 1 + 2;
/// Bytes of one epoch of an entry.
const EPOCH_BYTES: usize = 4 + 8;

/// One partition's range in a pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackEntry {
    /// The partition.
    pub tp: TopicPartition,
    /// Its topic id.
    pub topic_id: TopicId,
    /// The range's first byte in the object.
    pub start: u64,
    /// The range's length in bytes.
    pub len: u64,
    /// Base offset of the first batch.
    pub base_offset: i64,
    /// Last offset of the last batch.
    pub last_offset: i64,
    /// Number of batches.
    pub batches: u32,
    /// CRC-32C of the range's bytes.
    pub crc32c: u32,
    /// Largest batch max timestamp in the range.
    pub max_timestamp: i64,
    /// Leader epochs inside the range, each with its first offset there.
    pub epochs: EpochLineage,
    /// Base offset of the source segment the batches come from.
    pub segment_base_offset: i64,
    /// The range ends its segment and the segment has rolled.
    pub completes_segment: bool,
    /// The segment's generation (raised by each compaction at the source).
    pub segment_generation: u32,
}

impl PackEntry {
    /// The byte range of the object the entry's bytes are.
    pub fn bytes(&self) -> std::ops::Range<u64> {
        self.start..self.start + self.len
    }

    /// Bytes this entry takes in the index.
    fn index_bytes(&self) -> usize {
        ENTRY_FIXED_BYTES + 2 + self.tp.topic.len() + 2 + self.epochs.entries().len() * EPOCH_BYTES
    }
}

/// A range to put in a pack: what the shipper read (the batches' bytes) and
/// what it knows of them. `start`, `len` and `crc32c` are computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackInput<'a> {
    /// The partition.
    pub tp: TopicPartition,
    /// Its topic id.
    pub topic_id: TopicId,
    /// The batches, byte for byte as in the source segment.
    pub bytes: &'a [u8],
    /// Base offset of the first batch.
    pub base_offset: i64,
    /// Last offset of the last batch.
    pub last_offset: i64,
    /// Number of batches.
    pub batches: u32,
    /// Largest batch max timestamp.
    pub max_timestamp: i64,
    /// Leader epochs inside the range.
    pub epochs: EpochLineage,
    /// Base offset of the source segment.
    pub segment_base_offset: i64,
    /// The range ends its rolled segment.
    pub completes_segment: bool,
    /// The segment's generation.
    pub segment_generation: u32,
}

impl<'a> PackInput<'a> {
    /// The input for the bytes of a range a manifest already describes
    /// (`r`'s key, size, CRC and object offset are not used: the pack
    /// gives them anew).
    pub fn of_range(
        tp: TopicPartition,
        topic_id: TopicId,
        bytes: &'a [u8],
        r: &crate::partition::ShippedRange,
    ) -> PackInput<'a> {
        PackInput {
            tp,
            topic_id,
            bytes,
            base_offset: r.base_offset,
            last_offset: r.last_offset,
            batches: r.batches,
            max_timestamp: r.max_timestamp,
            epochs: r.epochs.clone(),
            segment_base_offset: r.segment_base_offset,
            completes_segment: r.completes_segment,
            segment_generation: r.segment_generation,
        }
    }
}

/// A pack's index: its entries, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackIndex {
    /// The entries, sorted by (topic, partition, base offset).
    pub entries: Vec<PackEntry>,
    /// The first byte of the data section (after the index CRC).
    pub data_start: u64,
}

/// Why bytes are not a pack.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// Fewer bytes than the header or index says there are.
    #[error("pack truncated: {need} bytes needed for the {what}, {have} given")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes given.
        have: u64,
    },
    /// Not a pack (the magic).
    #[error("not a pack: the first bytes are not \"SMPK\"")]
    Magic,
    /// A format version this build does not read.
    #[error("pack format version {0} is not known to this build (it reads 1): upgrade segmirror")]
    Version(u16),
    /// The header or index is damaged.
    #[error("pack index damaged: CRC-32C {found:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The CRC the pack holds.
        found: u32,
        /// The CRC of its bytes.
        computed: u32,
    },
    /// The index breaks an invariant (the entry's position and why).
    #[error("pack index entry {entry}: {reason}")]
    Malformed {
        /// The entry's position.
        entry: usize,
        /// What is wrong.
        reason: String,
    },
    /// An entry's bytes do not match its CRC-32C.
    #[error(
        "pack range of {tp} at offsets {base_offset}..={last_offset} damaged: CRC-32C {computed:#010x}, the index says {expected:#010x}"
    )]
    RangeChecksum {
        /// The partition.
        tp: TopicPartition,
        /// The range's base offset.
        base_offset: i64,
        /// Its last offset.
        last_offset: i64,
        /// The index's CRC.
        expected: u32,
        /// The bytes' CRC.
        computed: u32,
    },
    /// Ranges that cannot be packed (what is wrong).
    #[error("cannot pack: {0}")]
    Input(String),
}

/// Builds a pack of `inputs` (any order: they are sorted). Returns the
/// object's bytes and its index. Refuses two ranges of one partition that
/// overlap in offsets, an empty range and a topic name over Kafka's
/// 249-byte limit (the caller's ranges come from a log, so that is a bug).
pub fn encode(mut inputs: Vec<PackInput<'_>>) -> Result<(Vec<u8>, PackIndex), PackError> {
    inputs.sort_by(|a, b| {
        (&a.tp.topic, a.tp.partition, a.base_offset).cmp(&(
            &b.tp.topic,
            b.tp.partition,
            b.base_offset,
        ))
    });
    let count =
        u32::try_from(inputs.len()).map_err(|_| PackError::Input("too many ranges".into()))?;
    let mut entries: Vec<PackEntry> = Vec::with_capacity(inputs.len());
    for i in &inputs {
        entries.push(PackEntry {
            tp: i.tp.clone(),
            topic_id: i.topic_id,
            start: 0,
            len: i.bytes.len() as u64,
            base_offset: i.base_offset,
            last_offset: i.last_offset,
            batches: i.batches,
            crc32c: crate::codec::crc32c(i.bytes),
            max_timestamp: i.max_timestamp,
            epochs: i.epochs.clone(),
            segment_base_offset: i.segment_base_offset,
            completes_segment: i.completes_segment,
            segment_generation: i.segment_generation,
        });
    }
    let index_len: usize = entries.iter().map(PackEntry::index_bytes).sum();
    let data_start = (HEADER_BYTES + index_len + 4) as u64;
    let mut at = data_start;
    for e in &mut entries {
        e.start = at;
        at += e.len;
    }
    check_entries(&entries, data_start).map_err(|e| PackError::Input(e.to_string()))?;
    let index_len =
        u32::try_from(index_len).map_err(|_| PackError::Input("index over 4 GiB".into()))?;
    let mut out = Vec::with_capacity(usize::try_from(at).unwrap_or(0));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&index_len.to_be_bytes());
    for e in &entries {
        put_entry(&mut out, e);
    }
    let crc = crate::codec::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    for i in &inputs {
        out.extend_from_slice(i.bytes);
    }
    Ok((
        out,
        PackIndex {
            entries,
            data_start,
        },
    ))
}

fn put_entry(out: &mut Vec<u8>, e: &PackEntry) {
    out.extend_from_slice(e.topic_id.as_bytes());
    out.extend_from_slice(&e.tp.partition.to_be_bytes());
    out.extend_from_slice(&e.start.to_be_bytes());
    out.extend_from_slice(&e.len.to_be_bytes());
    out.extend_from_slice(&e.base_offset.to_be_bytes());
    out.extend_from_slice(&e.last_offset.to_be_bytes());
    out.extend_from_slice(&e.batches.to_be_bytes());
    out.extend_from_slice(&e.crc32c.to_be_bytes());
    out.extend_from_slice(&e.max_timestamp.to_be_bytes());
    out.extend_from_slice(&e.segment_base_offset.to_be_bytes());
    out.extend_from_slice(&e.segment_generation.to_be_bytes());
    out.push(u8::from(e.completes_segment));
    // Topic names are at most 249 bytes (checked by `check_entries`).
    out.extend_from_slice(&(e.tp.topic.len() as u16).to_be_bytes());
    out.extend_from_slice(e.tp.topic.as_bytes());
    let epochs = e.epochs.entries();
    out.extend_from_slice(&(epochs.len() as u16).to_be_bytes());
    for ep in epochs {
        out.extend_from_slice(&ep.epoch.to_be_bytes());
        out.extend_from_slice(&ep.start_offset.to_be_bytes());
    }
}

/// A cursor over the index bytes: every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], PackError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(PackError::Truncated {
                what,
                need: (self.at as u64).saturating_add(n as u64),
                have: self.bytes.len() as u64,
            });
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], PackError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, PackError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, PackError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, PackError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }
    fn i32(&mut self, what: &'static str) -> Result<i32, PackError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }
    fn i64(&mut self, what: &'static str) -> Result<i64, PackError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }
}

impl PackIndex {
    /// The header's claim of how many bytes the header and index take
    /// (with the index CRC): what a reader that holds no index fetches
    /// first. `bytes` needs only the first [`HEADER_BYTES`].
    pub fn index_end(bytes: &[u8]) -> Result<u64, PackError> {
        let mut r = Reader { bytes, at: 0 };
        header(&mut r).map(|(_, len)| (HEADER_BYTES + len + 4) as u64)
    }

    /// Decodes a pack's index from the object's first bytes (the whole
    /// object, or at least [`PackIndex::index_end`] of it). See the module
    /// doc for what is checked.
    pub fn decode(bytes: &[u8]) -> Result<PackIndex, PackError> {
        let mut r = Reader { bytes, at: 0 };
        let (count, index_len) = header(&mut r)?;
        let index = r.take(index_len, "index")?;
        let found = r.u32("index CRC-32C")?;
        let computed = crate::codec::crc32c(&bytes[..HEADER_BYTES + index_len]);
        if found != computed {
            return Err(PackError::Checksum { found, computed });
        }
        if count > index_len / ENTRY_MIN_BYTES {
            return Err(PackError::Malformed {
                entry: 0,
                reason: format!("{count} entries cannot fit in {index_len} index bytes"),
            });
        }
        let data_start = (HEADER_BYTES + index_len + 4) as u64;
        let mut r = Reader {
            bytes: index,
            at: 0,
        };
        let mut entries = Vec::with_capacity(count);
        for entry in 0..count {
            entries.push(read_entry(&mut r).map_err(|e| match e {
                PackError::Malformed { reason, .. } => PackError::Malformed { entry, reason },
                PackError::Truncated { what, .. } => PackError::Malformed {
                    entry,
                    reason: format!("the index ends inside its {what}"),
                },
                other => other,
            })?);
        }
        if r.at != index.len() {
            return Err(PackError::Malformed {
                entry: count,
                reason: format!("{} bytes after the last entry", index.len() - r.at),
            });
        }
        check_entries(&entries, data_start)?;
        Ok(PackIndex {
            entries,
            data_start,
        })
    }

    /// The object's size as the index says (its data section's end).
    pub fn object_len(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.data_start, |e| e.start + e.len)
    }

    /// The bytes of `entry` out of `object` (the bytes from the object's
    /// first byte `object_start`: 0 for the whole object, or a ranged
    /// read's start), their CRC-32C checked.
    pub fn slice<'a>(
        entry: &PackEntry,
        object: &'a [u8],
        object_start: u64,
    ) -> Result<&'a [u8], PackError> {
        let from = entry.start.checked_sub(object_start);
        let got = from.and_then(|f| {
            let f = usize::try_from(f).ok()?;
            let end = f.checked_add(usize::try_from(entry.len).ok()?)?;
            object.get(f..end)
        });
        let Some(bytes) = got else {
            return Err(PackError::Truncated {
                what: "range",
                need: entry.start + entry.len,
                have: object_start + object.len() as u64,
            });
        };
        let computed = crate::codec::crc32c(bytes);
        if computed != entry.crc32c {
            return Err(PackError::RangeChecksum {
                tp: entry.tp.clone(),
                base_offset: entry.base_offset,
                last_offset: entry.last_offset,
                expected: entry.crc32c,
                computed,
            });
        }
        Ok(bytes)
    }
}

fn header(r: &mut Reader<'_>) -> Result<(usize, usize), PackError> {
    if r.take(4, "magic")? != MAGIC {
        return Err(PackError::Magic);
    }
    let version = r.u16("version")?;
    if version != VERSION {
        return Err(PackError::Version(version));
    }
    let count = r.u32("entry count")? as usize;
    let index_len = r.u32("index length")? as usize;
    Ok((count, index_len))
}

fn read_entry(r: &mut Reader<'_>) -> Result<PackEntry, PackError> {
    let topic_id = TopicId::from_bytes(r.array("topic id")?);
    let partition = r.i32("partition")?;
    let start = r.u64("start")?;
    let len = r.u64("length")?;
    let base_offset = r.i64("base offset")?;
    let last_offset = r.i64("last offset")?;
    let batches = r.u32("batch count")?;
    let crc32c = r.u32("CRC-32C")?;
    let max_timestamp = r.i64("max timestamp")?;
    let segment_base_offset = r.i64("segment base offset")?;
    let segment_generation = r.u32("segment generation")?;
    let completes_segment = match r.take(1, "completes-segment flag")?[0] {
        0 => false,
        1 => true,
        other => {
            return Err(PackError::Malformed {
                entry: 0,
                reason: format!("completes-segment flag {other} (0 or 1)"),
            });
        }
    };
    let name_len = r.u16("topic name length")? as usize;
    let name =
        std::str::from_utf8(r.take(name_len, "topic name")?).map_err(|_| PackError::Malformed {
            entry: 0,
            reason: "topic name is not UTF-8".into(),
        })?;
    let tp = TopicPartition::new(name, partition).map_err(|e| PackError::Malformed {
        entry: 0,
        reason: e.to_string(),
    })?;
    let n = r.u16("epoch count")? as usize;
    // Bounded by the bytes left: each epoch takes EPOCH_BYTES.
    if n > (r.bytes.len() - r.at) / EPOCH_BYTES {
        return Err(PackError::Truncated {
            what: "epochs",
            need: (r.at + n * EPOCH_BYTES) as u64,
            have: r.bytes.len() as u64,
        });
    }
    let mut epochs = Vec::with_capacity(n);
    for _ in 0..n {
        let epoch = r.i32("epoch")?;
        let start_offset = r.i64("epoch start")?;
        epochs.push(kafkalog::checkpoint::EpochEntry {
            epoch,
            start_offset,
        });
    }
    let epochs = EpochLineage::from_entries(epochs).map_err(|e| PackError::Malformed {
        entry: 0,
        reason: format!("epochs: {e}"),
    })?;
    Ok(PackEntry {
        tp,
        topic_id,
        start,
        len,
        base_offset,
        last_offset,
        batches,
        crc32c,
        max_timestamp,
        epochs,
        segment_base_offset,
        completes_segment,
        segment_generation,
    })
}

/// The index invariants of the module doc, for a data section starting at
/// `data_start`.
fn check_entries(entries: &[PackEntry], data_start: u64) -> Result<(), PackError> {
    let mut at = data_start;
    let mut previous: Option<&PackEntry> = None;
    for (i, e) in entries.iter().enumerate() {
        let bad = |reason: String| PackError::Malformed { entry: i, reason };
        if e.tp.topic.len() > 249 {
            return Err(bad("topic name over 249 bytes".into()));
        }
        if e.epochs.entries().len() > usize::from(u16::MAX) {
            return Err(bad("over 65,535 epochs".into()));
        }
        if e.start != at {
            return Err(bad(format!("starts at byte {}, expected {at}", e.start)));
        }
        if e.len == 0 || e.batches == 0 {
            return Err(bad("an empty range".into()));
        }
        at = e
            .start
            .checked_add(e.len)
            .ok_or_else(|| bad("length overflows".into()))?;
        if e.base_offset < 0 || e.base_offset > e.last_offset {
            return Err(bad(format!(
                "offsets {}..={} are not a range",
                e.base_offset, e.last_offset
            )));
        }
        let epochs = e.epochs.entries();
        if epochs
            .first()
            .is_some_and(|f| f.start_offset > e.base_offset)
            || epochs
                .last()
                .is_some_and(|l| l.start_offset > e.last_offset)
        {
            return Err(bad("epochs outside the range's offsets".into()));
        }
        if let Some(p) = previous {
            let order = (&p.tp.topic, p.tp.partition).cmp(&(&e.tp.topic, e.tp.partition));
            if order == std::cmp::Ordering::Greater
                || (order == std::cmp::Ordering::Equal && p.last_offset >= e.base_offset)
            {
                return Err(bad(format!(
                    "{} at {} is out of order after {} at {}..={}",
                    e.tp, e.base_offset, p.tp, p.base_offset, p.last_offset
                )));
            }
        }
        previous = Some(e);
    }
    Ok(())
}

/// One ranged read of a pack: the bytes `start..end` and the entries it
/// holds (positions in the index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRun {
    /// First byte.
    pub start: u64,
    /// Byte after the last.
    pub end: u64,
    /// The wanted entries inside, by position in the index.
    pub entries: Vec<usize>,
}

/// The ranged reads that fetch every entry `wanted` picks: wanted entries
/// next to each other are one run, and two runs separated by at most
/// `max_gap` bytes of unwanted entries are one (a GET costs more than a few
/// KiB read for nothing). Runs are in object order and do not overlap.
pub fn read_runs(
    index: &PackIndex,
    wanted: impl Fn(&PackEntry) -> bool,
    max_gap: u64,
) -> Vec<ReadRun> {
    let mut runs: Vec<ReadRun> = Vec::new();
    for (i, e) in index.entries.iter().enumerate() {
        if !wanted(e) {
            continue;
        }
        match runs.last_mut() {
            Some(run) if e.start - run.end <= max_gap => {
                run.end = e.start + e.len;
                run.entries.push(i);
            }
            _ => runs.push(ReadRun {
                start: e.start,
                end: e.start + e.len,
                entries: vec![i],
            }),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::checkpoint::EpochEntry;
    use proptest::prelude::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p).expect("valid")
    }

    fn lineage(e: &[(i32, i64)]) -> EpochLineage {
        EpochLineage::from_entries(e.iter().map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        }))
        .expect("increasing")
    }

    fn input<'a>(t: &str, p: i32, base: i64, last: i64, bytes: &'a [u8]) -> PackInput<'a> {
        PackInput {
            tp: tp(t, p),
            topic_id: TopicId::from_bytes([p as u8; 16]),
            bytes,
            base_offset: base,
            last_offset: last,
            batches: 1,
            max_timestamp: 1_700_000_000_000 + base,
            epochs: lineage(&[(3, base)]),
            segment_base_offset: 0,
            completes_segment: false,
            segment_generation: 0,
        }
    }

    #[test]
    fn entries_are_sorted_and_each_range_reads_back_with_its_crc() {
        let (a, b, c) = (vec![1u8; 100], vec![2u8; 7], vec![3u8; 50]);
        let (object, index) = encode(vec![
            input("orders", 1, 10, 19, &a),
            input("events", 0, 0, 4, &b),
            input("orders", 0, 5, 9, &c),
        ])
        .expect("packs");
        let names: Vec<String> = index.entries.iter().map(|e| e.tp.to_string()).collect();
        assert_eq!(names, ["events-0", "orders-0", "orders-1"]);
        assert_eq!(PackIndex::decode(&object).expect("decodes"), index);
        assert_eq!(index.object_len(), object.len() as u64);
        assert_eq!(
            PackIndex::index_end(&object[..HEADER_BYTES]).expect("header"),
            index.data_start
        );
        let got: Vec<&[u8]> = index
            .entries
            .iter()
            .map(|e| PackIndex::slice(e, &object, 0).expect("crc"))
            .collect();
        assert_eq!(got, [&b[..], &c[..], &a[..]]);
        // A ranged read of the last entry alone.
        let last = &index.entries[2];
        let part = &object[last.start as usize..];
        assert_eq!(
            PackIndex::slice(last, part, last.start).expect("crc"),
            &a[..]
        );
    }

    #[test]
    fn a_flipped_data_byte_fails_only_its_range() {
        let (a, b) = (vec![1u8; 10], vec![2u8; 10]);
        let (mut object, index) =
            encode(vec![input("t", 0, 0, 0, &a), input("t", 1, 0, 0, &b)]).expect("packs");
        let at = index.entries[1].start as usize + 3;
        object[at] ^= 0x40;
        assert!(PackIndex::slice(&index.entries[0], &object, 0).is_ok());
        assert!(matches!(
            PackIndex::slice(&index.entries[1], &object, 0),
            Err(PackError::RangeChecksum { .. })
        ));
    }

    /// One row per way an index can be refused.
    #[test]
    fn refused_indexes() {
        let a = vec![9u8; 20];
        let (good, index) = encode(vec![input("t", 0, 0, 9, &a)]).expect("packs");
        let end = index.data_start as usize;
        let reseal = |mut b: Vec<u8>| {
            let n = end - 4;
            let crc = crate::codec::crc32c(&b[..n]);
            b[n..end].copy_from_slice(&crc.to_be_bytes());
            b
        };
        // Offsets of fields in the first (only) entry.
        let entry = HEADER_BYTES;
        let start_at = entry + 20;
        let base_at = entry + 36;
        let flag_at = entry + ENTRY_FIXED_BYTES - 1;
        type Edit = Box<dyn Fn(&mut Vec<u8>)>;
        type Row = (&'static str, Edit, fn(&PackError) -> bool);
        let rows: Vec<Row> = vec![
            ("not a pack", Box::new(|b: &mut Vec<u8>| b[0] = b'X'), |e| {
                matches!(e, PackError::Magic)
            }),
            (
                "a newer version",
                Box::new(|b: &mut Vec<u8>| b[5] = 2),
                |e| matches!(e, PackError::Version(2)),
            ),
            (
                "a flipped index byte",
                Box::new(move |b: &mut Vec<u8>| b[base_at + 7] ^= 1),
                |e| matches!(e, PackError::Checksum { .. }),
            ),
            (
                "cut inside the index",
                Box::new(move |b: &mut Vec<u8>| b.truncate(entry + 10)),
                |e| matches!(e, PackError::Truncated { .. }),
            ),
            (
                "a count the index cannot hold",
                Box::new(|b: &mut Vec<u8>| b[6..10].copy_from_slice(&u32::MAX.to_be_bytes())),
                |e| matches!(e, PackError::Checksum { .. } | PackError::Malformed { .. }),
            ),
        ];
        for (name, edit, expected) in rows {
            let mut b = good.clone();
            edit(&mut b);
            let got = PackIndex::decode(&b);
            assert!(got.as_ref().is_err_and(expected), "{name}: {got:?}");
        }
        // Resealed (a valid CRC over a bad index): the invariants refuse.
        let resealed: Vec<(&str, Edit)> = vec![
            (
                "a start that skips bytes",
                Box::new(move |b: &mut Vec<u8>| b[start_at + 7] += 1),
            ),
            (
                "an offset range backwards",
                Box::new(move |b: &mut Vec<u8>| {
                    b[base_at..base_at + 8].copy_from_slice(&100i64.to_be_bytes())
                }),
            ),
            (
                "a flag that is not 0 or 1",
                Box::new(move |b: &mut Vec<u8>| b[flag_at] = 7),
            ),
        ];
        for (name, edit) in resealed {
            let mut b = good.clone();
            edit(&mut b);
            let got = PackIndex::decode(&reseal(b));
            assert!(
                matches!(got, Err(PackError::Malformed { entry: 0, .. })),
                "{name}: {got:?}"
            );
        }
    }

    #[test]
    fn overlapping_ranges_of_one_partition_are_not_packed() {
        let a = vec![1u8; 4];
        let got = encode(vec![input("t", 0, 0, 9, &a), input("t", 0, 5, 12, &a)]);
        assert!(matches!(got, Err(PackError::Input(_))), "{got:?}");
        let got = encode(vec![input("t", 0, 0, 9, &[])]);
        assert!(matches!(got, Err(PackError::Input(_))), "{got:?}");
    }

    /// One row per subset: the runs a destination mirroring it reads.
    #[test]
    fn read_runs_coalesce_neighbours() {
        let bytes = vec![0u8; 1000];
        let inputs: Vec<PackInput<'_>> = ["a", "b", "c"]
            .iter()
            .flat_map(|t| (0..4).map(move |p| (*t, p)))
            .map(|(t, p)| input(t, p, 0, 0, &bytes))
            .collect();
        let (_, index) = encode(inputs).expect("packs");
        type Row = (&'static str, Box<dyn Fn(&PackEntry) -> bool>, u64, usize);
        let rows: Vec<Row> = vec![
            ("everything", Box::new(|_| true), 0, 1),
            ("one topic", Box::new(|e| e.tp.topic == "b"), 0, 1),
            ("two topics apart", Box::new(|e| e.tp.topic != "b"), 0, 2),
            (
                "two topics apart, gap allowed",
                Box::new(|e| e.tp.topic != "b"),
                4000,
                1,
            ),
            (
                "even partitions",
                Box::new(|e| e.tp.partition % 2 == 0),
                0,
                6,
            ),
            (
                "even partitions, gap allowed",
                Box::new(|e| e.tp.partition % 2 == 0),
                1000,
                1,
            ),
            ("nothing", Box::new(|_| false), 0, 0),
        ];
        for (name, wanted, gap, runs) in rows {
            let got = read_runs(&index, &wanted, gap);
            assert_eq!(got.len(), runs, "{name}");
            let picked: Vec<usize> = got.iter().flat_map(|r| r.entries.clone()).collect();
            let expected: Vec<usize> = (0..index.entries.len())
                .filter(|&i| wanted(&index.entries[i]))
                .collect();
            assert_eq!(picked, expected, "{name}");
        }
    }

    proptest! {
        #[test]
        fn any_bytes_decode_to_an_error_or_an_index(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = PackIndex::decode(&bytes);
            let _ = PackIndex::index_end(&bytes);
        }

        #[test]
        fn packs_round_trip(
            ranges in proptest::collection::vec((0usize..3, 0i32..3, 1usize..64, 1i64..50), 1..20)
        ) {
            let topics = ["alpha", "beta", "gamma"];
            let mut next: std::collections::BTreeMap<(usize, i32), i64> = Default::default();
            let datas: Vec<Vec<u8>> = ranges.iter().enumerate().map(|(i, r)| vec![i as u8; r.2]).collect();
            let mut inputs = Vec::new();
            for (i, &(t, p, _, n)) in ranges.iter().enumerate() {
                let base = *next.get(&(t, p)).unwrap_or(&0);
                next.insert((t, p), base + n);
                inputs.push(input(topics[t], p, base, base + n - 1, &datas[i]));
            }
            let (object, index) = encode(inputs).expect("packs");
            prop_assert_eq!(&PackIndex::decode(&object).expect("decodes"), &index);
            let total: usize = datas.iter().map(Vec::len).sum();
            prop_assert_eq!(object.len() as u64, index.data_start + total as u64);
            for e in &index.entries {
                prop_assert!(PackIndex::slice(e, &object, 0).is_ok());
            }
            // Every header-and-index byte flipped is refused.
            for at in 0..index.data_start as usize {
                let mut b = object.clone();
                b[at] ^= 0x01;
                prop_assert!(PackIndex::decode(&b).is_err(), "byte {} flipped", at);
            }
        }
    }
}
