//! One doctor run: asks the endpoint (through [`crate::s3`]) or the file
//! system (through [`crate::local`]) what the rules need, in a fixed order,
//! and collects their verdicts in a [`Report`].
//!
//! Invariants:
//! - A bucket that cannot be used at all (no credentials, unreachable
//!   endpoint, no such bucket, access denied to HeadBucket, a layout
//!   listing denied or failed; on `file://`
//!   no such directory, not a directory, or a listing that fails) is a
//!   [`DoctorError`] (exit 2), never a report.
//! - [`Scope::Full`] lists the layout on `file://` as on S3: the same
//!   [`layout::Listing`] and verdicts, so a mistyped cluster id fails on
//!   both.
//! - [`Scope::Preflight`] asks only read-only configuration calls (no
//!   probe object, no listing); [`Scope::Full`] adds identity, the
//!   least-privilege probe, replication status and the layout listing.
//! - The probe writes only `ClusterLayout::doctor_probe_key` keys and
//!   deletes each; keys come from `manifest::layout` only.

use std::time::Duration;

use bucket::url::BucketUrl;
use manifest::layout::{ClusterLayout, clusters_dir};

use crate::answer::Answer;
use crate::expect::{BucketExpectations, Expectations, View};
use crate::report::{Check, Report};
use crate::rules::{self, access, layout, lifecycle, policy, replication, security};
use crate::s3::{LIST_LIMIT, S3, Unusable};

/// Which checks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every check.
    Full,
    /// The must-have configuration checks only, without writes or listings.
    Preflight,
}

/// The bucket cannot be checked at all (exit 2).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DoctorError {
    /// No bucket given.
    #[error(
        "no bucket: give --bucket s3://bucket/prefix, or an --expect file with [{section}] bucket"
    )]
    NoBucket {
        /// The expectations section that would name it.
        section: &'static str,
    },
    /// A `file://` bucket that does not exist, is not a directory or
    /// cannot be listed.
    #[error("{bucket}: {problem}")]
    Local {
        /// The bucket.
        bucket: String,
        /// What was found and the fix.
        problem: String,
    },
    /// The bucket cannot be reached or used.
    #[error("{bucket} (endpoint {endpoint}): {problem}")]
    Unusable {
        /// The bucket.
        bucket: String,
        /// The endpoint.
        endpoint: String,
        /// What went wrong and the fix.
        problem: String,
    },
}

/// What to check.
#[derive(Debug, Clone)]
pub struct Options {
    /// Whose view.
    pub view: View,
    /// The bucket (replaces the expectations' one).
    pub bucket: Option<BucketUrl>,
    /// The expectations.
    pub expect: Expectations,
    /// Cluster ids added to the expectations' (e.g. the service's own).
    pub cluster_ids: Vec<String>,
    /// Bound of each request.
    pub timeout: Duration,
    /// Which checks.
    pub scope: Scope,
}

impl Options {
    fn side(&self) -> &BucketExpectations {
        match self.view {
            View::Shipper => &self.expect.source,
            View::Applier => &self.expect.destination,
        }
    }

    /// What a run would check, without any request: the bucket and the
    /// expectations (for `--dry-run`).
    pub fn plan(&self) -> Result<Vec<String>, DoctorError> {
        let section = match self.view {
            View::Shipper => "source",
            View::Applier => "destination",
        };
        let bucket = self
            .bucket
            .clone()
            .or_else(|| self.side().bucket.clone())
            .ok_or(DoctorError::NoBucket { section })?;
        let mut out = vec![format!(
            "{} doctor would check {bucket} ({})",
            self.view.as_str(),
            match &bucket {
                BucketUrl::S3 { .. } => "S3 configuration, probe, layout",
                BucketUrl::File { .. } => "file checks",
                BucketUrl::Memory => "nothing: in-process store",
            }
        )];
        out.extend(
            self.expect
                .describe(self.side())
                .into_iter()
                .map(|l| format!("  {l}")),
        );
        let clusters = self.clusters();
        if !clusters.is_empty() {
            out.push(format!(
                "  probe and layout for cluster ids: {}",
                clusters.join(", ")
            ));
        }
        Ok(out)
    }

    fn clusters(&self) -> Vec<String> {
        let mut ids = self.expect.cluster_ids.clone();
        for id in &self.cluster_ids {
            if !ids.contains(id) {
                ids.push(id.clone());
            }
        }
        ids
    }
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Runs the checks.
pub async fn run(opts: &Options) -> Result<Report, DoctorError> {
    let section = match opts.view {
        View::Shipper => "source",
        View::Applier => "destination",
    };
    let bucket = opts
        .bucket
        .clone()
        .or_else(|| opts.side().bucket.clone())
        .ok_or(DoctorError::NoBucket { section })?;
    let mut expectations = opts.expect.describe(opts.side());
    let clusters = opts.clusters();
    if !opts.cluster_ids.is_empty() && opts.expect.cluster_ids.is_empty() {
        expectations.push(format!("cluster ids (from flags): {}", clusters.join(", ")));
    }
    let format_root = clusters_dir(bucket.prefix()).unwrap_or_default();
    let (endpoint, checks) = match &bucket {
        BucketUrl::Memory => (
            None,
            vec![Check::pass(
                "memory",
                false,
                "memory:// is an in-process store: nothing to check",
            )],
        ),
        BucketUrl::File { root } => {
            let unusable = |problem: String| DoctorError::Local {
                bucket: bucket.to_string(),
                problem,
            };
            let mut checks =
                crate::local::checks(root, &format_root, &clusters).map_err(unusable)?;
            if opts.scope == Scope::Full {
                let (keys, truncated) =
                    crate::local::list(root, &format_root, LIST_LIMIT).map_err(unusable)?;
                let listing = layout::Listing::from_keys(
                    &bucket.to_string(),
                    "",
                    &format_root,
                    &keys,
                    truncated,
                );
                checks.extend(layout::checks(&listing, &clusters, opts.view));
            }
            (None, checks)
        }
        BucketUrl::S3 {
            bucket: name,
            prefix,
        } => {
            let (endpoint, checks) =
                s3_checks(opts, &bucket, name, prefix, &format_root, &clusters).await?;
            (Some(endpoint), checks)
        }
    };
    Ok(Report {
        view: opts.view.as_str().to_string(),
        bucket: bucket.to_string(),
        endpoint,
        expectations,
        checks,
    })
}

async fn s3_checks(
    opts: &Options,
    url: &BucketUrl,
    name: &str,
    prefix: &str,
    format_root: &str,
    clusters: &[String],
) -> Result<(String, Vec<Check>), DoctorError> {
    let endpoint = url.endpoint().unwrap_or_default();
    let unusable = |problem: String| DoctorError::Unusable {
        bucket: url.to_string(),
        endpoint: endpoint.clone(),
        problem,
    };
    if let Some(problem) = bucket::first_request::check_before_first_request(url).await {
        return Err(unusable(problem.to_string()));
    }
    let s3 = S3::connect(opts.timeout).await;
    let full = opts.scope == Scope::Full;
    let mut out = Vec::new();
    let region = match s3.head_bucket(name).await {
        Ok(r) => r,
        Err(Unusable::NoSuchBucket(t)) => {
            return Err(unusable(format!(
                "no such bucket ({t}); create it with modules/bucket (bucket_name) or fix the bucket URL"
            )));
        }
        Err(Unusable::Denied(t)) => {
            return Err(unusable(format!(
                "access denied to HeadBucket ({t}); check the credentials ({}) and their role's policy (modules/iam)",
                bucket::url::credential_source()
            )));
        }
        Err(Unusable::WrongRegion(t)) => {
            return Err(unusable(format!(
                "the bucket is in another region than {} ({t}); set AWS_REGION to the bucket's region",
                s3.region
            )));
        }
        Err(Unusable::Unreachable(t)) => {
            return Err(unusable(format!(
                "no answer ({t}); check the endpoint (AWS_ENDPOINT_URL), the network and the credentials ({})",
                bucket::url::credential_source()
            )));
        }
    };
    out.push(security::region(
        region.as_deref(),
        &s3.region,
        opts.side().region.as_deref(),
    ));
    if full {
        out.push(security::identity(&s3.identity().await));
    }
    out.push(security::versioning(&s3.versioning(name).await));
    if full || opts.expect.object_lock {
        out.push(security::object_lock(
            &s3.object_lock(name).await,
            opts.expect.object_lock,
        ));
    }
    out.push(security::encryption(
        &s3.encryption(name).await,
        opts.side().kms_key_arn.as_deref(),
    ));
    out.push(security::public_access_block(
        &s3.public_access_block(name).await,
    ));
    let policy_answer = s3.policy(name).await;
    let plain_http_refused = s3.is_plain_http()
        && matches!(&policy_answer, Answer::Ok(p) if policy::denies_plain_http(p, name));
    let policy_index = out.len();
    out.push(policy::tls_only(&policy_answer, name, None));
    out.extend(lifecycle::checks(&s3.lifecycle(name).await, format_root));

    if opts.expect.replication_expected() {
        out.extend(replication_checks(opts, &s3, name, prefix, format_root, clusters).await);
    }

    if !full {
        return Ok((endpoint, out));
    }

    // Least privilege: a probe under the first cluster's prefix.
    match clusters.first() {
        None => out.push(Check::new(
            "access.prefix",
            true,
            crate::report::Status::Warn,
            "not probed: no cluster id (give --cluster-id, or cluster_ids in --expect)",
            "",
        )),
        Some(id) => match ClusterLayout::new(prefix, id) {
            Err(e) => out.push(Check::new(
                "access.prefix",
                true,
                crate::report::Status::Warn,
                format!("not probed: {e}"),
                "",
            )),
            Ok(layout) => {
                let (probe, live) = probe(&s3, opts.view, name, prefix, &layout).await;
                if s3.is_plain_http() {
                    out[policy_index] = policy::tls_only(&policy_answer, name, live);
                }
                out.extend(access::checks(
                    opts.view,
                    &format!("{}/", layout.root()),
                    &probe,
                    plain_http_refused,
                ));
            }
        },
    }

    out.extend(layout_checks(&s3, url, opts.view, format_root, clusters).await?);
    Ok((endpoint, out))
}

/// The probe requests; the second value says, for a plain-HTTP endpoint,
/// whether the probe put was refused (403) or accepted.
async fn probe(
    s3: &S3,
    view: View,
    bucket: &str,
    prefix: &str,
    layout: &ClusterLayout,
) -> (access::Probe, Option<bool>) {
    let id = bucket::upload_id::fresh();
    let key = layout.doctor_probe_key(&id);
    let mut p = access::Probe::default();
    let put = s3.put_probe(bucket, &key).await;
    let wrote = matches!(put, Answer::Ok(()));
    let live = match &put {
        Answer::Ok(()) => Some(false),
        Answer::Denied(_) => Some(true),
        _ => None,
    };
    p.put = Some(put);
    p.get = Some(s3.get_probe(bucket, &key).await);
    p.list = Some(s3.list_probe(bucket, &format!("{}/", layout.root())).await);
    if view == View::Shipper || wrote {
        p.delete = Some(s3.delete_probe(bucket, &key).await);
    }
    if view == View::Applier {
        // The applier needs no delete; it was only cleaning up.
        p.delete = None;
    }
    if view == View::Shipper {
        // Outside the cluster's prefix: a sibling cluster id that no
        // Kafka cluster has (cluster ids are 22 characters of base64).
        if let Ok(outside) = ClusterLayout::new(prefix, "segmirror-doctor-outside-probe") {
            let key = outside.doctor_probe_key(&id);
            let put = s3.put_probe(bucket, &key).await;
            if matches!(put, Answer::Ok(())) {
                let _deleted = s3.delete_probe(bucket, &key).await;
            }
            p.outside_put = Some(put);
        }
    }
    (p, live)
}

/// Newest head sequence number of a cluster in a bucket.
async fn newest_head(
    s3: &S3,
    bucket: &str,
    layout: &ClusterLayout,
) -> Answer<Option<(u64, String)>> {
    s3.list(bucket, &format!("{}/", layout.head_dir()), usize::MAX)
        .await
        .map(|(keys, _)| {
            keys.into_iter()
                .filter_map(|k| layout.parse_head_key(&k).ok().map(|s| (s, k)))
                .max_by_key(|(s, _)| *s)
        })
}

async fn replication_checks(
    opts: &Options,
    s3: &S3,
    name: &str,
    prefix: &str,
    format_root: &str,
    clusters: &[String],
) -> Vec<Check> {
    let names = |b: &Option<BucketUrl>| match b {
        Some(BucketUrl::S3 { bucket, prefix }) => Some((bucket.clone(), prefix.clone())),
        _ => None,
    };
    let (Some((src, src_prefix)), Some((dst, _))) = (
        names(&opts.expect.source.bucket),
        names(&opts.expect.destination.bucket),
    ) else {
        return Vec::new();
    };
    // Shipper: this bucket is the source. Applier: the source bucket named
    // by the expectations (its rule decides what reaches this one).
    let source = if opts.view == View::Shipper {
        name.to_string()
    } else {
        src.clone()
    };
    let src_root = clusters_dir(&src_prefix).unwrap_or_else(|_| format_root.to_string());
    let prefixes: Vec<String> = if clusters.is_empty() {
        vec![format!("{src_root}/")]
    } else {
        clusters
            .iter()
            .map(|c| format!("{src_root}/{c}/"))
            .collect()
    };
    let mut out = rules::replication::rule_checks(
        &s3.replication(&source).await,
        &source,
        &prefixes,
        &dst,
        opts.expect.replicate_delete_markers,
        opts.expect.destination.kms_key_arn.as_deref(),
    );
    if opts.scope != Scope::Full {
        return out;
    }
    let side = match opts.view {
        View::Shipper => replication::Side::Source,
        View::Applier => replication::Side::Destination,
    };
    let max = i64::try_from(opts.expect.max_replication_delay.as_secs()).unwrap_or(i64::MAX);
    for c in clusters {
        let Ok(layout) = ClusterLayout::new(prefix, c) else {
            continue;
        };
        let newest = newest_head(s3, name, &layout).await;
        match &newest {
            Answer::Ok(Some((_, key))) => out.push(replication::status(
                side,
                key,
                &s3.head_object(name, key).await,
                now_s(),
                max,
                s3.is_aws(),
            )),
            Answer::Ok(None) => out.push(Check::new(
                "replication.status",
                side == replication::Side::Source,
                crate::report::Status::Warn,
                format!("cluster {c}: no change-feed head in {name} yet"),
                "run the shipper; its first cycle writes a head",
            )),
            other => {
                if let Some(check) =
                    rules::unanswered("replication.status", false, "ListObjectsV2", other)
                {
                    out.push(check);
                }
            }
        }
        if opts.view == View::Applier
            && let (Answer::Ok(dest), Ok(src_layout)) =
                (&newest, ClusterLayout::new(&src_prefix, c))
        {
            let source_newest = newest_head(s3, &src, &src_layout)
                .await
                .map(|n| n.map(|(s, _)| s));
            out.push(replication::arrival(
                c,
                &source_newest,
                dest.as_ref().map(|(s, _)| *s),
            ));
        }
    }
    out
}

/// The layout listing: a listing that is denied or fails is a bucket
/// that cannot be used (exit 2), as the services cannot use it either; an
/// endpoint that does not implement it is a warn.
async fn layout_checks(
    s3: &S3,
    url: &BucketUrl,
    view: View,
    format_root: &str,
    expected: &[String],
) -> Result<Vec<Check>, DoctorError> {
    let BucketUrl::S3 {
        bucket: name,
        prefix,
    } = url
    else {
        return Ok(Vec::new());
    };
    let (keys, truncated) = match s3.list(name, &format!("{format_root}/"), LIST_LIMIT).await {
        Answer::Ok(k) => k,
        Answer::Denied(text) | Answer::Failed(text) => {
            return Err(DoctorError::Unusable {
                bucket: url.to_string(),
                endpoint: url.endpoint().unwrap_or_default(),
                problem: format!(
                    "cannot list {format_root}/ (ListObjectsV2: {text}); the shipper and the applier list it: \
                     check the credentials ({}) and their role's s3:ListBucket on the prefix (modules/iam)",
                    bucket::url::credential_source()
                ),
            });
        }
        other => {
            return Ok(
                rules::unanswered("layout.keys", true, "ListObjectsV2", &other)
                    .into_iter()
                    .collect(),
            );
        }
    };
    let listing =
        layout::Listing::from_keys(&url.to_string(), prefix, format_root, &keys, truncated);
    Ok(layout::checks(&listing, expected, view))
}
