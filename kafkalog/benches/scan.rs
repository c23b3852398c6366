//! `segment::scan` throughput on a 1 GiB segment, warm page cache.
//!
//! `cargo bench -p kafkalog --bench scan`
//!
//! Measures, 3 runs each, interleaved, median reported:
//! - (a) plain `read(2)` of the file through a 1 MiB buffer (the baseline),
//! - (b) `segment::scan` with `verify = true` (every CRC-32C checked),
//! - (c) `segment::scan` with `verify = false`,
//! - (d)/(e) a bench-local prototype scan that parses batches in place in a
//!   1 MiB buffer with `BatchIter` (no per-batch copy), to size the gain of
//!   the fix described in BENCHMARKS.md; it is not library code,
//! - and an in-memory breakdown (whole file in RAM): `BatchIter` headers
//!   only, `BatchIter::verified` (CRC), so IO, copy and CRC costs separate.
//!
//! The segment is generated once into `target/bench-data/` and reused.
//! `BENCH_RUNS` overrides the run count (default 3); `BENCH_ONLY=b,c`
//! restricts the run to those variants (for profiling one of them).

mod common;

use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

use kafkalog::batch::{BatchError, BatchIter};
use kafkalog::segment::{self, ScanStop};

use common::{MIB, median, mib_s, runs_secs};

const BUF: usize = 1 << 20;

/// (a) Baseline: read the whole file through a 1 MiB buffer.
fn plain_read(path: &Path) -> u64 {
    let mut f = File::open(path).expect("open");
    let mut buf = vec![0u8; BUF];
    let mut total = 0u64;
    let mut x = 0u8;
    loop {
        let n = f.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        x ^= buf[0];
        total += n as u64;
    }
    black_box(x);
    total
}

/// (b)/(c) The library's scan; returns (bytes, batches, records).
fn lib_scan(path: &Path, verify: bool) -> (u64, u64, u64) {
    let mut batches = 0u64;
    let mut records = 0u64;
    let end = segment::scan(path, 0, verify, |h, bytes| {
        batches += 1;
        records += h.record_count as u64;
        black_box(bytes);
        ControlFlow::Continue(())
    })
    .expect("scan");
    assert!(
        matches!(end.stop, ScanStop::End),
        "scan stopped early: {:?}",
        end.stop
    );
    assert_eq!(end.valid_end, end.file_size);
    (end.valid_end, batches, records)
}

/// (d)/(e) Prototype of a copy-free scan: fill a 1 MiB buffer with `read`,
/// walk the whole batches in it in place with `BatchIter`, move the partial
/// tail to the front, refill. A batch larger than the buffer grows it.
/// Same stop semantics as `segment::scan` (torn tail vs corruption).
fn proto_scan(path: &Path, verify: bool) -> (u64, u64, u64) {
    let mut f = File::open(path).expect("open");
    let mut buf = vec![0u8; BUF];
    let mut start = 0usize; // first unconsumed byte in buf
    let mut filled = 0usize; // bytes of buf holding file data
    let mut buf_pos = 0u64; // file position of buf[0]
    let mut eof = false;
    let (mut batches, mut records) = (0u64, 0u64);
    loop {
        let data = &buf[start..filled];
        let mut it = if verify {
            BatchIter::verified(data, buf_pos + start as u64)
        } else {
            BatchIter::new(data, buf_pos + start as u64)
        };
        let mut need: Option<usize> = None;
        for item in it.by_ref() {
            match item {
                Ok((h, bytes)) => {
                    batches += 1;
                    records += h.record_count as u64;
                    black_box(bytes);
                }
                Err(BatchError::Truncated { needed, .. }) if !eof => {
                    need = Some(needed as usize);
                }
                Err(e) => panic!("prototype scan stopped: {e}"),
            }
        }
        start += it.consumed();
        if start == filled && eof {
            return (buf_pos + start as u64, batches, records);
        }
        // Need more data: compact, grow if one batch exceeds the buffer, refill.
        buf.copy_within(start..filled, 0);
        buf_pos += start as u64;
        filled -= start;
        start = 0;
        if let Some(n) = need
            && n > buf.len()
        {
            buf.resize(n, 0);
        }
        while filled < buf.len() {
            let n = f.read(&mut buf[filled..]).expect("read");
            if n == 0 {
                eof = true;
                break;
            }
            filled += n;
        }
    }
}

fn iter_mem(buf: &[u8], verify: bool) -> (u64, u64, u64) {
    let it = if verify {
        BatchIter::verified(buf, 0)
    } else {
        BatchIter::new(buf, 0)
    };
    let (mut bytes, mut batches, mut records) = (0u64, 0u64, 0u64);
    for item in it {
        let (h, b) = item.expect("valid batch");
        bytes += b.len() as u64;
        batches += 1;
        records += h.record_count as u64;
    }
    (bytes, batches, records)
}

struct Row {
    name: &'static str,
    runs: Vec<Duration>,
    /// On-CPU time of each run (see `common::cpu_now`).
    cpu: Vec<Duration>,
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let only: Option<String> = std::env::var("BENCH_ONLY").ok();
    let wanted = |name: &str| {
        only.as_deref().is_none_or(|o| {
            o.split(',')
                .any(|v| name.starts_with(&format!("({})", v.trim())))
        })
    };
    let load_start = common::loadavg();
    let path = common::cached_segment();
    let size = std::fs::metadata(&path).expect("stat").len();

    // Warm the page cache (and check the file) before timing.
    let t = Instant::now();
    assert_eq!(plain_read(&path), size);
    eprintln!("warm-up read: {:.3} s", t.elapsed().as_secs_f64());
    let (_, batches, records) = lib_scan(&path, true);

    let mut rows = [
        Row {
            name: "(a) read(2), 1 MiB buffer [baseline]",
            runs: vec![],
            cpu: vec![],
        },
        Row {
            name: "(b) segment::scan verify=true",
            runs: vec![],
            cpu: vec![],
        },
        Row {
            name: "(c) segment::scan verify=false",
            runs: vec![],
            cpu: vec![],
        },
        Row {
            name: "(d) prototype in-place scan verify=true",
            runs: vec![],
            cpu: vec![],
        },
        Row {
            name: "(e) prototype in-place scan verify=false",
            runs: vec![],
            cpu: vec![],
        },
    ];
    // Interleave the variants so drift (other load, frequency) spreads evenly.
    for _ in 0..runs {
        for (i, row) in rows.iter_mut().enumerate() {
            if !wanted(row.name) {
                continue;
            }
            let c = common::cpu_now();
            let t = Instant::now();
            let got = match i {
                0 => (plain_read(&path), batches, records),
                1 => lib_scan(&path, true),
                2 => lib_scan(&path, false),
                3 => proto_scan(&path, true),
                _ => proto_scan(&path, false),
            };
            row.runs.push(t.elapsed());
            row.cpu.push(common::cpu_now().saturating_sub(c));
            assert_eq!(got, (size, batches, records), "{}", row.name);
        }
    }

    // In-memory breakdown: no IO, no copy.
    let any_mem = ["(f)", "(g)", "(h)"].iter().any(|v| wanted(v));
    let mem = if any_mem {
        std::fs::read(&path).expect("read whole file")
    } else {
        Vec::new()
    };
    let mut mem_rows = [
        Row {
            name: "(f) in-memory BatchIter::new (headers only)",
            runs: vec![],
            cpu: vec![],
        },
        Row {
            name: "(g) in-memory BatchIter::verified (CRC)",
            runs: vec![],
            cpu: vec![],
        },
        Row {
            name: "(h) in-memory memcpy of the file (copy cost)",
            runs: vec![],
            cpu: vec![],
        },
    ];
    let mut dst = vec![0u8; mem.len()];
    dst.copy_from_slice(&mem); // fault the destination pages in first
    for _ in 0..runs {
        for (i, row) in mem_rows.iter_mut().enumerate() {
            if !wanted(row.name) {
                continue;
            }
            let c = common::cpu_now();
            let t = Instant::now();
            match i {
                0 => assert_eq!(iter_mem(&mem, false), (size, batches, records)),
                1 => assert_eq!(iter_mem(&mem, true), (size, batches, records)),
                _ => {
                    dst.copy_from_slice(black_box(&mem));
                    black_box(&dst);
                }
            }
            row.runs.push(t.elapsed());
            row.cpu.push(common::cpu_now().saturating_sub(c));
        }
    }
    drop(dst);
    drop(mem);

    println!(
        "{} | loadavg(1m) at start {load_start}, at end {}",
        common::machine_line(),
        common::loadavg()
    );
    println!(
        "segment: {} ({:.1} MiB, {batches} batches of ~{:.1} KiB, {records} records), warm page cache, {runs} runs each, median",
        path.display(),
        size as f64 / MIB,
        size as f64 / batches as f64 / 1024.0
    );
    println!();
    println!(
        "| variant | median wall s | MiB/s (wall) | MiB/s (on-CPU) | vs (a), wall | runs, wall s |"
    );
    println!("|---|---:|---:|---:|---:|---|");
    if rows[0].runs.is_empty() || rows[1].runs.is_empty() {
        for row in rows.iter().chain(mem_rows.iter()) {
            if !row.runs.is_empty() {
                let m = median(&row.runs);
                println!("{}: {:.0} MiB/s", row.name, mib_s(size, m));
            }
        }
        return;
    }
    let base = median(&rows[0].runs);
    for row in rows.iter().chain(mem_rows.iter()) {
        if row.runs.is_empty() {
            continue;
        }
        let m = median(&row.runs);
        println!(
            "| {} | {:.3} | {:.0} | {:.0} | {:.2} | {} |",
            row.name,
            m.as_secs_f64(),
            mib_s(size, m),
            mib_s(size, median(&row.cpu)),
            base.as_secs_f64() / m.as_secs_f64(),
            runs_secs(&row.runs)
        );
    }
    let b = median(&rows[1].runs);
    let (base_cpu, b_cpu) = (median(&rows[0].cpu), median(&rows[1].cpu));
    println!();
    println!(
        "ratio (b)/(a) throughput = {:.2} wall, {:.2} on-CPU (scan verify=true runs at {:.0}% of plain read speed)",
        base.as_secs_f64() / b.as_secs_f64(),
        base_cpu.as_secs_f64() / b_cpu.as_secs_f64(),
        100.0 * base.as_secs_f64() / b.as_secs_f64()
    );
}
