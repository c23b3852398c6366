//! `shipper config check`: validate the merged configuration.

use crate::Common;

/// Settings of `config check`.
#[derive(clap::Args)]
#[command(
    after_help = "Environment variables (each overrides the file; flags override them):
  SEGMIRROR_SHIPPER_CONFIG, SEGMIRROR_LOG_DIRS (paths separated by ':'), SEGMIRROR_LOG_DIR (one), SEGMIRROR_BUCKET,
  SEGMIRROR_CLUSTER_ID, SEGMIRROR_SHIPPER_ID, SEGMIRROR_TOPICS, SEGMIRROR_EXCLUDE,
  SEGMIRROR_TAIL_INTERVAL, SEGMIRROR_UPLOAD_CONCURRENCY, SEGMIRROR_PART_SIZE,
  SEGMIRROR_MAX_OBJECT_SIZE, SEGMIRROR_MAX_CYCLE_BYTES, SEGMIRROR_RATE_LIMIT,
  SEGMIRROR_SHIP_BEYOND_HW, SEGMIRROR_METRICS_ADDR, SEGMIRROR_DELETE_GRACE,
  SEGMIRROR_SWEEP_INTERVAL, SEGMIRROR_PARTITION_DELETE_GRACE, SEGMIRROR_FENCE_BACKOFF,
  SEGMIRROR_ERROR_BACKOFF, SEGMIRROR_STORE_TIMEOUT

Examples:
  shipper config check --config /etc/segmirror/shipper.toml
  SEGMIRROR_TAIL_INTERVAL=2s shipper config check --config /etc/segmirror/shipper.toml"
)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    intervals: crate::Intervals,
}

pub(crate) fn check(args: CheckArgs) -> anyhow::Result<u8> {
    let config = args.intervals.over(args.common.load()?);
    let v = config.validate()?;
    let o = &v.options;
    println!(
        "ok: cluster {}, bucket {}, shipper id {}, log dirs {}",
        o.cluster_id,
        v.bucket,
        o.shipper_id,
        o.log_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "   tail every {}, {} uploads at once, parts of {}, objects up to {}, {}, rate {}, delete unreferenced {}",
        humantime::format_duration(o.tail_interval),
        o.upload_concurrency,
        shipper::config::ByteSize(o.part_size as u64),
        shipper::config::ByteSize(o.max_object_size),
        if o.pack_below == 0 {
            "no packs".to_string()
        } else {
            format!(
                "ranges under {} packed",
                shipper::config::ByteSize(o.pack_below)
            )
        },
        o.rate_limit.map_or("unlimited".to_string(), |r| format!(
            "{}/s",
            shipper::config::ByteSize(r)
        )),
        o.delete_grace.map_or("never".to_string(), |g| format!(
            "after {}",
            humantime::format_duration(g)
        ))
    );
    Ok(0)
}
