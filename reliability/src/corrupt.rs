//! Harness 4: corruption.
//!
//! A source of three partitions is shipped (three objects each) into an
//! in-memory bucket. Then, one trial at a time, a byte of the victim
//! partition's middle object (or of its manifest, or of the newest head)
//! is flipped, a fresh applier applies the bucket into an empty
//! destination, and the harness checks:
//!
//! - **data**: the victim is FAILED with a non-retryable error naming the
//!   object; nothing of the flipped object was applied (the destination
//!   ends exactly where the object starts, and `kafkalog verify` passes);
//!   the other partitions are MIRRORING and identical to the source. Every
//!   region of every batch is sampled: the twelve header fields (base
//!   offset, length, leader epoch, magic, CRC, attributes, last offset
//!   delta, the two timestamps, producer id and epoch, base sequence,
//!   record count) and the records.
//! - **manifest / head**: the flip is refused as a format or identity
//!   error, or it changes nothing that matters; it must never be applied
//!   silently (a destination that differs from the source).
//! - **repair**: the original bytes are put back, the operator's `start`
//!   is issued, and the victim catches up with no gap and no duplicate
//!   (byte-identical segment files, nothing lost or duplicated).
//!
//! A second, informational layer ("defence in depth") flips the object
//! *and* fixes the manifest's CRC-32C of it, as if the corruption happened
//! before the shipper computed that checksum: then only the per-batch CRC
//! and the log's offset checks stand between the flip and the mirror.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use applier::Applier;
use bucket::store::ManifestStore;
use bytes::Bytes;
use kafkalog::TopicPartition;
use kafkalog::batch::BatchIter;
use manifest::layout::{ClusterLayout, PartitionKey};
use manifest::partition::PartitionManifest;
use manifest::state::{Command, PartitionState};
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use shipper::Shipper;

use crate::account::{account_partition, compare_text, verify_dir};
use crate::pair::{PairOptions, SOURCE_CLUSTER, applier_options, shipper_options};
use crate::rng::Rng;
use crate::source::{SourceSpec, SourceWriter, TOPIC_ID};

/// The regions of a v2 batch, by their byte ranges in the batch.
pub const REGIONS: [(&str, usize, usize); 13] = [
    ("baseOffset", 0, 8),
    ("batchLength", 8, 12),
    ("partitionLeaderEpoch", 12, 16),
    ("magic", 16, 17),
    ("crc", 17, 21),
    ("attributes", 21, 23),
    ("lastOffsetDelta", 23, 27),
    ("baseTimestamp", 27, 35),
    ("maxTimestamp", 35, 43),
    ("producerId", 43, 51),
    ("producerEpoch", 51, 53),
    ("baseSequence", 53, 57),
    ("recordCount", 57, 61),
];

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct CorruptOptions {
    /// Seed of the sampling.
    pub seed: u64,
    /// Every byte of the object and the manifest, with every mask
    /// (otherwise: `samples` positions per region and a sample of the
    /// manifest and head).
    pub all_bytes: bool,
    /// Positions sampled per batch region (when not `all_bytes`).
    pub samples: usize,
    /// Positions sampled in the manifest and in the head (when not
    /// `all_bytes`).
    pub json_samples: usize,
    /// Run the defence-in-depth layer too.
    pub depth: bool,
    /// The applier's `stream_above`: 0 appends every object as it
    /// downloads (the mismatch found at its end undoes it); `None`: the
    /// applier's default (the harness's objects are then checked whole).
    pub stream_above: Option<u64>,
    /// The shipper's `pack_below` (layout 2): 0 ships every range as an
    /// object of its own; above, a cycle's ranges go into one pack and the
    /// flips land in the victim's range inside it.
    pub pack_below: u64,
}

impl Default for CorruptOptions {
    fn default() -> Self {
        CorruptOptions {
            seed: 1,
            all_bytes: false,
            samples: 2,
            json_samples: 60,
            depth: true,
            stream_above: None,
            pack_below: 0,
        }
    }
}

/// How one trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Refused: the victim FAILED naming the object, nothing of it applied.
    Detected,
    /// Refused as a format error (manifest or head does not decode).
    FormatError,
    /// Refused as an identity error (wrong partition, cluster, version).
    IdentityError,
    /// Refused later: the victim FAILED with another error.
    FailedOtherwise,
    /// Accepted, but nothing that matters changed: destination identical.
    Harmless,
    /// Accepted; no error, the victim waits (lag) for something that is
    /// not there.
    Stalled,
    /// Accepted and applied: the destination differs from the source.
    SilentlyApplied,
    /// Another partition was affected, or the verdict could not be made.
    Broken,
}

impl Verdict {
    /// Name for the tables.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Detected => "detected (FAILED, object named)",
            Verdict::FormatError => "format error",
            Verdict::IdentityError => "identity error",
            Verdict::FailedOtherwise => "FAILED (other error)",
            Verdict::Harmless => "accepted, harmless (destination identical)",
            Verdict::Stalled => "accepted, stalled (no error, lag)",
            Verdict::SilentlyApplied => "SILENTLY APPLIED (destination differs)",
            Verdict::Broken => "BROKEN (other partitions affected)",
        }
    }

    /// Refused (a detection).
    pub fn refused(self) -> bool {
        matches!(
            self,
            Verdict::Detected
                | Verdict::FormatError
                | Verdict::IdentityError
                | Verdict::FailedOtherwise
        )
    }
}

/// One trial.
#[derive(Debug, Clone)]
pub struct Trial {
    /// `data`, `depth`, `manifest` or `head`.
    pub target: &'static str,
    /// Region (a batch field, `records`, or the JSON field near the byte).
    pub region: String,
    /// Byte position in the object.
    pub position: usize,
    /// XOR mask.
    pub mask: u8,
    /// The verdict.
    pub verdict: Verdict,
    /// The error message named the offset of the corrupt batch.
    pub names_batch_offset: bool,
    /// After repair and `start`: identical, nothing lost or duplicated.
    pub repaired: bool,
    /// The victim's error, if any.
    pub error: Option<String>,
    /// State, destination end and comparison after the flip.
    pub detail: String,
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct CorruptReport {
    /// The settings.
    pub options: CorruptOptions,
    /// Every trial.
    pub trials: Vec<Trial>,
    /// The victim object's key and size.
    pub object: (String, usize),
    /// Batches in it.
    pub object_batches: usize,
    /// Manifest size.
    pub manifest_bytes: usize,
    /// Head size.
    pub head_bytes: usize,
    /// Wall time.
    pub elapsed: Duration,
}

impl CorruptReport {
    fn of(&self, target: &str) -> impl Iterator<Item = &Trial> {
        let target = target.to_string();
        self.trials.iter().filter(move |t| t.target == target)
    }

    /// Data flips detected / tried.
    pub fn data_detection(&self) -> (usize, usize) {
        let n = self.of("data").count();
        let d = self
            .of("data")
            .filter(|t| t.verdict == Verdict::Detected)
            .count();
        (d, n)
    }

    /// Manifest and head flips never applied silently and never breaking
    /// other partitions.
    pub fn json_never_applied(&self) -> bool {
        self.trials
            .iter()
            .filter(|t| t.target == "manifest" || t.target == "head")
            .all(|t| !matches!(t.verdict, Verdict::SilentlyApplied | Verdict::Broken))
    }

    /// Every data flip detected and repaired; no manifest or head flip
    /// applied, each repaired. (The defence-in-depth layer is
    /// informational: it removes the object checksum on purpose.)
    pub fn passed(&self) -> bool {
        let (d, n) = self.data_detection();
        d == n
            && n > 0
            && self
                .trials
                .iter()
                .filter(|t| t.target != "depth")
                .all(|t| t.repaired)
            && self.json_never_applied()
    }

    /// Trials of the layers that must pass, not repaired.
    pub fn unrepaired(&self) -> usize {
        self.trials
            .iter()
            .filter(|t| t.target != "depth" && !t.repaired)
            .count()
    }

    fn table(&self, target: &str, by_region: bool) -> String {
        let mut rows: BTreeMap<String, BTreeMap<Verdict, usize>> = BTreeMap::new();
        for t in self.of(target) {
            let key = if by_region {
                t.region.clone()
            } else {
                "all".into()
            };
            *rows.entry(key).or_default().entry(t.verdict).or_default() += 1;
        }
        let mut out = String::new();
        for (region, verdicts) in rows {
            let total: usize = verdicts.values().sum();
            let parts: Vec<String> = verdicts
                .iter()
                .map(|(v, n)| format!("{} {n}", v.name()))
                .collect();
            out.push_str(&format!(
                "    {region:<22} {total:>5} flips: {}\n",
                parts.join(", ")
            ));
        }
        out
    }

    /// The figures, one per line.
    pub fn render(&self) -> String {
        let (d, n) = self.data_detection();
        let mut out = format!(
            "corruption: seed {}, {} trials; victim object {} ({} bytes, {} batches), manifest {} bytes, head {} bytes\n",
            self.options.seed,
            self.trials.len(),
            self.object.0,
            self.object.1,
            self.object_batches,
            self.manifest_bytes,
            self.head_bytes
        );
        out.push_str(&format!(
            "  data flips: {d}/{n} detected ({:.1}%): FAILED, non-retryable, naming the object, nothing of it applied, other partitions identical\n",
            100.0 * d as f64 / n.max(1) as f64
        ));
        out.push_str(&self.table("data", true));
        let named = self.of("data").filter(|t| t.names_batch_offset).count();
        out.push_str(&format!(
            "  error names the offset of the corrupt batch: {named}/{n}\n"
        ));
        if self.of("depth").count() > 0 {
            out.push_str(
                "  defence in depth (object flipped and its manifest CRC-32C fixed to match):\n",
            );
            out.push_str(&self.table("depth", true));
        }
        for target in ["manifest", "head"] {
            let total = self.of(target).count();
            if total == 0 {
                continue;
            }
            let refused = self.of(target).filter(|t| t.verdict.refused()).count();
            out.push_str(&format!(
                "  {target} flips: {total}, refused {refused} ({:.1}%):\n",
                100.0 * refused as f64 / total as f64
            ));
            out.push_str(&self.table(target, false));
            let mut bad: BTreeMap<String, usize> = BTreeMap::new();
            for t in self
                .of(target)
                .filter(|t| !t.verdict.refused() && t.verdict != Verdict::Harmless)
            {
                *bad.entry(format!("{} in {}", t.verdict.name(), t.region))
                    .or_default() += 1;
            }
            for (what, n) in bad {
                out.push_str(&format!("      {n:>4} x {what}\n"));
            }
        }
        let must: Vec<&Trial> = self.trials.iter().filter(|t| t.target != "depth").collect();
        let repaired = must.iter().filter(|t| t.repaired).count();
        out.push_str(&format!(
            "  repair + start (data, manifest, head): {repaired}/{} caught up with no gap and no duplicate\n",
            must.len()
        ));
        out.push_str(&format!(
            "  result: {} in {:.1} s\n",
            if self.passed() { "PASS" } else { "FAIL" },
            self.elapsed.as_secs_f64()
        ));
        out
    }
}

/// The shipped setup every trial starts from.
struct Setup {
    source: std::path::PathBuf,
    bucket: Arc<dyn ObjectStore>,
    store: ManifestStore,
    parts: Vec<TopicPartition>,
    victim: TopicPartition,
    manifest: PartitionManifest,
    manifest_key: String,
    manifest_bytes: Bytes,
    head_key: String,
    head_bytes: Bytes,
    /// Index of the victim's middle range.
    range: usize,
    /// The object holding that range (a pack holds other partitions' too).
    object: Bytes,
    /// The range's bytes in `object`.
    within: std::ops::Range<usize>,
    /// The applier's options in every trial.
    applier: PairOptions,
}

async fn setup(root: &Path, stream_above: Option<u64>, pack_below: u64) -> anyhow::Result<Setup> {
    let source = root.join("source");
    let bucket: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut spec = SourceSpec::small(3);
    spec.epoch_every = 7;
    let mut writer = SourceWriter::open(&source, spec)?;
    let po = PairOptions::default();
    let mut so = shipper_options(&source, &po);
    so.pack_below = pack_below;
    let mut shipper = Shipper::new(so, Arc::clone(&bucket)).map_err(|e| anyhow::anyhow!("{e}"))?;
    for _ in 0..3 {
        writer.round(4)?;
        let r = shipper.ship_available().await;
        anyhow::ensure!(r.errors.is_empty(), "shipping: {:?}", r.errors);
    }
    let parts = writer.partitions().to_vec();
    drop(writer);
    let store = ManifestStore::new(
        Arc::clone(&bucket),
        ClusterLayout::new("", SOURCE_CLUSTER).map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let victim = parts[0].clone();
    let key = PartitionKey {
        tp: victim.clone(),
        topic_id: TOPIC_ID,
    };
    let manifest = store
        .newest_manifest(&key)
        .await?
        .context("the victim's manifest")?;
    anyhow::ensure!(
        manifest.ranges.len() >= 3,
        "want 3 objects, got {}",
        manifest.ranges.len()
    );
    let range = 1;
    let object = store.get(&manifest.ranges[range].key).await?;
    let r = &manifest.ranges[range];
    anyhow::ensure!(
        r.object_offset.is_some() == (pack_below > 0),
        "the victim's range is packed: {:?} (pack_below {pack_below})",
        r.object_offset
    );
    let from = r.object_offset.unwrap_or(0) as usize;
    let within = from..from + r.bytes as usize;
    anyhow::ensure!(within.end <= object.len(), "the range is in its object");
    let manifest_key = store.layout().manifest_key(&key, manifest.version);
    let manifest_bytes = store.get(&manifest_key).await?;
    let seq = store.latest_head_seq().await?.context("a head")?;
    let head_key = store.layout().head_key(seq);
    let head_bytes = store.get(&head_key).await?;
    Ok(Setup {
        applier: PairOptions {
            stream_above,
            ..PairOptions::default()
        },
        source,
        bucket,
        store,
        parts,
        victim,
        manifest,
        manifest_key,
        manifest_bytes,
        head_key,
        head_bytes,
        range,
        object,
        within,
    })
}

async fn put(bucket: &Arc<dyn ObjectStore>, key: &str, bytes: Bytes) -> anyhow::Result<()> {
    bucket
        .put(&ObjectPath::from(key), PutPayload::from_bytes(bytes))
        .await
        .with_context(|| format!("put {key}"))?;
    Ok(())
}

async fn drain(a: &mut Applier) {
    for _ in 0..30 {
        let r = a.run_once().await;
        if r.batches == 0 && r.transitions == 0 {
            return;
        }
    }
}

/// The region of byte `pos` of an object whose batches start at `starts`.
fn region_of(pos: usize, batches: &[(usize, usize, i64)]) -> (String, i64) {
    for &(start, len, base) in batches {
        if pos >= start && pos < start + len {
            let rel = pos - start;
            let name = REGIONS
                .iter()
                .find(|(_, a, b)| rel >= *a && rel < *b)
                .map_or("records", |(n, _, _)| n);
            return (name.to_string(), base);
        }
    }
    ("beyond batches".into(), -1)
}

/// The path of the first difference between two JSON values.
fn value_diff(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                let p = format!("{path}.{k}");
                match y.get(k) {
                    Some(vb) => {
                        if let Some(d) = value_diff(va, vb, &p) {
                            return Some(d);
                        }
                    }
                    None => return Some(format!("{p} (key renamed)")),
                }
            }
            y.keys()
                .find(|k| !x.contains_key(*k))
                .map(|k| format!("{path}.{k} (new key)"))
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                if let Some(d) = value_diff(va, vb, &format!("{path}[]")) {
                    let _ = i;
                    return Some(d);
                }
            }
            (x.len() != y.len()).then(|| format!("{path} (length)"))
        }
        _ => (a != b).then(|| path.to_string()),
    }
}

/// Where a flip landed in a JSON object: the path of the value it changed
/// when the result still parses as JSON, else the nearest key before it.
fn json_region(original: &[u8], flipped: &[u8], pos: usize) -> String {
    let a: Result<serde_json::Value, _> = serde_json::from_slice(original);
    let b: Result<serde_json::Value, _> = serde_json::from_slice(flipped);
    match (a, b) {
        (Ok(a), Ok(b)) => value_diff(&a, &b, "").unwrap_or_else(|| "(no change)".into()),
        _ => format!("{} (not JSON)", json_field(original, pos)),
    }
}

/// The JSON field a byte of a manifest or head belongs to (the nearest
/// key before it).
fn json_field(text: &[u8], pos: usize) -> String {
    let before = &text[..pos.min(text.len())];
    let s = String::from_utf8_lossy(before);
    let mut field = "(start)".to_string();
    let mut rest = s.as_ref();
    while let Some(i) = rest.find("\":") {
        let head = &rest[..i];
        if let Some(q) = head.rfind('"') {
            field = head[q + 1..].to_string();
        }
        rest = &rest[i + 2..];
    }
    field
}

struct Check {
    verdict: Verdict,
    error: Option<String>,
    detail: String,
}

/// Applies the (corrupted) bucket into `dest` and judges the result.
async fn judge(
    s: &Setup,
    dest: &Path,
    target: &'static str,
    object_base: i64,
    pre: Option<Verdict>,
    a: &mut Applier,
) -> anyhow::Result<Check> {
    drain(a).await;
    let _ = dest;
    let victim = a.mirrors().find(|m| m.tp == s.victim);
    let state = victim.map(|m| m.record.state.state());
    let failure = victim.and_then(|m| m.record.state.failure().cloned());
    let victim_end = victim.map_or(0, |m| m.log.log_end_offset());
    // The other partitions are untouched.
    for tp in s.parts.iter().filter(|tp| **tp != s.victim) {
        let ok = a.state_of(tp) == Some(PartitionState::Mirroring)
            && compare_text(&s.source, dest, tp) == "identical";
        if !ok && target == "data" {
            return Ok(Check {
                verdict: Verdict::Broken,
                error: None,
                detail: format!("{tp}: {}", compare_text(&s.source, dest, tp)),
            });
        }
    }
    let error = failure.as_ref().map(|f| f.message.clone());
    let valid = verify_dir(dest).is_ok();
    let cmp = compare_text(&s.source, dest, &s.victim);
    // Anything in the destination that the source does not have at that
    // place (an empty destination is not a difference: nothing applied).
    let acc = account_partition(&s.source, dest, &s.victim, s.manifest.shipped_end_offset)?;
    let wrong_identity = victim.is_some_and(|m| m.record.topic_id != TOPIC_ID);
    let wrong_start =
        victim.is_some_and(|m| m.log.log_start_offset() != s.manifest.log_start_offset);
    let differs = !valid
        || wrong_identity
        || wrong_start
        || (victim_end > 0 && cmp.starts_with("DIFFERENT"))
        || acc.foreign + acc.duplicated + acc.misplaced > 0;
    let verdict = match (target, state, &failure) {
        ("data" | "depth", Some(PartitionState::Failed), Some(f)) => {
            let key = &s.manifest.ranges[s.range].key;
            if !f.retryable
                && f.message.contains(key.as_str())
                && victim_end == object_base
                && valid
            {
                Verdict::Detected
            } else if victim_end <= object_base && valid {
                Verdict::FailedOtherwise
            } else {
                Verdict::SilentlyApplied
            }
        }
        ("data" | "depth", _, _) => {
            if cmp == "identical" && valid {
                Verdict::Harmless
            } else {
                Verdict::SilentlyApplied
            }
        }
        _ if differs => Verdict::SilentlyApplied,
        _ => match pre {
            Some(v) => v,
            None if state == Some(PartitionState::Failed) => Verdict::FailedOtherwise,
            None if cmp == "identical" => Verdict::Harmless,
            None => Verdict::Stalled,
        },
    };
    let detail = format!(
        "state {:?}, destination end {victim_end}, compare: {cmp}{}",
        state.map(|s| s.as_str()),
        if wrong_identity {
            format!(
                ", adopted with topic id {:?}",
                victim.map(|m| m.record.topic_id.to_string())
            )
        } else if wrong_start {
            format!(
                ", log start offset {:?} (source {})",
                victim.map(|m| m.log.log_start_offset()),
                s.manifest.log_start_offset
            )
        } else {
            String::new()
        }
    );
    Ok(Check {
        verdict,
        error,
        detail,
    })
}

/// What the decoders say about flipped JSON, before any applier runs:
/// a format error, an identity error (checked as `ManifestStore` does), or
/// nothing (it decodes to another valid object).
fn preclassify(s: &Setup, target: &str, bytes: &[u8]) -> Option<Verdict> {
    match target {
        "manifest" => match PartitionManifest::decode(bytes) {
            Err(_) => Some(Verdict::FormatError),
            Ok(m) => {
                let identity = m.version == s.manifest.version
                    && m.source_cluster_id == SOURCE_CLUSTER
                    && m.topic == s.victim.topic
                    && m.partition == s.victim.partition
                    && m.topic_id == TOPIC_ID;
                (!identity).then_some(Verdict::IdentityError)
            }
        },
        "head" => match manifest::feed::Head::decode(bytes) {
            Err(_) => Some(Verdict::FormatError),
            Ok(h) => {
                let original = manifest::feed::Head::decode(&s.head_bytes).ok()?;
                let identity = h.seq == original.seq && h.source_cluster_id == SOURCE_CLUSTER;
                (!identity).then_some(Verdict::IdentityError)
            }
        },
        _ => None,
    }
}

/// Puts the original bytes back, starts the victim, and checks that it
/// caught up with no gap and no duplicate.
async fn repair(s: &Setup, dest: &Path, a: &mut Applier) -> anyhow::Result<bool> {
    put(&s.bucket, &s.manifest.ranges[s.range].key, s.object.clone()).await?;
    put(&s.bucket, &s.manifest_key, s.manifest_bytes.clone()).await?;
    put(&s.bucket, &s.head_key, s.head_bytes.clone()).await?;
    if a.state_of(&s.victim) == Some(PartitionState::Failed) {
        a.command(Command::Start, std::slice::from_ref(&s.victim.topic), false)
            .await;
    }
    drain(a).await;
    // A partition never adopted (its feed entry was broken) is adopted now.
    if a.state_of(&s.victim).is_none() {
        a.command(Command::Start, std::slice::from_ref(&s.victim.topic), false)
            .await;
        drain(a).await;
    }
    let leo = s.manifest.shipped_end_offset;
    let acc = account_partition(&s.source, dest, &s.victim, leo)?;
    let start_ok = a
        .mirrors()
        .find(|m| m.tp == s.victim)
        .is_some_and(|m| m.log.log_start_offset() == s.manifest.log_start_offset);
    Ok(a.state_of(&s.victim) == Some(PartitionState::Mirroring)
        && start_ok
        && compare_text(&s.source, dest, &s.victim) == "identical"
        && acc.is_clean()
        && verify_dir(dest).is_ok())
}

#[allow(clippy::too_many_arguments)]
async fn trial(
    s: &Setup,
    scratch: &Path,
    n: usize,
    target: &'static str,
    key: &str,
    corrupted: Bytes,
    extra: Option<(String, Bytes)>,
    object_base: i64,
) -> anyhow::Result<(Check, bool)> {
    let corrupted_copy = corrupted.clone();
    put(&s.bucket, key, corrupted).await?;
    if let Some((k, b)) = extra {
        put(&s.bucket, &k, b).await?;
    }
    let dest = scratch.join(format!("dest-{n}"));
    let opts = applier_options(&dest, &s.applier)?;
    let mut a = Applier::open(opts, Some(Arc::clone(&s.bucket)))?;
    let pre = preclassify(s, target, &corrupted_copy);
    let check = judge(s, &dest, target, object_base, pre, &mut a).await?;
    // The applier caches manifests by version (they are immutable): a
    // manifest repaired in place is read again by a restarted applier.
    if target != "data" {
        drop(a);
        a = Applier::open(
            applier_options(&dest, &s.applier)?,
            Some(Arc::clone(&s.bucket)),
        )?;
    }
    let repaired = repair(s, &dest, &mut a).await?;
    drop(a);
    let _ = std::fs::remove_dir_all(&dest);
    Ok((check, repaired))
}

/// Runs the harness.
pub async fn run(o: &CorruptOptions) -> anyhow::Result<CorruptReport> {
    let started = Instant::now();
    let scratch = crate::scratch_dir()?;
    let s = setup(scratch.path(), o.stream_above, o.pack_below).await?;
    let mut rng = Rng::new(o.seed);
    let masks: [u8; 3] = [0x01, 0x80, 0xff];
    let object_key = s.manifest.ranges[s.range].key.clone();
    let object_base = s.manifest.ranges[s.range].base_offset;
    // Batch positions in the object (the victim's range of a pack is
    // somewhere inside it).
    let batches: Vec<(usize, usize, i64)> = BatchIter::new(&s.object[s.within.clone()], 0)
        .filter_map(Result::ok)
        .map(|(h, b)| (s.within.start + h.position as usize, b.len(), h.base_offset))
        .collect();
    // Positions to flip in the object.
    let mut positions: Vec<(usize, u8)> = Vec::new();
    if o.all_bytes {
        for p in s.within.clone() {
            for m in masks {
                positions.push((p, m));
            }
        }
    } else {
        for &(start, len, _) in &batches {
            let mut regions: Vec<(usize, usize)> = REGIONS
                .iter()
                .map(|(_, a, b)| (start + a, start + b))
                .collect();
            regions.push((start + 61, start + len));
            for (a, b) in regions {
                for i in 0..o.samples {
                    let p = match i {
                        0 => a,
                        1 => b - 1,
                        _ => a + rng.below((b - a) as u64) as usize,
                    };
                    positions.push((p, masks[rng.below(3) as usize]));
                }
            }
        }
        positions.sort();
        positions.dedup();
    }
    let mut trials = Vec::new();
    let mut n = 0;
    for &(pos, mask) in &positions {
        n += 1;
        let mut bytes = s.object.to_vec();
        bytes[pos] ^= mask;
        let (region, base) = region_of(pos, &batches);
        let (check, repaired) = trial(
            &s,
            scratch.path(),
            n,
            "data",
            &object_key,
            bytes.into(),
            None,
            object_base,
        )
        .await?;
        trials.push(Trial {
            target: "data",
            region,
            position: pos,
            mask,
            names_batch_offset: check
                .error
                .as_deref()
                .is_some_and(|e| e.contains(&format!("offset {base}"))),
            verdict: check.verdict,
            repaired,
            error: check.error,
            detail: check.detail,
        });
    }
    if o.depth {
        for &(pos, mask) in positions.iter().filter(|(_, m)| *m == 0x01 || !o.all_bytes) {
            n += 1;
            let mut bytes = s.object.to_vec();
            bytes[pos] ^= mask;
            let mut m = s.manifest.clone();
            m.ranges[s.range].crc32c = crc32c::crc32c(&bytes[s.within.clone()]);
            let fixed = m.encode().map_err(|e| anyhow::anyhow!("{e}"))?;
            let (region, base) = region_of(pos, &batches);
            let (check, repaired) = trial(
                &s,
                scratch.path(),
                n,
                "depth",
                &object_key,
                bytes.into(),
                Some((s.manifest_key.clone(), Bytes::from(fixed))),
                object_base,
            )
            .await?;
            trials.push(Trial {
                target: "depth",
                region,
                position: pos,
                mask,
                names_batch_offset: check
                    .error
                    .as_deref()
                    .is_some_and(|e| e.contains(&format!("offset {base}"))),
                verdict: check.verdict,
                repaired,
                error: check.error,
                detail: check.detail,
            });
        }
    }
    for (target, key, original) in [
        ("manifest", s.manifest_key.clone(), s.manifest_bytes.clone()),
        ("head", s.head_key.clone(), s.head_bytes.clone()),
    ] {
        let mut pos: Vec<(usize, u8)> = Vec::new();
        if o.all_bytes {
            for p in 0..original.len() {
                for m in masks {
                    pos.push((p, m));
                }
            }
        } else {
            for _ in 0..o.json_samples {
                pos.push((
                    rng.below(original.len() as u64) as usize,
                    masks[rng.below(3) as usize],
                ));
            }
            pos.sort();
            pos.dedup();
        }
        for (p, mask) in pos {
            n += 1;
            let mut bytes = original.to_vec();
            bytes[p] ^= mask;
            let region = json_region(&original, &bytes, p);
            let (check, repaired) = trial(
                &s,
                scratch.path(),
                n,
                target,
                &key,
                bytes.into(),
                None,
                object_base,
            )
            .await?;
            trials.push(Trial {
                target,
                region,
                position: p,
                mask,
                names_batch_offset: false,
                verdict: check.verdict,
                repaired,
                error: check.error,
                detail: check.detail,
            });
        }
    }
    let _ = &s.store;
    Ok(CorruptReport {
        options: o.clone(),
        trials,
        object: (object_key, s.object.len()),
        object_batches: batches.len(),
        manifest_bytes: s.manifest_bytes.len(),
        head_bytes: s.head_bytes.len(),
        elapsed: started.elapsed(),
    })
}
