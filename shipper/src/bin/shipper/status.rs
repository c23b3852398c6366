//! `shipper status`: what the bucket says about every partition.

/// Settings of `status`.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    at: crate::gaps::Where,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<u8> {
    let (store, url, cluster) = args.at.open()?;
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
