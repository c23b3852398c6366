//! The classic consumer group protocol on one node: this node coordinates
//! every group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), and keeps
//! committed offsets in `__consumer_offsets` ([`offsets_topic`]).
//!
//! A group moves Empty -> PreparingRebalance -> CompletingRebalance ->
//! Stable as Kafka's `GroupCoordinator` does:
//! - A JoinGroup starts a rebalance; it completes when every known member
//!   has (re)joined, or at the rebalance timeout without the stragglers.
//!   The generation then increases, the leader gets every member's
//!   subscription and the others none.
//! - From JoinGroup v4 on, a member without an id is given one and told
//!   MEMBER_ID_REQUIRED (KIP-394).
//! - SyncGroup: the leader's assignments complete the rebalance (Stable);
//!   the other members wait for them.
//! - A member silent for its session timeout is removed, and the others
//!   rebalance.
//! - OffsetCommit is accepted from the current generation's members, or
//!   from anyone when the group has no members (manual assignment). The
//!   commit is written to `__consumer_offsets` by the log dir's single
//!   writer before it is acknowledged, and read back when the gateway
//!   starts, so offsets survive restarts.
//!
//! The rebalance decisions are the pure state machine in [`rebalance`]
//! (table-tested there, with its invariants). This module is its async
//! shell: it owns the clock (the machine's time is the time since the
//! coordinator started), gives new members unique ids, parks each waiting
//! JoinGroup and SyncGroup's reply sender under its member id and sends the
//! answers the machine's effects name, and keeps the committed offsets.

/// The record format, from kafkalog (re-exported for the gateway's callers).
pub use kafkalog::offsets_topic;

pub mod rebalance;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafkalog::TopicPartition;
use tokio::sync::oneshot;

use crate::view::LogView;
use crate::writer::{AppendRequest, AppendSender};
use offsets_topic::{Committed, OFFSETS_TOPIC, OffsetsRecord};
use rebalance::{Effect, Event, Group};
pub use rebalance::{GroupState, GroupView, JoinOutcome, JoinParams, MemberView, SyncOutcome};

/// A group: its rebalance state, its committed offsets, and the requests
/// parked until the machine answers them.
#[derive(Debug, Default)]
struct Entry {
    group: Group,
    offsets: BTreeMap<(String, i32), Committed>,
    joins: BTreeMap<String, oneshot::Sender<JoinOutcome>>,
    syncs: BTreeMap<String, oneshot::Sender<SyncOutcome>>,
}

impl Entry {
    /// Applies `event`: parks the caller's `join` or `sync` sender where the
    /// machine says it waits, answers parked requests, and returns the
    /// replies meant for the caller now.
    fn apply(
        &mut self,
        event: Event,
        now: Duration,
        mut join: Option<oneshot::Sender<JoinOutcome>>,
        mut sync: Option<oneshot::Sender<SyncOutcome>>,
    ) -> Vec<Effect> {
        let mut replies = Vec::new();
        for effect in self.group.on_event(event, now) {
            match effect {
                // Replacing an older parked request drops it: its client
                // is told UNKNOWN_MEMBER_ID (join) or to rejoin (sync).
                Effect::JoinWaits { member_id } => {
                    if let Some(tx) = join.take() {
                        self.joins.insert(member_id, tx);
                    }
                }
                Effect::SyncWaits { member_id } => {
                    if let Some(tx) = sync.take() {
                        self.syncs.insert(member_id, tx);
                    }
                }
                Effect::JoinDone { member_id, outcome } => {
                    if let Some(tx) = self.joins.remove(&member_id) {
                        let _ = tx.send(outcome);
                    }
                }
                Effect::SyncDone { member_id, outcome } => {
                    if let Some(tx) = self.syncs.remove(&member_id) {
                        let _ = tx.send(outcome);
                    }
                }
                Effect::Expired { member_id } => {
                    tracing::info!(member = %member_id, "session expired; removing the member");
                }
                reply => replies.push(reply),
            }
        }
        replies
    }
}

/// The coordinator of every group.
#[derive(Debug)]
pub struct Coordinator {
    groups: Mutex<BTreeMap<String, Entry>>,
    writer: Option<AppendSender>,
    /// The origin of the machine's time ([`rebalance`] reads no clock).
    origin: Instant,
}

/// The one reply of kind `pick` among `replies`.
fn reply_of<T>(replies: Vec<Effect>, pick: impl Fn(Effect) -> Option<T>) -> Option<T> {
    replies.into_iter().find_map(pick)
}

impl Coordinator {
    /// A coordinator with the offsets committed in the log dir's
    /// `__consumer_offsets` partitions.
    pub fn load(view: &LogView, writer: Option<AppendSender>) -> Arc<Coordinator> {
        let mut groups: BTreeMap<String, Entry> = BTreeMap::new();
        let partitions = view.partitions().unwrap_or_default();
        for tp in partitions.iter().filter(|tp| tp.topic == OFFSETS_TOPIC) {
            if let Err(e) = load_partition(view, tp, &mut groups) {
                tracing::warn!(partition = %tp, error = %e, "reading committed offsets");
            }
        }
        Arc::new(Coordinator {
            groups: Mutex::new(groups),
            writer,
            origin: Instant::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        // A panic while holding the lock cannot leave a group half-changed
        // in a way worse than losing the lock: keep serving.
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The machine's time now.
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Applies `event` to `group_id` when the group is known, or to a
    /// fresh group that is not kept (a request for an unknown group
    /// creates nothing).
    fn apply_known(&self, group_id: &str, event: Event) -> Vec<Effect> {
        let now = self.now();
        let mut groups = self.lock();
        match groups.get_mut(group_id) {
            Some(entry) => entry.apply(event, now, None, None),
            None => Entry::default().apply(event, now, None, None),
        }
    }

    /// Ends rebalances past their deadline and removes members whose
    /// session expired; called periodically.
    pub fn tick(&self) {
        let now = self.now();
        let mut groups = self.lock();
        for entry in groups.values_mut() {
            entry.apply(Event::Tick, now, None, None);
        }
    }

    /// JoinGroup: resolves when the rebalance completes.
    pub async fn join(&self, group_id: String, params: JoinParams) -> JoinOutcome {
        let unknown = JoinOutcome {
            error: ResponseError::UnknownMemberId.code(),
            ..JoinOutcome::default()
        };
        let rx = {
            let now = self.now();
            let (tx, rx) = oneshot::channel();
            let fresh_id = if params.member_id.is_empty() {
                format!("{}-{}", params.client_id, new_member_suffix())
            } else {
                String::new()
            };
            let event = Event::Join { params, fresh_id };
            let mut groups = self.lock();
            let entry = groups.entry(group_id).or_default();
            let replies = entry.apply(event, now, Some(tx), None);
            if let Some(outcome) = reply_of(replies, |e| match e {
                Effect::JoinReply(o) => Some(o),
                _ => None,
            }) {
                return outcome;
            }
            rx
        };
        rx.await.unwrap_or(unknown)
    }

    /// SyncGroup: resolves when the leader has sent the assignments.
    pub async fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncOutcome {
        let fail = |code: ResponseError| SyncOutcome {
            error: code.code(),
            ..SyncOutcome::default()
        };
        let rx = {
            let now = self.now();
            let (tx, rx) = oneshot::channel();
            let event = Event::Sync {
                generation,
                member_id: member_id.to_string(),
                assignments,
            };
            let mut groups = self.lock();
            let replies = match groups.get_mut(group_id) {
                Some(entry) => entry.apply(event, now, None, Some(tx)),
                None => return fail(ResponseError::UnknownMemberId),
            };
            if let Some(outcome) = reply_of(replies, |e| match e {
                Effect::SyncReply(o) => Some(o),
                _ => None,
            }) {
                return outcome;
            }
            rx
        };
        rx.await.unwrap_or(fail(ResponseError::RebalanceInProgress))
    }

    /// Heartbeat: the member's error code.
    pub fn heartbeat(&self, group_id: &str, generation: i32, member_id: &str) -> i16 {
        let event = Event::Heartbeat {
            generation,
            member_id: member_id.to_string(),
        };
        reply_of(self.apply_known(group_id, event), |e| match e {
            Effect::HeartbeatReply(code) => Some(code),
            _ => None,
        })
        .unwrap_or(ResponseError::UnknownMemberId.code())
    }

    /// LeaveGroup: per member, its error code.
    pub fn leave(&self, group_id: &str, member_ids: &[String]) -> Vec<i16> {
        let event = Event::Leave {
            member_ids: member_ids.to_vec(),
        };
        reply_of(self.apply_known(group_id, event), |e| match e {
            Effect::LeaveReply(codes) => Some(codes),
            _ => None,
        })
        .unwrap_or_else(|| vec![ResponseError::UnknownMemberId.code(); member_ids.len()])
    }

    /// Whether `member_id` at `generation` may commit for `group_id`
    /// (error code 0), before anything is written. Anyone may commit for a
    /// group this coordinator does not know (the commit creates it).
    pub fn may_commit(&self, group_id: &str, generation: i32, member_id: &str) -> i16 {
        let now = self.now();
        let mut groups = self.lock();
        let Some(entry) = groups.get_mut(group_id) else {
            return 0;
        };
        let event = Event::CommitCheck {
            generation,
            member_id: member_id.to_string(),
        };
        reply_of(entry.apply(event, now, None, None), |e| match e {
            Effect::CommitReply(code) => Some(code),
            _ => None,
        })
        .unwrap_or(ResponseError::UnknownMemberId.code())
    }

    /// Writes `commits` to `__consumer_offsets` through the single writer,
    /// then records them. Error code 0 when committed.
    pub async fn commit(
        &self,
        group_id: &str,
        commits: Vec<(String, i32, Option<Committed>)>,
    ) -> i16 {
        let Some(writer) = &self.writer else {
            return ResponseError::CoordinatorNotAvailable.code();
        };
        let now = now_ms();
        let batch = match offsets_topic::commit_batch(group_id, &commits, now) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(group = group_id, error = %e, "encoding an offset commit");
                return ResponseError::InvalidCommitOffsetSize.code();
            }
        };
        let Ok(tp) = TopicPartition::new(OFFSETS_TOPIC, offsets_topic::partition_for(group_id))
        else {
            return ResponseError::CoordinatorNotAvailable.code();
        };
        let (reply, answer) = oneshot::channel();
        let request = AppendRequest {
            tp,
            batches: batch,
            reply,
            create: true,
        };
        if writer.send(request).await.is_err() {
            return ResponseError::CoordinatorNotAvailable.code();
        }
        match answer.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(group = group_id, error = %e, "writing an offset commit");
                return ResponseError::KafkaStorageError.code();
            }
            Err(_) => return ResponseError::CoordinatorNotAvailable.code(),
        }
        let mut groups = self.lock();
        let g = groups.entry(group_id.to_string()).or_default();
        for (topic, partition, c) in commits {
            match c {
                Some(c) => g.offsets.insert((topic, partition), c),
                None => g.offsets.remove(&(topic, partition)),
            };
        }
        0
    }

    /// The committed offsets of `group_id`: for `wanted` partitions, or all
    /// when `None`.
    pub fn offsets(
        &self,
        group_id: &str,
        wanted: Option<&[(String, i32)]>,
    ) -> Vec<(String, i32, Option<Committed>)> {
        let groups = self.lock();
        let offsets = groups.get(group_id).map(|g| &g.offsets);
        match wanted {
            Some(list) => list
                .iter()
                .map(|(t, p)| {
                    let c = offsets.and_then(|o| o.get(&(t.clone(), *p)).cloned());
                    (t.clone(), *p, c)
                })
                .collect(),
            None => offsets
                .map(|o| {
                    o.iter()
                        .map(|((t, p), c)| (t.clone(), *p, Some(c.clone())))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Whether `group_id` has members now (a consumer of it is connected).
    pub fn has_members(&self, group_id: &str) -> bool {
        self.lock()
            .get(group_id)
            .is_some_and(|e| e.group.has_members())
    }

    /// Records commits that another writer of the log dir (the applier's
    /// group offsets sync) wrote to `__consumer_offsets`: memory only, as
    /// [`Coordinator::load`] would find them. A `None` deletes.
    pub fn record_written(&self, group_id: &str, commits: &[(String, i32, Option<Committed>)]) {
        let mut groups = self.lock();
        let g = groups.entry(group_id.to_string()).or_default();
        for (topic, partition, c) in commits {
            match c {
                Some(c) => {
                    g.offsets.insert((topic.clone(), *partition), c.clone());
                }
                None => {
                    g.offsets.remove(&(topic.clone(), *partition));
                }
            }
        }
    }

    /// Every group known (with members or committed offsets).
    pub fn groups(&self) -> Vec<GroupView> {
        let groups = self.lock();
        groups.iter().map(|(id, e)| e.group.view(id)).collect()
    }

    /// One group, `None` when unknown.
    pub fn describe(&self, group_id: &str) -> Option<GroupView> {
        let groups = self.lock();
        groups.get(group_id).map(|e| e.group.view(group_id))
    }
}

/// Reads one `__consumer_offsets` partition into `groups`.
fn load_partition(
    view: &LogView,
    tp: &TopicPartition,
    groups: &mut BTreeMap<String, Entry>,
) -> anyhow::Result<()> {
    let info = view.info(tp)?;
    let reader = kafkalog::reader::PartitionReader::open(view.root(), tp)?;
    let mut failure = None;
    reader.for_each_batch(info.log_start_offset, true, |h, bytes| {
        if h.is_control() || h.base_offset >= info.last_stable_offset {
            return std::ops::ControlFlow::Continue(());
        }
        match kafkalog::records::decode_records(h, bytes) {
            Ok(records) => {
                for r in records {
                    let Some(key) = r.key.as_deref() else {
                        continue;
                    };
                    if let Ok(OffsetsRecord::Commit {
                        group,
                        topic,
                        partition,
                        committed,
                    }) = offsets_topic::decode(key, r.value.as_deref())
                    {
                        let g = groups.entry(group).or_default();
                        match committed {
                            Some(c) => {
                                g.offsets.insert((topic, partition), c);
                            }
                            None => {
                                g.offsets.remove(&(topic, partition));
                            }
                        }
                    }
                }
            }
            Err(e) => failure = Some(e),
        }
        std::ops::ControlFlow::Continue(())
    })?;
    match failure {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A unique suffix for a new member id (a UUID-like hex string).
fn new_member_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{:016x}-{n:08x}",
        t as u64 ^ u64::from(std::process::id()).rotate_left(32)
    )
}
