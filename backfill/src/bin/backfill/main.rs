//! `backfill`: batch jobs straight from a segmirror bucket (no broker, no
//! local log). A thin shell over the `backfill` library.

mod export;
mod restore;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "Examples:
  backfill export --bucket file:///data/bucket --source-cluster-id src --topics 'orders|payments' --out file:///data/parquet
  backfill export --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics '.*' --exclude 'tmp-.*' --out s3://lake/kafka --from-time 2026-12-01T00:00:00Z --to-time 2026-12-02T00:00:00Z
  backfill export --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics orders --out s3://lake/kafka --shard 3/16 --json
  backfill restore --bucket s3://dr-bucket/segmirror --source-cluster-id src --topics 'orders|payments' --log-dir /data/restored --until 2026-12-01T03:00:00Z --dry-run

Exit codes: 0 done; 1 a partition failed (a corrupt object, the store unreachable or
refusing a request); 2 a usage or setup error, or nothing to do because the
cluster, topics, partitions, window or cut match nothing (a line says what exists).";

#[derive(Parser)]
#[command(
    name = "backfill",
    version,
    about = "Batch jobs straight from a segmirror bucket: Parquet export of shipped topics, point-in-time restore to a Kafka log dir",
    after_help = EXAMPLES,
    // Never hard-wrap: every example line pastes as it is (terminals wrap).
    term_width = 0
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write shipped records as Parquet files: one per source segment, under
    /// <out>/topic=T/partition=P/<first>-<last>.parquet, then <out>/_manifest.json.
    #[command(after_help = export::EXAMPLES)]
    Export(export::ExportArgs),
    /// Build a writable Kafka log dir of the topics as they were at a cut
    /// (--until TIME or --until-offset N), straight from the bucket.
    #[command(after_help = restore::EXAMPLES)]
    Restore(restore::RestoreArgs),
}

/// The first request of a run: the selection, within `timeout`. On
/// failure prints one line on stderr (what the bucket holds, or the store
/// problem and its fix) and, with `json`, `{"exit_code", "error"}` on
/// stdout; returns the exit code.
pub(crate) async fn first_request(
    bucket: &bucket::url::BucketUrl,
    timeout: std::time::Duration,
    json: bool,
    select: impl std::future::Future<
        Output = Result<
            Result<Vec<manifest::feed::HeadEntry>, backfill::export::NothingSelected>,
            backfill::error::ExportError,
        >,
    >,
) -> Result<Vec<manifest::feed::HeadEntry>, u8> {
    use bucket::diagnosis::{self, FirstRequestFailure};
    let (code, line) =
        if let Some(problem) = bucket::first_request::check_before_first_request(bucket).await {
            (problem.exit_code(), problem.to_string())
        } else {
            match tokio::time::timeout(timeout, select).await {
                Ok(Ok(Ok(selected))) => return Ok(selected),
                Ok(Ok(Err(nothing))) => (2, format!("nothing to do: {nothing}")),
                Ok(Err(e)) => {
                    let text = diagnosis::one_line(&e);
                    let explained = bucket::first_request::explain_first_request(
                        bucket,
                        FirstRequestFailure::Failed(text.clone()),
                    )
                    .await;
                    let line = match explained {
                        Some(problem) => problem.to_string(),
                        None => format!("cannot read the bucket {}: {text}", bucket.location()),
                    };
                    (1, line)
                }
                Err(_) => {
                    let explained = bucket::first_request::explain_first_request(
                        bucket,
                        FirstRequestFailure::NoAnswer(timeout),
                    )
                    .await;
                    let line = match explained {
                        Some(problem) => problem.to_string(),
                        None => format!(
                            "cannot read the bucket {}: no answer within {}",
                            bucket.location(),
                            humantime::format_duration(timeout)
                        ),
                    };
                    (1, line)
                }
            }
        };
    eprintln!("backfill: error: {line}");
    if json {
        println!(
            "{}",
            serde_json::json!({ "exit_code": code, "error": line })
        );
    }
    Err(code)
}

/// Log lines on stderr (`RUST_LOG`, default `info`; `warn` under a
/// progress bar, which the lines would tear).
fn init_logging(bar: bool) {
    // object_store logs each retry at INFO: one line per failed attempt is
    // noise next to the one error line a failed run prints.
    let default = if bar {
        "warn"
    } else {
        "info,object_store=warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let bar = std::io::stderr().is_terminal();
    init_logging(bar);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("backfill: error: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Cmd::Export(a) => export::run(a, bar).await,
            Cmd::Restore(a) => restore::run(a).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // Each cause once (object_store's errors both interpolate and
            // return their source).
            let err: &(dyn std::error::Error + 'static) = e.as_ref();
            eprintln!("backfill: error: {}", bucket::diagnosis::one_line(err));
            ExitCode::from(2)
        }
    }
}
