//! The wall clock, in milliseconds since the Unix epoch: what the
//! applier stamps on records, gap entries and set-aside files. A clock
//! before 1970 reads as 0.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
