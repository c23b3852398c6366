//! DescribeConfigs v1-2 for topics: what the log dir knows.
//!
//! A mirror topic whose record holds the source's configs
//! (`MirrorRecord::topic_configs`, copied through the applier's filter;
//! partition 0's record, or the first partition's that has one) answers
//! with them, each with its source (`ConfigSource::kafka_code`), and with
//! Kafka's default (source DEFAULT_CONFIG, 5) for every key
//! [`KAFKA_DEFAULTS`] knows that the record does not hold. These are
//! read-only while any partition of the topic is a mirror that is not
//! STOPPED (the source decides them). With `include_synonyms` each carries
//! one synonym: itself for a topic override, else the broker config it
//! comes from (`log.retention.ms` for `retention.ms`: the value is in the
//! topic key's unit, whichever unit the source set). Where no record holds
//! configs (the source shipped none, or the topic is not a mirror) no Kafka
//! key is made up. Every mirror topic also shows its mirroring:
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
use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use manifest::topic_config::{ConfigSource, ConfigValue, KAFKA_DEFAULTS};

use crate::context::Shared;
use crate::reply::{Reply, encode};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
/// Kafka's `ConfigSource.DYNAMIC_TOPIC_CONFIG`.
const TOPIC_CONFIG: i8 = 1;

pub(super) fn describe(shared: &Shared, request: DescribeConfigsRequest, version: i16) -> Reply {
    let all = shared.view.partitions().unwrap_or_default();
    let synonyms = request.include_synonyms;
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
                    let mut topic_configs = None;
                    let mut read_only = false;
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
                            read_only |= !manifest::state::is_writable(r.state.state());
                            if topic_configs.is_none() {
                                topic_configs = r.topic_configs;
                            }
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
                    let mut configs = topic_configs
                        .map(|c| kafka_entries(&c, read_only, synonyms))
                        .unwrap_or_default();
                    configs.push(entry("segmirror.mirror.state", Some(state)));
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

/// The Kafka keys of a topic whose record holds `configs`: each held
/// value with its source, and Kafka's default of every other known key.
fn kafka_entries(
    configs: &BTreeMap<String, ConfigValue>,
    read_only: bool,
    synonyms: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let mut all = configs.clone();
    for (key, value) in KAFKA_DEFAULTS {
        all.entry((*key).to_string())
            .or_insert_with(|| ConfigValue {
                value: (*value).to_string(),
                source: ConfigSource::Default,
            });
    }
    all.into_iter()
        .map(|(name, v)| {
            let code = v.source.kafka_code();
            let synonym = (synonyms).then(|| {
                let from = match v.source {
                    ConfigSource::Topic => None,
                    _ => manifest::topic_config::broker_name(&name),
                };
                DescribeConfigsSynonym::default()
                    .with_name(StrBytes::from_string(
                        from.map_or(name.clone(), String::from),
                    ))
                    .with_value(Some(StrBytes::from_string(v.value.clone())))
                    .with_source(code)
            });
            DescribeConfigsResourceResult::default()
                .with_name(StrBytes::from_string(name))
                .with_value(Some(StrBytes::from_string(v.value)))
                .with_read_only(read_only)
                .with_config_source(code)
                .with_synonyms(synonym.into_iter().collect())
        })
        .collect()
}

fn entry(name: &'static str, value: Option<String>) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_static_str(name))
        .with_value(value.map(StrBytes::from_string))
        .with_read_only(true)
        .with_config_source(TOPIC_CONFIG)
}
