//! The records inside a v2 batch, and transaction control records.
//!
//! After the 61-byte batch header (see [`crate::batch`]) comes the records
//! section, compressed as a whole by the batch's codec (see
//! [`crate::compression`]). Uncompressed, it is `recordCount` records laid
//! out as Kafka's `DefaultRecord`:
//!
//! ```text
//! length          varint   bytes of the record after this field
//! attributes      int8     unused, 0
//! timestampDelta  varlong  timestamp - batch baseTimestamp
//! offsetDelta     varint   offset - batch baseOffset
//! keyLength       varint   -1 = null key
//! key             bytes
//! valueLength     varint   -1 = null value
//! value           bytes
//! headersCount    varint
//! headers         headerKeyLength varint, headerKey UTF-8,
//!                 headerValueLength varint (-1 = null), headerValue
//! ```
//!
//! Varints are zigzag-encoded LEB128, as protobuf's `sint32`/`sint64`: at
//! most 5 bytes for a varint, 10 for a varlong.
//!
//! A control batch (attribute bit 5) holds one control record whose key is
//! `version int16 (0), type int16` (0 = ABORT, 1 = COMMIT, others are KRaft
//! records) and, for ABORT/COMMIT, whose value is `version int16 (0),
//! coordinatorEpoch int32` (Kafka's `ControlRecordType`, `EndTransactionMarker`).
//!
//! Invariants: [`decode_records`] returns exactly `recordCount` records and
//! fails when the section holds fewer, more (trailing bytes), or a record
//! whose fields do not fill its declared length exactly, as Kafka's
//! `DefaultRecordBatch` iterator does. It never panics, never allocates more
//! than a small multiple of its input (record counts and lengths are checked
//! against the bytes actually present) and never decompresses more than
//! [`MAX_DECOMPRESSED_SIZE`] bytes. Like Java, a negative key or value length
//! is read as null, and header keys that are not valid UTF-8 are decoded
//! lossily (U+FFFD), so decoding then re-encoding such a record is not
//! byte-exact; Kafka's own writers never produce either.

use crate::Error;
use crate::batch::{BatchHeader, Compression, HEADER_SIZE, LOG_OVERHEAD};
use crate::compression::{MAX_DECOMPRESSED_SIZE, decompress};

/// A record header: a UTF-8 key and an optional value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// Header key (never null in Kafka).
    pub key: String,
    /// Header value, `None` for null.
    pub value: Option<Vec<u8>>,
}

/// One record of a v2 batch, as stored (deltas relative to the batch header).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Record {
    /// Offset minus the batch's base offset.
    pub offset_delta: i32,
    /// Timestamp minus the batch's base timestamp.
    pub timestamp_delta: i64,
    /// Record key, `None` for null.
    pub key: Option<Vec<u8>>,
    /// Record value, `None` for null (a tombstone).
    pub value: Option<Vec<u8>>,
    /// Record headers, in order.
    pub headers: Vec<Header>,
}

impl Record {
    /// The record's offset in the batch described by `header`, or `None` if
    /// it overflows.
    pub fn offset(&self, header: &BatchHeader) -> Option<i64> {
        header.base_offset.checked_add(i64::from(self.offset_delta))
    }

    /// The record's timestamp as stored (base timestamp plus delta; for
    /// log-append-time batches Kafka reports the batch's max timestamp
    /// instead), or `None` if it overflows.
    pub fn timestamp(&self, header: &BatchHeader) -> Option<i64> {
        header.base_timestamp.checked_add(self.timestamp_delta)
    }
}

/// Why a varint could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    /// The buffer ended inside the varint.
    #[error("truncated varint")]
    Truncated,
    /// More bytes (or bits) than the type holds.
    #[error("varint too long")]
    TooLong,
}

/// Appends `value` as a zigzag varint (1 to 5 bytes).
pub fn encode_varint(value: i32, out: &mut Vec<u8>) {
    let mut v = ((value << 1) ^ (value >> 31)) as u32;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `value` as a zigzag varlong (1 to 10 bytes).
pub fn encode_varlong(value: i64, out: &mut Vec<u8>) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes [`encode_varint`] writes for `value`.
pub fn varint_size(value: i32) -> usize {
    let v = ((value << 1) ^ (value >> 31)) as u32;
    (32 - v.leading_zeros() as usize).max(1).div_ceil(7)
}

/// Bytes [`encode_varlong`] writes for `value`.
pub fn varlong_size(value: i64) -> usize {
    let v = ((value << 1) ^ (value >> 63)) as u64;
    (64 - v.leading_zeros() as usize).max(1).div_ceil(7)
}

/// Reads an unsigned LEB128 of at most `bits` bits from the start of `buf`.
fn decode_uleb(buf: &[u8], bits: u32) -> Result<(u64, usize), VarintError> {
    let mut value: u64 = 0;
    let mut shift: u32 = 0;
    for (i, &b) in buf.iter().enumerate() {
        let payload = u64::from(b & 0x7f);
        // Bits of this byte that do not fit the type must be zero.
        if shift + 7 > bits && (payload >> (bits - shift)) != 0 {
            return Err(VarintError::TooLong);
        }
        value |= payload << shift;
        if b & 0x80 == 0 {
            return Ok((value, i + 1));
        }
        shift += 7;
        if shift >= bits {
            return Err(VarintError::TooLong);
        }
    }
    Err(VarintError::Truncated)
}

/// Decodes an unsigned (not zigzag) LEB128 varint of at most 32 bits from
/// the start of `buf`, as Kafka's `ByteUtils.readUnsignedVarint` (used by the
/// flexible message encoding, not by records): the value and the number of
/// bytes it took.
pub fn decode_unsigned_varint(buf: &[u8]) -> Result<(u32, usize), VarintError> {
    let (raw, n) = decode_uleb(buf, 32)?;
    Ok((raw as u32, n))
}

/// Decodes a zigzag varint from the start of `buf`: the value and the number
/// of bytes it took.
pub fn decode_varint(buf: &[u8]) -> Result<(i32, usize), VarintError> {
    let (raw, n) = decode_uleb(buf, 32)?;
    let raw = raw as u32;
    Ok((((raw >> 1) as i32) ^ -((raw & 1) as i32), n))
}

/// Decodes a zigzag varlong from the start of `buf`: the value and the number
/// of bytes it took.
pub fn decode_varlong(buf: &[u8]) -> Result<(i64, usize), VarintError> {
    let (raw, n) = decode_uleb(buf, 64)?;
    Ok((((raw >> 1) as i64) ^ -((raw & 1) as i64), n))
}

/// A bounds-checked reader over a byte slice; every error is a message.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    fn remaining(&self) -> usize {
        self.rest().len()
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        let b = *self
            .rest()
            .first()
            .ok_or_else(|| format!("{what}: no bytes left"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self, what: &str) -> Result<i32, String> {
        let (v, n) = decode_varint(self.rest()).map_err(|e| format!("{what}: {e}"))?;
        self.pos += n;
        Ok(v)
    }

    fn varlong(&mut self, what: &str) -> Result<i64, String> {
        let (v, n) = decode_varlong(self.rest()).map_err(|e| format!("{what}: {e}"))?;
        self.pos += n;
        Ok(v)
    }

    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8], String> {
        let left = self.remaining();
        let bytes = self
            .rest()
            .get(..len)
            .ok_or_else(|| format!("{what} of {len} bytes but only {left} left"))?;
        self.pos += len;
        Ok(bytes)
    }

    /// A varint length then that many bytes; a negative length is null.
    fn nullable_bytes(&mut self, what: &str) -> Result<Option<&'a [u8]>, String> {
        let len = self.varint(what)?;
        match usize::try_from(len) {
            Ok(len) => self.take(len, what).map(Some),
            Err(_) => Ok(None),
        }
    }
}

/// The smallest possible encoded record: length, attributes, timestamp
/// delta, offset delta, key length, value length and header count, one byte
/// each.
const MIN_RECORD_SIZE: usize = 7;

fn read_record(cur: &mut Cursor<'_>) -> Result<Record, String> {
    let length = cur.varint("record length")?;
    let length = usize::try_from(length).map_err(|_| format!("negative record length {length}"))?;
    let mut body = Cursor::new(cur.take(length, "record")?);
    let _attributes = body.u8("attributes")?;
    let timestamp_delta = body.varlong("timestamp delta")?;
    let offset_delta = body.varint("offset delta")?;
    let key = body.nullable_bytes("key")?.map(<[u8]>::to_vec);
    let value = body.nullable_bytes("value")?.map(<[u8]>::to_vec);
    let count = body.varint("header count")?;
    let count = usize::try_from(count).map_err(|_| format!("negative header count {count}"))?;
    // Each header takes at least two bytes (key length, value length).
    if count > body.remaining() / 2 {
        return Err(format!(
            "{count} headers cannot fit in the {} bytes left",
            body.remaining()
        ));
    }
    let mut headers = Vec::with_capacity(count);
    for i in 0..count {
        let key_len = body.varint("header key length")?;
        let key_len = usize::try_from(key_len)
            .map_err(|_| format!("header {i}: negative header key length {key_len}"))?;
        let key = String::from_utf8_lossy(body.take(key_len, "header key")?).into_owned();
        let value = body.nullable_bytes("header value")?.map(<[u8]>::to_vec);
        headers.push(Header { key, value });
    }
    if body.remaining() != 0 {
        return Err(format!(
            "record length says {length} bytes but its fields end {} bytes earlier",
            body.remaining()
        ));
    }
    Ok(Record {
        offset_delta,
        timestamp_delta,
        key,
        value,
        headers,
    })
}

/// Parses exactly `count` records filling `data` (an uncompressed records
/// section). Errors are messages naming the record and byte position.
pub(crate) fn parse_records(data: &[u8], count: usize) -> Result<Vec<Record>, String> {
    let mut records = Vec::with_capacity(count.min(data.len() / MIN_RECORD_SIZE));
    let mut cur = Cursor::new(data);
    for i in 0..count {
        let at = cur.pos;
        if cur.remaining() == 0 {
            return Err(format!("section ends after {i} of {count} records"));
        }
        let record = read_record(&mut cur).map_err(|e| format!("record {i} at byte {at}: {e}"))?;
        records.push(record);
    }
    if cur.remaining() != 0 {
        return Err(format!(
            "{} bytes left after the last of {count} records",
            cur.remaining()
        ));
    }
    Ok(records)
}

/// Encodes one record in `DefaultRecord` layout onto `out`. Fails only when a
/// length does not fit a varint (more than `i32::MAX` bytes).
pub(crate) fn encode_record(
    out: &mut Vec<u8>,
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header],
) -> Result<(), String> {
    fn len_of(bytes: Option<&[u8]>, what: &str) -> Result<i32, String> {
        match bytes {
            None => Ok(-1),
            Some(b) => i32::try_from(b.len())
                .map_err(|_| format!("{what} of {} bytes is too long", b.len())),
        }
    }
    let mut body = Vec::new();
    body.push(0u8); // attributes: unused
    encode_varlong(timestamp_delta, &mut body);
    encode_varint(offset_delta, &mut body);
    for (bytes, what) in [(key, "key"), (value, "value")] {
        encode_varint(len_of(bytes, what)?, &mut body);
        body.extend_from_slice(bytes.unwrap_or(&[]));
    }
    let count = i32::try_from(headers.len()).map_err(|_| "too many headers".to_string())?;
    encode_varint(count, &mut body);
    for h in headers {
        encode_varint(len_of(Some(h.key.as_bytes()), "header key")?, &mut body);
        body.extend_from_slice(h.key.as_bytes());
        let value = h.value.as_deref();
        encode_varint(len_of(value, "header value")?, &mut body);
        body.extend_from_slice(value.unwrap_or(&[]));
    }
    let length = i32::try_from(body.len())
        .map_err(|_| format!("record of {} bytes is too long", body.len()))?;
    encode_varint(length, out);
    out.extend_from_slice(&body);
    Ok(())
}

/// Decodes the records of the batch `batch` described by `header` (as
/// returned by [`crate::batch::parse_header`] for these bytes), decompressing
/// the records section with the batch's codec. `batch` starts at the batch's
/// first byte and holds at least the whole batch. The CRC is not checked
/// here: use [`crate::batch::parse_batch`] or a verified
/// [`crate::batch::BatchIter`] first.
///
/// A batch with a record count of 0 (left by compaction) yields no records
/// without its section being read, as in Kafka.
pub fn decode_records(header: &BatchHeader, batch: &[u8]) -> crate::Result<Vec<Record>> {
    decode_records_with_limit(header, batch, MAX_DECOMPRESSED_SIZE)
}

/// [`decode_records`] with an explicit cap on the decompressed size of the
/// records section (exceeding it is an error).
pub fn decode_records_with_limit(
    header: &BatchHeader,
    batch: &[u8],
    limit: usize,
) -> crate::Result<Vec<Record>> {
    let err = |reason: String| Error::Records {
        base_offset: header.base_offset,
        reason,
    };
    let size = usize::try_from(header.batch_length)
        .ok()
        .and_then(|len| len.checked_add(LOG_OVERHEAD))
        .filter(|&size| size >= HEADER_SIZE)
        .ok_or_else(|| err(format!("impossible batch length {}", header.batch_length)))?;
    let section = batch
        .get(HEADER_SIZE..size)
        .ok_or_else(|| err(format!("batch needs {size} bytes, {} given", batch.len())))?;
    let count = usize::try_from(header.record_count)
        .map_err(|_| err(format!("negative record count {}", header.record_count)))?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let codec_id = header.attributes & 0x07;
    let codec = Compression::from_id(codec_id)
        .ok_or_else(|| err(format!("unknown compression codec {codec_id}")))?;
    let decompressed;
    let data = if codec == Compression::None {
        section
    } else {
        decompressed = decompress(codec, section, limit).map_err(|e| err(e.to_string()))?;
        &decompressed[..]
    };
    let where_ = if codec == Compression::None {
        ""
    } else {
        " (decompressed)"
    };
    parse_records(data, count).map_err(|e| err(format!("{e}{where_}")))
}

/// The type of a control record (key field `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlType {
    /// Transaction aborted (type 0).
    Abort,
    /// Transaction committed (type 1).
    Commit,
    /// Any other type (KRaft: 2 leader change, 3/4 snapshot header/footer,
    /// 5 KRaft version, 6 voters, ...).
    Other(i16),
}

impl ControlType {
    /// The type id stored in the control record key.
    pub fn id(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
            ControlType::Other(id) => id,
        }
    }

    /// The control type for an id.
    pub fn from_id(id: i16) -> ControlType {
        match id {
            0 => ControlType::Abort,
            1 => ControlType::Commit,
            other => ControlType::Other(other),
        }
    }
}

/// What a control record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ControlMarker {
    /// The control type.
    pub kind: ControlType,
    /// Epoch of the transaction coordinator that wrote an ABORT/COMMIT
    /// marker; -1 for other control types, whose value is not an
    /// end-transaction marker and is not read.
    pub coordinator_epoch: i32,
}

/// Why a control record could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid control record: {reason}")]
pub struct ControlRecordError {
    /// What is wrong.
    pub reason: String,
}

fn be_i16_at(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be_i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

/// Parses a control record (one from a batch with the control attribute),
/// as Kafka's `ControlRecordType.parse` and `EndTransactionMarker.deserialize`
/// do: the key must have at least 4 bytes and a non-negative version (newer
/// versions are read as version 0); for ABORT/COMMIT the value must have at
/// least 6 bytes and a non-negative version.
pub fn parse_control_record(record: &Record) -> Result<ControlMarker, ControlRecordError> {
    let fail = |reason: String| ControlRecordError { reason };
    let key = record
        .key
        .as_deref()
        .ok_or_else(|| fail("null key".into()))?;
    let (Some(version), Some(type_id)) = (be_i16_at(key, 0), be_i16_at(key, 2)) else {
        return Err(fail(format!("key of {} bytes, need at least 4", key.len())));
    };
    if version < 0 {
        return Err(fail(format!("negative key version {version}")));
    }
    let kind = ControlType::from_id(type_id);
    if let ControlType::Other(_) = kind {
        return Ok(ControlMarker {
            kind,
            coordinator_epoch: -1,
        });
    }
    let value = record
        .value
        .as_deref()
        .ok_or_else(|| fail("null value for an end-transaction marker".into()))?;
    let (Some(version), Some(coordinator_epoch)) = (be_i16_at(value, 0), be_i32_at(value, 2))
    else {
        return Err(fail(format!(
            "end-transaction marker value of {} bytes, need at least 6",
            value.len()
        )));
    };
    if version < 0 {
        return Err(fail(format!(
            "negative end-transaction marker version {version}"
        )));
    }
    Ok(ControlMarker {
        kind,
        coordinator_epoch,
    })
}

/// Decodes a control batch and parses its control record (the first; Kafka
/// writes exactly one). Fails if the batch is not a control batch or holds no
/// records.
pub fn decode_control_batch(header: &BatchHeader, batch: &[u8]) -> crate::Result<ControlMarker> {
    let err = |reason: String| Error::Records {
        base_offset: header.base_offset,
        reason,
    };
    if !header.is_control() {
        return Err(err("not a control batch".into()));
    }
    let records = decode_records(header, batch)?;
    let first = records
        .first()
        .ok_or_else(|| err("control batch without records".into()))?;
    parse_control_record(first).map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc32(v: i32) -> Vec<u8> {
        let mut out = Vec::new();
        encode_varint(v, &mut out);
        out
    }

    fn enc64(v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_varlong(v, &mut out);
        out
    }

    #[test]
    fn varints_match_kafka_byte_utils() {
        // Vectors from Kafka's ByteUtilsTest (zigzag LEB128).
        let cases: [(i32, &[u8]); 9] = [
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (-65, &[0x81, 0x01]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for (v, bytes) in cases {
            assert_eq!(enc32(v), bytes, "{v}");
            assert_eq!(varint_size(v), bytes.len());
            assert_eq!(decode_varint(bytes), Ok((v, bytes.len())));
        }
        assert_eq!(
            enc64(i64::MAX),
            [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        assert_eq!(
            enc64(i64::MIN),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        for v in [
            0i64,
            -1,
            1,
            300,
            -300,
            i64::from(i32::MIN) - 1,
            i64::MAX,
            i64::MIN,
        ] {
            let b = enc64(v);
            assert_eq!(varlong_size(v), b.len());
            assert_eq!(decode_varlong(&b), Ok((v, b.len())));
        }
    }

    #[test]
    fn unsigned_varints_are_not_zigzag() {
        assert_eq!(decode_unsigned_varint(&[0x00]), Ok((0, 1)));
        assert_eq!(decode_unsigned_varint(&[0x01]), Ok((1, 1)));
        assert_eq!(decode_unsigned_varint(&[0x80, 0x01]), Ok((128, 2)));
        assert_eq!(
            decode_unsigned_varint(&[0xff, 0xff, 0xff, 0xff, 0x0f]),
            Ok((u32::MAX, 5))
        );
        assert_eq!(
            decode_unsigned_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(VarintError::TooLong)
        );
        assert_eq!(decode_unsigned_varint(&[0x80]), Err(VarintError::Truncated));
    }

    #[test]
    fn bad_varints_are_errors() {
        assert_eq!(decode_varint(&[]), Err(VarintError::Truncated));
        assert_eq!(decode_varint(&[0x80, 0x80]), Err(VarintError::Truncated));
        assert_eq!(
            decode_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(VarintError::TooLong)
        );
        assert_eq!(
            decode_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            Err(VarintError::TooLong)
        );
        assert_eq!(decode_varlong(&[0xff; 10]), Err(VarintError::TooLong));
        assert_eq!(
            decode_varlong(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]),
            Err(VarintError::TooLong)
        );
    }

    fn encode(records: &[Record]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            encode_record(
                &mut out,
                r.offset_delta,
                r.timestamp_delta,
                r.key.as_deref(),
                r.value.as_deref(),
                &r.headers,
            )
            .expect("encode");
        }
        out
    }

    #[test]
    fn records_round_trip_and_match_kafka_layout() {
        let records = vec![
            Record {
                offset_delta: 0,
                timestamp_delta: 0,
                key: Some(b"k".to_vec()),
                value: Some(b"v1".to_vec()),
                headers: vec![],
            },
            Record {
                offset_delta: 1,
                timestamp_delta: -2,
                key: None,
                value: Some(b"x".to_vec()),
                headers: vec![
                    Header {
                        key: "h".into(),
                        value: Some(b"1".to_vec()),
                    },
                    Header {
                        key: "n".into(),
                        value: None,
                    },
                ],
            },
        ];
        let bytes = encode(&records);
        assert_eq!(
            bytes,
            [
                0x12, 0x00, 0x00, 0x00, 0x02, b'k', 0x04, b'v', b'1', 0x00, // record 0
                0x1c, 0x00, 0x03, 0x02, 0x01, 0x02, b'x', 0x04, 0x02, b'h', 0x02, b'1', 0x02, b'n',
                0x01,
            ]
        );
        assert_eq!(parse_records(&bytes, 2).expect("parse"), records);
    }

    #[test]
    fn structural_errors_are_reported() {
        let one = encode(&[Record {
            value: Some(b"abc".to_vec()),
            ..Record::default()
        }]);
        // Fewer records than declared, trailing bytes, bad record lengths.
        assert!(
            parse_records(&one, 2)
                .expect_err("short")
                .contains("after 1 of 2")
        );
        let mut trailing = one.clone();
        trailing.push(0);
        assert!(
            parse_records(&trailing, 1)
                .expect_err("trailing")
                .contains("1 bytes left")
        );
        let mut long = one.clone();
        long[0] += 4; // length + 2
        long.extend_from_slice(&[0, 0]);
        assert!(
            parse_records(&long, 1)
                .expect_err("long")
                .contains("fields end 2 bytes earlier")
        );
        let mut short = one.clone();
        short[0] -= 4; // length - 2
        assert!(parse_records(&short, 1).is_err());
        assert!(
            parse_records(&[0x01], 1)
                .expect_err("negative")
                .contains("negative record length")
        );
        // A header count far beyond the bytes present.
        let bad_headers = [0x16, 0, 0, 0, 0x01, 0x01, 0xfe, 0xff, 0xff, 0xff, 0x0f, 0];
        assert!(
            parse_records(&bad_headers, 1)
                .expect_err("headers")
                .contains("cannot fit")
        );
        // Negative header key length.
        let neg_key = [0x10, 0, 0, 0, 0x01, 0x01, 0x02, 0x01, 0x01];
        assert!(
            parse_records(&neg_key, 1)
                .expect_err("neg key")
                .contains("negative header key length")
        );
        // Negative key/value lengths other than -1 read as null, as in Java.
        let neg = [0x0c, 0, 0, 0, 0x03, 0x05, 0x00];
        assert_eq!(
            parse_records(&neg, 1).expect("null"),
            vec![Record::default()]
        );
    }

    #[test]
    fn control_records_parse_like_kafka() {
        let rec = |key: Option<&[u8]>, value: Option<&[u8]>| Record {
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            ..Record::default()
        };
        let commit = rec(Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 9]));
        assert_eq!(
            parse_control_record(&commit),
            Ok(ControlMarker {
                kind: ControlType::Commit,
                coordinator_epoch: 9
            })
        );
        let abort = rec(Some(&[0, 0, 0, 0]), Some(&[0, 0, 0xff, 0xff, 0xff, 0xfe]));
        assert_eq!(
            parse_control_record(&abort),
            Ok(ControlMarker {
                kind: ControlType::Abort,
                coordinator_epoch: -2
            })
        );
        // Newer versions with longer payloads are read as version 0.
        let newer = rec(Some(&[0, 3, 0, 1, 7]), Some(&[0, 1, 0, 0, 0, 4, 0xaa]));
        assert_eq!(
            parse_control_record(&newer)
                .expect("newer")
                .coordinator_epoch,
            4
        );
        let leader_change = rec(Some(&[0, 0, 0, 2]), Some(&[0, 0, 1]));
        assert_eq!(
            parse_control_record(&leader_change),
            Ok(ControlMarker {
                kind: ControlType::Other(2),
                coordinator_epoch: -1
            })
        );
        for bad in [
            rec(None, Some(&[0, 0, 0, 0, 0, 0])),
            rec(Some(&[0, 0, 0]), Some(&[0, 0, 0, 0, 0, 0])),
            rec(Some(&[0x80, 0, 0, 0]), Some(&[0, 0, 0, 0, 0, 0])),
            rec(Some(&[0, 0, 0, 1]), None),
            rec(Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0])),
            rec(Some(&[0, 0, 0, 1]), Some(&[0xff, 0xff, 0, 0, 0, 0])),
        ] {
            assert!(parse_control_record(&bad).is_err(), "{bad:?}");
        }
        assert_eq!(ControlType::from_id(7), ControlType::Other(7));
        assert_eq!(ControlType::Other(7).id(), 7);
        assert_eq!(
            ControlType::from_id(ControlType::Abort.id()),
            ControlType::Abort
        );
    }

    proptest::proptest! {
        #[test]
        fn varints_round_trip(a in proptest::num::i32::ANY, b in proptest::num::i64::ANY) {
            let ea = enc32(a);
            proptest::prop_assert_eq!(decode_varint(&ea), Ok((a, ea.len())));
            proptest::prop_assert_eq!(ea.len(), varint_size(a));
            let eb = enc64(b);
            proptest::prop_assert_eq!(decode_varlong(&eb), Ok((b, eb.len())));
            proptest::prop_assert_eq!(eb.len(), varlong_size(b));
        }

        #[test]
        fn random_sections_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300), count in 0usize..50) {
            let _ = parse_records(&bytes, count);
            let _ = decode_varint(&bytes);
            let _ = decode_varlong(&bytes);
        }
    }
}
