//! `shipper once`: ship everything shippable now, then exit.

use crate::run::{RunArgs, build};

pub(crate) async fn once(args: RunArgs) -> anyhow::Result<u8> {
    let mut shipper = build(&args)?;
    let r = shipper.ship_available().await;
    let failed: Vec<_> = shipper
        .partitions()
        .into_iter()
        .filter(|p| p.state == "failed" || p.state == "fenced")
        .collect();
    eprintln!(
        "shipped {} objects, {} bytes, {} batches; {} manifest versions, {} heads; {} partitions, {} failed",
        r.objects,
        r.bytes,
        r.batches,
        r.committed,
        r.heads,
        r.partitions,
        failed.len()
    );
    for p in &failed {
        eprintln!(
            "  {}-{}: {}: {}",
            p.topic,
            p.partition,
            p.state,
            p.detail.as_deref().unwrap_or("")
        );
    }
    Ok(if failed.is_empty() { 0 } else { 1 })
}
