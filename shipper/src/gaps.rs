//! Gaps on the source side: recording them in the manifest, and the
//! operator's acknowledgement of one (`shipper gaps list|ack`).
//!
//! A gap (`manifest::gaps`) is decided when a cycle commits: [`record`]
//! runs [`manifest::gaps::detect`] on what the previous version recorded
//! and what the cycle found in the source (its log start, leader epochs,
//! a divergence cut), and adds what is new to the version's gap list. The
//! list is carried by every later version; the commit that first records a
//! gap logs it at ERROR ([`log_new`]), once.
//!
//! # Where the shipper's acknowledgement is kept: in the manifest
//!
//! The shipper keeps no local state (it never writes the source's log
//! dirs; its position is found again from the bucket after a restart), so
//! the acknowledgement lives where the gap does: the gap's
//! `acknowledged_at_ms` in a new manifest version, committed through the
//! normal create-if-absent commit (`ManifestStore::update_manifest`: read
//! the latest version, decide, create the next number; a lost race reads
//! again). Every reader of the manifest (any shipper host, `shipper
//! status`, an auditor) then sees the same answer, and the next versions
//! carry it as they carry the gap.
//!
//! The version is written under the writer id of the version it follows,
//! so a running shipper whose next commit meets it at that number adopts
//! it as its own earlier commit (`commit::judge_winner`), keeping the
//! acknowledgement, instead of backing off as from another writer; an idle
//! one finds it within a minute ([`follow_acknowledgements`]), so its
//! metrics clear. A head naming it is published too, so `shipper status`
//! shows it at once.
//!
//! Acknowledging is per gap, named by its offsets: a later gap is a new
//! entry, unacknowledged, and `shipper once` exits 1 for it again.

use bucket::store::{ManifestStore, StoreError};
use kafkalog::TopicPartition;
use manifest::feed::HeadEntry;
use manifest::gaps::{self, Gap, Recorded, SourceNow};
use manifest::layout::PartitionKey;
use manifest::lineage::EpochLineage;
use manifest::partition::PartitionManifest;

use crate::partition::Shipment;

/// Adds to `m` (the next version, built from `base`) the gaps that the
/// cycle's `work` reveals against `base`. Returns the new ones.
pub(crate) fn record(
    m: &mut PartitionManifest,
    base: &PartitionManifest,
    work: &Shipment,
    now_ms: i64,
) -> Vec<Gap> {
    let (source, _) = EpochLineage::from_checkpoint_entries(work.source_epochs.iter().copied());
    let found = gaps::detect(
        &Recorded {
            shipped_end: base.shipped_end_offset,
            high_watermark: base.source_high_watermark,
            lineage: &base.lineage,
        },
        &SourceNow {
            log_start: work.log_start,
            remote_log_start: work.remote_log_start,
            lineage: &source,
            cut: work.cut,
        },
        now_ms,
    );
    gaps::merge(&mut m.gaps, found)
}

/// Logs a newly recorded gap, once (at its commit).
pub(crate) fn log_new(tp: &TopicPartition, g: &Gap) {
    if g.is_loss() {
        tracing::error!(
            partition = %tp,
            first_offset = g.first_offset,
            last_offset = g.last_offset,
            cause = %g.cause,
            "GAP: the source lost offsets {} before they were shipped: the mirror will never have them ({g}); recorded in the manifest; `shipper gaps ack --topic {} --partition {} --offsets {}` once handled",
            g.offsets_text(),
            tp.topic,
            tp.partition,
            g.offsets_text()
        );
    } else {
        tracing::warn!(partition = %tp, "offsets {} are past the source's local retention, in its remote storage: not shipped ({g})", g.offsets_text());
    }
}

/// How often a partition with a gap not acknowledged asks the bucket for
/// the version an acknowledgement commits.
pub(crate) const ACK_PROBE_MS: i64 = 60_000;

/// A running shipper with nothing to commit would keep showing a gap that
/// `shipper gaps ack` acknowledged (in the next manifest version) until its
/// next commit. So, while a partition holds a gap not acknowledged, the
/// cycle asks for the next version at most every [`ACK_PROBE_MS`] (one GET,
/// answered 404 until there is one; no request at all without such a gap)
/// and adopts a version written under the same writer id, as a lost commit
/// is adopted (the partition finds its position again from it). A version
/// of another writer is left to the commit path, which backs off from it.
pub(crate) async fn follow_acknowledgements(
    store: &ManifestStore,
    partitions: &mut std::collections::BTreeMap<TopicPartition, crate::partition::ShipperSlot>,
    now_ms: i64,
) {
    for st in partitions.values_mut() {
        let (Some(m), Some(pk)) = (&st.manifest, &st.pk) else {
            continue;
        };
        if unacknowledged(&m.gaps).next().is_none()
            || st
                .ack_probe_at_ms
                .is_some_and(|at| now_ms - at < ACK_PROBE_MS)
        {
            continue;
        }
        st.ack_probe_at_ms = Some(now_ms);
        let found = match store.get_manifest(pk, m.version + 1).await {
            Ok(_) => store.latest_manifest(pk, Some(m.version + 1)).await,
            Err(StoreError::NotFound { .. }) => continue,
            Err(e) => Err(e),
        };
        let next = match found {
            Ok(Some(next)) if next.writer == m.writer => next,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(partition = %st.tp, error = %e, "cannot look for a gap acknowledgement; asked again later");
                continue;
            }
        };
        tracing::info!(partition = %st.tp, version = next.version, "a newer manifest version (a gap acknowledgement) was committed: continuing from it");
        st.manifest = Some(next);
        st.cursor = None;
        st.mark = None;
        st.lineage_ok = None;
    }
}

/// The gaps `once` exits 1 for: losses not acknowledged.
pub fn unacknowledged(gaps: &[Gap]) -> impl Iterator<Item = &Gap> {
    gaps.iter()
        .filter(|g| g.is_loss() && g.acknowledged_at_ms.is_none())
}

/// One partition's gaps as `shipper gaps list` prints them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PartitionGaps {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The manifest version read.
    pub manifest_version: u64,
    /// Its gaps.
    pub gaps: Vec<Gap>,
}

/// What acknowledging came to.
#[derive(Debug)]
pub enum AckOutcome {
    /// Acknowledged in this manifest version.
    Acknowledged {
        /// The version committed.
        version: u64,
        /// The gap.
        gap: Gap,
    },
    /// It already was (nothing written).
    AlreadyAcknowledged(Gap),
    /// No gap of the partition has these offsets: the ones it has.
    NoSuchGap(Vec<Gap>),
    /// The bucket has no manifest of the partition.
    NoPartition,
}

/// The head entry of `tp` (topic id, latest version), if shipped.
async fn entry(
    store: &ManifestStore,
    tp: &TopicPartition,
) -> Result<Option<HeadEntry>, StoreError> {
    Ok(store
        .latest_head(None)
        .await?
        .and_then(|h| h.partitions.get(&tp.to_string()).cloned()))
}

/// Every partition's gaps, from the newest head (which carries each
/// manifest's list).
pub async fn list(store: &ManifestStore) -> Result<Vec<PartitionGaps>, StoreError> {
    let Some(head) = store.latest_head(None).await? else {
        return Ok(Vec::new());
    };
    let mut out: Vec<PartitionGaps> = head
        .partitions
        .values()
        .filter(|e| !e.gaps.is_empty())
        .map(|e| PartitionGaps {
            topic: e.topic.clone(),
            partition: e.partition,
            manifest_version: e.manifest_version,
            gaps: e.gaps.clone(),
        })
        .collect();
    out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(out)
}

/// Acknowledges the gap `first..=last` of `tp` in a new manifest version
/// (see the module docs), then names it in a new head.
pub async fn acknowledge(
    store: &ManifestStore,
    tp: &TopicPartition,
    first: i64,
    last: i64,
    now_ms: i64,
) -> Result<AckOutcome, StoreError> {
    let Some(e) = entry(store, tp).await? else {
        return Ok(AckOutcome::NoPartition);
    };
    let pk = PartitionKey {
        tp: tp.clone(),
        topic_id: e.topic_id,
    };
    let decided = store
        .update_manifest(&pk, Some(e.manifest_version), |current| {
            let Some(current) = current else {
                return Err(AckOutcome::NoPartition);
            };
            let Some(i) = current.gaps.iter().position(|g| g.is(first, last)) else {
                return Err(AckOutcome::NoSuchGap(current.gaps.clone()));
            };
            if current.gaps[i].acknowledged_at_ms.is_some() {
                return Err(AckOutcome::AlreadyAcknowledged(current.gaps[i].clone()));
            }
            let mut next = current.clone();
            next.gaps[i].acknowledged_at_ms = Some(now_ms);
            Ok(Some(next))
        })
        .await?;
    let m = match decided {
        Ok(Some(m)) => m,
        Ok(None) => return Ok(AckOutcome::NoPartition),
        Err(outcome) => return Ok(outcome),
    };
    store
        .publish_head(None, &m.writer, &[HeadEntry::for_manifest(&m)])
        .await?;
    let gap = m
        .gaps
        .iter()
        .find(|g| g.is(first, last))
        .cloned()
        .ok_or_else(|| StoreError::Identity {
            key: store.layout().manifest_key(&pk, m.version),
            reason: "the acknowledged gap is missing from the version committed".into(),
        })?;
    Ok(AckOutcome::Acknowledged {
        version: m.version,
        gap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::checkpoint::EpochEntry;

    fn base() -> PartitionManifest {
        let tp = TopicPartition::new("t", 0).expect("tp");
        let mut m = PartitionManifest::new("c", &tp, "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"));
        m.version = 4;
        m.shipped_end_offset = 100;
        m.source_high_watermark = 100;
        m.lineage = EpochLineage::from_entries([EpochEntry {
            epoch: 0,
            start_offset: 0,
        }])
        .expect("lineage");
        m
    }

    #[test]
    fn a_version_records_a_retention_gap_once_and_carries_it() {
        let b = base();
        let work = Shipment {
            log_start: 230,
            ..Shipment::default()
        };
        let mut m = b.clone();
        let new = record(&mut m, &b, &work, 9);
        assert_eq!(new.len(), 1);
        assert_eq!((new[0].first_offset, new[0].last_offset), (100, 229));
        assert_eq!(m.gaps, new);
        // The next version, from that one: nothing new, the gap carried.
        let mut later = m.clone();
        later.shipped_end_offset = 230;
        let again = record(&mut later.clone(), &later, &work, 10);
        assert!(again.is_empty());
        assert_eq!(later.gaps.len(), 1);
        assert_eq!(unacknowledged(&later.gaps).count(), 1);
        later.gaps[0].acknowledged_at_ms = Some(11);
        assert_eq!(unacknowledged(&later.gaps).count(), 0);
    }
}
