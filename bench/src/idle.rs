//! `idle`: 10,000 small partitions on one shipper and one applier.
//!
//! Both run as libraries in this process, configured exactly as their
//! binaries would be by default (`ShipperConfig::validate`,
//! `ApplierConfig::validate`), on a tokio runtime with 2 workers like the
//! binaries, talking to a `file://` bucket through a
//! `bucket::counting::CountingStore`. Phases, in order:
//!
//! 1. shipper, first start on an empty bucket: `ship_available` (ships all);
//! 2. shipper restart (a new `Shipper` over the full bucket): its first
//!    `run_cycle`, which finds nothing new;
//! 3. shipper idle: `Shipper::run` for `--secs` (default 60) at the default
//!    5 s tail interval;
//! 4. applier, first start on an empty log dir: `Applier::open` and
//!    `run_once` until a cycle does nothing (applies all);
//! 5. applier restart: `Applier::open` and one `run_once`;
//! 6. applier idle: `Applier::run` for `--secs` at the default 1 s poll
//!    (with `--applier-metrics on`, metrics are rendered after every cycle
//!    as with `--metrics-addr`).
//!
//! CPU is this process's utime + stime (`/proc/self/stat`, 10 ms ticks):
//! nothing else runs in it during a phase.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use applier::Applier;
use applier::config::ApplierConfig;
use bucket::counting::{CountingStore, RequestCounts};
use shipper::{Shipper, ShipperConfig};

use crate::common::{Opts, loadavg, proc_hwm_kib, self_cpu};

struct Phase {
    name: String,
    wall: Duration,
    cpu: Duration,
    requests: RequestCounts,
    note: String,
}

fn requests_text(r: &RequestCounts) -> String {
    let parts: Vec<String> = r
        .by_kind()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        format!("{} ({})", r.total(), parts.join(", "))
    }
}

pub(crate) fn main(o: &Opts) -> anyhow::Result<()> {
    let partitions: u32 = o.num("partitions", 10_000)?;
    let secs: f64 = o.num("secs", 60.0)?;
    let metrics = o.str("applier-metrics") == Some("on");
    let data = std::path::absolute(PathBuf::from(
        o.str("data")
            .map(str::to_string)
            .unwrap_or_else(|| format!("target/bench-data/small-{partitions}")),
    ))?;
    let gen_opts = Opts::parse(&[
        "--out".into(),
        data.to_string_lossy().into_owned(),
        "--layout".into(),
        "small".into(),
        "--partitions".into(),
        partitions.to_string(),
    ])?;
    crate::generate::main(&gen_opts)?;
    let work = match o.str("work") {
        Some(w) => PathBuf::from(w),
        None => std::env::temp_dir().join(format!("segmirror-idle-{}", std::process::id())),
    };
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(work.join("bucket"))?;
    let bucket = std::fs::canonicalize(work.join("bucket"))?;
    let dst = std::path::absolute(work.join("mirror"))?;
    let url = format!("file://{}", bucket.display());
    let load0 = loadavg();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let phases = rt.block_on(async {
        let mut phases = Vec::new();
        let idle = Duration::from_secs_f64(secs);

        // The shipper.
        let v = ShipperConfig {
            log_dirs: vec![data.clone()],
            bucket: Some(url.clone()),
            cluster_id: Some("idle-src".into()),
            ..ShipperConfig::default()
        }
        .validate()?;
        let tail = v.options.tail_interval;
        let counting = CountingStore::new(v.bucket.build()?);
        let measure = |name: &str| {
            let (t, c, r) = (Instant::now(), self_cpu(), counting.snapshot());
            let counting = counting.clone();
            let name = name.to_string();
            move |note: String| Phase {
                name,
                wall: t.elapsed(),
                cpu: self_cpu() - c,
                requests: counting.snapshot().since(&r),
                note,
            }
        };
        let done = measure("shipper: first start, empty bucket (ships everything)");
        let mut s = Shipper::new(v.options.clone(), counting.as_dyn())?;
        let r = s.ship_available().await;
        phases.push(done(format!(
            "{} objects, {} manifest versions, {} heads",
            r.objects, r.committed, r.heads
        )));
        drop(s);
        let done = measure("shipper: restart, full bucket (first cycle)");
        let mut s = Shipper::new(v.options.clone(), counting.as_dyn())?;
        let r = s.run_cycle().await;
        phases.push(done(format!(
            "{} objects, {} manifest versions",
            r.objects, r.committed
        )));
        let done = measure(&format!(
            "shipper: idle `run`, tail interval {}",
            humantime(tail)
        ));
        s.run(tokio::time::sleep(idle)).await;
        phases.push(done(String::new()));
        drop(s);

        // The applier.
        let v = ApplierConfig {
            log_dir: Some(dst.clone()),
            bucket: Some(url.clone()),
            source_cluster_id: Some("idle-src".into()),
            cluster_id: Some("idle-dst".into()),
            topics: Some(".*".into()),
            ..ApplierConfig::default()
        }
        .validate(true)?;
        let poll = v.poll_interval;
        let counting = CountingStore::new(v.bucket.as_ref().context("bucket")?.build()?);
        let measure = |name: &str| {
            let (t, c, r) = (Instant::now(), self_cpu(), counting.snapshot());
            let counting = counting.clone();
            let name = name.to_string();
            move |note: String| Phase {
                name,
                wall: t.elapsed(),
                cpu: self_cpu() - c,
                requests: counting.snapshot().since(&r),
                note,
            }
        };
        let exposition = || Arc::new(std::sync::Mutex::new(String::new()));
        let done = measure("applier: first start, empty log dir (applies everything)");
        let mut a = Applier::open(v.options.clone(), Some(counting.as_dyn()))?;
        if metrics {
            a.set_metrics(exposition());
        }
        let (mut batches, mut cycles) = (0, 0);
        for _ in 0..1000 {
            let r = a.run_once().await;
            cycles += 1;
            batches += r.batches;
            if r.batches == 0 && r.transitions == 0 {
                break;
            }
        }
        let mirroring = a
            .mirrors()
            .filter(|m| m.record.state.state() == manifest::state::PartitionState::Mirroring)
            .count();
        phases.push(done(format!(
            "{cycles} cycles, {batches} batches, {mirroring} partitions MIRRORING"
        )));
        drop(a);
        let done = measure("applier: restart (open + first cycle)");
        let mut a = Applier::open(v.options.clone(), Some(counting.as_dyn()))?;
        if metrics {
            a.set_metrics(exposition());
        }
        let r = a.run_once().await;
        phases.push(done(format!(
            "{} batches, {} transitions",
            r.batches, r.transitions
        )));
        let done = measure(&format!(
            "applier: idle `run`, poll interval {}{}",
            humantime(poll),
            if metrics { ", metrics rendered" } else { "" }
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        tokio::spawn(async move {
            tokio::time::sleep(idle).await;
            flag.store(true, Ordering::Relaxed);
        });
        a.run(poll, stop).await;
        phases.push(done(String::new()));
        drop(a);
        anyhow::Ok(phases)
    })?;

    println!(
        "{partitions} partitions (one ~1.4 KiB batch each), file:// bucket; load average at start {load0}, at end {}; peak RSS of this process (both services, one after the other) {:.0} MiB",
        loadavg(),
        proc_hwm_kib("self").unwrap_or(0) as f64 / 1024.0
    );
    println!();
    println!("| phase | wall s | CPU s | CPU % of a core | requests | per minute | notes |");
    println!("|---|---:|---:|---:|---|---:|---|");
    for p in &phases {
        let w = p.wall.as_secs_f64();
        println!(
            "| {} | {:.2} | {:.2} | {:.1} | {} | {:.0} | {} |",
            p.name,
            w,
            p.cpu.as_secs_f64(),
            p.cpu.as_secs_f64() / w * 100.0,
            requests_text(&p.requests),
            p.requests.total() as f64 * 60.0 / w,
            p.note
        );
    }
    if o.str("keep").is_none() {
        std::fs::remove_dir_all(&work)?;
    }
    Ok(())
}

fn humantime(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
