//! The metrics endpoint: a minimal HTTP/1.1 responder on its own thread,
//! answering `GET /metrics` with the OpenMetrics text the service renders
//! at that moment (normally [`encode`] of its `prometheus-client`
//! registry), and 404 to any other path.
//!
//! Invariants:
//! - One connection at a time, closed after one answer (`Connection:
//!   close`): a scrape is a few KiB every few seconds, and a slow client
//!   holds the server for at most [`READ_TIMEOUT`] plus [`WRITE_TIMEOUT`].
//! - The request is read only up to [`MAX_REQUEST_BYTES`] and within
//!   [`READ_TIMEOUT`] in total; a request whose head does not end within
//!   both is answered 400 (or dropped when the client is gone). Nothing
//!   of the request but its first line is looked at.
//! - It never panics and never stops on a client's error: every IO error
//!   ends that connection only (logged at `debug`), and a failing `accept`
//!   is retried after a short pause.
//! - The body is whatever `render` returns; `render` runs on the server
//!   thread, once per `GET /metrics`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;

/// The content type of the answer to `GET /metrics`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Most bytes of a request read (its line and headers).
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Longest time a request may take to arrive, in total.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest time the answer may take to be written.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The OpenMetrics text of `registry` (`prometheus-client`'s encoder,
/// ending in `# EOF`). Encoding into a `String` cannot fail for the metric
/// types of `prometheus-client`; if a custom metric's encoder fails, the
/// text is empty rather than partial.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}

/// Serves `GET /metrics` on `addr` from a background thread named
/// `metrics`, answering with `render()`. Returns the address bound (the
/// port chosen when `addr`'s is 0). Fails only when `addr` cannot be bound
/// or the thread cannot start.
pub fn serve<F>(addr: SocketAddr, render: F) -> io::Result<SocketAddr>
where
    F: Fn() -> String + Send + 'static,
{
    serve_with(addr, READ_TIMEOUT, render)
}

/// [`serve`] with another read timeout (tests).
fn serve_with<F>(addr: SocketAddr, read_timeout: Duration, render: F) -> io::Result<SocketAddr>
where
    F: Fn() -> String + Send + 'static,
{
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            loop {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        if let Err(e) = answer(stream, read_timeout, &render) {
                            tracing::debug!(%peer, error = %e, "metrics request");
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "metrics accept");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        })?;
    Ok(bound)
}

/// What a request asks for, from its head.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// `GET /metrics` (with or without a query).
    Metrics,
    /// A well-formed request for anything else.
    Other,
    /// No request line within the bounds.
    Bad,
}

fn classify(head: &[u8]) -> Request {
    let Some(end) = head.windows(2).position(|w| w == b"\r\n") else {
        return Request::Bad;
    };
    let line = String::from_utf8_lossy(&head[..end]);
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Request::Bad;
    };
    if !version.starts_with("HTTP/") {
        return Request::Bad;
    }
    let path = target.split('?').next().unwrap_or(target);
    if method == "GET" && path == "/metrics" {
        Request::Metrics
    } else {
        Request::Other
    }
}

/// Reads the request head: up to the blank line, [`MAX_REQUEST_BYTES`] or
/// `timeout` in total, whichever comes first.
fn read_head(stream: &mut TcpStream, timeout: Duration) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while head.len() < MAX_REQUEST_BYTES && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        stream.set_read_timeout(Some(left))?;
        let room = (MAX_REQUEST_BYTES - head.len()).min(buf.len());
        match stream.read(&mut buf[..room]) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(head)
}

fn answer(
    mut stream: TcpStream,
    read_timeout: Duration,
    render: &dyn Fn() -> String,
) -> io::Result<()> {
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let head = read_head(&mut stream, read_timeout)?;
    let complete = head.windows(4).any(|w| w == b"\r\n\r\n");
    let request = if complete {
        classify(&head)
    } else {
        Request::Bad
    };
    let (status, content_type, body) = match request {
        Request::Metrics => ("200 OK", CONTENT_TYPE, render()),
        Request::Other => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "try GET /metrics\n".to_string(),
        ),
        Request::Bad => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "expected an HTTP/1.1 request such as GET /metrics\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use prometheus_client::metrics::counter::Counter;
    use segmirror_testkit::metrics::{scrape, send};

    use super::*;

    fn local() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
    }

    #[test]
    fn get_metrics_is_the_rendered_text_and_anything_else_is_404() {
        let addr = serve(local(), || "a_total 1\n# EOF\n".to_string()).expect("serve");
        let s = scrape(addr, "/metrics");
        assert_eq!((s.status, s.content_type.as_str()), (200, CONTENT_TYPE));
        assert_eq!(s.body, "a_total 1\n# EOF\n");
        assert_eq!(scrape(addr, "/metrics?x=1").status, 200);
        assert_eq!(scrape(addr, "/").status, 404);
        assert_eq!(scrape(addr, "/metricsx").status, 404);
        let post = send(addr, b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 404 "), "{post}");
    }

    #[test]
    fn oversized_silent_and_garbled_requests_do_not_stop_the_server() {
        let addr = serve_with(local(), Duration::from_millis(200), String::new).expect("serve");
        let huge = vec![b'a'; MAX_REQUEST_BYTES * 4];
        let answer = send(addr, &huge);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 400 "),
            "{answer}"
        );
        // A client that sends half a request and waits gets 400 after the
        // read timeout.
        let half = send(addr, b"GET /metrics HTTP/1.1\r\n");
        assert!(half.starts_with("HTTP/1.1 400 "), "{half}");
        let garbled = send(addr, b"\xff\xfe\r\n\r\n");
        assert!(garbled.starts_with("HTTP/1.1 400 "), "{garbled}");
        assert_eq!(scrape(addr, "/metrics").status, 200);
    }

    #[test]
    fn encode_is_prometheus_clients_openmetrics_text() {
        let mut registry = Registry::with_prefix("x");
        let c: Counter = Counter::default();
        registry.register("things", "Things seen", c.clone());
        c.inc_by(3);
        assert_eq!(
            encode(&registry),
            "# HELP x_things Things seen.\n# TYPE x_things counter\nx_things_total 3\n# EOF\n"
        );
    }
}
