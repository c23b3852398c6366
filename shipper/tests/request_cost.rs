//! Cost is visible (issue 30, deliverable 4): the shipper measures its
//! billed requests per second over a window (`bucket::pricing`), exports
//! them and their monthly cost as metrics, and carries them in the heads
//! it writes anyway, so `shipper status` shows each shipper's rate and
//! cost from the bucket alone.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bucket::counting::CountingStore;
use bucket::pricing::Prices;
use common::*;
use kafkalog::LogDir;
use shipper::Shipper;
use shipper::metrics::Metrics;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_rate_and_its_cost_reach_the_metrics_and_status() {
    let b = backends()
        .into_iter()
        .find(|b| b.name == "memory")
        .expect("memory backend");
    let src = tempfile::tempdir().expect("tempdir");
    let dir = LogDir::open(src.path()).expect("log dir");
    let t = tp("costed", 0);
    let mut log = open_log(&dir, &t, topic_id(9), 64 * 1024);
    let counting = CountingStore::new(b.store());
    let prices = Prices::preset("s3-express-one-zone").expect("preset");
    let metrics =
        Arc::new(Metrics::new(Some(counting.clone())).with_prices("s3-express-one-zone", prices));
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(counting.clone());
    let mut shipper = Shipper::new(options(src.path(), &b, "costed-1"), store)
        .expect("shipper")
        .with_metrics(Arc::clone(&metrics));
    append_n(&mut log, 20, 1, 0, 40);
    let first = shipper.ship_available().await;
    assert!(first.committed > 0, "{first:?}");
    // A window of a second or more, then a cycle that writes a head.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    append_n(&mut log, 20, 1, 0, 40);
    let second = shipper.ship_available().await;
    assert!(second.heads > 0, "{second:?}");

    let (name, secs, cost) = metrics.request_cost().expect("measured");
    assert_eq!(name, "s3-express-one-zone");
    assert!(secs >= 1.0, "window {secs}");
    assert!(cost.writes_per_s > 0.0, "{cost:?}");
    let expected =
        (cost.writes_per_s * prices.write_per_1k + cost.reads_per_s * prices.read_per_1k) / 1000.0
            * bucket::pricing::MONTH_SECS;
    assert!(
        (cost.dollars_per_month - expected).abs() < 1e-9,
        "{cost:?} vs {expected}"
    );
    let text = metrics.render();
    assert!(
        text.contains(
            "segmirror_shipper_request_cost_dollars_per_month{prices=\"s3-express-one-zone\"}"
        ),
        "{text}"
    );
    assert!(
        text.contains("segmirror_shipper_requests_per_second{class=\"write\"}"),
        "{text}"
    );

    // The head written by the second cycle carries the first window.
    let status = shipper::status::bucket_status(&b.manifests())
        .await
        .expect("status")
        .expect("a head");
    let c = status.costs.get("costed-1").expect("the shipper's cost");
    assert_eq!(c.prices, "s3-express-one-zone");
    assert!(c.window_s >= 1, "{c:?}");
    assert!(c.writes_per_hour > 0, "{c:?}");
    let cents = (c.writes_per_hour as f64 / 3600.0 * prices.write_per_1k
        + c.reads_per_hour as f64 / 3600.0 * prices.read_per_1k)
        / 1000.0
        * bucket::pricing::MONTH_SECS
        * 100.0;
    assert!(
        (c.cents_per_month as f64 - cents).abs() <= 1.0 + cents * 0.01,
        "{c:?} vs {cents}"
    );
    let table = shipper::status::render_table(&status, c.measured_at_ms);
    assert!(table.contains("requests of costed-1 over"), "{table}");
    assert!(table.contains("at s3-express-one-zone prices"), "{table}");
    let json = serde_json::to_value(&status).expect("json");
    assert!(
        json["costs"]["costed-1"]["cents_per_month"].is_u64(),
        "{json}"
    );
}
