//! A database of its own on a Postgres server, for one test or bench run:
//! nothing it writes meets another run's names, and it is dropped whole.

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::{sanitize, unique};

/// A database created on the server of an admin URL; dropped by
/// [`drop_database`](Self::drop_database).
pub struct ScratchPostgres {
    /// Its URL.
    pub url: String,
    admin_url: String,
    name: String,
}

impl ScratchPostgres {
    /// Creates a database named after `tag` and this run on the server of
    /// `admin_url`.
    pub async fn create(admin_url: &str, tag: &str) -> Self {
        let name = sanitize(&unique(tag)).to_lowercase();
        let mut admin = PgConnection::connect(admin_url)
            .await
            .unwrap_or_else(|e| panic!("connect {admin_url}: {e}"));
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create the database");
        admin.close().await.expect("close");
        ScratchPostgres {
            url: with_database(admin_url, &name),
            admin_url: admin_url.to_owned(),
            name,
        }
    }

    /// A store on the database.
    pub async fn connect(&self) -> ms_smt_sql::PostgresStore {
        ms_smt_sql::PostgresStore::connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.url))
    }

    /// Closes `store`'s pool, then drops the database.
    pub async fn drop_after(self, store: ms_smt_sql::PostgresStore) {
        store.pool().close().await;
        self.drop_database().await;
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
