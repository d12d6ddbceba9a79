//! Sum proofs of prefixes and key ranges ([`SumProof`]).
//!
//! * `covering_partitions_the_range`: the covering set of a random range
//!   is in tree order, disjoint, without gaps, starts at the range's first
//!   key and ends at its last, is maximal (no parent lies inside the range)
//!   and has at most 2 × 256 subtrees; checked against a bit-by-bit order
//!   independent of [`Key`]'s `Ord`.
//! * `sums_match_the_model` (memory, SQLite, Postgres, `*_cold`; both
//!   layouts): on random trees, range and prefix proofs give the model's
//!   sum (computed bit by bit from the leaves), verify against the root,
//!   round trip through the wire format, are byte-identical on both
//!   layouts, fail against another root, give the right total (or fail)
//!   for another range, and keep to the size targets (prefix: one
//!   compressed leaf proof + 40 bytes, + 41 at levels 255 and 256, plus
//!   the leaf's value where one is revealed; range: 2 × 256 × 40 bytes).
//! * `compacted_leaf_cut_by_a_prefix`: prefixes deep under a lone
//!   compacted leaf and beside it, both layouts.
//! * `value_cannot_cross_the_edge`: moving value between any two explicit
//!   nodes (the attack a branch hash does not see by itself) or changing
//!   any one sum never yields a wrong total.
//! * `mutations_never_give_a_wrong_total`: a deterministic campaign (fixed,
//!   printed seed; `MSSMT_SUM_MUTATIONS` mutated proofs, by default 10^5
//!   in release builds and 10^4 in debug ones):
//!   every byte flipped, covering subtrees dropped or duplicated, sums
//!   changed, slots added or removed, truncations; 0 wrong totals accepted.
//! * `wire_format`: the documented layout and every typed decode error.
//! * `overflow_is_a_typed_error`: sums that overflow u64 are refused with
//!   [`SumProofError::Overflow`].

use crate::support;

use std::cmp::Ordering;
use std::ops::Bound;

use ms_smt::proof::{SumDecodeError, SumProofError};
use ms_smt::store::MemoryStore;
use ms_smt::{
    Compacted, ComputedNode, Full, Key, Layout, LayoutKind, Leaf, Position, SumProof, Tree,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::recipes::{KeyR, flip, key_r, materialize_keys};
use support::suite::*;
use support::{fail, proptest_config, run_cases};

type Range = (Bound<Key>, Bound<Key>);

// ---------------------------------------------------------------------------
// An independent model: tree order bit by bit, sums by filtering
// ---------------------------------------------------------------------------

/// Tree order without [`Key`]'s `Ord`: bit 0 first, LSB-first in bytes.
fn bit_cmp(a: &Key, b: &Key) -> Ordering {
    for d in 0..256 {
        let (x, y) = (a.0[d / 8] >> (d % 8) & 1, b.0[d / 8] >> (d % 8) & 1);
        if x != y {
            return x.cmp(&y);
        }
    }
    Ordering::Equal
}

fn in_range(range: &Range, k: &Key) -> bool {
    let lo = match &range.0 {
        Bound::Included(a) => bit_cmp(k, a) != Ordering::Less,
        Bound::Excluded(a) => bit_cmp(k, a) == Ordering::Greater,
        Bound::Unbounded => true,
    };
    let hi = match &range.1 {
        Bound::Included(b) => bit_cmp(k, b) != Ordering::Greater,
        Bound::Excluded(b) => bit_cmp(k, b) == Ordering::Less,
        Bound::Unbounded => true,
    };
    lo && hi
}

fn under(pos: &Position, k: &Key) -> bool {
    (0..pos.level()).all(|d| k.bit(d) == pos.path().bit(d))
}

fn range_sum(leaves: &[(Key, Leaf)], range: &Range) -> u64 {
    leaves
        .iter()
        .filter(|(k, _)| in_range(range, k))
        .map(|(_, l)| l.sum())
        .sum()
}

fn prefix_sum(leaves: &[(Key, Leaf)], pos: &Position) -> u64 {
    leaves
        .iter()
        .filter(|(k, _)| under(pos, k))
        .map(|(_, l)| l.sum())
        .sum()
}

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

/// Where a range endpoint or a prefix comes from.
#[derive(Clone, Debug)]
enum KeyPick {
    /// A leaf's key.
    Leaf(usize),
    /// A leaf's key with bits flipped.
    Near(usize, Vec<usize>),
    Fresh([u8; 32]),
    Zero,
    Ones,
}

#[derive(Clone, Debug)]
enum BoundR {
    Included(KeyPick),
    Excluded(KeyPick),
    Unbounded,
}

#[derive(Clone, Debug)]
struct Case {
    base: [u8; 32],
    keys: Vec<KeyR>,
    leaves: Vec<(Vec<u8>, u64)>,
    ranges: Vec<(BoundR, BoundR)>,
    prefixes: Vec<(KeyPick, usize)>,
}

fn key_pick() -> impl Strategy<Value = KeyPick> {
    prop_oneof![
        4 => any::<usize>().prop_map(KeyPick::Leaf),
        3 => (any::<usize>(), vec(prop_oneof![Just(255usize), 240usize..256, 0usize..256], 1..=2))
            .prop_map(|(i, b)| KeyPick::Near(i, b)),
        1 => any::<[u8; 32]>().prop_map(KeyPick::Fresh),
        1 => Just(KeyPick::Zero),
        1 => Just(KeyPick::Ones),
    ]
}

fn bound_r() -> impl Strategy<Value = BoundR> {
    prop_oneof![
        4 => key_pick().prop_map(BoundR::Included),
        4 => key_pick().prop_map(BoundR::Excluded),
        1 => Just(BoundR::Unbounded),
    ]
}

fn level() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(256usize),
        Just(255usize),
        0usize..=8,
        0usize..=24,
        240usize..=256,
        0usize..=256,
    ]
}

fn case(max_leaves: usize) -> impl Strategy<Value = Case> {
    let sum = prop_oneof![
        6 => 0u64..1000,
        1 => Just(0u64),
        1 => (u64::MAX >> 8)..(u64::MAX >> 7),
    ];
    (
        any::<[u8; 32]>(),
        vec(key_r(), 0..=max_leaves),
        vec((vec(any::<u8>(), 0..6), sum), max_leaves + 1),
        vec((bound_r(), bound_r()), 1..=6),
        vec((key_pick(), level()), 1..=6),
    )
        .prop_map(|(base, keys, leaves, ranges, prefixes)| Case {
            base,
            keys,
            leaves,
            ranges,
            prefixes,
        })
}

impl Case {
    /// Distinct keys with non-empty leaves, in tree order.
    fn leaves(&self) -> Vec<(Key, Leaf)> {
        let mut out: Vec<(Key, Leaf)> = materialize_keys(self.base, &self.keys)
            .into_iter()
            .zip(&self.leaves)
            .map(|(k, (v, s))| (k, Leaf::new(v.clone(), *s)))
            .filter(|(_, l)| !l.is_empty())
            .collect();
        out.sort_by(|a, b| bit_cmp(&a.0, &b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }

    fn pick(&self, leaves: &[(Key, Leaf)], p: &KeyPick) -> Key {
        let nth = |i: usize| {
            if leaves.is_empty() {
                Key(self.base)
            } else {
                leaves[i % leaves.len()].0
            }
        };
        match p {
            KeyPick::Leaf(i) => nth(*i),
            KeyPick::Near(i, bits) => flip(nth(*i), bits),
            KeyPick::Fresh(k) => Key(*k),
            KeyPick::Zero => Key([0; 32]),
            KeyPick::Ones => Key([0xff; 32]),
        }
    }

    fn ranges(&self, leaves: &[(Key, Leaf)]) -> Vec<Range> {
        let b = |r: &BoundR| match r {
            BoundR::Included(p) => Bound::Included(self.pick(leaves, p)),
            BoundR::Excluded(p) => Bound::Excluded(self.pick(leaves, p)),
            BoundR::Unbounded => Bound::Unbounded,
        };
        self.ranges.iter().map(|(s, e)| (b(s), b(e))).collect()
    }

    fn prefixes(&self, leaves: &[(Key, Leaf)]) -> Vec<Position> {
        self.prefixes
            .iter()
            .map(|(p, level)| Position::new(*level, &self.pick(leaves, p)))
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Covering set
// ---------------------------------------------------------------------------

fn next_key(k: &Key) -> Option<Key> {
    let d = (0..256).rev().find(|&d| !k.bit(d))?;
    let mut out = k.with_bit(d, true);
    for lower in d + 1..256 {
        out = out.with_bit(lower, false);
    }
    Some(out)
}

/// The first and last keys of `range`, or `None` when it is empty.
fn first_last(range: &Range) -> Option<(Key, Key)> {
    let prev = |k: &Key| {
        let d = (0..256).rev().find(|&d| k.bit(d))?;
        let mut out = k.with_bit(d, false);
        for lower in d + 1..256 {
            out = out.with_bit(lower, true);
        }
        Some(out)
    };
    let first = match &range.0 {
        Bound::Included(a) => *a,
        Bound::Excluded(a) => next_key(a)?,
        Bound::Unbounded => Key([0; 32]),
    };
    let last = match &range.1 {
        Bound::Included(b) => *b,
        Bound::Excluded(b) => prev(b)?,
        Bound::Unbounded => Key([0xff; 32]),
    };
    (bit_cmp(&first, &last) != Ordering::Greater).then_some((first, last))
}

fn check_covering(range: &Range) -> Result<(), TestCaseError> {
    let cover = SumProof::covering(*range);
    prop_assert!(cover.len() <= 512, "{} subtrees", cover.len());
    let Some((first, last)) = first_last(range) else {
        prop_assert!(cover.is_empty(), "empty range covered by {:?}", cover);
        return Ok(());
    };
    prop_assert!(!cover.is_empty());
    prop_assert_eq!(*cover[0].path(), first);
    prop_assert_eq!(cover[cover.len() - 1].last_key(), last);
    for w in cover.windows(2) {
        prop_assert_eq!(
            next_key(&w[0].last_key()),
            Some(*w[1].path()),
            "gap or overlap"
        );
    }
    for pos in &cover {
        prop_assert!(in_range(range, pos.path()) && in_range(range, &pos.last_key()));
        if pos.level() > 0 {
            let parent = Position::new(pos.level() - 1, pos.path());
            prop_assert!(
                !(in_range(range, parent.path()) && in_range(range, &parent.last_key())),
                "{:?} is not maximal",
                pos
            );
        }
    }
    Ok(())
}

#[test]
fn covering_partitions_the_range() {
    let strategy = (any::<[u8; 32]>(), vec((bound_r(), bound_r()), 1..=8));
    run_cases(
        "covering_partitions_the_range",
        "pure",
        proptest_config(256, 256),
        &strategy,
        |(base, ranges)| {
            let c = Case {
                base,
                keys: vec![],
                leaves: vec![],
                ranges,
                prefixes: vec![],
            };
            for r in c.ranges(&[]) {
                check_covering(&r)?;
            }
            // Prefixes: one subtree, the prefix itself.
            for level in [0, 1, 7, 100, 255, 256] {
                let pos = Position::new(level, &Key(base));
                let cover = SumProof::covering(*pos.path()..=pos.last_key());
                prop_assert_eq!(cover, vec![pos]);
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// Sums against the model, on every store
// ---------------------------------------------------------------------------

/// Bytes a prefix proof may take beyond the compressed leaf proof of a key
/// under it: the 40 of the target; one more at levels 255 and 256, where
/// the bitmap can need a 33rd byte (257 slots); and a revealed leaf's
/// value and framing.
fn prefix_allowance(level: usize, proof: &SumProof) -> usize {
    let bitmap = if level >= 255 { 41 } else { 40 };
    bitmap
        + proof
            .leaves()
            .iter()
            .map(|l| 12 + l.value().len())
            .sum::<usize>()
}

async fn sums_layout<S: TestStore, L: Layout>(
    base: &S,
    leaves: &[(Key, Leaf)],
    ranges: &[Range],
    prefixes: &[Position],
) -> Result<Vec<Vec<u8>>, TestCaseError> {
    let lay = layout_name::<L>();
    let tree: Tree<S, L> = Tree::new(base.handle(&support::unique("sum")));
    if !leaves.is_empty() {
        tree.insert_many(leaves.to_vec()).await.map_err(fail)?;
    }
    let root = tree.root().await.map_err(fail)?;
    let other_root = ComputedNode::new(root.hash, root.sum.wrapping_add(1));
    let mut encodings = Vec::new();
    for range in ranges {
        let want = range_sum(leaves, range);
        let (r, total, proof) = tree.range_sum_proof(*range).await.map_err(fail)?;
        prop_assert_eq!(r, root);
        prop_assert_eq!(total, want, "{} range {:?} total", lay, range);
        prop_assert_eq!(
            proof.verify_range(*range, &root),
            Ok(want),
            "{} verify",
            lay
        );
        let bytes = proof.encode();
        prop_assert!(
            bytes.len() <= 2 * 256 * 40,
            "{} range proof of {} bytes",
            lay,
            bytes.len()
        );
        prop_assert_eq!(
            SumProof::decode(&bytes),
            Ok(proof.clone()),
            "{} round trip",
            lay
        );
        prop_assert!(proof.verify_range(*range, &other_root).is_err());
        // Any other range: the right total or a refusal.
        for other in ranges {
            if let Ok(t) = proof.verify_range(*other, &root) {
                prop_assert_eq!(
                    t,
                    range_sum(leaves, other),
                    "{} accepted for {:?}",
                    lay,
                    other
                );
            }
        }
        encodings.push(bytes);
    }
    for pos in prefixes {
        let want = prefix_sum(leaves, pos);
        let (r, total, proof) = tree.prefix_sum_proof(*pos).await.map_err(fail)?;
        prop_assert_eq!(r, root);
        prop_assert_eq!(total, want, "{} prefix {:?} total", lay, pos);
        prop_assert_eq!(proof.verify_prefix(pos, &root), Ok(want));
        prop_assert_eq!(
            proof.verify_range(*pos.path()..=pos.last_key(), &root),
            Ok(want)
        );
        let bytes = proof.encode();
        prop_assert_eq!(SumProof::decode(&bytes), Ok(proof.clone()));
        let leaf_proof = tree
            .merkle_proof(pos.path())
            .await
            .map_err(fail)?
            .to_bytes();
        prop_assert!(
            bytes.len() <= leaf_proof.len() + prefix_allowance(pos.level(), &proof),
            "{} prefix at level {}: {} bytes, leaf proof {}",
            lay,
            pos.level(),
            bytes.len(),
            leaf_proof.len()
        );
        prop_assert!(proof.verify_prefix(pos, &other_root).is_err());
        for other in prefixes.iter().filter(|p| *p != pos) {
            if let Ok(t) = proof.verify_prefix(other, &root) {
                prop_assert_eq!(
                    t,
                    prefix_sum(leaves, other),
                    "{} accepted for {:?}",
                    lay,
                    other
                );
            }
        }
        encodings.push(bytes);
    }
    tree.delete_all().await.map_err(fail)?;
    Ok(encodings)
}

async fn sums_case<S: TestStore>(base: &S, case: Case) -> Result<(), TestCaseError> {
    let leaves = case.leaves();
    let ranges = case.ranges(&leaves);
    let prefixes = case.prefixes(&leaves);
    let full = sums_layout::<S, Full>(base, &leaves, &ranges, &prefixes).await?;
    let compacted = sums_layout::<S, Compacted>(base, &leaves, &ranges, &prefixes).await?;
    prop_assert!(full == compacted, "full and compacted proofs differ");
    Ok(())
}

/// Cases per store: the full layout walks 256 levels per boundary key.
const SUM_CASES: u32 = if cfg!(debug_assertions) { 24 } else { 128 };

async fn sums_on<S: TestStore>(base: S) {
    let rt = tokio::runtime::Handle::current();
    let run = tokio::task::spawn_blocking(move || {
        run_cases(
            "sums_match_the_model",
            S::KIND,
            proptest_config(SUM_CASES, 128),
            &case(24),
            |c| rt.block_on(sums_case(&base, c)),
        )
    });
    if let Err(e) = run.await {
        std::panic::resume_unwind(e.into_panic());
    }
}

on_every_store!(sums_match_the_model => sums_on);

// ---------------------------------------------------------------------------
// Deterministic cases
// ---------------------------------------------------------------------------

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

async fn memory_tree<L: Layout>(leaves: &[(Key, Leaf)]) -> Tree<MemoryStore, L> {
    let tree = Tree::new(MemoryStore::new());
    if !leaves.is_empty() {
        tree.insert_many(leaves.to_vec()).await.expect("insert");
    }
    tree
}

#[test]
fn compacted_leaf_cut_by_a_prefix() {
    run(async {
        let a = Key([0; 32]);
        let b = Key([0; 32]).with_bit(0, true);
        let c = b.with_bit(255, true);
        let leaves = vec![
            (a, Leaf::new(b"a".to_vec(), 5)),
            (b, Leaf::new(b"b".to_vec(), 7)),
            (c, Leaf::new(b"c".to_vec(), 11)),
        ];
        let mut bytes = Vec::new();
        for kind in [LayoutKind::Full, LayoutKind::Compacted] {
            let mut out = Vec::new();
            let (root, proofs) = match kind {
                LayoutKind::Full => {
                    let t = memory_tree::<Full>(&leaves).await;
                    (t.root().await.unwrap(), prefix_proofs(&t, &[a, b, c]).await)
                }
                LayoutKind::Compacted => {
                    let t = memory_tree::<Compacted>(&leaves).await;
                    (t.root().await.unwrap(), prefix_proofs(&t, &[a, b, c]).await)
                }
            };
            for (pos, total, proof) in proofs {
                assert_eq!(total, prefix_sum(&leaves, &pos), "{kind:?} {pos:?}");
                assert_eq!(
                    proof.verify_prefix(&pos, &root),
                    Ok(total),
                    "{kind:?} {pos:?}"
                );
                out.push(proof.encode());
            }
            bytes.push(out);
        }
        assert_eq!(bytes[0], bytes[1], "layouts differ");
    });
}

/// Prefix proofs at many levels on each key's path and beside it.
async fn prefix_proofs<L: Layout>(
    tree: &Tree<MemoryStore, L>,
    keys: &[Key],
) -> Vec<(Position, u64, SumProof)> {
    let mut out = Vec::new();
    for k in keys {
        for level in [0, 1, 2, 3, 100, 200, 254, 255, 256] {
            for key in [*k, k.with_bit(level.min(255), !k.bit(level.min(255)))] {
                let pos = Position::new(level, &key);
                let (_, total, proof) = tree.prefix_sum_proof(pos).await.expect("prove");
                out.push((pos, total, proof));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Mutations
// ---------------------------------------------------------------------------

/// A random tree (both layouts agree, so compacted) and proofs with their
/// ranges and true totals.
struct Fixture {
    root: ComputedNode,
    proofs: Vec<(Range, u64, Vec<u8>)>,
}

fn fixture(rng: &mut StdRng, leaves_n: usize, proofs_n: usize) -> Fixture {
    let mut leaves: Vec<(Key, Leaf)> = Vec::new();
    for i in 0..leaves_n {
        let key = if i > 0 && rng.gen_bool(0.3) {
            // Near an earlier key: deep shared prefixes, neighbours at bit 255.
            let k = leaves[rng.gen_range(0..leaves.len())].0;
            let bit = if rng.gen_bool(0.5) {
                255
            } else {
                rng.gen_range(0..256)
            };
            k.with_bit(bit, !k.bit(bit))
        } else {
            Key(rng.r#gen())
        };
        let sum = if rng.gen_bool(0.1) {
            rng.gen_range(0..u64::MAX >> 10)
        } else {
            rng.gen_range(0..1000)
        };
        let value: Vec<u8> = (0..rng.gen_range(0..5)).map(|_| rng.r#gen()).collect();
        leaves.push((key, Leaf::new(value, sum)));
    }
    leaves.retain(|(_, l)| !l.is_empty());
    leaves.sort_by(|a, b| bit_cmp(&a.0, &b.0));
    leaves.dedup_by(|a, b| a.0 == b.0);
    run(async {
        let tree = memory_tree::<Compacted>(&leaves).await;
        let root = tree.root().await.expect("root");
        let mut proofs = Vec::new();
        for _ in 0..proofs_n {
            let pick = |rng: &mut StdRng| -> Key {
                match rng.gen_range(0..4) {
                    0 if !leaves.is_empty() => leaves[rng.gen_range(0..leaves.len())].0,
                    1 if !leaves.is_empty() => {
                        let k = leaves[rng.gen_range(0..leaves.len())].0;
                        k.with_bit(255, !k.bit(255))
                    }
                    _ => Key(rng.r#gen()),
                }
            };
            let range: Range = if rng.gen_bool(0.3) {
                let pos = Position::new(rng.gen_range(0..=256), &pick(rng));
                (
                    Bound::Included(*pos.path()),
                    Bound::Included(pos.last_key()),
                )
            } else {
                let (a, b) = (pick(rng), pick(rng));
                let (a, b) = if bit_cmp(&a, &b) == Ordering::Greater {
                    (b, a)
                } else {
                    (a, b)
                };
                (Bound::Included(a), Bound::Excluded(b))
            };
            let want = range_sum(&leaves, &range);
            let (_, total, proof) = tree.range_sum_proof(range).await.expect("prove");
            assert_eq!(total, want);
            proofs.push((range, want, proof.encode()));
        }
        Fixture { root, proofs }
    })
}

#[derive(Default, Debug)]
struct Tally {
    tried: u64,
    decoded: u64,
    accepted: u64,
    unchanged_total: u64,
    wrong: u64,
}

impl Tally {
    /// Decodes and verifies `bytes`; a verified total must be the true one.
    fn check(&mut self, bytes: &[u8], range: &Range, want: u64, root: &ComputedNode) {
        self.tried += 1;
        let Ok(proof) = SumProof::decode(bytes) else {
            return;
        };
        self.decoded += 1;
        if let Ok(total) = proof.verify_range(*range, root) {
            self.accepted += 1;
            if total == want {
                self.unchanged_total += 1;
            } else {
                self.wrong += 1;
                eprintln!(
                    "WRONG TOTAL {total} (want {want}) for {range:?}: {}",
                    hex(bytes)
                );
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Byte offsets of the explicit nodes of an encoded proof.
fn node_offsets(bytes: &[u8]) -> Vec<usize> {
    let proof = SumProof::decode(bytes).expect("decodes");
    let start = 2 + proof.slot_count().div_ceil(8);
    (0..proof.nodes().len()).map(|i| start + 40 * i).collect()
}

fn set_sum(bytes: &mut [u8], at: usize, sum: u64) {
    bytes[at + 32..at + 40].copy_from_slice(&sum.to_be_bytes());
}

fn get_sum(bytes: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(bytes[at + 32..at + 40].try_into().unwrap())
}

/// Every structured mutation of one proof.
fn mutate_structurally(bytes: &[u8], range: &Range, want: u64, root: &ComputedNode, t: &mut Tally) {
    let proof = SumProof::decode(bytes).expect("decodes");
    let offsets = node_offsets(bytes);
    let slots = proof.slot_count();
    let bitmap = 2..2 + slots.div_ceil(8);
    // Sums: +-1, zero, max, and value moved between every pair of nodes.
    for &at in &offsets {
        let s = get_sum(bytes, at);
        for new in [
            s.wrapping_add(1),
            s.wrapping_sub(1),
            0,
            u64::MAX,
            s ^ (1 << 40),
        ] {
            let mut m = bytes.to_vec();
            set_sum(&mut m, at, new);
            t.check(&m, range, want, root);
        }
    }
    for &i in &offsets {
        for &j in &offsets {
            if i == j {
                continue;
            }
            let (si, sj) = (get_sum(bytes, i), get_sum(bytes, j));
            for d in [1, sj.min(1000), sj] {
                if d == 0 || d > sj {
                    continue;
                }
                let mut m = bytes.to_vec();
                set_sum(&mut m, i, si.wrapping_add(d));
                set_sum(&mut m, j, sj - d);
                t.check(&m, range, want, root);
            }
        }
    }
    // Drop an explicit slot (its subtree read as empty), or duplicate it
    // (one more slot, the same node twice).
    let explicit: Vec<usize> = (0..slots).filter(|i| !proof.is_empty_slot(*i)).collect();
    for (n, &slot) in explicit.iter().enumerate().take(offsets.len()) {
        let at = offsets[n];
        let mut dropped = bytes.to_vec();
        dropped[bitmap.start + slot / 8] |= 1 << (slot % 8);
        dropped.drain(at..at + 40);
        t.check(&dropped, range, want, root);
        if slots < 1023 {
            let mut dup = SumProofParts::of(bytes);
            dup.empty.insert(slot, false);
            dup.nodes.insert(n, dup.nodes[n]);
            t.check(&dup.encode(), range, want, root);
        }
    }
    // Every slot made empty, explicit with a copied node, or removed.
    let parts = SumProofParts::of(bytes);
    for slot in 0..slots {
        let mut p = parts.clone();
        p.empty.remove(slot);
        if !parts.empty[slot] {
            let n = parts.empty[..slot].iter().filter(|e| !**e).count();
            if n < p.nodes.len() {
                p.nodes.remove(n);
            } else {
                continue;
            }
        }
        t.check(&p.encode(), range, want, root);
    }
    // Truncations and one trailing byte.
    for len in 0..bytes.len() {
        t.check(&bytes[..len], range, want, root);
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    t.check(&longer, range, want, root);
}

/// An encoding taken apart, for mutations the byte layout makes awkward.
/// Leaves are kept as raw bytes after the nodes.
#[derive(Clone)]
struct SumProofParts {
    empty: Vec<bool>,
    leaf_count: usize,
    nodes: Vec<[u8; 40]>,
    tail: Vec<u8>,
}

impl SumProofParts {
    fn of(bytes: &[u8]) -> Self {
        let proof = SumProof::decode(bytes).expect("decodes");
        let slots = proof.slot_count();
        let start = 2 + slots.div_ceil(8);
        let nodes: Vec<[u8; 40]> = (0..proof.nodes().len())
            .map(|i| {
                bytes[start + 40 * i..start + 40 * (i + 1)]
                    .try_into()
                    .unwrap()
            })
            .collect();
        SumProofParts {
            empty: (0..slots).map(|i| proof.is_empty_slot(i)).collect(),
            leaf_count: proof.leaves().len(),
            tail: bytes[start + 40 * nodes.len()..].to_vec(),
            nodes,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let header = (self.empty.len() as u16) | ((self.leaf_count as u16) << 10);
        let mut out = header.to_be_bytes().to_vec();
        let mut bitmap = vec![0u8; self.empty.len().div_ceil(8)];
        for (i, e) in self.empty.iter().enumerate() {
            if *e {
                bitmap[i / 8] |= 1 << (i % 8);
            }
        }
        out.extend(bitmap);
        for n in &self.nodes {
            out.extend_from_slice(n);
        }
        out.extend_from_slice(&self.tail);
        out
    }
}

/// Mutated proofs per campaign: `MSSMT_SUM_MUTATIONS`, else 10^5 (10^4 in
/// a debug build, where one verification costs ~4 ms instead of ~80 µs).
fn campaign_size() -> u64 {
    std::env::var("MSSMT_SUM_MUTATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            10_000
        } else {
            100_000
        })
}

/// The campaign's seed: fixed, so every run checks the same proofs;
/// `MSSMT_TEST_SEED` picks another.
fn campaign_seed() -> u64 {
    let seed = std::env::var("MSSMT_TEST_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0x5eed_0037);
    eprintln!("seed = {seed} (re-run with MSSMT_TEST_SEED={seed})");
    seed
}

#[test]
fn mutations_never_give_a_wrong_total() {
    let seed = campaign_seed();
    let target = campaign_size();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = Tally::default();
    let started = std::time::Instant::now();
    let mut proofs = 0u64;
    while t.tried < target {
        let n = [0, 1, 2, 5, 30, 200][rng.gen_range(0..6)];
        let fx = fixture(&mut rng, n, 4);
        for (range, want, bytes) in &fx.proofs {
            proofs += 1;
            assert_eq!(
                SumProof::decode(bytes)
                    .unwrap()
                    .verify_range(*range, &fx.root),
                Ok(*want)
            );
            // Every byte flipped (a random non-zero mask), then random
            // multi-byte flips.
            for i in 0..bytes.len() {
                let mut m = bytes.clone();
                m[i] ^= rng.gen_range(1..=255u8);
                t.check(&m, range, *want, &fx.root);
            }
            for _ in 0..bytes.len().min(64) {
                let mut m = bytes.clone();
                for _ in 0..rng.gen_range(2..6) {
                    let i = rng.gen_range(0..m.len());
                    m[i] ^= 1 << rng.gen_range(0..8);
                }
                t.check(&m, range, *want, &fx.root);
            }
            mutate_structurally(bytes, range, *want, &fx.root, &mut t);
        }
    }
    eprintln!(
        "sum proof mutations: seed {seed}, {proofs} proofs, {} mutated, {} decoded, {} verified \
         (all with the true total: {}), {} wrong totals, in {:?}",
        t.tried,
        t.decoded,
        t.accepted,
        t.unchanged_total,
        t.wrong,
        started.elapsed()
    );
    assert_eq!(t.wrong, 0, "wrong totals accepted (seed {seed})");
}

#[test]
fn value_cannot_cross_the_edge() {
    // Two leaves side by side at bit 255 and a range that takes one: a
    // covered leaf beside an outside one, where a branch hash alone would
    // let value move between them.
    let a = Key([7; 32]);
    let b = a.with_bit(255, !a.bit(255));
    let (lo, hi) = if bit_cmp(&a, &b) == Ordering::Less {
        (a, b)
    } else {
        (b, a)
    };
    let leaves = vec![
        (lo, Leaf::new(b"lo".to_vec(), 100)),
        (hi, Leaf::new(b"hi".to_vec(), 1000)),
        (Key([9; 32]), Leaf::new(b"x".to_vec(), 5)),
    ];
    run(async {
        let tree = memory_tree::<Compacted>(&leaves).await;
        let root = tree.root().await.unwrap();
        for range in [
            (Bound::Included(lo), Bound::Included(lo)),
            (Bound::Included(hi), Bound::Unbounded),
            (Bound::Unbounded, Bound::Excluded(hi)),
        ] {
            let want = range_sum(&leaves, &range);
            let (_, total, proof) = tree.range_sum_proof(range).await.unwrap();
            assert_eq!(total, want);
            assert_eq!(proof.leaves().len(), 1, "the covered leaf is revealed");
            let bytes = proof.encode();
            let mut t = Tally::default();
            mutate_structurally(&bytes, &range, want, &root, &mut t);
            assert_eq!(t.wrong, 0);
            assert!(t.tried > 0);
        }
        // A prefix whose sibling subtree is not empty: opened into its
        // children, so the sum it claims is bound to its hash.
        let pos = Position::new(1, &Key([0; 32]));
        let (_, total, proof) = tree.prefix_sum_proof(pos).await.unwrap();
        let range = (
            Bound::Included(*pos.path()),
            Bound::Included(pos.last_key()),
        );
        let mut t = Tally::default();
        mutate_structurally(&proof.encode(), &range, total, &root, &mut t);
        assert_eq!(t.wrong, 0);
    });
}

#[test]
fn overflow_is_a_typed_error() {
    let leaves = vec![
        (Key([0; 32]), Leaf::new(b"a".to_vec(), 1)),
        (Key([1; 32]), Leaf::new(b"b".to_vec(), 2)),
    ];
    run(async {
        let tree = memory_tree::<Compacted>(&leaves).await;
        let root = tree.root().await.unwrap();
        // The split at the root combines two explicit slots.
        let range = (Bound::Unbounded, Bound::Excluded(Key([1; 32])));
        let (_, _, proof) = tree.range_sum_proof(range).await.unwrap();
        let mut bytes = proof.encode();
        for at in node_offsets(&bytes) {
            set_sum(&mut bytes, at, u64::MAX);
        }
        let err = SumProof::decode(&bytes).unwrap().verify_range(range, &root);
        assert!(matches!(err, Err(SumProofError::Overflow(_))), "{err:?}");
    });
}

#[test]
fn wire_format() {
    let leaves = vec![
        (Key([0; 32]), Leaf::new(b"a".to_vec(), 1)),
        (
            Key([0; 32]).with_bit(255, true),
            Leaf::new(b"b".to_vec(), 2),
        ),
        (Key([1; 32]), Leaf::new(b"c".to_vec(), 4)),
    ];
    run(async {
        let tree = memory_tree::<Compacted>(&leaves).await;
        let root = tree.root().await.unwrap();
        // One key whose neighbour at bit 255 exists: its leaf is revealed.
        let k = Key([0; 32]);
        let (_, total, proof) = tree.range_sum_proof(k..=k).await.unwrap();
        assert_eq!(total, 1);
        let bytes = proof.encode();
        let slots = proof.slot_count();
        assert_eq!(slots, 257, "256 outside siblings, the leaf");
        let header = u16::from_be_bytes([bytes[0], bytes[1]]) as usize;
        assert_eq!(header & 0x3ff, slots);
        assert_eq!(header >> 10, 1, "one leaf");
        let nodes = proof.nodes().len();
        assert_eq!(nodes, 2, "the root's other side and the neighbour leaf");
        assert_eq!(bytes.len(), 2 + 33 + 40 * nodes + 4 + 1 + 8);
        assert_eq!(
            &bytes[bytes.len() - 13..],
            &[0, 0, 0, 1, b'a', 0, 0, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(proof.verify_range(k..=k, &root), Ok(1));

        use SumDecodeError as E;
        assert_eq!(SumProof::decode(&[]), Err(E::Empty));
        assert!(matches!(
            SumProof::decode(&[0]),
            Err(E::Truncated { needed: 2, got: 1 })
        ));
        let mut m = bytes.clone();
        m[0] |= 0x10;
        assert_eq!(SumProof::decode(&m), Err(E::UnknownFormat(1)));
        assert_eq!(SumProof::decode(&[0, 0]), Err(E::NoSlots));
        // 3 slots, padding bit 3 set.
        assert_eq!(SumProof::decode(&[0, 3, 0b1111]), Err(E::NonZeroPadding));
        // 1 slot, empty, but one leaf named.
        assert!(matches!(
            SumProof::decode(&[0x04, 1, 1]),
            Err(E::TooManyLeaves {
                leaves: 1,
                explicit: 0
            })
        ));
        // 1 explicit slot revealed as the empty leaf.
        let mut empty_leaf = vec![0x04, 1, 0];
        empty_leaf.extend_from_slice(&[0; 12]);
        assert_eq!(
            SumProof::decode(&empty_leaf),
            Err(E::EmptyLeaf { index: 0 })
        );
        let mut longer = bytes.clone();
        longer.push(9);
        assert_eq!(
            SumProof::decode(&longer),
            Err(E::TrailingBytes { extra: 1 })
        );
        for len in 1..bytes.len() {
            assert!(
                matches!(SumProof::decode(&bytes[..len]), Err(E::Truncated { .. })),
                "{len}"
            );
        }
        // A huge announced value length allocates nothing.
        let mut huge = bytes[..bytes.len() - 13].to_vec();
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(SumProof::decode(&huge), Err(E::Truncated { .. })));

        // Verification errors: another range, an explicit empty subtree,
        // another root.
        assert!(matches!(
            proof.verify_range(.., &root),
            Err(SumProofError::Unused { .. })
        ));
        let one = SumProof::decode(&[0, 1, 1]).unwrap();
        assert!(matches!(
            one.verify_range(k..=k, &root),
            Err(SumProofError::Exhausted("slots"))
        ));
        let mut explicit_empty = vec![0, 1, 0];
        explicit_empty.extend_from_slice(ms_smt_core::empty::empty_hash(0).as_bytes());
        explicit_empty.extend_from_slice(&[0; 8]);
        let e = SumProof::decode(&explicit_empty).unwrap();
        assert_eq!(
            e.verify_range(k..k, &root),
            Err(SumProofError::NonCanonicalEmpty { slot: 0 })
        );
        let other = ComputedNode::new(root.hash, 0);
        assert!(matches!(
            proof.verify_range(k..=k, &other),
            Err(SumProofError::RootMismatch { .. })
        ));
        // The empty range: the root is its one slot.
        let (_, zero, empty) = tree.range_sum_proof(k..k).await.unwrap();
        assert_eq!((zero, empty.encode().len()), (0, 2 + 1 + 40));
        assert_eq!(empty.verify_range(k..k, &root), Ok(0));
        // The whole tree: the root is covered.
        let (_, all, whole) = tree.range_sum_proof(..).await.unwrap();
        assert_eq!(all, 7);
        assert_eq!(whole.verify_range(.., &root), Ok(7));
        assert_eq!(whole.verify_prefix(&Position::ROOT, &root), Ok(7));
    });
}
