//! The compacted layout's batched descent (spec §2.3, §3.5).
//!
//! A subtree holding exactly one leaf is stored as one compacted leaf; one
//! holding two or more is a branch; an empty one is not stored. Unlike the Go
//! reference, the descent keeps that shape after deletes too (a branch left
//! with one compacted child and one empty child is pulled up into a compacted
//! leaf), so a node's stored form is a function of its hash and rows can be
//! shared safely between positions. Hashes are identical either way (spec B7).

use crate::NodeSource;
use crate::empty::{empty_hash, is_empty_hash};
use crate::error::PlanError;
use crate::fate::{Fate, fate};
use crate::fork::fork_here;
use crate::hash::{Hash, branch_hash};
use crate::items::{Item, nonempty_range, nonempty_span};
use crate::key::Key;
use crate::lift::{Lift, lift_tagged};
use crate::node::Node;
use crate::planner::{Planner, Sub};
use crate::prelift::{leaf_lift, lift_targets};
use crate::sum;

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
            match fate(items, key, leaf) {
                Fate::Kept { replaced } => {
                    // A batch key that rewrites the same leaf still
                    // replaces it: its sum counts as replaced.
                    if replaced {
                        p.replaced(leaf.sum());
                    }
                    Ok(unchanged)
                }
                Fate::Replaced => {
                    p.replaced(leaf.sum());
                    p.delete(level, &key, hash);
                    build(p, level, items)
                }
                Fate::Joined(merged) => {
                    p.delete(level, &key, hash);
                    build(p, level, &merged)
                }
            }
        }
        Node::Branch { left, right, sum } => {
            let path = items[0].key;
            let (l, r) = p.update_children(
                level,
                items,
                (*left, *right, *sum),
                |bit| path.with_bit(level, bit),
                update,
            )?;
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
        // A lone child that may have to be pulled up must have been read.
        (Sub::Beside(c), Sub::Empty) | (Sub::Empty, Sub::Beside(c)) => {
            Err(PlanError::MissingNode {
                hash: c.hash,
                level: level + 1,
            })
        }
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
/// reads nothing, queues every new row, hashes every new node once. A batch
/// large enough is split across two threads at its first branch; each part
/// lifts its compacted leaves in lockstep ([`lift_all`]) before it joins
/// them.
pub(crate) fn build<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    level: usize,
    items: &[Item<'a>],
) -> Result<Sub<'a>, PlanError> {
    let Some(items) = nonempty_span(items) else {
        return Ok(Sub::Empty);
    };
    let head = items[0];
    if let Some(split_level) = head.key.first_difference(&items[items.len() - 1].key)
        && fork_here(items.len(), p.forked, p.tuning)
    {
        let split = items.partition_point(|it| !it.key.bit(split_level));
        let (l, r) = p.fork(
            |lp| build(lp, split_level + 1, &items[..split]),
            |rp| build(rp, split_level + 1, &items[split..]),
        );
        return branch_up(p, level, split_level, &head.key, l?, r?);
    }
    let lifted = lift_leaves(p, level, items);
    build_lifted(p, level, items, &lifted)
}

/// The stored hash of every non-empty item's compacted leaf in the subtree
/// at `level` that `items` build, aligned with `items` (empty items get the
/// default hash, which nothing reads): from the planner's memo when the
/// update lifted them beforehand, else lifted here in lockstep.
fn lift_leaves<R: NodeSource>(p: &Planner<'_, R>, level: usize, items: &[Item<'_>]) -> Vec<Hash> {
    let mut hashes = vec![Hash::default(); items.len()];
    let mut pending: Vec<(usize, Lift)> = Vec::new();
    for (i, to) in lift_targets(level, items) {
        match p.lifted.get(&(items[i].key, to)) {
            Some(hash) => hashes[i] = *hash,
            None => pending.push((i, leaf_lift(&items[i], to))),
        }
    }
    for (i, lift) in lift_tagged(pending, p.tuning.hash_lanes()) {
        hashes[i] = lift.hash;
    }
    hashes
}

/// [`build`] on one thread with every compacted leaf's hash known
/// (`lifted`, aligned with `items`).
fn build_lifted<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    level: usize,
    items: &[Item<'a>],
    lifted: &[Hash],
) -> Result<Sub<'a>, PlanError> {
    let Some(span) = nonempty_range(items) else {
        return Ok(Sub::Empty);
    };
    let (items, lifted) = (&items[span.clone()], &lifted[span]);
    let head = items[0];
    let Some(split_level) = head.key.first_difference(&items[items.len() - 1].key) else {
        let hash = lifted[0];
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
    let l = build_lifted(p, split_level + 1, &items[..split], &lifted[..split])?;
    let r = build_lifted(p, split_level + 1, &items[split..], &lifted[split..])?;
    branch_up(p, level, split_level, &head.key, l, r)
}

/// Joins `l` and `r` into a branch at `split_level` and carries it up to
/// `level` through one-child branches, queuing every row: the subtree still
/// holds two or more leaves, so it stays a branch at every level (the shape
/// Go's merge makes).
fn branch_up<'a, R: NodeSource>(
    p: &mut Planner<'a, R>,
    level: usize,
    split_level: usize,
    path: &Key,
    l: Sub<'a>,
    r: Sub<'a>,
) -> Result<Sub<'a>, PlanError> {
    let sum = sum::add(l.sum(), r.sum(), split_level)?;
    let (mut left, mut right) = (l.hash(split_level + 1), r.hash(split_level + 1));
    let mut hash = branch_hash(&left, &right, sum);
    p.insert(split_level, path, hash, Node::Branch { left, right, sum });
    for lvl in (level..split_level).rev() {
        let empty = empty_hash(lvl + 1);
        (left, right) = if path.bit(lvl) {
            (empty, hash)
        } else {
            (hash, empty)
        };
        hash = branch_hash(&left, &right, sum);
        p.insert(lvl, path, hash, Node::Branch { left, right, sum });
    }
    Ok(Sub::Branch(crate::node::ComputedNode::new(hash, sum)))
}

#[cfg(test)]
mod tests {
    use crate::error::PlanError;
    use crate::hash::sha256;
    use crate::key::Key;
    use crate::layout::LayoutKind;
    use crate::leaf::Leaf;
    use crate::node::{ComputedNode, Node};
    use crate::{NodeCache, Tuning, plan_insert_many};

    /// Two keys under the root, one on each side: `a` starts with bit 0
    /// clear, `b` with it set.
    fn two_keys() -> (Key, Key) {
        let mut a = Key(sha256(b"a").0);
        let mut b = Key(sha256(b"b").0);
        a = a.with_bit(0, false);
        b = b.with_bit(0, true);
        (a, b)
    }

    /// The nodes of the tree holding `a` and `b`, and its root.
    fn tree(a: Key, b: Key) -> (Vec<(crate::hash::Hash, Node)>, ComputedNode) {
        let batch = vec![
            (a, Leaf::new(b"a".to_vec(), 5)),
            (b, Leaf::new(b"b".to_vec(), 7)),
        ];
        let empty = NodeCache::new();
        let update = plan_insert_many(
            LayoutKind::Compacted,
            &empty,
            ComputedNode::empty_root(),
            &batch,
            Tuning::default(),
        )
        .expect("build");
        let nodes = update.inserts.into_iter().map(|(_, h, n)| (h, n)).collect();
        (nodes, update.new_root)
    }

    /// Reads without siblings: an untouched sibling is known by hash and
    /// the sum its parent leaves, which is enough to insert beside it, and
    /// never enough to pull it up; a delete that would have to is refused
    /// (the read phase brings siblings for deletes), never planned into a
    /// non-canonical branch.
    #[test]
    fn an_unread_sibling_hashes_but_never_moves() {
        let (a, b) = two_keys();
        let (nodes, root) = tree(a, b);
        let full: NodeCache = {
            let mut c = NodeCache::new();
            c.extend(nodes.clone());
            c
        };
        // The path of `a` alone: the root and `a`'s compacted leaf.
        let path_of_a: NodeCache = {
            let mut c = NodeCache::new();
            c.extend(nodes.into_iter().filter(|(_, n)| match n {
                Node::Compacted { key, .. } => *key == a,
                _ => true,
            }));
            c
        };
        assert!(path_of_a.len() < full.len());

        let replace = vec![(a, Leaf::new(b"a2".to_vec(), 9))];
        let with = plan_insert_many(
            LayoutKind::Compacted,
            &full,
            root,
            &replace,
            Tuning::default(),
        )
        .expect("plan");
        let without = plan_insert_many(
            LayoutKind::Compacted,
            &path_of_a,
            root,
            &replace,
            Tuning::default(),
        )
        .expect("plan");
        assert_eq!(with.new_root, without.new_root);
        assert_eq!(without.new_root.sum, 16);

        let delete = vec![(a, Leaf::empty())];
        let pulled = plan_insert_many(
            LayoutKind::Compacted,
            &full,
            root,
            &delete,
            Tuning::default(),
        )
        .expect("plan");
        assert_eq!(pulled.new_root.sum, 7);
        assert!(matches!(
            plan_insert_many(
                LayoutKind::Compacted,
                &path_of_a,
                root,
                &delete,
                Tuning::default()
            ),
            Err(PlanError::MissingNode { level: 1, .. })
        ));
    }
}
