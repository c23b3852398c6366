//! `shipper gaps list|ack`: the gaps recorded in the bucket's manifests
//! (offsets the source lost before they were shipped), and acknowledging
//! one of them (a new manifest version: see the library's `gaps` module).

use bucket::store::ManifestStore;
use bucket::url::BucketUrl;
use manifest::layout::ClusterLayout;
use shipper::gaps::AckOutcome;

/// Where the manifests are (`status` and `gaps` take the same flags).
#[derive(clap::Args)]
pub(crate) struct Where {
    /// Bucket URL: file:///abs/path, memory:// or s3://bucket/prefix [env: SEGMIRROR_BUCKET].
    #[arg(long, value_name = "URL")]
    bucket: Option<String>,
    /// The source cluster's id [env: SEGMIRROR_CLUSTER_ID].
    #[arg(long, value_name = "ID")]
    cluster_id: Option<String>,
}

impl Where {
    /// The store, with the bucket URL and the cluster id it was built from.
    pub(crate) fn open(&self) -> anyhow::Result<(ManifestStore, BucketUrl, String)> {
        let bucket = self
            .bucket
            .clone()
            .or_else(|| std::env::var("SEGMIRROR_BUCKET").ok())
            .ok_or_else(|| {
                anyhow::anyhow!("--bucket URL is required (file:///abs/path, s3://bucket/prefix)")
            })?;
        let cluster = self
            .cluster_id
            .clone()
            .or_else(|| std::env::var("SEGMIRROR_CLUSTER_ID").ok())
            .ok_or_else(|| {
                anyhow::anyhow!("--cluster-id ID is required (the source cluster's id)")
            })?;
        let url = BucketUrl::parse(&bucket)?;
        let layout = ClusterLayout::new(url.prefix(), &cluster)?;
        Ok((ManifestStore::new(url.build()?, layout), url, cluster))
    }

    fn store(&self) -> anyhow::Result<ManifestStore> {
        self.open().map(|(store, _, _)| store)
    }
}

#[derive(clap::Subcommand)]
pub(crate) enum GapsCmd {
    /// Every recorded gap, per partition, with whether it is acknowledged (exit 0).
    List {
        #[command(flatten)]
        at: Where,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Acknowledge one recorded gap, named by partition and offsets (exit 1 when there is no such gap: the ones there are are listed).
    Ack {
        #[command(flatten)]
        at: Where,
        /// The topic.
        #[arg(long, value_name = "NAME")]
        topic: String,
        /// The partition.
        #[arg(long, value_name = "N")]
        partition: i32,
        /// The gap's offsets, FIRST-LAST, as `gaps list` and `once` print them.
        #[arg(long, value_name = "FIRST-LAST")]
        offsets: String,
    },
}

pub(crate) async fn gaps(cmd: GapsCmd) -> anyhow::Result<u8> {
    match cmd {
        GapsCmd::List { at, json } => {
            let store = at.store()?;
            let all = shipper::gaps::list(&store).await?;
            if json {
                println!("{}", serde_json::json!({ "partitions": all }));
                return Ok(0);
            }
            if all.is_empty() {
                println!("no gaps recorded");
            }
            for p in &all {
                for g in &p.gaps {
                    let ack = match g.acknowledged_at_ms {
                        Some(at) => format!("acknowledged at {at} ms"),
                        None if g.is_loss() => "NOT acknowledged".to_string(),
                        None => "not a loss".to_string(),
                    };
                    println!("{}-{}  {g}  {ack}", p.topic, p.partition);
                }
            }
            Ok(0)
        }
        GapsCmd::Ack {
            at,
            topic,
            partition,
            offsets,
        } => {
            let tp = kafkalog::TopicPartition::new(&topic, partition)?;
            let (first, last) = manifest::gaps::parse_offsets(&offsets)
                .map_err(|e| anyhow::anyhow!("--offsets {e}"))?;
            let store = at.store()?;
            let now = manifest::clock::Clock::now_ms(&manifest::clock::SystemClock);
            match shipper::gaps::acknowledge(&store, &tp, first, last, now).await? {
                AckOutcome::Acknowledged { version, gap } => {
                    println!("{tp}: acknowledged the gap at {gap} in manifest version {version}");
                    Ok(0)
                }
                AckOutcome::AlreadyAcknowledged(gap) => {
                    println!("{tp}: the gap at {gap} was already acknowledged");
                    Ok(0)
                }
                AckOutcome::NoSuchGap(there) => {
                    eprintln!(
                        "shipper: error: {tp} {}",
                        manifest::gaps::no_such_gap(first, last, &there)
                    );
                    Ok(1)
                }
                AckOutcome::NoPartition => {
                    eprintln!(
                        "shipper: error: {tp} has no manifest in the bucket (nothing shipped for it): no gap to acknowledge"
                    );
                    Ok(1)
                }
            }
        }
    }
}
