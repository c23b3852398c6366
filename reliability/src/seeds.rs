//! Valid inputs for the decoders and config loaders: the seeds of the
//! cargo-fuzz corpora (`fuzz/examples/seed_corpus_segmirror.rs`) and the
//! starting points the proptest smoke tests mutate.

use kafkalog::checkpoint::EpochEntry;
use kafkalog::epoch::EpochLineage;
use kafkalog::{TopicId, TopicPartition};
use manifest::feed::{Head, HeadEntry};
use manifest::layout::{ClusterLayout, PartitionKey, UploadId};
use manifest::partition::{MirrorOrigin, Page, PartitionManifest, ShippedRange};

fn tp(topic: &str, p: i32) -> Option<TopicPartition> {
    TopicPartition::new(topic, p).ok()
}

/// A manifest with `n` ranges (sealed into pages past 512), two epochs,
/// and optionally a mirror origin; plus the pages it sealed.
pub fn manifest_with(n: usize, origin: bool) -> Option<(PartitionManifest, Vec<Page>)> {
    let id = TopicId::from_bytes([7; 16]);
    let tp = tp("orders", 3)?;
    let layout = ClusterLayout::new("prefix", "src-cluster").ok()?;
    let page_id = UploadId::parse("18bcfe5683b0123456789abcdef").ok()?;
    let pk = PartitionKey {
        tp: tp.clone(),
        topic_id: id,
    };
    let mut m = PartitionManifest::new("src-cluster", &tp, id);
    m.version = 7;
    let mut pages = Vec::new();
    for i in 0..n as i64 {
        let (base, last) = (i * 10, i * 10 + 9);
        let epoch = if i < n as i64 / 2 { 1 } else { 4 };
        let key = layout
            .data_key(&pk, base, last, epoch, "1a2b3c4d5e6f7a8b9c0d1e2f3a4")
            .ok()?;
        let range = ShippedRange {
            key,
            base_offset: base,
            last_offset: last,
            bytes: 1234 + i as u64,
            batches: 2,
            crc32c: 0xdead_beef ^ i as u32,
            max_timestamp: 1_700_000_000_000 + i,
            epochs: EpochLineage::from_entries([EpochEntry {
                epoch,
                start_offset: base,
            }])
            .ok()?,
            segment_base_offset: (i / 4) * 40,
            completes_segment: i % 4 == 3,
            segment_generation: u32::from(i % 7 == 0),
            object_offset: None,
            compacted: false,
        };
        if let Some((_, page)) = m.push_range(range, |a, b| layout.page_key(&pk, a, b, &page_id)) {
            pages.push(page);
        }
    }
    if n > 0 {
        m.lineage = EpochLineage::from_entries([
            EpochEntry {
                epoch: 1,
                start_offset: 0,
            },
            EpochEntry {
                epoch: 4,
                start_offset: (n as i64 / 2) * 10,
            },
        ])
        .ok()?;
    }
    m.source_high_watermark = m.shipped_end_offset + 5;
    m.committed_at_ms = 1_700_000_000_123;
    m.writer = "host-1234".into();
    if origin {
        m.mirror_origin = Some(MirrorOrigin {
            source_cluster_id: "other-cluster".into(),
            state: "STOPPED".into(),
            lme: Some(3),
        });
    }
    Some((m, pages))
}

/// Encoded manifests: empty, small, with a mirror origin, paged.
pub fn manifests() -> Vec<Vec<u8>> {
    [(0, false), (3, false), (5, true), (600, false)]
        .into_iter()
        .filter_map(|(n, o)| manifest_with(n, o))
        .filter_map(|(m, _)| m.encode().ok())
        .collect()
}

/// Encoded pages.
pub fn pages() -> Vec<Vec<u8>> {
    manifest_with(600, false)
        .map(|(_, pages)| pages.iter().filter_map(|p| p.encode().ok()).collect())
        .unwrap_or_default()
}

/// Encoded heads: empty and with entries.
pub fn heads() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut h = Head::empty("src-cluster");
    if let Ok(b) = h.encode() {
        out.push(b);
    }
    h.seq = 42;
    h.writer = "host-1234".into();
    h.written_at_ms = 1_700_000_000_000;
    for (m, _) in [(3, false), (5, true)]
        .into_iter()
        .filter_map(|(n, o)| manifest_with(n, o))
    {
        h.merge([HeadEntry::for_manifest(&m)]);
    }
    h.merge([HeadEntry {
        topic: "events".into(),
        partition: 0,
        topic_id: TopicId::from_bytes([9; 16]),
        manifest_version: 1,
        shipped_end_offset: 0,
        log_start_offset: 0,
        source_high_watermark: 0,
        committed_at_ms: 1,
        deleted: true,
        gaps: Vec::new(),
        chain: None,
        delta: None,
    }]);
    if let Ok(b) = h.encode() {
        out.push(b);
    }
    out
}

/// Applier configuration files.
pub fn applier_configs() -> Vec<String> {
    vec![
        "log_dir = \"/var/lib/segmirror/mirror\"\nbucket = \"s3://dr-bucket/segmirror\"\nsource_cluster_id = \"MkU3OEVBNTcwNTJENDM2Qk\"\n".into(),
        "log_dir = \"/data/mirror\"\nbucket = \"file:///data/bucket\"\nsource_cluster_id = \"src\"\ncluster_id = \"dst\"\ntopics = \"orders|payments\"\nexclude = \"tmp-.*\"\npoll_interval_ms = 500\ndownload_concurrency = 8\ntiered_topics = [\"archive\"]\nmetrics_addr = \"127.0.0.1:9465\"\n".into(),
        "log_dir = \"/x\"\nbucket = \"memory://\"\nsource_cluster_id = \"a\"\n".into(),
    ]
}

/// Shipper configuration files.
pub fn shipper_configs() -> Vec<String> {
    vec![
        "log_dirs = [\"/var/lib/kafka/data\"]\nbucket = \"s3://dr-bucket/segmirror\"\ncluster_id = \"MkU3OEVBNTcwNTJENDM2Qk\"\n".into(),
        "log_dirs = [\"/data/a\", \"/data/b\"]\nbucket = \"file:///data/bucket\"\ncluster_id = \"src\"\nshipper_id = \"host-1\"\ntopics = \"orders|payments\"\nexclude = \"__.*\"\ntail_interval = \"500ms\"\nupload_concurrency = 8\npart_size = \"8MiB\"\nmax_object_size = \"64MiB\"\nmax_cycle_bytes = \"1GiB\"\nrate_limit = \"100MiB\"\nship_beyond_hw = false\nmetrics_addr = \"0.0.0.0:9464\"\ndelete_grace = \"1h\"\nsweep_interval = \"10m\"\npartition_delete_grace = \"5m\"\nfence_backoff = \"5m\"\nerror_backoff = \"30s\"\n".into(),
        "log_dirs = [\"/x\"]\nbucket = \"memory://\"\ncluster_id = \"c\"\ndelete_grace = \"never\"\n".into(),
    ]
}
