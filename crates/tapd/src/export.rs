//! Export: an ms-smt tree into tapd's two tables, as tapd itself writes
//! them for the same leaves ([`RowBuilder`]), in one transaction.

use std::sync::LazyLock;

use sqlx::{AssertSqlSafe, PgConnection, SqlSafeStr, SqliteConnection};

use crate::error::{ExportError, TapdError};
use crate::layout::Layout;
use crate::node::ComputedNode;
use crate::shape::{RowBuilder, TapdRow};
use crate::source::{Pool, TapdTarget};
use crate::store::TreeStore;
use ms_smt::Tree;
use ms_smt::TreeError;
use ms_smt_sql::{Arg, Dialect, Exchange, ReplyWait};

/// Rows per `INSERT` (7 values each; under both engines' limits).
const INSERT_ROWS: usize = 1000;

/// How to export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportOptions {
    /// Create tapd's two tables (and its indexes) when they are missing.
    pub create_schema: bool,
    /// Replace a tapd namespace that already has rows.
    pub replace: bool,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportReport {
    /// The tapd namespace written.
    pub namespace: String,
    /// The tree's root (no root row is written for the empty tree).
    pub root: ComputedNode,
    /// Leaves written.
    pub leaves: u64,
    /// Node rows written.
    pub rows: u64,
}

/// tapd's tables, as its migrations create them, with `BLOB` (SQLite) or
/// `BYTEA` (Postgres) for `{bytes}`.
const SCHEMA: &str = "\
CREATE TABLE IF NOT EXISTS mssmt_nodes (hash_key {bytes} NOT NULL, l_hash_key {bytes}, \
r_hash_key {bytes}, key {bytes}, value {bytes}, sum BIGINT NOT NULL, namespace VARCHAR NOT NULL, \
PRIMARY KEY (hash_key, namespace));
CREATE INDEX IF NOT EXISTS mssmt_nodes_l_hash_key_idx ON mssmt_nodes (l_hash_key);
CREATE INDEX IF NOT EXISTS mssmt_nodes_r_hash_key_idx ON mssmt_nodes (r_hash_key);
CREATE INDEX IF NOT EXISTS idx_mssmt_nodes_composite ON mssmt_nodes(namespace, key, hash_key, sum);
CREATE TABLE IF NOT EXISTS mssmt_roots (namespace VARCHAR NOT NULL PRIMARY KEY, \
root_hash {bytes} NOT NULL, FOREIGN KEY (namespace, root_hash) REFERENCES \
mssmt_nodes (namespace, hash_key) ON DELETE CASCADE);";

/// tapd's schema on SQLite and on Postgres.
static SQLITE_SCHEMA: LazyLock<String> = LazyLock::new(|| SCHEMA.replace("{bytes}", "BLOB"));
static PG_SCHEMA: LazyLock<String> = LazyLock::new(|| SCHEMA.replace("{bytes}", "BYTEA"));

/// Writes `tree`'s current leaves into tapd namespace `namespace` of
/// `target`, in one transaction: the rows tapd writes for these leaves,
/// and a root row unless the tree is empty.
pub async fn export_namespace<S: TreeStore, L: Layout>(
    tree: &Tree<S, L>,
    target: &TapdTarget,
    namespace: &str,
    options: ExportOptions,
) -> Result<ExportReport, ExportError<S::Error>> {
    if !options.create_schema && !target.pool.has_schema().await? {
        return Err(ExportError::NoSchema);
    }
    let (t, ns, o) = (tree, namespace, options);
    match &target.pool {
        Pool::Sqlite(p) => export_on::<SqliteConnection, _, _>(p, &SQLITE_SCHEMA, t, ns, o).await,
        Pool::Postgres(p) => export_on::<PgConnection, _, _>(p, &PG_SCHEMA, t, ns, o).await,
    }
}

/// How the export's statements are sent: under the default reply wait,
/// counted nowhere (the tapd database is no store handle's).
fn wait() -> Exchange<'static> {
    Exchange::uncounted(ReplyWait::Default)
}

/// [`export_namespace`] on one engine (statements through the SQL core's
/// [`Dialect`]: `$N` placeholders on both).
async fn export_on<C, S, L>(
    pool: &sqlx::Pool<C::Database>,
    schema: &'static str,
    tree: &Tree<S, L>,
    namespace: &str,
    options: ExportOptions,
) -> Result<ExportReport, ExportError<S::Error>>
where
    C: Dialect,
    S: TreeStore,
    L: Layout,
{
    let mut tx = pool.begin().await.map_err(TapdError::from)?;
    let conn: &mut C = &mut tx;
    if options.create_schema {
        conn.run_ddl(wait(), schema)
            .await
            .map_err(TapdError::from)?;
    }
    let ns = Arg::Text(namespace);
    let existing: Vec<(i64,)> = conn
        .fetch_all(
            wait(),
            "SELECT (SELECT COUNT(*) FROM mssmt_nodes WHERE namespace = $1) + \
             (SELECT COUNT(*) FROM mssmt_roots WHERE namespace = $1)"
                .into_sql_str(),
            &[ns],
        )
        .await
        .map_err(TapdError::from)?;
    if existing.first().is_some_and(|(n,)| *n > 0) {
        if !options.replace {
            return Err(ExportError::NamespaceExists(namespace.to_owned()));
        }
        for sql in [
            "DELETE FROM mssmt_roots WHERE namespace = $1",
            "DELETE FROM mssmt_nodes WHERE namespace = $1",
        ] {
            conn.execute(wait(), sql.into_sql_str(), &[ns])
                .await
                .map_err(TapdError::from)?;
        }
    }
    let mut builder = RowBuilder::new();
    let mut rows: Vec<TapdRow> = Vec::new();
    let mut report = ExportReport {
        namespace: namespace.to_owned(),
        root: ComputedNode::empty_root(),
        leaves: 0,
        rows: 0,
    };
    let mut leaves = tree.leaves(..);
    loop {
        let page = leaves.next_page().await.map_err(ExportError::Source)?;
        if page.is_empty() {
            break;
        }
        for entry in page {
            report.leaves += 1;
            builder.push(entry.key, entry.leaf, &mut rows);
        }
        if rows.len() >= INSERT_ROWS {
            report.rows += insert_rows(conn, namespace, &mut rows).await?;
        }
    }
    let overflow = builder.overflowed();
    let root = builder.finish(&mut rows);
    if overflow {
        return Err(ExportError::Source(TreeError::Plan(
            ms_smt::PlanError::Overflow(ms_smt::SumOverflow { level: 0 }),
        )));
    }
    report.rows += insert_rows(conn, namespace, &mut rows).await?;
    if let Some(root) = root {
        conn.execute(
            wait(),
            "INSERT INTO mssmt_roots (namespace, root_hash) VALUES ($1, $2)".into_sql_str(),
            &[ns, Arg::Bytes(&root.hash.0)],
        )
        .await
        .map_err(TapdError::from)?;
        report.root = root;
    }
    tx.commit().await.map_err(TapdError::from)?;
    Ok(report)
}

/// Inserts and drains `rows` (a content-addressed row already there is
/// kept: same hash, same content); returns how many were handed in.
async fn insert_rows<C: Dialect>(
    conn: &mut C,
    namespace: &str,
    rows: &mut Vec<TapdRow>,
) -> Result<u64, TapdError> {
    let mut written = 0;
    for chunk in rows.chunks(INSERT_ROWS) {
        let mut sql = String::from(
            "INSERT INTO mssmt_nodes (hash_key, l_hash_key, r_hash_key, key, value, sum, namespace) VALUES ",
        );
        let mut args = Vec::with_capacity(chunk.len() * 7);
        for (i, row) in chunk.iter().enumerate() {
            sql.push_str(if i > 0 { ",(" } else { "(" });
            for j in 1..=7 {
                if j > 1 {
                    sql.push(',');
                }
                C::push_param(&mut sql, i * 7 + j);
            }
            sql.push(')');
            args.extend([
                Arg::Bytes(&row.hash.0),
                Arg::OptBytes(row.left.as_deref()),
                Arg::OptBytes(row.right.as_deref()),
                Arg::OptBytes(row.key.as_deref()),
                Arg::OptBytes(row.value.as_deref()),
                Arg::Int(row.sum as i64),
                Arg::Text(namespace),
            ]);
        }
        sql.push_str(" ON CONFLICT DO NOTHING");
        // Only `$N` placeholders are added to the literal text (the rows
        // are bound), so it is ours alone.
        conn.execute(wait(), AssertSqlSafe(sql).into_sql_str(), &args)
            .await?;
        written += chunk.len() as u64;
    }
    rows.clear();
    Ok(written)
}
