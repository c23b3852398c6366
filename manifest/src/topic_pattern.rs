//! Topic selection (`topics`, `exclude` of the shipper and the applier,
//! `--topics`/`--exclude` of `backfill`): a regex that must match the whole
//! topic name, and [`Selection`], which topics of a change-feed head an
//! include and an exclude pattern pick. Pure: no IO.
//!
//! Invariant: the pattern compiles on its own before it is wrapped in
//! `^(?:...)$` ([`whole_name`], from [`crate::name_regex`]), so it cannot
//! close the group it is wrapped in: without that check `orders)|(.*`
//! would become `^(?:orders)|(.*)$` and match every topic.

use kafkalog::{TopicId, TopicPartition};
use regex::Regex;

use crate::feed::Head;

/// Compiles `pattern` to a regex that matches whole topic names only
/// (defined in [`crate::name_regex`], which config key filters use too).
pub use crate::name_regex::whole_name;

/// A topic selection: which topics a run takes (an applier: the feed
/// partitions it starts by itself; `backfill`: what it exports).
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    /// Topics started automatically (none when `None`).
    pub include: Option<&'a Regex>,
    /// Topics never started automatically.
    pub exclude: Option<&'a Regex>,
}

impl Selection<'_> {
    /// Whether `topic` is selected.
    pub fn matches(&self, topic: &str) -> bool {
        self.include.is_some_and(|i| i.is_match(topic))
            && !self.exclude.is_some_and(|x| x.is_match(topic))
    }

    /// The live partitions of `head` it selects, with their topic id and
    /// manifest version.
    pub fn pick(&self, head: &Head) -> Vec<(TopicPartition, TopicId, u64)> {
        head.partitions
            .values()
            .filter(|e| !e.deleted && self.matches(&e.topic))
            .filter_map(|e| {
                TopicPartition::new(&e.topic, e.partition)
                    .ok()
                    .map(|tp| (tp, e.topic_id, e.manifest_version))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_whole_names_only() {
        let re = whole_name("orders|events").expect("valid");
        assert!(re.is_match("orders") && re.is_match("events"));
        assert!(!re.is_match("orders-eu") && !re.is_match("my-events"));
    }

    #[test]
    fn a_selection_takes_included_topics_not_excluded() {
        // (include, exclude, topic) -> selected
        let cases = [
            (None, None, "orders", false),
            (None, Some("orders"), "payments", false),
            (Some("orders|payments"), None, "orders", true),
            (Some("orders|payments"), None, "orders-eu", false),
            (Some(".*"), Some("tmp-.*"), "tmp-1", false),
            (Some(".*"), Some("tmp-.*"), "xtmp-1", true),
            (Some("orders"), Some("orders"), "orders", false),
        ];
        for (include, exclude, topic, want) in cases {
            let include = include.map(|p| whole_name(p).expect("valid"));
            let exclude = exclude.map(|p| whole_name(p).expect("valid"));
            let selection = Selection {
                include: include.as_ref(),
                exclude: exclude.as_ref(),
            };
            assert_eq!(
                selection.matches(topic),
                want,
                "{include:?} minus {exclude:?} on {topic}"
            );
        }
    }

    #[test]
    fn a_pattern_cannot_escape_its_anchors() {
        let e = whole_name("orders)|(.*").expect_err("unbalanced on its own");
        assert!(e.contains("invalid regex"), "{e}");
        assert!(whole_name("(").is_err());
    }
}
