//! The Kafka listener of `applier run --kafka-listen` and `applier serve`.

use std::net::SocketAddr;
use std::path::Path;
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
    /// This node's id in Metadata (leader of every partition) [default: 1].
    #[arg(long, value_name = "N", env = "SEGMIRROR_NODE_ID", default_value_t = 1)]
    node_id: i32,
    /// Serve on a non-loopback address without TLS or SASL (which the gateway does not have yet): anyone who reaches the port reads every topic and may write to stopped partitions.
    #[arg(long)]
    kafka_insecure: bool,
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
}

/// The view, the append signal and the append channel of `log_dir`.
pub(crate) fn plumbing(log_dir: &Path) -> Plumbing {
    let (sender, receiver) = mpsc::channel(64);
    Plumbing {
        view: Arc::new(LogView::new(log_dir)),
        appends: Appends::new(),
        sender,
        receiver,
    }
}

impl KafkaArgs {
    /// Refuses what would expose the log dir by accident.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if let Some(addr) = self.kafka_listen
            && !addr.ip().is_loopback()
            && !self.kafka_insecure
        {
            anyhow::bail!(
                "--kafka-listen {addr} is not a loopback address, and the gateway has no TLS or SASL yet: anyone who reaches it reads every topic; listen on 127.0.0.1 (behind your own proxy or tunnel), or pass --kafka-insecure to accept that"
            );
        }
        if self.node_id < 0 {
            anyhow::bail!("--node-id {} must be 0 or more", self.node_id);
        }
        Ok(())
    }

    /// Binds the listener and serves `view` until [`Listener::shutdown`].
    pub(crate) async fn start(
        &self,
        addr: SocketAddr,
        cluster_id: &str,
        view: Arc<LogView>,
        appends: Arc<Appends>,
        writer: Option<mpsc::Sender<gateway::AppendRequest>>,
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
            groups: gateway::groups::Coordinator::load(&view, writer.clone()),
            producer_ids: gateway::producer_ids::ProducerIds::new(view.root()),
            view,
            writer,
            appends,
        };
        let (bound, listener) = Gateway::bind(addr, shared)
            .await
            .map_err(|e| anyhow::anyhow!("--kafka-listen {addr}: {e}"))
            .and_then(|g| Ok((g.local_addr()?, g)))?;
        let listener = listener.with_advertised_port(port.unwrap_or(bound.port()));
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
