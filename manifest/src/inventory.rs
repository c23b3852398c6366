//! What the bucket holds, for a command that found nothing to do: the
//! source clusters present, the topics of the configured source, and which
//! of them the selection matched, as the line the command prints. Pure: the
//! bucket is read by `store::take_inventory`; what a run decides from it is
//! the caller's (the applier's exit code, `backfill`'s refusal).

use std::collections::BTreeSet;
use std::fmt;

/// What the bucket holds of interest to one run (an applier, an export).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inventory {
    /// Source cluster ids that shipped to the bucket (under its prefix).
    pub clusters: BTreeSet<String>,
    /// The configured source cluster.
    pub source: String,
    /// The topics the source's newest head names (live ones).
    pub topics: BTreeSet<String>,
    /// Those the selection (`--topics`/`--exclude`) matches.
    pub selected: BTreeSet<String>,
    /// Whether a selection (`--topics`) was given at all.
    pub has_selection: bool,
}

fn list_or_none<T>(items: &BTreeSet<T>) -> String
where
    T: fmt::Display,
{
    if items.is_empty() {
        "none".into()
    } else {
        items
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Inventory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "source clusters in the bucket: {}; topics of {}: {}; selected by --topics/--exclude: {}",
            list_or_none(&self.clusters),
            self.source,
            if self.clusters.contains(&self.source) {
                list_or_none(&self.topics)
            } else {
                "(not in the bucket)".into()
            },
            if self.has_selection {
                list_or_none(&self.selected)
            } else {
                "none (no --topics given)".into()
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_inventory_line_names_what_was_found() {
        let i = Inventory {
            clusters: names(&["a", "b"]),
            source: "src".into(),
            has_selection: true,
            ..Inventory::default()
        };
        assert_eq!(
            i.to_string(),
            "source clusters in the bucket: a, b; topics of src: (not in the bucket); selected by --topics/--exclude: none"
        );
        let i = Inventory {
            clusters: names(&["src"]),
            source: "src".into(),
            topics: names(&["orders", "payments"]),
            ..Inventory::default()
        };
        assert_eq!(
            i.to_string(),
            "source clusters in the bucket: src; topics of src: orders, payments; selected by --topics/--exclude: none (no --topics given)"
        );
    }
}
