//! The boundary traits: what a tree reads of a store ([`TreeStore`]), how
//! a store's errors say they may pass ([`StoreError`]), and what pins
//! ([`PinStore`]), whole-tree moves ([`BulkStore`]) and a self-audit
//! ([`AuditStore`]) add. Writes are [`ForestStore`](crate::store::ForestStore)'s:
//! every commit is a commit of one or several trees.

use std::future::Future;

use crate::audit::report::AuditReport;
use crate::hash::Hash;
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::node::{ComputedNode, Node};
use crate::pin::Pin;
use crate::position::Position;
use crate::progress::ProgressSink;
use crate::store::counters::StoreStats;
use crate::store::recent::RecentNodes;

/// Where a single-key path walk starts: a stored node, its level, and the
/// key whose bits choose the way down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStart {
    /// The node to start from.
    pub hash: Hash,
    /// Its level (0 = root).
    pub level: usize,
    /// The key to follow.
    pub key: crate::key::Key,
}

/// Which tree of a namespace a read sees.
///
/// Hash-keyed stores (memory) keep every node a pinned root still uses, so
/// any root's nodes are found by hash and the version does not matter to
/// them. Position-keyed stores (SQL strata) overwrite rows in place and keep
/// the rows a pin still needs beside them (`ms_smt_history`), each tagged
/// with the versions it was current for; a read at a version picks, for
/// every position, the row that was current then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadAt {
    /// The tree as it is when the read runs.
    #[default]
    Current,
    /// The tree as it was at a pinned version (see [`PinStore`]).
    Version(u64),
}

/// What a commit of one tree did (kept for code written against the
/// one-tree commit of earlier releases; commits are now
/// [`ForestStore::commit_trees`](crate::store::ForestStore::commit_trees),
/// which answers [`ForestCommit`](crate::store::ForestCommit)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The batch was applied and the root moved to `new_root`.
    Committed,
    /// The stored root was no longer `old_root`: another writer got there
    /// first. Nothing was written; the tree re-reads and retries.
    RootMoved {
        /// The root found in the store.
        current: ComputedNode,
    },
}

/// A store's error type, and whether an error says the store was out of
/// reach for a while (a broken connection, a failover) rather than that it
/// refused the operation: a write then waits, bounded, for the store to
/// answer again before it settles what a failed commit did
/// ([`WriterConfig::recovery_wait`](crate::WriterConfig::recovery_wait)).
pub trait StoreError: std::error::Error + Send + Sync + 'static {
    /// True when the store was out of reach. `false` (the default): every
    /// error is final.
    fn is_transient(&self) -> bool {
        false
    }
}

/// One tree (one namespace) of a store, as the tree reads it: its root,
/// the nodes on key paths, at positions and in key order, and a clear.
///
/// Every read is one round trip and answers with nodes keyed by hash; the
/// tree looks each node up by the hash its parent holds, so a store may
/// return more than asked (whole rows) and a node that changed meanwhile
/// is simply not found. Nothing here runs the descent: writes are planned
/// above the store and handed to
/// [`ForestStore::commit_trees`](crate::store::ForestStore::commit_trees),
/// one atomic commit of one tree or several.
///
/// A new backend implements this trait's six required methods and
/// `ForestStore`'s three (`tree`, `names`, `commit_trees`), plus
/// [`StoreError`] on its error type; the rest have defaults.
pub trait TreeStore: Send + Sync {
    /// The store's own error type.
    type Error: StoreError;

    /// The current root; the empty tree's root when nothing is stored.
    fn load_root(&self) -> impl Future<Output = Result<ComputedNode, Self::Error>> + Send;

    /// Follows each start's key from its node down to where the path ends
    /// (a leaf, a compacted leaf, or an empty child) and returns every node
    /// on the way; with `siblings`, also the off-path child of every branch
    /// passed. `at` names the tree (the start hashes already pin it down in
    /// a hash-keyed store; a position-keyed store reads the rows current at
    /// that version).
    fn read_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> impl Future<Output = Result<Vec<(Hash, Node)>, Self::Error>> + Send;

    /// At least the node at each of `nodes` (a position with the hash the
    /// caller expects there), for walks that expand a tree a few nodes at
    /// a time (diff, sync, export). Position-keyed stores return the whole
    /// row holding each position.
    fn read_positions(
        &self,
        at: ReadAt,
        nodes: &[(Position, Hash)],
    ) -> impl Future<Output = Result<Vec<(Hash, Node)>, Self::Error>> + Send;

    /// The nodes a left-to-right walk of the subtree `from` (its position
    /// and hash) needs next, for ordered scans: every node on the path of
    /// `probe` (a key under `from`) from `from` down, then about `limit`
    /// rows' worth of the nodes to the right of that path, in tree order,
    /// up to the key `until` (exclusive; `None`: the end of the tree).
    fn read_in_order(
        &self,
        at: ReadAt,
        from: (Position, Hash),
        probe: Key,
        until: Option<Key>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Hash, Node)>, Self::Error>> + Send;

    /// Removes every node and the root of this namespace only.
    fn delete_all(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Operation counters (round trips, statements, nodes read and written).
    fn stats(&self) -> StoreStats;

    /// The namespace this handle is bound to, for diagnostics (the tree's
    /// `tracing` spans carry it). `None` (the default): the store has no
    /// name to give.
    fn namespace(&self) -> Option<&str> {
        None
    }

    /// Nodes this handle keeps in process memory (see [`RecentNodes`]),
    /// which a read phase consults before the store; `for_write` asks for
    /// a write's read phase. `None` (the default): every read goes to the
    /// store.
    fn recent_nodes(&self, for_write: bool) -> Option<&RecentNodes> {
        let _ = for_write;
        None
    }
}

/// A store that checks what it keeps for a namespace itself, from one
/// consistent snapshot (see [`Tree::audit`](crate::Tree::audit)): the
/// stored items stream through the audit of [`crate::audit`], which holds
/// every rule; the store only scans.
pub trait AuditStore: TreeStore {
    /// Checks everything the store keeps for this namespace against the
    /// shape `kind` writes, reporting the items checked to `progress`
    /// ([`ProgressOperation::Audit`](crate::ProgressOperation::Audit)).
    fn audit(
        &self,
        kind: LayoutKind,
        progress: &ProgressSink,
    ) -> impl Future<Output = Result<AuditReport, Self::Error>> + Send;
}

/// A store that can keep roots readable under names ([`Pin`]s) while
/// writers move the tree on. Reads of a pinned root go through
/// [`ReadAt::Version`].
pub trait PinStore: TreeStore {
    /// Pins the current root of the namespace under `name` (replacing a
    /// pin of that name) and returns the pin.
    fn pin(&self, name: &str) -> impl Future<Output = Result<Pin, Self::Error>> + Send;

    /// Removes the pin `name` and frees what only it kept; false when no
    /// such pin existed.
    fn unpin(&self, name: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// The pin `name`, if any.
    fn pinned(&self, name: &str) -> impl Future<Output = Result<Option<Pin>, Self::Error>> + Send;

    /// Every pin of the namespace, oldest version first.
    fn pins(&self) -> impl Future<Output = Result<Vec<Pin>, Self::Error>> + Send;
}

/// Whole-tree moves that a store can do without handing every leaf
/// through the tree: copies inside one database, and the atomic swap that
/// makes an imported tree visible.
pub trait BulkStore: crate::store::Writable {
    /// The namespace this handle is bound to.
    fn name(&self) -> &str;

    /// A handle on another namespace of the same database.
    fn open_namespace(&self, name: &str) -> Result<Self, Self::Error>;

    /// Copies the tree `at` of this namespace into `target`, which must be
    /// empty, without reading it into the process (one statement on SQL
    /// stores). `Ok(None)` when that is not possible (another database, or
    /// `target` is not empty) and the caller should copy leaf by leaf.
    fn copy_into(
        &self,
        at: ReadAt,
        target: &Self,
    ) -> impl Future<Output = Result<Option<ComputedNode>, Self::Error>> + Send;

    /// Makes the tree of `staging` (another namespace of this database)
    /// this namespace's tree in one atomic step, if this namespace is empty
    /// and has no pins and `staging`'s root is `expected`; `staging` is
    /// gone afterwards. Returns false, changing nothing, when a condition
    /// does not hold.
    fn swap_in_from(
        &self,
        staging: &Self,
        expected: &ComputedNode,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Forgets this namespace if it is vacant (an empty tree, no rows, no
    /// pins), so that it is no longer listed: what an abandoned staging
    /// namespace needs. True when it is gone (or never existed); false,
    /// changing nothing, when it holds a tree or pins. Opening the name
    /// again starts a new, empty namespace.
    fn forget_if_vacant(&self) -> impl Future<Output = Result<bool, Self::Error>> + Send;
}
