//! Issue 9's benchmarks that need more than a shell script:
//!
//! - `gen`: writes a Kafka-format source log dir with kafkalog's library
//!   (layouts `mixed`, `big`, `small`), cached under `target/bench-data`.
//! - `lag`: a steady producer (FlushPolicy::OnRoll) against `shipper run`
//!   and `applier run` on `file://`, sampling when each batch becomes
//!   visible in the destination log.
//! - `idle`: 10,000 small partitions on one shipper and one applier
//!   (libraries, in this process, behind a `CountingStore`): start-up time,
//!   idle CPU and requests per idle minute.
//! - `metadata`: reading a broker's KRaft metadata log at 10,000
//!   partitions: the first read, an idle cycle's poll, a cycle with leader
//!   moves, against reading the same bytes.
//! - `scan-eof`: the cost of `kafkalog::segment::scan` when there is
//!   nothing to read (what an idle shipper cycle pays per partition).
//!
//! The shell scripts in `bench/` drive these and the baselines (`cp`,
//! `rclone`). Nothing here writes into the repository.

mod common;
mod generate;
mod idle;
mod lag;
mod metadata;

#[path = "../../kraft/tests/support/mod.rs"]
mod kraft_support;

use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!(
        "usage: segmirror-bench gen --out DIR --layout mixed|big|segments|small [--total-mib N] [--segment-mib N (big)] [--segment-kib N (segments)] [--partitions N]\n\
         \x20      segmirror-bench lag [--bin DIR] [--rate BATCHES_PER_S] [--partitions N] [--secs S] [--poll-ms MS] [--tail-interval DUR] [--applier-poll-ms MS] [--records N] [--value-size BYTES] [--segment-mib N] [--layout 1|2] [--bucket URL] [--requests-after S] [--work DIR] [--keep 1]\n\
         \x20      segmirror-bench idle [--partitions N] [--secs S] [--applier-metrics on] [--work DIR] [--data DIR] [--keep 1]\n\
         \x20      segmirror-bench metadata [--partitions N] [--cycles N] [--changes N] [--work DIR]\n\
         \x20      segmirror-bench scan-eof [--iterations N]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        return usage();
    };
    let opts = match common::Opts::parse(&args[1..]) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("segmirror-bench: {e}");
            return usage();
        }
    };
    let r = match cmd.as_str() {
        "gen" => generate::main(&opts),
        "lag" => lag::main(&opts),
        "idle" => idle::main(&opts),
        "metadata" => metadata::main(&opts),
        "scan-eof" => common::scan_eof(&opts),
        _ => return usage(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("segmirror-bench {cmd}: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
