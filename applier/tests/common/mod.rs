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

/// A source partition read for publishing: one range per segment, each
/// with its bytes (the range's `key` left empty), and the manifest to
/// commit once the ranges have keys.
pub struct SourceRanges {
    pub pk: PartitionKey,
    pub manifest: PartitionManifest,
    pub ranges: Vec<(Vec<u8>, ShippedRange)>,
}

/// Reads the whole source partition `t` as [`SourceRanges`].
pub fn read_source(store: &ManifestStore, source: &Path, t: &TopicPartition) -> SourceRanges {
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
    let mut ranges = Vec::new();
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
        let range = ShippedRange {
            key: String::new(),
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
            object_offset: None,
            compacted: false,
        };
        m.shipped_end_offset = last + 1;
        ranges.push((bytes, range));
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
    SourceRanges {
        pk,
        manifest: m,
        ranges,
    }
}

/// Commits `m` as the next version of `pk` and publishes it in the head.
async fn commit(
    store: &ManifestStore,
    pk: &PartitionKey,
    m: PartitionManifest,
) -> PartitionManifest {
    let committed = store
        .update_manifest(pk, None, |_| {
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

/// Publishes the whole source partition: one range per segment, one
/// object each, one manifest version, one head.
pub async fn publish(
    store: &ManifestStore,
    source: &Path,
    t: &TopicPartition,
    upload: &str,
) -> PartitionManifest {
    let SourceRanges {
        pk,
        mut manifest,
        ranges,
    } = read_source(store, source, t);
    for (bytes, mut range) in ranges {
        let epoch = range.epochs.entries()[0].epoch;
        range.key = store
            .layout()
            .data_key(&pk, range.base_offset, range.last_offset, epoch, upload)
            .expect("key");
        store
            .put_new(&range.key, Bytes::from(bytes))
            .await
            .expect("put");
        manifest.ranges.push(range);
    }
    commit(store, &pk, manifest).await
}

/// Publishes the whole source partitions `tps` with every range of all of
/// them in one pack (`manifest::pack`, one PUT), each partition's manifest
/// naming its ranges' bytes in it (`ShippedRange::object_offset`). Returns
/// the pack's key and the committed manifests.
pub async fn publish_packed(
    store: &ManifestStore,
    source: &Path,
    tps: &[TopicPartition],
    upload: &str,
) -> (String, Vec<PartitionManifest>) {
    let read: Vec<SourceRanges> = tps.iter().map(|t| read_source(store, source, t)).collect();
    let inputs: Vec<manifest::pack::PackInput<'_>> = read
        .iter()
        .flat_map(|s| {
            s.ranges.iter().map(|(bytes, r)| {
                manifest::pack::PackInput::of_range(s.pk.tp.clone(), s.pk.topic_id, bytes, r)
            })
        })
        .collect();
    let (object, index) = manifest::pack::encode(inputs).expect("pack");
    let key = store.layout().pack_key(upload).expect("pack key");
    store
        .put_new(&key, Bytes::from(object))
        .await
        .expect("put pack");
    let mut committed = Vec::new();
    for s in read {
        let mut manifest = s.manifest;
        for (_, mut range) in s.ranges {
            let entry = index
                .entries
                .iter()
                .find(|e| e.tp == s.pk.tp && e.base_offset == range.base_offset)
                .expect("packed");
            assert_eq!(entry.crc32c, range.crc32c, "the pack keeps the bytes");
            range.key = key.clone();
            range.object_offset = Some(entry.start);
            manifest.ranges.push(range);
        }
        committed.push(commit(store, &s.pk, manifest).await);
    }
    (key, committed)
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
