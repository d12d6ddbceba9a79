//! Multi-key proofs: one proof for many keys against one root, each shared
//! node sent once. The model, sibling order and wire format are documented
//! on [`MultiProof`].

use alloc::vec::Vec;

use crate::empty::is_empty_hash;
use crate::error::{PlanError, SumOverflow};
use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node, compacted_hash};
use crate::source::NodeSource;
use crate::sum;

/// Bytes of the header: three `be64` counts.
const HEADER_LEN: usize = 24;
/// Bytes of one explicit sibling: hash then big-endian sum.
const NODE_LEN: usize = 40;

/// One proof for many keys (inclusion and exclusion mixed) against one
/// root: the keys' shared nodes are sent once, so k keys cost about
/// `k (log2 N - log2 k)` explicit siblings in a tree of N leaves instead of
/// `k log2 N` for k single proofs.
///
/// # Model
///
/// The root-to-leaf paths of the proof's keys (deduplicated) form a binary
/// trie of depth 256. At a trie node with both children on key paths the
/// verifier computes both, so nothing is carried. At a trie node with one
/// child on a key path, the other child is a *sibling*: either the empty
/// subtree of its level (one bitmap bit) or an explicit `(hash, sum)`.
/// With no keys at all, the root itself is the one sibling (at level 0).
/// The proof does not name its keys: the verifier supplies them with the
/// leaves, and a proof shows exactly the leaves at the keys it is checked
/// with (other keys of the same trie shape whose leaves and siblings
/// coincide verify too, truthfully).
///
/// # Canonical order
///
/// Siblings are listed in a pre-order walk of the trie: from the root down,
/// a trie node's sibling comes before every sibling below it, and at a
/// split the whole left subtree's siblings come before the right's. For one
/// key that is root side first, the reverse of [`Proof`](crate::Proof)'s
/// order. The count is fixed by the keys alone: for distinct keys
/// `k_1 < … < k_n` in tree order, with `d_i` the first level where `k_{i-1}`
/// and `k_i` differ, it is `256 + Σ (255 - d_i) - (n - 1)`.
///
/// # Wire format
///
/// | field | size | content |
/// |---|---|---|
/// | keys | 8 | `be64` number of distinct keys `n` |
/// | siblings | 8 | `be64` number of siblings `S` (1 when `n = 0`, else at most `256 n`) |
/// | explicit | 8 | `be64` number of explicit siblings `E` |
/// | bitmap | `⌈S/8⌉` | bit `i` = byte `i/8`, mask `1 << (i%8)`; 1 = empty sibling; padding bits 0 |
/// | nodes | `40 E` | the explicit siblings in order: 32-byte hash, then `be64(sum)` |
///
/// Decoding is strict: every byte string decodes to at most one proof and
/// re-encodes to itself. An explicit sibling equal to the empty subtree of
/// its level is rejected when the keys are known ([`MultiProof::root`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MultiProof {
    /// Number of distinct keys the proof was built for.
    keys: usize,
    /// Number of siblings (bits in `bits`).
    siblings: usize,
    /// One bit per sibling, set when it is the empty subtree; padding zero.
    bits: Vec<u8>,
    /// The explicit siblings, in sibling order.
    nodes: Vec<ComputedNode>,
}

/// Why leaves do not fit a [`MultiProof`]. Verification fails with one of
/// these instead of panicking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultiProofError {
    /// A key occurs twice among the leaves.
    #[error("key {key} occurs more than once")]
    DuplicateKey {
        /// The repeated key.
        key: Key,
    },
    /// The proof was built for another number of keys.
    #[error("the proof is for {proof} keys, got {given}")]
    KeyCountMismatch {
        /// Keys the proof was built for.
        proof: usize,
        /// Distinct keys given.
        given: usize,
    },
    /// The keys' trie needs another number of siblings than the proof
    /// carries: it was built for other keys.
    #[error("the proof carries {proof} siblings, the keys need {expected}")]
    SiblingCountMismatch {
        /// Siblings in the proof.
        proof: usize,
        /// Siblings the keys' trie needs.
        expected: usize,
    },
    /// An explicit sibling is the empty subtree of its level: a canonical
    /// proof marks it in the bitmap instead.
    #[error("explicit sibling {index} is the empty subtree of level {level} (non-canonical)")]
    NonCanonicalEmpty {
        /// Index of the sibling in proof order.
        index: usize,
        /// Its level.
        level: usize,
    },
    /// A node's sum exceeds `u64::MAX`.
    #[error(transparent)]
    Overflow(#[from] SumOverflow),
}

/// Why bytes are not a [`MultiProof`] (or an
/// [`UpdateProof`](crate::UpdateProof)): each variant names a way they
/// differ from a canonical encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultiDecodeError {
    /// Fewer bytes than the header (or a length prefix) promises.
    #[error("proof is truncated: needs {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed (saturated at `usize::MAX`).
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// Bytes after the end of the proof.
    #[error("trailing data after proof: {extra} bytes")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The sibling count cannot belong to that many keys (one sibling for
    /// no keys, at most 256 per key otherwise).
    #[error("{siblings} siblings cannot belong to {keys} keys")]
    SiblingCountOutOfRange {
        /// Keys in the header.
        keys: u64,
        /// Siblings in the header.
        siblings: u64,
    },
    /// The header's explicit count disagrees with the bitmap's clear bits.
    #[error("the header names {explicit} explicit siblings, the bitmap {expected}")]
    CountMismatch {
        /// Explicit count in the header.
        explicit: u64,
        /// Clear bits in the bitmap.
        expected: usize,
    },
    /// A bitmap bit past the last sibling is set.
    #[error("bitmap padding bits are not zero")]
    NonZeroPadding,
}

impl MultiProof {
    /// The proof for `keys` under `root`, read from stored nodes as
    /// ms-smt's `Tree::merkle_proof` reads one key's.
    /// Keys may repeat and come in any order; present and absent keys mix.
    pub fn from_source<R: NodeSource>(
        source: &R,
        root: &ComputedNode,
        keys: &[Key],
    ) -> Result<MultiProof, PlanError> {
        Ok(Self::from_source_with_leaves(source, root, keys)?.0)
    }

    /// [`from_source`](Self::from_source), also returning the leaf at each
    /// distinct key (the empty leaf when absent) in tree order, which one
    /// walk finds anyway.
    pub fn from_source_with_leaves<R: NodeSource>(
        source: &R,
        root: &ComputedNode,
        keys: &[Key],
    ) -> Result<(MultiProof, Vec<(Key, Leaf)>), PlanError> {
        let keys = crate::batch::sorted_keys(keys);
        let mut builder = Builder {
            source,
            bits: Vec::new(),
            siblings: 0,
            nodes: Vec::new(),
            leaves: Vec::with_capacity(keys.len()),
        };
        if keys.is_empty() {
            builder.push(0, *root);
        } else {
            builder.collect(0, root.hash, &keys)?;
        }
        let proof = MultiProof {
            keys: keys.len(),
            siblings: builder.siblings,
            bits: builder.bits,
            nodes: builder.nodes,
        };
        Ok((proof, builder.leaves))
    }

    /// Number of distinct keys the proof was built for.
    pub fn key_count(&self) -> usize {
        self.keys
    }

    /// Number of siblings, empty or explicit.
    pub fn sibling_count(&self) -> usize {
        self.siblings
    }

    /// True when sibling `index` (in proof order) is an empty subtree.
    pub fn is_empty_sibling(&self, index: usize) -> bool {
        self.bits
            .get(index / 8)
            .is_some_and(|byte| (byte >> (index % 8)) & 1 == 1)
    }

    /// The bitmap: bit `i` = byte `i / 8`, mask `1 << (i % 8)`, set for an
    /// empty sibling.
    pub fn bitmap(&self) -> &[u8] {
        &self.bits
    }

    /// The explicit siblings, in proof order.
    pub fn explicit_siblings(&self) -> &[ComputedNode] {
        &self.nodes
    }

    /// The root these leaves yield with this proof. Leaves may come in any
    /// order; the empty leaf stands for an absent key. Errors when the keys
    /// repeat, do not fit the proof's shape, meet a non-canonical sibling,
    /// or overflow a sum.
    pub fn root(&self, leaves: &[(Key, Leaf)]) -> Result<ComputedNode, MultiProofError> {
        let mut sorted: Vec<(Key, &Leaf)> = leaves.iter().map(|(k, l)| (*k, l)).collect();
        sorted.sort_unstable_by(|a, b| a.0.tree_cmp(&b.0));
        self.root_sorted(&sorted)
    }

    /// True when this proof shows exactly `leaves` under `root` (hash and
    /// sum). Any error of [`root`](Self::root) yields false.
    pub fn verify(&self, leaves: &[(Key, Leaf)], root: &ComputedNode) -> bool {
        self.root(leaves).is_ok_and(|r| r == *root)
    }

    /// [`root`](Self::root) for leaves already in tree order.
    pub(crate) fn root_sorted(
        &self,
        leaves: &[(Key, &Leaf)],
    ) -> Result<ComputedNode, MultiProofError> {
        if leaves.len() != self.keys {
            return Err(MultiProofError::KeyCountMismatch {
                proof: self.keys,
                given: leaves.len(),
            });
        }
        let expected = expected_siblings(leaves)?;
        if expected != self.siblings {
            return Err(MultiProofError::SiblingCountMismatch {
                proof: self.siblings,
                expected,
            });
        }
        let mut reader = Reader {
            proof: self,
            next: 0,
            next_explicit: 0,
        };
        let root = if leaves.is_empty() {
            let run = reader.take(1)?;
            let mut explicit = run.explicit_end;
            reader.sibling(0, &mut explicit, 0)?
        } else {
            reader.subtree(0, leaves)?
        };
        if reader.next != self.siblings || reader.next_explicit != self.nodes.len() {
            return Err(MultiProofError::SiblingCountMismatch {
                proof: self.siblings,
                expected,
            });
        }
        Ok(root)
    }

    /// The wire encoding (see [`MultiProof`]).
    pub fn encode(&self) -> Vec<u8> {
        let len = HEADER_LEN
            .saturating_add(self.bits.len())
            .saturating_add(NODE_LEN.saturating_mul(self.nodes.len()));
        let mut out = Vec::with_capacity(len);
        // usize is at most 64 bits on every supported target.
        out.extend_from_slice(&(self.keys as u64).to_be_bytes());
        out.extend_from_slice(&(self.siblings as u64).to_be_bytes());
        out.extend_from_slice(&(self.nodes.len() as u64).to_be_bytes());
        out.extend_from_slice(&self.bits);
        for node in &self.nodes {
            out.extend_from_slice(node.hash.as_bytes());
            out.extend_from_slice(&node.sum.to_be_bytes());
        }
        out
    }

    /// Strict decoding of [`encode`](Self::encode)'s format: truncation,
    /// trailing bytes, an impossible sibling count, set padding bits and an
    /// explicit count that disagrees with the bitmap are typed errors.
    /// Never panics.
    pub fn decode(bytes: &[u8]) -> Result<MultiProof, MultiDecodeError> {
        let (proof, rest) = Self::decode_prefix(bytes)?;
        if rest.is_empty() {
            Ok(proof)
        } else {
            Err(MultiDecodeError::TrailingBytes { extra: rest.len() })
        }
    }

    /// Decodes a proof at the start of `bytes`; returns it and the bytes
    /// after it.
    pub(crate) fn decode_prefix(bytes: &[u8]) -> Result<(MultiProof, &[u8]), MultiDecodeError> {
        let truncated = |needed: usize| MultiDecodeError::Truncated {
            needed,
            got: bytes.len(),
        };
        let (header, rest) = bytes
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(truncated(HEADER_LEN))?;
        let (keys, header) = be64(header);
        let (siblings, header) = be64(header);
        let (explicit, _) = be64(header);
        let max = if keys == 0 {
            1
        } else {
            keys.saturating_mul(MAX_LEVEL as u64)
        };
        if siblings == 0 || siblings > max {
            return Err(MultiDecodeError::SiblingCountOutOfRange { keys, siblings });
        }
        let bitmap_len = usize::try_from(siblings.div_ceil(8)).unwrap_or(usize::MAX);
        let node_bytes = usize::try_from(explicit)
            .unwrap_or(usize::MAX)
            .saturating_mul(NODE_LEN);
        let needed = HEADER_LEN
            .saturating_add(bitmap_len)
            .saturating_add(node_bytes);
        if rest.len() < bitmap_len.saturating_add(node_bytes) {
            return Err(truncated(needed));
        }
        let (bits, rest) = rest.split_at(bitmap_len);
        let (node_bytes, rest) = rest.split_at(node_bytes);
        // siblings fits usize: the bitmap holding its bits fit in memory.
        let siblings = usize::try_from(siblings).unwrap_or(usize::MAX);
        let used = siblings % 8;
        if used != 0 && bits.last().is_some_and(|b| b >> used != 0) {
            return Err(MultiDecodeError::NonZeroPadding);
        }
        let empty: usize = bits.iter().map(|b| b.count_ones() as usize).sum();
        let clear = siblings.saturating_sub(empty);
        if explicit != clear as u64 {
            return Err(MultiDecodeError::CountMismatch {
                explicit,
                expected: clear,
            });
        }
        let nodes = node_bytes
            .chunks_exact(NODE_LEN)
            .map(|chunk| {
                let (hash, sum) = chunk.split_at(32);
                let mut h = [0u8; 32];
                h.copy_from_slice(hash);
                let (sum, _) = be64(sum);
                ComputedNode::new(Hash(h), sum)
            })
            .collect();
        let proof = MultiProof {
            keys: usize::try_from(keys).unwrap_or(usize::MAX),
            siblings,
            bits: bits.to_vec(),
            nodes,
        };
        Ok((proof, rest))
    }
}

/// A big-endian u64 at the start of `bytes` (zero-filled if shorter; callers
/// pass at least 8 bytes) and the bytes after it.
fn be64(bytes: &[u8]) -> (u64, &[u8]) {
    match bytes.split_first_chunk::<8>() {
        Some((word, rest)) => (u64::from_be_bytes(*word), rest),
        None => (0, &[]),
    }
}

/// The number of siblings the trie of `leaves` (in tree order) needs; an
/// error when two keys are equal.
fn expected_siblings(leaves: &[(Key, &Leaf)]) -> Result<usize, MultiProofError> {
    // The first path has 256 inner nodes; each next key in tree order adds
    // the inner nodes below its split from the previous key and turns one
    // sibling into a split. With no keys the root is the one sibling.
    if leaves.is_empty() {
        return Ok(1);
    }
    let mut inner = MAX_LEVEL;
    for (prev, next) in leaves.iter().zip(leaves.iter().skip(1)) {
        let split = prev
            .0
            .first_difference(&next.0)
            .ok_or(MultiProofError::DuplicateKey { key: next.0 })?;
        inner = inner.saturating_add((MAX_LEVEL - 1).saturating_sub(split));
    }
    Ok(inner.saturating_sub(leaves.len().saturating_sub(1)))
}

/// A stored subtree as the proof walk sees it.
#[derive(Clone, Copy)]
enum View<'s> {
    /// A stored branch.
    Branch {
        hash: Hash,
        left: Hash,
        right: Hash,
        sum: u64,
    },
    /// The empty subtree.
    Empty,
    /// A subtree whose only non-empty leaf is `leaf` at `key`: a compacted
    /// leaf, the part of one left on the keys' side, or a plain leaf.
    Single { key: Key, leaf: &'s Leaf },
}

/// Collects siblings in proof order while walking stored nodes.
struct Builder<'s, R> {
    source: &'s R,
    bits: Vec<u8>,
    siblings: usize,
    nodes: Vec<ComputedNode>,
    leaves: Vec<(Key, Leaf)>,
}

impl<'s, R: NodeSource> Builder<'s, R> {
    /// Appends the sibling `node` at `level`: a bit if it is the empty
    /// subtree (compared by hash, as compression does), else explicit.
    fn push(&mut self, level: usize, node: ComputedNode) {
        let bit = self.siblings % 8;
        if bit == 0 {
            self.bits.push(0);
        }
        if is_empty_hash(level, &node.hash) {
            if let Some(byte) = self.bits.last_mut() {
                *byte |= 1 << bit;
            }
        } else {
            self.nodes.push(node);
        }
        self.siblings = self.siblings.saturating_add(1);
    }

    /// Walks the stored subtree `hash` at `level` for `keys` (in tree
    /// order, all under this subtree).
    fn collect(&mut self, level: usize, hash: Hash, keys: &[Key]) -> Result<(), PlanError> {
        let Some(first) = keys.first() else {
            return Ok(());
        };
        let view = self.resolve(level, hash, first)?;
        self.descend(level, view, keys)
    }

    /// Goes down from `view` at `level` while `keys` (non-empty) take one
    /// side, pushing one sibling per level; recurses where they split.
    fn descend(
        &mut self,
        mut level: usize,
        mut view: View<'s>,
        keys: &[Key],
    ) -> Result<(), PlanError> {
        let Some(first) = keys.first() else {
            return Ok(());
        };
        while level < MAX_LEVEL {
            let child = level.saturating_add(1);
            let (left, right) = keys.split_at(keys.partition_point(|k| !k.bit(level)));
            let split = !left.is_empty() && !right.is_empty();
            let goes_right = left.is_empty();
            match view {
                View::Branch {
                    left: l,
                    right: r,
                    sum,
                    ..
                } => {
                    if split {
                        self.collect(child, l, left)?;
                        return self.collect(child, r, right);
                    }
                    let (next, sibling) = if goes_right { (r, l) } else { (l, r) };
                    let sibling_sum =
                        crate::source::sibling_sum(self.source, child, &sibling, sum, &next)?;
                    self.push(child, ComputedNode::new(sibling, sibling_sum));
                    view = self.resolve(child, next, first)?;
                }
                View::Empty => {
                    if split {
                        self.descend(child, View::Empty, left)?;
                        return self.descend(child, View::Empty, right);
                    }
                    self.push(child, ComputedNode::empty(child));
                }
                View::Single { key, leaf } => {
                    if split {
                        let (l, r) = if key.bit(level) {
                            (View::Empty, view)
                        } else {
                            (view, View::Empty)
                        };
                        self.descend(child, l, left)?;
                        return self.descend(child, r, right);
                    }
                    if key.bit(level) == goes_right {
                        self.push(child, ComputedNode::empty(child));
                    } else {
                        let hash = compacted_hash(child, &key, leaf);
                        self.push(child, ComputedNode::new(hash, leaf.sum()));
                        view = View::Empty;
                    }
                }
            }
            level = child;
        }
        // Level 256: distinct keys have split apart, one is left.
        let leaf = match view {
            View::Single { key, leaf } if key == *first => leaf.clone(),
            View::Single { .. } | View::Empty => Leaf::empty(),
            View::Branch { hash, .. } => {
                return Err(PlanError::UnexpectedNode {
                    hash,
                    level,
                    found: "branch",
                });
            }
        };
        self.leaves.push((*first, leaf));
        Ok(())
    }

    /// What the stored node `hash` at `level` is; `path` is a key under it
    /// (for a compacted leaf's high key bits, spec §9.1 B3-CL).
    fn resolve(&self, level: usize, hash: Hash, path: &Key) -> Result<View<'s>, PlanError> {
        if is_empty_hash(level, &hash) {
            return Ok(View::Empty);
        }
        let source: &'s R = self.source;
        match source
            .node(&hash)
            .ok_or(PlanError::MissingNode { hash, level })?
        {
            Node::Branch { left, right, sum } if level < MAX_LEVEL => Ok(View::Branch {
                hash,
                left: *left,
                right: *right,
                sum: *sum,
            }),
            Node::Compacted { key, leaf } => Ok(View::Single {
                key: key.under_path(path, level),
                leaf,
            }),
            Node::Leaf(leaf) if level == MAX_LEVEL => Ok(View::Single { key: *path, leaf }),
            other => Err(PlanError::UnexpectedNode {
                hash,
                level,
                found: other.kind_name(),
            }),
        }
    }
}

/// Consumes a proof's siblings in proof order while recomputing the root.
struct Reader<'p> {
    proof: &'p MultiProof,
    /// Index of the next sibling to take.
    next: usize,
    /// Index of the next explicit sibling to take.
    next_explicit: usize,
}

/// Consecutive siblings on one chain of the trie, root side first.
struct Run {
    first: usize,
    len: usize,
    /// One past the run's last explicit sibling.
    explicit_end: usize,
}

impl Reader<'_> {
    /// Reserves the next `len` siblings.
    fn take(&mut self, len: usize) -> Result<Run, MultiProofError> {
        let first = self.next;
        let end = first
            .checked_add(len)
            .filter(|end| *end <= self.proof.siblings)
            .ok_or(MultiProofError::SiblingCountMismatch {
                proof: self.proof.siblings,
                expected: first.saturating_add(len),
            })?;
        let clear = (first..end)
            .filter(|i| !self.proof.is_empty_sibling(*i))
            .count();
        self.next = end;
        self.next_explicit = self.next_explicit.saturating_add(clear);
        Ok(Run {
            first,
            len,
            explicit_end: self.next_explicit,
        })
    }

    /// Sibling `index` at `level`; `explicit` is one past its explicit
    /// slot and moves down when it is explicit (runs are read bottom-up).
    fn sibling(
        &self,
        index: usize,
        explicit: &mut usize,
        level: usize,
    ) -> Result<ComputedNode, MultiProofError> {
        if self.proof.is_empty_sibling(index) {
            return Ok(ComputedNode::empty(level));
        }
        let short = MultiProofError::SiblingCountMismatch {
            proof: self.proof.siblings,
            expected: self.proof.nodes.len().saturating_add(1),
        };
        *explicit = explicit.checked_sub(1).ok_or(short.clone())?;
        let node = *self.proof.nodes.get(*explicit).ok_or(short)?;
        if is_empty_hash(level, &node.hash) {
            return Err(MultiProofError::NonCanonicalEmpty { index, level });
        }
        Ok(node)
    }

    /// The subtree at `level` holding `leaves` (non-empty, distinct, in
    /// tree order): its top run, then the split's left and right parts.
    fn subtree(
        &mut self,
        level: usize,
        leaves: &[(Key, &Leaf)],
    ) -> Result<ComputedNode, MultiProofError> {
        let (Some(first), Some(last)) = (leaves.first(), leaves.last()) else {
            return Err(MultiProofError::KeyCountMismatch {
                proof: self.proof.keys,
                given: 0,
            });
        };
        let split = first.0.first_difference(&last.0).unwrap_or(MAX_LEVEL);
        let run = self.take(split.saturating_sub(level))?;
        let below = if split >= MAX_LEVEL {
            ComputedNode::new(first.1.hash(), first.1.sum())
        } else {
            let (left, right) = leaves.split_at(leaves.partition_point(|(k, _)| !k.bit(split)));
            let child = split.saturating_add(1);
            let left = self.subtree(child, left)?;
            let right = self.subtree(child, right)?;
            let sum = sum::add(left.sum, right.sum, split)?;
            ComputedNode::new(branch_hash(&left.hash, &right.hash, sum), sum)
        };
        self.lift(&run, level, &first.0, below)
    }

    /// Hashes `node` up through `run`, whose first sibling hangs below the
    /// trie node at `top`, taking sides from `key`.
    fn lift(
        &self,
        run: &Run,
        top: usize,
        key: &Key,
        mut node: ComputedNode,
    ) -> Result<ComputedNode, MultiProofError> {
        let mut explicit = run.explicit_end;
        for offset in (0..run.len).rev() {
            let level = top.saturating_add(offset);
            let index = run.first.saturating_add(offset);
            let sibling = self.sibling(index, &mut explicit, level.saturating_add(1))?;
            let total = sum::add(node.sum, sibling.sum, level)?;
            let hash = if key.bit(level) {
                branch_hash(&sibling.hash, &node.hash, total)
            } else {
                branch_hash(&node.hash, &sibling.hash, total)
            };
            node = ComputedNode::new(hash, total);
        }
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::vec;

    fn key(byte0: u8) -> Key {
        let mut k = [0u8; 32];
        k[0] = byte0;
        Key(k)
    }

    /// A compacted tree by hand. Keys: `a` (bits 0, 1 = 0, 0), `c` (0, 1)
    /// and `b` (1): the root's left child is a branch over compacted leaves
    /// at level 2, its right child the compacted leaf of `b` at level 1.
    struct Hand {
        cache: BTreeMap<Hash, Node>,
        root: ComputedNode,
        a: (Key, Leaf),
        b: (Key, Leaf),
        c: (Key, Leaf),
    }

    fn hand() -> Hand {
        let a = (key(0), Leaf::new(b"a".to_vec(), 1));
        let b = (key(1), Leaf::new(b"b".to_vec(), 2));
        let c = (key(2), Leaf::new(b"c".to_vec(), 3));
        let ha = compacted_hash(2, &a.0, &a.1);
        let hc = compacted_hash(2, &c.0, &c.1);
        let hb = compacted_hash(1, &b.0, &b.1);
        let hl = branch_hash(&ha, &hc, 4);
        let root = ComputedNode::new(branch_hash(&hl, &hb, 6), 6);
        let mut cache = BTreeMap::new();
        for (k, l, h) in [(&a, ha), (&b, hb), (&c, hc)].map(|(x, h)| (x.0, x.1.clone(), h)) {
            cache.insert(h, Node::Compacted { key: k, leaf: l });
        }
        let branch = |left, right, sum| Node::Branch { left, right, sum };
        cache.insert(hl, branch(ha, hc, 4));
        cache.insert(root.hash, branch(hl, hb, 6));
        Hand {
            cache,
            root,
            a,
            b,
            c,
        }
    }

    #[test]
    fn canonical_order_on_a_hand_made_tree() {
        let t = hand();
        // x is absent, under b's compacted leaf: bits 0 and 2 set.
        let x = key(0b101);
        let (proof, leaves) =
            MultiProof::from_source_with_leaves(&t.cache, &t.root, &[x, t.a.0, x]).unwrap();
        assert_eq!(leaves, vec![t.a.clone(), (x, Leaf::empty())]);
        // a's chain first (left before right): c's compacted leaf at level
        // 2, then 254 empties (levels 3..=256). Then x's chain: b's
        // compacted leaf goes x's way at level 1 (empty sibling at level
        // 2), leaves it at level 2 (b's subtree at level 3, explicit), and
        // 253 empties (levels 4..=256).
        assert_eq!(proof.key_count(), 2);
        assert_eq!(proof.sibling_count(), 510);
        let explicit: Vec<usize> = (0..510).filter(|i| !proof.is_empty_sibling(*i)).collect();
        assert_eq!(explicit, vec![0, 256]);
        assert_eq!(
            proof.explicit_siblings(),
            &[
                ComputedNode::new(compacted_hash(2, &t.c.0, &t.c.1), 3),
                ComputedNode::new(compacted_hash(3, &t.b.0, &t.b.1), 2),
            ]
        );
        // The wire bytes, field by field.
        let bytes = proof.encode();
        let mut want = Vec::new();
        for n in [2u64, 510, 2] {
            want.extend_from_slice(&n.to_be_bytes());
        }
        let mut bitmap = vec![0xffu8; 64];
        bitmap[0] = 0xfe;
        bitmap[32] = 0xfe;
        bitmap[63] = 0x3f;
        want.extend_from_slice(&bitmap);
        for node in proof.explicit_siblings() {
            want.extend_from_slice(node.hash.as_bytes());
            want.extend_from_slice(&node.sum.to_be_bytes());
        }
        assert_eq!(bytes, want);
        assert_eq!(MultiProof::decode(&bytes), Ok(proof.clone()));

        // Order of the leaves does not matter; the wrong leaf fails.
        let given = [(x, Leaf::empty()), t.a.clone()];
        assert_eq!(proof.root(&given), Ok(t.root));
        assert!(proof.verify(&given, &t.root));
        assert!(!proof.verify(&[(x, Leaf::new(b"x".to_vec(), 0)), t.a.clone()], &t.root));
        assert_eq!(
            proof.root(&[t.a.clone(), t.a.clone()]),
            Err(MultiProofError::DuplicateKey { key: t.a.0 })
        );
        assert_eq!(
            proof.root(core::slice::from_ref(&t.a)),
            Err(MultiProofError::KeyCountMismatch { proof: 2, given: 1 })
        );
        // Keys of another trie shape (a and c split at level 1, not 0).
        assert_eq!(
            proof.root(&[t.a.clone(), t.c.clone()]),
            Err(MultiProofError::SiblingCountMismatch {
                proof: 510,
                expected: 509
            })
        );
        // Same shape (split at level 0), other keys: another root.
        let other = [t.c.clone(), (key(0b11), Leaf::empty())];
        assert!(proof.root(&other).is_ok_and(|r| r != t.root));
    }

    #[test]
    fn splits_inside_a_subtree_carry_nothing() {
        let t = hand();
        let all = [t.c.clone(), t.b.clone(), t.a.clone()];
        let keys: Vec<Key> = all.iter().map(|(k, _)| *k).collect();
        let (proof, leaves) =
            MultiProof::from_source_with_leaves(&t.cache, &t.root, &keys).unwrap();
        assert_eq!(leaves, vec![t.a.clone(), t.c.clone(), t.b.clone()]);
        // Splits at levels 0 and 1; every other sibling is empty.
        assert_eq!(proof.sibling_count(), 254 + 254 + 255);
        assert!(proof.explicit_siblings().is_empty());
        assert!(proof.verify(&all, &t.root));
    }

    #[test]
    fn no_keys_carry_the_root() {
        let t = hand();
        let proof = MultiProof::from_source(&t.cache, &t.root, &[]).unwrap();
        assert_eq!(proof.sibling_count(), 1);
        assert_eq!(proof.explicit_siblings(), &[t.root]);
        assert_eq!(proof.root(&[]), Ok(t.root));
        assert_eq!(proof.encode().len(), HEADER_LEN + 1 + NODE_LEN);

        let empty = ComputedNode::empty_root();
        let proof = MultiProof::from_source(&BTreeMap::new(), &empty, &[]).unwrap();
        assert_eq!(proof.bitmap(), &[1]);
        assert_eq!(proof.root(&[]), Ok(empty));
    }

    #[test]
    fn absent_keys_in_an_empty_tree() {
        let empty = ComputedNode::empty_root();
        let keys = [key(0), key(1), Key([0xff; 32])];
        let proof = MultiProof::from_source(&BTreeMap::new(), &empty, &keys).unwrap();
        assert!(proof.explicit_siblings().is_empty());
        let leaves: Vec<(Key, Leaf)> = keys.iter().map(|k| (*k, Leaf::empty())).collect();
        assert_eq!(proof.root(&leaves), Ok(empty));
    }

    #[test]
    fn sibling_count_formula() {
        let l = Leaf::empty();
        let last = Key::default().with_bit(255, true);
        assert_eq!(expected_siblings(&[]), Ok(1));
        assert_eq!(expected_siblings(&[(Key::default(), &l)]), Ok(256));
        // Keys that split at the last level share 255 siblings.
        assert_eq!(
            expected_siblings(&[(Key::default(), &l), (last, &l)]),
            Ok(255)
        );
        assert_eq!(
            expected_siblings(&[(last, &l), (last, &l)]),
            Err(MultiProofError::DuplicateKey { key: last })
        );
    }

    #[test]
    fn strict_decoding() {
        let t = hand();
        let proof = MultiProof::from_source(&t.cache, &t.root, &[t.a.0]).unwrap();
        let bytes = proof.encode();
        assert_eq!(proof.sibling_count(), 256);
        // a's proof has two explicit siblings (levels 1 and 2).
        assert_eq!(proof.explicit_siblings().len(), 2);
        // Each case: an edit of the encoding, and the error it must give.
        type Edit = fn(&mut Vec<u8>);
        let cases: [(&str, Edit, MultiDecodeError); 6] = [
            (
                "truncated",
                |b| {
                    b.pop();
                },
                MultiDecodeError::Truncated {
                    needed: bytes.len(),
                    got: bytes.len() - 1,
                },
            ),
            (
                "trailing",
                |b| b.push(0),
                MultiDecodeError::TrailingBytes { extra: 1 },
            ),
            // 255 siblings leave one padding bit.
            (
                "padding",
                |b| (b[14], b[15]) = (0, 255),
                MultiDecodeError::NonZeroPadding,
            ),
            (
                "fewer explicit",
                |b| {
                    b[23] = 1;
                    b.truncate(b.len() - NODE_LEN);
                },
                MultiDecodeError::CountMismatch {
                    explicit: 1,
                    expected: 2,
                },
            ),
            (
                "more explicit",
                |b| {
                    b[23] = 3;
                    b.extend_from_slice(&[7; NODE_LEN]);
                },
                MultiDecodeError::CountMismatch {
                    explicit: 3,
                    expected: 2,
                },
            ),
            // 512 siblings for one key.
            (
                "range",
                |b| b[14] = 2,
                MultiDecodeError::SiblingCountOutOfRange {
                    keys: 1,
                    siblings: 512,
                },
            ),
        ];
        for (name, edit, want) in cases {
            let mut edited = bytes.clone();
            edit(&mut edited);
            assert_eq!(MultiProof::decode(&edited), Err(want), "{name}");
        }
        // An explicit empty subtree decodes, but is not canonical.
        let mut bad = proof.clone();
        bad.bits[1] &= !1; // sibling 8: level 9 on a's chain
        bad.nodes.insert(2, ComputedNode::empty(9));
        let bad = MultiProof::decode(&bad.encode()).unwrap();
        assert_eq!(
            bad.root(core::slice::from_ref(&t.a)),
            Err(MultiProofError::NonCanonicalEmpty { index: 8, level: 9 })
        );
    }
}
