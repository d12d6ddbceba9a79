//! Universe-server capabilities on every store and both layouts, against
//! the abstract model (`support::model`):
//!
//! * `reads`: iteration == the model in tree order (pages, ranges, cursor
//!   resumption, writes between pages), subtree sums and hashes == the
//!   model's, `children` pairs check against their parents, multi-key and
//!   update proofs verify;
//! * `cursors`: after any mix of `next` and `next_page` calls and page
//!   sizes, resuming from `Leaves::cursor` yields exactly the entries not
//!   yet handed out (no gap, no duplicate);
//! * `diff`: diff == the model difference (two namespaces, one full and
//!   one compacted; a pin against the current tree);
//! * `pins`: pinned roots read as they were while writers move on; unpin
//!   frees what only the pin kept (SQL history rows back to 0, memory node
//!   count back to the current tree's);
//! * `copies`: copy_filter == rebuilding the kept leaves (set-based in one
//!   database, streamed into another store), copy merges into a non-empty
//!   target;
//! * `export`: import(export(t)) == t in any chunk order, resumed after an
//!   interruption; encodings decode strictly;
//! * `big_import`: 25,000 leaves in 128 chunks, a tampered chunk refused
//!   with nothing visible;
//! * `sync`: two 10,000-leaf trees differing in d = 1, 10, 100 leaves sync
//!   in O(d · depth) subtree fetches (printed) and end bit-identical; a
//!   lying peer is caught.
//!
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::convert::Infallible;
use std::future::Future;
use std::ops::Bound;
use std::time::Instant;

use ms_smt::store::{AuditStore, BulkStore, MemoryStore, PinStore, Writable};

use ms_smt::{Chunk, ImportError, SyncError, SyncPeer, Trunk};
use ms_smt::{
    Compacted, ComputedNode, Full, Key, Layout, LayoutKind, Leaf, MultiProof, Position, Subtree,
    Tree,
};
use ms_smt_sql::{PostgresStore, SqliteStore};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use support::model::{self, Model, TreeKey};
use support::stores::{SqliteDb, pg_store};
use support::suite::{TestStore, count_rows};
use support::{fail, hkey, proptest_config, run_cases, runtime, unique};

// ---------------------------------------------------------------------------
// Stores
// ---------------------------------------------------------------------------

/// What the scenarios need of a store beyond the store suite's
/// [`TestStore`] (its `KIND` and `handle`).
trait UStore: TestStore + PinStore + BulkStore {
    /// What pins keep beside the current trees: history rows of the
    /// namespace (SQL), or stored nodes (memory).
    fn kept(&self) -> impl Future<Output = usize> + Send;
}

impl UStore for MemoryStore {
    async fn kept(&self) -> usize {
        self.node_count().expect("node count")
    }
}

impl UStore for SqliteStore {
    async fn kept(&self) -> usize {
        count_rows!(
            self,
            "SELECT COUNT(*) FROM ms_smt_history h JOIN ms_smt_namespaces n ON n.id = h.ns \
             WHERE n.name = ?",
            "count history"
        )
    }
}

impl UStore for PostgresStore {
    async fn kept(&self) -> usize {
        count_rows!(
            self,
            "SELECT COUNT(*) FROM ms_smt_history h JOIN ms_smt_namespaces n ON n.id = h.ns \
             WHERE n.name = $1",
            "count history"
        )
    }
}

/// Runs `$scenario(store)` (an async fn over [`UStore`]) on memory,
/// SQLite, Postgres, and the SQL stores without remembered nodes.
macro_rules! on_every_store {
    ($name:ident => $scenario:ident) => {
        mod $name {
            use super::*;

            fn run<S: UStore>(rt: &tokio::runtime::Runtime, store: S) {
                let t = Instant::now();
                rt.block_on($scenario(store));
                eprintln!("{}::{} took {:?}", stringify!($name), S::KIND, t.elapsed());
            }

            #[test]
            fn memory() {
                run(&runtime(), MemoryStore::new());
            }

            #[test]
            fn sqlite() {
                let rt = runtime();
                let db = rt.block_on(SqliteDb::open(stringify!($name)));
                run(&rt, db.store.clone());
                rt.block_on(db.store.pool().close());
            }

            #[test]
            fn sqlite_cold() {
                let rt = runtime();
                let db = rt.block_on(SqliteDb::open(concat!(stringify!($name), "-cold")));
                run(&rt, db.store.clone().with_recent_nodes(0));
                rt.block_on(db.store.pool().close());
            }

            #[test]
            fn postgres() {
                let rt = runtime();
                let Some(store) = rt.block_on(pg_store(concat!(stringify!($name), "::postgres")))
                else {
                    return;
                };
                run(&rt, store.clone());
                rt.block_on(store.pool().close());
            }

            #[test]
            fn postgres_cold() {
                let rt = runtime();
                let Some(store) =
                    rt.block_on(pg_store(concat!(stringify!($name), "::postgres_cold")))
                else {
                    return;
                };
                run(&rt, store.clone().with_recent_nodes(0));
                rt.block_on(store.pool().close());
            }
        }
    };
}

// ---------------------------------------------------------------------------
// Random trees
// ---------------------------------------------------------------------------

/// A key recipe: a random key, or a near key (a base key with a few bits
/// flipped, so paths share long prefixes and split deep, bit 255
/// included).
#[derive(Debug, Clone)]
enum KeyR {
    Random(u64),
    Near(Vec<usize>),
}

fn key_r() -> impl Strategy<Value = KeyR> {
    prop_oneof![
        2 => any::<u64>().prop_map(KeyR::Random),
        1 => vec(prop_oneof![0usize..12, 240usize..256, 0usize..256], 1..3).prop_map(KeyR::Near),
    ]
}

fn key_of(tag: &str, r: &KeyR) -> Key {
    match r {
        KeyR::Random(i) => hkey(tag, *i),
        KeyR::Near(bits) => {
            let mut k = hkey(tag, u64::MAX);
            for &b in bits {
                k.0[b / 8] ^= 1 << (b % 8);
            }
            k
        }
    }
}

/// A batch recipe: (key, value byte, sum; sum 0 with value 0 deletes).
type BatchR = Vec<(KeyR, u8, u64)>;

fn batch_r(max: usize) -> impl Strategy<Value = BatchR> {
    vec(
        (
            key_r(),
            any::<u8>(),
            prop_oneof![4 => 1u64..1000, 1 => Just(0u64), 1 => (1u64 << 62)..(1u64 << 62) + 5],
        ),
        1..max,
    )
}

fn batch_of(tag: &str, r: &BatchR) -> Vec<(Key, Leaf)> {
    r.iter()
        .map(|(k, v, s)| {
            let leaf = if *s == 0 && *v % 4 == 0 {
                Leaf::empty()
            } else {
                Leaf::new(vec![*v; 1 + (*v as usize % 5)], *s)
            };
            (key_of(tag, k), leaf)
        })
        .collect()
}

/// Applies `batch` to the tree and the model, skipping a batch whose sums
/// overflow (the tree refuses it too).
async fn write<S: Writable + AuditStore, L: Layout>(
    tree: &Tree<S, L>,
    model: &mut Model,
    batch: &[(Key, Leaf)],
) {
    match tree.insert_many(batch.to_vec()).await {
        Ok(_) => model::apply(model, batch),
        Err(e) if e.is_overflow() => {}
        Err(e) => panic!("insert_many: {e}"),
    }
}

fn config(cases: u32) -> Config {
    proptest_config(cases, 64)
}

/// Proptest cases per store: fewer on the SQL stores, whose tree builds
/// cost milliseconds each.
fn cases<S: UStore>(memory: u32) -> u32 {
    if S::KIND == "memory" {
        memory
    } else {
        (memory / 4).max(8)
    }
}

/// Runs a property over `strategy` on `store`, blocking on each case.
async fn check<S, T, F, Fut>(store: &S, what: &str, cases: u32, strategy: T, f: F)
where
    S: UStore,
    T: Strategy,
    F: Fn(S, T::Value) -> Fut,
    Fut: Future<Output = Result<(), TestCaseError>>,
{
    // The runner is synchronous: each case runs on this thread's runtime
    // handle via block_in_place.
    let handle = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        run_cases(what, S::KIND, config(cases), &strategy, |value| {
            handle.block_on(f(store.clone(), value))
        })
    });
}

/// [`check`] of a property on both layouts of a tree: `compacted`, then
/// `full`, on each case.
async fn check_layouts<S, T, C, F, CFut, FFut>(
    store: &S,
    what: &str,
    cases: u32,
    strategy: T,
    compacted: C,
    full: F,
) where
    S: UStore,
    T: Strategy,
    T::Value: Clone,
    C: Fn(S, T::Value) -> CFut,
    F: Fn(S, T::Value) -> FFut,
    CFut: Future<Output = Result<(), TestCaseError>>,
    FFut: Future<Output = Result<(), TestCaseError>>,
{
    let (compacted, full) = (&compacted, &full);
    check(store, what, cases, strategy, |s, v| async move {
        compacted(s.clone(), v.clone()).await?;
        full(s, v).await
    })
    .await;
}

fn layout_name<L: Layout>() -> &'static str {
    match L::KIND {
        LayoutKind::Full => "full",
        LayoutKind::Compacted => "compacted",
    }
}

/// A tree in a fresh namespace of `store` built from `batches`.
async fn build<S: UStore, L: Layout>(
    store: &S,
    tag: &str,
    batches: &[BatchR],
) -> (Tree<S, L>, Model) {
    let tree = Tree::<S, L>::new(store.handle(&unique(tag)));
    let mut m = Model::new();
    for b in batches {
        write(&tree, &mut m, &batch_of(tag, b)).await;
    }
    (tree, m)
}

// ---------------------------------------------------------------------------
// reads: iteration, subtrees, children, multi-key and update proofs
// ---------------------------------------------------------------------------

fn entries_of(m: &Model) -> Vec<(Key, Leaf)> {
    model::pairs(m)
}

/// A `reads` case: batches, page size, range bounds, prefixes (key,
/// level), and a batch written between pages.
type ReadsCase = (Vec<BatchR>, usize, (KeyR, KeyR), Vec<(KeyR, usize)>, BatchR);

async fn reads_layout<S: UStore, L: Layout>(
    store: S,
    (batches, page, bounds, prefixes, extra): ReadsCase,
) -> Result<(), TestCaseError> {
    let tag = "reads";
    let (tree, m) = build::<S, L>(&store, tag, &batches).await;
    let lay = layout_name::<L>();
    // Every leaf, in tree order, with its hash and sum.
    let all = tree
        .leaves(..)
        .with_page(page)
        .collect_all()
        .await
        .map_err(fail)?;
    let got: Vec<(Key, Leaf)> = all.iter().map(|e| (e.key, e.leaf.clone())).collect();
    prop_assert_eq!(&got, &entries_of(&m), "{} {}: leaves(..)", S::KIND, lay);
    for e in &all {
        prop_assert_eq!(e.node, ComputedNode::new(e.leaf.hash(), e.leaf.sum()));
    }
    // A range, and resuming from every cursor.
    let (a, b) = (key_of(tag, &bounds.0), key_of(tag, &bounds.1));
    let (lo, hi) = if a.tree_cmp(&b).is_le() {
        (a, b)
    } else {
        (b, a)
    };
    let want: Vec<(Key, Leaf)> = m
        .range(TreeKey(lo)..TreeKey(hi))
        .map(|(k, l)| (k.0, l.clone()))
        .collect();
    let ranged = tree
        .leaves(lo..hi)
        .with_page(page)
        .collect_all()
        .await
        .map_err(fail)?;
    let ranged: Vec<(Key, Leaf)> = ranged.into_iter().map(|e| (e.key, e.leaf)).collect();
    prop_assert_eq!(&ranged, &want, "{} {}: leaves(lo..hi)", S::KIND, lay);
    let mut it = tree.leaves(..).with_page(page);
    let first = it.next_page().await.map_err(fail)?;
    if let Some(cursor) = it.cursor() {
        let rest = tree
            .leaves((Bound::Excluded(cursor), Bound::Unbounded))
            .collect_all()
            .await
            .map_err(fail)?;
        prop_assert_eq!(
            first.len() + rest.len(),
            m.len(),
            "{} {}: resumed",
            S::KIND,
            lay
        );
        prop_assert!(rest.iter().all(|e| e.key.tree_cmp(&cursor).is_gt()));
    }
    // Writes between pages: keys that stay throughout come exactly once,
    // in order, and no key comes twice.
    let extra = batch_of("reads-extra", &extra);
    let mut it = tree.leaves(..).with_page(page.max(2));
    let mut seen: Vec<Key> = Vec::new();
    let mut m2 = m.clone();
    let mut wrote = false;
    loop {
        let page = it.next_page().await.map_err(fail)?;
        if page.is_empty() {
            break;
        }
        seen.extend(page.iter().map(|e| e.key));
        if !wrote {
            write(&tree, &mut m2, &extra).await;
            wrote = true;
        }
    }
    prop_assert!(
        seen.windows(2).all(|w| w[0].tree_cmp(&w[1]).is_lt()),
        "pages out of order"
    );
    for k in m.keys().filter(|k| m2.contains_key(k)) {
        prop_assert!(
            seen.contains(&k.0),
            "{} {}: a stable key was skipped",
            S::KIND,
            lay
        );
    }
    // Subtrees and children, at prefixes of model keys and random keys.
    let root = tree.root().await.map_err(fail)?;
    let positions: Vec<Position> = prefixes
        .iter()
        .map(|(k, level)| Position::new(*level, &key_of(tag, k)))
        .collect();
    let subs = tree.view().subtrees(&positions).await.map_err(fail)?;
    for (pos, sub) in positions.iter().zip(&subs) {
        let under = model::under(&m2, pos);
        let want = model::subtree(pos.level(), &under).expect("model sums fit");
        prop_assert_eq!(
            sub.computed(pos.level()),
            want,
            "{} {}: subtree {:?}",
            S::KIND,
            lay,
            pos
        );
        prop_assert_eq!(sub.sum(), want.sum);
        if under.len() == 1 && (L::KIND == LayoutKind::Compacted || pos.level() == 256) {
            prop_assert_eq!(
                sub,
                &Subtree::Leaf {
                    key: under[0].0,
                    leaf: under[0].1.clone()
                },
                "single leaf"
            );
        }
    }
    let (inner, inner_subs): (Vec<Position>, Vec<Subtree>) = positions
        .iter()
        .zip(&subs)
        .filter(|(p, _)| p.level() < 256)
        .map(|(p, s)| (*p, s.clone()))
        .unzip();
    let pairs = tree.view().children(&root, &inner).await.map_err(fail)?;
    for ((pos, pair), sub) in inner.iter().zip(&pairs).zip(&inner_subs) {
        prop_assert!(
            Subtree::check_children(pos, &sub.computed(pos.level()), pair),
            "{} {}: children of {:?}",
            S::KIND,
            lay,
            pos
        );
    }
    // Multi-key proofs (present and absent keys) and an update proof.
    let mut keys: Vec<Key> = m2.keys().map(|k| k.0).take(20).collect();
    keys.push(hkey("absent", 1));
    let (proot, proof, leaves) = tree.view().multi_proof(&keys).await.map_err(fail)?;
    prop_assert_eq!(proot, root);
    prop_assert!(
        proof.verify(&leaves, &root),
        "{} {}: multi-key proof",
        S::KIND,
        lay
    );
    let decoded = MultiProof::decode(&proof.encode()).map_err(fail)?;
    prop_assert!(decoded.verify(&leaves, &root));
    let batch: Vec<(Key, Leaf)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            (
                *k,
                if i % 3 == 0 {
                    Leaf::empty()
                } else {
                    Leaf::new(vec![7], 3)
                },
            )
        })
        .collect();
    let written = tree
        .insert_many_with_proof(batch.clone())
        .await
        .map_err(fail)?;
    let up = written.proof.expect("proof");
    prop_assert_eq!(written.old_root, root);
    prop_assert_eq!(up.new_root(&root, &batch).map_err(fail)?, written.new_root);
    prop_assert_eq!(tree.root().await.map_err(fail)?, written.new_root);
    prop_assert!(tree.audit().await.map_err(fail)?.is_clean(), "audit");
    tree.delete_all().await.map_err(fail)?;
    Ok(())
}

async fn reads<S: UStore>(store: S) {
    let strategy = (
        vec(batch_r(24), 1..4),
        1usize..9,
        (key_r(), key_r()),
        vec((key_r(), prop_oneof![0usize..10, 250usize..257]), 1..8),
        batch_r(8),
    );
    let (compacted, full) = (reads_layout::<S, Compacted>, reads_layout::<S, Full>);
    check_layouts(&store, "reads", cases::<S>(48), strategy, compacted, full).await;
}

on_every_store!(reads_on => reads);

// ---------------------------------------------------------------------------
// cursors: resuming from `Leaves::cursor` after any mix of `next` and
// `next_page` hands out exactly the entries not yet handed out
// ---------------------------------------------------------------------------

/// One read before a checkpoint: `Some(n)` takes `n` entries with `next`,
/// `None` takes one page with `next_page`.
type Step = Option<usize>;

async fn cursors_layout<S: UStore, L: Layout>(
    store: S,
    (batches, runs): (Vec<BatchR>, Vec<(usize, Vec<Step>)>),
) -> Result<(), TestCaseError> {
    let (tree, m) = build::<S, L>(&store, "cursors", &batches).await;
    let lay = layout_name::<L>();
    let want = entries_of(&m);
    // Each run reads with its own page size and steps, checkpoints the
    // cursor, and the next run resumes after it; the last run drains.
    let mut got: Vec<(Key, Leaf)> = Vec::new();
    let mut cursor: Option<Key> = None;
    for (i, (page, steps)) in runs.iter().enumerate() {
        let start = cursor.map_or(Bound::Unbounded, Bound::Excluded);
        let mut it = tree.leaves((start, Bound::Unbounded)).with_page(*page);
        prop_assert_eq!(it.cursor(), None, "cursor before the first entry");
        let last_run = i + 1 == runs.len();
        let run_start = got.len();
        for step in steps {
            match step {
                Some(n) => {
                    for _ in 0..*n {
                        match it.next().await.map_err(fail)? {
                            Some(e) => got.push((e.key, e.leaf)),
                            None => break,
                        }
                    }
                }
                None => {
                    let page = it.next_page().await.map_err(fail)?;
                    got.extend(page.into_iter().map(|e| (e.key, e.leaf)));
                }
            }
            // The cursor is the key of the last entry this reader handed
            // out, `None` while it has handed out none.
            let handed = got[run_start..].last().map(|(k, _)| *k);
            prop_assert_eq!(it.cursor(), handed, "{} {}: cursor", S::KIND, lay);
        }
        if last_run {
            let rest = it.collect_all().await.map_err(fail)?;
            got.extend(rest.into_iter().map(|e| (e.key, e.leaf)));
        } else if let Some(c) = it.cursor() {
            cursor = Some(c);
        }
    }
    prop_assert_eq!(
        &got,
        &want,
        "{} {}: entries before and after resuming",
        S::KIND,
        lay
    );
    tree.delete_all().await.map_err(fail)?;
    Ok(())
}

async fn cursors<S: UStore>(store: S) {
    let step = prop_oneof![2 => (0usize..12).prop_map(Some), 1 => Just(None)];
    let strategy = (
        vec(batch_r(30), 1..3),
        vec((1usize..9, vec(step, 0..5)), 1..5),
    );
    let (compacted, full) = (cursors_layout::<S, Compacted>, cursors_layout::<S, Full>);
    check_layouts(&store, "cursors", cases::<S>(48), strategy, compacted, full).await;
}

on_every_store!(cursors_on => cursors);

// ---------------------------------------------------------------------------
// diff
// ---------------------------------------------------------------------------

async fn diff_case<S: UStore>(
    s: S,
    (base, changes, page): (Vec<BatchR>, Vec<BatchR>, usize),
) -> Result<(), TestCaseError> {
    // Old: compacted; new: full, built from the same batches plus changes.
    let (old, m_old) = build::<S, Compacted>(&s, "diff", &base).await;
    let mut all = base.clone();
    all.extend(changes.iter().cloned());
    let (new, m_new) = build::<S, Full>(&s, "diff", &all).await;
    let want = model::difference(&m_old, &m_new);
    let got = old
        .view()
        .diff(&new.view())
        .with_page(page)
        .collect_all()
        .await
        .map_err(fail)?;
    let got: Vec<(Key, Leaf, Leaf)> = got.into_iter().map(|d| (d.key, d.old, d.new)).collect();
    prop_assert_eq!(&got, &want, "{}: diff of two namespaces", S::KIND);
    // Reversed.
    let back = new
        .view()
        .diff(&old.view())
        .collect_all()
        .await
        .map_err(fail)?;
    prop_assert_eq!(back.len(), want.len());
    // A pin against the current tree of one namespace.
    old.pin("before").await.map_err(fail)?;
    let mut m = m_old.clone();
    for b in &changes {
        write(&old, &mut m, &batch_of("diff", b)).await;
    }
    let pinned = old.at_pin("before").await.map_err(fail)?;
    let got = pinned.diff(&old.view()).collect_all().await.map_err(fail)?;
    let got: Vec<(Key, Leaf, Leaf)> = got.into_iter().map(|d| (d.key, d.old, d.new)).collect();
    prop_assert_eq!(
        got,
        model::difference(&m_old, &m),
        "{}: pin vs current",
        S::KIND
    );
    old.unpin("before").await.map_err(fail)?;
    old.delete_all().await.map_err(fail)?;
    new.delete_all().await.map_err(fail)?;
    Ok(())
}

async fn diff<S: UStore>(store: S) {
    let strategy = (vec(batch_r(24), 1..3), vec(batch_r(12), 0..3), 1usize..6);
    check(&store, "diff", cases::<S>(48), strategy, diff_case).await;
}

on_every_store!(diff_on => diff);

// ---------------------------------------------------------------------------
// pins
// ---------------------------------------------------------------------------

/// Every read of `view` equals `m`.
async fn view_is<S: UStore, L: Layout>(
    view: &ms_smt::View<'_, S, L>,
    m: &Model,
    probes: &[Key],
    what: &str,
) -> Result<(), TestCaseError> {
    let root = model::root(m).expect("model root");
    prop_assert_eq!(view.root().await.map_err(fail)?, root, "{}: root", what);
    let got = view.get_many(probes).await.map_err(fail)?;
    for (k, l) in probes.iter().zip(&got) {
        prop_assert_eq!(l, &model::get(m, k), "{}: get", what);
    }
    let proofs = view.merkle_proofs(probes).await.map_err(fail)?;
    for (k, p) in probes.iter().zip(&proofs) {
        prop_assert!(p.verify(k, &model::get(m, k), &root), "{}: proof", what);
    }
    let leaves = view.leaves(..).collect_all().await.map_err(fail)?;
    let leaves: Vec<(Key, Leaf)> = leaves.into_iter().map(|e| (e.key, e.leaf)).collect();
    prop_assert_eq!(leaves, model::pairs(m), "{}: leaves", what);
    let (proot, proof, found) = view.multi_proof(probes).await.map_err(fail)?;
    prop_assert_eq!(proot, root);
    prop_assert!(proof.verify(&found, &root), "{}: multi-key proof", what);
    Ok(())
}

/// [`view_is`] of the view at pin `pin`.
async fn pin_is<S: UStore, L: Layout>(
    tree: &Tree<S, L>,
    pin: &str,
    m: &Model,
    probes: &[Key],
    what: &str,
) -> Result<(), TestCaseError> {
    view_is(&tree.at_pin(pin).await.map_err(fail)?, m, probes, what).await
}

async fn pins_layout<S: UStore, L: Layout>(
    store: S,
    (first, second, third): (Vec<BatchR>, Vec<BatchR>, Vec<BatchR>),
) -> Result<(), TestCaseError> {
    let tag = "pins";
    let lay = layout_name::<L>();
    let (tree, mut m) = build::<S, L>(&store, tag, &first).await;
    let kept_bare = tree.store().kept().await;
    let m0 = m.clone();
    let p0 = tree.pin("p0").await.map_err(fail)?;
    prop_assert_eq!(p0.root, model::root(&m0).expect("root"));
    for b in &second {
        write(&tree, &mut m, &batch_of(tag, b)).await;
    }
    let m1 = m.clone();
    tree.pin("p1").await.map_err(fail)?;
    for b in &third {
        write(&tree, &mut m, &batch_of(tag, b)).await;
    }
    // A third write that deletes everything the pins hold, too.
    let wipe: Vec<(Key, Leaf)> = m0.keys().map(|k| (k.0, Leaf::empty())).collect();
    write(&tree, &mut m, &wipe).await;
    let probes: Vec<Key> = m0.keys().chain(m1.keys()).map(|k| k.0).take(30).collect();
    let what = format!("{} {lay}", S::KIND);
    pin_is(&tree, "p0", &m0, &probes, &format!("{what} p0")).await?;
    pin_is(&tree, "p1", &m1, &probes, &format!("{what} p1")).await?;
    view_is(&tree.view(), &m, &probes, &format!("{what} current")).await?;
    let pins = tree.pins().await.map_err(fail)?;
    prop_assert_eq!(
        pins.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["p0", "p1"]
    );
    // Unpinning p0 leaves p1 whole; unpinning p1 frees everything kept.
    prop_assert!(tree.unpin("p0").await.map_err(fail)?);
    prop_assert!(!tree.unpin("p0").await.map_err(fail)?);
    pin_is(&tree, "p1", &m1, &probes, &format!("{what} p1 after")).await?;
    view_is(&tree.view(), &m, &probes, &format!("{what} current after")).await?;
    prop_assert!(tree.unpin("p1").await.map_err(fail)?);
    prop_assert!(tree.at_pin("p1").await.is_err(), "p1 is gone");
    view_is(&tree.view(), &m, &probes, &format!("{what} unpinned")).await?;
    prop_assert!(
        tree.audit().await.map_err(fail)?.is_clean(),
        "{}: audit",
        what
    );
    let kept = tree.store().kept().await;
    if S::KIND == "memory" {
        // The memory store keeps nodes: after unpinning, exactly those of
        // a fresh tree with the same leaves.
        let fresh = Tree::<MemoryStore, L>::new(MemoryStore::new());
        fresh.insert_many(model::pairs(&m)).await.map_err(fail)?;
        prop_assert_eq!(
            kept,
            fresh.store().node_count().map_err(fail)?,
            "{}: nodes kept",
            what
        );
        let _ = kept_bare;
    } else {
        prop_assert_eq!(kept, 0, "{}: history rows left after unpinning", what);
    }
    // delete_all with a pin keeps the pinned tree readable.
    tree.pin("last").await.map_err(fail)?;
    tree.delete_all().await.map_err(fail)?;
    pin_is(
        &tree,
        "last",
        &m,
        &probes,
        &format!("{what} after delete_all"),
    )
    .await?;
    tree.unpin("last").await.map_err(fail)?;
    prop_assert_eq!(
        tree.store().kept().await,
        0,
        "{}: kept after the last unpin",
        what
    );
    Ok(())
}

async fn pins<S: UStore>(store: S) {
    let strategy = (
        vec(batch_r(20), 1..3),
        vec(batch_r(12), 1..3),
        vec(batch_r(12), 0..3),
    );
    let (compacted, full) = (pins_layout::<S, Compacted>, pins_layout::<S, Full>);
    check_layouts(&store, "pins", cases::<S>(32), strategy, compacted, full).await;
}

on_every_store!(pins_on => pins);

// ---------------------------------------------------------------------------
// copies
// ---------------------------------------------------------------------------

/// The leaves of `src`'s current tree that `keep` keeps, copied into
/// `target` with `copy_filter_to`.
async fn copy_kept<S: UStore, T: Writable + AuditStore + 'static, L2: Layout>(
    src: &Tree<S, Compacted>,
    target: &Tree<T, L2>,
    keep: impl Fn(&Key) -> bool,
) -> Result<ms_smt::CopyReport, TestCaseError> {
    src.view()
        .copy_filter_to(target, |k, _| Ok::<_, Infallible>(keep(k)))
        .await
        .map_err(fail)
}

async fn copies_case<S: UStore>(
    s: S,
    (batches, rule, other): (Vec<BatchR>, u8, Vec<BatchR>),
) -> Result<(), TestCaseError> {
    let (src, m) = build::<S, Compacted>(&s, "copies", &batches).await;
    // Keep keys by their first byte: all, about 3/4, 1/2, 1/4.
    let keep = move |k: &Key| match rule {
        0 => true,
        1 => !k.0[0].is_multiple_of(4),
        2 => k.0[0].is_multiple_of(2),
        _ => k.0[0].is_multiple_of(4),
    };
    let kept: Model = m
        .iter()
        .filter(|(k, _)| keep(&k.0))
        .map(|(k, l)| (*k, l.clone()))
        .collect();
    let want = model::root(&kept).expect("root");
    // Into an empty namespace of the same database (a full tree).
    let same = Tree::<S, Full>::new(s.handle(&unique("copy-target")));
    let report = copy_kept(&src, &same, keep).await?;
    prop_assert_eq!(report.root, want, "{}: copy_filter root", S::KIND);
    prop_assert_eq!(same.root().await.map_err(fail)?, want);
    let removed = (m.len() - kept.len()) as u64;
    prop_assert_eq!(report.rejected, removed);
    // Another layout: streamed.
    prop_assert!(!report.set_based, "{}: set-based across layouts", S::KIND);
    prop_assert!(
        same.audit().await.map_err(fail)?.is_clean(),
        "audit of the copy"
    );
    // The same layout in the same database: set-based when at most
    // half the leaves go.
    let same_layout = Tree::<S, Compacted>::new(s.handle(&unique("copy-same")));
    let report = copy_kept(&src, &same_layout, keep).await?;
    prop_assert_eq!(report.root, want);
    prop_assert_eq!(
        report.set_based,
        removed <= kept.len() as u64,
        "{}: set-based",
        S::KIND
    );
    prop_assert!(
        same_layout.audit().await.map_err(fail)?.is_clean(),
        "audit of the copy"
    );
    same_layout.delete_all().await.map_err(fail)?;
    // Into another store: streamed.
    let mem = Tree::<MemoryStore, Compacted>::new(MemoryStore::new());
    let report = copy_kept(&src, &mem, keep).await?;
    prop_assert_eq!(report.root, want);
    // Memory stores copy node by node between any two of them.
    prop_assert_eq!(
        report.set_based,
        S::KIND == "memory" && removed <= kept.len() as u64
    );
    // A plain copy of a pin into an empty namespace is one statement.
    src.pin("snap").await.map_err(fail)?;
    let plain = Tree::<S, Compacted>::new(s.handle(&unique("copy-plain")));
    write(&src, &mut m.clone(), &batch_of("copies-more", &batches[0])).await;
    let report = src
        .at_pin("snap")
        .await
        .map_err(fail)?
        .copy_to(&plain)
        .await
        .map_err(fail)?;
    prop_assert!(report.set_based);
    prop_assert_eq!(
        report.root,
        model::root(&m).expect("root"),
        "{}: copy of a pin",
        S::KIND
    );
    let leaves = plain.leaves(..).collect_all().await.map_err(fail)?;
    prop_assert_eq!(leaves.len(), m.len());
    // Copy merges into a non-empty target (the reference's semantics).
    let (target, mut mt) = build::<S, Compacted>(&s, "copy-merge", &other).await;
    let merged = src
        .at_pin("snap")
        .await
        .map_err(fail)?
        .copy_to(&target)
        .await;
    for (k, l) in &m {
        mt.insert(*k, l.clone());
    }
    match (merged, model::root(&mt)) {
        (Ok(report), Some(want)) => {
            prop_assert_eq!(report.root, want, "{}: merge", S::KIND)
        }
        (Err(ms_smt::CopyError::Target(e)), None) if e.is_overflow() => {}
        (got, want) => {
            prop_assert!(false, "{}: merge gave {:?}, model {:?}", S::KIND, got, want)
        }
    }
    src.unpin("snap").await.map_err(fail)?;
    for t in [src.store(), plain.store(), target.store()] {
        Tree::<S, Compacted>::new(t.clone())
            .delete_all()
            .await
            .map_err(fail)?;
    }
    same.delete_all().await.map_err(fail)?;
    Ok(())
}

async fn copies<S: UStore>(store: S) {
    let strategy = (vec(batch_r(24), 1..3), 0u8..4, vec(batch_r(8), 0..2));
    check(&store, "copies", cases::<S>(40), strategy, copies_case).await;
}

on_every_store!(copies_on => copies);

// ---------------------------------------------------------------------------
// export and import
// ---------------------------------------------------------------------------

async fn export_layout<S: UStore, L: Layout>(
    store: S,
    (batches, level, order): (Vec<BatchR>, usize, Vec<usize>),
) -> Result<(), TestCaseError> {
    let (src, m) = build::<S, L>(&store, "export", &batches).await;
    let pin = src.pin("export").await.map_err(fail)?;
    let view = src.at(&pin);
    let trunk = view.export_trunk(level).await.map_err(fail)?;
    prop_assert_eq!(trunk.root, pin.root);
    let trunk = Trunk::decode(&trunk.encode()).map_err(fail)?;
    let mut chunks = Vec::new();
    for (pos, _) in &trunk.chunks {
        let chunk = view.export_chunk(*pos).await.map_err(fail)?;
        let chunk = Chunk::decode(&chunk.encode()).map_err(fail)?;
        chunk.check(&trunk).map_err(fail)?;
        chunks.push(chunk);
    }
    prop_assert_eq!(
        chunks.iter().map(|c| c.leaves.len()).sum::<usize>(),
        m.len()
    );
    // Import in a shuffled order, interrupted half way and resumed.
    let target = Tree::<S, L>::new(store.handle(&unique("import")));
    let mut idx: Vec<usize> = (0..chunks.len()).collect();
    let len = idx.len();
    for (i, o) in order.iter().enumerate() {
        if len > 0 {
            idx.swap(i % len, o % len);
        }
    }
    {
        let mut import = target.import(trunk.clone()).await.map_err(fail)?;
        for &i in idx.iter().take(idx.len() / 2) {
            import.add(&chunks[i]).await.map_err(fail)?;
        }
        prop_assert_eq!(
            target.root().await.map_err(fail)?,
            ComputedNode::empty_root(),
            "visible early"
        );
    }
    let mut import = target.import(trunk.clone()).await.map_err(fail)?;
    prop_assert_eq!(
        import.missing().len(),
        idx.len() - idx.len() / 2,
        "resumed import"
    );
    if !idx.is_empty() {
        let early = target
            .import(trunk.clone())
            .await
            .map_err(fail)?
            .finish()
            .await;
        prop_assert!(
            matches!(early, Err(ImportError::Incomplete { .. })),
            "finish with chunks missing"
        );
    }
    for &i in &idx {
        import.add(&chunks[i]).await.map_err(fail)?;
    }
    let root = import.finish().await.map_err(fail)?;
    prop_assert_eq!(root, pin.root, "{}: imported root", S::KIND);
    prop_assert_eq!(target.root().await.map_err(fail)?, pin.root);
    let leaves = target.leaves(..).collect_all().await.map_err(fail)?;
    prop_assert_eq!(
        leaves
            .into_iter()
            .map(|e| (e.key, e.leaf))
            .collect::<Vec<_>>(),
        model::pairs(&m)
    );
    prop_assert!(
        target.audit().await.map_err(fail)?.is_clean(),
        "audit of the import"
    );
    src.unpin("export").await.map_err(fail)?;
    src.delete_all().await.map_err(fail)?;
    target.delete_all().await.map_err(fail)
}

async fn export<S: UStore>(store: S) {
    let strategy = (
        vec(batch_r(30), 1..3),
        0usize..7,
        vec(any::<usize>(), 0..16),
    );
    let (compacted, full) = (export_layout::<S, Compacted>, export_layout::<S, Full>);
    check_layouts(&store, "export", cases::<S>(32), strategy, compacted, full).await;
}

on_every_store!(export_on => export);

/// 25,000 leaves exported at level 7 (128 chunks); one chunk tampered
/// with is refused and nothing becomes visible; then the import completes.
async fn big_import<S: UStore>(store: S) {
    let src = Tree::<S, Compacted>::new(store.handle(&unique("big-src")));
    // Enough for every one of the 128 chunks to hold ~200 leaves (at
    // 100,000 the five stores' runs took 2.5 CPU-minutes of CI).
    let n = 25_000u64;
    let started = Instant::now();
    for part in 0..10 {
        let batch: Vec<(Key, Leaf)> = (part * n / 10..(part + 1) * n / 10)
            .map(|i| (hkey("big", i), Leaf::new(i.to_le_bytes().to_vec(), 1)))
            .collect();
        src.insert_many(batch).await.expect("build");
    }
    let built = started.elapsed();
    let pin = src.pin("export").await.expect("pin");
    let view = src.at(&pin);
    let started = Instant::now();
    let trunk = view.export_trunk(7).await.expect("trunk");
    let mut chunks = Vec::new();
    for (pos, _) in &trunk.chunks {
        chunks.push(view.export_chunk(*pos).await.expect("chunk"));
    }
    let exported = started.elapsed();
    assert_eq!(trunk.chunks.len(), 128);
    assert_eq!(chunks.iter().map(|c| c.leaves.len() as u64).sum::<u64>(), n);
    let target = Tree::<S, Compacted>::new(store.handle(&unique("big-dst")));
    let started = Instant::now();
    let mut import = target.import(trunk.clone()).await.expect("import");
    // Chunks in reverse order; the 40th is tampered with first.
    for (i, chunk) in chunks.iter().enumerate().rev() {
        if i == 40 {
            let mut bad = chunk.clone();
            let leaf = &mut bad.leaves[3].1;
            *leaf = Leaf::new(b"forged".to_vec(), leaf.sum());
            match import.add(&bad).await {
                Err(ImportError::Refused(ms_smt::ExportError::ChunkMismatch {
                    position, ..
                })) => {
                    assert_eq!(position, chunk.position)
                }
                other => panic!("{}: a tampered chunk was not refused: {other:?}", S::KIND),
            }
            assert_eq!(
                target.root().await.expect("root"),
                ComputedNode::empty_root()
            );
            assert!(import.missing().contains(&chunk.position));
        }
        import.add(chunk).await.expect("add");
        assert_eq!(
            target.root().await.expect("root"),
            ComputedNode::empty_root(),
            "nothing is visible before finish"
        );
    }
    let root = import.finish().await.expect("finish");
    let imported = started.elapsed();
    assert_eq!(root, pin.root);
    assert_eq!(target.root().await.expect("root"), pin.root);
    let sample: Vec<Key> = (0..n).step_by(997).map(|i| hkey("big", i)).collect();
    let got = target.get_many(&sample).await.expect("get");
    assert!(got.iter().all(|l| l.sum() == 1));
    eprintln!(
        "big_import::{}: built {n} leaves in {built:?}, exported 128 chunks in {exported:?}, \
         imported in {imported:?}",
        S::KIND
    );
    src.unpin("export").await.expect("unpin");
    src.delete_all().await.expect("delete");
    target.delete_all().await.expect("delete");
}

on_every_store!(big_import_on => big_import);

// ---------------------------------------------------------------------------
// sync
// ---------------------------------------------------------------------------

/// A peer that alters one answer: the sync must refuse it.
struct Liar<'a, P>(&'a P);

impl<P: SyncPeer> SyncPeer for Liar<'_, P> {
    type Error = P::Error;
    async fn children(
        &self,
        root: &ComputedNode,
        prefixes: &[Position],
    ) -> Result<Vec<[Subtree; 2]>, P::Error> {
        let mut answers = self.0.children(root, prefixes).await?;
        if let Some(pair) = answers.last_mut() {
            pair[1] = match &pair[1] {
                Subtree::Leaf { key, leaf } => Subtree::Leaf {
                    key: *key,
                    leaf: Leaf::new(b"forged".to_vec(), leaf.sum()),
                },
                Subtree::Branch(c) => Subtree::Branch(ComputedNode::new(c.hash, c.sum + 1)),
                Subtree::Empty => Subtree::Leaf {
                    key: prefixes[prefixes.len() - 1].child(true).path().to_owned(),
                    leaf: Leaf::new(b"x".to_vec(), 0),
                },
            };
        }
        Ok(answers)
    }
}

async fn sync<S: UStore>(store: S) {
    let n = 10_000u64;
    let base: Vec<(Key, Leaf)> = (0..n)
        .map(|i| {
            (
                hkey("sync", i),
                Leaf::new(i.to_le_bytes().to_vec(), 1 + i % 7),
            )
        })
        .collect();
    for d in [1u64, 10, 100] {
        let ours = Tree::<S, Compacted>::new(store.handle(&unique("sync-ours")));
        let theirs = Tree::<S, Compacted>::new(store.handle(&unique("sync-theirs")));
        ours.insert_many(base.clone()).await.expect("build ours");
        theirs
            .insert_many(base.clone())
            .await
            .expect("build theirs");
        // d differences: a third replaced, a third new, a third deleted.
        let changes: Vec<(Key, Leaf)> = (0..d)
            .map(|i| match i % 3 {
                0 => (hkey("sync", i * 31), Leaf::new(b"changed".to_vec(), 9)),
                1 => (hkey("sync-new", i), Leaf::new(b"new".to_vec(), 2)),
                _ => (hkey("sync", i * 31), Leaf::empty()),
            })
            .collect();
        let target = theirs.insert_many(changes).await.expect("change theirs");
        let pin = theirs.pin("serve").await.expect("pin");
        let peer = theirs.at(&pin);
        // A lying peer is caught and nothing is written.
        let before = ours.root().await.expect("root");
        match ours.sync_from(&Liar(&peer), &target).await {
            Err(SyncError::BadChildren { .. }) => {}
            other => panic!("{}: a forged answer was accepted: {other:?}", S::KIND),
        }
        assert_eq!(ours.root().await.expect("root"), before);
        let report = ours.sync_from(&peer, &target).await.expect("sync");
        assert_eq!(report.root, target, "{}: synced root (d = {d})", S::KIND);
        assert_eq!(ours.root().await.expect("root"), target);
        let depth = 2 * 64 - u64::from((n + d).leading_zeros()); // ~2 log2 N
        eprintln!(
            "sync::{} d={d}: {} requests, {} subtrees fetched, {} local reads, {} upserts, \
             {} deletes (bound {})",
            S::KIND,
            report.requests,
            report.fetched,
            report.local_reads,
            report.upserts,
            report.deletes,
            4 * d * depth
        );
        assert!(
            report.fetched <= 4 * d * depth,
            "{}: fetched {} for d = {d}",
            S::KIND,
            report.fetched
        );
        assert!(report.requests <= depth + 2);
        assert_eq!(report.upserts + report.deletes, d);
        // In sync: nothing more to fetch.
        let again = ours.sync_from(&peer, &target).await.expect("sync again");
        assert_eq!((again.requests, again.fetched), (0, 0));
        assert!(
            ours.view()
                .diff(&peer)
                .collect_all()
                .await
                .expect("diff")
                .is_empty()
        );
        theirs.unpin("serve").await.expect("unpin");
        ours.delete_all().await.expect("delete");
        theirs.delete_all().await.expect("delete");
    }
}

on_every_store!(sync_on => sync);
