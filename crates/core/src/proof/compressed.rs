//! Compressed proofs and their wire format (spec §4.3-4.5).
#![allow(clippy::arithmetic_side_effects)] // byte offsets only; no sums here

use alloc::vec::Vec;

use crate::empty::empty_hash;
use crate::hash::Hash;
use crate::key::MAX_LEVEL;
use crate::node::ComputedNode;
use crate::proof::decode_error::DecodeError;
use crate::proof::single::{Proof, empty_sibling, level_of};

/// Size of the bitmap: one bit per sibling.
pub(crate) const BITMAP_LEN: usize = MAX_LEVEL / 8;
/// Bytes of one explicit node: hash then big-endian sum.
pub(crate) const NODE_LEN: usize = 40;

/// A proof with its empty siblings replaced by bits.
///
/// `bits[j]` is set when sibling `j` is the empty subtree of its level;
/// `nodes` holds the others in index order, leaf side first.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CompressedProof {
    bits: [u8; BITMAP_LEN],
    nodes: Vec<ComputedNode>,
}

/// A proof's wire form: compression and the Go encoding live with the
/// compressed type, so the dependency runs one way (compressed → single).
impl Proof {
    /// Drops the empty siblings into a bitmap (spec §4.3); only the hash is
    /// compared with the empty-subtree hash of that level.
    pub fn compress(&self) -> CompressedProof {
        CompressedProof::from_proof(self)
    }

    /// Compress, then encode in the Go wire format.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.compress().encode()
    }

    /// Decode and decompress bytes in the Go wire format, strictly (see
    /// [`CompressedProof::decode`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        CompressedProof::decode(bytes)?.decompress()
    }
}

impl CompressedProof {
    pub(crate) fn from_proof(proof: &Proof) -> Self {
        let mut bits = [0u8; BITMAP_LEN];
        let mut nodes = Vec::new();
        for (j, node) in proof.nodes().iter().enumerate() {
            if node.hash == empty_hash(level_of(j)) {
                bits[j / 8] |= 1 << (j % 8);
            } else {
                nodes.push(*node);
            }
        }
        CompressedProof { bits, nodes }
    }

    /// True when sibling `j` is an empty subtree.
    pub fn is_empty_sibling(&self, j: usize) -> bool {
        j < MAX_LEVEL && self.bits[j / 8] >> (j % 8) & 1 == 1
    }

    /// The explicit (non-empty) siblings, leaf side first.
    pub fn nodes(&self) -> &[ComputedNode] {
        &self.nodes
    }

    /// The bitmap, bit `j` = byte `j / 8`, mask `1 << (j % 8)`.
    pub fn bitmap(&self) -> &[u8; BITMAP_LEN] {
        &self.bits
    }

    fn empty_count(&self) -> usize {
        self.bits.iter().map(|b| b.count_ones() as usize).sum()
    }

    /// Restores the 256 siblings. Fails when the bitmap's clear bits do not
    /// match the explicit node count.
    pub fn decompress(&self) -> Result<Proof, DecodeError> {
        let expected = MAX_LEVEL - self.empty_count();
        if expected != self.nodes.len() {
            return Err(DecodeError::CountMismatch {
                nodes: self.nodes.len(),
                expected,
            });
        }
        let mut explicit = self.nodes.iter();
        let nodes = (0..MAX_LEVEL)
            .map(|j| {
                if self.is_empty_sibling(j) {
                    Ok(empty_sibling(j))
                } else {
                    explicit.next().copied().ok_or(DecodeError::CountMismatch {
                        nodes: self.nodes.len(),
                        expected,
                    })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Proof::new(nodes).map_err(|_| DecodeError::CountMismatch {
            nodes: self.nodes.len(),
            expected,
        })
    }

    /// The wire encoding: `u16be count | (hash || be64 sum)* | 32-byte bitmap`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 + NODE_LEN * self.nodes.len() + BITMAP_LEN);
        // At most 256 explicit nodes, so the count always fits a u16.
        out.extend_from_slice(&(self.nodes.len() as u16).to_be_bytes());
        for node in &self.nodes {
            out.extend_from_slice(node.hash.as_bytes());
            out.extend_from_slice(&node.sum.to_be_bytes());
        }
        out.extend_from_slice(&self.bits);
        out
    }

    /// Strict decoding of [`encode`](Self::encode)'s format. Rejects, with a
    /// typed error, what Go tolerates: a bitmap cut short, trailing bytes, a
    /// node count that disagrees with the bitmap, and explicit nodes equal to
    /// the empty subtree of their level. Never panics.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let Some((count, rest)) = bytes.split_first_chunk::<2>() else {
            return Err(if bytes.is_empty() {
                DecodeError::Empty
            } else {
                DecodeError::Truncated {
                    needed: 2,
                    got: bytes.len(),
                }
            });
        };
        let count = usize::from(u16::from_be_bytes(*count));
        let needed = 2 + NODE_LEN * count + BITMAP_LEN;
        if bytes.len() < needed {
            return Err(DecodeError::Truncated {
                needed,
                got: bytes.len(),
            });
        }
        if bytes.len() > needed {
            return Err(DecodeError::TrailingBytes {
                extra: bytes.len() - needed,
            });
        }
        let (node_bytes, bitmap) = rest.split_at(NODE_LEN * count);
        let mut bits = [0u8; BITMAP_LEN];
        bits.copy_from_slice(bitmap);
        let nodes: Vec<ComputedNode> = node_bytes
            .chunks_exact(NODE_LEN)
            .map(|chunk| {
                let (hash, sum) = chunk.split_at(32);
                let mut h = [0u8; 32];
                h.copy_from_slice(hash);
                let mut s = [0u8; 8];
                s.copy_from_slice(sum);
                ComputedNode::new(Hash(h), u64::from_be_bytes(s))
            })
            .collect();
        let proof = CompressedProof { bits, nodes };
        let expected = MAX_LEVEL - proof.empty_count();
        if expected != proof.nodes.len() {
            return Err(DecodeError::CountMismatch {
                nodes: proof.nodes.len(),
                expected,
            });
        }
        let explicit_levels = (0..MAX_LEVEL).filter(|j| !proof.is_empty_sibling(*j));
        for (index, node) in explicit_levels.zip(&proof.nodes) {
            if node.hash == empty_hash(level_of(index)) {
                return Err(DecodeError::NonCanonicalEmpty { index });
            }
        }
        Ok(proof)
    }
}
