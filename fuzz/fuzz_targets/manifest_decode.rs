//! The decoders of what the bucket hands an applier or a shipper:
//! `PartitionManifest::decode` (with its validation), `Head::decode`, the
//! sealed `Page` and the applier's `MirrorRecord` (sealed too since 1.2),
//! on arbitrary bytes. Nothing may panic; a manifest that decodes is valid,
//! encodes, and decodes again to the same value; so do heads, pages and
//! mirror records; the range lookups on a decoded manifest do not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use manifest::feed::{Head, HeadEntry};
use manifest::mirror_record::MirrorRecord;
use manifest::partition::{Page, PartitionManifest};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = PartitionManifest::decode(data) {
        m.validate().expect("a decoded manifest is valid");
        let bytes = m.encode().expect("a decoded manifest encodes");
        let again = PartitionManifest::decode(&bytes).expect("an encoded manifest decodes");
        assert_eq!(m, again);
        for o in [
            i64::MIN,
            -1,
            0,
            1,
            m.log_start_offset,
            m.shipped_end_offset,
            i64::MAX,
        ] {
            let _ = m.pages_from(o);
            let _ = m.inline_ranges_from(o);
        }
        let _ = m.range_count();
        let _ = m.latest_epoch();
        let _ = m.topic_partition().expect("validated");
        let _ = HeadEntry::for_manifest(&m);
    }
    if let Ok(h) = Head::decode(data) {
        let bytes = h.encode().expect("a decoded head encodes");
        assert_eq!(Head::decode(&bytes).expect("an encoded head decodes"), h);
        let mut merged = h.clone();
        merged.merge(h.partitions.values().cloned());
    }
    if let Ok(p) = Page::decode(data) {
        let bytes = p.encode().expect("a page encodes");
        assert_eq!(Page::decode(&bytes).expect("re-decodes"), p);
    }
    if let Ok(r) = MirrorRecord::decode(data) {
        let bytes = r.encode().expect("encodes");
        assert_eq!(MirrorRecord::decode(&bytes).expect("re-decodes"), r);
    }
});
