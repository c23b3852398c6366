//! One module per Kafka API; [`dispatch`] checks the version, decodes the
//! request with the `kafka-protocol` codecs and calls the handler.

mod api_versions;
mod fetch;
mod metadata;
mod offsets;
mod produce;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::server::{Reply, Shared};
use crate::versions;
use crate::view::{PartitionInfo, ViewError};
use kafka_protocol::ResponseError;
use kafkalog::TopicPartition;

/// Answers one request.
pub(crate) async fn dispatch(
    shared: &Shared,
    key: ApiKey,
    header: &RequestHeader,
    mut body: Bytes,
) -> Reply {
    let version = header.request_api_version;
    if key == ApiKey::ApiVersions {
        return api_versions::handle(header, &mut body);
    }
    if !versions::is_supported(key, version) {
        return Reply::Close(format!("{key:?} v{version} is not supported"));
    }
    macro_rules! decoded {
        ($t:ty) => {
            match <$t>::decode(&mut body, version) {
                Ok(r) => r,
                Err(e) => return Reply::Close(format!("malformed request: {e}")),
            }
        };
    }
    use kafka_protocol::messages as m;
    match key {
        ApiKey::Metadata => metadata::handle(shared, decoded!(m::MetadataRequest), version),
        ApiKey::ListOffsets => offsets::list(shared, decoded!(m::ListOffsetsRequest), version),
        ApiKey::OffsetForLeaderEpoch => {
            offsets::for_leader_epoch(shared, decoded!(m::OffsetForLeaderEpochRequest), version)
        }
        ApiKey::Fetch => fetch::handle(shared, decoded!(m::FetchRequest), version).await,
        ApiKey::Produce => produce::handle(shared, decoded!(m::ProduceRequest), version).await,
        other => Reply::Close(format!("{other:?} is not implemented")),
    }
}

/// A topic-partition named by a request, or the error code for a name
/// that cannot be one.
fn topic_partition(topic: &StrBytes, partition: i32) -> Result<TopicPartition, i16> {
    TopicPartition::new(topic.as_str(), partition)
        .map_err(|_| ResponseError::UnknownTopicOrPartition.code())
}

/// The Kafka error code for a partition that cannot be served.
fn view_error_code(e: &ViewError) -> i16 {
    match e {
        ViewError::UnknownPartition(_) => ResponseError::UnknownTopicOrPartition.code(),
        ViewError::Log(_) | ViewError::Record(_) => {
            tracing::warn!(error = %e, "serving a partition");
            ResponseError::KafkaStorageError.code()
        }
    }
}

/// KIP-320: the request's `current_leader_epoch` against the partition's
/// epoch (-1: no check).
fn leader_epoch_error(info: &PartitionInfo, current_leader_epoch: i32) -> Option<i16> {
    if current_leader_epoch < 0 || current_leader_epoch == info.leader_epoch {
        None
    } else if current_leader_epoch < info.leader_epoch {
        Some(ResponseError::FencedLeaderEpoch.code())
    } else {
        Some(ResponseError::UnknownLeaderEpoch.code())
    }
}
