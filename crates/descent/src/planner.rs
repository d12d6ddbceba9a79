//! The descent's state shared by both layouts: the subtrees it rebuilds
//! ([`Sub`]), the changes it queues ([`Planner`]) and the split of a
//! branch's two sides across threads ([`Planner::update_children`]).
#![deny(clippy::arithmetic_side_effects)]

use std::sync::Arc;

use crate::NodeSource;
use crate::empty::{empty_hash, is_empty_hash};
use crate::error::PlanError;
use crate::fork::{fork_here, on_two_threads};
use crate::hash::Hash;
use crate::items::Item;
use crate::key::Key;
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};
use crate::position::Position;
use crate::prelift::LiftMemo;
use crate::tuning::Tuning;

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
    /// True inside a half of a split descent (it splits no further).
    pub forked: bool,
    /// Compacted leaves lifted before the descent ([`prelift`]).
    pub lifted: Arc<LiftMemo>,
    /// Lanes and threads the descent hashes on.
    pub tuning: Tuning,
}

impl<'a, R: NodeSource> Planner<'a, R> {
    pub fn new(source: &'a R, tuning: Tuning) -> Self {
        Planner {
            source,
            inserts: Vec::new(),
            deletes: Vec::new(),
            replaced: 0,
            forked: false,
            lifted: Arc::default(),
            tuning,
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

/// A layout's descent step: rewrites the subtree at a level whose stored
/// hash is given so that it holds the items.
pub(crate) type UpdateFn<'a, R> =
    fn(&mut Planner<'a, R>, usize, Hash, &[Item<'a>]) -> Result<Sub<'a>, PlanError>;

impl<'a, R: NodeSource + Sync> Planner<'a, R> {
    /// Runs `left` on a second thread and `right` on this one, each with a
    /// planner of its own over the same source, and queues their changes
    /// here in the order one thread would have (left's, then right's).
    /// The second thread's hashes count on this thread
    /// ([`hash_calls`](crate::hash::hash_calls)).
    pub fn fork<A: Send, B>(
        &mut self,
        left: impl FnOnce(&mut Planner<'a, R>) -> A + Send,
        right: impl FnOnce(&mut Planner<'a, R>) -> B,
    ) -> (A, B) {
        let half = || {
            let mut half = Planner::new(self.source, self.tuning);
            half.forked = true;
            half.lifted = self.lifted.clone();
            half
        };
        let (mut lp, mut rp) = (half(), half());
        let ((a, lp), (b, rp)) =
            on_two_threads(move || (left(&mut lp), lp), move || (right(&mut rp), rp));
        self.absorb(lp);
        self.absorb(rp);
        (a, b)
    }

    /// The new children of the stored branch `(left, right, sum)` at
    /// `level` for `items` (non-empty, sorted, sharing the bits above
    /// `level`): a side the items reach is rewritten by `update`, the
    /// other is resolved beside it at the path `beside(bit)` names; both
    /// sides run on two threads when [`fork_here`] says so. One walk for
    /// both layouts' descents.
    pub fn update_children(
        &mut self,
        level: usize,
        items: &[Item<'a>],
        (left, right, sum): (Hash, Hash, u64),
        beside: impl Fn(bool) -> Key,
        update: UpdateFn<'a, R>,
    ) -> Result<(Sub<'a>, Sub<'a>), PlanError> {
        let split = items.partition_point(|it| !it.key.bit(level));
        let next = level.saturating_add(1);
        if split > 0 && split < items.len() && fork_here(items.len(), self.forked, self.tuning) {
            let (l, r) = self.fork(
                |lp| update(lp, next, left, &items[..split]),
                |rp| update(rp, next, right, &items[split..]),
            );
            return Ok((l?, r?));
        }
        let l = if split > 0 {
            update(self, next, left, &items[..split])?
        } else {
            self.resolve_beside(next, left, &beside(false), sum, &right)?
        };
        let r = if split < items.len() {
            update(self, next, right, &items[split..])?
        } else {
            self.resolve_beside(next, right, &beside(true), sum, &left)?
        };
        Ok((l, r))
    }

    /// Appends `other`'s changes to this planner's; takes its vectors
    /// whole when this one has none yet (a full build's first half holds
    /// over a million inserts, which copying costs more than hashing).
    fn absorb(&mut self, other: Planner<'a, R>) {
        if self.inserts.is_empty() {
            self.inserts = other.inserts;
        } else {
            append(&mut self.inserts, other.inserts, self.tuning);
        }
        if self.deletes.is_empty() {
            self.deletes = other.deletes;
        } else {
            self.deletes.extend(other.deletes);
        }
        self.replaced = self.replaced.saturating_add(other.replaced);
    }
}

/// Inserts from which [`append`] maps its new memory on two threads.
const PREFAULT_MIN: usize = 1 << 15;

/// Appends `src` to `dst`. A large `src` (a full build's second half:
/// over a million 152-byte inserts) is copied into memory whose pages two
/// threads first touched: the copy alone would take each page fault one
/// after another, and they cost more than the copy.
fn append(dst: &mut Vec<(Position, Hash, Node)>, src: Vec<(Position, Hash, Node)>, tuning: Tuning) {
    if src.len() >= PREFAULT_MIN && fork_here(src.len(), false, tuning) {
        dst.reserve(src.len());
        if let Some(spare) = dst.spare_capacity_mut().get_mut(..src.len()) {
            let (head, tail) = spare.split_at_mut(src.len() / 2);
            on_two_threads(|| prefault(head), || prefault(tail));
        }
    }
    dst.extend(src);
}

/// Writes a placeholder every page's worth of `spare`, so that every page
/// under it is mapped. The placeholders own nothing and stay
/// uninitialized capacity.
fn prefault(spare: &mut [std::mem::MaybeUninit<(Position, Hash, Node)>]) {
    const PAGE: usize = 4096;
    let stride = PAGE
        .checked_div(std::mem::size_of::<(Position, Hash, Node)>())
        .unwrap_or(1)
        .max(1);
    for slot in spare.iter_mut().step_by(stride) {
        slot.write((
            Position::ROOT,
            Hash::default(),
            Node::Branch {
                left: Hash::default(),
                right: Hash::default(),
                sum: 0,
            },
        ));
    }
}
