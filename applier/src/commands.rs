//! How `applier start|pause|resume|stop` reach the partitions, whether or
//! not a daemon runs.
//!
//! The log dir's lock tells: when the command can take it, no daemon runs
//! and the command performs the transition itself (so failover never
//! depends on a healthy daemon). When another process holds it, the command
//! hands the request to the daemon through a file and waits:
//!
//! ```text
//! <log-dir>/.segmirror/commands/<id>.request.json    written by the command (atomically)
//! <log-dir>/.segmirror/commands/<id>.response.json   written by the daemon when done
//! ```
//!
//! The daemon looks for requests between partition steps (at least every
//! poll interval, and at once while it waits), performs them, writes the
//! response, and removes the request. A command returns 0 only when its
//! transition is done: `stop` returns with the partitions STOPPED and
//! writable.
//!
//! `applier serve` holds the lock too but runs no engine, so it takes no
//! commands. While it holds the lock it records itself in
//! `<log-dir>/.segmirror/serving.json` ([`ServeMarker`]), and a command
//! that finds the lock held and that record present fails at once, saying
//! to stop `serve` first, instead of waiting for an answer that cannot
//! come. `serve` removes the record when it exits; one that a killed
//! `serve` left behind is removed by the next process that takes the lock
//! (`run`, `once`: [`clear_serve_marker`]), so it never speaks for another
//! holder.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use manifest::state::Command;
use serde::{Deserialize, Serialize};

use crate::command_plan::CommandOutcome;
pub use crate::state_dir::commands_dir;
use crate::state_dir::{is_request, request_path, response_path, serving_path};

/// `applier serve`'s record that it holds a log dir (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServeMarker {
    /// The serving process's id.
    pub pid: u32,
}

impl ServeMarker {
    /// Records this process as the log dir's `serve` (call it holding the
    /// lock).
    pub fn write(log_dir: &Path) -> std::io::Result<()> {
        let path = serving_path(log_dir);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let marker = ServeMarker {
            pid: std::process::id(),
        };
        kafkalog::fsutil::write_atomic(&path, &serde_json::to_vec(&marker)?, true)
            .map_err(std::io::Error::other)
    }

    /// The record, if there is a readable one.
    pub fn read(log_dir: &Path) -> Option<ServeMarker> {
        kafkalog::fsutil::read_bounded(
            &serving_path(log_dir),
            kafkalog::fsutil::MAX_SMALL_FILE_BYTES,
        )
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
    }
}

/// Removes a `serve` record (call it holding the lock: no `serve` holds it
/// then, whatever the record says). Whether there was one.
pub fn clear_serve_marker(log_dir: &Path) -> bool {
    match std::fs::remove_file(serving_path(log_dir)) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            tracing::warn!(log_dir = %log_dir.display(), error = %e, "could not remove serving.json");
            false
        }
    }
}

/// A request handed to a running daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRequest {
    /// Unique id (also in the file names).
    pub id: String,
    /// The command.
    pub command: Command,
    /// Topics named with `--topic`.
    pub topics: Vec<String>,
    /// `--all`.
    pub all: bool,
    /// `--allow-truncate` (start): records of a partition's own may be cut.
    #[serde(default)]
    pub allow_truncate: bool,
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResponse {
    /// The request's id.
    pub id: String,
    /// One outcome per partition.
    pub outcomes: Vec<CommandOutcome>,
}

/// Why a command could not be handed to the daemon holding the log dir.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandOffError {
    /// `applier serve` holds it: it takes no commands.
    #[error(
        "{} is held by `applier serve` (pid {pid}), which takes no operator commands; nothing changed. \
         Stop it (kill {pid}), run `applier {command}` again (it then performs the transition itself) and start `serve` again, \
         or serve the log dir with `applier run --kafka-listen`, which takes commands",
        log_dir.display()
    )]
    Serving {
        /// The log dir.
        log_dir: PathBuf,
        /// The `serve` process.
        pid: u32,
        /// The command.
        command: &'static str,
    },
    /// The daemon did not answer in time.
    #[error(
        "the applier daemon holding {} did not answer within {}{}; if it is hung, stop it (kill) and run the command again: it then performs the transition itself",
        log_dir.display(),
        humantime::format_duration(*timeout),
        if *withdrawn { " (request withdrawn, nothing changed)" } else { " (it picked the request up; check `applier status`)" }
    )]
    NoAnswer {
        /// The log dir.
        log_dir: PathBuf,
        /// How long the command waited.
        timeout: Duration,
        /// Whether the request was withdrawn (nothing changed).
        withdrawn: bool,
    },
    /// The commands directory could not be created.
    #[error("creating {}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A request or response could not be encoded or decoded.
    #[error("a command request or response: {0}")]
    Json(#[source] serde_json::Error),
    /// Writing the request failed.
    #[error(transparent)]
    Write(#[from] kafkalog::Error),
}

/// Hands a request to the daemon holding `log_dir` and waits for its
/// response up to `timeout`.
pub fn hand_to_daemon(
    log_dir: &Path,
    command: Command,
    topics: &[String],
    all: bool,
    allow_truncate: bool,
    timeout: Duration,
) -> Result<Vec<CommandOutcome>, HandOffError> {
    if let Some(serve) = ServeMarker::read(log_dir) {
        return Err(HandOffError::Serving {
            log_dir: log_dir.to_path_buf(),
            pid: serve.pid,
            command: command.as_str(),
        });
    }
    let dir = commands_dir(log_dir);
    std::fs::create_dir_all(&dir).map_err(|source| HandOffError::Io {
        path: dir.clone(),
        source,
    })?;
    let id = bucket::upload_id::fresh_string();
    let request = CommandRequest {
        id: id.clone(),
        command,
        topics: topics.to_vec(),
        all,
        allow_truncate,
    };
    kafkalog::fsutil::write_atomic(
        &request_path(&dir, &id),
        &serde_json::to_vec(&request).map_err(HandOffError::Json)?,
        true,
    )?;
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(bytes) = kafkalog::fsutil::read_bounded(
            &response_path(&dir, &id),
            kafkalog::fsutil::MAX_SMALL_FILE_BYTES,
        ) {
            let response: CommandResponse =
                serde_json::from_slice(&bytes).map_err(HandOffError::Json)?;
            let _ = std::fs::remove_file(response_path(&dir, &id));
            return Ok(response.outcomes);
        }
        if Instant::now() >= deadline {
            // Withdraw the request so a late daemon does not act on it.
            let withdrawn = std::fs::remove_file(request_path(&dir, &id)).is_ok();
            return Err(HandOffError::NoAnswer {
                log_dir: log_dir.to_path_buf(),
                timeout,
                withdrawn,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pending requests of the daemon holding `log_dir`, oldest first,
/// each claimed (its file removed: a withdrawn request is not performed);
/// an unreadable one is removed with a warning.
pub fn claim_requests(log_dir: &Path) -> Vec<CommandRequest> {
    let dir = commands_dir(log_dir);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_request)
        })
        .collect();
    paths.sort();
    let mut claimed = Vec::new();
    for path in paths {
        let request: CommandRequest = match kafkalog::fsutil::read_bounded(
            &path,
            kafkalog::fsutil::MAX_SMALL_FILE_BYTES,
        )
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        {
            Some(r) => r,
            None => {
                tracing::warn!(path = %path.display(), "ignoring an unreadable command request");
                let _ = std::fs::remove_file(&path);
                continue;
            }
        };
        // Claim it first: a withdrawn request is not performed.
        if std::fs::remove_file(&path).is_err() {
            continue;
        }
        claimed.push(request);
    }
    claimed
}

/// Writes the response to request `id` (atomically), for the command
/// waiting in [`hand_to_daemon`].
pub fn respond(log_dir: &Path, id: &str, outcomes: Vec<CommandOutcome>) {
    let response = CommandResponse {
        id: id.to_string(),
        outcomes,
    };
    match serde_json::to_vec(&response) {
        Ok(bytes) => {
            if let Err(e) = kafkalog::fsutil::write_atomic(
                &response_path(&commands_dir(log_dir), id),
                &bytes,
                true,
            ) {
                tracing::error!(error = %e, "could not write a command response");
            }
        }
        Err(e) => tracing::error!(error = %e, "could not encode a command response"),
    }
}
