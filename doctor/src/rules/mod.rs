//! The verdicts: pure functions from what an API answered (an
//! [`Answer`](crate::answer::Answer) of a [`crate::facts`] value) and what
//! is expected to a [`Check`] with its evidence and fix. No IO here; each
//! submodule's tests run on canned answers, including those the S3 test
//! server cannot give (replication statuses).
//!
//! Invariants: every function is total (any answer, any expectation gives
//! a check); an answer the endpoint cannot give is a warn that says
//! [`crate::report::NOT_SUPPORTED`]; a setting that cannot be read with
//! these credentials is a warn naming the permission; only a broken
//! must-have promise is a fail.

pub mod access;
pub mod layout;
pub mod lifecycle;
pub mod policy;
pub mod replication;
pub mod security;

use crate::answer::Answer;
use crate::report::{Check, Status};

/// The check for an answer that carries no value: not supported, denied,
/// or failed. `None` for [`Answer::Ok`] and [`Answer::Absent`], which each
/// rule judges itself.
pub fn unanswered<T>(id: &str, must_have: bool, call: &str, answer: &Answer<T>) -> Option<Check> {
    match answer {
        Answer::Ok(_) | Answer::Absent(_) => None,
        Answer::Unsupported(text) => Some(Check::not_supported(id, must_have, call, text)),
        Answer::Denied(text) => Some(Check::new(
            id,
            must_have,
            Status::Warn,
            format!("{call} was denied to these credentials: {text}"),
            format!(
                "run doctor with credentials allowed s3:{call} (or its IAM action) on the bucket, e.g. an audit role"
            ),
        )),
        Answer::Failed(text) => Some(Check::new(
            id,
            must_have,
            Status::Warn,
            format!("{call} failed: {text}"),
            "run doctor again; if it persists, check the endpoint".to_string(),
        )),
    }
}

/// Whether an S3 bucket ARN (`arn:<partition>:s3:::name`) or a bare name
/// names `bucket`.
pub fn names_bucket(arn_or_name: &str, bucket: &str) -> bool {
    arn_or_name == bucket
        || (arn_or_name.starts_with("arn:")
            && arn_or_name
                .strip_suffix(bucket)
                .is_some_and(|head| head.ends_with(":s3:::")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_arns_are_matched_by_name_in_any_partition() {
        assert!(names_bucket("arn:aws:s3:::dr", "dr"));
        assert!(names_bucket("arn:aws-cn:s3:::dr", "dr"));
        assert!(names_bucket("dr", "dr"));
        assert!(!names_bucket("arn:aws:s3:::xdr", "dr"));
        assert!(!names_bucket("arn:aws:s3:::dr2", "dr"));
    }

    #[test]
    fn unanswered_calls_are_warns_that_say_why() {
        let c = unanswered::<()>(
            "x",
            true,
            "GetBucketReplication",
            &Answer::Unsupported("501 NotImplemented".into()),
        )
        .expect("a check");
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.evidence.starts_with(crate::report::NOT_SUPPORTED),
            "{}",
            c.evidence
        );
        let c = unanswered::<()>("x", true, "GetBucketPolicy", &Answer::Denied("403".into()))
            .expect("a check");
        assert!(c.fix.contains("s3:GetBucketPolicy"), "{}", c.fix);
        assert!(unanswered::<()>("x", true, "c", &Answer::Absent("404".into())).is_none());
    }
}
