//! The SQL handle, generic over the engine and over how it reaches the
//! database ([`Source`]): [`SqlStore`] on a pool and [`SqlTxStore`] on a
//! caller's open transaction, every store trait implemented once for both.

use std::marker::PhantomData;
use std::sync::Arc;

use tokio::sync::Mutex;

use super::dialect::Dialect;
use super::error::{Res, SqlStoreError};
use super::journal;
use super::namespaces;
use super::ops;
use super::reads;
use super::reply_wait::ReplyWait;
use super::source::{CallerTx, Pooled, ReadTx, Source};
use super::space::NamespaceState;
use super::tx;
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

/// A tree store in an SQL database, bound to one namespace, reaching the
/// database through `S`: a pool ([`SqlStore`], [`SqliteStore`](crate::SqliteStore),
/// [`PostgresStore`](crate::PostgresStore)) or a caller's open transaction
/// ([`SqlTxStore`]). Every store trait is implemented once, for both.
///
/// Cloning is cheap and shares the pool or transaction, the handle's
/// counters and its [`RecentNodes`]. Sums are stored as the i64 with the
/// same bits as the u64 (the root) or as little-endian bytes inside row
/// bodies; they are never compared in SQL.
pub struct SqlHandle<C: Dialect, S> {
    pub(crate) source: S,
    pub(crate) space: Arc<NamespaceState>,
    _engine: PhantomData<fn() -> C>,
}

/// A tree store in an SQL database on a pool, bound to one namespace.
pub type SqlStore<C> = SqlHandle<C, Pooled<C>>;

/// A [`SqlStore`] namespace bound to a caller's open transaction; see
/// [`SqlStore::in_transaction`]. Its forest ([`ForestStore`](crate::store::ForestStore))
/// is every namespace of the database in that transaction. Cloning is cheap
/// and shares the transaction.
pub type SqlTxStore<'c, C> = SqlHandle<C, CallerTx<'c, C>>;

impl<C: Dialect, S: Clone> Clone for SqlHandle<C, S> {
    fn clone(&self) -> Self {
        SqlHandle {
            source: self.source.clone(),
            space: self.space.clone(),
            _engine: PhantomData,
        }
    }
}

impl<C: Dialect, S: std::fmt::Debug> std::fmt::Debug for SqlHandle<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlHandle")
            .field("source", &self.source)
            .field("space", &self.space)
            .finish()
    }
}

impl<C: Dialect, S> SqlHandle<C, S> {
    /// `space` reached through `source`.
    pub(crate) fn on(source: S, space: Arc<NamespaceState>) -> Self {
        SqlHandle {
            source,
            space,
            _engine: PhantomData,
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
}

impl<C: Dialect> SqlStore<C> {
    /// A store on a pool the host application already has. Call
    /// [`migrate`](Self::migrate) once before use.
    pub fn from_pool(pool: sqlx::Pool<C::Database>, namespace: &str) -> Self {
        let space = NamespaceState::new(namespace, StratumHeight::default(), DEFAULT_RECENT_NODES);
        SqlHandle::on(
            Pooled {
                pool,
                jit_off: false,
            },
            space,
        )
    }

    /// [`from_pool`](Self::from_pool) on namespace `"default"`, migrated.
    pub(super) async fn opened(pool: sqlx::Pool<C::Database>, jit_off: bool) -> Res<Self> {
        let mut store = Self::from_pool(pool, "default");
        store.source.jit_off = jit_off;
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
        let memory = RecentNodes::new(self.space.recent.capacity());
        let mut store = self.with_space(&self.space.name, self.space.height, &memory);
        store.source = Pooled { pool, jit_off };
        store
    }

    fn with_space(&self, name: &str, height: StratumHeight, memory: &RecentNodes) -> Self {
        let space = NamespaceState::waiting(name, height, memory, self.space.reply_wait);
        SqlHandle::on(self.source.clone(), space)
    }

    /// True when this namespace exists in the database (its first write
    /// created it); a server answers reads of other names "not found".
    pub async fn exists(&self) -> Res<bool> {
        let mut conn = self.source.conn().await?;
        Ok(namespaces::load_state(&mut *conn, &self.space)
            .await?
            .is_some())
    }

    /// The pool.
    pub fn pool(&self) -> &sqlx::Pool<C::Database> {
        &self.source.pool
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
    /// `progress` ([`ProgressOperation::SchemaUpgrade`](ms_smt::ProgressOperation::SchemaUpgrade)).
    pub async fn migrate_with_progress(&self, progress: &ProgressSink) -> Res<()> {
        let set = &super::migrations::TREE_SCHEMA;
        super::schema::migrate::<C>(&self.source.pool, set, self.space.reply_wait, progress).await
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
        super::schema::migrate::<C>(&self.source.pool, set, self.space.reply_wait, progress).await
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
        let caller = CallerTx {
            conn: Arc::new(Mutex::new(conn)),
        };
        SqlHandle::on(caller, self.space.clone())
    }
}

impl<C: Dialect, S: Source<C>> TreeStore for SqlHandle<C, S> {
    type Error = SqlStoreError;

    async fn load_root(&self) -> Res<ComputedNode> {
        namespaces::load_root(&mut *self.source.conn().await?, &self.space).await
    }

    /// A large walk on a session without JIT off takes the engine's guard,
    /// which lasts for a read transaction: a pool's own, or the caller's.
    async fn read_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Vec<(Hash, Node)>> {
        let guard =
            at == ReadAt::Current && C::walk_needs_guard(self.source.jit_off(), starts.len());
        if !guard {
            let mut conn = self.source.conn().await?;
            return reads::paths_on(&mut *conn, &self.space, at, starts, siblings, false).await;
        }
        let mut tx = self.read_tx(false).await?;
        let nodes = reads::paths_on(&mut *tx, &self.space, at, starts, siblings, true).await?;
        self.end_read(tx, false).await?;
        Ok(nodes)
    }

    async fn read_positions(
        &self,
        at: ReadAt,
        nodes: &[(Position, Hash)],
    ) -> Res<Vec<(Hash, Node)>> {
        reads::positions(&mut *self.source.conn().await?, &self.space, at, nodes).await
    }

    async fn read_in_order(
        &self,
        at: ReadAt,
        (from, _): (Position, Hash),
        probe: Key,
        until: Option<Key>,
        limit: usize,
    ) -> Res<Vec<(Hash, Node)>> {
        let mut conn = self.source.conn().await?;
        reads::in_order(&mut *conn, &self.space, at, from, probe, until, limit).await
    }

    // A write's commit merges into the rows its path read brings, so a
    // write reads every row from the store.
    fn recent_nodes(&self, for_write: bool) -> Option<&RecentNodes> {
        (!for_write).then_some(&self.space.recent)
    }

    async fn delete_all(&self) -> Res<()> {
        self.source
            .write(&self.space, |conn: &mut C, space| {
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

impl<C: Dialect, S: Source<C>> SqlHandle<C, S> {
    /// A read transaction of the source ([`Source::read_tx`]), its
    /// exchanges this handle's.
    pub(crate) async fn read_tx(&self, snapshot: bool) -> Res<impl ReadTx<C> + '_> {
        self.source.read_tx(self.space.exchange(), snapshot).await
    }

    /// Ends a read transaction of [`read_tx`](Self::read_tx).
    pub(crate) async fn end_read(&self, tx: impl ReadTx<C>, commit: bool) -> Res<()> {
        tx.end(self.space.exchange(), commit).await
    }

    /// A page of the journal from one snapshot, with or without its
    /// later leaves.
    async fn journal_page(
        &self,
        since: u64,
        limit: usize,
        later: journal::Later,
    ) -> Res<Option<ChangePage>> {
        let mut tx = self.read_tx(true).await?;
        let page = journal::changes_on(&mut *tx, &self.space, since, limit, later).await?;
        self.end_read(tx, true).await?;
        Ok(page)
    }
}

impl<C: Dialect, S: Source<C>> AuditStore for SqlHandle<C, S> {
    /// Every page from one snapshot.
    async fn audit(&self, kind: LayoutKind, progress: &ProgressSink) -> Res<AuditReport> {
        let mut audit = RowAudit::new(kind).with_progress(progress);
        let mut tx = self.read_tx(true).await?;
        ops::scan_rows_on(&mut *tx, &self.space, &mut audit).await?;
        self.end_read(tx, true).await?;
        Ok(audit.finish())
    }
}

impl<C: Dialect, S: Source<C>> JournalStore for SqlHandle<C, S> {
    async fn enable_journal(&self) -> Res<JournalState> {
        self.source
            .write(&self.space, |conn: &mut C, space| {
                Box::pin(journal::enable_on(conn, space))
            })
            .await
    }

    async fn disable_journal(&self) -> Res<()> {
        self.source
            .write(&self.space, |conn: &mut C, space| {
                Box::pin(journal::disable_on(conn, space))
            })
            .await
    }

    async fn journal(&self) -> Res<Option<JournalState>> {
        journal::state_on(&mut *self.source.conn().await?, &self.space).await
    }

    async fn changes(&self, since: u64, limit: usize) -> Res<Option<ChangePage>> {
        self.journal_page(since, limit, journal::Later::Skip).await
    }

    async fn changes_with_later(&self, since: u64, limit: usize) -> Res<Option<ChangePage>> {
        self.journal_page(since, limit, journal::Later::Read).await
    }

    async fn version_of(&self, root: &Hash) -> Res<Option<u64>> {
        journal::version_of_on(&mut *self.source.conn().await?, &self.space, root).await
    }

    async fn prune_journal(&self, retention: &Retention) -> Res<u64> {
        let retention = *retention;
        self.source
            .write(&self.space, move |conn: &mut C, space| {
                Box::pin(async move { journal::prune_on(conn, space, &retention).await })
            })
            .await
    }
}

impl<C: Dialect, S: Source<C>> PinStore for SqlHandle<C, S> {
    async fn pin(&self, name: &str) -> Res<Pin> {
        let name = name.to_owned();
        self.source
            .write(&self.space, move |conn: &mut C, space| {
                Box::pin(async move { ops::pin_on(conn, space, &name).await })
            })
            .await
    }

    async fn unpin(&self, name: &str) -> Res<bool> {
        let name = name.to_owned();
        self.source
            .write(&self.space, move |conn: &mut C, space| {
                Box::pin(async move { ops::unpin_on(conn, space, &name).await })
            })
            .await
    }

    async fn pinned(&self, name: &str) -> Res<Option<Pin>> {
        ops::pinned_on(&mut *self.source.conn().await?, &self.space, name).await
    }

    async fn pins(&self) -> Res<Vec<Pin>> {
        ops::pins_on(&mut *self.source.conn().await?, &self.space).await
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
        if !self.source.same(&target.source) {
            return Ok(None);
        }
        let src = self.space.clone();
        tx::write(
            &self.source.pool,
            &target.space,
            move |conn: &mut C, target| {
                Box::pin(async move { ops::copy_on(conn, &src, at, target).await })
            },
        )
        .await
    }

    /// A rename of `staging`'s namespace row: constant time.
    async fn swap_in_from(&self, staging: &Self, expected: &ComputedNode) -> Res<bool> {
        if !self.source.same(&staging.source) || self.space.name == staging.space.name {
            return Ok(false);
        }
        let (from, expected) = (staging.space.clone(), *expected);
        tx::write(
            &self.source.pool,
            &self.space,
            move |conn: &mut C, target| {
                Box::pin(async move { ops::take_tree_on(conn, target, &from, &expected).await })
            },
        )
        .await
    }

    /// A delete of the namespace's row, when vacant.
    async fn forget_if_vacant(&self) -> Res<bool> {
        tx::write(&self.source.pool, &self.space, |conn: &mut C, space| {
            Box::pin(async move { ops::forget_on(conn, space).await })
        })
        .await
    }
}
