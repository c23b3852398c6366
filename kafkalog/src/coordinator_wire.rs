//! A cursor over the bytes of a coordinator record (the keys and values of
//! `__consumer_offsets` and `__transaction_state`), in the encoding of
//! Kafka's generated message classes: big-endian integers, int16-length
//! strings and int32-length arrays and bytes (-1: null), and in flexible
//! versions compact lengths (unsigned varint, 0: null, else length + 1)
//! and tagged fields ending every struct.
//!
//! Invariants: every read is bounded by the bytes left (an array count
//! above them is refused before anything is allocated); nothing panics; an
//! error names the field that could not be read.

/// A field that could not be read, by name.
pub(crate) type Wire<T> = Result<T, &'static str>;

/// A cursor over a record's bytes.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    /// Reading a flexible version.
    pub(crate) flexible: bool,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader {
            buf,
            flexible: false,
        }
    }
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Wire<&'a [u8]> {
        if self.buf.len() < n {
            return Err(what);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    pub(crate) fn i8(&mut self, what: &'static str) -> Wire<i8> {
        Ok(i8::from_be_bytes([self.take(1, what)?[0]]))
    }
    pub(crate) fn i16(&mut self, what: &'static str) -> Wire<i16> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    pub(crate) fn i32(&mut self, what: &'static str) -> Wire<i32> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn i64(&mut self, what: &'static str) -> Wire<i64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }
    /// An unsigned varint (flexible versions' lengths and tags).
    pub(crate) fn uvarint(&mut self, what: &'static str) -> Wire<u64> {
        let mut value = 0u64;
        for shift in (0..35).step_by(7) {
            let b = self.take(1, what)?[0];
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(what)
    }
    /// A length: `None` for null (-1, or 0 in compact form).
    pub(crate) fn length(&mut self, what: &'static str, wide: bool) -> Wire<Option<usize>> {
        if self.flexible {
            let n = self.uvarint(what)?;
            return Ok(if n == 0 {
                None
            } else {
                Some(usize::try_from(n - 1).map_err(|_| what)?)
            });
        }
        let n = if wide {
            i64::from(self.i32(what)?)
        } else {
            i64::from(self.i16(what)?)
        };
        if n < 0 {
            return Ok(None);
        }
        Ok(Some(usize::try_from(n).map_err(|_| what)?))
    }
    pub(crate) fn nullable_string(&mut self, what: &'static str) -> Wire<Option<String>> {
        match self.length(what, false)? {
            None => Ok(None),
            Some(len) => String::from_utf8(self.take(len, what)?.to_vec())
                .map(Some)
                .map_err(|_| what),
        }
    }
    pub(crate) fn string(&mut self, what: &'static str) -> Wire<String> {
        self.nullable_string(what)?.ok_or(what)
    }
    pub(crate) fn skip_bytes(&mut self, what: &'static str) -> Wire<()> {
        if let Some(len) = self.length(what, true)? {
            self.take(len, what)?;
        }
        Ok(())
    }
    /// The tagged fields that end a struct in flexible versions (skipped).
    pub(crate) fn tagged_fields(&mut self) -> Wire<()> {
        self.tagged_fields_each(|_, _| Ok(()))
    }
    /// The tagged fields that end a struct in flexible versions, each
    /// given to `field(tag, bytes)`.
    pub(crate) fn tagged_fields_each(
        &mut self,
        mut field: impl FnMut(u64, &'a [u8]) -> Wire<()>,
    ) -> Wire<()> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint("tagged fields")?;
        for _ in 0..count {
            let tag = self.uvarint("tag")?;
            let size = self.uvarint("tagged field size")?;
            let size = usize::try_from(size).map_err(|_| "tagged field")?;
            field(tag, self.take(size, "tagged field")?)?;
        }
        Ok(())
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf
    }
    /// An array's element count, `None` for a null array.
    pub(crate) fn nullable_array_len(&mut self, what: &'static str) -> Wire<Option<usize>> {
        match self.length(what, true)? {
            // Each element takes at least one byte: refuse absurd counts early.
            Some(n) if n > self.buf.len() => Err(what),
            n => Ok(n),
        }
    }
    pub(crate) fn array_len(&mut self, what: &'static str) -> Wire<usize> {
        let n = self.length(what, true)?.ok_or(what)?;
        // Each element takes at least one byte: refuse absurd counts early.
        if n > self.buf.len() {
            return Err(what);
        }
        Ok(n)
    }
}
