//! The full layout's batched descent (spec §2.2, §3.5): every non-empty
//! branch on every path is stored, leaves sit at level 256 keyed by leaf hash.

use crate::descent::NodeSource;
use crate::descent::items::{Item, nonempty_span};
use crate::descent::plan::{Planner, Sub, fork_here};
use crate::empty::{empty_hash, is_empty_hash};
use crate::error::PlanError;
use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::node::{ComputedNode, Node};
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
    let Some(items) = nonempty_span(items) else {
        return Ok(Sub::Empty);
    };
    let head = items[0];
    let (mut node, from) = match head.key.first_difference(&items[items.len() - 1].key) {
        None => (new_leaf(p, &head), MAX_LEVEL),
        Some(split_level) => {
            let split = items.partition_point(|it| !it.key.bit(split_level));
            let (l, r) = if fork_here(items.len(), p.forked) {
                let (l, r) = p.fork(
                    |lp| build(lp, split_level + 1, &items[..split]),
                    |rp| build(rp, split_level + 1, &items[split..]),
                );
                (l?, r?)
            } else {
                (
                    build(p, split_level + 1, &items[..split])?,
                    build(p, split_level + 1, &items[split..])?,
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
        let empty = empty_hash(lvl + 1);
        let child = node.hash(lvl + 1);
        let (left, right) = if head.key.bit(lvl) {
            (empty, child)
        } else {
            (child, empty)
        };
        let hash = branch_hash(&left, &right, sum);
        p.insert(lvl, &head.key, hash, Node::Branch { left, right, sum });
        node = Sub::Branch(ComputedNode::new(hash, sum));
    }
    Ok(node)
}
