//! The source topic's lifecycle on the mirror (see `docs/mirroring.md`,
//! "Topic lifecycle"): a topic deleted at the source, and a topic deleted
//! and created again under the same name.
//!
//! Invariants:
//! - **Deleted.** A manifest version with `deleted = true` (the shipper
//!   publishes one when the source partition dir has been gone for its
//!   grace period) is applied like any other: it ships nothing new, so the
//!   mirror keeps every record it has, read-only, in the state it is in (a
//!   MIRRORING partition stays MIRRORING and caught up, never FAILED). The
//!   record notes when the source deleted it ([`record_deletion`],
//!   `MirrorRecord::source_deleted_at_ms`, durable: it survives a restart
//!   and the bucket's sweep), `applier status` shows it, and a later
//!   version without the mark (the source partition came back) clears it
//!   and mirroring goes on. Nothing is ever deleted here: the operator
//!   removes the partition dir, or `applier stop` keeps the records as a
//!   writable topic.
//! - **Recreated.** A partition dir is named `<topic>-<partition>`, so a
//!   new topic of the same name cannot sit beside the old one. When the
//!   feed names the partition under another topic id than the one its
//!   record pins, a PREPARING or MIRRORING partition goes FAILED, not
//!   retried (`crate::schedule::Work::SourceRecreated`,
//!   `MirrorError::SourceRecreated`: "inconsistent topic id: the source
//!   topic was recreated (old id X, new id Y) ..."), and `start` of a
//!   STOPPED or FAILED one whose log holds the old topic's records is
//!   refused, nothing changed (`command_plan::StartRefusal::SourceRecreated`),
//!   until the operator removes the partition dir; the next applier to open
//!   the log dir then mirrors the new topic from scratch. The new topic's
//!   records are never appended to the old one's.

use manifest::mirror_record::MirrorRecord;
use manifest::partition::PartitionManifest;

/// What applying a manifest version changed of the record's deletion mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// Nothing.
    Unchanged,
    /// The source deleted the partition (at this commit time, ms).
    Deleted(i64),
    /// The source publishes the partition again.
    Restored,
}

/// Notes in `record` whether the source's partition is deleted, from the
/// manifest version being applied (see the module doc). The first deleted
/// version's commit time is kept while later ones say the same.
pub fn record_deletion(record: &mut MirrorRecord, manifest: &PartitionManifest) -> Deletion {
    match (record.source_deleted_at_ms, manifest.deleted) {
        (None, true) => {
            record.source_deleted_at_ms = Some(manifest.committed_at_ms);
            Deletion::Deleted(manifest.committed_at_ms)
        }
        (Some(_), false) => {
            record.source_deleted_at_ms = None;
            Deletion::Restored
        }
        (Some(_), true) | (None, false) => Deletion::Unchanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::TopicPartition;

    /// One row: the record's mark before, the manifest's `deleted`, the
    /// change and the mark after.
    fn row(before: Option<i64>, deleted: bool, change: Deletion, after: Option<i64>) {
        let mut record = manifest::mirror_record::fixtures::sample();
        record.source_deleted_at_ms = before;
        let tp = TopicPartition::new("orders", 0).expect("tp");
        let mut m = PartitionManifest::new("src-1", &tp, record.topic_id);
        m.deleted = deleted;
        m.committed_at_ms = 2_000;
        assert_eq!(
            record_deletion(&mut record, &m),
            change,
            "{before:?} {deleted}"
        );
        assert_eq!(record.source_deleted_at_ms, after, "{before:?} {deleted}");
    }

    #[test]
    fn a_live_source_leaves_the_record_alone() {
        row(None, false, Deletion::Unchanged, None);
    }

    #[test]
    fn the_first_deleted_version_marks_the_record_with_its_commit_time() {
        row(None, true, Deletion::Deleted(2_000), Some(2_000));
    }

    #[test]
    fn a_later_deleted_version_keeps_the_first_time() {
        row(Some(1_000), true, Deletion::Unchanged, Some(1_000));
    }

    #[test]
    fn a_version_without_the_mark_restores_the_partition() {
        row(Some(1_000), false, Deletion::Restored, None);
    }
}
