//! Read walks shared by both layouts: the leaf at a key and its proof.

use crate::Proof;
use crate::descent::Subtree;
use crate::descent::{NodeSource, sibling_sum};
use crate::empty::is_empty_hash;
use crate::error::PlanError;
use crate::hash::Hash;
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::lift::{Lift, lift_on, lift_tagged};
use crate::node::{ComputedNode, Node};
use crate::position::Position;

/// Walks from `root` towards `key`. Returns the leaf found (the empty leaf
/// for an absent key) and, when `siblings` is given, fills in every sibling
/// met on the way (entries left untouched are empty subtrees).
pub(crate) fn walk<R: NodeSource>(
    source: &R,
    root: &ComputedNode,
    key: &Key,
    mut siblings: Option<&mut Proof>,
) -> Result<Leaf, PlanError> {
    let (leaf, beside) = walk_to(source, root, key, siblings.as_deref_mut())?;
    if let (Some(proof), Some(beside)) = (siblings, beside) {
        // One lift: lanes would buy nothing.
        let mut lifts = [beside];
        lift_on(&mut lifts, 1);
        set_lifted(proof, &lifts[0]);
    }
    Ok(leaf)
}

/// Proofs for `keys`, in order: each walked as [`walk`] does, and the
/// compacted leaves beside absent keys (about 240 hashes each) lifted
/// together on the lanes.
pub(crate) fn proofs<R: NodeSource>(
    source: &R,
    root: &ComputedNode,
    keys: &[Key],
    lanes: usize,
) -> Result<Vec<Proof>, PlanError> {
    Ok(leaves_and_proofs(source, root, keys, lanes)?
        .into_iter()
        .map(|(_, proof)| proof)
        .collect())
}

/// [`proofs`], each with the leaf found at its key (the empty leaf for an
/// absent key): the leaf the proof proves, of the same nodes.
pub(crate) fn leaves_and_proofs<R: NodeSource>(
    source: &R,
    root: &ComputedNode,
    keys: &[Key],
    lanes: usize,
) -> Result<Vec<(Leaf, Proof)>, PlanError> {
    let mut found = Vec::with_capacity(keys.len());
    let mut pending = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let mut proof = Proof::empty();
        let (leaf, beside) = walk_to(source, root, key, Some(&mut proof))?;
        if let Some(beside) = beside {
            pending.push((i, beside));
        }
        found.push((leaf, proof));
    }
    for (i, lift) in lift_tagged(pending, lanes) {
        if let Some((_, proof)) = found.get_mut(i) {
            set_lifted(proof, &lift);
        }
    }
    Ok(found)
}

/// Records a lifted compacted leaf as the sibling at its level.
fn set_lifted(proof: &mut Proof, lift: &Lift) {
    proof.set_sibling(lift.to, ComputedNode::new(lift.hash, lift.sum()));
}

/// [`walk`] without hashing: when `key` is absent beside a compacted leaf
/// and `siblings` is given, that leaf's lift to the sibling level is
/// returned for the caller to hash.
fn walk_to<R: NodeSource>(
    source: &R,
    root: &ComputedNode,
    key: &Key,
    mut siblings: Option<&mut Proof>,
) -> Result<(Leaf, Option<Lift>), PlanError> {
    let mut hash = root.hash;
    for level in 0..=MAX_LEVEL {
        if is_empty_hash(level, &hash) {
            return Ok((Leaf::empty(), None));
        }
        let node = source
            .node(&hash)
            .ok_or(PlanError::MissingNode { hash, level })?;
        match node {
            Node::Branch { left, right, sum } if level < MAX_LEVEL => {
                let (child, sibling) = if key.bit(level) {
                    (*right, *left)
                } else {
                    (*left, *right)
                };
                if let Some(proof) = siblings.as_deref_mut() {
                    let sum = sibling_sum(source, level + 1, &sibling, *sum, &child)?;
                    proof.set_sibling(level + 1, ComputedNode::new(sibling, sum));
                }
                hash = child;
            }
            Node::Leaf(leaf) if level == MAX_LEVEL => return Ok((leaf.clone(), None)),
            Node::Compacted { key: stored, leaf } => {
                let there = stored.under_path(key, level);
                return Ok(match key.first_difference(&there) {
                    None => (leaf.clone(), None),
                    Some(split) => {
                        // The stored leaf is the sibling at `split + 1`.
                        let beside = siblings.is_some().then(|| {
                            Lift::new(leaf.hash(), leaf.sum(), there, MAX_LEVEL, split + 1)
                        });
                        (Leaf::empty(), beside)
                    }
                });
            }
            other => return Err(unexpected(hash, level, other)),
        }
    }
    Err(below_bottom(hash))
}

/// The subtree at `pos` of the tree under `root`, walking the path of
/// `pos` (its path bits, zeros below): `source` must hold the nodes on
/// that path down to `pos` (a path read of `*pos.path()` brings them).
pub(crate) fn subtree_at<R: NodeSource>(
    source: &R,
    root: &ComputedNode,
    pos: &Position,
) -> Result<Subtree, PlanError> {
    let target = pos.level();
    let probe = pos.path();
    let mut hash = root.hash;
    for level in 0..=MAX_LEVEL {
        if is_empty_hash(level, &hash) {
            return Ok(Subtree::Empty);
        }
        let node = source
            .node(&hash)
            .ok_or(PlanError::MissingNode { hash, level })?;
        match node {
            Node::Compacted { key, leaf } => {
                // Bits above `level` come from the path walked.
                let key = key.under_path(probe, level);
                return Ok(if Position::new(target, &key) == *pos {
                    Subtree::Leaf {
                        key,
                        leaf: leaf.clone(),
                    }
                } else {
                    Subtree::Empty
                });
            }
            Node::Leaf(leaf) if level == MAX_LEVEL => {
                return Ok(Subtree::Leaf {
                    key: *probe,
                    leaf: leaf.clone(),
                });
            }
            Node::Branch { sum, .. } if level == target => {
                return Ok(Subtree::Branch(ComputedNode::new(hash, *sum)));
            }
            Node::Branch { left, right, .. } if level < MAX_LEVEL => {
                hash = if probe.bit(level) { *right } else { *left };
            }
            other => return Err(unexpected(hash, level, other)),
        }
    }
    Err(below_bottom(hash))
}

/// `node` (at `hash`) cannot stand at `level` on a walk.
fn unexpected(hash: Hash, level: usize, node: &Node) -> PlanError {
    PlanError::UnexpectedNode {
        hash,
        level,
        found: node.kind_name(),
    }
}

/// A walk went through every level and still stood on a branch (`hash`).
fn below_bottom(hash: Hash) -> PlanError {
    PlanError::UnexpectedNode {
        hash,
        level: MAX_LEVEL,
        found: "branch",
    }
}
