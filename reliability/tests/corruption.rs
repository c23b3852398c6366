//! Harness 4 (short): byte flips sampled over every region of every batch
//! of a shipped object are all detected (FAILED, the object named, nothing
//! of it applied, other partitions untouched) and repaired by `start`;
//! sampled flips of the manifest and the head are never applied silently
//! on the data path (see `bugs.rs` for the head and manifest findings).

use segmirror_reliability::corrupt::{CorruptOptions, Verdict, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flipped_byte_of_a_shipped_object_is_detected_and_repaired() {
    let o = CorruptOptions {
        samples: 2,
        json_samples: 40,
        depth: false,
        ..CorruptOptions::default()
    };
    let r = run_and_check_data_flips(&o).await;
    // A manifest or head flip never breaks another partition.
    assert!(
        r.trials.iter().all(|t| t.verdict != Verdict::Broken),
        "{}",
        r.render()
    );
}

/// The same flips with every object appended as it downloads (issue 16):
/// a mismatch found at the object's end truncates the batches it already
/// appended, so the verdicts are the same, nothing of the object stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flipped_byte_is_detected_when_objects_are_appended_as_they_download() {
    let o = CorruptOptions {
        samples: 2,
        json_samples: 0,
        depth: false,
        stream_above: Some(0),
        ..CorruptOptions::default()
    };
    run_and_check_data_flips(&o).await;
}

/// Runs the harness and checks that every data flip was detected (FAILED,
/// nothing of the object applied) and repaired by `start`.
async fn run_and_check_data_flips(
    o: &CorruptOptions,
) -> segmirror_reliability::corrupt::CorruptReport {
    let r = run(o).await.expect("harness");
    println!("{}", r.render());
    let (detected, tried) = r.data_detection();
    assert!(tried >= 100, "{tried} data flips");
    assert_eq!(detected, tried, "{}", r.render());
    for t in r.trials.iter().filter(|t| t.target == "data") {
        assert!(t.repaired, "not repaired: {t:?}");
    }
    r
}

/// The same flips in the victim's range inside a pack (layout 2,
/// `pack_below`): detected by the range's CRC-32C, nothing of it applied,
/// the other partitions of the pack untouched, repaired by `start`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flipped_byte_of_a_packed_range_is_detected_and_repaired() {
    let o = CorruptOptions {
        samples: 2,
        json_samples: 20,
        depth: false,
        pack_below: 1 << 20,
        ..CorruptOptions::default()
    };
    let r = run_and_check_data_flips(&o).await;
    assert!(
        r.trials.iter().all(|t| t.verdict != Verdict::Broken),
        "{}",
        r.render()
    );
}
