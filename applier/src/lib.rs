//! The applier: applies what a shipper put in the bucket to a local
//! Kafka-format log, with the same offsets and bytes, and drives each mirror
//! partition through its states (see `docs/mirroring.md`).
//!
//! - [`mirror`]: one partition's work in each state (preparation,
//!   fetching and appending, failover).
//! - [`engine`]: the one file that owns `impl Applier`: the cycle and
//!   operator commands, wiring the executors below together.
//! - [`schedule`]: what each mirror partition does next, a pure function
//!   of a value snapshot (also `applier plan`'s).
//! - [`command_plan`]: operator commands planned in pure code (targets,
//!   `start`'s pin rules and cut guard).
//! - [`slot`]: what the applier holds for each partition (one slot each).
//! - `table`: every partition's slot and what its changes wake, the one
//!   path of state changes and failures the executors take.
//! - [`driver`]: the one place that performs the state machine's actions.
//! - `bucket_reader`, `group_commit`, `opening`, `live`: executors that
//!   do not import the engine (the bucket's feed and manifests; the
//!   deferred-sync phases; opening and adopting partitions; the live
//!   status and metrics).
//! - [`serving`]: the Kafka gateway's link (producers' appends, readers
//!   told), the plain logs written through `gateway::writer::PlainLogs`.
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
//! - [`lifecycle`]: a source topic deleted (its records kept here,
//!   read-only) or deleted and created again (FAILED until the operator
//!   removes the partition dir).

pub use manifest::applying;
mod bucket_reader;
mod clock;
pub mod command_plan;
pub mod commands;
pub mod config;
pub mod driver;
pub mod engine;
pub mod error;
pub mod feed;
pub mod gaps;
mod group_commit;
pub mod group_sync;
pub mod inventory;
pub mod lifecycle;
pub mod listener;
mod live;
pub mod metrics;
pub mod mirror;
mod opening;
mod options;
pub mod plan;
pub mod repair;
pub mod reserve;
pub mod schedule;
pub mod scrub;
pub mod serving;
pub mod slot;
pub mod state_dir;
pub mod status;
mod table;
pub mod topic_configs;
pub mod verify;

pub use engine::{Applier, ApplierOptions};
pub use error::MirrorError;
