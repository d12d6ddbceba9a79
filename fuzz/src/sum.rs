//! Sum proofs ([`SumProof`]) under attack: the cases and the property of
//! the `sum_proof_decode` target.
//!
//! The cases are range and prefix proofs of a few small trees, built with
//! the pure planner (no store, no runtime): trees of 0 to 300 leaves whose
//! keys include neighbours at bit 255 (so covered leaves are revealed) and
//! leaves with large sums. A fuzz input picks a case and either replaces
//! its proof with arbitrary bytes or edits the proof's bytes; whatever
//! decodes must re-encode to the same bytes, and whatever verifies must
//! give the case's true total.

use std::ops::Bound;
use std::sync::OnceLock;

use ms_smt_core::hash::sha256;
use ms_smt::{
    ComputedNode, Key, LayoutKind, Leaf, NodeCache, Position, SumProof, plan_insert_many,
};

/// A range (or a prefix's range), the root, its true total and its proof.
pub struct SumCase {
    /// The range proven.
    pub range: (Bound<Key>, Bound<Key>),
    /// The tree's root.
    pub root: ComputedNode,
    /// The true total of the range.
    pub total: u64,
    /// The encoded proof.
    pub bytes: Vec<u8>,
}

fn key(tag: &str, i: usize) -> Key {
    Key(sha256(format!("{tag}/{i}").as_bytes()).0)
}

/// The leaves of tree `t` (distinct keys, none empty).
fn leaves(n: usize, t: usize) -> Vec<(Key, Leaf)> {
    let mut out: Vec<(Key, Leaf)> = Vec::new();
    for i in 0..n {
        let k = if i % 3 == 2 {
            // The neighbour of an earlier key at bit 255.
            let k = out[i / 2].0;
            k.with_bit(255, !k.bit(255))
        } else {
            key(&format!("sum-tree-{t}"), i)
        };
        let sum = if i % 7 == 3 {
            u64::MAX / 512
        } else {
            (i as u64 * 37) % 1000
        };
        out.push((k, Leaf::new(vec![i as u8; i % 4], sum)));
    }
    out.retain(|(_, l)| !l.is_empty());
    out.sort_by_key(|a| a.0);
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

fn in_range(range: &(Bound<Key>, Bound<Key>), k: &Key) -> bool {
    std::ops::RangeBounds::contains(range, k)
}

/// Every case, built once per process.
pub fn sum_cases() -> &'static [SumCase] {
    static CASES: OnceLock<Vec<SumCase>> = OnceLock::new();
    CASES.get_or_init(|| {
        let mut cases = Vec::new();
        for (t, n) in [0usize, 1, 2, 3, 30, 300].into_iter().enumerate() {
            let leaves = leaves(n, t);
            let batch = plan_insert_many(
                LayoutKind::Compacted,
                &NodeCache::new(),
                ComputedNode::empty_root(),
                &leaves,
                ms_smt::Tuning::default(),
            )
            .expect("plan");
            let mut cache = NodeCache::new();
            for (_, hash, node) in batch.inserts {
                cache.insert(hash, node);
            }
            let root = batch.new_root;
            let at = |i: usize| {
                if leaves.is_empty() {
                    key("empty", i)
                } else {
                    leaves[i % leaves.len()].0
                }
            };
            let mut ranges = vec![
                (Bound::Unbounded, Bound::Unbounded),
                (Bound::Included(at(0)), Bound::Included(at(0))),
                (Bound::Included(at(1)), Bound::Excluded(at(n / 2))),
                (Bound::Excluded(at(2)), Bound::Unbounded),
                (Bound::Unbounded, Bound::Excluded(at(5))),
                (Bound::Included(key("x", t)), Bound::Included(key("y", t))),
            ];
            for level in [0, 1, 5, 17, 100, 255, 256] {
                let pos = Position::new(level, &at(level));
                ranges.push((
                    Bound::Included(*pos.path()),
                    Bound::Included(pos.last_key()),
                ));
            }
            for range in ranges {
                let total = leaves
                    .iter()
                    .filter(|(k, _)| in_range(&range, k))
                    .map(|(_, l)| l.sum())
                    .sum();
                let (proof, made) =
                    SumProof::range_from_source(&cache, &root, range).expect("prove");
                assert_eq!(made, total);
                assert_eq!(proof.verify_range(range, &root), Ok(total));
                cases.push(SumCase {
                    range,
                    root,
                    total,
                    bytes: proof.encode(),
                });
            }
        }
        cases
    })
}

/// Counts of one run.
#[derive(Default, Debug)]
pub struct SumStats {
    /// Inputs tried.
    pub tried: u64,
    /// Inputs that decoded.
    pub decoded: u64,
    /// Inputs that verified (each with the true total).
    pub verified: u64,
}

/// The property: `data[0..2]` picks a case; with `data[2]` even, the rest
/// of `data` are edits `(u16 offset, u8 xor)` of that case's proof, else
/// the rest is the proof itself. Decoded bytes re-encode to themselves; a
/// verified total is the true one (panics otherwise).
pub fn check_sum_proof(data: &[u8], stats: &mut SumStats) {
    let cases = sum_cases();
    let (Some(&a), Some(&b), Some(&mode)) = (data.first(), data.get(1), data.get(2)) else {
        return;
    };
    let case = &cases[usize::from(u16::from_le_bytes([a, b])) % cases.len()];
    let rest = &data[3..];
    let bytes = if mode % 2 == 0 {
        let mut bytes = case.bytes.clone();
        for edit in rest.chunks_exact(3) {
            if bytes.is_empty() {
                break;
            }
            let at = usize::from(u16::from_le_bytes([edit[0], edit[1]])) % bytes.len();
            bytes[at] ^= edit[2];
        }
        if mode % 4 == 2 {
            // Cut short or lengthened by the last edit's byte.
            let len = rest.last().map_or(bytes.len(), |&l| usize::from(l));
            bytes.resize(len.min(bytes.len() + 8), 0);
        }
        bytes
    } else {
        rest.to_vec()
    };
    stats.tried += 1;
    let Ok(proof) = SumProof::decode(&bytes) else {
        return;
    };
    stats.decoded += 1;
    assert_eq!(proof.encode(), bytes, "decoding is not canonical");
    for other in cases {
        if let Ok(total) = proof.verify_range(other.range, &other.root) {
            stats.verified += 1;
            assert_eq!(total, other.total, "a wrong total verified");
        }
    }
}
