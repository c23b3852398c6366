//! Finding the mirror partitions: the change feed read, the partitions the
//! selection picks adopted (a plain partition becomes a mirror only when
//! nothing would be cut), and the manifests their decisions need.

#![allow(clippy::result_large_err)]

use std::collections::BTreeSet;

use bucket::store::StoreError;
use kafkalog::{TopicId, TopicPartition};
use manifest::partition::PartitionManifest;
use manifest::state::PartitionState;

use crate::error::MirrorError;
use crate::slot::Slot;

use super::Applier;

impl Applier {
    /// Reads the change feed: one GET when nothing changed, a LIST at start
    /// and every `RESYNC_INTERVAL`.
    pub(super) async fn poll_feed(&mut self) -> Result<bool, StoreError> {
        let changed = self.bucket.poll().await?;
        if changed {
            // Every mirror partition's feed entry may have changed.
            self.live.stale = true;
            let all: Vec<TopicPartition> = self.mirror_slots().map(|m| m.tp().clone()).collect();
            self.changed.extend(all);
        }
        Ok(changed)
    }

    /// Starts mirroring partitions of the feed that the selection picks and
    /// that have no slot yet (or wait for their manifest).
    pub(super) async fn discover(&mut self) {
        let Some(head) = self.bucket.head() else {
            return;
        };
        let seq = head.seq;
        if self.discovered == Some(seq) {
            // The same head as last time, with nothing left to retry.
            return;
        }
        let candidates: Vec<_> = self
            .selection()
            .pick(head)
            .into_iter()
            .filter(|(tp, _, _)| {
                self.slots
                    .get(tp)
                    .is_none_or(|s| matches!(s, Slot::Waiting(_)))
            })
            .collect();
        let mut complete = true;
        // Every candidate's manifest, read concurrently (one GET each).
        if self.bucket.store().is_none() {
            return;
        }
        let confirmed = self.bucket.confirm_many(candidates).await;
        // Then every partition created, durable at one barrier before any
        // of them is prepared or appended to.
        let scope = kafkalog::fsutil::DeferredSync::begin();
        let mut adopted: Vec<TopicPartition> = Vec::new();
        for (tp, topic_id, manifest) in confirmed {
            self.live.stale = true;
            let manifest = match manifest {
                Ok(m) => m,
                Err(waiting) => {
                    // Its manifest is not readable yet: look again next cycle.
                    self.slots.insert(tp, Slot::Waiting(waiting));
                    complete = false;
                    continue;
                }
            };
            match self.adopt(&tp, topic_id, Some(manifest)) {
                Ok(()) => adopted.push(tp),
                Err(reason) => {
                    tracing::error!(partition = %tp, %reason, "not mirrored");
                    self.slots.insert(tp, Slot::Refused(reason.to_string()));
                }
            }
        }
        if let Err(e) = scope.finish() {
            tracing::error!(error = %e, "making the new mirror partitions durable failed; they are prepared when the next cycle opens them again");
            for tp in adopted {
                self.slots.remove(&tp);
            }
            complete = false;
        }
        self.discovered = complete.then_some(seq);
    }

    /// Creates the mirror partition (state PREPARING). A partition that
    /// already holds records of its own is refused, before anything in it
    /// is opened or written, when its preparation would cut some of them
    /// and that is not allowed (`manifest::cut`).
    pub(super) fn adopt(
        &mut self,
        tp: &TopicPartition,
        topic_id: TopicId,
        manifest: Option<PartitionManifest>,
    ) -> Result<(), crate::opening::AdoptError> {
        let ctx = self.context(tp);
        let adoption = crate::opening::Adoption {
            logdir: &self.logdir,
            source: &self.opts.source_cluster_id,
            allowed: self.truncate_allowed(),
            ctx: &ctx,
            clock: &self.clock,
        };
        let mirror = crate::opening::adopt(&adoption, tp, topic_id, manifest.as_ref())?;
        let (mut env, _) = self.env();
        let slot = crate::driver::create(mirror, &mut env)?;
        if let Some(m) = manifest {
            self.bucket.keep(tp, m);
        }
        tracing::info!(partition = %tp, source = %self.opts.source_cluster_id, "started mirroring");
        self.slots.insert(tp.clone(), Slot::Mirror(Box::new(slot)));
        self.changed.insert(tp.clone());
        self.live.stale = true;
        Ok(())
    }

    /// The latest manifest of a mirror partition
    /// (`BucketReader::latest`); `Ok(None)` without a bucket.
    pub(super) async fn manifest_for(
        &mut self,
        tp: &TopicPartition,
    ) -> Result<Option<PartitionManifest>, MirrorError> {
        let Some(slot) = self.slots.get(tp).and_then(Slot::mirror) else {
            return Ok(None);
        };
        let topic_id = slot.mirror.record.topic_id;
        self.bucket.latest(tp, topic_id).await
    }

    /// Reads, [`crate::bucket_reader::CONCURRENCY`] at once, the manifests that the
    /// work of `tps` will need and that are not in memory (a partition
    /// MIRRORING or PREPARING whose cached manifest is older than the
    /// feed's entry), so that a restart or a cycle where many partitions
    /// moved waits for one round of GETs instead of one GET per partition
    /// in turn, and the schedule sees them. A read that fails is left to
    /// the partition's work, which reads again and reports it.
    pub(super) async fn refresh_manifests(&mut self, tps: &BTreeSet<TopicPartition>) {
        let wanted: Vec<(TopicPartition, TopicId)> = tps
            .iter()
            .filter_map(|tp| self.slots.get(tp)?.mirror())
            .filter(|slot| {
                matches!(
                    slot.state(),
                    PartitionState::Mirroring | PartitionState::Preparing
                )
            })
            .map(|slot| (slot.tp().clone(), slot.mirror.record.topic_id))
            .collect();
        if self.bucket.refresh(wanted).await {
            self.live.stale = true;
        }
    }
}
