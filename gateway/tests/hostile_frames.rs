//! Issue 26's acceptance test for the request path: frames whose array,
//! compact-array, string, bytes, record and record-header counts claim
//! billions of elements, and compressed produce batches that expand past
//! the cap, sent to a real gateway over TCP. After each, the gateway
//! answers with an error or closes that connection, still answers the next
//! connection, and at the end kcat and kafka-python consume all of
//! `orders-0` from it. Unpatched, the first frame aborted the process
//! (`memory allocation of ... bytes failed`).

mod common;

use std::time::{Duration, Instant};

use common::{Outcome, answers_api_versions, real_clients_still_consume, send_frame, server};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafkalog::batch::Compression;

/// Zigzag-free unsigned varint of u32::MAX: a compact count of 2^32-2.
const HUGE_UVARINT: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];
/// Int32 i32::MAX: an array count or bytes length of 2^31-1.
const HUGE_I32: [u8; 4] = [0x7f, 0xff, 0xff, 0xff];

/// A request header v1 (key, version, correlation id 7, client id "h").
fn header_v1(key: i16, version: i16) -> Vec<u8> {
    let mut h = key.to_be_bytes().to_vec();
    h.extend_from_slice(&version.to_be_bytes());
    h.extend_from_slice(&7i32.to_be_bytes());
    h.extend_from_slice(&[0, 1, b'h']);
    h
}

/// A request header v2: v1 plus an empty tagged-field section.
fn header_v2(key: i16, version: i16) -> Vec<u8> {
    let mut h = header_v1(key, version);
    h.push(0);
    h
}

fn frame(head: Vec<u8>, body: &[&[u8]]) -> Vec<u8> {
    let mut f = head;
    for part in body {
        f.extend_from_slice(part);
    }
    f
}

/// (name, frame) for every hostile count the request path reads.
fn hostile_count_frames() -> Vec<(&'static str, Vec<u8>)> {
    let produce_head = [0xff, 0xff, 0, 1, 0, 0, 0x13, 0x88]; // txn id null, acks 1, timeout
    let topic = [0, 6, b'o', b'r', b'd', b'e', b'r', b's'];
    vec![
        (
            "Metadata v1 topics array count 2^31-1",
            frame(header_v1(3, 1), &[&HUGE_I32, &[0, 1, b'x']]),
        ),
        (
            "Metadata v9 topics compact-array count 2^32-2",
            frame(header_v2(3, 9), &[&HUGE_UVARINT, &[2, b'x', 0]]),
        ),
        (
            "Metadata v12 topics compact-array count 2^32-2",
            frame(header_v2(3, 12), &[&HUGE_UVARINT, &[0; 17]]),
        ),
        (
            "Metadata v9 topic name compact-string length 2^32-2",
            frame(header_v2(3, 9), &[&[2], &HUGE_UVARINT, b"x"]),
        ),
        (
            "Metadata v9 tagged-field count 2^32-1",
            frame(header_v2(3, 9), &[&[1], &HUGE_UVARINT]),
        ),
        (
            "header v2 tagged-field count 2^32-1",
            frame(header_v1(3, 9), &[&HUGE_UVARINT, &[1]]),
        ),
        (
            "header client id length 32767",
            frame([0, 3, 0, 1, 0, 0, 0, 7, 0x7f, 0xff, b'h'].to_vec(), &[]),
        ),
        (
            "ApiVersions v3 client name compact-string length 2^32-2",
            frame(header_v2(18, 3), &[&HUGE_UVARINT, b"x"]),
        ),
        (
            "ApiVersions v3 tagged-field count 2^32-1",
            frame(header_v2(18, 3), &[&[1, b'x', 1, b'y'], &HUGE_UVARINT]),
        ),
        (
            "Produce v3 topics array count 2^31-1",
            frame(header_v1(0, 3), &[&produce_head, &HUGE_I32]),
        ),
        (
            "Produce v3 partitions array count 2^31-1",
            frame(
                header_v1(0, 3),
                &[&produce_head, &[0, 0, 0, 1], &topic, &HUGE_I32],
            ),
        ),
        (
            "Produce v3 records bytes length 2^31-1",
            frame(
                header_v1(0, 3),
                &[
                    &produce_head,
                    &[0, 0, 0, 1],
                    &topic,
                    &[0, 0, 0, 1, 0, 0, 0, 0],
                    &HUGE_I32,
                    &[0; 8],
                ],
            ),
        ),
        (
            "Produce v8 topics array count 2^31-1",
            frame(header_v1(0, 8), &[&produce_head, &HUGE_I32, &[1]]),
        ),
        (
            "Fetch v4 topics array count 2^31-1",
            frame(
                header_v1(1, 4),
                &[
                    &[
                        0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0x10, 0, 0, 0,
                    ],
                    &HUGE_I32,
                ],
            ),
        ),
        (
            "Fetch v12 topics compact-array count 2^32-2",
            frame(
                header_v2(1, 12),
                &[
                    &[
                        0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0x10, 0, 0, 0, 0, 0, 0,
                        0, 0, 0, 0, 0,
                    ],
                    &HUGE_UVARINT,
                ],
            ),
        ),
        (
            "ListOffsets v1 topics array count 2^31-1",
            frame(header_v1(2, 1), &[&[0xff, 0xff, 0xff, 0xff], &HUGE_I32]),
        ),
        (
            "OffsetCommit v7 topics array count 2^31-1",
            frame(
                header_v1(8, 7),
                &[&[0, 1, b'g', 0, 0, 0, 1, 0, 1, b'm', 0xff, 0xff], &HUGE_I32],
            ),
        ),
        (
            "JoinGroup v5 protocols array count 2^31-1",
            frame(
                header_v1(11, 5),
                &[
                    &[
                        0, 1, b'g', 0, 0, 0x75, 0x30, 0, 0, 0x75, 0x30, 0, 0, 0xff, 0xff, 0, 1,
                        b'c',
                    ],
                    &HUGE_I32,
                ],
            ),
        ),
        (
            "DescribeConfigs v1 resources array count 2^31-1",
            frame(header_v1(32, 1), &[&HUGE_I32]),
        ),
    ]
}

fn produce_frame(records: Vec<u8>) -> Vec<u8> {
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("orders")))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records.into())),
                ]),
        ]);
    let mut f = bytes::BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(8)
        .with_correlation_id(7)
        .encode(&mut f, ApiKey::Produce.request_header_version(8))
        .expect("header");
    request.encode(&mut f, 8).expect("request");
    f.to_vec()
}

/// A one-record batch whose record count, or whose record's header count,
/// is replaced (CRC fixed up), so that only the count is wrong.
fn batch_claiming(record_count: i32, header_count_varint: &[u8]) -> Vec<u8> {
    let spec = kafkalog::builder::BatchSpec::new(0, 0);
    let one = [kafkalog::builder::RecordInput {
        timestamp: 1,
        key: None,
        value: Some(b"v".to_vec()),
        headers: vec![],
    }];
    let mut b = kafkalog::builder::build_batch(&spec, &one).expect("batch");
    b[57..61].copy_from_slice(&record_count.to_be_bytes());
    // The record: length, attributes, timestamp delta, offset delta, key
    // length -1, value length 1, "v", header count 0.
    let last = b.len() - 1;
    assert_eq!(b[last], 0, "header count");
    b.truncate(last);
    b.extend_from_slice(header_count_varint);
    b[61] = (((b.len() - 62) * 2) as u8).min(0x7e);
    let batch_length = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = kafkalog::batch::compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// The error code of the only partition of a Produce v8 response.
fn produce_error(response: &[u8]) -> i16 {
    let mut buf = bytes::Bytes::copy_from_slice(&response[4..]);
    let r = ProduceResponse::decode(&mut buf, 8).expect("produce response");
    r.responses[0].partition_responses[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_counts_and_decompression_bombs_get_an_error_and_the_gateway_keeps_serving() {
    let s = server(8 << 20, None).await;
    let wait = Duration::from_secs(10);

    for (name, f) in hostile_count_frames() {
        let started = Instant::now();
        let outcome = send_frame(s.addr, &f, wait).await;
        assert_ne!(outcome, Outcome::Silent, "{name}: no answer and no close");
        if let Outcome::Answered(r) = &outcome {
            assert_eq!(r[..4], [0, 0, 0, 7], "{name}: correlation id");
        }
        assert!(
            answers_api_versions(s.addr).await,
            "{name}: the gateway stopped answering"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{name}: {:?}",
            started.elapsed()
        );
    }

    // Counts inside the records of a Produce: refused with CORRUPT_MESSAGE
    // (2), nothing written.
    for (name, batch) in [
        ("record count 2^31-1", batch_claiming(i32::MAX, &[0])),
        (
            "record header count 2^31-1",
            batch_claiming(1, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
        ),
    ] {
        match send_frame(s.addr, &produce_frame(batch), wait).await {
            Outcome::Answered(r) => assert_eq!(produce_error(&r), 2, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }

    // Decompression bombs: each expands to at least 96 MiB (gzip, lz4 1
    // GiB, zstd 4 GiB) from at most 8 MiB; refused past 64 MiB.
    for (codec, total) in [
        (Compression::Gzip, 1usize << 30),
        (Compression::Zstd, 4 << 30),
        (Compression::Lz4, 1 << 30),
        (Compression::Snappy, 96 << 20),
    ] {
        let bomb = kafkalog::builder::decompression_bomb(codec, total).expect("bomb");
        let started = Instant::now();
        match send_frame(
            s.addr,
            &produce_frame(bomb.clone()),
            Duration::from_secs(60),
        )
        .await
        {
            Outcome::Answered(r) => assert_eq!(produce_error(&r), 2, "{codec} bomb"),
            other => panic!("{codec} bomb of {} bytes: {other:?}", bomb.len()),
        }
        eprintln!(
            "{codec} bomb: {} bytes claiming {total} refused in {:?}",
            bomb.len(),
            started.elapsed()
        );
        assert!(answers_api_versions(s.addr).await, "{codec} bomb");
    }

    real_clients_still_consume(s.addr).await;
    s.shutdown().await;
}

/// A legal Metadata v9 request naming `topics` empty topic names: 2 bytes a
/// topic on the wire, a struct of tens of bytes each once decoded.
fn metadata_v9_of_empty_topics(topics: usize) -> Vec<u8> {
    let mut f = header_v2(3, 9);
    let mut n = topics + 1; // compact array: count + 1, unsigned varint
    while n >= 0x80 {
        f.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    f.push(n as u8);
    for _ in 0..topics {
        f.extend_from_slice(&[1, 0]); // name "" (compact), no tagged fields
    }
    // allow_auto_topic_creation, cluster and topic authorized operations,
    // no tagged fields.
    f.extend_from_slice(&[0, 0, 0, 0]);
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legal_request_that_would_decode_past_the_in_flight_budget_is_refused_before_decoding() {
    // 8 MiB requests, the default 256 MiB in flight: a request other than
    // Produce may be at most 256 MiB / 40 = 6.4 MiB on the wire.
    let s = server(8 << 20, None).await;
    let wait = Duration::from_secs(30);
    let small = metadata_v9_of_empty_topics(10_000);
    match send_frame(s.addr, &small, wait).await {
        Outcome::Answered(r) => assert_eq!(r[..4], [0, 0, 0, 7], "correlation id"),
        other => panic!("a 20 KB Metadata request: {other:?}"),
    }
    // 3.5 M topics, 7 MB: about 250 MiB decoded (36x measured); closed
    // before the body is decoded.
    let big = metadata_v9_of_empty_topics(3_500_000);
    assert!(big.len() > (256 << 20) / 40 && big.len() < 8 << 20);
    let started = Instant::now();
    assert_eq!(send_frame(s.addr, &big, wait).await, Outcome::Closed);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(answers_api_versions(s.addr).await, "still serving");
    s.shutdown().await;
}
