//! The gateway's whole request path: a 4-byte size prefix, then the frame
//! (request header and body) through `gateway::request::answer_frame`, the
//! function the listener calls for every frame it reads (header decode, API
//! key, SASL gate, body decode with the patched `kafka-protocol`, dispatch
//! to the handler), against a small real log dir (`orders-0`, 30 records)
//! built once. A size prefix the listener would refuse (under 4 bytes, or
//! over the 1 MiB cap used here) or one longer than the input ends the
//! input, as the listener closes the connection or waits for more bytes.
//! A request still held after 100 ms (a long poll) is dropped.
//!
//! What must hold: no panic, no abort, no allocation past libFuzzer's
//! `-rss_limit_mb` (2 GiB by default). Seeds: the frames captured from
//! kcat, confluent-kafka, kafka-python and aiokafka in
//! `gateway/tests/corpus/requests/` (size prefix added by `seed_corpus`).
#![no_main]

use std::sync::{Arc, OnceLock};

use gateway::groups::Coordinator;
use gateway::producer_ids::ProducerIds;
use gateway::{Appends, DirWriter, GatewayConfig, LogView, Shared};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::{LogConfig, LogDir, TopicPartition};
use libfuzzer_sys::fuzz_target;

const MAX_REQUEST_BYTES: usize = 1 << 20;

struct World {
    runtime: tokio::runtime::Runtime,
    shared: Shared,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        let root = dir.join("logs");
        let logdir = LogDir::open(&root).expect("log dir");
        let tp = TopicPartition::new("orders", 0).expect("tp");
        let mut log = logdir
            .open_or_create_partition(&tp, None, LogConfig::default())
            .expect("create");
        let records: Vec<RecordInput> = (0..30)
            .map(|i| RecordInput {
                timestamp: 1_700_000_000_000 + i,
                key: None,
                value: Some(format!("v{i}").into_bytes()),
                headers: vec![],
            })
            .collect();
        let mut b = build_batch(&BatchSpec::new(0, 0), &records).expect("batch");
        log.append_as_leader(&mut b, 0).expect("append");
        log.close().expect("close");
        // The writer below opens the dir again: release its lock first.
        drop(logdir);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let shared = runtime.block_on(async {
            let logdir = LogDir::open(&root).expect("log dir");
            let view = Arc::new(LogView::new(&root));
            let appends = Appends::new();
            let (sender, receiver) = tokio::sync::mpsc::channel(16);
            let writer = DirWriter::new(logdir, view.clone(), appends.clone());
            std::thread::spawn(move || writer.run(receiver));
            Shared {
                config: GatewayConfig {
                    node_id: 1,
                    advertised_host: "127.0.0.1".into(),
                    advertised_port: 9092,
                    cluster_id: "fuzz".into(),
                    max_request_bytes: MAX_REQUEST_BYTES,
                },
                groups: Coordinator::load(&view, Some(sender.clone())),
                producer_ids: ProducerIds::new(&root),
                security: gateway::security::Security::default(),
                view,
                writer: Some(sender),
                appends,
            }
        });
        World { runtime, shared }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((prefix, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let Ok(size) = usize::try_from(i32::from_be_bytes(*prefix)) else {
        return;
    };
    if !(4..=MAX_REQUEST_BYTES).contains(&size) || size > rest.len() {
        return;
    }
    let frame = bytes::Bytes::copy_from_slice(&rest[..size]);
    let w = world();
    let peer = "127.0.0.1:1".parse().expect("addr");
    // A request the gateway holds (a Fetch long-polling for its max wait, a
    // JoinGroup waiting for its rebalance) is dropped after 100 ms, as a
    // closed connection drops it: decoding and dispatch are what is fuzzed.
    let _ = w.runtime.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_millis(100),
            gateway::request::answer_frame(&w.shared, frame, peer),
        )
        .await
    });
});
