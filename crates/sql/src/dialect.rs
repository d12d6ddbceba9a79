//! What the two engines do differently, as a trait on their connection
//! types (as sqlx's own `Migrate` is), so the core is ordinary generic code
//! over `&mut C` with no executor bounds.
//!
//! Statements both engines run with the same text go through
//! [`Dialect::execute`] and [`Dialect::fetch_all`]: `$N` placeholders,
//! which sqlx binds by number on both, and the few argument types in
//! [`Arg`].

use std::future::Future;

use sqlx::{Connection, Database, Encode, SqlStr, Transaction, Type};

use super::error::Res;
use super::ledger::LedgerSql;
use super::migrations::{Migration, MigrationSet};
use super::reply_wait::{Bounded, Exchange, ReplyWait};
use super::rows::NamespaceRow;
use super::space::{NamespaceState, NsInfo, NsState};
use crate::descent::LeafChange;
use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::PathStart;
use crate::strata::{RowChange, RowKey};

/// A row as read: its key and its stored body.
pub type KeyedRow = (RowKey, Vec<u8>);

/// One namespace's path walks in a walk of several namespaces.
#[derive(Debug, Clone, Copy)]
pub struct PathWalk<'a> {
    /// The namespace.
    pub space: &'a NamespaceState,
    /// Its id and height.
    pub info: NsInfo,
    /// Where its walks start.
    pub starts: &'a [PathStart],
    /// Whether the sibling rows at each row boundary are read too.
    pub siblings: bool,
}

/// One namespace's rows in a read of rows of several namespaces.
#[derive(Debug, Clone, Copy)]
pub struct RowRead<'a> {
    /// The namespace.
    pub space: &'a NamespaceState,
    /// Its id and height.
    pub info: NsInfo,
    /// The rows.
    pub keys: &'a [RowKey],
}

/// One namespace's share of a commit of several: its row as the write
/// transaction saw it, its merge's row changes and its new root.
#[derive(Debug)]
pub struct CommitRows<'a> {
    /// The namespace.
    pub space: &'a NamespaceState,
    /// Its row under the write lock.
    pub state: NsState,
    /// The rows to write and delete.
    pub changes: Vec<RowChange>,
    /// The leaves the commit changed, for the change journal (empty when
    /// the namespace keeps none).
    pub leaves: Vec<LeafChange>,
    /// Leaves added minus leaves removed: what the commit adds to the
    /// namespace's leaf count (`ms_smt_namespaces.leaves`).
    pub leaf_delta: i64,
    /// The root after the commit.
    pub new_root: ComputedNode,
}

/// An argument of a statement both engines share.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// A 64-bit integer (`BIGINT` / `INTEGER`).
    Int(i64),
    /// A 64-bit integer or NULL.
    OptInt(Option<i64>),
    /// Text.
    Text(&'a str),
    /// Bytes (`BYTEA` / `BLOB`).
    Bytes(&'a [u8]),
    /// Bytes or NULL.
    OptBytes(Option<&'a [u8]>),
}

/// A row shape both engines decode (a tuple of plain column types).
pub trait Shared: FromSqlite + FromPg + Send + Unpin {}
impl<T: FromSqlite + FromPg + Send + Unpin> Shared for T {}

/// Decodes from an SQLite row (anything, without the engine).
#[cfg(feature = "sqlite")]
pub trait FromSqlite: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> {}
#[cfg(feature = "sqlite")]
impl<T: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>> FromSqlite for T {}
/// Decodes from an SQLite row (anything, without the engine).
#[cfg(not(feature = "sqlite"))]
pub trait FromSqlite {}
#[cfg(not(feature = "sqlite"))]
impl<T> FromSqlite for T {}

/// Decodes from a Postgres row (anything, without the engine).
#[cfg(feature = "postgres")]
pub trait FromPg: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> {}
#[cfg(feature = "postgres")]
impl<T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>> FromPg for T {}
/// Decodes from a Postgres row (anything, without the engine).
#[cfg(not(feature = "postgres"))]
pub trait FromPg {}
#[cfg(not(feature = "postgres"))]
impl<T> FromPg for T {}

/// An SQL engine, implemented on its connection type. Declared `pub` in a
/// private module (sealed) so that the public handles may name it in
/// bounds.
pub trait Dialect: Connection + Sized + 'static {
    /// The statements that make and grow the migration ledger.
    const LEDGER: LedgerSql;

    /// `set`'s versions on this engine.
    fn migrations(set: &MigrationSet) -> &'static [Migration];

    /// The statement beginning a write transaction (`None`: plain `BEGIN`).
    const BEGIN_WRITE: Option<&'static str>;
    /// Whether writes in a caller's transaction run under a savepoint.
    const SAVEPOINTS: bool;
    /// Run after `BEGIN` to make an audit scan one read-only snapshot.
    const SNAPSHOT: Option<&'static str>;
    /// An SQL expression for the current time in whole seconds since the
    /// Unix epoch (the change journal's timestamps).
    const UNIX_NOW: &'static str;

    /// `round_trip`, one exchange with the server (a statement, `BEGIN`,
    /// `COMMIT`, `ROLLBACK`): counted as sent in `ex`'s counters, and
    /// bounded by the engine ([`bound`](Self::bound)). Every round trip of
    /// the stores goes through here.
    fn exchange<F, T>(ex: Exchange<'_>, round_trip: F) -> Bounded<F>
    where
        F: Future<Output = Result<T, sqlx::Error>>,
    {
        ex.sent();
        Self::bound(ex.wait(), round_trip)
    }

    /// The engine's bound on a reply: Postgres's reply wait `wait`, the
    /// handle's (`reply_wait.rs`); none for SQLite, which runs in the
    /// process. (Send round trips with [`exchange`](Self::exchange).)
    fn bound<F, T>(wait: ReplyWait, round_trip: F) -> Bounded<F>
    where
        F: Future<Output = Result<T, sqlx::Error>>,
    {
        let _ = wait;
        Bounded::new(round_trip, None)
    }

    /// Appends the `n`-th (1-based) parameter's mark to a generated
    /// statement whose parameters are all bound in order: `$n`. SQLite
    /// writes a bare `?` instead: it binds a `$n` by looking its name up
    /// among all the statement's names, which is quadratic in a long list.
    fn push_param(sql: &mut String, n: usize) {
        use std::fmt::Write;
        // Writing into a String cannot fail.
        let _ = write!(sql, "${n}");
    }

    /// Runs a shared statement as one exchange `ex`; the number of rows it
    /// changed.
    fn execute(
        &mut self,
        ex: Exchange<'_>,
        sql: SqlStr,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Res<u64>> + Send;

    /// Runs a shared statement as one exchange `ex`, and decodes every row
    /// it returns.
    fn fetch_all<T: Shared>(
        &mut self,
        ex: Exchange<'_>,
        sql: SqlStr,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Res<Vec<T>>> + Send;

    /// Runs DDL statements (unprepared: `sqlx::raw_sql`) as one exchange
    /// `ex`.
    fn run_ddl(
        &mut self,
        ex: Exchange<'_>,
        sql: &'static str,
    ) -> impl Future<Output = Res<()>> + Send;

    /// Serialises the writers of each of `spaces` until the transaction
    /// ends, taking the locks in one order every transaction shares (so
    /// two transactions locking overlapping sets cannot deadlock).
    fn lock_namespaces(
        &mut self,
        spaces: &[&NamespaceState],
    ) -> impl Future<Output = Res<()>> + Send;

    /// Serialises the namespace's writers until the transaction ends.
    fn lock_namespace(&mut self, space: &NamespaceState) -> impl Future<Output = Res<()>> + Send {
        async move { self.lock_namespaces(&[space]).await }
    }

    /// Serialises concurrent migrations until the transaction ends.
    fn lock_migrations(&mut self, ex: Exchange<'_>) -> impl Future<Output = Res<()>> + Send;

    /// Inserts the rows of those of `spaces` that are missing, each with
    /// its handle's stratum height, in one statement.
    fn create_namespaces(
        &mut self,
        spaces: &[&NamespaceState],
    ) -> impl Future<Output = Res<()>> + Send;

    /// The rows of those of `spaces` that exist, in one statement, in no
    /// particular order.
    fn namespace_rows(
        &mut self,
        spaces: &[&NamespaceState],
    ) -> impl Future<Output = Res<Vec<NamespaceRow>>> + Send;

    /// True when a walk of `starts` starts must first [`guard_walk`]
    /// (`jit_off`: the handle's sessions already run without JIT).
    ///
    /// [`guard_walk`]: Dialect::guard_walk
    fn walk_needs_guard(jit_off: bool, starts: usize) -> bool;

    /// Prepares the transaction for a large path walk.
    fn guard_walk(&mut self, space: &NamespaceState) -> impl Future<Output = Res<()>> + Send;

    /// Per walk, the current tree's nodes on the paths of its starts
    /// (with its `siblings`, also the sibling rows at each row boundary),
    /// rows nearest the root first, in one statement per chunk of starts
    /// for all the walks' namespaces together.
    fn walk_paths(
        &mut self,
        walks: &[PathWalk<'_>],
    ) -> impl Future<Output = Res<Vec<Vec<(Hash, Node)>>>> + Send;

    /// Per read, the stored bodies of the current rows at its keys, in
    /// one statement (per chunk) for all the reads' namespaces.
    fn read_rows(
        &mut self,
        reads: &[RowRead<'_>],
    ) -> impl Future<Output = Res<Vec<Vec<KeyedRow>>>> + Send;

    /// The bodies of the rows at `keys` as they were at `version`: the
    /// live row if written at or before it, else the kept copy current
    /// then.
    fn read_rows_at(
        &mut self,
        space: &NamespaceState,
        info: NsInfo,
        version: i64,
        keys: &[RowKey],
    ) -> impl Future<Output = Res<Vec<(RowKey, Vec<u8>)>>> + Send;

    /// Writes each commit's row changes and new root at its version
    /// `state.version + 1`, keeping first the replaced rows a pin may
    /// read, with a constant number of statements for all of them; passes
    /// each namespace's `written` failpoint once the rows are written.
    fn write_commits(&mut self, commits: &[CommitRows<'_>])
    -> impl Future<Output = Res<()>> + Send;

    /// Removes every row and the root of the namespace at `state`, keeping
    /// first the rows a pin may still read.
    fn clear(
        &mut self,
        space: &NamespaceState,
        state: &NsState,
    ) -> impl Future<Output = Res<()>> + Send;
}

/// Begins a write transaction on `conn` ([`Dialect::BEGIN_WRITE`]), sent
/// as `ex`.
pub(crate) async fn begin_write_by<'c, C: Dialect>(
    conn: &'c mut C,
    ex: Exchange<'_>,
) -> Res<Transaction<'c, C::Database>> {
    C::exchange(ex, async move {
        match C::BEGIN_WRITE {
            // why: a `SqlStr`, not the `&'static str`: `begin_with`'s future
            // captures its statement's type, and with a reference there rustc
            // cannot prove a spawned caller's future `Send` ("`SqlSafeStr` is
            // not general enough"), so e.g. `ReplicaSet::connect` inside
            // `tokio::spawn` stopped compiling on sqlx 0.9.
            Some(sql) => conn.begin_with(SqlStr::from_static(sql)).await,
            None => conn.begin().await,
        }
    })
    .await
}

/// The first row a shared statement returns, if any.
pub(crate) async fn fetch_optional<C: Dialect, T: Shared>(
    conn: &mut C,
    ex: Exchange<'_>,
    sql: SqlStr,
    args: &[Arg<'_>],
) -> Res<Option<T>> {
    Ok(conn.fetch_all(ex, sql, args).await?.into_iter().next())
}

/// `args` as the engine's argument list (for the engines' implementations
/// of [`Dialect::execute`] and [`Dialect::fetch_all`]).
pub(crate) fn arguments<'q, DB: Database>(args: &[Arg<'q>]) -> Result<DB::Arguments, sqlx::Error>
where
    i64: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
    &'q str: Encode<'q, DB> + Type<DB>,
    &'q [u8]: Encode<'q, DB> + Type<DB>,
    Option<&'q [u8]>: Encode<'q, DB> + Type<DB>,
{
    use sqlx::Arguments;
    let mut out = DB::Arguments::default();
    for arg in args {
        match *arg {
            Arg::Int(v) => out.add(v),
            Arg::OptInt(v) => out.add(v),
            Arg::Text(v) => out.add(v),
            Arg::Bytes(v) => out.add(v),
            Arg::OptBytes(v) => out.add(v),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(out)
}
