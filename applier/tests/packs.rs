//! Ranges inside a pack (`manifest::pack`, issue 30): manifests whose
//! ranges name byte ranges of one shared object are applied, verified and
//! scrubbed like ranges of their own objects, with the real `applier`
//! binary: the mirror is byte-identical to the source, the bucket holds one
//! data object for every partition, and a flipped byte inside one
//! partition's range is named (that partition, the pack's key) while the
//! others verify clean.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{SOURCE, file_bucket, produce, publish_packed, topic_id};
use kafkalog::compare::{Comparison, compare_partition};
use kafkalog::{LogConfig, LogDir, TopicPartition};

fn applier(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(args)
        .env("RUST_LOG", "error")
        .env_remove("SEGMIRROR_BUCKET")
        .env_remove("SEGMIRROR_SOURCE_CLUSTER_ID")
        .env_remove("SEGMIRROR_APPLIER_CONFIG")
        .output()
        .expect("run applier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn partitions() -> Vec<TopicPartition> {
    (0..3)
        .map(|p| TopicPartition::new("orders", p).expect("tp"))
        .collect()
}

/// Every file under `dir`, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("list") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_inside_one_pack_are_applied_byte_identical_and_damage_is_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (source, dest, bucket_dir) = (
        tmp.path().join("source"),
        tmp.path().join("dest"),
        tmp.path().join("bucket"),
    );
    let (bucket, store) = file_bucket(&bucket_dir);
    {
        let d = LogDir::open(&source).expect("log dir");
        for (i, t) in partitions().iter().enumerate() {
            let cfg = LogConfig {
                segment_bytes: 4096,
                ..LogConfig::default()
            };
            let mut log = d
                .open_or_create_partition(t, Some(topic_id()), cfg)
                .expect("create");
            produce(&mut log, 40 + 30 * i, 3);
            produce(&mut log, 20, 5);
            log.close().expect("close");
        }
    }
    let (pack, manifests) = publish_packed(
        &store,
        &source,
        &partitions(),
        "0190a2b3c4d5e0000000000000a7",
    )
    .await;
    let ranges: usize = manifests.iter().map(|m| m.ranges.len()).sum();
    assert!(ranges >= 9, "several ranges per partition: {ranges}");
    let objects: Vec<PathBuf> = files(&bucket_dir)
        .into_iter()
        .filter(|p| {
            let s = p.to_string_lossy();
            s.ends_with(".batches") || s.ends_with(".pack")
        })
        .collect();
    assert_eq!(
        objects.len(),
        1,
        "one data object for every range: {objects:?}"
    );
    assert!(objects[0].to_string_lossy().ends_with(&pack));

    let dest_s = dest.to_str().expect("utf-8");
    let once = |log_dir: &Path, extra: &[&str]| {
        let mut args = vec![
            "once",
            "--log-dir",
            log_dir.to_str().expect("utf-8"),
            "--bucket",
            &bucket,
            "--source-cluster-id",
            SOURCE,
            "--topics",
            "orders",
        ];
        args.extend_from_slice(extra);
        applier(&args)
    };
    let (code, out) = once(&dest, &[]);
    assert_eq!(code, 0, "{out}");
    for t in partitions() {
        assert_eq!(
            compare_partition(&source, &dest, &t).expect("compare"),
            Comparison::Identical,
            "{t}"
        );
    }
    // The streaming path (every range streamed, none buffered) reads the
    // same byte ranges.
    let streamed = tmp.path().join("streamed");
    let (code, out) = once(&streamed, &["--stream-above", "0"]);
    assert_eq!(code, 0, "{out}");
    for t in partitions() {
        assert_eq!(
            compare_partition(&source, &streamed, &t).expect("compare"),
            Comparison::Identical,
            "streamed {t}"
        );
    }
    let verify = |extra: &[&str]| {
        let mut args = vec![
            "verify",
            "--log-dir",
            dest_s,
            "--bucket",
            &bucket,
            "--source-cluster-id",
            SOURCE,
            "--sample-objects",
            "100%",
        ];
        args.extend_from_slice(extra);
        applier(&args)
    };
    let (code, out) = verify(&[]);
    assert_eq!(code, 0, "every range read from the pack checks out: {out}");

    // A flipped byte inside orders-1's second range of the pack.
    let victim = &manifests[1].ranges[1];
    let at = victim.object_offset.expect("a pack range") + victim.bytes / 2;
    let mut object = std::fs::read(&objects[0]).expect("read pack");
    object[at as usize] ^= 0x10;
    std::fs::write(&objects[0], &object).expect("write pack");
    let (code, out) = verify(&[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&pack) && out.contains("orders-1"),
        "names the pack and the partition: {out}"
    );
    assert!(
        !out.contains("orders-0") && !out.contains("orders-2"),
        "the others are clean: {out}"
    );
}
