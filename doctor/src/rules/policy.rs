//! The bucket policy's TLS-only promise (modules/bucket `policy.tf`):
//! a Deny of `s3:*` to every principal on the bucket and its objects when
//! `aws:SecureTransport` is `false` (must-have), and when `s3:TlsVersion`
//! is below 1.2 (advisory). The policy is parsed as JSON, the way IAM
//! reads it: `Statement`, `Action`, `Resource` and condition values may
//! each be one value or a list.

use serde_json::Value;

use crate::answer::Answer;
use crate::report::{Check, Status};
use crate::rules::unanswered;

const ID: &str = "tls-only-policy";
const FIX: &str = "modules/bucket policy.tf: statements DenyInsecureTransport (Deny s3:* on the bucket and bucket/* to Principal * when Bool aws:SecureTransport = false) and DenyOutdatedTLS (NumericLessThan s3:TlsVersion 1.2)";

fn values(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Bool(b)) => vec![b.to_string()],
        Some(Value::Number(n)) => vec![n.to_string()],
        Some(Value::Array(a)) => a.iter().flat_map(|x| values(Some(x))).collect(),
        _ => Vec::new(),
    }
}

/// Whether a Deny statement covers every request to the bucket and its
/// objects from anyone.
fn denies_everything_on(stmt: &Value, bucket: &str) -> bool {
    let effect = stmt.get("Effect").and_then(Value::as_str) == Some("Deny");
    let everyone = match stmt.get("Principal") {
        Some(Value::String(s)) => s == "*",
        Some(Value::Object(o)) => values(o.get("AWS")).iter().any(|p| p == "*"),
        _ => false,
    };
    let actions = values(stmt.get("Action"));
    let all_actions = actions.iter().any(|a| a == "s3:*" || a == "*");
    let resources = values(stmt.get("Resource"));
    let covers = |suffix: &str| {
        resources
            .iter()
            .any(|r| r == "*" || r.ends_with(&format!(":s3:::{bucket}{suffix}")))
    };
    effect && everyone && all_actions && covers("") && covers("/*")
}

fn condition(stmt: &Value, op: &str, key: &str) -> Vec<String> {
    stmt.get("Condition")
        .and_then(|c| c.get(op))
        .and_then(|o| o.as_object())
        .and_then(|o| {
            o.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| values(Some(v)))
        })
        .unwrap_or_default()
}

/// GetBucketPolicy's document against the TLS-only promise. `live` is
/// what a plain-HTTP request to this endpoint showed, when one was made
/// (`Some(true)`: refused with 403), and goes into the evidence.
pub fn tls_only(answer: &Answer<String>, bucket: &str, live: Option<bool>) -> Check {
    if let Some(c) = unanswered(ID, true, "GetBucketPolicy", answer) {
        return c;
    }
    let Answer::Ok(text) = answer else {
        return Check::new(
            ID,
            true,
            Status::Fail,
            "no bucket policy (GetBucketPolicy: NoSuchBucketPolicy): requests over plain HTTP are accepted",
            FIX,
        );
    };
    let doc: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Check::new(
                ID,
                true,
                Status::Fail,
                format!("the bucket policy is not JSON: {e}"),
                FIX,
            );
        }
    };
    let statements: Vec<&Value> = match doc.get("Statement") {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v @ Value::Object(_)) => vec![v],
        _ => Vec::new(),
    };
    let deny_http = statements.iter().find(|s| {
        denies_everything_on(s, bucket)
            && condition(s, "Bool", "aws:SecureTransport")
                .iter()
                .any(|v| v == "false")
    });
    let deny_old_tls = statements.iter().any(|s| {
        denies_everything_on(s, bucket)
            && condition(s, "NumericLessThan", "s3:TlsVersion")
                .iter()
                .any(|v| v == "1.2")
    });
    let live_text = match live {
        Some(true) => {
            "; live: a plain-HTTP request to this endpoint was refused (403), as the policy says"
        }
        Some(false) => "; live: a plain-HTTP request to this endpoint was accepted",
        None => "",
    };
    let sid = |s: &Value| {
        s.get("Sid")
            .and_then(Value::as_str)
            .map(|x| format!(" ({x})"))
            .unwrap_or_default()
    };
    match (deny_http, deny_old_tls) {
        (None, _) => Check::new(
            ID,
            true,
            Status::Fail,
            format!(
                "the bucket policy has {} statement(s) but none denies s3:* on the bucket and its objects when aws:SecureTransport is false{live_text}",
                statements.len()
            ),
            FIX,
        ),
        (Some(s), true) => Check::pass(
            ID,
            true,
            format!("denies non-TLS{} and TLS < 1.2{live_text}", sid(s)),
        ),
        (Some(s), false) => Check::new(
            ID,
            true,
            Status::Warn,
            format!(
                "denies non-TLS{} but not TLS < 1.2 (no NumericLessThan s3:TlsVersion 1.2){live_text}",
                sid(s)
            ),
            FIX,
        ),
    }
}

/// Whether a policy document holds the non-TLS Deny (for explaining a
/// refused plain-HTTP probe).
pub fn denies_plain_http(policy: &str, bucket: &str) -> bool {
    tls_only(&Answer::Ok(policy.to_string()), bucket, None).status != Status::Fail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What modules/bucket renders (aws_iam_policy_document output).
    pub(crate) fn module_policy(bucket: &str) -> String {
        serde_json::json!({
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
                    "Principal": "*",
                    "Action": ["s3:*"],
                    "Resource": [format!("arn:aws:s3:::{bucket}/*"), format!("arn:aws:s3:::{bucket}")],
                    "Condition": {"NumericLessThan": {"s3:TlsVersion": ["1.2"]}}
                }
            ]
        })
        .to_string()
    }

    #[test]
    fn the_module_policy_passes() {
        let c = tls_only(&Answer::Ok(module_policy("b")), "b", Some(true));
        assert_eq!(c.status, Status::Pass, "{}", c.evidence);
        assert!(c.evidence.contains("refused"), "{}", c.evidence);
        assert!(denies_plain_http(&module_policy("b"), "b"));
    }

    #[test]
    fn near_misses_fail() {
        // Another bucket's ARN, an Allow, a narrower action, objects only.
        for (from, to) in [
            ("arn:aws:s3:::b\"", "arn:aws:s3:::other\""),
            ("\"Deny\"", "\"Allow\""),
            ("\"s3:*\"", "\"s3:PutObject\""),
        ] {
            let p = module_policy("b").replacen(from, to, 1);
            let c = tls_only(&Answer::Ok(p.clone()), "b", None);
            assert_eq!(c.status, Status::Fail, "{from} -> {to}: {p}");
        }
        let c = tls_only(&Answer::Ok("{\"Statement\": []}".into()), "b", None);
        assert_eq!(c.status, Status::Fail);
        let c = tls_only(&Answer::Ok("not json".into()), "b", None);
        assert_eq!(c.status, Status::Fail);
        let c = tls_only(&Answer::Absent("NoSuchBucketPolicy".into()), "b", None);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("DenyInsecureTransport"));
    }

    #[test]
    fn without_the_tls_version_statement_it_warns() {
        let doc: Value = serde_json::from_str(&module_policy("b")).expect("json");
        let one = serde_json::json!({"Statement": doc["Statement"][0]}).to_string();
        let c = tls_only(&Answer::Ok(one), "b", None);
        assert_eq!(c.status, Status::Warn, "{}", c.evidence);
    }
}
