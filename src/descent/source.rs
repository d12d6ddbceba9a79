//! What the pure descent reads: [`NodeSource`] (nodes by hash) and the
//! [`NodeCache`] one read phase fills.

use std::collections::HashMap;

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

/// Nodes keyed by hash, filled level by level before the descent runs.
#[derive(Debug, Default, Clone)]
pub struct NodeCache {
    nodes: HashMap<Hash, Node, foldhash::fast::RandomState>,
}

impl NodeCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds fetched nodes.
    pub fn extend(&mut self, nodes: impl IntoIterator<Item = (Hash, Node)>) {
        self.nodes.extend(nodes);
    }

    /// Adds one node.
    pub fn insert(&mut self, hash: Hash, node: Node) {
        self.nodes.insert(hash, node);
    }

    /// Removes and returns the node under `hash` (walks that visit each
    /// node once keep their memory bounded this way).
    pub fn take(&mut self, hash: &Hash) -> Option<Node> {
        self.nodes.remove(hash)
    }

    /// True when `hash` was fetched.
    pub fn contains(&self, hash: &Hash) -> bool {
        self.nodes.contains_key(hash)
    }

    /// Number of cached nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

impl NodeSource for NodeCache {
    fn node(&self, hash: &Hash) -> Option<&Node> {
        self.nodes.get(hash)
    }
}

/// The sum of `sibling` at `level`, whose parent has sum `parent_sum` and
/// whose other child is `child`: read from the node when the read phase
/// brought it, otherwise the parent's sum minus the child's (reads without
/// siblings bring only the path).
pub(crate) fn sibling_sum<R: NodeSource>(
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
