//! Building v2 record batches, as Kafka's `MemoryRecordsBuilder` does.
//!
//! [`build_batch`] lays out a batch exactly as [`crate::batch`] documents:
//! records get offset deltas `0..n` (so `lastOffsetDelta = n - 1` and
//! `recordCount = n`), `baseTimestamp` is the first record's timestamp and
//! each record stores its timestamp minus it (possibly negative),
//! `maxTimestamp` is the largest record timestamp (for log-append-time
//! batches, the log-append time, as the broker stamps it). The records
//! section (see [`crate::records`]) is compressed with the spec's codec (see
//! [`crate::compression`]) and the CRC-32C covers attributes to the end.
//!
//! [`build_control_batch`] writes the one-record transactional control batch
//! of Kafka's `MemoryRecords.withEndTransactionMarker`: uncompressed, create
//! time, no sequence, key `version 0, type`, value `version 0,
//! coordinatorEpoch`, 78 bytes in all.
//!
//! Invariants: every batch returned parses with
//! [`crate::batch::parse_batch`] (so its base offset is non-negative and its
//! last offset does not overflow) and decodes with
//! [`crate::records::decode_records`] to the records given. Inputs that
//! cannot make such a batch are refused with [`Error::InvalidArgument`];
//! nothing panics.

use crate::Error;
use crate::batch::{
    CRC_OFFSET, Compression, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, TimestampType, compute_crc,
};
use crate::compression::compress;
use crate::records::{ControlType, Header, encode_record};

const TIMESTAMP_TYPE_FLAG: i16 = 0x08;
const TRANSACTIONAL_FLAG: i16 = 0x10;
const CONTROL_FLAG: i16 = 0x20;

/// The batch-level fields of a batch to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpec {
    /// Offset of the first record; must be non-negative.
    pub base_offset: i64,
    /// Leader epoch to stamp (a producer sends [`NO_PARTITION_LEADER_EPOCH`],
    /// -1; the leader overwrites it on append).
    pub partition_leader_epoch: i32,
    /// Codec for the records section.
    pub compression: Compression,
    /// Timestamp type (attribute bit 3).
    pub timestamp_type: TimestampType,
    /// Transactional producer batch (attribute bit 4).
    pub transactional: bool,
    /// Control batch (attribute bit 5).
    pub control: bool,
    /// Producer id, -1 when not idempotent.
    pub producer_id: i64,
    /// Producer epoch, -1 when not idempotent.
    pub producer_epoch: i16,
    /// Sequence of the first record, -1 when not idempotent.
    pub base_sequence: i32,
    /// The log-append time of a [`TimestampType::LogAppendTime`] batch,
    /// written as its `maxTimestamp` (which readers report as every record's
    /// timestamp). Not used for create-time batches, whose `baseTimestamp`
    /// is always the first record's timestamp and `maxTimestamp` the largest.
    pub base_timestamp: i64,
}

impl BatchSpec {
    /// A plain batch as a non-idempotent producer's: uncompressed, create
    /// time, not transactional, producer id/epoch/sequence -1, log-append
    /// time unset (-1).
    pub fn new(base_offset: i64, partition_leader_epoch: i32) -> BatchSpec {
        BatchSpec {
            base_offset,
            partition_leader_epoch,
            compression: Compression::None,
            timestamp_type: TimestampType::CreateTime,
            transactional: false,
            control: false,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            base_timestamp: -1,
        }
    }

    fn attributes(&self) -> i16 {
        let mut attributes = self.compression.id();
        if self.timestamp_type == TimestampType::LogAppendTime {
            attributes |= TIMESTAMP_TYPE_FLAG;
        }
        if self.transactional {
            attributes |= TRANSACTIONAL_FLAG;
        }
        if self.control {
            attributes |= CONTROL_FLAG;
        }
        attributes
    }
}

impl Default for BatchSpec {
    /// [`BatchSpec::new`] at base offset 0 with leader epoch
    /// [`NO_PARTITION_LEADER_EPOCH`] (-1), as a producer sends it.
    fn default() -> BatchSpec {
        BatchSpec::new(0, NO_PARTITION_LEADER_EPOCH)
    }
}

/// A record to put in a batch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct RecordInput {
    /// Record timestamp (milliseconds since the epoch, by convention).
    pub timestamp: i64,
    /// Key, `None` for null.
    pub key: Option<Vec<u8>>,
    /// Value, `None` for null (a tombstone).
    pub value: Option<Vec<u8>>,
    /// Headers, in order.
    pub headers: Vec<Header>,
}

/// Header fields that the spec does not carry directly.
struct Layout {
    batch_length: i32,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    record_count: i32,
}

/// Writes header and records section, then the CRC.
fn assemble(spec: &BatchSpec, layout: &Layout, section: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_SIZE + section.len());
    b.extend_from_slice(&spec.base_offset.to_be_bytes());
    b.extend_from_slice(&layout.batch_length.to_be_bytes());
    b.extend_from_slice(&spec.partition_leader_epoch.to_be_bytes());
    b.push(MAGIC_V2 as u8);
    b.extend_from_slice(&[0; 4]); // CRC, below
    b.extend_from_slice(&layout.attributes.to_be_bytes());
    b.extend_from_slice(&layout.last_offset_delta.to_be_bytes());
    b.extend_from_slice(&layout.base_timestamp.to_be_bytes());
    b.extend_from_slice(&layout.max_timestamp.to_be_bytes());
    b.extend_from_slice(&spec.producer_id.to_be_bytes());
    b.extend_from_slice(&spec.producer_epoch.to_be_bytes());
    b.extend_from_slice(&spec.base_sequence.to_be_bytes());
    b.extend_from_slice(&layout.record_count.to_be_bytes());
    b.extend_from_slice(section);
    let crc = compute_crc(&b);
    if let Some(field) = b.get_mut(CRC_OFFSET..CRC_OFFSET + 4) {
        field.copy_from_slice(&crc.to_be_bytes());
    }
    b
}

/// Builds one v2 batch holding `records` (at least one) at offsets
/// `spec.base_offset..spec.base_offset + records.len()`.
///
/// Errors: [`Error::InvalidArgument`] for no records, a negative base offset,
/// offsets or timestamp deltas that overflow, or a batch larger than 2 GiB;
/// [`Error::Records`] if the codec fails.
pub fn build_batch(spec: &BatchSpec, records: &[RecordInput]) -> crate::Result<Vec<u8>> {
    let invalid = |reason: String| {
        Error::InvalidArgument(format!("batch at offset {}: {reason}", spec.base_offset))
    };
    let first = records
        .first()
        .ok_or_else(|| invalid("no records".into()))?;
    let last_offset_delta = i32::try_from(records.len() - 1)
        .map_err(|_| invalid(format!("{} records do not fit in one batch", records.len())))?;
    if spec.base_offset < 0 {
        return Err(invalid("negative base offset".into()));
    }
    if spec
        .base_offset
        .checked_add(i64::from(last_offset_delta) + 1)
        .is_none()
    {
        return Err(invalid("last offset overflows".into()));
    }
    let base_timestamp = first.timestamp;
    let mut max_timestamp = base_timestamp;
    let mut section = Vec::new();
    for (i, r) in records.iter().enumerate() {
        max_timestamp = max_timestamp.max(r.timestamp);
        let timestamp_delta = r.timestamp.checked_sub(base_timestamp).ok_or_else(|| {
            invalid(format!(
                "record {i}: timestamp {} too far from the first, {base_timestamp}",
                r.timestamp
            ))
        })?;
        // i <= last_offset_delta, which fits an i32.
        let offset_delta =
            i32::try_from(i).map_err(|_| invalid(format!("record {i}: offset delta overflows")))?;
        encode_record(
            &mut section,
            offset_delta,
            timestamp_delta,
            r.key.as_deref(),
            r.value.as_deref(),
            &r.headers,
        )
        .map_err(|e| invalid(format!("record {i}: {e}")))?;
    }
    if spec.timestamp_type == TimestampType::LogAppendTime {
        max_timestamp = spec.base_timestamp;
    }
    let section = compress(spec.compression, &section).map_err(|e| Error::Records {
        base_offset: spec.base_offset,
        reason: e.to_string(),
    })?;
    let batch_length = section
        .len()
        .checked_add(HEADER_SIZE - LOG_OVERHEAD)
        .and_then(|len| i32::try_from(len).ok())
        .ok_or_else(|| {
            invalid(format!(
                "records section of {} bytes is too large",
                section.len()
            ))
        })?;
    let layout = Layout {
        batch_length,
        attributes: spec.attributes(),
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        record_count: last_offset_delta + 1,
    };
    Ok(assemble(spec, &layout, &section))
}

/// Size of the single control record: length 16 then 16 bytes (Kafka's
/// `EndTransactionMarker.CURRENT_END_TXN_SCHEMA_RECORD_SIZE`).
const CONTROL_RECORD_SIZE: usize = 17;

/// Builds a transaction marker batch, as Kafka's
/// `MemoryRecords.withEndTransactionMarker`: one control record of type
/// `kind` with coordinator epoch `coordinator_epoch`, transactional and
/// control attributes, uncompressed, create time, base sequence -1, base and
/// max timestamp `timestamp`. Kafka only writes [`ControlType::Abort`] and
/// [`ControlType::Commit`] this way; other types get the same layout.
///
/// `base_offset` must be non-negative (and below `i64::MAX`) for the batch to
/// be valid.
pub fn build_control_batch(
    kind: ControlType,
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    timestamp: i64,
    coordinator_epoch: i32,
) -> Vec<u8> {
    let spec = BatchSpec {
        base_offset,
        partition_leader_epoch,
        compression: Compression::None,
        timestamp_type: TimestampType::CreateTime,
        transactional: true,
        control: true,
        producer_id,
        producer_epoch,
        base_sequence: NO_SEQUENCE,
        base_timestamp: timestamp,
    };
    let mut record = Vec::with_capacity(CONTROL_RECORD_SIZE);
    // length 16, attributes 0, timestamp delta 0, offset delta 0, key length 4
    record.extend_from_slice(&[0x20, 0x00, 0x00, 0x00, 0x08]);
    record.extend_from_slice(&0i16.to_be_bytes()); // key version
    record.extend_from_slice(&kind.id().to_be_bytes());
    record.push(0x0c); // value length 6
    record.extend_from_slice(&0i16.to_be_bytes()); // value version
    record.extend_from_slice(&coordinator_epoch.to_be_bytes());
    record.push(0x00); // no headers
    let layout = Layout {
        batch_length: (HEADER_SIZE - LOG_OVERHEAD + CONTROL_RECORD_SIZE) as i32,
        attributes: spec.attributes(),
        last_offset_delta: 0,
        base_timestamp: timestamp,
        max_timestamp: timestamp,
        record_count: 1,
    };
    assemble(&spec, &layout, &record)
}

/// A batch of one record whose records section is `total` zero bytes
/// compressed with `codec` (rounded down to whole 8 MiB chunks), made of one
/// compressed 8 MiB chunk repeated: gzip members, zstd frames and xerial
/// snappy chunks are read concatenated, LZ4 blocks are repeated inside one
/// frame (Kafka reads one). The CRC is correct. A decompression bomb, for
/// tests and fuzz seeds: 1 GiB is about 1 MiB of gzip, 4.4 MiB of LZ4, 35 KiB
/// of zstd; snappy expands about 21x at most.
pub fn decompression_bomb(codec: Compression, total: usize) -> crate::Result<Vec<u8>> {
    const CHUNK: usize = 8 << 20;
    let codec_err = |e: crate::compression::CodecError| Error::InvalidArgument(e.to_string());
    let one = compress(codec, &vec![0u8; CHUNK]).map_err(codec_err)?;
    let copies = total / CHUNK;
    let mut section = Vec::new();
    match codec {
        Compression::Lz4 => {
            // Header (7 bytes), independent blocks, end mark (4 bytes).
            let (header, rest) = one.split_at(7.min(one.len()));
            let (blocks, end) = rest.split_at(rest.len().saturating_sub(4));
            section.extend_from_slice(header);
            for _ in 0..copies {
                section.extend_from_slice(blocks);
            }
            section.extend_from_slice(end);
        }
        Compression::Snappy => {
            // One xerial header, then the chunks of every copy.
            section.extend_from_slice(&one[..16.min(one.len())]);
            for _ in 0..copies {
                section.extend_from_slice(&one[16.min(one.len())..]);
            }
        }
        _ => {
            for _ in 0..copies {
                section.extend_from_slice(&one);
            }
        }
    }
    let spec = BatchSpec {
        compression: codec,
        ..BatchSpec::new(0, 0)
    };
    let record = RecordInput {
        timestamp: 1,
        key: None,
        value: Some(b"v".to_vec()),
        headers: vec![],
    };
    let mut b = build_batch(&spec, &[record])?;
    b.truncate(HEADER_SIZE);
    b.extend_from_slice(&section);
    let batch_length = i32::try_from(b.len() - 12)
        .map_err(|_| Error::InvalidArgument(format!("a bomb of {} bytes", b.len())))?;
    b[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crate::batch::compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchHeader, parse_batch, parse_header};
    use crate::compression::CodecError;
    use crate::records::{
        ControlMarker, Record, decode_control_batch, decode_records, decode_records_with_limit,
        parse_control_record,
    };

    const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn input(
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> RecordInput {
        RecordInput {
            timestamp,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: headers
                .iter()
                .map(|(k, v)| Header {
                    key: (*k).into(),
                    value: v.map(<[u8]>::to_vec),
                })
                .collect(),
        }
    }

    /// Checks `batch` parses and decodes back to `inputs`.
    fn check_round_trip(
        spec: &BatchSpec,
        inputs: &[RecordInput],
        batch: &[u8],
    ) -> (BatchHeader, Vec<Record>) {
        let h = parse_batch(batch, 0).expect("parse_batch");
        assert_eq!(h.base_offset, spec.base_offset);
        assert_eq!(h.partition_leader_epoch, spec.partition_leader_epoch);
        assert_eq!(h.compression(), spec.compression);
        assert_eq!(h.timestamp_type(), spec.timestamp_type);
        assert_eq!(
            (h.is_transactional(), h.is_control()),
            (spec.transactional, spec.control)
        );
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (spec.producer_id, spec.producer_epoch, spec.base_sequence)
        );
        assert_eq!(h.record_count as usize, inputs.len());
        assert_eq!(h.last_offset_delta as usize, inputs.len() - 1);
        assert_eq!(h.base_timestamp, inputs[0].timestamp);
        let records = decode_records(&h, batch).expect("decode");
        assert_eq!(records.len(), inputs.len());
        for (i, (r, inp)) in records.iter().zip(inputs).enumerate() {
            assert_eq!(r.offset_delta as usize, i);
            assert_eq!(r.offset(&h), Some(spec.base_offset + i as i64));
            assert_eq!(r.timestamp(&h), Some(inp.timestamp));
            assert_eq!(
                (&r.key, &r.value, &r.headers),
                (&inp.key, &inp.value, &inp.headers)
            );
        }
        (h, records)
    }

    fn sample_inputs() -> Vec<RecordInput> {
        let value = b"the quick brown fox jumps over the lazy dog, again and again. ".repeat(40);
        (0..50)
            .map(|i| {
                let key = format!("key-{i}");
                input(
                    1_700_000_000_000 + (i * 7919 % 100) as i64,
                    if i % 5 == 0 {
                        None
                    } else {
                        Some(key.as_bytes())
                    },
                    if i % 11 == 3 { None } else { Some(&value) },
                    &[("trace-id", Some(b"0123456789abcdef")), ("empty", None)],
                )
            })
            .collect()
    }

    #[test]
    fn every_codec_round_trips() {
        let inputs = sample_inputs();
        let raw_len = build_batch(&BatchSpec::new(0, -1), &inputs)
            .expect("plain")
            .len();
        for codec in ALL {
            let spec = BatchSpec {
                compression: codec,
                partition_leader_epoch: 12,
                producer_id: 9001,
                producer_epoch: 4,
                base_sequence: 120,
                transactional: true,
                ..BatchSpec::new(1_000_000, -1)
            };
            let batch = build_batch(&spec, &inputs).expect("build");
            let (h, _) = check_round_trip(&spec, &inputs, &batch);
            assert_eq!(
                h.max_timestamp,
                inputs.iter().map(|r| r.timestamp).max().expect("some")
            );
            if codec != Compression::None {
                assert!(
                    batch.len() * 5 < raw_len,
                    "{codec}: {} vs {raw_len}",
                    batch.len()
                );
            }
        }
    }

    #[test]
    fn log_append_time_sets_max_timestamp() {
        let spec = BatchSpec {
            timestamp_type: TimestampType::LogAppendTime,
            base_timestamp: 5_000,
            ..BatchSpec::new(3, -1)
        };
        let inputs = [
            input(100, None, Some(b"a"), &[]),
            input(90, None, Some(b"b"), &[]),
        ];
        let batch = build_batch(&spec, &inputs).expect("build");
        let (h, records) = check_round_trip(&spec, &inputs, &batch);
        assert_eq!((h.base_timestamp, h.max_timestamp), (100, 5_000));
        assert_eq!(records[1].timestamp_delta, -10);
    }

    #[test]
    fn golden_uncompressed_batch() {
        // Hand-computed from DefaultRecordBatch/DefaultRecord; identical to what
        // kafka-python 3.0.12's DefaultRecordBatchBuilder writes (with base
        // offset and leader epoch patched), CRC included.
        let spec = BatchSpec::new(5, 2);
        let inputs = [
            input(1000, Some(b"k"), Some(b"v1"), &[]),
            input(998, None, Some(b"x"), &[("h", Some(b"1")), ("n", None)]),
        ];
        let expected = unhex(concat!(
            "0000000000000005", // baseOffset 5
            "0000004a",         // batchLength 74
            "00000002",         // partitionLeaderEpoch 2
            "02",               // magic
            "87bc9fe4",         // crc
            "0000",             // attributes
            "00000001",         // lastOffsetDelta
            "00000000000003e8", // baseTimestamp 1000
            "00000000000003e8", // maxTimestamp 1000
            "ffffffffffffffff", // producerId
            "ffff",             // producerEpoch
            "ffffffff",         // baseSequence
            "00000002",         // recordCount
            // length 9, attrs, ts delta 0, offset delta 0, key "k", value "v1", 0 headers
            "12",
            "00",
            "00",
            "00",
            "02",
            "6b",
            "04",
            "7631",
            "00",
            // length 14, attrs, ts delta -2, offset delta 1, null key, value "x", 2 headers:
            // "h"="1", "n"=null
            "1c",
            "00",
            "03",
            "02",
            "01",
            "02",
            "78",
            "04",
            "02",
            "68",
            "02",
            "31",
            "02",
            "6e",
            "01",
        ));
        let batch = build_batch(&spec, &inputs).expect("build");
        assert_eq!(batch, expected);
        check_round_trip(&spec, &inputs, &batch);
    }

    #[test]
    fn control_batch_round_trips_and_matches_kafka() {
        for (kind, epoch) in [
            (ControlType::Commit, 9),
            (ControlType::Abort, i32::MAX),
            (ControlType::Abort, -1),
        ] {
            let batch = build_control_batch(kind, 77, 5, 4242, 3, 1_234_567, epoch);
            assert_eq!(batch.len(), 78);
            let h = parse_batch(&batch, 0).expect("parse");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (
                    h.base_offset,
                    h.partition_leader_epoch,
                    h.producer_id,
                    h.producer_epoch
                ),
                (77, 5, 4242, 3)
            );
            assert_eq!(
                (h.base_sequence, h.record_count, h.last_offset_delta),
                (-1, 1, 0)
            );
            assert_eq!((h.base_timestamp, h.max_timestamp), (1_234_567, 1_234_567));
            let records = decode_records(&h, &batch).expect("decode");
            let expected = ControlMarker {
                kind,
                coordinator_epoch: epoch,
            };
            assert_eq!(parse_control_record(&records[0]), Ok(expected));
            assert_eq!(decode_control_batch(&h, &batch).expect("control"), expected);
        }
        // Byte-for-byte what kafka-python builds (a one-record transactional
        // batch with the control bit set and the CRC recomputed).
        let python = unhex(concat!(
            "000000000000004d0000004200000005023c2af91a003000000000000000000012d687000000000012d687",
            "00000000000010920003ffffffff000000012000000008000000010c00000000000900"
        ));
        assert_eq!(
            build_control_batch(ControlType::Commit, 77, 5, 4242, 3, 1_234_567, 9),
            python
        );
        // A data batch is not a control batch.
        let data =
            build_batch(&BatchSpec::new(0, -1), &[input(1, None, None, &[])]).expect("build");
        let h = parse_batch(&data, 0).expect("parse");
        assert!(decode_control_batch(&h, &data).is_err());
    }

    /// Batches written by kafka-python 3.0.12 with each codec (records
    /// `key-i` / `"hello kafka " * 10 + [i]` / header `trace=abc`, timestamps
    /// 1_700_000_000_000 + i), base offset 100, leader epoch 7.
    #[test]
    fn decodes_kafka_python_batches() {
        let batches = [
            (
                Compression::Gzip,
                concat!(
                    "000000000000006400000086000000070267a3383a0001000000020000018bcfe568000000018bcfe56802ffffffffff",
                    "ffffffffffffffffff000000031f8b0800d547106b02ff9bc7c4c0c0c0959d5aa96bf08931233527275f213b312d3b51",
                    "819e6c0626ae92a2c4e454b6c4a4e4794c0c4c4c6007190e9c8318511dc4c2027690d1c0398809c94100067c8238b301",
                    "0000",
                ),
            ),
            (
                Compression::Snappy,
                concat!(
                    "0000000000000064000000a300000007023adbe5d20002000000020000018bcfe568000000018bcfe56802ffffffffff",
                    "ffffffffffffffffff0000000382534e415050590000000001000000010000005eb303609e020000000a6b65792d30f2",
                    "0168656c6c6f206b61666b6120fe0c00ae0c004000020a7472616365066162639e0200020205910031fe9100e6910004",
                    "010232910004040405910032fe9100e691002c02020a747261636506616263",
                ),
            ),
            (
                Compression::Lz4,
                concat!(
                    "00000000000000640000009b0000000702753f40ef0003000000020000018bcfe568000000018bcfe56802ffffffffff",
                    "ffffffffffffffffff0000000304224d186840b3010000000000006453000000ff0a9e020000000a6b65792d30f20168",
                    "656c6c6f206b61666b61200c0059f10200020a7472616365066162639e0200020291001f319100671a01910021040491",
                    "001f32910067c002020a74726163650661626300000000",
                ),
            ),
            (
                Compression::Zstd,
                concat!(
                    "0000000000000064000000810000000702ff4ca8c50004000000020000018bcfe568000000018bcfe56802ffffffffff",
                    "ffffffffffffffffff0000000328b52ffd60b30035020004039e020000000a6b65792d30f20168656c6c6f206b61666b",
                    "612000020a7472616365066162639e020002023101040432020700c0900bd2050202995d4822c508abf4b48c01",
                ),
            ),
        ];
        for (codec, hex) in batches {
            let batch = unhex(hex);
            let h = parse_batch(&batch, 0).expect("parse");
            assert_eq!(
                (h.compression(), h.base_offset, h.partition_leader_epoch),
                (codec, 100, 7)
            );
            let records = decode_records(&h, &batch).expect("decode");
            assert_eq!(records.len(), 3);
            for (i, r) in records.iter().enumerate() {
                let mut value = b"hello kafka ".repeat(10);
                value.push(i as u8);
                assert_eq!(r.offset_delta, i as i32);
                assert_eq!(r.timestamp(&h), Some(1_700_000_000_000 + i as i64));
                assert_eq!(r.key.as_deref(), Some(format!("key-{i}").as_bytes()));
                assert_eq!(r.value.as_deref(), Some(&value[..]));
                assert_eq!(
                    r.headers,
                    vec![Header {
                        key: "trace".into(),
                        value: Some(b"abc".to_vec())
                    }]
                );
            }
            // Re-encoding with our writer gives records that decode the same.
            let spec = BatchSpec {
                compression: codec,
                ..BatchSpec::new(100, 7)
            };
            let inputs: Vec<RecordInput> = records
                .iter()
                .map(|r| RecordInput {
                    timestamp: r.timestamp(&h).expect("ts"),
                    key: r.key.clone(),
                    value: r.value.clone(),
                    headers: r.headers.clone(),
                })
                .collect();
            let ours = build_batch(&spec, &inputs).expect("build");
            check_round_trip(&spec, &inputs, &ours);
            // The uncompressed parts agree byte for byte, except the CRC and
            // the length (compressed sizes differ between implementations).
            assert_eq!(ours[21..61], batch[21..61]);
        }
    }

    #[test]
    fn invalid_inputs_are_refused() {
        let one = [input(0, None, Some(b"v"), &[])];
        assert!(matches!(
            build_batch(&BatchSpec::new(0, -1), &[]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            build_batch(&BatchSpec::new(-1, -1), &one),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            build_batch(&BatchSpec::new(i64::MAX, -1), &one),
            Err(Error::InvalidArgument(_))
        ));
        let two = [
            input(i64::MIN, None, None, &[]),
            input(i64::MAX, None, None, &[]),
        ];
        assert!(matches!(
            build_batch(&BatchSpec::new(0, -1), &two),
            Err(Error::InvalidArgument(_))
        ));
        // The largest representable offset still works.
        let spec = BatchSpec::new(i64::MAX - 2, -1);
        let batch = build_batch(
            &spec,
            &[input(0, None, None, &[]), input(1, None, None, &[])],
        )
        .expect("near max");
        assert_eq!(
            parse_batch(&batch, 0).expect("parse").last_offset(),
            i64::MAX - 1
        );
    }

    #[test]
    fn a_batch_claiming_gigabytes_stops_at_the_default_cap() {
        // 4 GiB of zstd and 1 GiB of gzip and LZ4 stop at
        // MAX_DECOMPRESSED_SIZE (256 MiB) with TooLarge.
        for (codec, total) in [
            (Compression::Zstd, 4usize << 30),
            (Compression::Gzip, 1 << 30),
            (Compression::Lz4, 1 << 30),
        ] {
            let bomb = decompression_bomb(codec, total).expect("bomb");
            assert!(bomb.len() < 5 << 20, "{codec}: {} bytes", bomb.len());
            let h = parse_batch(&bomb, 0).expect("a valid batch");
            let started = std::time::Instant::now();
            let err = decode_records(&h, &bomb).expect_err("too large");
            assert!(
                err.to_string()
                    .contains("decompresses to more than 268435456 bytes"),
                "{codec}: {err}"
            );
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "{codec}: {:?}",
                started.elapsed()
            );
        }
    }

    #[test]
    fn decompression_limit_is_enforced() {
        let inputs = [input(0, None, Some(&vec![b'z'; 1 << 20]), &[])];
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let spec = BatchSpec {
                compression: codec,
                ..BatchSpec::new(10, -1)
            };
            let batch = build_batch(&spec, &inputs).expect("build");
            assert!(batch.len() < 100_000);
            let h = parse_batch(&batch, 0).expect("parse");
            let err = decode_records_with_limit(&h, &batch, 64 * 1024).expect_err("too large");
            let expected = CodecError::TooLarge {
                codec,
                limit: 64 * 1024,
            }
            .to_string();
            assert!(
                matches!(&err, Error::Records { base_offset: 10, reason } if *reason == expected),
                "{codec}: {err}"
            );
            assert_eq!(
                decode_records_with_limit(&h, &batch, (1 << 20) + 64)
                    .expect("fits")
                    .len(),
                1
            );
        }
    }

    #[test]
    fn bad_sections_are_records_errors() {
        let spec = BatchSpec::new(40, -1);
        let batch = build_batch(&spec, &[input(0, Some(b"k"), Some(b"v"), &[])]).expect("build");
        let mut h = parse_batch(&batch, 0).expect("parse");
        // Count mismatch either way.
        h.record_count = 2;
        assert!(matches!(
            decode_records(&h, &batch),
            Err(Error::Records {
                base_offset: 40,
                ..
            })
        ));
        h.record_count = 0;
        assert_eq!(decode_records(&h, &batch).expect("empty batch"), vec![]);
        h.record_count = 1;
        // Buffer shorter than the batch, impossible lengths, codec of a
        // hand-made header.
        assert!(decode_records(&h, &batch[..batch.len() - 1]).is_err());
        for len in [-1, 0, i32::MAX] {
            let bad = BatchHeader {
                batch_length: len,
                ..h
            };
            assert!(decode_records(&bad, &batch).is_err());
        }
        assert!(decode_records(&BatchHeader { attributes: 7, ..h }, &batch).is_err());
        assert!(decode_records(&BatchHeader { attributes: 1, ..h }, &batch).is_err());
        // A buffer holding more than the batch is fine.
        let mut longer = batch.clone();
        longer.extend_from_slice(&[1, 2, 3]);
        assert_eq!(decode_records(&h, &longer).expect("longer").len(), 1);
    }

    fn arb_bytes() -> impl proptest::strategy::Strategy<Value = Option<Vec<u8>>> {
        proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..40))
    }

    fn arb_record() -> impl proptest::strategy::Strategy<Value = RecordInput> {
        use proptest::strategy::Strategy;
        let header = (
            proptest::collection::vec(proptest::char::any(), 0..6),
            arb_bytes(),
        )
            .prop_map(|(k, value)| Header {
                key: k.into_iter().collect(),
                value,
            });
        (
            -(1i64 << 50)..(1i64 << 50),
            arb_bytes(),
            arb_bytes(),
            proptest::collection::vec(header, 0..4),
        )
            .prop_map(|(timestamp, key, value, headers)| RecordInput {
                timestamp,
                key,
                value,
                headers,
            })
    }

    fn arb_codec() -> impl proptest::strategy::Strategy<Value = Compression> {
        proptest::sample::select(ALL.to_vec())
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 128, ..Default::default() })]

        #[test]
        fn random_record_sets_round_trip(
            records in proptest::collection::vec(arb_record(), 1..12),
            codec in arb_codec(),
            base_offset in 0i64..(1 << 40),
            epoch in proptest::num::i32::ANY,
            ts_type in proptest::bool::ANY,
        ) {
            let spec = BatchSpec {
                compression: codec,
                partition_leader_epoch: epoch,
                timestamp_type: if ts_type { TimestampType::LogAppendTime } else { TimestampType::CreateTime },
                base_timestamp: 77,
                ..BatchSpec::new(base_offset, -1)
            };
            let batch = build_batch(&spec, &records).expect("build");
            check_round_trip(&spec, &records, &batch);
        }

        #[test]
        fn random_sections_never_panic(
            section in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
            codec in 0i16..8,
            count in proptest::prop_oneof![0i32..20, proptest::num::i32::ANY],
        ) {
            let mut batch = build_batch(&BatchSpec::new(0, -1), &[input(0, None, None, &[])]).expect("build");
            let base = parse_header(&batch, 0).expect("header");
            batch.truncate(HEADER_SIZE);
            batch.extend_from_slice(&section);
            let h = BatchHeader {
                batch_length: (batch.len() - LOG_OVERHEAD) as i32,
                attributes: codec,
                record_count: count,
                ..base
            };
            let _ = decode_records(&h, &batch);
            let _ = decode_records(&h, &section);
        }

        #[test]
        fn mutated_batches_never_panic(
            codec in arb_codec(),
            mutations in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 1..4),
            cut in proptest::num::usize::ANY,
        ) {
            let spec = BatchSpec { compression: codec, ..BatchSpec::new(5, -1) };
            let inputs = [
                input(10, Some(b"key"), Some(&b"value value value value".repeat(4)), &[("h", Some(b"v"))]),
                input(7, None, None, &[]),
                input(12, Some(b""), Some(b""), &[("", None), ("x", Some(b""))]),
            ];
            let mut batch = build_batch(&spec, &inputs).expect("build");
            for (at, val) in mutations {
                let i = at % batch.len();
                batch[i] = val;
            }
            // Skip the CRC check so that the mutations reach the decoder.
            if let Ok(h) = parse_header(&batch, 0) {
                let _ = decode_records(&h, &batch);
                let _ = decode_control_batch(&h, &batch);
                let cut = cut % (batch.len() + 1);
                let _ = decode_records(&h, &batch[..cut]);
            }
        }
    }
}
