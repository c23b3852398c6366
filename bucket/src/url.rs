//! Building the object store from a bucket URL: the one place that knows
//! the schemes.
//!
//! - `file:///abs/path`: a local directory is the bucket (the embedded
//!   default; [`BucketUrl::build`] creates it when missing, so the services
//!   check first: the shipper ships only into a bucket set up for its
//!   cluster, `shipper::bucket_init`, and the applier requires the
//!   directory);
//! - `memory://`: an in-process store (tests);
//! - `s3://bucket/prefix`: S3 or an S3-compatible server, credentials and
//!   endpoint from the standard AWS environment (`AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//!   `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`); a custom endpoint implies
//!   path-style requests, and plain HTTP is allowed only when that endpoint
//!   says `http://`. Conditional puts use S3's `If-None-Match`.
//!
//! Secrets never appear in [`BucketUrl`]'s `Display` or in errors.

use std::fmt;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;

use manifest::layout::{LayoutError, normalize_prefix};

/// A parsed bucket location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketUrl {
    /// A local directory.
    File {
        /// Absolute path of the directory.
        root: std::path::PathBuf,
    },
    /// An in-process store.
    Memory,
    /// An S3 bucket and key prefix.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Key prefix (normalised, may be empty).
        prefix: String,
    },
}

/// A bucket URL that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BucketError {
    /// Not a URL we understand.
    #[error("bucket URL {url:?}: {reason}")]
    Invalid {
        /// The URL as given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The store could not be built.
    #[error("bucket {url}: {source}")]
    Build {
        /// The URL (without secrets).
        url: String,
        /// The builder's error.
        #[source]
        source: object_store::Error,
    },
    /// No credential source can work (known before any request; see
    /// [`crate::diagnosis::missing_credentials`]).
    #[error("bucket {url}: {problem}")]
    NoCredentials {
        /// The URL.
        url: String,
        /// What was looked at and the fix.
        problem: crate::diagnosis::StoreProblem,
    },
    /// The local directory could not be created.
    #[error("bucket directory {path}: {source}")]
    Io {
        /// The directory.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl BucketUrl {
    /// Parses `file:///abs/path`, `memory://` or `s3://bucket/prefix`.
    pub fn parse(url: &str) -> Result<BucketUrl, BucketError> {
        let invalid = |reason: &str| BucketError::Invalid {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        if let Some(rest) = url.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(invalid(
                    "a file URL needs an absolute path: file:///abs/path",
                ));
            }
            let path = std::path::PathBuf::from(rest);
            if path
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err(invalid("'..' is not allowed in the path"));
            }
            return Ok(BucketUrl::File { root: path });
        }
        if url == "memory://" || url == "memory:///" {
            return Ok(BucketUrl::Memory);
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let valid_bucket = (3..=63).contains(&bucket.len())
                && bucket.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                });
            if !valid_bucket {
                return Err(invalid("S3 bucket names are 3-63 characters of [a-z0-9.-]"));
            }
            let prefix =
                normalize_prefix(prefix).map_err(|e: LayoutError| invalid(&e.to_string()))?;
            return Ok(BucketUrl::S3 {
                bucket: bucket.to_string(),
                prefix,
            });
        }
        Err(invalid(
            "expected file:///abs/path, memory:// or s3://bucket/prefix",
        ))
    }

    /// Where this bucket is, the endpoint its requests go to and which
    /// credentials reach it, for messages.
    pub fn location(&self) -> String {
        match self.endpoint() {
            Some(endpoint) => format!(
                "{self} (endpoint {endpoint}, credentials: {})",
                credential_source()
            ),
            None => self.to_string(),
        }
    }

    /// The endpoint an S3 bucket's requests go to: `AWS_ENDPOINT_URL_S3`
    /// or `AWS_ENDPOINT_URL` when set (as [`BucketUrl::build`] uses them),
    /// else AWS's regional endpoint. `None` for local buckets.
    pub fn endpoint(&self) -> Option<String> {
        let BucketUrl::S3 { .. } = self else {
            return None;
        };
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Some(
            env("AWS_ENDPOINT_URL_S3")
                .or_else(|| env("AWS_ENDPOINT_URL"))
                .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", region())),
        )
    }

    /// The key prefix inside the store (empty for file and memory: the
    /// directory itself is the root).
    pub fn prefix(&self) -> &str {
        match self {
            BucketUrl::S3 { prefix, .. } => prefix,
            _ => "",
        }
    }

    /// Builds the store. S3 settings come from the environment (see the
    /// module docs); a request is retried for at most 3 minutes
    /// (object_store's default).
    pub fn build(&self) -> Result<Arc<dyn ObjectStore>, BucketError> {
        self.build_with_retry_timeout(object_store::RetryConfig::default().retry_timeout)
    }

    /// Builds the store with each request's retries bounded by
    /// `retry_timeout` (S3; local stores do not retry): what a batch run
    /// (`once`) uses so that an unreachable store fails it within its
    /// `store_timeout` at every request, not only the first.
    pub fn build_with_retry_timeout(
        &self,
        retry_timeout: std::time::Duration,
    ) -> Result<Arc<dyn ObjectStore>, BucketError> {
        match self {
            BucketUrl::Memory => Ok(Arc::new(InMemory::new())),
            BucketUrl::File { root } => {
                std::fs::create_dir_all(root).map_err(|source| BucketError::Io {
                    path: root.clone(),
                    source,
                })?;
                let fs = LocalFileSystem::new_with_prefix(root).map_err(|source| {
                    BucketError::Build {
                        url: self.to_string(),
                        source,
                    }
                })?;
                Ok(Arc::new(fs))
            }
            BucketUrl::S3 { bucket, .. } => {
                if let Some(problem) = crate::diagnosis::missing_credentials(
                    |k| std::env::var(k).ok(),
                    shared_profile().is_some(),
                ) {
                    return Err(BucketError::NoCredentials {
                        url: self.to_string(),
                        problem,
                    });
                }
                let mut builder = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(object_store::RetryConfig {
                        retry_timeout,
                        ..object_store::RetryConfig::default()
                    });
                if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
                    && let Some(p) = shared_profile()
                {
                    builder = builder
                        .with_access_key_id(p.access_key_id)
                        .with_secret_access_key(p.secret_access_key);
                    if let Some(token) = p.session_token {
                        builder = builder.with_token(token);
                    }
                }
                let endpoint = std::env::var("AWS_ENDPOINT_URL_S3")
                    .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
                    .ok();
                if let Some(endpoint) = endpoint {
                    builder = builder
                        .with_allow_http(endpoint.starts_with("http://"))
                        .with_endpoint(endpoint)
                        .with_virtual_hosted_style_request(false);
                }
                // One precedence for requests and messages (a profile's
                // region is no longer overridden by the us-east-1 default).
                builder = builder.with_region(region());
                let s3 = builder.build().map_err(|source| BucketError::Build {
                    url: self.to_string(),
                    source,
                })?;
                Ok(Arc::new(s3))
            }
        }
    }
}

/// The region S3 requests are signed for: `AWS_REGION`, else
/// `AWS_DEFAULT_REGION`, else the shared profile's region, else
/// `us-east-1` (as [`BucketUrl::build`] sets it).
pub fn region() -> String {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    env("AWS_REGION")
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| {
            std::env::var_os("AWS_ACCESS_KEY_ID")
                .is_none()
                .then(shared_profile)
                .flatten()
                .and_then(|p| p.region)
        })
        .unwrap_or_else(|| "us-east-1".to_string())
}

/// Which credential source an S3 bucket uses, for messages (never the
/// secret itself).
pub fn credential_source() -> String {
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_some() {
        return "environment (AWS_ACCESS_KEY_ID)".into();
    }
    if shared_profile().is_some() {
        let name = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
        return format!("shared credentials file, profile {name:?}");
    }
    if std::env::var_os("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() {
        return "web identity token (AWS_WEB_IDENTITY_TOKEN_FILE)".into();
    }
    if std::env::var_os("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some() {
        return "container credentials endpoint".into();
    }
    "instance metadata (IMDS)".into()
}

/// Whether the shared credentials file holds static keys for `AWS_PROFILE`
/// (or `default`).
pub fn has_shared_profile() -> bool {
    shared_profile().is_some()
}

/// Credentials of a profile in the shared AWS files.
struct SharedProfile {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    region: Option<String>,
}

/// Reads `AWS_PROFILE` (or `default`) from `AWS_SHARED_CREDENTIALS_FILE`
/// (`~/.aws/credentials`) and its region from `AWS_CONFIG_FILE`
/// (`~/.aws/config`), as the AWS CLI does for static keys.
fn shared_profile() -> Option<SharedProfile> {
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let creds_path = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .map(std::path::PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".aws/credentials")))?;
    let creds = ini_section(&std::fs::read_to_string(creds_path).ok()?, &profile)?;
    let config_path = std::env::var_os("AWS_CONFIG_FILE")
        .map(std::path::PathBuf::from)
        .or_else(|| home.map(|h| h.join(".aws/config")));
    let config_name = if profile == "default" {
        "default".to_string()
    } else {
        format!("profile {profile}")
    };
    let region = config_path
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| ini_section(&t, &config_name))
        .and_then(|c| c.get("region").cloned());
    Some(SharedProfile {
        access_key_id: creds.get("aws_access_key_id")?.clone(),
        secret_access_key: creds.get("aws_secret_access_key")?.clone(),
        session_token: creds.get("aws_session_token").cloned(),
        region,
    })
}

/// The `key = value` pairs of section `[name]` of an INI text.
fn ini_section(text: &str, name: &str) -> Option<std::collections::HashMap<String, String>> {
    let mut current: Option<&str> = None;
    let mut out = std::collections::HashMap::new();
    let mut found = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(section.trim());
            found |= section.trim() == name;
            continue;
        }
        if current == Some(name)
            && let Some((k, v)) = line.split_once('=')
        {
            out.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    found.then_some(out)
}

impl fmt::Display for BucketUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BucketUrl::File { root } => write!(f, "file://{}", root.display()),
            BucketUrl::Memory => f.write_str("memory://"),
            BucketUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            BucketUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ini_sections() {
        let text = "[default]\naws_access_key_id = A\n[profile dr]\nregion = eu-west-1\n; comment\n[other]\nx=1\n";
        assert_eq!(
            ini_section(text, "default")
                .and_then(|s| s.get("aws_access_key_id").cloned())
                .as_deref(),
            Some("A")
        );
        assert_eq!(
            ini_section(text, "profile dr")
                .and_then(|s| s.get("region").cloned())
                .as_deref(),
            Some("eu-west-1")
        );
        assert!(ini_section(text, "missing").is_none());
    }

    #[test]
    fn parses_the_three_schemes() {
        assert_eq!(
            BucketUrl::parse("file:///tmp/b").expect("file"),
            BucketUrl::File {
                root: "/tmp/b".into()
            }
        );
        assert_eq!(
            BucketUrl::parse("memory://").expect("memory"),
            BucketUrl::Memory
        );
        let s3 = BucketUrl::parse("s3://my-bucket/dr/prod/").expect("s3");
        assert_eq!(
            s3,
            BucketUrl::S3 {
                bucket: "my-bucket".into(),
                prefix: "dr/prod".into()
            }
        );
        assert_eq!(s3.to_string(), "s3://my-bucket/dr/prod");
        for bad in [
            "file://relative",
            "file:///a/../b",
            "s3://UPPER/x",
            "s3://b/../x",
            "gs://x",
            "",
            "/tmp/x",
        ] {
            assert!(BucketUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
