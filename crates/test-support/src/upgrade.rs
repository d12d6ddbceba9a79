//! The databases a released version wrote (`crates/sql/tests/fixtures/`),
//! restored for an upgrade test: a SQLite file copied to a scratch path,
//! a Postgres dump loaded into a database of its own.

use std::path::PathBuf;

use serde_json::Value;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::{TempDb, repo_root, sanitize, unique};

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
/// Postgres dump; dropped with the guard.
pub struct RestoredPostgres {
    /// Its URL.
    pub url: String,
    admin_url: String,
    name: String,
}

impl RestoredPostgres {
    /// Creates the database and loads the dump into it.
    pub async fn load(admin_url: &str, version: &str) -> Self {
        let name = sanitize(&unique(&format!("upgrade_{version}"))).to_lowercase();
        let mut admin = PgConnection::connect(admin_url)
            .await
            .unwrap_or_else(|e| panic!("connect {admin_url}: {e}"));
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create the database");
        admin.close().await.expect("close");
        let url = with_database(admin_url, &name);
        let dump = std::fs::read_to_string(fixture_dir(version).join("postgres.sql"))
            .expect("read the dump");
        let mut conn = PgConnection::connect(&url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(dump))
            .execute(&mut conn)
            .await
            .expect("load the dump");
        conn.close().await.expect("close");
        RestoredPostgres {
            url,
            admin_url: admin_url.to_owned(),
            name,
        }
    }

    /// Drops the database (after the stores on it closed their pools).
    pub async fn drop_database(self) {
        let mut admin = PgConnection::connect(&self.admin_url)
            .await
            .expect("connect");
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut admin)
            .await
            .expect("drop the database");
    }
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let cut = base
        .rfind('/')
        .filter(|&i| i > "postgres://".len())
        .unwrap_or(base.len());
    let mut out = format!("{}/{name}", &base[..cut]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_url_names_another_database() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/mssmt_test", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h:1/d?sslmode=disable", "x"),
            "postgres://u@h:1/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h:1", "x"), "postgres://u@h:1/x");
    }
}
