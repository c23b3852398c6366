//! One consumer group's rebalance protocol as a pure state machine.
//!
//! [`Group::on_event`] takes an [`Event`] (a JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, an OffsetCommit's generation check, or a periodic
//! tick) and the time now, as a [`Duration`] since an origin the caller
//! chooses (the coordinator uses its start), and returns the [`Effect`]s the
//! caller must carry out, in order. It reads no clock, holds no channel and
//! does no IO: the async shell in [`super`] parks each waiting JoinGroup and
//! SyncGroup under its member id and answers it when an effect says so.
//!
//! # Invariants
//!
//! - The state moves Empty -> PreparingRebalance -> CompletingRebalance ->
//!   Stable as Kafka's `GroupCoordinator` does; a group with no members is
//!   Empty, with no leader and no protocol. It has a rebalance deadline
//!   exactly when it is PreparingRebalance; in CompletingRebalance and
//!   Stable its leader is a member and no member waits in a join; only in
//!   CompletingRebalance do members wait in a sync. The generation never
//!   goes down.
//! - Every [`Effect::JoinWaits`] for a member is followed, in this or a
//!   later call, by exactly one [`Effect::JoinDone`] for it unless the
//!   member joins again first (the shell then drops the older wait, and its
//!   client is told UNKNOWN_MEMBER_ID); the same holds for
//!   [`Effect::SyncWaits`] and [`Effect::SyncDone`]. A member is waiting in
//!   a join exactly when `joining` is set, in a sync exactly when `syncing`
//!   is set.
//! - A join completes when every member is waiting in a join, or at the
//!   rebalance deadline (the largest rebalance timeout of the members when
//!   the rebalance began) without the stragglers. Completing raises the
//!   generation by one; so does the group becoming Empty when its last
//!   member leaves or expires.
//! - The leader stays the leader while it is a member; otherwise the
//!   smallest member id leads. Only the leader's join reply carries the
//!   members' subscriptions, for the protocol chosen: the first protocol of
//!   the smallest member id's list that every member supports.
//! - A member that is not waiting in a join and has not been heard from
//!   (join, sync, heartbeat) for its session timeout is removed at the next
//!   tick; the others rebalance.
//! - The Kafka error codes given are those of Kafka's coordinator:
//!   INCONSISTENT_GROUP_PROTOCOL, MEMBER_ID_REQUIRED (JoinGroup v4+,
//!   KIP-394), UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION and
//!   REBALANCE_IN_PROGRESS. Static membership (group.instance.id) is not
//!   supported: every member is dynamic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

/// A JoinGroup's parameters (the group aside).
#[derive(Debug, Clone)]
pub struct JoinParams {
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

/// What happens to a group.
#[derive(Debug, Clone)]
pub enum Event {
    /// JoinGroup.
    Join {
        /// What the member sent.
        params: JoinParams,
        /// The id a new member gets (the caller makes it unique).
        fresh_id: String,
    },
    /// SyncGroup; `assignments` matter from the leader only.
    Sync {
        /// The generation the member believes current.
        generation: i32,
        /// The member.
        member_id: String,
        /// Per member id, its assignment.
        assignments: Vec<(String, Bytes)>,
    },
    /// Heartbeat.
    Heartbeat {
        /// The generation the member believes current.
        generation: i32,
        /// The member.
        member_id: String,
    },
    /// LeaveGroup of one or more members.
    Leave {
        /// The members leaving.
        member_ids: Vec<String>,
    },
    /// May this member, at this generation, commit offsets? (Generation < 0
    /// with an empty member id: a commit outside any group membership.)
    CommitCheck {
        /// The generation given.
        generation: i32,
        /// The member id given.
        member_id: String,
    },
    /// Time passed: end an overdue rebalance, expire silent members.
    Tick,
}

/// What the caller must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Answer the JoinGroup of this event now (it does not wait).
    JoinReply(JoinOutcome),
    /// Park the JoinGroup of this event under `member_id`.
    JoinWaits {
        /// The member.
        member_id: String,
    },
    /// Answer the JoinGroup parked under `member_id`.
    JoinDone {
        /// The member.
        member_id: String,
        /// Its answer.
        outcome: JoinOutcome,
    },
    /// Answer the SyncGroup of this event now.
    SyncReply(SyncOutcome),
    /// Park the SyncGroup of this event under `member_id`.
    SyncWaits {
        /// The member.
        member_id: String,
    },
    /// Answer the SyncGroup parked under `member_id`.
    SyncDone {
        /// The member.
        member_id: String,
        /// Its answer.
        outcome: SyncOutcome,
    },
    /// The Heartbeat's error code.
    HeartbeatReply(i16),
    /// The LeaveGroup's error code per member, in the order given.
    LeaveReply(Vec<i16>),
    /// The commit check's error code (0: the commit may be written).
    CommitReply(i16),
    /// A member's session expired; it was removed (for the log).
    Expired {
        /// The member.
        member_id: String,
    },
}

#[derive(Debug, Clone)]
struct Member {
    client_id: String,
    client_host: String,
    protocols: Vec<(String, Bytes)>,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    last_seen: Duration,
    assignment: Bytes,
    joining: bool,
    syncing: bool,
}

/// One group's membership and rebalance state.
#[derive(Debug, Clone)]
pub struct Group {
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, not yet joined.
    pending: BTreeSet<String>,
    rebalance_deadline: Option<Duration>,
}

impl Default for Group {
    fn default() -> Group {
        Group::new()
    }
}

/// The rebalance timeout when no member gave one.
const DEFAULT_REBALANCE_TIMEOUT: Duration = Duration::from_secs(60);

fn code(e: ResponseError) -> i16 {
    e.code()
}

impl Group {
    /// An Empty group at generation 0.
    pub fn new() -> Group {
        Group {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeSet::new(),
            rebalance_deadline: None,
        }
    }

    /// Its state.
    pub fn state(&self) -> GroupState {
        self.state
    }

    /// Its generation.
    pub fn generation(&self) -> i32 {
        self.generation
    }

    /// The leader's member id, when there is one.
    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }

    /// Whether it has members.
    pub fn has_members(&self) -> bool {
        !self.members.is_empty()
    }

    /// The member ids, in order.
    pub fn member_ids(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    /// As ListGroups and DescribeGroups show it.
    pub fn view(&self, group_id: &str) -> GroupView {
        GroupView {
            group_id: group_id.to_string(),
            state: self.state,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: self.protocol.clone().unwrap_or_default(),
            members: self
                .members
                .iter()
                .map(|(id, m)| MemberView {
                    member_id: id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: self.metadata_of(m),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// Applies `event` at time `now`; returns what the caller must do.
    pub fn on_event(&mut self, event: Event, now: Duration) -> Vec<Effect> {
        let mut out = Vec::new();
        match event {
            Event::Join { params, fresh_id } => self.join(params, fresh_id, now, &mut out),
            Event::Sync {
                generation,
                member_id,
                assignments,
            } => self.sync(generation, &member_id, &assignments, now, &mut out),
            Event::Heartbeat {
                generation,
                member_id,
            } => out.push(Effect::HeartbeatReply(
                self.heartbeat(generation, &member_id, now),
            )),
            Event::Leave { member_ids } => {
                let codes = member_ids
                    .iter()
                    .map(|id| {
                        if self.members.contains_key(id) {
                            self.remove_member(id, now, &mut out);
                            0
                        } else {
                            code(ResponseError::UnknownMemberId)
                        }
                    })
                    .collect();
                out.push(Effect::LeaveReply(codes));
            }
            Event::CommitCheck {
                generation,
                member_id,
            } => out.push(Effect::CommitReply(self.may_commit(generation, &member_id))),
            Event::Tick => self.tick(now, &mut out),
        }
        out
    }

    fn join(&mut self, p: JoinParams, fresh_id: String, now: Duration, out: &mut Vec<Effect>) {
        let reply = |error: ResponseError, member_id: String| {
            Effect::JoinReply(JoinOutcome {
                error: error.code(),
                member_id,
                ..JoinOutcome::default()
            })
        };
        if p.protocols.is_empty()
            || self
                .protocol_type
                .as_ref()
                .is_some_and(|t| *t != p.protocol_type && !self.members.is_empty())
        {
            out.push(reply(
                ResponseError::InconsistentGroupProtocol,
                String::new(),
            ));
            return;
        }
        let mut member_id = p.member_id;
        if member_id.is_empty() {
            member_id = fresh_id;
            if p.require_known_member_id {
                self.pending.insert(member_id.clone());
                out.push(reply(ResponseError::MemberIdRequired, member_id));
                return;
            }
        } else if !self.members.contains_key(&member_id) && !self.pending.contains(&member_id) {
            out.push(reply(ResponseError::UnknownMemberId, member_id));
            return;
        }
        self.pending.remove(&member_id);
        self.protocol_type = Some(p.protocol_type);
        let member = self
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
                client_id: p.client_id,
                client_host: p.client_host,
                protocols: Vec::new(),
                session_timeout: p.session_timeout,
                rebalance_timeout: p.rebalance_timeout,
                last_seen: now,
                assignment: Bytes::new(),
                joining: false,
                syncing: false,
            });
        member.protocols = p.protocols;
        member.session_timeout = p.session_timeout;
        member.rebalance_timeout = p.rebalance_timeout;
        member.last_seen = now;
        member.joining = true;
        out.push(Effect::JoinWaits { member_id });
        self.prepare_rebalance(now, out);
        self.maybe_complete_join(false, now, out);
    }

    fn sync(
        &mut self,
        generation: i32,
        member_id: &str,
        assignments: &[(String, Bytes)],
        now: Duration,
        out: &mut Vec<Effect>,
    ) {
        let fail = |e: ResponseError| {
            Effect::SyncReply(SyncOutcome {
                error: e.code(),
                ..SyncOutcome::default()
            })
        };
        if !self.members.contains_key(member_id) {
            return out.push(fail(ResponseError::UnknownMemberId));
        }
        if generation != self.generation {
            return out.push(fail(ResponseError::IllegalGeneration));
        }
        match self.state {
            GroupState::Empty => return out.push(fail(ResponseError::UnknownMemberId)),
            GroupState::PreparingRebalance => {
                return out.push(fail(ResponseError::RebalanceInProgress));
            }
            GroupState::Stable => {
                let own = self.members[member_id].assignment.clone();
                return out.push(Effect::SyncReply(self.sync_ok(own)));
            }
            GroupState::CompletingRebalance => {}
        }
        if self.leader.as_deref() == Some(member_id) {
            for (id, m) in &mut self.members {
                m.assignment = assignments
                    .iter()
                    .find(|(aid, _)| aid == id)
                    .map(|(_, a)| a.clone())
                    .unwrap_or_default();
            }
            self.state = GroupState::Stable;
            let waiting: Vec<(String, Bytes)> = self
                .members
                .iter_mut()
                .filter(|(_, m)| m.syncing)
                .map(|(id, m)| {
                    m.syncing = false;
                    (id.clone(), m.assignment.clone())
                })
                .collect();
            for (id, assignment) in waiting {
                out.push(Effect::SyncDone {
                    member_id: id,
                    outcome: self.sync_ok(assignment),
                });
            }
            let own = self.members[member_id].assignment.clone();
            out.push(Effect::SyncReply(self.sync_ok(own)));
            return;
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.syncing = true;
            m.last_seen = now;
        }
        out.push(Effect::SyncWaits {
            member_id: member_id.to_string(),
        });
    }

    fn sync_ok(&self, assignment: Bytes) -> SyncOutcome {
        SyncOutcome {
            error: 0,
            assignment,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
        }
    }

    fn heartbeat(&mut self, generation: i32, member_id: &str, now: Duration) -> i16 {
        let state = self.state;
        let current = self.generation;
        let Some(m) = self.members.get_mut(member_id) else {
            return code(ResponseError::UnknownMemberId);
        };
        m.last_seen = now;
        if generation != current {
            return code(ResponseError::IllegalGeneration);
        }
        match state {
            GroupState::PreparingRebalance => code(ResponseError::RebalanceInProgress),
            _ => 0,
        }
    }

    fn may_commit(&self, generation: i32, member_id: &str) -> i16 {
        if generation < 0 && member_id.is_empty() {
            return if self.members.is_empty() {
                0
            } else {
                code(ResponseError::UnknownMemberId)
            };
        }
        if !self.members.contains_key(member_id) {
            return code(ResponseError::UnknownMemberId);
        }
        if generation != self.generation {
            return code(ResponseError::IllegalGeneration);
        }
        if self.state == GroupState::PreparingRebalance {
            return code(ResponseError::RebalanceInProgress);
        }
        0
    }

    fn tick(&mut self, now: Duration, out: &mut Vec<Effect>) {
        if self.state == GroupState::PreparingRebalance
            && self.rebalance_deadline.is_some_and(|d| now >= d)
        {
            self.maybe_complete_join(true, now, out);
        }
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| !m.joining && now > m.last_seen + m.session_timeout)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            out.push(Effect::Expired {
                member_id: id.clone(),
            });
            self.remove_member(&id, now, out);
        }
    }

    /// Starts (or keeps) a rebalance: syncs in flight are told
    /// REBALANCE_IN_PROGRESS.
    fn prepare_rebalance(&mut self, now: Duration, out: &mut Vec<Effect>) {
        if self.state == GroupState::PreparingRebalance {
            return;
        }
        for (id, m) in &mut self.members {
            if std::mem::take(&mut m.syncing) {
                out.push(Effect::SyncDone {
                    member_id: id.clone(),
                    outcome: SyncOutcome {
                        error: code(ResponseError::RebalanceInProgress),
                        ..SyncOutcome::default()
                    },
                });
            }
        }
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(DEFAULT_REBALANCE_TIMEOUT);
        self.rebalance_deadline = Some(now + timeout);
        self.state = GroupState::PreparingRebalance;
    }

    /// Completes the join when every member has joined, or `force`d at the
    /// rebalance deadline (members that did not rejoin are removed).
    fn maybe_complete_join(&mut self, force: bool, now: Duration, out: &mut Vec<Effect>) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        if !force && !self.members.values().all(|m| m.joining) {
            return;
        }
        // Stragglers have no parked join; a parked sync (none in
        // PreparingRebalance) would be told to rejoin.
        let stragglers: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| !m.joining)
            .map(|(id, _)| id.clone())
            .collect();
        for id in stragglers {
            if self.members.remove(&id).is_some_and(|m| m.syncing) {
                out.push(Effect::SyncDone {
                    member_id: id,
                    outcome: SyncOutcome {
                        error: code(ResponseError::RebalanceInProgress),
                        ..SyncOutcome::default()
                    },
                });
            }
        }
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
        let subscriptions: Vec<(String, Bytes)> = self
            .members
            .iter()
            .map(|(id, m)| (id.clone(), self.metadata_of(m)))
            .collect();
        for (id, m) in &mut self.members {
            m.last_seen = now;
            if std::mem::take(&mut m.joining) {
                out.push(Effect::JoinDone {
                    member_id: id.clone(),
                    outcome: JoinOutcome {
                        error: 0,
                        generation: self.generation,
                        protocol: self.protocol.clone(),
                        protocol_type: self.protocol_type.clone(),
                        leader: leader.clone(),
                        member_id: id.clone(),
                        members: if *id == leader {
                            subscriptions.clone()
                        } else {
                            Vec::new()
                        },
                    },
                });
            }
        }
    }

    /// A member's subscription for the chosen protocol.
    fn metadata_of(&self, m: &Member) -> Bytes {
        m.protocols
            .iter()
            .find(|(name, _)| Some(name) == self.protocol.as_ref())
            .map(|(_, md)| md.clone())
            .unwrap_or_default()
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

    fn remove_member(&mut self, id: &str, now: Duration, out: &mut Vec<Effect>) {
        if let Some(m) = self.members.remove(id) {
            if m.joining {
                out.push(Effect::JoinDone {
                    member_id: id.to_string(),
                    outcome: JoinOutcome {
                        error: code(ResponseError::UnknownMemberId),
                        ..JoinOutcome::default()
                    },
                });
            }
            if m.syncing {
                out.push(Effect::SyncDone {
                    member_id: id.to_string(),
                    outcome: SyncOutcome {
                        error: code(ResponseError::UnknownMemberId),
                        ..SyncOutcome::default()
                    },
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
            self.prepare_rebalance(now, out);
            self.maybe_complete_join(false, now, out);
        }
    }
}

/// One test per row: a group built by earlier events (`given`), one event
/// at a time, the effects it must return and the state and generation
/// after it. Error codes are Kafka's numbers, written out. Then random
/// event sequences against the invariants of the module doc.
#[cfg(test)]
mod tests {
    use super::*;

    const UNKNOWN_MEMBER_ID: i16 = 25;
    const ILLEGAL_GENERATION: i16 = 22;
    const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    const REBALANCE_IN_PROGRESS: i16 = 27;
    const MEMBER_ID_REQUIRED: i16 = 79;

    use GroupState::{CompletingRebalance, Empty, PreparingRebalance, Stable};

    fn t(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn md(id: &str) -> Bytes {
        Bytes::from(format!("sub-{id}"))
    }

    fn asg(id: &str) -> Bytes {
        Bytes::from(format!("asg-{id}"))
    }

    /// A JoinGroup with the "range" protocol; session 10 s, rebalance 30 s.
    fn join_with(member_id: &str, fresh_id: &str, protocols: &[&str]) -> Event {
        let id = if member_id.is_empty() {
            fresh_id
        } else {
            member_id
        };
        Event::Join {
            fresh_id: fresh_id.to_string(),
            params: JoinParams {
                member_id: member_id.to_string(),
                client_id: "client".to_string(),
                client_host: "/127.0.0.1".to_string(),
                session_timeout: t(10_000),
                rebalance_timeout: t(30_000),
                protocol_type: "consumer".to_string(),
                protocols: protocols.iter().map(|p| (p.to_string(), md(id))).collect(),
                require_known_member_id: false,
            },
        }
    }

    /// A new member (no id yet) that will be called `id`.
    fn new_member(id: &str) -> Event {
        join_with("", id, &["range"])
    }

    /// A known member rejoining.
    fn rejoin(id: &str) -> Event {
        join_with(id, "", &["range"])
    }

    fn sync(id: &str, generation: i32, assign: &[&str]) -> Event {
        Event::Sync {
            generation,
            member_id: id.to_string(),
            assignments: assign.iter().map(|m| (m.to_string(), asg(m))).collect(),
        }
    }

    fn heartbeat(id: &str, generation: i32) -> Event {
        Event::Heartbeat {
            generation,
            member_id: id.to_string(),
        }
    }

    fn leave(ids: &[&str]) -> Event {
        Event::Leave {
            member_ids: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn commit(id: &str, generation: i32) -> Event {
        Event::CommitCheck {
            generation,
            member_id: id.to_string(),
        }
    }

    fn waits(id: &str) -> Effect {
        Effect::JoinWaits {
            member_id: id.to_string(),
        }
    }

    /// `id`'s successful join at `generation`; `members` for the leader.
    fn joined(id: &str, generation: i32, leader: &str, members: &[&str]) -> Effect {
        Effect::JoinDone {
            member_id: id.to_string(),
            outcome: JoinOutcome {
                error: 0,
                generation,
                protocol: Some("range".to_string()),
                protocol_type: Some("consumer".to_string()),
                leader: leader.to_string(),
                member_id: id.to_string(),
                members: members.iter().map(|m| (m.to_string(), md(m))).collect(),
            },
        }
    }

    fn join_error(code: i16, member_id: &str) -> Effect {
        Effect::JoinReply(JoinOutcome {
            error: code,
            member_id: member_id.to_string(),
            ..JoinOutcome::default()
        })
    }

    fn synced(assignment: &str) -> SyncOutcome {
        SyncOutcome {
            error: 0,
            assignment: asg(assignment),
            protocol_type: Some("consumer".to_string()),
            protocol: Some("range".to_string()),
        }
    }

    fn sync_error(code: i16) -> SyncOutcome {
        SyncOutcome {
            error: code,
            ..SyncOutcome::default()
        }
    }

    fn sync_done(id: &str, outcome: SyncOutcome) -> Effect {
        Effect::SyncDone {
            member_id: id.to_string(),
            outcome,
        }
    }

    /// A group after `steps` (event, time in ms), their effects dropped.
    fn after(steps: Vec<(Event, u64)>) -> Group {
        let mut g = Group::new();
        for (event, at) in steps {
            g.on_event(event, t(at));
        }
        g
    }

    fn empty() -> Group {
        Group::new()
    }

    /// a alone, Stable at generation 1.
    fn stable_one() -> Group {
        after(vec![(new_member("a"), 0), (sync("a", 1, &["a"]), 100)])
    }

    /// stable_one, then b joins at 1 s: a has not rejoined yet.
    fn preparing_two() -> Group {
        let mut g = stable_one();
        g.on_event(new_member("b"), t(1_000));
        g
    }

    /// preparing_two, then a rejoins at 2 s: generation 2, leader a.
    fn completing_two() -> Group {
        let mut g = preparing_two();
        g.on_event(rejoin("a"), t(2_000));
        g
    }

    /// completing_two, with b's sync waiting for the leader's (2.5 s).
    fn completing_two_b_waits() -> Group {
        let mut g = completing_two();
        g.on_event(sync("b", 2, &[]), t(2_500));
        g
    }

    /// a and b, Stable at generation 2, leader a (a synced at 3 s).
    fn stable_two() -> Group {
        let mut g = completing_two_b_waits();
        g.on_event(sync("a", 2, &["a", "b"]), t(3_000));
        g
    }

    /// An id handed out with MEMBER_ID_REQUIRED, not yet used.
    fn pending_a() -> Group {
        let mut g = Group::new();
        g.on_event(required(), t(0));
        g
    }

    fn required() -> Event {
        let Event::Join {
            mut params,
            fresh_id,
        } = new_member("a")
        else {
            unreachable!()
        };
        params.require_known_member_id = true;
        Event::Join { params, fresh_id }
    }

    macro_rules! rows {
        ($($name:ident: $given:expr, $event:expr, at $at:expr
            => [$($effect:expr),* $(,)?], $state:expr, $generation:expr;)*) => {$(
            #[test]
            fn $name() {
                let mut g = $given;
                let got = g.on_event($event, t($at));
                assert_eq!(got, vec![$($effect),*]);
                assert_eq!((g.state(), g.generation()), ($state, $generation));
            }
        )*};
    }

    rows! {
        // JoinGroup
        first_join_makes_the_leader_and_completes_at_once:
            empty(), new_member("a"), at 0
            => [waits("a"), joined("a", 1, "a", &["a"])], CompletingRebalance, 1;
        second_join_starts_a_rebalance_and_waits_for_the_others:
            stable_one(), new_member("b"), at 1_000
            => [waits("b")], PreparingRebalance, 1;
        last_rejoin_completes_the_join_leader_gets_every_subscription:
            preparing_two(), rejoin("a"), at 2_000
            => [waits("a"), joined("a", 2, "a", &["a", "b"]), joined("b", 2, "a", &[])],
               CompletingRebalance, 2;
        join_during_completing_rebalance_restarts_it_and_tells_waiting_syncs:
            completing_two_b_waits(), new_member("c"), at 2_600
            => [waits("c"), sync_done("b", sync_error(REBALANCE_IN_PROGRESS))],
               PreparingRebalance, 2;
        join_before_the_rebalance_deadline_keeps_waiting:
            preparing_two(), Event::Tick, at 5_000
            => [], PreparingRebalance, 1;
        join_timeout_completes_with_the_members_present:
            preparing_two(), Event::Tick, at 31_000
            => [joined("b", 2, "b", &["b"])], CompletingRebalance, 2;
        join_without_an_id_is_told_member_id_required_from_v4:
            empty(), required(), at 0
            => [join_error(MEMBER_ID_REQUIRED, "a")], Empty, 0;
        join_with_the_id_handed_out_is_accepted:
            pending_a(), rejoin("a"), at 10
            => [waits("a"), joined("a", 1, "a", &["a"])], CompletingRebalance, 1;
        join_with_an_unknown_member_id_is_refused:
            stable_one(), rejoin("z"), at 1_000
            => [join_error(UNKNOWN_MEMBER_ID, "z")], Stable, 1;
        join_without_protocols_is_inconsistent:
            empty(), join_with("", "a", &[]), at 0
            => [join_error(INCONSISTENT_GROUP_PROTOCOL, "")], Empty, 0;
        join_with_another_protocol_type_is_inconsistent:
            stable_one(),
            {
                let Event::Join { mut params, fresh_id } = new_member("b") else {
                    unreachable!()
                };
                params.protocol_type = "connect".to_string();
                Event::Join { params, fresh_id }
            }, at 1_000
            => [join_error(INCONSISTENT_GROUP_PROTOCOL, "")], Stable, 1;
        protocol_chosen_is_the_first_every_member_supports:
            after(vec![
                (join_with("", "a", &["roundrobin", "range"]), 0),
                (sync("a", 1, &["a"]), 100),
                (join_with("", "b", &["range"]), 1_000),
            ]),
            join_with("a", "", &["roundrobin", "range"]), at 2_000
            => [waits("a"), joined("a", 2, "a", &["a", "b"]), joined("b", 2, "a", &[])],
               CompletingRebalance, 2;

        // SyncGroup
        follower_sync_waits_for_the_leader:
            completing_two(), sync("b", 2, &[]), at 2_500
            => [Effect::SyncWaits { member_id: "b".to_string() }], CompletingRebalance, 2;
        leader_sync_distributes_the_assignments:
            completing_two_b_waits(), sync("a", 2, &["a", "b"]), at 3_000
            => [sync_done("b", synced("b")), Effect::SyncReply(synced("a"))], Stable, 2;
        sync_when_stable_returns_the_members_assignment:
            stable_two(), sync("b", 2, &[]), at 4_000
            => [Effect::SyncReply(synced("b"))], Stable, 2;
        sync_with_a_stale_generation_is_illegal:
            completing_two(), sync("a", 1, &["a"]), at 2_500
            => [Effect::SyncReply(sync_error(ILLEGAL_GENERATION))], CompletingRebalance, 2;
        sync_during_preparing_rebalance_is_told_to_rejoin:
            preparing_two(), sync("a", 1, &["a"]), at 1_500
            => [Effect::SyncReply(sync_error(REBALANCE_IN_PROGRESS))], PreparingRebalance, 1;
        sync_from_an_unknown_member_is_refused:
            stable_one(), sync("z", 1, &[]), at 1_000
            => [Effect::SyncReply(sync_error(UNKNOWN_MEMBER_ID))], Stable, 1;

        // Heartbeat
        heartbeat_of_a_stable_member_is_fine:
            stable_two(), heartbeat("b", 2), at 4_000
            => [Effect::HeartbeatReply(0)], Stable, 2;
        heartbeat_with_a_stale_generation_is_illegal:
            stable_two(), heartbeat("b", 1), at 4_000
            => [Effect::HeartbeatReply(ILLEGAL_GENERATION)], Stable, 2;
        heartbeat_during_a_rebalance_says_rejoin:
            preparing_two(), heartbeat("a", 1), at 1_500
            => [Effect::HeartbeatReply(REBALANCE_IN_PROGRESS)], PreparingRebalance, 1;
        heartbeat_of_an_unknown_member_is_refused:
            stable_two(), heartbeat("z", 2), at 4_000
            => [Effect::HeartbeatReply(UNKNOWN_MEMBER_ID)], Stable, 2;

        // Session timeouts
        session_expiry_removes_the_member_and_starts_a_rebalance:
            { let mut g = stable_two(); g.on_event(heartbeat("a", 2), t(12_000)); g },
            Event::Tick, at 13_000
            => [Effect::Expired { member_id: "b".to_string() }], PreparingRebalance, 2;
        session_not_yet_expired_changes_nothing:
            stable_two(), Event::Tick, at 12_000
            => [], Stable, 2;
        session_expiry_of_every_member_empties_the_group:
            stable_one(), Event::Tick, at 10_001
            => [Effect::Expired { member_id: "a".to_string() }], Empty, 2;
        expiry_of_the_leader_tells_the_waiting_follower_to_rejoin:
            completing_two_b_waits(), Event::Tick, at 12_001
            => [
                Effect::Expired { member_id: "a".to_string() },
                sync_done("b", sync_error(REBALANCE_IN_PROGRESS)),
            ], PreparingRebalance, 2;

        // LeaveGroup
        leave_of_the_last_member_empties_the_group:
            stable_one(), leave(&["a"]), at 1_000
            => [Effect::LeaveReply(vec![0])], Empty, 2;
        leave_of_one_member_rebalances_the_others:
            stable_two(), leave(&["b"]), at 4_000
            => [Effect::LeaveReply(vec![0])], PreparingRebalance, 2;
        leave_of_the_straggler_completes_the_join:
            preparing_two(), leave(&["a"]), at 1_500
            => [joined("b", 2, "b", &["b"]), Effect::LeaveReply(vec![0])],
               CompletingRebalance, 2;
        leave_of_a_member_waiting_in_join_answers_its_join:
            preparing_two(), leave(&["b"]), at 1_500
            => [
                Effect::JoinDone {
                    member_id: "b".to_string(),
                    outcome: JoinOutcome { error: UNKNOWN_MEMBER_ID, ..JoinOutcome::default() },
                },
                Effect::LeaveReply(vec![0]),
            ], PreparingRebalance, 1;
        leave_of_an_unknown_member_is_refused_per_member:
            stable_one(), leave(&["z", "a"]), at 1_000
            => [Effect::LeaveReply(vec![UNKNOWN_MEMBER_ID, 0])], Empty, 2;

        // OffsetCommit's generation check
        commit_from_a_member_of_the_current_generation_is_accepted:
            stable_two(), commit("b", 2), at 4_000
            => [Effect::CommitReply(0)], Stable, 2;
        commit_with_a_stale_generation_is_illegal:
            stable_two(), commit("b", 1), at 4_000
            => [Effect::CommitReply(ILLEGAL_GENERATION)], Stable, 2;
        commit_during_a_rebalance_is_refused:
            preparing_two(), commit("a", 1), at 1_500
            => [Effect::CommitReply(REBALANCE_IN_PROGRESS)], PreparingRebalance, 1;
        commit_from_an_unknown_member_is_refused:
            stable_two(), commit("z", 2), at 4_000
            => [Effect::CommitReply(UNKNOWN_MEMBER_ID)], Stable, 2;
        commit_without_membership_to_an_empty_group_is_accepted:
            after(vec![(new_member("a"), 0), (leave(&["a"]), 100)]), commit("", -1), at 1_000
            => [Effect::CommitReply(0)], Empty, 2;
        commit_without_membership_to_a_group_with_members_is_refused:
            stable_one(), commit("", -1), at 1_000
            => [Effect::CommitReply(UNKNOWN_MEMBER_ID)], Stable, 1;
    }

    #[test]
    fn the_leader_stays_the_leader_while_it_is_a_member() {
        // "0" is the smaller id, but a leads: it led before.
        let mut g = stable_one();
        g.on_event(join_with("", "0", &["range"]), t(1_000));
        g.on_event(rejoin("a"), t(1_500));
        assert_eq!(g.leader(), Some("a"));
        assert_eq!(g.member_ids(), vec!["0".to_string(), "a".to_string()]);
    }

    #[test]
    fn describe_shows_the_chosen_protocols_subscription_and_the_assignment() {
        let view = stable_two().view("g");
        assert_eq!(
            (view.state.as_str(), view.protocol.as_str()),
            ("Stable", "range")
        );
        let members: Vec<(String, Bytes, Bytes)> = view
            .members
            .into_iter()
            .map(|m| (m.member_id, m.metadata, m.assignment))
            .collect();
        assert_eq!(
            members,
            vec![
                ("a".to_string(), md("a"), asg("a")),
                ("b".to_string(), md("b"), asg("b")),
            ]
        );
    }

    mod random {
        use super::*;
        use proptest::prelude::*;

        fn event() -> impl Strategy<Value = Event> {
            let id = prop::sample::select(vec!["a", "b", "c"]);
            prop_oneof![
                // A member id "?x": x's own id if x is a member, else none.
                (id.clone(), 0..3u8, any::<bool>()).prop_map(|(id, how, v4)| {
                    let given = match how {
                        0 => String::new(),
                        1 => id.to_string(),
                        _ => format!("?{id}"),
                    };
                    let Event::Join {
                        mut params,
                        fresh_id,
                    } = join_with(&given, id, &["range"])
                    else {
                        unreachable!()
                    };
                    params.require_known_member_id = v4;
                    Event::Join { params, fresh_id }
                }),
                // Generations are offsets from the current one, mostly 0.
                (id.clone(), -1..2i32).prop_map(|(id, g)| sync(id, g, &["a", "b", "c"])),
                (id.clone(), -1..2i32).prop_map(|(id, g)| heartbeat(id, g)),
                id.clone().prop_map(|id| leave(&[id])),
                (id, -1..2i32).prop_map(|(id, g)| commit(id, g)),
                Just(Event::Tick),
            ]
        }

        proptest! {
            /// Every parked request is answered once, and the state agrees
            /// with the members, whatever the order of events.
            #[test]
            fn random_events_keep_the_invariants(
                steps in proptest::collection::vec((event(), 0..8_000u64), 0..80)
            ) {
                let mut g = Group::new();
                let mut now = 0;
                let mut joins = BTreeSet::new();
                let mut syncs = BTreeSet::new();
                for (mut event, dt) in steps {
                    now += dt;
                    let generation = g.generation;
                    if let Event::Sync { generation: offset, .. }
                    | Event::Heartbeat { generation: offset, .. }
                    | Event::CommitCheck { generation: offset, .. } = &mut event
                    {
                        *offset += generation;
                    }
                    if let Event::Join { params, .. } = &mut event
                        && let Some(id) = params.member_id.strip_prefix('?')
                    {
                        params.member_id = if g.members.contains_key(id) {
                            id.to_string()
                        } else {
                            String::new()
                        };
                    }
                    for effect in g.on_event(event, t(now)) {
                        match effect {
                            Effect::JoinWaits { member_id } => { joins.insert(member_id); }
                            Effect::SyncWaits { member_id } => { syncs.insert(member_id); }
                            Effect::JoinDone { member_id, .. } => {
                                prop_assert!(joins.remove(&member_id), "join of {member_id} not parked");
                            }
                            Effect::SyncDone { member_id, .. } => {
                                prop_assert!(syncs.remove(&member_id), "sync of {member_id} not parked");
                            }
                            _ => {}
                        }
                    }
                    let joining: BTreeSet<String> =
                        g.members.iter().filter(|(_, m)| m.joining).map(|(id, _)| id.clone()).collect();
                    let syncing: BTreeSet<String> =
                        g.members.iter().filter(|(_, m)| m.syncing).map(|(id, _)| id.clone()).collect();
                    prop_assert_eq!(&joins, &joining);
                    prop_assert_eq!(&syncs, &syncing);
                    prop_assert!(g.generation >= generation);
                    prop_assert_eq!(g.state == Empty, g.members.is_empty());
                    prop_assert_eq!(g.state == PreparingRebalance, g.rebalance_deadline.is_some());
                    if g.state == Empty {
                        prop_assert!(g.leader.is_none() && g.protocol.is_none());
                    }
                    if matches!(g.state, CompletingRebalance | Stable) {
                        prop_assert!(g.members.contains_key(g.leader.as_deref().unwrap_or("")));
                        prop_assert!(joining.is_empty());
                    }
                    if g.state != CompletingRebalance {
                        prop_assert!(syncing.is_empty());
                    }
                }
            }
        }
    }
}
