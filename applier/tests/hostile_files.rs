//! Files from outside the process are read with a bound: a configuration
//! file past `kafkalog::fsutil::MAX_SMALL_FILE_BYTES` (16 MiB) is refused
//! with an error naming the limit, without being read whole.

#[test]
fn a_config_file_of_17_mib_is_refused_naming_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("applier.toml");
    // Sparse: 17 MiB of zeros that cost no disk.
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(17 << 20))
        .expect("sparse file");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(["config", "check", "--config", file.to_str().expect("utf-8")])
        .output()
        .expect("applier");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("larger than 16777216 bytes"), "{text}");
}
