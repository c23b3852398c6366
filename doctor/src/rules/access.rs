//! Least privilege, judged from a probe under the prefix (modules/iam):
//! the shipper may put, get, list and delete under its cluster's prefix;
//! the applier may get and list there but not put; a put outside the
//! cluster's prefix should be denied (a warn when it is allowed: the
//! credentials can write where they should not).
//!
//! Over plain HTTP to a bucket whose policy denies non-TLS requests, object
//! requests are refused by design: the check says so instead of blaming
//! the credentials.

use crate::answer::Answer;
use crate::expect::View;
use crate::report::{Check, Status};

/// What each probe request answered (`None`: not attempted).
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// PutObject of the probe key.
    pub put: Option<Answer<()>>,
    /// GetObject of the probe key (the applier reads a missing key: 404 is
    /// allowed, 403 denied).
    pub get: Option<Answer<()>>,
    /// ListObjectsV2 under the cluster's prefix.
    pub list: Option<Answer<()>>,
    /// DeleteObject of the probe key.
    pub delete: Option<Answer<()>>,
    /// PutObject outside the cluster's prefix.
    pub outside_put: Option<Answer<()>>,
}

fn word(a: &Option<Answer<()>>) -> &'static str {
    match a {
        None => "not tried",
        Some(Answer::Ok(())) => "ok",
        Some(Answer::Denied(_)) => "denied",
        Some(Answer::Unsupported(_)) => "not supported",
        Some(Answer::Absent(_)) | Some(Answer::Failed(_)) => "failed",
    }
}

/// The two checks: `access.prefix` (must-have) and `access.outside-prefix`.
/// `plain_http_refused`: the endpoint is `http://` and the bucket policy
/// denies non-TLS requests.
pub fn checks(view: View, prefix: &str, p: &Probe, plain_http_refused: bool) -> Vec<Check> {
    const ID: &str = "access.prefix";
    const OUT: &str = "access.outside-prefix";
    let summary = format!(
        "under {prefix}: put {}, get {}, list {}, delete {}",
        word(&p.put),
        word(&p.get),
        word(&p.list),
        word(&p.delete)
    );
    let ok = |a: &Option<Answer<()>>| matches!(a, Some(Answer::Ok(())));
    let denied = |a: &Option<Answer<()>>| matches!(a, Some(Answer::Denied(_)));
    let needed: Vec<&Option<Answer<()>>> = match view {
        View::Shipper => vec![&p.put, &p.get, &p.list, &p.delete],
        View::Applier => vec![&p.get, &p.list],
    };
    let object_refused = [&p.put, &p.get, &p.delete].iter().any(|a| denied(a));
    let mut out = Vec::new();
    if plain_http_refused && object_refused {
        out.push(Check::new(
            ID,
            true,
            Status::Warn,
            format!("{summary}: not measurable over plain HTTP, the bucket policy refuses non-TLS requests (as it should)"),
            "run doctor against the https endpoint",
        ));
    } else if needed.iter().all(|a| ok(a)) {
        let extra = match (view, &p.put) {
            (View::Applier, Some(Answer::Ok(()))) => {
                "; but the applier's credentials can put (modules/iam gives the applier no write action)"
            }
            _ => "",
        };
        out.push(if extra.is_empty() {
            Check::pass(ID, true, summary)
        } else {
            Check::new(
                ID,
                true,
                Status::Warn,
                format!("{summary}{extra}"),
                "attach modules/iam's applier policy (read-only) instead of a broader one",
            )
        });
    } else if needed
        .iter()
        .any(|a| matches!(a, Some(Answer::Unsupported(_))))
    {
        out.push(Check::not_supported(ID, true, "a probe request", &summary));
    } else {
        out.push(Check::new(
            ID,
            true,
            Status::Fail,
            summary,
            match view {
                View::Shipper => "attach modules/iam's shipper policy (s3:GetObject, PutObject, DeleteObject on <format_root>/<cluster-id>/*, ListBucket with that s3:prefix) to the shipper's role",
                View::Applier => "attach modules/iam's applier policy (s3:GetObject and prefix-conditioned s3:ListBucket on the source cluster's prefix) to the applier's role",
            },
        ));
    }
    match &p.outside_put {
        None => {}
        Some(Answer::Denied(_)) => out.push(Check::pass(
            OUT,
            false,
            "a put outside the cluster's prefix was denied",
        )),
        Some(Answer::Ok(())) => out.push(Check::new(
            OUT,
            false,
            Status::Warn,
            "a put outside the cluster's prefix was ALLOWED (the probe was deleted; on a versioned bucket a delete marker and a noncurrent version remain until they expire)",
            "scope the role to its prefix with modules/iam (its policies allow only <format_root>/<cluster-id>/*)",
        )),
        Some(other) => out.push(Check::new(
            OUT,
            false,
            Status::Warn,
            format!(
                "a put outside the cluster's prefix: {}",
                other.error_text().unwrap_or("")
            ),
            "",
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Option<Answer<()>> {
        Some(Answer::Ok(()))
    }
    fn denied() -> Option<Answer<()>> {
        Some(Answer::Denied("AccessDenied".into()))
    }

    #[test]
    fn a_scoped_shipper_passes() {
        let p = Probe {
            put: ok(),
            get: ok(),
            list: ok(),
            delete: ok(),
            outside_put: denied(),
        };
        let c = checks(View::Shipper, "x/", &p, false);
        assert_eq!(c[0].status, Status::Pass);
        assert_eq!(c[1].status, Status::Pass);
    }

    #[test]
    fn a_shipper_that_cannot_write_fails_and_one_that_writes_anywhere_warns() {
        let p = Probe {
            put: denied(),
            get: ok(),
            list: ok(),
            delete: ok(),
            outside_put: ok(),
        };
        let c = checks(View::Shipper, "x/", &p, false);
        assert_eq!(c[0].status, Status::Fail);
        assert!(c[0].fix.contains("modules/iam"));
        assert_eq!(c[1].status, Status::Warn);
        assert!(c[1].evidence.contains("ALLOWED"));
    }

    #[test]
    fn over_plain_http_with_a_tls_only_policy_it_is_not_measurable() {
        let p = Probe {
            put: denied(),
            get: denied(),
            list: ok(),
            delete: denied(),
            outside_put: None,
        };
        let c = checks(View::Shipper, "x/", &p, true);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, Status::Warn);
        assert!(c[0].evidence.contains("plain HTTP"));
    }

    #[test]
    fn an_applier_needs_get_and_list_and_should_not_put() {
        let p = Probe {
            put: denied(),
            get: ok(),
            list: ok(),
            ..Probe::default()
        };
        assert_eq!(
            checks(View::Applier, "x/", &p, false)[0].status,
            Status::Pass
        );
        let p = Probe { put: ok(), ..p };
        assert_eq!(
            checks(View::Applier, "x/", &p, false)[0].status,
            Status::Warn
        );
        let p = Probe {
            list: denied(),
            ..p
        };
        assert_eq!(
            checks(View::Applier, "x/", &p, false)[0].status,
            Status::Fail
        );
    }
}
