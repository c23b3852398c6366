//! How operator commands reach partitions: see `applier` binary.
