//! Garbage collection of packs (issue 30, "Layout 2", step 5 in
//! `docs/mirroring.md`): which pack objects a pass deletes. Pure: the
//! listing of the packs, the packs the latest versions name and what the
//! passes before saw, in; the plan out. The executor is the shipper's
//! `pack_gc`.
//!
//! Invariants of [`plan`]:
//! - a pack a latest version (or one of its pages, or a delta of its
//!   chain) names is never deleted;
//! - a pack uploaded less than the grace ago (by the time in its upload
//!   id) is never deleted, nor counted as unreferenced: its cycle may not
//!   have committed yet. A key whose upload id carries no time is not a
//!   pack this format writes and is never deleted;
//! - otherwise a pack is deleted only when passes of this process saw it
//!   unreferenced for the grace: from the first pass that did, through
//!   every pass since. Nothing names a pack again once no latest version
//!   does (new versions name only new uploads; compaction, retention and
//!   cuts only drop ranges), so a reader that holds an older version
//!   naming it has had the grace to read it. A pass that sees it named
//!   again (a version this process had not seen) starts the count again;
//! - the count lives in memory: a restarted process waits one grace more.

use std::collections::{BTreeMap, BTreeSet};

/// A pack object as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedPack {
    /// Its key.
    pub key: String,
    /// The upload time in its upload id (ms since the Unix epoch); `None`
    /// when the key carries none.
    pub uploaded_ms: Option<i64>,
}

/// What one pass does, and why it keeps the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackGcPlan {
    /// Packs to delete now.
    pub delete: Vec<String>,
    /// Packs unreferenced and past their upload grace, with the time the
    /// first pass saw them so (for the next pass; the deleted included,
    /// in case a delete fails).
    pub unreferenced_since: BTreeMap<String, i64>,
    /// Packs a latest version names.
    pub named: usize,
    /// Packs uploaded less than the grace ago.
    pub young: usize,
    /// Packs unreferenced for less than the grace.
    pub waiting: usize,
    /// Keys under the packs dir that carry no upload time.
    pub foreign: usize,
}

/// The plan of a pass at `now_ms`: `listed` the packs found, `named` the
/// packs the latest versions name, `seen` the previous pass's
/// [`PackGcPlan::unreferenced_since`].
pub fn plan(
    listed: &[ListedPack],
    named: &BTreeSet<String>,
    seen: &BTreeMap<String, i64>,
    now_ms: i64,
    grace_ms: i64,
) -> PackGcPlan {
    let mut out = PackGcPlan::default();
    for p in listed {
        let Some(uploaded) = p.uploaded_ms else {
            out.foreign += 1;
            continue;
        };
        if named.contains(&p.key) {
            out.named += 1;
            continue;
        }
        if now_ms.saturating_sub(uploaded) < grace_ms {
            out.young += 1;
            continue;
        }
        let since = seen.get(&p.key).copied().unwrap_or(now_ms).min(now_ms);
        out.unreferenced_since.insert(p.key.clone(), since);
        if now_ms.saturating_sub(since) >= grace_ms {
            out.delete.push(p.key.clone());
        } else {
            out.waiting += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 100_000_000;
    const GRACE: i64 = 3_600_000;

    fn listed(key: &str, uploaded: Option<i64>) -> ListedPack {
        ListedPack {
            key: key.into(),
            uploaded_ms: uploaded,
        }
    }

    /// One row per case: (what, upload age, named, first seen ago, deleted,
    /// unreferenced since after the pass).
    #[test]
    fn each_pack_is_kept_or_deleted_by_the_rules() {
        type Row = (
            &'static str,
            Option<i64>,
            bool,
            Option<i64>,
            bool,
            Option<i64>,
        );
        let rows: [Row; 9] = [
            ("named, old", Some(10 * GRACE), true, None, false, None),
            (
                "named again after a pass saw it unreferenced",
                Some(10 * GRACE),
                true,
                Some(2 * GRACE),
                false,
                None,
            ),
            (
                "young, unnamed (its cycle may commit yet)",
                Some(GRACE - 1),
                false,
                None,
                false,
                None,
            ),
            (
                "young even when seen before",
                Some(GRACE - 1),
                false,
                Some(GRACE),
                false,
                None,
            ),
            (
                "old, unnamed, first seen now",
                Some(2 * GRACE),
                false,
                None,
                false,
                Some(0),
            ),
            (
                "old, unnamed, seen just under the grace",
                Some(2 * GRACE),
                false,
                Some(GRACE - 1),
                false,
                Some(GRACE - 1),
            ),
            (
                "old, unnamed, seen the grace ago",
                Some(2 * GRACE),
                false,
                Some(GRACE),
                true,
                Some(GRACE),
            ),
            (
                "no upload time: not ours",
                None,
                false,
                Some(10 * GRACE),
                false,
                None,
            ),
            (
                "a clock gone back: seen in the future counts from now",
                Some(2 * GRACE),
                false,
                Some(-GRACE),
                false,
                Some(0),
            ),
        ];
        for (what, age, is_named, seen_ago, deleted, since_ago) in rows {
            let key = "dr/segmirror/v1/c/packs/aa/x.pack".to_string();
            let named: BTreeSet<String> = is_named.then(|| key.clone()).into_iter().collect();
            let seen: BTreeMap<String, i64> = seen_ago
                .map(|a| (key.clone(), NOW - a))
                .into_iter()
                .collect();
            let p = plan(
                &[listed(&key, age.map(|a| NOW - a))],
                &named,
                &seen,
                NOW,
                GRACE,
            );
            assert_eq!(p.delete.contains(&key), deleted, "{what}: {p:?}");
            assert_eq!(
                p.unreferenced_since.get(&key).copied(),
                since_ago.map(|a| NOW - a),
                "{what}: {p:?}"
            );
        }
    }

    #[test]
    fn a_pass_counts_what_it_keeps() {
        let l = [
            listed("a", Some(NOW)),
            listed("b", Some(0)),
            listed("c", Some(0)),
            listed("d", Some(0)),
            listed("e", None),
        ];
        let named: BTreeSet<String> = ["b".to_string()].into();
        let seen: BTreeMap<String, i64> = [("d".to_string(), 0), ("gone".to_string(), 0)].into();
        let p = plan(&l, &named, &seen, NOW, GRACE);
        assert_eq!(p.delete, vec!["d".to_string()]);
        assert_eq!((p.named, p.young, p.waiting, p.foreign), (1, 1, 1, 1));
        // A key no longer listed is forgotten.
        assert_eq!(
            p.unreferenced_since.keys().collect::<Vec<_>>(),
            vec!["c", "d"]
        );
    }
}
