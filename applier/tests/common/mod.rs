//! Helpers shared by the applier's tests: a source log written with
//! kafkalog, and a hand publisher that ships each segment as one range (the
//! layout the shipper produces), so the applier is tested on its own.
#![allow(dead_code, unreachable_pub)]

use std::ops::ControlFlow;
use std::path::Path;

use bucket::store::ManifestStore;
use bytes::Bytes;
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::checkpoint::EpochEntry;
use kafkalog::epoch::EpochLineage;
use kafkalog::reader::PartitionReader;
use kafkalog::{PartitionLog, TopicId, TopicPartition};
use manifest::feed::HeadEntry;
use manifest::layout::PartitionKey;
use manifest::partition::{PartitionManifest, ShippedRange};

pub mod clients;

pub const SOURCE: &str = "src-cluster";

pub fn tp(t: &str) -> TopicPartition {
    TopicPartition::new(t, 0).expect("tp")
}

pub fn topic_id() -> TopicId {
    "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id")
}

/// Appends `n` records at `epoch` as the leader, 10 per batch.
pub fn produce(log: &mut PartitionLog, n: usize, epoch: i32) {
    let recs: Vec<RecordInput> = (0..n)
        .map(|i| RecordInput {
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(vec![b'v'; 100]),
            headers: vec![],
        })
        .collect();
    for chunk in recs.chunks(10) {
        let mut b = build_batch(&BatchSpec::new(0, epoch), chunk).expect("batch");
        log.append_as_leader(&mut b, epoch).expect("append");
    }
}

/// Publishes the whole source partition: one range per segment, one
/// manifest version, one head.
pub async fn publish(
    store: &ManifestStore,
    source: &Path,
    t: &TopicPartition,
    upload: &str,
) -> PartitionManifest {
    let reader = PartitionReader::open(source, t).expect("reader");
    // The source partition's own topic id (`topic_id()` when it has none).
    let id = reader
        .metadata()
        .expect("partition.metadata")
        .map_or_else(topic_id, |m| m.topic_id);
    let pk = PartitionKey {
        tp: t.clone(),
        topic_id: id,
    };
    let segments = reader.segments().expect("segments");
    let mut m = PartitionManifest::new(store.layout().cluster_id(), t, id);
    m.mirror_origin = partdir::record::read(reader.dir())
        .expect("record")
        .map(|r| r.origin());
    m.log_start_offset = segments.first().map_or(0, |s| s.base_offset);
    m.shipped_end_offset = m.log_start_offset;
    for (i, seg) in segments.iter().enumerate() {
        let mut bytes = Vec::new();
        let mut first = None;
        let mut last = 0;
        let mut epochs: Vec<EpochEntry> = Vec::new();
        let mut max_ts = -1;
        let mut batches = 0;
        reader
            .for_each_batch(seg.base_offset, true, |h, b| {
                if h.base_offset < seg.base_offset
                    || segments
                        .get(i + 1)
                        .is_some_and(|n| h.base_offset >= n.base_offset)
                {
                    return ControlFlow::Continue(());
                }
                first.get_or_insert(h.base_offset);
                last = h.last_offset();
                if epochs
                    .last()
                    .is_none_or(|e| e.epoch != h.partition_leader_epoch)
                {
                    epochs.push(EpochEntry {
                        epoch: h.partition_leader_epoch,
                        start_offset: h.base_offset,
                    });
                }
                max_ts = max_ts.max(h.max_timestamp);
                batches += 1;
                bytes.extend_from_slice(b);
                ControlFlow::Continue(())
            })
            .expect("walk");
        let Some(first) = first else { continue };
        let key = store
            .layout()
            .data_key(&pk, first, last, epochs[0].epoch, upload)
            .expect("key");
        store
            .put_new(&key, Bytes::from(bytes.clone()))
            .await
            .expect("put");
        m.ranges.push(ShippedRange {
            key,
            base_offset: first,
            last_offset: last,
            bytes: bytes.len() as u64,
            batches,
            crc32c: crc32c::crc32c(&bytes),
            max_timestamp: max_ts,
            epochs: EpochLineage::from_entries(epochs).expect("a range's epochs"),
            segment_base_offset: seg.base_offset,
            completes_segment: i + 1 < segments.len(),
            segment_generation: 0,
        });
        m.shipped_end_offset = last + 1;
    }
    m.source_high_watermark = m.shipped_end_offset;
    let end = m.shipped_end_offset;
    m.lineage = EpochLineage::from_entries(
        reader
            .epoch_entries()
            .expect("epochs")
            .into_iter()
            .filter(|e| e.start_offset < end),
    )
    .expect("the source's lineage");
    let committed = store
        .update_manifest(&pk, None, |_| {
            Ok::<_, std::convert::Infallible>(Some(m.clone()))
        })
        .await
        .expect("store")
        .expect("decided")
        .expect("committed");
    store
        .publish_head(None, "test", &[HeadEntry::for_manifest(&committed)])
        .await
        .expect("head");
    committed
}

/// A `file://` bucket in `dir` (created), with its URL and the store of
/// [`SOURCE`] in it.
pub fn file_bucket(dir: &Path) -> (String, ManifestStore) {
    std::fs::create_dir_all(dir).expect("bucket dir");
    let url = format!("file://{}", dir.display());
    let object_store = bucket::url::BucketUrl::parse(&url)
        .expect("url")
        .build()
        .expect("store");
    let layout = manifest::layout::ClusterLayout::new("", SOURCE).expect("layout");
    (url, ManifestStore::new(object_store, layout))
}

/// Runs the applier binary `bin` with `args`, none of the settings that
/// the environment could add (bucket, source, cluster id, config file) and
/// errors-only logs: its exit code and its stderr then stdout.
pub fn run_applier(bin: &str, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(bin)
        .args(args)
        .env_remove("SEGMIRROR_BUCKET")
        .env_remove("SEGMIRROR_SOURCE_CLUSTER_ID")
        .env_remove("SEGMIRROR_CLUSTER_ID")
        .env_remove("SEGMIRROR_APPLIER_CONFIG")
        .env("RUST_LOG", "error")
        .output()
        .expect("run applier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

/// Commits the next version of `t`'s manifest under `id`, the latest one
/// changed by `change` (its configs, `deleted`), and publishes it in the
/// head, as a shipper would.
pub async fn republish(
    store: &ManifestStore,
    t: &TopicPartition,
    id: TopicId,
    change: impl Fn(&mut PartitionManifest),
) -> PartitionManifest {
    let pk = PartitionKey {
        tp: t.clone(),
        topic_id: id,
    };
    let committed = store
        .update_manifest(&pk, None, |latest| {
            let mut m = latest.expect("a manifest to change").clone();
            change(&mut m);
            Ok::<_, std::convert::Infallible>(Some(m))
        })
        .await
        .expect("store")
        .expect("decided")
        .expect("committed");
    store
        .publish_head(None, "test", &[HeadEntry::for_manifest(&committed)])
        .await
        .expect("head");
    committed
}
