//! The bucket's IO, beneath both services.
//!
//! `manifest` decides what the shipper and the applier agree on (keys,
//! manifests, heads, the state machine) as pure code; this crate is where
//! those decisions meet a real bucket. Everything here does IO or is the
//! IO's own vocabulary:
//!
//! - [`store`]: reading and committing manifests, pages, data objects and
//!   heads through one `ObjectStore` with create-if-absent writes (the
//!   commit protocol), and reading the bucket's inventory
//!   ([`store::take_inventory`]).
//! - [`url`]: a bucket URL (`file://`, `memory://`, `s3://`) and building
//!   the store from it, credentials and endpoint from the environment.
//! - [`diagnosis`]: bucket errors (no credentials, wrong region, access
//!   denied, no such bucket, unreachable endpoint) as one line naming what
//!   was tried and the fix, and error chains printed with each cause once.
//! - [`first_request`]: the checks before a service's first request and
//!   the explanation of its failure, from a bucket URL and the environment.
//! - [`upload_id`]: fresh upload ids (the clock and `/dev/urandom`), the
//!   unique part of data and page keys.
//! - [`counting`]: an `ObjectStore` decorator counting requests by kind, for
//!   request-budget tests and metrics.
//!
//! Invariant: `manifest` does not depend on this crate (nor on
//! `object_store` or `tokio`); the dependency runs one way, from here to
//! the pure layer.

pub mod ahead;
pub mod counting;
pub mod diagnosis;
pub mod first_request;
pub mod pricing;
pub mod store;
pub mod upload_id;
pub mod url;
