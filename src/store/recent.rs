//! Nodes a SQL store handle read or wrote recently, kept in process memory.
//!
//! Nodes are content-addressed: the node behind a hash never changes, so a
//! remembered node stays right whatever other tasks or processes do to the
//! database. A descent only follows hashes reachable from the root it loaded
//! from the database, and a commit compares that root before writing, so a
//! remembered node can save a read but never make a read or a write wrong.
//! A node that another writer has since deleted is simply never reached
//! again, and ages out.
//!
//! ```text
//!  lookup ──► current ──hit──► node
//!               │ miss
//!               ▼
//!             previous ──hit──► node (moved back to current)
//!               │ miss
//!               ▼
//!          store query (and remembered)
//! ```
//!
//! Eviction is two generations: when `current` holds half the capacity it
//! becomes `previous` and the old `previous` is dropped. Nodes in use keep
//! moving back to `current`, so the top of a tree stays resident while
//! nodes nobody asks for fall out within two rotations. At most `capacity`
//! nodes are held.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::hash::Hash;
use crate::node::Node;
use crate::position::Position;

/// Nodes remembered by default: about 17 MB of branches, enough to hold
/// every node of a 60,000-leaf compacted tree, or the top levels of a
/// larger or full one.
pub const DEFAULT_RECENT_NODES: usize = 1 << 17;

type Map = HashMap<Hash, Node, foldhash::fast::RandomState>;

/// A bounded, shared memory of nodes by hash; see the module docs.
#[derive(Debug)]
pub struct RecentNodes {
    capacity: usize,
    generations: Mutex<Generations>,
    hits: AtomicU64,
}

#[derive(Debug, Default)]
struct Generations {
    current: Map,
    previous: Map,
}

impl Generations {
    fn insert(&mut self, hash: Hash, node: Node, half: usize) {
        if self.current.len() >= half {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(hash, node);
    }
}

impl RecentNodes {
    /// Remembers up to `capacity` nodes; 0 remembers nothing.
    pub fn new(capacity: usize) -> Self {
        RecentNodes {
            capacity,
            generations: Mutex::default(),
            hits: AtomicU64::new(0),
        }
    }

    /// The most nodes held at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Nodes held now.
    pub fn len(&self) -> usize {
        let g = self.lock();
        g.current.len() + g.previous.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lookups answered from memory so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Forgets every node.
    pub fn clear(&self) {
        let mut g = self.lock();
        g.current.clear();
        g.previous.clear();
    }

    /// The node under `hash`, if remembered.
    pub fn get(&self, hash: &Hash) -> Option<Node> {
        if self.capacity == 0 {
            return None;
        }
        let mut g = self.lock();
        let found = match g.current.get(hash) {
            Some(node) => Some(node.clone()),
            None => {
                let node = g.previous.remove(hash)?;
                g.insert(*hash, node.clone(), self.half());
                Some(node)
            }
        };
        self.hits.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Remembers nodes read from the store, at most half the capacity per
    /// call, taken from the front: pass the nodes nearest the root first
    /// (path walks return theirs level by level).
    pub fn remember<'a>(&self, nodes: impl Iterator<Item = (&'a Hash, &'a Node)>) {
        if self.capacity == 0 {
            return;
        }
        let half = self.half();
        let mut g = self.lock();
        for (hash, node) in nodes.take(half) {
            if !g.current.contains_key(hash) {
                g.insert(*hash, node.clone(), half);
            }
        }
    }

    /// Remembers the nodes a commit just wrote, when they fit in half the
    /// capacity. A larger batch (a big tree or a full-layout tree, whose
    /// every leaf brings 256 nodes) is skipped: its list is in post-order,
    /// so no prefix of it is the top of the tree, and it would only push
    /// out the nodes reads keep using.
    pub fn remember_written(&self, nodes: &[(Position, Hash, Node)]) {
        if nodes.len() <= self.half() {
            self.remember(nodes.iter().map(|(_, h, n)| (h, n)));
        }
    }

    fn half(&self) -> usize {
        (self.capacity / 2).max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // A panic while holding the lock cannot leave a wrong node behind
        // (maps only gain or lose whole entries), so a poisoned lock is
        // still safe to use.
        self.generations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Default for RecentNodes {
    fn default() -> Self {
        RecentNodes::new(DEFAULT_RECENT_NODES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf::Leaf;

    fn node(i: u8) -> (Hash, Node) {
        (Hash([i; 32]), Node::Leaf(Leaf::new(vec![i], u64::from(i))))
    }

    #[test]
    fn holds_at_most_its_capacity_and_keeps_what_is_used() {
        let recent = RecentNodes::new(8);
        let nodes: Vec<_> = (0..40).map(node).collect();
        let hot = node(200);
        recent.remember(std::iter::once((&hot.0, &hot.1)));
        for chunk in nodes.chunks(3) {
            recent.remember(chunk.iter().map(|(h, n)| (h, n)));
            assert!(recent.len() <= 8, "{} nodes held", recent.len());
            assert_eq!(recent.get(&hot.0), Some(hot.1.clone()), "used node kept");
        }
        assert_eq!(recent.get(&nodes[0].0), None, "unused node aged out");
        assert_eq!(recent.get(&nodes[39].0), Some(nodes[39].1.clone()));
    }

    #[test]
    fn zero_capacity_remembers_nothing() {
        let recent = RecentNodes::new(0);
        let (h, n) = node(1);
        recent.remember(std::iter::once((&h, &n)));
        assert!(recent.is_empty());
        assert_eq!(recent.get(&h), None);
        assert_eq!(recent.hits(), 0);
    }

    #[test]
    fn a_large_read_keeps_its_first_nodes() {
        let recent = RecentNodes::new(4);
        let nodes: Vec<_> = (0..10).map(node).collect();
        recent.remember(nodes.iter().map(|(h, n)| (h, n)));
        assert_eq!(recent.len(), 2);
        assert!(recent.get(&nodes[0].0).is_some());
        assert!(recent.get(&nodes[1].0).is_some());
        assert!(recent.get(&nodes[9].0).is_none());
    }

    #[test]
    fn a_write_larger_than_half_is_skipped() {
        let recent = RecentNodes::new(8);
        let nodes: Vec<_> = (0..5)
            .map(|i| {
                let (h, n) = node(i);
                (Position::ROOT, h, n)
            })
            .collect();
        recent.remember_written(&nodes);
        assert!(recent.is_empty());
        recent.remember_written(&nodes[..4]);
        assert_eq!(recent.len(), 4);
    }
}
