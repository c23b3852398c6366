//! Segment files: names and streaming scans.
//!
//! A segment is named by its base offset, zero-padded to 20 digits, with one
//! suffix per file kind, as Kafka's `LogFileUtils`:
//! `00000000000000000042.log`, `.index`, `.timeindex`, `.txnindex`,
//! `.snapshot`. This module is the only place that formats or parses those
//! names.
//!
//! [`scan`] reads a `.log` file batch by batch through a bounded buffer (never
//! the whole file in memory), optionally verifying every CRC, and reports
//! where the valid prefix ends and why it stopped.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::batch::{self, BatchError, BatchHeader, HEADER_SIZE};
use crate::error::{Error, Result};

/// Suffix of segment data files.
pub const LOG_SUFFIX: &str = ".log";
/// Suffix of offset index files.
pub const INDEX_SUFFIX: &str = ".index";
/// Suffix of time index files.
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
/// Suffix of transaction index files.
pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// Suffix of producer state snapshots.
pub const SNAPSHOT_SUFFIX: &str = ".snapshot";

/// `<20-digit offset><suffix>`, as Kafka names segment files.
pub fn file_name(offset: i64, suffix: &str) -> String {
    format!("{offset:020}{suffix}")
}

/// The path of a segment file in a partition dir.
pub fn file_path(dir: &Path, offset: i64, suffix: &str) -> PathBuf {
    dir.join(file_name(offset, suffix))
}

/// Parses `<20 digits><suffix>`; `None` for any other name.
pub fn parse_file_name(name: &str, suffix: &str) -> Option<i64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Base offsets of the `.log` files in a partition dir, sorted.
pub fn list_segments(dir: &Path) -> Result<Vec<i64>> {
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(Error::io("list", dir))? {
        let entry = entry.map_err(Error::io("list", dir))?;
        if let Some(base) = entry
            .file_name()
            .to_str()
            .and_then(|n| parse_file_name(n, LOG_SUFFIX))
        {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Why a scan stopped.
#[derive(Debug)]
pub enum ScanStop {
    /// The end of the file was reached on a batch boundary.
    End,
    /// The visitor asked to stop.
    Visitor,
    /// The file ends inside a batch (a torn write at the tail).
    Torn(BatchError),
    /// A batch is corrupt (bad length, magic, CRC, header).
    Corrupt(BatchError),
}

/// The outcome of a [`scan`].
#[derive(Debug)]
pub struct ScanEnd {
    /// Position after the last batch visited (the valid prefix's end).
    pub valid_end: u64,
    /// The file's size.
    pub file_size: u64,
    /// Why the scan stopped.
    pub stop: ScanStop,
}

impl ScanEnd {
    /// The error the scan stopped at, if any.
    pub fn error(&self) -> Option<&BatchError> {
        match &self.stop {
            ScanStop::Torn(e) | ScanStop::Corrupt(e) => Some(e),
            _ => None,
        }
    }
}

const READ_BUFFER: usize = 1 << 20;

/// Reads the batches of the segment file `path` from byte `from` on, calling
/// `visit(header, bytes)` for each (bytes are the whole batch), with every
/// CRC checked when `verify`. Stops at the end of the file, at the first bad
/// batch, or when the visitor breaks. IO errors are errors; malformed data is
/// reported in [`ScanEnd::stop`].
pub fn scan(
    path: &Path,
    from: u64,
    verify: bool,
    mut visit: impl FnMut(&BatchHeader, &[u8]) -> ControlFlow<()>,
) -> Result<ScanEnd> {
    let mut file = File::open(path).map_err(Error::io("open", path))?;
    let file_size = file.metadata().map_err(Error::io("stat", path))?.len();
    file.seek(SeekFrom::Start(from))
        .map_err(Error::io("seek", path))?;
    // No bigger than what is left to read (the window grows for a batch
    // larger than it): a scan at the end allocates nothing.
    let window_size = file_size.saturating_sub(from).min(READ_BUFFER as u64) as usize;
    let mut window = Window {
        buf: vec![0u8; window_size],
        start: 0,
        end: 0,
    };
    let mut pos = from;
    let end = |pos: u64, stop: ScanStop| {
        Ok(ScanEnd {
            valid_end: pos,
            file_size,
            stop,
        })
    };
    loop {
        if pos >= file_size {
            return end(pos, ScanStop::End);
        }
        let remaining = file_size - pos;
        // The header (or what is left of the file), then, when the length
        // field says the batch fits in the file, the whole batch. A batch
        // that runs past the end of the file is left short: torn.
        let head_len = HEADER_SIZE.min(remaining as usize);
        window
            .fill(&mut file, head_len)
            .map_err(Error::io("read", path))?;
        let head = window.data();
        if head.len() >= 12 && head_len == HEADER_SIZE {
            let len = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
            let declared = (i64::from(len) + 12).max(HEADER_SIZE as i64) as u64;
            if declared <= remaining {
                window
                    .fill(&mut file, declared as usize)
                    .map_err(Error::io("read", path))?;
            }
        }
        let data = window.data();
        let visible = &data[..data.len().min(remaining as usize)];
        let header = match batch::parse_header(visible, pos) {
            Ok(h) => h,
            Err(e) if e.is_truncation() => return end(pos, ScanStop::Torn(e)),
            Err(e) => return end(pos, ScanStop::Corrupt(e)),
        };
        let bytes = &visible[..header.size()];
        if verify && let Err(e) = batch::verify_crc(&header, bytes) {
            return end(pos, ScanStop::Corrupt(e));
        }
        pos += header.size() as u64;
        let flow = visit(&header, bytes);
        window.consume(header.size());
        if flow.is_break() {
            return end(pos, ScanStop::Visitor);
        }
    }
}

/// Bytes read at a time by [`walk_headers`]: the headers of batches smaller
/// than this come from one read, a larger batch's header costs one read of
/// this size (a small share of the batch, which is not read).
const HEADER_WINDOW: usize = 4 << 10;

/// The headers of the batches of the open segment `file` (at `path`, for
/// errors) from byte `from` on, without reading their records: each
/// header is checked as [`batch::parse_header_in`] checks it (magic 2, the
/// whole batch inside the file, possible fields), not its CRC. For a
/// reader that passes the batches' bytes on without looking at them (the
/// gateway's fetch). Stops as [`scan`] does; the file's size is taken once,
/// so bytes appended during the walk are left to the next one.
pub fn walk_headers(
    file: &File,
    path: &Path,
    from: u64,
    mut visit: impl FnMut(&BatchHeader) -> ControlFlow<()>,
) -> Result<ScanEnd> {
    let file_size = file.metadata().map_err(Error::io("stat", path))?.len();
    let end = |pos: u64, stop: ScanStop| {
        Ok(ScanEnd {
            valid_end: pos,
            file_size,
            stop,
        })
    };
    let mut window = [0u8; HEADER_WINDOW];
    // The file's bytes [window_at, window_at + held) are in `window`.
    let (mut window_at, mut held) = (from, 0usize);
    let mut pos = from;
    loop {
        if pos >= file_size {
            return end(pos, ScanStop::End);
        }
        let remaining = file_size - pos;
        let want = (HEADER_SIZE as u64).min(remaining);
        if pos < window_at || pos - window_at + want > held as u64 {
            let len = (HEADER_WINDOW as u64).min(remaining) as usize;
            held = read_fully_at(file, &mut window[..len], pos).map_err(Error::io("read", path))?;
            window_at = pos;
        }
        let start = (pos - window_at) as usize;
        let head = &window[start..held];
        let header = match batch::parse_header_in(head, pos, remaining) {
            Ok(h) => h,
            Err(e) if e.is_truncation() => return end(pos, ScanStop::Torn(e)),
            Err(e) => return end(pos, ScanStop::Corrupt(e)),
        };
        pos += header.size() as u64;
        if visit(&header).is_break() {
            return end(pos, ScanStop::Visitor);
        }
    }
}

/// Reads `buf.len()` bytes at `at`, or fewer at the end of the file: how
/// many were read.
fn read_fully_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// A read window over a file: `buf[start..end]` holds the bytes at the scan
/// position. Batches are parsed in place; the window is refilled (moving the
/// unread tail to the front) only when a batch does not fit, and grows only
/// for a batch larger than it.
struct Window {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Window {
    fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
    }

    /// Makes at least `need` bytes available, reading as many as fit; fewer
    /// only at the end of the file.
    fn fill(&mut self, file: &mut File, need: usize) -> io::Result<()> {
        if self.end - self.start >= need {
            return Ok(());
        }
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        if need > self.buf.len() {
            self.buf.resize(need, 0);
        }
        while self.end < need {
            let n = file.read(&mut self.buf[self.end..])?;
            if n == 0 {
                break;
            }
            self.end += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::tests::raw_batch;

    #[test]
    fn names_round_trip() {
        assert_eq!(file_name(42, LOG_SUFFIX), "00000000000000000042.log");
        assert_eq!(
            parse_file_name("00000000000000000042.log", LOG_SUFFIX),
            Some(42)
        );
        assert_eq!(parse_file_name("0000000000000000042.log", LOG_SUFFIX), None);
        assert_eq!(
            parse_file_name("00000000000000000042.index", LOG_SUFFIX),
            None
        );
        assert_eq!(
            parse_file_name("0000000000000000004x.log", LOG_SUFFIX),
            None
        );
    }

    #[test]
    fn scan_stops_at_torn_tail_and_corruption() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(file_name(0, LOG_SUFFIX));
        let a = raw_batch(0, 0, 0, b"first");
        let b = raw_batch(1, 0, 0, b"second");
        let mut bytes = a.clone();
        bytes.extend_from_slice(&b);
        bytes.extend_from_slice(&b[..20]);
        std::fs::write(&path, &bytes).expect("write");
        let mut seen = vec![];
        let end = scan(&path, 0, true, |h, _| {
            seen.push(h.base_offset);
            ControlFlow::Continue(())
        })
        .expect("scan");
        assert_eq!(seen, vec![0, 1]);
        assert_eq!(end.valid_end, (a.len() + b.len()) as u64);
        assert!(matches!(end.stop, ScanStop::Torn(_)));

        bytes.truncate(a.len() + b.len());
        bytes[a.len() + 40] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        let end = scan(&path, 0, true, |_, _| ControlFlow::Continue(())).expect("scan");
        assert_eq!(end.valid_end, a.len() as u64);
        match end.stop {
            ScanStop::Corrupt(e) => assert_eq!(e.position(), a.len() as u64),
            other => panic!("expected corruption, got {other:?}"),
        }
    }
}
