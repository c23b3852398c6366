//! The `backfill` binary.
fn main() {}
