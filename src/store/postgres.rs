//! PostgreSQL store on sqlx: many namespaces per database, reference-counted
//! rows, a constant number of statements per commit.
//!
//! * Reads: one array-bound query per descent level while keys share nodes,
//!   then one bounded recursive query that walks every single-key path to
//!   its end. Every read by hash is a fenced primary-key probe (see
//!   [`fetch_nodes`]), so plans do not depend on statistics. Nodes the
//!   handle remembers ([`RecentNodes`]) are not read at all.
//! * Writes: one transaction per commit: a per-namespace advisory lock, the
//!   root check, one `DELETE` of the rows the batch takes to zero
//!   references, one `INSERT ... SELECT FROM UNNEST(...)` of the new rows
//!   (under a savepoint; an `ON CONFLICT` upsert when some already exist),
//!   one upsert for rows that lose references but survive, one root write:
//!   at most eleven statements with `BEGIN` and `COMMIT`, whatever the
//!   batch size.
//! * Inside a caller's transaction ([`PostgresStore::in_transaction`]) the
//!   same statements run under a savepoint; the advisory lock is held until
//!   the caller's transaction ends.

use std::collections::HashSet;
use std::sync::Arc;

use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::query::Query;
use sqlx::{Connection, PgConnection, PgPool, Postgres, Row};
use tokio::sync::Mutex;

use super::sql::{
    Changes, SqlStoreError, decode_root, decode_rows, fold, missing_reference, root_row,
};
use super::{CommitOutcome, Counters, PathStart, RecentNodes, StoreStats, TreeStore, UpdateBatch};
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};

/// Schema migrations, tracked in `ms_smt_migrations` (not sqlx's
/// `_sqlx_migrations`, which belongs to the host application).
const MIGRATIONS: &[(i64, &str, &str)] = &[(
    1,
    "nodes and roots",
    "CREATE TABLE ms_smt_nodes (
        namespace TEXT NOT NULL,
        hash BYTEA NOT NULL,
        l_hash BYTEA,
        r_hash BYTEA,
        leaf_key BYTEA,
        value BYTEA,
        sum BIGINT NOT NULL,
        refs BIGINT NOT NULL,
        PRIMARY KEY (namespace, hash)
    );
    CREATE TABLE ms_smt_roots (
        namespace TEXT PRIMARY KEY NOT NULL,
        hash BYTEA NOT NULL,
        sum BIGINT NOT NULL
    );",
)];

/// Path walks with at least this many starts turn JIT off for themselves
/// (see [`fetch_key_paths`]).
const JIT_GUARD_MIN_STARTS: usize = 32;

/// Batches with at least this many new rows try a plain `INSERT` first
/// (see [`insert_new_rows`]); below it the savepoint's two round trips
/// cost more than the upsert's overhead.
const PLAIN_INSERT_MIN_ROWS: usize = 256;

/// Advisory lock key of the migrations (an arbitrary constant: "mssmt").
const MIGRATION_LOCK: i64 = 0x006d_7373_6d74;

/// A tree store in a PostgreSQL database, bound to one namespace.
///
/// Cloning is cheap and shares the pool and the handle's [`RecentNodes`].
/// Sums are stored as the i64 with the same bits as the u64; rows carry a
/// reference count, one per tree position using them.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    namespace: Arc<str>,
    counters: Arc<Counters>,
    recent: Arc<RecentNodes>,
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
            namespace: Arc::from(namespace),
            counters: Arc::default(),
            recent: Arc::default(),
            jit_off: false,
        }
    }

    /// The same database, another namespace (an independent tree).
    pub fn namespace(&self, name: &str) -> Self {
        PostgresStore {
            pool: self.pool.clone(),
            namespace: Arc::from(name),
            counters: Arc::default(),
            recent: Arc::new(RecentNodes::new(self.recent.capacity())),
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
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Creates or upgrades the store's tables (`ms_smt_*`). Idempotent and
    /// safe to run concurrently (advisory lock); tracked in its own
    /// `ms_smt_migrations` table, so it coexists with the host's sqlx
    /// migrations.
    pub async fn migrate(&self) -> Res<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS ms_smt_migrations (
                version BIGINT PRIMARY KEY NOT NULL,
                description TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
        )
        .execute(&mut *tx)
        .await?;
        let current: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(version), 0)::BIGINT FROM ms_smt_migrations")
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
            sqlx::query("INSERT INTO ms_smt_migrations (version, description) VALUES ($1, $2)")
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
    /// the caller's own rows. Writes run under a savepoint. Use the default
    /// READ COMMITTED isolation: a write that loses a race re-reads the root,
    /// which a REPEATABLE READ snapshot would hide.
    pub fn in_transaction<'c>(&self, conn: &'c mut PgConnection) -> PostgresTxStore<'c> {
        PostgresTxStore {
            conn: Mutex::new(conn),
            namespace: self.namespace.clone(),
            counters: self.counters.clone(),
            recent: self.recent.clone(),
        }
    }
}

/// A [`PostgresStore`] namespace bound to a caller's open transaction; see
/// [`PostgresStore::in_transaction`].
#[derive(Debug)]
pub struct PostgresTxStore<'c> {
    conn: Mutex<&'c mut PgConnection>,
    namespace: Arc<str>,
    counters: Arc<Counters>,
    recent: Arc<RecentNodes>,
}

async fn load_root(conn: &mut PgConnection, ns: &str, counters: &Counters) -> Res<ComputedNode> {
    counters.round_trip(1);
    let row: Option<(Vec<u8>, i64)> =
        sqlx::query_as("SELECT hash, sum FROM ms_smt_roots WHERE namespace = $1")
            .bind(ns)
            .fetch_optional(&mut *conn)
            .await?;
    decode_root(ns, row)
}

/// Reads rows by hash. Every lookup by hash in this store is a primary-key
/// equality probe inside a LATERAL subquery fenced with `OFFSET 0`, never
/// `hash = ANY($2)`: for a namespace the statistics have not seen yet (a
/// tree just created), the planner estimates one row for `namespace = $1`
/// and scans the whole namespace filtering on the array, ~5 ms per call at
/// 25,000 rows and growing with the tree.
async fn fetch_nodes(
    conn: &mut PgConnection,
    ns: &str,
    hashes: &[Hash],
    counters: &Counters,
) -> Res<Vec<(Hash, Node)>> {
    let keys: Vec<&[u8]> = hashes.iter().map(|h| h.0.as_slice()).collect();
    counters.round_trip(1);
    let rows = sqlx::query(
        "SELECT n.hash, n.l_hash, n.r_hash, n.leaf_key, n.value, n.sum \
         FROM UNNEST($2::bytea[]) AS w(hash) CROSS JOIN LATERAL ( \
             SELECT * FROM ms_smt_nodes m WHERE m.namespace = $1 AND m.hash = w.hash \
             OFFSET 0) AS n",
    )
    .bind(ns)
    .bind(keys)
    .fetch_all(&mut *conn)
    .await?;
    let out = decode_rows(ns, &rows)?;
    counters.read(out.len() as u64);
    Ok(out)
}

/// Walks each start's key path server-side in one bounded recursive query
/// (at most 256 steps). Each step carries the whole row it read, so every
/// walked node is read once (siblings, for proofs, are one more probe per
/// branch). Every read is a LATERAL primary-key lookup fenced with
/// `OFFSET 0`: without the fence the planner flattens them into joins and,
/// with a large estimate for the recursive work table, picks a hash join
/// that scans the whole namespace on every step (minutes on a 2.4M-row
/// full tree). With it, the plan is one index probe per walked row
/// whatever the estimates. `get_bit` numbers bits least-significant first
/// within each byte, the tree's own bit order.
async fn fetch_key_paths(
    conn: &mut PgConnection,
    ns: &str,
    starts: &[PathStart],
    siblings: bool,
    jit_off: bool,
    counters: &Counters,
) -> Res<Vec<(Hash, Node)>> {
    // The planner's row estimate for a recursive query is a guess that
    // grows with the start array, and past `jit_above_cost` the server
    // JIT-compiles the plan: ~200 ms of LLVM work for a query that runs in
    // ~20 ms. Unless the session already runs without JIT, a large walk
    // runs in a transaction (a savepoint when the caller already holds
    // one) that sets `jit = off` locally and is rolled back afterwards,
    // leaving the session as it was. Small walks stay far below the
    // default threshold (the estimate is ~2,000 cost units per start).
    let guard = !jit_off && starts.len() >= JIT_GUARD_MIN_STARTS;
    let rows = if guard {
        counters.round_trip(1);
        let mut tx = conn.begin().await?;
        counters.round_trip(1);
        sqlx::query("SET LOCAL jit = off").execute(&mut *tx).await?;
        let rows = walk(&mut tx, ns, starts, siblings, counters).await?;
        counters.round_trip(1);
        tx.rollback().await?;
        rows
    } else {
        walk(conn, ns, starts, siblings, counters).await?
    };
    let out = decode_rows(ns, &rows)?;
    counters.read(out.len() as u64);
    Ok(out)
}

/// The walk query itself (see [`fetch_key_paths`]).
async fn walk(
    conn: &mut PgConnection,
    ns: &str,
    starts: &[PathStart],
    siblings: bool,
    counters: &Counters,
) -> Res<Vec<PgRow>> {
    let hashes: Vec<&[u8]> = starts.iter().map(|s| s.hash.0.as_slice()).collect();
    let levels: Vec<i32> = starts
        .iter()
        .map(|s| i32::try_from(s.level).unwrap_or(i32::MAX))
        .collect();
    let keys: Vec<&[u8]> = starts.iter().map(|s| s.key.0.as_slice()).collect();
    counters.round_trip(1);
    Ok(sqlx::query(
        "WITH RECURSIVE walk(hash, l_hash, r_hash, leaf_key, value, sum, lvl, key) AS ( \
             SELECT n.*, s.lvl, s.key \
             FROM UNNEST($2::bytea[], $3::int4[], $4::bytea[]) AS s(hash, lvl, key) \
             CROSS JOIN LATERAL ( \
                 SELECT m.hash, m.l_hash, m.r_hash, m.leaf_key, m.value, m.sum FROM ms_smt_nodes m \
                 WHERE m.namespace = $1 AND m.hash = s.hash OFFSET 0) AS n \
           UNION ALL \
             SELECT n.*, w.lvl + 1, w.key \
             FROM walk w CROSS JOIN LATERAL ( \
                 SELECT m.hash, m.l_hash, m.r_hash, m.leaf_key, m.value, m.sum FROM ms_smt_nodes m \
                 WHERE m.namespace = $1 \
                   AND m.hash = CASE WHEN get_bit(w.key, w.lvl) = 1 THEN w.r_hash ELSE w.l_hash END \
                 OFFSET 0) AS n \
             WHERE w.l_hash IS NOT NULL AND w.lvl < 256 \
         ) \
         SELECT hash, l_hash, r_hash, leaf_key, value, sum FROM walk \
         UNION ALL \
         SELECT n.* FROM walk w CROSS JOIN LATERAL ( \
             SELECT m.hash, m.l_hash, m.r_hash, m.leaf_key, m.value, m.sum FROM ms_smt_nodes m \
             WHERE m.namespace = $1 \
               AND m.hash = CASE WHEN get_bit(w.key, w.lvl) = 1 THEN w.l_hash ELSE w.r_hash END \
             OFFSET 0) AS n \
         WHERE $5 AND w.l_hash IS NOT NULL AND w.lvl < 256",
    )
    .bind(ns)
    .bind(hashes)
    .bind(levels)
    .bind(keys)
    .bind(siblings)
    .fetch_all(&mut *conn)
    .await?)
}

/// Check-and-apply inside an open transaction or savepoint. Returns
/// `RootMoved` without writing when the root is not `batch.old_root`.
async fn commit_on(
    conn: &mut PgConnection,
    ns: &str,
    batch: &UpdateBatch,
    counters: &Counters,
) -> Res<CommitOutcome> {
    counters.round_trip(1);
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('ms_smt:' || $1, 0))")
        .bind(ns)
        .execute(&mut *conn)
        .await?;
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
                "INSERT INTO ms_smt_roots (namespace, hash, sum) VALUES ($1, $2, $3) \
                 ON CONFLICT (namespace) DO UPDATE SET hash = EXCLUDED.hash, sum = EXCLUDED.sum",
            )
            .bind(ns)
            .bind(hash)
            .bind(sum)
            .execute(&mut *conn)
            .await?;
        }
        None => {
            sqlx::query("DELETE FROM ms_smt_roots WHERE namespace = $1")
                .bind(ns)
                .execute(&mut *conn)
                .await?;
        }
    }
    counters.written(changes.len() as u64);
    Ok(CommitOutcome::Committed)
}

/// Applies the net changes, writing each row once, in a constant number of
/// array-bound statements:
/// 1. one delete of the rows whose reference count the batch takes to zero
///    (located by fenced primary-key probes, see [`fetch_nodes`], and
///    deleted by row id), returning their hashes;
/// 2. the rows gaining references: a plain insert under a savepoint
///    ([`insert_new_rows`]), or an upsert when some already exist;
/// 3. the rows losing references without reaching zero: an upsert that
///    reports any count left at zero or below (a reference the store does
///    not hold), which abandons the transaction.
///
/// The commit holds the namespace's advisory lock, so no other writer can
/// change a count in between.
async fn apply_changes(
    conn: &mut PgConnection,
    ns: &str,
    changes: &Changes<'_>,
    counters: &Counters,
) -> Res<()> {
    let dropping = changes.select(|i| changes.delta[i] < 0);
    let mut deleted: HashSet<Vec<u8>, foldhash::fast::RandomState> = HashSet::default();
    if dropping.len() > 0 {
        counters.round_trip(1);
        let gone: Vec<(Vec<u8>,)> = sqlx::query_as(
            "DELETE FROM ms_smt_nodes WHERE ctid = ANY(ARRAY( \
                 SELECT n.ctid FROM UNNEST($2::bytea[], $3::int8[]) AS w(hash, delta) \
                 CROSS JOIN LATERAL ( \
                     SELECT ctid, refs FROM ms_smt_nodes m WHERE m.namespace = $1 AND m.hash = w.hash \
                     OFFSET 0) AS n \
                 WHERE n.refs + w.delta = 0)) \
             RETURNING hash",
        )
        .bind(ns)
        .bind(&dropping.hash)
        .bind(&dropping.delta)
        .fetch_all(&mut *conn)
        .await?;
        deleted.extend(gone.into_iter().map(|(h,)| h));
    }
    let adding = changes.select(|i| changes.delta[i] > 0);
    // Full trees share nodes all the time (equal leaves anywhere are one
    // row), so a plain insert would mostly fail; their batches carry plain
    // leaf rows (compacted trees store compacted leaves instead) and go
    // straight to the upsert.
    let shares_often =
        (0..adding.len()).any(|i| adding.leaf_key[i].is_none() && adding.value[i].is_some());
    let try_plain = !shares_often && adding.len() >= PLAIN_INSERT_MIN_ROWS;
    if adding.len() > 0 && (!try_plain || !insert_new_rows(conn, &adding, ns, counters).await?) {
        upsert(conn, ns, &adding, counters).await?;
    }
    let surviving = changes.select(|i| changes.delta[i] < 0 && !deleted.contains(changes.hash[i]));
    if surviving.len() > 0 {
        upsert(conn, ns, &surviving, counters).await?;
    }
    Ok(())
}

/// `INSERT`s every row of a [`Changes`] bound by [`bind_rows`]; the two
/// write paths below append their own tails.
macro_rules! insert_rows_sql {
    () => {
        "INSERT INTO ms_smt_nodes (namespace, hash, l_hash, r_hash, leaf_key, value, sum, refs) \
         SELECT $1, * FROM UNNEST($2::bytea[], $3::bytea[], $4::bytea[], $5::bytea[], $6::bytea[], $7::int8[], $8::int8[])"
    };
}

/// Binds the namespace and the row columns as `$1 .. $8` of
/// [`insert_rows_sql`].
fn bind_rows<'q>(
    query: Query<'q, Postgres, PgArguments>,
    ns: &'q str,
    rows: &'q Changes<'_>,
) -> Query<'q, Postgres, PgArguments> {
    query
        .bind(ns)
        .bind(&rows.hash)
        .bind(&rows.l_hash)
        .bind(&rows.r_hash)
        .bind(&rows.leaf_key)
        .bind(&rows.value)
        .bind(&rows.sum)
        .bind(&rows.delta)
}

/// Inserts `rows` as new rows with a plain `INSERT` under a savepoint: the
/// common case (fresh nodes) then skips `ON CONFLICT`'s speculative
/// insertion, which costs about as much again per row. Returns false, with
/// the savepoint rolled back, when some row already exists (identical
/// subtrees elsewhere in the tree); the caller then upserts instead (and
/// the server logs the unique violation, one line per such commit).
async fn insert_new_rows(
    conn: &mut PgConnection,
    rows: &Changes<'_>,
    ns: &str,
    counters: &Counters,
) -> Res<bool> {
    counters.round_trip(1);
    let mut savepoint = conn.begin().await?;
    counters.round_trip(1);
    let inserted = bind_rows(sqlx::query(insert_rows_sql!()), ns, rows)
        .execute(&mut *savepoint)
        .await;
    counters.round_trip(1);
    match inserted {
        Ok(_) => {
            savepoint.commit().await?;
            Ok(true)
        }
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            savepoint.rollback().await?;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Adds each row's delta to its reference count, creating missing rows.
/// A count left at zero or below means the batch dropped references the
/// store does not hold: the error abandons the transaction.
async fn upsert(
    conn: &mut PgConnection,
    ns: &str,
    rows: &Changes<'_>,
    counters: &Counters,
) -> Res<()> {
    counters.round_trip(1);
    let sql = concat!(
        "WITH up AS (",
        insert_rows_sql!(),
        " ON CONFLICT (namespace, hash) DO UPDATE SET refs = ms_smt_nodes.refs + EXCLUDED.refs \
          RETURNING hash, refs) \
         SELECT hash FROM up WHERE refs <= 0 LIMIT 1"
    );
    let bad = bind_rows(sqlx::query(sql), ns, rows)
        .fetch_optional(&mut *conn)
        .await?;
    match bad {
        Some(row) => Err(missing_reference(ns, row.try_get::<&[u8], _>(0)?)),
        None => Ok(()),
    }
}

async fn delete_all_on(conn: &mut PgConnection, ns: &str, counters: &Counters) -> Res<()> {
    counters.round_trip(3);
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('ms_smt:' || $1, 0))")
        .bind(ns)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM ms_smt_nodes WHERE namespace = $1")
        .bind(ns)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM ms_smt_roots WHERE namespace = $1")
        .bind(ns)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl TreeStore for PostgresStore {
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
        fetch_key_paths(
            &mut conn,
            &self.namespace,
            starts,
            siblings,
            self.jit_off,
            &self.counters,
        )
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
        let mut tx = self.pool.begin().await?;
        let outcome = commit_on(&mut tx, &self.namespace, batch, &self.counters).await?;
        self.counters.round_trip(1);
        match outcome {
            CommitOutcome::Committed => tx.commit().await?,
            CommitOutcome::RootMoved { .. } => tx.rollback().await?,
        }
        Ok(outcome)
    }

    async fn delete_all(&self) -> Res<()> {
        let mut tx = self.pool.begin().await?;
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

impl TreeStore for PostgresTxStore<'_> {
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
        fetch_key_paths(
            &mut conn,
            &self.namespace,
            starts,
            siblings,
            false,
            &self.counters,
        )
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
