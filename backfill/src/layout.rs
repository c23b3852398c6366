//! Every key `backfill export` writes under its `--out` URL, and nothing
//! else formats them.
//!
//! ```text
//! <out>/topic=<topic>/partition=<p>/<first:020>-<last:020>.parquet
//!     the records of one source segment whose offsets lie in
//!     first..=last (the segment's shipped offsets clipped to the requested
//!     range, and to the last stable offset), sorted by offset.
//! <out>/_manifest.json                      (an unsharded run, --shard 0/1)
//! <out>/_manifest-<i:05>-of-<n:05>.json     (shard i of n)
//!     the run's summary: every file with its rows and checksums, written
//!     last (see `run_manifest`).
//! ```
//!
//! Invariants: a file's key is a pure function of the topic, the
//! partition and the offsets it covers, so a re-run or a retried shard
//! writes the same keys and never adds a second copy of a row; offsets are
//! zero-padded to 20 digits so that a lexical listing is numeric order; the
//! `topic=`/`partition=` directories are hive keys that DuckDB, Spark,
//! Trino and Athena prune on. Topic names admit only `[A-Za-z0-9._-]`
//! (kafkalog's rules, checked by the manifest), so no key escapes `<out>`.

use crate::select::Shard;

/// The directory of one partition's files under `prefix`.
pub fn partition_dir(prefix: &str, topic: &str, partition: i32) -> String {
    join(prefix, &format!("topic={topic}/partition={partition}"))
}

/// The key of the file holding offsets `first..=last` of a partition.
pub fn file_key(prefix: &str, topic: &str, partition: i32, first: i64, last: i64) -> String {
    format!(
        "{}/{first:020}-{last:020}.parquet",
        partition_dir(prefix, topic, partition)
    )
}

/// The `(first, last)` offsets of a file key of this partition, or `None`
/// for any other key (the inverse of [`file_key`]).
pub fn parse_file_key(prefix: &str, topic: &str, partition: i32, key: &str) -> Option<(i64, i64)> {
    let name = key
        .strip_prefix(&partition_dir(prefix, topic, partition))?
        .strip_prefix('/')?
        .strip_suffix(".parquet")?;
    let (first, last) = name.split_once('-')?;
    if first.len() != 20 || last.len() != 20 {
        return None;
    }
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(first) || !all_digits(last) {
        return None;
    }
    let (first, last) = (first.parse().ok()?, last.parse().ok()?);
    (first <= last).then_some((first, last))
}

/// The key of the run manifest of `shard`.
pub fn run_manifest_key(prefix: &str, shard: Shard) -> String {
    if shard.count == 1 {
        join(prefix, "_manifest.json")
    } else {
        join(
            prefix,
            &format!("_manifest-{:05}-of-{:05}.json", shard.index, shard.count),
        )
    }
}

fn join(prefix: &str, rest: &str) -> String {
    if prefix.is_empty() {
        rest.to_string()
    } else {
        format!("{prefix}/{rest}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_keys_are_named_by_the_offsets_they_cover() {
        assert_eq!(
            file_key("", "orders", 3, 0, 41),
            "topic=orders/partition=3/00000000000000000000-00000000000000000041.parquet"
        );
        assert_eq!(
            file_key("exports/x", "orders", 0, 100, 199),
            "exports/x/topic=orders/partition=0/00000000000000000100-00000000000000000199.parquet"
        );
    }

    #[test]
    fn parsing_is_the_inverse_of_formatting_and_refuses_anything_else() {
        for (prefix, first, last) in [("", 0, 0), ("p/q", 7, i64::MAX), ("p", 5, 9)] {
            let key = file_key(prefix, "t.x-1", 2, first, last);
            assert_eq!(
                parse_file_key(prefix, "t.x-1", 2, &key),
                Some((first, last))
            );
        }
        for bad in [
            "topic=t/partition=2/0-1.parquet",
            "topic=t/partition=2/00000000000000000001-00000000000000000000.parquet",
            "topic=t/partition=2/0000000000000000000a-00000000000000000001.parquet",
            "topic=t/partition=20/00000000000000000000-00000000000000000001.parquet",
            "topic=t/partition=2/00000000000000000000-00000000000000000001.json",
        ] {
            assert_eq!(parse_file_key("", "t", 2, bad), None, "{bad}");
        }
    }

    #[test]
    fn run_manifests_are_one_per_shard() {
        let one = Shard { index: 0, count: 1 };
        assert_eq!(run_manifest_key("", one), "_manifest.json");
        assert_eq!(run_manifest_key("out", one), "out/_manifest.json");
        assert_eq!(
            run_manifest_key(
                "out",
                Shard {
                    index: 2,
                    count: 16
                }
            ),
            "out/_manifest-00002-of-00016.json"
        );
    }
}
