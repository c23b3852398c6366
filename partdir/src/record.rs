//! The mirror records of a log dir, read and written: one journal per log
//! dir (`segmirror-mirror-records.journal`, framing in `kafkalog::journal`,
//! records in `manifest::record_journal`), and the file of one partition
//! (`segmirror-mirror.json` in its dir) that builds before issue 31 wrote,
//! still read.
//!
//! Invariants:
//! - [`write`] appends one entry to the journal of the partition dir's log
//!   dir and makes it durable: at once, or at the barrier of this thread's
//!   `DeferredSync` scope (`kafkalog::fsutil::append_durably`), where the
//!   appends of every partition written in the scope cost one write and one
//!   fsync of one file. A partition's old file goes after the entry is
//!   durable (`remove_at_barrier`);
//! - [`read`] gives the newest entry of the partition in the journal, else
//!   its old file, else `None` (not a mirror). This thread's appends still
//!   waiting for a barrier are read too. An entry carries the topic id of
//!   the dir's `partition.metadata` when written: an entry for another id
//!   is of an earlier partition of that name (deleted and created again;
//!   Kafka gives every topic a new id) and is not read;
//! - a damaged or torn record is an error naming its file, never an absent
//!   record (which would make a mirror look like a source partition); a
//!   torn tail of the journal (a crash during an append the barrier never
//!   acknowledged) is not damage: the writer cuts it before appending;
//! - readers follow the journal: each process replays it once and then
//!   only what was appended (a rewritten journal, a new inode, is replayed
//!   again). The journal is rewritten with only the newest entry of each
//!   partition when it is 4 times that and over 1 MiB, before the first
//!   append of a scope (temporary file, fsync, rename, directory fsync);
//! - a dir whose name is not a partition's (tests, tools) keeps the
//!   record in its own file.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use kafkalog::fsutil;
use kafkalog::journal::{self, JournalError};
use manifest::mirror_record::{MIRROR_FILE, MirrorRecord};
use manifest::partition::ManifestFormatError;
use manifest::record_journal::{self, Replay};

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
    /// The log dir's journal is damaged (before its tail).
    #[error("the mirror-record journal {path} is damaged: {source}")]
    Journal {
        /// The journal.
        path: String,
        /// What is wrong.
        #[source]
        source: JournalError,
    },
}

/// Largest journal read (10,000 partitions' records are about 7 MiB, and
/// the journal is rewritten at 4 times its live entries).
pub const MAX_JOURNAL_BYTES: u64 = 256 << 20;

/// A journal is rewritten once it is this large and 4 times its live
/// entries.
const COMPACT_ABOVE: u64 = 1 << 20;

/// The journals this process follows, by path.
static JOURNALS: LazyLock<Mutex<HashMap<PathBuf, Followed>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// A journal as this process last read it.
#[derive(Debug, Default)]
struct Followed {
    /// (device, inode) of the file replayed.
    file: Option<(u64, u64)>,
    /// Its length when last looked at.
    seen_len: u64,
    replay: Replay,
    /// This process cut its torn tail and may append.
    writable: bool,
}

/// The journal's path and the partition's name in it, when `dir` is a
/// partition dir inside a log dir.
fn journal_of(dir: &Path) -> Option<(PathBuf, &str)> {
    let name = dir.file_name()?.to_str()?;
    kafkalog::topic::parse_dir_name(name).ok()?;
    Some((dir.parent()?.join(journal::FILE), name))
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<PathBuf, Followed>> {
    match JOURNALS.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn journal_err(path: &Path) -> impl FnOnce(JournalError) -> MirrorRecordError + '_ {
    move |source| MirrorRecordError::Journal {
        path: path.display().to_string(),
        source,
    }
}

/// A journal entry as this thread wrote it: the dir's topic id and the
/// record, or `None` for a removal.
type PendingEntry = Option<(Option<kafkalog::TopicId>, MirrorRecord)>;

thread_local! {
    /// This thread's entries waiting for its barrier, by journal and name
    /// (what it reads back before the barrier makes them the file's).
    static PENDING: std::cell::RefCell<HashMap<PathBuf, HashMap<String, PendingEntry>>> =
        std::cell::RefCell::new(HashMap::new());
}

/// Notes an entry appended by this thread; kept only while its barrier has
/// not run (an append outside a scope is in the file at once).
fn note_pending(path: &Path, name: &str, entry: PendingEntry) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if fsutil::has_pending_appends(path) {
            p.entry(path.to_path_buf())
                .or_default()
                .insert(name.to_string(), entry);
        } else {
            p.remove(path);
        }
    });
}

/// Forgets this thread's entries of `path` (their barrier ran).
fn forget_pending(path: &Path) {
    PENDING.with(|p| p.borrow_mut().remove(path));
}

/// This thread's entry of `name` waiting for its barrier: `Some(None)` for a
/// removal, `None` when there is none (or the barrier ran).
fn pending_entry(path: &Path, name: &str) -> Option<PendingEntry> {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if !fsutil::has_pending_appends(path) {
            p.remove(path);
            return None;
        }
        p.get(path).and_then(|m| m.get(name).cloned())
    })
}

/// Brings `f` up to the file at `path` (absent: empty).
fn follow(path: &Path, f: &mut Followed) -> Result<(), MirrorRecordError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            *f = Followed::default();
            return Ok(());
        }
        Err(e) => return Err(kafkalog::Error::io("stat", path)(e).into()),
    };
    let id = (meta.dev(), meta.ino());
    if meta.len() > MAX_JOURNAL_BYTES {
        return Err(MirrorRecordError::Journal {
            path: path.display().to_string(),
            source: JournalError::Header(format!(
                "{} bytes, more than the {MAX_JOURNAL_BYTES} read",
                meta.len()
            )),
        });
    }
    if f.file == Some(id) && meta.len() == f.seen_len {
        return Ok(());
    }
    if f.file == Some(id) && meta.len() > f.replay.valid_len {
        // Appended since: only the new bytes.
        let more = read_range(path, f.replay.valid_len, meta.len())?;
        record_journal::replay_more(&mut f.replay, &more).map_err(journal_err(path))?;
        f.seen_len = meta.len();
        return Ok(());
    }
    let bytes =
        fsutil::read_bounded(path, MAX_JOURNAL_BYTES).map_err(kafkalog::Error::io("read", path))?;
    let writable = f.writable && f.file == Some(id);
    *f = Followed {
        file: Some(id),
        seen_len: bytes.len() as u64,
        replay: record_journal::replay(&bytes).map_err(journal_err(path))?,
        writable,
    };
    Ok(())
}

fn read_range(path: &Path, from: u64, to: u64) -> Result<Vec<u8>, MirrorRecordError> {
    use std::io::{Read, Seek, SeekFrom};
    let io = |op| kafkalog::Error::io(op, path);
    let mut file = std::fs::File::open(path).map_err(io("open"))?;
    file.seek(SeekFrom::Start(from)).map_err(io("seek"))?;
    let mut out = Vec::new();
    file.take(to.saturating_sub(from))
        .read_to_end(&mut out)
        .map_err(io("read"))?;
    Ok(out)
}

/// Reads the record of partition dir `dir` (None when it is not a
/// mirror). A damaged or unreadable record is an error naming its file.
pub fn read(dir: &Path) -> Result<Option<MirrorRecord>, MirrorRecordError> {
    if let Some((path, name)) = journal_of(dir) {
        let found = {
            let mut journals = lock();
            let f = journals.entry(path.clone()).or_default();
            follow(&path, f)?;
            f.replay.records.get(name).cloned()
        };
        // This thread's entries waiting for its barrier come after.
        let pending = pending_entry(&path, name);
        if let Some((written_for, record)) = pending.unwrap_or(found)
            && dir.is_dir()
            && dir_topic_id(dir)? == written_for
        {
            return Ok(Some(record));
        }
    }
    read_file(dir)
}

/// The topic id in `dir`'s `partition.metadata` (`None`: no such file).
fn dir_topic_id(dir: &Path) -> Result<Option<kafkalog::TopicId>, MirrorRecordError> {
    let path = dir.join(kafkalog::checkpoint::PARTITION_METADATA);
    Ok(kafkalog::checkpoint::read_partition_metadata(&path)?.map(|m| m.topic_id))
}

/// The record in the partition dir's own file (before issue 31).
fn read_file(dir: &Path) -> Result<Option<MirrorRecord>, MirrorRecordError> {
    let path = dir.join(MIRROR_FILE);
    let Some(bytes) = fsutil::read_optional(&path)? else {
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

/// Writes the record durably, as [`manifest::mirror_record::RECORD_SCHEMA`]:
/// an entry of its log dir's journal (see the module doc).
pub fn write(record: &MirrorRecord, dir: &Path) -> Result<(), MirrorRecordError> {
    let dir_id = if dir.is_dir() {
        dir_topic_id(dir)?
    } else {
        None
    };
    write_for(record, dir, dir_id)
}

/// [`write`] by a caller that holds the partition's log open and so knows
/// the topic id of its `partition.metadata` (`PartitionLog::topic_id`):
/// the file is not read again for every record written (a running
/// applier writes the records of every partition it applied to, each
/// cycle).
pub fn write_for(
    record: &MirrorRecord,
    dir: &Path,
    dir_id: Option<kafkalog::TopicId>,
) -> Result<(), MirrorRecordError> {
    let malformed = |e: ManifestFormatError| MirrorRecordError::Malformed {
        path: dir.join(MIRROR_FILE).display().to_string(),
        reason: e.to_string(),
    };
    let Some((path, name)) = journal_of(dir) else {
        let bytes = record.encode().map_err(malformed)?;
        fsutil::write_atomic(&dir.join(MIRROR_FILE), &bytes, true)?;
        return Ok(());
    };
    if !dir.is_dir() {
        return Err(
            kafkalog::Error::io("write the mirror record of", dir)(std::io::Error::from(
                std::io::ErrorKind::NotFound,
            ))
            .into(),
        );
    }
    let entry = record_journal::entry(name, dir_id, record).map_err(malformed)?;
    {
        let mut journals = lock();
        let f = journals.entry(path.clone()).or_default();
        if !f.writable {
            open_for_writing(&path, f)?;
        } else if !fsutil::has_pending_appends(&path) {
            forget_pending(&path);
            // The first append of a scope (or one outside any): the file
            // holds every append made so far, so it may be rewritten now.
            // (A running applier writes the records of every partition it
            // applied to, each cycle: the journal is kept small here.)
            follow(&path, f)?;
            compact_if_due(&path, f)?;
        }
        fsutil::append_durably(&path, &entry)?;
        note_pending(&path, name, Some((dir_id, record.clone())));
    }
    let old = dir.join(MIRROR_FILE);
    if old.exists() {
        fsutil::remove_at_barrier(&old)?;
        fsutil::fsync_dir(dir)?;
    }
    Ok(())
}

/// Removes the record of partition dir `dir` (durably, as [`write`]): the
/// partition is no longer a mirror. Nothing to remove is not an error.
pub fn remove(dir: &Path) -> Result<(), MirrorRecordError> {
    if let Some((path, name)) = journal_of(dir) {
        let mut journals = lock();
        let f = journals.entry(path.clone()).or_default();
        follow(&path, f)?;
        if f.replay.records.contains_key(name) || fsutil::has_pending_appends(&path) {
            if !f.writable {
                open_for_writing(&path, f)?;
            }
            fsutil::append_durably(&path, &journal::entry(name, None, &[]))?;
            note_pending(&path, name, None);
        }
    }
    fsutil::remove_file(&dir.join(MIRROR_FILE))?;
    fsutil::fsync_dir(dir)?;
    Ok(())
}

/// Before this process's first append: creates the journal (durably, at
/// once: its header and its name), or cuts the torn tail a crash left, and
/// rewrites it when it is mostly old entries.
fn open_for_writing(path: &Path, f: &mut Followed) -> Result<(), MirrorRecordError> {
    let io = |op| kafkalog::Error::io(op, path);
    follow(path, f)?;
    if f.file.is_none() {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io("create"))?;
        std::io::Write::write_all(&mut file, &journal::header()).map_err(io("write"))?;
        file.sync_all().map_err(io("fsync"))?;
        sync_dir_now(path)?;
        follow(path, f)?;
    } else if f.seen_len > f.replay.valid_len {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(io("open"))?;
        file.set_len(f.replay.valid_len).map_err(io("truncate"))?;
        file.sync_all().map_err(io("fsync"))?;
        f.seen_len = f.replay.valid_len;
    }
    compact_if_due(path, f)?;
    f.writable = true;
    Ok(())
}

/// Rewrites the journal with the newest entry of each partition when it is
/// over [`COMPACT_ABOVE`] and 4 times that. Never while this thread has
/// appends waiting for a barrier (the rewrite holds only what the file
/// holds); a scope's appends then go to the new file, which the barrier
/// opens by its path.
fn compact_if_due(path: &Path, f: &mut Followed) -> Result<(), MirrorRecordError> {
    let due = f.replay.valid_len > COMPACT_ABOVE && f.replay.valid_len > 4 * f.replay.live_bytes();
    if !due || fsutil::has_pending_appends(path) {
        return Ok(());
    }
    let io = |op| kafkalog::Error::io(op, path);
    let mut bytes = journal::header().to_vec();
    for (name, (dir_topic_id, record)) in &f.replay.records {
        let e = record_journal::entry(name, *dir_topic_id, record).map_err(|e| {
            MirrorRecordError::Malformed {
                path: path.display().to_string(),
                reason: e.to_string(),
            }
        })?;
        bytes.extend(e);
    }
    let tmp = fsutil::tmp_path(path)?;
    {
        let mut file = std::fs::File::create(&tmp).map_err(io("create"))?;
        std::io::Write::write_all(&mut file, &bytes).map_err(io("write"))?;
        file.sync_all().map_err(io("fsync"))?;
    }
    std::fs::rename(&tmp, path).map_err(io("rename"))?;
    sync_dir_now(path)?;
    *f = Followed {
        writable: true,
        ..Followed::default()
    };
    follow(path, f)
}

fn sync_dir_now(path: &Path) -> Result<(), MirrorRecordError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(kafkalog::Error::io("fsync dir", dir))?;
    Ok(())
}

/// How a log dir's journal stands (for `applier status` and tests): its
/// bytes, its entries and the partitions it holds a record of.
pub fn journal_stats(log_dir: &Path) -> Result<(u64, u64, usize), MirrorRecordError> {
    let path = log_dir.join(journal::FILE);
    let mut journals = lock();
    let f = journals.entry(path.clone()).or_default();
    follow(&path, f)?;
    Ok((f.seen_len, f.replay.entries, f.replay.records.len()))
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

    /// A log dir with partition dirs `t-0..n` (topic id of `sample()`).
    fn log_dir(n: i32) -> (tempfile::TempDir, Vec<PathBuf>) {
        let root = tempfile::tempdir().expect("tempdir");
        let id = sample().topic_id;
        let dirs = (0..n)
            .map(|p| {
                let d = root.path().join(format!("t-{p}"));
                std::fs::create_dir(&d).expect("dir");
                kafkalog::checkpoint::write_partition_metadata(
                    &d.join(kafkalog::checkpoint::PARTITION_METADATA),
                    &kafkalog::checkpoint::PartitionMetadata::new(id),
                    false,
                )
                .expect("metadata");
                d
            })
            .collect();
        (root, dirs)
    }

    fn lme(n: i32) -> MirrorRecord {
        let mut r = sample();
        r.lme = Some(n);
        r
    }

    #[test]
    fn records_of_a_scope_are_one_append_made_visible_by_the_barrier() {
        let (root, dirs) = log_dir(50);
        let journal_path = root.path().join(journal::FILE);
        let scope = fsutil::DeferredSync::begin();
        for (i, d) in dirs.iter().enumerate() {
            write(&lme(i as i32), d).expect("write");
        }
        // Not on disk yet (the header only), but this thread reads them.
        assert_eq!(
            std::fs::metadata(&journal_path).expect("journal").len(),
            journal::HEADER_BYTES as u64
        );
        assert_eq!(read(&dirs[7]).expect("read").and_then(|r| r.lme), Some(7));
        scope.finish().expect("barrier");
        for (i, d) in dirs.iter().enumerate() {
            assert_eq!(read(d).expect("read").and_then(|r| r.lme), Some(i as i32));
            assert!(!d.join(MIRROR_FILE).exists());
        }
        let (_, entries, records) = journal_stats(root.path()).expect("stats");
        assert_eq!((entries, records), (50, 50));
        // Another process's view: the file alone.
        let bytes = std::fs::read(&journal_path).expect("read");
        let r = record_journal::replay(&bytes).expect("replay");
        assert_eq!(r.records.len(), 50);
    }

    #[test]
    fn a_removal_waiting_for_its_barrier_is_read_as_one() {
        let (_root, dirs) = log_dir(1);
        write(&lme(1), &dirs[0]).expect("write");
        let scope = fsutil::DeferredSync::begin();
        write(&lme(2), &dirs[0]).expect("write");
        assert_eq!(read(&dirs[0]).expect("read").and_then(|r| r.lme), Some(2));
        remove(&dirs[0]).expect("remove");
        assert_eq!(read(&dirs[0]).expect("read"), None);
        scope.finish().expect("barrier");
        lock().clear();
        assert_eq!(read(&dirs[0]).expect("read"), None);
    }

    #[test]
    fn an_old_file_is_read_then_replaced_by_the_journal() {
        let (_root, dirs) = log_dir(1);
        std::fs::write(dirs[0].join(MIRROR_FILE), GOLDEN_1_2).expect("old file");
        assert_eq!(read(&dirs[0]).expect("read"), Some(sample()));
        write(&lme(9), &dirs[0]).expect("write");
        assert!(!dirs[0].join(MIRROR_FILE).exists(), "the old file goes");
        assert_eq!(read(&dirs[0]).expect("read").and_then(|r| r.lme), Some(9));
    }

    #[test]
    fn a_torn_tail_is_not_read_and_is_cut_before_the_next_append() {
        let (root, dirs) = log_dir(2);
        write(&lme(1), &dirs[0]).expect("write");
        let path = root.path().join(journal::FILE);
        let whole = std::fs::read(&path).expect("read");
        // A second append a crash cut in the middle.
        let torn = record_journal::entry("t-1", None, &lme(2)).expect("entry");
        let mut bytes = whole.clone();
        bytes.extend(&torn[..torn.len() / 2]);
        std::fs::write(&path, &bytes).expect("tear");
        // A fresh process: forget what this one followed.
        lock().clear();
        assert_eq!(read(&dirs[1]).expect("read"), None);
        assert_eq!(read(&dirs[0]).expect("read").and_then(|r| r.lme), Some(1));
        write(&lme(3), &dirs[1]).expect("write");
        lock().clear();
        assert_eq!(read(&dirs[1]).expect("read").and_then(|r| r.lme), Some(3));
        let replay = record_journal::replay(&std::fs::read(&path).expect("read")).expect("replay");
        assert!(!replay.torn, "the tail was cut");
    }

    #[test]
    fn damage_before_the_tail_is_an_error_naming_the_journal() {
        let (root, dirs) = log_dir(2);
        write(&lme(1), &dirs[0]).expect("write");
        write(&lme(2), &dirs[1]).expect("write");
        let path = root.path().join(journal::FILE);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[journal::HEADER_BYTES + 20] ^= 0x10;
        std::fs::write(&path, &bytes).expect("damage");
        lock().clear();
        let err = read(&dirs[1]).expect_err("damaged");
        assert!(matches!(err, MirrorRecordError::Journal { .. }), "{err:?}");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn a_record_of_an_earlier_partition_of_the_name_is_not_read() {
        let (_root, dirs) = log_dir(1);
        write(&lme(1), &dirs[0]).expect("write");
        // Deleted and created again with another topic id.
        std::fs::remove_dir_all(&dirs[0]).expect("rm");
        assert_eq!(read(&dirs[0]).expect("read"), None);
        std::fs::create_dir(&dirs[0]).expect("dir");
        kafkalog::checkpoint::write_partition_metadata(
            &dirs[0].join(kafkalog::checkpoint::PARTITION_METADATA),
            &kafkalog::checkpoint::PartitionMetadata::new(kafkalog::TopicId::from_bytes([3; 16])),
            false,
        )
        .expect("metadata");
        assert_eq!(read(&dirs[0]).expect("read"), None);
    }

    #[test]
    fn a_journal_of_mostly_old_entries_is_rewritten() {
        let (root, dirs) = log_dir(2);
        let path = root.path().join(journal::FILE);
        let len = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let (mut n, mut longest) = (0, 0);
        // Until a write finds the journal shorter than before: rewritten.
        while len() >= longest {
            longest = len();
            assert!(
                longest <= 2 * COMPACT_ABOVE,
                "never rewritten: {longest} bytes"
            );
            n += 1;
            write(&lme(n), &dirs[(n % 2) as usize]).expect("write");
        }
        assert!(
            longest > COMPACT_ABOVE - 4096,
            "rewritten at {longest} bytes"
        );
        assert!(len() < 4096, "rewritten to {} bytes", len());
        lock().clear();
        let (even, odd) = if n % 2 == 0 { (n, n - 1) } else { (n - 1, n) };
        assert_eq!(
            read(&dirs[0]).expect("read").and_then(|r| r.lme),
            Some(even)
        );
        assert_eq!(read(&dirs[1]).expect("read").and_then(|r| r.lme), Some(odd));
    }

    /// A running applier writes its records in a scope each cycle: the
    /// journal is rewritten there too, before the scope's first append.
    #[test]
    fn a_journal_written_in_scopes_is_rewritten_and_keeps_every_record() {
        let (root, dirs) = log_dir(3);
        let path = root.path().join(journal::FILE);
        let len = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let (mut cycle, mut longest) = (0, 0);
        while len() >= longest {
            longest = len();
            assert!(
                longest <= 2 * COMPACT_ABOVE,
                "never rewritten: {longest} bytes"
            );
            cycle += 1;
            let scope = fsutil::DeferredSync::begin();
            for d in &dirs {
                write(&lme(cycle), d).expect("write");
            }
            scope.finish().expect("barrier");
        }
        lock().clear();
        for d in &dirs {
            assert_eq!(read(d).expect("read").and_then(|r| r.lme), Some(cycle));
        }
    }

    #[test]
    fn absent_is_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read(dir.path()).expect("read"), None);
    }
}
