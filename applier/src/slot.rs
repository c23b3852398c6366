//! What the applier holds for each partition it knows: one [`Slot`].
//!
//! A partition is in exactly one of these situations, so the applier keeps
//! one map of slots instead of parallel maps keyed by the same partition:
//!
//! | slot | what it is | left by |
//! | --- | --- | --- |
//! | [`Slot::Waiting`] | named by the feed and selected, its manifest not readable yet | the manifest is read: adopted ([`Slot::Mirror`]) or refused |
//! | [`Slot::Refused`] | selected but never to be mirrored (internal topic, another topic id here) | an operator's `start` trying again |
//! | [`Slot::Unopened`] | a mirror partition whose files cannot be opened (permission denied, say) | opened again every cycle |
//! | [`Slot::Mirror`] | a mirror partition, open, with its state machine | never (deleting a mirror is not a command) |
//!
//! Invariants of a [`MirrorSlot`], kept by the driver (`driver`):
//! - nothing the state says is stored beside it: the work a partition has
//!   (prepare, apply, fail over, retry) is derived from its state by
//!   `crate::schedule`;
//! - `retry_at_ms` is set only in a retryable FAILED.
//! - `retention_error` is set only by a retention check of a STOPPED
//!   partition; it never changes the state.

use kafkalog::TopicPartition;
use manifest::state::PartitionState;

use crate::mirror::Mirror;

/// A mirror partition with what its driver keeps beside the durable record.
#[derive(Debug)]
pub struct MirrorSlot {
    /// The partition, its log and its record.
    pub mirror: Mirror,
    /// Why it waits for the bucket (replication lag), when it does.
    pub(crate) waiting: Option<String>,
    /// When a retryable failure is retried (ms since the epoch).
    pub(crate) retry_at_ms: Option<i64>,
    /// Whether the write guard is in place as far as the driver knows
    /// (`None`: not known yet, or the last change failed).
    pub(crate) guard_set: Option<bool>,
    /// An action that failed in a state where no error can be recorded
    /// (STOPPED), shown by `status` until it succeeds.
    pub(crate) action_error: Option<String>,
    /// One-shot: the next `PersistState` leaves the record to the cycle's
    /// group commit (`record_dirty`) instead of writing it now. Set only for
    /// the transition to MIRRORING after a preparation, whose record may
    /// wait: a crash before the commit leaves PREPARING, which prepares
    /// again (the cut is idempotent and already durable).
    pub(crate) persist_at_commit: bool,
    /// When retention was last checked (STOPPED only;
    /// `crate::topic_configs::retention_pass`), `None`: not since this
    /// process opened the partition.
    pub(crate) retention_checked_ms: Option<i64>,
    /// Why the last retention check could not be enforced (shown by
    /// `status`; the partition keeps its state), until one succeeds.
    pub(crate) retention_error: Option<String>,
}

impl MirrorSlot {
    /// A slot for a mirror opened or created now; the driver sets its work.
    pub(crate) fn new(mirror: Mirror) -> MirrorSlot {
        MirrorSlot {
            mirror,
            waiting: None,
            retry_at_ms: None,
            guard_set: None,
            action_error: None,
            persist_at_commit: false,
            retention_checked_ms: None,
            retention_error: None,
        }
    }

    /// The partition.
    pub fn tp(&self) -> &TopicPartition {
        &self.mirror.tp
    }

    /// Its state.
    pub fn state(&self) -> PartitionState {
        self.mirror.record.state.state()
    }
}

/// What the applier knows of one partition.
#[derive(Debug)]
pub enum Slot {
    /// Selected from the feed; its manifest cannot be read yet (the reason).
    Waiting(String),
    /// Selected, but refused (the reason); not retried without `start`.
    Refused(String),
    /// A mirror partition that cannot be opened (the error).
    Unopened(String),
    /// A mirror partition.
    Mirror(Box<MirrorSlot>),
}

impl Slot {
    /// The mirror, when this is one.
    pub fn mirror(&self) -> Option<&MirrorSlot> {
        match self {
            Slot::Mirror(m) => Some(m),
            _ => None,
        }
    }

    /// The mirror, when this is one.
    pub fn mirror_mut(&mut self) -> Option<&mut MirrorSlot> {
        match self {
            Slot::Mirror(m) => Some(m),
            _ => None,
        }
    }

    /// Why the partition waits for the bucket, if it does.
    pub fn waiting(&self) -> Option<&str> {
        match self {
            Slot::Waiting(w) => Some(w),
            Slot::Mirror(m) => m.waiting.as_deref(),
            _ => None,
        }
    }
}
