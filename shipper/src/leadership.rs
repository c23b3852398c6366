//! Which replica's shipper ships a partition on a multi-broker source
//! (leader-aware shipping, docs/mirroring.md). Pure: a decision from the
//! broker's metadata image, no IO.
//!
//! Every broker holds replicas of partitions it does not lead. With the
//! broker's KRaft metadata log on disk, [`role`] says, for a partition dir
//! found in this broker's log dirs, whether this broker's shipper ships it:
//!
//! | the metadata image says                                  | role                 | ships |
//! |----------------------------------------------------------|----------------------|-------|
//! | a record it could not read covers the partition          | `Untrusted`          | yes (as without metadata: fenced by the manifest commit; alarm) |
//! | no such topic, and the dir's topic id was not deleted     | `Unknown`            | yes (as without metadata) |
//! | the dir's topic id was deleted                            | `Deleted`            | no    |
//! | the topic has another id (deleted and recreated)          | `StaleTopic`         | no    |
//! | the topic, but not the partition                          | `Unknown`            | yes (as without metadata) |
//! | this broker is not a replica (a reassignment's leftover)  | `NotReplica`         | no    |
//! | JBOD: the replica is assigned to another log dir          | `OtherDirectory`     | no    |
//! | this broker leads                                         | `Leader`             | yes   |
//! | no leader; this broker led last and is in the ISR         | `LastLeader`         | yes   |
//! | no leader; no last leader known; first ISR replica        | `LastLeader`         | yes   |
//! | no leader; another broker led last (or is first in ISR)   | `Leaderless`         | no    |
//! | another broker leads                                      | `Follower`           | no    |
//!
//! Invariants:
//! - at most one broker's view says `Leader` or `LastLeader` for a
//!   partition when the brokers' views agree; when they do not (a
//!   metadata log behind another, or a tail past the high watermark that
//!   is later truncated), two shippers may ship at once, and the
//!   create-if-absent manifest commit fences one: never a wrong manifest,
//!   only a wasted upload;
//! - the directory check only refuses when both ids are real (a replica
//!   whose assignment is `MIGRATING`, `UNASSIGNED` or `LOST`, or a log
//!   dir without a `directory.id`, is not refused by it).

use kafkalog::TopicId;
use kraft::MetadataImage;
use kraft::records::{DIRECTORY_LOST, DIRECTORY_MIGRATING, DIRECTORY_UNASSIGNED, NO_LEADER};

/// What this broker is to a partition, by the metadata image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    /// This broker leads it, at this leader epoch.
    Leader {
        /// The leader epoch.
        leader_epoch: i32,
    },
    /// Nobody leads it; this broker led it last and may still lead it
    /// again (in the ISR), so its shipper ships what the HW covers.
    LastLeader {
        /// The leader epoch it led at, if known.
        leader_epoch: i32,
    },
    /// Another broker leads it.
    Follower {
        /// The leader's node id.
        leader: i32,
        /// Its leader epoch.
        leader_epoch: i32,
    },
    /// Nobody leads it and another replica led it last.
    Leaderless {
        /// The replica that led it last (-1: unknown).
        last_leader: i32,
    },
    /// The metadata does not place the partition on this broker.
    NotReplica,
    /// JBOD: the metadata assigns this broker's replica to another log dir.
    OtherDirectory {
        /// The directory id the metadata assigns.
        assigned: TopicId,
    },
    /// The dir's topic id was removed from the cluster.
    Deleted,
    /// The dir holds an older topic of the same name (deleted, then
    /// created again with a new id).
    StaleTopic {
        /// The topic id the cluster has now.
        current: TopicId,
    },
    /// The image does not know the partition (created after the last
    /// read, or a record is missing): shipped as without metadata.
    Unknown,
    /// A record the image could not apply faithfully covers the
    /// partition: shipped as without metadata, and alarmed.
    Untrusted {
        /// Why, as the image recorded it.
        reason: String,
    },
}

impl Role {
    /// True when this broker's shipper ships the partition.
    pub(crate) fn ships(&self) -> bool {
        matches!(
            self,
            Role::Leader { .. } | Role::LastLeader { .. } | Role::Unknown | Role::Untrusted { .. }
        )
    }

    /// True when this broker ships the partition because the metadata
    /// names it (not as a fallback): a commit it loses is a race with the
    /// previous leader's last commit, not a reason to back off.
    pub(crate) fn leads(&self) -> bool {
        matches!(self, Role::Leader { .. } | Role::LastLeader { .. })
    }

    /// A short, stable name (metrics label, status).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Role::Leader { .. } => "leader",
            Role::LastLeader { .. } => "last_leader",
            Role::Follower { .. } => "follower",
            Role::Leaderless { .. } => "leaderless",
            Role::NotReplica => "not_replica",
            Role::OtherDirectory { .. } => "other_directory",
            Role::Deleted => "deleted",
            Role::StaleTopic { .. } => "stale_topic",
            Role::Unknown => "unknown",
            Role::Untrusted { .. } => "untrusted",
        }
    }

    /// What an operator reads in `shipper status`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Role::Leader { leader_epoch } => format!("this broker leads (leader epoch {leader_epoch})"),
            Role::LastLeader { leader_epoch } => format!(
                "no leader; this broker led last (leader epoch {leader_epoch}) and ships up to its high watermark"
            ),
            Role::Follower {
                leader,
                leader_epoch,
            } => format!(
                "broker {leader} leads (leader epoch {leader_epoch}): its shipper ships this partition"
            ),
            Role::Leaderless { last_leader: -1 } => {
                "no leader; another replica of the ISR ships it".to_string()
            }
            Role::Leaderless { last_leader } => {
                format!("no leader; broker {last_leader} led last and ships it")
            }
            Role::NotReplica => {
                "the metadata does not place a replica on this broker (a leftover of a reassignment)"
                    .to_string()
            }
            Role::OtherDirectory { assigned } => format!(
                "the metadata assigns this broker's replica to log dir {assigned} (JBOD): this copy is not shipped"
            ),
            Role::Deleted => "the topic was deleted on the source".to_string(),
            Role::StaleTopic { current } => format!(
                "an older topic of this name (the topic now has id {current}): not shipped"
            ),
            Role::Unknown => {
                "not in the metadata yet: shipped as without metadata".to_string()
            }
            Role::Untrusted { reason } => format!(
                "the metadata cannot be trusted for it ({reason}): shipped as without metadata (every replica ships; the manifest commit fences all but one)"
            ),
        }
    }
}

/// What the shipper knows of one partition dir besides the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirFacts {
    /// This broker's node id.
    pub(crate) node_id: i32,
    /// The topic id in the dir's `partition.metadata`.
    pub(crate) topic_id: TopicId,
    /// The `directory.id` of the log dir that holds it (`None`: its
    /// `meta.properties` has none, Kafka before 3.7).
    pub(crate) dir_id: Option<TopicId>,
}

fn real_directory(id: TopicId) -> bool {
    id != DIRECTORY_MIGRATING && id != DIRECTORY_UNASSIGNED && id != DIRECTORY_LOST
}

/// The role of this broker for partition `partition` of `topic` (see the
/// module docs' table).
pub(crate) fn role(image: &MetadataImage, topic: &str, partition: i32, facts: DirFacts) -> Role {
    if let Some(u) = image.partition_untrusted(topic, partition) {
        return Role::Untrusted {
            reason: u.reason.clone(),
        };
    }
    let Some(t) = image.topics.get(topic) else {
        if image.deleted_topics.iter().any(|d| d.id == facts.topic_id) {
            return Role::Deleted;
        }
        return Role::Unknown;
    };
    if t.id != facts.topic_id {
        if image.deleted_topics.iter().any(|d| d.id == facts.topic_id) {
            return Role::Deleted;
        }
        return Role::StaleTopic { current: t.id };
    }
    let Some(reg) = t.partitions.get(&partition) else {
        return Role::Unknown;
    };
    let Some(assigned) = reg.directory_of(facts.node_id) else {
        return Role::NotReplica;
    };
    if let Some(dir) = facts.dir_id
        && real_directory(assigned)
        && real_directory(dir)
        && dir != assigned
    {
        return Role::OtherDirectory { assigned };
    }
    if reg.leader == facts.node_id {
        return Role::Leader {
            leader_epoch: reg.leader_epoch,
        };
    }
    if reg.leader != NO_LEADER {
        return Role::Follower {
            leader: reg.leader,
            leader_epoch: reg.leader_epoch,
        };
    }
    let in_isr = reg.isr.contains(&facts.node_id);
    let last = reg.last_leader;
    if last.id == facts.node_id && in_isr {
        return Role::LastLeader {
            leader_epoch: last.leader_epoch,
        };
    }
    if last.id == NO_LEADER {
        // Nobody known led it: the first ISR member in replica order ships.
        let first_in_isr = reg.replicas.iter().find(|r| reg.isr.contains(r));
        if first_in_isr == Some(&facts.node_id) {
            return Role::LastLeader {
                leader_epoch: reg.leader_epoch,
            };
        }
    }
    Role::Leaderless {
        last_leader: last.id,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kraft::image::{DeletedTopic, Topic};
    use kraft::records::{LastLeader, PartitionRegistration, Scope};

    use super::*;

    fn id(n: u8) -> TopicId {
        TopicId::from_bytes([n; 16])
    }

    /// Partition 0 of topic "t" (id 1) on replicas 1, 2, 3, ISR `isr`,
    /// led by `leader` at epoch 5, last led by `last`, replica dirs `dirs`.
    fn image(leader: i32, isr: &[i32], last: i32, dirs: &[TopicId]) -> MetadataImage {
        let reg = PartitionRegistration {
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            removing_replicas: vec![],
            adding_replicas: vec![],
            leader,
            leader_epoch: 5,
            partition_epoch: 9,
            directories: dirs.to_vec(),
            leader_recovery_state: 0,
            last_leader: LastLeader {
                id: last,
                leader_epoch: 4,
            },
        };
        let mut img = MetadataImage::new();
        img.topics.insert(
            "t".into(),
            Topic {
                id: id(1),
                partitions: BTreeMap::from([(0, reg)]),
            },
        );
        img
    }

    fn facts(node_id: i32) -> DirFacts {
        DirFacts {
            node_id,
            topic_id: id(1),
            dir_id: None,
        }
    }

    #[test]
    fn the_role_of_a_broker_follows_the_metadata() {
        let d = |n| id(n);
        #[rustfmt::skip]
        let rows: Vec<(&str, MetadataImage, DirFacts, Role)> = vec![
            ("the leader ships",
                image(1, &[1, 2, 3], 1, &[]), facts(1), Role::Leader { leader_epoch: 5 }),
            ("a follower does not",
                image(2, &[1, 2, 3], 2, &[]), facts(1), Role::Follower { leader: 2, leader_epoch: 5 }),
            ("leaderless: the last leader in the ISR ships",
                image(-1, &[1], 1, &[]), facts(1), Role::LastLeader { leader_epoch: 4 }),
            ("leaderless: another replica led last",
                image(-1, &[2], 2, &[]), facts(1), Role::Leaderless { last_leader: 2 }),
            ("leaderless: the last leader left the ISR, nobody ships",
                image(-1, &[2], 1, &[]), facts(1), Role::Leaderless { last_leader: 1 }),
            ("leaderless, last leader unknown: the first ISR replica ships",
                image(-1, &[3, 2], -1, &[]), facts(2), Role::LastLeader { leader_epoch: 5 }),
            ("leaderless, last leader unknown: the others do not",
                image(-1, &[3, 2], -1, &[]), facts(3), Role::Leaderless { last_leader: -1 }),
            ("not a replica",
                image(1, &[1], 1, &[]), facts(7), Role::NotReplica),
            ("JBOD: the replica is assigned another dir",
                image(1, &[1], 1, &[d(8), d(9), d(9)]), DirFacts { dir_id: Some(d(7)), ..facts(1) },
                Role::OtherDirectory { assigned: d(8) }),
            ("JBOD: the assigned dir ships",
                image(1, &[1], 1, &[d(8), d(9), d(9)]), DirFacts { dir_id: Some(d(8)), ..facts(1) },
                Role::Leader { leader_epoch: 5 }),
            ("JBOD: an unassigned replica is not refused",
                image(1, &[1], 1, &[DIRECTORY_UNASSIGNED, d(9), d(9)]), DirFacts { dir_id: Some(d(7)), ..facts(1) },
                Role::Leader { leader_epoch: 5 }),
            ("JBOD: a lost dir assignment is not refused",
                image(1, &[1], 1, &[DIRECTORY_LOST, d(9), d(9)]), DirFacts { dir_id: Some(d(7)), ..facts(1) },
                Role::Leader { leader_epoch: 5 }),
            ("JBOD: a log dir without directory.id is not refused",
                image(1, &[1], 1, &[d(8), d(9), d(9)]), facts(1), Role::Leader { leader_epoch: 5 }),
            ("a partition the topic does not have yet is shipped as without metadata",
                image(1, &[1], 1, &[]), facts(1), Role::Unknown),
        ];
        for (name, img, f, want) in rows {
            let p = if name.contains("does not have yet") {
                3
            } else {
                0
            };
            let got = role(&img, "t", p, f);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn topics_unknown_deleted_or_recreated() {
        let mut img = image(1, &[1], 1, &[]);
        let other = DirFacts {
            topic_id: id(2),
            ..facts(1)
        };
        assert_eq!(
            role(&img, "nope", 0, facts(1)),
            Role::Unknown,
            "unknown topic"
        );
        assert_eq!(
            role(&img, "t", 0, other),
            Role::StaleTopic { current: id(1) },
            "the name now has another id"
        );
        img.deleted_topics.push(DeletedTopic {
            name: "t".into(),
            id: id(2),
            offset: 10,
        });
        assert_eq!(
            role(&img, "t", 0, other),
            Role::Deleted,
            "recreated after a deletion"
        );
        img.topics.clear();
        assert_eq!(role(&img, "t", 0, other), Role::Deleted, "deleted");
        assert_eq!(
            role(&img, "t", 0, facts(1)),
            Role::Unknown,
            "another id, not deleted"
        );
    }

    #[test]
    fn an_untrusted_record_makes_the_partition_ship_as_without_metadata() {
        let mut img = image(2, &[1, 2], 2, &[]);
        img.mark_untrusted(
            40,
            Scope::Partition {
                topic_id: id(1),
                partition: 0,
            },
            "PartitionChangeRecord v9",
        );
        let r = role(&img, "t", 0, facts(1));
        assert_eq!(
            r,
            Role::Untrusted {
                reason: "PartitionChangeRecord v9".into()
            }
        );
        assert!(r.ships() && !r.leads());
    }

    #[test]
    fn which_roles_ship_and_lead() {
        #[rustfmt::skip]
        let rows: Vec<(Role, bool, bool)> = vec![
            (Role::Leader { leader_epoch: 1 }, true, true),
            (Role::LastLeader { leader_epoch: 1 }, true, true),
            (Role::Unknown, true, false),
            (Role::Untrusted { reason: "r".into() }, true, false),
            (Role::Follower { leader: 2, leader_epoch: 1 }, false, false),
            (Role::Leaderless { last_leader: 2 }, false, false),
            (Role::NotReplica, false, false),
            (Role::OtherDirectory { assigned: id(3) }, false, false),
            (Role::Deleted, false, false),
            (Role::StaleTopic { current: id(3) }, false, false),
        ];
        for (r, ships, leads) in rows {
            assert_eq!((r.ships(), r.leads()), (ships, leads), "{}", r.name());
        }
    }
}
