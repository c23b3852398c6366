//! The disk reserve: a ballast file that keeps room for the applier's own
//! state when the destination disk fills up.
//!
//! On a full disk the first thing to fail is an append; the partition must
//! then go FAILED, and that state must reach its mirror record and the live
//! status (both written as a temp file and a rename, which need free
//! blocks), or `applier status` keeps showing MIRRORING with no error. So
//! the applier holds `<log-dir>/.segmirror/reserve`, a file of
//! [`ApplierOptions::disk_reserve_bytes`](crate::ApplierOptions) zeros
//! (written, not sparse), and:
//!
//! - when writing its own state fails with "no space left", it deletes the
//!   reserve and writes again (the freed blocks hold the records of the
//!   partitions that fail in that cycle and the live status);
//! - it appends to mirror logs only while it holds the reserve: without it,
//!   each cycle tries to write it again; when that fails for lack of space,
//!   mirroring partitions fail with a retryable "disk reserve" error instead
//!   of appending, and resume on their own once the reserve fits again.
//!
//! Invariants: the reserve is either whole (`held`) or absent: a write that
//! fails part-way is deleted. Errors other than "no space left" (a
//! read-only `.segmirror`, say) never block mirroring: the reserve is then
//! simply not held and a warning says why. A reserve of 0 bytes disables
//! all of this.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// Default size of the reserve: room for a few hundred mirror records and
/// the live status of a few thousand partitions.
pub const DEFAULT_RESERVE_BYTES: u64 = 1 << 20;

/// The ballast file of one log dir.
#[derive(Debug)]
pub struct DiskReserve {
    path: PathBuf,
    size: u64,
    held: bool,
    /// Why the last attempt to write it failed, if it did.
    last_error: Option<std::io::Error>,
}

impl DiskReserve {
    /// The reserve of `log_dir`, written now if it is missing or short.
    pub fn open(log_dir: &Path, size: u64) -> DiskReserve {
        let path = crate::state_dir::reserve_path(log_dir);
        let held = size == 0
            || std::fs::metadata(&path)
                .map(|m| m.is_file() && m.len() == size)
                .unwrap_or(false);
        let mut reserve = DiskReserve {
            path,
            size,
            held,
            last_error: None,
        };
        reserve.write_if_not_held();
        reserve
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether mirror logs may grow: the reserve is held, or it could not
    /// be written for a reason other than a full disk.
    pub fn allows_appends(&self) -> bool {
        self.held || !self.out_of_space()
    }

    /// Whether the last attempt to write the reserve found the disk full.
    pub fn out_of_space(&self) -> bool {
        self.last_error
            .as_ref()
            .is_some_and(|e| e.kind() == ErrorKind::StorageFull)
    }

    /// Why the reserve is not held, when it is not.
    pub fn last_error(&self) -> Option<&std::io::Error> {
        self.last_error.as_ref()
    }

    /// Writes the reserve if it is not held. Returns whether it is held.
    pub fn write_if_not_held(&mut self) -> bool {
        if self.held {
            return true;
        }
        match write_zeros(&self.path, self.size) {
            Ok(()) => {
                if self.last_error.take().is_some() {
                    tracing::info!(path = %self.path.display(), bytes = self.size, "disk reserve restored");
                }
                self.held = true;
            }
            Err(e) => {
                let _ = std::fs::remove_file(&self.path);
                if self.last_error.as_ref().map(|x| x.kind()) != Some(e.kind()) {
                    tracing::warn!(path = %self.path.display(), bytes = self.size, error = %e, "cannot write the disk reserve");
                }
                self.last_error = Some(e);
            }
        }
        self.held
    }

    /// Deletes the reserve to make room for the applier's own state.
    /// Returns true when that freed space.
    pub fn release(&mut self) -> bool {
        if !self.held || self.size == 0 {
            return false;
        }
        self.held = false;
        match std::fs::remove_file(&self.path) {
            Ok(()) => {
                tracing::warn!(path = %self.path.display(), bytes = self.size, "disk full: released the disk reserve to record the failure");
                self.last_error = Some(std::io::Error::from(ErrorKind::StorageFull));
                true
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot delete the disk reserve");
                false
            }
        }
    }
}

/// True when `e` (anywhere in its chain) is "no space left on device".
pub fn is_disk_full(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && (io.kind() == ErrorKind::StorageFull || io.raw_os_error() == Some(28))
        {
            return true;
        }
        cur = err.source();
    }
    false
}

fn write_zeros(path: &Path, size: u64) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::File::create(path)?;
    let chunk = vec![0u8; 64 * 1024];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    // Blocks must really be allocated: a file that only exists in the page
    // cache is not a reserve.
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_written_whole_released_and_restored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = DiskReserve::open(dir.path(), 100_000);
        assert!(r.allows_appends());
        assert_eq!(std::fs::metadata(r.path()).expect("reserve").len(), 100_000);
        assert!(r.release());
        assert!(!r.path().exists());
        assert!(!r.release(), "nothing left to release");
        assert!(r.write_if_not_held());
        assert!(r.allows_appends());
        assert_eq!(std::fs::metadata(r.path()).expect("reserve").len(), 100_000);
        // A short file (a crash while writing it) is written again.
        std::fs::write(r.path(), b"short").expect("write");
        let r = DiskReserve::open(dir.path(), 100_000);
        assert_eq!(std::fs::metadata(r.path()).expect("reserve").len(), 100_000);
    }

    #[test]
    fn a_reserve_that_cannot_be_written_for_another_reason_does_not_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        // `.segmirror` is a file: the reserve cannot be created under it.
        std::fs::write(crate::state_dir::state_dir(dir.path()), b"x").expect("write");
        let r = DiskReserve::open(dir.path(), 4096);
        assert!(r.last_error().is_some());
        assert!(!r.out_of_space());
        assert!(r.allows_appends());
    }

    #[test]
    fn disk_full_is_found_in_an_error_chain() {
        let io = std::io::Error::from_raw_os_error(28);
        let e = kafkalog::Error::Io {
            op: "write",
            path: "/x".into(),
            source: io,
        };
        assert!(is_disk_full(&e));
        let other = kafkalog::Error::Io {
            op: "write",
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(13),
        };
        assert!(!is_disk_full(&other));
    }
}
