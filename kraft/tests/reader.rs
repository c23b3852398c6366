//! The reader over files written as a broker writes them: a snapshot plus
//! log segments of real magic-2 batches from the independent encoder.

mod support;

use kraft::MetadataLogReader;
use kraft::image::MetadataImage;
use support::*;

const T: u8 = 1;

fn leader(image: &MetadataImage, topic: &str, p: i32) -> (i32, i32, i32) {
    let part = &image.topics[topic].partitions[&p];
    (part.leader, part.leader_epoch, part.partition_epoch)
}

/// A log: LEADER_CHANGE at offset 0 epoch 1 (as observed on 3.4), MV,
/// topic "orders" with two partitions led by 1, a config.
fn fresh_log(dir: &std::path::Path) -> MetaLog {
    let mut log = MetaLog::create(dir, 1);
    log.append_control(1, LEADER_CHANGE, leader_change_value(1, &[1]));
    log.append(1, &[feature("metadata.version", 8)]);
    log.append(
        1,
        &[
            topic("orders", id(T)),
            config(2, "orders", "retention.ms", Some("60000")),
            partition(0, id(T), 0, &[1, 2], &[1, 2], 1, 0, 0, &[]),
            partition(0, id(T), 1, &[2, 1], &[2, 1], 2, 0, 0, &[]),
        ],
    );
    log
}

#[test]
fn a_log_without_snapshot_is_replayed_from_offset_zero() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = fresh_log(tmp.path());
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    let report = reader.poll().expect("poll");
    assert_eq!(report.rebuilt.as_deref(), Some("first read"));
    let image = reader.image().expect("image");
    assert_eq!(image.metadata_version(), Some(8));
    assert_eq!(leader(image, "orders", 0), (1, 0, 0));
    assert_eq!(image.topic_configs["orders"]["retention.ms"], "60000");
    let raft = image.raft_leader.expect("leader change read");
    assert_eq!((raft.id, raft.epoch), (1, 1));
    assert_eq!(reader.next_offset(), Some(log.next_offset));
    assert_eq!(image.applied.map(|p| (p.offset, p.epoch)), Some((5, 1)));
}

#[test]
fn incremental_reads_apply_only_what_was_appended_and_nothing_when_idle() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = fresh_log(tmp.path());
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("first");
    let idle = reader.poll().expect("idle");
    assert_eq!(
        (idle.rebuilt.clone(), idle.batches, idle.bytes),
        (None, 0, 0),
        "{idle:?}"
    );

    log.append(2, &[change(0, id(T), 0, &[("Leader", V::Int(2))])]);
    log.append(2, &[noop(), noop()]);
    let report = reader.poll().expect("after append");
    assert_eq!(report.rebuilt, None);
    assert_eq!((report.batches, report.records), (2, 3));
    let image = reader.image().expect("image");
    assert_eq!(leader(image, "orders", 0), (2, 1, 1));
    assert_eq!(image.applied.map(|p| (p.offset, p.epoch)), Some((8, 2)));

    // A rolled segment is followed.
    log.roll();
    log.append(2, &[change(0, id(T), 1, &[("Leader", V::Int(-1))])]);
    let report = reader.poll().expect("after roll");
    assert_eq!(
        (report.rebuilt.clone(), report.batches),
        (None, 1),
        "{report:?}"
    );
    assert_eq!(
        leader(reader.image().expect("image"), "orders", 1),
        (-1, 1, 1)
    );
}

#[test]
fn a_torn_last_batch_is_waited_for_then_applied() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = fresh_log(tmp.path());
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("first");
    let batch = data_batch(
        log.next_offset,
        1,
        &[change(0, id(T), 0, &[("Leader", V::Int(2))])],
    );
    log.append_bytes(&batch[..30]);
    let before = log.segment_len() - 30;
    let report = reader.poll().expect("torn tail is not an error");
    assert_eq!(report.batches, 0);
    assert_eq!(report.incomplete_tail_at, Some(before));
    assert_eq!(
        leader(reader.image().expect("image"), "orders", 0),
        (1, 0, 0)
    );
    log.append_bytes(&batch[30..]);
    log.next_offset += 1;
    let report = reader.poll().expect("completed");
    assert_eq!((report.rebuilt.clone(), report.batches), (None, 1));
    assert_eq!(report.incomplete_tail_at, None);
    assert_eq!(
        leader(reader.image().expect("image"), "orders", 0),
        (2, 1, 1)
    );
}

#[test]
fn a_truncated_and_rewritten_tail_rebuilds_instead_of_double_applying() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = fresh_log(tmp.path());
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("first");
    let keep = log.segment_len();
    let at = log.next_offset;
    // Uncommitted tail at epoch 1: leader moves to 2.
    log.append(1, &[change(0, id(T), 0, &[("Leader", V::Int(2))])]);
    reader.poll().expect("tail read");
    assert_eq!(
        leader(reader.image().expect("image"), "orders", 0),
        (2, 1, 1)
    );

    // A new Raft leader (epoch 2) truncates it and writes something else,
    // of the same size, at the same offset.
    log.truncate(keep, at);
    log.append(2, &[change(0, id(T), 0, &[("Leader", V::Int(1))])]);
    assert_eq!(reader.generation(), 1);
    let report = reader.poll().expect("after rewrite");
    let why = report.rebuilt.expect("rebuilt");
    assert!(why.contains("changed"), "{why}");
    assert_eq!(reader.generation(), 2);
    // One change applied once: epoch 1, not 2.
    assert_eq!(
        leader(reader.image().expect("image"), "orders", 0),
        (1, 1, 1)
    );

    // Truncated and not (yet) rewritten: the file is shorter than the
    // position read up to.
    log.truncate(keep, at);
    let report = reader.poll().expect("after truncation");
    let why = report.rebuilt.expect("rebuilt");
    assert!(why.contains("shrank"), "{why}");
    assert_eq!(
        leader(reader.image().expect("image"), "orders", 0),
        (1, 0, 0)
    );
}

#[test]
fn the_latest_snapshot_replaces_state_and_the_log_resumes_after_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = fresh_log(tmp.path()); // offsets 0..6
    // Offsets 6, 7: in the log and in the snapshot below (end offset 8).
    log.append(1, &[change(0, id(T), 0, &[("Leader", V::Int(2))]), noop()]);
    let snapshot = vec![
        vec![feature("metadata.version", 19)],
        vec![
            register_broker(3, 1, 10, false, &[id(70)]),
            topic("orders", id(T)),
            partition(1, id(T), 0, &[1, 2], &[1, 2], 2, 1, 1, &[id(70), id(71)]),
            partition(1, id(T), 1, &[2, 1], &[2, 1], 2, 0, 0, &[id(71), id(70)]),
            config(2, "orders", "retention.ms", Some("60000")),
        ],
    ];
    log.write_snapshot(8, 1, &snapshot);
    // An older snapshot, an in-flight .part and a .deleted one (garbage)
    // are not read.
    log.write_snapshot(3, 1, &[vec![feature("metadata.version", 7)]]);
    std::fs::write(
        log.dir
            .join("00000000000000000009-0000000001-1234.checkpoint.part"),
        b"junk",
    )
    .expect("part");
    std::fs::write(
        log.dir
            .join("00000000000000000002-0000000001.checkpoint.deleted"),
        b"junk",
    )
    .expect("deleted");
    // bootstrap.checkpoint in the log dir root is not live state.
    std::fs::write(
        tmp.path().join("bootstrap.checkpoint"),
        snapshot_bytes(0, &[vec![feature("metadata.version", 3)]]),
    )
    .expect("bootstrap");
    log.append(1, &[change(0, id(T), 0, &[("Isr", ints(&[2]))])]);

    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("poll");
    let image = reader.image().expect("image");
    assert_eq!(reader.snapshot().map(|s| s.end_offset), Some(8));
    assert_eq!(image.metadata_version(), Some(19), "from the snapshot");
    // The snapshot's leader epoch 1 plus the ISR change at offset 8 only:
    // the change at offset 6 (inside the snapshot) is not applied twice.
    assert_eq!(leader(image, "orders", 0), (2, 1, 2));
    assert_eq!(image.topics["orders"].partitions[&0].isr, vec![2]);
    assert_eq!(
        image.topics["orders"].partitions[&1].directory_of(1),
        Some(id(70))
    );
    assert!(image.brokers.contains_key(&1));
    assert_eq!(reader.next_offset(), Some(9));
    assert!(image.untrusted.is_empty());
}

#[test]
fn a_snapshot_ahead_of_the_position_replaces_a_truncated_log() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = fresh_log(tmp.path());
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("first");
    // A follower downloads the leader's snapshot at 100 and truncates its
    // log fully: the old segment goes, a new one starts at 100.
    std::fs::remove_file(log.segment_path()).expect("rm");
    log.write_snapshot(
        100,
        4,
        &[vec![
            feature("metadata.version", 19),
            topic("payments", id(2)),
            partition(0, id(2), 0, &[1], &[1], 1, 9, 12, &[]),
        ]],
    );
    let mut log = MetaLog {
        segment: 100,
        next_offset: 100,
        ..log
    };
    log.roll();
    log.append(4, &[change(0, id(2), 0, &[("Leader", V::Int(-1))])]);
    let report = reader.poll().expect("poll");
    assert!(report.rebuilt.expect("rebuilt").contains("ahead"));
    let image = reader.image().expect("image");
    assert!(!image.topics.contains_key("orders"));
    assert_eq!(leader(image, "payments", 0), (-1, 10, 13));
}

#[test]
fn gaps_corruption_and_bad_snapshots_are_errors_not_guesses() {
    // No snapshot and a log that does not start at 0.
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = MetaLog::create(tmp.path(), 1);
    log.segment = 50;
    log.next_offset = 50;
    log.append(1, &[noop()]);
    let e = MetadataLogReader::for_log_dir(tmp.path())
        .poll()
        .expect_err("gap");
    assert!(e.to_string().contains("starts at offset 50"), "{e}");

    // A corrupt batch (CRC) is an error; the image stays as it was and the
    // next poll retries.
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = fresh_log(tmp.path());
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("first");
    let mut bad = data_batch(log.next_offset, 1, &[remove_topic(id(T))]);
    let n = bad.len();
    bad[n - 3] ^= 0xff;
    log.append_bytes(&bad);
    log.append(1, &[noop()]);
    let e = reader.poll().expect_err("corrupt");
    assert!(e.to_string().contains("CRC"), "{e}");
    assert!(reader.image().expect("kept").topics.contains_key("orders"));

    // A snapshot without its footer (cut short) is refused.
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = MetaLog::create(tmp.path(), 1);
    let path = log.write_snapshot(5, 1, &[vec![feature("metadata.version", 19)]]);
    let bytes = std::fs::read(&path).expect("read");
    let footer = control_batch(2, 1, SNAPSHOT_FOOTER, snapshot_footer_value()).len();
    std::fs::write(&path, &bytes[..bytes.len() - footer]).expect("cut");
    let e = MetadataLogReader::for_log_dir(tmp.path())
        .poll()
        .expect_err("no footer");
    assert!(e.to_string().contains("footer"), "{e}");

    // No metadata log at all.
    let empty = tempfile::tempdir().expect("tempdir");
    let e = MetadataLogReader::for_log_dir(empty.path())
        .poll()
        .expect_err("none");
    assert!(matches!(e, kraft::Error::NoMetadataLog { .. }), "{e}");
}

#[test]
fn the_observed_bootstrap_checkpoint_layout_reads_as_a_snapshot() {
    // [observed] bootstrap.checkpoint: three single-record batches at base
    // offsets 0, 1, 2, epoch 0: SnapshotHeader (timestamp 0),
    // FeatureLevelRecord metadata.version (8 on 3.4), SnapshotFooter.
    let bytes = snapshot_bytes(0, &[vec![feature("metadata.version", 8)]]);
    let bases: Vec<i64> = kafkalog::batch::BatchIter::verified(&bytes, 0)
        .map(|b| b.expect("batch").0.base_offset)
        .collect();
    assert_eq!(bases, vec![0, 1, 2]);
    // Where the broker puts it (the log dir root) it is ignored; under a
    // snapshot name it is a valid snapshot of MV 8.
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = MetaLog::create(tmp.path(), 1);
    std::fs::write(tmp.path().join("bootstrap.checkpoint"), &bytes).expect("bootstrap");
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("empty log");
    assert_eq!(reader.image().expect("image").metadata_version(), None);
    std::fs::write(
        log.dir.join("00000000000000000000-0000000000.checkpoint"),
        &bytes,
    )
    .expect("as snapshot");
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("snapshot");
    assert_eq!(reader.image().expect("image").metadata_version(), Some(8));
}

#[test]
fn an_undecodable_record_in_a_valid_batch_distrusts_everything_and_reading_goes_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = fresh_log(tmp.path());
    log.append(1, &[frame(3, 0, &[0xff, 0xff])]);
    log.append(1, &[change(0, id(T), 0, &[("Leader", V::Int(2))])]);
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("poll");
    let image = reader.image().expect("image");
    assert!(image.partition_untrusted("orders", 1).is_some());
    assert_eq!(leader(image, "orders", 0), (2, 1, 1));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    #[test]
    fn hostile_segment_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut log = fresh_log(tmp.path());
        log.append_bytes(&bytes);
        let mut reader = MetadataLogReader::for_log_dir(tmp.path());
        let _ = reader.poll();
        log.roll();
        log.append_bytes(&bytes);
        let _ = reader.poll();
    }

    #[test]
    fn mutated_records_in_valid_batches_never_panic(idx in 0usize..200, val in proptest::num::u8::ANY, cut in 0usize..200) {
        let mut value = partition(1, id(T), 0, &[1, 2], &[1], 1, 0, 0, &[id(3), id(4)]);
        let i = idx % value.len();
        value[i] = val;
        value.truncate(cut.max(1).min(value.len()));
        let _ = kraft::records::decode_value(&value);
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut log = fresh_log(tmp.path());
        log.append(1, &[value]);
        let mut reader = MetadataLogReader::for_log_dir(tmp.path());
        let _ = reader.poll();
    }

    #[test]
    fn random_record_values_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
        let _ = kraft::records::decode_value(&bytes);
        let mut framed = vec![1, 5, 0];
        framed.extend_from_slice(&bytes);
        let _ = kraft::records::decode_value(&framed);
    }
}

#[test]
fn at_ten_thousand_partitions_an_idle_poll_reads_nothing_and_an_append_only_itself() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = MetaLog::create(tmp.path(), 1);
    let mut records = vec![feature("metadata.version", 19)];
    for t in 0..1000u32 {
        let mut bytes = [7u8; 16];
        bytes[12..].copy_from_slice(&(t + 1).to_be_bytes());
        let topic_id = kafkalog::TopicId::from_bytes(bytes);
        records.push(topic(&format!("topic-{t}"), topic_id));
        for p in 0..10 {
            records.push(partition(
                1,
                topic_id,
                p,
                &[1, 2, 3],
                &[1, 2, 3],
                1 + p % 3,
                0,
                0,
                &[id(1), id(2), id(3)],
            ));
        }
    }
    let snapshot = log.write_snapshot(
        100,
        2,
        &records.chunks(1000).map(<[_]>::to_vec).collect::<Vec<_>>(),
    );
    log.segment = 100;
    log.next_offset = 100;
    log.roll();
    log.append(2, &[noop()]);
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    let started = std::time::Instant::now();
    let first = reader.poll().expect("first");
    let first_took = started.elapsed();
    let partitions: usize = reader
        .image()
        .expect("image")
        .topics
        .values()
        .map(|t| t.partitions.len())
        .sum();
    assert_eq!(partitions, 10_000);
    let started = std::time::Instant::now();
    let idle = reader.poll().expect("idle");
    let idle_took = started.elapsed();
    assert_eq!(
        (idle.batches, idle.bytes, idle.rebuilt.clone()),
        (0, 0, None)
    );
    log.append(2, &[noop(), noop()]);
    let next = reader.poll().expect("append");
    assert_eq!((next.batches, next.records), (1, 2));
    let snapshot_bytes = std::fs::metadata(&snapshot).expect("stat").len();
    eprintln!(
        "10,000 partitions: snapshot {snapshot_bytes} bytes; first poll {} bytes in {first_took:?}; idle poll {} bytes in {idle_took:?}; one appended batch {} bytes",
        first.bytes, idle.bytes, next.bytes
    );
}

#[test]
fn the_same_records_rewritten_by_a_new_raft_leader_are_noticed_by_epoch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = fresh_log(tmp.path());
    let mut reader = MetadataLogReader::for_log_dir(tmp.path());
    reader.poll().expect("first");
    let keep = log.segment_len();
    let at = log.next_offset;
    let records = [change(0, id(T), 0, &[("Leader", V::Int(2))])];
    log.append(1, &records);
    reader.poll().expect("tail");
    // Byte-identical but for the epoch, which the CRC does not cover.
    log.truncate(keep, at);
    log.append(2, &records);
    let report = reader.poll().expect("rewritten");
    assert!(report.rebuilt.expect("rebuilt").contains("changed"));
    let image = reader.image().expect("image");
    assert_eq!(leader(image, "orders", 0), (2, 1, 1));
    assert_eq!(image.applied.map(|p| p.epoch), Some(2));
}
