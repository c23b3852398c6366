//! Expectations: what the bucket should look like, from a small TOML file
//! that the Terraform example renders (`terraform output -raw
//! doctor_expectations > doctor.toml`), or defaults that the report states.
//!
//! ```toml
//! cluster_ids = ["Pm3mXq7cT2KQm4Zc1w9cAA"]   # clusters whose data the buckets hold; default: those found
//! object_lock = false                        # default false (the modules set none): reported only
//! max_replication_delay = "15m"              # default 15m (Replication Time Control's bound)
//!
//! [source]                                   # the shipper's bucket (region A)
//! bucket = "s3://acme-segmirror-eu-west-1/kafka"
//! region = "eu-west-1"
//! kms_key_arn = "arn:aws:kms:eu-west-1:123456789012:key/..."   # "" or absent: any aws:kms key
//!
//! [destination]                              # the applier's bucket, the replica (region B)
//! bucket = "s3://acme-segmirror-eu-central-1/kafka"
//! region = "eu-central-1"
//! kms_key_arn = "arn:aws:kms:eu-central-1:123456789012:key/..."
//!
//! [replication]                              # source -> destination; only with both sections
//! replicate_delete_markers = true            # default true, as modules/replication sets it
//! ```
//!
//! `shipper doctor` checks `[source]`, `applier doctor` `[destination]`
//! (and reads the source bucket's replication rule); `--bucket` replaces the
//! section's bucket. Replication is expected only when both sections name
//! a bucket. Whose run it is, is a [`View`], defined here so that the run
//! and the rules both take it from below.
//!
//! Invariants: [`Expectations::parse`] refuses unknown keys and names the
//! bad field (`source.bucket`, `cluster_ids[1]`, ...); everything it accepts
//! is valid (bucket URLs parse, cluster ids pass
//! [`manifest::layout::validate_cluster_id`]).

use std::path::Path;
use std::time::Duration;

use bucket::url::BucketUrl;
use serde::Deserialize;

/// Whose view: which expectations apply and what the credentials should
/// be able to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The source bucket, as the shipper uses it.
    Shipper,
    /// The destination bucket (the replica), as the applier uses it.
    Applier,
}

impl View {
    /// `shipper` or `applier`.
    pub fn as_str(self) -> &'static str {
        match self {
            View::Shipper => "shipper",
            View::Applier => "applier",
        }
    }
}

/// Default of [`Expectations::max_replication_delay`]: Replication Time
/// Control's 15 minutes.
pub const DEFAULT_MAX_REPLICATION_DELAY: Duration = Duration::from_secs(15 * 60);

/// An expectations file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExpectError {
    /// The file could not be read.
    #[error("expectations file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Not TOML of the expected shape.
    #[error("expectations file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message (names the key and line).
        message: String,
    },
    /// A field's value is wrong.
    #[error("expectations file {path}: field `{field}`: {reason}")]
    Field {
        /// The file.
        path: String,
        /// The field, e.g. `source.bucket`.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    cluster_ids: Option<Vec<String>>,
    object_lock: Option<bool>,
    max_replication_delay: Option<String>,
    source: Option<BucketSection>,
    destination: Option<BucketSection>,
    replication: Option<ReplicationFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BucketSection {
    bucket: Option<String>,
    region: Option<String>,
    kms_key_arn: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplicationFile {
    replicate_delete_markers: Option<bool>,
}

/// One bucket's expectations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketExpectations {
    /// The bucket.
    pub bucket: Option<BucketUrl>,
    /// Its region; `None`: not checked against an expectation.
    pub region: Option<String>,
    /// The default encryption's KMS key; `None`: any `aws:kms` key.
    pub kms_key_arn: Option<String>,
}

/// What the checks compare against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectations {
    /// Where they came from (`file X` or `defaults`).
    pub origin: String,
    /// The shipper's bucket.
    pub source: BucketExpectations,
    /// The applier's bucket (the replica).
    pub destination: BucketExpectations,
    /// Clusters whose data the bucket should hold; empty: those found.
    pub cluster_ids: Vec<String>,
    /// Whether object lock is expected.
    pub object_lock: bool,
    /// Oldest acceptable newest replicated head.
    pub max_replication_delay: Duration,
    /// Whether delete markers are replicated.
    pub replicate_delete_markers: bool,
}

impl Default for Expectations {
    fn default() -> Expectations {
        Expectations {
            origin: "defaults (no --expect)".to_string(),
            source: BucketExpectations::default(),
            destination: BucketExpectations::default(),
            cluster_ids: Vec::new(),
            object_lock: false,
            max_replication_delay: DEFAULT_MAX_REPLICATION_DELAY,
            replicate_delete_markers: true,
        }
    }
}

impl Expectations {
    /// Reads and validates a file.
    pub fn from_file(path: &Path) -> Result<Expectations, ExpectError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ExpectError::Read {
            path: name.clone(),
            source,
        })?;
        Expectations::parse(&text, &name)
    }

    /// Parses and validates `text` (named `path` in errors).
    pub fn parse(text: &str, path: &str) -> Result<Expectations, ExpectError> {
        let file: File = toml::from_str(text).map_err(|e| ExpectError::Parse {
            path: path.to_string(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        let field = |field: &str, reason: String| ExpectError::Field {
            path: path.to_string(),
            field: field.to_string(),
            reason,
        };
        let side =
            |name: &str, s: Option<BucketSection>| -> Result<BucketExpectations, ExpectError> {
                let Some(s) = s else {
                    return Ok(BucketExpectations::default());
                };
                let bucket = match s.bucket.as_deref().map(str::trim) {
                    None | Some("") => None,
                    Some(url) => {
                        let b = BucketUrl::parse(url)
                            .map_err(|e| field(&format!("{name}.bucket"), e.to_string()))?;
                        Some(b)
                    }
                };
                let region = s
                    .region
                    .map(|r| r.trim().to_string())
                    .filter(|r| !r.is_empty());
                if let Some(r) = &region
                    && !r
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                {
                    return Err(field(
                        &format!("{name}.region"),
                        format!("{r:?} is not a region name (e.g. eu-west-1)"),
                    ));
                }
                let kms_key_arn = s
                    .kms_key_arn
                    .map(|k| k.trim().to_string())
                    .filter(|k| !k.is_empty());
                Ok(BucketExpectations {
                    bucket,
                    region,
                    kms_key_arn,
                })
            };
        let source = side("source", file.source)?;
        let destination = side("destination", file.destination)?;
        let cluster_ids = file.cluster_ids.unwrap_or_default();
        for (i, id) in cluster_ids.iter().enumerate() {
            manifest::layout::validate_cluster_id(id)
                .map_err(|e| field(&format!("cluster_ids[{i}]"), e.to_string()))?;
        }
        let max_replication_delay = match file.max_replication_delay {
            None => DEFAULT_MAX_REPLICATION_DELAY,
            Some(s) => humantime::parse_duration(s.trim()).map_err(|e| {
                field(
                    "max_replication_delay",
                    format!("{s:?} is not a duration ({e}); examples: 90s, 15m"),
                )
            })?,
        };
        if file.replication.is_some() && (source.bucket.is_none() || destination.bucket.is_none()) {
            return Err(field(
                "replication",
                "needs both [source] and [destination] with a bucket".to_string(),
            ));
        }
        Ok(Expectations {
            origin: format!("file {path}"),
            source,
            destination,
            cluster_ids,
            object_lock: file.object_lock.unwrap_or(false),
            max_replication_delay,
            replicate_delete_markers: file
                .replication
                .and_then(|r| r.replicate_delete_markers)
                .unwrap_or(true),
        })
    }

    /// Whether replication from the source to the destination is expected.
    pub fn replication_expected(&self) -> bool {
        matches!(self.source.bucket, Some(BucketUrl::S3 { .. }))
            && matches!(self.destination.bucket, Some(BucketUrl::S3 { .. }))
    }

    /// The expectations and defaults as lines for the report's header.
    pub fn describe(&self, side: &BucketExpectations) -> Vec<String> {
        let mut out = vec![format!("expectations: {}", self.origin)];
        out.push(match &side.region {
            Some(r) => format!("region {r}"),
            None => "region: any (the one the request is signed for)".to_string(),
        });
        out.push(match &side.kms_key_arn {
            Some(k) => format!("default encryption SSE-KMS with key {k}"),
            None => "default encryption SSE-KMS with any key".to_string(),
        });
        out.push(if self.cluster_ids.is_empty() {
            "cluster ids: those found in the bucket".to_string()
        } else {
            format!("cluster ids: {}", self.cluster_ids.join(", "))
        });
        out.push(if self.replication_expected() {
            format!(
                "replication from {} to {} (delete markers {}), newest head at most {} old",
                self.source
                    .bucket
                    .as_ref()
                    .map(|b| b.to_string())
                    .unwrap_or_default(),
                self.destination
                    .bucket
                    .as_ref()
                    .map(|b| b.to_string())
                    .unwrap_or_default(),
                if self.replicate_delete_markers {
                    "replicated"
                } else {
                    "not replicated"
                },
                humantime::format_duration(self.max_replication_delay)
            )
        } else {
            "replication: not expected (no [source] and [destination] buckets)".to_string()
        });
        out.push(format!(
            "object lock: {}",
            if self.object_lock {
                "expected"
            } else {
                "not expected"
            }
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
cluster_ids = ["Pm3mXq7cT2KQm4Zc1w9cAA"]
object_lock = false
max_replication_delay = "15m"
[source]
bucket = "s3://acme-a/kafka"
region = "eu-west-1"
kms_key_arn = "arn:aws:kms:eu-west-1:1:key/a"
[destination]
bucket = "s3://acme-b/kafka"
region = "eu-central-1"
kms_key_arn = ""
[replication]
replicate_delete_markers = true
"#;

    #[test]
    fn a_full_file_parses() {
        let e = Expectations::parse(FULL, "f.toml").expect("valid");
        assert!(e.replication_expected());
        assert_eq!(
            e.source.kms_key_arn.as_deref(),
            Some("arn:aws:kms:eu-west-1:1:key/a")
        );
        assert_eq!(e.destination.kms_key_arn, None, "empty means any key");
        assert_eq!(e.cluster_ids, vec!["Pm3mXq7cT2KQm4Zc1w9cAA"]);
        assert_eq!(e.max_replication_delay, Duration::from_secs(900));
    }

    #[test]
    fn errors_name_the_field() {
        for (text, want) in [
            ("cluster_ids = [\"ok\", \"../x\"]", "cluster_ids[1]"),
            ("[source]\nbucket = \"s4://x\"", "source.bucket"),
            ("[destination]\nregion = \"EU West\"", "destination.region"),
            ("max_replication_delay = \"soon\"", "max_replication_delay"),
            (
                "[source]\nbucket = \"s3://abc/p\"\n[replication]\nreplicate_delete_markers = true",
                "replication",
            ),
        ] {
            let e = Expectations::parse(text, "f.toml")
                .expect_err(text)
                .to_string();
            assert!(e.contains(&format!("field `{want}`")), "{text}: {e}");
        }
        let e = Expectations::parse("bukket = 1", "f.toml")
            .expect_err("unknown")
            .to_string();
        assert!(e.contains("bukket"), "{e}");
    }

    #[test]
    fn the_defaults_are_stated() {
        let e = Expectations::default();
        let lines = e.describe(&e.source).join("\n");
        assert!(lines.contains("defaults (no --expect)"), "{lines}");
        assert!(lines.contains("any key"), "{lines}");
        assert!(lines.contains("replication: not expected"), "{lines}");
    }
}
