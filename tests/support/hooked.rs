//! A store that passes every call on to another, running a hook before
//! each read call and after each commit: the suite's commit probe and the
//! read-phase races of `tests/stores_concurrency.rs`.

use std::future::Future;

use ms_smt::store::{
    CommitOutcome, PathStart, ReadAt, RecentNodes, StoreStats, TreeStore, UpdateBatch,
};
use ms_smt::{ComputedNode, Hash, Key, Node, Position};

/// What a [`Hooked`] store does around the calls it passes on.
pub trait Hook: Send + Sync {
    /// Runs before each `read_*` call reaches the inner store.
    fn before_read(&self) -> impl Future<Output = ()> + Send;

    /// Sees each commit: the inner store's counters for that call, and
    /// whether it committed (or found the root moved and wrote nothing).
    fn after_commit(&self, stats: StoreStats, committed: bool);
}

/// `inner`, with `hook` run around its reads and commits.
#[derive(Clone)]
pub struct Hooked<S, H> {
    /// The store every call goes to.
    pub inner: S,
    /// What runs around the calls.
    pub hook: H,
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

    async fn commit(&self, batch: &UpdateBatch) -> Result<CommitOutcome, S::Error> {
        let before = self.inner.stats();
        let out = self.inner.commit(batch).await;
        let committed = matches!(out, Ok(CommitOutcome::Committed));
        self.hook
            .after_commit(self.inner.stats().since(&before), committed);
        out
    }

    fn delete_all(&self) -> impl Future<Output = Result<(), S::Error>> + Send {
        self.inner.delete_all()
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }

    fn recent_nodes(&self, for_write: bool) -> Option<&RecentNodes> {
        self.inner.recent_nodes(for_write)
    }
}
