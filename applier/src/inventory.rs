//! What the bucket holds, for a command that found nothing to do: the
//! source clusters present, the topics of the configured source, and which
//! of them the selection matched, with the verdict a cron job acts on
//! (its exit code).
//!
//! Cost: one LIST (with delimiter) of the clusters dir, one LIST of the
//! source's head dir and one GET of its newest head; only when a run did
//! nothing.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use manifest::layout::{self, ClusterLayout};
use manifest::store::{ManifestStore, StoreError};
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

use crate::feed::Selection;

/// What the bucket holds of interest to one applier.
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

/// What a run that did nothing tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Something was done or there is something to follow: exit 0.
    Ok,
    /// The bucket holds nothing yet (the shipper may not have started):
    /// exit 0, with a line saying so.
    EmptyBucket,
    /// The bucket holds other clusters but not the configured source: a
    /// mistyped `--source-cluster-id` (exit 2).
    SourceAbsent,
    /// The source has topics but the selection matches none, and no
    /// partition here is a mirror (exit 2).
    NothingSelected,
}

impl Verdict {
    /// The exit code of `applier once` for this verdict.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Ok | Verdict::EmptyBucket => 0,
            Verdict::SourceAbsent | Verdict::NothingSelected => 2,
        }
    }
}

impl Inventory {
    /// The verdict for a run with `mirrors` mirror partitions in its log
    /// dir (pure: the table is in [`Verdict`]).
    pub fn verdict(&self, mirrors: usize) -> Verdict {
        if !self.clusters.contains(&self.source) {
            return if self.clusters.is_empty() {
                Verdict::EmptyBucket
            } else {
                Verdict::SourceAbsent
            };
        }
        if mirrors == 0 && self.selected.is_empty() && !self.topics.is_empty() {
            return Verdict::NothingSelected;
        }
        Verdict::Ok
    }
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

/// Reads the inventory of the bucket `store` under `prefix` for `source`.
pub async fn take(
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    source: &str,
    selection: Selection<'_>,
) -> Result<Inventory, StoreError> {
    let dir = layout::clusters_dir(prefix).map_err(|e| StoreError::Store {
        op: "list",
        key: prefix.to_string(),
        source: object_store::Error::Generic {
            store: "layout",
            source: Box::new(e),
        },
    })?;
    let listed = store
        .list_with_delimiter(Some(&ObjectPath::from(dir.as_str())))
        .await;
    let clusters: BTreeSet<String> = match listed {
        Ok(l) => l
            .common_prefixes
            .iter()
            .filter_map(|p| layout::parse_cluster_dir(prefix, p.as_ref()))
            .collect(),
        Err(object_store::Error::NotFound { .. }) => BTreeSet::new(),
        Err(source) => {
            return Err(StoreError::Store {
                op: "list",
                key: dir,
                source,
            });
        }
    };
    let mut inv = Inventory {
        clusters,
        source: source.to_string(),
        has_selection: selection.include.is_some(),
        ..Inventory::default()
    };
    if inv.clusters.contains(source)
        && let Ok(cluster) = ClusterLayout::new(prefix, source)
    {
        let ms = ManifestStore::new(Arc::clone(store), cluster);
        if let Some(seq) = ms.latest_head_seq().await? {
            let head = ms.get_head(seq).await?;
            for e in head.partitions.values().filter(|e| !e.deleted) {
                inv.topics.insert(e.topic.clone());
                if selection.matches(&e.topic) {
                    inv.selected.insert(e.topic.clone());
                }
            }
        }
    }
    Ok(inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(clusters: &[&str], topics: &[&str], selected: &[&str]) -> Inventory {
        Inventory {
            clusters: clusters.iter().map(|s| s.to_string()).collect(),
            source: "src".into(),
            topics: topics.iter().map(|s| s.to_string()).collect(),
            selected: selected.iter().map(|s| s.to_string()).collect(),
            has_selection: true,
        }
    }

    #[test]
    fn the_verdict_of_a_run_that_did_nothing() {
        // (bucket, mirrors here) -> verdict, exit code
        let cases = [
            (inv(&[], &[], &[]), 0, Verdict::EmptyBucket, 0),
            (inv(&["other"], &[], &[]), 0, Verdict::SourceAbsent, 2),
            (inv(&["other"], &[], &[]), 3, Verdict::SourceAbsent, 2),
            (
                inv(&["src"], &["orders"], &[]),
                0,
                Verdict::NothingSelected,
                2,
            ),
            (inv(&["src"], &["orders"], &[]), 1, Verdict::Ok, 0),
            (inv(&["src"], &["orders"], &["orders"]), 0, Verdict::Ok, 0),
            // The source shipped no partition yet: wait quietly.
            (inv(&["src"], &[], &[]), 0, Verdict::Ok, 0),
        ];
        for (i, mirrors, want, code) in cases {
            assert_eq!(i.verdict(mirrors), want, "{i} with {mirrors} mirrors");
            assert_eq!(want.exit_code(), code);
        }
    }

    #[test]
    fn the_inventory_line_names_what_was_found() {
        let i = inv(&["a", "b"], &[], &[]);
        assert_eq!(
            i.to_string(),
            "source clusters in the bucket: a, b; topics of src: (not in the bucket); selected by --topics/--exclude: none"
        );
        let mut i = inv(&["src"], &["orders", "payments"], &[]);
        i.has_selection = false;
        assert_eq!(
            i.to_string(),
            "source clusters in the bucket: src; topics of src: orders, payments; selected by --topics/--exclude: none (no --topics given)"
        );
    }
}
