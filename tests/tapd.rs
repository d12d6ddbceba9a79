//! Interop with tapd's tables (issue 26): the fixture trees written by the
//! Go reference (../shared/fixtures/tapd, or $MSSMT_TAPD_FIXTURES) import
//! into ms-smt with their roots, sums, leaves and proofs; damaged copies
//! fail with the error naming the row at fault and nothing written;
//! unreachable rows are counted; audits find the same; an export writes
//! the rows tapd writes. Each on SQLite (a copy of the file) and on
//! Postgres (the dump loaded into a fresh schema).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use ms_smt::store::{BulkStore, PostgresStore, SqliteStore};
use ms_smt::tapd::{
    Corruption, ExportOptions, ImportError, ImportOptions, TapdError, TapdSource, TapdTarget,
    audit_namespace, export_namespace, import_namespace,
};
use ms_smt::test_utils::branch_hash;
use ms_smt::{CompactedTree, ComputedNode, Hash, Key};
use serde::Deserialize;
use sqlx::Connection;
use support::{TempDb, pg_url, sanitize, unique};

fn fixtures_dir() -> PathBuf {
    std::env::var_os("MSSMT_TAPD_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/tapd"))
}

#[derive(Deserialize)]
struct Expected {
    namespaces: Vec<ExpectedNs>,
}

#[derive(Deserialize)]
struct ExpectedNs {
    namespace: String,
    root_hash: String,
    root_sum: String,
    leaves: Vec<ExpectedLeaf>,
    proofs: Vec<ExpectedProof>,
}

#[derive(Deserialize)]
struct ExpectedLeaf {
    key: String,
    value: String,
    sum: String,
}

#[derive(Deserialize)]
struct ExpectedProof {
    key: String,
    compressed_proof: String,
}

fn expected() -> Expected {
    let text = std::fs::read_to_string(fixtures_dir().join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("parse expected.json")
}

fn key_of(hex_key: &str) -> Key {
    Key(hex::decode(hex_key).expect("hex").try_into().expect("32 bytes"))
}

/// A copy of the fixture on one engine: its source string for
/// [`TapdSource::open`], and how to run SQL on it (to damage it).
struct Copy {
    src: String,
    sqlite: Option<PathBuf>,
    _dir: Option<tempfile::TempDir>,
}

/// The engines under test: SQLite always, Postgres when MSSMT_PG_URL is set
/// (required with MSSMT_REQUIRE_PG=1).
#[derive(Clone)]
enum Engine {
    Sqlite,
    Postgres(String),
}

fn engines(test: &str) -> Vec<Engine> {
    let mut out = vec![Engine::Sqlite];
    if let Some(url) = pg_url(test) {
        out.push(Engine::Postgres(url));
    }
    out
}

/// `url` with `search_path` set to `schema`.
fn in_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// A fresh, empty Postgres schema; its URL.
async fn pg_schema(base: &str, tag: &str) -> String {
    let schema = sanitize(&unique(tag)).to_lowercase();
    let mut conn = sqlx::PgConnection::connect(base).await.expect("connect");
    sqlx::raw_sql(&format!("CREATE SCHEMA {schema}"))
        .execute(&mut conn)
        .await
        .expect("create schema");
    in_schema(base, &schema)
}

impl Engine {
    /// A fresh copy of the fixture database.
    async fn copy(&self, tag: &str) -> Copy {
        match self {
            Engine::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                let path = dir.path().join("tapd.db");
                std::fs::copy(fixtures_dir().join("tapd-sqlite.db"), &path).expect("copy");
                Copy {
                    src: path.to_string_lossy().into_owned(),
                    sqlite: Some(path),
                    _dir: Some(dir),
                }
            }
            Engine::Postgres(base) => {
                let url = pg_schema(base, tag).await;
                let schema = url.rsplit("search_path%3D").next().expect("schema").to_owned();
                let dump = std::fs::read_to_string(fixtures_dir().join("tapd-postgres.sql"))
                    .expect("dump");
                let sql: String = dump
                    .lines()
                    .filter(|l| !l.starts_with('\\') && !l.contains("set_config('search_path'"))
                    .map(|l| format!("{}\n", l.replace("public.", &format!("{schema}."))))
                    .collect();
                let mut conn = sqlx::PgConnection::connect(base).await.expect("connect");
                sqlx::raw_sql(&sql).execute(&mut conn).await.expect("load dump");
                Copy {
                    src: url,
                    sqlite: None,
                    _dir: None,
                }
            }
        }
    }

    /// A literal for `bytes` in this engine's SQL.
    fn blob(&self, bytes: &[u8]) -> String {
        match self {
            Engine::Sqlite => format!("X'{}'", hex::encode(bytes)),
            Engine::Postgres(_) => format!("'\\x{}'::bytea", hex::encode(bytes)),
        }
    }

    /// Runs `sql` on the copy (foreign keys off: damage is what we want).
    async fn exec(&self, copy: &Copy, sql: &str) {
        match &copy.sqlite {
            Some(path) => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(path)
                    .foreign_keys(false);
                let mut conn = sqlx::SqliteConnection::connect_with(&options)
                    .await
                    .expect("open copy");
                sqlx::raw_sql(sql).execute(&mut conn).await.expect("damage");
                conn.close().await.expect("close");
            }
            None => {
                let mut conn = sqlx::PgConnection::connect(&copy.src).await.expect("connect");
                let sql = format!(
                    "ALTER TABLE mssmt_roots DROP CONSTRAINT IF EXISTS \
                     mssmt_roots_namespace_root_hash_fkey; {sql}"
                );
                sqlx::raw_sql(&sql).execute(&mut conn).await.expect("damage");
            }
        }
    }

    /// One row's columns, by SQL `filter` on `mssmt_nodes`.
    async fn row(&self, copy: &Copy, filter: &str) -> (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>, Option<Vec<u8>>, i64) {
        let sql = format!(
            "SELECT hash_key, l_hash_key, r_hash_key, key, sum FROM mssmt_nodes WHERE {filter} \
             ORDER BY hash_key LIMIT 1"
        );
        match &copy.sqlite {
            Some(path) => {
                let mut conn = sqlx::SqliteConnection::connect(&path.to_string_lossy())
                    .await
                    .expect("open");
                sqlx::query_as(&sql).fetch_one(&mut conn).await.expect("row")
            }
            None => {
                let mut conn = sqlx::PgConnection::connect(&copy.src).await.expect("connect");
                sqlx::query_as(&sql).fetch_one(&mut conn).await.expect("row")
            }
        }
    }

    /// Runs `check` with a target tree of this engine, named `tag`.
    async fn with_target<F, Fut>(&self, tag: &str, check: F)
    where
        F: FnOnce(Target) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        match self {
            Engine::Sqlite => {
                let file = TempDb::new(tag);
                let store = SqliteStore::open(&file.path).await.expect("open target");
                check(Target::Sqlite(CompactedTree::new(store.open_namespace(&unique(tag))))).await;
            }
            Engine::Postgres(url) => {
                let store = PostgresStore::connect(url).await.expect("connect target");
                check(Target::Postgres(CompactedTree::new(store.open_namespace(&unique(tag))))).await;
            }
        }
    }
}

/// An ms-smt target tree on either engine.
enum Target {
    Sqlite(CompactedTree<SqliteStore>),
    Postgres(CompactedTree<PostgresStore>),
}

/// Every namespace of the fixture imports with tapd's root, sum, leaves
/// and proofs, and again without error or change.
async fn import_matches<S: BulkStore>(source: &TapdSource, tree: &CompactedTree<S>, ns: &ExpectedNs)
where
    S::Error: std::fmt::Debug,
{
    let report = import_namespace(source, &ns.namespace, tree, ImportOptions::default())
        .await
        .expect("import");
    let root = tree.root().await.expect("root");
    let want = if ns.leaves.is_empty() {
        ComputedNode::empty_root()
    } else {
        ComputedNode::new(
            Hash(hex::decode(&ns.root_hash).expect("hex").try_into().expect("32")),
            ns.root_sum.parse().expect("sum"),
        )
    };
    assert_eq!(root, want, "{}", ns.namespace);
    assert_eq!(report.root, want);
    assert_eq!(report.leaves, ns.leaves.len() as u64);
    assert_eq!(report.unreachable_rows, 0, "{}", ns.namespace);
    assert_eq!(report.unchanged, ns.leaves.is_empty(), "an empty tree is already there");
    let got: BTreeMap<[u8; 32], (Vec<u8>, u64)> = tree
        .leaves(..)
        .collect_all()
        .await
        .expect("leaves")
        .into_iter()
        .map(|e| (e.key.0, (e.leaf.value().to_vec(), e.leaf.sum())))
        .collect();
    let want_leaves: BTreeMap<[u8; 32], (Vec<u8>, u64)> = ns
        .leaves
        .iter()
        .map(|l| {
            (
                key_of(&l.key).0,
                (hex::decode(&l.value).expect("hex"), l.sum.parse().expect("sum")),
            )
        })
        .collect();
    assert_eq!(got, want_leaves, "{}", ns.namespace);
    for p in &ns.proofs {
        let proof = tree.merkle_proof(&key_of(&p.key)).await.expect("proof");
        assert_eq!(
            hex::encode(proof.compress().encode()),
            p.compressed_proof,
            "{} proof of {}",
            ns.namespace,
            p.key
        );
    }
    let again = import_namespace(source, &ns.namespace, tree, ImportOptions::default())
        .await
        .expect("import again");
    assert!(again.unchanged);
    assert_eq!(tree.root().await.expect("root"), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixtures_import_on_both_engines() {
    let expected = expected();
    let original = fixtures_dir().join("tapd-sqlite.db");
    let before = std::fs::read(&original).expect("read fixture");
    for engine in engines("fixtures_import_on_both_engines") {
        let copy = engine.copy("tapd_import").await;
        let copy_before = copy.sqlite.as_ref().map(|p| std::fs::read(p).expect("read copy"));
        let source = TapdSource::open(&copy.src).await.expect("open source");
        let names = source.namespaces().await.expect("namespaces");
        // universe-d has no rows at all: it is not in the tables.
        assert_eq!(names, ["universe-a", "universe-b", "universe-c"]);
        for ns in &expected.namespaces {
            let source = &source;
            engine
                .with_target("tapd_target", |target| async move {
                    match &target {
                        Target::Sqlite(t) => import_matches(&source, t, ns).await,
                        Target::Postgres(t) => import_matches(&source, t, ns).await,
                    }
                })
                .await;
            let audit = audit_namespace(&source, &ns.namespace).await.expect("audit");
            assert!(audit.problems.is_empty(), "{:?}", audit.problems);
            assert_eq!(audit.leaves, ns.leaves.len() as u64);
            assert_eq!(audit.unreachable_rows, 0);
        }
        drop(source);
        if let (Some(path), Some(b)) = (&copy.sqlite, copy_before) {
            assert!(std::fs::read(path).expect("read copy") == b, "the copy was written");
        }
    }
    assert!(std::fs::read(&original).expect("read fixture") == before, "the fixture changed");
}
