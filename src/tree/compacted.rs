//! The compacted layout's batched descent (spec §2.3, §3.5).
//!
//! A subtree holding exactly one leaf is stored as one compacted leaf; one
//! holding two or more is a branch; an empty one is not stored. Unlike the Go
//! reference, the descent keeps that shape after deletes too (a branch left
//! with one compacted child and one empty child is pulled up into a compacted
//! leaf), so a node's stored form is a function of its hash and rows can be
//! shared safely between positions. Hashes are identical either way (spec B7).

use crate::empty::{empty_hash, is_empty_hash};
use crate::error::PlanError;
use crate::hash::{Hash, branch_hash};
use crate::key::Key;
use crate::node::{Node, compacted_hash};
use crate::store::NodeSource;
use crate::sum;
use crate::tree::items::{Item, nonempty_span};
use crate::tree::plan::{Planner, Sub};

/// Rewrites the subtree at `level` whose stored hash is `hash` so that it
/// holds `items` (non-empty, sorted in tree order, sharing the key bits
/// above `level`). Queues every row change; reads only `p.source`.
pub(crate) fn update<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    level: usize,
    hash: Hash,
    items: &[Item<'a>],
) -> Result<Sub<'a>, PlanError> {
    if is_empty_hash(level, &hash) {
        return build(p, level, items);
    }
    match p.node(&hash, level)? {
        Node::Compacted { key, leaf } => {
            let key = key.under_path(&items[0].key, level);
            let unchanged = Sub::Compacted { hash, key, leaf };
            match items.binary_search_by(|it| it.key.tree_cmp(&key)) {
                Ok(hit) => {
                    let others_empty = items
                        .iter()
                        .enumerate()
                        .all(|(i, it)| i == hit || it.leaf.is_empty());
                    // The batch's key replaces this leaf either way, so its
                    // sum counts as replaced even when the leaf is rewritten
                    // unchanged.
                    p.replaced(leaf.sum());
                    if others_empty && items[hit].leaf == leaf {
                        return Ok(unchanged);
                    }
                    p.delete(level, &key, hash);
                    build(p, level, items)
                }
                Err(at) => {
                    if items.iter().all(|it| it.leaf.is_empty()) {
                        // Deleting absent keys writes nothing (spec §9 B2).
                        return Ok(unchanged);
                    }
                    p.delete(level, &key, hash);
                    let mut merged = Vec::with_capacity(items.len() + 1);
                    merged.extend_from_slice(&items[..at]);
                    merged.push(Item { key, leaf });
                    merged.extend_from_slice(&items[at..]);
                    build(p, level, &merged)
                }
            }
        }
        Node::Branch { left, right, .. } => {
            let split = items.partition_point(|it| !it.key.bit(level));
            let path = items[0].key;
            let l = if split > 0 {
                update(p, level + 1, *left, &items[..split])?
            } else {
                p.resolve(level + 1, *left, &path.with_bit(level, false))?
            };
            let r = if split < items.len() {
                update(p, level + 1, *right, &items[split..])?
            } else {
                p.resolve(level + 1, *right, &path.with_bit(level, true))?
            };
            let (new, node) = join(level, l, r)?;
            if new.hash(level) == hash {
                return Ok(new);
            }
            p.delete(level, &path, hash);
            queue_joined(p, level, &path, &new, node, &l, &r);
            Ok(new)
        }
        Node::Leaf(_) => Err(PlanError::UnexpectedNode {
            hash,
            level,
            found: "plain leaf",
        }),
    }
}

/// Joins two children at `level + 1` into the canonical node at `level`:
/// empty, a compacted leaf pulled up from a lone compacted child, or a branch
/// (whose row content is returned for queuing).
fn join<'a>(level: usize, l: Sub<'a>, r: Sub<'a>) -> Result<(Sub<'a>, Option<Node>), PlanError> {
    let child_empty = empty_hash(level + 1);
    match (l, r) {
        (Sub::Empty, Sub::Empty) => Ok((Sub::Empty, None)),
        (Sub::Compacted { hash, key, leaf }, Sub::Empty) => Ok((
            Sub::Compacted {
                hash: branch_hash(&hash, &child_empty, leaf.sum()),
                key,
                leaf,
            },
            None,
        )),
        (Sub::Empty, Sub::Compacted { hash, key, leaf }) => Ok((
            Sub::Compacted {
                hash: branch_hash(&child_empty, &hash, leaf.sum()),
                key,
                leaf,
            },
            None,
        )),
        (l, r) => {
            let sum = sum::add(l.sum(), r.sum(), level)?;
            let left = l.hash(level + 1);
            let right = r.hash(level + 1);
            let hash = branch_hash(&left, &right, sum);
            Ok((
                Sub::Branch(crate::node::ComputedNode::new(hash, sum)),
                Some(Node::Branch { left, right, sum }),
            ))
        }
    }
}

/// Queues the row for a changed node at `level`. A compacted leaf pulled up
/// from a child drops that child's row (its position no longer exists).
fn queue_joined<R: NodeSource>(
    p: &mut Planner<'_, R>,
    level: usize,
    path: &Key,
    new: &Sub<'_>,
    node: Option<Node>,
    l: &Sub<'_>,
    r: &Sub<'_>,
) {
    match (new, node) {
        (_, Some(node)) => p.insert(level, path, new.hash(level), node),
        (Sub::Compacted { hash, key, leaf }, None) => {
            let child = if matches!(l, Sub::Compacted { .. }) {
                l
            } else {
                r
            };
            if let Sub::Compacted {
                hash: child_hash, ..
            } = child
            {
                p.delete(level + 1, key, *child_hash);
            }
            p.insert(
                level,
                key,
                *hash,
                Node::Compacted {
                    key: *key,
                    leaf: (*leaf).clone(),
                },
            );
        }
        _ => {}
    }
}

/// Builds the subtree at `level` holding the non-empty `items` from nothing:
/// reads nothing, queues every new row, hashes every new node once.
pub(crate) fn build<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    level: usize,
    items: &[Item<'a>],
) -> Result<Sub<'a>, PlanError> {
    let Some(items) = nonempty_span(items) else {
        return Ok(Sub::Empty);
    };
    let head = items[0];
    let Some(split_level) = head.key.first_difference(&items[items.len() - 1].key) else {
        let hash = compacted_hash(level, &head.key, head.leaf);
        p.insert(
            level,
            &head.key,
            hash,
            Node::Compacted {
                key: head.key,
                leaf: head.leaf.clone(),
            },
        );
        return Ok(Sub::Compacted {
            hash,
            key: head.key,
            leaf: head.leaf,
        });
    };
    let split = items.partition_point(|it| !it.key.bit(split_level));
    let l = build(p, split_level + 1, &items[..split])?;
    let r = build(p, split_level + 1, &items[split..])?;
    let sum = sum::add(l.sum(), r.sum(), split_level)?;
    let (mut left, mut right) = (l.hash(split_level + 1), r.hash(split_level + 1));
    let mut hash = branch_hash(&left, &right, sum);
    p.insert(
        split_level,
        &head.key,
        hash,
        Node::Branch { left, right, sum },
    );
    // One-child branches up to `level`: the subtree still holds two or more
    // leaves, so it stays a branch at every level (the shape Go's merge makes).
    for lvl in (level..split_level).rev() {
        let empty = empty_hash(lvl + 1);
        (left, right) = if head.key.bit(lvl) {
            (empty, hash)
        } else {
            (hash, empty)
        };
        hash = branch_hash(&left, &right, sum);
        p.insert(lvl, &head.key, hash, Node::Branch { left, right, sum });
    }
    Ok(Sub::Branch(crate::node::ComputedNode::new(hash, sum)))
}
