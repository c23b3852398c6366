//! No `backfill` help line (of any subcommand) says an `[env: ...]` or
//! `[default: ...]` twice.

#[test]
fn no_help_line_repeats_an_env_or_a_default() {
    let repeated = segmirror_testkit::help::repeated_annotations(std::path::Path::new(env!(
        "CARGO_BIN_EXE_backfill"
    )));
    assert!(repeated.is_empty(), "{repeated:#?}");
}
