//! Stored node kinds and the (hash, sum) pair every node reduces to.

use crate::empty::empty_hash;
use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;

/// A node reduced to its hash and sum: what proofs carry as siblings and
/// what a tree's root is (Go's `ComputedNode`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ComputedNode {
    /// The node hash.
    pub hash: Hash,
    /// The node sum.
    pub sum: u64,
}

impl ComputedNode {
    /// A node with this hash and sum.
    pub const fn new(hash: Hash, sum: u64) -> Self {
        ComputedNode { hash, sum }
    }

    /// The empty subtree at `level`.
    pub fn empty(level: usize) -> Self {
        ComputedNode {
            hash: empty_hash(level),
            sum: 0,
        }
    }

    /// The root of the empty tree.
    pub fn empty_root() -> Self {
        Self::empty(0)
    }
}

/// A node as stores keep it, keyed by its hash.
///
/// A tree only stores non-empty subtrees; empty ones are implied by the
/// [`empty_hash`] table.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Node {
    /// An inner node. Its children are referenced by hash.
    Branch {
        /// Left child hash (the empty-subtree hash when that side is empty).
        left: Hash,
        /// Right child hash.
        right: Hash,
        /// Sum of both children.
        sum: u64,
    },
    /// A leaf at level 256 (full trees only).
    Leaf(Leaf),
    /// A compacted leaf: a subtree holding exactly one non-empty leaf.
    ///
    /// Only the key bits at and below the node's level are meaningful: the
    /// bits above are implied by where the node sits, and a shared row may
    /// carry another position's high bits.
    Compacted {
        /// A key whose low bits locate the leaf inside the subtree.
        key: Key,
        /// The leaf.
        leaf: Leaf,
    },
}

impl Node {
    /// What kind of node this is, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Node::Branch { .. } => "branch",
            Node::Leaf(_) => "plain leaf",
            Node::Compacted { .. } => "compacted leaf",
        }
    }

    /// The node's sum.
    pub fn sum(&self) -> u64 {
        match self {
            Node::Branch { sum, .. } => *sum,
            Node::Leaf(leaf) | Node::Compacted { leaf, .. } => leaf.sum(),
        }
    }
}

/// Hash of a compacted leaf at `level` (spec §1.5): the root of a subtree
/// whose only non-empty leaf is `leaf` at `key`.
///
/// Costs `256 - level` branch hashes plus the leaf hash.
pub fn compacted_hash(level: usize, key: &Key, leaf: &Leaf) -> Hash {
    lift(leaf.hash(), leaf.sum(), key, MAX_LEVEL, level)
}

/// Lifts a node at level `from` up to level `to` through one-child branches
/// whose other side is empty, taking sides from `key` (one branch hash
/// per level).
pub fn lift(mut hash: Hash, sum: u64, key: &Key, from: usize, to: usize) -> Hash {
    for level in (to..from).rev() {
        let empty = empty_hash(level + 1);
        hash = if key.bit(level) {
            branch_hash(&empty, &hash, sum)
        } else {
            branch_hash(&hash, &empty, sum)
        };
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_1_7_leaf_and_compacted() {
        let leaf = Leaf::new(b"a".to_vec(), 1);
        assert_eq!(
            leaf.hash().to_hex(),
            "667e5a68a02926b58a7401f7ef7fde96c8827549cc2f3f20674370628efea8b8"
        );
        let k0 = Key([0; 32]);
        assert_eq!(
            compacted_hash(1, &k0, &leaf).to_hex(),
            "e9bc03fbfbf50fded6e228fb3365c9e7637a1c7c009876c92f5911d708eaf24d"
        );
        assert_eq!(
            compacted_hash(0, &k0, &leaf).to_hex(),
            "1688022a7c33dccbfe8f11968800b1294266d1b76f453b8e6117727406a5e867"
        );
        assert_eq!(compacted_hash(256, &k0, &leaf), leaf.hash());
    }
}
