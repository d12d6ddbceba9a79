//! A store that passes every call on to another, running a hook around
//! its reads, its commits and its write lock: the suite's commit probe,
//! the read-phase races of `tests/stores_concurrency.rs` and the lost
//! races of `tests/engine.rs`.

use std::future::Future;

use ms_smt::ProgressSink;
use ms_smt::store::{
    AuditStore, ForestCommit, ForestStore, LockedWork, PathRead, PathStart, ReadAt, RecentNodes,
    StoreStats, TreeStore, TreeUpdate, Writable,
};
use ms_smt::{AuditReport, ComputedNode, Hash, Key, LayoutKind, Node, Position};

/// What a [`Hooked`] store does around the calls it passes on.
pub trait Hook: Clone + Send + Sync {
    /// Runs before each `read_*` call reaches the inner store.
    fn before_read(&self) -> impl Future<Output = ()> + Send;

    /// Runs before each optimistic commit reaches the inner store (not
    /// before a commit under the store's write lock, which nobody races).
    fn before_commit(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Sees each commit: the inner store's counters for that call, whether
    /// it committed (or found a root moved and wrote nothing), and whether
    /// it was made under the store's write lock.
    fn after_commit(&self, stats: StoreStats, committed: bool, locked: bool);

    /// Sees each write that takes the store's write lock.
    fn locked(&self) {}
}

/// `inner`, with `hook` run around its reads, commits and lock.
#[derive(Clone)]
pub struct Hooked<S, H> {
    /// The store every call goes to.
    pub inner: S,
    /// What runs around the calls.
    pub hook: H,
}

impl<S: Writable, H: Hook> Hooked<S, H> {
    fn wrap(&self, inner: S) -> Self {
        Hooked {
            inner,
            hook: self.hook.clone(),
        }
    }

    /// `updates` committed to `forest` (the inner store, or its view under
    /// the lock), seen by the hook.
    async fn commit_on<F>(
        &self,
        forest: &F,
        updates: &[TreeUpdate<'_, Self>],
        locked: bool,
    ) -> Result<ForestCommit, S::Error>
    where
        F: ForestStore<Tree = S, Error = S::Error>,
    {
        if !locked {
            self.hook.before_commit().await;
        }
        let inner: Vec<TreeUpdate<'_, S>> = updates
            .iter()
            .map(|u| TreeUpdate {
                tree: &u.tree.inner,
                batch: u.batch,
            })
            .collect();
        let before = self.inner.stats();
        let out = forest.commit_trees(&inner).await;
        let committed = matches!(out, Ok(ForestCommit::Committed));
        self.hook
            .after_commit(self.inner.stats().since(&before), committed, locked);
        out
    }
}

fn inner_reads<'a, S, H>(reads: &[PathRead<'a, Hooked<S, H>>]) -> Vec<PathRead<'a, S>> {
    reads
        .iter()
        .map(|r| PathRead {
            tree: &r.tree.inner,
            starts: r.starts.clone(),
            siblings: r.siblings,
        })
        .collect()
}

fn inner_trees<'a, S, H>(trees: &[&'a Hooked<S, H>]) -> Vec<&'a S> {
    trees.iter().map(|t| &t.inner).collect()
}

impl<S: TreeStore, H: Hook> TreeStore for Hooked<S, H> {
    type Error = S::Error;

    fn load_root(&self) -> impl Future<Output = Result<ComputedNode, S::Error>> + Send {
        self.inner.load_root()
    }

    async fn read_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Result<Vec<(Hash, Node)>, S::Error> {
        self.hook.before_read().await;
        self.inner.read_paths(at, starts, siblings).await
    }

    async fn read_positions(
        &self,
        at: ReadAt,
        nodes: &[(Position, Hash)],
    ) -> Result<Vec<(Hash, Node)>, S::Error> {
        self.hook.before_read().await;
        self.inner.read_positions(at, nodes).await
    }

    async fn read_in_order(
        &self,
        at: ReadAt,
        from: (Position, Hash),
        probe: Key,
        until: Option<Key>,
        limit: usize,
    ) -> Result<Vec<(Hash, Node)>, S::Error> {
        self.hook.before_read().await;
        self.inner
            .read_in_order(at, from, probe, until, limit)
            .await
    }

    fn delete_all(&self) -> impl Future<Output = Result<(), S::Error>> + Send {
        self.inner.delete_all()
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }

    fn namespace(&self) -> Option<&str> {
        self.inner.namespace()
    }

    fn recent_nodes(&self, for_write: bool) -> Option<&RecentNodes> {
        self.inner.recent_nodes(for_write)
    }
}

/// The inner store's forest, its trees hooked too, and its write lock.
impl<S: Writable, H: Hook> ForestStore for Hooked<S, H> {
    type Error = S::Error;
    type Tree = Hooked<S, H>;

    fn tree(&self, name: &str) -> Result<Self, S::Error> {
        Ok(self.wrap(self.inner.forest().tree(name)?))
    }

    fn names(&self) -> impl Future<Output = Result<Vec<String>, S::Error>> + Send {
        self.inner.forest().names()
    }

    async fn load_roots(&self, trees: &[&Self]) -> Result<Vec<ComputedNode>, S::Error> {
        self.inner.forest().load_roots(&inner_trees(trees)).await
    }

    async fn read_paths_many(
        &self,
        reads: &[PathRead<'_, Self>],
    ) -> Result<Vec<Vec<(Hash, Node)>>, S::Error> {
        self.hook.before_read().await;
        self.inner
            .forest()
            .read_paths_many(&inner_reads(reads))
            .await
    }

    fn commit_trees(
        &self,
        updates: &[TreeUpdate<'_, Self>],
    ) -> impl Future<Output = Result<ForestCommit, S::Error>> + Send {
        self.commit_on(self.inner.forest(), updates, false)
    }

    /// The inner store's lock, its view hooked too.
    async fn locked<W>(&self, trees: &[&Self], work: W) -> Result<Option<W::Output>, S::Error>
    where
        W: LockedWork<Self>,
    {
        self.hook.locked();
        let work = Unhooked {
            work,
            hooked: self.clone(),
        };
        self.inner.forest().locked(&inner_trees(trees), work).await
    }
}

impl<S: Writable + AuditStore, H: Hook> AuditStore for Hooked<S, H> {
    fn audit(
        &self,
        kind: LayoutKind,
        progress: &ProgressSink,
    ) -> impl Future<Output = Result<AuditReport, S::Error>> + Send {
        self.inner.audit(kind, progress)
    }
}

/// A work on hooked trees, run by the inner store's lock.
struct Unhooked<W, S, H> {
    work: W,
    hooked: Hooked<S, H>,
}

impl<W, S, H> LockedWork<S> for Unhooked<W, S, H>
where
    S: Writable,
    H: Hook,
    W: LockedWork<Hooked<S, H>>,
{
    type Output = W::Output;

    async fn run<F>(self, forest: &F) -> W::Output
    where
        F: ForestStore<Tree = S, Error = S::Error>,
    {
        let view = LockedView {
            forest,
            hooked: self.hooked,
        };
        self.work.run(&view).await
    }
}

/// The inner store's view under its lock, its trees hooked.
struct LockedView<'f, F, S, H> {
    forest: &'f F,
    hooked: Hooked<S, H>,
}

impl<F, S, H> ForestStore for LockedView<'_, F, S, H>
where
    S: Writable,
    H: Hook,
    F: ForestStore<Tree = S, Error = S::Error>,
{
    type Error = S::Error;
    type Tree = Hooked<S, H>;

    fn tree(&self, name: &str) -> Result<Hooked<S, H>, S::Error> {
        Ok(self.hooked.wrap(self.forest.tree(name)?))
    }

    fn names(&self) -> impl Future<Output = Result<Vec<String>, S::Error>> + Send {
        self.forest.names()
    }

    async fn load_roots(&self, trees: &[&Hooked<S, H>]) -> Result<Vec<ComputedNode>, S::Error> {
        self.forest.load_roots(&inner_trees(trees)).await
    }

    async fn read_paths_many(
        &self,
        reads: &[PathRead<'_, Hooked<S, H>>],
    ) -> Result<Vec<Vec<(Hash, Node)>>, S::Error> {
        self.hooked.hook.before_read().await;
        self.forest.read_paths_many(&inner_reads(reads)).await
    }

    fn commit_trees(
        &self,
        updates: &[TreeUpdate<'_, Hooked<S, H>>],
    ) -> impl Future<Output = Result<ForestCommit, S::Error>> + Send {
        self.hooked.commit_on(self.forest, updates, true)
    }
}
