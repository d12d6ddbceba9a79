//! SQLite store on sqlx: one file, many namespaces, position-keyed strata
//! rows ([`super::strata`]).
//!
//! * Tables: `ms_smt_namespaces` (an integer id per namespace name, its
//!   stratum height and current root) and `ms_smt_strata` (one row per
//!   stratum, unique position `(ns, path, depth)`, so a subtree's rows are
//!   one key range; bodies live in a rowid table, which keeps rows of up
//!   to ~4 KB inline, and the position index holds only keys).
//! * Reads: one statement for a whole batch. Every row on a key's path is
//!   computable from the key, so a bounded recursive query (at most
//!   `256 / height` primary-key steps per key) walks each path from where
//!   the handle's remembered nodes ([`RecentNodes`]) end, and returns each
//!   row once with the sibling rows at its boundaries.
//! * Writes: one `BEGIN IMMEDIATE` transaction per commit: check the root,
//!   read the rows the batch touches, merge the batch into them in
//!   process, write every changed row with one packed upsert, delete the
//!   rows left empty with one packed delete, move the root. Rows are
//!   written in key order, so bulk builds fill pages. `BEGIN IMMEDIATE`
//!   takes the write lock up front, so concurrent writers wait (busy
//!   timeout) instead of failing with "database is locked".
//! * Inside a caller's transaction ([`SqliteStore::in_transaction`]) the
//!   same writes run under a savepoint, and commit or roll back with the
//!   caller's own rows.
//! * The schema is versioned ([`SqliteStore::migrate`]): a database written
//!   by an earlier schema of this release line is upgraded when opened.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection, SqlitePool};
use tokio::sync::Mutex;

use super::locked::write_planned;
use super::packed::{INDEX_CTE, PackedRows, count};
use super::row_reads::{self, RowQueries};
use super::sql::{
    NsInfo, PAST_EVERY_DEPTH, PathParams, Space, SqlStoreError, TxConnection, detached,
    detached_store, merge, path_nodes, sum_to_sql, walk_rows, write_detached,
};
use super::sql_handle::handle_reads;
use super::sql_ops;
use super::{
    BulkStore, CommitOutcome, Counters, PathStart, PinStore, ReadAt, RecentNodes, StoreStats,
    TreeStore,
};
use crate::audit::report::AuditReport;
use crate::audit::rows::{RowAudit, RowSink};
use crate::descent::UpdateBatch;
use crate::error::TreeError;
use crate::failpoint::fail_point;
use crate::hash::Hash;
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};
use crate::pin::Pin;
use crate::position::Position;
use crate::strata::{self, RowChange, RowKey, StratumHeight};

/// Schema migrations, tracked in `ms_smt_migrations` (not sqlx's
/// `_sqlx_migrations`, which belongs to the host application). Version 5
/// is the first released schema; the earlier versions are kept as the
/// forward path of databases created before it.
const MIGRATIONS: &[(i64, &str, &str)] = &[(
    2,
    "namespaces and position-keyed strata",
    "CREATE TABLE ms_smt_namespaces (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            height INTEGER NOT NULL,
            root_hash BLOB,
            root_sum INTEGER
        );
        CREATE TABLE ms_smt_strata (
            ns INTEGER NOT NULL,
            path BLOB NOT NULL,
            depth INTEGER NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (ns, path, depth)
        ) WITHOUT ROWID;",
)];

/// Migration 4: strata rows in a rowid table with a unique position index.
///
/// Version 2 made `ms_smt_strata` a `WITHOUT ROWID` table. Such a table is
/// a B-tree of whole records: its interior pages hold entire rows as
/// dividers and a row over ~1,000 bytes (a quarter page) spills into an
/// overflow page. Strata rows are 300-2,000 bytes, so at 10^6 leaves the
/// table had interior pages with 7 cells each (8,860 of them) and 17,000
/// overflow pages holding 670 bytes each, and every commit dirtied them.
/// A rowid table keeps bodies in its leaf pages (up to ~4,000 bytes
/// inline) with 8-byte dividers, and the position index holds only keys.
/// Rows are copied in key order, so a subtree's rows stay together.
const REKEY_STRATA: (i64, &str, &str) = (
    4,
    "strata rows in a rowid table with a unique position index",
    "ALTER TABLE ms_smt_strata RENAME TO ms_smt_strata_v2;
    CREATE TABLE ms_smt_strata (
        id INTEGER PRIMARY KEY,
        ns INTEGER NOT NULL,
        path BLOB NOT NULL,
        depth INTEGER NOT NULL,
        body BLOB NOT NULL
    );
    INSERT INTO ms_smt_strata (ns, path, depth, body)
        SELECT ns, path, depth, body FROM ms_smt_strata_v2 ORDER BY ns, path, depth;
    DROP TABLE ms_smt_strata_v2;
    CREATE UNIQUE INDEX ms_smt_strata_position ON ms_smt_strata (ns, path, depth);",
);

/// Migration 5: versions, pins, and the rows pins keep.
///
/// Every commit bumps its namespace's `version` and stamps the rows it
/// writes with it. A pin records a version and its root; while any pin
/// exists, a commit copies each row it replaces or deletes that was
/// written at or before the newest pin into `ms_smt_history`, tagged with
/// the versions it was current for (`from_version` .. `to_version`). Existing rows and
/// namespaces start at version 0.
const VERSIONS_AND_PINS: (i64, &str, &str) = (
    5,
    "versions, pins and the rows pins keep",
    "ALTER TABLE ms_smt_namespaces ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE ms_smt_strata ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE ms_smt_pins (
        ns INTEGER NOT NULL,
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        root_hash BLOB,
        root_sum INTEGER,
        PRIMARY KEY (ns, name)
    );
    CREATE INDEX ms_smt_pins_version ON ms_smt_pins (ns, version);
    CREATE TABLE ms_smt_history (
        id INTEGER PRIMARY KEY,
        ns INTEGER NOT NULL,
        path BLOB NOT NULL,
        depth INTEGER NOT NULL,
        from_version INTEGER NOT NULL,
        to_version INTEGER NOT NULL,
        body BLOB NOT NULL
    );
    CREATE UNIQUE INDEX ms_smt_history_position ON ms_smt_history (ns, path, depth, from_version);",
);

/// The newest schema version this crate writes.
const SCHEMA_VERSION: i64 = VERSIONS_AND_PINS.0;

/// A tree store in an SQLite database, bound to one namespace.
///
/// Cloning is cheap and shares the pool, the handle's counters and its
/// [`RecentNodes`]. Sums are stored as the i64 with the same bits as the
/// u64 (the root) or as little-endian bytes inside row bodies; they are
/// never compared in SQL.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    space: Arc<Space>,
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
    /// queue instead of failing while another holds the lock, a 16 MiB
    /// page cache per connection (SQLite's default is 2 MB), and 2 KiB
    /// pages for a database this creates (an existing file keeps its page
    /// size).
    ///
    /// Why 2 KiB pages: a batch of random keys changes rows scattered over
    /// the whole table, about one page per changed row, and every changed
    /// page is written whole to the WAL. At 10^5 leaves a 1,000-key commit
    /// wrote 9.1 MB of WAL with 4 KiB pages and 5.8 MB with 2 KiB pages
    /// (rows of up to ~2,000 bytes still fit in a page; BENCHMARKS.md).
    pub fn connect_options(path: impl AsRef<Path>) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(60))
            .pragma("cache_size", "-16384")
            .page_size(2048)
    }

    /// A store on a pool the host application already has. Call
    /// [`migrate`](Self::migrate) once before use.
    pub fn from_pool(pool: SqlitePool, namespace: &str) -> Self {
        SqliteStore {
            pool,
            space: Space::new(
                namespace,
                StratumHeight::default(),
                super::DEFAULT_RECENT_NODES,
            ),
        }
    }

    /// The same database, another namespace (an independent tree), with
    /// this handle's settings.
    pub fn namespace(&self, name: &str) -> Self {
        SqliteStore {
            pool: self.pool.clone(),
            space: Space::new(name, self.space.height, self.space.recent.capacity()),
        }
    }

    /// This handle with its own memory of up to `capacity` recent nodes
    /// (default [`DEFAULT_RECENT_NODES`](super::DEFAULT_RECENT_NODES); 0
    /// reads every node from the database). Handles made from it with
    /// [`namespace`](Self::namespace) get the same capacity. See
    /// [`RecentNodes`] for why remembered nodes are always right.
    pub fn with_recent_nodes(self, capacity: usize) -> Self {
        SqliteStore {
            space: Space::new(&self.space.name, self.space.height, capacity),
            pool: self.pool,
        }
    }

    /// This handle creating its namespace, if new, with `height` levels per
    /// row (default [`DEFAULT_STRATUM_HEIGHT`](super::DEFAULT_STRATUM_HEIGHT)).
    /// A namespace that exists keeps the height it was created with.
    pub fn with_stratum_height(self, height: StratumHeight) -> Self {
        SqliteStore {
            space: Space::new(&self.space.name, height, self.space.recent.capacity()),
            pool: self.pool,
        }
    }

    /// The nodes this handle remembers.
    pub fn recent(&self) -> &RecentNodes {
        &self.space.recent
    }

    /// This store's namespace.
    pub fn namespace_name(&self) -> &str {
        &self.space.name
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Creates or upgrades the store's tables (`ms_smt_*`). Idempotent and
    /// safe to run from several processes at once; tracked in its own
    /// `ms_smt_migrations` table, so it coexists with the host's sqlx
    /// migrations.
    /// Each version's DDL runs once, in its own transaction with its
    /// ledger entry; a database at a newer version than this crate knows
    /// is refused ([`SqlStoreError::SchemaTooNew`]).
    pub async fn migrate(&self) -> Res<()> {
        let mut conn = self.pool.acquire().await?;
        let applied = {
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
            let applied = applied_migrations(&mut tx).await?;
            if let Some(&found) = applied.iter().max().filter(|v| **v > SCHEMA_VERSION) {
                return Err(SqlStoreError::SchemaTooNew {
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
            for (version, description, sql) in MIGRATIONS.iter().filter(|m| !applied.contains(&m.0))
            {
                sqlx::raw_sql(sql).execute(&mut *tx).await?;
                record_migration(&mut tx, *version, description).await?;
            }
            tx.commit().await?;
            applied
        };
        // The table moves of 4 and 5 run before the old trees move (3): a
        // namespace that cannot be moved then leaves a schema this code
        // reads, and the namespaces moved before it stay readable.
        for (version, description, sql) in [REKEY_STRATA, VERSIONS_AND_PINS] {
            if !applied.contains(&version) {
                let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
                if !applied_migrations(&mut tx).await?.contains(&version) {
                    sqlx::raw_sql(sql).execute(&mut *tx).await?;
                    record_migration(&mut tx, version, description).await?;
                }
                tx.commit().await?;
            }
        }
        Ok(())
    }

    /// True when `other` shares this handle's pool (so one statement can
    /// see both namespaces).
    fn same_pool(&self, other: &SqliteStore) -> bool {
        Arc::ptr_eq(&self.pool.connect_options(), &other.pool.connect_options())
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
            space: self.space.clone(),
        }
    }
}

/// The versions recorded in the migration ledger.
async fn applied_migrations(conn: &mut SqliteConnection) -> Res<Vec<i64>> {
    Ok(
        sqlx::query_scalar("SELECT version FROM ms_smt_migrations ORDER BY version")
            .fetch_all(&mut *conn)
            .await?,
    )
}

async fn record_migration(conn: &mut SqliteConnection, version: i64, what: &str) -> Res<()> {
    sqlx::query("INSERT INTO ms_smt_migrations (version, description) VALUES (?, ?)")
        .bind(version)
        .bind(what)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A [`SqliteStore`] namespace bound to a caller's open transaction; see
/// [`SqliteStore::in_transaction`].
#[derive(Debug)]
pub struct SqliteTxStore<'c> {
    conn: Mutex<&'c mut SqliteConnection>,
    space: Arc<Space>,
}

sql_ops::namespace_ops!(SqliteConnection);

/// Nothing to take: an SQLite write transaction (`BEGIN IMMEDIATE`, or a
/// write in the caller's transaction) holds the database's write lock.
async fn lock_namespace(_: &mut SqliteConnection, _: &Space) -> Res<()> {
    Ok(())
}

/// Inserts the namespace row, with this handle's stratum height, if missing.
async fn create_namespace(conn: &mut SqliteConnection, space: &Space) -> Res<()> {
    space.counters.round_trip(1);
    sqlx::query(
        "INSERT INTO ms_smt_namespaces (name, height) VALUES (?, ?) \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(&*space.name)
    .bind(i64::from(space.height.get() as u8))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Reads the rows on the paths of `starts` (each from the row holding its
/// start level down to where its key's path ends) and, with `siblings`,
/// the sibling rows at each row boundary, in one statement; returns their
/// nodes, rows nearest the root first. The walk carries each row's body,
/// so a path row is probed once; sibling rows are probed afterwards.
///
/// For start `i` ([`PathParams`]: shared rows are walked once), `?4` holds
/// the depth of its first row (3 digits) and `1` when that row's sibling
/// is wanted too, `?5` the path of the row at depth `j * height` in 32
/// bytes at `i * W + j * 32` (W = `?8`), and `?6` the path of that row's
/// sibling; the query cuts the `(depth + 7) / 8` real bytes out.
async fn fetch_key_paths(
    conn: &mut SqliteConnection,
    space: &Space,
    starts: &[PathStart],
    siblings: bool,
) -> Res<Vec<(Hash, Node)>> {
    let Some(info) = namespace(conn, space).await? else {
        return Ok(Vec::new());
    };
    let h = info.height.get();
    let per_key = PathParams::width(info.height);
    let sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         starts(i, depth, sib) AS ( \
             SELECT i, CAST(substr(?4, i * 4 + 1, 3) AS INTEGER), CAST(substr(?4, i * 4 + 4, 1) AS INTEGER) = 1 \
             FROM idx), \
         walk(i, depth, path, body) AS ( \
             SELECT s.i, s.depth, n.path, n.body FROM starts s CROSS JOIN ms_smt_strata n \
               ON n.ns = ?1 AND n.path = substr(?5, s.i * ?8 + (s.depth / ?3) * 32 + 1, \
                                                 (s.depth + 7) / 8) \
              AND n.depth = s.depth \
           UNION ALL \
             SELECT w.i, w.depth + ?3, n.path, n.body FROM walk w CROSS JOIN ms_smt_strata n \
               ON n.ns = ?1 AND n.path = substr(?5, w.i * ?8 + ((w.depth + ?3) / ?3) * 32 + 1, \
                                                 (w.depth + ?3 + 7) / 8) \
              AND n.depth = w.depth + ?3 \
             WHERE w.depth + ?3 <= 256), \
         sibs(path, depth) AS ( \
             SELECT substr(?6, i * ?8 + ((depth + ?3) / ?3) * 32 + 1, (depth + ?3 + 7) / 8), \
                    depth + ?3 \
             FROM walk WHERE ?7 AND depth + ?3 <= 256 \
           UNION \
             SELECT substr(?6, i * ?8 + (depth / ?3) * 32 + 1, (depth + 7) / 8), depth \
             FROM starts WHERE ?7 AND sib) \
         SELECT path, depth, body, (SELECT root_hash FROM ms_smt_namespaces WHERE id = ?1) \
         FROM walk \
         UNION ALL \
         SELECT n.path, n.depth, n.body, (SELECT root_hash FROM ms_smt_namespaces WHERE id = ?1) \
         FROM sibs w CROSS JOIN ms_smt_strata n \
           ON n.ns = ?1 AND n.path = w.path AND n.depth = w.depth \
         ORDER BY 2"
    );
    let mut out = Vec::new();
    for chunk in starts.chunks(super::packed::MAX_ROWS / 4) {
        let params = PathParams::new(info.height, chunk);
        if params.depths.is_empty() {
            continue;
        }
        let depths: Vec<u8> = params
            .depths
            .iter()
            .zip(&params.first_sibling)
            .flat_map(|(d, sib)| format!("{d:03}{}", u8::from(*sib)).into_bytes())
            .collect();
        let (paths, sibs) = params.slot_blobs(info.height);
        space.counters.round_trip(1);
        let rows = sqlx::query(&sql)
            .bind(info.id)
            .bind(count(params.depths.len()))
            .bind(count(h))
            .bind(depths)
            .bind(paths)
            .bind(sibs)
            .bind(siblings)
            .bind(count(per_key))
            .fetch_all(&mut *conn)
            .await?;
        let (root, rows) = walk_rows(&rows)?;
        out.extend(path_nodes(space, info.height, root, rows)?);
    }
    Ok(out)
}

/// Check-and-apply inside an open transaction or savepoint. Returns
/// `RootMoved` without writing when the root is not `batch.old_root`.
async fn commit_on(
    conn: &mut SqliteConnection,
    space: &Space,
    batch: &UpdateBatch,
) -> Res<CommitOutcome> {
    let state = state_for_write(conn, space).await?;
    if state.root != batch.old_root {
        space.counters.conflict();
        return Ok(CommitOutcome::RootMoved {
            current: state.root,
        });
    }
    let info = state.info;
    let version = state.version.saturating_add(1);
    fail_point!(space, "root_checked");
    let keys = strata::touched_rows(batch, info.height);
    let (known, unknown) = space.memo_take(&batch.old_root, &keys);
    let stored = read_rows(conn, info, &unknown, &space.counters).await?;
    let changes = merge(space, info.height, batch, keys, known, stored)?;
    fail_point!(space, "merged");
    if let Some(max_pin) = state.max_pin {
        keep_for_pins(conn, info.id, &changes, max_pin, version, &space.counters).await?;
    }
    write_rows(conn, info.id, &changes, Some(version), &space.counters).await?;
    fail_point!(space, "written");
    space.counters.round_trip(1);
    let root = (batch.new_root != ComputedNode::empty_root()).then(|| {
        (
            batch.new_root.hash.0.to_vec(),
            sum_to_sql(batch.new_root.sum),
        )
    });
    let (hash, sum) = root.unzip();
    sqlx::query(
        "UPDATE ms_smt_namespaces SET root_hash = ?, root_sum = ?, version = ? WHERE id = ?",
    )
    .bind(hash)
    .bind(sum)
    .bind(version)
    .bind(info.id)
    .execute(&mut *conn)
    .await?;
    space.counters.written(changes.len() as u64);
    Ok(CommitOutcome::Committed)
}

/// Copies the rows a commit at `version` is about to replace or delete
/// into `ms_smt_history` when a pin may still read them: those written at
/// or before the newest pin (`max_pin`). One packed statement.
async fn keep_for_pins(
    conn: &mut SqliteConnection,
    ns: i64,
    changes: &[RowChange],
    max_pin: i64,
    version: i64,
    counters: &Counters,
) -> Res<()> {
    let sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         k(i, depth) AS (SELECT i, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) FROM idx) \
         INSERT INTO ms_smt_history (ns, path, depth, from_version, to_version, body) \
         SELECT n.ns, n.path, n.depth, n.version, ?5, n.body FROM k CROSS JOIN ms_smt_strata n \
           ON n.ns = ?1 AND n.path = substr(?3, k.i * 32 + 1, (k.depth + 7) / 8) \
          AND n.depth = k.depth \
         WHERE n.version <= ?6"
    );
    let keys = changes.iter().map(|c| match c {
        RowChange::Put(key, _) | RowChange::Delete(key) => (key, &[][..]),
    });
    for chunk in PackedRows::chunks(keys) {
        counters.round_trip(1);
        sqlx::query(&sql)
            .bind(ns)
            .bind(count(chunk.len))
            .bind(chunk.path)
            .bind(chunk.depth)
            .bind(version)
            .bind(max_pin)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The stored bodies of the rows at `keys`.
async fn read_rows(
    conn: &mut SqliteConnection,
    info: NsInfo,
    keys: &[RowKey],
    counters: &Counters,
) -> Res<Vec<(RowKey, Vec<u8>)>> {
    let sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         k(i, depth) AS (SELECT i, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) FROM idx) \
         SELECT n.path, n.depth, n.body FROM k CROSS JOIN ms_smt_strata n \
           ON n.ns = ?1 AND n.path = substr(?3, k.i * 32 + 1, (k.depth + 7) / 8) \
          AND n.depth = k.depth"
    );
    let mut out = Vec::with_capacity(keys.len());
    for chunk in PackedRows::chunks(keys.iter().map(|k| (k, &[][..]))) {
        counters.round_trip(1);
        let rows: Vec<(Vec<u8>, i64, Vec<u8>)> = sqlx::query_as(&sql)
            .bind(info.id)
            .bind(count(chunk.len))
            .bind(chunk.path)
            .bind(chunk.depth)
            .fetch_all(&mut *conn)
            .await?;
        out.extend(rows.into_iter().map(|(path, depth, body)| {
            let depth = usize::try_from(depth).unwrap_or(usize::MAX);
            (RowKey { path, depth }, body)
        }));
    }
    Ok(out)
}

/// Writes a merge's row changes: one packed upsert of the rows that
/// changed, one packed delete of the rows left empty (one of each unless
/// the batch exceeds a chunk). Rows go in key order.
/// `version` stamps the rows written (`None`: the schema before
/// migration 5, for migration 3).
async fn write_rows(
    conn: &mut SqliteConnection,
    ns: i64,
    changes: &[RowChange],
    version: Option<i64>,
    counters: &Counters,
) -> Res<()> {
    let put_sql = match version {
        Some(_) => format!(
            "WITH RECURSIVE {INDEX_CTE}, \
             r(i, depth) AS (SELECT i, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) FROM idx) \
             INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
             SELECT ?1, substr(?3, i * 32 + 1, (depth + 7) / 8), depth, \
                    substr(?5, CAST(substr(?6, i * 20 + 1, 20) AS INTEGER) + 1, \
                           CAST(substr(?7, i * 20 + 1, 20) AS INTEGER)), ?8 \
             FROM r WHERE true \
             ON CONFLICT (ns, path, depth) DO UPDATE \
             SET body = excluded.body, version = excluded.version"
        ),
        None => format!(
            "WITH RECURSIVE {INDEX_CTE}, \
             r(i, depth) AS (SELECT i, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) FROM idx) \
             INSERT INTO ms_smt_strata (ns, path, depth, body) \
             SELECT ?1, substr(?3, i * 32 + 1, (depth + 7) / 8), depth, \
                    substr(?5, CAST(substr(?6, i * 20 + 1, 20) AS INTEGER) + 1, \
                           CAST(substr(?7, i * 20 + 1, 20) AS INTEGER)) \
             FROM r WHERE true \
             ON CONFLICT (ns, path, depth) DO UPDATE SET body = excluded.body"
        ),
    };
    let puts = changes.iter().filter_map(|c| match c {
        RowChange::Put(key, body) => Some((key, body.as_slice())),
        RowChange::Delete(_) => None,
    });
    for chunk in PackedRows::chunks(puts) {
        counters.round_trip(1);
        sqlx::query(&put_sql)
            .bind(ns)
            .bind(count(chunk.len))
            .bind(chunk.path)
            .bind(chunk.depth)
            .bind(chunk.body)
            .bind(chunk.body_at)
            .bind(chunk.body_len)
            .bind(version)
            .execute(&mut *conn)
            .await?;
    }
    let delete_sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         k(i, depth) AS (SELECT i, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) FROM idx) \
         DELETE FROM ms_smt_strata WHERE ns = ?1 AND (path, depth) IN \
             (SELECT substr(?3, i * 32 + 1, (depth + 7) / 8), depth FROM k)"
    );
    let deletes = changes.iter().filter_map(|c| match c {
        RowChange::Delete(key) => Some((key, &[][..])),
        RowChange::Put(..) => None,
    });
    for chunk in PackedRows::chunks(deletes) {
        counters.round_trip(1);
        sqlx::query(&delete_sql)
            .bind(ns)
            .bind(count(chunk.len))
            .bind(chunk.path)
            .bind(chunk.depth)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Removes the namespace's rows (one key range) and its root; rows a pin
/// may still read are kept first.
async fn delete_all_on(conn: &mut SqliteConnection, space: &Space) -> Res<()> {
    let Some(state) = load_state(conn, space).await? else {
        return Ok(());
    };
    let id = state.info.id;
    let version = state.version.saturating_add(1);
    space.memo_clear();
    if let Some(max_pin) = state.max_pin {
        space.counters.round_trip(1);
        sqlx::query(
            "INSERT INTO ms_smt_history (ns, path, depth, from_version, to_version, body) \
             SELECT ns, path, depth, version, ?2, body FROM ms_smt_strata \
             WHERE ns = ?1 AND version <= ?3",
        )
        .bind(id)
        .bind(version)
        .bind(max_pin)
        .execute(&mut *conn)
        .await?;
    }
    space.counters.round_trip(2);
    sqlx::query("DELETE FROM ms_smt_strata WHERE ns = ?")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE ms_smt_namespaces SET root_hash = NULL, root_sum = NULL, version = ? \
         WHERE id = ?",
    )
    .bind(version)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The bodies of the rows at `keys` as they were at `version`: the live
/// row if written at or before it, else the kept copy current then.
async fn read_rows_at(
    conn: &mut SqliteConnection,
    info: NsInfo,
    version: i64,
    keys: &[RowKey],
    counters: &Counters,
) -> Res<Vec<(RowKey, Vec<u8>)>> {
    let sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         k(i, depth) AS (SELECT i, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) FROM idx), \
         kp(path, depth) AS (SELECT substr(?3, i * 32 + 1, (depth + 7) / 8), depth FROM k) \
         SELECT path, depth, body FROM ( \
             SELECT kp.path AS path, kp.depth AS depth, COALESCE( \
                 (SELECT n.body FROM ms_smt_strata n WHERE n.ns = ?1 AND n.path = kp.path \
                    AND n.depth = kp.depth AND n.version <= ?5), \
                 (SELECT h.body FROM ms_smt_history h WHERE h.ns = ?1 AND h.path = kp.path \
                    AND h.depth = kp.depth AND h.from_version <= ?5 AND h.to_version > ?5)) AS body \
             FROM kp) \
         WHERE body IS NOT NULL"
    );
    let mut out = Vec::with_capacity(keys.len());
    for chunk in PackedRows::chunks(keys.iter().map(|k| (k, &[][..]))) {
        counters.round_trip(1);
        let rows: Vec<(Vec<u8>, i64, Vec<u8>)> = sqlx::query_as(&sql)
            .bind(info.id)
            .bind(count(chunk.len))
            .bind(chunk.path)
            .bind(chunk.depth)
            .bind(version)
            .fetch_all(&mut *conn)
            .await?;
        out.extend(rows.into_iter().map(|(path, depth, body)| {
            let depth = usize::try_from(depth).unwrap_or(usize::MAX);
            (RowKey { path, depth }, body)
        }));
    }
    Ok(out)
}

impl RowQueries for SqliteConnection {
    async fn ns_info(&mut self, space: &Space) -> Res<Option<NsInfo>> {
        namespace(self, space).await
    }

    async fn rows_at(
        &mut self,
        space: &Space,
        info: NsInfo,
        at: ReadAt,
        keys: &[RowKey],
    ) -> Res<Vec<(RowKey, Vec<u8>)>> {
        match at {
            ReadAt::Current => read_rows(self, info, keys, &space.counters).await,
            ReadAt::Version(v) => {
                read_rows_at(self, info, version_to_sql(v), keys, &space.counters).await
            }
        }
    }

    async fn rows_after(
        &mut self,
        space: &Space,
        info: NsInfo,
        at: ReadAt,
        after: &[u8],
        before: &[u8],
        limit: usize,
    ) -> Res<Vec<(RowKey, Vec<u8>)>> {
        rows_after_on(
            self,
            space,
            info,
            at,
            (after, PAST_EVERY_DEPTH),
            before,
            limit,
        )
        .await
    }
}
/// Key paths at `at`: the one-statement recursive walk for the current
/// tree, row depth by row depth at a pinned version.
async fn paths_on(
    conn: &mut SqliteConnection,
    space: &Space,
    at: ReadAt,
    starts: &[PathStart],
    siblings: bool,
) -> Res<Vec<(Hash, Node)>> {
    match at {
        ReadAt::Current => fetch_key_paths(conn, space, starts, siblings).await,
        ReadAt::Version(_) => row_reads::paths_at(conn, space, at, starts, siblings).await,
    }
}

impl PinStore for SqliteStore {
    handle_reads!(pins, pool, SqliteConnection);

    async fn pin(&self, name: &str) -> Res<Pin> {
        let name = name.to_owned();
        write_detached!(
            self.pool,
            self.space,
            begin_with("BEGIN IMMEDIATE"),
            |tx, space| pin_on(&mut tx, space, &name)
        )
    }

    async fn unpin(&self, name: &str) -> Res<bool> {
        let name = name.to_owned();
        write_detached!(
            self.pool,
            self.space,
            begin_with("BEGIN IMMEDIATE"),
            |tx, space| unpin_on(&mut tx, space, &name)
        )
    }
}

impl PinStore for SqliteTxStore<'_> {
    handle_reads!(pins, caller, SqliteConnection);

    async fn pin(&self, name: &str) -> Res<Pin> {
        let mut conn = self.conn.lock().await;
        let mut savepoint = conn.begin().await?;
        let pin = pin_on(&mut savepoint, &self.space, name).await?;
        savepoint.commit().await?;
        Ok(pin)
    }

    async fn unpin(&self, name: &str) -> Res<bool> {
        let mut conn = self.conn.lock().await;
        let mut savepoint = conn.begin().await?;
        let removed = unpin_on(&mut savepoint, &self.space, name).await?;
        savepoint.commit().await?;
        Ok(removed)
    }
}

impl BulkStore for SqliteStore {
    fn name(&self) -> &str {
        &self.space.name
    }

    fn open_namespace(&self, name: &str) -> Res<Self> {
        Ok(self.namespace(name))
    }

    /// One `INSERT ... SELECT` when both handles share a pool.
    async fn copy_into(&self, at: ReadAt, target: &Self) -> Res<Option<ComputedNode>> {
        if !self.same_pool(target) {
            return Ok(None);
        }
        let src = self.space.clone();
        write_detached!(
            self.pool,
            target.space,
            begin_with("BEGIN IMMEDIATE"),
            |tx, target| copy_on(&mut tx, &src, at, target)
        )
    }

    /// A rename of `staging`'s namespace row: constant time.
    async fn take_tree_of(&self, staging: &Self, expected: &ComputedNode) -> Res<bool> {
        if !self.same_pool(staging) || self.space.name == staging.space.name {
            return Ok(false);
        }
        let (from, expected) = (staging.space.clone(), *expected);
        write_detached!(
            self.pool,
            self.space,
            begin_with("BEGIN IMMEDIATE"),
            |tx, target| take_tree_on(&mut tx, target, &from, &expected)
        )
    }
}

impl TreeStore for SqliteStore {
    handle_reads!(tree, pool, SqliteConnection);

    async fn read_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Vec<(Hash, Node)>> {
        let mut conn = self.pool.acquire().await?;
        paths_on(&mut conn, &self.space, at, starts, siblings).await
    }

    async fn commit(&self, batch: &UpdateBatch) -> Res<CommitOutcome> {
        let (pool, space, batch) = (self.pool.clone(), self.space.clone(), batch.clone());
        detached_store(move |caller_gone| async move {
            space.counters.round_trip(1);
            let mut conn = TxConnection::acquire(&pool).await?;
            let mut tx = conn.conn().begin_with("BEGIN IMMEDIATE").await?;
            fail_point!(space, "begin");
            let outcome = commit_on(&mut tx, &space, &batch).await?;
            space.counters.round_trip(1);
            match outcome {
                CommitOutcome::Committed if !caller_gone.get() => {
                    fail_point!(space, "before_commit");
                    tx.commit().await?;
                    fail_point!(space, "after_commit");
                }
                _ => tx.rollback().await?,
            }
            conn.release();
            Ok(outcome)
        })
        .await
    }

    // TreeError is what the tree's own writes return; boxing it here only.
    #[allow(clippy::result_large_err)]
    async fn write_locked(
        &self,
        kind: LayoutKind,
        batch: &[(Key, Leaf)],
    ) -> Result<Option<ComputedNode>, TreeError<SqlStoreError>> {
        let (pool, space, batch) = (self.pool.clone(), self.space.clone(), batch.to_vec());
        let store = |e: sqlx::Error| TreeError::Store(SqlStoreError::from(e));
        detached(
            move |caller_gone| async move {
                let mut conn = TxConnection::acquire(&pool).await.map_err(store)?;
                let mut tx = conn
                    .conn()
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(store)?;
                let root = {
                    let locked = SqliteTxStore {
                        conn: Mutex::new(&mut *tx),
                        space,
                    };
                    write_planned(&locked, kind, &batch).await?
                };
                if caller_gone.get() {
                    tx.rollback().await.map_err(store)?;
                } else {
                    tx.commit().await.map_err(store)?;
                }
                conn.release();
                Ok(Some(root))
            },
            || Err(TreeError::Store(SqlStoreError::RuntimeShutdown)),
        )
        .await
    }

    async fn delete_all(&self) -> Res<()> {
        write_detached!(
            self.pool,
            self.space,
            begin_with("BEGIN IMMEDIATE"),
            |tx, space| delete_all_on(&mut tx, space)
        )
    }

    async fn audit(&self, kind: LayoutKind) -> Res<Option<AuditReport>> {
        let mut audit = RowAudit::new(kind);
        let sink: &mut dyn RowSink = &mut audit;
        // A read transaction: every page sees the same snapshot.
        let mut conn = TxConnection::acquire(&self.pool).await?;
        let mut tx = conn.conn().begin().await?;
        scan_rows_on(&mut tx, &self.space, sink).await?;
        tx.commit().await?;
        conn.release();
        Ok(Some(audit.finish()))
    }
}

impl TreeStore for SqliteTxStore<'_> {
    handle_reads!(tree, caller, SqliteConnection);

    async fn read_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Vec<(Hash, Node)>> {
        let mut conn = self.conn.lock().await;
        paths_on(&mut conn, &self.space, at, starts, siblings).await
    }

    async fn commit(&self, batch: &UpdateBatch) -> Res<CommitOutcome> {
        let mut conn = self.conn.lock().await;
        self.space.counters.round_trip(1);
        let mut savepoint = conn.begin().await?;
        let outcome = commit_on(&mut savepoint, &self.space, batch).await?;
        self.space.counters.round_trip(1);
        match outcome {
            CommitOutcome::Committed => savepoint.commit().await?,
            CommitOutcome::RootMoved { .. } => savepoint.rollback().await?,
        }
        Ok(outcome)
    }

    async fn delete_all(&self) -> Res<()> {
        let mut conn = self.conn.lock().await;
        let mut savepoint = conn.begin().await?;
        delete_all_on(&mut savepoint, &self.space).await?;
        savepoint.commit().await?;
        Ok(())
    }

    async fn audit(&self, kind: LayoutKind) -> Res<Option<AuditReport>> {
        let mut audit = RowAudit::new(kind);
        let sink: &mut dyn RowSink = &mut audit;
        let mut conn = self.conn.lock().await;
        scan_rows_on(&mut conn, &self.space, sink).await?;
        Ok(Some(audit.finish()))
    }
}
