//! The API versions the gateway implements, and so advertises in
//! ApiVersions: exactly these, no more (a client picks the highest version
//! both sides know, so advertising an API promises to answer it).
//!
//! The ranges cover what current clients send (kcat/librdkafka 2.x,
//! confluent-kafka, kafka-python 2.x and 3.x, aiokafka; measured in
//! `docs/kafka-gateway.md`). Fetch stops at 12: from 13 on, fetches name
//! topics by id only.

use kafka_protocol::messages::ApiKey;

/// One implemented API and its version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supported {
    /// The API.
    pub key: ApiKey,
    /// Lowest version answered.
    pub min: i16,
    /// Highest version answered.
    pub max: i16,
}

const fn api(key: ApiKey, min: i16, max: i16) -> Supported {
    Supported { key, min, max }
}

/// Every API the gateway answers.
pub const SUPPORTED: &[Supported] = &[
    api(ApiKey::Produce, 3, 8),
    api(ApiKey::Fetch, 4, 12),
    api(ApiKey::ListOffsets, 1, 7),
    api(ApiKey::Metadata, 0, 12),
    api(ApiKey::ApiVersions, 0, 4),
    api(ApiKey::OffsetForLeaderEpoch, 2, 4),
    api(ApiKey::FindCoordinator, 0, 3),
    api(ApiKey::JoinGroup, 0, 5),
    api(ApiKey::SyncGroup, 0, 3),
    api(ApiKey::Heartbeat, 0, 3),
    api(ApiKey::LeaveGroup, 0, 1),
    api(ApiKey::OffsetCommit, 2, 7),
    api(ApiKey::OffsetFetch, 1, 7),
    api(ApiKey::ListGroups, 0, 4),
    api(ApiKey::DescribeGroups, 0, 5),
    api(ApiKey::InitProducerId, 0, 4),
    api(ApiKey::DescribeCluster, 0, 1),
    api(ApiKey::DescribeConfigs, 1, 2),
];

/// Advertised too when the listener requires SASL. SaslHandshake v0 is
/// listed because librdkafka looks for it before it uses SaslHandshake v1
/// with SaslAuthenticate; a client that follows a v0 handshake with raw
/// (unframed) tokens is disconnected.
pub const SASL: &[Supported] = &[
    api(ApiKey::SaslHandshake, 0, 1),
    api(ApiKey::SaslAuthenticate, 0, 2),
];

/// The range of `key`, if the gateway answers it.
pub fn supported(key: ApiKey) -> Option<Supported> {
    SUPPORTED.iter().copied().find(|s| s.key == key)
}

/// Whether `version` of `key` is answered.
pub fn is_supported(key: ApiKey, version: i16) -> bool {
    supported(key).is_some_and(|s| (s.min..=s.max).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_is_one_the_codec_decodes() {
        for s in SUPPORTED.iter().chain(SASL) {
            let codec = s.key.valid_versions();
            assert!(
                codec.min <= s.min && s.max <= codec.max && s.min <= s.max,
                "{:?} {}..={} outside the codec's {}..={}",
                s.key,
                s.min,
                s.max,
                codec.min,
                codec.max
            );
        }
    }

    #[test]
    fn versions_outside_the_ranges_are_not_supported() {
        assert!(is_supported(ApiKey::Fetch, 12));
        assert!(!is_supported(ApiKey::Fetch, 13));
        assert!(!is_supported(ApiKey::Fetch, 3));
        assert!(!is_supported(ApiKey::CreateTopics, 0));
    }
}
