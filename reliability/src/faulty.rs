//! [`FaultyStore`]: an `ObjectStore` decorator that injects the faults a
//! real bucket produces, reproducibly from a seed.
//!
//! | fault | what the caller sees |
//! | --- | --- |
//! | transient failure (a share of each request kind: put, multipart create/part/complete, get, head, list, delete, copy) | `object_store::Error::Generic`, nothing done |
//! | latency | every request delayed by a random time in a range |
//! | dropped manifest write | the PUT of a manifest version (after the objects it names were written) fails and writes nothing |
//! | lost acknowledgement | a manifest or head PUT is written, then answered with an error (a connection reset after the server acted) |
//! | truncated body | a GET succeeds with a body cut short at a random length (what a broken proxy or a bug would hand over); it must be detected, never applied |
//!
//! [`FaultStats`] counts requests and injected faults by kind, and how the
//! callers coped: a request for an `(operation, key)` whose previous
//! request failed by injection is a **retry**, and a retry that gets an
//! answer from the store (success, not found, already exists) a
//! **recovery**. Data keys are compared without their upload id, so a
//! range uploaded again under a new key counts as a retry of the first.
//!
//! Modelled on `bucket::counting::CountingStore`; like it, clones share
//! their state.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};

use crate::rng::Rng;

/// A kind of request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Single-request write.
    Put,
    /// Multipart upload started.
    MultipartCreate,
    /// Multipart part.
    MultipartPart,
    /// Multipart completion.
    MultipartComplete,
    /// Read.
    Get,
    /// Metadata read.
    Head,
    /// Listing.
    List,
    /// Delete (one per key).
    Delete,
    /// Copy or rename.
    Copy,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 9] = [
        Kind::Put,
        Kind::MultipartCreate,
        Kind::MultipartPart,
        Kind::MultipartComplete,
        Kind::Get,
        Kind::Head,
        Kind::List,
        Kind::Delete,
        Kind::Copy,
    ];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Put => "put",
            Kind::MultipartCreate => "multipart_create",
            Kind::MultipartPart => "multipart_part",
            Kind::MultipartComplete => "multipart_complete",
            Kind::Get => "get",
            Kind::Head => "head",
            Kind::List => "list",
            Kind::Delete => "delete",
            Kind::Copy => "copy",
        }
    }
}

/// What an object key holds (from `manifest::layout`'s directory names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyClass {
    /// `.../manifest/<version>.json`.
    Manifest,
    /// `.../head/<seq>.json`.
    Head,
    /// `.../pages/<first>-<last>.json`.
    Page,
    /// `.../data/<base>-<last>-e<epoch>-<upload>.batches`.
    Data,
    /// `.../packs/<xx>/<upload>.pack`: a cycle's pack or a compacted pack.
    Pack,
    /// Anything else.
    Other,
}

impl KeyClass {
    /// Classifies a key by its parent directory.
    pub fn of(key: &str) -> KeyClass {
        let mut parts = key.rsplit('/');
        let _file = parts.next();
        match parts.next() {
            Some("manifest") => KeyClass::Manifest,
            Some("head") => KeyClass::Head,
            Some("pages") => KeyClass::Page,
            Some("data") => KeyClass::Data,
            _ if key.ends_with(".pack") => KeyClass::Pack,
            _ => KeyClass::Other,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            KeyClass::Manifest => "manifest",
            KeyClass::Head => "head",
            KeyClass::Page => "page",
            KeyClass::Data => "data",
            KeyClass::Pack => "pack",
            KeyClass::Other => "other",
        }
    }
}

/// The key without a data object's upload id (`<base>-<last>-e<epoch>`),
/// so that a re-upload of the same range under a new id is recognised.
fn retry_key(key: &str) -> String {
    if KeyClass::of(key) != KeyClass::Data {
        return key.to_string();
    }
    let (dir, file) = key.rsplit_once('/').unwrap_or(("", key));
    let stem: Vec<&str> = file.splitn(4, '-').take(3).collect();
    format!("{dir}/{}", stem.join("-"))
}

/// Which faults to inject, and how often.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// Seed of the decisions.
    pub seed: u64,
    /// Share of requests of each kind failed with a transient error.
    pub fail: BTreeMap<Kind, f64>,
    /// Latency added to every request: uniform in this range.
    pub latency: (Duration, Duration),
    /// Share of manifest PUTs dropped (not written, error returned).
    pub drop_manifest: f64,
    /// Share of manifest and head PUTs written but answered with an error.
    pub lost_ack: f64,
    /// The key classes whose PUTs may lose their answer (default: manifest
    /// and head).
    pub lost_ack_on: Vec<KeyClass>,
    /// Answer a lost acknowledgement as the store client's own retry sees
    /// it on a create-if-absent PUT (`AlreadyExists`: the first attempt
    /// landed) instead of a transient error.
    pub lost_ack_as_already_exists: bool,
    /// Share of GETs answered with a truncated body.
    pub truncate: f64,
    /// Inject only into requests for these key classes (empty: all).
    pub only: Vec<KeyClass>,
}

impl FaultPlan {
    /// No fault at all.
    pub fn none(seed: u64) -> FaultPlan {
        FaultPlan {
            seed,
            fail: BTreeMap::new(),
            latency: (Duration::ZERO, Duration::ZERO),
            drop_manifest: 0.0,
            lost_ack: 0.0,
            lost_ack_on: vec![KeyClass::Manifest, KeyClass::Head],
            lost_ack_as_already_exists: false,
            truncate: 0.0,
            only: Vec::new(),
        }
    }

    /// `share` of every request kind fails (transient errors only).
    pub fn uniform(seed: u64, share: f64) -> FaultPlan {
        FaultPlan {
            fail: Kind::ALL.iter().map(|k| (*k, share)).collect(),
            ..FaultPlan::none(seed)
        }
    }

    fn fail_share(&self, k: Kind) -> f64 {
        self.fail.get(&k).copied().unwrap_or(0.0)
    }
}

/// What was injected and how the callers coped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Requests seen, by kind.
    pub requests: BTreeMap<Kind, u64>,
    /// Transient failures injected, by kind.
    pub failed: BTreeMap<Kind, u64>,
    /// Requests delayed.
    pub delayed: u64,
    /// Manifest PUTs dropped.
    pub dropped_manifests: u64,
    /// Manifest and head PUTs written with the answer lost.
    pub lost_acks: u64,
    /// GET bodies truncated, by what the key holds.
    pub truncated: BTreeMap<KeyClass, u64>,
    /// Requests for an (operation, key) whose previous request was failed
    /// by injection.
    pub retries: u64,
    /// Of those, the ones that got through to the store (any answer).
    pub recoveries: u64,
    /// Faulted (operation, key) pairs never requested again.
    pub abandoned: u64,
    /// Errors of the inner store itself (not injected; not found, already
    /// exists and precondition answers excluded), by kind: what reached
    /// the services after the store client's own retries.
    pub store_errors: BTreeMap<Kind, u64>,
    /// Keys whose bodies were truncated.
    pub truncated_keys: Vec<String>,
}

impl FaultStats {
    /// Every injected fault (failures, drops, lost answers, truncations).
    pub fn injected(&self) -> u64 {
        self.failed.values().sum::<u64>()
            + self.dropped_manifests
            + self.lost_acks
            + self.truncated.values().sum::<u64>()
    }

    /// Every request.
    pub fn total_requests(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Adds `o` into this.
    pub fn add(&mut self, o: &FaultStats) {
        for (k, v) in &o.requests {
            *self.requests.entry(*k).or_default() += v;
        }
        for (k, v) in &o.failed {
            *self.failed.entry(*k).or_default() += v;
        }
        for (k, v) in &o.truncated {
            *self.truncated.entry(*k).or_default() += v;
        }
        self.delayed += o.delayed;
        self.dropped_manifests += o.dropped_manifests;
        self.lost_acks += o.lost_acks;
        self.retries += o.retries;
        self.recoveries += o.recoveries;
        self.abandoned += o.abandoned;
        for (k, v) in &o.store_errors {
            *self.store_errors.entry(*k).or_default() += v;
        }
        self.truncated_keys.extend(o.truncated_keys.iter().cloned());
    }
}

impl fmt::Display for FaultStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let by_kind: Vec<String> = Kind::ALL
            .iter()
            .filter(|k| self.requests.get(k).copied().unwrap_or(0) > 0)
            .map(|k| {
                format!(
                    "{} {}/{}",
                    k.name(),
                    self.failed.get(k).copied().unwrap_or(0),
                    self.requests.get(k).copied().unwrap_or(0)
                )
            })
            .collect();
        let truncated: Vec<String> = self
            .truncated
            .iter()
            .map(|(c, n)| format!("{} {n}", c.name()))
            .collect();
        write!(
            f,
            "requests {}, injected {} (failed/requests by kind: {}; dropped manifests {}; lost answers {}; truncated bodies {} [{}]; delayed {}); retries {}, recovered {}, abandoned {}; store errors {}",
            self.total_requests(),
            self.injected(),
            by_kind.join(", "),
            self.dropped_manifests,
            self.lost_acks,
            self.truncated.values().sum::<u64>(),
            truncated.join(", "),
            self.delayed,
            self.retries,
            self.recoveries,
            self.abandoned,
            self.store_errors.values().sum::<u64>(),
        )
    }
}

#[derive(Debug)]
struct State {
    stats: FaultStats,
    pending: HashSet<(Kind, String)>,
    attempts: HashMap<(Kind, String), u64>,
    enabled: bool,
}

/// FNV-1a, to derive a decision's seed from what the request is.
fn fnv(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for p in parts {
        for b in p.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Action {
    Pass,
    Fail,
    DropManifest,
    LostAck,
    /// Truncate the body at this fraction of its length.
    Truncate(f64),
}

#[derive(Debug, Clone, Copy)]
struct Decision {
    delay: Duration,
    action: Action,
}

/// The decorator. See the module docs.
#[derive(Clone)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    plan: Arc<FaultPlan>,
    state: Arc<Mutex<State>>,
}

fn injected(what: &str, kind: Kind, key: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultyStore",
        source: format!("injected {what} ({} {key})", kind.name()).into(),
    }
}

impl FaultyStore {
    /// Wraps `inner` with the faults of `plan`.
    pub fn new(inner: Arc<dyn ObjectStore>, plan: FaultPlan) -> FaultyStore {
        FaultyStore {
            inner,
            state: Arc::new(Mutex::new(State {
                stats: FaultStats::default(),
                pending: HashSet::new(),
                attempts: HashMap::new(),
                enabled: true,
            })),
            plan: Arc::new(plan),
        }
    }

    /// This store as the trait object the services take.
    pub fn as_dyn(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.clone())
    }

    /// Turns injection on or off (requests are still counted).
    pub fn set_enabled(&self, on: bool) {
        self.lock().enabled = on;
    }

    /// The statistics so far (`abandoned`: faulted pairs not retried yet).
    pub fn stats(&self) -> FaultStats {
        let st = self.lock();
        let mut s = st.stats.clone();
        s.abandoned = st.pending.len() as u64;
        s
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the counters
        // inconsistent in a way that matters to a harness.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn decide(&self, kind: Kind, key: &str, with_body: bool) -> Decision {
        let class = KeyClass::of(key);
        let mut st = self.lock();
        *st.stats.requests.entry(kind).or_default() += 1;
        let rk = (kind, retry_key(key));
        if st.pending.contains(&rk) {
            st.stats.retries += 1;
        }
        if !st.enabled || !(self.plan.only.is_empty() || self.plan.only.contains(&class)) {
            return Decision {
                delay: Duration::ZERO,
                action: Action::Pass,
            };
        }
        // The decision depends on what is asked (kind, key without upload
        // id, how many times before), not on the order requests arrive in:
        // a run is reproducible from its seed whatever the scheduling.
        let attempt = st.attempts.entry(rk.clone()).or_default();
        *attempt += 1;
        let mut rng = Rng::new(fnv(
            self.plan.seed,
            &[
                kind.name().as_bytes(),
                rk.1.as_bytes(),
                &attempt.to_le_bytes(),
            ],
        ));
        let (lo, hi) = self.plan.latency;
        let delay = rng.duration(lo, hi);
        if !delay.is_zero() {
            st.stats.delayed += 1;
        }
        let p = &self.plan;
        let action =
            if kind == Kind::Put && class == KeyClass::Manifest && rng.chance(p.drop_manifest) {
                st.stats.dropped_manifests += 1;
                Action::DropManifest
            } else if kind == Kind::Put && p.lost_ack_on.contains(&class) && rng.chance(p.lost_ack)
            {
                st.stats.lost_acks += 1;
                Action::LostAck
            } else if rng.chance(p.fail_share(kind)) {
                *st.stats.failed.entry(kind).or_default() += 1;
                Action::Fail
            } else if kind == Kind::Get && with_body && rng.chance(p.truncate) {
                *st.stats.truncated.entry(class).or_default() += 1;
                st.stats.truncated_keys.push(key.to_string());
                Action::Truncate(rng.unit())
            } else {
                Action::Pass
            };
        if matches!(
            action,
            Action::Fail | Action::DropManifest | Action::LostAck
        ) {
            st.pending.insert(rk);
        }
        Decision { delay, action }
    }

    /// Records the outcome of a request that was let through: any answer
    /// of the inner store (success, not found, already exists) means the
    /// retried request got through.
    fn outcome<T>(&self, kind: Kind, key: &str, r: &Result<T>) {
        let mut st = self.lock();
        if st.pending.remove(&(kind, retry_key(key))) {
            st.stats.recoveries += 1;
        }
        let counted = r.as_ref().err().is_some_and(|e| {
            !matches!(
                e,
                object_store::Error::NotFound { .. }
                    | object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. }
            )
        });
        if counted {
            *st.stats.store_errors.entry(kind).or_default() += 1;
        }
    }
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStore")
            .field("inner", &self.inner)
            .field("plan", &self.plan)
            .finish()
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

async fn pause(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

/// Injects failures into the parts and completion of one upload.
#[derive(Debug)]
struct FaultyUpload {
    inner: Box<dyn MultipartUpload>,
    store: FaultyStore,
    key: String,
    part: u64,
}

#[async_trait]
impl MultipartUpload for FaultyUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.part += 1;
        let key = format!("{}#part{}", self.key, self.part);
        let d = self.store.decide(Kind::MultipartPart, &key, false);
        if d.action == Action::Fail {
            return Box::pin(async move {
                pause(d.delay).await;
                Err(injected("transient failure", Kind::MultipartPart, &key))
            });
        }
        let fut = self.inner.put_part(data);
        let store = self.store.clone();
        Box::pin(async move {
            pause(d.delay).await;
            let r = fut.await;
            store.outcome(Kind::MultipartPart, &key, &r);
            r
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let d = self.store.decide(Kind::MultipartComplete, &self.key, false);
        pause(d.delay).await;
        if d.action == Action::Fail {
            return Err(injected(
                "transient failure",
                Kind::MultipartComplete,
                &self.key,
            ));
        }
        let r = self.inner.complete().await;
        self.store.outcome(Kind::MultipartComplete, &self.key, &r);
        r
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let key = location.to_string();
        let d = self.decide(Kind::Put, &key, false);
        pause(d.delay).await;
        match d.action {
            Action::Fail => Err(injected("transient failure", Kind::Put, &key)),
            Action::DropManifest => Err(injected("dropped manifest write", Kind::Put, &key)),
            Action::LostAck => {
                self.inner.put_opts(location, payload, opts).await?;
                if self.plan.lost_ack_as_already_exists {
                    Err(object_store::Error::AlreadyExists {
                        path: key,
                        source:
                            "injected: the store client's retry of a PUT whose first attempt landed"
                                .into(),
                    })
                } else {
                    Err(injected(
                        "connection reset after the write",
                        Kind::Put,
                        &key,
                    ))
                }
            }
            Action::Pass | Action::Truncate(_) => {
                let r = self.inner.put_opts(location, payload, opts).await;
                self.outcome(Kind::Put, &key, &r);
                r
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let key = location.to_string();
        let d = self.decide(Kind::MultipartCreate, &key, false);
        pause(d.delay).await;
        if d.action == Action::Fail {
            return Err(injected("transient failure", Kind::MultipartCreate, &key));
        }
        let inner = self.inner.put_multipart_opts(location, opts).await;
        self.outcome(Kind::MultipartCreate, &key, &inner);
        Ok(Box::new(FaultyUpload {
            inner: inner?,
            store: self.clone(),
            key,
            part: 0,
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let key = location.to_string();
        let kind = if options.head { Kind::Head } else { Kind::Get };
        let d = self.decide(kind, &key, !options.head);
        pause(d.delay).await;
        if d.action == Action::Fail {
            return Err(injected("transient failure", kind, &key));
        }
        let r = self.inner.get_opts(location, options).await;
        self.outcome(kind, &key, &r);
        let Action::Truncate(share) = d.action else {
            return r;
        };
        let r = r?;
        let (meta, range, attributes) = (r.meta.clone(), r.range.clone(), r.attributes.clone());
        let body = r.bytes().await?;
        let cut = ((body.len() as f64) * share) as usize;
        let short: Bytes = body.slice(..cut.min(body.len().saturating_sub(1)));
        Ok(GetResult {
            payload: GetResultPayload::Stream(
                futures::stream::once(async move { Ok(short) }).boxed(),
            ),
            meta,
            range,
            attributes,
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let me = self.clone();
        locations
            .flat_map(move |item| match item {
                Ok(p) => {
                    let key = p.to_string();
                    let d = me.decide(Kind::Delete, &key, false);
                    if d.action == Action::Fail {
                        futures::stream::once(async move {
                            pause(d.delay).await;
                            Err(injected("transient failure", Kind::Delete, &key))
                        })
                        .boxed()
                    } else {
                        let me2 = me.clone();
                        me.inner
                            .delete_stream(futures::stream::once(async move { Ok(p) }).boxed())
                            .inspect(move |r| me2.outcome(Kind::Delete, &key, r))
                            .boxed()
                    }
                }
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let key = prefix.map(|p| p.to_string()).unwrap_or_default();
        let d = self.decide(Kind::List, &key, false);
        if d.action == Action::Fail {
            return futures::stream::once(async move {
                pause(d.delay).await;
                Err(injected("transient failure", Kind::List, &key))
            })
            .boxed();
        }
        self.outcome::<()>(Kind::List, &key, &Ok(()));
        let inner = self.inner.list(prefix);
        futures::stream::once(pause(d.delay))
            .flat_map(move |_| futures::stream::empty())
            .chain(inner)
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let key = prefix.map(|p| p.to_string()).unwrap_or_default();
        let d = self.decide(Kind::List, &key, false);
        pause(d.delay).await;
        if d.action == Action::Fail {
            return Err(injected("transient failure", Kind::List, &key));
        }
        let r = self.inner.list_with_delimiter(prefix).await;
        self.outcome(Kind::List, &key, &r);
        r
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let key = to.to_string();
        let d = self.decide(Kind::Copy, &key, false);
        pause(d.delay).await;
        if d.action == Action::Fail {
            return Err(injected("transient failure", Kind::Copy, &key));
        }
        let r = self.inner.copy_opts(from, to, options).await;
        self.outcome(Kind::Copy, &key, &r);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode};

    #[test]
    fn classifies_layout_keys() {
        let p = "pre/segmirror/v1/c/topics/t/id/0";
        assert_eq!(
            KeyClass::of(&format!("{p}/manifest/00000000000000000001.json")),
            KeyClass::Manifest
        );
        assert_eq!(
            KeyClass::of("pre/segmirror/v1/c/head/00000000000000000001.json"),
            KeyClass::Head
        );
        assert_eq!(KeyClass::of(&format!("{p}/pages/1-2.json")), KeyClass::Page);
        let data = format!(
            "{p}/data/00000000000000000000-00000000000000000009-e0000000001-abc-def.batches"
        );
        assert_eq!(KeyClass::of(&data), KeyClass::Data);
        assert_eq!(
            KeyClass::of("pre/segmirror/v1/c/packs/b9/1a2527a7314e8993c5a21fdbfb9.pack"),
            KeyClass::Pack
        );
        assert_eq!(
            retry_key(&data),
            format!("{p}/data/00000000000000000000-00000000000000000009-e0000000001")
        );
    }

    #[tokio::test]
    async fn injects_and_counts() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let mut plan = FaultPlan::uniform(3, 0.5);
        plan.truncate = 1.0;
        let faulty = FaultyStore::new(inner.clone(), plan);
        let store = faulty.as_dyn();
        let key = Path::from("a/data/x");
        let mut ok = 0;
        for _ in 0..40 {
            if store
                .put(&key, Bytes::from_static(b"0123456789").into())
                .await
                .is_ok()
            {
                ok += 1;
            }
        }
        let s = faulty.stats();
        assert_eq!(s.requests[&Kind::Put], 40);
        assert_eq!(s.failed[&Kind::Put] + ok, 40);
        assert!(s.retries > 0 && s.recoveries > 0, "{s}");
        // Bodies that get through are cut short.
        for _ in 0..20 {
            if let Ok(r) = store.get(&key).await {
                let b = r.bytes().await.expect("bytes");
                assert!(b.len() < 10);
            }
        }
        assert!(faulty.stats().truncated.values().sum::<u64>() > 0);
        // A lost answer: written, yet an error.
        let mut plan = FaultPlan::none(1);
        plan.lost_ack = 1.0;
        let faulty = FaultyStore::new(inner.clone(), plan);
        let m = Path::from("c/manifest/00000000000000000001.json");
        let r = faulty
            .put_opts(
                &m,
                Bytes::from_static(b"{}").into(),
                PutOptions::from(PutMode::Create),
            )
            .await;
        assert!(r.is_err());
        assert!(inner.head(&m).await.is_ok(), "written despite the error");
    }

    /// `ManifestStore::get` never hands a short body to a decoder: it reads
    /// once more, and a body that is short every time is a store error.
    #[tokio::test]
    async fn manifest_store_refuses_a_short_body() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let key = "p/manifest/00000000000000000001.json";
        inner
            .put(&Path::from(key), Bytes::from(vec![7u8; 1000]).into())
            .await
            .expect("put");
        let layout = manifest::layout::ClusterLayout::new("p", "src").expect("layout");
        let mut plan = FaultPlan::none(9);
        plan.truncate = 1.0;
        let faulty = FaultyStore::new(inner.clone(), plan);
        let store = bucket::store::ManifestStore::new(faulty.as_dyn(), layout.clone());
        let err = store.get(key).await.expect_err("short every time");
        let text = err.to_string();
        assert!(
            text.contains(key) && text.contains("announced 1000"),
            "{text}"
        );
        assert_eq!(faulty.stats().requests[&Kind::Get], 2, "read once more");
        // Whole bodies pass.
        let store = bucket::store::ManifestStore::new(inner, layout);
        assert_eq!(store.get(key).await.expect("get").len(), 1000);
    }
}
