//! Replication verdicts (modules/replication): on the source bucket, an
//! enabled rule whose filter covers each cluster's prefix and sends it to
//! the destination bucket, with delete markers and SSE-KMS objects as the
//! module sets them; on either side, what `x-amz-replication-status` of the
//! newest change-feed head says, and how old the newest replicated head is.
//!
//! The status state machine S3 documents: a source object is `PENDING`
//! until it is copied, then `COMPLETED` (some endpoints say `COMPLETE`),
//! or `FAILED`; its copy in the destination says `REPLICA`. An object
//! without the header was never matched by a rule (on AWS), or the
//! endpoint does not replicate (S3-compatible servers).

use crate::answer::Answer;
use crate::facts::{ObjectHead, ReplicationRule};
use crate::report::{Check, Status};
use crate::rules::{names_bucket, unanswered};

const CALL: &str = "GetBucketReplication";
const RULE_FIX: &str = "modules/replication (prefixes = [\"<format_root>/<cluster-id>/\"], destination_bucket_arn = the DR bucket; the example's replication_to_dr)";

/// The rule covering `prefix` towards `destination`, if any.
fn covering<'a>(
    rules: &'a [ReplicationRule],
    prefix: &str,
    destination: &str,
) -> Option<&'a ReplicationRule> {
    rules.iter().find(|r| {
        r.enabled
            && r.filter.tags.is_empty()
            && prefix.starts_with(&r.filter.prefix)
            && names_bucket(&r.destination, destination)
    })
}

/// The source bucket's replication configuration against the prefixes
/// that must be replicated (`<format_root>/<cluster>/` each) to
/// `destination` (a bucket name): the must-have rule check, then the
/// advisory delete-marker and SSE-KMS checks.
pub fn rule_checks(
    answer: &Answer<Vec<ReplicationRule>>,
    source: &str,
    prefixes: &[String],
    destination: &str,
    delete_markers_expected: bool,
    replica_key_expected: Option<&str>,
) -> Vec<Check> {
    const RULE: &str = "replication.rule";
    if let Some(c) = unanswered(RULE, true, CALL, answer) {
        return vec![c];
    }
    let Answer::Ok(rules) = answer else {
        return vec![Check::new(
            RULE,
            true,
            Status::Fail,
            format!(
                "{source} has no replication configuration ({CALL}: not configured): nothing reaches {destination}"
            ),
            RULE_FIX,
        )];
    };
    let mut missing = Vec::new();
    let mut found = Vec::new();
    for p in prefixes {
        match covering(rules, p, destination) {
            Some(r) => found.push((p, r)),
            None => missing.push(p.as_str()),
        }
    }
    let mut out = Vec::new();
    if !missing.is_empty() {
        let have: Vec<String> = rules
            .iter()
            .map(|r| {
                format!(
                    "{:?} {} prefix {:?} -> {}",
                    r.id,
                    if r.enabled { "Enabled" } else { "Disabled" },
                    r.filter.prefix,
                    r.destination
                )
            })
            .collect();
        out.push(Check::new(
            RULE,
            true,
            Status::Fail,
            format!(
                "no enabled rule of {source} replicates {} to {destination} (rules: {})",
                missing.join(", "),
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join("; ")
                }
            ),
            RULE_FIX,
        ));
        return out;
    }
    let rule_ids: Vec<String> = found
        .iter()
        .map(|(p, r)| format!("{p} by {:?}", r.id))
        .collect();
    out.push(Check::pass(
        RULE,
        true,
        format!("{} -> {destination}", rule_ids.join(", ")),
    ));

    let wrong_markers: Vec<String> = found
        .iter()
        .filter(|(_, r)| r.delete_markers.unwrap_or(false) != delete_markers_expected)
        .map(|(_, r)| format!("{:?}", r.id))
        .collect();
    out.push(if wrong_markers.is_empty() {
        Check::pass(
            "replication.delete-markers",
            false,
            format!(
                "delete markers {}, as expected",
                if delete_markers_expected {
                    "replicated"
                } else {
                    "not replicated"
                }
            ),
        )
    } else {
        Check::new(
            "replication.delete-markers",
            false,
            Status::Warn,
            format!(
                "rule(s) {} {} delete markers, expected the opposite (some endpoints always report Disabled)",
                wrong_markers.join(", "),
                if delete_markers_expected {
                    "do not replicate"
                } else {
                    "replicate"
                }
            ),
            "modules/replication var.replicate_delete_markers (delete_marker_replication status)",
        )
    });

    let kms_gaps: Vec<String> = found
        .iter()
        .filter_map(|(_, r)| {
            let mut gaps = Vec::new();
            if r.sse_kms_objects != Some(true) {
                gaps.push(
                    "SseKmsEncryptedObjects is not Enabled (SSE-KMS objects are not replicated)",
                );
            }
            match (&r.replica_kms_key, replica_key_expected) {
                (None, _) => gaps.push("no ReplicaKmsKeyID"),
                (Some(k), Some(want)) if !crate::rules::security::same_kms_key(k, want) => {
                    gaps.push("ReplicaKmsKeyID is not the destination's key")
                }
                _ => {}
            }
            (!gaps.is_empty()).then(|| format!("{:?}: {}", r.id, gaps.join(", ")))
        })
        .collect();
    out.push(if kms_gaps.is_empty() {
        Check::pass(
            "replication.sse-kms",
            false,
            "SSE-KMS objects selected, re-encrypted with the replica key",
        )
    } else {
        Check::new(
            "replication.sse-kms",
            false,
            Status::Warn,
            format!("{} (some endpoints drop these settings)", kms_gaps.join("; ")),
            "modules/replication sets source_selection_criteria.sse_kms_encrypted_objects = Enabled and encryption_configuration.replica_kms_key_id = var.replica_kms_key_arn",
        )
    });
    out
}

/// Which bucket a head object was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The bucket the shipper writes (replication source).
    Source,
    /// The replica the applier reads.
    Destination,
}

/// The replication status of the newest change-feed head (`key`), read
/// from `side`, `now_s` seconds since the epoch. `aws` is whether the
/// endpoint is AWS S3 (elsewhere a missing header means the endpoint does
/// not replicate).
pub fn status(
    side: Side,
    key: &str,
    head: &Answer<ObjectHead>,
    now_s: i64,
    max_delay_s: i64,
    aws: bool,
) -> Check {
    const ID: &str = "replication.status";
    let must = side == Side::Source;
    if let Some(c) = unanswered(ID, must, "HeadObject", head) {
        return c;
    }
    let Answer::Ok(h) = head else {
        return Check::new(
            ID,
            must,
            Status::Warn,
            format!("{key} vanished between LIST and HEAD"),
            "run doctor again",
        );
    };
    let age = h.last_modified_s.map(|t| (now_s - t).max(0));
    let age_text = age.map(|a| format!(", {a} s old")).unwrap_or_default();
    let status = h.replication_status.as_deref().map(str::to_ascii_uppercase);
    match (side, status.as_deref()) {
        (Side::Source, Some("COMPLETED" | "COMPLETE")) => Check::pass(
            ID,
            true,
            format!("newest head {key} replicated (COMPLETED{age_text})"),
        ),
        (Side::Source, Some("PENDING")) => match age {
            Some(a) if a > max_delay_s => Check::new(
                ID,
                true,
                Status::Fail,
                format!("newest head {key} still PENDING after {a} s (more than {max_delay_s} s)"),
                "check the replication role's permissions and the alarms of modules/replication (OperationsFailedReplication, ReplicationLatency)",
            ),
            _ => Check::pass(ID, true, format!("newest head {key} PENDING{age_text}")),
        },
        (Side::Source, Some("FAILED")) => Check::new(
            ID,
            true,
            Status::Fail,
            format!("newest head {key}: replication FAILED"),
            "check the replication role (s3:ReplicateObject, kms:Decrypt/Encrypt on both keys) of modules/replication, then re-upload or use S3 Batch Replication",
        ),
        (Side::Destination, Some("REPLICA")) => match age {
            Some(a) if a > max_delay_s => Check::new(
                ID,
                false,
                Status::Warn,
                format!(
                    "newest replicated head {key} is {a} s old (more than {max_delay_s} s): replication lags, or the source shipped nothing since"
                ),
                "compare with the source bucket's newest head; see the ReplicationLatency alarm",
            ),
            _ => Check::pass(
                ID,
                false,
                format!(
                    "newest head {key} is a REPLICA; replication delay {}",
                    age.map(|a| format!("{a} s"))
                        .unwrap_or_else(|| "unknown".into())
                ),
            ),
        },
        (Side::Destination, Some(other)) => Check::new(
            ID,
            false,
            Status::Warn,
            format!(
                "newest head {key} says {other}: that is a source's status; is this the source bucket?"
            ),
            "point applier doctor at the DR bucket (the example's dr_bucket)",
        ),
        (Side::Source, Some("REPLICA")) => Check::new(
            ID,
            true,
            Status::Warn,
            format!("newest head {key} is a REPLICA: is this the destination bucket?"),
            "point shipper doctor at the primary bucket",
        ),
        (_, Some(other)) => Check::new(
            ID,
            must,
            Status::Warn,
            format!("newest head {key}: unknown replication status {other:?}"),
            "",
        ),
        (_, None) if !aws => Check::not_supported(
            ID,
            must,
            "HeadObject",
            &format!("no x-amz-replication-status for {key}"),
        ),
        (Side::Source, None) => Check::new(
            ID,
            true,
            Status::Fail,
            format!(
                "newest head {key} has no replication status: no rule matched it when it was written"
            ),
            RULE_FIX,
        ),
        (Side::Destination, None) => Check::new(
            ID,
            false,
            Status::Warn,
            format!(
                "newest head {key} has no replication status: it was written here directly, not replicated"
            ),
            "check that the shipper writes to the primary bucket and replication_to_dr covers its cluster",
        ),
    }
}

/// Whether the destination has the source's newest head (both as
/// sequence numbers; `None`: no head).
pub fn arrival(
    cluster: &str,
    source_newest: &Answer<Option<u64>>,
    dest_newest: Option<u64>,
) -> Check {
    const ID: &str = "replication.arrival";
    if let Some(c) = unanswered(ID, false, "ListObjectsV2 (source)", source_newest) {
        return c;
    }
    let src = match source_newest {
        Answer::Ok(s) => *s,
        _ => None,
    };
    match (src, dest_newest) {
        (None, _) => Check::pass(
            ID,
            false,
            format!("cluster {cluster}: the source has no head yet"),
        ),
        (Some(s), Some(d)) if d >= s => Check::pass(
            ID,
            false,
            format!("cluster {cluster}: newest head {d} arrived (source {s})"),
        ),
        (Some(s), d) => Check::new(
            ID,
            false,
            Status::Warn,
            format!(
                "cluster {cluster}: the source's newest head is {s}, the destination's {}",
                d.map(|d| d.to_string()).unwrap_or_else(|| "none".into())
            ),
            "replication lags or does not cover the prefix: see replication.rule and the ReplicationLatency alarm",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Filter;

    fn module_rule(prefix: &str) -> ReplicationRule {
        ReplicationRule {
            id: "segmirror-kafka-segmirror-v1-c1".into(),
            enabled: true,
            filter: Filter {
                prefix: prefix.into(),
                ..Filter::default()
            },
            destination: "arn:aws:s3:::dr".into(),
            delete_markers: Some(true),
            sse_kms_objects: Some(true),
            replica_kms_key: Some("arn:aws:kms:eu-central-1:1:key/k".into()),
        }
    }

    fn statuses(c: &[Check]) -> Vec<Status> {
        c.iter().map(|c| c.status).collect()
    }

    #[test]
    fn the_module_rule_passes() {
        let p = "kafka/segmirror/v1/c1/".to_string();
        let c = rule_checks(
            &Answer::Ok(vec![module_rule(&p)]),
            "primary",
            &[p],
            "dr",
            true,
            Some("arn:aws:kms:eu-central-1:1:key/k"),
        );
        assert_eq!(statuses(&c), vec![Status::Pass; 3], "{c:?}");
    }

    #[test]
    fn a_missing_or_narrow_or_disabled_rule_fails() {
        let p = "kafka/segmirror/v1/c1/".to_string();
        let absent = rule_checks(
            &Answer::Absent("ReplicationConfigurationNotFoundError".into()),
            "primary",
            std::slice::from_ref(&p),
            "dr",
            true,
            None,
        );
        assert_eq!(statuses(&absent), vec![Status::Fail]);
        assert!(absent[0].fix.contains("modules/replication"));
        for rule in [
            module_rule("kafka/segmirror/v1/c2/"),
            ReplicationRule {
                enabled: false,
                ..module_rule(&p)
            },
            ReplicationRule {
                destination: "arn:aws:s3:::elsewhere".into(),
                ..module_rule(&p)
            },
        ] {
            let c = rule_checks(
                &Answer::Ok(vec![rule.clone()]),
                "primary",
                std::slice::from_ref(&p),
                "dr",
                true,
                None,
            );
            assert_eq!(statuses(&c), vec![Status::Fail], "{rule:?}");
        }
    }

    #[test]
    fn what_some_endpoints_drop_is_a_warn() {
        // moto: Filter {Prefix: ""}, DeleteMarkerReplication Disabled, no
        // SourceSelectionCriteria.
        let rule = ReplicationRule {
            delete_markers: Some(false),
            sse_kms_objects: None,
            ..module_rule("")
        };
        let c = rule_checks(
            &Answer::Ok(vec![rule]),
            "primary",
            &["kafka/segmirror/v1/c1/".to_string()],
            "dr",
            true,
            None,
        );
        assert_eq!(statuses(&c), vec![Status::Pass, Status::Warn, Status::Warn]);
    }

    fn head(status: Option<&str>, modified: i64) -> Answer<ObjectHead> {
        Answer::Ok(ObjectHead {
            replication_status: status.map(String::from),
            last_modified_s: Some(modified),
            ..ObjectHead::default()
        })
    }

    #[test]
    fn the_replication_status_state_machine() {
        use Side::*;
        let now = 10_000;
        let max = 900;
        let table: &[(Side, Option<&str>, i64, bool, Status)] = &[
            (Source, Some("COMPLETED"), now - 5, true, Status::Pass),
            (Source, Some("COMPLETE"), now - 5, true, Status::Pass),
            (Source, Some("PENDING"), now - 60, true, Status::Pass),
            (Source, Some("PENDING"), now - 2000, true, Status::Fail),
            (Source, Some("FAILED"), now - 5, true, Status::Fail),
            (Source, Some("REPLICA"), now - 5, true, Status::Warn),
            (Source, None, now - 5, true, Status::Fail),
            (Source, None, now - 5, false, Status::Warn),
            (Destination, Some("REPLICA"), now - 5, true, Status::Pass),
            (Destination, Some("REPLICA"), now - 2000, true, Status::Warn),
            (Destination, Some("COMPLETED"), now - 5, true, Status::Warn),
            (Destination, None, now - 5, true, Status::Warn),
            (Destination, None, now - 5, false, Status::Warn),
        ];
        for (side, st, modified, aws, want) in table {
            let c = status(*side, "h", &head(*st, *modified), now, max, *aws);
            assert_eq!(
                c.status, *want,
                "{side:?} {st:?} {modified} aws={aws}: {}",
                c.evidence
            );
        }
        let c = status(
            Destination,
            "h",
            &head(Some("REPLICA"), now - 42),
            now,
            max,
            true,
        );
        assert!(
            c.evidence.contains("replication delay 42 s"),
            "{}",
            c.evidence
        );
        let c = status(Destination, "h", &head(None, now), now, max, false);
        assert!(c.evidence.starts_with(crate::report::NOT_SUPPORTED));
    }

    #[test]
    fn arrival_compares_the_newest_heads() {
        assert_eq!(
            arrival("c", &Answer::Ok(Some(5)), Some(5)).status,
            Status::Pass
        );
        assert_eq!(
            arrival("c", &Answer::Ok(Some(5)), Some(3)).status,
            Status::Warn
        );
        assert_eq!(
            arrival("c", &Answer::Ok(Some(5)), None).status,
            Status::Warn
        );
        assert_eq!(arrival("c", &Answer::Ok(None), None).status, Status::Pass);
        assert_eq!(
            arrival("c", &Answer::Denied("403".into()), None).status,
            Status::Warn
        );
    }
}
