//! Proof of restorability (issue 26, deliverable 3), with the real
//! `applier` binary: `applier verify` names each damaged batch (file, byte,
//! offset) and exits 1; the scrub of `applier run` finds the damage within
//! one budget period and fails the mirror; `applier start` repairs it from
//! the bucket until the mirror is identical to the source; a STOPPED
//! partition is never failed and `applier repair` keeps its local writes;
//! a segment retention deletes while it is read is not reported; a flipped
//! byte in a bucket object is named by its key.

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{SOURCE, file_bucket, produce, publish, topic_id, tp};
use kafkalog::compare::{Comparison, compare_partition};
use kafkalog::segment;
use kafkalog::{LogConfig, LogDir, TopicPartition};

fn applier(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(args)
        .env("RUST_LOG", "error")
        .env_remove("SEGMIRROR_SCRUB_BYTES_PER_HOUR")
        .output()
        .expect("run applier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

struct World {
    _tmp: tempfile::TempDir,
    source: PathBuf,
    dest: PathBuf,
    bucket: String,
    bucket_dir: PathBuf,
}

impl World {
    fn dest_str(&self) -> &str {
        self.dest.to_str().expect("utf-8")
    }

    fn args<'a>(&'a self, cmd: &'a str) -> Vec<&'a str> {
        vec![
            cmd,
            "--log-dir",
            self.dest_str(),
            "--bucket",
            &self.bucket,
            "--source-cluster-id",
            SOURCE,
        ]
    }
}

/// A source `orders` of 200 records in ~4 KiB segments at epochs 3 then
/// 5, shipped, and mirrored by `applier once`.
async fn mirrored() -> World {
    mirrored_with(4096, 120, 80).await
}

/// A new partition `orders` in `root` rolling at `segment_bytes`.
fn new_partition(root: &Path, segment_bytes: u64) -> (LogDir, kafkalog::PartitionLog) {
    let d = LogDir::open(root).expect("log dir");
    let cfg = LogConfig {
        segment_bytes,
        ..LogConfig::default()
    };
    let log = d
        .open_or_create_partition(&tp("orders"), Some(topic_id()), cfg)
        .expect("create");
    (d, log)
}

/// [`mirrored`] with `segment_bytes` segments, `a` records at epoch 3
/// then `b` at epoch 5.
async fn mirrored_with(segment_bytes: u64, a: usize, b: usize) -> World {
    let tmp = tempfile::tempdir().expect("tmp");
    let source = tmp.path().join("source");
    let dest = tmp.path().join("dest");
    let bucket_dir = tmp.path().join("bucket");
    let (bucket, store) = file_bucket(&bucket_dir);
    {
        let (_d, mut log) = new_partition(&source, segment_bytes);
        produce(&mut log, a, 3);
        produce(&mut log, b, 5);
        log.close().expect("close");
    }
    publish(&store, &source, &tp("orders"), "u1").await;
    let w = World {
        _tmp: tmp,
        source,
        dest,
        bucket,
        bucket_dir,
    };
    let mut args = w.args("once");
    args.extend(["--topics", "orders"]);
    let (code, out) = applier(&args);
    assert_eq!(code, 0, "{out}");
    assert_eq!(compare(&w), Comparison::Identical);
    let (code, out) = applier(&["verify", "--log-dir", w.dest_str()]);
    assert_eq!(code, 0, "a fresh mirror verifies clean: {out}");
    w
}

/// The data objects in the bucket, sorted.
fn data_objects(w: &World) -> Vec<PathBuf> {
    let mut objects: Vec<PathBuf> = Vec::new();
    let mut stack = vec![w.bucket_dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("list") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().contains("/data/") {
                objects.push(p);
            }
        }
    }
    objects.sort();
    objects
}

fn compare(w: &World) -> Comparison {
    compare_partition(&w.source, &w.dest, &tp("orders")).expect("compare")
}

/// Every batch of the mirror: (segment file, byte position, base offset).
fn batches(root: &Path, t: &TopicPartition) -> Vec<(PathBuf, u64, i64)> {
    let dir = root.join(t.dir_name());
    let mut out = Vec::new();
    for base in segment::list_segments(&dir).expect("segments") {
        let path = segment::file_path(&dir, base, segment::LOG_SUFFIX);
        segment::scan(&path, 0, true, |h, _| {
            out.push((path.clone(), h.position, h.base_offset));
            ControlFlow::Continue(())
        })
        .expect("scan");
    }
    out
}

fn flip(path: &Path, at: u64, mask: u8) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at as usize] ^= mask;
    std::fs::write(path, bytes).expect("write");
}

/// How `verify` names a place.
fn named(path: &Path, position: u64, offset: i64) -> String {
    format!("{} at byte {position} (offset {offset})", path.display())
}

/// The batch that is the `k`th of its segment, for the `n`th segment
/// holding more than two batches.
fn middle_batch(all: &[(PathBuf, u64, i64)], n: usize) -> (PathBuf, u64, i64) {
    let mut segs: Vec<&PathBuf> = all.iter().map(|b| &b.0).collect();
    segs.dedup();
    let full: Vec<&PathBuf> = segs
        .into_iter()
        .filter(|s| all.iter().filter(|b| &b.0 == *s).count() > 2)
        .collect();
    let seg = full[n];
    all.iter()
        .filter(|b| &b.0 == seg)
        .nth(1)
        .cloned()
        .expect("a middle batch")
}

/// Damage: a record byte (CRC), a base offset byte and a leader epoch
/// byte (both outside the CRC), each in another segment. Returns how
/// `verify` must name each.
fn damage(w: &World) -> Vec<String> {
    let all = batches(&w.dest, &tp("orders"));
    let (p1, pos1, o1) = middle_batch(&all, 0);
    // Inside the records (after the 61-byte header): the CRC breaks.
    flip(&p1, pos1 + 61 + 20, 0x55);
    let (p2, pos2, o2) = middle_batch(&all, 1);
    // The base offset's second lowest byte: it jumps by 256.
    flip(&p2, pos2 + 6, 0x01);
    let (p3, pos3, o3) = middle_batch(&all, 2);
    // The partition leader epoch (bytes 12..16): 3 becomes 2.
    flip(&p3, pos3 + 15, 0x01);
    vec![
        named(&p1, pos1, o1),
        named(&p2, pos2, o2),
        named(&p3, pos3, o3),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_each_damaged_batch_and_exits_1() {
    let w = mirrored().await;
    let expected = damage(&w);
    let (code, out) = applier(&["verify", "--log-dir", w.dest_str()]);
    assert_eq!(code, 1, "{out}");
    for place in &expected {
        assert!(out.contains(place), "verify names {place}:\n{out}");
    }
    let lines = out.lines().filter(|l| l.starts_with("MISMATCH")).count();
    assert_eq!(lines, 3, "one line per damage, no cascade:\n{out}");
    assert!(out.contains("checked 1 partitions"), "summary line: {out}");
    // JSON names the same places.
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(["verify", "--log-dir", w.dest_str(), "--json"])
        .output()
        .expect("run applier");
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json on stdout");
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains("DAMAGED: checked 1 partitions"),
        "{summary}"
    );
    assert_eq!(v["clean"], false);
    assert_eq!(v["mismatches"].as_array().map(Vec::len), Some(3));
    // Status shows when and what, with no daemon.
    let (code, status) = applier(&["status", "--log-dir", w.dest_str()]);
    assert_eq!(code, 0);
    assert!(status.contains("last verified"), "{status}");
    assert!(status.contains("DAMAGE: 3 local mismatches"), "{status}");
    // Usage errors are 2.
    let (code, _) = applier(&["verify", "--log-dir", w.dest_str(), "--topic", "x", "--all"]);
    assert_eq!(code, 2);
    let (code, _) = applier(&["verify", "--log-dir", "/nonexistent/dir"]);
    assert_eq!(code, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_cuts_the_damage_of_a_mirror_and_fetches_it_again_until_identical() {
    let w = mirrored().await;
    let expected = damage(&w);
    let (code, _) = applier(&["verify", "--log-dir", w.dest_str()]);
    assert_eq!(code, 1);
    // The next applier to open the log dir fails the mirror, naming the
    // file and offset.
    let mut once = w.args("once");
    once.extend(["--topics", "orders"]);
    let (code, out) = applier(&once);
    assert_eq!(code, 1, "{out}");
    let (_, status) = applier(&["status", "--log-dir", w.dest_str(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&status).expect("json");
    let row = &v["partitions"][0];
    assert_eq!(row["state"], "FAILED", "{status}");
    assert_eq!(row["retryable"], false);
    let error = row["last_error"].as_str().expect("error");
    assert!(error.contains("local log damaged"), "{error}");
    assert!(
        expected.iter().any(|p| error.contains(p)),
        "the error names a damaged place: {error}"
    );
    // `plan` says what start will do.
    let (code, plan) = applier(&w.args("plan"));
    assert_eq!(code, 0, "{plan}");
    let first_cut = expected
        .iter()
        .map(|p| {
            p.rsplit_once("(offset ")
                .and_then(|(_, o)| o.trim_end_matches(')').parse::<i64>().ok())
                .expect("offset")
        })
        .min()
        .expect("a cut");
    assert!(
        plan.contains(&format!(
            "cut the recorded local damage back to {first_cut}"
        )),
        "{plan}"
    );
    // start: cut to the first damage, fetch the rest again.
    let mut start = w.args("start");
    start.extend(["--topic", "orders"]);
    let (code, out) = applier(&start);
    assert_eq!(code, 0, "{out}");
    let (code, out) = applier(&once);
    assert_eq!(code, 0, "{out}");
    assert_eq!(compare(&w), Comparison::Identical, "kafkalog compare");
    let (code, out) = applier(&["verify", "--log-dir", w.dest_str()]);
    assert_eq!(code, 0, "{out}");
    let (_, status) = applier(&["status", "--log-dir", w.dest_str()]);
    assert!(!status.contains("DAMAGE"), "{status}");
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_daemon(w: &World, bytes_per_hour: &str) -> Daemon {
    let mut args = w.args("run");
    args.extend(["--topics", "orders", "--poll-interval", "100ms"]);
    args.extend(["--scrub-bytes-per-hour", bytes_per_hour]);
    Daemon(
        Command::new(env!("CARGO_BIN_EXE_applier"))
            .args(&args)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn"),
    )
}

fn log_bytes(w: &World) -> u64 {
    let dir = w.dest.join(tp("orders").dir_name());
    segment::list_segments(&dir)
        .expect("segments")
        .iter()
        .map(|b| {
            std::fs::metadata(segment::file_path(&dir, *b, segment::LOG_SUFFIX))
                .expect("stat")
                .len()
        })
        .sum()
}

fn status_json(w: &World) -> serde_json::Value {
    let (_, s) = applier(&["status", "--log-dir", w.dest_str(), "--json"]);
    serde_json::from_str(&s).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrub_of_run_finds_the_damage_within_one_budget_period_and_fails_the_mirror() {
    let w = mirrored().await;
    let expected = damage(&w);
    // And every object in the bucket: the scrub's sample after its pass
    // finds one whichever it picks.
    let objects = data_objects(&w);
    for o in &objects {
        flip(o, 70, 0x08);
    }
    // A budget that reads the whole log in about 2 s.
    let per_hour = log_bytes(&w) * 3600 / 2;
    let period = Duration::from_secs(2);
    let started = Instant::now();
    let _d = run_daemon(&w, &per_hour.to_string());
    let failed = loop {
        let v = status_json(&w);
        if v["partitions"][0]["state"] == "FAILED" {
            break v;
        }
        assert!(
            started.elapsed() < period + Duration::from_secs(3),
            "not found within one budget period: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "scrub: FAILED after {:?} (budget period {period:?}, {} log bytes)",
        started.elapsed(),
        log_bytes(&w)
    );
    let error = failed["partitions"][0]["last_error"]
        .as_str()
        .expect("error");
    assert!(error.contains("local log damaged"), "{error}");
    // The whole pass records every damage, and when it completed.
    let deadline = started + period + Duration::from_secs(3);
    loop {
        let v = status_json(&w);
        let damage = v["verify"]["damage"].as_array().map_or(0, Vec::len);
        if damage == 3 && v["verify"]["last_complete_pass_ms"].is_i64() {
            let bad = v["verify"]["object_damage"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if bad.is_empty() {
                // Sampled just after the pass was recorded.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            for m in &bad {
                let key = m["key"].as_str().expect("an object key");
                assert!(
                    objects.iter().any(|o| o.ends_with(key)),
                    "{key} is a bucket object"
                );
            }
            assert_eq!(
                v["partitions"][0]["state"], "FAILED",
                "by the local damage only"
            );
            let text = serde_json::to_string(&v["verify"]).expect("text");
            for place in &expected {
                let (path, rest) = place.split_once(" at byte ").expect("place");
                assert!(text.contains(path), "{path} in {text}");
                let pos = rest.split_once(' ').expect("pos").0;
                assert!(
                    text.contains(&format!("\"position\":{pos}")),
                    "{pos} in {text}"
                );
            }
            break;
        }
        assert!(Instant::now() < deadline, "pass not recorded: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops the mirror, then writes `n` records locally at the stop epoch.
/// Returns the log end before and after the local writes.
fn stop_and_write(w: &World, n: usize) -> (i64, i64) {
    // stop takes no bucket: it acts on the local log alone.
    let (code, out) = applier(&["stop", "--log-dir", w.dest_str(), "--topic", "orders"]);
    assert_eq!(code, 0, "{out}");
    let d = LogDir::open(&w.dest).expect("dest");
    let mut log = d
        .open_partition(&tp("orders"), LogConfig::default())
        .expect("open");
    let stopped = log.log_end_offset();
    let epoch = log.epochs().latest_epoch().expect("an epoch");
    produce(&mut log, n, epoch);
    let end = log.log_end_offset();
    log.close().expect("close");
    (stopped, end)
}

/// The batches at or above `from`, as bytes.
fn bytes_from(w: &World, from: i64) -> Vec<u8> {
    let reader = kafkalog::reader::PartitionReader::open(&w.dest, &tp("orders")).expect("reader");
    let mut out = Vec::new();
    reader
        .for_each_batch(from, true, |h, b| {
            if h.base_offset >= from {
                out.extend_from_slice(b);
            }
            ControlFlow::Continue(())
        })
        .expect("read");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_partition_is_reported_never_failed_and_repair_keeps_its_local_writes() {
    let w = mirrored().await;
    let (stopped, end) = stop_and_write(&w, 30);
    assert!(end > stopped);
    let local = bytes_from(&w, stopped);
    assert!(!local.is_empty());
    // Damage a record byte below the stop point (a rolled segment).
    let all = batches(&w.dest, &tp("orders"));
    let (path, pos, offset) = middle_batch(&all, 1);
    flip(&path, pos + 61 + 20, 0x55);
    let place = named(&path, pos, offset);

    let per_hour = log_bytes(&w) * 3600 / 2;
    {
        let _d = run_daemon(&w, &per_hour.to_string());
        let started = Instant::now();
        loop {
            let v = status_json(&w);
            let found = v["verify"]["damage"].as_array().map_or(0, Vec::len) == 1
                && v["verify"]["last_complete_pass_ms"].is_i64();
            if found {
                assert_eq!(v["partitions"][0]["state"], "STOPPED", "never failed: {v}");
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(12),
                "not reported: {v}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let (_, status) = applier(&["status", "--log-dir", w.dest_str()]);
        assert!(status.contains("DAMAGE: 1 local mismatches"), "{status}");
        assert!(status.contains(&place), "{status}");
    }
    assert_eq!(
        bytes_from(&w, stopped),
        local,
        "the scrub changed no local write"
    );
    let (code, out) = applier(&["verify", "--log-dir", w.dest_str()]);
    assert_eq!(code, 1, "verify's exit code reports it: {out}");
    assert!(out.contains(&place), "{out}");

    // Repair: the damaged segment is replaced from the bucket.
    let repair = [
        "repair",
        "--log-dir",
        w.dest_str(),
        "--bucket",
        &w.bucket,
        "--topic",
        "orders",
        "--partition",
        "0",
    ];
    let (code, out) = applier(&repair);
    assert_eq!(code, 0, "{out}");
    let (code, out) = applier(&["verify", "--log-dir", w.dest_str()]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        bytes_from(&w, stopped),
        local,
        "the local writes are all there"
    );
    let last = kafkalog::reader::PartitionReader::open(&w.dest, &tp("orders"))
        .expect("reader")
        .for_each_batch(0, true, |_, _| ControlFlow::Continue(()))
        .expect("read all");
    assert_eq!(last, end);
    // The mirrored part is the source's again.
    let dir = w.dest.join(tp("orders").dir_name());
    let src = w.source.join(tp("orders").dir_name());
    let name = path.file_name().expect("name");
    assert_eq!(
        std::fs::read(dir.join(name)).expect("repaired"),
        std::fs::read(src.join(name)).expect("source"),
        "the repaired segment is the source's"
    );

    // Damage in the active segment (it holds the local writes): refused,
    // nothing changed.
    let all = batches(&w.dest, &tp("orders"));
    let (apath, apos, _) = all.last().cloned().expect("last batch");
    flip(&apath, apos + 61 + 5, 0x55);
    let before = std::fs::read(&apath).expect("read");
    let (code, out) = applier(&repair);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("active segment"), "{out}");
    assert_eq!(
        std::fs::read(&apath).expect("read"),
        before,
        "refused: unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_that_retention_deletes_while_it_is_read_is_not_reported() {
    let w = mirrored().await;
    let t = tp("orders");
    let segments = segment::list_segments(&w.dest.join(t.dir_name())).expect("segments");
    assert!(segments.len() > 4);
    let mut scan = applier::verify::PartitionScan::new(&w.dest, &t, None, 0).expect("scan");
    // Read part of the first segment, then retention deletes it and the
    // next one (as the applier raises the log start after the source's).
    let end = scan.step(200, &mut |_| {}).expect("slice");
    assert_eq!(end, applier::verify::SliceEnd::More);
    {
        let d = LogDir::open(&w.dest).expect("dest");
        let mut log = d.open_partition(&t, LogConfig::default()).expect("open");
        let deleted = log.raise_log_start(segments[2]).expect("retention");
        assert_eq!(deleted, segments[..2].to_vec());
        log.close().expect("close");
    }
    while scan.step(1000, &mut |_| {}).expect("slice") == applier::verify::SliceEnd::More {}
    assert!(
        scan.mismatches.is_empty(),
        "nothing reported: {:?}",
        scan.mismatches
    );
    assert_eq!(
        scan.counts.skipped_segments, 1,
        "the one being read is skipped"
    );
    assert_eq!(scan.counts.segments as usize, segments.len() - 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_a_bucket_object_is_named_by_its_key() {
    let w = mirrored().await;
    let objects = data_objects(&w);
    assert!(objects.len() > 2, "{objects:?}");
    let victim = &objects[1];
    flip(victim, 70, 0x08);
    let key = victim
        .strip_prefix(&w.bucket_dir)
        .expect("in bucket")
        .to_string_lossy()
        .into_owned();
    let mut args = w.args("verify");
    args.extend(["--sample-objects", "100%"]);
    let (code, out) = applier(&args);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("object {key}")),
        "names {key}:\n{out}"
    );
    assert!(out.contains("CRC-32C"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("MISMATCH")).count(),
        1,
        "{out}"
    );
    // The local log is clean: only the bucket is reported.
    let (code, out) = applier(&["verify", "--log-dir", w.dest_str()]);
    assert_eq!(code, 0, "{out}");
}

/// Every byte of one segment flipped one at a time (XOR 0x01; the batch
/// headers also with 0x80 and 0xff): each flip is found, and named at the
/// flipped batch (file and byte position).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flipped_byte_of_a_segment_is_found_at_its_batch() {
    let w = mirrored().await;
    let t = tp("orders");
    let all = batches(&w.dest, &t);
    let (seg, _, _) = middle_batch(&all, 1);
    let in_seg: Vec<(u64, i64)> = all
        .iter()
        .filter(|b| b.0 == seg)
        .map(|b| (b.1, b.2))
        .collect();
    let size = std::fs::metadata(&seg).expect("stat").len();
    let original = std::fs::read(&seg).expect("read");
    let (mut flips, mut found, mut named) = (0u64, 0u64, 0u64);
    let mut missed = Vec::new();
    for (i, &(pos, _)) in in_seg.iter().enumerate() {
        let end = in_seg.get(i + 1).map_or(size, |n| n.0);
        for at in pos..end {
            let masks: &[u8] = if at < pos + 61 {
                &[0x01, 0x80, 0xff]
            } else {
                &[0x01]
            };
            for &mask in masks {
                let mut bytes = original.clone();
                bytes[at as usize] ^= mask;
                std::fs::write(&seg, &bytes).expect("write");
                let scan =
                    applier::verify::PartitionScan::run_whole(&w.dest, &t, None, 0, &mut |_| {})
                        .expect("scan");
                flips += 1;
                if scan.mismatches.is_empty() {
                    missed.push((at, mask));
                    continue;
                }
                found += 1;
                if scan
                    .mismatches
                    .iter()
                    .any(|m| m.path.as_deref() == Some(seg.as_path()) && m.position == Some(pos))
                {
                    named += 1;
                }
            }
        }
    }
    std::fs::write(&seg, &original).expect("restore");
    eprintln!("local flips: {flips}, found {found}, named at their batch {named}");
    assert!(missed.is_empty(), "missed flips (byte, mask): {missed:?}");
    assert_eq!(named, flips, "every flip named at its batch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_refuses_to_cut_a_damage_the_bucket_no_longer_holds() {
    let w = mirrored().await;
    let t = tp("orders");
    let all = batches(&w.dest, &t);
    let (path, pos, offset) = middle_batch(&all, 0);
    flip(&path, pos + 61 + 20, 0x55);
    let (code, _) = applier(&["verify", "--log-dir", w.dest_str()]);
    assert_eq!(code, 1);
    // The source's retention passes the damage; the bucket's log start
    // with it.
    let segments = segment::list_segments(&w.source.join(t.dir_name())).expect("segments");
    {
        let d = LogDir::open(&w.source).expect("source");
        let mut log = d.open_partition(&t, LogConfig::default()).expect("open");
        log.raise_log_start(segments[2]).expect("retention");
        log.close().expect("close");
    }
    let (_, store) = file_bucket(&w.bucket_dir);
    publish(&store, &w.source, &t, "u2").await;
    let end_before = kafkalog::reader::PartitionReader::open(&w.dest, &t)
        .expect("reader")
        .for_each_batch(0, false, |_, _| ControlFlow::Continue(()))
        .expect("read");
    let mut start = w.args("start");
    start.extend(["--topic", "orders"]);
    let _ = applier(&start);
    let mut once = w.args("once");
    once.extend(["--topics", "orders"]);
    let (code, out) = applier(&once);
    assert_eq!(code, 1, "{out}");
    let v = status_json(&w);
    let row = &v["partitions"][0];
    assert_eq!(row["state"], "FAILED", "{v}");
    let error = row["last_error"].as_str().expect("error");
    assert!(
        error.contains(&format!("the damage starts at offset {offset}"))
            && error.contains("no longer in the bucket"),
        "{error}"
    );
    let end_after = kafkalog::reader::PartitionReader::open(&w.dest, &t)
        .expect("reader")
        .for_each_batch(0, false, |_, _| ControlFlow::Continue(()))
        .expect("read");
    assert_eq!(end_after, end_before, "nothing cut");
}

/// Batches a compaction dropped whole leave gaps that the next batch
/// continues: not damage, in the local log or against the manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gaps_compaction_leaves_are_not_reported() {
    use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
    let tmp = tempfile::tempdir().expect("tmp");
    let source = tmp.path().join("source");
    let dest = tmp.path().join("dest");
    let (bucket, store) = file_bucket(&tmp.path().join("bucket"));
    let t = tp("orders");
    {
        let (_d, mut log) = new_partition(&source, 2048);
        // Offsets 0-9, 30-39, 70-79, 80-89, 120-129, ...: whole batches
        // gone between them, some across segments.
        let mut bytes = Vec::new();
        for base in [0i64, 30, 70, 80, 120, 130, 200] {
            let n = 10;
            let recs: Vec<RecordInput> = (0..n)
                .map(|i| RecordInput {
                    timestamp: 1_700_000_000_000 + base + i,
                    key: Some(format!("k{}", base + i).into_bytes()),
                    value: Some(vec![b'v'; 100]),
                    headers: vec![],
                })
                .collect();
            bytes.extend(build_batch(&BatchSpec::new(base, 2), &recs).expect("batch"));
        }
        log.append_replicated(&bytes).expect("append with gaps");
        log.close().expect("close");
    }
    publish(&store, &source, &t, "u1").await;
    let dest_s = dest.to_str().expect("utf-8");
    let (code, out) = applier(&[
        "once",
        "--log-dir",
        dest_s,
        "--bucket",
        &bucket,
        "--source-cluster-id",
        SOURCE,
        "--topics",
        "orders",
    ]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = applier(&[
        "verify",
        "--log-dir",
        dest_s,
        "--bucket",
        &bucket,
        "--source-cluster-id",
        SOURCE,
        "--sample-objects",
        "100%",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("checked 1 partitions"), "{out}");
    assert!(out.contains(" 7 batches"), "{out}");
}

/// A new leader epoch appended while a scan is under way (the scrub reads
/// in slices between the applier's appends) is not taken for damage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_appended_during_a_scan_is_not_damage() {
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tp("orders");
    let (_d, mut log) = new_partition(tmp.path(), 4096);
    produce(&mut log, 100, 3);
    log.flush().expect("flush");
    let mut scan = applier::verify::PartitionScan::new(tmp.path(), &t, None, 0).expect("scan");
    assert_eq!(
        scan.step(1000, &mut |_| {}).expect("slice"),
        applier::verify::SliceEnd::More
    );
    produce(&mut log, 100, 4);
    produce(&mut log, 50, 6);
    log.flush().expect("flush");
    while scan.step(1000, &mut |_| {}).expect("slice") == applier::verify::SliceEnd::More {}
    assert!(scan.mismatches.is_empty(), "{:?}", scan.mismatches);
    assert_eq!(scan.counts.batches, 25);
}

/// Index flips, measured (printed; the offset index's position fields are
/// asserted): one segment's `.index` and `.timeindex`, every byte XOR 0x01.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_index_bytes_are_counted() {
    // 64 KiB segments: several offset index entries each (one per 4 KiB).
    let w = mirrored_with(64 << 10, 600, 400).await;
    let t = tp("orders");
    let all = batches(&w.dest, &t);
    let (seg, _, _) = middle_batch(&all, 0);
    let mut position_missed = Vec::new();
    for suffix in [segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX] {
        let path = seg.with_extension(suffix.trim_start_matches('.'));
        let original = std::fs::read(&path).expect("index");
        let (mut flips, mut found) = (0, 0);
        for at in 0..original.len() {
            let mut bytes = original.clone();
            bytes[at] ^= 0x01;
            std::fs::write(&path, &bytes).expect("write");
            let scan = applier::verify::PartitionScan::run_whole(&w.dest, &t, None, 0, &mut |_| {})
                .expect("scan");
            flips += 1;
            if scan.mismatches.is_empty() {
                // Offset index entries: 4 bytes of relative offset, then 4
                // of position.
                if suffix == segment::INDEX_SUFFIX && at % 8 >= 4 {
                    position_missed.push(at);
                }
            } else {
                found += 1;
            }
        }
        std::fs::write(&path, &original).expect("restore");
        eprintln!("{suffix}: {flips} flips, {found} found");
    }
    assert!(position_missed.is_empty(), "{position_missed:?}");
}
