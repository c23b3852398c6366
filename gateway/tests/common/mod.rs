//! A real gateway in-process over a log dir with `orders-0` holding 30
//! records (`v0`..`v29`), raw frames sent to it, and stock clients
//! (`tests/fixtures/kafka_clients.py`) consuming from it.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use gateway::groups::Coordinator;
use gateway::producer_ids::ProducerIds;
use gateway::{Appends, DirWriter, Gateway, GatewayConfig, LogView, Shared};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::{LogConfig, LogDir, TopicPartition};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

pub struct Server {
    pub addr: std::net::SocketAddr,
    stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Writes the `orders-0` log dir under `dir`; its root.
pub fn orders_log_dir(dir: &std::path::Path) -> std::path::PathBuf {
    let root = dir.join("logs");
    let logdir = LogDir::open(&root).expect("log dir");
    let tp = TopicPartition::new("orders", 0).expect("tp");
    let mut log = logdir
        .open_or_create_partition(&tp, None, LogConfig::default())
        .expect("create");
    for i in 0..3 {
        let records: Vec<RecordInput> = (0..10)
            .map(|j| RecordInput {
                timestamp: 1_700_000_000_000 + i * 10 + j,
                key: None,
                value: Some(format!("v{}", i * 10 + j).into_bytes()),
                headers: vec![],
            })
            .collect();
        let mut b = build_batch(&BatchSpec::new(0, 0), &records).expect("batch");
        log.append_as_leader(&mut b, 0).expect("append");
    }
    log.close().expect("close");
    root
}

/// What a gateway over `root` shares (its writer on a thread of its own).
pub fn shared(root: &std::path::Path, max_request_bytes: usize) -> Shared {
    let logdir = LogDir::open(root).expect("log dir");
    let view = Arc::new(LogView::new(root));
    let appends = Appends::new();
    let (sender, receiver) = mpsc::channel(16);
    let writer = DirWriter::new(logdir, view.clone(), appends.clone());
    std::thread::spawn(move || writer.run(receiver));
    Shared {
        config: GatewayConfig {
            node_id: 1,
            advertised_host: "127.0.0.1".into(),
            advertised_port: 0,
            cluster_id: "test".into(),
            max_request_bytes,
        },
        groups: Coordinator::load(&view, Some(sender.clone())),
        producer_ids: ProducerIds::new(root),
        security: gateway::security::Security::default(),
        view,
        writer: Some(sender),
        appends,
    }
}

/// A gateway serving a fresh `orders-0` log dir on a free port, advertising
/// `advertise` instead of its own port when given (a capturing proxy).
pub async fn server(max_request_bytes: usize, advertise: Option<u16>) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = orders_log_dir(dir.path());
    let gateway = Gateway::bind(
        "127.0.0.1:0".parse().expect("addr"),
        shared(&root, max_request_bytes),
    )
    .await
    .expect("bind");
    let addr = gateway.local_addr().expect("addr");
    let gateway = gateway.with_advertised_port(advertise.unwrap_or(addr.port()));
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(gateway.serve(stopped));
    Server {
        addr,
        stop,
        _dir: dir,
        task,
    }
}

/// What the server did with one frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response frame (its bytes after the size prefix).
    Answered(Vec<u8>),
    /// The connection was closed.
    Closed,
    /// No answer within the wait (acks=0, or a frame still being read).
    Silent,
}

/// Sends `frame` (size prefix added) on a new connection; what came back.
pub async fn send_frame(addr: std::net::SocketAddr, frame: &[u8], wait: Duration) -> Outcome {
    let mut c = TcpStream::connect(addr).await.expect("connect");
    let mut bytes = (frame.len() as i32).to_be_bytes().to_vec();
    bytes.extend_from_slice(frame);
    if c.write_all(&bytes).await.is_err() {
        return Outcome::Closed;
    }
    read_frame(&mut c, wait).await
}

pub async fn read_frame(c: &mut TcpStream, wait: Duration) -> Outcome {
    match tokio::time::timeout(wait, c.read_i32()).await {
        Err(_) => Outcome::Silent,
        Ok(Err(_)) => Outcome::Closed,
        Ok(Ok(size)) => {
            let mut buf = vec![0u8; usize::try_from(size).expect("size")];
            match c.read_exact(&mut buf).await {
                Ok(_) => Outcome::Answered(buf),
                Err(_) => Outcome::Closed,
            }
        }
    }
}

/// An ApiVersions v0 round trip on a new connection: the server is alive.
pub async fn answers_api_versions(addr: std::net::SocketAddr) -> bool {
    // key 18, version 0, correlation id 7, client id "t".
    let frame = [0, 18, 0, 0, 0, 0, 0, 7, 0, 1, b't'];
    matches!(
        send_frame(addr, &frame, Duration::from_secs(10)).await,
        Outcome::Answered(r) if r.len() > 8 && r[..4] == [0, 0, 0, 7] && r[4..6] == [0, 0]
    )
}

/// Whether to run `client` (kcat or one of the Python clients): false when
/// its `SEGMIRROR_SKIP_*=1` skips it; a missing client fails the test
/// ([`segmirror_testkit::needs`]).
pub fn client_present(client: &str) -> bool {
    if client == "kcat" {
        segmirror_testkit::needs::kcat()
    } else {
        segmirror_testkit::needs::python().is_some()
    }
}

/// The values `client` reads from `orders-0` at `bootstrap` from offset 0
/// (`tests/fixtures/kafka_clients.py consume`).
pub fn consumed_values(client: &str, bootstrap: &str) -> Vec<String> {
    let python = segmirror_testkit::workspace_root().join("tests/.venv/bin/python");
    let script = segmirror_testkit::workspace_root().join("tests/fixtures/kafka_clients.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .args([
            "consume",
            "--client",
            client,
            "--bootstrap",
            bootstrap,
            "--topic",
            "orders",
            "--partition",
            "0",
            "--timeout-s",
            "5",
        ])
        .output()
        .expect("run kafka_clients.py");
    assert!(
        out.status.success(),
        "{client}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(answer["error"].is_null(), "{client}: {}", answer["error"]);
    answer["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            use base64::Engine as _;
            let v = r["value"].as_str().expect("value");
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(v)
                    .expect("b64"),
            )
            .expect("utf-8")
        })
        .collect()
}

/// Asserts that each of kcat and kafka-python reads all 30 records.
pub async fn real_clients_still_consume(addr: std::net::SocketAddr) {
    for client in ["kcat", "kafka-python"] {
        if !client_present(client) {
            continue;
        }
        let bootstrap = addr.to_string();
        let client_name = client.to_string();
        let values = tokio::task::spawn_blocking(move || consumed_values(&client_name, &bootstrap))
            .await
            .expect("client");
        let want: Vec<String> = (0..30).map(|i| format!("v{i}")).collect();
        assert_eq!(values, want, "{client} after hostile frames");
    }
}
