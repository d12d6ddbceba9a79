//! The SQL stores as forests ([`ForestStore`], implemented once): the
//! namespaces of one database committed together, on a pool ([`SqlStore`])
//! or inside a caller's open transaction ([`SqlTxStore`]); how each commits
//! and locks ([`ForestSource`]), and the lock a pool store lends the write
//! engine ([`ForestStore::locked`], `locked.rs`).
//!
//! A commit of several namespaces costs what a one-namespace commit does:
//! one lock statement, one namespace-row read, at most one row read and
//! the same constant number of writing statements, whatever the number
//! of namespaces ([`ops::commit_many_on`]). Reads of several namespaces
//! are one statement each: their roots, and their path walks.

use std::future::Future;

use super::dialect::Dialect;
use super::error::{Res, SqlStoreError};
use super::handle::{SqlHandle, SqlStore, SqlTxStore};
use super::locked::LockedSql;
use super::ops::{self, CommitPart};
use super::savepoint::Savepoint;
use super::several::{commit_in, owned_parts, owned_walks, roots_on, walk_on};
use super::source::{CallerTx, Pooled, Source};
use super::space::NamespaceState;
use super::tx::OwnedTx;
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::{ForestCommit, ForestStore, LockedWork, PathRead, TreeUpdate};

/// How a source commits a forest and takes its lock: the part of a forest
/// that differs between a pool and a caller's transaction.
pub trait ForestSource<C: Dialect>: Source<C> {
    /// Applies every part's batch in one atomic commit (see
    /// [`ForestStore::commit_trees`]); the parts are checked to be on
    /// `store`'s database.
    fn commit_trees(
        store: &SqlHandle<C, Self>,
        updates: &[TreeUpdate<'_, SqlHandle<C, Self>>],
    ) -> impl Future<Output = Res<ForestCommit>> + Send;

    /// Takes the write locks of `trees` and runs `work` under them (see
    /// [`ForestStore::locked`]).
    fn locked<W>(
        store: &SqlHandle<C, Self>,
        trees: &[&SqlHandle<C, Self>],
        work: W,
    ) -> impl Future<Output = Res<Option<W::Output>>> + Send
    where
        W: LockedWork<SqlHandle<C, Self>>;
}

/// The namespaces of one database reached one way: trees are handles of
/// the same pool ([`SqlStore::open_namespace`]) or the same caller's
/// transaction; a handle reaching it another way is refused
/// ([`SqlStoreError::ForeignTree`]).
impl<C: Dialect, S: ForestSource<C>> ForestStore for SqlHandle<C, S> {
    type Error = SqlStoreError;
    type Tree = SqlHandle<C, S>;

    fn tree(&self, name: &str) -> Res<Self> {
        let space = NamespaceState::waiting(
            name,
            self.space.height,
            &self.space.recent,
            self.space.reply_wait,
        );
        Ok(SqlHandle::on(self.source.clone(), space))
    }

    async fn names(&self) -> Res<Vec<String>> {
        super::listing::names_on(&mut *self.source.conn().await?).await
    }

    async fn load_roots(&self, trees: &[&Self]) -> Res<Vec<ComputedNode>> {
        self.check_same(trees.iter().copied())?;
        let spaces: Vec<&NamespaceState> = trees.iter().map(|t| &*t.space).collect();
        roots_on(&mut *self.source.conn().await?, &spaces).await
    }

    /// A large walk on a session without JIT off takes the engine's guard,
    /// for a read transaction: a pool's own, or the caller's (it then lasts
    /// until that ends, as for one tree's walk).
    async fn read_paths_many(&self, reads: &[PathRead<'_, Self>]) -> Res<Vec<Vec<(Hash, Node)>>> {
        self.check_same(reads.iter().map(|r| r.tree))?;
        let walks = owned_walks(reads, |t| &t.space);
        let starts: usize = walks.iter().map(|w| w.1.len()).sum();
        if !C::walk_needs_guard(self.source.jit_off(), starts) {
            return walk_on(&mut *self.source.conn().await?, &walks, false).await;
        }
        let mut tx = self.read_tx(false).await?;
        let nodes = walk_on(&mut *tx, &walks, true).await?;
        self.end_read(tx, false).await?;
        Ok(nodes)
    }

    async fn commit_trees(&self, updates: &[TreeUpdate<'_, Self>]) -> Res<ForestCommit> {
        self.check_same(updates.iter().map(|u| u.tree))?;
        S::commit_trees(self, updates).await
    }

    async fn locked<W>(&self, trees: &[&Self], work: W) -> Res<Option<W::Output>>
    where
        W: LockedWork<Self>,
    {
        self.check_same(trees.iter().copied())?;
        S::locked(self, trees, work).await
    }
}

impl<C: Dialect, S: Source<C>> SqlHandle<C, S> {
    /// Refuses handles that reach the database another way: one commit
    /// cannot span databases or transactions.
    pub(super) fn check_same<'t>(&self, trees: impl IntoIterator<Item = &'t Self>) -> Res<()>
    where
        Self: 't,
    {
        match trees.into_iter().find(|t| !self.source.same(&t.source)) {
            Some(t) => Err(SqlStoreError::ForeignTree {
                namespace: t.name().to_owned(),
            }),
            None => Ok(()),
        }
    }
}

impl<C: Dialect> ForestSource<C> for Pooled<C> {
    /// One write transaction on a task of its own: committed unless a root
    /// moved or the caller left before COMMIT.
    async fn commit_trees(
        store: &SqlStore<C>,
        updates: &[TreeUpdate<'_, SqlStore<C>>],
    ) -> Res<ForestCommit> {
        let Some(first) = updates.first() else {
            return Ok(ForestCommit::Committed);
        };
        let counted = first.tree.space.clone();
        let owned = owned_parts(updates, |t| &t.space);
        let (pool, begun) = (store.source.pool.clone(), counted.clone());
        commit_in(
            async move { OwnedTx::<C>::begin(&pool, begun.exchange()).await },
            (counted, owned),
        )
        .await
    }

    /// One write transaction that takes the namespaces' write locks first
    /// (every other commit to them waits), held while `work` plans and
    /// commits on it (a view on that transaction); rolled back if `work`
    /// commits nothing. A cancelled caller closes the connection: the
    /// server rolls back and the locks go with it.
    async fn locked<W>(
        store: &SqlStore<C>,
        trees: &[&SqlStore<C>],
        work: W,
    ) -> Res<Option<W::Output>>
    where
        W: LockedWork<SqlStore<C>>,
    {
        let spaces: Vec<&NamespaceState> = trees.iter().map(|t| &*t.space).collect();
        let Some(first) = spaces.first() else {
            return Ok(None);
        };
        let mut tx = OwnedTx::<C>::begin(&store.source.pool, first.exchange()).await?;
        tx.conn().lock_namespaces(&spaces).await?;
        let view = LockedSql::new(store, tx);
        let out = work.run(&view).await;
        view.release().await;
        Ok(Some(out))
    }
}

impl<'c, C: Dialect> ForestSource<C> for CallerTx<'c, C> {
    /// In the caller's transaction, under a savepoint where the engine
    /// writes with one (SQLite); Postgres writes every part in one
    /// statement, and a root that moved is found before it.
    async fn commit_trees(
        store: &SqlTxStore<'c, C>,
        updates: &[TreeUpdate<'_, SqlTxStore<'c, C>>],
    ) -> Res<ForestCommit> {
        let parts: Vec<CommitPart<'_>> = updates
            .iter()
            .map(|u| CommitPart {
                space: &u.tree.space,
                batch: u.batch,
            })
            .collect();
        let mut conn = store.source.conn().await?;
        if !C::SAVEPOINTS {
            return ops::commit_many_on(&mut *conn, &parts).await;
        }
        let mut savepoint = Savepoint::<C::Database>::begin(&mut *conn).await?;
        let outcome = ops::commit_many_on(savepoint.conn(), &parts).await?;
        match outcome {
            ForestCommit::Committed => savepoint.commit().await?,
            ForestCommit::RootMoved { .. } => savepoint.rollback().await?,
        }
        Ok(outcome)
    }

    /// The namespaces' write locks taken in the caller's transaction (held
    /// until it ends: Postgres's advisory locks; SQLite's write lock is the
    /// transaction's own), then `work` on this forest.
    async fn locked<W>(
        store: &SqlTxStore<'c, C>,
        trees: &[&SqlTxStore<'c, C>],
        work: W,
    ) -> Res<Option<W::Output>>
    where
        W: LockedWork<SqlTxStore<'c, C>>,
    {
        let spaces: Vec<&NamespaceState> = trees.iter().map(|t| &*t.space).collect();
        store.source.conn().await?.lock_namespaces(&spaces).await?;
        Ok(Some(work.run(store).await))
    }
}

impl<C: Dialect> SqlStore<C> {
    /// The namespaces of this database as a forest inside the caller's
    /// open transaction (`&mut *tx`): commits of several trees, and reads
    /// of them, run in it and commit or roll back with the caller's own
    /// rows. See [`in_transaction`](Self::in_transaction) for how to begin
    /// the transaction on each engine. The forest is this handle's
    /// namespace in the transaction ([`SqlTxStore`]); its other trees are
    /// [`ForestStore::tree`]s of it.
    pub fn forest_in_transaction<'c>(&self, conn: &'c mut C) -> SqlTxForest<'c, C> {
        self.in_transaction(conn)
    }
}

/// The namespaces of a database inside a caller's open transaction; see
/// [`SqlStore::forest_in_transaction`]: a [`SqlTxStore`], whose forest is
/// every namespace in that transaction.
pub type SqlTxForest<'c, C> = SqlTxStore<'c, C>;
