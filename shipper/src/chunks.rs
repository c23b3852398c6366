//! Reusable chunk buffers shared by every upload.
//!
//! The readers of [`crate::upload`] fill chunks of about [`CHUNK`] bytes
//! with whole batches; a chunk travels through the upload's channel into a
//! PUT or a multipart part and comes back here when the last `Bytes` that
//! refers to it is dropped (its request finished or was abandoned), to be
//! handed out again.
//!
//! Why: allocating and freeing a fresh 1 MiB buffer per chunk, on the
//! blocking threads that read and the runtime threads that upload, let
//! glibc keep about twice the live memory in its per-thread arenas (the
//! peak RSS halved with `MALLOC_MMAP_THRESHOLD_` pinned; see
//! BENCHMARKS.md). Reusing buffers keeps the process near its live set.
//!
//! Invariants:
//! - Taking never blocks: when no buffer is free a new one is allocated.
//!   What bounds memory is the upload path's structure (a channel of
//!   [`crate::upload::CHANNEL`] chunks, the part being filled, two parts in
//!   flight, per upload), not this pool, so a store that keeps the `Bytes`
//!   it was given cannot make an upload wait for ever.
//! - At most `keep` free buffers are kept; more are freed when they come
//!   back, and so is a buffer that grew beyond twice its size for a batch
//!   larger than [`CHUNK`].
//! - Every buffer handed out is a [`Chunk`], whose `Drop` gives it back,
//!   whether it was sealed into `Bytes` and uploaded or dropped on an error.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

/// Size the readers fill a chunk to before handing it over (a chunk holds
/// whole batches, so it may end up to one batch larger).
pub(crate) const CHUNK: usize = 1024 * 1024;

/// Capacity allocated per buffer: a chunk plus room for the batch that
/// crosses the [`CHUNK`] mark, for batches up to 64 KiB.
const BUFFER_CAPACITY: usize = CHUNK + 64 * 1024;

/// A buffer that grew beyond this is not kept when it comes back.
const KEEP_AT_MOST: usize = 2 * BUFFER_CAPACITY;

/// The shared free buffers. See the module docs.
#[derive(Debug)]
pub(crate) struct ChunkPool {
    keep: usize,
    free: Mutex<Vec<Vec<u8>>>,
}

impl ChunkPool {
    /// A pool keeping at most `keep` free buffers.
    pub(crate) fn new(keep: usize) -> Arc<ChunkPool> {
        Arc::new(ChunkPool {
            keep,
            free: Mutex::new(Vec::new()),
        })
    }

    /// A pool for `concurrency` uploads at once, each with a channel of
    /// `channel` chunks and parts of `part_size` bytes: it keeps as many
    /// buffers as those uploads can hold at once outside parts in flight.
    pub(crate) fn for_uploads(
        concurrency: usize,
        channel: usize,
        part_size: usize,
    ) -> Arc<ChunkPool> {
        let part_chunks = part_size.div_ceil(CHUNK);
        ChunkPool::new(concurrency.max(1) * (channel + part_chunks + 1))
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        match self.free.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// An empty buffer: a free one, or a new one when none is free.
    pub(crate) fn take(self: &Arc<ChunkPool>) -> Chunk {
        let buf = self
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUFFER_CAPACITY));
        Chunk {
            buf,
            pool: Arc::clone(self),
        }
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() > KEEP_AT_MOST {
            return;
        }
        let mut free = self.lock();
        if free.len() < self.keep {
            buf.clear();
            free.push(buf);
        }
    }

    /// Free buffers kept, for tests.
    #[cfg(test)]
    fn free_count(&self) -> usize {
        self.lock().len()
    }
}

/// A buffer taken from a [`ChunkPool`]; goes back when dropped.
#[derive(Debug)]
pub(crate) struct Chunk {
    buf: Vec<u8>,
    pool: Arc<ChunkPool>,
}

impl Chunk {
    /// The buffer, to fill.
    pub(crate) fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Bytes filled so far.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was filled.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The filled bytes, without copying; the buffer goes back to the pool
    /// when the last `Bytes` referring to it is dropped.
    pub(crate) fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_when_the_last_reference_goes_and_are_reused() {
        let pool = ChunkPool::new(4);
        let mut a = pool.take();
        a.buf().extend_from_slice(b"abc");
        let address = a.buf().as_ptr();
        let bytes = a.into_bytes();
        let tail = bytes.slice(1..);
        assert_eq!(&tail[..], b"bc");
        drop(bytes);
        assert_eq!(pool.free_count(), 0, "still referred to by a slice");
        drop(tail);
        assert_eq!(pool.free_count(), 1, "back once the last reference went");
        let mut b = pool.take();
        assert!(b.is_empty(), "handed out empty");
        assert_eq!(b.buf().as_ptr(), address, "the same buffer, reused");
    }

    #[test]
    fn taking_never_waits_and_at_most_keep_buffers_are_kept() {
        let pool = ChunkPool::new(2);
        let out: Vec<Chunk> = (0..5).map(|_| pool.take()).collect();
        assert_eq!(out.len(), 5, "more than kept can be out at once");
        drop(out);
        assert_eq!(pool.free_count(), 2);
    }

    #[test]
    fn an_oversized_buffer_is_not_kept() {
        let pool = ChunkPool::new(1);
        let mut a = pool.take();
        a.buf().resize(KEEP_AT_MOST + 1, 0);
        drop(a);
        assert_eq!(pool.free_count(), 0);
    }

    #[test]
    fn keeps_what_the_uploads_hold_outside_parts_in_flight() {
        // 4 uploads, 2-chunk channels, 8 MiB parts: 4 x (2 + 8 + 1).
        assert_eq!(ChunkPool::for_uploads(4, 2, 8 << 20).keep, 44);
        // A part smaller than a chunk still counts one.
        assert_eq!(ChunkPool::for_uploads(1, 2, 1024).keep, 4);
    }
}
