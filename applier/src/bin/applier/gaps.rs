//! `applier gaps list|ack`: offsets this mirror never received (from the
//! source's manifests or seen here), and acknowledging one of them. No lock:
//! safe while `applier run` holds the log dir (the acknowledgements are a
//! file the daemon never writes; see the library's `gaps` module).

use std::path::PathBuf;

use applier::gaps::AckOutcome;

#[derive(clap::Subcommand)]
pub(crate) enum GapsCmd {
    /// Every known gap, per partition, with whether it is acknowledged here (exit 0).
    List {
        /// The destination log dir.
        #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
        log_dir: PathBuf,
        /// JSON instead of lines (`{"partitions": {"topic-partition": [gap, ...]}}`).
        #[arg(long)]
        json: bool,
    },
    /// Acknowledge one known gap, named by partition and offsets (exit 1 when there is no such gap: the ones there are are listed).
    Ack {
        /// The destination log dir.
        #[arg(long, value_name = "DIR", env = "SEGMIRROR_LOG_DIR")]
        log_dir: PathBuf,
        /// The topic, by its exact name.
        #[arg(long, value_name = "TOPIC")]
        topic: String,
        /// The partition.
        #[arg(long, value_name = "N")]
        partition: i32,
        /// The gap's offsets, FIRST-LAST, as `gaps list`, `status` and `once` print them.
        #[arg(long, value_name = "FIRST-LAST")]
        offsets: String,
    },
}

pub(crate) fn run(cmd: GapsCmd) -> anyhow::Result<u8> {
    match cmd {
        GapsCmd::List { log_dir, json } => {
            if !log_dir.is_dir() {
                eprintln!("applier: log dir {} does not exist", log_dir.display());
                return Ok(2);
            }
            let all = applier::gaps::statuses(&log_dir)?;
            if json {
                crate::print_out(&format!("{}\n", serde_json::json!({ "partitions": all })));
                return Ok(0);
            }
            let mut text = String::new();
            for (tp, gaps) in &all {
                for g in gaps {
                    let ack = match (g.gap.gap.is_loss(), g.acknowledged_here_at_ms) {
                        (_, Some(at)) => format!("acknowledged at {at} ms"),
                        (true, None) => "NOT acknowledged".to_string(),
                        (false, None) => "not a loss".to_string(),
                    };
                    text.push_str(&format!(
                        "{tp}  {}  seen by {:?}  {ack}\n",
                        g.gap.gap, g.gap.seen_by
                    ));
                }
            }
            if text.is_empty() {
                text.push_str("no gaps known\n");
            }
            crate::print_out(&text);
            Ok(0)
        }
        GapsCmd::Ack {
            log_dir,
            topic,
            partition,
            offsets,
        } => {
            if !log_dir.is_dir() {
                eprintln!("applier: log dir {} does not exist", log_dir.display());
                return Ok(2);
            }
            let tp = kafkalog::TopicPartition::new(&topic, partition)?;
            let (first, last) = manifest::gaps::parse_offsets(&offsets)
                .map_err(|e| anyhow::anyhow!("--offsets {e}"))?;
            let now = manifest::clock::Clock::now_ms(&manifest::clock::SystemClock);
            match applier::gaps::acknowledge(&log_dir, &tp, first, last, now)? {
                AckOutcome::Acknowledged(gap) => {
                    println!("{tp}: acknowledged the gap at {gap}");
                    Ok(0)
                }
                AckOutcome::AlreadyAcknowledged(gap) => {
                    println!("{tp}: the gap at {gap} was already acknowledged");
                    Ok(0)
                }
                AckOutcome::NoSuchGap(there) => {
                    eprintln!(
                        "applier: error: {tp} {}",
                        manifest::gaps::no_such_gap(first, last, &there)
                    );
                    Ok(1)
                }
            }
        }
    }
}
