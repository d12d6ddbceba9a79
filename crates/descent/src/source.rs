//! The [`NodeCache`] one read phase fills: what the pure descent reads
//! through [`NodeSource`] (ms-smt-core's).

use std::collections::HashMap;

use crate::hash::Hash;
use crate::node::Node;
pub use ms_smt_core::source::NodeSource;
pub use ms_smt_core::source::sibling_sum;

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
