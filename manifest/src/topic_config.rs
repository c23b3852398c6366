//! A source topic's configs as a mirror takes them: the effective value of
//! each key, where it came from, whether the mirror copies it, and what the
//! mirror enforces once it is the topic's owner (after failover).
//!
//! The source's KRaft metadata log holds only explicit overrides. The
//! effective value of a topic config is the first of (Kafka's
//! `DescribeConfigs` order, the [`ConfigSource`]s):
//!
//! 1. the topic's own `ConfigRecord` ([`ConfigSource::Topic`]);
//! 2. the broker's dynamic config under the broker name of the key
//!    ([`ConfigSource::DynamicBroker`]);
//! 3. the dynamic cluster default, same broker name
//!    ([`ConfigSource::DynamicClusterDefault`]);
//! 4. the broker's static `server.properties`, same broker name
//!    ([`ConfigSource::StaticBroker`]);
//! 5. Kafka's default ([`ConfigSource::Default`]).
//!
//! A broker name that has unit variants (`log.retention.ms`, `.minutes`,
//! `.hours`) takes, within the broker layers merged (dynamic over static),
//! the finest unit present, as Kafka's `KafkaConfig` does; the value is
//! converted to the topic key's unit.
//!
//! Which keys are copied is a [`ConfigFilter`]: every key but the default
//! exclusions ([`DEFAULT_EXCLUDED`], each with its reason: replication and
//! placement belong to the destination cluster, and a tiered source's
//! `remote.storage.enable=true` would make every mirror partition fail), with
//! the operator's own `exclude` patterns on top and `include` patterns that
//! take a default exclusion back. An operator's exclude always wins.
//!
//! Everything here is pure and total: a value that does not parse is a
//! [`ConfigValueError`] naming the key, never a panic.

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// Where an effective config value came from (Kafka's `ConfigSource`, whose
/// wire code [`ConfigSource::kafka_code`] gives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigSource {
    /// The topic's own override.
    Topic,
    /// The broker's dynamic config (per node).
    DynamicBroker,
    /// The dynamic default for every broker of the cluster.
    DynamicClusterDefault,
    /// The broker's `server.properties`.
    StaticBroker,
    /// Kafka's built-in default.
    Default,
}

impl ConfigSource {
    /// The code `DescribeConfigs` (v1+) answers for this source.
    pub fn kafka_code(self) -> i8 {
        match self {
            ConfigSource::Topic => 1,
            ConfigSource::DynamicBroker => 2,
            ConfigSource::DynamicClusterDefault => 3,
            ConfigSource::StaticBroker => 4,
            ConfigSource::Default => 5,
        }
    }
}

/// One effective config value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigValue {
    /// The value as Kafka writes it.
    pub value: String,
    /// Where it came from.
    pub source: ConfigSource,
}

/// The config layers of one source broker, as read from its metadata log
/// (and, when given, its `server.properties`).
#[derive(Debug, Clone, Copy)]
pub struct ConfigLayers<'a> {
    /// The topic's overrides.
    pub topic: &'a BTreeMap<String, String>,
    /// This broker's dynamic configs (empty when none).
    pub broker: &'a BTreeMap<String, String>,
    /// The cluster-wide dynamic defaults.
    pub cluster: &'a BTreeMap<String, String>,
    /// The broker's static properties (empty when not given).
    pub static_props: &'a BTreeMap<String, String>,
}

/// How a topic key maps to broker config names: the names, finest unit
/// first, each with its multiplier to the topic key's unit.
fn broker_names(key: &str) -> &'static [(&'static str, i64)] {
    match key {
        "retention.ms" => &[
            ("log.retention.ms", 1),
            ("log.retention.minutes", 60_000),
            ("log.retention.hours", 3_600_000),
        ],
        "segment.ms" => &[("log.roll.ms", 1), ("log.roll.hours", 3_600_000)],
        "retention.bytes" => &[("log.retention.bytes", 1)],
        "cleanup.policy" => &[("log.cleanup.policy", 1)],
        "segment.bytes" => &[("log.segment.bytes", 1)],
        "max.message.bytes" => &[("message.max.bytes", 1)],
        "min.insync.replicas" => &[("min.insync.replicas", 1)],
        "compression.type" => &[("compression.type", 1)],
        "message.timestamp.type" => &[("log.message.timestamp.type", 1)],
        "delete.retention.ms" => &[("log.cleaner.delete.retention.ms", 1)],
        "min.compaction.lag.ms" => &[("log.cleaner.min.compaction.lag.ms", 1)],
        "max.compaction.lag.ms" => &[("log.cleaner.max.compaction.lag.ms", 1)],
        "min.cleanable.dirty.ratio" => &[("log.cleaner.min.cleanable.ratio", 1)],
        "segment.index.bytes" => &[("log.index.size.max.bytes", 1)],
        "index.interval.bytes" => &[("log.index.interval.bytes", 1)],
        "file.delete.delay.ms" => &[("log.segment.delete.delay.ms", 1)],
        "preallocate" => &[("log.preallocate", 1)],
        "unclean.leader.election.enable" => &[("unclean.leader.election.enable", 1)],
        "local.retention.ms" => &[("log.local.retention.ms", 1)],
        "local.retention.bytes" => &[("log.local.retention.bytes", 1)],
        _ => &[],
    }
}

/// Kafka's defaults (3.x/4.x) of the topic configs a mirror reports.
pub const KAFKA_DEFAULTS: &[(&str, &str)] = &[
    ("cleanup.policy", "delete"),
    ("compression.type", "producer"),
    ("delete.retention.ms", "86400000"),
    ("file.delete.delay.ms", "60000"),
    ("index.interval.bytes", "4096"),
    ("local.retention.bytes", "-2"),
    ("local.retention.ms", "-2"),
    ("max.compaction.lag.ms", "9223372036854775807"),
    ("max.message.bytes", "1048588"),
    ("message.timestamp.type", "CreateTime"),
    ("min.cleanable.dirty.ratio", "0.5"),
    ("min.compaction.lag.ms", "0"),
    ("min.insync.replicas", "1"),
    ("preallocate", "false"),
    ("remote.storage.enable", "false"),
    ("retention.bytes", "-1"),
    ("retention.ms", "604800000"),
    ("segment.bytes", "1073741824"),
    ("segment.index.bytes", "10485760"),
    ("segment.ms", "604800000"),
    ("unclean.leader.election.enable", "false"),
];

/// The effective value of topic config `key`, or `None` when no layer sets
/// it and Kafka has no default this module knows.
pub fn effective(
    key: &str,
    layers: &ConfigLayers<'_>,
) -> Result<Option<ConfigValue>, ConfigValueError> {
    if let Some(v) = layers.topic.get(key) {
        return Ok(Some(ConfigValue {
            value: v.clone(),
            source: ConfigSource::Topic,
        }));
    }
    let names = broker_names(key);
    // Within the broker layers, the finest unit present in any of them
    // wins; for one name, the dynamic broker config over the cluster
    // default over the static file.
    for (name, unit) in names {
        for (layer, source) in [
            (layers.broker, ConfigSource::DynamicBroker),
            (layers.cluster, ConfigSource::DynamicClusterDefault),
            (layers.static_props, ConfigSource::StaticBroker),
        ] {
            let Some(raw) = layer.get(*name) else {
                continue;
            };
            let value = if *unit == 1 {
                raw.trim().to_string()
            } else {
                let n: i64 = raw.trim().parse().map_err(|_| ConfigValueError {
                    key: (*name).to_string(),
                    value: raw.clone(),
                    expected: "an integer",
                })?;
                // -1 (unlimited) stays -1 in every unit.
                if n < 0 {
                    n.to_string()
                } else {
                    n.saturating_mul(*unit).to_string()
                }
            };
            return Ok(Some(ConfigValue { value, source }));
        }
    }
    Ok(KAFKA_DEFAULTS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| ConfigValue {
            value: (*v).to_string(),
            source: ConfigSource::Default,
        }))
}

/// Every topic config a mirror reports for one topic: the topic's own
/// overrides, and every key Kafka has a default for, resolved.
pub fn resolve_all(
    layers: &ConfigLayers<'_>,
) -> Result<BTreeMap<String, ConfigValue>, ConfigValueError> {
    let mut keys: Vec<&str> = KAFKA_DEFAULTS.iter().map(|(k, _)| *k).collect();
    keys.extend(layers.topic.keys().map(String::as_str));
    let mut out = BTreeMap::new();
    for key in keys {
        if let Some(v) = effective(key, layers)? {
            out.insert(key.to_string(), v);
        }
    }
    Ok(out)
}

/// The keys a mirror does not copy unless an operator's `include` takes
/// them back, each with the reason shown by `plan` and `status`.
pub const DEFAULT_EXCLUDED: &[(&str, &str)] = &[
    (
        r"min\.insync\.replicas",
        "a replication setting: the destination cluster sets its own durability",
    ),
    (
        r"(leader|follower)\.replication\.throttled\.replicas",
        "names the source's broker ids",
    ),
    (
        r"unclean\.leader\.election\.enable",
        "the destination's availability choice, not the data's",
    ),
    (
        r"remote\.storage\.enable|local\.retention\.(ms|bytes)|remote\.log\..*",
        "tiered storage: a tiered source's setting would make every mirror partition fail",
    ),
    (
        r"confluent\..*",
        "vendor placement and features of the source cluster",
    ),
];

/// Why a key is or is not copied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "decision", content = "reason")]
pub enum FilterDecision {
    /// Copied to the mirror.
    Copied,
    /// Copied because an operator's `include` took back a default exclusion.
    Included,
    /// Not copied: a default exclusion (its reason).
    ExcludedByDefault(String),
    /// Not copied: an operator's `exclude` pattern (the pattern).
    ExcludedByOperator(String),
}

impl FilterDecision {
    /// Whether the key is copied.
    pub fn copied(&self) -> bool {
        matches!(self, FilterDecision::Copied | FilterDecision::Included)
    }
}

/// Which config keys a mirror copies: the defaults above plus an
/// operator's whole-key regexes.
#[derive(Debug, Clone)]
pub struct ConfigFilter {
    defaults: Vec<(Regex, &'static str)>,
    include: Vec<(String, Regex)>,
    exclude: Vec<(String, Regex)>,
}

impl Default for ConfigFilter {
    /// The default exclusions alone ([`DEFAULT_EXCLUDED`]).
    fn default() -> ConfigFilter {
        #[allow(clippy::expect_used)] // constants, checked by a test
        ConfigFilter::new(&[], &[]).expect("the default exclusions are valid regexes")
    }
}

impl ConfigFilter {
    /// The filter with the default exclusions and the operator's patterns
    /// (whole-key regexes). An invalid pattern is an error naming it.
    pub fn new(include: &[String], exclude: &[String]) -> Result<ConfigFilter, String> {
        let whole = |p: &str| crate::name_regex::whole_name(p);
        let defaults = DEFAULT_EXCLUDED
            .iter()
            .map(|(p, why)| whole(p).map(|r| (r, *why)))
            .collect::<Result<_, _>>()?;
        let user = |ps: &[String]| -> Result<Vec<(String, Regex)>, String> {
            ps.iter()
                .map(|p| whole(p).map(|r| (p.clone(), r)))
                .collect()
        };
        Ok(ConfigFilter {
            defaults,
            include: user(include)?,
            exclude: user(exclude)?,
        })
    }

    /// Whether `key` is copied, and why.
    pub fn decide(&self, key: &str) -> FilterDecision {
        if let Some((p, _)) = self.exclude.iter().find(|(_, r)| r.is_match(key)) {
            return FilterDecision::ExcludedByOperator(p.clone());
        }
        match self.defaults.iter().find(|(r, _)| r.is_match(key)) {
            Some(_) if self.include.iter().any(|(_, r)| r.is_match(key)) => {
                FilterDecision::Included
            }
            Some((_, why)) => FilterDecision::ExcludedByDefault((*why).to_string()),
            None => FilterDecision::Copied,
        }
    }

    /// The copied subset of `configs`.
    pub fn apply(&self, configs: &BTreeMap<String, ConfigValue>) -> BTreeMap<String, ConfigValue> {
        configs
            .iter()
            .filter(|(k, _)| self.decide(k).copied())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// A config value that does not parse as its key requires.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config {key}={value:?}: expected {expected}")]
pub struct ConfigValueError {
    /// The key.
    pub key: String,
    /// The value found.
    pub value: String,
    /// What it should be.
    pub expected: &'static str,
}

/// What a mirror enforces once it owns the topic (STOPPED): retention by
/// time and size, the cleanup policy, the largest batch a producer may
/// write. Before that the source decides, and the mirror only copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// `retention.ms`; `None` when unlimited (-1).
    pub retention_ms: Option<i64>,
    /// `retention.bytes` per partition; `None` when unlimited (-1).
    pub retention_bytes: Option<i64>,
    /// `cleanup.policy` contains `delete`: old segments are deleted by
    /// retention.
    pub delete: bool,
    /// `cleanup.policy` contains `compact`.
    pub compact: bool,
    /// `max.message.bytes`: the largest record batch a producer may write.
    pub max_message_bytes: i32,
}

impl Enforcement {
    /// The enforcement of a topic's effective configs (Kafka's defaults for
    /// keys not present).
    pub fn of(configs: &BTreeMap<String, ConfigValue>) -> Result<Enforcement, ConfigValueError> {
        let get = |k: &str| -> String {
            configs.get(k).map(|v| v.value.clone()).unwrap_or_else(|| {
                KAFKA_DEFAULTS
                    .iter()
                    .find(|(d, _)| *d == k)
                    .map(|(_, v)| (*v).to_string())
                    .unwrap_or_default()
            })
        };
        let int = |k: &str| -> Result<i64, ConfigValueError> {
            let v = get(k);
            v.trim().parse().map_err(|_| ConfigValueError {
                key: k.into(),
                value: v,
                expected: "an integer",
            })
        };
        let limit = |k: &str| -> Result<Option<i64>, ConfigValueError> {
            Ok(match int(k)? {
                n if n < 0 => None,
                n => Some(n),
            })
        };
        let policy = get("cleanup.policy");
        let mut delete = false;
        let mut compact = false;
        for p in policy.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p {
                "delete" => delete = true,
                "compact" => compact = true,
                _ => {
                    return Err(ConfigValueError {
                        key: "cleanup.policy".into(),
                        value: policy.clone(),
                        expected: "delete, compact or both",
                    });
                }
            }
        }
        let max = int("max.message.bytes")?;
        let max_message_bytes =
            i32::try_from(max)
                .ok()
                .filter(|m| *m >= 0)
                .ok_or(ConfigValueError {
                    key: "max.message.bytes".into(),
                    value: max.to_string(),
                    expected: "an integer from 0 to 2147483647",
                })?;
        Ok(Enforcement {
            retention_ms: limit("retention.ms")?,
            retention_bytes: limit("retention.bytes")?,
            delete,
            compact,
            max_message_bytes,
        })
    }
}

/// The configs a mirror record keeps after applying a manifest: the
/// manifest's configs through `filter` when it carries any, else what the
/// record had (`record`): a manifest without configs (a shipper without a
/// metadata log, or one that could not trust what it read) never erases
/// what an earlier one brought.
pub fn copied(
    record: Option<&BTreeMap<String, ConfigValue>>,
    manifest: Option<&BTreeMap<String, ConfigValue>>,
    filter: &ConfigFilter,
) -> Option<BTreeMap<String, ConfigValue>> {
    match manifest {
        Some(m) => Some(filter.apply(m)),
        None => record.cloned(),
    }
}

/// The broker config name (finest unit) a topic config `key` falls back
/// to, for `DescribeConfigs` synonyms; `None` for a topic-only key.
pub fn broker_name(key: &str) -> Option<&'static str> {
    broker_names(key).first().map(|(name, _)| *name)
}

/// Whether a topic's effective configs on the destination make it a tiered
/// topic (`remote.storage.enable=true`), which a mirror cannot be.
pub fn is_tiered(configs: &BTreeMap<String, ConfigValue>) -> bool {
    configs
        .get(REMOTE_STORAGE_ENABLE)
        .is_some_and(|v| enables_remote_storage(&v.value))
}

/// The topic config that turns tiered storage on.
pub const REMOTE_STORAGE_ENABLE: &str = "remote.storage.enable";

/// Whether a value of `remote.storage.enable` turns it on (Kafka reads
/// booleans case-insensitively, around blanks).
pub fn enables_remote_storage(value: &str) -> bool {
    value.trim().eq_ignore_ascii_case("true")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// One row: topic, broker, cluster and static layers, a key, the
    /// expected value and source (`None`: no value).
    fn resolves(
        topic: &[(&str, &str)],
        broker: &[(&str, &str)],
        cluster: &[(&str, &str)],
        statics: &[(&str, &str)],
        key: &str,
        want: Option<(&str, ConfigSource)>,
    ) {
        let (t, b, c, s) = (map(topic), map(broker), map(cluster), map(statics));
        let layers = ConfigLayers {
            topic: &t,
            broker: &b,
            cluster: &c,
            static_props: &s,
        };
        let got = effective(key, &layers).expect("valid");
        assert_eq!(
            got.as_ref().map(|v| (v.value.as_str(), v.source)),
            want,
            "{key} from topic {topic:?} broker {broker:?} cluster {cluster:?} static {statics:?}"
        );
    }

    #[test]
    fn a_topic_override_wins_over_every_broker_layer() {
        resolves(
            &[("retention.ms", "1000")],
            &[("log.retention.ms", "2000")],
            &[("log.retention.ms", "3000")],
            &[("log.retention.ms", "4000")],
            "retention.ms",
            Some(("1000", ConfigSource::Topic)),
        );
    }

    #[test]
    fn the_broker_dynamic_config_wins_over_the_cluster_default() {
        resolves(
            &[],
            &[("log.retention.bytes", "2000")],
            &[("log.retention.bytes", "3000")],
            &[],
            "retention.bytes",
            Some(("2000", ConfigSource::DynamicBroker)),
        );
    }

    #[test]
    fn the_cluster_default_wins_over_the_static_file() {
        resolves(
            &[],
            &[],
            &[("log.cleanup.policy", "compact")],
            &[("log.cleanup.policy", "delete")],
            "cleanup.policy",
            Some(("compact", ConfigSource::DynamicClusterDefault)),
        );
    }

    #[test]
    fn the_static_file_wins_over_kafkas_default() {
        resolves(
            &[],
            &[],
            &[],
            &[("log.segment.bytes", "1048576")],
            "segment.bytes",
            Some(("1048576", ConfigSource::StaticBroker)),
        );
    }

    #[test]
    fn kafkas_default_when_no_layer_sets_the_key() {
        resolves(
            &[],
            &[],
            &[],
            &[],
            "retention.ms",
            Some(("604800000", ConfigSource::Default)),
        );
    }

    #[test]
    fn retention_hours_are_converted_to_milliseconds() {
        resolves(
            &[],
            &[],
            &[],
            &[("log.retention.hours", "168")],
            "retention.ms",
            Some(("604800000", ConfigSource::StaticBroker)),
        );
    }

    #[test]
    fn the_finest_retention_unit_wins_across_layers() {
        // Kafka: log.retention.ms over .minutes over .hours, whatever layer
        // each comes from.
        resolves(
            &[],
            &[("log.retention.hours", "1")],
            &[],
            &[("log.retention.minutes", "2")],
            "retention.ms",
            Some(("120000", ConfigSource::StaticBroker)),
        );
    }

    #[test]
    fn unlimited_retention_stays_minus_one_in_any_unit() {
        resolves(
            &[],
            &[],
            &[],
            &[("log.retention.hours", "-1")],
            "retention.ms",
            Some(("-1", ConfigSource::StaticBroker)),
        );
    }

    #[test]
    fn max_message_bytes_has_a_different_broker_name() {
        resolves(
            &[],
            &[],
            &[("message.max.bytes", "2000000")],
            &[],
            "max.message.bytes",
            Some(("2000000", ConfigSource::DynamicClusterDefault)),
        );
    }

    #[test]
    fn remote_storage_enable_has_no_broker_default() {
        resolves(
            &[],
            &[("remote.storage.enable", "true")],
            &[],
            &[],
            "remote.storage.enable",
            Some(("false", ConfigSource::Default)),
        );
    }

    #[test]
    fn an_unknown_key_without_override_has_no_value() {
        resolves(&[], &[], &[], &[], "some.plugin.key", None);
    }

    #[test]
    fn a_broker_unit_value_that_is_not_a_number_is_an_error_naming_it() {
        let (t, b, c, s) = (
            map(&[]),
            map(&[]),
            map(&[]),
            map(&[("log.retention.hours", "a week")]),
        );
        let layers = ConfigLayers {
            topic: &t,
            broker: &b,
            cluster: &c,
            static_props: &s,
        };
        let e = effective("retention.ms", &layers).expect_err("an error");
        assert_eq!(e.key, "log.retention.hours");
    }

    #[test]
    fn resolve_all_reports_overrides_and_defaults() {
        let (t, e) = (
            map(&[("cleanup.policy", "compact"), ("x.custom", "1")]),
            map(&[]),
        );
        let layers = ConfigLayers {
            topic: &t,
            broker: &e,
            cluster: &e,
            static_props: &e,
        };
        let all = resolve_all(&layers).expect("valid");
        assert_eq!(all["cleanup.policy"].source, ConfigSource::Topic);
        assert_eq!(all["x.custom"].value, "1");
        assert_eq!(all["retention.ms"].source, ConfigSource::Default);
        assert_eq!(all.len(), KAFKA_DEFAULTS.len() + 1);
    }

    fn decides(include: &[&str], exclude: &[&str], key: &str, want: &str) {
        let s = |v: &[&str]| v.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let f = ConfigFilter::new(&s(include), &s(exclude)).expect("valid");
        let got = match f.decide(key) {
            FilterDecision::Copied => "copied",
            FilterDecision::Included => "included",
            FilterDecision::ExcludedByDefault(_) => "excluded by default",
            FilterDecision::ExcludedByOperator(_) => "excluded by operator",
        };
        assert_eq!(
            got, want,
            "{key} with include {include:?} exclude {exclude:?}"
        );
    }

    #[test]
    fn retention_is_copied_by_default() {
        decides(&[], &[], "retention.ms", "copied");
    }

    #[test]
    fn min_insync_replicas_is_not_copied_by_default() {
        decides(&[], &[], "min.insync.replicas", "excluded by default");
    }

    #[test]
    fn remote_storage_enable_is_not_copied_by_default() {
        decides(&[], &[], "remote.storage.enable", "excluded by default");
    }

    #[test]
    fn local_retention_is_not_copied_by_default() {
        decides(&[], &[], "local.retention.ms", "excluded by default");
    }

    #[test]
    fn throttled_replicas_are_not_copied_by_default() {
        decides(
            &[],
            &[],
            "leader.replication.throttled.replicas",
            "excluded by default",
        );
    }

    #[test]
    fn an_include_takes_a_default_exclusion_back() {
        decides(
            &[r"min\.insync\.replicas"],
            &[],
            "min.insync.replicas",
            "included",
        );
    }

    #[test]
    fn an_operator_exclude_wins_over_an_include() {
        decides(
            &[r"min\..*"],
            &[r"min\.insync\.replicas"],
            "min.insync.replicas",
            "excluded by operator",
        );
    }

    #[test]
    fn an_operator_exclude_of_a_copied_key() {
        decides(
            &[],
            &[r"retention\..*"],
            "retention.bytes",
            "excluded by operator",
        );
    }

    #[test]
    fn patterns_match_whole_keys_only() {
        decides(&[], &[r"retention"], "retention.ms", "copied");
    }

    #[test]
    fn an_invalid_pattern_is_an_error_naming_it() {
        let e = ConfigFilter::new(&[], &["(".to_string()]).expect_err("an error");
        assert!(e.contains("\"(\""), "{e}");
    }

    fn enforcement(kv: &[(&str, &str)]) -> Result<Enforcement, ConfigValueError> {
        let configs = kv
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    ConfigValue {
                        value: v.to_string(),
                        source: ConfigSource::Topic,
                    },
                )
            })
            .collect();
        Enforcement::of(&configs)
    }

    #[test]
    fn enforcement_of_kafkas_defaults() {
        assert_eq!(
            enforcement(&[]).expect("valid"),
            Enforcement {
                retention_ms: Some(604_800_000),
                retention_bytes: None,
                delete: true,
                compact: false,
                max_message_bytes: 1_048_588
            }
        );
    }

    #[test]
    fn enforcement_of_a_compacted_topic_with_unlimited_retention() {
        let e =
            enforcement(&[("cleanup.policy", "compact"), ("retention.ms", "-1")]).expect("valid");
        assert!(e.compact && !e.delete && e.retention_ms.is_none());
    }

    #[test]
    fn enforcement_of_compact_and_delete() {
        let e = enforcement(&[
            ("cleanup.policy", "compact, delete"),
            ("retention.bytes", "1000"),
        ])
        .expect("valid");
        assert!(e.compact && e.delete);
        assert_eq!(e.retention_bytes, Some(1000));
    }

    #[test]
    fn an_unknown_cleanup_policy_is_an_error_naming_the_key() {
        assert_eq!(
            enforcement(&[("cleanup.policy", "shred")])
                .expect_err("an error")
                .key,
            "cleanup.policy"
        );
    }

    #[test]
    fn a_max_message_bytes_beyond_an_i32_is_an_error() {
        assert_eq!(
            enforcement(&[("max.message.bytes", "9999999999")])
                .expect_err("an error")
                .key,
            "max.message.bytes"
        );
    }

    #[test]
    fn a_topic_is_tiered_only_with_remote_storage_enabled() {
        let c = |v: &str| {
            BTreeMap::from([(
                "remote.storage.enable".to_string(),
                ConfigValue {
                    value: v.into(),
                    source: ConfigSource::Topic,
                },
            )])
        };
        assert!(is_tiered(&c("true")));
        assert!(is_tiered(&c("TRUE")));
        assert!(!is_tiered(&c("false")));
        assert!(!is_tiered(&BTreeMap::new()));
    }

    /// One row of [`copied`]: the record's configs, the manifest's, the
    /// expected record afterwards (keys only).
    fn copies(record: Option<&[&str]>, manifest: Option<&[&str]>, want: Option<&[&str]>) {
        let m = |keys: &[&str]| -> BTreeMap<String, ConfigValue> {
            keys.iter()
                .map(|k| {
                    let v = ConfigValue {
                        value: "1".into(),
                        source: ConfigSource::Topic,
                    };
                    (k.to_string(), v)
                })
                .collect()
        };
        let filter = ConfigFilter::new(&[], &[r"segment\.ms".to_string()]).expect("valid");
        let got = copied(record.map(m).as_ref(), manifest.map(m).as_ref(), &filter);
        let keys = got.map(|g| g.into_keys().collect::<Vec<_>>());
        let want = want.map(|w| w.iter().map(|k| k.to_string()).collect::<Vec<_>>());
        assert_eq!(keys, want, "record {record:?} manifest {manifest:?}");
    }

    #[test]
    fn copied_configs_by_row() {
        // A manifest's configs replace the record's, filtered.
        copies(
            Some(&["retention.ms"]),
            Some(&["cleanup.policy", "min.insync.replicas", "segment.ms"]),
            Some(&["cleanup.policy"]),
        );
        // A manifest without configs keeps what the record had.
        copies(Some(&["retention.ms"]), None, Some(&["retention.ms"]));
        copies(None, None, None);
        // A manifest with no override at all: every key at Kafka's default.
        copies(Some(&["retention.ms"]), Some(&[]), Some(&[]));
        // Only excluded keys: nothing copied, and that is recorded.
        copies(None, Some(&["remote.storage.enable"]), Some(&[]));
    }

    #[test]
    fn broker_names_for_synonyms() {
        assert_eq!(broker_name("retention.ms"), Some("log.retention.ms"));
        assert_eq!(broker_name("max.message.bytes"), Some("message.max.bytes"));
        assert_eq!(broker_name("remote.storage.enable"), None);
    }

    #[test]
    fn source_codes_are_kafkas() {
        let codes: Vec<i8> = [
            ConfigSource::Topic,
            ConfigSource::DynamicBroker,
            ConfigSource::DynamicClusterDefault,
            ConfigSource::StaticBroker,
            ConfigSource::Default,
        ]
        .iter()
        .map(|s| s.kafka_code())
        .collect();
        assert_eq!(codes, [1, 2, 3, 4, 5]);
    }
}
