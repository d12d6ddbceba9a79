//! The SQL stores as forests ([`ForestStore`]): the namespaces of one
//! database committed together, on a pool ([`SqlStore`]) or inside a
//! caller's open transaction ([`SqlTxForest`]).
//!
//! A commit of several namespaces costs what a one-namespace commit does:
//! one lock statement, one namespace-row read, at most one row read and
//! the same constant number of writing statements, whatever the number
//! of namespaces ([`ops::commit_many_on`]). Reads of several namespaces
//! are one statement each: their roots, and their path walks.

use std::sync::Arc;

use tokio::sync::Mutex;

use super::dialect::{Dialect, PathWalk, begin_write};
use super::error::{Res, SqlStoreError};
use super::handle::{SqlStore, SqlTxStore};
use super::ops::{self, CommitPart};
use super::savepoint::Savepoint;
use super::space::NamespaceState;
use super::tx::{TxConnection, detached_store};
use crate::descent::UpdateBatch;
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::{ForestCommit, ForestStore, PathRead, PathStart, StratumHeight, TreeUpdate};

/// One namespace's walks, owned, for a walk of several namespaces.
type OwnedWalk = (Arc<NamespaceState>, Vec<PathStart>, bool);

/// The roots of `spaces` (one statement), learning their ids on the way.
async fn roots_on<C: Dialect>(conn: &mut C, spaces: &[&NamespaceState]) -> Res<Vec<ComputedNode>> {
    Ok(ops::load_states(conn, spaces)
        .await?
        .into_iter()
        .map(|s| s.map_or_else(ComputedNode::empty_root, |s| s.root))
        .collect())
}

/// Walks the paths of several namespaces in one statement (after the
/// engine's guard when `guard`); namespaces that do not exist read
/// nothing.
async fn walk_on<C: Dialect>(
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
fn owned_walks<'a, T: 'a>(
    reads: &[PathRead<'a, T>],
    space: impl Fn(&T) -> &Arc<NamespaceState>,
) -> Vec<OwnedWalk> {
    reads
        .iter()
        .map(|r| (space(r.tree).clone(), r.starts.clone(), r.siblings))
        .collect()
}

/// The parts of a commit, owned (for a commit on a task of its own).
fn owned_parts<T>(
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
        let mut tx = C::bounded(conn.conn().begin()).await?;
        let nodes = walk_on(&mut *tx, &walks, true).await?;
        C::bounded(tx.rollback()).await?;
        conn.release();
        Ok(nodes)
    }

    /// One write transaction on a task of its own (see
    /// [`TreeStore::commit`](crate::store::TreeStore::commit)): committed
    /// unless a root moved or the caller left before COMMIT.
    async fn commit_trees(&self, updates: &[TreeUpdate<'_, Self>]) -> Res<ForestCommit> {
        self.check_pools(updates.iter().map(|u| u.tree))?;
        let Some(first) = updates.first() else {
            return Ok(ForestCommit::Committed);
        };
        let counters = first.tree.space.clone();
        let (pool, owned) = (self.pool.clone(), owned_parts(updates, |t| &t.space));
        detached_store(move |caller_gone| async move {
            counters.counters.round_trip(1);
            let mut conn = TxConnection::acquire(&pool).await?;
            let mut tx = begin_write(conn.conn()).await?;
            for (space, _) in &owned {
                space.fail("begin")?;
            }
            let outcome = ops::commit_many_on(&mut *tx, &parts(&owned)).await?;
            counters.counters.round_trip(1);
            match outcome {
                ForestCommit::Committed if !caller_gone.get() => {
                    for (space, _) in &owned {
                        space.fail("before_commit")?;
                    }
                    C::bounded(tx.commit()).await?;
                    for (space, _) in &owned {
                        space.fail("after_commit")?;
                    }
                }
                _ => C::bounded(tx.rollback()).await?,
            }
            conn.release();
            Ok(outcome)
        })
        .await
    }
}

impl<C: Dialect> SqlStore<C> {
    /// Refuses handles on another pool: one commit cannot span databases.
    fn check_pools<'t>(&self, trees: impl IntoIterator<Item = &'t Self>) -> Res<()> {
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
    /// the transaction on each engine.
    pub fn forest_in_transaction<'c>(&self, conn: &'c mut C) -> SqlTxForest<'c, C> {
        SqlTxForest {
            conn: Arc::new(Mutex::new(conn)),
            height: self.space.height,
            recent: self.space.recent.capacity(),
        }
    }
}

/// The namespaces of a database inside a caller's open transaction; see
/// [`SqlStore::forest_in_transaction`]. Its trees
/// ([`ForestStore::tree`]) are [`SqlTxStore`]s on the same transaction.
pub struct SqlTxForest<'c, C: Dialect> {
    conn: Arc<Mutex<&'c mut C>>,
    height: StratumHeight,
    recent: usize,
}

impl<C: Dialect> std::fmt::Debug for SqlTxForest<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlTxForest")
            .field("height", &self.height)
            .finish_non_exhaustive()
    }
}

impl<'c, C: Dialect> SqlTxForest<'c, C> {
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

impl<'c, C: Dialect> ForestStore for SqlTxForest<'c, C> {
    type Error = SqlStoreError;
    type Tree = SqlTxStore<'c, C>;

    fn tree(&self, name: &str) -> Res<SqlTxStore<'c, C>> {
        Ok(SqlTxStore {
            conn: self.conn.clone(),
            space: NamespaceState::new(name, self.height, self.recent),
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
    /// caller's transaction ends, as on [`SqlTxStore`].
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
    /// writes with one (as [`SqlTxStore`]'s commit).
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
        let mut savepoint = Savepoint::<C::Database>::begin(&mut **conn).await?;
        let outcome = ops::commit_many_on(savepoint.conn(), &parts).await?;
        match outcome {
            ForestCommit::Committed => savepoint.commit().await?,
            ForestCommit::RootMoved { .. } => savepoint.rollback().await?,
        }
        Ok(outcome)
    }
}
