//! The machinery of the store suite (`tests/stores_*.rs`): every scenario
//! runs on [`MemoryStore`], [`SqliteStore`] and [`PostgresStore`] through
//! one generic async fn over [`TestStore`], mirrored by a memory tree and
//! the abstract model ([`super::model`]).
//!
//! SQL scenarios run twice ([`on_every_store!`]): on the default handle,
//! which remembers recent nodes (`RecentNodes`), and `*_cold` on a handle
//! that reads every node by SQL.
//!
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ms_smt::store::{AuditStore, MemoryStore, StoreStats, TreeStore, Writable};

use ms_smt::{ComputedNode, Key, Layout, LayoutKind, Leaf, Tree};
use ms_smt_sql::{PostgresStore, SqliteStore};
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;

use super::hooked::{Hook, Hooked};
use super::model::{self, Model};
use super::unique;

// ---------------------------------------------------------------------------
// Names, keys, leaves
// ---------------------------------------------------------------------------

pub fn leaf(value: &str, sum: u64) -> Leaf {
    Leaf::new(value.as_bytes().to_vec(), sum)
}

/// One `insert_many` argument.
pub type Batch = Vec<(Key, Leaf)>;

pub fn layout_name<L: Layout>() -> &'static str {
    match L::KIND {
        LayoutKind::Full => "full",
        LayoutKind::Compacted => "compacted",
    }
}

/// A memory tree holding exactly `model`.
pub async fn memory_tree<L: Layout>(model: &Model) -> Tree<MemoryStore, L> {
    let tree = Tree::new(MemoryStore::new());
    tree.insert_many(model::pairs(model))
        .await
        .expect("memory build");
    tree
}

// ---------------------------------------------------------------------------
// The store abstraction of this suite
// ---------------------------------------------------------------------------

/// Raw sum columns of a namespace, as SQL stores them (i64 bit patterns).
#[derive(Debug)]
pub struct RawSums {
    pub nodes: Vec<i64>,
    pub root: Option<i64>,
}

/// What the generic scenarios need beyond [`TreeStore`].
pub trait TestStore: Writable + AuditStore + Clone + Send + Sync + 'static {
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
        self.recent_nodes(false).is_some_and(|r| r.capacity() > 0)
    }
}

impl TestStore for MemoryStore {
    const KIND: &'static str = "memory";

    fn handle(&self, namespace: &str) -> Self {
        self.open_namespace(namespace).expect("memory namespace")
    }

    fn ns(&self) -> String {
        self.name().to_owned()
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

type StrataRowDump = (Vec<u8>, i64, Vec<u8>);
type NsRootDump = (String, Vec<u8>, i64);

/// Every node sum inside strata bodies, as the i64 with the same bits.
fn body_sums(rows: &[StrataRowDump], height: u8) -> Vec<i64> {
    let height = ms_smt_sql::StratumHeight::new(height).expect("height");
    rows.iter()
        .flat_map(|(_, depth, body)| {
            let mut row = ms_smt_sql::strata::Row::decode(
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

/// What the SQL stores' raw rows look like, read in each one's dialect.
trait SqlRows {
    /// The strata rows of the namespace, in key order.
    fn strata_rows(&self) -> impl Future<Output = Vec<StrataRowDump>> + Send;
    /// The namespace's stratum height and raw root sum (`None` without a
    /// root).
    fn height_and_root(&self) -> impl Future<Output = (u8, Option<i64>)> + Send;
}

impl SqlRows for SqliteStore {
    async fn strata_rows(&self) -> Vec<StrataRowDump> {
        sqlx::query_as(
            "SELECT s.path, s.depth, s.body FROM ms_smt_strata s \
             JOIN ms_smt_namespaces n ON n.id = s.ns WHERE n.name = ? ORDER BY s.path, s.depth",
        )
        .bind(self.name())
        .fetch_all(self.pool())
        .await
        .expect("dump rows")
    }

    async fn height_and_root(&self) -> (u8, Option<i64>) {
        let height: i64 = sqlx::query_scalar("SELECT height FROM ms_smt_namespaces WHERE name = ?")
            .bind(self.name())
            .fetch_one(self.pool())
            .await
            .expect("height");
        let root: Option<i64> = sqlx::query_scalar(
            "SELECT root_sum FROM ms_smt_namespaces WHERE name = ? AND root_hash IS NOT NULL",
        )
        .bind(self.name())
        .fetch_optional(self.pool())
        .await
        .expect("root sum");
        (u8::try_from(height).expect("height"), root)
    }
}

impl SqlRows for PostgresStore {
    async fn strata_rows(&self) -> Vec<StrataRowDump> {
        let rows: Vec<(Vec<u8>, i32, Vec<u8>)> = sqlx::query_as(
            "SELECT s.path, s.depth, s.body FROM ms_smt_strata s \
             JOIN ms_smt_namespaces n ON n.id = s.ns WHERE n.name = $1 ORDER BY s.path, s.depth",
        )
        .bind(self.name())
        .fetch_all(self.pool())
        .await
        .expect("dump rows");
        rows.into_iter()
            .map(|(p, d, b)| (p, i64::from(d), b))
            .collect()
    }

    async fn height_and_root(&self) -> (u8, Option<i64>) {
        let (height, root): (i32, Option<i64>) =
            sqlx::query_as("SELECT height, root_sum FROM ms_smt_namespaces WHERE name = $1")
                .bind(self.name())
                .fetch_one(self.pool())
                .await
                .expect("namespace row");
        (u8::try_from(height).expect("height"), root)
    }
}

/// `COUNT(*)` of `$sql` (a query on the namespace's name, its one
/// parameter) on a SQL store's pool.
#[macro_export]
macro_rules! count_rows {
    ($store:expr, $sql:expr, $what:literal) => {{
        let n: i64 = sqlx::query_scalar($sql)
            .bind($store.name())
            .fetch_one($store.pool())
            .await
            .expect($what);
        usize::try_from(n).expect("row count")
    }};
}
pub use crate::count_rows;

/// [`TestStore`] for a SQL store: `$kind` its name, `$pool` its pool
/// options type with `$max` connections for a peer, `$p` the dialect's
/// first parameter (`?` or `$1`).
macro_rules! sql_test_store {
    ($store:ty, $kind:literal, $pool:ty, $max:literal, $p:literal) => {
        impl TestStore for $store {
            const KIND: &'static str = $kind;

            fn handle(&self, namespace: &str) -> Self {
                self.open_namespace(namespace)
            }

            fn ns(&self) -> String {
                self.name().to_owned()
            }

            async fn peer(&self) -> Self {
                let options = (*self.pool().connect_options()).clone();
                let pool = <$pool>::new()
                    .max_connections($max)
                    .connect_with(options)
                    .await
                    .expect(concat!("second ", $kind, " pool"));
                <$store>::from_pool(pool, self.name()).with_recent_nodes(self.recent().capacity())
            }

            async fn node_rows(&self) -> usize {
                count_rows!(
                    self,
                    concat!(
                        "SELECT COUNT(*) FROM ms_smt_strata s JOIN ms_smt_namespaces n \
                         ON n.id = s.ns WHERE n.name = ",
                        $p
                    ),
                    "count rows"
                )
            }

            async fn root_rows(&self) -> usize {
                count_rows!(
                    self,
                    concat!(
                        "SELECT COUNT(*) FROM ms_smt_namespaces WHERE name = ",
                        $p,
                        " AND root_hash IS NOT NULL"
                    ),
                    "count roots"
                )
            }

            async fn dump(&self) -> Vec<String> {
                let rows = self.strata_rows().await;
                let roots: Vec<NsRootDump> = sqlx::query_as(concat!(
                    "SELECT name, root_hash, root_sum FROM ms_smt_namespaces WHERE name = ",
                    $p,
                    " AND root_hash IS NOT NULL"
                ))
                .bind(self.name())
                .fetch_all(self.pool())
                .await
                .expect("dump roots");
                let mut out: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
                out.extend(roots.iter().map(|r| format!("root {r:?}")));
                out
            }

            async fn raw_sums(&self) -> Option<RawSums> {
                let rows = self.strata_rows().await;
                let (height, root) = self.height_and_root().await;
                Some(RawSums {
                    nodes: body_sums(&rows, height),
                    root,
                })
            }
        }
    };
}

sql_test_store!(SqliteStore, "sqlite", SqlitePoolOptions, 4, "?");
sql_test_store!(PostgresStore, "postgres", PgPoolOptions, 8, "$1");

// ---------------------------------------------------------------------------
// A tree on a store, mirrored by a memory tree and the model
// ---------------------------------------------------------------------------

/// How much [`Mirror::check`] verifies after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Check {
    /// Root == memory root == model root.
    Root,
    /// Also get_many and merkle_proofs of every key ever written, against
    /// the model and the memory tree.
    Reads,
    /// Also a fresh tree on the same store built from the final map.
    Fresh,
}

pub struct Mirror<S: TestStore, L: Layout> {
    pub tree: Tree<S, L>,
    pub mem: Tree<MemoryStore, L>,
    pub model: Model,
    /// Every key ever written (probed for gets and proofs).
    pub keys: Vec<Key>,
    pub what: String,
}

impl<S: TestStore, L: Layout> Mirror<S, L> {
    pub fn new(base: &S, tag: &str) -> Self {
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

    pub fn track(&mut self, batch: &[(Key, Leaf)]) {
        for (k, _) in batch {
            if !self.keys.contains(k) {
                self.keys.push(*k);
            }
        }
    }

    /// Applies `batch` as one insert_many, or (`single`) as one insert or
    /// delete per entry, then checks everything.
    pub async fn apply(&mut self, step: &str, batch: Vec<(Key, Leaf)>, single: bool, check: Check) {
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
        model::apply(&mut self.model, &batch);
        assert_eq!(
            Some(got),
            model::root(&self.model),
            "{}: {step}: returned root != model root",
            self.what
        );
        self.check(step, check).await;
    }

    /// Root == memory == model; get_many and proofs match the model and the
    /// memory tree; a fresh tree of the same layout on the same store built
    /// from the final map has the same root.
    pub async fn check(&self, step: &str, check: Check) {
        let what = &self.what;
        let root = self.tree.root().await.expect("root");
        assert_eq!(
            root,
            self.mem.root().await.expect("mem root"),
            "{what}: {step}: root != memory root"
        );
        assert_eq!(
            Some(root),
            model::root(&self.model),
            "{what}: {step}: root != model root"
        );
        if check == Check::Root {
            return;
        }
        let want: Vec<Leaf> = self
            .keys
            .iter()
            .map(|k| model::get(&self.model, k))
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
            .insert_many(model::pairs(&self.model))
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
    pub async fn delete_everything(&mut self) {
        let live: Vec<Key> = self.model.keys().map(|k| k.0).collect();
        let (a, b) = live.split_at(live.len() / 2);
        for (step, keys, single) in [
            ("delete half in a batch", a, false),
            ("delete the rest one by one", b, true),
        ] {
            let deletes = keys.iter().map(|k| (*k, Leaf::empty())).collect();
            self.apply(step, deletes, single, Check::Root).await;
        }
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

    pub async fn cleanup(&self) {
        self.tree.delete_all().await.expect("delete_all");
        assert_eq!(self.tree.store().node_rows().await, 0);
    }
}

// ---------------------------------------------------------------------------
// A store that counts its commits and reads
// ---------------------------------------------------------------------------

/// A store that records each commit call (its own counters and whether it
/// committed) and counts the read calls (read-phase round trips).
pub type Probe<S> = Hooked<S, Counts>;

/// What a [`Probe`] has seen.
#[derive(Clone, Default)]
pub struct Counts {
    commits: Arc<Mutex<Vec<(StoreStats, bool)>>>,
    /// Store read calls (read-phase round trips) through this probe.
    pub fetches: Arc<AtomicU64>,
}

impl Hook for Counts {
    async fn before_read(&self) {
        self.fetches.fetch_add(1, Ordering::Relaxed);
    }

    fn after_commit(&self, stats: StoreStats, committed: bool, _locked: bool) {
        self.commits
            .lock()
            .expect("probe lock")
            .push((stats, committed));
    }
}

impl<S> Probe<S> {
    pub fn new(inner: S) -> Self {
        Hooked {
            inner,
            hook: Counts::default(),
        }
    }

    /// Counters of the commit calls since the last call.
    pub fn take_commits(&self) -> Vec<(StoreStats, bool)> {
        std::mem::take(&mut *self.hook.commits.lock().expect("probe lock"))
    }
}

// ---------------------------------------------------------------------------
// Running a scenario on every store
// ---------------------------------------------------------------------------

/// Runs one generic scenario `async fn(S)` over [`TestStore`] on every
/// store: memory, SQLite and Postgres, and the SQL stores `*_cold`, with
/// every node read from the database (no [`RecentNodes`](ms_smt::store::RecentNodes)): the SQL read
/// statements, which remembered nodes mostly skip.
///
/// `name => scenario::<L1, L2>` runs `async fn scenario<S, L>(&S)` for each
/// layout in turn on each store; `name => scenario, sql` runs `scenario`
/// on SQLite and Postgres only.
#[macro_export]
macro_rules! on_every_store {
    ($name:ident => $scenario:ident::<$($layout:ty),+>) => {
        $crate::on_every_store!(@mod $name [memory sql cold] |store| {
            $($scenario::<_, $layout>(&store).await;)+
        });
    };
    ($name:ident => $scenario:ident, sql) => {
        $crate::on_every_store!(@mod $name [sql] |store| $scenario(store).await);
    };
    ($name:ident => $scenario:ident) => {
        $crate::on_every_store!(@mod $name [memory sql cold] |store| {
            $scenario(store).await
        });
    };
    (@mod $name:ident [$($set:ident)+] |$store:ident| $run:expr) => {
        mod $name {
            use super::*;
            use std::time::Instant;
            use $crate::stores::{SqliteDb, pg_store};

            $($crate::on_every_store!(@$set $name |$store| $run);)+
        }
    };
    (@memory $name:ident |$store:ident| $run:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn memory() {
            let t = Instant::now();
            let $store = ms_smt::store::MemoryStore::new();
            $run;
            eprintln!("{}::memory took {:?}", stringify!($name), t.elapsed());
        }
    };
    (@sql $name:ident |$store:ident| $run:expr) => {
        $crate::on_every_store!(@sql_pair $name |$store| $run, sqlite postgres []);
    };
    (@cold $name:ident |$store:ident| $run:expr) => {
        $crate::on_every_store!(
            @sql_pair $name |$store| $run, sqlite_cold postgres_cold [.with_recent_nodes(0)]
        );
    };
    // `[$($cold)*]` turns the store into the one the test runs on.
    (@sql_pair $name:ident |$store:ident| $run:expr, $sqlite:ident $postgres:ident
     [$($cold:tt)*]) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            let t = Instant::now();
            let db = SqliteDb::open(concat!(stringify!($name), "-", stringify!($sqlite))).await;
            let $store = db.store.clone()$($cold)*;
            $run;
            db.store.pool().close().await;
            eprintln!("{}::{} took {:?}", stringify!($name), stringify!($sqlite), t.elapsed());
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            let t = Instant::now();
            let test = concat!(stringify!($name), "::", stringify!($postgres));
            let Some(pg) = pg_store(test).await else {
                return;
            };
            let $store = pg.clone()$($cold)*;
            $run;
            pg.pool().close().await;
            eprintln!("{test} took {:?}", t.elapsed());
        }
    };
}
pub use crate::on_every_store;
