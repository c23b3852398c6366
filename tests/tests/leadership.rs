//! A real cluster as the source, end to end (issue 29): three brokers'
//! replicas of two partitions (`shipper/tests/replicas`: the leader
//! appends, followers copy its batches, each broker rolls segments at its
//! own size; each broker has its own KRaft metadata log), one shipper per
//! broker on one bucket, leaders that move (once after an unclean election
//! whose new leader diverged), and one applier. The mirror is identical
//! to the current leader's log (`kafkalog::compare`), whichever broker's
//! shipper shipped each part of it.

#[path = "../../kraft/tests/support/mod.rs"]
mod kraft_support;
#[path = "../../shipper/tests/replicas/mod.rs"]
mod replicas;

use applier::Applier;
use kafkalog::compare::{Comparison, compare_partition};
use replicas::{Cluster, PARTITIONS, orders};
use segmirror_e2e::{applier_options, drain, shipper_options};
use segmirror_testkit::backends;
use shipper::Shipper;

fn assert_identical(c: &Cluster, dest: &std::path::Path, p: i32, name: &str) {
    let (leader, _) = c.leaders[&p];
    let root = &c.broker(leader).root;
    match compare_partition(root, dest, &orders(p)).expect("compare") {
        Comparison::Identical => {}
        other => panic!("[{name}] orders-{p} against broker {leader}'s log: {other:?}"),
    }
}

/// One cycle of every shipper, then the applier until it is idle.
async fn cycle(shippers: &mut [Shipper], a: &mut Applier, name: &str) {
    for s in shippers.iter_mut() {
        let r = s.run_cycle().await;
        assert!(r.errors.is_empty(), "[{name}] {:?}", r.errors);
    }
    drain(a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_of_a_three_broker_source_is_the_leaders_log_through_leader_moves() {
    for b in backends() {
        let mut c = Cluster::new();
        let dest_dir = tempfile::tempdir().expect("tempdir");
        let dest = dest_dir.path().join("dest");
        let mut shippers: Vec<Shipper> = c
            .brokers
            .iter()
            .map(|br| {
                let mut o = shipper_options(&b, &br.root, "src");
                o.shipper_id = format!("broker-{}", br.node);
                Shipper::new(o, b.store.clone()).expect("shipper")
            })
            .collect();
        let mut a = Applier::open(
            applier_options(&b, &dest, "src", "dst"),
            Some(b.store.clone()),
        )
        .expect("applier");

        for p in PARTITIONS {
            c.produce(p, 30);
        }
        cycle(&mut shippers, &mut a, b.name).await;
        for p in PARTITIONS {
            assert_identical(&c, &dest, p, b.name);
        }

        // Leaders move; each new leader rolls its segments elsewhere.
        c.elect(0, 3, &[1, 2, 3]);
        c.elect(1, 1, &[1, 2, 3]);
        c.produce(0, 20);
        c.produce(1, 25);
        cycle(&mut shippers, &mut a, b.name).await;
        for p in PARTITIONS {
            assert_identical(&c, &dest, p, b.name);
        }

        // Broker 2 falls out of orders-1's ISR and misses 10 batches, which
        // are mirrored; then an unclean election makes it the leader and it
        // writes its own: the mirror follows it (cut back, then its batches).
        c.elect(1, 1, &[1, 3]);
        c.produce(1, 10);
        cycle(&mut shippers, &mut a, b.name).await;
        assert_identical(&c, &dest, 1, b.name);
        c.elect(1, 2, &[2]);
        c.produce(1, 7);
        // The cut takes a cycle of its own before the new batches ship.
        cycle(&mut shippers, &mut a, b.name).await;
        cycle(&mut shippers, &mut a, b.name).await;
        for p in PARTITIONS {
            assert_identical(&c, &dest, p, b.name);
        }
        for s in &shippers {
            assert!(
                s.partitions().iter().all(|p| p.state != "fenced"),
                "[{}] {:?}",
                b.name,
                s.partitions()
            );
        }
    }
}
