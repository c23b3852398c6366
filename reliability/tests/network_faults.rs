//! Harness 3 (short): 10% of the requests between the services and the
//! S3 server (moto) dropped, delayed or cut by a TCP fault proxy; the pair
//! converges with nothing lost. Runs only when `SEGMIRROR_TEST_S3_BUCKET`
//! is set (`eval "$(bash tests/s3-server.sh start)"`, as CI does).

use segmirror_reliability::netfaults::{NetOptions, run, s3_env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_percent_network_faults_against_s3_converge() {
    if s3_env().is_none() {
        assert!(
            !segmirror_testkit::s3_required(),
            "the S3 backend is required (SEGMIRROR_REQUIRE_S3 or CI) but SEGMIRROR_TEST_S3_BUCKET / AWS_ENDPOINT_URL are not set"
        );
        eprintln!("skipped: SEGMIRROR_TEST_S3_BUCKET / AWS_ENDPOINT_URL not set");
        return;
    }
    let o = NetOptions {
        rounds: 15,
        ..NetOptions::default()
    };
    let r = run(&o).await.expect("harness");
    println!("{}", r.render());
    assert!(r.proxy.faults() > 0, "{}", r.render());
    assert!(r.passed(), "{}", r.render());
}
