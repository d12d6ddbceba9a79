//! Sum proofs: the leaves under a prefix, or in a key range, add up to a
//! total, checked against a root alone.
//!
//! # Shape
//!
//! A range `[first, last]` (inclusive, tree order) splits the tree into
//! three kinds of node. A node is *covered* when all its keys lie in the
//! range, *outside* when none do, and *split* otherwise; descent stops at
//! covered and outside nodes. The covered nodes are the maximal aligned
//! subtrees inside the range (each key of the range lies under exactly
//! one); split nodes lie on the paths of `first` and `last` only, so there
//! are at most 2 × 256 of them. A prefix is the range of its keys: one
//! covered node and its siblings, all outside.
//!
//! Both sides derive the shape from the range; the proof carries only a
//! *slot* per covered or outside node, in pre-order (left before right),
//! and the verifier hashes the split nodes itself. A slot is the empty
//! subtree of its level (one bitmap bit) or an explicit (hash, sum).
//!
//! # Why some covered nodes are opened
//!
//! A branch hash commits to its children's hashes and to *their total*,
//! not to how the total divides between them: `(h1, s1 + d)` beside
//! `(h2, s2 - d)` rebuilds the same parent. Where a covered slot's sibling
//! is an outside slot, a prover could so move value across the range's
//! edge. The split is pinned when either side's sum is bound to its hash:
//! an empty slot has sum 0, and an *opened* covered node is rebuilt from
//! its two children's slots (below level 256) or from its leaf (at level
//! 256, `H(value || sum)`). So a covered node whose sibling is outside and
//! explicit is always opened, and the outside slot comes first in such a
//! pair, so the verifier knows before it reads the covered one. There are
//! at most two such pairs per range (one at the foot of each boundary path).
//! Everywhere else a slot's sibling is a split node, whose sum the verifier
//! computed, so the slot's sum is fixed by its parent's hash.
//!
//! # Size
//!
//! A prefix at level `L` has `L` outside slots and its own (two when
//! opened), so its proof is `2 + ceil((L + 1) / 8)` bytes plus 40 per
//! non-empty slot: no more than one compressed leaf proof of a key under
//! it plus 40 bytes, except at levels 255 and 256 (one byte more: a 33rd
//! bitmap byte) and for a level-256 prefix beside a non-empty neighbour,
//! which carries its leaf. A range has at most 2 × 256 + 3 slots.
//!
//! # Wire format
//!
//! ```text
//! u16be header   bits 0-9: slot count (1..=1023); bits 10-11: leaf count;
//!                bits 12-15: format, 0
//! bitmap         ceil(slots / 8) bytes; bit i (byte i / 8, mask 1 << i % 8)
//!                set = slot i is the empty subtree; padding bits zero
//! nodes          32-byte hash || be64 sum, one per explicit slot that is
//!                not a leaf, in slot order
//! leaves         be32 value length || value || be64 sum, in slot order
//! ```
#![allow(clippy::arithmetic_side_effects)] // levels and byte offsets; sums use checked adds

use alloc::vec;
use alloc::vec::Vec;
use core::ops::{Bound, RangeBounds};

use crate::empty::empty_hash;
use crate::error::{PlanError, SumOverflow};
use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node, compacted_hash};
use crate::position::Position;
use crate::source::{NodeSource, sibling_sum};
use crate::sum;

/// Most slots a header can name (10 bits). A range needs at most 515.
const MAX_SLOTS: usize = (1 << 10) - 1;
/// Most revealed leaves a header can name (2 bits). A range needs at most 2.
const MAX_LEAVES: usize = 3;
/// Bytes of one explicit node: hash then big-endian sum.
const NODE_LEN: usize = 40;

/// A proof that the leaves under a prefix ([`Position`]) or in a key range
/// add up to a total, against a root (hash and sum) alone.
///
/// Made by ms-smt's `View::prefix_sum_proof` and
/// `View::range_sum_proof`; checked by
/// [`verify_prefix`](Self::verify_prefix) and
/// [`verify_range`](Self::verify_range), which derive the covering
/// subtrees from the range themselves (see the module source for the
/// shape and the wire format).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SumProof {
    /// One bit per slot, set when the slot is the empty subtree.
    empty: Vec<bool>,
    nodes: Vec<ComputedNode>,
    leaves: Vec<Leaf>,
}

/// Why bytes are not a sum proof: each names a way they differ from the
/// canonical encoding. Never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SumDecodeError {
    /// No bytes at all.
    #[error("sum proof bytes are empty")]
    Empty,
    /// Fewer bytes than the header and what it announces need.
    #[error("sum proof is truncated: needs {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed to read the next part.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// Bytes after the last leaf.
    #[error("trailing data after sum proof: {extra} bytes")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The header's format bits name a format this crate does not know.
    #[error("unknown sum proof format {0}")]
    UnknownFormat(u8),
    /// The header names no slot: every proof has at least the root's.
    #[error("sum proof has no slots")]
    NoSlots,
    /// A bitmap bit past the last slot is set.
    #[error("sum proof bitmap padding bits are not zero")]
    NonZeroPadding,
    /// The header names more leaves than the bitmap has explicit slots.
    #[error("sum proof names {leaves} leaves but has {explicit} explicit slots")]
    TooManyLeaves {
        /// Leaves in the header.
        leaves: usize,
        /// Clear bits in the bitmap.
        explicit: usize,
    },
    /// A revealed leaf is the empty leaf, which the bitmap marks instead.
    #[error("revealed leaf {index} is the empty leaf (non-canonical)")]
    EmptyLeaf {
        /// Index among the revealed leaves.
        index: usize,
    },
}

/// Why a sum proof does not prove a total for a range under a root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SumProofError {
    /// The range's shape needs more slots, explicit nodes or leaves than
    /// the proof has: it was made for another range, or cut short.
    #[error("the proof has too few {0} for the range")]
    Exhausted(&'static str),
    /// Slots, nodes or leaves are left over once the range's shape is
    /// rebuilt: the proof was made for another range, or padded.
    #[error("the proof has unused parts: {slots} slots, {nodes} nodes, {leaves} leaves")]
    Unused {
        /// Slots left.
        slots: usize,
        /// Explicit nodes left.
        nodes: usize,
        /// Leaves left.
        leaves: usize,
    },
    /// An explicit slot holds the empty subtree of its level, which the
    /// bitmap marks instead.
    #[error("explicit slot {slot} is the empty subtree of its level (non-canonical)")]
    NonCanonicalEmpty {
        /// The slot's index.
        slot: usize,
    },
    /// A sum overflowed u64 while rebuilding the node at `level`.
    #[error(transparent)]
    Overflow(#[from] SumOverflow),
    /// The rebuilt root is not the one given.
    #[error("the proof rebuilds root {computed:?}, not {expected:?}")]
    RootMismatch {
        /// The root the caller holds.
        expected: ComputedNode,
        /// The root the proof rebuilds.
        computed: ComputedNode,
    },
}

/// An inclusive key range in tree order, `first <= last`.
#[derive(Clone, Copy, Debug)]
struct Span {
    first: Key,
    last: Key,
}

/// The non-empty inclusive form of `range`, or `None` when it holds no key.
fn span(range: &impl RangeBounds<Key>) -> Option<Span> {
    let first = match range.start_bound() {
        Bound::Included(k) => *k,
        Bound::Excluded(k) => next_key(k)?,
        Bound::Unbounded => Key([0; 32]),
    };
    let last = match range.end_bound() {
        Bound::Included(k) => *k,
        Bound::Excluded(k) => previous_key(k)?,
        Bound::Unbounded => Key([0xff; 32]),
    };
    (first <= last).then_some(Span { first, last })
}

/// The key after `key` in tree order (bit 255 is the lowest), if any.
fn next_key(key: &Key) -> Option<Key> {
    let d = (0..MAX_LEVEL).rev().find(|&d| !key.bit(d))?;
    let mut out = key.with_bit(d, true);
    for lower in d + 1..MAX_LEVEL {
        out = out.with_bit(lower, false);
    }
    Some(out)
}

/// The key before `key` in tree order, if any.
fn previous_key(key: &Key) -> Option<Key> {
    let d = (0..MAX_LEVEL).rev().find(|&d| key.bit(d))?;
    let mut out = key.with_bit(d, false);
    for lower in d + 1..MAX_LEVEL {
        out = out.with_bit(lower, true);
    }
    Some(out)
}

/// The span of a prefix's keys.
fn prefix_span(prefix: &Position) -> Span {
    Span {
        first: *prefix.path(),
        last: prefix.last_key(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Covered,
    Outside,
    Split,
}

/// How the node at `pos` stands to `span` (`None`: the empty range).
fn role(pos: &Position, span: Option<&Span>) -> Role {
    let Some(span) = span else {
        return Role::Outside;
    };
    let (first, last) = (*pos.path(), pos.last_key());
    if last < span.first || first > span.last {
        Role::Outside
    } else if span.first <= first && last <= span.last {
        Role::Covered
    } else {
        Role::Split
    }
}

/// The children of a split node and their roles. A split node holds keys
/// on both sides of an edge, so it is never a single key (level 256).
fn split_children(pos: &Position, span: Option<&Span>) -> [(Position, Role); 2] {
    let (l, r) = (pos.child(false), pos.child(true));
    [(l, role(&l, span)), (r, role(&r, span))]
}

/// The positions of the covered subtrees of `span`, in tree order.
fn covering(pos: Position, span: Option<&Span>, out: &mut Vec<Position>) {
    match role(&pos, span) {
        Role::Covered => out.push(pos),
        Role::Outside => {}
        Role::Split => {
            for (child, _) in split_children(&pos, span) {
                covering(child, span, out);
            }
        }
    }
}

/// Parent of `left` and `right` at `level`, sums checked.
fn parent(
    left: &ComputedNode,
    right: &ComputedNode,
    level: usize,
) -> Result<ComputedNode, SumOverflow> {
    let total = sum::add(left.sum, right.sum, level)?;
    Ok(ComputedNode::new(
        branch_hash(&left.hash, &right.hash, total),
        total,
    ))
}

impl SumProof {
    /// The positions of the maximal subtrees whose keys all lie in
    /// `range` (tree order; each key of the range lies under exactly one),
    /// in tree order: what a range proof's total adds up. At most 2 × 256.
    pub fn covering(range: impl RangeBounds<Key>) -> Vec<Position> {
        let span = span(&range);
        let mut out = Vec::new();
        covering(Position::ROOT, span.as_ref(), &mut out);
        out
    }

    /// The proof that the leaves under `prefix` add up to the returned
    /// total, read from stored nodes under `root`: `source` must hold the
    /// nodes on the paths of the prefix's first and last keys (a path read
    /// of both brings them).
    pub fn prefix_from_source<R: NodeSource>(
        source: &R,
        root: &ComputedNode,
        prefix: &Position,
    ) -> Result<(SumProof, u64), PlanError> {
        Self::build(source, root, Some(prefix_span(prefix)))
    }

    /// The proof that the leaves with keys in `range` (tree order) add up
    /// to the returned total, read from stored nodes under `root`:
    /// `source` must hold the nodes on the paths of the range's first and
    /// last keys (a path read of both brings them).
    pub fn range_from_source<R: NodeSource>(
        source: &R,
        root: &ComputedNode,
        range: impl RangeBounds<Key>,
    ) -> Result<(SumProof, u64), PlanError> {
        Self::build(source, root, span(&range))
    }

    /// The first and last keys of `range` in tree order: the paths a
    /// producer must read. `None` for an empty range (the root suffices).
    pub fn boundary_keys(range: &impl RangeBounds<Key>) -> Option<[Key; 2]> {
        span(range).map(|s| [s.first, s.last])
    }

    fn build<R: NodeSource>(
        source: &R,
        root: &ComputedNode,
        span: Option<Span>,
    ) -> Result<(SumProof, u64), PlanError> {
        let mut builder = Builder {
            source,
            span,
            proof: SumProof {
                empty: Vec::new(),
                nodes: Vec::new(),
                leaves: Vec::new(),
            },
            total: 0,
        };
        let here = Here::stored(*root, 0);
        let role = role(&Position::ROOT, span.as_ref());
        builder.visit(Position::ROOT, here, role, false)?;
        Ok((builder.proof, builder.total))
    }

    /// The total of the leaves under `prefix`, when this proof shows it
    /// under `root` (hash and sum both checked).
    pub fn verify_prefix(
        &self,
        prefix: &Position,
        root: &ComputedNode,
    ) -> Result<u64, SumProofError> {
        self.verify_span(Some(prefix_span(prefix)), root)
    }

    /// The total of the leaves with keys in `range` (tree order, as
    /// [`Key`]'s `Ord`), when this proof shows it under `root`. The
    /// covering subtrees come from `range`, never from the proof, so none
    /// can be left out or counted twice. An empty range proves 0 with the
    /// root itself as its one slot.
    pub fn verify_range(
        &self,
        range: impl RangeBounds<Key>,
        root: &ComputedNode,
    ) -> Result<u64, SumProofError> {
        self.verify_span(span(&range), root)
    }

    fn verify_span(&self, span: Option<Span>, root: &ComputedNode) -> Result<u64, SumProofError> {
        let mut reader = Reader {
            proof: self,
            span,
            slot: 0,
            node: 0,
            leaf: 0,
            total: 0,
        };
        let role = role(&Position::ROOT, span.as_ref());
        let computed = reader.visit(Position::ROOT, role, false)?;
        let unused = (
            self.empty.len() - reader.slot,
            self.nodes.len() - reader.node,
            self.leaves.len() - reader.leaf,
        );
        if unused != (0, 0, 0) {
            return Err(SumProofError::Unused {
                slots: unused.0,
                nodes: unused.1,
                leaves: unused.2,
            });
        }
        if computed != *root {
            return Err(SumProofError::RootMismatch {
                expected: *root,
                computed,
            });
        }
        Ok(reader.total)
    }

    /// Number of slots (covered and outside nodes, opened ones counted by
    /// their children).
    pub fn slot_count(&self) -> usize {
        self.empty.len()
    }

    /// True when slot `i` is the empty subtree of its level.
    pub fn is_empty_slot(&self, i: usize) -> bool {
        self.empty.get(i).copied().unwrap_or(false)
    }

    /// The explicit nodes, in slot order.
    pub fn nodes(&self) -> &[ComputedNode] {
        &self.nodes
    }

    /// The revealed leaves (opened covered nodes at level 256), in slot order.
    pub fn leaves(&self) -> &[Leaf] {
        &self.leaves
    }

    /// The wire encoding (see the module source): header, bitmap, nodes,
    /// leaves.
    pub fn encode(&self) -> Vec<u8> {
        let slots = self.empty.len();
        let leaf_bytes: usize = self.leaves.iter().map(|l| 12 + l.value().len()).sum();
        let mut out =
            Vec::with_capacity(2 + slots.div_ceil(8) + NODE_LEN * self.nodes.len() + leaf_bytes);
        // Producers make at most 515 slots and 2 leaves, and decoding
        // refuses more than the header holds.
        let header = (slots & MAX_SLOTS) | ((self.leaves.len() & MAX_LEAVES) << 10);
        out.extend_from_slice(&(header as u16).to_be_bytes());
        let mut bitmap = vec![0u8; slots.div_ceil(8)];
        for (i, _) in self.empty.iter().enumerate().filter(|(_, e)| **e) {
            bitmap[i / 8] |= 1 << (i % 8);
        }
        out.extend_from_slice(&bitmap);
        for node in &self.nodes {
            out.extend_from_slice(node.hash.as_bytes());
            out.extend_from_slice(&node.sum.to_be_bytes());
        }
        for leaf in &self.leaves {
            // Values longer than u32::MAX bytes are not proof material.
            out.extend_from_slice(&(leaf.value().len() as u32).to_be_bytes());
            out.extend_from_slice(leaf.value());
            out.extend_from_slice(&leaf.sum().to_be_bytes());
        }
        out
    }

    /// Strict decoding of [`encode`](Self::encode)'s format: every count is
    /// checked against the bytes before anything is allocated, and only the
    /// canonical encoding of a proof decodes. Whether the slots fit a range
    /// is [`verify_range`](Self::verify_range)'s business.
    pub fn decode(bytes: &[u8]) -> Result<SumProof, SumDecodeError> {
        let mut input = Input { bytes, at: 0 };
        if bytes.is_empty() {
            return Err(SumDecodeError::Empty);
        }
        let header = u16::from_be_bytes(input.array::<2>()?);
        let format = (header >> 12) as u8;
        if format != 0 {
            return Err(SumDecodeError::UnknownFormat(format));
        }
        let slots = usize::from(header) & MAX_SLOTS;
        let leaf_count = (usize::from(header) >> 10) & MAX_LEAVES;
        if slots == 0 {
            return Err(SumDecodeError::NoSlots);
        }
        let bitmap = input.take(slots.div_ceil(8))?;
        let empty: Vec<bool> = (0..slots)
            .map(|i| bitmap[i / 8] >> (i % 8) & 1 == 1)
            .collect();
        if (slots..bitmap.len() * 8).any(|i| bitmap[i / 8] >> (i % 8) & 1 == 1) {
            return Err(SumDecodeError::NonZeroPadding);
        }
        let explicit = empty.iter().filter(|e| !**e).count();
        let Some(node_count) = explicit.checked_sub(leaf_count) else {
            return Err(SumDecodeError::TooManyLeaves {
                leaves: leaf_count,
                explicit,
            });
        };
        let nodes = input
            .take(NODE_LEN * node_count)?
            .chunks_exact(NODE_LEN)
            .map(|chunk| {
                let mut hash = [0u8; 32];
                hash.copy_from_slice(&chunk[..32]);
                let mut sum = [0u8; 8];
                sum.copy_from_slice(&chunk[32..]);
                ComputedNode::new(Hash(hash), u64::from_be_bytes(sum))
            })
            .collect();
        let mut leaves = Vec::with_capacity(leaf_count);
        for index in 0..leaf_count {
            let len = u32::from_be_bytes(input.array::<4>()?) as usize;
            let value = input.take(len)?.to_vec();
            let sum = u64::from_be_bytes(input.array::<8>()?);
            let leaf = Leaf::new(value, sum);
            if leaf.is_empty() {
                return Err(SumDecodeError::EmptyLeaf { index });
            }
            leaves.push(leaf);
        }
        let extra = bytes.len() - input.at;
        if extra != 0 {
            return Err(SumDecodeError::TrailingBytes { extra });
        }
        Ok(SumProof {
            empty,
            nodes,
            leaves,
        })
    }
}

/// A cursor over encoded bytes.
struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SumDecodeError> {
        let rest = &self.bytes[self.at..];
        if rest.len() < n {
            return Err(SumDecodeError::Truncated {
                needed: self.at.saturating_add(n),
                got: self.bytes.len(),
            });
        }
        self.at += n;
        Ok(&rest[..n])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SumDecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
}

/// The verifier's walk: rebuilds the root along the range's shape,
/// consuming slots in order and adding up the covered ones.
struct Reader<'p> {
    proof: &'p SumProof,
    span: Option<Span>,
    slot: usize,
    node: usize,
    leaf: usize,
    total: u64,
}

impl Reader<'_> {
    /// Next slot's bit: true when it is the empty subtree.
    fn next_bit(&mut self) -> Result<bool, SumProofError> {
        let empty = *self
            .proof
            .empty
            .get(self.slot)
            .ok_or(SumProofError::Exhausted("slots"))?;
        self.slot += 1;
        Ok(empty)
    }

    /// Next slot as a node at `level`.
    fn node(&mut self, level: usize) -> Result<ComputedNode, SumProofError> {
        let slot = self.slot;
        if self.next_bit()? {
            return Ok(ComputedNode::empty(level));
        }
        let node = *self
            .proof
            .nodes
            .get(self.node)
            .ok_or(SumProofError::Exhausted("explicit nodes"))?;
        self.node += 1;
        if node.hash == empty_hash(level) {
            return Err(SumProofError::NonCanonicalEmpty { slot });
        }
        Ok(node)
    }

    /// Next slot as a revealed leaf, as a node at level 256.
    fn leaf(&mut self) -> Result<ComputedNode, SumProofError> {
        if self.next_bit()? {
            return Ok(ComputedNode::empty(MAX_LEVEL));
        }
        let leaf = self
            .proof
            .leaves
            .get(self.leaf)
            .ok_or(SumProofError::Exhausted("leaves"))?;
        self.leaf += 1;
        Ok(ComputedNode::new(leaf.hash(), leaf.sum()))
    }

    fn visit(
        &mut self,
        pos: Position,
        role: Role,
        open: bool,
    ) -> Result<ComputedNode, SumProofError> {
        let level = pos.level();
        match role {
            Role::Outside => self.node(level),
            Role::Covered => {
                let node = if !open {
                    self.node(level)?
                } else if level == MAX_LEVEL {
                    self.leaf()?
                } else {
                    let l = self.node(level + 1)?;
                    let r = self.node(level + 1)?;
                    parent(&l, &r, level)?
                };
                self.total = sum::add(self.total, node.sum, level)?;
                Ok(node)
            }
            Role::Split => {
                let [(lp, lr), (rp, rr)] = split_children(&pos, self.span.as_ref());
                let (l, r) = match (lr, rr) {
                    // The outside slot first: it says whether to open.
                    (Role::Covered, Role::Outside) => {
                        let r = self.node(level + 1)?;
                        let open = r.hash != empty_hash(level + 1);
                        (self.visit(lp, lr, open)?, r)
                    }
                    (Role::Outside, Role::Covered) => {
                        let l = self.node(level + 1)?;
                        let open = l.hash != empty_hash(level + 1);
                        (l, self.visit(rp, rr, open)?)
                    }
                    _ => (self.visit(lp, lr, false)?, self.visit(rp, rr, false)?),
                };
                Ok(parent(&l, &r, level)?)
            }
        }
    }
}

/// What stands at a position while the producer walks the tree.
#[derive(Clone, Debug)]
enum Here {
    /// The empty subtree.
    Empty,
    /// A stored node: its hash (looked up when walked into) and sum.
    Stored(ComputedNode),
    /// The subtree's one leaf, at a key under the position (a compacted
    /// leaf walked into, or a leaf at level 256).
    Leaf(Key, Leaf),
}

impl Here {
    fn stored(node: ComputedNode, level: usize) -> Here {
        if node.hash == empty_hash(level) {
            Here::Empty
        } else {
            Here::Stored(node)
        }
    }

    fn leaf(key: Key, leaf: &Leaf) -> Here {
        if leaf.is_empty() {
            Here::Empty
        } else {
            Here::Leaf(key, leaf.clone())
        }
    }

    /// Its (hash, sum) as the subtree at `level`.
    fn computed(&self, level: usize) -> ComputedNode {
        match self {
            Here::Empty => ComputedNode::empty(level),
            Here::Stored(node) => *node,
            Here::Leaf(key, leaf) => {
                ComputedNode::new(compacted_hash(level, key, leaf), leaf.sum())
            }
        }
    }
}

/// The producer's walk: the same shape and slot order as [`Reader`].
struct Builder<'s, R> {
    source: &'s R,
    span: Option<Span>,
    proof: SumProof,
    total: u64,
}

impl<R: NodeSource> Builder<'_, R> {
    /// Appends a slot; true when it is explicit.
    fn push(&mut self, level: usize, node: ComputedNode) -> bool {
        let empty = node.hash == empty_hash(level);
        self.proof.empty.push(empty);
        if !empty {
            self.proof.nodes.push(node);
        }
        !empty
    }

    /// The stored node under `node`'s hash, reached at `level`.
    fn lookup(&self, node: &ComputedNode, level: usize) -> Result<&Node, PlanError> {
        self.source.node(&node.hash).ok_or(PlanError::MissingNode {
            hash: node.hash,
            level,
        })
    }

    /// What stands at the two children of `pos`, where `here` stands.
    fn children(&self, pos: &Position, here: &Here) -> Result<[Here; 2], PlanError> {
        let level = pos.level();
        let below = level + 1;
        match here {
            Here::Empty => Ok([Here::Empty, Here::Empty]),
            Here::Leaf(key, leaf) => {
                let side = Here::leaf(*key, leaf);
                Ok(if key.bit(level) {
                    [Here::Empty, side]
                } else {
                    [side, Here::Empty]
                })
            }
            Here::Stored(node) => match self.lookup(node, level)? {
                Node::Branch { left, right, sum } if level < MAX_LEVEL => {
                    let ls = sibling_sum(self.source, below, left, *sum, right)?;
                    let rs = sibling_sum(self.source, below, right, *sum, left)?;
                    Ok([
                        Here::stored(ComputedNode::new(*left, ls), below),
                        Here::stored(ComputedNode::new(*right, rs), below),
                    ])
                }
                Node::Compacted { key, leaf } => {
                    let key = key.under_path(pos.path(), level);
                    self.children(pos, &Here::leaf(key, leaf))
                }
                other => Err(PlanError::UnexpectedNode {
                    hash: node.hash,
                    level,
                    found: other.kind_name(),
                }),
            },
        }
    }

    /// The leaf at a level-256 position, where `here` stands.
    fn leaf_at(&self, here: &Here) -> Result<Option<Leaf>, PlanError> {
        match here {
            Here::Empty => Ok(None),
            Here::Leaf(_, leaf) => Ok(Some(leaf.clone())),
            Here::Stored(node) => match self.lookup(node, MAX_LEVEL)? {
                Node::Leaf(leaf) | Node::Compacted { leaf, .. } => Ok(Some(leaf.clone())),
                other => Err(PlanError::UnexpectedNode {
                    hash: node.hash,
                    level: MAX_LEVEL,
                    found: other.kind_name(),
                }),
            },
        }
    }

    fn visit(
        &mut self,
        pos: Position,
        here: Here,
        role: Role,
        open: bool,
    ) -> Result<(), PlanError> {
        let level = pos.level();
        match role {
            Role::Outside => {
                self.push(level, here.computed(level));
            }
            Role::Covered => {
                let node = here.computed(level);
                self.total = sum::add(self.total, node.sum, level)?;
                if !open {
                    self.push(level, node);
                } else if level == MAX_LEVEL {
                    match self.leaf_at(&here)?.filter(|l| !l.is_empty()) {
                        None => {
                            self.proof.empty.push(true);
                        }
                        Some(leaf) => {
                            self.proof.empty.push(false);
                            self.proof.leaves.push(leaf);
                        }
                    }
                } else {
                    let [l, r] = self.children(&pos, &here)?;
                    self.push(level + 1, l.computed(level + 1));
                    self.push(level + 1, r.computed(level + 1));
                }
            }
            Role::Split => {
                let [(lp, lr), (rp, rr)] = split_children(&pos, self.span.as_ref());
                let [lh, rh] = self.children(&pos, &here)?;
                match (lr, rr) {
                    (Role::Covered, Role::Outside) => {
                        let open = self.push(level + 1, rh.computed(level + 1));
                        self.visit(lp, lh, lr, open)?;
                    }
                    (Role::Outside, Role::Covered) => {
                        let open = self.push(level + 1, lh.computed(level + 1));
                        self.visit(rp, rh, rr, open)?;
                    }
                    _ => {
                        self.visit(lp, lh, lr, false)?;
                        self.visit(rp, rh, rr, false)?;
                    }
                }
            }
        }
        Ok(())
    }
}
