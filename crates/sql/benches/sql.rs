//! Criterion benches for the stores: memory vs SQLite vs PostgreSQL, insert
//! loop vs `insert_many`, into an empty tree and into a 10,000-leaf tree,
//! plus 1,000 proofs and 1,000 gets from a 10,000-leaf tree.
//!
//! Each bench prints (stderr) the store round trips and statements of one
//! operation next to its name. The populated trees are built once per store
//! and layout; a timed insert into them is undone by an untimed delete of the
//! same keys (the canonical shape makes the tree exactly what it was).
//!
//! SQL trees run on store handles with the default memory of recent nodes
//! (`RecentNodes`): after the first operation the descent reads almost
//! nothing from the database. The `/cold` benches repeat the headline
//! operations through a handle that remembers nothing.
//!
//! Run: `MSSMT_BENCH_PG_URL=postgres://... cargo bench --bench sql`
//! (Postgres must run with fsync on, see `benches/support/durable.rs`;
//! without the variable the Postgres benches are skipped, saying so).
//! SQLite runs on a file in the temp dir with `synchronous=FULL` (one fsync
//! per commit, like tapdb). `MSSMT_BENCH_ONLY=memory/compacted,postgres/compacted`
//! runs only the named store/layout groups, setup included.

use ms_smt_test_support::bench as common;
use ms_smt_test_support::durable;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{Batch, ScratchSqlite, runtime};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use ms_smt::store::{AuditStore, MemoryStore, Writable};
use ms_smt::{Key, Layout, Leaf, Tree};
use ms_smt_sql::{PostgresStore, SqliteStore};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::runtime::Runtime;

/// `n` random leaves like Go's benches: random 32-byte keys, values of 1-255
/// random bytes, sums in [1, 2^32).
fn random_batch(rng: &mut StdRng, n: usize) -> Batch {
    common::random_batch(rng, n, 1..=255, 1..(1u64 << 32))
}

/// Makes fresh, empty trees of one store kind.
trait Factory {
    type S: Writable + AuditStore + Clone + 'static;
    fn label(&self) -> &'static str;
    fn fresh(&self) -> Self::S;
    /// The same tree through a handle that remembers no nodes (every read
    /// goes to the database); `None` for the memory store.
    fn cold(&self, store: &Self::S) -> Option<Self::S>;
}

struct Mem;
impl Factory for Mem {
    type S = MemoryStore;
    fn label(&self) -> &'static str {
        "memory"
    }
    fn fresh(&self) -> MemoryStore {
        MemoryStore::new()
    }
    fn cold(&self, _: &MemoryStore) -> Option<MemoryStore> {
        None
    }
}

struct Namespaced<S> {
    label: &'static str,
    db: S,
    counter: std::sync::atomic::AtomicUsize,
    ns: fn(&S, &str) -> S,
    cold: fn(&S) -> S,
}
impl<S> Namespaced<S> {
    fn new(label: &'static str, db: S, ns: fn(&S, &str) -> S, cold: fn(&S) -> S) -> Self {
        Namespaced {
            label,
            db,
            counter: Default::default(),
            ns,
            cold,
        }
    }
}
impl<S: Writable + AuditStore + Clone + 'static> Factory for Namespaced<S> {
    type S = S;
    fn label(&self) -> &'static str {
        self.label
    }
    fn fresh(&self) -> S {
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (self.ns)(&self.db, &format!("bench-{}-{n}", std::process::id()))
    }
    fn cold(&self, store: &S) -> Option<S> {
        Some((self.cold)(store))
    }
}

async fn insert_loop<S: Writable + AuditStore, L: Layout>(
    tree: &Tree<S, L>,
    batch: &[(Key, Leaf)],
) {
    for (k, l) in batch {
        tree.insert(*k, l.clone()).await.expect("insert");
    }
}

async fn delete_keys<S: Writable + AuditStore, L: Layout>(
    tree: &Tree<S, L>,
    batch: &[(Key, Leaf)],
) {
    tree.insert_many(batch.iter().map(|(k, _)| (*k, Leaf::empty())))
        .await
        .expect("undo");
}

/// One store/layout's criterion group, with the runtime its benches run on
/// and its name (the prefix of the counters printed).
struct Group<'a> {
    g: BenchmarkGroup<'a, WallTime>,
    rt: &'a Runtime,
    name: String,
}

impl Group<'_> {
    /// Runs `op`, one operation on `tree`, once (untimed) and prints the
    /// store counters it spent under `<group>/<name>`.
    fn report<S: Writable + AuditStore, L: Layout, T, E: std::fmt::Debug>(
        &self,
        name: &str,
        tree: &Tree<S, L>,
        op: impl Future<Output = Result<T, E>>,
    ) {
        let name = format!("{}/{name}", self.name);
        let before = tree.store().stats();
        self.rt.block_on(op).expect(&name);
        let stats = tree.store().stats().since(&before);
        eprintln!(
            "  {name}: {} round trips, {} statements, {} nodes read, {} remembered, {} node rows written",
            stats.round_trips,
            stats.statements,
            stats.nodes_read,
            stats.nodes_remembered,
            stats.nodes_written
        );
    }

    /// Benches `insert_many(batch)` into `tree`, each timed insert undone by
    /// an untimed delete of the same keys, then prints one operation's
    /// counters.
    fn insert_many_undone<S: Writable + AuditStore, L: Layout>(
        &mut self,
        name: &str,
        tree: &Tree<S, L>,
        batch: &[(Key, Leaf)],
    ) {
        let rt = self.rt;
        self.g.bench_function(name, |b| {
            b.to_async(rt).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    black_box(tree.insert_many(batch.to_vec()).await.expect("insert_many"));
                    total += start.elapsed();
                    delete_keys(tree, batch).await;
                }
                total
            })
        });
        self.report(name, tree, tree.insert_many(batch.to_vec()));
        rt.block_on(delete_keys(tree, batch));
    }

    /// Prints one `merkle_proofs(keys)` call's counters, then benches it.
    fn merkle_proofs_of<S: Writable + AuditStore, L: Layout>(
        &mut self,
        name: &str,
        tree: &Tree<S, L>,
        keys: &[Key],
    ) {
        self.report(name, tree, tree.merkle_proofs(keys));
        let rt = self.rt;
        self.g.bench_function(name, |b| {
            b.to_async(rt)
                .iter(|| async move { black_box(tree.merkle_proofs(keys).await.expect("proofs")) })
        });
    }
}

/// Benches one layout on one store kind.
fn bench_layout<F: Factory, L: Layout>(
    c: &mut Criterion,
    rt: &Runtime,
    f: &F,
    layout: &str,
    seed: &Batch,
    fresh: &Batch,
    full_tree: bool,
) {
    let name = format!("{}/{layout}", f.label());
    let mut group = Group {
        g: c.benchmark_group(&name),
        rt,
        name,
    };
    group
        .g
        .sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));

    // Into an empty tree: a fresh namespace per iteration (untimed), and
    // `$insert` into it timed.
    macro_rules! into_empty {
        ($name:expr, |$tree:ident| $insert:expr) => {
            group.g.bench_function($name, |b| {
                b.to_async(rt).iter_custom(|iters| async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let $tree = Tree::<F::S, L>::new(f.fresh());
                        let start = Instant::now();
                        $insert;
                        total += start.elapsed();
                        $tree.delete_all().await.expect("cleanup");
                    }
                    total
                })
            });
        };
    }
    for n in [100usize, 1000] {
        let batch = &fresh[..n];
        let name = format!("insert_many/empty/{n}");
        into_empty!(&name, |tree| black_box(
            tree.insert_many(batch.to_vec()).await.expect("insert_many")
        ));
        let tree = Tree::<F::S, L>::new(f.fresh());
        group.report(&name, &tree, tree.insert_many(batch.to_vec()));
        rt.block_on(tree.delete_all()).expect("cleanup");

        // The loop baseline: skipped for 1,000 keys into full trees on SQL
        // (256-row commits, tens of seconds per iteration).
        if full_tree && n > 100 && f.label() != "memory" {
            continue;
        }
        let name = format!("insert_loop/empty/{n}");
        into_empty!(&name, |tree| insert_loop(&tree, batch).await);
    }

    // Into a 10,000-leaf tree, built once; each timed insert is undone.
    let tree = Tree::<F::S, L>::new(f.fresh());
    rt.block_on(tree.insert_many(seed.clone())).expect("seed");
    let root = rt.block_on(tree.root()).expect("root");
    for n in [100usize, 1000] {
        let batch = &fresh[..n];
        group.insert_many_undone(&format!("insert_many/into10k/{n}"), &tree, batch);
        assert_eq!(
            rt.block_on(tree.root()).expect("root"),
            root,
            "undo restores the tree"
        );
        // The same through a handle that remembers nothing: every node the
        // descent needs is read from the database.
        if let Some(cold) = f.cold(tree.store()) {
            let cold = Tree::<F::S, L>::new(cold);
            let name = format!("insert_many/into10k/{n}/cold");
            group.insert_many_undone(&name, &cold, batch);
        }

        if full_tree && n > 100 && f.label() != "memory" {
            continue;
        }
        let t = &tree;
        let name = format!("insert_loop/into10k/{n}");
        group.g.bench_function(&name, |b| {
            b.to_async(rt).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    insert_loop(t, batch).await;
                    total += start.elapsed();
                    delete_keys(t, batch).await;
                }
                total
            })
        });
    }

    // Reads from the 10,000-leaf tree.
    let keys: Vec<Key> = seed.iter().take(1000).map(|(k, _)| *k).collect();
    group.merkle_proofs_of("merkle_proofs/1000", &tree, &keys);
    if let Some(cold) = f.cold(tree.store()) {
        let cold = Tree::<F::S, L>::new(cold);
        group.merkle_proofs_of("merkle_proofs/1000/cold", &cold, &keys);
    }
    group.report("get_many/1000", &tree, tree.get_many(&keys));
    let t = &tree;
    let k = &keys;
    group.g.bench_function("get_many/1000", |b| {
        b.to_async(rt)
            .iter(|| async move { black_box(t.get_many(k).await.expect("gets")) })
    });
    group.g.bench_function("merkle_proof_loop/1000", |b| {
        b.to_async(rt).iter(|| async move {
            for key in k {
                black_box(t.merkle_proof(key).await.expect("proof"));
            }
        })
    });
    group.g.finish();
    rt.block_on(tree.delete_all()).expect("cleanup");
}

/// `MSSMT_BENCH_ONLY=sqlite/compacted,postgres` limits the run to groups
/// whose `store/layout` name contains one of the comma-separated parts.
/// Criterion's own filter selects benches but cannot skip their setup
/// (building a 10,000-leaf full tree on SQL takes tens of seconds).
fn selected(group: &str) -> bool {
    match std::env::var("MSSMT_BENCH_ONLY") {
        Ok(only) if !only.is_empty() => only.split(',').any(|part| group.contains(part.trim())),
        _ => true,
    }
}

fn bench_store<F: Factory>(c: &mut Criterion, rt: &Runtime, f: &F, seed: &Batch, fresh: &Batch) {
    if selected(&format!("{}/compacted", f.label())) {
        bench_layout::<F, ms_smt::Compacted>(c, rt, f, "compacted", seed, fresh, false);
    }
    if selected(&format!("{}/full", f.label())) {
        bench_layout::<F, ms_smt::Full>(c, rt, f, "full", seed, fresh, true);
    }
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let mut rng = StdRng::seed_from_u64(0x6d73_736d_7400_0002);
    let seed = random_batch(&mut rng, 10_000);
    let fresh = random_batch(&mut rng, 1_000);

    bench_store(c, &rt, &Mem, &seed, &fresh);

    let file = ScratchSqlite::new("ms-smt-bench");
    let sqlite = rt
        .block_on(SqliteStore::open(&file.path))
        .expect("open SQLite");
    let f = Namespaced::new("sqlite", sqlite, SqliteStore::open_namespace, |s| {
        s.clone().with_recent_nodes(0)
    });
    bench_store(c, &rt, &f, &seed, &fresh);
    rt.block_on(f.db.pool().close());
    drop(file);

    if let Some(pg) = durable::durable_postgres_or_skip(&rt) {
        let f = Namespaced::new("postgres", pg, PostgresStore::open_namespace, |s| {
            s.clone().with_recent_nodes(0)
        });
        bench_store(c, &rt, &f, &seed, &fresh);
    }
}

criterion_group!(sql, benches);
criterion_main!(sql);
