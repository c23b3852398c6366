//! `kafkalog::transaction_topic` against an independent writer of
//! `__transaction_state` records: `tests/fixtures/gen_transaction_state.py`
//! encodes them from Kafka's JSON schemas (`TransactionLogKey`,
//! `TransactionLogValue`) by the rules of Kafka's generated classes, with no
//! code shared with the decoder.

use kafkalog::transaction_topic::{TxnRecord, decode, partition_for};
use serde_json::{Value, json};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn decoded(record: &TxnRecord) -> Value {
    match record {
        TxnRecord::Transaction { metadata: None, .. } => Value::Null,
        TxnRecord::Transaction {
            metadata: Some(m), ..
        } => json!({
            "producer_id": m.producer_id,
            "previous_producer_id": m.previous_producer_id,
            "next_producer_id": m.next_producer_id,
            "producer_epoch": m.producer_epoch,
            "timeout_ms": m.timeout_ms,
            "status": m.status.name(),
            "partitions": m.partitions,
            "last_update_ms": m.last_update_ms,
            "start_ms": m.start_ms,
            "client_transaction_version": m.client_transaction_version,
        }),
        TxnRecord::Unknown {
            key_version,
            value_version,
        } => json!({"unknown": [key_version, value_version]}),
    }
}

#[test]
fn every_record_the_independent_writer_encodes_decodes_to_what_it_meant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("cases.json");
    for seed in ["1", "2"] {
        let Some(_) = segmirror_testkit::kafka_python::run_fixture(
            "gen_transaction_state.py",
            &["--out", out.to_str().expect("utf-8"), "--seed", seed],
        ) else {
            return;
        };
        let cases: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&out).expect("read")).expect("json");
        assert!(cases.len() > 20, "{}", cases.len());
        for case in &cases {
            let name = case["name"].as_str().expect("name");
            let key = hex(case["key"].as_str().expect("key"));
            let value = case["value"].as_str().map(hex);
            let record = decode(&key, value.as_deref()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(decoded(&record), case["expect"], "{name}");
            if let TxnRecord::Transaction {
                transactional_id, ..
            } = &record
            {
                assert_eq!(
                    transactional_id,
                    case["transactional_id"].as_str().expect("id")
                );
            }
            // Every prefix of a record is an error or a record, never a panic.
            for cut in 0..key.len() {
                let _ = decode(&key[..cut], value.as_deref());
            }
            if let Some(v) = &value {
                for cut in 0..v.len() {
                    assert!(
                        decode(&key, Some(&v[..cut])).is_err()
                            || matches!(decoded(&record), Value::Object(ref o) if o.contains_key("unknown")),
                        "{name}: a value cut at {cut} of {} decoded",
                        v.len()
                    );
                }
            }
        }
    }
}

#[test]
fn transactional_ids_land_on_kafkas_partitions() {
    // Kafka's partitionFor: abs(hashCode) % 50; hashCode of "" is 0 and
    // of "a" is 97 (Java's String.hashCode).
    assert_eq!(partition_for("", 50), 0);
    assert_eq!(partition_for("a", 50), 97 % 50);
    assert_eq!(
        partition_for("payments-eos-0", 50),
        partition_for("payments-eos-0", 50)
    );
    for id in ["x", "streams-app-1_0", "Zahlungsdienst-é-✓"] {
        assert!((0..50).contains(&partition_for(id, 50)));
        assert!((0..3).contains(&partition_for(id, 3)));
    }
}

/// `kafkalog transactions` on a log dir the independent writer laid out as
/// a broker's (`__transaction_state-<p>` partitions of kafka-python batches,
/// root checkpoints): each id's newest state below the high watermark.
#[test]
fn kafkalog_transactions_lists_each_ids_newest_state_below_the_high_watermark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    let expect = dir.path().join("expect.json");
    let Some(_) = segmirror_testkit::kafka_python::run_fixture(
        "gen_transaction_state.py",
        &[
            "--log-dir",
            logs.to_str().expect("utf-8"),
            "--expect",
            expect.to_str().expect("utf-8"),
            "--seed",
            "3",
        ],
    ) else {
        return;
    };
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(&expect).expect("read")).expect("json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafkalog"))
        .args([
            "transactions",
            "--log-dir",
            logs.to_str().expect("utf-8"),
            "--json",
        ])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(got["records_read"], want["records_below_hw"]);
    assert_eq!(got["malformed_records"], json!([]));
    let mut listed = serde_json::Map::new();
    for t in got["transactions"].as_array().expect("list") {
        let partitions: Vec<Value> = t["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .map(|p| json!([p["topic"], p["partitions"]]))
            .collect();
        listed.insert(
            t["transactional_id"].as_str().expect("id").to_string(),
            json!({
                "coordinator_partition": t["coordinator_partition"],
                "state": t["state"],
                "producer_id": t["producer_id"],
                "producer_epoch": t["producer_epoch"],
                "partitions": partitions,
            }),
        );
    }
    assert_eq!(Value::Object(listed), want["transactions"]);
    // The table names every id; a dir without the topic is refused.
    let table = std::process::Command::new(env!("CARGO_BIN_EXE_kafkalog"))
        .args(["transactions", "--log-dir", logs.to_str().expect("utf-8")])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&table.stdout);
    for id in want["transactions"].as_object().expect("ids").keys() {
        assert!(text.contains(id.as_str()), "{id}: {text}");
    }
    // A flipped byte in a batch: a finding naming the file, exit 1, and
    // the ids of the other partitions still listed.
    let seg = std::fs::read_dir(&logs)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .map(|p| p.join("00000000000000000000.log"))
        .find(|p| p.is_file())
        .expect("a segment");
    let mut bytes = std::fs::read(&seg).expect("read");
    bytes[70] ^= 0xff;
    std::fs::write(&seg, bytes).expect("write");
    let damaged = std::process::Command::new(env!("CARGO_BIN_EXE_kafkalog"))
        .args([
            "transactions",
            "--log-dir",
            logs.to_str().expect("utf-8"),
            "--json",
        ])
        .output()
        .expect("run");
    assert_eq!(
        damaged.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&damaged.stderr)
    );
    assert!(String::from_utf8_lossy(&damaged.stderr).contains("CRC"));
    let listed: Value = serde_json::from_slice(&damaged.stdout).expect("json");
    assert_eq!(
        listed["malformed_records"].as_array().map(Vec::len),
        Some(1)
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let none = std::process::Command::new(env!("CARGO_BIN_EXE_kafkalog"))
        .args(["transactions", "--log-dir", empty.to_str().expect("utf-8")])
        .output()
        .expect("run");
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no __transaction_state partition"));
}
