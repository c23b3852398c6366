//! `meta.properties`: the identity of a broker's log dir.
//!
//! A Java properties file (read by [`crate::properties`]), as Kafka's
//! `MetaProperties` writes it:
//!
//! - `version=1` (KRaft): `node.id` and `cluster.id` are required;
//!   `directory.id` (a 22-character Kafka UUID, written since 3.7) is
//!   optional.
//! - `version=0` (ZooKeeper era, may survive a migration): `broker.id`,
//!   optional `cluster.id`. A missing `version` means 0.
//!
//! Invariants: the file is read with a bound ([`MAX_BYTES`]); every
//! malformed or missing field is an error naming it; nothing panics.

use std::path::{Path, PathBuf};

use kafkalog::TopicId;

use crate::error::{Error, Result};

/// The file name inside a log dir.
pub const FILE_NAME: &str = "meta.properties";
/// Largest `meta.properties` read (it is a few hundred bytes).
pub const MAX_BYTES: u64 = 64 << 10;

/// What `meta.properties` says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MetaProperties {
    /// 0 (ZooKeeper era) or 1 (KRaft).
    pub version: u32,
    /// `node.id` (v1) or `broker.id` (v0).
    pub node_id: i32,
    /// `cluster.id` (required in v1).
    pub cluster_id: Option<String>,
    /// `directory.id` (v1, since 3.7).
    pub directory_id: Option<TopicId>,
}

/// Parses the text of a `meta.properties` file.
pub fn parse(text: &str) -> Result<MetaProperties, String> {
    let props = crate::properties::parse(text)?;
    let int = |key: &str| -> Result<Option<i64>, String> {
        props
            .get(key)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("{key}={v:?} is not a number"))
            })
            .transpose()
    };
    let version = int("version")?.unwrap_or(0);
    let id_key = match version {
        0 => "broker.id",
        1 => "node.id",
        v => return Err(format!("version={v}: only 0 and 1 exist")),
    };
    let node_id = int(id_key)?.ok_or_else(|| format!("{id_key} missing"))?;
    let node_id = i32::try_from(node_id)
        .ok()
        .filter(|id| *id >= 0)
        .ok_or_else(|| format!("{id_key}={node_id} is not a broker id"))?;
    let cluster_id = props.get("cluster.id").map(|s| s.to_string());
    if version == 1 && cluster_id.is_none() {
        return Err("cluster.id missing (required with version=1)".into());
    }
    let directory_id = props
        .get("directory.id")
        .map(|s| TopicId::parse_kafka(s).map_err(|e| format!("directory.id: {e}")))
        .transpose()?;
    Ok(MetaProperties {
        version: version as u32,
        node_id,
        cluster_id,
        directory_id,
    })
}

/// The path of `meta.properties` in `log_dir`.
pub fn path(log_dir: &Path) -> PathBuf {
    log_dir.join(FILE_NAME)
}

/// Reads `log_dir/meta.properties`; `Ok(None)` when there is none.
pub fn read(log_dir: &Path) -> Result<Option<MetaProperties>> {
    let path = path(log_dir);
    let text = match kafkalog::fsutil::read_to_string_bounded(&path, MAX_BYTES) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", &path)(e)),
    };
    parse(&text)
        .map(Some)
        .map_err(|reason| Error::MetaProperties { path, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_fields() {
        // (text, expected node id, cluster id, has directory id) or error.
        let ok: &[(&str, i32, Option<&str>, bool)] = &[
            // As 3.4 writes it: no directory.id.
            (
                "#\n#Thu Jan 01 00:00:00 UTC 2024\nnode.id=1\nversion=1\ncluster.id=Mk3OEYBSD34fcwNTJENDM2Qk\n",
                1,
                Some("Mk3OEYBSD34fcwNTJENDM2Qk"),
                false,
            ),
            // As 3.7 writes it.
            (
                "version=1\nnode.id=3\ncluster.id=abc\ndirectory.id=7Wc5c1XaQ8GhdAFCtW3Hqw\n",
                3,
                Some("abc"),
                true,
            ),
            // ZooKeeper era: broker.id, optional cluster id, no version.
            ("broker.id=7\n", 7, None, false),
            (
                "version=0\nbroker.id=2\ncluster.id=x\n",
                2,
                Some("x"),
                false,
            ),
        ];
        for (text, node, cluster, dir) in ok {
            let m = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(m.node_id, *node, "{text:?}");
            assert_eq!(m.cluster_id.as_deref(), *cluster, "{text:?}");
            assert_eq!(m.directory_id.is_some(), *dir, "{text:?}");
        }
        let bad: &[(&str, &str)] = &[
            ("version=1\ncluster.id=x\n", "node.id missing"),
            ("version=1\nnode.id=1\n", "cluster.id missing"),
            ("version=2\nnode.id=1\n", "only 0 and 1"),
            ("version=1\nnode.id=-1\ncluster.id=x\n", "not a broker id"),
            ("version=1\nnode.id=one\ncluster.id=x\n", "not a number"),
            (
                "version=1\nnode.id=1\ncluster.id=x\ndirectory.id=nope\n",
                "directory.id",
            ),
            // Java reads a line without a separator as a key with no value.
            ("garbage\n", "broker.id missing"),
        ];
        for (text, want) in bad {
            let e = parse(text).expect_err(text);
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_huge_file_is_refused_without_reading_it_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(path(dir.path()), vec![b'#'; (MAX_BYTES + 10) as usize]).expect("write");
        assert!(read(dir.path()).is_err());
        let empty = tempfile::tempdir().expect("tempdir");
        assert_eq!(read(empty.path()).expect("absent"), None);
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_fails_without_panicking(text in "[a-z.=#!0-9 \n-]{0,200}") {
            let _ = parse(&text);
        }
    }
}
