//! `reliability`: runs one harness and prints its figures (see the crate
//! docs and RELIABILITY.md). Exits 0 when the run passed, 1 when it lost,
//! duplicated or corrupted anything (or did not converge), 2 on usage or
//! setup errors.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use segmirror_reliability::bins::Bins;
use segmirror_reliability::corrupt::{self, CorruptOptions};
use segmirror_reliability::crash::{self, CrashOptions};
use segmirror_reliability::faults::{self, FaultOptions};
use segmirror_reliability::localfaults;
use segmirror_reliability::netfaults::{self, NetOptions};
use segmirror_reliability::pair::PairOptions;
use segmirror_reliability::rng::Rng;

#[derive(Parser)]
#[command(
    name = "reliability",
    about = "segmirror reliability harnesses: each tries to lose, duplicate or corrupt data and prints how hard it tried",
    after_help = "Examples:\n  reliability crash --cycles 100\n  reliability faults --fail 0.1 --rounds 400\n  reliability netfaults            # needs moto: eval \"$(bash tests/s3-server.sh start)\"\n  reliability netfaults --layout 2 --compact-ranges 4 --background-compaction\n  reliability corrupt --all-bytes\n  reliability local"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// kill -9 cycles of `shipper run` and `applier run` under continuous production
    Crash {
        /// Kill cycles
        #[arg(long, default_value_t = 100)]
        cycles: u32,
        /// Seed (default: from the clock; printed)
        #[arg(long)]
        seed: Option<u64>,
        /// Partitions
        #[arg(long, default_value_t = 3)]
        partitions: usize,
        /// Batches produced per second
        #[arg(long, default_value_t = 150)]
        rate: u32,
        /// Longest wait before a kill, in milliseconds
        #[arg(long, default_value_t = 1500)]
        max_gap_ms: u64,
        /// Share of cycles that kill again during the recovery
        #[arg(long, default_value_t = 0.2)]
        early_share: f64,
        /// Keep the work dir
        #[arg(long)]
        keep: bool,
    },
    /// Network faults between the services and S3 (moto) through a TCP fault proxy
    Netfaults {
        /// Seed (default: from the clock; printed)
        #[arg(long)]
        seed: Option<u64>,
        /// Share of requests faulted (dropped, delayed or cut)
        #[arg(long, default_value_t = 0.10)]
        share: f64,
        /// Rounds of production
        #[arg(long, default_value_t = 60)]
        rounds: u64,
        /// Partitions
        #[arg(long, default_value_t = 3)]
        partitions: usize,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// Byte flips in shipped objects, manifests and heads: detection, isolation, repair
    Corrupt {
        /// Seed of the sampling
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Every byte of the object, the manifest and the head, with masks 0x01, 0x80 and 0xff
        #[arg(long)]
        all_bytes: bool,
        /// Positions sampled per batch region (without --all-bytes)
        #[arg(long, default_value_t = 3)]
        samples: usize,
        /// Positions sampled in the manifest and the head (without --all-bytes)
        #[arg(long, default_value_t = 200)]
        json_samples: usize,
        /// Ship a cycle's ranges under this many bytes into one pack (layout 2): the flips land in the victim's range inside it
        #[arg(long, default_value_t = 0)]
        pack_below: u64,
        /// Print every trial that was not refused
        #[arg(long)]
        verbose: bool,
    },
    /// Destination disk full and permission denied
    Local,
    /// Injected store faults: shipper and applier in process through a fault-injecting ObjectStore
    Faults {
        /// Seed (default: from the clock; printed)
        #[arg(long)]
        seed: Option<u64>,
        /// Share of every request kind that fails
        #[arg(long, default_value_t = 0.10)]
        fail: f64,
        /// Rounds of production
        #[arg(long, default_value_t = 200)]
        rounds: u64,
        /// Partitions
        #[arg(long, default_value_t = 4)]
        partitions: usize,
        /// Largest latency added to a request, in milliseconds
        #[arg(long, default_value_t = 2)]
        latency_ms: u64,
        /// Share of manifest writes dropped after their objects
        #[arg(long, default_value_t = 0.05)]
        drop_manifest: f64,
        /// Share of manifest/head answers lost after the write
        #[arg(long, default_value_t = 0.05)]
        lost_ack: f64,
        /// Share of GET bodies truncated
        #[arg(long, default_value_t = 0.02)]
        truncate: f64,
        /// Runs with seeds seed, seed+1, ... (a sweep)
        #[arg(long, default_value_t = 1)]
        runs: u64,
        #[command(flatten)]
        layout: LayoutArgs,
    },
}

/// The shipper's bucket layout in the in-process harnesses.
#[derive(clap::Args)]
struct LayoutArgs {
    /// 2: a cycle's ranges in one pack (pack_below 1 MiB) and head deltas; 1: an object and a manifest version per range
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    layout: u8,
    /// With --layout 2: compact a partition's packed ranges once it has this many (0: the shipper's default, 128 or an hour old)
    #[arg(long, default_value_t = 0)]
    compact_ranges: usize,
    /// With --compact-ranges: write compactions in a task of their own, committed by a later cycle (as `shipper run` does)
    #[arg(long)]
    background_compaction: bool,
}

impl LayoutArgs {
    fn pair_options(&self) -> anyhow::Result<PairOptions> {
        if self.layout == 1 && (self.compact_ranges > 0 || self.background_compaction) {
            anyhow::bail!("--compact-ranges and --background-compaction need --layout 2");
        }
        if self.background_compaction && self.compact_ranges == 0 {
            anyhow::bail!("--background-compaction needs --compact-ranges N");
        }
        let mut p = PairOptions::default();
        if self.layout == 2 {
            p.layout2 = (1 << 20, true);
            p.compact_ranges = (self.compact_ranges > 0).then_some(self.compact_ranges);
            p.background_compaction = self.background_compaction;
        }
        Ok(p)
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cores} cores, {cpu}, Linux {kernel}")
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    println!("machine: {}", machine());
    match cli.command {
        Cmd::Crash {
            cycles,
            seed,
            partitions,
            rate,
            max_gap_ms,
            early_share,
            keep,
        } => {
            let o = CrashOptions {
                cycles,
                seed: seed.unwrap_or_else(|| Rng::seed_from_clock() % 1_000_000),
                partitions,
                rate,
                max_gap: Duration::from_millis(max_gap_ms),
                early_share,
                keep,
                ..CrashOptions::default()
            };
            let bins = Bins::get().context("building the service binaries")?;
            let r = tokio::task::spawn_blocking(move || crash::run(&o, &bins))
                .await
                .context("crash harness thread")??;
            print!("{}", r.render());
            Ok(r.passed())
        }
        Cmd::Netfaults {
            seed,
            share,
            rounds,
            partitions,
            layout,
        } => {
            let o = NetOptions {
                seed: seed.unwrap_or_else(|| Rng::seed_from_clock() % 1_000_000),
                share,
                rounds,
                partitions,
                pair: layout.pair_options()?,
                ..NetOptions::default()
            };
            let r = netfaults::run(&o).await.context("network faults harness")?;
            print!("{}", r.render());
            Ok(r.passed())
        }
        Cmd::Corrupt {
            seed,
            all_bytes,
            samples,
            json_samples,
            pack_below,
            verbose,
        } => {
            let o = CorruptOptions {
                seed,
                all_bytes,
                samples,
                json_samples,
                depth: true,
                stream_above: None,
                pack_below,
            };
            let r = corrupt::run(&o).await.context("corruption harness")?;
            if verbose {
                for t in r
                    .trials
                    .iter()
                    .filter(|t| !t.verdict.refused() || !t.repaired)
                {
                    println!(
                        "  {} byte {} ({}) ^{:#04x}: {}; repaired {}; {}; error {:?}",
                        t.target,
                        t.position,
                        t.region,
                        t.mask,
                        t.verdict.name(),
                        t.repaired,
                        t.detail,
                        t.error
                    );
                }
            }
            print!("{}", r.render());
            Ok(r.passed())
        }
        Cmd::Local => {
            let bins = Bins::get().context("building the service binaries")?;
            let r = localfaults::run(&bins)
                .await
                .context("local faults harness")?;
            print!("{}", r.render());
            Ok(r.passed())
        }
        Cmd::Faults {
            seed,
            fail,
            rounds,
            partitions,
            latency_ms,
            drop_manifest,
            lost_ack,
            truncate,
            runs,
            layout,
        } => {
            let pair = layout.pair_options()?;
            let seed = seed.unwrap_or_else(|| Rng::seed_from_clock() % 1_000_000);
            let mut all = true;
            let (mut passed, mut requests, mut injected, mut retries) = (0u64, 0u64, 0u64, 0u64);
            let (mut compared, mut lost, mut duplicated, mut restarts) = (0u64, 0u64, 0u64, 0u64);
            for i in 0..runs {
                let o = FaultOptions {
                    seed: seed + i,
                    partitions,
                    rounds,
                    fail,
                    latency: (Duration::ZERO, Duration::from_millis(latency_ms)),
                    drop_manifest,
                    lost_ack,
                    truncate,
                    ..FaultOptions::default()
                };
                let bucket: Arc<dyn object_store::ObjectStore> =
                    Arc::new(object_store::memory::InMemory::new());
                let r = faults::run(&o, bucket, &pair)
                    .await
                    .context("store faults harness")?;
                print!("{}", r.render());
                all &= r.passed();
                passed += u64::from(r.passed());
                requests += r.shipper_faults.total_requests() + r.applier_faults.total_requests();
                injected += r.shipper_faults.injected() + r.applier_faults.injected();
                retries += r.shipper_faults.retries + r.applier_faults.retries;
                compared += r.outcome.accounting.source_batches;
                lost += r.outcome.accounting.lost;
                duplicated += r.outcome.accounting.duplicated;
                restarts += r.trouble.operator_restarts.len() as u64;
            }
            if runs > 1 {
                println!(
                    "sweep: {passed}/{runs} runs converged clean; {requests} requests, {injected} faults injected, {retries} retried requests, {restarts} operator restarts; {compared} batches compared: lost {lost}, duplicated {duplicated}"
                );
            }
            Ok(all)
        }
    }
}

fn main() {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: tokio runtime: {e}");
            std::process::exit(2);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}
