//! Every lift an update of the compacted layout will need, found and hashed
//! before the update runs, so that they share the lanes.
//!
//! A batch into a populated tree builds many small subtrees: a new key
//! beside the compacted leaf it displaces (two lifts of about 240 hashes),
//! or alone in an empty slot (one). Found one build at a time, a lone lift
//! has no partner on the lanes. This pass walks the update's paths without
//! hashing, as [`update`](super::compacted::update) will, collects the
//! lifts of every build, and lifts them together (split across two threads
//! when the batch is large); the builds then take their leaves' hashes
//! from the memo. The hashes and their count are those of lifting in place.

use std::collections::HashMap;

use crate::NodeSource;
use crate::empty::is_empty_hash;
use crate::fate::{Fate, fate};
use crate::fork::{fork_here, on_two_threads};
use crate::hash::Hash;
use crate::items::Item;
use crate::key::{Key, MAX_LEVEL};
use crate::lift::{Lift, lift_on};
use crate::node::Node;
use crate::tuning::Tuning;

/// Lifted compacted leaves by key and the level they were lifted to.
pub(crate) type LiftMemo = HashMap<(Key, usize), Hash, foldhash::fast::RandomState>;

/// The level each leaf `items` place in a subtree built at `level` is
/// lifted to (it follows from its nearest non-empty neighbours), with the
/// leaf's index in `items`.
pub(crate) fn lift_targets(level: usize, items: &[Item<'_>]) -> Vec<(usize, usize)> {
    let present: Vec<usize> = (0..items.len())
        .filter(|&i| !items[i].leaf.is_empty())
        .collect();
    let depth = |a: usize, b: usize| {
        items[a]
            .key
            .first_difference(&items[b].key)
            .map_or(level, |split| split + 1)
    };
    present
        .iter()
        .enumerate()
        .map(|(n, &i)| {
            let above = n.checked_sub(1).map_or(level, |m| depth(present[m], i));
            let below = present.get(n + 1).map_or(level, |&j| depth(i, j));
            (i, above.max(below).max(level))
        })
        .collect()
}

/// The lift of `item`'s leaf from level 256 to `to` (hashes the leaf).
pub(crate) fn leaf_lift(item: &Item<'_>, to: usize) -> Lift {
    Lift::new(item.leaf.hash(), item.leaf.sum(), item.key, MAX_LEVEL, to)
}

/// The leaves a subtree built at `level` from `items` lifts, with the
/// level each is lifted to.
fn leaf_targets<'a>(level: usize, items: &[Item<'a>]) -> impl Iterator<Item = (Item<'a>, usize)> {
    lift_targets(level, items)
        .into_iter()
        .map(move |(i, to)| (items[i], to))
}

/// Walks the update of the subtree `hash` at `level` with `items` and
/// hashes every lift its builds will make. Nodes the source lacks are
/// skipped: the update itself reports them.
pub(crate) fn prelift<'a, R: NodeSource>(
    source: &'a R,
    root: Hash,
    items: &[Item<'a>],
    tuning: Tuning,
) -> LiftMemo {
    memo(lift_split(&targets(source, root, items), tuning))
}

/// The lifts an update of the subtree `root` with `items` will make, not
/// yet hashed: each leaf and the level it is lifted to.
pub(crate) fn targets<'a, R: NodeSource>(
    source: &'a R,
    root: Hash,
    items: &[Item<'a>],
) -> Vec<(Item<'a>, usize)> {
    let mut targets = Vec::new();
    walk(source, 0, root, items, &mut targets);
    targets
}

/// [`prelift`] of several trees' updates at once (each its `targets`):
/// their lifts share the lanes (and two threads when there are enough),
/// and each tree gets its own memo, in order.
pub(crate) fn prelift_trees(trees: &[Vec<(Item<'_>, usize)>], tuning: Tuning) -> Vec<LiftMemo> {
    let all: Vec<(Item<'_>, usize)> = trees.iter().flatten().copied().collect();
    let mut lifts = lift_split(&all, tuning).into_iter();
    trees
        .iter()
        .map(|t| memo(lifts.by_ref().take(t.len())))
        .collect()
}

fn memo(lifts: impl IntoIterator<Item = Lift>) -> LiftMemo {
    lifts
        .into_iter()
        .map(|lift| ((lift.key, lift.to), lift.hash))
        .collect()
}

fn walk<'a, R: NodeSource>(
    source: &'a R,
    level: usize,
    hash: Hash,
    items: &[Item<'a>],
    out: &mut Vec<(Item<'a>, usize)>,
) {
    if items.is_empty() {
        return;
    }
    if is_empty_hash(level, &hash) {
        out.extend(leaf_targets(level, items));
        return;
    }
    match source.node(&hash) {
        Some(Node::Compacted { key, leaf }) => {
            let key = key.under_path(&items[0].key, level);
            match fate(items, key, leaf) {
                Fate::Kept { .. } => {}
                Fate::Replaced => out.extend(leaf_targets(level, items)),
                Fate::Joined(merged) => out.extend(leaf_targets(level, &merged)),
            }
        }
        Some(Node::Branch { left, right, .. }) => {
            let split = items.partition_point(|it| !it.key.bit(level));
            walk(source, level + 1, *left, &items[..split], out);
            walk(source, level + 1, *right, &items[split..], out);
        }
        Some(Node::Leaf(_)) | None => {}
    }
}

/// The lifts of `targets` (leaf hashes, schedules and climbs), split
/// across two threads when there are enough of them (the descent's own
/// threshold and `tuning`); the other thread's hashes count on this one.
fn lift_split(targets: &[(Item<'_>, usize)], tuning: Tuning) -> Vec<Lift> {
    let lift = |targets: &[(Item<'_>, usize)]| {
        let mut lifts: Vec<Lift> = targets
            .iter()
            .map(|(item, to)| leaf_lift(item, *to))
            .collect();
        lift_on(&mut lifts, tuning.hash_lanes());
        lifts
    };
    if !fork_here(targets.len(), false, tuning) {
        return lift(targets);
    }
    let (left, right) = targets.split_at(targets.len() / 2);
    let (mut lifts, right) = on_two_threads(|| lift(left), || lift(right));
    lifts.extend(right);
    lifts
}
