//! The two tree layouts over any [`TreeStore`], and the one write engine
//! every write goes through (`engine`: a tree's, a forest's and the
//! coalescing writers' groups).
//!
//! ```text
//!   insert_many(batch)
//!        │ sort keys in tree order, last write wins, checked batch sum
//!        ▼
//!   read phase   ── store.load_roots, then remembered nodes, then one
//!        │          store.read_paths_many for every key's path
//!        ▼
//!   descent      ── pure and synchronous: partitions the keys at each
//!        │          touched node, rebuilds each touched node once, queues
//!        │          inserts and deletes by position, checks every sum
//!        ▼
//!   write phase  ── store.commit_trees(UpdateBatch): one atomic call,
//!        │          applied only if the root is still the one that was read
//!        ▼
//!   judge, retry ── landed / lost race / failed; after a few lost races
//!                   the same read, descent and commit under the store's
//!                   write lock (engine/mod.rs)
//! ```
//!
//! [`TreeStore`]: crate::store::TreeStore
//!
//! Reads go through a [`View`] (the current tree, or a pinned root), which
//! also offers what universe servers need beyond insert and prove, one file
//! each: ordered iteration (`iter`), diff (`diff`), subtree sums and the
//! self-checking `children` read (`subtree`, `view`), sync from a peer
//! (`sync`), copy and filtered copy (`copy`), export and import (`export`).
//! Every one of them reads a page or a level at a time and looks each node
//! up by the hash its parent holds, so a read never mixes two trees.

pub(crate) mod engine;
mod fetch;
mod forest;
pub(crate) mod handle;
pub(crate) mod traced;
mod view;
mod walk;
mod writer;

pub use forest::{Forest, ForestWrite, Link, ProvenLeaf, TreeChange};
pub(crate) use handle::Target;
pub use handle::{CompactedTree, DEFAULT_MAX_ATTEMPTS, FullTree, ProvenWrite, Tree};
pub use view::View;
pub use writer::{
    DEFAULT_MAX_GROUP_LEAVES, DEFAULT_QUEUE_BOUND, DEFAULT_RECOVERY_WAIT, ForestReceipt,
    ForestTicket, ForestWriter, Receipt, SubmitError, Ticket, TreeRoot, Writer, WriterConfig,
    WriterStats,
};
