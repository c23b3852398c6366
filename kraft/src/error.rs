//! Errors of the `kraft` crate. Every variant names the file and, for log
//! data, the offset or byte position.

use std::path::PathBuf;

use crate::codec::DecodeError;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong reading a broker's metadata files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An IO operation failed (a [`kafkalog::Error::Io`] naming the
    /// operation and path), or a `kafkalog` reader failed.
    #[error(transparent)]
    Io(#[from] kafkalog::Error),
    /// `meta.properties` is missing a field or malformed.
    #[error("{path}: {reason}")]
    MetaProperties {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A properties file (`server.properties`) is malformed.
    #[error("{path}: {reason}")]
    Properties {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line.
        reason: String,
    },
    /// A snapshot (`.checkpoint`) is malformed: bad batch, no header or
    /// footer, an undecodable record.
    #[error("snapshot {path}: {reason}")]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A log segment holds a corrupt batch (below its torn tail) or its
    /// offsets do not follow on from what was read.
    #[error("metadata log {path}: {reason}")]
    Log {
        /// The segment or directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A record could not be decoded.
    #[error("{path}: record at offset {offset}: {source}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// The record's offset.
        offset: i64,
        /// What is wrong.
        #[source]
        source: DecodeError,
    },
    /// The metadata log directory does not exist.
    #[error("no metadata log: {path} does not exist (not a KRaft broker's metadata.log.dir?)")]
    NoMetadataLog {
        /// The missing `__cluster_metadata-0` directory.
        path: PathBuf,
    },
}

impl Error {
    /// A closure wrapping an `io::Error` for `op` on `path`.
    pub fn io<P: AsRef<std::path::Path>>(
        op: &'static str,
        path: P,
    ) -> impl FnOnce(std::io::Error) -> Error {
        move |source| Error::Io(kafkalog::Error::io(op, path)(source))
    }

    /// True when trying again later may succeed: IO errors, and a log
    /// whose tail is being written or truncated while it is read.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Io(_) | Error::Log { .. })
    }
}
