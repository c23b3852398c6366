//! The source broker's KRaft metadata, as the shipper reads it from disk
//! (`kraft`): the metadata log (`__cluster_metadata-0` in the broker's
//! `metadata.log.dir`), the broker's node id (its `meta.properties`) and,
//! when given, its static `server.properties`.
//!
//! Found at start ([`BrokerMetadata::discover`]): the `metadata_log_dir`
//! the operator names (it must hold a metadata log), or else the first log
//! dir that holds `__cluster_metadata-0`. Without one (a ZooKeeper-mode
//! broker, or a plain log dir) the shipper works from the log dirs alone,
//! as it always has.
//!
//! With a metadata image, [`BrokerMetadata::role`] says whether this
//! broker's shipper ships a partition (`crate::leadership`): the leader's
//! does, the followers' do not. Each log dir's `directory.id` (its
//! `meta.properties`, read at start) tells JBOD copies apart.
//!
//! Invariants:
//! - The log is re-read incrementally once per cycle ([`BrokerMetadata::poll`]);
//!   a read that fails leaves this cycle without metadata (nothing is
//!   published from it: manifests keep the configs they had) and is logged
//!   once until a read succeeds again.
//! - What the image cannot be trusted with is never published
//!   (`crate::topic_configs`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use kafkalog::{TopicId, TopicPartition};
use kraft::{MetadataImage, MetadataLogReader};
use manifest::topic_config::{self, ConfigValue};

use crate::config::ShipperOptions;
use crate::leadership::{self, DirFacts, Role};

/// Why the metadata named by the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// `metadata_log_dir` holds no metadata log.
    #[error(
        "metadata_log_dir {0}: no __cluster_metadata-0 in it (is it the broker's metadata.log.dir?)"
    )]
    NoMetadataLog(PathBuf),
    /// `meta.properties` is missing or unreadable.
    #[error("{dir}: the broker's node id is unknown: {reason}")]
    NodeId {
        /// The directory whose meta.properties was read.
        dir: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// `broker_config` cannot be read.
    #[error("broker_config: {0}")]
    BrokerConfig(kraft::Error),
}

/// Where the broker's metadata places this broker's replicas (JBOD):
/// each partition's assigned directory id, and each log dir's id.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    assigned: BTreeMap<TopicPartition, TopicId>,
    dir_ids: BTreeMap<PathBuf, Option<TopicId>>,
}

impl Placement {
    /// True when the metadata assigns `tp`'s replica to log dir `root`.
    pub(crate) fn assigned_to(&self, tp: &TopicPartition, root: &Path) -> bool {
        match (self.assigned.get(tp), self.dir_ids.get(root)) {
            (Some(a), Some(Some(d))) => a == d,
            _ => false,
        }
    }
}

/// The broker's metadata, read every cycle.
#[derive(Debug)]
pub(crate) struct BrokerMetadata {
    dir: PathBuf,
    reader: MetadataLogReader,
    node_id: i32,
    /// Each log dir's `directory.id` (`None`: none in its
    /// `meta.properties`, or no such file).
    dir_ids: BTreeMap<PathBuf, Option<TopicId>>,
    static_props: BTreeMap<String, String>,
    /// The last read failed (logged once).
    failing: bool,
    /// Topics whose configs could not be resolved, logged once each.
    bad_configs: HashSet<String>,
    /// This cycle's configs by topic (resolved once per topic per cycle).
    resolved: BTreeMap<String, Option<BTreeMap<String, ConfigValue>>>,
}

impl BrokerMetadata {
    /// The broker metadata the options point at, if any.
    pub(crate) fn discover(opts: &ShipperOptions) -> Result<Option<BrokerMetadata>, MetadataError> {
        let dir = match &opts.metadata_log_dir {
            Some(d) if has_metadata_log(d) => d.clone(),
            Some(d) => return Err(MetadataError::NoMetadataLog(d.clone())),
            None => match opts.log_dirs.iter().find(|d| has_metadata_log(d)) {
                Some(d) => d.clone(),
                None => return Ok(None),
            },
        };
        let node_id = match kraft::meta_properties::read(&dir) {
            Ok(Some(m)) => m.node_id,
            Ok(None) => {
                return Err(MetadataError::NodeId {
                    dir,
                    reason: "no meta.properties".into(),
                });
            }
            Err(e) => {
                return Err(MetadataError::NodeId {
                    dir,
                    reason: e.to_string(),
                });
            }
        };
        let static_props = match &opts.broker_config {
            Some(p) => kraft::properties::read(p).map_err(MetadataError::BrokerConfig)?,
            None => BTreeMap::new(),
        };
        let dir_ids = opts
            .log_dirs
            .iter()
            .map(|d| {
                let id = kraft::meta_properties::read(d)
                    .ok()
                    .flatten()
                    .and_then(|m| m.directory_id);
                (d.clone(), id)
            })
            .collect();
        tracing::info!(dir = %dir.display(), node_id, "reading the broker's KRaft metadata log: shipping the partitions this broker leads");
        Ok(Some(BrokerMetadata {
            reader: MetadataLogReader::for_log_dir(&dir),
            dir,
            node_id,
            dir_ids,
            static_props,
            failing: false,
            bad_configs: HashSet::new(),
            resolved: BTreeMap::new(),
        }))
    }

    /// Reads what was appended to the metadata log since the last call.
    /// Returns the image, or `None` when it cannot be read now.
    pub(crate) fn poll(&mut self) -> Option<&MetadataImage> {
        self.resolved.clear();
        match self.reader.poll() {
            Ok(_) => {
                if self.failing {
                    tracing::info!(dir = %self.dir.display(), "the metadata log is readable again");
                    self.failing = false;
                }
            }
            Err(e) => {
                if !self.failing {
                    tracing::warn!(dir = %self.dir.display(), error = %e,
                        "cannot read the metadata log; topic configs are not published until it can be read");
                    self.failing = true;
                }
                return None;
            }
        }
        self.reader.image()
    }

    /// This broker's role for a partition dir in log dir `root` whose
    /// `partition.metadata` says `topic_id`, by the image of the last
    /// [`poll`](Self::poll); `None` when there is no image to decide from
    /// (the log cannot be read now: the partition ships as without
    /// metadata).
    pub(crate) fn role(
        &self,
        root: &Path,
        topic: &str,
        partition: i32,
        topic_id: TopicId,
    ) -> Option<Role> {
        if self.failing {
            return None;
        }
        let image = self.reader.image()?;
        let facts = DirFacts {
            node_id: self.node_id,
            topic_id,
            dir_id: self.dir_ids.get(root).copied().flatten(),
        };
        Some(leadership::role(image, topic, partition, facts))
    }

    /// Where the image of the last poll places this broker's replicas
    /// (`None` without an image). Used to choose between two copies of a
    /// partition in two log dirs.
    pub(crate) fn placement(&self) -> Option<Placement> {
        if self.failing {
            return None;
        }
        let image = self.reader.image()?;
        let mut assigned = BTreeMap::new();
        for (name, t) in &image.topics {
            for (p, reg) in &t.partitions {
                if let (Some(dir), Ok(tp)) = (
                    reg.directory_of(self.node_id),
                    TopicPartition::new(name, *p),
                ) {
                    assigned.insert(tp, dir);
                }
            }
        }
        Some(Placement {
            assigned,
            dir_ids: self.dir_ids.clone(),
        })
    }

    /// The topics whose configs in the image of the last poll say
    /// `remote.storage.enable=true` (tiered storage on the source: offsets
    /// below the first local segment are in remote storage, not lost).
    pub(crate) fn tiered_topics(&self) -> BTreeSet<String> {
        match self.reader.image() {
            Some(image) if !self.failing => image
                .topic_configs
                .iter()
                .filter(|(_, c)| {
                    c.get(topic_config::REMOTE_STORAGE_ENABLE)
                        .is_some_and(|v| topic_config::enables_remote_storage(v))
                })
                .map(|(t, _)| t.clone())
                .collect(),
            _ => BTreeSet::new(),
        }
    }

    /// Whether a partition whose dir is gone may be published as deleted:
    /// only when the image no longer has its topic under `topic_id` (else
    /// the replica moved to another broker or log dir, and the topic
    /// lives on). `false` while the log cannot be read: a deletion waits
    /// for the metadata that proves it.
    pub(crate) fn topic_gone(&self, topic: &str, topic_id: TopicId) -> bool {
        match self.reader.image() {
            Some(image) if !self.failing => {
                image.topics.get(topic).is_none_or(|t| t.id != topic_id)
            }
            _ => false,
        }
    }

    /// The configs to publish for `topic` after the last [`poll`](Self::poll)
    /// (`None`: none, the manifests keep theirs).
    pub(crate) fn configs_for(&mut self, topic: &str) -> Option<BTreeMap<String, ConfigValue>> {
        if self.failing {
            return None;
        }
        if let Some(c) = self.resolved.get(topic) {
            return c.clone();
        }
        let image = self.reader.image()?;
        let configs = match crate::topic_configs::source_configs(
            image,
            self.node_id,
            &self.static_props,
            topic,
        ) {
            Ok(c) => {
                self.bad_configs.remove(topic);
                c
            }
            Err(e) => {
                if self.bad_configs.insert(topic.to_string()) {
                    tracing::warn!(topic, error = %e, "the topic's configs cannot be resolved; not published");
                }
                None
            }
        };
        self.resolved.insert(topic.to_string(), configs.clone());
        configs
    }
}

fn has_metadata_log(dir: &Path) -> bool {
    kraft::reader::metadata_partition_dir(dir).is_dir()
}
