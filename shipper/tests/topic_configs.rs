//! Topic configs follow (issue 29): with the broker's KRaft metadata log
//! in its log dir (written here by the kraft tests' independent encoder,
//! from Kafka's JSON schemas), `shipper once` publishes each topic's
//! configs with its manifest version: the topic's overrides, the cluster's
//! dynamic defaults and the static `server.properties` values, each with
//! its source; a config change alone is a new version with the same data;
//! a config record the shipper cannot read faithfully publishes nothing
//! new (the manifest keeps what it had); the metadata log itself is never
//! shipped as a partition.

mod common;

#[path = "../../kraft/tests/support/mod.rs"]
mod kraft_support;

use std::collections::BTreeMap;
use std::path::Path;

use common::shipper_cli as shipper;
use common::*;
use kafkalog::LogDir;
use manifest::layout::{ClusterLayout, PartitionKey};
use manifest::partition::PartitionManifest;
use manifest::topic_config::ConfigSource;

fn append(root: &Path, batches: usize) {
    let dir = LogDir::open(root).expect("log dir");
    let mut log = open_log(&dir, &tp("orders", 0), topic_id(1), 4096);
    append_n(&mut log, batches, 10, 2, 100);
    log.close().expect("close");
    dir.write_checkpoints().expect("checkpoints");
}

/// The latest manifest version of orders-0 in the file:// bucket.
fn latest(bucket: &Path) -> PartitionManifest {
    // The newest version, whether a manifest object or a head's delta
    // (`shipper once` commits appends with the head by default).
    let store = bucket::url::BucketUrl::parse(&format!("file://{}", bucket.display()))
        .expect("url")
        .build()
        .expect("store");
    let ms =
        bucket::store::ManifestStore::new(store, ClusterLayout::new("", "src").expect("layout"));
    let pk = PartitionKey {
        tp: tp("orders", 0),
        topic_id: topic_id(1),
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(ms.newest_manifest(&pk))
        .expect("read")
        .expect("a version")
}

fn configs(m: &PartitionManifest) -> BTreeMap<String, (String, ConfigSource)> {
    m.topic_configs
        .as_ref()
        .expect("configs published")
        .iter()
        .map(|(k, v)| (k.clone(), (v.value.clone(), v.source)))
        .collect()
}

#[test]
fn once_publishes_the_topics_configs_and_a_change_alone_makes_a_new_version() {
    use kraft_support as k;
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    let bucket_dir = dir.path().join("bucket");
    let bucket = format!("file://{}", bucket_dir.display());
    let props = dir.path().join("server.properties");
    std::fs::write(
        &props,
        "# static\nlog.segment.bytes = 1048576\nlog.retention.hours=24\n",
    )
    .expect("server.properties");
    append(&logs, 10);
    let mut meta = k::MetaLog::create(&logs, 1);
    meta.append(
        1,
        &[
            k::topic("orders", topic_id(1)),
            k::partition(0, topic_id(1), 0, &[1], &[1], 1, 0, 0, &[]),
            k::config(2, "orders", "retention.ms", Some("3600000")),
            k::config(4, "", "log.retention.bytes", Some("1000000")),
        ],
    );
    let logs_s = logs.to_str().expect("utf-8");
    let props_s = props.to_str().expect("utf-8");
    let once = [
        "once",
        "--create-bucket",
        "--log-dir",
        logs_s,
        "--bucket",
        &bucket,
        "--cluster-id",
        "src",
        "--broker-config",
        props_s,
    ];
    let (code, out, err) = shipper(&once);
    assert_eq!(code, 0, "{out}{err}");
    let first = latest(&bucket_dir);
    let want = |retention: &str| {
        BTreeMap::from([
            (
                "retention.ms".to_string(),
                (retention.to_string(), ConfigSource::Topic),
            ),
            (
                "retention.bytes".to_string(),
                ("1000000".to_string(), ConfigSource::DynamicClusterDefault),
            ),
            (
                "segment.bytes".to_string(),
                ("1048576".to_string(), ConfigSource::StaticBroker),
            ),
        ])
    };
    assert_eq!(configs(&first), want("3600000"));

    // The metadata log is the broker's, not a topic to mirror.
    let (_, status, _) = shipper(&[
        "status",
        "--bucket",
        &bucket,
        "--cluster-id",
        "src",
        "--json",
    ]);
    assert!(!status.contains("__cluster_metadata"), "{status}");

    // Nothing changed: no new version.
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "{err}");
    assert_eq!(latest(&bucket_dir).version, first.version);

    // The retention of the topic changes on the source: a new version with
    // the same data and the new value.
    meta.append(
        2,
        &[k::config(2, "orders", "retention.ms", Some("7200000"))],
    );
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "{err}");
    let second = latest(&bucket_dir);
    assert_eq!(second.version, first.version + 1);
    assert_eq!(configs(&second), want("7200000"));
    assert_eq!(
        (&second.ranges, second.shipped_end_offset),
        (&first.ranges, first.shipped_end_offset)
    );

    // The override is deleted (a null value): the static default shows.
    meta.append(2, &[k::config(2, "orders", "retention.ms", None)]);
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "{err}");
    let third = latest(&bucket_dir);
    assert_eq!(
        configs(&third).get("retention.ms"),
        Some(&("86400000".to_string(), ConfigSource::StaticBroker))
    );

    // A ConfigRecord of a version this build does not know: what it set
    // cannot be trusted, so nothing new is published for the topic (the
    // data still ships).
    meta.append_bytes(&k::data_batch(
        meta.next_offset,
        2,
        &[k::frame(4, 9, &[0, 0, 0])],
    ));
    meta.next_offset += 1;
    // A change after it is read, but the topic's configs are not trusted
    // any more: it is not published either.
    meta.append(2, &[k::config(2, "orders", "retention.ms", Some("5"))]);
    append(&logs, 2);
    let (code, _, err) = shipper(&once);
    assert_eq!(code, 0, "{err}");
    let fourth = latest(&bucket_dir);
    assert!(fourth.shipped_end_offset > third.shipped_end_offset);
    assert_eq!(fourth.topic_configs, third.topic_configs);
}

#[test]
fn a_metadata_log_dir_without_a_metadata_log_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    append(&logs, 1);
    let bucket = format!("file://{}", dir.path().join("bucket").display());
    let (code, out, err) = shipper(&[
        "once",
        "--create-bucket",
        "--log-dir",
        logs.to_str().expect("utf-8"),
        "--bucket",
        &bucket,
        "--cluster-id",
        "src",
        "--metadata-log-dir",
        dir.path().to_str().expect("utf-8"),
    ]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("metadata_log_dir"), "{err}");
}

#[test]
fn without_a_metadata_log_once_warns_that_every_replica_ships_and_publishes_no_configs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    append(&logs, 1);
    let bucket_dir = dir.path().join("bucket");
    let bucket = format!("file://{}", bucket_dir.display());
    let (code, out, err) = shipper(&[
        "once",
        "--create-bucket",
        "--log-dir",
        logs.to_str().expect("utf-8"),
        "--bucket",
        &bucket,
        "--cluster-id",
        "src",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("no KRaft metadata log"), "{err}");
    assert!(err.contains("--metadata-log-dir"), "{err}");
    assert_eq!(latest(&bucket_dir).topic_configs, None);
}

/// A tiered topic at the source (`remote.storage.enable=true` in its
/// KRaft metadata, no `--tiered-topic` flag): offsets that left local
/// storage before they were shipped are recorded as in remote storage,
/// not as lost; the same log with the config unset records a loss.
#[test]
fn a_tiered_source_topic_from_the_metadata_records_a_remote_gap_not_a_loss() {
    use kraft_support as k;
    for tiered in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = dir.path().join("logs");
        let bucket_dir = dir.path().join("bucket");
        let bucket = format!("file://{}", bucket_dir.display());
        append(&logs, 4);
        let mut meta = k::MetaLog::create(&logs, 1);
        let mut records = vec![
            k::topic("orders", topic_id(1)),
            k::partition(0, topic_id(1), 0, &[1], &[1], 1, 0, 0, &[]),
        ];
        if tiered {
            records.push(k::config(
                2,
                "orders",
                "remote.storage.enable",
                Some("true"),
            ));
        }
        meta.append(1, &records);
        let logs_s = logs.to_str().expect("utf-8");
        let once = [
            "once",
            "--create-bucket",
            "--log-dir",
            logs_s,
            "--bucket",
            &bucket,
            "--cluster-id",
            "src",
        ];
        let (code, _, err) = shipper(&once);
        assert_eq!(code, 0, "{err}");
        let shipped = latest(&bucket_dir).shipped_end_offset;
        assert_eq!(shipped, 40);

        // The shipper is down while the broker appends and its local
        // retention moves past what was shipped; remote storage keeps the
        // log from offset 0 (log-start-offset-checkpoint).
        append(&logs, 20);
        let pdir = logs.join("orders-0");
        let bases = kafkalog::segment::list_segments(&pdir).expect("segments");
        let first_kept = *bases
            .iter()
            .find(|b| **b > shipped + 20)
            .expect("a segment past the shipped end");
        for b in bases.iter().filter(|b| **b < first_kept) {
            for ext in ["log", "index", "timeindex"] {
                let _ = std::fs::remove_file(pdir.join(format!("{b:020}.{ext}")));
            }
        }
        let mut starts = BTreeMap::new();
        starts.insert(tp("orders", 0), 0i64);
        kafkalog::checkpoint::write_offset_checkpoint(
            &logs.join(kafkalog::checkpoint::LOG_START_OFFSET_CHECKPOINT),
            &starts,
            false,
        )
        .expect("log start checkpoint");
        let (code, _, err) = shipper(&once);
        let m = latest(&bucket_dir);
        assert_eq!(m.gaps.len(), 1, "tiered={tiered}: {:?}\n{err}", m.gaps);
        let g = &m.gaps[0];
        assert_eq!((g.first_offset, g.last_offset), (shipped, first_kept - 1));
        if tiered {
            assert_eq!(g.cause, manifest::gaps::GapCause::RemoteStorage, "{err}");
            assert!(!g.is_loss());
            assert_eq!(code, 0, "not a loss: {err}");
        } else {
            assert_eq!(g.cause, manifest::gaps::GapCause::Retention, "{err}");
            assert!(g.is_loss());
            assert_eq!(code, 1, "a loss not acknowledged: {err}");
        }
    }
}
