//! The databases a released version wrote (`crates/sql/tests/fixtures/`),
//! restored for an upgrade test: a SQLite file copied to a scratch path,
//! a Postgres dump loaded into a database of its own.

use std::path::PathBuf;

use serde_json::Value;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::scratch_postgres::ScratchPostgres;
use super::{TempDb, repo_root};

/// The fixtures of release `version` (e.g. `"0.1.0"`).
pub fn fixture_dir(version: &str) -> PathBuf {
    repo_root().join(format!("crates/sql/tests/fixtures/upgrade-{version}"))
}

/// What the fixtures of `version` hold (`expected.json`).
pub fn expected(version: &str) -> Value {
    let path = fixture_dir(version).join("expected.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// A scratch copy of `version`'s SQLite file (removed on drop).
pub fn sqlite_copy(version: &str) -> TempDb {
    let db = TempDb::new(&format!("upgrade-{version}"));
    let from = fixture_dir(version).join("sqlite.db");
    std::fs::copy(&from, &db.path).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    db
}

/// A database of its own on the server of `url`, holding `version`'s
/// Postgres dump; dropped by [`drop_database`](Self::drop_database).
pub struct RestoredPostgres {
    /// Its URL.
    pub url: String,
    scratch: ScratchPostgres,
}

impl RestoredPostgres {
    /// Creates the database and loads the dump into it.
    pub async fn load(admin_url: &str, version: &str) -> Self {
        let scratch = ScratchPostgres::create(admin_url, &format!("upgrade_{version}")).await;
        let dump = std::fs::read_to_string(fixture_dir(version).join("postgres.sql"))
            .expect("read the dump");
        let mut conn = PgConnection::connect(&scratch.url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(dump))
            .execute(&mut conn)
            .await
            .expect("load the dump");
        conn.close().await.expect("close");
        RestoredPostgres {
            url: scratch.url.clone(),
            scratch,
        }
    }

    /// Drops the database (after the stores on it closed their pools).
    pub async fn drop_database(self) {
        self.scratch.drop_database().await;
    }
}
