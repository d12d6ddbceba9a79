//! The in-memory store: reference-counted nodes keyed by hash, many
//! namespaces.

mod locked;
mod nodes;
mod store;

pub use store::{MemoryError, MemoryStore};
