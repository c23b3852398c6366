//! Plain values of what the S3 API answered, independent of the SDK's
//! types: [`crate::s3`] fills them, [`crate::rules`] judges them, and tests
//! write them by hand.

/// GetBucketEncryption's first rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encryption {
    /// `aws:kms`, `aws:kms:dsse`, `AES256`, ...
    pub algorithm: String,
    /// The KMS key id or ARN, if any.
    pub kms_key: Option<String>,
    /// Whether an S3 Bucket Key is used.
    pub bucket_key: Option<bool>,
}

/// GetPublicAccessBlock's four flags (absent counts as off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublicAccessBlock {
    /// BlockPublicAcls.
    pub block_public_acls: bool,
    /// IgnorePublicAcls.
    pub ignore_public_acls: bool,
    /// BlockPublicPolicy.
    pub block_public_policy: bool,
    /// RestrictPublicBuckets.
    pub restrict_public_buckets: bool,
}

/// A lifecycle or replication rule's filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// The key prefix (empty: every key).
    pub prefix: String,
    /// Tags an object must carry to match (empty: none needed).
    pub tags: Vec<(String, String)>,
    /// Whether the rule also filters on object size.
    pub sized: bool,
}

/// One lifecycle rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecycleRule {
    /// Its id.
    pub id: String,
    /// Status Enabled.
    pub enabled: bool,
    /// What it matches.
    pub filter: Filter,
    /// Expiration of current versions after days (or on a date).
    pub expiration_days: Option<i32>,
    /// Expiration on a date.
    pub expiration_date: bool,
    /// Removes expired delete markers.
    pub expired_object_delete_marker: bool,
    /// Noncurrent versions expire after days.
    pub noncurrent_days: Option<i32>,
    /// Incomplete multipart uploads are aborted after days.
    pub abort_multipart_days: Option<i32>,
}

/// One replication rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicationRule {
    /// Its id.
    pub id: String,
    /// Status Enabled.
    pub enabled: bool,
    /// What it matches.
    pub filter: Filter,
    /// Destination bucket ARN.
    pub destination: String,
    /// DeleteMarkerReplication status Enabled (`None`: not given).
    pub delete_markers: Option<bool>,
    /// SourceSelectionCriteria SseKmsEncryptedObjects Enabled (`None`:
    /// not given).
    pub sse_kms_objects: Option<bool>,
    /// Destination EncryptionConfiguration ReplicaKmsKeyID.
    pub replica_kms_key: Option<String>,
}

/// What HeadObject said about an object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectHead {
    /// `x-amz-replication-status`: PENDING, COMPLETED (COMPLETE), FAILED,
    /// REPLICA.
    pub replication_status: Option<String>,
    /// Last-Modified, seconds since the Unix epoch.
    pub last_modified_s: Option<i64>,
    /// `x-amz-server-side-encryption`.
    pub sse: Option<String>,
    /// `x-amz-server-side-encryption-aws-kms-key-id`.
    pub kms_key: Option<String>,
}
