//! The `kafkalog` tool end to end: produce/dump round trips, compare,
//! truncate, the write guard, and kill -9 during a continuous produce.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::ops::ControlFlow;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kafkalog::reader::PartitionReader;
use kafkalog::records;
use kafkalog::{LogConfig, LogDir, TopicPartition};

fn s(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn produce_then_dump_round_trips_records_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = s(dir.path());
    let input = "k1\tv1\nk2\tvalue with spaces\n\tempty key\njust a value\nk5\tv5\ttab in value\n";
    let (code, out, err) = common::run_kafkalog_with_input(
        &[
            "produce",
            "--log-dir",
            root,
            "--topic",
            "orders",
            "--partition",
            "0",
            "--batch-size",
            "2",
            "--compression",
            "lz4",
        ],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "appended 0..1 epoch 0\nappended 2..3 epoch 0\nappended 4..4 epoch 0\n"
    );
    let (code, out, err) = common::run_kafkalog(&[
        "dump",
        "--log-dir",
        root,
        "--topic",
        "orders",
        "--partition",
        "0",
        "--records",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let mut got = Vec::new();
    for line in out.lines() {
        let batch: serde_json::Value = serde_json::from_str(line).expect("json line");
        assert_eq!(batch["compression"], "lz4");
        for r in batch["records"].as_array().expect("records") {
            got.push((
                r["offset"].as_i64().expect("offset"),
                r["key"].clone(),
                r["value"].clone(),
            ));
        }
    }
    let want = vec![
        (0, "k1".into(), "v1".into()),
        (1, "k2".into(), "value with spaces".into()),
        (2, "".into(), "empty key".into()),
        (3, serde_json::Value::Null, "just a value".into()),
        (4, "k5".into(), "v5\ttab in value".into()),
    ];
    assert_eq!(got, want);
    // --from starts at the batch holding the offset.
    let (_, out, _) = common::run_kafkalog(&[
        "dump",
        "--log-dir",
        root,
        "--topic",
        "orders",
        "--partition",
        "0",
        "--from",
        "3",
        "--json",
    ]);
    assert_eq!(out.lines().count(), 2);
}

#[test]
fn compare_says_identical_then_names_the_first_difference_after_truncate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a");
    let lines: String = (0..500).map(|i| format!("k{i}\tv{i}\n")).collect();
    let (code, _, err) = common::run_kafkalog_with_input(
        &[
            "produce",
            "--log-dir",
            s(&a),
            "--topic",
            "t",
            "--partition",
            "0",
            "--batch-size",
            "50",
        ],
        lines.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    let b = dir.path().join("b");
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(&a)
        .arg(&b)
        .status()
        .expect("cp");
    assert!(status.success());
    let (code, out, _) = common::run_kafkalog(&["compare", s(&a), s(&b)]);
    assert_eq!((code, out.as_str()), (0, "identical\n"));

    let (code, out, err) = common::run_kafkalog(&[
        "truncate",
        "--log-dir",
        s(&b),
        "--topic",
        "t",
        "--partition",
        "0",
        "--to",
        "120",
    ]);
    assert_ne!(code, 0, "truncate without --yes must refuse: {out}");
    assert!(err.contains("--yes"), "{err}");
    let (code, out, err) = common::run_kafkalog(&[
        "truncate",
        "--log-dir",
        s(&b),
        "--topic",
        "t",
        "--partition",
        "0",
        "--to",
        "120",
        "--yes",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.ends_with("t-0: log end offset 500 -> 100\n")
            && out.contains(
                "offset 120 is inside batch 100..149, so the cut is at its batch boundary 100"
            ),
        "cut on the batch boundary below 120, and said so first: {out}"
    );
    let (code, out, _) = common::run_kafkalog(&["compare", s(&a), s(&b)]);
    assert_eq!(code, 1);
    assert!(
        out.contains("log end offsets differ")
            && out.contains("ends at 500")
            && out.contains("ends at 100"),
        "{out}"
    );

    // A different batch at the same offsets.
    let (code, _, err) = common::run_kafkalog_with_input(
        &[
            "produce",
            "--log-dir",
            s(&b),
            "--topic",
            "t",
            "--partition",
            "0",
            "--batch-size",
            "50",
        ],
        lines.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = common::run_kafkalog(&["compare", s(&a), s(&b)]);
    assert_eq!(code, 1);
    assert!(out.contains("batch at offset 100 differs"), "{out}");
}

#[test]
fn produce_to_a_read_only_partition_fails_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = s(dir.path());
    let tp = TopicPartition::new("mirrored", 0).expect("tp");
    {
        let logdir = LogDir::open(dir.path()).expect("open");
        let log = logdir
            .open_or_create_partition(&tp, None, LogConfig::default())
            .expect("create");
        log.set_read_only("mirror of cluster src-1 (state MIRRORING)")
            .expect("guard");
    }
    // Also while another process holds the log dir's lock.
    // (Retried: a child that another test forks may briefly share the
    // first handle's lock until it execs.)
    let held = (0..100).find_map(|_| {
        LogDir::open(dir.path()).ok().or_else(|| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            None
        })
    });
    let _held = held.expect("lock held by the applier");
    let (code, out, err) = common::run_kafkalog_with_input(
        &[
            "produce",
            "--log-dir",
            root,
            "--topic",
            "mirrored",
            "--partition",
            "0",
        ],
        b"k\tv\n",
    );
    assert_eq!(code, 1, "a refused write exits 1: {out}");
    assert!(
        err.contains("mirrored-0 is read-only: mirror of cluster src-1 (state MIRRORING)"),
        "{err}"
    );
    let size: u64 = PartitionReader::open(dir.path(), &tp)
        .expect("reader")
        .segments()
        .expect("segments")
        .iter()
        .map(|s| s.size)
        .sum();
    assert_eq!(size, 0);
}

#[test]
fn a_second_writer_is_refused_with_the_lock_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _held = LogDir::open(dir.path()).expect("open");
    let (code, _, err) = common::run_kafkalog_with_input(
        &[
            "produce",
            "--log-dir",
            s(dir.path()),
            "--topic",
            "t",
            "--partition",
            "0",
        ],
        b"x\n",
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("is locked by another process") && err.contains(".lock"),
        "{err}"
    );
}

/// kill -9 a continuous `produce` several times: every acknowledged record
/// is there after recovery, at its offset, and `verify` passes.
#[test]
fn kill_minus_nine_during_produce_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = s(dir.path()).to_string();
    let tp = TopicPartition::new("crash", 0).expect("tp");
    let mut acked_end = 0i64;
    for cycle in 0..5 {
        let mut child = common::kafkalog()
            .args([
                "produce",
                "--log-dir",
                &root,
                "--topic",
                "crash",
                "--partition",
                "0",
                "--batch-size",
                "7",
                "--fsync",
                "on-roll",
                "--segment-bytes",
                "20000",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        let start = acked_end;
        let feeder = std::thread::spawn(move || {
            // Record n carries value "value-n": offsets continue from the
            // acknowledged end, and unacknowledged records are cut on recovery
            // or kept, in which case later ones are shifted; values are
            // checked only for acknowledged offsets.
            for n in start.. {
                if writeln!(stdin, "k{n}\tvalue-{n}").is_err() {
                    break;
                }
            }
        });
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let deadline = Instant::now() + Duration::from_millis(150 + 70 * cycle);
        let mut last_ack = None;
        let mut line = String::new();
        while Instant::now() < deadline {
            line.clear();
            if out.read_line(&mut line).expect("read") == 0 {
                break;
            }
            last_ack = Some(line.clone());
        }
        child.kill().expect("kill -9");
        // Acks already in the pipe were printed before the kill.
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut rest);
        if let Some(l) = rest.lines().last() {
            last_ack = Some(l.to_string());
        }
        let _ = child.wait();
        let _ = feeder.join();
        let last = last_ack.expect("some batch acknowledged");
        let range = last
            .trim()
            .strip_prefix("appended ")
            .expect("ack line")
            .split(' ')
            .next()
            .expect("range");
        let last_offset: i64 = range
            .split("..")
            .nth(1)
            .expect("last")
            .parse()
            .expect("int");

        // Recovery on open.
        let logdir = LogDir::open(dir.path()).expect("open");
        let log = logdir
            .open_partition(
                &tp,
                LogConfig {
                    segment_bytes: 20000,
                    ..LogConfig::default()
                },
            )
            .expect("recover");
        assert!(
            log.log_end_offset() > last_offset,
            "cycle {cycle}: acknowledged offset {last_offset} lost (LEO {})",
            log.log_end_offset()
        );
        let mut count = 0i64;
        let read = log.read(0, usize::MAX).expect("read");
        for item in kafkalog::batch::BatchIter::verified(&read, 0) {
            let (h, bytes) = item.expect("valid batch");
            for r in records::decode_records(&h, bytes).expect("records") {
                let offset = r.offset(&h).expect("offset");
                assert_eq!(offset, count, "offsets are dense");
                if offset <= last_offset && offset >= start {
                    assert_eq!(
                        r.value.as_deref(),
                        Some(format!("value-{offset}").as_bytes()),
                        "cycle {cycle} offset {offset}"
                    );
                }
                count += 1;
            }
        }
        acked_end = log.log_end_offset();
        drop(log);
        drop(logdir);
        let (code, out, err) = common::run_kafkalog(&["verify", "--log-dir", &root]);
        assert_eq!(code, 0, "cycle {cycle}: {out}{err}");
    }
    assert!(
        PartitionReader::open(dir.path(), &tp)
            .expect("reader")
            .segments()
            .expect("segs")
            .len()
            > 1,
        "rolled at least once"
    );
    let mut batches = 0;
    PartitionReader::open(dir.path(), &tp)
        .expect("reader")
        .for_each_batch(0, true, |_, _| {
            batches += 1;
            ControlFlow::Continue(())
        })
        .expect("walk");
    assert!(batches > 10);
}

/// A log dir with `orders-0` holding 5 batches of 10 records (offsets 0-49).
fn orders_log(root: &std::path::Path) -> TopicPartition {
    let input: String = (0..50).map(|i| format!("k{i}\tv{i}\n")).collect();
    let (code, out, err) = common::run_kafkalog_with_input(
        &[
            "produce",
            "--log-dir",
            s(root),
            "--topic",
            "orders",
            "--partition",
            "0",
            "--batch-size",
            "10",
        ],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{out}{err}");
    TopicPartition::new("orders", 0).expect("tp")
}

fn partition_bytes(root: &std::path::Path, tp: &TopicPartition) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(root.join(tp.dir_name()))
        .expect("list")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).expect("read"),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn truncate_refuses_a_read_only_mirror_partition_unless_forced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tp = orders_log(dir.path());
    {
        let logdir = LogDir::open(dir.path()).expect("open");
        let log = logdir
            .open_partition(&tp, LogConfig::default())
            .expect("open");
        log.set_read_only("mirror of cluster src-1 (state MIRRORING)")
            .expect("guard");
    }
    let before = partition_bytes(dir.path(), &tp);
    let args = [
        "truncate",
        "--log-dir",
        s(dir.path()),
        "--topic",
        "orders",
        "--partition",
        "0",
        "--to",
        "20",
        "--yes",
    ];
    let (code, _, err) = common::run_kafkalog(&args);
    assert_eq!(code, 1, "a refusal exits 1: {err}");
    assert!(err.contains("orders-0 is read-only"), "{err}");
    assert!(err.contains("applier stop"), "says what to do: {err}");
    assert_eq!(partition_bytes(dir.path(), &tp), before, "nothing changed");

    let mut forced = args.to_vec();
    forced.push("--force");
    let (code, out, err) = common::run_kafkalog(&forced);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("log end offset 50 -> 20"), "{out}");
}

#[test]
fn truncate_says_which_batch_boundary_it_cuts_at_before_cutting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tp = orders_log(dir.path());
    let before = partition_bytes(dir.path(), &tp);
    let args = [
        "truncate",
        "--log-dir",
        s(dir.path()),
        "--topic",
        "orders",
        "--partition",
        "0",
        "--to",
        "15",
    ];
    // Without --yes: the cut is printed, nothing changes, exit 2.
    let (code, out, err) = common::run_kafkalog(&args);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains(
            "offset 15 is inside batch 10..19, so the cut is at its batch boundary 10: 4 batches"
        ),
        "{out}"
    );
    assert!(err.contains("pass --yes"), "{err}");
    assert_eq!(partition_bytes(dir.path(), &tp), before, "nothing changed");
    let mut yes = args.to_vec();
    yes.push("--yes");
    let (code, out, err) = common::run_kafkalog(&yes);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("batch boundary 10"), "{out}");
    assert!(out.contains("log end offset 50 -> 10"), "{out}");
}

#[test]
fn commands_on_a_mistyped_log_dir_fail_and_create_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-dir");
    for args in [
        vec!["verify", "--log-dir", s(&missing)],
        vec![
            "truncate",
            "--log-dir",
            s(&missing),
            "--topic",
            "orders",
            "--partition",
            "0",
            "--to",
            "0",
            "--yes",
        ],
    ] {
        let (code, _, err) = common::run_kafkalog(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("does not exist"), "{err}");
        assert!(!missing.exists(), "{args:?} created the dir");
    }
}

#[test]
fn verify_says_so_when_there_is_nothing_to_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = common::run_kafkalog(&["verify", "--log-dir", s(dir.path())]);
    assert_eq!(code, 2, "an empty dir is not ok: {out}");
    assert!(err.contains("no partitions in"), "{err}");
    assert!(!out.contains("ok"), "{out}");

    let tp = orders_log(dir.path());
    let partition_dir = dir.path().join(tp.dir_name());
    let (code, out, err) = common::run_kafkalog(&["verify", "--log-dir", s(&partition_dir)]);
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("is a partition dir"), "{err}");
    assert!(err.contains("pass its parent"), "{err}");
    let (code, out, err) = common::run_kafkalog(&["verify", "--log-dir", s(dir.path())]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("ok: 1 partitions"), "{out}");
}

#[test]
fn help_has_examples_that_paste_and_shows_defaults() {
    for sub in [
        &["--help"][..],
        &["dump", "--help"],
        &["verify", "--help"],
        &["compare", "--help"],
        &["produce", "--help"],
        &["truncate", "--help"],
    ] {
        let (code, out, err) = common::run_kafkalog(sub);
        assert_eq!(code, 0, "{sub:?}: {err}");
        let examples: Vec<&str> = out
            .split("Examples:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{sub:?} has no examples: {out}"))
            .lines()
            .take_while(|l| !l.is_empty())
            .collect();
        assert!(!examples.is_empty(), "{sub:?}");
        for line in examples {
            assert!(
                line.starts_with("  kafkalog ")
                    || (line.starts_with("  ") && line.contains("| kafkalog ")),
                "{sub:?}: an example line is wrapped or not a command: {line:?}"
            );
        }
    }
    let (_, out, _) = common::run_kafkalog(&["produce", "--help"]);
    for default in [
        "[default: 1GiB]",
        "[default: 100]",
        "[default: always]",
        "[default: none]",
    ] {
        assert!(
            out.contains(default),
            "produce --help lacks {default}: {out}"
        );
    }
}

#[test]
fn produce_takes_the_segment_size_with_a_unit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input: String = (0..2000)
        .map(|i| format!("k{i}\t{}\n", "v".repeat(100)))
        .collect();
    let (code, out, err) = common::run_kafkalog_with_input(
        &[
            "produce",
            "--log-dir",
            s(dir.path()),
            "--topic",
            "orders",
            "--partition",
            "0",
            "--segment-bytes",
            "64KiB",
            "--fsync",
            "on-roll",
        ],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let segments = std::fs::read_dir(dir.path().join("orders-0"))
        .expect("partition dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
        })
        .count();
    // About 240 KB of records in 64 KiB segments.
    assert!((3..=6).contains(&segments), "{segments} segments");
    let (code, _, err) = common::run_kafkalog(&[
        "produce",
        "--log-dir",
        s(dir.path()),
        "--topic",
        "orders",
        "--partition",
        "0",
        "--segment-bytes",
        "64 parsecs",
    ]);
    assert_eq!(code, 2, "a usage error: {err}");
    assert!(err.contains("--segment-bytes"), "{err}");
}
