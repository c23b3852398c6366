//! The listener: accepts connections, reads size-prefixed requests, answers
//! them in order, one connection per task.
//!
//! Invariants:
//! - A request larger than [`GatewayConfig::max_request_bytes`] closes the
//!   connection before its body is read (Kafka's `socket.request.max.bytes`),
//!   so a connection holds at most one request and one response in memory.
//! - A version the gateway does not implement is answered as Kafka answers
//!   it: ApiVersions with UNSUPPORTED_VERSION and the supported list, any
//!   other API by closing the connection.
//! - A request is decoded completely before anything is done for it; a
//!   malformed one closes its connection and changes nothing.
//! - Shutdown stops accepting, and ends every connection after the request
//!   it is answering.
//! - With TLS the handshake comes first; with SASL nothing but ApiVersions,
//!   SaslHandshake and SaslAuthenticate is answered before the client has
//!   authenticated ([`crate::security`]).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

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

/// What a handler decided to send back.
pub(crate) enum Reply {
    /// This response body (after the header).
    Body(BytesMut),
    /// Nothing (a Produce with acks=0 that succeeded).
    Nothing,
    /// Close the connection (why, for the log).
    Close(String),
    /// Send this body, then close (a failed authentication).
    BodyThenClose(BytesMut, String),
}

/// Encodes `message` at `version`; an encoding failure closes the connection.
pub(crate) fn encode<M: Encodable>(message: &M, version: i16) -> Reply {
    let mut out = BytesMut::new();
    match message.encode(&mut out, version) {
        Ok(()) => Reply::Body(out),
        Err(e) => Reply::Close(format!("encoding the response: {e}")),
    }
}

/// The gateway: serves the log dir on a listener until shut down.
pub struct Gateway {
    shared: Shared,
    listener: TcpListener,
}

impl Gateway {
    /// Binds `listen`.
    pub async fn bind(listen: SocketAddr, shared: Shared) -> std::io::Result<Gateway> {
        let listener = TcpListener::bind(listen).await?;
        Ok(Gateway { shared, listener })
    }

    /// Advertises `port` in Metadata (the bound port, when 0 was asked for).
    pub fn with_advertised_port(mut self, port: u16) -> Gateway {
        self.shared.config.advertised_port = port;
        self
    }

    /// The bound address (the port when 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` turns true.
    pub async fn serve(self, mut shutdown: watch::Receiver<bool>) {
        let shared = Arc::new(self.shared);
        let mut connections = tokio::task::JoinSet::new();
        let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let shared = Arc::clone(&shared);
                        let stop = shutdown.clone();
                        connections.spawn(async move {
                            let _ = stream.set_nodelay(true);
                            let ended = match shared.security.tls.clone() {
                                Some(tls) => match tls.accept(stream).await {
                                    Ok(s) => connection(s, peer, shared, stop).await,
                                    Err(e) => Err(anyhow::anyhow!("TLS handshake: {e}")),
                                },
                                None => connection(stream, peer, shared, stop).await,
                            };
                            if let Err(e) = ended {
                                tracing::debug!(%peer, error = %e, "connection ended");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a connection");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                },
                _ = ticks.tick() => shared.groups.tick(),
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        break;
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        while connections.join_next().await.is_some() {}
    }
}

async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut auth = crate::security::Auth::new(shared.security.sasl.is_some());
    loop {
        let size = tokio::select! {
            read = stream.read_i32() => match read {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            },
            _ = shutdown.changed() => return Ok(()),
        };
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if size > shared.config.max_request_bytes || size < 4 {
            anyhow::bail!(
                "request of {size} bytes (limit {}): closing the connection",
                shared.config.max_request_bytes
            );
        }
        let mut body = BytesMut::zeroed(size);
        stream.read_exact(&mut body).await?;
        let (key, header, reply) =
            match crate::request::handle(&shared, &mut auth, body.freeze(), peer).await {
                Ok(answered) => answered,
                Err(why) => anyhow::bail!(why),
            };
        match reply {
            Reply::Body(payload) => write_response(&mut stream, key, &header, payload).await?,
            Reply::Nothing => {}
            Reply::Close(why) => anyhow::bail!("{key:?} v{}: {why}", header.request_api_version),
            Reply::BodyThenClose(payload, why) => {
                write_response(&mut stream, key, &header, payload).await?;
                anyhow::bail!("{key:?}: {why}");
            }
        }
    }
}

async fn write_response<S: AsyncWrite + Unpin>(
    stream: &mut S,
    key: ApiKey,
    header: &RequestHeader,
    payload: BytesMut,
) -> anyhow::Result<()> {
    let mut head = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .encode(
            &mut head,
            key.response_header_version(header.request_api_version),
        )?;
    let size = i32::try_from(head.len() + payload.len())?;
    let mut frame = BytesMut::with_capacity(4 + head.len());
    frame.extend_from_slice(&size.to_be_bytes());
    frame.extend_from_slice(&head);
    stream.write_all(&frame).await?;
    let payload: Bytes = payload.freeze();
    stream.write_all(&payload).await?;
    Ok(())
}
