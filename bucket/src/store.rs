//! Reading and committing manifests, pages, data objects and heads through
//! one `Arc<dyn ObjectStore>`.
//!
//! Commit protocol (all backends: `memory://`, `file://`, S3):
//! - data objects and pages are written first, each with create-if-absent
//!   under a key no other writer uses (`layout` puts a unique upload id in
//!   data keys; page keys are content-addressed by offsets and identical
//!   when rewritten);
//! - a manifest version is written last, create-if-absent at
//!   `manifest/<version>`: of two writers racing for a version exactly one
//!   wins and the other gets [`StoreError::Conflict`], re-reads and decides
//!   again ([`ManifestStore::update_manifest`]);
//! - then the head of the change feed is published the same way.
//!
//! So a manifest never names an object that is not fully written, and no
//! object a manifest names is ever overwritten.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use manifest::feed::{Head, KEEP_HEADS, ManifestSlice};
use manifest::groups::{
    GroupsDelta, GroupsPointer, GroupsSnapshot, GroupsState, MAX_DELTAS_PER_READ,
};
use manifest::inventory::Inventory;
use manifest::layout::{ClusterLayout, LayoutError, PartitionKey};
use manifest::partition::{ManifestFormatError, Page, PartitionManifest};
use manifest::topic_pattern::Selection;

/// What can go wrong talking to the bucket.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The object does not exist (yet).
    #[error("object {key} not found")]
    NotFound {
        /// The key.
        key: String,
    },
    /// Another writer created this object first: re-read and decide again.
    #[error("another writer won: {key} already exists")]
    Conflict {
        /// The key.
        key: String,
    },
    /// The object store failed.
    #[error("{op} {key}: {source}")]
    Store {
        /// The operation.
        op: &'static str,
        /// The key.
        key: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
    /// An object could not be decoded.
    #[error("{key}: {source}")]
    Format {
        /// The key.
        key: String,
        /// What is wrong.
        #[source]
        source: ManifestFormatError,
    },
    /// An object describes another partition or cluster than its key says.
    #[error("{key}: {reason}")]
    Identity {
        /// The key.
        key: String,
        /// What differs.
        reason: String,
    },
    /// The store refused access (bad credentials, no permission, no such
    /// bucket): permanent, named with where and with which credentials.
    #[error("{op} {key}: access refused by {location}: {source}")]
    Denied {
        /// The operation.
        op: &'static str,
        /// The key.
        key: String,
        /// The bucket and credential source (never a secret).
        location: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
    /// A key or name is invalid.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// [`ManifestStore::update_manifest`] kept losing races.
    #[error("gave up committing {key} after {attempts} lost races")]
    TooManyConflicts {
        /// The last key tried.
        key: String,
        /// Attempts made.
        attempts: u32,
    },
}

impl StoreError {
    /// True for errors worth retrying with backoff (store unavailable,
    /// object missing, lost race); false for data that will not get better
    /// (malformed objects, wrong identity, bad names, permission errors).
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::NotFound { .. }
            | StoreError::Conflict { .. }
            | StoreError::TooManyConflicts { .. } => true,
            StoreError::Store { source, .. } => retryable(source),
            StoreError::Format { .. }
            | StoreError::Identity { .. }
            | StoreError::Layout(_)
            | StoreError::Denied { .. } => false,
        }
    }

    fn from_store(op: &'static str, key: &str, e: object_store::Error) -> StoreError {
        match e {
            object_store::Error::NotFound { .. } => StoreError::NotFound {
                key: key.to_string(),
            },
            object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. } => StoreError::Conflict {
                key: key.to_string(),
            },
            source => StoreError::Store {
                op,
                key: key.to_string(),
                source,
            },
        }
    }
}

/// Permission, credential and missing-bucket errors.
fn is_denied(e: &object_store::Error) -> bool {
    match e {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => true,
        other => {
            let text = other.to_string();
            text.contains("NoSuchBucket")
                || text.contains("InvalidAccessKeyId")
                || text.contains("SignatureDoesNotMatch")
                || text.contains("AccessDenied")
        }
    }
}

/// Most attempts [`ManifestStore::update_manifest`] makes.
pub const MAX_COMMIT_ATTEMPTS: u32 = 16;

/// A source cluster's objects in a bucket.
#[derive(Debug, Clone)]
pub struct ManifestStore {
    store: Arc<dyn ObjectStore>,
    layout: ClusterLayout,
    location: String,
    /// Ranges of objects read ahead (`ManifestStore::read_ahead`), each
    /// handed out once by `get_in`/`get_stream_in`, shared by the clones.
    ahead: Arc<std::sync::Mutex<ReadAhead>>,
    /// Heads read to resolve chains of deltas ([`ManifestStore::manifest_of`]),
    /// shared by the clones: a restart resolving 1,000 partitions whose
    /// chains name the same 32 heads reads each once, not once per
    /// partition. Heads are immutable.
    chain_heads: Arc<std::sync::Mutex<HeadCache>>,
    /// Held while a chain head missing from the cache is read, so that
    /// partitions resolved concurrently wait for that read instead of
    /// making their own.
    chain_head_read: Arc<tokio::sync::Mutex<()>>,
}

/// Decoded heads by sequence number, newest read last, at most
/// [`HEAD_CACHE_BYTES`] of their encoded size.
#[derive(Debug, Default)]
struct HeadCache {
    heads: std::collections::VecDeque<(u64, Arc<Head>, usize)>,
    bytes: usize,
}

/// Encoded bytes of heads [`HeadCache`] keeps: 85 heads of 1,000
/// partitions (about 750 KB each), more than a chain names; 8 of 10,000.
const HEAD_CACHE_BYTES: usize = 64 << 20;

impl HeadCache {
    fn get(&self, seq: u64) -> Option<Arc<Head>> {
        self.heads
            .iter()
            .find(|(s, _, _)| *s == seq)
            .map(|(_, h, _)| Arc::clone(h))
    }

    fn insert(&mut self, seq: u64, head: Arc<Head>, bytes: usize) {
        if bytes > HEAD_CACHE_BYTES || self.get(seq).is_some() {
            return;
        }
        while self.bytes + bytes > HEAD_CACHE_BYTES {
            let Some((_, _, b)) = self.heads.pop_front() else {
                break;
            };
            self.bytes -= b;
        }
        self.bytes += bytes;
        self.heads.push_back((seq, head, bytes));
    }
}

/// Ranges read ahead, by object key and byte range.
type ReadAhead = std::collections::HashMap<(String, u64, u64), Bytes>;

/// Runs to read ahead: the object key, the run's bytes, the ranges in it.
pub type AheadRuns = Vec<(String, std::ops::Range<u64>, Vec<std::ops::Range<u64>>)>;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl ManifestStore {
    /// Objects of `layout`'s cluster in `store`.
    pub fn new(store: Arc<dyn ObjectStore>, layout: ClusterLayout) -> ManifestStore {
        let location = store.to_string();
        ManifestStore {
            store,
            layout,
            location,
            ahead: Arc::default(),
            chain_heads: Arc::default(),
            chain_head_read: Arc::default(),
        }
    }

    /// Reads `runs` (per object key, byte runs each holding several
    /// ranges wanted) with one ranged GET per run, concurrently, and keeps
    /// each range's bytes until `get_in` or `get_stream_in` asks for that
    /// exact range (once) or [`ManifestStore::drop_read_ahead`]: the
    /// ranges of many partitions in one pack cost a GET per run, not per
    /// range. A run that cannot be read is left out (each range is then
    /// read on its own, and any error reported there). Returns the bytes
    /// read ahead.
    pub async fn read_ahead(
        &self,
        runs: Vec<(String, std::ops::Range<u64>, Vec<std::ops::Range<u64>>)>,
    ) -> u64 {
        let read: Vec<_> =
            futures::stream::iter(runs.into_iter().map(|(key, run, ranges)| async move {
                let got = self.get_in(&key, Some(run.clone())).await;
                (key, run, ranges, got)
            }))
            .buffer_unordered(8)
            .collect()
            .await;
        let mut total = 0;
        let Ok(mut ahead) = self.ahead.lock() else {
            return 0;
        };
        for (key, run, ranges, got) in read {
            let Ok(bytes) = got else { continue };
            for r in ranges {
                let (Some(a), Some(b)) =
                    (r.start.checked_sub(run.start), r.end.checked_sub(run.start))
                else {
                    continue;
                };
                let (Ok(a), Ok(b)) = (usize::try_from(a), usize::try_from(b)) else {
                    continue;
                };
                if b <= bytes.len() && a <= b {
                    total += (b - a) as u64;
                    ahead.insert((key.clone(), r.start, r.end), bytes.slice(a..b));
                }
            }
        }
        total
    }

    /// Forgets what was read ahead and not asked for.
    pub fn drop_read_ahead(&self) {
        if let Ok(mut ahead) = self.ahead.lock() {
            ahead.clear();
        }
    }

    /// The bytes of `range` of `key` read ahead, taken.
    fn take_ahead(&self, key: &str, range: &Option<std::ops::Range<u64>>) -> Option<Bytes> {
        let r = range.as_ref()?;
        self.ahead
            .lock()
            .ok()?
            .remove(&(key.to_string(), r.start, r.end))
    }

    /// A clone with a read-ahead of its own (`read_ahead` and
    /// `drop_read_ahead` on it touch nothing the other clones read ahead):
    /// for a task that reads ahead while its owner goes on.
    pub fn with_own_read_ahead(&self) -> ManifestStore {
        ManifestStore {
            ahead: Arc::default(),
            ..self.clone()
        }
    }

    /// Names the bucket and credential source in permanent errors, e.g.
    /// `s3://dr-bucket/prefix (endpoint https://s3.us-east-1.amazonaws.com, credentials: environment (AWS_ACCESS_KEY_ID))`.
    pub fn with_location(mut self, location: impl Into<String>) -> ManifestStore {
        self.location = location.into();
        self
    }

    fn store_err(&self, op: &'static str, key: &str, e: object_store::Error) -> StoreError {
        if is_denied(&e) {
            return StoreError::Denied {
                op,
                key: key.to_string(),
                location: self.location.clone(),
                source: e,
            };
        }
        StoreError::from_store(op, key, e)
    }

    /// The key layout.
    pub fn layout(&self) -> &ClusterLayout {
        &self.layout
    }

    /// The underlying store.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Writes `bytes` at `key` only if nothing is there.
    pub async fn put_new(&self, key: &str, bytes: Bytes) -> Result<(), StoreError> {
        self.put_new_payload(key, PutPayload::from_bytes(bytes))
            .await
    }

    /// [`ManifestStore::put_new`] of `parts` one after another, sent as
    /// they are (no copy into one buffer): one PUT.
    pub async fn put_new_parts(&self, key: &str, parts: Vec<Bytes>) -> Result<(), StoreError> {
        self.put_new_payload(key, parts.into_iter().collect()).await
    }

    async fn put_new_payload(&self, key: &str, payload: PutPayload) -> Result<(), StoreError> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        self.store
            .put_opts(&Path::from(key), payload, opts)
            .await
            .map(|_| ())
            .map_err(|e| self.store_err("put", key, e))
    }

    /// Starts a multipart upload of a new object at `key` (for objects
    /// larger than one part). Completing a multipart upload is not
    /// create-if-absent on every store (`object_store` has no conditional
    /// multipart), so this is for keys that no other writer can choose:
    /// data keys, which carry a fresh upload id (see `layout`). Writers
    /// check what they find at the key when a completion fails.
    pub async fn put_multipart_new(
        &self,
        key: &str,
    ) -> Result<Box<dyn object_store::MultipartUpload>, StoreError> {
        self.store
            .put_multipart_opts(&Path::from(key), Default::default())
            .await
            .map_err(|e| self.store_err("put_multipart", key, e))
    }

    /// Opens an object for reading in pieces, for objects too large to hold
    /// whole. One GET, as [`ManifestStore::get`]. The body's length is what
    /// the store announced; a body that ends short or runs long is the
    /// reader's to detect (it knows the length it expects). Local files are
    /// read in [`READ_PIECE`] pieces on the blocking pool (object_store's own
    /// file stream reads 8 KiB at a time).
    pub async fn get_stream(&self, key: &str) -> Result<ObjectBody, StoreError> {
        self.get_stream_in(key, None).await
    }

    /// [`ManifestStore::get_stream`] of the bytes `range` of the object
    /// (one ranged GET), or of the whole object when `range` is `None`: a
    /// range inside a pack (`manifest::pack`) is read this way.
    pub async fn get_stream_in(
        &self,
        key: &str,
        range: Option<std::ops::Range<u64>>,
    ) -> Result<ObjectBody, StoreError> {
        if let Some(bytes) = self.take_ahead(key, &range) {
            return Ok(ObjectBody {
                len: bytes.len() as u64,
                pieces: futures::stream::once(async move { Ok(bytes) }).boxed(),
            });
        }
        let result = self.get_result(key, range).await?;
        let len = result.range.end.saturating_sub(result.range.start);
        let pieces = match result.payload {
            object_store::GetResultPayload::File(file, path) => {
                file_pieces(file, path, result.range.start, len)
            }
            object_store::GetResultPayload::Stream(s) => s,
        };
        // A body that ends short of (or runs past) what the store announced
        // is a transport fault, reported as a store error at its end, as
        // [`ManifestStore::get`] reports a second short body. The store and
        // key ride in the state (moved, not cloned per piece).
        let state = (pieces, 0u64, Some((self.clone(), key.to_string())));
        let checked =
            futures::stream::unfold(state, move |(mut pieces, mut got, ctx)| async move {
                let (this, key) = ctx?;
                match pieces.next().await {
                    Some(Ok(piece)) => {
                        got += piece.len() as u64;
                        Some((Ok(piece), (pieces, got, Some((this, key)))))
                    }
                    Some(Err(e)) => {
                        Some((Err(this.store_err("get", &key, e)), (pieces, got, None)))
                    }
                    None if got == len => None,
                    None => {
                        let e = object_store::Error::Generic {
                            store: "segmirror",
                            source: format!("body of {got} bytes where the store announced {len}")
                                .into(),
                        };
                        Some((Err(this.store_err("get", &key, e)), (pieces, got, None)))
                    }
                }
            });
        Ok(ObjectBody {
            len,
            pieces: checked.boxed(),
        })
    }

    /// Reads a whole object. A body of another length than the store
    /// announced for it is a transport fault (a cut connection, a broken
    /// proxy): the object is read once more, and a second short body is a
    /// store error (transient, so callers retry), never bytes to decode.
    pub async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        self.get_in(key, None).await
    }

    /// [`ManifestStore::get`] of the bytes `range` of the object (one
    /// ranged GET), or of the whole object when `range` is `None`. A range
    /// past the object's end is a store error (the object is shorter than
    /// the manifest that names it says).
    pub async fn get_in(
        &self,
        key: &str,
        range: Option<std::ops::Range<u64>>,
    ) -> Result<Bytes, StoreError> {
        if let Some(bytes) = self.take_ahead(key, &range) {
            return Ok(bytes);
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.get_result(key, range.clone()).await?;
            let announced = result.range.end.saturating_sub(result.range.start);
            let bytes = result
                .bytes()
                .await
                .map_err(|e| self.store_err("get", key, e))?;
            if bytes.len() as u64 == announced {
                return Ok(bytes);
            }
            let detail = format!(
                "body of {} bytes where the store announced {announced}",
                bytes.len()
            );
            if attempt >= 2 {
                return Err(self.store_err(
                    "get",
                    key,
                    object_store::Error::Generic {
                        store: "segmirror",
                        source: detail.into(),
                    },
                ));
            }
            tracing::warn!(key, %detail, "short object body; reading it again");
        }
    }

    /// One GET of `key`, of `range` when given. A range the store answers
    /// with other bytes than asked for (a store that ignores ranges) is a
    /// store error, never bytes to decode.
    async fn get_result(
        &self,
        key: &str,
        range: Option<std::ops::Range<u64>>,
    ) -> Result<object_store::GetResult, StoreError> {
        let options = object_store::GetOptions {
            range: range.clone().map(object_store::GetRange::Bounded),
            ..Default::default()
        };
        let result = self
            .store
            .get_opts(&Path::from(key), options)
            .await
            .map_err(|e| self.store_err("get", key, e))?;
        if let Some(asked) = range
            && result.range != asked
        {
            let e = object_store::Error::Generic {
                store: "segmirror",
                source: format!(
                    "asked for bytes {}..{}, the store answered {}..{} (of {})",
                    asked.start, asked.end, result.range.start, result.range.end, result.meta.size
                )
                .into(),
            };
            return Err(self.store_err("get", key, e));
        }
        Ok(result)
    }

    /// Deletes an object (absent is fine).
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self.store.delete(&Path::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.store_err("delete", key, e)),
        }
    }

    /// Lists the keys under `dir`, sorted.
    pub async fn list(&self, dir: &str) -> Result<Vec<String>, StoreError> {
        let prefix = Path::from(dir);
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| self.store_err("list", dir, e))?;
        let mut keys: Vec<String> = metas.into_iter().map(|m| m.location.to_string()).collect();
        keys.sort();
        Ok(keys)
    }

    /// Reads manifest `version` of partition `p`, checking that it describes
    /// that partition of this cluster.
    pub async fn get_manifest(
        &self,
        p: &PartitionKey,
        version: u64,
    ) -> Result<PartitionManifest, StoreError> {
        let key = self.layout.manifest_key(p, version);
        let bytes = self.get(&key).await?;
        self.decode_manifest(p, version, key, &bytes)
    }

    /// Most bytes a [`ManifestSlice`] may name: a head line is not trusted
    /// to size a read (a manifest of 10,000 ranges is about 4 MiB, pages
    /// keep it far smaller).
    pub const MAX_SLICE_BYTES: u64 = 64 << 20;

    /// Version `version` of `p` where a head line says it is: the bytes
    /// `slice` names of a shared object (one ranged GET), checked as
    /// [`ManifestStore::get_manifest`] checks an object of its own.
    pub async fn get_manifest_slice(
        &self,
        p: &PartitionKey,
        version: u64,
        slice: &ManifestSlice,
    ) -> Result<PartitionManifest, StoreError> {
        let key = format!("{}@{}+{}", slice.key, slice.offset, slice.bytes);
        let end = slice
            .offset
            .checked_add(slice.bytes)
            .filter(|_| slice.bytes > 0 && slice.bytes <= Self::MAX_SLICE_BYTES);
        let Some(end) = end else {
            return Err(StoreError::Identity {
                key,
                reason: format!("a manifest slice of {} bytes", slice.bytes),
            });
        };
        let bytes = self.get_in(&slice.key, Some(slice.offset..end)).await?;
        self.decode_manifest(p, version, key, &bytes)
    }

    #[allow(clippy::result_large_err)] // StoreError, as every call here returns
    fn decode_manifest(
        &self,
        p: &PartitionKey,
        version: u64,
        key: String,
        bytes: &[u8],
    ) -> Result<PartitionManifest, StoreError> {
        let m = PartitionManifest::decode_from(Some(&key), bytes).map_err(|source| {
            StoreError::Format {
                key: key.clone(),
                source,
            }
        })?;
        let identity_ok = m.version == version
            && m.source_cluster_id == self.layout.cluster_id()
            && m.topic == p.tp.topic
            && m.partition == p.tp.partition
            && m.topic_id == p.topic_id;
        if !identity_ok {
            return Err(StoreError::Identity {
                key,
                reason: format!(
                    "manifest says version {} of {}-{} (topic id {}) from cluster {}",
                    m.version, m.topic, m.partition, m.topic_id, m.source_cluster_id
                ),
            });
        }
        Ok(m)
    }

    /// The manifest version a head entry names for `p`: the object of
    /// that version, or, when the entry says deltas made it
    /// (`manifest::feed::DeltaChain`, layout 2), the object the chain
    /// follows (its own, or its slice of a shared one) with each delta
    /// applied in order, read from the heads that
    /// carry them (one GET each). A chain that does not resolve (a head
    /// without the delta, a delta that does not apply) is an identity
    /// error naming the head: never a manifest made up.
    pub async fn manifest_of(
        &self,
        p: &PartitionKey,
        entry: &manifest::feed::HeadEntry,
    ) -> Result<PartitionManifest, StoreError> {
        let Some(chain) = &entry.chain else {
            return self.get_manifest(p, entry.manifest_version).await;
        };
        let mut m = match &chain.base {
            Some(slice) => {
                self.get_manifest_slice(p, chain.object_version, slice)
                    .await?
            }
            None => self.get_manifest(p, chain.object_version).await?,
        };
        let map_key = entry.map_key();
        for &seq in &chain.heads {
            let head = self.get_chain_head(seq).await?;
            let unresolved = |reason: String| StoreError::Identity {
                key: self.layout.head_key(seq),
                reason,
            };
            let delta = head
                .partitions
                .get(&map_key)
                .filter(|e| e.topic_id == p.topic_id)
                .and_then(|e| e.delta.as_ref())
                .ok_or_else(|| unresolved(format!("carries no delta of {map_key}")))?;
            m = delta
                .apply(&m)
                .map_err(|e| unresolved(format!("the delta of {map_key}: {e}")))?;
        }
        if m.version != entry.manifest_version {
            return Err(StoreError::Identity {
                key: self.layout.manifest_key(p, chain.object_version),
                reason: format!(
                    "the chain of {map_key} makes version {}, the head names {}",
                    m.version, entry.manifest_version
                ),
            });
        }
        Ok(m)
    }

    /// The latest manifest of `p` from its head entry: the version the
    /// entry names when deltas made it ([`ManifestStore::manifest_of`]),
    /// else [`ManifestStore::latest_manifest`] from the entry's version (a
    /// newer object the head does not name yet included).
    pub async fn latest_from(
        &self,
        p: &PartitionKey,
        entry: &manifest::feed::HeadEntry,
    ) -> Result<Option<PartitionManifest>, StoreError> {
        if entry.chain.is_some() {
            return self.manifest_of(p, entry).await.map(Some);
        }
        self.latest_manifest(p, Some(entry.manifest_version)).await
    }

    /// The latest manifest version of `p`. With `known` (a version known to
    /// exist, from the change feed or an earlier read) it probes forward
    /// from there; without, it lists the manifest dir once. A known version
    /// that is no object was made by deltas (layout 2): it is resolved from
    /// the newest head. For the newest version whatever made it, without a
    /// head entry at hand, see [`ManifestStore::newest_manifest`]; with
    /// one, [`ManifestStore::latest_from`].
    pub async fn latest_manifest(
        &self,
        p: &PartitionKey,
        known: Option<u64>,
    ) -> Result<Option<PartitionManifest>, StoreError> {
        match self.latest_object(p, known).await {
            Err(StoreError::NotFound { .. }) if known.is_some() => self.newest_manifest(p).await,
            other => other,
        }
    }

    /// The newest version of `p`, an object or made by deltas: the newest
    /// head is read (one LIST and one GET) and its entry resolved
    /// ([`ManifestStore::latest_from`]); without an entry, the newest
    /// object. For one-shot readers (`verify`, `repair`, the harnesses).
    pub async fn newest_manifest(
        &self,
        p: &PartitionKey,
    ) -> Result<Option<PartitionManifest>, StoreError> {
        let entry = self.latest_head(None).await?.and_then(|h| {
            h.partitions
                .get(&format!("{}-{}", p.tp.topic, p.tp.partition))
                .filter(|e| e.topic_id == p.topic_id)
                .cloned()
        });
        match entry {
            Some(e) if e.chain.is_some() => self.manifest_of(p, &e).await.map(Some),
            _ => self.latest_object(p, None).await,
        }
    }

    /// The newest manifest object of `p` (see [`ManifestStore::latest_manifest`]).
    async fn latest_object(
        &self,
        p: &PartitionKey,
        known: Option<u64>,
    ) -> Result<Option<PartitionManifest>, StoreError> {
        let mut latest = match known {
            Some(v) => v,
            None => {
                let keys = self.list(&self.layout.manifest_dir(p)).await?;
                match keys
                    .iter()
                    .filter_map(|k| self.layout.parse_manifest_key(p, k).ok())
                    .max()
                {
                    Some(v) => v,
                    None => return Ok(None),
                }
            }
        };
        // Walk forward past versions committed after `known` (or after the
        // listing).
        loop {
            match self.get_manifest(p, latest + 1).await {
                Ok(_) => latest += 1,
                Err(StoreError::NotFound { .. }) => break,
                Err(e) => return Err(e),
            }
        }
        self.get_manifest(p, latest).await.map(Some)
    }

    /// Commits `m` as version `m.version`, create-if-absent. Returns
    /// [`StoreError::Conflict`] when another writer committed that version.
    pub async fn commit_manifest(&self, m: &PartitionManifest) -> Result<(), StoreError> {
        let p = PartitionKey {
            tp: m.topic_partition().map_err(|source| StoreError::Format {
                key: String::new(),
                source,
            })?,
            topic_id: m.topic_id,
        };
        let key = self.layout.manifest_key(&p, m.version);
        if m.source_cluster_id != self.layout.cluster_id() {
            return Err(StoreError::Identity {
                key,
                reason: format!(
                    "manifest of cluster {} in {}'s layout",
                    m.source_cluster_id,
                    self.layout.cluster_id()
                ),
            });
        }
        let bytes = m.encode().map_err(|source| StoreError::Format {
            key: key.clone(),
            source,
        })?;
        self.put_new(&key, Bytes::from(bytes)).await
    }

    /// Read-decide-commit loop: `decide` gets the latest manifest (or None)
    /// and returns the next one to commit (its `version` is set here to the
    /// next number) or None to commit nothing. On a lost race it re-reads
    /// and decides again. Returns what was committed.
    pub async fn update_manifest<E>(
        &self,
        p: &PartitionKey,
        mut known: Option<u64>,
        mut decide: impl FnMut(Option<&PartitionManifest>) -> Result<Option<PartitionManifest>, E>,
    ) -> Result<Result<Option<PartitionManifest>, E>, StoreError> {
        let mut last_key = String::new();
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let current = self.latest_manifest(p, known).await?;
            let next = match decide(current.as_ref()) {
                Ok(Some(next)) => next,
                Ok(None) => return Ok(Ok(None)),
                Err(e) => return Ok(Err(e)),
            };
            let mut next = next;
            next.version = current.as_ref().map_or(1, |c| c.version + 1);
            next.committed_at_ms = now_ms();
            match self.commit_manifest(&next).await {
                Ok(()) => return Ok(Ok(Some(next))),
                Err(StoreError::Conflict { key }) => {
                    known = current.as_ref().map(|c| c.version);
                    last_key = key;
                }
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::TooManyConflicts {
            key: last_key,
            attempts: MAX_COMMIT_ATTEMPTS,
        })
    }

    /// Writes a sealed page, create-if-absent (idempotent: an identical
    /// page may already be there from an earlier attempt). A page key
    /// carries a fresh upload id (`layout::ClusterLayout::page_key`), so a
    /// [`StoreError::Conflict`] (another page at the key) is a real race:
    /// the caller's commit is lost, never the page replaced.
    pub async fn put_page(&self, key: &str, page: &Page) -> Result<(), StoreError> {
        let bytes = page.encode().map_err(|source| StoreError::Format {
            key: key.to_string(),
            source,
        })?;
        match self.put_new(key, Bytes::from(bytes)).await {
            Ok(()) => Ok(()),
            Err(StoreError::Conflict { .. }) => {
                let existing = self.get_page(key).await?;
                if existing.ranges == page.ranges {
                    Ok(())
                } else {
                    Err(StoreError::Conflict {
                        key: key.to_string(),
                    })
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Reads a sealed page.
    pub async fn get_page(&self, key: &str) -> Result<Page, StoreError> {
        let bytes = self.get(key).await?;
        Page::decode_from(Some(key), &bytes).map_err(|source| StoreError::Format {
            key: key.to_string(),
            source,
        })
    }

    /// Writes a group offsets delta, create-if-absent
    /// ([`StoreError::Conflict`] when its version exists).
    pub async fn put_groups_delta(&self, d: &GroupsDelta) -> Result<(), StoreError> {
        let key = self.layout.groups_delta_key(d.version);
        let bytes = d.encode().map_err(|source| StoreError::Format {
            key: key.clone(),
            source,
        })?;
        self.put_new(&key, Bytes::from(bytes)).await
    }

    /// Writes a group offsets snapshot, create-if-absent (an existing one
    /// of the same version is the same state: success).
    pub async fn put_groups_snapshot(&self, s: &GroupsSnapshot) -> Result<(), StoreError> {
        let key = self.layout.groups_snapshot_key(s.version);
        let bytes = s.encode().map_err(|source| StoreError::Format {
            key: key.clone(),
            source,
        })?;
        match self.put_new(&key, Bytes::from(bytes)).await {
            Err(StoreError::Conflict { .. }) => Ok(()),
            other => other,
        }
    }

    /// Reads group offsets delta `version`.
    pub async fn get_groups_delta(&self, version: u64) -> Result<GroupsDelta, StoreError> {
        let key = self.layout.groups_delta_key(version);
        let bytes = self.get(&key).await?;
        let d =
            GroupsDelta::decode_from(Some(&key), &bytes).map_err(|source| StoreError::Format {
                key: key.clone(),
                source,
            })?;
        if d.version != version || d.source_cluster_id != self.layout.cluster_id() {
            return Err(StoreError::Identity {
                key,
                reason: format!(
                    "delta says version {} of cluster {}",
                    d.version, d.source_cluster_id
                ),
            });
        }
        Ok(d)
    }

    /// Reads group offsets snapshot `version`.
    pub async fn get_groups_snapshot(&self, version: u64) -> Result<GroupsSnapshot, StoreError> {
        let key = self.layout.groups_snapshot_key(version);
        let bytes = self.get(&key).await?;
        let s = GroupsSnapshot::decode_from(Some(&key), &bytes).map_err(|source| {
            StoreError::Format {
                key: key.clone(),
                source,
            }
        })?;
        if s.version != version || s.source_cluster_id != self.layout.cluster_id() {
            return Err(StoreError::Identity {
                key,
                reason: format!(
                    "snapshot says version {} of cluster {}",
                    s.version, s.source_cluster_id
                ),
            });
        }
        Ok(s)
    }

    /// The group offsets at `target.version` (or later, with `probe`: then
    /// also every delta written beyond it, as a writer must see them before
    /// writing the next). Starts from `known` (a version and its state)
    /// when it is at or after the target's snapshot and at most
    /// [`MAX_DELTAS_PER_READ`] behind; otherwise from the snapshot. Costs
    /// one GET per delta read (plus one for the snapshot, and one answered
    /// 404 when probing).
    pub async fn load_groups(
        &self,
        known: Option<(u64, &GroupsState)>,
        target: Option<GroupsPointer>,
        probe: bool,
    ) -> Result<(u64, GroupsState), StoreError> {
        let target_version = target.map_or(0, |t| t.version);
        let snapshot_version = target.map_or(0, |t| t.snapshot_version);
        let near = known.filter(|(v, _)| {
            *v >= snapshot_version && target_version.saturating_sub(*v) <= MAX_DELTAS_PER_READ
        });
        let from_known = near.is_some();
        let (mut version, mut state) = match near {
            Some((v, s)) => (v, s.clone()),
            None => self.groups_snapshot_or_empty(snapshot_version).await?,
        };
        while version < target_version || probe {
            match self.get_groups_delta(version + 1).await {
                Ok(d) => {
                    state.apply(&d);
                    version += 1;
                }
                Err(StoreError::NotFound { .. }) if version >= target_version => break,
                // Pruned while the known state was old: start over from
                // the snapshot.
                Err(StoreError::NotFound { .. }) if from_known => {
                    return Box::pin(self.load_groups(None, target, probe)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Ok((version, state))
    }

    async fn groups_snapshot_or_empty(
        &self,
        version: u64,
    ) -> Result<(u64, GroupsState), StoreError> {
        if version == 0 {
            return Ok((0, GroupsState::default()));
        }
        let s = self.get_groups_snapshot(version).await?;
        Ok((version, s.state()))
    }

    /// Deletes the group offsets deltas up to `keep_snapshot` and the
    /// snapshots before it (best effort; readers at least
    /// [`MAX_DELTAS_PER_READ`] behind fall back to `keep_snapshot`).
    /// Returns how many objects were deleted.
    pub async fn prune_groups(&self, keep_snapshot: u64) -> Result<u64, StoreError> {
        let mut deleted = 0;
        for (dir, last) in [
            (self.layout.groups_delta_dir(), keep_snapshot),
            (
                self.layout.groups_snapshot_dir(),
                keep_snapshot.saturating_sub(1),
            ),
        ] {
            for key in self.list(&dir).await? {
                if self
                    .layout
                    .parse_groups_key(&dir, &key)
                    .is_ok_and(|v| v <= last)
                {
                    self.delete(&key).await?;
                    deleted += 1;
                }
            }
        }
        Ok(deleted)
    }

    /// Reads head `seq`.
    pub async fn get_head(&self, seq: u64) -> Result<Head, StoreError> {
        let key = self.layout.head_key(seq);
        let bytes = self.get(&key).await?;
        self.decode_head(seq, key, &bytes)
    }

    /// [`ManifestStore::get_head`] through the cache of heads chains name.
    async fn get_chain_head(&self, seq: u64) -> Result<Arc<Head>, StoreError> {
        let cached = || self.chain_heads.lock().ok().and_then(|c| c.get(seq));
        if let Some(h) = cached() {
            return Ok(h);
        }
        let _reading = self.chain_head_read.lock().await;
        if let Some(h) = cached() {
            return Ok(h);
        }
        let key = self.layout.head_key(seq);
        let bytes = self.get(&key).await?;
        let head = Arc::new(self.decode_head(seq, key, &bytes)?);
        if let Ok(mut c) = self.chain_heads.lock() {
            c.insert(seq, Arc::clone(&head), bytes.len());
        }
        Ok(head)
    }

    #[allow(clippy::result_large_err)] // StoreError, as every call here returns
    fn decode_head(&self, seq: u64, key: String, bytes: &[u8]) -> Result<Head, StoreError> {
        let head = Head::decode_from(Some(&key), bytes).map_err(|source| StoreError::Format {
            key: key.clone(),
            source,
        })?;
        if head.seq != seq || head.source_cluster_id != self.layout.cluster_id() {
            return Err(StoreError::Identity {
                key,
                reason: format!(
                    "head says seq {} of cluster {}",
                    head.seq, head.source_cluster_id
                ),
            });
        }
        Ok(head)
    }

    /// The highest head sequence present, by listing the head dir.
    pub async fn latest_head_seq(&self) -> Result<Option<u64>, StoreError> {
        let keys = self.list(&self.layout.head_dir()).await?;
        Ok(keys
            .iter()
            .filter_map(|k| self.layout.parse_head_key(k).ok())
            .max())
    }

    /// The newest head: from `known` (a seq known to exist) probing
    /// forward, or by listing.
    pub async fn latest_head(&self, known: Option<u64>) -> Result<Option<Head>, StoreError> {
        let mut seq = match known {
            Some(s) => s,
            None => match self.latest_head_seq().await? {
                Some(s) => s,
                None => return Ok(None),
            },
        };
        // The newest head a probe read is the answer: not read again.
        let mut newest = None;
        loop {
            match self.get_head(seq + 1).await {
                Ok(h) => {
                    seq += 1;
                    newest = Some(h);
                }
                Err(StoreError::NotFound { .. }) => break,
                Err(e) => return Err(e),
            }
        }
        if newest.is_some() {
            return Ok(newest);
        }
        match self.get_head(seq).await {
            Ok(h) => Ok(Some(h)),
            // Pruned under us: list instead.
            Err(StoreError::NotFound { .. }) if known.is_some() => {
                Box::pin(self.latest_head(None)).await
            }
            Err(e) => Err(e),
        }
    }

    /// Publishes a new head with `entries` merged into the newest one
    /// (create-if-absent at `seq + 1`; a lost race re-reads and merges
    /// again). Returns the head written, or the current one when nothing
    /// changed. `known` is the last seq this writer saw.
    pub async fn publish_head(
        &self,
        known: Option<u64>,
        writer: &str,
        entries: &[manifest::feed::HeadEntry],
    ) -> Result<Head, StoreError> {
        self.publish_head_with(known, writer, entries, None).await
    }

    /// [`ManifestStore::publish_head`], also naming group offsets `groups`
    /// (kept when the newest head names a newer version).
    pub async fn publish_head_with(
        &self,
        known: Option<u64>,
        writer: &str,
        entries: &[manifest::feed::HeadEntry],
        groups: Option<GroupsPointer>,
    ) -> Result<Head, StoreError> {
        self.commit_head(known, writer, entries, groups, None)
            .await
            .map(|(head, _)| head)
    }

    /// Publishes a new head committing `entries` onto the newest one
    /// (`Head::commit`: manifest objects merged, deltas taken only when
    /// they extend what the head names), create-if-absent at `seq + 1`; a
    /// lost race re-reads and commits again, each delta judged against the
    /// newer head. Returns the head written (or the current one when
    /// nothing changed) and the map keys of the entries refused (their
    /// partitions moved under another writer: read them again). `cost`,
    /// the writer's request rate, rides along in a head written anyway.
    pub async fn commit_head(
        &self,
        known: Option<u64>,
        writer: &str,
        entries: &[manifest::feed::HeadEntry],
        groups: Option<GroupsPointer>,
        cost: Option<manifest::feed::WriterCost>,
    ) -> Result<(Head, Vec<String>), StoreError> {
        let mut known = known;
        let mut last_key = String::new();
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let current = self.latest_head(known).await?;
            let base = current
                .clone()
                .unwrap_or_else(|| Head::empty(self.layout.cluster_id()));
            let seq = current.as_ref().map_or(1, |c| c.seq + 1);
            let (mut next, refused) = base.commit(seq, entries.iter().cloned());
            let named = groups.is_some_and(|g| next.merge_groups(g));
            if let Some(c) = &current {
                let (same, _) = c.commit(c.seq, []);
                if !named && same.partitions == next.partitions {
                    return Ok((c.clone(), refused));
                }
            }
            next.written_at_ms = now_ms();
            next.writer = writer.to_string();
            if let Some(c) = &cost {
                next.costs.insert(writer.to_string(), c.clone());
            }
            let key = self.layout.head_key(next.seq);
            let bytes = next.encode().map_err(|source| StoreError::Format {
                key: key.clone(),
                source,
            })?;
            match self.put_new(&key, Bytes::from(bytes)).await {
                Ok(()) => {
                    if next.seq > KEEP_HEADS {
                        // Best effort: prune the head that fell out of the window.
                        let _ = self
                            .delete(&self.layout.head_key(next.seq - KEEP_HEADS))
                            .await;
                    }
                    return Ok((next, refused));
                }
                Err(StoreError::Conflict { key }) => {
                    known = current.map(|c| c.seq);
                    last_key = key;
                }
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::TooManyConflicts {
            key: last_key,
            attempts: MAX_COMMIT_ATTEMPTS,
        })
    }
}

/// Size of the pieces a local file is read in by [`ManifestStore::get_stream`].
pub const READ_PIECE: usize = 1 << 20;

/// Reads the inventory of the bucket `store` under `prefix` for `source`
/// (what a command that found nothing to do prints).
///
/// Cost: one LIST (with delimiter) of the clusters dir, one LIST of the
/// source's head dir and one GET of its newest head.
pub async fn take_inventory(
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    source: &str,
    selection: Selection<'_>,
) -> Result<Inventory, StoreError> {
    let dir = manifest::layout::clusters_dir(prefix).map_err(|e| StoreError::Store {
        op: "list",
        key: prefix.to_string(),
        source: object_store::Error::Generic {
            store: "layout",
            source: Box::new(e),
        },
    })?;
    let listed = store
        .list_with_delimiter(Some(&Path::from(dir.as_str())))
        .await;
    let clusters: BTreeSet<String> = match listed {
        Ok(l) => l
            .common_prefixes
            .iter()
            .filter_map(|p| manifest::layout::parse_cluster_dir(prefix, p.as_ref()))
            .collect(),
        Err(object_store::Error::NotFound { .. }) => BTreeSet::new(),
        Err(source) => {
            return Err(StoreError::Store {
                op: "list",
                key: dir,
                source,
            });
        }
    };
    let mut inv = Inventory {
        clusters,
        source: source.to_string(),
        has_selection: selection.include.is_some(),
        ..Inventory::default()
    };
    if inv.clusters.contains(source)
        && let Ok(cluster) = ClusterLayout::new(prefix, source)
    {
        let ms = ManifestStore::new(Arc::clone(store), cluster);
        if let Some(seq) = ms.latest_head_seq().await? {
            let head = ms.get_head(seq).await?;
            for e in head.partitions.values().filter(|e| !e.deleted) {
                inv.topics.insert(e.topic.clone());
                if selection.matches(&e.topic) {
                    inv.selected.insert(e.topic.clone());
                }
            }
        }
    }
    Ok(inv)
}

/// An object being read in pieces: see [`ManifestStore::get_stream`].
pub struct ObjectBody {
    /// The length the store announced.
    pub len: u64,
    /// The body, in order.
    pub pieces: futures::stream::BoxStream<'static, Result<Bytes, StoreError>>,
}

impl std::fmt::Debug for ObjectBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBody")
            .field("len", &self.len)
            .finish()
    }
}

/// Piece buffers kept for reuse at most (32 MiB, twice the applier's default
/// `download_memory`).
const PIECES_KEPT: usize = 32;

/// Buffers of [`READ_PIECE`] bytes for local reads, reused. A piece is
/// read on a blocking-pool thread and dropped by the applier's appending
/// task on another: freed to the allocator, each such thread's arena kept
/// the freed pieces (applier peak RSS 64 to 90 MiB at the defaults, 49 MiB
/// with one arena). A buffer goes back here when the last `Bytes` of its
/// piece drops ([`PooledPiece`]), so the buffers ever allocated are the
/// most pieces in flight at once.
static PIECES: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// A buffer of [`READ_PIECE`] bytes, from [`PIECES`] when one is free,
/// holding `want` zeroes.
fn take_piece(want: usize) -> Vec<u8> {
    let mut buf = PIECES
        .lock()
        .ok()
        .and_then(|mut free| free.pop())
        .unwrap_or_else(|| Vec::with_capacity(READ_PIECE));
    buf.clear();
    buf.resize(want, 0);
    buf
}

/// A piece's buffer, back to [`PIECES`] when dropped.
struct PooledPiece(Vec<u8>);

impl AsRef<[u8]> for PooledPiece {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for PooledPiece {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        if buf.capacity() != READ_PIECE {
            return;
        }
        if let Ok(mut free) = PIECES.lock()
            && free.len() < PIECES_KEPT
        {
            free.push(buf);
        }
    }
}

/// A local file's bytes `[start, start + len)` in [`READ_PIECE`] pieces,
/// each read on the blocking pool into a reused buffer ([`PIECES`]).
fn file_pieces(
    file: std::fs::File,
    path: std::path::PathBuf,
    start: u64,
    len: u64,
) -> futures::stream::BoxStream<'static, object_store::Result<Bytes>> {
    use std::os::unix::fs::FileExt;
    let state = (Arc::new(file), Arc::new(path), start, len);
    futures::stream::try_unfold(state, |(file, path, at, left)| async move {
        if left == 0 {
            return Ok(None);
        }
        let want = left.min(READ_PIECE as u64) as usize;
        let (f, p) = (Arc::clone(&file), Arc::clone(&path));
        let piece = tokio::task::spawn_blocking(move || {
            let mut buf = take_piece(want);
            let mut got = 0;
            while got < want {
                match f.read_at(&mut buf[got..], at + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            buf.truncate(got);
            Ok(buf)
        })
        .await
        .map_err(|e| object_store::Error::Generic {
            store: "LocalFileSystem",
            source: e.into(),
        })?
        .map_err(|e| object_store::Error::Generic {
            store: "LocalFileSystem",
            source: format!("read {}: {e}", p.display()).into(),
        })?;
        if piece.is_empty() {
            // The file is shorter than announced: end here, the reader
            // sees a short body.
            return Ok(None);
        }
        let n = piece.len() as u64;
        Ok(Some((
            Bytes::from_owner(PooledPiece(piece)),
            (file, path, at + n, left - n),
        )))
    })
    .boxed()
}

/// Whether trying an object-store request again may succeed: everything
/// but what a retry cannot change (credentials, permissions, what the
/// store supports, a bad path or configuration key).
pub fn retryable(error: &object_store::Error) -> bool {
    !matches!(
        error,
        object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::NotImplemented { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::UnknownConfigurationKey { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row per case: heads inserted (seq, encoded bytes), then which
    /// sequence numbers are kept.
    #[test]
    fn the_chain_head_cache_keeps_the_newest_within_its_bytes() {
        let big = HEAD_CACHE_BYTES / 2;
        let rows: Vec<(&str, Vec<(u64, usize)>, Vec<u64>)> = vec![
            (
                "small heads all stay",
                vec![(1, 10), (2, 10), (3, 10)],
                vec![1, 2, 3],
            ),
            (
                "the oldest go first",
                vec![(1, big), (2, big), (3, big)],
                vec![2, 3],
            ),
            (
                "a head over the bound is not kept",
                vec![(1, 10), (2, HEAD_CACHE_BYTES + 1)],
                vec![1],
            ),
            (
                "a head read twice is kept once",
                vec![(1, big), (1, big), (2, big)],
                vec![1, 2],
            ),
        ];
        for (name, inserted, kept) in rows {
            let mut c = HeadCache::default();
            for (seq, bytes) in inserted {
                c.insert(seq, Arc::new(Head::empty("c")), bytes);
            }
            let got: Vec<u64> = c.heads.iter().map(|(s, _, _)| *s).collect();
            assert_eq!(got, kept, "{name}");
            assert!(c.bytes <= HEAD_CACHE_BYTES, "{name}");
        }
    }

    #[tokio::test]
    async fn a_clone_with_its_own_read_ahead_keeps_it_when_another_drops_its() {
        let counting = Arc::new(crate::counting::CountingStore::new(Arc::new(
            object_store::memory::InMemory::new(),
        )));
        let ms = ManifestStore::new(
            counting.clone(),
            ClusterLayout::new("p", "c").expect("layout"),
        );
        ms.put_new("k", Bytes::from_static(b"0123456789"))
            .await
            .expect("put");
        let own = ms.with_own_read_ahead();
        own.read_ahead(vec![("k".into(), 0..10, vec![0..4, 4..10])])
            .await;
        ms.read_ahead(vec![("k".into(), 0..10, vec![0..4])]).await;
        ms.drop_read_ahead();
        let before = counting.snapshot();
        assert_eq!(
            own.get_in("k", Some(0..4)).await.expect("get"),
            &b"0123"[..]
        );
        assert_eq!(
            own.get_in("k", Some(4..10)).await.expect("get"),
            &b"456789"[..]
        );
        assert_eq!(
            counting.snapshot().since(&before).get,
            0,
            "from its read-ahead"
        );
        // The other's was dropped: read again.
        assert_eq!(ms.get_in("k", Some(0..4)).await.expect("get"), &b"0123"[..]);
        assert_eq!(counting.snapshot().since(&before).get, 1);
    }

    #[test]
    fn a_dropped_piece_returns_its_buffer_for_the_next_read() {
        let piece = Bytes::from_owner(PooledPiece(take_piece(READ_PIECE)));
        let first = piece.as_ptr();
        let slice = piece.slice(10..20);
        drop(piece);
        // Still referenced by a slice: not back yet.
        let other = take_piece(5);
        assert_ne!(other.as_ptr(), first);
        drop(slice);
        let again = take_piece(7);
        assert_eq!(again.as_ptr(), first, "the same buffer, reused");
        assert_eq!(again, vec![0u8; 7], "zeroed to the length asked");
        // A buffer of another size is not kept.
        drop(PooledPiece(Vec::with_capacity(10)));
        drop(PooledPiece(again));
        drop(PooledPiece(other));
        assert!(PIECES.lock().expect("pool").len() <= PIECES_KEPT);
    }
}
