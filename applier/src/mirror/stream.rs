//! The executors of MIRRORING's apply: the download task
//! ([`fetch_ranges`]: objects in order, `prefetch` requests ahead, each
//! object's CRC-32C computed as it arrives) and the appending side
//! ([`apply_range`]), which carries out what `super::apply_plan` decides:
//! buffered or streamed ([`apply_plan::intake`]), where a range's batches
//! start and whether the log restarts inside a batch
//! ([`apply_plan::plan_append`]).
//!
//! Invariants:
//! - A buffered object is appended only once its size, CRC-32C and every
//!   batch header passed; a streamed one is appended batch by batch as it
//!   downloads, each batch's header checked against the range first
//!   (`manifest::range_check::RangeCheck`) and its CRC by the log, under
//!   the `partdir::applying` marker, written durably before the first
//!   batch. A mismatch at its end (size, CRC-32C, a batch cut short) cuts
//!   the log back to where the range started, then the marker is cleared:
//!   a corrupt object leaves nothing of itself in the log.
//! - Memory: the channel holds about `download_memory` bytes of pieces;
//!   a buffered object holds at most `stream_above` bytes, a streamed one
//!   only the part of a batch cut by a download piece.

// `MirrorError` carries the store's and the log's errors by value.
#![allow(clippy::result_large_err)]

use bucket::store::ManifestStore;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use kafkalog::{PartitionLog, TopicPartition};
use manifest::partition::ShippedRange;
use manifest::range_check::{ObjectCorrupt, RangeCheck, check_size_and_crc, verify_object_crc};

use super::PIECE;
use super::apply_plan::{self, BatchSpan, Intake, LogEnds};
use crate::applying;
use crate::error::MirrorError;

/// What the download task hands the appending side, object after object,
/// in the ranges' order.
#[derive(Debug)]
pub(super) enum Piece {
    /// The next bytes of the current object.
    Data(Bytes),
    /// The current object ended: its length and CRC-32C as downloaded.
    End { crc: u32, len: u64 },
    /// The download failed; nothing follows.
    Failed(MirrorError),
}

/// Aborts the download task when the apply ends early.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Downloads `ranges`' objects in order into `tx`, `prefetch` requests
/// ahead, computing each object's CRC-32C on the way. Stops at the first
/// failure (sent as [`Piece::Failed`]) or when the receiver is gone.
pub(super) async fn fetch_ranges(
    store: ManifestStore,
    tp: TopicPartition,
    ranges: Vec<ShippedRange>,
    prefetch: usize,
    tx: tokio::sync::mpsc::Sender<Piece>,
) {
    let opened = futures::stream::iter(ranges)
        .map(|r| {
            let store = store.clone();
            async move {
                let body = store.get_stream_in(&r.key, r.object_range()).await;
                (r, body)
            }
        })
        .buffered(prefetch);
    futures::pin_mut!(opened);
    let failed = |source| {
        Piece::Failed(MirrorError::Store {
            tp: tp.clone(),
            source,
        })
    };
    while let Some((range, body)) = opened.next().await {
        let mut body = match body {
            Ok(b) => b,
            Err(e) => {
                let _ = tx.send(failed(e)).await;
                return;
            }
        };
        let mut crc = kafkalog::batch::Crc32cDigest::new();
        let mut len = 0u64;
        let mut gathered = BytesMut::new();
        while let Some(piece) = body.pieces.next().await {
            let piece = match piece {
                Ok(p) => p,
                Err(e) => {
                    let _ = tx.send(failed(e)).await;
                    return;
                }
            };
            crc.update(&piece);
            len += piece.len() as u64;
            let out = if gathered.is_empty() && piece.len() >= PIECE {
                Some(piece)
            } else {
                gathered.extend_from_slice(&piece);
                (gathered.len() >= PIECE).then(|| gathered.split().freeze())
            };
            if let Some(out) = out
                && tx.send(Piece::Data(out)).await.is_err()
            {
                return;
            }
            if len > range.bytes {
                // Longer than the manifest's object: no need to read on.
                break;
            }
        }
        if !gathered.is_empty() && tx.send(Piece::Data(gathered.freeze())).await.is_err() {
            return;
        }
        let end = Piece::End {
            crc: crc.value(),
            len,
        };
        if tx.send(end).await.is_err() {
            return;
        }
    }
}

/// The error of the `applying` marker's file IO in `dir`.
pub(super) fn marker_err(
    tp: &TopicPartition,
    dir: &std::path::Path,
    e: std::io::Error,
) -> MirrorError {
    MirrorError::Log {
        tp: tp.clone(),
        source: kafkalog::Error::Io {
            op: "write",
            path: dir.join(applying::APPLYING_FILE),
            source: e,
        },
    }
}

/// At open: cuts the part of a range of `tp` that was being streamed into
/// `log` when the applier stopped, as `manifest::applying::cut_to` decides
/// for a partition in `state`, then clears the marker. Returns the offsets
/// cut.
pub(super) fn undo_partial_range(
    tp: &TopicPartition,
    log: &mut PartitionLog,
    state: manifest::state::PartitionState,
) -> Result<i64, MirrorError> {
    let dir = log.dir().to_path_buf();
    let marker_err = |e| marker_err(tp, &dir, e);
    let log_err = |source| MirrorError::Log {
        tp: tp.clone(),
        source,
    };
    let Some(marker) = partdir::applying::read(&dir).map_err(marker_err)? else {
        return Ok(0);
    };
    let mut cut = 0;
    match marker {
        Err(torn) => {
            tracing::warn!(partition = %tp, marker = %torn, "removed a torn marker of a range being applied (none of its batches was written)");
        }
        Ok(a) => {
            let leo = log.log_end_offset();
            if let Some(to) = applying::cut_to(&a, state, log.log_start_offset(), leo) {
                let end = log.truncate_to(to).map_err(log_err)?;
                cut = leo - end;
                log.flush().map_err(log_err)?;
                tracing::warn!(partition = %tp, key = %a.key, from = to, to = leo, "cut a range that was being applied when the applier stopped; it is fetched again");
            }
        }
    }
    partdir::applying::clear(&dir).map_err(marker_err)?;
    Ok(cut)
}

/// Appends one range of `tp` to `log` as its pieces arrive from
/// [`fetch_ranges`]: buffered whole and checked before any append, or
/// streamed under the `applying` marker ([`apply_plan::intake`]). Returns
/// the batches and bytes appended.
pub(super) async fn apply_range(
    tp: &TopicPartition,
    log: &mut PartitionLog,
    range: &ShippedRange,
    rx: &mut tokio::sync::mpsc::Receiver<Piece>,
    stream_above: u64,
) -> Result<(u64, u64), MirrorError> {
    let mut run = RangeRun {
        check: RangeCheck::new(range),
        pending: BytesMut::new(),
        intake: apply_plan::intake(range.bytes, stream_above),
        marked: false,
        log_end_before: log.log_end_offset(),
        appended: (0, 0),
    };
    let mut w = RangeWriter { tp, log, range };
    let result = w.feed(rx, &mut run).await;
    if run.marked {
        if result.is_err() {
            w.undo(run.log_end_before)?;
        }
        partdir::applying::end(w.log.dir()).map_err(|e| marker_err(tp, w.log.dir(), e))?;
    }
    result.map(|()| run.appended)
}

/// One range being appended.
struct RangeRun {
    check: RangeCheck,
    /// Bytes downloaded and not appended yet (from a batch boundary).
    pending: BytesMut,
    /// Buffered or streamed.
    intake: Intake,
    /// The `applying` marker is written (a streamed range's first piece
    /// arrived).
    marked: bool,
    log_end_before: i64,
    appended: (u64, u64),
}

/// The log a range is appended to.
struct RangeWriter<'a> {
    tp: &'a TopicPartition,
    log: &'a mut PartitionLog,
    range: &'a ShippedRange,
}

impl RangeWriter<'_> {
    fn log_err(&self) -> impl FnOnce(kafkalog::Error) -> MirrorError + '_ {
        move |source| MirrorError::Log {
            tp: self.tp.clone(),
            source,
        }
    }

    fn corrupt(&self, detail: String) -> MirrorError {
        MirrorError::ObjectCorrupt {
            tp: self.tp.clone(),
            corrupt: ObjectCorrupt::of(self.range, detail),
        }
    }

    async fn feed(
        &mut self,
        rx: &mut tokio::sync::mpsc::Receiver<Piece>,
        run: &mut RangeRun,
    ) -> Result<(), MirrorError> {
        let range = self.range;
        loop {
            let Some(piece) = rx.recv().await else {
                return Err(MirrorError::Store {
                    tp: self.tp.clone(),
                    source: bucket::store::StoreError::Store {
                        op: "get",
                        key: range.key.clone(),
                        source: object_store::Error::Generic {
                            store: "segmirror",
                            source: "the download task ended early".into(),
                        },
                    },
                });
            };
            match piece {
                Piece::Failed(e) => return Err(e),
                Piece::Data(bytes) if run.intake == Intake::Buffered => {
                    run.pending.extend_from_slice(&bytes);
                }
                Piece::Data(bytes) => {
                    if !run.marked {
                        partdir::applying::begin(
                            self.log.dir(),
                            &applying::Applying {
                                key: range.key.clone(),
                                base_offset: range.base_offset,
                                last_offset: range.last_offset,
                                log_end_before: run.log_end_before,
                            },
                        )
                        .map_err(|e| marker_err(self.tp, self.log.dir(), e))?;
                        run.marked = true;
                    }
                    let mut rest: &[u8] = &bytes;
                    if !run.pending.is_empty() {
                        // A batch straddles the pieces: copy only what
                        // completes it, then go on without copying.
                        let take = straddle_take(&run.pending, rest);
                        run.pending.extend_from_slice(&rest[..take]);
                        rest = &rest[take..];
                        let pending = std::mem::take(&mut run.pending);
                        let taken = self.append_whole_batches(run, &pending)?;
                        run.pending = pending;
                        let _ = run.pending.split_to(taken);
                    }
                    if run.pending.is_empty() {
                        let taken = self.append_whole_batches(run, rest)?;
                        run.pending.extend_from_slice(&rest[taken..]);
                    } else {
                        run.pending.extend_from_slice(rest);
                    }
                }
                Piece::End { crc, len } if run.intake == Intake::Buffered => {
                    // Every check before the first append.
                    verify_object_crc(range, &run.pending, len, crc).map_err(|corrupt| {
                        MirrorError::ObjectCorrupt {
                            tp: self.tp.clone(),
                            corrupt,
                        }
                    })?;
                    let pending = std::mem::take(&mut run.pending);
                    let taken = self.append_whole_batches(run, &pending)?;
                    debug_assert_eq!(taken, pending.len());
                    return Ok(());
                }
                Piece::End { crc, len } => {
                    check_size_and_crc(range, len, crc, None).map_err(|corrupt| {
                        MirrorError::ObjectCorrupt {
                            tp: self.tp.clone(),
                            corrupt,
                        }
                    })?;
                    if !run.pending.is_empty() {
                        return Err(self.corrupt(format!(
                            "the object ends inside a batch at byte {}",
                            run.check.accepted()
                        )));
                    }
                    return run.check.finish().map_err(|detail| self.corrupt(detail));
                }
            }
        }
    }

    /// Checks the whole batches at the start of `bytes` against the range
    /// and appends those that continue the log; returns how many bytes
    /// they took.
    fn append_whole_batches(
        &mut self,
        run: &mut RangeRun,
        bytes: &[u8],
    ) -> Result<usize, MirrorError> {
        let whole = run
            .check
            .whole_batches(bytes)
            .map_err(|detail| self.corrupt(detail))?;
        let (b, n) = self.append(&bytes[..whole.len])?;
        run.appended.0 += b;
        run.appended.1 += n;
        Ok(whole.len)
    }

    /// Truncates the log back to where a streamed range started.
    fn undo(&mut self, log_end_before: i64) -> Result<(), MirrorError> {
        let leo = self.log.log_end_offset();
        if leo > log_end_before {
            let cut = leo
                - self
                    .log
                    .truncate_to(log_end_before)
                    .map_err(self.log_err())?;
            self.log.flush().map_err(self.log_err())?;
            tracing::warn!(partition = %self.tp, key = %self.range.key, offset = log_end_before, cut, "removed the batches of a range that failed its checks");
        }
        Ok(())
    }

    /// Appends the batches of `bytes` (whole batches of the range, checked
    /// against it) that continue the log, as [`apply_plan::plan_append`]
    /// says; the log checks each one's CRC.
    fn append(&mut self, bytes: &[u8]) -> Result<(u64, u64), MirrorError> {
        let leo = self.log.log_end_offset();
        // The headers up to the first batch that continues the log.
        let mut spans = Vec::new();
        for item in kafkalog::batch::BatchIter::new(bytes, 0) {
            let (h, _) = item.map_err(|source| MirrorError::BadBatch {
                tp: self.tp.clone(),
                key: self.range.key.clone(),
                source: kafkalog::Error::InvalidAppend {
                    topic_partition: self.tp.to_string(),
                    source,
                },
            })?;
            spans.push(BatchSpan {
                position: h.position as usize,
                base_offset: h.base_offset,
                last_offset: h.last_offset(),
            });
            if h.last_offset() >= leo {
                break;
            }
        }
        let at = LogEnds {
            log_start: self.log.log_start_offset(),
            log_end: leo,
            active_base: self.log.segment_base_offsets().last().copied().unwrap_or(0),
        };
        let Some(plan) = apply_plan::plan_append(&spans, at, self.range.segment_base_offset) else {
            return Ok((0, 0));
        };
        if let Some(r) = plan.restart {
            self.log
                .truncate_fully_and_start_at(r.restart_at)
                .map_err(self.log_err())?;
        }
        if let Some(base) = plan.roll_to {
            self.log.roll_to(base).map_err(self.log_err())?;
        }
        let info = self
            .log
            .append_replicated(&bytes[plan.from_position..])
            .map_err(|source| match source {
                // The disk, not the data (ENOSPC, EIO, EACCES): kafkalog
                // leaves the log as it was, so a retry appends again.
                kafkalog::Error::Io { .. } => MirrorError::Log {
                    tp: self.tp.clone(),
                    source,
                },
                source => MirrorError::BadBatch {
                    tp: self.tp.clone(),
                    key: self.range.key.clone(),
                    source,
                },
            })?;
        if let Some(r) = plan.restart {
            self.log
                .raise_log_start(r.keep_log_start)
                .map_err(self.log_err())?;
        }
        Ok((info.batches as u64, info.bytes))
    }
}

/// Bytes of `next` that complete the batch `pending` begins (all of
/// `next` when it does not): the batch's size comes from its head
/// ([`kafkalog::batch::framed_size`]), which may itself straddle. A
/// negative length takes nothing more than the head: the batch checks
/// then reject it.
fn straddle_take(pending: &[u8], next: &[u8]) -> usize {
    use kafkalog::batch::{LOG_OVERHEAD, framed_size};
    let mut head = [0u8; LOG_OVERHEAD];
    let have = pending.len().min(LOG_OVERHEAD);
    head[..have].copy_from_slice(&pending[..have]);
    let from_next = (LOG_OVERHEAD - have).min(next.len());
    head[have..have + from_next].copy_from_slice(&next[..from_next]);
    if have + from_next < LOG_OVERHEAD {
        return next.len();
    }
    let total = framed_size(&head).unwrap_or(LOG_OVERHEAD);
    total.saturating_sub(pending.len()).min(next.len())
}

#[cfg(test)]
mod tests {
    use super::straddle_take;

    fn head(length: i32) -> Vec<u8> {
        let mut h = vec![0u8; 8];
        h.extend_from_slice(&length.to_be_bytes());
        h
    }

    #[test]
    fn a_straddling_batch_takes_only_what_completes_it() {
        // Head whole in pending: 12 + 100 bytes, 40 already there.
        let mut pending = head(100);
        pending.extend_from_slice(&[1; 28]);
        assert_eq!(straddle_take(&pending, &[0; 1000]), 72);
        assert_eq!(straddle_take(&pending, &[0; 50]), 50, "not complete yet");
        // Head split: 5 bytes in pending, 7 in the next piece.
        let whole = head(20);
        assert_eq!(
            straddle_take(&whole[..5], &[&whole[5..], &[9; 100][..]].concat()),
            7 + 20
        );
        // Head still incomplete: take everything.
        assert_eq!(straddle_take(&whole[..5], &whole[5..9]), 4);
        // A negative length: the head only, for the checks to refuse.
        assert_eq!(straddle_take(&head(-5)[..10], &[0; 100]), 2);
    }
}
