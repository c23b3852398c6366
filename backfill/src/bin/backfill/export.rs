//! `backfill export`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backfill::export::{ExportOptions, Exporter, Summary};
use backfill::plan::Window;
use backfill::progress::{Bar, LogLines, Progress};
use backfill::select::{PartitionList, Shard};
use backfill::txn::Isolation;
use bucket::diagnosis;
use bucket::url::BucketUrl;
use kafkalog::units::ByteSize;

pub(crate) const EXAMPLES: &str = "Examples:
  backfill export --bucket file:///data/bucket --source-cluster-id src --topics orders --out file:///data/parquet
  backfill export --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics 'orders|payments' --out s3://lake/kafka --from-offset 1000 --to-offset 1999 --partitions 0,2-3
  backfill export --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics '.*' --exclude 'tmp-.*' --out s3://lake/kafka --from-time 2026-12-01T00:00:00Z --to-time 1764633600000
  JOB_COMPLETION_INDEX=3 JOB_COMPLETION_COUNT=16 backfill export --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics '.*' --out s3://lake/kafka --json
  duckdb -c \"SELECT \\\"partition\\\", count(*), min(\\\"offset\\\"), max(\\\"offset\\\") FROM read_parquet('/data/parquet/**/*.parquet', hive_partitioning=false) GROUP BY ALL\"

Records are exported as a read_committed consumer sees them: aborted transactions and
control records are dropped, and a partition ends at the shipped last stable offset when a
transaction is still open at the shipped end (a line says so; a later run exports the rest).
Compacted offset gaps stay gaps; a tombstone is a row whose value is NULL. Offsets and
times are inclusive; a window that matches no record is exit 2, naming what was found.

Re-running writes the same files (names come from source segment offsets), keeping those
already complete: a failed or interrupted run is resumed by running it again. Each shard
writes <out>/_manifest.json (or _manifest-<i>-of-<n>.json) last, listing files, rows and
CRC-32Cs. --shard I/N (from 0) defaults from JOB_COMPLETION_INDEX/JOB_COMPLETION_COUNT
(Kubernetes Indexed Job) or AWS_BATCH_JOB_ARRAY_INDEX/AWS_BATCH_JOB_ARRAY_SIZE (AWS Batch).
DuckDB: quote \"offset\" (a reserved word), and read with hive_partitioning=false or
hive_types={'partition': INTEGER} to keep the partition column INT32.

Exit codes: 0 done; 1 a partition failed (a corrupt object: its key and batch offset are
named and its file is not written; the store unreachable or refusing a request);
2 a usage or setup error, or nothing to export (a line says what the bucket holds).";

/// Flags of `backfill export`.
#[derive(clap::Args)]
pub(crate) struct ExportArgs {
    /// The bucket the shipper writes: file:///abs/path or s3://bucket/prefix.
    #[arg(long, value_name = "URL", env = "SEGMIRROR_BUCKET")]
    bucket: String,
    /// The source cluster whose topics are exported (the shipper's --cluster-id).
    #[arg(long, value_name = "ID", env = "SEGMIRROR_SOURCE_CLUSTER_ID")]
    source_cluster_id: String,
    /// Topics exported: a regex on the whole topic name.
    #[arg(long, value_name = "REGEX")]
    topics: String,
    /// Topics never exported: a regex on the whole topic name [default: none].
    #[arg(long, value_name = "REGEX")]
    exclude: Option<String>,
    /// Where the Parquet files go: file:///abs/path or s3://bucket/prefix.
    #[arg(long, value_name = "URL")]
    out: String,
    /// First offset exported, per partition (inclusive) [default: the log start].
    #[arg(long, value_name = "N", conflicts_with_all = ["from_time", "to_time"])]
    from_offset: Option<i64>,
    /// Last offset exported, per partition (inclusive) [default: the shipped end].
    #[arg(long, value_name = "N", conflicts_with_all = ["from_time", "to_time"])]
    to_offset: Option<i64>,
    /// Earliest record timestamp exported (inclusive): RFC 3339 in UTC (2026-12-01T00:00:00Z) or epoch milliseconds [default: none].
    #[arg(long, value_name = "TIME")]
    from_time: Option<String>,
    /// Latest record timestamp exported (inclusive): RFC 3339 in UTC or epoch milliseconds [default: none].
    #[arg(long, value_name = "TIME")]
    to_time: Option<String>,
    /// Only these partition numbers, e.g. 0,2,5-7 [default: all].
    #[arg(long, value_name = "LIST")]
    partitions: Option<PartitionList>,
    /// This run's shard I/N (from 0) of the selected partitions [default: from JOB_COMPLETION_INDEX/JOB_COMPLETION_COUNT or AWS_BATCH_JOB_ARRAY_INDEX/AWS_BATCH_JOB_ARRAY_SIZE, else 0/1].
    #[arg(long, value_name = "I/N")]
    shard: Option<Shard>,
    /// read_committed (aborted transactions dropped, end at the shipped LSO) or read_uncommitted [default: read_committed].
    #[arg(long, value_name = "LEVEL", value_parser = parse_isolation)]
    isolation: Option<Isolation>,
    /// Rewrite every file, even those already complete at their key.
    #[arg(long)]
    rewrite: bool,
    /// Partitions exported at once [default: 2].
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Source objects a partition holds while its files wait for transaction markers, e.g. 256MiB (beyond, they are read again) [default: 256MiB].
    #[arg(long, value_name = "SIZE")]
    pending_memory: Option<ByteSize>,
    /// How long to wait for an unreachable bucket before giving up with exit 1 (e.g. 30s, 2m) [default: 60s].
    #[arg(long, value_name = "DURATION", env = "SEGMIRROR_STORE_TIMEOUT")]
    store_timeout: Option<String>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) fn parse_isolation(s: &str) -> Result<Isolation, String> {
    match s {
        "read_committed" => Ok(Isolation::ReadCommitted),
        "read_uncommitted" => Ok(Isolation::ReadUncommitted),
        _ => Err(format!(
            "{s:?}: expected read_committed or read_uncommitted"
        )),
    }
}

/// A time as RFC 3339 (UTC) or epoch milliseconds, in ms.
pub(crate) fn parse_time(flag: &str, s: &str) -> anyhow::Result<i64> {
    if let Ok(ms) = s.trim().parse::<i64>() {
        return Ok(ms);
    }
    let t = humantime::parse_rfc3339_weak(s.trim()).map_err(|e| {
        anyhow::anyhow!("{flag} {s:?}: {e} (expected RFC 3339 in UTC such as 2026-12-01T00:00:00Z, or epoch milliseconds)")
    })?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| anyhow::anyhow!("{flag} {s:?}: before 1970"))?
        .as_millis();
    i64::try_from(ms).map_err(|_| anyhow::anyhow!("{flag} {s:?}: too far in the future"))
}

pub(crate) fn regex(flag: &str, pattern: &str) -> anyhow::Result<regex::Regex> {
    manifest::topic_pattern::whole_name(pattern).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

pub(crate) fn build_store(
    flag: &str,
    url: &BucketUrl,
    timeout: Duration,
) -> anyhow::Result<Arc<dyn object_store::ObjectStore>> {
    if let BucketUrl::Memory = url {
        anyhow::bail!("{flag} {url}: memory:// lives in one process only; use file:// or s3://");
    }
    url.build_with_retry_timeout(timeout)
        .map_err(|e| anyhow::anyhow!("{flag}: {}", diagnosis::one_line(&e)))
}

pub(crate) async fn run(args: ExportArgs, bar: bool) -> anyhow::Result<u8> {
    let started = Instant::now();
    let window = Window {
        from_offset: args.from_offset,
        to_offset: args.to_offset,
        from_time: args
            .from_time
            .as_deref()
            .map(|s| parse_time("--from-time", s))
            .transpose()?,
        to_time: args
            .to_time
            .as_deref()
            .map(|s| parse_time("--to-time", s))
            .transpose()?,
    };
    if let (Some(f), Some(t)) = (window.from_offset, window.to_offset)
        && f > t
    {
        anyhow::bail!("empty offset range: --from-offset {f} is above --to-offset {t}");
    }
    if let (Some(f), Some(t)) = (window.from_time, window.to_time)
        && f > t
    {
        anyhow::bail!(
            "empty time range: --from-time {} is after --to-time {} ({f} > {t} ms)",
            args.from_time.as_deref().unwrap_or_default(),
            args.to_time.as_deref().unwrap_or_default()
        );
    }
    if window.from_offset.is_some_and(|o| o < 0) || window.to_offset.is_some_and(|o| o < 0) {
        anyhow::bail!("offsets are never negative");
    }
    let store_timeout = match &args.store_timeout {
        Some(d) => humantime::parse_duration(d)
            .map_err(|e| anyhow::anyhow!("--store-timeout {d:?}: {e}"))?,
        None => Duration::from_secs(60),
    };
    let shard = match args.shard {
        Some(s) => s,
        None => Shard::from_env(|k| std::env::var(k).ok())
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .unwrap_or(Shard::ALL),
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
    let out = BucketUrl::parse(&args.out).map_err(|e| anyhow::anyhow!("--out: {e}"))?;
    let source_store = build_store("--bucket", &bucket, store_timeout)?;
    let out_store = build_store("--out", &out, store_timeout)?;
    let progress: Arc<dyn Progress> = if bar {
        Arc::new(Bar::new())
    } else {
        Arc::new(LogLines)
    };
    let opts = ExportOptions {
        source_cluster_id: args.source_cluster_id.clone(),
        topics,
        exclude,
        partitions: args.partitions.clone(),
        window,
        isolation: args.isolation.unwrap_or_default(),
        shard,
        rewrite: args.rewrite,
        concurrency: args.concurrency.unwrap_or(2).max(1),
        pending_memory: args.pending_memory.map_or(256 * 1024 * 1024, |s| s.0),
    };
    let exporter = Exporter::new(
        source_store,
        bucket.prefix(),
        out_store,
        out.prefix(),
        opts,
        progress,
    )
    .map_err(|e| anyhow::anyhow!("--source-cluster-id: {e}"))?;

    // The first request says whether the bucket is there at all, within
    // the store timeout, in the words both services use.
    let selected =
        match crate::first_request(&bucket, store_timeout, args.json, exporter.select()).await {
            Ok(selected) => selected,
            Err(code) => return Ok(code),
        };
    let summary = exporter.run(selected).await?;
    let code = verdict(&summary, &window, shard);
    let elapsed = started.elapsed();
    report(&summary, &window, shard, &out, elapsed);
    if args.json {
        println!("{}", json_summary(&summary, shard, &out, elapsed, code));
    }
    Ok(code)
}

/// The exit code of a finished run.
fn verdict(summary: &Summary, window: &Window, shard: Shard) -> u8 {
    exit_code(
        !summary.failures.is_empty(),
        window.from_offset.is_some()
            || window.to_offset.is_some()
            || window.from_time.is_some()
            || window.to_time.is_some(),
        summary.rows(),
        summary.partitions.len(),
        shard,
    )
}

/// The exit code (pure; the table is in the tests): 1 when a partition
/// failed; 2 when a window matched no record of any partition of an
/// unsharded run (a mistake: the line says what the records span); 0
/// otherwise. A shard may own no partition, or partitions without a
/// record in the window while other shards have some: that is not a
/// mistake of its own.
fn exit_code(failed: bool, windowed: bool, rows: u64, partitions: usize, shard: Shard) -> u8 {
    if failed {
        1
    } else if windowed && rows == 0 && partitions > 0 && shard.count == 1 {
        2
    } else {
        0
    }
}

/// `ms` as RFC 3339 and as it is; as it is only outside 1970..=9999, which
/// humantime cannot format (its `Display` fails there, and `format!` would
/// panic on a producer's garbage timestamp).
fn ms_text(ms: i64) -> String {
    match u64::try_from(ms)
        .ok()
        .filter(|&ms| ms < 253_402_300_800_000)
    {
        Some(ms) => format!(
            "{} ({ms})",
            humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms))
        ),
        None => ms.to_string(),
    }
}

/// The lines a person reads at the end (stderr).
fn report(summary: &Summary, window: &Window, shard: Shard, out: &BucketUrl, elapsed: Duration) {
    let written: u32 = summary.partitions.iter().map(|p| p.written).sum();
    let reused: u32 = summary.partitions.iter().map(|p| p.reused).sum();
    let removed: usize = summary.partitions.iter().map(|p| p.removed.len()).sum();
    let read: u64 = summary.partitions.iter().map(|p| p.bytes_read).sum();
    let bytes: u64 = summary.files().map(|f| f.bytes).sum();
    let bytes_written: u64 = summary.partitions.iter().map(|p| p.bytes_written).sum();
    if summary.partitions.is_empty() && summary.failures.is_empty() {
        eprintln!(
            "shard {shard}: none of the {} selected partitions is this shard's; nothing to do",
            summary.selected
        );
        return;
    }
    eprintln!(
        "exported {} rows in {} files of {bytes} bytes ({written} written now, {bytes_written} bytes; {reused} already there from an earlier run, {} bytes{}) from {} partitions{}; read {read} bytes in {:.1}s",
        summary.rows(),
        written + reused,
        bytes - bytes_written,
        if removed > 0 {
            format!(", {removed} overlapping old files removed")
        } else {
            String::new()
        },
        summary.partitions.len(),
        if shard.count > 1 {
            format!(" (shard {shard} of {} selected)", summary.selected)
        } else {
            String::new()
        },
        elapsed.as_secs_f64()
    );
    for p in &summary.partitions {
        if let Some(c) = &p.entry.clamp {
            eprintln!(
                "{}-{}: ends at the shipped last stable offset {} (open transactions at the shipped end {}: {}); run again later for the rest",
                p.entry.topic,
                p.entry.partition,
                c.last_stable_offset,
                c.shipped_end_offset,
                c.open_transactions
                    .iter()
                    .map(|(pid, first)| format!("producer {pid} from offset {first}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if summary.rows() == 0 && summary.failures.is_empty() {
        let seen = match summary.seen() {
            Some(s) => format!(
                "the records read span offsets {}..={} and timestamps {} to {}",
                s.min_offset,
                s.max_offset,
                ms_text(s.min_timestamp_ms),
                ms_text(s.max_timestamp_ms)
            ),
            None => "no record was read (every shipped range ends before --from-time, the offsets lie outside the shipped ones, or the partitions hold no committed record)".into(),
        };
        let asked = format!(
            "offsets {}..={}, timestamps {} to {}",
            window.from_offset.map_or("start".into(), |o| o.to_string()),
            window.to_offset.map_or("end".into(), |o| o.to_string()),
            window.from_time.map_or("any".into(), ms_text),
            window.to_time.map_or("any".into(), ms_text),
        );
        eprintln!("no record matched ({asked}): {seen}");
    }
    for (tp, e) in &summary.failures {
        eprintln!("FAILED {tp}: {}", diagnosis::one_line(e));
    }
    match &summary.manifest_key {
        Some(k) => eprintln!("run manifest: {}", object_url(out, k)),
        None if !summary.failures.is_empty() => eprintln!(
            "no run manifest written: run the same command again to resume (complete files are kept)"
        ),
        None => {}
    }
}

/// The URL of `key` in the store of `url` (a key holds the URL's prefix).
fn object_url(url: &BucketUrl, key: &str) -> String {
    match url {
        BucketUrl::File { root } => format!("file://{}", root.join(key).display()),
        BucketUrl::S3 { bucket, .. } => format!("s3://{bucket}/{key}"),
        BucketUrl::Memory => format!("memory:///{key}"),
    }
}

fn json_summary(
    summary: &Summary,
    shard: Shard,
    out: &BucketUrl,
    elapsed: Duration,
    code: u8,
) -> serde_json::Value {
    serde_json::json!({
        "exit_code": code,
        "shard": shard.to_string(),
        "out": out.to_string(),
        "selected_partitions": summary.selected,
        "partitions": summary.partitions.iter().map(|p| serde_json::json!({
            "topic": p.entry.topic,
            "partition": p.entry.partition,
            "manifest_version": p.entry.manifest_version,
            "files": p.entry.files.len(),
            "rows": p.entry.files.iter().map(|f| f.rows).sum::<u64>(),
            "written": p.written,
            "bytes_written": p.bytes_written,
            "kept": p.reused,
            "removed": p.removed,
            "bytes_read": p.bytes_read,
            "clamp": p.entry.clamp,
        })).collect::<Vec<_>>(),
        "failures": summary.failures.iter().map(|(tp, e)| serde_json::json!({
            "partition": tp.to_string(),
            "error": diagnosis::one_line(e),
            "corrupt": e.is_corrupt(),
            "retryable": e.is_retryable(),
        })).collect::<Vec<_>>(),
        "files": summary.files().count(),
        "rows": summary.rows(),
        "bytes": summary.files().map(|f| f.bytes).sum::<u64>(),
        "bytes_written": summary.partitions.iter().map(|p| p.bytes_written).sum::<u64>(),
        "manifest": summary.manifest_key.as_deref().map(|k| object_url(out, k)),
        "seconds": elapsed.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_of_a_finished_run() {
        let one = Shard::ALL;
        let of4 = Shard { index: 1, count: 4 };
        // (failed, windowed, rows, partitions, shard) -> exit code
        let cases = [
            ((true, false, 10, 3, one), 1),
            ((true, true, 0, 3, of4), 1),
            ((false, false, 10, 3, one), 0),
            // Partitions without a committed record: not a mistake.
            ((false, false, 0, 3, one), 0),
            // A window that matched nothing: a mistake.
            ((false, true, 0, 3, one), 2),
            ((false, true, 5, 3, one), 0),
            // A shard whose partitions have nothing in the window, or
            // that owns none.
            ((false, true, 0, 2, of4), 0),
            ((false, true, 0, 0, one), 0),
        ];
        for ((failed, windowed, rows, partitions, shard), want) in cases {
            assert_eq!(
                exit_code(failed, windowed, rows, partitions, shard),
                want,
                "{failed} {windowed} {rows} {partitions} {shard}"
            );
        }
    }

    #[test]
    fn any_timestamp_prints_without_panicking() {
        assert_eq!(ms_text(0), "1970-01-01T00:00:00.000Z (0)");
        assert_eq!(
            ms_text(1_700_000_000_000),
            "2023-11-14T22:13:20.000Z (1700000000000)"
        );
        for raw in [-1, i64::MIN, i64::MAX, 253_402_300_800_000] {
            assert_eq!(ms_text(raw), raw.to_string());
        }
    }

    #[test]
    fn times_are_rfc_3339_or_epoch_milliseconds() {
        assert_eq!(
            parse_time("--from-time", "2023-11-14T22:13:20Z").expect("rfc 3339"),
            1_700_000_000_000
        );
        assert_eq!(parse_time("--from-time", "42").expect("ms"), 42);
        let e = parse_time("--to-time", "tomorrow").expect_err("refused");
        assert!(e.to_string().contains("--to-time \"tomorrow\""), "{e}");
    }
}
