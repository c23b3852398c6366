//! Test support shared by segmirror's crates; a dev-dependency only, never
//! linked into a service.
//!
//! - [`needs`]: one check per external dependency (kcat, the Python
//!   clients of `tests/.venv`, the S3 test server): present, skipped by an
//!   explicit `SEGMIRROR_SKIP_*=1`, or a failure naming the install
//!   command. No test passes silently without its client.
//! - [`kafka_python`]: the fixtures written and read by kafka-python, an
//!   implementation of Kafka's record format independent of ours, run with
//!   the interpreter of `tests/.venv` (`tests/fixtures/setup.sh` creates it).
//! - [`help`]: every subcommand's `--help` of a binary, and the lines
//!   where clap's `[env: ...]` or `[default: ...]` appear twice.
//! - [`metrics`]: scraping a service's metrics endpoint over TCP and
//!   reading its OpenMetrics samples.
//! - [`backends`] (feature `backends`): the bucket backends every store test
//!   body runs on — `memory://`, `file://` in a fresh temp dir, and an
//!   S3-compatible server under a fresh prefix (required unless
//!   `SEGMIRROR_SKIP_S3=1`). The stores are built with
//!   [`bucket::url::BucketUrl`], the production builder, so S3 tests
//!   exercise the configuration the services use.
//!
//! Helpers here panic with a message on failure: they run only in tests,
//! where a panic is the failure report.
//!
//! `bucket` dev-depends on this crate, which depends on `bucket` (with
//! the feature): cargo allows that cycle, and `bucket`'s integration
//! tests link one `bucket` (the library); its unit tests must not use
//! this crate's `bucket` types as their own (they do not: a `Backend`
//! holds only `object_store` types).

#[cfg(feature = "backends")]
mod backends;
pub mod help;
pub mod kafka_python;
pub mod metrics;
pub mod needs;

#[cfg(feature = "backends")]
pub use backends::{Backend, backends};
pub use needs::S3_BUCKET_VAR;

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}
