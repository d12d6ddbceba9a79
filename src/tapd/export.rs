//! Export: an ms-smt tree into tapd's two tables, as tapd itself writes
//! them for the same leaves ([`RowBuilder`]), in one transaction.

use sqlx::{Arguments, Database, Decode, Encode, Executor, IntoArguments, Type};

use crate::error::TreeError;
use crate::layout::Layout;
use crate::node::ComputedNode;
use crate::store::TreeStore;
use crate::tapd::error::{ExportError, TapdError};
use crate::tapd::shape::{RowBuilder, TapdRow};
use crate::tapd::source::{Pool, TapdTarget};
use crate::tree::Tree;

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
    let (sqlite, pg) = (
        SCHEMA.replace("{bytes}", "BLOB"),
        SCHEMA.replace("{bytes}", "BYTEA"),
    );
    let (t, ns, o) = (tree, namespace, options);
    match &target.pool {
        Pool::Sqlite(p) => export_on(p, (&sqlite, sqlite_mark), t, ns, o).await,
        Pool::Postgres(p) => export_on(p, (&pg, postgres_mark), t, ns, o).await,
    }
}

/// The `n`th placeholder (from 1) on SQLite.
fn sqlite_mark(_n: usize) -> String {
    "?".to_owned()
}

/// The `n`th placeholder (from 1) on Postgres.
fn postgres_mark(n: usize) -> String {
    format!("${n}")
}

/// An engine's dialect: its schema and its placeholder.
type Dialect<'a> = (&'a str, fn(usize) -> String);

/// A value bound to a statement.
enum Value {
    Bytes(Option<Vec<u8>>),
    Int(i64),
    Text(String),
}

/// Runs `sql` with `values` bound in order; `fetch` asks for the first
/// column of the one row it returns.
async fn run<DB>(
    conn: &mut DB::Connection,
    sql: &str,
    values: Vec<Value>,
    fetch: bool,
) -> Result<i64, TapdError>
where
    DB: Database,
    for<'q> Option<Vec<u8>>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let mut args = <DB::Arguments<'_> as Default>::default();
    for v in values {
        let added = match v {
            Value::Bytes(b) => args.add(b),
            Value::Int(i) => args.add(i),
            Value::Text(t) => args.add(t),
        };
        added.map_err(sqlx::Error::Encode)?;
    }
    if fetch {
        Ok(sqlx::query_scalar_with(sql, args)
            .fetch_one(&mut *conn)
            .await?)
    } else {
        sqlx::query_with(sql, args).execute(&mut *conn).await?;
        Ok(0)
    }
}

/// [`export_namespace`] on one engine.
async fn export_on<DB, S, L>(
    pool: &sqlx::Pool<DB>,
    (schema, mark): Dialect<'_>,
    tree: &Tree<S, L>,
    namespace: &str,
    options: ExportOptions,
) -> Result<ExportReport, ExportError<S::Error>>
where
    DB: Database,
    S: TreeStore,
    L: Layout,
    for<'q> Option<Vec<u8>>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let mut tx = pool.begin().await.map_err(TapdError::from)?;
    if options.create_schema {
        sqlx::raw_sql(schema)
            .execute(&mut *tx)
            .await
            .map_err(TapdError::from)?;
    }
    let ns = || Value::Text(namespace.to_owned());
    let count = format!(
        "SELECT (SELECT COUNT(*) FROM mssmt_nodes WHERE namespace = {}) + \
         (SELECT COUNT(*) FROM mssmt_roots WHERE namespace = {})",
        mark(1),
        mark(2)
    );
    let existing = run::<DB>(&mut tx, &count, vec![ns(), ns()], true).await?;
    if existing > 0 {
        if !options.replace {
            return Err(ExportError::NamespaceExists(namespace.to_owned()));
        }
        for table in ["mssmt_roots", "mssmt_nodes"] {
            let sql = format!("DELETE FROM {table} WHERE namespace = {}", mark(1));
            run::<DB>(&mut tx, &sql, vec![ns()], false).await?;
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
            report.rows += insert_rows::<DB>(&mut tx, mark, namespace, &mut rows).await?;
        }
    }
    let overflow = builder.overflowed();
    let root = builder.finish(&mut rows);
    if overflow {
        return Err(ExportError::Source(TreeError::Plan(
            crate::error::PlanError::Overflow(crate::error::SumOverflow { level: 0 }),
        )));
    }
    report.rows += insert_rows::<DB>(&mut tx, mark, namespace, &mut rows).await?;
    if let Some(root) = root {
        let sql = format!(
            "INSERT INTO mssmt_roots (namespace, root_hash) VALUES ({}, {})",
            mark(1),
            mark(2)
        );
        let values = vec![ns(), Value::Bytes(Some(root.hash.0.to_vec()))];
        run::<DB>(&mut tx, &sql, values, false).await?;
        report.root = root;
    }
    tx.commit().await.map_err(TapdError::from)?;
    Ok(report)
}

/// Inserts and drains `rows` (a content-addressed row already there is
/// kept: same hash, same content); returns how many were handed in.
async fn insert_rows<DB>(
    conn: &mut DB::Connection,
    mark: fn(usize) -> String,
    namespace: &str,
    rows: &mut Vec<TapdRow>,
) -> Result<u64, TapdError>
where
    DB: Database,
    for<'q> Option<Vec<u8>>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let mut written = 0;
    for chunk in rows.chunks(INSERT_ROWS) {
        let mut sql = String::from(
            "INSERT INTO mssmt_nodes (hash_key, l_hash_key, r_hash_key, key, value, sum, namespace) VALUES ",
        );
        let mut values = Vec::with_capacity(chunk.len() * 7);
        for (i, row) in chunk.iter().enumerate() {
            let marks: Vec<String> = (1..=7).map(|j| mark(i * 7 + j)).collect();
            if i > 0 {
                sql.push(',');
            }
            sql.push('(');
            sql.push_str(&marks.join(","));
            sql.push(')');
            values.extend([
                Value::Bytes(Some(row.hash.0.to_vec())),
                Value::Bytes(row.left.clone()),
                Value::Bytes(row.right.clone()),
                Value::Bytes(row.key.clone()),
                Value::Bytes(row.value.clone()),
                Value::Int(row.sum as i64),
                Value::Text(namespace.to_owned()),
            ]);
        }
        sql.push_str(" ON CONFLICT DO NOTHING");
        run::<DB>(conn, &sql, values, false).await?;
        written += chunk.len() as u64;
    }
    rows.clear();
    Ok(written)
}
