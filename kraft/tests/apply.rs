//! Table tests: records written by the independent encoder
//! (`support`), decoded by `kraft::records` and replayed into an image.
//! One row per case: the records, then what the image must say.

mod support;

use kraft::MetadataImage;
use kraft::records::DIRECTORY_MIGRATING;
use kraft::records::{Decoded, Scope, decode_value};
use support::*;

const T: u8 = 1;

/// Replays `values` at offsets 0.. into a fresh image.
fn replay(values: &[Vec<u8>]) -> MetadataImage {
    let mut image = MetadataImage::new();
    for (i, v) in values.iter().enumerate() {
        let decoded = decode_value(v).unwrap_or_else(|e| panic!("record {i}: {e}"));
        image.replay(i as i64, 1, decoded);
    }
    image
}

/// Topic "orders" (id 1) with partition 0 on replicas [1,2,3], leader 1,
/// epochs 0/0, as a PartitionRecord v0.
fn base() -> Vec<Vec<u8>> {
    vec![
        feature("metadata.version", 19),
        topic("orders", id(T)),
        partition(0, id(T), 0, &[1, 2, 3], &[1, 2, 3], 1, 0, 0, &[]),
    ]
}

fn with(extra: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut v = base();
    v.extend_from_slice(extra);
    v
}

/// (leader, leader epoch, partition epoch, replicas, isr) of orders-p.
fn p(image: &MetadataImage, partition: i32) -> (i32, i32, i32, Vec<i32>, Vec<i32>) {
    let p = &image.topics["orders"].partitions[&partition];
    (
        p.leader,
        p.leader_epoch,
        p.partition_epoch,
        p.replicas.clone(),
        p.isr.clone(),
    )
}

#[test]
fn each_record_type_changes_the_image_as_kafka_does() {
    type Check = fn(&MetadataImage);
    let rows: Vec<(&str, Vec<Vec<u8>>, Check)> = vec![
        (
            "topic and partition records create the topic",
            base(),
            |i| {
                assert_eq!(i.topics["orders"].id, id(T));
                assert_eq!(i.topic_name(&id(T)), Some("orders"));
                assert_eq!(p(i, 0), (1, 0, 0, vec![1, 2, 3], vec![1, 2, 3]));
                assert_eq!(i.metadata_version(), Some(19));
                assert!(i.untrusted.is_empty());
            },
        ),
        (
            "a v0 partition record has no directories: read as MIGRATING",
            base(),
            |i| {
                let part = &i.topics["orders"].partitions[&0];
                assert_eq!(part.directory_of(2), Some(DIRECTORY_MIGRATING));
                assert_eq!(part.directory_of(9), None);
            },
        ),
        (
            "a v1 partition record carries one directory per replica",
            vec![
                topic("orders", id(T)),
                partition(1, id(T), 0, &[1, 2], &[1, 2], 2, 4, 7, &[id(50), id(51)]),
            ],
            |i| {
                let part = &i.topics["orders"].partitions[&0];
                assert_eq!(part.directory_of(2), Some(id(51)));
                assert_eq!(
                    (part.leader, part.leader_epoch, part.partition_epoch),
                    (2, 4, 7)
                );
            },
        ),
        (
            "a partition record for an existing topic adds a partition",
            with(&[partition(0, id(T), 1, &[2, 3], &[2, 3], 2, 0, 0, &[])]),
            |i| {
                assert_eq!(i.topics["orders"].partitions.len(), 2);
                assert_eq!(p(i, 1).0, 2);
            },
        ),
        (
            "a leader change bumps both epochs and keeps the ISR",
            with(&[change(0, id(T), 0, &[("Leader", V::Int(2))])]),
            |i| assert_eq!(p(i, 0), (2, 1, 1, vec![1, 2, 3], vec![1, 2, 3])),
        ),
        (
            "a leader 're-sent' unchanged still bumps the leader epoch",
            with(&[change(
                0,
                id(T),
                0,
                &[("Leader", V::Int(1)), ("Isr", ints(&[1, 2]))],
            )]),
            |i| assert_eq!(p(i, 0), (1, 1, 1, vec![1, 2, 3], vec![1, 2])),
        ),
        (
            "Leader=-1 twice: no leader, epoch 2, ISR still [1] (observed on 3.4)",
            with(&[
                change(0, id(T), 0, &[("Isr", ints(&[1]))]),
                change(0, id(T), 0, &[("Leader", V::Int(-1))]),
                change(0, id(T), 0, &[("Leader", V::Int(-1))]),
            ]),
            |i| assert_eq!(p(i, 0), (-1, 2, 3, vec![1, 2, 3], vec![1])),
        ),
        (
            "the last leader survives a move to no leader, with its epoch",
            with(&[
                change(0, id(T), 0, &[("Leader", V::Int(2))]),
                change(0, id(T), 0, &[("Leader", V::Int(-1))]),
                change(0, id(T), 0, &[("Isr", ints(&[2]))]),
            ]),
            |i| {
                let part = &i.topics["orders"].partitions[&0];
                assert_eq!((part.leader, part.leader_epoch), (-1, 2));
                assert_eq!((part.last_leader.id, part.last_leader.leader_epoch), (2, 1));
            },
        ),
        (
            "an ISR-only change keeps the leader epoch, bumps the partition epoch",
            with(&[change(0, id(T), 0, &[("Isr", ints(&[1, 3]))])]),
            |i| assert_eq!(p(i, 0), (1, 0, 1, vec![1, 2, 3], vec![1, 3])),
        ),
        (
            "a reassignment changes replicas, adding/removing and (v1) directories",
            with(&[change(
                1,
                id(T),
                0,
                &[
                    ("Replicas", ints(&[1, 2, 3, 4])),
                    ("AddingReplicas", ints(&[4])),
                    (
                        "Directories",
                        V::Uuids(Some(vec![id(60), id(61), id(62), id(63)])),
                    ),
                ],
            )]),
            |i| {
                let part = &i.topics["orders"].partitions[&0];
                assert_eq!(part.replicas, vec![1, 2, 3, 4]);
                assert_eq!(part.adding_replicas, vec![4]);
                assert!(part.removing_replicas.is_empty());
                assert_eq!(part.directory_of(4), Some(id(63)));
                assert_eq!(
                    (part.leader, part.leader_epoch, part.partition_epoch),
                    (1, 0, 1)
                );
            },
        ),
        (
            "leader recovery state -1 is unchanged, 1 marks recovering",
            with(&[
                change(
                    0,
                    id(T),
                    0,
                    &[("LeaderRecoveryState", V::Int(1)), ("Leader", V::Int(3))],
                ),
                change(0, id(T), 0, &[("Isr", ints(&[3]))]),
            ]),
            |i| {
                let part = &i.topics["orders"].partitions[&0];
                assert_eq!(part.leader_recovery_state, 1);
                assert_eq!(
                    (part.leader, part.leader_epoch, part.partition_epoch),
                    (3, 1, 2)
                );
            },
        ),
        (
            "a change to an unknown partition marks that partition untrusted",
            with(&[change(0, id(T), 7, &[("Leader", V::Int(2))])]),
            |i| {
                assert_eq!(
                    i.untrusted[0].scope,
                    Scope::Partition {
                        topic_id: id(T),
                        partition: 7
                    }
                );
                assert!(i.partition_untrusted("orders", 0).is_none());
            },
        ),
        (
            "topic configs are set and a null value deletes the key",
            with(&[
                config(2, "orders", "retention.ms", Some("60000")),
                config(2, "orders", "cleanup.policy", Some("compact")),
                config(2, "orders", "retention.ms", None),
            ]),
            |i| {
                let c = &i.topic_configs["orders"];
                assert_eq!(c.get("cleanup.policy").map(String::as_str), Some("compact"));
                assert!(!c.contains_key("retention.ms"));
            },
        ),
        (
            "deleting a resource's last key removes the resource",
            with(&[
                config(2, "orders", "retention.ms", Some("1")),
                config(2, "orders", "retention.ms", None),
                config(4, "2", "log.retention.ms", Some("5")),
                config(4, "2", "log.retention.ms", None),
            ]),
            |i| {
                assert!(!i.topic_configs.contains_key("orders"));
                assert!(i.broker_configs.is_empty());
            },
        ),
        (
            "broker configs: \"\" is the cluster default, an id is one broker's",
            with(&[
                config(4, "", "log.retention.ms", Some("86400000")),
                config(4, "1", "message.max.bytes", Some("2000000")),
                config(16, "metrics", "interval.ms", Some("1")),
            ]),
            |i| {
                assert_eq!(i.cluster_configs["log.retention.ms"], "86400000");
                assert_eq!(i.broker_configs["1"]["message.max.bytes"], "2000000");
                assert!(
                    i.topic_configs.is_empty(),
                    "client metrics are not topic configs"
                );
            },
        ),
        (
            "RemoveTopicRecord drops the topic, its partitions and configs",
            with(&[
                config(2, "orders", "retention.ms", Some("1")),
                remove_topic(id(T)),
            ]),
            |i| {
                assert!(i.topics.is_empty());
                assert!(i.topic_configs.is_empty());
                assert_eq!(i.topic_name(&id(T)), None);
                assert_eq!(i.deleted_topics.len(), 1);
                assert_eq!(i.deleted_topics[0].name, "orders");
                assert_eq!(i.deleted_topics[0].id, id(T));
                assert_eq!(i.deleted_topics[0].offset, 4);
            },
        ),
        (
            "a topic re-created under the same name has a new id and fresh configs",
            with(&[
                config(2, "orders", "retention.ms", Some("1")),
                remove_topic(id(T)),
                topic("orders", id(9)),
                partition(0, id(9), 0, &[3], &[3], 3, 0, 0, &[]),
            ]),
            |i| {
                assert_eq!(i.topics["orders"].id, id(9));
                assert_eq!(p(i, 0).0, 3);
                assert!(!i.topic_configs.contains_key("orders"));
                assert_eq!(i.topic_name(&id(T)), None);
            },
        ),
        (
            "feature levels: metadata.version set, another feature removed at 0",
            vec![
                feature("metadata.version", 8),
                feature("kraft.version", 1),
                feature("metadata.version", 21),
                feature("kraft.version", 0),
            ],
            |i| {
                assert_eq!(i.metadata_version(), Some(21));
                assert!(!i.features.contains_key("kraft.version"));
            },
        ),
        (
            "a committed metadata transaction applies its records at End",
            vec![
                begin(Some("bootstrap")),
                topic("orders", id(T)),
                config(2, "orders", "retention.ms", Some("5")),
                end(),
            ],
            |i| {
                assert!(i.topics.contains_key("orders"));
                assert_eq!(i.topic_configs["orders"]["retention.ms"], "5");
                assert!(i.open_transaction.is_none());
            },
        ),
        (
            "an aborted metadata transaction applies nothing",
            with(&[
                begin(None),
                remove_topic(id(T)),
                topic("other", id(2)),
                abort(Some("controller failover")),
            ]),
            |i| {
                assert!(i.topics.contains_key("orders"));
                assert!(!i.topics.contains_key("other"));
                assert!(i.deleted_topics.is_empty());
                assert!(i.untrusted.is_empty());
            },
        ),
        (
            "an open transaction is not applied yet",
            with(&[begin(None), remove_topic(id(T))]),
            |i| {
                assert!(i.topics.contains_key("orders"));
                let open = i.open_transaction.as_ref().expect("open");
                assert_eq!(open.begin_offset, 3);
                assert_eq!(open.records.len(), 1);
                assert_eq!(i.applied.map(|p| p.offset), Some(4));
            },
        ),
        (
            "a transaction out of order distrusts everything; a stray Abort does nothing",
            with(&[
                abort(None),
                begin(None),
                topic("a", id(2)),
                begin(None),
                end(),
                end(),
            ]),
            |i| {
                assert_eq!(i.untrusted.len(), 1, "{:?}", i.untrusted);
                assert_eq!(i.untrusted[0].scope, Scope::All);
                assert_eq!((i.untrusted[0].offset, i.untrusted[0].records), (6, 2));
                assert!(
                    !i.topics.contains_key("a"),
                    "the first transaction was dropped"
                );
            },
        ),
        (
            "a TopicRecord reusing a live name under a new id marks the name untrusted",
            with(&[topic("orders", id(9))]),
            |i| {
                assert_eq!(i.topics["orders"].id, id(9));
                assert_eq!(i.topic_name(&id(T)), None);
                assert!(i.partition_untrusted("orders", 0).is_some());
                assert!(i.configs_untrusted("orders").is_some());
            },
        ),
        (
            "broker registration and fencing",
            vec![
                register_broker(3, 1, 100, true, &[id(70)]),
                register_broker(0, 2, 101, false, &[]),
                // RegisterBroker v2 (IsMigratingZkBroker), as 3.4 writes it.
                register_broker(2, 3, 102, true, &[]),
                broker_change(0, 1, 100, -1, 0),
                broker_change(1, 2, 101, 1, 1),
            ],
            |i| {
                let b1 = &i.brokers[&1];
                assert!(!b1.fenced);
                assert_eq!(b1.log_dirs, vec![id(70)]);
                assert_eq!(b1.rack.as_deref(), Some("rack-a"));
                let b2 = &i.brokers[&2];
                assert!(b2.fenced && b2.in_controlled_shutdown);
                assert_eq!(i.brokers[&3].epoch, 102);
            },
        ),
        (
            "NoOp, ignored and unknown records change nothing but are counted",
            with(&[
                noop(),
                record(15, PRODUCER_IDS_RECORD, 0, &[]),
                frame(99, 0, &[1, 2, 3]),
            ]),
            |i| {
                assert_eq!(p(i, 0), (1, 0, 0, vec![1, 2, 3], vec![1, 2, 3]));
                assert_eq!(i.unknown_records.get(&99), Some(&1));
                assert!(!i.unknown_records.contains_key(&15));
                assert!(i.untrusted.is_empty());
                assert_eq!(i.applied.map(|p| p.offset), Some(5));
            },
        ),
    ];
    for (name, values, check) in rows {
        let image = replay(&values);
        let result = std::panic::catch_unwind(|| check(&image));
        assert!(result.is_ok(), "row failed: {name}\nimage: {image:#?}");
    }
}

#[test]
fn unknown_tagged_fields_are_skipped_by_size() {
    // A newer writer's tags 9 and 30 on a PartitionChangeRecord and tag 5 on
    // a PartitionRecord and a TopicRecord.
    let extra = vec![(9, vec![0xde, 0xad]), (30, vec![0; 40])];
    let mut values = vec![
        frame(
            2,
            0,
            &encode_struct(
                TOPIC_RECORD,
                0,
                &[("Name", s("orders")), ("TopicId", V::Uuid(id(T)))],
                &[(5, vec![1])],
            ),
        ),
        frame(
            3,
            1,
            &encode_struct(
                PARTITION_RECORD,
                1,
                &[
                    ("PartitionId", V::Int(0)),
                    ("TopicId", V::Uuid(id(T))),
                    ("Replicas", ints(&[1])),
                    ("Isr", ints(&[1])),
                    ("Leader", V::Int(1)),
                    ("LeaderEpoch", V::Int(0)),
                    ("PartitionEpoch", V::Int(0)),
                    ("Directories", V::Uuids(Some(vec![id(3)]))),
                ],
                &[(5, vec![7, 7, 7])],
            ),
        ),
    ];
    values.push(frame(
        5,
        0,
        &encode_struct(
            PARTITION_CHANGE_RECORD,
            0,
            &[
                ("PartitionId", V::Int(0)),
                ("TopicId", V::Uuid(id(T))),
                ("Leader", V::Int(-1)),
            ],
            &extra,
        ),
    ));
    let image = replay(&values);
    assert!(image.untrusted.is_empty(), "{:?}", image.untrusted);
    let part = &image.topics["orders"].partitions[&0];
    assert_eq!(
        (part.leader, part.leader_epoch, part.partition_epoch),
        (-1, 1, 1)
    );
}

#[test]
fn elr_fields_of_v2_records_are_read_past() {
    let v2 = record(
        3,
        PARTITION_RECORD,
        2,
        &[
            ("PartitionId", V::Int(0)),
            ("TopicId", V::Uuid(id(T))),
            ("Replicas", ints(&[1, 2])),
            ("Isr", ints(&[1])),
            ("Leader", V::Int(1)),
            ("LeaderEpoch", V::Int(3)),
            ("PartitionEpoch", V::Int(4)),
            ("Directories", V::Uuids(Some(vec![id(3), id(4)]))),
            ("EligibleLeaderReplicas", ints(&[2])),
            ("LastKnownElr", ints(&[])),
        ],
    );
    let c2 = change(
        2,
        id(T),
        0,
        &[("EligibleLeaderReplicas", ints(&[])), ("Leader", V::Int(2))],
    );
    let image = replay(&[topic("orders", id(T)), v2, c2]);
    assert!(image.untrusted.is_empty(), "{:?}", image.untrusted);
    assert_eq!(p(&image, 0), (2, 4, 5, vec![1, 2], vec![1]));
}

#[test]
fn an_unknown_version_of_a_partition_record_marks_only_that_partition_untrusted() {
    let mut values = base();
    values.push(partition(0, id(T), 1, &[2], &[2], 2, 0, 0, &[]));
    // PartitionRecord v3: a newer Kafka may have added a regular field.
    let mut body = encode_struct(
        PARTITION_RECORD,
        2,
        &[("PartitionId", V::Int(1)), ("TopicId", V::Uuid(id(T)))],
        &[],
    );
    body.extend_from_slice(&[0, 0, 0, 9]);
    values.push(frame(3, 3, &body));
    // And a PartitionChangeRecord v3 for partition 0 of another topic.
    values.push(frame(5, 3, &[0, 0, 0, 0]));
    let image = replay(&values);
    let flagged = image
        .partition_untrusted("orders", 1)
        .expect("partition 1 untrusted");
    assert!(flagged.reason.contains("version 3"), "{}", flagged.reason);
    assert_eq!(flagged.offset, 4);
    // The change record's scope could not be read (4 bytes): everything.
    assert_eq!(image.untrusted.len(), 2);
    assert_eq!(image.untrusted[1].scope, Scope::All);
    // Without the second record only partition 1 is untrusted.
    let image = replay(&values[..5]);
    assert!(image.partition_untrusted("orders", 1).is_some());
    assert!(image.partition_untrusted("orders", 0).is_none());
    assert!(image.configs_untrusted("orders").is_none());
}

#[test]
fn unknown_versions_of_other_records_name_their_scope() {
    let rows: Vec<(Vec<u8>, Scope)> = vec![
        (
            frame(
                2,
                1,
                &encode_struct(
                    TOPIC_RECORD,
                    0,
                    &[("Name", s("t")), ("TopicId", V::Uuid(id(2)))],
                    &[],
                ),
            ),
            Scope::TopicName { name: "t".into() },
        ),
        (
            frame(9, 1, id(2).as_bytes()),
            Scope::TopicId { topic_id: id(2) },
        ),
        (
            frame(4, 1, &[2, 2, b't', 0]),
            Scope::Config {
                resource_type: 2,
                resource_name: "t".into(),
            },
        ),
        (frame(12, 1, &[]), Scope::All),
        (frame(17, 3, &[0, 0, 0, 5]), Scope::Broker { broker_id: 5 }),
    ];
    for (value, scope) in rows {
        match decode_value(&value).expect("decode") {
            Decoded::UnsupportedVersion { scope: got, .. } => assert_eq!(got, scope),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn frame_errors_and_trailing_bytes_are_refused() {
    let mut trailing = topic("orders", id(T));
    trailing.push(0);
    let frame0 = {
        let mut v = topic("orders", id(T));
        v[0] = 0;
        v
    };
    for bad in [trailing, frame0, vec![], vec![1], vec![1, 2], vec![0x80]] {
        assert!(decode_value(&bad).is_err(), "{bad:?}");
    }
}

#[test]
fn untrusted_entries_are_one_per_scope_however_many_records() {
    let mut values = base();
    let mut body = 0i32.to_be_bytes().to_vec();
    body.extend_from_slice(id(T).as_bytes());
    for _ in 0..1000 {
        values.push(frame(5, 7, &body));
    }
    let image = replay(&values);
    assert_eq!(image.untrusted.len(), 1);
    let u = &image.untrusted[0];
    assert_eq!((u.records, u.offset, u.last_offset), (1000, 3, 1002));
    assert!(image.partition_untrusted("orders", 0).is_some());
}
