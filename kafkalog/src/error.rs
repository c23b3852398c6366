//! Errors of the `kafkalog` crate.
//!
//! Every variant names the thing that went wrong and where: the file, the
//! byte position inside it, the offset of the batch, the topic-partition.
//! Pure parsers (batches, checkpoints) report positions relative to the
//! buffer they were given; the IO layer wraps them with the file's path.

use std::io;
use std::path::PathBuf;

use crate::batch::BatchError;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong reading or writing a Kafka-format log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An IO operation on a file or directory failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What we were doing ("open", "read", "fsync", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A record batch in a file is malformed (truncated, bad length, old
    /// magic, CRC mismatch).
    #[error("{path}: {source}")]
    Batch {
        /// The segment file (or other file) holding the batch.
        path: PathBuf,
        /// What is wrong and at which byte position.
        #[source]
        source: BatchError,
    },
    /// A batch given to an append call is malformed.
    #[error("batch to append to {topic_partition}: {source}")]
    InvalidAppend {
        /// The partition being appended to.
        topic_partition: String,
        /// What is wrong with the batch.
        #[source]
        source: BatchError,
    },
    /// A text or binary file (checkpoint, metadata, index, state) could not be
    /// parsed.
    #[error("{path}: line {line}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0 when the file is binary or the line is
        /// unknown).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A leader append was refused because the partition is read-only (a
    /// mirror partition that is not STOPPED).
    #[error("{topic_partition} is read-only: {reason}")]
    ReadOnly {
        /// The partition, `topic-partition`.
        topic_partition: String,
        /// Why it is read-only, as recorded in the write guard.
        reason: String,
    },
    /// A Kafka broker (or another process) holds the POSIX record lock
    /// Kafka takes on the log dir's `.lock` ([`crate::logdir::posix_lock_holder`]).
    #[error(
        "log dir {path} is in use by a running Kafka broker: {lock} is locked (fcntl) by process {pid}; stop the broker first (a dir a broker owns is never a mirror target)"
    )]
    OwnedByBroker {
        /// The log dir.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The holder's process id, when the kernel says (`?` otherwise).
        pid: String,
    },
    /// Another process holds the log dir's lock.
    #[error("log dir {path} is locked by another process (lock file {lock})")]
    Locked {
        /// The log dir.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// A replicated append would not continue the log: its first offset is
    /// below the log end offset, or its offsets go backwards.
    #[error(
        "{topic_partition}: batch at offset {base_offset} does not continue the log (log end offset {log_end_offset})"
    )]
    OffsetOutOfOrder {
        /// The partition.
        topic_partition: String,
        /// Base offset of the offending batch.
        base_offset: i64,
        /// The log end offset it had to reach at least.
        log_end_offset: i64,
    },
    /// A replicated append carries a leader epoch lower than the latest epoch
    /// already in the log.
    #[error(
        "{topic_partition}: batch at offset {base_offset} has leader epoch {epoch}, below the log's latest epoch {latest_epoch}"
    )]
    EpochOutOfOrder {
        /// The partition.
        topic_partition: String,
        /// Base offset of the offending batch.
        base_offset: i64,
        /// Its leader epoch.
        epoch: i32,
        /// The latest epoch already in the log.
        latest_epoch: i32,
    },
    /// An offset outside the log was asked for.
    #[error(
        "{topic_partition}: offset {offset} is out of range [{log_start_offset}, {log_end_offset})"
    )]
    OffsetOutOfRange {
        /// The partition.
        topic_partition: String,
        /// The offset asked for.
        offset: i64,
        /// First offset kept.
        log_start_offset: i64,
        /// Log end offset.
        log_end_offset: i64,
    },
    /// A name (topic, partition directory) is not valid.
    #[error("invalid {what} {name:?}: {reason}")]
    InvalidName {
        /// What kind of name ("topic", "partition directory").
        what: &'static str,
        /// The name as given.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The partition does not exist in the log dir.
    #[error("partition {topic_partition} not found in {log_dir}")]
    NoSuchPartition {
        /// The partition.
        topic_partition: String,
        /// The log dir searched.
        log_dir: PathBuf,
    },
    /// The partition's topic id differs from the one expected.
    #[error("{topic_partition}: topic id {found} in {path} differs from expected {expected}")]
    TopicIdMismatch {
        /// The partition.
        topic_partition: String,
        /// The `partition.metadata` file.
        path: PathBuf,
        /// The id expected.
        expected: String,
        /// The id found.
        found: String,
    },
    /// Records could not be encoded or decoded (compression, varints).
    #[error("records of batch at offset {base_offset}: {reason}")]
    Records {
        /// Base offset of the batch.
        base_offset: i64,
        /// What is wrong.
        reason: String,
    },
    /// An argument to an operation is invalid.
    #[error("{0}")]
    InvalidArgument(String),
}

impl Error {
    /// Wraps an IO error with the operation and path.
    /// The path is copied only when an error happens.
    pub fn io<P: AsRef<std::path::Path>>(
        op: &'static str,
        path: P,
    ) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io {
            op,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// Builds a [`Error::Malformed`].
    pub fn malformed(path: impl Into<PathBuf>, line: usize, reason: impl Into<String>) -> Error {
        Error::Malformed {
            path: path.into(),
            line,
            reason: reason.into(),
        }
    }
}
