//! Operator commands (start, pause, resume, stop), planned by
//! `crate::command_plan` and performed here: new partitions adopted one by
//! one, mirror partitions together in a few durable barriers.

#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;

use kafkalog::TopicPartition;
use manifest::partition::PartitionManifest;
use manifest::state::{Command, Event, PartitionState};

use crate::options::CommandOutcome;
use crate::slot::Slot;

use super::Applier;

impl Applier {
    /// Runs an operator command on `targets` (all mirror partitions when
    /// empty and `all`). A command the state does not allow changes nothing
    /// and is reported with its reason. `stop` completes the failover before
    /// returning. `start` on a partition that is not a mirror yet adopts it
    /// (its topic id comes from the feed).
    pub async fn command(
        &mut self,
        command: Command,
        targets: &[String],
        all: bool,
    ) -> Vec<CommandOutcome> {
        self.command_allowing(command, targets, all, false).await
    }

    /// [`Applier::command`], where `allow_truncate` says whether a `start`
    /// may cut records of a partition's own (`manifest::cut`; the
    /// applier's own `allow_truncate` option allows it too).
    pub async fn command_allowing(
        &mut self,
        command: Command,
        targets: &[String],
        all: bool,
        allow_truncate: bool,
    ) -> Vec<CommandOutcome> {
        self.command_allows_truncate = allow_truncate;
        let out = self.perform_command(command, targets, all).await;
        self.command_allows_truncate = false;
        out
    }

    pub(super) async fn perform_command(
        &mut self,
        command: Command,
        targets: &[String],
        all: bool,
    ) -> Vec<CommandOutcome> {
        if command == Command::Start
            && let Err(e) = self.poll_feed().await
        {
            tracing::warn!(error = %e, "could not read the change feed before start");
        }
        let mirrors: Vec<TopicPartition> = self.mirror_slots().map(|m| m.tp().clone()).collect();
        let unopened: Vec<(TopicPartition, String)> = self
            .slots
            .iter()
            .filter_map(|(tp, s)| match s {
                Slot::Unopened(e) => Some((tp.clone(), e.clone())),
                _ => None,
            })
            .collect();
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
        self.changed.extend(tps.iter().cloned());
        // Partitions new to this log dir (start only) are adopted one by
        // one (reading their manifest); the mirror partitions take the
        // command together, durable in a few barriers (`command_mirrors`).
        let (mirrors, new): (Vec<TopicPartition>, Vec<TopicPartition>) = tps
            .into_iter()
            .partition(|tp| self.slots.get(tp).and_then(Slot::mirror).is_some());
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
        self.live.stale = true;
        self.discovered = None;
        self.write_checkpoints();
        self.write_live_status();
        out
    }

    /// `start` of a partition that is not a mirror here yet: adopts it from
    /// the feed (PREPARING).
    pub(super) async fn adopt_for_start(&mut self, tp: &TopicPartition) -> CommandOutcome {
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
        self.live.stale = true;
        let manifest = match self.bucket.confirm(tp, topic_id, version).await {
            Ok(m) => m,
            Err(waiting) => {
                self.slots
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
        match self.adopt(tp, topic_id, manifest) {
            Ok(()) => CommandOutcome {
                partition: name,
                state: Some("PREPARING".into()),
                error: None,
            },
            Err(reason) => {
                let reason = reason.to_string();
                self.slots.insert(tp.clone(), Slot::Refused(reason.clone()));
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
    pub(super) fn command_mirrors(
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
            if let Err(e) = self.transition(tp, Event::from(command)) {
                refused.insert(tp.clone(), e.to_string());
            }
        }
        let stopping: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| !refused.contains_key(*tp))
            .filter(|tp| {
                self.slots
                    .get(*tp)
                    .and_then(Slot::mirror)
                    .is_some_and(|s| s.state() == PartitionState::Stopping)
            })
            .cloned()
            .collect();
        let mut barrier = scope.barrier();
        if !stopping.is_empty() && barrier.is_ok() {
            crate::group_commit::failover_many(self, &stopping, &scope);
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
                    state: self.state_of(tp).map(|s| s.as_str().to_string()),
                    error,
                }
            })
            .collect()
    }

    /// The source's manifests of the mirror partitions `start` may cut
    /// records of their own from (`manifest::cut::at_stake`), for
    /// [`Applier::before_start`]; one that cannot be read is left out.
    pub(super) async fn start_manifests(
        &mut self,
        tps: &[TopicPartition],
    ) -> BTreeMap<TopicPartition, PartitionManifest> {
        let at_stake: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| {
                self.slots
                    .get(*tp)
                    .and_then(Slot::mirror)
                    .is_some_and(|s| manifest::cut::at_stake(&s.mirror.record))
            })
            .cloned()
            .collect();
        self.bucket.read_each(&at_stake).await
    }

    /// `start`'s checks and pin changes on a mirror partition
    /// (`command_plan::plan_start`, performed here); the reason when the
    /// start is refused (nothing changed then). `manifest` is the
    /// source's, when it could be read.
    pub(super) fn before_start(
        &mut self,
        tp: &TopicPartition,
        manifest: Option<&PartitionManifest>,
    ) -> Result<(), crate::driver::StartError> {
        use crate::command_plan::{StartInput, plan_start};
        let source = self.opts.source_cluster_id.clone();
        let feed_topic_id = self.bucket.entry(tp).map(|e| e.topic_id);
        let ctx = self.context(tp);
        let allowed = self.truncate_allowed();
        // Read the manifest again: `start` is how an operator says that
        // what failed (a corrupt manifest, say) was repaired.
        self.bucket.forget(tp);
        let (mut env, slots) = self.env();
        let Some(slot) = slots.get_mut(tp).and_then(Slot::mirror_mut) else {
            return Ok(());
        };
        let plan = {
            let local = slot.mirror.local_view();
            plan_start(&StartInput {
                tp,
                record: &slot.mirror.record,
                source: &source,
                feed_topic_id,
                local: &local,
                manifest,
                ctx: &ctx,
                allowed,
            })?
        };
        slot.perform_start(&plan, &source, feed_topic_id, allowed, &mut env)
    }
    /// Performs every pending command request
    /// (`crate::commands::claim_requests`) and writes its response.
    /// Returns how many were handled.
    pub async fn process_command_requests(&mut self) -> usize {
        let log_dir = self.opts.log_dir.clone();
        let requests = crate::commands::claim_requests(&log_dir);
        let handled = requests.len();
        for request in requests {
            tracing::info!(command = %request.command, topics = %request.topics.join(","), all = request.all, "operator command");
            let outcomes = self
                .command_allowing(
                    request.command,
                    &request.topics,
                    request.all,
                    request.allow_truncate,
                )
                .await;
            crate::commands::respond(&log_dir, &request.id, outcomes);
        }
        handled
    }
}
