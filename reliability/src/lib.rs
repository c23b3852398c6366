//! Reliability harnesses for segmirror (issue 8): each one tries hard to
//! lose, duplicate or corrupt data and reports how hard it tried.
//!
//! | harness | module | one command |
//! | --- | --- | --- |
//! | kill -9 cycles of `shipper run` / `applier run` under continuous produce | [`crash`] | `cargo run --release -p segmirror-reliability -- crash --cycles 100` |
//! | injected store faults (errors, latency, dropped manifests, lost answers, truncated bodies) | [`faults`], [`faulty`] | `... -- faults --fail 0.1` |
//! | network faults between the services and a real S3 server (moto) through a TCP fault proxy | [`netfaults`], [`proxy`] | `... -- netfaults` |
//! | byte flips in shipped objects and manifests | [`corrupt`] | `... -- corrupt --all-bytes` |
//! | destination disk full and permission denied | [`localfaults`] | `... -- local` |
//!
//! The short versions run in `cargo test --workspace` (this crate's
//! `tests/`); RELIABILITY.md at the repository root holds the figures of
//! long local runs and the commands that produced them.
//!
//! Building blocks: [`source`] writes a growing source log of unique
//! batches, [`account`] counts lost and duplicated batches, [`pair`] runs a
//! shipper and an applier in one process, [`bins`] builds the service
//! binaries for the process-level harnesses, [`rng`] makes every run
//! reproducible from its seed.

pub mod account;
pub mod bins;
pub mod corrupt;
pub mod crash;
pub mod faults;
pub mod faulty;
pub mod localfaults;
pub mod netfaults;
pub mod pair;
pub mod proxy;
pub mod rng;
pub mod seeds;
pub mod source;

/// A scratch directory for a harness run: under `SEGMIRROR_RELIABILITY_TMP`
/// when set, else `/dev/shm` when it is writable (fsync is free there, and
/// a killed process leaves the page cache as a real disk would), else the
/// system temp dir.
pub fn scratch_dir() -> anyhow::Result<tempfile::TempDir> {
    use anyhow::Context;
    if let Some(d) = std::env::var_os("SEGMIRROR_RELIABILITY_TMP") {
        return tempfile::Builder::new()
            .prefix("segmirror-reliability-")
            .tempdir_in(d)
            .context("scratch dir in SEGMIRROR_RELIABILITY_TMP");
    }
    let shm = std::path::Path::new("/dev/shm");
    let in_shm = shm
        .is_dir()
        .then(|| {
            tempfile::Builder::new()
                .prefix("segmirror-reliability-")
                .tempdir_in(shm)
                .ok()
        })
        .flatten();
    if let Some(d) = in_shm {
        return Ok(d);
    }
    tempfile::Builder::new()
        .prefix("segmirror-reliability-")
        .tempdir()
        .context("scratch dir")
}
