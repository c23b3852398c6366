//! `shipper once`: ship everything shippable now, then exit.
//!
//! Never a silent no-op: no readable log dir is exit 2 naming each dir and
//! why; log dirs where no partition has a topic id (no `partition.metadata`:
//! Kafka before 2.8, or an inter-broker protocol below 2.8) are exit 2 with
//! one message saying why and what to do (some without one are shipped
//! around, and counted in the summary); a gap not acknowledged
//! (`shipper gaps ack`) is exit 1 naming the partition and the offsets; a store that does not answer within `store_timeout` is exit 1
//! naming the endpoint and the error (a probe of the store, bounded by the
//! timeout, runs before any partition is walked); a run that shipped
//! nothing says what it found in one line.
//!
//! A bucket never set up (a `file://` directory that does not exist, or no
//! key of this cluster under the prefix: `shipper::bucket_init`) is exit 2
//! naming both ways out, unless `--create-bucket` sets it up.
//!
//! A recognised bucket problem ([`bucket::diagnosis`]: no credentials,
//! wrong region, access denied, no such bucket, unreachable endpoint) is
//! one line naming what was tried and the fix: exit 1, but 2 for missing
//! credentials (a setup error: checked before the first request when
//! credentials would come from instance metadata).

use bucket::diagnosis::{self, FirstRequestFailure};
use bucket::url::BucketUrl;
use shipper::{CycleReport, PartitionStatus};

use crate::run::{OnceArgs, build_validated};

pub(crate) async fn once(args: OnceArgs) -> anyhow::Result<u8> {
    let config = args.common.load()?;
    let selection = selection(&config);
    let v = config.validate()?;
    let dirs = &v.options.log_dirs;
    let unreadable: Vec<(String, String)> = dirs
        .iter()
        .filter_map(|d| {
            shipper::why_log_dir_unreadable(d).map(|why| (d.display().to_string(), why))
        })
        .collect();
    if unreadable.len() == dirs.len() {
        eprintln!("shipper: error: no log dir is readable:");
        for (d, why) in &unreadable {
            eprintln!("  {d}: {why}");
        }
        return Ok(2);
    }
    for (d, why) in &unreadable {
        tracing::warn!(log_dir = %d, %why, "log dir unreadable: shipping the others");
    }
    let timeout = v.store_timeout;
    let endpoint = endpoint(&v.bucket);
    let bucket = v.bucket.clone();
    let ack = format!(
        "shipper gaps ack --bucket {} --cluster-id {}",
        v.bucket, v.options.cluster_id
    );
    // Credentials from instance metadata on a machine without it: said
    // before any request (the client would retry until the timeout).
    if let Some(problem) = bucket::first_request::check_before_first_request(&bucket).await {
        eprintln!("shipper: error: {problem}");
        return Ok(problem.exit_code());
    }
    // A bucket never set up is refused (a typo), or set up on request.
    let cluster = v.options.cluster_id.clone();
    if let Some(code) = crate::init::require(&bucket, &cluster, args.create_bucket, timeout).await {
        return Ok(code);
    }
    if let Some(code) = crate::run::preflight(&v).await {
        return Ok(code);
    }
    let mut shipper = build_validated(v)?;
    // One request the whole run depends on, bounded: an unreachable store
    // is reported before any partition is walked.
    let failure = match tokio::time::timeout(timeout, shipper.store().latest_head_seq()).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(FirstRequestFailure::Failed(diagnosis::one_line(&e))),
        Err(_) => Some(FirstRequestFailure::NoAnswer(timeout)),
    };
    if let Some(failure) = failure {
        match bucket::first_request::explain_first_request(&bucket, failure.clone()).await {
            Some(problem) => {
                eprintln!("shipper: error: {problem}");
                return Ok(problem.exit_code());
            }
            None => match failure {
                FirstRequestFailure::Failed(text) => {
                    eprintln!("shipper: error: the store at {endpoint}: {text}")
                }
                FirstRequestFailure::NoAnswer(_) => eprintln!(
                    "shipper: error: the store at {endpoint} did not answer within {}{}",
                    humantime::format_duration(timeout),
                    if matches!(bucket, BucketUrl::S3 { .. }) {
                        ": it accepts connections but no request was answered"
                    } else {
                        ""
                    }
                ),
            },
        }
        return Ok(1);
    }
    let r = shipper.ship_available().await;
    let partitions = shipper.partitions();
    if let Some(message) = no_topic_ids(&partitions) {
        eprintln!("shipper: error: {message}");
        return Ok(2);
    }
    let gap_lines = unacknowledged_gaps(&partitions, &ack);
    let failed: Vec<&PartitionStatus> = partitions
        .iter()
        .filter(|p| p.state == "failed" || p.state == "fenced")
        .collect();
    if r.committed == 0
        && r.objects == 0
        && r.group_versions == 0
        && failed.is_empty()
        && r.errors.is_empty()
    {
        eprintln!("{}", nothing_shipped(&r, &partitions, &selection));
        for line in &gap_lines {
            eprintln!("{line}");
        }
        return Ok(if gap_lines.is_empty() { 0 } else { 1 });
    }
    eprintln!(
        "shipped {} objects, {} bytes, {} batches; {} manifest versions, {} consumer-group offsets versions, {} heads; {} partitions, {} failed",
        r.objects,
        r.bytes,
        r.batches,
        r.committed,
        r.group_versions,
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
    // Cluster-wide errors ("-") and the group offsets' (not a partition).
    let cluster_wide = |p: &String| p == "-" || p == kafkalog::offsets_topic::OFFSETS_TOPIC;
    for (p, e) in r.errors.iter().filter(|(p, _)| cluster_wide(p)) {
        eprintln!("  {p}: {e}");
    }
    let no_id = partitions
        .iter()
        .filter(|p| p.state == "no_topic_id")
        .count();
    if no_id > 0 {
        eprintln!(
            "  {no_id} partitions without a topic id (no partition.metadata) were not shipped: see the warning above"
        );
    }
    let standby = partitions.iter().filter(|p| p.state == "standby").count();
    if standby > 0 {
        eprintln!(
            "  {standby} partitions were left to the shippers of the brokers that lead them (standby here)"
        );
    }
    for p in partitions.iter().filter(|p| p.role == Some("untrusted")) {
        eprintln!(
            "  {}-{}: {}",
            p.topic,
            p.partition,
            p.detail.as_deref().unwrap_or("")
        );
    }
    for line in &gap_lines {
        eprintln!("{line}");
    }
    Ok(
        if failed.is_empty()
            && gap_lines.is_empty()
            && !r.errors.iter().any(|(p, _)| cluster_wide(p))
        {
            0
        } else {
            1
        },
    )
}

/// When partitions were found and none has a topic id: why, and what to do.
fn no_topic_ids(partitions: &[PartitionStatus]) -> Option<String> {
    let present: Vec<&PartitionStatus> = partitions
        .iter()
        .filter(|p| p.state != "missing" && p.state != "deleted")
        .collect();
    if present.is_empty() || present.iter().any(|p| p.state != "no_topic_id") {
        return None;
    }
    let example = present
        .iter()
        .take(3)
        .map(|p| format!("{}-{}", p.topic, p.partition))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "none of the {} selected partitions has a topic id (no partition.metadata in their dirs: {example}{}): \
         the broker runs Kafka before 2.8, or its inter.broker.protocol.version is below 2.8 \
         (a ZooKeeper cluster), and does not write partition.metadata; object keys need the topic id, \
         so nothing was shipped. Fix: upgrade the brokers to Kafka 2.8 or later with \
         inter.broker.protocol.version >= 2.8 and restart them (each writes partition.metadata \
         into its partition dirs), then run the shipper again",
        present.len(),
        if present.len() > 3 { ", ..." } else { "" }
    ))
}

/// One line per gap not acknowledged, naming the partition and offsets.
fn unacknowledged_gaps(partitions: &[PartitionStatus], ack: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for p in partitions {
        for g in shipper::gaps::unacknowledged(&p.gaps) {
            lines.push(format!(
                "  GAP {}-{}: offsets {} were lost at the source before they were shipped ({g}); \
                 the mirror will never have them. Acknowledge: {ack} --topic {} --partition {} --offsets {}",
                p.topic,
                p.partition,
                g.offsets_text(),
                p.topic,
                p.partition,
                g.offsets_text()
            ));
        }
    }
    lines
}

/// The topic selection, for messages.
fn selection(c: &shipper::ShipperConfig) -> String {
    match (c.topics.as_deref(), c.exclude.as_deref()) {
        (None, None) => "every topic".to_string(),
        (Some(t), None) => format!("--topics {t}"),
        (None, Some(x)) => format!("every topic but --exclude {x}"),
        (Some(t), Some(x)) => format!("--topics {t} but --exclude {x}"),
    }
}

/// One line saying what a run that shipped nothing found, and why.
fn nothing_shipped(r: &CycleReport, partitions: &[PartitionStatus], selection: &str) -> String {
    let found = format!(
        "shipped nothing: {} partitions in the log dirs, {} selected by {selection}",
        r.seen, r.partitions
    );
    let count = |state: &str| partitions.iter().filter(|p| p.state == state).count();
    let why = if r.seen == 0 {
        "the log dirs hold no partitions".to_string()
    } else if r.partitions == 0 {
        "the selection matches none of them".to_string()
    } else {
        let no_id = count("no_topic_id");
        let gone = count("missing") + count("deleted");
        let mut parts = Vec::new();
        if no_id > 0 {
            parts.push(format!(
                "{no_id} without a topic id (no partition.metadata) are not shipped"
            ));
        }
        if gone > 0 {
            parts.push(format!("{gone} are gone from the log dirs"));
        }
        let standby = count("standby");
        if standby > 0 {
            parts.push(format!(
                "{standby} are shipped by other brokers' shippers (this broker does not lead them, by its KRaft metadata)"
            ));
        }
        let rest = r
            .partitions
            .saturating_sub(no_id)
            .saturating_sub(gone)
            .saturating_sub(standby);
        if rest > 0 {
            parts.push(format!(
                "{rest} are already shipped up to what the source has committed"
            ));
        }
        parts.join("; ")
    };
    format!("{found}: {why}")
}

/// The bucket with the endpoint its requests go to, for messages.
fn endpoint(bucket: &BucketUrl) -> String {
    match bucket.endpoint() {
        Some(endpoint) => format!("{bucket} ({endpoint})"),
        None => bucket.to_string(),
    }
}
