//! The pure write planner shared by both layouts: the descent's context,
//! its subtree results, and the public entry point [`plan_insert_many`].
#![deny(clippy::arithmetic_side_effects)]

use crate::descent::items::{Item, batch_sum, prepare};
use crate::descent::{NodeSource, UpdateBatch};
use crate::descent::{compacted, full};
use crate::empty::{empty_hash, is_empty_hash};
use crate::error::PlanError;
use crate::hash::Hash;
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};
use crate::position::Position;

/// A subtree as the descent sees it after (re)building it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Sub<'a> {
    /// The empty subtree at this level.
    Empty,
    /// A branch, known by hash and sum.
    Branch(ComputedNode),
    /// A compacted leaf; `key` is the full key at this position.
    Compacted {
        hash: Hash,
        key: Key,
        leaf: &'a Leaf,
    },
    /// A plain leaf at level 256 (full trees).
    Leaf { hash: Hash, leaf: &'a Leaf },
    /// An untouched child the read phase did not bring (reads without
    /// siblings), known only by its hash and sum: enough to hash its
    /// parent, never enough to move it.
    Beside(ComputedNode),
}

impl Sub<'_> {
    pub fn hash(&self, level: usize) -> Hash {
        match self {
            Sub::Empty => empty_hash(level),
            Sub::Branch(c) | Sub::Beside(c) => c.hash,
            Sub::Compacted { hash, .. } | Sub::Leaf { hash, .. } => *hash,
        }
    }

    pub fn sum(&self) -> u64 {
        match self {
            Sub::Empty => 0,
            Sub::Branch(c) | Sub::Beside(c) => c.sum,
            Sub::Compacted { leaf, .. } | Sub::Leaf { leaf, .. } => leaf.sum(),
        }
    }

    pub fn computed(&self, level: usize) -> ComputedNode {
        ComputedNode::new(self.hash(level), self.sum())
    }
}

/// The descent's state: where it reads, what it queued, what it replaced.
pub(crate) struct Planner<'a, R: NodeSource> {
    pub source: &'a R,
    pub inserts: Vec<(Position, Hash, Node)>,
    pub deletes: Vec<(Position, Hash)>,
    /// Sum of the non-empty leaves at batch keys that the batch replaces or deletes.
    pub replaced: u128,
}

impl<'a, R: NodeSource> Planner<'a, R> {
    pub fn new(source: &'a R) -> Self {
        Planner {
            source,
            inserts: Vec::new(),
            deletes: Vec::new(),
            replaced: 0,
        }
    }

    /// The stored node under `hash`, which must be non-empty at `level`.
    pub fn node(&self, hash: &Hash, level: usize) -> Result<&'a Node, PlanError> {
        self.source
            .node(hash)
            .ok_or(PlanError::MissingNode { hash: *hash, level })
    }

    /// An untouched child at `level`, seen as a subtree; `path` is any key
    /// that leads to it (for rebuilding a compacted leaf's high key bits).
    pub fn resolve(&self, level: usize, hash: Hash, path: &Key) -> Result<Sub<'a>, PlanError> {
        if is_empty_hash(level, &hash) {
            return Ok(Sub::Empty);
        }
        Ok(match self.node(&hash, level)? {
            Node::Branch { sum, .. } => Sub::Branch(ComputedNode::new(hash, *sum)),
            Node::Compacted { key, leaf } => Sub::Compacted {
                hash,
                key: key.under_path(path, level),
                leaf,
            },
            Node::Leaf(leaf) => Sub::Leaf { hash, leaf },
        })
    }

    /// The untouched child `hash` at `level` beside a rewritten one, under
    /// a stored branch of sum `parent_sum` whose other child is `other`.
    /// When the read phase did not bring it (reads without siblings), it
    /// is [`Sub::Beside`]: its sum is the parent's minus the other child's.
    pub fn resolve_beside(
        &self,
        level: usize,
        hash: Hash,
        path: &Key,
        parent_sum: u64,
        other: &Hash,
    ) -> Result<Sub<'a>, PlanError> {
        if is_empty_hash(level, &hash) || self.source.node(&hash).is_some() {
            return self.resolve(level, hash, path);
        }
        let other_sum = if is_empty_hash(level, other) {
            0
        } else {
            self.node(other, level)?.sum()
        };
        let sum = parent_sum
            .checked_sub(other_sum)
            .ok_or(PlanError::MissingNode { hash, level })?;
        Ok(Sub::Beside(ComputedNode::new(hash, sum)))
    }

    /// Queues `node` (hashing to `hash`) for the position at `level` on
    /// `key`'s path.
    pub fn insert(&mut self, level: usize, key: &Key, hash: Hash, node: Node) {
        self.inserts.push((Position::new(level, key), hash, node));
    }

    /// Queues the removal of the node `hash` from the position at `level`
    /// on `key`'s path.
    pub fn delete(&mut self, level: usize, key: &Key, hash: Hash) {
        self.deletes.push((Position::new(level, key), hash));
    }

    pub fn replaced(&mut self, sum: u64) {
        self.replaced = self.replaced.saturating_add(u128::from(sum));
    }
}

/// Plans one batched write without touching any store: the pure half of
/// [`Tree::insert_many`](crate::Tree::insert_many).
///
/// `source` must hold every node on the batch's paths and their siblings
/// (what the level-batched fetch brings). The batch may mix inserts and
/// deletes (an empty leaf deletes); when a key appears twice, the last pair
/// wins. Returns the batch to commit; nothing is planned when the sums
/// overflow, so a rejected batch writes nothing.
pub fn plan_insert_many<R: NodeSource>(
    layout: LayoutKind,
    source: &R,
    root: ComputedNode,
    batch: &[(Key, Leaf)],
) -> Result<UpdateBatch, PlanError> {
    let items = prepare(batch);
    plan_items(layout, source, root, &items)
}

pub(crate) fn plan_items<R: NodeSource>(
    layout: LayoutKind,
    source: &R,
    root: ComputedNode,
    items: &[Item<'_>],
) -> Result<UpdateBatch, PlanError> {
    let added = batch_sum(items)?;
    let mut planner = Planner::new(source);
    let new_root = if items.is_empty() {
        root
    } else {
        match layout {
            LayoutKind::Full => full::update(&mut planner, 0, root.hash, items)?,
            LayoutKind::Compacted => compacted::update(&mut planner, 0, root.hash, items)?,
        }
        .computed(0)
    };
    // The replacement-aware overflow rule (spec §3.6): the new total is the
    // old one minus the replaced leaves plus the batch. Checked arithmetic
    // on the way up already rejected overflow; this cross-checks the store.
    let expected = u128::from(root.sum)
        .checked_add(u128::from(added))
        .and_then(|t| t.checked_sub(planner.replaced))
        .ok_or(PlanError::SumMismatch {
            expected: 0,
            computed: new_root.sum,
        })?;
    if expected > u128::from(u64::MAX) {
        return Err(crate::error::SumOverflow { level: 0 }.into());
    }
    if expected != u128::from(new_root.sum) {
        return Err(PlanError::SumMismatch {
            expected,
            computed: new_root.sum,
        });
    }
    Ok(UpdateBatch {
        old_root: root,
        new_root,
        inserts: planner.inserts,
        deletes: planner.deletes,
    })
}
