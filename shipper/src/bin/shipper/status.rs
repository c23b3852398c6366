//! `shipper status`: what the bucket says about every partition.

use manifest::bucket::BucketUrl;
use manifest::layout::ClusterLayout;
use manifest::store::ManifestStore;

/// Settings of `status`.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    /// Bucket URL: file:///abs/path, memory:// or s3://bucket/prefix [env: SEGMIRROR_BUCKET].
    #[arg(long, value_name = "URL")]
    bucket: Option<String>,
    /// The source cluster's id [env: SEGMIRROR_CLUSTER_ID].
    #[arg(long, value_name = "ID")]
    cluster_id: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<u8> {
    let bucket = args
        .bucket
        .or_else(|| std::env::var("SEGMIRROR_BUCKET").ok())
        .ok_or_else(|| {
            anyhow::anyhow!("--bucket URL is required (file:///abs/path, s3://bucket/prefix)")
        })?;
    let cluster = args
        .cluster_id
        .or_else(|| std::env::var("SEGMIRROR_CLUSTER_ID").ok())
        .ok_or_else(|| anyhow::anyhow!("--cluster-id ID is required (the source cluster's id)"))?;
    let url = BucketUrl::parse(&bucket)?;
    let layout = ClusterLayout::new(url.prefix(), &cluster)?;
    let store = ManifestStore::new(url.build()?, layout);
    let Some(status) = shipper::status::bucket_status(&store).await? else {
        if args.json {
            println!("null");
        } else {
            println!("nothing shipped for cluster {cluster} in {url}");
        }
        return Ok(0);
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        print!("{}", shipper::status::render_table(&status, now));
    }
    Ok(0)
}
