//! `manifest::pack::PackIndex::decode` on arbitrary bytes (a cycle pack
//! read from the bucket). Nothing may panic or allocate beyond the input;
//! a decoded index's entries are contiguous from its data start, and
//! slicing each entry out of the same bytes and planning reads of any
//! subset do not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use manifest::pack::{PackIndex, read_runs};

fuzz_target!(|data: &[u8]| {
    let _ = PackIndex::index_end(data);
    if let Ok(index) = PackIndex::decode(data) {
        let mut at = index.data_start;
        for e in &index.entries {
            assert_eq!(e.start, at, "entries are contiguous");
            at += e.len;
            let _ = PackIndex::slice(e, data, 0);
        }
        assert_eq!(index.object_len(), at);
        for gap in [0, 1 << 10, u64::MAX / 2] {
            let runs = read_runs(&index, |e| e.tp.partition % 2 == 0, gap);
            for w in runs.windows(2) {
                assert!(w[0].end <= w[1].start, "runs do not overlap");
            }
        }
    }
});
