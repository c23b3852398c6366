//! `shipper init`, and the bucket check of `once`/`run` (`--create-bucket`):
//! the decision and the marker are [`shipper::bucket_init`]'s; this file
//! bounds the requests, prints and picks the exit code.
//!
//! Exit codes of `init`: 0 the cluster is initialised (created now, or
//! already there: a line says which); 1 the store refused or did not
//! answer; 2 a usage or setup error (bad URL or cluster id, missing
//! credentials, a `file://` path that is not a directory or cannot be
//! read).

use std::time::Duration;

use bucket::diagnosis::{self, FirstRequestFailure};
use bucket::url::BucketUrl;
use manifest::layout::ClusterLayout;
use shipper::bucket_init::{self, Decision, InitError, Initialised};

/// Flags of `shipper init`.
#[derive(clap::Args)]
pub(crate) struct InitArgs {
    /// Take the bucket, cluster id and store timeout from this TOML file (the one `run` uses) [env: SEGMIRROR_SHIPPER_CONFIG] [default: none].
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Bucket URL: file:///abs/path or s3://bucket/prefix [env: SEGMIRROR_BUCKET] [default: none: required].
    #[arg(long, value_name = "URL")]
    bucket: Option<String>,
    /// The source cluster's id (Kafka's cluster.id) [env: SEGMIRROR_CLUSTER_ID] [default: none: required].
    #[arg(long, value_name = "ID")]
    cluster_id: Option<String>,
    /// Give up when the store does not answer within this [env: SEGMIRROR_STORE_TIMEOUT] [default: 60s].
    #[arg(long, value_name = "DURATION")]
    store_timeout: Option<String>,
}

pub(crate) async fn init(args: InitArgs) -> anyhow::Result<u8> {
    // Flags, then the environment, then the file (as run and once).
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let file = match args
        .config
        .clone()
        .or_else(|| env("SEGMIRROR_SHIPPER_CONFIG").map(Into::into))
    {
        Some(p) => shipper::ShipperConfig::from_file(&p)?,
        None => shipper::ShipperConfig::default(),
    };
    let Some(url) = args
        .bucket
        .or_else(|| env("SEGMIRROR_BUCKET"))
        .or(file.bucket)
    else {
        anyhow::bail!("no bucket: give --bucket file:///abs/path or s3://bucket/prefix");
    };
    let Some(id) = args
        .cluster_id
        .or_else(|| env("SEGMIRROR_CLUSTER_ID"))
        .or(file.cluster_id)
    else {
        anyhow::bail!("no cluster id: give --cluster-id (the source cluster's cluster.id)");
    };
    let store_timeout = args
        .store_timeout
        .or_else(|| env("SEGMIRROR_STORE_TIMEOUT"))
        .or(file.store_timeout);
    let bucket = BucketUrl::parse(&url)?;
    if matches!(bucket, BucketUrl::Memory) {
        anyhow::bail!("memory:// starts empty in every process: there is nothing to initialise");
    }
    let layout = ClusterLayout::new(bucket.prefix(), &id)?;
    let timeout = match store_timeout.as_deref() {
        None => Duration::from_secs(60),
        Some(t) => humantime::parse_duration(t.trim())
            .map_err(|e| anyhow::anyhow!("--store-timeout {t:?}: {e} (examples: 20s, 1m)"))?,
    };
    match check(&bucket, &layout, true, "shipper init", timeout).await {
        Err(code) => Ok(code),
        Ok(Initialised::Created) => {
            println!(
                "created: {bucket} is initialised for cluster {id} (wrote {})",
                layout.marker_key()
            );
            Ok(0)
        }
        Ok(Initialised::AlreadyThere(found)) => {
            println!(
                "already there: {bucket} is initialised for cluster {id} (found {found}); nothing written"
            );
            Ok(0)
        }
    }
}

/// The bucket check of `once` and `run`: `None` to go on (the marker
/// written first when `create` asks for it and the cluster is new),
/// `Some(exit code)` after printing why not.
pub(crate) async fn require(
    bucket: &BucketUrl,
    cluster_id: &str,
    create: bool,
    timeout: Duration,
) -> Option<u8> {
    // Every process's memory:// starts empty: nothing to mistype.
    if matches!(bucket, BucketUrl::Memory) {
        return None;
    }
    let layout = match ClusterLayout::new(bucket.prefix(), cluster_id) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("shipper: error: {e}");
            return Some(2);
        }
    };
    match check(bucket, &layout, create, "shipper --create-bucket", timeout).await {
        Err(code) => Some(code),
        Ok(Initialised::Created) => {
            tracing::info!(%bucket, cluster = cluster_id, key = %layout.marker_key(), "--create-bucket: initialised the bucket for this cluster");
            None
        }
        Ok(Initialised::AlreadyThere(_)) => None,
    }
}

/// Inspects, decides and (when `create` and needed) writes the marker,
/// the whole bounded by `timeout`; `Err(exit code)` after printing.
async fn check(
    bucket: &BucketUrl,
    layout: &ClusterLayout,
    create: bool,
    by: &str,
    timeout: Duration,
) -> Result<Initialised, u8> {
    if let Some(problem) = bucket::first_request::check_before_first_request(bucket).await {
        eprintln!("shipper: error: {problem}");
        return Err(problem.exit_code());
    }
    let work = async {
        let found = bucket_init::inspect(bucket, layout, || {
            Ok(bucket.build_with_retry_timeout(timeout)?)
        })
        .await?;
        match bucket_init::decide(&found, create) {
            Decision::Ship => Ok(Ok(Initialised::AlreadyThere(found))),
            Decision::Refuse => Ok(Err(bucket_init::refusal(bucket, layout, &found))),
            Decision::Create => {
                // Building a file:// store creates its directory.
                let store = bucket.build_with_retry_timeout(timeout)?;
                bucket_init::initialise(store.as_ref(), layout, found, by)
                    .await
                    .map(Ok)
            }
        }
    };
    let failure = match tokio::time::timeout(timeout, work).await {
        Ok(Ok(Ok(done))) => return Ok(done),
        Ok(Ok(Err(refusal))) => {
            eprintln!("shipper: error: {refusal}");
            return Err(2);
        }
        Ok(Err(
            e @ (InitError::NotADirectory(_)
            | InitError::Io(..)
            | InitError::Layout(_)
            | InitError::Build(_)),
        )) => {
            eprintln!("shipper: error: bucket {bucket}: {e}");
            return Err(2);
        }
        Ok(Err(e)) => FirstRequestFailure::Failed(diagnosis::one_line(&e)),
        Err(_) => FirstRequestFailure::NoAnswer(timeout),
    };
    match bucket::first_request::explain_first_request(bucket, failure.clone()).await {
        Some(problem) => {
            eprintln!("shipper: error: {problem}");
            Err(problem.exit_code())
        }
        None => {
            match failure {
                FirstRequestFailure::Failed(text) => {
                    eprintln!("shipper: error: checking the bucket {bucket}: {text}")
                }
                FirstRequestFailure::NoAnswer(t) => eprintln!(
                    "shipper: error: checking the bucket {bucket}: no answer within {}",
                    humantime::format_duration(t)
                ),
            }
            Err(1)
        }
    }
}
