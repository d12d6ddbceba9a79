//! The SQL handles, generic over the engine: [`SqlStore`] on a pool and
//! [`SqlTxStore`] on a caller's open transaction.

use std::future::Future;
use std::sync::Arc;

use sqlx::SqlSafeStr;
use tokio::sync::Mutex;

use super::dialect::Dialect;
use super::error::{Res, SqlStoreError};
use super::journal;
use super::ops;
use super::reads;
use super::reply_wait::ReplyWait;
use super::savepoint::Savepoint;
use super::space::NamespaceState;
use super::tx::{self, TxConnection, Work};
use crate::audit::RowAudit;
use crate::hash::Hash;
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::node::{ComputedNode, Node};
use crate::position::Position;
use crate::store::{
    AuditStore, BulkStore, ChangePage, DEFAULT_RECENT_NODES, JournalState, JournalStore, PathStart,
    PinStore, ReadAt, RecentNodes, Retention, StoreStats, TreeStore,
};
use crate::strata::StratumHeight;
use ms_smt::ProgressSink;
use ms_smt::audit::AuditReport;
use ms_smt::store::Pin;

/// A tree store in an SQL database, bound to one namespace; see
/// [`SqliteStore`](crate::SqliteStore) and
/// [`PostgresStore`](crate::PostgresStore).
///
/// Cloning is cheap and shares the pool, the handle's counters and its
/// [`RecentNodes`]. Sums are stored as the i64 with the same bits as the
/// u64 (the root) or as little-endian bytes inside row bodies; they are
/// never compared in SQL.
pub struct SqlStore<C: Dialect> {
    pub(super) pool: sqlx::Pool<C::Database>,
    pub(super) space: Arc<NamespaceState>,
    /// True when the pool's sessions run with JIT off (Postgres pools made
    /// by `connect`), so path walks need no guard.
    pub(super) jit_off: bool,
}

impl<C: Dialect> Clone for SqlStore<C> {
    fn clone(&self) -> Self {
        SqlStore {
            pool: self.pool.clone(),
            space: self.space.clone(),
            jit_off: self.jit_off,
        }
    }
}

impl<C: Dialect> std::fmt::Debug for SqlStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("pool", &self.pool)
            .field("space", &self.space)
            .field("jit_off", &self.jit_off)
            .finish()
    }
}

impl<C: Dialect> SqlStore<C> {
    /// A store on a pool the host application already has. Call
    /// [`migrate`](Self::migrate) once before use.
    pub fn from_pool(pool: sqlx::Pool<C::Database>, namespace: &str) -> Self {
        SqlStore {
            pool,
            space: NamespaceState::new(namespace, StratumHeight::default(), DEFAULT_RECENT_NODES),
            jit_off: false,
        }
    }

    /// [`from_pool`](Self::from_pool) on namespace `"default"`, migrated.
    pub(super) async fn opened(pool: sqlx::Pool<C::Database>, jit_off: bool) -> Res<Self> {
        let store = SqlStore {
            jit_off,
            ..Self::from_pool(pool, "default")
        };
        store.migrate().await?;
        Ok(store)
    }

    /// The same database, another namespace (an independent tree), with
    /// this handle's settings.
    pub fn open_namespace(&self, name: &str) -> Self {
        self.with_space(name, self.space.height, &self.space.recent)
    }

    /// This handle with its own memory of up to `capacity` recent nodes
    /// (default [`DEFAULT_RECENT_NODES`]; 0 reads every node from the
    /// database). Handles made from it with [`open_namespace`](Self::open_namespace)
    /// (a forest's trees among them) share that memory: `capacity` bounds
    /// all of them together, however many namespaces are open. See
    /// [`RecentNodes`] for why remembered nodes are always right.
    pub fn with_recent_nodes(self, capacity: usize) -> Self {
        self.with_space(
            &self.space.name,
            self.space.height,
            &RecentNodes::new(capacity),
        )
    }

    /// This handle creating its namespace, if new, with `height` levels per
    /// row (default [`DEFAULT_STRATUM_HEIGHT`](crate::DEFAULT_STRATUM_HEIGHT)).
    /// A namespace that exists keeps the height it was created with.
    pub fn with_stratum_height(self, height: StratumHeight) -> Self {
        self.with_space(&self.space.name, height, &self.space.recent)
    }

    /// This handle's namespace and settings on another pool of the same
    /// database (a hot standby's), with its own counters and memory.
    #[cfg(feature = "postgres")]
    pub(super) fn on_pool(&self, pool: sqlx::Pool<C::Database>, jit_off: bool) -> Self {
        SqlStore {
            pool,
            jit_off,
            ..self.with_space(
                &self.space.name,
                self.space.height,
                &RecentNodes::new(self.space.recent.capacity()),
            )
        }
    }

    fn with_space(&self, name: &str, height: StratumHeight, memory: &RecentNodes) -> Self {
        SqlStore {
            pool: self.pool.clone(),
            space: NamespaceState::waiting(name, height, memory, self.space.reply_wait),
            jit_off: self.jit_off,
        }
    }

    /// The nodes this handle remembers.
    pub fn recent(&self) -> &RecentNodes {
        &self.space.recent
    }

    /// This store's namespace.
    pub fn name(&self) -> &str {
        &self.space.name
    }

    /// True when this namespace exists in the database (its first write
    /// created it); a server answers reads of other names "not found".
    pub async fn exists(&self) -> Res<bool> {
        let mut conn = self.pool.acquire().await?;
        Ok(ops::load_state(&mut *conn, &self.space).await?.is_some())
    }

    /// The pool.
    pub fn pool(&self) -> &sqlx::Pool<C::Database> {
        &self.pool
    }

    /// How long this handle waits for each reply of the server (what a
    /// statement of a crate above runs under: [`Dialect::execute`]).
    pub fn reply_bound(&self) -> ReplyWait {
        self.space.reply_wait
    }

    /// Creates or upgrades the store's tables (`ms_smt_*`). Idempotent and
    /// safe to run from several processes at once; tracked in its own
    /// `ms_smt_migrations` table, so it coexists with the host's sqlx
    /// migrations. Each version's DDL runs once, in its own transaction
    /// with its ledger entry and checksum; a database at a newer version
    /// than this crate knows is refused ([`SqlStoreError::SchemaTooNew`]),
    /// and so is one whose recorded checksum of a version is not this
    /// crate's ([`SqlStoreError::MigrationChanged`]).
    pub async fn migrate(&self) -> Res<()> {
        self.migrate_with_progress(&ProgressSink::default()).await
    }

    /// [`migrate`](Self::migrate), reporting the versions applied to
    /// `progress` ([`ProgressOperation::SchemaUpgrade`](crate::ProgressOperation::SchemaUpgrade)).
    pub async fn migrate_with_progress(&self, progress: &ProgressSink) -> Res<()> {
        let set = &super::migrations::TREE_SCHEMA;
        super::schema::migrate::<C>(&self.pool, set, self.space.reply_wait, progress).await
    }

    /// Creates or upgrades another crate's tables in this database: its
    /// [`MigrationSet`](crate::MigrationSet), recorded in the same ledger
    /// as the tree schema's, checked and applied as [`migrate`](Self::migrate)
    /// applies the tree schema (the server's access tokens are one).
    pub async fn migrate_set(
        &self,
        set: &super::migrations::MigrationSet,
        progress: &ProgressSink,
    ) -> Res<()> {
        super::schema::migrate::<C>(&self.pool, set, self.space.reply_wait, progress).await
    }

    /// A store for this namespace that runs on the caller's open
    /// transaction (`&mut *tx`): the tree's writes commit or roll back with
    /// the caller's own rows.
    ///
    /// SQLite writes under a savepoint; start the caller's transaction
    /// with `BEGIN IMMEDIATE` (`pool.begin_with("BEGIN IMMEDIATE")`) so it
    /// holds the write lock from the start. Postgres writes each commit as
    /// one statement, so a commit is never half-applied even when its
    /// future is dropped; a failed statement aborts the caller's
    /// transaction, as any does there. Use READ COMMITTED: a write that
    /// loses a race re-reads the root, which a REPEATABLE READ snapshot
    /// would hide.
    pub fn in_transaction<'c>(&self, conn: &'c mut C) -> SqlTxStore<'c, C> {
        SqlTxStore {
            conn: Arc::new(Mutex::new(conn)),
            space: self.space.clone(),
        }
    }

    /// True when `other` shares this handle's pool (so one statement can
    /// see both namespaces).
    pub(super) fn same_pool(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.pool.connect_options(), &other.pool.connect_options())
    }
}

/// A [`SqlStore`] namespace bound to a caller's open transaction; see
/// [`SqlStore::in_transaction`]. Its forest ([`ForestStore`](crate::store::ForestStore))
/// is every namespace of the database in that transaction. Cloning is cheap
/// and shares the transaction.
pub struct SqlTxStore<'c, C: Dialect> {
    /// Shared with the other namespaces of a [`SqlTxForest`](super::SqlTxForest).
    pub(super) conn: Arc<Mutex<&'c mut C>>,
    pub(super) space: Arc<NamespaceState>,
}

impl<C: Dialect> Clone for SqlTxStore<'_, C> {
    fn clone(&self) -> Self {
        SqlTxStore {
            conn: self.conn.clone(),
            space: self.space.clone(),
        }
    }
}

impl<C: Dialect> std::fmt::Debug for SqlTxStore<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlTxStore")
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

impl<C: Dialect> SqlTxStore<'_, C> {
    /// Runs `work` in the caller's transaction, under a savepoint where
    /// the engine writes with one ([`Dialect::SAVEPOINTS`]).
    pub(super) async fn write<T>(
        &self,
        work: impl for<'a> FnOnce(&'a mut C, &'a NamespaceState) -> Work<'a, T>,
    ) -> Res<T> {
        let mut conn = self.conn.lock().await;
        if !C::SAVEPOINTS {
            return work(&mut **conn, &self.space).await;
        }
        let mut savepoint = Savepoint::<C::Database>::begin(&mut **conn).await?;
        let out = work(savepoint.conn(), &self.space).await?;
        savepoint.commit().await?;
        Ok(out)
    }
}

impl<C: Dialect> TreeStore for SqlStore<C> {
    type Error = SqlStoreError;

    async fn load_root(&self) -> Res<ComputedNode> {
        ops::load_root(&mut *self.pool.acquire().await?, &self.space).await
    }

    async fn read_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Vec<(Hash, Node)>> {
        if at != ReadAt::Current || !C::walk_needs_guard(self.jit_off, starts.len()) {
            let mut conn = self.pool.acquire().await?;
            return reads::paths_on(&mut *conn, &self.space, at, starts, siblings, false).await;
        }
        // The guard lasts for a read transaction of its own.
        self.space.counters.round_trip(1);
        let wait = self.space.reply_wait;
        let mut conn = TxConnection::acquire(&self.pool).await?;
        let mut tx = C::bounded_by(wait, conn.conn().begin()).await?;
        let nodes = reads::paths_on(&mut *tx, &self.space, at, starts, siblings, true).await?;
        self.space.counters.round_trip(1);
        C::bounded_by(wait, tx.rollback()).await?;
        conn.release();
        Ok(nodes)
    }

    async fn read_positions(
        &self,
        at: ReadAt,
        nodes: &[(Position, Hash)],
    ) -> Res<Vec<(Hash, Node)>> {
        reads::positions(&mut *self.pool.acquire().await?, &self.space, at, nodes).await
    }

    async fn read_in_order(
        &self,
        at: ReadAt,
        (from, _): (Position, Hash),
        probe: Key,
        until: Option<Key>,
        limit: usize,
    ) -> Res<Vec<(Hash, Node)>> {
        let mut conn = self.pool.acquire().await?;
        reads::in_order(&mut *conn, &self.space, at, from, probe, until, limit).await
    }

    // A write's commit merges into the rows its path read brings, so a
    // write reads every row from the store.
    fn recent_nodes(&self, for_write: bool) -> Option<&RecentNodes> {
        (!for_write).then_some(&self.space.recent)
    }

    async fn delete_all(&self) -> Res<()> {
        tx::write(&self.pool, &self.space, |conn: &mut C, space| {
            Box::pin(ops::delete_all_on(conn, space))
        })
        .await
    }

    fn stats(&self) -> StoreStats {
        self.space.counters.snapshot_with(&self.space.recent)
    }

    fn namespace(&self) -> Option<&str> {
        Some(&self.space.name)
    }
}

impl<C: Dialect> AuditStore for SqlStore<C> {
    async fn audit(&self, kind: LayoutKind, progress: &ProgressSink) -> Res<AuditReport> {
        let mut audit = RowAudit::new(kind).with_progress(progress);
        // A read transaction: every page sees the same snapshot.
        let mut conn = TxConnection::acquire(&self.pool).await?;
        let wait = self.space.reply_wait;
        let mut tx = C::bounded_by(wait, conn.conn().begin()).await?;
        if let Some(sql) = C::SNAPSHOT {
            tx.execute(wait, sql.into_sql_str(), &[]).await?;
        }
        ops::scan_rows_on(&mut *tx, &self.space, &mut audit).await?;
        C::bounded_by(wait, tx.commit()).await?;
        conn.release();
        Ok(audit.finish())
    }
}

impl<C: Dialect> TreeStore for SqlTxStore<'_, C> {
    type Error = SqlStoreError;

    async fn load_root(&self) -> Res<ComputedNode> {
        ops::load_root(&mut **self.conn.lock().await, &self.space).await
    }

    /// A large walk's guard (JIT off on Postgres) lasts until the
    /// caller's transaction ends (no savepoint: see the Postgres store).
    async fn read_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Vec<(Hash, Node)>> {
        let guard = C::walk_needs_guard(false, starts.len());
        let mut conn = self.conn.lock().await;
        reads::paths_on(&mut **conn, &self.space, at, starts, siblings, guard).await
    }

    async fn read_positions(
        &self,
        at: ReadAt,
        nodes: &[(Position, Hash)],
    ) -> Res<Vec<(Hash, Node)>> {
        reads::positions(&mut **self.conn.lock().await, &self.space, at, nodes).await
    }

    async fn read_in_order(
        &self,
        at: ReadAt,
        (from, _): (Position, Hash),
        probe: Key,
        until: Option<Key>,
        limit: usize,
    ) -> Res<Vec<(Hash, Node)>> {
        let mut conn = self.conn.lock().await;
        reads::in_order(&mut **conn, &self.space, at, from, probe, until, limit).await
    }

    // A write's commit merges into the rows its path read brings, so a
    // write reads every row from the store.
    fn recent_nodes(&self, for_write: bool) -> Option<&RecentNodes> {
        (!for_write).then_some(&self.space.recent)
    }

    async fn delete_all(&self) -> Res<()> {
        self.write(|conn, space| Box::pin(ops::delete_all_on(conn, space)))
            .await
    }

    fn stats(&self) -> StoreStats {
        self.space.counters.snapshot_with(&self.space.recent)
    }

    fn namespace(&self) -> Option<&str> {
        Some(&self.space.name)
    }
}

impl<C: Dialect> AuditStore for SqlTxStore<'_, C> {
    async fn audit(&self, kind: LayoutKind, progress: &ProgressSink) -> Res<AuditReport> {
        let mut audit = RowAudit::new(kind).with_progress(progress);
        ops::scan_rows_on(&mut **self.conn.lock().await, &self.space, &mut audit).await?;
        Ok(audit.finish())
    }
}

impl<C: Dialect> SqlStore<C> {
    /// Runs `work` in one read transaction (one snapshot on Postgres; on
    /// SQLite a read transaction sees one state of the file).
    async fn snapshot<T, W>(&self, work: W) -> Res<T>
    where
        W: for<'a> FnOnce(
            &'a mut C,
            &'a NamespaceState,
        ) -> std::pin::Pin<Box<dyn Future<Output = Res<T>> + Send + 'a>>,
    {
        let mut conn = TxConnection::acquire(&self.pool).await?;
        let wait = self.space.reply_wait;
        let mut tx = C::bounded_by(wait, conn.conn().begin()).await?;
        if let Some(sql) = C::SNAPSHOT {
            tx.execute(wait, sql.into_sql_str(), &[]).await?;
        }
        let out = work(&mut *tx, &self.space).await?;
        C::bounded_by(wait, tx.commit()).await?;
        conn.release();
        Ok(out)
    }

    /// A page of the journal from one snapshot, with or without its
    /// later leaves.
    async fn journal_page(
        &self,
        since: u64,
        limit: usize,
        later: journal::Later,
    ) -> Res<Option<ChangePage>> {
        self.snapshot(move |conn, space| {
            Box::pin(journal::changes_on(conn, space, since, limit, later))
        })
        .await
    }
}

impl<C: Dialect> JournalStore for SqlStore<C> {
    async fn enable_journal(&self) -> Res<JournalState> {
        tx::write(&self.pool, &self.space, |conn: &mut C, space| {
            Box::pin(journal::enable_on(conn, space))
        })
        .await
    }

    async fn disable_journal(&self) -> Res<()> {
        tx::write(&self.pool, &self.space, |conn: &mut C, space| {
            Box::pin(journal::disable_on(conn, space))
        })
        .await
    }

    async fn journal(&self) -> Res<Option<JournalState>> {
        journal::state_on(&mut *self.pool.acquire().await?, &self.space).await
    }

    async fn changes(&self, since: u64, limit: usize) -> Res<Option<ChangePage>> {
        self.journal_page(since, limit, journal::Later::Skip).await
    }

    async fn changes_with_later(&self, since: u64, limit: usize) -> Res<Option<ChangePage>> {
        self.journal_page(since, limit, journal::Later::Read).await
    }

    async fn version_of(&self, root: &Hash) -> Res<Option<u64>> {
        journal::version_of_on(&mut *self.pool.acquire().await?, &self.space, root).await
    }

    async fn prune_journal(&self, retention: &Retention) -> Res<u64> {
        let retention = *retention;
        tx::write(&self.pool, &self.space, move |conn: &mut C, space| {
            Box::pin(async move { journal::prune_on(conn, space, &retention).await })
        })
        .await
    }
}

impl<C: Dialect> PinStore for SqlStore<C> {
    async fn pin(&self, name: &str) -> Res<Pin> {
        let name = name.to_owned();
        tx::write(&self.pool, &self.space, move |conn: &mut C, space| {
            Box::pin(async move { ops::pin_on(conn, space, &name).await })
        })
        .await
    }

    async fn unpin(&self, name: &str) -> Res<bool> {
        let name = name.to_owned();
        tx::write(&self.pool, &self.space, move |conn: &mut C, space| {
            Box::pin(async move { ops::unpin_on(conn, space, &name).await })
        })
        .await
    }

    async fn pinned(&self, name: &str) -> Res<Option<Pin>> {
        ops::pinned_on(&mut *self.pool.acquire().await?, &self.space, name).await
    }

    async fn pins(&self) -> Res<Vec<Pin>> {
        ops::pins_on(&mut *self.pool.acquire().await?, &self.space).await
    }
}

impl<C: Dialect> PinStore for SqlTxStore<'_, C> {
    async fn pin(&self, name: &str) -> Res<Pin> {
        let name = name.to_owned();
        self.write(move |conn, space| {
            Box::pin(async move { ops::pin_on(conn, space, &name).await })
        })
        .await
    }

    async fn unpin(&self, name: &str) -> Res<bool> {
        let name = name.to_owned();
        self.write(move |conn, space| {
            Box::pin(async move { ops::unpin_on(conn, space, &name).await })
        })
        .await
    }

    async fn pinned(&self, name: &str) -> Res<Option<Pin>> {
        ops::pinned_on(&mut **self.conn.lock().await, &self.space, name).await
    }

    async fn pins(&self) -> Res<Vec<Pin>> {
        ops::pins_on(&mut **self.conn.lock().await, &self.space).await
    }
}

impl<C: Dialect> BulkStore for SqlStore<C> {
    fn name(&self) -> &str {
        &self.space.name
    }

    fn open_namespace(&self, name: &str) -> Res<Self> {
        Ok(SqlStore::open_namespace(self, name))
    }

    /// One `INSERT ... SELECT` when both handles share a pool.
    async fn copy_into(&self, at: ReadAt, target: &Self) -> Res<Option<ComputedNode>> {
        if !self.same_pool(target) {
            return Ok(None);
        }
        let src = self.space.clone();
        tx::write(&self.pool, &target.space, move |conn: &mut C, target| {
            Box::pin(async move { ops::copy_on(conn, &src, at, target).await })
        })
        .await
    }

    /// A rename of `staging`'s namespace row: constant time.
    async fn swap_in_from(&self, staging: &Self, expected: &ComputedNode) -> Res<bool> {
        if !self.same_pool(staging) || self.space.name == staging.space.name {
            return Ok(false);
        }
        let (from, expected) = (staging.space.clone(), *expected);
        tx::write(&self.pool, &self.space, move |conn: &mut C, target| {
            Box::pin(async move { ops::take_tree_on(conn, target, &from, &expected).await })
        })
        .await
    }

    /// A delete of the namespace's row, when vacant.
    async fn forget_if_vacant(&self) -> Res<bool> {
        tx::write(&self.pool, &self.space, |conn: &mut C, space| {
            Box::pin(async move { ops::forget_on(conn, space).await })
        })
        .await
    }
}
