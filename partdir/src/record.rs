//! The mirror record's file (`segmirror-mirror.json`) in a partition dir:
//! read (a damaged or torn file is an error naming it, never an absent
//! record) and written atomically and durably (temp file, fsync, rename,
//! fsync dir). The record, its bytes and their versions are
//! `manifest::mirror_record`'s.

use std::path::Path;

use manifest::mirror_record::{MIRROR_FILE, MirrorRecord};
use manifest::partition::ManifestFormatError;

/// Errors reading or writing the record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MirrorRecordError {
    /// IO on the file.
    #[error(transparent)]
    Io(#[from] kafkalog::Error),
    /// The file does not parse.
    #[error("{path}: {reason}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The file's CRC-32C trailer does not match its bytes, or a record of
    /// a version that requires one has none (torn or damaged on disk).
    #[error("mirror record {path} is damaged: {source}")]
    Damaged {
        /// The file.
        path: String,
        /// The checksum error.
        #[source]
        source: ManifestFormatError,
    },
}

/// Reads the record of partition dir `dir` (None when it is not a
/// mirror: the file does not exist). A damaged or unreadable file is an
/// error naming it.
pub fn read(dir: &Path) -> Result<Option<MirrorRecord>, MirrorRecordError> {
    let path = dir.join(MIRROR_FILE);
    let Some(bytes) = kafkalog::fsutil::read_optional(&path)? else {
        return Ok(None);
    };
    let path = || path.display().to_string();
    MirrorRecord::decode(&bytes).map(Some).map_err(|e| match e {
        ManifestFormatError::ChecksumMismatch { .. }
        | ManifestFormatError::MissingChecksum { .. } => MirrorRecordError::Damaged {
            path: path(),
            source: e,
        },
        other => MirrorRecordError::Malformed {
            path: path(),
            reason: other.to_string(),
        },
    })
}

/// Writes the record atomically and durably, as [`manifest::mirror_record::RECORD_SCHEMA`].
pub fn write(record: &MirrorRecord, dir: &Path) -> Result<(), MirrorRecordError> {
    let path = dir.join(MIRROR_FILE);
    let bytes = record.encode().map_err(|e| MirrorRecordError::Malformed {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    kafkalog::fsutil::write_atomic(&path, &bytes, true)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifest::codec::ObjectKind;
    use manifest::mirror_record::fixtures::{GOLDEN_1_2, OLD_1_1, sample};

    fn written(bytes: &[u8]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(MIRROR_FILE), bytes).expect("write");
        dir
    }

    #[test]
    fn golden_bytes_are_pinned() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(&sample(), dir.path()).expect("write");
        let on_disk = std::fs::read(dir.path().join(MIRROR_FILE)).expect("read");
        assert_eq!(String::from_utf8(on_disk).expect("utf-8"), GOLDEN_1_2);
        assert_eq!(read(dir.path()).expect("read"), Some(sample()));
    }

    #[test]
    fn a_record_without_trailer_from_before_1_2_is_still_read() {
        let dir = written(OLD_1_1.as_bytes());
        assert_eq!(read(dir.path()).expect("read"), Some(sample()));
        // Rewritten, it gains the trailer.
        let record = read(dir.path()).expect("read").expect("some");
        write(&record, dir.path()).expect("write");
        assert_eq!(
            std::fs::read(dir.path().join(MIRROR_FILE)).expect("read"),
            GOLDEN_1_2.as_bytes()
        );
    }

    #[test]
    fn a_flipped_byte_is_an_error_naming_the_file() {
        // `"lme":4` -> `"lme":5`: still valid JSON of the right shape.
        let flipped = GOLDEN_1_2.replace("\"lme\":4", "\"lme\":5");
        let dir = written(flipped.as_bytes());
        let err = read(dir.path()).expect_err("damaged");
        assert!(
            matches!(
                &err,
                MirrorRecordError::Damaged {
                    source: ManifestFormatError::ChecksumMismatch {
                        object: ObjectKind::MirrorRecord,
                        ..
                    },
                    ..
                }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        let path = dir.path().join(MIRROR_FILE).display().to_string();
        assert!(text.contains(&path), "{text}");
        assert!(text.contains("mirror record checksum mismatch"), "{text}");
    }

    #[test]
    fn a_truncated_file_is_an_error_naming_the_file_never_absent() {
        let whole = GOLDEN_1_2.as_bytes();
        for len in 0..whole.len() {
            let dir = written(&whole[..len]);
            let err = read(dir.path()).expect_err("truncated");
            let path = dir.path().join(MIRROR_FILE).display().to_string();
            assert!(err.to_string().contains(&path), "{len}: {err}");
            if len > 32 {
                assert!(
                    matches!(
                        err,
                        MirrorRecordError::Damaged {
                            source: ManifestFormatError::MissingChecksum { .. },
                            ..
                        }
                    ),
                    "{len}: {err:?}"
                );
            }
        }
        // An old record torn is malformed, still an error.
        let dir = written(&OLD_1_1.as_bytes()[..OLD_1_1.len() / 2]);
        assert!(matches!(
            read(dir.path()),
            Err(MirrorRecordError::Malformed { .. })
        ));
    }

    #[test]
    fn absent_is_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read(dir.path()).expect("read"), None);
    }
}
