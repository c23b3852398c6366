//! One module per Kafka API; [`dispatch`] checks the version, decodes the
//! request with the `kafka-protocol` codecs and calls the handler.

mod api_versions;
mod configs;
mod fetch;
mod groups;
mod metadata;
mod offsets;
mod produce;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::context::Shared;
use crate::reply::Reply;
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
    peer: std::net::SocketAddr,
) -> Reply {
    let version = header.request_api_version;
    if key == ApiKey::ApiVersions {
        return api_versions::handle(shared, header, &mut body);
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
        ApiKey::DescribeConfigs => {
            configs::describe(shared, decoded!(m::DescribeConfigsRequest), version)
        }
        ApiKey::DescribeCluster => {
            metadata::describe_cluster(shared, decoded!(m::DescribeClusterRequest), version)
        }
        ApiKey::ListOffsets => offsets::list(shared, decoded!(m::ListOffsetsRequest), version),
        ApiKey::OffsetForLeaderEpoch => {
            offsets::for_leader_epoch(shared, decoded!(m::OffsetForLeaderEpochRequest), version)
        }
        ApiKey::Fetch => fetch::handle(shared, decoded!(m::FetchRequest), version).await,
        ApiKey::Produce => produce::handle(shared, decoded!(m::ProduceRequest), version).await,
        ApiKey::InitProducerId => {
            produce::init_producer_id(shared, decoded!(m::InitProducerIdRequest), version)
        }
        ApiKey::FindCoordinator => {
            groups::find_coordinator(shared, decoded!(m::FindCoordinatorRequest), version)
        }
        ApiKey::JoinGroup => {
            let client_id = header.client_id.as_ref().map_or("", |c| c.as_str());
            let host = format!("/{}", peer.ip());
            groups::join(
                shared,
                decoded!(m::JoinGroupRequest),
                version,
                client_id,
                &host,
            )
            .await
        }
        ApiKey::SyncGroup => groups::sync(shared, decoded!(m::SyncGroupRequest), version).await,
        ApiKey::Heartbeat => groups::heartbeat(shared, decoded!(m::HeartbeatRequest), version),
        ApiKey::LeaveGroup => groups::leave(shared, decoded!(m::LeaveGroupRequest), version),
        ApiKey::OffsetCommit => {
            groups::commit(shared, decoded!(m::OffsetCommitRequest), version).await
        }
        ApiKey::OffsetFetch => groups::fetch(shared, decoded!(m::OffsetFetchRequest), version),
        ApiKey::ListGroups => groups::list(shared, decoded!(m::ListGroupsRequest), version),
        ApiKey::DescribeGroups => {
            groups::describe(shared, decoded!(m::DescribeGroupsRequest), version)
        }
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
