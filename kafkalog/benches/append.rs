//! Append throughput of `PartitionLog`, warm page cache, fresh log per run.
//!
//! `cargo bench -p kafkalog --bench append`
//!
//! Workload: ~1 GiB (as many whole batches as fit in the default
//! `segment.bytes`, so no roll) of prebuilt ~16.6 KiB v2 batches (16 records
//! of 1 KiB, no compression), appended into a fresh partition of a fresh log
//! dir under the system temp dir, default `LogConfig`:
//! - leader, `FlushPolicy::OnRoll`: `append_as_leader`, one batch per call
//!   (a v2 produce request carries one batch per partition);
//! - the same through `append_as_coordinator` (no write-guard check), to
//!   size the guard's per-call cost;
//! - replicated, `OnRoll`: `append_replicated` of 1 MiB groups of batches
//!   (`replica.fetch.max.bytes`), and one batch per call;
//! - `FlushPolicy::Always` (fsync before each append returns), leader one
//!   batch per call and replicated 1 MiB per call, time-bounded
//!   (`BENCH_ALWAYS_SECS`, default 5 s per run) since each call waits on
//!   the disk;
//! - baselines in the same run: `write(2)` of the same batches one per call
//!   into a plain file, and `cp` of the segment the leader run wrote.
//!
//! 5 runs each (`BENCH_RUNS`), interleaved, median by throughput; `sync(1)`
//! runs before each timed run so that no earlier writeback overlaps it. The
//! final `close()` (fsync of the 1 GiB segment, index files, checkpoints) is
//! timed separately and not included in the append figures.
//!
//! A per-call breakdown follows: the write-guard check
//! (`read_only_reason`, the same `guard::read` that `append_as_leader` runs
//! on every call), the CRC check of one batch (`BatchIter::verified`), and
//! `write(2)` of one batch, each averaged over many calls.
//!
//! `BENCH_ONLY=1,3` runs only those rows (numbered as printed) and
//! `BENCH_BYTES` sets a smaller volume: for profiling, e.g. under
//! `valgrind --tool=callgrind`.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kafkalog::{FlushPolicy, LogConfig, LogDir, PartitionLog, TopicPartition};

use common::{MIB, Prebuilt, mib_s};

/// One run's outcome.
#[derive(Clone, Copy)]
struct Run {
    bytes: u64,
    batches: u64,
    calls: u64,
    time: Duration,
    /// On-CPU time of the appending thread (for cp: of the cp process,
    /// 10 ms resolution).
    cpu: Duration,
    /// Per-call latency percentiles (p50, p99), when measured.
    lat: Option<(Duration, Duration)>,
}

impl Run {
    fn mib_s(&self) -> f64 {
        mib_s(self.bytes, self.time)
    }
}

struct Row {
    name: String,
    runs: Vec<Run>,
}

impl Row {
    fn new(name: &str) -> Row {
        Row {
            name: name.to_string(),
            runs: Vec::new(),
        }
    }

    fn median(&self) -> Option<Run> {
        let mut v = self.runs.clone();
        v.sort_by(|a, b| a.mib_s().total_cmp(&b.mib_s()));
        v.get(v.len() / 2).copied()
    }
}

fn tp() -> TopicPartition {
    TopicPartition::new("bench", 0).expect("topic partition")
}

fn fresh_log(root: &Path, flush: FlushPolicy) -> (LogDir, PartitionLog) {
    let dir = LogDir::open(root).expect("open log dir");
    let config = LogConfig {
        flush,
        ..LogConfig::default()
    };
    let log = dir
        .open_or_create_partition(&tp(), None, config)
        .expect("create partition");
    (dir, log)
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Leader,
    Coordinator,
    Replicated,
}

/// Appends `chunks` of `data` into a fresh log; stops early after `limit`.
/// Returns the run, the log (still open) and the log dir.
fn append_run(
    root: &Path,
    flush: FlushPolicy,
    mode: Mode,
    data: &mut [u8],
    chunks: &[(usize, usize)],
    batches_per_chunk: &[u64],
    limit: Option<Duration>,
) -> (Run, PartitionLog, LogDir) {
    let (dir, mut log) = fresh_log(root, flush);
    settle();
    let mut lat = Vec::with_capacity(if limit.is_some() { chunks.len() } else { 0 });
    let (mut bytes, mut batches, mut calls) = (0u64, 0u64, 0u64);
    let c0 = common::cpu_now();
    let t = Instant::now();
    for (&(s, e), &n) in chunks.iter().zip(batches_per_chunk) {
        let c = limit.map(|_| Instant::now());
        let info = match mode {
            Mode::Leader => log.append_as_leader(&mut data[s..e], 0),
            Mode::Coordinator => log.append_as_coordinator(&mut data[s..e], 0),
            Mode::Replicated => log.append_replicated(&data[s..e]),
        }
        .expect("append");
        debug_assert_eq!(info.batches as u64, n);
        if let Some(c) = c {
            lat.push(c.elapsed());
        }
        bytes += (e - s) as u64;
        batches += n;
        calls += 1;
        if let Some(limit) = limit
            && t.elapsed() >= limit
        {
            break;
        }
    }
    let time = t.elapsed();
    let cpu = common::cpu_now().saturating_sub(c0);
    assert_eq!(log.size_bytes(), bytes, "everything landed in one segment");
    let lat = if lat.is_empty() {
        None
    } else {
        lat.sort();
        Some((lat[lat.len() / 2], lat[(lat.len() * 99) / 100]))
    };
    (
        Run {
            bytes,
            batches,
            calls,
            time,
            cpu,
            lat,
        },
        log,
        dir,
    )
}

/// Waits for all dirty data to reach the disk, so runs start alike.
fn settle() {
    let _ = Command::new("sync").status();
}

/// Mean time of `f` over `n` calls.
fn per_call(n: u32, mut f: impl FnMut()) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed() / n
}

fn segment_path(log: &PartitionLog) -> PathBuf {
    log.dir().join(kafkalog::segment::file_name(
        0,
        kafkalog::segment::LOG_SUFFIX,
    ))
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let always_secs: f64 = std::env::var("BENCH_ALWAYS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let always_limit = Some(Duration::from_secs_f64(always_secs));
    // BENCH_ONLY=1,5: only those rows (numbered as printed), for profiling.
    let only: Option<Vec<usize>> = std::env::var("BENCH_ONLY")
        .ok()
        .map(|s| s.split(',').filter_map(|v| v.trim().parse().ok()).collect());
    let want = |row: usize| only.as_ref().is_none_or(|o| o.contains(&row));
    let breakdown_wanted = only.is_none();

    let load_start = common::loadavg();
    let t = Instant::now();
    // BENCH_BYTES: a smaller volume (e.g. under valgrind); default 1 GiB.
    let volume: usize = std::env::var("BENCH_BYTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(common::SEGMENT_BYTES as usize);
    let mut pre = Prebuilt::generate(7, 0, volume);
    let total = pre.bytes.len() as u64;
    let n_batches = pre.ranges.len() as u64;
    eprintln!(
        "prebuilt {n_batches} batches, {:.1} MiB in {:.1} s",
        total as f64 / MIB,
        t.elapsed().as_secs_f64()
    );
    let single: Vec<(usize, usize)> = pre.ranges.clone();
    let ones = vec![1u64; single.len()];
    let mib_chunks = pre.chunks(1 << 20);
    let mib_counts: Vec<u64> = mib_chunks
        .iter()
        .map(|&(s, e)| {
            pre.ranges
                .iter()
                .filter(|&&(bs, be)| bs >= s && be <= e)
                .count() as u64
        })
        .collect();

    let tmp = tempfile::tempdir().expect("tempdir");
    let mut rows = vec![
        Row::new("leader append_as_leader, OnRoll, 1 batch/call"),
        Row::new("leader append_as_coordinator (no guard read), OnRoll, 1 batch/call"),
        Row::new("replicated append_replicated, OnRoll, 1 MiB/call"),
        Row::new("replicated append_replicated, OnRoll, 1 batch/call"),
        Row::new("baseline: write(2) of the same batches, 1 batch/call"),
        Row::new("baseline: cp of the segment the leader run wrote (page cache to page cache)"),
        Row::new("leader append_as_leader, Always, 1 batch/call (time-bounded)"),
        Row::new("replicated append_replicated, Always, 1 MiB/call (time-bounded)"),
    ];
    let mut close_times = Vec::new();

    for r in 0..runs {
        eprintln!("round {}/{runs}", r + 1);
        // Leader, OnRoll; then its close (fsync); then cp of its segment.
        if want(1) || want(6) {
            let root = tmp.path().join(format!("leader-{r}"));
            let (run, log, dir) = append_run(
                &root,
                FlushPolicy::OnRoll,
                Mode::Leader,
                &mut pre.bytes,
                &single,
                &ones,
                None,
            );
            rows[0].runs.push(run);
            let seg = segment_path(&log);
            let t = Instant::now();
            log.close().expect("close");
            close_times.push(t.elapsed());
            if want(6) {
                let copy = tmp.path().join("cp-copy.log");
                settle();
                let c0 = common::children_cpu();
                let t = Instant::now();
                let st = Command::new("cp")
                    .arg(&seg)
                    .arg(&copy)
                    .status()
                    .expect("run cp");
                let cp_time = t.elapsed();
                let cp_cpu = common::children_cpu().saturating_sub(c0);
                assert!(st.success(), "cp failed");
                rows[5].runs.push(Run {
                    bytes: std::fs::metadata(&copy).expect("stat copy").len(),
                    batches: run.batches,
                    calls: 1,
                    time: cp_time,
                    cpu: cp_cpu,
                    lat: None,
                });
                std::fs::remove_file(&copy).expect("rm copy");
            }
            drop(dir);
            std::fs::remove_dir_all(&root).expect("rm");
        }
        for (row, mode, chunks, counts) in [
            (1usize, Mode::Coordinator, &single, &ones),
            (2, Mode::Replicated, &mib_chunks, &mib_counts),
            (3, Mode::Replicated, &single, &ones),
        ] {
            if !want(row + 1) {
                continue;
            }
            let root = tmp.path().join(format!("row{row}-{r}"));
            let (run, log, dir) = append_run(
                &root,
                FlushPolicy::OnRoll,
                mode,
                &mut pre.bytes,
                chunks,
                counts,
                None,
            );
            rows[row].runs.push(run);
            drop(log);
            drop(dir);
            std::fs::remove_dir_all(&root).expect("rm");
        }
        // write(2) baseline.
        if want(5) {
            let path = tmp.path().join("plain.log");
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .expect("create");
            settle();
            let c0 = common::cpu_now();
            let t = Instant::now();
            for &(s, e) in &single {
                f.write_all(&pre.bytes[s..e]).expect("write");
            }
            let time = t.elapsed();
            let cpu = common::cpu_now().saturating_sub(c0);
            drop(f);
            std::fs::remove_file(&path).expect("rm");
            rows[4].runs.push(Run {
                bytes: total,
                batches: n_batches,
                calls: n_batches,
                time,
                cpu,
                lat: None,
            });
        }
        // Always: each call fsyncs; bounded in time.
        for (row, mode, chunks, counts) in [
            (6usize, Mode::Leader, &single, &ones),
            (7, Mode::Replicated, &mib_chunks, &mib_counts),
        ] {
            if !want(row + 1) {
                continue;
            }
            let root = tmp.path().join(format!("always{row}-{r}"));
            let (run, log, dir) = append_run(
                &root,
                FlushPolicy::Always,
                mode,
                &mut pre.bytes,
                chunks,
                counts,
                always_limit,
            );
            rows[row].runs.push(run);
            drop(log);
            drop(dir);
            std::fs::remove_dir_all(&root).expect("rm");
        }
    }

    // Per-call breakdown of the leader path (hot caches, averaged).
    let breakdown = if !breakdown_wanted {
        (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0)
    } else {
        let root = tmp.path().join("breakdown");
        let (dir, log) = fresh_log(&root, FlushPolicy::OnRoll);
        let guard = per_call(100_000, || {
            assert!(log.read_only_reason().expect("guard").is_none());
        });
        let (s, e) = single[0];
        let one = &pre.bytes[s..e];
        let crc = per_call(20_000, || {
            let n = kafkalog::batch::BatchIter::verified(std::hint::black_box(one), 0)
                .inspect(|r| assert!(r.is_ok()))
                .count();
            assert_eq!(n, 1);
        });
        let headers = per_call(1_000_000, || {
            let n = kafkalog::batch::BatchIter::new(std::hint::black_box(one), 0)
                .inspect(|r| assert!(r.is_ok()))
                .count();
            assert_eq!(n, 1);
        });
        drop(log);
        drop(dir);
        std::fs::remove_dir_all(&root).expect("rm");
        (guard, crc, headers, e - s)
    };

    println!(
        "{} | loadavg(1m) at start {load_start}, at end {}",
        common::machine_line(),
        common::loadavg()
    );
    println!(
        "workload: {n_batches} batches, {:.1} MiB, ~{:.1} KiB/batch, 16 x 1 KiB records, compression none; default LogConfig (segment.bytes 1 GiB, index.interval.bytes 4096); {runs} runs each, median by throughput",
        total as f64 / MIB,
        total as f64 / n_batches as f64 / 1024.0
    );
    println!();
    println!(
        "| variant | MiB/s | batches/s | vs cp | vs write(2) | MiB/s (on-CPU) | bytes/run | p50 / p99 per call | runs (MiB/s) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|---|");
    let ratio = |x: f64, base: Option<Run>| {
        base.map(|b| format!("{:.2}", x / b.mib_s()))
            .unwrap_or_else(|| "-".into())
    };
    for row in &rows {
        let Some(m) = row.median() else { continue };
        let lat = m
            .lat
            .map(|(p50, p99)| {
                format!(
                    "{:.0} / {:.0} us",
                    p50.as_secs_f64() * 1e6,
                    p99.as_secs_f64() * 1e6
                )
            })
            .unwrap_or_else(|| "-".into());
        let each: Vec<String> = row
            .runs
            .iter()
            .map(|r| format!("{:.0}", r.mib_s()))
            .collect();
        println!(
            "| {} | {:.0} | {:.0} | {} | {} | {} | {:.0} MiB | {} | [{}] |",
            row.name,
            m.mib_s(),
            m.batches as f64 / m.time.as_secs_f64(),
            ratio(m.mib_s(), rows[5].median()),
            ratio(m.mib_s(), rows[4].median()),
            if m.cpu.is_zero() {
                "-".to_string()
            } else {
                format!("{:.0}", mib_s(m.bytes, m.cpu))
            },
            m.bytes as f64 / MIB,
            lat,
            each.join(", "),
        );
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let per = |r: Option<Run>| {
        r.map(|r| {
            format!(
                "{:.2} wall, {:.2} on-CPU",
                r.time.as_secs_f64() * 1e6 / r.calls as f64,
                r.cpu.as_secs_f64() * 1e6 / r.calls as f64
            )
        })
        .unwrap_or_else(|| "-".into())
    };
    if !breakdown_wanted {
        return;
    }
    println!();
    println!(
        "per-call breakdown, leader path, one {} B batch per call:",
        breakdown.3
    );
    println!();
    println!("| part | us/call |");
    println!("|---|---|");
    println!(
        "| append_as_leader, whole call (row 1 median) | {} |",
        per(rows[0].median())
    );
    println!(
        "| append_as_coordinator, whole call (row 2 median) | {} |",
        per(rows[1].median())
    );
    println!(
        "| write-guard check (read_only_reason: open of a missing file) | {:.2} |",
        us(breakdown.0)
    );
    println!(
        "| CRC check of the batch (BatchIter::verified, in cache) | {:.2} |",
        us(breakdown.1)
    );
    println!(
        "| header parse only (BatchIter::new) | {:.3} |",
        us(breakdown.2)
    );
    println!(
        "| write(2) of the batch (baseline row median) | {} |",
        per(rows[4].median())
    );
    if !close_times.is_empty() {
        let close = common::median(&close_times);
        println!();
        println!(
            "close() right after the 1 GiB leader OnRoll append (fsync of the segment + index files + checkpoints): median {:.3} s ({:.0} MiB/s), runs {}",
            close.as_secs_f64(),
            mib_s(total, close),
            common::runs_secs(&close_times)
        );
    }
}
