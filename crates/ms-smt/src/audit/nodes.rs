//! The audit of a hash-keyed store (memory): every node with its
//! reference count, walked from the root and from every pinned root.
#![deny(clippy::arithmetic_side_effects)]

use std::collections::HashMap;

use crate::audit::report::{AuditReport, Location, Problem};
use crate::empty::empty_hash;
use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::layout::LayoutKind;
use crate::leaf::Leaf;
use crate::lift::{LIFT_BATCH, Lift, lift_tagged};
use crate::node::{ComputedNode, Node};
use crate::position::Position;
use crate::progress::{ProgressOperation, ProgressSink};

/// What a hash-keyed store holds for one namespace: its root record and
/// every node with its reference count.
#[derive(Debug, Clone)]
pub struct NodeScan {
    /// The stored root.
    pub root: ComputedNode,
    /// Every stored node: hash it is filed under, node, reference count.
    pub nodes: Vec<(Hash, Node, u64)>,
    /// The roots of the namespace's pins: their positions hold references
    /// too, and their trees are checked like the current one.
    pub pinned: Vec<ComputedNode>,
}

/// Audits a hash-keyed tree: walks every position from the root (and from
/// every pinned root), checks that each node is filed under its own hash,
/// that sums add up, that the shape is `layout`'s, that each node's
/// reference count is the number of positions using it, and that every
/// node is reached.
pub fn audit_nodes(layout: LayoutKind, scan: &NodeScan) -> AuditReport {
    audit_nodes_with(layout, scan, &ProgressSink::default())
}

/// [`audit_nodes`], reporting the stored nodes checked to `progress`
/// (each reached node when first reached; the unreached ones at the end).
pub(crate) fn audit_nodes_with(
    layout: LayoutKind,
    scan: &NodeScan,
    progress: &ProgressSink,
) -> AuditReport {
    let mut meter = progress.meter(ProgressOperation::Audit, Some(scan.nodes.len() as u64));
    let mut report = AuditReport::new(scan.root);
    report.stored_items = scan.nodes.len() as u64;
    let nodes: HashMap<Hash, (&Node, u64)> =
        scan.nodes.iter().map(|(h, n, r)| (*h, (n, *r))).collect();
    let mut uses: HashMap<Hash, u64> = HashMap::new();
    // Depth-first over the positions of the current tree and of every
    // pinned one; each tree is at most 257 levels deep.
    let mut stack: Vec<(Position, ComputedNode, bool)> = std::iter::once(scan.root)
        .chain(scan.pinned.iter().copied())
        .filter(|root| *root != ComputedNode::empty_root())
        .map(|root| (Position::ROOT, root, false))
        .collect();
    let mut pending = Vec::new();
    while let Some((pos, expected, lone)) = stack.pop() {
        let at = Location::Position(pos);
        let Some(&(node, _)) = nodes.get(&expected.hash) else {
            report.found(Problem::Missing { at, expected });
            continue;
        };
        let n = uses.entry(expected.hash).or_insert(0);
        if *n == 0 {
            meter.add(1);
        }
        *n = n.saturating_add(1);
        report.nodes = report.nodes.saturating_add(1);
        if !matches!(node, Node::Branch { .. }) {
            report.leaves = report.leaves.saturating_add(1);
        }
        match check_node(layout, pos, node, lone, &mut report) {
            Some(Computed::Now(c)) if c != expected => report.found(mismatch(pos, expected, c)),
            Some(Computed::Lifted(key, leaf)) => {
                let lift = Lift::new(leaf.hash(), leaf.sum(), key, MAX_LEVEL, pos.level());
                pending.push(((pos, expected), lift));
                if pending.len() >= LIFT_BATCH {
                    check_lifted(&mut pending, &mut report);
                }
            }
            _ => {}
        }
        if let Node::Branch { left, right, .. } = node
            && pos.level() < MAX_LEVEL
        {
            let child_level = pos.level().saturating_add(1);
            let empty = empty_hash(child_level);
            let l_sum = nodes.get(left).map_or(0, |(n, _)| n.sum());
            let r_sum = nodes.get(right).map_or(0, |(n, _)| n.sum());
            match l_sum.checked_add(r_sum) {
                None => report.found(Problem::SumOverflow { at: at.clone() }),
                Some(children) if children != node.sum() => report.found(Problem::SumMismatch {
                    at: at.clone(),
                    stored: node.sum(),
                    children,
                }),
                Some(_) => {}
            }
            for (hash, sum, right_side, other) in
                [(*right, r_sum, true, *left), (*left, l_sum, false, *right)]
            {
                if hash != empty {
                    let child = ComputedNode::new(hash, sum);
                    stack.push((pos.child(right_side), child, other == empty));
                }
            }
        }
    }
    check_lifted(&mut pending, &mut report);
    for (hash, _, refs) in &scan.nodes {
        match uses.get(hash) {
            None => report.found(Problem::Unreachable {
                at: Location::Node(*hash),
            }),
            Some(&positions) if positions != *refs => report.found(Problem::RefCount {
                hash: *hash,
                stored: *refs,
                positions,
            }),
            Some(_) => {}
        }
    }
    meter.finish();
    report
}

/// What one node computes to: at once, or (a compacted leaf) after its
/// lift, which runs with others on the lanes.
enum Computed<'n> {
    Now(ComputedNode),
    /// The leaf and its key below the position.
    Lifted(Key, &'n Leaf),
}

/// Lifts the pending compacted leaves together and reports each that does
/// not compute to what its parent recorded.
fn check_lifted(pending: &mut Vec<((Position, ComputedNode), Lift)>, report: &mut AuditReport) {
    // An audit's scan runs at the default lanes.
    let lanes = crate::Tuning::default().hash_lanes();
    for ((pos, expected), lift) in lift_tagged(std::mem::take(pending), lanes) {
        let computed = ComputedNode::new(lift.hash, lift.sum());
        if computed != expected {
            report.found(mismatch(pos, expected, computed));
        }
    }
}

/// A walk found `computed` where its parent recorded `expected`: at the
/// root that is the root record, elsewhere the parent's child reference.
fn mismatch(pos: Position, expected: ComputedNode, computed: ComputedNode) -> Problem {
    if pos == Position::ROOT {
        Problem::RootMismatch {
            stored: expected,
            computed,
        }
    } else {
        Problem::ChildMismatch {
            at: Location::Position(pos),
            recorded: expected,
            computed,
        }
    }
}

/// Checks one node at `pos` on its own (its hash from its contents, its
/// kind against the layout) and returns what it computes to (a compacted
/// leaf: its lift), or `None` when that cannot be computed. `lone` says its
/// sibling is empty.
///
/// A branch's children are referenced by hash only, so their sums come
/// from the nodes the references name (a missing child is reported when
/// the walk reaches it).
fn check_node<'n>(
    layout: LayoutKind,
    pos: Position,
    node: &'n Node,
    lone: bool,
    report: &mut AuditReport,
) -> Option<Computed<'n>> {
    let at = Location::Position(pos);
    let level = pos.level();
    match node {
        Node::Branch { left, right, sum } => {
            let empty = empty_hash(level.saturating_add(1));
            if level >= MAX_LEVEL {
                report.found(Problem::NonCanonical {
                    at,
                    what: "a branch at the leaf level",
                });
                return None;
            }
            if *left == empty && *right == empty {
                report.found(Problem::NonCanonical {
                    at: at.clone(),
                    what: "a branch with two empty children",
                });
            }
            Some(Computed::Now(ComputedNode::new(
                branch_hash(left, right, *sum),
                *sum,
            )))
        }
        Node::Leaf(leaf) => {
            if layout == LayoutKind::Compacted || level != MAX_LEVEL {
                report.found(Problem::NonCanonical {
                    at: at.clone(),
                    what: "a plain leaf where the layout keeps none",
                });
            }
            Some(Computed::Now(ComputedNode::new(leaf.hash(), leaf.sum())))
        }
        Node::Compacted { key, leaf } => {
            if layout == LayoutKind::Full {
                report.found(Problem::NonCanonical {
                    at: at.clone(),
                    what: "a compacted leaf in a full tree",
                });
            } else if lone && level > 0 {
                report.found(Problem::NonCanonical {
                    at: at.clone(),
                    what: "a compacted leaf whose sibling is empty (it belongs higher up)",
                });
            }
            if leaf.is_empty() {
                report.found(Problem::NonCanonical {
                    at: at.clone(),
                    what: "an empty leaf is stored",
                });
            }
            // Memory rows may carry another position's high key bits
            // (`Node::Compacted`): the hash covers the bits below only.
            Some(Computed::Lifted(key.under_path(pos.path(), level), leaf))
        }
    }
}
