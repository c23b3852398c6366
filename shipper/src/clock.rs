//! Wall-clock time, injectable so that tests can move it (grace periods,
//! back-offs) without sleeping: the one clock both services use,
//! `manifest::clock`.

pub use manifest::clock::{Clock, ManualClock, SystemClock};
