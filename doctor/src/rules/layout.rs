//! The layout verdict: the bucket holds `segmirror/v1` data for the
//! expected cluster ids, and every key under a cluster's root is one that
//! `manifest::layout` builds (classified by
//! [`manifest::layout::ClusterLayout::classify_key`], never by hand).

use crate::report::{Check, Status};

/// What a listing of the format root found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// The format root (`<prefix>/segmirror/v1`).
    pub format_root: String,
    /// Cluster ids found under it.
    pub clusters: Vec<String>,
    /// Keys under it that are no cluster's, or that no layout function
    /// builds, with the reason.
    pub unreadable: Vec<String>,
    /// Keys classified.
    pub keys_seen: usize,
    /// Whether the listing stopped at its limit.
    pub truncated: bool,
}

/// `layout.clusters` (advisory: a new deployment has no data yet) and
/// `layout.keys` (must-have: nothing unreadable).
pub fn checks(l: &Listing, expected: &[String]) -> Vec<Check> {
    let found = if l.clusters.is_empty() {
        "none".to_string()
    } else {
        l.clusters.join(", ")
    };
    let missing: Vec<&str> = expected
        .iter()
        .filter(|c| !l.clusters.contains(c))
        .map(String::as_str)
        .collect();
    let clusters = if !missing.is_empty() {
        Check::new(
            "layout.clusters",
            false,
            Status::Warn,
            format!(
                "no data under {}/ for {} (found: {found}); the shipper may not have run yet",
                l.format_root,
                missing.join(", ")
            ),
            "check the shipper's bucket and cluster_id (they make <prefix>/segmirror/v1/<cluster-id>/)",
        )
    } else if l.clusters.is_empty() {
        Check::new(
            "layout.clusters",
            false,
            Status::Warn,
            format!("no segmirror data under {}/ yet", l.format_root),
            "run the shipper (or check the bucket URL's prefix)",
        )
    } else {
        Check::pass(
            "layout.clusters",
            false,
            format!("{}/ holds clusters {found}", l.format_root),
        )
    };
    let limit = if l.truncated {
        " (listing stopped at its limit)"
    } else {
        ""
    };
    let keys = if l.unreadable.is_empty() {
        Check::pass(
            "layout.keys",
            true,
            format!("{} keys, all of segmirror/v1's layout{limit}", l.keys_seen),
        )
    } else {
        let shown: Vec<&str> = l.unreadable.iter().take(3).map(String::as_str).collect();
        Check::new(
            "layout.keys",
            true,
            Status::Fail,
            format!(
                "{} of {} keys are not of segmirror/v1's layout{limit}, e.g. {}",
                l.unreadable.len(),
                l.keys_seen,
                shown.join("; ")
            ),
            "move foreign objects out of <prefix>/segmirror/v1/ (nothing but segmirror writes there), or give segmirror its own prefix",
        )
    };
    vec![clusters, keys]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_clusters_and_readable_keys_pass() {
        let l = Listing {
            format_root: "p/segmirror/v1".into(),
            clusters: vec!["c1".into()],
            keys_seen: 3,
            ..Listing::default()
        };
        let c = checks(&l, &["c1".to_string()]);
        assert_eq!(c[0].status, Status::Pass);
        assert_eq!(c[1].status, Status::Pass);
        let c = checks(&l, &["c2".to_string()]);
        assert_eq!(c[0].status, Status::Warn);
        assert!(c[0].evidence.contains("c2"));
    }

    #[test]
    fn an_unreadable_key_fails() {
        let l = Listing {
            format_root: "p/segmirror/v1".into(),
            clusters: vec!["c1".into()],
            unreadable: vec!["p/segmirror/v1/c1/notes.txt: not a key".into()],
            keys_seen: 4,
            truncated: false,
        };
        let c = checks(&l, &[]);
        assert_eq!(c[1].status, Status::Fail);
        assert!(c[1].evidence.contains("notes.txt"));
    }
}
