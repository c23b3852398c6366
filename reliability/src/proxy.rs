//! A TCP fault proxy (tokio) between the services and an S3 server.
//!
//! It accepts connections on 127.0.0.1, connects each to the upstream, and
//! copies bytes both ways. It sees HTTP only as alternating turns: the
//! first client bytes after a response (or on a new connection) start a
//! new **request**, and for a share of requests it injects one fault:
//!
//! | fault | what happens | what the client sees |
//! | --- | --- | --- |
//! | drop | the connection is closed before the request is forwarded | connection closed before the response (the server never acted) |
//! | delay | the request waits before it is forwarded | a slow request |
//! | cut | the request is forwarded, the response is cut after a random number of bytes and the connection closed | a truncated response: possibly after the server acted (a write done, the answer lost) |
//!
//! Decisions come from a seeded generator, so a run is reproducible up to
//! the scheduling of connections. [`ProxyStats`] counts connections,
//! requests and each fault.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::rng::Rng;

/// Which faults, how often.
#[derive(Debug, Clone)]
pub struct ProxyPlan {
    /// Seed.
    pub seed: u64,
    /// Share of requests whose connection is dropped before forwarding.
    pub drop: f64,
    /// Share of requests delayed.
    pub delay: f64,
    /// Delay range.
    pub delay_range: (Duration, Duration),
    /// Share of requests whose response is cut short.
    pub cut: f64,
    /// Responses forwarded at most this many bytes per second on each
    /// connection (a slow link), when set.
    pub throttle: Option<u64>,
}

impl ProxyPlan {
    /// About `share` of requests faulted: 40% of them dropped, 30%
    /// delayed by 20-300 ms, 30% cut.
    pub fn share(seed: u64, share: f64) -> ProxyPlan {
        ProxyPlan {
            seed,
            drop: share * 0.4,
            delay: share * 0.3,
            delay_range: (Duration::from_millis(20), Duration::from_millis(300)),
            cut: share * 0.3,
            throttle: None,
        }
    }

    /// No faults; responses forwarded at `bytes_per_sec` per connection.
    pub fn throttled(bytes_per_sec: u64) -> ProxyPlan {
        ProxyPlan {
            throttle: Some(bytes_per_sec.max(1)),
            ..ProxyPlan::share(0, 0.0)
        }
    }
}

/// What the proxy did.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Requests seen (client turns).
    pub requests: AtomicU64,
    /// Requests dropped.
    pub dropped: AtomicU64,
    /// Requests delayed.
    pub delayed: AtomicU64,
    /// Responses cut.
    pub cut: AtomicU64,
}

/// A snapshot of [`ProxyStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyCounts {
    /// Connections accepted.
    pub connections: u64,
    /// Requests seen.
    pub requests: u64,
    /// Requests dropped.
    pub dropped: u64,
    /// Requests delayed.
    pub delayed: u64,
    /// Responses cut.
    pub cut: u64,
}

impl ProxyCounts {
    /// Faults injected.
    pub fn faults(&self) -> u64 {
        self.dropped + self.delayed + self.cut
    }
}

impl std::fmt::Display for ProxyCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} connections, {} requests, {} faulted ({:.1}%): {} dropped, {} delayed, {} responses cut",
            self.connections,
            self.requests,
            self.faults(),
            100.0 * self.faults() as f64 / self.requests.max(1) as f64,
            self.dropped,
            self.delayed,
            self.cut
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    Drop,
    Delay(Duration),
    Cut(usize),
}

/// A running proxy; stopped when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    stats: Arc<ProxyStats>,
    enabled: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr, plan: ProxyPlan) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(ProxyStats::default());
        let enabled = Arc::new(AtomicBool::new(true));
        let rng = Arc::new(Mutex::new(Rng::new(plan.seed)));
        let plan = Arc::new(plan);
        let (s, e) = (Arc::clone(&stats), Arc::clone(&enabled));
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                s.connections.fetch_add(1, Ordering::Relaxed);
                let (s, e, rng, plan) = (
                    Arc::clone(&s),
                    Arc::clone(&e),
                    Arc::clone(&rng),
                    Arc::clone(&plan),
                );
                tokio::spawn(async move {
                    let _ = serve(client, upstream, &s, &e, &rng, &plan).await;
                });
            }
        });
        Ok(FaultProxy {
            addr,
            stats,
            enabled,
            task,
        })
    }

    /// The address to connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Turns fault injection on or off (bytes are always forwarded).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Counts so far.
    pub fn counts(&self) -> ProxyCounts {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProxyCounts {
            connections: l(&self.stats.connections),
            requests: l(&self.stats.requests),
            dropped: l(&self.stats.dropped),
            delayed: l(&self.stats.delayed),
            cut: l(&self.stats.cut),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn decide(
    stats: &ProxyStats,
    enabled: &AtomicBool,
    rng: &Mutex<Rng>,
    plan: &ProxyPlan,
) -> Fault {
    stats.requests.fetch_add(1, Ordering::Relaxed);
    if !enabled.load(Ordering::Relaxed) {
        return Fault::None;
    }
    let mut rng = rng.lock().await;
    let u = rng.unit();
    if u < plan.drop {
        stats.dropped.fetch_add(1, Ordering::Relaxed);
        Fault::Drop
    } else if u < plan.drop + plan.delay {
        stats.delayed.fetch_add(1, Ordering::Relaxed);
        Fault::Delay(rng.duration(plan.delay_range.0, plan.delay_range.1))
    } else if u < plan.drop + plan.delay + plan.cut {
        stats.cut.fetch_add(1, Ordering::Relaxed);
        // Somewhere in the status line, the headers or the body.
        Fault::Cut(rng.below(400) as usize)
    } else {
        Fault::None
    }
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    stats: &ProxyStats,
    enabled: &AtomicBool,
    rng: &Mutex<Rng>,
    plan: &ProxyPlan,
) -> std::io::Result<()> {
    let mut server = TcpStream::connect(upstream).await?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let mut cbuf = vec![0u8; 64 * 1024];
    let mut sbuf = vec![0u8; 64 * 1024];
    // True between a response and the next request.
    let mut awaiting_request = true;
    let mut cut: Option<usize> = None;
    loop {
        tokio::select! {
            n = client.read(&mut cbuf) => {
                let n = n?;
                if n == 0 {
                    let _ = server.shutdown().await;
                    return Ok(());
                }
                if awaiting_request {
                    awaiting_request = false;
                    cut = None;
                    match decide(stats, enabled, rng, plan).await {
                        Fault::None => {}
                        Fault::Drop => return Ok(()),
                        Fault::Delay(d) => tokio::time::sleep(d).await,
                        Fault::Cut(k) => cut = Some(k),
                    }
                }
                server.write_all(&cbuf[..n]).await?;
            }
            n = server.read(&mut sbuf) => {
                let n = n?;
                if n == 0 {
                    let _ = client.shutdown().await;
                    return Ok(());
                }
                awaiting_request = true;
                if let Some(k) = cut {
                    if n >= k {
                        client.write_all(&sbuf[..k]).await?;
                        return Ok(());
                    }
                    cut = Some(k - n);
                }
                client.write_all(&sbuf[..n]).await?;
                if let Some(rate) = plan.throttle {
                    tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
                }
            }
        }
    }
}
