//! Databases written by the hash-keyed schema (version 1: one row per node
//! hash with a reference count in `ms_smt_nodes`, one root per namespace in
//! `ms_smt_roots`) open with the position-keyed strata schema, nothing
//! lost, on SQLite (`SqliteStore::open`) and on Postgres
//! (`PostgresStore::migrate`).
//!
//! The old database is built here with the old schema's own DDL, and filled
//! with the rows [`MemoryStore`] keeps (the old layout: one row per distinct
//! node hash, a reference count per row), written as the old code wrote
//! them (sums as the i64 with the same bits).
//!
//! Every scenario runs on both engines (tests `sqlite::*` and
//! `postgres::*`); the engines differ only in their [`Backend`], [`OldDb`]
//! and [`SqlStore`] impls.
//!
//! * `old_database_migrates_intact`: compacted, full, sums >= 2^63, twin
//!   subtrees (shared rows, refs > 1), a history with deletes; roots,
//!   leaves, proofs (byte-identical to the memory tree's), absent keys and
//!   further writes after migration; old tables dropped, versions 1, 2, 3;
//!   a second open changes nothing.
//! * `corrupt_namespace_is_refused_and_kept`: a namespace missing an inner
//!   node fails with `SqlStoreError::Migration` naming it; its old rows and
//!   root stay, the namespaces after it stay in the old tables, the ones
//!   before it are moved and readable; once repaired, the next open finishes.
//! * `tampered_leaf_is_refused`: a leaf whose value no longer matches the
//!   stored root fails the root comparison.
//! * `empty_old_database_migrates`: a version-1 database without trees.
//!
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`)
//! and run each in a fresh schema (a pool whose `search_path` is that
//! schema), dropped at the end. Without the URL they print a SKIPPED line
//! and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(any(feature = "sqlite", feature = "postgres"))]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ms_smt::error::PlanError;
use ms_smt::hash::sha256;
use ms_smt::store::{MemoryStore, MigrationError, RebuildError, SqlStoreError, TreeStore};
use ms_smt::{Compacted, ComputedNode, Full, Hash, Key, Layout, LayoutKind, Leaf, Node, Tree};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name no other test (or test process) uses.
fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{tag}_{}_{nanos:x}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The change `tampered_leaf_is_refused` makes to a leaf's value.
const TAMPERED_VALUE: &[u8] = b"tampered";

// ---------------------------------------------------------------------------
// The two engines
// ---------------------------------------------------------------------------

/// Every old node row of a namespace, all columns, in hash order:
/// hash, l_hash, r_hash, leaf_key, value, sum, refs.
type OldRow = (
    Vec<u8>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
    i64,
);

/// Every strata row (ns, path, depth, body) and namespace row (id, name,
/// height, root hash, root sum), for byte-for-byte comparisons.
type StrataDump = (
    Vec<(i64, Vec<u8>, i64, Vec<u8>)>,
    Vec<(i64, String, i64, Option<Vec<u8>>, Option<i64>)>,
);

/// The raw SQL the scenarios run on a database, bypassing the store: the
/// old schema and rows going in, and what the tables hold.
trait OldDb {
    /// Creates the version-1 tables and the ledger recording version 1.
    async fn create_old_schema(&self);
    /// Writes `rows` and `root` as the old code stored namespace `ns`, in
    /// one transaction.
    async fn write_old_rows(&self, ns: &str, rows: &[(Hash, Node, u64)], root: &ComputedNode);
    /// One old node row.
    async fn insert_old_node(&self, ns: &str, hash: &Hash, node: &Node, refs: u64);
    /// Deletes one old node row; returns the rows affected.
    async fn delete_old_node(&self, ns: &str, hash: &Hash) -> u64;
    /// Sets an old node row's value to [`TAMPERED_VALUE`]; returns the
    /// rows affected.
    async fn tamper_old_node(&self, ns: &str, hash: &Hash) -> u64;
    /// The `ms_smt_*` tables, by name.
    async fn tables(&self) -> Vec<String>;
    /// `ms_smt_migrations`' versions, ascending.
    async fn versions(&self) -> Vec<i64>;
    async fn old_rows(&self, ns: &str) -> Vec<OldRow>;
    async fn old_root_row(&self, ns: &str) -> Option<(Vec<u8>, i64)>;
    /// `ms_smt_namespaces`' names, by name.
    async fn new_namespaces(&self) -> Vec<String>;
    async fn strata_dump(&self) -> StrataDump;
    /// Strata rows whose namespace id has no `ms_smt_namespaces` row.
    async fn orphan_strata_rows(&self) -> i64;
    /// Runs `sql` (several statements).
    async fn run_sql(&self, sql: &str);
}

/// The engine's store, as the scenarios use it.
trait SqlStore: TreeStore<Error = SqlStoreError> + ms_smt::store::PinStore + Clone {
    type Pool: OldDb;
    /// The same database, namespace `name`.
    fn ns_store(&self, name: &str) -> Self;
    /// The store's pool.
    fn raw_pool(&self) -> Self::Pool;
    /// A store (namespace "default") on `pool`, without running migrations.
    fn unmigrated(pool: Self::Pool) -> Self;
}

/// One scenario's database.
trait Backend {
    type Pool: OldDb;
    type Store: SqlStore<Pool = Self::Pool>;
    /// A plain pool on the database, as the old code (or a human with a
    /// SQL shell) would open it; no migration runs.
    async fn raw(&self) -> Self::Pool;
    /// Done with a pool from [`raw`](Self::raw) or a store (SQLite closes
    /// it, so that the next open starts afresh; Postgres keeps its schema
    /// pool until the schema is dropped).
    async fn release(&self, pool: Self::Pool);
    /// The new code opening the database: the migrations run.
    async fn open(&self) -> Result<Self::Store, SqlStoreError>;
    /// `ms_smt_migrations` once every migration of the engine has run.
    const VERSIONS: &'static [i64];
    /// `ms_smt_migrations` when moving the old trees (version 3) failed:
    /// the table changes after it have run first.
    const VERSIONS_BEFORE_MOVE: &'static [i64];
    /// SQL that turns a fully migrated database back into what the
    /// previous release of the crate wrote (no pins, history or version
    /// columns; the ledger without the last version).
    const TO_PREVIOUS_RELEASE: &'static str;
}

/// The store's tables once every migration has run.
const TABLES: [&str; 5] = [
    "ms_smt_history",
    "ms_smt_migrations",
    "ms_smt_namespaces",
    "ms_smt_pins",
    "ms_smt_strata",
];

/// A database with the version-1 schema and ledger, no trees yet.
async fn create_old_database<B: Backend>(backend: &B) -> B::Pool {
    let pool = backend.raw().await;
    pool.create_old_schema().await;
    pool
}

/// Writes the fixture's tree as the old code stored it; returns its rows.
async fn write_old_namespace(pool: &impl OldDb, fx: &Fixture) -> Vec<(Hash, Node, u64)> {
    let rows = fx.mem.rows().expect("memory rows");
    assert!(
        rows.iter().any(|(h, _, _)| *h == fx.root.hash),
        "{}: the root is not among the memory rows",
        fx.name
    );
    pool.write_old_rows(&fx.name, &rows, &fx.root).await;
    rows
}

// ---------------------------------------------------------------------------
// SQLite: a temp file, the old schema exactly as the old SQLite code made it
// ---------------------------------------------------------------------------

#[cfg(feature = "sqlite")]
mod sqlite_engine {
    use std::path::{Path, PathBuf};

    use ms_smt::store::{SqlStoreError, SqliteStore};
    use ms_smt::{ComputedNode, Hash, Node};
    use sqlx::SqlitePool;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

    use super::{
        Backend, OldDb, OldRow, SqlStore, StrataDump, TAMPERED_VALUE, old_columns, sum_to_sql,
        unique,
    };

    const MIGRATIONS_TABLE: &str = "CREATE TABLE ms_smt_migrations (
    version INTEGER PRIMARY KEY NOT NULL,
    description TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

    /// Version 1 of `MIGRATIONS` in src/store/sqlite.rs.
    const V1_DDL: &str = "CREATE TABLE ms_smt_nodes (
            namespace TEXT NOT NULL,
            hash BLOB NOT NULL,
            l_hash BLOB,
            r_hash BLOB,
            leaf_key BLOB,
            value BLOB,
            sum INTEGER NOT NULL,
            refs INTEGER NOT NULL,
            PRIMARY KEY (namespace, hash)
        ) WITHOUT ROWID;
        CREATE TABLE ms_smt_roots (
            namespace TEXT PRIMARY KEY NOT NULL,
            hash BLOB NOT NULL,
            sum INTEGER NOT NULL
        );";

    /// A database file in the temp directory, removed (with its WAL) on drop.
    pub struct SqliteFile {
        path: PathBuf,
    }

    impl SqliteFile {
        pub fn new(tag: &str) -> Self {
            let name = format!("ms_smt_migration_{}.db", unique(tag));
            let path = std::env::temp_dir().join(name);
            for suffix in ["", "-wal", "-shm"] {
                assert!(
                    !with_suffix(&path, suffix).exists(),
                    "temp file {} already exists",
                    path.display()
                );
            }
            SqliteFile { path }
        }
    }

    fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
        let mut p = path.to_path_buf().into_os_string();
        p.push(suffix);
        PathBuf::from(p)
    }

    impl Drop for SqliteFile {
        fn drop(&mut self) {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(with_suffix(&self.path, suffix));
            }
        }
    }

    /// The `ms_smt_strata` of schema version 2 (a `WITHOUT ROWID` table).
    const V2_STRATA: &str = "CREATE TABLE ms_smt_strata (
            ns INTEGER NOT NULL,
            path BLOB NOT NULL,
            depth INTEGER NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (ns, path, depth)
        ) WITHOUT ROWID";

    async fn strata_ddl(pool: &SqlitePool) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'ms_smt_strata' AND sql IS NOT NULL \
             ORDER BY type DESC, name",
        )
        .fetch_all(pool)
        .await
        .expect("read the strata DDL")
    }

    /// A database at schema version 3 (strata rows in the `WITHOUT ROWID`
    /// table of version 2) opens with its rows moved into the rowid table
    /// of version 4, byte for byte, and its trees read and write as before.
    pub async fn without_rowid_strata_are_rekeyed(file: &SqliteFile) {
        use super::{
            check_any, check_reads_any, create_old_database, fixture_compacted, fixture_full,
            fixture_history, write_old_namespace,
        };
        use ms_smt::store::MemoryStore;
        use rand::SeedableRng;

        let mut rng = rand::rngs::StdRng::seed_from_u64(0x7265_6b65_7973_2104);
        let db = MemoryStore::new();
        let fixtures = vec![
            fixture_compacted(&db, "a-compacted", 600, &mut rng).await,
            fixture_full(&db, "b-full", &mut rng).await,
            fixture_history(&db, "e-history", &mut rng).await,
        ];
        let pool = create_old_database(file).await;
        for fx in &fixtures {
            write_old_namespace(&pool, fx).await;
        }
        file.release(pool).await;
        let store = file.open().await.expect("first open");
        for fx in &fixtures {
            check_reads_any(fx, &store).await;
        }
        let pool = store.pool().clone();
        let before = pool.strata_dump().await;
        assert!(!before.0.is_empty(), "no strata rows to move");

        // Back to what version 3 left: the version-2 table, no versions 4
        // and 5 (no pins, history or version columns).
        sqlx::raw_sql(&format!(
            "ALTER TABLE ms_smt_strata RENAME TO t; {V2_STRATA}; \
             INSERT INTO ms_smt_strata SELECT ns, path, depth, body FROM t; DROP TABLE t; \
             DROP TABLE ms_smt_pins; DROP TABLE ms_smt_history; \
             ALTER TABLE ms_smt_namespaces DROP COLUMN version; \
             DELETE FROM ms_smt_migrations WHERE version IN (4, 5);"
        ))
        .execute(&pool)
        .await
        .expect("restore the version-3 schema");
        assert_eq!(pool.versions().await, [1, 2, 3], "restored ledger");
        assert_eq!(strata_ddl(&pool).await, [V2_STRATA], "restored table");
        assert_eq!(pool.strata_dump().await, before, "restored rows");
        file.release(pool).await;

        let store = file.open().await.expect("open the version-3 database");
        let pool = store.pool().clone();
        assert_eq!(pool.versions().await, [1, 2, 3, 4, 5], "ms_smt_migrations");
        let ddl = strata_ddl(&pool).await;
        assert!(
            ddl.len() == 2
                && !ddl[0].contains("WITHOUT ROWID")
                && ddl[0].contains("id INTEGER PRIMARY KEY")
                && ddl[1].contains("UNIQUE INDEX ms_smt_strata_position"),
            "strata table after version 4: {ddl:?}"
        );
        assert_eq!(pool.strata_dump().await, before, "rows moved by version 4");
        assert_eq!(pool.tables().await, super::TABLES, "tables");
        for fx in &fixtures {
            check_any(fx, &store).await;
        }
        file.release(pool).await;
    }

    impl Backend for SqliteFile {
        type Pool = SqlitePool;
        type Store = SqliteStore;
        const VERSIONS: &'static [i64] = &[1, 2, 3, 4, 5];
        const VERSIONS_BEFORE_MOVE: &'static [i64] = &[1, 2, 4, 5];
        const TO_PREVIOUS_RELEASE: &'static str = "DROP TABLE ms_smt_pins; \
             DROP TABLE ms_smt_history; \
             ALTER TABLE ms_smt_namespaces DROP COLUMN version; \
             ALTER TABLE ms_smt_strata DROP COLUMN version; \
             DELETE FROM ms_smt_migrations WHERE version = 5;";

        async fn raw(&self) -> SqlitePool {
            let options = SqliteConnectOptions::new()
                .filename(&self.path)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal);
            SqlitePoolOptions::new()
                .max_connections(2)
                .connect_with(options)
                .await
                .unwrap_or_else(|e| panic!("open {}: {e}", self.path.display()))
        }

        async fn release(&self, pool: SqlitePool) {
            pool.close().await;
        }

        async fn open(&self) -> Result<SqliteStore, SqlStoreError> {
            SqliteStore::open(&self.path).await
        }
    }

    impl SqlStore for SqliteStore {
        type Pool = SqlitePool;

        fn ns_store(&self, name: &str) -> Self {
            self.namespace(name)
        }

        fn raw_pool(&self) -> SqlitePool {
            self.pool().clone()
        }

        fn unmigrated(pool: SqlitePool) -> Self {
            SqliteStore::from_pool(pool, "default")
        }
    }

    async fn insert_node(
        conn: &mut sqlx::SqliteConnection,
        ns: &str,
        hash: &Hash,
        node: &Node,
        refs: u64,
    ) {
        let (l, r, key, value, sum) = old_columns(node);
        sqlx::query(
            "INSERT INTO ms_smt_nodes (namespace, hash, l_hash, r_hash, leaf_key, value, sum, refs) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(ns)
        .bind(hash.0.to_vec())
        .bind(l)
        .bind(r)
        .bind(key)
        .bind(value)
        .bind(sum)
        .bind(i64::try_from(refs).expect("refs fit i64"))
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{ns}: insert old node {hash:?}: {e}"));
    }

    impl OldDb for SqlitePool {
        async fn create_old_schema(&self) {
            let mut tx = self.begin().await.expect("begin old schema");
            sqlx::raw_sql(MIGRATIONS_TABLE)
                .execute(&mut *tx)
                .await
                .expect("create ms_smt_migrations");
            sqlx::raw_sql(V1_DDL)
                .execute(&mut *tx)
                .await
                .expect("create the version-1 tables");
            sqlx::query(
                "INSERT INTO ms_smt_migrations (version, description) \
                 VALUES (1, 'nodes and roots')",
            )
            .execute(&mut *tx)
            .await
            .expect("record version 1");
            tx.commit().await.expect("commit old schema");
        }

        async fn write_old_rows(&self, ns: &str, rows: &[(Hash, Node, u64)], root: &ComputedNode) {
            let mut tx = self.begin().await.expect("begin old rows");
            for (hash, node, refs) in rows {
                insert_node(&mut tx, ns, hash, node, *refs).await;
            }
            sqlx::query("INSERT INTO ms_smt_roots (namespace, hash, sum) VALUES (?, ?, ?)")
                .bind(ns)
                .bind(root.hash.0.to_vec())
                .bind(sum_to_sql(root.sum))
                .execute(&mut *tx)
                .await
                .unwrap_or_else(|e| panic!("{ns}: insert old root: {e}"));
            tx.commit().await.expect("commit old rows");
        }

        async fn insert_old_node(&self, ns: &str, hash: &Hash, node: &Node, refs: u64) {
            let mut conn = self.acquire().await.expect("acquire");
            insert_node(&mut conn, ns, hash, node, refs).await;
        }

        async fn delete_old_node(&self, ns: &str, hash: &Hash) -> u64 {
            sqlx::query("DELETE FROM ms_smt_nodes WHERE namespace = ? AND hash = ?")
                .bind(ns)
                .bind(hash.0.to_vec())
                .execute(self)
                .await
                .expect("delete an old node")
                .rows_affected()
        }

        async fn tamper_old_node(&self, ns: &str, hash: &Hash) -> u64 {
            sqlx::query("UPDATE ms_smt_nodes SET value = ? WHERE namespace = ? AND hash = ?")
                .bind(TAMPERED_VALUE)
                .bind(ns)
                .bind(hash.0.to_vec())
                .execute(self)
                .await
                .expect("tamper with an old node")
                .rows_affected()
        }

        async fn tables(&self) -> Vec<String> {
            sqlx::query_scalar(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'ms_smt_%' \
                 ORDER BY name",
            )
            .fetch_all(self)
            .await
            .expect("list tables")
        }

        async fn versions(&self) -> Vec<i64> {
            sqlx::query_scalar("SELECT version FROM ms_smt_migrations ORDER BY version")
                .fetch_all(self)
                .await
                .expect("read ms_smt_migrations")
        }

        async fn old_rows(&self, ns: &str) -> Vec<OldRow> {
            sqlx::query_as(
                "SELECT hash, l_hash, r_hash, leaf_key, value, sum, refs FROM ms_smt_nodes \
                 WHERE namespace = ? ORDER BY hash",
            )
            .bind(ns)
            .fetch_all(self)
            .await
            .expect("read ms_smt_nodes")
        }

        async fn old_root_row(&self, ns: &str) -> Option<(Vec<u8>, i64)> {
            sqlx::query_as("SELECT hash, sum FROM ms_smt_roots WHERE namespace = ?")
                .bind(ns)
                .fetch_optional(self)
                .await
                .expect("read ms_smt_roots")
        }

        async fn new_namespaces(&self) -> Vec<String> {
            sqlx::query_scalar("SELECT name FROM ms_smt_namespaces ORDER BY name")
                .fetch_all(self)
                .await
                .expect("read ms_smt_namespaces")
        }

        async fn strata_dump(&self) -> StrataDump {
            let rows = sqlx::query_as(
                "SELECT ns, path, depth, body FROM ms_smt_strata ORDER BY ns, path, depth",
            )
            .fetch_all(self)
            .await
            .expect("read ms_smt_strata");
            let names = sqlx::query_as(
                "SELECT id, name, height, root_hash, root_sum FROM ms_smt_namespaces ORDER BY id",
            )
            .fetch_all(self)
            .await
            .expect("read ms_smt_namespaces");
            (rows, names)
        }

        async fn orphan_strata_rows(&self) -> i64 {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM ms_smt_strata \
                 WHERE ns NOT IN (SELECT id FROM ms_smt_namespaces)",
            )
            .fetch_one(self)
            .await
            .expect("count orphan strata rows")
        }

        async fn run_sql(&self, sql: &str) {
            sqlx::raw_sql(sql).execute(self).await.expect("run SQL");
        }
    }
}

// ---------------------------------------------------------------------------
// Postgres: a fresh schema, the old schema exactly as the old Postgres code
// made it
// ---------------------------------------------------------------------------

#[cfg(feature = "postgres")]
mod postgres_engine {
    use std::str::FromStr;

    use ms_smt::store::{PostgresStore, SqlStoreError};
    use ms_smt::{ComputedNode, Hash, Node};
    use sqlx::PgPool;
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

    use super::{
        Backend, OldDb, OldRow, SqlStore, StrataDump, TAMPERED_VALUE, old_columns, sum_to_sql,
        unique,
    };

    /// The ledger as `PostgresStore::migrate` creates it.
    const MIGRATIONS_TABLE: &str = "CREATE TABLE ms_smt_migrations (
        version BIGINT PRIMARY KEY NOT NULL,
        description TEXT NOT NULL,
        applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
    )";

    /// Version 1 of `MIGRATIONS` in src/store/postgres.rs.
    const V1_DDL: &str = "CREATE TABLE ms_smt_nodes (
            namespace TEXT NOT NULL,
            hash BYTEA NOT NULL,
            l_hash BYTEA,
            r_hash BYTEA,
            leaf_key BYTEA,
            value BYTEA,
            sum BIGINT NOT NULL,
            refs BIGINT NOT NULL,
            PRIMARY KEY (namespace, hash)
        );
        CREATE TABLE ms_smt_roots (
            namespace TEXT PRIMARY KEY NOT NULL,
            hash BYTEA NOT NULL,
            sum BIGINT NOT NULL
        );";

    /// The Postgres URL, or `None` (after printing why) when the test must
    /// skip.
    fn pg_url(test: &str) -> Option<String> {
        match std::env::var("MSSMT_PG_URL") {
            Ok(url) if !url.is_empty() => Some(url),
            _ => {
                if std::env::var("MSSMT_REQUIRE_PG").as_deref() == Ok("1") {
                    panic!(
                        "postgres test {test} FAILED: MSSMT_PG_URL is not set but \
                         MSSMT_REQUIRE_PG=1 (run via scripts/with-postgres.sh)"
                    );
                }
                eprintln!(
                    "postgres test {test} SKIPPED: MSSMT_PG_URL not set \
                     (run via scripts/with-postgres.sh)"
                );
                None
            }
        }
    }

    /// A fresh schema of the test database and a pool whose sessions'
    /// `search_path` is that schema only, so the old tables and the new
    /// ones are this test's alone.
    pub struct PgSchema {
        admin: PgPool,
        pool: PgPool,
        schema: String,
    }

    impl PgSchema {
        /// The schema for test `test`; `None` when Postgres tests skip (see
        /// [`pg_url`]).
        pub async fn create(test: &str) -> Option<Self> {
            let url = pg_url(test)?;
            let schema = format!("ms_smt_{}", unique("migration"));
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .connect(&url)
                .await
                .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
            sqlx::raw_sql(&format!("CREATE SCHEMA \"{schema}\""))
                .execute(&admin)
                .await
                .expect("create schema");
            let options = PgConnectOptions::from_str(&url)
                .expect("MSSMT_PG_URL")
                .options([("search_path", schema.as_str())]);
            let pool = PgPoolOptions::new()
                .max_connections(4)
                .connect_with(options)
                .await
                .expect("schema pool");
            Some(PgSchema {
                admin,
                pool,
                schema,
            })
        }

        pub async fn drop_schema(self) {
            self.pool.close().await;
            sqlx::raw_sql(&format!("DROP SCHEMA \"{}\" CASCADE", self.schema))
                .execute(&self.admin)
                .await
                .expect("drop schema");
            self.admin.close().await;
        }
    }

    impl Backend for PgSchema {
        type Pool = PgPool;
        type Store = PostgresStore;
        const VERSIONS: &'static [i64] = &[1, 2, 3, 4];
        const VERSIONS_BEFORE_MOVE: &'static [i64] = &[1, 2, 4];
        const TO_PREVIOUS_RELEASE: &'static str = "DROP TABLE ms_smt_pins; \
             DROP TABLE ms_smt_history; \
             ALTER TABLE ms_smt_namespaces DROP COLUMN version; \
             ALTER TABLE ms_smt_strata DROP COLUMN version; \
             DELETE FROM ms_smt_migrations WHERE version = 4;";

        async fn raw(&self) -> PgPool {
            self.pool.clone()
        }

        async fn release(&self, _pool: PgPool) {}

        async fn open(&self) -> Result<PostgresStore, SqlStoreError> {
            let store = PostgresStore::from_pool(self.pool.clone(), "default");
            store.migrate().await?;
            Ok(store)
        }
    }

    impl SqlStore for PostgresStore {
        type Pool = PgPool;

        fn ns_store(&self, name: &str) -> Self {
            self.namespace(name)
        }

        fn raw_pool(&self) -> PgPool {
            self.pool().clone()
        }

        fn unmigrated(pool: PgPool) -> Self {
            PostgresStore::from_pool(pool, "default")
        }
    }

    async fn insert_node(
        conn: &mut sqlx::PgConnection,
        ns: &str,
        hash: &Hash,
        node: &Node,
        refs: u64,
    ) {
        let (l, r, key, value, sum) = old_columns(node);
        sqlx::query(
            "INSERT INTO ms_smt_nodes (namespace, hash, l_hash, r_hash, leaf_key, value, sum, refs) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(ns)
        .bind(hash.0.to_vec())
        .bind(l)
        .bind(r)
        .bind(key)
        .bind(value)
        .bind(sum)
        .bind(i64::try_from(refs).expect("refs fit i64"))
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{ns}: insert old node {hash:?}: {e}"));
    }

    impl OldDb for PgPool {
        async fn create_old_schema(&self) {
            let mut tx = self.begin().await.expect("begin old schema");
            sqlx::raw_sql(MIGRATIONS_TABLE)
                .execute(&mut *tx)
                .await
                .expect("create ms_smt_migrations");
            sqlx::raw_sql(V1_DDL)
                .execute(&mut *tx)
                .await
                .expect("create the version-1 tables");
            sqlx::query(
                "INSERT INTO ms_smt_migrations (version, description) \
                 VALUES (1, 'nodes and roots')",
            )
            .execute(&mut *tx)
            .await
            .expect("record version 1");
            tx.commit().await.expect("commit old schema");
        }

        async fn write_old_rows(&self, ns: &str, rows: &[(Hash, Node, u64)], root: &ComputedNode) {
            let mut tx = self.begin().await.expect("begin old rows");
            for (hash, node, refs) in rows {
                insert_node(&mut tx, ns, hash, node, *refs).await;
            }
            sqlx::query("INSERT INTO ms_smt_roots (namespace, hash, sum) VALUES ($1, $2, $3)")
                .bind(ns)
                .bind(root.hash.0.to_vec())
                .bind(sum_to_sql(root.sum))
                .execute(&mut *tx)
                .await
                .unwrap_or_else(|e| panic!("{ns}: insert old root: {e}"));
            tx.commit().await.expect("commit old rows");
        }

        async fn insert_old_node(&self, ns: &str, hash: &Hash, node: &Node, refs: u64) {
            let mut conn = self.acquire().await.expect("acquire");
            insert_node(&mut conn, ns, hash, node, refs).await;
        }

        async fn delete_old_node(&self, ns: &str, hash: &Hash) -> u64 {
            sqlx::query("DELETE FROM ms_smt_nodes WHERE namespace = $1 AND hash = $2")
                .bind(ns)
                .bind(hash.0.to_vec())
                .execute(self)
                .await
                .expect("delete an old node")
                .rows_affected()
        }

        async fn tamper_old_node(&self, ns: &str, hash: &Hash) -> u64 {
            sqlx::query("UPDATE ms_smt_nodes SET value = $1 WHERE namespace = $2 AND hash = $3")
                .bind(TAMPERED_VALUE)
                .bind(ns)
                .bind(hash.0.to_vec())
                .execute(self)
                .await
                .expect("tamper with an old node")
                .rows_affected()
        }

        async fn tables(&self) -> Vec<String> {
            sqlx::query_scalar(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name LIKE 'ms\\_smt\\_%' \
                 ORDER BY table_name COLLATE \"C\"",
            )
            .fetch_all(self)
            .await
            .expect("list tables")
        }

        async fn versions(&self) -> Vec<i64> {
            sqlx::query_scalar("SELECT version FROM ms_smt_migrations ORDER BY version")
                .fetch_all(self)
                .await
                .expect("read ms_smt_migrations")
        }

        async fn old_rows(&self, ns: &str) -> Vec<OldRow> {
            sqlx::query_as(
                "SELECT hash, l_hash, r_hash, leaf_key, value, sum, refs FROM ms_smt_nodes \
                 WHERE namespace = $1 ORDER BY hash",
            )
            .bind(ns)
            .fetch_all(self)
            .await
            .expect("read ms_smt_nodes")
        }

        async fn old_root_row(&self, ns: &str) -> Option<(Vec<u8>, i64)> {
            sqlx::query_as("SELECT hash, sum FROM ms_smt_roots WHERE namespace = $1")
                .bind(ns)
                .fetch_optional(self)
                .await
                .expect("read ms_smt_roots")
        }

        async fn new_namespaces(&self) -> Vec<String> {
            sqlx::query_scalar("SELECT name FROM ms_smt_namespaces ORDER BY name COLLATE \"C\"")
                .fetch_all(self)
                .await
                .expect("read ms_smt_namespaces")
        }

        async fn strata_dump(&self) -> StrataDump {
            let rows = sqlx::query_as(
                "SELECT ns, path, depth::BIGINT, body FROM ms_smt_strata \
                 ORDER BY ns, path, depth",
            )
            .fetch_all(self)
            .await
            .expect("read ms_smt_strata");
            let names = sqlx::query_as(
                "SELECT id, name, height::BIGINT, root_hash, root_sum FROM ms_smt_namespaces \
                 ORDER BY id",
            )
            .fetch_all(self)
            .await
            .expect("read ms_smt_namespaces");
            (rows, names)
        }

        async fn orphan_strata_rows(&self) -> i64 {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM ms_smt_strata \
                 WHERE ns NOT IN (SELECT id FROM ms_smt_namespaces)",
            )
            .fetch_one(self)
            .await
            .expect("count orphan strata rows")
        }

        async fn run_sql(&self, sql: &str) {
            sqlx::raw_sql(sql).execute(self).await.expect("run SQL");
        }
    }
}

// ---------------------------------------------------------------------------
// Keys, leaves, the model
// ---------------------------------------------------------------------------

fn hkey(tag: &str, i: u64) -> Key {
    Key(sha256(format!("{tag}/{i}").as_bytes()).0)
}

/// A leaf with a random value of 0..=80 bytes and a sum in [1, 2^32).
fn random_leaf(rng: &mut StdRng) -> Leaf {
    let mut value = vec![0u8; rng.gen_range(0..=80)];
    rng.fill(&mut value[..]);
    Leaf::new(value, rng.gen_range(1..1u64 << 32))
}

type Model = BTreeMap<[u8; 32], Leaf>;
type Batch = Vec<(Key, Leaf)>;

fn model_apply(model: &mut Model, batch: &[(Key, Leaf)]) {
    for (k, l) in batch {
        if l.is_empty() {
            model.remove(&k.0);
        } else {
            model.insert(k.0, l.clone());
        }
    }
}

fn model_get(model: &Model, key: &Key) -> Leaf {
    model.get(&key.0).cloned().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Old trees: built on the memory store, written as old rows
// ---------------------------------------------------------------------------

/// One namespace of the old database and what it must read back as.
struct Fixture {
    name: String,
    kind: LayoutKind,
    /// The memory store namespace the tree was built in (the old layout).
    mem: MemoryStore,
    model: Model,
    /// The root the old database records.
    root: ComputedNode,
    /// Keys that must read back as the empty leaf (deleted ones included).
    absent: Vec<Key>,
    /// A batch to write after the migration.
    next: Batch,
}

/// Builds a tree of layout `L` in namespace `name` of `db` by applying
/// `batches` in order (empty leaves delete).
async fn build<L: Layout>(
    db: &MemoryStore,
    name: &str,
    batches: &[Batch],
    mut absent: Vec<Key>,
    rng: &mut StdRng,
) -> Fixture {
    let mem = db.namespace(name).expect("memory namespace");
    let tree: Tree<MemoryStore, L> = Tree::new(mem.clone());
    let mut model = Model::new();
    let mut root = ComputedNode::empty_root();
    for (i, batch) in batches.iter().enumerate() {
        root = tree
            .insert_many(batch.clone())
            .await
            .unwrap_or_else(|e| panic!("{name}: memory batch {i}: {e}"));
        model_apply(&mut model, batch);
    }
    assert_eq!(
        tree.root().await.expect("memory root"),
        root,
        "{name}: memory root"
    );
    assert!(!model.is_empty(), "{name}: the fixture tree is empty");
    // Every key any batch touched and the model lacks is an absent key.
    for (k, _) in batches.iter().flatten() {
        if !model.contains_key(&k.0) {
            absent.push(*k);
        }
    }
    absent.sort_unstable_by_key(|k| k.0);
    absent.dedup();
    for k in &absent {
        assert!(
            !model.contains_key(&k.0),
            "{name}: absent key {k:?} is live"
        );
    }
    let next = next_batch(name, &model, rng);
    Fixture {
        name: name.to_owned(),
        kind: L::KIND,
        mem,
        model,
        root,
        absent,
        next,
    }
}

/// New keys, two replaced leaves and two deletes of live keys.
fn next_batch(name: &str, model: &Model, rng: &mut StdRng) -> Batch {
    let live: Vec<Key> = model.keys().map(|k| Key(*k)).collect();
    let mut batch: Batch = (0..60)
        .map(|i| (hkey(&format!("{name}/next"), i), random_leaf(rng)))
        .collect();
    let n = live.len();
    batch.push((live[1 % n], random_leaf(rng)));
    batch.push((live[n / 3], random_leaf(rng)));
    batch.push((live[0], Leaf::empty()));
    batch.push((live[n / 2], Leaf::empty()));
    batch
}

/// The columns of an old `ms_smt_nodes` row for `node`:
/// l_hash, r_hash, leaf_key, value, sum (bit-cast).
type OldColumns = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
);

fn sum_to_sql(sum: u64) -> i64 {
    i64::from_ne_bytes(sum.to_ne_bytes())
}

fn old_columns(node: &Node) -> OldColumns {
    match node {
        Node::Branch { left, right, sum } => (
            Some(left.0.to_vec()),
            Some(right.0.to_vec()),
            None,
            None,
            sum_to_sql(*sum),
        ),
        Node::Compacted { key, leaf } => (
            None,
            None,
            Some(key.0.to_vec()),
            Some(leaf.value().to_vec()),
            sum_to_sql(leaf.sum()),
        ),
        Node::Leaf(leaf) => (
            None,
            None,
            None,
            Some(leaf.value().to_vec()),
            sum_to_sql(leaf.sum()),
        ),
    }
}

// ---------------------------------------------------------------------------
// Checking a migrated namespace
// ---------------------------------------------------------------------------

/// Reads only: root, every leaf, absent keys, proofs of a sample (verified
/// and byte-identical to the memory tree's).
async fn check_reads<S: SqlStore, L: Layout>(fx: &Fixture, sql: &S) {
    let name = &fx.name;
    let mem: Tree<MemoryStore, L> = Tree::new(fx.mem.clone());
    let tree: Tree<S, L> = Tree::new(sql.ns_store(name));
    let root = tree
        .root()
        .await
        .unwrap_or_else(|e| panic!("{name}: root: {e}"));
    assert_eq!(
        root, fx.root,
        "{name}: migrated root differs from the old root"
    );
    assert_eq!(
        mem.root().await.expect("memory root"),
        fx.root,
        "{name}: memory tree moved (test bug)"
    );

    let keys: Vec<Key> = fx.model.keys().map(|k| Key(*k)).collect();
    let got = tree
        .get_many(&keys)
        .await
        .unwrap_or_else(|e| panic!("{name}: get_many: {e}"));
    assert_eq!(got.len(), keys.len(), "{name}: get_many length");
    for ((key, want), got) in fx.model.iter().zip(&got) {
        assert_eq!(got, want, "{name}: leaf {} differs", hex::encode(key));
    }

    let got = tree
        .get_many(&fx.absent)
        .await
        .unwrap_or_else(|e| panic!("{name}: get_many absent: {e}"));
    assert_eq!(got.len(), fx.absent.len(), "{name}: get_many absent length");
    for (key, got) in fx.absent.iter().zip(&got) {
        assert_eq!(
            *got,
            Leaf::empty(),
            "{name}: absent key {key:?} reads {got:?}"
        );
    }

    let step = (keys.len() / 250).max(1);
    let mut sample: Vec<Key> = keys.iter().step_by(step).copied().collect();
    sample.extend(fx.absent.iter().take(50));
    let proofs = tree
        .merkle_proofs(&sample)
        .await
        .unwrap_or_else(|e| panic!("{name}: merkle_proofs: {e}"));
    let mem_proofs = mem.merkle_proofs(&sample).await.expect("memory proofs");
    assert_eq!(proofs.len(), sample.len(), "{name}: merkle_proofs length");
    assert_eq!(
        mem_proofs.len(),
        sample.len(),
        "{name}: memory proofs length"
    );
    for ((key, proof), mem_proof) in sample.iter().zip(&proofs).zip(&mem_proofs) {
        let leaf = model_get(&fx.model, key);
        assert!(
            proof.verify(key, &leaf, &fx.root),
            "{name}: proof of {key:?} does not verify"
        );
        assert_eq!(
            proof.to_bytes(),
            mem_proof.to_bytes(),
            "{name}: proof of {key:?} differs from the memory tree's"
        );
    }
}

/// Reads, then `fx.next` written on the migrated tree and on the memory
/// tree: equal roots, and the new contents read back. Returns the new root.
async fn check<S: SqlStore, L: Layout>(fx: &Fixture, sql: &S) -> ComputedNode {
    check_reads::<S, L>(fx, sql).await;
    let name = &fx.name;
    let mem: Tree<MemoryStore, L> = Tree::new(fx.mem.clone());
    let tree: Tree<S, L> = Tree::new(sql.ns_store(name));
    let want = mem
        .insert_many(fx.next.clone())
        .await
        .expect("memory insert_many");
    let got = tree
        .insert_many(fx.next.clone())
        .await
        .unwrap_or_else(|e| panic!("{name}: insert_many after migration: {e}"));
    assert_eq!(got, want, "{name}: root after a write on the migrated tree");
    assert_ne!(got, fx.root, "{name}: the write changed nothing (test bug)");
    assert_eq!(
        tree.root().await.expect("root after write"),
        want,
        "{name}: stored root after a write"
    );

    let mut model = fx.model.clone();
    model_apply(&mut model, &fx.next);
    let keys: Vec<Key> = fx.next.iter().map(|(k, _)| *k).collect();
    let got = tree
        .get_many(&keys)
        .await
        .unwrap_or_else(|e| panic!("{name}: get_many after write: {e}"));
    for (key, got) in keys.iter().zip(&got) {
        assert_eq!(*got, model_get(&model, key), "{name}: {key:?} after write");
    }
    let proofs = tree
        .merkle_proofs(&keys)
        .await
        .unwrap_or_else(|e| panic!("{name}: merkle_proofs after write: {e}"));
    let mem_proofs = mem.merkle_proofs(&keys).await.expect("memory proofs");
    for ((key, proof), mem_proof) in keys.iter().zip(&proofs).zip(&mem_proofs) {
        assert!(
            proof.verify(key, &model_get(&model, key), &want),
            "{name}: proof of {key:?} after write does not verify"
        );
        assert_eq!(
            proof.to_bytes(),
            mem_proof.to_bytes(),
            "{name}: proof of {key:?} after write differs from the memory tree's"
        );
    }
    // The rest of the tree is still there.
    let live: Vec<Key> = model.keys().map(|k| Key(*k)).collect();
    let got = tree
        .get_many(&live)
        .await
        .unwrap_or_else(|e| panic!("{name}: get_many of all after write: {e}"));
    for ((key, want), got) in model.iter().zip(&got) {
        assert_eq!(got, want, "{name}: leaf {} after write", hex::encode(key));
    }
    want
}

async fn check_any<S: SqlStore>(fx: &Fixture, sql: &S) -> ComputedNode {
    match fx.kind {
        LayoutKind::Full => check::<S, Full>(fx, sql).await,
        LayoutKind::Compacted => check::<S, Compacted>(fx, sql).await,
    }
}

async fn check_reads_any<S: SqlStore>(fx: &Fixture, sql: &S) {
    match fx.kind {
        LayoutKind::Full => check_reads::<S, Full>(fx, sql).await,
        LayoutKind::Compacted => check_reads::<S, Compacted>(fx, sql).await,
    }
}

async fn root_of<S: SqlStore>(store: &S, ns: &str) -> ComputedNode {
    store
        .ns_store(ns)
        .load_root()
        .await
        .unwrap_or_else(|e| panic!("{ns}: load_root: {e}"))
}

// ---------------------------------------------------------------------------
// The fixtures
// ---------------------------------------------------------------------------

/// (a) ~2,000 random leaves, compacted, insert-only history in 4 batches.
async fn fixture_compacted(db: &MemoryStore, name: &str, n: u64, rng: &mut StdRng) -> Fixture {
    let leaves: Batch = (0..n).map(|i| (hkey(name, i), random_leaf(rng))).collect();
    let batches: Vec<Batch> = leaves.chunks(500).map(<[_]>::to_vec).collect();
    let absent = (0..20)
        .map(|i| hkey(&format!("{name}/absent"), i))
        .collect();
    build::<Compacted>(db, name, &batches, absent, rng).await
}

/// (b) A full tree of 50 leaves; 8 hold the same leaf (shared leaf rows),
/// two differ only in bit 255; 5 deleted in a second batch.
async fn fixture_full(db: &MemoryStore, name: &str, rng: &mut StdRng) -> Fixture {
    let same = Leaf::new(b"same".to_vec(), 77);
    let mut first: Batch = (0..45).map(|i| (hkey(name, i), random_leaf(rng))).collect();
    for i in 45..53 {
        first.push((hkey(name, i), same.clone()));
    }
    let mut twin = hkey(name, 99);
    first.push((twin, same.clone()));
    twin.0[31] ^= 0x80;
    first.push((twin, same.clone()));
    let second: Batch = (0..5).map(|i| (hkey(name, i * 3), Leaf::empty())).collect();
    let absent = (0..10)
        .map(|i| hkey(&format!("{name}/absent"), i))
        .collect();
    build::<Full>(db, name, &[first, second], absent, rng).await
}

/// (c) Sums of 2^63 + 7 and 2^62 next to small ones: the root's and many
/// branches' sums are >= 2^63 (negative as i64).
async fn fixture_big_sums(db: &MemoryStore, name: &str, rng: &mut StdRng) -> Fixture {
    let mut batch: Batch = vec![
        (hkey(name, 0), Leaf::new(b"big".to_vec(), (1u64 << 63) + 7)),
        (hkey(name, 1), Leaf::new(b"half".to_vec(), 1u64 << 62)),
    ];
    for i in 2..32 {
        batch.push((
            hkey(name, i),
            Leaf::new(vec![i as u8; 3], rng.gen_range(1..1000)),
        ));
    }
    let absent = (0..10)
        .map(|i| hkey(&format!("{name}/absent"), i))
        .collect();
    build::<Compacted>(db, name, &[batch], absent, rng).await
}

/// (d) Twin subtrees: keys that differ only in bit 0 (the root's split)
/// with equal leaves, so the root's two subtrees share their rows; the
/// zero-key group of bits 0 and 255; three unpaired keys.
async fn fixture_twins(db: &MemoryStore, name: &str, rng: &mut StdRng) -> Fixture {
    let mut batch = Batch::new();
    for i in 0..40 {
        let key = hkey(name, i);
        let leaf = random_leaf(rng);
        let mut twin = key;
        twin.0[0] ^= 1;
        batch.push((key, leaf.clone()));
        batch.push((twin, leaf));
    }
    let zero = Leaf::new(b"zero".to_vec(), 5);
    for (b0, b31) in [(0u8, 0u8), (1, 0), (0, 0x80), (1, 0x80)] {
        let mut key = Key([0; 32]);
        key.0[0] = b0;
        key.0[31] = b31;
        batch.push((key, zero.clone()));
    }
    for i in 100..103 {
        batch.push((hkey(name, i), random_leaf(rng)));
    }
    let absent = (0..10)
        .map(|i| hkey(&format!("{name}/absent"), i))
        .collect();
    build::<Compacted>(db, name, &[batch], absent, rng).await
}

/// (e) Inserts, deletes, replacements and re-inserts over four batches.
async fn fixture_history(db: &MemoryStore, name: &str, rng: &mut StdRng) -> Fixture {
    let first: Batch = (0..400)
        .map(|i| (hkey(name, i), random_leaf(rng)))
        .collect();
    let mut second: Batch = (0..400)
        .step_by(2)
        .map(|i| (hkey(name, i), Leaf::empty()))
        .collect();
    second.extend(
        (1..400)
            .step_by(8)
            .map(|i| (hkey(name, i), random_leaf(rng))),
    );
    let mut third: Batch = (400..500)
        .map(|i| (hkey(name, i), random_leaf(rng)))
        .collect();
    third.extend(
        (0..100)
            .step_by(4)
            .map(|i| (hkey(name, i), random_leaf(rng))),
    );
    third.extend(
        (401..500)
            .step_by(3)
            .map(|i| (hkey(name, i), Leaf::empty())),
    );
    // Insert and delete in the same batch (last write wins), and delete
    // keys that were never there.
    let fourth: Batch = vec![
        (hkey(name, 1000), random_leaf(rng)),
        (hkey(name, 1000), Leaf::empty()),
        (hkey(name, 1001), Leaf::empty()),
        (hkey(name, 3), Leaf::empty()),
    ];
    let absent = (0..10)
        .map(|i| hkey(&format!("{name}/absent"), i))
        .collect();
    build::<Compacted>(db, name, &[first, second, third, fourth], absent, rng).await
}

// ---------------------------------------------------------------------------
// The scenarios, on either engine
// ---------------------------------------------------------------------------

async fn old_database_migrates_intact<B: Backend>(backend: &B, engine: &str) {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(0x6d69_6772_6174_6531);
    let db = MemoryStore::new();
    let fixtures = vec![
        fixture_compacted(&db, "a-compacted", 2000, &mut rng).await,
        fixture_full(&db, "b-full", &mut rng).await,
        fixture_big_sums(&db, "c-big-sums", &mut rng).await,
        fixture_twins(&db, "d-twins", &mut rng).await,
        fixture_history(&db, "e-history", &mut rng).await,
    ];
    assert!(
        fixtures[2].root.sum >= 1 << 63,
        "c-big-sums: root sum {} is below 2^63",
        fixtures[2].root.sum
    );

    let pool = create_old_database(backend).await;
    for fx in &fixtures {
        let rows = write_old_namespace(&pool, fx).await;
        let shared = rows.iter().filter(|r| r.2 > 1).count();
        match fx.name.as_str() {
            "b-full" | "d-twins" => assert!(
                shared >= 2,
                "{}: only {shared} rows with refs > 1 (twins not shared)",
                fx.name
            ),
            "c-big-sums" => assert!(
                rows.iter()
                    .any(|r| sum_to_sql(r.1.sum()) < 0 && r.1.sum() != fx.root.sum),
                "c-big-sums: no row below the root has a sum >= 2^63"
            ),
            _ => {}
        }
        assert_eq!(
            pool.old_rows(&fx.name).await.len(),
            rows.len(),
            "{}: old rows written",
            fx.name
        );
    }
    assert_eq!(pool.versions().await, [1], "old ledger");
    backend.release(pool).await;

    // The new code opens it.
    let store = backend
        .open()
        .await
        .expect("open the old database with the new code");
    let pool = store.raw_pool();
    assert_eq!(
        pool.tables().await,
        TABLES,
        "the old tables are not dropped (or the new ones are missing)"
    );
    assert_eq!(pool.versions().await, B::VERSIONS, "ms_smt_migrations");
    let mut names: Vec<String> = fixtures.iter().map(|f| f.name.clone()).collect();
    names.sort();
    assert_eq!(pool.new_namespaces().await, names, "ms_smt_namespaces");

    let mut new_roots = Vec::new();
    for fx in &fixtures {
        new_roots.push((fx.name.clone(), check_any(fx, &store).await));
    }
    // A namespace the old database never had is empty.
    assert_eq!(
        root_of(&store, "never-written").await,
        ComputedNode::empty_root(),
        "a new namespace is not empty"
    );

    // A second open is a no-op.
    let before = pool.strata_dump().await;
    backend.release(pool).await;
    let again = backend.open().await.expect("open again");
    let pool = again.raw_pool();
    assert_eq!(
        pool.versions().await,
        B::VERSIONS,
        "ms_smt_migrations after reopen"
    );
    assert_eq!(
        pool.strata_dump().await,
        before,
        "the second open changed rows"
    );
    for (name, root) in &new_roots {
        assert_eq!(
            root_of(&again, name).await,
            *root,
            "{name}: root after reopen"
        );
    }
    backend.release(pool).await;
    eprintln!(
        "{engine} old_database_migrates_intact: {:?}",
        started.elapsed()
    );
}

async fn corrupt_namespace_is_refused_and_kept<B: Backend>(backend: &B) {
    let mut rng = StdRng::seed_from_u64(0x636f_7272_7570_7421);
    let db = MemoryStore::new();
    // Migrated in name order: a, b before m; z after.
    let fixtures = vec![
        fixture_compacted(&db, "a-good", 200, &mut rng).await,
        fixture_full(&db, "b-good-full", &mut rng).await,
        fixture_compacted(&db, "m-corrupt", 300, &mut rng).await,
        fixture_compacted(&db, "z-later", 100, &mut rng).await,
    ];
    let corrupt = &fixtures[2];
    let later = &fixtures[3];

    let pool = create_old_database(backend).await;
    let mut corrupt_rows = Vec::new();
    for fx in &fixtures {
        let rows = write_old_namespace(&pool, fx).await;
        if fx.name == corrupt.name {
            corrupt_rows = rows;
        }
    }
    // An inner node (a branch, not the root) of m-corrupt goes missing.
    let (lost_hash, lost_node, lost_refs) = corrupt_rows
        .iter()
        .find(|(h, n, _)| matches!(n, Node::Branch { .. }) && *h != corrupt.root.hash)
        .cloned()
        .expect("m-corrupt has an inner branch");
    let deleted = pool.delete_old_node(&corrupt.name, &lost_hash).await;
    assert_eq!(deleted, 1, "deleted rows");
    let corrupt_before = pool.old_rows(&corrupt.name).await;
    assert_eq!(
        corrupt_before.len(),
        corrupt_rows.len() - 1,
        "m-corrupt rows"
    );
    let corrupt_root_before = pool.old_root_row(&corrupt.name).await;
    assert!(corrupt_root_before.is_some(), "m-corrupt has no root row");
    let later_before = pool.old_rows(&later.name).await;
    let later_root_before = pool.old_root_row(&later.name).await;
    assert!(
        !later_before.is_empty() && later_root_before.is_some(),
        "z-later rows"
    );
    backend.release(pool).await;

    for attempt in ["first", "second"] {
        match backend.open().await {
            Err(SqlStoreError::Migration { namespace, source }) => {
                assert_eq!(namespace, corrupt.name, "{attempt} open: failing namespace");
                assert!(
                    matches!(
                        source,
                        MigrationError::OldTree(PlanError::MissingNode { hash, .. })
                            if hash == lost_hash
                    ),
                    "{attempt} open: expected the missing node {lost_hash:?}, got {source:?}"
                );
            }
            Err(other) => panic!("{attempt} open: expected a Migration error, got {other:?}"),
            Ok(_) => panic!("{attempt} open: a database with a corrupt namespace opened"),
        }

        let pool = backend.raw().await;
        assert_eq!(
            pool.old_rows(&corrupt.name).await,
            corrupt_before,
            "{attempt} open: m-corrupt's old rows changed"
        );
        assert_eq!(
            pool.old_root_row(&corrupt.name).await,
            corrupt_root_before,
            "{attempt} open: m-corrupt's old root changed"
        );
        assert_eq!(
            pool.old_rows(&later.name).await,
            later_before,
            "{attempt} open: z-later's old rows changed"
        );
        assert_eq!(
            pool.old_root_row(&later.name).await,
            later_root_before,
            "{attempt} open: z-later's old root changed"
        );
        for fx in &fixtures[..2] {
            assert!(
                pool.old_rows(&fx.name).await.is_empty()
                    && pool.old_root_row(&fx.name).await.is_none(),
                "{attempt} open: {} was not moved out of the old tables",
                fx.name
            );
        }
        assert_eq!(
            pool.versions().await,
            B::VERSIONS_BEFORE_MOVE,
            "{attempt} open: ms_smt_migrations"
        );
        assert_eq!(
            pool.tables().await,
            [
                "ms_smt_history",
                "ms_smt_migrations",
                "ms_smt_namespaces",
                "ms_smt_nodes",
                "ms_smt_pins",
                "ms_smt_roots",
                "ms_smt_strata"
            ],
            "{attempt} open: tables"
        );
        assert_eq!(
            pool.new_namespaces().await,
            ["a-good", "b-good-full"],
            "{attempt} open: ms_smt_namespaces"
        );
        assert_eq!(
            pool.orphan_strata_rows().await,
            0,
            "{attempt} open: strata rows of no namespace"
        );

        // The namespaces moved before the failure read back right.
        let store = B::Store::unmigrated(pool);
        for fx in &fixtures[..2] {
            check_reads_any(fx, &store).await;
        }
        backend.release(store.raw_pool()).await;
    }

    // Repaired, the next open finishes the migration.
    let pool = backend.raw().await;
    pool.insert_old_node(&corrupt.name, &lost_hash, &lost_node, lost_refs)
        .await;
    backend.release(pool).await;
    let store = backend.open().await.expect("open after the repair");
    let pool = store.raw_pool();
    assert_eq!(
        pool.versions().await,
        B::VERSIONS,
        "ms_smt_migrations after repair"
    );
    assert_eq!(pool.tables().await, TABLES, "tables after repair");
    for fx in &fixtures {
        check_any(fx, &store).await;
    }
    backend.release(pool).await;
}

async fn tampered_leaf_is_refused<B: Backend>(backend: &B) {
    let mut rng = StdRng::seed_from_u64(0x7461_6d70_6572_6564);
    let db = MemoryStore::new();
    let fx = fixture_compacted(&db, "tampered", 100, &mut rng).await;
    let pool = create_old_database(backend).await;
    let rows = write_old_namespace(&pool, &fx).await;
    let (leaf_hash, _, _) = rows
        .iter()
        .find(|(_, n, _)| matches!(n, Node::Compacted { .. }))
        .expect("a compacted leaf row");
    let changed = pool.tamper_old_node(&fx.name, leaf_hash).await;
    assert_eq!(changed, 1, "tampered rows");
    let before = pool.old_rows(&fx.name).await;
    backend.release(pool).await;

    match backend.open().await {
        Err(SqlStoreError::Migration { namespace, source }) => {
            assert_eq!(namespace, fx.name, "failing namespace");
            match source {
                MigrationError::Rebuild(RebuildError::RootMismatch { stored, rebuilt }) => {
                    assert_eq!(stored, fx.root, "stored root");
                    assert_ne!(rebuilt, fx.root, "rebuilt root");
                }
                other => panic!("expected a root mismatch, got {other:?}"),
            }
        }
        Err(other) => panic!("expected a Migration error, got {other:?}"),
        Ok(_) => panic!("a database with a tampered leaf opened"),
    }
    let pool = backend.raw().await;
    assert_eq!(pool.old_rows(&fx.name).await, before, "old rows changed");
    assert!(pool.old_root_row(&fx.name).await.is_some(), "old root lost");
    assert_eq!(
        pool.versions().await,
        B::VERSIONS_BEFORE_MOVE,
        "ms_smt_migrations"
    );
    assert!(pool.new_namespaces().await.is_empty(), "namespace created");
    backend.release(pool).await;
}

/// A database as the previous release wrote it (strata rows without
/// versions, no pins) opens with this one: every tree reads and writes as
/// before, its rows are untouched, and pins work on it.
async fn previous_release_opens<B: Backend>(backend: &B) {
    let mut rng = StdRng::seed_from_u64(0x7072_6576_696f_7573);
    let db = MemoryStore::new();
    let fixtures = vec![
        fixture_compacted(&db, "a-compacted", 600, &mut rng).await,
        fixture_full(&db, "b-full", &mut rng).await,
        fixture_history(&db, "e-history", &mut rng).await,
    ];
    let pool = create_old_database(backend).await;
    for fx in &fixtures {
        write_old_namespace(&pool, fx).await;
    }
    backend.release(pool).await;
    let store = backend.open().await.expect("first open");
    let pool = store.raw_pool();
    pool.run_sql(B::TO_PREVIOUS_RELEASE).await;
    let before = pool.strata_dump().await;
    backend.release(pool).await;

    let store = backend
        .open()
        .await
        .expect("open the previous release's database");
    let pool = store.raw_pool();
    assert_eq!(pool.versions().await, B::VERSIONS, "ms_smt_migrations");
    assert_eq!(pool.tables().await, TABLES, "tables");
    assert_eq!(
        pool.strata_dump().await,
        before,
        "rows changed by the upgrade"
    );
    for fx in &fixtures {
        check_reads_any(fx, &store).await;
    }
    // Pins work on the upgraded trees: pin, write, read the pin back.
    let fx = &fixtures[0];
    let tree: Tree<B::Store, Compacted> = Tree::new(store.ns_store(&fx.name));
    let pin = tree.pin("after-upgrade").await.expect("pin");
    assert_eq!(pin.root, fx.root, "pinned root");
    for fx in &fixtures {
        check_any(fx, &store).await;
    }
    let pinned = tree.at_pin("after-upgrade").await.expect("at_pin");
    assert_eq!(pinned.root().await.expect("root"), fx.root);
    let keys: Vec<Key> = fx.model.keys().map(|k| Key(*k)).collect();
    let got = pinned.get_many(&keys).await.expect("pinned get_many");
    for (key, got) in keys.iter().zip(&got) {
        assert_eq!(*got, model_get(&fx.model, key), "pinned leaf {key:?}");
    }
    assert!(tree.unpin("after-upgrade").await.expect("unpin"));
    backend.release(pool).await;
}

async fn empty_old_database_migrates<B: Backend>(backend: &B) {
    let pool = create_old_database(backend).await;
    backend.release(pool).await;
    let store = backend.open().await.expect("open an empty old database");
    let pool = store.raw_pool();
    assert_eq!(pool.versions().await, B::VERSIONS, "ms_smt_migrations");
    assert_eq!(pool.tables().await, TABLES, "tables");
    assert_eq!(
        root_of(&store, "default").await,
        ComputedNode::empty_root(),
        "root of an empty database"
    );
    backend.release(pool).await;
}

// ---------------------------------------------------------------------------
// Tests: SQLite
// ---------------------------------------------------------------------------

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::sqlite_engine::SqliteFile;

    #[tokio::test(flavor = "multi_thread")]
    async fn old_database_migrates_intact() {
        super::old_database_migrates_intact(&SqliteFile::new("intact"), "sqlite").await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn corrupt_namespace_is_refused_and_kept() {
        super::corrupt_namespace_is_refused_and_kept(&SqliteFile::new("corrupt")).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn tampered_leaf_is_refused() {
        super::tampered_leaf_is_refused(&SqliteFile::new("tampered")).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn empty_old_database_migrates() {
        super::empty_old_database_migrates(&SqliteFile::new("empty")).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn previous_release_opens() {
        super::previous_release_opens(&SqliteFile::new("previous")).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn without_rowid_strata_are_rekeyed() {
        super::sqlite_engine::without_rowid_strata_are_rekeyed(&SqliteFile::new("rekey")).await;
    }
}

// ---------------------------------------------------------------------------
// Tests: Postgres (each in its own schema; a failing test leaves its schema
// behind for inspection)
// ---------------------------------------------------------------------------

#[cfg(feature = "postgres")]
mod postgres {
    use super::postgres_engine::PgSchema;

    #[tokio::test(flavor = "multi_thread")]
    async fn old_database_migrates_intact() {
        let Some(pg) = PgSchema::create("old_database_migrates_intact").await else {
            return;
        };
        super::old_database_migrates_intact(&pg, "postgres").await;
        pg.drop_schema().await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn corrupt_namespace_is_refused_and_kept() {
        let Some(pg) = PgSchema::create("corrupt_namespace_is_refused_and_kept").await else {
            return;
        };
        super::corrupt_namespace_is_refused_and_kept(&pg).await;
        pg.drop_schema().await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn tampered_leaf_is_refused() {
        let Some(pg) = PgSchema::create("tampered_leaf_is_refused").await else {
            return;
        };
        super::tampered_leaf_is_refused(&pg).await;
        pg.drop_schema().await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn previous_release_opens() {
        let Some(pg) = PgSchema::create("previous_release_opens").await else {
            return;
        };
        super::previous_release_opens(&pg).await;
        pg.drop_schema().await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn empty_old_database_migrates() {
        let Some(pg) = PgSchema::create("empty_old_database_migrates").await else {
            return;
        };
        super::empty_old_database_migrates(&pg).await;
        pg.drop_schema().await;
    }
}
