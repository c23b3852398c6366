//! A Kafka-protocol server over a segmirror destination log dir.
//!
//! Stock Kafka clients (librdkafka/kcat, confluent-kafka, kafka-python,
//! aiokafka) consume the mirror with the same offsets, epochs and bytes as
//! the source; producers are refused on a mirror partition until it is
//! STOPPED (failover), then written by the log dir's single writer. Every
//! request and response goes through the `kafka-protocol` crate's codecs.
//!
//! - [`server`]: the listener, framing and shutdown.
//! - [`context`]: what every connection shares (configuration, view,
//!   writer, coordinator, security); `reply`: a handler's answer and its
//!   encoding. Both sit below the listener, the request path and the
//!   handlers, so the modules form no cycle.
//! - [`api`]: one module per Kafka API.
//! - [`request`]: one frame from its bytes to its reply (what the listener
//!   and the fuzz target share).
//! - [`view`]: what is served, read from the segment files; `splice`: a
//!   fetch response whose records go from the files to the socket.
//! - [`writer`]: producers' appends, performed by the single writer.
//! - [`versions`]: the API versions implemented and advertised.
//! - [`groups`]: the consumer group coordinator and `__consumer_offsets`.
//! - [`limits`]: the listener's limits (connections, bytes, timeouts).
//!
//! See `docs/kafka-gateway.md` for what each client was measured to do.

mod api;
pub mod context;
pub mod groups;
pub mod idempotence;
pub mod limits;
pub mod produced;
pub mod producer_ids;
mod reply;
pub mod request;
pub mod sasl;
pub mod security;
pub mod server;
mod splice;
pub mod versions;
pub mod view;
pub mod writer;

pub use context::{DEFAULT_MAX_REQUEST_BYTES, GatewayConfig, Shared};
pub use server::Gateway;
pub use view::LogView;
pub use writer::{AppendRequest, AppendSender, Appends, DirWriter};
