//! The applier: applies what a shipper put in the bucket to a local
//! Kafka-format log, with the same offsets and bytes, and drives each mirror
//! partition through its states (see `spec/mirroring.md`).
//!
//! - [`mirror`]: one partition's work in each state (preparation,
//!   fetching and appending, failover).
//! - [`engine`]: the loop over all partitions: the change feed, discovery,
//!   the state machine driver, retries, operator commands.
//! - [`commands`]: how `applier start|pause|resume|stop` reach a running
//!   daemon, or act alone when none runs.
//! - [`status`]: what `applier status` reports.
//! - [`reserve`]: the disk reserve that keeps room to record a full disk's
//!   failures.

pub mod commands;
pub mod config;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod mirror;
pub mod reserve;
pub mod status;

pub use engine::{Applier, ApplierOptions};
pub use error::MirrorError;
