//! Harness 6 (short): destination disk full and permission denied: a
//! clear error, nothing half-applied, recovery once fixed. The findings
//! that fail these checks today are pinned in `bugs.rs`; this test checks
//! the parts that hold and prints the whole report.

use segmirror_reliability::bins::Bins;
use segmirror_reliability::localfaults::run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_and_permission_denied_are_clear_and_recoverable() {
    let bins = Bins::get().expect("service binaries");
    let r = run(&bins).await.expect("harness");
    println!("{}", r.render());
    for s in &r.scenarios {
        assert!(s.clear, "unclear error: {}", r.render());
        assert!(s.recovered, "not recovered: {}", r.render());
    }
}
