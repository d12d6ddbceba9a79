//! Postgres's dialect: the statements behind the generic core
//! ([`Dialect`]): array-bound writes in one statement per commit, advisory
//! locks, the recursive path walk, the JIT guard.

use sqlx::{Executor, PgConnection, SqlStr};

use crate::descent::LeafChange;
use crate::dialect::{Arg, CommitRows, Dialect, KeyedRow, PathWalk, RowRead, Shared, arguments};
use crate::error::Res;
use crate::hash::Hash;
use crate::ledger::LedgerSql;
use crate::migrations::{Migration, MigrationSet};
use crate::node::{ComputedNode, Node};
use crate::reply_wait::{Bounded, Exchange, ReplyWait};
use crate::rows::NamespaceRow;
use crate::space::{
    NamespaceState, NsInfo, NsState, PathParams, keyed_rows, path_nodes, stored_key, sum_to_sql,
    walk_rows,
};
use crate::strata::{RowChange, RowKey, StratumHeight};

/// Path walks with at least this many starts turn JIT off for themselves
/// (see [`read_paths`](crate::store::TreeStore::read_paths)).
const JIT_GUARD_MIN_STARTS: usize = 32;

/// Advisory lock key of the migrations (an arbitrary constant: "mssmt").
const MIGRATION_LOCK: i64 = 0x006d_7373_6d74;

/// Advisory lock key of the store ("mssmt" then "all"): every commit holds
/// it shared beside its namespaces' own locks; a commit over more than
/// [`MAX_NAME_LOCKS`] namespaces holds it exclusive instead of theirs.
const STORE_LOCK: i64 = 0x6d73_736d_7461_6c6c;

/// The most namespaces a commit locks one by one: 64 is what Postgres's
/// lock table guarantees every transaction by default
/// (`max_locks_per_transaction`).
const MAX_NAME_LOCKS: usize = 64;

fn height_sql(height: StratumHeight) -> i32 {
    i32::try_from(height.get()).unwrap_or(i32::MAX)
}

impl Dialect for PgConnection {
    /// The ledger the session's `search_path` finds.
    const LEDGER: LedgerSql = LedgerSql {
        create: "CREATE TABLE IF NOT EXISTS ms_smt_migrations (
            migration_set TEXT NOT NULL DEFAULT 'ms-smt',
            version BIGINT NOT NULL,
            description TEXT NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            checksum BYTEA,
            PRIMARY KEY (migration_set, version)
        )",
        exists: "SELECT CAST(1 AS BIGINT) WHERE to_regclass('ms_smt_migrations') IS NOT NULL",
        has_checksums: "SELECT CAST(1 AS BIGINT) FROM pg_attribute \
             WHERE attrelid = to_regclass('ms_smt_migrations') AND attname = 'checksum' \
             AND NOT attisdropped",
        add_checksums: "ALTER TABLE ms_smt_migrations ADD COLUMN checksum BYTEA",
        has_sets: "SELECT CAST(1 AS BIGINT) FROM pg_attribute \
             WHERE attrelid = to_regclass('ms_smt_migrations') AND attname = 'migration_set' \
             AND NOT attisdropped",
        add_sets: "ALTER TABLE ms_smt_migrations
                ADD COLUMN migration_set TEXT NOT NULL DEFAULT 'ms-smt';
            ALTER TABLE ms_smt_migrations DROP CONSTRAINT ms_smt_migrations_pkey;
            ALTER TABLE ms_smt_migrations ADD PRIMARY KEY (migration_set, version);",
    };

    fn migrations(set: &MigrationSet) -> &'static [Migration] {
        set.postgres
    }

    const BEGIN_WRITE: Option<&'static str> = None;
    /// sqlx's savepoints are not safe to cancel (see [`write_commits`](Dialect::write_commits)).
    const SAVEPOINTS: bool = false;
    const SNAPSHOT: Option<&'static str> =
        Some("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
    const UNIX_NOW: &'static str = "CAST(EXTRACT(EPOCH FROM now()) AS BIGINT)";

    fn bound<F, T>(wait: ReplyWait, round_trip: F) -> Bounded<F>
    where
        F: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        Bounded::new(round_trip, wait.get())
    }

    async fn execute(&mut self, ex: Exchange<'_>, sql: SqlStr, args: &[Arg<'_>]) -> Res<u64> {
        let query = sqlx::query_with(sql, arguments::<sqlx::Postgres>(args)?);
        Ok(Self::exchange(ex, query.execute(&mut *self))
            .await?
            .rows_affected())
    }

    async fn fetch_all<T: Shared>(
        &mut self,
        ex: Exchange<'_>,
        sql: SqlStr,
        args: &[Arg<'_>],
    ) -> Res<Vec<T>> {
        let query = sqlx::query_as_with(sql, arguments::<sqlx::Postgres>(args)?);
        Self::exchange(ex, query.fetch_all(&mut *self)).await
    }

    async fn run_ddl(&mut self, ex: Exchange<'_>, sql: &'static str) -> Res<()> {
        Self::exchange(ex, Executor::execute(&mut *self, sqlx::raw_sql(sql))).await?;
        Ok(())
    }

    /// Up to `MAX_NAME_LOCKS` namespaces: the shared store lock, then a
    /// per-namespace advisory lock each, in the order of the lock keys, all
    /// in one statement. More: the store lock alone, exclusive (Postgres
    /// keeps advisory locks in a shared table sized for about
    /// `max_locks_per_transaction` per connection, and a commit over
    /// 10,000 trees would run out of it).
    async fn lock_namespaces(&mut self, spaces: &[&NamespaceState]) -> Res<()> {
        let Some(first) = spaces.first() else {
            return Ok(());
        };
        if spaces.len() > MAX_NAME_LOCKS {
            return xact_lock(self, first.exchange(), STORE_LOCK).await;
        }
        // The subquery's rows come in their sorted order, the store lock
        // first, and the locks are taken in that order.
        let names: Vec<&str> = spaces.iter().map(|s| &*s.name).collect();
        Self::exchange(
            first.exchange(),
            sqlx::query(
                "SELECT CASE WHEN shared THEN pg_advisory_xact_lock_shared(k) \
                         ELSE pg_advisory_xact_lock(k) END FROM ( \
                 SELECT $2::bigint AS k, true AS shared, 0 AS o \
                 UNION ALL \
                 SELECT DISTINCT hashtextextended('ms_smt:' || n, 0), false, 1 \
                 FROM UNNEST($1::text[]) AS n \
                 ORDER BY o, k) AS keys",
            )
            .bind(names)
            .bind(STORE_LOCK)
            .execute(&mut *self),
        )
        .await?;
        Ok(())
    }

    async fn lock_migrations(&mut self, ex: Exchange<'_>) -> Res<()> {
        xact_lock(self, ex, MIGRATION_LOCK).await
    }

    async fn create_namespaces(&mut self, spaces: &[&NamespaceState]) -> Res<()> {
        let Some(first) = spaces.first() else {
            return Ok(());
        };
        let names: Vec<&str> = spaces.iter().map(|s| &*s.name).collect();
        let heights: Vec<i32> = spaces.iter().map(|s| height_sql(s.height)).collect();
        Self::exchange(
            first.exchange(),
            sqlx::query(
                "INSERT INTO ms_smt_namespaces (name, height) \
             SELECT * FROM UNNEST($1::text[], $2::int4[]) ORDER BY 1 \
             ON CONFLICT (name) DO NOTHING",
            )
            .bind(names)
            .bind(heights)
            .execute(&mut *self),
        )
        .await?;
        Ok(())
    }

    async fn namespace_rows(&mut self, spaces: &[&NamespaceState]) -> Res<Vec<NamespaceRow>> {
        let Some(first) = spaces.first() else {
            return Ok(Vec::new());
        };
        let names: Vec<&str> = spaces.iter().map(|s| &*s.name).collect();
        Self::exchange(
            first.exchange(),
            sqlx::query_as(
                "SELECT name, id, CAST(height AS BIGINT), root_hash, root_sum, version, \
                 (SELECT MAX(p.version) FROM ms_smt_pins p WHERE p.ns = n.id), journal_from \
             FROM ms_smt_namespaces n WHERE name = ANY($1::text[])",
            )
            .bind(names)
            .fetch_all(&mut *self),
        )
        .await
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
    /// savepoint: see [`write_commits`](Dialect::write_commits) for why).
    async fn guard_walk(&mut self, space: &NamespaceState) -> Res<()> {
        Self::exchange(
            space.exchange(),
            sqlx::query("SET LOCAL jit = off").execute(&mut *self),
        )
        .await?;
        Ok(())
    }

    /// The walk query itself (see [`read_paths`](crate::store::TreeStore::read_paths)), for every walk's
    /// namespace at once. Every row read is a LATERAL primary-key probe
    /// fenced with `OFFSET 0`: without the fence the planner may flatten
    /// it into a join that scans the namespace.
    async fn walk_paths(&mut self, walks: &[PathWalk<'_>]) -> Res<Vec<Vec<(Hash, Node)>>> {
        let mut starts = WalkStarts::default();
        for (w, walk) in walks.iter().enumerate() {
            let params = PathParams::new(walk.info.height, walk.starts);
            for (i, depth) in params.depths.iter().enumerate() {
                starts.walk.push(i32::try_from(w).unwrap_or(i32::MAX));
                starts.ns.push(walk.info.id);
                starts.depth.push(i32::try_from(*depth).unwrap_or(i32::MAX));
                starts.sib.push(params.first_sibling[i]);
                starts.want.push(walk.siblings);
                starts.height.push(height_sql(walk.info.height));
            }
            starts.key.extend(params.key_paths());
        }
        let mut out: Vec<Vec<(Hash, Node)>> = walks.iter().map(|_| Vec::new()).collect();
        let Some(first) = walks.first().filter(|_| !starts.depth.is_empty()) else {
            return Ok(out);
        };
        let rows = Self::exchange(
            first.space.exchange(),
            sqlx::query(walk_sql())
                .bind(starts.walk)
                .bind(starts.ns)
                .bind(starts.depth)
                .bind(starts.key)
                .bind(starts.sib)
                .bind(starts.want)
                .bind(starts.height)
                .fetch_all(&mut *self),
        )
        .await?;
        for (w, rows) in split_walks(&rows)? {
            let Some((walk, nodes)) = walks.get(w).zip(out.get_mut(w)) else {
                continue;
            };
            let (root, rows) = walk_rows(rows)?;
            *nodes = path_nodes(walk.space, walk.info.height, root, rows)?;
        }
        Ok(out)
    }

    async fn read_rows(&mut self, reads: &[RowRead<'_>]) -> Res<Vec<Vec<KeyedRow>>> {
        let mut out: Vec<Vec<KeyedRow>> = reads.iter().map(|_| Vec::new()).collect();
        let Some(first) = reads.first() else {
            return Ok(out);
        };
        let (mut index, mut ns) = (Vec::new(), Vec::new());
        for (r, read) in reads.iter().enumerate() {
            index.extend(std::iter::repeat_n(
                i32::try_from(r).unwrap_or(i32::MAX),
                read.keys.len(),
            ));
            ns.extend(std::iter::repeat_n(read.info.id, read.keys.len()));
        }
        let (paths, depths) = key_arrays(reads.iter().flat_map(|r| r.keys.iter()));
        let rows: Vec<(i32, Vec<u8>, i32, Vec<u8>)> = Self::exchange(
            first.space.exchange(),
            sqlx::query_as(READ_ROWS)
                .bind(index)
                .bind(ns)
                .bind(paths)
                .bind(depths)
                .fetch_all(&mut *self),
        )
        .await?;
        for (r, path, depth, body) in rows {
            let r = usize::try_from(r).ok();
            if let Some((rows, read)) = r.and_then(|r| out.get_mut(r).zip(reads.get(r))) {
                rows.push((stored_key(read.space, &path, depth)?, body));
            }
        }
        Ok(out)
    }

    async fn read_rows_at(
        &mut self,
        space: &NamespaceState,
        info: NsInfo,
        version: i64,
        keys: &[RowKey],
    ) -> Res<Vec<(RowKey, Vec<u8>)>> {
        let (paths, depths) = key_arrays(keys.iter());
        let rows: Vec<(Vec<u8>, i32, Vec<u8>)> = Self::exchange(
            space.exchange(),
            sqlx::query_as(READ_ROWS_AT)
                .bind(info.id)
                .bind(paths)
                .bind(depths)
                .bind(version)
                .fetch_all(&mut *self),
        )
        .await?;
        keyed_rows(space, rows)
    }

    /// Writes every commit's row changes and new root in ONE statement:
    /// the upsert and the delete are data-modifying CTEs of the roots'
    /// UPDATE.
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
    async fn write_commits(&mut self, commits: &[CommitRows<'_>]) -> Res<()> {
        let Some(first) = commits.first() else {
            return Ok(());
        };
        let mut put = RowArrays::default();
        let mut gone = RowArrays::default();
        // While pins exist, the rows about to be replaced or deleted that a
        // pin may read are copied aside first (the CTEs all read the rows as
        // they were before the statement).
        let mut kept = RowArrays::default();
        let mut roots = RootArrays::default();
        let mut journal = JournalArrays::default();
        let mut versions = RootArrays::default();
        for commit in commits {
            let (id, version) = (commit.state.info.id, commit.state.version.saturating_add(1));
            for change in &commit.changes {
                match change {
                    RowChange::Put(key, body) => put.push(id, key, Some(body), version),
                    RowChange::Delete(key) => gone.push(id, key, None, version),
                }
                if let Some(max_pin) = commit.state.max_pin {
                    let (RowChange::Put(key, _) | RowChange::Delete(key)) = change;
                    kept.push(id, key, None, version);
                    kept.max_pin.push(max_pin);
                }
            }
            roots.push(id, &commit.new_root, version);
            roots.leaf_delta.push(commit.leaf_delta);
            if commit.state.journal.is_some() {
                journal.push(id, version, &commit.leaves);
                versions.push(id, &commit.new_root, version);
            }
        }
        Self::exchange(first.space.exchange(), sqlx::query(
            "WITH kept AS ( \
                 INSERT INTO ms_smt_history (ns, path, depth, from_version, to_version, body) \
                 SELECT n.ns, n.path, n.depth, n.version, k.v, n.body \
                 FROM UNNEST($1::int8[], $2::bytea[], $3::int4[], $4::int8[], $5::int8[]) \
                     AS k(ns, path, depth, v, max_pin) \
                 CROSS JOIN LATERAL ( \
                     SELECT * FROM ms_smt_strata m \
                     WHERE m.ns = k.ns AND m.path = k.path AND m.depth = k.depth OFFSET 0) AS n \
                 WHERE n.version <= k.max_pin), \
             put AS ( \
                 INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
                 SELECT * FROM UNNEST($6::int8[], $7::bytea[], $8::int4[], $9::bytea[], $10::int8[]) \
                 ON CONFLICT (ns, path, depth) DO UPDATE \
                 SET body = EXCLUDED.body, version = EXCLUDED.version), \
             gone AS ( \
                 DELETE FROM ms_smt_strata WHERE ctid = ANY(ARRAY( \
                     SELECT n.ctid FROM UNNEST($11::int8[], $12::bytea[], $13::int4[]) \
                         AS k(ns, path, depth) \
                     CROSS JOIN LATERAL ( \
                         SELECT ctid FROM ms_smt_strata m \
                         WHERE m.ns = k.ns AND m.path = k.path AND m.depth = k.depth \
                         OFFSET 0) AS n))), \
             changed AS ( \
                 INSERT INTO ms_smt_changes \
                     (ns, version, key, old_value, old_sum, new_value, new_sum) \
                 SELECT * FROM UNNEST($18::int8[], $19::int8[], $20::bytea[], $21::bytea[], \
                                      $22::int8[], $23::bytea[], $24::int8[])), \
             versioned AS ( \
                 INSERT INTO ms_smt_versions (ns, version, root_hash, root_sum, at) \
                 SELECT u.*, CAST(EXTRACT(EPOCH FROM now()) AS BIGINT) \
                 FROM UNNEST($25::int8[], $26::int8[], $27::bytea[], $28::int8[]) AS u) \
             UPDATE ms_smt_namespaces n SET root_hash = u.h, root_sum = u.s, version = u.v, \
                 leaves = CASE WHEN u.h IS NULL THEN 0 ELSE n.leaves + u.d END, \
                 leaves_since = CASE WHEN u.h IS NULL THEN NULL ELSE n.leaves_since END \
             FROM UNNEST($14::int8[], $15::bytea[], $16::int8[], $17::int8[], $29::int8[]) \
                 AS u(id, h, s, v, d) \
             WHERE n.id = u.id",
        )
        .bind(kept.ns)
        .bind(kept.path)
        .bind(kept.depth)
        .bind(kept.version)
        .bind(kept.max_pin)
        .bind(put.ns)
        .bind(put.path)
        .bind(put.depth)
        .bind(put.body)
        .bind(put.version)
        .bind(gone.ns)
        .bind(gone.path)
        .bind(gone.depth)
        .bind(roots.id)
        .bind(roots.hash)
        .bind(roots.sum)
        .bind(roots.version)
        .bind(journal.ns)
        .bind(journal.version)
        .bind(journal.key)
        .bind(journal.old_value)
        .bind(journal.old_sum)
        .bind(journal.new_value)
        .bind(journal.new_sum)
        .bind(versions.id)
        .bind(versions.version)
        .bind(versions.hash)
        .bind(versions.sum)
        .bind(roots.leaf_delta)
        .execute(&mut *self))
        .await?;
        for commit in commits {
            commit.space.fail("written")?;
        }
        Ok(())
    }

    /// One statement (see [`write_commits`](Dialect::write_commits) for why).
    async fn clear(&mut self, space: &NamespaceState, state: &NsState) -> Res<()> {
        Self::exchange(
            space.exchange(),
            sqlx::query(
                "WITH kept AS ( \
             INSERT INTO ms_smt_history (ns, path, depth, from_version, to_version, body) \
             SELECT ns, path, depth, version, $2, body FROM ms_smt_strata \
             WHERE ns = $1 AND version <= $3), \
         gone AS (DELETE FROM ms_smt_strata WHERE ns = $1) \
         UPDATE ms_smt_namespaces SET root_hash = NULL, root_sum = NULL, version = $2, \
             leaves = 0, leaves_since = NULL WHERE id = $1",
            )
            .bind(state.info.id)
            .bind(state.version.saturating_add(1))
            .bind(state.max_pin)
            .execute(&mut *self),
        )
        .await?;
        Ok(())
    }
}

/// The path walk's statement. Per start: `$1` its walk's index, `$2`
/// its namespace id, `$3` the depth of its first row, `$4` its key as a
/// 32-byte path, `$5` whether the sibling of its first row is wanted,
/// `$6` whether its walk wants sibling rows at all, `$7` its namespace's
/// stratum height.
///
/// Each walk step probes the row at the next depth on the key's path (the
/// path is cut out of the key in SQL, so a step carries 32 bytes) and
/// carries the row's body, so a path row is read once; sibling rows are
/// probed afterwards. Rows come back by walk, nearest the root first,
/// each with the root hash the statement saw for its namespace.
fn walk_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(walk_sql_text)
}

fn walk_sql_text() -> String {
    let step = |ns: &str, k: &str, d: &str| {
        format!(
            "SELECT m.path, m.body FROM ms_smt_strata m \
             WHERE m.ns = {ns} AND m.depth = {d} AND m.path = {} OFFSET 0",
            prefix_sql(k, d)
        )
    };
    let first = step("s.ns", "s.k", "s.depth");
    let next = step("w.ns", "w.k", "(w.depth + w.h)");
    let sib_below = sibling_sql("k", "(depth + h)");
    let sib_first = sibling_sql("k", "depth");
    format!(
        "WITH RECURSIVE s AS ( \
             SELECT * FROM UNNEST($1::int4[], $2::int8[], $3::int4[], $4::bytea[], $5::bool[], \
                                  $6::bool[], $7::int4[]) AS s(walk, ns, depth, k, sib, want, h)), \
         walk(walk, ns, h, want, depth, k, path, body) AS ( \
             SELECT s.walk, s.ns, s.h, s.want, s.depth, s.k, n.path, n.body \
             FROM s CROSS JOIN LATERAL ({first}) AS n \
           UNION ALL \
             SELECT w.walk, w.ns, w.h, w.want, w.depth + w.h, w.k, n.path, n.body \
             FROM walk w CROSS JOIN LATERAL ({next}) AS n \
             WHERE w.depth + w.h <= 256), \
         sibs(walk, ns, path, depth) AS ( \
             SELECT walk, ns, {sib_below}, depth + h FROM walk WHERE want AND depth + h <= 256 \
           UNION \
             SELECT walk, ns, {sib_first}, depth FROM s WHERE want AND sib), \
         found(walk, ns, path, depth, body) AS ( \
             SELECT walk, ns, path, depth, body FROM walk \
           UNION ALL \
             SELECT w.walk, w.ns, n.path, n.depth, n.body FROM sibs w CROSS JOIN LATERAL ( \
                 SELECT m.path, m.depth, m.body FROM ms_smt_strata m \
                 WHERE m.ns = w.ns AND m.path = w.path AND m.depth = w.depth OFFSET 0) AS n), \
         roots AS MATERIALIZED ( \
             SELECT id, root_hash FROM ms_smt_namespaces WHERE id = ANY($2::int8[])) \
         SELECT f.path, f.depth::int8, f.body, r.root_hash, f.walk \
         FROM found f JOIN roots r ON r.id = f.ns ORDER BY f.walk, f.depth"
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

/// The current rows at the keys `$3`/`$4` of the namespaces `$2`, each
/// with the index `$1` of its read.
const READ_ROWS: &str = "SELECT k.r, n.path, n.depth, n.body \
         FROM UNNEST($1::int4[], $2::int8[], $3::bytea[], $4::int4[]) AS k(r, ns, path, depth) \
         CROSS JOIN LATERAL ( \
             SELECT m.path, m.depth, m.body FROM ms_smt_strata m \
             WHERE m.ns = k.ns AND m.path = k.path AND m.depth = k.depth OFFSET 0) AS n";

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

/// The starts of a walk of several namespaces, as the statement's arrays.
#[derive(Default)]
struct WalkStarts {
    walk: Vec<i32>,
    ns: Vec<i64>,
    depth: Vec<i32>,
    key: Vec<Vec<u8>>,
    sib: Vec<bool>,
    want: Vec<bool>,
    height: Vec<i32>,
}

/// The rows of a walk of several namespaces, split by walk (the last
/// column; the statement returns them ordered by it).
fn split_walks(
    rows: &[sqlx::postgres::PgRow],
) -> Result<Vec<(usize, &[sqlx::postgres::PgRow])>, sqlx::Error> {
    use sqlx::Row;
    let mut out = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let walk: i32 = rows[start].try_get(4)?;
        let mut end = start + 1;
        while end < rows.len() && rows[end].try_get::<i32, _>(4)? == walk {
            end += 1;
        }
        out.push((
            usize::try_from(walk).unwrap_or(usize::MAX),
            &rows[start..end],
        ));
        start = end;
    }
    Ok(out)
}

/// Rows to write, delete or keep, as the statement's parallel arrays.
#[derive(Default)]
struct RowArrays<'a> {
    ns: Vec<i64>,
    path: Vec<&'a [u8]>,
    depth: Vec<i32>,
    body: Vec<&'a [u8]>,
    version: Vec<i64>,
    max_pin: Vec<i64>,
}

impl<'a> RowArrays<'a> {
    fn push(&mut self, ns: i64, key: &'a RowKey, body: Option<&'a Vec<u8>>, version: i64) {
        self.ns.push(ns);
        self.path.push(&key.path);
        self.depth
            .push(i32::try_from(key.depth).unwrap_or(i32::MAX));
        if let Some(body) = body {
            self.body.push(body);
        }
        self.version.push(version);
    }
}

/// New roots, as the statement's parallel arrays (hash and sum NULL for
/// the empty tree), and each commit's change of the leaf count.
#[derive(Default)]
struct RootArrays {
    id: Vec<i64>,
    hash: Vec<Option<Vec<u8>>>,
    sum: Vec<Option<i64>>,
    version: Vec<i64>,
    leaf_delta: Vec<i64>,
}

impl RootArrays {
    fn push(&mut self, id: i64, root: &ComputedNode, version: i64) {
        let empty = *root == ComputedNode::empty_root();
        self.id.push(id);
        self.hash.push((!empty).then(|| root.hash.0.to_vec()));
        self.sum.push((!empty).then(|| sum_to_sql(root.sum)));
        self.version.push(version);
    }
}

/// The change journal's rows, as the statement's parallel arrays.
#[derive(Default)]
struct JournalArrays<'a> {
    ns: Vec<i64>,
    version: Vec<i64>,
    key: Vec<&'a [u8]>,
    old_value: Vec<&'a [u8]>,
    old_sum: Vec<i64>,
    new_value: Vec<&'a [u8]>,
    new_sum: Vec<i64>,
}

impl<'a> JournalArrays<'a> {
    fn push(&mut self, ns: i64, version: i64, leaves: &'a [LeafChange]) {
        for change in leaves {
            self.ns.push(ns);
            self.version.push(version);
            self.key.push(&change.key.0);
            self.old_value.push(change.old.value());
            self.old_sum.push(sum_to_sql(change.old.sum()));
            self.new_value.push(change.new.value());
            self.new_sum.push(sum_to_sql(change.new.sum()));
        }
    }
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

/// The exclusive advisory lock `key`, until the transaction ends.
async fn xact_lock(conn: &mut PgConnection, ex: Exchange<'_>, key: i64) -> Res<()> {
    PgConnection::exchange(
        ex,
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(key)
            .execute(conn),
    )
    .await?;
    Ok(())
}
