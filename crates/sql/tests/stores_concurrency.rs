//! Concurrency: 4 writers per namespace (two pools on SQLite and Postgres),
//! 2 namespaces in parallel; and read-phase races made deterministic (a
//! commit injected between two reads of a descent, memory store): the
//! operation must retry, not fail.
//!
//! Part of the store suite (`tests/stores_*.rs`, machinery in
//! `tests/support/suite.rs`): each scenario runs on memory, SQLite and
//! Postgres, and on the SQL stores `*_cold`, with every node read by SQL.
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ms_smt::store::{AuditStore, MemoryStore, StoreStats, Writable};
use ms_smt::{Compacted, Full, Key, Layout, LayoutKind, Leaf, Tree};
use support::hooked::{Hook, Hooked};
use support::model::{self, Model};
use support::recipes::flip;
use support::suite::*;
use support::{hkey, unique};

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

async fn writer<S: Writable + AuditStore, L: Layout>(
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
        model::apply(&mut model, &batch);
        for (k, l) in own.iter().zip(&got) {
            if *l != model::get(&model, k) {
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
            model::apply(&mut model, &batch);
            keys.extend(batch.iter().map(|(k, _)| *k));
        }
    }
    keys.sort_by_key(|k| k.0);
    keys.dedup();
    let root = tree.root().await.expect("root");
    let what = format!("{} {} {ns}", S::KIND, layout_name::<L>());
    assert_eq!(
        Some(root),
        model::root(&model),
        "{what}: final root != model root"
    );
    let mem = memory_tree::<L>(&model).await;
    assert_eq!(
        root,
        mem.root().await.expect("mem root"),
        "{what}: final root != memory root"
    );
    let want: Vec<Leaf> = keys.iter().map(|k| model::get(&model, k)).collect();
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
            fetches += probe.hook.fetches.load(Ordering::Relaxed);
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
/// `at`-th read call (any `read_*`, counted from 0;
/// `load_root` is not counted), the way a writer on another connection can
/// commit between two reads of a descent. Everything else is delegated.
type Interfere<L> = Hooked<MemoryStore, Interference<L>>;

/// The interfering writer of an [`Interfere`] store.
struct Interference<L: Layout> {
    reads: Arc<AtomicU64>,
    at: u64,
    other: Tree<MemoryStore, L>,
    batch: Arc<Mutex<Option<Batch>>>,
}

impl<L: Layout> Clone for Interference<L> {
    fn clone(&self) -> Self {
        Interference {
            reads: self.reads.clone(),
            at: self.at,
            other: self.other.clone(),
            batch: self.batch.clone(),
        }
    }
}

impl<L: Layout> Interference<L> {
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

impl<L: Layout> Hook for Interference<L> {
    async fn before_read(&self) {
        if self.reads.fetch_add(1, Ordering::Relaxed) == self.at {
            self.interfere().await;
        }
    }

    fn after_commit(&self, _stats: StoreStats, _committed: bool, _locked: bool) {}
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
    model::apply(&mut before, &seed);
    let mut after = before.clone();
    model::apply(&mut after, &other);
    let tree = Tree::new(Hooked {
        inner: store.clone(),
        hook: Interference {
            reads: Arc::default(),
            at,
            other: Tree::new(store),
            batch: Arc::new(Mutex::new(Some(other))),
        },
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
            model::apply(&mut r.before, &mine);
            model::apply(&mut r.after, &mine);
            let what = format!(
                "{} insert_many of {n} key(s), race before read {at}",
                layout_name::<L>()
            );
            match r.tree.insert_many(mine).await {
                Err(e) => errors.push(format!("{what}: failed instead of retrying: {e}")),
                Ok(root) => {
                    // Linearizable: the write went in after the interfering
                    // one (it ran during the write), or before it (it runs now).
                    let ran_now = r.tree.store().hook.interfere().await;
                    let want = if ran_now { &r.before } else { &r.after };
                    if Some(root) != model::root(want) {
                        errors.push(format!("{what}: returned a wrong root"));
                    }
                    if Some(r.tree.root().await.expect("root")) != model::root(&r.after) {
                        errors.push(format!("{what}: a write was lost"));
                    }
                }
            }
        }
    }
    errors
}

/// Reads of one and of two left keys, each racing the interfering write
/// before read call 0, 1 and 2: `$read` (given the race `$r` and the
/// `$keys`) must not fail, and `$check` (given its result `$got`) says what
/// is wrong with the result, if anything.
macro_rules! read_races {
    ($L:ty, $op:literal, |$r:ident, $keys:ident| $read:expr, |$got:ident| $check:expr) => {{
        let mut errors = Vec::new();
        for at in 0..RACE_POINTS {
            for n in [1u64, 2] {
                let $r = race::<$L>(at).await;
                let $keys: Vec<Key> = (0..n).map(|i| side_key("race-l", i, false)).collect();
                let what = format!(
                    "{} {} of {n} key(s), race before read {at}",
                    layout_name::<$L>(),
                    $op
                );
                match $read {
                    Err(e) => errors.push(format!("{what}: failed instead of retrying: {e}")),
                    Ok($got) => {
                        let wrong: Option<String> = $check;
                        if let Some(wrong) = wrong {
                            errors.push(format!("{what}: {wrong}"));
                        }
                    }
                }
            }
        }
        errors
    }};
}

/// Proofs of one and of two left keys racing the interfering write.
async fn read_race_proofs<L: Layout>() -> Vec<String> {
    read_races!(
        L,
        "merkle_proofs",
        |r, keys| r.tree.merkle_proofs(&keys).await,
        |proofs| {
            // The proofs must show one state: before or after the
            // interfering write.
            let shows = |model: &Model| {
                let root = model::root(model).expect("model root");
                keys.iter()
                    .zip(&proofs)
                    .all(|(k, p)| p.verify(k, &model::get(model, k), &root))
            };
            (!shows(&r.before) && !shows(&r.after)).then(|| "proofs match neither state".to_owned())
        }
    )
}

/// Gets of one and of two left keys racing the interfering write (which
/// does not change them).
async fn read_race_gets<L: Layout>() -> Vec<String> {
    read_races!(
        L,
        "get_many",
        |r, keys| r.tree.get_many(&keys).await,
        |got| {
            let want: Vec<Leaf> = keys.iter().map(|k| model::get(&r.after, k)).collect();
            (got != want).then(|| format!("read {got:?}, want {want:?}"))
        }
    )
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

// ---------------------------------------------------------------------------
// 9. Many small writers on the memory store: no Contention
// ---------------------------------------------------------------------------

/// 100 tasks write one new leaf at a time into one in-memory tree: every
/// write succeeds (a write that keeps losing optimistic races takes the
/// store's write lock), and every leaf is there at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_small_writers_never_contend() {
    const TASKS: u64 = 100;
    const EACH: u64 = 20;
    let tree: Tree<MemoryStore, Compacted> = Tree::new(MemoryStore::new());
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let tree = tree.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..EACH {
                let key = hkey("small-writers", t * EACH + i);
                tree.insert_many([(key, leaf("w", 1))]).await?;
            }
            Ok::<(), ms_smt::TreeError<ms_smt::store::MemoryError>>(())
        }));
    }
    for h in handles {
        h.await
            .expect("task")
            .expect("no write may fail under contention");
    }
    let root = tree.root().await.expect("root");
    assert_eq!(root.sum, TASKS * EACH, "every leaf counted once");
    let keys: Vec<Key> = (0..TASKS * EACH)
        .map(|i| hkey("small-writers", i))
        .collect();
    let leaves = tree.get_many(&keys).await.expect("get_many");
    assert!(leaves.iter().all(|l| !l.is_empty()), "a leaf is missing");
    assert!(tree.audit().await.expect("audit").is_clean());
}
