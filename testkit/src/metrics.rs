//! Scraping a metrics endpoint over TCP in tests, and reading the
//! OpenMetrics text it answers.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An answer to `GET <path>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Scrape {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type` header (empty when absent).
    pub content_type: String,
    /// The body.
    pub body: String,
}

/// Sends `request` as it is and returns whatever the server answered
/// before closing (empty when it closed first). IO errors end the exchange
/// without failing: a server may close on a request it refuses.
pub fn send(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    if stream.write_all(request).is_err() {
        return String::new();
    }
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET <path>` over HTTP/1.1; panics on an answer that is not HTTP.
pub fn scrape(addr: SocketAddr, path: &str) -> Scrape {
    let raw = send(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes(),
    );
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {raw:?}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {raw:?}"));
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    Scrape {
        status,
        content_type,
        body: body.to_string(),
    }
}

/// The samples of an OpenMetrics text: `name{labels}` as written (or
/// `name`) to value. Panics when a line is neither a comment nor
/// `<series> <number>`, when a series repeats, or when the text does not
/// end with `# EOF`.
pub fn samples(text: &str) -> BTreeMap<String, f64> {
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF:\n{text}"
    );
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample: {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not a number in {line:?}"));
        assert!(
            out.insert(series.to_string(), value).is_none(),
            "{series} twice"
        );
    }
    out
}

/// The metric names of a module's docs table (lines `//! | \`name\` | ...`
/// of `module_source`, its `include_str!`), each checked to have a
/// `# TYPE` line in the OpenMetrics `text` (a counter's without `_total`).
/// Returns the names, for the caller to count. (A family without samples
/// is not in the text: give each one a sample first.)
pub fn assert_documented_metrics_served<'a>(module_source: &'a str, text: &str) -> Vec<&'a str> {
    let names: Vec<&str> = module_source
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `")?.split('`').next())
        .collect();
    for name in &names {
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "{name} is documented but not served:\n{text}"
        );
    }
    names
}
