//! The applier's side of the Kafka gateway (`applier run --kafka-listen`):
//! one process, so the applier stays the log dir's single writer.
//!
//! - Producers' appends ([`gateway::AppendRequest`]) reach the applier
//!   through a channel and are performed between partition steps: a mirror
//!   partition takes them only when STOPPED (at its epoch above the LME),
//!   with its idempotent producers' sequences kept here
//!   ([`GatewayLink::append_to_stopped`]); a partition that is not a mirror
//!   goes to the writer the applier shares with `applier serve`
//!   ([`gateway::writer::PlainLogs`]), which the group offsets sync writes
//!   through too, gateway or not.
//! - After every change the applier made to a partition's files, the
//!   gateway's readers are told ([`gateway::writer::Readers`]): an append
//!   wakes waiting fetches at once, and a truncation (preparation, a
//!   replaced segment) makes the gateway read the partition's tail again
//!   (and forget its producers' sequences), so nothing cut is ever served;
//!   a log start raised by retention makes it read the partition again too
//!   (its producers' sequences kept).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use gateway::groups::Coordinator;
use gateway::idempotence::ProducerTable;
use gateway::writer::{
    AppendError, Appended, PlainLogs, Readers, append_as_leader, refusal, save_producers,
};
use gateway::{AppendRequest, Appends, LogView};
use kafkalog::TopicPartition;
use tokio::sync::mpsc;

use crate::slot::{MirrorSlot, Slot};
use crate::table::Notices;

/// What the applier holds of a running gateway.
pub struct GatewayLink {
    requests: mpsc::Receiver<AppendRequest>,
    readers: Readers,
    /// The gateway's group coordinator (the group offsets sync keeps it
    /// current and leaves its active groups alone).
    pub(crate) groups: Arc<Coordinator>,
    /// The idempotent producers of stopped mirror partitions.
    producers: HashMap<TopicPartition, ProducerTable>,
}

impl std::fmt::Debug for GatewayLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayLink").finish_non_exhaustive()
    }
}

impl GatewayLink {
    /// A link receiving appends from `requests`, for a gateway whose
    /// group coordinator is `groups`.
    pub fn new(
        requests: mpsc::Receiver<AppendRequest>,
        view: Arc<LogView>,
        appends: Arc<Appends>,
        groups: Arc<Coordinator>,
    ) -> GatewayLink {
        GatewayLink {
            requests,
            readers: Readers::new(view, appends),
            groups,
            producers: HashMap::new(),
        }
    }

    /// The next append request, when the gateway runs (pending forever
    /// otherwise, so a `select!` ignores it).
    pub(crate) async fn next(link: &mut Option<GatewayLink>) -> Option<AppendRequest> {
        match link {
            Some(l) => l.requests.recv().await,
            None => std::future::pending().await,
        }
    }

    /// Hands `notices` (the table's appends and cuts since the last call)
    /// to the gateway's readers, when a gateway runs; they are dropped
    /// either way.
    pub(crate) fn tell(link: &mut Option<GatewayLink>, notices: &mut Notices) {
        if notices.is_empty() {
            return;
        }
        let Notices {
            appended,
            truncated,
            start_raised,
        } = std::mem::take(notices);
        let Some(link) = link else {
            return;
        };
        for tp in &truncated {
            link.truncated(tp);
        }
        for tp in appended.difference(&truncated) {
            link.appended(tp);
        }
        for tp in start_raised.difference(&truncated) {
            link.start_raised(tp);
        }
    }

    /// `tp` grew.
    pub(crate) fn appended(&self, tp: &TopicPartition) {
        self.readers.appended(tp);
    }

    /// `tp`'s files were cut or rewritten: its producers' batches may be
    /// gone, so their table is rebuilt at the next write.
    pub(crate) fn truncated(&mut self, tp: &TopicPartition) {
        self.producers.remove(tp);
        self.readers.truncated(tp);
    }

    /// `tp`'s oldest segments were deleted (retention of a STOPPED mirror):
    /// readers look again where it starts; its producers' sequences stay
    /// (Kafka keeps them when the log start moves).
    pub(crate) fn start_raised(&self, tp: &TopicPartition) {
        self.readers.truncated(tp);
    }

    /// A producer's append to a mirror partition: refused unless STOPPED,
    /// else appended as its leader with its producers' sequences (loaded
    /// from `root` at the first write).
    pub(crate) fn append_to_stopped(
        &mut self,
        root: &Path,
        slot: &mut MirrorSlot,
        batches: &mut [u8],
    ) -> Result<Appended, AppendError> {
        let tp = slot.tp().clone();
        if let Some(refused) = refusal(&tp, Some(slot.state())) {
            return Err(refused);
        }
        let producers = self
            .producers
            .entry(tp.clone())
            .or_insert_with(|| ProducerTable::load(root, &tp).unwrap_or_default());
        append_as_leader(&mut slot.mirror.log, batches, producers)
    }

    /// At a clean shutdown: the stopped mirrors' producers saved as
    /// Kafka's producer snapshots.
    pub(crate) fn save_producers(
        &mut self,
        slots: &mut std::collections::BTreeMap<TopicPartition, Slot>,
    ) {
        for (tp, producers) in self.producers.drain() {
            if let Some(Slot::Mirror(slot)) = slots.get_mut(&tp)
                && let Err(e) = save_producers(&mut slot.mirror.log, &producers)
            {
                tracing::warn!(partition = %tp, error = %e, "saving the producers' snapshot");
            }
        }
    }
}

/// The log dir's writes that are not a mirror's own work: producers'
/// appends through a gateway and the group offsets sync, both to
/// partitions that are not mirrors through one [`PlainLogs`] (the writer
/// `applier serve` uses too), and the gateway's readers told of changes.
#[derive(Debug, Default)]
pub(crate) struct LocalWriter {
    /// Partitions of the log dir that are not mirrors, open for writing.
    pub(crate) plain: PlainLogs,
    /// The gateway served from this process, if any.
    pub(crate) link: Option<GatewayLink>,
}
