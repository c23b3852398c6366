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

/// The record format, from kafkalog (re-exported for the gateway's callers).
pub use kafkalog::offsets_topic;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafkalog::TopicPartition;
use tokio::sync::oneshot;

use crate::view::LogView;
use crate::writer::{AppendRequest, AppendSender};
use offsets_topic::{Committed, OFFSETS_TOPIC, OffsetsRecord};

/// A group's state, as Kafka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Waiting for the leader's assignments.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
}

impl GroupState {
    /// Kafka's name (ListGroups, DescribeGroups).
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// What a JoinGroup gets back.
#[derive(Debug, Clone, Default)]
pub struct JoinOutcome {
    /// Kafka error code (0: none).
    pub error: i16,
    /// The generation joined.
    pub generation: i32,
    /// The protocol chosen.
    pub protocol: Option<String>,
    /// The protocol type.
    pub protocol_type: Option<String>,
    /// The leader's member id.
    pub leader: String,
    /// This member's id.
    pub member_id: String,
    /// Every member's subscription, for the leader only.
    pub members: Vec<(String, Bytes)>,
}

/// What a SyncGroup gets back.
#[derive(Debug, Clone, Default)]
pub struct SyncOutcome {
    /// Kafka error code (0: none).
    pub error: i16,
    /// This member's assignment.
    pub assignment: Bytes,
    /// The protocol type.
    pub protocol_type: Option<String>,
    /// The protocol chosen.
    pub protocol: Option<String>,
}

/// A member as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct MemberView {
    /// Its id.
    pub member_id: String,
    /// The client id it gave.
    pub client_id: String,
    /// Its address.
    pub client_host: String,
    /// Its subscription for the chosen protocol.
    pub metadata: Bytes,
    /// Its assignment.
    pub assignment: Bytes,
}

/// A group as ListGroups and DescribeGroups show it.
#[derive(Debug, Clone)]
pub struct GroupView {
    /// The group id.
    pub group_id: String,
    /// Its state.
    pub state: GroupState,
    /// Its protocol type ("consumer"), empty when none.
    pub protocol_type: String,
    /// The chosen protocol, empty when none.
    pub protocol: String,
    /// Its members.
    pub members: Vec<MemberView>,
}

/// A JoinGroup's parameters.
#[derive(Debug, Clone)]
pub struct JoinParams {
    /// The group.
    pub group_id: String,
    /// The member id given ("" for a new member).
    pub member_id: String,
    /// The client id.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout: Duration,
    /// Rebalance timeout.
    pub rebalance_timeout: Duration,
    /// The protocol type ("consumer").
    pub protocol_type: String,
    /// Protocols in the member's order of preference, with metadata.
    pub protocols: Vec<(String, Bytes)>,
    /// Whether the client understands MEMBER_ID_REQUIRED (v4+).
    pub require_known_member_id: bool,
}

#[derive(Debug)]
struct Member {
    client_id: String,
    client_host: String,
    protocols: Vec<(String, Bytes)>,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    last_seen: Instant,
    assignment: Bytes,
    joining: Option<oneshot::Sender<JoinOutcome>>,
    syncing: Option<oneshot::Sender<SyncOutcome>>,
}

#[derive(Debug)]
struct Group {
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, not yet joined.
    pending: BTreeSet<String>,
    rebalance_deadline: Option<Instant>,
    offsets: BTreeMap<(String, i32), Committed>,
}

impl Group {
    fn new() -> Group {
        Group {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeSet::new(),
            rebalance_deadline: None,
            offsets: BTreeMap::new(),
        }
    }

    /// Starts (or keeps) a rebalance: syncs in flight are told
    /// REBALANCE_IN_PROGRESS.
    fn prepare_rebalance(&mut self, now: Instant) {
        if self.state != GroupState::PreparingRebalance {
            for m in self.members.values_mut() {
                if let Some(waiter) = m.syncing.take() {
                    let _ = waiter.send(SyncOutcome {
                        error: ResponseError::RebalanceInProgress.code(),
                        ..SyncOutcome::default()
                    });
                }
            }
            let timeout = self
                .members
                .values()
                .map(|m| m.rebalance_timeout)
                .max()
                .unwrap_or(Duration::from_secs(60));
            self.rebalance_deadline = Some(now + timeout);
            self.state = GroupState::PreparingRebalance;
        }
    }

    /// Completes the join when every member has joined, or `force`d at the
    /// rebalance deadline (members that did not rejoin are removed).
    fn maybe_complete_join(&mut self, force: bool) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let all_joined = self.members.values().all(|m| m.joining.is_some());
        if !all_joined && !force {
            return;
        }
        self.members.retain(|_, m| m.joining.is_some());
        self.generation += 1;
        self.rebalance_deadline = None;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol = None;
            self.leader = None;
            return;
        }
        self.protocol = self.choose_protocol();
        if self
            .leader
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = GroupState::CompletingRebalance;
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol.clone();
        let subscriptions: Vec<(String, Bytes)> = self
            .members
            .iter()
            .map(|(id, m)| {
                let metadata = m
                    .protocols
                    .iter()
                    .find(|(name, _)| Some(name) == protocol.as_ref())
                    .map(|(_, md)| md.clone())
                    .unwrap_or_default();
                (id.clone(), metadata)
            })
            .collect();
        for (id, m) in &mut self.members {
            m.last_seen = Instant::now();
            if let Some(waiter) = m.joining.take() {
                let _ = waiter.send(JoinOutcome {
                    error: 0,
                    generation: self.generation,
                    protocol: protocol.clone(),
                    protocol_type: self.protocol_type.clone(),
                    leader: leader.clone(),
                    member_id: id.clone(),
                    members: if *id == leader {
                        subscriptions.clone()
                    } else {
                        Vec::new()
                    },
                });
            }
        }
    }

    /// The first protocol of the leader-to-be's list that every member
    /// supports (Kafka votes; with one client library they agree).
    fn choose_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        first
            .protocols
            .iter()
            .map(|(name, _)| name)
            .find(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == *name))
            })
            .cloned()
    }

    fn remove_member(&mut self, id: &str, now: Instant) {
        if let Some(m) = self.members.remove(id) {
            if let Some(w) = m.joining {
                let _ = w.send(JoinOutcome {
                    error: ResponseError::UnknownMemberId.code(),
                    ..JoinOutcome::default()
                });
            }
            if let Some(w) = m.syncing {
                let _ = w.send(SyncOutcome {
                    error: ResponseError::UnknownMemberId.code(),
                    ..SyncOutcome::default()
                });
            }
        }
        if self.members.is_empty() {
            self.generation += 1;
            self.state = GroupState::Empty;
            self.protocol = None;
            self.leader = None;
            self.rebalance_deadline = None;
        } else {
            self.prepare_rebalance(now);
            self.maybe_complete_join(false);
        }
    }
}

/// The coordinator of every group.
#[derive(Debug)]
pub struct Coordinator {
    groups: Mutex<BTreeMap<String, Group>>,
    writer: Option<AppendSender>,
}

impl Coordinator {
    /// A coordinator with the offsets committed in the log dir's
    /// `__consumer_offsets` partitions.
    pub fn load(view: &LogView, writer: Option<AppendSender>) -> Arc<Coordinator> {
        let mut groups: BTreeMap<String, Group> = BTreeMap::new();
        let partitions = view.partitions().unwrap_or_default();
        for tp in partitions.iter().filter(|tp| tp.topic == OFFSETS_TOPIC) {
            if let Err(e) = load_partition(view, tp, &mut groups) {
                tracing::warn!(partition = %tp, error = %e, "reading committed offsets");
            }
        }
        Arc::new(Coordinator {
            groups: Mutex::new(groups),
            writer,
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Group>> {
        // A panic while holding the lock cannot leave a group half-changed
        // in a way worse than losing the lock: keep serving.
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends rebalances past their deadline and removes members whose
    /// session expired; called periodically.
    pub fn tick(&self) {
        let now = Instant::now();
        let mut groups = self.lock();
        for g in groups.values_mut() {
            if g.state == GroupState::PreparingRebalance
                && g.rebalance_deadline.is_some_and(|d| now >= d)
            {
                g.maybe_complete_join(true);
            }
            let expired: Vec<String> = g
                .members
                .iter()
                .filter(|(_, m)| m.joining.is_none() && now > m.last_seen + m.session_timeout)
                .map(|(id, _)| id.clone())
                .collect();
            for id in expired {
                tracing::info!(member = %id, "session expired; removing the member");
                g.remove_member(&id, now);
            }
        }
    }

    /// JoinGroup: resolves when the rebalance completes.
    pub async fn join(&self, p: JoinParams) -> JoinOutcome {
        let rx = {
            let now = Instant::now();
            let mut groups = self.lock();
            let g = groups.entry(p.group_id.clone()).or_insert_with(Group::new);
            if p.protocols.is_empty()
                || g.protocol_type
                    .as_ref()
                    .is_some_and(|t| *t != p.protocol_type && !g.members.is_empty())
            {
                return JoinOutcome {
                    error: ResponseError::InconsistentGroupProtocol.code(),
                    ..JoinOutcome::default()
                };
            }
            let mut member_id = p.member_id.clone();
            if member_id.is_empty() {
                member_id = format!("{}-{}", p.client_id, new_member_suffix());
                if p.require_known_member_id {
                    g.pending.insert(member_id.clone());
                    return JoinOutcome {
                        error: ResponseError::MemberIdRequired.code(),
                        member_id,
                        ..JoinOutcome::default()
                    };
                }
            } else if !g.members.contains_key(&member_id) && !g.pending.contains(&member_id) {
                return JoinOutcome {
                    error: ResponseError::UnknownMemberId.code(),
                    member_id,
                    ..JoinOutcome::default()
                };
            }
            g.pending.remove(&member_id);
            g.protocol_type = Some(p.protocol_type.clone());
            let (tx, rx) = oneshot::channel();
            let member = g
                .members
                .entry(member_id.clone())
                .or_insert_with(|| Member {
                    client_id: p.client_id.clone(),
                    client_host: p.client_host.clone(),
                    protocols: Vec::new(),
                    session_timeout: p.session_timeout,
                    rebalance_timeout: p.rebalance_timeout,
                    last_seen: now,
                    assignment: Bytes::new(),
                    joining: None,
                    syncing: None,
                });
            member.protocols = p.protocols.clone();
            member.session_timeout = p.session_timeout;
            member.rebalance_timeout = p.rebalance_timeout;
            member.last_seen = now;
            member.joining = Some(tx);
            g.prepare_rebalance(now);
            g.maybe_complete_join(false);
            rx
        };
        rx.await.unwrap_or(JoinOutcome {
            error: ResponseError::UnknownMemberId.code(),
            ..JoinOutcome::default()
        })
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
            let mut groups = self.lock();
            let Some(g) = groups.get_mut(group_id) else {
                return fail(ResponseError::UnknownMemberId);
            };
            if !g.members.contains_key(member_id) {
                return fail(ResponseError::UnknownMemberId);
            }
            if generation != g.generation {
                return fail(ResponseError::IllegalGeneration);
            }
            let ok = |g: &Group, assignment: Bytes| SyncOutcome {
                error: 0,
                assignment,
                protocol_type: g.protocol_type.clone(),
                protocol: g.protocol.clone(),
            };
            match g.state {
                GroupState::Empty => return fail(ResponseError::UnknownMemberId),
                GroupState::PreparingRebalance => return fail(ResponseError::RebalanceInProgress),
                GroupState::Stable => {
                    let assignment = g
                        .members
                        .get(member_id)
                        .map(|m| m.assignment.clone())
                        .unwrap_or_default();
                    return ok(g, assignment);
                }
                GroupState::CompletingRebalance => {}
            }
            if g.leader.as_deref() == Some(member_id) {
                for (id, m) in &mut g.members {
                    m.assignment = assignments
                        .iter()
                        .find(|(aid, _)| aid == id)
                        .map(|(_, a)| a.clone())
                        .unwrap_or_default();
                }
                g.state = GroupState::Stable;
                let done: Vec<(oneshot::Sender<SyncOutcome>, Bytes)> = g
                    .members
                    .values_mut()
                    .filter_map(|m| m.syncing.take().map(|w| (w, m.assignment.clone())))
                    .collect();
                for (waiter, assignment) in done {
                    let _ = waiter.send(ok(g, assignment));
                }
                let own = g
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                return ok(g, own);
            }
            let (tx, rx) = oneshot::channel();
            if let Some(m) = g.members.get_mut(member_id) {
                m.syncing = Some(tx);
                m.last_seen = Instant::now();
            }
            rx
        };
        rx.await.unwrap_or(fail(ResponseError::RebalanceInProgress))
    }

    /// Heartbeat: the member's error code.
    pub fn heartbeat(&self, group_id: &str, generation: i32, member_id: &str) -> i16 {
        let mut groups = self.lock();
        let Some(g) = groups.get_mut(group_id) else {
            return ResponseError::UnknownMemberId.code();
        };
        let state = g.state;
        let current = g.generation;
        let Some(m) = g.members.get_mut(member_id) else {
            return ResponseError::UnknownMemberId.code();
        };
        m.last_seen = Instant::now();
        if generation != current {
            return ResponseError::IllegalGeneration.code();
        }
        match state {
            GroupState::PreparingRebalance => ResponseError::RebalanceInProgress.code(),
            _ => 0,
        }
    }

    /// LeaveGroup: per member, its error code.
    pub fn leave(&self, group_id: &str, member_ids: &[String]) -> Vec<i16> {
        let now = Instant::now();
        let mut groups = self.lock();
        let Some(g) = groups.get_mut(group_id) else {
            return vec![ResponseError::UnknownMemberId.code(); member_ids.len()];
        };
        member_ids
            .iter()
            .map(|id| {
                if g.members.contains_key(id) {
                    g.remove_member(id, now);
                    0
                } else {
                    ResponseError::UnknownMemberId.code()
                }
            })
            .collect()
    }

    /// Whether `member_id` at `generation` may commit for `group_id`
    /// (error code 0), before anything is written.
    pub fn may_commit(&self, group_id: &str, generation: i32, member_id: &str) -> i16 {
        let groups = self.lock();
        let Some(g) = groups.get(group_id) else {
            return 0;
        };
        if generation < 0 && member_id.is_empty() {
            return if g.members.is_empty() {
                0
            } else {
                ResponseError::UnknownMemberId.code()
            };
        }
        if !g.members.contains_key(member_id) {
            return ResponseError::UnknownMemberId.code();
        }
        if generation != g.generation {
            return ResponseError::IllegalGeneration.code();
        }
        if g.state == GroupState::PreparingRebalance {
            return ResponseError::RebalanceInProgress.code();
        }
        0
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
        let g = groups
            .entry(group_id.to_string())
            .or_insert_with(Group::new);
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
            .is_some_and(|g| !g.members.is_empty())
    }

    /// Records commits that another writer of the log dir (the applier's
    /// group offsets sync) wrote to `__consumer_offsets`: memory only, as
    /// [`Coordinator::load`] would find them. A `None` deletes.
    pub fn record_written(&self, group_id: &str, commits: &[(String, i32, Option<Committed>)]) {
        let mut groups = self.lock();
        let g = groups
            .entry(group_id.to_string())
            .or_insert_with(Group::new);
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
        groups.iter().map(|(id, g)| view_of(id, g)).collect()
    }

    /// One group, `None` when unknown.
    pub fn describe(&self, group_id: &str) -> Option<GroupView> {
        let groups = self.lock();
        groups.get(group_id).map(|g| view_of(group_id, g))
    }
}

fn view_of(id: &str, g: &Group) -> GroupView {
    GroupView {
        group_id: id.to_string(),
        state: g.state,
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        protocol: g.protocol.clone().unwrap_or_default(),
        members: g
            .members
            .iter()
            .map(|(mid, m)| MemberView {
                member_id: mid.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: m
                    .protocols
                    .iter()
                    .find(|(n, _)| Some(n) == g.protocol.as_ref())
                    .map(|(_, md)| md.clone())
                    .unwrap_or_default(),
                assignment: m.assignment.clone(),
            })
            .collect(),
    }
}

/// Reads one `__consumer_offsets` partition into `groups`.
fn load_partition(
    view: &LogView,
    tp: &TopicPartition,
    groups: &mut BTreeMap<String, Group>,
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
                        let g = groups.entry(group).or_insert_with(Group::new);
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
