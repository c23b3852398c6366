//! `shipper run`: the daemon.

use std::sync::Arc;

use bucket::counting::CountingStore;
use shipper::config::Validated;
use shipper::{Metrics, Shipper};

use crate::Common;

/// Settings of `run`: those of `once`, and the intervals.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) once: OnceArgs,
    #[command(flatten)]
    pub(crate) intervals: crate::Intervals,
}

/// Settings of `once`.
#[derive(clap::Args)]
pub(crate) struct OnceArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Set up a new bucket: create the file:// directory or start an empty S3 prefix for this cluster (as `shipper init` does); without it a bucket never set up is refused (exit 2) [default: false].
    #[arg(long)]
    pub(crate) create_bucket: bool,
}

/// Builds the shipper from a validated configuration, with metrics served
/// when an address is configured.
pub(crate) fn build_validated(v: Validated) -> anyhow::Result<Shipper> {
    // Each request's retries end within the store timeout (a daemon tries
    // again next cycle; `once` fails within it).
    let counting = CountingStore::new(v.bucket.build_with_retry_timeout(v.store_timeout)?);
    let prices = bucket::pricing::Prices::preset(&v.options.prices)
        .ok_or_else(|| anyhow::anyhow!("prices: {:?} is not a known preset", v.options.prices))?;
    let metrics =
        Arc::new(Metrics::new(Some(counting.clone())).with_prices(&v.options.prices, prices));
    if let Some(addr) = v.metrics_addr {
        let bound = metrics.serve(addr)?;
        tracing::info!(%bound, "serving metrics on GET /metrics");
    }
    tracing::info!(
        bucket = %v.bucket,
        cluster = %v.options.cluster_id,
        shipper_id = %v.options.shipper_id,
        log_dirs = %v
            .options
            .log_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        "shipper starting"
    );
    Ok(Shipper::new(v.options, counting.as_dyn())?.with_metrics(metrics))
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
    tracing::info!("signal received: finishing the cycle in progress, then stopping");
}

/// The bucket checks at start (`preflight`); `Some(1)` when `enforce`
/// refuses to start.
pub(crate) async fn preflight(v: &Validated) -> Option<u8> {
    let timeout = v.store_timeout.min(std::time::Duration::from_secs(10));
    let clusters = [v.options.cluster_id.clone()];
    match doctor::preflight(
        v.preflight,
        doctor::View::Shipper,
        &v.bucket,
        &clusters,
        timeout,
    )
    .await
    {
        doctor::PreflightOutcome::Proceed => None,
        doctor::PreflightOutcome::Refuse(failed) => {
            eprintln!(
                "shipper: error: preflight (--preflight enforce) refused {}:",
                v.bucket
            );
            for line in failed {
                eprintln!("  {line}");
            }
            Some(1)
        }
    }
}

pub(crate) async fn run(args: RunArgs) -> anyhow::Result<u8> {
    let v = args.intervals.over(args.once.common.load()?).validate()?;
    let cluster = v.options.cluster_id.clone();
    if let Some(code) = crate::init::require(
        &v.bucket,
        &cluster,
        args.once.create_bucket,
        v.store_timeout,
    )
    .await
    {
        return Ok(code);
    }
    if let Some(code) = preflight(&v).await {
        return Ok(code);
    }
    let mut shipper = build_validated(v)?;
    shipper.run(shutdown_signal()).await;
    Ok(0)
}
