//! segmirror's files in a Kafka partition dir, read and written.
//!
//! `manifest` defines what these files hold and decides with them (pure);
//! this crate does their file IO, for the applier (which writes them), the
//! shipper (which reads the mirror record to publish the mirror origin)
//! and the gateway (which ends a partition's log at an applying marker):
//!
//! - [`record`]: the mirror record (`segmirror-mirror.json`), written
//!   atomically and durably; a damaged file is an error naming it, never
//!   an absent record.
//! - [`applying`]: the marker of a range being streamed
//!   (`segmirror-applying.json`), durable before the range's first batch.
//!
//! Kafka ignores files of other names in a partition dir.

pub mod applying;
pub mod record;
