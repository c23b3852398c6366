//! Fuzz smoke tests (proptest, many cases, seconds): the same properties
//! as the cargo-fuzz targets `manifest_decode` and `config_toml`
//! (`fuzz/fuzz_targets/`), on random bytes and on mutations of valid
//! inputs ([`segmirror_reliability::seeds`]). Nothing may panic, and
//! whatever decodes must survive an encode/decode round trip.
//! `PROPTEST_CASES` scales them (CI default: 2,000 per property).

use manifest::feed::Head;
use manifest::mirror_record::MirrorRecord;
use manifest::partition::{Page, PartitionManifest};
use proptest::prelude::*;
use segmirror_reliability::seeds;

/// A mutation: (kind, position, byte).
type Mutation = (u8, usize, u8);

fn mutate(seed: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for &(kind, pos, byte) in muts {
        if b.is_empty() {
            b.push(byte);
            continue;
        }
        let p = pos % b.len();
        match kind % 6 {
            0 => b[p] ^= byte | 1,
            1 => b.insert(p, byte),
            2 => {
                b.remove(p);
            }
            3 => b.truncate(p),
            4 => {
                // Duplicate a short run (repeated fields, nested values).
                let end = (p + 1 + byte as usize % 32).min(b.len());
                let run: Vec<u8> = b[p..end].to_vec();
                b.splice(p..p, run);
            }
            _ => {
                // A JSON/TOML-significant character.
                const SPECIAL: &[u8] = b"{}[]\":,0-9e.\\ntf\n=#'";
                b[p] = SPECIAL[byte as usize % SPECIAL.len()];
            }
        }
    }
    b
}

fn json_seeds() -> &'static [Vec<u8>] {
    static SEEDS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut v = seeds::manifests();
        v.extend(seeds::heads());
        v.extend(seeds::pages().into_iter().take(1));
        // Keep the mutated seeds small enough for thousands of cases.
        v.retain(|s| s.len() < 8 * 1024);
        v
    })
}

fn check_json(data: &[u8]) {
    if let Ok(m) = PartitionManifest::decode(data) {
        m.validate().expect("a decoded manifest is valid");
        let bytes = m.encode().expect("a decoded manifest encodes");
        let again = PartitionManifest::decode(&bytes).expect("an encoded manifest decodes");
        assert_eq!(m, again);
        for o in [i64::MIN, -1, 0, 5, m.shipped_end_offset, i64::MAX] {
            let _ = m.pages_from(o);
            let _ = m.inline_ranges_from(o);
        }
        let _ = m.range_count();
        let _ = m.latest_epoch();
        let _ = m.topic_partition().expect("validated");
        let _ = manifest::feed::HeadEntry::for_manifest(&m);
    }
    if let Ok(h) = Head::decode(data) {
        let bytes = h.encode().expect("a decoded head encodes");
        assert_eq!(Head::decode(&bytes).expect("re-decodes"), h);
        let mut merged = h.clone();
        merged.merge(h.partitions.values().cloned());
    }
    if let Ok(p) = Page::decode(data) {
        let bytes = p.encode().expect("encodes");
        assert_eq!(Page::decode(&bytes).expect("re-decodes"), p);
    }
    if let Ok(r) = MirrorRecord::decode(data) {
        let bytes = r.encode().expect("encodes");
        assert_eq!(MirrorRecord::decode(&bytes).expect("re-decodes"), r);
    }
}

fn check_toml(text: &str) {
    if let Ok(c) = applier::config::ApplierConfig::from_toml(text) {
        let _ = c.clone().merge(c.clone());
        let _ = c.validate(true);
        let _ = c.validate(false);
    }
    if let Ok(c) = shipper::config::ShipperConfig::from_toml(text) {
        let _ = c.clone().merge(c.clone());
        let _ = c.validate();
    }
}

fn toml_seeds() -> Vec<String> {
    let mut v = seeds::applier_configs();
    v.extend(seeds::shipper_configs());
    v
}

/// A generated `key = value` file over the known fields of both configs.
fn toml_lines() -> impl Strategy<Value = String> {
    const KEYS: &[&str] = &[
        "log_dir",
        "log_dirs",
        "bucket",
        "source_cluster_id",
        "cluster_id",
        "shipper_id",
        "topics",
        "exclude",
        "poll_interval_ms",
        "download_concurrency",
        "tiered_topics",
        "metrics_addr",
        "tail_interval",
        "upload_concurrency",
        "part_size",
        "max_object_size",
        "max_cycle_bytes",
        "rate_limit",
        "ship_beyond_hw",
        "delete_grace",
        "sweep_interval",
        "partition_delete_grace",
        "fence_backoff",
        "error_backoff",
    ];
    let value = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        "[a-zA-Z0-9 ./:_*|()+-]{0,24}".prop_map(|s| format!("{s:?}")),
        prop::collection::vec("[a-z0-9/._-]{0,12}", 0..3).prop_map(|v| format!(
            "[{}]",
            v.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        "(-?[0-9]{1,12}(ms|s|m|h|KiB|MiB|GiB|k|M)?|never)".prop_map(|s| format!("{s:?}")),
    ];
    prop::collection::vec((prop::sample::select(KEYS), value), 0..10).prop_map(|kv| {
        kv.into_iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect::<String>()
    })
}

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn manifest_head_page_decoders_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        check_json(&data);
    }

    #[test]
    fn manifest_head_page_decoders_on_mutated_objects(
        which in any::<prop::sample::Index>(),
        muts in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6),
    ) {
        let seed = which.get(json_seeds());
        check_json(&mutate(seed, &muts));
    }

    #[test]
    fn config_loaders_on_random_text(text in "\\PC{0,300}") {
        check_toml(&text);
    }

    #[test]
    fn config_loaders_on_generated_files(text in toml_lines()) {
        check_toml(&text);
    }

    #[test]
    fn config_loaders_on_mutated_files(
        which in any::<prop::sample::Index>(),
        muts in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6),
    ) {
        let seeds = toml_seeds();
        let seed = which.get(&seeds);
        let bytes = mutate(seed.as_bytes(), &muts);
        check_toml(&String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn seeds_decode() {
    for s in seeds::manifests() {
        PartitionManifest::decode(&s).expect("seed manifest");
    }
    for s in seeds::heads() {
        Head::decode(&s).expect("seed head");
    }
    assert!(!seeds::pages().is_empty());
    for s in seeds::applier_configs() {
        applier::config::ApplierConfig::from_toml(&s)
            .expect("seed applier config")
            .validate(true)
            .expect("valid");
    }
    for s in seeds::shipper_configs() {
        shipper::config::ShipperConfig::from_toml(&s)
            .expect("seed shipper config")
            .validate()
            .expect("valid");
    }
}
