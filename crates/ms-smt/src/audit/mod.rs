//! Integrity audits: walk a namespace from its stored root, recompute every
//! hash and sum, check the layout's canonical shape, and report what is
//! wrong as typed [`Problem`]s.
//!
//! ```text
//!   Tree::audit ── store.audit_rows (SQL: every row in key order, then
//!        │          each pin's rows at its version, one snapshot) or
//!        │          store.audit_nodes (memory: every node)
//!        ▼
//!   RowAudit / audit_nodes ── pure: decode, recompute, compare each
//!                              child with what its parent recorded, count
//!                              the positions that reach each stored thing
//! ```
//!
//! An audit reads; it never repairs. A clean report means the stored root
//! is exactly what the stored nodes compute to, every stored node is
//! reached from it, and the shape is the one the layout writes; and the
//! same of every pinned root and the nodes a read at its version sees.

pub(crate) mod links;
pub(crate) mod nodes;
pub(crate) mod report;

pub use nodes::{NodeScan, audit_nodes};
pub use report::{AuditReport, Location, MAX_REPORTED_PROBLEMS, PinAudit, Problem};
