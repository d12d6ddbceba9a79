//! The SQL stores as forests ([`ForestStore`]): the namespaces of one
//! database committed together, on a pool ([`SqlStore`]) or inside a
//! caller's open transaction ([`SqlTxStore`]), and the lock a pool store
//! lends the write engine ([`ForestStore::locked`], `locked.rs`).
//!
//! A commit of several namespaces costs what a one-namespace commit does:
//! one lock statement, one namespace-row read, at most one row read and
//! the same constant number of writing statements, whatever the number
//! of namespaces ([`ops::commit_many_on`]). Reads of several namespaces
//! are one statement each: their roots, and their path walks.

use std::future::Future;
use std::sync::Arc;

use super::dialect::{Dialect, PathWalk};
use super::error::{Res, SqlStoreError};
use super::handle::{SqlStore, SqlTxStore};
use super::locked::LockedSql;
use super::ops::{self, CommitPart};
use super::savepoint::Savepoint;
use super::space::NamespaceState;
use super::tx::{CallerGone, OwnedTx, TxConnection, detached_store};
use crate::descent::UpdateBatch;
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::{ForestCommit, ForestStore, LockedWork, PathRead, PathStart, TreeUpdate};

/// One namespace's walks, owned, for a walk of several namespaces.
pub(super) type OwnedWalk = (Arc<NamespaceState>, Vec<PathStart>, bool);

/// The roots of `spaces` (one statement), learning their ids on the way.
pub(super) async fn roots_on<C: Dialect>(
    conn: &mut C,
    spaces: &[&NamespaceState],
) -> Res<Vec<ComputedNode>> {
    Ok(ops::load_states(conn, spaces)
        .await?
        .into_iter()
        .map(|s| s.map_or_else(ComputedNode::empty_root, |s| s.root))
        .collect())
}

/// Walks the paths of several namespaces in one statement (after the
/// engine's guard when `guard`); namespaces that do not exist read
/// nothing.
pub(super) async fn walk_on<C: Dialect>(
    conn: &mut C,
    walks: &[OwnedWalk],
    guard: bool,
) -> Res<Vec<Vec<(Hash, Node)>>> {
    let mut found = Vec::with_capacity(walks.len());
    for (space, starts, siblings) in walks {
        if let Some(info) = ops::namespace(conn, space).await? {
            found.push(PathWalk {
                space,
                info,
                starts,
                siblings: *siblings,
            });
        }
    }
    let mut out: Vec<Vec<(Hash, Node)>> = walks.iter().map(|_| Vec::new()).collect();
    if let Some(first) = found.first().filter(|_| guard) {
        conn.guard_walk(first.space).await?;
    }
    let mut walked = conn.walk_paths(&found).await?.into_iter();
    for (slot, (space, _, _)) in out.iter_mut().zip(walks) {
        if space.info.get().is_some() {
            *slot = walked.next().unwrap_or_default();
        }
    }
    Ok(out)
}

/// The walks of `reads`, owned.
pub(super) fn owned_walks<'a, T: 'a>(
    reads: &[PathRead<'a, T>],
    space: impl Fn(&T) -> &Arc<NamespaceState>,
) -> Vec<OwnedWalk> {
    reads
        .iter()
        .map(|r| (space(r.tree).clone(), r.starts.clone(), r.siblings))
        .collect()
}

/// The parts of a commit, owned (for a commit on a task of its own).
pub(super) fn owned_parts<T>(
    updates: &[TreeUpdate<'_, T>],
    space: impl Fn(&T) -> &Arc<NamespaceState>,
) -> Vec<(Arc<NamespaceState>, UpdateBatch)> {
    updates
        .iter()
        .map(|u| (space(u.tree).clone(), u.batch.clone()))
        .collect()
}

fn parts(owned: &[(Arc<NamespaceState>, UpdateBatch)]) -> Vec<CommitPart<'_>> {
    owned
        .iter()
        .map(|(space, batch)| CommitPart { space, batch })
        .collect()
}

/// The parts of a commit, owned, with the namespace whose counters count
/// the commit's round trips.
pub(super) type OwnedCommit = (Arc<NamespaceState>, Vec<(Arc<NamespaceState>, UpdateBatch)>);

/// Commits `owned` in `tx`, on a task of its own (see [`detached_store`]):
/// every part checked and applied in the transaction, then COMMIT, unless
/// a root moved or the caller left before COMMIT (then ROLLBACK). The one
/// commit of the pool store and of its lock's view.
pub(super) async fn commit_in<C: Dialect>(
    tx: impl Future<Output = Res<OwnedTx<C>>> + Send + 'static,
    (counted, owned): OwnedCommit,
) -> Res<ForestCommit> {
    detached_store(move |caller_gone: CallerGone| async move {
        counted.counters.round_trip(1);
        let mut tx = tx.await?;
        for (space, _) in &owned {
            space.fail("begin")?;
        }
        let outcome = ops::commit_many_on(tx.conn(), &parts(&owned)).await?;
        counted.counters.round_trip(1);
        match outcome {
            ForestCommit::Committed if !caller_gone.get() => {
                for (space, _) in &owned {
                    space.fail("before_commit")?;
                }
                tx.commit().await?;
                for (space, _) in &owned {
                    space.fail("after_commit")?;
                }
            }
            _ => tx.rollback().await?,
        }
        Ok(outcome)
    })
    .await
}

/// The namespaces of one database on one pool. Trees are handles of this
/// pool ([`SqlStore::open_namespace`]); a handle on another pool is
/// refused ([`SqlStoreError::ForeignTree`]).
impl<C: Dialect> ForestStore for SqlStore<C> {
    type Error = SqlStoreError;
    type Tree = SqlStore<C>;

    fn tree(&self, name: &str) -> Res<Self> {
        Ok(self.open_namespace(name))
    }

    async fn names(&self) -> Res<Vec<String>> {
        Ok(self
            .namespaces()
            .await?
            .into_iter()
            .map(|n| n.name)
            .collect())
    }

    async fn load_roots(&self, trees: &[&Self]) -> Res<Vec<ComputedNode>> {
        self.check_pools(trees.iter().copied())?;
        let spaces: Vec<&NamespaceState> = trees.iter().map(|t| &*t.space).collect();
        roots_on(&mut *self.pool.acquire().await?, &spaces).await
    }

    async fn read_paths_many(&self, reads: &[PathRead<'_, Self>]) -> Res<Vec<Vec<(Hash, Node)>>> {
        self.check_pools(reads.iter().map(|r| r.tree))?;
        let walks = owned_walks(reads, |t| &t.space);
        let starts: usize = walks.iter().map(|w| w.1.len()).sum();
        if !C::walk_needs_guard(self.jit_off, starts) {
            return walk_on(&mut *self.pool.acquire().await?, &walks, false).await;
        }
        // The guard lasts for a read transaction of its own.
        let mut conn = TxConnection::acquire(&self.pool).await?;
        let wait = self.space.reply_wait;
        let mut tx = C::bounded_by(wait, conn.conn().begin()).await?;
        let nodes = walk_on(&mut *tx, &walks, true).await?;
        C::bounded_by(wait, tx.rollback()).await?;
        conn.release();
        Ok(nodes)
    }

    /// One write transaction on a task of its own:
    /// committed unless a root moved or the caller left before COMMIT.
    async fn commit_trees(&self, updates: &[TreeUpdate<'_, Self>]) -> Res<ForestCommit> {
        self.check_pools(updates.iter().map(|u| u.tree))?;
        let Some(first) = updates.first() else {
            return Ok(ForestCommit::Committed);
        };
        let counted = first.tree.space.clone();
        let owned = owned_parts(updates, |t| &t.space);
        let (pool, wait) = (self.pool.clone(), self.space.reply_wait);
        commit_in(
            async move { OwnedTx::<C>::begin(&pool, wait).await },
            (counted, owned),
        )
        .await
    }

    /// One write transaction that takes the namespaces' write locks first
    /// (every other commit to them waits), held while `work` plans and
    /// commits on it (a view on that transaction); rolled back if `work` commits
    /// nothing. A cancelled caller closes the connection: the server rolls
    /// back and the locks go with it.
    async fn locked<W>(&self, trees: &[&Self], work: W) -> Res<Option<W::Output>>
    where
        W: LockedWork<Self>,
    {
        self.check_pools(trees.iter().copied())?;
        let spaces: Vec<&NamespaceState> = trees.iter().map(|t| &*t.space).collect();
        let Some(first) = spaces.first() else {
            return Ok(None);
        };
        first.counters.round_trip(1);
        let mut tx = OwnedTx::<C>::begin(&self.pool, first.reply_wait).await?;
        tx.conn().lock_namespaces(&spaces).await?;
        let view = LockedSql::new(self, tx);
        let out = work.run(&view).await;
        view.release().await;
        Ok(Some(out))
    }
}

impl<C: Dialect> SqlStore<C> {
    /// Refuses handles on another pool: one commit cannot span databases.
    pub(super) fn check_pools<'t>(&self, trees: impl IntoIterator<Item = &'t Self>) -> Res<()> {
        match trees.into_iter().find(|t| !self.same_pool(t)) {
            Some(t) => Err(SqlStoreError::ForeignTree {
                namespace: t.name().to_owned(),
            }),
            None => Ok(()),
        }
    }

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

impl<'c, C: Dialect> SqlTxStore<'c, C> {
    /// Refuses trees of another transaction.
    fn check_conns<'t>(&self, trees: impl IntoIterator<Item = &'t SqlTxStore<'c, C>>) -> Res<()>
    where
        'c: 't,
    {
        match trees
            .into_iter()
            .find(|t| !Arc::ptr_eq(&t.conn, &self.conn))
        {
            Some(t) => Err(SqlStoreError::ForeignTree {
                namespace: t.space.name.to_string(),
            }),
            None => Ok(()),
        }
    }
}

impl<'c, C: Dialect> ForestStore for SqlTxStore<'c, C> {
    type Error = SqlStoreError;
    type Tree = SqlTxStore<'c, C>;

    fn tree(&self, name: &str) -> Res<SqlTxStore<'c, C>> {
        Ok(SqlTxStore {
            conn: self.conn.clone(),
            space: NamespaceState::waiting(
                name,
                self.space.height,
                &self.space.recent,
                self.space.reply_wait,
            ),
        })
    }

    async fn names(&self) -> Res<Vec<String>> {
        super::listing::names_on(&mut **self.conn.lock().await).await
    }

    async fn load_roots(&self, trees: &[&SqlTxStore<'c, C>]) -> Res<Vec<ComputedNode>> {
        self.check_conns(trees.iter().copied())?;
        let spaces: Vec<&NamespaceState> = trees.iter().map(|t| &*t.space).collect();
        roots_on(&mut **self.conn.lock().await, &spaces).await
    }

    /// A large walk's guard (JIT off on Postgres) lasts until the
    /// caller's transaction ends, as for one tree's walk.
    async fn read_paths_many(
        &self,
        reads: &[PathRead<'_, SqlTxStore<'c, C>>],
    ) -> Res<Vec<Vec<(Hash, Node)>>> {
        self.check_conns(reads.iter().map(|r| r.tree))?;
        let walks = owned_walks(reads, |t| &t.space);
        let starts: usize = walks.iter().map(|w| w.1.len()).sum();
        let guard = C::walk_needs_guard(false, starts);
        walk_on(&mut **self.conn.lock().await, &walks, guard).await
    }

    /// In the caller's transaction, under a savepoint where the engine
    /// writes with one (SQLite); Postgres writes every
    /// part in one statement, and a root that moved is found before it.
    async fn commit_trees(
        &self,
        updates: &[TreeUpdate<'_, SqlTxStore<'c, C>>],
    ) -> Res<ForestCommit> {
        self.check_conns(updates.iter().map(|u| u.tree))?;
        let parts: Vec<CommitPart<'_>> = updates
            .iter()
            .map(|u| CommitPart {
                space: &u.tree.space,
                batch: u.batch,
            })
            .collect();
        let mut conn = self.conn.lock().await;
        if !C::SAVEPOINTS {
            return ops::commit_many_on(&mut **conn, &parts).await;
        }
        self.space.counters.round_trip(1);
        let mut savepoint = Savepoint::<C::Database>::begin(&mut **conn).await?;
        let outcome = ops::commit_many_on(savepoint.conn(), &parts).await?;
        self.space.counters.round_trip(1);
        match outcome {
            ForestCommit::Committed => savepoint.commit().await?,
            ForestCommit::RootMoved { .. } => savepoint.rollback().await?,
        }
        Ok(outcome)
    }

    /// The namespaces' write locks taken in the caller's transaction (held
    /// until it ends: Postgres's advisory locks; SQLite's write lock is the
    /// transaction's own), then `work` on this forest.
    async fn locked<W>(&self, trees: &[&SqlTxStore<'c, C>], work: W) -> Res<Option<W::Output>>
    where
        W: LockedWork<SqlTxStore<'c, C>>,
    {
        self.check_conns(trees.iter().copied())?;
        let spaces: Vec<&NamespaceState> = trees.iter().map(|t| &*t.space).collect();
        self.conn.lock().await.lock_namespaces(&spaces).await?;
        Ok(Some(work.run(self).await))
    }
}
