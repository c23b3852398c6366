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
        source: bucket::store::StoreError,
    },
    /// The source bucket failed for one partition.
    #[error("{tp}: reading the bucket: {source}")]
    Partition {
        /// The partition.
        tp: TopicPartition,
        /// The store's error.
        #[source]
        source: bucket::store::StoreError,
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

    /// True for failures a later run may not meet (the store unavailable,
    /// an object not replicated yet); false for bad data, refused access
    /// and bugs. A re-run resumes either way, keeping complete files.
    pub fn is_retryable(&self) -> bool {
        match self {
            ExportError::Bucket { source } | ExportError::Partition { source, .. } => {
                source.is_retryable()
            }
            ExportError::Output { source, .. } => bucket::store::retryable(source),
            ExportError::Corrupt { .. }
            | ExportError::Parquet { .. }
            | ExportError::Arrow { .. }
            | ExportError::Internal(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_data_is_not_retryable_and_a_missing_object_is() {
        let tp = TopicPartition::new("orders", 0).expect("tp");
        let corrupt = ExportError::Corrupt {
            tp: tp.clone(),
            key: "k".into(),
            detail: "first bad batch at offset 7".into(),
            file: "f".into(),
        };
        assert!(corrupt.is_corrupt() && !corrupt.is_retryable());
        let missing = ExportError::Partition {
            tp,
            source: bucket::store::StoreError::NotFound { key: "k".into() },
        };
        assert!(missing.is_retryable() && !missing.is_corrupt());
        assert_eq!(
            corrupt.to_string(),
            "orders-0: object k is corrupt: first bad batch at offset 7; f is not written"
        );
    }
}
