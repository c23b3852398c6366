//! The layout verdict: the bucket holds `segmirror/v1` data for the
//! expected cluster ids, and every key under a cluster's root is one that
//! `manifest::layout` builds (classified by
//! [`manifest::layout::ClusterLayout::classify_key`], never by hand).
//!
//! A cluster is **there** when its root holds a key of the layout other
//! than a doctor probe: the marker `shipper init` / `--create-bucket`
//! writes, or shipped data: what the shipper requires before it ships
//! (`shipper::bucket_init`). `layout.clusters` is must-have when cluster
//! ids are expected: one that is not there fails (exit 1), since the
//! shipper would refuse to ship there and the applier would find nothing;
//! except in the applier's view of a bucket that holds no cluster at all
//! yet (replication may not have copied anything: a warn).

use manifest::layout::{ClusterLayout, KeyKind, parse_cluster_dir};

use crate::expect::View;
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
    /// The bucket URL, for fixes.
    pub bucket: String,
}

impl Listing {
    /// Classifies the keys a listing of `format_root` returned (`prefix`
    /// is the bucket's); a cluster counts as found by a key of its layout
    /// other than a doctor probe.
    pub fn from_keys(
        bucket: &str,
        prefix: &str,
        format_root: &str,
        keys: &[String],
        truncated: bool,
    ) -> Listing {
        let mut listing = Listing {
            format_root: format_root.to_string(),
            keys_seen: keys.len(),
            truncated,
            bucket: bucket.to_string(),
            ..Listing::default()
        };
        for key in keys {
            let cluster = key
                .strip_prefix(&format!("{format_root}/"))
                .and_then(|rest| rest.split_once('/'))
                .and_then(|(cluster, _)| {
                    parse_cluster_dir(prefix, &format!("{format_root}/{cluster}"))
                });
            let Some(cluster) = cluster else {
                listing
                    .unreadable
                    .push(format!("{key}: not under a cluster id"));
                continue;
            };
            match ClusterLayout::new(prefix, &cluster).map(|l| l.classify_key(key)) {
                // A doctor probe (of a run in progress, or left by one
                // that was killed) is harmless, and no sign of a cluster.
                Ok(Ok(KeyKind::DoctorProbe)) => {}
                Ok(Ok(_)) => {
                    if !listing.clusters.contains(&cluster) {
                        listing.clusters.push(cluster);
                    }
                }
                Ok(Err(e)) | Err(e) => listing.unreadable.push(e.to_string()),
            }
        }
        listing
    }
}

/// `layout.clusters` (see the module docs) and `layout.keys` (must-have:
/// nothing unreadable).
pub fn checks(l: &Listing, expected: &[String], view: View) -> Vec<Check> {
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
    let init = |ids: &[&str]| {
        ids.iter()
            .map(|id| format!("shipper init --bucket {} --cluster-id {id}", l.bucket))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let clusters = if !missing.is_empty() && !l.clusters.is_empty() {
        Check::new(
            "layout.clusters",
            true,
            Status::Fail,
            format!(
                "no marker or data under {}/ for {} (found clusters: {found}): a mistyped cluster id?",
                l.format_root,
                missing.join(", ")
            ),
            format!(
                "check the cluster id (the source's cluster.id in meta.properties); a new cluster sharing the bucket: {}",
                init(&missing)
            ),
        )
    } else if !missing.is_empty() && view == View::Applier {
        Check::new(
            "layout.clusters",
            true,
            Status::Warn,
            format!(
                "nothing under {}/ yet for {}: the shipper has not shipped, or replication has not copied it yet",
                l.format_root,
                missing.join(", ")
            ),
            "check --bucket (a mistyped bucket or prefix?), the shipper's bucket and the replication rule",
        )
    } else if !missing.is_empty() {
        Check::new(
            "layout.clusters",
            true,
            Status::Fail,
            format!(
                "nothing under {}/ for {}: not initialised (a mistyped bucket or prefix?); the shipper refuses to ship here",
                l.format_root,
                missing.join(", ")
            ),
            format!("{} (or shipper once|run --create-bucket)", init(&missing)),
        )
    } else if l.clusters.is_empty() {
        Check::new(
            "layout.clusters",
            false,
            Status::Warn,
            format!("no segmirror data under {}/ yet", l.format_root),
            "give --cluster-id to check a cluster; run shipper init (or check the bucket URL's prefix)",
        )
    } else {
        Check::pass(
            "layout.clusters",
            !expected.is_empty(),
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
    fn the_clusters_verdict() {
        use Status::{Fail, Pass, Warn};
        use View::{Applier, Shipper};
        let listing = |found: &[&str]| Listing {
            format_root: "p/segmirror/v1".into(),
            clusters: found.iter().map(|c| c.to_string()).collect(),
            keys_seen: found.len(),
            bucket: "s3://b/p".into(),
            ..Listing::default()
        };
        // (found, expected, view, status, evidence contains)
        type Row = (
            &'static [&'static str],
            &'static [&'static str],
            View,
            Status,
            &'static str,
        );
        let rows: [Row; 9] = [
            (&["c1"], &["c1"], Shipper, Pass, "holds clusters c1"),
            (&["c1"], &["c1"], Applier, Pass, "holds clusters c1"),
            (&["c1"], &["cl"], Shipper, Fail, "mistyped cluster id"),
            (&["c1"], &["cl"], Applier, Fail, "mistyped cluster id"),
            (&["c1", "c2"], &["c1", "c3"], Shipper, Fail, "for c3"),
            (&[], &["c1"], Shipper, Fail, "not initialised"),
            (
                &[],
                &["c1"],
                Applier,
                Warn,
                "nothing under p/segmirror/v1/ yet",
            ),
            (&[], &[], Shipper, Warn, "no segmirror data"),
            (&["c1"], &[], Applier, Pass, "holds clusters c1"),
        ];
        for (found, expected, view, status, text) in rows {
            let expected: Vec<String> = expected.iter().map(|c| c.to_string()).collect();
            let c = &checks(&listing(found), &expected, view)[0];
            assert_eq!(c.status, status, "{found:?} {expected:?} {view:?}: {c:?}");
            assert!(c.evidence.contains(text), "{text:?} not in {c:?}");
            if status == Fail && !expected.is_empty() {
                assert!(
                    c.fix
                        .contains("shipper init --bucket s3://b/p --cluster-id"),
                    "{c:?}"
                );
            }
        }
    }

    #[test]
    fn keys_are_classified_and_a_probe_is_no_sign_of_a_cluster() {
        let l1 = ClusterLayout::new("p", "c1").expect("layout");
        let l2 = ClusterLayout::new("p", "c2").expect("layout");
        let probe = l2.doctor_probe_key(&bucket::upload_id::fresh());
        let keys = vec![
            l1.marker_key(),
            l1.head_key(3),
            probe,
            "p/segmirror/v1/c1/notes.txt".to_string(),
            "p/segmirror/v1/stray".to_string(),
        ];
        let l = Listing::from_keys("s3://b/p", "p", "p/segmirror/v1", &keys, false);
        assert_eq!(l.clusters, vec!["c1".to_string()]);
        assert_eq!(l.keys_seen, 5);
        assert_eq!(l.unreadable.len(), 2, "{:?}", l.unreadable);
    }

    #[test]
    fn an_unreadable_key_fails() {
        let l = Listing {
            format_root: "p/segmirror/v1".into(),
            clusters: vec!["c1".into()],
            unreadable: vec!["p/segmirror/v1/c1/notes.txt: not a key".into()],
            keys_seen: 4,
            ..Listing::default()
        };
        let c = checks(&l, &[], View::Shipper);
        assert_eq!(c[1].status, Status::Fail);
        assert!(c[1].evidence.contains("notes.txt"));
    }
}
