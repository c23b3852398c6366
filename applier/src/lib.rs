//! Applies shipped segments to a local log and drives the mirror state machine (issue 5; not built yet).
