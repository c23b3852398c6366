//! Checking a data object against its manifest range: the rules every
//! reader of the bucket applies before it trusts an object's bytes (the
//! applier while it mirrors, repairs and scrubs; `backfill` while it
//! exports and restores). Pure: no IO.
//!
//! An object is a run of whole record batches. [`RangeCheck`] is given the
//! object's bytes from its start in buffers of any length and says how
//! long the prefix of whole batches is; every batch header in that prefix
//! has been checked against the range:
//! - the first batch starts at the range's base offset;
//! - base offsets strictly increase and no batch ends past the range's
//!   last offset;
//! - each batch's leader epoch is the one the range's epochs assign to its
//!   base offset;
//! - no batch claims to be longer than what is left of the object.
//!
//! [`RangeCheck::finish`] then checks what only the whole object can tell:
//! the batch count and the last offset. [`verify_object`] checks a whole
//! object at hand: its size and CRC-32C against the range (naming the
//! first batch at fault when the CRC differs), then its batch headers as
//! above; [`check_size_and_crc`] is the size and CRC part alone, for an
//! object whose bytes were streamed. Base offsets and leader epochs lie
//! outside a batch's own CRC, so these checks catch what the batch CRC
//! cannot; the batch CRC itself is checked by the log before the batch is
//! written.
//!
//! Every failure is an [`ObjectCorrupt`] naming the object's key and what
//! was expected and found; callers add the partition.
//!
//! Invariant: the same bytes give the same verdict and the same batches
//! whatever the buffer boundaries (property-tested below).

use crate::partition::ShippedRange;
use kafkalog::batch::{BatchError, LOG_OVERHEAD, parse_header};

/// A shipped object that does not match its manifest range (size,
/// CRC-32C, or a batch header: offsets, leader epoch, count).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CRC mismatch in object {key}: {detail}")]
pub struct ObjectCorrupt {
    /// The object key.
    pub key: String,
    /// Expected and found.
    pub detail: String,
}

impl ObjectCorrupt {
    /// The object of `range` is corrupt: `detail` says how.
    pub fn of(range: &ShippedRange, detail: String) -> ObjectCorrupt {
        ObjectCorrupt {
            key: range.key.clone(),
            detail,
        }
    }
}

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

/// Checks an object's size and CRC-32C against its manifest range, then
/// its batch headers ([`check_whole`]).
pub fn verify_object(r: &ShippedRange, bytes: &[u8]) -> Result<(), ObjectCorrupt> {
    let crc = kafkalog::batch::crc32c(bytes);
    verify_object_crc(r, bytes, bytes.len() as u64, crc)
}

/// [`verify_object`] with the length and CRC-32C computed as the object
/// was downloaded.
pub fn verify_object_crc(
    r: &ShippedRange,
    bytes: &[u8],
    len: u64,
    crc: u32,
) -> Result<(), ObjectCorrupt> {
    check_size_and_crc(r, len, crc, Some(bytes))?;
    check_whole(r, bytes).map_err(|detail| ObjectCorrupt::of(r, detail))
}

/// An object's length and CRC-32C against its manifest range; a CRC
/// mismatch names the corrupt batch when the object is at hand (`whole`),
/// else says that what it appended was removed (a streamed range).
pub fn check_size_and_crc(
    r: &ShippedRange,
    len: u64,
    crc: u32,
    whole: Option<&[u8]>,
) -> Result<(), ObjectCorrupt> {
    if len != r.bytes {
        return Err(ObjectCorrupt::of(
            r,
            format!("size {len} where the manifest says {}", r.bytes),
        ));
    }
    if crc != r.crc32c {
        let where_ = whole.map_or_else(
            || "the range's batches appended so far were removed".to_string(),
            |bytes| locate_corruption(r, bytes),
        );
        return Err(ObjectCorrupt::of(
            r,
            format!(
                "CRC-32C {crc:#010x} where the manifest says {:#010x}; {where_}",
                r.crc32c
            ),
        ));
    }
    Ok(())
}

/// Names the first batch of an object whose CRC-32C mismatched that does
/// not verify on its own (by the offset it should start at, since its own
/// header may be the corrupt part), so that an operator knows where to look.
/// When every batch's own CRC holds, the damage is in what that CRC does not
/// cover (base offset, leader epoch): the first batch whose base offset does
/// not follow its predecessor, or whose epoch is not the one the range
/// assigns, is named instead.
fn locate_corruption(r: &ShippedRange, bytes: &[u8]) -> String {
    let mut expected = r.base_offset;
    let mut suspect: Option<String> = None;
    for item in kafkalog::batch::BatchIter::verified(bytes, 0) {
        match item {
            Ok((h, _)) => {
                if suspect.is_none() {
                    let assigned = r.epoch_at(expected);
                    if h.base_offset != expected {
                        // A gap is legitimate in a compacted range: only a
                        // hint, used when nothing else is found.
                        suspect = Some(format!(
                            "first batch that does not follow at offset {expected} (byte {}): its header says base offset {}",
                            h.position, h.base_offset
                        ));
                    } else if assigned.is_some_and(|a| a != h.partition_leader_epoch) {
                        suspect = Some(format!(
                            "first batch with an unexpected leader epoch at offset {expected} (byte {}): {} where the range says {}",
                            h.position,
                            h.partition_leader_epoch,
                            assigned.unwrap_or_default()
                        ));
                    }
                }
                expected = h.last_offset().saturating_add(1);
            }
            Err(e) => {
                return format!("first bad batch at offset {expected}: {e}");
            }
        }
    }
    match suspect {
        Some(s) => format!("every batch's own CRC holds; {s}"),
        None => "every batch verifies on its own: the object differs from what was shipped (bytes replaced whole, or the manifest's CRC is wrong)".to_string(),
    }
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
            object_offset: None,
            compacted: false,
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
    fn a_corrupt_object_names_its_key_and_what_differs() {
        let obj = object(&[(10, 3, 2), (12, 3, 3)]);
        let mut r = range(&obj, 10, 14, 2, &[(3, 10)]);
        r.crc32c = kafkalog::batch::crc32c(&obj);
        verify_object(&r, &obj).expect("as shipped");
        let mut flipped = obj.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        let first = kafkalog::batch::parse_header(&obj, 0).expect("h").size();
        // (bytes, what the detail says)
        let cases = [
            (&obj[..first], "size"),
            (&flipped[..], "first bad batch at offset 12"),
        ];
        for (bytes, want) in cases {
            let e = verify_object(&r, bytes).expect_err(want);
            assert_eq!(e.key, "k");
            assert!(e.detail.contains(want), "{e} lacks {want}");
            assert!(
                e.to_string().starts_with("CRC mismatch in object k: "),
                "{e}"
            );
        }
        let e = check_size_and_crc(&r, obj.len() as u64, 0, None).expect_err("streamed");
        assert!(e.detail.ends_with("appended so far were removed"), "{e}");
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
