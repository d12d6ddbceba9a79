//! SQLite store on sqlx: one file, many namespaces, reference-counted rows.
//!
//! * Reads: one `SELECT` per descent level while keys share nodes, then one
//!   bounded recursive query that walks every single-key path to its end.
//!   The hashes travel as packed blobs ([`super::packed`]), up to 16,384
//!   per statement, so the statement text is fixed and prepared once.
//!   Nodes the handle remembers ([`RecentNodes`]) are not read at all.
//! * Writes: one `BEGIN IMMEDIATE` transaction per commit: check the root,
//!   delete the rows the batch takes to zero references, add every other
//!   row's net delta with one packed upsert (creating new rows), check that
//!   no count went below one, move the root. `BEGIN IMMEDIATE` takes the
//!   write lock up front, so concurrent writers wait (busy timeout) instead
//!   of failing with "database is locked".
//! * Inside a caller's transaction ([`SqliteStore::in_transaction`]) the
//!   same writes run under a savepoint, and commit or roll back with the
//!   caller's own rows.

use std::collections::HashSet;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection, SqlitePool};
use tokio::sync::Mutex;

use super::packed::{INDEX_CTE, PackedRows, count};
use super::sql::{
    Changes, SqlStoreError, decode_root, decode_rows, fold, missing_reference, root_row,
};
use super::{CommitOutcome, Counters, PathStart, RecentNodes, StoreStats, TreeStore, UpdateBatch};
use crate::hash::Hash;
use crate::key::MAX_LEVEL;
use crate::node::{ComputedNode, Node};

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
/// Cloning is cheap and shares the pool and the handle's [`RecentNodes`].
/// Sums are stored as the i64 with the same bits as the u64; rows carry a
/// reference count, one per tree position using them.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    namespace: Arc<str>,
    counters: Arc<Counters>,
    recent: Arc<RecentNodes>,
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
    /// `synchronous=FULL`, foreign keys on, a 60 s busy timeout so writers
    /// queue instead of failing while another holds the lock, and a 16 MiB
    /// page cache per connection (SQLite's default is 2 MB, less than the
    /// ~5 MB table of a 10,000-leaf compacted tree; cold reads of such a
    /// tree measured ~25 % faster with it).
    pub fn connect_options(path: impl AsRef<Path>) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(60))
            .pragma("cache_size", "-16384")
    }

    /// A store on a pool the host application already has. Call
    /// [`migrate`](Self::migrate) once before use.
    pub fn from_pool(pool: SqlitePool, namespace: &str) -> Self {
        SqliteStore {
            pool,
            namespace: Arc::from(namespace),
            counters: Arc::default(),
            recent: Arc::default(),
        }
    }

    /// The same database, another namespace (an independent tree).
    pub fn namespace(&self, name: &str) -> Self {
        SqliteStore {
            pool: self.pool.clone(),
            namespace: Arc::from(name),
            counters: Arc::default(),
            recent: Arc::new(RecentNodes::new(self.recent.capacity())),
        }
    }

    /// This handle with its own memory of up to `capacity` recent nodes
    /// (default [`DEFAULT_RECENT_NODES`](super::DEFAULT_RECENT_NODES); 0
    /// reads every node from the database). Handles made from it with
    /// [`namespace`](Self::namespace) get the same capacity. See
    /// [`RecentNodes`] for why remembered nodes are always right.
    pub fn with_recent_nodes(self, capacity: usize) -> Self {
        SqliteStore {
            recent: Arc::new(RecentNodes::new(capacity)),
            ..self
        }
    }

    /// The nodes this handle remembers.
    pub fn recent(&self) -> &RecentNodes {
        &self.recent
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
            recent: self.recent.clone(),
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
    recent: Arc<RecentNodes>,
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

/// Starts or hashes per packed read statement at most.
const READ_CHUNK: usize = 16_384;

/// Reads rows by hash. The hashes travel as ONE packed blob (see
/// [`super::packed`]), so the statement is prepared once and cached
/// instead of a fresh `IN (?, ?, ...)` of thousands of binds parsed on
/// every level of every descent.
async fn fetch_nodes(
    conn: &mut SqliteConnection,
    ns: &str,
    hashes: &[Hash],
    counters: &Counters,
) -> Res<Vec<(Hash, Node)>> {
    let mut out = Vec::with_capacity(hashes.len());
    let sql = format!(
        "WITH RECURSIVE {INDEX_CTE} \
         SELECT n.hash, n.l_hash, n.r_hash, n.leaf_key, n.value, n.sum \
         FROM idx JOIN ms_smt_nodes n \
           ON n.namespace = ?1 AND n.hash = substr(?3, idx.i * 32 + 1, 32)"
    );
    for chunk in hashes.chunks(READ_CHUNK) {
        let packed: Vec<u8> = chunk.iter().flat_map(|h| h.0).collect();
        counters.round_trip(1);
        let rows = sqlx::query(&sql)
            .bind(ns)
            .bind(count(chunk.len()))
            .bind(packed)
            .fetch_all(&mut *conn)
            .await?;
        out.extend(decode_rows(ns, &rows)?);
    }
    counters.read(out.len() as u64);
    Ok(out)
}

/// Walks each start's key path in one bounded recursive query (at most 256
/// steps, each a primary-key lookup that carries the row it read, so each
/// walked node is read once; siblings are one more lookup per branch).
/// The starts travel packed like [`fetch_nodes`]' hashes: one blob of
/// 32-byte hashes, one of 3-digit levels, one of 256 bytes per key holding
/// each bit as 0 or 1 (SQLite has no bit functions on blobs).
async fn fetch_key_paths(
    conn: &mut SqliteConnection,
    ns: &str,
    starts: &[PathStart],
    siblings: bool,
    counters: &Counters,
) -> Res<Vec<(Hash, Node)>> {
    let mut out = Vec::new();
    let sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         starts(hash, lvl, bits) AS ( \
             SELECT substr(?3, i * 32 + 1, 32), CAST(substr(?4, i * 3 + 1, 3) AS INTEGER), \
                    substr(?5, i * 256 + 1, 256) \
             FROM idx), \
         walk(hash, l_hash, r_hash, leaf_key, value, sum, lvl, bits) AS ( \
             SELECT n.hash, n.l_hash, n.r_hash, n.leaf_key, n.value, n.sum, s.lvl, s.bits \
             FROM starts s JOIN ms_smt_nodes n ON n.namespace = ?1 AND n.hash = s.hash \
           UNION ALL \
             SELECT n.hash, n.l_hash, n.r_hash, n.leaf_key, n.value, n.sum, w.lvl + 1, w.bits \
             FROM walk w JOIN ms_smt_nodes n ON n.namespace = ?1 AND n.hash = \
                 CASE WHEN substr(w.bits, w.lvl + 1, 1) = x'01' THEN w.r_hash ELSE w.l_hash END \
             WHERE w.l_hash IS NOT NULL AND w.lvl < 256 \
         ) \
         SELECT hash, l_hash, r_hash, leaf_key, value, sum FROM walk \
         UNION ALL \
         SELECT n.hash, n.l_hash, n.r_hash, n.leaf_key, n.value, n.sum \
         FROM walk w JOIN ms_smt_nodes n ON n.namespace = ?1 AND n.hash = \
             CASE WHEN substr(w.bits, w.lvl + 1, 1) = x'01' THEN w.l_hash ELSE w.r_hash END \
         WHERE ?6 AND w.l_hash IS NOT NULL AND w.lvl < 256"
    );
    for chunk in starts.chunks(READ_CHUNK) {
        let mut hashes = Vec::with_capacity(chunk.len() * 32);
        let mut levels = Vec::with_capacity(chunk.len() * 3);
        let mut bits = Vec::with_capacity(chunk.len() * MAX_LEVEL);
        for start in chunk {
            hashes.extend_from_slice(&start.hash.0);
            levels.extend_from_slice(format!("{:03}", start.level.min(MAX_LEVEL)).as_bytes());
            bits.extend((0..MAX_LEVEL).map(|d| u8::from(start.key.bit(d))));
        }
        counters.round_trip(1);
        let rows = sqlx::query(&sql)
            .bind(ns)
            .bind(count(chunk.len()))
            .bind(hashes)
            .bind(levels)
            .bind(bits)
            .bind(siblings)
            .fetch_all(&mut *conn)
            .await?;
        out.extend(decode_rows(ns, &rows)?);
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
    let net = batch.net_changes();
    let changes = fold(&net);
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

/// Applies the net changes, writing each row once, in packed statements
/// (see [`super::packed`]; one of each unless the batch exceeds a chunk):
/// 1. a delete of the rows whose reference count the batch takes to zero,
///    returning their hashes;
/// 2. an upsert of every other row, adding its delta to the count
///    (creating new rows);
/// 3. when rows lost references without being deleted, a check that none
///    was left with a count <= 0: that means the batch dropped references
///    the store does not hold, and the transaction is abandoned.
///
/// The commit holds SQLite's write lock, so no other writer can change a
/// count in between.
async fn apply_changes(
    conn: &mut SqliteConnection,
    ns: &str,
    changes: &Changes<'_>,
    counters: &Counters,
) -> Res<()> {
    let dropping: Vec<usize> = (0..changes.len())
        .filter(|&i| changes.delta[i] < 0)
        .collect();
    let mut deleted: HashSet<Vec<u8>, foldhash::fast::RandomState> = HashSet::default();
    let delete_sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         d(hash, delta) AS ( \
             SELECT substr(?3, i * 32 + 1, 32), CAST(substr(?4, i * 20 + 1, 20) AS INTEGER) \
             FROM idx) \
         DELETE FROM ms_smt_nodes WHERE namespace = ?1 AND hash IN ( \
             SELECT n.hash FROM d JOIN ms_smt_nodes n ON n.namespace = ?1 AND n.hash = d.hash \
             WHERE n.refs + d.delta = 0) \
         RETURNING hash"
    );
    for chunk in PackedRows::chunks(changes, dropping.iter().copied()) {
        counters.round_trip(1);
        let gone: Vec<(Vec<u8>,)> = sqlx::query_as(&delete_sql)
            .bind(ns)
            .bind(count(chunk.len))
            .bind(chunk.hash)
            .bind(chunk.delta)
            .fetch_all(&mut *conn)
            .await?;
        deleted.extend(gone.into_iter().map(|(h,)| h));
    }

    let upsert_sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         r(i, k) AS (SELECT i, substr(?4, i + 1, 1) FROM idx) \
         INSERT INTO ms_smt_nodes (namespace, hash, l_hash, r_hash, leaf_key, value, sum, refs) \
         SELECT ?1, substr(?3, i * 32 + 1, 32), \
                CASE WHEN k = x'42' THEN substr(?5, i * 32 + 1, 32) END, \
                CASE WHEN k = x'42' THEN substr(?6, i * 32 + 1, 32) END, \
                CASE WHEN k = x'43' THEN substr(?7, i * 32 + 1, 32) END, \
                CASE WHEN k IN (x'4c', x'43') THEN substr(?8, \
                    CAST(substr(?9, i * 20 + 1, 20) AS INTEGER) + 1, \
                    CAST(substr(?10, i * 20 + 1, 20) AS INTEGER)) END, \
                CAST(substr(?11, i * 20 + 1, 20) AS INTEGER), \
                CAST(substr(?12, i * 20 + 1, 20) AS INTEGER) \
         FROM r WHERE true \
         ON CONFLICT (namespace, hash) DO UPDATE SET refs = ms_smt_nodes.refs + excluded.refs"
    );
    let upserts = (0..changes.len()).filter(|&i| !deleted.contains(changes.hash[i]));
    for chunk in PackedRows::chunks(changes, upserts) {
        counters.round_trip(1);
        sqlx::query(&upsert_sql)
            .bind(ns)
            .bind(count(chunk.len))
            .bind(chunk.hash)
            .bind(chunk.kind)
            .bind(chunk.l_hash)
            .bind(chunk.r_hash)
            .bind(chunk.leaf_key)
            .bind(chunk.value)
            .bind(chunk.value_at)
            .bind(chunk.value_len)
            .bind(chunk.sum)
            .bind(chunk.delta)
            .execute(&mut *conn)
            .await?;
    }

    let check_sql = format!(
        "WITH RECURSIVE {INDEX_CTE} \
         SELECT n.hash FROM idx JOIN ms_smt_nodes n \
           ON n.namespace = ?1 AND n.hash = substr(?3, idx.i * 32 + 1, 32) \
         WHERE n.refs <= 0 LIMIT 1"
    );
    let survivors = dropping
        .iter()
        .copied()
        .filter(|&i| !deleted.contains(changes.hash[i]));
    for chunk in PackedRows::chunks(changes, survivors) {
        counters.round_trip(1);
        let bad: Option<(Vec<u8>,)> = sqlx::query_as(&check_sql)
            .bind(ns)
            .bind(count(chunk.len))
            .bind(chunk.hash)
            .fetch_optional(&mut *conn)
            .await?;
        if let Some((hash,)) = bad {
            return Err(missing_reference(ns, &hash));
        }
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
        self.counters.snapshot_with(&self.recent)
    }

    fn recent_nodes(&self) -> Option<&RecentNodes> {
        Some(&self.recent)
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
        self.counters.snapshot_with(&self.recent)
    }

    fn recent_nodes(&self) -> Option<&RecentNodes> {
        Some(&self.recent)
    }
}
