//! The single-key proof: 256 siblings and verification (its wire form is
//! in `compressed`).
#![deny(clippy::arithmetic_side_effects)]

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::empty::empty_hash;
use crate::error::SumOverflow;
use crate::hash::branch_hash;
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::sum;

/// A merkle proof: the 256 siblings on a key's path, leaf side first.
///
/// `nodes()[j]` is the sibling at level `256 - j` (spec §4.1). The same
/// proof serves inclusion (with the key's leaf) and exclusion (with the
/// empty leaf).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Proof {
    nodes: Box<[ComputedNode; MAX_LEVEL]>,
}

/// Why a sibling list is not a proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a proof has exactly 256 siblings, got {0}")]
pub struct WrongLength(pub usize);

impl Proof {
    /// A proof whose siblings are all empty subtrees (the proof of any key in
    /// an empty tree).
    pub fn empty() -> Self {
        let nodes: Vec<ComputedNode> = (0..MAX_LEVEL).map(empty_sibling).collect();
        Proof {
            nodes: nodes
                .into_boxed_slice()
                .try_into()
                .unwrap_or_else(|_| unreachable!("256 siblings")),
        }
    }

    /// A proof from 256 siblings, leaf side first.
    pub fn new(nodes: Vec<ComputedNode>) -> Result<Self, WrongLength> {
        let len = nodes.len();
        Ok(Proof {
            nodes: nodes
                .into_boxed_slice()
                .try_into()
                .map_err(|_| WrongLength(len))?,
        })
    }

    /// The siblings, leaf side first.
    pub fn nodes(&self) -> &[ComputedNode] {
        &self.nodes[..]
    }

    /// Sets the sibling that sits at `level` (1..=256; other levels change
    /// nothing): how a walk down a tree fills in a proof.
    pub fn set_sibling(&mut self, level: usize, node: ComputedNode) {
        // level is 1..=256 on every caller's path: index 255..=0.
        if let Some(slot) = MAX_LEVEL
            .checked_sub(level)
            .and_then(|j| self.nodes.get_mut(j))
        {
            *slot = node;
        }
    }

    /// The root this proof yields for `leaf` at `key` (Go's `Proof.Root`),
    /// or the level where a sum overflowed.
    pub fn root(&self, key: &Key, leaf: &Leaf) -> Result<ComputedNode, SumOverflow> {
        let mut hash = leaf.hash();
        let mut total = leaf.sum();
        for (level, sibling) in (0..MAX_LEVEL).rev().zip(self.nodes.iter()) {
            total = sum::add(total, sibling.sum, level)?;
            hash = if key.bit(level) {
                branch_hash(&sibling.hash, &hash, total)
            } else {
                branch_hash(&hash, &sibling.hash, total)
            };
        }
        Ok(ComputedNode::new(hash, total))
    }

    /// True when this proof shows `leaf` at `key` under `root`: both the root
    /// hash and the root sum must match. A sum overflow yields false, never a
    /// panic (spec C4).
    pub fn verify(&self, key: &Key, leaf: &Leaf, root: &ComputedNode) -> bool {
        self.root(key, leaf).is_ok_and(|r| r == *root)
    }
}

/// `VerifyMerkleProof`: true when `proof` shows `leaf` at `key` under `root`.
pub fn verify_merkle_proof(key: &Key, leaf: &Leaf, proof: &Proof, root: &ComputedNode) -> bool {
    proof.verify(key, leaf, root)
}

/// The sibling level for index `j` of a proof.
pub(crate) fn level_of(j: usize) -> usize {
    MAX_LEVEL.saturating_sub(j)
}

/// The empty sibling at index `j`.
pub(crate) fn empty_sibling(j: usize) -> ComputedNode {
    ComputedNode::new(empty_hash(level_of(j)), 0)
}
