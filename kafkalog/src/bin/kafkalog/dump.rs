//! `kafkalog dump`: print batches (and records) like Kafka's `kafka-dump-log`.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::Context;
use base64::Engine;
use kafkalog::batch::BatchHeader;
use kafkalog::reader::PartitionReader;
use kafkalog::records::{self, Record};
use kafkalog::topic::TopicPartition;

/// Print the batches of a partition, optionally with their records.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  kafkalog dump --log-dir /tmp/logs --topic orders --partition 0
  kafkalog dump --log-dir /tmp/logs --topic orders --partition 0 --from 100 --records --json | jq .")]
pub(crate) struct Args {
    /// The log dir (the parent of `<topic>-<partition>/`).
    #[arg(long, value_name = "DIR")]
    log_dir: PathBuf,
    /// Topic name.
    #[arg(long)]
    topic: String,
    /// Partition number.
    #[arg(long)]
    partition: i32,
    /// Start at the batch containing this offset.
    #[arg(long, value_name = "OFFSET", default_value_t = 0)]
    from: i64,
    /// Also print every record (decompressing batches).
    #[arg(long)]
    records: bool,
    /// One JSON object per batch per line instead of text.
    #[arg(long)]
    json: bool,
}

fn text_or_base64(bytes: &Option<Vec<u8>>) -> serde_json::Value {
    match bytes {
        None => serde_json::Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => serde_json::Value::String(s.to_string()),
            Err(_) => {
                serde_json::json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) })
            }
        },
    }
}

fn record_json(h: &BatchHeader, r: &Record) -> serde_json::Value {
    serde_json::json!({
        "offset": r.offset(h),
        "timestamp": r.timestamp(h),
        "key": text_or_base64(&r.key),
        "value": text_or_base64(&r.value),
        "headers": r.headers.iter().map(|x| serde_json::json!({"key": x.key, "value": text_or_base64(&x.value)})).collect::<Vec<_>>(),
    })
}

fn show(bytes: &Option<Vec<u8>>) -> String {
    match bytes {
        None => "null".into(),
        Some(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    let tp = TopicPartition::new(&args.topic, args.partition)?;
    let reader = PartitionReader::open(&args.log_dir, &tp)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if !args.json {
        writeln!(out, "Dumping {}", reader.dir().display())?;
    }
    let mut failure: Option<anyhow::Error> = None;
    reader.for_each_batch(args.from, true, |h, bytes| {
        let recs = if args.records {
            match records::decode_records(h, bytes) {
                Ok(r) => Some(r),
                Err(e) => {
                    failure = Some(e.into());
                    return ControlFlow::Break(());
                }
            }
        } else {
            None
        };
        let written = if args.json {
            let mut v = serde_json::to_value(h).unwrap_or_default();
            v["last_offset"] = h.last_offset().into();
            v["compression"] = h.compression().name().into();
            v["is_transactional"] = h.is_transactional().into();
            v["is_control"] = h.is_control().into();
            if let Some(recs) = &recs {
                v["records"] = recs.iter().map(|r| record_json(h, r)).collect::<Vec<_>>().into();
            }
            writeln!(out, "{v}")
        } else {
            let mut line = format!(
                "baseOffset: {} lastOffset: {} count: {} baseSequence: {} producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} position: {} {:?}: {} size: {} magic: {} compresscodec: {} crc: {} isvalid: true",
                h.base_offset, h.last_offset(), h.record_count, h.base_sequence, h.producer_id, h.producer_epoch,
                h.partition_leader_epoch, h.is_transactional(), h.is_control(), h.position, h.timestamp_type(),
                h.max_timestamp, h.size(), h.magic, h.compression(), h.crc
            );
            if let Some(recs) = &recs {
                for r in recs {
                    line.push_str(&format!(
                        "\n| offset: {} timestamp: {} keySize: {} valueSize: {} headerKeys: [{}] key: {} payload: {}",
                        r.offset(h).unwrap_or(-1),
                        r.timestamp(h).unwrap_or(-1),
                        r.key.as_ref().map_or(-1, |k| k.len() as i64),
                        r.value.as_ref().map_or(-1, |v| v.len() as i64),
                        r.headers.iter().map(|x| x.key.as_str()).collect::<Vec<_>>().join(","),
                        show(&r.key),
                        show(&r.value),
                    ));
                }
            }
            writeln!(out, "{line}")
        };
        if let Err(e) = written {
            failure = Some(e.into());
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })
    .with_context(|| format!("dumping {tp}"))?;
    if let Some(e) = failure {
        if is_broken_pipe(&e) {
            return Ok(0);
        }
        return Err(e.context(format!("dumping {tp}")));
    }
    match out.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        other => Ok(other.map(|()| 0)?),
    }
}

/// A reader that went away (`| head`) is not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
