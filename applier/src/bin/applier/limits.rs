//! The Kafka listener's limit flags (`run --kafka-listen`, `serve`): each
//! overrides its `SEGMIRROR_KAFKA_*` variable, which overrides the
//! configuration file's `kafka_*` key (`applier::listener`).

use applier::config::ApplierConfig;
use kafkalog::units::ByteSize;

/// Flags of the Kafka listener's limits.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct LimitArgs {
    /// Kafka connections open at once, from every address together; more are accepted and closed at once [default: 1024].
    #[arg(long, value_name = "N", env = "SEGMIRROR_KAFKA_MAX_CONNECTIONS")]
    kafka_max_connections: Option<usize>,
    /// Kafka connections open at once from one client IP address; more are accepted and closed at once [default: 128].
    #[arg(
        long,
        value_name = "N",
        env = "SEGMIRROR_KAFKA_MAX_CONNECTIONS_PER_ADDRESS"
    )]
    kafka_max_connections_per_address: Option<usize>,
    /// Largest Kafka request, e.g. 10MiB; a larger one closes its connection before its body is read (one request per connection is held at a time) [default: 100MiB].
    #[arg(long, value_name = "SIZE", env = "SEGMIRROR_KAFKA_MAX_REQUEST_SIZE")]
    kafka_max_request_size: Option<ByteSize>,
    /// Request bytes read and not yet answered, all connections together (at least --kafka-max-request-size) [default: 256MiB].
    #[arg(long, value_name = "SIZE", env = "SEGMIRROR_KAFKA_MAX_IN_FLIGHT_BYTES")]
    kafka_max_in_flight_bytes: Option<ByteSize>,
    /// Close a Kafka connection with no request started for this long, e.g. 5m [default: 10m].
    #[arg(long, value_name = "DURATION", env = "SEGMIRROR_KAFKA_IDLE_TIMEOUT")]
    kafka_idle_timeout: Option<String>,
    /// Close a Kafka connection whose request (or TLS handshake) is not received whole within this, e.g. 30s [default: 60s].
    #[arg(long, value_name = "DURATION", env = "SEGMIRROR_KAFKA_REQUEST_TIMEOUT")]
    kafka_request_timeout: Option<String>,
    /// Answer a failed SASL authentication after this, then close the connection, e.g. 500ms (0 to 60s) [default: 1s].
    #[arg(
        long,
        value_name = "DURATION",
        env = "SEGMIRROR_KAFKA_SASL_FAILURE_DELAY"
    )]
    kafka_sasl_failure_delay: Option<String>,
}

impl LimitArgs {
    /// The flags (and variables) given, as configuration keys to merge
    /// over the file's.
    pub(crate) fn as_config(&self) -> ApplierConfig {
        ApplierConfig {
            kafka_max_connections: self.kafka_max_connections,
            kafka_max_connections_per_address: self.kafka_max_connections_per_address,
            kafka_max_request_size: self.kafka_max_request_size,
            kafka_max_in_flight_bytes: self.kafka_max_in_flight_bytes,
            kafka_idle_timeout: self.kafka_idle_timeout.clone(),
            kafka_request_timeout: self.kafka_request_timeout.clone(),
            kafka_sasl_failure_delay: self.kafka_sasl_failure_delay.clone(),
            ..ApplierConfig::default()
        }
    }
}
