//! Read walks shared by both layouts: the leaf at a key and its proof.

use crate::descent::Subtree;
use crate::descent::{NodeSource, sibling_sum};
use crate::empty::is_empty_hash;
use crate::error::PlanError;
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node, compacted_hash};
use crate::position::Position;
use crate::proof::single::Proof;

/// Walks from `root` towards `key`. Returns the leaf found (the empty leaf
/// for an absent key) and, when `siblings` is given, fills in every sibling
/// met on the way (entries left untouched are empty subtrees).
pub(crate) fn walk<R: NodeSource>(
    source: &R,
    root: &ComputedNode,
    key: &Key,
    mut siblings: Option<&mut Proof>,
) -> Result<Leaf, PlanError> {
    let mut hash = root.hash;
    for level in 0..=MAX_LEVEL {
        if is_empty_hash(level, &hash) {
            return Ok(Leaf::empty());
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
            Node::Leaf(leaf) if level == MAX_LEVEL => return Ok(leaf.clone()),
            Node::Compacted { key: stored, leaf } => {
                let there = stored.under_path(key, level);
                return Ok(match key.first_difference(&there) {
                    None => leaf.clone(),
                    Some(split) => {
                        if let Some(proof) = siblings.as_deref_mut() {
                            let sibling = compacted_hash(split + 1, &there, leaf);
                            proof.set_sibling(split + 1, ComputedNode::new(sibling, leaf.sum()));
                        }
                        Leaf::empty()
                    }
                });
            }
            other => {
                return Err(PlanError::UnexpectedNode {
                    hash,
                    level,
                    found: other.kind_name(),
                });
            }
        }
    }
    Err(PlanError::UnexpectedNode {
        hash,
        level: MAX_LEVEL,
        found: "branch",
    })
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
            other => {
                return Err(PlanError::UnexpectedNode {
                    hash,
                    level,
                    found: other.kind_name(),
                });
            }
        }
    }
    Err(PlanError::UnexpectedNode {
        hash,
        level: MAX_LEVEL,
        found: "branch",
    })
}
