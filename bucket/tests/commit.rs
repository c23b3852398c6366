//! The commit protocol on real stores (`memory://`, `file://` and S3 when
//! configured: `segmirror_testkit::backends`): create-if-absent versions, exactly one winner among
//! concurrent writers, the read-decide-commit loop, and the change feed.

use std::sync::Arc;

use bucket::store::{ManifestStore, StoreError};
use bucket::url::BucketUrl;
use kafkalog::TopicPartition;
use kafkalog::checkpoint::EpochEntry;
use manifest::feed::HeadEntry;
use manifest::layout::{ClusterLayout, PartitionKey};
use manifest::lineage::EpochLineage;
use manifest::partition::{PartitionManifest, ShippedRange};
use object_store::{ObjectStore, ObjectStoreExt};
use segmirror_testkit::{Backend, backends};

fn pk() -> PartitionKey {
    PartitionKey {
        tp: TopicPartition::new("orders", 0).expect("tp"),
        topic_id: "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
    }
}

fn layout(prefix: &str, sub: &str) -> ClusterLayout {
    let p = if prefix.is_empty() {
        sub.to_string()
    } else if sub.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}/{sub}")
    };
    ClusterLayout::new(&p, "src-1").expect("layout")
}

fn manifest_at(version: u64, end: i64, writer: &str) -> PartitionManifest {
    let p = pk();
    let mut m = PartitionManifest::new("src-1", &p.tp, p.topic_id);
    m.version = version;
    m.shipped_end_offset = end;
    m.source_high_watermark = end;
    m.lineage = first_epoch();
    m.writer = writer.to_string();
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_racing_writers_exactly_one_wins() {
    for Backend {
        name,
        store,
        prefix,
        ..
    } in backends()
    {
        let ms = ManifestStore::new(store, layout(&prefix, "race"));
        let mut tasks = Vec::new();
        for w in 0..16 {
            let ms = ms.clone();
            tasks.push(tokio::spawn(async move {
                ms.commit_manifest(&manifest_at(1, 10 + w, &format!("w{w}")))
                    .await
            }));
        }
        let mut wins = 0;
        let mut conflicts = 0;
        for t in tasks {
            match t.await.expect("join") {
                Ok(()) => wins += 1,
                Err(StoreError::Conflict { key }) => {
                    assert!(
                        key.ends_with("/manifest/00000000000000000001.json"),
                        "{key}"
                    );
                    conflicts += 1;
                }
                Err(e) => panic!("{name}: unexpected {e}"),
            }
        }
        assert_eq!((wins, conflicts), (1, 15), "{name}");
        // The winner's manifest is the one stored, whole.
        let m = ms
            .latest_manifest(&pk(), None)
            .await
            .expect("read")
            .expect("present");
        assert_eq!(m.version, 1);
        assert!(m.writer.starts_with('w'));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losers_reread_and_decide_again() {
    for Backend {
        name,
        store,
        prefix,
        ..
    } in backends()
    {
        let ms = ManifestStore::new(store, layout(&prefix, ""));
        // 8 writers each add 10 offsets; every one ends up committed once.
        let mut tasks = Vec::new();
        for w in 0..8 {
            let ms = ms.clone();
            tasks.push(tokio::spawn(async move {
                ms.update_manifest(&pk(), None, |cur| {
                    let end = cur.map_or(0, |c| c.shipped_end_offset);
                    let mut next = manifest_at(0, end + 10, &format!("w{w}"));
                    next.lineage = first_epoch();
                    Ok::<_, std::convert::Infallible>(Some(next))
                })
                .await
            }));
        }
        for t in tasks {
            t.await.expect("join").expect("store").expect("decided");
        }
        let m = ms
            .latest_manifest(&pk(), Some(1))
            .await
            .expect("read")
            .expect("present");
        assert_eq!((m.version, m.shipped_end_offset), (8, 80), "{name}");
    }
}

#[tokio::test]
async fn manifests_are_checked_against_their_key() {
    for Backend {
        name,
        store,
        prefix,
        ..
    } in backends()
    {
        let ms = ManifestStore::new(store.clone(), layout(&prefix, ""));
        ms.commit_manifest(&manifest_at(1, 5, "a"))
            .await
            .expect("commit");
        // A manifest of another cluster under this cluster's key.
        let mut other = manifest_at(2, 6, "b");
        other.source_cluster_id = "intruder".into();
        let key = ms.layout().manifest_key(&pk(), 2);
        ms.put_new(&key, other.encode().expect("encode").into())
            .await
            .expect("raw put");
        match ms.get_manifest(&pk(), 2).await {
            Err(e @ StoreError::Identity { .. }) => {
                assert!(!e.is_retryable());
                assert!(e.to_string().contains("intruder"), "{e}");
            }
            other => panic!("{name}: expected identity error, got {other:?}"),
        }
        // Garbage is a format error naming the key.
        let key3 = ms.layout().manifest_key(&pk(), 3);
        ms.put_new(&key3, bytes::Bytes::from_static(b"{not json"))
            .await
            .expect("raw put");
        let e = ms.get_manifest(&pk(), 3).await.expect_err("garbage");
        assert!(
            matches!(e, StoreError::Format { .. }) && e.to_string().contains(&key3),
            "{e}"
        );
        // A missing version is NotFound and retryable.
        let e = ms.get_manifest(&pk(), 9).await.expect_err("missing");
        assert!(matches!(e, StoreError::NotFound { .. }) && e.is_retryable());
    }
}

/// Overwrites `key` with its bytes with one bit flipped.
async fn flip_a_bit(store: &Arc<dyn ObjectStore>, key: &str, at: usize) {
    let path = object_store::path::Path::from(key);
    let mut bytes = store
        .get(&path)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes")
        .to_vec();
    let at = at % bytes.len();
    bytes[at] ^= 0x01;
    store
        .put(&path, object_store::PutPayload::from(bytes))
        .await
        .expect("put");
}

#[tokio::test]
async fn damaged_manifests_pages_and_heads_are_format_errors_naming_kind_and_key() {
    for Backend {
        name,
        store,
        prefix,
        ..
    } in backends()
    {
        let ms = ManifestStore::new(store.clone(), layout(&prefix, "damage"));
        let p = pk();
        let mut m = manifest_at(1, 0, "a");
        let mut page_key = None;
        for i in 0..(manifest::partition::MAX_INLINE_RANGES as i64 + 1) {
            let r = ShippedRange {
                key: format!("k/data/{i}"),
                base_offset: i * 10,
                last_offset: i * 10 + 9,
                bytes: 100,
                batches: 1,
                crc32c: 0,
                max_timestamp: 0,
                epochs: EpochLineage::new(),
                segment_base_offset: 0,
                completes_segment: false,
                segment_generation: 0,
                object_offset: None,
                compacted: false,
            };
            if let Some((key, page)) = m.push_range(r, |a, b| {
                ms.layout().page_key(&p, a, b, &bucket::upload_id::fresh())
            }) {
                ms.put_page(&key, &page).await.expect("page");
                page_key = Some(key);
            }
        }
        ms.commit_manifest(&m).await.expect("commit");
        let head = ms
            .publish_head(None, "a", &[HeadEntry::for_manifest(&m)])
            .await
            .expect("head");
        let page_key = page_key.expect("a page was sealed");
        let manifest_key = ms.layout().manifest_key(&p, 1);
        let head_key = ms.layout().head_key(head.seq);
        // Undamaged, everything reads back.
        assert_eq!(ms.get_manifest(&p, 1).await.expect("manifest"), m);
        assert_eq!(ms.get_head(head.seq).await.expect("head"), head);
        ms.get_page(&page_key).await.expect("page");

        flip_a_bit(&store, &manifest_key, 300).await;
        flip_a_bit(&store, &page_key, 200).await;
        flip_a_bit(&store, &head_key, 100).await;
        let errors = [
            (
                "manifest",
                &manifest_key,
                ms.get_manifest(&p, 1).await.err(),
            ),
            ("page", &page_key, ms.get_page(&page_key).await.err()),
            ("head", &head_key, ms.get_head(head.seq).await.err()),
        ];
        for (kind, key, e) in errors {
            let e = e.unwrap_or_else(|| panic!("{name}: a damaged {kind} was read"));
            assert!(
                matches!(e, StoreError::Format { .. }) && !e.is_retryable(),
                "{name}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(&format!(
                    "{key}: {kind} checksum mismatch: the object says CRC-32C 0x"
                )),
                "{name}: {text}"
            );
        }
        // The walk to the latest version stops at the damage too.
        assert!(matches!(
            ms.latest_manifest(&p, None).await,
            Err(StoreError::Format { .. })
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_change_feed_merges_concurrent_shippers() {
    for Backend {
        name,
        store,
        prefix,
        ..
    } in backends()
    {
        let ms = ManifestStore::new(store, layout(&prefix, "feed"));
        assert!(ms.latest_head(None).await.expect("empty").is_none());
        let mut tasks = Vec::new();
        for p in 0..6 {
            let ms = ms.clone();
            tasks.push(tokio::spawn(async move {
                let tp = TopicPartition::new("orders", p).expect("tp");
                let mut m = PartitionManifest::new(
                    "src-1",
                    &tp,
                    "vVw7a5a_QkWcK7JvBD2t8Q".parse().expect("id"),
                );
                m.version = 1;
                m.shipped_end_offset = i64::from(p) * 10;
                ms.publish_head(
                    None,
                    &format!("shipper-{p}"),
                    &[HeadEntry::for_manifest(&m)],
                )
                .await
            }));
        }
        for t in tasks {
            t.await.expect("join").expect("published");
        }
        let head = ms.latest_head(None).await.expect("read").expect("present");
        assert_eq!(
            head.partitions.len(),
            6,
            "{name}: every shipper's entry survives the races"
        );
        assert_eq!(head.seq, 6);
        // Nothing new: no new head.
        let again = ms
            .publish_head(Some(head.seq), "x", &[head.partitions["orders-3"].clone()])
            .await
            .expect("noop");
        assert_eq!(again.seq, 6);
    }
}

/// The newest head from a known one costs one GET per head after it plus
/// the probe that finds none: the last head a probe read is the answer,
/// not read again (it was, once per call: a GET per poll that saw a new
/// head). Without a newer head, the probe and the known head: 2 GETs.
#[tokio::test]
async fn the_newest_head_from_a_known_one_is_read_once() {
    let counting = Arc::new(bucket::counting::CountingStore::new(
        BucketUrl::Memory.build().expect("memory"),
    ));
    let ms = ManifestStore::new(
        counting.as_dyn(),
        ClusterLayout::new("", "src-1").expect("layout"),
    );
    for v in 1..=3 {
        let mut m = manifest_at(v, 0, "a");
        m.shipped_end_offset = v as i64 * 10;
        ms.publish_head(None, "w", &[HeadEntry::for_manifest(&m)])
            .await
            .expect("published");
    }
    for (known, want_seq, want_gets) in [(1, 3, 3), (2, 3, 2), (3, 3, 2)] {
        let before = counting.snapshot();
        let head = ms
            .latest_head(Some(known))
            .await
            .expect("read")
            .expect("a head");
        let used = counting.snapshot().since(&before);
        assert_eq!(
            (head.seq, used.get, used.list),
            (want_seq, want_gets, 0),
            "from head {known}: {used:?}"
        );
    }
}

#[tokio::test]
async fn pages_are_written_before_the_manifest_that_names_them() {
    let store = BucketUrl::Memory.build().expect("memory");
    let ms = ManifestStore::new(store, ClusterLayout::new("", "src-1").expect("layout"));
    let p = pk();
    let mut m = manifest_at(1, 0, "a");
    let mut written = 0;
    for i in 0..600i64 {
        let r = ShippedRange {
            key: ms
                .layout()
                .data_key(&p, i * 10, i * 10 + 9, 0, "u1")
                .expect("key"),
            base_offset: i * 10,
            last_offset: i * 10 + 9,
            bytes: 100,
            batches: 1,
            crc32c: 0,
            max_timestamp: 0,
            epochs: EpochLineage::new(),
            segment_base_offset: 0,
            completes_segment: false,
            segment_generation: 0,
            compacted: false,
            object_offset: None,
        };
        if let Some((key, page)) = m.push_range(r, |a, b| {
            ms.layout().page_key(&p, a, b, &bucket::upload_id::fresh())
        }) {
            ms.put_page(&key, &page).await.expect("page");
            ms.put_page(&key, &page)
                .await
                .expect("rewriting an identical page is fine");
            written += 1;
        }
    }
    ms.commit_manifest(&m).await.expect("commit");
    assert_eq!(written, 1);
    let back = ms
        .latest_manifest(&p, None)
        .await
        .expect("read")
        .expect("present");
    let page = ms
        .get_page(&back.pages[0].key)
        .await
        .expect("page readable");
    assert_eq!(page.ranges.len(), 256);
    assert_eq!(page.ranges[0].base_offset, 0);
}

#[tokio::test]
async fn a_missing_bucket_is_a_permanent_error_naming_bucket_and_credentials() {
    let Some(bucket) = segmirror_testkit::needs::s3() else {
        return;
    };
    let url = BucketUrl::parse(&format!("s3://{bucket}-does-not-exist/x")).expect("url");
    let ms = ManifestStore::new(
        url.build().expect("s3"),
        ClusterLayout::new("x", "src-1").expect("layout"),
    )
    .with_location(url.location());
    let e = ms
        .commit_manifest(&manifest_at(1, 1, "a"))
        .await
        .expect_err("no such bucket");
    assert!(!e.is_retryable(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("does-not-exist")
            && text.contains("credentials: environment (AWS_ACCESS_KEY_ID)"),
        "{text}"
    );
    assert!(
        !text.contains("segmirror-test-secret"),
        "no secret in errors: {text}"
    );
}

/// A lineage of epoch 0 from offset 0.
fn first_epoch() -> EpochLineage {
    EpochLineage::from_entries([EpochEntry {
        epoch: 0,
        start_offset: 0,
    }])
    .expect("valid lineage")
}

/// `get_stream` hands back an object's bytes whole and in order (local
/// files in `READ_PIECE` pieces), one GET, and a missing object is
/// NotFound, as `get` says.
#[tokio::test]
async fn an_object_read_as_a_stream_is_the_object() {
    use futures::StreamExt;
    for Backend {
        name,
        store,
        prefix,
        ..
    } in backends()
    {
        let ms = ManifestStore::new(store.clone(), layout(&prefix, ""));
        let body: Vec<u8> = (0..(bucket::store::READ_PIECE * 2 + 12345))
            .map(|i| (i % 251) as u8)
            .collect();
        let key = format!("{prefix}streamed/object");
        ms.put_new(&key, body.clone().into()).await.expect("put");
        let mut got = ms.get_stream(&key).await.expect("get_stream");
        assert_eq!(got.len, body.len() as u64, "{name}");
        let mut read = Vec::new();
        let mut pieces = 0;
        while let Some(piece) = got.pieces.next().await {
            let piece = piece.expect("piece");
            assert!(!piece.is_empty(), "{name}");
            read.extend_from_slice(&piece);
            pieces += 1;
        }
        assert_eq!(read, body, "{name}");
        if name == "file" {
            assert_eq!(pieces, 3, "file pieces of READ_PIECE");
        }
        let e = ms
            .get_stream(&format!("{key}-missing"))
            .await
            .expect_err("missing");
        assert!(matches!(e, StoreError::NotFound { .. }), "{name}: {e}");
    }
}

/// A manifest version made by deltas in heads (layout 2, step 2): two
/// writers' deltas committed through `commit_head`, a stale one refused,
/// and `manifest_of` resolving the head's entry to exactly the version the
/// writer computed (the object, then each head's delta).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_in_heads_resolve_to_the_versions_they_commit() {
    use manifest::delta::Delta;
    for Backend {
        name,
        store,
        prefix,
        ..
    } in backends()
    {
        let ms = ManifestStore::new(store, layout(&prefix, "deltas"));
        let p = pk();
        let v1 = manifest_at(1, 0, "a");
        ms.commit_manifest(&v1).await.expect("object v1");
        ms.publish_head(None, "a", &[HeadEntry::for_manifest(&v1)])
            .await
            .expect("head 1");
        // v2 and v3 append one range each, as deltas.
        let mut versions = vec![v1.clone()];
        let mut expected = v1.clone();
        for (i, writer) in [(0i64, "a"), (1, "b")] {
            let prev = expected.clone();
            let mut next = prev.clone();
            next.version += 1;
            next.writer = writer.into();
            next.ranges.push(ShippedRange {
                key: "k/packs/aa/p.pack".into(),
                base_offset: i * 10,
                last_offset: i * 10 + 9,
                bytes: 100,
                batches: 1,
                crc32c: 7,
                max_timestamp: 0,
                epochs: first_epoch(),
                segment_base_offset: 0,
                completes_segment: false,
                compacted: false,
                segment_generation: 0,
                object_offset: Some(i as u64 * 100),
            });
            next.shipped_end_offset = i * 10 + 10;
            next.source_high_watermark = next.shipped_end_offset;
            let d = Delta::between(&prev, &next).expect("an append");
            let (head, refused) = ms
                .commit_head(
                    None,
                    writer,
                    &[HeadEntry::for_delta(&next, d, 1)],
                    None,
                    None,
                )
                .await
                .expect("head");
            assert!(refused.is_empty(), "[{name}] {refused:?}");
            assert_eq!(head.partitions["orders-0"].manifest_version, next.version);
            expected = next;
            versions.push(expected.clone());
        }
        // The newest head names v3, made by the deltas in heads 2 and 3.
        let head = ms.latest_head(None).await.expect("read").expect("a head");
        let entry = &head.partitions["orders-0"];
        let chain = entry.chain.as_ref().expect("a chain");
        assert_eq!(
            (chain.object_version, chain.heads.clone()),
            (1, vec![2, 3]),
            "[{name}]"
        );
        assert_eq!(
            ms.manifest_of(&p, entry).await.expect("resolves"),
            expected,
            "[{name}]"
        );
        // A delta after v2 (stale: v3 is committed) is refused, the head unchanged.
        let stale = Delta::between(&versions[1], &{
            let mut n = versions[1].clone();
            n.version += 1;
            n.shipped_end_offset += 5;
            n.source_high_watermark += 5;
            n
        })
        .expect("an append");
        let (after, refused) = ms
            .commit_head(
                None,
                "c",
                &[HeadEntry::for_delta(&versions[2], stale, 1)],
                None,
                None,
            )
            .await
            .expect("head");
        assert_eq!(refused, vec!["orders-0".to_string()], "[{name}]");
        assert_eq!(after.seq, head.seq, "[{name}] nothing written");
        // No manifest object of v2 or v3 was written.
        for v in [2, 3] {
            assert!(
                matches!(
                    ms.get_manifest(&p, v).await,
                    Err(StoreError::NotFound { .. })
                ),
                "[{name}] v{v} is in heads only"
            );
        }
    }
}
