//! MS-SMT nodes and compressed proofs in tapd's wire format
//! (`mssmt.CompressedProof`).

use alloc::vec::Vec;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::codec::{Reader, len_u64};
use crate::error::{Context, DecodeError, NonCanonicalReason};

/// Levels of the tree: a proof has one sibling per level.
pub const MAX_TREE_LEVELS: usize = 256;

/// A node as a proof carries it: its hash and its sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MsSmtNode {
    /// The node hash.
    pub hash: [u8; 32],
    /// The node sum.
    pub sum: u64,
}

impl MsSmtNode {
    /// Reads 32 hash bytes and a big-endian sum.
    pub(crate) fn read(r: &mut Reader<'_>, context: Context) -> Result<Self, DecodeError> {
        Ok(MsSmtNode {
            hash: r.array(context)?,
            sum: r.u64_be(context)?,
        })
    }

    /// The 40 bytes.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.hash);
        out.extend_from_slice(&self.sum.to_be_bytes());
    }
}

/// The hash of the empty subtree at each level, `EmptyTree[level]` of tapd's
/// `mssmt` package: level 256 is the empty leaf, `sha256(be64(0))`; each
/// level above hashes two copies of the one below with a zero sum.
pub fn empty_tree_hash(level: usize) -> Option<[u8; 32]> {
    static TABLE: OnceLock<Vec<[u8; 32]>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = alloc::vec![[0u8; 32]; MAX_TREE_LEVELS.saturating_add(1)];
        let mut below: [u8; 32] = Sha256::digest(0u64.to_be_bytes()).into();
        for slot in table.iter_mut().rev() {
            *slot = below;
            let mut h = Sha256::new();
            h.update(below);
            h.update(below);
            h.update(0u64.to_be_bytes());
            below = h.finalize().into();
        }
        table
    });
    table.get(level).copied()
}

/// A compressed MS-SMT merkle proof: a 256-bit map of which siblings are
/// empty subtrees, and the other siblings in order, leaf side first.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MsSmtProof {
    /// Bit `i` (byte `i / 8`, bit `i % 8`) set: sibling `i` is the empty
    /// subtree of its level.
    pub bits: [u8; 32],
    /// The non-empty siblings, leaf side first.
    pub nodes: Vec<MsSmtNode>,
}

impl MsSmtProof {
    /// Whether sibling `index` (leaf side first) is an empty subtree.
    pub fn is_empty_sibling(&self, index: usize) -> bool {
        let byte = self.bits.get(index / 8).copied().unwrap_or(0);
        let shift = u32::try_from(index % 8).unwrap_or(0);
        byte.checked_shr(shift).unwrap_or(0) & 1 == 1
    }

    /// Decodes a whole compressed proof: a big-endian u16 node count, the
    /// nodes (hash, big-endian sum), then the 32-byte bitmap, and nothing
    /// after it.
    pub(crate) fn read_exact(mut r: Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::MsSmtProof;
        let offset = r.offset();
        let n = r.u16_be(c)?;
        let mut nodes = Vec::with_capacity(usize::from(n).min(r.remaining() / 40));
        for _ in 0..n {
            nodes.push(MsSmtNode::read(&mut r, c)?);
        }
        let bits: [u8; 32] = r.array(c)?;
        r.finish(c)?;
        let proof = MsSmtProof { bits, nodes };
        let expected = (0..MAX_TREE_LEVELS)
            .filter(|&i| !proof.is_empty_sibling(i))
            .count();
        if expected != proof.nodes.len() {
            return Err(DecodeError::NodeCountMismatch {
                offset,
                nodes: u64::from(n),
                expected: len_u64(expected),
            });
        }
        // tapd re-compresses a decoded proof before encoding it: an explicit
        // sibling equal to the empty subtree would turn into a bit.
        let explicit = (0..MAX_TREE_LEVELS).filter(|&i| !proof.is_empty_sibling(i));
        for (index, node) in explicit.zip(&proof.nodes) {
            let level = MAX_TREE_LEVELS.saturating_sub(index);
            if empty_tree_hash(level) == Some(node.hash) {
                return Err(DecodeError::NonCanonical {
                    context: c,
                    offset,
                    reason: NonCanonicalReason::ExplicitEmptyNode { index },
                });
            }
        }
        Ok(proof)
    }

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let n = u16::try_from(self.nodes.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&n.to_be_bytes());
        for node in &self.nodes {
            node.write(&mut out);
        }
        out.extend_from_slice(&self.bits);
        out
    }

    /// Decodes a whole compressed proof (see the type's documentation).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::read_exact(Reader::new(bytes))
    }
}
