//! Every object key segmirror reads or writes, and nothing else.
//!
//! All keys live under the bucket prefix given by the operator (the path of
//! `s3://bucket/prefix` or `file:///dir`) and then under a format version and
//! the source cluster id:
//!
//! ```text
//! <prefix>/segmirror/v1/<cluster>/cluster.json
//!     the cluster's marker: written once (create-if-absent) by
//!     `shipper init` or `shipper once|run --create-bucket`; its presence
//!     (or any other key of this grammar under the cluster's root) is what
//!     makes the cluster's part of the bucket "initialised", the shipper's
//!     condition for shipping there (see the shipper's `bucket_init`).
//! <prefix>/segmirror/v1/<cluster>/head/<seq:020>.json
//!     change feed: one immutable object per shipper cycle, summarising every
//!     partition's latest manifest version (see `feed`).
//! <prefix>/segmirror/v1/<cluster>/groups/delta/<version:020>.json
//! <prefix>/segmirror/v1/<cluster>/groups/snapshot/<version:020>.json
//!     the source's consumer-group offsets: one delta per version, a
//!     snapshot every few versions (see `groups`).
//! <prefix>/segmirror/v1/<cluster>/topics/<topic>/<topic-id>/<partition>/manifest/<version:020>.json
//!     the epoch manifest of one partition, one immutable object per version.
//! <prefix>/segmirror/v1/<cluster>/topics/<topic>/<topic-id>/<partition>/pages/<first:020>-<last:020>-<upload>.json
//!     sealed pages of old ranges, named by the offsets they cover and a
//!     fresh upload id per write (create-only: a page is never replaced).
//!     Buckets written before page upload ids hold
//!     `pages/<first:020>-<last:020>.json`, still parsed.
//! <prefix>/segmirror/v1/<cluster>/topics/<topic>/<topic-id>/<partition>/data/<base:020>-<last:020>-e<epoch:010>-<upload>.batches
//!     shipped batches, byte for byte as in the source segment.
//! <prefix>/segmirror/v1/<cluster>/packs/<hh>/<upload>.pack
//!     a shipper cycle's ranges of many partitions in one object (see
//!     `pack`), `hh` the upload id's last two characters; manifest ranges
//!     name a byte range of it (`ShippedRange::object_offset`).
//! ```
//!
//! Offsets are zero-padded to 20 digits and sequence numbers and versions to
//! 20 digits, so that a lexical listing is numeric order. Data keys carry the
//! epoch of their first batch and a unique upload id, and page keys an
//! upload id, so a retried upload or a second shipper never overwrites an
//! object that some manifest names.
//!
//! An upload id ([`UploadId`]) is 27 characters of `[0-9a-f]`: the upload
//! time in milliseconds since the Unix epoch as 11 hex digits, then 64
//! random bits as 16 ([`parse_upload_time_ms`] reads the time back; ids
//! written by other tools that do not start with 11 hex digits have no
//! time). Keys accept any 1-64 characters of `[a-z0-9]`.
//!
//! Object formats: `.batches` objects are the source's bytes, checked with
//! the CRC-32C their manifest range records. The `.json` objects (heads,
//! manifest versions, pages) are compact JSON of `feed::Head`,
//! `partition::PartitionManifest` and `partition::Page` ending, since schema
//! 1.1, with a CRC-32C trailer over all bytes before it:
//!
//! ```text
//! {"schema":{"major":1,"minor":1},...,"crc32c":<u32 decimal>}
//! ```
//!
//! so any damaged byte is a format error naming the object kind and key
//! (see `codec`). Schema 1.0 objects (no trailer) are still read.
//!
//! Invariants: [`validate_cluster_id`] and kafkalog's topic name rules admit
//! only `[A-Za-z0-9._-]` (never `.` or `..`), so no key built here can
//! escape its prefix; every `parse_*` function is the inverse of its
//! `*_key` function and refuses anything else.

use std::fmt;

use kafkalog::topic::{TopicId, TopicPartition, validate_topic_name};

/// Format version segment of every key.
pub const FORMAT_DIR: &str = "segmirror/v1";

/// A bad name or key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}")]
pub struct LayoutError {
    /// What was being validated or parsed.
    pub what: &'static str,
    /// The value as given.
    pub value: String,
    /// Why it is refused.
    pub reason: &'static str,
}

fn err(what: &'static str, value: &str, reason: &'static str) -> LayoutError {
    LayoutError {
        what,
        value: value.to_string(),
        reason,
    }
}

/// Validates a cluster id: 1-128 characters of `[A-Za-z0-9._-]`, not `.` or
/// `..` (Kafka's cluster ids are 22-character base64url strings).
pub fn validate_cluster_id(id: &str) -> Result<(), LayoutError> {
    if id.is_empty() || id.len() > 128 {
        return Err(err("cluster id", id, "must be 1 to 128 characters"));
    }
    if id == "." || id == ".." {
        return Err(err("cluster id", id, "must not be . or .."));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(err(
            "cluster id",
            id,
            "may only contain ASCII letters, digits, '.', '_' and '-'",
        ));
    }
    Ok(())
}

/// Normalises a bucket prefix: no leading or trailing `/`, no empty, `.` or
/// `..` segments.
pub fn normalize_prefix(prefix: &str) -> Result<String, LayoutError> {
    let trimmed = prefix.trim_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    for seg in trimmed.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return Err(err(
                "bucket prefix",
                prefix,
                "has an empty, '.' or '..' segment",
            ));
        }
    }
    Ok(trimmed.to_string())
}

/// `<prefix>/segmirror/v1`: the directory whose subdirectories are the
/// source clusters that shipped to the bucket (one [`ClusterLayout`] root
/// each).
pub fn clusters_dir(prefix: &str) -> Result<String, LayoutError> {
    let prefix = normalize_prefix(prefix)?;
    Ok(if prefix.is_empty() {
        FORMAT_DIR.to_string()
    } else {
        format!("{prefix}/{FORMAT_DIR}")
    })
}

/// The cluster id of `dir`, a subdirectory of [`clusters_dir`]`(prefix)`
/// as a listing returns it; `None` for anything else.
pub fn parse_cluster_dir(prefix: &str, dir: &str) -> Option<String> {
    let id = dir
        .trim_end_matches('/')
        .strip_prefix(&clusters_dir(prefix).ok()?)?
        .strip_prefix('/')?;
    validate_cluster_id(id).ok()?;
    Some(id.to_string())
}

/// The keys of one source cluster under a bucket prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClusterLayout {
    root: String,
    cluster_id: String,
}

/// A partition's identity in the bucket: topic, topic id, partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    /// Topic and partition.
    pub tp: TopicPartition,
    /// The topic id (from `partition.metadata`).
    pub topic_id: TopicId,
}

impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (topic id {})", self.tp, self.topic_id)
    }
}

/// A data object's name, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataName {
    /// Base offset of the first batch.
    pub base_offset: i64,
    /// Last offset of the last batch.
    pub last_offset: i64,
    /// Leader epoch of the first batch.
    pub epoch: i32,
    /// Unique upload id.
    pub upload_id: String,
}

/// A sealed page's name, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageName {
    /// Base offset of its first range.
    pub first_offset: i64,
    /// Last offset of its last range.
    pub last_offset: i64,
    /// Its upload id; `None` for a page named in the form written before
    /// page upload ids (`<first:020>-<last:020>.json`).
    pub upload_id: Option<String>,
}

/// A unique upload id (see the module docs for its form).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UploadId(String);

impl UploadId {
    /// The id of an upload at `ms` (milliseconds since the Unix epoch)
    /// with `bits` that tell it apart from every other upload in that
    /// millisecond: `ms` in 11 hex digits, then `bits` in 16, so ids sort
    /// roughly by time. Fresh ids (the clock and random bits) are
    /// `bucket::upload_id::fresh`'s.
    pub fn from_parts(ms: i64, bits: u64) -> UploadId {
        UploadId(format!("{ms:011x}{bits:016x}"))
    }

    /// Checks `id` ([`validate_upload_id`]).
    pub fn parse(id: &str) -> Result<UploadId, LayoutError> {
        validate_upload_id(id)?;
        Ok(UploadId(id.to_string()))
    }

    /// The id as written in keys.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The upload time it encodes ([`parse_upload_time_ms`]).
    pub fn time_ms(&self) -> Option<i64> {
        parse_upload_time_ms(&self.0)
    }
}

impl fmt::Display for UploadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The upload time (ms since the Unix epoch) encoded in an upload id's
/// first 11 hex digits; `None` when it does not start with them.
pub fn parse_upload_time_ms(upload_id: &str) -> Option<i64> {
    let digits = upload_id.get(..11)?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    i64::from_str_radix(digits, 16).ok()
}

impl ClusterLayout {
    /// The layout of `cluster_id` under `prefix`.
    pub fn new(prefix: &str, cluster_id: &str) -> Result<ClusterLayout, LayoutError> {
        validate_cluster_id(cluster_id)?;
        let prefix = normalize_prefix(prefix)?;
        let root = if prefix.is_empty() {
            format!("{FORMAT_DIR}/{cluster_id}")
        } else {
            format!("{prefix}/{FORMAT_DIR}/{cluster_id}")
        };
        Ok(ClusterLayout {
            root,
            cluster_id: cluster_id.to_string(),
        })
    }

    /// The cluster id.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// `<prefix>/segmirror/v1/<cluster>`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Directory of the change feed's head objects.
    pub fn head_dir(&self) -> String {
        format!("{}/head", self.root)
    }

    /// Key of head object `seq`.
    pub fn head_key(&self, seq: u64) -> String {
        format!("{}/head/{seq:020}.json", self.root)
    }

    /// Parses a head key of this cluster back to its sequence number.
    pub fn parse_head_key(&self, key: &str) -> Result<u64, LayoutError> {
        let name = key
            .strip_prefix(&self.head_dir())
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| err("head key", key, "not under this cluster's head dir"))?;
        parse_padded(name, ".json")
            .ok_or_else(|| err("head key", key, "name is not <20 digits>.json"))
    }

    /// Directory of the group offsets' deltas.
    pub fn groups_delta_dir(&self) -> String {
        format!("{}/groups/delta", self.root)
    }

    /// Key of the group offsets' delta `version`.
    pub fn groups_delta_key(&self, version: u64) -> String {
        format!("{}/groups/delta/{version:020}.json", self.root)
    }

    /// Directory of the group offsets' snapshots.
    pub fn groups_snapshot_dir(&self) -> String {
        format!("{}/groups/snapshot", self.root)
    }

    /// Key of the group offsets' snapshot `version`.
    pub fn groups_snapshot_key(&self, version: u64) -> String {
        format!("{}/groups/snapshot/{version:020}.json", self.root)
    }

    /// Parses a delta or snapshot key (of the dir `dir`, one of the two
    /// above) back to its version.
    pub fn parse_groups_key(&self, dir: &str, key: &str) -> Result<u64, LayoutError> {
        let name = key
            .strip_prefix(dir)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| err("group offsets key", key, "not under the group offsets dir"))?;
        parse_padded(name, ".json")
            .ok_or_else(|| err("group offsets key", key, "name is not <20 digits>.json"))
    }

    /// Directory of all objects of a partition.
    pub fn partition_dir(&self, p: &PartitionKey) -> String {
        format!(
            "{}/topics/{}/{}/{}",
            self.root, p.tp.topic, p.topic_id, p.tp.partition
        )
    }

    /// Directory of a partition's manifest versions.
    pub fn manifest_dir(&self, p: &PartitionKey) -> String {
        format!("{}/manifest", self.partition_dir(p))
    }

    /// Key of manifest version `version` of a partition.
    pub fn manifest_key(&self, p: &PartitionKey, version: u64) -> String {
        format!("{}/manifest/{version:020}.json", self.partition_dir(p))
    }

    /// Parses a manifest key of partition `p` back to its version.
    pub fn parse_manifest_key(&self, p: &PartitionKey, key: &str) -> Result<u64, LayoutError> {
        let name = key
            .strip_prefix(&self.manifest_dir(p))
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| {
                err(
                    "manifest key",
                    key,
                    "not under this partition's manifest dir",
                )
            })?;
        parse_padded(name, ".json")
            .ok_or_else(|| err("manifest key", key, "name is not <20 digits>.json"))
    }

    /// Directory of a partition's sealed pages.
    pub fn pages_dir(&self, p: &PartitionKey) -> String {
        format!("{}/pages", self.partition_dir(p))
    }

    /// Key of a sealed page of old ranges covering `[first, last]`,
    /// written as `upload_id`.
    pub fn page_key(
        &self,
        p: &PartitionKey,
        first: i64,
        last: i64,
        upload_id: &UploadId,
    ) -> String {
        format!(
            "{}/pages/{first:020}-{last:020}-{upload_id}.json",
            self.partition_dir(p)
        )
    }

    /// Parses a page key of partition `p`, in either form: with an upload
    /// id, or the older `<first:020>-<last:020>.json`.
    pub fn parse_page_key(&self, p: &PartitionKey, key: &str) -> Result<PageName, LayoutError> {
        let bad = || {
            err(
                "page key",
                key,
                "not <20 digits>-<20 digits>[-<upload id>].json under this partition",
            )
        };
        let stem = key
            .strip_prefix(&self.pages_dir(p))
            .and_then(|r| r.strip_prefix('/'))
            .and_then(|n| n.strip_suffix(".json"))
            .ok_or_else(bad)?;
        let mut parts = stem.splitn(3, '-');
        let mut offset = || {
            parts
                .next()
                .and_then(|s| parse_padded(s, ""))
                .and_then(|n| i64::try_from(n).ok())
        };
        let (first, last) = (offset().ok_or_else(bad)?, offset().ok_or_else(bad)?);
        let upload_id = match parts.next() {
            None => None,
            Some(id) => Some(UploadId::parse(id)?.0),
        };
        Ok(PageName {
            first_offset: first,
            last_offset: last,
            upload_id,
        })
    }

    /// Directory of a partition's data objects.
    pub fn data_dir(&self, p: &PartitionKey) -> String {
        format!("{}/data", self.partition_dir(p))
    }

    /// Key of a pack (`crate::pack`: many partitions' ranges in one object)
    /// uploaded as `upload_id`: `<root>/packs/<hh>/<upload id>.pack`, where
    /// `hh` is the id's last two hex digits (random bits), so packs spread
    /// over 256 prefixes and no prefix nears S3's per-prefix request rates.
    pub fn pack_key(&self, upload_id: &str) -> Result<String, LayoutError> {
        validate_upload_id(upload_id)?;
        let spread = &upload_id[upload_id.len().saturating_sub(2)..];
        Ok(format!("{}/packs/{spread}/{upload_id}.pack", self.root))
    }

    /// The dir every pack of this cluster is under (a LIST of it finds
    /// them all, whatever their spread prefix).
    pub fn packs_dir(&self) -> String {
        format!("{}/packs", self.root)
    }

    /// Parses a pack key of this cluster back to its upload id.
    pub fn parse_pack_key<'k>(&self, key: &'k str) -> Result<&'k str, LayoutError> {
        let bad = || {
            err(
                "pack key",
                key,
                "not packs/<hh>/<upload id>.pack under this cluster",
            )
        };
        let rest = key
            .strip_prefix(self.root.as_str())
            .and_then(|r| r.strip_prefix("/packs/"))
            .ok_or_else(bad)?;
        let (spread, name) = rest.split_once('/').ok_or_else(bad)?;
        let id = name.strip_suffix(".pack").ok_or_else(bad)?;
        validate_upload_id(id)?;
        if !id.ends_with(spread) || spread.len() != id.len().min(2) {
            return Err(bad());
        }
        Ok(id)
    }

    /// Key of a data object holding batches `[base, last]`, whose first batch
    /// has leader epoch `epoch`, uploaded as `upload_id`.
    pub fn data_key(
        &self,
        p: &PartitionKey,
        base: i64,
        last: i64,
        epoch: i32,
        upload_id: &str,
    ) -> Result<String, LayoutError> {
        validate_upload_id(upload_id)?;
        Ok(format!(
            "{}/data/{base:020}-{last:020}-e{:010}-{upload_id}.batches",
            self.partition_dir(p),
            epoch.max(0)
        ))
    }

    /// Parses a data key of partition `p`.
    pub fn parse_data_key(&self, p: &PartitionKey, key: &str) -> Result<DataName, LayoutError> {
        let bad = || {
            err(
                "data key",
                key,
                "not <20 digits>-<20 digits>-e<10 digits>-<upload id>.batches under this partition",
            )
        };
        let name = key
            .strip_prefix(&self.data_dir(p))
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(bad)?;
        let stem = name.strip_suffix(".batches").ok_or_else(bad)?;
        let mut parts = stem.splitn(4, '-');
        let base = parts
            .next()
            .and_then(|s| parse_padded(s, ""))
            .ok_or_else(bad)?;
        let last = parts
            .next()
            .and_then(|s| parse_padded(s, ""))
            .ok_or_else(bad)?;
        let epoch = parts
            .next()
            .and_then(|s| s.strip_prefix('e'))
            .filter(|s| s.len() == 10 && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<i32>().ok())
            .ok_or_else(bad)?;
        let upload_id = parts.next().ok_or_else(bad)?;
        validate_upload_id(upload_id)?;
        let (base, last) = (
            i64::try_from(base).map_err(|_| bad())?,
            i64::try_from(last).map_err(|_| bad())?,
        );
        Ok(DataName {
            base_offset: base,
            last_offset: last,
            epoch,
            upload_id: upload_id.to_string(),
        })
    }
}

/// Checks an upload id: 1-64 characters of `[a-z0-9]`.
pub fn validate_upload_id(id: &str) -> Result<(), LayoutError> {
    if id.is_empty()
        || id.len() > 64
        || !id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(err(
            "upload id",
            id,
            "must be 1 to 64 characters of [a-z0-9]",
        ));
    }
    Ok(())
}

fn parse_padded(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Checks a topic name as Kafka does (re-exported for callers that build
/// keys from user input).
pub fn validate_topic(name: &str) -> Result<(), LayoutError> {
    validate_topic_name(name).map_err(|_| {
        err(
            "topic",
            name,
            "must be 1-249 characters of [A-Za-z0-9._-], not . or ..",
        )
    })
}

/// What a key under a cluster's root is ([`ClusterLayout::classify_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyKind {
    /// A change-feed head and its sequence number.
    Head(u64),
    /// A manifest version of a partition.
    Manifest(PartitionKey, u64),
    /// A sealed page of a partition.
    Page(PartitionKey, PageName),
    /// A data object of a partition.
    Data(PartitionKey, DataName),
    /// A probe object written and deleted by `doctor`
    /// ([`ClusterLayout::doctor_probe_key`]).
    DoctorProbe,
    /// The cluster's marker ([`ClusterLayout::marker_key`]).
    Marker,
    /// A consumer-group offsets delta and its version.
    GroupsDelta(u64),
    /// A consumer-group offsets snapshot and its version.
    GroupsSnapshot(u64),
}

impl ClusterLayout {
    /// Directory of `doctor`'s probe objects: `<root>/doctor`. Nothing else
    /// writes there, and readers of the change feed and the manifests never
    /// list it.
    pub fn doctor_dir(&self) -> String {
        format!("{}/doctor", self.root)
    }

    /// Key of a `doctor` probe object: `<root>/doctor/<probe id>.probe`,
    /// where the probe id is an upload id (1-64 characters of `[a-z0-9]`).
    pub fn doctor_probe_key(&self, probe_id: &UploadId) -> String {
        format!("{}/{probe_id}.probe", self.doctor_dir())
    }

    /// Key of the cluster's marker: `<root>/cluster.json`, written once by
    /// `shipper init` or `--create-bucket` (see the module docs).
    pub fn marker_key(&self) -> String {
        format!("{}/cluster.json", self.root)
    }

    /// Classifies any key under this cluster's root by the grammar in the
    /// module docs: the marker, a head, a group offsets delta or snapshot,
    /// a manifest version, a page, a data object or a doctor probe; anything
    /// else (a key no `*_key` function builds) is an
    /// error naming it.
    pub fn classify_key(&self, key: &str) -> Result<KeyKind, LayoutError> {
        let unknown = || err("key", key, "not a key of segmirror's layout");
        let rest = key
            .strip_prefix(self.root.as_str())
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| err("key", key, "not under this cluster's root"))?;
        if rest == "cluster.json" {
            return Ok(KeyKind::Marker);
        }
        if rest.starts_with("head/") {
            return self.parse_head_key(key).map(KeyKind::Head);
        }
        if rest.starts_with("groups/delta/") {
            return self
                .parse_groups_key(&self.groups_delta_dir(), key)
                .map(KeyKind::GroupsDelta);
        }
        if rest.starts_with("groups/snapshot/") {
            return self
                .parse_groups_key(&self.groups_snapshot_dir(), key)
                .map(KeyKind::GroupsSnapshot);
        }
        if let Some(name) = rest.strip_prefix("doctor/") {
            let id = name.strip_suffix(".probe").ok_or_else(unknown)?;
            validate_upload_id(id)?;
            return Ok(KeyKind::DoctorProbe);
        }
        let rest = rest.strip_prefix("topics/").ok_or_else(unknown)?;
        let mut parts = rest.splitn(5, '/');
        let (topic, topic_id_text, partition, kind) = (
            parts.next().ok_or_else(unknown)?,
            parts.next().ok_or_else(unknown)?,
            parts.next().ok_or_else(unknown)?,
            parts.next().ok_or_else(unknown)?,
        );
        let partition: i32 = partition
            .parse()
            .ok()
            .filter(|p: &i32| *p >= 0 && partition == p.to_string())
            .ok_or_else(|| err("key", key, "the partition is not a number"))?;
        let tp = TopicPartition::new(topic, partition)
            .map_err(|_| err("key", key, "the topic name is not valid"))?;
        let topic_id: TopicId = topic_id_text
            .parse()
            .map_err(|_| err("key", key, "the topic id is not valid"))?;
        if topic_id.to_string() != topic_id_text {
            return Err(err("key", key, "the topic id is not in its canonical form"));
        }
        let p = PartitionKey { tp, topic_id };
        match kind {
            "manifest" => self
                .parse_manifest_key(&p, key)
                .map(|v| KeyKind::Manifest(p, v)),
            "pages" => self.parse_page_key(&p, key).map(|n| KeyKind::Page(p, n)),
            "data" => self.parse_data_key(&p, key).map(|n| KeyKind::Data(p, n)),
            _ => Err(unknown()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pk() -> PartitionKey {
        PartitionKey {
            tp: TopicPartition::new("orders", 3).expect("tp"),
            topic_id: "AAAAAAAAAAAAAAAAAAAAAQ"
                .parse()
                .unwrap_or_else(|_| TopicId::random().expect("id")),
        }
    }

    #[test]
    fn cluster_dirs_parse_back() {
        for prefix in ["", "dr/x"] {
            let dir = clusters_dir(prefix).expect("dir");
            let root = ClusterLayout::new(prefix, "src-1").expect("layout");
            assert_eq!(root.root(), format!("{dir}/src-1"));
            assert_eq!(parse_cluster_dir(prefix, root.root()), Some("src-1".into()));
            assert_eq!(parse_cluster_dir(prefix, &format!("{dir}/a/b")), None);
            assert_eq!(parse_cluster_dir(prefix, "elsewhere/src-1"), None);
        }
    }

    #[test]
    fn pack_keys_are_pinned_spread_and_parse_back() {
        let l = ClusterLayout::new("dr", "src-1").expect("layout");
        let id = "0190a2b3c4d5e6f708192a3b4c5d6e7f"[..27].to_string();
        let key = l.pack_key(&id).expect("key");
        assert_eq!(
            key,
            format!("dr/segmirror/v1/src-1/packs/{}/{id}.pack", &id[25..])
        );
        assert_eq!(l.parse_pack_key(&key), Ok(id.as_str()));
        let other = ClusterLayout::new("dr", "src-2").expect("layout");
        for bad in [
            other.pack_key(&id).expect("key"),
            format!("dr/segmirror/v1/src-1/packs/zz/{id}.pack"),
            format!("dr/segmirror/v1/src-1/packs/{}/{id}.batches", &id[25..]),
            "dr/segmirror/v1/src-1/packs/ab/../x.pack".to_string(),
        ] {
            assert!(l.parse_pack_key(&bad).is_err(), "{bad}");
        }
        assert!(l.pack_key("no/slash").is_err());
    }

    #[test]
    fn group_offset_keys_are_pinned_and_parse_back() {
        let l = ClusterLayout::new("dr", "src-1").expect("layout");
        assert_eq!(
            l.groups_delta_key(7),
            "dr/segmirror/v1/src-1/groups/delta/00000000000000000007.json"
        );
        assert_eq!(
            l.groups_snapshot_key(32),
            "dr/segmirror/v1/src-1/groups/snapshot/00000000000000000032.json"
        );
        let dir = l.groups_delta_dir();
        assert_eq!(l.parse_groups_key(&dir, &l.groups_delta_key(7)), Ok(7));
        assert!(l.parse_groups_key(&dir, &l.groups_snapshot_key(7)).is_err());
        assert!(l.parse_groups_key(&dir, &format!("{dir}/x.json")).is_err());
    }

    #[test]
    fn keys_are_pinned() {
        let l = ClusterLayout::new("/dr/prod/", "Ab-c_9").expect("layout");
        let p = PartitionKey {
            tp: TopicPartition::new("orders", 3).expect("tp"),
            topic_id: "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
        };
        assert_eq!(
            l.head_key(7),
            "dr/prod/segmirror/v1/Ab-c_9/head/00000000000000000007.json"
        );
        assert_eq!(
            l.manifest_key(&p, 12),
            "dr/prod/segmirror/v1/Ab-c_9/topics/orders/vVw7a5a_QkWcK7JvBD2t8Q/3/manifest/00000000000000000012.json"
        );
        assert_eq!(
            l.data_key(&p, 100, 199, 5, "abc123").expect("key"),
            "dr/prod/segmirror/v1/Ab-c_9/topics/orders/vVw7a5a_QkWcK7JvBD2t8Q/3/data/00000000000000000100-00000000000000000199-e0000000005-abc123.batches"
        );
        let id = UploadId::parse("18bcfe5683b0123456789abcdef").expect("id");
        assert_eq!(
            l.page_key(&p, 0, 99, &id),
            "dr/prod/segmirror/v1/Ab-c_9/topics/orders/vVw7a5a_QkWcK7JvBD2t8Q/3/pages/00000000000000000000-00000000000000000099-18bcfe5683b0123456789abcdef.json"
        );
        assert_eq!(
            l.pages_dir(&p),
            "dr/prod/segmirror/v1/Ab-c_9/topics/orders/vVw7a5a_QkWcK7JvBD2t8Q/3/pages"
        );
        assert_eq!(
            ClusterLayout::new("", "c").expect("layout").head_key(0),
            "segmirror/v1/c/head/00000000000000000000.json"
        );
    }

    #[test]
    fn parse_inverts_format() {
        let l = ClusterLayout::new("p", "c1").expect("layout");
        let p = pk();
        assert_eq!(l.parse_head_key(&l.head_key(42)), Ok(42));
        assert_eq!(l.parse_manifest_key(&p, &l.manifest_key(&p, 9)), Ok(9));
        let id = UploadId::from_parts(1_700_000_000_123, 5).to_string();
        let key = l.data_key(&p, 5, 9, 2, &id).expect("key");
        assert_eq!(
            l.parse_data_key(&p, &key),
            Ok(DataName {
                base_offset: 5,
                last_offset: 9,
                epoch: 2,
                upload_id: id
            })
        );
        assert!(l.parse_head_key("p/segmirror/v1/c1/head/7.json").is_err());
        assert!(
            l.parse_data_key(&p, &key.replace(".batches", ".log"))
                .is_err()
        );
        assert!(
            l.parse_manifest_key(&p, "elsewhere/00000000000000000001.json")
                .is_err()
        );
    }

    #[test]
    fn page_keys_parse_with_and_without_an_upload_id() {
        let l = ClusterLayout::new("p", "c1").expect("layout");
        let p = pk();
        let id = UploadId::from_parts(1_700_000_000_123, 5);
        assert_eq!(
            l.parse_page_key(&p, &l.page_key(&p, 256, 511, &id)),
            Ok(PageName {
                first_offset: 256,
                last_offset: 511,
                upload_id: Some(id.to_string()),
            })
        );
        // The form written before page upload ids.
        let old = format!(
            "{}/00000000000000000000-00000000000000000255.json",
            l.pages_dir(&p)
        );
        assert_eq!(
            l.parse_page_key(&p, &old),
            Ok(PageName {
                first_offset: 0,
                last_offset: 255,
                upload_id: None,
            })
        );
        for bad in [
            format!("{}/notes.json", l.pages_dir(&p)),
            format!("{}/0-255.json", l.pages_dir(&p)),
            format!(
                "{}/00000000000000000000-00000000000000000255-UP.json",
                l.pages_dir(&p)
            ),
            format!(
                "{}/00000000000000000000-00000000000000000255.batches",
                l.pages_dir(&p)
            ),
            l.data_key(&p, 0, 255, 1, id.as_str()).expect("data key"),
            l.page_key(&p, 0, 255, &id).replace("/3/", "/4/"),
        ] {
            assert!(l.parse_page_key(&p, &bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_upload_id_gives_back_its_upload_time() {
        let id = format!("{:011x}{:016x}", 1_700_000_000_123i64, 5);
        assert_eq!(parse_upload_time_ms(&id), Some(1_700_000_000_123));
        assert_eq!(
            UploadId::parse(&id).expect("id").time_ms(),
            Some(1_700_000_000_123)
        );
        assert_eq!(parse_upload_time_ms("abc123"), None);
        assert_eq!(parse_upload_time_ms("zzzzzzzzzzzz"), None);
        assert_eq!(UploadId::from_parts(1_700_000_000_123, 5).as_str(), id);
        assert!(UploadId::parse("Upper").is_err());
    }

    #[test]
    fn names_that_could_escape_are_refused() {
        for bad in ["", ".", "..", "a/b", "a b", "../x", "é"] {
            assert!(validate_cluster_id(bad).is_err(), "{bad:?}");
        }
        assert!(normalize_prefix("a/../b").is_err());
        assert!(normalize_prefix("a//b").is_err());
        assert_eq!(normalize_prefix("/a/b/").as_deref(), Ok("a/b"));
        assert!(validate_upload_id("../x").is_err());
        assert!(validate_topic("..").is_err());
    }
    #[test]
    fn classify_key_names_every_key_the_layout_builds_and_refuses_the_rest() {
        let l = ClusterLayout::new("pre/fix", "c1").expect("layout");
        let p = pk();
        let id = UploadId::from_parts(1_700_000_000_123, 5);
        assert_eq!(l.classify_key(&l.head_key(7)), Ok(KeyKind::Head(7)));
        assert_eq!(l.classify_key(&l.marker_key()), Ok(KeyKind::Marker));
        assert_eq!(
            l.marker_key(),
            "pre/fix/segmirror/v1/c1/cluster.json",
            "the marker's key is pinned"
        );
        assert_eq!(
            l.classify_key(&l.groups_delta_key(4)),
            Ok(KeyKind::GroupsDelta(4))
        );
        assert_eq!(
            l.classify_key(&l.groups_snapshot_key(5)),
            Ok(KeyKind::GroupsSnapshot(5))
        );
        assert_eq!(
            l.classify_key(&l.manifest_key(&p, 3)),
            Ok(KeyKind::Manifest(p.clone(), 3))
        );
        assert!(matches!(
            l.classify_key(&l.page_key(&p, 0, 9, &id)),
            Ok(KeyKind::Page(q, _)) if q == p
        ));
        let data = l.data_key(&p, 0, 9, 2, id.as_str()).expect("data key");
        assert!(matches!(l.classify_key(&data), Ok(KeyKind::Data(q, _)) if q == p));
        assert_eq!(
            l.classify_key(&l.doctor_probe_key(&id)),
            Ok(KeyKind::DoctorProbe)
        );
        assert!(
            l.doctor_probe_key(&id)
                .starts_with(&format!("{}/", l.doctor_dir()))
        );
        for bad in [
            "pre/fix/segmirror/v1/c1/notes.txt".to_string(),
            "pre/fix/segmirror/v1/c2/head/00000000000000000001.json".to_string(),
            format!("{}/head/1.json", l.root()),
            format!(
                "{}/topics/orders/x/0/manifest/00000000000000000001.json",
                l.root()
            ),
            format!(
                "{}/topics/orders/{}/01/data/x.batches",
                l.root(),
                p.topic_id
            ),
            format!("{}/topics/orders/{}/0/other/x", l.root(), p.topic_id),
            format!("{}/doctor/UPPER.probe", l.root()),
            format!("{}/cluster.json.tmp", l.root()),
            format!("{}/groups/delta/1.json", l.root()),
            format!("{}/groups/other/00000000000000000001.json", l.root()),
        ] {
            assert!(l.classify_key(&bad).is_err(), "{bad} was classified");
        }
    }
}
