//! Producer ids handed out by InitProducerId.
//!
//! Ids must never collide with those of the producers whose batches the
//! mirror holds (the source cluster allocated them from 0 upward, in blocks
//! of 1000) nor with those another segmirror gateway hands out (after a
//! failback the other side's batches are mirrored here). So the first id of
//! a log dir is derived from the time it is first needed (milliseconds since
//! 1970 times 1024: about 1.8e15 in 2026, far above any id a Kafka cluster
//! allocates, and distinct between log dirs started at different
//! milliseconds), and ids go up from there.
//!
//! The next free id is kept in `<log-dir>/.segmirror/producer-ids`, written
//! atomically a block ahead of what is handed out: after a crash the ids of
//! the lost block are skipped, never reused.

use std::path::PathBuf;
use std::sync::Mutex;

/// Ids reserved per write of the file.
const BLOCK: i64 = 1000;

/// The allocator of one log dir.
#[derive(Debug)]
pub struct ProducerIds {
    path: PathBuf,
    /// (next id, end of the block reserved in the file)
    state: Mutex<Option<(i64, i64)>>,
}

impl ProducerIds {
    /// The allocator of the log dir `root`.
    pub fn new(root: &std::path::Path) -> ProducerIds {
        ProducerIds {
            path: root.join(".segmirror").join("producer-ids"),
            state: Mutex::new(None),
        }
    }

    /// A new producer id.
    pub fn next(&self) -> std::io::Result<i64> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (next, reserved) = match *state {
            Some(s) => s,
            None => {
                let stored = std::fs::read_to_string(&self.path)
                    .ok()
                    .and_then(|t| t.trim().parse::<i64>().ok());
                let start = stored.unwrap_or_else(first_id);
                (start, start)
            }
        };
        let reserved = if next >= reserved {
            let end = next + BLOCK;
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            kafkalog::fsutil::write_atomic(&self.path, end.to_string().as_bytes(), true)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            end
        } else {
            reserved
        };
        *state = Some((next + 1, reserved));
        Ok(next)
    }
}

fn first_id() -> i64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| i64::try_from(d.as_millis()).unwrap_or(1));
    ms.saturating_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_go_up_and_a_restart_skips_the_reserved_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids = ProducerIds::new(dir.path());
        let a = ids.next().expect("id");
        let b = ids.next().expect("id");
        assert_eq!(b, a + 1);
        assert!(a > 1 << 50, "far above what a Kafka cluster allocates: {a}");
        let again = ProducerIds::new(dir.path());
        let c = again.next().expect("id");
        assert_eq!(
            c,
            a + BLOCK,
            "the block reserved before the restart is skipped"
        );
    }
}
