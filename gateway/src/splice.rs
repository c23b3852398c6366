//! Zero-copy response bodies: a fetch response whose record bytes stay in
//! the segment files until the socket takes them.
//!
//! The response is encoded by the `kafka-protocol` codecs as any other,
//! with a placeholder in each partition's `records` field: a marker of
//! [`MARKER_BYTES`] bytes, a random prefix chosen once per process then the
//! partition's index. [`Splicer::encode`] finds each marker after its
//! length prefix (an `int32` before v12, a compact `uvarint` from v12, the
//! only two ways the codecs write `records`) and cuts the body there: the
//! body is then in-memory parts (everything but the records) and file
//! spans ([`FileSpan`]), sent in order, the spans by `sendfile(2)` on a
//! plaintext socket and by bounded reads on TLS ([`SpanSink`]).
//!
//! Invariants:
//! - a body's bytes, sent, are exactly the response encoded with the
//!   records in memory (`tests` compares the two): every placeholder is
//!   found once, after the length prefix the codec writes, or the
//!   encoding fails and the connection closes (never a zero or a marker
//!   sent as data);
//! - nothing of the records passes through user space on a plaintext
//!   listener; on TLS at most [`TLS_CHUNK`] bytes at a time, in one buffer
//!   reused for the connection's life;
//! - a span that cannot be read whole when sent (its segment cut by a
//!   truncation since it was located) ends the connection: the frame's
//!   size is already on the wire, as Kafka's `FileRecords.writeTo` throws
//!   when a file shrank during a transfer.

use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::Encodable;
use kafkalog::reader::FileSpan;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Bytes of a placeholder: a per-process random prefix and an index.
pub(crate) const MARKER_BYTES: usize = 16;
const PREFIX_BYTES: usize = MARKER_BYTES - 4;

/// Bytes read from a segment at a time for a TLS connection.
pub(crate) const TLS_CHUNK: usize = 1 << 20;

/// The random prefix of this process's placeholders.
fn prefix() -> &'static [u8; PREFIX_BYTES] {
    static PREFIX: std::sync::OnceLock<[u8; PREFIX_BYTES]> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| {
        let mut p = [0u8; PREFIX_BYTES];
        if aws_lc_rs::rand::fill(&mut p).is_err() {
            // Not reached on a working system RNG; still unique enough to
            // never match a response's other bytes by chance (checked:
            // each marker must follow its length prefix).
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                .to_be_bytes();
            p.copy_from_slice(&t[4..]);
        }
        p
    })
}

/// One part of a [`Body`].
#[derive(Debug, Clone)]
pub(crate) enum Part {
    /// Bytes encoded in memory.
    Inline(Bytes),
    /// Whole batches in a segment file.
    File(FileSpan),
}

/// A response body (after the response header): its parts in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Body {
    pub(crate) parts: Vec<Part>,
    /// Bytes of all parts.
    pub(crate) len: u64,
}

impl Body {
    /// The body's bytes in memory (tests and the fuzz entry point, which
    /// answer without a socket).
    pub(crate) fn to_bytes(&self) -> io::Result<BytesMut> {
        let mut out = BytesMut::with_capacity(usize::try_from(self.len).unwrap_or(0));
        for part in &self.parts {
            match part {
                Part::Inline(b) => out.extend_from_slice(b),
                Part::File(span) => {
                    let start = out.len();
                    out.resize(start + span_len(span)?, 0);
                    span.file.read_exact_at(&mut out[start..], span.position)?;
                }
            }
        }
        Ok(out)
    }
}

fn span_len(span: &FileSpan) -> io::Result<usize> {
    usize::try_from(span.len).map_err(|_| io::Error::other("a span larger than memory"))
}

/// Builds a [`Body`]: a placeholder per partition's records, then the
/// encoding.
#[derive(Debug, Default)]
pub(crate) struct Splicer {
    /// The spans of placeholder `i`, and their bytes in all.
    records: Vec<(Vec<FileSpan>, u64)>,
}

impl Splicer {
    /// The `records` value standing for `spans` (empty bytes when there
    /// are none: nothing to splice).
    pub(crate) fn placeholder(&mut self, spans: Vec<FileSpan>) -> Bytes {
        let len: u64 = spans.iter().map(|s| s.len).sum();
        if len == 0 {
            return Bytes::new();
        }
        let index = u32::try_from(self.records.len()).unwrap_or(u32::MAX);
        self.records.push((spans, len));
        let mut marker = Vec::with_capacity(MARKER_BYTES);
        marker.extend_from_slice(prefix());
        marker.extend_from_slice(&index.to_be_bytes());
        Bytes::from(marker)
    }

    /// Encodes `message` at `version` (`flexible`: the version encodes
    /// `records` as compact bytes) and cuts it at every placeholder.
    pub(crate) fn encode<M: Encodable>(
        self,
        message: &M,
        version: i16,
        flexible: bool,
    ) -> Result<Body, String> {
        let mut encoded = BytesMut::new();
        message
            .encode(&mut encoded, version)
            .map_err(|e| format!("encoding the response: {e}"))?;
        let encoded = encoded.freeze();
        let (old_prefix, prefix_len): (&[u8], usize) = if flexible {
            // uvarint(16 + 1)
            (&[MARKER_BYTES as u8 + 1], 1)
        } else {
            (&(MARKER_BYTES as i32).to_be_bytes(), 4)
        };
        let mut body = Body::default();
        let mut cut = 0usize;
        let mut next = 0usize;
        let mut from = 0usize;
        let mut records = self.records.into_iter();
        while let Some(at) = find(&encoded[from..], prefix()).map(|i| from + i) {
            let index_at = at + PREFIX_BYTES;
            let index = encoded
                .get(index_at..index_at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
            let Some(start) = at.checked_sub(prefix_len) else {
                return Err("a records placeholder without its length".into());
            };
            if index != Some(next) || &encoded[start..at] != old_prefix || start < cut {
                return Err(format!("records placeholder {next} not where it was put"));
            }
            let Some((spans, len)) = records.next() else {
                return Err("more records placeholders than records".into());
            };
            body.push_inline(encoded.slice(cut..start));
            let mut length = BytesMut::new();
            if flexible {
                put_uvarint(&mut length, len + 1);
            } else {
                let len = i32::try_from(len).map_err(|_| "records over 2 GiB".to_string())?;
                length.extend_from_slice(&len.to_be_bytes());
            }
            body.push_inline(length.freeze());
            for span in spans {
                body.len += span.len;
                body.parts.push(Part::File(span));
            }
            cut = at + MARKER_BYTES;
            from = cut;
            next += 1;
        }
        if records.next().is_some() {
            return Err("a records placeholder is missing from the encoding".into());
        }
        body.push_inline(encoded.slice(cut..));
        Ok(body)
    }
}

impl Body {
    fn push_inline(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.len += bytes.len() as u64;
            self.parts.push(Part::Inline(bytes));
        }
    }
}

fn put_uvarint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.extend_from_slice(&[(v as u8 & 0x7f) | 0x80]);
        v >>= 7;
    }
    out.extend_from_slice(&[v as u8]);
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        match hay[i..hay.len() - needle.len() + 1]
            .iter()
            .position(|b| *b == first)
        {
            None => return None,
            Some(p) => {
                i += p;
                if &hay[i..i + needle.len()] == needle {
                    return Some(i);
                }
                i += 1;
            }
        }
    }
    None
}

/// A connection's stream, able to send a file span.
pub(crate) trait SpanSink: AsyncWrite + Unpin + Send {
    /// Writes `span`'s bytes; `buf` is the connection's reusable buffer
    /// for streams that must see the bytes (TLS).
    fn send_span<'a>(
        &'a mut self,
        span: &'a FileSpan,
        buf: &'a mut Vec<u8>,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a;
}

fn shrank(span: &FileSpan) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "{} shrank while its bytes {}..{} were sent",
            span.path.display(),
            span.position,
            span.position + span.len
        ),
    )
}

impl SpanSink for tokio::net::TcpStream {
    async fn send_span(&mut self, span: &FileSpan, _buf: &mut Vec<u8>) -> io::Result<()> {
        let end = span.position + span.len;
        let mut offset = span.position;
        while offset < end {
            self.writable().await?;
            let count = usize::try_from(end - offset)
                .unwrap_or(usize::MAX)
                .min(1 << 30);
            let sent = self.try_io(tokio::io::Interest::WRITABLE, || {
                rustix::fs::sendfile(&*self, &*span.file, Some(&mut offset), count)
                    .map_err(io::Error::from)
            });
            match sent {
                Ok(0) => return Err(shrank(span)),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl<S: AsyncWrite + tokio::io::AsyncRead + Unpin + Send> SpanSink
    for tokio_rustls::server::TlsStream<S>
{
    async fn send_span(&mut self, span: &FileSpan, buf: &mut Vec<u8>) -> io::Result<()> {
        let end = span.position + span.len;
        let mut offset = span.position;
        while offset < end {
            let n = usize::try_from(end - offset)
                .unwrap_or(usize::MAX)
                .min(TLS_CHUNK);
            buf.resize(n, 0);
            // Page-cache reads of at most 1 MiB: what every other
            // handler's file reads do on the runtime too.
            span.file
                .read_exact_at(&mut buf[..n], offset)
                .map_err(|e| {
                    if e.kind() == io::ErrorKind::UnexpectedEof {
                        shrank(span)
                    } else {
                        e
                    }
                })?;
            self.write_all(&buf[..n]).await?;
            offset += n as u64;
        }
        Ok(())
    }
}

/// Writes `parts` of a body to `stream`, in order.
pub(crate) async fn write_parts<S: SpanSink>(
    stream: &mut S,
    parts: &[Part],
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    for part in parts {
        match part {
            Part::Inline(b) => stream.write_all(b).await?,
            Part::File(span) => stream.send_span(span, buf).await?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    /// A file of 200 KiB of distinct bytes, and spans over it.
    fn file() -> (tempfile::TempDir, Arc<std::fs::File>, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000000.log");
        let mut f = std::fs::File::create(&path).expect("create");
        let bytes: Vec<u8> = (0..200 * 1024u32)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        f.write_all(&bytes).expect("write");
        let f = std::fs::File::open(&path).expect("open");
        (dir, Arc::new(f), path)
    }

    fn span(
        file: &Arc<std::fs::File>,
        path: &std::path::Path,
        position: u64,
        len: u64,
    ) -> FileSpan {
        FileSpan {
            file: Arc::clone(file),
            path: path.to_path_buf(),
            position,
            len,
        }
    }

    /// Two topics; partitions with no records, one span, two spans (one
    /// of 130 KiB: a 3-byte uvarint length).
    fn response(records: &mut dyn FnMut(usize) -> Option<Bytes>) -> FetchResponse {
        let mut n = 0;
        let topics = ["orders", "payments"]
            .iter()
            .map(|t| {
                let partitions = (0..3)
                    .map(|p| {
                        let r = records(n);
                        n += 1;
                        PartitionData::default()
                            .with_partition_index(p)
                            .with_high_watermark(100 + i64::from(p))
                            .with_records(r)
                    })
                    .collect();
                FetchableTopicResponse::default()
                    .with_topic(StrBytes::from_static_str(t).into())
                    .with_partitions(partitions)
            })
            .collect();
        FetchResponse::default().with_responses(topics)
    }

    #[test]
    fn a_spliced_body_is_byte_for_byte_the_response_with_its_records_in_memory() {
        let (_dir, f, path) = file();
        // Per partition: the spans of its records.
        let layout: Vec<Vec<(u64, u64)>> = vec![
            vec![],
            vec![(0, 1000)],
            vec![(5000, 130 * 1024), (140_000, 60)],
            vec![(17, 1)],
            vec![],
            vec![(199 * 1024, 1024)],
        ];
        let read = |spans: &[(u64, u64)]| -> Bytes {
            let mut out = Vec::new();
            for &(at, len) in spans {
                let mut b = vec![0u8; len as usize];
                f.read_exact_at(&mut b, at).expect("read");
                out.extend_from_slice(&b);
            }
            Bytes::from(out)
        };
        for version in 4..=12 {
            let mut splicer = Splicer::default();
            let spliced = response(&mut |n| {
                let spans = layout[n]
                    .iter()
                    .map(|&(a, l)| span(&f, &path, a, l))
                    .collect();
                Some(splicer.placeholder(spans))
            });
            let body = splicer
                .encode(&spliced, version, version >= 12)
                .expect("encode");
            let mut want = BytesMut::new();
            response(&mut |n| Some(read(&layout[n])))
                .encode(&mut want, version)
                .expect("encode");
            let got = body.to_bytes().expect("read");
            assert_eq!(body.len, want.len() as u64, "v{version}");
            assert_eq!(got, want, "v{version}");
            let files = body
                .parts
                .iter()
                .filter(|p| matches!(p, Part::File(_)))
                .count();
            assert_eq!(files, 5, "v{version}: every span is sent from its file");
        }
    }

    #[test]
    fn a_placeholder_not_where_the_codec_puts_records_fails_the_encoding() {
        let (_dir, f, path) = file();
        // The wrong framing for the version: never sent as data.
        for (version, flexible) in [(11, true), (12, false)] {
            let mut splicer = Splicer::default();
            let r = response(&mut |_| Some(splicer.placeholder(vec![span(&f, &path, 0, 10)])));
            assert!(splicer.encode(&r, version, flexible).is_err(), "v{version}");
        }
        // A placeholder given but left out of the response.
        let mut splicer = Splicer::default();
        let _ = splicer.placeholder(vec![span(&f, &path, 0, 10)]);
        let r = response(&mut |_| None);
        let err = splicer.encode(&r, 12, true).expect_err("missing");
        assert!(err.contains("missing"), "{err}");
    }

    #[tokio::test]
    async fn sendfile_sends_a_span_and_a_span_cut_short_ends_the_connection() {
        use tokio::io::AsyncReadExt;
        let (_dir, f, path) = file();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let reader = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.expect("read");
            got
        });
        let mut out = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut buf = Vec::new();
        out.send_span(&span(&f, &path, 100, 150_000), &mut buf)
            .await
            .expect("send");
        // The file is 200 KiB: a span past its end (a segment truncated
        // since it was located) is an error, not a short response.
        let err = out
            .send_span(&span(&f, &path, 150_000, 60_000), &mut buf)
            .await
            .expect_err("shrank");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
        assert!(buf.is_empty(), "nothing went through user space");
        drop(out);
        let got = reader.await.expect("reader");
        let mut want = vec![0u8; 150_000];
        f.read_exact_at(&mut want, 100).expect("read");
        assert_eq!(&got[..150_000], &want[..]);
    }
}
