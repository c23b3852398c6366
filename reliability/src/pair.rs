//! A shipper and an applier in one process over one store: the engine of
//! the in-process harnesses (store faults, network faults, corruption).
//!
//! [`Pair::cycle`] runs one shipper cycle and one applier cycle and
//! records what went wrong; [`Pair::converge`] runs cycles until the
//! destination holds everything the source has (shipped end and
//! destination log end equal to the source log end, every partition
//! MIRRORING), acting as the operator (`start`) on partitions that wait
//! for one, and counting each such restart with its reason.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use applier::{Applier, ApplierOptions};
use bucket::store::ManifestStore;
use kafkalog::TopicPartition;
use manifest::layout::{ClusterLayout, PartitionKey};
use manifest::state::{Command, PartitionState};
use object_store::ObjectStore;
use shipper::{Shipper, ShipperOptions};

use crate::account::{Accounting, account_partition, compare_text, verify_dir};
use crate::source::{SourceSpec, SourceWriter};

/// The source cluster id of every harness.
pub const SOURCE_CLUSTER: &str = "reliability-src";
/// The destination cluster id of every harness.
pub const DEST_CLUSTER: &str = "reliability-dst";

/// Settings of a [`Pair`].
#[derive(Debug, Clone)]
pub struct PairOptions {
    /// Key prefix in the bucket.
    pub prefix: String,
    /// Multipart part size of the shipper (small: multipart uploads happen).
    pub part_size: usize,
    /// Largest object.
    pub max_object_size: u64,
    /// The applier's `stream_above` (objects larger are appended as they
    /// download); `None`: the applier's default.
    pub stream_above: Option<u64>,
    /// The shipper's layout 2 settings: `pack_below` (0: off) and
    /// `head_deltas`.
    pub layout2: (u64, bool),
    /// The shipper's `compact_ranges` (`None`: its default).
    pub compact_ranges: Option<usize>,
    /// Compaction written in a task of its own and committed by a later
    /// cycle, as under `shipper run`.
    pub background_compaction: bool,
}

impl Default for PairOptions {
    fn default() -> Self {
        PairOptions {
            prefix: String::new(),
            part_size: 8 * 1024,
            max_object_size: 64 * 1024,
            stream_above: None,
            layout2: (0, false),
            compact_ranges: None,
            background_compaction: false,
        }
    }
}

/// What went wrong while cycling, by side.
#[derive(Debug, Clone, Default)]
pub struct Trouble {
    /// Shipper cycles run.
    pub shipper_cycles: u64,
    /// Shipper cycles that reported an error.
    pub shipper_cycles_with_errors: u64,
    /// Shipper errors, by partition-or-`-` and a short kind.
    pub shipper_errors: u64,
    /// Packed ranges the shipper's compaction replaced (committed).
    pub compacted_ranges: u64,
    /// Applier cycles run.
    pub applier_cycles: u64,
    /// Times a partition went FAILED with a retryable error.
    pub applier_retryable_failures: u64,
    /// Times a retryable FAILED partition went back to work by itself.
    pub applier_automatic_retries: u64,
    /// Times a partition went FAILED with an error that waits for an operator.
    pub applier_permanent_failures: u64,
    /// Operator `start`s the harness issued, with the error that needed it.
    pub operator_restarts: Vec<String>,
    /// Every distinct error text seen (shipper and applier), for
    /// attributing detections.
    pub messages: BTreeSet<String>,
}

/// The end state: what the destination holds against the source.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Source log end per partition.
    pub source_ends: Vec<i64>,
    /// Shipped end per partition.
    pub shipped_ends: Vec<i64>,
    /// Destination log end per partition.
    pub dest_ends: Vec<i64>,
    /// Batches lost / duplicated / foreign / misplaced, summed.
    pub accounting: Accounting,
    /// `kafkalog::compare` per partition.
    pub compare: Vec<(String, String)>,
    /// `kafkalog verify` of the destination: batches checked, or the problem.
    pub verify: Result<u64, String>,
    /// Partitions not MIRRORING, with their state.
    pub not_mirroring: Vec<(String, String)>,
}

impl Outcome {
    /// Converged, identical, nothing lost or duplicated, destination valid.
    pub fn is_clean(&self) -> bool {
        self.accounting.is_clean()
            && self.source_ends == self.dest_ends
            && self.source_ends == self.shipped_ends
            && self.compare.iter().all(|(_, c)| c == "identical")
            && self.verify.is_ok()
            && self.not_mirroring.is_empty()
    }
}

/// A source writer, a shipper and an applier.
pub struct Pair {
    /// The source log dir.
    pub source: PathBuf,
    /// The destination log dir.
    pub dest: PathBuf,
    /// The source writer.
    pub writer: SourceWriter,
    /// The shipper.
    pub shipper: Shipper,
    /// The applier.
    pub applier: Applier,
    /// Trouble so far.
    pub trouble: Trouble,
    bucket: Arc<dyn ObjectStore>,
    prefix: String,
    last_state: BTreeMap<TopicPartition, (PartitionState, bool)>,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("source", &self.source)
            .field("dest", &self.dest)
            .finish()
    }
}

/// Shipper options of the harnesses: no sweeping, no waiting after errors.
pub fn shipper_options(source: &Path, o: &PairOptions) -> ShipperOptions {
    let mut s = ShipperOptions::new(vec![source.to_path_buf()], SOURCE_CLUSTER);
    s.bucket_prefix = o.prefix.clone();
    s.tail_interval = Duration::from_millis(10);
    s.delete_grace = None;
    s.sweep_on_start = false;
    s.error_backoff = Duration::ZERO;
    s.fence_backoff = Duration::from_millis(10);
    s.part_size = o.part_size;
    s.max_object_size = o.max_object_size;
    s.shipper_id = "reliability-shipper".into();
    (s.pack_below, s.head_deltas) = o.layout2;
    if let Some(n) = o.compact_ranges {
        s.compact_ranges = n;
    }
    s
}

/// Applier options of the harnesses: every topic, millisecond backoffs.
pub fn applier_options(dest: &Path, o: &PairOptions) -> anyhow::Result<ApplierOptions> {
    let mut a = ApplierOptions::new(dest, SOURCE_CLUSTER);
    a.bucket_prefix = o.prefix.clone();
    a.local_cluster_id = Some(DEST_CLUSTER.into());
    a.topics = Some(regex::Regex::new("^.*$").context("regex")?);
    a.base_backoff = Duration::from_millis(1);
    a.max_backoff = Duration::from_millis(8);
    if let Some(bytes) = o.stream_above {
        a.stream_above = bytes;
    }
    Ok(a)
}

impl Pair {
    /// A source (with `spec`) under `root/source`, a destination under
    /// `root/dest`; the shipper talks to `shipper_store`, the applier to
    /// `applier_store` (`bucket`, each through its own decorator; `bucket`
    /// itself is only read to explain a failure to converge).
    pub fn new(
        root: &Path,
        spec: SourceSpec,
        bucket: Arc<dyn ObjectStore>,
        shipper_store: Arc<dyn ObjectStore>,
        applier_store: Arc<dyn ObjectStore>,
        o: &PairOptions,
    ) -> anyhow::Result<Pair> {
        let source = root.join("source");
        let dest = root.join("dest");
        let writer = SourceWriter::open(&source, spec)?;
        let shipper = Shipper::new(shipper_options(&source, o), shipper_store)
            .map_err(|e| anyhow::anyhow!("shipper: {e}"))?
            .with_background_compaction(o.background_compaction);
        let applier = Applier::open(applier_options(&dest, o)?, Some(applier_store))?;
        Ok(Pair {
            source,
            dest,
            writer,
            shipper,
            applier,
            trouble: Trouble::default(),
            bucket,
            prefix: o.prefix.clone(),
            last_state: BTreeMap::new(),
        })
    }

    /// One shipper cycle and one applier cycle.
    pub async fn cycle(&mut self) {
        let r = self.shipper.run_cycle().await;
        self.trouble.shipper_cycles += 1;
        self.trouble.compacted_ranges += r.compacted.1;
        if !r.errors.is_empty() {
            self.trouble.shipper_cycles_with_errors += 1;
            self.trouble.shipper_errors += r.errors.len() as u64;
            for (p, e) in r.errors {
                self.trouble.messages.insert(format!("shipper {p}: {e}"));
            }
        }
        self.applier.run_once().await;
        self.trouble.applier_cycles += 1;
        let mut now = BTreeMap::new();
        for m in self.applier.mirrors() {
            let st = m.record.state.state();
            let failure = m.record.state.failure();
            let retryable = failure.is_some_and(|f| f.retryable);
            if let Some(f) = failure {
                self.trouble
                    .messages
                    .insert(format!("applier {}: {}", m.tp, f.message));
            }
            let before = self.last_state.get(&m.tp).copied();
            let was_failed = before.is_some_and(|(s, _)| s == PartitionState::Failed);
            if st == PartitionState::Failed && !was_failed {
                if retryable {
                    self.trouble.applier_retryable_failures += 1;
                } else {
                    self.trouble.applier_permanent_failures += 1;
                }
            }
            if was_failed && st != PartitionState::Failed && before.is_some_and(|(_, r)| r) {
                self.trouble.applier_automatic_retries += 1;
            }
            now.insert(m.tp.clone(), (st, retryable));
        }
        self.last_state = now;
    }

    fn dest_ends(&self) -> Vec<i64> {
        let by_tp: BTreeMap<&TopicPartition, i64> = self
            .applier
            .mirrors()
            .map(|m| (&m.tp, m.log.log_end_offset()))
            .collect();
        self.writer
            .partitions()
            .iter()
            .map(|tp| by_tp.get(tp).copied().unwrap_or(0))
            .collect()
    }

    fn shipped_ends(&self) -> Vec<i64> {
        let by_tp: BTreeMap<(String, i32), i64> = self
            .shipper
            .partitions()
            .into_iter()
            .map(|p| ((p.topic, p.partition), p.shipped_end_offset))
            .collect();
        self.writer
            .partitions()
            .iter()
            .map(|tp| {
                by_tp
                    .get(&(tp.topic.clone(), tp.partition))
                    .copied()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// True when everything written has been shipped and applied, and
    /// every partition is MIRRORING.
    pub fn converged(&self) -> bool {
        let src = self.writer.log_ends();
        let mirroring = self.applier.mirrors().count() == src.len()
            && self
                .applier
                .mirrors()
                .all(|m| m.record.state.state() == PartitionState::Mirroring);
        mirroring && self.shipped_ends() == src && self.dest_ends() == src
    }

    /// Runs cycles until converged (true) or `max_cycles` ran (false).
    /// A partition FAILED with an error that waits for an operator gets
    /// the operator's `start` (counted in [`Trouble::operator_restarts`]).
    pub async fn converge(&mut self, max_cycles: u64, pause: Duration) -> (bool, u64) {
        for i in 0..max_cycles {
            self.cycle().await;
            if self.converged() {
                return (true, i + 1);
            }
            let waiting: Vec<(TopicPartition, String)> = self
                .applier
                .mirrors()
                .filter_map(|m| {
                    let f = m.record.state.failure()?;
                    (!f.retryable).then(|| (m.tp.clone(), f.message.clone()))
                })
                .collect();
            for (tp, message) in waiting {
                self.trouble.operator_restarts.push(message);
                self.applier
                    .command(Command::Start, std::slice::from_ref(&tp.topic), false)
                    .await;
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        (false, max_cycles)
    }

    /// Why the pair has not converged, per partition: the source end, the
    /// shipper's view, the bucket's latest manifest and the head's entry
    /// (read directly, without faults), the destination and its state.
    pub async fn diagnose(&self) -> Vec<String> {
        let layout = match ClusterLayout::new(&self.prefix, SOURCE_CLUSTER) {
            Ok(l) => l,
            Err(e) => return vec![format!("layout: {e}")],
        };
        let store = ManifestStore::new(Arc::clone(&self.bucket), layout);
        let head = store.latest_head(None).await;
        let rows = applier::status::collect(&self.dest).unwrap_or_default();
        let shipped = self.shipper.partitions();
        let mut out = Vec::new();
        for (i, tp) in self.writer.partitions().iter().enumerate() {
            let key = PartitionKey {
                tp: tp.clone(),
                topic_id: crate::source::TOPIC_ID,
            };
            let latest = match store.newest_manifest(&key).await {
                Ok(Some(m)) => format!("v{} to {}", m.version, m.shipped_end_offset),
                Ok(None) => "none".into(),
                Err(e) => format!("unreadable ({e})"),
            };
            let entry = match &head {
                Ok(Some(h)) => h
                    .partitions
                    .get(&tp.to_string())
                    .map_or("no entry".into(), |e| {
                        format!(
                            "v{} to {} (head {})",
                            e.manifest_version, e.shipped_end_offset, h.seq
                        )
                    }),
                Ok(None) => "no head".into(),
                Err(e) => format!("unreadable ({e})"),
            };
            let ship = shipped
                .iter()
                .find(|p| p.topic == tp.topic && p.partition == tp.partition)
                .map_or("unknown".into(), |p| {
                    format!(
                        "{} to {}{}",
                        p.state,
                        p.shipped_end_offset,
                        p.detail
                            .as_deref()
                            .map(|d| format!(" ({d})"))
                            .unwrap_or_default()
                    )
                });
            let row = rows
                .iter()
                .find(|r| r.topic == tp.topic && r.partition == tp.partition)
                .map_or("not a mirror".into(), |r| {
                    format!(
                        "{} at {}{}{}",
                        r.state,
                        r.local_log_end_offset,
                        r.last_error
                            .as_deref()
                            .map(|e| format!(", error: {e}"))
                            .unwrap_or_default(),
                        r.waiting_for
                            .as_deref()
                            .map(|w| format!(", waiting for: {w}"))
                            .unwrap_or_default()
                    )
                });
            out.push(format!(
                "{tp}: source end {}; shipper {ship}; bucket latest manifest {latest}; feed {entry}; destination {row}",
                self.writer.log_end(i)
            ));
        }
        out
    }

    /// Compares the destination with the source.
    pub fn outcome(&self) -> anyhow::Result<Outcome> {
        let source_ends = self.writer.log_ends();
        let shipped_ends = self.shipped_ends();
        let mut accounting = Accounting::default();
        let mut compare = Vec::new();
        for (i, tp) in self.writer.partitions().iter().enumerate() {
            let limit = shipped_ends.get(i).copied().unwrap_or(0);
            accounting.add(&account_partition(&self.source, &self.dest, tp, limit)?);
            compare.push((tp.to_string(), compare_text(&self.source, &self.dest, tp)));
        }
        let not_mirroring = self
            .applier
            .mirrors()
            .filter(|m| m.record.state.state() != PartitionState::Mirroring)
            .map(|m| {
                (
                    m.tp.to_string(),
                    m.record.state.state().as_str().to_string(),
                )
            })
            .collect();
        Ok(Outcome {
            dest_ends: self.dest_ends(),
            source_ends,
            shipped_ends,
            accounting,
            compare,
            verify: verify_dir(&self.dest),
            not_mirroring,
        })
    }
}
