//! A SQL database named the way a command line or a configuration names
//! it ([`DatabaseSpec`]), opened on whichever engine it is ([`Database`]):
//! the one parser the operator command, the server and the examples share.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use super::error::SqlStoreError;
use super::listing::NamespaceListing;
use super::postgres::PostgresStore;
use super::schema::SchemaState;
use super::sqlite::SqliteStore;

/// How long connecting to Postgres may take before [`Database::open_for`]
/// gives up with [`DatabaseError::ConnectTimeout`].
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Where a database is: `postgres://…` or `postgresql://…` (a Postgres
/// URL, as libpq takes it), else a SQLite file, with or without a
/// `sqlite://` or `sqlite:` prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseSpec {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A Postgres database, by URL.
    Postgres(String),
}

impl FromStr for DatabaseSpec {
    type Err = DatabaseError;

    fn from_str(spec: &str) -> Result<Self, DatabaseError> {
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            return Ok(DatabaseSpec::Postgres(spec.to_owned()));
        }
        let path = spec
            .strip_prefix("sqlite://")
            .or_else(|| spec.strip_prefix("sqlite:"))
            .unwrap_or(spec);
        if path.is_empty() {
            return Err(DatabaseError::Empty);
        }
        Ok(DatabaseSpec::Sqlite(PathBuf::from(path)))
    }
}

impl std::fmt::Display for DatabaseSpec {
    /// The file's path, or the URL with its password masked.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseSpec::Sqlite(path) => write!(f, "{}", path.display()),
            DatabaseSpec::Postgres(url) => match url.parse::<PgConnectOptions>() {
                Ok(options) => write!(
                    f,
                    "postgres://{}@{}:{}/{}",
                    options.get_username(),
                    options.get_host(),
                    options.get_port(),
                    options.get_database().unwrap_or("")
                ),
                Err(_) => f.write_str("postgres://…"),
            },
        }
    }
}

/// What a caller does to the database it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only reads: SQLite opened read-only (the file must exist), Postgres
    /// sessions read-only; nothing is created or migrated, and the schema
    /// must be this crate's.
    Read,
    /// Writes to a database that must exist already and be an ms-smt
    /// one (checked read-only before it is migrated).
    WriteExisting,
    /// Writes, creating the SQLite file if missing; migrates.
    Write,
}

/// Why a database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// The spec is empty.
    #[error("an empty database name (an SQLite file or a postgres:// URL)")]
    Empty,
    /// A read or a write to an existing database named a file that is not
    /// there.
    #[error("no such database file: {0}")]
    NoSuchFile(PathBuf),
    /// The database has no `ms_smt_migrations` ledger.
    #[error("not an ms-smt database (no ms_smt_migrations table): {0}")]
    NotMsSmt(String),
    /// A read found an older schema (a write upgrades it).
    #[error(
        "database schema version {found} is older than this ms-smt's; run a write command (load, pin) to upgrade it"
    )]
    SchemaOlder {
        /// The newest version applied.
        found: i64,
    },
    /// The database is newer than this crate.
    #[error("database schema version {found} is newer than this ms-smt supports")]
    SchemaNewer {
        /// The newest version applied.
        found: i64,
    },
    /// Postgres did not answer within [`CONNECT_TIMEOUT`].
    #[error("could not connect to Postgres within {0} s")]
    ConnectTimeout(u64),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] SqlStoreError),
}

impl From<sqlx::Error> for DatabaseError {
    fn from(e: sqlx::Error) -> Self {
        DatabaseError::Store(e.into())
    }
}

/// An open SQL database of either engine, on namespace `"default"`.
#[derive(Debug, Clone)]
pub enum Database {
    /// A SQLite file.
    Sqlite(SqliteStore),
    /// A Postgres database.
    Postgres(PostgresStore),
}

impl Database {
    /// Opens `spec` ([`DatabaseSpec`]) to write: the SQLite file created if
    /// missing, migrated.
    pub async fn open(spec: &str) -> Result<Self, DatabaseError> {
        Self::open_for(&spec.parse()?, Access::Write).await
    }

    /// Opens `spec` for `access`.
    pub async fn open_for(spec: &DatabaseSpec, access: Access) -> Result<Self, DatabaseError> {
        Ok(match spec {
            DatabaseSpec::Sqlite(path) => Database::Sqlite(open_sqlite(path, access).await?),
            DatabaseSpec::Postgres(url) => Database::Postgres(open_postgres(url, access).await?),
        })
    }

    /// Every namespace, by name.
    pub async fn namespaces(&self) -> Result<Vec<NamespaceListing>, SqlStoreError> {
        match self {
            Database::Sqlite(s) => s.namespaces().await,
            Database::Postgres(s) => s.namespaces().await,
        }
    }

    /// The namespace `name`, `None` when there is none.
    pub async fn namespace_listing(
        &self,
        name: &str,
    ) -> Result<Option<NamespaceListing>, SqlStoreError> {
        match self {
            Database::Sqlite(s) => s.namespace_listing(name).await,
            Database::Postgres(s) => s.namespace_listing(name).await,
        }
    }

    /// Closes the pool (SQLite checkpoints its WAL on the last close).
    pub async fn close(&self) {
        match self {
            Database::Sqlite(s) => s.pool().close().await,
            Database::Postgres(s) => s.pool().close().await,
        }
    }
}

async fn open_sqlite(path: &Path, access: Access) -> Result<SqliteStore, DatabaseError> {
    if access != Access::Write && !path.is_file() {
        return Err(DatabaseError::NoSuchFile(path.to_owned()));
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
        .await?;
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

async fn open_postgres(url: &str, access: Access) -> Result<PostgresStore, DatabaseError> {
    let options: PgConnectOptions = url.parse()?;
    // One plain connection first: a pool retries until its timeout and
    // then reports only that it timed out, not why.
    let probe = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
        .await
        .map_err(|_| DatabaseError::ConnectTimeout(CONNECT_TIMEOUT.as_secs()))??;
    probe.close().await?;
    if access == Access::Write {
        return Ok(PostgresStore::connect(url).await?);
    }
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(
            options
                .options(crate::postgres::SESSION_OPTIONS)
                .options([("default_transaction_read_only", "on")]),
        )
        .await?;
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
fn current(state: SchemaState, what: &str, access: Access) -> Result<(), DatabaseError> {
    match state {
        SchemaState::Current => Ok(()),
        SchemaState::Older { .. } if access == Access::WriteExisting => Ok(()),
        SchemaState::Missing => Err(DatabaseError::NotMsSmt(what.to_owned())),
        SchemaState::Older { found } => Err(DatabaseError::SchemaOlder { found }),
        SchemaState::Newer { found } => Err(DatabaseError::SchemaNewer { found }),
    }
}

#[cfg(test)]
mod tests {
    use super::DatabaseSpec;
    use std::path::PathBuf;

    #[test]
    fn specs_name_their_engine() {
        let sqlite = |p: &str| Ok::<_, String>(DatabaseSpec::Sqlite(PathBuf::from(p)));
        for (text, want) in [
            ("a.db", sqlite("a.db")),
            ("sqlite://a.db", sqlite("a.db")),
            ("sqlite:/tmp/a.db", sqlite("/tmp/a.db")),
            (
                "postgres://u@h/d",
                Ok(DatabaseSpec::Postgres("postgres://u@h/d".into())),
            ),
            (
                "postgresql://u@h/d",
                Ok(DatabaseSpec::Postgres("postgresql://u@h/d".into())),
            ),
        ] {
            let got = text.parse::<DatabaseSpec>().map_err(|e| e.to_string());
            assert_eq!(got, want, "{text}");
        }
        assert!("".parse::<DatabaseSpec>().is_err());
        assert!("sqlite://".parse::<DatabaseSpec>().is_err());
    }

    #[test]
    fn a_postgres_spec_prints_without_its_password() {
        let spec: DatabaseSpec = "postgres://u:secret@h:5433/d".parse().expect("spec");
        assert_eq!(spec.to_string(), "postgres://u@h:5433/d");
    }
}
