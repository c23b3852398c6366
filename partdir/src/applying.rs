//! The applying marker's file (`segmirror-applying.json`) in a partition
//! dir: written durably before the first batch of a streamed range,
//! removed once the range is whole (see `manifest::applying` for the
//! protocol and the pure decision of where to cut).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use manifest::applying::{APPLYING_FILE, Applying};

fn path(dir: &Path) -> PathBuf {
    dir.join(APPLYING_FILE)
}

/// Writes the marker durably (the file, then the dir that now holds it).
pub fn begin(dir: &Path, a: &Applying) -> std::io::Result<()> {
    let p = path(dir);
    let mut bytes = serde_json::to_vec(a).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)?;
    f.write_all(&bytes)?;
    f.sync_data()?;
    File::open(dir)?.sync_all()
}

/// Removes the marker. Not fsynced: a marker that comes back after a
/// power loss only makes the range be fetched again; the log's next flush
/// fsyncs the dir (before a stop hands the log to local writers).
pub fn end(dir: &Path) -> std::io::Result<()> {
    match fs::remove_file(path(dir)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a marker left in `dir` says: `Ok(None)` when there is none,
/// `Err(text)` when it does not parse (a torn write).
pub fn read(dir: &Path) -> std::io::Result<Option<Result<Applying, String>>> {
    // A marker is a few hundred bytes; a larger file is damage, read no further.
    let bytes =
        match kafkalog::fsutil::read_bounded(&path(dir), kafkalog::fsutil::MAX_SMALL_FILE_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
    Ok(Some(
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path(dir).display())),
    ))
}

/// Removes the marker durably (after the cut it asked for is made).
pub fn clear(dir: &Path) -> std::io::Result<()> {
    end(dir)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_marker_is_an_error_not_a_17_mib_read() {
        let d = tempfile::tempdir().expect("dir");
        let big = vec![b' '; (kafkalog::fsutil::MAX_SMALL_FILE_BYTES + 1) as usize];
        fs::write(path(d.path()), big).expect("write");
        let err = read(d.path()).expect_err("refused");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    }

    #[test]
    fn a_marker_is_read_back_and_a_torn_one_is_told_apart() {
        let d = tempfile::tempdir().expect("dir");
        assert_eq!(read(d.path()).expect("read"), None);
        let a = Applying {
            key: "k/data/1".into(),
            base_offset: 100,
            last_offset: 199,
            log_end_before: 100,
        };
        begin(d.path(), &a).expect("begin");
        assert_eq!(read(d.path()).expect("read"), Some(Ok(a)));
        fs::write(path(d.path()), b"{\"key\":\"k/da").expect("tear");
        assert!(matches!(read(d.path()).expect("read"), Some(Err(_))));
        clear(d.path()).expect("clear");
        assert_eq!(read(d.path()).expect("read"), None);
        end(d.path()).expect("absent is fine");
    }
}
