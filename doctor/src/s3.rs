//! The IO against S3: one client built from the same environment the
//! services use, and one function per question, each returning a plain
//! [`crate::facts`] value in an [`Answer`]. No verdicts here.
//!
//! Invariants:
//! - Region: [`bucket::url::region`] (the services' precedence);
//!   endpoint: `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`, with
//!   path-style requests, as `bucket::url` configures object_store;
//!   credentials: the AWS SDK's default chain (environment, shared files,
//!   web identity, container, instance metadata).
//! - Every request is bounded by the timeout given to [`S3::connect`] and
//!   retried at most once, so an unreachable endpoint fails quickly.
//! - Only the probe functions write, and only to the probe keys they are
//!   given; each deletes what it wrote.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;

use crate::answer::{Answer, ErrorKind, answer_of_error, classify};
use crate::facts::{
    Encryption, Filter, LifecycleRule, ObjectHead, PublicAccessBlock, ReplicationRule,
};

/// Most keys one layout listing reads.
pub const LIST_LIMIT: usize = 10_000;

/// An S3 endpoint and the clients that talk to it.
#[derive(Debug, Clone)]
pub struct S3 {
    client: aws_sdk_s3::Client,
    sts: aws_sdk_sts::Client,
    /// The custom endpoint, if any.
    pub endpoint: Option<String>,
    /// The region requests are signed for.
    pub region: String,
}

/// Why the first request to a bucket failed (exit 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    /// The bucket does not exist.
    NoSuchBucket(String),
    /// The credentials may not use it (or there are none that work).
    Denied(String),
    /// The bucket is in another region (HTTP 301).
    WrongRegion(String),
    /// No answer: connection refused, DNS, timeout, no credentials.
    Unreachable(String),
}

fn status_of<E, R: HasStatus>(e: &SdkError<E, R>) -> Option<u16> {
    e.raw_response().map(HasStatus::status_u16)
}

/// The HTTP status of a raw response.
trait HasStatus {
    fn status_u16(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_u16(&self) -> u16 {
        self.status().as_u16()
    }
}

fn text<E: ProvideErrorMetadata + std::error::Error + 'static>(
    e: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> String {
    let status = status_of(e)
        .map(|s| format!("HTTP {s} "))
        .unwrap_or_default();
    match (e.code(), e.message()) {
        (Some(c), Some(m)) => format!("{status}{c}: {m}"),
        (Some(c), None) => format!("{status}{c}"),
        _ => {
            // The SDK's context for unparsed answers includes the whole raw
            // response: keep the first line's worth.
            let full = aws_sdk_s3::error::DisplayErrorContext(e).to_string();
            let short: String = full.chars().take(200).collect();
            let more = if short.len() < full.len() { "..." } else { "" };
            format!("{status}{short}{more}")
        }
    }
}

/// An [`Answer`] from an SDK result.
fn answer<T, E: ProvideErrorMetadata + std::error::Error + 'static>(
    r: Result<T, SdkError<E, aws_sdk_s3::config::http::HttpResponse>>,
) -> Answer<T> {
    match r {
        Ok(v) => Answer::Ok(v),
        Err(e) => answer_of_error(status_of(&e), e.code(), text(&e)),
    }
}

/// An object request's [`Answer`], where "no such key" means the request
/// was allowed.
fn allowed<T, E: ProvideErrorMetadata + std::error::Error + 'static>(
    r: Result<T, SdkError<E, aws_sdk_s3::config::http::HttpResponse>>,
) -> Answer<()> {
    match r {
        Ok(_) => Answer::Ok(()),
        Err(e) if matches!(e.code(), Some("NoSuchKey") | Some("NotFound")) => Answer::Ok(()),
        Err(e) if status_of(&e) == Some(404) && e.code().is_none() => Answer::Ok(()),
        Err(e) => answer_of_error(status_of(&e), e.code(), text(&e)),
    }
}

fn filter(prefix: Option<&str>, tags: Vec<(String, String)>, sized: bool) -> Filter {
    Filter {
        prefix: prefix.unwrap_or("").to_string(),
        tags,
        sized,
    }
}

impl S3 {
    /// The clients, configured from the environment; each request is
    /// bounded by `timeout`.
    pub async fn connect(timeout: Duration) -> S3 {
        let region = bucket::url::region();
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let endpoint = env("AWS_ENDPOINT_URL_S3").or_else(|| env("AWS_ENDPOINT_URL"));
        let conf = aws_config::defaults(BehaviorVersion::latest())
            .region(aws_config::Region::new(region.clone()))
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(timeout)
                    .connect_timeout(timeout.min(Duration::from_secs(5)))
                    .build(),
            )
            .retry_config(RetryConfig::standard().with_max_attempts(2))
            .load()
            .await;
        let mut s3 = aws_sdk_s3::config::Builder::from(&conf);
        if let Some(e) = &endpoint {
            s3 = s3.endpoint_url(e).force_path_style(true);
        }
        S3 {
            client: aws_sdk_s3::Client::from_conf(s3.build()),
            sts: aws_sdk_sts::Client::new(&conf),
            endpoint,
            region,
        }
    }

    /// Whether requests go to AWS S3 (not an S3-compatible server).
    pub fn is_aws(&self) -> bool {
        self.endpoint.as_deref().is_none_or(|e| {
            let host = e
                .split("://")
                .nth(1)
                .unwrap_or(e)
                .split(['/', ':'])
                .next()
                .unwrap_or("");
            host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn")
        })
    }

    /// Whether the endpoint is plain HTTP.
    pub fn is_plain_http(&self) -> bool {
        self.endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"))
    }

    /// HeadBucket: the bucket's region (`None` when the endpoint does not
    /// say), or why the bucket cannot be used.
    pub async fn head_bucket(&self, bucket: &str) -> Result<Option<String>, Unusable> {
        match self.client.head_bucket().bucket(bucket).send().await {
            Ok(o) => Ok(o.bucket_region().map(String::from)),
            Err(e) => {
                let status = status_of(&e);
                let t = text(&e);
                Err(match (status, classify(status, e.code())) {
                    (Some(404), _) | (_, ErrorKind::NoSuchBucket) => Unusable::NoSuchBucket(t),
                    (Some(301), _) => Unusable::WrongRegion(t),
                    (_, ErrorKind::Denied) => Unusable::Denied(t),
                    (Some(_), _) => Unusable::Denied(t),
                    (None, _) => Unusable::Unreachable(t),
                })
            }
        }
    }

    /// sts:GetCallerIdentity: the caller's ARN.
    pub async fn identity(&self) -> Answer<String> {
        match self.sts.get_caller_identity().send().await {
            Ok(o) => Answer::Ok(o.arn().unwrap_or("(no ARN)").to_string()),
            Err(e) => {
                let status = e.raw_response().map(|r| r.status().as_u16());
                let t = match (e.code(), e.message()) {
                    (Some(c), Some(m)) => format!("{c}: {m}"),
                    (Some(c), None) => c.to_string(),
                    _ => aws_sdk_sts::error::DisplayErrorContext(&e).to_string(),
                };
                match classify(status, e.code()) {
                    ErrorKind::Denied => Answer::Denied(t),
                    // No STS at this endpoint (an S3-only server): 404s,
                    // unknown actions, or no answer at all.
                    _ if status.is_none() || matches!(status, Some(400 | 404 | 405 | 501)) => {
                        Answer::Unsupported(t)
                    }
                    _ => Answer::Failed(t),
                }
            }
        }
    }

    /// GetBucketVersioning's Status.
    pub async fn versioning(&self, bucket: &str) -> Answer<Option<String>> {
        match self
            .client
            .get_bucket_versioning()
            .bucket(bucket)
            .send()
            .await
        {
            Ok(o) => Answer::Ok(o.status().map(|s| s.as_str().to_string())),
            // moto 5.2.5 answers with the root element
            // <GetBucketVersioningResponse> instead of
            // <VersioningConfiguration>, which the SDK refuses to parse:
            // read its <Status> (none: never enabled) from the body.
            Err(e) if status_of(&e) == Some(200) => {
                let body = e
                    .raw_response()
                    .and_then(|r| r.body().bytes())
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                if body.contains("<GetBucketVersioningResponse") {
                    Answer::Ok(
                        body.split_once("<Status>")
                            .and_then(|(_, rest)| rest.split_once("</Status>"))
                            .map(|(status, _)| status.trim().to_string()),
                    )
                } else {
                    answer_of_error(status_of(&e), e.code(), text(&e))
                }
            }
            Err(e) => answer_of_error(status_of(&e), e.code(), text(&e)),
        }
    }

    /// GetObjectLockConfiguration: whether object lock is enabled.
    pub async fn object_lock(&self, bucket: &str) -> Answer<bool> {
        answer(
            self.client
                .get_object_lock_configuration()
                .bucket(bucket)
                .send()
                .await,
        )
        .map(|o| {
            o.object_lock_configuration()
                .and_then(|c| c.object_lock_enabled())
                .is_some_and(|e| e.as_str() == "Enabled")
        })
    }

    /// GetBucketEncryption's first rule.
    pub async fn encryption(&self, bucket: &str) -> Answer<Encryption> {
        match answer(
            self.client
                .get_bucket_encryption()
                .bucket(bucket)
                .send()
                .await,
        ) {
            Answer::Ok(o) => {
                let rule = o
                    .server_side_encryption_configuration()
                    .and_then(|c| c.rules().first());
                match rule.and_then(|r| r.apply_server_side_encryption_by_default().map(|d| (r, d)))
                {
                    Some((r, d)) => Answer::Ok(Encryption {
                        algorithm: d.sse_algorithm().as_str().to_string(),
                        kms_key: d.kms_master_key_id().map(String::from),
                        bucket_key: r.bucket_key_enabled(),
                    }),
                    None => Answer::Absent("no default encryption rule".into()),
                }
            }
            other => other.map(|_| Encryption::default()),
        }
    }

    /// GetPublicAccessBlock.
    pub async fn public_access_block(&self, bucket: &str) -> Answer<PublicAccessBlock> {
        answer(
            self.client
                .get_public_access_block()
                .bucket(bucket)
                .send()
                .await,
        )
        .map(|o| {
            let c = o.public_access_block_configuration();
            let f = |v: Option<bool>| v.unwrap_or(false);
            PublicAccessBlock {
                block_public_acls: f(c.and_then(|c| c.block_public_acls())),
                ignore_public_acls: f(c.and_then(|c| c.ignore_public_acls())),
                block_public_policy: f(c.and_then(|c| c.block_public_policy())),
                restrict_public_buckets: f(c.and_then(|c| c.restrict_public_buckets())),
            }
        })
    }

    /// GetBucketPolicy's document.
    pub async fn policy(&self, bucket: &str) -> Answer<String> {
        answer(self.client.get_bucket_policy().bucket(bucket).send().await)
            .map(|o| o.policy().unwrap_or("").to_string())
    }

    /// GetBucketLifecycleConfiguration's rules.
    // Rules written without a Filter carry the legacy (deprecated) Prefix.
    #[allow(deprecated)]
    pub async fn lifecycle(&self, bucket: &str) -> Answer<Vec<LifecycleRule>> {
        answer(
            self.client
                .get_bucket_lifecycle_configuration()
                .bucket(bucket)
                .send()
                .await,
        )
        .map(|o| {
            o.rules()
                .iter()
                .map(|r| {
                    let f = r.filter();
                    let and = f.and_then(|f| f.and());
                    let mut tags: Vec<(String, String)> = and
                        .map(|a| {
                            a.tags()
                                .iter()
                                .map(|t| (t.key().to_string(), t.value().to_string()))
                                .collect()
                        })
                        .unwrap_or_default();
                    if let Some(t) = f.and_then(|f| f.tag()) {
                        tags.push((t.key().to_string(), t.value().to_string()));
                    }
                    let prefix = and
                        .and_then(|a| a.prefix())
                        .or_else(|| f.and_then(|f| f.prefix()))
                        .or(r.prefix());
                    let sized = f.is_some_and(|f| {
                        f.object_size_greater_than().is_some()
                            || f.object_size_less_than().is_some()
                    }) || and.is_some_and(|a| {
                        a.object_size_greater_than().is_some()
                            || a.object_size_less_than().is_some()
                    });
                    LifecycleRule {
                        id: r.id().unwrap_or("").to_string(),
                        enabled: r.status().as_str() == "Enabled",
                        filter: filter(prefix, tags, sized),
                        expiration_days: r.expiration().and_then(|e| e.days()),
                        expiration_date: r.expiration().is_some_and(|e| e.date().is_some()),
                        expired_object_delete_marker: r
                            .expiration()
                            .and_then(|e| e.expired_object_delete_marker())
                            .unwrap_or(false),
                        noncurrent_days: r
                            .noncurrent_version_expiration()
                            .and_then(|n| n.noncurrent_days()),
                        abort_multipart_days: r
                            .abort_incomplete_multipart_upload()
                            .and_then(|a| a.days_after_initiation()),
                    }
                })
                .collect()
        })
    }

    /// GetBucketReplication's rules.
    // Rules written without a Filter carry the legacy (deprecated) Prefix.
    #[allow(deprecated)]
    pub async fn replication(&self, bucket: &str) -> Answer<Vec<ReplicationRule>> {
        answer(
            self.client
                .get_bucket_replication()
                .bucket(bucket)
                .send()
                .await,
        )
        .map(|o| {
            o.replication_configuration()
                .map(|c| c.rules())
                .unwrap_or_default()
                .iter()
                .map(|r| {
                    let f = r.filter();
                    let and = f.and_then(|f| f.and());
                    let mut tags: Vec<(String, String)> = and
                        .map(|a| {
                            a.tags()
                                .iter()
                                .map(|t| (t.key().to_string(), t.value().to_string()))
                                .collect()
                        })
                        .unwrap_or_default();
                    if let Some(t) = f.and_then(|f| f.tag()) {
                        tags.push((t.key().to_string(), t.value().to_string()));
                    }
                    let prefix = and
                        .and_then(|a| a.prefix())
                        .or_else(|| f.and_then(|f| f.prefix()))
                        .or(r.prefix());
                    let dest = r.destination();
                    ReplicationRule {
                        id: r.id().unwrap_or("").to_string(),
                        enabled: r.status().as_str() == "Enabled",
                        filter: filter(prefix, tags, false),
                        destination: dest.map(|d| d.bucket().to_string()).unwrap_or_default(),
                        delete_markers: r
                            .delete_marker_replication()
                            .and_then(|d| d.status())
                            .map(|s| s.as_str() == "Enabled"),
                        sse_kms_objects: r
                            .source_selection_criteria()
                            .and_then(|s| s.sse_kms_encrypted_objects())
                            .map(|s| s.status().as_str() == "Enabled"),
                        replica_kms_key: dest
                            .and_then(|d| d.encryption_configuration())
                            .and_then(|e| e.replica_kms_key_id())
                            .map(String::from),
                    }
                })
                .collect()
        })
    }

    /// HeadObject: replication status, age and encryption.
    pub async fn head_object(&self, bucket: &str, key: &str) -> Answer<ObjectHead> {
        answer(
            self.client
                .head_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await,
        )
        .map(|o| ObjectHead {
            replication_status: o.replication_status().map(|s| s.as_str().to_string()),
            last_modified_s: o.last_modified().map(|t| t.secs()),
            sse: o.server_side_encryption().map(|s| s.as_str().to_string()),
            kms_key: o.ssekms_key_id().map(String::from),
        })
    }

    /// Lists keys under `prefix`, at most `limit`; the bool says whether
    /// the listing stopped at the limit.
    pub async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        limit: usize,
    ) -> Answer<(Vec<String>, bool)> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .set_continuation_token(token.clone())
                .send()
                .await;
            let page = match answer(page) {
                Answer::Ok(p) => p,
                other => return other.map(|_| (Vec::new(), false)),
            };
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(String::from)),
            );
            if keys.len() >= limit {
                keys.truncate(limit);
                return Answer::Ok((keys, true));
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_string()),
                _ => return Answer::Ok((keys, false)),
            }
        }
    }

    /// PutObject of a small probe body.
    pub async fn put_probe(&self, bucket: &str, key: &str) -> Answer<()> {
        answer(
            self.client
                .put_object()
                .bucket(bucket)
                .key(key)
                .body(ByteStream::from_static(
                    b"segmirror doctor probe; safe to delete\n",
                ))
                .send()
                .await,
        )
        .map(|_| ())
    }

    /// GetObject (a missing key counts as allowed).
    pub async fn get_probe(&self, bucket: &str, key: &str) -> Answer<()> {
        allowed(
            self.client
                .get_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await,
        )
    }

    /// ListObjectsV2 of one key under `prefix`.
    pub async fn list_probe(&self, bucket: &str, prefix: &str) -> Answer<()> {
        answer(
            self.client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .max_keys(1)
                .send()
                .await,
        )
        .map(|_| ())
    }

    /// DeleteObject (a missing key counts as allowed).
    pub async fn delete_probe(&self, bucket: &str, key: &str) -> Answer<()> {
        allowed(
            self.client
                .delete_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await,
        )
    }
}
