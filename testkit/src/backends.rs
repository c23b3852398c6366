//! The bucket backends every store test body runs on.
//!
//! Always `memory` and `file` (a temp dir, removed when the [`Backend`] is
//! dropped), and `s3`: the bucket `SEGMIRROR_TEST_S3_BUCKET` names on an
//! S3-compatible server (endpoint and credentials from the AWS variables;
//! `eval "$(bash tests/s3-server.sh start)"` starts moto and sets them).
//! Without it [`backends`] panics ([`crate::needs::s3`]) unless
//! `SEGMIRROR_SKIP_S3=1` says to run without the `s3` backend.
//!
//! Each call gets fresh stores: a new temp dir, and on S3 a new key prefix
//! under `segmirror-tests/`, so tests and runs never see each other.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bucket::url::BucketUrl;
use object_store::ObjectStore;

/// One bucket to run a test body on. Keep it alive while its store is used
/// (it owns the `file` backend's directory).
pub struct Backend {
    /// `memory`, `file` or `s3`.
    pub name: &'static str,
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// The key prefix inside the store (empty but on S3).
    pub prefix: String,
    /// The bucket URL, for the binaries (None for memory: another process
    /// cannot see this one's memory).
    pub url: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

/// A key prefix no other call, test binary or run uses.
fn fresh_prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("segmirror-tests/{nanos:x}-{}-{n}", std::process::id())
}

/// The backends every test body runs on (see the module docs).
pub fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().expect("tempdir");
    let file_url = format!("file://{}", dir.path().display());
    let mut out = vec![
        Backend {
            name: "memory",
            store: BucketUrl::Memory.build().expect("memory store"),
            prefix: String::new(),
            url: None,
            _dir: None,
        },
        Backend {
            name: "file",
            store: BucketUrl::parse(&file_url)
                .expect("file url")
                .build()
                .expect("file store"),
            prefix: String::new(),
            url: Some(file_url),
            _dir: Some(dir),
        },
    ];
    match crate::needs::s3() {
        Some(bucket) => {
            let url = format!("s3://{bucket}/{}", fresh_prefix());
            let parsed = BucketUrl::parse(&url).expect("s3 url");
            out.push(Backend {
                name: "s3",
                store: parsed.build().expect("s3 store"),
                prefix: parsed.prefix().to_string(),
                url: Some(url),
                _dir: None,
            });
        }
        None => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_fresh() {
        assert_ne!(fresh_prefix(), fresh_prefix());
        assert!(BucketUrl::parse(&format!("s3://bucket/{}", fresh_prefix())).is_ok());
    }
}
