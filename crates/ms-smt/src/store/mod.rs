//! The store boundary: the only async part of the crate.
//!
//! A tree reads the nodes a batch needs ([`TreeStore`]), runs the pure
//! descent against them, and hands the resulting [`UpdateBatch`] (every
//! change with its [`Position`](crate::Position) and hash) to
//! [`ForestStore::commit_trees`] in one call, with the batches of every
//! other tree the write changes. A store that can lock its trees lends the
//! write engine a view bound to the lock ([`ForestStore::locked`]); it
//! never plans a write itself. Every read is one round trip: every key's path
//! ([`TreeStore::read_paths`]), the nodes at given positions (diff, sync,
//! export: [`TreeStore::read_positions`]) or the nodes after a key in key
//! order (iteration: [`TreeStore::read_in_order`]). Two layouts sit behind
//! the boundary:
//!
//! * [`MemoryStore`] keeps nodes by hash with a reference count per node:
//!   identical subtrees share one entry, which goes only when the last
//!   position using it lets go.
//! * The SQL stores keep position-keyed strata rows (several levels per
//!   row, nothing shared between positions).
//!
//! Each read names a [`ReadAt`]: the current tree or a
//! pinned version. Stores that can keep roots readable implement
//! [`PinStore`]; the SQL stores keep, beside the rows they rewrite in
//! place, the row versions a pin still reads (`ms_smt_history`), written
//! in the same transaction as the commit that replaces them. [`BulkStore`]
//! adds the moves that need no leaf in the process: a set-based copy and
//! the atomic swap that publishes an import.

mod blocking;
mod counters;
mod forest;
mod journal;
mod memory;
mod recent;
mod traits;

pub use crate::descent::{NetChange, UpdateBatch};
pub use crate::pin::Pin;
pub(crate) use blocking::hashing;
pub use counters::{Counters, StoreStats};
pub use forest::{ForestCommit, ForestStore, LockedWork, PathRead, TreeUpdate, Writable};
pub use journal::{Change, ChangePage, JournalState, JournalStore, Retention};
pub use memory::{MemoryError, MemoryStore};
pub use recent::{DEFAULT_RECENT_NODES, RecentNodes};
pub use traits::{
    AuditStore, BulkStore, CommitOutcome, PathStart, PinStore, ReadAt, StoreError, TreeStore,
};
