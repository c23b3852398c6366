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

use std::time::Instant;

use bucket::store::{ManifestStore, StoreError};
use kafkalog::TopicPartition;
use manifest::feed::{Head, HeadEntry, MAX_PROBE, RESYNC_INTERVAL};

/// The newest head read, and when the head dir was last listed.
#[derive(Debug, Default)]
pub(crate) struct FeedReader {
    head: Option<Head>,
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

    /// Reads what was published since the last poll. True when a newer
    /// head was found.
    pub(crate) async fn poll(&mut self, store: &ManifestStore) -> Result<bool, StoreError> {
        let resync = self
            .last_list
            .is_none_or(|t| t.elapsed() >= RESYNC_INTERVAL);
        let mut newest: Option<Head> = None;
        match &self.head {
            Some(cur) if !resync => {
                let mut seq = cur.seq;
                for _ in 0..MAX_PROBE {
                    match store.get_head(seq + 1).await {
                        Ok(h) => {
                            seq = h.seq;
                            newest = Some(h);
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
                self.head = Some(h);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
