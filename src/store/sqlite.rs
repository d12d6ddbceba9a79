//! SQLite store on sqlx: one file, many namespaces, reference-counted rows.
//!
//! * Reads: one `SELECT ... WHERE hash IN (...)` per descent level while
//!   keys share nodes (chunked under SQLite's bind limit, so one statement
//!   up to 32,000 hashes), then one bounded recursive query that walks every
//!   single-key path to its end.
//! * Writes: one `BEGIN IMMEDIATE` transaction per commit: check the root,
//!   add every row's net reference delta with multi-row upserts (chunks of
//!   4,000 rows under the bind limit), delete rows left with none, move the
//!   root. `BEGIN IMMEDIATE` takes the write lock up front, so
//!   concurrent writers wait (busy timeout) instead of failing with
//!   "database is locked".
//! * Inside a caller's transaction ([`SqliteStore::in_transaction`]) the
//!   same writes run under a savepoint, and commit or roll back with the
//!   caller's own rows.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection, SqlitePool};
use tokio::sync::Mutex;

use super::sql::{
    Changes, RowTuple, SqlStoreError, decode_root, decode_rows, emptied_rows, fold, root_row,
};
use super::{CommitOutcome, Counters, PathStart, StoreStats, TreeStore, UpdateBatch};
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};

/// SQLite's default bind limit is 32,766; keep a margin.
const MAX_BINDS: usize = 32_000;

/// Schema migrations, tracked in `ms_smt_migrations` (not sqlx's
/// `_sqlx_migrations`, which belongs to the host application).
const MIGRATIONS: &[(i64, &str, &str)] = &[(
    1,
    "nodes and roots",
    "CREATE TABLE ms_smt_nodes (
        namespace TEXT NOT NULL,
        hash BLOB NOT NULL,
        l_hash BLOB,
        r_hash BLOB,
        leaf_key BLOB,
        value BLOB,
        sum INTEGER NOT NULL,
        refs INTEGER NOT NULL,
        PRIMARY KEY (namespace, hash)
    ) WITHOUT ROWID;
    CREATE TABLE ms_smt_roots (
        namespace TEXT PRIMARY KEY NOT NULL,
        hash BLOB NOT NULL,
        sum INTEGER NOT NULL
    );",
)];

/// A tree store in an SQLite database, bound to one namespace.
///
/// Cloning is cheap and shares the pool. Sums are stored as the i64 with
/// the same bits as the u64; rows carry a reference count, one per tree
/// position using them.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    namespace: Arc<str>,
    counters: Arc<Counters>,
}

type Res<T> = Result<T, SqlStoreError>;

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path` with
    /// [`SqliteStore::connect_options`], runs the migrations, and binds the
    /// namespace `"default"`.
    pub async fn open(path: impl AsRef<Path>) -> Res<Self> {
        Self::open_with(Self::connect_options(path)).await
    }

    /// Opens a database with the caller's connection options (for example
    /// [`connect_options`](Self::connect_options) with `synchronous=NORMAL`
    /// for a scratch database), runs the migrations, and binds the namespace
    /// `"default"`.
    pub async fn open_with(options: SqliteConnectOptions) -> Res<Self> {
        let pool = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(4)
            .connect_with(options)
            .await?;
        let store = Self::from_pool(pool, "default");
        store.migrate().await?;
        Ok(store)
    }

    /// An in-memory database (one shared connection), migrated; for tests.
    pub async fn open_in_memory() -> Res<Self> {
        let options = SqliteConnectOptions::from_str("sqlite::memory:")?;
        let pool = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await?;
        let store = Self::from_pool(pool, "default");
        store.migrate().await?;
        Ok(store)
    }

    /// The connection options the store recommends: create if missing, WAL,
    /// `synchronous=FULL`, foreign keys on, and a 60 s busy timeout so
    /// writers queue instead of failing while another holds the lock.
    pub fn connect_options(path: impl AsRef<Path>) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(60))
    }

    /// A store on a pool the host application already has. Call
    /// [`migrate`](Self::migrate) once before use.
    pub fn from_pool(pool: SqlitePool, namespace: &str) -> Self {
        SqliteStore {
            pool,
            namespace: Arc::from(namespace),
            counters: Arc::default(),
        }
    }

    /// The same database, another namespace (an independent tree).
    pub fn namespace(&self, name: &str) -> Self {
        SqliteStore {
            pool: self.pool.clone(),
            namespace: Arc::from(name),
            counters: Arc::default(),
        }
    }

    /// This store's namespace.
    pub fn namespace_name(&self) -> &str {
        &self.namespace
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Creates or upgrades the store's tables (`ms_smt_*`). Idempotent and
    /// safe to run from several processes at once; tracked in its own
    /// `ms_smt_migrations` table, so it coexists with the host's sqlx
    /// migrations.
    pub async fn migrate(&self) -> Res<()> {
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS ms_smt_migrations (
                version INTEGER PRIMARY KEY NOT NULL,
                description TEXT NOT NULL,
                applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
            )",
        )
        .execute(&mut *tx)
        .await?;
        let current: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM ms_smt_migrations")
                .fetch_one(&mut *tx)
                .await?;
        let latest = MIGRATIONS.last().map_or(0, |m| m.0);
        if current > latest {
            return Err(SqlStoreError::SchemaTooNew {
                found: current,
                supported: latest,
            });
        }
        for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
            sqlx::raw_sql(sql).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO ms_smt_migrations (version, description) VALUES (?, ?)")
                .bind(version)
                .bind(description)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A store for this namespace that runs on the caller's open
    /// transaction (`&mut *tx`): the tree's writes commit or roll back with
    /// the caller's own rows. Writes run under a savepoint. Start the
    /// caller's transaction with `BEGIN IMMEDIATE`
    /// (`pool.begin_with("BEGIN IMMEDIATE")`) so it holds the write lock
    /// from the start.
    pub fn in_transaction<'c>(&self, conn: &'c mut SqliteConnection) -> SqliteTxStore<'c> {
        SqliteTxStore {
            conn: Mutex::new(conn),
            namespace: self.namespace.clone(),
            counters: self.counters.clone(),
        }
    }
}

/// A [`SqliteStore`] namespace bound to a caller's open transaction; see
/// [`SqliteStore::in_transaction`].
#[derive(Debug)]
pub struct SqliteTxStore<'c> {
    conn: Mutex<&'c mut SqliteConnection>,
    namespace: Arc<str>,
    counters: Arc<Counters>,
}

fn placeholders(n: usize, group: &str) -> String {
    let mut s = String::with_capacity(n * (group.len() + 1));
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str(group);
    }
    s
}

async fn load_root(
    conn: &mut SqliteConnection,
    ns: &str,
    counters: &Counters,
) -> Res<ComputedNode> {
    counters.round_trip(1);
    let row: Option<(Vec<u8>, i64)> =
        sqlx::query_as("SELECT hash, sum FROM ms_smt_roots WHERE namespace = ?")
            .bind(ns)
            .fetch_optional(&mut *conn)
            .await?;
    decode_root(ns, row)
}

async fn fetch_nodes(
    conn: &mut SqliteConnection,
    ns: &str,
    hashes: &[Hash],
    counters: &Counters,
) -> Res<Vec<(Hash, Node)>> {
    let mut out = Vec::with_capacity(hashes.len());
    for chunk in hashes.chunks(MAX_BINDS) {
        let sql = format!(
            "SELECT hash, l_hash, r_hash, leaf_key, value, sum FROM ms_smt_nodes \
             WHERE namespace = ? AND hash IN ({})",
            placeholders(chunk.len(), "?")
        );
        let mut q = sqlx::query_as::<_, RowTuple>(&sql)
            .persistent(false)
            .bind(ns);
        for h in chunk {
            q = q.bind(h.0.as_slice());
        }
        counters.round_trip(1);
        out.extend(decode_rows(ns, q.fetch_all(&mut *conn).await?)?);
    }
    counters.read(out.len() as u64);
    Ok(out)
}

/// Walks each start's key path in one bounded recursive query per chunk
/// (at most 256 steps, each a primary-key lookup). SQLite has no bit
/// functions on blobs, so each key travels as a 256-character '0'/'1' text.
async fn fetch_key_paths(
    conn: &mut SqliteConnection,
    ns: &str,
    starts: &[PathStart],
    siblings: bool,
    counters: &Counters,
) -> Res<Vec<(Hash, Node)>> {
    let mut out = Vec::new();
    for chunk in starts.chunks((MAX_BINDS - 2) / 3) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| format!("(?{}, ?{}, ?{})", 3 + 3 * i, 4 + 3 * i, 5 + 3 * i))
            .collect();
        let sql = format!(
            "WITH RECURSIVE starts(hash, lvl, bits) AS (VALUES {}), \
             walk(hash, sib, lvl, bits) AS ( \
                 SELECT hash, NULL, lvl, bits FROM starts \
               UNION ALL \
                 SELECT CASE WHEN substr(w.bits, w.lvl + 1, 1) = '1' THEN n.r_hash ELSE n.l_hash END, \
                        CASE WHEN substr(w.bits, w.lvl + 1, 1) = '1' THEN n.l_hash ELSE n.r_hash END, \
                        w.lvl + 1, w.bits \
                 FROM walk w JOIN ms_smt_nodes n ON n.namespace = ?1 AND n.hash = w.hash \
                 WHERE w.lvl < 256 AND n.l_hash IS NOT NULL \
             ) \
             SELECT hash, l_hash, r_hash, leaf_key, value, sum FROM ms_smt_nodes \
             WHERE namespace = ?1 AND hash IN (SELECT hash FROM walk UNION SELECT sib FROM walk WHERE ?2 AND sib IS NOT NULL)",
            values.join(",")
        );
        let mut q = sqlx::query_as::<_, RowTuple>(&sql)
            .persistent(false)
            .bind(ns)
            .bind(siblings);
        for start in chunk {
            let bits: String = (0..crate::key::MAX_LEVEL)
                .map(|d| if start.key.bit(d) { '1' } else { '0' })
                .collect();
            q = q
                .bind(start.hash.0.as_slice())
                .bind(i64::try_from(start.level).unwrap_or(i64::MAX))
                .bind(bits);
        }
        counters.round_trip(1);
        out.extend(decode_rows(ns, q.fetch_all(&mut *conn).await?)?);
    }
    counters.read(out.len() as u64);
    Ok(out)
}

/// Check-and-apply inside an open transaction or savepoint. Returns
/// `RootMoved` without writing when the root is not `batch.old_root`.
async fn commit_on(
    conn: &mut SqliteConnection,
    ns: &str,
    batch: &UpdateBatch,
    counters: &Counters,
) -> Res<CommitOutcome> {
    let current = load_root(conn, ns, counters).await?;
    if current != batch.old_root {
        return Ok(CommitOutcome::RootMoved { current });
    }
    let changes = fold(batch);
    apply_changes(conn, ns, &changes, counters).await?;
    counters.round_trip(1);
    match root_row(&batch.new_root) {
        Some((hash, sum)) => {
            sqlx::query(
                "INSERT INTO ms_smt_roots (namespace, hash, sum) VALUES (?, ?, ?) \
                 ON CONFLICT (namespace) DO UPDATE SET hash = excluded.hash, sum = excluded.sum",
            )
            .bind(ns)
            .bind(hash)
            .bind(sum)
            .execute(&mut *conn)
            .await?;
        }
        None => {
            sqlx::query("DELETE FROM ms_smt_roots WHERE namespace = ?")
                .bind(ns)
                .execute(&mut *conn)
                .await?;
        }
    }
    counters.written(changes.len() as u64);
    Ok(CommitOutcome::Committed)
}

/// Applies the net changes: chunked multi-row upserts that add each row's
/// delta to its reference count (creating new rows), then one delete of the
/// rows left with none. Upserts iterate the VALUES rows and look each up by
/// primary key, which an `UPDATE ... FROM (VALUES ...)` join does not
/// guarantee on SQLite.
async fn apply_changes(
    conn: &mut SqliteConnection,
    ns: &str,
    changes: &Changes,
    counters: &Counters,
) -> Res<()> {
    const COLS: usize = 8;
    let rows = MAX_BINDS / COLS;
    let mut emptied: Vec<Vec<u8>> = Vec::new();
    for start in (0..changes.len()).step_by(rows) {
        let end = (start + rows).min(changes.len());
        let sql = format!(
            "INSERT INTO ms_smt_nodes (namespace, hash, l_hash, r_hash, leaf_key, value, sum, refs) \
             VALUES {} ON CONFLICT (namespace, hash) DO UPDATE SET refs = ms_smt_nodes.refs + excluded.refs \
             RETURNING hash, refs",
            placeholders(end - start, "(?,?,?,?,?,?,?,?)")
        );
        let mut q = sqlx::query_as::<_, (Vec<u8>, i64)>(&sql).persistent(false);
        for i in start..end {
            q = q
                .bind(ns)
                .bind(changes.hash[i].as_slice())
                .bind(changes.l_hash[i].as_deref())
                .bind(changes.r_hash[i].as_deref())
                .bind(changes.leaf_key[i].as_deref())
                .bind(changes.value[i].as_deref())
                .bind(changes.sum[i])
                .bind(changes.delta[i]);
        }
        counters.round_trip(1);
        emptied.extend(emptied_rows(ns, q.fetch_all(&mut *conn).await?)?);
    }
    for chunk in emptied.chunks(MAX_BINDS - 1) {
        let sql = format!(
            "DELETE FROM ms_smt_nodes WHERE namespace = ? AND hash IN ({})",
            placeholders(chunk.len(), "?")
        );
        let mut q = sqlx::query(&sql).persistent(false).bind(ns);
        for h in chunk {
            q = q.bind(h.as_slice());
        }
        counters.round_trip(1);
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

async fn delete_all_on(conn: &mut SqliteConnection, ns: &str, counters: &Counters) -> Res<()> {
    counters.round_trip(2);
    sqlx::query("DELETE FROM ms_smt_nodes WHERE namespace = ?")
        .bind(ns)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM ms_smt_roots WHERE namespace = ?")
        .bind(ns)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl TreeStore for SqliteStore {
    type Error = SqlStoreError;

    fn supports_key_paths(&self) -> bool {
        true
    }

    async fn fetch_key_paths(
        &self,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Option<Vec<(Hash, Node)>>> {
        let mut conn = self.pool.acquire().await?;
        fetch_key_paths(&mut conn, &self.namespace, starts, siblings, &self.counters)
            .await
            .map(Some)
    }

    async fn load_root(&self) -> Res<ComputedNode> {
        let mut conn = self.pool.acquire().await?;
        load_root(&mut conn, &self.namespace, &self.counters).await
    }

    async fn fetch_nodes(&self, hashes: &[Hash]) -> Res<Vec<(Hash, Node)>> {
        let mut conn = self.pool.acquire().await?;
        fetch_nodes(&mut conn, &self.namespace, hashes, &self.counters).await
    }

    async fn commit(&self, batch: &UpdateBatch) -> Res<CommitOutcome> {
        self.counters.round_trip(1);
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let outcome = commit_on(&mut tx, &self.namespace, batch, &self.counters).await?;
        self.counters.round_trip(1);
        match outcome {
            CommitOutcome::Committed => tx.commit().await?,
            CommitOutcome::RootMoved { .. } => tx.rollback().await?,
        }
        Ok(outcome)
    }

    async fn delete_all(&self) -> Res<()> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        delete_all_on(&mut tx, &self.namespace, &self.counters).await?;
        tx.commit().await?;
        Ok(())
    }

    fn stats(&self) -> StoreStats {
        self.counters.snapshot()
    }
}

impl TreeStore for SqliteTxStore<'_> {
    type Error = SqlStoreError;

    fn supports_key_paths(&self) -> bool {
        true
    }

    async fn fetch_key_paths(
        &self,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Option<Vec<(Hash, Node)>>> {
        let mut conn = self.conn.lock().await;
        fetch_key_paths(&mut conn, &self.namespace, starts, siblings, &self.counters)
            .await
            .map(Some)
    }

    async fn load_root(&self) -> Res<ComputedNode> {
        let mut conn = self.conn.lock().await;
        load_root(&mut conn, &self.namespace, &self.counters).await
    }

    async fn fetch_nodes(&self, hashes: &[Hash]) -> Res<Vec<(Hash, Node)>> {
        let mut conn = self.conn.lock().await;
        fetch_nodes(&mut conn, &self.namespace, hashes, &self.counters).await
    }

    async fn commit(&self, batch: &UpdateBatch) -> Res<CommitOutcome> {
        let mut conn = self.conn.lock().await;
        self.counters.round_trip(1);
        let mut savepoint = conn.begin().await?;
        let outcome = commit_on(&mut savepoint, &self.namespace, batch, &self.counters).await?;
        self.counters.round_trip(1);
        match outcome {
            CommitOutcome::Committed => savepoint.commit().await?,
            CommitOutcome::RootMoved { .. } => savepoint.rollback().await?,
        }
        Ok(outcome)
    }

    async fn delete_all(&self) -> Res<()> {
        let mut conn = self.conn.lock().await;
        let mut savepoint = conn.begin().await?;
        delete_all_on(&mut savepoint, &self.namespace, &self.counters).await?;
        savepoint.commit().await?;
        Ok(())
    }

    fn stats(&self) -> StoreStats {
        self.counters.snapshot()
    }
}
