//! SQLite store on sqlx: one file, many namespaces, position-keyed strata
//! rows ([`crate::strata`]).
//!
//! * Tables: `ms_smt_namespaces` (an integer id per namespace name, its
//!   stratum height and current root) and `ms_smt_strata` (one row per
//!   stratum, unique position `(ns, path, depth)`, so a subtree's rows are
//!   one key range; bodies live in a rowid table, which keeps rows of up
//!   to ~4 KB inline, and the position index holds only keys).
//! * Reads: one statement for a whole batch. Every row on a key's path is
//!   computable from the key, so a bounded recursive query (at most
//!   `256 / height` primary-key steps per key) walks each path from where
//!   the handle's remembered nodes ([`RecentNodes`](crate::store::RecentNodes)) end, and returns each
//!   row once with the sibling rows at its boundaries.
//! * Writes: one `BEGIN IMMEDIATE` transaction per commit: check the root,
//!   read the rows the batch touches, merge the batch into them in
//!   process, write every changed row with one packed upsert, delete the
//!   rows left empty with one packed delete, move the root. Rows are
//!   written in key order, so bulk builds fill pages. `BEGIN IMMEDIATE`
//!   takes the write lock up front, so concurrent writers wait (busy
//!   timeout) instead of failing with "database is locked".
//! * Inside a caller's transaction ([`SqliteStore::in_transaction`](super::SqlStore::in_transaction)) the
//!   same writes run under a savepoint, and commit or roll back with the
//!   caller's own rows.
//! * The schema is versioned ([`SqliteStore::migrate`](super::SqlStore::migrate)): a database written
//!   by an earlier schema of this release line is upgraded when opened.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Executor, SqlSafeStr, SqlStr, SqliteConnection};

use super::dialect::{Arg, Dialect, Migration, Shared, arguments};
use super::error::Res;
use super::handle::{SqlStore, SqlTxStore};
use super::packed::{INDEX_CTE, MAX_ROWS, PackedRows, count};
use super::space::{
    NamespaceState, NsInfo, NsState, PathParams, keyed_rows, path_nodes, sum_to_sql, walk_rows,
};
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::PathStart;
use crate::strata::{RowChange, RowKey};

/// A tree store in an SQLite database, bound to one namespace.
pub type SqliteStore = SqlStore<SqliteConnection>;

/// A [`SqliteStore`] namespace bound to a caller's open transaction; see
/// [`in_transaction`](SqliteStore::in_transaction).
pub type SqliteTxStore<'c> = SqlTxStore<'c, SqliteConnection>;

/// Version 4: strata rows in a rowid table with a unique position index.
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
const REKEY_STRATA: Migration = (
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

/// Version 5: versions, pins, and the rows pins keep.
///
/// Every commit bumps its namespace's `version` and stamps the rows it
/// writes with it. A pin records a version and its root; while any pin
/// exists, a commit copies each row it replaces or deletes that was
/// written at or before the newest pin into `ms_smt_history`, tagged with
/// the versions it was current for (`from_version` .. `to_version`). Existing rows and
/// namespaces start at version 0.
const VERSIONS_AND_PINS: Migration = (
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
        Self::opened(pool, false).await
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
        Self::opened(pool, false).await
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
}

impl Dialect for SqliteConnection {
    /// Version 5 is the first released schema; the earlier ones are the
    /// forward path of databases created before it.
    const MIGRATIONS: &'static [Migration] = &[
        (
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
        ),
        REKEY_STRATA,
        VERSIONS_AND_PINS,
    ];
    const LEDGER: &'static str = "CREATE TABLE IF NOT EXISTS ms_smt_migrations (
                    version INTEGER PRIMARY KEY NOT NULL,
                    description TEXT NOT NULL,
                    applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
                )";
    /// Takes the write lock up front, so concurrent writers wait (busy
    /// timeout) instead of failing with "database is locked".
    const BEGIN_WRITE: Option<&'static str> = Some("BEGIN IMMEDIATE");
    const SAVEPOINTS: bool = true;
    const SNAPSHOT: Option<&'static str> = None;
    const HAS_LEDGER: &'static str = "SELECT CAST(1 AS BIGINT) FROM sqlite_master WHERE type = 'table' AND name = 'ms_smt_migrations'";

    fn push_param(sql: &mut String, _n: usize) {
        sql.push('?');
    }

    async fn execute(&mut self, sql: SqlStr, args: &[Arg<'_>]) -> Res<u64> {
        let query = sqlx::query_with(sql, arguments::<sqlx::Sqlite>(args)?);
        Ok(query.execute(&mut *self).await?.rows_affected())
    }

    async fn fetch_all<T: Shared>(&mut self, sql: SqlStr, args: &[Arg<'_>]) -> Res<Vec<T>> {
        let query = sqlx::query_as_with(sql, arguments::<sqlx::Sqlite>(args)?);
        Ok(query.fetch_all(&mut *self).await?)
    }

    async fn run_ddl(&mut self, sql: &'static str) -> Res<()> {
        Executor::execute(&mut *self, sqlx::raw_sql(sql)).await?;
        Ok(())
    }

    /// Nothing to take: an SQLite write transaction (`BEGIN IMMEDIATE`, or
    /// a write in the caller's transaction) holds the database's write lock.
    async fn lock_namespace(&mut self, _: &NamespaceState) -> Res<()> {
        Ok(())
    }

    /// `BEGIN IMMEDIATE` holds the write lock already.
    async fn lock_migrations(&mut self) -> Res<()> {
        Ok(())
    }

    async fn create_namespace(&mut self, space: &NamespaceState) -> Res<()> {
        space.counters.round_trip(1);
        sqlx::query(
            "INSERT INTO ms_smt_namespaces (name, height) VALUES (?, ?) \
         ON CONFLICT (name) DO NOTHING",
        )
        .bind(&*space.name)
        .bind(i64::from(space.height.get() as u8))
        .execute(&mut *self)
        .await?;
        Ok(())
    }

    fn walk_needs_guard(_: bool, _: usize) -> bool {
        false
    }

    async fn guard_walk(&mut self, _: &NamespaceState) -> Res<()> {
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
    async fn walk_paths(
        &mut self,
        space: &NamespaceState,
        info: NsInfo,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Vec<(Hash, Node)>> {
        let h = info.height.get();
        let per_key = PathParams::width(info.height);
        let sql = shared_sql(format!(
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
        ));
        let mut out = Vec::new();
        for chunk in starts.chunks(MAX_ROWS / 4) {
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
            let rows = sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(info.id)
                .bind(count(params.depths.len()))
                .bind(count(h))
                .bind(depths)
                .bind(paths)
                .bind(sibs)
                .bind(siblings)
                .bind(count(per_key))
                .fetch_all(&mut *self)
                .await?;
            let (root, rows) = walk_rows(&rows)?;
            out.extend(path_nodes(space, info.height, root, rows)?);
        }
        Ok(out)
    }

    async fn read_rows(
        &mut self,
        space: &NamespaceState,
        info: NsInfo,
        keys: &[RowKey],
    ) -> Res<Vec<(RowKey, Vec<u8>)>> {
        let sql = format!(
            "WITH RECURSIVE {INDEX_CTE}, \
         k(i, depth) AS (SELECT i, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) FROM idx) \
         SELECT n.path, n.depth, n.body FROM k CROSS JOIN ms_smt_strata n \
           ON n.ns = ?1 AND n.path = substr(?3, k.i * 32 + 1, (k.depth + 7) / 8) \
          AND n.depth = k.depth"
        );
        read_packed(self, space, info.id, sql, keys, None).await
    }

    async fn read_rows_at(
        &mut self,
        space: &NamespaceState,
        info: NsInfo,
        version: i64,
        keys: &[RowKey],
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
        read_packed(self, space, info.id, sql, keys, Some(version)).await
    }

    /// Keeps the rows a pin may read (one packed statement), writes the
    /// changed rows (one packed upsert) and deletes the rows left empty
    /// (one packed delete), in key order; then moves the root.
    async fn write_commit(
        &mut self,
        space: &NamespaceState,
        state: &NsState,
        changes: &[RowChange],
        new_root: &ComputedNode,
    ) -> Res<()> {
        let version = state.version.saturating_add(1);
        if let Some(max_pin) = state.max_pin {
            keep_for_pins(self, space, state.info.id, changes, max_pin, version).await?;
        }
        write_rows(self, space, state.info.id, changes, version).await?;
        space.fail("written")?;
        space.counters.round_trip(1);
        let root = (*new_root != ComputedNode::empty_root())
            .then(|| (new_root.hash.0.to_vec(), sum_to_sql(new_root.sum)));
        let (hash, sum) = root.unzip();
        sqlx::query(
            "UPDATE ms_smt_namespaces SET root_hash = ?, root_sum = ?, version = ? WHERE id = ?",
        )
        .bind(hash)
        .bind(sum)
        .bind(version)
        .bind(state.info.id)
        .execute(&mut *self)
        .await?;
        Ok(())
    }

    /// One key range of rows, then the root.
    async fn clear(&mut self, space: &NamespaceState, state: &NsState) -> Res<()> {
        let id = state.info.id;
        let version = state.version.saturating_add(1);
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
            .execute(&mut *self)
            .await?;
        }
        space.counters.round_trip(2);
        sqlx::query("DELETE FROM ms_smt_strata WHERE ns = ?")
            .bind(id)
            .execute(&mut *self)
            .await?;
        sqlx::query(
            "UPDATE ms_smt_namespaces SET root_hash = NULL, root_sum = NULL, version = ? \
         WHERE id = ?",
        )
        .bind(version)
        .bind(id)
        .execute(&mut *self)
        .await?;
        Ok(())
    }
}

/// The arguments of a packed statement for one chunk: `?1` namespace,
/// `?2`-`?4` the packed keys, with `bodies` `?5`-`?7` the packed bodies,
/// then `extra` in order.
fn packed_args<'q>(ns: i64, chunk: &'q PackedRows, bodies: bool, extra: &[i64]) -> Vec<Arg<'q>> {
    let mut args = vec![
        Arg::Int(ns),
        Arg::Int(count(chunk.len)),
        Arg::Bytes(&chunk.path),
        Arg::Bytes(&chunk.depth),
    ];
    if bodies {
        args.extend([
            Arg::Bytes(&chunk.body),
            Arg::Bytes(&chunk.body_at),
            Arg::Bytes(&chunk.body_len),
        ]);
    }
    args.extend(extra.iter().map(|v| Arg::Int(*v)));
    args
}

/// A statement built with `format!` from our own SQL constants and numbers
/// (never from input), so it is safe to pass as [`AssertSqlSafe`]; shared so
/// each chunk's statement reuses the text (one prepared statement) without
/// copying it.
fn shared_sql(sql: String) -> Arc<str> {
    sql.into()
}

/// Runs a packed statement that returns nothing once per chunk of `rows`
/// (arguments as [`packed_args`]); `sql` is built from our constants only.
async fn execute_packed<'a>(
    conn: &mut SqliteConnection,
    space: &NamespaceState,
    ns: i64,
    sql: String,
    rows: impl IntoIterator<Item = (&'a RowKey, &'a [u8])>,
    bodies: bool,
    extra: &[i64],
) -> Res<()> {
    let sql = shared_sql(sql);
    for chunk in PackedRows::chunks(rows) {
        space.counters.round_trip(1);
        let args = packed_args(ns, &chunk, bodies, extra);
        Dialect::execute(&mut *conn, AssertSqlSafe(sql.clone()).into_sql_str(), &args).await?;
    }
    Ok(())
}

/// Runs a packed row read (`?1` namespace, `?2`-`?4` the packed keys,
/// `?5` the version when given), a statement per chunk of keys; `sql` is
/// built from our constants only.
async fn read_packed(
    conn: &mut SqliteConnection,
    space: &NamespaceState,
    ns: i64,
    sql: String,
    keys: &[RowKey],
    version: Option<i64>,
) -> Res<Vec<(RowKey, Vec<u8>)>> {
    let mut out = Vec::with_capacity(keys.len());
    let extra: Vec<i64> = version.into_iter().collect();
    let sql = shared_sql(sql);
    for chunk in PackedRows::chunks(keys.iter().map(|k| (k, &[][..]))) {
        space.counters.round_trip(1);
        let args = packed_args(ns, &chunk, false, &extra);
        let rows: Vec<(Vec<u8>, i64, Vec<u8>)> =
            Dialect::fetch_all(&mut *conn, AssertSqlSafe(sql.clone()).into_sql_str(), &args)
                .await?;
        out.extend(keyed_rows(rows));
    }
    Ok(out)
}

/// Copies the rows a commit at `version` is about to replace or delete
/// into `ms_smt_history`: those written at or before the newest pin.
async fn keep_for_pins(
    conn: &mut SqliteConnection,
    space: &NamespaceState,
    ns: i64,
    changes: &[RowChange],
    max_pin: i64,
    version: i64,
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
    execute_packed(conn, space, ns, sql, keys, false, &[version, max_pin]).await
}

/// A merge's row changes: one packed upsert of the rows that changed, one
/// packed delete of the rows left empty (one of each unless the batch
/// exceeds a chunk), stamped with `version`.
async fn write_rows(
    conn: &mut SqliteConnection,
    space: &NamespaceState,
    ns: i64,
    changes: &[RowChange],
    version: i64,
) -> Res<()> {
    let put_sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         r(i, depth) AS (SELECT i, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) FROM idx) \
         INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
         SELECT ?1, substr(?3, i * 32 + 1, (depth + 7) / 8), depth, \
                substr(?5, CAST(substr(?6, i * 20 + 1, 20) AS INTEGER) + 1, \
                       CAST(substr(?7, i * 20 + 1, 20) AS INTEGER)), ?8 \
         FROM r WHERE true \
         ON CONFLICT (ns, path, depth) DO UPDATE \
         SET body = excluded.body, version = excluded.version"
    );
    let puts = changes.iter().filter_map(|c| match c {
        RowChange::Put(key, body) => Some((key, body.as_slice())),
        RowChange::Delete(_) => None,
    });
    execute_packed(conn, space, ns, put_sql, puts, true, &[version]).await?;
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
    execute_packed(conn, space, ns, delete_sql, deletes, false, &[]).await
}
