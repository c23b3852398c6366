//! The group commit: each step of a protocol run for many partitions, then
//! one barrier ([`DeferredSync`]: every fsync of the step done together)
//! before the next step, so that each partition's writes become durable in
//! the order its protocol needs while nothing is serial per partition.
//!
//! - [`prepare_many`]: every preparation's plan executed (its cut),
//!   barrier, then every partition MIRRORING (its record left to the
//!   cycle's [`commit_applied`]: one record write for a preparation and a
//!   first apply; a crash before it leaves PREPARING, which prepares again).
//! - [`commit_applied`]: every log that [`Mirror::apply`] appended to
//!   flushed, barrier, then every record that changed in memory, barrier.
//!   No record names data before that data is durable.
//! - [`failover_many`]: every stop's LME and epoch in its record, barrier,
//!   every log's epoch raised and open transactions aborted (STOPPED at
//!   once for those with nothing to abort: their epoch bump is redone at
//!   every open), barrier, then STOPPED for the others.
//!
//! Executors only: what follows each step (a transition, readers told, a
//! failure recorded) is the caller's, through [`Partitions`]. No `.await`
//! inside: a deferred scope belongs to its thread. A barrier that fails
//! fails every partition whose writes it covered (retryable), or, for a
//! failover, leaves them STOPPING to be failed over again.

use kafkalog::TopicPartition;
use kafkalog::fsutil::DeferredSync;
use manifest::partition::PartitionManifest;

use crate::error::MirrorError;
use crate::mirror::MirrorContext;
use crate::slot::MirrorSlot;

/// What the group commit needs of the partitions it works on.
pub(crate) trait Partitions {
    /// The mirror slot of `tp`, if it is one.
    fn slot(&mut self, tp: &TopicPartition) -> Option<&mut MirrorSlot>;
    /// A step of `tp` failed.
    fn failed(&mut self, tp: &TopicPartition, e: MirrorError);
    /// `tp`'s preparation is durable: readers told of its cut, and
    /// MIRRORING, the record at the cycle's commit.
    fn prepared(&mut self, tp: &TopicPartition);
    /// `tp`'s failover is durable: readers told, and STOPPED.
    fn stopped(&mut self, tp: &TopicPartition);
    /// `tp` is still STOPPING after a barrier failed: failed over again.
    fn stop_again(&mut self, tp: TopicPartition);
}

/// Prepares every partition of `ready` (each with the source's manifest
/// and its context) together; see the module doc.
pub(crate) fn prepare_many(
    p: &mut impl Partitions,
    ready: Vec<(TopicPartition, PartitionManifest, MirrorContext)>,
) {
    if ready.is_empty() {
        return;
    }
    let scope = DeferredSync::begin();
    let mut prepared: Vec<TopicPartition> = Vec::new();
    for (tp, manifest, ctx) in ready {
        let Some(slot) = p.slot(&tp) else {
            continue;
        };
        slot.waiting = None;
        match slot.mirror.prepare(&manifest, &ctx) {
            Ok(_) => prepared.push(tp),
            Err(e) => p.failed(&tp, e),
        }
    }
    if let Err(e) = scope.barrier() {
        fail_phase(p, &prepared, "preparation", &e);
        return;
    }
    for tp in &prepared {
        p.prepared(tp);
    }
    if let Err(e) = scope.finish() {
        fail_phase(p, &prepared, "preparation", &e);
    }
}

/// The group commit of what [`crate::mirror::Mirror::apply`] appended to
/// `tps` (those with nothing to flush or write are skipped); see the
/// module doc.
pub(crate) fn commit_applied(p: &mut impl Partitions, tps: &[TopicPartition]) {
    let due: Vec<&TopicPartition> = tps
        .iter()
        .filter(|tp| {
            p.slot(tp)
                .is_some_and(|s| s.mirror.unflushed || s.mirror.record_dirty)
        })
        .collect();
    if due.is_empty() {
        return;
    }
    let scope = DeferredSync::begin();
    let mut flushed: Vec<TopicPartition> = Vec::new();
    for tp in due {
        let Some(slot) = p.slot(tp) else {
            continue;
        };
        match slot.mirror.flush_applied() {
            Ok(()) => flushed.push(tp.clone()),
            Err(e) => p.failed(tp, e),
        }
    }
    if let Err(e) = scope.barrier() {
        fail_phase(p, &flushed, "apply", &e);
        return;
    }
    for tp in &flushed {
        let Some(slot) = p.slot(tp) else {
            continue;
        };
        if let Err(e) = slot.mirror.save_applied() {
            p.failed(tp, e);
        }
    }
    if let Err(e) = scope.finish() {
        fail_phase(p, &flushed, "apply", &e);
    }
}

/// The failover of `tps` (all STOPPING) inside the caller's `scope`,
/// whose earlier writes (the STOPPING records) its first barrier makes
/// durable too; see the module doc. A partition whose step fails is
/// FAILED alone.
pub(crate) fn failover_many(p: &mut impl Partitions, tps: &[TopicPartition], scope: &DeferredSync) {
    let mut going: Vec<TopicPartition> = Vec::new();
    for tp in tps {
        let Some(slot) = p.slot(tp) else {
            continue;
        };
        match slot.mirror.record_stop() {
            Ok(()) => going.push(tp.clone()),
            Err(e) => p.failed(tp, e),
        }
    }
    if let Err(e) = scope.barrier() {
        tracing::error!(error = %e, "recording the stops durably failed; failover resumes at the next cycle");
        for tp in going {
            p.stop_again(tp);
        }
        return;
    }
    let mut aborted: Vec<TopicPartition> = Vec::new();
    for tp in going {
        let Some(slot) = p.slot(&tp) else {
            continue;
        };
        match slot.mirror.stop_log() {
            Ok(true) => aborted.push(tp),
            // Only the epoch changed in the log, and a STOPPED partition's
            // epoch is raised again at every open: STOPPED shares this
            // barrier (the guard goes after the record).
            Ok(false) => p.stopped(&tp),
            Err(e) => p.failed(&tp, e),
        }
    }
    if let Err(e) = scope.barrier() {
        tracing::error!(error = %e, "flushing the stopped logs failed; failover resumes at the next cycle");
        for tp in aborted {
            p.stop_again(tp);
        }
        return;
    }
    // The ABORT markers are durable: now STOPPED.
    for tp in aborted {
        p.stopped(&tp);
    }
}

/// A barrier failed: every partition whose writes it covered is FAILED
/// (retryable) with that error.
fn fail_phase(
    p: &mut impl Partitions,
    tps: &[TopicPartition],
    phase: &'static str,
    e: &kafkalog::Error,
) {
    tracing::error!(error = %e, phase, partitions = tps.len(), "making a group commit's writes durable failed");
    for tp in tps {
        p.failed(
            tp,
            MirrorError::Durability {
                tp: tp.clone(),
                phase,
                reason: e.to_string(),
            },
        );
    }
}
