//! The write guard: a persisted read-only mark on a partition.
//!
//! A mirror partition accepts replicated appends (from the applier) but must
//! refuse producer writes in every mirror state but STOPPED. The mark is the
//! file [`GUARD_FILE`] in the partition dir, holding one JSON object with the
//! reason. Because it lives in the log dir, every writer in every process
//! sees it: leader appends check for it before writing. A new mark is
//! written by a rename over it, at once and without an fsync; clearing it
//! moves it aside ([`PARKED_FILE`]) at the barrier (after the records that
//! allow writes are durable) and setting it again with the same reason
//! moves it back, renames without a directory fsync of their own: a crash
//! leaves the old or the new mark, and a power loss may undo such a change
//! or leave a new mark torn (unreadable, which refuses writes too). That is safe because the mark is not the authority: the mirror
//! record is (the applier's journal, durable before the mark moves), the
//! gateway refuses producers on its state first, and every open of a
//! mirror sets or clears the mark from it again (`manifest::state::on_restart`).
//!
//! Kafka ignores files it does not know in a partition dir, so a broker
//! started on the log dir is not disturbed by it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsutil;

/// Name of the guard file inside a partition dir.
pub const GUARD_FILE: &str = "segmirror-write-guard.json";
/// Where [`clear`] moves the guard file: a cleared mark, read by nothing
/// but [`set`], which moves it back when its reason is the same. A stop
/// and a start of 10,000 partitions then rename files instead of deleting
/// and creating them (ext4 scans past every inode freed in the last half
/// minute at each creation: seconds at that count).
pub const PARKED_FILE: &str = "segmirror-write-guard.cleared.json";

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
/// A mark [`clear`] moved aside with the same reason is moved back (a
/// rename: no file created, no directory fsync; see the module docs).
pub fn set(dir: &Path, reason: &str) -> Result<()> {
    let path = dir.join(GUARD_FILE);
    let body = serde_json::to_vec(&GuardFile {
        reason: reason.to_string(),
    })
    .map_err(|e| Error::InvalidArgument(format!("encoding write guard: {e}")))?;
    let current = fsutil::read_optional(&path)?;
    if current.as_deref() == Some(body.as_slice()) {
        return Ok(());
    }
    // Only when nothing of the mark's own is on disk or pending: otherwise
    // the replacement below also cancels what is pending.
    let parked = dir.join(PARKED_FILE);
    if current.is_none()
        && !path.exists()
        && fsutil::read_optional(&parked)?.as_deref() == Some(body.as_slice())
    {
        return fsutil::rename_at_barrier(&parked, &path);
    }
    if current.is_none() && path.exists() {
        // A clear waiting for this thread's barrier: the deferred
        // replacement cancels it.
        return fsutil::write_atomic(&path, &body, true);
    }
    // Not fsynced, and in place at once rather than at the barrier: a mark
    // set early only refuses more, a torn one (a power loss before the
    // page cache was written) is unreadable and so refuses too until the
    // next open of the mirror sets it again (see the module docs).
    fsutil::write_atomic(&path, &body, false)
}

/// Removes the read-only mark (no-op when absent): moves it aside to
/// [`PARKED_FILE`], where the next [`set`] with the same reason finds it.
pub fn clear(dir: &Path) -> Result<()> {
    let path = dir.join(GUARD_FILE);
    // Inside a scope the mark goes at the barrier, after the records
    // written with it (STOPPED before writes are allowed, also after a
    // kill -9). A mark set earlier in the same scope is cancelled.
    if fsutil::replace_pending(&path) {
        fsutil::remove_at_barrier(&path)?;
        return fsutil::fsync_dir(dir);
    }
    if !path.exists() {
        return Ok(());
    }
    // No directory fsync: see the module docs.
    fsutil::move_at_barrier(&path, &dir.join(PARKED_FILE))
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

    #[test]
    fn a_cleared_mark_is_moved_aside_and_back_without_a_file_created_or_deleted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let inode = |name: &str| std::fs::metadata(d.join(name)).map(|m| m.ino()).ok();
        set(d, "mirror of src").expect("set");
        let first = inode(GUARD_FILE).expect("set");
        // Outside a scope, then inside one (the barrier moves it).
        clear(d).expect("clear");
        assert_eq!((inode(GUARD_FILE), inode(PARKED_FILE)), (None, Some(first)));
        set(d, "mirror of src").expect("set again");
        assert_eq!((inode(GUARD_FILE), inode(PARKED_FILE)), (Some(first), None));
        let scope = fsutil::DeferredSync::begin();
        clear(d).expect("clear");
        assert_eq!(
            read(d).expect("read"),
            None,
            "cleared for this thread at once"
        );
        assert_eq!(inode(GUARD_FILE), Some(first), "on disk until the barrier");
        scope.finish().expect("barrier");
        assert_eq!((inode(GUARD_FILE), inode(PARKED_FILE)), (None, Some(first)));
        let scope = fsutil::DeferredSync::begin();
        set(d, "mirror of src").expect("set");
        assert_eq!(read(d).expect("read").as_deref(), Some("mirror of src"));
        assert_eq!(inode(GUARD_FILE), None, "in place at the barrier");
        scope.finish().expect("barrier");
        assert_eq!((inode(GUARD_FILE), inode(PARKED_FILE)), (Some(first), None));
        // Cleared then set in one scope: the mark stays.
        let scope = fsutil::DeferredSync::begin();
        clear(d).expect("clear");
        set(d, "mirror of src").expect("set");
        scope.finish().expect("barrier");
        assert_eq!(read(d).expect("read").as_deref(), Some("mirror of src"));
        // A parked mark of another reason is not brought back.
        let before = inode(GUARD_FILE);
        clear(d).expect("clear");
        set(d, "mirror of other").expect("set");
        assert_eq!(read(d).expect("read").as_deref(), Some("mirror of other"));
        assert_eq!(inode(PARKED_FILE), before, "still parked");
        // Set then cleared in one scope: no mark.
        let scope = fsutil::DeferredSync::begin();
        clear(d).expect("clear");
        set(d, "mirror of src").expect("set");
        clear(d).expect("clear");
        scope.finish().expect("barrier");
        assert_eq!(read(d).expect("read"), None);
    }
}
