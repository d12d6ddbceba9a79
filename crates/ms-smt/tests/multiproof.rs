//! Multi-key proofs and update proofs against trees in the memory store, on
//! both layouts.
//!
//! * `inclusion_and_exclusion`: a multiproof for a random mix of present,
//!   absent and repeated keys yields the tree's root from the true leaves,
//!   finds those leaves, is the same when the source holds only the keys'
//!   paths (sibling sums from parent minus child), and carries, in the
//!   documented pre-order, exactly the siblings the single proofs have.
//! * `layouts_agree`: full and compacted trees give identical proofs.
//! * `mutations_fail`: one changed leaf, sum, key, sibling, bitmap bit or
//!   root makes verification fail (an explicit empty sibling with a typed
//!   error).
//! * `wire_format`: the bytes follow the documented layout, round trip both
//!   ways, and every truncation, trailing byte, padding bit, count mismatch
//!   or explicit empty sibling is rejected with its typed error.
//! * `update_proofs`: for random batches of inserts, replacements, deletes
//!   and repeats, the proven new root is the root `insert_many` reaches
//!   (or both overflow); a wrong new root, old leaf or batch is rejected.
//! * `garbage_never_panics`: arbitrary and mutated bytes.

use crate::support;

use std::collections::BTreeMap;
use std::future::Future;

use ms_smt::proof::{MultiDecodeError, MultiProofError, UpdateProofError};
use ms_smt::store::MemoryStore;
use ms_smt::{Compacted, ComputedNode, Full, Key, Layout, Leaf, Node, Tree};
use ms_smt::{MultiProof, UpdateProof};
use ms_smt::{NodeCache, NodeSource};
use ms_smt_core::empty::empty_hash;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use support::proptest_config;
use support::recipes::{KeyR, flip, key_r_with};

const CASES: u32 = if cfg!(debug_assertions) { 8 } else { 256 };
const SMALL_MAX: u64 = 1 << 32;
const BIG_MIN: u64 = u64::MAX - (1 << 20);
const HEADER: usize = 24;
const NODE: usize = 40;

fn config(cases: u32) -> ProptestConfig {
    proptest_config(cases, 256)
}

fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

fn fail(e: impl std::fmt::Debug) -> TestCaseError {
    TestCaseError::fail(format!("{e:?}"))
}

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

fn bit_pos() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(255usize),
        0usize..8,
        248usize..256,
        0usize..256,
    ]
}

/// A key: fresh, or an earlier key (or the base) with 1-3 bits flipped,
/// favouring bits 0 and 255, so keys share long prefixes.
fn key_r() -> impl Strategy<Value = KeyR> {
    key_r_with(bit_pos())
}

fn near(base: Key, from: &[Key], r: &KeyR) -> Key {
    match r {
        KeyR::Fresh(bytes) => Key(*bytes),
        KeyR::Near(i, bits) => flip(
            if from.is_empty() {
                base
            } else {
                from[i % from.len()]
            },
            bits,
        ),
    }
}

/// Mostly small sums, some zeros, some within 2^20 of `u64::MAX`.
fn sum_s() -> impl Strategy<Value = u64> {
    prop_oneof![
        30 => 0..=SMALL_MAX,
        4 => Just(0u64),
        3 => BIG_MIN..=u64::MAX,
    ]
}

/// A non-empty leaf (an empty value with a sum, or a value with sum 0, are
/// real leaves).
fn leaf_s() -> impl Strategy<Value = Leaf> {
    (vec(any::<u8>(), 0..=8), sum_s()).prop_map(|(v, s)| {
        if v.is_empty() && s == 0 {
            Leaf::new(v, 1)
        } else {
            Leaf::new(v, s)
        }
    })
}

/// A tree and a query: `leaves` are the tree's (distinct keys, total sum
/// fits u64), `query` mixes present, absent and repeated keys.
#[derive(Clone, Debug)]
struct Case {
    leaves: Vec<(Key, Leaf)>,
    query: Vec<Key>,
}

fn case_s(tree: usize, query: usize) -> impl Strategy<Value = Case> {
    (
        any::<[u8; 32]>(),
        vec((key_r(), leaf_s()), 0..=tree),
        vec((any::<bool>(), any::<usize>(), key_r()), 0..=query),
    )
        .prop_map(|(base, leaf_rs, query_rs)| {
            let base = Key(base);
            let mut keys = Vec::new();
            let mut model = BTreeMap::new();
            let mut total = 0u64;
            for (kr, leaf) in leaf_rs {
                let key = near(base, &keys, &kr);
                keys.push(key);
                // Keep the total within u64 (a rejected write adds nothing).
                if model.contains_key(&key.0) {
                    continue;
                }
                if let Some(t) = total.checked_add(leaf.sum()) {
                    total = t;
                    model.insert(key.0, leaf);
                }
            }
            let present: Vec<Key> = model.keys().map(|k| Key(*k)).collect();
            let query = query_rs
                .iter()
                .map(|(pick, i, kr)| match (pick, present.is_empty()) {
                    (true, false) => present[i % present.len()],
                    _ => near(base, &present, kr),
                })
                .collect();
            Case {
                leaves: model.into_iter().map(|(k, l)| (Key(k), l)).collect(),
                query,
            }
        })
}

// ---------------------------------------------------------------------------
// Trees, sources and the documented sibling order
// ---------------------------------------------------------------------------

type T<L> = Tree<MemoryStore, L>;

async fn build<L: Layout>(leaves: &[(Key, Leaf)]) -> Result<(T<L>, ComputedNode), TestCaseError> {
    let tree = Tree::new(MemoryStore::new());
    let root = tree
        .insert_many(leaves.iter().cloned())
        .await
        .map_err(fail)?;
    Ok((tree, root))
}

/// Every stored node of the tree.
fn all_nodes<L: Layout>(tree: &T<L>) -> Result<NodeCache, TestCaseError> {
    let mut cache = NodeCache::new();
    for (hash, node, _) in tree.store().rows().map_err(fail)? {
        cache.insert(hash, node);
    }
    Ok(cache)
}

/// Only the nodes on the paths of `keys`, as a read without siblings brings
/// them: sibling sums must then come from parent minus child.
fn path_nodes(all: &NodeCache, root: &ComputedNode, keys: &[Key]) -> NodeCache {
    let mut out = NodeCache::new();
    for key in keys {
        let mut hash = root.hash;
        for level in 0..=256 {
            if hash == empty_hash(level) {
                break;
            }
            let Some(node) = all.node(&hash) else { break };
            out.insert(hash, node.clone());
            match node {
                Node::Branch { left, right, .. } if level < 256 => {
                    hash = if key.bit(level) { *right } else { *left };
                }
                _ => break,
            }
        }
    }
    out
}

fn sorted(keys: &[Key]) -> Vec<Key> {
    let mut out = keys.to_vec();
    out.sort_by(|a, b| a.tree_cmp(b));
    out.dedup();
    out
}

/// The documented sibling order, computed independently: for each sibling,
/// its level and a key whose path passes its parent.
fn slots(keys: &[Key]) -> Vec<(usize, Key)> {
    fn walk(level: usize, keys: &[Key], out: &mut Vec<(usize, Key)>) {
        if level == 256 {
            return;
        }
        let (l, r): (Vec<Key>, Vec<Key>) = keys.iter().partition(|k| !k.bit(level));
        if !l.is_empty() && !r.is_empty() {
            walk(level + 1, &l, out);
            walk(level + 1, &r, out);
        } else {
            out.push((level + 1, keys[0]));
            walk(level + 1, keys, out);
        }
    }
    let keys = sorted(keys);
    let mut out = Vec::new();
    if keys.is_empty() {
        out.push((0, Key::default()));
    } else {
        walk(0, &keys, &mut out);
    }
    out
}

fn truth(leaves: &[(Key, Leaf)], keys: &[Key]) -> Vec<(Key, Leaf)> {
    let map: BTreeMap<[u8; 32], &Leaf> = leaves.iter().map(|(k, l)| (k.0, l)).collect();
    sorted(keys)
        .into_iter()
        .map(|k| (k, map.get(&k.0).map_or_else(Leaf::empty, |l| (*l).clone())))
        .collect()
}

/// The siblings of `proof` in order, empty ones filled in from `slots`.
fn expand(proof: &MultiProof, slots: &[(usize, Key)]) -> Vec<ComputedNode> {
    let mut explicit = proof.explicit_siblings().iter();
    slots
        .iter()
        .enumerate()
        .map(|(i, (level, _))| {
            if proof.is_empty_sibling(i) {
                ComputedNode::empty(*level)
            } else {
                *explicit
                    .next()
                    .expect("as many explicit siblings as clear bits")
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------
// A reference codec written from the documented layout
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
struct Wire {
    keys: u64,
    bits: Vec<bool>,
    nodes: Vec<([u8; 32], u64)>,
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

fn parse(b: &[u8]) -> Wire {
    let keys = be64(&b[0..]);
    let siblings = be64(&b[8..]) as usize;
    let explicit = be64(&b[16..]) as usize;
    let bitmap = &b[HEADER..HEADER + siblings.div_ceil(8)];
    let bits = (0..siblings)
        .map(|i| bitmap[i / 8] >> (i % 8) & 1 == 1)
        .collect();
    let start = HEADER + bitmap.len();
    let nodes = (0..explicit)
        .map(|j| {
            let n = &b[start + NODE * j..start + NODE * (j + 1)];
            (n[..32].try_into().unwrap(), be64(&n[32..]))
        })
        .collect();
    Wire { keys, bits, nodes }
}

fn assemble(w: &Wire) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&w.keys.to_be_bytes());
    out.extend_from_slice(&(w.bits.len() as u64).to_be_bytes());
    out.extend_from_slice(&(w.nodes.len() as u64).to_be_bytes());
    let mut bitmap = vec![0u8; w.bits.len().div_ceil(8)];
    for (i, bit) in w.bits.iter().enumerate() {
        if *bit {
            bitmap[i / 8] |= 1 << (i % 8);
        }
    }
    out.extend_from_slice(&bitmap);
    for (hash, sum) in &w.nodes {
        out.extend_from_slice(hash);
        out.extend_from_slice(&sum.to_be_bytes());
    }
    out
}

/// Index among the explicit siblings of sibling `i`.
fn explicit_index(w: &Wire, i: usize) -> usize {
    w.bits[..i].iter().filter(|b| !**b).count()
}

// ---------------------------------------------------------------------------
// (a), (b): inclusion and exclusion, agreement with single proofs
// ---------------------------------------------------------------------------

async fn inclusion_and_exclusion<L: Layout>(case: Case) -> Result<(), TestCaseError> {
    let (tree, root) = build::<L>(&case.leaves).await?;
    prop_assert_eq!(tree.root().await.map_err(fail)?, root);
    let all = all_nodes(&tree)?;
    let (proof, found) =
        MultiProof::from_source_with_leaves(&all, &root, &case.query).map_err(fail)?;
    let leaves = truth(&case.leaves, &case.query);
    prop_assert_eq!(&found, &leaves);
    prop_assert_eq!(proof.key_count(), leaves.len());

    // The true leaves, in any order, give the root.
    let mut shuffled = leaves.clone();
    shuffled.reverse();
    prop_assert_eq!(proof.root(&shuffled), Ok(root));
    prop_assert!(proof.verify(&leaves, &root));

    // Paths alone are enough (sibling sums from parent minus child).
    let paths = path_nodes(&all, &root, &case.query);
    prop_assert_eq!(
        &MultiProof::from_source(&paths, &root, &case.query).map_err(fail)?,
        &proof
    );

    // The documented order, and the single proofs' siblings.
    let slots = slots(&case.query);
    prop_assert_eq!(proof.sibling_count(), slots.len());
    let siblings = expand(&proof, &slots);
    prop_assert_eq!(siblings.len(), slots.len());
    let keys = sorted(&case.query);
    if keys.is_empty() {
        prop_assert_eq!(siblings[0], root);
        return Ok(());
    }
    let singles = tree.merkle_proofs(&keys).await.map_err(fail)?;
    let single: BTreeMap<[u8; 32], &ms_smt::Proof> =
        keys.iter().map(|k| k.0).zip(singles.iter()).collect();
    for (i, ((level, key), sibling)) in slots.iter().zip(&siblings).enumerate() {
        let expected = single[&key.0].nodes()[256 - level];
        prop_assert_eq!(*sibling, expected, "sibling {} at level {}", i, level);
        // Canonical: a bit exactly for the empty subtrees.
        prop_assert_eq!(
            proof.is_empty_sibling(i),
            expected.hash == empty_hash(*level)
        );
    }
    for ((key, leaf), p) in leaves.iter().zip(&singles) {
        prop_assert!(p.verify(key, leaf, &root));
    }
    // Size: every explicit sibling is non-empty; no more than the singles.
    let single_explicit: usize = singles.iter().map(|p| p.compress().nodes().len()).sum();
    prop_assert!(proof.explicit_siblings().len() <= single_explicit);
    Ok(())
}

async fn layouts_agree(case: Case) -> Result<(), TestCaseError> {
    let (full, root) = build::<Full>(&case.leaves).await?;
    let (compacted, root2) = build::<Compacted>(&case.leaves).await?;
    prop_assert_eq!(root, root2);
    let a = MultiProof::from_source(&all_nodes(&full)?, &root, &case.query).map_err(fail)?;
    let b = MultiProof::from_source(&all_nodes(&compacted)?, &root, &case.query).map_err(fail)?;
    prop_assert_eq!(a, b);
    Ok(())
}

// ---------------------------------------------------------------------------
// (c): one change makes verification fail
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Pick {
    at: usize,
    byte: usize,
    bit: u32,
}

fn pick_s() -> impl Strategy<Value = Pick> {
    (any::<usize>(), 0usize..40, 0u32..64).prop_map(|(at, byte, bit)| Pick { at, byte, bit })
}

async fn mutations_fail<L: Layout>(case: Case, p: Pick) -> Result<(), TestCaseError> {
    let (tree, root) = build::<L>(&case.leaves).await?;
    let proof = MultiProof::from_source(&all_nodes(&tree)?, &root, &case.query).map_err(fail)?;
    let leaves = truth(&case.leaves, &case.query);
    prop_assert!(proof.verify(&leaves, &root));

    // The root: hash or sum.
    let mut r = root;
    r.hash.0[p.byte % 32] ^= 1 << (p.bit % 8);
    prop_assert!(!proof.verify(&leaves, &r));
    let mut r = root;
    r.sum ^= 1 << p.bit;
    prop_assert!(!proof.verify(&leaves, &r));

    if !leaves.is_empty() {
        let i = p.at % leaves.len();
        // One leaf's value.
        let mut changed = leaves.clone();
        let (key, leaf) = &leaves[i];
        let mut value = leaf.value().to_vec();
        value.push(p.byte as u8);
        changed[i] = (*key, Leaf::new(value, leaf.sum()));
        prop_assert!(!proof.verify(&changed, &root));
        // Present becomes absent, absent becomes present.
        changed[i] = if leaf.is_empty() {
            (*key, Leaf::new(b"x".to_vec(), 0))
        } else {
            (*key, Leaf::empty())
        };
        prop_assert!(!proof.verify(&changed, &root));
        // One leaf's sum.
        changed[i] = (
            *key,
            Leaf::new(leaf.value().to_vec(), leaf.sum() ^ (1 << p.bit)),
        );
        prop_assert!(!proof.verify(&changed, &root));
        // One key moved: accepted only if what it then claims is true (an
        // absent key moved to an absent key of the same trie shape still
        // proves absence).
        let mut moved = leaves.clone();
        moved[i].0 = flip(*key, &[(p.byte * 7 + p.bit as usize) % 256]);
        if proof.verify(&moved, &root) {
            let moved_keys: Vec<Key> = moved.iter().map(|(k, _)| *k).collect();
            let mut claims = moved.clone();
            claims.sort_by(|a, b| a.0.tree_cmp(&b.0));
            prop_assert_eq!(claims, truth(&case.leaves, &moved_keys));
            prop_assert!(leaf.is_empty());
        }
        // A key dropped or added.
        let n = leaves.len();
        let mut fewer = leaves.clone();
        fewer.remove(i);
        prop_assert_eq!(
            proof.root(&fewer),
            Err(MultiProofError::KeyCountMismatch {
                proof: n,
                given: n - 1
            })
        );
        let mut more = leaves.clone();
        let extra = flip(*key, &[255]);
        if !leaves.iter().any(|(k, _)| *k == extra) {
            more.push((extra, Leaf::empty()));
            prop_assert_eq!(
                proof.root(&more),
                Err(MultiProofError::KeyCountMismatch {
                    proof: n,
                    given: n + 1
                })
            );
        }
    }

    let slots = slots(&case.query);
    let bytes = proof.encode();
    let wire = parse(&bytes);
    // One explicit sibling: a hash bit or a sum bit.
    if !wire.nodes.is_empty() {
        let j = p.at % wire.nodes.len();
        let mut w = wire.clone();
        w.nodes[j].0[p.byte % 32] ^= 1 << (p.bit % 8);
        let m = MultiProof::decode(&assemble(&w)).map_err(fail)?;
        prop_assert!(!m.verify(&leaves, &root));
        let mut w = wire.clone();
        w.nodes[j].1 ^= 1 << p.bit;
        let m = MultiProof::decode(&assemble(&w)).map_err(fail)?;
        prop_assert!(!m.verify(&leaves, &root));
    }
    // One bitmap bit (with the explicit list adjusted so the bytes decode).
    let i = p.at % wire.bits.len();
    let mut w = wire.clone();
    let e = explicit_index(&w, i);
    if w.bits[i] {
        w.bits[i] = false;
        let (level, _) = slots[i];
        // Written out explicitly: non-canonical.
        let mut canonical_empty = w.clone();
        canonical_empty.nodes.insert(e, (empty_hash(level).0, 0));
        let m = MultiProof::decode(&assemble(&canonical_empty)).map_err(fail)?;
        prop_assert_eq!(
            m.root(&leaves),
            Err(MultiProofError::NonCanonicalEmpty { index: i, level })
        );
        // Replaced by some other node.
        w.nodes.insert(e, ([p.byte as u8; 32], u64::from(p.bit)));
    } else {
        w.bits[i] = true;
        w.nodes.remove(e);
    }
    let m = MultiProof::decode(&assemble(&w)).map_err(fail)?;
    prop_assert!(!m.verify(&leaves, &root));
    Ok(())
}

// ---------------------------------------------------------------------------
// (d): wire format
// ---------------------------------------------------------------------------

async fn wire_format<L: Layout>(case: Case, tail: Vec<u8>) -> Result<(), TestCaseError> {
    let (tree, root) = build::<L>(&case.leaves).await?;
    let proof = MultiProof::from_source(&all_nodes(&tree)?, &root, &case.query).map_err(fail)?;
    let bytes = proof.encode();
    let wire = parse(&bytes);

    // The documented layout, field by field.
    prop_assert_eq!(assemble(&wire), bytes.clone());
    prop_assert_eq!(wire.keys as usize, proof.key_count());
    prop_assert_eq!(wire.bits.len(), proof.sibling_count());
    for (i, bit) in wire.bits.iter().enumerate() {
        prop_assert_eq!(*bit, proof.is_empty_sibling(i));
    }
    let nodes: Vec<([u8; 32], u64)> = proof
        .explicit_siblings()
        .iter()
        .map(|n| (n.hash.0, n.sum))
        .collect();
    prop_assert_eq!(&wire.nodes, &nodes);
    prop_assert_eq!(
        bytes.len(),
        HEADER + proof.sibling_count().div_ceil(8) + NODE * nodes.len()
    );

    // Round trips both ways.
    let decoded = MultiProof::decode(&bytes).map_err(fail)?;
    prop_assert_eq!(&decoded, &proof);
    prop_assert_eq!(decoded.encode(), bytes.clone());

    // Every truncation.
    for cut in 0..bytes.len() {
        let needed = if cut < HEADER { HEADER } else { bytes.len() };
        prop_assert_eq!(
            MultiProof::decode(&bytes[..cut]),
            Err(MultiDecodeError::Truncated { needed, got: cut })
        );
    }
    // Trailing bytes.
    let mut long = bytes.clone();
    long.extend_from_slice(&tail);
    prop_assert_eq!(
        MultiProof::decode(&long),
        Err(MultiDecodeError::TrailingBytes { extra: tail.len() })
    );
    // Every padding bit.
    let siblings = proof.sibling_count();
    let last = HEADER + siblings.div_ceil(8) - 1;
    for bit in (siblings % 8)..8 {
        if siblings % 8 == 0 {
            break;
        }
        let mut padded = bytes.clone();
        padded[last] |= 1 << bit;
        prop_assert_eq!(
            MultiProof::decode(&padded),
            Err(MultiDecodeError::NonZeroPadding)
        );
    }
    // Explicit count off by one either way, nodes adjusted to match.
    let mut w = wire.clone();
    w.nodes.push(([3; 32], 3));
    let mut more = assemble(&w);
    prop_assert_eq!(
        MultiProof::decode(&more),
        Err(MultiDecodeError::CountMismatch {
            explicit: nodes.len() as u64 + 1,
            expected: nodes.len()
        })
    );
    // The same bytes with the old count: one node too many.
    more[16..24].copy_from_slice(&(nodes.len() as u64).to_be_bytes());
    prop_assert_eq!(
        MultiProof::decode(&more),
        Err(MultiDecodeError::TrailingBytes { extra: NODE })
    );
    if !nodes.is_empty() {
        let mut w = wire.clone();
        w.nodes.pop();
        prop_assert_eq!(
            MultiProof::decode(&assemble(&w)),
            Err(MultiDecodeError::CountMismatch {
                explicit: nodes.len() as u64 - 1,
                expected: nodes.len()
            })
        );
    }
    // An impossible sibling count.
    let mut w = wire.clone();
    let max = if w.keys == 0 {
        1
    } else {
        256 * w.keys as usize
    };
    w.bits.resize(max + 1, true);
    prop_assert_eq!(
        MultiProof::decode(&assemble(&w)),
        Err(MultiDecodeError::SiblingCountOutOfRange {
            keys: w.keys,
            siblings: max as u64 + 1
        })
    );
    // Another key count decodes, but does not fit the leaves.
    let leaves = truth(&case.leaves, &case.query);
    let mut w = wire.clone();
    w.keys += 1;
    let m = MultiProof::decode(&assemble(&w)).map_err(fail)?;
    prop_assert_eq!(
        m.root(&leaves),
        Err(MultiProofError::KeyCountMismatch {
            proof: leaves.len() + 1,
            given: leaves.len()
        })
    );
    // One sibling more or less (a padding-free change of shape).
    let mut w = wire.clone();
    w.bits.push(true);
    if let Ok(m) = MultiProof::decode(&assemble(&w)) {
        prop_assert_eq!(
            m.root(&leaves),
            Err(MultiProofError::SiblingCountMismatch {
                proof: siblings + 1,
                expected: siblings
            })
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// (e): update proofs
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct UpdateCase {
    tree: Case,
    /// (pick a present key?, index, key recipe, delete?, new leaf)
    batch: Vec<(bool, usize, KeyR, bool, Leaf)>,
    pick: Pick,
}

fn update_s() -> impl Strategy<Value = UpdateCase> {
    (
        case_s(24, 0),
        vec(
            (
                any::<bool>(),
                any::<usize>(),
                key_r(),
                prop::bool::weighted(0.3),
                leaf_s(),
            ),
            0..=16,
        ),
        pick_s(),
    )
        .prop_map(|(tree, batch, pick)| UpdateCase { tree, batch, pick })
}

fn materialize(case: &UpdateCase) -> Vec<(Key, Leaf)> {
    let present: Vec<Key> = case.tree.leaves.iter().map(|(k, _)| *k).collect();
    let mut out: Vec<(Key, Leaf)> = Vec::new();
    for (pick, i, kr, delete, leaf) in &case.batch {
        let key = match (pick, present.is_empty(), out.is_empty()) {
            (true, false, _) => present[i % present.len()],
            // Repeat a key of this batch now and then.
            (false, _, false) if i % 5 == 0 => out[i % out.len()].0,
            _ => near(Key([7; 32]), &present, kr),
        };
        let leaf = if *delete { Leaf::empty() } else { leaf.clone() };
        out.push((key, leaf));
    }
    out
}

async fn update_proofs<L: Layout>(case: UpdateCase) -> Result<(), TestCaseError> {
    let (tree, old_root) = build::<L>(&case.tree.leaves).await?;
    let batch = materialize(&case);
    let keys: Vec<Key> = batch.iter().map(|(k, _)| *k).collect();
    let all = all_nodes(&tree)?;
    let proof = UpdateProof::from_source(&all, &old_root, &batch).map_err(fail)?;
    let paths = path_nodes(&all, &old_root, &keys);
    prop_assert_eq!(
        &UpdateProof::from_source(&paths, &old_root, &batch).map_err(fail)?,
        &proof
    );
    let old: Vec<Leaf> = truth(&case.tree.leaves, &keys)
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    prop_assert_eq!(proof.old_leaves(), &old[..]);

    // Codec.
    let bytes = proof.encode();
    prop_assert_eq!(UpdateProof::decode(&bytes), Ok(proof.clone()));
    for cut in 0..bytes.len() {
        let is_truncated = matches!(
            UpdateProof::decode(&bytes[..cut]),
            Err(MultiDecodeError::Truncated { .. })
        );
        prop_assert!(is_truncated, "cut at {}", cut);
    }
    let mut long = bytes.clone();
    long.push(0);
    prop_assert_eq!(
        UpdateProof::decode(&long),
        Err(MultiDecodeError::TrailingBytes { extra: 1 })
    );

    let computed = proof.new_root(&old_root, &batch);
    let written = tree.insert_many(batch.clone()).await;
    let new_root = match written {
        Ok(root) => root,
        Err(e) => {
            prop_assert!(e.is_overflow(), "{:?}", e);
            let overflowed = matches!(computed, Err(UpdateProofError::Overflow(_)));
            prop_assert!(overflowed, "{:?}", computed);
            return Ok(());
        }
    };
    prop_assert_eq!(computed, Ok(new_root));
    prop_assert!(proof.verify(&old_root, &batch, &new_root));
    // Batch order does not matter beyond last-wins between equal keys.
    let mut reordered = batch.clone();
    reordered.reverse();
    let mut last = BTreeMap::new();
    for (k, l) in &batch {
        last.insert(k.0, l.clone());
    }
    reordered.retain(|(k, l)| last.get(&k.0) == Some(l));
    prop_assert!(proof.verify(&old_root, &reordered, &new_root));

    let p = &case.pick;
    // A wrong new root.
    let mut wrong = new_root;
    wrong.hash.0[p.byte % 32] ^= 1 << (p.bit % 8);
    prop_assert!(!proof.verify(&old_root, &batch, &wrong));
    let mut wrong = new_root;
    wrong.sum ^= 1 << p.bit;
    prop_assert!(!proof.verify(&old_root, &batch, &wrong));
    // A wrong old root.
    let mut wrong = old_root;
    wrong.hash.0[p.byte % 32] ^= 1;
    let mismatch = matches!(
        proof.new_root(&wrong, &batch),
        Err(UpdateProofError::OldRootMismatch { .. })
    );
    prop_assert!(mismatch);
    if batch.is_empty() {
        prop_assert_eq!(new_root, old_root);
        return Ok(());
    }
    // A wrong old leaf.
    let j = p.at % old.len();
    let mut olds = old.clone();
    olds[j] = if olds[j].is_empty() {
        Leaf::new(Vec::new(), 1)
    } else {
        Leaf::new(olds[j].value().to_vec(), olds[j].sum() ^ 1)
    };
    let forged = UpdateProof::new(proof.proof().clone(), olds).map_err(fail)?;
    let mismatch = matches!(
        forged.new_root(&old_root, &batch),
        Err(UpdateProofError::OldRootMismatch { .. })
    );
    prop_assert!(mismatch);
    // A changed batch: one new leaf, one key, one key fewer or more.
    let i = p.at % batch.len();
    let key = &batch[i].0;
    // The leaf the key ends with (the last occurrence wins).
    let leaf = &batch
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .expect("in batch")
        .1;
    let mut changed = batch.clone();
    changed.retain(|(k, _)| k != key);
    changed.push((*key, Leaf::new(leaf.value().to_vec(), leaf.sum() ^ 1)));
    prop_assert!(!proof.verify(&old_root, &changed, &new_root));
    // A key moved: accepted only if the claimed new root is then right
    // (deleting an absent key is a no-op wherever it is).
    let mut moved = batch.clone();
    let other = flip(*key, &[(p.byte * 7 + p.bit as usize) % 256]);
    for entry in moved.iter_mut().filter(|(k, _)| k == key) {
        entry.0 = other;
    }
    if proof.verify(&old_root, &moved, &new_root) {
        prop_assert_eq!(
            root_after::<L>(&case.tree.leaves, &moved).await?,
            Some(new_root)
        );
    }
    // A key fewer or more.
    let distinct = |b: &[(Key, Leaf)]| sorted(&b.iter().map(|(k, _)| *k).collect::<Vec<_>>()).len();
    let mut fewer = batch.clone();
    fewer.retain(|(k, _)| k != key);
    prop_assert_eq!(
        proof.new_root(&old_root, &fewer),
        Err(UpdateProofError::LeafCountMismatch {
            keys: distinct(&fewer),
            leaves: distinct(&batch)
        })
    );
    let mut more = batch.clone();
    let extra = flip(*key, &[255]);
    if !batch.iter().any(|(k, _)| *k == extra) {
        more.push((extra, Leaf::new(b"more".to_vec(), 1)));
        prop_assert_eq!(
            proof.new_root(&old_root, &more),
            Err(UpdateProofError::LeafCountMismatch {
                keys: distinct(&more),
                leaves: distinct(&batch)
            })
        );
    }
    Ok(())
}

/// The root a tree of `start` has after `batch`; `None` if it overflows.
async fn root_after<L: Layout>(
    start: &[(Key, Leaf)],
    batch: &[(Key, Leaf)],
) -> Result<Option<ComputedNode>, TestCaseError> {
    let (tree, _) = build::<L>(start).await?;
    match tree.insert_many(batch.to_vec()).await {
        Ok(root) => Ok(Some(root)),
        Err(e) if e.is_overflow() => Ok(None),
        Err(e) => Err(fail(e)),
    }
}

// ---------------------------------------------------------------------------
// (f): garbage never panics
// ---------------------------------------------------------------------------

fn poke(proof_bytes: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut b = proof_bytes.to_vec();
    for &(at, x, op) in edits {
        if b.is_empty() {
            b.push(x);
            continue;
        }
        let at = at % b.len();
        match op % 4 {
            0 => b[at] ^= x.max(1),
            1 => b[at] = x,
            2 => b.insert(at, x),
            _ => {
                b.remove(at);
            }
        }
    }
    b
}

fn check_garbage(bytes: &[u8], leaves: &[(Key, Leaf)], root: &ComputedNode) -> bool {
    let verified = match MultiProof::decode(bytes) {
        Ok(p) => {
            let again = p.encode();
            assert_eq!(again, bytes, "accepted bytes re-encode to themselves");
            let _ = p.root(leaves);
            p.verify(leaves, root)
        }
        Err(_) => false,
    };
    if let Ok(u) = UpdateProof::decode(bytes) {
        assert_eq!(u.encode(), bytes);
        let _ = u.new_root(root, leaves);
    }
    verified
}

async fn garbage_never_panics<L: Layout>(
    case: Case,
    edits: Vec<(usize, u8, u8)>,
    raw: Vec<u8>,
) -> Result<(), TestCaseError> {
    let (tree, root) = build::<L>(&case.leaves).await?;
    let proof = MultiProof::from_source(&all_nodes(&tree)?, &root, &case.query).map_err(fail)?;
    let leaves = truth(&case.leaves, &case.query);
    let bytes = proof.encode();
    let mutated = poke(&bytes, &edits);
    let verified = check_garbage(&mutated, &leaves, &root);
    prop_assert_eq!(verified, mutated == bytes);
    check_garbage(&raw, &leaves, &root);
    // Raw bytes behind a plausible header.
    let mut headed = bytes[..HEADER].to_vec();
    headed.extend_from_slice(&raw);
    check_garbage(&headed, &leaves, &root);
    Ok(())
}

// ---------------------------------------------------------------------------
// Property entry points, both layouts
// ---------------------------------------------------------------------------

macro_rules! both_layouts {
    ($name:ident, ($($arg:ident in $strategy:expr),+), $check:ident) => {
        mod $name {
            use super::*;
            proptest! {
                #![proptest_config(config(CASES))]
                #[test]
                fn full($($arg in $strategy),+) {
                    run(super::$check::<Full>($($arg),+))?;
                }
                #[test]
                fn compacted($($arg in $strategy),+) {
                    run(super::$check::<Compacted>($($arg),+))?;
                }
            }
        }
    };
}

both_layouts!(a_b_inclusion_and_exclusion, (case in case_s(32, 12)), inclusion_and_exclusion);
both_layouts!(c_mutations, (case in case_s(24, 8), pick in pick_s()), mutations_fail);
both_layouts!(d_wire_format, (case in case_s(24, 8), tail in vec(any::<u8>(), 1..4)), wire_format);
both_layouts!(e_update_proofs, (case in update_s()), update_proofs);
both_layouts!(
    f_garbage,
    (
        case in case_s(16, 6),
        edits in vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..4),
        raw in vec(any::<u8>(), 0..200)
    ),
    garbage_never_panics
);

proptest! {
    #![proptest_config(config(CASES))]
    #[test]
    fn layouts_give_identical_proofs(case in case_s(24, 8)) {
        run(layouts_agree(case))?;
    }
}

// ---------------------------------------------------------------------------
// Deterministic cases
// ---------------------------------------------------------------------------

fn key_n(n: u8) -> Key {
    let mut k = [0u8; 32];
    k[31] = n;
    Key(k)
}

async fn update<L: Layout>(
    start: &[(Key, Leaf)],
    batch: &[(Key, Leaf)],
) -> (ComputedNode, Result<ComputedNode, UpdateProofError>, bool) {
    let (tree, old) = build::<L>(start).await.unwrap();
    let proof = UpdateProof::from_source(&all_nodes(&tree).unwrap(), &old, batch).unwrap();
    let written = tree.insert_many(batch.to_vec()).await;
    let overflow = written.as_ref().is_err_and(|e| e.is_overflow());
    let new = written.unwrap_or(old);
    (new, proof.new_root(&old, batch), overflow)
}

fn overflow_cases<L: Layout>() {
    run(async {
        // The tree rejects a batch that would overflow; so does the proof.
        let start = [(key_n(1), Leaf::new(b"big".to_vec(), u64::MAX - 10))];
        let batch = [(key_n(2), Leaf::new(b"x".to_vec(), 100))];
        let (_, got, overflow) = update::<L>(&start, &batch).await;
        assert!(overflow);
        assert!(matches!(got, Err(UpdateProofError::Overflow(_))), "{got:?}");
        // Replacing the big leaf with a small one is fine (spec §7.8).
        let start = [(key_n(1), Leaf::new(b"big".to_vec(), u64::MAX - 6))];
        let batch = [
            (key_n(1), Leaf::new(b"small".to_vec(), 1)),
            (key_n(2), Leaf::new(b"x".to_vec(), 10)),
        ];
        let (new, got, overflow) = update::<L>(&start, &batch).await;
        assert!(!overflow);
        assert_eq!(got, Ok(new));
        // An empty batch keeps the root.
        let (new, got, _) = update::<L>(&start, &[]).await;
        assert_eq!(got, Ok(new));
        // Deleting everything gives the empty root.
        let (new, got, _) = update::<L>(&start, &[(key_n(1), Leaf::empty())]).await;
        assert_eq!(new, ComputedNode::empty_root());
        assert_eq!(got, Ok(new));
    });
}

#[test]
fn update_overflow_full() {
    overflow_cases::<Full>();
}

#[test]
fn update_overflow_compacted() {
    overflow_cases::<Compacted>();
}

/// Keys that differ only in bit 255 share all siblings but the last; after
/// one is deleted, the level-255 branch keeps an empty child (spec §9.1
/// G255) and both keys still prove.
async fn last_level_split<L: Layout>() {
    let a = Key::default();
    let b = Key::default().with_bit(255, true);
    let leaf = Leaf::new(b"same".to_vec(), 5);
    let both = [(a, leaf.clone()), (b, leaf.clone())];
    let (tree, root) = build::<L>(&both).await.unwrap();
    let proof = MultiProof::from_source(&all_nodes(&tree).unwrap(), &root, &[b, a]).unwrap();
    assert_eq!(proof.sibling_count(), 255);
    assert!(proof.explicit_siblings().is_empty());
    assert!(proof.verify(&both, &root));
    let gone = [(a, leaf.clone()), (b, Leaf::empty())];
    assert!(!proof.verify(&gone, &root));

    let root = tree.insert_many([(b, Leaf::empty())]).await.unwrap();
    let proof = MultiProof::from_source(&all_nodes(&tree).unwrap(), &root, &[a, b]).unwrap();
    assert!(proof.verify(&gone, &root));
    assert!(!proof.verify(&both, &root));
}

#[test]
fn last_level_split_full() {
    run(last_level_split::<Full>());
}

#[test]
fn last_level_split_compacted() {
    run(last_level_split::<Compacted>());
}

/// A multiproof is smaller than the single proofs once keys share paths.
#[test]
fn shared_paths_are_sent_once() {
    run(async {
        let leaves: Vec<(Key, Leaf)> = (0..=255u8)
            .map(|n| (Key([n; 32]), Leaf::new(vec![n], u64::from(n) + 1)))
            .collect();
        let (tree, root) = build::<Compacted>(&leaves).await.unwrap();
        let keys: Vec<Key> = leaves.iter().step_by(8).map(|(k, _)| *k).collect();
        let proof = MultiProof::from_source(&all_nodes(&tree).unwrap(), &root, &keys).unwrap();
        let singles = tree.merkle_proofs(&keys).await.unwrap();
        let single_bytes: usize = singles.iter().map(|p| p.to_bytes().len()).sum();
        let mine: Vec<(Key, Leaf)> = leaves.iter().step_by(8).cloned().collect();
        assert!(proof.verify(&mine, &root));
        assert!(
            proof.encode().len() < single_bytes,
            "{} >= {single_bytes}",
            proof.encode().len()
        );
    });
}
