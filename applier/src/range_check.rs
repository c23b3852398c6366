//! Checking a data object against its manifest range while its bytes
//! arrive, so that it can be appended as it streams in.
//!
//! An object is a run of whole record batches. [`RangeCheck`] is given the
//! object's bytes from its start in buffers of any length and says how
//! long the prefix of whole batches is; every batch header in that prefix
//! has been checked against the range (pure: no IO):
//! - the first batch starts at the range's base offset;
//! - base offsets strictly increase and no batch ends past the range's
//!   last offset;
//! - each batch's leader epoch is the one the range's epochs assign to its
//!   base offset;
//! - no batch claims to be longer than what is left of the object.
//!
//! [`RangeCheck::finish`] then checks what only the whole object can tell:
//! the batch count and the last offset (the object's size and CRC-32C are
//! checked by its reader). Base offsets and leader epochs lie outside a
//! batch's own CRC, so these checks catch what the batch CRC cannot; the
//! batch CRC itself is checked by the log before the batch is written.
//!
//! Invariant: the same bytes give the same verdict and the same batches
//! whatever the buffer boundaries (property-tested below).

use kafkalog::batch::{BatchError, LOG_OVERHEAD, parse_header};
use manifest::partition::ShippedRange;

/// The state of one object's check: how far it got.
#[derive(Debug, Clone)]
pub struct RangeCheck {
    base_offset: i64,
    last_offset: i64,
    batches: u32,
    object_bytes: u64,
    epochs: ShippedRange,
    /// Bytes of the object accepted so far (whole batches).
    accepted: u64,
    next: i64,
    count: u32,
    last: Option<i64>,
}

/// The whole batches at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WholeBatches {
    /// Length of the prefix made of whole, checked batches.
    pub len: usize,
    /// Offset after the last of them (the base offset of the next batch
    /// to come, if any).
    pub next_offset: i64,
}

impl RangeCheck {
    /// A check of the object of `range`, from its first byte.
    pub fn new(range: &ShippedRange) -> RangeCheck {
        RangeCheck {
            base_offset: range.base_offset,
            last_offset: range.last_offset,
            batches: range.batches,
            object_bytes: range.bytes,
            epochs: range.clone(),
            accepted: 0,
            next: range.base_offset,
            count: 0,
            last: None,
        }
    }

    /// Bytes of the object accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Checks the whole batches at the start of `buf` (which starts where
    /// the previously accepted bytes ended) and accepts them. A batch cut
    /// by the end of `buf` is left for the next call, with more bytes.
    pub fn whole_batches(&mut self, buf: &[u8]) -> Result<WholeBatches, String> {
        let mut pos = 0usize;
        while buf.len() - pos >= LOG_OVERHEAD {
            let rest = &buf[pos..];
            let at = self.accepted;
            let h = match parse_header(rest, at) {
                Ok(h) => h,
                Err(BatchError::Truncated { needed, .. }) => {
                    let left = self.object_bytes.saturating_sub(at);
                    if needed > left {
                        return Err(format!(
                            "batch at byte {at} claims {needed} bytes where {left} are left of the object"
                        ));
                    }
                    break;
                }
                Err(e) => return Err(format!("batch header: {e}")),
            };
            self.check_header(h.base_offset, h.last_offset(), h.partition_leader_epoch, at)?;
            pos += h.size();
            self.accepted += h.size() as u64;
        }
        Ok(WholeBatches {
            len: pos,
            next_offset: self.next,
        })
    }

    fn check_header(&mut self, base: i64, last: i64, epoch: i32, at: u64) -> Result<(), String> {
        if self.count == 0 && base != self.base_offset {
            return Err(format!(
                "first batch at offset {base} where the manifest's range starts at {}",
                self.base_offset
            ));
        }
        if base < self.next || last > self.last_offset {
            return Err(format!(
                "batch at offset {base} (byte {at}) is out of order or outside the range {}..={}",
                self.base_offset, self.last_offset
            ));
        }
        if epoch >= 0 && !self.epochs.epochs.is_empty() {
            let assigned = self.epochs.epoch_at(base);
            if assigned != Some(epoch) {
                return Err(format!(
                    "batch at offset {base} has leader epoch {epoch} where the manifest's range says {}",
                    assigned.map_or("none".to_string(), |e| e.to_string())
                ));
            }
        }
        self.next = last.saturating_add(1);
        self.last = Some(last);
        self.count += 1;
        Ok(())
    }

    /// Checks the end of the object, once all of it was accepted: the
    /// batch count and the last offset the manifest names.
    pub fn finish(&self) -> Result<(), String> {
        if self.accepted != self.object_bytes {
            return Err(format!(
                "{} bytes of whole batches where the manifest says {}",
                self.accepted, self.object_bytes
            ));
        }
        if self.last != Some(self.last_offset) || self.count != self.batches {
            return Err(format!(
                "{} batches ending at offset {} where the manifest says {} ending at {}",
                self.count,
                self.last.map_or("-".to_string(), |o| o.to_string()),
                self.batches,
                self.last_offset
            ));
        }
        Ok(())
    }
}

/// Checks a whole object's batch headers against its range in one go.
pub fn check_whole(range: &ShippedRange, bytes: &[u8]) -> Result<(), String> {
    let mut check = RangeCheck::new(range);
    let whole = check.whole_batches(bytes)?;
    if whole.len != bytes.len() {
        return Err(format!(
            "the object ends inside a batch at byte {}",
            whole.len
        ));
    }
    check.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
    use kafkalog::epoch::EpochLineage;
    use proptest::prelude::*;

    fn object(batches: &[(i64, i32, usize)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(base, epoch, records) in batches {
            let spec = BatchSpec::new(base, epoch);
            let records: Vec<RecordInput> = (0..records)
                .map(|i| RecordInput {
                    timestamp: 1_700_000_000_000 + i as i64,
                    key: None,
                    value: Some(vec![b'v'; 40]),
                    headers: Vec::new(),
                })
                .collect();
            out.extend_from_slice(&build_batch(&spec, &records).expect("batch"));
        }
        out
    }

    fn range(
        bytes: &[u8],
        base: i64,
        last: i64,
        batches: u32,
        epochs: &[(i32, i64)],
    ) -> ShippedRange {
        let mut lineage = EpochLineage::new();
        for &(epoch, start) in epochs {
            lineage.assign_if_newer(epoch, start);
        }
        ShippedRange {
            key: "k".into(),
            base_offset: base,
            last_offset: last,
            bytes: bytes.len() as u64,
            batches,
            crc32c: 0,
            max_timestamp: 0,
            epochs: lineage,
            segment_base_offset: 0,
            completes_segment: false,
            segment_generation: 0,
        }
    }

    #[test]
    fn a_whole_object_passes_and_every_prefix_stops_at_a_batch_boundary() {
        let obj = object(&[(10, 3, 2), (12, 3, 3), (15, 4, 1)]);
        let r = range(&obj, 10, 15, 3, &[(3, 10), (4, 15)]);
        check_whole(&r, &obj).expect("whole");
        let first = kafkalog::batch::parse_header(&obj, 0).expect("h").size();
        let mut c = RangeCheck::new(&r);
        let w = c.whole_batches(&obj[..first + 5]).expect("prefix");
        assert_eq!(
            w,
            WholeBatches {
                len: first,
                next_offset: 12
            }
        );
        assert!(c.finish().is_err(), "two batches missing");
    }

    #[test]
    fn wrong_offsets_epochs_counts_and_lengths_are_named() {
        let obj = object(&[(10, 3, 2), (12, 3, 3)]);
        let cases = [
            (range(&obj, 11, 14, 2, &[]), "first batch at offset 10"),
            (range(&obj, 10, 13, 2, &[]), "outside the range"),
            (
                range(&obj, 10, 14, 2, &[(3, 10), (5, 12)]),
                "leader epoch 3",
            ),
            (range(&obj, 10, 14, 3, &[]), "2 batches ending at offset 14"),
        ];
        for (r, want) in cases {
            let e = check_whole(&r, &obj).expect_err(want);
            assert!(e.contains(want), "{e} lacks {want}");
        }
        let mut long = obj.clone();
        long[8..12].copy_from_slice(&(1_000_000i32).to_be_bytes());
        let e = check_whole(&range(&obj, 10, 14, 2, &[]), &long).expect_err("length");
        assert!(e.contains("claims"), "{e}");
    }

    proptest! {
        #[test]
        fn buffer_boundaries_do_not_change_the_verdict(
            sizes in proptest::collection::vec(1usize..6, 1..8),
            cuts in proptest::collection::vec(0usize..4000, 0..12),
            flip in proptest::option::of(0usize..4000),
        ) {
            let mut specs = Vec::new();
            let mut base = 100i64;
            for n in &sizes {
                specs.push((base, 7, *n));
                base += *n as i64;
            }
            let mut obj = object(&specs);
            let r = range(&obj, 100, base - 1, sizes.len() as u32, &[(7, 100)]);
            if let Some(f) = flip {
                let f = f % obj.len();
                obj[f] ^= 0x40;
            }
            let whole = check_whole(&r, &obj);
            // Feed the same bytes cut at arbitrary points.
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (obj.len() + 1)).collect();
            cuts.push(obj.len());
            cuts.sort_unstable();
            let mut c = RangeCheck::new(&r);
            let mut start = 0usize;
            let mut verdict = Ok(());
            for cut in cuts {
                if cut < start { continue; }
                match c.whole_batches(&obj[start..cut]) {
                    Ok(w) => start += w.len,
                    Err(e) => { verdict = Err(e); break; }
                }
            }
            if verdict.is_ok() {
                if start != obj.len() {
                    verdict = Err("ends inside a batch".into());
                } else {
                    verdict = c.finish();
                }
            }
            prop_assert_eq!(whole.is_ok(), verdict.is_ok(), "{:?} vs {:?}", whole, verdict);
        }
    }
}
