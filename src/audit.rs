//! Integrity audits: walk a namespace from its stored root, recompute every
//! hash and sum, check the layout's canonical shape, and report what is
//! wrong as typed [`Problem`]s.
//!
//! ```text
//!   Tree::audit ── store.scan_rows (SQL: every row in key order, then
//!        │          each pin's rows at its version, one snapshot) or
//!        │          store.scan_nodes (memory: every node)
//!        ▼
//!   RowAudit / audit_nodes ── pure: decode, recompute, compare each
//!                              child with what its parent recorded, count
//!                              the positions that reach each stored thing
//! ```
//!
//! An audit reads; it never repairs. A clean report means the stored root
//! is exactly what the stored nodes compute to, every stored node is
//! reached from it, and the shape is the one the layout writes; and the
//! same of every pinned root and the nodes a read at its version sees.
#![deny(clippy::arithmetic_side_effects)]

use std::collections::HashMap;

use crate::empty::empty_hash;
use crate::hash::{Hash, branch_hash};
use crate::key::{Key, MAX_LEVEL};
use crate::node::{ComputedNode, Node, compacted_hash};
use crate::position::Position;
use crate::store::Pin;
use crate::store::strata::{RowKey, StrataError};
use crate::tree::LayoutKind;

/// Reports keep at most this many problems; the rest are only counted.
pub const MAX_REPORTED_PROBLEMS: usize = 10_000;

/// Where a problem sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A whole stored row (SQL stores).
    Row(RowKey),
    /// One tree position (a slot of a row, or a node reached by a walk).
    Position(Position),
    /// A stored node by hash, not reached from the root (memory store).
    Node(Hash),
    /// The namespace's root record.
    Root,
}

/// One thing an audit found wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The stored root is not what the stored nodes compute to.
    #[error("stored root {stored:?} but the stored nodes compute {computed:?}")]
    RootMismatch {
        /// The root record.
        stored: ComputedNode,
        /// What the nodes under it compute to.
        computed: ComputedNode,
    },
    /// A stored row does not decode.
    #[error("{at:?} does not decode: {error}")]
    Malformed {
        /// The row.
        at: Location,
        /// Why.
        error: StrataError,
    },
    /// A node the tree refers to is not stored.
    #[error("{at:?} is referenced as {expected:?} but not stored")]
    Missing {
        /// Where it should be.
        at: Location,
        /// What its parent recorded.
        expected: ComputedNode,
    },
    /// A parent records a (hash, sum) for a child that the child's own
    /// contents do not compute to.
    #[error("{at:?}: parent records {recorded:?}, contents compute {computed:?}")]
    ChildMismatch {
        /// The child.
        at: Location,
        /// What the parent recorded.
        recorded: ComputedNode,
        /// What the child computes to.
        computed: ComputedNode,
    },
    /// A leaf or compacted leaf whose stored hash is not the hash of its
    /// key, value and sum at its position.
    #[error("{at:?}: stored leaf hash {stored} but its contents hash to {computed}")]
    LeafHash {
        /// The leaf's position.
        at: Location,
        /// The stored hash.
        stored: Hash,
        /// The hash of its contents.
        computed: Hash,
    },
    /// A branch whose children's sums add up to more than `u64::MAX`.
    #[error("{at:?}: children's sums overflow u64")]
    SumOverflow {
        /// The branch.
        at: Location,
    },
    /// A branch whose recorded sum is not its children's sum.
    #[error("{at:?}: branch records sum {stored}, its children add up to {children}")]
    SumMismatch {
        /// The branch.
        at: Location,
        /// The recorded sum.
        stored: u64,
        /// The children's sums added.
        children: u64,
    },
    /// A node the layout never writes there.
    #[error("{at:?} is not canonical: {what}")]
    NonCanonical {
        /// Where.
        at: Location,
        /// What is wrong.
        what: &'static str,
    },
    /// A compacted leaf whose key does not lie under its position.
    #[error("{at:?} holds key {key:?}, which is not under it")]
    MisplacedKey {
        /// The compacted leaf's position.
        at: Location,
        /// The stored key.
        key: Key,
    },
    /// Stored, but no position of the tree reaches it.
    #[error("{at:?} is stored but no position reaches it")]
    Unreachable {
        /// The orphan.
        at: Location,
    },
    /// A stored node's reference count differs from the number of
    /// positions using it (stores that share nodes between positions).
    #[error("node {hash} stores {stored} references, {positions} positions use it")]
    RefCount {
        /// The node.
        hash: Hash,
        /// The stored count.
        stored: u64,
        /// Positions found.
        positions: u64,
    },
}

/// What an audit saw and what it found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditReport {
    /// The namespace's stored root.
    pub stored_root: ComputedNode,
    /// Rows (SQL stores) or distinct nodes (memory store) scanned.
    pub stored_items: u64,
    /// Tree nodes checked (every position holding a node).
    pub nodes: u64,
    /// Leaves and compacted leaves found (hash-keyed stores: in the current
    /// and every pinned tree, which their one walk covers).
    pub leaves: u64,
    /// The problems, in the order found (at most [`MAX_REPORTED_PROBLEMS`]).
    pub problems: Vec<Problem>,
    /// Problems found beyond [`MAX_REPORTED_PROBLEMS`].
    pub more_problems: u64,
    /// One audit per pin of the namespace, oldest version first, from
    /// stores that keep a pinned tree's rows apart from the current ones
    /// (SQL strata: the rows a pin reads in `ms_smt_history`). Hash-keyed
    /// stores share nodes between the current and pinned trees, so they
    /// check every pinned root in the one walk above and leave this empty.
    pub pinned: Vec<PinAudit>,
}

/// The audit of the tree one pin holds (see [`AuditReport::pinned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinAudit {
    /// The pin: its name, version and the root its rows must compute to.
    pub pin: Pin,
    /// What the rows read at the pin's version hold and what is wrong with
    /// them; `stored_root` is the pin's root.
    pub report: AuditReport,
}

impl AuditReport {
    /// An empty report for a namespace whose root record is `stored_root`.
    pub(crate) fn new(stored_root: ComputedNode) -> Self {
        AuditReport {
            stored_root,
            stored_items: 0,
            nodes: 0,
            leaves: 0,
            problems: Vec::new(),
            more_problems: 0,
            pinned: Vec::new(),
        }
    }

    /// True when nothing is wrong, in the current tree or any pinned one.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
            && self.more_problems == 0
            && self.pinned.iter().all(|p| p.report.is_clean())
    }

    /// Records a problem.
    pub(crate) fn found(&mut self, problem: Problem) {
        if self.problems.len() < MAX_REPORTED_PROBLEMS {
            self.problems.push(problem);
        } else {
            self.more_problems = self.more_problems.saturating_add(1);
        }
    }
}

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
    while let Some((pos, expected, lone)) = stack.pop() {
        let at = Location::Position(pos);
        let Some(&(node, _)) = nodes.get(&expected.hash) else {
            report.found(Problem::Missing { at, expected });
            continue;
        };
        let n = uses.entry(expected.hash).or_insert(0);
        *n = n.saturating_add(1);
        report.nodes = report.nodes.saturating_add(1);
        if !matches!(node, Node::Branch { .. }) {
            report.leaves = report.leaves.saturating_add(1);
        }
        let computed = check_node(layout, pos, node, lone, &mut report);
        if let Some(c) = computed
            && c != expected
        {
            report.found(mismatch(pos, expected, c));
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
    report
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
/// kind against the layout) and returns what it computes to, or `None`
/// when that cannot be computed. `lone` says its sibling is empty.
///
/// A branch's children are referenced by hash only, so their sums come
/// from the nodes the references name (a missing child is reported when
/// the walk reaches it).
fn check_node(
    layout: LayoutKind,
    pos: Position,
    node: &Node,
    lone: bool,
    report: &mut AuditReport,
) -> Option<ComputedNode> {
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
            Some(ComputedNode::new(branch_hash(left, right, *sum), *sum))
        }
        Node::Leaf(leaf) => {
            if layout == LayoutKind::Compacted || level != MAX_LEVEL {
                report.found(Problem::NonCanonical {
                    at: at.clone(),
                    what: "a plain leaf where the layout keeps none",
                });
            }
            Some(ComputedNode::new(leaf.hash(), leaf.sum()))
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
            let key = key.under_path(pos.path(), level);
            Some(ComputedNode::new(
                compacted_hash(level, &key, leaf),
                leaf.sum(),
            ))
        }
    }
}
