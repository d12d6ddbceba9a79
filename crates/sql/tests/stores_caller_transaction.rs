//! The host application: the store's migrations next to a host's
//! `_sqlx_migrations`; tree writes inside the caller's transaction roll back
//! and commit with the host's rows (SQLite and Postgres).
//!
//! Part of the store suite (`tests/stores_*.rs`, machinery in
//! `tests/support/suite.rs`): each scenario runs on memory, SQLite and
//! Postgres, and on the SQL stores `*_cold`, with every node read by SQL.
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::path::Path;
use std::str::FromStr;

use ms_smt::{Compacted, Full, Key, Leaf, Tree};
use ms_smt_sql::{PostgresStore, SqliteStore};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use support::model::{self, Model};
use support::suite::*;
use support::{TempDb, hkey, pg_url, sanitize, unique};

// ---------------------------------------------------------------------------
// 6. The host application: migrations and caller transactions
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Opening databases
// ---------------------------------------------------------------------------

/// The tables the SQL stores create, by name.
const STORE_TABLES: [&str; 7] = [
    "ms_smt_changes",
    "ms_smt_history",
    "ms_smt_migrations",
    "ms_smt_namespaces",
    "ms_smt_pins",
    "ms_smt_strata",
    "ms_smt_versions",
];

fn sqlite_options(path: &Path) -> SqliteConnectOptions {
    SqliteStore::connect_options(path).synchronous(SqliteSynchronous::Normal)
}

/// A fresh schema of the test database and a pool whose `search_path` is that
/// schema only, so the store's tables and the host's are created from scratch.
struct PgSchema {
    admin: PgPool,
    pool: PgPool,
    schema: String,
}

impl PgSchema {
    async fn create(url: &str, tag: &str) -> Self {
        let schema = sanitize(&unique(tag)).to_lowercase();
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(url)
            .await
            .expect("admin pool");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
            .execute(&admin)
            .await
            .expect("create schema");
        let options = PgConnectOptions::from_str(url)
            .expect("pg url")
            .options([("search_path", schema.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .expect("schema pool");
        PgSchema {
            admin,
            pool,
            schema,
        }
    }

    async fn drop_schema(self) {
        self.pool.close().await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA \"{}\" CASCADE",
            self.schema
        )))
        .execute(&self.admin)
        .await
        .expect("drop schema");
        self.admin.close().await;
    }
}

// ---------------------------------------------------------------------------
// Migrations next to the host's
// ---------------------------------------------------------------------------

type SqlxMigrationRow = (i64, String, String, bool, Vec<u8>, i64);

/// The host's `_sqlx_migrations` rows, byte for byte.
macro_rules! dump_sqlx {
    ($pool:expr) => {
        sqlx::query_as::<_, SqlxMigrationRow>(
            "SELECT version, description, CAST(installed_on AS TEXT), success, checksum, \
             execution_time FROM _sqlx_migrations ORDER BY version",
        )
        .fetch_all($pool)
        .await
        .expect("dump _sqlx_migrations")
    };
}

/// Runs `$store.migrate()` twice next to the host's tables (`$tables` lists
/// the database's tables) and checks that it leaves `_sqlx_migrations`
/// alone, adds exactly [`STORE_TABLES`] and records each version once.
macro_rules! migrate_beside_host {
    ($store:expr, $pool:expr, $tables:expr) => {{
        let sqlx_before = dump_sqlx!($pool);
        let tables_before = $tables.await;
        $store.migrate().await.expect("migrate");
        $store.migrate().await.expect("migrate again");
        assert_eq!(
            dump_sqlx!($pool),
            sqlx_before,
            "migrate() touched _sqlx_migrations"
        );
        let mut tables_after = $tables.await;
        tables_after.retain(|t| !tables_before.contains(t));
        assert_eq!(tables_after, STORE_TABLES);
        let versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM ms_smt_migrations ORDER BY version")
                .fetch_all($pool)
                .await
                .expect("ms_smt_migrations");
        assert!(!versions.is_empty(), "ms_smt_migrations is empty");
        let dedup: std::collections::BTreeSet<_> = versions.iter().collect();
        assert_eq!(
            dedup.len(),
            versions.len(),
            "migrate() twice recorded a version twice"
        );
    }};
}

// ---------------------------------------------------------------------------
// Tree writes in the caller's transaction
// ---------------------------------------------------------------------------

/// Seeds a tree, then runs `batch` inside the caller's transaction twice:
/// rolled back, then committed, checking the host row goes with it.
macro_rules! caller_transaction {
    ($store:expr, $layout:ty, $pool:expr, $begin:expr, $insert_sql:expr, $count_sql:expr, $id_offset:expr) => {{
        let store = $store;
        let tree: Tree<_, $layout> = Tree::new(store.clone());
        let lay = layout_name::<$layout>();
        let mut model = Model::new();
        let seed: Vec<(Key, Leaf)> = (0..20u64)
            .map(|i| (hkey("host-seed", i), leaf("seed", i + 1)))
            .collect();
        model::apply(&mut model, &seed);
        let root0 = tree.insert_many(seed.clone()).await.expect("seed");
        let rows0 = store.dump().await;
        let new_key = hkey("host-new", 0);
        let batch = vec![
            (new_key, leaf("order 1", 42)),
            (hkey("host-seed", 3), Leaf::empty()),
            (hkey("host-seed", 4), leaf("changed", 1)),
        ];
        let mut after = model.clone();
        model::apply(&mut after, &batch);
        let root1 = model::root(&after).expect("model root");
        for (order_id, commit) in [(1i64 + $id_offset, false), (2i64 + $id_offset, true)] {
            let mut tx = $begin.await.expect("begin");
            sqlx::query($insert_sql)
                .bind(order_id)
                .execute(&mut *tx)
                .await
                .expect("host insert");
            {
                let tx_tree: Tree<_, $layout> = Tree::new(store.in_transaction(&mut *tx));
                let got = tx_tree
                    .insert_many(batch.clone())
                    .await
                    .expect("insert_many in transaction");
                assert_eq!(got, root1, "{lay}: root inside the transaction");
                assert_eq!(tx_tree.root().await.expect("root"), root1);
                assert_eq!(
                    tx_tree.get(&new_key).await.expect("get"),
                    leaf("order 1", 42)
                );
            }
            // Not visible outside before the caller commits.
            assert_eq!(
                tree.root().await.expect("root"),
                root0,
                "{lay}: uncommitted root leaked"
            );
            assert_eq!(tree.get(&new_key).await.expect("get"), Leaf::empty());
            if commit {
                tx.commit().await.expect("commit");
            } else {
                tx.rollback().await.expect("rollback");
            }
            let host_rows: i64 = sqlx::query_scalar($count_sql)
                .bind(order_id)
                .fetch_one($pool)
                .await
                .expect("count host rows");
            if commit {
                assert_eq!(host_rows, 1, "{lay}: committed host row missing");
                assert_eq!(
                    tree.root().await.expect("root"),
                    root1,
                    "{lay}: committed tree change missing"
                );
                assert_eq!(tree.get(&new_key).await.expect("get"), leaf("order 1", 42));
                let keys: Vec<Key> = after
                    .keys()
                    .map(|k| k.0)
                    .chain([hkey("host-seed", 3)])
                    .collect();
                let proofs = tree.merkle_proofs(&keys).await.expect("proofs");
                for (k, p) in keys.iter().zip(&proofs) {
                    assert!(p.verify(k, &model::get(&after, k), &root1));
                }
            } else {
                assert_eq!(host_rows, 0, "{lay}: rolled-back host row visible");
                assert_eq!(
                    store.dump().await,
                    rows0,
                    "{lay}: rolled-back tree rows remain"
                );
                assert_eq!(
                    tree.root().await.expect("root"),
                    root0,
                    "{lay}: rolled-back tree change visible"
                );
                assert_eq!(tree.get(&new_key).await.expect("get"), Leaf::empty());
                assert_eq!(
                    tree.get(&hkey("host-seed", 3)).await.expect("get"),
                    leaf("seed", 4)
                );
                assert_eq!(root0, model::root(&model).expect("model"));
            }
        }
        tree.delete_all().await.expect("delete_all");
    }};
}

/// [`caller_transaction!`] on a fresh namespace of `$store`, full layout
/// (host order ids 1 and 2), then compacted (ids 11 and 12).
macro_rules! caller_transactions {
    ($store:expr, $pool:expr, $begin:expr, $insert_sql:expr, $count_sql:expr) => {{
        let ns_store = $store.open_namespace(&unique("host-tree"));
        caller_transaction!(ns_store, Full, $pool, $begin, $insert_sql, $count_sql, 0i64);
        let ns_store = $store.open_namespace(&unique("host-tree"));
        caller_transaction!(
            ns_store,
            Compacted,
            $pool,
            $begin,
            $insert_sql,
            $count_sql,
            10i64
        );
    }};
}

/// Creates the host's own tables and sqlx migrations (`sql`, several
/// statements) on `pool`.
async fn host_schema<DB: sqlx::Database>(pool: &sqlx::Pool<DB>, sql: &str)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(pool)
        .await
        .expect("host schema");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_app_sqlite() {
    let file = TempDb::new("host_app");
    let pool: SqlitePool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(sqlite_options(&file.path))
        .await
        .expect("host pool");
    // The host's own sqlx migrations and tables come first.
    host_schema(
        &pool,
        "CREATE TABLE _sqlx_migrations (
            version BIGINT PRIMARY KEY,
            description TEXT NOT NULL,
            installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
            success BOOLEAN NOT NULL,
            checksum BLOB NOT NULL,
            execution_time BIGINT NOT NULL
        );
        INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
            VALUES (20240101000000, 'host orders', TRUE, X'0102030405', 1234);
        CREATE TABLE host_orders (id INTEGER PRIMARY KEY, note TEXT NOT NULL);",
    )
    .await;
    let tables = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
        )
        .fetch_all(&pool)
        .await
        .expect("tables")
    };
    let store = SqliteStore::from_pool(pool.clone(), &unique("host"));
    migrate_beside_host!(store, &pool, tables());
    caller_transactions!(
        store,
        &pool,
        pool.begin_with("BEGIN IMMEDIATE"),
        "INSERT INTO host_orders (id, note) VALUES (?, 'order')",
        "SELECT COUNT(*) FROM host_orders WHERE id = ?"
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_app_postgres() {
    let Some(url) = pg_url("host_app_postgres") else {
        return;
    };
    let schema = PgSchema::create(&url, "host_app").await;
    let pool = schema.pool.clone();
    host_schema(
        &pool,
        "CREATE TABLE _sqlx_migrations (
            version BIGINT PRIMARY KEY,
            description TEXT NOT NULL,
            installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
            success BOOLEAN NOT NULL,
            checksum BYTEA NOT NULL,
            execution_time BIGINT NOT NULL
        );
        INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
            VALUES (20240101000000, 'host orders', TRUE, '\\x0102030405', 1234);
        CREATE TABLE host_orders (id BIGINT PRIMARY KEY, note TEXT NOT NULL);",
    )
    .await;
    let tables = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name",
        )
        .bind(&schema.schema)
        .fetch_all(&pool)
        .await
        .expect("tables")
    };
    assert_eq!(dump_sqlx!(&pool).len(), 1);
    assert_eq!(tables().await, ["_sqlx_migrations", "host_orders"]);

    let store = PostgresStore::from_pool(pool.clone(), &unique("host"));
    migrate_beside_host!(store, &pool, tables());
    caller_transactions!(
        store,
        &pool,
        pool.begin(),
        "INSERT INTO host_orders (id, note) VALUES ($1, 'order')",
        "SELECT COUNT(*) FROM host_orders WHERE id = $1"
    );
    drop(store);
    drop(pool);
    schema.drop_schema().await;
}
