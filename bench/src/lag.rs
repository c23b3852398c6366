//! `lag`: end-to-end lag under a steady load on `file://` (or `--bucket
//! URL`, e.g. the S3 test server), the objects the run wrote (`file://`)
//! and the shipper's requests by kind, read from its metrics endpoint over
//! the measurement (from `--requests-after S` seconds into it: past the
//! start-up sweep of one LIST per partition, 16 a cycle). `--layout 2`
//! (default, as the shipper's): the shipper packs and commits appends with
//! heads (issue 30); `--layout 1`: an object and a version per range.
//!
//! A producer in this process appends `--rate` batches per second (round
//! robin over `--partitions` partitions, 16 records of 1 KiB each by
//! default) with kafkalog's `PartitionLog::append_as_leader` and
//! `FlushPolicy::OnRoll`, and notes when each append returned. `shipper
//! run --tail-interval 1s` and `applier run --poll-interval 100ms` run as
//! child processes (the release binaries). A watcher thread reads the
//! destination log's newest segment every `--poll-ms` (50 ms), from where
//! it stopped, and parses whole batch headers to learn the destination's
//! end offset; every source batch whose last offset is now below it is
//! visible, and its lag is (this poll's time - the append's return). The
//! poll period adds 0 to 50 ms (25 ms on average) to each sample.
//!
//! Warm-up: one batch per partition is appended before the services start,
//! and the measurement starts only once the destination has it (so the
//! applier's discovery and preparation are not in the figures).

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kafkalog::{FlushPolicy, LogConfig, LogDir, TopicId, TopicPartition};

use crate::common::{BatchGen, Opts, loadavg, proc_cpu, proc_hwm_kib, quantile};

/// The end of a destination partition, followed incrementally.
struct DestTail {
    dir: PathBuf,
    base: i64,
    pos: u64,
    next_offset: i64,
    buf: Vec<u8>,
}

impl DestTail {
    fn new(dir: PathBuf) -> DestTail {
        DestTail {
            dir,
            base: -1,
            pos: 0,
            next_offset: 0,
            buf: Vec::new(),
        }
    }

    fn newest_segment(&self) -> Option<i64> {
        let rd = std::fs::read_dir(&self.dir).ok()?;
        rd.flatten()
            .filter_map(|e| {
                let n = e.file_name();
                let n = n.to_str()?;
                n.strip_suffix(".log")?.parse::<i64>().ok()
            })
            .max()
    }

    /// Reads whole batches from `pos` to the end of segment `base`.
    fn read_segment(&mut self) {
        let path = self.dir.join(format!("{:020}.log", self.base));
        let Ok(mut f) = std::fs::File::open(&path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.pos)).is_err() {
            return;
        }
        self.buf.clear();
        if f.read_to_end(&mut self.buf).is_err() {
            return;
        }
        let mut at = 0usize;
        while self.buf.len() - at >= 27 {
            let b = &self.buf[at..];
            let base = i64::from_be_bytes(b[0..8].try_into().unwrap_or_default());
            let len = i32::from_be_bytes(b[8..12].try_into().unwrap_or_default());
            let total = 12 + len.max(0) as usize;
            if len <= 0 || b.len() < total {
                break;
            }
            let delta = i32::from_be_bytes(b[23..27].try_into().unwrap_or_default());
            self.next_offset = self.next_offset.max(base + i64::from(delta) + 1);
            at += total;
        }
        self.pos += at as u64;
    }

    /// The destination's end offset now.
    fn poll(&mut self) -> i64 {
        if let Some(newest) = self.newest_segment() {
            if newest != self.base {
                if self.base >= 0 {
                    self.read_segment(); // the rest of the segment that rolled
                }
                self.base = newest;
                self.pos = 0;
            }
            self.read_segment();
        }
        self.next_offset
    }
}

/// Per partition: (last offset, when its append returned) of the batches
/// not yet seen in the destination, oldest first.
type Pending = Vec<VecDeque<(i64, Instant)>>;

struct Services {
    shipper: Child,
    applier: Child,
}

impl Services {
    fn stop(mut self) {
        for c in [&mut self.shipper, &mut self.applier] {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
        }
        for c in [&mut self.shipper, &mut self.applier] {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match c.try_wait() {
                    Ok(Some(_)) => break,
                    _ if Instant::now() > deadline => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
    }
}

pub(crate) fn main(o: &Opts) -> anyhow::Result<()> {
    let bin = PathBuf::from(o.str("bin").unwrap_or("target/release"));
    let rate: f64 = o.num("rate", 200.0)?;
    let partitions: i32 = o.num("partitions", 4)?;
    let secs: f64 = o.num("secs", 60.0)?;
    let poll = Duration::from_millis(o.num("poll-ms", 50u64)?);
    let tail = o.str("tail-interval").unwrap_or("1s").to_string();
    let applier_poll: u64 = o.num("applier-poll-ms", 100)?;
    let records: usize = o.num("records", 16)?;
    let value_size: usize = o.num("value-size", 1024)?;
    let segment_mib: u64 = o.num("segment-mib", 8)?;
    // `--layout 2` (the shipper's default): packs and head deltas (issue
    // 30); `--layout 1`: an object and a manifest version per range.
    let layout: u32 = o.num("layout", 2)?;
    let work = match o.str("work") {
        Some(w) => PathBuf::from(w),
        None => std::env::temp_dir().join(format!("segmirror-lag-{}", std::process::id())),
    };
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    let (src, bucket, dst) = (
        work.join("source"),
        work.join("bucket"),
        work.join("mirror"),
    );
    std::fs::create_dir_all(&bucket)?;
    let src = std::fs::canonicalize(std::fs::create_dir_all(&src).map(|_| src)?)?;
    let bucket = std::fs::canonicalize(bucket)?;
    let dst = std::path::absolute(&dst)?;

    // Source partitions, one batch each.
    let logdir = LogDir::open(&src)?;
    let id = TopicId::random()?;
    let config = LogConfig {
        segment_bytes: segment_mib * 1024 * 1024,
        flush: FlushPolicy::OnRoll,
        ..LogConfig::default()
    };
    let mut logs = Vec::new();
    let mut gens = Vec::new();
    for p in 0..partitions {
        let tp = TopicPartition::new("lag", p)?;
        let mut log = logdir.open_or_create_partition(&tp, Some(id), config.clone())?;
        let mut g = BatchGen::new(100 + p as u64, records, value_size);
        log.append_as_leader(&mut g.next_batch(Some(now_ms()))?, 0)?;
        logs.push(log);
        gens.push(g);
    }

    let spawn = |name: &str, args: &[&str]| -> anyhow::Result<Child> {
        let log = std::fs::File::create(work.join(format!("{name}.log")))?;
        Command::new(bin.join(name))
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("SEGMIRROR_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.join(name).display()))
    };
    // `--bucket URL`: another bucket (the S3 test server: the AWS_*
    // variables come from this process's environment) instead of the
    // work dir's `file://` one.
    let url = match o.str("bucket") {
        Some(u) => u.to_string(),
        None => format!("file://{}", bucket.display()),
    };
    // The shipper's request counters are read from its metrics endpoint
    // when the measurement starts and when it ends.
    let metrics_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.to_string()
    };
    let shipper = spawn(
        "shipper",
        &[
            "run",
            "--log-dir",
            path_str(&src)?,
            "--bucket",
            &url,
            "--cluster-id",
            "lagsrc",
            "--tail-interval",
            &tail,
            "--create-bucket",
            "--metrics-addr",
            &metrics_addr,
        ]
        .into_iter()
        .chain(
            if layout == 2 {
                &["--pack-below", "1MiB", "--head-deltas", "true"][..]
            } else {
                &["--pack-below", "0", "--head-deltas", "false"][..]
            }
            .iter()
            .copied(),
        )
        .collect::<Vec<&str>>(),
    )?;
    let applier_poll_s = format!("{applier_poll}ms");
    let applier = spawn(
        "applier",
        &[
            "run",
            "--log-dir",
            path_str(&dst)?,
            "--bucket",
            &url,
            "--source-cluster-id",
            "lagsrc",
            "--cluster-id",
            "lagdst",
            "--topics",
            ".*",
            "--poll-interval",
            &applier_poll_s,
        ],
    )?;
    let services = Services { shipper, applier };
    // `--requests-after S`: the requests are counted from S seconds into
    // the measurement (past a start-up sweep, one LIST per partition).
    let requests_after = Duration::from_secs_f64(o.num("requests-after", 0.0)?);
    let at_start: Arc<Mutex<Option<(Instant, Requests)>>> = Arc::new(Mutex::new(None));
    let result = measure(
        &mut logs,
        &mut gens,
        &dst,
        partitions,
        rate,
        secs,
        poll,
        &services,
        &tail,
        applier_poll,
        &mut || {
            let (at_start, addr) = (Arc::clone(&at_start), metrics_addr.clone());
            std::thread::spawn(move || {
                std::thread::sleep(requests_after);
                let r = (Instant::now(), requests(&addr));
                if let Ok(mut g) = at_start.lock() {
                    *g = Some(r);
                }
            });
        },
        url.split("://").next().unwrap_or("file"),
    );
    let at_end = (Instant::now(), requests(&metrics_addr));
    services.stop();
    for l in logs {
        l.close()?;
    }
    drop(logdir);
    let r = result?;
    // Same records, same offsets, same bytes?
    let cmp = Command::new(bin.join("kafkalog"))
        .arg("compare")
        .arg(&src)
        .arg(&dst)
        .output()
        .with_context(|| {
            format!(
                "running {} (cargo build --release -p kafkalog)",
                bin.join("kafkalog").display()
            )
        })?;
    println!(
        "kafkalog compare source mirror: {} {}",
        if cmp.status.success() {
            "OK"
        } else {
            "DIFFERENT"
        },
        String::from_utf8_lossy(&cmp.stdout)
            .lines()
            .last()
            .unwrap_or("")
    );
    // What a `file://` bucket holds: the writes a run made (every object is
    // create-only; heads past the newest 64 are pruned, so heads are a
    // floor).
    if o.str("bucket").is_none() {
        let mut kinds: std::collections::BTreeMap<&str, u64> = Default::default();
        let mut stack = vec![bucket.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d)?.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let s = p.to_string_lossy();
                let kind = if s.ends_with(".pack") {
                    "packs"
                } else if s.ends_with(".batches") {
                    "batches objects"
                } else if s.contains("/manifest/") {
                    "manifest versions"
                } else if s.contains("/head/") {
                    "heads kept"
                } else {
                    "other"
                };
                *kinds.entry(kind).or_default() += 1;
            }
        }
        let writes: u64 = kinds
            .iter()
            .filter(|(k, _)| **k != "heads kept")
            .map(|(_, n)| *n)
            .sum();
        println!(
            "bucket objects (layout {layout}): {kinds:?}; {writes} objects besides heads in {secs} s = {:.2} a second for {partitions} partitions",
            writes as f64 / secs
        );
    }
    let at_start = at_start.lock().ok().and_then(|g| g.clone());
    if let Some((t0, r0)) = &at_start {
        let secs = at_end.0.duration_since(*t0).as_secs_f64();
        let mut line = Vec::new();
        let (mut writes, mut reads) = (0.0, 0.0);
        for (kind, n) in &at_end.1 {
            let d = n - r0.get(kind).copied().unwrap_or(0.0);
            if d > 0.0 {
                line.push(format!("{kind} {d}"));
            }
            match kind.as_str() {
                "get" | "head" => reads += d,
                "delete" => {}
                _ => writes += d,
            }
        }
        println!(
            "shipper requests while measuring ({secs:.1} s, from its metrics): {}; {:.2} writes (PUT, multipart, LIST) and {:.2} reads (GET, HEAD) a second for {partitions} partitions",
            line.join(", "),
            writes / secs,
            reads / secs
        );
    }
    if o.str("keep").is_none() {
        std::fs::remove_dir_all(&work)?;
    } else {
        println!("work dir kept: {}", work.display());
    }
    r.print();
    Ok(())
}

/// Requests by kind, as a shipper's metrics endpoint counts them.
type Requests = std::collections::BTreeMap<String, f64>;

/// Reads `segmirror_shipper_object_store_requests_total` from the metrics
/// endpoint at `addr` (empty when it does not answer).
fn requests(addr: &str) -> Requests {
    use std::io::Write;
    let mut out = Requests::new();
    let Ok(mut c) = std::net::TcpStream::connect(addr) else {
        return out;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    if c.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
        .is_err()
    {
        return out;
    }
    let mut body = String::new();
    let _ = c.read_to_string(&mut body);
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("segmirror_shipper_object_store_requests_total{kind=\"")
        else {
            continue;
        };
        let Some((kind, value)) = rest.split_once("\"} ") else {
            continue;
        };
        if let Ok(v) = value.trim().parse::<f64>() {
            out.insert(kind.to_string(), v);
        }
    }
    out
}

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str().context("non-UTF-8 path")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

struct LagResult {
    header: String,
    samples: Vec<f64>,
    produced: usize,
    unmatched: usize,
    cpu: String,
}

impl LagResult {
    fn print(&self) {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
        println!("{}", self.header);
        println!();
        println!(
            "| batches produced | samples | not visible at the end | p50 s | p90 s | p99 s | max s | mean s |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
        println!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            self.produced,
            s.len(),
            self.unmatched,
            quantile(&s, 0.50),
            quantile(&s, 0.90),
            quantile(&s, 0.99),
            s.last().copied().unwrap_or(f64::NAN),
            mean
        );
        println!();
        println!("{}", self.cpu);
    }
}

#[allow(clippy::too_many_arguments)]
fn measure(
    logs: &mut [kafkalog::PartitionLog],
    gens: &mut [BatchGen],
    dst: &Path,
    partitions: i32,
    rate: f64,
    secs: f64,
    poll: Duration,
    services: &Services,
    tail: &str,
    applier_poll: u64,
    on_warm: &mut dyn FnMut(),
    scheme: &str,
) -> anyhow::Result<LagResult> {
    let mut tails: Vec<DestTail> = (0..partitions)
        .map(|p| DestTail::new(dst.join(format!("lag-{p}"))))
        .collect();
    // Warm-up: the destination has every partition's first batch.
    let warm = Instant::now();
    loop {
        if tails.iter_mut().all(|t| t.poll() >= 1) {
            break;
        }
        if warm.elapsed() > Duration::from_secs(120) {
            bail!(
                "the mirror did not start within 120 s (see the work dir's shipper.log / applier.log)"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "lag: mirror established after {:.1} s; measuring for {secs} s",
        warm.elapsed().as_secs_f64()
    );
    on_warm();

    let pending: Arc<Mutex<Pending>> =
        Arc::new(Mutex::new(vec![VecDeque::new(); partitions as usize]));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let pending = Arc::clone(&pending);
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            let mut drain_deadline: Option<Instant> = None;
            loop {
                let tick = Instant::now();
                let ends: Vec<i64> = tails.iter_mut().map(DestTail::poll).collect();
                let seen = Instant::now();
                let mut empty = true;
                {
                    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                    for (q, end) in p.iter_mut().zip(&ends) {
                        while let Some(&(last, at)) = q.front() {
                            if last < *end {
                                samples.push(seen.duration_since(at).as_secs_f64());
                                q.pop_front();
                            } else {
                                break;
                            }
                        }
                        empty &= q.is_empty();
                    }
                }
                if done.load(Ordering::Relaxed) {
                    let d = *drain_deadline.get_or_insert(Instant::now() + Duration::from_secs(30));
                    if empty || Instant::now() > d {
                        let left = pending
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .iter()
                            .map(VecDeque::len)
                            .sum::<usize>();
                        return (samples, left);
                    }
                }
                if let Some(rest) = poll.checked_sub(tick.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
        })
    };

    let (sp, ap) = (
        services.shipper.id().to_string(),
        services.applier.id().to_string(),
    );
    let cpu0 = (proc_cpu(&sp)?, proc_cpu(&ap)?);
    let load0 = loadavg();
    let bytes0: u64 = logs.iter().map(|l| l.size_bytes()).sum();
    let start = Instant::now();
    let total = (rate * secs).round() as usize;
    let mut late = Duration::ZERO;
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        } else {
            late = late.max(now - due);
        }
        let p = i % partitions as usize;
        let mut b = gens[p].next_batch(Some(now_ms()))?;
        let info = logs[p].append_as_leader(&mut b, 0)?;
        let at = Instant::now();
        pending.lock().unwrap_or_else(|e| e.into_inner())[p].push_back((info.last_offset, at));
    }
    let produced_secs = start.elapsed().as_secs_f64();
    let cpu1 = (proc_cpu(&sp)?, proc_cpu(&ap)?);
    done.store(true, Ordering::Relaxed);
    let (samples, unmatched) = watcher
        .join()
        .map_err(|_| anyhow::anyhow!("watcher panicked"))?;
    let bytes: u64 = logs.iter().map(|l| l.size_bytes()).sum();
    let header = format!(
        "lag under load, {scheme}: {total} batches in {produced_secs:.1} s ({:.0} batches/s over {partitions} partitions, {:.2} MiB/s; producer at most {:.0} ms behind schedule), shipper --tail-interval {tail}, applier --poll-interval {applier_poll}ms, watcher poll {} ms; source now {:.0} MiB; load average at start {load0}, at end {}",
        total as f64 / produced_secs,
        (bytes - bytes0) as f64 / 1048576.0 / produced_secs,
        late.as_secs_f64() * 1000.0,
        poll.as_millis(),
        bytes as f64 / 1048576.0,
        loadavg()
    );
    let cpu = format!(
        "CPU during the {produced_secs:.0} s of load: shipper {:.2} s ({:.1}% of a core), applier {:.2} s ({:.1}%); peak RSS: shipper {} MiB, applier {} MiB",
        (cpu1.0 - cpu0.0).as_secs_f64(),
        (cpu1.0 - cpu0.0).as_secs_f64() / produced_secs * 100.0,
        (cpu1.1 - cpu0.1).as_secs_f64(),
        (cpu1.1 - cpu0.1).as_secs_f64() / produced_secs * 100.0,
        proc_hwm_kib(&sp).map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
        proc_hwm_kib(&ap).map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
    );
    Ok(LagResult {
        header,
        samples,
        produced: total,
        unmatched,
        cpu,
    })
}
