//! The versioned schema runner (`SqliteStore::migrate`,
//! `PostgresStore::migrate`) on both engines:
//!
//! * `fresh`: a new database gets every version of the ledger and the
//!   store's tables; opening it again changes nothing.
//! * `earlier_schemas_upgrade`: a database at each earlier schema version
//!   of this release line (made by turning a current database back, with
//!   trees in it) opens with this version: the ledger completes, every
//!   strata and namespace row is untouched, every tree reads, proves,
//!   writes and pins as before.
//! * `newer_schema_is_refused`: a ledger entry newer than this crate knows
//!   fails the open with `SqlStoreError::SchemaTooNew`, nothing written.
//! * `released_ledger_upgrades`: a ledger as the first release wrote it
//!   (no `checksum` column, no `migration_set`, keyed by version alone),
//!   opened by several handles at once, gains both columns (its rows the
//!   tree schema's) with this crate's checksums for every version, once;
//!   versions, descriptions, times and rows stay as they were.
//! * `changed_migration_is_refused`: a ledger whose recorded checksum of a
//!   version differs from this crate's (an edited migration) fails the
//!   open and `schema_state` with `SqlStoreError::MigrationChanged` naming
//!   the version, and nothing is migrated further; with the checksum put
//!   back, the open migrates.
//!
//! Every earlier schema is turned back with the released ledger (no
//! checksums), as a database the released crate wrote has it.
//!
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`)
//! and run each in a fresh schema, dropped at the end.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::str::FromStr;

use ms_smt::store::{AuditStore, BulkStore, PinStore, Writable};

use ms_smt::{Compacted, ComputedNode, Full, Key, Layout, Leaf, Tree};
use ms_smt_sql::{LeafCount, PostgresStore, SchemaState, SqlStoreError, SqliteStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};
use support::model::{self, Model};
use support::{TempDb, hkey, pg_url, unique};

/// Every strata row (ns, path, depth, body) and namespace row (id, name,
/// height, root hash, root sum), in key order, for byte-for-byte checks.
type Dump = (
    Vec<(i64, Vec<u8>, i64, Vec<u8>)>,
    Vec<(i64, String, i64, Option<Vec<u8>>, Option<i64>)>,
);

const DUMP_STRATA: &str =
    "SELECT ns, path, depth, body FROM ms_smt_strata ORDER BY ns, path, depth";
const DUMP_NAMESPACES: &str =
    "SELECT id, name, height, root_hash, root_sum FROM ms_smt_namespaces ORDER BY id";

/// The store's tables once every version of the tree schema has run (the
/// access tokens are the server's schema since 0.2).
const TABLES: [&str; 7] = [
    "ms_smt_changes",
    "ms_smt_history",
    "ms_smt_migrations",
    "ms_smt_namespaces",
    "ms_smt_pins",
    "ms_smt_strata",
    "ms_smt_versions",
];

/// A ledger's row as read raw: version, description, time applied (as
/// text) and checksum.
type LedgerRow = (i64, String, String, Option<Vec<u8>>);

const DUMP_LEDGER: &str = "SELECT version, description, CAST(applied_at AS TEXT), checksum \
     FROM ms_smt_migrations ORDER BY version";

/// What turns a current database back into one before the change journal.
macro_rules! no_journal {
    ($version:literal) => {
        concat!(
            "DROP TABLE ms_smt_changes; DROP TABLE ms_smt_versions; \
             ALTER TABLE ms_smt_namespaces DROP COLUMN journal_from; \
             DELETE FROM ms_smt_migrations WHERE version = ",
            $version,
            "; "
        )
    };
}

/// What turns a current database back into one before the leaf counts.
macro_rules! no_counts {
    ($version:literal) => {
        concat!(
            "ALTER TABLE ms_smt_namespaces DROP COLUMN leaves; \
             ALTER TABLE ms_smt_namespaces DROP COLUMN leaves_since; \
             DELETE FROM ms_smt_migrations WHERE version = ",
            $version,
            "; "
        )
    };
}

/// What turns a current Postgres database back into one whose strata
/// vacuum at PostgreSQL's default threshold.
macro_rules! no_strata_autovacuum {
    ($version:literal) => {
        concat!(
            "ALTER TABLE ms_smt_strata RESET (autovacuum_vacuum_scale_factor); \
             DELETE FROM ms_smt_migrations WHERE version = ",
            $version,
            "; "
        )
    };
}

/// An earlier schema: its name, the SQL that turns a current database
/// back into it, and the ledger it has.
type Earlier = (&'static str, &'static str, &'static [i64]);

/// One engine's database for a scenario, and raw SQL on it.
trait Db {
    type Store: Writable<Error = SqlStoreError>
        + AuditStore
        + BulkStore
        + PinStore
        + Clone
        + std::fmt::Debug
        + 'static;
    /// A pool on the database outside the store.
    type Raw: RawPool;
    /// The ledger once every version has run.
    const VERSIONS: &'static [i64];
    /// The earlier schemas of this release line.
    const EARLIER: &'static [Earlier];
    /// What turns the ledger back into the first release's: no checksums,
    /// no sets, keyed by version.
    const RELEASED_LEDGER: &'static str;
    /// The version that added the leaf counts.
    const LEAF_COUNTS: i64;
    /// The store's pool (`Store::pool`).
    const POOL: fn(&Self::Store) -> &Self::Raw;
    /// Opens the database through the store (the runner runs).
    async fn open(&self) -> Result<Self::Store, SqlStoreError>;
    /// A store on the database that migrates nothing (for `schema_state`).
    async fn unmigrated(&self) -> Self::Store;
    /// The store's `schema_state`.
    async fn schema_state(store: &Self::Store) -> Result<SchemaState, SqlStoreError>;
    /// Opens a pool on the database outside the store.
    async fn raw(&self) -> Self::Raw;

    /// Another namespace of the store's database.
    fn namespace(store: &Self::Store, name: &str) -> Self::Store {
        BulkStore::open_namespace(store, name).expect("namespace")
    }

    /// Each namespace's listed leaf count (`None`: damaged).
    async fn counts(store: &Self::Store) -> Vec<(String, Option<LeafCount>)>;

    /// Counts the uncounted namespaces; what each came to.
    async fn recount(store: &Self::Store) -> Vec<(String, Option<u64>)>;

    /// Closes what `open` opened.
    async fn close(&self, store: Self::Store) {
        (Self::POOL)(&store).close_pool().await;
    }

    /// Runs `sql` (several statements) outside the store.
    async fn exec(&self, sql: &str) {
        let pool = self.raw().await;
        pool.exec(sql).await;
        pool.close_pool().await;
    }

    /// The ledger's versions, ascending.
    async fn versions(&self) -> Vec<i64> {
        let pool = self.raw().await;
        let v = pool
            .i64s("SELECT version FROM ms_smt_migrations ORDER BY version")
            .await;
        pool.close_pool().await;
        v
    }

    /// The ledger's rows, by version.
    async fn ledger(&self) -> Vec<LedgerRow> {
        let pool = self.raw().await;
        let rows = pool.ledger().await;
        pool.close_pool().await;
        rows
    }

    /// The `ms_smt_*` tables, by name.
    async fn tables(&self) -> Vec<String> {
        let pool = self.raw().await;
        let t = pool.strings(Self::Raw::TABLES_SQL).await;
        pool.close_pool().await;
        t
    }

    async fn dump(&self) -> Dump {
        let pool = self.raw().await;
        let (strata, ns) = pool.dump().await;
        pool.close_pool().await;
        (
            strata
                .into_iter()
                .map(|(n, p, d, b)| (n, p, d.into(), b))
                .collect(),
            ns.into_iter()
                .map(|(id, name, h, rh, rs)| (id, name, h.into(), rh, rs))
                .collect(),
        )
    }
}

/// What the raw SQL of the scenarios needs to know about an engine.
trait Engine: sqlx::Database {
    /// The type of the depth and height columns.
    type Int: Into<i64>;
    /// The query listing the `ms_smt_*` tables by name.
    const TABLES_SQL: &'static str;
}

impl Engine for sqlx::Sqlite {
    type Int = i64;
    const TABLES_SQL: &'static str = "SELECT name FROM sqlite_master \
         WHERE type = 'table' AND name LIKE 'ms_smt_%' ORDER BY name";
}

impl Engine for sqlx::Postgres {
    /// Postgres keeps depths and heights as INT.
    type Int = i32;
    const TABLES_SQL: &'static str = "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_name LIKE 'ms_smt_%' \
         ORDER BY table_name";
}

/// [`Dump`] as the engine reads it, with depths and heights as `I`.
type RawDump<I> = (
    Vec<(i64, Vec<u8>, I, Vec<u8>)>,
    Vec<(i64, String, I, Option<Vec<u8>>, Option<i64>)>,
);

/// Raw SQL on a pool of either engine.
trait RawPool {
    /// The engine's type of the depth and height columns.
    type Int: Into<i64>;
    /// The query listing the `ms_smt_*` tables by name.
    const TABLES_SQL: &'static str;
    async fn exec(&self, sql: &str);
    async fn i64s(&self, sql: &str) -> Vec<i64>;
    async fn strings(&self, sql: &str) -> Vec<String>;
    async fn dump(&self) -> RawDump<Self::Int>;
    async fn ledger(&self) -> Vec<LedgerRow>;
    async fn close_pool(&self);
}

impl<E> RawPool for sqlx::Pool<E>
where
    E: Engine,
    for<'c> &'c mut E::Connection: sqlx::Executor<'c, Database = E>,
    E::Arguments: sqlx::IntoArguments<E>,
    usize: sqlx::ColumnIndex<E::Row>,
    i64: sqlx::Type<E> + for<'r> sqlx::Decode<'r, E>,
    String: sqlx::Type<E> + for<'r> sqlx::Decode<'r, E>,
    (i64, Vec<u8>, E::Int, Vec<u8>): Send + Unpin + for<'r> sqlx::FromRow<'r, E::Row>,
    (i64, String, E::Int, Option<Vec<u8>>, Option<i64>):
        Send + Unpin + for<'r> sqlx::FromRow<'r, E::Row>,
    LedgerRow: Send + Unpin + for<'r> sqlx::FromRow<'r, E::Row>,
{
    type Int = E::Int;
    const TABLES_SQL: &'static str = E::TABLES_SQL;

    async fn exec(&self, sql: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(self)
            .await
            .expect("exec");
    }

    async fn i64s(&self, sql: &str) -> Vec<i64> {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_all(self)
            .await
            .expect("versions")
    }

    async fn strings(&self, sql: &str) -> Vec<String> {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_all(self)
            .await
            .expect("tables")
    }

    async fn dump(&self) -> RawDump<E::Int> {
        let strata = sqlx::query_as(DUMP_STRATA)
            .fetch_all(self)
            .await
            .expect("strata");
        let ns = sqlx::query_as(DUMP_NAMESPACES)
            .fetch_all(self)
            .await
            .expect("namespaces");
        (strata, ns)
    }

    async fn ledger(&self) -> Vec<LedgerRow> {
        sqlx::query_as(DUMP_LEDGER)
            .fetch_all(self)
            .await
            .expect("ledger")
    }

    async fn close_pool(&self) {
        self.close().await;
    }
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

/// A tree of random leaves in namespace `name`, with deletes and
/// replacements, and its model.
async fn build<D: Db, L: Layout>(store: &D::Store, name: &str, seed: u64) -> Model {
    let tree: Tree<D::Store, L> = Tree::new(D::namespace(store, name));
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::new();
    for round in 0..4u64 {
        let batch: Vec<(Key, Leaf)> = (0..80u64)
            .map(|i| {
                let key = hkey(name, rng.gen_range(0..200));
                let leaf = if round > 0 && i % 7 == 0 {
                    Leaf::empty()
                } else {
                    // One sum >= 2^63: stored bit-cast to a negative i64.
                    let sum = if round == 0 && i == 1 {
                        1 << 63
                    } else {
                        rng.gen_range(1..1000)
                    };
                    Leaf::new(format!("{name}/{round}/{i}").into_bytes(), sum)
                };
                (key, leaf)
            })
            .collect();
        tree.insert_many(batch.clone()).await.expect("build");
        model::apply(&mut m, &batch);
    }
    m
}

/// The tree in `name` holds exactly `m`: root, leaves, proofs, audit.
async fn check<D: Db, L: Layout>(store: &D::Store, name: &str, m: &Model) {
    let tree: Tree<D::Store, L> = Tree::new(D::namespace(store, name));
    let root = tree.root().await.expect("root");
    assert_eq!(
        root,
        model::root(m).unwrap_or_else(ComputedNode::empty_root),
        "{name}: root"
    );
    let keys: Vec<Key> = (0..200u64).map(|i| hkey(name, i)).collect();
    let leaves = tree.get_many(&keys).await.expect("get_many");
    let proofs = tree.merkle_proofs(&keys).await.expect("merkle_proofs");
    for ((key, leaf), proof) in keys.iter().zip(&leaves).zip(&proofs) {
        assert_eq!(*leaf, model::get(m, key), "{name}: leaf {key:?}");
        assert!(proof.verify(key, leaf, &root), "{name}: proof of {key:?}");
    }
    assert!(
        tree.audit().await.expect("audit").is_clean(),
        "{name}: audit"
    );
}

async fn fresh<D: Db>(db: &D) {
    let store = db.open().await.expect("open a new database");
    db.close(store).await;
    assert_eq!(db.versions().await, D::VERSIONS, "ledger");
    assert_eq!(db.tables().await, TABLES, "tables");
    let ledger = db.ledger().await;
    let sums: Vec<Option<Vec<u8>>> = ledger.iter().map(|r| r.3.clone()).collect();
    assert!(
        sums.iter()
            .all(|s| s.as_ref().is_some_and(|s| s.len() == 32)),
        "every version applied with its 32-byte checksum: {ledger:?}"
    );
    let mut distinct = sums.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), sums.len(), "one checksum per version");
    let before = db.dump().await;
    let store = db.open().await.expect("open again");
    db.close(store).await;
    assert_eq!(
        db.versions().await,
        D::VERSIONS,
        "ledger after a second open"
    );
    assert_eq!(db.dump().await, before, "a second open changed rows");
    assert_eq!(
        db.ledger().await,
        ledger,
        "a second open changed the ledger"
    );
}

async fn earlier_schemas_upgrade<D: Db>(mut make: impl FnMut(&str) -> Option<D>) {
    for (i, (what, back, ledger)) in D::EARLIER.iter().enumerate() {
        let Some(db) = make(what) else { return };
        let store = db.open().await.expect("open");
        let seed = 0x5eed_u64 + i as u64;
        let compacted = build::<D, Compacted>(&store, "compacted", seed).await;
        let full = build::<D, Full>(&store, "full", seed + 1).await;
        db.close(store).await;
        // This crate's checksums, as a fresh open recorded them.
        let sums = checksums(&db.ledger().await);
        db.exec(&format!("{back}{}", D::RELEASED_LEDGER)).await;
        assert_eq!(db.versions().await, *ledger, "{what}: ledger before");
        let before = db.dump().await;

        let store = db.open().await.expect("open an earlier schema");
        assert_eq!(db.versions().await, D::VERSIONS, "{what}: ledger after");
        assert_eq!(
            checksums(&db.ledger().await),
            sums,
            "{what}: the checksums recorded"
        );
        assert_eq!(db.tables().await, TABLES, "{what}: tables");
        assert_eq!(
            db.dump().await,
            before,
            "{what}: rows changed by the upgrade"
        );
        check::<D, Compacted>(&store, "compacted", &compacted).await;
        check::<D, Full>(&store, "full", &full).await;
        // Writes and pins work on the upgraded trees.
        let tree: Tree<D::Store, Compacted> = Tree::new(D::namespace(&store, "compacted"));
        let pinned_root = tree.root().await.expect("root");
        tree.pin("upgraded").await.expect("pin");
        let mut m = compacted.clone();
        let batch = vec![
            (hkey("compacted", 1), Leaf::new(b"after".to_vec(), 5)),
            (hkey("compacted", 2), Leaf::empty()),
        ];
        tree.insert_many(batch.clone())
            .await
            .expect("write after upgrade");
        model::apply(&mut m, &batch);
        check::<D, Compacted>(&store, "compacted", &m).await;
        // Trees that held leaves before the counts are uncounted until
        // counted once, then exact, also through writes; a schema that
        // had the counts kept them exact.
        let mut listed = D::counts(&store).await;
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        if ledger.contains(&D::LEAF_COUNTS) {
            assert_eq!(
                listed,
                [
                    (
                        "compacted".to_owned(),
                        Some(LeafCount::Exact(m.len() as u64))
                    ),
                    ("full".to_owned(), Some(LeafCount::Exact(full.len() as u64)))
                ],
                "{what}: counts kept"
            );
            assert_eq!(D::recount(&store).await, [], "{what}: nothing to count");
        } else {
            assert!(
                listed
                    .iter()
                    .all(|(_, c)| matches!(c, Some(LeafCount::Uncounted { .. }))),
                "{what}: {listed:?}"
            );
            let mut counted = D::recount(&store).await;
            counted.sort();
            assert_eq!(
                counted,
                [
                    ("compacted".to_owned(), Some(m.len() as u64)),
                    ("full".to_owned(), Some(full.len() as u64))
                ],
                "{what}: counted"
            );
        }
        tree.insert_many([(hkey("compacted", 3), Leaf::empty())])
            .await
            .expect("write after the count");
        model::apply(&mut m, &[(hkey("compacted", 3), Leaf::empty())]);
        let exact = D::counts(&store).await;
        assert!(
            exact.contains(&(
                "compacted".to_owned(),
                Some(LeafCount::Exact(m.len() as u64))
            )),
            "{what}: {exact:?}"
        );
        let view = tree.at_pin("upgraded").await.expect("at_pin");
        assert_eq!(
            view.root().await.expect("pinned root"),
            pinned_root,
            "{what}: pin"
        );
        assert!(tree.unpin("upgraded").await.expect("unpin"));
        db.close(store).await;
    }
}

async fn newer_schema_is_refused<D: Db>(db: &D) {
    let store = db.open().await.expect("open");
    build::<D, Compacted>(&store, "compacted", 7).await;
    db.close(store).await;
    let newest = *D::VERSIONS.last().expect("versions");
    db.exec("INSERT INTO ms_smt_migrations (version, description) VALUES (99, 'from the future')")
        .await;
    let before = db.dump().await;
    match db.open().await {
        Err(SqlStoreError::SchemaTooNew { found, supported }) => {
            assert_eq!((found, supported), (99, newest));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    assert_eq!(db.dump().await, before, "a refused open wrote rows");
}

/// Each version's checksum, from a ledger's rows.
fn checksums(ledger: &[LedgerRow]) -> Vec<(i64, Option<Vec<u8>>)> {
    ledger.iter().map(|r| (r.0, r.3.clone())).collect()
}

/// How many handles open the released ledger at once.
const CONCURRENT_OPENS: usize = 4;

async fn released_ledger_upgrades<D: Db>(db: &D) {
    let store = db.open().await.expect("open");
    let m = build::<D, Compacted>(&store, "compacted", 11).await;
    db.close(store).await;
    let fresh = db.ledger().await;
    db.exec(D::RELEASED_LEDGER).await;
    let before = db.dump().await;
    // The released ledger has no checksums to check: the state reads as
    // current.
    let plain = db.unmigrated().await;
    assert_eq!(
        D::schema_state(&plain).await.expect("schema_state"),
        SchemaState::Current
    );
    db.close(plain).await;

    let (a, b, c, d) = tokio::join!(db.open(), db.open(), db.open(), db.open());
    let stores = [a, b, c, d].map(|s| s.expect("a concurrent open of the released ledger"));
    assert_eq!(stores.len(), CONCURRENT_OPENS);
    let upgraded = db.ledger().await;
    assert_eq!(
        upgraded, fresh,
        "versions, descriptions, times and checksums"
    );
    assert_eq!(
        db.dump().await,
        before,
        "rows changed by the ledger upgrade"
    );
    check::<D, Compacted>(&stores[0], "compacted", &m).await;
    for store in stores {
        db.close(store).await;
    }
    let store = db.open().await.expect("open again");
    db.close(store).await;
    assert_eq!(db.ledger().await, fresh, "a second open changed the ledger");
}

async fn changed_migration_is_refused<D: Db>(db: &D) {
    let store = db.open().await.expect("open");
    build::<D, Compacted>(&store, "compacted", 13).await;
    db.close(store).await;
    let sums = checksums(&db.ledger().await);
    // An earlier schema, so there is a version left to migrate; then the
    // recorded checksum of the second version is another's, as if its
    // migration had been edited after it was applied.
    let (_, back, ledger) = D::EARLIER[0];
    let changed = D::VERSIONS[1];
    db.exec(&format!(
        "{back} UPDATE ms_smt_migrations SET checksum = \
         (SELECT checksum FROM ms_smt_migrations WHERE version = {first}) \
         WHERE version = {changed};",
        first = D::VERSIONS[0]
    ))
    .await;
    let before = (db.ledger().await, db.tables().await, db.dump().await);
    assert_eq!(db.versions().await, ledger);

    let refused = |e: SqlStoreError, what: &str| match e {
        SqlStoreError::MigrationChanged {
            version,
            ref recorded,
            expected,
            ..
        } => {
            assert_eq!(version, changed, "{what}: the version");
            assert_eq!(Some(recorded), sums[0].1.as_ref(), "{what}: recorded");
            assert_eq!(
                Some(&expected.to_vec()),
                sums[1].1.as_ref(),
                "{what}: expected"
            );
            let message = e.to_string();
            assert!(
                message.contains(&format!("schema migration {changed} (")),
                "{what}: the message names the version: {message}"
            );
            assert!(!e.is_transient(), "{what}: not transient");
        }
        other => panic!("{what}: expected MigrationChanged, got {other:?}"),
    };
    refused(
        db.open().await.expect_err("an open of a changed migration"),
        "open",
    );
    let after = (db.ledger().await, db.tables().await, db.dump().await);
    assert!(after == before, "a refused open migrated or wrote");
    let plain = db.unmigrated().await;
    refused(
        D::schema_state(&plain)
            .await
            .expect_err("schema_state of a changed migration"),
        "schema_state",
    );
    db.close(plain).await;

    // The checksum cleared (as a release without checksums leaves it), the
    // version is trusted again and the open migrates the rest.
    db.exec(&format!(
        "UPDATE ms_smt_migrations SET checksum = NULL WHERE version = {changed};"
    ))
    .await;
    let store = db.open().await.expect("open with the checksum cleared");
    db.close(store).await;
    assert_eq!(db.versions().await, D::VERSIONS, "migrated");
    assert_eq!(checksums(&db.ledger().await), sums, "checksums recorded");
}

// ---------------------------------------------------------------------------
// SQLite
// ---------------------------------------------------------------------------

struct SqliteFile(TempDb);

impl SqliteFile {
    fn new(tag: &str) -> Option<Self> {
        Some(SqliteFile(TempDb::new(&format!("schema-{tag}"))))
    }
}

impl Db for SqliteFile {
    type Store = SqliteStore;
    type Raw = SqlitePool;
    const POOL: fn(&SqliteStore) -> &SqlitePool = SqliteStore::pool;
    /// Version 7 (the access tokens) moved to the server's set.
    const VERSIONS: &'static [i64] = &[2, 4, 5, 6, 8];
    const LEAF_COUNTS: i64 = 8;
    const RELEASED_LEDGER: &'static str = "CREATE TABLE ms_smt_migrations_released (
            version INTEGER PRIMARY KEY NOT NULL,
            description TEXT NOT NULL,
            applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
        );
        INSERT INTO ms_smt_migrations_released
            SELECT version, description, applied_at FROM ms_smt_migrations;
        DROP TABLE ms_smt_migrations;
        ALTER TABLE ms_smt_migrations_released RENAME TO ms_smt_migrations;";
    const EARLIER: &'static [Earlier] = &[
        ("schema 6 (no leaf counts)", no_counts!(8), &[2, 4, 5, 6]),
        (
            "schema 5 (no change journal)",
            concat!(no_counts!(8), no_journal!(6)),
            &[2, 4, 5],
        ),
        (
            "schema 4 (no versions or pins)",
            concat!(
                no_counts!(8),
                no_journal!(6),
                "DROP TABLE ms_smt_pins; DROP TABLE ms_smt_history; \
             ALTER TABLE ms_smt_namespaces DROP COLUMN version; \
             ALTER TABLE ms_smt_strata DROP COLUMN version; \
             DELETE FROM ms_smt_migrations WHERE version = 5;"
            ),
            &[2, 4],
        ),
        (
            "schema 2 (WITHOUT ROWID strata)",
            concat!(
                no_counts!(8),
                no_journal!(6),
                "DROP TABLE ms_smt_pins; DROP TABLE ms_smt_history; \
             ALTER TABLE ms_smt_namespaces DROP COLUMN version; \
             CREATE TABLE ms_smt_strata_v2 (ns INTEGER NOT NULL, path BLOB NOT NULL, \
                 depth INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (ns, path, depth)) \
                 WITHOUT ROWID; \
             INSERT INTO ms_smt_strata_v2 SELECT ns, path, depth, body FROM ms_smt_strata; \
             DROP TABLE ms_smt_strata; \
             ALTER TABLE ms_smt_strata_v2 RENAME TO ms_smt_strata; \
             DELETE FROM ms_smt_migrations WHERE version IN (4, 5);"
            ),
            &[2],
        ),
    ];

    async fn raw(&self) -> SqlitePool {
        SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(SqliteConnectOptions::new().filename(&self.0.path))
            .await
            .expect("raw sqlite pool")
    }

    async fn open(&self) -> Result<SqliteStore, SqlStoreError> {
        let options =
            SqliteStore::connect_options(&self.0.path).synchronous(SqliteSynchronous::Normal);
        SqliteStore::open_with(options).await
    }

    async fn unmigrated(&self) -> SqliteStore {
        SqliteStore::from_pool(self.raw().await, "default")
    }

    async fn schema_state(store: &SqliteStore) -> Result<SchemaState, SqlStoreError> {
        store.schema_state().await
    }

    async fn counts(store: &SqliteStore) -> Vec<(String, Option<LeafCount>)> {
        store
            .namespaces()
            .await
            .expect("namespaces")
            .into_iter()
            .map(|n| (n.name, n.summary.ok().map(|s| s.leaves)))
            .collect()
    }

    async fn recount(store: &SqliteStore) -> Vec<(String, Option<u64>)> {
        store
            .count_leaves(&ms_smt::ProgressSink::default())
            .await
            .expect("count_leaves")
            .into_iter()
            .map(|r| (r.name, r.outcome.ok()))
            .collect()
    }
}

mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread")]
    async fn fresh() {
        super::fresh(&SqliteFile::new("fresh").expect("file")).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn earlier_schemas_upgrade() {
        super::earlier_schemas_upgrade(SqliteFile::new).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn newer_schema_is_refused() {
        super::newer_schema_is_refused(&SqliteFile::new("newer").expect("file")).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn released_ledger_upgrades() {
        super::released_ledger_upgrades(&SqliteFile::new("released").expect("file")).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn changed_migration_is_refused() {
        super::changed_migration_is_refused(&SqliteFile::new("changed").expect("file")).await;
    }
}

// ---------------------------------------------------------------------------
// Postgres: each scenario in a fresh schema of the test database
// ---------------------------------------------------------------------------

struct PgSchema {
    url: String,
    schema: String,
}

impl PgSchema {
    fn new(test: &str) -> Option<Self> {
        let url = pg_url(test)?;
        let schema = support::sanitize(&format!("ms_smt_{}", unique("schema")));
        Some(PgSchema { url, schema })
    }

    /// A pool whose sessions see this schema only (created on first use).
    async fn pool(&self) -> PgPool {
        self.admin("CREATE SCHEMA IF NOT EXISTS", "").await;
        let options = PgConnectOptions::from_str(&self.url)
            .expect("MSSMT_PG_URL")
            .options([("search_path", self.schema.as_str())]);
        PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .expect("schema pool")
    }

    async fn drop_schema(self) {
        self.admin("DROP SCHEMA IF EXISTS", " CASCADE").await;
    }

    /// Runs `{head} "<schema>"{tail}` on a one-off connection outside the
    /// schema (creating or dropping it).
    async fn admin(&self, head: &str, tail: &str) {
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&self.url)
            .await
            .expect("connect");
        let sql = format!("{head} \"{}\"{tail}", self.schema);
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        admin.close().await;
    }
}

impl Db for PgSchema {
    type Store = PostgresStore;
    type Raw = PgPool;
    const POOL: fn(&PostgresStore) -> &PgPool = PostgresStore::pool;
    /// Version 6 (the access tokens) moved to the server's set.
    const VERSIONS: &'static [i64] = &[2, 4, 5, 7, 8];
    const LEAF_COUNTS: i64 = 7;
    const RELEASED_LEDGER: &'static str = "ALTER TABLE ms_smt_migrations DROP COLUMN checksum;
        ALTER TABLE ms_smt_migrations DROP CONSTRAINT ms_smt_migrations_pkey;
        ALTER TABLE ms_smt_migrations DROP COLUMN migration_set;
        ALTER TABLE ms_smt_migrations ADD PRIMARY KEY (version);";
    const EARLIER: &'static [Earlier] = &[
        (
            "schema 7 (the strata at PostgreSQL's autovacuum threshold)",
            no_strata_autovacuum!(8),
            &[2, 4, 5, 7],
        ),
        (
            "schema 5 (no leaf counts)",
            concat!(no_strata_autovacuum!(8), no_counts!(7)),
            &[2, 4, 5],
        ),
        (
            "schema 4 (no change journal)",
            concat!(no_strata_autovacuum!(8), no_counts!(7), no_journal!(5)),
            &[2, 4],
        ),
        (
            "schema 2 (no versions or pins)",
            concat!(
                no_strata_autovacuum!(8),
                no_counts!(7),
                no_journal!(5),
                "DROP TABLE ms_smt_pins; DROP TABLE ms_smt_history; \
         ALTER TABLE ms_smt_namespaces DROP COLUMN version; \
         ALTER TABLE ms_smt_strata DROP COLUMN version; \
         DELETE FROM ms_smt_migrations WHERE version = 4;"
            ),
            &[2],
        ),
    ];

    async fn raw(&self) -> PgPool {
        self.pool().await
    }

    async fn open(&self) -> Result<PostgresStore, SqlStoreError> {
        let store = PostgresStore::from_pool(self.pool().await, "default");
        store.migrate().await?;
        Ok(store)
    }

    async fn unmigrated(&self) -> PostgresStore {
        PostgresStore::from_pool(self.pool().await, "default")
    }

    async fn schema_state(store: &PostgresStore) -> Result<SchemaState, SqlStoreError> {
        store.schema_state().await
    }

    async fn counts(store: &PostgresStore) -> Vec<(String, Option<LeafCount>)> {
        store
            .namespaces()
            .await
            .expect("namespaces")
            .into_iter()
            .map(|n| (n.name, n.summary.ok().map(|s| s.leaves)))
            .collect()
    }

    async fn recount(store: &PostgresStore) -> Vec<(String, Option<u64>)> {
        store
            .count_leaves(&ms_smt::ProgressSink::default())
            .await
            .expect("count_leaves")
            .into_iter()
            .map(|r| (r.name, r.outcome.ok()))
            .collect()
    }
}

mod postgres {
    use super::*;

    /// Runs `scenario` in a fresh schema, then drops the schema (skipped
    /// without a database).
    async fn in_schema(test: &str, scenario: impl AsyncFnOnce(&PgSchema)) {
        let Some(pg) = PgSchema::new(test) else {
            return;
        };
        scenario(&pg).await;
        pg.drop_schema().await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn fresh() {
        in_schema("schema::postgres::fresh", super::fresh).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn earlier_schemas_upgrade() {
        let mut made = Vec::new();
        super::earlier_schemas_upgrade(|what| {
            let pg = PgSchema::new("schema::postgres::earlier_schemas_upgrade")?;
            made.push(pg.schema.clone());
            let _ = what;
            Some(pg)
        })
        .await;
        for schema in made {
            if let Some(url) = pg_url("schema::postgres::earlier_schemas_upgrade") {
                PgSchema { url, schema }.drop_schema().await;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn newer_schema_is_refused() {
        in_schema(
            "schema::postgres::newer_schema_is_refused",
            super::newer_schema_is_refused,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn released_ledger_upgrades() {
        in_schema(
            "schema::postgres::released_ledger_upgrades",
            super::released_ledger_upgrades,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn changed_migration_is_refused() {
        in_schema(
            "schema::postgres::changed_migration_is_refused",
            super::changed_migration_is_refused,
        )
        .await;
    }

    /// The strata's storage parameters, as `pg_class` lists them.
    async fn strata_options(db: &PgSchema) -> Vec<String> {
        let pool = db.raw().await;
        let options = pool
            .strings(
                "SELECT unnest(reloptions) FROM pg_class \
                 WHERE oid = to_regclass('ms_smt_strata') ORDER BY 1",
            )
            .await;
        pool.close_pool().await;
        options
    }

    /// The strata's storage parameters after an open (which migrates).
    async fn strata_options_after_open(db: &PgSchema) -> Vec<String> {
        let store = db.open().await.expect("open");
        db.close(store).await;
        strata_options(db).await
    }

    /// Version 8 sets the strata's autovacuum threshold on a new database
    /// and on one of version 7; an operator's own setting made after it
    /// stays through later opens.
    #[tokio::test(flavor = "multi_thread")]
    async fn strata_autovacuum_threshold() {
        in_schema(
            "schema::postgres::strata_autovacuum_threshold",
            async |db: &PgSchema| {
                assert_eq!(
                    strata_options_after_open(db).await,
                    ["autovacuum_vacuum_scale_factor=0.05"],
                    "a new database"
                );

                db.exec(no_strata_autovacuum!(8)).await;
                assert!(strata_options(db).await.is_empty(), "schema 7");
                assert_eq!(
                    strata_options_after_open(db).await,
                    ["autovacuum_vacuum_scale_factor=0.05"],
                    "upgraded from schema 7"
                );

                db.exec("ALTER TABLE ms_smt_strata SET (autovacuum_vacuum_scale_factor = 0.02)")
                    .await;
                assert_eq!(
                    strata_options_after_open(db).await,
                    ["autovacuum_vacuum_scale_factor=0.02"],
                    "the operator's setting"
                );
            },
        )
        .await;
    }
}
