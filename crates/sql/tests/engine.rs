//! The one write engine: every write path, whatever it writes, falls back
//! to the store's write lock after a few lost races, and is judged the
//! same way.
//!
//! Each store is wrapped so that another writer (a forest write through
//! the same links) commits before every optimistic commit: only the lock
//! lets a write through. On memory, SQLite and Postgres:
//!
//! * `forest_write_takes_the_lock`: a `Forest::insert_many` over three
//!   children and their parent loses exactly `EXCLUSIVE_AFTER` races, then
//!   lands under one lock of all four trees in one commit; the other
//!   writer's leaves and its own are all there and the links audit clean.
//! * `forest_writer_takes_the_lock`: the same for a `ForestWriter` group
//!   (its first, pipelined commit counts as its first attempt).
//! * `tree_write_takes_the_lock_with_proof`: a one-tree
//!   `insert_many_with_proof` lands under the lock with an update proof
//!   that verifies (the proof is the engine's, not a separate path).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ms_smt::EXCLUSIVE_AFTER;
use ms_smt::store::{AuditStore, ForestStore, StoreStats, Writable};
use ms_smt::{CompactedTree, Forest, Key, Leaf, WriterConfig};
use support::hooked::{Hook, Hooked};
use support::links::forest_of;
use support::{hkey, unique};

type Compacted = ms_smt::Compacted;

/// A write by another writer, run before each optimistic commit.
type Interference = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The hook of a store that loses every optimistic commit: another writer
/// commits just before it. Counts what it saw.
#[derive(Clone)]
struct Race {
    interfere: Interference,
    /// Optimistic commits (each one raced).
    optimistic: Arc<AtomicU64>,
    /// Writes that took the write lock.
    locked: Arc<AtomicU64>,
    /// Commits under the lock.
    locked_commits: Arc<AtomicU64>,
}

impl Race {
    /// `(optimistic commits, locks taken, commits under the lock)`.
    fn counts(&self) -> (u64, u64, u64) {
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        (
            get(&self.optimistic),
            get(&self.locked),
            get(&self.locked_commits),
        )
    }
}

impl Hook for Race {
    async fn before_read(&self) {}

    async fn before_commit(&self) {
        self.optimistic.fetch_add(1, Ordering::SeqCst);
        (self.interfere)().await;
    }

    fn after_commit(&self, _stats: StoreStats, _committed: bool, locked: bool) {
        if locked {
            self.locked_commits.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn locked(&self) {
        self.locked.fetch_add(1, Ordering::SeqCst);
    }
}

/// `store` hooked so that before each optimistic commit another forest on
/// the same links writes a new leaf of sum 1 into tree `target`; the
/// leaves it wrote are counted in `written`.
fn racing<S>(store: &S, p: &str, target: &str, written: &Arc<AtomicU64>) -> Hooked<S, Race>
where
    S: Writable + 'static,
{
    let other = forest_of(store.forest().clone(), p);
    let (name, written) = (target.to_owned(), written.clone());
    let interfere: Interference = Arc::new(move || {
        let (other, name, written) = (other.clone(), name.clone(), written.clone());
        Box::pin(async move {
            let i = written.fetch_add(1, Ordering::SeqCst);
            other
                .insert_many([(name.as_str(), hkey(&name, i), Leaf::new(vec![9], 1))])
                .await
                .expect("the other writer");
        })
    });
    Hooked {
        inner: store.clone(),
        hook: Race {
            interfere,
            optimistic: Arc::default(),
            locked: Arc::default(),
            locked_commits: Arc::default(),
        },
    }
}

/// Every tree as expected and the links clean: `model` per child, and the
/// other writer's `written` leaves of sum 1.
async fn check<S>(forest: &Forest<S, Compacted>, p: &str, model: &Model, written: u64)
where
    S: ForestStore + Clone,
    S::Tree: Writable + AuditStore,
{
    let mut total = 0;
    for (name, leaves) in model {
        let tree = forest.tree(name).expect("tree");
        for (key, leaf) in leaves {
            assert_eq!(tree.get(key).await.expect("get"), *leaf, "{name}");
            total += leaf.sum();
        }
        support::assert_audit_clean(&tree, name).await;
    }
    let other = forest.tree(&format!("{p}/other")).expect("other");
    assert_eq!(other.root().await.expect("root").sum, written);
    let top = forest.roots(&[p]).await.expect("parent")[0];
    assert_eq!(top.sum, total + written, "the parent holds every child");
    let audit = forest.audit_links().await.expect("audit links");
    assert!(audit.is_clean(), "{:?}", audit.problems);
}

/// Each child's leaves.
type Model = BTreeMap<String, BTreeMap<Key, Leaf>>;

/// The writes of three children, and their model.
fn writes(p: &str) -> (Vec<(String, Key, Leaf)>, Model) {
    let mut model = Model::new();
    let mut writes = Vec::new();
    for c in 0..3u64 {
        let name = format!("{p}/c{c}");
        for i in 0..20u64 {
            let (key, leaf) = (hkey(&name, i), Leaf::new(vec![c as u8], 2 + i));
            writes.push((name.clone(), key, leaf.clone()));
            model.entry(name.clone()).or_default().insert(key, leaf);
        }
    }
    (writes, model)
}

async fn forest_write_takes_the_lock<S>(store: S)
where
    S: Writable + AuditStore + 'static,
{
    let p = unique("locked");
    let written = Arc::new(AtomicU64::new(0));
    let racing = racing(&store, &p, &format!("{p}/other"), &written);
    let race = racing.hook.clone();
    let forest = forest_of(racing, &p);
    let (writes, model) = writes(&p);
    let write = forest
        .insert_many(writes)
        .await
        .expect("lands under the lock");
    assert_eq!(write.trees.len(), 4, "three children and their parent");
    let lost = u64::from(EXCLUSIVE_AFTER);
    assert_eq!(
        race.counts(),
        (lost, 1, 1),
        "(raced, locked, locked commits)"
    );
    assert_eq!(written.load(Ordering::SeqCst), lost);
    check(&forest_of(store.forest().clone(), &p), &p, &model, lost).await;
}

async fn forest_writer_takes_the_lock<S>(store: S)
where
    S: Writable + AuditStore + 'static,
{
    let p = unique("locked_writer");
    let written = Arc::new(AtomicU64::new(0));
    let racing = racing(&store, &p, &format!("{p}/other"), &written);
    let race = racing.hook.clone();
    let forest = forest_of(racing, &p);
    let writer = forest.writer(WriterConfig::default());
    let (writes, model) = writes(&p);
    let receipt = writer
        .submit_with_proofs(writes.iter().map(|(n, k, l)| (n.as_str(), *k, l.clone())))
        .await
        .expect("lands under the lock");
    let stats = writer.stats();
    writer.close().await;
    let lost = u64::from(EXCLUSIVE_AFTER);
    assert_eq!(
        race.counts(),
        (lost, 1, 1),
        "(raced, locked, locked commits)"
    );
    assert_eq!(stats.lost_races, lost);
    let top = receipt.root(&p).expect("the parent's root");
    let proofs = receipt.proofs.expect("proofs");
    for ((_, key, leaf), proof) in writes.iter().zip(&proofs) {
        assert!(
            proof.verify(key, leaf, &top),
            "nested proof at the new roots"
        );
    }
    check(&forest_of(store.forest().clone(), &p), &p, &model, lost).await;
}

async fn tree_write_takes_the_lock_with_proof<S>(store: S)
where
    S: Writable + AuditStore + 'static,
{
    let p = unique("locked_tree");
    let written = Arc::new(AtomicU64::new(0));
    let name = format!("{p}/c0");
    let tree = CompactedTree::new(
        racing(&store, &p, &name, &written)
            .tree(&name)
            .expect("tree"),
    );
    let seed: Vec<(Key, Leaf)> = (0..10)
        .map(|i| (hkey("seed", i), Leaf::new(vec![1], 1)))
        .collect();
    // The seed races too: it lands under the lock like the rest.
    tree.insert_many(seed).await.expect("seed");
    let batch: Vec<(Key, Leaf)> = (5..15)
        .map(|i| (hkey("seed", i), Leaf::new(vec![2], 3)))
        .collect();
    let done = tree
        .insert_many_with_proof(batch.clone())
        .await
        .expect("lands under the lock");
    let old = done.old_root;
    let proof = done.proof.expect("update proof");
    assert!(
        proof.verify(&old, &batch, &done.new_root),
        "the update proof"
    );
    let lost = u64::from(EXCLUSIVE_AFTER);
    let counts = tree.store().hook.counts();
    assert_eq!(counts, (2 * lost, 2, 2), "(raced, locked, locked commits)");
    assert_eq!(tree.root().await.expect("root"), done.new_root);
    let leaf = tree.get(&hkey("seed", 9)).await.expect("get");
    assert_eq!(leaf, Leaf::new(vec![2], 3));
    support::assert_audit_clean(&tree, &name).await;
}

support::suite::on_every_store!(forest_write_takes_the_lock => forest_write_takes_the_lock);
support::suite::on_every_store!(forest_writer_takes_the_lock => forest_writer_takes_the_lock);
support::suite::on_every_store!(
    tree_write_takes_the_lock_with_proof => tree_write_takes_the_lock_with_proof
);
