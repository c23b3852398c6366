//! Reading a source partition: only local file IO, never the bucket.
//!
//! A [`SourceView`] is what one cycle knows of a partition dir: its
//! segments (with a [`Fingerprint`] each), topic id, leader epoch
//! checkpoint, log start, high watermark and mirror origin. It is read
//! without a lock, as a Kafka broker's dir is live: every function here
//! tolerates files that grow, shrink, appear or vanish between two reads
//! (a vanished segment is skipped; a batch cut short at the end of the last
//! segment is a write in progress, not corruption).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use kafkalog::batch::{BatchError, BatchHeader, HEADER_SIZE, LOG_OVERHEAD};
use kafkalog::checkpoint::{self, EpochEntry};
use kafkalog::index::OffsetIndex;
use kafkalog::segment::{self, INDEX_SUFFIX, LOG_SUFFIX, ScanStop};
use kafkalog::{TopicId, TopicPartition};
use manifest::partition::MirrorOrigin;
use manifest::topic_config::ConfigValue;

/// The log dir root's offset checkpoints.
#[derive(Debug, Clone, Default)]
pub(crate) struct RootCheckpoints {
    /// `replication-offset-checkpoint`, `None` when the file does not exist.
    pub(crate) hw: Option<BTreeMap<TopicPartition, i64>>,
    /// `log-start-offset-checkpoint` (empty when absent).
    pub(crate) log_start: BTreeMap<TopicPartition, i64>,
}

/// Reads the root checkpoints of a log dir.
pub(crate) fn read_root_checkpoints(root: &Path) -> kafkalog::Result<RootCheckpoints> {
    let hw_path = root.join(checkpoint::REPLICATION_OFFSET_CHECKPOINT);
    let hw = if hw_path.exists() {
        Some(checkpoint::read_offset_checkpoint(&hw_path)?)
    } else {
        None
    };
    let log_start =
        checkpoint::read_offset_checkpoint(&root.join(checkpoint::LOG_START_OFFSET_CHECKPOINT))?;
    Ok(RootCheckpoints { hw, log_start })
}

/// What identifies one version of a file: a compacted segment is a new file
/// (new inode) renamed over the old one, usually of another size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i128,
}

impl Fingerprint {
    fn of(meta: &std::fs::Metadata) -> Fingerprint {
        Fingerprint {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }

    /// Same file (device and inode), whatever its size.
    pub(crate) fn same_file(&self, other: &Fingerprint) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// One `.log` file.
#[derive(Debug, Clone)]
pub(crate) struct SegmentInfo {
    /// Base offset, from the file name.
    pub(crate) base: i64,
    /// Path of the `.log` file.
    pub(crate) path: PathBuf,
    /// Its fingerprint when listed.
    pub(crate) fp: Fingerprint,
}

impl SegmentInfo {
    pub(crate) fn size(&self) -> u64 {
        self.fp.size
    }
}

/// A partition dir as one cycle sees it.
#[derive(Debug, Clone)]
pub(crate) struct SourceView {
    /// The partition dir.
    pub(crate) dir: PathBuf,
    /// From `partition.metadata`.
    pub(crate) topic_id: Option<TopicId>,
    /// Segments, oldest first.
    pub(crate) segments: Vec<SegmentInfo>,
    /// `leader-epoch-checkpoint`.
    pub(crate) epochs: Vec<EpochEntry>,
    /// The source's log start offset (on a tiered topic, the first offset
    /// held locally).
    pub(crate) log_start: i64,
    /// On a tiered topic, the log start offset of
    /// `log-start-offset-checkpoint` when it is below the first local
    /// segment: the offsets in between are in remote storage.
    pub(crate) remote_log_start: Option<i64>,
    /// The high watermark to ship up to; `None`: up to the log end.
    pub(crate) hw: Option<i64>,
    /// The applier's mirror record's origin; `Err` when the record exists
    /// but cannot be read (the manifest keeps its previous origin).
    pub(crate) origin: Result<Option<MirrorOrigin>, String>,
    /// The source topic's configs to publish (`crate::topic_configs`), set
    /// by the cycle from the broker's metadata log; `None`: none read (no
    /// metadata log, or not trusted), the manifest keeps what it has.
    pub(crate) topic_configs: Option<BTreeMap<String, ConfigValue>>,
}

impl SourceView {
    pub(crate) fn segment_index(&self, base: i64) -> Option<usize> {
        self.segments.iter().position(|s| s.base == base)
    }

    /// True when a later segment exists (the segment has rolled).
    pub(crate) fn is_rolled(&self, index: usize) -> bool {
        index + 1 < self.segments.len()
    }
}

/// Reads a partition dir; `Ok(None)` when it does not exist.
pub(crate) fn observe(
    root: &Path,
    tp: &TopicPartition,
    cps: &RootCheckpoints,
    ship_beyond_hw: bool,
    tiered: bool,
) -> kafkalog::Result<Option<SourceView>> {
    let dir = root.join(tp.dir_name());
    if !dir.is_dir() {
        return Ok(None);
    }
    let bases = match segment::list_segments(&dir) {
        Ok(b) => b,
        // Deleted between the check and the listing.
        Err(kafkalog::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let mut segments = Vec::with_capacity(bases.len());
    for base in bases {
        let path = segment::file_path(&dir, base, LOG_SUFFIX);
        match std::fs::metadata(&path) {
            Ok(meta) => segments.push(SegmentInfo {
                base,
                path,
                fp: Fingerprint::of(&meta),
            }),
            // Deleted by retention since the listing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(kafkalog::Error::io("stat", &path)(e)),
        }
    }
    let topic_id = checkpoint::read_partition_metadata(&dir.join(checkpoint::PARTITION_METADATA))?
        .map(|m| m.topic_id);
    let epochs =
        checkpoint::read_leader_epoch_checkpoint(&dir.join(checkpoint::LEADER_EPOCH_CHECKPOINT))?;
    let first_base = segments.first().map(|s| s.base);
    let checkpointed = cps.log_start.get(tp).copied();
    let remote_log_start = match (checkpointed, first_base) {
        (Some(c), Some(f)) if tiered && c < f => Some(c),
        _ => None,
    };
    let log_start = match (checkpointed, first_base) {
        (Some(c), Some(f)) => c.max(f),
        (Some(c), None) => c,
        (None, Some(f)) => f,
        (None, None) => 0,
    };
    let hw = match (&cps.hw, ship_beyond_hw) {
        (Some(map), false) => Some(map.get(tp).copied().unwrap_or(0)),
        _ => None,
    };
    let origin = match partdir::record::read(&dir) {
        Ok(r) => Ok(r.map(|r| r.origin())),
        Err(e) => Err(e.to_string()),
    };
    Ok(Some(SourceView {
        dir,
        topic_id,
        segments,
        epochs,
        log_start,
        remote_log_start,
        hw,
        origin,
        topic_configs: None,
    }))
}

/// Where the next unshipped batch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Base offset of the segment.
    pub(crate) segment: i64,
    /// Byte position in the segment.
    pub(crate) position: u64,
    /// The offset the next batch must start at or after (the shipped end).
    pub(crate) next_offset: i64,
}

/// The last batch shipped, to notice the source rewriting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchMark {
    pub(crate) segment: i64,
    pub(crate) position: u64,
    /// Position after the batch.
    pub(crate) end: u64,
    pub(crate) base_offset: i64,
    pub(crate) last_offset: i64,
    pub(crate) epoch: i32,
    pub(crate) crc: u32,
}

impl BatchMark {
    pub(crate) fn of(segment: i64, h: &BatchHeader) -> BatchMark {
        BatchMark {
            segment,
            position: h.position,
            end: h.position + h.size() as u64,
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
            epoch: h.partition_leader_epoch,
            crc: h.crc,
        }
    }
}

/// The fixed fields of the batch header at `position` of `path`, without
/// reading the batch (`None` when the file is shorter, or the bytes there
/// are not a v2 header).
pub(crate) fn read_header_at(path: &Path, position: u64) -> std::io::Result<Option<BatchHeader>> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(position))?;
    let mut buf = [0u8; HEADER_SIZE];
    let mut got = 0;
    while got < buf.len() {
        let n = f.read(&mut buf[got..])?;
        if n == 0 {
            return Ok(None);
        }
        got += n;
    }
    let i64_at = |a: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[a..a + 8]);
        i64::from_be_bytes(b)
    };
    let i32_at = |a: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&buf[a..a + 4]);
        i32::from_be_bytes(b)
    };
    let magic = buf[16] as i8;
    let batch_length = i32_at(8);
    if magic != kafkalog::batch::MAGIC_V2
        || (batch_length as i64) < (HEADER_SIZE - LOG_OVERHEAD) as i64
    {
        return Ok(None);
    }
    Ok(Some(BatchHeader {
        position,
        base_offset: i64_at(0),
        batch_length,
        partition_leader_epoch: i32_at(12),
        magic,
        crc: u32::from_be_bytes([buf[17], buf[18], buf[19], buf[20]]),
        attributes: i16::from_be_bytes([buf[21], buf[22]]),
        last_offset_delta: i32_at(23),
        base_timestamp: i64_at(27),
        max_timestamp: i64_at(35),
        producer_id: i64_at(43),
        producer_epoch: i16::from_be_bytes([buf[51], buf[52]]),
        base_sequence: i32_at(53),
        record_count: i32_at(57),
    }))
}

/// Position to scan from in segment `base` to reach `offset`: the `.index`
/// entry at or below `offset - 1` (an entry holds the last offset of the
/// batch at its position), 0 when the index is missing or unreadable.
fn index_position(dir: &Path, base: i64, offset: i64) -> u64 {
    let path = segment::file_path(dir, base, INDEX_SUFFIX);
    let Ok(Some(bytes)) = kafkalog::fsutil::read_optional(&path) else {
        return 0;
    };
    match OffsetIndex::parse(&bytes, base, &path) {
        Ok(index) => u64::from(index.lookup(offset.saturating_sub(1)).position),
        Err(_) => 0,
    }
}

/// A problem in the source's bytes, with where it is.
#[derive(Debug, Clone)]
pub(crate) struct BadBatch {
    pub(crate) path: PathBuf,
    pub(crate) error: BatchError,
}

impl BadBatch {
    pub(crate) fn offset(&self) -> i64 {
        match &self.error {
            BatchError::InvalidLength { base_offset, .. }
            | BatchError::UnsupportedMagic { base_offset, .. }
            | BatchError::CrcMismatch { base_offset, .. }
            | BatchError::InvalidHeader { base_offset, .. } => *base_offset,
            _ => -1,
        }
    }
}

/// Why a multi-segment walk ended.
#[derive(Debug)]
pub(crate) enum WalkEnd {
    /// The visitor stopped it.
    Stopped,
    /// The end of the log (a torn batch at the end of the last segment
    /// counts as the end: it is being written).
    EndOfLog,
    /// A corrupt batch (or a torn one inside a rolled segment).
    Bad(BadBatch),
}

/// Visits the batches from `start` (segment index, byte position) on,
/// across segments, with CRC checks when `verify`. The visitor gets the
/// segment index and the header.
pub(crate) fn walk(
    view: &SourceView,
    start: (usize, u64),
    verify: bool,
    mut visit: impl FnMut(usize, &BatchHeader, &[u8]) -> ControlFlow<()>,
) -> kafkalog::Result<WalkEnd> {
    let last = view.segments.len().saturating_sub(1);
    for (i, seg) in view.segments.iter().enumerate().skip(start.0) {
        let from = if i == start.0 { start.1 } else { 0 };
        let mut stopped = false;
        let end = match segment::scan(&seg.path, from, verify, |h, bytes| {
            let flow = visit(i, h, bytes);
            stopped = flow.is_break();
            flow
        }) {
            Ok(end) => end,
            // Deleted by retention (or truncation) while walking.
            Err(kafkalog::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(WalkEnd::EndOfLog);
            }
            Err(e) => return Err(e),
        };
        if stopped {
            return Ok(WalkEnd::Stopped);
        }
        match end.stop {
            // Zeros after the last batch of the active segment: a broker
            // with `file.preallocate=true` extends it in advance. That is
            // the end of the log, not corruption (no real batch has base
            // offset 0, length 0 and magic 0 after another batch).
            ScanStop::Corrupt(
                BatchError::UnsupportedMagic {
                    base_offset: 0,
                    magic: 0,
                    ..
                }
                | BatchError::InvalidLength {
                    base_offset: 0,
                    length: 0,
                    ..
                },
            ) if i == last => {}
            ScanStop::Corrupt(error) => {
                return Ok(WalkEnd::Bad(BadBatch {
                    path: seg.path.clone(),
                    error,
                }));
            }
            ScanStop::Torn(error) if i != last => {
                return Ok(WalkEnd::Bad(BadBatch {
                    path: seg.path.clone(),
                    error,
                }));
            }
            _ => {}
        }
    }
    Ok(WalkEnd::EndOfLog)
}

/// Where `offset` is in the source.
#[derive(Debug, Clone)]
pub(crate) enum Located {
    /// The first batch that ends at or after `offset` starts at `cursor`
    /// (or the log ends exactly there: the cursor is at the end of the last
    /// segment). `straddles` when that batch starts below `offset`.
    At {
        cursor: Cursor,
        /// The batch before it, when seen.
        prev: Option<BatchMark>,
        straddles: bool,
    },
    /// The log ends before `offset`: its end offset.
    Behind { leo: i64 },
}

/// Finds `offset` in the source: index lookup, then a scan.
pub(crate) fn locate(
    view: &SourceView,
    offset: i64,
) -> kafkalog::Result<Result<Located, BadBatch>> {
    if view.segments.is_empty() {
        return Ok(Ok(Located::Behind {
            leo: view.log_start,
        }));
    }
    let start = view
        .segments
        .iter()
        .rposition(|s| s.base <= offset)
        .unwrap_or(0);
    let from = if view.segments[start].base <= offset {
        index_position(&view.dir, view.segments[start].base, offset)
    } else {
        0
    };
    match locate_from(view, offset, (start, from))? {
        // A stale index can point inside a batch: scan the segment whole.
        Err(_) if from > 0 => locate_from(view, offset, (start, 0)),
        other => Ok(other),
    }
}

fn locate_from(
    view: &SourceView,
    offset: i64,
    start: (usize, u64),
) -> kafkalog::Result<Result<Located, BadBatch>> {
    let mut prev: Option<BatchMark> = None;
    let mut found: Option<(usize, BatchHeader)> = None;
    let end = walk(view, start, false, |i, h, _| {
        if h.last_offset() < offset {
            prev = Some(BatchMark::of(view.segments[i].base, h));
            return ControlFlow::Continue(());
        }
        found = Some((i, *h));
        ControlFlow::Break(())
    })?;
    if let Some((i, h)) = found {
        let straddles = h.base_offset < offset;
        return Ok(Ok(Located::At {
            cursor: Cursor {
                segment: view.segments[i].base,
                position: h.position,
                next_offset: if straddles { h.base_offset } else { offset },
            },
            prev,
            straddles,
        }));
    }
    match end {
        WalkEnd::Bad(b) => Ok(Err(b)),
        WalkEnd::Stopped | WalkEnd::EndOfLog => {
            let last = &view.segments[view.segments.len() - 1];
            let leo = prev.map_or(last.base, |p| (p.last_offset + 1).max(last.base));
            if leo >= offset {
                // The log ends exactly at `offset` (or an empty last segment
                // starts there): the cursor waits at the end.
                let position = match prev {
                    Some(p) if p.segment == last.base => p.end,
                    _ => 0,
                };
                Ok(Ok(Located::At {
                    cursor: Cursor {
                        segment: last.base,
                        position,
                        next_offset: offset,
                    },
                    prev,
                    straddles: false,
                }))
            } else {
                Ok(Ok(Located::Behind { leo }))
            }
        }
    }
}

/// Why `dir` cannot be read as a log dir (`None`: it can): it is missing,
/// not a directory, or cannot be listed.
pub fn why_log_dir_unreadable(dir: &Path) -> Option<String> {
    match std::fs::metadata(dir) {
        Err(e) => Some(e.to_string()),
        Ok(m) if !m.is_dir() => Some("not a directory".to_string()),
        Ok(_) => std::fs::read_dir(dir).err().map(|e| e.to_string()),
    }
}
