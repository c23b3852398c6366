//! Uploading one planned range: the segment's bytes, unchanged, streamed
//! with bounded memory.
//!
//! The range is read in pieces of exactly `part_size` bytes (the last one
//! shorter), each with one positional read into a buffer of its own from
//! [`PartBuffers`] on a blocking thread. Every batch's CRC is checked again
//! in place as its last byte arrives (a batch cut by a piece's end is
//! completed from the next piece in a small carry buffer), and what the
//! plan said is recomputed (offsets, count, epochs, timestamps); the
//! object's CRC-32C is computed piece by piece. Then:
//! - an object up to the part size is one piece and one create-if-absent
//!   PUT;
//! - a larger one is a multipart upload with one part per piece, at most
//!   [`PARTS_IN_FLIGHT`] of them in flight. If anything fails (the store,
//!   or the reader finding that the file changed since it was planned), the
//!   upload is aborted before it is completed, so no object appears. All
//!   parts have the same size but the last (some S3-compatible stores
//!   require it).
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
//! Memory: a piece is read only with a permit of the budget all uploads
//! share ([`crate::buffers`]), held until its request has finished, so
//! all uploads together hold at most [`crate::buffers::UPLOAD_MEMORY`] of pieces
//! (32 MiB: 4 parts of 8 MiB on S3, 32 of 1 MiB on `file://`), plus one
//! carry buffer of one batch per upload. A small object (up to a quarter
//! of the part size) is copied out of its piece into a `Bytes` of its own
//! size before its PUT, so that a store keeping what it was given (an
//! in-memory one) does not keep a whole part buffer per small object.
//! Multipart uploads that a crash interrupts are invisible (never
//! completed) and hold storage until the bucket's
//! `AbortIncompleteMultipartUpload` lifecycle rule removes them: set it
//! (one day is plenty) on the bucket prefix.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bucket::store::{ManifestStore, StoreError};
use bytes::Bytes;
use futures::TryStreamExt;
use kafkalog::TopicPartition;
use kafkalog::batch::{HEADER_SIZE, LOG_OVERHEAD};
use object_store::path::Path as ObjectPath;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};
use tokio::task::JoinSet;

use crate::buffers::{PartBuf, PartBuffers, PartPermit};
use crate::error::ShipperError;
use crate::plan::{RangePlan, RangeSummary};

/// Multipart parts in flight per upload (the budget shared by all uploads
/// may allow fewer).
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
    /// Where the range starts in `key` when it is a pack (`upload_pack`).
    pub(crate) object_offset: Option<u64>,
}

#[derive(Debug)]
enum ReadFailure {
    /// The file no longer holds what was planned.
    Changed(String),
    Io(std::io::Error),
    /// The blocking task that read failed (panicked).
    Task(String),
}

/// Checks the batches of a range as its bytes arrive, piece by piece: a
/// batch wholly inside a piece is checked in place, one cut by a piece's
/// end is gathered in `carry` and checked once complete.
#[derive(Debug)]
struct BatchWalk {
    /// File position of the next batch (or of the one in `carry`).
    pos: u64,
    end: u64,
    carry: Vec<u8>,
    summary: RangeSummary,
}

impl BatchWalk {
    fn new(start: u64, end: u64) -> BatchWalk {
        BatchWalk {
            pos: start,
            end,
            carry: Vec::new(),
            summary: RangeSummary::new(),
        }
    }

    /// A batch's whole size from its first 12 bytes, checked against the
    /// planned range.
    fn batch_size(&self, prefix: &[u8]) -> Result<usize, ReadFailure> {
        let length = i32::from_be_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
        let total = i64::from(length) + LOG_OVERHEAD as i64;
        if total < HEADER_SIZE as i64 || self.pos + total as u64 > self.end {
            return Err(ReadFailure::Changed(format!(
                "no batch boundary where the plan had one (byte {})",
                self.pos
            )));
        }
        Ok(total as usize)
    }

    fn check(&mut self, batch: &[u8]) -> Result<(), ReadFailure> {
        let h = kafkalog::batch::parse_batch(batch, self.pos).map_err(|e| {
            ReadFailure::Changed(format!(
                "the batch at byte {} is now invalid: {e}",
                self.pos
            ))
        })?;
        self.summary.add(&h);
        self.pos += batch.len() as u64;
        Ok(())
    }

    /// The next bytes of the range.
    fn feed(&mut self, mut piece: &[u8]) -> Result<(), ReadFailure> {
        while !piece.is_empty() {
            if self.carry.is_empty() && piece.len() >= LOG_OVERHEAD {
                let total = self.batch_size(piece)?;
                if piece.len() >= total {
                    let (batch, rest) = piece.split_at(total);
                    self.check(batch)?;
                    piece = rest;
                    continue;
                }
            }
            // A batch cut by the piece's end: gather its prefix, then the
            // rest of it.
            if self.carry.len() < LOG_OVERHEAD {
                let n = (LOG_OVERHEAD - self.carry.len()).min(piece.len());
                self.carry.extend_from_slice(&piece[..n]);
                piece = &piece[n..];
                if self.carry.len() < LOG_OVERHEAD {
                    break;
                }
            }
            let total = self.batch_size(&self.carry[..LOG_OVERHEAD])?;
            let n = (total - self.carry.len()).min(piece.len());
            self.carry.extend_from_slice(&piece[..n]);
            piece = &piece[n..];
            if self.carry.len() == total {
                let batch = std::mem::take(&mut self.carry);
                let checked = self.check(&batch);
                self.carry = batch;
                self.carry.clear();
                checked?;
            }
        }
        Ok(())
    }
}

/// The file being read and how far: moved to a blocking thread for each
/// piece and back.
#[derive(Debug)]
struct ReadState {
    file: File,
    /// File position of the next piece.
    next: u64,
    walk: BatchWalk,
}

impl ReadState {
    fn open(path: PathBuf, start: u64, end: u64) -> Result<ReadState, ReadFailure> {
        let file = File::open(&path).map_err(ReadFailure::Io)?;
        let size = file.metadata().map_err(ReadFailure::Io)?.len();
        if size < end {
            return Err(ReadFailure::Changed(format!(
                "the file is now {size} bytes long"
            )));
        }
        Ok(ReadState {
            file,
            next: start,
            walk: BatchWalk::new(start, end),
        })
    }

    /// Reads the next piece into `buf` (one positional read of all its
    /// bytes) and checks the batches it completes.
    fn read(&mut self, buf: &mut PartBuf) -> Result<(), ReadFailure> {
        let piece = buf.as_mut_slice();
        self.file
            .read_exact_at(piece, self.next)
            .map_err(ReadFailure::Io)?;
        self.next += piece.len() as u64;
        self.walk.feed(piece)
    }

    /// What the range held, once every piece was read.
    fn finish(self) -> Result<RangeSummary, ReadFailure> {
        if !self.walk.carry.is_empty() || self.walk.pos != self.walk.end {
            return Err(ReadFailure::Changed(format!(
                "no batch boundary where the plan had one (byte {})",
                self.walk.pos
            )));
        }
        Ok(self.walk.summary)
    }
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ReadFailure> + Send + 'static,
) -> Result<T, ReadFailure> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(ReadFailure::Task(e.to_string())))
}

/// Reads a range piece by piece, each read on the blocking pool.
struct RangeReader {
    state: Option<ReadState>,
}

impl RangeReader {
    async fn open(plan: &RangePlan) -> Result<RangeReader, ReadFailure> {
        let (path, start, end) = (plan.path.clone(), plan.start, plan.end);
        let state = blocking(move || ReadState::open(path, start, end)).await?;
        Ok(RangeReader { state: Some(state) })
    }

    /// The next piece, read into `buf`.
    async fn read(&mut self, mut buf: PartBuf) -> Result<PartBuf, ReadFailure> {
        let mut state = self
            .state
            .take()
            .ok_or_else(|| ReadFailure::Task("a failed reader was used again".into()))?;
        let (state, buf) = blocking(move || {
            state.read(&mut buf)?;
            Ok((state, buf))
        })
        .await?;
        self.state = Some(state);
        Ok(buf)
    }

    fn finish(self) -> Result<RangeSummary, ReadFailure> {
        self.state
            .ok_or_else(|| ReadFailure::Task("a failed reader was used again".into()))?
            .finish()
    }
}

/// The error of a range whose source no longer holds what was planned.
fn source_changed(tp: &TopicPartition, plan: &RangePlan, reason: String) -> ShipperError {
    ShipperError::SourceChanged {
        tp: tp.clone(),
        path: plan.path.clone(),
        start: plan.start,
        end: plan.end,
        reason,
    }
}

fn read_failure(tp: &TopicPartition, plan: &RangePlan, f: ReadFailure) -> ShipperError {
    match f {
        ReadFailure::Changed(reason) => source_changed(tp, plan, reason),
        ReadFailure::Io(e) => source_changed(tp, plan, format!("read error: {e}")),
        ReadFailure::Task(e) => source_changed(tp, plan, format!("reader task failed: {e}")),
    }
}

/// What the reader found against what was planned.
fn check_planned(
    tp: &TopicPartition,
    plan: &RangePlan,
    r: Result<RangeSummary, ReadFailure>,
) -> Result<(), ShipperError> {
    match r {
        Ok(summary) if summary == plan.summary => Ok(()),
        Ok(summary) => Err(source_changed(
            tp,
            plan,
            format!(
                "it now holds offsets {}..={} in {} batches where {}..={} in {} were planned",
                summary.base_offset,
                summary.last_offset,
                summary.batches,
                plan.summary.base_offset,
                plan.summary.last_offset,
                plan.summary.batches
            ),
        )),
        Err(f) => Err(read_failure(tp, plan, f)),
    }
}

/// Reads `plan` whole into one buffer (with a permit of the shared memory
/// budget, returned with it), every batch checked and the plan recomputed.
async fn read_whole(
    tp: &TopicPartition,
    plan: &RangePlan,
    buffers: &Arc<PartBuffers>,
) -> Result<(PartBuf, PartPermit), ShipperError> {
    let permit = buffers.permit().await;
    let mut reader = RangeReader::open(plan)
        .await
        .map_err(|f| read_failure(tp, plan, f))?;
    let piece = reader
        .read(buffers.take(plan.bytes() as usize))
        .await
        .map_err(|f| read_failure(tp, plan, f))?;
    check_planned(tp, plan, reader.finish())?;
    Ok((piece, permit))
}

/// One small range of a pack: its partition and plan.
pub(crate) struct PackJob<'a> {
    pub(crate) tp: &'a TopicPartition,
    pub(crate) topic_id: kafkalog::TopicId,
    pub(crate) plan: &'a RangePlan,
}

/// Uploads the small ranges `jobs` of several partitions as one pack
/// (`manifest::pack`) under `key`: each range read and checked as
/// [`upload_range`] checks it, then one create-if-absent PUT (an
/// "already exists" answer is looked at as for a range). Returns one
/// result per job, in order: a range whose source changed fails alone and
/// is left out of the pack; when the pack cannot be written, every range
/// in it fails.
pub(crate) async fn upload_pack(
    store: &ManifestStore,
    jobs: &[PackJob<'_>],
    key: String,
    limiter: Option<&RateLimiter>,
    buffers: &Arc<PartBuffers>,
) -> Vec<Result<Uploaded, ShipperError>> {
    let mut out: Vec<Option<Result<Uploaded, ShipperError>>> = Vec::new();
    let mut read: Vec<(usize, Vec<u8>)> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        match read_whole(j.tp, j.plan, buffers).await {
            // Copied out of the part buffer, whose permit goes back now.
            Ok((piece, _permit)) => {
                read.push((i, piece.to_vec()));
                out.push(None);
            }
            Err(e) => out.push(Some(Err(e))),
        }
    }
    let inputs: Vec<manifest::pack::PackInput<'_>> = read
        .iter()
        .map(|(i, bytes)| {
            let j = &jobs[*i];
            manifest::pack::PackInput {
                tp: j.tp.clone(),
                topic_id: j.topic_id,
                bytes,
                base_offset: j.plan.summary.base_offset,
                last_offset: j.plan.summary.last_offset,
                batches: j.plan.summary.batches,
                max_timestamp: j.plan.summary.max_timestamp,
                epochs: j.plan.summary.epochs.clone(),
                segment_base_offset: j.plan.segment_base,
                completes_segment: j.plan.completes_segment,
                segment_generation: j.plan.generation,
            }
        })
        .collect();
    let first_tp = jobs.first().map(|j| j.tp.to_string()).unwrap_or_default();
    let written = match manifest::pack::encode(inputs) {
        Ok((object, index)) => {
            if let Some(l) = limiter {
                l.acquire(object.len() as u64).await;
            }
            put_own(store, jobs[0].tp, &key, vec![Bytes::from(object)])
                .await
                .map(|()| index)
                .map_err(|e| ShipperError::store(first_tp.clone(), e))
        }
        Err(e) => Err(ShipperError::Inconsistent {
            tp: jobs[0].tp.clone(),
            reason: format!("the cycle's ranges cannot be packed: {e}"),
        }),
    };
    let mut entries = match &written {
        Ok(index) => index.entries.iter().collect::<Vec<_>>(),
        Err(_) => Vec::new(),
    };
    for (i, _) in &read {
        let j = &jobs[*i];
        out[*i] = Some(match &written {
            Ok(_) => {
                let at = entries
                    .iter()
                    .position(|e| &e.tp == j.tp && e.base_offset == j.plan.summary.base_offset);
                match at.map(|at| entries.swap_remove(at)) {
                    Some(e) => Ok(Uploaded {
                        key: key.clone(),
                        bytes: e.len,
                        crc32c: e.crc32c,
                        object_offset: Some(e.start),
                    }),
                    None => Err(ShipperError::Inconsistent {
                        tp: j.tp.clone(),
                        reason: "a range is missing from its pack's index".into(),
                    }),
                }
            }
            Err(e) => Err(ShipperError::Inconsistent {
                tp: j.tp.clone(),
                reason: format!("its cycle's pack {key} was not written: {e}"),
            }),
        });
    }
    out.into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(ShipperError::Inconsistent {
                    tp: jobs[0].tp.clone(),
                    reason: "a pack job did not run".into(),
                })
            })
        })
        .collect()
}

/// Uploads `plan` to `key`. See the module docs.
pub(crate) async fn upload_range(
    store: &ManifestStore,
    tp: &TopicPartition,
    plan: &RangePlan,
    key: String,
    part_size: usize,
    limiter: Option<&RateLimiter>,
    buffers: &Arc<PartBuffers>,
) -> Result<Uploaded, ShipperError> {
    let read_err = |f: ReadFailure| read_failure(tp, plan, f);
    let check_summary = |r: Result<RangeSummary, ReadFailure>| check_planned(tp, plan, r);
    let store_err = |source: StoreError| ShipperError::store(tp.to_string(), source);
    let size = plan.bytes();
    let part_size = part_size.max(1);
    if size <= part_size as u64 {
        let (piece, permit) = read_whole(tp, plan, buffers).await?;
        let crc = kafkalog::batch::crc32c(&piece);
        let bytes = if piece.len() <= part_size / 4 {
            Bytes::copy_from_slice(&piece)
        } else {
            piece.into_bytes()
        };
        if let Some(l) = limiter {
            l.acquire(size).await;
        }
        let put = store.put_new(&key, bytes).await;
        drop(permit);
        match put {
            Ok(()) => {}
            Err(e @ StoreError::Conflict { .. }) => {
                match verify_own_object(store, tp, &key, size, crc, &e).await? {
                    Found::Ours => {}
                    Found::Nothing => return Err(store_err(e)),
                }
            }
            Err(e) => return Err(store_err(e)),
        }
        return Ok(Uploaded {
            key,
            bytes: size,
            crc32c: crc,
            object_offset: None,
        });
    }
    let mut upload = store.put_multipart_new(&key).await.map_err(store_err)?;
    let mut parts = JoinSet::new();
    let sent = send_parts(
        upload.as_mut(),
        &mut parts,
        plan,
        part_size,
        limiter,
        buffers,
    )
    .await;
    let crc = match sent {
        Ok((summary, crc)) => check_summary(Ok(summary)).map(|()| crc),
        Err(Failure::Read(f)) => Err(read_err(f)),
        Err(Failure::Store(op, e)) => Err(store_err(StoreError::Store {
            op,
            key: key.clone(),
            source: e,
        })),
    };
    let crc = match crc {
        Ok(crc) => crc,
        Err(failure) => {
            parts.shutdown().await;
            if let Err(e) = upload.abort().await {
                tracing::warn!(key, error = %e, "could not abort a multipart upload (a lifecycle rule will)");
            }
            return Err(failure);
        }
    };
    // A completion that fails may have landed (its answer lost): abort
    // (which fails if it landed), then whatever the error, look at the key.
    if let Err(e) = upload.complete().await {
        if let Err(abort) = upload.abort().await {
            tracing::debug!(key, error = %abort, "abort after a failed completion");
        }
        let e = StoreError::Store {
            op: "complete_multipart",
            key: key.clone(),
            source: e,
        };
        match verify_own_object(store, tp, &key, size, crc, &e).await? {
            Found::Ours => {}
            Found::Nothing => return Err(store_err(e)),
        }
    }
    Ok(Uploaded {
        key,
        bytes: size,
        crc32c: crc,
        object_offset: None,
    })
}

/// Why [`send_parts`] stopped.
enum Failure {
    Read(ReadFailure),
    Store(&'static str, object_store::Error),
}

/// A part's request finished: its result.
fn part_done(
    r: Option<Result<Result<(), object_store::Error>, tokio::task::JoinError>>,
) -> Result<(), Failure> {
    match r {
        None | Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(e))) => Err(Failure::Store("put_part", e)),
        Some(Err(e)) => Err(Failure::Store(
            "put_part",
            object_store::Error::Generic {
                store: "shipper",
                source: format!("a part's upload task failed: {e}").into(),
            },
        )),
    }
}

/// Reads the range piece by piece and sends each as a part, at most
/// [`PARTS_IN_FLIGHT`] at once, each holding a permit of `buffers` until
/// its request has finished; waits for every part. Returns what the range
/// held and the object's CRC-32C.
async fn send_parts(
    upload: &mut dyn MultipartUpload,
    parts: &mut JoinSet<Result<(), object_store::Error>>,
    plan: &RangePlan,
    part_size: usize,
    limiter: Option<&RateLimiter>,
    buffers: &Arc<PartBuffers>,
) -> Result<(RangeSummary, u32), Failure> {
    let mut reader = RangeReader::open(plan).await.map_err(Failure::Read)?;
    let mut digest = kafkalog::batch::Crc32cDigest::new();
    let size = plan.bytes();
    let mut sent = 0u64;
    while sent < size {
        while parts.len() >= PARTS_IN_FLIGHT {
            part_done(parts.join_next().await)?;
        }
        let permit: PartPermit = buffers.permit().await;
        let n = (size - sent).min(part_size as u64);
        let piece = reader
            .read(buffers.take(n as usize))
            .await
            .map_err(Failure::Read)?;
        digest.update(&piece);
        sent += n;
        if let Some(l) = limiter {
            l.acquire(n).await;
        }
        let request = upload.put_part(PutPayload::from_bytes(piece.into_bytes()));
        parts.spawn(async move {
            let r = request.await;
            drop(permit);
            r
        });
    }
    let summary = reader.finish().map_err(Failure::Read)?;
    while !parts.is_empty() {
        part_done(parts.join_next().await)?;
    }
    Ok((summary, digest.value()))
}

/// A create-if-absent PUT of `parts` one after another at `key`, a fresh
/// key only this shipper writes (a pack, a compacted object). A PUT that
/// landed with its answer lost is retried by the store client and answered
/// "already exists": the object is read back ([`verify_own_object`]) and,
/// when it is the one sent, counts as written. Anything else there stays
/// as it is, an error.
pub(crate) async fn put_own(
    store: &ManifestStore,
    tp: &TopicPartition,
    key: &str,
    parts: Vec<Bytes>,
) -> Result<(), StoreError> {
    // Clones of the parts are reference counts, not copies; the CRC-32C is
    // computed only when the answer calls for a look.
    match store.put_new_parts(key, parts.clone()).await {
        Err(e @ StoreError::Conflict { .. }) => {
            let mut digest = kafkalog::batch::Crc32cDigest::new();
            let mut size = 0u64;
            for p in &parts {
                digest.update(p);
                size += p.len() as u64;
            }
            match verify_own_object(store, tp, key, size, digest.value(), &e).await {
                Ok(Found::Ours) => Ok(()),
                Ok(Found::Nothing) => Err(e),
                Err(ShipperError::Store { source, .. }) => Err(*source),
                Err(other) => Err(StoreError::Identity {
                    key: key.to_string(),
                    reason: other.to_string(),
                }),
            }
        }
        r => r,
    }
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
        "an upload failed but its object is there and, read back, is the one uploaded (same size and CRC-32C): the write landed and its answer was lost (a store client's retry of a create-if-absent PUT is answered \"already exists\"); counted as uploaded"
    );
    Ok(Found::Ours)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::builder::{BatchSpec, RecordInput, build_batch};

    /// `n` batches of 1 to 3 records with values of a few hundred bytes,
    /// offsets from 0, epoch 3 then 4: the bytes and their summary.
    fn batches(n: i64) -> (Vec<u8>, RangeSummary) {
        let (mut bytes, mut summary, mut offset) = (Vec::new(), RangeSummary::new(), 0i64);
        for i in 0..n {
            let records: Vec<RecordInput> = (0..1 + i % 3)
                .map(|r| RecordInput {
                    timestamp: 1_000 + offset + r,
                    value: Some(vec![b'a' + (i % 26) as u8; 100 + 37 * i as usize]),
                    ..RecordInput::default()
                })
                .collect();
            let b = build_batch(
                &BatchSpec::new(offset, if i < n / 2 { 3 } else { 4 }),
                &records,
            )
            .expect("batch");
            let h = kafkalog::batch::parse_batch(&b, bytes.len() as u64).expect("valid");
            summary.add(&h);
            offset = h.last_offset() + 1;
            bytes.extend_from_slice(&b);
        }
        (bytes, summary)
    }

    #[test]
    fn pieces_of_any_size_check_every_batch_once_even_cut_anywhere() {
        let (bytes, summary) = batches(20);
        // Smaller than a batch's 12-byte prefix, than a header, than a
        // batch; about a batch; several batches; the whole range at once.
        for piece in [1, 5, 12, 13, 61, 300, 997, 4096, bytes.len()] {
            let mut walk = BatchWalk::new(0, bytes.len() as u64);
            for p in bytes.chunks(piece) {
                walk.feed(p).expect("valid batches");
            }
            assert!(walk.carry.is_empty(), "piece {piece}: nothing left over");
            assert_eq!(walk.pos, bytes.len() as u64, "piece {piece}");
            assert_eq!(walk.summary, summary, "piece {piece}");
        }
    }

    #[test]
    fn a_flipped_byte_or_a_range_not_ending_on_a_batch_is_a_changed_source() {
        let (bytes, summary) = batches(6);
        for piece in [7, 100, bytes.len()] {
            for at in [0, 9, 14, 20, 70, bytes.len() / 2, bytes.len() - 1] {
                let mut bad = bytes.clone();
                bad[at] ^= 0x40;
                let mut walk = BatchWalk::new(0, bad.len() as u64);
                let r: Result<(), ReadFailure> = bad.chunks(piece).try_for_each(|p| walk.feed(p));
                // The base offset and the leader epoch lie outside the
                // CRC: those show in the summary, which the uploader
                // compares with the plan's.
                let outside_crc = at < 8 || (12..16).contains(&at);
                assert!(
                    matches!(r, Err(ReadFailure::Changed(_)))
                        || (outside_crc && r.is_ok() && walk.summary != summary),
                    "piece {piece}, byte {at} flipped: {r:?}"
                );
            }
            // A plan ending inside the last batch.
            let mut walk = BatchWalk::new(0, bytes.len() as u64 - 1);
            let r: Result<(), ReadFailure> = bytes[..bytes.len() - 1]
                .chunks(piece)
                .try_for_each(|p| walk.feed(p));
            assert!(
                matches!(r, Err(ReadFailure::Changed(_))),
                "piece {piece}: {r:?}"
            );
        }
    }

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
