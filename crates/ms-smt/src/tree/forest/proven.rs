//! A leaf read with its nested proof and the roots of the state it was
//! read at.

use crate::NestedProof;
use crate::leaf::Leaf;
use crate::node::ComputedNode;

/// The leaf at a key with its nested proof up the tree's chain of parents
/// and the roots of that chain, all of one read
/// ([`Forest::proven_leaf`](super::Forest::proven_leaf)): the proof is
/// walked by hash from these roots, so it proves this leaf under them
/// without being hashed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenLeaf {
    /// The leaf (the empty leaf when the key is absent).
    pub leaf: Leaf,
    /// Its proof in its tree and in each parent above.
    pub proof: NestedProof,
    /// The tree's root, then each parent's, as `proof.roots(key, &leaf)`
    /// gives them.
    pub roots: Vec<ComputedNode>,
}
