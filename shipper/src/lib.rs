//! Tails Kafka log dirs and ships segments with the epoch manifest (issue 4; not built yet).
