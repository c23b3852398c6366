//! Uploading one planned range: the segment's bytes, unchanged, streamed
//! with bounded memory.
//!
//! A blocking reader reads the range batch by batch, checks every CRC
//! again and recomputes what the plan said (offsets, count, epochs,
//! timestamps), and hands chunks through a small channel to the uploader,
//! which computes the object's CRC-32C on the way and writes:
//! - objects up to the part size with one create-if-absent PUT;
//! - larger ones as a multipart upload of `part_size` parts, two in
//!   flight. If anything fails (the store, or the reader finding that the
//!   file changed since it was planned), the upload is aborted before it is
//!   completed, so no object appears.
//!
//! A create-if-absent PUT answered "already exists" is not a lost race:
//! data keys hold an upload id only this upload uses, so the object there
//! is normally this upload's own, written by an attempt whose answer was
//! lost (the store client retried and its retry found the object). The
//! same goes for a multipart completion that fails: it may have landed.
//! The uploader then reads the key back, a HEAD for the size and a GET for
//! the CRC-32C (both counted by the request metrics like any request), and
//! counts the range as uploaded when they are those it wrote; another
//! object there fails the range with [`ShipperError::ExistingObjectDiffers`]
//! and is left alone, and no object at all leaves the original error.
//!
//! Memory per upload: a channel of [`CHANNEL`] chunks of 1 MiB, the part
//! being filled and two parts in flight, so at most `upload_concurrency *
//! (3 * part_size + 2 MiB)` for all uploads; an object of one PUT (up to
//! `part_size`) is copied out of its chunks. The chunk buffers come from a
//! [`ChunkPool`] shared by all uploads and are reused ([`crate::chunks`]).
//! Multipart uploads that a crash interrupts are
//! invisible (never completed) and hold storage until the bucket's
//! `AbortIncompleteMultipartUpload` lifecycle rule removes them: set it (one
//! day is plenty) on the bucket prefix.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryStreamExt;
use kafkalog::TopicPartition;
use manifest::store::{ManifestStore, StoreError};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, WriteMultipart};
use tokio::sync::mpsc;

use crate::chunks::{CHUNK, ChunkPool};
use crate::error::ShipperError;
use crate::plan::{RangePlan, RangeSummary};

/// Chunks buffered between reader and uploader.
pub(crate) const CHANNEL: usize = 2;
/// Multipart parts in flight per upload.
const PARTS_IN_FLIGHT: usize = 2;

/// A token bucket shared by all uploads: at most `rate` bytes per second
/// on average, bursts up to one second's worth (or one part).
#[derive(Debug)]
pub(crate) struct RateLimiter {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub(crate) fn new(bytes_per_second: u64, part_size: usize) -> RateLimiter {
        let rate = bytes_per_second.max(1) as f64;
        let burst = rate.max(part_size as f64);
        RateLimiter {
            rate,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long to wait before sending `n` bytes (the bytes are accounted
    /// now: callers wait, then send).
    fn reserve(&self, n: u64) -> Duration {
        let mut s = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let now = Instant::now();
        let elapsed = now.duration_since(s.1).as_secs_f64();
        s.0 = (s.0 + elapsed * self.rate).min(self.burst);
        s.1 = now;
        s.0 -= n as f64;
        if s.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.0 / self.rate)
        }
    }

    pub(crate) async fn acquire(&self, n: u64) {
        let wait = self.reserve(n);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// A range uploaded: its object's size and CRC-32C.
#[derive(Debug, Clone)]
pub(crate) struct Uploaded {
    pub(crate) key: String,
    pub(crate) bytes: u64,
    pub(crate) crc32c: u32,
}

enum ReadFailure {
    /// The file no longer holds what was planned.
    Changed(String),
    Io(std::io::Error),
    /// The uploader went away.
    Cancelled,
}

fn read_range(
    path: PathBuf,
    start: u64,
    end: u64,
    pool: &Arc<ChunkPool>,
    tx: mpsc::Sender<Bytes>,
) -> Result<RangeSummary, ReadFailure> {
    let mut file = std::fs::File::open(&path).map_err(ReadFailure::Io)?;
    let size = file.metadata().map_err(ReadFailure::Io)?.len();
    if size < end {
        return Err(ReadFailure::Changed(format!(
            "the file is now {size} bytes long"
        )));
    }
    file.seek(SeekFrom::Start(start)).map_err(ReadFailure::Io)?;
    let mut reader = BufReader::with_capacity(CHUNK, file);
    let mut summary = RangeSummary::new();
    let mut out = pool.take();
    let mut pos = start;
    while pos < end {
        let mut prefix = [0u8; kafkalog::batch::LOG_OVERHEAD];
        reader.read_exact(&mut prefix).map_err(ReadFailure::Io)?;
        let length = i32::from_be_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
        let total = i64::from(length) + kafkalog::batch::LOG_OVERHEAD as i64;
        if total < kafkalog::batch::HEADER_SIZE as i64 || pos + total as u64 > end {
            return Err(ReadFailure::Changed(format!(
                "no batch boundary where the plan had one (byte {pos})"
            )));
        }
        // The batch is read straight into the chunk: one copy per byte.
        let buf = out.buf();
        let at = buf.len();
        buf.extend_from_slice(&prefix);
        buf.resize(at + total as usize, 0);
        reader
            .read_exact(&mut buf[at + kafkalog::batch::LOG_OVERHEAD..])
            .map_err(ReadFailure::Io)?;
        let h = kafkalog::batch::parse_batch(&buf[at..], pos).map_err(|e| {
            ReadFailure::Changed(format!("the batch at byte {pos} is now invalid: {e}"))
        })?;
        summary.add(&h);
        pos += total as u64;
        if out.len() >= CHUNK && pos < end {
            // Hand the chunk over, then wait for a buffer for the next one
            // (the pool bounds what all uploads hold).
            let full = std::mem::replace(&mut out, pool.take());
            tx.blocking_send(full.into_bytes())
                .map_err(|_| ReadFailure::Cancelled)?;
        }
    }
    if !out.is_empty() {
        tx.blocking_send(out.into_bytes())
            .map_err(|_| ReadFailure::Cancelled)?;
    }
    Ok(summary)
}

/// Uploads `plan` to `key`. See the module docs.
pub(crate) async fn upload_range(
    store: &ManifestStore,
    tp: &TopicPartition,
    plan: &RangePlan,
    key: String,
    part_size: usize,
    limiter: Option<&RateLimiter>,
    pool: &Arc<ChunkPool>,
) -> Result<Uploaded, ShipperError> {
    let (tx, mut rx) = mpsc::channel::<Bytes>(CHANNEL);
    let (path, start, end) = (plan.path.clone(), plan.start, plan.end);
    let reader_pool = Arc::clone(pool);
    let reader =
        tokio::task::spawn_blocking(move || read_range(path, start, end, &reader_pool, tx));
    let changed = |reason: String| ShipperError::SourceChanged {
        tp: tp.clone(),
        path: plan.path.clone(),
        start: plan.start,
        end: plan.end,
        reason,
    };
    let store_err = |source: StoreError| ShipperError::store(tp.to_string(), source);
    let finish_reader =
        |r: Result<Result<RangeSummary, ReadFailure>, tokio::task::JoinError>| match r {
            Ok(Ok(summary)) if summary == plan.summary => Ok(()),
            Ok(Ok(summary)) => Err(changed(format!(
                "it now holds offsets {}..={} in {} batches where {}..={} in {} were planned",
                summary.base_offset,
                summary.last_offset,
                summary.batches,
                plan.summary.base_offset,
                plan.summary.last_offset,
                plan.summary.batches
            ))),
            Ok(Err(ReadFailure::Changed(reason))) => Err(changed(reason)),
            Ok(Err(ReadFailure::Io(e))) => Err(changed(format!("read error: {e}"))),
            Ok(Err(ReadFailure::Cancelled)) => Err(changed("upload cancelled".into())),
            Err(e) => Err(changed(format!("reader task failed: {e}"))),
        };
    let crc;
    let mut total = 0u64;
    if plan.bytes() <= part_size as u64 {
        // Copied out of the chunks, which go back to the pool at once: a
        // store may keep the `Bytes` of a PUT (an in-memory one does).
        let mut buf = Vec::with_capacity(plan.bytes() as usize);
        while let Some(chunk) = rx.recv().await {
            buf.extend_from_slice(&chunk);
        }
        finish_reader(reader.await)?;
        let bytes = Bytes::from(buf);
        crc = kafkalog::batch::crc32c(&bytes);
        total = bytes.len() as u64;
        if let Some(l) = limiter {
            l.acquire(total).await;
        }
        match store.put_new(&key, bytes).await {
            Ok(()) => {}
            Err(e @ StoreError::Conflict { .. }) => {
                match verify_own_object(store, tp, &key, total, crc, &e).await? {
                    Found::Ours => {}
                    Found::Nothing => return Err(store_err(e)),
                }
            }
            Err(e) => return Err(store_err(e)),
        }
    } else {
        let upload = store.put_multipart_new(&key).await.map_err(store_err)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, part_size);
        let mut digest = kafkalog::batch::Crc32cDigest::new();
        let mut failure: Option<ShipperError> = None;
        while let Some(chunk) = rx.recv().await {
            digest.update(&chunk);
            total += chunk.len() as u64;
            if let Some(l) = limiter {
                l.acquire(chunk.len() as u64).await;
            }
            if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                failure = Some(store_err(StoreError::Store {
                    op: "put_part",
                    key: key.clone(),
                    source: e,
                }));
                break;
            }
            writer.put(chunk);
        }
        drop(rx);
        crc = digest.value();
        let read = finish_reader(reader.await);
        if let Some(f) = failure.or(read.err()) {
            if let Err(e) = writer.abort().await {
                tracing::warn!(key, error = %e, "could not abort a multipart upload (a lifecycle rule will)");
            }
            return Err(f);
        }
        // `finish` aborts the upload when the completion fails and then
        // returns the abort's error if that fails too, as it does when the
        // completion landed: whatever the error, look at the key.
        if let Err(e) = writer.finish().await {
            let e = StoreError::Store {
                op: "complete_multipart",
                key: key.clone(),
                source: e,
            };
            match verify_own_object(store, tp, &key, total, crc, &e).await? {
                Found::Ours => {}
                Found::Nothing => return Err(store_err(e)),
            }
        }
    }
    Ok(Uploaded {
        key,
        bytes: total,
        crc32c: crc,
    })
}

/// What [`verify_own_object`] found at a data key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// No object.
    Nothing,
    /// The object just uploaded: same size and CRC-32C.
    Ours,
}

/// Called when a write of `key`, one of this shipper's data keys, failed
/// with `answer` (a create-if-absent PUT answered "already exists", or a
/// multipart completion that failed): looks at what is there. The object
/// just uploaded (`bytes` long, CRC-32C `crc32c`) counts as uploaded: the
/// write landed and its answer was lost. A HEAD first (no object, or a
/// wrong size, needs no download), then a GET streamed through the CRC.
/// Another object there is [`ShipperError::ExistingObjectDiffers`] and
/// stays as it is; a failed request is a (retryable) store error.
async fn verify_own_object(
    store: &ManifestStore,
    tp: &TopicPartition,
    key: &str,
    bytes: u64,
    crc32c: u32,
    answer: &StoreError,
) -> Result<Found, ShipperError> {
    let location = ObjectPath::from(key);
    let request_err = |op: &'static str, e: object_store::Error| {
        let source = match e {
            object_store::Error::NotFound { .. } => StoreError::NotFound {
                key: key.to_string(),
            },
            e => StoreError::Store {
                op,
                key: key.to_string(),
                source: e,
            },
        };
        ShipperError::store(tp.to_string(), source)
    };
    let differs = |reason: String| ShipperError::ExistingObjectDiffers {
        tp: tp.clone(),
        key: key.to_string(),
        reason,
    };
    let os = store.object_store();
    let meta = match os.head(&location).await {
        Ok(meta) => meta,
        Err(object_store::Error::NotFound { .. }) => return Ok(Found::Nothing),
        Err(e) => return Err(request_err("head", e)),
    };
    if meta.size != bytes {
        return Err(differs(format!(
            "it is {} bytes long where {bytes} were uploaded",
            meta.size
        )));
    }
    let mut body = os
        .get(&location)
        .await
        .map_err(|e| request_err("get", e))?
        .into_stream();
    let (mut digest, mut read) = (kafkalog::batch::Crc32cDigest::new(), 0u64);
    while let Some(chunk) = body.try_next().await.map_err(|e| request_err("get", e))? {
        digest.update(&chunk);
        read += chunk.len() as u64;
    }
    if read != bytes {
        // HEAD said the size is right: a short or long read, not another object.
        return Err(request_err(
            "get",
            object_store::Error::Generic {
                store: "shipper",
                source: format!("read {read} bytes of an object HEAD says is {bytes} bytes long")
                    .into(),
            },
        ));
    }
    let crc = digest.value();
    if crc != crc32c {
        return Err(differs(format!(
            "its CRC-32C is {crc:#010x} where the upload's is {crc32c:#010x} (same size, {bytes} bytes)"
        )));
    }
    tracing::warn!(
        partition = %tp,
        key,
        bytes,
        answer = %answer,
        "a data upload failed but its object is there and, read back, is the one uploaded (same size and CRC-32C): the write landed and its answer was lost (a store client's retry of a create-if-absent PUT is answered \"already exists\"); counted as uploaded"
    );
    Ok(Found::Ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_bucket_allows_a_burst_then_the_rate() {
        let l = RateLimiter::new(1000 * 1024, 4096);
        // The first second's worth passes at once.
        assert_eq!(l.reserve(1000 * 1024), Duration::ZERO);
        // Then each byte costs 1/rate seconds.
        let wait = l.reserve(500 * 1024);
        assert!(
            wait > Duration::from_millis(450) && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        // A part larger than the rate still goes through (after its wait).
        let l = RateLimiter::new(1024, 8192);
        assert_eq!(l.reserve(8192), Duration::ZERO);
        assert!(l.reserve(1024) >= Duration::from_millis(990));
    }
}
