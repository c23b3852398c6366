//! Fetch: whole batches from the segment files, as they are on disk,
//! located from their headers and sent from the files to the socket
//! ([`crate::splice`]).
//!
//! - Sessionless: the response's session id is 0 (KIP-227 allows declining).
//! - Long polling: a fetch with less than `min_bytes` ready waits up to
//!   `max_wait_ms`, woken by every append ([`crate::writer::Appends`]) and
//!   at least every [`RECHECK`] (an append by another process).
//! - Sizes: the first partition with data gets at least one whole batch
//!   even above `partition_max_bytes`/`max_bytes` (KIP-74), the others stop
//!   at both limits.
//! - read_committed reads up to the last stable offset, with the aborted
//!   transactions of the returned range from `.txnindex`; read_uncommitted
//!   reads up to the high watermark (the log end) with a null list.
//! - v12 `last_fetched_epoch` that diverges from the local lineage (after a
//!   failback truncation) is answered with `diverging_epoch` and no records.

use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId};
use tokio::time::Instant;

use super::{leader_epoch_error, topic_partition, view_error_code};
use crate::context::Shared;
use crate::reply::Reply;
use crate::splice::Splicer;

/// How often a waiting fetch looks again without being woken.
const RECHECK: Duration = Duration::from_millis(200);
/// Longest wait honoured (Kafka clients ask for 500 ms by default).
const MAX_WAIT: Duration = Duration::from_secs(30);
/// Most record bytes in one response, whatever the client asks: Kafka's
/// default `fetch.max.bytes` (55 MiB), so a response's memory is bounded
/// (the first batch may still exceed it, KIP-74).
const MAX_FETCH_BYTES: usize = 57_671_680;

pub(super) async fn handle(shared: &Shared, request: FetchRequest, version: i16) -> Reply {
    let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let deadline = Instant::now() + wait;
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    loop {
        // Armed before reading, so an append between the read and the wait
        // is not missed.
        let woken = shared.appends.notified();
        let (response, splicer, bytes, failed) = read_once(shared, &request, version);
        let now = Instant::now();
        if bytes >= min_bytes.max(1) || failed || now >= deadline {
            return match splicer.encode(&response, version, version >= 12) {
                Ok(body) => Reply::Spliced(body),
                Err(why) => Reply::Close(why),
            };
        }
        let until = deadline.min(now + RECHECK);
        let _ = tokio::time::timeout_at(until, woken).await;
    }
}

/// One pass over the requested partitions: the response (its records
/// placeholders of the splicer's spans), its record bytes, and whether a
/// partition had an error (answered at once).
fn read_once(
    shared: &Shared,
    request: &FetchRequest,
    version: i16,
) -> (FetchResponse, Splicer, usize, bool) {
    let mut splicer = Splicer::default();
    let read_committed = request.isolation_level == 1;
    let mut budget = usize::try_from(request.max_bytes)
        .unwrap_or(0)
        .min(MAX_FETCH_BYTES);
    let mut total = 0usize;
    let mut failed = false;
    let mut topics = Vec::new();
    for topic in &request.topics {
        let mut partitions = Vec::new();
        for p in &topic.partitions {
            let row = PartitionData::default()
                .with_partition_index(p.partition)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1);
            let tp = match topic_partition(&topic.topic.0, p.partition) {
                Ok(tp) => tp,
                Err(code) => {
                    failed = true;
                    partitions.push(row.with_error_code(code));
                    continue;
                }
            };
            let info = match shared.view.info(&tp) {
                Ok(info) => info,
                Err(e) => {
                    failed = true;
                    partitions.push(row.with_error_code(view_error_code(&e)));
                    continue;
                }
            };
            let row = row
                .with_high_watermark(info.log_end_offset)
                .with_last_stable_offset(info.last_stable_offset)
                .with_log_start_offset(info.log_start_offset);
            if let Some(code) = leader_epoch_error(&info, p.current_leader_epoch) {
                failed = true;
                partitions.push(row.with_error_code(code));
                continue;
            }
            if p.fetch_offset < info.log_start_offset || p.fetch_offset > info.log_end_offset {
                failed = true;
                partitions.push(row.with_error_code(ResponseError::OffsetOutOfRange.code()));
                continue;
            }
            if version >= 12 && p.last_fetched_epoch >= 0 {
                let lineage = shared.view.lineage_of(&tp).unwrap_or_default();
                if let Some((epoch, end)) =
                    lineage.end_offset_for(p.last_fetched_epoch, info.log_end_offset)
                    && (end < p.fetch_offset || epoch < p.last_fetched_epoch)
                {
                    failed = true;
                    partitions.push(
                        row.with_diverging_epoch(
                            EpochEndOffset::default()
                                .with_epoch(epoch)
                                .with_end_offset(end),
                        ),
                    );
                    continue;
                }
            }
            let upper = if read_committed {
                info.last_stable_offset
            } else {
                info.log_end_offset
            };
            let limit = usize::try_from(p.partition_max_bytes)
                .unwrap_or(0)
                .min(budget);
            let located = match shared
                .view
                .locate(&tp, p.fetch_offset, upper, limit, total == 0)
            {
                Ok(f) => f,
                Err(e) => {
                    failed = true;
                    partitions.push(row.with_error_code(view_error_code(&e)));
                    continue;
                }
            };
            let size = usize::try_from(located.bytes).unwrap_or(usize::MAX);
            total += size;
            budget = budget.saturating_sub(size);
            let aborted = if read_committed {
                match shared
                    .view
                    .aborted(&tp, p.fetch_offset, located.next_offset)
                {
                    Ok(list) => Some(
                        list.into_iter()
                            .map(|t| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(t.producer_id))
                                    .with_first_offset(t.first_offset)
                            })
                            .collect(),
                    ),
                    Err(e) => {
                        failed = true;
                        partitions.push(row.with_error_code(view_error_code(&e)));
                        continue;
                    }
                }
            } else {
                None
            };
            partitions.push(
                row.with_aborted_transactions(aborted)
                    .with_records(Some(splicer.placeholder(located.spans))),
            );
        }
        topics.push(
            FetchableTopicResponse::default()
                .with_topic(topic.topic.clone())
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions),
        );
    }
    (
        FetchResponse::default()
            .with_session_id(0)
            .with_responses(topics),
        splicer,
        total,
        failed,
    )
}
