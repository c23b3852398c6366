//! DescribeConfigs v1-2 for topics: what the log dir knows. Kafka keeps
//! topic configs in the cluster's metadata, which a mirror does not have,
//! so no Kafka key is made up; a mirror topic shows its mirroring:
//!
//! - `segmirror.mirror.state`: the partitions' mirror state (one state when
//!   they agree, `partition:STATE,...` otherwise; `none` for a topic that
//!   is not a mirror);
//! - `segmirror.mirror.source.cluster.id`: the source each partition is
//!   pinned to (when they agree).
//!
//! Both are read-only. A broker resource (this node) has no configs to
//! show; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::context::Shared;
use crate::reply::{Reply, encode};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
/// Kafka's `ConfigSource.DYNAMIC_TOPIC_CONFIG`.
const TOPIC_CONFIG: i8 = 1;

pub(super) fn describe(shared: &Shared, request: DescribeConfigsRequest, version: i16) -> Reply {
    let all = shared.view.partitions().unwrap_or_default();
    let results = request
        .resources
        .into_iter()
        .map(|r| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            match r.resource_type {
                TOPIC => {
                    let name = r.resource_name.as_str();
                    let partitions: Vec<_> = all.iter().filter(|tp| tp.topic == name).collect();
                    if partitions.is_empty() {
                        return result
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    }
                    let mut states = Vec::new();
                    let mut sources = Vec::new();
                    for tp in partitions {
                        let record = partdir::record::read(&shared.view.root().join(tp.dir_name()))
                            .ok()
                            .flatten();
                        states.push((
                            tp.partition,
                            record.as_ref().map_or("none".to_string(), |r| {
                                r.state.state().as_str().to_string()
                            }),
                        ));
                        if let Some(r) = record {
                            sources.push(r.source_cluster_id);
                        }
                    }
                    let state = if states.iter().all(|(_, s)| *s == states[0].1) {
                        states[0].1.clone()
                    } else {
                        states
                            .iter()
                            .map(|(p, s)| format!("{p}:{s}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    };
                    sources.sort();
                    sources.dedup();
                    let mut configs = vec![entry("segmirror.mirror.state", Some(state))];
                    if sources.len() == 1 {
                        configs.push(entry("segmirror.mirror.source.cluster.id", sources.pop()));
                    }
                    if let Some(keys) = &r.configuration_keys {
                        configs.retain(|c| keys.contains(&c.name));
                    }
                    result.with_configs(configs)
                }
                BROKER if r.resource_name.as_str() == shared.config.node_id.to_string() => result,
                _ => result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(StrBytes::from_static_str(
                        "the segmirror gateway describes topics and its own broker only",
                    ))),
            }
        })
        .collect();
    encode(
        &DescribeConfigsResponse::default().with_results(results),
        version,
    )
}

fn entry(name: &'static str, value: Option<String>) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_static_str(name))
        .with_value(value.map(StrBytes::from_string))
        .with_read_only(true)
        .with_config_source(TOPIC_CONFIG)
}
