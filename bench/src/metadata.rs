//! `metadata`: what reading a broker's KRaft metadata log costs the
//! shipper per cycle, at `--partitions` partitions (default 10,000).
//!
//! A metadata log is written into `--work` (a temporary dir by default) by
//! the kraft tests' independent encoder (`kraft/tests/support`, from
//! Kafka's JSON schemas): 100-partition topics with RF=3 across 3 brokers,
//! two configs per topic, then `--cycles` rounds of `--changes` leader
//! moves each. Phases, each timed (wall and this process's CPU):
//!
//! 1. baseline: reading the same bytes with `std::fs::read` (what `cat`
//!    pays);
//! 2. the shipper's first read (`MetadataLogReader::poll` from nothing:
//!    every record decoded and replayed);
//! 3. an idle cycle's poll (nothing appended);
//! 4. a cycle's poll after `--changes` leader moves, and the role lookup
//!    of every partition (`image.topics[name].partitions[p]`) the shipper
//!    does each cycle.
//!
//! Bytes read are the reader's own count (`PollReport::bytes`). CPU is
//! counted in the kernel's 10 ms ticks: below that, read the wall time.

use std::time::{Duration, Instant};

use anyhow::Context;
use kraft::MetadataLogReader;

use crate::common::{Opts, self_cpu};
use crate::kraft_support::{self as k, MetaLog, V};

fn id(n: u32) -> kafkalog::TopicId {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&n.to_be_bytes());
    b[15] = 1;
    kafkalog::TopicId::from_bytes(b)
}

struct Timed {
    wall: Duration,
    cpu: Duration,
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Timed) {
    let (c0, t0) = (self_cpu(), Instant::now());
    let out = f();
    let t = Timed {
        wall: t0.elapsed(),
        cpu: self_cpu().saturating_sub(c0),
    };
    (out, t)
}

fn line(name: &str, t: &Timed, bytes: u64, note: &str) {
    println!(
        "{name:<44} wall {:>9.3} ms  cpu {:>7.0} ms  bytes read {:>10}  {note}",
        t.wall.as_secs_f64() * 1000.0,
        t.cpu.as_secs_f64() * 1000.0,
        bytes
    );
}

pub(crate) fn main(o: &Opts) -> anyhow::Result<()> {
    let partitions: u32 = o.num("partitions", 10_000)?;
    let cycles: u32 = o.num("cycles", 20)?;
    let changes: u32 = o.num("changes", 10)?;
    let tmp = tempfile::tempdir()?;
    let root = match o.str("work") {
        Some(w) => std::path::PathBuf::from(w),
        None => tmp.path().to_path_buf(),
    };
    std::fs::create_dir_all(&root)?;
    let per_topic = 100u32;
    let topics = partitions.div_ceil(per_topic);
    let mut meta = MetaLog::create(&root, 1);
    for t in 0..topics {
        let name = format!("topic-{t:05}");
        let mut records = vec![
            k::topic(&name, id(t)),
            k::config(2, &name, "retention.ms", Some("604800000")),
            k::config(2, &name, "max.message.bytes", Some("1048588")),
        ];
        for p in 0..per_topic.min(partitions - t * per_topic) {
            let leader = (p % 3) as i32 + 1;
            records.push(k::partition(
                0,
                id(t),
                p as i32,
                &[1, 2, 3],
                &[1, 2, 3],
                leader,
                0,
                0,
                &[],
            ));
        }
        meta.append(1, &records);
    }
    let size = meta.segment_len();
    println!(
        "metadata log: {partitions} partitions in {topics} topics, RF=3, {size} bytes, {} records",
        meta.next_offset
    );

    let path = meta.segment_path();
    let (bytes, cat) = timed(|| std::fs::read(&path).map(|b| b.len() as u64));
    line("baseline: read the file (cat)", &cat, bytes?, "");

    let mut reader = MetadataLogReader::for_log_dir(&root);
    let (r, first) = timed(|| reader.poll());
    let r = r.context("first read")?;
    line(
        "first read (decode and replay everything)",
        &first,
        r.bytes,
        &format!(
            "{} records; {:.1}x cat's wall time",
            r.records,
            first.wall.as_secs_f64() / cat.wall.as_secs_f64().max(1e-9)
        ),
    );

    let (r, idle) = timed(|| reader.poll());
    let r = r.context("idle poll")?;
    line("idle cycle: poll, nothing new", &idle, r.bytes, "");

    let mut total_wall = Duration::ZERO;
    let mut total_cpu = Duration::ZERO;
    let mut total_bytes = 0;
    let mut lookups = Duration::ZERO;
    for c in 0..cycles {
        let recs: Vec<Vec<u8>> = (0..changes)
            .map(|i| {
                let n = c * changes + i;
                let t = n % topics;
                let p = (n / topics) % per_topic;
                k::change(
                    0,
                    id(t),
                    p as i32,
                    &[("Leader", V::Int(i64::from((n % 3) + 1)))],
                )
            })
            .collect();
        meta.append(1, &recs);
        let (r, t) = timed(|| reader.poll());
        let r = r.context("poll")?;
        total_wall += t.wall;
        total_cpu += t.cpu;
        total_bytes += r.bytes;
        let image = reader.image().context("image")?;
        let t0 = Instant::now();
        let mut led = 0u32;
        for t in 0..topics {
            let name = format!("topic-{t:05}");
            for p in 0..per_topic {
                let leader = image
                    .topics
                    .get(&name)
                    .and_then(|tp| tp.partitions.get(&(p as i32)))
                    .map(|reg| reg.leader);
                led += u32::from(leader == Some(1));
            }
        }
        lookups += t0.elapsed();
        std::hint::black_box(led);
    }
    let n = cycles.max(1);
    line(
        &format!("busy cycle: poll after {changes} leader moves"),
        &Timed {
            wall: total_wall / n,
            cpu: total_cpu / n,
        },
        total_bytes / u64::from(n),
        &format!("mean of {cycles} cycles"),
    );
    println!(
        "{:<44} wall {:>9.3} ms  (every partition's registration, mean of {cycles} cycles)",
        "role lookups",
        lookups.as_secs_f64() * 1000.0 / f64::from(n)
    );
    Ok(())
}
