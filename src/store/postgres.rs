//! PostgreSQL store on sqlx: many namespaces per database, position-keyed
//! strata rows ([`super::strata`]), a constant number of statements per
//! commit.
//!
//! * Tables: `ms_smt_namespaces` (an integer id per namespace name, its
//!   stratum height and current root) and `ms_smt_strata` (one row per
//!   stratum, primary key `(ns, path, depth)`).
//! * Reads: one statement for a whole batch: a bounded recursive query
//!   (at most `256 / height` steps per key) walks each key's rows from
//!   where the handle's remembered nodes ([`RecentNodes`]) end and returns
//!   each row once, with the sibling rows at its boundaries. Every row read
//!   is a fenced primary-key probe (`LATERAL ... OFFSET 0`), so plans do not
//!   depend on statistics.
//! * Writes: one transaction per commit: a per-namespace advisory lock, the
//!   root check, one read of the rows the batch touches, the merge in
//!   process, then ONE statement that upserts the changed rows, deletes the
//!   rows left empty and sets the root (so a cancelled commit is all or
//!   nothing even without a transaction of its own).
//! * Inside a caller's transaction ([`PostgresStore::in_transaction`]) the
//!   same statements run directly in it, with no savepoint (sqlx's
//!   savepoints are not safe to cancel; see `write_commit`); the advisory
//!   lock is held until the caller's transaction ends.
//! * The schema is versioned ([`PostgresStore::migrate`]): a database written
//!   by an earlier schema of this release line is upgraded when opened.

use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::Mutex;

use super::locked::write_planned;
use super::row_reads::{self, RowQueries};
use super::sql::{
    NsInfo, NsState, PAST_EVERY_DEPTH, PathParams, Space, SqlStoreError, TxConnection, detached,
    detached_store, merge, path_nodes, sum_to_sql, walk_rows, write_detached,
};
use super::sql_handle::handle_reads;
use super::sql_ops;
use super::{
    BulkStore, CommitOutcome, PathStart, PinStore, ReadAt, RecentNodes, StoreStats, TreeStore,
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
/// `_sqlx_migrations`, which belongs to the host application). Version 4
/// is the first released schema; the earlier versions are kept as the
/// forward path of databases created before it.
const MIGRATIONS: &[(i64, &str, &str)] = &[(
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
)];

/// Migration 4: versions, pins, and the rows pins keep.
///
/// Every commit bumps its namespace's `version` and stamps the rows it
/// writes with it. A pin records a version and its root; while any pin
/// exists, a commit copies each row it replaces or deletes that was
/// written at or before the newest pin into `ms_smt_history`, tagged with
/// the versions it was current for (`from_version` .. `to_version`).
/// Existing rows and namespaces start at version 0.
const VERSIONS_AND_PINS: (i64, &str, &str) = (
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

/// The newest schema version this crate writes.
const SCHEMA_VERSION: i64 = VERSIONS_AND_PINS.0;

/// Path walks with at least this many starts turn JIT off for themselves
/// (see [`fetch_key_paths`]).
const JIT_GUARD_MIN_STARTS: usize = 32;

/// Advisory lock key of the migrations (an arbitrary constant: "mssmt").
const MIGRATION_LOCK: i64 = 0x006d_7373_6d74;

/// A tree store in a PostgreSQL database, bound to one namespace.
///
/// Cloning is cheap and shares the pool, the handle's counters and its
/// [`RecentNodes`]. Sums are stored as the i64 with the same bits as the
/// u64 (the root) or as little-endian bytes inside row bodies; they are
/// never compared in SQL.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    space: Arc<Space>,
    /// True when the pool's sessions run with JIT off (pools made by
    /// [`PostgresStore::connect`]), so path walks need no guard.
    jit_off: bool,
}

type Res<T> = Result<T, SqlStoreError>;

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
        let store = PostgresStore {
            jit_off: true,
            ..Self::from_pool(pool, "default")
        };
        store.migrate().await?;
        Ok(store)
    }

    /// A store on a pool the host application already has. Call
    /// [`migrate`](Self::migrate) once before use.
    pub fn from_pool(pool: PgPool, namespace: &str) -> Self {
        PostgresStore {
            pool,
            space: Space::new(
                namespace,
                StratumHeight::default(),
                super::DEFAULT_RECENT_NODES,
            ),
            jit_off: false,
        }
    }

    /// The same database, another namespace (an independent tree), with
    /// this handle's settings.
    pub fn namespace(&self, name: &str) -> Self {
        PostgresStore {
            pool: self.pool.clone(),
            space: Space::new(name, self.space.height, self.space.recent.capacity()),
            jit_off: self.jit_off,
        }
    }

    /// This handle with its own memory of up to `capacity` recent nodes
    /// (default [`DEFAULT_RECENT_NODES`](super::DEFAULT_RECENT_NODES); 0
    /// reads every node from the database). Handles made from it with
    /// [`namespace`](Self::namespace) get the same capacity. See
    /// [`RecentNodes`] for why remembered nodes are always right.
    pub fn with_recent_nodes(self, capacity: usize) -> Self {
        PostgresStore {
            space: Space::new(&self.space.name, self.space.height, capacity),
            ..self
        }
    }

    /// This handle creating its namespace, if new, with `height` levels per
    /// row (default [`DEFAULT_STRATUM_HEIGHT`](super::DEFAULT_STRATUM_HEIGHT)).
    /// A namespace that exists keeps the height it was created with.
    pub fn with_stratum_height(self, height: StratumHeight) -> Self {
        PostgresStore {
            space: Space::new(&self.space.name, height, self.space.recent.capacity()),
            ..self
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
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Creates or upgrades the store's tables (`ms_smt_*`). Idempotent and
    /// safe to run concurrently (advisory lock); tracked in its own
    /// `ms_smt_migrations` table, so it coexists with the host's sqlx
    /// migrations.
    /// Each version's DDL runs once, in its own transaction with its
    /// ledger entry; a database at a newer version than this crate knows
    /// is refused ([`SqlStoreError::SchemaTooNew`]).
    pub async fn migrate(&self) -> Res<()> {
        let applied = {
            let mut tx = self.pool.begin().await?;
            lock_migrations(&mut tx).await?;
            sqlx::raw_sql(
                "CREATE TABLE IF NOT EXISTS ms_smt_migrations (
                    version BIGINT PRIMARY KEY NOT NULL,
                    description TEXT NOT NULL,
                    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
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
        // The columns and tables of 4 come before the old trees move (3): a
        // namespace that cannot be moved then leaves a schema this code
        // reads, and the namespaces moved before it stay readable.
        if !applied.contains(&VERSIONS_AND_PINS.0) {
            let mut tx = self.pool.begin().await?;
            lock_migrations(&mut tx).await?;
            if !applied_migrations(&mut tx)
                .await?
                .contains(&VERSIONS_AND_PINS.0)
            {
                sqlx::raw_sql(VERSIONS_AND_PINS.2).execute(&mut *tx).await?;
                record_migration(&mut tx, VERSIONS_AND_PINS.0, VERSIONS_AND_PINS.1).await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    /// True when `other` shares this handle's pool (so one statement can
    /// see both namespaces).
    fn same_pool(&self, other: &PostgresStore) -> bool {
        Arc::ptr_eq(&self.pool.connect_options(), &other.pool.connect_options())
    }

    /// A store for this namespace that runs on the caller's open
    /// transaction (`&mut *tx`): the tree's writes commit or roll back with
    /// the caller's own rows. Each commit's writes are one statement, so a
    /// commit is never half-applied, even when its future is dropped; a
    /// failed statement aborts the caller's transaction, as any failed
    /// statement does in Postgres. Use the default
    /// READ COMMITTED isolation: a write that loses a race re-reads the root,
    /// which a REPEATABLE READ snapshot would hide.
    pub fn in_transaction<'c>(&self, conn: &'c mut PgConnection) -> PostgresTxStore<'c> {
        PostgresTxStore {
            conn: Mutex::new(conn),
            space: self.space.clone(),
        }
    }
}

/// A [`PostgresStore`] namespace bound to a caller's open transaction; see
/// [`PostgresStore::in_transaction`].
#[derive(Debug)]
pub struct PostgresTxStore<'c> {
    conn: Mutex<&'c mut PgConnection>,
    space: Arc<Space>,
}

fn height_sql(height: StratumHeight) -> i32 {
    i32::try_from(height.get()).unwrap_or(i32::MAX)
}

async fn lock_migrations(conn: &mut PgConnection) -> Res<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The versions recorded in the migration ledger.
async fn applied_migrations(conn: &mut PgConnection) -> Res<Vec<i64>> {
    Ok(
        sqlx::query_scalar("SELECT version FROM ms_smt_migrations ORDER BY version")
            .fetch_all(&mut *conn)
            .await?,
    )
}

async fn record_migration(conn: &mut PgConnection, version: i64, what: &str) -> Res<()> {
    sqlx::query("INSERT INTO ms_smt_migrations (version, description) VALUES ($1, $2)")
        .bind(version)
        .bind(what)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

sql_ops::namespace_ops!(PgConnection);

/// Inserts the namespace row, with this handle's stratum height, if missing.
async fn create_namespace(conn: &mut PgConnection, space: &Space) -> Res<()> {
    space.counters.round_trip(1);
    sqlx::query(
        "INSERT INTO ms_smt_namespaces (name, height) VALUES ($1, $2) \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(&*space.name)
    .bind(height_sql(space.height))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Reads the rows on the paths of `starts` and, with `siblings`, the
/// sibling rows at each row boundary, in one statement (see the module
/// docs and [`PathParams`]); returns their nodes, rows nearest the root
/// first.
///
/// The planner's row estimate for a recursive query is a guess that grows
/// with the start array, and past `jit_above_cost` the server JIT-compiles
/// the plan: ~200 ms of LLVM work for a query that runs in ~20 ms. Unless
/// the session already runs without JIT, a large walk sets `jit = off`
/// locally (`set_local_jit_off`): the pool store in a read transaction of
/// its own (rolled back afterwards), the caller's-transaction store in the
/// caller's transaction, where it lasts until that transaction ends (no
/// savepoint: see [`write_commit`] for why).
async fn fetch_key_paths(
    conn: &mut PgConnection,
    space: &Space,
    starts: &[PathStart],
    siblings: bool,
    set_local_jit_off: bool,
) -> Res<Vec<(Hash, Node)>> {
    let Some(info) = namespace(conn, space).await? else {
        return Ok(Vec::new());
    };
    if set_local_jit_off {
        space.counters.round_trip(1);
        sqlx::query("SET LOCAL jit = off")
            .execute(&mut *conn)
            .await?;
    }
    walk(conn, space, info, starts, siblings).await
}

/// True when a walk of `starts` needs JIT turned off for itself.
fn needs_jit_guard(jit_off: bool, starts: &[PathStart]) -> bool {
    !jit_off && starts.len() >= JIT_GUARD_MIN_STARTS
}

/// The walk query itself (see [`fetch_key_paths`]). Every row read is a
/// LATERAL primary-key probe fenced with `OFFSET 0`: without the fence the
/// planner may flatten it into a join that scans the namespace.
async fn walk(
    conn: &mut PgConnection,
    space: &Space,
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
        .fetch_all(&mut *conn)
        .await?;
    let (root, rows) = walk_rows(&rows)?;
    path_nodes(space, info.height, root, rows)
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

/// Check-and-apply inside an open transaction or savepoint. Returns
/// `RootMoved` without writing when the root is not `batch.old_root`.
async fn commit_on(
    conn: &mut PgConnection,
    space: &Space,
    batch: &UpdateBatch,
) -> Res<CommitOutcome> {
    lock_namespace(conn, space).await?;
    let state = state_for_write(conn, space).await?;
    if state.root != batch.old_root {
        space.counters.conflict();
        return Ok(CommitOutcome::RootMoved {
            current: state.root,
        });
    }
    let info = state.info;
    fail_point!(space, "root_checked");
    let keys = strata::touched_rows(batch, info.height);
    let (known, unknown) = space.memo_take(&batch.old_root, &keys);
    let stored = if unknown.is_empty() {
        Vec::new()
    } else {
        read_rows(conn, space, info, &unknown).await?
    };
    let changes = merge(space, info.height, batch, keys, known, stored)?;
    fail_point!(space, "merged");
    let root = (batch.new_root != ComputedNode::empty_root()).then(|| {
        (
            batch.new_root.hash.0.to_vec(),
            sum_to_sql(batch.new_root.sum),
        )
    });
    write_commit(conn, &state, &changes, root, space).await?;
    fail_point!(space, "written");
    space.counters.written(changes.len() as u64);
    Ok(CommitOutcome::Committed)
}

/// Serialises writers of one namespace until the transaction ends.
async fn lock_namespace(conn: &mut PgConnection, space: &Space) -> Res<()> {
    space.counters.round_trip(1);
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('ms_smt:' || $1, 0))")
        .bind(&*space.name)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The row keys as two parallel arrays (paths, depths).
fn key_arrays<'k>(keys: impl Iterator<Item = &'k RowKey>) -> (Vec<&'k [u8]>, Vec<i32>) {
    keys.map(|k| {
        (
            k.path.as_slice(),
            i32::try_from(k.depth).unwrap_or(i32::MAX),
        )
    })
    .unzip()
}

/// Writes a merge's row changes and the new root (`None`: empty) in ONE
/// statement: the upsert and the delete are data-modifying CTEs of the
/// root's UPDATE.
///
/// One statement is atomic whatever happens to the caller: a future
/// dropped mid-commit either sent it (it runs whole) or did not (nothing
/// changed). That is what lets the caller's-transaction mode write without
/// a savepoint: sqlx 0.8.6 and 0.9.0 both mishandle a savepoint `begin`
/// cancelled before its reply (the guard queues a rollback at the
/// unincremented depth: `ROLLBACK` of the caller's whole transaction at
/// depth 1), which silently discarded the host's own writes in
/// `tests/cancellation.rs`.
async fn write_commit(
    conn: &mut PgConnection,
    state: &NsState,
    changes: &[RowChange],
    root: Option<(Vec<u8>, i64)>,
    space: &Space,
) -> Res<()> {
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
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The stored bodies of the rows at `keys`.
async fn read_rows(
    conn: &mut PgConnection,
    space: &Space,
    info: NsInfo,
    keys: &[RowKey],
) -> Res<Vec<(RowKey, Vec<u8>)>> {
    let (paths, depths) = key_arrays(keys.iter());
    space.counters.round_trip(1);
    let rows: Vec<(Vec<u8>, i32, Vec<u8>)> = sqlx::query_as(
        "SELECT n.path, n.depth, n.body \
         FROM UNNEST($2::bytea[], $3::int4[]) AS k(path, depth) CROSS JOIN LATERAL ( \
             SELECT m.path, m.depth, m.body FROM ms_smt_strata m \
             WHERE m.ns = $1 AND m.path = k.path AND m.depth = k.depth OFFSET 0) AS n",
    )
    .bind(info.id)
    .bind(paths)
    .bind(depths)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(path, depth, body)| {
            let depth = usize::try_from(depth).unwrap_or(usize::MAX);
            (RowKey { path, depth }, body)
        })
        .collect())
}

/// Removes the namespace's rows (one key range) and its root, in one
/// statement (see [`write_commit`] for why one); rows a pin may still read
/// are kept first.
async fn delete_all_on(conn: &mut PgConnection, space: &Space) -> Res<()> {
    lock_namespace(conn, space).await?;
    let Some(state) = load_state(conn, space).await? else {
        return Ok(());
    };
    space.memo_clear();
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
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Rows of a key-ordered read, as (path, depth, body).
type RowTuple = (Vec<u8>, i32, Vec<u8>);

fn row_keys(rows: Vec<RowTuple>) -> Vec<(RowKey, Vec<u8>)> {
    rows.into_iter()
        .map(|(path, depth, body)| {
            let depth = usize::try_from(depth).unwrap_or(usize::MAX);
            (RowKey { path, depth }, body)
        })
        .collect()
}

impl RowQueries for PgConnection {
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
        let ReadAt::Version(v) = at else {
            return read_rows(self, space, info, keys).await;
        };
        let (paths, depths) = key_arrays(keys.iter());
        space.counters.round_trip(1);
        let rows: Vec<RowTuple> = sqlx::query_as(
            "SELECT k.path, k.depth, b.body \
             FROM UNNEST($2::bytea[], $3::int4[]) AS k(path, depth) CROSS JOIN LATERAL ( \
                 (SELECT m.body FROM ms_smt_strata m WHERE m.ns = $1 AND m.path = k.path \
                    AND m.depth = k.depth AND m.version <= $4 OFFSET 0) \
               UNION ALL \
                 (SELECT h.body FROM ms_smt_history h WHERE h.ns = $1 AND h.path = k.path \
                    AND h.depth = k.depth AND h.from_version <= $4 AND h.to_version > $4 \
                  OFFSET 0) \
               LIMIT 1) AS b",
        )
        .bind(info.id)
        .bind(paths)
        .bind(depths)
        .bind(version_to_sql(v))
        .fetch_all(&mut *self)
        .await?;
        Ok(row_keys(rows))
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
    conn: &mut PgConnection,
    space: &Space,
    at: ReadAt,
    starts: &[PathStart],
    siblings: bool,
    set_local_jit_off: bool,
) -> Res<Vec<(Hash, Node)>> {
    match at {
        ReadAt::Current => fetch_key_paths(conn, space, starts, siblings, set_local_jit_off).await,
        ReadAt::Version(_) => row_reads::paths_at(conn, space, at, starts, siblings).await,
    }
}

impl PinStore for PostgresStore {
    handle_reads!(pins, pool, PgConnection);

    async fn pin(&self, name: &str) -> Res<Pin> {
        let name = name.to_owned();
        write_detached!(self.pool, self.space, begin(), |tx, space| pin_on(
            &mut tx, space, &name
        ))
    }

    async fn unpin(&self, name: &str) -> Res<bool> {
        let name = name.to_owned();
        write_detached!(self.pool, self.space, begin(), |tx, space| unpin_on(
            &mut tx, space, &name
        ))
    }
}

impl PinStore for PostgresTxStore<'_> {
    handle_reads!(pins, caller, PgConnection);

    async fn pin(&self, name: &str) -> Res<Pin> {
        let mut conn = self.conn.lock().await;
        pin_on(&mut conn, &self.space, name).await
    }

    async fn unpin(&self, name: &str) -> Res<bool> {
        let mut conn = self.conn.lock().await;
        unpin_on(&mut conn, &self.space, name).await
    }
}

impl BulkStore for PostgresStore {
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
        write_detached!(self.pool, target.space, begin(), |tx, target| copy_on(
            &mut tx, &src, at, target
        ))
    }

    /// A rename of `staging`'s namespace row: constant time.
    async fn take_tree_of(&self, staging: &Self, expected: &ComputedNode) -> Res<bool> {
        if !self.same_pool(staging) || self.space.name == staging.space.name {
            return Ok(false);
        }
        let (from, expected) = (staging.space.clone(), *expected);
        write_detached!(self.pool, self.space, begin(), |tx, target| take_tree_on(
            &mut tx, target, &from, &expected
        ))
    }
}

impl TreeStore for PostgresStore {
    handle_reads!(tree, pool, PgConnection);

    async fn read_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Vec<(Hash, Node)>> {
        if at != ReadAt::Current || !needs_jit_guard(self.jit_off, starts) {
            let mut conn = self.pool.acquire().await?;
            return paths_on(&mut conn, &self.space, at, starts, siblings, false).await;
        }
        self.space.counters.round_trip(1);
        let mut conn = TxConnection::acquire(&self.pool).await?;
        let mut tx = conn.conn().begin().await?;
        let nodes = fetch_key_paths(&mut tx, &self.space, starts, siblings, true).await?;
        self.space.counters.round_trip(1);
        tx.rollback().await?;
        conn.release();
        Ok(nodes)
    }

    async fn commit(&self, batch: &UpdateBatch) -> Res<CommitOutcome> {
        let (pool, space, batch) = (self.pool.clone(), self.space.clone(), batch.clone());
        detached_store(move |caller_gone| async move {
            space.counters.round_trip(1);
            let mut conn = TxConnection::acquire(&pool).await?;
            let mut tx = conn.conn().begin().await?;
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
                let mut tx = conn.conn().begin().await.map_err(store)?;
                lock_namespace(&mut tx, &space)
                    .await
                    .map_err(TreeError::Store)?;
                let root = {
                    let locked = PostgresTxStore {
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
        write_detached!(self.pool, self.space, begin(), |tx, space| delete_all_on(
            &mut tx, space
        ))
    }

    async fn audit(&self, kind: LayoutKind) -> Res<Option<AuditReport>> {
        let mut audit = RowAudit::new(kind);
        let sink: &mut dyn RowSink = &mut audit;
        // One snapshot for every page.
        let mut conn = TxConnection::acquire(&self.pool).await?;
        let mut tx = conn.conn().begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        scan_rows_on(&mut tx, &self.space, sink).await?;
        tx.commit().await?;
        conn.release();
        Ok(Some(audit.finish()))
    }
}

impl TreeStore for PostgresTxStore<'_> {
    handle_reads!(tree, caller, PgConnection);

    async fn read_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Res<Vec<(Hash, Node)>> {
        let mut conn = self.conn.lock().await;
        let jit_guard = needs_jit_guard(false, starts);
        paths_on(&mut conn, &self.space, at, starts, siblings, jit_guard).await
    }

    async fn commit(&self, batch: &UpdateBatch) -> Res<CommitOutcome> {
        // No savepoint: every write of a commit is one statement
        // (`write_commit`), and a root that moved is found before it.
        let mut conn = self.conn.lock().await;
        commit_on(&mut conn, &self.space, batch).await
    }

    async fn delete_all(&self) -> Res<()> {
        let mut conn = self.conn.lock().await;
        delete_all_on(&mut conn, &self.space).await
    }

    async fn audit(&self, kind: LayoutKind) -> Res<Option<AuditReport>> {
        let mut audit = RowAudit::new(kind);
        let sink: &mut dyn RowSink = &mut audit;
        let mut conn = self.conn.lock().await;
        scan_rows_on(&mut conn, &self.space, sink).await?;
        Ok(Some(audit.finish()))
    }
}
