//! Options, a deterministic batch generator, and small measuring helpers.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};

/// `--name value` pairs.
#[derive(Debug, Default)]
pub(crate) struct Opts(BTreeMap<String, String>);

impl Opts {
    pub(crate) fn parse(args: &[String]) -> anyhow::Result<Opts> {
        let mut m = BTreeMap::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let Some(name) = a.strip_prefix("--") else {
                bail!("unexpected argument {a:?}");
            };
            let Some(v) = it.next() else {
                bail!("--{name} needs a value");
            };
            m.insert(name.to_string(), v.clone());
        }
        Ok(Opts(m))
    }

    pub(crate) fn str(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub(crate) fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> anyhow::Result<T>
    where
        T::Err: std::fmt::Display,
    {
        match self.0.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|e| anyhow::anyhow!("--{name} {v:?}: {e}")),
        }
    }
}

/// xorshift64*: deterministic payload bytes.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// ASCII text from a 64-letter alphabet (log-line-like payload).
    pub(crate) fn fill_text(&mut self, out: &mut [u8]) {
        const ALPHABET: &[u8; 64] =
            b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789{}";
        for chunk in out.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            for (o, b) in chunk.iter_mut().zip(r) {
                *o = ALPHABET[usize::from(b & 63)];
            }
        }
    }
}

/// Producer-style batches: `records` records of a 16-byte key and a
/// `value_size`-byte value, create-time timestamps 1 ms apart, no
/// compression, non-idempotent producer. Base offset 0 and epoch -1: the
/// leader append stamps both.
pub(crate) struct BatchGen {
    rng: Rng,
    records: usize,
    value_size: usize,
    next_ts: i64,
}

impl BatchGen {
    pub(crate) fn new(seed: u64, records: usize, value_size: usize) -> BatchGen {
        BatchGen {
            rng: Rng::new(seed),
            records,
            value_size,
            next_ts: 1_700_000_000_000,
        }
    }

    /// The next batch; `ts` overrides the first record's timestamp.
    pub(crate) fn next_batch(&mut self, ts: Option<i64>) -> anyhow::Result<Vec<u8>> {
        if let Some(t) = ts {
            self.next_ts = t;
        }
        let mut records = Vec::with_capacity(self.records);
        for _ in 0..self.records {
            let mut value = vec![0u8; self.value_size];
            self.rng.fill_text(&mut value);
            let key = format!("user-{:011}", self.rng.next_u64() % 100_000_000_000);
            records.push(RecordInput {
                timestamp: self.next_ts,
                key: Some(key.into_bytes()),
                value: Some(value),
                headers: Vec::new(),
            });
            self.next_ts += 1;
        }
        Ok(build_batch(&BatchSpec::new(0, -1), &records)?)
    }
}

/// utime + stime of this process (all threads), from `/proc/self/stat`.
pub(crate) fn self_cpu() -> Duration {
    proc_cpu("self").unwrap_or_default()
}

/// utime + stime of process `pid` (all threads) from `/proc/<pid>/stat`.
pub(crate) fn proc_cpu(pid: &str) -> anyhow::Result<Duration> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces: fields count from after its ')'.
    let rest = s
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unexpected /proc stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, utime 14, stime 15 (1-based in proc(5)).
    let utime: u64 = f.get(11).context("utime")?.parse()?;
    let stime: u64 = f.get(12).context("stime")?.parse()?;
    Ok(Duration::from_millis((utime + stime) * 10)) // CLK_TCK is 100 on Linux
}

/// VmHWM (peak RSS) of a process, in KiB.
pub(crate) fn proc_hwm_kib(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The 1-minute load average.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Quantile (nearest rank) of sorted values.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Bytes of all files under `dir`, recursively.
pub(crate) fn du(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => total += du(&e.path()),
                Ok(_) => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                Err(_) => {}
            }
        }
    }
    total
}

/// `scan-eof`: what an idle shipper cycle pays per partition to learn that
/// its active segment has nothing new: `kafkalog::segment::scan` from the
/// end of a small segment, against the `open` + `fstat` alone.
pub(crate) fn scan_eof(o: &Opts) -> anyhow::Result<()> {
    use std::time::Instant;
    let n: u32 = o.num("iterations", 10_000)?;
    let dir = std::env::temp_dir().join(format!("segmirror-scan-eof-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("00000000000000000000.log");
    let batch = BatchGen::new(1, 10, 100).next_batch(None)?;
    std::fs::write(&path, &batch)?;
    let size = batch.len() as u64;
    let time = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / f64::from(n))
    };
    for round in 0..3 {
        let scan =
            time(&mut || {
                kafkalog::segment::scan(&path, size, true, |_, _| {
                    std::ops::ControlFlow::Continue(())
                })?;
                Ok(())
            })?;
        let open = time(&mut || {
            let f = std::fs::File::open(&path)?;
            let _ = f.metadata()?.len();
            Ok(())
        })?;
        println!(
            "round {round}: segment::scan at the end of a {size}-byte segment: {scan:.1} us per call; open + fstat alone: {open:.1} us ({n} calls each; load {})",
            loadavg()
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
