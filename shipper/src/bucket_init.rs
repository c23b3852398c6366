//! A mistyped bucket is not a new bucket: `shipper once|run` ship only into
//! a cluster's part of a bucket that is **initialised**, and create one
//! only when asked (`--create-bucket`, or `shipper init`).
//!
//! "Initialised" means: the cluster's root,
//! `<prefix>/segmirror/v1/<cluster>/` ([`ClusterLayout::root`]), holds a
//! key of segmirror's layout other than a doctor probe: the cluster's
//! marker ([`ClusterLayout::marker_key`], written once, create-if-absent,
//! by `shipper init` or `--create-bucket`) or anything a shipper has
//! shipped (buckets shipped into before the marker existed stay usable).
//! On `file://`, a bucket directory that does not exist is never created
//! without being asked.
//!
//! Invariants:
//! - [`inspect`] only reads (a stat of the directory on `file://`, then a
//!   GET of the marker and, without it, a listing of the cluster's root and
//!   of the clusters beside it); it never creates the directory.
//! - [`decide`] is the whole decision (pure, tabled below): an initialised
//!   cluster ships; anything else ships only when creation was asked for,
//!   and is otherwise refused with one line naming the bucket, what was
//!   found and both ways out ([`refusal`]).
//! - [`initialise`] writes only the marker, create-if-absent: running it
//!   twice, or beside a shipper, changes nothing the second time and says
//!   so ([`Initialised::AlreadyThere`]).

use std::fmt;

use bucket::url::BucketUrl;
use futures::TryStreamExt;
use manifest::layout::{ClusterLayout, KeyKind, clusters_dir, parse_cluster_dir};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

/// What a look at the bucket found for one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// `file://` only: the bucket directory does not exist.
    NoSuchDirectory,
    /// The cluster's root holds no key of segmirror's; `clusters` are the
    /// other clusters the bucket (prefix) holds, if any.
    Empty {
        /// Cluster ids found beside it.
        clusters: Vec<String>,
    },
    /// The cluster's marker is there.
    Marker,
    /// No marker, but shipped data (a key of segmirror's layout).
    Data {
        /// One such key.
        key: String,
    },
}

/// What `once`/`run` do about the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Ship: the cluster is initialised.
    Ship,
    /// Write the marker (creating the directory on `file://`), then ship.
    Create,
    /// Do not ship (exit 2): see [`refusal`].
    Refuse,
}

/// The decision (pure): what was found, and whether creation was asked
/// for (`--create-bucket`).
pub fn decide(found: &Found, create: bool) -> Decision {
    match (found, create) {
        (Found::Marker | Found::Data { .. }, _) => Decision::Ship,
        (Found::NoSuchDirectory | Found::Empty { .. }, true) => Decision::Create,
        (Found::NoSuchDirectory | Found::Empty { .. }, false) => Decision::Refuse,
    }
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::NoSuchDirectory => f.write_str("no such directory"),
            Found::Empty { clusters } if clusters.is_empty() => {
                f.write_str("empty prefix: nothing of segmirror's there")
            }
            Found::Empty { clusters } => write!(
                f,
                "empty prefix for this cluster id (the bucket holds clusters {})",
                clusters.join(", ")
            ),
            Found::Marker => f.write_str("the cluster's marker"),
            Found::Data { key } => write!(f, "shipped data ({key})"),
        }
    }
}

/// The one-line refusal: the bucket, what was found, and both ways out.
pub fn refusal(bucket: &BucketUrl, layout: &ClusterLayout, found: &Found) -> String {
    let place = match (bucket, found) {
        (BucketUrl::File { root }, Found::NoSuchDirectory) => root.display().to_string(),
        (BucketUrl::File { root }, _) => root.join(layout.root()).display().to_string() + "/",
        (BucketUrl::S3 { bucket: name, .. }, _) => format!("s3://{name}/{}/", layout.root()),
        (BucketUrl::Memory, _) => format!("memory://{}/", layout.root()),
    };
    format!(
        "bucket {bucket}: {found} at {place}; not shipping into a bucket that was never set up \
         (a mistyped --bucket or --cluster-id?). If it is new, run `shipper init --bucket {bucket} \
         --cluster-id {id}` once, or add --create-bucket",
        id = layout.cluster_id()
    )
}

/// Looks at the bucket for `layout`'s cluster (reads only; see the module
/// docs). `store` is built on demand, only once the `file://` directory is
/// known to exist (building a `file://` store creates its directory).
pub async fn inspect<F>(
    bucket: &BucketUrl,
    layout: &ClusterLayout,
    store: F,
) -> Result<Found, InitError>
where
    F: FnOnce() -> Result<std::sync::Arc<dyn ObjectStore>, InitError>,
{
    if let BucketUrl::File { root } = bucket {
        match std::fs::metadata(root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(InitError::NotADirectory(root.display().to_string()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Found::NoSuchDirectory);
            }
            Err(e) => return Err(InitError::Io(root.display().to_string(), e)),
        }
    }
    let store = store()?;
    match store.head(&Path::from(layout.marker_key())).await {
        Ok(_) => return Ok(Found::Marker),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(InitError::Store(e)),
    }
    let root = Path::from(layout.root());
    let mut keys = store.list(Some(&root));
    while let Some(meta) = keys.try_next().await.map_err(InitError::Store)? {
        let key = meta.location.to_string();
        match layout.classify_key(&key) {
            Ok(KeyKind::DoctorProbe) | Err(_) => continue,
            Ok(_) => return Ok(Found::Data { key }),
        }
    }
    let prefix = bucket.prefix();
    let dir = clusters_dir(prefix).map_err(|e| InitError::Layout(e.to_string()))?;
    let listing = store
        .list_with_delimiter(Some(&Path::from(dir)))
        .await
        .map_err(InitError::Store)?;
    let clusters = listing
        .common_prefixes
        .iter()
        .filter_map(|p| parse_cluster_dir(prefix, p.as_ref()))
        .filter(|c| c != layout.cluster_id())
        .collect();
    Ok(Found::Empty { clusters })
}

/// What [`initialise`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Initialised {
    /// The marker was written now.
    Created,
    /// The cluster was initialised already (what was found).
    AlreadyThere(Found),
}

/// Initialises `layout`'s cluster in `store`: writes the marker unless the
/// cluster is initialised already (create-if-absent, so a marker written
/// at the same time by another run counts as already there). `by` names
/// the writer in the marker (`shipper init`, `--create-bucket`).
pub async fn initialise(
    store: &dyn ObjectStore,
    layout: &ClusterLayout,
    found: Found,
    by: &str,
) -> Result<Initialised, InitError> {
    if decide(&found, false) == Decision::Ship {
        return Ok(Initialised::AlreadyThere(found));
    }
    let body = serde_json::json!({
        "segmirror": "cluster marker",
        "cluster_id": layout.cluster_id(),
        "created_by": by,
        "created_at_ms": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    });
    let opts = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    let payload = PutPayload::from(body.to_string().into_bytes());
    match store
        .put_opts(&Path::from(layout.marker_key()), payload, opts)
        .await
    {
        Ok(_) => Ok(Initialised::Created),
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => Ok(Initialised::AlreadyThere(Found::Marker)),
        Err(e) => Err(InitError::Store(e)),
    }
}

/// The bucket could not be looked at or initialised.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// A `file://` bucket that is not a directory.
    #[error("{0} is not a directory")]
    NotADirectory(String),
    /// A `file://` bucket directory that cannot be read.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// The bucket prefix is not valid.
    #[error("{0}")]
    Layout(String),
    /// The store refused or did not answer.
    #[error(transparent)]
    Store(object_store::Error),
    /// The store could not be built.
    #[error(transparent)]
    Build(Box<bucket::url::BucketError>),
}

impl From<bucket::url::BucketError> for InitError {
    fn from(e: bucket::url::BucketError) -> InitError {
        InitError::Build(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_table() {
        use Decision::*;
        let empty = Found::Empty { clusters: vec![] };
        let beside = Found::Empty {
            clusters: vec!["src".into()],
        };
        let data = Found::Data { key: "k".into() };
        // (found, --create-bucket, decision)
        let rows = [
            (Found::NoSuchDirectory, false, Refuse),
            (Found::NoSuchDirectory, true, Create),
            (empty.clone(), false, Refuse),
            (empty, true, Create),
            (beside.clone(), false, Refuse),
            (beside, true, Create),
            (Found::Marker, false, Ship),
            (Found::Marker, true, Ship),
            (data.clone(), false, Ship),
            (data, true, Ship),
        ];
        for (found, create, want) in rows {
            assert_eq!(decide(&found, create), want, "{found:?} create={create}");
        }
    }

    #[test]
    fn the_refusal_names_the_bucket_what_was_found_and_both_ways_out() {
        let layout = ClusterLayout::new("", "src").expect("layout");
        let file = BucketUrl::parse("file:///data/bukcet").expect("url");
        let line = refusal(&file, &layout, &Found::NoSuchDirectory);
        for want in [
            "bucket file:///data/bukcet",
            "no such directory at /data/bukcet",
            "shipper init --bucket file:///data/bukcet --cluster-id src",
            "--create-bucket",
        ] {
            assert!(line.contains(want), "{want:?} not in {line}");
        }
        assert!(!line.contains('\n'));
        let s3 = BucketUrl::parse("s3://dr-bucket/kafka").expect("url");
        let layout = ClusterLayout::new("kafka", "srx").expect("layout");
        let line = refusal(
            &s3,
            &layout,
            &Found::Empty {
                clusters: vec!["src".into()],
            },
        );
        for want in [
            "bucket s3://dr-bucket/kafka",
            "empty prefix",
            "holds clusters src",
            "s3://dr-bucket/kafka/segmirror/v1/srx/",
            "shipper init --bucket s3://dr-bucket/kafka --cluster-id srx",
        ] {
            assert!(line.contains(want), "{want:?} not in {line}");
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn init_is_idempotent_and_a_doctor_probe_is_not_data() {
        let store: std::sync::Arc<dyn ObjectStore> =
            std::sync::Arc::new(object_store::memory::InMemory::new());
        let bucket = BucketUrl::Memory;
        let layout = ClusterLayout::new("", "c1").expect("layout");
        let look = || inspect(&bucket, &layout, || Ok(store.clone()));
        assert_eq!(
            look().await.expect("inspect"),
            Found::Empty { clusters: vec![] }
        );
        let probe = layout.doctor_probe_key(&bucket::upload_id::fresh());
        store
            .put(&Path::from(probe), PutPayload::from_static(b"x"))
            .await
            .expect("put");
        assert_eq!(
            look().await.expect("inspect"),
            Found::Empty { clusters: vec![] }
        );
        let found = look().await.expect("inspect");
        assert_eq!(
            initialise(store.as_ref(), &layout, found, "test")
                .await
                .expect("init"),
            Initialised::Created
        );
        assert_eq!(look().await.expect("inspect"), Found::Marker);
        // A second init, and one that raced the first (it looked before
        // the marker was written): both say it was there.
        let found = look().await.expect("inspect");
        assert_eq!(
            initialise(store.as_ref(), &layout, found, "test")
                .await
                .expect("init"),
            Initialised::AlreadyThere(Found::Marker)
        );
        let stale = Found::Empty { clusters: vec![] };
        assert_eq!(
            initialise(store.as_ref(), &layout, stale, "test")
                .await
                .expect("init"),
            Initialised::AlreadyThere(Found::Marker)
        );
        // Another cluster beside it is named.
        let other = ClusterLayout::new("", "c2").expect("layout");
        let found = inspect(&bucket, &other, || Ok(store.clone()))
            .await
            .expect("inspect");
        assert_eq!(
            found,
            Found::Empty {
                clusters: vec!["c1".into()]
            }
        );
        // Data shipped before markers existed counts.
        store
            .put(
                &Path::from(other.head_key(1)),
                PutPayload::from_static(b"{}"),
            )
            .await
            .expect("put");
        let found = inspect(&bucket, &other, || Ok(store.clone()))
            .await
            .expect("inspect");
        assert!(matches!(found, Found::Data { .. }), "{found:?}");
    }
}
