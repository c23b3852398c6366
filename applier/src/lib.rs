//! The applier: applies what a shipper put in the bucket to a local
//! Kafka-format log, with the same offsets and bytes, and drives each mirror
//! partition through its states (see `docs/mirroring.md`).
//!
//! - [`mirror`]: one partition's work in each state (preparation,
//!   fetching and appending, failover).
//! - [`engine`]: the loop over all partitions: discovery, each state's
//!   work, retries, operator commands.
//! - [`slot`]: what the applier holds for each partition (one slot each).
//! - [`driver`]: the one place that performs the state machine's actions.
//! - [`feed`]: reading the change feed (the topic selection is
//!   `manifest::topic_pattern::Selection`).
//! - [`group_sync`]: the source's consumer-group offsets, applied to this
//!   log dir's `__consumer_offsets`.
//! - [`plan`]: `applier plan`, what `start`/`once` would do, changing nothing.
//! - [`inventory`]: the verdict (exit code) of a run that found nothing to
//!   do, from what the bucket holds (`manifest::inventory`).
//! - [`commands`]: how `applier start|pause|resume|stop` reach a running
//!   daemon, or act alone when none runs.
//! - [`status`]: what `applier status` reports.
//! - [`state_dir`]: the applier's own files under `<log-dir>/.segmirror/`.
//! - [`gaps`]: offsets the mirror never received (from the manifest or
//!   seen here), and the operator's acknowledgement of each.
//! - [`reserve`]: the disk reserve that keeps room to record a full disk's
//!   failures.
//! - [`verify`]: `applier verify`'s checks of the local log and the bucket,
//!   and their durable record; [`scrub`]: the same within a byte budget per
//!   hour in `applier run`; [`repair`]: what `start` and `applier repair`
//!   do about damage found.
//! - [`listener`]: the Kafka listener's configured limits and metrics.
//! - [`topic_configs`]: the source's topic configs the mirror record keeps,
//!   and the retention a STOPPED mirror enforces of them.

pub use manifest::applying;
pub mod commands;
pub mod config;
pub mod driver;
pub mod engine;
pub mod error;
pub mod feed;
pub mod gaps;
pub mod group_sync;
pub mod inventory;
pub mod listener;
pub mod metrics;
pub mod mirror;
pub mod plan;
pub mod repair;
pub mod reserve;
pub mod scrub;
pub mod serving;
pub mod slot;
pub mod state_dir;
pub mod status;
pub mod topic_configs;
pub mod verify;

pub use engine::{Applier, ApplierOptions};
pub use error::MirrorError;
