//! A pool store under its namespaces' write locks: the view the write
//! engine plans and commits on when it falls back to the lock
//! ([`ForestStore::locked`]).

use tokio::sync::Mutex;

use super::dialect::Dialect;
use super::error::{Res, SqlStoreError};
use super::handle::SqlStore;
use super::several::{commit_in, owned_parts, owned_walks, roots_on, walk_on};
use super::space::NamespaceState;
use super::tx::OwnedTx;
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::{ForestCommit, ForestStore, PathRead, TreeUpdate};

/// The database seen through one write transaction that holds the write
/// locks of the trees a writer locked: every read runs in it, and its one
/// commit ([`commit_trees`](ForestStore::commit_trees)) is that
/// transaction's COMMIT, after which the view has no transaction left
/// ([`SqlStoreError::LockReleased`]). Its trees are the pool store's own
/// handles; they name the namespaces.
pub(super) struct LockedSql<C: Dialect> {
    /// The pool store that locked (for handles on other namespaces).
    store: SqlStore<C>,
    /// The locked transaction; `None` once committed.
    tx: Mutex<Option<OwnedTx<C>>>,
}

impl<C: Dialect> LockedSql<C> {
    /// The view of `tx`, which holds the locks `store` took.
    pub fn new(store: &SqlStore<C>, tx: OwnedTx<C>) -> Self {
        LockedSql {
            store: store.clone(),
            tx: Mutex::new(Some(tx)),
        }
    }

    /// Ends the view: a transaction left uncommitted (the work read, or
    /// gave up before its commit) is rolled back. If even the rollback
    /// fails, the connection is closed instead, which the server answers
    /// with a rollback.
    pub async fn release(self) {
        if let Some(tx) = self.tx.into_inner() {
            // Nothing was written through it: the outcome is the same
            // whether the ROLLBACK or the closed connection ends it.
            let _ = tx.rollback(self.store.space.exchange()).await;
        }
    }

    /// Runs `read` on the locked transaction's connection.
    async fn with_conn<T>(
        &self,
        read: impl for<'a> FnOnce(&'a mut C) -> super::tx::Work<'a, T>,
    ) -> Res<T> {
        let mut tx = self.tx.lock().await;
        let tx = tx.as_mut().ok_or(SqlStoreError::LockReleased)?;
        read(tx.conn()).await
    }
}

impl<C: Dialect> ForestStore for LockedSql<C> {
    type Error = SqlStoreError;
    type Tree = SqlStore<C>;

    fn tree(&self, name: &str) -> Res<SqlStore<C>> {
        Ok(self.store.open_namespace(name))
    }

    async fn names(&self) -> Res<Vec<String>> {
        self.with_conn(|conn| Box::pin(super::listing::names_on(conn)))
            .await
    }

    async fn load_roots(&self, trees: &[&SqlStore<C>]) -> Res<Vec<ComputedNode>> {
        self.store.check_same(trees.iter().copied())?;
        let spaces: Vec<std::sync::Arc<NamespaceState>> =
            trees.iter().map(|t| t.space.clone()).collect();
        self.with_conn(move |conn| {
            Box::pin(async move {
                let spaces: Vec<&NamespaceState> = spaces.iter().map(|s| &**s).collect();
                roots_on(conn, &spaces).await
            })
        })
        .await
    }

    /// In the locked transaction; a large walk's guard (JIT off on
    /// Postgres) lasts until it ends.
    async fn read_paths_many(
        &self,
        reads: &[PathRead<'_, SqlStore<C>>],
    ) -> Res<Vec<Vec<(Hash, Node)>>> {
        self.store.check_same(reads.iter().map(|r| r.tree))?;
        let walks = owned_walks(reads, |t| &t.space);
        let starts: usize = walks.iter().map(|w| w.1.len()).sum();
        let guard = C::walk_needs_guard(self.store.source.jit_off, starts);
        self.with_conn(move |conn| Box::pin(async move { walk_on(conn, &walks, guard).await }))
            .await
    }

    /// The parts applied and the locked transaction committed, on a task of
    /// its own ([`commit_in`]), as the pool store commits.
    async fn commit_trees(&self, updates: &[TreeUpdate<'_, SqlStore<C>>]) -> Res<ForestCommit> {
        self.store.check_same(updates.iter().map(|u| u.tree))?;
        let Some(first) = updates.first() else {
            return Ok(ForestCommit::Committed);
        };
        let counted = first.tree.space.clone();
        let owned = owned_parts(updates, |t| &t.space);
        let tx = self
            .tx
            .lock()
            .await
            .take()
            .ok_or(SqlStoreError::LockReleased)?;
        commit_in(async move { Ok(tx) }, (counted, owned)).await
    }
}
