//! Leader-aware shipping on a multi-broker source (issue 29): three
//! brokers hold replicas of the same partitions, written as Kafka's
//! replicas are (the leader appends, the followers copy its batches byte
//! for byte, each rolling segments at its own size), each with its own
//! `meta.properties` and KRaft metadata log (written by the kraft tests'
//! independent encoder). One shipper per broker, one bucket.
//!
//! What a user relies on: each partition is shipped by its leader's
//! shipper only (bytes uploaded equal bytes produced, no fence), a leader
//! move is followed in the new leader's first cycle from the manifest's
//! end (no duplicate upload, whatever the new leader's segment
//! boundaries), the old leader's shipper stops, and an unclean election
//! whose new leader diverges cuts the manifest back to the new leader's
//! log. The shipped objects are the leader's batches, byte for byte.

mod common;
mod replicas;

#[path = "../../kraft/tests/support/mod.rs"]
mod kraft_support;

use std::path::Path;

use common::*;
use futures::TryStreamExt;
use kafkalog::LogDir;
use kraft_support::{self as k, MetaLog};
use object_store::{ObjectStore, ObjectStoreExt};
use replicas::{Cluster, PARTITIONS, TOPIC, orders_id};
use shipper::Shipper;

/// Writes the broker's HW checkpoint: every partition's log end.
fn write_hw(root: &Path) {
    let mut entries = Vec::new();
    for p in PARTITIONS {
        let t = tp(TOPIC, p);
        if root.join(t.dir_name()).is_dir() {
            let end = source_batches(root, &t)
                .last()
                .map_or(0, |(_, h, _)| h.next_offset());
            entries.push((t, end));
        }
    }
    set_hw(root, &entries);
}

/// Bytes of every data object in the bucket (the losers' too), and of
/// the ranges in packs (a pack's size less its index).
async fn data_bytes(store: &dyn ObjectStore, prefix: &str) -> u64 {
    let p = object_store::path::Path::from(prefix);
    let metas: Vec<_> = store.list(Some(&p)).try_collect().await.expect("list");
    let mut total = 0;
    for m in &metas {
        let key = m.location.as_ref();
        if key.contains("/data/") {
            total += m.size;
        } else if key.ends_with(".pack") {
            let bytes = store
                .get(&m.location)
                .await
                .expect("pack")
                .bytes()
                .await
                .expect("pack bytes");
            let index = manifest::pack::PackIndex::index_end(&bytes).expect("a pack");
            total += m.size - index;
        }
    }
    total
}

/// Every shipped object of `p`, concatenated, is `leader`'s log, batch
/// for batch; the manifest ends at its log end with its epoch lineage.
async fn assert_mirrors_leader(b: &Backend, c: &Cluster, p: i32, leader: i32) {
    let t = tp(TOPIC, p);
    let ms = b.manifests();
    let m = latest(&ms, &t, orders_id()).await.expect("manifest");
    let shipped: Vec<u8> = fetch(&ms, &all_ranges(&ms, &m).await)
        .await
        .iter()
        .flat_map(|o| o.iter().copied())
        .collect();
    let root = &c.broker(leader).root;
    let batches = source_batches(root, &t);
    let source: Vec<u8> = batches.iter().flat_map(|(_, _, b)| b.clone()).collect();
    assert_eq!(shipped.len(), source.len(), "[{}] {t}: bytes", b.name);
    assert!(
        shipped == source,
        "[{}] {t}: not broker {leader}'s batches",
        b.name
    );
    let end = batches.last().map_or(0, |(_, h, _)| h.next_offset());
    assert_eq!(m.shipped_end_offset, end, "[{}] {t}", b.name);
    assert_eq!(
        m.lineage.entries(),
        source_epochs(root, &t),
        "[{}] {t}",
        b.name
    );
}

/// One cycle of every shipper, in `order`; returns, per shipper, the
/// partitions it committed.
async fn round(shippers: &mut [Shipper], order: &[usize], b: &Backend) -> Vec<Vec<i32>> {
    round_counting(shippers, order, b, &mut 0).await
}

/// [`round`], adding to `compacted` the bytes compaction rewrote (with
/// packs: uploaded again on purpose, reported apart from shipping).
async fn round_counting(
    shippers: &mut [Shipper],
    order: &[usize],
    b: &Backend,
    compacted: &mut u64,
) -> Vec<Vec<i32>> {
    let mut out = vec![Vec::new(); shippers.len()];
    for &i in order {
        let r = shippers[i].run_cycle().await;
        *compacted += r.compacted.2;
        assert!(
            r.errors.is_empty(),
            "[{}] shipper {}: {:?}",
            b.name,
            i + 1,
            r.errors
        );
        assert!(
            r.fenced.is_empty(),
            "[{}] shipper {}: fenced {:?}",
            b.name,
            i + 1,
            r.fenced
        );
        let mut committed: Vec<i32> = shippers[i]
            .partitions()
            .iter()
            .filter(|s| s.writer.as_deref() == Some(&*format!("s{}", i + 1)))
            .map(|s| s.partition)
            .collect();
        committed.sort_unstable();
        out[i] = if r.committed > 0 {
            committed
        } else {
            Vec::new()
        };
    }
    out
}

/// One shipper per broker, `s<node>`, on `b`.
fn shippers_of(c: &Cluster, b: &Backend) -> Vec<Shipper> {
    shippers_with(c, b, false)
}

/// [`shippers_of`], committing appends with heads as deltas when
/// `head_deltas` (packs on too).
fn shippers_with(c: &Cluster, b: &Backend, head_deltas: bool) -> Vec<Shipper> {
    c.brokers
        .iter()
        .map(|br| {
            let mut o = options(&br.root, b, &format!("s{}", br.node));
            if head_deltas {
                o.pack_below = 1 << 20;
                o.head_deltas = true;
            }
            Shipper::new(o, b.store()).expect("shipper")
        })
        .collect()
}

fn roles(s: &Shipper) -> Vec<(i32, &'static str, Option<&'static str>)> {
    s.partitions()
        .iter()
        .map(|p| (p.partition, p.state, p.role))
        .collect()
}

#[tokio::test]
async fn each_partition_is_shipped_by_its_leader_and_followed_through_leader_moves() {
    leaders_ship(false).await;
}

/// The same with packs and head deltas (issue 30): a new leader's shipper
/// reads the version the old leader's deltas made and continues from it in
/// its first cycle.
#[tokio::test]
async fn with_head_deltas_each_partition_is_shipped_by_its_leader_through_leader_moves() {
    leaders_ship(true).await;
}

async fn leaders_ship(head_deltas: bool) {
    for b in backends() {
        let mut compacted = 0u64;
        let mut c = Cluster::new();
        let mut shippers = shippers_with(&c, &b, head_deltas);
        for p in PARTITIONS {
            c.produce(p, 40);
        }

        // Broker 1 leads orders-0, broker 2 orders-1: each is shipped once.
        let shipped = round_counting(&mut shippers, &[0, 1, 2], &b, &mut compacted).await;
        assert_eq!(shipped, vec![vec![0], vec![1], vec![]], "[{}]", b.name);
        assert_eq!(
            roles(&shippers[2]),
            vec![
                (0, "standby", Some("follower")),
                (1, "standby", Some("follower"))
            ],
            "[{}]",
            b.name
        );
        assert_eq!(
            roles(&shippers[0]),
            vec![(0, "ok", Some("leader")), (1, "standby", Some("follower"))]
        );

        // orders-0's leadership moves to broker 3, which rolls its segments
        // elsewhere; the old leader's shipper runs first and stops.
        c.elect(0, 3, &[1, 2, 3]);
        c.produce(0, 30);
        let shipped = round_counting(&mut shippers, &[0, 1, 2], &b, &mut compacted).await;
        assert_eq!(
            shipped,
            vec![vec![], vec![], vec![0]],
            "[{}] takeover in one cycle",
            b.name
        );

        // Both move at once; the new leaders' shippers run first this time.
        c.elect(0, 2, &[1, 2, 3]);
        c.elect(1, 1, &[1, 2, 3]);
        c.produce(0, 25);
        c.produce(1, 35);
        let shipped = round_counting(&mut shippers, &[2, 1, 0], &b, &mut compacted).await;
        assert_eq!(shipped, vec![vec![1], vec![0], vec![]], "[{}]", b.name);
        // A quiet round: nothing anywhere.
        let shipped = round_counting(&mut shippers, &[0, 1, 2], &b, &mut compacted).await;
        assert_eq!(shipped, vec![Vec::<i32>::new(); 3], "[{}]", b.name);

        let uploaded = data_bytes(b.store().as_ref(), &b.prefix).await - compacted;
        let ratio = uploaded as f64 / c.produced as f64;
        println!(
            "[{}] RF=3, 3 shippers, 2 leader moves: {uploaded} bytes uploaded for {} produced (ratio {ratio:.4})",
            b.name, c.produced
        );
        assert!(ratio <= 1.02, "[{}] ratio {ratio}", b.name);
        assert_mirrors_leader(&b, &c, 0, 2).await;
        assert_mirrors_leader(&b, &c, 1, 1).await;
        let ms = b.manifests();
        let m0 = latest(&ms, &tp(TOPIC, 0), orders_id()).await.expect("m0");
        assert_eq!(m0.writer, "s2", "[{}]", b.name);

        // Broker 3 drops out of orders-1's ISR and misses what broker 1
        // appends next (shipped by s1). Brokers 1 and 2 go down, and an
        // unclean election makes broker 3 the leader: its log diverges
        // from the manifest, which is cut back to it.
        c.elect(1, 1, &[1, 2]);
        c.produce(1, 10);
        let shipped = round_counting(&mut shippers, &[0, 1, 2], &b, &mut compacted).await;
        assert_eq!(shipped[0], vec![1], "[{}]", b.name);
        c.elect(1, 3, &[3]);
        c.produce(1, 6);
        let r = shippers[2].run_cycle().await;
        assert!(
            r.errors.is_empty() && r.fenced.is_empty(),
            "[{}] {r:?}",
            b.name
        );
        let r2 = shippers[2].ship_available().await;
        assert_eq!(r.cuts + r2.cuts, 1, "[{}] {r:?} {r2:?}", b.name);
        for i in [0, 1] {
            let r = shippers[i].run_cycle().await;
            assert_eq!(r.committed, 0, "[{}] shipper {}: {r:?}", b.name, i + 1);
        }
        assert_mirrors_leader(&b, &c, 1, 3).await;
        assert_mirrors_leader(&b, &c, 0, 2).await;
    }
}

#[tokio::test]
async fn a_leaderless_partition_is_shipped_by_its_last_leader_and_untrusted_metadata_by_all() {
    for b in backends() {
        let mut c = Cluster::new();
        let mut shippers = shippers_of(&c, &b);
        c.produce(0, 10);
        c.produce(1, 10);
        round(&mut shippers, &[0, 1, 2], &b).await;
        // Broker 1 led orders-0 and is the last of its ISR when the cluster
        // loses its leader: broker 1's shipper still ships what its HW
        // covers, nobody else does.
        c.elect(0, -1, &[1]);
        let shipped = round(&mut shippers, &[0, 1, 2], &b).await;
        assert_eq!(
            shipped,
            vec![Vec::<i32>::new(); 3],
            "[{}] nothing new",
            b.name
        );
        assert_eq!(roles(&shippers[0])[0], (0, "ok", Some("last_leader")));
        assert_eq!(roles(&shippers[1])[0], (0, "standby", Some("leaderless")));

        // A PartitionChangeRecord of a version this build cannot read: the
        // partition's leadership is unknown, so every replica's shipper
        // ships it as without metadata (the manifest commit fences all
        // but one), and says so.
        for br in &mut c.brokers {
            br.meta.append_bytes(&k::data_batch(
                br.meta.next_offset,
                1,
                &[k::frame(5, 99, &[0, 0, 0])],
            ));
            br.meta.next_offset += 1;
        }
        shippers[2].run_cycle().await;
        let p1 = shippers[2]
            .partitions()
            .into_iter()
            .find(|p| p.partition == 1)
            .expect("orders-1");
        assert_eq!(
            (p1.state, p1.role),
            ("ok", Some("untrusted")),
            "[{}]",
            b.name
        );
        assert!(
            p1.detail
                .as_deref()
                .is_some_and(|d| d.contains("cannot be trusted")),
            "{:?}",
            p1.detail
        );
        let metrics = shippers[2].metrics().render();
        assert!(
            metrics.contains("segmirror_shipper_partition_roles{role=\"untrusted\"} 2"),
            "{metrics}"
        );
    }
}

/// The same cluster without metadata logs (a ZooKeeper-mode source, or
/// before this capability): every replica's shipper ships every partition
/// and all but the first to commit are fenced after uploading. The figure
/// leader-aware shipping removes (BENCHMARKS.md).
#[tokio::test]
async fn without_metadata_every_replica_ships_and_the_losers_are_fenced() {
    for b in backends() {
        let mut c = Cluster::new();
        for br in &c.brokers {
            std::fs::remove_dir_all(&br.meta.dir).expect("rm metadata log");
        }
        for p in PARTITIONS {
            c.produce(p, 40);
        }
        let mut shippers = shippers_of(&c, &b);
        // The three cycles upload before any commits (as concurrent
        // shippers do): each uploads, one commits, two are fenced.
        let (r1, r2, r3) = {
            let [a, bb, cc] = &mut shippers[..] else {
                unreachable!()
            };
            tokio::join!(a.run_cycle(), bb.run_cycle(), cc.run_cycle())
        };
        let fenced = r1.fenced.len() + r2.fenced.len() + r3.fenced.len();
        let uploaded = data_bytes(b.store().as_ref(), &b.prefix).await;
        let ratio = uploaded as f64 / c.produced as f64;
        println!(
            "[{}] RF=3, 3 shippers, no metadata: {uploaded} bytes uploaded for {} produced (ratio {ratio:.4}), {fenced} fenced",
            b.name, c.produced
        );
        assert!(fenced >= 1, "[{}] {r1:?} {r2:?} {r3:?}", b.name);
        assert!(ratio > 1.5, "[{}] ratio {ratio}", b.name);
        assert_mirrors_leader(&b, &c, 0, 1).await;
    }
}

/// JBOD: a broker with two log dirs holds a stale copy of orders-0 in the
/// one the metadata does not assign (a move between log dirs left it) and
/// a `-future` dir of an intra-broker move in progress. Only the assigned
/// copy is shipped; the stale one and the `-future` dir never are.
#[tokio::test]
async fn jbod_ships_the_copy_in_the_log_dir_the_metadata_assigns() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, bdir) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).expect("mkdir");
        std::fs::create_dir_all(&bdir).expect("mkdir");
        // Log dir a holds the metadata log (its meta.properties has the
        // encoder's directory.id); log dir b has its own id.
        let mut meta = MetaLog::create(&a, 1);
        let b_id = kafkalog::TopicId::from_bytes([9; 16]);
        std::fs::write(
            bdir.join("meta.properties"),
            format!(
                "node.id=1\ndirectory.id={}\nversion=1\ncluster.id=Mk3OEYBSD34fcwNTJENDM2Qk\n",
                b_id
            ),
        )
        .expect("meta.properties");
        meta.append(
            1,
            &[
                k::topic(TOPIC, topic_id(1)),
                k::partition(1, topic_id(1), 0, &[1], &[1], 1, 0, 0, &[b_id]),
            ],
        );
        let t = tp(TOPIC, 0);
        // The stale copy in a: 3 batches; the live one in b: 12.
        for (root, n) in [(&a, 3), (&bdir, 12)] {
            let d = LogDir::open(root).expect("log dir");
            let mut log = open_log(&d, &t, topic_id(1), 4096);
            append_n(&mut log, n, 5, 0, 100);
            log.close().expect("close");
            write_hw(root);
        }
        // An intra-broker move in progress: b's copy being written into a.
        let future = a.join(format!(
            "{}.{}-future",
            t.dir_name(),
            "0123456789abcdef0123456789abcdef"
        ));
        std::fs::create_dir_all(&future).expect("mkdir future");
        std::fs::copy(
            bdir.join(t.dir_name()).join("00000000000000000000.log"),
            future.join("00000000000000000000.log"),
        )
        .expect("copy");

        let mut o = options(&a, &b, "s1");
        o.log_dirs = vec![a.clone(), bdir.clone()];
        let mut s = Shipper::new(o, b.store()).expect("shipper");
        let r = s.ship_available().await;
        assert!(r.errors.is_empty(), "[{}] {:?}", b.name, r.errors);
        let st = s.partitions();
        assert_eq!(
            st.iter()
                .map(|p| (p.partition, p.state, p.role))
                .collect::<Vec<_>>(),
            vec![(0, "ok", Some("leader"))],
            "[{}] one partition, no -future one",
            b.name
        );
        let ms = b.manifests();
        let m = latest(&ms, &t, topic_id(1)).await.expect("manifest");
        assert_eq!(
            m.shipped_end_offset, 60,
            "[{}] b's copy (12 batches of 5)",
            b.name
        );
        let shipped: Vec<u8> = fetch(&ms, &all_ranges(&ms, &m).await)
            .await
            .iter()
            .flat_map(|o| o.iter().copied())
            .collect();
        let source: Vec<u8> = source_batches(&bdir, &t)
            .into_iter()
            .flat_map(|(_, _, b)| b)
            .collect();
        assert!(shipped == source, "[{}] b's batches", b.name);
    }
}

/// A partition dir that disappears while the broker's metadata still has
/// its topic moved (a reassignment, another log dir, a replaced disk): it
/// is not published as deleted. Once the metadata removed the topic
/// (RemoveTopicRecord, and Kafka renamed the dir `-delete`), it is.
#[tokio::test]
async fn a_dir_gone_is_published_deleted_only_when_the_metadata_removed_its_topic() {
    for b in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("logs");
        std::fs::create_dir_all(&root).expect("mkdir");
        let mut meta = MetaLog::create(&root, 1);
        meta.append(
            1,
            &[
                k::topic(TOPIC, topic_id(1)),
                k::partition(0, topic_id(1), 0, &[1], &[1], 1, 0, 0, &[]),
            ],
        );
        let t = tp(TOPIC, 0);
        {
            let d = LogDir::open(&root).expect("log dir");
            let mut log = open_log(&d, &t, topic_id(1), 4096);
            append_n(&mut log, 4, 5, 0, 100);
            log.close().expect("close");
            write_hw(&root);
        }
        let mut o = options(&root, &b, "s1");
        o.partition_delete_grace = std::time::Duration::ZERO;
        let mut s = Shipper::new(o, b.store()).expect("shipper");
        assert_eq!(s.ship_available().await.committed, 1, "[{}]", b.name);

        // The dir goes; the metadata still has the topic.
        let moved = dir.path().join("elsewhere");
        std::fs::rename(root.join(t.dir_name()), &moved).expect("move away");
        for _ in 0..3 {
            let r = s.run_cycle().await;
            assert_eq!(r.deleted_partitions, 0, "[{}] {r:?}", b.name);
        }
        let ms = b.manifests();
        assert!(!latest(&ms, &t, topic_id(1)).await.expect("m").deleted);

        // The topic is deleted on the source.
        meta.append(1, &[k::remove_topic(topic_id(1))]);
        let r = s.run_cycle().await;
        assert_eq!(r.deleted_partitions, 1, "[{}] {r:?}", b.name);
        assert!(
            latest(&ms, &t, topic_id(1)).await.expect("m").deleted,
            "[{}]",
            b.name
        );
    }
}
