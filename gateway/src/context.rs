//! What every connection of a gateway shares: how it presents itself
//! ([`GatewayConfig`]) and what requests are answered from ([`Shared`]:
//! the log view, the writer, the group coordinator, producer ids, TLS and
//! SASL). The listener ([`crate::server`]) builds it once; the request path
//! ([`crate::request`], the API handlers) reads it. It sits below both, so
//! the handlers do not depend on the listener that calls them.

use std::sync::Arc;

use crate::view::LogView;
use crate::writer::{AppendSender, Appends};

/// How the gateway presents itself.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// This node's id (leader of every partition, coordinator, controller).
    pub node_id: i32,
    /// The host and port clients are told to connect to.
    pub advertised_host: String,
    /// See `advertised_host`.
    pub advertised_port: u16,
    /// The cluster id reported in Metadata.
    pub cluster_id: String,
    /// Largest request accepted, in bytes.
    pub max_request_bytes: usize,
}

/// Kafka's default `socket.request.max.bytes`: 100 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 100 << 20;

/// What every connection shares.
#[derive(Debug)]
pub struct Shared {
    /// The configuration.
    pub config: GatewayConfig,
    /// The log dir.
    pub view: Arc<LogView>,
    /// Where producers' appends go (`None`: served read-only).
    pub writer: Option<AppendSender>,
    /// Woken after each append.
    pub appends: Arc<Appends>,
    /// The consumer group coordinator.
    pub groups: Arc<crate::groups::Coordinator>,
    /// InitProducerId's ids.
    pub producer_ids: crate::producer_ids::ProducerIds,
    /// TLS and SASL, when configured.
    pub security: crate::security::Security,
}
