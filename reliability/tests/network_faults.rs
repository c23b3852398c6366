//! Harness 3 (short): 10% of the requests between the services and the
//! S3 server (moto) dropped, delayed or cut by a TCP fault proxy; the pair
//! converges with nothing lost. Needs the S3 test server (`eval "$(bash
//! tests/s3-server.sh start)"`, or `bash scripts/test.sh`) unless
//! `SEGMIRROR_SKIP_S3=1`.

use segmirror_reliability::netfaults::{NetOptions, NetReport, run, s3_env};
use segmirror_reliability::pair::PairOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_percent_network_faults_against_s3_converge() {
    let o = NetOptions {
        rounds: 15,
        ..NetOptions::default()
    };
    converges(&o).await;
}

/// The same against layout 2 (issue 30): a cycle's ranges in one pack,
/// head deltas, and compaction every 4 cycles written in the background and
/// committed by a later cycle. Dropped and cut pack PUTs, ranged GETs of a
/// pack cut in the middle, and lost answers of the heads that commit a
/// compaction converge with nothing lost or duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_percent_network_faults_against_s3_with_packs_and_compaction_converge() {
    let o = NetOptions {
        rounds: 15,
        seed: 30,
        pair: PairOptions {
            layout2: (1 << 20, true),
            compact_ranges: Some(4),
            background_compaction: true,
            ..PairOptions::default()
        },
        ..NetOptions::default()
    };
    let r = converges(&o).await;
    if let Some(r) = r {
        assert!(r.run.trouble.compacted_ranges > 0, "{}", r.render());
    }
}

/// Runs the harness against the S3 test server (`None` when S3 tests are
/// skipped on purpose): the proxy faulted requests and the pair converged.
async fn converges(o: &NetOptions) -> Option<NetReport> {
    segmirror_testkit::needs::s3()?;
    assert!(
        s3_env().is_some(),
        "AWS_ENDPOINT_URL is not set: eval \"$(bash tests/s3-server.sh start)\""
    );
    let r = run(o).await.expect("harness");
    println!("{}", r.render());
    assert!(r.proxy.faults() > 0, "{}", r.render());
    assert!(r.passed(), "{}", r.render());
    Some(r)
}
