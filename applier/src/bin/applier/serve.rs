//! `applier serve`: serve a log dir over the Kafka protocol without
//! mirroring (after failover, or a restored backfill). This process takes
//! the log dir's lock and is its single writer: mirror partitions are read
//! only until STOPPED, other partitions take producers' writes.

use std::path::PathBuf;
use std::sync::Arc;

use applier::config::ApplierConfig;
use gateway::DirWriter;

use crate::kafka::KafkaArgs;

/// Settings of `serve`.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// The log dir to serve.
    #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
    log_dir: PathBuf,
    /// The cluster id reported to clients [default: segmirror].
    #[arg(long, value_name = "ID", env = "SEGMIRROR_CLUSTER_ID")]
    cluster_id: Option<String>,
    /// The applier's TOML configuration file: serve reads its kafka_* listener limits (`applier config example`) [default: none].
    #[arg(long, value_name = "FILE", env = "SEGMIRROR_APPLIER_CONFIG")]
    config: Option<PathBuf>,
    /// Serve the listener's Prometheus metrics on this address (host:port) [default: not served].
    #[arg(long, value_name = "ADDR", env = "SEGMIRROR_METRICS_ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    kafka: KafkaArgs,
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<u8> {
    args.kafka.check()?;
    let Some(addr) = args.kafka.kafka_listen else {
        anyhow::bail!("--kafka-listen HOST:PORT is required (e.g. 127.0.0.1:9092)");
    };
    if !args.log_dir.is_dir() {
        eprintln!(
            "applier: log dir {} does not exist: nothing to serve",
            args.log_dir.display()
        );
        return Ok(2);
    }
    let dir = kafkalog::LogDir::open(&args.log_dir).map_err(|e| {
        anyhow::anyhow!("{e} (is `applier run` serving it? give that one --kafka-listen instead)")
    })?;
    let file = match &args.config {
        Some(path) => ApplierConfig::from_file(path)?,
        None => ApplierConfig::default(),
    };
    let limits = applier::listener::limits(&file.merge(args.kafka.limits.as_config()))?;
    let stats = Arc::new(gateway::limits::ListenerStats::default());
    if let Some(addr) = args.metrics_addr {
        applier::listener::serve_metrics(addr, Some(stats.clone()))
            .map_err(|e| anyhow::anyhow!("metrics address {addr}: {e}"))?;
        tracing::info!(%addr, "serving Prometheus metrics on /metrics");
    }
    let p = crate::kafka::plumbing(&args.log_dir);
    let writer = DirWriter::new(dir, p.view.clone(), p.appends.clone());
    let receiver = p.receiver;
    let writer_thread = std::thread::spawn(move || writer.run(receiver));
    // Commands (`applier stop`) find the lock held: this record tells them
    // that no engine will answer (`applier::commands`). It is written before
    // the listener opens, so whoever sees the port also sees the record.
    if let Err(e) = applier::commands::ServeMarker::write(&args.log_dir) {
        tracing::warn!(error = %e, "could not record serving.json: `applier stop` on this log dir will wait for its timeout");
    }
    let cluster = args.cluster_id.as_deref().unwrap_or("segmirror");
    let listener = match args
        .kafka
        .start(
            addr,
            limits,
            stats,
            cluster,
            p.view,
            p.appends,
            Some(p.sender),
            p.groups,
        )
        .await
    {
        Ok(listener) => listener,
        Err(e) => {
            let _ = applier::commands::clear_serve_marker(&args.log_dir);
            return Err(e);
        }
    };
    eprintln!(
        "serving {} over the Kafka protocol on {} (Ctrl-C or SIGTERM to stop)",
        args.log_dir.display(),
        listener.addr
    );
    wait_for_signal().await;
    listener.shutdown().await;
    // Every sender is gone with the listener: the writer closes the logs.
    let _ = tokio::task::spawn_blocking(move || writer_thread.join()).await;
    let _ = applier::commands::clear_serve_marker(&args.log_dir);
    Ok(0)
}

async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
    }
    tracing::info!("shutting down");
}
