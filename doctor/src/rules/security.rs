//! Verdicts on the bucket's own settings: reachability and region, who the
//! credentials are, versioning, object lock, default encryption and the
//! public access block (modules/bucket `main.tf`).

use crate::answer::Answer;
use crate::facts::{Encryption, PublicAccessBlock};
use crate::report::{Check, Status};
use crate::rules::unanswered;

/// The bucket's region (HeadBucket's `x-amz-bucket-region`) against the
/// region requests are signed for and the expected one.
pub fn region(bucket_region: Option<&str>, signing_region: &str, expected: Option<&str>) -> Check {
    const ID: &str = "region";
    let Some(actual) = bucket_region else {
        return Check::not_supported(ID, true, "HeadBucket", "no x-amz-bucket-region header");
    };
    if let Some(want) = expected
        && actual != want
    {
        return Check::new(
            ID,
            true,
            Status::Fail,
            format!("the bucket is in {actual}, expected {want}"),
            "point the configuration at the bucket Terraform created in that region (primary_region / dr_region of the example)",
        );
    }
    if actual != signing_region {
        return Check::new(
            ID,
            true,
            Status::Fail,
            format!("the bucket is in {actual} but requests are signed for {signing_region}"),
            format!("set AWS_REGION={actual} for the shipper and applier"),
        );
    }
    Check::pass(
        ID,
        true,
        format!("the bucket is in {actual}, as requests are signed"),
    )
}

/// Who the credentials are (sts:GetCallerIdentity), for the record.
pub fn identity(answer: &Answer<String>) -> Check {
    const ID: &str = "identity";
    match answer {
        Answer::Ok(arn) => Check::pass(ID, false, format!("credentials are {arn}")),
        Answer::Absent(t) => Check::not_supported(ID, false, "sts:GetCallerIdentity", t),
        other => unanswered(ID, false, "sts:GetCallerIdentity", other)
            .unwrap_or_else(|| Check::pass(ID, false, "")),
    }
}

/// GetBucketVersioning's Status: `Enabled` passes.
pub fn versioning(answer: &Answer<Option<String>>) -> Check {
    const ID: &str = "versioning";
    const FIX: &str = "modules/bucket sets it (aws_s3_bucket_versioning, status = \"Enabled\"); apply the module, or: aws s3api put-bucket-versioning --bucket B --versioning-configuration Status=Enabled";
    if let Some(c) = unanswered(ID, true, "GetBucketVersioning", answer) {
        return c;
    }
    match answer {
        Answer::Ok(Some(s)) if s == "Enabled" => Check::pass(ID, true, "Status=Enabled"),
        Answer::Ok(Some(s)) => Check::new(
            ID,
            true,
            Status::Fail,
            format!("Status={s}: deletes are permanent and replication stops"),
            FIX,
        ),
        _ => Check::new(
            ID,
            true,
            Status::Fail,
            "never enabled (no Status): deletes are permanent and replication cannot work",
            FIX,
        ),
    }
}

/// GetObjectLockConfiguration against whether object lock is expected.
pub fn object_lock(answer: &Answer<bool>, expected: bool) -> Check {
    const ID: &str = "object-lock";
    if let Some(c) = unanswered(ID, expected, "GetObjectLockConfiguration", answer) {
        return c;
    }
    let enabled = matches!(answer, Answer::Ok(true));
    match (enabled, expected) {
        (true, true) => Check::pass(ID, true, "ObjectLockEnabled=Enabled, as expected"),
        (false, false) => Check::pass(ID, false, "not enabled (the modules set none)"),
        (false, true) => Check::new(
            ID,
            true,
            Status::Fail,
            "object lock is not enabled, but the expectations ask for it",
            "object lock can only be enabled at bucket creation (object_lock_enabled = true on aws_s3_bucket), or set object_lock = false in the expectations",
        ),
        (true, false) => Check::new(
            ID,
            false,
            Status::Warn,
            "object lock is enabled: retention can keep deleted versions past noncurrent_version_retention_days",
            "set object_lock = true in the expectations if intended",
        ),
    }
}

/// Whether two KMS key references name the same key: equal, or one is an
/// ARN ending in `key/<id>` or `alias/<name>` and the other that id or
/// alias.
pub fn same_kms_key(a: &str, b: &str) -> bool {
    let tail = |k: &str| -> String {
        match k.split_once(":key/").or_else(|| k.split_once(":alias/")) {
            Some((_, t)) if k.contains(":alias/") => format!("alias/{t}"),
            Some((_, t)) => t.to_string(),
            None => k.to_string(),
        }
    };
    a == b || tail(a) == tail(b)
}

/// GetBucketEncryption: SSE-KMS with the expected key (any key when none
/// is expected).
pub fn encryption(answer: &Answer<Encryption>, expected_key: Option<&str>) -> Check {
    const ID: &str = "encryption";
    const FIX: &str = "modules/bucket sets SSE-KMS (aws_s3_bucket_server_side_encryption_configuration: sse_algorithm = \"aws:kms\", kms_master_key_id = var.kms_key_arn or the key it creates, bucket_key_enabled = true)";
    if let Some(c) = unanswered(ID, true, "GetBucketEncryption", answer) {
        return c;
    }
    let e = match answer {
        Answer::Ok(e) => e,
        _ => {
            return Check::new(
                ID,
                true,
                Status::Fail,
                "no default encryption (GetBucketEncryption: not configured)",
                FIX,
            );
        }
    };
    if !e.algorithm.starts_with("aws:kms") {
        return Check::new(
            ID,
            true,
            Status::Fail,
            format!("default encryption is {}, not SSE-KMS", e.algorithm),
            FIX,
        );
    }
    let key = e
        .kms_key
        .as_deref()
        .unwrap_or("(the AWS managed key aws/s3)");
    if let Some(want) = expected_key
        && !e.kms_key.as_deref().is_some_and(|k| same_kms_key(k, want))
    {
        return Check::new(
            ID,
            true,
            Status::Fail,
            format!("SSE-KMS with key {key}, expected {want}"),
            "set kms_key_arn of modules/bucket to the expected key (or fix kms_key_arn in the expectations)",
        );
    }
    let bucket_key = match e.bucket_key {
        Some(true) => "bucket key on",
        _ => "bucket key off (more KMS requests; modules/bucket sets bucket_key_enabled = true)",
    };
    Check::pass(
        ID,
        true,
        format!("{} with key {key}, {bucket_key}", e.algorithm),
    )
}

/// GetPublicAccessBlock: all four flags on.
pub fn public_access_block(answer: &Answer<PublicAccessBlock>) -> Check {
    const ID: &str = "public-access-block";
    const FIX: &str = "modules/bucket sets all four (aws_s3_bucket_public_access_block: block_public_acls, block_public_policy, ignore_public_acls, restrict_public_buckets = true)";
    if let Some(c) = unanswered(ID, true, "GetPublicAccessBlock", answer) {
        return c;
    }
    let Answer::Ok(p) = answer else {
        return Check::new(
            ID,
            true,
            Status::Fail,
            "no public access block on the bucket (GetPublicAccessBlock: not configured)",
            FIX,
        );
    };
    let off: Vec<&str> = [
        ("BlockPublicAcls", p.block_public_acls),
        ("IgnorePublicAcls", p.ignore_public_acls),
        ("BlockPublicPolicy", p.block_public_policy),
        ("RestrictPublicBuckets", p.restrict_public_buckets),
    ]
    .iter()
    .filter(|(_, on)| !on)
    .map(|(n, _)| *n)
    .collect();
    if off.is_empty() {
        Check::pass(ID, true, "all four flags on")
    } else {
        Check::new(
            ID,
            true,
            Status::Fail,
            format!("off: {}", off.join(", ")),
            FIX,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioning_passes_only_when_enabled() {
        assert_eq!(
            versioning(&Answer::Ok(Some("Enabled".into()))).status,
            Status::Pass
        );
        let c = versioning(&Answer::Ok(Some("Suspended".into())));
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("aws_s3_bucket_versioning"));
        assert_eq!(versioning(&Answer::Ok(None)).status, Status::Fail);
        assert_eq!(
            versioning(&Answer::Denied("403".into())).status,
            Status::Warn
        );
    }

    #[test]
    fn encryption_needs_sse_kms_with_the_expected_key() {
        let kms = |key: &str| {
            Answer::Ok(Encryption {
                algorithm: "aws:kms".into(),
                kms_key: Some(key.into()),
                bucket_key: Some(true),
            })
        };
        let arn = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd";
        assert_eq!(encryption(&kms(arn), Some(arn)).status, Status::Pass);
        assert_eq!(encryption(&kms("1234abcd"), Some(arn)).status, Status::Pass);
        assert_eq!(encryption(&kms(arn), None).status, Status::Pass);
        let c = encryption(&kms("arn:aws:kms:eu-west-1:1:key/other"), Some(arn));
        assert_eq!(c.status, Status::Fail);
        assert!(c.evidence.contains("expected"), "{}", c.evidence);
        let sse_s3 = Answer::Ok(Encryption {
            algorithm: "AES256".into(),
            ..Encryption::default()
        });
        assert_eq!(encryption(&sse_s3, None).status, Status::Fail);
        let c = encryption(
            &Answer::Absent("ServerSideEncryptionConfigurationNotFoundError".into()),
            None,
        );
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("kms_master_key_id"));
    }

    #[test]
    fn the_public_access_block_needs_all_four_flags() {
        let all = PublicAccessBlock {
            block_public_acls: true,
            ignore_public_acls: true,
            block_public_policy: true,
            restrict_public_buckets: true,
        };
        assert_eq!(public_access_block(&Answer::Ok(all)).status, Status::Pass);
        let c = public_access_block(&Answer::Ok(PublicAccessBlock {
            restrict_public_buckets: false,
            ..all
        }));
        assert_eq!(c.status, Status::Fail);
        assert!(c.evidence.contains("RestrictPublicBuckets"));
        assert_eq!(
            public_access_block(&Answer::Absent(
                "NoSuchPublicAccessBlockConfiguration".into()
            ))
            .status,
            Status::Fail
        );
    }

    #[test]
    fn region_mismatches_fail_and_a_missing_header_is_not_supported() {
        assert_eq!(
            region(Some("eu-west-1"), "eu-west-1", Some("eu-west-1")).status,
            Status::Pass
        );
        assert_eq!(
            region(Some("eu-west-1"), "us-east-1", None).status,
            Status::Fail
        );
        assert_eq!(
            region(Some("eu-west-1"), "eu-west-1", Some("eu-central-1")).status,
            Status::Fail
        );
        let c = region(None, "us-east-1", None);
        assert_eq!(c.status, Status::Warn);
        assert!(c.evidence.starts_with(crate::report::NOT_SUPPORTED));
    }

    #[test]
    fn object_lock_is_judged_against_the_expectation() {
        assert_eq!(
            object_lock(&Answer::Absent("x".into()), false).status,
            Status::Pass
        );
        assert_eq!(
            object_lock(&Answer::Absent("x".into()), true).status,
            Status::Fail
        );
        assert_eq!(object_lock(&Answer::Ok(true), false).status, Status::Warn);
        assert_eq!(object_lock(&Answer::Ok(true), true).status, Status::Pass);
    }
}
