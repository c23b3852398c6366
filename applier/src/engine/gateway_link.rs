//! The applier as the log dir's single writer for a gateway in the same
//! process: producers' appends ([`handle_append`]) and the consumer-group
//! offsets sync ([`sync_groups`]), both writing partitions that are not
//! mirrors through the shared `gateway::writer::PlainLogs`.
//!
//! Functions over the parts they are given, never over the applier itself.

#![allow(clippy::result_large_err)]

use kafkalog::{LogDir, TopicPartition};

use crate::bucket_reader::BucketReader;
use crate::serving::{GatewayLink, LocalWriter};
use crate::slot::Slot;
use crate::table::MirrorTable;

/// Performs one producer append and answers it: a mirror partition through
/// the gateway link (STOPPED only), any other through the shared writer.
pub(super) fn handle_append(
    request: gateway::AppendRequest,
    logdir: &LogDir,
    table: &mut MirrorTable,
    writer: &mut LocalWriter,
) {
    use gateway::writer::AppendError;
    let gateway::AppendRequest {
        tp,
        mut batches,
        reply,
        create,
    } = request;
    let result = match (table.slots.get_mut(&tp), writer.link.as_mut()) {
        (Some(Slot::Mirror(slot)), Some(link)) => {
            link.append_to_stopped(logdir.root(), slot, &mut batches)
        }
        (Some(Slot::Mirror(_)), None) => Err(AppendError::NoWriter(tp.to_string())),
        (Some(_), _) => Err(AppendError::ReadOnly {
            tp: tp.clone(),
            state: "not yet opened as a mirror".into(),
        }),
        (None, _) => writer.plain.append(logdir, &tp, &mut batches, create),
    };
    if result.is_ok() {
        if table.mirror(&tp).is_some() {
            table.changed.insert(tp.clone());
        }
        table.stale = true;
        if let Some(link) = writer.link.as_ref() {
            link.appended(&tp);
        }
    }
    let _ = reply.send(result);
}

/// One pass of the group offsets sync (`crate::group_sync`), writing
/// through the log dir's single writer. `moved`: the cycle applied or
/// changed something. Returns true when it changed something `status`
/// shows.
pub(super) async fn sync_groups(
    group_sync: &mut crate::group_sync::GroupOffsetsSync,
    bucket: &BucketReader,
    logdir: &LogDir,
    table: &MirrorTable,
    writer: &mut LocalWriter,
    source_cluster: &str,
    moved: bool,
) -> bool {
    let Some(store) = bucket.store().cloned() else {
        return false;
    };
    let pointer = bucket.head().and_then(|h| h.groups);
    let LocalWriter {
        plain: producer_logs,
        link,
    } = writer;
    let link: &Option<GatewayLink> = link;
    let mut write = |tp: &TopicPartition, batch: &mut [u8]| -> Result<(), String> {
        producer_logs
            .append(logdir, tp, batch, true)
            .map_err(|e| e.to_string())?;
        if let Ok(open) = producer_logs.open(logdir, tp, false) {
            open.log.flush().map_err(|e| e.to_string())?;
        }
        if let Some(link) = link.as_ref() {
            link.appended(tp);
        }
        Ok(())
    };
    group_sync
        .pass(crate::group_sync::Pass {
            store: &store,
            pointer,
            source_cluster,
            log_dir: logdir.root(),
            slots: &table.slots,
            gateway_groups: link.as_ref().map(|l| std::sync::Arc::clone(&l.groups)),
            moved,
            write: &mut write,
        })
        .await
}
