//! The state a log dir shares with the partition logs opened from it: its
//! root path, the lock file kept open while it is written, and Kafka's three
//! root checkpoints (recovery point, log start, high watermark per
//! partition).
//!
//! [`crate::logdir::LogDir`] opens it (after taking the lock) and each
//! [`crate::log::PartitionLog`] records its flushes here; it lives below
//! both so that neither module depends on the other's internals. Each
//! update rewrites a file atomically with this process's view merged into
//! what the file held when the dir was opened; while deferred, a flush
//! only records its values in memory (a recovery point that lags is
//! harmless), but a log start that moves, a recovery point that goes back
//! and a forgotten partition are written at once.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use crate::checkpoint::{
    self, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
};
use crate::error::Result;
use crate::topic::TopicPartition;

#[derive(Debug, Default)]
struct RootCheckpoints {
    recovery_point: BTreeMap<TopicPartition, i64>,
    log_start: BTreeMap<TopicPartition, i64>,
    high_watermark: BTreeMap<TopicPartition, i64>,
    has_high_watermark_file: bool,
    /// Flushes record in memory only; `LogDir::write_checkpoints` writes.
    deferred: bool,
    /// Something recorded since the files were last written.
    dirty: bool,
}

/// State shared by a log dir and the partition logs opened from it.
#[derive(Debug)]
pub(crate) struct SharedRoot {
    pub(crate) root: PathBuf,
    _lock: File,
    checkpoints: Mutex<RootCheckpoints>,
}

impl SharedRoot {
    /// Reads the root checkpoints of `root`, whose lock `lock` is held.
    pub(crate) fn open(root: PathBuf, lock: File) -> Result<SharedRoot> {
        let checkpoints = RootCheckpoints {
            recovery_point: checkpoint::read_offset_checkpoint(
                &root.join(RECOVERY_POINT_OFFSET_CHECKPOINT),
            )?,
            log_start: checkpoint::read_offset_checkpoint(&root.join(LOG_START_OFFSET_CHECKPOINT))?,
            high_watermark: checkpoint::read_offset_checkpoint(
                &root.join(REPLICATION_OFFSET_CHECKPOINT),
            )?,
            has_high_watermark_file: root.join(REPLICATION_OFFSET_CHECKPOINT).exists(),
            deferred: false,
            dirty: false,
        };
        Ok(SharedRoot {
            root,
            _lock: lock,
            checkpoints: Mutex::new(checkpoints),
        })
    }

    /// Whether flushes only record the checkpoints in memory; turning that
    /// off writes what was recorded.
    pub(crate) fn defer(&self, deferred: bool) -> Result<()> {
        let mut c = self.lock();
        c.deferred = deferred;
        if !deferred && c.dirty {
            self.write_all(&mut c)?;
        }
        Ok(())
    }

    /// Writes the root checkpoints if something was recorded since they
    /// were last written; returns whether it wrote.
    pub(crate) fn write_if_dirty(&self) -> Result<bool> {
        let mut c = self.lock();
        if !c.dirty {
            return Ok(false);
        }
        self.write_all(&mut c)?;
        Ok(true)
    }

    fn lock(&self) -> MutexGuard<'_, RootCheckpoints> {
        match self.checkpoints.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub(crate) fn log_start_offset(&self, tp: &TopicPartition) -> Option<i64> {
        self.lock().log_start.get(tp).copied()
    }

    pub(crate) fn recovery_point(&self, tp: &TopicPartition) -> Option<i64> {
        self.lock().recovery_point.get(tp).copied()
    }

    /// Records a partition's recovery point, log start and high watermark and
    /// rewrites the three root checkpoints.
    pub(crate) fn update_checkpoints(
        &self,
        tp: &TopicPartition,
        recovery_point: i64,
        log_start: i64,
        high_watermark: i64,
        first_segment_base: i64,
    ) -> Result<()> {
        let mut c = self.lock();
        // A log start that moves or a recovery point that goes back (a
        // truncation) is written at once even when deferred: only a
        // recovery point that lags the flushed data is harmless. A new
        // partition's first entry whose log start is where its first
        // segment starts can wait too: without an entry, open starts the
        // log there.
        let log_start_moved = match c.log_start.get(tp) {
            Some(&recorded) => recorded != log_start,
            None => log_start != first_segment_base,
        };
        let must_write = log_start_moved
            || c.recovery_point
                .get(tp)
                .is_some_and(|&p| recovery_point < p);
        c.recovery_point.insert(tp.clone(), recovery_point);
        c.log_start.insert(tp.clone(), log_start);
        c.high_watermark.insert(tp.clone(), high_watermark);
        if c.deferred && !must_write {
            c.dirty = true;
            return Ok(());
        }
        self.write_all(&mut c)
    }

    /// Records a partition's log start offset durably.
    pub(crate) fn update_log_start(&self, tp: &TopicPartition, log_start: i64) -> Result<()> {
        let mut c = self.lock();
        c.log_start.insert(tp.clone(), log_start);
        checkpoint::write_offset_checkpoint(
            &self.root.join(LOG_START_OFFSET_CHECKPOINT),
            &c.log_start,
            true,
        )
    }

    pub(crate) fn forget(&self, tp: &TopicPartition) -> Result<()> {
        let mut c = self.lock();
        c.recovery_point.remove(tp);
        c.log_start.remove(tp);
        c.high_watermark.remove(tp);
        self.write_all(&mut c)
    }

    /// Rewrites the root checkpoints. The high watermark file is kept only
    /// when the dir had one (a broker's dir): a log of our own has one
    /// replica and commits every append, and a missing file is what tells a
    /// shipper to ship up to the log end.
    fn write_all(&self, c: &mut RootCheckpoints) -> Result<()> {
        checkpoint::write_offset_checkpoint(
            &self.root.join(RECOVERY_POINT_OFFSET_CHECKPOINT),
            &c.recovery_point,
            true,
        )?;
        checkpoint::write_offset_checkpoint(
            &self.root.join(LOG_START_OFFSET_CHECKPOINT),
            &c.log_start,
            true,
        )?;
        if c.has_high_watermark_file {
            checkpoint::write_offset_checkpoint(
                &self.root.join(REPLICATION_OFFSET_CHECKPOINT),
                &c.high_watermark,
                true,
            )?;
        }
        c.dirty = false;
        Ok(())
    }
}
