//! A log dir: the root that holds partition dirs and Kafka's root checkpoint
//! files, and the lock that keeps a second writer out.
//!
//! Layout (as a Kafka broker's log dir):
//! ```text
//! <root>/.lock                               held while a writer is open
//! <root>/recovery-point-offset-checkpoint    offsets below which segments are flushed
//! <root>/replication-offset-checkpoint       high watermark per partition (only
//!                                            kept where a broker wrote one)
//! <root>/log-start-offset-checkpoint         log start offset per partition
//! <root>/<topic>-<partition>/...             one dir per partition
//! ```
//!
//! Only one process may write a log dir: [`LogDir::open`] takes an exclusive
//! advisory lock (`flock`) on `.lock` and fails with [`Error::Locked`] when
//! another process holds it. Readers ([`crate::reader`]) take no lock. The
//! lock is not the `fcntl` lock a Kafka broker takes on the same file, so it
//! keeps segmirror processes apart, not a broker.
//!
//! A Kafka broker locks the same `.lock` with a POSIX record lock (Java's
//! `FileChannel.tryLock`, `fcntl(F_SETLK)`), which `flock` does not see:
//! [`posix_lock_holder`] asks for it with `fcntl(F_GETLK)` (it takes no
//! lock), so the applier can refuse a dir a running broker owns.
//!
//! The root checkpoints are shared by all partitions of the dir: each update
//! rewrites the file atomically with this process's view merged into what
//! the file held when the dir was opened. They, the root path and the held
//! lock live in `root_checkpoints`, below this module and [`crate::log`],
//! so a partition log records its flushes without depending on this one.
//!
//! A writer that flushes many partitions in one pass (the applier) may
//! [`LogDir::defer_checkpoints`]: flushes then only record their recovery
//! point, log start and high watermark in memory, and
//! [`LogDir::write_checkpoints`] writes the files once for all of them. A
//! crash before that leaves checkpoints that lag the flushed data, which
//! costs a longer recovery scan and nothing else. A log start that moves, a
//! recovery point that goes back (truncation) and a deleted partition are
//! always written at once.

use std::fs::{self, OpenOptions};
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::log::{LogConfig, PartitionLog};
use crate::root_checkpoints::SharedRoot;
use crate::topic::{TopicId, TopicPartition};

/// Tries to take a held lock, 20 ms apart, before reporting it.
const LOCK_ATTEMPTS: u32 = 10;

/// Name of the lock file at the log dir root (Kafka's name).
pub const LOCK_FILE: &str = ".lock";

/// Who holds a POSIX record lock (`fcntl`) on `root/.lock`, as a running
/// Kafka broker does on each of its log dirs: `Ok(None)` when nobody (or
/// the dir or file does not exist), else the holder's process id as the
/// kernel reports it. Takes no lock and creates nothing. The `flock` that
/// [`LogDir::open`] takes is a different lock and is not reported.
pub fn posix_lock_holder(root: &Path) -> Result<Option<String>> {
    use rustix::process::{Flock, FlockOffsetType, FlockType, fcntl_getlk};
    let lock_path = root.join(LOCK_FILE);
    let file = match OpenOptions::new().read(true).write(true).open(&lock_path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", &lock_path)(e)),
    };
    // Would a write lock over the whole file be granted?
    let probe = Flock {
        start: 0,
        length: 0,
        pid: None,
        typ: FlockType::WriteLock,
        offset_type: FlockOffsetType::Set,
    };
    match fcntl_getlk(&file, &probe) {
        Ok(None) => Ok(None),
        Ok(Some(held)) => Ok(Some(
            held.pid
                .map_or_else(|| "?".to_string(), |p| p.as_raw_nonzero().to_string()),
        )),
        Err(e) => Err(Error::io("fcntl(F_GETLK)", &lock_path)(e.into())),
    }
}

/// Refuses a log dir whose `.lock` a running broker holds
/// ([`posix_lock_holder`]) with [`Error::OwnedByBroker`].
pub fn refuse_if_owned_by_broker(root: &Path) -> Result<()> {
    match posix_lock_holder(root)? {
        None => Ok(()),
        Some(pid) => Err(Error::OwnedByBroker {
            path: root.to_path_buf(),
            lock: root.join(LOCK_FILE),
            pid,
        }),
    }
}

/// A log dir open for writing (locked).
#[derive(Debug, Clone)]
pub struct LogDir {
    shared: Arc<SharedRoot>,
}

impl LogDir {
    /// Opens (creating when missing) the log dir at `root` and takes its lock.
    pub fn open(root: impl AsRef<Path>) -> Result<LogDir> {
        let root = root.as_ref().to_path_buf();
        fs::create_dir_all(&root).map_err(Error::io("create dir", &root))?;
        let lock_path = root.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(Error::io("open", &lock_path))?;
        // A lock held for a moment only (a process that forked while
        // holding it keeps a copy until its child execs) is waited for
        // briefly; a writer that keeps it is reported.
        let mut attempts = 0;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if attempts < LOCK_ATTEMPTS => {
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(Error::Locked {
                        path: root,
                        lock: lock_path,
                    });
                }
                Err(fs::TryLockError::Error(e)) => return Err(Error::io("lock", &lock_path)(e)),
            }
        }
        Ok(LogDir {
            shared: Arc::new(SharedRoot::open(root, lock)?),
        })
    }

    /// Whether partition flushes write the root checkpoints themselves
    /// (`false`, the default) or only record them for
    /// [`LogDir::write_checkpoints`] (`true`). Turning deferral off writes
    /// what was recorded.
    pub fn defer_checkpoints(&self, deferred: bool) -> Result<()> {
        self.shared.defer(deferred)
    }

    /// Writes the root checkpoints if a flush recorded something since they
    /// were last written; returns whether it wrote. On an error the record
    /// is kept and the next call tries again.
    pub fn write_checkpoints(&self) -> Result<bool> {
        self.shared.write_if_dirty()
    }

    /// The root path.
    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    /// The partitions present in the log dir, sorted.
    pub fn partitions(&self) -> Result<Vec<TopicPartition>> {
        crate::reader::list_partitions(self.root())
    }

    /// Opens an existing partition, recovering it.
    pub fn open_partition(&self, tp: &TopicPartition, config: LogConfig) -> Result<PartitionLog> {
        PartitionLog::open(Arc::clone(&self.shared), tp.clone(), config, None)
    }

    /// Opens a partition, creating it when missing. When `topic_id` is given
    /// it is written to a new partition's `partition.metadata`, and an
    /// existing partition with another topic id is refused with
    /// [`Error::TopicIdMismatch`].
    pub fn open_or_create_partition(
        &self,
        tp: &TopicPartition,
        topic_id: Option<TopicId>,
        config: LogConfig,
    ) -> Result<PartitionLog> {
        PartitionLog::open(Arc::clone(&self.shared), tp.clone(), config, Some(topic_id))
    }

    /// Deletes a partition dir and its checkpoint entries.
    pub fn delete_partition(&self, tp: &TopicPartition) -> Result<()> {
        let dir = self.root().join(tp.dir_name());
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(Error::io("remove dir", &dir))?;
            crate::fsutil::fsync_dir(self.root())?;
        }
        self.shared.forget(tp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::tests::raw_batch;
    use crate::checkpoint::{self, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_OFFSET_CHECKPOINT};
    use std::collections::BTreeMap;

    #[test]
    fn segmirrors_own_flock_is_not_a_brokers_lock() {
        let root = tempfile::tempdir().expect("tempdir");
        assert_eq!(posix_lock_holder(root.path()).expect("probe"), None);
        assert!(
            !root.path().join(LOCK_FILE).exists(),
            "the probe creates nothing"
        );
        let dir = LogDir::open(root.path()).expect("open");
        assert_eq!(posix_lock_holder(root.path()).expect("probe"), None);
        refuse_if_owned_by_broker(root.path()).expect("not a broker's");
        drop(dir);
    }

    fn recovery_points(root: &Path) -> BTreeMap<TopicPartition, i64> {
        checkpoint::read_offset_checkpoint(&root.join(RECOVERY_POINT_OFFSET_CHECKPOINT))
            .expect("read checkpoint")
    }

    #[test]
    fn deferred_flushes_write_the_root_checkpoints_once_and_truncation_at_once() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = LogDir::open(root.path()).expect("open");
        dir.defer_checkpoints(true).expect("defer");
        let tp = TopicPartition::new("orders", 0).expect("valid");
        let mut log = dir
            .open_or_create_partition(&tp, None, LogConfig::default())
            .expect("create");
        let input: Vec<u8> = (0..4)
            .flat_map(|i| raw_batch(i * 2, 0, 1, &[b'x'; 40]))
            .collect();
        // A new partition's first flush, its log start where its first
        // segment starts: deferred too (open would start the log there).
        log.append_replicated(&input[..input.len() / 2])
            .expect("append");
        log.flush().expect("flush");
        assert_eq!(recovery_points(root.path()).get(&tp), None, "deferred");
        assert!(dir.write_checkpoints().expect("write"));
        assert_eq!(recovery_points(root.path()).get(&tp), Some(&4));
        log.append_replicated(&input[input.len() / 2..])
            .expect("append");
        log.flush().expect("flush");
        assert_eq!(recovery_points(root.path()).get(&tp), Some(&4), "deferred");
        assert!(
            dir.write_checkpoints().expect("write"),
            "something to write"
        );
        assert_eq!(recovery_points(root.path()).get(&tp), Some(&8));
        assert!(!dir.write_checkpoints().expect("write"), "nothing new");

        // A truncation moves the recovery point back: written at once.
        log.truncate_to(4).expect("truncate");
        log.flush().expect("flush");
        assert_eq!(recovery_points(root.path()).get(&tp), Some(&4));

        // A log start raised by a restart inside it is written at once.
        let other = TopicPartition::new("orders", 1).expect("valid");
        let mut log2 = dir
            .open_or_create_partition(&other, None, LogConfig::default())
            .expect("create");
        log2.truncate_fully_and_start_at(10).expect("restart at 10");
        log2.append_replicated(&raw_batch(10, 0, 1, &[b'z'; 40]))
            .expect("append");
        log2.raise_log_start(11).expect("raise");
        log2.flush().expect("flush");
        let starts =
            checkpoint::read_offset_checkpoint(&root.path().join(LOG_START_OFFSET_CHECKPOINT))
                .expect("read");
        assert_eq!(starts.get(&other), Some(&11));

        // Turning deferral off writes what was recorded.
        log.append_replicated(&raw_batch(4, 0, 1, &[b'y'; 40]))
            .expect("append");
        log.flush().expect("flush");
        assert_eq!(recovery_points(root.path()).get(&tp), Some(&4));
        dir.defer_checkpoints(false).expect("undefer");
        assert_eq!(recovery_points(root.path()).get(&tp), Some(&6));
    }
}
