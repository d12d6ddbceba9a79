//! The abstract model of a tree (spec §2.1): live leaves by key, in tree
//! order, with a root and subtree hashes computed naively, independent of
//! the crate's descent.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use ms_smt::Hash;
use ms_smt::{ComputedNode, Key, Leaf, Position};
use ms_smt_core::empty::empty_hash;
use ms_smt_core::hash::branch_hash;

/// A key ordered in tree order ([`Key::tree_cmp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeKey(pub Key);

impl Ord for TreeKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.tree_cmp(&other.0)
    }
}

impl PartialOrd for TreeKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Live leaves in tree order.
pub type Model = BTreeMap<TreeKey, Leaf>;

/// Applies a batch (empty leaves delete; the last pair of a key wins).
pub fn apply(model: &mut Model, batch: &[(Key, Leaf)]) {
    for (k, l) in batch {
        if l.is_empty() {
            model.remove(&TreeKey(*k));
        } else {
            model.insert(TreeKey(*k), l.clone());
        }
    }
}

/// The model's leaves in tree order.
pub fn pairs(model: &Model) -> Vec<(Key, Leaf)> {
    model.iter().map(|(k, l)| (k.0, l.clone())).collect()
}

/// The leaf at `key`, empty when absent.
pub fn get(model: &Model, key: &Key) -> Leaf {
    model.get(&TreeKey(*key)).cloned().unwrap_or_default()
}

/// The leaves under `pos`.
pub fn under(model: &Model, pos: &Position) -> Vec<(Key, Leaf)> {
    model
        .iter()
        .filter(|(k, _)| Position::new(pos.level(), &k.0) == *pos)
        .map(|(k, l)| (k.0, l.clone()))
        .collect()
}

/// (hash, sum) of the subtree at `level` holding `items` (all under one
/// position), level by level; `None` on a u64 overflow.
pub fn subtree(level: usize, items: &[(Key, Leaf)]) -> Option<ComputedNode> {
    if items.is_empty() {
        return Some(ComputedNode::new(empty_hash(level), 0));
    }
    if level == 256 {
        return Some(ComputedNode::new(items[0].1.hash(), items[0].1.sum()));
    }
    let (l, r): (Vec<_>, Vec<_>) = items.iter().cloned().partition(|(k, _)| !k.bit(level));
    let (lc, rc) = (subtree(level + 1, &l)?, subtree(level + 1, &r)?);
    let sum = lc.sum.checked_add(rc.sum)?;
    let hash: Hash = branch_hash(&lc.hash, &rc.hash, sum);
    Some(ComputedNode::new(hash, sum))
}

/// The model's root.
pub fn root(model: &Model) -> Option<ComputedNode> {
    subtree(0, &pairs(model))
}

/// The keys whose leaves differ from `old` to `new`, in tree order.
pub fn difference(old: &Model, new: &Model) -> Vec<(Key, Leaf, Leaf)> {
    let mut keys: Vec<TreeKey> = old.keys().chain(new.keys()).copied().collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (get(old, &k.0), get(new, &k.0));
            (a != b).then_some((k.0, a, b))
        })
        .collect()
}
