//! SQLite's dialect: the statements and packed arguments behind the
//! generic core ([`Dialect`]), and what only SQLite needs (packed upserts and
//! deletes, the journal's rows, the path walk per row height).

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, Executor, SqlSafeStr, SqlStr, SqliteConnection};

use super::packed::{
    INDEX_CTE, INT_WIDTH, MAX_ROWS, PackedRow, PackedRows, PackedTexts, count, push_depth, push_int,
};
use crate::dialect::{Arg, CommitRows, Dialect, KeyedRow, PathWalk, RowRead, Shared, arguments};
use crate::error::Res;
use crate::hash::Hash;
use crate::ledger::LedgerSql;
use crate::migrations::{Migration, MigrationSet};
use crate::node::{ComputedNode, Node};
use crate::reply_wait::{Exchange, ReplyWait};
use crate::rows::NamespaceRow;
use crate::space::{
    NamespaceState, NsInfo, NsState, PathParams, keyed_rows, path_nodes, stored_key, sum_to_sql,
    walk_rows,
};
use crate::store::Counters;
use crate::strata::{RowChange, RowKey, StratumHeight};

impl Dialect for SqliteConnection {
    const LEDGER: LedgerSql = LedgerSql {
        create: "CREATE TABLE IF NOT EXISTS ms_smt_migrations (
            migration_set TEXT NOT NULL DEFAULT 'ms-smt',
            version INTEGER NOT NULL,
            description TEXT NOT NULL,
            applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
            checksum BLOB,
            PRIMARY KEY (migration_set, version)
        )",
        exists: "SELECT CAST(1 AS BIGINT) FROM sqlite_master \
             WHERE type = 'table' AND name = 'ms_smt_migrations'",
        has_checksums: "SELECT CAST(1 AS BIGINT) \
             FROM pragma_table_info('ms_smt_migrations') WHERE name = 'checksum'",
        add_checksums: "ALTER TABLE ms_smt_migrations ADD COLUMN checksum BLOB",
        has_sets: "SELECT CAST(1 AS BIGINT) \
             FROM pragma_table_info('ms_smt_migrations') WHERE name = 'migration_set'",
        // A key of its own needs a new table in SQLite.
        add_sets: "ALTER TABLE ms_smt_migrations RENAME TO ms_smt_migrations_before_sets;
            CREATE TABLE ms_smt_migrations (
                migration_set TEXT NOT NULL DEFAULT 'ms-smt',
                version INTEGER NOT NULL,
                description TEXT NOT NULL,
                applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
                checksum BLOB,
                PRIMARY KEY (migration_set, version)
            );
            INSERT INTO ms_smt_migrations (migration_set, version, description, applied_at, checksum)
                SELECT 'ms-smt', version, description, applied_at, checksum
                FROM ms_smt_migrations_before_sets;
            DROP TABLE ms_smt_migrations_before_sets;",
    };

    fn migrations(set: &MigrationSet) -> &'static [Migration] {
        set.sqlite
    }

    /// Takes the write lock up front, so concurrent writers wait (busy
    /// timeout) instead of failing with "database is locked".
    const BEGIN_WRITE: Option<&'static str> = Some("BEGIN IMMEDIATE");
    const SAVEPOINTS: bool = true;
    const SNAPSHOT: Option<&'static str> = None;
    const UNIX_NOW: &'static str = "unixepoch()";

    fn push_param(sql: &mut String, _n: usize) {
        sql.push('?');
    }

    /// No bound on the reply: SQLite runs in the process.
    async fn execute(&mut self, ex: Exchange<'_>, sql: SqlStr, args: &[Arg<'_>]) -> Res<u64> {
        let query = sqlx::query_with(sql, arguments::<sqlx::Sqlite>(args)?);
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
        let query = sqlx::query_as_with(sql, arguments::<sqlx::Sqlite>(args)?);
        Self::exchange(ex, query.fetch_all(&mut *self)).await
    }

    async fn run_ddl(&mut self, ex: Exchange<'_>, sql: &'static str) -> Res<()> {
        Self::exchange(ex, Executor::execute(&mut *self, sqlx::raw_sql(sql))).await?;
        Ok(())
    }

    /// Nothing to take: an SQLite write transaction (`BEGIN IMMEDIATE`, or
    /// a write in the caller's transaction) holds the database's write lock.
    async fn lock_namespaces(&mut self, _: &[&NamespaceState]) -> Res<()> {
        Ok(())
    }

    /// `BEGIN IMMEDIATE` holds the write lock already.
    async fn lock_migrations(&mut self, _ex: Exchange<'_>) -> Res<()> {
        Ok(())
    }

    async fn create_namespaces(&mut self, spaces: &[&NamespaceState]) -> Res<()> {
        let Some(first) = spaces.first() else {
            return Ok(());
        };
        let names = PackedTexts::new(
            spaces
                .iter()
                .map(|s| (&*s.name, i64::from(s.height.get() as u8))),
        );
        let sql = format!(
            "WITH RECURSIVE {INDEX_CTE}, {NAMES_CTE} \
             INSERT INTO ms_smt_namespaces (name, height) SELECT name, int FROM k WHERE true \
             ON CONFLICT (name) DO NOTHING"
        );
        Dialect::execute(
            self,
            first.exchange(),
            AssertSqlSafe(sql).into_sql_str(),
            &texts_args(&names),
        )
        .await?;
        Ok(())
    }

    async fn namespace_rows(&mut self, spaces: &[&NamespaceState]) -> Res<Vec<NamespaceRow>> {
        let Some(first) = spaces.first() else {
            return Ok(Vec::new());
        };
        let names = PackedTexts::new(spaces.iter().map(|s| (&*s.name, 0)));
        let sql = format!(
            "WITH RECURSIVE {INDEX_CTE}, {NAMES_CTE} \
             SELECT n.name, n.id, CAST(n.height AS BIGINT), n.root_hash, n.root_sum, n.version, \
                 (SELECT MAX(p.version) FROM ms_smt_pins p WHERE p.ns = n.id), n.journal_from \
             FROM k CROSS JOIN ms_smt_namespaces n ON n.name = k.name"
        );
        Dialect::fetch_all(
            self,
            first.exchange(),
            AssertSqlSafe(sql).into_sql_str(),
            &texts_args(&names),
        )
        .await
    }

    fn walk_needs_guard(_: bool, _: usize) -> bool {
        false
    }

    async fn guard_walk(&mut self, _: &NamespaceState) -> Res<()> {
        Ok(())
    }

    /// Reads the rows on the paths of every walk's starts (each from the
    /// row holding its start level down to where its key's path ends)
    /// and, where the walk asks, the sibling rows at each row boundary, in
    /// one statement per stratum height (and chunk of starts); returns
    /// each walk's nodes, rows nearest the root first. The walk carries
    /// each row's body, so a path row is probed once; sibling rows are
    /// probed afterwards. Walks name distinct namespaces.
    ///
    /// For start `i` (`PathParams`: shared rows are walked once), `?1`
    /// holds its namespace id, `?4` the depth of its first row (3 digits),
    /// then `1` when that row's sibling is wanted too and `1` when its walk
    /// wants sibling rows at all, `?5` the path of the row at depth
    /// `j * height` in 32 bytes at `i * W + j * 32` (W = `?7`), and `?6`
    /// the path of that row's sibling; the query cuts the
    /// `(depth + 7) / 8` real bytes out.
    async fn walk_paths(&mut self, walks: &[PathWalk<'_>]) -> Res<Vec<Vec<(Hash, Node)>>> {
        let mut out: Vec<Vec<(Hash, Node)>> = walks.iter().map(|_| Vec::new()).collect();
        let mut heights: Vec<StratumHeight> = walks.iter().map(|w| w.info.height).collect();
        heights.sort_unstable_by_key(|h| h.get());
        heights.dedup();
        for height in heights {
            let mut starts: Vec<(usize, PathParams)> = Vec::new();
            for (w, walk) in walks.iter().enumerate() {
                if walk.info.height == height {
                    starts.push((w, PathParams::new(height, walk.starts)));
                }
            }
            walk_height(self, walks, height, &starts, &mut out).await?;
        }
        Ok(out)
    }

    async fn read_rows(&mut self, reads: &[RowRead<'_>]) -> Res<Vec<Vec<KeyedRow>>> {
        let mut out: Vec<Vec<KeyedRow>> = reads.iter().map(|_| Vec::new()).collect();
        let Some(first) = reads.first() else {
            return Ok(out);
        };
        let sql = shared_sql(format!(
            "WITH RECURSIVE {INDEX_CTE}, \
             k(i, ns, depth) AS (SELECT i, {NS}, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) \
                 FROM idx) \
             SELECT n.ns, n.path, n.depth, n.body FROM k CROSS JOIN ms_smt_strata n \
               ON n.ns = k.ns AND n.path = substr(?3, k.i * 32 + 1, (k.depth + 7) / 8) \
              AND n.depth = k.depth"
        ));
        let rows = reads.iter().flat_map(|r| {
            r.keys.iter().map(|key| PackedRow {
                ns: r.info.id,
                key,
                body: &[],
                a: 0,
                b: 0,
            })
        });
        let by_ns: HashMap<i64, usize> = reads
            .iter()
            .enumerate()
            .map(|(i, r)| (r.info.id, i))
            .collect();
        for chunk in PackedRows::chunks(rows) {
            let args = packed_args(&chunk, Columns::KEYS);
            let rows: Vec<(i64, Vec<u8>, i64, Vec<u8>)> = Dialect::fetch_all(
                self,
                first.space.exchange(),
                AssertSqlSafe(sql.clone()).into_sql_str(),
                &args,
            )
            .await?;
            for (ns, path, depth, body) in rows {
                if let Some((rows, read)) = by_ns
                    .get(&ns)
                    .and_then(|&r| out.get_mut(r).zip(reads.get(r)))
                {
                    rows.push((stored_key(read.space, &path, depth)?, body));
                }
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
        let sql = shared_sql(format!(
            "WITH RECURSIVE {INDEX_CTE}, \
             k(i, ns, depth, v) AS (SELECT i, {NS}, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER), \
                 {A} FROM idx), \
             kp(ns, path, depth, v) AS \
                 (SELECT ns, substr(?3, i * 32 + 1, (depth + 7) / 8), depth, v FROM k) \
             SELECT path, depth, body FROM ( \
                 SELECT kp.path AS path, kp.depth AS depth, COALESCE( \
                     (SELECT n.body FROM ms_smt_strata n WHERE n.ns = kp.ns AND n.path = kp.path \
                        AND n.depth = kp.depth AND n.version <= kp.v), \
                     (SELECT h.body FROM ms_smt_history h WHERE h.ns = kp.ns AND h.path = kp.path \
                        AND h.depth = kp.depth AND h.from_version <= kp.v \
                        AND h.to_version > kp.v)) AS body \
                 FROM kp) \
             WHERE body IS NOT NULL"
        ));
        let rows = keys.iter().map(|key| PackedRow {
            ns: info.id,
            key,
            body: &[],
            a: version,
            b: 0,
        });
        let mut out = Vec::with_capacity(keys.len());
        for chunk in PackedRows::chunks(rows) {
            let args = packed_args(&chunk, Columns::KEYS | Columns::A);
            let rows: Vec<(Vec<u8>, i64, Vec<u8>)> = Dialect::fetch_all(
                self,
                space.exchange(),
                AssertSqlSafe(sql.clone()).into_sql_str(),
                &args,
            )
            .await?;
            out.extend(keyed_rows(space, rows)?);
        }
        Ok(out)
    }

    /// Keeps the rows a pin may read (one packed statement), writes the
    /// changed rows (one packed upsert) and deletes the rows left empty
    /// (one packed delete), in key order, for every commit together; then
    /// moves every root (one packed update).
    async fn write_commits(&mut self, commits: &[CommitRows<'_>]) -> Res<()> {
        let Some(first) = commits.first() else {
            return Ok(());
        };
        let counters = &first.space.counters;
        let version = |c: &CommitRows<'_>| c.state.version.saturating_add(1);
        let kept = commits.iter().flat_map(|c| {
            let max_pin = c.state.max_pin;
            c.changes
                .iter()
                .filter(move |_| max_pin.is_some())
                .map(move |change| {
                    let (RowChange::Put(key, _) | RowChange::Delete(key)) = change;
                    PackedRow {
                        ns: c.state.info.id,
                        key,
                        body: &[],
                        a: version(c),
                        b: max_pin.unwrap_or(i64::MIN),
                    }
                })
        });
        // Collected before any await: the statements' futures then hold no
        // closures (which the `Send` check cannot see through).
        let kept: Vec<PackedRow<'_>> = kept.collect();
        let keep_sql = format!(
            "WITH RECURSIVE {INDEX_CTE}, \
             k(i, ns, depth, v, max_pin) AS (SELECT i, {NS}, \
                 CAST(substr(?4, i * 3 + 1, 3) AS INTEGER), {A}, {B} FROM idx) \
             INSERT INTO ms_smt_history (ns, path, depth, from_version, to_version, body) \
             SELECT n.ns, n.path, n.depth, n.version, k.v, n.body FROM k CROSS JOIN ms_smt_strata n \
               ON n.ns = k.ns AND n.path = substr(?3, k.i * 32 + 1, (k.depth + 7) / 8) \
              AND n.depth = k.depth \
             WHERE n.version <= k.max_pin"
        );
        execute_packed(
            self,
            counters,
            keep_sql,
            kept,
            Columns::KEYS | Columns::A | Columns::B,
        )
        .await?;
        let puts = commits.iter().flat_map(|c| {
            c.changes.iter().filter_map(move |change| match change {
                RowChange::Put(key, body) => Some(PackedRow {
                    ns: c.state.info.id,
                    key,
                    body,
                    a: version(c),
                    b: 0,
                }),
                RowChange::Delete(_) => None,
            })
        });
        let puts: Vec<PackedRow<'_>> = puts.collect();
        let put_sql = format!(
            "WITH RECURSIVE {INDEX_CTE}, \
             r(i, ns, depth, v) AS (SELECT i, {NS}, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER), \
                 {A_AFTER_BODIES} FROM idx) \
             INSERT INTO ms_smt_strata (ns, path, depth, body, version) \
             SELECT ns, substr(?3, i * 32 + 1, (depth + 7) / 8), depth, \
                    substr(?5, CAST(substr(?6, i * 20 + 1, 20) AS INTEGER) + 1, \
                           CAST(substr(?7, i * 20 + 1, 20) AS INTEGER)), v \
             FROM r WHERE true \
             ON CONFLICT (ns, path, depth) DO UPDATE \
             SET body = excluded.body, version = excluded.version"
        );
        execute_packed(
            self,
            counters,
            put_sql,
            puts,
            Columns::KEYS | Columns::BODIES | Columns::A,
        )
        .await?;
        let deletes = commits.iter().flat_map(|c| {
            c.changes.iter().filter_map(move |change| match change {
                RowChange::Delete(key) => Some(PackedRow {
                    ns: c.state.info.id,
                    key,
                    body: &[],
                    a: 0,
                    b: 0,
                }),
                RowChange::Put(..) => None,
            })
        });
        let deletes: Vec<PackedRow<'_>> = deletes.collect();
        let delete_sql = format!(
            "WITH RECURSIVE {INDEX_CTE}, \
             k(i, ns, depth) AS (SELECT i, {NS}, CAST(substr(?4, i * 3 + 1, 3) AS INTEGER) \
                 FROM idx) \
             DELETE FROM ms_smt_strata WHERE id IN \
                 (SELECT n.id FROM k CROSS JOIN ms_smt_strata n \
                    ON n.ns = k.ns AND n.path = substr(?3, k.i * 32 + 1, (k.depth + 7) / 8) \
                   AND n.depth = k.depth)"
        );
        execute_packed(self, counters, delete_sql, deletes, Columns::KEYS).await?;
        write_journal(self, counters, commits).await?;
        for commit in commits {
            commit.space.fail("written")?;
        }
        set_roots(self, counters, commits).await
    }

    /// One key range of rows, then the root.
    async fn clear(&mut self, space: &NamespaceState, state: &NsState) -> Res<()> {
        let id = state.info.id;
        let version = state.version.saturating_add(1);
        if let Some(max_pin) = state.max_pin {
            SqliteConnection::exchange(
                space.exchange(),
                sqlx::query(
                    "INSERT INTO ms_smt_history (ns, path, depth, from_version, to_version, body) \
             SELECT ns, path, depth, version, ?2, body FROM ms_smt_strata \
             WHERE ns = ?1 AND version <= ?3",
                )
                .bind(id)
                .bind(version)
                .bind(max_pin)
                .execute(&mut *self),
            )
            .await?;
        }
        SqliteConnection::exchange(
            space.exchange(),
            sqlx::query("DELETE FROM ms_smt_strata WHERE ns = ?")
                .bind(id)
                .execute(&mut *self),
        )
        .await?;
        SqliteConnection::exchange(
            space.exchange(),
            sqlx::query(
                "UPDATE ms_smt_namespaces SET root_hash = NULL, root_sum = NULL, version = ?, \
             leaves = 0, leaves_since = NULL WHERE id = ?",
            )
            .bind(version)
            .bind(id)
            .execute(&mut *self),
        )
        .await?;
        Ok(())
    }
}

/// The reply wait of the statements this file sends itself: none (SQLite
/// runs in the process; see [`Dialect::bound`]).
const NO_WAIT: ReplyWait = ReplyWait::Default;

/// The packed columns a statement reads, and so binds: always `?1`
/// namespaces, `?2` the count, `?3` paths and `?4` depths; then, in this
/// order and numbered on, bodies (three parameters), the first integers
/// and the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Columns(u8);

impl Columns {
    const KEYS: Columns = Columns(0);
    const BODIES: Columns = Columns(1);
    const A: Columns = Columns(2);
    const B: Columns = Columns(4);

    fn has(self, other: Columns) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Columns {
    type Output = Columns;

    fn bitor(self, other: Columns) -> Columns {
        Columns(self.0 | other.0)
    }
}

/// Row `i`'s namespace id in a packed statement.
const NS: &str = "CAST(substr(?1, i * 20 + 1, 20) AS INTEGER)";
/// Row `i`'s first integer, in a statement without bodies.
const A: &str = "CAST(substr(?5, i * 20 + 1, 20) AS INTEGER)";
/// Row `i`'s second integer, in a statement without bodies.
const B: &str = "CAST(substr(?6, i * 20 + 1, 20) AS INTEGER)";
/// Row `i`'s first integer, in a statement with bodies.
const A_AFTER_BODIES: &str = "CAST(substr(?8, i * 20 + 1, 20) AS INTEGER)";

/// The packed texts of [`PackedTexts`] as `k(name, int)`: `?2` the count,
/// `?3` the texts, `?4` their offsets, `?5` their lengths, `?6` the
/// integers.
const NAMES_CTE: &str = "k(name, int) AS (SELECT \
     CAST(substr(?3, CAST(substr(?4, i * 20 + 1, 20) AS INTEGER) + 1, \
                 CAST(substr(?5, i * 20 + 1, 20) AS INTEGER)) AS TEXT), \
     CAST(substr(?6, i * 20 + 1, 20) AS INTEGER) FROM idx)";

/// The arguments of a [`NAMES_CTE`] statement (`?1` unused but bound, so
/// the numbering matches the row statements').
fn texts_args(texts: &PackedTexts) -> Vec<Arg<'_>> {
    vec![
        Arg::Int(0),
        Arg::Int(count(texts.len)),
        Arg::Bytes(&texts.text),
        Arg::Bytes(&texts.at),
        Arg::Bytes(&texts.text_len),
        Arg::Bytes(&texts.int),
    ]
}

/// The arguments of a packed statement for one chunk (see [`Columns`]).
fn packed_args(chunk: &PackedRows, columns: Columns) -> Vec<Arg<'_>> {
    let mut args = vec![
        Arg::Bytes(&chunk.ns),
        Arg::Int(count(chunk.len)),
        Arg::Bytes(&chunk.path),
        Arg::Bytes(&chunk.depth),
    ];
    if columns.has(Columns::BODIES) {
        args.extend([
            Arg::Bytes(&chunk.body),
            Arg::Bytes(&chunk.body_at),
            Arg::Bytes(&chunk.body_len),
        ]);
    }
    if columns.has(Columns::A) {
        args.push(Arg::Bytes(&chunk.a));
    }
    if columns.has(Columns::B) {
        args.push(Arg::Bytes(&chunk.b));
    }
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
    counters: &Counters,
    sql: String,
    rows: impl IntoIterator<Item = PackedRow<'a>>,
    columns: Columns,
) -> Res<()> {
    let sql = shared_sql(sql);
    for chunk in PackedRows::chunks(rows) {
        let args = packed_args(&chunk, columns);
        Dialect::execute(
            &mut *conn,
            Exchange::counted(NO_WAIT, counters),
            AssertSqlSafe(sql.clone()).into_sql_str(),
            &args,
        )
        .await?;
    }
    Ok(())
}

/// Writes the change journal of every commit whose namespace keeps one
/// (`journal.rs`): its leaf changes and its root, two statements over JSON
/// arrays of numbers and hex (built here from our own values only).
async fn write_journal(
    conn: &mut SqliteConnection,
    counters: &Counters,
    commits: &[CommitRows<'_>],
) -> Res<()> {
    use std::fmt::Write;
    let mut changes = String::from("[");
    let mut versions = String::from("[");
    for commit in commits.iter().filter(|c| c.state.journal.is_some()) {
        let (ns, version) = (commit.state.info.id, commit.state.version.saturating_add(1));
        for c in &commit.leaves {
            let sep = if changes.len() > 1 { "," } else { "" };
            // Writing to a String cannot fail.
            let _ = write!(
                changes,
                "{sep}[{ns},{version},\"{}\",\"{}\",{},\"{}\",{}]",
                hex::encode(c.key.0),
                hex::encode(c.old.value()),
                sum_to_sql(c.old.sum()),
                hex::encode(c.new.value()),
                sum_to_sql(c.new.sum()),
            );
        }
        let sep = if versions.len() > 1 { "," } else { "" };
        let root = &commit.new_root;
        let _ = if *root == ComputedNode::empty_root() {
            write!(versions, "{sep}[{ns},{version},null,null]")
        } else {
            write!(
                versions,
                "{sep}[{ns},{version},\"{}\",{}]",
                hex::encode(root.hash.0),
                sum_to_sql(root.sum)
            )
        };
    }
    if versions.len() == 1 {
        return Ok(());
    }
    changes.push(']');
    versions.push(']');
    SqliteConnection::exchange(
        Exchange::counted(NO_WAIT, counters),
        sqlx::query(
            "INSERT INTO ms_smt_changes (ns, version, key, old_value, old_sum, new_value, new_sum) \
         SELECT value ->> 0, value ->> 1, unhex(value ->> 2), unhex(value ->> 3), value ->> 4, \
                unhex(value ->> 5), value ->> 6 FROM json_each(?1)",
        )
        .bind(changes)
        .execute(&mut *conn),
    )
    .await?;
    SqliteConnection::exchange(
        Exchange::counted(NO_WAIT, counters),
        sqlx::query(
            "INSERT INTO ms_smt_versions (ns, version, root_hash, root_sum, at) \
         SELECT value ->> 0, value ->> 1, unhex(value ->> 2), value ->> 3, unixepoch() \
         FROM json_each(?1)",
        )
        .bind(versions)
        .execute(&mut *conn),
    )
    .await?;
    Ok(())
}

/// Moves every commit's root, version and leaf count, in one packed
/// statement: `?1` the namespace ids, `?3` the root hashes (32 bytes each;
/// ignored where the tree is empty), `?4` 1 where the tree is not empty,
/// `?5` the root sums, `?6` the versions, `?7` the leaf count changes.
async fn set_roots(
    conn: &mut SqliteConnection,
    counters: &Counters,
    commits: &[CommitRows<'_>],
) -> Res<()> {
    if let [commit] = commits {
        // One namespace: the plain statement, no packing.
        let root = &commit.new_root;
        let root = (*root != ComputedNode::empty_root())
            .then(|| (root.hash.0.to_vec(), sum_to_sql(root.sum)));
        let (hash, sum) = root.unzip();
        // An emptied tree's count is exact whatever it was.
        SqliteConnection::exchange(
            Exchange::counted(NO_WAIT, counters),
            sqlx::query(
                "UPDATE ms_smt_namespaces SET root_hash = ?1, root_sum = ?2, version = ?3, \
                 leaves = CASE WHEN ?1 IS NULL THEN 0 ELSE leaves + ?4 END, \
                 leaves_since = CASE WHEN ?1 IS NULL THEN NULL ELSE leaves_since END \
             WHERE id = ?5",
            )
            .bind(hash)
            .bind(sum)
            .bind(commit.state.version.saturating_add(1))
            .bind(commit.leaf_delta)
            .bind(commit.state.info.id)
            .execute(&mut *conn),
        )
        .await?;
        return Ok(());
    }
    let (mut ids, mut hashes, mut present, mut sums, mut versions, mut deltas) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for commit in commits {
        let root = &commit.new_root;
        let empty = *root == ComputedNode::empty_root();
        push_int(&mut ids, commit.state.info.id);
        hashes.extend_from_slice(&root.hash.0);
        push_int(&mut present, i64::from(!empty));
        push_int(&mut sums, sum_to_sql(root.sum));
        push_int(&mut versions, commit.state.version.saturating_add(1));
        push_int(&mut deltas, commit.leaf_delta);
    }
    let sql = format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         u(id, h, s, v, d) AS (SELECT {NS}, \
             CASE WHEN {PRESENT} = 1 THEN substr(?3, i * 32 + 1, 32) END, \
             CASE WHEN {PRESENT} = 1 THEN CAST(substr(?5, i * 20 + 1, 20) AS INTEGER) END, \
             CAST(substr(?6, i * 20 + 1, 20) AS INTEGER), \
             CAST(substr(?7, i * 20 + 1, 20) AS INTEGER) FROM idx) \
         UPDATE ms_smt_namespaces SET root_hash = u.h, root_sum = u.s, version = u.v, \
             leaves = CASE WHEN u.h IS NULL THEN 0 ELSE leaves + u.d END, \
             leaves_since = CASE WHEN u.h IS NULL THEN NULL ELSE leaves_since END \
         FROM u WHERE ms_smt_namespaces.id = u.id"
    );
    let args = [
        Arg::Bytes(&ids),
        Arg::Int(count(commits.len())),
        Arg::Bytes(&hashes),
        Arg::Bytes(&present),
        Arg::Bytes(&sums),
        Arg::Bytes(&versions),
        Arg::Bytes(&deltas),
    ];
    Dialect::execute(
        conn,
        Exchange::counted(NO_WAIT, counters),
        AssertSqlSafe(sql).into_sql_str(),
        &args,
    )
    .await?;
    Ok(())
}

/// Row `i` of [`set_roots`] holds a tree (`?4`).
const PRESENT: &str = "CAST(substr(?4, i * 20 + 1, 20) AS INTEGER)";

/// The walks of one stratum height (`starts`: each walk's index and its
/// [`PathParams`]), a statement per chunk of starts; each walk's nodes go
/// to its entry of `out`.
async fn walk_height(
    conn: &mut SqliteConnection,
    walks: &[PathWalk<'_>],
    height: StratumHeight,
    starts: &[(usize, PathParams)],
    out: &mut [Vec<(Hash, Node)>],
) -> Res<()> {
    let h = height.get();
    let per_key = PathParams::width(height);
    let sql = shared_sql(format!(
        "WITH RECURSIVE {INDEX_CTE}, \
         starts(i, ns, depth, sib, want) AS ( \
             SELECT i, {NS}, CAST(substr(?4, i * 5 + 1, 3) AS INTEGER), \
                    CAST(substr(?4, i * 5 + 4, 1) AS INTEGER) = 1, \
                    CAST(substr(?4, i * 5 + 5, 1) AS INTEGER) = 1 \
             FROM idx), \
         walk(i, ns, want, depth, path, body) AS ( \
             SELECT s.i, s.ns, s.want, s.depth, n.path, n.body \
             FROM starts s CROSS JOIN ms_smt_strata n \
               ON n.ns = s.ns AND n.path = substr(?5, s.i * ?7 + (s.depth / ?3) * 32 + 1, \
                                                   (s.depth + 7) / 8) \
              AND n.depth = s.depth \
           UNION ALL \
             SELECT w.i, w.ns, w.want, w.depth + ?3, n.path, n.body \
             FROM walk w CROSS JOIN ms_smt_strata n \
               ON n.ns = w.ns AND n.path = substr(?5, w.i * ?7 + ((w.depth + ?3) / ?3) * 32 + 1, \
                                                   (w.depth + ?3 + 7) / 8) \
              AND n.depth = w.depth + ?3 \
             WHERE w.depth + ?3 <= 256), \
         sibs(ns, path, depth) AS ( \
             SELECT ns, substr(?6, i * ?7 + ((depth + ?3) / ?3) * 32 + 1, (depth + ?3 + 7) / 8), \
                    depth + ?3 \
             FROM walk WHERE want AND depth + ?3 <= 256 \
           UNION \
             SELECT ns, substr(?6, i * ?7 + (depth / ?3) * 32 + 1, (depth + 7) / 8), depth \
             FROM starts WHERE want AND sib), \
         roots(ns, root) AS MATERIALIZED ( \
             SELECT id, root_hash FROM ms_smt_namespaces WHERE id IN (SELECT ns FROM starts)), \
         found(ns, path, depth, body) AS ( \
             SELECT ns, path, depth, body FROM walk \
           UNION ALL \
             SELECT w.ns, n.path, n.depth, n.body FROM sibs w CROSS JOIN ms_smt_strata n \
               ON n.ns = w.ns AND n.path = w.path AND n.depth = w.depth) \
         SELECT f.path, f.depth, f.body, r.root, f.ns FROM found f CROSS JOIN roots r ON r.ns = f.ns \
         ORDER BY 5, 2"
    ));
    // Every start of every walk, in walk order: (walk, ns, params, index).
    let all: Vec<(usize, usize)> = starts
        .iter()
        .enumerate()
        .flat_map(|(s, (_, params))| (0..params.depths.len()).map(move |i| (s, i)))
        .collect();
    let by_ns: HashMap<i64, usize> = starts
        .iter()
        .map(|(w, _)| (walks[*w].info.id, *w))
        .collect();
    for chunk in all.chunks(MAX_ROWS / 4) {
        let Some(first) = chunk.first().map(|(s, _)| walks[starts[*s].0].space) else {
            continue;
        };
        let mut ns = Vec::with_capacity(chunk.len() * INT_WIDTH);
        let mut flags = Vec::with_capacity(chunk.len() * 5);
        let mut paths = Vec::with_capacity(chunk.len() * per_key);
        let mut sibs = Vec::with_capacity(chunk.len() * per_key);
        for &(s, i) in chunk {
            let (w, params) = &starts[s];
            push_int(&mut ns, walks[*w].info.id);
            // "DDDsw": the first depth, whether its sibling is wanted,
            // whether siblings are wanted on the way down.
            push_depth(&mut flags, params.depths[i]);
            flags.push(b'0' + u8::from(params.first_sibling[i]));
            flags.push(b'0' + u8::from(walks[*w].siblings));
            params.push_slot_blobs(height, i, &mut paths, &mut sibs);
        }
        let rows = SqliteConnection::exchange(
            first.exchange(),
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(ns)
                .bind(count(chunk.len()))
                .bind(count(h))
                .bind(flags)
                .bind(paths)
                .bind(sibs)
                .bind(count(per_key))
                .fetch_all(&mut *conn),
        )
        .await?;
        for (id, rows) in split_by_ns(&rows)? {
            let Some(&w) = by_ns.get(&id) else {
                continue;
            };
            let (root, rows) = walk_rows(rows)?;
            let nodes = path_nodes(walks[w].space, height, root, rows)?;
            out[w].extend(nodes);
        }
    }
    Ok(())
}

/// The rows of a walk of several namespaces, split by namespace (the last
/// column; the statement returns them ordered by it).
fn split_by_ns(rows: &[SqliteRow]) -> Result<Vec<(i64, &[SqliteRow])>, sqlx::Error> {
    use sqlx::Row;
    let mut out = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let ns: i64 = rows[start].try_get(4)?;
        let mut end = start + 1;
        while end < rows.len() && rows[end].try_get::<i64, _>(4)? == ns {
            end += 1;
        }
        out.push((ns, &rows[start..end]));
        start = end;
    }
    Ok(out)
}
