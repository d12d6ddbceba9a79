//! The pure write planner shared by both layouts: the descent's context,
//! its subtree results, and the public entry point [`plan_insert_many`].
#![deny(clippy::arithmetic_side_effects)]

use crate::empty::{empty_hash, is_empty_hash};
use crate::error::PlanError;
use crate::items::{Item, batch_sum, prepare};
use crate::prelift::{LiftMemo, prelift};
use crate::{NodeSource, UpdateBatch};
use crate::{compacted, full};
use std::sync::Arc;

use crate::hash::{Hash, add_hash_calls, hash_calls};
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};
use crate::position::Position;
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

/// Batches of at least this many items are split across two threads at
/// their first branch with work on both sides (below it, each half is
/// hashed on one thread).
pub const PARALLEL_MIN_ITEMS: usize = 256;

/// A layout's descent step: rewrites the subtree at a level whose stored
/// hash is given so that it holds the items.
pub(crate) type UpdateFn<'a, R> =
    fn(&mut Planner<'a, R>, usize, Hash, &[Item<'a>]) -> Result<Sub<'a>, PlanError>;

/// True when a subtree with `items` items should be split across threads
/// (`forked`: a split above it already did, and one split is all two
/// threads use) under `tuning`.
pub fn fork_here(items: usize, forked: bool, tuning: Tuning) -> bool {
    if forked || items < PARALLEL_MIN_ITEMS {
        return false;
    }
    tuning.descent_threads() >= 2
}

/// Runs `left` on a scoped second thread and `right` on this one; the
/// second thread's hashes count on this thread
/// ([`hash_calls`](crate::hash::hash_calls)). A panic on either side
/// resumes here.
pub fn on_two_threads<A: Send, B>(
    left: impl FnOnce() -> A + Send,
    right: impl FnOnce() -> B,
) -> (A, B) {
    let (a, calls, b) = std::thread::scope(|scope| {
        let handle = scope.spawn(move || {
            let before = hash_calls();
            let a = left();
            (a, hash_calls().wrapping_sub(before))
        });
        let b = right();
        match handle.join() {
            Ok((a, calls)) => (a, calls, b),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    add_hash_calls(calls);
    (a, b)
}

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
    tuning: Tuning,
) -> Result<UpdateBatch, PlanError> {
    let items = prepare(batch);
    plan_items(layout, source, root, &items, tuning)
}

pub(crate) fn plan_items<R: NodeSource>(
    layout: LayoutKind,
    source: &R,
    root: ComputedNode,
    items: &[Item<'_>],
    tuning: Tuning,
) -> Result<UpdateBatch, PlanError> {
    // One key makes at most two lifts, which its build pairs itself.
    let lifted = (layout == LayoutKind::Compacted && items.len() > 1)
        .then(|| Arc::new(prelift(source, root.hash, items, tuning)));
    plan_lifted(layout, source, root, items, lifted, false, tuning)
}

/// [`plan_items`] with the compacted leaves' lifts already made
/// (`lifted`; `None`: in place), inside a split descent when `forked`.
pub(crate) fn plan_lifted<R: NodeSource>(
    layout: LayoutKind,
    source: &R,
    root: ComputedNode,
    items: &[Item<'_>],
    lifted: Option<Arc<LiftMemo>>,
    forked: bool,
    tuning: Tuning,
) -> Result<UpdateBatch, PlanError> {
    let added = batch_sum(items)?;
    let mut planner = Planner::new(source, tuning);
    planner.forked = forked;
    if let Some(lifted) = lifted {
        planner.lifted = lifted;
    }
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

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::NodeCache;
    use crate::hash::hash_calls;
    use crate::tuning::Tuning;

    fn random_batch(rng: &mut StdRng, n: usize, delete_from: &[(Key, Leaf)]) -> Vec<(Key, Leaf)> {
        let mut batch: Vec<(Key, Leaf)> = (0..n)
            .map(|_| {
                let mut key = [0u8; 32];
                rng.fill(&mut key);
                let value: Vec<u8> = (0..rng.gen_range(1..40)).map(|_| rng.r#gen()).collect();
                (Key(key), Leaf::new(value, rng.gen_range(1..1_000_000)))
            })
            .collect();
        // Deletes and replacements of existing keys, mixed in.
        for (key, _) in delete_from.iter().step_by(7) {
            let leaf = if rng.gen_bool(0.5) {
                Leaf::empty()
            } else {
                Leaf::new(vec![1], 3)
            };
            batch.push((*key, leaf));
        }
        batch
    }

    /// The plan on `threads` threads (and `lanes` lanes: 0, the default),
    /// as a tree with that tuning plans it, and its hash count.
    fn plan_on_lanes(
        threads: usize,
        lanes: usize,
        kind: LayoutKind,
        source: &NodeCache,
        root: ComputedNode,
        batch: &[(Key, Leaf)],
    ) -> (UpdateBatch, u64) {
        let tuning = Tuning::new()
            .with_descent_threads(threads)
            .with_hash_lanes(lanes);
        let before = hash_calls();
        let update = plan_insert_many(kind, source, root, batch, tuning).expect("plan");
        (update, hash_calls().wrapping_sub(before))
    }

    fn plan_on(
        threads: usize,
        kind: LayoutKind,
        source: &NodeCache,
        root: ComputedNode,
        batch: &[(Key, Leaf)],
    ) -> (UpdateBatch, u64) {
        plan_on_lanes(threads, 0, kind, source, root, batch)
    }

    /// The split descent plans exactly what one thread plans: the same
    /// roots, the same inserts and deletes in the same order, the same
    /// hash count, for builds from empty and updates of existing trees
    /// (inserts, replacements and deletes), on both layouts.
    #[test]
    fn two_threads_plan_what_one_does() {
        let mut rng = StdRng::seed_from_u64(0x7468_7265_6164);
        for kind in [LayoutKind::Compacted, LayoutKind::Full] {
            for size in [PARALLEL_MIN_ITEMS, 700, 2_000] {
                let empty = NodeCache::new();
                let seed = random_batch(&mut rng, size, &[]);
                let (one, calls_one) = plan_on(1, kind, &empty, ComputedNode::empty_root(), &seed);
                let (two, calls_two) = plan_on(2, kind, &empty, ComputedNode::empty_root(), &seed);
                assert_eq!(one.new_root, two.new_root);
                assert_eq!(one.inserts, two.inserts);
                assert_eq!(one.deletes, two.deletes);
                assert_eq!(calls_one, calls_two);

                let mut tree = NodeCache::new();
                tree.extend(one.inserts.iter().map(|(_, h, n)| (*h, n.clone())));
                let batch = random_batch(&mut rng, size, &seed);
                let (one, calls_one) = plan_on(1, kind, &tree, one.new_root, &batch);
                let (two, calls_two) = plan_on(2, kind, &tree, two.new_root, &batch);
                assert_eq!(one.new_root, two.new_root);
                assert_eq!(one.inserts, two.inserts);
                assert_eq!(one.deletes, two.deletes);
                assert_eq!(calls_one, calls_two);
            }
        }
    }

    /// A full build climbing its leaves' lone branches a few at a time on
    /// the lanes ([`Chains`](crate::chains::Chains)) plans exactly
    /// what one lane does: the same root, the same inserts in the same
    /// order, the same hash count, on one thread and two; with deletes of
    /// absent keys among the items and two keys apart only in their last
    /// bit.
    #[test]
    fn full_builds_on_lanes_plan_what_one_lane_does() {
        let mut rng = StdRng::seed_from_u64(0x6675_6c6c);
        let empty = NodeCache::new();
        for size in [2, 3, 9, 300, 2_000] {
            let mut batch = random_batch(&mut rng, size, &[]);
            for i in (0..size).step_by(5) {
                let mut key = batch[i].0;
                key.0[31] ^= 1;
                let leaf = if i % 2 == 0 {
                    Leaf::empty()
                } else {
                    Leaf::new(vec![7], 7)
                };
                batch.push((key, leaf));
            }
            let (want, calls) = plan_on_lanes(
                1,
                1,
                LayoutKind::Full,
                &empty,
                ComputedNode::empty_root(),
                &batch,
            );
            for (threads, lanes) in [(1, 2), (1, 4), (2, 4), (2, 2)] {
                let (got, got_calls) = plan_on_lanes(
                    threads,
                    lanes,
                    LayoutKind::Full,
                    &empty,
                    ComputedNode::empty_root(),
                    &batch,
                );
                assert_eq!(
                    got.new_root, want.new_root,
                    "{size} keys, {threads}t{lanes}l"
                );
                assert_eq!(got.inserts, want.inserts, "{size} keys, {threads}t{lanes}l");
                assert_eq!(got_calls, calls, "{size} keys, {threads}t{lanes}l");
            }
        }
    }

    /// Lifting every leaf of an update beforehand ([`prelift`], on the
    /// lanes) plans exactly what lifting each build's leaves in place does:
    /// the same root, rows in the same order, and the same hash count, for
    /// builds from empty and for inserts, replacements and deletes into a
    /// populated tree, batches of 2 to 2,000 keys.
    #[test]
    fn lifting_beforehand_plans_what_lifting_in_place_does() {
        let mut rng = StdRng::seed_from_u64(0x6c69_6674);
        let in_place = |source: &NodeCache, root: ComputedNode, batch: &[(Key, Leaf)]| {
            let items = prepare(batch);
            let mut planner = Planner::new(source, Tuning::default());
            planner.forked = true;
            let before = hash_calls();
            let new = compacted::update(&mut planner, 0, root.hash, &items).expect("plan");
            let calls = hash_calls().wrapping_sub(before);
            (new.computed(0), planner.inserts, planner.deletes, calls)
        };
        for size in [2, 9, 300, 2_000] {
            let empty = NodeCache::new();
            let seed = random_batch(&mut rng, size, &[]);
            let (planned, calls) = plan_on(
                1,
                LayoutKind::Compacted,
                &empty,
                ComputedNode::empty_root(),
                &seed,
            );
            let (root, inserts, deletes, calls_in_place) =
                in_place(&empty, ComputedNode::empty_root(), &seed);
            assert_eq!(
                (planned.new_root, &planned.inserts, &planned.deletes),
                (root, &inserts, &deletes)
            );
            assert_eq!(calls, calls_in_place, "build of {size}");

            let mut tree = NodeCache::new();
            tree.extend(inserts.iter().map(|(_, h, n)| (*h, n.clone())));
            let batch = random_batch(&mut rng, size, &seed);
            let (planned, calls) = plan_on(1, LayoutKind::Compacted, &tree, root, &batch);
            let (new_root, inserts, deletes, calls_in_place) = in_place(&tree, root, &batch);
            assert_eq!(
                (planned.new_root, &planned.inserts, &planned.deletes),
                (new_root, &inserts, &deletes)
            );
            assert_eq!(calls, calls_in_place, "update with {size}");
        }
    }
}
