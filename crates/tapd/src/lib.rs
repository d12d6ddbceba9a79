//! # ms-smt-tapd: interop with tapd
//!
//! Read, check, import and export the MS-SMT trees that tapd
//! (taproot-assets' Go daemon) keeps in its `mssmt_nodes` / `mssmt_roots`
//! tables, in SQLite or Postgres.
//!
//! tapd stores nodes content-addressed per namespace: a branch row holds
//! its children's hashes (an empty child has no row), a leaf row holds the
//! key, value and sum of a compacted leaf and is keyed by that leaf's hash
//! at the height where it sits. Nothing says which height a row is at, so
//! every reader here walks down from the root, a chunk of hashes per query.

#![warn(missing_docs)]

// The vocabulary of the crates below, at the paths this crate has always
// used (`crate::key::Key`, ...).
use ms_smt::store;
use ms_smt_core::{empty, key, leaf, node, position};
use ms_smt_descent::{hash, layout, lift};

mod audit;
mod error;
mod export;
mod import;
mod shape;
mod source;
mod walk;

pub use audit::{NamespaceAudit, audit_namespace};
pub use error::{Corruption, ExportError, ImportError, TapdError};
pub use export::{ExportOptions, ExportReport, export_namespace};
pub use import::{ImportOptions, ImportReport, import_namespace};
pub use shape::TapdRow;
pub use source::{TapdSource, TapdTarget};
