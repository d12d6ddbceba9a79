//! Interop with tapd's tables (issue 26): the fixture trees written by the
//! Go reference (../shared/fixtures/tapd, or $MSSMT_TAPD_FIXTURES) import
//! into ms-smt with their roots, sums, leaves and proofs; damaged copies
//! fail with the error naming the row at fault and nothing written;
//! unreachable rows are counted; audits find the same; an export writes
//! the rows tapd writes. Each on SQLite (a copy of the file) and on
//! Postgres (the dump loaded into a fresh schema).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use ms_smt::store::BulkStore;

use ms_smt::{CompactedTree, ComputedNode, Hash, Key};
use ms_smt_core::hash::branch_hash;
use ms_smt_sql::{NamespaceListing, PostgresStore, SqliteStore};
use ms_smt_tapd::{
    Corruption, ExportOptions, ImportError, ImportOptions, TapdError, TapdSource, TapdTarget,
    audit_namespace, export_namespace, import_namespace,
};
use sqlx::Connection;
use support::tapd_expected::{ExpectedNs, tapd_expected as expected};
use support::{TempDb, pg_url, sanitize, unique};

fn key_of(hex_key: &str) -> Key {
    Key(hex::decode(hex_key)
        .expect("hex")
        .try_into()
        .expect("32 bytes"))
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
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
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
                std::fs::copy(support::tapd_fixtures().join("tapd-sqlite.db"), &path)
                    .expect("copy");
                Copy {
                    src: path.to_string_lossy().into_owned(),
                    sqlite: Some(path),
                    _dir: Some(dir),
                }
            }
            Engine::Postgres(base) => {
                let url = pg_schema(base, tag).await;
                let schema = url
                    .rsplit("search_path%3D")
                    .next()
                    .expect("schema")
                    .to_owned();
                let dump =
                    std::fs::read_to_string(support::tapd_fixtures().join("tapd-postgres.sql"))
                        .expect("dump");
                let sql: String = dump
                    .lines()
                    .filter(|l| !l.starts_with('\\') && !l.contains("set_config('search_path'"))
                    .map(|l| format!("{}\n", l.replace("public.", &format!("{schema}."))))
                    .collect();
                let mut conn = sqlx::PgConnection::connect(base).await.expect("connect");
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(&mut conn)
                    .await
                    .expect("load dump");
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
                damage::<sqlx::Sqlite>(&mut conn, sql).await;
                conn.close().await.expect("close");
            }
            None => {
                let mut conn = sqlx::PgConnection::connect(&copy.src)
                    .await
                    .expect("connect");
                let sql = format!(
                    "ALTER TABLE mssmt_roots DROP CONSTRAINT IF EXISTS \
                     mssmt_roots_namespace_root_hash_fkey; {sql}"
                );
                damage::<sqlx::Postgres>(&mut conn, &sql).await;
            }
        }
    }

    /// One row of `mssmt_nodes`, by SQL `filter`.
    async fn row(&self, copy: &Copy, filter: &str) -> NodeRow {
        let sql = format!("{NODES} WHERE {filter} ORDER BY hash_key LIMIT 1");
        match &copy.sqlite {
            Some(path) => {
                let mut conn = sqlx::SqliteConnection::connect(&path.to_string_lossy())
                    .await
                    .expect("open");
                node_rows::<sqlx::Sqlite>(&mut conn, &sql, None)
                    .await
                    .into_iter()
                    .next()
                    .expect("row")
            }
            None => {
                let mut conn = sqlx::PgConnection::connect(&copy.src)
                    .await
                    .expect("connect");
                node_rows::<sqlx::Postgres>(&mut conn, &sql, None)
                    .await
                    .into_iter()
                    .next()
                    .expect("row")
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
                check(Target::Sqlite(CompactedTree::new(
                    store.open_namespace(&unique(tag)),
                )))
                .await;
            }
            Engine::Postgres(url) => {
                let store = PostgresStore::connect(url).await.expect("connect target");
                check(Target::Postgres(CompactedTree::new(
                    store.open_namespace(&unique(tag)),
                )))
                .await;
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
            Hash(
                hex::decode(&ns.root_hash)
                    .expect("hex")
                    .try_into()
                    .expect("32"),
            ),
            ns.root_sum.parse().expect("sum"),
        )
    };
    assert_eq!(root, want, "{}", ns.namespace);
    assert_eq!(report.root, want);
    assert_eq!(report.leaves, ns.leaves.len() as u64);
    assert_eq!(report.unreachable_rows, 0, "{}", ns.namespace);
    assert_eq!(
        report.unchanged,
        ns.leaves.is_empty(),
        "an empty tree is already there"
    );
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
                (
                    hex::decode(&l.value).expect("hex"),
                    l.sum.parse().expect("sum"),
                ),
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
    let original = support::tapd_fixtures().join("tapd-sqlite.db");
    let before = std::fs::read(&original).expect("read fixture");
    for engine in engines("fixtures_import_on_both_engines") {
        let copy = engine.copy("tapd_import").await;
        let copy_before = copy
            .sqlite
            .as_ref()
            .map(|p| std::fs::read(p).expect("read copy"));
        let source = TapdSource::open(&copy.src).await.expect("open source");
        let names = source.namespaces().await.expect("namespaces");
        // universe-d has no rows at all: it is not in the tables.
        assert_eq!(names, ["universe-a", "universe-b", "universe-c"]);
        for ns in &expected.namespaces {
            let source = &source;
            engine
                .with_target("tapd_target", |target| async move {
                    match &target {
                        Target::Sqlite(t) => import_matches(source, t, ns).await,
                        Target::Postgres(t) => import_matches(source, t, ns).await,
                    }
                })
                .await;
            let audit = audit_namespace(source, &ns.namespace).await.expect("audit");
            assert!(audit.problems.is_empty(), "{:?}", audit.problems);
            assert_eq!(audit.leaves, ns.leaves.len() as u64);
            assert_eq!(audit.unreachable_rows, 0);
        }
        drop(source);
        if let (Some(path), Some(b)) = (&copy.sqlite, copy_before) {
            assert!(
                std::fs::read(path).expect("read copy") == b,
                "the copy was written"
            );
        }
    }
    assert!(
        std::fs::read(&original).expect("read fixture") == before,
        "the fixture changed"
    );
}

/// A damage to make on a copy and the fault it must be reported as.
struct Damage {
    what: &'static str,
    sql: String,
    /// The fault, named by kind and hash.
    kind: &'static str,
    hash: Vec<u8>,
}

fn kind_of(c: &Corruption) -> (&'static str, Hash) {
    match c {
        Corruption::RootMissing { hash, .. } => ("root_missing", *hash),
        Corruption::MissingRow { hash, .. } => ("missing_row", *hash),
        Corruption::LeafMismatch { hash, .. } => ("leaf_mismatch", *hash),
        Corruption::WrongPosition { hash, .. } => ("wrong_position", *hash),
        Corruption::BranchHash { hash, .. } => ("branch_hash", *hash),
        Corruption::BranchSum { hash, .. } => ("branch_sum", *hash),
        Corruption::Malformed { hash, .. } => ("malformed", *hash),
        Corruption::RootMismatch { expected, .. } => ("root_mismatch", expected.hash),
    }
}

/// Every kind of damage, made on copies of universe-a.
async fn damages(engine: &Engine, copy: &Copy) -> Vec<Damage> {
    let ns = "namespace = 'universe-a'";
    let (leaf, _, _, key, _, _) = engine.row(copy, &format!("{ns} AND key IS NOT NULL")).await;
    let key = key.expect("leaf key");
    let (branch, ..) = engine
        .row(
            copy,
            &format!(
                "{ns} AND key IS NULL AND hash_key NOT IN (SELECT root_hash FROM mssmt_roots)"
            ),
        )
        .await;
    let (_, l, r, _, _, sum) = engine
        .row(
            copy,
            &format!("{ns} AND hash_key IN (SELECT root_hash FROM mssmt_roots WHERE {ns})"),
        )
        .await;
    let at = |h: &[u8]| format!("{ns} AND hash_key = {}", engine.blob(h));
    let flip = |byte: usize, mask: u8| {
        let mut k = key.clone();
        k[byte] ^= mask;
        engine.blob(&k)
    };
    let (l, r) = (l.expect("left"), r.expect("right"));
    let forged_sum = sum.wrapping_add(1);
    let forged = branch_hash(
        &Hash(l.clone().try_into().expect("32")),
        &Hash(r.clone().try_into().expect("32")),
        forged_sum as u64,
    );
    vec![
        Damage {
            what: "leaf value changed",
            sql: format!(
                "UPDATE mssmt_nodes SET value = {} WHERE {}",
                engine.blob(&[0]),
                at(&leaf)
            ),
            kind: "leaf_mismatch",
            hash: leaf.clone(),
        },
        Damage {
            what: "leaf sum changed",
            sql: format!("UPDATE mssmt_nodes SET sum = sum + 1 WHERE {}", at(&leaf)),
            kind: "leaf_mismatch",
            hash: leaf.clone(),
        },
        Damage {
            what: "leaf key changed below its height",
            sql: format!(
                "UPDATE mssmt_nodes SET key = {} WHERE {}",
                flip(31, 0x80),
                at(&leaf)
            ),
            kind: "leaf_mismatch",
            hash: leaf.clone(),
        },
        Damage {
            what: "leaf key leads elsewhere",
            sql: format!(
                "UPDATE mssmt_nodes SET key = {} WHERE {}",
                flip(0, 0x01),
                at(&leaf)
            ),
            kind: "wrong_position",
            hash: leaf.clone(),
        },
        Damage {
            what: "branch sum changed",
            sql: format!("UPDATE mssmt_nodes SET sum = sum + 1 WHERE {}", at(&branch)),
            kind: "branch_hash",
            hash: branch.clone(),
        },
        Damage {
            what: "root branch forged with a sum its children do not hold",
            sql: format!(
                "INSERT INTO mssmt_nodes VALUES ({}, {}, {}, NULL, NULL, {forged_sum}, 'universe-a'); \
                 UPDATE mssmt_roots SET root_hash = {} WHERE {ns}",
                engine.blob(&forged.0),
                engine.blob(&l),
                engine.blob(&r),
                engine.blob(&forged.0),
            ),
            kind: "branch_sum",
            hash: forged.0.to_vec(),
        },
        Damage {
            what: "row missing under the root",
            sql: format!("DELETE FROM mssmt_nodes WHERE {}", at(&leaf)),
            kind: "missing_row",
            hash: leaf.clone(),
        },
        Damage {
            what: "root pointing nowhere",
            sql: format!(
                "UPDATE mssmt_roots SET root_hash = {} WHERE {ns}",
                engine.blob(&[0x11; 32])
            ),
            kind: "root_missing",
            hash: vec![0x11; 32],
        },
    ]
}

/// Imports a damaged namespace and checks the error and that neither the
/// target nor its staging namespace holds anything.
async fn damaged_import<S: BulkStore>(source: &TapdSource, tree: &CompactedTree<S>, d: &Damage)
where
    S::Error: std::fmt::Debug,
{
    let err = import_namespace(source, "universe-a", tree, ImportOptions::default())
        .await
        .expect_err(d.what);
    let ImportError::Source(TapdError::Corrupt(c)) = &err else {
        panic!("{}: {err:?}", d.what);
    };
    let (kind, hash) = kind_of(c);
    assert_eq!(
        (kind, hash.0.to_vec()),
        (d.kind, d.hash.clone()),
        "{}: {c}",
        d.what
    );
    assert!(c.to_string().contains("universe-a"), "{c}");
    assert_eq!(
        tree.root().await.expect("root"),
        ComputedNode::empty_root(),
        "{}",
        d.what
    );
}

/// After a failed import the target database lists neither the target
/// namespace nor its staging namespace.
fn nothing_listed(listed: Vec<NamespaceListing>, target: &str, what: &str) {
    let left: Vec<&str> = listed
        .iter()
        .map(|l| l.name.as_str())
        .filter(|n| n.starts_with(target))
        .collect();
    assert!(left.is_empty(), "{what}: the failed import left {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damage_is_named_and_nothing_is_written() {
    for engine in engines("every_damage_is_named_and_nothing_is_written") {
        let probe = engine.copy("tapd_probe").await;
        let count = damages(&engine, &probe).await.len();
        for i in 0..count {
            let copy = engine.copy("tapd_damage").await;
            let d = damages(&engine, &copy).await.swap_remove(i);
            engine.exec(&copy, &d.sql).await;
            let source = TapdSource::open(&copy.src).await.expect("open");
            let audit = audit_namespace(&source, "universe-a").await.expect("audit");
            assert!(
                audit.problems.iter().any(|p| {
                    let (kind, hash) = kind_of(p);
                    kind == d.kind && hash.0.to_vec() == d.hash
                }),
                "{}: audit found {:?}",
                d.what,
                audit.problems
            );
            let (source, d) = (&source, &d);
            engine
                .with_target("tapd_damaged", |target| async move {
                    match &target {
                        Target::Sqlite(t) => {
                            damaged_import(source, t, d).await;
                            let listed = t.store().namespaces().await.expect("list");
                            nothing_listed(listed, t.store().name(), d.what);
                        }
                        Target::Postgres(t) => {
                            damaged_import(source, t, d).await;
                            let listed = t.store().namespaces().await.expect("list");
                            nothing_listed(listed, t.store().name(), d.what);
                        }
                    }
                })
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_rows_are_counted_not_imported() {
    for engine in engines("unreachable_rows_are_counted_not_imported") {
        let copy = engine.copy("tapd_unreachable").await;
        let sql = format!(
            "INSERT INTO mssmt_nodes VALUES ({}, NULL, NULL, {}, {}, 7, 'universe-b')",
            engine.blob(&[0x22; 32]),
            engine.blob(&[0x33; 32]),
            engine.blob(b"stray"),
        );
        engine.exec(&copy, &sql).await;
        let source = TapdSource::open(&copy.src).await.expect("open");
        let audit = audit_namespace(&source, "universe-b").await.expect("audit");
        assert_eq!(audit.unreachable_rows, 1);
        assert!(audit.problems.is_empty());
        assert_eq!(audit.rows, 303);
        let source = &source;
        engine
            .with_target("tapd_unreachable", |target| async move {
                let report = match &target {
                    Target::Sqlite(t) => {
                        import_namespace(source, "universe-b", t, ImportOptions::default())
                            .await
                            .expect("import")
                    }
                    Target::Postgres(t) => {
                        import_namespace(source, "universe-b", t, ImportOptions::default())
                            .await
                            .expect("import")
                    }
                };
                assert_eq!(report.unreachable_rows, 1);
                assert_eq!(report.leaves, 37);
                let stray = Key([0x33; 32]);
                let leaf = match &target {
                    Target::Sqlite(t) => t.get(&stray).await.expect("get"),
                    Target::Postgres(t) => t.get(&stray).await.expect("get"),
                };
                assert!(leaf.is_empty(), "the stray row was imported");
            })
            .await;
    }
}

/// A nullable blob column.
type Blob = Option<Vec<u8>>;

/// A row of `mssmt_nodes`: hash_key, l_hash_key, r_hash_key, key, value, sum.
type NodeRow = (Vec<u8>, Blob, Blob, Blob, Blob, i64);

/// Selects [`NodeRow`]s (append the `WHERE`).
const NODES: &str = "SELECT hash_key, l_hash_key, r_hash_key, key, value, sum FROM mssmt_nodes";

/// Runs `sql` (several statements) on `conn`, as damage to a copy.
async fn damage<DB: sqlx::Database>(conn: &mut DB::Connection, sql: &str)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(conn)
        .await
        .expect("damage");
}

/// The [`NodeRow`]s `sql` selects on `conn`, with `$1` bound to `ns` if
/// given.
async fn node_rows<DB: sqlx::Database>(
    conn: &mut DB::Connection,
    sql: &str,
    ns: Option<&str>,
) -> Vec<NodeRow>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    NodeRow: for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let query = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()));
    let query = match ns {
        Some(ns) => query.bind(ns),
        None => query,
    };
    query.fetch_all(conn).await.expect("rows")
}

/// The node rows and root row of `ns`, read on `conn`.
async fn rows_of<DB: sqlx::Database>(
    conn: &mut DB::Connection,
    ns: &str,
) -> (BTreeSet<NodeRow>, Blob)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    NodeRow: for<'r> sqlx::FromRow<'r, DB::Row>,
    Vec<u8>: sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let sql = format!("{NODES} WHERE namespace = $1");
    let rows = node_rows::<DB>(&mut *conn, &sql, Some(ns)).await;
    let root = sqlx::query_scalar("SELECT root_hash FROM mssmt_roots WHERE namespace = $1")
        .bind(ns)
        .fetch_optional(&mut *conn)
        .await
        .expect("root");
    (rows.into_iter().collect(), root)
}

/// The node rows and root row of `ns` in the tapd database `src`.
async fn read_rows(src: &str, ns: &str) -> (BTreeSet<NodeRow>, Blob) {
    if src.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(src).await.expect("connect");
        rows_of::<sqlx::Postgres>(&mut conn, ns).await
    } else {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(src)
            .read_only(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .expect("open");
        rows_of::<sqlx::Sqlite>(&mut conn, ns).await
    }
}

/// Where an export goes: an empty SQLite file or Postgres schema.
async fn empty_tapd(engine: &Engine, dir: &tempfile::TempDir, tag: &str) -> String {
    match engine {
        Engine::Sqlite => dir
            .path()
            .join(format!("{tag}.db"))
            .to_string_lossy()
            .into_owned(),
        Engine::Postgres(base) => pg_schema(base, tag).await,
    }
}

/// Imports `ns` from `source`, exports it into `dst` and returns the
/// export's rows; checks the refusal and the replace on the way.
async fn round_trip<S: BulkStore>(source: &TapdSource, tree: &CompactedTree<S>, ns: &str, dst: &str)
where
    S::Error: std::fmt::Debug,
{
    import_namespace(source, ns, tree, ImportOptions::default())
        .await
        .expect("import");
    let target = TapdTarget::open(dst, true).await.expect("open target");
    let plain = ExportOptions::default();
    assert!(matches!(
        export_namespace(tree, &target, ns, plain).await,
        Err(ms_smt_tapd::ExportError::NoSchema)
    ));
    let create = ExportOptions {
        create_schema: true,
        replace: false,
    };
    let report = export_namespace(tree, &target, ns, create)
        .await
        .expect("export");
    assert_eq!(report.root, tree.root().await.expect("root"));
    if report.leaves > 0 {
        assert!(matches!(
            export_namespace(tree, &target, ns, plain).await,
            Err(ms_smt_tapd::ExportError::NamespaceExists(_))
        ));
    }
    let replace = ExportOptions {
        create_schema: false,
        replace: true,
    };
    export_namespace(tree, &target, ns, replace)
        .await
        .expect("replace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_writes_the_rows_tapd_writes() {
    let expected = expected();
    for engine in engines("export_writes_the_rows_tapd_writes") {
        let copy = engine.copy("tapd_export_src").await;
        let source = TapdSource::open(&copy.src).await.expect("open");
        let dir = tempfile::tempdir().expect("tempdir");
        for ns in &expected.namespaces {
            let dst = empty_tapd(&engine, &dir, &sanitize(&ns.namespace)).await;
            let (source, name, dst_ref) = (&source, ns.namespace.as_str(), dst.as_str());
            engine
                .with_target("tapd_export", |target| async move {
                    match &target {
                        Target::Sqlite(t) => round_trip(source, t, name, dst_ref).await,
                        Target::Postgres(t) => round_trip(source, t, name, dst_ref).await,
                    }
                })
                .await;
            let (theirs, their_root) = read_rows(&copy.src, name).await;
            let (ours, our_root) = read_rows(&dst, name).await;
            assert_eq!(our_root, their_root, "{name}: root row");
            // The export reads back as tapd's tree, every row reached.
            let back = TapdSource::open(&dst).await.expect("open export");
            let audit = audit_namespace(&back, name).await.expect("audit export");
            assert!(audit.problems.is_empty(), "{name}: {:?}", audit.problems);
            assert_eq!(audit.unreachable_rows, 0);
            assert_eq!(audit.leaves, ns.leaves.len() as u64);
            if name == "universe-c" {
                // tapd's deletes leave the survivors where they were (one-
                // child branches above them); the leaves alone give the
                // rows tapd writes for them in one InsertMany, which share
                // the root row and the untouched rows with the fixture.
                assert!(
                    ours.len() < theirs.len(),
                    "{name}: {} vs {}",
                    ours.len(),
                    theirs.len()
                );
                assert!(ours.intersection(&theirs).count() > ours.len() / 2);
            } else {
                assert_eq!(ours, theirs, "{name}: row sets differ");
            }
        }
    }
}

/// A tree of many fetch chunks and import batches (the fixtures fit in
/// one of each): an export imports back to the same root and leaves, with
/// the walk reading ahead of its checks and the inserts overlapping the
/// walk; a leaf changed deep in it fails the import with that row named
/// and nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_tree_walks_in_chunks() {
    use ms_smt::Leaf;
    use ms_smt::store::MemoryStore;
    const LEAVES: u64 = 6_000;
    let original = CompactedTree::new(MemoryStore::new());
    let leaves: Vec<(Key, Leaf)> = (0..LEAVES)
        .map(|i| {
            let key = Key(branch_hash(&Hash([7; 32]), &Hash(unique_bytes(i)), 0).0);
            (key, Leaf::new(i.to_le_bytes().to_vec(), i + 1))
        })
        .collect();
    original.insert_many(leaves).await.expect("build");
    let root = original.root().await.expect("root");
    for engine in engines("a_large_tree_walks_in_chunks") {
        let dir = tempfile::tempdir().expect("tempdir");
        let dst = empty_tapd(&engine, &dir, "tapd_large").await;
        let target = TapdTarget::open(&dst, true).await.expect("open target");
        let options = ExportOptions {
            create_schema: true,
            replace: false,
        };
        let exported = export_namespace(&original, &target, "large", options)
            .await
            .expect("export");
        assert!(exported.rows > 4 * 2048, "{} rows", exported.rows);
        let source = TapdSource::open(&dst).await.expect("open source");
        let audit = audit_namespace(&source, "large").await.expect("audit");
        assert!(audit.problems.is_empty(), "{:?}", audit.problems);
        assert_eq!((audit.leaves, audit.rows), (LEAVES, exported.rows));
        let small_batches = ImportOptions {
            replace: false,
            batch: 97,
        };
        let imported = CompactedTree::new(MemoryStore::new());
        let report = import_namespace(&source, "large", &imported, small_batches)
            .await
            .expect("import");
        assert_eq!((report.root, report.leaves), (root, LEAVES));
        assert_eq!(imported.root().await.expect("root"), root);
        let ours = imported.leaves(..).collect_all().await.expect("leaves");
        let theirs = original.leaves(..).collect_all().await.expect("leaves");
        assert_eq!(ours, theirs);

        // One leaf's value changed: caught, named, nothing written.
        let copy = Copy {
            src: dst.clone(),
            sqlite: matches!(engine, Engine::Sqlite).then(|| PathBuf::from(&dst)),
            _dir: None,
        };
        let damaged = engine.row(&copy, "key IS NOT NULL").await.0;
        let sql = format!(
            "UPDATE mssmt_nodes SET value = {} WHERE hash_key = {}",
            engine.blob(b"changed"),
            engine.blob(&damaged)
        );
        engine.exec(&copy, &sql).await;
        let fresh = CompactedTree::new(MemoryStore::new());
        let err = import_namespace(&source, "large", &fresh, small_batches)
            .await
            .expect_err("a changed leaf");
        let ImportError::Source(TapdError::Corrupt(c)) = &err else {
            panic!("{err:?}");
        };
        assert_eq!(kind_of(c).1, Hash(damaged.try_into().expect("32 bytes")));
        assert_eq!(
            fresh.root().await.expect("root"),
            ComputedNode::empty_root()
        );
    }
}

/// 32 bytes that differ for every `i`.
fn unique_bytes(i: u64) -> [u8; 32] {
    let mut out = [0; 32];
    out[..8].copy_from_slice(&i.to_le_bytes());
    out
}
