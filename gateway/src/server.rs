//! The listener: accepts connections, reads size-prefixed requests, answers
//! them in order, one connection per task.
//!
//! Invariants:
//! - A request larger than [`crate::GatewayConfig::max_request_bytes`] closes the
//!   connection before its body is read (Kafka's `socket.request.max.bytes`),
//!   so a connection holds at most one request and one response in memory.
//! - The listener's limits ([`crate::limits`]: connections in all and per
//!   address, request bytes held, idle and request timeouts, the delay after
//!   a failed SASL authentication) are decided there and executed here; a
//!   refused connection is closed at once, the accept loop never waits.
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
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::context::Shared;
use crate::limits::{
    Connections, LimitHit, ListenerLimits, ListenerStats, Reading, WarnEvery, decode_charge,
    frame_size, read_deadline,
};
use crate::reply::Reply;
use crate::splice::SpanSink;

/// The gateway: serves the log dir on a listener until shut down.
pub struct Gateway {
    shared: Shared,
    listener: TcpListener,
    limits: ListenerLimits,
    stats: Arc<ListenerStats>,
}

impl Gateway {
    /// Binds `listen`, with the default [`ListenerLimits`].
    pub async fn bind(listen: SocketAddr, shared: Shared) -> std::io::Result<Gateway> {
        let listener = TcpListener::bind(listen).await?;
        Ok(Gateway {
            shared,
            listener,
            limits: ListenerLimits::default(),
            stats: Arc::default(),
        })
    }

    /// Serves within `limits` (their `max_request_size` replaces
    /// [`crate::GatewayConfig::max_request_bytes`]), counting in `stats`.
    pub fn with_limits(mut self, limits: ListenerLimits, stats: Arc<ListenerStats>) -> Gateway {
        self.shared.config.max_request_bytes = limits.max_request_size;
        self.limits = limits;
        self.stats = stats;
        self
    }

    /// The listener's counters.
    pub fn stats(&self) -> Arc<ListenerStats> {
        Arc::clone(&self.stats)
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
        let mut limits = self.limits;
        limits.max_request_size = self.shared.config.max_request_bytes;
        let budget = Arc::new(Semaphore::new(limits.max_in_flight_bytes));
        let shared = Arc::new(self.shared);
        let limits = Arc::new(limits);
        let slots = Connections::new(Arc::clone(&self.stats));
        let mut refused_warning = WarnEvery::new(Duration::from_secs(10));
        let mut connections = tokio::task::JoinSet::new();
        let mut ticks = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let slot = match slots.admit(peer.ip(), &limits) {
                            Ok(slot) => slot,
                            Err(hit) => {
                                // Closed at once: nothing read, nothing written.
                                drop(stream);
                                if let Some(left_out) = refused_warning.note(Instant::now()) {
                                    tracing::warn!(
                                        %peer,
                                        limit = hit.as_str(),
                                        open = self.stats.open(),
                                        refused_since_last_warning = left_out,
                                        "Kafka listener: connection refused and closed"
                                    );
                                }
                                continue;
                            }
                        };
                        let conn = Conn {
                            shared: Arc::clone(&shared),
                            limits: Arc::clone(&limits),
                            stats: Arc::clone(&self.stats),
                            budget: Arc::clone(&budget),
                            peer,
                        };
                        let stop = shutdown.clone();
                        connections.spawn(async move {
                            let _slot = slot;
                            let _ = stream.set_nodelay(true);
                            let ended = match conn.shared.security.tls.clone() {
                                Some(tls) => {
                                    // The handshake is a request: within the request timeout.
                                    let (deadline, hit) = read_deadline(Reading::RestOfRequest, Instant::now(), &conn.limits);
                                    match tokio::time::timeout_at(deadline.into(), tls.accept(stream)).await {
                                        Ok(Ok(s)) => connection(s, &conn, stop).await,
                                        Ok(Err(e)) => Err(anyhow::anyhow!("TLS handshake: {e}")),
                                        Err(_) => {
                                            conn.stats.hit(hit);
                                            Err(anyhow::anyhow!("TLS handshake not done within the request timeout"))
                                        }
                                    }
                                }
                                None => connection(stream, &conn, stop).await,
                            };
                            if let Err(e) = ended {
                                tracing::debug!(peer = %conn.peer, error = %e, "connection ended");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
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

/// What one connection's task holds.
struct Conn {
    shared: Arc<Shared>,
    limits: Arc<ListenerLimits>,
    stats: Arc<ListenerStats>,
    /// The shared budget of request bytes in flight (one permit a byte).
    budget: Arc<Semaphore>,
    peer: SocketAddr,
}

/// Bytes read from the socket at a time (then taken from the budget).
const READ_CHUNK: usize = 16 << 10;

/// Why reading a request stopped.
enum Read {
    /// A whole request, and its share of the in-flight budget.
    Request(Bytes, OwnedSemaphorePermit),
    /// The client closed the connection between requests.
    Closed,
}

impl Conn {
    /// Counts `hit` and closes the connection with `why`.
    fn limit(&self, hit: LimitHit, why: String) -> anyhow::Error {
        self.stats.hit(hit);
        anyhow::anyhow!("{why} ({} limit)", hit.as_str())
    }

    /// Reads the next request within the idle and request timeouts,
    /// taking its bytes from the budget as they arrive.
    async fn read_request<S: AsyncRead + Unpin>(
        &self,
        stream: &mut S,
        shutdown: &mut watch::Receiver<bool>,
    ) -> anyhow::Result<Option<Read>> {
        let limits = &*self.limits;
        let mut prefix = [0u8; 4];
        let (idle_until, idle) = read_deadline(Reading::NextRequest, Instant::now(), limits);
        let first = tokio::select! {
            read = tokio::time::timeout_at(idle_until.into(), stream.read(&mut prefix[..1])) => read,
            _ = shutdown.changed() => return Ok(None),
        };
        match first {
            Err(_) => return Err(self.limit(idle, "no request within the idle timeout".into())),
            Ok(Ok(0)) => return Ok(Some(Read::Closed)),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
        }
        let (deadline, late) = read_deadline(Reading::RestOfRequest, Instant::now(), limits);
        let deadline = tokio::time::Instant::from_std(deadline);
        let too_slow = |what: &str| {
            self.limit(
                late,
                format!("{what} not received within the request timeout"),
            )
        };
        match tokio::time::timeout_at(deadline, stream.read_exact(&mut prefix[1..])).await {
            Err(_) => return Err(too_slow("a length prefix")),
            Ok(r) => r?,
        };
        let announced = i32::from_be_bytes(prefix);
        let size = frame_size(announced, limits).map_err(|hit| {
            self.limit(
                hit,
                format!(
                    "request of {announced} bytes (limit {}): closing the connection",
                    limits.max_request_size
                ),
            )
        })?;
        // Bytes are read into a small scratch buffer, then taken from the
        // budget and moved into the body: a connection waiting for bytes
        // (or for budget) holds at most the scratch outside the budget, and
        // the body is allocated once its first bytes have been admitted.
        let mut scratch = vec![0u8; size.min(READ_CHUNK)];
        let mut body = BytesMut::new();
        let mut held: Option<OwnedSemaphorePermit> = None;
        while body.len() < size {
            let want = (size - body.len()).min(READ_CHUNK);
            let got =
                match tokio::time::timeout_at(deadline, stream.read(&mut scratch[..want])).await {
                    Err(_) => return Err(too_slow("a request")),
                    Ok(r) => r?,
                };
            if got == 0 {
                anyhow::bail!("closed in the middle of a request");
            }
            let permit = match tokio::time::timeout_at(
                deadline,
                Arc::clone(&self.budget).acquire_many_owned(u32::try_from(got).unwrap_or(u32::MAX)),
            )
            .await
            {
                Err(_) => {
                    return Err(self.limit(
                        LimitHit::MaxInFlightBytes,
                        "no room in the request bytes budget within the request timeout".into(),
                    ));
                }
                Ok(Err(closed)) => return Err(closed.into()),
                Ok(Ok(p)) => p,
            };
            if body.is_empty() {
                body.reserve(size);
            }
            body.extend_from_slice(&scratch[..got]);
            match held.as_mut() {
                Some(h) => h.merge(permit),
                None => held = Some(permit),
            }
        }
        let permit = match held {
            Some(p) => p,
            None => anyhow::bail!("an empty request"),
        };
        Ok(Some(Read::Request(body.freeze(), permit)))
    }

    /// Takes from the budget what `request` grows to once decoded
    /// ([`crate::limits::decode_charge`]), within the request timeout, and
    /// adds it to what the request already holds; a request that could
    /// never fit is refused at once.
    async fn charge_decoding(
        &self,
        request: &Bytes,
        mut held: OwnedSemaphorePermit,
    ) -> anyhow::Result<OwnedSemaphorePermit> {
        let api_key = match request.get(..2) {
            Some(b) => i16::from_be_bytes([b[0], b[1]]),
            None => anyhow::bail!("a request shorter than its API key"),
        };
        let extra = decode_charge(api_key, request.len(), &self.limits).map_err(|hit| {
            self.limit(
                hit,
                format!(
                    "a request (API key {api_key}) of {} bytes decodes to more than the in-flight budget of {} bytes",
                    request.len(),
                    self.limits.max_in_flight_bytes
                ),
            )
        })?;
        if extra == 0 {
            return Ok(held);
        }
        let deadline = tokio::time::Instant::now() + self.limits.request_timeout;
        let more = match tokio::time::timeout_at(
            deadline,
            Arc::clone(&self.budget).acquire_many_owned(u32::try_from(extra).unwrap_or(u32::MAX)),
        )
        .await
        {
            Err(_) => {
                return Err(self.limit(
                    LimitHit::MaxInFlightBytes,
                    "no room in the request bytes budget for a request's decoding within the request timeout".into(),
                ));
            }
            Ok(Err(closed)) => return Err(closed.into()),
            Ok(Ok(p)) => p,
        };
        held.merge(more);
        Ok(held)
    }
}

async fn connection<S: AsyncRead + SpanSink>(
    mut stream: S,
    conn: &Conn,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let shared = &conn.shared;
    let peer = conn.peer;
    let mut auth = crate::security::Auth::new(shared.security.sasl.is_some());
    // Reused for the records of every fetch on a TLS connection.
    let mut span_buf = Vec::new();
    loop {
        let (body, in_flight) = match conn.read_request(&mut stream, &mut shutdown).await? {
            None | Some(Read::Closed) => return Ok(()),
            Some(Read::Request(body, permit)) => (body, permit),
        };
        let in_flight = conn.charge_decoding(&body, in_flight).await?;
        let (key, header, reply) = match crate::request::handle(shared, &mut auth, body, peer).await
        {
            Ok(answered) => answered,
            Err(why) => anyhow::bail!(why),
        };
        match reply {
            Reply::Body(payload) => write_response(&mut stream, key, &header, payload).await?,
            Reply::Spliced(body) => {
                write_spliced(&mut stream, key, &header, &body, &mut span_buf).await?;
            }
            Reply::Nothing => {}
            Reply::Close(why) => anyhow::bail!("{key:?} v{}: {why}", header.request_api_version),
            Reply::FailedAuthentication(payload, why) => {
                conn.stats.hit(LimitHit::SaslFailure);
                drop(in_flight);
                tokio::time::sleep(conn.limits.sasl_failure_delay).await;
                write_response(&mut stream, key, &header, payload).await?;
                anyhow::bail!("{key:?}: {why}");
            }
        }
        drop(in_flight);
    }
}

/// The size prefix and response header of a response whose body has
/// `body_len` bytes.
fn frame_head(key: ApiKey, header: &RequestHeader, body_len: u64) -> anyhow::Result<BytesMut> {
    let mut head = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .encode(
            &mut head,
            key.response_header_version(header.request_api_version),
        )?;
    let size = i32::try_from(head.len() as u64 + body_len)?;
    let mut frame = BytesMut::with_capacity(4 + head.len());
    frame.extend_from_slice(&size.to_be_bytes());
    frame.extend_from_slice(&head);
    Ok(frame)
}

async fn write_response<S: AsyncWrite + Unpin>(
    stream: &mut S,
    key: ApiKey,
    header: &RequestHeader,
    payload: BytesMut,
) -> anyhow::Result<()> {
    let frame = frame_head(key, header, payload.len() as u64)?;
    stream.write_all(&frame).await?;
    let payload: Bytes = payload.freeze();
    stream.write_all(&payload).await?;
    // TLS: bytes a write left in the session's buffer (the socket was
    // full) go out now, not with the next response.
    stream.flush().await?;
    Ok(())
}

/// Writes a response whose records are still in segment files: the head
/// and the body's first in-memory part in one write, then the rest.
async fn write_spliced<S: SpanSink>(
    stream: &mut S,
    key: ApiKey,
    header: &RequestHeader,
    body: &crate::splice::Body,
    buf: &mut Vec<u8>,
) -> anyhow::Result<()> {
    let mut frame = frame_head(key, header, body.len)?;
    let rest = match body.parts.split_first() {
        Some((crate::splice::Part::Inline(first), rest)) => {
            frame.extend_from_slice(first);
            rest
        }
        _ => &body.parts[..],
    };
    stream.write_all(&frame).await?;
    crate::splice::write_parts(stream, rest, buf).await?;
    stream.flush().await?;
    Ok(())
}
