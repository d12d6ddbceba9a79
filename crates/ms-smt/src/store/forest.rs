//! The write side of a store: the trees of one database read and
//! committed together ([`ForestStore`]), and the write lock a store may
//! hold while the write engine plans and commits ([`LockedWork`]).
//!
//! A forest store hands out one [`TreeStore`] handle per namespace and
//! commits the update batches of one or several of them in ONE atomic,
//! durable commit, guarded by every tree's root: all of it lands or none.
//! Every write of the crate ends in such a commit (one tree is a forest of
//! one). Reads of several trees may be one round trip too (SQL stores
//! answer each kind with one statement for all trees); the defaults ask
//! tree by tree.

use std::future::Future;

use crate::descent::UpdateBatch;
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::{PathStart, ReadAt, StoreError, TreeStore};

/// One tree's part of a read of several trees: its handle and the walks
/// of [`TreeStore::read_paths`] at the current tree.
#[derive(Debug)]
pub struct PathRead<'a, T> {
    /// The tree.
    pub tree: &'a T,
    /// Where each path walk starts.
    pub starts: Vec<PathStart>,
    /// Whether the off-path children of the branches passed are read too.
    pub siblings: bool,
}

/// One tree's part of a commit of several trees.
#[derive(Debug, Clone, Copy)]
pub struct TreeUpdate<'a, T> {
    /// The tree.
    pub tree: &'a T,
    /// Its changes, from `batch.old_root` to `batch.new_root`. A batch
    /// that changes nothing ([`UpdateBatch::is_noop`]) writes nothing but
    /// still guards the commit: the tree's root must be its old root.
    pub batch: &'a UpdateBatch,
}

/// What [`ForestStore::commit_trees`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForestCommit {
    /// Every tree moved to its batch's new root, in one commit.
    Committed,
    /// The root of the part at `index` was no longer its batch's old root
    /// (another writer got there first). Nothing was written.
    RootMoved {
        /// The part whose root moved.
        index: usize,
        /// The root found in the store.
        current: ComputedNode,
    },
}

/// Work that a store runs while it holds the write lock of some of its
/// trees ([`ForestStore::locked`]): the write engine's plan and commit,
/// handed a view of the store whose reads and commit go through the lock.
///
/// The store runs nothing of the tree's algorithm itself: it takes the
/// lock, hands the view to [`run`](Self::run), and lets the lock go when
/// the work returns (a view whose commit was not called writes nothing).
pub trait LockedWork<T: TreeStore>: Send {
    /// What the work gives back.
    type Output: Send;

    /// Runs on `forest`: the store under the lock. Its trees are the
    /// handles the work already holds (`T`), its reads see what the lock
    /// holds still, and at most one [`commit_trees`](ForestStore::commit_trees)
    /// is made durable before the lock is released.
    fn run<F>(self, forest: &F) -> impl Future<Output = Self::Output> + Send
    where
        F: ForestStore<Tree = T, Error = T::Error>;
}

/// A database of trees, one per namespace, that commits changes to one or
/// several of them atomically.
///
/// [`tree`](Self::tree) hands out the per-namespace handles; every other
/// method takes handles it handed out. A store that can read several
/// trees in one round trip overrides [`load_roots`](Self::load_roots) and
/// [`read_paths_many`](Self::read_paths_many); the defaults read one tree
/// at a time through [`TreeStore`]. A store that can lock its trees for a
/// writer overrides [`locked`](Self::locked): the write engine falls back
/// to it when a write keeps losing optimistic races.
pub trait ForestStore: Send + Sync {
    /// The store's own error type.
    type Error: StoreError;
    /// A handle on one namespace.
    type Tree: TreeStore<Error = Self::Error>;

    /// A handle on namespace `name` (created empty on its first commit).
    fn tree(&self, name: &str) -> Result<Self::Tree, Self::Error>;

    /// The names of the namespaces that hold a tree or held one, sorted:
    /// what an audit of rule-based links walks.
    fn names(&self) -> impl Future<Output = Result<Vec<String>, Self::Error>> + Send;

    /// The current roots of `trees`, in order.
    fn load_roots(
        &self,
        trees: &[&Self::Tree],
    ) -> impl Future<Output = Result<Vec<ComputedNode>, Self::Error>> + Send {
        async move {
            let mut roots = Vec::with_capacity(trees.len());
            for tree in trees {
                roots.push(tree.load_root().await?);
            }
            Ok(roots)
        }
    }

    /// [`TreeStore::read_paths`] at the current tree of each read's tree,
    /// in order.
    fn read_paths_many(
        &self,
        reads: &[PathRead<'_, Self::Tree>],
    ) -> impl Future<Output = Result<Vec<Vec<(Hash, Node)>>, Self::Error>> + Send {
        async move {
            let mut out = Vec::with_capacity(reads.len());
            for read in reads {
                out.push(
                    read.tree
                        .read_paths(ReadAt::Current, &read.starts, read.siblings)
                        .await?,
                );
            }
            Ok(out)
        }
    }

    /// Applies every part's batch in one atomic, durable commit if every
    /// part's tree still has its batch's old root; each tree names one
    /// namespace at most once.
    fn commit_trees(
        &self,
        updates: &[TreeUpdate<'_, Self::Tree>],
    ) -> impl Future<Output = Result<ForestCommit, Self::Error>> + Send;

    /// Takes the write lock of `trees` (nothing else commits to them while
    /// it is held), runs `work` on a view of this store bound to the lock,
    /// and releases it. `Ok(None)` (the default): the store has no such
    /// lock, and the caller keeps writing optimistically.
    fn locked<W>(
        &self,
        trees: &[&Self::Tree],
        work: W,
    ) -> impl Future<Output = Result<Option<W::Output>, Self::Error>> + Send
    where
        W: LockedWork<Self::Tree>,
    {
        let _ = (trees, work);
        async { Ok(None) }
    }
}

/// A store handle whose tree can be written: a [`TreeStore`] with the
/// [`ForestStore`] it is written through (its own database, whose trees
/// are handles like it), cheap to clone. Every store of the crate is one,
/// being its own forest; the trait is implemented for every such type and
/// only names the bound (`S: Writable`, where `S::Error` stays the
/// tree's error).
pub trait Writable: TreeStore + Clone {
    /// The forest the tree is written through.
    type Forest: ForestStore<Tree = Self, Error = Self::Error> + Clone;

    /// That forest.
    fn forest(&self) -> &Self::Forest;
}

impl<S> Writable for S
where
    S: TreeStore + ForestStore<Tree = S, Error = <S as TreeStore>::Error> + Clone,
{
    type Forest = S;

    fn forest(&self) -> &S {
        self
    }
}
