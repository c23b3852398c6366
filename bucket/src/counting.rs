//! An `ObjectStore` decorator that counts requests by kind: what tests
//! assert request budgets with ("0 requests per idle cycle", "N objects per
//! shipped MiB") and what the shipper's and applier's metrics export.
//!
//! [`CountingStore`] forwards every method of [`ObjectStore`] to the store
//! it wraps, unchanged, and counts on the way:
//!
//! | counter | what is counted |
//! | --- | --- |
//! | `put` | single-request writes (`put_opts`), whatever their mode |
//! | `put_bytes` | bytes written by `put` and by multipart parts |
//! | `multipart_create` | multipart uploads started (`put_multipart_opts`) |
//! | `multipart_part` | parts uploaded (`put_part`) |
//! | `multipart_complete` / `multipart_abort` | uploads completed / aborted |
//! | `get` | reads (`get_opts` without `head`), one per range for `get_ranges` |
//! | `get_bytes` | bytes the reads answered (the range each `get` returned) |
//! | `head` | metadata reads (`get_opts` with `head`) |
//! | `list` | listings started (`list`, `list_with_offset`, `list_with_delimiter`) |
//! | `delete` | objects deleted (one per path passed to `delete_stream`) |
//! | `copy` | copies and renames |
//!
//! Counts are of calls made through the `object_store` API, not of HTTP
//! requests: a listing of more than 1,000 keys is several S3 requests but
//! one `list` here, a bulk delete of 1,000 keys is one S3 request but 1,000
//! `delete`s here, and a failed call is counted like a successful one
//! (S3 bills it too). [`CountingStore::snapshot`] is a handful of relaxed
//! atomic loads: cheap enough to take around every operation a test wants
//! to measure.

use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result, UploadPart,
};

/// A boxed future as `async_trait` spells it in `object_store`'s traits.
type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

#[derive(Debug, Default)]
struct Counters {
    put: AtomicU64,
    put_bytes: AtomicU64,
    multipart_create: AtomicU64,
    multipart_part: AtomicU64,
    multipart_complete: AtomicU64,
    multipart_abort: AtomicU64,
    get: AtomicU64,
    get_bytes: AtomicU64,
    head: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
    copy: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Request counts at one moment (see the module docs for what each counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestCounts {
    /// Single-request writes.
    pub put: u64,
    /// Bytes written by puts and multipart parts.
    pub put_bytes: u64,
    /// Multipart uploads started.
    pub multipart_create: u64,
    /// Multipart parts uploaded.
    pub multipart_part: u64,
    /// Multipart uploads completed.
    pub multipart_complete: u64,
    /// Multipart uploads aborted.
    pub multipart_abort: u64,
    /// Object reads.
    pub get: u64,
    /// Bytes answered by reads (the length of the range each returned).
    #[serde(default)]
    pub get_bytes: u64,
    /// Metadata reads.
    pub head: u64,
    /// Listings.
    pub list: u64,
    /// Objects deleted.
    pub delete: u64,
    /// Copies and renames.
    pub copy: u64,
}

impl RequestCounts {
    /// Every request of every kind (`put_bytes` and `get_bytes` excluded).
    pub fn total(&self) -> u64 {
        self.put
            + self.multipart_create
            + self.multipart_part
            + self.multipart_complete
            + self.multipart_abort
            + self.get
            + self.head
            + self.list
            + self.delete
            + self.copy
    }

    /// Write requests: puts, and every request of a multipart upload.
    pub fn writes(&self) -> u64 {
        self.put
            + self.multipart_create
            + self.multipart_part
            + self.multipart_complete
            + self.multipart_abort
    }

    /// The counts since `earlier` (saturating, so a reset never underflows).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            put: self.put.saturating_sub(earlier.put),
            put_bytes: self.put_bytes.saturating_sub(earlier.put_bytes),
            multipart_create: self
                .multipart_create
                .saturating_sub(earlier.multipart_create),
            multipart_part: self.multipart_part.saturating_sub(earlier.multipart_part),
            multipart_complete: self
                .multipart_complete
                .saturating_sub(earlier.multipart_complete),
            multipart_abort: self.multipart_abort.saturating_sub(earlier.multipart_abort),
            get: self.get.saturating_sub(earlier.get),
            get_bytes: self.get_bytes.saturating_sub(earlier.get_bytes),
            head: self.head.saturating_sub(earlier.head),
            list: self.list.saturating_sub(earlier.list),
            delete: self.delete.saturating_sub(earlier.delete),
            copy: self.copy.saturating_sub(earlier.copy),
        }
    }

    /// `(kind, count)` pairs, for metrics labels and test messages.
    pub fn by_kind(&self) -> [(&'static str, u64); 10] {
        [
            ("put", self.put),
            ("multipart_create", self.multipart_create),
            ("multipart_part", self.multipart_part),
            ("multipart_complete", self.multipart_complete),
            ("multipart_abort", self.multipart_abort),
            ("get", self.get),
            ("head", self.head),
            ("list", self.list),
            ("delete", self.delete),
            ("copy", self.copy),
        ]
    }
}

/// Counts the requests made through it, forwarding them to `inner`.
///
/// Clones share the counters, so a test can keep one clone and hand an
/// `Arc<dyn ObjectStore>` of another to the code under test.
#[derive(Clone)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    counters: Arc<Counters>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> CountingStore {
        CountingStore {
            inner,
            counters: Arc::new(Counters::default()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// The counts so far.
    pub fn snapshot(&self) -> RequestCounts {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RequestCounts {
            put: load(&c.put),
            put_bytes: load(&c.put_bytes),
            multipart_create: load(&c.multipart_create),
            multipart_part: load(&c.multipart_part),
            multipart_complete: load(&c.multipart_complete),
            multipart_abort: load(&c.multipart_abort),
            get: load(&c.get),
            get_bytes: load(&c.get_bytes),
            head: load(&c.head),
            list: load(&c.list),
            delete: load(&c.delete),
            copy: load(&c.copy),
        }
    }

    /// This store as the trait object the rest of the code takes.
    pub fn as_dyn(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.clone())
    }
}

impl fmt::Debug for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingStore")
            .field("inner", &self.inner)
            .field("counts", &self.snapshot())
            .finish()
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

/// Counts the parts, completion and abort of one multipart upload.
#[derive(Debug)]
struct CountingUpload {
    inner: Box<dyn MultipartUpload>,
    counters: Arc<Counters>,
}

// The trait methods below are written out as `async_trait` expands them
// (explicit lifetimes, boxed `Send` futures), so that this crate needs no
// proc-macro dependency of its own.
impl MultipartUpload for CountingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        bump(&self.counters.multipart_part, 1);
        bump(&self.counters.put_bytes, data.content_length() as u64);
        self.inner.put_part(data)
    }

    fn complete<'life0, 'async_trait>(&'life0 mut self) -> BoxFut<'async_trait, Result<PutResult>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        bump(&self.counters.multipart_complete, 1);
        self.inner.complete()
    }

    fn abort<'life0, 'async_trait>(&'life0 mut self) -> BoxFut<'async_trait, Result<()>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        bump(&self.counters.multipart_abort, 1);
        self.inner.abort()
    }
}

impl ObjectStore for CountingStore {
    fn put_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> BoxFut<'async_trait, Result<PutResult>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        bump(&self.counters.put, 1);
        bump(&self.counters.put_bytes, payload.content_length() as u64);
        self.inner.put_opts(location, payload, opts)
    }

    fn put_multipart_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        opts: PutMultipartOptions,
    ) -> BoxFut<'async_trait, Result<Box<dyn MultipartUpload>>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        bump(&self.counters.multipart_create, 1);
        let counters = Arc::clone(&self.counters);
        Box::pin(async move {
            let inner = self.inner.put_multipart_opts(location, opts).await?;
            Ok(Box::new(CountingUpload { inner, counters }) as Box<dyn MultipartUpload>)
        })
    }

    fn get_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        options: GetOptions,
    ) -> BoxFut<'async_trait, Result<GetResult>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let head = options.head;
        bump(
            if head {
                &self.counters.head
            } else {
                &self.counters.get
            },
            1,
        );
        let counters = Arc::clone(&self.counters);
        let get = self.inner.get_opts(location, options);
        Box::pin(async move {
            let result = get.await?;
            if !head {
                bump(
                    &counters.get_bytes,
                    result.range.end.saturating_sub(result.range.start),
                );
            }
            Ok(result)
        })
    }

    fn get_ranges<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        ranges: &'life2 [Range<u64>],
    ) -> BoxFut<'async_trait, Result<Vec<Bytes>>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        bump(&self.counters.get, ranges.len() as u64);
        let answered: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        let counters = Arc::clone(&self.counters);
        let get = self.inner.get_ranges(location, ranges);
        Box::pin(async move {
            let parts = get.await?;
            bump(&counters.get_bytes, answered);
            Ok(parts)
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let counters = Arc::clone(&self.counters);
        let counted = locations
            .inspect(move |item| {
                if item.is_ok() {
                    bump(&counters.delete, 1);
                }
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        bump(&self.counters.list, 1);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        bump(&self.counters.list, 1);
        self.inner.list_with_offset(prefix, offset)
    }

    fn list_with_delimiter<'life0, 'life1, 'async_trait>(
        &'life0 self,
        prefix: Option<&'life1 Path>,
    ) -> BoxFut<'async_trait, Result<ListResult>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        bump(&self.counters.list, 1);
        self.inner.list_with_delimiter(prefix)
    }

    fn copy_opts<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        from: &'life1 Path,
        to: &'life2 Path,
        options: CopyOptions,
    ) -> BoxFut<'async_trait, Result<()>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        bump(&self.counters.copy, 1);
        self.inner.copy_opts(from, to, options)
    }

    fn rename_opts<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        from: &'life1 Path,
        to: &'life2 Path,
        options: RenameOptions,
    ) -> BoxFut<'async_trait, Result<()>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        bump(&self.counters.copy, 1);
        self.inner.rename_opts(from, to, options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode, WriteMultipart};

    #[tokio::test]
    async fn counts_every_kind_and_forwards() {
        let counting = CountingStore::new(Arc::new(InMemory::new()));
        let store = counting.as_dyn();
        let a = Path::from("d/a");
        store
            .put_opts(
                &a,
                PutPayload::from_static(b"hello"),
                PutOptions::from(PutMode::Create),
            )
            .await
            .expect("put");
        let again = store
            .put_opts(
                &a,
                PutPayload::from_static(b"x"),
                PutOptions::from(PutMode::Create),
            )
            .await;
        assert!(matches!(
            again,
            Err(object_store::Error::AlreadyExists { .. })
        ));
        assert_eq!(
            store
                .get(&a)
                .await
                .expect("get")
                .bytes()
                .await
                .expect("bytes"),
            Bytes::from_static(b"hello")
        );
        store.head(&a).await.expect("head");
        let listed: Vec<_> = store
            .list(Some(&Path::from("d")))
            .try_collect()
            .await
            .expect("list");
        assert_eq!(listed.len(), 1);
        store.copy(&a, &Path::from("d/b")).await.expect("copy");
        let upload = store
            .put_multipart(&Path::from("d/m"))
            .await
            .expect("multipart");
        let mut w = WriteMultipart::new_with_chunk_size(upload, 4);
        w.write(b"0123456789");
        w.finish().await.expect("finish");
        store.delete(&Path::from("d/b")).await.expect("delete");
        let c = counting.snapshot();
        assert_eq!(
            c,
            RequestCounts {
                put: 2,
                put_bytes: 6 + 10,
                multipart_create: 1,
                multipart_part: 3,
                multipart_complete: 1,
                multipart_abort: 0,
                get: 1,
                get_bytes: 5,
                head: 1,
                list: 1,
                delete: 1,
                copy: 1,
            }
        );
        assert_eq!(c.total(), 12);
        assert_eq!(c.since(&c).total(), 0);
        assert_eq!(
            counting
                .inner()
                .get(&Path::from("d/m"))
                .await
                .expect("get")
                .bytes()
                .await
                .expect("bytes"),
            Bytes::from_static(b"0123456789")
        );
        assert_eq!(counting.snapshot().get, 1, "the inner store is not counted");
    }
}
