//! `kafkalog produce`: append records from stdin as the partition leader.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use kafkalog::batch::Compression;
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::reader::PartitionReader;
use kafkalog::topic::{TopicId, TopicPartition};
use kafkalog::units::ByteSize;
use kafkalog::{FlushPolicy, LogConfig, LogDir, PartitionLog};

/// Append records read from stdin, one per line (`key<TAB>value`, or just a
/// value), as the partition's leader. Creates the partition when missing.
/// Refused with a read-only error on a mirror partition that is not STOPPED.
/// Prints one line per appended batch: `appended FIRST..LAST epoch E`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  printf 'k1\\tv1\\nk2\\tv2\\n' | kafkalog produce --log-dir /tmp/logs --topic orders --partition 0
  seq 1 100000 | kafkalog produce --log-dir /tmp/logs --topic events --partition 0 --compression zstd --batch-size 500
  seq 1 100000 | kafkalog produce --log-dir /tmp/logs --topic events --partition 1 --segment-bytes 1MiB --fsync on-roll")]
pub(crate) struct Args {
    /// The log dir.
    #[arg(long, value_name = "DIR")]
    log_dir: PathBuf,
    /// Topic name.
    #[arg(long)]
    topic: String,
    /// Partition number.
    #[arg(long)]
    partition: i32,
    /// Leader epoch to stamp [default: the log's latest epoch, or 0].
    #[arg(long)]
    epoch: Option<i32>,
    /// Topic id for a new partition (base64url or hyphenated UUID); checked
    /// against an existing one. A new partition without it gets a random id.
    #[arg(long, value_name = "UUID")]
    topic_id: Option<TopicId>,
    /// Compression codec.
    #[arg(long, default_value = "none")]
    compression: Compression,
    /// Records per batch.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    batch_size: u32,
    /// Roll segments at this size (Kafka's segment.bytes), bytes or with a unit: 1MiB, 512KB.
    #[arg(long, value_name = "SIZE", default_value = "1GiB")]
    segment_bytes: ByteSize,
    /// fsync policy: `always` (fsync before acknowledging each batch) or
    /// `on-roll` (Kafka's default).
    #[arg(long, value_name = "POLICY", default_value = "always", value_parser = parse_flush)]
    fsync: FlushPolicy,
}

fn parse_flush(s: &str) -> Result<FlushPolicy, String> {
    match s {
        "always" => Ok(FlushPolicy::Always),
        "on-roll" => Ok(FlushPolicy::OnRoll),
        other => Err(format!("unknown fsync policy {other:?} (always, on-roll)")),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn append(
    log: &mut PartitionLog,
    epoch: i32,
    compression: Compression,
    records: &mut Vec<RecordInput>,
) -> anyhow::Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let spec = BatchSpec {
        compression,
        base_timestamp: records[0].timestamp,
        ..BatchSpec::new(0, epoch)
    };
    let mut batch = build_batch(&spec, records)?;
    let info = log.append_as_leader(&mut batch, epoch)?;
    println!(
        "appended {}..{} epoch {}",
        info.first_offset, info.last_offset, epoch
    );
    records.clear();
    Ok(())
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    let tp = TopicPartition::new(&args.topic, args.partition)?;
    // The guard is checked before taking the lock, so a mirror partition
    // reports read-only even while the applier holds the log dir.
    if let Ok(reader) = PartitionReader::open(&args.log_dir, &tp)
        && let Some(reason) = reader.read_only_reason()?
    {
        // A refused operation, not a usage error: exit 1.
        eprintln!(
            "kafkalog: refused: {}",
            kafkalog::Error::ReadOnly {
                topic_partition: tp.to_string(),
                reason,
            }
        );
        return Ok(crate::EXIT_FINDING);
    }
    let dir = LogDir::open(&args.log_dir)?;
    let config = LogConfig {
        segment_bytes: args.segment_bytes.0,
        flush: args.fsync,
        ..LogConfig::default()
    };
    let exists = args.log_dir.join(tp.dir_name()).is_dir();
    let topic_id = match args.topic_id {
        Some(id) => Some(id),
        None if !exists => Some(TopicId::random()?),
        None => None,
    };
    let mut log = dir.open_or_create_partition(&tp, topic_id, config)?;
    let epoch = args
        .epoch
        .unwrap_or_else(|| log.epochs().latest_epoch().unwrap_or(0));
    let mut pending = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let (key, value) = match line.split_once('\t') {
            Some((k, v)) => (Some(k.as_bytes().to_vec()), v.as_bytes().to_vec()),
            None => (None, line.into_bytes()),
        };
        pending.push(RecordInput {
            timestamp: now_ms(),
            key,
            value: Some(value),
            headers: vec![],
        });
        if pending.len() >= args.batch_size as usize {
            append(&mut log, epoch, args.compression, &mut pending)?;
        }
    }
    append(&mut log, epoch, args.compression, &mut pending)?;
    log.close()?;
    Ok(0)
}
