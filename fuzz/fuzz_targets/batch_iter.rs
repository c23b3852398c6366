//! `BatchIter::verified` over arbitrary bytes, then `decode_records` (and
//! `decode_control_batch` for control batches) on every batch it yields.
//!
//! Random bytes almost never carry a matching CRC-32C, so the target runs
//! twice: once on the input as it is (the CRC check itself, the torn/corrupt
//! paths), and once on a copy whose batches get their CRC recomputed first,
//! so that the record decoders (varints, headers, the four codecs) see
//! arbitrary record sections. Nothing may panic, and the iterator's
//! invariants (batches inside the buffer, positions increasing, `consumed`
//! matching) must hold.
#![no_main]

use kafkalog::batch::{BatchIter, CRC_OFFSET, compute_crc};
use kafkalog::records;
use libfuzzer_sys::fuzz_target;

fn check(data: &[u8]) {
    let mut it = BatchIter::verified(data, 1000);
    let mut expected_pos = 0usize;
    while let Some(item) = it.next() {
        let Ok((h, bytes)) = item else {
            break;
        };
        assert_eq!(h.position, 1000 + expected_pos as u64);
        assert_eq!(bytes.len(), h.size());
        assert!(expected_pos + bytes.len() <= data.len());
        assert_eq!(&data[expected_pos..expected_pos + bytes.len()], bytes);
        expected_pos += bytes.len();
        assert_eq!(it.consumed(), expected_pos);
        if let Ok(recs) = records::decode_records(&h, bytes) {
            assert_eq!(recs.len(), h.record_count.max(0) as usize);
        }
        if h.is_control() {
            let _ = records::decode_control_batch(&h, bytes);
        }
    }
    assert_eq!(it.consumed(), expected_pos);
}

/// The input with every batch's CRC recomputed (header-only walk).
fn with_fixed_crcs(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let spans: Vec<(usize, usize)> = BatchIter::new(data, 0)
        .map_while(Result::ok)
        .map(|(h, b)| (h.position as usize, b.len()))
        .collect();
    for (pos, len) in spans {
        let crc = compute_crc(&out[pos..pos + len]);
        out[pos + CRC_OFFSET..pos + CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    }
    out
}

fuzz_target!(|data: &[u8]| {
    check(data);
    check(&with_fixed_crcs(data));
});
