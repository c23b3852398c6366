//! The write guard: a persisted read-only mark on a partition.
//!
//! A mirror partition accepts replicated appends (from the applier) but must
//! refuse producer writes in every mirror state but STOPPED. The mark is the
//! file [`GUARD_FILE`] in the partition dir, holding one JSON object with the
//! reason. Because it lives in the log dir, every writer in every process
//! sees it: leader appends check for it before writing. It is written
//! atomically (temp file, fsync, rename, fsync dir) and removed with a
//! directory fsync, so a crash leaves either the old or the new mark.
//!
//! Kafka ignores files it does not know in a partition dir, so a broker
//! started on the log dir is not disturbed by it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsutil;

/// Name of the guard file inside a partition dir.
pub const GUARD_FILE: &str = "segmirror-write-guard.json";

#[derive(Debug, Serialize, Deserialize)]
struct GuardFile {
    reason: String,
}

/// Reads the guard of the partition dir `dir`: `Some(reason)` when the
/// partition is read-only.
pub fn read(dir: &Path) -> Result<Option<String>> {
    let path = dir.join(GUARD_FILE);
    let Some(bytes) = fsutil::read_optional(&path)? else {
        return Ok(None);
    };
    let guard: GuardFile = serde_json::from_slice(&bytes)
        .map_err(|e| Error::malformed(&path, e.line(), e.to_string()))?;
    Ok(Some(guard.reason))
}

/// Marks the partition dir `dir` read-only with `reason`. A mark already
/// there with the same reason is left as it is: every open of a mirror
/// sets its guard again, and neither a rename nor an fsync per partition
/// is spent on a mark that is there. (Such a mark may not be durable yet
/// if the process that wrote it died before its barrier; a power loss
/// then loses it, and the next open of the mirror, the only writer of the
/// log dir, sets it again from the mirror record before anything else.)
pub fn set(dir: &Path, reason: &str) -> Result<()> {
    let path = dir.join(GUARD_FILE);
    let body = serde_json::to_vec(&GuardFile {
        reason: reason.to_string(),
    })
    .map_err(|e| Error::InvalidArgument(format!("encoding write guard: {e}")))?;
    if fsutil::read_optional(&path)?.as_deref() == Some(body.as_slice()) {
        return Ok(());
    }
    fsutil::write_atomic(&path, &body, true)
}

/// Removes the read-only mark (no-op when absent).
pub fn clear(dir: &Path) -> Result<()> {
    let path = dir.join(GUARD_FILE);
    // Also a mark set earlier in this thread's deferred scope. Inside a
    // scope the mark goes at the barrier, after the records written with
    // it (STOPPED before writes are allowed, also after a kill -9).
    let present = fsutil::replace_pending(&path) || path.exists();
    fsutil::remove_at_barrier(&path)?;
    if present {
        fsutil::fsync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn set_read_clear_and_an_identical_mark_is_not_rewritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read(dir.path()).expect("read"), None);
        set(dir.path(), "mirror of src").expect("set");
        assert_eq!(
            read(dir.path()).expect("read").as_deref(),
            Some("mirror of src")
        );
        let inode = |d: &Path| std::fs::metadata(d.join(GUARD_FILE)).expect("stat").ino();
        let first = inode(dir.path());
        set(dir.path(), "mirror of src").expect("same again");
        assert_eq!(
            inode(dir.path()),
            first,
            "the same mark is kept, not renamed over"
        );
        set(dir.path(), "mirror of other").expect("another reason");
        assert_ne!(inode(dir.path()), first, "a new reason is a new file");
        assert_eq!(
            read(dir.path()).expect("read").as_deref(),
            Some("mirror of other")
        );
        clear(dir.path()).expect("clear");
        clear(dir.path()).expect("clear again is a no-op");
        assert_eq!(read(dir.path()).expect("read"), None);
    }
}
