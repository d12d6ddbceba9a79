//! PostgreSQL store on sqlx: many namespaces per database, position-keyed
//! strata rows ([`crate::strata`]), a constant number of statements per
//! commit.
//!
//! * Tables: `ms_smt_namespaces` (an integer id per namespace name, its
//!   stratum height and current root) and `ms_smt_strata` (one row per
//!   stratum, primary key `(ns, path, depth)`).
//! * Reads: one statement for a whole batch: a bounded recursive query
//!   (at most `256 / height` steps per key) walks each key's rows from
//!   where the handle's remembered nodes ([`RecentNodes`](crate::store::RecentNodes)) end and returns
//!   each row once, with the sibling rows at its boundaries. Every row read
//!   is a fenced primary-key probe (`LATERAL ... OFFSET 0`), so plans do not
//!   depend on statistics.
//! * Writes: one transaction per commit: a per-namespace advisory lock, the
//!   root check, one read of the rows the batch touches, the merge in
//!   process, then ONE statement that upserts the changed rows, deletes the
//!   rows left empty and sets the root (so a cancelled commit is all or
//!   nothing even without a transaction of its own).
//! * Inside a caller's transaction ([`PostgresStore::in_transaction`](super::SqlStore::in_transaction)) the
//!   same statements run directly in it, with no savepoint (sqlx's
//!   savepoints are not safe to cancel; see `write_commit`); the advisory
//!   lock is held until the caller's transaction ends.
//! * The schema is versioned ([`PostgresStore::migrate`](super::SqlStore::migrate)): a database written
//!   by an earlier schema of this release line is upgraded when opened.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgConnection, SqlStr};

use super::dialect::{Arg, Dialect, Migration, Shared, arguments};
use super::error::Res;
use super::handle::{SqlStore, SqlTxStore};
use super::space::{
    NamespaceState, NsInfo, NsState, PathParams, keyed_rows, path_nodes, sum_to_sql, walk_rows,
};
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::PathStart;
use crate::strata::{RowChange, RowKey, StratumHeight};

/// A tree store in a PostgreSQL database, bound to one namespace.
pub type PostgresStore = SqlStore<PgConnection>;

/// A [`PostgresStore`] namespace bound to a caller's open transaction; see
/// [`in_transaction`](PostgresStore::in_transaction).
pub type PostgresTxStore<'c> = SqlTxStore<'c, PgConnection>;

/// Version 4: versions, pins, and the rows pins keep.
///
/// Every commit bumps its namespace's `version` and stamps the rows it
/// writes with it. A pin records a version and its root; while any pin
/// exists, a commit copies each row it replaces or deletes that was
/// written at or before the newest pin into `ms_smt_history`, tagged with
/// the versions it was current for (`from_version` .. `to_version`).
/// Existing rows and namespaces start at version 0.
const VERSIONS_AND_PINS: Migration = (
    4,
    "versions, pins and the rows pins keep",
    "ALTER TABLE ms_smt_namespaces ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE ms_smt_strata ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
    CREATE TABLE ms_smt_pins (
        ns BIGINT NOT NULL,
        name TEXT NOT NULL,
        version BIGINT NOT NULL,
        root_hash BYTEA,
        root_sum BIGINT,
        PRIMARY KEY (ns, name)
    );
    CREATE INDEX ms_smt_pins_version ON ms_smt_pins (ns, version);
    CREATE TABLE ms_smt_history (
        ns BIGINT NOT NULL,
        path BYTEA NOT NULL,
        depth INT NOT NULL,
        from_version BIGINT NOT NULL,
        to_version BIGINT NOT NULL,
        body BYTEA NOT NULL,
        PRIMARY KEY (ns, path, depth, from_version)
    );",
);

/// Path walks with at least this many starts turn JIT off for themselves
/// (see [`read_paths`](crate::store::TreeStore::read_paths)).
const JIT_GUARD_MIN_STARTS: usize = 32;

/// Advisory lock key of the migrations (an arbitrary constant: "mssmt").
const MIGRATION_LOCK: i64 = 0x006d_7373_6d74;

impl PostgresStore {
    /// Connects to `url` (e.g. `postgres://user@host/db`), runs the
    /// migrations, and binds the namespace `"default"`.
    ///
    /// The pool's sessions run with `jit = off`: the recursive path walk's
    /// row estimates are guesses that can cross `jit_above_cost`, and
    /// compiling the plan then costs ~200 ms for a ~20 ms query. (On a
    /// host's pool, [`from_pool`](Self::from_pool), large walks turn JIT
    /// off for themselves only, at three extra round trips.)
    pub async fn connect(url: &str) -> Res<Self> {
        let options: PgConnectOptions = url.parse()?;
        let pool = PgPoolOptions::new()
            .test_before_acquire(false)
            .max_connections(16)
            .connect_with(options.options([("jit", "off")]))
            .await?;
        Self::opened(pool, true).await
    }
}

fn height_sql(height: StratumHeight) -> i32 {
    i32::try_from(height.get()).unwrap_or(i32::MAX)
}

impl Dialect for PgConnection {
    /// Version 4 is the first released schema; the earlier one is the
    /// forward path of databases created before it.
    const MIGRATIONS: &'static [Migration] = &[
        (
            2,
            "namespaces and position-keyed strata",
            "CREATE TABLE ms_smt_namespaces (
                id BIGSERIAL PRIMARY KEY,
                name TEXT NOT NULL UNIQUE,
                height INT NOT NULL,
                root_hash BYTEA,
                root_sum BIGINT
            );
            CREATE TABLE ms_smt_strata (
                ns BIGINT NOT NULL,
                path BYTEA NOT NULL,
                depth INT NOT NULL,
                body BYTEA NOT NULL,
                PRIMARY KEY (ns, path, depth)
            );",
        ),
        VERSIONS_AND_PINS,
    ];
    const LEDGER: &'static str = "CREATE TABLE IF NOT EXISTS ms_smt_migrations (
                    version BIGINT PRIMARY KEY NOT NULL,
                    description TEXT NOT NULL,
                    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
                )";
    const BEGIN_WRITE: Option<&'static str> = None;
    /// sqlx's savepoints are not safe to cancel (see [`write_commit`](Dialect::write_commit)).
    const SAVEPOINTS: bool = false;
    const SNAPSHOT: Option<&'static str> =
        Some("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
    const HAS_LEDGER: &'static str =
        "SELECT CAST(1 AS BIGINT) WHERE to_regclass('ms_smt_migrations') IS NOT NULL";

    async fn execute(&mut self, sql: SqlStr, args: &[Arg<'_>]) -> Res<u64> {
        let query = sqlx::query_with(sql, arguments::<sqlx::Postgres>(args)?);
        Ok(query.execute(&mut *self).await?.rows_affected())
    }

    async fn fetch_all<T: Shared>(&mut self, sql: SqlStr, args: &[Arg<'_>]) -> Res<Vec<T>> {
        let query = sqlx::query_as_with(sql, arguments::<sqlx::Postgres>(args)?);
        Ok(query.fetch_all(&mut *self).await?)
    }

    async fn run_ddl(&mut self, sql: &'static str) -> Res<()> {
        Executor::execute(&mut *self, sqlx::raw_sql(sql)).await?;
        Ok(())
    }

    /// A per-namespace advisory lock.
    async fn lock_namespace(&mut self, space: &NamespaceState) -> Res<()> {
        space.counters.round_trip(1);
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('ms_smt:' || $1, 0))")
            .bind(&*space.name)
            .execute(&mut *self)
            .await?;
        Ok(())
    }

    async fn lock_migrations(&mut self) -> Res<()> {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *self)
            .await?;
        Ok(())
    }

    async fn create_namespace(&mut self, space: &NamespaceState) -> Res<()> {
        space.counters.round_trip(1);
        sqlx::query(
            "INSERT INTO ms_smt_namespaces (name, height) VALUES ($1, $2) \
         ON CONFLICT (name) DO NOTHING",
        )
        .bind(&*space.name)
        .bind(height_sql(space.height))
        .execute(&mut *self)
        .await?;
        Ok(())
    }

    fn walk_needs_guard(jit_off: bool, starts: usize) -> bool {
        !jit_off && starts >= JIT_GUARD_MIN_STARTS
    }

    /// `SET LOCAL jit = off`.
    ///
    /// The planner's row estimate for a recursive query is a guess that grows
    /// with the start array, and past `jit_above_cost` the server JIT-compiles
    /// the plan: ~200 ms of LLVM work for a query that runs in ~20 ms. Unless
    /// the session already runs without JIT, a large walk sets `jit = off`
    /// locally (`set_local_jit_off`): the pool store in a read transaction of
    /// its own (rolled back afterwards), the caller's-transaction store in the
    /// caller's transaction, where it lasts until that transaction ends (no
    /// savepoint: see [`write_commit`] for why).
    async fn guard_walk(&mut self, space: &NamespaceState) -> Res<()> {
        space.counters.round_trip(1);
        sqlx::query("SET LOCAL jit = off")
            .execute(&mut *self)
            .await?;
        Ok(())
    }

    /// The walk query itself (see [`read_paths`](crate::store::TreeStore::read_paths)). Every row read is a
    /// LATERAL primary-key probe fenced with `OFFSET 0`: without the fence the
    /// planner may flatten it into a join that scans the namespace.
    async fn walk_paths(
        &mut self,
        space: &NamespaceState,
        info: NsInfo,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Vec<(Hash, Node)>> {
        let params = PathParams::new(info.height, starts);
        if params.depths.is_empty() {
            return Ok(Vec::new());
        }
        let depths: Vec<i32> = params
            .depths
            .iter()
            .map(|d| i32::try_from(*d).unwrap_or(i32::MAX))
            .collect();
        space.counters.round_trip(1);
        let rows = sqlx::query(walk_sql())
            .bind(info.id)
            .bind(depths)
            .bind(params.key_paths())
            .bind(&params.first_sibling)
            .bind(height_sql(info.height))
            .bind(siblings)
            .fetch_all(&mut *self)
            .await?;
        let (root, rows) = walk_rows(&rows)?;
        path_nodes(space, info.height, root, rows)
    }

    async fn read_rows(
        &mut self,
        space: &NamespaceState,
        info: NsInfo,
        keys: &[RowKey],
    ) -> Res<Vec<(RowKey, Vec<u8>)>> {
        read_keyed(self, space, READ_ROWS, info.id, keys, None).await
    }

    async fn read_rows_at(
        &mut self,
        space: &NamespaceState,
        info: NsInfo,
        version: i64,
        keys: &[RowKey],
    ) -> Res<Vec<(RowKey, Vec<u8>)>> {
        read_keyed(self, space, READ_ROWS_AT, info.id, keys, Some(version)).await
    }

    /// Writes a merge's row changes and the new root (`None`: empty) in ONE
    /// statement: the upsert and the delete are data-modifying CTEs of the
    /// root's UPDATE.
    ///
    /// One statement is atomic whatever happens to the caller: a future
    /// dropped mid-commit either sent it (it runs whole) or did not (nothing
    /// changed). That is what lets the caller's-transaction mode write without
    /// a savepoint: sqlx 0.8.6 and 0.9.0 both mishandle a savepoint `begin`
    /// cancelled before its reply (`PgTransactionManager::begin`'s guard
    /// queues a rollback at the unincremented depth: `ROLLBACK` of the
    /// caller's whole transaction at depth 1, and 0.9.0's
    /// `Transaction::begin` adds a rollback of its own), which silently
    /// discarded the host's own writes in `tests/cancellation.rs`. SQLite's
    /// worker undoes such a `begin` itself, so SQLite keeps its savepoint
    /// (`savepoint.rs`).
    async fn write_commit(
        &mut self,
        space: &NamespaceState,
        state: &NsState,
        changes: &[RowChange],
        new_root: &ComputedNode,
    ) -> Res<()> {
        let root = (*new_root != ComputedNode::empty_root())
            .then(|| (new_root.hash.0.to_vec(), sum_to_sql(new_root.sum)));
        let mut put_keys = Vec::new();
        let mut bodies: Vec<&[u8]> = Vec::new();
        let mut gone = Vec::new();
        for change in changes {
            match change {
                RowChange::Put(key, body) => {
                    put_keys.push(key);
                    bodies.push(body);
                }
                RowChange::Delete(key) => gone.push(key),
            }
        }
        // While pins exist, the rows about to be replaced or deleted that a
        // pin may read are copied aside first (the CTEs all read the rows as
        // they were before the statement).
        let kept = if state.max_pin.is_some() {
            key_arrays(changes.iter().map(|c| match c {
                RowChange::Put(key, _) | RowChange::Delete(key) => key,
            }))
        } else {
            (Vec::new(), Vec::new())
        };
        let (put_paths, put_depths) = key_arrays(put_keys.into_iter());
        let (gone_paths, gone_depths) = key_arrays(gone.into_iter());
        let (hash, sum) = root.unzip();
        space.counters.round_trip(1);
        sqlx::query(
        "WITH kept AS ( \
             INSERT INTO ms_smt_history (ns, path, depth, from_version, to_version, body) \
             SELECT n.ns, n.path, n.depth, n.version, $9, n.body \
             FROM UNNEST($10::bytea[], $11::int4[]) AS k(path, depth) \
             CROSS JOIN LATERAL ( \
                 SELECT * FROM ms_smt_strata m \
                 WHERE m.ns = $1 AND m.path = k.path AND m.depth = k.depth OFFSET 0) AS n \
             WHERE n.version <= $12), \
         put AS ( \
             INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
             SELECT $1, p, d, b, $9 FROM UNNEST($2::bytea[], $3::int4[], $4::bytea[]) AS u(p, d, b) \
             ON CONFLICT (ns, path, depth) DO UPDATE \
             SET body = EXCLUDED.body, version = EXCLUDED.version), \
         gone AS ( \
             DELETE FROM ms_smt_strata WHERE ctid = ANY(ARRAY( \
                 SELECT n.ctid FROM UNNEST($5::bytea[], $6::int4[]) AS k(path, depth) \
                 CROSS JOIN LATERAL ( \
                     SELECT ctid FROM ms_smt_strata m \
                     WHERE m.ns = $1 AND m.path = k.path AND m.depth = k.depth OFFSET 0) AS n))) \
         UPDATE ms_smt_namespaces SET root_hash = $7, root_sum = $8, version = $9 WHERE id = $1",
    )
    .bind(state.info.id)
    .bind(put_paths)
    .bind(put_depths)
    .bind(bodies)
    .bind(gone_paths)
    .bind(gone_depths)
    .bind(hash)
    .bind(sum)
    .bind(state.version.saturating_add(1))
    .bind(kept.0)
    .bind(kept.1)
    .bind(state.max_pin)
    .execute(&mut *self)
    .await?;
        space.fail("written")?;
        Ok(())
    }

    /// One statement (see [`write_commit`](Dialect::write_commit) for why).
    async fn clear(&mut self, space: &NamespaceState, state: &NsState) -> Res<()> {
        space.counters.round_trip(1);
        sqlx::query(
            "WITH kept AS ( \
             INSERT INTO ms_smt_history (ns, path, depth, from_version, to_version, body) \
             SELECT ns, path, depth, version, $2, body FROM ms_smt_strata \
             WHERE ns = $1 AND version <= $3), \
         gone AS (DELETE FROM ms_smt_strata WHERE ns = $1) \
         UPDATE ms_smt_namespaces SET root_hash = NULL, root_sum = NULL, version = $2 \
         WHERE id = $1",
        )
        .bind(state.info.id)
        .bind(state.version.saturating_add(1))
        .bind(state.max_pin)
        .execute(&mut *self)
        .await?;
        Ok(())
    }
}

/// The path walk's statement. `$1` namespace id, `$2` per start the
/// depth of its first row, `$3` its key as a 32-byte path, `$4` whether
/// the sibling of its first row is wanted, `$5` the stratum height, `$6`
/// whether sibling rows are wanted at all.
///
/// Each walk step probes the row at the next depth on the key's path (the
/// path is cut out of the key in SQL, so a step carries 32 bytes) and
/// carries the row's body, so a path row is read once; sibling rows are
/// probed afterwards. Rows come back nearest the root first, each with
/// the root hash the statement saw.
fn walk_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(walk_sql_text)
}

fn walk_sql_text() -> String {
    let step = |k: &str, d: &str| {
        format!(
            "SELECT m.path, m.body FROM ms_smt_strata m \
             WHERE m.ns = $1 AND m.depth = {d} AND m.path = {} OFFSET 0",
            prefix_sql(k, d)
        )
    };
    let first = step("s.k", "s.depth");
    let next = step("w.k", "(w.depth + $5)");
    let sib_below = sibling_sql("k", "(depth + $5)");
    let sib_first = sibling_sql("k", "depth");
    format!(
        "WITH RECURSIVE s AS ( \
             SELECT * FROM UNNEST($2::int4[], $3::bytea[], $4::bool[]) AS s(depth, k, sib)), \
         walk(depth, k, path, body) AS ( \
             SELECT s.depth, s.k, n.path, n.body FROM s CROSS JOIN LATERAL ({first}) AS n \
           UNION ALL \
             SELECT w.depth + $5, w.k, n.path, n.body FROM walk w CROSS JOIN LATERAL ({next}) AS n \
             WHERE w.depth + $5 <= 256), \
         sibs(path, depth) AS ( \
             SELECT {sib_below}, depth + $5 FROM walk WHERE $6 AND depth + $5 <= 256 \
           UNION \
             SELECT {sib_first}, depth FROM s WHERE $6 AND sib), \
         found(path, depth, body) AS ( \
             SELECT path, depth, body FROM walk \
           UNION ALL \
             SELECT n.path, n.depth, n.body FROM sibs w CROSS JOIN LATERAL ( \
                 SELECT m.path, m.depth, m.body FROM ms_smt_strata m \
                 WHERE m.ns = $1 AND m.path = w.path AND m.depth = w.depth OFFSET 0) AS n) \
         SELECT path, depth::int8, body, (SELECT root_hash FROM ms_smt_namespaces WHERE id = $1) \
         FROM found ORDER BY depth"
    )
}

/// SQL for the path of the row at depth `d` on the 32-byte key path `k`:
/// its first `(d + 7) / 8` bytes with the bits past `d` cleared.
fn prefix_sql(k: &str, d: &str) -> String {
    format!(
        "(CASE WHEN {d} % 8 = 0 THEN substring({k} from 1 for {d} / 8) \
          ELSE set_byte(substring({k} from 1 for ({d} + 7) / 8), ({d} + 7) / 8 - 1, \
                        get_byte({k}, ({d} + 7) / 8 - 1) & (65280 >> ({d} % 8)) & 255) END)"
    )
}

/// SQL for the path of the sibling of the row at depth `d > 0` on `k`:
/// its path with bit `d - 1` flipped.
fn sibling_sql(k: &str, d: &str) -> String {
    let p = prefix_sql(k, d);
    format!("set_byte({p}, ({d} - 1) / 8, get_byte({p}, ({d} - 1) / 8) # (128 >> (({d} - 1) % 8)))")
}

/// The row keys as two parallel arrays (paths, depths).
/// The current rows at the keys `$2`/`$3` of namespace `$1`.
const READ_ROWS: &str = "SELECT n.path, n.depth, n.body \
         FROM UNNEST($2::bytea[], $3::int4[]) AS k(path, depth) CROSS JOIN LATERAL ( \
             SELECT m.path, m.depth, m.body FROM ms_smt_strata m \
             WHERE m.ns = $1 AND m.path = k.path AND m.depth = k.depth OFFSET 0) AS n";

/// The rows at the keys `$2`/`$3` of namespace `$1` as they were at
/// version `$4`: the live row if written at or before it, else the kept
/// copy current then.
const READ_ROWS_AT: &str = "SELECT k.path, k.depth, b.body \
         FROM UNNEST($2::bytea[], $3::int4[]) AS k(path, depth) CROSS JOIN LATERAL ( \
             (SELECT m.body FROM ms_smt_strata m WHERE m.ns = $1 AND m.path = k.path \
                AND m.depth = k.depth AND m.version <= $4 OFFSET 0) \
           UNION ALL \
             (SELECT h.body FROM ms_smt_history h WHERE h.ns = $1 AND h.path = k.path \
                AND h.depth = k.depth AND h.from_version <= $4 AND h.to_version > $4 \
              OFFSET 0) \
           LIMIT 1) AS b";

/// Runs a row read by key arrays (`$1` namespace, `$2`/`$3` the paths and
/// depths, `$4` the version when given) in one statement.
async fn read_keyed(
    conn: &mut PgConnection,
    space: &NamespaceState,
    sql: &'static str,
    ns: i64,
    keys: &[RowKey],
    version: Option<i64>,
) -> Res<Vec<(RowKey, Vec<u8>)>> {
    let (paths, depths) = key_arrays(keys.iter());
    space.counters.round_trip(1);
    let query = sqlx::query_as(sql).bind(ns).bind(paths).bind(depths);
    let query = match version {
        Some(v) => query.bind(v),
        None => query,
    };
    let rows: Vec<(Vec<u8>, i32, Vec<u8>)> = query.fetch_all(&mut *conn).await?;
    Ok(keyed_rows(rows).collect())
}

fn key_arrays<'k>(keys: impl Iterator<Item = &'k RowKey>) -> (Vec<&'k [u8]>, Vec<i32>) {
    keys.map(|k| {
        (
            k.path.as_slice(),
            i32::try_from(k.depth).unwrap_or(i32::MAX),
        )
    })
    .unzip()
}
