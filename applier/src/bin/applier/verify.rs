//! `applier verify` and `applier repair`.

use std::path::PathBuf;

use applier::verify::{Sample, VerifyRecord};
use kafkalog::TopicPartition;

/// Settings of `verify`.
#[derive(clap::Args)]
pub(crate) struct VerifyArgs {
    /// The destination log dir.
    #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
    log_dir: PathBuf,
    /// Bucket URL: with it, each partition's header fields are also checked against its manifest and objects are sampled.
    #[arg(
        long,
        value_name = "URL",
        env = "SEGMIRROR_BUCKET",
        requires = "source_cluster_id"
    )]
    bucket: Option<String>,
    /// The source cluster mirrored (the bucket's cluster id).
    #[arg(long, value_name = "ID", env = "SEGMIRROR_SOURCE_CLUSTER_ID")]
    source_cluster_id: Option<String>,
    /// A topic by its exact name, repeatable [default: every mirror partition, as --all].
    #[arg(
        id = "topic",
        long = "topic",
        value_name = "TOPIC",
        conflicts_with = "all"
    )]
    topics: Vec<String>,
    /// Every mirror partition in the log dir (the default).
    #[arg(long)]
    all: bool,
    /// Bucket objects to check (size and CRC-32C against the manifest): a number (8), a fraction (0.05) or a percentage (5%) of the current objects.
    #[arg(long, value_name = "N|FRACTION", default_value = "8", value_parser = parse_sample)]
    sample_objects: Sample,
    /// JSON instead of lines: {"clean", "counts", "mismatches", "notes"}.
    #[arg(long)]
    json: bool,
}

fn parse_sample(text: &str) -> Result<Sample, String> {
    text.parse()
}

/// Settings of `repair`.
#[derive(clap::Args)]
pub(crate) struct RepairArgs {
    /// The destination log dir.
    #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
    log_dir: PathBuf,
    /// Bucket URL holding the partition's copy.
    #[arg(long, value_name = "URL", env = "SEGMIRROR_BUCKET")]
    bucket: String,
    /// The source cluster whose copy is used [default: the one the partition mirrored before its stop].
    #[arg(long, value_name = "ID", env = "SEGMIRROR_SOURCE_CLUSTER_ID")]
    source_cluster_id: Option<String>,
    /// The topic.
    #[arg(long, value_name = "TOPIC")]
    topic: String,
    /// The partition.
    #[arg(long, value_name = "N")]
    partition: i32,
}

fn store_of(url: &str, cluster: &str) -> anyhow::Result<bucket::store::ManifestStore> {
    let bucket = bucket::url::BucketUrl::parse(url)?;
    crate::run::require_bucket_dir(&bucket)?;
    Ok(bucket::store::ManifestStore::new(
        bucket.build()?,
        manifest::layout::ClusterLayout::new(bucket.prefix(), cluster)?,
    ))
}

/// Whether `dir` exists; says so when not (a usage error: exit 2).
fn log_dir_exists(dir: &std::path::Path) -> bool {
    let exists = dir.is_dir();
    if !exists {
        eprintln!("applier: error: log dir {} does not exist", dir.display());
    }
    exists
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(crate) async fn run(args: VerifyArgs) -> anyhow::Result<u8> {
    if !log_dir_exists(&args.log_dir) {
        return Ok(2);
    }
    let store = match (&args.bucket, &args.source_cluster_id) {
        (Some(url), Some(cluster)) => Some(store_of(url, cluster)?),
        _ => None,
    };
    let names = args.topics.clone();
    let select = move |tp: &TopicPartition| names.is_empty() || names.contains(&tp.topic);
    let targets = applier::verify::targets(&args.log_dir, &select)?;
    if !args.topics.is_empty() {
        for name in &args.topics {
            if !targets.iter().any(|t| &t.tp.topic == name) {
                eprintln!(
                    "applier: error: no mirror partition of topic {name} in {}",
                    args.log_dir.display()
                );
                return Ok(2);
            }
        }
    }
    if targets.is_empty() {
        eprintln!(
            "applier: nothing to verify: no mirror partition in {} (a partition becomes one when `applier start`/`once` begins mirroring it)",
            args.log_dir.display()
        );
    }
    let total: u64 = targets.iter().map(|t| t.bytes).sum();
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{wide_bar}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, ETA {eta}) verifying",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    let started = std::time::Instant::now();
    let seed = now_ms() as u64;
    let outcome = applier::verify::verify_targets(
        &args.log_dir,
        &targets,
        store.as_ref(),
        args.sample_objects,
        seed,
        &mut |n| bar.inc(n),
    )
    .await;
    bar.finish_and_clear();
    let outcome = outcome?;
    let elapsed = started.elapsed().as_secs_f64();
    let partitions = targets.iter().map(|t| t.tp.to_string()).collect();
    let complete = args.topics.is_empty();
    let counts = outcome.counts;
    if !targets.is_empty() {
        // Recorded for `applier status` (when the mirror was last verified)
        // and for `start` (where to cut a damaged mirror).
        VerifyRecord::update(&args.log_dir, |r| {
            r.pass_completed(&applier::verify::Pass {
                partitions: &partitions,
                found: &outcome.mismatches,
                counts,
                by: "verify",
                now_ms: now_ms(),
                complete,
                sampled_objects: store.is_some(),
            });
        })?;
    }
    let clean = outcome.counts.mismatches == 0;
    if args.json {
        // The summary line too, on stderr: stdout is the JSON.
        eprintln!(
            "{}: {} in {:.1}s",
            if clean { "clean" } else { "DAMAGED" },
            outcome.counts.summary(),
            elapsed
        );
        crate::print_out(&format!(
            "{}\n",
            serde_json::json!({
                "clean": clean,
                "counts": outcome.counts,
                "seconds": elapsed,
                "mismatches": outcome.mismatches,
                "notes": outcome.notes,
            })
        ));
    } else {
        let mut text = String::new();
        for m in &outcome.mismatches {
            text.push_str(&format!("MISMATCH {m}\n"));
        }
        for n in &outcome.notes {
            text.push_str(&format!("note: {n}\n"));
        }
        text.push_str(&format!(
            "{}: {} in {:.1}s ({:.0} MB/s)\n",
            if clean { "clean" } else { "DAMAGED" },
            outcome.counts.summary(),
            elapsed,
            outcome.counts.bytes as f64 / elapsed.max(1e-9) / 1e6
        ));
        if !clean {
            text.push_str("a damaged mirror partition is FAILED when an applier next opens the log dir; `applier start` cuts the damage and fetches it again from the bucket; a STOPPED partition: `applier repair --topic T --partition P`\n");
        }
        crate::print_out(&text);
    }
    Ok(if clean { 0 } else { 1 })
}

pub(crate) async fn repair(args: RepairArgs) -> anyhow::Result<u8> {
    if !log_dir_exists(&args.log_dir) {
        return Ok(2);
    }
    let tp = TopicPartition::new(&args.topic, args.partition)?;
    let dir = args.log_dir.join(tp.dir_name());
    let Some(record) = partdir::record::read(&dir)? else {
        eprintln!(
            "applier: error: {tp} is not a mirror partition in {}",
            args.log_dir.display()
        );
        return Ok(2);
    };
    let cluster = args
        .source_cluster_id
        .clone()
        .or(record.stopped_source_cluster_id.clone())
        .unwrap_or(record.source_cluster_id.clone());
    let store = store_of(&args.bucket, &cluster)?;
    match applier::repair::repair_stopped(&args.log_dir, &store, &tp).await {
        Ok(done) if done.segments.is_empty() => {
            println!("{tp}: verifies clean: nothing to repair");
            Ok(0)
        }
        Ok(done) => {
            println!(
                "{tp}: replaced {} damaged segment(s) at {:?} from the bucket ({} bytes); it verifies clean now; local writes after the stop untouched",
                done.segments.len(),
                done.segments,
                done.bytes
            );
            Ok(0)
        }
        Err(e) => {
            eprintln!("applier: repair refused: {e:#}");
            Ok(1)
        }
    }
}
