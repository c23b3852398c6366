//! `applier plan`: what `start`/`once` would do, changing nothing.

use crate::MirrorArgs;

/// Settings of `plan`.
#[derive(clap::Args)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    mirror: MirrorArgs,
    /// JSON instead of a table (`{"partitions": [...]}`).
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(args: PlanArgs) -> anyhow::Result<u8> {
    let v = args.mirror.load(&[])?.validate(true)?;
    let Some(bucket) = &v.bucket else {
        anyhow::bail!("--bucket is required");
    };
    crate::run::require_bucket_dir(bucket)?;
    // What start and once would refuse first: a dir a running broker owns
    // (plan itself only reads, so it still shows what they would do).
    if let Err(e) = kafkalog::logdir::refuse_if_owned_by_broker(&v.options.log_dir) {
        eprintln!("applier: warning: start and once would be refused now: {e}");
    }
    let store = bucket::store::ManifestStore::new(
        bucket.build_with_retry_timeout(v.store_timeout)?,
        manifest::layout::ClusterLayout::new(bucket.prefix(), &v.options.source_cluster_id)?,
    );
    let rows =
        match tokio::time::timeout(v.store_timeout, applier::plan::plan_all(&v.options, &store))
            .await
        {
            Ok(rows) => rows?,
            Err(_) => {
                eprintln!(
                    "applier: error: cannot read the bucket {}: no answer within {}",
                    v.options.bucket_location,
                    humantime::format_duration(v.store_timeout)
                );
                return Ok(1);
            }
        };
    if args.json {
        crate::print_out(&format!("{}\n", serde_json::json!({ "partitions": rows })));
    } else if rows.is_empty() {
        // Say what the bucket holds, and exit 2 on a mistyped source or
        // selection, as `once` does.
        let selection = manifest::topic_pattern::Selection {
            include: v.options.topics.as_ref(),
            exclude: v.options.exclude.as_ref(),
        };
        let inv = bucket::store::take_inventory(
            store.object_store(),
            bucket.prefix(),
            &v.options.source_cluster_id,
            selection,
        )
        .await?;
        println!(
            "nothing to plan: no mirror partition in {} and no topic selected; {inv}",
            v.options.log_dir.display()
        );
        return Ok(applier::inventory::verdict(&inv, 0).exit_code());
    } else {
        crate::print_out(&applier::plan::table(&rows));
    }
    Ok(0)
}
