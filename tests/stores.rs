//! The store suite: every scenario runs on [`MemoryStore`], [`SqliteStore`]
//! and [`PostgresStore`] through one generic async fn over [`TestStore`].
//!
//! * `equivalence`: proptest; batch == sequential == final map, full ==
//!   compacted, every store == memory, get_many/merkle_proofs == get/merkle_proof.
//! * `twins`: equal subtrees at different positions (spec §9 B3, B4, B3-CL, G255).
//! * `overflow`: rejected batches leave the database byte-for-byte unchanged;
//!   replacement parity; sums >= 2^63 (stored as the i64 bit pattern).
//! * `namespaces`: independent trees, `delete_all` scoped to one namespace.
//! * `other_writers`: a handle that remembers nodes stays right after another
//!   handle removed rows it remembers; reference counts stay exact.
//! * `round_trips`: insert_many, get_many and merkle_proofs cost O(depth)
//!   round trips whatever the batch size; constant (Postgres) or chunked
//!   (SQLite) commit statements.
//! * `host_app`: migrations next to a host's `_sqlx_migrations`; tree writes
//!   inside the caller's transaction roll back / commit with the host rows.
//! * `concurrency`: 4 writers per namespace (two pools on SQLite and
//!   Postgres), 2 namespaces in parallel.
//! * `read_phase_race_*`: a commit injected between two reads of a descent
//!   (deterministic, memory store): the operation must retry, not fail.
//!
//! SQL scenarios run twice: on the default handle, which remembers recent
//! nodes (`RecentNodes`), and `*_cold` on a handle that reads every node by
//! SQL.
//!
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ms_smt::Hash;
use ms_smt::Node;
use ms_smt::store::UpdateBatch;
use ms_smt::store::{
    CommitOutcome, MemoryStore, PathStart, PostgresStore, ReadAt, RecentNodes, SqliteStore,
    StoreStats, TreeStore,
};
use ms_smt::test_utils::empty_hash;
use ms_smt::test_utils::{branch_hash, sha256};
use ms_smt::{Compacted, ComputedNode, Full, Key, Layout, LayoutKind, Leaf, Position, Proof, Tree};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use support::{TempDb, hkey, pg_url, sanitize, unique};

// ---------------------------------------------------------------------------
// Names, keys, leaves, the model
// ---------------------------------------------------------------------------

/// `key` with the given bits (tree order, LSB first) flipped.
fn flip(mut key: Key, bits: &[usize]) -> Key {
    for &b in bits {
        key.0[b / 8] ^= 1 << (b % 8);
    }
    key
}

fn leaf(value: &str, sum: u64) -> Leaf {
    Leaf::new(value.as_bytes().to_vec(), sum)
}

/// The live leaves, as the abstract model of spec §2.1.
type Model = BTreeMap<[u8; 32], Leaf>;

/// One `insert_many` argument.
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

fn model_pairs(model: &Model) -> Vec<(Key, Leaf)> {
    model.iter().map(|(k, l)| (Key(*k), l.clone())).collect()
}

/// The merkle-sum root of `model`, computed naively level by level (spec §1),
/// independent of the crate's descent. `None` on a u64 overflow.
fn model_root(model: &Model) -> Option<ComputedNode> {
    let items: Vec<(Key, &Leaf)> = model.iter().map(|(k, l)| (Key(*k), l)).collect();
    let (hash, sum) = subtree(0, &items)?;
    Some(ComputedNode::new(hash, sum))
}

fn subtree(level: usize, items: &[(Key, &Leaf)]) -> Option<(Hash, u64)> {
    if items.is_empty() {
        return Some((empty_hash(level), 0));
    }
    if level == 256 {
        return Some((items[0].1.hash(), items[0].1.sum()));
    }
    let (l, r): (Vec<_>, Vec<_>) = items.iter().partition(|(k, _)| !k.bit(level));
    let (lh, ls) = subtree(level + 1, &l)?;
    let (rh, rs) = subtree(level + 1, &r)?;
    let sum = ls.checked_add(rs)?;
    Some((branch_hash(&lh, &rh, sum), sum))
}

fn layout_name<L: Layout>() -> &'static str {
    match L::KIND {
        LayoutKind::Full => "full",
        LayoutKind::Compacted => "compacted",
    }
}

/// A memory tree holding exactly `model`.
async fn memory_tree<L: Layout>(model: &Model) -> Tree<MemoryStore, L> {
    let tree = Tree::new(MemoryStore::new());
    tree.insert_many(model_pairs(model))
        .await
        .expect("memory build");
    tree
}

// ---------------------------------------------------------------------------
// The store abstraction of this suite
// ---------------------------------------------------------------------------

/// Raw sum columns of a namespace, as SQL stores them (i64 bit patterns).
#[derive(Debug)]
struct RawSums {
    nodes: Vec<i64>,
    root: Option<i64>,
}

/// What the generic scenarios need beyond [`TreeStore`].
trait TestStore: TreeStore + Clone + Send + Sync + 'static {
    const KIND: &'static str;
    /// Another namespace of the same database (a fresh, independent tree).
    fn handle(&self, namespace: &str) -> Self;
    /// This handle's namespace.
    fn ns(&self) -> String;
    /// The same database and namespace over a separate connection pool (a
    /// stand-in for another process); the memory store has only one.
    fn peer(&self) -> impl Future<Output = Self> + Send;
    /// Node rows stored for this namespace.
    fn node_rows(&self) -> impl Future<Output = usize> + Send;
    /// Root rows stored for this namespace (0 or 1).
    fn root_rows(&self) -> impl Future<Output = usize> + Send;
    /// Every stored row of this namespace (nodes by hash, then the root),
    /// byte for byte.
    fn dump(&self) -> impl Future<Output = Vec<String>> + Send;
    /// The raw SQL `sum` columns; `None` for the memory store.
    fn raw_sums(&self) -> impl Future<Output = Option<RawSums>> + Send;
    /// True when the handle keeps recent nodes in memory.
    fn remembers(&self) -> bool {
        self.recent_nodes().is_some_and(|r| r.capacity() > 0)
    }
}

impl TestStore for MemoryStore {
    const KIND: &'static str = "memory";

    fn handle(&self, namespace: &str) -> Self {
        self.namespace(namespace).expect("memory namespace")
    }

    fn ns(&self) -> String {
        self.namespace_name().to_owned()
    }

    async fn peer(&self) -> Self {
        self.clone()
    }

    async fn node_rows(&self) -> usize {
        self.node_count().expect("memory node_count")
    }

    async fn root_rows(&self) -> usize {
        let root = self.load_root().await.expect("memory root");
        usize::from(root != ComputedNode::empty_root())
    }

    async fn dump(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .rows()
            .expect("memory rows")
            .iter()
            .map(|row| format!("{row:?}"))
            .collect();
        let root = self.load_root().await.expect("memory root");
        out.push(format!("root {root:?}"));
        out
    }

    async fn raw_sums(&self) -> Option<RawSums> {
        None
    }
}

const DUMP_STRATA_SQLITE: &str = "SELECT s.path, s.depth, s.body FROM ms_smt_strata s \
     JOIN ms_smt_namespaces n ON n.id = s.ns WHERE n.name = ? ORDER BY s.path, s.depth";
const DUMP_ROOTS_SQLITE: &str = "SELECT name, root_hash, root_sum FROM ms_smt_namespaces \
     WHERE name = ? AND root_hash IS NOT NULL";

type StrataRowDump = (Vec<u8>, i64, Vec<u8>);
type NsRootDump = (String, Vec<u8>, i64);

/// Every node sum inside strata bodies, as the i64 with the same bits.
fn body_sums(rows: &[StrataRowDump], height: u8) -> Vec<i64> {
    let height = ms_smt::store::StratumHeight::new(height).expect("height");
    rows.iter()
        .flat_map(|(_, depth, body)| {
            let mut row = ms_smt::test_utils::Row::decode(
                usize::try_from(*depth).expect("depth"),
                height,
                body,
            )
            .expect("row decodes");
            row.nodes().expect("row nodes").1
        })
        .map(|(_, node)| i64::from_ne_bytes(node.sum().to_ne_bytes()))
        .collect()
}

impl TestStore for SqliteStore {
    const KIND: &'static str = "sqlite";

    fn handle(&self, namespace: &str) -> Self {
        self.namespace(namespace)
    }

    fn ns(&self) -> String {
        self.namespace_name().to_owned()
    }

    async fn peer(&self) -> Self {
        let options = (*self.pool().connect_options()).clone();
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .expect("second sqlite pool");
        SqliteStore::from_pool(pool, self.namespace_name())
            .with_recent_nodes(self.recent().capacity())
    }

    async fn node_rows(&self) -> usize {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM ms_smt_strata s JOIN ms_smt_namespaces n ON n.id = s.ns \
             WHERE n.name = ?",
        )
        .bind(self.namespace_name())
        .fetch_one(self.pool())
        .await
        .expect("count rows");
        usize::try_from(n).expect("row count")
    }

    async fn root_rows(&self) -> usize {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM ms_smt_namespaces WHERE name = ? AND root_hash IS NOT NULL",
        )
        .bind(self.namespace_name())
        .fetch_one(self.pool())
        .await
        .expect("count roots");
        usize::try_from(n).expect("row count")
    }

    async fn dump(&self) -> Vec<String> {
        let rows: Vec<StrataRowDump> = sqlx::query_as(DUMP_STRATA_SQLITE)
            .bind(self.namespace_name())
            .fetch_all(self.pool())
            .await
            .expect("dump rows");
        let roots: Vec<NsRootDump> = sqlx::query_as(DUMP_ROOTS_SQLITE)
            .bind(self.namespace_name())
            .fetch_all(self.pool())
            .await
            .expect("dump roots");
        let mut out: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
        out.extend(roots.iter().map(|r| format!("root {r:?}")));
        out
    }

    async fn raw_sums(&self) -> Option<RawSums> {
        let rows: Vec<StrataRowDump> = sqlx::query_as(DUMP_STRATA_SQLITE)
            .bind(self.namespace_name())
            .fetch_all(self.pool())
            .await
            .expect("dump rows");
        let height: i64 = sqlx::query_scalar("SELECT height FROM ms_smt_namespaces WHERE name = ?")
            .bind(self.namespace_name())
            .fetch_one(self.pool())
            .await
            .expect("height");
        let root: Option<i64> = sqlx::query_scalar(
            "SELECT root_sum FROM ms_smt_namespaces WHERE name = ? AND root_hash IS NOT NULL",
        )
        .bind(self.namespace_name())
        .fetch_optional(self.pool())
        .await
        .expect("root sum");
        Some(RawSums {
            nodes: body_sums(&rows, u8::try_from(height).expect("height")),
            root,
        })
    }
}

impl TestStore for PostgresStore {
    const KIND: &'static str = "postgres";

    fn handle(&self, namespace: &str) -> Self {
        self.namespace(namespace)
    }

    fn ns(&self) -> String {
        self.namespace_name().to_owned()
    }

    async fn peer(&self) -> Self {
        let options = (*self.pool().connect_options()).clone();
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .expect("second postgres pool");
        PostgresStore::from_pool(pool, self.namespace_name())
            .with_recent_nodes(self.recent().capacity())
    }

    async fn node_rows(&self) -> usize {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM ms_smt_strata s JOIN ms_smt_namespaces n ON n.id = s.ns \
             WHERE n.name = $1",
        )
        .bind(self.namespace_name())
        .fetch_one(self.pool())
        .await
        .expect("count rows");
        usize::try_from(n).expect("row count")
    }

    async fn root_rows(&self) -> usize {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM ms_smt_namespaces WHERE name = $1 AND root_hash IS NOT NULL",
        )
        .bind(self.namespace_name())
        .fetch_one(self.pool())
        .await
        .expect("count roots");
        usize::try_from(n).expect("row count")
    }

    async fn dump(&self) -> Vec<String> {
        let rows = self.strata_rows().await;
        let roots: Vec<NsRootDump> = sqlx::query_as(
            "SELECT name, root_hash, root_sum FROM ms_smt_namespaces \
             WHERE name = $1 AND root_hash IS NOT NULL",
        )
        .bind(self.namespace_name())
        .fetch_all(self.pool())
        .await
        .expect("dump roots");
        let mut out: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
        out.extend(roots.iter().map(|r| format!("root {r:?}")));
        out
    }

    async fn raw_sums(&self) -> Option<RawSums> {
        let rows = self.strata_rows().await;
        let (height, root): (i32, Option<i64>) =
            sqlx::query_as("SELECT height, root_sum FROM ms_smt_namespaces WHERE name = $1")
                .bind(self.namespace_name())
                .fetch_one(self.pool())
                .await
                .expect("namespace row");
        Some(RawSums {
            nodes: body_sums(&rows, u8::try_from(height).expect("height")),
            root,
        })
    }
}

/// The strata rows of a Postgres namespace, in key order.
trait PgStrata {
    fn strata_rows(&self) -> impl Future<Output = Vec<StrataRowDump>> + Send;
}

impl PgStrata for PostgresStore {
    async fn strata_rows(&self) -> Vec<StrataRowDump> {
        let rows: Vec<(Vec<u8>, i32, Vec<u8>)> = sqlx::query_as(
            "SELECT s.path, s.depth, s.body FROM ms_smt_strata s \
             JOIN ms_smt_namespaces n ON n.id = s.ns WHERE n.name = $1 ORDER BY s.path, s.depth",
        )
        .bind(self.namespace_name())
        .fetch_all(self.pool())
        .await
        .expect("dump rows");
        rows.into_iter()
            .map(|(p, d, b)| (p, i64::from(d), b))
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Opening databases
// ---------------------------------------------------------------------------

/// The tables the SQL stores create, by name.
const STORE_TABLES: [&str; 5] = [
    "ms_smt_history",
    "ms_smt_migrations",
    "ms_smt_namespaces",
    "ms_smt_pins",
    "ms_smt_strata",
];

fn sqlite_options(path: &Path) -> SqliteConnectOptions {
    SqliteStore::connect_options(path).synchronous(SqliteSynchronous::Normal)
}

/// A migrated SQLite database in a temp file, removed on drop.
struct SqliteDb {
    store: SqliteStore,
    _file: TempDb,
}

impl SqliteDb {
    async fn open(tag: &str) -> Self {
        let file = TempDb::new(tag);
        let store = SqliteStore::open_with(sqlite_options(&file.path))
            .await
            .expect("open sqlite");
        SqliteDb { store, _file: file }
    }
}

async fn pg_store(test: &str) -> Option<PostgresStore> {
    let url = pg_url(test)?;
    Some(
        PostgresStore::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}")),
    )
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
        sqlx::raw_sql(&format!("CREATE SCHEMA \"{schema}\""))
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
        sqlx::raw_sql(&format!("DROP SCHEMA \"{}\" CASCADE", self.schema))
            .execute(&self.admin)
            .await
            .expect("drop schema");
        self.admin.close().await;
    }
}

/// Runs one generic scenario `async fn(S)` on every store.
macro_rules! on_every_store {
    ($name:ident => $scenario:ident) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                let t = Instant::now();
                $scenario(MemoryStore::new()).await;
                eprintln!("{}::memory took {:?}", stringify!($name), t.elapsed());
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let t = Instant::now();
                let db = SqliteDb::open(stringify!($name)).await;
                $scenario(db.store.clone()).await;
                db.store.pool().close().await;
                eprintln!("{}::sqlite took {:?}", stringify!($name), t.elapsed());
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let t = Instant::now();
                let Some(store) = pg_store(concat!(stringify!($name), "::postgres")).await else {
                    return;
                };
                $scenario(store.clone()).await;
                store.pool().close().await;
                eprintln!("{}::postgres took {:?}", stringify!($name), t.elapsed());
            }

            /// SQLite with every node read from the database (no
            /// [`RecentNodes`](ms_smt::store::RecentNodes)): the SQL read
            /// statements, which remembered nodes mostly skip.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite_cold() {
                let t = Instant::now();
                let db = SqliteDb::open(concat!(stringify!($name), "-cold")).await;
                $scenario(db.store.clone().with_recent_nodes(0)).await;
                db.store.pool().close().await;
                eprintln!("{}::sqlite_cold took {:?}", stringify!($name), t.elapsed());
            }

            /// Postgres with every node read from the database.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres_cold() {
                let t = Instant::now();
                let Some(store) = pg_store(concat!(stringify!($name), "::postgres_cold")).await
                else {
                    return;
                };
                $scenario(store.clone().with_recent_nodes(0)).await;
                store.pool().close().await;
                eprintln!(
                    "{}::postgres_cold took {:?}",
                    stringify!($name),
                    t.elapsed()
                );
            }
        }
    };
}

// ---------------------------------------------------------------------------
// A tree on a store, mirrored by a memory tree and the model
// ---------------------------------------------------------------------------

/// How much [`Mirror::check`] verifies after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Check {
    /// Root == memory root == model root.
    Root,
    /// Also get_many and merkle_proofs of every key ever written, against
    /// the model and the memory tree.
    Reads,
    /// Also a fresh tree on the same store built from the final map.
    Fresh,
}

struct Mirror<S: TestStore, L: Layout> {
    tree: Tree<S, L>,
    mem: Tree<MemoryStore, L>,
    model: Model,
    /// Every key ever written (probed for gets and proofs).
    keys: Vec<Key>,
    what: String,
}

impl<S: TestStore, L: Layout> Mirror<S, L> {
    fn new(base: &S, tag: &str) -> Self {
        let store = base.handle(&unique(tag));
        let what = format!("{} {} {}", S::KIND, layout_name::<L>(), store.ns());
        Mirror {
            tree: Tree::new(store),
            mem: Tree::new(MemoryStore::new()),
            model: Model::new(),
            keys: Vec::new(),
            what,
        }
    }

    fn track(&mut self, batch: &[(Key, Leaf)]) {
        for (k, _) in batch {
            if !self.keys.contains(k) {
                self.keys.push(*k);
            }
        }
    }

    /// Applies `batch` as one insert_many, or (`single`) as one insert or
    /// delete per entry, then checks everything.
    async fn apply(&mut self, step: &str, batch: Vec<(Key, Leaf)>, single: bool, check: Check) {
        self.track(&batch);
        let got = if single {
            let mut last = self.tree.root().await.expect("root");
            for (k, l) in &batch {
                last = if l.is_empty() {
                    self.tree.delete(*k).await
                } else {
                    self.tree.insert(*k, l.clone()).await
                }
                .unwrap_or_else(|e| panic!("{}: {step}: write {k:?}: {e}", self.what));
            }
            last
        } else {
            self.tree
                .insert_many(batch.clone())
                .await
                .unwrap_or_else(|e| panic!("{}: {step}: insert_many: {e}", self.what))
        };
        self.mem
            .insert_many(batch.clone())
            .await
            .expect("memory write");
        model_apply(&mut self.model, &batch);
        assert_eq!(
            Some(got),
            model_root(&self.model),
            "{}: {step}: returned root != model root",
            self.what
        );
        self.check(step, check).await;
    }

    /// Root == memory == model; get_many and proofs match the model and the
    /// memory tree; a fresh tree of the same layout on the same store built
    /// from the final map has the same root.
    async fn check(&self, step: &str, check: Check) {
        let what = &self.what;
        let root = self.tree.root().await.expect("root");
        assert_eq!(
            root,
            self.mem.root().await.expect("mem root"),
            "{what}: {step}: root != memory root"
        );
        assert_eq!(
            Some(root),
            model_root(&self.model),
            "{what}: {step}: root != model root"
        );
        if check == Check::Root {
            return;
        }
        let want: Vec<Leaf> = self
            .keys
            .iter()
            .map(|k| model_get(&self.model, k))
            .collect();
        let got = self.tree.get_many(&self.keys).await.expect("get_many");
        assert_eq!(
            got, want,
            "{what}: {step}: get_many disagrees with the model"
        );
        let proofs = self
            .tree
            .merkle_proofs(&self.keys)
            .await
            .expect("merkle_proofs");
        for ((k, p), l) in self.keys.iter().zip(&proofs).zip(&want) {
            assert!(
                p.verify(k, l, &root),
                "{what}: {step}: proof of {k:?} does not verify"
            );
        }
        let mem_proofs = self
            .mem
            .merkle_proofs(&self.keys)
            .await
            .expect("mem proofs");
        assert!(
            proofs == mem_proofs,
            "{what}: {step}: proofs differ from the memory store's"
        );
        if check == Check::Reads {
            return;
        }
        let fresh: Tree<S, L> = Tree::new(self.tree.store().handle(&unique("fresh")));
        let fresh_root = fresh
            .insert_many(model_pairs(&self.model))
            .await
            .expect("fresh build");
        assert_eq!(
            fresh_root, root,
            "{what}: {step}: fresh build from the final map differs"
        );
        fresh.delete_all().await.expect("delete fresh");
    }

    /// Deletes every live key (half in one batch, half one by one) and
    /// checks that nothing at all is left in the namespace.
    async fn delete_everything(&mut self) {
        let live: Vec<Key> = self.model.keys().map(|k| Key(*k)).collect();
        let (a, b) = live.split_at(live.len() / 2);
        self.apply(
            "delete half in a batch",
            a.iter().map(|k| (*k, Leaf::empty())).collect(),
            false,
            Check::Root,
        )
        .await;
        self.apply(
            "delete the rest one by one",
            b.iter().map(|k| (*k, Leaf::empty())).collect(),
            true,
            Check::Root,
        )
        .await;
        assert!(self.model.is_empty());
        let store = self.tree.store();
        assert_eq!(
            self.tree.root().await.expect("root"),
            ComputedNode::empty_root(),
            "{}",
            self.what
        );
        assert_eq!(
            store.node_rows().await,
            0,
            "{}: node rows left after deleting every key",
            self.what
        );
        assert_eq!(
            store.root_rows().await,
            0,
            "{}: root row left for an empty tree",
            self.what
        );
    }

    async fn cleanup(&self) {
        self.tree.delete_all().await.expect("delete_all");
        assert_eq!(self.tree.store().node_rows().await, 0);
    }
}

// ---------------------------------------------------------------------------
// 1. Equivalence (proptest)
// ---------------------------------------------------------------------------

/// Cases per store: SQL round trips dominate, and the full layout walks 256
/// levels per key.
const EQ_CASES: u32 = 16;

#[derive(Clone, Debug)]
enum KeyR {
    Fresh([u8; 32]),
    /// Bits of an earlier key (or the base key) flipped: long shared
    /// prefixes and suffixes.
    Near(usize, Vec<usize>),
}

#[derive(Clone, Debug)]
enum LeafR {
    Empty,
    /// One of the case's few leaves: equal leaves at several keys.
    Pooled(usize),
    Fresh(Vec<u8>, u64),
}

#[derive(Clone, Debug)]
struct EqCase {
    base: [u8; 32],
    keys: Vec<KeyR>,
    pool: Vec<(Vec<u8>, u64)>,
    batches: Vec<Vec<(usize, LeafR)>>,
}

fn bit_pos() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(255usize),
        0usize..8,
        248usize..256,
        (0usize..32).prop_map(|b| b * 8 + 7),
        0usize..256,
    ]
}

fn eq_case() -> impl Strategy<Value = EqCase> {
    let key_r = prop_oneof![
        1 => any::<[u8; 32]>().prop_map(KeyR::Fresh),
        3 => (any::<usize>(), vec(bit_pos(), 1..=3)).prop_map(|(i, b)| KeyR::Near(i, b)),
    ];
    let leaf_r = prop_oneof![
        1 => Just(LeafR::Empty),
        2 => any::<usize>().prop_map(LeafR::Pooled),
        1 => (vec(any::<u8>(), 0..6), 0u64..1_000_000).prop_map(|(v, s)| LeafR::Fresh(v, s)),
    ];
    (
        any::<[u8; 32]>(),
        vec(key_r, 2..=12),
        vec((vec(any::<u8>(), 0..4), 1u64..1_000), 1..=3),
        vec(vec((any::<usize>(), leaf_r), 1..=8), 1..=3),
    )
        .prop_map(|(base, keys, pool, batches)| EqCase {
            base,
            keys,
            pool,
            batches,
        })
}

impl EqCase {
    fn key_pool(&self) -> Vec<Key> {
        let mut out: Vec<Key> = Vec::new();
        for r in &self.keys {
            let key = match r {
                KeyR::Fresh(b) => Key(*b),
                KeyR::Near(i, bits) => {
                    let from = if out.is_empty() {
                        Key(self.base)
                    } else {
                        out[i % out.len()]
                    };
                    flip(from, bits)
                }
            };
            out.push(key);
        }
        out
    }

    fn batches(&self) -> Vec<Vec<(Key, Leaf)>> {
        let keys = self.key_pool();
        self.batches
            .iter()
            .map(|b| {
                b.iter()
                    .map(|(i, r)| {
                        let l = match r {
                            LeafR::Empty => Leaf::empty(),
                            LeafR::Pooled(p) => {
                                let (v, s) = &self.pool[p % self.pool.len()];
                                Leaf::new(v.clone(), *s)
                            }
                            LeafR::Fresh(v, s) => Leaf::new(v.clone(), *s),
                        };
                        (keys[i % keys.len()], l)
                    })
                    .collect()
            })
            .collect()
    }

    /// Every key of the pool plus a few that were (almost surely) never written.
    fn probes(&self) -> Vec<Key> {
        let mut out = self.key_pool();
        out.push(flip(Key(self.base), &[3]));
        out.push(flip(out[0], &[255]));
        out.push(flip(out[0], &[1, 128]));
        out.sort_by_key(|k| k.0);
        out.dedup();
        out
    }
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// One layout: batch, sequential and final-map trees on the store agree with
/// each other, with a memory tree and with the model; reads agree both ways.
async fn equivalence_layout<S: TestStore, L: Layout>(
    base: &S,
    batches: &[Vec<(Key, Leaf)>],
    probes: &[Key],
) -> Result<(ComputedNode, Vec<Proof>), TestCaseError> {
    let lay = layout_name::<L>();
    let mem: Tree<MemoryStore, L> = Tree::new(MemoryStore::new());
    let batch_tree: Tree<S, L> = Tree::new(base.handle(&unique("eq-batch")));
    let seq_tree: Tree<S, L> = Tree::new(base.handle(&unique("eq-seq")));
    let final_tree: Tree<S, L> = Tree::new(base.handle(&unique("eq-final")));
    let mut model = Model::new();
    for b in batches {
        model_apply(&mut model, b);
        let want = model_root(&model);
        let got = batch_tree.insert_many(b.clone()).await.map_err(fail)?;
        prop_assert_eq!(Some(got), want, "{} insert_many root != model", lay);
        prop_assert_eq!(got, batch_tree.root().await.map_err(fail)?);
        mem.insert_many(b.clone()).await.map_err(fail)?;
        for (k, l) in b {
            if l.is_empty() {
                seq_tree.delete(*k).await.map_err(fail)?;
            } else {
                seq_tree.insert(*k, l.clone()).await.map_err(fail)?;
            }
        }
        prop_assert_eq!(
            seq_tree.root().await.map_err(fail)?,
            got,
            "{} sequential != batch",
            lay
        );
    }
    let final_root = final_tree
        .insert_many(model_pairs(&model))
        .await
        .map_err(fail)?;
    let root = batch_tree.root().await.map_err(fail)?;
    prop_assert_eq!(final_root, root, "{} final-map build != batch", lay);
    prop_assert_eq!(
        mem.root().await.map_err(fail)?,
        root,
        "{} memory != {}",
        lay,
        S::KIND
    );

    let want: Vec<Leaf> = probes.iter().map(|k| model_get(&model, k)).collect();
    let proofs = batch_tree.merkle_proofs(probes).await.map_err(fail)?;
    for t in [&batch_tree, &seq_tree, &final_tree] {
        prop_assert_eq!(
            &t.get_many(probes).await.map_err(fail)?,
            &want,
            "{} get_many",
            lay
        );
    }
    // The sequential tree has the most history (and no re-compaction).
    prop_assert!(
        seq_tree.merkle_proofs(probes).await.map_err(fail)? == proofs,
        "{} proofs differ between trees",
        lay
    );
    prop_assert!(
        mem.merkle_proofs(probes).await.map_err(fail)? == proofs,
        "{} proofs differ from memory",
        lay
    );
    let wrong = leaf("not in the tree", 7);
    for ((k, p), l) in probes.iter().zip(&proofs).zip(&want) {
        prop_assert!(
            p.verify(k, l, &root),
            "{} proof of {:?} does not verify",
            lay,
            k
        );
        prop_assert!(
            !p.verify(k, &wrong, &root),
            "{} proof verifies a wrong leaf",
            lay
        );
    }
    // Single-key calls agree with the batched ones (a few keys: each call on
    // a full tree is a 256-level walk).
    let singles = if L::KIND == LayoutKind::Full { 2 } else { 4 };
    for (i, k) in probes.iter().enumerate().take(singles) {
        prop_assert_eq!(
            &batch_tree.get(k).await.map_err(fail)?,
            &want[i],
            "{} get",
            lay
        );
        prop_assert!(
            batch_tree.merkle_proof(k).await.map_err(fail)? == proofs[i],
            "{} merkle_proof",
            lay
        );
    }
    for t in [&batch_tree, &seq_tree, &final_tree] {
        t.delete_all().await.map_err(fail)?;
        prop_assert_eq!(
            t.store().node_rows().await,
            0,
            "{} rows left after delete_all",
            lay
        );
        prop_assert_eq!(t.root().await.map_err(fail)?, ComputedNode::empty_root());
    }
    Ok((root, proofs))
}

async fn equivalence_case<S: TestStore>(base: &S, case: EqCase) -> Result<(), TestCaseError> {
    let batches = case.batches();
    let probes = case.probes();
    let (full_root, full_proofs) = equivalence_layout::<S, Full>(base, &batches, &probes).await?;
    let (compact_root, compact_proofs) =
        equivalence_layout::<S, Compacted>(base, &batches, &probes).await?;
    prop_assert_eq!(full_root, compact_root, "full root != compacted root");
    prop_assert!(
        full_proofs == compact_proofs,
        "full proofs != compacted proofs"
    );
    Ok(())
}

fn run_equivalence<S: TestStore>(rt: &tokio::runtime::Runtime, base: S) {
    let started = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases: EQ_CASES,
        failure_persistence: None,
        max_shrink_iters: 128,
        ..Config::default()
    });
    let result = runner.run(&eq_case(), |case| {
        rt.block_on(equivalence_case(&base, case))
    });
    if let Err(e) = result {
        panic!("equivalence on {}: {e}", S::KIND);
    }
    eprintln!(
        "equivalence::{} ({EQ_CASES} cases) took {:?}",
        S::KIND,
        started.elapsed()
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

mod equivalence {
    use super::*;

    #[test]
    fn memory() {
        run_equivalence(&runtime(), MemoryStore::new());
    }

    #[test]
    fn sqlite() {
        let rt = runtime();
        let db = rt.block_on(SqliteDb::open("equivalence"));
        run_equivalence(&rt, db.store.clone());
        rt.block_on(db.store.pool().close());
    }

    #[test]
    fn postgres() {
        let rt = runtime();
        let Some(store) = rt.block_on(pg_store("equivalence::postgres")) else {
            return;
        };
        run_equivalence(&rt, store.clone());
        rt.block_on(store.pool().close());
    }

    #[test]
    fn sqlite_cold() {
        let rt = runtime();
        let db = rt.block_on(SqliteDb::open("equivalence-cold"));
        run_equivalence(&rt, db.store.clone().with_recent_nodes(0));
        rt.block_on(db.store.pool().close());
    }

    #[test]
    fn postgres_cold() {
        let rt = runtime();
        let Some(store) = rt.block_on(pg_store("equivalence::postgres_cold")) else {
            return;
        };
        run_equivalence(&rt, store.clone().with_recent_nodes(0));
        rt.block_on(store.pool().close());
    }
}

// ---------------------------------------------------------------------------
// 2. Twin subtrees (spec §9 B3, B4, B3-CL, G255)
// ---------------------------------------------------------------------------

fn k_zero() -> Key {
    Key([0; 32])
}

/// Sets of keys that, holding one shared leaf, produce equal subtrees (equal
/// hashes) at different positions.
fn twin_sets() -> Vec<(&'static str, Vec<Key>)> {
    let z = k_zero();
    let x = hkey("twin-x", 0);
    vec![
        // B4: 00x32 and 01 00x31 with the same leaf.
        ("bit 0", vec![z, flip(z, &[0])]),
        // B4 full-tree variant and G255: differing only in bit 255.
        ("bit 255", vec![z, flip(z, &[255])]),
        // Both at once.
        (
            "bits 0 and 255",
            vec![z, flip(z, &[0]), flip(z, &[255]), flip(z, &[0, 255])],
        ),
        // Four equal subtrees at level 2 (B3-CL: equal compacted leaves).
        (
            "bits 0,1",
            vec![x, flip(x, &[0]), flip(x, &[1]), flip(x, &[0, 1])],
        ),
        // High bits of the first byte.
        (
            "bits 6,7",
            vec![x, flip(x, &[6]), flip(x, &[7]), flip(x, &[6, 7])],
        ),
        // Top bits of several bytes.
        (
            "byte tops",
            vec![x, flip(x, &[7]), flip(x, &[15]), flip(x, &[255])],
        ),
        // The last levels (G255 inside a populated subtree).
        (
            "bits 254,255",
            vec![x, flip(x, &[254]), flip(x, &[255]), flip(x, &[254, 255])],
        ),
    ]
}

/// Twin sets also run on the full layout (every full-tree step walks 256
/// levels, so the overlapping variants run on the compacted layout only).
const FULL_TWIN_SETS: &[&str] = &[
    "bit 0",
    "bit 255",
    "bits 0 and 255",
    "bits 0,1",
    "bits 254,255",
];

async fn twins_layout<S: TestStore, L: Layout>(base: &S) {
    let same = leaf("twin", 5);
    let other = leaf("other", 9);
    for (name, keys) in twin_sets() {
        if L::KIND == LayoutKind::Full && !FULL_TWIN_SETS.contains(&name) {
            continue;
        }
        let mut m: Mirror<S, L> = Mirror::new(base, &format!("twins-{name}"));
        let k0 = keys[0];
        let k1 = keys[1];
        let outsider = hkey("twin-outsider", 1);
        let mut batch: Vec<(Key, Leaf)> = keys.iter().map(|k| (*k, same.clone())).collect();
        batch.push((outsider, other.clone()));
        m.apply(&format!("{name}: insert twins"), batch, false, Check::Reads)
            .await;

        // Delete one twin: the others stay readable (get_many in the check,
        // and a plain get here) and provable.
        m.apply(
            &format!("{name}: delete first twin"),
            vec![(k0, Leaf::empty())],
            true,
            Check::Reads,
        )
        .await;
        assert_eq!(
            m.tree.get(&k1).await.expect("get"),
            same,
            "{}: {name}: twin {k1:?} lost",
            m.what
        );

        // Deleting an absent key (next to the twins) changes nothing at all.
        let before = m.tree.store().dump().await;
        m.apply(
            &format!("{name}: delete absent"),
            vec![(k0, Leaf::empty())],
            false,
            Check::Root,
        )
        .await;
        m.apply(
            &format!("{name}: delete absent near"),
            vec![(flip(k1, &[100]), Leaf::empty())],
            true,
            Check::Root,
        )
        .await;
        assert_eq!(
            m.tree.store().dump().await,
            before,
            "{}: {name}: deleting absent keys wrote rows",
            m.what
        );

        // Replace a twin.
        m.apply(
            &format!("{name}: replace second twin"),
            vec![(k1, other.clone())],
            true,
            Check::Reads,
        )
        .await;
        // Further inserts: the deleted twin back, the replaced one back to
        // the shared leaf, a new neighbour.
        m.apply(
            &format!("{name}: re-insert"),
            vec![
                (k0, same.clone()),
                (k1, same.clone()),
                (flip(k0, &[128]), same.clone()),
            ],
            false,
            Check::Root,
        )
        .await;
        // Delete and replace in one batch, and write next to the last level.
        let last = *keys.last().expect("twins");
        m.apply(
            &format!("{name}: mixed batch"),
            vec![
                (last, Leaf::empty()),
                (k0, other.clone()),
                (flip(k1, &[255]), same.clone()),
            ],
            false,
            Check::Root,
        )
        .await;
        m.apply(
            &format!("{name}: single insert at a twin slot"),
            vec![(last, same.clone())],
            true,
            Check::Fresh,
        )
        .await;
        m.delete_everything().await;
        m.cleanup().await;
    }
}

async fn twins<S: TestStore>(base: S) {
    twins_layout::<S, Full>(&base).await;
    twins_layout::<S, Compacted>(&base).await;
}

on_every_store!(twin_subtrees => twins);

/// Batches that delete, replace and add many keys of a tree big enough
/// for several row levels at once: paths of neighbouring keys share their
/// upper rows (a position store walks those once) and part at every row
/// boundary, and compacted deletes pull leaves up across row boundaries,
/// so the read phase must bring every sibling row the plan needs.
async fn mixed_batches_layout<S: TestStore, L: Layout>(base: &S) {
    let mut m: Mirror<S, L> = Mirror::new(base, "mixed");
    let n = 1500u64;
    let build: Vec<(Key, Leaf)> = (0..n)
        .map(|i| (hkey("mixed", i), leaf(&format!("v{i}"), 1 + i)))
        .collect();
    m.apply("build", build, false, Check::Root).await;
    let mixed: Vec<(Key, Leaf)> = (0..n)
        .step_by(5)
        .map(|i| (hkey("mixed", i), Leaf::empty()))
        .chain(
            (1..n)
                .step_by(5)
                .map(|i| (hkey("mixed", i), leaf("new", 7))),
        )
        .chain((n..n + 300).map(|i| (hkey("mixed", i), leaf(&format!("n{i}"), i))))
        .collect();
    m.apply("delete, replace and add", mixed, false, Check::Reads)
        .await;
    let thin: Vec<(Key, Leaf)> = (0..n + 300)
        .filter(|i| i % 7 != 3)
        .map(|i| (hkey("mixed", i), Leaf::empty()))
        .collect();
    m.apply("delete all but a few", thin, false, Check::Fresh)
        .await;
    m.delete_everything().await;
    m.cleanup().await;
}

async fn mixed_batches<S: TestStore>(base: S) {
    mixed_batches_layout::<S, Compacted>(&base).await;
    mixed_batches_layout::<S, Full>(&base).await;
}

on_every_store!(mixed_batches_over_rows => mixed_batches);

// ---------------------------------------------------------------------------
// 3. Overflow atomicity, replacement parity, sums >= 2^63
// ---------------------------------------------------------------------------

fn assert_overflow<E: std::error::Error>(e: &ms_smt::TreeError<E>, what: &str) {
    assert!(
        e.is_overflow(),
        "{what}: expected an overflow error, got {e:?}"
    );
    assert!(
        e.to_string().contains("integer overflow"),
        "{what}: error text lacks \"integer overflow\": {e}"
    );
}

async fn overflow_layout<S: TestStore, L: Layout>(base: &S) {
    let lay = layout_name::<L>();
    let a = hkey("ovf-a", 0);
    let b = hkey("ovf-b", 0);
    let c = hkey("ovf-c", 0);
    let d = hkey("ovf-d", 0);

    // Rejections leave every row as it was.
    let mut m: Mirror<S, L> = Mirror::new(base, "overflow");
    m.apply(
        "seed",
        vec![(a, leaf("a", u64::MAX - 20)), (b, leaf("b", 10))],
        false,
        Check::Reads,
    )
    .await;
    let root0 = m.tree.root().await.expect("root");
    assert_eq!(root0.sum, u64::MAX - 10);
    let before = m.tree.store().dump().await;
    let rejected: Vec<(&str, Vec<(Key, Leaf)>)> = vec![
        ("new key of sum 100", vec![(c, leaf("c", 100))]),
        (
            "replacement that still overflows",
            vec![(b, leaf("b2", 5)), (c, leaf("c", 100))],
        ),
        (
            "deletes plus an overflowing insert",
            vec![(b, Leaf::empty()), (c, leaf("c", 21))],
        ),
        (
            "batch sum itself overflows",
            vec![(c, leaf("c", u64::MAX)), (d, leaf("d", 1))],
        ),
        ("single key of sum 11", vec![(c, leaf("c", 11))]),
    ];
    for (what, batch) in rejected {
        let what = format!("{} {lay}: {what}", S::KIND);
        let err = m.tree.insert_many(batch).await.expect_err(&what);
        assert_overflow(&err, &what);
        assert_eq!(
            m.tree.store().dump().await,
            before,
            "{what}: rows changed by a rejected batch"
        );
        assert_eq!(m.tree.root().await.expect("root"), root0, "{what}");
        assert_eq!(m.tree.get(&c).await.expect("get"), Leaf::empty(), "{what}");
    }
    let err = m
        .tree
        .insert(c, leaf("c", 11))
        .await
        .expect_err("single insert overflow");
    assert_overflow(&err, "single insert");
    assert_eq!(
        m.tree.store().dump().await,
        before,
        "{lay}: rows changed by a rejected insert"
    );
    m.check("after rejections", Check::Fresh).await;
    // Exactly u64::MAX is fine.
    m.apply(
        "fill to u64::MAX",
        vec![(c, leaf("c", 10))],
        false,
        Check::Reads,
    )
    .await;
    assert_eq!(m.tree.root().await.expect("root").sum, u64::MAX);
    m.delete_everything().await;
    m.cleanup().await;

    // Replacement parity: the batch only looks at the final state.
    let mut m: Mirror<S, L> = Mirror::new(base, "overflow-replace");
    let r = hkey("ovf-r", 0);
    let s = hkey("ovf-s", 0);
    let n = hkey("ovf-n", 0);
    m.apply(
        "seed",
        vec![(r, leaf("r", u64::MAX - 6)), (s, leaf("s", 6))],
        false,
        Check::Root,
    )
    .await;
    assert_eq!(m.tree.root().await.expect("root").sum, u64::MAX);
    m.apply(
        "replace big leaf and add a key",
        vec![(n, leaf("n", 1)), (r, leaf("r", 10))],
        false,
        Check::Reads,
    )
    .await;
    assert_eq!(m.tree.root().await.expect("root").sum, 17);
    m.cleanup().await;

    // Sums >= 2^63 round-trip (stored as i64 bit patterns).
    let mut m: Mirror<S, L> = Mirror::new(base, "big-sums");
    let p = hkey("big-p", 0);
    let q = hkey("big-q", 0);
    let big = leaf("p", (1u64 << 63) + 7);
    m.apply(
        "big leaves",
        vec![(p, big.clone()), (q, leaf("q", 1 << 62))],
        false,
        Check::Reads,
    )
    .await;
    let root = m.tree.root().await.expect("root");
    assert_eq!(root.sum, (1u64 << 63) + (1u64 << 62) + 7);
    assert!(root.sum >= 1 << 63);
    assert_eq!(m.tree.get(&p).await.expect("get"), big);
    assert!(
        m.tree
            .merkle_proof(&p)
            .await
            .expect("proof")
            .verify(&p, &big, &root)
    );
    if let Some(raw) = m.tree.store().raw_sums().await {
        // Spec §5.3: 2^63 + 7 is stored as -9223372036854775801.
        assert!(
            raw.nodes.contains(&-9_223_372_036_854_775_801),
            "{} {lay}: raw sums {:?} lack the i64 pattern of 2^63+7",
            S::KIND,
            raw.nodes
        );
        assert_eq!(raw.root, Some(i64::from_ne_bytes(root.sum.to_ne_bytes())));
        assert!(raw.root.is_some_and(|s| s < 0));
    }
    // Read back over a separate pool.
    let peer: Tree<S, L> = Tree::new(m.tree.store().peer().await);
    assert_eq!(peer.root().await.expect("peer root"), root);
    assert_eq!(peer.get(&p).await.expect("peer get"), big);
    m.apply(
        "more on top",
        vec![(hkey("big-r", 0), leaf("r", 5)), (q, leaf("q2", 1 << 61))],
        false,
        Check::Fresh,
    )
    .await;
    m.cleanup().await;
}

async fn overflow<S: TestStore>(base: S) {
    overflow_layout::<S, Full>(&base).await;
    overflow_layout::<S, Compacted>(&base).await;
}

on_every_store!(overflow_and_big_sums => overflow);

// ---------------------------------------------------------------------------
// A batch that drops references the store does not hold is refused whole.
// ---------------------------------------------------------------------------

/// Commits `batch` directly (below the tree) and checks that it fails with
/// the store's missing-reference error naming `culprit`, writing nothing.
async fn refused<S: TestStore>(store: &S, what: &str, batch: UpdateBatch, culprit: Hash) {
    let before = store.dump().await;
    let err = match store.commit(&batch).await {
        Ok(outcome) => panic!("{} {what}: commit accepted ({outcome:?})", S::KIND),
        Err(err) => err.to_string(),
    };
    assert!(
        err.contains(&culprit.to_string()) && err.contains("batch deletes node"),
        "{} {what}: unexpected error {err}",
        S::KIND
    );
    assert_eq!(
        store.dump().await,
        before,
        "{} {what}: rows changed",
        S::KIND
    );
}

async fn bad_batches<S: TestStore>(base: S) {
    let store = base.handle("bad-batches");
    let tree: Tree<S, Compacted> = Tree::new(store.clone());
    let root = tree
        .insert_many(vec![
            (hkey("bad-a", 0), leaf("a", 1)),
            (hkey("bad-b", 0), leaf("b", 2)),
        ])
        .await
        .expect("seed");
    let stranger = sha256(b"a node nobody stored");
    let fresh = Node::Branch {
        left: sha256(b"left"),
        right: sha256(b"right"),
        sum: 3,
    };
    let fresh_hash = branch_hash(&sha256(b"left"), &sha256(b"right"), 3);
    let moved = ComputedNode::new(fresh_hash, 3);

    refused(
        &store,
        "delete of a node that is not stored",
        UpdateBatch {
            old_root: root,
            new_root: moved,
            inserts: vec![],
            deletes: vec![(Position::ROOT, stranger)],
        },
        stranger,
    )
    .await;
    // The root row holds one reference; dropping two is one too many.
    refused(
        &store,
        "two references dropped from a row holding one",
        UpdateBatch {
            old_root: root,
            new_root: moved,
            inserts: vec![],
            deletes: vec![(Position::ROOT, root.hash), (Position::ROOT, root.hash)],
        },
        root.hash,
    )
    .await;
    // Valid inserts and deletes in the same batch are not applied either.
    refused(
        &store,
        "valid changes next to a missing delete",
        UpdateBatch {
            old_root: root,
            new_root: moved,
            inserts: vec![(Position::ROOT, fresh_hash, fresh)],
            deletes: vec![(Position::ROOT, root.hash), (Position::ROOT, stranger)],
        },
        stranger,
    )
    .await;
    assert_eq!(tree.root().await.expect("root"), root);
    assert_eq!(
        tree.get(&hkey("bad-b", 0)).await.expect("get"),
        leaf("b", 2)
    );
}

on_every_store!(bad_batches_are_refused => bad_batches);

// ---------------------------------------------------------------------------
// 4. Namespaces
// ---------------------------------------------------------------------------

async fn namespaces_layout<S: TestStore, L: Layout>(base: &S) {
    let lay = layout_name::<L>();
    let mut a: Mirror<S, L> = Mirror::new(base, "ns-a");
    let mut b: Mirror<S, L> = Mirror::new(base, "ns-b");
    // Overlapping contents: keys 10..20 hold the same leaves in both trees,
    // so both namespaces store rows with equal hashes.
    let batch = |range: std::ops::Range<u64>, tag: &str| -> Vec<(Key, Leaf)> {
        range
            .map(|i| (hkey("ns", i), leaf(&format!("{tag}{}", i.min(20)), i + 1)))
            .collect()
    };
    a.apply("fill a", batch(0..20, "v"), false, Check::Reads)
        .await;
    b.apply("fill b", batch(10..30, "v"), false, Check::Reads)
        .await;
    assert_ne!(
        a.tree.root().await.expect("root"),
        b.tree.root().await.expect("root")
    );
    let b_dump = b.tree.store().dump().await;
    let b_root = b.tree.root().await.expect("root");

    a.tree.delete_all().await.expect("delete_all a");
    a.model.clear();
    a.mem.delete_all().await.expect("mem delete_all");
    assert_eq!(
        a.tree.root().await.expect("root"),
        ComputedNode::empty_root(),
        "{lay}"
    );
    assert_eq!(
        a.tree.store().node_rows().await,
        0,
        "{lay}: delete_all left rows"
    );
    assert_eq!(
        a.tree.store().root_rows().await,
        0,
        "{lay}: delete_all left the root"
    );
    a.check("after delete_all", Check::Reads).await;

    assert_eq!(
        b.tree.store().dump().await,
        b_dump,
        "{lay}: delete_all of a touched b"
    );
    assert_eq!(b.tree.root().await.expect("root"), b_root);
    b.check("after delete_all of a", Check::Fresh).await;
    // Another handle (and pool) on b sees the same tree.
    let other: Tree<S, L> = Tree::new(b.tree.store().peer().await);
    assert_eq!(other.root().await.expect("root"), b_root);
    assert_eq!(
        other.get_many(&b.keys).await.expect("get_many"),
        b.tree.get_many(&b.keys).await.expect("get_many")
    );

    // a is usable again and independent of b.
    a.apply("refill a", batch(15..25, "w"), false, Check::Reads)
        .await;
    assert_eq!(
        b.tree.store().dump().await,
        b_dump,
        "{lay}: writes to a touched b"
    );
    b.apply(
        "change b",
        vec![(hkey("ns", 12), Leaf::empty())],
        true,
        Check::Reads,
    )
    .await;
    a.check("after b changed", Check::Reads).await;
    a.cleanup().await;
    b.cleanup().await;
}

async fn namespaces<S: TestStore>(base: S) {
    namespaces_layout::<S, Full>(&base).await;
    namespaces_layout::<S, Compacted>(&base).await;
}

on_every_store!(namespaces_are_independent => namespaces);

// ---------------------------------------------------------------------------
// 4b. Remembered nodes and other writers
// ---------------------------------------------------------------------------

/// A handle that remembers the tree keeps giving right answers and writing
/// right rows after another handle (its own pool and memory: another
/// process) deletes, replaces and adds leaves, so that many nodes it
/// remembers are gone from the database; re-inserting deleted leaves needs
/// rows it still remembers. Deleting every key through it must leave no
/// row behind (the reference counts stayed exact).
async fn other_writers_layout<S: TestStore, L: Layout>(base: &S) {
    let mut a: Mirror<S, L> = Mirror::new(base, "recent");
    let b: Tree<S, L> = Tree::new(a.tree.store().peer().await);
    let fill = |range: std::ops::Range<u64>, tag: &str| -> Vec<(Key, Leaf)> {
        range
            .map(|i| (hkey("recent", i), leaf(&format!("{tag}{i}"), i + 1)))
            .collect()
    };
    a.apply("fill", fill(0..200, "r"), false, Check::Reads)
        .await;

    let mut other: Vec<(Key, Leaf)> = (0..100u64)
        .map(|i| (hkey("recent", i), Leaf::empty()))
        .collect();
    other.extend(fill(100..120, "x"));
    other.extend(fill(200..260, "r"));
    b.insert_many(other.clone())
        .await
        .expect("the other writer");
    a.track(&other);
    a.mem
        .insert_many(other.clone())
        .await
        .expect("memory write");
    model_apply(&mut a.model, &other);
    a.check("after the other writer", Check::Reads).await;

    let mut again = fill(0..50, "r"); // rows the other writer deleted
    again.extend(fill(260..300, "r"));
    again.extend(fill(100..110, "r")); // back to the values before "x"
    a.apply("write after the other writer", again, false, Check::Fresh)
        .await;
    a.apply(
        "single writes after the other writer",
        vec![
            (hkey("recent", 150), Leaf::empty()),
            (hkey("recent", 60), leaf("r60", 61)),
        ],
        true,
        Check::Reads,
    )
    .await;
    let remembered = a.tree.store().stats().nodes_remembered;
    if a.tree.store().remembers() {
        assert!(remembered > 0, "{}: nothing was remembered", a.what);
    }

    let all: Vec<(Key, Leaf)> = a.keys.iter().map(|k| (*k, Leaf::empty())).collect();
    a.apply("delete every key", all, false, Check::Root).await;
    assert_eq!(
        a.tree.store().node_rows().await,
        0,
        "{}: rows left after deleting every key",
        a.what
    );
    a.cleanup().await;
}

async fn other_writers<S: TestStore>(base: S) {
    other_writers_layout::<S, Full>(&base).await;
    other_writers_layout::<S, Compacted>(&base).await;
}

on_every_store!(remembered_nodes_survive_other_writers => other_writers);

// ---------------------------------------------------------------------------
// 5. Round trips
// ---------------------------------------------------------------------------

/// Wraps a store and records each commit call: its own counters and
/// whether it committed (or found the root moved and wrote nothing).
#[derive(Clone)]
struct Probe<S> {
    inner: S,
    commits: Arc<Mutex<Vec<(StoreStats, bool)>>>,
    /// `fetch_nodes` calls (read-phase round trips) through this probe.
    fetches: Arc<AtomicU64>,
}

impl<S> Probe<S> {
    fn new(inner: S) -> Self {
        Probe {
            inner,
            commits: Arc::default(),
            fetches: Arc::default(),
        }
    }

    /// Counters of the commit calls since the last call.
    fn take_commits(&self) -> Vec<(StoreStats, bool)> {
        std::mem::take(&mut *self.commits.lock().expect("probe lock"))
    }
}

impl<S: TreeStore> TreeStore for Probe<S> {
    type Error = S::Error;

    fn load_root(&self) -> impl Future<Output = Result<ComputedNode, S::Error>> + Send {
        self.inner.load_root()
    }

    fn fetch_nodes(
        &self,
        hashes: &[Hash],
    ) -> impl Future<Output = Result<Vec<(Hash, Node)>, S::Error>> + Send {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        self.inner.fetch_nodes(hashes)
    }

    fn supports_key_paths(&self) -> bool {
        self.inner.supports_key_paths()
    }

    fn reads_by_position(&self) -> bool {
        self.inner.reads_by_position()
    }

    fn fetch_key_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> impl Future<Output = Result<Option<Vec<(Hash, Node)>>, S::Error>> + Send {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        self.inner.fetch_key_paths(at, starts, siblings)
    }

    async fn commit(&self, batch: &UpdateBatch) -> Result<CommitOutcome, S::Error> {
        let before = self.inner.stats();
        let out = self.inner.commit(batch).await;
        let diff = self.inner.stats().since(&before);
        let committed = matches!(out, Ok(CommitOutcome::Committed));
        self.commits
            .lock()
            .expect("probe lock")
            .push((diff, committed));
        out
    }

    fn delete_all(&self) -> impl Future<Output = Result<(), S::Error>> + Send {
        self.inner.delete_all()
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }

    fn recent_nodes(&self) -> Option<&RecentNodes> {
        self.inner.recent_nodes()
    }
}

/// Checks where one operation's nodes came from: all from the handle's
/// memory when it remembers (the tree was written or read through it
/// before), all from the store when it does not.
fn assert_sources<S: TestStore>(store: &S, cost: &StoreStats, what: &str) {
    if store.remembers() {
        assert_eq!(
            cost.nodes_read,
            0,
            "{}: {what} read nodes that the handle wrote or read before",
            S::KIND
        );
        assert!(
            cost.nodes_remembered > 0,
            "{}: {what} remembered nothing",
            S::KIND
        );
    } else {
        assert!(cost.nodes_read > 0, "{}: {what} read no nodes", S::KIND);
        assert_eq!(cost.nodes_remembered, 0, "{}: {what}", S::KIND);
    }
}

/// Where a write's read phase took its nodes from: as [`assert_sources`],
/// except on stores that read by position, whose commit merges into the
/// rows on the batch's paths: their writes read the paths from the store
/// even when the handle remembers the nodes (taking them from memory would
/// only move those reads into the commit), and remember nothing.
fn assert_write_sources<S: TestStore>(store: &S, cost: &StoreStats, what: &str) {
    if store.reads_by_position() {
        assert!(cost.nodes_read > 0, "{}: {what} read no nodes", S::KIND);
        assert_eq!(cost.nodes_remembered, 0, "{}: {what}", S::KIND);
    } else {
        assert_sources(store, cost, what);
    }
}

const RT_LEAVES: u64 = 10_000;

/// The SQLite store packs at most 16,384 rows into one statement.
const SQLITE_ROWS_PER_CHUNK: u64 = 16_384;

/// A SQLite commit: BEGIN, root read, root write, COMMIT, plus per chunk of
/// rows at most a delete, an upsert and a check.
fn sqlite_commit_bound(rows: u64) -> u64 {
    4 + 3 * rows.div_ceil(SQLITE_ROWS_PER_CHUNK).max(1)
}

/// A Postgres commit, whatever the batch size: BEGIN, lock, root read,
/// delete, savepoint + insert + release (or rollback), a fallback upsert,
/// an upsert of surviving rows, root write, COMMIT.
const PG_COMMIT_BOUND: u64 = 11;

fn ceil_log2(n: u64) -> u64 {
    u64::from(n.next_power_of_two().trailing_zeros())
}

async fn round_trips<S: TestStore>(base: S) {
    let store = base.handle(&unique("round-trips"));
    let probe = Probe::new(store.clone());
    let tree: Tree<Probe<S>, Compacted> = Tree::new(probe.clone());
    let mem: Tree<MemoryStore, Compacted> = Tree::new(MemoryStore::new());
    let seed: Vec<(Key, Leaf)> = (0..RT_LEAVES)
        .map(|i| (hkey("rt-seed", i), leaf(&format!("s{i}"), i % 1000 + 1)))
        .collect();
    let root = tree.insert_many(seed.clone()).await.expect("seed");
    assert_eq!(root, mem.insert_many(seed.clone()).await.expect("mem seed"));
    probe.take_commits();

    let bound = 2 * (ceil_log2(RT_LEAVES) + 8);
    let mut commit_stats = Vec::new();
    for b in [10u64, 1000] {
        let batch: Vec<(Key, Leaf)> = (0..b)
            .map(|i| (hkey(&format!("rt-new-{b}"), i), leaf(&format!("n{i}"), 3)))
            .collect();
        let before = tree.store().stats();
        let root = tree.insert_many(batch.clone()).await.expect("insert_many");
        let cost = tree.store().stats().since(&before);
        assert_eq!(
            root,
            mem.insert_many(batch.clone()).await.expect("mem"),
            "{}",
            S::KIND
        );
        let commits = probe.take_commits();
        assert_eq!(
            commits.len(),
            1,
            "{}: one commit expected without concurrency",
            S::KIND
        );
        let (commit, committed) = commits[0];
        assert!(committed, "{}: the commit did not apply", S::KIND);
        eprintln!(
            "round trips [{}] insert_many B={b} into {RT_LEAVES} leaves: {} round trips, {} statements \
             (commit: {} round trips, {} statements, {} rows changed), bound {bound}",
            S::KIND,
            cost.round_trips,
            cost.statements,
            commit.round_trips,
            commit.statements,
            commit.nodes_written
        );
        assert!(
            cost.round_trips <= bound,
            "{}: insert_many of {b} keys took {} round trips (bound {bound})",
            S::KIND,
            cost.round_trips
        );
        assert_write_sources(&store, &cost, &format!("insert_many of {b} keys"));
        commit_stats.push(commit);
    }
    let (c10, c1000) = (commit_stats[0], commit_stats[1]);
    match S::KIND {
        "postgres" => {
            for c in [c10, c1000] {
                assert!(
                    c.statements <= PG_COMMIT_BOUND,
                    "postgres: a commit of {} rows took {} statements (bound {PG_COMMIT_BOUND})",
                    c.nodes_written,
                    c.statements
                );
            }
        }
        "sqlite" => {
            for c in [c10, c1000] {
                let bound = sqlite_commit_bound(c.nodes_written);
                assert!(
                    c.statements <= bound,
                    "sqlite: a commit of {} rows took {} statements (bound {bound})",
                    c.nodes_written,
                    c.statements
                );
            }
        }
        _ => assert_eq!(c1000.statements, c10.statements),
    }

    // Reads of 1,000 keys: half present, half absent.
    let keys: Vec<Key> = (0..1000u64)
        .map(|i| {
            if i % 2 == 0 {
                hkey("rt-seed", i * 7)
            } else {
                hkey("rt-absent", i)
            }
        })
        .collect();
    let root = tree.root().await.expect("root");
    let before = tree.store().stats();
    let got = tree.get_many(&keys).await.expect("get_many");
    let get_cost = tree.store().stats().since(&before);
    let before = tree.store().stats();
    let proofs = tree.merkle_proofs(&keys).await.expect("merkle_proofs");
    let proof_cost = tree.store().stats().since(&before);
    eprintln!(
        "round trips [{}] get_many of 1000 keys: {} round trips; merkle_proofs of 1000 keys: {} round trips, bound {bound}",
        S::KIND,
        get_cost.round_trips,
        proof_cost.round_trips
    );
    assert!(
        get_cost.round_trips <= bound,
        "{}: get_many took {} round trips",
        S::KIND,
        get_cost.round_trips
    );
    assert!(
        proof_cost.round_trips <= bound,
        "{}: merkle_proofs took {} round trips",
        S::KIND,
        proof_cost.round_trips
    );
    assert_sources(&store, &get_cost, "get_many");
    assert_sources(&store, &proof_cost, "merkle_proofs");
    assert_eq!(got, mem.get_many(&keys).await.expect("mem get_many"));
    for (i, (k, p)) in keys.iter().zip(&proofs).enumerate() {
        let want = if i % 2 == 0 {
            leaf(&format!("s{}", i * 7), (i as u64 * 7) % 1000 + 1)
        } else {
            Leaf::empty()
        };
        assert_eq!(got[i], want);
        assert!(
            p.verify(k, &want, &root),
            "{}: proof {i} does not verify",
            S::KIND
        );
    }
    tree.delete_all().await.expect("delete_all");
    assert_eq!(store.node_rows().await, 0);
}

on_every_store!(round_trips_are_o_depth => round_trips);

// ---------------------------------------------------------------------------
// 6. The host application: migrations and caller transactions
// ---------------------------------------------------------------------------

type SqlxMigrationRow = (i64, String, String, bool, Vec<u8>, i64);

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
        model_apply(&mut model, &seed);
        let root0 = tree.insert_many(seed.clone()).await.expect("seed");
        let rows0 = store.dump().await;
        let new_key = hkey("host-new", 0);
        let batch = vec![
            (new_key, leaf("order 1", 42)),
            (hkey("host-seed", 3), Leaf::empty()),
            (hkey("host-seed", 4), leaf("changed", 1)),
        ];
        let mut after = model.clone();
        model_apply(&mut after, &batch);
        let root1 = model_root(&after).expect("model root");
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
                    .map(|k| Key(*k))
                    .chain([hkey("host-seed", 3)])
                    .collect();
                let proofs = tree.merkle_proofs(&keys).await.expect("proofs");
                for (k, p) in keys.iter().zip(&proofs) {
                    assert!(p.verify(k, &model_get(&after, k), &root1));
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
                assert_eq!(root0, model_root(&model).expect("model"));
            }
        }
        tree.delete_all().await.expect("delete_all");
    }};
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
    sqlx::raw_sql(
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
    .execute(&pool)
    .await
    .expect("host schema");
    let dump_sqlx = || async {
        sqlx::query_as::<_, SqlxMigrationRow>(
            "SELECT version, description, CAST(installed_on AS TEXT), success, checksum, execution_time \
             FROM _sqlx_migrations ORDER BY version",
        )
        .fetch_all(&pool)
        .await
        .expect("dump _sqlx_migrations")
    };
    let tables = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
        )
        .fetch_all(&pool)
        .await
        .expect("tables")
    };
    let sqlx_before = dump_sqlx().await;
    let tables_before = tables().await;

    let store = SqliteStore::from_pool(pool.clone(), &unique("host"));
    store.migrate().await.expect("migrate");
    store.migrate().await.expect("migrate again");
    assert_eq!(
        dump_sqlx().await,
        sqlx_before,
        "migrate() touched _sqlx_migrations"
    );
    let mut tables_after = tables().await;
    tables_after.retain(|t| !tables_before.contains(t));
    assert_eq!(tables_after, STORE_TABLES);
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM ms_smt_migrations ORDER BY version")
            .fetch_all(&pool)
            .await
            .expect("ms_smt_migrations");
    assert!(!versions.is_empty(), "ms_smt_migrations is empty");
    let dedup: std::collections::BTreeSet<_> = versions.iter().collect();
    assert_eq!(
        dedup.len(),
        versions.len(),
        "migrate() twice recorded a version twice"
    );

    for (offset, full) in [(0i64, true), (10i64, false)] {
        let ns_store = store.namespace(&unique("host-tree"));
        let insert = "INSERT INTO host_orders (id, note) VALUES (?, 'order')";
        let count = "SELECT COUNT(*) FROM host_orders WHERE id = ?";
        if full {
            caller_transaction!(
                ns_store,
                Full,
                &pool,
                pool.begin_with("BEGIN IMMEDIATE"),
                insert,
                count,
                offset
            );
        } else {
            caller_transaction!(
                ns_store,
                Compacted,
                &pool,
                pool.begin_with("BEGIN IMMEDIATE"),
                insert,
                count,
                offset
            );
        }
    }
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_app_postgres() {
    let Some(url) = pg_url("host_app_postgres") else {
        return;
    };
    let schema = PgSchema::create(&url, "host_app").await;
    let pool = schema.pool.clone();
    sqlx::raw_sql(
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
    .execute(&pool)
    .await
    .expect("host schema");
    let dump_sqlx = || async {
        sqlx::query_as::<_, SqlxMigrationRow>(
            "SELECT version, description, CAST(installed_on AS TEXT), success, checksum, execution_time \
             FROM _sqlx_migrations ORDER BY version",
        )
        .fetch_all(&pool)
        .await
        .expect("dump _sqlx_migrations")
    };
    let tables = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name",
        )
        .bind(&schema.schema)
        .fetch_all(&pool)
        .await
        .expect("tables")
    };
    let sqlx_before = dump_sqlx().await;
    assert_eq!(sqlx_before.len(), 1);
    let tables_before = tables().await;
    assert_eq!(tables_before, ["_sqlx_migrations", "host_orders"]);

    let store = PostgresStore::from_pool(pool.clone(), &unique("host"));
    store.migrate().await.expect("migrate");
    store.migrate().await.expect("migrate again");
    assert_eq!(
        dump_sqlx().await,
        sqlx_before,
        "migrate() touched _sqlx_migrations"
    );
    let mut tables_after = tables().await;
    tables_after.retain(|t| !tables_before.contains(t));
    assert_eq!(tables_after, STORE_TABLES);
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM ms_smt_migrations ORDER BY version")
            .fetch_all(&pool)
            .await
            .expect("ms_smt_migrations");
    assert!(!versions.is_empty(), "ms_smt_migrations is empty");
    let dedup: std::collections::BTreeSet<_> = versions.iter().collect();
    assert_eq!(
        dedup.len(),
        versions.len(),
        "migrate() twice recorded a version twice"
    );

    for (offset, full) in [(0i64, true), (10i64, false)] {
        let ns_store = store.namespace(&unique("host-tree"));
        let insert = "INSERT INTO host_orders (id, note) VALUES ($1, 'order')";
        let count = "SELECT COUNT(*) FROM host_orders WHERE id = $1";
        if full {
            caller_transaction!(ns_store, Full, &pool, pool.begin(), insert, count, offset);
        } else {
            caller_transaction!(
                ns_store,
                Compacted,
                &pool,
                pool.begin(),
                insert,
                count,
                offset
            );
        }
    }
    drop(store);
    drop(pool);
    schema.drop_schema().await;
}

// ---------------------------------------------------------------------------
// 7. Concurrency
// ---------------------------------------------------------------------------

const WRITERS: usize = 4;
/// Batches per writer: fewer on the full layout, whose every read walks
/// 256 levels (and is redone whenever another writer wins the race).
fn batches_per_writer(kind: LayoutKind) -> usize {
    match kind {
        LayoutKind::Compacted => 4,
        LayoutKind::Full => 2,
    }
}
const OWN_KEYS: u64 = 6;
const SHARED_KEYS: u64 = 4;

fn own_key(ns: &str, w: usize, j: usize, i: u64) -> Key {
    hkey(&format!("{ns}/w{w}/b{j}"), i)
}

fn shared_key(ns: &str, i: u64) -> Key {
    hkey(&format!("{ns}/shared"), i)
}

/// The batches of writer `w`. Own keys are disjoint between writers; the
/// shared keys get the same leaf from every writer and are never deleted;
/// deletes and replacements only touch the writer's own earlier keys. So
/// the final map does not depend on how the commits interleave.
fn writer_batches(kind: LayoutKind, ns: &str, w: usize) -> Vec<Vec<(Key, Leaf)>> {
    (0..batches_per_writer(kind))
        .map(|j| {
            let mut batch: Vec<(Key, Leaf)> = (0..OWN_KEYS)
                .map(|i| {
                    (
                        own_key(ns, w, j, i),
                        leaf(&format!("w{w}b{j}i{i}"), (w * 100 + j * 10) as u64 + i + 1),
                    )
                })
                .collect();
            // A neighbour of a shared key (same path down to bit 12 + w).
            batch.push((
                flip(shared_key(ns, j as u64 % SHARED_KEYS), &[12 + w]),
                leaf(&format!("w{w}near{j}"), 2),
            ));
            batch.extend(
                (0..SHARED_KEYS)
                    .map(|i| (shared_key(ns, i), leaf(&format!("shared{i}"), 1000 + i))),
            );
            if j > 0 {
                batch.push((own_key(ns, w, j - 1, 0), Leaf::empty()));
                batch.push((own_key(ns, w, j - 1, 1), Leaf::empty()));
                batch.push((own_key(ns, w, j - 1, 2), leaf(&format!("w{w}b{j}r"), 7)));
                // Delete the previous neighbour too.
                batch.push((
                    flip(shared_key(ns, (j - 1) as u64 % SHARED_KEYS), &[12 + w]),
                    Leaf::empty(),
                ));
            }
            batch
        })
        .collect()
}

async fn writer<S: TreeStore, L: Layout>(
    tree: Tree<S, L>,
    kind: &'static str,
    ns: String,
    w: usize,
) -> Result<usize, String> {
    let what = format!("{kind} {} writer {w}", layout_name::<L>());
    let mut commits = 0;
    for (j, batch) in writer_batches(L::KIND, &ns, w).into_iter().enumerate() {
        tree.insert_many(batch.clone())
            .await
            .map_err(|e| format!("{what} batch {j}: {e}"))?;
        commits += 1;
        // Read your own writes (nobody else writes these keys); on the
        // compacted layout only, as a full-layout read walks 256 levels.
        if L::KIND == LayoutKind::Full {
            continue;
        }
        let own: Vec<Key> = (0..OWN_KEYS).map(|i| own_key(&ns, w, j, i)).collect();
        let got = tree
            .get_many(&own)
            .await
            .map_err(|e| format!("{what} read {j}: {e}"))?;
        let mut model = Model::new();
        model_apply(&mut model, &batch);
        for (k, l) in own.iter().zip(&got) {
            if *l != model_get(&model, k) {
                return Err(format!("{what} batch {j}: own key {k:?} reads {l:?}"));
            }
        }
    }
    Ok(commits)
}

/// A writer task: its number of commits, or what went wrong.
type Writer = tokio::task::JoinHandle<Result<usize, String>>;

/// Starts the writers of one namespace, alternating between the two pools
/// (two "processes"); returns their tasks and commit probes.
fn spawn_writers<S: TestStore, L: Layout>(base: &S, peer: &S, ns: &str) -> Vec<(Writer, Probe<S>)> {
    (0..WRITERS)
        .map(|w| {
            let store = if w % 2 == 0 {
                base.handle(ns)
            } else {
                peer.handle(ns)
            };
            let probe = Probe::new(store);
            let tree: Tree<Probe<S>, L> = Tree::new(probe.clone());
            (tokio::spawn(writer(tree, S::KIND, ns.to_owned(), w)), probe)
        })
        .collect()
}

async fn check_concurrent<S: TestStore, L: Layout>(base: &S, ns: &str) {
    let tree: Tree<S, L> = Tree::new(base.handle(ns));
    let mut model = Model::new();
    let mut keys: Vec<Key> = Vec::new();
    for w in 0..WRITERS {
        for batch in writer_batches(L::KIND, ns, w) {
            model_apply(&mut model, &batch);
            keys.extend(batch.iter().map(|(k, _)| *k));
        }
    }
    keys.sort_by_key(|k| k.0);
    keys.dedup();
    let root = tree.root().await.expect("root");
    let what = format!("{} {} {ns}", S::KIND, layout_name::<L>());
    assert_eq!(
        Some(root),
        model_root(&model),
        "{what}: final root != model root"
    );
    let mem = memory_tree::<L>(&model).await;
    assert_eq!(
        root,
        mem.root().await.expect("mem root"),
        "{what}: final root != memory root"
    );
    let want: Vec<Leaf> = keys.iter().map(|k| model_get(&model, k)).collect();
    assert_eq!(
        tree.get_many(&keys).await.expect("get_many"),
        want,
        "{what}: get_many"
    );
    if L::KIND == LayoutKind::Compacted {
        for (k, l) in keys.iter().zip(&want) {
            assert_eq!(&tree.get(k).await.expect("get"), l, "{what}: get {k:?}");
        }
    }
    let proofs = tree.merkle_proofs(&keys).await.expect("proofs");
    for ((k, p), l) in keys.iter().zip(&proofs).zip(&want) {
        assert!(p.verify(k, l, &root), "{what}: proof of {k:?}");
    }
    eprintln!(
        "concurrency [{what}]: {} live leaves, root sum {}",
        model.len(),
        root.sum
    );
    tree.delete_all().await.expect("delete_all");
    assert_eq!(tree.store().node_rows().await, 0);
}

async fn concurrency<S: TestStore>(base: S) {
    let peer = base.peer().await;
    let ns_compact = unique("conc-compacted");
    let ns_full = unique("conc-full");
    let started = Instant::now();
    let groups = [
        (
            LayoutKind::Compacted,
            spawn_writers::<S, Compacted>(&base, &peer, &ns_compact),
        ),
        (
            LayoutKind::Full,
            spawn_writers::<S, Full>(&base, &peer, &ns_full),
        ),
    ];
    let mut errors = Vec::new();
    for (kind, writers) in groups {
        let lay = format!("{kind:?}").to_lowercase();
        let mut commits = 0;
        let (mut calls, mut moved, mut fetches) = (0, 0, 0);
        for (task, probe) in writers {
            match task.await {
                Ok(Ok(n)) => commits += n,
                Ok(Err(e)) => errors.push(e),
                Err(e) => errors.push(format!("writer task panicked: {e}")),
            }
            let log = probe.take_commits();
            calls += log.len();
            moved += log.iter().filter(|(_, ok)| !ok).count();
            fetches += probe.fetches.load(Ordering::Relaxed);
        }
        eprintln!(
            "concurrency [{} {lay}]: {WRITERS} writers x {} batches done after {:?}: {commits} commits, \
             {calls} commit calls ({moved} found the root moved), {fetches} node fetches",
            S::KIND,
            batches_per_writer(kind),
            started.elapsed()
        );
        if errors.is_empty() {
            assert_eq!(
                commits,
                WRITERS * batches_per_writer(kind),
                "{} {lay}",
                S::KIND
            );
            assert_eq!(
                calls - moved,
                commits,
                "{} {lay}: committed calls != batches",
                S::KIND
            );
        }
    }
    assert!(
        errors.is_empty(),
        "{} concurrent writers failed: {errors:#?}",
        S::KIND
    );
    check_concurrent::<S, Compacted>(&base, &ns_compact).await;
    check_concurrent::<S, Full>(&base, &ns_full).await;
}

on_every_store!(concurrent_writers => concurrency);

// ---------------------------------------------------------------------------
// 8. Read-phase races, made deterministic
// ---------------------------------------------------------------------------

/// A memory store that lets another writer commit `batch` just before its
/// `at`-th read call (`fetch_nodes` or `fetch_key_paths`, counted from 0;
/// `load_root` is not counted), the way a writer on another connection can
/// commit between two reads of a descent. Everything else is delegated.
#[derive(Clone)]
struct Interfere<L: Layout> {
    inner: MemoryStore,
    reads: Arc<AtomicU64>,
    at: u64,
    other: Tree<MemoryStore, L>,
    batch: Arc<Mutex<Option<Batch>>>,
}

impl<L: Layout> Interfere<L> {
    async fn maybe_interfere(&self) {
        if self.reads.fetch_add(1, Ordering::Relaxed) == self.at {
            self.interfere().await;
        }
    }

    /// Runs the interfering write unless it already ran; true if it ran now.
    async fn interfere(&self) -> bool {
        let batch = self.batch.lock().expect("interfere lock").take();
        match batch {
            Some(batch) => {
                self.other
                    .insert_many(batch)
                    .await
                    .expect("interfering write");
                true
            }
            None => false,
        }
    }
}

impl<L: Layout> TreeStore for Interfere<L> {
    type Error = ms_smt::store::MemoryError;

    fn load_root(&self) -> impl Future<Output = Result<ComputedNode, Self::Error>> + Send {
        self.inner.load_root()
    }

    async fn fetch_nodes(&self, hashes: &[Hash]) -> Result<Vec<(Hash, Node)>, Self::Error> {
        self.maybe_interfere().await;
        self.inner.fetch_nodes(hashes).await
    }

    fn supports_key_paths(&self) -> bool {
        self.inner.supports_key_paths()
    }

    fn reads_by_position(&self) -> bool {
        self.inner.reads_by_position()
    }

    async fn fetch_key_paths(
        &self,
        at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Result<Option<Vec<(Hash, Node)>>, Self::Error> {
        self.maybe_interfere().await;
        self.inner.fetch_key_paths(at, starts, siblings).await
    }

    fn commit(
        &self,
        batch: &UpdateBatch,
    ) -> impl Future<Output = Result<CommitOutcome, Self::Error>> + Send {
        self.inner.commit(batch)
    }

    fn delete_all(&self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.delete_all()
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }
}

/// A key on the left (bit 0 = 0) or right (bit 0 = 1) half of the tree.
fn side_key(tag: &str, i: u64, right: bool) -> Key {
    let mut k = hkey(tag, i);
    if right {
        k.0[0] |= 1;
    } else {
        k.0[0] &= !1;
    }
    k
}

/// The state of one race: the tree under test, and the models before and
/// after the interfering write (an insert on the right half, which replaces
/// and so removes the root and its right child).
struct Race<L: Layout> {
    tree: Tree<Interfere<L>, L>,
    before: Model,
    after: Model,
}

/// A tree seeded with three keys per half whose `at`-th read call is
/// preceded by the interfering write.
async fn race<L: Layout>(at: u64) -> Race<L> {
    let store = MemoryStore::new();
    let seed: Vec<(Key, Leaf)> = (0..3u64)
        .flat_map(|i| {
            [
                (side_key("race-l", i, false), leaf("l", i + 1)),
                (side_key("race-r", i, true), leaf("r", i + 10)),
            ]
        })
        .collect();
    Tree::<MemoryStore, L>::new(store.clone())
        .insert_many(seed.clone())
        .await
        .expect("seed");
    let other = vec![(side_key("race-r", 9, true), leaf("r9", 5))];
    let mut before = Model::new();
    model_apply(&mut before, &seed);
    let mut after = before.clone();
    model_apply(&mut after, &other);
    let tree = Tree::new(Interfere {
        inner: store.clone(),
        reads: Arc::default(),
        at,
        other: Tree::new(store),
        batch: Arc::new(Mutex::new(Some(other))),
    });
    Race {
        tree,
        before,
        after,
    }
}

/// The read calls the races are injected before: the first few of a descent.
const RACE_POINTS: u64 = 3;

/// Writes of one and of two keys on the left half, each racing the
/// interfering write before read call 0, 1 and 2.
async fn read_race_insert<L: Layout>() -> Vec<String> {
    let mut errors = Vec::new();
    for at in 0..RACE_POINTS {
        for n in [1u64, 2] {
            let mut r = race::<L>(at).await;
            let mine: Vec<(Key, Leaf)> = (0..n)
                .map(|i| (side_key("race-l", 20 + i, false), leaf("mine", 7)))
                .collect();
            model_apply(&mut r.before, &mine);
            model_apply(&mut r.after, &mine);
            let what = format!(
                "{} insert_many of {n} key(s), race before read {at}",
                layout_name::<L>()
            );
            match r.tree.insert_many(mine).await {
                Err(e) => errors.push(format!("{what}: failed instead of retrying: {e}")),
                Ok(root) => {
                    // Linearizable: the write went in after the interfering
                    // one (it ran during the write), or before it (it runs now).
                    let ran_now = r.tree.store().interfere().await;
                    let want = if ran_now { &r.before } else { &r.after };
                    if Some(root) != model_root(want) {
                        errors.push(format!("{what}: returned a wrong root"));
                    }
                    if Some(r.tree.root().await.expect("root")) != model_root(&r.after) {
                        errors.push(format!("{what}: a write was lost"));
                    }
                }
            }
        }
    }
    errors
}

/// Proofs of one and of two left keys racing the interfering write.
async fn read_race_proofs<L: Layout>() -> Vec<String> {
    let mut errors = Vec::new();
    for at in 0..RACE_POINTS {
        for n in [1u64, 2] {
            let r = race::<L>(at).await;
            let keys: Vec<Key> = (0..n).map(|i| side_key("race-l", i, false)).collect();
            let what = format!(
                "{} merkle_proofs of {n} key(s), race before read {at}",
                layout_name::<L>()
            );
            match r.tree.merkle_proofs(&keys).await {
                Err(e) => errors.push(format!("{what}: failed instead of retrying: {e}")),
                Ok(proofs) => {
                    // The proofs must show one state: before or after the
                    // interfering write.
                    let shows = |model: &Model| {
                        let root = model_root(model).expect("model root");
                        keys.iter()
                            .zip(&proofs)
                            .all(|(k, p)| p.verify(k, &model_get(model, k), &root))
                    };
                    if !shows(&r.before) && !shows(&r.after) {
                        errors.push(format!("{what}: proofs match neither state"));
                    }
                }
            }
        }
    }
    errors
}

/// Gets of one and of two left keys racing the interfering write (which
/// does not change them).
async fn read_race_gets<L: Layout>() -> Vec<String> {
    let mut errors = Vec::new();
    for at in 0..RACE_POINTS {
        for n in [1u64, 2] {
            let r = race::<L>(at).await;
            let keys: Vec<Key> = (0..n).map(|i| side_key("race-l", i, false)).collect();
            let what = format!(
                "{} get_many of {n} key(s), race before read {at}",
                layout_name::<L>()
            );
            match r.tree.get_many(&keys).await {
                Err(e) => errors.push(format!("{what}: failed instead of retrying: {e}")),
                Ok(got) => {
                    let want: Vec<Leaf> = keys.iter().map(|k| model_get(&r.after, k)).collect();
                    if got != want {
                        errors.push(format!("{what}: read {got:?}, want {want:?}"));
                    }
                }
            }
        }
    }
    errors
}

/// A write whose read phase loses a race (another writer commits between two
/// of its reads and removes nodes it asks for) must retry like any other
/// lost race, not fail.
///
/// `Tree::read` retries a `MissingNode` raised by `fetch_paths` for a node
/// of the level-by-level frontier; a missing off-path sibling, or a node
/// missing from a `fetch_key_paths` walk, only surfaces later, from
/// `plan_items` (writes) or `walk` (reads), and must be retried the same way
/// when the root moved (not returned as an error). `concurrent_writers::*`
/// hits the same race for real.
#[tokio::test]
async fn read_phase_race_insert_many() {
    let mut errors = read_race_insert::<Full>().await;
    errors.extend(read_race_insert::<Compacted>().await);
    assert!(errors.is_empty(), "{errors:#?}");
}

/// The same races on the read paths: proofs need the siblings too.
#[tokio::test]
async fn read_phase_race_merkle_proofs() {
    let mut errors = read_race_proofs::<Full>().await;
    errors.extend(read_race_proofs::<Compacted>().await);
    assert!(errors.is_empty(), "{errors:#?}");
}

/// And gets (a single-key get walks its whole path in one `fetch_key_paths`).
#[tokio::test]
async fn read_phase_race_get_many() {
    let mut errors = read_race_gets::<Full>().await;
    errors.extend(read_race_gets::<Compacted>().await);
    assert!(errors.is_empty(), "{errors:#?}");
}
