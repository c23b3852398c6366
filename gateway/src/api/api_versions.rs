//! ApiVersions: exactly the APIs and versions in [`crate::versions`].
//!
//! A version the gateway does not know is answered as Kafka answers it: at
//! version 0, with UNSUPPORTED_VERSION and the supported list, so that the
//! client retries with a version both know.

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::Decodable;

use crate::context::Shared;
use crate::reply::{Reply, encode};
use crate::versions::{self, SUPPORTED};

pub(super) fn handle(shared: &Shared, header: &RequestHeader, body: &mut Bytes) -> Reply {
    let version = header.request_api_version;
    let sasl = shared.security.sasl.is_some();
    let keys: Vec<ApiVersion> = SUPPORTED
        .iter()
        .chain(if sasl { versions::SASL } else { &[] })
        .map(|s| {
            ApiVersion::default()
                .with_api_key(s.key as i16)
                .with_min_version(s.min)
                .with_max_version(s.max)
        })
        .collect();
    if !versions::is_supported(ApiKey::ApiVersions, version) {
        let response = ApiVersionsResponse::default()
            .with_error_code(ResponseError::UnsupportedVersion.code())
            .with_api_keys(keys);
        return encode(&response, 0);
    }
    // The body only names the client (v3+); a malformed one is still
    // answered, as Kafka does, since the client may not know our versions.
    let _ = ApiVersionsRequest::decode(body, version);
    encode(&ApiVersionsResponse::default().with_api_keys(keys), version)
}
