//! The request path under mutation, in the normal test suite: frames
//! captured from kcat, confluent-kafka, kafka-python and aiokafka talking to
//! the gateway (`gateway/tests/corpus/requests/<client>-<api>-<n>.bin`, the
//! bytes after the size prefix) are mutated with a seeded PRNG (byte flips,
//! 4-byte and varint count fields set to huge values, truncations, splices,
//! insertions) and sent to a real in-process gateway over TCP, each followed
//! on the same connection by an ApiVersions request. The gateway must answer
//! it or close the connection, or, when it holds the request (a Fetch whose
//! maximum wait became minutes long-polls, as in Kafka), answer a new
//! connection at once; a panic anywhere fails the test, and an abort or OOM
//! kills the test process, which fails it too.
//!
//! `SEGMIRROR_MUTATION_SECS` is the time box (default 10; `.ci/run` sets
//! 60), `SEGMIRROR_MUTATION_SEED` the seed (default 26). A failure prints the
//! seed and the frame (hex) that caused it.
//!
//! `capture_requests_from_stock_clients` (ignored; run it with
//! `--ignored`) refreshes the corpus: the stock clients talk to the gateway
//! through a proxy that records every request frame.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Outcome, read_frame, server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/requests")
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir())
        .expect("gateway/tests/corpus/requests")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect()
}

/// xorshift64*: a deterministic PRNG (no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Huge values written over a count or length field.
const HUGE_I32: [[u8; 4]; 4] = [
    [0x7f, 0xff, 0xff, 0xff],
    [0xff, 0xff, 0xff, 0xfe],
    [0x00, 0x10, 0x00, 0x00],
    [0x40, 0x00, 0x00, 0x00],
];
const HUGE_VARINTS: [&[u8]; 3] = [
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xfe, 0xff, 0xff, 0xff, 0x07],
    &[0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
];

/// One to four mutations of `frame`, with `other` for splices.
fn mutate(rng: &mut Rng, frame: &[u8], other: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    for _ in 0..1 + rng.below(4) {
        // The header (key, version, correlation id) is kept more often than
        // not so that mutations reach the body decoders.
        let lo = if rng.below(4) == 0 { 0 } else { 8.min(f.len()) };
        let at = lo + rng.below(f.len().saturating_sub(lo).max(1));
        match rng.below(6) {
            0 if !f.is_empty() => {
                let i = at.min(f.len() - 1);
                f[i] ^= 1 << rng.below(8);
            }
            1 => {
                let huge = HUGE_I32[rng.below(HUGE_I32.len())];
                if at + 4 <= f.len() {
                    f[at..at + 4].copy_from_slice(&huge);
                }
            }
            2 => {
                let v = HUGE_VARINTS[rng.below(HUGE_VARINTS.len())];
                let end = (at + v.len()).min(f.len());
                f.splice(at.min(f.len())..end, v.iter().copied());
            }
            3 => f.truncate(at),
            4 => {
                let from = rng.below(other.len());
                let len = rng.below(other.len() - from.min(other.len()) + 1);
                f.truncate(at);
                f.extend_from_slice(&other[from.min(other.len())..(from + len).min(other.len())]);
            }
            _ => {
                let n = 1 + rng.below(8);
                for _ in 0..n {
                    let b = rng.next() as u8;
                    f.insert(at.min(f.len()), b);
                }
            }
        }
    }
    f
}

/// ApiVersions v0, correlation id 0x5EED: sent after each mutated frame.
const PROBE: [u8; 11] = [0, 18, 0, 0, 0, 0, 0x5e, 0xed, 0, 1, b'p'];

fn framed(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_client_requests_never_kill_the_gateway() {
    let panics = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&panics);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        seen.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));

    let corpus = corpus();
    assert!(corpus.len() >= 20, "corpus of {} frames", corpus.len());
    let secs: u64 = std::env::var("SEGMIRROR_MUTATION_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let seed: u64 = std::env::var("SEGMIRROR_MUTATION_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(26);
    let mut rng = Rng(seed.max(1));
    let s = server(1 << 20, None).await;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut sent = 0usize;
    let mut conn: Option<TcpStream> = None;
    while Instant::now() < deadline {
        let (name, frame) = &corpus[rng.below(corpus.len())];
        let (_, other) = &corpus[rng.below(corpus.len())];
        let mutated = if rng.below(16) == 0 {
            frame.clone()
        } else {
            mutate(&mut rng, frame, other)
        };
        let mut c = match conn.take() {
            Some(c) => c,
            None => TcpStream::connect(s.addr).await.expect("connect"),
        };
        let mut bytes = framed(&mutated);
        bytes.extend_from_slice(&framed(&PROBE));
        sent += 1;
        if c.write_all(&bytes).await.is_err() {
            *outcomes.entry("closed").or_default() += 1;
            continue;
        }
        // Responses until the probe's (correlation id 0x5EED), or a close.
        let outcome = loop {
            match read_frame(&mut c, Duration::from_secs(2)).await {
                Outcome::Answered(r) if r.get(..4) == Some(&[0, 0, 0x5e, 0xed]) => break "answered",
                Outcome::Answered(_) => continue,
                Outcome::Closed => break "closed",
                // A Fetch whose max wait became minutes long-polls, as
                // Kafka does: the connection is dropped, and the gateway
                // must still answer another one at once.
                Outcome::Silent => {
                    assert!(
                        common::answers_api_versions(s.addr).await,
                        "seed {seed}: the gateway stopped answering after a mutation of {name}: {}",
                        hex(&mutated)
                    );
                    break "waiting";
                }
            }
        };
        *outcomes.entry(outcome).or_default() += 1;
        if outcome == "answered" {
            conn = Some(c);
        }
        assert_eq!(
            panics.load(Ordering::SeqCst),
            0,
            "seed {seed}: a panic on a mutation of {name}: {}",
            hex(&mutated)
        );
    }
    assert!(common::answers_api_versions(s.addr).await);
    eprintln!("{sent} mutated frames in {secs} s (seed {seed}): {outcomes:?}");
    assert!(sent > 100, "only {sent} frames sent");
    assert_eq!(panics.load(Ordering::SeqCst), 0);
    s.shutdown().await;
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Records every request frame a client sends through it to `upstream`.
async fn capturing_proxy(
    listener: TcpListener,
    upstream: std::net::SocketAddr,
    frames: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
) {
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            return;
        };
        let frames = Arc::clone(&frames);
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let (mut sr, mut sw) = server.into_split();
            let (mut cr, mut cw) = client.split();
            let to_server = async {
                while let Ok(size) = cr.read_i32().await {
                    let mut body = vec![0u8; size.max(0) as usize];
                    if cr.read_exact(&mut body).await.is_err() {
                        break;
                    }
                    frames.lock().expect("frames").push(body.clone());
                    if sw.write_all(&framed(&body)).await.is_err() {
                        break;
                    }
                }
                let _ = sw.shutdown().await;
            };
            let to_client = async {
                let _ = tokio::io::copy(&mut sr, &mut cw).await;
            };
            tokio::join!(to_server, to_client);
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "refreshes gateway/tests/corpus/requests from the stock clients"]
async fn capture_requests_from_stock_clients() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy = listener.local_addr().expect("addr");
    let s = server(1 << 20, Some(proxy.port())).await;
    let frames = Arc::new(std::sync::Mutex::new(Vec::new()));
    tokio::spawn(capturing_proxy(listener, s.addr, Arc::clone(&frames)));
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("corpus dir");
    for client in ["kcat", "confluent-kafka", "kafka-python", "aiokafka"] {
        assert!(common::client_present(client), "{client}");
        frames.lock().expect("frames").clear();
        let bootstrap = proxy.to_string();
        let c = client.to_string();
        tokio::task::spawn_blocking(move || {
            let python = segmirror_testkit::workspace_root().join("tests/.venv/bin/python");
            let script =
                segmirror_testkit::workspace_root().join("tests/fixtures/kafka_clients.py");
            for args in [
                vec![
                    "consume",
                    "--client",
                    &c,
                    "--bootstrap",
                    &bootstrap,
                    "--topic",
                    "orders",
                    "--timeout-s",
                    "3",
                ],
                vec![
                    "produce",
                    "--client",
                    &c,
                    "--bootstrap",
                    &bootstrap,
                    "--topic",
                    "orders",
                    "--value",
                    "captured",
                ],
                vec![
                    "group",
                    "--client",
                    &c,
                    "--bootstrap",
                    &bootstrap,
                    "--topic",
                    "orders",
                    "--group",
                    "capture",
                    "--max",
                    "3",
                    "--timeout-s",
                    "10",
                ],
            ] {
                let out = std::process::Command::new(&python)
                    .arg(&script)
                    .args(&args)
                    .output()
                    .expect("client");
                assert!(
                    out.status.success(),
                    "{args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        })
        .await
        .expect("client");
        // At most 3 frames per (client, API) so the corpus stays small.
        let mut per_api: BTreeMap<i16, usize> = BTreeMap::new();
        for f in frames.lock().expect("frames").iter() {
            if f.len() < 2 {
                continue;
            }
            let key = i16::from_be_bytes([f[0], f[1]]);
            let n = per_api.entry(key).or_default();
            if *n < 3 {
                let api = kafka_protocol::messages::ApiKey::try_from(key)
                    .map(|k| format!("{k:?}"))
                    .unwrap_or_else(|_| format!("key{key}"));
                std::fs::write(dir.join(format!("{client}-{api}-{n}.bin")), f).expect("write");
                *n += 1;
            }
        }
        eprintln!("{client}: {per_api:?}");
    }
    s.shutdown().await;
}
