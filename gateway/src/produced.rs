//! What a produced record batch must be before it is written: every batch
//! whole with a correct CRC, and its records decodable, with the records
//! section of a compressed batch decompressing to at most
//! [`MAX_DECOMPRESSED_BATCH_BYTES`].
//!
//! Kafka's broker does the same (`LogValidator` reads every record of a
//! produced batch). Without it a batch whose CRC is right but whose records
//! are garbage, or a small compressed batch that expands to gigabytes (a
//! decompression bomb), would be written to the log and later decompressed
//! by every reader of it: ListOffsets by timestamp, the group coordinator,
//! `backfill export`, the clients.
//!
//! Invariants: [`check_produced`] never allocates more than about twice
//! [`MAX_DECOMPRESSED_BATCH_BYTES`] (the decompressed section) plus the
//! decoded records of one batch, whatever its input; it runs on the log
//! dir's single writer thread, so at most one produced batch is being
//! decompressed at a time.

use std::collections::BTreeMap;

use kafkalog::batch::BatchIter;
use manifest::topic_config::{ConfigValue, ConfigValueError, Enforcement};

/// Largest records section a produced batch may decompress to: 64 MiB, 64
/// times Kafka's default `max.message.bytes` (which bounds the compressed
/// size). A batch that expands past it is refused with CORRUPT_MESSAGE
/// before its whole output has been produced.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 64 << 20;

/// Checks every batch of a produce request's `records` (see the module
/// documentation); the error names the first batch refused.
pub fn check_produced(records: &[u8], limit: usize) -> Result<(), String> {
    let mut batches = 0usize;
    for item in BatchIter::verified(records, 0) {
        let (header, bytes) = item.map_err(|e| format!("produced batch {batches}: {e}"))?;
        kafkalog::records::decode_records_with_limit(&header, bytes, limit)
            .map_err(|e| format!("produced batch {batches}: {e}"))?;
        batches += 1;
    }
    if batches == 0 {
        return Err("no record batch".into());
    }
    Ok(())
}

/// A produced batch over its topic's `max.message.bytes`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("produced batch {index} is {size} bytes, more than the topic's max.message.bytes {max}")]
pub struct TooLarge {
    /// Which batch of the request (from 0).
    pub index: usize,
    /// Its size in bytes, header included (Kafka's `sizeInBytes`).
    pub size: usize,
    /// The limit.
    pub max: i32,
}

/// Kafka's check of a produced request against the topic's
/// `max.message.bytes` (`UnifiedLog.analyzeAndValidateRecords`: every
/// batch, whole, at most the limit), with the limit from the source
/// configs a STOPPED mirror's record holds (`configs`; Kafka's default
/// for a key they lack). Without configs (not a mirror, or a source that
/// shipped none) nothing is checked here. Batches that do not parse are
/// left to [`check_produced`].
pub fn check_max_message_bytes(
    records: &[u8],
    configs: Option<&BTreeMap<String, ConfigValue>>,
) -> Result<Result<(), TooLarge>, ConfigValueError> {
    let Some(configs) = configs else {
        return Ok(Ok(()));
    };
    let max = Enforcement::of(configs)?.max_message_bytes;
    let limit = usize::try_from(max).unwrap_or(0);
    for (index, item) in BatchIter::verified(records, 0).enumerate() {
        let Ok((header, _)) = item else { break };
        if header.size() > limit {
            return Ok(Err(TooLarge {
                index,
                size: header.size(),
                max,
            }));
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::batch::Compression;
    use kafkalog::builder::{BatchSpec, RecordInput, build_batch};

    fn batch(codec: Compression, value: Vec<u8>) -> Vec<u8> {
        let mut spec = BatchSpec::new(0, 0);
        spec.compression = codec;
        let records = [RecordInput {
            timestamp: 1,
            key: None,
            value: Some(value),
            headers: vec![],
        }];
        build_batch(&spec, &records).expect("batch")
    }

    /// A batch whose CRC is right but whose record count is `count`.
    fn with_record_count(mut b: Vec<u8>, count: i32) -> Vec<u8> {
        b[57..61].copy_from_slice(&count.to_be_bytes());
        let crc = kafkalog::batch::compute_crc(&b);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// One row: the max.message.bytes held (`None`: no configs), the
    /// batches' value sizes, the expected refusal (batch index).
    fn limits(max: Option<&str>, values: &[usize], want: Result<Option<usize>, &str>) {
        use manifest::topic_config::ConfigSource;
        let configs: Option<BTreeMap<String, ConfigValue>> = max.map(|m| {
            let v = ConfigValue {
                value: m.to_string(),
                source: ConfigSource::Topic,
            };
            [("max.message.bytes".to_string(), v)].into_iter().collect()
        });
        let records: Vec<u8> = values
            .iter()
            .flat_map(|n| batch(Compression::None, vec![b'v'; *n]))
            .collect();
        let got = check_max_message_bytes(&records, configs.as_ref())
            .map(|r| r.err().map(|t| t.index))
            .map_err(|e| e.key);
        assert_eq!(
            got,
            want.map_err(String::from),
            "max {max:?} values {values:?}"
        );
    }

    #[test]
    fn max_message_bytes_by_row() {
        // A batch of a 100-byte value is 100 + 61 header + ~8 record bytes.
        limits(Some("1000"), &[100, 100], Ok(None));
        limits(Some("150"), &[100], Ok(Some(0)));
        limits(Some("1000"), &[100, 2000], Ok(Some(1)));
        // Exactly at the limit passes (Kafka: refused only when larger).
        let size = batch(Compression::None, vec![b'v'; 100]).len();
        limits(Some(&size.to_string()), &[100], Ok(None));
        limits(Some(&(size - 1).to_string()), &[100], Ok(Some(0)));
        // No configs: not checked here.
        limits(None, &[1 << 21], Ok(None));
        // Configs without the key: Kafka's default (1048588).
        let configs: BTreeMap<String, ConfigValue> = BTreeMap::new();
        let big = batch(Compression::None, vec![b'v'; 1 << 21]);
        assert!(
            check_max_message_bytes(&big, Some(&configs))
                .expect("valid")
                .is_err()
        );
        // A value that is no number: an error naming the key.
        limits(Some("lots"), &[1], Err("max.message.bytes"));
    }

    #[test]
    fn what_a_produced_batch_must_be() {
        let good = batch(Compression::Zstd, b"value".to_vec());
        let mut two = good.clone();
        two.extend_from_slice(&batch(Compression::None, b"v".to_vec()));
        let mut bad_crc = good.clone();
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 1;
        let cases: [(&str, Vec<u8>, usize, bool); 8] = [
            ("one compressed batch", good.clone(), 1 << 20, true),
            ("two batches", two, 1 << 20, true),
            ("nothing", vec![], 1 << 20, false),
            (
                "a torn batch",
                good[..good.len() - 1].to_vec(),
                1 << 20,
                false,
            ),
            ("a wrong CRC", bad_crc, 1 << 20, false),
            (
                "a record count of 2^31-1",
                with_record_count(good.clone(), i32::MAX),
                1 << 20,
                false,
            ),
            (
                "a record count of 2",
                with_record_count(batch(Compression::None, b"v".to_vec()), 2),
                1 << 20,
                false,
            ),
            (
                "expands past the limit",
                batch(Compression::Gzip, vec![0; 4096]),
                4095,
                false,
            ),
        ];
        for (name, records, limit, ok) in cases {
            assert_eq!(check_produced(&records, limit).is_ok(), ok, "{name}");
        }
    }

    #[test]
    fn a_decompression_bomb_is_refused_fast_for_every_codec() {
        // 1 GiB of zeros as repeated codec frames/members (every decoder
        // reads concatenated ones), wrapped in a batch with a correct CRC.
        for codec in [
            Compression::Gzip,
            Compression::Zstd,
            Compression::Lz4,
            Compression::Snappy,
        ] {
            let bomb = kafkalog::builder::decompression_bomb(codec, 1 << 30).expect("bomb");
            let started = std::time::Instant::now();
            let refused = check_produced(&bomb, MAX_DECOMPRESSED_BATCH_BYTES).expect_err("a bomb");
            assert!(
                refused.contains("decompresses to more than"),
                "{codec}: {refused}"
            );
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "{codec}: {:?}",
                started.elapsed()
            );
        }
    }
}
