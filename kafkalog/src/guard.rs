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

/// Marks the partition dir `dir` read-only with `reason`.
pub fn set(dir: &Path, reason: &str) -> Result<()> {
    let path = dir.join(GUARD_FILE);
    let body = serde_json::to_vec(&GuardFile {
        reason: reason.to_string(),
    })
    .map_err(|e| Error::InvalidArgument(format!("encoding write guard: {e}")))?;
    fsutil::write_atomic(&path, &body, true)
}

/// Removes the read-only mark (no-op when absent).
pub fn clear(dir: &Path) -> Result<()> {
    let path = dir.join(GUARD_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => fsutil::fsync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", path)(e)),
    }
}
