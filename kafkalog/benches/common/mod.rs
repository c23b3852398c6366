//! Shared helpers of the kafkalog benches: a deterministic workload of
//! realistic v2 batches, the cached 1 GiB segment, timing and printing.
//!
//! Not a bench target itself (cargo only discovers `benches/*.rs` and
//! `benches/*/main.rs`); each bench pulls it in with `mod common;`.

#![allow(dead_code)]

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kafkalog::builder::{BatchSpec, RecordInput, build_batch};

pub(crate) const MIB: f64 = 1024.0 * 1024.0;
/// Records per batch: 16 records of ~1 KiB make a ~16.6 KiB batch, the
/// producer default `batch.size` of 16 KiB filled with 1 KiB messages.
pub(crate) const RECORDS_PER_BATCH: usize = 16;
/// Record value size.
pub(crate) const VALUE_SIZE: usize = 1024;
/// Size of the scan bench's segment: Kafka's default `segment.bytes`.
pub(crate) const SEGMENT_BYTES: u64 = 1 << 30;
/// Bump when the generator changes, so a cached segment is regenerated.
const DATA_VERSION: &str = "v1";

/// xorshift64*: deterministic, fast, good enough for payload bytes.
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

    /// Payload that looks like a log line / JSON-ish text: ASCII drawn from
    /// a small alphabet (what typical topics carry), not all zeros.
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

/// Generates producer-style batches: `RECORDS_PER_BATCH` records with a
/// 16-byte key and a `VALUE_SIZE` value each, create-time timestamps one
/// millisecond apart, no compression, no headers, non-idempotent producer.
pub(crate) struct BatchGen {
    rng: Rng,
    next_offset: i64,
    next_ts: i64,
    epoch: i32,
}

impl BatchGen {
    /// `epoch` is the partition leader epoch stamped in the batches (-1 as a
    /// producer sends them; the leader overwrites it).
    pub(crate) fn new(seed: u64, epoch: i32) -> BatchGen {
        BatchGen {
            rng: Rng::new(seed),
            next_offset: 0,
            next_ts: 1_700_000_000_000,
            epoch,
        }
    }

    /// The next batch, at consecutive offsets.
    pub(crate) fn next_batch(&mut self) -> Vec<u8> {
        let mut records = Vec::with_capacity(RECORDS_PER_BATCH);
        for _ in 0..RECORDS_PER_BATCH {
            let mut value = vec![0u8; VALUE_SIZE];
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
        let spec = BatchSpec::new(self.next_offset, self.epoch);
        let batch = build_batch(&spec, &records).expect("build_batch");
        self.next_offset += RECORDS_PER_BATCH as i64;
        batch
    }
}

/// Batches laid end to end in one buffer, with their ranges.
pub(crate) struct Prebuilt {
    pub(crate) bytes: Vec<u8>,
    pub(crate) ranges: Vec<(usize, usize)>,
}

impl Prebuilt {
    /// As many whole batches from `BatchGen::new(seed, epoch)` as fit in
    /// `total` bytes (so that `total = segment.bytes` appends without a roll).
    pub(crate) fn generate(seed: u64, epoch: i32, total: usize) -> Prebuilt {
        let mut g = BatchGen::new(seed, epoch);
        let mut bytes = Vec::with_capacity(total);
        let mut ranges = Vec::new();
        loop {
            let b = g.next_batch();
            if bytes.len() + b.len() > total {
                break;
            }
            ranges.push((bytes.len(), bytes.len() + b.len()));
            bytes.extend_from_slice(&b);
        }
        Prebuilt { bytes, ranges }
    }

    /// Ranges of groups of whole batches of at most `max_bytes` each (at
    /// least one batch per group), like replica fetch responses.
    pub(crate) fn chunks(&self, max_bytes: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut start = 0usize;
        let mut end = 0usize;
        for &(s, e) in &self.ranges {
            if e - start > max_bytes && end > start {
                out.push((start, end));
                start = s;
            }
            end = e;
        }
        if end > start {
            out.push((start, end));
        }
        out
    }
}

/// The workspace's target dir (`CARGO_TARGET_DIR` when set).
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

/// A ~1 GiB segment (`00000000000000000000.log`) of generated batches under
/// `target/bench-data/`, generated on first use and reused afterwards. A
/// `params` marker written after the segment is complete guards against
/// reusing a half-written file.
pub(crate) fn cached_segment() -> PathBuf {
    let dir = target_dir()
        .join("bench-data")
        .join(format!("segment-1gib-{DATA_VERSION}"));
    let log = dir.join("00000000000000000000.log");
    let marker = dir.join("params");
    let params = format!(
        "version={DATA_VERSION} segment_bytes={SEGMENT_BYTES} records_per_batch={RECORDS_PER_BATCH} value_size={VALUE_SIZE} seed=42\n"
    );
    if let (Ok(m), Ok(meta)) = (fs::read_to_string(&marker), fs::metadata(&log))
        && m.lines().next() == params.lines().next()
        && m.lines().any(|l| l == format!("size={}", meta.len()))
    {
        eprintln!("reusing {}", log.display());
        return log;
    }
    fs::create_dir_all(&dir).expect("create bench-data dir");
    let _ = fs::remove_file(&marker);
    eprintln!("generating {} (once) ...", log.display());
    let t = Instant::now();
    let mut w = BufWriter::with_capacity(1 << 20, File::create(&log).expect("create segment"));
    let mut g = BatchGen::new(42, 0);
    let mut size = 0u64;
    let mut batches = 0u64;
    loop {
        let b = g.next_batch();
        if size + b.len() as u64 > SEGMENT_BYTES {
            break;
        }
        w.write_all(&b).expect("write segment");
        size += b.len() as u64;
        batches += 1;
    }
    let f = w.into_inner().expect("flush segment");
    f.sync_all().expect("fsync segment");
    fs::write(&marker, format!("{params}size={size}\nbatches={batches}\n")).expect("write marker");
    eprintln!(
        "generated {batches} batches, {size} bytes in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    log
}

/// Median of the durations (the middle one for odd counts).
pub(crate) fn median(d: &[Duration]) -> Duration {
    let mut v = d.to_vec();
    v.sort();
    v[v.len() / 2]
}

/// MiB/s for `bytes` in `d`.
pub(crate) fn mib_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / MIB / d.as_secs_f64()
}

/// `[a, b, c]` as seconds, for the raw-runs column.
pub(crate) fn runs_secs(d: &[Duration]) -> String {
    let v: Vec<String> = d
        .iter()
        .map(|x| format!("{:.3}", x.as_secs_f64()))
        .collect();
    format!("[{}]", v.join(", "))
}

/// Runs `cmd` through `sh -c` and returns its trimmed stdout, or `?`.
pub(crate) fn shell(cmd: &str) -> String {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

/// Time this thread has spent on a CPU (user + system), from
/// `/proc/thread-self/schedstat` (nanoseconds). Unlike wall-clock time it
/// does not grow while the thread waits for a core that another process
/// (a parallel build) holds. Zero when unavailable.
pub(crate) fn cpu_now() -> Duration {
    fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

/// User + system CPU time of this process's waited-for children
/// (`cutime + cstime` of `/proc/self/stat`, clock ticks of 10 ms).
pub(crate) fn children_cpu() -> Duration {
    let Ok(stat) = fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the parenthesised command name; cutime and cstime are
    // fields 16 and 17 of the whole line, so 14th and 15th after ") ".
    let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
        return Duration::ZERO;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [13usize, 14]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// The 1-minute load average, to show whether other work shared the machine.
pub(crate) fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// One line naming the machine: CPU model, cores, memory, kernel.
pub(crate) fn machine_line() -> String {
    format!(
        "machine: {} | nproc {} | mem {} | kernel {}",
        shell("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'"),
        shell("nproc"),
        shell("free -h | awk '/^Mem:/ {print $2}'"),
        shell("uname -r"),
    )
}
