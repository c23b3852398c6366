//! Writes seed inputs for the `manifest_decode` and `config_toml` targets
//! into `corpus/<target>/`: real manifests (empty, with ranges, with a
//! mirror origin, paged past 512 ranges), heads, sealed pages, and applier
//! and shipper configuration files, from `segmirror_reliability::seeds`.
//!
//! `cargo run --example seed_corpus_segmirror` (from `fuzz/`, plain cargo).

use std::fs;
use std::path::{Path, PathBuf};

use segmirror_reliability::seeds;

fn dir(target: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    fs::create_dir_all(&d).expect("create corpus dir");
    d
}

fn main() {
    let m = dir("manifest_decode");
    let mut n = 0;
    for (kind, items) in [
        ("manifest", seeds::manifests()),
        ("head", seeds::heads()),
        ("page", seeds::pages().into_iter().take(2).collect()),
    ] {
        for (i, bytes) in items.iter().enumerate() {
            fs::write(m.join(format!("{kind}-{i}.json")), bytes).expect("write seed");
            n += 1;
        }
    }
    let c = dir("config_toml");
    for (i, text) in seeds::applier_configs().iter().enumerate() {
        fs::write(c.join(format!("applier-{i}.toml")), text).expect("write seed");
        n += 1;
    }
    for (i, text) in seeds::shipper_configs().iter().enumerate() {
        fs::write(c.join(format!("shipper-{i}.toml")), text).expect("write seed");
        n += 1;
    }
    println!(
        "wrote {n} seeds under {}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .display()
    );
}
