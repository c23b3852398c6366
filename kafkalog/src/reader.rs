//! Read-only access to a log dir, with no lock and no writes: what `dump`,
//! `verify`, `compare` and the shipper use on a live broker's log dir.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::batch::BatchHeader;
use crate::checkpoint::{
    self, EpochEntry, LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA, PartitionMetadata,
};
use crate::error::{Error, Result};
use crate::segment::{self, INDEX_SUFFIX, LOG_SUFFIX, ScanStop};
use crate::topic::TopicPartition;
use crate::{fsutil, guard};

/// The applier's per-partition mirror record, in a mirror partition's dir
/// (its format belongs to the `manifest` crate; kafkalog only knows that a
/// partition holding it is a mirror).
pub const MIRROR_RECORD_FILE: &str = "segmirror-mirror.json";

/// The partitions in a log dir, sorted. Entries that are not partition
/// dirs (files, Kafka's `-delete`/`-future`/`-stray` dirs, names that do not
/// parse) are skipped.
pub fn list_partitions(root: &Path) -> Result<Vec<TopicPartition>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).map_err(Error::io("list", root))? {
        let entry = entry.map_err(Error::io("list", root))?;
        let is_dir = entry
            .file_type()
            .map_err(Error::io("stat", entry.path()))?
            .is_dir();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !is_dir || crate::topic::is_special_dir_name(&name) {
            continue;
        }
        if let Ok(tp) = TopicPartition::parse_dir_name(&name) {
            out.push(tp);
        }
    }
    out.sort();
    Ok(out)
}

/// One segment of a partition as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFile {
    /// Base offset (from the file name).
    pub base_offset: i64,
    /// Path of the `.log` file.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
}

/// Why a walk of segment `path` stopped, as an error when it is damage: a
/// corrupt batch anywhere, a torn one except at the end of the last
/// segment (a write cut short, which readers stop at, as Kafka's do).
fn damage_before_the_tail(stop: ScanStop, path: &Path, last_segment: bool) -> Result<()> {
    match stop {
        ScanStop::Corrupt(e) => Err(Error::Batch {
            path: path.to_path_buf(),
            source: e,
        }),
        ScanStop::Torn(e) if !last_segment => Err(Error::Batch {
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// A run of whole batches in one segment file: bytes `[position,
/// position + len)` of `file` (see [`PartitionReader::locate_batches`]).
#[derive(Debug, Clone)]
pub struct FileSpan {
    /// The segment's `.log` file, open.
    pub file: std::sync::Arc<std::fs::File>,
    /// Its path, for errors.
    pub path: PathBuf,
    /// Where the first batch starts.
    pub position: u64,
    /// Bytes of the run.
    pub len: u64,
}

/// The batches a fetch returns, by where they lie.
#[derive(Debug, Clone)]
pub struct LocatedBatches {
    /// In offset order.
    pub spans: Vec<FileSpan>,
    /// Their bytes in all.
    pub bytes: u64,
    /// The offset after the last batch (the `from` asked when none).
    pub next_offset: i64,
}

/// A partition dir opened for reading.
#[derive(Debug, Clone)]
pub struct PartitionReader {
    dir: PathBuf,
    tp: TopicPartition,
}

impl PartitionReader {
    /// Opens `<root>/<topic>-<partition>`; it must exist.
    pub fn open(root: &Path, tp: &TopicPartition) -> Result<PartitionReader> {
        let dir = root.join(tp.dir_name());
        if !dir.is_dir() {
            return Err(Error::NoSuchPartition {
                topic_partition: tp.to_string(),
                log_dir: root.to_path_buf(),
            });
        }
        Ok(PartitionReader {
            dir,
            tp: tp.clone(),
        })
    }

    /// The partition.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    /// The partition dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The segments, oldest first.
    pub fn segments(&self) -> Result<Vec<SegmentFile>> {
        segment::list_segments(&self.dir)?
            .into_iter()
            .map(|base| {
                let path = segment::file_path(&self.dir, base, LOG_SUFFIX);
                let size = std::fs::metadata(&path)
                    .map_err(Error::io("stat", &path))?
                    .len();
                Ok(SegmentFile {
                    base_offset: base,
                    path,
                    size,
                })
            })
            .collect()
    }

    /// The leader epoch checkpoint's entries (empty when absent).
    pub fn epoch_entries(&self) -> Result<Vec<EpochEntry>> {
        checkpoint::read_leader_epoch_checkpoint(&self.dir.join(LEADER_EPOCH_CHECKPOINT))
    }

    /// `partition.metadata`, when present.
    pub fn metadata(&self) -> Result<Option<PartitionMetadata>> {
        checkpoint::read_partition_metadata(&self.dir.join(PARTITION_METADATA))
    }

    /// The write guard's reason, when the partition is read-only.
    pub fn read_only_reason(&self) -> Result<Option<String>> {
        guard::read(&self.dir)
    }

    /// Visits the batches that end at or after `from`, in order, across
    /// segments, checking CRCs when `verify`. Stops with an error at the first
    /// corrupt batch; a torn tail at the end of the last segment ends the
    /// walk quietly (it is not yet fully written). Returns the offset after
    /// the last batch visited (or `from` when none).
    pub fn for_each_batch(
        &self,
        from: i64,
        verify: bool,
        mut visit: impl FnMut(&BatchHeader, &[u8]) -> ControlFlow<()>,
    ) -> Result<i64> {
        let segments = self.segments()?;
        let first = segments
            .iter()
            .rposition(|s| s.base_offset <= from)
            .unwrap_or(0);
        let mut next = from;
        let last_index = segments.len().saturating_sub(1);
        for (i, seg) in segments.iter().enumerate().skip(first) {
            let start = if seg.base_offset <= from {
                self.index_position(seg.base_offset, from)
            } else {
                0
            };
            let mut stopped = false;
            let end = segment::scan(&seg.path, start, verify, |h, bytes| {
                if h.last_offset() < from {
                    return ControlFlow::Continue(());
                }
                next = h.next_offset();
                let flow = visit(h, bytes);
                stopped = flow.is_break();
                flow
            })?;
            damage_before_the_tail(end.stop, &seg.path, i == last_index)?;
            if stopped {
                break;
            }
        }
        Ok(next)
    }

    /// Where the whole batches from the one holding `from` on lie in the
    /// segment files, below `upper` and within `max_bytes`, except that the
    /// first batch counts whatever its size when `at_least_one` (KIP-74):
    /// what a fetch sends, located from the batches' headers alone (their
    /// records are not read, nor their CRCs checked, as Kafka's fetch
    /// does not). Adjacent batches of a segment make one span; each span's
    /// file is opened here, so a segment deleted before its bytes are sent
    /// is still read whole. Damage is an error as in [`Self::for_each_batch`].
    pub fn locate_batches(
        &self,
        from: i64,
        upper: i64,
        max_bytes: u64,
        at_least_one: bool,
    ) -> Result<LocatedBatches> {
        let mut out = LocatedBatches {
            spans: Vec::new(),
            bytes: 0,
            next_offset: from,
        };
        if from >= upper {
            return Ok(out);
        }
        let segments = self.segments()?;
        let first = segments
            .iter()
            .rposition(|s| s.base_offset <= from)
            .unwrap_or(0);
        let last_index = segments.len().saturating_sub(1);
        for (i, seg) in segments.iter().enumerate().skip(first) {
            let file = std::fs::File::open(&seg.path).map_err(Error::io("open", &seg.path))?;
            let start = if seg.base_offset <= from {
                self.index_hint(&file, seg.base_offset, from)
            } else {
                0
            };
            let mut span: Option<(u64, u64)> = None;
            let mut stopped = false;
            let walked = segment::walk_headers(&file, &seg.path, start, |h| {
                if h.last_offset() < from {
                    return ControlFlow::Continue(());
                }
                let size = h.size() as u64;
                let first_of_all = out.bytes == 0 && at_least_one;
                if h.base_offset >= upper || (out.bytes + size > max_bytes && !first_of_all) {
                    stopped = true;
                    return ControlFlow::Break(());
                }
                out.bytes += size;
                out.next_offset = h.next_offset();
                span = Some(match span {
                    Some((at, len)) => (at, len + size),
                    None => (h.position, size),
                });
                ControlFlow::Continue(())
            })?;
            damage_before_the_tail(walked.stop, &seg.path, i == last_index)?;
            if let Some((position, len)) = span {
                out.spans.push(FileSpan {
                    file: std::sync::Arc::new(file),
                    path: seg.path.clone(),
                    position,
                    len,
                });
            }
            if stopped {
                break;
            }
        }
        Ok(out)
    }

    /// Where to start walking the open segment `file` (base offset `base`)
    /// for `offset`: the position its offset index gives, found by a binary
    /// search of the index file (a few reads of 8 bytes, not the whole
    /// index), checked against the batch found there; 0 when the index is
    /// missing, unreadable or wrong.
    fn index_hint(&self, file: &std::fs::File, base: i64, offset: i64) -> u64 {
        use std::os::unix::fs::FileExt;
        let index_path = segment::file_path(&self.dir, base, INDEX_SUFFIX);
        let Ok(index) = std::fs::File::open(&index_path) else {
            return 0;
        };
        let Ok(meta) = index.metadata() else {
            return 0;
        };
        let count = meta.len() / crate::index::OFFSET_INDEX_ENTRY_SIZE as u64;
        // The entry holds the last offset of the batch at its position:
        // look up offset - 1 so the batch containing `offset` is not skipped.
        let target = offset.saturating_sub(1).saturating_sub(base);
        let entry = |n: u64| -> Option<(i64, u64)> {
            let mut e = [0u8; crate::index::OFFSET_INDEX_ENTRY_SIZE];
            index
                .read_exact_at(&mut e, n * crate::index::OFFSET_INDEX_ENTRY_SIZE as u64)
                .ok()?;
            // Kafka preallocates the active segment's index with zeros: an
            // all-zero entry past the first is the end of the entries.
            if n > 0 && e == [0u8; 8] {
                return None;
            }
            let relative = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let position = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            Some((i64::from(relative), u64::from(position)))
        };
        // The last entry at or below `target` (entries increase, padding
        // last: the predicate holds on a prefix).
        let (mut lo, mut hi) = (0u64, count);
        let mut found = 0u64;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match entry(mid) {
                Some((relative, position)) if relative <= target => {
                    found = position;
                    lo = mid + 1;
                }
                _ => hi = mid,
            }
        }
        if found == 0 {
            return 0;
        }
        // A damaged index must not make a fetch skip batches: the batch at
        // the position must parse and start at or below `offset`.
        let mut head = [0u8; crate::batch::HEADER_SIZE];
        let Ok(size) = file.metadata().map(|m| m.len()) else {
            return 0;
        };
        if found >= size || file.read_exact_at(&mut head, found).is_err() {
            return 0;
        }
        match crate::batch::parse_header_in(&head, found, size - found) {
            Ok(h) if h.base_offset <= offset => found,
            _ => 0,
        }
    }

    /// Position to start scanning at for `offset` in the segment `base`, from
    /// its offset index (0 when the index is missing or unreadable).
    fn index_position(&self, base: i64, offset: i64) -> u64 {
        let path = segment::file_path(&self.dir, base, INDEX_SUFFIX);
        let Ok(Some(bytes)) = fsutil::read_optional(&path) else {
            return 0;
        };
        match crate::index::OffsetIndex::parse(&bytes, base, &path) {
            // The entry holds the last offset of the batch at its position:
            // look up offset - 1 so the batch containing `offset` is not skipped.
            Ok(index) => u64::from(index.lookup(offset.saturating_sub(1)).position),
            Err(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::os::unix::fs::FileExt;

    use super::*;
    use crate::batch::tests::raw_batch;
    use crate::{LogConfig, LogDir};

    /// A partition of 40 batches (offsets 0.., 1 to 4 records each, 40 to
    /// 400 bytes of payload) over segments of at most 1 KiB, an index entry
    /// every 100 bytes.
    fn partition(root: &Path) -> (TopicPartition, Vec<(i64, i64, Vec<u8>)>) {
        let tp = TopicPartition::new("orders", 0).expect("valid");
        let dir = LogDir::open(root).expect("open");
        let config = LogConfig {
            segment_bytes: 1024,
            index_interval_bytes: 100,
            ..LogConfig::default()
        };
        let mut log = dir
            .open_or_create_partition(&tp, None, config)
            .expect("create");
        let mut batches = Vec::new();
        let mut offset = 0i64;
        for i in 0..40i64 {
            let delta = (i % 4) as i32;
            let bytes = raw_batch(offset, 0, delta, &vec![b'x'; 40 + (i as usize * 37) % 360]);
            log.append_replicated(&bytes).expect("append");
            batches.push((offset, offset + i64::from(delta), bytes));
            offset += i64::from(delta) + 1;
        }
        log.flush().expect("flush");
        (tp, batches)
    }

    /// What a fetch returns by the rule, from the batches themselves.
    fn expected(
        batches: &[(i64, i64, Vec<u8>)],
        from: i64,
        upper: i64,
        max: u64,
        at_least_one: bool,
    ) -> (Vec<u8>, i64) {
        let mut out = Vec::new();
        let mut next = from;
        if from >= upper {
            return (out, next);
        }
        for (base, last, bytes) in batches {
            if *last < from {
                continue;
            }
            let fits = (out.len() + bytes.len()) as u64 <= max;
            if *base >= upper || !(fits || out.is_empty() && at_least_one) {
                break;
            }
            out.extend_from_slice(bytes);
            next = last + 1;
        }
        (out, next)
    }

    fn bytes_of(located: &LocatedBatches) -> Vec<u8> {
        let mut out = Vec::new();
        for s in &located.spans {
            let mut buf = vec![0u8; usize::try_from(s.len).expect("small")];
            s.file.read_exact_at(&mut buf, s.position).expect("read");
            out.extend_from_slice(&buf);
        }
        out
    }

    #[test]
    fn located_batches_are_the_fetch_rules_batches_whatever_the_range_and_limits() {
        let root = tempfile::tempdir().expect("tempdir");
        let (tp, batches) = partition(root.path());
        let reader = PartitionReader::open(root.path(), &tp).expect("open");
        assert!(reader.segments().expect("segments").len() > 5);
        let end = batches.last().expect("batches").1 + 1;
        for from in [0, 1, 2, 5, 17, 30, end - 2, end - 1, end] {
            for upper in [from, from + 1, from + 10, end] {
                for max in [0u64, 60, 500, 1500, 1 << 20] {
                    for at_least_one in [false, true] {
                        let located = reader
                            .locate_batches(from, upper, max, at_least_one)
                            .expect("locate");
                        let (want, next) = expected(&batches, from, upper, max, at_least_one);
                        let case = format!("from {from} upper {upper} max {max} {at_least_one}");
                        assert_eq!(bytes_of(&located), want, "{case}");
                        assert_eq!(located.bytes, want.len() as u64, "{case}");
                        assert_eq!(located.next_offset, next, "{case}");
                        // Adjacent batches of one segment are one span.
                        let files: BTreeSet<_> = located.spans.iter().map(|s| &s.path).collect();
                        assert_eq!(files.len(), located.spans.len(), "{case}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_damaged_or_preallocated_index_never_makes_a_fetch_skip_batches() {
        let root = tempfile::tempdir().expect("tempdir");
        let (tp, batches) = partition(root.path());
        let reader = PartitionReader::open(root.path(), &tp).expect("open");
        let end = batches.last().expect("batches").1 + 1;
        let indexes: Vec<PathBuf> = reader
            .segments()
            .expect("segments")
            .iter()
            .map(|s| segment::file_path(reader.dir(), s.base_offset, INDEX_SUFFIX))
            .collect();
        type Damage = fn(&[u8]) -> Vec<u8>;
        let damages: [(&str, Damage); 4] = [
            // Kafka's active segment: entries, then zeros to the size.
            ("zero padding", |b| [b, &[0u8; 800][..]].concat()),
            // Positions past the batches they name (each entry + 37).
            ("positions moved", |b| {
                b.chunks(8)
                    .flat_map(|e| {
                        let p = u32::from_be_bytes([e[4], e[5], e[6], e[7]]) + 37;
                        [&e[..4], &p.to_be_bytes()[..]].concat()
                    })
                    .collect()
            }),
            ("garbage", |b| vec![0xA5; b.len() + 3]),
            ("missing", |_| Vec::new()),
        ];
        for (what, damage) in damages {
            for path in &indexes {
                let bytes = std::fs::read(path).unwrap_or_default();
                std::fs::write(path, damage(&bytes)).expect("write");
            }
            for from in 0..end {
                let located = reader.locate_batches(from, end, 1 << 20, true).expect(what);
                let (want, _) = expected(&batches, from, end, 1 << 20, true);
                assert_eq!(bytes_of(&located), want, "{what}, from {from}");
            }
        }
    }

    #[test]
    fn a_torn_tail_ends_the_located_batches_and_damage_before_it_is_an_error() {
        let root = tempfile::tempdir().expect("tempdir");
        let (tp, batches) = partition(root.path());
        let reader = PartitionReader::open(root.path(), &tp).expect("open");
        let segments = reader.segments().expect("segments");
        let last = segments.last().expect("segments");
        let end = batches.last().expect("batches").1 + 1;
        // Half a batch appended to the active segment: not returned.
        let torn = raw_batch(end, 0, 0, &[b'y'; 100]);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&last.path)
            .expect("open");
        std::io::Write::write_all(&mut f, &torn[..50]).expect("write");
        let located = reader
            .locate_batches(0, end + 5, 1 << 20, true)
            .expect("torn tail");
        assert_eq!(
            bytes_of(&located),
            expected(&batches, 0, end, 1 << 20, true).0
        );
        // A bad magic in the first segment's second batch: an error.
        let first = &segments[0];
        let second_at = batches[0].2.len() as u64;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&first.path)
            .expect("open");
        file.write_all_at(&[9], second_at + crate::batch::MAGIC_OFFSET as u64)
            .expect("write");
        let err = reader
            .locate_batches(0, end, 1 << 20, true)
            .expect_err("damage");
        assert!(err.to_string().contains("magic"), "{err}");
    }
}
