//! What can stop an export, with the partition, object key and offset it
//! concerns.

use kafkalog::TopicPartition;

/// Why an export (or one partition of it) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The source bucket failed or holds a malformed head or manifest.
    #[error("reading the bucket: {source}")]
    Bucket {
        /// The store's error.
        #[source]
        source: manifest::store::StoreError,
    },
    /// The source bucket failed for one partition.
    #[error("{tp}: reading the bucket: {source}")]
    Partition {
        /// The partition.
        tp: TopicPartition,
        /// The store's error.
        #[source]
        source: manifest::store::StoreError,
    },
    /// A shipped object does not match its manifest entry, or a batch in it
    /// is damaged: the file it feeds is not written.
    #[error("{tp}: object {key} is corrupt: {detail}; {file} is not written")]
    Corrupt {
        /// The partition.
        tp: TopicPartition,
        /// The object's key.
        key: String,
        /// What is wrong and at which batch offset.
        detail: String,
        /// The output file it feeds.
        file: String,
    },
    /// The output store failed.
    #[error("writing {key}: {source}")]
    Output {
        /// The output key.
        key: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
    /// Encoding Parquet failed.
    #[error("writing {key}: {source}")]
    Parquet {
        /// The output key.
        key: String,
        /// The encoder's error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// Building Arrow arrays failed.
    #[error("building the rows of {key}: {source}")]
    Arrow {
        /// The output key.
        key: String,
        /// The error.
        #[source]
        source: arrow_schema::ArrowError,
    },
    /// A task of the run failed (a bug).
    #[error("{0}")]
    Internal(String),
}

impl ExportError {
    /// True when the data itself is bad (a corrupt object): retrying will
    /// not help.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, ExportError::Corrupt { .. })
    }
}
