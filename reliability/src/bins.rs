//! The service binaries the process-level harnesses run as children
//! (`shipper`, `applier`, `kafkalog`), built on demand.
//!
//! [`Bins::get`] runs `cargo build -p shipper -p applier -p kafkalog --bins`
//! once per process, with the profile and target dir of the running
//! executable (a test binary in `target/debug/deps/` or the harness in
//! `target/release/`), so the children are never stale; when everything is
//! up to date that is a no-op of well under a second. Set
//! `SEGMIRROR_BIN_DIR` to a directory holding the three binaries to skip
//! the build.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail};

/// Paths of the three binaries.
#[derive(Debug, Clone)]
pub struct Bins {
    /// `shipper`.
    pub shipper: PathBuf,
    /// `applier`.
    pub applier: PathBuf,
    /// `kafkalog`.
    pub kafkalog: PathBuf,
}

static BINS: OnceLock<Result<Bins, String>> = OnceLock::new();

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// `(target dir, profile dir name)` of the running executable.
fn own_profile_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("current_exe")?;
    let mut dir = exe
        .parent()
        .context("executable without a parent dir")?
        .to_path_buf();
    if dir
        .file_name()
        .is_some_and(|n| n == "deps" || n == "examples")
    {
        dir = dir.parent().context("deps without a parent")?.to_path_buf();
    }
    Ok(dir)
}

impl Bins {
    /// Builds (once per process) and returns the binaries.
    pub fn get() -> anyhow::Result<Bins> {
        BINS.get_or_init(|| Bins::build().map_err(|e| format!("{e:#}")))
            .clone()
            .map_err(anyhow::Error::msg)
    }

    fn in_dir(dir: &Path) -> Bins {
        Bins {
            shipper: dir.join("shipper"),
            applier: dir.join("applier"),
            kafkalog: dir.join("kafkalog"),
        }
    }

    fn build() -> anyhow::Result<Bins> {
        if let Some(dir) = std::env::var_os("SEGMIRROR_BIN_DIR") {
            let b = Bins::in_dir(Path::new(&dir));
            b.check()?;
            return Ok(b);
        }
        let profile_dir = own_profile_dir()?;
        let target_dir = profile_dir
            .parent()
            .context("profile dir without a parent")?
            .to_path_buf();
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug")
            .to_string();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(workspace_root())
            .args(["build", "--quiet", "--bins"])
            .args(["-p", "shipper", "-p", "applier", "-p", "kafkalog"])
            .arg("--target-dir")
            .arg(&target_dir);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        let status = cmd
            .status()
            .context("running cargo build for the service binaries")?;
        if !status.success() {
            bail!("cargo build -p shipper -p applier -p kafkalog failed: {status}");
        }
        let b = Bins::in_dir(&profile_dir);
        b.check()?;
        Ok(b)
    }

    fn check(&self) -> anyhow::Result<()> {
        for p in [&self.shipper, &self.applier, &self.kafkalog] {
            if !p.is_file() {
                bail!("{} is missing", p.display());
            }
        }
        Ok(())
    }
}
