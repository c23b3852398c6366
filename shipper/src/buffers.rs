//! The memory every upload shares: one budget of part buffers.
//!
//! An upload reads its object in pieces of exactly `part_size` bytes (the
//! last one shorter), each into a buffer of its own, and sends each piece
//! as one multipart part, or the whole object as one PUT when it fits in
//! one piece ([`crate::upload`]). Before it reads a piece, an upload takes
//! a [`PartPermit`] from the [`PartBuffers`] that all uploads share, and
//! the permit goes back when that piece's request has finished (or was
//! abandoned). So the uploads hold at most [`UPLOAD_MEMORY`] of pieces at
//! once (and never fewer than two parts), whatever the number of uploads,
//! the size of objects or segments, or how slow the store is.
//!
//! Buffers are reused: a buffer goes back to the free list when the last
//! `Bytes` referring to it is dropped, and the list keeps at most as many
//! as the budget has permits. Allocating and freeing a buffer per piece on
//! the blocking threads that read and the runtime threads that upload let
//! glibc keep up to twice the live memory in its per-thread arenas (see
//! BENCHMARKS.md); buffers that live for the whole process do not.
//!
//! Invariants:
//! - Progress: an upload holding a permit needs nothing more from other
//!   uploads to give it back (it reads its piece from disk, then sends
//!   one request), and an upload waiting for a permit holds no other
//!   permit that is not already in a request. So the budget cannot
//!   deadlock, and the semaphore being fair, no upload starves.
//! - Taking a buffer never waits: when none is free (a store that keeps
//!   the `Bytes` of a finished request, as an in-memory one does) a new one
//!   is allocated. What bounds memory on a store that lets go of its
//!   requests' bytes is the permits.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What all uploads' pieces may hold at once (a budget of
/// `UPLOAD_MEMORY / part_size` parts, and never fewer than two).
pub(crate) const UPLOAD_MEMORY: usize = 32 * 1024 * 1024;

/// The shared budget and free buffers. See the module docs.
#[derive(Debug)]
pub(crate) struct PartBuffers {
    part_size: usize,
    parts: usize,
    permits: Arc<Semaphore>,
    free: Mutex<Vec<Vec<u8>>>,
}

/// Permission to hold one piece: given back when dropped.
#[derive(Debug)]
pub(crate) struct PartPermit(#[allow(dead_code)] OwnedSemaphorePermit);

impl PartBuffers {
    /// Buffers of `part_size` bytes, as many at once as fit in
    /// [`UPLOAD_MEMORY`] (at least two).
    pub(crate) fn new(part_size: usize) -> Arc<PartBuffers> {
        PartBuffers::with_parts(part_size, (UPLOAD_MEMORY / part_size.max(1)).max(2))
    }

    /// Buffers of `part_size` bytes, `parts` at once.
    pub(crate) fn with_parts(part_size: usize, parts: usize) -> Arc<PartBuffers> {
        let parts = parts.max(1);
        Arc::new(PartBuffers {
            part_size: part_size.max(1),
            parts,
            permits: Arc::new(Semaphore::new(parts)),
            free: Mutex::new(Vec::new()),
        })
    }

    /// How many pieces all uploads may hold at once.
    #[cfg(test)]
    pub(crate) fn parts(&self) -> usize {
        self.parts
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        match self.free.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Waits for a permit to hold one piece (fair: first come, first
    /// served).
    pub(crate) async fn permit(&self) -> PartPermit {
        match Arc::clone(&self.permits).acquire_owned().await {
            Ok(p) => PartPermit(p),
            // The semaphore is never closed.
            Err(_) => unreachable!("the part budget's semaphore is never closed"),
        }
    }

    /// A buffer for a piece of `len` bytes (at most the part size): a free
    /// one, or a new one when none is free. Its bytes are whatever the
    /// buffer held before: the reader overwrites all `len` of them.
    pub(crate) fn take(self: &Arc<PartBuffers>, len: usize) -> PartBuf {
        let mut buf = self.lock().pop().unwrap_or_default();
        let want = len.max(self.part_size);
        if buf.len() < want {
            // Zeroed once, when the buffer is made (a fresh mapping: the
            // kernel's zero pages); reuses skip it.
            buf = vec![0; want];
        }
        PartBuf {
            buf,
            len,
            pool: Arc::clone(self),
        }
    }

    fn give_back(&self, buf: Vec<u8>) {
        if buf.len() != self.part_size {
            return;
        }
        let mut free = self.lock();
        if free.len() < self.parts {
            free.push(buf);
        }
    }

    /// Free buffers kept, for tests.
    #[cfg(test)]
    fn free_count(&self) -> usize {
        self.lock().len()
    }
}

/// A buffer taken from [`PartBuffers`], holding one piece; goes back when
/// dropped.
#[derive(Debug)]
pub(crate) struct PartBuf {
    buf: Vec<u8>,
    len: usize,
    pool: Arc<PartBuffers>,
}

impl PartBuf {
    /// The piece's bytes, to fill.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }

    /// The piece, without copying; the buffer goes back when the last
    /// `Bytes` referring to it is dropped.
    pub(crate) fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for PartBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::ops::Deref for PartBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for PartBuf {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_when_the_last_reference_goes_and_are_reused() {
        let pool = PartBuffers::with_parts(8, 4);
        let mut a = pool.take(3);
        a.as_mut_slice().copy_from_slice(b"abc");
        let address = a.as_ref().as_ptr();
        let bytes = a.into_bytes();
        let tail = bytes.slice(1..);
        assert_eq!(&tail[..], b"bc");
        drop(bytes);
        assert_eq!(pool.free_count(), 0, "still referred to by a slice");
        drop(tail);
        assert_eq!(pool.free_count(), 1, "back once the last reference went");
        let b = pool.take(8);
        assert_eq!(b.len(), 8, "a piece as long as asked");
        assert_eq!(b.as_ref().as_ptr(), address, "the same buffer, reused");
    }

    #[test]
    fn taking_never_waits_and_at_most_parts_buffers_are_kept() {
        let pool = PartBuffers::with_parts(8, 2);
        let out: Vec<PartBuf> = (0..5).map(|_| pool.take(8)).collect();
        assert_eq!(out.len(), 5, "more than the budget can be out at once");
        drop(out);
        assert_eq!(pool.free_count(), 2);
    }

    #[tokio::test]
    async fn permits_bound_the_pieces_held() {
        let pool = PartBuffers::with_parts(8, 2);
        let a = pool.permit().await;
        let _b = pool.permit().await;
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), pool.permit());
        assert!(third.await.is_err(), "a third piece waits");
        drop(a);
        let third = tokio::time::timeout(std::time::Duration::from_secs(5), pool.permit());
        assert!(third.await.is_ok(), "and goes once one is given back");
    }

    #[test]
    fn the_budget_is_upload_memory_in_parts_and_at_least_two() {
        assert_eq!(PartBuffers::new(8 << 20).parts(), 4);
        assert_eq!(PartBuffers::new(2 << 20).parts(), 16);
        assert_eq!(PartBuffers::new(1 << 20).parts(), 32);
        assert_eq!(PartBuffers::new(64 << 20).parts(), 2);
    }
}
