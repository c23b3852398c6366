//! The three text checkpoint parsers on arbitrary UTF-8:
//! `parse_leader_epoch_checkpoint`, `parse_offset_checkpoint`,
//! `parse_partition_metadata`. Nothing may panic, and whatever parses must
//! survive a round trip: format it, parse that, get the same value.
#![no_main]

use std::path::Path;

use kafkalog::checkpoint::{
    format_leader_epoch_checkpoint, format_offset_checkpoint, format_partition_metadata,
    parse_leader_epoch_checkpoint, parse_offset_checkpoint, parse_partition_metadata,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let path = Path::new("fuzz-input");
    if let Ok(entries) = parse_leader_epoch_checkpoint(text, path) {
        let again = parse_leader_epoch_checkpoint(&format_leader_epoch_checkpoint(&entries), path)
            .expect("formatted leader-epoch-checkpoint parses");
        assert_eq!(entries, again);
    }
    if let Ok(offsets) = parse_offset_checkpoint(text, path) {
        let again = parse_offset_checkpoint(&format_offset_checkpoint(&offsets), path)
            .expect("formatted offset checkpoint parses");
        assert_eq!(offsets, again);
    }
    if let Ok(meta) = parse_partition_metadata(text, path) {
        let again = parse_partition_metadata(&format_partition_metadata(&meta), path)
            .expect("formatted partition.metadata parses");
        assert_eq!(meta, again);
    }
});
