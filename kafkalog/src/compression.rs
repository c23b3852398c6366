//! The five record batch codecs, as Kafka clients write and read them.
//!
//! A compressed v2 batch keeps its 61-byte header uncompressed and replaces
//! the records section with the codec's output. The formats are exactly the
//! ones Java clients (`org.apache.kafka.common.compress`) and kafka-python
//! (`kafka/codec.py`) produce:
//!
//! - **gzip**: an RFC 1952 stream (Java's `GZIPOutputStream`). Concatenated
//!   members are read, as `GZIPInputStream` does. Written at level 6, Kafka's
//!   default.
//! - **snappy**: the xerial framing of snappy-java's `SnappyOutputStream`:
//!
//!   ```text
//!   0   magic    0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
//!   8   version  int32 BE (1)
//!   12  compat   int32 BE (1)
//!   16  chunks   [length int32 BE, raw snappy block of <= 32 KiB input] ...
//!   ```
//!
//!   Reading accepts this framing (including a repeated header between
//!   chunks, as snappy-java does for concatenated streams) and plain raw
//!   snappy (no magic), which snappy-java and kafka-python also accept.
//!   Writing always uses the xerial framing with 32 KiB chunks, like Java.
//! - **lz4**: the LZ4 frame format as Kafka's `Lz4BlockOutputStream` writes
//!   it: magic `04 22 4D 18`, FLG `0x60` (version 1, independent blocks, no
//!   checksums, no content size), BD `0x40` (64 KiB blocks), a correct header
//!   checksum (`04 22 4D 18 60 40 82`), blocks, end mark. Reading also accepts
//!   what python-lz4 writes for kafka-python (content size present) and
//!   linked blocks; it refuses the legacy and skippable-frame magics, which no
//!   Kafka client writes.
//! - **zstd**: a Zstandard stream (any number of frames), written as one frame
//!   at level 3, Kafka's default, with the content size in the frame header
//!   (kafka-python's reader prefers it).
//!
//! Invariants: no input makes [`decompress`] panic, and it never holds more
//! than about `limit` bytes of output: data that would decompress to more
//! than `limit` bytes is refused with [`CodecError::TooLarge`] (zip-bomb
//! protection; see [`MAX_DECOMPRESSED_SIZE`]). For every codec and input,
//! `decompress(c, &compress(c, x)?, x.len()) == Ok(x)`.

use std::io::{Read, Write};

use crate::batch::Compression;

/// Largest records section a batch may decompress to (256 MiB). Kafka's own
/// batches are bounded by `max.message.bytes` (1 MiB by default), so anything
/// near this is corrupt or hostile.
pub const MAX_DECOMPRESSED_SIZE: usize = 256 * 1024 * 1024;

/// Uncompressed bytes per xerial snappy chunk (snappy-java's default block
/// size, and kafka-python's).
pub const SNAPPY_XERIAL_BLOCK_SIZE: usize = 32 * 1024;

/// zstd level used when writing (Kafka's default `compression.zstd.level`).
pub const ZSTD_LEVEL: i32 = 3;

/// First 8 bytes of a xerial-framed snappy stream.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Size of the xerial header: magic, version, compatible version.
const XERIAL_HEADER_SIZE: usize = 16;
/// Version and minimum compatible version snappy-java writes.
const XERIAL_VERSION: i32 = 1;
/// LZ4 frame magic number (little-endian on the wire).
const LZ4_FRAME_MAGIC: u32 = 0x184D_2204;

/// Why data could not be compressed or decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The data decompresses to more than the allowed number of bytes.
    #[error("{codec} data decompresses to more than {limit} bytes")]
    TooLarge {
        /// The codec.
        codec: Compression,
        /// The limit that was exceeded.
        limit: usize,
    },
    /// The data is not valid for the codec (bad magic, truncated, checksum).
    #[error("corrupt {codec} data: {reason}")]
    Corrupt {
        /// The codec.
        codec: Compression,
        /// What is wrong, as the decoder reported it.
        reason: String,
    },
    /// Compressing failed.
    #[error("{codec} compression failed: {reason}")]
    Compress {
        /// The codec.
        codec: Compression,
        /// What the encoder reported.
        reason: String,
    },
}

fn corrupt(codec: Compression, reason: impl ToString) -> CodecError {
    CodecError::Corrupt {
        codec,
        reason: reason.to_string(),
    }
}

fn compress_failed(codec: Compression, reason: impl ToString) -> CodecError {
    CodecError::Compress {
        codec,
        reason: reason.to_string(),
    }
}

/// Decompresses `data` written with `codec`, refusing output longer than
/// `limit` bytes. [`Compression::None`] returns a copy of `data` (also
/// subject to `limit`).
pub fn decompress(codec: Compression, data: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    match codec {
        Compression::None => {
            if data.len() > limit {
                return Err(CodecError::TooLarge { codec, limit });
            }
            Ok(data.to_vec())
        }
        Compression::Gzip => read_limited(codec, flate2::read::MultiGzDecoder::new(data), limit),
        Compression::Snappy => snappy_decompress(data, limit),
        Compression::Lz4 => {
            let magic = data
                .get(..4)
                .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
            if magic != Some(LZ4_FRAME_MAGIC) {
                return Err(corrupt(codec, "not an LZ4 frame (bad magic)"));
            }
            read_limited(codec, lz4_flex::frame::FrameDecoder::new(data), limit)
        }
        Compression::Zstd => {
            let decoder =
                zstd::stream::read::Decoder::with_buffer(data).map_err(|e| corrupt(codec, e))?;
            read_limited(codec, decoder, limit)
        }
    }
}

/// Compresses `data` with `codec` in the format Kafka's Java client writes
/// (see the module documentation). [`Compression::None`] returns a copy.
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, CodecError> {
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            encoder
                .write_all(data)
                .map_err(|e| compress_failed(codec, e))?;
            encoder.finish().map_err(|e| compress_failed(codec, e))
        }
        Compression::Snappy => snappy_compress_xerial(data),
        Compression::Lz4 => {
            use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
            let info = FrameInfo::new()
                .block_size(BlockSize::Max64KB)
                .block_mode(BlockMode::Independent)
                .block_checksums(false)
                .content_checksum(false)
                .content_size(None);
            let mut encoder = FrameEncoder::with_frame_info(info, Vec::new());
            encoder
                .write_all(data)
                .map_err(|e| compress_failed(codec, e))?;
            encoder.finish().map_err(|e| compress_failed(codec, e))
        }
        Compression::Zstd => {
            zstd::bulk::compress(data, ZSTD_LEVEL).map_err(|e| compress_failed(codec, e))
        }
    }
}

/// Reads `reader` to the end, failing once it yields more than `limit` bytes.
fn read_limited(
    codec: Compression,
    reader: impl Read,
    limit: usize,
) -> Result<Vec<u8>, CodecError> {
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut out = Vec::new();
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(codec, e))?;
    if out.len() > limit {
        return Err(CodecError::TooLarge { codec, limit });
    }
    Ok(out)
}

fn is_xerial_header(data: &[u8]) -> bool {
    data.len() >= XERIAL_HEADER_SIZE && data.starts_with(&XERIAL_MAGIC)
}

fn snappy_decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    let codec = Compression::Snappy;
    if !is_xerial_header(data) {
        // A raw snappy block (what `Snappy.compress` or librdkafka without
        // framing produce); snappy-java and kafka-python read it too.
        let mut out = Vec::new();
        snappy_raw_block(data, limit, &mut out)?;
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut pos = 0usize;
    while let Some(rest) = data.get(pos..).filter(|r| !r.is_empty()) {
        if is_xerial_header(rest) {
            // First header, or the header of a concatenated stream.
            pos += XERIAL_HEADER_SIZE;
            continue;
        }
        let Some(len_bytes) = rest.get(..4) else {
            return Err(corrupt(
                codec,
                format!("truncated chunk length at byte {pos}"),
            ));
        };
        let len = i32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let Ok(len) = usize::try_from(len) else {
            return Err(corrupt(
                codec,
                format!("negative chunk length {len} at byte {pos}"),
            ));
        };
        let Some(chunk) = rest.get(4..).and_then(|r| r.get(..len)) else {
            return Err(corrupt(
                codec,
                format!(
                    "chunk of {len} bytes at byte {pos} overruns the {} bytes of data",
                    data.len()
                ),
            ));
        };
        if !chunk.is_empty() {
            snappy_raw_block(chunk, limit, &mut out)?;
        }
        pos += 4 + len;
    }
    Ok(out)
}

/// Decompresses one raw snappy block, appending to `out`, keeping `out`
/// within `limit` bytes (checked against the block's declared length before
/// anything is allocated).
fn snappy_raw_block(block: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let codec = Compression::Snappy;
    let len = snap::raw::decompress_len(block).map_err(|e| corrupt(codec, e))?;
    if len > limit.saturating_sub(out.len()) {
        return Err(CodecError::TooLarge { codec, limit });
    }
    let start = out.len();
    out.resize(start + len, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| corrupt(codec, e))?;
    out.truncate(start + written);
    Ok(())
}

fn snappy_compress_xerial(data: &[u8]) -> Result<Vec<u8>, CodecError> {
    let codec = Compression::Snappy;
    let mut out = Vec::with_capacity(XERIAL_HEADER_SIZE + snap::raw::max_compress_len(data.len()));
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&XERIAL_VERSION.to_be_bytes());
    out.extend_from_slice(&XERIAL_VERSION.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for chunk in data.chunks(SNAPPY_XERIAL_BLOCK_SIZE) {
        let block = encoder
            .compress_vec(chunk)
            .map_err(|e| compress_failed(codec, e))?;
        let len =
            i32::try_from(block.len()).map_err(|_| compress_failed(codec, "chunk too large"))?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&block);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn compressible(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| b"kafka log segment mirror "[i % 25] ^ ((i / 1000) as u8))
            .collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn every_codec_round_trips_and_compresses() {
        for len in [0usize, 1, 100, 65_535, 65_536, 65_537, 300_000] {
            let data = compressible(len);
            for codec in ALL {
                let packed = compress(codec, &data).expect("compress");
                let back = decompress(codec, &packed, data.len()).expect("decompress");
                assert_eq!(back, data, "{codec} len {len}");
                if len >= 65_536 && codec != Compression::None {
                    assert!(packed.len() < data.len() / 4, "{codec} did not compress");
                }
            }
        }
    }

    #[test]
    fn incompressible_data_round_trips() {
        let mut x: u32 = 12345;
        let data: Vec<u8> = (0..200_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        for codec in ALL {
            let packed = compress(codec, &data).expect("compress");
            assert_eq!(
                decompress(codec, &packed, data.len()).expect("decompress"),
                data,
                "{codec}"
            );
        }
    }

    #[test]
    fn lz4_frame_is_kafkas() {
        // Lz4BlockOutputStream: magic, FLG 0x60, BD 0x40, HC 0x82.
        let packed = compress(Compression::Lz4, &compressible(150_000)).expect("compress");
        assert_eq!(&packed[..7], &[0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x82]);
        // Blocks of at most 64 KiB, then the 4-byte end mark, no content checksum.
        assert_eq!(&packed[packed.len() - 4..], &[0, 0, 0, 0]);
        let mut pos = 7;
        let mut blocks = 0;
        loop {
            let word = u32::from_le_bytes(packed[pos..pos + 4].try_into().expect("4"));
            pos += 4;
            if word == 0 {
                break;
            }
            let len = (word & 0x7fff_ffff) as usize;
            assert!(len <= 65_536);
            pos += len;
            blocks += 1;
        }
        assert_eq!(pos, packed.len());
        assert_eq!(blocks, 3);
        // Empty input: header and end mark only.
        let empty = compress(Compression::Lz4, b"").expect("compress");
        assert_eq!(decompress(Compression::Lz4, &empty, 0).expect("empty"), b"");
    }

    #[test]
    fn lz4_reads_hand_built_kafka_frame_with_uncompressed_block() {
        // Header as Kafka writes it, one block stored uncompressed (high bit).
        let mut frame = vec![0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x82];
        frame.extend_from_slice(&(5u32 | 0x8000_0000).to_le_bytes());
        frame.extend_from_slice(b"hello");
        frame.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            decompress(Compression::Lz4, &frame, 5).expect("frame"),
            b"hello"
        );
        // A wrong header checksum is refused (Kafka's reader does too).
        frame[6] = 0x83;
        assert!(matches!(
            decompress(Compression::Lz4, &frame, 5),
            Err(CodecError::Corrupt { .. })
        ));
        // Legacy LZ4 magic is not Kafka's format.
        let legacy = [0x02, 0x21, 0x4C, 0x18, 0, 0, 0, 0];
        assert!(decompress(Compression::Lz4, &legacy, 100).is_err());
    }

    #[test]
    fn snappy_writes_xerial_framing_in_32k_chunks() {
        let data = compressible(70_000);
        let packed = compress(Compression::Snappy, &data).expect("compress");
        assert_eq!(
            &packed[..16],
            &unhex("82534e41505059000000000100000001")[..]
        );
        let mut pos = 16;
        let mut total = 0;
        let mut chunks = 0;
        while pos < packed.len() {
            let len = i32::from_be_bytes(packed[pos..pos + 4].try_into().expect("4")) as usize;
            let block = &packed[pos + 4..pos + 4 + len];
            total += snap::raw::decompress_len(block).expect("raw block");
            pos += 4 + len;
            chunks += 1;
        }
        assert_eq!((chunks, total), (3, 70_000));
    }

    #[test]
    fn snappy_reads_raw_and_concatenated_xerial_streams() {
        let data = compressible(1000);
        let raw = snap::raw::Encoder::new().compress_vec(&data).expect("raw");
        assert_eq!(
            decompress(Compression::Snappy, &raw, 1000).expect("raw"),
            data
        );

        let mut two = compress(Compression::Snappy, &data[..400]).expect("a");
        two.extend_from_slice(&compress(Compression::Snappy, &data[400..]).expect("b"));
        assert_eq!(
            decompress(Compression::Snappy, &two, 1000).expect("concatenated"),
            data
        );

        let header_only = compress(Compression::Snappy, b"").expect("empty");
        assert_eq!(header_only.len(), 16);
        assert_eq!(
            decompress(Compression::Snappy, &header_only, 0).expect("empty"),
            b""
        );

        let mut truncated = compress(Compression::Snappy, &data).expect("c");
        truncated.pop();
        assert!(matches!(
            decompress(Compression::Snappy, &truncated, 1000),
            Err(CodecError::Corrupt { .. })
        ));
        let mut negative = header_only.clone();
        negative.extend_from_slice(&(-1i32).to_be_bytes());
        assert!(decompress(Compression::Snappy, &negative, 1000).is_err());
    }

    /// Records sections of batches written by kafka-python 3.0.12 (python-snappy,
    /// python-lz4, zstandard); see `builder` tests for the whole batches.
    #[test]
    fn reads_kafka_python_payloads() {
        // snappy: xerial framing, one chunk.
        let snappy = unhex(concat!(
            "82534e415050590000000001000000010000005eb303609e020000000a6b65792d30f20168656c6c6f206b61666b6120",
            "fe0c00ae0c004000020a7472616365066162639e0200020205910031fe9100e6910004010232910004040405910032fe",
            "9100e691002c02020a747261636506616263",
        ));
        let out = decompress(Compression::Snappy, &snappy, 1 << 20).expect("snappy");
        assert_eq!(out.len(), 435);
        // lz4: python-lz4 frame with content size (FLG 0x68).
        let lz4 = unhex(concat!(
            "04224d186840b3010000000000006453000000ff0a9e020000000a6b65792d30f20168656c6c6f206b61666b61200c00",
            "59f10200020a7472616365066162639e0200020291001f319100671a01910021040491001f32910067c002020a747261",
            "63650661626300000000",
        ));
        assert_eq!(
            decompress(Compression::Lz4, &lz4, 1 << 20).expect("lz4"),
            out
        );
        assert!(matches!(
            decompress(Compression::Lz4, &lz4, 434),
            Err(CodecError::TooLarge { .. })
        ));
    }

    #[test]
    fn limit_is_enforced_for_every_codec() {
        let data = compressible(100_000);
        for codec in ALL {
            let packed = compress(codec, &data).expect("compress");
            assert_eq!(
                decompress(codec, &packed, 100_000).expect("at limit").len(),
                100_000
            );
            assert_eq!(
                decompress(codec, &packed, 99_999),
                Err(CodecError::TooLarge {
                    codec,
                    limit: 99_999
                }),
                "{codec}"
            );
        }
    }

    #[test]
    fn zip_bomb_is_refused_without_inflating_it() {
        // 64 MiB of zeros compresses to a few KiB; a 1 MiB limit must stop it.
        let zeros = vec![0u8; 64 << 20];
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let packed = compress(codec, &zeros).expect("compress");
            assert!(packed.len() < 4 << 20);
            assert!(
                matches!(
                    decompress(codec, &packed, 1 << 20),
                    Err(CodecError::TooLarge { .. })
                ),
                "{codec}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            for codec in ALL {
                let _ = decompress(codec, &bytes, 1 << 16);
            }
        }

        #[test]
        fn mutated_streams_never_panic(idx in 0usize..4000, val in proptest::num::u8::ANY, cut in 0usize..4000) {
            let data = compressible(3000);
            for codec in ALL {
                let mut packed = compress(codec, &data).expect("compress");
                let i = idx % packed.len().max(1);
                if let Some(b) = packed.get_mut(i) { *b = val; }
                let _ = decompress(codec, &packed, 1 << 16);
                packed.truncate(cut % (packed.len() + 1));
                let _ = decompress(codec, &packed, 1 << 16);
            }
        }

        #[test]
        fn arbitrary_data_round_trips(data in proptest::collection::vec(proptest::num::u8::ANY, 0..3000), rep in 1usize..20) {
            let data: Vec<u8> = data.iter().copied().cycle().take(data.len() * rep).collect();
            for codec in ALL {
                let packed = compress(codec, &data).expect("compress");
                proptest::prop_assert_eq!(&decompress(codec, &packed, data.len()).expect("decompress"), &data);
            }
        }
    }
}
