//! Harness 6: local faults on the destination.
//!
//! - **Disk full.** The destination log dir is a small tmpfs (when this
//!   process may mount, i.e. runs as root), else the `applier` child runs
//!   under `prlimit --fsize` (a file-size limit: the write past it kills
//!   the process with SIGXFSZ, a crash at the worst moment). `applier
//!   once` runs into it; then the harness checks that the error is clear
//!   (`No space left on device` in `applier status`), that nothing is
//!   half-applied (`kafkalog verify` passes, the destination is a prefix
//!   of the source with nothing foreign), makes room, and checks that the
//!   applier catches up (identical to the source).
//! - **Permission denied.** One partition dir of the destination (then the
//!   whole destination) is made read-only (`chmod a-w`; as root the child
//!   runs without `CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH` and
//!   `CAP_FOWNER`, so the mode bits bind it). Expected: a clear error
//!   naming the path; the other partitions go on; nothing half-applied;
//!   after `chmod u+w` the applier catches up.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kafkalog::TopicPartition;
use shipper::Shipper;

use crate::account::{account_partition, compare_text, log_end_from, verify_dir};
use crate::bins::Bins;
use crate::pair::{DEST_CLUSTER, PairOptions, SOURCE_CLUSTER, shipper_options};
use crate::source::{SourceSpec, SourceWriter};

/// One scenario's result.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// How the fault was made.
    pub method: String,
    /// The error the applier reported (status or stderr).
    pub error: Option<String>,
    /// The error as `applier status` shows it (None: status shows none).
    pub status_error: Option<String>,
    /// The error is clear (names the cause, and the path where expected).
    pub clear: bool,
    /// `kafkalog verify` of the destination while the fault held.
    pub verify_during: Result<u64, String>,
    /// Every destination partition a prefix of its source, nothing foreign.
    pub prefix_during: bool,
    /// Destination ends while the fault held.
    pub ends_during: Vec<i64>,
    /// Partitions not affected by the fault that still caught up.
    pub others_caught_up: Option<bool>,
    /// After the fix: identical to the source, verify passes, all MIRRORING.
    pub recovered: bool,
    /// How the recovery went (which command brought it back).
    pub recovery: String,
    /// Extra observations.
    pub notes: Vec<String>,
}

impl Scenario {
    /// Clear error, nothing half-applied, recovered.
    pub fn passed(&self) -> bool {
        self.clear
            && self.verify_during.is_ok()
            && self.prefix_during
            && self.others_caught_up.unwrap_or(true)
            && self.recovered
    }
}

/// All scenarios.
#[derive(Debug, Clone)]
pub struct LocalReport {
    /// The scenarios.
    pub scenarios: Vec<Scenario>,
    /// Wall time.
    pub elapsed: Duration,
}

impl LocalReport {
    /// Every scenario passed.
    pub fn passed(&self) -> bool {
        !self.scenarios.is_empty() && self.scenarios.iter().all(Scenario::passed)
    }

    /// The figures.
    pub fn render(&self) -> String {
        let mut out = String::from("local faults:\n");
        for s in &self.scenarios {
            out.push_str(&format!("  {} ({})\n", s.name, s.method));
            out.push_str(&format!(
                "    error: {}\n    applier status shows: {}\n",
                s.error.as_deref().unwrap_or("(none reported)"),
                s.status_error
                    .as_deref()
                    .unwrap_or("no error (every partition as before)")
            ));
            out.push_str(&format!(
                "    clear error: {}; verify during the fault: {}; destination a prefix of the source (nothing half-applied): {}; ends {:?}{}\n",
                yes(s.clear),
                match &s.verify_during {
                    Ok(n) => format!("ok ({n} batches)"),
                    Err(e) => format!("FAILED: {e}"),
                },
                yes(s.prefix_during),
                s.ends_during,
                match s.others_caught_up {
                    Some(b) => format!("; other partitions caught up: {}", yes(b)),
                    None => String::new(),
                }
            ));
            out.push_str(&format!(
                "    recovered once fixed: {} ({})\n",
                yes(s.recovered),
                s.recovery
            ));
            for n in &s.notes {
                out.push_str(&format!("    note: {n}\n"));
            }
        }
        out.push_str(&format!(
            "  result: {} in {:.1} s\n",
            if self.passed() { "PASS" } else { "FAIL" },
            self.elapsed.as_secs_f64()
        ));
        out
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "NO" }
}

/// True when running as root (uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// A source of `partitions` partitions with `batches` batches each,
/// shipped to a `file://` bucket under `root`.
struct Shipped {
    source: PathBuf,
    bucket_url: String,
    parts: Vec<TopicPartition>,
    ends: Vec<i64>,
    writer: SourceWriter,
    shipper: Shipper,
}

async fn shipped(
    root: &Path,
    partitions: usize,
    batches: usize,
    segment_bytes: u64,
) -> anyhow::Result<Shipped> {
    let source = root.join("source");
    let bucket = root.join("bucket");
    std::fs::create_dir_all(&bucket).context("bucket")?;
    let bucket_url = format!("file://{}", bucket.display());
    let store = bucket::url::BucketUrl::parse(&bucket_url)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .build()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut spec = SourceSpec::small(partitions);
    spec.segment_bytes = segment_bytes;
    let mut writer = SourceWriter::open(&source, spec)?;
    writer.round(batches)?;
    writer.flush()?;
    let mut shipper = Shipper::new(shipper_options(&source, &PairOptions::default()), store)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let r = shipper.ship_available().await;
    if !r.errors.is_empty() {
        bail!("shipping: {:?}", r.errors);
    }
    Ok(Shipped {
        source,
        bucket_url,
        parts: writer.partitions().to_vec(),
        ends: writer.log_ends(),
        writer,
        shipper,
    })
}

impl Shipped {
    async fn more(&mut self, batches: usize) -> anyhow::Result<()> {
        self.writer.round(batches)?;
        self.writer.flush()?;
        let r = self.shipper.ship_available().await;
        if !r.errors.is_empty() {
            bail!("shipping: {:?}", r.errors);
        }
        self.ends = self.writer.log_ends();
        Ok(())
    }
}

/// The applier's disk reserve here: 16 KiB instead of the default 1 MiB, so
/// that the small tmpfs of the disk-full case fills in the middle of a range
/// (the hard case) rather than when the reserve is first made.
const DISK_RESERVE: &str = "16384";

/// How the applier child is run.
#[derive(Debug, Clone, Default)]
struct Runner {
    /// `prlimit --fsize=N` before the applier.
    fsize: Option<u64>,
    /// Drop the capabilities that let root ignore mode bits.
    unprivileged_root: bool,
}

impl Runner {
    fn command(&self, bins: &Bins) -> Command {
        let mut argv: Vec<String> = Vec::new();
        if self.unprivileged_root {
            argv.extend(
                [
                    "setpriv",
                    "--inh-caps=-dac_override,-dac_read_search,-fowner",
                    "--bounding-set=-dac_override,-dac_read_search,-fowner",
                    "--",
                ]
                .map(String::from),
            );
        }
        if let Some(n) = self.fsize {
            argv.extend(["prlimit".into(), format!("--fsize={n}"), "--".into()]);
        }
        argv.push(bins.applier.display().to_string());
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    }
}

fn applier_args(cmd: &str, dest: &Path, url: &str) -> Vec<String> {
    vec![
        cmd.into(),
        "--log-dir".into(),
        dest.display().to_string(),
        "--bucket".into(),
        url.into(),
        "--source-cluster-id".into(),
        SOURCE_CLUSTER.into(),
        "--cluster-id".into(),
        DEST_CLUSTER.into(),
        "--topics".into(),
        ".*".into(),
        "--poll-interval".into(),
        "100ms".into(),
    ]
}

/// Runs `applier once`; (exit status text, stderr).
fn applier_once(
    bins: &Bins,
    runner: &Runner,
    dest: &Path,
    url: &str,
) -> anyhow::Result<(String, String)> {
    let out = runner
        .command(bins)
        .args(applier_args("once", dest, url))
        .env("RUST_LOG", "warn")
        .env("SEGMIRROR_DISK_RESERVE", DISK_RESERVE)
        .stdin(Stdio::null())
        .output()
        .context("running applier once")?;
    Ok((
        out.status.to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Runs `applier run` until `done` or `timeout`; true when done.
fn applier_run_until(
    bins: &Bins,
    dest: &Path,
    url: &str,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> anyhow::Result<bool> {
    let mut child = Command::new(&bins.applier)
        .args(applier_args("run", dest, url))
        .env("RUST_LOG", "warn")
        .env("SEGMIRROR_DISK_RESERVE", DISK_RESERVE)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("spawning applier run")?;
    let t0 = Instant::now();
    let mut ok = false;
    while t0.elapsed() < timeout {
        if done() {
            ok = true;
            break;
        }
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(ok)
}

/// `applier status` rows (topic-partition, state, last error).
fn status(dest: &Path) -> Vec<(String, String, Option<String>)> {
    applier::status::collect(dest)
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            (
                format!("{}-{}", r.topic, r.partition),
                r.state,
                r.last_error,
            )
        })
        .collect()
}

fn ends(dest: &Path, parts: &[TopicPartition]) -> Vec<i64> {
    parts.iter().map(|tp| log_end_from(dest, tp, 0)).collect()
}

/// Each destination partition is a prefix of its source (same bytes and
/// offsets where present, nothing foreign, no duplicate).
fn is_prefix(source: &Path, dest: &Path, parts: &[TopicPartition], src_ends: &[i64]) -> bool {
    parts.iter().zip(src_ends).all(|(tp, end)| {
        let acc = account_partition(source, dest, tp, *end);
        let cmp = compare_text(source, dest, tp);
        let empty = log_end_from(dest, tp, 0) == 0;
        acc.is_ok_and(|a| a.foreign + a.duplicated + a.misplaced == 0)
            && (empty || cmp == "identical" || cmp.starts_with("identical up to"))
    })
}

fn identical(source: &Path, dest: &Path, parts: &[TopicPartition]) -> bool {
    parts
        .iter()
        .all(|tp| compare_text(source, dest, tp) == "identical")
        && verify_dir(dest).is_ok()
        && status(dest).iter().all(|(_, s, _)| s == "MIRRORING")
}

fn run_ok(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let st = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("running {program}"))?;
    if !st.success() {
        bail!("{program} {args:?}: {st}");
    }
    Ok(())
}

fn first_error(rows: &[(String, String, Option<String>)]) -> Option<String> {
    rows.iter()
        .find_map(|(tp, s, e)| e.as_ref().map(|e| format!("[{tp} {s}] {e}")))
}

/// Disk full.
pub async fn disk_full(bins: &Bins, root: &Path) -> anyhow::Result<Scenario> {
    let mut s = shipped(root, 2, 300, 32 * 1024).await?;
    let dest = root.join("dest-full");
    std::fs::create_dir_all(&dest).context("dest")?;
    let total: u64 = s
        .parts
        .iter()
        .map(|tp| {
            kafkalog::reader::PartitionReader::open(&s.source, tp)
                .and_then(|r| r.segments())
                .map(|v| v.iter().map(|x| x.size).sum::<u64>())
                .unwrap_or(0)
        })
        .sum();
    let limit = (total / 3).max(64 * 1024);
    let mounted = is_root()
        && run_ok(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={limit}"),
                "tmpfs",
                &dest.display().to_string(),
            ],
        )
        .is_ok();
    // RLIMIT_FSIZE is per file: below the 32 KiB segments, so the first
    // segment cannot be completed.
    let fsize = 20 * 1024;
    let runner = Runner {
        fsize: (!mounted).then_some(fsize),
        unprivileged_root: false,
    };
    let method = if mounted {
        format!(
            "tmpfs of {} KiB for {} KiB of source segments",
            limit / 1024,
            total / 1024
        )
    } else {
        format!(
            "prlimit --fsize={fsize} on the applier child (SIGXFSZ at the limit: a crash at a write; checked after the recovery of the next open)"
        )
    };
    let result = async {
        let (exit, stderr) = applier_once(bins, &runner, &dest, &s.bucket_url)?;
        let rows = status(&dest);
        let status_error = first_error(&rows);
        let error = first_error(&rows).or_else(|| {
            let lines: Vec<&str> = stderr.lines().collect();
            lines
                .iter()
                .find(|l| l.contains("partition=") && l.contains("No space left"))
                .or_else(|| lines.iter().rev().find(|l| l.contains("rror")))
                .map(|l| format!("{exit}: {}", l.trim()))
        });
        let error = error.or_else(|| {
            (!exit.contains("exit status: 0")).then(|| format!("applier exited: {exit}"))
        });
        let clear = error.as_deref().is_some_and(|e| {
            e.contains("No space left on device")
                || e.contains("os error 28")
                || e.contains("SIGXFSZ")
                || e.contains("signal: 25")
        });
        if !mounted {
            // The child was killed at a write: what a restart sees is the
            // log after recovery (a torn tail cut at the last whole batch).
            recover(&dest, &s.parts)?;
        }
        let ends_during = ends(&dest, &s.parts);
        let verify_during = verify_dir(&dest);
        let prefix_during = is_prefix(&s.source, &dest, &s.parts, &s.ends);
        let summary = stderr
            .lines()
            .find(|l| l.contains("partitions,"))
            .unwrap_or("")
            .trim()
            .to_string();
        let notes = vec![format!(
            "applier once: {exit}, \"{summary}\"; applier status states: {:?}",
            rows.iter()
                .map(|(t, st, _)| format!("{t} {st}"))
                .collect::<Vec<_>>()
        )];
        let mut notes = notes;
        // Make room.
        if mounted {
            run_ok(
                "mount",
                &["-o", "remount,size=256m", &dest.display().to_string()],
            )?;
        }
        // More data arrives meanwhile.
        s.more(20).await?;
        // `applier once` first, as cron would run it.
        let _ = applier_once(bins, &Runner::default(), &dest, &s.bucket_url)?;
        let _ = applier_once(bins, &Runner::default(), &dest, &s.bucket_url)?;
        let by_once = identical(&s.source, &dest, &s.parts);
        let recovery;
        let recovered = if by_once {
            recovery = "two `applier once` runs".to_string();
            true
        } else {
            notes.push(format!(
                "two `applier once` runs after the fix did not recover it: {:?}",
                status(&dest)
            ));
            let (src, d, parts) = (s.source.clone(), dest.clone(), s.parts.clone());
            let ok =
                applier_run_until(bins, &dest, &s.bucket_url, Duration::from_secs(30), || {
                    identical(&src, &d, &parts)
                })?;
            recovery = "`applier run` (retries after its backoff)".to_string();
            ok
        };
        Ok::<_, anyhow::Error>(Scenario {
            name: "destination disk full".into(),
            method: method.clone(),
            error,
            status_error,
            clear,
            verify_during,
            prefix_during,
            ends_during,
            others_caught_up: None,
            recovered,
            recovery,
            notes,
        })
    }
    .await;
    if mounted {
        let _ = run_ok("umount", &["-l", &dest.display().to_string()]);
    }
    result
}

/// Opens every partition of a log dir for writing once (recovery: a torn
/// tail is cut at the last whole batch), then closes it.
fn recover(dest: &Path, parts: &[TopicPartition]) -> anyhow::Result<()> {
    let d = kafkalog::LogDir::open(dest).context("recovering the destination")?;
    for tp in parts {
        if dest.join(tp.dir_name()).is_dir() {
            let log = d
                .open_partition(tp, applier::engine::mirror_log_config())
                .with_context(|| format!("recovering {tp}"))?;
            log.close().with_context(|| format!("closing {tp}"))?;
        }
    }
    Ok(())
}

fn set_writable(path: &Path, writable: bool) -> anyhow::Result<()> {
    let walk = |p: &Path| -> anyhow::Result<()> {
        let meta = std::fs::metadata(p).with_context(|| format!("stat {}", p.display()))?;
        let mut mode = meta.permissions().mode();
        if writable {
            mode |= 0o200;
        } else {
            mode &= !0o222;
        }
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {}", p.display()))
    };
    walk(path)?;
    if path.is_dir() {
        for e in std::fs::read_dir(path).with_context(|| format!("list {}", path.display()))? {
            let e = e.context("dir entry")?;
            let p = e.path();
            if p.is_dir() {
                set_writable(&p, writable)?;
            } else {
                walk(&p)?;
            }
        }
    }
    Ok(())
}

/// Permission denied on one partition dir (`whole`: the whole destination).
pub async fn permission_denied(bins: &Bins, root: &Path, whole: bool) -> anyhow::Result<Scenario> {
    let mut s = shipped(root, 2, 60, 32 * 1024).await?;
    let dest = root.join(if whole { "dest-ro-all" } else { "dest-ro-one" });
    // A first apply: both partitions mirroring.
    let _ = applier_once(bins, &Runner::default(), &dest, &s.bucket_url)?;
    anyhow::ensure!(
        identical(&s.source, &dest, &s.parts),
        "the first apply did not mirror: {:?}",
        status(&dest)
    );
    let before = ends(&dest, &s.parts);
    s.more(40).await?;
    let victim = &s.parts[0];
    let target = if whole {
        dest.clone()
    } else {
        dest.join(victim.dir_name())
    };
    set_writable(&target, false)?;
    let runner = Runner {
        fsize: None,
        unprivileged_root: is_root(),
    };
    let result = async {
        let (exit, stderr) = applier_once(bins, &runner, &dest, &s.bucket_url)?;
        let rows = status(&dest);
        let status_error = first_error(&rows);
        let stderr_err = stderr
            .lines()
            .rev()
            .find(|l| l.contains("rror") || l.contains("denied"))
            .map(|l| format!("{exit}: {}", l.trim()));
        let error = first_error(&rows).or(stderr_err);
        let clear = error.as_deref().is_some_and(|e| {
            (e.contains("Permission denied") || e.contains("os error 13"))
                && e.contains(&target.display().to_string())
        });
        let ends_during = ends(&dest, &s.parts);
        let verify_during = verify_dir(&dest);
        let prefix_during = is_prefix(&s.source, &dest, &s.parts, &s.ends);
        let others_caught_up = (!whole).then(|| {
            s.parts
                .iter()
                .skip(1)
                .all(|tp| compare_text(&s.source, &dest, tp) == "identical")
        });
        let mut notes = vec![format!(
            "applier once exit: {exit}; destination ends {before:?} -> {ends_during:?} (source {:?})",
            s.ends
        )];
        if others_caught_up == Some(false) {
            notes.push(format!(
                "the writable partitions did not catch up while {} was read-only; stderr: {}",
                victim,
                stderr.lines().last().unwrap_or("").trim()
            ));
        }
        set_writable(&target, true)?;
        let _ = applier_once(bins, &Runner::default(), &dest, &s.bucket_url)?;
        let _ = applier_once(bins, &Runner::default(), &dest, &s.bucket_url)?;
        let recovery;
        let recovered = if identical(&s.source, &dest, &s.parts) {
            recovery = "two `applier once` runs after chmod u+w".to_string();
            true
        } else {
            notes.push(format!(
                "two `applier once` runs after the fix did not recover it: {:?}",
                status(&dest)
            ));
            let (src, d, parts) = (s.source.clone(), dest.clone(), s.parts.clone());
            recovery = "`applier run` after chmod u+w".to_string();
            applier_run_until(bins, &dest, &s.bucket_url, Duration::from_secs(30), || {
                identical(&src, &d, &parts)
            })?
        };
        Ok::<_, anyhow::Error>(Scenario {
            name: if whole {
                "permission denied on the whole destination".into()
            } else {
                format!("permission denied on one partition dir ({victim})")
            },
            method: if is_root() {
                "chmod a-w, applier child without CAP_DAC_OVERRIDE (setpriv)".into()
            } else {
                "chmod a-w".into()
            },
            error,
            status_error,
            clear,
            verify_during,
            prefix_during,
            ends_during,
            others_caught_up,
            recovered,
            recovery,
            notes,
        })
    }
    .await;
    let _ = set_writable(&target, true);
    result
}

/// One partition dir read-only while its files stay writable: appends to
/// the active segment work, creating files (the leader-epoch checkpoint's
/// temp file, a new segment, the mirror record's temp file) does not. The
/// new data brings a new leader epoch.
pub async fn partition_dir_read_only(bins: &Bins, root: &Path) -> anyhow::Result<Scenario> {
    let mut s = shipped(root, 2, 60, 1 << 20).await?;
    let dest = root.join("dest-dir-ro");
    let _ = applier_once(bins, &Runner::default(), &dest, &s.bucket_url)?;
    anyhow::ensure!(
        identical(&s.source, &dest, &s.parts),
        "the first apply did not mirror: {:?}",
        status(&dest)
    );
    // 40 more batches: the source's epoch changes at batch 80.
    s.more(40).await?;
    let victim = s.parts[0].clone();
    let dir = dest.join(victim.dir_name());
    let mode = |m: u32| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(m));
    mode(0o555).context("chmod")?;
    let runner = Runner {
        fsize: None,
        unprivileged_root: is_root(),
    };
    let result = async {
        let (exit, stderr) = applier_once(bins, &runner, &dest, &s.bucket_url)?;
        let rows = status(&dest);
        let status_error = first_error(&rows);
        let error = status_error.clone().or_else(|| {
            stderr
                .lines()
                .rev()
                .find(|l| l.contains("denied"))
                .map(|l| format!("{exit}: {}", l.trim()))
        });
        let clear = error
            .as_deref()
            .is_some_and(|e| e.contains("Permission denied") || e.contains("os error 13"));
        let ends_during = ends(&dest, &s.parts);
        let verify_during = verify_dir(&dest);
        let prefix_during = is_prefix(&s.source, &dest, &s.parts, &s.ends);
        let others_caught_up = Some(
            s.parts
                .iter()
                .skip(1)
                .all(|tp| compare_text(&s.source, &dest, tp) == "identical"),
        );
        let notes = vec![format!(
            "applier once exit: {exit}; destination ends {ends_during:?} (source {:?})",
            s.ends
        )];
        mode(0o755).context("chmod")?;
        let _ = applier_once(bins, &Runner::default(), &dest, &s.bucket_url)?;
        let _ = applier_once(bins, &Runner::default(), &dest, &s.bucket_url)?;
        let (src, d, parts) = (s.source.clone(), dest.clone(), s.parts.clone());
        let (recovered, recovery) = if identical(&s.source, &dest, &s.parts) {
            (true, "two `applier once` runs after chmod u+w".to_string())
        } else {
            (
                applier_run_until(bins, &dest, &s.bucket_url, Duration::from_secs(30), || {
                    identical(&src, &d, &parts)
                })?,
                "`applier run` after chmod u+w".to_string(),
            )
        };
        Ok::<_, anyhow::Error>(Scenario {
            name: format!("read-only partition dir, files writable ({victim}), new leader epoch"),
            method: if is_root() {
                "chmod 0555 on the dir, applier child without CAP_DAC_OVERRIDE (setpriv)".into()
            } else {
                "chmod 0555 on the dir".into()
            },
            error,
            status_error,
            clear,
            verify_during,
            prefix_during,
            ends_during,
            others_caught_up,
            recovered,
            recovery,
            notes,
        })
    }
    .await;
    let _ = mode(0o755);
    result
}

/// A work dir the unprivileged child can reach.
pub fn work_dir() -> anyhow::Result<tempfile::TempDir> {
    let work = crate::scratch_dir()?;
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755))
        .context("chmod work dir")?;
    Ok(work)
}

/// Runs every scenario.
pub async fn run(bins: &Bins) -> anyhow::Result<LocalReport> {
    let started = Instant::now();
    let work = work_dir()?;
    let mut scenarios = Vec::new();
    scenarios.push(disk_full(bins, &work.path().join("full")).await?);
    scenarios.push(permission_denied(bins, &work.path().join("ro-one"), false).await?);
    scenarios.push(permission_denied(bins, &work.path().join("ro-all"), true).await?);
    scenarios.push(partition_dir_read_only(bins, &work.path().join("dir-ro")).await?);
    Ok(LocalReport {
        scenarios,
        elapsed: started.elapsed(),
    })
}
