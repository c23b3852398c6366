//! Producer state snapshots (`<offset>.snapshot`), read-only.
//!
//! Kafka writes one when a segment rolls and at clean shutdown, named by the
//! log end offset it was taken at. Format (version 1, as Kafka's
//! `ProducerStateManager` / `PidSnapshot`), big-endian:
//!
//! ```text
//! version i16 (1) | crc u32 (CRC-32C of everything after it) | count i32 |
//! count x { producer_id i64, producer_epoch i16, last_sequence i32,
//!           last_offset i64, offset_delta i32, timestamp i64,
//!           coordinator_epoch i32, current_txn_first_offset i64 (-1: none) }
//! ```
//!
//! segmirror reads snapshots (to verify them and to learn which
//! transactions are open) and writes them for the producers it serves (the
//! Kafka gateway, at a clean shutdown). Truncating a log removes the
//! snapshots taken above the cut ([`remove_above`]).

use std::path::Path;

use crate::error::{Error, Result};

/// The snapshot version read here.
pub const SNAPSHOT_VERSION: i16 = 1;
const ENTRY_SIZE: usize = 46;
const HEADER_SIZE: usize = 10;

/// One producer's state in a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ProducerSnapshotEntry {
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Last sequence written.
    pub last_sequence: i32,
    /// Offset of its last batch's last record.
    pub last_offset: i64,
    /// Last offset minus the first offset of its last batch.
    pub offset_delta: i32,
    /// Timestamp of its last batch.
    pub timestamp: i64,
    /// Coordinator epoch of its last marker.
    pub coordinator_epoch: i32,
    /// First offset of its open transaction, if any.
    pub current_txn_first_offset: Option<i64>,
}

fn take<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at + N)?.try_into().ok()
}

/// Parses a snapshot file's bytes; errors name `path`.
pub fn parse_snapshot(bytes: &[u8], path: &Path) -> Result<Vec<ProducerSnapshotEntry>> {
    let bad = |reason: String| Error::malformed(path, 0, reason);
    let version = take::<2>(bytes, 0)
        .map(i16::from_be_bytes)
        .ok_or_else(|| bad("shorter than a snapshot header".into()))?;
    if version != SNAPSHOT_VERSION {
        return Err(bad(format!(
            "snapshot version {version}, expected {SNAPSHOT_VERSION}"
        )));
    }
    let stored = take::<4>(bytes, 2)
        .map(u32::from_be_bytes)
        .ok_or_else(|| bad("shorter than a snapshot header".into()))?;
    let computed = crc32c::crc32c(bytes.get(6..).unwrap_or(&[]));
    if stored != computed {
        return Err(bad(format!(
            "CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
        )));
    }
    let count = take::<4>(bytes, 6)
        .map(i32::from_be_bytes)
        .ok_or_else(|| bad("no entry count".into()))?;
    let body = bytes.len() - HEADER_SIZE.min(bytes.len());
    if count < 0 || (count as usize).checked_mul(ENTRY_SIZE) != Some(body) {
        return Err(bad(format!("{count} entries do not fill {body} bytes")));
    }
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let at = HEADER_SIZE + i * ENTRY_SIZE;
        let field = |o: usize| at + o;
        let entry = (|| {
            let txn = i64::from_be_bytes(take::<8>(bytes, field(38))?);
            Some(ProducerSnapshotEntry {
                producer_id: i64::from_be_bytes(take::<8>(bytes, field(0))?),
                producer_epoch: i16::from_be_bytes(take::<2>(bytes, field(8))?),
                last_sequence: i32::from_be_bytes(take::<4>(bytes, field(10))?),
                last_offset: i64::from_be_bytes(take::<8>(bytes, field(14))?),
                offset_delta: i32::from_be_bytes(take::<4>(bytes, field(22))?),
                timestamp: i64::from_be_bytes(take::<8>(bytes, field(26))?),
                coordinator_epoch: i32::from_be_bytes(take::<4>(bytes, field(34))?),
                current_txn_first_offset: (txn >= 0).then_some(txn),
            })
        })()
        .ok_or_else(|| bad(format!("entry {i} is cut short")))?;
        out.push(entry);
    }
    Ok(out)
}

/// The bytes of a snapshot holding `entries` (version 1, CRC-32C).
pub fn encode_snapshot(entries: &[ProducerSnapshotEntry]) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + entries.len() * ENTRY_SIZE);
    body.extend_from_slice(
        &i32::try_from(entries.len())
            .unwrap_or(i32::MAX)
            .to_be_bytes(),
    );
    for e in entries {
        body.extend_from_slice(&e.producer_id.to_be_bytes());
        body.extend_from_slice(&e.producer_epoch.to_be_bytes());
        body.extend_from_slice(&e.last_sequence.to_be_bytes());
        body.extend_from_slice(&e.last_offset.to_be_bytes());
        body.extend_from_slice(&e.offset_delta.to_be_bytes());
        body.extend_from_slice(&e.timestamp.to_be_bytes());
        body.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
        body.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
    }
    let mut out = SNAPSHOT_VERSION.to_be_bytes().to_vec();
    out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Writes `<dir>/<offset>.snapshot` atomically.
pub fn write_snapshot(dir: &Path, offset: i64, entries: &[ProducerSnapshotEntry]) -> Result<()> {
    let path = crate::segment::file_path(dir, offset, crate::segment::SNAPSHOT_SUFFIX);
    crate::fsutil::write_atomic(&path, &encode_snapshot(entries), true)
}

/// The offsets of the snapshots in the partition dir `dir`, ascending.
pub fn list_snapshots(dir: &Path) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(Error::io("list", dir))? {
        let entry = entry.map_err(Error::io("list", dir))?;
        if let Some(offset) = entry
            .file_name()
            .to_str()
            .and_then(|n| crate::segment::parse_file_name(n, crate::segment::SNAPSHOT_SUFFIX))
        {
            out.push(offset);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Removes the snapshots taken above `end` (the log was cut there: they
/// describe producers' batches that are gone), as Kafka's
/// `ProducerStateManager.truncateAndReload` does.
pub fn remove_above(dir: &Path, end: i64) -> Result<()> {
    for offset in list_snapshots(dir)? {
        if offset > end {
            let path = crate::segment::file_path(dir, offset, crate::segment::SNAPSHOT_SUFFIX);
            crate::fsutil::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Reads and parses a snapshot file.
pub fn read_snapshot(path: &Path) -> Result<Vec<ProducerSnapshotEntry>> {
    let bytes = std::fs::read(path).map_err(Error::io("read", path))?;
    parse_snapshot(&bytes, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(entries: &[ProducerSnapshotEntry]) -> Vec<u8> {
        encode_snapshot(entries)
    }

    #[test]
    fn written_snapshots_read_back_and_a_cut_removes_those_above_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = ProducerSnapshotEntry {
            producer_id: 7,
            producer_epoch: 1,
            last_sequence: 4,
            last_offset: 104,
            offset_delta: 4,
            timestamp: 9,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        };
        for at in [50, 105, 200] {
            write_snapshot(dir.path(), at, &[e]).expect("write");
        }
        let path = crate::segment::file_path(dir.path(), 105, crate::segment::SNAPSHOT_SUFFIX);
        assert_eq!(read_snapshot(&path).expect("read"), vec![e]);
        remove_above(dir.path(), 105).expect("remove");
        assert_eq!(list_snapshots(dir.path()).expect("list"), vec![50, 105]);
    }

    #[test]
    fn round_trips_and_detects_corruption() {
        let e = ProducerSnapshotEntry {
            producer_id: 7001,
            producer_epoch: 2,
            last_sequence: 41,
            last_offset: 230,
            offset_delta: 3,
            timestamp: 1_700_000_000_000,
            coordinator_epoch: 5,
            current_txn_first_offset: Some(227),
        };
        let idle = ProducerSnapshotEntry {
            producer_id: 9,
            current_txn_first_offset: None,
            ..e
        };
        let bytes = encode(&[e, idle]);
        let p = Path::new("00000000000000000244.snapshot");
        assert_eq!(parse_snapshot(&bytes, p).expect("parse"), vec![e, idle]);
        for i in 0..bytes.len() {
            let mut c = bytes.clone();
            c[i] ^= 0x04;
            assert!(parse_snapshot(&c, p).is_err(), "flip at {i}");
        }
        assert!(parse_snapshot(&bytes[..bytes.len() - 1], p).is_err());
        assert_eq!(parse_snapshot(&encode(&[]), p).expect("empty"), vec![]);
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse_snapshot(&bytes, Path::new("x.snapshot"));
        }
    }
}
