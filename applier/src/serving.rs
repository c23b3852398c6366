//! The engine's side of the Kafka gateway (`applier run --kafka-listen`):
//! one process, so the engine stays the log dir's single writer.
//!
//! - Producers' appends ([`gateway::AppendRequest`]) reach the engine
//!   through a channel and are performed between partition steps: a mirror
//!   partition takes them only when STOPPED (at its epoch above the LME);
//!   a partition that is not a mirror is opened once and kept open (in the
//!   engine's `plain` map, which the group offsets sync writes through
//!   too, gateway or not).
//! - After every change the engine made to a partition's files, the
//!   gateway is told: an append wakes waiting fetches at once, and a
//!   truncation (preparation, a replaced segment) makes the gateway read the
//!   partition's tail again, so nothing cut is ever served.

use std::collections::HashMap;
use std::sync::Arc;

use gateway::groups::Coordinator;
use gateway::idempotence::ProducerTable;
use gateway::writer::{
    AppendError, Appended, OpenForProducers, append_as_leader, may_create, offsets_topic_id,
    refusal, save_producers,
};
use gateway::{AppendRequest, Appends, LogView};
use kafkalog::{LogConfig, PartitionLog, TopicPartition};
use tokio::sync::mpsc;

use crate::engine::Applier;
use crate::slot::Slot;

/// What the engine holds of a running gateway.
pub struct GatewayLink {
    requests: mpsc::Receiver<AppendRequest>,
    view: Arc<LogView>,
    appends: Arc<Appends>,
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
            view,
            appends,
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
}

impl Applier {
    /// Serves producers' appends from a gateway, and tells it of changes.
    pub fn set_gateway(&mut self, link: GatewayLink) {
        self.gateway = Some(link);
    }

    /// The engine appended to `tp`: wakes the fetches waiting for data.
    pub(crate) fn tell_appended(&self, tp: &TopicPartition) {
        if let Some(link) = &self.gateway {
            link.view.appended(tp);
            link.appends.appended();
        }
    }

    /// The engine cut or rewrote `tp`'s files.
    pub(crate) fn tell_truncated(&mut self, tp: &TopicPartition) {
        if let Some(link) = &mut self.gateway {
            // The producers' batches may be gone: their table is rebuilt.
            link.producers.remove(tp);
            link.view.truncated(tp);
            link.appends.appended();
        }
    }

    /// At a clean shutdown: saves the producers' sequences as Kafka's
    /// producer snapshots and closes the partitions that are not mirrors
    /// (opened for producers or the group offsets sync).
    pub fn close_gateway(&mut self) {
        for (tp, open) in self.plain.drain() {
            if let Err(e) = open.close() {
                tracing::warn!(partition = %tp, error = %e, "closing a partition opened for producers");
            }
        }
        let Some(mut link) = self.gateway.take() else {
            return;
        };
        for (tp, producers) in link.producers.drain() {
            if let Some(Slot::Mirror(slot)) = self.slots.get_mut(&tp)
                && let Err(e) = save_producers(&mut slot.mirror.log, &producers)
            {
                tracing::warn!(partition = %tp, error = %e, "saving the producers' snapshot");
            }
        }
    }

    /// Performs one producer append and answers it.
    pub(crate) fn handle_append(&mut self, request: AppendRequest) {
        let AppendRequest {
            tp,
            mut batches,
            reply,
            create,
        } = request;
        let result = self.append_for_producer(&tp, &mut batches, create);
        if result.is_ok() {
            if self.slots.get(&tp).is_some_and(|s| s.mirror().is_some()) {
                self.changed.insert(tp.clone());
            }
            self.live.stale = true;
            self.tell_appended(&tp);
        }
        let _ = reply.send(result);
    }

    /// Appends `batches` as the leader to `tp`, a partition that is not a
    /// mirror (created when `create` and it may be).
    pub(crate) fn append_plain(
        &mut self,
        tp: &TopicPartition,
        batches: &mut [u8],
        create: bool,
    ) -> Result<Appended, AppendError> {
        let exists = self.logdir.root().join(tp.dir_name()).is_dir();
        let creatable = create && may_create(tp);
        if !exists && !creatable {
            return Err(AppendError::UnknownPartition(tp.clone()));
        }
        if !self.plain.contains_key(tp) {
            let log = if exists {
                self.open_plain(tp)
                    .map_err(|e| AppendError::Storage(e.to_string()))?
            } else {
                let id = offsets_topic_id(self.logdir.root())?;
                self.logdir
                    .open_or_create_partition(tp, Some(id), LogConfig::default())
                    .map_err(|e| AppendError::Storage(e.to_string()))?
            };
            self.plain
                .insert(tp.clone(), OpenForProducers::new(self.logdir.root(), log));
        }
        match self.plain.get_mut(tp) {
            Some(open) => append_as_leader(&mut open.log, batches, &mut open.producers),
            None => Err(AppendError::UnknownPartition(tp.clone())),
        }
    }

    fn append_for_producer(
        &mut self,
        tp: &TopicPartition,
        batches: &mut [u8],
        create: bool,
    ) -> Result<Appended, AppendError> {
        match self.slots.get_mut(tp) {
            Some(Slot::Mirror(slot)) => {
                if let Some(refused) = refusal(tp, Some(slot.state())) {
                    return Err(refused);
                }
                let Some(link) = self.gateway.as_mut() else {
                    return Err(AppendError::NoWriter(tp.to_string()));
                };
                let producers = link.producers.entry(tp.clone()).or_insert_with(|| {
                    ProducerTable::load(self.logdir.root(), tp).unwrap_or_default()
                });
                return append_as_leader(&mut slot.mirror.log, batches, producers);
            }
            Some(_) => {
                return Err(AppendError::ReadOnly {
                    tp: tp.clone(),
                    state: "not yet opened as a mirror".into(),
                });
            }
            None => {}
        }
        self.append_plain(tp, batches, create)
    }

    fn open_plain(&self, tp: &TopicPartition) -> kafkalog::Result<PartitionLog> {
        self.logdir.open_partition(tp, LogConfig::default())
    }
}
