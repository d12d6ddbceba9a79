//! The full layout's batched descent (spec §2.2, §3.5): every non-empty
//! branch on every path is stored, leaves sit at level 256 keyed by leaf hash.

use crate::NodeSource;
use crate::chains::Chains;
use crate::empty::{empty_hash, is_empty_hash};
use crate::error::PlanError;
use crate::fork::fork_here;
use crate::hash::{Hash, branch_hash};
use crate::items::{Item, nonempty_range};
use crate::key::{Key, MAX_LEVEL};
use crate::node::{ComputedNode, Node};
use crate::planner::{Planner, Sub};
use crate::sum;

/// Rewrites the subtree at `level` whose stored hash is `hash` so that it
/// holds `items` (non-empty, sorted, sharing the key bits above `level`).
pub(crate) fn update<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    level: usize,
    hash: Hash,
    items: &[Item<'a>],
) -> Result<Sub<'a>, PlanError> {
    if level == MAX_LEVEL {
        return update_leaf(p, hash, items);
    }
    if is_empty_hash(level, &hash) {
        return build(p, level, items);
    }
    let Node::Branch { left, right, sum } = p.node(&hash, level)? else {
        return Err(PlanError::UnexpectedNode {
            hash,
            level,
            found: "leaf",
        });
    };
    let path = items[0].key;
    let (l, r) = p.update_children(level, items, (*left, *right, *sum), |_| path, update)?;
    let new = join(level, l, r)?;
    if new.hash(level) != hash {
        p.delete(level, &path, hash);
        queue(p, level, &path, &l, &r, &new);
    }
    Ok(new)
}

fn update_leaf<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    hash: Hash,
    items: &[Item<'a>],
) -> Result<Sub<'a>, PlanError> {
    // All items share all 256 bits: after last-wins there is exactly one.
    let Some(item) = items.last() else {
        return Ok(Sub::Empty);
    };
    if !is_empty_hash(MAX_LEVEL, &hash) {
        let old = match p.node(&hash, MAX_LEVEL)? {
            Node::Leaf(leaf) => leaf,
            _ => {
                return Err(PlanError::UnexpectedNode {
                    hash,
                    level: MAX_LEVEL,
                    found: "branch or compacted leaf",
                });
            }
        };
        p.replaced(old.sum());
        if old == item.leaf {
            return Ok(Sub::Leaf { hash, leaf: old });
        }
        p.delete(MAX_LEVEL, &item.key, hash);
    }
    Ok(new_leaf(p, item))
}

fn new_leaf<'a, R: NodeSource>(p: &mut Planner<'a, R>, item: &Item<'a>) -> Sub<'a> {
    if item.leaf.is_empty() {
        return Sub::Empty;
    }
    let hash = item.leaf.hash();
    p.insert(MAX_LEVEL, &item.key, hash, Node::Leaf(item.leaf.clone()));
    Sub::Leaf {
        hash,
        leaf: item.leaf,
    }
}

/// The node at `level` over children `l` and `r` (empty when both are).
fn join<'a>(level: usize, l: Sub<'a>, r: Sub<'a>) -> Result<Sub<'a>, PlanError> {
    if matches!((l, r), (Sub::Empty, Sub::Empty)) {
        return Ok(Sub::Empty);
    }
    let sum = sum::add(l.sum(), r.sum(), level)?;
    let hash = branch_hash(&l.hash(level + 1), &r.hash(level + 1), sum);
    Ok(Sub::Branch(ComputedNode::new(hash, sum)))
}

fn queue<R: NodeSource>(
    p: &mut Planner<'_, R>,
    level: usize,
    path: &Key,
    l: &Sub<'_>,
    r: &Sub<'_>,
    new: &Sub<'_>,
) {
    if let Sub::Branch(c) = new {
        p.insert(
            level,
            path,
            c.hash,
            Node::Branch {
                left: l.hash(level + 1),
                right: r.hash(level + 1),
                sum: c.sum,
            },
        );
    }
}

/// Builds the subtree at `level` holding the non-empty `items` from nothing.
fn build<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    level: usize,
    items: &[Item<'a>],
) -> Result<Sub<'a>, PlanError> {
    let mut targets = Vec::new();
    let mut chains = Chains::new(level, items, &mut targets, p.tuning.hash_lanes());
    build_in(p, level, items, 0, chains.as_mut())
}

/// [`build`] of `items`, which sit at `offset` in the span `chains` climbs.
fn build_in<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    level: usize,
    items: &[Item<'a>],
    offset: usize,
    mut chains: Option<&mut Chains<'_, 'a>>,
) -> Result<Sub<'a>, PlanError> {
    let Some(range) = nonempty_range(items) else {
        return Ok(Sub::Empty);
    };
    let offset = offset + range.start();
    let items = &items[range];
    let head = items[0];
    let (mut node, from) = match head.key.first_difference(&items[items.len() - 1].key) {
        None => {
            if let Some(hashes) = chains.and_then(|c| c.take(offset, level)) {
                return Ok(climbed(p, level, &head, hashes));
            }
            (new_leaf(p, &head), MAX_LEVEL)
        }
        Some(split_level) => {
            let split = items.partition_point(|it| !it.key.bit(split_level));
            let (left, right) = (&items[..split], &items[split..]);
            let next = split_level + 1;
            let (l, r) = if fork_here(items.len(), p.forked, p.tuning) {
                let (mut lc, mut rc) = match chains.as_deref_mut() {
                    Some(c) => {
                        let (lc, rc) = c.split(offset + split, offset + items.len());
                        (Some(lc), Some(rc))
                    }
                    None => (None, None),
                };
                let (l, r) = p.fork(
                    |lp| build_in(lp, next, left, offset, lc.as_mut()),
                    |rp| build_in(rp, next, right, offset + split, rc.as_mut()),
                );
                (l?, r?)
            } else {
                (
                    build_in(p, next, left, offset, chains.as_deref_mut())?,
                    build_in(p, next, right, offset + split, chains)?,
                )
            };
            let joined = join(split_level, l, r)?;
            queue(p, split_level, &head.key, &l, &r, &joined);
            (joined, split_level)
        }
    };
    // One-child branches from `from` up to `level`.
    let sum = node.sum();
    for lvl in (level..from).rev() {
        let (left, right) = lone_children(&head, lvl, node.hash(lvl + 1));
        let hash = branch_hash(&left, &right, sum);
        p.insert(lvl, &head.key, hash, Node::Branch { left, right, sum });
        node = Sub::Branch(ComputedNode::new(hash, sum));
    }
    Ok(node)
}

/// The children of the one-child branch at `lvl` on `item`'s path over
/// `child`.
fn lone_children(item: &Item<'_>, lvl: usize, child: Hash) -> (Hash, Hash) {
    let empty = empty_hash(lvl + 1);
    if item.key.bit(lvl) {
        (empty, child)
    } else {
        (child, empty)
    }
}

/// Queues the leaf `item` and its lone climb to `level`, whose hashes
/// [`Chains`] computed (`hashes[lvl]` for each level, 256 the leaf's), in
/// the order the climb one level at a time queues them.
fn climbed<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    level: usize,
    item: &Item<'a>,
    hashes: &[Hash],
) -> Sub<'a> {
    let leaf_hash = hashes[MAX_LEVEL];
    p.insert(
        MAX_LEVEL,
        &item.key,
        leaf_hash,
        Node::Leaf(item.leaf.clone()),
    );
    let sum = item.leaf.sum();
    for lvl in (level..MAX_LEVEL).rev() {
        let (left, right) = lone_children(item, lvl, hashes[lvl + 1]);
        p.insert(
            lvl,
            &item.key,
            hashes[lvl],
            Node::Branch { left, right, sum },
        );
    }
    if level == MAX_LEVEL {
        Sub::Leaf {
            hash: leaf_hash,
            leaf: item.leaf,
        }
    } else {
        Sub::Branch(ComputedNode::new(hashes[level], sum))
    }
}
