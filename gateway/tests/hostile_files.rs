//! The SASL users file is read with a bound: past
//! `kafkalog::fsutil::MAX_SMALL_FILE_BYTES` (16 MiB) it is refused with an
//! error naming the file and the limit, without being read whole.

#[test]
fn a_users_file_of_17_mib_is_refused_naming_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("users.toml");
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(17 << 20))
        .expect("sparse file");
    let err = gateway::sasl::Credentials::load(&file).expect_err("too large");
    assert!(
        err.contains("users.toml") && err.contains("larger than 16777216 bytes"),
        "{err}"
    );
}
