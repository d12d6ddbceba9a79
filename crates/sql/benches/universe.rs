//! Criterion benches for the universe capabilities, memory vs SQLite vs
//! PostgreSQL in one run, on compacted trees of N random leaves:
//!
//! * `iterate`: every leaf in tree order (throughput in leaves/s);
//! * `copy/set`: `copy_to` an empty namespace of the same database (one
//!   statement on SQL stores); `copy/stream`: `copy_to` a memory tree;
//!   `copy_filter/quarter`: a quarter of the leaves rejected (set-based
//!   copy, then one `insert_many` of deletes, in a staging namespace);
//! * `diff/d100`: two trees differing in 100 leaves;
//! * `sync/d{1,10,100}`: bring a tree to a peer's pinned root differing in
//!   d leaves (the peer is another namespace of the same store); each
//!   timed sync is undone by an untimed sync back to a pin of the old root;
//!   the subtrees fetched are printed;
//! * `multi_proof/k{10,100,1000}`: one proof for k keys (sizes printed
//!   next to k single compressed proofs);
//! * `feed/{plain,with_later}` (SQL stores): every page of 1,000 changes
//!   of a journal of `MSSMT_BENCH_FEED_COMMITS` commits of 1,000 changes
//!   (default 50), read from its start as a follower far behind does:
//!   `changes` (the page's rows) against `changes_with_later` (also every
//!   change between the page and the head, what a proven page needs).
//!
//! ```text
//! MSSMT_BENCH_PG_URL=postgres://... MSSMT_BENCH_N=10000 cargo bench --bench universe
//! ```
//!
//! SQLite is a file in the temp dir opened with the crate's durable
//! defaults (WAL, `synchronous=FULL`); Postgres comes from
//! `MSSMT_BENCH_PG_URL` and must run with fsync on
//! (`benches/support/durable.rs`). `MSSMT_BENCH_N` sets the tree size
//! (default 10,000).

use ms_smt_test_support::bench as common;
use ms_smt_test_support::durable;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{Batch, ScratchSqlite, runtime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ms_smt::store::{BulkStore, JournalStore, MemoryStore, PinStore, TreeStore};
use ms_smt::{CompactedTree, ComputedNode, Key, Leaf, Tree};
use ms_smt_sql::SqliteStore;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::runtime::Runtime;

/// A store the benches can open namespaces of.
trait Bench: TreeStore + PinStore + BulkStore + Clone + 'static {}
impl<S: TreeStore + PinStore + BulkStore + Clone + 'static> Bench for S {}

/// `n` random leaves: values of 32-64 random bytes, sums in [1, 1000).
fn random_batch(rng: &mut StdRng, n: usize) -> Batch {
    common::random_batch(rng, n, 32..=64, 1..1000)
}

/// `d` changes to `base`: a third replaced, a third new, a third deleted.
fn changes(rng: &mut StdRng, base: &Batch, d: usize) -> Batch {
    let fresh = random_batch(rng, d);
    (0..d)
        .map(|i| match i % 3 {
            0 => (base[i * 7].0, Leaf::new(b"changed".to_vec(), 5)),
            1 => fresh[i].clone(),
            _ => (base[i * 7].0, Leaf::empty()),
        })
        .collect()
}

fn tree_size() -> usize {
    std::env::var("MSSMT_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// Builds a compacted tree of `leaves` in namespace `ns` of `db`.
async fn build<S: Bench>(db: &S, ns: &str, leaves: &Batch) -> CompactedTree<S> {
    let tree = Tree::new(db.open_namespace(ns).expect("namespace"));
    tree.delete_all().await.expect("clear");
    for part in leaves.chunks(50_000) {
        tree.insert_many(part.to_vec()).await.expect("build");
    }
    tree
}

fn bench_store<S: Bench>(c: &mut Criterion, rt: &Runtime, label: &str, db: &S, base: &Batch) {
    let n = base.len();
    let mut rng = StdRng::seed_from_u64(0x756e_6976_0001);
    let started = Instant::now();
    let tree = rt.block_on(build(db, "bench-base", base));
    eprintln!("{label}: built {n} leaves in {:?}", started.elapsed());
    let mut g = c.benchmark_group(format!("{label}/N={n}"));
    g.sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1));

    // Iteration.
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("iterate", |b| {
        b.to_async(rt).iter(|| async {
            let mut leaves = tree.leaves(..);
            let mut count = 0usize;
            loop {
                let page = leaves.next_page().await.expect("page");
                if page.is_empty() {
                    break;
                }
                count += page.len();
            }
            assert_eq!(count, n);
        })
    });

    // Copies.
    let copy_target = db.open_namespace("bench-copy").expect("namespace");
    // A set-based copy into a fresh tree on `copy_target` per iteration,
    // timed; the target is cleared (untimed) after each.
    macro_rules! copy_into_target {
        ($name:literal, |$view:ident, $into:ident| $copy:expr) => {
            g.bench_function($name, |b| {
                b.to_async(rt).iter_custom(|iters| {
                    let (tree, target) = (&tree, &copy_target);
                    async move {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            let $into: CompactedTree<S> = Tree::new(target.clone());
                            let start = Instant::now();
                            let $view = tree.view();
                            let report = $copy;
                            total += start.elapsed();
                            assert!(report.set_based);
                            $into.delete_all().await.expect("clear");
                        }
                        total
                    }
                })
            });
        };
    }
    copy_into_target!("copy/set", |view, into| view
        .copy_to(&into)
        .await
        .expect("copy"));
    g.bench_function("copy/stream", |b| {
        b.to_async(rt).iter(|| async {
            let into = CompactedTree::new(MemoryStore::new());
            let report = tree.view().copy_to(&into).await.expect("copy");
            black_box(report.root)
        })
    });
    copy_into_target!("copy_filter/quarter", |view, into| view
        .copy_filter_to(&into, |k, _| Ok::<_, std::convert::Infallible>(
            k.0[0] % 4 != 0
        ))
        .await
        .expect("copy_filter"));
    g.throughput(Throughput::Elements(1));

    // Diff and sync against a peer differing in d leaves.
    let base_pin = rt.block_on(tree.pin("bench-base")).expect("pin");
    for d in [1usize, 10, 100] {
        let delta = changes(&mut rng, base, d);
        let peer = rt.block_on(build(db, &format!("bench-peer-{d}"), base));
        let peer_root = rt.block_on(peer.insert_many(delta)).expect("peer changes");
        let pin = rt.block_on(peer.pin("serve")).expect("pin");
        let peer_view = peer.at(&pin);
        if d == 100 {
            g.bench_function("diff/d100", |b| {
                b.to_async(rt).iter(|| async {
                    let diff = tree
                        .view()
                        .diff(&peer_view)
                        .collect_all()
                        .await
                        .expect("diff");
                    assert_eq!(diff.len(), 100);
                })
            });
        }
        let report = rt
            .block_on(tree.sync_from(&peer_view, &peer_root))
            .expect("sync");
        assert_eq!(report.root, peer_root);
        eprintln!(
            "{label}/N={n}/sync/d{d}: {} requests, {} subtrees fetched, {} local reads",
            report.requests, report.fetched, report.local_reads
        );
        rt.block_on(tree.sync_from(&tree.at(&base_pin), &base_pin.root))
            .expect("sync back");
        g.bench_function(format!("sync/d{d}"), |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (tree, peer_view, base_pin) = (&tree, &peer_view, &base_pin);
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let report = tree.sync_from(peer_view, &peer_root).await.expect("sync");
                        total += start.elapsed();
                        assert_eq!(report.root, peer_root);
                        let back = tree
                            .sync_from(&tree.at(base_pin), &base_pin.root)
                            .await
                            .expect("sync back");
                        assert_eq!(back.root, base_pin.root);
                    }
                    total
                }
            })
        });
        rt.block_on(peer.unpin("serve")).expect("unpin");
        rt.block_on(peer.delete_all()).expect("clear");
    }
    rt.block_on(tree.unpin("bench-base")).expect("unpin");

    // Multi-key proofs.
    for k in [10usize, 100, 1000] {
        let keys: Vec<Key> = base
            .iter()
            .step_by(n / k)
            .take(k)
            .map(|(k, _)| *k)
            .collect();
        let (root, proof, leaves) = rt.block_on(tree.view().multi_proof(&keys)).expect("proof");
        assert!(proof.verify(&leaves, &root));
        let singles: usize = rt
            .block_on(tree.merkle_proofs(&keys))
            .expect("proofs")
            .iter()
            .map(|p| p.to_bytes().len())
            .sum();
        let multi = proof.encode().len();
        eprintln!(
            "{label}/N={n}/multi_proof/k{k}: {multi} bytes vs {singles} bytes of {k} single \
             proofs ({:.2})",
            multi as f64 / singles as f64
        );
        g.bench_function(format!("multi_proof/k{k}"), |b| {
            b.to_async(rt).iter(|| async {
                let (root, proof, _): (ComputedNode, _, _) =
                    tree.view().multi_proof(&keys).await.expect("proof");
                black_box((root, proof))
            })
        });
    }
    g.finish();
    rt.block_on(tree.delete_all()).expect("clear");
}

/// Commits in the journal `bench_feed` reads.
fn feed_commits() -> usize {
    std::env::var("MSSMT_BENCH_FEED_COMMITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

/// Reads every page of the journal from `since` to the head; returns the
/// pages and the changes read.
async fn read_feed<S: JournalStore>(store: &S, since: u64, later: bool) -> (usize, usize) {
    let (mut at, mut pages, mut changes) = (since, 0, 0);
    loop {
        let page = if later {
            store.changes_with_later(at, 1_000).await
        } else {
            store.changes(at, 1_000).await
        };
        let page = page.expect("page").expect("covered");
        pages += 1;
        changes += page.changes.len();
        if !page.has_more() {
            return (pages, changes);
        }
        at = page.to_version;
    }
}

/// The change feed read by a follower far behind (see the module docs).
fn bench_feed<S: Bench + JournalStore>(
    c: &mut Criterion,
    rt: &Runtime,
    label: &str,
    db: &S,
    base: &Batch,
) {
    let commits = feed_commits();
    let mut rng = StdRng::seed_from_u64(0x756e_6976_0002);
    let tree = rt.block_on(build(db, "bench-feed", base));
    let store = tree.store().clone();
    let since = rt
        .block_on(store.enable_journal())
        .expect("journal")
        .head_version;
    for _ in 0..commits {
        let fresh = random_batch(&mut rng, 1_000);
        rt.block_on(tree.insert_many(fresh)).expect("commit");
    }
    let mut g = c.benchmark_group(format!("{label}/N={}", base.len()));
    g.sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements((commits * 1_000) as u64));
    for (name, later) in [("plain", false), ("with_later", true)] {
        let (pages, changes) = rt.block_on(read_feed(&store, since, later));
        assert_eq!(changes, commits * 1_000);
        eprintln!("{label}/feed/{name}: {pages} pages, {changes} changes");
        g.bench_function(format!("feed/{name}"), |b| {
            b.to_async(rt)
                .iter(|| async { black_box(read_feed(&store, since, later).await) })
        });
    }
    g.finish();
    rt.block_on(store.disable_journal()).expect("journal off");
    rt.block_on(tree.delete_all()).expect("clear");
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let mut rng = StdRng::seed_from_u64(0x756e_6976_0000);
    let base = random_batch(&mut rng, tree_size());

    bench_store(c, &rt, "memory", &MemoryStore::new(), &base);

    let file = ScratchSqlite::new("ms-smt-universe");
    let sqlite = rt
        .block_on(SqliteStore::open(&file.path))
        .expect("open SQLite");
    bench_store(c, &rt, "sqlite", &sqlite, &base);
    bench_feed(c, &rt, "sqlite", &sqlite, &base);
    rt.block_on(sqlite.pool().close());
    drop(file);

    if let Some(pg) = durable::durable_postgres_or_skip(&rt) {
        bench_store(c, &rt, "postgres", &pg, &base);
        bench_feed(c, &rt, "postgres", &pg, &base);
    }
}

criterion_group!(universe, benches);
criterion_main!(universe);
