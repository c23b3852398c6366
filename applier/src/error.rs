//! Errors of a mirror partition, each classified as retryable or not.

use kafkalog::TopicPartition;

/// What stopped a mirror partition's step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MirrorError {
    /// The local log failed (IO, corrupt data, refused append).
    #[error("{tp}: local log: {source}")]
    Log {
        /// The partition.
        tp: TopicPartition,
        /// The log's error.
        #[source]
        source: kafkalog::Error,
    },
    /// The bucket failed or an object is missing or malformed.
    #[error("{tp}: bucket: {source}")]
    Store {
        /// The partition.
        tp: TopicPartition,
        /// The store's error.
        #[source]
        source: bucket::store::StoreError,
    },
    /// A shipped object does not match its manifest range (size, CRC-32C,
    /// batch headers): see `manifest::range_check`. Its text is already in
    /// this error's line, so it is not also returned as `source()` (a chain
    /// printed with `{:#}` would say it twice).
    #[error("{tp}: {corrupt}")]
    ObjectCorrupt {
        /// The partition.
        tp: TopicPartition,
        /// The object and what is wrong with it.
        corrupt: manifest::range_check::ObjectCorrupt,
    },
    /// A batch inside a shipped object is corrupt or does not continue the log.
    #[error("{tp}: object {key}: {source}")]
    BadBatch {
        /// The partition.
        tp: TopicPartition,
        /// The object key.
        key: String,
        /// What is wrong.
        #[source]
        source: kafkalog::Error,
    },
    /// Preparation or following refused the partition (identity, loop,
    /// internal topic, tiered storage, an invalid lineage): see
    /// `manifest::reconcile::Refusal`. Nothing was changed.
    #[error("{tp}: {refusal}")]
    Refused {
        /// The partition.
        tp: TopicPartition,
        /// Why.
        #[source]
        refusal: manifest::reconcile::Refusal,
    },
    /// The source topic was deleted and created again: the feed names the
    /// partition under a new topic id, and this partition holds the old
    /// topic's (`crate::schedule::Work::SourceRecreated`). Not retried: the
    /// new topic's records are never appended to the old one's.
    #[error(
        "{tp}: inconsistent topic id: the source topic was recreated (old id {old}, new id {new}); this partition keeps the old topic's records, read-only; to mirror the new topic, stop the applier, remove the partition dir {dir} and start it again (or `applier stop` keeps the old records as a writable topic)",
        dir = tp.dir_name()
    )]
    SourceRecreated {
        /// The partition.
        tp: TopicPartition,
        /// The topic id this partition holds (its record's).
        old: kafkalog::TopicId,
        /// The topic id the source's feed names now.
        new: kafkalog::TopicId,
    },
    /// The source has not published this partition (yet).
    #[error("{tp}: no manifest in the bucket yet")]
    NoManifest {
        /// The partition.
        tp: TopicPartition,
    },
    /// The destination disk has no room for the applier's disk reserve:
    /// nothing is appended until it has (see `applier::reserve`).
    #[error(
        "{tp}: no space left on device for the disk reserve {path} ({bytes} bytes): {reason}; mirroring resumes once space is freed"
    )]
    DiskReserve {
        /// The partition.
        tp: TopicPartition,
        /// The reserve file.
        path: std::path::PathBuf,
        /// Its size.
        bytes: u64,
        /// The error writing it.
        reason: String,
    },
    /// The mirror record could not be read or written.
    #[error("{tp}: mirror record: {source}")]
    Record {
        /// The partition.
        tp: TopicPartition,
        /// The error.
        #[source]
        source: partdir::record::MirrorRecordError,
    },
    /// A group commit's barrier (the fsyncs shared by every partition of a
    /// cycle or a command) failed: this partition's writes of that phase
    /// may not be durable.
    #[error("{tp}: making the writes of this {phase} durable failed: {reason}")]
    Durability {
        /// The partition.
        tp: TopicPartition,
        /// The phase (`"apply"`, `"preparation"`).
        phase: &'static str,
        /// The barrier's error.
        reason: String,
    },
    /// The local log is damaged (found by `applier verify` or the scrub):
    /// `applier start` cuts it back to `cut_offset` and fetches the rest
    /// again from the bucket.
    #[error(
        "{tp}: local log damaged: {detail}; `applier start` cuts the log back to offset {cut_offset} and fetches it again from the bucket"
    )]
    LocalDamage {
        /// The partition.
        tp: TopicPartition,
        /// The file, position, offset and what is wrong.
        detail: String,
        /// Where a repair cuts.
        cut_offset: i64,
    },
    /// A recorded local damage cannot be repaired from the bucket (the
    /// range is no longer there).
    #[error("{tp}: cannot repair the local log: {reason}")]
    Unrepairable {
        /// The partition.
        tp: TopicPartition,
        /// Why.
        reason: String,
    },
}

impl MirrorError {
    /// Errors that mean "not there yet" (an object or manifest that
    /// replication has not delivered): the partition keeps its state and
    /// tries again next poll, reporting lag instead of failing.
    pub fn is_waiting(&self) -> bool {
        matches!(
            self,
            MirrorError::Store {
                source: bucket::store::StoreError::NotFound { .. },
                ..
            } | MirrorError::NoManifest { .. }
        )
    }

    /// Retryable errors return to the state they came from after a backoff;
    /// the others wait for an operator's stop or start.
    pub fn is_retryable(&self) -> bool {
        match self {
            MirrorError::Store { source, .. } => source.is_retryable(),
            MirrorError::NoManifest { .. } => true,
            MirrorError::Log { source, .. } => matches!(
                source,
                kafkalog::Error::Io { .. } | kafkalog::Error::Locked { .. }
            ),
            MirrorError::Record { .. }
            | MirrorError::DiskReserve { .. }
            | MirrorError::Durability { .. } => true,
            MirrorError::ObjectCorrupt { .. }
            | MirrorError::BadBatch { .. }
            | MirrorError::Refused { .. }
            | MirrorError::SourceRecreated { .. }
            | MirrorError::LocalDamage { .. }
            | MirrorError::Unrepairable { .. } => false,
        }
    }
}

/// Why the applier could not open its log dir (`Applier::open`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The log dir: a broker holds it, its lock, listing its partitions,
    /// its root checkpoints.
    #[error(transparent)]
    LogDir(#[from] kafkalog::Error),
    /// The bucket prefix or the source cluster id is not valid.
    #[error(transparent)]
    Layout(#[from] manifest::layout::LayoutError),
    /// The write guards restored at opening could not be made durable.
    #[error("making the mirror partitions' write guards durable: {0}")]
    Guards(#[source] kafkalog::Error),
}

/// A file of the applier's own under `<log-dir>/.segmirror/` (the gap
/// book and its acknowledgements, the group sync record) that could not be
/// read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateFileError {
    /// Reading it failed.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// Its content is not what it should be.
    #[error("{} is damaged (not the {what} it should be): {source}", path.display())]
    Damaged {
        /// The file.
        path: std::path::PathBuf,
        /// What it should hold.
        what: &'static str,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// Its directory could not be created.
    #[error("creating {}: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// Encoding it failed.
    #[error("encoding {}: {source}", path.display())]
    Encode {
        /// The file.
        path: std::path::PathBuf,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// Writing it (atomically) or reading it through the log's helpers
    /// failed.
    #[error(transparent)]
    Log(#[from] kafkalog::Error),
}

/// An error and its sources on one line, `outer: inner: ...` (as
/// `anyhow`'s `{:#}` prints them), for status rows and logs.
pub fn in_words(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// Reading one partition's files for `applier status`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionReadError {
    /// The log's files.
    #[error(transparent)]
    Log(#[from] kafkalog::Error),
    /// The mirror record.
    #[error(transparent)]
    Record(#[from] partdir::record::MirrorRecordError),
}

/// Why `applier verify` could not finish (what it found is not an error:
/// it is in its outcome).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The log dir or a partition could not be read.
    #[error(transparent)]
    Log(#[from] kafkalog::Error),
    /// A partition's mirror record could not be read.
    #[error(transparent)]
    Record(#[from] partdir::record::MirrorRecordError),
    /// The bucket could not be read (the partition or object named).
    #[error("{what}: {source}")]
    Store {
        /// What was being read.
        what: String,
        /// The store's error.
        #[source]
        source: bucket::store::StoreError,
    },
}

/// Why `applier repair` refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepairError {
    /// What it will not do, and why (the message says what to do instead).
    #[error("{0}")]
    Refused(String),
    /// The log dir or the partition's files.
    #[error(transparent)]
    Log(#[from] kafkalog::Error),
    /// The partition's mirror record.
    #[error(transparent)]
    Record(#[from] partdir::record::MirrorRecordError),
    /// The verify record.
    #[error(transparent)]
    StateFile(#[from] StateFileError),
    /// The bucket.
    #[error(transparent)]
    Store(#[from] bucket::store::StoreError),
    /// Fetching and verifying the segment's objects.
    #[error(transparent)]
    Mirror(#[from] MirrorError),
}
