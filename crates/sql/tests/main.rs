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
//! `io_faults`: one binary of their own, `tests/campaigns.rs`). The Postgres reply wait (`reply_wait`) is a value on each
//! handle, so its tests run here.

// The writer and forest tests, like the fault tests, arm the SQL write
// path's failpoints: say so rather than skip them.
#[cfg(not(feature = "failpoints"))]
compile_error!("the suite needs `--features failpoints` (scripts/test.sh passes --all-features)");

use ms_smt_test_support as support;

mod ambiguous;
mod audit;
mod caller_transaction_send;
mod cancellation;
mod changes;
mod engine;
mod forest;
mod listing;
mod plans;
mod progress;
mod recovery;
mod reply_wait;
mod restart;
mod schema;
mod standby;
mod stores_caller_transaction;
mod stores_concurrency;
mod stores_equivalence;
mod stores_namespaces;
mod stores_recent_nodes;
mod stores_rejections;
mod stores_round_trips;
mod stores_write_paths;
mod universe;
mod upgrade;
mod vectors;
mod writer;
