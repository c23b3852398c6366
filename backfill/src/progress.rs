//! Progress of a run: a bar on a terminal (bytes of source objects,
//! records, files, ETA), nothing more than the `tracing` lines otherwise
//! (a log collector gets one line per file, not a redrawn bar).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What an export reports as it goes. Called from every partition's task.
pub trait Progress: Send + Sync {
    /// A partition planned to read `bytes` of objects.
    fn planned(&self, bytes: u64);
    /// `bytes` of objects were downloaded.
    fn downloaded(&self, bytes: u64);
    /// A complete file was kept: its `bytes` of objects are not read.
    fn skipped(&self, bytes: u64);
    /// `n` records were decoded.
    fn records(&self, n: u64);
    /// A file was written.
    fn file_written(&self, key: &str, rows: u64, bytes: u64);
    /// The run ended.
    fn finish(&self);
}

/// No bar: the export's `tracing` lines are the progress.
#[derive(Debug, Default)]
pub struct LogLines;

impl Progress for LogLines {
    fn planned(&self, _: u64) {}
    fn downloaded(&self, _: u64) {}
    fn skipped(&self, _: u64) {}
    fn records(&self, _: u64) {}
    fn file_written(&self, _: &str, _: u64, _: u64) {}
    fn finish(&self) {}
}

/// A bar on stderr.
#[derive(Debug)]
pub struct Bar {
    bar: indicatif::ProgressBar,
    records: AtomicU64,
    files: AtomicU64,
    total: Mutex<u64>,
}

impl Bar {
    /// A bar drawn on stderr.
    pub fn new() -> Bar {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(0),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{wide_bar}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, ETA {eta}) {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Bar {
            bar,
            records: AtomicU64::new(0),
            files: AtomicU64::new(0),
            total: Mutex::new(0),
        }
    }

    fn message(&self) {
        self.bar.set_message(format!(
            "{} records, {} files",
            self.records.load(Ordering::Relaxed),
            self.files.load(Ordering::Relaxed)
        ));
    }
}

impl Default for Bar {
    fn default() -> Bar {
        Bar::new()
    }
}

impl Progress for Bar {
    fn planned(&self, bytes: u64) {
        if let Ok(mut total) = self.total.lock() {
            *total += bytes;
            self.bar.set_length(*total);
        }
    }
    fn downloaded(&self, bytes: u64) {
        self.bar.inc(bytes);
    }
    fn skipped(&self, bytes: u64) {
        self.bar.inc(bytes);
    }
    fn records(&self, n: u64) {
        self.records.fetch_add(n, Ordering::Relaxed);
        self.message();
    }
    fn file_written(&self, _: &str, _: u64, _: u64) {
        self.files.fetch_add(1, Ordering::Relaxed);
        self.message();
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
