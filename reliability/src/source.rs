//! The source side of every harness: a Kafka-format log dir written with
//! the kafkalog library as a leader would, with records that make every
//! batch unique (so a lost or duplicated batch can be counted), epoch
//! changes, all five codecs and small segments (many rolls).
//!
//! [`SourceWriter`] appends synchronously (for the in-process harnesses,
//! which interleave production with ship and apply cycles); [`Producer`]
//! runs one on a thread at a steady rate (for the crash harness, where the
//! shipper tails a log that keeps growing).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use kafkalog::batch::Compression;
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
use kafkalog::{LogConfig, LogDir, PartitionLog, TopicId, TopicPartition};

use crate::rng::Rng;

/// The topic id every harness source uses.
pub const TOPIC_ID: TopicId = TopicId::from_bytes([0x5e; 16]);

/// What the source looks like.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    /// The partitions written.
    pub partitions: Vec<TopicPartition>,
    /// Segment size (small: many rolls).
    pub segment_bytes: u64,
    /// Records per batch.
    pub records_per_batch: usize,
    /// Bytes of filler per record value.
    pub value_bytes: usize,
    /// A new leader epoch every this many batches of a partition (0: never).
    pub epoch_every: u64,
    /// Every this many batches is compressed, cycling through the codecs
    /// (0: never).
    pub compress_every: u64,
}

impl SourceSpec {
    /// `n` partitions over two topics, 16 KiB segments, 5-record batches,
    /// an epoch change every 40 batches, every 3rd batch compressed.
    pub fn small(n: usize) -> SourceSpec {
        let partitions = (0..n)
            .map(|i| {
                let topic = if i % 2 == 0 { "orders" } else { "events" };
                TopicPartition::new(topic, (i / 2) as i32)
            })
            .collect::<Result<Vec<_>, _>>()
            .unwrap_or_default();
        SourceSpec {
            partitions,
            segment_bytes: 16 * 1024,
            records_per_batch: 5,
            value_bytes: 60,
            epoch_every: 40,
            compress_every: 3,
        }
    }
}

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Appends unique batches to the partitions of a source log dir (holding
/// its lock, as the broker would).
#[derive(Debug)]
pub struct SourceWriter {
    spec: SourceSpec,
    logs: Vec<PartitionLog>,
    seq: Vec<u64>,
    epoch: Vec<i32>,
    _dir: LogDir,
}

impl SourceWriter {
    /// Opens (creating) the partitions of `spec` under `root`.
    pub fn open(root: &Path, spec: SourceSpec) -> anyhow::Result<SourceWriter> {
        let dir = LogDir::open(root).with_context(|| format!("source {}", root.display()))?;
        let config = LogConfig {
            segment_bytes: spec.segment_bytes,
            ..LogConfig::default()
        };
        let mut logs = Vec::new();
        let mut epoch = Vec::new();
        let mut seq = Vec::new();
        for tp in &spec.partitions {
            let log = dir
                .open_or_create_partition(tp, Some(TOPIC_ID), config.clone())
                .with_context(|| format!("source partition {tp}"))?;
            epoch.push(log.epochs().latest_epoch().unwrap_or(0));
            // Batch numbers continue after a reopen: offsets are unique too.
            seq.push(log.log_end_offset().max(0) as u64);
            logs.push(log);
        }
        Ok(SourceWriter {
            spec,
            logs,
            seq,
            epoch,
            _dir: dir,
        })
    }

    /// The partitions.
    pub fn partitions(&self) -> &[TopicPartition] {
        &self.spec.partitions
    }

    /// Log end offset of partition `i`.
    pub fn log_end(&self, i: usize) -> i64 {
        self.logs.get(i).map_or(0, |l| l.log_end_offset())
    }

    /// Log end offsets of every partition.
    pub fn log_ends(&self) -> Vec<i64> {
        self.logs.iter().map(|l| l.log_end_offset()).collect()
    }

    /// Appends one unique batch to partition `i`.
    pub fn append(&mut self, i: usize) -> anyhow::Result<()> {
        let spec = &self.spec;
        let (Some(log), Some(seq), Some(epoch)) = (
            self.logs.get_mut(i),
            self.seq.get_mut(i),
            self.epoch.get_mut(i),
        ) else {
            anyhow::bail!("no partition {i}");
        };
        *seq += 1;
        if spec.epoch_every > 0 && *seq % spec.epoch_every == 0 {
            *epoch += 1;
        }
        let tp = &spec.partitions[i];
        let filler = "x".repeat(spec.value_bytes);
        let records: Vec<RecordInput> = (0..spec.records_per_batch.max(1))
            .map(|r| RecordInput {
                timestamp: 1_700_000_000_000 + (*seq as i64) * 10 + r as i64,
                key: Some(format!("{tp}-{seq}").into_bytes()),
                value: Some(format!("{tp}-batch-{seq:010}-record-{r}-{filler}").into_bytes()),
                headers: vec![],
            })
            .collect();
        let mut batch_spec = BatchSpec::new(0, *epoch);
        if spec.compress_every > 0 && *seq % spec.compress_every == 0 {
            batch_spec.compression = CODECS[((*seq / spec.compress_every) % 4) as usize];
        }
        let mut batch = build_batch(&batch_spec, &records).context("building a batch")?;
        log.append_as_leader(&mut batch, *epoch)
            .with_context(|| format!("appending to source {tp}"))?;
        Ok(())
    }

    /// Appends `n` batches to every partition.
    pub fn round(&mut self, n: usize) -> anyhow::Result<()> {
        for i in 0..self.logs.len() {
            for _ in 0..n {
                self.append(i)?;
            }
        }
        Ok(())
    }

    /// Flushes every partition.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        for l in &mut self.logs {
            l.flush().context("flushing the source")?;
        }
        Ok(())
    }
}

/// Source log ends, shared with the producer thread.
#[derive(Debug)]
pub struct Progress {
    ends: Vec<AtomicI64>,
    batches: AtomicU64,
}

impl Progress {
    /// Log end offsets now.
    pub fn log_ends(&self) -> Vec<i64> {
        self.ends
            .iter()
            .map(|a| a.load(Ordering::Acquire))
            .collect()
    }

    /// Batches appended so far.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }
}

/// A thread producing to the source at a steady rate.
#[derive(Debug)]
pub struct Producer {
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Producer {
    /// Starts producing `rate` batches a second (over all partitions, one
    /// partition at a time in random order).
    pub fn spawn(root: &Path, spec: SourceSpec, rate: u32, seed: u64) -> anyhow::Result<Producer> {
        let mut writer = SourceWriter::open(root, spec)?;
        let progress = Arc::new(Progress {
            ends: writer.log_ends().into_iter().map(AtomicI64::new).collect(),
            batches: AtomicU64::new(0),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (Arc::clone(&progress), Arc::clone(&stop));
        let interval = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
        let handle = std::thread::Builder::new()
            .name("source-producer".into())
            .spawn(move || -> anyhow::Result<()> {
                let mut rng = Rng::new(seed);
                let n = writer.partitions().len() as u64;
                let mut next = Instant::now();
                while !s.load(Ordering::Relaxed) {
                    let i = rng.below(n) as usize;
                    writer.append(i)?;
                    if let Some(a) = p.ends.get(i) {
                        a.store(writer.log_end(i), Ordering::Release);
                    }
                    p.batches.fetch_add(1, Ordering::Relaxed);
                    next += interval;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
                writer.flush()
            })
            .context("spawning the producer thread")?;
        Ok(Producer {
            stop,
            progress,
            handle: Some(handle),
        })
    }

    /// Log ends and batch counts, live.
    pub fn progress(&self) -> &Arc<Progress> {
        &self.progress
    }

    /// Stops producing and closes the source (releasing its lock).
    pub fn stop(mut self) -> anyhow::Result<Vec<i64>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join()
                .map_err(|_| anyhow::anyhow!("the producer thread panicked"))??;
        }
        Ok(self.progress.log_ends())
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
