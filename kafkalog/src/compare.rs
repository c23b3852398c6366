//! Compares two log dirs partition by partition: same offsets, same batch
//! bytes and the same epoch lineage up to the shorter log end.

use std::ops::ControlFlow;
use std::path::Path;

use crate::error::Result;
use crate::reader::PartitionReader;
use crate::topic::TopicPartition;

/// The first difference between two partitions, described for a person.
pub type Difference = String;

/// Compares partition `tp` of the log dirs `a` and `b`. Returns `None` when
/// they hold the same batches (bytes and offsets) and the same epoch lineage
/// up to the shorter log end.
pub fn compare_partition(a: &Path, b: &Path, tp: &TopicPartition) -> Result<Option<Difference>> {
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
            return Ok(Some(format!(
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
            return Ok(Some(format!(
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
    if leo_a != leo_b {
        return Ok(Some(format!(
            "{tp}: log end offsets differ: {} ends at {leo_a}, {} ends at {leo_b} (identical up to {end})",
            a.display(),
            b.display()
        )));
    }
    let ea = ra.epoch_entries()?;
    let eb = rb.epoch_entries()?;
    let clip = |v: &[crate::checkpoint::EpochEntry]| -> Vec<(i32, i64)> {
        v.iter()
            .filter(|e| e.start_offset < end.max(1))
            .map(|e| (e.epoch, e.start_offset.max(start)))
            .collect()
    };
    if clip(&ea) != clip(&eb) {
        return Ok(Some(format!(
            "{tp}: epoch lineages differ: {} has {:?}, {} has {:?}",
            a.display(),
            clip(&ea),
            b.display(),
            clip(&eb)
        )));
    }
    Ok(None)
}
