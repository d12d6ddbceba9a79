//! What an audit reports: typed [`Problem`]s at a [`Location`], per tree
//! and per pin.
#![deny(clippy::arithmetic_side_effects)]

use crate::hash::Hash;
use crate::key::Key;
use crate::node::ComputedNode;
use crate::pin::Pin;
use crate::position::Position;

/// Reports keep at most this many problems; the rest are only counted.
pub const MAX_REPORTED_PROBLEMS: usize = 10_000;

/// Where a problem sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A whole stored row (SQL stores): its depth and the bytes of its
    /// path (the first `depth` key bits).
    Row {
        /// The row's depth.
        depth: usize,
        /// Its path bytes.
        path: Vec<u8>,
    },
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
    #[error("{at:?} does not decode: {what}")]
    Malformed {
        /// The row.
        at: Location,
        /// Why.
        what: &'static str,
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
    /// An empty report for a namespace whose root record is `stored_root`
    /// (what a store's own audit of its layout fills in).
    pub fn new(stored_root: ComputedNode) -> Self {
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

    /// Records a problem (past [`MAX_REPORTED_PROBLEMS`], only counts it).
    pub fn found(&mut self, problem: Problem) {
        if self.problems.len() < MAX_REPORTED_PROBLEMS {
            self.problems.push(problem);
        } else {
            self.more_problems = self.more_problems.saturating_add(1);
        }
    }
}
