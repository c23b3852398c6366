//! Reading a Kafka broker's KRaft metadata log from disk, with no network
//! and no credentials: what topics exist (with ids), who leads each
//! partition at which leader epoch, the replicas and ISR and their
//! directories, the topic configs with the broker and cluster defaults,
//! which topics were deleted, and the metadata version.
//!
//! - [`meta_properties`]: the log dir's identity (node id, cluster id,
//!   directory id).
//! - [`properties`]: Java properties files (`server.properties`), as
//!   `java.util.Properties.load` reads them.
//! - [`codec`]: Kafka's flexible message encoding, bounded and panic-free.
//! - [`records`]: the metadata records that matter and the KRaft control
//!   records.
//! - [`image`]: the reconstructed state and the pure apply rules (partition
//!   merges, configs, removals, metadata transactions).
//! - [`reader`]: files: the latest snapshot, then the log, re-read
//!   incrementally, rebuilt when the tail was truncated.
//! - [`command`]: the `metadata` operator command's report.
//!
//! Invariants across the crate: hostile bytes give errors, never panics,
//! and never allocate more than the bytes present justify; what cannot be
//! read faithfully is reported as untrusted with its scope, never guessed;
//! the image can go back (a truncated tail rebuilds it from the snapshot),
//! so what is decided from it must be safe to undo.
//!
//! Non-goals: writing metadata, the network protocol, quotas, ACLs, SCRAM,
//! delegation tokens, producer ids and the controller quorum's membership.
//!
//! Facts and sources: `../shared/notes/kraft-metadata.md` and Kafka's
//! `metadata/src/main/resources/common/metadata/*.json`.

pub mod codec;
pub mod command;
pub mod error;
pub mod image;
pub mod meta_properties;
pub mod properties;
pub mod reader;
pub mod records;

pub use error::{Error, Result};
pub use image::MetadataImage;
pub use reader::MetadataLogReader;
