//! The shipper: tails a source broker's Kafka log dirs and ships their
//! committed batches, byte for byte, to a bucket, with one epoch manifest
//! per partition (see `docs/mirroring.md`, "Data path", and the `manifest`
//! crate for the formats). It is the only writer of a source cluster's
//! objects.
//!
//! # The cycle
//!
//! Every tail interval (at once while a backlog remains), [`Shipper::run_cycle`]:
//! 1. lists the log dirs (`--log-dir`, Kafka's `log.dirs`) and reads, for
//!    every selected partition, its segment list, `partition.metadata`,
//!    `leader-epoch-checkpoint`, the applier's mirror record, and the root
//!    `replication-offset-checkpoint` and `log-start-offset-checkpoint`:
//!    local files only;
//! 2. for each partition with something new, plans ranges (below), uploads
//!    them (`upload_concurrency` at once, streamed, bounded memory),
//!    writes the pages that `push_range` seals, then commits **one** new
//!    manifest version (create-if-absent);
//! 3. publishes **one** head of the change feed
//!    ([`bucket::store::ManifestStore::publish_head`]) with the entry of
//!    every partition committed in the cycle, and of any version it holds
//!    that the feed does not name yet (one adopted after a lost answer, or
//!    committed just before a crash: appliers learn versions only from the
//!    feed).
//!
//! An idle cycle (nothing new anywhere) makes **no request** to the bucket,
//! whatever the number of partitions (except, for a partition whose gap is
//! not acknowledged, one GET a minute looking for `shipper gaps ack`'s
//! version: `gaps::follow_acknowledgements`); a cycle with changes makes, per
//! changed partition, one PUT per object (or a multipart upload for objects
//! larger than the part size) and one PUT for the manifest; plus, for the
//! head, two GETs (a probe for a newer head, answered 404, and the newest
//! head, to merge into), one PUT, and one DELETE of the head that falls out
//! of the kept window. Other reads happen only at start (the newest head,
//! then per partition two GETs, or a LIST without a head entry) and in
//! sweeps.
//!
//! # What is shipped
//!
//! - A **range** is consecutive whole batches of one source segment, every
//!   batch's CRC checked, its object the batches' bytes unchanged. Its
//!   [`manifest::partition::ShippedRange`] records base and last offset,
//!   size, batch count, CRC-32C of the object, max timestamp, the epochs in
//!   it (each with the base offset of its first batch in the range), the
//!   segment's base offset, `completes_segment` (the range ends exactly at
//!   the end of a segment that has rolled) and `segment_generation`.
//! - Only committed batches are shipped: those whose last offset is below
//!   the partition's entry in the log dir's `replication-offset-checkpoint`
//!   (no entry: 0, nothing is shipped). Without that file (a log written by
//!   `kafkalog`), or with `ship_beyond_hw = true`, the limit is the log end.
//!   A batch cut short at the end of the active segment is a write in
//!   progress and waits; a bad batch there is looked at again next cycle
//!   before it counts as corruption; zeros after the last batch (a broker
//!   with `file.preallocate=true`) are the end of the log.
//! - Rolled segments and the tail of the active segment are both shipped:
//!   each cycle ships what is new since the previous one, one range per
//!   segment touched, split on batch boundaries at `max_object_size`; at
//!   most `max_cycle_bytes` per partition per cycle. In steady state no byte
//!   is uploaded twice: the position after the last shipped batch (segment,
//!   byte position, offset) is kept in memory with the latest manifest, and
//!   after a restart found again from the latest manifest's shipped end
//!   (an `.index` lookup and a scan).
//!
//! The manifest's lineage is the source's leader epoch checkpoint up to the
//! shipped end, completed (assign-if-newer) by the epochs seen in the
//! shipped batches, so that it matches the source even when the source's
//! checkpoint file lags behind its batches. `log_start_offset` is the
//! source's (its `log-start-offset-checkpoint` entry, or its first
//! segment's base offset when higher), `source_high_watermark` the HW the
//! version was cut at. A new partition's first version (1) is committed
//! even when nothing can be shipped yet, so appliers learn it exists.
//!
//! - **Consumer-group offsets** are not shipped as a partition: the
//!   source's `__consumer_offsets` partitions are read (committed batches
//!   below the HW, read_committed) and the selected groups' offsets on
//!   shipped topics published as `manifest::groups` versions, named by the
//!   cycle's head (`groups`). An unchanged state costs no request.
//!
//! # Following the source
//!
//! - **Retention.** When the source's log start passes ranges, the next
//!   version drops the ranges (and sealed pages) wholly below it and records
//!   the new log start. If it passed the shipped end (the shipper was down
//!   too long), the shipped end jumps to it: the offsets in between are lost
//!   to the mirror, which the applier handles by restarting at the log
//!   start. That version records the **gap** (`gaps`, `manifest::gaps`):
//!   logged once at ERROR, shown by `status` and the metrics, and `once`
//!   exits 1 until `shipper gaps ack` acknowledges it. On a topic listed in
//!   `tiered_topics`, offsets still in the source's remote storage are
//!   recorded as such, not as lost.
//! - **Compaction.** A rolled segment that the cursor has passed is
//!   remembered by its fingerprint (device, inode, size, mtime: Kafka's
//!   cleaner writes a new file and renames it over the old one). When the
//!   fingerprint changes, the segment is compared with its ranges in the
//!   manifest: a different size, a different first batch, or (same size)
//!   a range whose bytes no longer have its CRC-32C means the segment was
//!   replaced: it is shipped again whole (one or more ranges, one
//!   generation up) and its ranges are replaced in place in the next
//!   version, keeping the order. After a restart, every rolled segment is compared once by
//!   size and first batch only. Only inline ranges are replaced: a segment
//!   whose ranges are sealed in a page (older than the newest ~512 ranges)
//!   keeps its uncompacted version on the destination, a superset of the
//!   compacted records (a warning says so). Segments merged by the cleaner
//!   replace the ranges of every segment they absorbed.
//! - **Source truncation** (unclean leader election). The shipper notices
//!   when the source's leader epoch lineage diverges from the manifest's
//!   ([`manifest::lineage::divergence_point`]), when the log no longer
//!   reaches the shipped end, when the last shipped batch changed in place,
//!   or when the batch after the shipped end starts below it. It then checks
//!   the ranges newest first against the source (the log goes on past the
//!   range, no batch spans its edges, every batch has the epoch the range
//!   recorded) and commits a version cut back to the start of the first
//!   range that is no longer held (lineage truncated there); the next cycle
//!   ships the source's new history from there. A lineage that differs only
//!   because the source's checkpoint lags is recognised and not cut.
//! - **Mirror origin.** A partition whose dir holds the applier's mirror
//!   record publishes its origin (source cluster, state, LME) in the
//!   manifest, and a new version whenever it changes.
//! - **Identity.** The topic id comes from `partition.metadata`. A partition
//!   without one is **not shipped** (object keys need the id): a warning is
//!   logged once, and it is shipped as soon as the file appears. A new topic
//!   id for the same name (the topic was recreated) starts a new manifest
//!   chain under the new id; the head's entry for the name is replaced.
//! - **Deleted partitions.** A partition dir gone for
//!   `partition_delete_grace` (while its log dir is readable: a log dir that
//!   disappears leaves its partitions alone) gets a version with
//!   `deleted = true`; if it comes back, shipping resumes. Its objects are
//!   kept.
//!
//! # Safety
//!
//! - **Objects first, manifest last.** Objects have unique keys (an upload
//!   id); a version names only objects whose upload completed; the
//!   in-memory position moves only when the version is committed.
//! - **Fencing.** Versions are created with create-if-absent, so two
//!   shippers never both publish one. A shipper that loses a commit reads
//!   the winner: if another writer (`shipper_id`) won, it logs a warning
//!   naming that writer and the partition, and leaves the partition alone
//!   for `fence_backoff`; then it starts again from the latest version. If
//!   the winner has its own id, it is its own earlier commit whose answer
//!   was lost: it adopts that version and goes on (two processes configured
//!   with one id cannot be told apart: keep ids unique; the default,
//!   `<hostname>-<pid>`, is).
//! - **Crash safety.** Objects that no version references (an upload that
//!   a crash or a lost commit left behind, ranges dropped by retention,
//!   cuts or compaction) are deleted by a **sweep** once unreferenced for
//!   `delete_grace` (default 1 h; `never` leaves them to bucket lifecycle
//!   rules). The grace counts from the drop when this process made it,
//!   otherwise from the upload time in the key's upload id. A partition is
//!   swept when first loaded and then every `sweep_interval` while it has
//!   changes, by a shipper that holds its latest version (checked with one
//!   GET); the grace keeps uploads in flight elsewhere safe. Interrupted multipart uploads are aborted on error; those a
//!   crash leaves need the bucket's `AbortIncompleteMultipartUpload`
//!   lifecycle rule.
//! - **Corrupt source data** (CRC mismatch, bad header, torn batch inside a
//!   rolled segment) stops that partition with an error naming the file,
//!   byte position and offset; the others go on. It is tried again after
//!   `error_backoff`.
//!
//! # Non-goals
//!
//! Cross-partition batching of small uploads, pruning old manifest versions
//! (a pruned version number could be created again by a writer that was
//! paused through the pruning; a bucket lifecycle rule on `manifest/` older
//! than a few days is safe in practice). Without a KRaft metadata log (a
//! ZooKeeper-mode broker), choosing which broker's replica to ship: every
//! replica's shipper ships and fencing leaves one active per partition
//! (pin partitions with `--topics`/`--exclude`).
//!
//! # Modules
//!
//! - [`config`]: the configuration file, environment and validation.
//! - [`Shipper`] (module `cycle`): the cycle (observe, plan, upload,
//!   commit per partition, report); `commit`: the next manifest version
//!   (a pure function) and its create-only commit, answered by an outcome
//!   (committed, adopted, fenced, failed); `feed`: publishing the change
//!   feed's head; `sweep`: deleting unreferenced objects.
//! - [`health`]: a partition's health, a state machine with one transition
//!   function.
//! - [`metadata`]: the broker's KRaft metadata log, read every cycle;
//!   `leadership`: which replica's shipper ships a partition (pure, from
//!   the metadata image); `topic_configs`: the configs published with the
//!   manifests.
//! - [`status`]: what `shipper status` shows; [`metrics`]: Prometheus
//!   metrics; [`clock`]: injectable time.
//! - [`bucket_init`]: what "a bucket set up for this cluster" means (the
//!   cluster's marker, or shipped data), the decision of `once`/`run`
//!   (ship, set up on `--create-bucket`, or refuse) and `shipper init`.
//!   [`Shipper`] itself does not check: the binary does, before the first
//!   cycle.

pub mod bucket_init;
mod buffers;
pub mod clock;
mod commit;
mod compaction;
pub mod config;
mod cycle;
mod edit;
pub mod error;
mod feed;
pub mod gaps;
mod groups;
pub mod health;
mod leadership;
pub mod metadata;
pub mod metrics;
mod pack_gc;
mod partition;
mod plan;
mod source;
pub mod status;
mod sweep;
mod topic_configs;
mod upload;

pub use config::{ShipperConfig, ShipperOptions};
pub use cycle::{CycleReport, PartitionStatus, Shipper};
pub use error::ShipperError;
pub use health::Health;
pub use metrics::Metrics;
pub use pack_gc::PackGcReport;
pub use source::why_log_dir_unreadable;
