//! Kafka-format partition logs.
//!
//! This crate reads and writes partition logs exactly as a Kafka broker lays
//! them out on disk, so that the shipper can read a real broker's log dirs as
//! they are and the applier can write a destination log that a broker could
//! be started on:
//!
//! - [`batch`]: record batch v2 headers and CRC-32C, without IO.
//! - [`records`], [`compression`], [`builder`]: the records inside a batch,
//!   the five codecs, and building new batches.
//! - [`topic`]: topic-partition names and topic ids, validated as Kafka does.
//! - [`checkpoint`]: `leader-epoch-checkpoint`, `partition.metadata` and the
//!   log-dir-root offset checkpoints, in Kafka's text formats.
//! - [`index`]: `.index`, `.timeindex` and `.txnindex` files.
//! - [`fsutil`]: atomic, durable file replacement.
//! - [`snapshot`]: producer state snapshots (`.snapshot`), read if present.
//! - [`segment`]: segment file names and streaming scans.
//! - [`epoch`]: the leader epoch lineage (Kafka's `LeaderEpochFileCache`),
//!   one type for the log's cache and a manifest's lineage.
//! - [`log`]: a partition log open for writing: recovery, leader and
//!   replicated appends, reads, truncation, retention, rolling.
//! - [`retention`]: which old segments Kafka's retention (time, size)
//!   deletes, as a pure decision.
//! - [`logdir`]: the log dir root, its lock and root checkpoints (the
//!   state it shares with its open logs is the private `root_checkpoints`,
//!   which both [`log`] and [`logdir`] use).
//! - [`guard`]: the persisted write guard that makes a partition read-only.
//! - [`offsets_topic`]: records of `__consumer_offsets` (committed offsets,
//!   group metadata); [`transaction_topic`]: records of
//!   `__transaction_state` (each transactional id's state and partitions);
//!   both read through the private `coordinator_wire`.
//! - [`reader`], [`verify`], [`compare`]: read-only access and checks.
//! - [`units`]: sizes with units (`8MiB`), as every binary takes them.
//!
//! Non-goals: the old message formats (magic 0 and 1) are refused, not read.

pub mod batch;
pub mod builder;
pub mod checkpoint;
pub mod compare;
pub mod compression;
mod coordinator_wire;
pub mod epoch;
pub mod error;
pub mod fsutil;
pub mod guard;
pub mod index;
pub mod journal;
pub mod log;
pub mod logdir;
pub mod offsets_topic;
pub mod reader;
pub mod records;
pub mod retention;
mod root_checkpoints;
pub mod segment;
pub mod snapshot;
pub mod topic;
pub mod transaction_topic;
pub mod units;
pub mod verify;

pub use error::{Error, Result};
pub use log::{AppendInfo, FlushPolicy, LogConfig, OpenTransaction, PartitionLog, RecoveryReport};
pub use logdir::LogDir;
pub use topic::{TopicId, TopicPartition};
