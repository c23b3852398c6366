//! Finding the mirror partitions: the change feed read ([`poll_feed`]), the
//! partitions the selection picks adopted ([`Adopter`]: a plain partition
//! becomes a mirror only when nothing would be cut), and the manifests
//! their work needs ([`manifest_for`], [`refresh_manifests`]).
//!
//! Functions over the parts they are given (the partition table, the
//! bucket reader), never over the applier itself.

#![allow(clippy::result_large_err)]

use std::collections::BTreeSet;
use std::sync::Arc;

use bucket::store::StoreError;
use kafkalog::{LogDir, TopicId, TopicPartition};
use manifest::clock::Clock;
use manifest::partition::PartitionManifest;
use manifest::state::PartitionState;

use crate::bucket_reader::BucketReader;
use crate::error::MirrorError;
use crate::options::ApplierOptions;
use crate::slot::Slot;
use crate::table::MirrorTable;

/// Reads the change feed: one GET when nothing changed, a LIST at start
/// and every `RESYNC_INTERVAL`. A change wakes every mirror partition.
pub(super) async fn poll_feed(
    bucket: &mut BucketReader,
    table: &mut MirrorTable,
) -> Result<bool, StoreError> {
    let changed = bucket.poll().await?;
    if changed {
        // Every mirror partition's feed entry may have changed.
        table.stale = true;
        let all: Vec<TopicPartition> = table.mirror_slots().map(|m| m.tp().clone()).collect();
        table.changed.extend(all);
    }
    Ok(changed)
}

/// What adopting a partition as a new mirror needs.
pub(super) struct Adopter<'a> {
    pub(super) opts: &'a ApplierOptions,
    pub(super) logdir: &'a LogDir,
    pub(super) clock: &'a Arc<dyn Clock>,
    /// Records of the partition's own may be cut (`--allow-truncate`).
    pub(super) allowed: bool,
}

impl Adopter<'_> {
    /// Creates the mirror partition (state PREPARING). A partition that
    /// already holds records of its own is refused, before anything in it
    /// is opened or written, when its preparation would cut some of them
    /// and that is not allowed (`manifest::cut`).
    pub(super) fn adopt(
        &self,
        table: &mut MirrorTable,
        bucket: &mut BucketReader,
        tp: &TopicPartition,
        topic_id: TopicId,
        manifest: Option<PartitionManifest>,
    ) -> Result<(), crate::opening::AdoptError> {
        let ctx = self.opts.context(tp);
        let adoption = crate::opening::Adoption {
            logdir: self.logdir,
            source: &self.opts.source_cluster_id,
            allowed: self.allowed,
            ctx: &ctx,
            clock: self.clock,
        };
        let mirror = crate::opening::adopt(&adoption, tp, topic_id, manifest.as_ref())?;
        table.create(mirror)?;
        if let Some(m) = manifest {
            bucket.keep(tp, m);
        }
        tracing::info!(partition = %tp, source = %self.opts.source_cluster_id, "started mirroring");
        Ok(())
    }

    /// Starts mirroring the partitions of the feed that the selection picks
    /// and that have no slot yet (or wait for their manifest). Returns the
    /// feed head gone through when nothing is left to retry; `done` is the
    /// head gone through last time (nothing is done for it again).
    pub(super) async fn discover(
        &self,
        table: &mut MirrorTable,
        bucket: &mut BucketReader,
        done: Option<u64>,
    ) -> Option<u64> {
        let head = bucket.head()?;
        let seq = head.seq;
        if done == Some(seq) {
            // The same head as last time, with nothing left to retry.
            return done;
        }
        let candidates: Vec<_> = self
            .opts
            .selection()
            .pick(head)
            .into_iter()
            .filter(|(tp, _, _)| {
                table
                    .slots
                    .get(tp)
                    .is_none_or(|s| matches!(s, Slot::Waiting(_)))
            })
            .collect();
        bucket.store()?;
        let mut complete = true;
        // Every candidate's manifest, read concurrently (one GET each).
        let confirmed = bucket.confirm_many(candidates).await;
        // Then every partition created, durable at one barrier before any
        // of them is prepared or appended to.
        let scope = kafkalog::fsutil::DeferredSync::begin();
        let mut adopted: Vec<TopicPartition> = Vec::new();
        for (tp, topic_id, manifest) in confirmed {
            table.stale = true;
            let manifest = match manifest {
                Ok(m) => m,
                Err(waiting) => {
                    // Its manifest is not readable yet: look again next cycle.
                    table.slots.insert(tp, Slot::Waiting(waiting));
                    complete = false;
                    continue;
                }
            };
            match self.adopt(table, bucket, &tp, topic_id, Some(manifest)) {
                Ok(()) => adopted.push(tp),
                Err(reason) => {
                    tracing::error!(partition = %tp, %reason, "not mirrored");
                    table.slots.insert(tp, Slot::Refused(reason.to_string()));
                }
            }
        }
        if let Err(e) = scope.finish() {
            tracing::error!(error = %e, "making the new mirror partitions durable failed; they are prepared when the next cycle opens them again");
            for tp in adopted {
                table.slots.remove(&tp);
            }
            complete = false;
        }
        complete.then_some(seq)
    }
}

/// The latest manifest of a mirror partition (`BucketReader::latest`);
/// `Ok(None)` without a bucket.
pub(super) async fn manifest_for(
    bucket: &mut BucketReader,
    table: &MirrorTable,
    tp: &TopicPartition,
) -> Result<Option<PartitionManifest>, MirrorError> {
    let Some(slot) = table.mirror(tp) else {
        return Ok(None);
    };
    let topic_id = slot.mirror.record.topic_id;
    bucket.latest(tp, topic_id).await
}

/// Reads, [`crate::bucket_reader::CONCURRENCY`] at once, the manifests
/// that the work of `tps` will need and that are not in memory (a
/// partition MIRRORING or PREPARING whose cached manifest is older than the
/// feed's entry), so that a restart or a cycle where many partitions moved
/// waits for one round of GETs instead of one GET per partition in turn,
/// and the schedule sees them. A read that fails is left to the
/// partition's work, which reads again and reports it. Returns true when
/// one was read.
pub(super) async fn refresh_manifests(
    bucket: &mut BucketReader,
    table: &MirrorTable,
    tps: &BTreeSet<TopicPartition>,
) -> bool {
    let wanted: Vec<(TopicPartition, TopicId)> = tps
        .iter()
        .filter_map(|tp| table.mirror(tp))
        .filter(|slot| {
            matches!(
                slot.state(),
                PartitionState::Mirroring | PartitionState::Preparing
            )
        })
        .map(|slot| (slot.tp().clone(), slot.mirror.record.topic_id))
        .collect();
    bucket.refresh(wanted).await
}
