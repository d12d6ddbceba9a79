//! What proof construction and ms-smt's pure descent read: [`NodeSource`],
//! nodes by hash.

use alloc::collections::BTreeMap;

use crate::empty::is_empty_hash;
use crate::error::PlanError;
use crate::hash::Hash;
use crate::node::Node;

/// Synchronous read access to nodes by hash: what the pure descent walks
/// (from two threads at once when a large batch is split).
pub trait NodeSource: Sync {
    /// The node stored under `hash`, if known.
    fn node(&self, hash: &Hash) -> Option<&Node>;
}

/// A map of nodes by hash is a source (for code without `std`'s hash maps).
impl NodeSource for BTreeMap<Hash, Node> {
    fn node(&self, hash: &Hash) -> Option<&Node> {
        self.get(hash)
    }
}

/// The sum of `sibling` at `level`, whose parent has sum `parent_sum` and
/// whose other child is `child`: read from the node when the read phase
/// brought it, otherwise the parent's sum minus the child's (reads without
/// siblings bring only the path).
pub fn sibling_sum<R: NodeSource>(
    source: &R,
    level: usize,
    sibling: &Hash,
    parent_sum: u64,
    child: &Hash,
) -> Result<u64, PlanError> {
    if is_empty_hash(level, sibling) {
        return Ok(0);
    }
    if let Some(node) = source.node(sibling) {
        return Ok(node.sum());
    }
    let missing = PlanError::MissingNode {
        hash: *sibling,
        level,
    };
    let child_sum = if is_empty_hash(level, child) {
        0
    } else {
        source.node(child).ok_or(missing.clone())?.sum()
    };
    parent_sum.checked_sub(child_sum).ok_or(missing)
}
