//! What the shipper and the applier share at runtime: the logging setup
//! ([`init_logging`]) and the Prometheus metrics endpoint ([`metrics`]).
//!
//! Non-goals: anything about mirroring. The pure shared core (layout,
//! manifests, state machine) is `manifest`; this crate only wires a service
//! process to its operators, and depends on nothing of segmirror's.

pub mod metrics;

use std::io::IsTerminal;

/// Installs the process's `tracing` subscriber: human-readable lines on
/// stderr, filtered by `RUST_LOG` (default `info`; an unset or invalid
/// `RUST_LOG` means `info`), with ANSI colour only when stderr is a
/// terminal. Returns false, changing nothing, when a global subscriber is
/// already installed (a second call, or a test harness's).
pub fn init_logging() -> bool {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init()
        .is_ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn logging_is_installed_once() {
        // The first call installs it (or finds another test's subscriber).
        super::init_logging();
        assert!(!super::init_logging(), "a second call changes nothing");
    }
}
