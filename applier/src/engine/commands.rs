//! Operator commands (start, pause, resume, stop), planned by
//! `crate::command_plan` and performed by [`CommandRun`]: new partitions
//! adopted one by one, mirror partitions together in a few durable
//! barriers.
//!
//! It works on the parts it is given (the partition table, the bucket
//! reader, what adopting needs), never on the applier itself; the engine
//! writes the checkpoints and the live status after it.

#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;

use kafkalog::TopicPartition;
use manifest::partition::PartitionManifest;
use manifest::state::{Command, Event, PartitionState};

use crate::bucket_reader::BucketReader;
use crate::options::CommandOutcome;
use crate::slot::Slot;
use crate::table::MirrorTable;

use super::discovery::{Adopter, poll_feed};

/// What an operator command runs on.
pub(super) struct CommandRun<'a> {
    pub(super) table: &'a mut MirrorTable,
    pub(super) bucket: &'a mut BucketReader,
    /// Adopting new partitions (`start`); its `allowed` is the command's
    /// `--allow-truncate` or the applier's.
    pub(super) adopter: Adopter<'a>,
}

impl CommandRun<'_> {
    /// Runs `command` on `targets` (all mirror partitions when empty and
    /// `all`); see [`crate::Applier::command`].
    pub(super) async fn perform(
        &mut self,
        command: Command,
        targets: &[String],
        all: bool,
    ) -> Vec<CommandOutcome> {
        if command == Command::Start
            && let Err(e) = poll_feed(self.bucket, self.table).await
        {
            tracing::warn!(error = %e, "could not read the change feed before start");
        }
        let mirrors: Vec<TopicPartition> =
            self.table.mirror_slots().map(|m| m.tp().clone()).collect();
        let unopened = self.table.unopened();
        let in_feed: Vec<TopicPartition> = match (command, self.bucket.head()) {
            (Command::Start, Some(h)) => h
                .partitions
                .values()
                .filter(|e| !e.deleted)
                .filter_map(|e| TopicPartition::new(&e.topic, e.partition).ok())
                .collect(),
            _ => Vec::new(),
        };
        let known = crate::command_plan::Known {
            mirrors: &mirrors,
            unopened: &unopened,
            in_feed: &in_feed,
        };
        let tps = match crate::command_plan::resolve(command, targets, all, known) {
            Ok(tps) => tps,
            Err(refused) => return vec![refused],
        };
        self.table.changed.extend(tps.iter().cloned());
        // Partitions new to this log dir (start only) are adopted one by
        // one (reading their manifest); the mirror partitions take the
        // command together, durable in a few barriers (`command_mirrors`).
        let (mirrors, new): (Vec<TopicPartition>, Vec<TopicPartition>) = tps
            .into_iter()
            .partition(|tp| self.table.mirror(tp).is_some());
        let mut out = Vec::new();
        for tp in new {
            out.push(self.adopt_for_start(&tp).await);
        }
        let manifests = if command == Command::Start {
            self.start_manifests(&mirrors).await
        } else {
            BTreeMap::new()
        };
        out.extend(self.command_mirrors(command, &mirrors, &manifests));
        self.table.stale = true;
        out
    }

    /// `start` of a partition that is not a mirror here yet: adopts it from
    /// the feed (PREPARING).
    async fn adopt_for_start(&mut self, tp: &TopicPartition) -> CommandOutcome {
        let name = tp.to_string();
        let Some((topic_id, version)) = self
            .bucket
            .entry(tp)
            .map(|e| (e.topic_id, e.manifest_version))
        else {
            return CommandOutcome {
                partition: name,
                state: None,
                error: Some("not in the source's bucket".into()),
            };
        };
        self.table.stale = true;
        let manifest = match self.bucket.confirm(tp, topic_id, version).await {
            Ok(m) => m,
            Err(waiting) => {
                self.table
                    .slots
                    .insert(tp.clone(), Slot::Waiting(waiting.clone()));
                return CommandOutcome {
                    partition: name.clone(),
                    state: None,
                    error: Some(format!(
                        "the source's manifest of {name} cannot be read: {waiting}"
                    )),
                };
            }
        };
        match self
            .adopter
            .adopt(self.table, self.bucket, tp, topic_id, manifest)
        {
            Ok(()) => CommandOutcome {
                partition: name,
                state: Some("PREPARING".into()),
                error: None,
            },
            Err(reason) => {
                let reason = reason.to_string();
                self.table
                    .slots
                    .insert(tp.clone(), Slot::Refused(reason.clone()));
                CommandOutcome {
                    partition: name,
                    state: Some("FAILED".into()),
                    error: Some(reason),
                }
            }
        }
    }

    /// Runs `command` on mirror partitions `tps`, all together: each phase
    /// for every partition, then one barrier
    /// ([`kafkalog::fsutil::DeferredSync`]) before the next phase, so that
    /// every partition's writes become durable in the order its protocol
    /// needs, the fsyncs of each phase done together at its barrier
    /// instead of one after the other:
    /// 1. the command's transition (records, write guards);
    /// 2. for a stop: the LME and stop epoch in each record;
    /// 3. for a stop: each log's epoch raised and open transactions aborted,
    ///    and STOPPED for the partitions that had none to abort (their epoch
    ///    bump is redone at every open, so it need not be durable first);
    /// 4. for a stop: STOPPED for the others, once their ABORT markers are.
    ///
    /// No `.await` in here: the deferred scope belongs to this thread.
    fn command_mirrors(
        &mut self,
        command: Command,
        tps: &[TopicPartition],
        manifests: &BTreeMap<TopicPartition, PartitionManifest>,
    ) -> Vec<CommandOutcome> {
        if tps.is_empty() {
            return Vec::new();
        }
        let scope = kafkalog::fsutil::DeferredSync::begin();
        let mut refused: BTreeMap<TopicPartition, String> = BTreeMap::new();
        for tp in tps {
            if command == Command::Start
                && let Err(why) = self.before_start(tp, manifests.get(tp))
            {
                refused.insert(tp.clone(), why.to_string());
                continue;
            }
            if let Err(e) = self.table.transition(tp, Event::from(command)) {
                refused.insert(tp.clone(), e.to_string());
            }
        }
        let stopping: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| !refused.contains_key(*tp))
            .filter(|tp| self.table.state_of(tp) == Some(PartitionState::Stopping))
            .cloned()
            .collect();
        let mut barrier = scope.barrier();
        if !stopping.is_empty() && barrier.is_ok() {
            crate::group_commit::failover_many(self.table, &stopping, &scope);
            barrier = scope.finish();
        } else {
            drop(scope);
        }
        if let Err(e) = &barrier {
            tracing::error!(error = %e, "making the command's changes durable failed");
        }
        tps.iter()
            .map(|tp| {
                let error = refused.get(tp).cloned().or_else(|| {
                    barrier
                        .as_ref()
                        .err()
                        .map(|e| format!("the change may not be durable: {e}"))
                });
                CommandOutcome {
                    partition: tp.to_string(),
                    state: self.table.state_of(tp).map(|s| s.as_str().to_string()),
                    error,
                }
            })
            .collect()
    }

    /// The source's manifests of the mirror partitions `start` may cut
    /// records of their own from (`manifest::cut::at_stake`), for
    /// `before_start`; one that cannot be read is left out.
    async fn start_manifests(
        &mut self,
        tps: &[TopicPartition],
    ) -> BTreeMap<TopicPartition, PartitionManifest> {
        let at_stake: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| {
                self.table
                    .mirror(tp)
                    .is_some_and(|s| manifest::cut::at_stake(&s.mirror.record))
            })
            .cloned()
            .collect();
        self.bucket.read_each(&at_stake).await
    }

    /// `start`'s checks and pin changes on a mirror partition
    /// (`command_plan::plan_start`, performed by the driver); the reason
    /// when the start is refused (nothing changed then). `manifest` is the
    /// source's, when it could be read.
    fn before_start(
        &mut self,
        tp: &TopicPartition,
        manifest: Option<&PartitionManifest>,
    ) -> Result<(), crate::driver::StartError> {
        use crate::command_plan::{StartInput, plan_start};
        let source = self.adopter.opts.source_cluster_id.as_str();
        let feed_topic_id = self.bucket.entry(tp).map(|e| e.topic_id);
        let ctx = self.adopter.opts.context(tp);
        let allowed = self.adopter.allowed;
        // Read the manifest again: `start` is how an operator says that
        // what failed (a corrupt manifest, say) was repaired.
        self.bucket.forget(tp);
        self.table.start(
            tp,
            |slot| {
                let local = slot.mirror.local_view();
                Ok(plan_start(&StartInput {
                    tp,
                    record: &slot.mirror.record,
                    source,
                    feed_topic_id,
                    local: &local,
                    manifest,
                    ctx: &ctx,
                    allowed,
                })?)
            },
            source,
            feed_topic_id,
            allowed,
        )
    }
}
