//! Errors of the shipper library.
//!
//! Each variant says what happened and where: the partition, the file and
//! byte position for source data, the object key for the bucket. A
//! partition's error never stops another partition: the shipper records it
//! in that partition's status and goes on (see [`ShipperError::is_retryable`]
//! for what is retried on the next cycle and what waits for the error
//! back-off).

use std::path::PathBuf;

use bucket::store::StoreError;
use kafkalog::TopicPartition;

/// Everything that can go wrong shipping a partition.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShipperError {
    /// A source batch is corrupt (CRC mismatch, bad header, a torn batch
    /// inside a rolled segment). The partition stops shipping: the bytes
    /// would poison every destination.
    #[error(
        "{tp}: corrupt source data in {path} at byte {position} (batch offset {offset}): {reason}"
    )]
    CorruptSource {
        /// The partition.
        tp: TopicPartition,
        /// The segment file.
        path: PathBuf,
        /// Byte position of the bad batch in the file.
        position: u64,
        /// Base offset of the bad batch as read (may itself be garbage).
        offset: i64,
        /// What is wrong.
        reason: String,
    },
    /// Reading the source partition failed (IO, malformed checkpoint or
    /// metadata file).
    #[error("{tp}: reading the source: {source}")]
    Source {
        /// The partition.
        tp: TopicPartition,
        /// The error, with the file it concerns.
        #[source]
        source: Box<kafkalog::Error>,
    },
    /// The source file changed between planning a range and uploading it
    /// (truncated, compacted or rewritten): the range is dropped and planned
    /// again on the next cycle.
    #[error("{tp}: {path} changed while uploading bytes {start}..{end}: {reason}")]
    SourceChanged {
        /// The partition.
        tp: TopicPartition,
        /// The segment file.
        path: PathBuf,
        /// Start of the range in the file.
        start: u64,
        /// End of the range in the file.
        end: u64,
        /// What differed.
        reason: String,
    },
    /// The bucket failed.
    #[error("{tp}: {source}")]
    Store {
        /// The partition (or `-` for cluster-wide objects such as heads).
        tp: String,
        /// The store's error, with the key.
        #[source]
        source: Box<StoreError>,
    },
    /// Another shipper committed the manifest version this one tried to:
    /// this one backs off that partition and never overwrites.
    #[error(
        "{tp}: manifest version {version} was committed by shipper {writer:?}, not by this one ({ours:?}): another shipper is shipping this partition"
    )]
    Fenced {
        /// The partition.
        tp: TopicPartition,
        /// The version lost.
        version: u64,
        /// The writer that won.
        writer: String,
        /// This shipper's id.
        ours: String,
    },
    /// A data upload failed (a create-if-absent PUT answered "already
    /// exists", or a multipart completion that failed) and the object found
    /// at its key (which holds an upload id only this shipper uses) is not
    /// the one it uploaded: another size or CRC-32C. The object is left as it is
    /// (never overwritten); the range is uploaded again, under a new key,
    /// after the error back-off.
    #[error("{tp}: {key} already exists and is not the object uploaded there: {reason}")]
    ExistingObjectDiffers {
        /// The partition.
        tp: TopicPartition,
        /// The data key.
        key: String,
        /// What differs.
        reason: String,
    },
    /// A manifest could not be built (an invariant would break).
    #[error("{tp}: refusing to commit an inconsistent manifest: {reason}")]
    Inconsistent {
        /// The partition.
        tp: TopicPartition,
        /// What is wrong.
        reason: String,
    },
    /// The broker metadata the configuration names cannot be used
    /// (`metadata_log_dir`, `broker_config`, the node id).
    #[error(transparent)]
    Metadata(#[from] crate::metadata::MetadataError),
}

impl ShipperError {
    /// A bucket error of partition `tp` (`-` for cluster-wide objects).
    pub fn store(tp: impl Into<String>, source: StoreError) -> ShipperError {
        ShipperError::Store {
            tp: tp.into(),
            source: Box::new(source),
        }
    }

    /// True for errors worth retrying on the next cycle (the bucket was
    /// unavailable, the source moved under us); false for errors that wait
    /// for the error back-off or an operator (corrupt data, fencing,
    /// unreadable source files).
    pub fn is_retryable(&self) -> bool {
        match self {
            ShipperError::Store { source, .. } => source.is_retryable(),
            ShipperError::SourceChanged { .. } => true,
            ShipperError::Source { source, .. } => {
                matches!(**source, kafkalog::Error::Io { .. })
            }
            ShipperError::CorruptSource { .. }
            | ShipperError::ExistingObjectDiffers { .. }
            | ShipperError::Fenced { .. }
            | ShipperError::Inconsistent { .. }
            | ShipperError::Metadata(_) => false,
        }
    }

    /// A short, stable name of the error kind (metrics label).
    pub fn kind(&self) -> &'static str {
        match self {
            ShipperError::CorruptSource { .. } => "corrupt_source",
            ShipperError::Source { .. } => "source",
            ShipperError::SourceChanged { .. } => "source_changed",
            ShipperError::Store { .. } => "store",
            ShipperError::ExistingObjectDiffers { .. } => "existing_object_differs",
            ShipperError::Fenced { .. } => "fenced",
            ShipperError::Inconsistent { .. } => "inconsistent",
            ShipperError::Metadata(_) => "metadata",
        }
    }
}
