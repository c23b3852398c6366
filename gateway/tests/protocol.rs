//! The gateway at the protocol level, for what stock clients cannot be made
//! to do on purpose: resend a batch, ask for an offset out of range or a
//! version nobody speaks, send an oversized request, hang up mid-request.
//! Requests are encoded with the `kafka-protocol` crate's client codecs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use gateway::groups::Coordinator;
use gateway::producer_ids::ProducerIds;
use gateway::{Appends, DirWriter, Gateway, GatewayConfig, LogView, Shared};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, FetchRequest, FetchResponse, InitProducerIdRequest,
    InitProducerIdResponse, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
    RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::{LogDir, TopicPartition};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

struct Server {
    addr: std::net::SocketAddr,
    stop: watch::Sender<bool>,
    _dir: Option<tempfile::TempDir>,
    root: std::path::PathBuf,
    task: tokio::task::JoinHandle<()>,
    writer: std::thread::JoinHandle<()>,
}

impl Server {
    /// A clean shutdown: the listener ends, then the writer closes the
    /// partitions (saving producer snapshots). Returns the dir.
    async fn shutdown(self) -> (Option<tempfile::TempDir>, std::path::PathBuf) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let writer = self.writer;
        tokio::task::spawn_blocking(move || writer.join())
            .await
            .expect("join")
            .expect("writer");
        (self._dir, self.root)
    }
}

/// A gateway serving a log dir with `orders-0` holding 30 records.
async fn server() -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = common::orders_log_dir(dir.path());
    let mut s = serve_dir(root).await;
    s._dir = Some(dir);
    s
}

/// A gateway serving the existing log dir `root`.
async fn serve_dir(root: std::path::PathBuf) -> Server {
    let logdir = LogDir::open(&root).expect("log dir");
    let view = Arc::new(LogView::new(&root));
    let appends = Appends::new();
    let (sender, receiver) = mpsc::channel(16);
    let writer = DirWriter::new(logdir, view.clone(), appends.clone());
    let writer = std::thread::spawn(move || writer.run(receiver));
    let shared = Shared {
        config: GatewayConfig {
            node_id: 1,
            advertised_host: "127.0.0.1".into(),
            advertised_port: 0,
            cluster_id: "test".into(),
            max_request_bytes: 1 << 20,
        },
        groups: Coordinator::load(&view, Some(sender.clone())),
        producer_ids: ProducerIds::new(&root),
        security: gateway::security::Security::default(),
        view,
        writer: Some(sender),
        appends,
    };
    let gateway = Gateway::bind("127.0.0.1:0".parse().expect("addr"), shared)
        .await
        .expect("bind");
    let addr = gateway.local_addr().expect("addr");
    let gateway = gateway.with_advertised_port(addr.port());
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(gateway.serve(stopped));
    Server {
        addr,
        stop,
        _dir: None,
        root,
        task,
        writer,
    }
}

/// Sends one request; its response body, or `None` when the server closed
/// the connection.
async fn call<Req: Encodable, Resp: Decodable>(
    stream: &mut TcpStream,
    key: ApiKey,
    version: i16,
    request: &Req,
) -> Option<Resp> {
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("protocol-test")))
        .encode(&mut body, key.request_header_version(version))
        .expect("header");
    request.encode(&mut body, version).expect("request");
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await.ok()?;
    let size = stream.read_i32().await.ok()?;
    let mut buf = vec![0u8; size as usize];
    stream.read_exact(&mut buf).await.ok()?;
    let mut buf = Bytes::from(buf);
    let header = ResponseHeader::decode(&mut buf, key.response_header_version(version)).ok()?;
    assert_eq!(header.correlation_id, 7);
    Some(Resp::decode(&mut buf, version).expect("response"))
}

fn orders() -> TopicName {
    TopicName(StrBytes::from_static_str("orders"))
}

fn idempotent_batch(pid: i64, seq: i32, value: &str) -> Bytes {
    let mut spec = BatchSpec::new(0, 0);
    spec.producer_id = pid;
    spec.producer_epoch = 0;
    spec.base_sequence = seq;
    let records = [RecordInput {
        timestamp: 1_700_000_001_000,
        key: None,
        value: Some(value.as_bytes().to_vec()),
        headers: vec![],
    }];
    Bytes::from(build_batch(&spec, &records).expect("batch"))
}

fn produce_request(records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(orders())
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ])
}

fn log_end(root: &std::path::Path) -> i64 {
    let reader = kafkalog::reader::PartitionReader::open(
        root,
        &TopicPartition::new("orders", 0).expect("tp"),
    )
    .expect("reader");
    reader
        .for_each_batch(0, true, |_, _| std::ops::ControlFlow::Continue(()))
        .expect("walk")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_idempotent_batch_is_written_once_and_answered_with_its_offset() {
    let s = server().await;
    let mut c = TcpStream::connect(s.addr).await.expect("connect");
    let init: InitProducerIdResponse = call(
        &mut c,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60000)
            .with_producer_id(kafka_protocol::messages::ProducerId(-1))
            .with_producer_epoch(-1),
    )
    .await
    .expect("answer");
    assert_eq!(init.error_code, 0);
    let pid = init.producer_id.0;
    assert!(pid > 1 << 50, "{pid}");

    let first: ProduceResponse = call(
        &mut c,
        ApiKey::Produce,
        8,
        &produce_request(idempotent_batch(pid, 0, "a")),
    )
    .await
    .expect("answer");
    let p = &first.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 30));
    // The same batch again, as a producer resends one whose answer it lost.
    let again: ProduceResponse = call(
        &mut c,
        ApiKey::Produce,
        8,
        &produce_request(idempotent_batch(pid, 0, "a")),
    )
    .await
    .expect("answer");
    let p = &again.responses[0].partition_responses[0];
    assert_eq!(
        (p.error_code, p.base_offset),
        (0, 30),
        "the first offset, no error"
    );
    assert_eq!(log_end(&s.root), 31, "written once");
    // A gap in the sequence is refused, nothing written.
    let gap: ProduceResponse = call(
        &mut c,
        ApiKey::Produce,
        8,
        &produce_request(idempotent_batch(pid, 5, "b")),
    )
    .await
    .expect("answer");
    assert_eq!(
        gap.responses[0].partition_responses[0].error_code,
        ResponseError::OutOfOrderSequenceNumber.code()
    );
    assert_eq!(log_end(&s.root), 31);
    let next: ProduceResponse = call(
        &mut c,
        ApiKey::Produce,
        8,
        &produce_request(idempotent_batch(pid, 1, "b")),
    )
    .await
    .expect("answer");
    assert_eq!(next.responses[0].partition_responses[0].base_offset, 31);
    drop(c);

    // A clean shutdown saves the producers as Kafka does: `<log-end>.snapshot`.
    let (dir, root) = s.shutdown().await;
    let partition = root.join("orders-0");
    let snapshot = kafkalog::segment::file_path(&partition, 32, kafkalog::segment::SNAPSHOT_SUFFIX);
    let entries =
        kafkalog::snapshot::read_snapshot(&snapshot).expect("the snapshot at the log end");
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (
            entries[0].producer_id,
            entries[0].last_sequence,
            entries[0].last_offset
        ),
        (pid, 1, 31)
    );
    // After a restart, the same batch resent is still recognised.
    let s = serve_dir(root.clone()).await;
    let mut c = TcpStream::connect(s.addr).await.expect("connect");
    let again: ProduceResponse = call(
        &mut c,
        ApiKey::Produce,
        8,
        &produce_request(idempotent_batch(pid, 1, "b")),
    )
    .await
    .expect("answer");
    let p = &again.responses[0].partition_responses[0];
    assert_eq!(
        (p.error_code, p.base_offset),
        (0, 31),
        "a duplicate across the restart"
    );
    assert_eq!(log_end(&root), 32, "written once");
    drop(c);
    let _ = s.shutdown().await;
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_answered_as_kafka_answers_them_and_change_nothing() {
    let s = server().await;
    let mut c = TcpStream::connect(s.addr).await.expect("connect");

    // Unknown topic: in Metadata, Fetch and Produce.
    let md: MetadataResponse = call(
        &mut c,
        ApiKey::Metadata,
        9,
        &MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("nope")))),
        ])),
    )
    .await
    .expect("answer");
    assert_eq!(
        md.topics[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    let fetch = |topic: TopicName, offset: i64| {
        FetchRequest::default()
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(topic)
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(0)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ])
    };
    let f: FetchResponse = call(
        &mut c,
        ApiKey::Fetch,
        11,
        &fetch(TopicName(StrBytes::from_static_str("nope")), 0),
    )
    .await
    .expect("answer");
    assert_eq!(
        f.responses[0].partitions[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    // Out of range: the answer carries the log start and end.
    let f: FetchResponse = call(&mut c, ApiKey::Fetch, 11, &fetch(orders(), 99))
        .await
        .expect("answer");
    let p = &f.responses[0].partitions[0];
    assert_eq!(p.error_code, ResponseError::OffsetOutOfRange.code());
    assert_eq!((p.log_start_offset, p.high_watermark), (0, 30));
    // In range: whole batches from the one holding the offset.
    let f: FetchResponse = call(&mut c, ApiKey::Fetch, 11, &fetch(orders(), 15))
        .await
        .expect("answer");
    let p = &f.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let records = p.records.clone().expect("records");
    let first = kafkalog::batch::parse_header(&records, 0).expect("a batch");
    assert_eq!(first.base_offset, 10, "the batch holding offset 15");

    // ApiVersions at a version nobody speaks: v0 answer, UNSUPPORTED_VERSION
    // and the list (the client then retries lower).
    let v: ApiVersionsResponse = call(
        &mut c,
        ApiKey::ApiVersions,
        0,
        &kafka_protocol::messages::ApiVersionsRequest::default(),
    )
    .await
    .expect("answer");
    assert_eq!(v.error_code, 0);
    assert!(
        v.api_keys
            .iter()
            .any(|k| k.api_key == ApiKey::Fetch as i16 && k.max_version == 12)
    );
    {
        let mut raw = TcpStream::connect(s.addr).await.expect("connect");
        let mut body = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::ApiVersions as i16)
            .with_request_api_version(99)
            .with_correlation_id(1)
            .encode(&mut body, ApiKey::ApiVersions.request_header_version(99))
            .expect("header");
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        raw.write_all(&frame).await.expect("write");
        let size = raw.read_i32().await.expect("size");
        let mut buf = vec![0u8; size as usize];
        raw.read_exact(&mut buf).await.expect("body");
        let mut buf = Bytes::from(buf);
        let _ = ResponseHeader::decode(&mut buf, 0).expect("header");
        let v = ApiVersionsResponse::decode(&mut buf, 0).expect("v0 body");
        assert_eq!(v.error_code, ResponseError::UnsupportedVersion.code());
        assert!(!v.api_keys.is_empty());
    }
    // Another API at an unsupported version: the connection is closed.
    {
        let mut raw = TcpStream::connect(s.addr).await.expect("connect");
        let mut body = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::Fetch as i16)
            .with_request_api_version(3)
            .with_correlation_id(1)
            .encode(&mut body, 1)
            .expect("header");
        body.extend_from_slice(&[0u8; 32]);
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        raw.write_all(&frame).await.expect("write");
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
    }
    // An oversized request is refused before its body is read.
    {
        let mut raw = TcpStream::connect(s.addr).await.expect("connect");
        raw.write_all(&(64i32 << 20).to_be_bytes())
            .await
            .expect("write");
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
    }
    // A client that hangs up in the middle of a produce changes nothing.
    {
        let mut raw = TcpStream::connect(s.addr).await.expect("connect");
        let mut body = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(8)
            .with_correlation_id(1)
            .encode(&mut body, 1)
            .expect("header");
        produce_request(idempotent_batch(-1, -1, "lost"))
            .encode(&mut body, 8)
            .expect("body");
        raw.write_all(&(body.len() as i32).to_be_bytes())
            .await
            .expect("size");
        raw.write_all(&body[..body.len() / 2]).await.expect("half");
        drop(raw);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(log_end(&s.root), 30, "nothing written");
    // The first connection still works.
    let md: MetadataResponse = call(
        &mut c,
        ApiKey::Metadata,
        1,
        &MetadataRequest::default().with_topics(None),
    )
    .await
    .expect("still served");
    assert_eq!(md.topics.len(), 1);
    let _ = s.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_cluster_names_this_node_as_the_cluster() {
    let s = server().await;
    let mut c = TcpStream::connect(s.addr).await.expect("connect");
    let r: kafka_protocol::messages::DescribeClusterResponse = call(
        &mut c,
        ApiKey::DescribeCluster,
        1,
        &kafka_protocol::messages::DescribeClusterRequest::default().with_endpoint_type(1),
    )
    .await
    .expect("answer");
    assert_eq!(r.error_code, 0);
    assert_eq!(r.cluster_id.as_str(), "test");
    assert_eq!(r.controller_id.0, 1);
    assert_eq!(r.brokers.len(), 1);
    assert_eq!(r.brokers[0].port, i32::from(s.addr.port()));
    let _ = s.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_configs_shows_what_the_log_dir_knows() {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let s = server().await;
    let mut c = TcpStream::connect(s.addr).await.expect("connect");
    let resource = |name: &'static str| {
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str(name))
            .with_configuration_keys(None)
    };
    let r: kafka_protocol::messages::DescribeConfigsResponse = call(
        &mut c,
        ApiKey::DescribeConfigs,
        1,
        &kafka_protocol::messages::DescribeConfigsRequest::default()
            .with_resources(vec![resource("orders"), resource("nope")]),
    )
    .await
    .expect("answer");
    assert_eq!(r.results[0].error_code, 0);
    let state = r.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "segmirror.mirror.state")
        .expect("the mirror state");
    assert_eq!(
        state.value.as_ref().map(|v| v.as_str()),
        Some("none"),
        "not a mirror"
    );
    assert!(state.read_only);
    assert_eq!(
        r.results[1].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    let _ = s.stop.send(true);
}

/// Marks `orders-0` of `root` a mirror in `state` whose record holds
/// `retention.ms=60000` (the topic's) and `max.message.bytes=500` (the
/// source cluster's default).
fn mirror_with_configs(root: &std::path::Path, state: &str) {
    use manifest::topic_config::{ConfigSource, ConfigValue};
    let state: manifest::state::MirrorState = serde_json::from_str(&format!(
        r#"{{"state":"{state}","previous":null,"retries":0}}"#
    ))
    .expect("state");
    let mut record = manifest::mirror_record::MirrorRecord::new(
        "src-1",
        "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
        state,
        1_700_000_000_000,
    );
    let value = |v: &str, source| ConfigValue {
        value: v.into(),
        source,
    };
    record.topic_configs = Some(
        [
            (
                "retention.ms".to_string(),
                value("60000", ConfigSource::Topic),
            ),
            (
                "max.message.bytes".to_string(),
                value("500", ConfigSource::DynamicClusterDefault),
            ),
        ]
        .into_iter()
        .collect(),
    );
    partdir::record::write(&record, &root.join("orders-0")).expect("record");
}

async fn describe_orders(
    c: &mut TcpStream,
    keys: Option<Vec<&'static str>>,
) -> Vec<kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let resource = DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_static_str("orders"))
        .with_configuration_keys(
            keys.map(|k| k.into_iter().map(StrBytes::from_static_str).collect()),
        );
    let r: kafka_protocol::messages::DescribeConfigsResponse = call(
        c,
        ApiKey::DescribeConfigs,
        2,
        &kafka_protocol::messages::DescribeConfigsRequest::default()
            .with_include_synonyms(true)
            .with_resources(vec![resource]),
    )
    .await
    .expect("answer");
    assert_eq!(r.results[0].error_code, 0);
    r.results[0].configs.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_describes_its_copied_configs_and_a_stopped_one_enforces_max_message_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = common::orders_log_dir(dir.path());
    mirror_with_configs(&root, "MIRRORING");
    let s = serve_dir(root.clone()).await;
    let mut c = TcpStream::connect(s.addr).await.expect("connect");
    let configs = describe_orders(&mut c, None).await;
    let find = |name: &str| {
        configs
            .iter()
            .find(|c| c.name.as_str() == name)
            .unwrap_or_else(|| panic!("{name} in {configs:?}"))
            .clone()
    };
    let retention = find("retention.ms");
    assert_eq!(retention.value.as_deref(), Some("60000"));
    assert_eq!(retention.config_source, 1, "the topic's own");
    assert!(
        retention.read_only,
        "a MIRRORING topic's configs are the source's"
    );
    assert_eq!(retention.synonyms[0].name.as_str(), "retention.ms");
    let max = find("max.message.bytes");
    assert_eq!((max.value.as_deref(), max.config_source), (Some("500"), 3));
    assert_eq!(max.synonyms[0].name.as_str(), "message.max.bytes");
    let policy = find("cleanup.policy");
    assert_eq!(
        (policy.value.as_deref(), policy.config_source),
        (Some("delete"), 5),
        "Kafka's default for a key the record does not hold"
    );
    assert_eq!(
        find("segmirror.mirror.state").value.as_deref(),
        Some("MIRRORING")
    );
    // Only the keys asked for.
    let some = describe_orders(&mut c, Some(vec!["retention.ms", "segmirror.mirror.state"])).await;
    let names: Vec<&str> = some.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["retention.ms", "segmirror.mirror.state"]);

    // After the stop: writable, and a producer's batch over the source's
    // max.message.bytes is refused with MESSAGE_TOO_LARGE, nothing written.
    mirror_with_configs(&root, "STOPPED");
    let configs = describe_orders(&mut c, Some(vec!["retention.ms"])).await;
    assert!(!configs[0].read_only, "a STOPPED mirror owns its configs");
    let before = log_end(&root);
    let records = [RecordInput {
        timestamp: 1_700_000_001_000,
        key: None,
        value: Some(vec![b'x'; 600]),
        headers: vec![],
    }];
    let big = Bytes::from(build_batch(&BatchSpec::new(0, -1), &records).expect("batch"));
    let r: ProduceResponse = call(&mut c, ApiKey::Produce, 8, &produce_request(big))
        .await
        .expect("answer");
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, ResponseError::MessageTooLarge.code(), "{p:?}");
    assert_eq!(log_end(&root), before, "nothing written");
    let fits = [RecordInput {
        value: Some(b"fits".to_vec()),
        ..records[0].clone()
    }];
    let small = Bytes::from(build_batch(&BatchSpec::new(0, -1), &fits).expect("batch"));
    let r: ProduceResponse = call(&mut c, ApiKey::Produce, 8, &produce_request(small))
        .await
        .expect("answer");
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    assert_eq!(log_end(&root), before + 1);
    s.shutdown().await;
}
