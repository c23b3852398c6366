//! Which partitions a run exports: `--partitions LIST` and `--shard I/N`,
//! as pure values.
//!
//! Sharding: partition `p` of topic `t` belongs to shard
//! `(crc32c(t) + p) mod N`. The assignment depends only on the topic's
//! name and the partition number, never on listing order, on which other
//! topics exist or on how much was shipped: shards started at different
//! times (a Kubernetes Indexed Job's pods, an AWS Batch array's children,
//! a retried index) agree on it, so every partition is exported by exactly
//! one shard. The partitions of one topic go round-robin over the shards,
//! so a topic with at least N partitions is spread evenly.
//!
//! Shards are numbered from 0, as `JOB_COMPLETION_INDEX` and
//! `AWS_BATCH_JOB_ARRAY_INDEX` are; [`Shard::from_env`] reads them.

use std::fmt;
use std::str::FromStr;

/// One shard of a run: `index` of `count` (`0 <= index < count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// This shard's number, from 0.
    pub index: u32,
    /// How many shards the run has.
    pub count: u32,
}

impl Shard {
    /// The whole run in one shard.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Whether partition `partition` of `topic` is this shard's.
    pub fn owns(&self, topic: &str, partition: i32) -> bool {
        let spread =
            u64::from(crc32c::crc32c(topic.as_bytes())) + u64::from(partition.unsigned_abs());
        spread % u64::from(self.count.max(1)) == u64::from(self.index)
    }

    /// The shard the environment names: `JOB_COMPLETION_INDEX` with
    /// `JOB_COMPLETION_COUNT` (a Kubernetes Indexed Job; Kubernetes sets
    /// only the index, so the Job sets the count), else
    /// `AWS_BATCH_JOB_ARRAY_INDEX` with `AWS_BATCH_JOB_ARRAY_SIZE`. `None`
    /// when neither index is set; an error naming the variable when one is
    /// malformed or its count is missing.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Shard>, String> {
        for (index_var, count_var) in [
            ("JOB_COMPLETION_INDEX", "JOB_COMPLETION_COUNT"),
            ("AWS_BATCH_JOB_ARRAY_INDEX", "AWS_BATCH_JOB_ARRAY_SIZE"),
        ] {
            let Some(index) = var(index_var).filter(|v| !v.trim().is_empty()) else {
                continue;
            };
            let count = var(count_var).filter(|v| !v.trim().is_empty()).ok_or_else(|| {
                format!(
                    "{index_var}={index} is set but {count_var} is not: set {count_var} to the number of shards (or pass --shard {index}/N)"
                )
            })?;
            return format!("{}/{}", index.trim(), count.trim())
                .parse()
                .map(Some)
                .map_err(|e| format!("{index_var}={index}, {count_var}={count}: {e}"));
        }
        Ok(None)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("{s:?} is not a shard: expected I/N with 0 <= I < N, e.g. 0/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// A set of partition numbers written `0,2,5-7`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionList(Vec<(i32, i32)>);

impl PartitionList {
    /// Whether `p` is in the list.
    pub fn contains(&self, p: i32) -> bool {
        self.0.iter().any(|&(lo, hi)| lo <= p && p <= hi)
    }
}

impl FromStr for PartitionList {
    type Err = String;

    fn from_str(s: &str) -> Result<PartitionList, String> {
        let mut out = Vec::new();
        for item in s.split(',') {
            let item = item.trim();
            let bad = || format!("{item:?} in {s:?}: expected partition numbers like 0,2,5-7");
            let (lo, hi) = match item.split_once('-') {
                Some((lo, hi)) => (lo.trim(), hi.trim()),
                None => (item, item),
            };
            let lo: i32 = lo.parse().map_err(|_| bad())?;
            let hi: i32 = hi.parse().map_err(|_| bad())?;
            if lo < 0 || hi < lo {
                return Err(bad());
            }
            out.push((lo, hi));
        }
        Ok(PartitionList(out))
    }
}

impl fmt::Display for PartitionList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|&(lo, hi)| {
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}-{hi}")
                }
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_as_index_over_count() {
        assert_eq!("0/1".parse(), Ok(Shard::ALL));
        assert_eq!("3/4".parse(), Ok(Shard { index: 3, count: 4 }));
        for bad in ["4/4", "0/0", "1", "-1/2", "a/b", "1/2/3", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn every_partition_belongs_to_exactly_one_shard() {
        for count in 1..=7u32 {
            for topic in ["orders", "payments", "a", "x.y-z"] {
                for p in 0..50 {
                    let owners = (0..count)
                        .filter(|&index| Shard { index, count }.owns(topic, p))
                        .count();
                    assert_eq!(owners, 1, "{topic}-{p} over {count} shards");
                }
            }
        }
    }

    #[test]
    fn a_topics_partitions_go_round_robin_over_the_shards() {
        let count = 4;
        let mut per_shard = [0; 4];
        for p in 0..16 {
            let owner = (0..count)
                .find(|&index| Shard { index, count }.owns("orders", p))
                .expect("an owner");
            per_shard[owner as usize] += 1;
        }
        assert_eq!(per_shard, [4, 4, 4, 4]);
    }

    #[test]
    fn the_shard_comes_from_the_job_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        type Case<'a> = (&'a [(&'a str, &'a str)], Result<Option<Shard>, ()>);
        let cases: [Case; 6] = [
            (&[], Ok(None)),
            (
                &[("JOB_COMPLETION_INDEX", "2"), ("JOB_COMPLETION_COUNT", "8")],
                Ok(Some(Shard { index: 2, count: 8 })),
            ),
            (
                &[
                    ("AWS_BATCH_JOB_ARRAY_INDEX", "0"),
                    ("AWS_BATCH_JOB_ARRAY_SIZE", "3"),
                ],
                Ok(Some(Shard { index: 0, count: 3 })),
            ),
            (&[("JOB_COMPLETION_INDEX", "2")], Err(())),
            (
                &[("JOB_COMPLETION_INDEX", "8"), ("JOB_COMPLETION_COUNT", "8")],
                Err(()),
            ),
            (&[("JOB_COMPLETION_COUNT", "8")], Ok(None)),
        ];
        for (vars, want) in cases {
            let got = Shard::from_env(env(vars));
            assert_eq!(got.clone().map_err(|_| ()), want, "{vars:?}: {got:?}");
        }
        let e = Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "2")])).expect_err("no count");
        assert!(e.contains("JOB_COMPLETION_COUNT"), "{e}");
    }

    #[test]
    fn partition_lists_take_numbers_and_ranges() {
        let l: PartitionList = "0, 2,5-7".parse().expect("list");
        let hits: Vec<i32> = (0..10).filter(|&p| l.contains(p)).collect();
        assert_eq!(hits, vec![0, 2, 5, 6, 7]);
        assert_eq!(l.to_string(), "0,2,5-7");
        for bad in ["", "a", "3-1", "-1", "1,,2"] {
            assert!(bad.parse::<PartitionList>().is_err(), "{bad}");
        }
    }
}
