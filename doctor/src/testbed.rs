//! Test support (feature `testbed`, for the services' tests only): sets up
//! buckets on the S3 test server the way `infra/terraform/modules` would,
//! through the same client configuration as [`crate::s3`].
//!
//! moto (the test server) enforces a bucket policy's Deny on object
//! requests without evaluating conditions such as `aws:SecureTransport`,
//! and it serves plain HTTP: with the module's TLS-only policy in place,
//! every object request is refused. [`Testbed::configure_as_module`]
//! therefore puts the policy last, after any object was written, and
//! doctor reports the probe as "not measurable over plain HTTP".

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types as t;

/// A client for setting buckets up.
#[derive(Debug, Clone)]
pub struct Testbed {
    client: aws_sdk_s3::Client,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Testbed {
    /// A client configured from the environment (`AWS_ENDPOINT_URL`, ...).
    pub async fn from_env() -> Testbed {
        let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(bucket::url::region()))
            .load()
            .await;
        let mut b = aws_sdk_s3::config::Builder::from(&conf);
        let endpoint = std::env::var("AWS_ENDPOINT_URL_S3")
            .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
            .ok();
        if let Some(e) = endpoint {
            b = b.endpoint_url(e).force_path_style(true);
        }
        Testbed {
            client: aws_sdk_s3::Client::from_conf(b.build()),
        }
    }

    /// Creates a bare bucket.
    pub async fn create_bucket(&self, name: &str) -> Result<(), BoxError> {
        self.client.create_bucket().bucket(name).send().await?;
        Ok(())
    }

    /// Writes an object.
    pub async fn put(&self, bucket: &str, key: &str, body: &[u8]) -> Result<(), BoxError> {
        self.client
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(ByteStream::from(body.to_vec()))
            .send()
            .await?;
        Ok(())
    }

    /// Versioning, SSE-KMS with `kms_key_arn` and a bucket key, the public
    /// access block, the lifecycle rules and, last, the TLS-only policy, as
    /// modules/bucket sets them for `format_root`.
    pub async fn configure_as_module(
        &self,
        bucket: &str,
        format_root: &str,
        kms_key_arn: &str,
    ) -> Result<(), BoxError> {
        self.enable_versioning(bucket).await?;
        self.client
            .put_bucket_encryption()
            .bucket(bucket)
            .server_side_encryption_configuration(
                t::ServerSideEncryptionConfiguration::builder()
                    .rules(
                        t::ServerSideEncryptionRule::builder()
                            .apply_server_side_encryption_by_default(
                                t::ServerSideEncryptionByDefault::builder()
                                    .sse_algorithm(t::ServerSideEncryption::AwsKms)
                                    .kms_master_key_id(kms_key_arn)
                                    .build()?,
                            )
                            .bucket_key_enabled(true)
                            .build(),
                    )
                    .build()?,
            )
            .send()
            .await?;
        self.client
            .put_public_access_block()
            .bucket(bucket)
            .public_access_block_configuration(
                t::PublicAccessBlockConfiguration::builder()
                    .block_public_acls(true)
                    .ignore_public_acls(true)
                    .block_public_policy(true)
                    .restrict_public_buckets(true)
                    .build(),
            )
            .send()
            .await?;
        let abort = t::LifecycleRule::builder()
            .id("abort-incomplete-multipart-uploads")
            .status(t::ExpirationStatus::Enabled)
            .filter(t::LifecycleRuleFilter::builder().build())
            .abort_incomplete_multipart_upload(
                t::AbortIncompleteMultipartUpload::builder()
                    .days_after_initiation(2)
                    .build(),
            )
            .build()?;
        let noncurrent = t::LifecycleRule::builder()
            .id("segmirror-noncurrent-versions")
            .status(t::ExpirationStatus::Enabled)
            .filter(
                t::LifecycleRuleFilter::builder()
                    .prefix(format!("{format_root}/"))
                    .build(),
            )
            .noncurrent_version_expiration(
                t::NoncurrentVersionExpiration::builder()
                    .noncurrent_days(30)
                    .build(),
            )
            .expiration(
                t::LifecycleExpiration::builder()
                    .expired_object_delete_marker(true)
                    .build(),
            )
            .build()?;
        self.client
            .put_bucket_lifecycle_configuration()
            .bucket(bucket)
            .lifecycle_configuration(
                t::BucketLifecycleConfiguration::builder()
                    .rules(abort)
                    .rules(noncurrent)
                    .build()?,
            )
            .send()
            .await?;
        let policy = serde_json::json!({
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Action": "s3:*",
                    "Resource": [format!("arn:aws:s3:::{bucket}"), format!("arn:aws:s3:::{bucket}/*")],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}}
                },
                {
                    "Sid": "DenyOutdatedTLS",
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Action": "s3:*",
                    "Resource": [format!("arn:aws:s3:::{bucket}"), format!("arn:aws:s3:::{bucket}/*")],
                    "Condition": {"NumericLessThan": {"s3:TlsVersion": "1.2"}}
                }
            ]
        });
        self.client
            .put_bucket_policy()
            .bucket(bucket)
            .policy(policy.to_string())
            .send()
            .await?;
        Ok(())
    }

    /// Turns versioning on.
    pub async fn enable_versioning(&self, bucket: &str) -> Result<(), BoxError> {
        self.client
            .put_bucket_versioning()
            .bucket(bucket)
            .versioning_configuration(
                t::VersioningConfiguration::builder()
                    .status(t::BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await?;
        Ok(())
    }

    /// The replication rule modules/replication writes: `prefix` of
    /// `source` to `destination`, delete markers replicated, SSE-KMS
    /// objects re-encrypted with `replica_key`.
    pub async fn replicate(
        &self,
        source: &str,
        prefix: &str,
        destination: &str,
        replica_key: &str,
    ) -> Result<(), BoxError> {
        let rule = t::ReplicationRule::builder()
            .id(format!(
                "segmirror-{}",
                prefix.trim_end_matches('/').replace('/', "-")
            ))
            .priority(0)
            .status(t::ReplicationRuleStatus::Enabled)
            .filter(t::ReplicationRuleFilter::builder().prefix(prefix).build())
            .delete_marker_replication(
                t::DeleteMarkerReplication::builder()
                    .status(t::DeleteMarkerReplicationStatus::Enabled)
                    .build(),
            )
            .source_selection_criteria(
                t::SourceSelectionCriteria::builder()
                    .sse_kms_encrypted_objects(
                        t::SseKmsEncryptedObjects::builder()
                            .status(t::SseKmsEncryptedObjectsStatus::Enabled)
                            .build()?,
                    )
                    .build(),
            )
            .destination(
                t::Destination::builder()
                    .bucket(format!("arn:aws:s3:::{destination}"))
                    .encryption_configuration(
                        t::EncryptionConfiguration::builder()
                            .replica_kms_key_id(replica_key)
                            .build(),
                    )
                    .build()?,
            )
            .build()?;
        self.client
            .put_bucket_replication()
            .bucket(source)
            .replication_configuration(
                t::ReplicationConfiguration::builder()
                    .role("arn:aws:iam::123456789012:role/segmirror-replication")
                    .rules(rule)
                    .build()?,
            )
            .send()
            .await?;
        Ok(())
    }

    /// Removes the source bucket's replication configuration.
    pub async fn delete_replication(&self, source: &str) -> Result<(), BoxError> {
        self.client
            .delete_bucket_replication()
            .bucket(source)
            .send()
            .await?;
        Ok(())
    }
}

/// A bucket name no other test uses: `doctor-<name>-<pid>-<nanos>`.
pub fn unique_bucket(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("doctor-{name}-{}-{nanos}", std::process::id())
}

/// Runs `f` to completion on a runtime of its own (tests that drive the
/// binaries synchronously).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    #[allow(clippy::expect_used)]
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}

/// The `checks` of a `doctor --json` report (empty when it is not one).
pub fn report_checks(json: &str) -> Vec<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v["checks"].as_array().cloned())
        .unwrap_or_default()
}

/// The check `id` of `checks`; panics naming it when absent (tests only).
pub fn report_check<'a>(checks: &'a [serde_json::Value], id: &str) -> &'a serde_json::Value {
    checks
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {checks:?}"))
}

/// Asserts that a `doctor --json` report failed `layout.clusters` as a
/// mistyped cluster id does, naming `found` (the clusters there).
pub fn assert_mistyped_cluster(json: &str, found: &str) {
    let checks = report_checks(json);
    let c = report_check(&checks, "layout.clusters");
    assert_eq!(c["status"], "fail", "{c}");
    let evidence = c["evidence"].as_str().unwrap_or("");
    assert!(
        evidence.contains(&format!("found clusters: {found}")) && evidence.contains("mistyped"),
        "{c}"
    );
}
