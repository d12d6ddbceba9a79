//! Many trees of one database, read and committed together: what a
//! store-wide writer and parent trees need of a store ([`ForestStore`]).
//!
//! A forest store hands out one [`TreeStore`] handle per namespace and
//! commits the update batches of several of them in ONE atomic, durable
//! commit, guarded by every tree's root: all of it lands or none. Reads of
//! several trees may be one round trip too (SQL stores answer each kind
//! with one statement for all trees); the defaults ask tree by tree.

use std::future::Future;

use crate::descent::UpdateBatch;
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::{CommitOutcome, PathStart, ReadAt, TreeStore};

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

/// A database of trees, one per namespace, that commits changes to several
/// of them atomically.
///
/// [`tree`](Self::tree) hands out the per-namespace handles; every other
/// method takes handles it handed out. A store that can read several
/// trees in one round trip overrides [`load_roots`](Self::load_roots) and
/// [`read_paths_many`](Self::read_paths_many); the defaults read one tree
/// at a time through [`TreeStore`].
pub trait ForestStore: Send + Sync {
    /// The store's own error type.
    type Error: std::error::Error + Send + Sync + 'static;
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

    /// Applies every part's batch in one atomic commit if every part's
    /// tree still has its batch's old root; each tree names one namespace
    /// at most once.
    fn commit_trees(
        &self,
        updates: &[TreeUpdate<'_, Self::Tree>],
    ) -> impl Future<Output = Result<ForestCommit, Self::Error>> + Send;
}

/// The forest of one tree: what the per-tree writer writes through. Every
/// name is the one tree, and a commit is that tree's commit.
#[derive(Debug, Clone)]
pub(crate) struct OneTree<S>(pub S);

impl<S: TreeStore + Clone> ForestStore for OneTree<S> {
    type Error = S::Error;
    type Tree = S;

    fn tree(&self, _name: &str) -> Result<S, S::Error> {
        Ok(self.0.clone())
    }

    async fn names(&self) -> Result<Vec<String>, S::Error> {
        Ok(vec![self.0.namespace().unwrap_or("default").to_owned()])
    }

    /// Each part in turn: the writer of one tree sends one part at most.
    async fn commit_trees(&self, updates: &[TreeUpdate<'_, S>]) -> Result<ForestCommit, S::Error> {
        for (index, update) in updates.iter().enumerate() {
            if update.batch.is_noop() {
                continue;
            }
            if let CommitOutcome::RootMoved { current } = update.tree.commit(update.batch).await? {
                return Ok(ForestCommit::RootMoved { index, current });
            }
        }
        Ok(ForestCommit::Committed)
    }
}
