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

use crate::descent::NodeSource;
use crate::descent::fate::{Fate, fate};
use crate::descent::items::Item;
use crate::descent::plan::fork_here;
use crate::empty::is_empty_hash;
use crate::hash::{Hash, add_hash_calls, hash_calls};
use crate::key::{Key, MAX_LEVEL};
use crate::lift::{Lift, lift_all};
use crate::node::Node;

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

/// The lifts of a subtree built at `level` from `items`.
fn leaf_lifts<'i>(level: usize, items: &'i [Item<'_>]) -> impl Iterator<Item = Lift> + 'i {
    lift_targets(level, items)
        .into_iter()
        .map(move |(i, to)| leaf_lift(&items[i], to))
}

/// Walks the update of the subtree `hash` at `level` with `items` and
/// hashes every lift its builds will make. Nodes the source lacks are
/// skipped: the update itself reports them.
pub(crate) fn prelift<R: NodeSource>(source: &R, root: Hash, items: &[Item<'_>]) -> LiftMemo {
    let mut lifts = Vec::new();
    walk(source, 0, root, items, &mut lifts);
    lift_split(&mut lifts);
    lifts
        .into_iter()
        .map(|lift| ((lift.key, lift.to), lift.hash))
        .collect()
}

fn walk<R: NodeSource>(
    source: &R,
    level: usize,
    hash: Hash,
    items: &[Item<'_>],
    out: &mut Vec<Lift>,
) {
    if items.is_empty() {
        return;
    }
    if is_empty_hash(level, &hash) {
        out.extend(leaf_lifts(level, items));
        return;
    }
    match source.node(&hash) {
        Some(Node::Compacted { key, leaf }) => {
            let key = key.under_path(&items[0].key, level);
            match fate(items, key, leaf) {
                Fate::Kept { .. } => {}
                Fate::Replaced => out.extend(leaf_lifts(level, items)),
                Fate::Joined(merged) => out.extend(leaf_lifts(level, &merged)),
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

/// [`lift_all`], split across two threads when there are enough lifts
/// (the descent's own threshold and setting); the other thread's hashes
/// count on this one.
fn lift_split(lifts: &mut [Lift]) {
    if !fork_here(lifts.len(), false) {
        return lift_all(lifts);
    }
    let (left, right) = lifts.split_at_mut(lifts.len() / 2);
    let calls = std::thread::scope(|scope| {
        let handle = scope.spawn(move || {
            let before = hash_calls();
            lift_all(left);
            hash_calls().wrapping_sub(before)
        });
        lift_all(right);
        handle.join()
    });
    match calls {
        Ok(calls) => add_hash_calls(calls),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
