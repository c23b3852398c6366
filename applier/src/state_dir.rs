//! The applier's own files in a log dir, all under `<log-dir>/.segmirror/`
//! (Kafka skips dirs whose names start with a dot, so a broker started on
//! the log dir after failover ignores them):
//!
//! ```text
//! <log-dir>/.segmirror/status.json                     live status, rewritten by a running applier (`status`)
//! <log-dir>/.segmirror/reserve                         the disk reserve (`reserve`)
//! <log-dir>/.segmirror/group-sync.json                 the group offsets sync's record (`group_sync`)
//! <log-dir>/.segmirror/gaps.json                       gaps known: offsets never received (`gaps`, written by the engine)
//! <log-dir>/.segmirror/gap-acks.json                   the operator's acknowledgements of gaps (`gaps`, written by `applier gaps ack`)
//! <log-dir>/.segmirror/verify.json                     when the mirror was last verified, damage found (`verify`)
//! <log-dir>/.segmirror/commands/<id>.request.json      an operator command handed to the daemon (`commands`)
//! <log-dir>/.segmirror/commands/<id>.response.json     the daemon's answer
//! <log-dir>/.segmirror/serving.json                    `applier serve` holds the lock and takes no commands (`commands`)
//! ```
//!
//! Per-partition state (the mirror record, the write guard) lives in each
//! partition's dir; its file names belong to `manifest::mirror_record` and
//! `kafkalog::guard`. This module is the only place that names the files
//! above.

use std::path::{Path, PathBuf};

/// The directory, relative to the log dir.
pub const STATE_DIR: &str = ".segmirror";

/// `<log-dir>/.segmirror`.
pub fn state_dir(log_dir: &Path) -> PathBuf {
    log_dir.join(STATE_DIR)
}

/// The live status file.
pub fn live_status_path(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("status.json")
}

/// The group offsets sync's record.
pub fn group_sync_path(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("group-sync.json")
}

/// The gaps known (`crate::gaps`).
pub fn gaps_path(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("gaps.json")
}

/// The acknowledgements of gaps (`crate::gaps`).
pub fn gap_acks_path(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("gap-acks.json")
}

/// The verification record (`crate::verify::VerifyRecord`).
pub fn verify_record_path(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("verify.json")
}

/// The disk reserve file.
pub fn reserve_path(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("reserve")
}

/// Written by `applier serve` while it holds the log dir's lock
/// (`crate::commands::ServeMarker`).
pub fn serving_path(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("serving.json")
}

/// The directory of pending command requests.
pub fn commands_dir(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("commands")
}

/// The request file of command `id` in `commands_dir`.
pub fn request_path(commands_dir: &Path, id: &str) -> PathBuf {
    commands_dir.join(format!("{id}.request.json"))
}

/// The response file of command `id` in `commands_dir`.
pub fn response_path(commands_dir: &Path, id: &str) -> PathBuf {
    commands_dir.join(format!("{id}.response.json"))
}

/// Whether `file_name` (in `commands_dir`) is a request.
pub fn is_request(file_name: &str) -> bool {
    file_name.ends_with(".request.json")
}
