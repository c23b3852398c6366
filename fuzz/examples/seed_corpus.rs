//! Writes seed inputs for the `batch_iter`, `checkpoints`, `indexes` and
//! `request_path` fuzz targets into `corpus/<target>/` (next to this
//! crate's Cargo.toml): real v2 batches in every codec, control and
//! transactional batches, real index files and checkpoint texts, all made
//! with kafkalog's own writers, and the request frames captured from the
//! stock clients (`gateway/tests/corpus/requests`, size prefix added).
//!
//! `cargo run --example seed_corpus` (from `fuzz/`, plain stable cargo).

use std::fs;
use std::path::{Path, PathBuf};

use kafkalog::batch::{Compression, TimestampType};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch, build_control_batch};
use kafkalog::checkpoint::{
    EpochEntry, PartitionMetadata, format_leader_epoch_checkpoint, format_offset_checkpoint,
    format_partition_metadata,
};
use kafkalog::index::{AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex};
use kafkalog::records::{ControlType, Header};
use kafkalog::{TopicId, TopicPartition};

fn dir(target: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    fs::create_dir_all(&d).expect("create corpus dir");
    d
}

fn records(n: usize, base_ts: i64) -> Vec<RecordInput> {
    (0..n)
        .map(|i| RecordInput {
            timestamp: base_ts + i as i64 * 3 - 2,
            key: if i % 3 == 2 {
                None
            } else {
                Some(format!("key-{i}").into_bytes())
            },
            value: if i % 4 == 3 {
                None
            } else {
                Some(format!("value {i} {}", "x".repeat(i * 7)).into_bytes())
            },
            headers: if i % 2 == 1 {
                vec![
                    Header {
                        key: "trace".into(),
                        value: Some(vec![i as u8; 4]),
                    },
                    Header {
                        key: "null".into(),
                        value: None,
                    },
                ]
            } else {
                Vec::new()
            },
        })
        .collect()
}

fn main() {
    let d = dir("batch_iter");
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut all = Vec::new();
    let mut offset = 0i64;
    for (i, codec) in codecs.into_iter().enumerate() {
        let mut spec = BatchSpec::new(offset, i as i32);
        spec.compression = codec;
        let b = build_batch(&spec, &records(1 + i * 2, 1_700_000_000_000)).expect("batch");
        fs::write(d.join(format!("batch-{codec}")), &b).expect("write");
        offset += 1 + i as i64 * 2;
        all.extend_from_slice(&b);
    }
    let mut spec = BatchSpec::new(offset, 5);
    spec.timestamp_type = TimestampType::LogAppendTime;
    spec.base_timestamp = 1_700_000_000_999;
    spec.transactional = true;
    spec.producer_id = 4242;
    spec.producer_epoch = 3;
    spec.base_sequence = 17;
    let b = build_batch(&spec, &records(2, 1_700_000_000_000)).expect("batch");
    fs::write(d.join("batch-txn-log-append-time"), &b).expect("write");
    all.extend_from_slice(&b);
    offset += 2;
    for (name, kind) in [
        ("abort", ControlType::Abort),
        ("commit", ControlType::Commit),
    ] {
        let b = build_control_batch(kind, offset, 5, 4242, 3, 1_700_000_001_000, 9);
        fs::write(d.join(format!("control-{name}")), &b).expect("write");
        all.extend_from_slice(&b);
        offset += 1;
    }
    fs::write(d.join("segment-all"), &all).expect("write");
    // A torn tail.
    fs::write(d.join("segment-torn"), &all[..all.len() - 30]).expect("write");

    let d = dir("indexes");
    let base = 1_000i64;
    let mut oi = OffsetIndex::new(base);
    let mut ti = TimeIndex::new(base);
    for i in 0..8i64 {
        oi.append(base + i * 10 + 3, (i * 4200) as u32)
            .expect("offset entry");
        ti.maybe_append(1_700_000_000_000 + i * 50, base + i * 10 + 3)
            .expect("time entry");
    }
    let mut xi = TransactionIndex::new();
    for i in 0..3i64 {
        xi.append(AbortedTxn::new(
            77 + i,
            base + i * 20,
            base + i * 20 + 9,
            base + i * 20 + 5,
        ))
        .expect("txn entry");
    }
    let prefix = |target: i64| {
        let mut v = base.to_be_bytes().to_vec();
        v.extend_from_slice(&target.to_be_bytes());
        v
    };
    for (name, bytes) in [
        ("offset", oi.to_bytes()),
        ("time", ti.to_bytes()),
        ("txn", xi.to_bytes()),
    ] {
        let mut v = prefix(base + 25);
        v.extend_from_slice(&bytes);
        fs::write(d.join(name), &v).expect("write");
        // Kafka preallocates index files: trailing zero padding.
        v.extend_from_slice(&[0u8; 48]);
        fs::write(d.join(format!("{name}-padded")), &v).expect("write");
    }

    let d = dir("checkpoints");
    let epochs = [(0, 0), (2, 100), (5, 4_000)]
        .map(|(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        })
        .to_vec();
    fs::write(
        d.join("leader-epoch"),
        format_leader_epoch_checkpoint(&epochs),
    )
    .expect("write");
    let mut offsets = std::collections::BTreeMap::new();
    for (topic, p, o) in [
        ("orders", 0, 42i64),
        ("orders", 7, 0),
        ("a.b_c-d", 3, 99_999),
    ] {
        offsets.insert(TopicPartition::new(topic, p).expect("tp"), o);
    }
    fs::write(d.join("offsets"), format_offset_checkpoint(&offsets)).expect("write");
    let id: TopicId = "AAAAAAAAAAAAAAAAAAAAAQ".parse().expect("topic id");
    let meta = PartitionMetadata::new(id);
    fs::write(
        d.join("partition-metadata"),
        format_partition_metadata(&meta),
    )
    .expect("write");
    // request_path: the request frames captured from the stock clients
    // (gateway/tests/corpus/requests), each with its 4-byte size prefix.
    let d = dir("request_path");
    let captured = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/tests/corpus/requests");
    for entry in fs::read_dir(&captured).expect("gateway/tests/corpus/requests") {
        let path = entry.expect("entry").path();
        let frame = fs::read(&path).expect("read");
        let mut seed = (frame.len() as i32).to_be_bytes().to_vec();
        seed.extend_from_slice(&frame);
        fs::write(d.join(path.file_name().expect("name")), seed).expect("write");
    }
    eprintln!(
        "seed corpus written under {}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .display()
    );
}
