//! The source's topic configs on the mirror: what the mirror record keeps
//! of each applied manifest's configs ([`record_configs`]), and what a
//! STOPPED mirror enforces of them as the topic's owner ([`enforce`]).
//!
//! Invariants:
//! - The record holds the manifest's configs through the destination's
//!   [`ConfigFilter`] (`[topic_configs]` of the applier config): a manifest
//!   without configs (no metadata log at the source, or configs it could
//!   not trust) keeps what the record had; one with configs replaces them.
//! - Only a STOPPED mirror enforces (before that the source decides and the
//!   mirror copies the source's log start): retention by time
//!   (`retention.ms`) and by size (`retention.bytes`), exactly as Kafka's
//!   `UnifiedLog` decides them ([`kafkalog::retention::retention_cut`]),
//!   and only when `cleanup.policy` includes `delete`. Whole segments go,
//!   oldest first; when every segment goes, the active one is rolled first
//!   so the log keeps its end offset (an empty log starting there).
//! - Compaction is not performed: a compacted topic's (`cleanup.policy=
//!   compact`) segments are simply not deleted by retention. Its log grows
//!   until an operator compacts it elsewhere; `docs/mirroring.md` says so.
//! - A record without configs (the source's are unknown) enforces nothing:
//!   Kafka's defaults (7 days) are never guessed onto a topic whose source
//!   may have kept it forever.
//! - `max.message.bytes` is the gateway's to enforce on producers
//!   (`gateway::produced::check_max_message_bytes`, which the Produce handler calls).

use std::collections::BTreeMap;

use kafkalog::retention::{RetentionCut, RetentionLimits};
use kafkalog::{PartitionLog, TopicPartition};
use manifest::mirror_record::MirrorRecord;
use manifest::partition::PartitionManifest;
use manifest::state::PartitionState;
use manifest::topic_config::{self, ConfigFilter, ConfigValue, ConfigValueError, Enforcement};

/// Kafka's `log.retention.check.interval.ms` default: how often a broker
/// looks for segments to delete, and how often the engine should call
/// [`enforce`] for each STOPPED partition.
pub const RETENTION_CHECK_INTERVAL_MS: i64 = 300_000;

/// What one retention pass over the mirror partitions does at a time
/// ([`retention_pass`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionPass {
    /// The STOPPED partitions whose check is due now, in order.
    pub due: Vec<TopicPartition>,
    /// When the next check of a STOPPED partition is due (the due ones
    /// counted as checked now); `None` when no partition is STOPPED, so no
    /// pass is needed until one becomes STOPPED.
    pub next_at_ms: Option<i64>,
}

/// The retention pass at `now_ms` over the mirror partitions, each given
/// with its state and when its retention was last checked (`None`: never
/// since this process opened it): the STOPPED ones whose check is due
/// ([`retention_due`]); the others enforce nothing (before the stop the
/// source decides).
pub fn retention_pass<'a>(
    partitions: impl IntoIterator<Item = (&'a TopicPartition, PartitionState, Option<i64>)>,
    now_ms: i64,
) -> RetentionPass {
    let mut pass = RetentionPass::default();
    for (tp, state, last) in partitions {
        if state != PartitionState::Stopped {
            continue;
        }
        let next = if retention_due(last, now_ms) {
            pass.due.push(tp.clone());
            now_ms.saturating_add(RETENTION_CHECK_INTERVAL_MS)
        } else {
            last.map_or(now_ms, |l| l.saturating_add(RETENTION_CHECK_INTERVAL_MS))
        };
        pass.next_at_ms = Some(pass.next_at_ms.map_or(next, |n| n.min(next)));
    }
    pass
}

/// Why retention could not be enforced.
#[derive(Debug, thiserror::Error)]
pub enum EnforceError {
    /// A config value does not parse (named).
    #[error(transparent)]
    Config(#[from] ConfigValueError),
    /// The log could not be read or changed.
    #[error(transparent)]
    Log(#[from] kafkalog::Error),
}

/// Takes `manifest`'s configs into `record` through `filter` (see the
/// module doc). Returns whether the record changed (the caller writes it).
pub fn record_configs(
    record: &mut MirrorRecord,
    manifest: &PartitionManifest,
    filter: &ConfigFilter,
) -> bool {
    let copied = topic_config::copied(
        record.topic_configs.as_ref(),
        manifest.topic_configs.as_ref(),
        filter,
    );
    if copied == record.topic_configs {
        return false;
    }
    record.topic_configs = copied;
    true
}

/// Whether retention is due for a partition last checked at `last_ms`
/// (`None`: never since start), at `now_ms`.
pub fn retention_due(last_ms: Option<i64>, now_ms: i64) -> bool {
    last_ms.is_none_or(|last| now_ms.saturating_sub(last) >= RETENTION_CHECK_INTERVAL_MS)
}

/// Enforces the retention of `configs` (the record's) on the log of a
/// STOPPED mirror partition at `now_ms`: deletes the segments Kafka would
/// and raises the log start offset
/// ([`PartitionLog::delete_old_segments`]). Returns the cut, `None` when
/// nothing went (no configs, no `delete` policy, nothing old or large
/// enough).
pub fn enforce(
    log: &mut PartitionLog,
    configs: Option<&BTreeMap<String, ConfigValue>>,
    now_ms: i64,
) -> Result<Option<RetentionCut>, EnforceError> {
    let Some(configs) = configs else {
        return Ok(None);
    };
    let rules = Enforcement::of(configs)?;
    if !rules.delete {
        return Ok(None);
    }
    let limits = RetentionLimits {
        retention_ms: rules.retention_ms,
        retention_bytes: rules.retention_bytes,
    };
    Ok(log.delete_old_segments(limits, now_ms)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
    use kafkalog::retention::RetentionReason;
    use kafkalog::{LogConfig, LogDir, TopicPartition};
    use manifest::topic_config::ConfigSource;

    const DAY: i64 = 86_400_000;
    const NOW: i64 = 100 * DAY;

    fn configs(kv: &[(&str, &str)]) -> BTreeMap<String, ConfigValue> {
        kv.iter()
            .map(|(k, v)| {
                let value = ConfigValue {
                    value: v.to_string(),
                    source: ConfigSource::Topic,
                };
                (k.to_string(), value)
            })
            .collect()
    }

    /// A log of three segments (offsets 0, 1, 2, one record each, 100 bytes
    /// of value) whose records are `ages` days old.
    fn log(root: &std::path::Path, ages: [i64; 3]) -> PartitionLog {
        let dir = LogDir::open(root).expect("open");
        let tp = TopicPartition::new("orders", 0).expect("tp");
        let mut log = dir
            .open_or_create_partition(&tp, None, LogConfig::default())
            .expect("create");
        for (offset, age) in ages.iter().enumerate() {
            let offset = offset as i64;
            if offset > 0 {
                log.roll_to(offset).expect("roll");
            }
            let record = RecordInput {
                timestamp: NOW - age * DAY,
                key: None,
                value: Some(vec![b'x'; 100]),
                headers: vec![],
            };
            let batch = build_batch(&BatchSpec::new(offset, 0), &[record]).expect("batch");
            log.append_replicated(&batch).expect("append");
        }
        log
    }

    /// One row: the configs (`None`: the record has none), the ages of the
    /// three segments, the expected (new log start, reason).
    fn enforces(kv: Option<&[(&str, &str)]>, ages: [i64; 3], want: Option<(i64, RetentionReason)>) {
        let root = tempfile::tempdir().expect("tempdir");
        let mut log = log(root.path(), ages);
        let c = kv.map(configs);
        let got = enforce(&mut log, c.as_ref(), NOW).expect("enforce");
        assert_eq!(got.map(|c| (c.new_log_start, c.reason)), want, "{kv:?}");
        let start = want.map_or(0, |(s, _)| s);
        assert_eq!(log.log_start_offset(), start);
        assert_eq!(log.log_end_offset(), 3, "the log end never moves");
        assert_eq!(
            log.segment_base_offsets().first().copied(),
            Some(start),
            "the segments below the log start are deleted"
        );
        // Nothing left for a second pass.
        assert_eq!(enforce(&mut log, c.as_ref(), NOW).expect("again"), None);
    }

    #[test]
    fn no_configs_enforce_nothing() {
        enforces(None, [30, 20, 10], None);
    }

    #[test]
    fn kafkas_default_retention_of_7_days() {
        enforces(Some(&[]), [30, 20, 1], Some((2, RetentionReason::Time)));
    }

    #[test]
    fn retention_ms() {
        enforces(
            Some(&[("retention.ms", &(15 * DAY).to_string())]),
            [30, 20, 10],
            Some((2, RetentionReason::Time)),
        );
    }

    #[test]
    fn unlimited_retention_keeps_everything() {
        enforces(Some(&[("retention.ms", "-1")]), [30, 20, 10], None);
    }

    #[test]
    fn retention_bytes_keeps_the_newest_under_the_limit() {
        // Each segment holds one batch of 100 value bytes (~170 bytes): a
        // 100-byte limit keeps only the newest (Kafka deletes while what
        // is left is still at least the limit).
        enforces(
            Some(&[("retention.ms", "-1"), ("retention.bytes", "100")]),
            [3, 2, 1],
            Some((2, RetentionReason::Size)),
        );
    }

    #[test]
    fn a_compacted_topic_is_not_deleted_by_retention() {
        enforces(
            Some(&[("cleanup.policy", "compact"), ("retention.ms", "1")]),
            [30, 20, 10],
            None,
        );
    }

    #[test]
    fn compact_and_delete_is_deleted_by_retention() {
        enforces(
            Some(&[("cleanup.policy", "compact,delete"), ("retention.ms", "1")]),
            [30, 20, 10],
            Some((3, RetentionReason::Time)),
        );
    }

    #[test]
    fn every_segment_going_rolls_first_and_keeps_the_log_end() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut log = log(root.path(), [30, 20, 10]);
        let c = configs(&[("retention.ms", "1")]);
        let cut = enforce(&mut log, Some(&c), NOW)
            .expect("enforce")
            .expect("a cut");
        assert_eq!((cut.new_log_start, cut.segments), (3, 3));
        assert_eq!(log.segment_base_offsets(), [3]);
        assert_eq!(log.size_bytes(), 0);
        // A producer's next record gets offset 3.
        let record = RecordInput {
            timestamp: NOW,
            key: None,
            value: Some(b"after".to_vec()),
            headers: vec![],
        };
        let mut batch = build_batch(&BatchSpec::new(0, -1), &[record]).expect("batch");
        let info = log.append_as_leader(&mut batch, 0).expect("append");
        assert_eq!(info.first_offset, 3);
    }

    #[test]
    fn an_invalid_config_is_an_error_naming_it_and_changes_nothing() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut log = log(root.path(), [30, 20, 10]);
        let c = configs(&[("retention.ms", "a week")]);
        let e = enforce(&mut log, Some(&c), NOW).expect_err("an error");
        assert!(e.to_string().contains("retention.ms"), "{e}");
        assert_eq!(log.segment_base_offsets(), [0, 1, 2]);
    }

    #[test]
    fn record_configs_by_row() {
        let filter = ConfigFilter::new(&[], &[]).expect("filter");
        let mut record = manifest::mirror_record::fixtures::sample();
        let tp = TopicPartition::new("orders", 0).expect("tp");
        let mut m = PartitionManifest::new("src-1", &tp, record.topic_id);
        // No configs in the manifest: nothing changes.
        assert!(!record_configs(&mut record, &m, &filter));
        assert_eq!(record.topic_configs, None);
        // Configs: copied through the filter.
        m.topic_configs = Some(configs(&[
            ("retention.ms", "1000"),
            ("min.insync.replicas", "2"),
        ]));
        assert!(record_configs(&mut record, &m, &filter));
        assert_eq!(
            record.topic_configs,
            Some(configs(&[("retention.ms", "1000")]))
        );
        // The same again: unchanged.
        assert!(!record_configs(&mut record, &m, &filter));
        // A later manifest without configs keeps them.
        m.topic_configs = None;
        assert!(!record_configs(&mut record, &m, &filter));
        assert!(record.topic_configs.is_some());
    }

    /// One row: each partition's (state, last check), the partitions due
    /// at `NOW` and when the next pass is.
    fn pass(rows: &[(PartitionState, Option<i64>)], due: &[i32], next: Option<i64>) {
        let tps: Vec<TopicPartition> = (0..rows.len())
            .map(|p| TopicPartition::new("orders", p as i32).expect("tp"))
            .collect();
        let got = retention_pass(
            tps.iter()
                .zip(rows)
                .map(|(tp, &(state, last))| (tp, state, last)),
            NOW,
        );
        let due: Vec<TopicPartition> = due.iter().map(|&p| tps[p as usize].clone()).collect();
        assert_eq!(
            got,
            RetentionPass {
                due,
                next_at_ms: next
            },
            "{rows:?}"
        );
    }

    const CHECK: i64 = RETENTION_CHECK_INTERVAL_MS;

    #[test]
    fn retention_pass_by_row() {
        use PartitionState as S;
        // No partition: nothing due, no next pass.
        pass(&[], &[], None);
        // Only STOPPED partitions are checked; the others never.
        for s in [
            S::Preparing,
            S::Mirroring,
            S::Paused,
            S::Stopping,
            S::Failed,
        ] {
            pass(&[(s, None)], &[], None);
        }
        // A STOPPED partition never checked since start: due now.
        pass(&[(S::Stopped, None)], &[0], Some(NOW + CHECK));
        // Checked a minute ago: due four minutes from now.
        pass(
            &[(S::Stopped, Some(NOW - 60_000))],
            &[],
            Some(NOW - 60_000 + CHECK),
        );
        // Checked five minutes ago: due.
        pass(&[(S::Stopped, Some(NOW - CHECK))], &[0], Some(NOW + CHECK));
        // The next pass is the earliest of them.
        pass(
            &[
                (S::Stopped, Some(NOW - 60_000)),
                (S::Mirroring, None),
                (S::Stopped, Some(NOW - 120_000)),
                (S::Stopped, None),
            ],
            &[3],
            Some(NOW - 120_000 + CHECK),
        );
    }

    #[test]
    fn retention_is_due_every_five_minutes() {
        assert!(retention_due(None, 0));
        assert!(!retention_due(
            Some(1_000),
            1_000 + RETENTION_CHECK_INTERVAL_MS - 1
        ));
        assert!(retention_due(
            Some(1_000),
            1_000 + RETENTION_CHECK_INTERVAL_MS
        ));
    }
}
