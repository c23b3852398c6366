//! `kafkalog transactions`: the transaction coordinator's state in a
//! broker's log dir, like `kafka-transactions.sh list` and `describe`.
//!
//! Reads every `__transaction_state-<p>` partition of the log dir, in log
//! order, up to its high watermark (`replication-offset-checkpoint`; the
//! log end without one) and folds the records as the coordinator does at
//! startup (`kafkalog::transaction_topic::TxnStates`): the newest record of
//! a transactional id is its state, a tombstone removes it. Control
//! batches are skipped (the coordinator writes none there). A damaged
//! batch (the rest of its partition is not read) or a record that is not
//! in Kafka's format is a finding (exit 1), named; a record of a version
//! not known here is counted and skipped.

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use kafkalog::checkpoint::{self, REPLICATION_OFFSET_CHECKPOINT};
use kafkalog::reader::{self, PartitionReader};
use kafkalog::records;
use kafkalog::transaction_topic::{TRANSACTION_TOPIC, TxnMetadata, TxnStates, decode};

use crate::{EXIT_FINDING, require_log_dir};

/// Print every transactional id's state from a log dir's __transaction_state partitions.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  kafkalog transactions --log-dir /var/lib/kafka/data
  kafkalog transactions --log-dir /var/lib/kafka/data --json | jq '.transactions[] | select(.state == \"Ongoing\")'

Exit codes: 0 read; 1 a damaged batch or a record not in Kafka's format (named on stderr; the rest is still listed); 2 no such log dir, or no __transaction_state partition in it.")]
pub(crate) struct Args {
    /// The broker's log dir (holding `__transaction_state-<p>/`).
    #[arg(long, value_name = "DIR")]
    log_dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One transactional id, where it was read.
struct Entry {
    partition: i32,
    metadata: TxnMetadata,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    if let Some(code) = require_log_dir(&args.log_dir) {
        return Ok(code);
    }
    let partitions: Vec<_> = reader::list_partitions(&args.log_dir)?
        .into_iter()
        .filter(|tp| tp.topic == TRANSACTION_TOPIC)
        .collect();
    if partitions.is_empty() {
        eprintln!(
            "kafkalog: no {TRANSACTION_TOPIC} partition in {} (no transactional producer has used this broker as its coordinator, or this is not a broker's log dir)",
            args.log_dir.display()
        );
        return Ok(crate::EXIT_ERROR);
    }
    let hws = checkpoint::read_offset_checkpoint(&args.log_dir.join(REPLICATION_OFFSET_CHECKPOINT))
        .unwrap_or_default();
    let mut ids: BTreeMap<String, Entry> = BTreeMap::new();
    let (mut unknown, mut records_read) = (0u64, 0u64);
    let mut malformed: Vec<String> = Vec::new();
    for tp in &partitions {
        let reader = PartitionReader::open(&args.log_dir, tp)?;
        let hw = hws.get(tp).copied();
        let mut states = TxnStates::default();
        let mut failure: Option<anyhow::Error> = None;
        let walked = reader.for_each_batch(0, true, |h, bytes| {
            if hw.is_some_and(|hw| h.base_offset >= hw) {
                return ControlFlow::Break(());
            }
            if h.is_control() {
                return ControlFlow::Continue(());
            }
            let recs = match records::decode_records(h, bytes) {
                Ok(r) => r,
                Err(e) => {
                    failure = Some(anyhow::anyhow!("{tp} at offset {}: {e}", h.base_offset));
                    return ControlFlow::Break(());
                }
            };
            for r in &recs {
                records_read += 1;
                let Some(key) = &r.key else {
                    malformed.push(format!(
                        "{tp} offset {}: a record without a key",
                        r.offset(h).unwrap_or(-1)
                    ));
                    continue;
                };
                match decode(key, r.value.as_deref()) {
                    Ok(record) => states.apply(record),
                    Err(e) => {
                        malformed.push(format!("{tp} offset {}: {e}", r.offset(h).unwrap_or(-1)))
                    }
                }
            }
            ControlFlow::Continue(())
        });
        match walked {
            Ok(_) => {}
            // Damage (a CRC mismatch, a torn batch before the tail) is a
            // finding, as `verify` reports it: the ids read before it stand.
            Err(e @ kafkalog::Error::Batch { .. }) => malformed.push(format!("{tp}: {e}")),
            Err(e) => return Err(e.into()),
        }
        if let Some(e) = failure {
            return Err(e);
        }
        unknown += states.unknown;
        for (id, metadata) in states.ids {
            ids.insert(
                id,
                Entry {
                    partition: tp.partition,
                    metadata,
                },
            );
        }
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        let transactions: Vec<serde_json::Value> = ids
            .iter()
            .map(|(id, e)| {
                let m = &e.metadata;
                serde_json::json!({
                    "transactional_id": id,
                    "coordinator_partition": e.partition,
                    "producer_id": m.producer_id,
                    "producer_epoch": m.producer_epoch,
                    "previous_producer_id": m.previous_producer_id,
                    "next_producer_id": m.next_producer_id,
                    "state": m.status.name(),
                    "timeout_ms": m.timeout_ms,
                    "start_ms": m.start_ms,
                    "last_update_ms": m.last_update_ms,
                    "client_transaction_version": m.client_transaction_version,
                    "partitions": m.partitions.iter().map(|(t, ps)| serde_json::json!({"topic": t, "partitions": ps})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let doc = serde_json::json!({
            "log_dir": args.log_dir.display().to_string(),
            "coordinator_partitions": partitions.iter().map(|tp| tp.partition).collect::<Vec<_>>(),
            "records_read": records_read,
            "unknown_records": unknown,
            "malformed_records": malformed,
            "transactions": transactions,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        writeln!(
            out,
            "{:<32} {:>5} {:>12} {:>6} {:<18} {:>7} PARTITIONS",
            "TRANSACTIONAL ID", "COORD", "PRODUCER ID", "EPOCH", "STATE", "TIMEOUT"
        )?;
        for (id, e) in &ids {
            let m = &e.metadata;
            // `topic:0,3 other:1`, one group per topic.
            let parts: Vec<String> = m
                .partitions
                .iter()
                .map(|(t, ps)| {
                    let ids: Vec<String> = ps.iter().map(i32::to_string).collect();
                    format!("{t}:{}", ids.join(","))
                })
                .collect();
            writeln!(
                out,
                "{:<32} {:>5} {:>12} {:>6} {:<18} {:>6}s {}",
                id,
                e.partition,
                m.producer_id,
                m.producer_epoch,
                m.status.name(),
                m.timeout_ms / 1000,
                if parts.is_empty() {
                    "-".to_string()
                } else {
                    parts.join(" ")
                }
            )?;
        }
        writeln!(
            out,
            "{} transactional ids from {} records in {} {TRANSACTION_TOPIC} partitions ({} of an unknown version skipped)",
            ids.len(),
            records_read,
            partitions.len(),
            unknown
        )?;
    }
    out.flush()?;
    for m in &malformed {
        eprintln!("kafkalog: damaged or not a {TRANSACTION_TOPIC} record: {m}");
    }
    Ok(if malformed.is_empty() {
        0
    } else {
        EXIT_FINDING
    })
}
