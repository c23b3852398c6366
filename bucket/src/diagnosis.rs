//! What went wrong talking to a bucket, said in one line that names what
//! was tried and what to do.
//!
//! The object store client reports an S3 problem as a chain of HTTP
//! errors (a missing credential is a refused or timed-out request to
//! `169.254.169.254`, a wrong region is a `301` or an
//! `AuthorizationHeaderMalformed` body). [`classify`] turns the text of
//! such an error into a [`StoreProblem`]; its `Display` is the line an
//! operator reads. Both services use it, so the shipper and the applier
//! say the same thing about the same bucket.
//!
//! Invariants:
//! - [`classify`] is pure: the error's text and a [`StoreContext`] (the
//!   bucket, endpoint, region and credential source as configured) in, a
//!   problem or `None` out. It returns `None` rather than guess: an error
//!   it does not recognise is printed as it is ([`one_line`]).
//! - Every line names the bucket or the endpoint, and the setting that
//!   fixes it; none holds a secret (only where credentials came from).
//! - [`one_line`] prints every cause of an error chain exactly once, even
//!   when an error both interpolates its source in `Display` and returns
//!   it from `source()` (as `object_store`'s errors do).
//!
//! Credentials before the first request: [`missing_credentials`] reports,
//! without any IO, the case where no source can work
//! (`AWS_EC2_METADATA_DISABLED` with nothing else set, or half a static
//! key pair); [`crate::url::BucketUrl::build`] refuses to build then.
//!
//! This module knows no bucket URL: [`crate::first_request`] builds a
//! [`StoreContext`] from one and runs the checks around a service's first
//! request, so `url -> diagnosis` and `first_request -> url, diagnosis`
//! have no cycle.

use std::fmt;

/// The instance metadata endpoint `object_store` asks for credentials when
/// no other source is configured (`AWS_METADATA_ENDPOINT` overrides it).
pub const DEFAULT_METADATA_ENDPOINT: &str = "http://169.254.169.254";

/// The bucket as configured, for naming it in messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreContext {
    /// The bucket name.
    pub bucket: String,
    /// The key prefix inside the bucket (may be empty).
    pub prefix: String,
    /// The endpoint requests go to.
    pub endpoint: String,
    /// Whether the endpoint was set by `AWS_ENDPOINT_URL_S3` /
    /// `AWS_ENDPOINT_URL` (false: AWS's regional endpoint).
    pub custom_endpoint: bool,
    /// The region requests are signed for.
    pub region: String,
    /// Where credentials come from (never a secret).
    pub credentials: String,
    /// The instance metadata endpoint credentials are asked from.
    pub metadata_endpoint: String,
    /// Whether credentials come from instance metadata (no other source
    /// is configured).
    pub instance_metadata: bool,
}

impl StoreContext {
    /// The bucket URL with its prefix, as messages name it.
    pub(crate) fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// A recognised bucket problem. `Display` is one line: what was tried,
/// what went wrong, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreProblem {
    /// No credential source gave credentials.
    NoCredentials {
        /// The sources looked in, in the order tried.
        looked_in: String,
        /// Why the last one (instance metadata, usually) gave none.
        why: String,
    },
    /// The store refused the credentials themselves.
    CredentialsRejected {
        /// The bucket URL.
        bucket: String,
        /// The endpoint.
        endpoint: String,
        /// Where the credentials came from.
        credentials: String,
        /// S3's error code (`InvalidAccessKeyId`, ...).
        code: String,
    },
    /// The bucket is in another region than requests are signed for.
    WrongRegion {
        /// The bucket name.
        bucket: String,
        /// The region configured.
        configured: String,
        /// The bucket's region, when S3 said it.
        actual: Option<String>,
    },
    /// The credentials work but may not do this.
    AccessDenied {
        /// The bucket URL (with the prefix).
        bucket: String,
        /// The HTTP method, when known.
        operation: Option<String>,
        /// The key, when known.
        key: Option<String>,
        /// Where the credentials came from.
        credentials: String,
    },
    /// The bucket does not exist at the endpoint.
    NoSuchBucket {
        /// The bucket name.
        bucket: String,
        /// The endpoint.
        endpoint: String,
    },
    /// The endpoint cannot be reached.
    Unreachable {
        /// The bucket URL its requests were for.
        bucket: String,
        /// The endpoint.
        endpoint: String,
        /// Whether it came from `AWS_ENDPOINT_URL(_S3)`.
        custom_endpoint: bool,
        /// Connection refused, name not resolved, timed out.
        why: String,
    },
}

impl StoreProblem {
    /// The exit code of a batch command that hit this: 2 for missing
    /// credentials (a setup error: nothing was asked of the store), 1 for
    /// everything the store answered or failed to answer.
    pub fn exit_code(&self) -> u8 {
        match self {
            StoreProblem::NoCredentials { .. } => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for StoreProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreProblem::NoCredentials { looked_in, why } => write!(
                f,
                "no AWS credentials found (looked in {looked_in}: {why}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an instance, task or pod role"
            ),
            StoreProblem::CredentialsRejected {
                bucket,
                endpoint,
                credentials,
                code,
            } => write!(
                f,
                "{endpoint} rejected the credentials from {credentials} for {bucket} ({code}): check the access key and secret (or the profile) and that they belong to the bucket's account"
            ),
            StoreProblem::WrongRegion {
                bucket,
                configured,
                actual: Some(actual),
            } => write!(
                f,
                "bucket {bucket} is in region {actual}, not {configured}: set AWS_REGION={actual}"
            ),
            StoreProblem::WrongRegion {
                bucket,
                configured,
                actual: None,
            } => write!(
                f,
                "bucket {bucket} is not in region {configured} (S3 answered with a redirect): set AWS_REGION to the bucket's region (aws s3api get-bucket-location --bucket {bucket})"
            ),
            StoreProblem::AccessDenied {
                bucket,
                operation,
                key,
                credentials,
            } => {
                write!(f, "access denied")?;
                match (operation, key) {
                    (Some(op), Some(key)) => write!(f, " to {op} {key}")?,
                    (Some(op), None) => write!(f, " to {op}")?,
                    (None, Some(key)) => write!(f, " to {key}")?,
                    (None, None) => {}
                }
                write!(
                    f,
                    " in {bucket} with credentials from {credentials}: the IAM policy of this service's role must allow it on {bucket}/* (the shipper writes, the applier reads: see infra/terraform/modules/iam)"
                )
            }
            StoreProblem::NoSuchBucket { bucket, endpoint } => write!(
                f,
                "bucket {bucket} does not exist at endpoint {endpoint}: create it, or fix the bucket name (--bucket) or the endpoint (AWS_ENDPOINT_URL)"
            ),
            StoreProblem::Unreachable {
                bucket,
                endpoint,
                custom_endpoint: true,
                why,
            } => write!(
                f,
                "the store endpoint {endpoint} is unreachable ({why}) for {bucket}: check AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) and that the server is up"
            ),
            StoreProblem::Unreachable {
                bucket,
                endpoint,
                custom_endpoint: false,
                why,
            } => write!(
                f,
                "the store endpoint {endpoint} is unreachable ({why}) for {bucket}: check AWS_REGION, the network and any proxy, or set AWS_ENDPOINT_URL for an S3-compatible server"
            ),
        }
    }
}

/// The credential sources `object_store`'s S3 builder consults, in its
/// order, plus the shared credentials file [`crate::url::BucketUrl::build`] reads.
pub fn credential_sources(metadata_endpoint: &str) -> String {
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    format!(
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the shared credentials file (profile {profile}), AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, instance metadata at {metadata_endpoint}"
    )
}

/// The problem when no credential source can work, known without a
/// request: `AWS_EC2_METADATA_DISABLED=true` with no other source, or only
/// half of a static key pair. `lookup` reads the environment (pass
/// `|k| std::env::var(k).ok()`); `has_profile` says whether the shared
/// credentials file holds the profile.
pub fn missing_credentials(
    lookup: impl Fn(&str) -> Option<String>,
    has_profile: bool,
) -> Option<StoreProblem> {
    let set = |k: &str| lookup(k).is_some_and(|v| !v.is_empty());
    let metadata = lookup("AWS_METADATA_ENDPOINT")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_METADATA_ENDPOINT.to_string());
    match (set("AWS_ACCESS_KEY_ID"), set("AWS_SECRET_ACCESS_KEY")) {
        (true, true) => return None,
        (true, false) => {
            return Some(StoreProblem::NoCredentials {
                looked_in: "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY".into(),
                why: "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into(),
            });
        }
        (false, true) => {
            return Some(StoreProblem::NoCredentials {
                looked_in: "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY".into(),
                why: "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into(),
            });
        }
        (false, false) => {}
    }
    let other = other_credential_source(&lookup, has_profile);
    let disabled =
        lookup("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    (!other && disabled).then(|| StoreProblem::NoCredentials {
        looked_in: credential_sources(&metadata),
        why: "instance metadata is disabled by AWS_EC2_METADATA_DISABLED".into(),
    })
}

/// Whether a credential source other than instance metadata is
/// configured (in `object_store`'s order: static keys, web identity,
/// container credentials; and the shared credentials file).
pub(crate) fn other_credential_source(
    lookup: impl Fn(&str) -> Option<String>,
    has_profile: bool,
) -> bool {
    let set = |k: &str| lookup(k).is_some_and(|v| !v.is_empty());
    has_profile
        || (set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY"))
        || (set("AWS_WEB_IDENTITY_TOKEN_FILE") && set("AWS_ROLE_ARN"))
        || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || (set("AWS_CONTAINER_CREDENTIALS_FULL_URI")
            && set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"))
}

/// Connects once to the host and port of `url` (port 443 for `https`, 80
/// otherwise), within `timeout` per address: `Err` says where and why
/// (`connecting to 127.0.0.1:9000: Connection refused (os error 111)`).
/// Blocking; the only IO in this module.
pub fn probe_tcp(url: &str, timeout: std::time::Duration) -> Result<(), String> {
    use std::net::ToSocketAddrs;
    let (default_port, rest) = match url.split_once("://") {
        Some(("https", rest)) => (443, rest),
        Some((_, rest)) => (80, rest),
        None => (443, url),
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    let addr = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:{default_port}")
    };
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| format!("resolving {addr}: {e}"))?
        .collect();
    let mut last = format!("{addr} resolves to no address");
    for a in addrs {
        match std::net::TcpStream::connect_timeout(&a, timeout) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("connecting to {addr}: {e}"),
        }
    }
    Err(last)
}

/// Before the first request: when credentials would come from instance
/// metadata, whether its endpoint accepts a connection within `timeout`
/// (on a machine without it, the store client would otherwise retry until
/// its deadline and report a metadata request's error). `None`: another
/// source is configured, or the endpoint answers. Blocking.
pub fn probe_credentials(ctx: &StoreContext, timeout: std::time::Duration) -> Option<StoreProblem> {
    if !ctx.instance_metadata {
        return None;
    }
    probe_tcp(&ctx.metadata_endpoint, timeout)
        .err()
        .map(|why| StoreProblem::NoCredentials {
            looked_in: credential_sources(&ctx.metadata_endpoint),
            why,
        })
}

/// How the first request a `once` run depends on ended, when it did not
/// succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstRequestFailure {
    /// It failed: the whole error chain on one line ([`one_line`]).
    Failed(String),
    /// It had no answer within the store timeout.
    NoAnswer(std::time::Duration),
}

/// The problem an error's text shows, or `None` when it is none of the
/// recognised ones. `text` is the whole chain ([`one_line`]).
pub fn classify(text: &str, ctx: &StoreContext) -> Option<StoreProblem> {
    let lower = text.to_ascii_lowercase();
    let has = |needle: &str| lower.contains(&needle.to_ascii_lowercase());
    let metadata_host = host_of(&ctx.metadata_endpoint);
    let credential_request = has("169.254.169.254")
        || has("169.254.170.2")
        || (!metadata_host.is_empty() && has(metadata_host) && has("/latest/"))
        || has("/latest/api/token")
        || has("security-credentials")
        || has("AssumeRoleWithWebIdentity")
        || has("Failed to read token file");
    if credential_request {
        return Some(StoreProblem::NoCredentials {
            looked_in: credential_sources(&ctx.metadata_endpoint),
            why: why_no_answer(&lower).unwrap_or_else(|| status_of(&lower)),
        });
    }
    for code in [
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
    ] {
        if has(code) {
            return Some(StoreProblem::CredentialsRejected {
                bucket: ctx.url(),
                endpoint: ctx.endpoint.clone(),
                credentials: ctx.credentials.clone(),
                code: code.to_string(),
            });
        }
    }
    if has("AuthorizationHeaderMalformed")
        || has("PermanentRedirect")
        || has("IllegalLocationConstraintException")
        || has("incorrectly configured region")
        || has("301 Moved Permanently")
    {
        return Some(StoreProblem::WrongRegion {
            bucket: ctx.bucket.clone(),
            configured: ctx.region.clone(),
            actual: region_in(text).filter(|r| *r != ctx.region),
        });
    }
    if has("NoSuchBucket") || has("specified bucket does not exist") {
        return Some(StoreProblem::NoSuchBucket {
            bucket: ctx.bucket.clone(),
            endpoint: ctx.endpoint.clone(),
        });
    }
    if has("AccessDenied")
        || has("lacked the necessary privileges")
        || has("403 Forbidden")
        || has("AllAccessDisabled")
    {
        return Some(StoreProblem::AccessDenied {
            bucket: ctx.url(),
            operation: operation_in(text),
            key: key_in(text, &ctx.bucket),
            credentials: ctx.credentials.clone(),
        });
    }
    why_no_answer(&lower).map(|why| StoreProblem::Unreachable {
        bucket: ctx.url(),
        endpoint: ctx.endpoint.clone(),
        custom_endpoint: ctx.custom_endpoint,
        why,
    })
}

/// Why a request got no answer, from lower-cased error text.
fn why_no_answer(lower: &str) -> Option<String> {
    let why = if lower.contains("connection refused") {
        "connection refused"
    } else if lower.contains("dns error")
        || lower.contains("failed to lookup address")
        || lower.contains("name or service not known")
        || lower.contains("no address associated")
    {
        "the host name does not resolve"
    } else if lower.contains("timed out") || lower.contains("timeout") {
        "timed out"
    } else if lower.contains("network is unreachable") || lower.contains("no route to host") {
        "no route to the host"
    } else if lower.contains("connection reset") || lower.contains("connection closed") {
        "the connection was closed"
    } else if lower.contains("error sending request") || lower.contains("tcp connect error") {
        "no connection"
    } else {
        return None;
    };
    Some(why.to_string())
}

/// The HTTP status in lower-cased error text, for messages.
fn status_of(lower: &str) -> String {
    const MARK: &str = "status code: ";
    match lower.find(MARK) {
        Some(i) => {
            let rest = &lower[i + MARK.len()..];
            let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if code.is_empty() {
                "no credentials given".to_string()
            } else {
                format!("HTTP {code}")
            }
        }
        None => "no credentials given".to_string(),
    }
}

/// The host (and port) of a URL.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// The region S3 names in an error body: `<Region>X</Region>`,
/// `expecting 'X'`, or an endpoint `s3.X.amazonaws.com` /
/// `s3-X.amazonaws.com`.
fn region_in(text: &str) -> Option<String> {
    let valid = |r: &str| {
        !r.is_empty()
            && r.len() <= 32
            && r.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let between = |start: &str, end: &str| -> Option<String> {
        let i = text.find(start)? + start.len();
        let rest = text.get(i..)?;
        let j = rest.find(end)?;
        let r = rest.get(..j)?.trim();
        valid(r).then(|| r.to_string())
    };
    if let Some(r) = between("<Region>", "</Region>").or_else(|| between("expecting '", "'")) {
        return Some(r);
    }
    let i = text.find(".amazonaws.com")?;
    let host = text.get(..i)?;
    let host = host
        .rsplit(|c: char| c == '/' || c == '>' || c.is_whitespace())
        .next()?;
    let r = host
        .rsplit_once("s3.")
        .or_else(|| host.rsplit_once("s3-"))
        .map(|(_, r)| r)?;
    valid(r).then(|| r.to_string())
}

/// The HTTP method of `Error performing METHOD url`.
fn operation_in(text: &str) -> Option<String> {
    let i = text.find("Error performing ")? + "Error performing ".len();
    let method: String = text
        .get(i..)?
        .chars()
        .take_while(char::is_ascii_uppercase)
        .collect();
    (!method.is_empty()).then_some(method)
}

/// The key of the request: object_store's `for path KEY`, else the path
/// of `Error performing METHOD URL` after the bucket.
fn key_in(text: &str, bucket: &str) -> Option<String> {
    let word = |rest: &str| -> Option<String> {
        let w: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != ':')
            .collect();
        (!w.is_empty()).then_some(w)
    };
    if let Some(i) = text.find("for path ") {
        return word(text.get(i + "for path ".len()..)?);
    }
    let i = text.find("Error performing ")? + "Error performing ".len();
    let url = word(text.get(i..)?.split_once(' ')?.1)?;
    let path = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let path = path.split_once('/').map(|(_, p)| p)?;
    let path = path.split('?').next().unwrap_or(path);
    let key = path
        .strip_prefix(bucket)
        .map_or(path, |p| p.trim_start_matches('/'));
    (!key.is_empty()).then(|| key.to_string())
}

/// An error and its causes on one line, each cause once: a cause whose
/// text the line already holds (an error that interpolates its source and
/// also returns it from `source()`) is skipped.
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> StoreContext {
        StoreContext {
            bucket: "dr-bucket".into(),
            prefix: "segmirror".into(),
            endpoint: "https://s3.us-east-1.amazonaws.com".into(),
            custom_endpoint: false,
            region: "us-east-1".into(),
            credentials: "environment (AWS_ACCESS_KEY_ID)".into(),
            metadata_endpoint: DEFAULT_METADATA_ENDPOINT.into(),
            instance_metadata: false,
        }
    }

    fn line(text: &str) -> String {
        classify(text, &ctx()).map_or_else(|| "(none)".into(), |p| p.to_string())
    }

    #[test]
    fn a_refused_instance_metadata_request_is_no_credentials() {
        let text = "Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token in 2.1s, after 3 retries - HTTP error: error sending request: client error (Connect): tcp connect error: Connection refused (os error 111)";
        let p = classify(text, &ctx()).expect("classified");
        assert_eq!(p.exit_code(), 2);
        let l = p.to_string();
        assert!(l.starts_with("no AWS credentials found (looked in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the shared credentials file"), "{l}");
        assert!(
            l.contains("instance metadata at http://169.254.169.254: connection refused)"),
            "{l}"
        );
        assert!(
            l.contains("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
            "{l}"
        );
    }

    #[test]
    fn a_forbidden_or_silent_metadata_endpoint_is_no_credentials_too() {
        let forbidden = "Generic S3 error: Error performing GET http://169.254.169.254/latest/meta-data/iam/security-credentials/ in 5ms - Server returned non-2xx status code: 403 Forbidden: ";
        assert!(
            line(forbidden).contains("instance metadata at http://169.254.169.254: HTTP 403)"),
            "{}",
            line(forbidden)
        );
        let timeout = "Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token in 1s - HTTP error: request or response body error: operation timed out";
        assert!(line(timeout).contains(": timed out)"), "{}", line(timeout));
        let mut c = ctx();
        c.metadata_endpoint = "http://127.0.0.1:9".into();
        let moved = "Generic S3 error: Error performing PUT http://127.0.0.1:9/latest/api/token in 0s - Connection refused";
        assert!(classify(moved, &c).is_some_and(|p| {
            p.to_string()
                .contains("instance metadata at http://127.0.0.1:9: connection refused")
        }));
    }

    #[test]
    fn a_wrong_region_names_the_right_one() {
        let malformed = "Generic S3 error: Error performing GET https://s3.us-east-1.amazonaws.com/dr-bucket?list-type=2 in 30ms - Server returned non-2xx status code: 400 Bad Request: <Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization header is malformed; the region 'us-east-1' is wrong; expecting 'eu-west-1'</Message><Region>eu-west-1</Region></Error>";
        assert_eq!(
            line(malformed),
            "bucket dr-bucket is in region eu-west-1, not us-east-1: set AWS_REGION=eu-west-1"
        );
        let redirect = "<Error><Code>PermanentRedirect</Code><Message>The bucket you are attempting to access must be addressed using the specified endpoint.</Message><Endpoint>dr-bucket.s3.ap-south-1.amazonaws.com</Endpoint></Error>";
        assert_eq!(
            line(redirect),
            "bucket dr-bucket is in region ap-south-1, not us-east-1: set AWS_REGION=ap-south-1"
        );
        let bare = "Generic S3 error: Error performing GET https://s3.us-east-1.amazonaws.com/dr-bucket in 20ms - Server returned non-2xx status code: 301 Moved Permanently: ";
        assert_eq!(
            line(bare),
            "bucket dr-bucket is not in region us-east-1 (S3 answered with a redirect): set AWS_REGION to the bucket's region (aws s3api get-bucket-location --bucket dr-bucket)"
        );
        assert!(line("Received redirect without LOCATION, this normally indicates an incorrectly configured region").starts_with("bucket dr-bucket is not in region us-east-1"));
    }

    #[test]
    fn access_denied_names_the_operation_the_key_and_the_policy() {
        let text = "put segmirror/v1/src/head/1.json: The operation lacked the necessary privileges to complete for path segmirror/v1/src/head/1.json: Error performing PUT https://s3.us-east-1.amazonaws.com/dr-bucket/segmirror/v1/src/head/1.json in 40ms - Server returned non-2xx status code: 403 Forbidden: <Error><Code>AccessDenied</Code></Error>";
        assert_eq!(
            line(text),
            "access denied to PUT segmirror/v1/src/head/1.json in s3://dr-bucket/segmirror with credentials from environment (AWS_ACCESS_KEY_ID): the IAM policy of this service's role must allow it on s3://dr-bucket/segmirror/* (the shipper writes, the applier reads: see infra/terraform/modules/iam)"
        );
        let listing = "Error performing GET https://s3.us-east-1.amazonaws.com/dr-bucket?list-type=2&prefix=segmirror in 1ms - Server returned non-2xx status code: 403 Forbidden: <Code>AccessDenied</Code>";
        assert!(
            line(listing).starts_with("access denied to GET in s3://dr-bucket/segmirror"),
            "{}",
            line(listing)
        );
    }

    #[test]
    fn a_missing_bucket_names_the_bucket_and_the_endpoint() {
        let text = "Error performing GET http://127.0.0.1:5000/no-such?list-type=2 in 3ms - Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
        assert_eq!(
            line(text),
            "bucket dr-bucket does not exist at endpoint https://s3.us-east-1.amazonaws.com: create it, or fix the bucket name (--bucket) or the endpoint (AWS_ENDPOINT_URL)"
        );
    }

    #[test]
    fn rejected_credentials_say_so_with_their_source() {
        let text = "403 Forbidden: <Error><Code>InvalidAccessKeyId</Code></Error>";
        assert_eq!(
            line(text),
            "https://s3.us-east-1.amazonaws.com rejected the credentials from environment (AWS_ACCESS_KEY_ID) for s3://dr-bucket/segmirror (InvalidAccessKeyId): check the access key and secret (or the profile) and that they belong to the bucket's account"
        );
    }

    #[test]
    fn an_unreachable_endpoint_names_it_and_the_setting() {
        let mut c = ctx();
        c.endpoint = "http://127.0.0.1:1".into();
        c.custom_endpoint = true;
        let text = "Generic S3 error: Error performing GET http://127.0.0.1:1/dr-bucket?list-type=2 in 2s, after 3 retries - HTTP error: error sending request: client error (Connect): tcp connect error: Connection refused (os error 111)";
        assert_eq!(
            classify(text, &c).map(|p| p.to_string()).as_deref(),
            Some(
                "the store endpoint http://127.0.0.1:1 is unreachable (connection refused) for s3://dr-bucket/segmirror: check AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) and that the server is up"
            )
        );
        let dns = "error sending request: client error (Connect): dns error: failed to lookup address information: Name or service not known";
        assert!(
            line(dns).contains(
                "(the host name does not resolve) for s3://dr-bucket/segmirror: check AWS_REGION"
            ),
            "{}",
            line(dns)
        );
        assert_eq!(classify(text, &c).map(|p| p.exit_code()), Some(1));
    }

    #[test]
    fn an_unrecognised_error_is_not_guessed_at() {
        assert_eq!(
            line("segmirror/v1/src/x.json: not a valid manifest: bad crc"),
            "(none)"
        );
        assert_eq!(line(""), "(none)");
    }

    #[test]
    fn no_credential_source_is_known_before_any_request() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            missing_credentials(env(&[]), false),
            None,
            "instance metadata may answer"
        );
        assert_eq!(
            missing_credentials(
                env(&[("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "b")]),
                false
            ),
            None
        );
        let p = missing_credentials(env(&[("AWS_EC2_METADATA_DISABLED", "true")]), false)
            .expect("nothing can work");
        assert!(
            p.to_string()
                .contains("instance metadata is disabled by AWS_EC2_METADATA_DISABLED"),
            "{p}"
        );
        assert_eq!(
            missing_credentials(env(&[("AWS_EC2_METADATA_DISABLED", "true")]), true),
            None
        );
        let half = missing_credentials(env(&[("AWS_ACCESS_KEY_ID", "a")]), false).expect("half");
        assert!(
            half.to_string().contains("AWS_SECRET_ACCESS_KEY is not"),
            "{half}"
        );
    }

    #[test]
    fn a_closed_metadata_port_is_no_credentials_before_any_request() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let mut c = ctx();
        c.metadata_endpoint = format!("http://127.0.0.1:{port}");
        let t = std::time::Duration::from_millis(500);
        assert_eq!(
            probe_credentials(&c, t),
            None,
            "static keys: nothing to probe"
        );
        c.instance_metadata = true;
        let p = probe_credentials(&c, t).expect("refused");
        assert!(
            p.to_string().contains(&format!("instance metadata at http://127.0.0.1:{port}: connecting to 127.0.0.1:{port}: Connection refused")),
            "{p}"
        );
        let open = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        c.metadata_endpoint = format!("http://{}", open.local_addr().expect("addr"));
        assert_eq!(probe_credentials(&c, t), None);
    }

    #[derive(Debug)]
    struct Wrap(&'static str, Option<Box<Wrap>>);
    impl fmt::Display for Wrap {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|w| w as _)
        }
    }

    #[test]
    fn one_line_prints_each_cause_once() {
        let inner = Wrap("connection refused", None);
        let doubled = Wrap("get k: connection refused", Some(Box::new(inner)));
        let outer = Wrap("orders-0", Some(Box::new(doubled)));
        assert_eq!(one_line(&outer), "orders-0: get k: connection refused");
        let plain = Wrap(
            "a",
            Some(Box::new(Wrap("b", Some(Box::new(Wrap("c", None)))))),
        );
        assert_eq!(one_line(&plain), "a: b: c");
    }
}
