//! Errors of the pure layer: sums that overflow u64, and what a walk over
//! a [`NodeSource`](crate::NodeSource) can find wrong.

use crate::hash::Hash;

/// A u64 sum overflowed while building the node at `level`.
///
/// Sums are checked at every branch, so a write is rejected exactly when the
/// tree's final total would exceed `u64::MAX` (spec §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sum of the node at level {level} exceeds u64::MAX: integer overflow")]
pub struct SumOverflow {
    /// Level of the node whose sum overflowed (0 = root).
    pub level: usize,
}

/// Why the pure descent could not plan an update or answer a read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The resulting tree's total sum would exceed `u64::MAX`.
    #[error(transparent)]
    Overflow(#[from] SumOverflow),
    /// The batch's own leaf sums add up to more than `u64::MAX`; rejected before any read.
    #[error("batch leaf sums exceed u64::MAX: integer overflow")]
    BatchSumOverflow,
    /// A node the tree references is not in the store (or was not fetched).
    #[error("node {hash} at level {level} is missing from the store")]
    MissingNode {
        /// The missing node's hash.
        hash: Hash,
        /// Where the walk expected it.
        level: usize,
    },
    /// A stored node has a kind that cannot sit where the walk found it
    /// (for example a plain leaf above level 256, or a compacted leaf in a full tree).
    #[error("node {hash} at level {level} is a {found}, which cannot appear there")]
    UnexpectedNode {
        /// The node's hash.
        hash: Hash,
        /// Where the walk found it.
        level: usize,
        /// What kind of node it is.
        found: &'static str,
    },
    /// The new root's sum disagrees with old sum - replaced sums + batch sums:
    /// the store returned inconsistent nodes.
    #[error(
        "root sum {computed} disagrees with the expected total {expected}: store is inconsistent"
    )]
    SumMismatch {
        /// Old total, minus the replaced leaves, plus the batch.
        expected: u128,
        /// The sum the rebuilt root carries.
        computed: u64,
    },
}
