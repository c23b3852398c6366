//! What the shipper and the applier agree on.
//!
//! The shipper (beside the source log) and the applier (beside the mirror
//! log) never talk to each other: everything they must agree on is decided
//! here and, at run time, read from the bucket. The decisions that must be
//! right are pure, documented, exhaustively tested code with no IO and no
//! async (see `docs/mirroring.md` for the semantics):
//!
//! - [`lineage`]: the decisions taken from epoch lineages (the type,
//!   `kafkalog::epoch::EpochLineage`, is re-exported there): the follower
//!   divergence point, and the failback truncation point for a last
//!   mirrored epoch.
//! - [`state`]: the mirror partition state machine as one pure function,
//!   `next(state, event) -> (state, actions)`; a driver in the applier
//!   performs the actions.
//! - [`reconcile`]: the applier's plans (preparation, following a
//!   manifest, failover) as pure functions of the record, the manifest and
//!   the local log; the applier executes them, `applier plan` prints them.
//! - [`cut`]: which records of a partition's own a preparation would cut
//!   (failback, resuming after a stop, adopting a plain partition), and
//!   the guard that refuses it without `--allow-truncate`.
//! - [`layout`]: every object key (the only place that formats or parses
//!   keys).
//! - [`partition`]: the epoch manifest of a partition: schema, codec,
//!   invariants, paging of old ranges.
//! - [`mirror_record`]: the applier's durable per-partition record, which a
//!   shipper on the same log dir reads to publish the mirror origin (its
//!   bytes; `partdir::record` reads and writes the file).
//! - [`applying`]: the marker of a range being streamed into a log, and
//!   where to cut a log a marker was left in (`partdir::applying` keeps
//!   the file).
//! - [`gaps`]: data the mirror never received (retention or an unclean
//!   truncation passed the shipped end): the pure decision of which offsets
//!   are lost, recorded in the manifest.
//! - [`feed`]: the change feed (head objects) an applier polls cheaply.
//! - [`compact`]: which packed ranges are rewritten into objects of their
//!   own behind the tail, and the manifest after the rewrite.
//! - [`delta`]: what a commit appended to a manifest, carried by a head
//!   instead of a whole version, and applied back exactly.
//! - [`pack`]: one object holding many partitions' new ranges (a shipper
//!   cycle's), its index and the ranged reads a subset needs.
//! - [`groups`]: consumer-group offsets shipped from the source's
//!   `__consumer_offsets`, and the decision of what the applier syncs.
//! - [`topic_config`]: a source topic's configs as a mirror takes them
//!   (effective values by layer, the copy filter with its reasons, what a
//!   stopped mirror enforces).
//! - [`codec`]: the CRC-32C envelope every manifest, page and head carries,
//!   so that damage in the bucket is a format error, never a wrong value;
//!   its schema versions and format errors. It depends on no other module.
//! - [`clock`]: wall-clock time, injectable so that tests move it (retry
//!   backoffs, grace periods) without sleeping.
//! - [`topic_pattern`]: the `topics`/`exclude` regexes both services and
//!   `backfill` take, matched against whole topic names, and the
//!   [`topic_pattern::Selection`] of a change-feed head they pick.
//! - [`name_regex`]: a regex anchored to a whole name, for topic patterns
//!   and config key filters alike (it depends on no other module).
//! - [`range_check`]: a data object's bytes against its manifest range
//!   (size, CRC-32C, batch offsets and epochs), as every reader of the
//!   bucket checks them; a mismatch is a [`range_check::ObjectCorrupt`].
//! - [`inventory`]: what the bucket holds (clusters, topics, those
//!   selected), the line a command that found nothing to do prints;
//!   `bucket::store::take_inventory` reads it.
//!
//! Invariant: this crate does no IO. It has no `object_store`, `tokio` or
//! `futures` in its dependency tree (`cargo tree -p manifest -e normal`),
//! opens no file and reads no environment; only [`clock::SystemClock`]
//! reads the real time, and decisions take time as a value. Reading and
//! committing through a store, bucket URLs, fresh upload ids, request
//! counting and the diagnosis of bucket errors live in the `bucket` crate,
//! the files in a partition dir in the `partdir` crate; both depend on this
//! one, never the reverse.

pub mod applying;
pub mod clock;
pub mod codec;
pub mod compact;
pub mod cut;
pub mod delta;
pub mod feed;
pub mod gaps;
pub mod groups;
pub mod inventory;
pub mod layout;
pub mod lineage;
pub mod mirror_record;
pub mod name_regex;
pub mod pack;
pub mod pack_gc;
pub mod partition;
pub mod range_check;
pub mod reconcile;
pub mod record_journal;
pub mod state;
pub mod topic_config;
pub mod topic_pattern;
