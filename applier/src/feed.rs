//! Reading the source's change feed. Which of its partitions the
//! selection (`--topics`, `--exclude`) starts is decided by
//! `manifest::topic_pattern::Selection`.
//!
//! Cost: a LIST of the head dir at the first poll and every
//! [`RESYNC_INTERVAL`]; otherwise one GET of the next head per poll (up to
//! [`MAX_PROBE`] when several were published since), so an idle applier
//! makes one GET per poll whatever the number of partitions.
//!
//! Invariant: the head kept is the newest one read; it never goes back to
//! an older sequence number.

use std::collections::BTreeMap;
use std::time::Instant;

use bucket::store::{ManifestStore, StoreError};
use kafkalog::{TopicId, TopicPartition};
use manifest::delta::Delta;
use manifest::feed::{Head, HeadEntry, MAX_PROBE, RESYNC_INTERVAL};

/// The newest head read, the deltas of every head the last poll read, and
/// when the head dir was last listed.
#[derive(Debug, Default)]
pub(crate) struct FeedReader {
    head: Option<Head>,
    /// Per partition (head map key), the deltas of the heads the last poll
    /// read, oldest first, with the topic id they are for: a reader whose
    /// held manifest is several heads behind moves through them with no
    /// request, instead of resolving the newest version's chain (a GET of
    /// every head it names, per partition).
    deltas: BTreeMap<String, Vec<(TopicId, Delta)>>,
    last_list: Option<Instant>,
}

impl FeedReader {
    /// The newest head read, if any.
    pub(crate) fn head(&self) -> Option<&Head> {
        self.head.as_ref()
    }

    /// The feed's entry for `tp`.
    pub(crate) fn entry(&self, tp: &TopicPartition) -> Option<&HeadEntry> {
        self.head.as_ref()?.partitions.get(&tp.to_string())
    }

    /// The deltas of `tp` for `topic_id` in the heads the last poll read,
    /// oldest first (the newest head's included).
    pub(crate) fn deltas(
        &self,
        tp: &TopicPartition,
        topic_id: TopicId,
    ) -> impl Iterator<Item = &Delta> + '_ {
        self.deltas
            .get(&tp.to_string())
            .into_iter()
            .flatten()
            .filter(move |(id, _)| *id == topic_id)
            .map(|(_, d)| d)
    }

    /// Keeps the deltas `h` carries (a head read in order).
    fn keep_deltas(&mut self, h: &Head) {
        for (key, e) in &h.partitions {
            if let Some(d) = &e.delta {
                self.deltas
                    .entry(key.clone())
                    .or_default()
                    .push((e.topic_id, d.clone()));
            }
        }
    }

    /// Reads what was published since the last poll. True when a newer
    /// head was found.
    pub(crate) async fn poll(&mut self, store: &ManifestStore) -> Result<bool, StoreError> {
        let resync = self
            .last_list
            .is_none_or(|t| t.elapsed() >= RESYNC_INTERVAL);
        let mut newest: Option<Head> = None;
        let mut read: Vec<Head> = Vec::new();
        match &self.head {
            Some(cur) if !resync => {
                let mut seq = cur.seq;
                for _ in 0..MAX_PROBE {
                    match store.get_head(seq + 1).await {
                        Ok(h) => {
                            seq = h.seq;
                            if let Some(prev) = newest.replace(h) {
                                read.push(prev);
                            }
                        }
                        Err(StoreError::NotFound { .. }) => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            _ => {
                self.last_list = Some(Instant::now());
                if let Some(seq) = store.latest_head_seq().await?
                    && self.head.as_ref().is_none_or(|h| h.seq < seq)
                {
                    newest = Some(store.get_head(seq).await?);
                }
            }
        }
        match newest {
            Some(h) => {
                self.deltas.clear();
                for passed in &read {
                    self.keep_deltas(passed);
                }
                self.keep_deltas(&h);
                self.head = Some(h);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
