//! The subtree under one position, as the abstract tree has it: what
//! subtree sums, the self-checking `children` API and sync exchange.
//!
//! A subtree is described the same way whatever the layout: empty, one
//! leaf (with its full key, so a reader can hash it at any level), or a
//! branch known by hash and sum. A reader holding the parent's (hash, sum)
//! checks two children with [`Subtree::check_children`] before trusting
//! them; nothing else about a peer needs to be believed.
#![deny(clippy::arithmetic_side_effects)]

use crate::empty::empty_hash;
use crate::hash::branch_hash;
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::node::{ComputedNode, compacted_hash};
use crate::position::Position;

/// The subtree under one position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subtree {
    /// No leaf under the position.
    Empty,
    /// Exactly one leaf under the position (a compacted leaf, or the leaf
    /// itself at level 256).
    Leaf {
        /// The leaf's key (it lies under the position).
        key: Key,
        /// The leaf.
        leaf: Leaf,
    },
    /// A branch: known by hash and sum. Compacted trees answer this only for
    /// subtrees with two or more leaves; full trees for every non-empty
    /// subtree above level 256.
    Branch(ComputedNode),
}

impl Subtree {
    /// Its (hash, sum) as the subtree at `level`.
    pub fn computed(&self, level: usize) -> ComputedNode {
        match self {
            Subtree::Empty => ComputedNode::empty(level),
            Subtree::Leaf { key, leaf } => {
                ComputedNode::new(compacted_hash(level, key, leaf), leaf.sum())
            }
            Subtree::Branch(c) => *c,
        }
    }

    /// The sum of the leaves under the position (the leaf count, where
    /// every leaf has sum 1).
    pub fn sum(&self) -> u64 {
        match self {
            Subtree::Empty => 0,
            Subtree::Leaf { leaf, .. } => leaf.sum(),
            Subtree::Branch(c) => c.sum,
        }
    }

    /// True for [`Subtree::Empty`].
    pub fn is_empty(&self) -> bool {
        matches!(self, Subtree::Empty)
    }

    /// Checks that `children` are the two children of the subtree `parent`
    /// (the (hash, sum) the caller already trusts) at position `at`: they
    /// hash to it, their sums add up to it, and a leaf child's key lies
    /// under the child's position. A branch child at level 256 or an empty
    /// leaf are refused. Never panics.
    pub fn check_children(at: &Position, parent: &ComputedNode, children: &[Subtree; 2]) -> bool {
        Self::checked_children(at, parent, children).is_some()
    }

    /// [`check_children`](Self::check_children), returning the children's
    /// (hash, sum) when they check.
    pub fn checked_children(
        at: &Position,
        parent: &ComputedNode,
        children: &[Subtree; 2],
    ) -> Option<[ComputedNode; 2]> {
        let level = at.level();
        if level >= MAX_LEVEL {
            return None;
        }
        let child_level = level.checked_add(1)?;
        for (side, child) in children.iter().enumerate() {
            let pos = at.child(side == 1);
            match child {
                Subtree::Leaf { key, leaf }
                    if leaf.is_empty() || Position::new(child_level, key) != pos =>
                {
                    return None;
                }
                Subtree::Branch(_) if child_level == MAX_LEVEL => return None,
                Subtree::Branch(c) if c.hash == empty_hash(child_level) => return None,
                _ => {}
            }
        }
        let (l, r) = (
            children[0].computed(child_level),
            children[1].computed(child_level),
        );
        let sum = l.sum.checked_add(r.sum)?;
        (sum == parent.sum && branch_hash(&l.hash, &r.hash, sum) == parent.hash).then_some([l, r])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_check_their_parent() {
        let root = Position::ROOT;
        let a = Key([0; 32]);
        let b = Key([1; 32]);
        let la = Leaf::new(b"a".to_vec(), 3);
        let lb = Leaf::new(b"b".to_vec(), 4);
        let children = [
            Subtree::Leaf {
                key: a,
                leaf: la.clone(),
            },
            Subtree::Leaf {
                key: b,
                leaf: lb.clone(),
            },
        ];
        let l = children[0].computed(1);
        let r = children[1].computed(1);
        let parent = ComputedNode::new(branch_hash(&l.hash, &r.hash, 7), 7);
        assert!(Subtree::check_children(&root, &parent, &children));
        // Swapped, a wrong sum, a key on the wrong side: refused.
        let swapped = [children[1].clone(), children[0].clone()];
        assert!(!Subtree::check_children(&root, &parent, &swapped));
        let wrong_sum = ComputedNode::new(parent.hash, 8);
        assert!(!Subtree::check_children(&root, &wrong_sum, &children));
        let lying = [
            Subtree::Leaf { key: b, leaf: la },
            Subtree::Leaf { key: b, leaf: lb },
        ];
        assert!(!Subtree::check_children(&root, &parent, &lying));
    }
}
