//! The fixture files are what Kafka's client library reads: every batch
//! of the metadata log and of a snapshot, read back with kafka-python's
//! `MemoryRecords` (`tests/fixtures/read_with_kafka_python.py`), has a
//! valid CRC, the control flag and type where the encoder put them, and
//! the record values kraft decodes.

mod support;

use support::*;

fn read_with_kafka_python(log_dir: &std::path::Path, topic: &str) -> Option<serde_json::Value> {
    let out = segmirror_testkit::kafka_python::run_fixture(
        "read_with_kafka_python.py",
        &[
            "--log-dir",
            log_dir.to_str().expect("utf-8"),
            "--topic",
            topic,
            "--partition",
            "0",
        ],
    )?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    Some(v[0]["batches"].clone())
}

fn value_bytes(record: &serde_json::Value) -> Vec<u8> {
    use base64::Engine as _;
    let text = record["value"].as_str().expect("value");
    match record["value_encoding"].as_str() {
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(text)
            .expect("base64"),
        _ => text.as_bytes().to_vec(),
    }
}

#[test]
fn kafka_python_reads_the_metadata_log_and_snapshot_batches() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = MetaLog::create(tmp.path(), 1);
    log.append_control(1, LEADER_CHANGE, leader_change_value(1, &[1]));
    let values = vec![
        feature("metadata.version", 19),
        topic("orders", id(1)),
        partition(1, id(1), 0, &[1, 2], &[1, 2], 1, 0, 0, &[id(3), id(4)]),
        config(2, "orders", "retention.ms", None),
        change(1, id(1), 0, &[("Leader", V::Int(-1))]),
        begin(Some("b")),
        end(),
    ];
    log.append(1, &values[..3]);
    log.append(2, &values[3..]);
    let Some(batches) = read_with_kafka_python(tmp.path(), "__cluster_metadata") else {
        return;
    };
    let batches = batches.as_array().expect("batches");
    assert_eq!(batches.len(), 3);
    assert_eq!(batches[0]["is_control"], true);
    assert_eq!(batches[0]["control_type"], "2", "LEADER_CHANGE");
    assert_eq!(
        (&batches[0]["base_offset"], &batches[0]["epoch"]),
        (&0.into(), &1.into())
    );
    let mut read = Vec::new();
    for b in &batches[1..] {
        assert_eq!(b["crc_valid"], true);
        assert_eq!(
            (&b["is_control"], &b["producer_id"], &b["codec"]),
            (&false.into(), &(-1).into(), &0.into())
        );
        for r in b["records"].as_array().expect("records") {
            assert!(r["key"].is_null(), "metadata records have null keys");
            read.push(value_bytes(r));
        }
    }
    assert_eq!(read, values, "kafka-python reads the values written");
    for v in &read {
        assert!(matches!(
            kraft::records::decode_value(v),
            Ok(kraft::records::Decoded::Record(_))
        ));
    }

    // The snapshot file, read as a segment: header, data, footer, offsets
    // from 0, every batch at the snapshot epoch.
    let snap_dir = tmp.path().join("snapshot-0");
    std::fs::create_dir(&snap_dir).expect("mkdir");
    let path = log.write_snapshot(9, 2, &[values[..3].to_vec()]);
    std::fs::copy(&path, snap_dir.join("00000000000000000000.log")).expect("copy");
    let batches = read_with_kafka_python(tmp.path(), "snapshot").expect("not skipped above");
    let batches = batches.as_array().expect("batches");
    let summary: Vec<(i64, i64, bool, Option<&str>)> = batches
        .iter()
        .map(|b| {
            (
                b["base_offset"].as_i64().expect("offset"),
                b["epoch"].as_i64().expect("epoch"),
                b["is_control"].as_bool().expect("control"),
                b["control_type"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, 2, true, Some("3")),
            (1, 2, false, None),
            (4, 2, true, Some("4"))
        ]
    );
}
