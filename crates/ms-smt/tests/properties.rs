//! Property tests.
//!
//! * Proptest ports of every property of spec §7 (items 1-12), on both
//!   layouts where a tree is involved.
//! * Batch == sequential == fresh build from the final map; full == compacted
//!   (roots and proofs); last-wins duplicates; twin subtrees (equal leaves at
//!   keys differing in 1-3 bits); reference-count hygiene (row sets equal to a
//!   fresh build's, nothing left after deleting everything); overflow
//!   atomicity; proof decoding (never panics, round trips, typed errors).
//!
//! Every write goes through [`write`], which checks the result against an
//! independent model: a `BTreeMap` of the live leaves and a naive merkle-sum
//! root computed level by level from it. A write must be accepted iff the
//! final map's exact total (u128) fits in u64; a rejected write must be an
//! overflow error mentioning "integer overflow" and leave the store's rows and
//! root untouched.

use crate::props;
use crate::support;

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::RangeInclusive;

use ms_smt::Hash;
use ms_smt::Node;
use ms_smt::proof::DecodeError;
use ms_smt::proof::WrongLength;
use ms_smt::store::{MemoryError, MemoryStore};
use ms_smt::{
    Compacted, CompressedProof, ComputedNode, Full, Key, Layout, Leaf, Proof, Tree, TreeError,
    verify_merkle_proof,
};
use ms_smt_core::empty::empty_hash;
use ms_smt_core::hash::branch_hash;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use support::proptest_config;
use support::recipes::{LeafR, bit_pos, flip, key_r, materialize_keys};

// ---------------------------------------------------------------------------
// Configuration and generators
// ---------------------------------------------------------------------------

/// Cases per property: the full layout hashes 256 levels per key, which is
/// slow without optimisations.
const CASES: u32 = if cfg!(debug_assertions) { 16 } else { 64 };
/// Proof-only properties are cheap.
const PROOF_CASES: u32 = if cfg!(debug_assertions) { 64 } else { 256 };

fn config(cases: u32) -> ProptestConfig {
    proptest_config(cases, 512)
}

const SMALL_MAX: u64 = 1 << 32;
const BIG_MIN: u64 = u64::MAX - (1 << 20);
const EMPTY_ROOT_HEX: &str = "b1e8e8f2dc3b266452988cfe169aa73be25405eeead02ab5dd6b3c6fd0ca8d67";

fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

/// Mostly small sums in `[0, 2^32]`, some zeros, and with weight `big` (out
/// of about 44 + big) sums in `[u64::MAX - 2^20, u64::MAX]`.
fn sum_s(big: u32) -> impl Strategy<Value = u64> {
    prop_oneof![
        40 => 0..=SMALL_MAX,
        4 => Just(0u64),
        big => BIG_MIN..=u64::MAX,
    ]
}

fn leaf_r(big: u32) -> impl Strategy<Value = LeafR> {
    prop_oneof![
        25 => Just(LeafR::Empty),
        20 => any::<usize>().prop_map(LeafR::Pooled),
        40 => (vec(any::<u8>(), 1..=32), sum_s(big)).prop_map(|(v, s)| LeafR::Fresh(v, s)),
        // Empty value, non-zero sum: a real leaf.
        8 => sum_s(big).prop_map(|s| LeafR::Fresh(Vec::new(), s.max(1))),
        // Non-empty value, sum 0: a real leaf.
        7 => vec(any::<u8>(), 1..=32).prop_map(|v| LeafR::Fresh(v, 0)),
    ]
}

fn pool_leaf() -> impl Strategy<Value = Leaf> {
    (vec(any::<u8>(), 0..=4), 0..=SMALL_MAX).prop_map(|(v, s)| {
        if v.is_empty() && s == 0 {
            Leaf::new(Vec::new(), 1)
        } else {
            Leaf::new(v, s)
        }
    })
}

fn materialize_leaf(r: &LeafR, pool: &[Leaf]) -> Leaf {
    match r {
        LeafR::Empty => Leaf::empty(),
        LeafR::Pooled(i) => pool[i % pool.len()].clone(),
        LeafR::Fresh(v, s) => Leaf::new(v.clone(), *s),
    }
}

/// A generated scenario: a key pool and batches of writes over it.
#[derive(Clone, Debug)]
struct Case {
    keys: Vec<Key>,
    batches: Vec<Vec<(Key, Leaf)>>,
    modes: Vec<Mode>,
}

fn case_s(
    keys: RangeInclusive<usize>,
    batches: RangeInclusive<usize>,
    batch_len: RangeInclusive<usize>,
    big: u32,
) -> impl Strategy<Value = Case> {
    (
        any::<[u8; 32]>(),
        vec(key_r(), keys),
        vec(pool_leaf(), 1..=3),
        vec(vec((any::<usize>(), leaf_r(big)), batch_len), batches),
        vec(any::<bool>(), 8),
    )
        .prop_map(|(base, key_rs, pool, batch_rs, modes)| {
            let keys = materialize_keys(base, &key_rs);
            let batches = batch_rs
                .iter()
                .map(|b| {
                    b.iter()
                        .map(|(i, lr)| (keys[i % keys.len()], materialize_leaf(lr, &pool)))
                        .collect()
                })
                .collect();
            let modes = modes
                .into_iter()
                .map(|b| if b { Mode::Batch } else { Mode::Loop })
                .collect();
            Case {
                keys,
                batches,
                modes,
            }
        })
}

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

type Model = BTreeMap<[u8; 32], Leaf>;
type T<L> = Tree<MemoryStore, L>;
type Rows = Vec<(Hash, Node, u64)>;

fn bit(key: &Key, d: usize) -> bool {
    (key.0[d / 8] >> (d % 8)) & 1 == 1
}

fn model_apply(model: &Model, batch: &[(Key, Leaf)]) -> Model {
    let mut next = model.clone();
    for (k, l) in batch {
        if l.is_empty() {
            next.remove(&k.0);
        } else {
            next.insert(k.0, l.clone());
        }
    }
    next
}

fn model_get(model: &Model, key: &Key) -> Leaf {
    model.get(&key.0).cloned().unwrap_or_default()
}

fn model_total(model: &Model) -> u128 {
    model.values().map(|l| u128::from(l.sum())).sum()
}

/// The merkle-sum root of `model`, built naively level by level (spec §1):
/// `None` when a sum overflows u64.
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
        assert_eq!(items.len(), 1, "model keys are distinct");
        return Some((items[0].1.hash(), items[0].1.sum()));
    }
    let (l, r): (Vec<_>, Vec<_>) = items.iter().partition(|(k, _)| !bit(k, level));
    let (lh, ls) = subtree(level + 1, &l)?;
    let (rh, rs) = subtree(level + 1, &r)?;
    let sum = ls.checked_add(rs)?;
    Some((branch_hash(&lh, &rh, sum), sum))
}

/// The last leaf written to each key of `batch`.
fn last_wins(batch: &[(Key, Leaf)]) -> BTreeMap<[u8; 32], Leaf> {
    batch.iter().map(|(k, l)| (k.0, l.clone())).collect()
}

// ---------------------------------------------------------------------------
// Tree helpers
// ---------------------------------------------------------------------------

fn fail(e: impl std::fmt::Debug) -> TestCaseError {
    TestCaseError::fail(format!("{e:?}"))
}

fn new_tree<L: Layout>() -> T<L> {
    Tree::new(MemoryStore::new())
}

async fn root<L: Layout>(tree: &T<L>) -> Result<ComputedNode, TestCaseError> {
    tree.root().await.map_err(fail)
}

fn rows<L: Layout>(tree: &T<L>) -> Result<Rows, TestCaseError> {
    tree.store().rows().map_err(fail)
}

/// A new tree built by one `insert_many` of the model's leaves.
async fn fresh<L: Layout>(model: &Model) -> Result<T<L>, TestCaseError> {
    let tree = new_tree::<L>();
    let got = tree
        .insert_many(model.iter().map(|(k, l)| (Key(*k), l.clone())))
        .await
        .map_err(fail)?;
    prop_assert_eq!(Some(got), model_root(model));
    Ok(tree)
}

fn check_overflow(e: &TreeError<MemoryError>) -> Result<(), TestCaseError> {
    prop_assert!(e.is_overflow(), "expected an overflow error, got {:?}", e);
    prop_assert!(
        e.to_string().contains("integer overflow"),
        "overflow error text lacks \"integer overflow\": {}",
        e
    );
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One `insert_many` call.
    Batch,
    /// One `insert` (or `delete`, for empty leaves) per entry, in order.
    Loop,
}

/// One write, checked against the model. `single` uses `insert`/`delete`
/// on the one entry of `batch`. Returns whether the write was accepted.
async fn write<L: Layout>(
    tree: &T<L>,
    model: &mut Model,
    batch: &[(Key, Leaf)],
    single: bool,
) -> Result<bool, TestCaseError> {
    let next = model_apply(model, batch);
    let expect = model_root(&next);
    prop_assert_eq!(expect.is_none(), model_total(&next) > u128::from(u64::MAX));
    let rows_before = rows(tree)?;
    let root_before = root(tree).await?;
    let res = if single {
        let (k, l) = &batch[0];
        if l.is_empty() {
            tree.delete(*k).await
        } else {
            tree.insert(*k, l.clone()).await
        }
    } else {
        tree.insert_many(batch.to_vec()).await
    };
    match (expect, res) {
        (Some(exp), Ok(got)) => {
            prop_assert_eq!(got, exp, "returned root differs from the model root");
            prop_assert_eq!(
                root(tree).await?,
                exp,
                "stored root differs from the model root"
            );
            *model = next;
            Ok(true)
        }
        (None, Err(e)) => {
            check_overflow(&e)?;
            prop_assert_eq!(
                root(tree).await?,
                root_before,
                "rejected write moved the root"
            );
            prop_assert_eq!(rows(tree)?, rows_before, "rejected write changed the rows");
            Ok(false)
        }
        (Some(_), Err(e)) => Err(TestCaseError::fail(format!(
            "write rejected although the final total {} fits in u64: {e:?} ({e})",
            model_total(&next)
        ))),
        (None, Ok(got)) => Err(TestCaseError::fail(format!(
            "write accepted although the final total {} overflows u64: root {got:?}",
            model_total(&next)
        ))),
    }
}

/// Applies `batch` in `mode`; returns the number of rejected calls.
async fn apply<L: Layout>(
    tree: &T<L>,
    model: &mut Model,
    batch: &[(Key, Leaf)],
    mode: Mode,
) -> Result<usize, TestCaseError> {
    match mode {
        Mode::Batch => Ok(usize::from(!write(tree, model, batch, false).await?)),
        Mode::Loop => {
            let mut rejected = 0;
            for entry in batch {
                if !write(tree, model, std::slice::from_ref(entry), true).await? {
                    rejected += 1;
                }
            }
            Ok(rejected)
        }
    }
}

/// A new, empty tree and its (empty) model.
fn empty<L: Layout>() -> (T<L>, Model) {
    (new_tree::<L>(), Model::new())
}

/// A new tree and its model after applying `batch` in `mode`, with the
/// number of rejected calls.
async fn seeded<L: Layout>(
    batch: &[(Key, Leaf)],
    mode: Mode,
) -> Result<(T<L>, Model, usize), TestCaseError> {
    let (tree, mut model) = empty::<L>();
    let rejected = apply(&tree, &mut model, batch, mode).await?;
    Ok((tree, model, rejected))
}

/// Two runs of the same writes: equal maps when no call was rejected, and
/// equal roots when the maps are equal.
async fn check_agree<L: Layout>(
    (a, ma): (&T<L>, &Model),
    (b, mb): (&T<L>, &Model),
    rejected: usize,
) -> Result<(), TestCaseError> {
    if rejected == 0 {
        prop_assert_eq!(ma, mb);
    }
    if ma == mb {
        prop_assert_eq!(root(a).await?, root(b).await?);
    }
    Ok(())
}

/// Applies every batch to tree `a` in one `insert_many` and to tree `b` one
/// entry at a time, then checks the two agree ([`check_agree`], counting the
/// rejections of both).
async fn batch_vs_loop<L: Layout>(
    batches: &[Vec<(Key, Leaf)>],
) -> Result<((T<L>, Model), (T<L>, Model)), TestCaseError> {
    let (a, mut ma) = empty::<L>();
    let (b, mut mb) = empty::<L>();
    let mut rejected = 0;
    for batch in batches {
        rejected += apply(&a, &mut ma, batch, Mode::Batch).await?;
        rejected += apply(&b, &mut mb, batch, Mode::Loop).await?;
    }
    check_agree((&a, &ma), (&b, &mb), rejected).await?;
    Ok(((a, ma), (b, mb)))
}

/// `get` and `merkle_proof` of `key` agree with the model and verify.
async fn check_key<L: Layout>(tree: &T<L>, model: &Model, key: &Key) -> Result<(), TestCaseError> {
    let root = root(tree).await?;
    let expect = model_get(model, key);
    let got = tree.get(key).await.map_err(fail)?;
    prop_assert_eq!(&got, &expect, "get({:?})", key);
    prop_assert_eq!(got.hash(), expect.hash());
    let proof = tree.merkle_proof(key).await.map_err(fail)?;
    prop_assert!(
        proof.verify(key, &expect, &root),
        "proof of {:?} does not verify",
        key
    );
    prop_assert!(verify_merkle_proof(key, &expect, &proof, &root));
    // The other kind of proof must not verify.
    let wrong = if expect.is_empty() {
        Leaf::new(b"x".to_vec(), 1)
    } else {
        Leaf::empty()
    };
    prop_assert!(!proof.verify(key, &wrong, &root));
    Ok(())
}

/// The level at which a compacted leaf holding `leaf` at `key` hashes to
/// `hash` (spec §1.5), found by lifting the leaf towards the root.
fn compacted_level(hash: &Hash, key: &Key, leaf: &Leaf) -> Option<usize> {
    let mut h = leaf.hash();
    if h == *hash {
        return Some(256);
    }
    for level in (0..256).rev() {
        let empty = empty_hash(level + 1);
        h = if bit(key, level) {
            branch_hash(&empty, &h, leaf.sum())
        } else {
            branch_hash(&h, &empty, leaf.sum())
        };
        if h == *hash {
            return Some(level);
        }
    }
    None
}

/// Checks that every row's hash matches its content, and returns the rows
/// with each compacted leaf's key bits above its level (bits `0..level`)
/// cleared: those bits come from the node's position, and a row shared by
/// two positions may carry either position's bits (documented on
/// `Node::Compacted`), so they depend on which position wrote it first.
fn normalized_rows(rows: &Rows) -> Result<Rows, TestCaseError> {
    let mut out = Vec::with_capacity(rows.len());
    for (hash, node, refs) in rows {
        prop_assert!(*refs > 0, "row {:?} has reference count 0", hash);
        let node = match node {
            Node::Branch { left, right, sum } => {
                prop_assert_eq!(branch_hash(left, right, *sum), *hash, "branch row content");
                node.clone()
            }
            Node::Leaf(leaf) => {
                prop_assert_eq!(leaf.hash(), *hash, "leaf row content");
                node.clone()
            }
            Node::Compacted { key, leaf } => {
                prop_assert!(
                    !leaf.is_empty(),
                    "compacted row {:?} holds the empty leaf",
                    hash
                );
                let Some(level) = compacted_level(hash, key, leaf) else {
                    return Err(TestCaseError::fail(format!(
                        "compacted row {hash:?} does not hash to its key and leaf"
                    )));
                };
                let mut k = *key;
                for d in 0..level {
                    k.0[d / 8] &= !(1 << (d % 8));
                }
                Node::Compacted {
                    key: k,
                    leaf: leaf.clone(),
                }
            }
        };
        out.push((*hash, node, *refs));
    }
    Ok(out)
}

/// Row sets of two trees, compared with their reference counts (compacted
/// keys compared on their meaningful bits only; see [`normalized_rows`]).
fn assert_same_rows(incremental: &Rows, fresh: &Rows, what: &str) -> Result<(), TestCaseError> {
    let incremental = normalized_rows(incremental)?;
    let fresh = normalized_rows(fresh)?;
    if incremental != fresh {
        let only_inc: Vec<_> = incremental.iter().filter(|r| !fresh.contains(r)).collect();
        let only_fresh: Vec<_> = fresh.iter().filter(|r| !incremental.contains(r)).collect();
        return Err(TestCaseError::fail(format!(
            "{what}: row sets differ ({} vs {} rows)\nonly incremental: {only_inc:#?}\nonly fresh: {only_fresh:#?}",
            incremental.len(),
            fresh.len()
        )));
    }
    Ok(())
}

/// `tree` has the root and the row set of a fresh build of `model`.
async fn check_as_fresh<L: Layout>(
    tree: &T<L>,
    model: &Model,
    what: &str,
) -> Result<(), TestCaseError> {
    let f = fresh::<L>(model).await?;
    prop_assert_eq!(root(tree).await?, root(&f).await?);
    assert_same_rows(&rows(tree)?, &rows(&f)?, what)
}

/// Deletes every live key (in `mode`); the store must then be empty.
async fn clear_all<L: Layout>(
    tree: &T<L>,
    model: &mut Model,
    mode: Mode,
) -> Result<(), TestCaseError> {
    let deletes: Vec<(Key, Leaf)> = model.keys().map(|k| (Key(*k), Leaf::empty())).collect();
    prop_assert_eq!(apply(tree, model, &deletes, mode).await?, 0);
    prop_assert!(model.is_empty());
    let r = root(tree).await?;
    prop_assert_eq!(r, ComputedNode::empty_root());
    prop_assert_eq!(r.hash.to_hex(), EMPTY_ROOT_HEX);
    prop_assert_eq!(
        tree.store().node_count().map_err(fail)?,
        0,
        "store leaks rows: {:#?}",
        rows(tree)?
    );
    Ok(())
}

/// Keys to probe: the pool plus neighbours differing in bit 255, bit 0 and
/// the first byte's top bit (mostly absent keys next to present ones).
fn probe_keys(case: &Case) -> Vec<Key> {
    let mut out = case.keys.clone();
    for k in case.keys.iter().take(6) {
        out.push(flip(*k, &[255]));
        out.push(flip(*k, &[0]));
        out.push(flip(*k, &[7]));
    }
    out
}

macro_rules! both_layouts {
    ($name:ident, $strategy:expr, $check:ident) => {
        mod $name {
            use super::*;
            proptest! {
                #![proptest_config(config(CASES))]
                #[test]
                fn full(input in $strategy) {
                    run(super::$check::<Full>(input))?;
                }
                #[test]
                fn compacted(input in $strategy) {
                    run(super::$check::<Compacted>(input))?;
                }
            }
        }
    };
}

macro_rules! both_layouts_det {
    ($name:ident, $check:ident) => {
        mod $name {
            use super::*;
            #[test]
            fn full() {
                run(super::$check::<Full>()).unwrap();
            }
            #[test]
            fn compacted() {
                run(super::$check::<Compacted>()).unwrap();
            }
        }
    };
}

// ---------------------------------------------------------------------------
// §7.1 InsertMany == Insert loop
// ---------------------------------------------------------------------------

async fn p01_equivalence<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    let batch = &case.batches[0];
    let (a, ma, _) = seeded::<L>(batch, Mode::Batch).await?;
    let (b, mb, rejected) = seeded::<L>(batch, Mode::Loop).await?;
    // Last wins in both: with no rejection the loop's final map is the batch's.
    check_agree((&a, &ma), (&b, &mb), rejected).await
}
both_layouts! {
    p01_insert_many_equivalence, case_s(1..=24, 1..=1, 0..=32, 1), p01_equivalence
}

// ---------------------------------------------------------------------------
// §7.2 round trip: Get and MerkleProof of every key after InsertMany
// ---------------------------------------------------------------------------

async fn p02_round_trip<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    let (tree, model, _) = seeded::<L>(&case.batches[0], Mode::Batch).await?;
    for key in probe_keys(&case) {
        check_key(&tree, &model, &key).await?;
    }
    // get_many agrees with get.
    let keys = probe_keys(&case);
    let many = tree.get_many(&keys).await.map_err(fail)?;
    for (k, l) in keys.iter().zip(&many) {
        prop_assert_eq!(l, &model_get(&model, k));
    }
    Ok(())
}
both_layouts! {
    p02_insert_many_round_trip, case_s(1..=24, 1..=1, 1..=32, 1), p02_round_trip
}

// ---------------------------------------------------------------------------
// §7.3 two InsertMany calls == Insert loop over first then second
// ---------------------------------------------------------------------------

async fn p03_over_populated<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    batch_vs_loop::<L>(&case.batches).await?;
    Ok(())
}
both_layouts! {
    p03_insert_many_over_populated, case_s(1..=24, 2..=2, 1..=16, 1), p03_over_populated
}

// ---------------------------------------------------------------------------
// §7.4 existingSum ground truth: old + batch - new == replaced sums
// ---------------------------------------------------------------------------

async fn p04_existing_sum<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    let (tree, mut model, _) = seeded::<L>(&case.batches[0], Mode::Batch).await?;
    let batch = &case.batches[1];
    let dedup = last_wins(batch);
    let mut replaced: u128 = 0;
    for k in dedup.keys() {
        replaced += u128::from(tree.get(&Key(*k)).await.map_err(fail)?.sum());
    }
    let batch_sum: u128 = dedup.values().map(|l| u128::from(l.sum())).sum();
    let old = u128::from(root(&tree).await?.sum);
    if write(&tree, &mut model, batch, false).await? {
        let new = u128::from(root(&tree).await?.sum);
        prop_assert_eq!(old + batch_sum, new + replaced);
    } else {
        prop_assert!(old + batch_sum - replaced > u128::from(u64::MAX));
    }
    Ok(())
}
both_layouts! {
    p04_existing_sum_ground_truth, case_s(1..=24, 2..=2, 0..=16, 1), p04_existing_sum
}

// ---------------------------------------------------------------------------
// §7.5-8 deterministic overflow tests
// ---------------------------------------------------------------------------

fn key_n(n: u8) -> Key {
    let mut k = [0u8; 32];
    k[0] = n;
    k[31] = n.wrapping_mul(37);
    Key(k)
}

async fn p05_overflow_atomicity<L: Layout>() -> Result<(), TestCaseError> {
    let tree = new_tree::<L>();
    let seed_key = key_n(1);
    let seed = Leaf::new(b"seed".to_vec(), u64::MAX - 10);
    let seeded = tree.insert(seed_key, seed.clone()).await.map_err(fail)?;
    prop_assert_eq!(seeded.sum, u64::MAX - 10);
    let rows_before = rows(&tree)?;
    let batch_key = key_n(2);
    let err = tree
        .insert_many([(batch_key, Leaf::new(b"new".to_vec(), 100))])
        .await
        .expect_err("overflowing batch must be rejected");
    check_overflow(&err)?;
    prop_assert_eq!(root(&tree).await?, seeded);
    prop_assert_eq!(&rows(&tree)?, &rows_before);
    prop_assert_eq!(tree.get(&seed_key).await.map_err(fail)?, seed.clone());
    prop_assert_eq!(tree.get(&batch_key).await.map_err(fail)?, Leaf::empty());
    let proof = tree.merkle_proof(&seed_key).await.map_err(fail)?;
    prop_assert!(proof.verify(&seed_key, &seed, &seeded));
    // The single-insert path rejects it too, atomically.
    let err = tree
        .insert(batch_key, Leaf::new(b"new".to_vec(), 100))
        .await
        .expect_err("overflowing insert must be rejected");
    check_overflow(&err)?;
    prop_assert_eq!(root(&tree).await?, seeded);
    prop_assert_eq!(&rows(&tree)?, &rows_before);
    Ok(())
}
both_layouts_det!(p05_insert_many_overflow_atomicity, p05_overflow_atomicity);

async fn p06_batch_sum_overflow<L: Layout>() -> Result<(), TestCaseError> {
    let tree = new_tree::<L>();
    let err = tree
        .insert_many([
            (key_n(1), Leaf::new(b"a".to_vec(), u64::MAX - 1)),
            (key_n(2), Leaf::new(b"b".to_vec(), 10)),
        ])
        .await
        .expect_err("batch sum overflow must be rejected");
    check_overflow(&err)?;
    prop_assert_eq!(root(&tree).await?, ComputedNode::empty_root());
    prop_assert_eq!(tree.store().node_count().map_err(fail)?, 0);
    Ok(())
}
both_layouts_det!(p06_insert_many_sum_overflow, p06_batch_sum_overflow);

async fn p07_replacement_parity<L: Layout>() -> Result<(), TestCaseError> {
    let k = key_n(1);
    let small = Leaf::new(b"small".to_vec(), 10);
    let mut expect = Model::new();
    expect.insert(k.0, small.clone());
    let expect = model_root(&expect).expect("fits");
    for single in [true, false] {
        let tree = new_tree::<L>();
        tree.insert(k, Leaf::new(b"big".to_vec(), u64::MAX - 5))
            .await
            .map_err(fail)?;
        let got = if single {
            tree.insert(k, small.clone()).await
        } else {
            tree.insert_many([(k, small.clone())]).await
        }
        .map_err(fail)?;
        prop_assert_eq!(got, expect);
        prop_assert_eq!(got.sum, 10);
        prop_assert_eq!(tree.get(&k).await.map_err(fail)?, small.clone());
    }
    Ok(())
}
both_layouts_det!(
    p07_insert_overflow_replacement_parity,
    p07_replacement_parity
);

async fn p08_overflow_replacement<L: Layout>() -> Result<(), TestCaseError> {
    let (k1, k2) = (key_n(1), key_n(2));
    let big = Leaf::new(b"big".to_vec(), u64::MAX - 5);
    let l1 = Leaf::new(b"one".to_vec(), 1);
    let l2 = Leaf::new(b"ten".to_vec(), 10);
    let batched = new_tree::<L>();
    batched.insert(k1, big.clone()).await.map_err(fail)?;
    let got = batched
        .insert_many([(k1, l1.clone()), (k2, l2.clone())])
        .await
        .map_err(fail)?;
    let looped = new_tree::<L>();
    looped.insert(k1, big).await.map_err(fail)?;
    looped.insert(k1, l1.clone()).await.map_err(fail)?;
    let seq = looped.insert(k2, l2.clone()).await.map_err(fail)?;
    prop_assert_eq!(got, seq);
    prop_assert_eq!(got.sum, 11);
    let mut m = Model::new();
    m.insert(k1.0, l1);
    m.insert(k2.0, l2);
    prop_assert_eq!(Some(got), model_root(&m));
    Ok(())
}
both_layouts_det!(
    p08_insert_many_overflow_replacement,
    p08_overflow_replacement
);

// ---------------------------------------------------------------------------
// §7.9 Proof::root and verify agree (and match a reference walk)
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct ProofCase {
    key: Key,
    leaf: Leaf,
    siblings: Vec<ComputedNode>,
}

/// 256 siblings: random nodes (sums drawn by `sum`) and empty subtrees.
fn proof_case(sum: BoxedStrategy<u64>) -> impl Strategy<Value = ProofCase> {
    (
        any::<[u8; 32]>(),
        vec(any::<u8>(), 0..=64),
        sum.clone(),
        vec(
            prop_oneof![1 => Just(None), 2 => (any::<[u8; 32]>(), sum).prop_map(Some)],
            256,
        ),
    )
        .prop_map(|(key, value, leaf_sum, sibs)| ProofCase {
            key: Key(key),
            leaf: Leaf::new(value, leaf_sum),
            siblings: sibs
                .into_iter()
                .enumerate()
                .map(|(j, s)| match s {
                    None => ComputedNode::empty(256 - j),
                    Some((h, s)) => ComputedNode::new(Hash(h), s),
                })
                .collect(),
        })
}

/// The root a proof yields, walked independently of the crate (u128 sums).
fn reference_root(key: &Key, leaf: &Leaf, siblings: &[ComputedNode]) -> Option<ComputedNode> {
    let mut hash = leaf.hash();
    let mut sum = u128::from(leaf.sum());
    for (j, sib) in siblings.iter().enumerate() {
        let level = 255 - j;
        sum += u128::from(sib.sum);
        let s = u64::try_from(sum).ok()?;
        hash = if bit(key, level) {
            branch_hash(&sib.hash, &hash, s)
        } else {
            branch_hash(&hash, &sib.hash, s)
        };
    }
    Some(ComputedNode::new(hash, u64::try_from(sum).ok()?))
}

fn check_root_vs_verify(c: &ProofCase) -> Result<(), TestCaseError> {
    let proof = Proof::new(c.siblings.clone()).map_err(fail)?;
    prop_assert_eq!(proof.nodes(), &c.siblings[..]);
    let expect = reference_root(&c.key, &c.leaf, &c.siblings);
    match (proof.root(&c.key, &c.leaf), expect) {
        (Ok(r), Some(e)) => {
            prop_assert_eq!(r, e);
            prop_assert!(proof.verify(&c.key, &c.leaf, &r));
            prop_assert!(verify_merkle_proof(&c.key, &c.leaf, &proof, &r));
            // Hash and sum are both checked.
            prop_assert!(!proof.verify(
                &c.key,
                &c.leaf,
                &ComputedNode::new(r.hash, r.sum.wrapping_add(1))
            ));
            let mut h = r.hash;
            h.0[0] ^= 1;
            prop_assert!(!proof.verify(&c.key, &c.leaf, &ComputedNode::new(h, r.sum)));
        }
        (Err(_), None) => {
            // Overflow: verify is false against anything, and does not panic.
            prop_assert!(!proof.verify(&c.key, &c.leaf, &ComputedNode::empty_root()));
            prop_assert!(!proof.verify(
                &c.key,
                &c.leaf,
                &ComputedNode::new(c.leaf.hash(), u64::MAX)
            ));
        }
        (got, want) => {
            return Err(TestCaseError::fail(format!(
                "Proof::root {got:?}, reference {want:?}"
            )));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(PROOF_CASES))]

    /// §7.9 with sums in [0, 2^32] (Go's generator).
    #[test]
    fn p09_root_sum_equivalence(c in proof_case((0..=SMALL_MAX).boxed())) {
        check_root_vs_verify(&c)?;
    }

    /// §7.12: verify never panics when sibling sums overflow.
    #[test]
    fn p12_verify_overflowing_sums_never_panics(
        c in proof_case(prop_oneof![0..=SMALL_MAX, BIG_MIN..=u64::MAX, any::<u64>()].boxed())
    ) {
        check_root_vs_verify(&c)?;
    }
}

// ---------------------------------------------------------------------------
// §7.10 every proof verifies, also after compress/decompress and the wire
// ---------------------------------------------------------------------------

fn check_proof_codec(proof: &Proof) -> Result<(), TestCaseError> {
    let compressed = proof.compress();
    // A compressed proof never carries an empty node, and its bitmap marks
    // exactly the empty siblings.
    let mut explicit = compressed.nodes().iter();
    for (j, node) in proof.nodes().iter().enumerate() {
        let is_empty = node.hash == empty_hash(256 - j);
        prop_assert_eq!(compressed.is_empty_sibling(j), is_empty);
        if !is_empty {
            prop_assert_eq!(explicit.next(), Some(node));
        }
    }
    prop_assert_eq!(explicit.next(), None);
    prop_assert_eq!(&compressed.decompress().map_err(fail)?, proof);
    let bytes = proof.to_bytes();
    prop_assert_eq!(&bytes, &compressed.encode());
    prop_assert_eq!(bytes.len(), 34 + 40 * compressed.nodes().len());
    let decoded = CompressedProof::decode(&bytes).map_err(fail)?;
    prop_assert_eq!(&decoded, &compressed);
    prop_assert_eq!(&Proof::from_bytes(&bytes).map_err(fail)?, proof);
    Ok(())
}

async fn p10_verify_round_trip<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    let (tree, model, _) = seeded::<L>(&case.batches[0], case.modes[0]).await?;
    let r = root(&tree).await?;
    let keys = probe_keys(&case);
    let proofs = tree.merkle_proofs(&keys).await.map_err(fail)?;
    for (key, proof) in keys.iter().zip(&proofs) {
        let leaf = model_get(&model, key);
        prop_assert!(proof.verify(key, &leaf, &r));
        check_proof_codec(proof)?;
        let back = Proof::from_bytes(&proof.to_bytes()).map_err(fail)?;
        prop_assert!(back.verify(key, &leaf, &r));
        let back = proof.compress().decompress().map_err(fail)?;
        prop_assert!(back.verify(key, &leaf, &r));
    }
    Ok(())
}
both_layouts! {
    p10_verify_merkle_proof_round_trip, case_s(1..=24, 1..=1, 1..=32, 1), p10_verify_round_trip
}

// ---------------------------------------------------------------------------
// §7.11 adversarial: any single change makes verification fail
// ---------------------------------------------------------------------------

async fn p11_adversarial<L: Layout>(
    input: (Case, Vec<(usize, usize, u8)>),
) -> Result<(), TestCaseError> {
    let (case, picks) = input;
    let (tree, model, _) = seeded::<L>(&case.batches[0], Mode::Batch).await?;
    let r = root(&tree).await?;
    for ((k, leaf), (a, b, x)) in model.iter().zip(picks.iter().cycle()) {
        let key = Key(*k);
        let proof = tree.merkle_proof(&key).await.map_err(fail)?;
        prop_assert!(proof.verify(&key, leaf, &r));

        // Flip one key byte.
        let mut bad_key = key;
        bad_key.0[a % 32] ^= 0xff;
        prop_assert!(
            !proof.verify(&bad_key, leaf, &r),
            "flipped key byte {} verified",
            a % 32
        );

        // Sum + 1.
        let bad_leaf = Leaf::new(leaf.value().to_vec(), leaf.sum().wrapping_add(1));
        prop_assert!(!proof.verify(&key, &bad_leaf, &r), "sum + 1 verified");

        // One byte of one sibling's hash.
        let mut nodes = proof.nodes().to_vec();
        let x = (*x).max(1);
        nodes[b % 256].hash.0[a % 32] ^= x;
        let bad_proof = Proof::new(nodes).map_err(fail)?;
        prop_assert!(
            !bad_proof.verify(&key, leaf, &r),
            "changed sibling {} verified",
            b % 256
        );

        // One byte of the root hash.
        let mut bad_root = r;
        bad_root.hash.0[b % 32] ^= x;
        prop_assert!(
            !proof.verify(&key, leaf, &bad_root),
            "changed root verified"
        );
    }
    Ok(())
}
both_layouts!(
    p11_verify_merkle_proof_adversarial,
    (
        case_s(1..=24, 1..=1, 1..=32, 1),
        vec((any::<usize>(), any::<usize>(), any::<u8>()), 1..=8)
    ),
    p11_adversarial
);

// ---------------------------------------------------------------------------
// §7.12 malformed inputs
// ---------------------------------------------------------------------------

#[test]
fn p12_proof_new_rejects_wrong_lengths() {
    let node = ComputedNode::new(Hash([7; 32]), 3);
    for len in [0usize, 1, 255, 257, 512] {
        assert_eq!(
            Proof::new(vec![node; len]),
            Err(WrongLength(len)),
            "length {len}"
        );
    }
    let ok = Proof::new(vec![node; 256]).expect("256 siblings");
    assert_eq!(ok.nodes().len(), 256);
}

#[test]
fn p12_verify_with_overflowing_sibling_sums_is_false() {
    let run_case = |leaf: Leaf| {
        let key = Key([0x5a; 32]);
        let mut nodes: Vec<ComputedNode> = (0..256).map(|j| ComputedNode::empty(256 - j)).collect();
        let base = Proof::new(nodes.clone()).unwrap();
        let good = base.root(&key, &leaf).unwrap();
        assert!(base.verify(&key, &leaf, &good));
        for j in [0usize, 1, 128, 254, 255] {
            nodes[j] = ComputedNode::new(Hash([j as u8; 32]), u64::MAX);
            let proof = Proof::new(nodes.clone()).unwrap();
            // Overflows iff the leaf sum or an earlier sibling sum is non-zero.
            let overflow = leaf.sum() > 0 || j > 0;
            assert_eq!(proof.root(&key, &leaf).is_err(), overflow, "sibling {j}");
            if overflow {
                assert!(!proof.verify(&key, &leaf, &good));
                assert!(!proof.verify(&key, &leaf, &ComputedNode::new(good.hash, u64::MAX)));
            }
        }
    };
    run_case(Leaf::new(b"v".to_vec(), 1));
    run_case(Leaf::new(b"v".to_vec(), 0));
    run_case(Leaf::new(Vec::new(), u64::MAX));
}

// ---------------------------------------------------------------------------
// Batch == sequential == fresh build from the final map
// ---------------------------------------------------------------------------

async fn batch_seq_fresh<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    let ((a, ma), (b, mb)) = batch_vs_loop::<L>(&case.batches).await?;
    let ra = root(&a).await?;
    let c = fresh::<L>(&ma).await?;
    prop_assert_eq!(ra, root(&c).await?);
    let d = fresh::<L>(&mb).await?;
    prop_assert_eq!(root(&b).await?, root(&d).await?);
    Ok(())
}
both_layouts! {
    batch_eq_sequential_eq_fresh, case_s(1..=24, 1..=4, 0..=32, 1), batch_seq_fresh
}

// ---------------------------------------------------------------------------
// Full layout == compacted layout: roots and proofs
// ---------------------------------------------------------------------------

async fn layouts_agree_impl(case: Case) -> Result<(), TestCaseError> {
    let full = new_tree::<Full>();
    let compacted = new_tree::<Compacted>();
    let mut mf = Model::new();
    let mut mc = Model::new();
    let probes = probe_keys(&case);
    for (i, batch) in case.batches.iter().enumerate() {
        let mode = case.modes[i % case.modes.len()];
        let rf = apply(&full, &mut mf, batch, mode).await?;
        let rc = apply(&compacted, &mut mc, batch, mode).await?;
        prop_assert_eq!(rf, rc);
        prop_assert_eq!(&mf, &mc);
        let root_f = root(&full).await?;
        prop_assert_eq!(root_f, root(&compacted).await?);
        let pf = full.merkle_proofs(&probes).await.map_err(fail)?;
        let pc = compacted.merkle_proofs(&probes).await.map_err(fail)?;
        prop_assert_eq!(&pf, &pc);
        let lf = full.get_many(&probes).await.map_err(fail)?;
        let lc = compacted.get_many(&probes).await.map_err(fail)?;
        prop_assert_eq!(&lf, &lc);
        for ((key, proof), leaf) in probes.iter().zip(&pf).zip(&lf) {
            prop_assert_eq!(leaf, &model_get(&mf, key));
            prop_assert!(proof.verify(key, leaf, &root_f));
        }
        // The single-key calls agree with the batched ones.
        for (key, proof) in probes.iter().zip(&pf).take(4) {
            prop_assert_eq!(&full.merkle_proof(key).await.map_err(fail)?, proof);
            prop_assert_eq!(&compacted.merkle_proof(key).await.map_err(fail)?, proof);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(CASES))]
    #[test]
    fn full_and_compacted_agree(case in case_s(1..=24, 1..=4, 0..=32, 1)) {
        run(layouts_agree_impl(case))?;
    }
}

// ---------------------------------------------------------------------------
// Duplicate keys in one insert_many: the last one wins
// ---------------------------------------------------------------------------

async fn duplicates_last_wins<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    // Start from a populated tree so duplicates also hit existing leaves.
    let (a, mut ma, _) = seeded::<L>(&case.batches[0], Mode::Batch).await?;
    let (b, mut mb, _) = seeded::<L>(&case.batches[0], Mode::Batch).await?;
    let batch = &case.batches[1];
    let accepted = write(&a, &mut ma, batch, false).await?;
    let rejected = apply(&b, &mut mb, batch, Mode::Loop).await?;
    if accepted {
        // Independent oracle: the last occurrence of each key.
        for key in &case.keys {
            let last = batch
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, l)| l.clone());
            if let Some(last) = last {
                prop_assert_eq!(a.get(key).await.map_err(fail)?, last);
            }
        }
    }
    check_agree((&a, &ma), (&b, &mb), rejected).await
}
both_layouts! {
    duplicate_keys_last_wins, case_s(1..=4, 2..=2, 1..=32, 1), duplicates_last_wins
}

// ---------------------------------------------------------------------------
// Twin subtrees: equal leaves at keys differing in 1-3 bits
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct TwinCase {
    twins: Vec<Key>,
    leaf: Leaf,
    others: Vec<(Key, Leaf)>,
    build: Mode,
    victim: usize,
    replacement: Leaf,
    later: Vec<(Key, Leaf)>,
    later_mode: Mode,
    clear_mode: Mode,
}

fn mode_s() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Batch), Just(Mode::Loop)]
}

fn twin_case() -> impl Strategy<Value = TwinCase> {
    (
        any::<[u8; 32]>(),
        vec(bit_pos(), 1..=3),
        pool_leaf(),
        vec(key_r(), 0..=6),
        vec((any::<usize>(), leaf_r(1)), 0..=6),
        (mode_s(), mode_s(), mode_s()),
        any::<usize>(),
        prop_oneof![1 => Just(None), 1 => pool_leaf().prop_map(Some)],
        vec((any::<usize>(), leaf_r(1)), 0..=12),
    )
        .prop_map(
            |(base, mut bits, leaf, other_keys, other_leaves, modes, victim, repl, later_rs)| {
                bits.sort_unstable();
                bits.dedup();
                let base = Key(base);
                let twins: Vec<Key> = (0..1usize << bits.len())
                    .map(|mask| {
                        let chosen: Vec<usize> = bits
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| (mask >> i) & 1 == 1)
                            .map(|(_, b)| *b)
                            .collect();
                        flip(base, &chosen)
                    })
                    .collect();
                let victim = victim % twins.len();
                let mut replacement = repl.unwrap_or_default();
                if replacement == leaf {
                    replacement =
                        Leaf::new(b"changed".to_vec(), leaf.sum().wrapping_add(1) % SMALL_MAX);
                }
                // Other keys near the twins; the pool makes some of their
                // leaves equal to the twins' leaf.
                let pool = vec![leaf.clone(), replacement.clone()];
                let mut all_keys = twins.clone();
                all_keys.extend(materialize_keys(base.0, &other_keys));
                let others: Vec<(Key, Leaf)> = other_leaves
                    .iter()
                    .enumerate()
                    .map(|(i, (_, lr))| {
                        let k = all_keys[(twins.len() + i) % all_keys.len()];
                        (k, materialize_leaf(lr, &pool))
                    })
                    .filter(|(k, _)| !twins.contains(k))
                    .collect();
                let later = later_rs
                    .iter()
                    .map(|(i, lr)| (all_keys[i % all_keys.len()], materialize_leaf(lr, &pool)))
                    .collect();
                TwinCase {
                    twins,
                    leaf,
                    others,
                    build: modes.0,
                    victim,
                    replacement,
                    later,
                    later_mode: modes.1,
                    clear_mode: modes.2,
                }
            },
        )
}

async fn twins_impl<L: Layout>(c: TwinCase) -> Result<(), TestCaseError> {
    let (tree, mut model) = empty::<L>();
    let mut setup: Vec<(Key, Leaf)> = c.others.clone();
    setup.extend(c.twins.iter().map(|k| (*k, c.leaf.clone())));
    apply(&tree, &mut model, &setup, c.build).await?;
    for k in &c.twins {
        check_key(&tree, &model, k).await?;
    }

    // Delete or replace one twin; the others stay readable and provable.
    let victim = c.twins[c.victim];
    if write(&tree, &mut model, &[(victim, c.replacement.clone())], true).await? {
        prop_assert_eq!(
            tree.get(&victim).await.map_err(fail)?,
            c.replacement.clone()
        );
    }
    for k in &c.twins {
        check_key(&tree, &model, k).await?;
    }
    for (k, _) in &c.others {
        check_key(&tree, &model, k).await?;
    }

    // Further writes, then compare with a fresh build of the final map.
    apply(&tree, &mut model, &c.later, c.later_mode).await?;
    for k in c.twins.iter().chain(c.others.iter().map(|(k, _)| k)) {
        check_key(&tree, &model, k).await?;
    }
    check_as_fresh(&tree, &model, "twins").await?;

    // Deleting everything leaves nothing behind.
    clear_all(&tree, &mut model, c.clear_mode).await
}
both_layouts!(twin_subtrees, twin_case(), twins_impl);

/// A new tree holding `leaf` at both `a` and `b`, written by one
/// `insert_many`.
async fn twins_of<L: Layout>(a: Key, b: Key, leaf: &Leaf) -> Result<(T<L>, Model), TestCaseError> {
    let (tree, mut model) = empty::<L>();
    let batch = [(a, leaf.clone()), (b, leaf.clone())];
    write(&tree, &mut model, &batch, false).await?;
    Ok((tree, model))
}

/// Spec §9 B3: keys `00..` and `01 00..` with the same leaf; delete the
/// first, the second must stay readable; later writes must build right roots.
async fn twin_bit0_impl<L: Layout>() -> Result<(), TestCaseError> {
    let a = Key([0; 32]);
    let b = flip(a, &[0]);
    let leaf = Leaf::new(b"same".to_vec(), 5);
    let (tree, mut model) = twins_of::<L>(a, b, &leaf).await?;
    write(&tree, &mut model, &[(a, Leaf::empty())], true).await?;
    check_key(&tree, &model, &b).await?;
    prop_assert_eq!(tree.get(&b).await.map_err(fail)?, leaf.clone());
    write(
        &tree,
        &mut model,
        &[(flip(a, &[1]), Leaf::new(b"c".to_vec(), 6))],
        true,
    )
    .await?;
    check_key(&tree, &model, &b).await?;
    prop_assert_eq!(root(&tree).await?.sum, 11);
    let f = fresh::<L>(&model).await?;
    assert_same_rows(&rows(&tree)?, &rows(&f)?, "twin bit 0")?;
    clear_all(&tree, &mut model, Mode::Loop).await
}
both_layouts_det!(twin_bit0_delete_one, twin_bit0_impl);

/// Spec §9.1 G255: keys differing only in bit 255, delete one, then write to
/// that slot again, through both the single and the batched path.
async fn twin_bit255_impl<L: Layout>() -> Result<(), TestCaseError> {
    for batched in [false, true] {
        let a = Key([0x3c; 32]);
        let b = flip(a, &[255]);
        let leaf = Leaf::new(b"same".to_vec(), 5);
        let (tree, mut model) = twins_of::<L>(a, b, &leaf).await?;
        write(&tree, &mut model, &[(b, Leaf::empty())], !batched).await?;
        check_key(&tree, &model, &a).await?;
        check_key(&tree, &model, &b).await?;
        write(
            &tree,
            &mut model,
            &[(b, Leaf::new(b"back".to_vec(), 7))],
            !batched,
        )
        .await?;
        check_key(&tree, &model, &a).await?;
        check_key(&tree, &model, &b).await?;
        write(&tree, &mut model, &[(a, Leaf::empty())], !batched).await?;
        write(&tree, &mut model, &[(a, leaf.clone())], !batched).await?;
        check_key(&tree, &model, &a).await?;
        check_as_fresh(&tree, &model, "twin bit 255").await?;
        clear_all(&tree, &mut model, Mode::Batch).await?;
    }
    Ok(())
}
both_layouts_det!(twin_bit255_delete_and_rewrite, twin_bit255_impl);

// ---------------------------------------------------------------------------
// Reference-count hygiene: the row set equals a fresh build's
// ---------------------------------------------------------------------------

async fn refcount_impl<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    let (tree, mut model) = empty::<L>();
    for (i, batch) in case.batches.iter().enumerate() {
        apply(&tree, &mut model, batch, case.modes[i % case.modes.len()]).await?;
        check_as_fresh(&tree, &model, &format!("after batch {i}")).await?;
    }
    clear_all(&tree, &mut model, case.modes[7]).await
}
both_layouts! {
    refcount_hygiene, case_s(1..=24, 1..=5, 0..=32, 1), refcount_impl
}

// ---------------------------------------------------------------------------
// Overflow atomicity under random large sums
// ---------------------------------------------------------------------------

async fn overflow_impl<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    // `write` checks: accepted iff the final u128 total fits; a rejection is
    // an overflow error mentioning "integer overflow" that leaves the rows
    // and the root unchanged.
    let (tree, mut model) = empty::<L>();
    for (i, batch) in case.batches.iter().enumerate() {
        apply(&tree, &mut model, batch, case.modes[i % case.modes.len()]).await?;
    }
    for key in case.keys.iter().take(8) {
        check_key(&tree, &model, key).await?;
    }
    Ok(())
}
both_layouts! {
    overflow_atomicity, case_s(1..=12, 1..=4, 1..=12, 12), overflow_impl
}

// ---------------------------------------------------------------------------
// Small deterministic spec §7 checks
// ---------------------------------------------------------------------------

async fn empty_and_delete_all_impl<L: Layout>() -> Result<(), TestCaseError> {
    let tree = new_tree::<L>();
    // Empty batch: no-op; absent key: empty leaf.
    prop_assert_eq!(
        tree.insert_many(Vec::new()).await.map_err(fail)?,
        ComputedNode::empty_root()
    );
    prop_assert_eq!(tree.get(&key_n(9)).await.map_err(fail)?, Leaf::empty());
    let mut model = Model::new();
    let batch: Vec<(Key, Leaf)> = (1..=8)
        .map(|i| (key_n(i), Leaf::new(vec![i], u64::from(i))))
        .collect();
    write(&tree, &mut model, &batch, false).await?;
    let before = rows(&tree)?;
    let r = root(&tree).await?;
    prop_assert_eq!(tree.insert_many(Vec::new()).await.map_err(fail)?, r);
    prop_assert_eq!(rows(&tree)?, before.clone());
    // Deleting absent keys changes nothing (spec B2 avoided).
    write(
        &tree,
        &mut model,
        &[
            (key_n(100), Leaf::empty()),
            (flip(key_n(1), &[255]), Leaf::empty()),
        ],
        false,
    )
    .await?;
    prop_assert_eq!(rows(&tree)?, before);
    clear_all(&tree, &mut model, Mode::Loop).await?;
    // delete_all clears rows and root.
    write(&tree, &mut model, &batch, false).await?;
    tree.delete_all().await.map_err(fail)?;
    prop_assert_eq!(root(&tree).await?, ComputedNode::empty_root());
    prop_assert_eq!(tree.store().node_count().map_err(fail)?, 0);
    prop_assert_eq!(tree.get(&key_n(1)).await.map_err(fail)?, Leaf::empty());
    Ok(())
}
both_layouts_det!(
    empty_batch_absent_keys_delete_all,
    empty_and_delete_all_impl
);

/// Writing a leaf equal to the one already stored at that key is a no-op
/// write that must succeed (history independence; §3.6 net rule).
async fn rewrite_same_leaf_impl<L: Layout>() -> Result<(), TestCaseError> {
    let k = key_n(3);
    let leaf = Leaf::new(b"a".to_vec(), 5);
    for single in [true, false] {
        let (tree, mut model) = empty::<L>();
        write(&tree, &mut model, &[(k, leaf.clone())], single).await?;
        write(&tree, &mut model, &[(k, leaf.clone())], single).await?;
        prop_assert_eq!(root(&tree).await?.sum, 5);
        // Near u64::MAX the rewrite still fits exactly.
        let big = Leaf::new(b"big".to_vec(), u64::MAX);
        write(&tree, &mut model, &[(k, big.clone())], single).await?;
        write(&tree, &mut model, &[(k, big)], single).await?;
    }
    Ok(())
}
both_layouts_det!(rewrite_identical_leaf, rewrite_same_leaf_impl);

// ---------------------------------------------------------------------------
// Proof decoding
// ---------------------------------------------------------------------------

fn check_decode(bytes: &[u8]) -> Result<(), TestCaseError> {
    // What the strict decoder must answer (spec §4.4, C3 option b).
    let expect = props::ref_decode_strict(bytes).map(|_| ());
    let decoded = CompressedProof::decode(bytes);
    let proof = Proof::from_bytes(bytes);
    match (&expect, decoded, proof) {
        (Ok(()), Ok(c), Ok(p)) => {
            prop_assert_eq!(c.encode(), bytes.to_vec());
            prop_assert_eq!(&c.decompress().map_err(fail)?, &p);
            prop_assert_eq!(p.to_bytes(), bytes.to_vec());
            prop_assert_eq!(p.compress(), c);
        }
        (Err(e), Err(d), Err(f)) => {
            prop_assert_eq!(&d, e);
            prop_assert_eq!(&f, e);
        }
        (e, d, f) => {
            return Err(TestCaseError::fail(format!(
                "expected {e:?}; decode gave {d:?}; from_bytes gave {f:?}"
            )));
        }
    }
    Ok(())
}

/// Bytes near the wire format: a bitmap biased towards empty siblings, a
/// node count that usually matches it, random nodes (sometimes one equal to
/// its level's empty hash), and sometimes a length that is off.
fn proof_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        vec(
            prop_oneof![6 => Just(0xffu8), 1 => Just(0u8), 2 => any::<u8>()],
            32,
        ),
        prop_oneof![8 => Just(0i32), 1 => -2i32..=2, 1 => -300i32..=300],
        vec(any::<[u8; 32]>(), 0..=64),
        any::<u64>(),
        prop_oneof![6 => Just(None), 1 => any::<usize>().prop_map(Some)],
        prop_oneof![8 => Just(0i32), 1 => -80i32..=80],
        any::<u8>(),
    )
        .prop_map(
            |(bitmap, count_delta, hashes, sum, empty_at, len_delta, fill)| {
                let clear: Vec<usize> = (0..256)
                    .filter(|j| (bitmap[j / 8] >> (j % 8)) & 1 == 0)
                    .collect();
                let count = (clear.len() as i32 + count_delta).clamp(0, u16::MAX as i32) as usize;
                let mut out = (count as u16).to_be_bytes().to_vec();
                for n in 0..count.min(300) {
                    let mut h = if hashes.is_empty() {
                        [fill; 32]
                    } else {
                        hashes[n % hashes.len()]
                    };
                    if empty_at.is_some_and(|e| e % count.max(1) == n) && n < clear.len() {
                        h = empty_hash(256 - clear[n]).0;
                    }
                    out.extend_from_slice(&h);
                    out.extend_from_slice(&sum.wrapping_add(n as u64).to_be_bytes());
                }
                out.extend_from_slice(&bitmap);
                if len_delta < 0 {
                    out.truncate(out.len().saturating_sub(len_delta.unsigned_abs() as usize));
                } else {
                    out.extend(std::iter::repeat_n(fill, len_delta as usize));
                }
                out
            },
        )
}

proptest! {
    #![proptest_config(config(PROOF_CASES * 4))]

    /// Arbitrary bytes: never panics, and the typed answer is the expected one.
    #[test]
    fn decode_arbitrary_bytes_never_panics(bytes in vec(any::<u8>(), 0..600)) {
        check_decode(&bytes)?;
    }

    /// Bytes shaped like proofs reach every decoder branch.
    #[test]
    fn decode_structured_bytes(bytes in proof_bytes()) {
        check_decode(&bytes)?;
    }

    /// Encode → decode round trip of generated proofs; and the same proof
    /// with one byte changed or cut still never panics.
    #[test]
    fn encode_decode_round_trip(c in proof_case((0..=SMALL_MAX).boxed()), at in any::<usize>(), x in 1u8..) {
        let proof = Proof::new(c.siblings.clone()).map_err(fail)?;
        check_proof_codec(&proof)?;
        let bytes = proof.to_bytes();
        check_decode(&bytes)?;
        let mut changed = bytes.clone();
        let i = at % changed.len();
        changed[i] ^= x;
        check_decode(&changed)?;
        check_decode(&bytes[..at % bytes.len()])?;
    }
}

/// A real proof from a small tree, with several explicit and empty siblings.
fn sample_proof() -> (Proof, Vec<u8>) {
    run(async {
        let tree = new_tree::<Compacted>();
        let base = Key([0x11; 32]);
        let batch: Vec<(Key, Leaf)> = [vec![], vec![0], vec![3], vec![200], vec![255]]
            .iter()
            .map(|bits| {
                (
                    flip(base, bits),
                    Leaf::new(b"v".to_vec(), 1 + bits.len() as u64),
                )
            })
            .collect();
        tree.insert_many(batch).await.unwrap();
        let proof = tree.merkle_proof(&base).await.unwrap();
        let bytes = proof.to_bytes();
        (proof, bytes)
    })
}

#[test]
fn decode_typed_errors() {
    let (proof, bytes) = sample_proof();
    let compressed = proof.compress();
    let n = compressed.nodes().len();
    assert!(n >= 3, "sample proof has {n} explicit nodes");
    assert_eq!(bytes.len(), 34 + 40 * n);
    assert_eq!(Proof::from_bytes(&bytes), Ok(proof.clone()));

    // Empty input.
    assert_eq!(Proof::from_bytes(&[]), Err(DecodeError::Empty));
    assert_eq!(CompressedProof::decode(&[]), Err(DecodeError::Empty));
    // Go's TestNewProofFromCompressedBytes short inputs.
    assert_eq!(
        Proof::from_bytes(&[1]),
        Err(DecodeError::Truncated { needed: 2, got: 1 })
    );
    assert_eq!(
        Proof::from_bytes(&[0, 1]),
        Err(DecodeError::Truncated { needed: 74, got: 2 })
    );

    // Short bitmap: a valid proof with its last byte removed (Go accepts it).
    let short = &bytes[..bytes.len() - 1];
    let want = DecodeError::Truncated {
        needed: bytes.len(),
        got: bytes.len() - 1,
    };
    assert_eq!(Proof::from_bytes(short), Err(want.clone()));
    assert_eq!(CompressedProof::decode(short), Err(want));

    // Trailing bytes.
    let mut long = bytes.clone();
    long.extend_from_slice(&[0xff, 0xff]);
    assert_eq!(
        Proof::from_bytes(&long),
        Err(DecodeError::TrailingBytes { extra: 2 })
    );

    // Count/bitmap mismatch: clear the bit of an empty sibling...
    let bitmap_at = bytes.len() - 32;
    let empty_j = (0..256).find(|&j| compressed.is_empty_sibling(j)).unwrap();
    let mut more = bytes.clone();
    more[bitmap_at + empty_j / 8] &= !(1 << (empty_j % 8));
    assert_eq!(
        Proof::from_bytes(&more),
        Err(DecodeError::CountMismatch {
            nodes: n,
            expected: n + 1
        })
    );
    // ...or set the bit of an explicit one.
    let full_j = (0..256).find(|&j| !compressed.is_empty_sibling(j)).unwrap();
    let mut fewer = bytes.clone();
    fewer[bitmap_at + full_j / 8] |= 1 << (full_j % 8);
    assert_eq!(
        CompressedProof::decode(&fewer),
        Err(DecodeError::CountMismatch {
            nodes: n,
            expected: n - 1
        })
    );
    // Go's cases: 2 nodes with 1 clear bit; 0 nodes with 2 clear bits. The
    // nodes are 0x42 bytes; the bitmap is all ones but for its first byte.
    for (nodes, bitmap0, expected) in [(2u8, 0xfeu8, 1), (0, 0xfc, 2)] {
        let mut go = vec![0u8, nodes];
        go.extend(std::iter::repeat_n(0x42u8, 40 * usize::from(nodes)));
        go.push(bitmap0);
        go.extend_from_slice(&[0xff; 31]);
        assert_eq!(
            Proof::from_bytes(&go),
            Err(DecodeError::CountMismatch {
                nodes: usize::from(nodes),
                expected
            })
        );
    }

    // An explicit node equal to the empty hash of its level: clear the bit of
    // an empty sibling and spell the empty node out at its position.
    let before = (0..empty_j)
        .filter(|&j| !compressed.is_empty_sibling(j))
        .count();
    let mut spelled = ((n + 1) as u16).to_be_bytes().to_vec();
    for (i, node) in compressed.nodes().iter().enumerate() {
        if i == before {
            spelled.extend_from_slice(&empty_hash(256 - empty_j).0);
            spelled.extend_from_slice(&0u64.to_be_bytes());
        }
        spelled.extend_from_slice(&node.hash.0);
        spelled.extend_from_slice(&node.sum.to_be_bytes());
    }
    if before == n {
        spelled.extend_from_slice(&empty_hash(256 - empty_j).0);
        spelled.extend_from_slice(&0u64.to_be_bytes());
    }
    let mut bitmap = *compressed.bitmap();
    bitmap[empty_j / 8] &= !(1 << (empty_j % 8));
    spelled.extend_from_slice(&bitmap);
    assert_eq!(
        Proof::from_bytes(&spelled),
        Err(DecodeError::NonCanonicalEmpty { index: empty_j })
    );
    // The same node with a different hash is accepted: only canonicity failed.
    let pos = 2 + 40 * before;
    spelled[pos] ^= 1;
    assert!(CompressedProof::decode(&spelled).is_ok());

    // The empty tree's proof: 34 bytes, `0000 ff×32`.
    let empty = Proof::empty().to_bytes();
    assert_eq!(hex::encode(&empty), format!("0000{}", "ff".repeat(32)));
    assert_eq!(Proof::from_bytes(&empty), Ok(Proof::empty()));
}
