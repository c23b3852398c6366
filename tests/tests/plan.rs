//! `applier plan` on a failback: it prints the truncation offset and the
//! rule that chose it, and changes nothing (the log dir is byte-identical
//! afterwards), on every backend.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use applier::Applier;
use bucket::store::ManifestStore;
use kafkalog::{LogConfig, LogDir, TopicId, TopicPartition};
use manifest::layout::ClusterLayout;
use manifest::reconcile::{LmeRule, Reason, Step};
use manifest::state::Command;
use segmirror_e2e::*;

const ID: TopicId = TopicId::from_bytes([5; 16]);

fn tp() -> TopicPartition {
    TopicPartition::new("orders", 0).expect("tp")
}

fn append(dir: &Path, n: usize, epoch: i32) {
    let d = LogDir::open(dir).expect("log dir");
    let mut log = d
        .open_or_create_partition(&tp(), Some(ID), LogConfig::default())
        .expect("open");
    produce(&mut log, n, epoch, 10);
    log.close().expect("close");
}

/// Every file under `root` with its bytes.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_prints_the_failback_cut_and_its_rule_and_changes_nothing() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
        // A ships orders (50 at epoch 5); B mirrors it, then fails over and
        // writes 20 at epoch 6; A, cut off, kept writing 30 at epoch 5.
        append(&a_dir, 50, 5);
        ship(&b, &a_dir, "cluster-a").await;
        let mut mb = apply(&b, applier_options(&b, &b_dir, "cluster-a", "cluster-b")).await;
        mb.command(Command::Stop, &[], true).await;
        drop(mb);
        append(&b_dir, 20, 6);
        append(&a_dir, 30, 5);
        ship(&b, &b_dir, "cluster-b").await;

        let before = snapshot(&a_dir);
        let mut opts = applier_options(&b, &a_dir, "cluster-b", "cluster-a");
        opts.topics = Some(regex::Regex::new("^orders$").expect("regex"));
        let store = ManifestStore::new(
            b.store.clone(),
            ClusterLayout::new(&b.prefix, "cluster-b").expect("layout"),
        );
        let rows = applier::plan::plan_all(&opts, &store).await.expect("plan");
        assert_eq!(rows.len(), 1, "[{}] {rows:?}", b.name);
        let row = &rows[0];
        assert_eq!(
            (row.action, row.state.as_deref()),
            (applier::plan::PlanAction::Start, None)
        );
        let plan = row.plan.as_ref().expect("a plan");
        assert_eq!(
            plan.steps,
            vec![
                Step::Keep {
                    at: 80,
                    reason: Reason::Failback {
                        rule: LmeRule::LatestLocalEpoch { lme: 5 }
                    },
                },
                Step::TruncateTo {
                    to: 50,
                    reason: Reason::Divergence {
                        local_epoch: Some(5),
                        source_epoch: Some(6)
                    },
                },
            ],
            "[{}]",
            b.name
        );
        assert_eq!(plan.fetch_from, 50);
        // A's 30 records of its own are the cut a start needs
        // --allow-truncate for.
        assert_eq!(
            row.cut,
            Some(manifest::mirror_record::Cut {
                first_offset: 50,
                last_offset: 79
            }),
            "[{}]",
            b.name
        );
        assert!(
            row.refused
                .as_deref()
                .is_some_and(|r| r.contains("--allow-truncate")),
            "{row:?}"
        );
        let table = applier::plan::table(&rows);
        assert!(table.contains("truncate to 50"), "{table}");
        assert!(
            table.contains("rule: equal to the latest -> LEO"),
            "{table}"
        );
        assert_eq!(
            snapshot(&a_dir),
            before,
            "[{}] plan changed the log dir",
            b.name
        );

        // And the real start does what the plan said.
        let mut opts = applier_options(&b, &a_dir, "cluster-b", "cluster-a");
        opts.topics = None;
        let mut ma = Applier::open(opts, Some(b.store.clone())).expect("a");
        ma.command_allowing(Command::Start, &["orders".into()], false, true)
            .await;
        drain(&mut ma).await;
        drop(ma);
        assert_eq!(
            segment_files(&a_dir, &tp()),
            segment_files(&b_dir, &tp()),
            "[{}]",
            b.name
        );
    }
}
