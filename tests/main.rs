//! The integration suite as one test binary: each file under `tests/` is a
//! module here (`cargo test --test suite audit::` runs one of them).
//!
//! One binary instead of one per file: each test binary links the whole
//! crate with sqlx and tokio in release, and thirty of them took most of
//! CI's build time. Files stay binaries of their own where sharing a
//! process would change what they test: the failpoints (`faults`, process
//! wide), the tracing capture (`tracing`, callsite interest is process
//! wide), and the campaigns that re-run their own binary as child writers
//! by test name (`crash`, `crash_writer`, `crash_forest`, `contention`,
//! `io_faults`). The Postgres reply wait (`reply_wait`) is a value on each
//! handle, so its tests run here.

mod support;

/// The fuzz targets' properties, shared with `properties` and
/// `proof_mutations`.
#[path = "../fuzz/src/props.rs"]
mod props;

mod ambiguous;
mod audit;
mod caller_transaction_send;
mod cancellation;
mod changes;
#[cfg(all(feature = "cli", feature = "sqlite", feature = "postgres"))]
mod cli;
#[cfg(all(feature = "cli", feature = "sqlite", feature = "postgres"))]
mod cli_tapd;
mod engine;
mod federation;
mod federation_access;
mod forest;
mod layers;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod listing;
mod multiproof;
mod progress;
mod proof_mutations;
mod properties;
mod recovery;
mod reply_wait;
#[cfg(feature = "postgres")]
mod restart;
mod schema;
mod spec_examples;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod standby;
mod stores_caller_transaction;
mod stores_concurrency;
mod stores_equivalence;
mod stores_namespaces;
mod stores_recent_nodes;
mod stores_rejections;
mod stores_round_trips;
mod stores_write_paths;
mod sum_proofs;
mod tapd;
mod universe;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod vectors;
mod writer;
