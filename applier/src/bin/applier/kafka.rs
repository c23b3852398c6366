//! The Kafka listener of `applier run --kafka-listen` and `applier serve`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gateway::{Appends, Gateway, GatewayConfig, LogView, Shared};
use tokio::sync::{mpsc, watch};

/// Flags of the Kafka listener.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct KafkaArgs {
    /// Serve the log dir over the Kafka protocol on this address, e.g. 127.0.0.1:9092 [default: not served].
    #[arg(long, value_name = "HOST:PORT", env = "SEGMIRROR_KAFKA_LISTEN")]
    pub(crate) kafka_listen: Option<SocketAddr>,
    /// The address clients are told to connect to (Metadata), e.g. mirror.example.com:9092 [default: the listen address].
    #[arg(long, value_name = "HOST:PORT", env = "SEGMIRROR_KAFKA_ADVERTISE")]
    kafka_advertise: Option<String>,
    /// This node's id in Metadata (leader of every partition).
    #[arg(long, value_name = "N", env = "SEGMIRROR_NODE_ID", default_value_t = 1)]
    node_id: i32,
    /// Serve TLS with this certificate chain (PEM); needs --kafka-tls-key.
    #[arg(
        long,
        value_name = "FILE",
        env = "SEGMIRROR_KAFKA_TLS_CERT",
        requires = "kafka_tls_key"
    )]
    kafka_tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(
        long,
        value_name = "FILE",
        env = "SEGMIRROR_KAFKA_TLS_KEY",
        requires = "kafka_tls_cert"
    )]
    kafka_tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM) [default: no client certificates].
    #[arg(
        long,
        value_name = "FILE",
        env = "SEGMIRROR_KAFKA_TLS_CLIENT_CA",
        requires = "kafka_tls_cert"
    )]
    kafka_tls_client_ca: Option<PathBuf>,
    /// Require SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with the users in this file (salted SCRAM keys; `applier kafka-user` writes it) [default: no SASL].
    #[arg(long, value_name = "FILE", env = "SEGMIRROR_KAFKA_SASL_USERS")]
    kafka_sasl_users: Option<PathBuf>,
    /// Serve on a non-loopback address without both TLS and SASL: anyone who reaches the port reads every topic and may write to stopped partitions.
    #[arg(long)]
    kafka_insecure: bool,
    #[command(flatten)]
    pub(crate) limits: crate::limits::LimitArgs,
}

/// A running listener.
pub(crate) struct Listener {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// The bound address.
    pub(crate) addr: SocketAddr,
}

impl Listener {
    /// Stops accepting, ends every connection, waits for them.
    pub(crate) async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Where producers' appends go and what the gateway reads.
pub(crate) struct Plumbing {
    pub(crate) view: Arc<LogView>,
    pub(crate) appends: Arc<Appends>,
    pub(crate) sender: mpsc::Sender<gateway::AppendRequest>,
    pub(crate) receiver: mpsc::Receiver<gateway::AppendRequest>,
    /// The group coordinator, shared by the gateway and the engine's group
    /// offsets sync.
    pub(crate) groups: Arc<gateway::groups::Coordinator>,
}

/// The view, the append signal and the append channel of `log_dir`.
pub(crate) fn plumbing(log_dir: &Path) -> Plumbing {
    let (sender, receiver) = mpsc::channel(64);
    let view = Arc::new(LogView::new(log_dir));
    let groups = gateway::groups::Coordinator::load(&view, Some(sender.clone()));
    Plumbing {
        view,
        appends: Appends::new(),
        sender,
        receiver,
        groups,
    }
}

impl KafkaArgs {
    /// Refuses what would expose the log dir by accident.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        let secured = self.kafka_tls_cert.is_some() && self.kafka_sasl_users.is_some();
        if let Some(addr) = self.kafka_listen
            && !addr.ip().is_loopback()
            && !secured
            && !self.kafka_insecure
        {
            anyhow::bail!(
                "--kafka-listen {addr} is not a loopback address, and the listener has not both TLS (--kafka-tls-cert/--kafka-tls-key) and SASL (--kafka-sasl-users): anyone who reaches it could read every topic; configure both, listen on 127.0.0.1, or pass --kafka-insecure to accept that"
            );
        }
        if self.node_id < 0 {
            anyhow::bail!("--node-id {} must be 0 or more", self.node_id);
        }
        Ok(())
    }

    /// The TLS acceptor and SASL credentials the flags ask for.
    fn security(&self) -> anyhow::Result<gateway::security::Security> {
        let tls = match (&self.kafka_tls_cert, &self.kafka_tls_key) {
            (Some(cert), Some(key)) => Some(
                gateway::security::tls_acceptor(cert, key, self.kafka_tls_client_ca.as_deref())
                    .map_err(|e| anyhow::anyhow!("--kafka-tls-cert: {e}"))?,
            ),
            _ => None,
        };
        let sasl = match &self.kafka_sasl_users {
            Some(path) => Some(Arc::new(
                gateway::sasl::Credentials::load(path)
                    .map_err(|e| anyhow::anyhow!("--kafka-sasl-users: {e}"))?,
            )),
            None => None,
        };
        Ok(gateway::security::Security { tls, sasl })
    }

    /// Binds the listener and serves `view` within `limits`, counting in
    /// `stats`, until [`Listener::shutdown`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        &self,
        addr: SocketAddr,
        limits: gateway::limits::ListenerLimits,
        stats: Arc<gateway::limits::ListenerStats>,
        cluster_id: &str,
        view: Arc<LogView>,
        appends: Arc<Appends>,
        writer: Option<mpsc::Sender<gateway::AppendRequest>>,
        groups: Arc<gateway::groups::Coordinator>,
    ) -> anyhow::Result<Listener> {
        let (host, port) = match &self.kafka_advertise {
            Some(a) => {
                let (h, p) = a.rsplit_once(':').ok_or_else(|| {
                    anyhow::anyhow!("--kafka-advertise {a:?}: expected HOST:PORT")
                })?;
                let port = p
                    .parse::<u16>()
                    .map_err(|e| anyhow::anyhow!("--kafka-advertise {a:?}: port: {e}"))?;
                (h.to_string(), Some(port))
            }
            None => (addr.ip().to_string(), None),
        };
        let shared = Shared {
            config: GatewayConfig {
                node_id: self.node_id,
                advertised_host: host,
                advertised_port: 0,
                cluster_id: cluster_id.to_string(),
                max_request_bytes: gateway::DEFAULT_MAX_REQUEST_BYTES,
            },
            groups,
            producer_ids: gateway::producer_ids::ProducerIds::new(view.root()),
            security: self.security()?,
            view,
            writer,
            appends,
        };
        let (bound, listener) = Gateway::bind(addr, shared)
            .await
            .map_err(|e| anyhow::anyhow!("--kafka-listen {addr}: {e}"))
            .and_then(|g| Ok((g.local_addr()?, g)))?;
        let listener = listener
            .with_advertised_port(port.unwrap_or(bound.port()))
            .with_limits(limits, stats);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(listener.serve(stopped));
        tracing::info!(listen = %bound, "serving the log dir over the Kafka protocol");
        Ok(Listener {
            stop,
            task,
            addr: bound,
        })
    }
}
