//! `applier run`, `applier once` and `applier config check`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use applier::Applier;
use applier::inventory::Verdict;
use bucket::diagnosis::FirstRequestFailure;
use bucket::url::BucketUrl;

use crate::{DaemonTuning, MirrorArgs};

/// Settings of once/config check (and run, with the Kafka listener's).
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    mirror: MirrorArgs,
    #[command(flatten)]
    tuning: DaemonTuning,
    /// Allow cutting records of a partition's own when --topics makes it a mirror: a plain partition holding data past what the source shipped (the old primary on failback). Without it such a partition is refused (logged at ERROR, shown by status, once exits 1), naming the offsets; `applier plan` shows them.
    #[arg(long)]
    allow_truncate: bool,
}

impl RunArgs {
    fn load(&self) -> anyhow::Result<applier::config::ApplierConfig> {
        self.mirror.load(&[&self.tuning])
    }
}

/// Settings of run: those of once, and the Kafka listener.
#[derive(clap::Args)]
pub(crate) struct DaemonArgs {
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    kafka: crate::kafka::KafkaArgs,
}

pub(crate) async fn daemon(args: DaemonArgs) -> anyhow::Result<u8> {
    args.kafka.check()?;
    run_with(args.run, Some(args.kafka), false).await
}

/// A `file://` bucket must be an existing directory: a mistyped path is
/// an error, not an empty bucket.
pub(crate) fn require_bucket_dir(bucket: &BucketUrl) -> anyhow::Result<()> {
    if let BucketUrl::File { root } = bucket
        && !root.is_dir()
    {
        anyhow::bail!(
            "bucket {bucket}: {} is not a directory (a mistyped path? a new bucket is set up by `shipper init --bucket {bucket} --cluster-id <source cluster id>`, or shipper once|run --create-bucket)",
            root.display()
        );
    }
    Ok(())
}

pub(crate) async fn run(args: RunArgs, once: bool) -> anyhow::Result<u8> {
    run_with(args, None, once).await
}

async fn run_with(
    args: RunArgs,
    kafka: Option<crate::kafka::KafkaArgs>,
    once: bool,
) -> anyhow::Result<u8> {
    let mut config = args.load()?;
    if let Some(k) = &kafka {
        config = config.merge(k.limits.as_config());
    }
    let mut v = config.validate(true)?;
    v.options.allow_truncate = args.allow_truncate;
    if let Some(b) = &v.bucket {
        require_bucket_dir(b)?;
        // Bucket checks (`applier doctor`'s must-haves), before the log
        // dir is opened.
        let timeout = v.store_timeout.min(std::time::Duration::from_secs(10));
        let clusters = [v.options.source_cluster_id.clone()];
        let view = doctor::View::Applier;
        if let doctor::PreflightOutcome::Refuse(failed) =
            doctor::preflight(v.preflight, view, b, &clusters, timeout).await
        {
            eprintln!("applier: error: preflight (--preflight enforce) refused {b}:");
            for line in failed {
                eprintln!("  {line}");
            }
            return Ok(1);
        }
    }
    // Each request's retries end within the store timeout (a daemon tries
    // again next cycle; `once` fails within it).
    let store = v
        .bucket
        .as_ref()
        .map(|b| b.build_with_retry_timeout(v.store_timeout))
        .transpose()?;
    let mut applier = Applier::open(v.options.clone(), store.clone())?;
    // This process holds the lock: a `serve` record is one a killed serve left.
    if applier::commands::clear_serve_marker(&v.options.log_dir) {
        tracing::info!(
            "removed the record of an `applier serve` that no longer runs (serving.json)"
        );
    }
    if !once {
        // The background verification (`applier::scrub`), run only.
        applier.enable_scrub();
    }
    // The Kafka listener's counters, on the engine's metrics endpoint.
    let listener_stats = kafka
        .as_ref()
        .and_then(|k| k.kafka_listen)
        .map(|_| Arc::new(gateway::limits::ListenerStats::default()));
    if let Some(addr) = v.metrics_addr {
        let (exposition, _) = applier::listener::serve_metrics(addr, listener_stats.clone())
            .map_err(|e| anyhow::anyhow!("metrics address {addr}: {e}"))?;
        tracing::info!(%addr, "serving Prometheus metrics on /metrics");
        applier.set_metrics(exposition);
    }
    if once {
        // An unreachable bucket is an error within a bounded time, not a
        // WARN and exit 0.
        // Said the same way as the shipper's `once`: one line naming what
        // was tried and the fix, when the problem is a recognised one.
        if let Some(bucket) = &v.bucket
            && let Some(problem) = bucket::first_request::check_before_first_request(bucket).await
        {
            eprintln!("applier: error: {problem}");
            return Ok(problem.exit_code());
        }
        if let Err(failure) = applier.probe_store(v.store_timeout).await {
            let location = &v.options.bucket_location;
            let explained = match &v.bucket {
                Some(b) => bucket::first_request::explain_first_request(b, failure.clone()).await,
                None => None,
            };
            match (explained, failure) {
                (Some(problem), _) => {
                    eprintln!("applier: error: {problem}");
                    return Ok(problem.exit_code());
                }
                (None, FirstRequestFailure::Failed(text)) => {
                    eprintln!("applier: error: cannot read the bucket {location}: {text}")
                }
                (None, FirstRequestFailure::NoAnswer(within)) => eprintln!(
                    "applier: error: cannot read the bucket {location}: no answer within {}",
                    humantime::format_duration(within)
                ),
            }
            return Ok(1);
        }
        applier.process_command_requests().await;
        applier.retry_failures_now();
        let mut total = applier::engine::CycleReport::default();
        let mut feed_error = None;
        // Apply everything available now: cycles until one does nothing.
        for _ in 0..100 {
            let r = applier.run_once().await;
            total.batches += r.batches;
            total.bytes += r.bytes;
            total.transitions += r.transitions;
            feed_error = r.feed_error;
            if r.batches == 0 && r.transitions == 0 {
                break;
            }
        }
        // The partitions that are not mirrors (the group offsets sync's
        // __consumer_offsets) are flushed and closed.
        applier.close_gateway();
        let groups = applier.group_sync();
        if let Some(e) = feed_error {
            eprintln!(
                "applier: error: cannot read the change feed in {}: {e}",
                v.options.bucket_location
            );
            return Ok(1);
        }
        let failed = applier.failed();
        eprintln!(
            "applied {} batches, {} bytes; {} partitions, {} failed",
            total.batches,
            total.bytes,
            applier.mirrors().count() + applier.unopened_count(),
            failed.len()
        );
        if let Some(rec) = groups.record().filter(|r| r.version > 0) {
            eprintln!(
                "consumer-group offsets: version {} of the source's, {} groups; {} offsets written, {} deleted, {} held at the mirror's end{}",
                rec.version,
                rec.groups.len(),
                groups.written,
                groups.deleted,
                groups.clamped,
                rec.last_error
                    .as_deref()
                    .map(|e| format!("; last error: {e}"))
                    .unwrap_or_default()
            );
        }
        // Gaps not acknowledged here: exit 1 naming each (mirroring went
        // on; the operator must know what the mirror will never have).
        let gap_lines = applier::status::open_gap_lines(&applier.status_rows(), &v.options.log_dir);
        for line in &gap_lines {
            eprintln!("{line}");
        }
        // Partitions the source deleted: kept here, said once per run (not
        // a failure: exit 0).
        eprint!(
            "{}",
            applier::status::source_deleted_note(&applier.status_rows())
        );
        // Selected but refused before becoming mirrors (a cut without
        // --allow-truncate, another topic id here): never a silent skip.
        let refused = applier.refused();
        for (tp, why) in &refused {
            eprintln!("REFUSED: {tp}: {why}");
        }
        if !failed.is_empty() {
            let names: Vec<String> = failed.iter().map(ToString::to_string).collect();
            eprintln!(
                "FAILED: {} (see `applier status --log-dir {}`)",
                names.join(", "),
                v.options.log_dir.display()
            );
            return Ok(1);
        }
        if !gap_lines.is_empty() || !refused.is_empty() {
            return Ok(1);
        }
        if total.batches == 0
            && total.transitions == 0
            && groups.written + groups.deleted == 0
            && let (Some(store), Some(bucket)) = (&store, &v.bucket)
        {
            // Nothing done: say what was found, and let the exit code tell
            // a mistyped source or selection from a bucket still empty.
            let found = bucket::store::take_inventory(
                store,
                bucket.prefix(),
                &v.options.source_cluster_id,
                applier.selection(),
            )
            .await;
            let mirrors = applier.mirrors().count() + applier.unopened_count();
            return Ok(match found {
                Ok(inv) => {
                    let verdict = applier::inventory::verdict(&inv, mirrors);
                    let why = match verdict {
                        Verdict::EmptyBucket => " (the bucket is empty: has the shipper run yet?)",
                        Verdict::SourceAbsent => {
                            " (the source cluster id is not in the bucket: check --source-cluster-id)"
                        }
                        Verdict::NothingSelected => {
                            " (no topic selected and no mirror partition here: give --topics REGEX, or `applier start --topic T`)"
                        }
                        Verdict::Ok => "",
                    };
                    eprintln!("nothing to apply; {inv}{why}");
                    verdict.exit_code()
                }
                Err(e) => {
                    eprintln!(
                        "applier: error: cannot read the bucket {}: {e}",
                        v.options.bucket_location
                    );
                    1
                }
            });
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
    let listener = match kafka.as_ref().and_then(|k| k.kafka_listen.map(|a| (k, a))) {
        Some((k, addr)) => {
            let p = crate::kafka::plumbing(&v.options.log_dir);
            applier.set_gateway(applier::serving::GatewayLink::new(
                p.receiver,
                p.view.clone(),
                p.appends.clone(),
                p.groups.clone(),
            ));
            let cluster = v.options.local_cluster_id.as_deref().unwrap_or("segmirror");
            Some(
                k.start(
                    addr,
                    v.kafka_limits.clone(),
                    listener_stats.clone().unwrap_or_default(),
                    cluster,
                    p.view,
                    p.appends,
                    Some(p.sender),
                    p.groups,
                )
                .await?,
            )
        }
        None => None,
    };
    tracing::info!(log_dir = %v.options.log_dir.display(), source = %v.options.source_cluster_id, "applier running");
    applier.run(v.poll_interval, stop).await;
    if let Some(l) = listener {
        l.shutdown().await;
    }
    applier.close_gateway();
    Ok(0)
}

pub(crate) fn check(args: RunArgs) -> anyhow::Result<u8> {
    let v = args.load()?.validate(true)?;
    println!(
        "ok: log dir {}, bucket {}, source cluster {}",
        v.options.log_dir.display(),
        v.bucket.map(|b| b.to_string()).unwrap_or_default(),
        v.options.source_cluster_id
    );
    Ok(0)
}
