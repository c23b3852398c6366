//! The applier's guards, through the binary (issue 27): no command
//! destroys data it was not asked to.
//!
//! - `--cluster-id` equal to `--source-cluster-id` is a mirror loop: exit 2
//!   on every command that takes both.
//! - A plain partition holding records the source never shipped is not
//!   made a mirror by `once --topics`, `run --topics` or `start` without
//!   `--allow-truncate`: refused (exit 1, the offsets named, `run` logs it
//!   and `status` shows it), the log byte for byte as it was; `plan` shows
//!   the same cut. With the flag it proceeds.
//! - `start` on a STOPPED partition with local writes (resuming the same
//!   source cuts them) needs the same flag; `status` shows the writes.
//! - A log dir whose `.lock` a running broker holds (an fcntl record
//!   lock, as Java's `FileChannel.tryLock` takes it) is refused; once the
//!   holder is gone, the same command works (failback onto the old
//!   primary's own dir).
//! - Re-pinning a PREPARING partition to another source replaces what the
//!   first pin wrote (its topic id) and mirrors the new source.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bucket::store::ManifestStore;
use common::{SOURCE, file_bucket, produce, publish, tp};
use kafkalog::compare::{Comparison, compare_partition};
use kafkalog::{LogConfig, LogDir, TopicId};

fn applier(args: &[&str]) -> (i32, String) {
    common::run_applier(env!("CARGO_BIN_EXE_applier"), args)
}

/// `applier CMD --log-dir LOG --bucket BUCKET --source-cluster-id SOURCE EXTRA...`
fn on(cmd: &str, log: &Path, bucket: &str, source: &str, extra: &[&str]) -> (i32, String) {
    let args: Vec<&str> = [
        cmd,
        "--log-dir",
        s(log),
        "--bucket",
        bucket,
        "--source-cluster-id",
        source,
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    applier(&args)
}

/// `text`, a status row or a plan row's field, says `needle`.
fn says(value: &serde_json::Value, needle: &str) -> bool {
    value.as_str().is_some_and(|v| v.contains(needle))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

/// `n` records appended to `orders-0` of `dir` with topic id `id`, at the
/// log's latest epoch (0 for a new log).
fn produce_into(dir: &Path, id: TopicId, n: usize) {
    let d = LogDir::open(dir).expect("log dir");
    let mut log = d
        .open_or_create_partition(&tp("orders"), Some(id), LogConfig::default())
        .expect("partition");
    let epoch = log.epochs().latest_epoch().unwrap_or(0);
    produce(&mut log, n, epoch);
    log.close().expect("close");
}

/// A copy of `dir` (every file), to compare with after a refusal.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

/// Every file of `dir` with its bytes, by name.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect();
    out.sort();
    out
}

/// The partition is as it was: the same batches and lineage as the copy
/// (`kafkalog compare`), the same files byte for byte, and still no mirror
/// record or write guard.
fn assert_intact(copy: &Path, dir: &Path, context: &str) {
    assert!(
        files(&copy.join("orders-0")) == files(&dir.join("orders-0")),
        "{context}: a file of the partition changed"
    );
    assert_eq!(
        compare_partition(copy, dir, &tp("orders")).expect("compare"),
        Comparison::Identical,
        "{context}: the log changed"
    );
    let pdir = dir.join("orders-0");
    assert_eq!(
        partdir::record::read(&pdir)
            .expect("record")
            .map(|r| r.state.state()),
        partdir::record::read(&copy.join("orders-0"))
            .expect("record")
            .map(|r| r.state.state()),
        "{context}: the mirror state changed"
    );
    assert_eq!(
        pdir.join(kafkalog::guard::GUARD_FILE).exists(),
        copy.join("orders-0")
            .join(kafkalog::guard::GUARD_FILE)
            .exists(),
        "{context}: the write guard changed"
    );
}

fn status_json(dir: &Path) -> serde_json::Value {
    let (code, out) = applier(&["status", "--log-dir", s(dir), "--json"]);
    assert_eq!(code, 0, "{out}");
    serde_json::from_str(out.lines().last().expect("a line")).expect("json")
}

fn orders_row(status: &serde_json::Value) -> serde_json::Value {
    status["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .find(|p| p["topic"] == "orders")
        .cloned()
        .unwrap_or_else(|| panic!("no orders row in {status}"))
}

fn log_end(dir: &Path) -> i64 {
    let r = kafkalog::reader::PartitionReader::open(dir, &tp("orders")).expect("reader");
    let last = r
        .segments()
        .expect("segments")
        .last()
        .map_or(0, |s| s.base_offset);
    r.for_each_batch(last, false, |_, _| std::ops::ControlFlow::Continue(()))
        .expect("scan")
}

/// [`source_ahead_of_its_bucket`] in a fresh dir (kept alive by the
/// first value), with a copy of the source taken before anything runs.
async fn ahead_with_a_copy() -> (tempfile::TempDir, PathBuf, String, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, bucket) = source_ahead_of_its_bucket(dir.path()).await;
    let before = dir.path().join("before");
    copy_dir(&source, &before);
    (dir, source, bucket, before)
}

/// In `root`: `source` (100 records, shipped to `root/bucket`), `dest`
/// mirroring it through the binary, stopped, then 3 records written there
/// (a drill). Returns source, dest and the bucket URL.
async fn stopped_with_local_writes(root: &Path) -> (PathBuf, PathBuf, String) {
    let source = root.join("source");
    let dest = root.join("dest");
    let (bucket, store) = file_bucket(&root.join("bucket"));
    produce_into(&source, common::topic_id(), 100);
    publish(&store, &source, &tp("orders"), "u1").await;
    let (code, out) = on("once", &dest, &bucket, SOURCE, &["--topics", ".*"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = applier(&["stop", "--log-dir", s(&dest), "--all"]);
    assert_eq!(code, 0, "{out}");
    produce_into(&dest, common::topic_id(), 3);
    (source, dest, bucket)
}

/// `applier run` on `log` (polling every 100 ms, logging at `level`, its
/// stderr piped), with `extra` flags.
fn spawn_run(log: &Path, bucket: &str, extra: &[&str], level: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_applier"))
        .args([
            "run",
            "--log-dir",
            s(log),
            "--bucket",
            bucket,
            "--source-cluster-id",
            SOURCE,
            "--poll-interval",
            "100ms",
        ])
        .args(extra)
        .env("RUST_LOG", level)
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn applier run")
}

/// A source log dir whose `orders-0` holds 150 records of which the first
/// 100 were shipped to a `file://` bucket (as the shipper would before its
/// next cycle). Returns the bucket URL.
async fn source_ahead_of_its_bucket(root: &Path) -> (PathBuf, String) {
    let source = root.join("source");
    let (url, store) = file_bucket(&root.join("bucket"));
    produce_into(&source, common::topic_id(), 100);
    publish(&store, &source, &tp("orders"), "u1").await;
    produce_into(&source, common::topic_id(), 50);
    (source, url)
}

#[test]
fn equal_cluster_ids_are_a_mirror_loop_refused_by_every_command_taking_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir_all(&log).expect("mkdir");
    let bucket = format!("file://{}", dir.path().display());
    let both = [
        "--log-dir",
        s(&log),
        "--bucket",
        &bucket,
        "--source-cluster-id",
        "src3",
        "--cluster-id",
        "src3",
    ];
    for cmd in [
        &["once", "--topics", ".*"][..],
        &["run", "--topics", ".*"],
        &["plan"],
        &["start", "--topic", "orders"],
        &["config", "check"],
    ] {
        let args: Vec<&str> = cmd.iter().chain(both.iter()).copied().collect();
        let (code, out) = applier(&args);
        assert_eq!(code, 2, "{cmd:?}: {out}");
        assert!(
            out.contains("--cluster-id \"src3\" equals --source-cluster-id \"src3\"")
                && out.contains("mirror loop"),
            "{cmd:?}: {out}"
        );
    }
    assert!(
        std::fs::read_dir(&log).expect("ls").next().is_none(),
        "nothing written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_partition_ahead_of_the_bucket_is_not_cut_without_allow_truncate() {
    let (_dir, source, bucket, before) = ahead_with_a_copy().await;
    let run = |cmd: &str, extra: &[&str]| on(cmd, &source, &bucket, SOURCE, extra);
    let cut = "offsets 100..149 (50 records) would be cut";

    // plan shows the cut and the refusal, table and JSON.
    let (code, out) = run("plan", &["--topics", ".*"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(cut) && out.contains("--allow-truncate"),
        "{out}"
    );
    let (code, out) = run("plan", &["--topics", ".*", "--json"]);
    assert_eq!(code, 0, "{out}");
    let plan: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    let row = &plan["partitions"][0];
    assert_eq!(row["cut"]["first_offset"], 100, "{row}");
    assert_eq!(row["cut"]["last_offset"], 149, "{row}");
    assert!(says(&row["refused"], cut), "{row}");

    // once --topics: refused, exit 1, named; the log as it was.
    let (code, out) = run("once", &["--topics", ".*"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("orders-0") && out.contains(cut) && out.contains("--allow-truncate"),
        "{out}"
    );
    assert_intact(&before, &source, "once");
    // ... and visible in status, not skipped.
    let row = orders_row(&status_json(&source));
    assert!(says(&row["last_error"], cut), "{row}");
    // The plain partition's own bounds, not zeros: it keeps its 150 records.
    assert_eq!(
        (&row["local_log_end_offset"], &row["writable"]),
        (&serde_json::json!(150), &serde_json::json!(true)),
        "{row}"
    );
    // start: refused the same way, exit 1.
    let (code, out) = run("start", &["--topic", "orders"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("orders-0: refused") && out.contains(cut),
        "{out}"
    );
    assert_intact(&before, &source, "start");

    // start --allow-truncate: PREPARING, the cut shown by status.
    let (code, out) = run("start", &["--topic", "orders", "--allow-truncate"]);
    assert_eq!(code, 0, "{out}");
    let row = orders_row(&status_json(&source));
    assert_eq!(row["state"], "PREPARING", "{row}");
    assert_eq!(row["cut"]["first_offset"], 100, "{row}");
    assert_eq!(row["cut"]["last_offset"], 149, "{row}");
    let (_, table) = applier(&["status", "--log-dir", s(&source)]);
    assert!(
        table.contains("CUT") && table.contains("100-149 (50)"),
        "{table}"
    );
    // The start's permission carries to the run that prepares it.
    let (code, out) = run("once", &[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(log_end(&source), 100, "cut back to what was shipped");
    let row = orders_row(&status_json(&source));
    assert_eq!(row["state"], "MIRRORING", "{row}");
    assert!(row["cut"].is_null(), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_with_allow_truncate_makes_the_plain_partition_a_mirror() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, bucket) = source_ahead_of_its_bucket(dir.path()).await;
    let (code, out) = on(
        "once",
        &source,
        &bucket,
        SOURCE,
        &["--topics", ".*", "--allow-truncate"],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(log_end(&source), 100);
    assert_eq!(orders_row(&status_json(&source))["state"], "MIRRORING");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_the_partition_loudly_and_shows_it_in_status() {
    let (_dir, source, bucket, before) = ahead_with_a_copy().await;
    let mut child = spawn_run(&source, &bucket, &["--topics", ".*"], "warn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut logged = None;
    while logged.is_none() && Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200))
            && line.contains("would be cut")
        {
            logged = Some(line);
        }
    }
    let mut shown = None;
    while shown.is_none() && Instant::now() < deadline {
        let row = orders_row(&status_json(&source));
        if says(&row["last_error"], "offsets 100..149") {
            shown = Some(row);
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    child.kill().expect("kill");
    child.wait().expect("wait");
    let logged = logged.expect("run logged the refusal");
    assert!(
        logged.contains("ERROR") && logged.contains("orders-0"),
        "{logged}"
    );
    assert!(shown.is_some(), "status shows the refused partition");
    assert_intact(&before, &source, "run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_on_a_stopped_partition_with_local_writes_needs_allow_truncate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, dest, bucket) = stopped_with_local_writes(dir.path()).await;
    let run = |cmd: &str, extra: &[&str]| on(cmd, &dest, &bucket, SOURCE, extra);
    assert_eq!(log_end(&dest), 103);
    let row = orders_row(&status_json(&dest));
    assert_eq!(row["state"], "STOPPED", "{row}");
    assert_eq!(row["cut"]["first_offset"], 100, "{row}");
    assert_eq!(row["cut"]["last_offset"], 102, "{row}");
    let (_, table) = applier(&["status", "--log-dir", s(&dest)]);
    assert!(table.contains("100-102 (3)"), "{table}");

    let before = dir.path().join("before");
    copy_dir(&dest, &before);
    let (code, out) = run("start", &["--topic", "orders"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("orders-0: refused")
            && out.contains("offsets 100..102 (3 records) would be cut")
            && out.contains("--allow-truncate"),
        "{out}"
    );
    assert_intact(&before, &dest, "start on STOPPED");
    assert_eq!(orders_row(&status_json(&dest))["state"], "STOPPED");
    // plan says the same.
    let (_, out) = run("plan", &[]);
    assert!(out.contains("offsets 100..102 (3 records)"), "{out}");

    let (code, out) = run("start", &["--topic", "orders", "--allow-truncate"]);
    assert_eq!(code, 0, "{out}");
    let row = orders_row(&status_json(&dest));
    assert_eq!(row["state"], "PREPARING", "{row}");
    assert_eq!(row["cut"]["first_offset"], 100, "{row}");
    let (code, out) = run("once", &[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(log_end(&dest), 100, "only the local writes were cut");
    assert_eq!(
        compare_partition(&source, &dest, &tp("orders")).expect("compare"),
        Comparison::Identical
    );
}

/// A python3 child holding an fcntl lock on `<dir>/.lock`, as a Kafka
/// broker does; `None` when python3 is skipped (`SEGMIRROR_SKIP_PYTHON=1`).
fn hold_fcntl_lock(dir: &Path) -> Option<std::process::Child> {
    if std::env::var("SEGMIRROR_SKIP_PYTHON").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED (SEGMIRROR_SKIP_PYTHON=1): the broker-lock test needs python3");
        return None;
    }
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import fcntl, sys, time\n\
             f = open(sys.argv[1], 'a+')\n\
             fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n\
             print('locked', flush=True)\n\
             time.sleep(120)\n",
            s(&dir.join(".lock")),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 is needed (or SEGMIRROR_SKIP_PYTHON=1): apt-get install python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "locked");
    Some(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_dir_a_running_broker_locks_is_refused_until_it_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    let (bucket, store) = file_bucket(&dir.path().join("bucket"));
    produce_into(&source, common::topic_id(), 100);
    publish(&store, &source, &tp("orders"), "u1").await;
    // The old primary's own dir: its meta.properties names --cluster-id.
    let old = dir.path().join("old-primary");
    std::fs::create_dir_all(&old).expect("mkdir");
    std::fs::write(
        old.join("meta.properties"),
        "version=1\ncluster.id=dst\nnode.id=1\n",
    )
    .expect("meta");
    let Some(mut broker) = hold_fcntl_lock(&old) else {
        return;
    };
    let before = dir.path().join("before");
    copy_dir(&old, &before);
    let once = || {
        on(
            "once",
            &old,
            &bucket,
            SOURCE,
            &["--cluster-id", "dst", "--topics", ".*"],
        )
    };
    for (what, (code, out)) in [
        ("once", once()),
        (
            "start",
            on("start", &old, &bucket, SOURCE, &["--topic", "orders"]),
        ),
    ] {
        assert_eq!(code, 2, "{what}: {out}");
        assert!(
            out.contains(s(&old))
                && out.contains("running Kafka broker")
                && out.contains("stop the broker first")
                && out.contains(&broker.id().to_string()),
            "{what}: {out}"
        );
    }
    assert!(
        !old.join("orders-0").exists(),
        "nothing was created in the broker's dir"
    );
    // plan only reads: it warns, and still shows what failback would do.
    let (code, out) = on("plan", &old, &bucket, SOURCE, &["--topics", ".*"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("would be refused now") && out.contains("orders-0"),
        "{out}"
    );
    broker.kill().expect("kill");
    broker.wait().expect("wait");
    // The broker is down: the documented failback proceeds.
    let (code, out) = once();
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        compare_partition(&source, &old, &tp("orders")).expect("compare"),
        Comparison::Identical
    );
    // A flock (what segmirror's own processes take) is not a broker's lock.
    assert!(
        kafkalog::logdir::posix_lock_holder(&old)
            .expect("probe")
            .is_none()
    );
}

/// The store of cluster `id` in the bucket at `url`.
fn store_of(url: &str, id: &str) -> ManifestStore {
    let object_store = bucket::url::BucketUrl::parse(url)
        .expect("url")
        .build()
        .expect("store");
    ManifestStore::new(
        object_store,
        manifest::layout::ClusterLayout::new("", id).expect("layout"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_pinning_a_preparing_partition_replaces_the_first_pin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("dest");
    let (bucket, _) = file_bucket(&dir.path().join("bucket"));
    // Two sources with a topic `orders` each, of different topic ids.
    let id_a = common::topic_id();
    let id_b = TopicId::from_bytes([7; 16]);
    let (src_a, src_b) = (dir.path().join("a"), dir.path().join("b"));
    produce_into(&src_a, id_a, 30);
    produce_into(&src_b, id_b, 60);
    publish(&store_of(&bucket, "src-a"), &src_a, &tp("orders"), "u1").await;
    publish(&store_of(&bucket, "src-b"), &src_b, &tp("orders"), "u1").await;
    let start = |source: &str| on("start", &dest, &bucket, source, &["--topic", "orders"]);
    let (code, out) = start("src-a");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("orders-0: PREPARING"), "{out}");
    let (code, out) = start("src-b");
    assert_eq!(code, 0, "the operator corrects the pin: {out}");
    let pdir = dest.join("orders-0");
    let record = partdir::record::read(&pdir)
        .expect("read")
        .expect("a mirror");
    assert_eq!(record.source_cluster_id, "src-b");
    assert_eq!(record.topic_id, id_b);
    let meta = kafkalog::checkpoint::read_partition_metadata(&pdir.join("partition.metadata"))
        .expect("read")
        .expect("present");
    assert_eq!(meta.topic_id, id_b, "the first pin's topic id is gone");
    let (code, out) = on("once", &dest, &bucket, "src-b", &[]);
    assert_eq!(code, 0, "{out}");
    let row = orders_row(&status_json(&dest));
    assert_eq!(row["state"], "MIRRORING", "{row}");
    assert_eq!(
        compare_partition(&src_b, &dest, &tp("orders")).expect("compare"),
        Comparison::Identical,
        "a copy of the new source"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_handed_to_the_daemon_carries_allow_truncate() {
    let (_dir, source, bucket, before) = ahead_with_a_copy().await;
    // A daemon holds the log dir (no --topics: nothing starts by itself).
    let mut daemon = spawn_run(&source, &bucket, &[], "error");
    let deadline = Instant::now() + Duration::from_secs(30);
    while LogDir::open(&source).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the daemon never took the log dir"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let start = |extra: &[&str]| {
        let args = [&["--topic", "orders", "--timeout", "30s"][..], extra].concat();
        on("start", &source, &bucket, SOURCE, &args)
    };
    let (code, out) = start(&[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("orders-0: refused") && out.contains("offsets 100..149 (50 records)"),
        "{out}"
    );
    assert_intact(&before, &source, "start handed to the daemon");
    let (code, out) = start(&["--allow-truncate"]);
    assert_eq!(code, 0, "{out}");
    let mut state = serde_json::Value::Null;
    while state != "MIRRORING" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        state = orders_row(&status_json(&source))["state"].clone();
    }
    daemon.kill().expect("kill");
    daemon.wait().expect("wait");
    assert_eq!(state, "MIRRORING");
    assert_eq!(log_end(&source), 100, "cut to what the source shipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_clears_a_failure_an_earlier_re_pin_left_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("dest");
    let (bucket, _) = file_bucket(&dir.path().join("bucket"));
    let id_b = TopicId::from_bytes([7; 16]);
    let (src_a, src_b) = (dir.path().join("a"), dir.path().join("b"));
    produce_into(&src_a, common::topic_id(), 30);
    produce_into(&src_b, id_b, 60);
    publish(&store_of(&bucket, "src-a"), &src_a, &tp("orders"), "u1").await;
    publish(&store_of(&bucket, "src-b"), &src_b, &tp("orders"), "u1").await;
    let (code, out) = on("start", &dest, &bucket, "src-a", &["--topic", "orders"]);
    assert_eq!(code, 0, "{out}");
    // What a re-pin did before: the record names src-b's topic, the
    // partition.metadata still src-a's.
    let pdir = dest.join("orders-0");
    let mut record = partdir::record::read(&pdir)
        .expect("read")
        .expect("a mirror");
    record.source_cluster_id = "src-b".into();
    record.topic_id = id_b;
    partdir::record::write(&record, &pdir).expect("write");
    let (code, out) = on("once", &dest, &bucket, "src-b", &[]);
    assert_eq!(code, 1, "{out}");
    let row = orders_row(&status_json(&dest));
    assert_eq!(row["state"], "FAILED", "{row}");
    assert!(says(&row["last_error"], "inconsistent topic id"), "{row}");
    // A start clears it: the empty partition takes the pinned topic id.
    let (code, out) = on("start", &dest, &bucket, "src-b", &["--topic", "orders"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = on("once", &dest, &bucket, "src-b", &[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(orders_row(&status_json(&dest))["state"], "MIRRORING");
    assert_eq!(
        compare_partition(&src_b, &dest, &tp("orders")).expect("compare"),
        Comparison::Identical
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_sources_manifest_only_a_stop_with_no_writes_since_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, dest, bucket) = stopped_with_local_writes(dir.path()).await;
    let bucket_dir = dir.path().join("bucket");
    let run = |cmd: &str, extra: &[&str]| on(cmd, &dest, &bucket, SOURCE, extra);
    // The source's objects are gone from the bucket (an outage, a wrong
    // prefix): what a start would cut cannot be planned.
    let aside = dir.path().join("aside");
    std::fs::rename(&bucket_dir, &aside).expect("move the bucket away");
    std::fs::create_dir_all(&bucket_dir).expect("empty bucket");
    let before = dir.path().join("before");
    copy_dir(&dest, &before);
    let (code, out) = run("start", &["--topic", "orders"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("cannot be read") && out.contains("--allow-truncate"),
        "{out}"
    );
    assert_intact(&before, &dest, "start without the manifest");
    // With nothing written since the stop, resuming cuts nothing of its own.
    {
        let d = LogDir::open(&dest).expect("dest");
        let mut log = d
            .open_partition(&tp("orders"), LogConfig::default())
            .expect("open");
        log.truncate_to(100).expect("drop the local writes");
        log.close().expect("close");
    }
    let (code, out) = run("start", &["--topic", "orders"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(orders_row(&status_json(&dest))["state"], "PREPARING");
}
