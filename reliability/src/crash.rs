//! Harness 1: kill -9 cycles.
//!
//! A producer thread appends unique batches to a source log (epoch
//! changes, all codecs, 16 KiB segments) while `shipper run` and
//! `applier run` run as child processes over a `file://` bucket with short
//! tail and poll intervals. Each cycle waits a random time, kills one of
//! them with SIGKILL (chosen at random), restarts it at once, and measures
//! the recovery: from the restart until the destination holds everything
//! the source had at that moment. A share of the cycles kills again
//! during the recovery, before the service caught up. After the cycles,
//! production stops and both services are killed one last time; then
//! `shipper once` and `applier once` run until the destination has caught
//! up (lag 0), and the source and the destination are compared up to the
//! shipped end: `kafkalog compare` must say `identical`, `kafkalog
//! verify` must pass, and no batch may be lost, duplicated, foreign or
//! misplaced ([`crate::account`]).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bucket::store::ManifestStore;
use kafkalog::TopicPartition;
use manifest::layout::{ClusterLayout, PartitionKey};

use crate::account::{Accounting, account_partition, log_end_from};
use crate::bins::Bins;
use crate::pair::{DEST_CLUSTER, SOURCE_CLUSTER};
use crate::rng::Rng;
use crate::source::{Producer, SourceSpec, TOPIC_ID};

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct CrashOptions {
    /// Kill cycles.
    pub cycles: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// Partitions.
    pub partitions: usize,
    /// Batches produced per second (all partitions together).
    pub rate: u32,
    /// Longest wait before a kill (uniform from 0).
    pub max_gap: Duration,
    /// Share of cycles that kill again during the recovery.
    pub early_share: f64,
    /// The shipper's tail interval.
    pub tail_interval: Duration,
    /// The applier's poll interval.
    pub poll_interval: Duration,
    /// Longest acceptable recovery before the run fails.
    pub recovery_timeout: Duration,
    /// Keep the work dir (printed) after the run.
    pub keep: bool,
    /// More flags for the shipper (`run` and `once`), e.g.
    /// `--pack-below 1MiB` to ship a cycle's small ranges in packs.
    pub shipper_flags: Vec<String>,
    /// Environment variables the shipper runs with (settings without a
    /// flag, e.g. `SEGMIRROR_COMPACT_AFTER`).
    pub shipper_env: Vec<(String, String)>,
}

impl Default for CrashOptions {
    fn default() -> Self {
        CrashOptions {
            cycles: 10,
            seed: 1,
            partitions: 3,
            rate: 150,
            max_gap: Duration::from_millis(1500),
            early_share: 0.2,
            tail_interval: Duration::from_millis(100),
            poll_interval: Duration::from_millis(100),
            recovery_timeout: Duration::from_secs(60),
            keep: false,
            shipper_flags: Vec::new(),
            shipper_env: Vec::new(),
        }
    }
}

/// One kill.
#[derive(Debug, Clone)]
pub struct Kill {
    /// `shipper` or `applier`.
    pub victim: &'static str,
    /// Killed again during the recovery of the previous kill.
    pub early: bool,
    /// Restart to caught up (None for a recovery cut short by an early kill).
    pub recovery: Option<Duration>,
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct CrashReport {
    /// The settings.
    pub options: CrashOptions,
    /// Every kill, in order.
    pub kills: Vec<Kill>,
    /// Batches produced.
    pub batches_produced: u64,
    /// Source log end per partition at the end.
    pub source_ends: Vec<i64>,
    /// Shipped end per partition after the drain.
    pub shipped_ends: Vec<i64>,
    /// Destination log end per partition after the drain.
    pub dest_ends: Vec<i64>,
    /// `shipper once` + `applier once` rounds the drain took.
    pub drain_rounds: u32,
    /// Lost / duplicated / foreign / misplaced batches below the shipped end.
    pub accounting: Accounting,
    /// `kafkalog compare SOURCE DEST` output (first line).
    pub compare: String,
    /// `kafkalog verify --log-dir DEST` output (first line) and success.
    pub verify: (bool, String),
    /// `applier status` states after the drain (state, partitions).
    pub states: Vec<(String, usize)>,
    /// Log lines of the applier saying it recovered a torn local log.
    pub applier_log_recoveries: usize,
    /// Log lines of the shipper continuing from a manifest written by an
    /// earlier (killed) process.
    pub shipper_continuations: usize,
    /// Objects in the bucket at the end: packs (many partitions' ranges,
    /// `--pack-below`), `.batches` objects and manifest versions written
    /// as objects (fewer than the versions with `--head-deltas`).
    pub objects: (usize, usize, usize),
    /// Shipper log lines of compactions, and the packs pack garbage
    /// collection deleted (summed from its passes' lines).
    pub compactions: (usize, u64),
    /// Wall time.
    pub elapsed: Duration,
    /// The work dir, when kept.
    pub kept: Option<PathBuf>,
}

impl CrashReport {
    /// Nothing lost, duplicated or different; the destination is valid and
    /// every partition MIRRORING.
    pub fn passed(&self) -> bool {
        self.accounting.is_clean()
            && self.source_ends == self.shipped_ends
            && self.source_ends == self.dest_ends
            && self.compare == "identical"
            && self.verify.0
            && self.states.iter().all(|(s, _)| s == "MIRRORING")
    }

    /// Longest recovery, by victim.
    pub fn max_recovery(&self, victim: &str) -> Option<Duration> {
        self.kills
            .iter()
            .filter(|k| k.victim == victim)
            .filter_map(|k| k.recovery)
            .max()
    }

    fn percentile(&self, victim: &str, p: f64) -> Option<Duration> {
        let mut v: Vec<Duration> = self
            .kills
            .iter()
            .filter(|k| k.victim == victim)
            .filter_map(|k| k.recovery)
            .collect();
        v.sort();
        if v.is_empty() {
            return None;
        }
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v.get(i).copied()
    }

    /// The figures, one per line.
    pub fn render(&self) -> String {
        let o = &self.options;
        let count = |v: &str| self.kills.iter().filter(|k| k.victim == v).count();
        let early = self.kills.iter().filter(|k| k.early).count();
        let ms = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{} ms", d.as_millis()));
        let a = &self.accounting;
        let mut out = String::new();
        out.push_str(&format!(
            "crash cycles: {} kill -9 (shipper {}, applier {}; {} of them during a recovery), seed {}, {} partitions, {} batches/s, tail {:?}, poll {:?}\n",
            self.kills.len(),
            count("shipper"),
            count("applier"),
            early,
            o.seed,
            o.partitions,
            o.rate,
            o.tail_interval,
            o.poll_interval
        ));
        out.push_str(&format!(
            "  recovery (restart to caught up): shipper max {} (p50 {}), applier max {} (p50 {})\n",
            ms(self.max_recovery("shipper")),
            ms(self.percentile("shipper", 0.5)),
            ms(self.max_recovery("applier")),
            ms(self.percentile("applier", 0.5)),
        ));
        out.push_str(&format!(
            "  evidence of kills mid-write: applier recovered a torn local log {} times; shipper continued from a killed process's manifest {} times\n",
            self.applier_log_recoveries, self.shipper_continuations
        ));
        out.push_str(&format!(
            "  objects in the bucket: {} packs, {} .batches objects, {} manifest objects; {} compactions, {} packs deleted by pack gc\n",
            self.objects.0, self.objects.1, self.objects.2, self.compactions.0, self.compactions.1
        ));
        out.push_str(&format!(
            "  produced {} batches; source ends {:?}; shipped ends {:?}; destination ends {:?}; drained in {} once-rounds\n",
            self.batches_produced, self.source_ends, self.shipped_ends, self.dest_ends, self.drain_rounds
        ));
        out.push_str(&format!(
            "  batches compared {}: lost {}, duplicated {}, foreign {}, misplaced {}\n",
            a.source_batches, a.lost, a.duplicated, a.foreign, a.misplaced
        ));
        out.push_str(&format!(
            "  kafkalog compare: {}; kafkalog verify: {}; applier states: {:?}\n",
            self.compare, self.verify.1, self.states
        ));
        if let Some(k) = &self.kept {
            out.push_str(&format!("  work dir kept: {}\n", k.display()));
        }
        out.push_str(&format!(
            "  result: {} in {:.1} s\n",
            if self.passed() { "PASS" } else { "FAIL" },
            self.elapsed.as_secs_f64()
        ));
        out
    }
}

/// A service run as a child process, its output appended to a log file.
struct Service {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
}

impl Service {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("log file {}", self.log.display()))?;
        let err = log.try_clone().context("log file")?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .with_context(|| format!("spawning {}", self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            // Child::kill is SIGKILL on Unix.
            let _ = c.kill();
            c.wait().with_context(|| format!("reaping {}", self.name))?;
        }
        Ok(())
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        let exited = match &mut self.child {
            Some(c) => c.try_wait().context("try_wait")?,
            None => None,
        };
        if let Some(status) = exited {
            self.child = None;
            bail!(
                "{} exited by itself ({status}); last log lines:\n{}",
                self.name,
                tail(&self.log, 20)
            );
        }
        Ok(())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.kill9();
    }
}

/// The last `n` lines of a file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn count_lines(path: &Path, needle: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// The sum of the integer after `field` on the lines of `path` holding
/// `needle` (a `tracing` field as the log prints it).
fn sum_field(path: &Path, needle: &str, field: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| {
            let rest = &l[l.find(field)? + field.len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..end].parse::<u64>().ok()
        })
        .sum()
}

/// Runs a command to completion; (success, stdout, stderr).
fn run_cmd(program: &Path, args: &[String]) -> anyhow::Result<(bool, String, String)> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Destination log ends, cheaply (walking on from the last known end).
struct DestEnds {
    root: PathBuf,
    parts: Vec<TopicPartition>,
    known: Vec<i64>,
}

impl DestEnds {
    fn refresh(&mut self) -> &[i64] {
        for (i, tp) in self.parts.iter().enumerate() {
            let from = self.known[i];
            let end = log_end_from(&self.root, tp, from);
            // A truncation (there is none in this harness) would lower it.
            self.known[i] = if end < from {
                log_end_from(&self.root, tp, 0)
            } else {
                end
            };
        }
        &self.known
    }
}

/// `applier status --json` states, counted.
fn states(bins: &Bins, dest: &Path) -> anyhow::Result<Vec<(String, usize)>> {
    let (ok, out, err) = run_cmd(
        &bins.applier,
        &[
            "status".into(),
            "--log-dir".into(),
            dest.display().to_string(),
            "--json".into(),
        ],
    )?;
    if !ok {
        bail!("applier status failed: {err}");
    }
    let v: serde_json::Value = serde_json::from_str(&out).context("applier status --json")?;
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for p in v["partitions"].as_array().into_iter().flatten() {
        *counts
            .entry(p["state"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    Ok(counts.into_iter().collect())
}

/// Runs the harness with the given binaries.
pub fn run(o: &CrashOptions, bins: &Bins) -> anyhow::Result<CrashReport> {
    let started = Instant::now();
    let work = crate::scratch_dir()?;
    let (source, dest, bucket) = (
        work.path().join("source"),
        work.path().join("dest"),
        work.path().join("bucket"),
    );
    std::fs::create_dir_all(&bucket).context("bucket dir")?;
    let url = format!("file://{}", bucket.display());
    let spec = SourceSpec::small(o.partitions);
    let parts = spec.partitions.clone();
    let mut rng = Rng::new(o.seed);
    let producer = Producer::spawn(&source, spec, o.rate, rng.next_u64())?;
    let ms = |d: Duration| format!("{}ms", d.as_millis().max(1));
    let mut shipper = Service {
        name: "shipper",
        program: bins.shipper.clone(),
        args: vec![
            "run".into(),
            "--log-dir".into(),
            source.display().to_string(),
            "--bucket".into(),
            url.clone(),
            "--cluster-id".into(),
            SOURCE_CLUSTER.into(),
            "--tail-interval".into(),
            ms(o.tail_interval),
            "--create-bucket".into(),
        ]
        .into_iter()
        .chain(o.shipper_flags.iter().cloned())
        .collect(),
        env: o.shipper_env.clone(),
        log: work.path().join("shipper.log"),
        child: None,
    };
    let applier_args = |cmd: &str| -> Vec<String> {
        vec![
            cmd.into(),
            "--log-dir".into(),
            dest.display().to_string(),
            "--bucket".into(),
            url.clone(),
            "--source-cluster-id".into(),
            SOURCE_CLUSTER.into(),
            "--cluster-id".into(),
            DEST_CLUSTER.into(),
            "--topics".into(),
            ".*".into(),
            "--poll-interval".into(),
            format!("{}ms", o.poll_interval.as_millis().max(1)),
        ]
    };
    let mut applier = Service {
        name: "applier",
        program: bins.applier.clone(),
        args: applier_args("run"),
        env: Vec::new(),
        log: work.path().join("applier.log"),
        child: None,
    };
    shipper.spawn()?;
    applier.spawn()?;
    let mut ends = DestEnds {
        root: dest.clone(),
        parts: parts.clone(),
        known: vec![0; parts.len()],
    };
    // Wait for the first data to arrive: the services are up.
    wait_caught_up(
        &mut ends,
        &producer.progress().log_ends(),
        &mut shipper,
        &mut applier,
        o.recovery_timeout,
    )?;

    let mut kills: Vec<Kill> = Vec::new();
    let mut early_next = false;
    for _ in 0..o.cycles {
        let gap = if early_next {
            rng.duration(Duration::ZERO, Duration::from_millis(300))
        } else {
            rng.duration(Duration::ZERO, o.max_gap)
        };
        std::thread::sleep(gap);
        shipper.check_alive()?;
        applier.check_alive()?;
        let victim = if rng.chance(0.5) {
            &mut shipper
        } else {
            &mut applier
        };
        victim.kill9()?;
        victim.spawn()?;
        let name = victim.name;
        let early = early_next;
        early_next = rng.chance(o.early_share);
        let recovery = if early_next {
            None
        } else {
            let t0 = Instant::now();
            let target = producer.progress().log_ends();
            wait_caught_up(
                &mut ends,
                &target,
                &mut shipper,
                &mut applier,
                o.recovery_timeout,
            )
            .with_context(|| format!("recovery after kill -9 of the {name}"))?;
            Some(t0.elapsed())
        };
        kills.push(Kill {
            victim: name,
            early,
            recovery,
        });
    }
    let batches_produced = producer.progress().batches();
    let source_ends = producer.stop()?;
    shipper.kill9()?;
    applier.kill9()?;

    // Drain: once-mode until the destination holds everything.
    // `once` makes one pass: it takes run's flags but the tail interval.
    let ship_once: Vec<String> = {
        let mut a = shipper.args.clone();
        a[0] = "once".into();
        if let Some(i) = a.iter().position(|x| x == "--tail-interval") {
            a.drain(i..i + 2);
        }
        a
    };
    let apply_once = applier_args("once");
    let mut drain_rounds = 0;
    let mut drained = false;
    for _ in 0..20 {
        drain_rounds += 1;
        let (_, _, err) = run_cmd(&bins.shipper, &ship_once)?;
        // A usage error would make every round a no-op: say so at once.
        anyhow::ensure!(
            !err.contains("error: unexpected argument"),
            "shipper {}: {err}",
            ship_once.join(" ")
        );
        run_cmd(&bins.applier, &apply_once)?;
        if ends.refresh() == source_ends.as_slice() {
            drained = true;
            break;
        }
        std::thread::sleep(o.poll_interval);
    }
    if !drained {
        // A partition that `once` does not bring back (a retryable
        // failure's backoff): let the daemon do it, as an operator would.
        applier.spawn()?;
        let _ = wait_caught_up(
            &mut ends,
            &source_ends,
            &mut shipper,
            &mut applier,
            o.recovery_timeout,
        );
        applier.kill9()?;
    }

    // Shipped ends, from the bucket.
    let store = bucket::url::BucketUrl::parse(&url)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .build()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let ms_store = ManifestStore::new(
        Arc::clone(&store),
        ClusterLayout::new("", SOURCE_CLUSTER).map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("runtime")?;
    let mut shipped_ends = Vec::new();
    for tp in &parts {
        let key = PartitionKey {
            tp: tp.clone(),
            topic_id: TOPIC_ID,
        };
        let m = rt
            .block_on(ms_store.newest_manifest(&key))
            .map_err(|e| anyhow::anyhow!("{tp}: {e}"))?;
        shipped_ends.push(m.map_or(0, |m| m.shipped_end_offset));
    }
    let mut accounting = Accounting::default();
    for (i, tp) in parts.iter().enumerate() {
        accounting.add(&account_partition(&source, &dest, tp, shipped_ends[i])?);
    }
    let (_, cmp_out, cmp_err) = run_cmd(
        &bins.kafkalog,
        &[
            "compare".into(),
            source.display().to_string(),
            dest.display().to_string(),
        ],
    )?;
    let compare = first_line(&cmp_out, &cmp_err);
    let (verify_ok, v_out, v_err) = run_cmd(
        &bins.kafkalog,
        &[
            "verify".into(),
            "--log-dir".into(),
            dest.display().to_string(),
        ],
    )?;
    let states = states(bins, &dest)?;
    let report = CrashReport {
        options: o.clone(),
        kills,
        batches_produced,
        dest_ends: ends.refresh().to_vec(),
        source_ends,
        shipped_ends,
        drain_rounds,
        accounting,
        compare,
        verify: (verify_ok, first_line(&v_out, &v_err)),
        states,
        applier_log_recoveries: count_lines(&applier.log, "recovered the local log"),
        shipper_continuations: count_lines(&shipper.log, "continuing from the latest manifest"),
        compactions: (
            count_lines(&shipper.log, "compacted packed ranges"),
            sum_field(&shipper.log, "pack gc pass", "deleted="),
        ),
        objects: (
            count_files(&bucket, ".pack"),
            count_files(&bucket, ".batches"),
            count_in(&bucket, "manifest"),
        ),
        elapsed: started.elapsed(),
        kept: None,
    };
    let kept = if o.keep || !report.passed() {
        Some(work.keep())
    } else {
        None
    };
    Ok(CrashReport { kept, ..report })
}

/// Files under `dir` whose own dir is named `name`.
fn count_in(dir: &Path, name: &str) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.parent().is_some_and(|d| d.ends_with(name)) {
                n += 1;
            }
        }
    }
    n
}

/// Files under `dir` whose name ends with `suffix`.
fn count_files(dir: &Path, suffix: &str) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                n += 1;
            }
        }
    }
    n
}

fn first_line(out: &str, err: &str) -> String {
    out.lines()
        .chain(err.lines())
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

/// Waits until every destination partition reaches `target`, checking
/// that both services stay up.
fn wait_caught_up(
    ends: &mut DestEnds,
    target: &[i64],
    shipper: &mut Service,
    applier: &mut Service,
    timeout: Duration,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        let now = ends.refresh();
        if now.iter().zip(target).all(|(d, t)| d >= t) {
            return Ok(());
        }
        shipper.check_alive()?;
        applier.check_alive()?;
        if t0.elapsed() > timeout {
            bail!(
                "not caught up after {timeout:?}: destination {now:?}, target {target:?}\nshipper log:\n{}\napplier log:\n{}",
                tail(&shipper.log, 15),
                tail(&applier.log, 15)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
