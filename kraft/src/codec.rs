//! Kafka's flexible message encoding, read side, without IO.
//!
//! Every metadata record (and every KRaft control message) is a "flexible"
//! message: big-endian integers, 16-byte UUIDs, compact strings and arrays
//! (an unsigned varint holding `length + 1`, 0 meaning null), and a tagged
//! field section at the end of every struct (an unsigned varint count, then
//! per field an unsigned varint tag, an unsigned varint size and that many
//! bytes). Unsigned varints are plain LEB128 (Kafka's
//! `ByteUtils.readUnsignedVarint`), read with
//! [`kafkalog::records::decode_unsigned_varint`]; they are not the zigzag
//! varints of the record layer.
//!
//! Invariants: every read is bounds-checked and returns a [`DecodeError`]
//! naming the field and the byte position, never panics; no length or
//! element count read from the input allocates more than the bytes present
//! can hold (an array of `n` int32s needs `4n` bytes left before anything is
//! allocated, any element at least one byte); strings must be UTF-8.

use kafkalog::TopicId;
use kafkalog::records::decode_unsigned_varint;

/// Why a message could not be decoded: the field and the byte position
/// (relative to the start of the buffer given to [`Reader::new`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {position}: {reason}")]
pub struct DecodeError {
    /// The field being read.
    pub what: String,
    /// Byte position of the field.
    pub position: usize,
    /// What is wrong.
    pub reason: String,
}

/// A bounds-checked reader over one message.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Decoding result alias.
pub type DecodeResult<T> = Result<T, DecodeError>;

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Current byte position.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// An error at the current position.
    pub fn error(&self, what: &str, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            what: what.to_string(),
            position: self.pos,
            reason: reason.into(),
        }
    }

    /// Fails unless every byte was read (Kafka rejects trailing bytes).
    pub fn finish(&self, what: &str) -> DecodeResult<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error(what, format!("{n} trailing bytes"))),
        }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &str) -> DecodeResult<&'a [u8]> {
        let left = self.remaining();
        let bytes = self
            .buf
            .get(self.pos..)
            .and_then(|rest| rest.get(..n))
            .ok_or_else(|| self.error(what, format!("needs {n} bytes, {left} left")))?;
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &str) -> DecodeResult<[u8; N]> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// int8.
    pub fn i8(&mut self, what: &str) -> DecodeResult<i8> {
        Ok(i8::from_be_bytes(self.array(what)?))
    }

    /// int16.
    pub fn i16(&mut self, what: &str) -> DecodeResult<i16> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }

    /// uint16.
    pub fn u16(&mut self, what: &str) -> DecodeResult<u16> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    /// int32.
    pub fn i32(&mut self, what: &str) -> DecodeResult<i32> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    /// int64.
    pub fn i64(&mut self, what: &str) -> DecodeResult<i64> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// bool: one byte, non-zero is true (as Java's `readByte() != 0`).
    pub fn bool(&mut self, what: &str) -> DecodeResult<bool> {
        Ok(self.i8(what)? != 0)
    }

    /// uuid: 16 raw bytes.
    pub fn uuid(&mut self, what: &str) -> DecodeResult<TopicId> {
        Ok(TopicId::from_bytes(self.array(what)?))
    }

    /// An unsigned varint (at most 32 bits).
    pub fn uvarint(&mut self, what: &str) -> DecodeResult<u32> {
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        let (v, n) = decode_unsigned_varint(rest).map_err(|e| self.error(what, e.to_string()))?;
        self.pos += n;
        Ok(v)
    }

    /// A compact length: `None` for null (0), else `len`, checked to fit
    /// in the bytes left when each element takes at least `min_element`
    /// bytes.
    fn compact_len(&mut self, what: &str, min_element: usize) -> DecodeResult<Option<usize>> {
        let raw = self.uvarint(what)?;
        let Some(len) = raw.checked_sub(1) else {
            return Ok(None);
        };
        let len = len as usize;
        let need = len.saturating_mul(min_element.max(1));
        if need > self.remaining() {
            return Err(self.error(
                what,
                format!(
                    "length {len} needs at least {need} bytes, {} left",
                    self.remaining()
                ),
            ));
        }
        Ok(Some(len))
    }

    /// A compact nullable string.
    pub fn compact_nullable_string(&mut self, what: &str) -> DecodeResult<Option<String>> {
        let at = self.pos;
        let Some(len) = self.compact_len(what, 1)? else {
            return Ok(None);
        };
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| DecodeError {
                what: what.to_string(),
                position: at,
                reason: "not UTF-8".into(),
            })
    }

    /// A compact non-nullable string (null is an error).
    pub fn compact_string(&mut self, what: &str) -> DecodeResult<String> {
        let at = self.pos;
        self.compact_nullable_string(what)?
            .ok_or_else(|| DecodeError {
                what: what.to_string(),
                position: at,
                reason: "null for a non-nullable string".into(),
            })
    }

    /// A compact nullable array of elements read by `element`, each at
    /// least `min_element` bytes.
    pub fn compact_nullable_array<T>(
        &mut self,
        what: &str,
        min_element: usize,
        mut element: impl FnMut(&mut Reader<'a>) -> DecodeResult<T>,
    ) -> DecodeResult<Option<Vec<T>>> {
        let Some(len) = self.compact_len(what, min_element)? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(element(self)?);
        }
        Ok(Some(out))
    }

    /// A compact non-nullable array (null is an error).
    pub fn compact_array<T>(
        &mut self,
        what: &str,
        min_element: usize,
        element: impl FnMut(&mut Reader<'a>) -> DecodeResult<T>,
    ) -> DecodeResult<Vec<T>> {
        let at = self.pos;
        self.compact_nullable_array(what, min_element, element)?
            .ok_or_else(|| DecodeError {
                what: what.to_string(),
                position: at,
                reason: "null for a non-nullable array".into(),
            })
    }

    /// A compact nullable array of int32.
    pub fn nullable_i32_array(&mut self, what: &str) -> DecodeResult<Option<Vec<i32>>> {
        self.compact_nullable_array(what, 4, |r| r.i32(what))
    }

    /// A compact array of int32.
    pub fn i32_array(&mut self, what: &str) -> DecodeResult<Vec<i32>> {
        self.compact_array(what, 4, |r| r.i32(what))
    }

    /// A compact nullable array of uuids.
    pub fn nullable_uuid_array(&mut self, what: &str) -> DecodeResult<Option<Vec<TopicId>>> {
        self.compact_nullable_array(what, 16, |r| r.uuid(what))
    }

    /// The tagged field section of a struct: calls `field(tag, reader)`
    /// with a reader over exactly that field's bytes for each field; the
    /// callback returns `false` for a tag it does not know, which is then
    /// skipped by its size. A known field's reader must be consumed
    /// exactly. Tags must be strictly increasing, as Java writes and checks
    /// them.
    pub fn tagged_fields(
        &mut self,
        what: &str,
        mut field: impl FnMut(u32, &mut Reader<'a>) -> DecodeResult<bool>,
    ) -> DecodeResult<()> {
        // Each field takes at least two bytes (tag, size).
        let count = self.compact_len_raw(what, 2)?;
        let mut last: Option<u32> = None;
        for _ in 0..count {
            let tag = self.uvarint(what)?;
            if last.is_some_and(|l| tag <= l) {
                return Err(self.error(what, format!("tag {tag} out of order")));
            }
            last = Some(tag);
            let size = self.uvarint(what)? as usize;
            let bytes = self.take(size, what)?;
            let mut sub = Reader::new(bytes);
            let base = self.pos - size;
            let known = field(tag, &mut sub).map_err(|mut e| {
                e.position += base;
                e
            })?;
            if known && sub.remaining() != 0 {
                return Err(DecodeError {
                    what: format!("{what} tag {tag}"),
                    position: base + sub.pos,
                    reason: format!("{} bytes left in the field", sub.remaining()),
                });
            }
        }
        Ok(())
    }

    /// An unsigned varint count (not `+1`), checked against the bytes left.
    fn compact_len_raw(&mut self, what: &str, min_element: usize) -> DecodeResult<usize> {
        let count = self.uvarint(what)? as usize;
        if count.saturating_mul(min_element) > self.remaining() {
            return Err(self.error(
                what,
                format!("{count} entries cannot fit in {} bytes", self.remaining()),
            ));
        }
        Ok(count)
    }

    /// Skips a tagged field section entirely (for structs with no known
    /// tags).
    pub fn skip_tagged_fields(&mut self, what: &str) -> DecodeResult<()> {
        self.tagged_fields(what, |_, _| Ok(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_strings_and_arrays() {
        // "ab", null, "" then [1, 2], null array.
        let buf = [3, b'a', b'b', 0, 1, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0];
        let mut r = Reader::new(&buf);
        assert_eq!(r.compact_string("s").expect("s"), "ab");
        assert_eq!(r.compact_nullable_string("n").expect("n"), None);
        assert_eq!(r.compact_string("e").expect("e"), "");
        assert_eq!(r.i32_array("a").expect("a"), vec![1, 2]);
        assert_eq!(r.nullable_i32_array("na").expect("na"), None);
        r.finish("end").expect("all read");
    }

    #[test]
    fn hostile_lengths_are_errors_before_allocating() {
        // A string of 2^32-2 bytes and an array of 2^32-2 ints, in 5 bytes.
        let huge = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(Reader::new(&huge).compact_string("s").is_err());
        assert!(Reader::new(&huge).i32_array("a").is_err());
        assert!(Reader::new(&huge).skip_tagged_fields("t").is_err());
        // An array of 3 ints with the bytes of 2.
        let short = [4, 0, 0, 0, 1, 0, 0, 0, 2];
        let e = Reader::new(&short)
            .i32_array("replicas")
            .expect_err("short");
        assert!(e.to_string().contains("replicas"), "{e}");
        // Null for a non-nullable string, bad UTF-8.
        assert!(Reader::new(&[0]).compact_string("s").is_err());
        assert!(Reader::new(&[2, 0xff]).compact_string("s").is_err());
    }

    #[test]
    fn unknown_tags_are_skipped_by_size_and_known_ones_read() {
        // Two fields: tag 0 (int32 7), tag 9 (3 unknown bytes).
        let buf = [2, 0, 4, 0, 0, 0, 7, 9, 3, 1, 2, 3];
        let mut seen = None;
        let mut r = Reader::new(&buf);
        r.tagged_fields("tags", |tag, f| match tag {
            0 => {
                seen = Some(f.i32("t0")?);
                Ok(true)
            }
            _ => Ok(false),
        })
        .expect("tags");
        r.finish("end").expect("all read");
        assert_eq!(seen, Some(7));
        // Out-of-order tags and a known field with bytes left are errors.
        let unordered = [2, 5, 0, 1, 0];
        assert!(Reader::new(&unordered).skip_tagged_fields("t").is_err());
        let long = [1, 0, 5, 0, 0, 0, 7, 0];
        let r = Reader::new(&long).tagged_fields("t", |_, f| f.i32("x").map(|_| true));
        assert!(r.is_err());
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_through_every_reader_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let mut r = Reader::new(&bytes);
            let _ = r.compact_nullable_string("s");
            let _ = r.nullable_i32_array("a");
            let _ = r.nullable_uuid_array("u");
            let _ = r.compact_array("st", 2, |r| r.skip_tagged_fields("t"));
            let _ = r.tagged_fields("t", |tag, f| match tag {
                0 => f.i32("x").map(|_| true),
                _ => Ok(false),
            });
            let _ = r.uvarint("v");
            let _ = r.finish("end");
        }
    }
}
