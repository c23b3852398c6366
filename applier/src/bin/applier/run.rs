//! `applier run`, `applier once` and `applier config check`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use applier::Applier;

use crate::Common;

/// Settings of run/once/config check.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    common: Common,
}

pub(crate) async fn run(args: RunArgs, once: bool) -> anyhow::Result<u8> {
    let v = args.common.load()?.validate(true)?;
    let store = v.bucket.as_ref().map(|b| b.build()).transpose()?;
    let mut applier = Applier::open(v.options.clone(), store)?;
    if let Some(addr) = v.metrics_addr {
        let exposition = applier::metrics::serve(addr)
            .map_err(|e| anyhow::anyhow!("metrics address {addr}: {e}"))?;
        tracing::info!(%addr, "serving Prometheus metrics on /metrics");
        applier.set_metrics(exposition);
    }
    if once {
        applier.process_command_requests().await;
        applier.retry_failures_now();
        let mut total = applier::engine::CycleReport::default();
        // Apply everything available now: cycles until one does nothing.
        for _ in 0..100 {
            let r = applier.run_once().await;
            total.batches += r.batches;
            total.bytes += r.bytes;
            if r.batches == 0 && r.transitions == 0 {
                break;
            }
        }
        let failed = applier.failed();
        eprintln!(
            "applied {} batches, {} bytes; {} partitions, {} failed",
            total.batches,
            total.bytes,
            applier.mirrors().count() + applier.unopened_count(),
            failed.len()
        );
        if !failed.is_empty() {
            let names: Vec<String> = failed.iter().map(ToString::to_string).collect();
            eprintln!(
                "FAILED: {} (see `applier status --log-dir {}`)",
                names.join(", "),
                v.options.log_dir.display()
            );
            return Ok(1);
        }
        return Ok(0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
        }
        tracing::info!("shutting down");
        flag.store(true, Ordering::Relaxed);
    });
    tracing::info!(log_dir = %v.options.log_dir.display(), source = %v.options.source_cluster_id, "applier running");
    applier.run(v.poll_interval, stop).await;
    Ok(0)
}

pub(crate) fn check(args: RunArgs) -> anyhow::Result<u8> {
    let v = args.common.load()?.validate(true)?;
    println!(
        "ok: log dir {}, bucket {}, source cluster {}",
        v.options.log_dir.display(),
        v.bucket.map(|b| b.to_string()).unwrap_or_default(),
        v.options.source_cluster_id
    );
    Ok(0)
}
