//! `OffsetIndex::parse`, `TimeIndex::parse` and `TransactionIndex::parse` on
//! arbitrary bytes. The first 8 bytes give the segment base offset and the
//! next 8 a lookup target; the rest is the index file. Nothing may panic;
//! what parses must round-trip through `to_bytes`, and lookups on it must
//! not panic.
#![no_main]

use std::path::Path;

use kafkalog::index::{OffsetIndex, TimeIndex, TransactionIndex};
use libfuzzer_sys::fuzz_target;

fn i64_at(data: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    if let Some(s) = data.get(at..at + 8) {
        b.copy_from_slice(s);
    }
    i64::from_be_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let base = i64_at(data, 0);
    let target = i64_at(data, 8);
    let bytes = data.get(16..).unwrap_or(&[]);
    let path = Path::new("fuzz-input");

    if let Ok(index) = OffsetIndex::parse(bytes, base, path) {
        let _ = index.lookup(target);
        let again =
            OffsetIndex::parse(&index.to_bytes(), base, path).expect("offset index re-parses");
        assert_eq!(index, again);
        let mut t = index.clone();
        t.truncate_to(target);
    }
    if let Ok(index) = TimeIndex::parse(bytes, base, path) {
        let _ = index.lookup(target);
        let again = TimeIndex::parse(&index.to_bytes(), base, path).expect("time index re-parses");
        assert_eq!(index, again);
        let mut t = index.clone();
        t.truncate_to(target);
    }
    if let Ok(index) = TransactionIndex::parse(bytes, path) {
        let _ = index.collect_aborted(base, target);
        let _ = index.check_start_offset(target, path);
        let again = TransactionIndex::parse(&index.to_bytes(), path).expect("txn index re-parses");
        assert_eq!(index, again);
        let mut t = index.clone();
        t.truncate_to(target);
    }
});
