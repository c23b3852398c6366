//! The durable record of verification, `<log-dir>/.segmirror/verify.json`
//! ([`VerifyRecord`]): when a complete pass last ran and what it covered,
//! the local damage found and not repaired since, the bucket objects the
//! last sampling pass found wrong. Written atomically by `applier verify`
//! and by the scrub; read by `applier status`, `start` (where to cut a
//! damaged mirror) and `applier repair`.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Counts, Mismatch};
use crate::error::StateFileError;

/// A pass of `verify` or of the scrub, as [`VerifyRecord::pass_completed`]
/// records it.
#[derive(Debug, Clone)]
pub struct Pass<'a> {
    /// The partitions it covered.
    pub partitions: &'a BTreeSet<String>,
    /// What it found.
    pub found: &'a [Mismatch],
    /// What it checked.
    pub counts: Counts,
    /// `verify` or `scrub`.
    pub by: &'a str,
    /// When it completed (ms).
    pub now_ms: i64,
    /// It covered every mirror partition.
    pub complete: bool,
    /// It sampled bucket objects.
    pub sampled_objects: bool,
}

/// What `applier status` shows of verification, and what a repair reads:
/// `<log-dir>/.segmirror/verify.json` (`crate::state_dir::verify_record_path`),
/// written atomically by `applier verify` and by the scrub.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyRecord {
    /// When a pass over every mirror partition last completed (ms).
    pub last_complete_pass_ms: Option<i64>,
    /// What that pass covered.
    #[serde(default)]
    pub last_pass: Counts,
    /// Who ran it: `verify` (one shot) or `scrub` (`applier run`).
    #[serde(default)]
    pub last_pass_by: Option<String>,
    /// Local damage found and not repaired since, per partition.
    #[serde(default)]
    pub damage: Vec<Mismatch>,
    /// Bucket mismatches found by the last pass that sampled objects.
    #[serde(default)]
    pub object_damage: Vec<Mismatch>,
    /// When each partition was last repaired (ms): damage found before
    /// that is gone.
    #[serde(default)]
    pub repaired_at_ms: std::collections::BTreeMap<String, i64>,
}

impl VerifyRecord {
    /// Reads the record (none yet: the default).
    pub fn read(log_dir: &Path) -> Result<VerifyRecord, StateFileError> {
        let path = crate::state_dir::verify_record_path(log_dir);
        match kafkalog::fsutil::read_optional(&path)? {
            None => Ok(VerifyRecord::default()),
            Some(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| StateFileError::Damaged {
                    path,
                    what: "verify record",
                    source,
                })
            }
        }
    }

    /// Writes it atomically (temp file, fsync, rename, fsync dir).
    pub fn write(&self, log_dir: &Path) -> Result<(), StateFileError> {
        let path = crate::state_dir::verify_record_path(log_dir);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StateFileError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let bytes = serde_json::to_vec_pretty(self).map_err(|source| StateFileError::Encode {
            path: path.clone(),
            source,
        })?;
        kafkalog::fsutil::write_atomic(&path, &bytes, true)?;
        Ok(())
    }

    /// Read, change, write.
    pub fn update(
        log_dir: &Path,
        change: impl FnOnce(&mut VerifyRecord),
    ) -> Result<(), StateFileError> {
        let mut r = VerifyRecord::read(log_dir)?;
        change(&mut r);
        r.write(log_dir)
    }

    /// Adds local damage found now (an entry for the same file and
    /// position replaces the older one).
    pub fn add_damage(&mut self, found: &[Mismatch]) {
        for m in found.iter().filter(|m| m.is_local()) {
            self.damage.retain(|d| {
                !(d.path == m.path && d.position == m.position && d.partition == m.partition)
            });
            self.damage.push(m.clone());
        }
    }

    /// A pass over `pass.partitions` completed with `pass.found`: their
    /// damage becomes what the pass found (less what was repaired since it
    /// was found).
    pub fn pass_completed(&mut self, pass: &Pass<'_>) {
        self.damage
            .retain(|d| !pass.partitions.contains(&d.partition));
        for m in pass.found.iter().filter(|m| m.is_local()) {
            let repaired = self.repaired_at_ms.get(&m.partition).copied();
            if repaired.is_none_or(|r| m.found_at_ms >= r) {
                self.damage.push(m.clone());
            }
        }
        if pass.sampled_objects {
            self.object_damage = pass
                .found
                .iter()
                .filter(|m| !m.is_local())
                .cloned()
                .collect();
        }
        if pass.complete {
            self.last_complete_pass_ms = Some(pass.now_ms);
            self.last_pass = pass.counts;
            self.last_pass_by = Some(pass.by.to_string());
        }
    }

    /// The damage recorded for `partition`.
    pub fn damage_of(&self, partition: &str) -> Vec<&Mismatch> {
        self.damage
            .iter()
            .filter(|d| d.partition == partition)
            .collect()
    }

    /// One line for `applier status`.
    pub fn summary(&self, now_ms: i64) -> String {
        let when = match self.last_complete_pass_ms {
            Some(t) => format!(
                "last verified {}s ago by {} ({} partitions, {} batches, {} bytes, {} objects)",
                ((now_ms - t).max(0) + 500) / 1000,
                self.last_pass_by.as_deref().unwrap_or("?"),
                self.last_pass.partitions,
                self.last_pass.batches,
                self.last_pass.bytes,
                self.last_pass.objects
            ),
            None => "never verified completely (applier verify, or the scrub of applier run)"
                .to_string(),
        };
        let mut line = format!("verification: {when}");
        let damaged: BTreeSet<&str> = self.damage.iter().map(|d| d.partition.as_str()).collect();
        if !damaged.is_empty() || !self.object_damage.is_empty() {
            line.push_str(&format!(
                "; DAMAGE: {} local mismatches in {}; {} bucket objects",
                self.damage.len(),
                damaged.into_iter().collect::<Vec<_>>().join(", "),
                self.object_damage.len()
            ));
            if let Some(first) = self.damage.first().or(self.object_damage.first()) {
                line.push_str(&format!(" (first: {first})"));
            }
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use super::*;
    use crate::verify::{Counts, Mismatch};

    #[test]
    fn a_pass_replaces_the_damage_of_the_partitions_it_covered_but_not_what_was_repaired_since() {
        let m = |p: &str, pos: u64, at: i64| Mismatch {
            partition: p.to_string(),
            path: Some(PathBuf::from(format!("/d/{p}/0.log"))),
            key: None,
            position: Some(pos),
            offset: Some(0),
            segment: Some(0),
            cut_offset: Some(0),
            message: "x".into(),
            found_at_ms: at,
        };
        let mut r = VerifyRecord::default();
        r.add_damage(&[m("a-0", 1, 10), m("b-0", 1, 10)]);
        r.add_damage(&[m("a-0", 1, 11)]);
        assert_eq!(r.damage.len(), 2, "same place found again is one entry");
        r.repaired_at_ms.insert("a-0".into(), 20);
        let covered: BTreeSet<String> = ["a-0".to_string(), "b-0".to_string()].into();
        r.pass_completed(&Pass {
            partitions: &covered,
            found: &[m("a-0", 1, 15), m("a-0", 9, 25)],
            counts: Counts::default(),
            by: "scrub",
            now_ms: 30,
            complete: true,
            sampled_objects: false,
        });
        assert_eq!(r.damage.len(), 1, "b-0 clean now, a-0's old find repaired");
        assert_eq!(r.damage[0].position, Some(9));
        assert_eq!(r.last_complete_pass_ms, Some(30));
    }
}
