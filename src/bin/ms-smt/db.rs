//! Opening `--db` (an SQLite file or a Postgres URL), read-only for the
//! commands that only look, and running a command on one namespace's
//! tree whatever the engine and layout.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ValueEnum;
use ms_smt::store::{
    AuditStore, BulkStore, NamespaceListing, PinStore, PostgresStore, SchemaState, SqlStoreError,
    SqliteStore,
};
use ms_smt::{CompactedTree, FullTree, Layout, ProgressSink, Tree, View};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use crate::error::{CliError, Res};

/// How long connecting to Postgres may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The tree layout a namespace was written with (the database does not
/// record it; audit checks the shape of the one given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// Single-leaf subtrees stored as one node (Taproot Assets universes).
    Compacted,
    /// Every branch stored.
    Full,
}

/// What a command does to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only reads: SQLite opened read-only (the file must exist), Postgres
    /// sessions read-only; nothing is created or migrated.
    Read,
    /// Writes to a database that must exist already and be an ms-smt
    /// one (checked read-only before it is migrated).
    WriteExisting,
    /// Writes, creating the SQLite file if missing; migrates.
    Write,
}

/// An open database.
pub enum Db {
    /// An SQLite file.
    Sqlite(SqliteStore),
    /// A Postgres database.
    Postgres(PostgresStore),
}

/// The stores a command runs on.
pub trait Store:
    BulkStore<Error = SqlStoreError> + PinStore + AuditStore + Clone + 'static
{
}
impl<S: BulkStore<Error = SqlStoreError> + PinStore + AuditStore + Clone + 'static> Store for S {}

/// A command on one namespace's tree, generic over store and layout.
pub trait TreeJob {
    /// What it returns.
    type Output;
    /// Runs on `tree`.
    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<Self::Output>;

    /// Where the tree reports the job's progress (by default nowhere).
    fn progress(&self) -> ProgressSink {
        ProgressSink::default()
    }
}

/// True when `spec` names a Postgres database.
fn is_postgres(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}

/// The SQLite file `spec` names (`sqlite://` and `sqlite:` prefixes
/// allowed).
pub fn sqlite_path(spec: &str) -> Option<PathBuf> {
    if is_postgres(spec) {
        return None;
    }
    let path = spec
        .strip_prefix("sqlite://")
        .or_else(|| spec.strip_prefix("sqlite:"))
        .unwrap_or(spec);
    Some(PathBuf::from(path))
}

impl Db {
    /// Opens `spec` for `access`.
    pub async fn open(spec: &str, access: Access) -> Res<Db> {
        match sqlite_path(spec) {
            Some(path) => open_sqlite(&path, access).await.map(Db::Sqlite),
            None => open_postgres(spec, access).await.map(Db::Postgres),
        }
    }

    /// Every namespace.
    pub async fn namespaces(&self) -> Res<Vec<NamespaceListing>> {
        Ok(match self {
            Db::Sqlite(s) => s.namespaces().await?,
            Db::Postgres(s) => s.namespaces().await?,
        })
    }

    /// The namespace `name`; an error when it does not exist.
    pub async fn namespace(&self, name: &str) -> Res<NamespaceListing> {
        let found = match self {
            Db::Sqlite(s) => s.namespace_listing(name).await?,
            Db::Postgres(s) => s.namespace_listing(name).await?,
        };
        found.ok_or_else(|| CliError::NoNamespace(name.to_owned()))
    }

    /// Runs `job` on namespace `ns` with `layout`.
    pub async fn with_tree<J: TreeJob>(
        &self,
        layout: LayoutArg,
        ns: &str,
        job: J,
    ) -> Res<J::Output> {
        match self {
            Db::Sqlite(s) => on_layout(s.open_namespace(ns), layout, job).await,
            Db::Postgres(s) => on_layout(s.open_namespace(ns), layout, job).await,
        }
    }

    /// Closes the pool (flushes SQLite's WAL state before exit).
    pub async fn close(&self) {
        match self {
            Db::Sqlite(s) => s.pool().close().await,
            Db::Postgres(s) => s.pool().close().await,
        }
    }
}

/// Runs `job` on a tree of `store` with `layout`.
pub async fn on_layout<S: Store, J: TreeJob>(
    store: S,
    layout: LayoutArg,
    job: J,
) -> Res<J::Output> {
    match layout {
        LayoutArg::Compacted => {
            let tree = CompactedTree::new(store).with_progress(job.progress());
            job.run(&tree).await
        }
        LayoutArg::Full => {
            let tree = FullTree::new(store).with_progress(job.progress());
            job.run(&tree).await
        }
    }
}

async fn open_sqlite(path: &Path, access: Access) -> Res<SqliteStore> {
    if access != Access::Write && !path.is_file() {
        return Err(CliError::NoSuchFile(path.to_owned()));
    }
    if access == Access::Write {
        return Ok(SqliteStore::open(path).await?);
    }
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(false)
        .read_only(true)
        .busy_timeout(Duration::from_secs(60));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .map_err(SqlStoreError::from)?;
    let store = SqliteStore::from_pool(pool, "default");
    let what = path.display().to_string();
    current(store.schema_state().await?, &what, access)?;
    if access == Access::Read {
        return Ok(store);
    }
    // Checked before anything is migrated; now writable.
    store.pool().close().await;
    Ok(SqliteStore::open(path).await?)
}

async fn open_postgres(url: &str, access: Access) -> Res<PostgresStore> {
    let options: PgConnectOptions = url.parse().map_err(SqlStoreError::from)?;
    // One plain connection first: a pool retries until its timeout and
    // then reports only that it timed out, not why.
    let probe = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
        .await
        .map_err(|_| CliError::ConnectTimeout(CONNECT_TIMEOUT.as_secs()))?
        .map_err(SqlStoreError::from)?;
    probe.close().await.map_err(SqlStoreError::from)?;
    if access == Access::Write {
        return Ok(PostgresStore::connect(url).await?);
    }
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options.options([("jit", "off"), ("default_transaction_read_only", "on")]))
        .await
        .map_err(SqlStoreError::from)?;
    let store = PostgresStore::from_pool(pool, "default");
    current(store.schema_state().await?, "the Postgres database", access)?;
    if access == Access::Read {
        return Ok(store);
    }
    // Checked before anything is migrated; now writable.
    store.pool().close().await;
    Ok(PostgresStore::connect(url).await?)
}

/// Ok when the schema `state` is the one this crate reads, or one it
/// upgrades for a write to an existing database.
fn current(state: SchemaState, what: &str, access: Access) -> Res<()> {
    match state {
        SchemaState::Current => Ok(()),
        SchemaState::Older { .. } if access == Access::WriteExisting => Ok(()),
        SchemaState::Missing => Err(CliError::NotMsSmt(what.to_owned())),
        SchemaState::Older { found } => Err(CliError::SchemaOlder { found }),
        SchemaState::Newer { found } => Err(CliError::SchemaNewer { found }),
    }
}

/// The view a read command reads: the pin `pin`, or the current tree.
pub async fn view_of<'t, S: Store, L: Layout>(
    tree: &'t Tree<S, L>,
    pin: Option<&str>,
) -> Res<View<'t, S, L>> {
    Ok(match pin {
        Some(name) => tree.at_pin(name).await?,
        None => tree.view(),
    })
}
