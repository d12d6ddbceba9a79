//! Nested proofs: a key's proof in its own tree, then, tree by tree up a
//! chain of parent trees, the proof of each tree's root as a leaf of its
//! parent (tapd's universe proof and its multiverse inclusion proof, a
//! supply sub-tree leaf and the root supply tree).
//!
//! A parent's leaf for a child tree holds the child's root hash as its
//! 32-byte value and, by the link's [`LinkSum`], the child's root sum or a
//! fixed sum. Verifying recomputes each tree's root from the level below
//! and checks the last one against the top root.
//!
//! Encoding (every level in the Go compressed format, decoded strictly):
//! `u8 levels above the first | proof | (key[32] | sum | proof)*` where
//! `sum` is `0x00` (the child's root sum) or `0x01 | u64be` (a fixed sum).

use alloc::vec;
use alloc::vec::Vec;

use crate::error::SumOverflow;
use crate::key::Key;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::proof::compressed::{BITMAP_LEN, NODE_LEN};
use crate::proof::decode_error::DecodeError;
use crate::proof::single::Proof;

/// Most parent levels a nested proof carries (a chain of trees is never
/// this deep; the bound keeps decoding of hostile bytes small).
pub const MAX_NESTED_LEVELS: usize = 16;

/// The sum of a parent tree's leaf for a child tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkSum {
    /// The child's root sum (supply trees; a multiverse of transfers).
    #[default]
    ChildRoot,
    /// Always this sum, whatever the child holds (tapd's issuance
    /// multiverse counts each universe as 1).
    Fixed(u64),
}

impl LinkSum {
    /// The parent's leaf for a child tree whose root is `child`.
    pub fn leaf(self, child: &ComputedNode) -> Leaf {
        Leaf::new(child.hash.0.to_vec(), self.sum(child))
    }

    /// The sum of that leaf.
    pub fn sum(self, child: &ComputedNode) -> u64 {
        match self {
            LinkSum::ChildRoot => child.sum,
            LinkSum::Fixed(sum) => sum,
        }
    }
}

/// One parent level of a [`NestedProof`]: where the tree below sits in
/// this tree, how its leaf is summed, and that leaf's proof here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedLevel {
    /// The key of the tree below in this tree.
    pub key: Key,
    /// How the leaf's sum follows from the tree below.
    pub sum: LinkSum,
    /// The proof of that leaf in this tree.
    pub proof: Proof,
}

/// A key's proof in its tree and the proofs that carry that tree's root up
/// a chain of parent trees; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedProof {
    proof: Proof,
    levels: Vec<NestedLevel>,
}

/// Why bytes are not a [`NestedProof`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NestedDecodeError {
    /// No bytes at all.
    #[error("nested proof bytes are empty")]
    Empty,
    /// More parent levels than [`MAX_NESTED_LEVELS`].
    #[error("a nested proof has at most {max} parent levels, got {got}")]
    TooManyLevels {
        /// Levels announced.
        got: usize,
        /// The bound.
        max: usize,
    },
    /// The bytes end inside level `level`.
    #[error("nested proof is truncated in level {level}")]
    Truncated {
        /// The level (0: the key's own tree).
        level: usize,
    },
    /// A sum tag other than 0 (child root) or 1 (fixed).
    #[error("level {level}: unknown sum tag {tag}")]
    SumTag {
        /// The level.
        level: usize,
        /// The tag found.
        tag: u8,
    },
    /// A level's proof does not decode.
    #[error("level {level}: {source}")]
    Proof {
        /// The level.
        level: usize,
        /// Why.
        #[source]
        source: DecodeError,
    },
    /// Bytes after the last level.
    #[error("trailing data after the nested proof: {extra} bytes")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
}

impl NestedProof {
    /// A nested proof from the key's proof in its own tree and the parent
    /// levels, nearest first.
    pub fn new(proof: Proof, levels: Vec<NestedLevel>) -> Self {
        NestedProof { proof, levels }
    }

    /// The key's proof in its own tree.
    pub fn proof(&self) -> &Proof {
        &self.proof
    }

    /// The parent levels, nearest first.
    pub fn levels(&self) -> &[NestedLevel] {
        &self.levels
    }

    /// The root of every tree on the chain for `leaf` at `key`: the key's
    /// own tree first, the top tree last.
    pub fn roots(&self, key: &Key, leaf: &Leaf) -> Result<Vec<ComputedNode>, SumOverflow> {
        let mut roots = Vec::with_capacity(self.levels.len() + 1);
        let mut root = self.proof.root(key, leaf)?;
        roots.push(root);
        for level in &self.levels {
            root = level.proof.root(&level.key, &level.sum.leaf(&root))?;
            roots.push(root);
        }
        Ok(roots)
    }

    /// The top tree's root for `leaf` at `key`.
    pub fn top_root(&self, key: &Key, leaf: &Leaf) -> Result<ComputedNode, SumOverflow> {
        let mut root = self.proof.root(key, leaf)?;
        for level in &self.levels {
            root = level.proof.root(&level.key, &level.sum.leaf(&root))?;
        }
        Ok(root)
    }

    /// True when this proof shows `leaf` at `key` in a tree whose root,
    /// carried up every level, is `top` (hash and sum). A sum overflow at
    /// any level yields false.
    pub fn verify(&self, key: &Key, leaf: &Leaf, top: &ComputedNode) -> bool {
        self.top_root(key, leaf).is_ok_and(|root| root == *top)
    }

    /// The encoding of the module docs.
    pub fn to_bytes(&self) -> Vec<u8> {
        // At most MAX_NESTED_LEVELS levels by construction of a forest's
        // chains; a longer hand-built proof is cut at the bound's byte.
        let mut out = vec![u8::try_from(self.levels.len()).unwrap_or(u8::MAX)];
        out.extend(self.proof.to_bytes());
        for level in &self.levels {
            out.extend_from_slice(&level.key.0);
            match level.sum {
                LinkSum::ChildRoot => out.push(0),
                LinkSum::Fixed(sum) => {
                    out.push(1);
                    out.extend_from_slice(&sum.to_be_bytes());
                }
            }
            out.extend(level.proof.to_bytes());
        }
        out
    }

    /// Strict decoding of [`to_bytes`](Self::to_bytes): every level's
    /// proof decoded as [`Proof::from_bytes`] does, no trailing bytes, a
    /// bounded number of levels. Never panics.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, NestedDecodeError> {
        let (&count, mut rest) = bytes.split_first().ok_or(NestedDecodeError::Empty)?;
        let count = usize::from(count);
        if count > MAX_NESTED_LEVELS {
            return Err(NestedDecodeError::TooManyLevels {
                got: count,
                max: MAX_NESTED_LEVELS,
            });
        }
        let proof = take_proof(&mut rest, 0)?;
        let mut levels = Vec::with_capacity(count);
        for level in 1..=count {
            let (key, after) = rest
                .split_first_chunk::<32>()
                .ok_or(NestedDecodeError::Truncated { level })?;
            let (&tag, after) = after
                .split_first()
                .ok_or(NestedDecodeError::Truncated { level })?;
            rest = after;
            let sum = match tag {
                0 => LinkSum::ChildRoot,
                1 => {
                    let (sum, after) = rest
                        .split_first_chunk::<8>()
                        .ok_or(NestedDecodeError::Truncated { level })?;
                    rest = after;
                    LinkSum::Fixed(u64::from_be_bytes(*sum))
                }
                tag => return Err(NestedDecodeError::SumTag { level, tag }),
            };
            let proof = take_proof(&mut rest, level)?;
            levels.push(NestedLevel {
                key: Key(*key),
                sum,
                proof,
            });
        }
        if !rest.is_empty() {
            return Err(NestedDecodeError::TrailingBytes { extra: rest.len() });
        }
        Ok(NestedProof { proof, levels })
    }
}

/// Decodes the compressed proof at the front of `rest` (its length follows
/// from its node count) and moves `rest` past it.
fn take_proof(rest: &mut &[u8], level: usize) -> Result<Proof, NestedDecodeError> {
    let (count, _) = rest
        .split_first_chunk::<2>()
        .ok_or(NestedDecodeError::Truncated { level })?;
    let len = 2 + NODE_LEN * usize::from(u16::from_be_bytes(*count)) + BITMAP_LEN;
    if rest.len() < len {
        return Err(NestedDecodeError::Truncated { level });
    }
    let (bytes, after) = rest.split_at(len);
    *rest = after;
    Proof::from_bytes(bytes).map_err(|source| NestedDecodeError::Proof { level, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::Hash;

    fn sample() -> NestedProof {
        let mut proof = Proof::empty();
        proof.set_sibling(3, ComputedNode::new(Hash([7; 32]), 5));
        let mut parent = Proof::empty();
        parent.set_sibling(1, ComputedNode::new(Hash([9; 32]), 11));
        NestedProof::new(
            proof,
            vec![
                NestedLevel {
                    key: Key([1; 32]),
                    sum: LinkSum::ChildRoot,
                    proof: parent.clone(),
                },
                NestedLevel {
                    key: Key([2; 32]),
                    sum: LinkSum::Fixed(1),
                    proof: Proof::empty(),
                },
            ],
        )
    }

    #[test]
    fn round_trips_and_rejects_every_cut_and_extension() {
        let proof = sample();
        let bytes = proof.to_bytes();
        assert_eq!(NestedProof::from_bytes(&bytes), Ok(proof));
        for cut in 0..bytes.len() {
            assert!(NestedProof::from_bytes(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            NestedProof::from_bytes(&longer),
            Err(NestedDecodeError::TrailingBytes { extra: 1 })
        );
        let mut tag = bytes;
        // The first level's sum tag sits after the count, the first proof
        // and the key.
        let at = 1 + proof_len(&tag[1..]) + 32;
        tag[at] = 2;
        assert_eq!(
            NestedProof::from_bytes(&tag),
            Err(NestedDecodeError::SumTag { level: 1, tag: 2 })
        );
    }

    fn proof_len(bytes: &[u8]) -> usize {
        2 + NODE_LEN * usize::from(u16::from_be_bytes([bytes[0], bytes[1]])) + BITMAP_LEN
    }

    #[test]
    fn verifies_up_the_chain() {
        let proof = sample();
        let (key, leaf) = (Key([3; 32]), Leaf::new(b"x".to_vec(), 4));
        let roots = proof.roots(&key, &leaf).expect("no overflow");
        assert_eq!(roots.len(), 3);
        assert!(proof.verify(&key, &leaf, &roots[2]));
        assert!(!proof.verify(&key, &Leaf::new(b"y".to_vec(), 4), &roots[2]));
        // The first parent's leaf carries the child's root sum (4 + 5), the
        // second a fixed 1.
        assert_eq!(roots[1].sum, 4 + 5 + 11);
        assert_eq!(roots[2].sum, 1);
    }
}
