//! The applier as the log dir's single writer for a gateway in the same
//! process: producers' appends, readers told of appends and truncations,
//! and the consumer-group offsets sync.

#![allow(clippy::result_large_err)]

use kafkalog::TopicPartition;

use crate::options::CycleReport;
use crate::slot::Slot;

use super::Applier;

impl Applier {
    /// The group offsets sync.
    pub fn group_sync(&self) -> &crate::group_sync::GroupOffsetsSync {
        &self.group_sync
    }

    /// One pass of the group offsets sync (`crate::group_sync`), writing
    /// through the log dir's single writer.
    pub(super) async fn sync_groups(&mut self, report: &CycleReport) {
        let Some(store) = self.bucket.store().cloned() else {
            return;
        };
        let pointer = self.bucket.head().and_then(|h| h.groups);
        let Applier {
            opts,
            logdir,
            slots,
            gateway,
            producer_logs,
            group_sync,
            ..
        } = self;
        let mut write = |tp: &TopicPartition, batch: &mut [u8]| -> Result<(), String> {
            producer_logs
                .append(logdir, tp, batch, true)
                .map_err(|e| e.to_string())?;
            if let Ok(open) = producer_logs.open(logdir, tp, false) {
                open.log.flush().map_err(|e| e.to_string())?;
            }
            if let Some(link) = gateway.as_ref() {
                link.appended(tp);
            }
            Ok(())
        };
        let changed = group_sync
            .pass(crate::group_sync::Pass {
                store: &store,
                pointer,
                source_cluster: &opts.source_cluster_id,
                log_dir: logdir.root(),
                slots,
                gateway_groups: gateway.as_ref().map(|l| std::sync::Arc::clone(&l.groups)),
                moved: report.batches > 0 || report.transitions > 0,
                write: &mut write,
            })
            .await;
        self.live.stale |= changed;
    }

    /// Serves producers' appends from a gateway, and tells it of changes.
    pub fn set_gateway(&mut self, link: crate::serving::GatewayLink) {
        self.gateway = Some(link);
    }

    /// The applier appended to `tp`: wakes the fetches waiting for data.
    pub(crate) fn tell_appended(&self, tp: &TopicPartition) {
        if let Some(link) = &self.gateway {
            link.appended(tp);
        }
    }

    /// The applier cut or rewrote `tp`'s files.
    pub(crate) fn tell_truncated(&mut self, tp: &TopicPartition) {
        if let Some(link) = &mut self.gateway {
            link.truncated(tp);
        }
    }

    /// At a clean shutdown: saves the producers' sequences as Kafka's
    /// producer snapshots and closes the partitions that are not mirrors
    /// (opened for producers or the group offsets sync).
    pub fn close_gateway(&mut self) {
        self.producer_logs.close_all();
        if let Some(mut link) = self.gateway.take() {
            link.save_producers(&mut self.slots);
        }
    }

    /// Performs one producer append and answers it: a mirror partition
    /// through the gateway link (STOPPED only), any other through the
    /// shared writer.
    pub(crate) fn handle_append(&mut self, request: gateway::AppendRequest) {
        use gateway::writer::AppendError;
        let gateway::AppendRequest {
            tp,
            mut batches,
            reply,
            create,
        } = request;
        let root = self.logdir.root().to_path_buf();
        let result = match (self.slots.get_mut(&tp), self.gateway.as_mut()) {
            (Some(Slot::Mirror(slot)), Some(link)) => {
                link.append_to_stopped(&root, slot, &mut batches)
            }
            (Some(Slot::Mirror(_)), None) => Err(AppendError::NoWriter(tp.to_string())),
            (Some(_), _) => Err(AppendError::ReadOnly {
                tp: tp.clone(),
                state: "not yet opened as a mirror".into(),
            }),
            (None, _) => self
                .producer_logs
                .append(&self.logdir, &tp, &mut batches, create),
        };
        if result.is_ok() {
            if self.slots.get(&tp).is_some_and(|s| s.mirror().is_some()) {
                self.changed.insert(tp.clone());
            }
            self.live.stale = true;
            self.tell_appended(&tp);
        }
        let _ = reply.send(result);
    }
}
