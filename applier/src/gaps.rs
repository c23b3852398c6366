//! Gaps at the destination: offsets of a mirror partition that the mirror
//! never received and never will (see `docs/mirroring.md`, "Gaps", and
//! `manifest::gaps`).
//!
//! The applier learns of a gap two ways:
//! - **from the manifest** (`PartitionManifest::gaps`): the shipper
//!   recorded what the source lost before shipping it;
//! - **by its own observation**: while MIRRORING, the source's log start
//!   passed the local log end, so the applier truncated fully and restarted
//!   at the log start (`Step::TruncateFullyAndStartAt` for the source's log
//!   start): the offsets in between never reached the mirror. It records
//!   only the part no manifest gap covers ([`manifest::gaps::uncovered`]),
//!   so an older shipper that records no gaps still leaves a trace, and a
//!   newer one's gap is not counted twice. (A first preparation that starts
//!   an empty mirror at the source's log start is not a gap: that data was
//!   gone before the mirror existed.)
//!
//! Both are kept in the log dir's state dir, written atomically (temp file,
//! fsync, rename, fsync dir, `kafkalog::fsutil::write_atomic`):
//!
//! - `gaps.json` ([`GapBook`]): every gap known, per partition; written by
//!   the engine only, when it learns a new one (and logs it at ERROR, once);
//! - `gap-acks.json` ([`Acks`]): the operator's acknowledgements, one per
//!   gap (partition and offsets); written by `applier gaps ack` only.
//!
//! One writer per file, so a running daemon and an operator's command never
//! overwrite each other's update. Acknowledging is per gap: a later gap is
//! a new entry, and `applier once` exits 1 for it until it too is
//! acknowledged. The shipper's own acknowledgement (in the manifest) does
//! not acknowledge a gap here: each side's operator answers for their side.
//!
//! A damaged file is never read as empty: it is set aside (renamed with a
//! `.damaged` suffix, logged at ERROR) and the gaps are learned again from
//! the manifests; an applier-observed gap in it stays readable in the
//! renamed file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kafkalog::TopicPartition;
use manifest::gaps::{Gap, GapCause};
use serde::{Deserialize, Serialize};

/// Who recorded a gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeenBy {
    /// The source's manifest (the shipper).
    Manifest,
    /// The applier: the source's log start passed its log end.
    Applier,
}

/// One gap the destination knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownGap {
    /// The gap (its `acknowledged_at_ms` is the shipper's, not ours).
    #[serde(flatten)]
    pub gap: Gap,
    /// Who recorded it.
    pub seen_by: SeenBy,
}

/// `gaps.json`: every gap known, by `topic-partition`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapBook {
    /// Gaps per partition, ordered by first offset.
    pub partitions: BTreeMap<String, Vec<KnownGap>>,
}

/// One acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The gap's first offset.
    pub first_offset: i64,
    /// The gap's last offset.
    pub last_offset: i64,
    /// When (ms since the epoch).
    pub acknowledged_at_ms: i64,
}

/// `gap-acks.json`: the operator's acknowledgements.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acks {
    /// In the order given.
    pub acks: Vec<Ack>,
}

impl Acks {
    /// When the gap `first..=last` of `tp` was acknowledged, if it was.
    pub fn of(&self, tp: &str, first: i64, last: i64) -> Option<i64> {
        self.acks
            .iter()
            .find(|a| {
                format!("{}-{}", a.topic, a.partition) == tp
                    && a.first_offset == first
                    && a.last_offset == last
            })
            .map(|a| a.acknowledged_at_ms)
    }
}

/// A gap as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapStatus {
    /// The gap.
    #[serde(flatten)]
    pub gap: KnownGap,
    /// Whether this destination's operator acknowledged it
    /// (`applier gaps ack`).
    pub acknowledged: bool,
    /// When.
    pub acknowledged_here_at_ms: Option<i64>,
}

impl GapStatus {
    /// A loss not acknowledged here: what `once` exits 1 for.
    pub fn is_open(&self) -> bool {
        self.gap.gap.is_loss() && !self.acknowledged
    }
}

use crate::error::StateFileError;
use crate::state_dir::{gap_acks_path as acks_path, gaps_path as book_path};

fn read_json<T: Default + serde::de::DeserializeOwned>(path: &Path) -> Result<T, StateFileError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| StateFileError::Damaged {
            path: path.to_path_buf(),
            what: "JSON",
            source,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(source) => Err(StateFileError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write_json<T: Serialize>(log_dir: &Path, path: &Path, value: &T) -> Result<(), StateFileError> {
    let dir = crate::state_dir::state_dir(log_dir);
    std::fs::create_dir_all(&dir).map_err(|source| StateFileError::CreateDir {
        path: dir.clone(),
        source,
    })?;
    let bytes = serde_json::to_vec_pretty(value).map_err(|source| StateFileError::Encode {
        path: path.to_path_buf(),
        source,
    })?;
    kafkalog::fsutil::write_atomic(path, &bytes, true)?;
    Ok(())
}

/// Reads the gap book (empty when absent).
pub fn read_book(log_dir: &Path) -> Result<GapBook, StateFileError> {
    read_json(&book_path(log_dir))
}

/// Reads the acknowledgements (none when absent).
pub fn read_acks(log_dir: &Path) -> Result<Acks, StateFileError> {
    read_json(&acks_path(log_dir))
}

/// Every gap known with its acknowledgement, per `topic-partition`.
pub fn statuses(log_dir: &Path) -> Result<BTreeMap<String, Vec<GapStatus>>, StateFileError> {
    let book = read_book(log_dir)?;
    let acks = read_acks(log_dir)?;
    Ok(book
        .partitions
        .into_iter()
        .map(|(tp, gaps)| {
            let rows = gaps
                .into_iter()
                .map(|g| {
                    let at = acks.of(&tp, g.gap.first_offset, g.gap.last_offset);
                    GapStatus {
                        gap: g,
                        acknowledged: at.is_some(),
                        acknowledged_here_at_ms: at,
                    }
                })
                .collect();
            (tp, rows)
        })
        .collect())
}

/// The engine's view of the book: what it learned, written when it grows.
#[derive(Debug, Default)]
pub struct Ledger {
    log_dir: PathBuf,
    book: GapBook,
}

impl Ledger {
    /// Loads the book of `log_dir`; a damaged one is set aside (see the
    /// module docs).
    pub fn open(log_dir: &Path) -> Ledger {
        let book = match read_book(log_dir) {
            Ok(b) => b,
            Err(e) => {
                let path = book_path(log_dir);
                let aside = path.with_extension(format!("json.damaged-{}", crate::clock::now_ms()));
                let moved = std::fs::rename(&path, &aside);
                tracing::error!(error = %format!("{e:#}"), kept_as = %aside.display(), moved = moved.is_ok(), "the gap record is damaged: set aside; gaps are learned again from the manifests");
                GapBook::default()
            }
        };
        Ledger {
            log_dir: log_dir.to_path_buf(),
            book,
        }
    }

    /// Records `tp`'s gaps from its manifest and, when the source's log
    /// start passed the local log end (`skipped`, the offsets skipped), the
    /// part of that no manifest gap covers. New gaps are written at once
    /// (atomically, fsynced) and logged at ERROR, once each. Returns them.
    pub fn note(
        &mut self,
        tp: &TopicPartition,
        manifest_gaps: &[Gap],
        skipped: Option<(i64, i64)>,
        now_ms: i64,
    ) -> Vec<KnownGap> {
        if manifest_gaps.is_empty() && skipped.is_none() {
            return Vec::new();
        }
        let key = tp.to_string();
        let known = self.book.partitions.entry(key.clone()).or_default();
        let mut added = Vec::new();
        for g in manifest_gaps {
            let present = known.iter().any(|k| {
                k.gap.first_offset == g.first_offset
                    && k.gap.last_offset == g.last_offset
                    && k.gap.cause == g.cause
            });
            if !present {
                let mut g = g.clone();
                g.acknowledged_at_ms = None;
                added.push(KnownGap {
                    gap: g,
                    seen_by: SeenBy::Manifest,
                });
            }
        }
        if let Some((first, last)) = skipped {
            let all: Vec<Gap> = known
                .iter()
                .map(|k| k.gap.clone())
                .chain(added.iter().map(|k| k.gap.clone()))
                .collect();
            for (a, b) in manifest::gaps::uncovered(first, last, &all) {
                added.push(KnownGap {
                    gap: Gap {
                        first_offset: a,
                        last_offset: b,
                        cause: GapCause::Retention,
                        lost_epochs: None,
                        reused_from_epoch: None,
                        detected_at_ms: now_ms,
                        acknowledged_at_ms: None,
                    },
                    seen_by: SeenBy::Applier,
                });
            }
        }
        if added.is_empty() {
            if known.is_empty() {
                self.book.partitions.remove(&key);
            }
            return added;
        }
        known.extend(added.iter().cloned());
        known.sort_by_key(|k| (k.gap.first_offset, k.gap.last_offset));
        for k in &added {
            if k.gap.is_loss() {
                tracing::error!(
                    partition = %tp,
                    first_offset = k.gap.first_offset,
                    last_offset = k.gap.last_offset,
                    seen_by = ?k.seen_by,
                    "GAP: offsets {} never reached the mirror and never will ({}); mirroring goes on from the source's log start. `applier gaps ack --log-dir {} --topic {} --partition {} --offsets {}` once handled",
                    k.gap.offsets_text(),
                    k.gap,
                    self.log_dir.display(),
                    tp.topic,
                    tp.partition,
                    k.gap.offsets_text()
                );
            } else {
                tracing::warn!(partition = %tp, "offsets {} are in the source's remote storage, not shipped: the mirror lacks them ({})", k.gap.offsets_text(), k.gap);
            }
        }
        if let Err(e) = write_json(&self.log_dir, &book_path(&self.log_dir), &self.book) {
            // Kept in memory and written again with the next gap; the
            // manifest still holds the shipper's record.
            tracing::error!(error = %format!("{e:#}"), "could not write the gap record");
        }
        added
    }
}

/// What acknowledging came to.
#[derive(Debug, PartialEq, Eq)]
pub enum AckOutcome {
    /// Recorded now.
    Acknowledged(Gap),
    /// It already was.
    AlreadyAcknowledged(Gap),
    /// No gap of the partition has these offsets: the ones it has.
    NoSuchGap(Vec<Gap>),
}

/// Acknowledges the gap `first..=last` of `tp` (see the module docs).
pub fn acknowledge(
    log_dir: &Path,
    tp: &TopicPartition,
    first: i64,
    last: i64,
    now_ms: i64,
) -> Result<AckOutcome, StateFileError> {
    let book = read_book(log_dir)?;
    let key = tp.to_string();
    let gaps: Vec<Gap> = book
        .partitions
        .get(&key)
        .map(|v| v.iter().map(|k| k.gap.clone()).collect())
        .unwrap_or_default();
    let Some(gap) = gaps.iter().find(|g| g.is(first, last)).cloned() else {
        return Ok(AckOutcome::NoSuchGap(gaps));
    };
    let mut acks = read_acks(log_dir)?;
    if acks.of(&key, first, last).is_some() {
        return Ok(AckOutcome::AlreadyAcknowledged(gap));
    }
    acks.acks.push(Ack {
        topic: tp.topic.clone(),
        partition: tp.partition,
        first_offset: first,
        last_offset: last,
        acknowledged_at_ms: now_ms,
    });
    write_json(log_dir, &acks_path(log_dir), &acks)?;
    Ok(AckOutcome::Acknowledged(gap))
}

/// The GAPS cell of the status table.
pub fn cell(gaps: &[GapStatus]) -> String {
    manifest::gaps::cell(gaps.iter().map(|g| (&g.gap.gap, g.acknowledged)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(a: i64, b: i64) -> Gap {
        Gap {
            first_offset: a,
            last_offset: b,
            cause: GapCause::Retention,
            lost_epochs: None,
            reused_from_epoch: None,
            detected_at_ms: 1,
            acknowledged_at_ms: None,
        }
    }

    #[test]
    fn gaps_are_learned_once_written_and_acknowledged_one_at_a_time() {
        let dir = tempfile::tempdir().expect("tmp");
        let tp = TopicPartition::new("t", 0).expect("tp");
        let mut ledger = Ledger::open(dir.path());
        assert_eq!(ledger.note(&tp, &[gap(100, 229)], None, 5).len(), 1);
        assert!(ledger.note(&tp, &[gap(100, 229)], None, 6).is_empty());
        // The same offsets observed by the applier: covered, not counted twice.
        assert!(
            ledger
                .note(&tp, &[gap(100, 229)], Some((100, 229)), 6)
                .is_empty()
        );
        // A reopened ledger knows it.
        let mut again = Ledger::open(dir.path());
        assert!(again.note(&tp, &[gap(100, 229)], None, 7).is_empty());
        let all = statuses(dir.path()).expect("statuses");
        assert_eq!(all["t-0"].len(), 1);
        assert!(all["t-0"][0].is_open());
        assert_eq!(
            acknowledge(dir.path(), &tp, 100, 200, 8).expect("ack"),
            AckOutcome::NoSuchGap(vec![gap(100, 229)])
        );
        assert!(matches!(
            acknowledge(dir.path(), &tp, 100, 229, 8).expect("ack"),
            AckOutcome::Acknowledged(_)
        ));
        assert!(matches!(
            acknowledge(dir.path(), &tp, 100, 229, 9).expect("ack"),
            AckOutcome::AlreadyAcknowledged(_)
        ));
        assert!(!statuses(dir.path()).expect("statuses")["t-0"][0].is_open());
        // A later gap, seen by the applier alone (an older shipper): open.
        let added = again.note(&tp, &[gap(100, 229)], Some((230, 499)), 10);
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].seen_by, SeenBy::Applier);
        let all = statuses(dir.path()).expect("statuses");
        let open: Vec<bool> = all["t-0"].iter().map(GapStatus::is_open).collect();
        assert_eq!(open, [false, true]);
        assert_eq!(cell(&all["t-0"]), "100-229 (acked),230-499!");
    }

    #[test]
    fn a_damaged_record_is_set_aside_not_read_as_empty() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(crate::state_dir::state_dir(dir.path())).expect("dir");
        std::fs::write(book_path(dir.path()), b"{\"partitions\": [").expect("write");
        assert!(statuses(dir.path()).is_err(), "status says it cannot tell");
        let _ = Ledger::open(dir.path());
        assert!(!book_path(dir.path()).exists());
        let aside = std::fs::read_dir(crate::state_dir::state_dir(dir.path()))
            .expect("list")
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().contains("damaged"));
        assert!(aside);
    }
}
