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
//!   by an earlier schema of this release line is upgraded when opened, and
//!   one whose applied migrations differ from this crate's is refused
//!   (checked migrations: `schema.rs`).

mod dialect;
mod packed;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::SqliteConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::error::Res;
use crate::handle::{SqlStore, SqlTxStore};

/// A tree store in an SQLite database, bound to one namespace.
pub type SqliteStore = SqlStore<SqliteConnection>;

/// A [`SqliteStore`] namespace bound to a caller's open transaction; see
/// [`in_transaction`](SqliteStore::in_transaction).
pub type SqliteTxStore<'c> = SqlTxStore<'c, SqliteConnection>;

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
