//! Interop with tapd (taproot-assets' Go daemon): read, check, import and
//! export the MS-SMT trees it keeps in its `mssmt_nodes` / `mssmt_roots`
//! tables, in SQLite or Postgres.
//!
//! tapd stores nodes content-addressed per namespace: a branch row holds
//! its children's hashes (an empty child has no row), a leaf row holds the
//! key, value and sum of a compacted leaf and is keyed by that leaf's hash
//! at the height where it sits. Nothing says which height a row is at, so
//! every reader here walks down from the root, a chunk of hashes per query.

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
