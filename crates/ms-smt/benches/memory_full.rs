//! Phases of a full-layout `insert_many` of 10,000 keys into an empty
//! memory store, timed apart: the descent (hashing and queuing the
//! 2.4 M-node `UpdateBatch`), the store's commit of that batch, dropping
//! the batch, and the whole `insert_many`; plus a commit of the same batch
//! into a compacted-layout store for comparison. Dropping the store is
//! timed too, though the tree bench leaves it untimed.
//!
//! Run: `cargo bench --bench memory_full`.

use ms_smt_test_support::bench as common;

use std::time::Duration;

use common::Batch;
use criterion::{BatchSize, Criterion, SamplingMode, criterion_group, criterion_main};
use ms_smt::store::{ForestCommit, ForestStore, MemoryError, MemoryStore, TreeUpdate, UpdateBatch};
use ms_smt::{ComputedNode, FullTree, LayoutKind, NodeCache, plan_insert_many};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::runtime::Runtime;

/// Leaves inserted.
const LEAVES: usize = 10_000;

/// The same data as `benches/tree.rs` (same seed and distributions).
fn data() -> Batch {
    let mut rng = StdRng::seed_from_u64(0x6d73_736d_7400_0001);
    common::random_batch(&mut rng, LEAVES, 1..=255, 1..(1u64 << 32))
}

/// A single-threaded runtime, as in `benches/tree.rs`.
fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The full layout's batch for `batch` into the empty tree.
fn plan(layout: LayoutKind, batch: &Batch) -> UpdateBatch {
    plan_insert_many(
        layout,
        &NodeCache::new(),
        ComputedNode::empty_root(),
        batch,
        ms_smt::Tuning::default(),
    )
    .expect("plan")
}

/// A store holding `update` alone.
fn committed(rt: &Runtime, update: &UpdateBatch) -> MemoryStore {
    let store = MemoryStore::new();
    rt.block_on(commit(&store, update)).expect("commit");
    store
}

/// `update` committed to `store`'s tree (one tree's commit).
async fn commit(store: &MemoryStore, update: &UpdateBatch) -> Result<ForestCommit, MemoryError> {
    let part = TreeUpdate {
        tree: store,
        batch: update,
    };
    store.commit_trees(&[part]).await
}

fn phases(c: &mut Criterion) {
    let rt = runtime();
    let batch = data();
    let full = plan(LayoutKind::Full, &batch);
    let compacted = plan(LayoutKind::Compacted, &batch);
    eprintln!(
        "[memory_full] full: {} inserts; compacted: {} inserts",
        full.inserts.len(),
        compacted.inserts.len()
    );

    let mut g = c.benchmark_group("memory_full");
    g.sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10);
    g.bench_function("plan", |b| {
        b.iter_batched(
            || batch.clone(),
            |batch| plan(LayoutKind::Full, &batch),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("drop_batch", |b| {
        b.iter_batched(|| full.clone(), drop, BatchSize::PerIteration)
    });
    for (name, update) in [("commit", &full), ("commit_compacted", &compacted)] {
        g.bench_function(name, |b| {
            b.iter_batched(
                MemoryStore::new,
                |store| {
                    rt.block_on(commit(&store, update)).expect("commit");
                    store
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.bench_function("drop_store", |b| {
        b.iter_batched(|| committed(&rt, &full), drop, BatchSize::PerIteration)
    });
    g.bench_function("insert_many", |b| {
        b.iter_batched(
            || (FullTree::new(MemoryStore::new()), batch.clone()),
            |(tree, batch)| {
                let root = rt.block_on(tree.insert_many(batch)).expect("insert_many");
                (tree, root)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, phases);
criterion_main!(benches);
