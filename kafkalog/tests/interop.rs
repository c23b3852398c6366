//! Interoperability with kafka-python, an implementation of Kafka's record
//! format independent of ours: we read every batch and record of a
//! kafka-python-generated broker log dir exactly, `verify` accepts it and
//! catches every single-byte flip inside any batch, and kafka-python reads
//! what `kafkalog produce` writes, in every codec.

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;

use base64::Engine;
use kafkalog::TopicPartition;
use kafkalog::checkpoint;
use kafkalog::reader::{self, PartitionReader};
use kafkalog::records;
use kafkalog::verify::{self, VerifyOptions, VerifyStats};
use segmirror_testkit::kafka_python;
use serde_json::Value;

fn b64(v: &Option<Vec<u8>>) -> Value {
    match v {
        None => Value::Null,
        Some(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
    }
}

fn tp_of(p: &Value) -> TopicPartition {
    TopicPartition::new(
        p["topic"].as_str().expect("topic"),
        p["partition"].as_i64().expect("partition") as i32,
    )
    .expect("valid")
}

#[test]
fn reads_every_batch_and_record_of_a_kafka_python_log_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(expected) = kafka_python::generate_kafka_logdir(dir.path()) else {
        return;
    };
    let partitions = expected["partitions"].as_array().expect("partitions");
    let found = reader::list_partitions(dir.path()).expect("list");
    assert_eq!(found.len(), partitions.len());

    for p in partitions {
        let tp = tp_of(p);
        let r = PartitionReader::open(dir.path(), &tp).expect("open");
        assert_eq!(
            r.metadata()
                .expect("metadata")
                .expect("present")
                .topic_id
                .to_string(),
            p["topic_id"].as_str().expect("id")
        );
        let epochs: Vec<(i64, i64)> = r
            .epoch_entries()
            .expect("epochs")
            .iter()
            .map(|e| (i64::from(e.epoch), e.start_offset))
            .collect();
        let want: Vec<(i64, i64)> = p["leader_epochs"]
            .as_array()
            .expect("epochs")
            .iter()
            .map(|e| {
                (
                    e["epoch"].as_i64().expect("epoch"),
                    e["start_offset"].as_i64().expect("start"),
                )
            })
            .collect();
        assert_eq!(epochs, want, "{tp} lineage");
        let segs: Vec<i64> = r
            .segments()
            .expect("segments")
            .iter()
            .map(|s| s.base_offset)
            .collect();
        let want_segs: Vec<i64> = p["segment_base_offsets"]
            .as_array()
            .expect("segs")
            .iter()
            .map(|v| v.as_i64().expect("int"))
            .collect();
        assert_eq!(segs, want_segs, "{tp} segments");

        let mut got = Vec::new();
        r.for_each_batch(0, true, |h, bytes| {
            let recs = records::decode_records(h, bytes).expect("records decode");
            got.push(serde_json::json!({
                "base_offset": h.base_offset,
                "last_offset": h.last_offset(),
                "epoch": h.partition_leader_epoch,
                "position": h.position,
                "crc": h.crc,
                "codec": h.compression().id(),
                "is_transactional": h.is_transactional(),
                "is_control": h.is_control(),
                "producer_id": h.producer_id,
                "producer_epoch": h.producer_epoch,
                "base_sequence": h.base_sequence,
                "max_timestamp": h.max_timestamp,
                "record_count": h.record_count,
                "records": recs.iter().map(|rec| serde_json::json!({
                    "offset": rec.offset(h),
                    "timestamp": rec.timestamp(h),
                    "key": b64(&rec.key),
                    "value": b64(&rec.value),
                    "headers": rec.headers.iter().map(|x| serde_json::json!({"key": x.key, "value": b64(&x.value)})).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            }));
            ControlFlow::Continue(())
        })
        .expect("walk");
        let want: Vec<Value> = p["batches"]
            .as_array()
            .expect("batches")
            .iter()
            .map(|b| {
                let mut v = serde_json::Map::new();
                for k in [
                    "base_offset",
                    "last_offset",
                    "epoch",
                    "position",
                    "crc",
                    "codec",
                    "is_transactional",
                    "is_control",
                    "producer_id",
                    "producer_epoch",
                    "base_sequence",
                    "max_timestamp",
                    "record_count",
                    "records",
                ] {
                    v.insert(k.to_string(), b[k].clone());
                }
                Value::Object(v)
            })
            .collect();
        assert_eq!(got.len(), want.len(), "{tp}: batch count");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "{tp}: batch differs");
        }
    }

    // Root checkpoints.
    for (name, entries) in expected["checkpoints"].as_object().expect("checkpoints") {
        let map =
            checkpoint::read_offset_checkpoint(&dir.path().join(name)).expect("checkpoint parses");
        let want: BTreeMap<TopicPartition, i64> = entries
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| (tp_of(e), e["offset"].as_i64().expect("offset")))
            .collect();
        assert_eq!(map, want, "{name}");
    }

    // `kafkalog verify` accepts the whole dir.
    let (code, out, err) =
        common::run_kafkalog(&["verify", "--log-dir", dir.path().to_str().expect("utf-8")]);
    assert_eq!(code, 0, "verify failed: {out}{err}");
    assert!(out.starts_with("ok: 4 partitions"), "{out}");
}

/// Flips one bit of one byte and restores it when dropped.
fn with_flipped<T>(path: &Path, at: u64, f: impl FnOnce() -> T) -> T {
    let original = std::fs::read(path).expect("read");
    let mut bytes = original.clone();
    bytes[at as usize] ^= 0x01;
    std::fs::write(path, &bytes).expect("write");
    let out = f();
    std::fs::write(path, &original).expect("restore");
    out
}

#[test]
fn verify_catches_every_single_byte_flip_inside_any_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(expected) = kafka_python::generate_kafka_logdir(dir.path()) else {
        return;
    };
    let mut checked = 0u64;
    for p in expected["partitions"].as_array().expect("partitions") {
        let tp = tp_of(p);
        let batches = p["batches"].as_array().expect("batches");
        for b in batches {
            let seg = b["segment_base_offset"].as_i64().expect("segment");
            let seg_name = format!("{seg:020}.log");
            let path = dir.path().join(tp.dir_name()).join(&seg_name);
            let pos = b["position"].as_u64().expect("position");
            let size = b["size_in_bytes"].as_u64().expect("size");
            // Every header byte, and a spread of bytes through the records.
            let mut offsets: Vec<u64> = (0..61).collect();
            offsets.extend((61..size).step_by(((size - 61) / 16).max(1) as usize));
            offsets.push(size - 1);
            for rel in offsets {
                // The base offset lies outside the CRC. In a compacted log a
                // batch next to a gap may legitimately move its base offset
                // into the gap: nothing in the log can tell. (In the other
                // logs, which have no gaps, every such flip is caught.)
                if tp.topic == "compacted" && rel < 8 {
                    continue;
                }
                let problem = with_flipped(&path, pos + rel, || {
                    let mut stats = VerifyStats::default();
                    verify::verify_partition(dir.path(), &tp, VerifyOptions::default(), &mut stats)
                        .expect("io")
                });
                let problem = problem.expect_err(&format!(
                    "{tp} {seg_name}: flip at byte {} (batch at {pos}, +{rel}) not detected",
                    pos + rel
                ));
                let text = problem.to_string();
                assert!(text.contains(&seg_name), "{text}");
                assert!(
                    text.contains(&format!("byte {pos}")),
                    "flip in batch at byte {pos} (+{rel}): {text}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 4000, "checked {checked} flips");

    // Through the CLI: exit 1 naming the segment and the byte position.
    let p = &expected["partitions"][0];
    let b = &p["batches"][3];
    let tp = tp_of(p);
    let seg = format!(
        "{:020}.log",
        b["segment_base_offset"].as_i64().expect("segment")
    );
    let pos = b["position"].as_u64().expect("pos");
    let path = dir.path().join(tp.dir_name()).join(&seg);
    let (code, _, err) = with_flipped(&path, pos + 70, || {
        common::run_kafkalog(&["verify", "--log-dir", dir.path().to_str().expect("utf-8")])
    });
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&seg) && err.contains(&format!("byte {pos}")) && err.contains("CRC mismatch"),
        "{err}"
    );
}

#[test]
fn kafka_python_reads_what_kafkalog_produces_in_every_codec() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_str().expect("utf-8");
    let mut input = String::new();
    for i in 0..50 {
        input.push_str(&format!(
            "key-{i}\tvalue-{i} {}\n",
            "compressible ".repeat(10)
        ));
    }
    input.push_str("no-key-line\n");
    for (p, codec) in ["none", "gzip", "snappy", "lz4", "zstd"].iter().enumerate() {
        let part = p.to_string();
        let (code, out, err) = common::run_kafkalog_with_input(
            &[
                "produce",
                "--log-dir",
                root,
                "--topic",
                "interop",
                "--partition",
                &part,
                "--compression",
                codec,
                "--batch-size",
                "20",
                "--epoch",
                "3",
            ],
            input.as_bytes(),
        );
        assert_eq!(code, 0, "produce {codec}: {out}{err}");
        assert_eq!(out.lines().count(), 3, "three batches acknowledged: {out}");
    }
    let Some(out) = kafka_python::run_fixture("read_with_kafka_python.py", &["--log-dir", root])
    else {
        return;
    };
    let parsed: Value = serde_json::from_slice(&out.stdout).expect("reader json");
    let parts = parsed.as_array().expect("list");
    assert_eq!(parts.len(), 5);
    for (p, codec) in ["none", "gzip", "snappy", "lz4", "zstd"].iter().enumerate() {
        let part = &parts[p];
        assert_eq!(part["partition"].as_i64(), Some(p as i64));
        let batches = part["batches"].as_array().expect("batches");
        assert_eq!(batches.len(), 3);
        let mut offset = 0;
        for b in batches {
            assert_eq!(b["crc_valid"], Value::Bool(true));
            assert_eq!(b["codec_name"].as_str(), Some(*codec));
            assert_eq!(b["epoch"].as_i64(), Some(3));
            for r in b["records"].as_array().expect("records") {
                assert_eq!(r["offset"].as_i64(), Some(offset));
                if offset < 50 {
                    assert_eq!(r["key"].as_str(), Some(format!("key-{offset}").as_str()));
                    assert_eq!(
                        r["value"].as_str(),
                        Some(format!("value-{offset} {}", "compressible ".repeat(10)).as_str())
                    );
                } else {
                    assert_eq!(r["key"], Value::Null);
                    assert_eq!(r["value"].as_str(), Some("no-key-line"));
                }
                offset += 1;
            }
        }
        assert_eq!(offset, 51);
    }
}
