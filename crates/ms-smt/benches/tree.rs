//! Criterion benches for the in-memory trees, comparable with taproot-assets'
//! Go `mssmt` benches (see BENCHMARKS.md).
//!
//! Groups:
//! * `floor`: one SHA-256 of a 72-byte preimage and one `branch_hash`, the
//!   per-hash floor the insert numbers are divided by.
//! * `insert_many` / `insert_loop`: N keys into an empty tree, and 1,000 fresh
//!   keys into a 10,000-leaf tree, for both layouts. Every iteration gets a
//!   fresh tree from an untimed setup; the tree is returned from the timed
//!   routine so that dropping it is not timed either.
//! * `read`: get / merkle_proof / verify on a 10,000-leaf tree, per operation,
//!   and the batched `merkle_proofs` / `get_many` of 1,000 keys.
//! * `lanes`: branch hashes per second with 1, 2 and 4 in flight on one
//!   core (`branch_hashes`; SHA-NI where the CPU has it).
//! * `threads`: compacted 10,000 → empty and 1,000 → 10,000, full 10,000 →
//!   empty, `merkle_proofs` and `verify` of 1,000 keys, with the descent on
//!   one thread or two (`Tree::with_descent_threads`)
//!   and on one, two or four lanes (`Tree::with_hash_lanes`). The other groups
//!   use the defaults (two threads on this machine, four lanes).
//! * `million` (only with `MS_SMT_BENCH_MILLION=1`, a few minutes): 1,000
//!   fresh keys into a 10^6-leaf compacted tree, for each thread × lane
//!   setting; the tree's build (batches of 100,000) is timed once per
//!   setting and printed (stderr), as ten criterion samples would take
//!   most of an hour.
//!
//! Before the groups run, hash counts and store round trips are printed once
//! (stderr), measured on this thread with `hash_calls()` and `stats()`.
//!
//! Run: `cargo bench --bench tree`.

use ms_smt_test_support::bench as common;

use std::hint::black_box;
use std::time::Duration;

use common::Batch;
use criterion::{
    BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use ms_smt::Hash;
use ms_smt::store::{MemoryStore, TreeStore};
use ms_smt::{CompactedTree, ComputedNode, FullTree, Key, Layout, Leaf, Proof, Tree, Tuning};
use ms_smt_core::hash::branch_hash;
use ms_smt_core::hash::sha256;
use ms_smt_core::hash_calls;
use ms_smt_descent::hash::BranchInput;
use ms_smt_descent::hash::SumSchedule;
use ms_smt_descent::hash::branch_hashes;
use ms_smt_descent::hash::scheduled_hashes;
use ms_smt_test_support::lift_nodes;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use tokio::runtime::Runtime;

/// Leaves in the populated tree.
const SEED_LEAVES: usize = 10_000;
/// Fresh keys inserted into the populated tree.
const FRESH: usize = 1_000;

/// A single-threaded runtime: every hash runs on the bench thread, so the
/// thread-local hash counter sees all of them.
fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `n` random leaves like Go's benches: random 32-byte keys, values of 1-255
/// random bytes, sums in [1, 2^32).
fn random_batch(rng: &mut StdRng, n: usize) -> Batch {
    common::random_batch(rng, n, 1..=255, 1..(1u64 << 32))
}

/// The fixed data set: 10,000 seed leaves and 1,000 fresh ones.
struct Data {
    seed: Batch,
    fresh: Batch,
}

fn data() -> Data {
    let mut rng = StdRng::seed_from_u64(0x6d73_736d_7400_0001);
    let seed = random_batch(&mut rng, SEED_LEAVES);
    let fresh = random_batch(&mut rng, FRESH);
    Data { seed, fresh }
}

fn tree_with<L: Layout>(rt: &Runtime, batch: &Batch) -> Tree<MemoryStore, L> {
    let tree = Tree::<MemoryStore, L>::new(MemoryStore::new());
    if !batch.is_empty() {
        rt.block_on(tree.insert_many(batch.clone()))
            .expect("seed insert");
    }
    tree
}

/// Printed once per run, outside every timed loop.
/// Set `MS_SMT_BENCH_SKIP_COUNTS` to skip it (e.g. under `perf record`).
fn counts(_c: &mut Criterion) {
    if std::env::var_os("MS_SMT_BENCH_SKIP_COUNTS").is_some() {
        return;
    }
    let rt = runtime();
    let d = data();

    for (name, hashes) in [
        ("compacted", hash_count::<ms_smt::Compacted>(&rt, &d.seed)),
        ("full", hash_count::<ms_smt::Full>(&rt, &d.seed)),
    ] {
        let n = SEED_LEAVES as f64;
        let model = n * (257.0 - n.log2());
        eprintln!(
            "[counts] {name} insert_many {SEED_LEAVES} -> empty: {hashes} hash calls \
             (model N*(257-log2 N) = {model:.0}; Go 2,438,381)"
        );
    }

    fn into10k<L: Layout>(rt: &Runtime, d: &Data) -> String {
        let tree = tree_with::<L>(rt, &d.seed);
        let before = tree.store().stats();
        let h0 = hash_calls();
        rt.block_on(tree.insert_many(d.fresh.clone()))
            .expect("insert");
        let hashes = hash_calls() - h0;
        format!(
            "{:?}, {hashes} hash calls",
            tree.store().stats().since(&before)
        )
    }
    fn proofs<L: Layout>(rt: &Runtime, d: &Data) -> String {
        let tree = tree_with::<L>(rt, &d.seed);
        let keys: Vec<Key> = d.seed.iter().take(FRESH).map(|(k, _)| *k).collect();
        let before = tree.store().stats();
        let got = rt.block_on(tree.merkle_proofs(&keys)).expect("proofs");
        assert_eq!(got.len(), keys.len());
        format!("{:?}", tree.store().stats().since(&before))
    }
    type Count = fn(&Runtime, &Data) -> String;
    let layouts: [(&str, Count, Count); 2] = [
        (
            "compacted",
            into10k::<ms_smt::Compacted>,
            proofs::<ms_smt::Compacted>,
        ),
        ("full", into10k::<ms_smt::Full>, proofs::<ms_smt::Full>),
    ];
    for (layout, into10k, _) in layouts {
        eprintln!(
            "[counts] {layout} insert_many {FRESH} into {SEED_LEAVES}: {}",
            into10k(&rt, &d)
        );
    }
    for (layout, _, proofs) in layouts {
        eprintln!(
            "[counts] {layout} merkle_proofs of {FRESH} keys on {SEED_LEAVES}: {}",
            proofs(&rt, &d)
        );
    }
}

fn hash_count<L: Layout>(rt: &Runtime, batch: &Batch) -> u64 {
    let tree = Tree::<MemoryStore, L>::new(MemoryStore::new());
    let h0 = hash_calls();
    rt.block_on(tree.insert_many(batch.clone()))
        .expect("insert");
    hash_calls() - h0
}

fn floor(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let mut pre = [0u8; 72];
    for (i, b) in pre.iter_mut().enumerate() {
        *b = i as u8;
    }
    g.bench_function("sha256_72B", |b| b.iter(|| sha256(black_box(&pre))));
    let l = Hash([1; 32]);
    let r = Hash([2; 32]);
    g.bench_function("branch_hash", |b| {
        b.iter(|| branch_hash(black_box(&l), black_box(&r), black_box(0x0102_0304)))
    });
    g.finish();
}

/// Sample size for an insert bench: criterion's minimum (10) for the slow
/// cases (10,000 keys, and everything that rebuilds the 10,000-leaf tree).
fn samples(case: &str, n: usize) -> usize {
    if case == "into10k" || n >= 10_000 {
        10
    } else {
        20
    }
}

async fn insert_loop<L: Layout>(tree: &Tree<MemoryStore, L>, batch: Batch) -> ComputedNode {
    let mut root = ComputedNode::empty_root();
    for (k, l) in batch {
        root = tree.insert(k, l).await.expect("insert");
    }
    root
}

/// One timed insert of `batch` into `tree`: one `insert_many`, or (`kind`
/// "insert_loop") one `insert` per leaf; the tree is returned so that
/// criterion drops it untimed.
fn insert<L: Layout>(
    rt: &Runtime,
    kind: &str,
    tree: Tree<MemoryStore, L>,
    batch: Batch,
) -> (Tree<MemoryStore, L>, ComputedNode) {
    let root = if kind == "insert_many" {
        rt.block_on(tree.insert_many(batch)).expect("insert_many")
    } else {
        rt.block_on(insert_loop(&tree, batch))
    };
    (tree, root)
}

fn bench_inserts<L: Layout>(c: &mut Criterion, rt: &Runtime, d: &Data, layout: &str) {
    for kind in ["insert_many", "insert_loop"] {
        let mut g = c.benchmark_group(kind);
        g.sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));

        for n in [100usize, 1_000, 10_000] {
            g.sample_size(samples("empty", n));
            let batch: Batch = d.seed[..n].to_vec();
            g.bench_function(BenchmarkId::new(format!("{layout}/empty"), n), |b| {
                b.iter_batched(
                    || {
                        (
                            Tree::<MemoryStore, L>::new(MemoryStore::new()),
                            batch.clone(),
                        )
                    },
                    |(tree, batch)| insert(rt, kind, tree, batch),
                    BatchSize::PerIteration,
                )
            });
        }

        // 1,000 fresh keys into a 10,000-leaf tree, rebuilt (untimed) for
        // every iteration: MemoryStore clones share state, so a clone would
        // not reset it.
        g.sample_size(samples("into10k", FRESH));
        g.measurement_time(Duration::from_secs(2));
        g.bench_function(BenchmarkId::new(format!("{layout}/into10k"), FRESH), |b| {
            b.iter_batched(
                || (tree_with::<L>(rt, &d.seed), d.fresh.clone()),
                |(tree, batch)| insert(rt, kind, tree, batch),
                BatchSize::PerIteration,
            )
        });
        g.finish();
    }
}

/// Branch hashes with `N` in flight: criterion reports hashes per second.
fn lanes(c: &mut Criterion) {
    let mut g = c.benchmark_group("lanes");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    fn inputs<const N: usize>() -> [BranchInput; N] {
        std::array::from_fn(|i| (Hash([i as u8; 32]), Hash([!(i as u8); 32]), i as u64))
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("branch_hash", |b| {
        b.iter(|| branch_hash(black_box(&Hash([1; 32])), black_box(&Hash([2; 32])), 3))
    });
    let (one, two, four) = (inputs::<1>(), inputs::<2>(), inputs::<4>());
    g.bench_function(BenchmarkId::new("branch_hashes", 1), |b| {
        b.iter(|| branch_hashes(black_box(&one)))
    });
    g.throughput(Throughput::Elements(2));
    g.bench_function(BenchmarkId::new("branch_hashes", 2), |b| {
        b.iter(|| branch_hashes(black_box(&two)))
    });
    g.throughput(Throughput::Elements(4));
    g.bench_function(BenchmarkId::new("branch_hashes", 4), |b| {
        b.iter(|| branch_hashes(black_box(&four)))
    });
    // The lifts' form: the second block scheduled once per sum.
    let schedule = SumSchedule::new(3);
    fn scheduled<const N: usize>(b: &mut criterion::Bencher, s: &SumSchedule) {
        let pairs: [(Hash, Hash); N] =
            std::array::from_fn(|i| (Hash([i as u8; 32]), Hash([2; 32])));
        let schedules = [s; N];
        b.iter(|| scheduled_hashes(black_box(&pairs), black_box(&schedules)))
    }
    for n in [1u64, 2, 3, 4] {
        g.throughput(Throughput::Elements(n));
        g.bench_function(BenchmarkId::new("scheduled_hashes", n), |b| match n {
            1 => scheduled::<1>(b, &schedule),
            2 => scheduled::<2>(b, &schedule),
            3 => scheduled::<3>(b, &schedule),
            _ => scheduled::<4>(b, &schedule),
        });
    }
    // The climb kernel as the descent uses it: 64 compacted leaves lifted
    // from level 256 to 16 (240 branch hashes each) on 1, 2 and 4 lanes;
    // throughput in branch hashes.
    let nodes: Vec<(Hash, u64, Key)> = (0..64u8)
        .map(|i| {
            (
                Hash([i; 32]),
                u64::from(i) + 1,
                Key([i.wrapping_mul(37); 32]),
            )
        })
        .collect();
    g.throughput(Throughput::Elements(64 * 240));
    for lanes in [1usize, 2, 4] {
        g.bench_function(BenchmarkId::new("climb_64x240", lanes), |b| {
            b.iter(|| lift_nodes(black_box(&nodes), 16, lanes))
        });
    }
    g.finish();
}

/// Thread × lane settings the `threads` and `million` groups compare.
const SETTINGS: [(usize, usize); 6] = [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4)];

/// One setting as the trees' tuning, and the id naming it ("1t4l": one
/// thread, four lanes).
fn setting((threads, lanes): (usize, usize)) -> (Tuning, String) {
    let tuning = Tuning::new()
        .with_descent_threads(threads)
        .with_hash_lanes(lanes);
    (tuning, format!("{threads}t{lanes}l"))
}

/// The same inserts on one thread or two, on one, two or four lanes.
fn threads(c: &mut Criterion) {
    let rt = runtime();
    let d = data();
    let mut g = c.benchmark_group("threads");
    g.sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10);
    // Proofs of 1,000 keys (half present, half absent: an absent key's
    // proof lifts its compacted neighbour) and their verification.
    let proven = tree_with::<ms_smt::Compacted>(&rt, &d.seed);
    let root = rt.block_on(proven.root()).expect("root");
    let keys: Vec<Key> = d.seed[..FRESH / 2]
        .iter()
        .chain(&d.fresh[..FRESH / 2])
        .map(|(k, _)| *k)
        .collect();
    let leaves: Vec<Leaf> = d.seed[..FRESH / 2]
        .iter()
        .map(|(_, l)| l.clone())
        .chain(std::iter::repeat_n(Leaf::empty(), FRESH / 2))
        .collect();
    for s in SETTINGS {
        let (tuning, id) = setting(s);
        let tuned = CompactedTree::new(proven.store().clone()).with_tuning(tuning);
        g.bench_function(
            BenchmarkId::new("compacted/10k/merkle_proofs_1000", &id),
            |b| b.iter(|| rt.block_on(tuned.merkle_proofs(&keys)).expect("proofs")),
        );
        let proofs = rt.block_on(tuned.merkle_proofs(&keys)).expect("proofs");
        let all_verify = |proofs: &[Proof]| {
            proofs
                .iter()
                .zip(&keys)
                .zip(&leaves)
                .all(|((p, k), l)| p.verify(k, l, &root))
        };
        assert!(all_verify(&proofs), "every proof verifies");
        g.bench_function(BenchmarkId::new("compacted/10k/verify_1000", &id), |b| {
            b.iter(|| all_verify(black_box(&proofs)))
        });
        g.bench_function(BenchmarkId::new("compacted/empty/10000", &id), |b| {
            b.iter_batched(
                || {
                    let tree = CompactedTree::new(MemoryStore::new()).with_tuning(tuning);
                    (tree, d.seed.clone())
                },
                |(tree, batch)| insert(&rt, "insert_many", tree, batch),
                BatchSize::PerIteration,
            )
        });
        g.bench_function(BenchmarkId::new("compacted/into10k/1000", &id), |b| {
            b.iter_batched(
                || {
                    (
                        tree_with::<ms_smt::Compacted>(&rt, &d.seed).with_tuning(tuning),
                        d.fresh.clone(),
                    )
                },
                |(tree, batch)| insert(&rt, "insert_many", tree, batch),
                BatchSize::PerIteration,
            )
        });
        g.bench_function(BenchmarkId::new("full/empty/10000", &id), |b| {
            b.iter_batched(
                || {
                    (
                        FullTree::new(MemoryStore::new()).with_tuning(tuning),
                        d.seed.clone(),
                    )
                },
                |(tree, batch)| insert(&rt, "insert_many", tree, batch),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// Leaves of the `million` group's tree, and its build batches.
const MILLION: usize = 1_000_000;
const MILLION_BATCH: usize = 100_000;

/// A 10^6-leaf compacted tree in memory: its build, and 1,000 fresh keys
/// into it (the tree grows by 1,000 per iteration, which changes nothing
/// measurable at this size). Opt-in: `MS_SMT_BENCH_MILLION=1`.
fn million(c: &mut Criterion) {
    if std::env::var_os("MS_SMT_BENCH_MILLION").is_none() {
        return;
    }
    let rt = runtime();
    let mut rng = StdRng::seed_from_u64(0x6d73_736d_7400_0002);
    let batches: Vec<Batch> = (0..MILLION / MILLION_BATCH)
        .map(|_| random_batch(&mut rng, MILLION_BATCH))
        .collect();
    let build = |batches: &[Batch], tuning: Tuning| {
        let tree = CompactedTree::new(MemoryStore::new()).with_tuning(tuning);
        for batch in batches {
            rt.block_on(tree.insert_many(batch.clone())).expect("build");
        }
        tree
    };
    let mut g = c.benchmark_group("million");
    g.sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10);
    for s in SETTINGS {
        let (tuning, id) = setting(s);
        // One build per setting, timed by hand: ten criterion samples of a
        // build would take most of an hour.
        let start = std::time::Instant::now();
        let tree = build(&batches, tuning);
        eprintln!(
            "[million] build {MILLION} leaves in batches of {MILLION_BATCH}, {id}: {:.2} s",
            start.elapsed().as_secs_f64()
        );
        g.bench_function(BenchmarkId::new("into1m/1000", &id), |b| {
            b.iter_batched(
                || random_batch(&mut rng, FRESH),
                |batch| rt.block_on(tree.insert_many(batch)).expect("insert"),
                BatchSize::PerIteration,
            )
        });
        drop(tree);
    }
    g.finish();
}

fn inserts(c: &mut Criterion) {
    let rt = runtime();
    let d = data();
    bench_inserts::<ms_smt::Compacted>(c, &rt, &d, "compacted");
    bench_inserts::<ms_smt::Full>(c, &rt, &d, "full");
}

/// The seed keys in a fixed random order: each op takes the next one.
fn shuffled_keys(d: &Data) -> Vec<Key> {
    let mut keys: Vec<Key> = d.seed.iter().map(|(k, _)| *k).collect();
    keys.shuffle(&mut StdRng::seed_from_u64(7));
    keys
}

fn bench_reads<L: Layout>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &Runtime,
    d: &Data,
    layout: &str,
    tree: &Tree<MemoryStore, L>,
) {
    let keys = shuffled_keys(d);
    g.sample_size(100);
    each_key(
        g,
        rt,
        format!("{layout}/10k/get"),
        &keys,
        |key| async move { tree.get(&key).await.expect("get") },
    );
    each_key(
        g,
        rt,
        format!("{layout}/10k/merkle_proof"),
        &keys,
        |key| async move { tree.merkle_proof(&key).await.expect("proof") },
    );
}

/// Benches `op` as `name`, each iteration on the next of `keys`, cycling.
fn each_key<Fut: Future>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &Runtime,
    name: String,
    keys: &[Key],
    op: impl Fn(Key) -> Fut,
) {
    g.bench_function(name, |b| {
        let mut i = 0usize;
        b.to_async(rt).iter(|| {
            let key = keys[i % keys.len()];
            i += 1;
            op(key)
        })
    });
}

fn reads(c: &mut Criterion) {
    let rt = runtime();
    let d = data();
    let compacted: CompactedTree<MemoryStore> = tree_with(&rt, &d.seed);
    let full: FullTree<MemoryStore> = tree_with(&rt, &d.seed);

    let mut g = c.benchmark_group("read");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    bench_reads(&mut g, &rt, &d, "compacted", &compacted);

    // Verify with precomputed proofs, cycling through the keys.
    let root = rt.block_on(compacted.root()).expect("root");
    let leaves: Vec<(Key, Leaf)> = {
        let keys = shuffled_keys(&d);
        let by_key: std::collections::HashMap<Key, Leaf> = d.seed.iter().cloned().collect();
        keys.iter().map(|k| (*k, by_key[k].clone())).collect()
    };
    let keys: Vec<Key> = leaves.iter().map(|(k, _)| *k).collect();
    let proofs: Vec<Proof> = rt.block_on(compacted.merkle_proofs(&keys)).expect("proofs");
    assert!(
        proofs
            .iter()
            .zip(&leaves)
            .all(|(p, (k, l))| p.verify(k, l, &root))
    );
    g.bench_function("compacted/10k/verify", |b| {
        let mut i = 0usize;
        b.iter(|| {
            let j = i % leaves.len();
            i += 1;
            let (k, l) = &leaves[j];
            proofs[j].verify(black_box(k), black_box(l), black_box(&root))
        })
    });

    // One batched call for 1,000 keys.
    let batch_keys: Vec<Key> = keys[..FRESH].to_vec();
    g.sample_size(20);
    g.bench_function("compacted/10k/merkle_proofs_1000", |b| {
        b.to_async(&rt)
            .iter(|| async { compacted.merkle_proofs(&batch_keys).await.expect("proofs") })
    });
    g.bench_function("compacted/10k/get_many_1000", |b| {
        b.to_async(&rt)
            .iter(|| async { compacted.get_many(&batch_keys).await.expect("get_many") })
    });

    bench_reads(&mut g, &rt, &d, "full", &full);
    g.finish();
}

criterion_group!(
    benches, counts, floor, lanes, inserts, reads, threads, million
);
criterion_main!(benches);
