//! Harness 3 (short): 10% of the requests between the services and the
//! S3 server (moto) dropped, delayed or cut by a TCP fault proxy; the pair
//! converges with nothing lost. Needs the S3 test server (`eval "$(bash
//! tests/s3-server.sh start)"`, or `bash scripts/test.sh`) unless
//! `SEGMIRROR_SKIP_S3=1`.

use segmirror_reliability::netfaults::{NetOptions, run, s3_env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_percent_network_faults_against_s3_converge() {
    if segmirror_testkit::needs::s3().is_none() {
        return;
    }
    assert!(
        s3_env().is_some(),
        "AWS_ENDPOINT_URL is not set: eval \"$(bash tests/s3-server.sh start)\""
    );
    let o = NetOptions {
        rounds: 15,
        ..NetOptions::default()
    };
    let r = run(&o).await.expect("harness");
    println!("{}", r.render());
    assert!(r.proxy.faults() > 0, "{}", r.render());
    assert!(r.passed(), "{}", r.render());
}
