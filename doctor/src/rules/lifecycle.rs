//! Lifecycle verdicts (modules/bucket `lifecycle.tf`): incomplete
//! multipart uploads are aborted under the prefix; no current-version
//! expiration can reach live data or manifests under the prefix (only a
//! tag-filtered rule may, as the module's opt-in data rule does, because
//! manifests and heads never carry the tag); noncurrent versions expire.
//!
//! A rule's filter prefix "reaches" the segmirror keys when it and
//! `<format_root>/` overlap: one is a prefix of the other.

use crate::answer::Answer;
use crate::facts::LifecycleRule;
use crate::report::{Check, Status};
use crate::rules::unanswered;

const CALL: &str = "GetBucketLifecycleConfiguration";

fn overlaps(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn name(r: &LifecycleRule) -> String {
    if r.id.is_empty() {
        format!("(rule without id, prefix {:?})", r.filter.prefix)
    } else {
        format!("{:?}", r.id)
    }
}

/// The three lifecycle checks for keys under `format_root`
/// (`<prefix>/segmirror/v1`).
pub fn checks(answer: &Answer<Vec<LifecycleRule>>, format_root: &str) -> Vec<Check> {
    let root = format!("{format_root}/");
    let ids = [
        "lifecycle.abort-multipart",
        "lifecycle.no-expiry-of-live-data",
        "lifecycle.noncurrent-expiry",
    ];
    let musts = [true, true, false];
    if !matches!(answer, Answer::Ok(_) | Answer::Absent(_)) {
        return ids
            .iter()
            .zip(musts)
            .filter_map(|(id, m)| unanswered(id, m, CALL, answer))
            .collect();
    }
    let empty = Vec::new();
    let rules: &Vec<LifecycleRule> = match answer {
        Answer::Ok(r) => r,
        _ => &empty,
    };
    let enabled: Vec<&LifecycleRule> = rules.iter().filter(|r| r.enabled).collect();
    let none = if rules.is_empty() {
        "no lifecycle configuration"
    } else {
        "no enabled rule"
    };

    let abort = enabled.iter().find(|r| {
        r.abort_multipart_days.is_some()
            && root.starts_with(&r.filter.prefix)
            && r.filter.tags.is_empty()
            && !r.filter.sized
    });
    let abort = match abort {
        Some(r) => Check::pass(
            ids[0],
            true,
            format!(
                "rule {} aborts incomplete multipart uploads after {} days",
                name(r),
                r.abort_multipart_days.unwrap_or_default()
            ),
        ),
        None => Check::new(
            ids[0],
            true,
            Status::Fail,
            format!(
                "{none} aborts incomplete multipart uploads under {root}: parts of crashed uploads are billed forever"
            ),
            "modules/bucket rule abort-incomplete-multipart-uploads (filter {}, var.abort_incomplete_multipart_upload_days, default 2)",
        ),
    };

    let dangerous: Vec<String> = enabled
        .iter()
        .filter(|r| {
            (r.expiration_days.is_some() || r.expiration_date)
                && overlaps(&r.filter.prefix, &root)
                && r.filter.tags.is_empty()
        })
        .map(|r| {
            format!(
                "{} expires current objects under {:?}{}",
                name(r),
                r.filter.prefix,
                r.expiration_days
                    .map(|d| format!(" after {d} days"))
                    .unwrap_or_else(|| " on a date".to_string())
            )
        })
        .collect();
    let tagged: Vec<String> = enabled
        .iter()
        .filter(|r| {
            (r.expiration_days.is_some() || r.expiration_date)
                && overlaps(&r.filter.prefix, &root)
                && !r.filter.tags.is_empty()
        })
        .map(|r| name(r))
        .collect();
    let expiry = if dangerous.is_empty() {
        Check::pass(
            ids[1],
            true,
            if tagged.is_empty() {
                format!("no rule expires current objects under {root}")
            } else {
                format!(
                    "only tag-filtered rules expire current objects under {root} ({}): manifests and heads carry no tag",
                    tagged.join(", ")
                )
            },
        )
    } else {
        Check::new(
            ids[1],
            true,
            Status::Fail,
            format!(
                "{}: manifests and heads under it would be deleted and an idle partition's mirror would stop",
                dangerous.join("; ")
            ),
            "remove the rule, or restrict it to tagged data objects as modules/bucket does (var.data_expiration_days with var.data_object_tag)",
        )
    };

    let noncurrent = enabled
        .iter()
        .find(|r| r.noncurrent_days.is_some() && root.starts_with(&r.filter.prefix));
    let noncurrent = match noncurrent {
        Some(r) => Check::pass(
            ids[2],
            false,
            format!(
                "rule {} expires noncurrent versions after {} days{}",
                name(r),
                r.noncurrent_days.unwrap_or_default(),
                if r.expired_object_delete_marker {
                    " and removes expired delete markers"
                } else {
                    ""
                }
            ),
        ),
        None => Check::new(
            ids[2],
            false,
            Status::Warn,
            format!(
                "{none} expires noncurrent versions under {root}: deleted objects are kept (and billed) forever"
            ),
            "modules/bucket rule segmirror-noncurrent-versions (prefix <format_root>/, var.noncurrent_version_retention_days, default 30)",
        ),
    };
    vec![abort, expiry, noncurrent]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Filter;

    /// The rules modules/bucket writes, data expiry on.
    pub(crate) fn module_rules(format_root: &str) -> Vec<LifecycleRule> {
        vec![
            LifecycleRule {
                id: "abort-incomplete-multipart-uploads".into(),
                enabled: true,
                abort_multipart_days: Some(2),
                ..LifecycleRule::default()
            },
            LifecycleRule {
                id: "segmirror-noncurrent-versions".into(),
                enabled: true,
                filter: Filter {
                    prefix: format!("{format_root}/"),
                    ..Filter::default()
                },
                noncurrent_days: Some(30),
                expired_object_delete_marker: true,
                ..LifecycleRule::default()
            },
            LifecycleRule {
                id: "segmirror-expire-tagged-data-objects".into(),
                enabled: true,
                filter: Filter {
                    prefix: format!("{format_root}/"),
                    tags: vec![("segmirror-object".into(), "data".into())],
                    sized: false,
                },
                expiration_days: Some(400),
                ..LifecycleRule::default()
            },
        ]
    }

    fn statuses(c: &[Check]) -> Vec<Status> {
        c.iter().map(|c| c.status).collect()
    }

    #[test]
    fn the_module_rules_pass() {
        let c = checks(
            &Answer::Ok(module_rules("kafka/segmirror/v1")),
            "kafka/segmirror/v1",
        );
        assert_eq!(statuses(&c), vec![Status::Pass; 3], "{c:?}");
    }

    #[test]
    fn no_lifecycle_fails_the_abort_rule_and_warns_on_noncurrent() {
        let c = checks(
            &Answer::Absent("NoSuchLifecycleConfiguration".into()),
            "segmirror/v1",
        );
        assert_eq!(statuses(&c), vec![Status::Fail, Status::Pass, Status::Warn]);
        assert!(c[0].fix.contains("abort_incomplete_multipart_upload_days"));
    }

    #[test]
    fn an_untagged_expiration_reaching_the_prefix_fails() {
        for prefix in ["", "kafka/", "kafka/segmirror/v1/c1/topics/"] {
            let mut rules = module_rules("kafka/segmirror/v1");
            rules.push(LifecycleRule {
                id: "cleanup".into(),
                enabled: true,
                filter: Filter {
                    prefix: prefix.into(),
                    ..Filter::default()
                },
                expiration_days: Some(7),
                ..LifecycleRule::default()
            });
            let c = checks(&Answer::Ok(rules), "kafka/segmirror/v1");
            assert_eq!(c[1].status, Status::Fail, "{prefix}: {:?}", c[1]);
            assert!(c[1].evidence.contains("\"cleanup\""));
        }
        // Elsewhere in the bucket, or disabled: fine.
        let mut rules = module_rules("kafka/segmirror/v1");
        rules.push(LifecycleRule {
            id: "logs".into(),
            enabled: true,
            filter: Filter {
                prefix: "logs/".into(),
                ..Filter::default()
            },
            expiration_days: Some(7),
            ..LifecycleRule::default()
        });
        rules.push(LifecycleRule {
            id: "off".into(),
            enabled: false,
            expiration_days: Some(1),
            ..LifecycleRule::default()
        });
        let c = checks(&Answer::Ok(rules), "kafka/segmirror/v1");
        assert_eq!(c[1].status, Status::Pass);
    }

    #[test]
    fn an_abort_rule_elsewhere_does_not_count() {
        let mut rules = module_rules("kafka/segmirror/v1");
        rules[0].filter.prefix = "other/".into();
        let c = checks(&Answer::Ok(rules), "kafka/segmirror/v1");
        assert_eq!(c[0].status, Status::Fail);
    }

    #[test]
    fn an_unsupported_call_warns_on_each_check() {
        let c = checks(&Answer::Unsupported("501".into()), "segmirror/v1");
        assert_eq!(statuses(&c), vec![Status::Warn; 3]);
        assert!(
            c.iter()
                .all(|c| c.evidence.starts_with(crate::report::NOT_SUPPORTED))
        );
    }
}
