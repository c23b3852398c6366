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
            match end.stop {
                ScanStop::Corrupt(e) => {
                    return Err(Error::Batch {
                        path: seg.path.clone(),
                        source: e,
                    });
                }
                ScanStop::Torn(e) if i != last_index => {
                    return Err(Error::Batch {
                        path: seg.path.clone(),
                        source: e,
                    });
                }
                _ => {}
            }
            if stopped {
                break;
            }
        }
        Ok(next)
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
