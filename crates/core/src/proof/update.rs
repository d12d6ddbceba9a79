//! Update proofs: what a verifier who knows only the old root needs to
//! compute the root after a batch (supply commitments). Documented on
//! [`UpdateProof`].

use alloc::vec::Vec;

use crate::error::{PlanError, SumOverflow};
use crate::key::Key;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::proof::multi::{MultiDecodeError, MultiProof, MultiProofError};
use crate::source::NodeSource;

/// The old leaves at a batch's keys and their [`MultiProof`] against the
/// old root: what a verifier who knows only the old root needs to compute
/// the root after the batch.
///
/// The batch changes nothing off the keys' paths, so the proof's siblings,
/// hashed with the new leaves, give the new root.
///
/// # Wire format
///
/// The [`MultiProof`] encoding, then one entry per key (as many as its key
/// count), in tree order of the batch's distinct keys:
///
/// | field | size | content |
/// |---|---|---|
/// | length | 8 | `be64` length `m` of the old value |
/// | value | `m` | the old value (empty for an absent key) |
/// | sum | 8 | `be64` old sum |
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UpdateProof {
    proof: MultiProof,
    /// One per key of `proof`, in tree order; the empty leaf when absent.
    old_leaves: Vec<Leaf>,
}

/// Why an [`UpdateProof`] does not yield a new root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateProofError {
    /// The proof's key count and its old leaves, or the batch's distinct
    /// keys, disagree in number.
    #[error("the proof holds {leaves} old leaves, expected {keys}")]
    LeafCountMismatch {
        /// Keys expected (of the proof, or distinct keys of the batch).
        keys: usize,
        /// Old leaves in the proof.
        leaves: usize,
    },
    /// The old leaves do not fit the proof at the batch's keys.
    #[error("the proof does not fit the batch: {0}")]
    Proof(#[from] MultiProofError),
    /// The old leaves and the proof give another root than the old one.
    #[error("the proof yields old root {computed:?}, not {claimed:?}")]
    OldRootMismatch {
        /// The old root given.
        claimed: ComputedNode,
        /// What the proof yields.
        computed: ComputedNode,
    },
    /// The new tree's total would exceed `u64::MAX` (the tree rejects
    /// such a batch too).
    #[error(transparent)]
    Overflow(SumOverflow),
}

impl UpdateProof {
    /// An update proof from its parts: `old_leaves` holds one leaf per key
    /// of `proof`, in tree order (the empty leaf for absent keys).
    pub fn new(proof: MultiProof, old_leaves: Vec<Leaf>) -> Result<Self, UpdateProofError> {
        if old_leaves.len() != proof.key_count() {
            return Err(UpdateProofError::LeafCountMismatch {
                keys: proof.key_count(),
                leaves: old_leaves.len(),
            });
        }
        Ok(UpdateProof { proof, old_leaves })
    }

    /// The proof for `batch` against `old_root`, read from the old tree's
    /// stored nodes. Only the batch's keys matter (an empty leaf deletes).
    pub fn from_source<R: NodeSource>(
        source: &R,
        old_root: &ComputedNode,
        batch: &[(Key, Leaf)],
    ) -> Result<Self, PlanError> {
        let keys: Vec<Key> = batch.iter().map(|(key, _)| *key).collect();
        let (proof, leaves) = MultiProof::from_source_with_leaves(source, old_root, &keys)?;
        let old_leaves = leaves.into_iter().map(|(_, leaf)| leaf).collect();
        Ok(UpdateProof { proof, old_leaves })
    }

    /// The multi-key proof against the old root.
    pub fn proof(&self) -> &MultiProof {
        &self.proof
    }

    /// The old leaves, in tree order of the batch's distinct keys.
    pub fn old_leaves(&self) -> &[Leaf] {
        &self.old_leaves
    }

    /// The root after `batch` (in any order; the last occurrence of a key
    /// wins, as in ms-smt's `Tree::insert_many`), once
    /// the old leaves are shown to sit under `old_root`.
    pub fn new_root(
        &self,
        old_root: &ComputedNode,
        batch: &[(Key, Leaf)],
    ) -> Result<ComputedNode, UpdateProofError> {
        // In tree order, one entry per key, the last occurrence winning, as
        // `insert_many` prepares it (tests/multiproof.rs repeats keys).
        let items: Vec<(Key, &Leaf)> = crate::batch::prepare(batch)
            .into_iter()
            .map(|item| (item.key, item.leaf))
            .collect();
        if items.len() != self.old_leaves.len() {
            return Err(UpdateProofError::LeafCountMismatch {
                keys: items.len(),
                leaves: self.old_leaves.len(),
            });
        }
        let old: Vec<(Key, &Leaf)> = items
            .iter()
            .zip(&self.old_leaves)
            .map(|((key, _), leaf)| (*key, leaf))
            .collect();
        let computed = self.proof.root_sorted(&old)?;
        if computed != *old_root {
            return Err(UpdateProofError::OldRootMismatch {
                claimed: *old_root,
                computed,
            });
        }
        self.proof.root_sorted(&items).map_err(|e| match e {
            MultiProofError::Overflow(o) => UpdateProofError::Overflow(o),
            other => UpdateProofError::Proof(other),
        })
    }

    /// True when `batch` takes the tree from `old_root` to `new_root`.
    pub fn verify(
        &self,
        old_root: &ComputedNode,
        batch: &[(Key, Leaf)],
        new_root: &ComputedNode,
    ) -> bool {
        self.new_root(old_root, batch)
            .is_ok_and(|root| root == *new_root)
    }

    /// The wire encoding (see [`UpdateProof`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.proof.encode();
        for leaf in &self.old_leaves {
            // usize is at most 64 bits on every supported target.
            out.extend_from_slice(&(leaf.value().len() as u64).to_be_bytes());
            out.extend_from_slice(leaf.value());
            out.extend_from_slice(&leaf.sum().to_be_bytes());
        }
        out
    }

    /// Strict decoding of [`encode`](Self::encode)'s format: the proof's
    /// errors, truncated leaves and trailing bytes are typed errors. Never
    /// panics.
    pub fn decode(bytes: &[u8]) -> Result<Self, MultiDecodeError> {
        let (proof, mut rest) = MultiProof::decode_prefix(bytes)?;
        let truncated = |rest: &[u8], len: usize| MultiDecodeError::Truncated {
            needed: bytes.len().saturating_sub(rest.len()).saturating_add(len),
            got: bytes.len(),
        };
        // Each entry takes at least 16 bytes: do not trust the key count
        // for the allocation.
        let mut old_leaves = Vec::with_capacity(proof.key_count().min(rest.len() / 16));
        for _ in 0..proof.key_count() {
            let (len, after) = rest.split_first_chunk::<8>().ok_or(truncated(rest, 8))?;
            let len = usize::try_from(u64::from_be_bytes(*len)).unwrap_or(usize::MAX);
            let entry = len.saturating_add(8);
            if after.len() < entry {
                return Err(truncated(rest, entry.saturating_add(8)));
            }
            let (value, after) = after.split_at(len);
            let (sum, after) = after
                .split_first_chunk::<8>()
                .ok_or(truncated(rest, entry.saturating_add(8)))?;
            old_leaves.push(Leaf::new(value.to_vec(), u64::from_be_bytes(*sum)));
            rest = after;
        }
        if !rest.is_empty() {
            return Err(MultiDecodeError::TrailingBytes { extra: rest.len() });
        }
        Ok(UpdateProof { proof, old_leaves })
    }
}
