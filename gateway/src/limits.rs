//! The listener's limits: how many connections it holds (in all, and from
//! one client address), how many request bytes it holds, how long a
//! connection may sit idle or take to send one request, and how long a
//! failed SASL authentication waits before it is answered.
//!
//! The decisions are the pure functions here ([`admission`],
//! [`frame_size`], [`read_deadline`], [`WarnEvery::note`]); the server
//! ([`crate::server`]) only executes them. Every limit hit is counted in
//! [`ListenerStats`] (rendered as Prometheus metrics by the applier).
//!
//! Invariants:
//! - A connection over [`ListenerLimits::max_connections`] or
//!   [`ListenerLimits::max_connections_per_address`] is accepted and closed
//!   at once, without a byte read or written; the accept loop never waits
//!   for a slot.
//! - A connection holds one request at a time (the next is not read before
//!   the answer to this one is written), so the bytes one connection holds
//!   are bounded by [`ListenerLimits::max_request_size`]; a length prefix
//!   above it (or below the smallest request header) closes the
//!   connection before its body is read.
//! - Request bytes are taken from the shared [`ListenerLimits::max_in_flight_bytes`]
//!   budget as they arrive (never for a length prefix alone; a request's
//!   buffer is allocated once its first bytes are admitted) and given back
//!   once the request is answered: all connections together hold at most
//!   that many request bytes, plus one 16 KiB read buffer each. A request
//!   that cannot get its bytes within its request timeout closes its
//!   connection. Before its body is decoded, a request other than Produce
//!   also takes what it may grow to ([`decode_charge`]: [`DECODE_GROWTH`]
//!   times its size), so decoded requests stay within the budget too.
//! - Waiting for the first byte of a request is bounded by
//!   [`ListenerLimits::idle_timeout`]; from that byte, the whole frame must
//!   arrive within [`ListenerLimits::request_timeout`] (slowloris). The
//!   time a request takes to be answered (a fetch's long poll) is neither.
//! - A failed SASL authentication is answered after
//!   [`ListenerLimits::sasl_failure_delay`], then the connection is closed
//!   (Kafka's `connection.failed.authentication.delay.ms`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The limits of one listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections open at once, from every address together.
    pub max_connections: usize,
    /// Connections open at once from one client IP address.
    pub max_connections_per_address: usize,
    /// Largest request (its length prefix), in bytes: Kafka's
    /// `socket.request.max.bytes`. Also what one connection holds at most.
    pub max_request_size: usize,
    /// Request bytes read and not yet answered, all connections together
    /// (Kafka's `queued.max.request.bytes`). At least `max_request_size`.
    pub max_in_flight_bytes: usize,
    /// Longest wait for the first byte of the next request.
    pub idle_timeout: Duration,
    /// Longest time from a request's first byte to its last.
    pub request_timeout: Duration,
    /// Wait before a failed SASL authentication is answered.
    pub sasl_failure_delay: Duration,
}

/// Default of [`ListenerLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default of [`ListenerLimits::max_connections_per_address`].
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 128;
/// Default of [`ListenerLimits::max_request_size`]: 100 MiB, Kafka's
/// `socket.request.max.bytes`.
pub const DEFAULT_MAX_REQUEST_SIZE: usize = 100 << 20;
/// Default of [`ListenerLimits::max_in_flight_bytes`]: 256 MiB.
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 256 << 20;
/// Default of [`ListenerLimits::idle_timeout`]: 10 minutes, Kafka's
/// `connections.max.idle.ms`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Default of [`ListenerLimits::request_timeout`]: 60 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of [`ListenerLimits::sasl_failure_delay`]: 1 s.
pub const DEFAULT_SASL_FAILURE_DELAY: Duration = Duration::from_secs(1);

/// The smallest request frame: a v0 request header (api key, version,
/// correlation id).
pub const MIN_REQUEST_SIZE: usize = 8;

impl Default for ListenerLimits {
    fn default() -> ListenerLimits {
        ListenerLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            max_request_size: DEFAULT_MAX_REQUEST_SIZE,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            sasl_failure_delay: DEFAULT_SASL_FAILURE_DELAY,
        }
    }
}

impl ListenerLimits {
    /// Checks that the limits can serve a client at all; names the limit
    /// that cannot.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.max_connections == 0 {
            return Err(("max_connections", "must be at least 1".into()));
        }
        if self.max_connections_per_address == 0 {
            return Err(("max_connections_per_address", "must be at least 1".into()));
        }
        if self.max_request_size < 1024 || self.max_request_size > i32::MAX as usize {
            return Err((
                "max_request_size",
                format!("must be 1KiB to {} bytes", i32::MAX),
            ));
        }
        if self.max_in_flight_bytes < self.max_request_size {
            return Err((
                "max_in_flight_bytes",
                format!(
                    "must be at least max_request_size ({} bytes), or a request of that size could never be read",
                    self.max_request_size
                ),
            ));
        }
        for (name, d) in [
            ("idle_timeout", self.idle_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if d.is_zero() {
                return Err((name, "must be more than 0".into()));
            }
        }
        if self.sasl_failure_delay > Duration::from_secs(60) {
            return Err(("sasl_failure_delay", "must be 0 to 60s".into()));
        }
        Ok(())
    }
}

/// A limit that was hit: the label of its metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitHit {
    /// A connection refused: `max_connections` were open.
    MaxConnections,
    /// A connection refused: `max_connections_per_address` were open from
    /// its address.
    MaxConnectionsPerAddress,
    /// A length prefix above `max_request_size` (or below a header's size).
    MaxRequestSize,
    /// A request that could not get its bytes from the shared budget
    /// within its request timeout.
    MaxInFlightBytes,
    /// No request started within the idle timeout.
    IdleTimeout,
    /// A request started and not finished within the request timeout.
    RequestTimeout,
    /// A failed SASL authentication (answered after the delay, then closed).
    SaslFailure,
}

impl LimitHit {
    /// Every limit, in metric order.
    pub const ALL: [LimitHit; 7] = [
        LimitHit::MaxConnections,
        LimitHit::MaxConnectionsPerAddress,
        LimitHit::MaxRequestSize,
        LimitHit::MaxInFlightBytes,
        LimitHit::IdleTimeout,
        LimitHit::RequestTimeout,
        LimitHit::SaslFailure,
    ];

    /// The metric label (the configuration key, without `kafka_`).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitHit::MaxConnections => "max_connections",
            LimitHit::MaxConnectionsPerAddress => "max_connections_per_address",
            LimitHit::MaxRequestSize => "max_request_size",
            LimitHit::MaxInFlightBytes => "max_in_flight_bytes",
            LimitHit::IdleTimeout => "idle_timeout",
            LimitHit::RequestTimeout => "request_timeout",
            LimitHit::SaslFailure => "sasl_failure_delay",
        }
    }

    fn index(self) -> usize {
        match self {
            LimitHit::MaxConnections => 0,
            LimitHit::MaxConnectionsPerAddress => 1,
            LimitHit::MaxRequestSize => 2,
            LimitHit::MaxInFlightBytes => 3,
            LimitHit::IdleTimeout => 4,
            LimitHit::RequestTimeout => 5,
            LimitHit::SaslFailure => 6,
        }
    }
}

/// Whether a new connection may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Serve it.
    Accept,
    /// Close it at once: this limit is reached.
    Refuse(LimitHit),
}

/// Whether a connection from an address that already has `from_address`
/// open may be served while `open` are open in all. The global limit is
/// named first when both are reached.
pub fn admission(open: usize, from_address: usize, limits: &ListenerLimits) -> Admission {
    if open >= limits.max_connections {
        Admission::Refuse(LimitHit::MaxConnections)
    } else if from_address >= limits.max_connections_per_address {
        Admission::Refuse(LimitHit::MaxConnectionsPerAddress)
    } else {
        Admission::Accept
    }
}

/// The size of the request a length prefix announces, or the limit it
/// breaks (negative, shorter than a header, or above `max_request_size`).
pub fn frame_size(prefix: i32, limits: &ListenerLimits) -> Result<usize, LimitHit> {
    match usize::try_from(prefix) {
        Ok(n) if (MIN_REQUEST_SIZE..=limits.max_request_size).contains(&n) => Ok(n),
        _ => Err(LimitHit::MaxRequestSize),
    }
}

/// How many times its own size a request may grow once decoded, at worst.
/// Measured: a Metadata v9 request of 50 M empty topics, 100,000,008 bytes
/// on the wire, peaked at 3,616,080 KiB decoded (36x; every element
/// becomes a struct of tens of bytes). Produce is the exception: its
/// records stay the bytes received.
pub const DECODE_GROWTH: usize = 40;

/// The Produce API key (its records are not decoded into structures).
const PRODUCE_API_KEY: i16 = 0;

/// The budget bytes a request holds beyond its own `size` while it is
/// decoded and answered: nothing for Produce, `size * (DECODE_GROWTH - 1)`
/// for every other API, so that all requests together hold at most
/// `max_in_flight_bytes` decoded. `Err` when the request could never be
/// admitted (its decoded size alone is above the whole budget: with the
/// defaults, a request other than Produce above 6.4 MiB).
pub fn decode_charge(
    api_key: i16,
    size: usize,
    limits: &ListenerLimits,
) -> Result<usize, LimitHit> {
    if api_key == PRODUCE_API_KEY {
        return Ok(0);
    }
    match size.checked_mul(DECODE_GROWTH) {
        Some(decoded) if decoded <= limits.max_in_flight_bytes => Ok(decoded - size),
        _ => Err(LimitHit::MaxInFlightBytes),
    }
}

/// What a connection is reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Waiting for the first byte of the next request (since the
    /// connection opened or the last answer was written).
    NextRequest,
    /// The rest of a request whose first byte arrived.
    RestOfRequest,
}

/// When a connection reading `what` since `since` is closed, and the
/// limit that closes it.
pub fn read_deadline(
    what: Reading,
    since: Instant,
    limits: &ListenerLimits,
) -> (Instant, LimitHit) {
    match what {
        Reading::NextRequest => (since + limits.idle_timeout, LimitHit::IdleTimeout),
        Reading::RestOfRequest => (since + limits.request_timeout, LimitHit::RequestTimeout),
    }
}

/// Counters of a listener, shared with whoever renders metrics.
#[derive(Debug, Default)]
pub struct ListenerStats {
    open: AtomicU64,
    accepted: AtomicU64,
    hits: [AtomicU64; 7],
}

impl ListenerStats {
    /// Counts a limit hit.
    pub fn hit(&self, limit: LimitHit) {
        self.hits[limit.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// How often `limit` was hit.
    pub fn hits(&self, limit: LimitHit) -> u64 {
        self.hits[limit.index()].load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections accepted and served since the start.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

/// The connections open, in all and per address: [`admission`] executed.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    per_address: Mutex<HashMap<IpAddr, usize>>,
    stats: Arc<ListenerStats>,
}

/// A served connection's place in [`Connections`], given back when dropped.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    connections: Arc<Connections>,
    address: IpAddr,
}

impl Connections {
    /// No connection yet; counted in `stats`.
    pub(crate) fn new(stats: Arc<ListenerStats>) -> Arc<Connections> {
        Arc::new(Connections {
            per_address: Mutex::default(),
            stats,
        })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        match self.per_address.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A slot for a connection from `address`, or the limit that refuses
    /// it (counted). IPv4-mapped IPv6 addresses count as their IPv4 address.
    pub(crate) fn admit(
        self: &Arc<Self>,
        address: IpAddr,
        limits: &ListenerLimits,
    ) -> Result<ConnectionSlot, LimitHit> {
        let address = address.to_canonical();
        let mut map = self.map();
        // Changed under this lock only (here and in `ConnectionSlot::drop`).
        let open = usize::try_from(self.stats.open()).unwrap_or(usize::MAX);
        let from = map.get(&address).copied().unwrap_or(0);
        match admission(open, from, limits) {
            Admission::Refuse(hit) => {
                self.stats.hit(hit);
                Err(hit)
            }
            Admission::Accept => {
                *map.entry(address).or_insert(0) += 1;
                self.stats.open.fetch_add(1, Ordering::Relaxed);
                self.stats.accepted.fetch_add(1, Ordering::Relaxed);
                Ok(ConnectionSlot {
                    connections: Arc::clone(self),
                    address,
                })
            }
        }
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut map = self.connections.map();
        if let Some(n) = map.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.address);
            }
        }
        self.connections.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Rate limit of a repeated WARN: one line per period, saying how many
/// were left out since the last.
#[derive(Debug, Clone)]
pub struct WarnEvery {
    period: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl WarnEvery {
    /// At most one line per `period`.
    pub fn new(period: Duration) -> WarnEvery {
        WarnEvery {
            period,
            last: None,
            suppressed: 0,
        }
    }

    /// An event at `now`: `Some(n)` to log it (with `n` events left out
    /// since the last line), `None` to leave it out.
    pub fn note(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ListenerLimits {
        ListenerLimits {
            max_connections: 10,
            max_connections_per_address: 3,
            max_request_size: 4096,
            max_in_flight_bytes: 8192,
            idle_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(2),
            sasl_failure_delay: Duration::from_millis(500),
        }
    }

    #[test]
    fn admission_refuses_at_either_limit_and_names_the_global_one_first() {
        let l = limits();
        for (open, from, want) in [
            (0, 0, Admission::Accept),
            (9, 2, Admission::Accept),
            (9, 3, Admission::Refuse(LimitHit::MaxConnectionsPerAddress)),
            (5, 7, Admission::Refuse(LimitHit::MaxConnectionsPerAddress)),
            (10, 0, Admission::Refuse(LimitHit::MaxConnections)),
            (10, 3, Admission::Refuse(LimitHit::MaxConnections)),
            (11, 5, Admission::Refuse(LimitHit::MaxConnections)),
        ] {
            assert_eq!(admission(open, from, &l), want, "open {open}, from {from}");
        }
    }

    #[test]
    fn a_length_prefix_outside_header_size_and_max_request_size_is_refused() {
        let l = limits();
        for (prefix, want) in [
            (8, Ok(8)),
            (4096, Ok(4096)),
            (4097, Err(LimitHit::MaxRequestSize)),
            (7, Err(LimitHit::MaxRequestSize)),
            (0, Err(LimitHit::MaxRequestSize)),
            (-1, Err(LimitHit::MaxRequestSize)),
            (i32::MIN, Err(LimitHit::MaxRequestSize)),
            (i32::MAX, Err(LimitHit::MaxRequestSize)),
        ] {
            assert_eq!(frame_size(prefix, &l), want, "prefix {prefix}");
        }
    }

    #[test]
    fn a_request_other_than_produce_holds_its_decoded_size_and_one_above_the_budget_is_refused() {
        let l = limits(); // 8192 bytes in flight
        for (key, size, want) in [
            (0, 4096, Ok(0)), // Produce: records stay the bytes received
            (0, 8, Ok(0)),
            (3, 8, Ok(8 * 39)),                        // Metadata
            (1, 204, Ok(204 * 39)),                    // Fetch: 8160 decoded, within 8192
            (3, 205, Err(LimitHit::MaxInFlightBytes)), // 8200 decoded
            (18, 4096, Err(LimitHit::MaxInFlightBytes)),
            (-1, usize::MAX, Err(LimitHit::MaxInFlightBytes)), // no overflow
        ] {
            assert_eq!(decode_charge(key, size, &l), want, "key {key}, size {size}");
        }
        // The defaults: Metadata up to 6.4 MiB, Produce up to max_request_size.
        let d = ListenerLimits::default();
        assert!(decode_charge(3, (256 << 20) / 40, &d).is_ok());
        assert!(decode_charge(3, (256 << 20) / 40 + 1, &d).is_err());
    }

    #[test]
    fn an_idle_connection_has_the_idle_timeout_and_a_started_request_the_request_timeout() {
        let l = limits();
        let t0 = Instant::now();
        for (what, want) in [
            (
                Reading::NextRequest,
                (t0 + Duration::from_secs(5), LimitHit::IdleTimeout),
            ),
            (
                Reading::RestOfRequest,
                (t0 + Duration::from_secs(2), LimitHit::RequestTimeout),
            ),
        ] {
            assert_eq!(read_deadline(what, t0, &l), want, "{what:?}");
        }
    }

    #[test]
    fn slots_count_per_address_and_are_given_back() {
        let l = limits();
        let stats = Arc::new(ListenerStats::default());
        let c = Connections::new(stats.clone());
        let a: IpAddr = "127.0.0.2".parse().expect("ip");
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().expect("ip");
        let b: IpAddr = "127.0.0.3".parse().expect("ip");
        let s1 = c.admit(a, &l).expect("1");
        let s2 = c.admit(mapped, &l).expect("2: the same address");
        let s3 = c.admit(a, &l).expect("3");
        assert_eq!(
            c.admit(a, &l).err(),
            Some(LimitHit::MaxConnectionsPerAddress)
        );
        let other = c.admit(b, &l).expect("another address");
        assert_eq!(stats.open(), 4);
        drop(s2);
        let s4 = c.admit(a, &l).expect("a slot was given back");
        drop((s1, s3, s4, other));
        assert_eq!(stats.open(), 0);
        assert_eq!(stats.accepted(), 5);
        assert_eq!(stats.hits(LimitHit::MaxConnectionsPerAddress), 1);
        let mut held = Vec::new();
        for i in 0..10u8 {
            let ip = IpAddr::from([10, 0, 0, i]);
            held.push(c.admit(ip, &l).expect("under the global limit"));
        }
        assert_eq!(c.admit(b, &l).err(), Some(LimitHit::MaxConnections));
    }

    #[test]
    fn the_warning_is_rate_limited_and_counts_what_it_left_out() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut w = WarnEvery::new(Duration::from_secs(10));
        let got: Vec<Option<u64>> = [0, 1, 2, 9, 10, 11, 25]
            .iter()
            .map(|&at| w.note(t0 + s * at))
            .collect();
        assert_eq!(got, vec![Some(0), None, None, None, Some(3), None, Some(1)]);
    }

    #[test]
    fn limits_that_could_serve_nobody_are_refused_naming_the_limit() {
        assert_eq!(ListenerLimits::default().check(), Ok(()));
        type Change = fn(&mut ListenerLimits);
        let cases: [(Change, &str); 6] = [
            (|l| l.max_connections = 0, "max_connections"),
            (
                |l| l.max_connections_per_address = 0,
                "max_connections_per_address",
            ),
            (|l| l.max_request_size = 100, "max_request_size"),
            (
                |l| l.max_in_flight_bytes = l.max_request_size - 1,
                "max_in_flight_bytes",
            ),
            (|l| l.idle_timeout = Duration::ZERO, "idle_timeout"),
            (|l| l.request_timeout = Duration::ZERO, "request_timeout"),
        ];
        for (change, name) in cases {
            let mut l = ListenerLimits::default();
            change(&mut l);
            assert_eq!(l.check().map_err(|(n, _)| n), Err(name));
        }
    }

    #[test]
    fn every_limit_has_its_own_counter() {
        let stats = ListenerStats::default();
        for (i, hit) in LimitHit::ALL.into_iter().enumerate() {
            for _ in 0..=i {
                stats.hit(hit);
            }
        }
        for (i, hit) in LimitHit::ALL.into_iter().enumerate() {
            assert_eq!(stats.hits(hit), i as u64 + 1, "{}", hit.as_str());
        }
    }
}
