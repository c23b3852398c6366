//! Compares two log dirs partition by partition: same offsets, same batch
//! bytes and the same epoch lineage up to the shorter log end.

use std::ops::ControlFlow;
use std::path::Path;

use crate::error::Result;
use crate::reader::PartitionReader;
use crate::topic::TopicPartition;

/// The first difference between two partitions, described for a person.
pub type Difference = String;

/// What [`compare_partition`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    /// Same batches, same log end, same lineage.
    Identical,
    /// One log is a prefix of the other (same batches and lineage up to the
    /// shorter log end), and the shorter one is a mirror, which may lag.
    IdenticalUpTo {
        /// The shorter log end.
        offset: i64,
        /// Description of the longer side.
        longer: String,
    },
    /// They differ; the first difference.
    Different(Difference),
}

/// True when the partition dir holds the applier's mirror record (a mirror
/// lags its source by design).
fn is_mirror(reader: &PartitionReader) -> bool {
    let dir = reader.dir();
    if dir.join(crate::reader::MIRROR_RECORD_FILE).exists() {
        return true;
    }
    // Or its log dir's journal of mirror records holds one.
    let (Some(root), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str())) else {
        return false;
    };
    crate::fsutil::read_bounded(&root.join(crate::journal::FILE), 256 << 20)
        .ok()
        .and_then(|bytes| {
            crate::journal::live(&bytes)
                .ok()
                .map(|l| l.contains_key(name))
        })
        .unwrap_or(false)
}

/// Compares partition `tp` of the log dirs `a` and `b`: the same batches
/// (offsets and bytes) and the same epoch lineage up to the shorter log end.
/// Different log ends are a difference unless the shorter side is a mirror
/// partition, which lags its source by design.
pub fn compare_partition(a: &Path, b: &Path, tp: &TopicPartition) -> Result<Comparison> {
    let ra = PartitionReader::open(a, tp)?;
    let rb = PartitionReader::open(b, tp)?;
    let mut batches_a = Vec::new();
    ra.for_each_batch(0, true, |h, bytes| {
        batches_a.push((
            h.base_offset,
            h.last_offset(),
            h.partition_leader_epoch,
            crc32c::crc32c(bytes),
            bytes.len(),
            h.position,
        ));
        ControlFlow::Continue(())
    })?;
    let mut batches_b = Vec::new();
    rb.for_each_batch(0, true, |h, bytes| {
        batches_b.push((
            h.base_offset,
            h.last_offset(),
            h.partition_leader_epoch,
            crc32c::crc32c(bytes),
            bytes.len(),
            h.position,
        ));
        ControlFlow::Continue(())
    })?;
    // Align on the later of the two log starts.
    let start = match (batches_a.first(), batches_b.first()) {
        (Some(x), Some(y)) => x.0.max(y.0),
        _ => 0,
    };
    let ia = batches_a.iter().filter(|x| x.1 >= start);
    let ib = batches_b.iter().filter(|x| x.1 >= start);
    let mut end = start;
    for (x, y) in ia.zip(ib) {
        if x.0 != y.0 || x.1 != y.1 {
            return Ok(Comparison::Different(format!(
                "{tp}: batch offsets differ: {} has [{}, {}] (byte {}), {} has [{}, {}] (byte {})",
                a.display(),
                x.0,
                x.1,
                x.5,
                b.display(),
                y.0,
                y.1,
                y.5
            )));
        }
        if x.3 != y.3 || x.4 != y.4 || x.2 != y.2 {
            return Ok(Comparison::Different(format!(
                "{tp}: batch at offset {} differs: {} has {} bytes, epoch {} (byte {}), {} has {} bytes, epoch {} (byte {})",
                x.0,
                a.display(),
                x.4,
                x.2,
                x.5,
                b.display(),
                y.4,
                y.2,
                y.5
            )));
        }
        end = x.1 + 1;
    }
    let leo_a = batches_a.last().map(|x| x.1 + 1).unwrap_or(0);
    let leo_b = batches_b.last().map(|x| x.1 + 1).unwrap_or(0);
    let lagging_mirror = (leo_a < leo_b && is_mirror(&ra)) || (leo_b < leo_a && is_mirror(&rb));
    if leo_a != leo_b && !lagging_mirror {
        return Ok(Comparison::Different(format!(
            "{tp}: log end offsets differ: {} ends at {leo_a}, {} ends at {leo_b} (identical up to {end})",
            a.display(),
            b.display()
        )));
    }
    // Lineages are compared below `end`, the shorter log end: an entry at
    // or past it (an epoch bump, or epochs the mirror has not reached yet)
    // is not a difference. An empty mirror (`end` 0) has nothing to compare.
    let ea = ra.epoch_entries()?;
    let eb = rb.epoch_entries()?;
    let clip = |v: &[crate::checkpoint::EpochEntry]| -> Vec<(i32, i64)> {
        v.iter()
            .filter(|e| e.start_offset < end)
            .map(|e| (e.epoch, e.start_offset.max(start)))
            .collect()
    };
    if clip(&ea) != clip(&eb) {
        return Ok(Comparison::Different(format!(
            "{tp}: epoch lineages differ: {} has {:?}, {} has {:?}",
            a.display(),
            clip(&ea),
            b.display(),
            clip(&eb)
        )));
    }
    if leo_a != leo_b {
        let (longer, longer_end) = if leo_a > leo_b {
            (a, leo_a)
        } else {
            (b, leo_b)
        };
        return Ok(Comparison::IdenticalUpTo {
            offset: leo_a.min(leo_b),
            longer: format!("{} continues to {longer_end}", longer.display()),
        });
    }
    Ok(Comparison::Identical)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::tests::raw_batch;
    use crate::checkpoint::LEADER_EPOCH_CHECKPOINT;
    use crate::reader::MIRROR_RECORD_FILE;
    use crate::{LogConfig, LogDir};

    fn tp() -> TopicPartition {
        TopicPartition::new("orders", 0).expect("valid")
    }

    /// A log dir at `root/name` holding `tp` with `(base, epoch)` batches of
    /// two records each; marked as a mirror when `mirror`.
    fn log_dir(root: &Path, name: &str, spec: &[(i64, i32)], mirror: bool) -> std::path::PathBuf {
        let path = root.join(name);
        let dir = LogDir::open(&path).expect("open");
        let mut log = dir
            .open_or_create_partition(&tp(), None, LogConfig::default())
            .expect("create");
        if !spec.is_empty() {
            let bytes: Vec<u8> = spec
                .iter()
                .flat_map(|&(base, epoch)| raw_batch(base, epoch, 1, b"x"))
                .collect();
            log.append_replicated(&bytes).expect("append");
        }
        if mirror {
            std::fs::write(log.dir().join(MIRROR_RECORD_FILE), b"{}").expect("mirror record");
        }
        log.close().expect("close");
        path
    }

    #[test]
    fn an_empty_mirror_is_a_prefix_of_its_source() {
        let root = tempfile::tempdir().expect("tempdir");
        let source = log_dir(root.path(), "source", &[(0, 1), (2, 1), (4, 3)], false);
        let mirror = log_dir(root.path(), "mirror", &[], true);
        for (a, b) in [(&source, &mirror), (&mirror, &source)] {
            match compare_partition(a, b, &tp()).expect("compare") {
                Comparison::IdenticalUpTo { offset, longer } => {
                    assert_eq!(offset, 0);
                    assert!(longer.ends_with("continues to 6"), "{longer}");
                }
                other => panic!("expected a prefix, got {other:?}"),
            }
        }
        // An empty partition that is not a mirror is still a difference.
        let plain = log_dir(root.path(), "plain", &[], false);
        match compare_partition(&source, &plain, &tp()).expect("compare") {
            Comparison::Different(d) => assert!(d.contains("log end offsets differ"), "{d}"),
            other => panic!("expected a difference, got {other:?}"),
        }
        // Two empty logs are identical.
        assert_eq!(
            compare_partition(&mirror, &plain, &tp()).expect("compare"),
            Comparison::Identical
        );
    }

    #[test]
    fn a_lagging_mirror_is_a_prefix_unless_its_lineage_differs() {
        let root = tempfile::tempdir().expect("tempdir");
        let source = log_dir(root.path(), "source", &[(0, 1), (2, 1), (4, 3)], false);
        let mirror = log_dir(root.path(), "mirror", &[(0, 1), (2, 1)], true);
        // The source's epoch 3 starts at the mirror's end: not compared.
        assert_eq!(
            compare_partition(&source, &mirror, &tp()).expect("compare"),
            Comparison::IdenticalUpTo {
                offset: 4,
                longer: format!("{} continues to 6", source.display()),
            }
        );
        // A lineage that differs below the mirror's end is a difference.
        let checkpoint = mirror.join(tp().dir_name()).join(LEADER_EPOCH_CHECKPOINT);
        std::fs::write(&checkpoint, "0\n2\n0 0\n1 2\n").expect("rewrite checkpoint");
        match compare_partition(&source, &mirror, &tp()).expect("compare") {
            Comparison::Different(d) => assert!(d.contains("epoch lineages differ"), "{d}"),
            other => panic!("expected a difference, got {other:?}"),
        }
    }
}
