//! Nodes a SQL store's handles read or wrote recently, kept in process
//! memory, within one budget for every namespace of the store.
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
//!
//! **One budget per store.** A server holds a handle per namespace it
//! serves, a forest one per tree: with a memory per handle, a thousand
//! small trees each keep what their own commits wrote and the process grows
//! with the data. So the handles a store makes for its namespaces
//! ([`RecentNodes::for_namespace`]) share their parent's memory and its one
//! capacity; the nodes they hold compete for it, and the ones in use stay.
//! Entries are kept apart per namespace: the same hash names one node per
//! tree layout (a compacted leaf and the full tree's branch above the same
//! leaf hash alike), and namespaces may hold different layouts.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::hash::Hash;
use crate::node::Node;
use crate::position::Position;

/// Nodes remembered by default, for all the namespaces of a store
/// together: about 40 MB of branches, enough to hold every node of a
/// 120,000-leaf compacted tree, or the top levels of a larger or full one
/// beside the paths of many small trees.
pub const DEFAULT_RECENT_NODES: usize = 1 << 18;

/// Which namespace an entry belongs to: a number per name, given by the
/// memory on first use (0: a handle made with [`RecentNodes::new`]).
type Domain = u64;

type Map = HashMap<(Domain, Hash), Node, foldhash::fast::RandomState>;

/// A bounded memory of nodes by hash, shared by the handles of one store;
/// see the module docs.
#[derive(Debug)]
pub struct RecentNodes {
    memory: Arc<Memory>,
    domain: Domain,
    hits: AtomicU64,
}

/// What the handles of one store share: the nodes and their one capacity.
#[derive(Debug)]
struct Memory {
    capacity: usize,
    generations: Mutex<Generations>,
    /// The domain of each namespace name seen, so that every handle of one
    /// namespace finds the nodes the others remembered.
    domains: Mutex<BTreeMap<Box<str>, Domain>>,
}

#[derive(Debug, Default)]
struct Generations {
    current: Map,
    previous: Map,
}

impl Generations {
    fn insert(&mut self, key: (Domain, Hash), node: Node, half: usize) {
        if self.current.len() >= half {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, node);
    }
}

impl RecentNodes {
    /// A memory of its own for up to `capacity` nodes; 0 remembers
    /// nothing.
    pub fn new(capacity: usize) -> Self {
        RecentNodes {
            memory: Arc::new(Memory {
                capacity,
                generations: Mutex::default(),
                domains: Mutex::default(),
            }),
            domain: 0,
            hits: AtomicU64::new(0),
        }
    }

    /// A handle on this same memory and capacity for namespace `name`:
    /// what it remembers counts against the one budget, and every handle
    /// for `name` finds what the others remembered. Its hits are its own.
    pub fn for_namespace(&self, name: &str) -> Self {
        let domain = {
            let mut domains = self
                .memory
                .domains
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Domain 0 is the unnamed one; names count from 1. A u64 does
            // not run out in the life of a process.
            let next = Domain::try_from(domains.len())
                .unwrap_or(Domain::MAX)
                .saturating_add(1);
            *domains.entry(Box::from(name)).or_insert(next)
        };
        RecentNodes {
            memory: self.memory.clone(),
            domain,
            hits: AtomicU64::new(0),
        }
    }

    /// True when `self` and `other` share one memory.
    pub fn shares_memory_with(&self, other: &RecentNodes) -> bool {
        Arc::ptr_eq(&self.memory, &other.memory)
    }

    /// The most nodes held at once, by all the handles of this memory
    /// together.
    pub fn capacity(&self) -> usize {
        self.memory.capacity
    }

    /// Nodes held now, by all the handles of this memory together.
    pub fn len(&self) -> usize {
        let g = self.lock();
        g.current.len() + g.previous.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lookups this handle answered from memory so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Forgets every node, of every handle of this memory.
    pub fn clear(&self) {
        let mut g = self.lock();
        g.current.clear();
        g.previous.clear();
    }

    /// The node under `hash`, if remembered.
    pub fn get(&self, hash: &Hash) -> Option<Node> {
        if self.memory.capacity == 0 {
            return None;
        }
        let key = (self.domain, *hash);
        let mut g = self.lock();
        let found = match g.current.get(&key) {
            Some(node) => Some(node.clone()),
            None => {
                let node = g.previous.remove(&key)?;
                g.insert(key, node.clone(), self.half());
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
        if self.memory.capacity == 0 {
            return;
        }
        let half = self.half();
        let mut g = self.lock();
        for (hash, node) in nodes.take(half) {
            let key = (self.domain, *hash);
            if !g.current.contains_key(&key) {
                g.insert(key, node.clone(), half);
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
        (self.memory.capacity / 2).max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // A panic while holding the lock cannot leave a wrong node behind
        // (maps only gain or lose whole entries), so a poisoned lock is
        // still safe to use.
        self.memory
            .generations
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

    #[test]
    fn namespaces_share_one_budget() {
        let store = RecentNodes::new(8);
        let spaces: Vec<_> = (0..10)
            .map(|i| store.for_namespace(&format!("u-{i}")))
            .collect();
        for (i, space) in spaces.iter().enumerate() {
            let nodes: Vec<_> = (0..3)
                .map(|j| node(u8::try_from(i * 3 + j).unwrap()))
                .collect();
            space.remember(nodes.iter().map(|(h, n)| (h, n)));
            assert!(store.len() <= 8, "{} nodes held in all", store.len());
            assert!(space.shares_memory_with(&store));
        }
        assert_eq!(spaces[9].len(), store.len(), "len is the memory's");
        assert!(spaces[9].get(&node(27).0).is_some(), "the newest stay");
        assert!(spaces[0].get(&node(0).0).is_none(), "the oldest aged out");
    }

    #[test]
    fn a_namespace_never_answers_for_another() {
        let store = RecentNodes::new(16);
        let a = store.for_namespace("a");
        let a_again = store.for_namespace("a");
        let b = store.for_namespace("b");
        let (h, n) = node(7);
        a.remember(std::iter::once((&h, &n)));
        assert_eq!(a_again.get(&h), Some(n), "one name, one set of entries");
        assert_eq!(b.get(&h), None, "another name may hold another layout");
        assert_eq!(store.get(&h), None, "nor does the unnamed handle");
        assert_eq!((a.hits(), a_again.hits(), b.hits()), (0, 1, 0));
        assert!(!RecentNodes::new(16).shares_memory_with(&store));
    }
}
