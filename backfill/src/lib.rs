//! Batch jobs straight from the bucket, with no broker and no local log:
//! `backfill export` writes a source cluster's shipped records as Parquet
//! for analytics (DuckDB, Spark, Trino, pyarrow); `backfill restore`
//! builds a writable Kafka log dir of the topics as they were at a cut.
//!
//! - [`select`]: which partitions a run exports (`--partitions`,
//!   `--shard I/N` and its defaults from Kubernetes and AWS Batch).
//! - [`plan`]: which shipped ranges are read and which files are written,
//!   from one partition's manifest (pure).
//! - [`txn`]: read_committed, decided batch by batch (pure).
//! - [`schema`]: the Arrow schema and the record-to-row builder.
//! - [`layout`]: every output key.
//! - [`export`]: the run: read, decide, write, then the run manifest
//!   ([`run_manifest`]); [`progress`] shows it, [`error`] says what failed.
//! - [`restore`]: the point-in-time restore, planned from the manifests.
//!
//! Non-goals: writing back to Kafka, and table formats (Iceberg, Delta):
//! the plain Parquet layout with a per-run manifest is what a one-off
//! committer (pyiceberg `add_files`, Spark) adopts.

pub mod error;
pub mod export;
pub mod layout;
pub mod plan;
pub mod progress;
pub mod restore;
pub mod run_manifest;
pub mod schema;
pub mod select;
pub mod txn;
