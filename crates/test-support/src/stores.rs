//! Opening each store for the integration tests: SQLite in a temporary
//! file (scratch durability), Postgres from `MSSMT_PG_URL`.

use ms_smt_sql::{PostgresStore, SqliteStore};
use sqlx::sqlite::SqliteSynchronous;

use super::{TempDb, pg_url};

/// A migrated SQLite database in a temporary file, removed on drop.
pub struct SqliteDb {
    /// The store on it (namespace `"default"`).
    pub store: SqliteStore,
    _file: TempDb,
}

impl SqliteDb {
    /// A fresh database; `synchronous=NORMAL`, as tests need no durability.
    pub async fn open(tag: &str) -> Self {
        let file = TempDb::new(tag);
        let options =
            SqliteStore::connect_options(&file.path).synchronous(SqliteSynchronous::Normal);
        let store = SqliteStore::open_with(options).await.expect("open sqlite");
        SqliteDb { store, _file: file }
    }
}

/// The Postgres store of `MSSMT_PG_URL`, or `None` when the test skips.
pub async fn pg_store(test: &str) -> Option<PostgresStore> {
    let url = pg_url(test)?;
    Some(
        PostgresStore::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}")),
    )
}
