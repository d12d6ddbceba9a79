//! Strata rows: several binary levels of the tree packed into one row keyed
//! by position, the layout of the SQL stores.
//!
//! ```text
//!  depth d ─────────────── slot 1            one row = the nodes at levels
//!  d+1 ──────────── slot 2      slot 3       d .. d+h-1 under one path
//!  ...                 ...                   prefix of d bits (h = height)
//!  d+h-1 ─ slot 2^(h-1) ... slot 2^h - 1     bottom branches keep their
//!                 │                          children's (hash, sum): the
//!  d+h ──── roots of the next rows ──        roots of the rows below
//! ```
//!
//! A row is keyed by `(depth, path)`: `depth` a multiple of the height and
//! `path` the first `depth` key bits, most significant bit first in each
//! byte, so byte order is tree order and a subtree's rows are one key range
//! (every row of a subtree sorts between its root row and the next
//! sibling's). Nothing is shared between positions, so a row is only ever
//! rewritten by the batch that changes its positions.
//!
//! A row stores no hash of its inner branches: they are recomputed from the
//! children when the row is read, so a row read is content-addressed (the
//! hash a reader files a node under is the hash of what it read). Compacted
//! leaves and leaves keep their hash (a compacted leaf's hash costs up to
//! 256 hashes to recompute).
//!
//! Body: one format byte, then the row's subtree in pre-order, one tag per
//! slot: empty, inner branch (its two children follow), bottom branch (two
//! child refs of 32-byte hash + 8-byte sum), compacted leaf (hash, key, sum,
//! value), leaf (hash, sum, value). Integers little-endian, values prefixed
//! by a 4-byte length.
#![deny(clippy::arithmetic_side_effects)]
// The row codec and merge serve the SQL stores; without them only the types
// that audit reports name are used.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

use std::collections::{BTreeMap, HashMap, HashSet};

/// Hasher of the merge's maps (keys are positions and row paths, not
/// attacker-chosen in a way that matters for a per-batch map).
pub(crate) type Fast = foldhash::fast::RandomState;

/// Decoded rows by key.
pub type RowMap = HashMap<RowKey, Row, Fast>;

use crate::descent::{LeafChange, UpdateBatch};
use crate::empty::empty_hash;
use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};
use crate::position::Position;

/// Default levels per row: 16-ary rows, as in Aptos/penumbra's JMT.
pub const DEFAULT_STRATUM_HEIGHT: u8 = 4;

/// The format byte every body starts with.
const FORMAT: u8 = 1;

const TAG_EMPTY: u8 = 0;
const TAG_INNER: u8 = 1;
const TAG_BOTTOM: u8 = 2;
const TAG_COMPACTED: u8 = 3;
const TAG_LEAF: u8 = 4;

/// Levels per row, 1 to 6 (rows of 2 to 64 children).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StratumHeight(u8);

impl StratumHeight {
    /// Largest supported height (64-ary rows).
    pub const MAX: u8 = 6;

    /// `h` levels per row; `None` unless `1 <= h <= 6`.
    pub fn new(h: u8) -> Option<Self> {
        (1..=Self::MAX).contains(&h).then_some(StratumHeight(h))
    }

    /// The number of levels per row.
    pub fn get(self) -> usize {
        usize::from(self.0)
    }

    /// The depth of the row holding level `level`.
    pub fn row_depth(self, level: usize) -> usize {
        level.div_euclid(self.get()).saturating_mul(self.get())
    }
}

impl Default for StratumHeight {
    fn default() -> Self {
        StratumHeight(DEFAULT_STRATUM_HEIGHT)
    }
}

/// Why a stored row or a batch does not fit the layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrataError {
    /// A row body does not decode (a store error: the row is corrupt).
    #[error("row at depth {depth} is malformed: {what}")]
    Malformed {
        /// The row's depth.
        depth: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// The batch removes a node from a position that holds another node or
    /// none; nothing is written.
    #[error("batch deletes node {hash} at {position:?}, which is not stored there")]
    MissingNode {
        /// The position.
        position: Position,
        /// The hash the batch expected there.
        hash: Hash,
    },
    /// The batch's nodes do not fit together (a child it names is neither
    /// in the batch nor stored); nothing is written.
    #[error("batch is inconsistent at {position:?}: {what}")]
    Inconsistent {
        /// Where.
        position: Position,
        /// What does not fit.
        what: &'static str,
    },
}

impl StrataError {
    /// What is wrong, in words (an audit's [`Problem::Malformed`](ms_smt::Problem::Malformed)).
    pub fn what(&self) -> &'static str {
        match self {
            StrataError::Malformed { what, .. } | StrataError::Inconsistent { what, .. } => what,
            StrataError::MissingNode { .. } => "a node the batch deletes is not stored there",
        }
    }
}

/// A row's path bytes (at most 32), kept inline: a merge makes a row key
/// for every node it places or removes, and a heap allocation each was a
/// fifth of its time. Compares, orders and hashes as its bytes do.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RowPath {
    len: u8,
    /// The bytes, zero past `len` (so that the derived `Eq` and `Hash`
    /// are those of the bytes).
    bytes: [u8; 32],
}

impl RowPath {
    /// The path `bytes`; `None` when longer than 32 bytes (no row of a
    /// 256-level tree has such a path).
    pub fn new(bytes: &[u8]) -> Option<RowPath> {
        let mut out = [0u8; 32];
        out.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(RowPath {
            len: u8::try_from(bytes.len()).ok()?,
            bytes: out,
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The bytes zero-padded to 32 (a [`path_array`]).
    pub fn padded(&self) -> &[u8; 32] {
        &self.bytes
    }
}

impl std::ops::Deref for RowPath {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for RowPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl PartialOrd for RowPath {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RowPath {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

/// A row's key: its depth and the first `depth` key bits, most significant
/// bit first in each byte, `ceil(depth / 8)` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowKey {
    /// The path bytes.
    pub path: RowPath,
    /// The depth (a multiple of the stratum height).
    pub depth: usize,
}

impl RowKey {
    /// The row at `depth` on `key`'s path.
    pub fn on_path(depth: usize, key: &Key) -> RowKey {
        RowKey::from_array(&path_array(key, depth), depth)
    }

    /// The row at `depth` with path `path` as stored; `None` when the path
    /// is longer than any row's.
    pub fn stored(path: &[u8], depth: usize) -> Option<RowKey> {
        Some(RowKey {
            path: RowPath::new(path)?,
            depth,
        })
    }
}

impl From<RowKey> for ms_smt::audit::Location {
    fn from(key: RowKey) -> ms_smt::audit::Location {
        ms_smt::audit::Location::Row {
            depth: key.depth,
            path: key.path.to_vec(),
        }
    }
}

impl RowKey {
    /// The row `height` levels above this one on the same path; `None` for
    /// the top row.
    pub fn parent(&self, height: StratumHeight) -> Option<RowKey> {
        let depth = self.depth.checked_sub(height.get())?;
        let len = depth.div_ceil(8);
        let mut path = self.path;
        path.bytes.get_mut(len..)?.fill(0);
        path.len = u8::try_from(len).ok()?;
        if let Some(last) = len.checked_sub(1).and_then(|i| path.bytes.get_mut(i)) {
            *last &= last_byte_mask(depth);
        }
        Some(RowKey { path, depth })
    }

    /// Bit `i` of the path (0 = the top level's branch direction).
    fn bit(&self, i: usize) -> bool {
        self.path
            .get(i / 8)
            .is_some_and(|b| b.wrapping_shr(7usize.saturating_sub(i % 8) as u32) & 1 == 1)
    }
}

/// The first `bits` bits of `key`, most significant bit first in each byte
/// (`ceil(bits / 8)` bytes; unused low bits zero).
pub fn path_bytes(key: &Key, bits: usize) -> Vec<u8> {
    RowKey::from_array(&path_array(key, bits), bits)
        .path
        .to_vec()
}

/// [`path_bytes`] zero-padded to 32 bytes, without allocating. Sorting by
/// `(path_array, depth)` is sorting by [`RowKey`].
pub fn path_array(key: &Key, bits: usize) -> [u8; 32] {
    path_prefix(&key.0.map(u8::reverse_bits), bits)
}

/// The first `bits` bits of a 256-bit `path`, zero-padded to 32 bytes.
pub(crate) fn path_prefix(path: &[u8; 32], bits: usize) -> [u8; 32] {
    let bits = bits.min(MAX_LEVEL);
    let len = bits.div_ceil(8);
    let mut out = [0u8; 32];
    out[..len].copy_from_slice(&path[..len]);
    if let Some(last) = len.checked_sub(1).and_then(|i| out.get_mut(i)) {
        *last &= last_byte_mask(bits);
    }
    out
}

/// The bits of a path's last byte that a `bits`-bit path uses (all of
/// them when `bits` is a multiple of 8).
pub(crate) fn last_byte_mask(bits: usize) -> u8 {
    match bits % 8 {
        0 => 0xff,
        rem => 0xffu8.wrapping_shl(8u32.saturating_sub(rem as u32)),
    }
}

impl RowKey {
    /// The row at `depth` whose path is the first `depth` bits of the
    /// zero-padded `path` (a [`path_array`]).
    pub fn from_array(path: &[u8; 32], depth: usize) -> RowKey {
        let len = depth.min(MAX_LEVEL).div_ceil(8);
        let mut bytes = [0u8; 32];
        bytes[..len].copy_from_slice(&path[..len]);
        RowKey {
            path: RowPath {
                // At most 32.
                len: len as u8,
                bytes,
            },
            depth,
        }
    }
}

/// The node kept in one slot of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// A branch whose children are in the same row.
    Inner,
    /// A branch on the row's last level: its children are the roots of the
    /// rows below, kept here by hash and sum.
    Bottom {
        /// Left child.
        left: ComputedNode,
        /// Right child.
        right: ComputedNode,
    },
    /// A compacted leaf.
    Compacted {
        /// Its hash at this position.
        hash: Hash,
        /// The leaf's key.
        key: Key,
        /// The leaf.
        leaf: Leaf,
    },
    /// A leaf at level 256.
    Leaf {
        /// The leaf hash.
        hash: Hash,
        /// The leaf.
        leaf: Leaf,
    },
}

/// One decoded row: its depth and its slots by heap index (slot 1 is the
/// row's root, slot `s` has children `2s` and `2s + 1`; index 0 unused).
///
/// The row also remembers the (hash, sum) of every slot it has computed
/// (`known`): a row read for a path walk has all of them, and a merge
/// recomputes only the slots it changed and their ancestors.
#[derive(Debug, Clone)]
pub struct Row {
    depth: usize,
    height: StratumHeight,
    pub(crate) slots: Vec<Option<Slot>>,
    known: Vec<Option<ComputedNode>>,
}

impl PartialEq for Row {
    /// Rows are equal when they hold the same nodes (computed hashes are
    /// a cache).
    fn eq(&self, other: &Row) -> bool {
        self.depth == other.depth && self.height == other.height && self.slots == other.slots
    }
}

impl Eq for Row {}

/// Levels a row at `depth` spans: `height`, or fewer at the bottom of the tree.
fn span(depth: usize, height: StratumHeight) -> usize {
    height
        .get()
        .min(MAX_LEVEL.saturating_sub(depth).saturating_add(1))
}

impl Row {
    /// A row with no nodes.
    pub fn empty(depth: usize, height: StratumHeight) -> Row {
        let slots = 1usize << span(depth, height);
        Row {
            depth,
            height,
            slots: vec![None; slots],
            known: vec![None; slots],
        }
    }

    /// Sets slot `s` (`None` empties it) and forgets the computed hashes
    /// of it and of its ancestors in the row.
    fn set(&mut self, s: usize, slot: Option<Slot>) -> Option<Slot> {
        let mut a = s;
        while a > 0 {
            self.known[a] = None;
            a /= 2;
        }
        std::mem::replace(&mut self.slots[s], slot)
    }

    /// True when the row holds no node (it is deleted, not written).
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// Relative level of slot `s`.
    fn rel(s: usize) -> usize {
        (usize::BITS as usize)
            .saturating_sub(1)
            .saturating_sub(s.leading_zeros() as usize)
    }

    /// True when the slot's branches keep their children as refs.
    fn is_bottom(&self, s: usize) -> bool {
        Self::rel(s).saturating_add(1) == span(self.depth, self.height)
    }

    /// The slot of `pos` in its row (the caller picked the row).
    fn slot_of(&self, pos: &Position) -> usize {
        let r = pos.level().saturating_sub(self.depth);
        let mut s = 1usize;
        for d in self.depth..pos.level() {
            s = (s << 1) | usize::from(pos.path().bit(d));
        }
        debug_assert_eq!(Self::rel(s), r);
        s
    }

    /// True when this row's bottom level has a branch whose child on the
    /// path of `child` (a row one stratum below this one) is a node, that
    /// is, when the row `child` exists in the tree this row belongs to.
    pub fn has_child_row(&self, child: &RowKey) -> bool {
        let mut s = 1usize;
        for d in self.depth..child.depth {
            match self.slots.get(s).and_then(Option::as_ref) {
                Some(Slot::Inner) => s = (s << 1) | usize::from(child.bit(d)),
                Some(Slot::Bottom { left, right }) if d.saturating_add(1) == child.depth => {
                    let c = if child.bit(d) { right } else { left };
                    return c.hash != empty_hash(child.depth);
                }
                _ => return false,
            }
        }
        false
    }

    /// Decodes a stored body.
    pub fn decode(depth: usize, height: StratumHeight, body: &[u8]) -> Result<Row, StrataError> {
        let mut row = Row::empty(depth, height);
        let bad = |what| StrataError::Malformed { depth, what };
        let mut r = Reader { buf: body, depth };
        if r.byte()? != FORMAT {
            return Err(bad("unknown format byte"));
        }
        let mut stack = vec![1usize];
        while let Some(s) = stack.pop() {
            let tag = r.byte()?;
            let slot = match tag {
                TAG_EMPTY => None,
                TAG_INNER if !row.is_bottom(s) => {
                    stack.push(s.saturating_mul(2).saturating_add(1));
                    stack.push(s.saturating_mul(2));
                    Some(Slot::Inner)
                }
                TAG_BOTTOM if row.is_bottom(s) => Some(Slot::Bottom {
                    left: r.computed()?,
                    right: r.computed()?,
                }),
                TAG_COMPACTED => {
                    let hash = r.hash()?;
                    let key = Key(r.hash()?.0);
                    let leaf = r.leaf()?;
                    Some(Slot::Compacted { hash, key, leaf })
                }
                TAG_LEAF if depth.saturating_add(Self::rel(s)) == MAX_LEVEL => {
                    let hash = r.hash()?;
                    Some(Slot::Leaf {
                        hash,
                        leaf: r.leaf()?,
                    })
                }
                _ => return Err(bad("tag does not fit its slot")),
            };
            if s == 1 && slot.is_none() {
                return Err(bad("row without a root node"));
            }
            row.slots[s] = slot;
        }
        if !r.buf.is_empty() {
            return Err(bad("trailing bytes"));
        }
        Ok(row)
    }

    /// The length of [`encode`](Self::encode)'s body, so that it is
    /// written into one allocation.
    fn encoded_len(&self) -> usize {
        let leaf = |leaf: &Leaf| 12usize.saturating_add(leaf.value().len());
        self.slots.iter().fold(1usize, |len, slot| {
            let size = match slot {
                // Empty slots are written only under inner branches; one
                // byte each is an upper bound.
                None | Some(Slot::Inner) => 1,
                Some(Slot::Bottom { .. }) => 81,
                Some(Slot::Compacted { leaf: l, .. }) => 65usize.saturating_add(leaf(l)),
                Some(Slot::Leaf { leaf: l, .. }) => 33usize.saturating_add(leaf(l)),
            };
            len.saturating_add(size)
        })
    }

    /// The stored body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(FORMAT);
        let mut stack = vec![1usize];
        while let Some(s) = stack.pop() {
            match &self.slots[s] {
                None => out.push(TAG_EMPTY),
                Some(Slot::Inner) => {
                    out.push(TAG_INNER);
                    stack.push(s.saturating_mul(2).saturating_add(1));
                    stack.push(s.saturating_mul(2));
                }
                Some(Slot::Bottom { left, right }) => {
                    out.push(TAG_BOTTOM);
                    for c in [left, right] {
                        out.extend_from_slice(&c.hash.0);
                        out.extend_from_slice(&c.sum.to_le_bytes());
                    }
                }
                Some(Slot::Compacted { hash, key, leaf }) => {
                    out.push(TAG_COMPACTED);
                    out.extend_from_slice(&hash.0);
                    out.extend_from_slice(&key.0);
                    push_leaf(&mut out, leaf);
                }
                Some(Slot::Leaf { hash, leaf }) => {
                    out.push(TAG_LEAF);
                    out.extend_from_slice(&hash.0);
                    push_leaf(&mut out, leaf);
                }
            }
        }
        out
    }

    /// Every node of the row with its hash (inner hashes recomputed, and
    /// remembered), root first; and the root's hash and sum.
    pub fn nodes(&mut self) -> Result<(ComputedNode, Vec<(Hash, Node)>), StrataError> {
        let mut out = Vec::new();
        let root = self.compute(1, Some(&mut out))?;
        out.reverse();
        Ok((root, out))
    }

    /// Computes (hash, sum) of every slot whose value is not remembered.
    fn hashes(&mut self) -> Result<(), StrataError> {
        if self.slots[1].is_some() {
            self.compute(1, None)?;
        }
        Ok(())
    }

    /// The (hash, sum) of the node in slot `s` (`None` for an empty slot),
    /// as last computed by [`hashes`](Self::hashes).
    fn known_at(&self, s: usize) -> Option<ComputedNode> {
        self.slots.get(s)?.as_ref()?;
        self.known.get(s).copied().flatten()
    }

    /// Computes slot `s` and, given `out`, collects its nodes (post-order,
    /// so `out` reversed is root first; leaves are cloned only then).
    /// Without `out`, a slot whose value is remembered is not recomputed.
    fn compute(
        &mut self,
        s: usize,
        mut out: Option<&mut Vec<(Hash, Node)>>,
    ) -> Result<ComputedNode, StrataError> {
        let level = self.depth.saturating_add(Self::rel(s));
        if out.is_none()
            && let Some(Some(c)) = self.known.get(s)
        {
            return Ok(*c);
        }
        let depth = self.depth;
        let bad = |what| StrataError::Malformed { depth, what };
        let (c, node) = match self.slots.get(s).and_then(Option::as_ref) {
            None => return Ok(ComputedNode::empty(level)),
            Some(Slot::Inner) => {
                let child = s.saturating_mul(2);
                let l = self.compute(child, out.as_deref_mut())?;
                let r = self.compute(child.saturating_add(1), out.as_deref_mut())?;
                let (c, node) = branch(l, r).ok_or(bad("inner branch sum overflows"))?;
                (c, Some(node))
            }
            Some(Slot::Bottom { left, right }) => {
                let (c, node) = branch(*left, *right).ok_or(bad("bottom branch sum overflows"))?;
                (c, Some(node))
            }
            Some(Slot::Compacted { hash, key, leaf }) => (
                ComputedNode::new(*hash, leaf.sum()),
                out.is_some().then(|| Node::Compacted {
                    key: *key,
                    leaf: leaf.clone(),
                }),
            ),
            Some(Slot::Leaf { hash, leaf }) => (
                ComputedNode::new(*hash, leaf.sum()),
                out.is_some().then(|| Node::Leaf(leaf.clone())),
            ),
        };
        if let Some(Node::Branch { left, right, .. }) = &node
            && *left == empty_hash(level.saturating_add(1))
            && *right == empty_hash(level.saturating_add(1))
        {
            return Err(bad("branch with two empty children"));
        }
        self.known[s] = Some(c);
        if let (Some(out), Some(node)) = (out, node) {
            out.push((c.hash, node));
        }
        Ok(c)
    }
}

/// The branch over `l` and `r`, or `None` when the sum overflows.
pub(crate) fn branch(l: ComputedNode, r: ComputedNode) -> Option<(ComputedNode, Node)> {
    let sum = l.sum.checked_add(r.sum)?;
    let hash = branch_hash(&l.hash, &r.hash, sum);
    Some((
        ComputedNode::new(hash, sum),
        Node::Branch {
            left: l.hash,
            right: r.hash,
            sum,
        },
    ))
}

fn push_leaf(out: &mut Vec<u8>, leaf: &Leaf) {
    out.extend_from_slice(&leaf.sum().to_le_bytes());
    let len = u32::try_from(leaf.value().len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(leaf.value());
}

/// A cursor over a body that reports truncation as a malformed row.
struct Reader<'a> {
    buf: &'a [u8],
    depth: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StrataError> {
        if self.buf.len() < n {
            return Err(StrataError::Malformed {
                depth: self.depth,
                what: "body is truncated",
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn byte(&mut self) -> Result<u8, StrataError> {
        Ok(self.take(1)?[0])
    }

    fn hash(&mut self) -> Result<Hash, StrataError> {
        let mut h = [0u8; 32];
        h.copy_from_slice(self.take(32)?);
        Ok(Hash(h))
    }

    fn u64(&mut self) -> Result<u64, StrataError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn computed(&mut self) -> Result<ComputedNode, StrataError> {
        let hash = self.hash()?;
        Ok(ComputedNode::new(hash, self.u64()?))
    }

    fn leaf(&mut self) -> Result<Leaf, StrataError> {
        let sum = self.u64()?;
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        let len = usize::try_from(u32::from_le_bytes(b)).unwrap_or(usize::MAX);
        Ok(Leaf::new(self.take(len)?.to_vec(), sum))
    }
}

/// The rows a batch touches, sorted by key (a stable order keeps lock and
/// page access deterministic).
pub fn touched_rows(batch: &UpdateBatch, height: StratumHeight) -> Vec<RowKey> {
    // Sorted and deduplicated as fixed arrays: one allocation per row, not
    // per position.
    let mut keys: Vec<([u8; 32], usize)> = batch
        .inserts
        .iter()
        .map(|(p, _, _)| p)
        .chain(batch.deletes.iter().map(|(p, _)| p))
        .map(|p| {
            let depth = height.row_depth(p.level());
            (path_array(p.path(), depth), depth)
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.iter()
        .map(|(path, depth)| RowKey::from_array(path, *depth))
        .collect()
}

/// What a batch does to one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowChange {
    /// Write this body (insert or replace).
    Put(RowKey, Vec<u8>),
    /// The row holds no node any more.
    Delete(RowKey),
}

/// Applies `batch` to the `rows` it touches (the stored ones; absent keys
/// are new rows) and returns each touched row's change, in key order.
///
/// Every delete must name the node stored at its position, and every
/// inserted node must come out of the merged rows with the hash the batch
/// gives it; otherwise nothing is returned but the error. (The stores use
/// [`apply_keeping_rows`]; this form is for the unit tests.)
#[cfg(test)]
pub fn apply(
    batch: &UpdateBatch,
    height: StratumHeight,
    rows: RowMap,
) -> Result<Vec<RowChange>, StrataError> {
    let touched = touched_rows(batch, height);
    apply_keeping_rows(batch, height, rows, touched).map(|merged| merged.changes)
}

/// What [`apply_keeping_rows`] returns.
#[derive(Debug)]
pub struct Merged {
    /// Each touched row's change, in key order.
    pub changes: Vec<RowChange>,
    /// Every touched row that is not empty after the batch (rows of the
    /// new tree), with its hashes computed.
    pub rows: Vec<(RowKey, Row)>,
    /// The keys whose leaves the batch changed, in key order, each with
    /// its old and new leaf: what the change feed's journal records. A
    /// compacted leaf that only moved is not a change.
    pub leaves: Vec<LeafChange>,
}

/// Applies `batch` to the rows of [`touched_rows`], as the unit tests'
/// `apply` does, also handing back the merged rows.
///
/// Hashes the rows already know (a row read by a path walk knows all of
/// them) are not recomputed: only the slots the batch changes and their
/// ancestors are hashed again.
pub fn apply_keeping_rows(
    batch: &UpdateBatch,
    height: StratumHeight,
    mut rows: RowMap,
    keys: Vec<RowKey>,
) -> Result<Merged, StrataError> {
    let row_key = |p: &Position| RowKey::on_path(height.row_depth(p.level()), p.path());
    let stored: HashSet<RowKey, Fast> = keys
        .iter()
        .filter(|k| rows.contains_key(*k))
        .cloned()
        .collect();
    for key in &stored {
        if let Some(row) = rows.get_mut(key) {
            row.hashes()?;
        }
    }
    let (deletes, inserted) = net_positions(batch)?;
    let deletes: Vec<(Position, Hash, RowKey)> = deletes
        .into_iter()
        .map(|(pos, hash)| (pos, hash, row_key(&pos)))
        .collect();
    let placed: Vec<(Position, Hash, &Node, RowKey)> = inserted
        .iter()
        .map(|(pos, (hash, node))| (*pos, *hash, *node, row_key(pos)))
        .collect();
    // Every delete must name the node stored at its position (checked
    // before any slot changes, so ancestors still have their old hashes).
    for (pos, hash, key) in &deletes {
        let found = rows.get(key).and_then(|row| row.known_at(row.slot_of(pos)));
        if found.map(|c| c.hash) != Some(*hash) {
            return Err(StrataError::MissingNode {
                position: *pos,
                hash: *hash,
            });
        }
    }
    // What the deletes take out: a replaced bottom branch's old child refs
    // are looked up there.
    let mut removed: HashMap<Position, Slot, Fast> =
        HashMap::with_capacity_and_hasher(deletes.len(), Fast::default());
    for (pos, hash, key) in &deletes {
        let missing = || StrataError::MissingNode {
            position: *pos,
            hash: *hash,
        };
        let row = rows.get_mut(key).ok_or_else(missing)?;
        let s = row.slot_of(pos);
        removed.insert(*pos, row.set(s, None).ok_or_else(missing)?);
    }

    for (pos, hash, node, key) in &placed {
        let row = rows
            .entry(*key)
            .or_insert_with(|| Row::empty(key.depth, height));
        let s = row.slot_of(pos);
        let slot = match node {
            Node::Branch { left, right, .. } if row.is_bottom(s) => {
                let old = removed.get(pos);
                Slot::Bottom {
                    left: child_ref(pos, false, *left, &inserted, old)?,
                    right: child_ref(pos, true, *right, &inserted, old)?,
                }
            }
            Node::Branch { .. } => Slot::Inner,
            Node::Compacted { key, leaf } => Slot::Compacted {
                hash: *hash,
                key: *key,
                leaf: leaf.clone(),
            },
            Node::Leaf(leaf) => Slot::Leaf {
                hash: *hash,
                leaf: leaf.clone(),
            },
        };
        if row.slots[s].is_some() {
            return Err(StrataError::Inconsistent {
                position: *pos,
                what: "inserted over a node the batch does not delete",
            });
        }
        row.set(s, Some(slot));
    }

    // Every inserted node must come back with its hash, and no slot may
    // hang below an empty or non-branch slot.
    for key in &keys {
        let Some(row) = rows.get_mut(key) else {
            continue;
        };
        for s in 2..row.slots.len() {
            if row.slots[s].is_some() && !matches!(row.slots[s / 2], Some(Slot::Inner)) {
                return Err(StrataError::Inconsistent {
                    position: Position::new(key.depth, &Key::default()),
                    what: "a node hangs below an empty slot or a leaf",
                });
            }
        }
        row.hashes()?;
    }
    for (pos, hash, _, key) in &placed {
        let got = rows.get(key).and_then(|row| row.known_at(row.slot_of(pos)));
        if got.map(|c| c.hash) != Some(*hash) {
            return Err(StrataError::Inconsistent {
                position: *pos,
                what: "the merged row does not reproduce the inserted hash",
            });
        }
    }
    let leaves = leaf_changes(&removed, &placed);
    let mut changes = Vec::with_capacity(keys.len());
    let mut merged = Vec::with_capacity(keys.len());
    for key in keys {
        match rows.remove(&key) {
            Some(row) if !row.is_empty() => {
                changes.push(RowChange::Put(key, row.encode()));
                merged.push((key, row));
            }
            Some(_) if stored.contains(&key) => changes.push(RowChange::Delete(key)),
            _ => {}
        }
    }
    Ok(Merged {
        changes,
        rows: merged,
        leaves,
    })
}

/// The leaves the deletes took out and the inserts placed, netted per key:
/// a leaf that only moved (a compacted leaf pulled up or pushed down)
/// cancels out.
fn leaf_changes(
    removed: &HashMap<Position, Slot, Fast>,
    placed: &[(Position, Hash, &Node, RowKey)],
) -> Vec<LeafChange> {
    let mut by_key: BTreeMap<Key, (Leaf, Leaf)> = BTreeMap::new();
    for (pos, slot) in removed {
        let (key, leaf) = match slot {
            Slot::Compacted { key, leaf, .. } => (key.under_path(pos.path(), pos.level()), leaf),
            Slot::Leaf { leaf, .. } => (*pos.path(), leaf),
            Slot::Inner | Slot::Bottom { .. } => continue,
        };
        by_key
            .entry(key)
            .or_insert_with(|| (Leaf::empty(), Leaf::empty()))
            .0 = leaf.clone();
    }
    for (pos, _, node, _) in placed {
        let (key, leaf) = match node {
            Node::Compacted { key, leaf } => (key.under_path(pos.path(), pos.level()), leaf),
            Node::Leaf(leaf) => (*pos.path(), leaf),
            Node::Branch { .. } => continue,
        };
        by_key
            .entry(key)
            .or_insert_with(|| (Leaf::empty(), Leaf::empty()))
            .1 = leaf.clone();
    }
    by_key
        .into_iter()
        .filter(|(_, (old, new))| old != new)
        .map(|(key, (old, new))| LeafChange { key, old, new })
        .collect()
}

/// Net changes per position: a node the batch places and then moves on
/// (a compacted leaf pulled up several levels is inserted and deleted at
/// each level it passes) cancels out. What is left is at most one stored
/// node removed and at most one node placed per position.
#[allow(clippy::type_complexity)]
fn net_positions(
    batch: &UpdateBatch,
) -> Result<
    (
        Vec<(Position, Hash)>,
        HashMap<Position, (Hash, &Node), Fast>,
    ),
    StrataError,
> {
    let mut inserted: HashMap<Position, (Hash, &Node), Fast> =
        HashMap::with_capacity_and_hasher(batch.inserts.len(), Fast::default());
    for (p, h, n) in &batch.inserts {
        if inserted.insert(*p, (*h, n)).is_some() {
            return Err(StrataError::Inconsistent {
                position: *p,
                what: "two nodes placed at one position",
            });
        }
    }
    let mut deletes = Vec::with_capacity(batch.deletes.len());
    for (p, h) in &batch.deletes {
        match inserted.get(p) {
            Some((placed, _)) if placed == h => {
                inserted.remove(p);
            }
            _ => deletes.push((*p, *h)),
        }
    }
    Ok((deletes, inserted))
}

/// The (hash, sum) of a bottom branch's child `hash` on side `right`: from
/// the batch when it places that child, empty, or the ref the slot held
/// before (an untouched child keeps its position and so its ref).
fn child_ref(
    pos: &Position,
    right: bool,
    hash: Hash,
    inserted: &HashMap<Position, (Hash, &Node), Fast>,
    old: Option<&Slot>,
) -> Result<ComputedNode, StrataError> {
    let child = pos.child(right);
    if let Some((h, node)) = inserted.get(&child)
        && *h == hash
    {
        return Ok(ComputedNode::new(hash, node.sum()));
    }
    if hash == empty_hash(child.level()) {
        return Ok(ComputedNode::empty(child.level()));
    }
    if let Some(Slot::Bottom { left, right: r }) = old {
        let kept = if right { r } else { left };
        if kept.hash == hash {
            return Ok(*kept);
        }
    }
    Err(StrataError::Inconsistent {
        position: *pos,
        what: "a child is neither placed by the batch nor stored",
    })
}

/// Nodes of a tree given as rows, keyed by hash (for reading a tree back
/// from rows in the unit tests).
#[cfg(test)]
pub fn decode_rows<'a>(
    height: StratumHeight,
    rows: impl IntoIterator<Item = (usize, &'a [u8])>,
) -> Result<Vec<(Hash, Node)>, StrataError> {
    let mut out = Vec::new();
    for (depth, body) in rows {
        out.extend(Row::decode(depth, height, body)?.nodes()?.1);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descent::{NodeCache, plan_insert_many};
    use crate::hash::sha256;
    use crate::layout::LayoutKind;

    fn key(i: u32) -> Key {
        Key(sha256(&i.to_le_bytes()).0)
    }

    /// Applies batches to an in-memory row map and checks, after each,
    /// that the rows decode to exactly the nodes a hash-keyed replay holds.
    fn replay(layout: LayoutKind, height: u8) {
        let height = StratumHeight::new(height).expect("height");
        let mut rows: HashMap<RowKey, Vec<u8>> = HashMap::new();
        let mut cache = NodeCache::new();
        let mut root = ComputedNode::empty_root();
        let batches: Vec<Vec<(Key, Leaf)>> = vec![
            (0..40)
                .map(|i| (key(i), Leaf::new(vec![i as u8], 1 + u64::from(i))))
                .collect(),
            (30..60)
                .map(|i| (key(i), Leaf::new(vec![7; 3], 5)))
                .collect(),
            (0..50)
                .step_by(2)
                .map(|i| (key(i), Leaf::empty()))
                .collect(),
            (0..60).map(|i| (key(i), Leaf::empty())).collect(),
        ];
        for batch in batches {
            let update = plan_insert_many(layout, &cache, root, &batch, ms_smt::Tuning::default())
                .expect("plan");
            let stored: RowMap = touched_rows(&update, height)
                .into_iter()
                .filter_map(|k| {
                    rows.get(&k)
                        .map(|b| (k, Row::decode(k.depth, height, b).expect("decode")))
                })
                .collect();
            for change in apply(&update, height, stored).expect("apply") {
                match change {
                    RowChange::Put(k, body) => rows.insert(k, body),
                    RowChange::Delete(k) => rows.remove(&k),
                };
            }
            root = update.new_root;
            cache = NodeCache::new();
            cache.extend(
                decode_rows(height, rows.iter().map(|(k, b)| (k.depth, b.as_slice())))
                    .expect("rows decode"),
            );
            // The root row reproduces the root.
            if let Some(body) = rows.get(&RowKey::on_path(0, &Key::default())) {
                let (top, _) = Row::decode(0, height, body).unwrap().nodes().unwrap();
                assert_eq!(top, root);
            } else {
                assert_eq!(root, ComputedNode::empty_root());
            }
        }
        assert!(rows.is_empty(), "deleting every key leaves no row");
    }

    #[test]
    fn compacted_and_full_round_trip_at_every_height() {
        for h in 1..=StratumHeight::MAX {
            replay(LayoutKind::Compacted, h);
        }
        replay(LayoutKind::Full, 4);
        replay(LayoutKind::Full, 3);
    }

    #[test]
    fn path_bytes_are_tree_ordered() {
        let k = Key([
            0b0000_0101,
            0xff,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]);
        assert_eq!(path_bytes(&k, 0), Vec::<u8>::new());
        assert_eq!(path_bytes(&k, 4), vec![0b1010_0000]);
        assert_eq!(path_bytes(&k, 12), vec![0b1010_0000, 0b1111_0000]);
        assert_eq!(path_bytes(&k, 256).len(), 32);
    }

    #[test]
    fn corrupt_bodies_are_typed_errors() {
        let h = StratumHeight::default();
        for body in [
            &[][..],
            &[9][..],
            &[1, 0][..],
            &[1, 3, 1][..],
            &[1, 1, 0, 0, 7][..],
        ] {
            assert!(matches!(
                Row::decode(0, h, body),
                Err(StrataError::Malformed { .. })
            ));
        }
    }
}
