//! ListOffsets (earliest, latest, by timestamp through the time index) and
//! OffsetForLeaderEpoch (through the partition's epoch lineage, so clients
//! detect a truncation after a failback).

use kafka_protocol::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};

use super::{leader_epoch_error, topic_partition, view_error_code};
use crate::context::Shared;
use crate::reply::{Reply, encode};

/// Kafka's special ListOffsets timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;

pub(super) fn list(shared: &Shared, request: ListOffsetsRequest, version: i16) -> Reply {
    let read_committed = request.isolation_level == 1;
    let mut topics = Vec::new();
    for topic in request.topics {
        let mut partitions = Vec::new();
        for p in topic.partitions {
            let row = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_timestamp(-1)
                .with_offset(-1)
                .with_leader_epoch(-1);
            let tp = match topic_partition(&topic.name.0, p.partition_index) {
                Ok(tp) => tp,
                Err(code) => {
                    partitions.push(row.with_error_code(code));
                    continue;
                }
            };
            let info = match shared.view.info(&tp) {
                Ok(info) => info,
                Err(e) => {
                    partitions.push(row.with_error_code(view_error_code(&e)));
                    continue;
                }
            };
            if let Some(code) = leader_epoch_error(&info, p.current_leader_epoch) {
                partitions.push(row.with_error_code(code));
                continue;
            }
            let lineage = shared.view.lineage_of(&tp).unwrap_or_default();
            let epoch_at = |offset: i64| lineage.epoch_for_offset(offset).unwrap_or(-1);
            let found = match p.timestamp {
                LATEST => {
                    let end = if read_committed {
                        info.last_stable_offset
                    } else {
                        info.log_end_offset
                    };
                    Ok(Some((end, -1, info.leader_epoch)))
                }
                EARLIEST => Ok(Some((
                    info.log_start_offset,
                    -1,
                    epoch_at(info.log_start_offset),
                ))),
                MAX_TIMESTAMP => Err(ResponseError::UnsupportedVersion.code()),
                ts if ts < 0 => Err(ResponseError::InvalidRequest.code()),
                ts => match shared.view.offset_for_timestamp(&tp, ts) {
                    Ok(Some((offset, at))) => Ok(Some((offset, at, epoch_at(offset)))),
                    Ok(None) => Ok(None),
                    Err(e) => Err(view_error_code(&e)),
                },
            };
            partitions.push(match found {
                // The epoch is a v4+ field.
                Ok(Some((offset, ts, epoch))) => row
                    .with_offset(offset)
                    .with_timestamp(ts)
                    .with_leader_epoch(if version >= 4 { epoch } else { -1 }),
                Ok(None) => row,
                Err(code) => row.with_error_code(code),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    encode(&ListOffsetsResponse::default().with_topics(topics), version)
}

pub(super) fn for_leader_epoch(
    shared: &Shared,
    request: OffsetForLeaderEpochRequest,
    version: i16,
) -> Reply {
    let mut topics = Vec::new();
    for topic in request.topics {
        let mut partitions = Vec::new();
        for p in topic.partitions {
            let row = EpochEndOffset::default()
                .with_partition(p.partition)
                .with_leader_epoch(-1)
                .with_end_offset(-1);
            let tp = match topic_partition(&topic.topic.0, p.partition) {
                Ok(tp) => tp,
                Err(code) => {
                    partitions.push(row.with_error_code(code));
                    continue;
                }
            };
            let answer = shared.view.info(&tp).and_then(|info| {
                let lineage = shared.view.lineage_of(&tp)?;
                Ok((info, lineage))
            });
            partitions.push(match answer {
                Err(e) => row.with_error_code(view_error_code(&e)),
                Ok((info, lineage)) => match leader_epoch_error(&info, p.current_leader_epoch) {
                    Some(code) => row.with_error_code(code),
                    None => match lineage.end_offset_for(p.leader_epoch, info.log_end_offset) {
                        Some((epoch, end)) => row.with_leader_epoch(epoch).with_end_offset(end),
                        None => row,
                    },
                },
            });
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions),
        );
    }
    encode(
        &OffsetForLeaderEpochResponse::default().with_topics(topics),
        version,
    )
}
