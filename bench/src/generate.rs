//! `gen`: source log dirs for the benchmarks, written with kafkalog's
//! library (leader appends, `FlushPolicy::OnRoll`, then `close`), cached:
//! a `params` file written last marks a complete dir, and a later run with
//! the same parameters reuses it.
//!
//! Layouts:
//! - `mixed` (default 2048 MiB): 7 partitions of 4 topics, segment sizes
//!   from 512 KiB to 1 GiB and batches from ~0.5 KiB to ~17 KiB (table in
//!   [`MIXED`]).
//! - `big` (default 1280 MiB): one partition with 1 GiB segments (one
//!   rolled 1 GiB segment and the rest active); `--segment-mib N` sets
//!   another `segment.bytes` (say 256: rolled 256 MiB segments).
//! - `segments` (default 140 MiB): 4 partitions of small segments
//!   (`--segment-kib`, default 200: about 700 segments), as compacted and
//!   low-traffic topics have; the case issue 31 measures apply on.
//! - `small` (default 10,000 partitions): 100 topics of `N / 100`
//!   partitions, each partition one batch of 10 records of 100 bytes. One
//!   partition is written with the library, the others are copies of it
//!   with their own `partition.metadata` (writing 10,000 partitions through
//!   `PartitionLog::close`, which rewrites the root checkpoints each time,
//!   is quadratic).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use kafkalog::checkpoint::{PartitionMetadata, write_partition_metadata};
use kafkalog::{FlushPolicy, LogConfig, LogDir, TopicId, TopicPartition};

use crate::common::{BatchGen, Opts, du};

const MIB: u64 = 1024 * 1024;

/// One partition of a layout.
struct PartSpec {
    topic: &'static str,
    partition: i32,
    /// Per mille of the total bytes.
    share: u64,
    segment_bytes: u64,
    records: usize,
    value_size: usize,
}

/// The `mixed` layout.
#[rustfmt::skip]
const MIXED: &[PartSpec] = &[
    PartSpec {
        topic: "orders",
        partition: 0,
        share: 250,
        segment_bytes: 1024 * MIB,
        records: 16,
        value_size: 1024,
    },
    PartSpec {
        topic: "orders",
        partition: 1,
        share: 250,
        segment_bytes: 128 * MIB,
        records: 16,
        value_size: 1024,
    },
    PartSpec {
        topic: "events",
        partition: 0,
        share: 150,
        segment_bytes: 64 * MIB,
        records: 64,
        value_size: 256,
    },
    PartSpec {
        topic: "events",
        partition: 1,
        share: 150,
        segment_bytes: 16 * MIB,
        records: 64,
        value_size: 256,
    },
    PartSpec {
        topic: "clicks",
        partition: 0,
        share: 100,
        segment_bytes: 4 * MIB,
        records: 8,
        value_size: 512,
    },
    PartSpec {
        topic: "clicks",
        partition: 1,
        share: 50,
        segment_bytes: MIB,
        records: 8,
        value_size: 512,
    },
    PartSpec {
        topic: "logs",
        partition: 0,
        share: 50,
        segment_bytes: MIB / 2,
        records: 4,
        value_size: 100,
    },
];

/// The `big` layout.
const BIG: &[PartSpec] = &[PartSpec {
    topic: "big",
    partition: 0,
    share: 1000,
    segment_bytes: 1024 * MIB,
    records: 16,
    value_size: 1024,
}];

pub(crate) fn main(o: &Opts) -> anyhow::Result<()> {
    let out = PathBuf::from(o.str("out").context("--out DIR is required")?);
    let layout = o.str("layout").unwrap_or("mixed");
    let params = match layout {
        "mixed" => format!("v1 mixed total_mib={}", o.num("total-mib", 2048u64)?),
        "big" => match o.num("segment-mib", 1024u64)? {
            // The default keeps the cache key of dirs generated before the flag.
            1024 => format!("v1 big total_mib={}", o.num("total-mib", 1280u64)?),
            seg => format!(
                "v1 big total_mib={} segment_mib={seg}",
                o.num("total-mib", 1280u64)?
            ),
        },
        "small" => format!("v1 small partitions={}", o.num("partitions", 10_000u32)?),
        "segments" => format!(
            "v1 segments total_mib={} segment_kib={}",
            o.num("total-mib", 140u64)?,
            o.num("segment-kib", 200u64)?
        ),
        _ => anyhow::bail!("--layout: mixed, big, segments or small"),
    };
    let marker = out.join("params");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(params.as_str()) {
        eprintln!("gen: reusing {} ({params})", out.display());
        return Ok(());
    }
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let t = Instant::now();
    match layout {
        "mixed" => write_layout(&out, MIXED, o.num("total-mib", 2048u64)? * MIB)?,
        "big" => {
            let big = PartSpec {
                segment_bytes: o.num("segment-mib", 1024u64)? * MIB,
                ..BIG[0]
            };
            write_layout(&out, &[big], o.num("total-mib", 1280u64)? * MIB)?
        }
        "segments" => {
            let segment_bytes = o.num("segment-kib", 200u64)? * 1024;
            let parts: Vec<PartSpec> = (0..4)
                .map(|partition| PartSpec {
                    topic: "compacted",
                    partition,
                    share: 250,
                    segment_bytes,
                    records: 8,
                    value_size: 512,
                })
                .collect();
            write_layout(&out, &parts, o.num("total-mib", 140u64)? * MIB)?
        }
        _ => write_small(&out, o.num("partitions", 10_000u32)?)?,
    }
    // The params file is not a partition dir: the log dir reader skips it.
    std::fs::write(&marker, &params)?;
    eprintln!(
        "gen: wrote {} ({params}): {:.1} MiB in {:.1} s",
        out.display(),
        du(&out) as f64 / MIB as f64,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn write_layout(out: &Path, parts: &[PartSpec], total: u64) -> anyhow::Result<()> {
    let dir = LogDir::open(out)?;
    let mut ids = std::collections::BTreeMap::new();
    for (i, p) in parts.iter().enumerate() {
        let tp = TopicPartition::new(p.topic, p.partition)?;
        let id = match ids.get(p.topic) {
            Some(id) => *id,
            None => {
                let id = TopicId::random()?;
                ids.insert(p.topic, id);
                id
            }
        };
        let config = LogConfig {
            segment_bytes: p.segment_bytes,
            flush: FlushPolicy::OnRoll,
            ..LogConfig::default()
        };
        let mut log = dir.open_or_create_partition(&tp, Some(id), config)?;
        let target = total * p.share / 1000;
        let mut g = BatchGen::new(1 + i as u64, p.records, p.value_size);
        let mut written = 0u64;
        while written < target {
            let mut b = g.next_batch(None)?;
            written += b.len() as u64;
            log.append_as_leader(&mut b, 0)?;
        }
        log.close()?;
    }
    Ok(())
}

fn write_small(out: &Path, partitions: u32) -> anyhow::Result<()> {
    let topics = 100u32.min(partitions.max(1));
    let per_topic = partitions.div_ceil(topics);
    // The template partition, written with the library.
    let staging = out.with_extension("template");
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    let template_tp = TopicPartition::new("template", 0)?;
    {
        let dir = LogDir::open(&staging)?;
        let mut log = dir.open_or_create_partition(
            &template_tp,
            Some(TopicId::random()?),
            LogConfig::default(),
        )?;
        let mut g = BatchGen::new(7, 10, 100);
        let mut b = g.next_batch(None)?;
        log.append_as_leader(&mut b, 0)?;
        log.close()?;
    }
    let template = staging.join(template_tp.dir_name());
    let files: Vec<PathBuf> = std::fs::read_dir(&template)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    std::fs::create_dir_all(out)?;
    let mut made = 0u32;
    'outer: for t in 0..topics {
        let topic = format!("t{t:03}");
        let meta = PartitionMetadata::new(TopicId::random()?);
        for p in 0..per_topic {
            if made == partitions {
                break 'outer;
            }
            let tp = TopicPartition::new(topic.as_str(), p as i32)?;
            let d = out.join(tp.dir_name());
            std::fs::create_dir(&d)?;
            for f in &files {
                let name = f.file_name().context("file name")?;
                if name == kafkalog::log::PARTITION_METADATA {
                    continue;
                }
                std::fs::copy(f, d.join(name))?;
            }
            write_partition_metadata(&d.join(kafkalog::log::PARTITION_METADATA), &meta, false)?;
            made += 1;
        }
    }
    std::fs::remove_dir_all(&staging)?;
    Ok(())
}
