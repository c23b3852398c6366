//! A multi-broker source on one machine: three brokers' log dirs holding
//! replicas of the same partitions, written as Kafka's replicas are (the
//! leader appends, followers copy its batches byte for byte, each broker
//! rolling segments at its own size), each broker with its own
//! `meta.properties` and KRaft metadata log (written by the kraft tests'
//! independent encoder, `kraft/tests/support`).
//!
//! Shared by the shipper's leadership tests and the end-to-end test in
//! `tests/tests/leadership.rs`; the including crate declares the encoder
//! as `mod kraft_support` at its root.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::checkpoint;
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};

use crate::kraft_support::{self as k, MetaLog, V};

/// The topic every broker holds.
pub const TOPIC: &str = "orders";
/// Its partitions.
pub const PARTITIONS: [i32; 2] = [0, 1];

/// The topic's id.
pub fn orders_id() -> TopicId {
    TopicId::from_bytes([0x5a; 16])
}

/// A partition of the topic.
pub fn orders(p: i32) -> TopicPartition {
    TopicPartition::new(TOPIC, p).expect("tp")
}

/// One broker: its node id, log dir, metadata log and segment size.
pub struct Broker {
    pub node: i32,
    pub root: PathBuf,
    pub meta: MetaLog,
    pub segment_bytes: u64,
}

/// Three brokers (nodes 1, 2, 3), replicas of both partitions on each.
pub struct Cluster {
    _dir: tempfile::TempDir,
    pub brokers: Vec<Broker>,
    /// Per partition: the leader and its leader epoch.
    pub leaders: BTreeMap<i32, (i32, i32)>,
    /// Per partition: the replicas that copy the leader's appends.
    pub isr: BTreeMap<i32, Vec<i32>>,
    /// Bytes produced, all partitions.
    pub produced: u64,
    /// Each broker's log end per partition.
    ends: BTreeMap<(i32, i32), i64>,
}

impl Cluster {
    /// orders-0 led by broker 1, orders-1 by broker 2, all in sync;
    /// replicas roll at 5, 7 and 11 KB.
    pub fn new() -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let brokers: Vec<Broker> = [(1, 5_000), (2, 7_000), (3, 11_000)]
            .into_iter()
            .map(|(node, segment_bytes)| {
                let root = dir.path().join(format!("broker-{node}"));
                std::fs::create_dir_all(&root).expect("mkdir");
                Broker {
                    node,
                    meta: MetaLog::create(&root, node),
                    root,
                    segment_bytes,
                }
            })
            .collect();
        let mut c = Cluster {
            _dir: dir,
            brokers,
            leaders: BTreeMap::from([(0, (1, 0)), (1, (2, 0))]),
            isr: PARTITIONS.iter().map(|&p| (p, vec![1, 2, 3])).collect(),
            produced: 0,
            ends: BTreeMap::new(),
        };
        let mut records = vec![k::topic(TOPIC, orders_id())];
        for p in PARTITIONS {
            let (leader, epoch) = c.leaders[&p];
            records.push(k::partition(
                0,
                orders_id(),
                p,
                &[1, 2, 3],
                &[1, 2, 3],
                leader,
                epoch,
                0,
                &[],
            ));
        }
        c.metadata(&records);
        c
    }

    /// Broker `node`.
    pub fn broker(&self, node: i32) -> &Broker {
        &self.brokers[(node - 1) as usize]
    }

    /// Appends metadata records to every broker's metadata log (the
    /// controller's log, replicated).
    pub fn metadata(&mut self, records: &[Vec<u8>]) {
        for b in &mut self.brokers {
            b.meta.append(1, records);
        }
    }

    /// The controller moves `p`'s leadership to `leader` (-1: none), with
    /// ISR `isr`: a PartitionChangeRecord, which bumps the leader epoch.
    pub fn elect(&mut self, p: i32, leader: i32, isr: &[i32]) {
        let rec = k::change(
            0,
            orders_id(),
            p,
            &[
                ("Leader", V::Int(leader.into())),
                ("Isr", V::I32s(Some(isr.to_vec()))),
            ],
        );
        self.metadata(&[rec]);
        let epoch = self.leaders[&p].1 + 1;
        self.leaders.insert(p, (leader, epoch));
        self.isr.insert(p, isr.to_vec());
    }

    /// The leader of `p` appends `batches` batches of 5 records; the other
    /// ISR members copy them unchanged. Every broker's HW checkpoint is its
    /// log end.
    pub fn produce(&mut self, p: i32, batches: usize) {
        let (leader, epoch) = self.leaders[&p];
        let t = orders(p);
        let config = |b: &Broker| LogConfig {
            segment_bytes: b.segment_bytes,
            ..LogConfig::default()
        };
        let mut copied: Vec<Vec<u8>> = Vec::new();
        {
            let b = self.broker(leader);
            let dir = LogDir::open(&b.root).expect("log dir");
            let mut log = dir
                .open_or_create_partition(&t, Some(orders_id()), config(b))
                .expect("open");
            for i in 0..batches {
                let recs: Vec<RecordInput> = (0..5)
                    .map(|r| RecordInput {
                        timestamp: 1_700_000_000_000 + (i * 5 + r) as i64,
                        key: Some(format!("k{r}").into_bytes()),
                        value: Some(vec![b'a' + (r % 26) as u8; 120]),
                        headers: vec![],
                    })
                    .collect();
                let mut batch = build_batch(&BatchSpec::new(0, -1), &recs).expect("batch");
                log.append_as_leader(&mut batch, epoch).expect("append");
                self.produced += batch.len() as u64;
                copied.push(batch);
            }
            self.ends.insert((leader, p), log.log_end_offset());
            log.close().expect("close");
        }
        for &node in &self.isr[&p] {
            if node == leader {
                continue;
            }
            let b = self.broker(node);
            let dir = LogDir::open(&b.root).expect("log dir");
            let mut log = dir
                .open_or_create_partition(&t, Some(orders_id()), config(b))
                .expect("open");
            for batch in &copied {
                log.append_replicated(batch).expect("replicate");
            }
            self.ends.insert((node, p), log.log_end_offset());
            log.close().expect("close");
        }
        for b in &self.brokers {
            let hw: BTreeMap<TopicPartition, i64> = PARTITIONS
                .iter()
                .filter_map(|&p| self.ends.get(&(b.node, p)).map(|e| (orders(p), *e)))
                .collect();
            checkpoint::write_offset_checkpoint(
                &b.root.join(checkpoint::REPLICATION_OFFSET_CHECKPOINT),
                &hw,
                false,
            )
            .expect("hw checkpoint");
        }
    }
}
