//! The source topic configs a shipper publishes with each manifest version
//! (`PartitionManifest::topic_configs`), from the broker's KRaft metadata
//! image and, when given, its static `server.properties`.
//!
//! Invariants:
//! - What is published is every effective value not at Kafka's default,
//!   with its source ([`manifest::topic_config`] resolves the layers);
//!   unfiltered: the destination decides what it copies.
//! - Nothing is published (`None`) for a topic the image does not know, or
//!   whose configs the image cannot trust (a record it could not read
//!   faithfully may have changed them): the destination keeps the last
//!   configs it had rather than take a guess.
//! - A value that does not parse (say `log.retention.hours=a week` in the
//!   static file) is an error naming the key; the caller publishes nothing
//!   for the topic and says why once.

use std::collections::BTreeMap;

use kraft::MetadataImage;
use manifest::topic_config::{
    ConfigLayers, ConfigSource, ConfigValue, ConfigValueError, resolve_all,
};

/// The configs to publish for `topic`, as seen by broker `node_id`.
pub(crate) fn source_configs(
    image: &MetadataImage,
    node_id: i32,
    static_props: &BTreeMap<String, String>,
    topic: &str,
) -> Result<Option<BTreeMap<String, ConfigValue>>, ConfigValueError> {
    if !image.topics.contains_key(topic) || image.configs_untrusted(topic).is_some() {
        return Ok(None);
    }
    let empty = BTreeMap::new();
    let layers = ConfigLayers {
        topic: image.topic_configs.get(topic).unwrap_or(&empty),
        broker: image
            .broker_configs
            .get(&node_id.to_string())
            .unwrap_or(&empty),
        cluster: &image.cluster_configs,
        static_props,
    };
    let mut all = resolve_all(&layers)?;
    all.retain(|_, v| v.source != ConfigSource::Default);
    Ok(Some(all))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::TopicId;
    use kraft::image::Topic;
    use kraft::records::Scope;

    fn image() -> MetadataImage {
        let mut image = MetadataImage::new();
        let topic = Topic {
            id: TopicId::from_bytes([7; 16]),
            partitions: BTreeMap::new(),
        };
        image.topics.insert("orders".into(), topic);
        image
    }

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn published(
        image: &MetadataImage,
        statics: &[(&str, &str)],
    ) -> Option<Vec<(String, String, ConfigSource)>> {
        source_configs(image, 1, &props(statics), "orders")
            .expect("valid")
            .map(|m| m.into_iter().map(|(k, v)| (k, v.value, v.source)).collect())
    }

    #[test]
    fn a_topic_at_kafkas_defaults_publishes_an_empty_set() {
        assert_eq!(published(&image(), &[]), Some(vec![]));
    }

    #[test]
    fn overrides_and_broker_layers_are_published_with_their_source() {
        let mut i = image();
        i.topic_configs
            .insert("orders".into(), props(&[("cleanup.policy", "compact")]));
        i.broker_configs
            .insert("1".into(), props(&[("message.max.bytes", "2000000")]));
        i.broker_configs
            .insert("2".into(), props(&[("log.retention.bytes", "5")]));
        i.cluster_configs = props(&[("log.segment.bytes", "1048576")]);
        assert_eq!(
            published(&i, &[("log.retention.hours", "24")]),
            Some(vec![
                (
                    "cleanup.policy".into(),
                    "compact".into(),
                    ConfigSource::Topic
                ),
                (
                    "max.message.bytes".into(),
                    "2000000".into(),
                    ConfigSource::DynamicBroker
                ),
                (
                    "retention.ms".into(),
                    "86400000".into(),
                    ConfigSource::StaticBroker
                ),
                (
                    "segment.bytes".into(),
                    "1048576".into(),
                    ConfigSource::DynamicClusterDefault
                ),
            ])
        );
    }

    #[test]
    fn an_unknown_topic_publishes_nothing() {
        assert_eq!(
            source_configs(&image(), 1, &BTreeMap::new(), "other").expect("valid"),
            None
        );
    }

    #[test]
    fn untrusted_configs_publish_nothing() {
        let mut i = image();
        i.mark_untrusted(42, Scope::All, "ConfigRecord v9");
        assert_eq!(published(&i, &[]), None);
    }

    #[test]
    fn a_bad_static_value_is_an_error_naming_it() {
        let e = source_configs(
            &image(),
            1,
            &props(&[("log.retention.hours", "a week")]),
            "orders",
        )
        .expect_err("bad value");
        assert_eq!(e.key, "log.retention.hours");
    }
}
