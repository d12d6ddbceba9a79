//! tapd's row for a node, and the rows tapd writes for a set of leaves.
//!
//! tapd's compacted tree keeps a branch at every position whose subtree
//! holds two or more leaves (one-child branches included, down to where
//! the keys part) and a leaf row for each leaf just below its parting
//! branch; the root is always a branch. [`RowBuilder`] produces exactly
//! those rows from the leaves in tree order, with a stack no deeper than
//! the tree, so memory does not grow with the tree.

use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::leaf::Leaf;
use crate::node::{ComputedNode, compacted_hash};

/// One `mssmt_nodes` row: a branch (`left`, `right`) or a compacted leaf
/// (`key`, `value`), with its sum as tapd stores it (bit-cast to signed in
/// the database, unsigned here).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TapdRow {
    /// The node's hash (the row's `hash_key`).
    pub hash: Hash,
    /// Left child hash (branches).
    pub left: Option<Vec<u8>>,
    /// Right child hash (branches).
    pub right: Option<Vec<u8>>,
    /// The leaf's key (leaves).
    pub key: Option<Vec<u8>>,
    /// The leaf's value (leaves).
    pub value: Option<Vec<u8>>,
    /// The node's sum.
    pub sum: u64,
}

/// A finished subtree waiting for its sibling: its level, a key under it
/// (for the side it takes) and its hash and sum.
struct Open {
    level: usize,
    key: Key,
    node: ComputedNode,
}

/// Builds tapd's rows from leaves handed in tree order.
pub(crate) struct RowBuilder {
    stack: Vec<Open>,
    /// The leaf seen but not yet placed (its height needs the next key).
    held: Option<(Key, Leaf)>,
    /// Where the held leaf parts from the one before it.
    held_split: Option<usize>,
    /// Set by a sum overflow (a tree ms-smt would not have built).
    overflow: bool,
}

impl RowBuilder {
    pub(crate) fn new() -> Self {
        RowBuilder {
            stack: Vec::new(),
            held: None,
            held_split: None,
            overflow: false,
        }
    }

    /// Takes the next leaf (in tree order, keys distinct) and appends the
    /// rows that became final to `out`.
    pub(crate) fn push(&mut self, key: Key, leaf: Leaf, out: &mut Vec<TapdRow>) {
        let split = self
            .held
            .as_ref()
            .and_then(|(k, _)| k.first_difference(&key));
        if let Some((k, l)) = self.held.take() {
            self.place(k, l, split, out);
        }
        self.held = Some((key, leaf));
        self.held_split = split;
    }

    /// Places the last leaf, folds everything into the root and returns it
    /// (`None` for no leaves).
    pub(crate) fn finish(mut self, out: &mut Vec<TapdRow>) -> Option<ComputedNode> {
        let (k, l) = self.held.take()?;
        self.place(k, l, None, out);
        self.fold(0, out);
        self.stack.pop().map(|o| o.node)
    }

    /// Whether a sum overflowed while folding.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflow
    }

    /// Writes the held leaf at its height (one below the deeper of its two
    /// partings, at least 1), then folds up to where it parts from `next`.
    fn place(&mut self, key: Key, leaf: Leaf, next: Option<usize>, out: &mut Vec<TapdRow>) {
        let deepest = match (self.held_split, next) {
            (Some(a), Some(b)) => a.max(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => 0,
        };
        let level = (deepest + 1).min(MAX_LEVEL);
        let hash = compacted_hash(level, &key, &leaf);
        let sum = leaf.sum();
        let (value, _) = leaf.into_parts();
        out.push(TapdRow {
            hash,
            left: None,
            right: None,
            key: Some(key.0.to_vec()),
            value: Some(value),
            sum,
        });
        self.stack.push(Open {
            level,
            key,
            node: ComputedNode::new(hash, sum),
        });
        if let Some(split) = next {
            self.fold(split + 1, out);
        }
    }

    /// Folds the stack's top up to level `target`: two siblings at one
    /// level join into their parent, a lone node gets a one-child parent.
    fn fold(&mut self, target: usize, out: &mut Vec<TapdRow>) {
        while let Some(top) = self.stack.pop() {
            if top.level <= target {
                self.stack.push(top);
                return;
            }
            let parent = top.level - 1;
            let sibling = match self.stack.last() {
                Some(s) if s.level == top.level => self.stack.pop(),
                _ => None,
            };
            let (left, right, key) = match sibling {
                Some(s) => (s.node, top.node, s.key),
                None if top.key.bit(parent) => (ComputedNode::empty(top.level), top.node, top.key),
                None => (top.node, ComputedNode::empty(top.level), top.key),
            };
            let sum = left.sum.checked_add(right.sum).unwrap_or_else(|| {
                self.overflow = true;
                0
            });
            let hash = branch_hash(&left.hash, &right.hash, sum);
            out.push(TapdRow {
                hash,
                left: Some(left.hash.0.to_vec()),
                right: Some(right.hash.0.to_vec()),
                key: None,
                value: None,
                sum,
            });
            self.stack.push(Open {
                level: parent,
                key,
                node: ComputedNode::new(hash, sum),
            });
        }
    }
}
