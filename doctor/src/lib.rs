//! `doctor`: checks the live bucket against what the Terraform modules in
//! `infra/` promise, and what the services need of it: versioning, SSE-KMS,
//! the public access block, a TLS-only bucket policy, lifecycle rules that
//! never reach live data, replication of each cluster's prefix and its
//! status, least privilege (a probe under the prefix), and the
//! `segmirror/v1` layout. For `file://` buckets: writable, rename and fsync
//! work, one file system, free space, and the same layout checks.
//!
//! This is the one place that uses `aws-sdk-s3`: `object_store`, which
//! carries all data, cannot read bucket configuration or the replication
//! and encryption headers.
//!
//! Layers, one job each:
//! - [`expect`]: the expectations file (rendered by the Terraform example)
//!   and its defaults;
//! - [`s3`] and [`local`]: IO only, answers as plain [`facts`] in an
//!   [`answer::Answer`];
//! - [`rules`]: pure verdicts (answer + expectation -> [`report::Check`]
//!   with evidence and fix), unit-tested on canned answers;
//! - [`run`]: the order of questions for a view and scope;
//! - [`report`]: the table, the JSON and the exit code;
//! - [`preflight`]: the subset the services run at start;
//! - [`cli`]: the `doctor` subcommand both binaries expose.
//!
//! Non-goals: changing the bucket (doctor only reads, plus one probe
//! object it deletes); checking IAM policies as documents (the probe
//! measures what the credentials can do); CloudWatch alarms.
//!
//! Exit codes of the `doctor` subcommands: 0 no must-have check fails, 1 one
//! does (among them `layout.clusters`: a cluster id with neither the marker
//! `shipper init` writes nor data, see [`rules::layout`]), 2 usage or access
//! errors ([`run::DoctorError`]: no credentials, unreachable endpoint, no
//! such bucket or `file://` directory, a layout that cannot be listed).

pub mod answer;
pub mod cli;
pub mod expect;
pub mod facts;
pub mod local;
pub mod preflight;
pub mod report;
pub mod rules;
pub mod run;
pub mod s3;
#[cfg(feature = "testbed")]
pub mod testbed;

pub use expect::Expectations;
pub use expect::View;
pub use preflight::{Mode as PreflightMode, Outcome as PreflightOutcome, preflight};
pub use report::{Check, Report, Status};
pub use run::{DoctorError, Options, Scope, run};
