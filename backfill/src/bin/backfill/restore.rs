//! `backfill restore`.

use std::path::PathBuf;
use std::time::Duration;

use backfill::restore::{PartitionRestore, RestoreEnd, RestoreError, Restorer};
use backfill::select::PartitionList;
use bucket::diagnosis;
use bucket::store::ManifestStore;
use bucket::url::BucketUrl;
use kafkalog::TopicPartition;
use manifest::layout::ClusterLayout;

use crate::export::{build_store, parse_time, regex};

pub(crate) const EXAMPLES: &str = "Examples:
  backfill restore --bucket file:///data/bucket --source-cluster-id src --topics orders --log-dir /data/restored --until 2026-12-01T03:00:00Z --dry-run
  backfill restore --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics 'orders|payments' --log-dir /var/lib/kafka/restored --until 1764558000000
  backfill restore --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics orders --partitions 0 --log-dir /tmp/orders-0 --until-offset 99999 --json

Each partition is restored up to the last whole batch at or before the cut: --until-offset N
keeps batches whose last offset is <= N; --until TIME keeps every batch before the first
one whose max timestamp is after TIME (exact for LogAppendTime topics; for CreateTime ones
the same approximation as Kafka's offsetsForTimes). Batches are never split, so the result
is a byte-identical prefix of the source's log (segments, epochs, partition.metadata,
indexes), writable by a Kafka broker. There is no cross-partition consistency beyond each
partition's own cut. A transaction open at the cut stays open (the line names it) unless
--abort-open-transactions appends an ABORT marker for it, as the applier does at failover.
--dry-run prints the plan (objects, bytes, where each partition ends) from the manifests
only, downloading no data. The target must not hold the partitions already.

Exit codes: 0 restored (or planned); 1 a partition failed (a corrupt object: its key and
batch are named; the store unreachable); 2 a usage or setup error, a partition that exists
in --log-dir, or nothing at or before the cut (a line says what exists).";

/// Flags of `backfill restore`.
#[derive(clap::Args)]
pub(crate) struct RestoreArgs {
    /// The bucket the shipper writes: file:///abs/path or s3://bucket/prefix.
    #[arg(long, value_name = "URL", env = "SEGMIRROR_BUCKET")]
    bucket: String,
    /// The source cluster whose topics are restored (the shipper's --cluster-id).
    #[arg(long, value_name = "ID", env = "SEGMIRROR_SOURCE_CLUSTER_ID")]
    source_cluster_id: String,
    /// Topics restored: a regex on the whole topic name.
    #[arg(long, value_name = "REGEX")]
    topics: String,
    /// Topics never restored: a regex on the whole topic name [default: none].
    #[arg(long, value_name = "REGEX")]
    exclude: Option<String>,
    /// Only these partition numbers, e.g. 0,2,5-7 [default: all].
    #[arg(long, value_name = "LIST")]
    partitions: Option<PartitionList>,
    /// The Kafka log dir to create the partitions in (created when missing; existing partitions are refused).
    #[arg(long, value_name = "DIR")]
    log_dir: PathBuf,
    /// Restore every batch before the first whose max timestamp is after TIME: RFC 3339 in UTC or epoch milliseconds.
    #[arg(
        long,
        value_name = "TIME",
        required_unless_present = "until_offset",
        conflicts_with = "until_offset"
    )]
    until: Option<String>,
    /// Restore every whole batch whose last offset is at or below N.
    #[arg(long, value_name = "N")]
    until_offset: Option<i64>,
    /// Append an ABORT marker for each transaction open at the cut (as the applier does at failover), so that read_committed consumers of the restored log do not wait on it [default: leave them open, and list them].
    #[arg(long)]
    abort_open_transactions: bool,
    /// Print the plan (objects, bytes, where each partition ends) without downloading data or writing anything.
    #[arg(long)]
    dry_run: bool,
    /// How long to wait for an unreachable bucket before giving up with exit 1 (e.g. 30s, 2m) [default: 60s].
    #[arg(long, value_name = "DURATION", env = "SEGMIRROR_STORE_TIMEOUT")]
    store_timeout: Option<String>,
    /// Print the per-partition result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(args: RestoreArgs) -> anyhow::Result<u8> {
    let cut = match (&args.until, args.until_offset) {
        (Some(t), _) => RestoreEnd::Time(parse_time("--until", t)?),
        (None, Some(n)) if n >= 0 => RestoreEnd::Offset(n),
        (None, Some(n)) => anyhow::bail!("--until-offset {n}: offsets are never negative"),
        (None, None) => anyhow::bail!("give --until TIME or --until-offset N"),
    };
    let store_timeout = match &args.store_timeout {
        Some(d) => humantime::parse_duration(d)
            .map_err(|e| anyhow::anyhow!("--store-timeout {d:?}: {e}"))?,
        None => Duration::from_secs(60),
    };
    let topics = regex("--topics", &args.topics)?;
    let exclude = args
        .exclude
        .as_deref()
        .map(|x| regex("--exclude", x))
        .transpose()?;
    let bucket = BucketUrl::parse(&args.bucket).map_err(|e| anyhow::anyhow!("--bucket: {e}"))?;
    if let BucketUrl::File { root } = &bucket
        && !root.is_dir()
    {
        anyhow::bail!(
            "--bucket {bucket}: {} is not a directory (a mistyped path?)",
            root.display()
        );
    }
    let store = build_store("--bucket", &bucket, store_timeout)?;
    let layout = ClusterLayout::new(bucket.prefix(), &args.source_cluster_id)
        .map_err(|e| anyhow::anyhow!("--source-cluster-id: {e}"))?;
    let source = ManifestStore::new(store, layout).with_location(bucket.location());
    let selected = match crate::first_request(
        &bucket,
        store_timeout,
        args.json,
        backfill::export::select(
            &source,
            bucket.prefix(),
            &topics,
            exclude.as_ref(),
            args.partitions.as_ref(),
        ),
    )
    .await
    {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let mut partitions = Vec::new();
    for e in &selected {
        let tp = TopicPartition::new(&e.topic, e.partition)
            .map_err(|err| anyhow::anyhow!("{}-{}: {err}", e.topic, e.partition))?;
        partitions.push((tp, e));
    }
    if !args.dry_run {
        let existing: Vec<String> = partitions
            .iter()
            .map(|(tp, _)| args.log_dir.join(tp.dir_name()))
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !existing.is_empty() {
            eprintln!(
                "backfill: error: the target already holds {}: restore into an empty or new --log-dir (never over a log)",
                existing.join(", ")
            );
            return Ok(2);
        }
    }
    let restorer = Restorer::new(source, &args.log_dir, cut)
        .abort_open_transactions(args.abort_open_transactions);
    let mut done: Vec<PartitionRestore> = Vec::new();
    let mut failed: Vec<(TopicPartition, RestoreError)> = Vec::new();
    restorer
        .restore_each(&partitions, args.dry_run, |tp, result| match result {
            Ok(r) => {
                eprintln!("{}", line(tp, &r, args.dry_run));
                done.push(r);
            }
            Err(err) => {
                eprintln!("FAILED {}", diagnosis::one_line(&err));
                failed.push((tp.clone(), err));
            }
        })
        .await;
    let restored = done.iter().filter(|r| !r.nothing_before_cut).count();
    let code = if !failed.is_empty() {
        if failed
            .iter()
            .all(|(_, e)| matches!(e, RestoreError::Exists { .. }))
        {
            2
        } else {
            1
        }
    } else if restored == 0 {
        eprintln!(
            "backfill: error: nothing of the {} selected partitions is at or before the cut ({}): it is older than what the bucket holds",
            done.len(),
            match cut {
                RestoreEnd::Time(t) => format!(
                    "--until {}",
                    args.until.as_deref().unwrap_or(&t.to_string())
                ),
                RestoreEnd::Offset(n) => format!("--until-offset {n}"),
            }
        );
        2
    } else {
        0
    };
    if code == 0 {
        eprintln!(
            "{} {restored} of {} partitions into {}",
            if args.dry_run {
                "would restore"
            } else {
                "restored"
            },
            done.len(),
            args.log_dir.display()
        );
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "exit_code": code,
                "dry_run": args.dry_run,
                "log_dir": args.log_dir.display().to_string(),
                "partitions": done,
                "failures": failed.iter().map(|(tp, e)| serde_json::json!({
                    "partition": tp.to_string(),
                    "error": diagnosis::one_line(e),
                })).collect::<Vec<_>>(),
            })
        );
    }
    Ok(code)
}

/// One partition's line.
fn line(tp: &TopicPartition, r: &PartitionRestore, dry_run: bool) -> String {
    if r.nothing_before_cut {
        return format!("{tp}: nothing at or before the cut (its first shipped batch is after it)");
    }
    let aborted = if r.aborted_transactions.is_empty() {
        String::new()
    } else {
        format!(
            "; aborted with a marker: {}",
            r.aborted_transactions
                .iter()
                .map(|(pid, first)| format!("producer {pid} from offset {first}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let open = if r.open_transactions.is_empty() {
        aborted
    } else {
        format!(
            "; open at the cut (read_committed consumers wait on them: --abort-open-transactions aborts them): {}",
            r.open_transactions
                .iter()
                .map(|(pid, first)| format!("producer {pid} from offset {first}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let epoch = r
        .epoch
        .map_or(String::new(), |e| format!(", last leader epoch {e}"));
    match (dry_run, r.end_offset) {
        (false, Some(end)) => format!(
            "{tp}: restored up to log end offset {end} (from {}){epoch}, {} objects ({} bytes){open}",
            r.log_start_offset, r.objects, r.bytes
        ),
        _ => format!(
            "{tp}: {} objects ({} bytes); ends at offset {}{}{epoch}",
            r.objects,
            r.bytes,
            r.end_at_least,
            match &r.cut_object {
                Some(k) => format!(" or later, inside {k} (cut at a batch boundary)"),
                None => String::new(),
            }
        ),
    }
}
