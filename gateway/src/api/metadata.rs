//! Metadata: one broker (this node) leads every partition of the log dir, at
//! the partition's latest leader epoch, with itself as the only replica.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::view_error_code;
use crate::context::Shared;
use crate::reply::{Reply, encode};

pub(super) fn handle(shared: &Shared, request: MetadataRequest, version: i16) -> Reply {
    let node = BrokerId(shared.config.node_id);
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    match shared.view.partitions() {
        Ok(all) => {
            for tp in all {
                by_topic
                    .entry(tp.topic.clone())
                    .or_default()
                    .push(tp.partition);
            }
        }
        Err(e) => tracing::warn!(error = %e, "listing the log dir's partitions"),
    }
    // v0: an empty list means every topic; v1+: null does.
    let wanted: Vec<String> = match &request.topics {
        Some(list) if !(version == 0 && list.is_empty()) => list
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str().to_string()))
            .collect(),
        _ => by_topic.keys().cloned().collect(),
    };
    let mut topics = Vec::new();
    for name in wanted {
        let Some(partitions) = by_topic.get(&name) else {
            topics.push(
                MetadataResponseTopic::default()
                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_name(Some(TopicName(StrBytes::from_string(name)))),
            );
            continue;
        };
        let mut topic_id = None;
        let mut rows = Vec::new();
        for &p in partitions {
            let Ok(tp) = kafkalog::TopicPartition::new(&name, p) else {
                continue;
            };
            let row = MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(node)
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node]);
            rows.push(match shared.view.info(&tp) {
                Ok(info) => {
                    topic_id = topic_id.or(info.topic_id);
                    row.with_leader_epoch(info.leader_epoch)
                }
                Err(e) => row
                    .with_error_code(view_error_code(&e))
                    .with_leader_epoch(-1),
            });
        }
        topics.push(
            MetadataResponseTopic::default()
                .with_is_internal(name.starts_with("__"))
                .with_topic_id(topic_id.map_or(uuid::Uuid::nil(), |id| {
                    uuid::Uuid::from_bytes(*id.as_bytes())
                }))
                .with_name(Some(TopicName(StrBytes::from_string(name))))
                .with_partitions(rows),
        );
    }
    let response = MetadataResponse::default()
        .with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(node)
                .with_host(StrBytes::from_string(shared.config.advertised_host.clone()))
                .with_port(i32::from(shared.config.advertised_port)),
        ])
        .with_cluster_id(Some(StrBytes::from_string(
            shared.config.cluster_id.clone(),
        )))
        .with_controller_id(node)
        .with_topics(topics);
    encode(&response, version)
}

/// DescribeCluster v0-1 (admin clients): this node is the cluster and its
/// controller.
pub(super) fn describe_cluster(
    shared: &Shared,
    _request: kafka_protocol::messages::DescribeClusterRequest,
    version: i16,
) -> Reply {
    use kafka_protocol::messages::DescribeClusterResponse;
    use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
    let node = BrokerId(shared.config.node_id);
    let response = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(shared.config.cluster_id.clone()))
        .with_controller_id(node)
        .with_brokers(vec![
            DescribeClusterBroker::default()
                .with_broker_id(node)
                .with_host(StrBytes::from_string(shared.config.advertised_host.clone()))
                .with_port(i32::from(shared.config.advertised_port)),
        ]);
    encode(&response, version)
}
