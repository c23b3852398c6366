//! The group APIs: FindCoordinator (this node), JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups and
//! DescribeGroups, answered by [`crate::groups::Coordinator`].

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::context::Shared;
use crate::groups::JoinParams;
use crate::groups::offsets_topic::Committed;
use crate::reply::{Reply, encode};

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// FindCoordinator v0-3: this node coordinates every group (and would every
/// transaction).
pub(super) fn find_coordinator(
    shared: &Shared,
    _request: FindCoordinatorRequest,
    version: i16,
) -> Reply {
    let response = FindCoordinatorResponse::default()
        .with_node_id(BrokerId(shared.config.node_id))
        .with_host(text(&shared.config.advertised_host))
        .with_port(i32::from(shared.config.advertised_port));
    encode(&response, version)
}

pub(super) async fn join(
    shared: &Shared,
    request: JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
) -> Reply {
    let ms = |v: i32| Duration::from_millis(u64::try_from(v).unwrap_or(0));
    let session = ms(request.session_timeout_ms);
    // v0 has no rebalance timeout: the session timeout is used.
    let rebalance = if version >= 1 {
        ms(request.rebalance_timeout_ms)
    } else {
        session
    };
    let outcome = shared
        .groups
        .join(
            request.group_id.0.to_string(),
            JoinParams {
                member_id: request.member_id.to_string(),
                client_id: client_id.to_string(),
                client_host: client_host.to_string(),
                session_timeout: session,
                rebalance_timeout: rebalance,
                protocol_type: request.protocol_type.to_string(),
                protocols: request
                    .protocols
                    .into_iter()
                    .map(|p| (p.name.to_string(), p.metadata))
                    .collect(),
                require_known_member_id: version >= 4,
            },
        )
        .await;
    let response = JoinGroupResponse::default()
        .with_error_code(outcome.error)
        .with_generation_id(if outcome.error == 0 {
            outcome.generation
        } else {
            -1
        })
        .with_protocol_name(Some(text(outcome.protocol.as_deref().unwrap_or(""))))
        .with_leader(text(&outcome.leader))
        .with_member_id(text(&outcome.member_id))
        .with_members(
            outcome
                .members
                .into_iter()
                .map(|(id, metadata)| {
                    JoinGroupResponseMember::default()
                        .with_member_id(text(&id))
                        .with_metadata(metadata)
                })
                .collect(),
        );
    let response = if version >= 7 {
        response.with_protocol_type(outcome.protocol_type.map(|t| text(&t)))
    } else {
        response
    };
    encode(&response, version)
}

pub(super) async fn sync(shared: &Shared, request: SyncGroupRequest, version: i16) -> Reply {
    let assignments: Vec<(String, Bytes)> = request
        .assignments
        .into_iter()
        .map(|a| (a.member_id.to_string(), a.assignment))
        .collect();
    let outcome = shared
        .groups
        .sync(
            request.group_id.0.as_str(),
            request.generation_id,
            request.member_id.as_str(),
            assignments,
        )
        .await;
    let mut response = SyncGroupResponse::default()
        .with_error_code(outcome.error)
        .with_assignment(outcome.assignment);
    if version >= 5 {
        response = response
            .with_protocol_type(outcome.protocol_type.map(|t| text(&t)))
            .with_protocol_name(outcome.protocol.map(|p| text(&p)));
    }
    encode(&response, version)
}

pub(super) fn heartbeat(shared: &Shared, request: HeartbeatRequest, version: i16) -> Reply {
    let code = shared.groups.heartbeat(
        request.group_id.0.as_str(),
        request.generation_id,
        request.member_id.as_str(),
    );
    encode(&HeartbeatResponse::default().with_error_code(code), version)
}

/// LeaveGroup v0-1: one member.
pub(super) fn leave(shared: &Shared, request: LeaveGroupRequest, version: i16) -> Reply {
    let codes = shared.groups.leave(
        request.group_id.0.as_str(),
        &[request.member_id.to_string()],
    );
    let code = codes.first().copied().unwrap_or(0);
    encode(
        &LeaveGroupResponse::default().with_error_code(code),
        version,
    )
}

pub(super) async fn commit(shared: &Shared, request: OffsetCommitRequest, version: i16) -> Reply {
    let group = request.group_id.0.to_string();
    let allowed = shared.groups.may_commit(
        &group,
        request.generation_id_or_member_epoch,
        request.member_id.as_str(),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let mut commits = Vec::new();
    for t in &request.topics {
        for p in &t.partitions {
            commits.push((
                t.name.0.to_string(),
                p.partition_index,
                Some(Committed {
                    offset: p.committed_offset,
                    leader_epoch: if version >= 6 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    },
                    metadata: p
                        .committed_metadata
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                    commit_timestamp: now,
                }),
            ));
        }
    }
    let code = if allowed != 0 {
        allowed
    } else if commits.is_empty() {
        0
    } else {
        shared.groups.commit(&group, commits).await
    };
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    encode(
        &OffsetCommitResponse::default().with_topics(topics),
        version,
    )
}

/// OffsetFetch v1-7 (one group; v2+ may ask for every partition).
pub(super) fn fetch(shared: &Shared, request: OffsetFetchRequest, version: i16) -> Reply {
    let group = request.group_id.0.to_string();
    let wanted: Option<Vec<(String, i32)>> = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|&p| (t.name.0.to_string(), p))
                    .collect::<Vec<_>>()
            })
            .collect()
    });
    let offsets = shared.groups.offsets(&group, wanted.as_deref());
    let mut by_topic: Vec<(String, Vec<OffsetFetchResponsePartition>)> = Vec::new();
    for (topic, partition, committed) in offsets {
        let row = match committed {
            Some(c) => OffsetFetchResponsePartition::default()
                .with_partition_index(partition)
                .with_committed_offset(c.offset)
                .with_committed_leader_epoch(if version >= 5 { c.leader_epoch } else { -1 })
                .with_metadata(Some(text(&c.metadata))),
            None => OffsetFetchResponsePartition::default()
                .with_partition_index(partition)
                .with_committed_offset(-1)
                .with_committed_leader_epoch(-1)
                .with_metadata(Some(text(""))),
        };
        match by_topic.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, rows)) => rows.push(row),
            None => by_topic.push((topic, vec![row])),
        }
    }
    let topics = by_topic
        .into_iter()
        .map(|(t, rows)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(text(&t)))
                .with_partitions(rows)
        })
        .collect();
    encode(&OffsetFetchResponse::default().with_topics(topics), version)
}

pub(super) fn list(shared: &Shared, request: ListGroupsRequest, version: i16) -> Reply {
    let wanted: Vec<String> = request
        .states_filter
        .iter()
        .map(|s| s.to_lowercase())
        .collect();
    let groups = shared
        .groups
        .groups()
        .into_iter()
        .filter(|g| wanted.is_empty() || wanted.contains(&g.state.as_str().to_lowercase()))
        .map(|g| {
            let row = ListedGroup::default()
                .with_group_id(GroupId(text(&g.group_id)))
                .with_protocol_type(text(&g.protocol_type));
            if version >= 4 {
                row.with_group_state(text(g.state.as_str()))
            } else {
                row
            }
        })
        .collect();
    encode(&ListGroupsResponse::default().with_groups(groups), version)
}

pub(super) fn describe(shared: &Shared, request: DescribeGroupsRequest, version: i16) -> Reply {
    let groups = request
        .groups
        .iter()
        .map(|id| match shared.groups.describe(id.0.as_str()) {
            Some(g) => DescribedGroup::default()
                .with_group_id(id.clone())
                .with_group_state(text(g.state.as_str()))
                .with_protocol_type(text(&g.protocol_type))
                .with_protocol_data(text(&g.protocol))
                .with_members(
                    g.members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(text(&m.member_id))
                                .with_client_id(text(&m.client_id))
                                .with_client_host(text(&m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect(),
                ),
            // Kafka describes an unknown group as Dead with no members.
            None => DescribedGroup::default()
                .with_group_id(id.clone())
                .with_group_state(text("Dead")),
        })
        .collect();
    encode(
        &DescribeGroupsResponse::default().with_groups(groups),
        version,
    )
}
